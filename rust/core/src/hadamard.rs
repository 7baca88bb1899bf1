//! Random Hadamard transform (numerics.md section 5, docs/conventions.md "RHT").
//!
//! Block-diagonal Sylvester Hadamard of size n (16, 32, 64, 128) along one axis,
//! times a +-1 sign diagonal applied BEFORE H, normalised by 1/sqrt(n):
//! y_block = H_n (d * x_block) / sqrt(n). H is symmetric and orthogonal after
//! normalisation, so (A D H)(H^T D B) = A B when both operands are transformed
//! along the GEMM's reduction dimension with the same signs.
//!
//! The butterflies run in f64 and round once to the output type, so results are
//! close to correctly rounded; bits after an RHT are not part of the contract.

use rayon::prelude::*;

use crate::error::{Domain, Error, Result};
use crate::quant::layout::transpose;
use crate::quant::threads;
use crate::rng;

/// Transformer Engine's fixed sign vector (repeated for n > 16).
pub const TE_SIGNS: [i8; 16] = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1];

pub const SIZES: &[usize] = &[16, 32, 64, 128];
pub const SIGN_POLICIES: &[&str] = &["te", "per-layer", "per-step", "none"];

/// Check an RHT size.
pub fn check_size(n: usize) -> Result<()> {
    if SIZES.contains(&n) {
        Ok(())
    } else {
        Err(Error::invalid(
            Domain::Format,
            format!("RHT size {n} is not supported; valid: 16, 32, 64, 128"),
        ))
    }
}

/// The sign diagonal for size `n`. "te": TE's vector repeated; "per-layer" and
/// "per-step": sign i is -1 when bit 0 of Philox word 0 at (seed, i) is 1 (the
/// caller mixes layer/step into `seed`); "none": all +1 (plain Hadamard).
pub fn signs(n: usize, policy: &str, seed: u64) -> Result<Vec<f64>> {
    check_size(n)?;
    let s = match policy.to_ascii_lowercase().as_str() {
        "te" => (0..n).map(|i| TE_SIGNS[i % 16] as f64).collect(),
        "per-layer" | "per-step" | "seeded" => (0..n)
            .map(|i| {
                if rng::randint(seed, i as u64) & 1 == 1 {
                    -1.0
                } else {
                    1.0
                }
            })
            .collect(),
        "none" => vec![1.0; n],
        _ => {
            return Err(Error::unknown(
                Domain::Format,
                "RHT sign policy",
                policy,
                SIGN_POLICIES,
            ))
        }
    };
    Ok(s)
}

/// Float types the transform reads and writes.
pub trait Real: Copy + Send + Sync + Default {
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

impl Real for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// In-place unnormalised fast Walsh-Hadamard transform (Sylvester order), size N.
#[inline(always)]
fn fwht<const N: usize>(buf: &mut [f64; N]) {
    let mut h = 1;
    while h < N {
        for i in (0..N).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (buf[j], buf[j + h]);
                buf[j] = a + b;
                buf[j + h] = a - b;
            }
        }
        h *= 2;
    }
}

fn rht_blocks<T: Real, const N: usize>(x: &[T], signs: &[f64]) -> Vec<T> {
    let norm = 1.0 / (N as f64).sqrt();
    let signs: &[f64; N] = signs.try_into().expect("one sign per element");
    let mut out = vec![T::default(); x.len()];
    let chunk = N * 512;
    out.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .for_each(|(o, xi)| {
            for (ob, xb) in o.chunks_exact_mut(N).zip(xi.chunks_exact(N)) {
                let mut buf = [0f64; N];
                for k in 0..N {
                    buf[k] = xb[k].to_f64() * signs[k];
                }
                fwht(&mut buf);
                for k in 0..N {
                    ob[k] = T::from_f64(buf[k] * norm);
                }
            }
        });
    out
}

fn rht_last<T: Real>(x: &[T], n: usize, signs: &[f64]) -> Vec<T> {
    match n {
        16 => rht_blocks::<T, 16>(x, signs),
        32 => rht_blocks::<T, 32>(x, signs),
        64 => rht_blocks::<T, 64>(x, signs),
        _ => rht_blocks::<T, 128>(x, signs),
    }
}

/// RHT of a row-major (rows, cols) array along the last axis (`along_first` =
/// false) or along the first axis (true). The transformed length must be a
/// multiple of n.
pub fn rht<T: Real>(
    x: &[T],
    rows: usize,
    cols: usize,
    n: usize,
    signs: &[f64],
    along_first: bool,
) -> Result<Vec<T>> {
    check_size(n)?;
    if signs.len() != n {
        return Err(Error::invalid(
            Domain::Format,
            format!("RHT of size {n} needs {n} signs, got {}", signs.len()),
        ));
    }
    if x.len() != rows * cols {
        return Err(Error::Shape(format!(
            "data length {} does not match shape ({rows}, {cols})",
            x.len()
        )));
    }
    let len = if along_first { rows } else { cols };
    if len % n != 0 {
        return Err(Error::Shape(format!(
            "cannot apply an RHT of size {n} along axis {} of shape ({rows}, {cols}): length {len} is not a multiple of {n}",
            if along_first { 0 } else { -1 }
        )));
    }
    Ok(threads::run(|| {
        if along_first {
            let t = transpose(x, rows, cols);
            let y = rht_last(&t, n, signs);
            transpose(&y, cols, rows)
        } else {
            rht_last(x, n, signs)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthogonal_and_involutive() {
        for &n in SIZES {
            let s = signs(n, "none", 0).unwrap();
            let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
            let y = rht(&x, 1, n, n, &s, false).unwrap();
            let z = rht(&y, 1, n, n, &s, false).unwrap();
            let nx: f64 = x.iter().map(|v| v * v).sum();
            let ny: f64 = y.iter().map(|v| v * v).sum();
            assert!((nx - ny).abs() < 1e-12);
            for (a, b) in x.iter().zip(&z) {
                assert!((a - b).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn axis_first_matches_transpose() {
        let (r, c) = (32, 3);
        let x: Vec<f64> = (0..r * c).map(|i| (i as f64).cos()).collect();
        let s = signs(16, "te", 0).unwrap();
        let a = rht(&x, r, c, 16, &s, true).unwrap();
        let t = transpose(&x, r, c);
        let b = transpose(&rht(&t, c, r, 16, &s, false).unwrap(), c, r);
        assert_eq!(a, b);
        assert!(rht(&x, r, c, 16, &s, false).is_err());
    }

    #[test]
    fn seeded_signs_differ() {
        let a = signs(64, "per-layer", 1).unwrap();
        let b = signs(64, "per-layer", 2).unwrap();
        assert_ne!(a, b);
        assert!(a.iter().all(|v| v.abs() == 1.0));
    }
}
