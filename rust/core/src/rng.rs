//! Philox4x32-10, bit-identical to Triton's `tl.randint`, `tl.randint4x` and
//! `tl.rand` (triton/language/random.py, Triton 3.9), so SR in the Rust codec and
//! in the Triton kernels draws the same numbers for the same (seed, offset).
//!
//! key = (seed low 32, seed high 32); counter = (offset low 32, offset high 32, 0, 0).

const KEY_A: u32 = 0x9E37_79B9;
const KEY_B: u32 = 0xBB67_AE85;
const ROUND_A: u32 = 0xD251_1F53;
const ROUND_B: u32 = 0xCD9E_8D57;

/// Ten Philox rounds on counter `c` with key `k` (Random123 philox4x32-10).
#[inline]
pub fn philox4x32_10(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = c;
    let [mut k0, mut k1] = k;
    for _ in 0..10 {
        let pa = (ROUND_A as u64) * (c0 as u64);
        let pb = (ROUND_B as u64) * (c2 as u64);
        let n0 = ((pb >> 32) as u32) ^ c1 ^ k0;
        let n2 = ((pa >> 32) as u32) ^ c3 ^ k1;
        c1 = pb as u32;
        c3 = pa as u32;
        c0 = n0;
        c2 = n2;
        k0 = k0.wrapping_add(KEY_A);
        k1 = k1.wrapping_add(KEY_B);
    }
    [c0, c1, c2, c3]
}

/// `tl.randint4x(seed, offset)`: the four 32-bit words.
#[inline]
pub fn randint4x(seed: u64, offset: u64) -> [u32; 4] {
    philox4x32_10(
        [offset as u32, (offset >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// `tl.randint(seed, offset)`: word 0.
#[inline]
pub fn randint(seed: u64, offset: u64) -> u32 {
    randint4x(seed, offset)[0]
}

/// Triton's `uint_to_uniform_float`: as i32, negatives -> -x-1, to f32 (RNE),
/// times f32(4.6566127342e-10). Range [0, 0.99999994].
#[inline]
pub fn uint_to_uniform(x: u32) -> f32 {
    let i = x as i32;
    let i = if i < 0 { !i } else { i };
    (i as f32) * 4.656_612_7e-10_f32
}

/// `tl.rand(seed, offset)`.
#[inline]
pub fn rand(seed: u64, offset: u64) -> f32 {
    uint_to_uniform(randint(seed, offset))
}

/// `rand(seed, first + i)` for i in 0..out.len(), written into `out`. Eight counters
/// run in lockstep so the compiler can vectorise the rounds (same bits as `rand`).
#[inline]
pub fn rand_run(seed: u64, first: u64, out: &mut [f32]) {
    const L: usize = 8;
    let (k0, k1) = (seed as u32, (seed >> 32) as u32);
    for (chunk_idx, chunk) in out.chunks_mut(L).enumerate() {
        let base = first.wrapping_add((chunk_idx * L) as u64);
        let mut c0 = [0u32; L];
        let mut c1 = [0u32; L];
        let mut c2 = [0u32; L];
        let mut c3 = [0u32; L];
        for i in 0..L {
            let o = base.wrapping_add(i as u64);
            c0[i] = o as u32;
            c1[i] = (o >> 32) as u32;
        }
        let (mut ka, mut kb) = (k0, k1);
        for _ in 0..10 {
            for i in 0..L {
                let pa = (ROUND_A as u64) * (c0[i] as u64);
                let pb = (ROUND_B as u64) * (c2[i] as u64);
                let n0 = ((pb >> 32) as u32) ^ c1[i] ^ ka;
                let n2 = ((pa >> 32) as u32) ^ c3[i] ^ kb;
                c1[i] = pb as u32;
                c3[i] = pa as u32;
                c0[i] = n0;
                c2[i] = n2;
            }
            ka = ka.wrapping_add(KEY_A);
            kb = kb.wrapping_add(KEY_B);
        }
        for (o, &w) in chunk.iter_mut().zip(c0.iter()) {
            *o = uint_to_uniform(w);
        }
    }
}

/// `randint4x` for many offsets, flattened (4 words per offset), in parallel.
pub fn randint4x_batch(seed: u64, offsets: &[u64]) -> Vec<u32> {
    use rayon::prelude::*;
    crate::quant::threads::run(|| {
        offsets
            .par_iter()
            .flat_map_iter(|&o| randint4x(seed, o))
            .collect()
    })
}

/// `rand` for many offsets, in parallel.
pub fn rand_batch(seed: u64, offsets: &[u64]) -> Vec<f32> {
    use rayon::prelude::*;
    crate::quant::threads::run(|| offsets.par_iter().map(|&o| rand(seed, o)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random123_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn rand_run_equals_rand() {
        let seed = 0x1234_5678_9abc_def0;
        let first = u64::MAX - 5; // wraps across the 64-bit offset range
        let mut out = [0f32; 21];
        rand_run(seed, first, &mut out);
        for (i, &u) in out.iter().enumerate() {
            assert_eq!(u, rand(seed, first.wrapping_add(i as u64)));
        }
    }

    #[test]
    fn triton_seed_42() {
        assert_eq!(randint(42, 0), 0x9ceaf053);
        assert_eq!(rand(42, 0), 0.774_080_16);
        // The constant is f32(4.6566127342e-10), as Triton writes it.
        assert_eq!(4.656_612_7e-10_f32, 4.656_612_734_2e-10_f64 as f32);
    }
}
