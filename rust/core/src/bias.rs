//! Shrinkage-bias statistics of a quantize-dequantize round trip
//! (../shared/docs/numerics.md section 6).
//!
//! For a tensor `x` and its round trip `q = q(x)`:
//! - relative signed bias `b = sum(sign(x) * (q - x)) / sum(|x|)` (negative = shrinkage),
//! - relative RMSE `||q - x|| / ||x||`, SQNR `10 log10(||x||^2 / ||q - x||^2)` dB,
//! - the norm ratio `||q|| / ||x||` and the gain `<q, x> / <x, x>` (the systematic part
//!   of `q` along `x`, which noise does not move),
//! - bucket utilisation: a histogram of the 16 nibble codes of a packed tensor.
//!
//! Everything is accumulated in f64 from `ErrorSums`, which merge, so the per-tensor
//! value is exactly the merge of the per-block ones. Depth helpers turn per-layer biases
//! into the product of `(1 + b_l)` and fit a per-layer geometric rate to norm ratios.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Below this many elements the serial loop beats rayon's fork/join overhead.
const PARALLEL_MIN: usize = 1 << 15;

/// Sums from which every statistic is derived; `merge` is exact (plain f64 addition).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ErrorSums {
    /// Number of elements.
    pub n: u64,
    /// sum |x|
    pub abs_x: f64,
    /// sum sign(x) * (q - x)   (sign(0) = 0)
    pub signed_err: f64,
    /// sum (q - x)^2
    pub sq_err: f64,
    /// sum x^2
    pub sq_x: f64,
    /// sum q^2
    pub sq_q: f64,
    /// sum q * x
    pub qx: f64,
}

impl ErrorSums {
    /// Sums of one slice pair (serial; callers split into blocks or chunks).
    fn of_slices(x: &[f32], q: &[f32]) -> ErrorSums {
        let mut s = ErrorSums {
            n: x.len() as u64,
            ..ErrorSums::default()
        };
        for (&xi, &qi) in x.iter().zip(q) {
            let (xi, qi) = (xi as f64, qi as f64);
            let err = qi - xi;
            s.abs_x += xi.abs();
            if xi > 0.0 {
                s.signed_err += err;
            } else if xi < 0.0 {
                s.signed_err -= err;
            }
            s.sq_err += err * err;
            s.sq_x += xi * xi;
            s.sq_q += qi * qi;
            s.qx += qi * xi;
        }
        s
    }

    pub fn merge(self, o: ErrorSums) -> ErrorSums {
        ErrorSums {
            n: self.n + o.n,
            abs_x: self.abs_x + o.abs_x,
            signed_err: self.signed_err + o.signed_err,
            sq_err: self.sq_err + o.sq_err,
            sq_x: self.sq_x + o.sq_x,
            sq_q: self.sq_q + o.sq_q,
            qx: self.qx + o.qx,
        }
    }

    /// Relative signed bias; 0 for an all-zero `x` (nothing to shrink).
    pub fn bias(&self) -> f64 {
        if self.abs_x == 0.0 {
            0.0
        } else {
            self.signed_err / self.abs_x
        }
    }

    /// ||q - x|| / ||x||; 0 when both are zero, +inf when only x is.
    pub fn rel_rmse(&self) -> f64 {
        ratio_sqrt(self.sq_err, self.sq_x)
    }

    /// 10 log10(||x||^2 / ||q - x||^2); +inf for an exact round trip.
    pub fn sqnr_db(&self) -> f64 {
        if self.sq_err == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (self.sq_x / self.sq_err).log10()
        }
    }

    /// ||q|| / ||x||.
    pub fn norm_ratio(&self) -> f64 {
        ratio_sqrt(self.sq_q, self.sq_x)
    }

    /// <q, x> / <x, x>: the least-squares scale of x inside q.
    pub fn gain(&self) -> f64 {
        if self.sq_x == 0.0 {
            if self.sq_q == 0.0 {
                1.0
            } else {
                f64::INFINITY
            }
        } else {
            self.qx / self.sq_x
        }
    }
}

fn ratio_sqrt(num: f64, den: f64) -> f64 {
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (num / den).sqrt()
    }
}

/// Same length, all finite: the precondition of every statistic here.
fn check_pair(x: &[f32], q: &[f32]) -> Result<()> {
    if x.len() != q.len() {
        return Err(Error::Shape(format!(
            "bias statistics need x and q(x) of the same size; got {} and {} elements",
            x.len(),
            q.len()
        )));
    }
    for data in [x, q] {
        let mut bad = data.iter().enumerate().filter(|(_, v)| !v.is_finite());
        if let Some((first_index, _)) = bad.next() {
            return Err(Error::NonFinite {
                count: 1 + bad.count(),
                first_index,
            });
        }
    }
    Ok(())
}

