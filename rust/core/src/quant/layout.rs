//! Memory layouts: the transposed copy (axis=0 / column-wise quantization) and
//! nibble packing (element 2i in the LOW nibble of byte i, torchao `pack_uint4`).

use rayon::prelude::*;

const TILE: usize = 32;

/// Row-major (rows, cols) -> row-major (cols, rows), cache-blocked and parallel
/// over blocks of output rows.
pub fn transpose<T: Copy + Send + Sync + Default>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    assert_eq!(
        x.len(),
        rows * cols,
        "transpose: length does not match shape"
    );
    let mut out = vec![T::default(); rows * cols];
    if rows == 0 || cols == 0 {
        return out;
    }
    out.par_chunks_mut(TILE * rows)
        .enumerate()
        .for_each(|(cb, chunk)| {
            let c0 = cb * TILE;
            let nc = chunk.len() / rows;
            for r0 in (0..rows).step_by(TILE) {
                let r1 = (r0 + TILE).min(rows);
                for dc in 0..nc {
                    let dst = &mut chunk[dc * rows..(dc + 1) * rows];
                    for r in r0..r1 {
                        dst[r] = x[r * cols + c0 + dc];
                    }
                }
            }
        });
    out
}

/// Pack 4-bit codes (one per byte, upper bits ignored) two per byte. `codes.len()` must be even.
pub fn pack(codes: &[u8]) -> Vec<u8> {
    assert!(codes.len() % 2 == 0, "pack: odd number of codes");
    codes
        .par_chunks(2)
        .map(|p| (p[0] & 0xf) | (p[1] << 4))
        .collect()
}

/// Unpack bytes into two codes each (low nibble first).
pub fn unpack(packed: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; packed.len() * 2];
    out.par_chunks_mut(2)
        .zip(packed.par_iter())
        .for_each(|(o, &b)| {
            o[0] = b & 0xf;
            o[1] = b >> 4;
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_roundtrip() {
        let (r, c) = (37, 70);
        let x: Vec<u32> = (0..(r * c) as u32).collect();
        let t = transpose(&x, r, c);
        assert_eq!(t[5 * r + 3], x[3 * c + 5]);
        assert_eq!(transpose(&t, c, r), x);
    }

    #[test]
    fn pack_low_nibble_first() {
        assert_eq!(pack(&[1, 2, 15, 0]), vec![0x21, 0x0f]);
        assert_eq!(unpack(&[0x21, 0x0f]), vec![1, 2, 15, 0]);
    }
}