/// Per-tensor sums of `x` (flat) and its round trip `q` (same layout).
pub fn tensor_sums(x: &[f32], q: &[f32]) -> Result<ErrorSums> {
    check_pair(x, q)?;
    if x.len() < PARALLEL_MIN {
        return Ok(ErrorSums::of_slices(x, q));
    }
    Ok(x.par_chunks(PARALLEL_MIN)
        .zip(q.par_chunks(PARALLEL_MIN))
        .map(|(xc, qc)| ErrorSums::of_slices(xc, qc))
        .reduce(ErrorSums::default, ErrorSums::merge))
}

/// Sums of every contiguous block of `block` elements (flat row-major data whose rows
/// are a multiple of `block` long, i.e. blocks along the last axis).
pub fn block_sums(x: &[f32], q: &[f32], block: usize) -> Result<Vec<ErrorSums>> {
    check_pair(x, q)?;
    if block == 0 || x.len() % block != 0 {
        return Err(Error::Shape(format!(
            "{} elements do not split into blocks of {block}",
            x.len()
        )));
    }
    let blocks = x.chunks(block).zip(q.chunks(block));
    if x.len() < PARALLEL_MIN {
        return Ok(blocks
            .map(|(xb, qb)| ErrorSums::of_slices(xb, qb))
            .collect());
    }
    Ok(x.par_chunks(block)
        .zip(q.par_chunks(block))
        .map(|(xb, qb)| ErrorSums::of_slices(xb, qb))
        .collect())
}

/// Count of each 4-bit code (0..15) in the first `count` elements of a packed tensor
/// (element 2i in the low nibble of byte i, conventions.md). Bucket utilisation.
pub fn code_histogram(packed: &[u8], count: usize) -> Result<[u64; 16]> {
    if count > 2 * packed.len() {
        return Err(Error::Shape(format!(
            "{count} codes do not fit in {} packed bytes",
            packed.len()
        )));
    }
    let full = &packed[..count / 2];
    let count_bytes = |bytes: &[u8]| {
        let mut h = [0u64; 16];
        for &b in bytes {
            h[(b & 0x0F) as usize] += 1;
            h[(b >> 4) as usize] += 1;
        }
        h
    };
    let add = |mut a: [u64; 16], b: [u64; 16]| {
        for (ai, bi) in a.iter_mut().zip(b) {
            *ai += bi;
        }
        a
    };
    let mut hist = if full.len() < PARALLEL_MIN {
        count_bytes(full)
    } else {
        full.par_chunks(PARALLEL_MIN)
            .map(count_bytes)
            .reduce(|| [0u64; 16], add)
    };
    if count % 2 == 1 {
        hist[(packed[count / 2] & 0x0F) as usize] += 1;
    }
    Ok(hist)
}

/// Running product of `(1 + b_l)` over layers: entry l is the predicted norm factor after
/// l + 1 quantized layers if each layer's only effect were its measured shrinkage.
pub fn depth_product(biases: &[f64]) -> Vec<f64> {
    biases
        .iter()
        .scan(1.0, |acc, b| {
            *acc *= 1.0 + b;
            Some(*acc)
        })
        .collect()
}

/// Per-layer geometric rate r of ratios `ratios[l] ~ r^(l + 1)` (least squares on
/// ln ratio through the origin); `r - 1` is the effective per-layer bias.
/// Errors on an empty list or a non-positive ratio (no logarithm).
pub fn geometric_rate(ratios: &[f64]) -> Result<f64> {
    if ratios.is_empty() {
        return Err(Error::invalid(
            crate::Domain::Format,
            "geometric_rate needs at least one ratio",
        ));
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (l, &r) in ratios.iter().enumerate() {
        if !(r > 0.0 && r.is_finite()) {
            return Err(Error::invalid(
                crate::Domain::Format,
                format!("geometric_rate needs positive finite ratios; ratio {l} is {r}"),
            ));
        }
        let depth = (l + 1) as f64;
        num += depth * r.ln();
        den += depth * depth;
    }
    Ok((num / den).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_e2m1_shrinkage() {
        // E2M1 RTNE with scale 1: 0.75->1 (+0.25), 1.25->1 (-0.25), 2.6->3 (+0.4),
        // 5.0->4 (-1, tie to even code), -3.4->-3 (|q|-|x| = -0.4)
        let x = [0.75f32, 1.25, 2.6, 5.0, -3.4];
        let q = [1.0f32, 1.0, 3.0, 4.0, -3.0];
        let s = tensor_sums(&x, &q).unwrap();
        let abs: f64 = x.iter().map(|v| (*v as f64).abs()).sum();
        let signed = 0.25 - 0.25 + (3.0 - 2.6f32 as f64) + (4.0 - 5.0) - (-3.0 - (-3.4f32 as f64));
        assert_eq!(s.bias(), signed / abs);
        // -1.0 / 13.0 up to the f32 representation of 2.6 and 3.4
        assert!((s.bias() - (-1.0 / 13.0)).abs() < 1e-7);
        assert_eq!(s.n, 5);
    }

    #[test]
    fn exact_statistics_of_a_small_case() {
        let x = [1.0f32, -2.0, 0.0, 4.0];
        let q = [1.0f32, -1.5, 0.5, 4.0];
        let s = tensor_sums(&x, &q).unwrap();
        // signed: 0 + (-1)(0.5) + 0 (sign 0) + 0 = -0.5; sum|x| = 7
        assert_eq!(s.bias(), -0.5 / 7.0);
        // err^2 = 0.25 + 0.25 = 0.5; x^2 = 21
        assert_eq!(s.rel_rmse(), (0.5f64 / 21.0).sqrt());
        assert_eq!(s.sqnr_db(), 10.0 * (21.0f64 / 0.5).log10());
        // q^2 = 1 + 2.25 + 0.25 + 16 = 19.5; <q,x> = 1 + 3 + 0 + 16 = 20
        assert_eq!(s.norm_ratio(), (19.5f64 / 21.0).sqrt());
        assert_eq!(s.gain(), 20.0 / 21.0);
    }

    #[test]
    fn blocks_merge_to_the_tensor() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 3.0)
            .collect();
        let q: Vec<f32> = x.iter().map(|v| v.round()).collect();
        let blocks = block_sums(&x, &q, 16).unwrap();
        assert_eq!(blocks.len(), 4);
        let merged = blocks
            .iter()
            .copied()
            .fold(ErrorSums::default(), ErrorSums::merge);
        let whole = tensor_sums(&x, &q).unwrap();
        assert_eq!(merged.n, whole.n);
        assert!((merged.bias() - whole.bias()).abs() < 1e-15);
        assert!((merged.sq_err - whole.sq_err).abs() < 1e-12);
    }

    #[test]
    fn parallel_path_matches_serial() {
        let n = 3 * PARALLEL_MIN + 48;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 77.0)
            .collect();
        let q: Vec<f32> = x.iter().map(|v| (v * 2.0).round() / 2.0).collect();
        let par = tensor_sums(&x, &q).unwrap();
        let ser = ErrorSums::of_slices(&x, &q);
        assert_eq!(par.n, ser.n);
        assert!((par.bias() - ser.bias()).abs() < 1e-12);
        let blocks = block_sums(&x, &q, 16).unwrap();
        assert_eq!(blocks.len(), n / 16);
        assert_eq!(blocks[5], ErrorSums::of_slices(&x[80..96], &q[80..96]));
    }

    #[test]
    fn exact_round_trip_and_zero_tensor() {
        let x = [0.5f32, -1.0, 6.0];
        let s = tensor_sums(&x, &x).unwrap();
        assert_eq!((s.bias(), s.rel_rmse(), s.gain()), (0.0, 0.0, 1.0));
        assert_eq!(s.sqnr_db(), f64::INFINITY);
        let z = tensor_sums(&[0.0; 4], &[0.0; 4]).unwrap();
        assert_eq!((z.bias(), z.rel_rmse(), z.norm_ratio()), (0.0, 0.0, 0.0));
    }

    #[test]
    fn bad_inputs_are_named() {
        let e = tensor_sums(&[1.0, 2.0], &[1.0]).unwrap_err();
        assert!(e.to_string().contains("2 and 1"), "{e}");
        let e = tensor_sums(&[1.0, f32::NAN, f32::INFINITY], &[0.0; 3]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NonFinite {
                    count: 2,
                    first_index: 1
                }
            ),
            "{e}"
        );
        let e = block_sums(&[0.0; 10], &[0.0; 10], 4).unwrap_err();
        assert!(e.to_string().contains("blocks of 4"), "{e}");
    }

    #[test]
    fn histogram_counts_nibbles() {
        // codes 1, 15, 8, 1, 3 -> bytes [0xF1, 0x18, 0x03] (odd count: last high nibble unused)
        let h = code_histogram(&[0xF1, 0x18, 0x03], 5).unwrap();
        let mut want = [0u64; 16];
        want[1] = 2;
        want[15] = 1;
        want[8] = 1;
        want[3] = 1;
        assert_eq!(h, want);
        assert!(code_histogram(&[0x00], 3).is_err());
        let big = vec![0x21u8; PARALLEL_MIN * 2 + 3];
        let h = code_histogram(&big, big.len() * 2).unwrap();
        assert_eq!((h[1], h[2]), (big.len() as u64, big.len() as u64));
    }

    #[test]
    fn depth_helpers() {
        assert_eq!(depth_product(&[-0.5, 1.0, 0.0]), vec![0.5, 1.0, 1.0]);
        let r = 0.97f64;
        let ratios: Vec<f64> = (1..=10).map(|l| r.powi(l)).collect();
        assert!((geometric_rate(&ratios).unwrap() - r).abs() < 1e-12);
        assert!(geometric_rate(&[]).is_err());
        assert!(geometric_rate(&[1.0, 0.0])
            .unwrap_err()
            .to_string()
            .contains("ratio 1"));
    }
}
