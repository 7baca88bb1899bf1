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

/// Element `index` of the four-per-counter stream (SR mode "sr4"): word `index % 4`
/// of `randint4x(seed, offset + index / 4)`, as a uniform. One Philox evaluation
/// serves four consecutive elements of the quantized layout.
#[inline]
pub fn rand_x4(seed: u64, offset: u64, index: u64) -> f32 {
    grouped(X4_SHIFT, pick_x4, seed, offset, index)
}

/// Element `index` of the sixteen-per-counter stream (SR mode "sr16"): byte
/// `index % 4` (from the low end) of word `(index / 4) % 4` of
/// `randint4x(seed, offset + index / 16)`, as the 8-bit uniform (byte + 0.5) / 256
/// (exact in f32; an SR decision off by at most 2^-9 of a step either way).
#[inline]
pub fn rand_x16(seed: u64, offset: u64, index: u64) -> f32 {
    grouped(X16_SHIFT, pick_x16, seed, offset, index)
}

/// `rand_x4(seed, offset, first + i)` for i in 0..out.len().
pub fn rand_run_x4(seed: u64, offset: u64, first: u64, out: &mut [f32]) {
    grouped_run(X4_SHIFT, pick_x4, seed, offset, first, out)
}

/// `rand_x16(seed, offset, first + i)` for i in 0..out.len().
pub fn rand_run_x16(seed: u64, offset: u64, first: u64, out: &mut [f32]) {
    grouped_run(X16_SHIFT, pick_x16, seed, offset, first, out)
}

// The grouped streams: one `randint4x` counter per 2^shift consecutive elements, and
// element j of a group read from the counter's four words by `pick`.
const X4_SHIFT: u32 = 2;
const X16_SHIFT: u32 = 4;

#[inline]
fn pick_x4(words: &[u32; 4], j: u32) -> f32 {
    uint_to_uniform(words[j as usize])
}

#[inline]
fn pick_x16(words: &[u32; 4], j: u32) -> f32 {
    (((words[(j >> 2) as usize] >> (8 * (j & 3))) & 0xFF) as f32 + 0.5) * (1.0 / 256.0)
}

#[inline]
fn grouped(
    shift: u32,
    pick: impl Fn(&[u32; 4], u32) -> f32,
    seed: u64,
    offset: u64,
    index: u64,
) -> f32 {
    let words = randint4x(seed, offset.wrapping_add(index >> shift));
    pick(&words, (index & ((1 << shift) - 1)) as u32)
}

fn grouped_run(
    shift: u32,
    pick: impl Fn(&[u32; 4], u32) -> f32,
    seed: u64,
    offset: u64,
    first: u64,
    out: &mut [f32],
) {
    let group = 1u32 << shift;
    let mut i = 0;
    while i < out.len() {
        let index = first.wrapping_add(i as u64);
        let words = randint4x(seed, offset.wrapping_add(index >> shift));
        let mut j = (index & (group as u64 - 1)) as u32;
        while j < group && i < out.len() {
            out[i] = pick(&words, j);
            j += 1;
            i += 1;
        }
    }
}

/// `rand(seed, first + i)` for i in 0..out.len(), written into `out` (same bits as
/// `rand`). Uses eight AVX2 lanes when the CPU has them.
#[inline]
pub fn rand_run(seed: u64, first: u64, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was checked just above.
        return unsafe { avx2::rand_run(seed, first, out) };
    }
    rand_run_portable(seed, first, out)
}

/// Scalar `rand_run`.
pub fn rand_run_portable(seed: u64, first: u64, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = rand(seed, first.wrapping_add(i as u64));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// hi and lo 32 bits of the 32x32 products a[i] * m in each of 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul_hi_lo(a: __m256i, m: __m256i) -> (__m256i, __m256i) {
        let even = _mm256_mul_epu32(a, m); // lanes 0, 2, 4, 6 as 64-bit products
        let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), m); // lanes 1, 3, 5, 7
        let hi = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
        (hi, _mm256_mullo_epi32(a, m))
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn rand_run(seed: u64, first: u64, out: &mut [f32]) {
        let ra = _mm256_set1_epi32(ROUND_A as i32);
        let rb = _mm256_set1_epi32(ROUND_B as i32);
        let lane = _mm256_setr_epi64x(0, 1, 2, 3);
        let scale = _mm256_set1_ps(4.656_612_7e-10);
        let mut chunks = out.chunks_exact_mut(8);
        let mut base = first;
        for chunk in &mut chunks {
            // 64-bit offsets base + 0..8 split into low and high 32-bit words.
            let o_lo4 = _mm256_add_epi64(_mm256_set1_epi64x(base as i64), lane);
            let o_hi4 = _mm256_add_epi64(_mm256_set1_epi64x(base.wrapping_add(4) as i64), lane);
            // Gather the low dwords (c0) and high dwords (c1) of the 8 offsets in order.
            let idx_lo = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
            let idx_hi = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
            let a_lo = _mm256_permutevar8x32_epi32(o_lo4, idx_lo);
            let b_lo = _mm256_permutevar8x32_epi32(o_hi4, idx_lo);
            let a_hi = _mm256_permutevar8x32_epi32(o_lo4, idx_hi);
            let b_hi = _mm256_permutevar8x32_epi32(o_hi4, idx_hi);
            let mut c0 = _mm256_permute2x128_si256::<0x20>(a_lo, b_lo);
            let mut c1 = _mm256_permute2x128_si256::<0x20>(a_hi, b_hi);
            let mut c2 = _mm256_setzero_si256();
            let mut c3 = _mm256_setzero_si256();
            let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
            for _ in 0..10 {
                let (hi_a, lo_a) = mul_hi_lo(c0, ra);
                let (hi_b, lo_b) = mul_hi_lo(c2, rb);
                let n0 = _mm256_xor_si256(_mm256_xor_si256(hi_b, c1), _mm256_set1_epi32(k0 as i32));
                let n2 = _mm256_xor_si256(_mm256_xor_si256(hi_a, c3), _mm256_set1_epi32(k1 as i32));
                c1 = lo_b;
                c3 = lo_a;
                c0 = n0;
                c2 = n2;
                k0 = k0.wrapping_add(KEY_A);
                k1 = k1.wrapping_add(KEY_B);
            }
            // uint_to_uniform: as i32, negatives -> !x, to f32 (RNE), times the constant.
            let folded = _mm256_xor_si256(c0, _mm256_srai_epi32::<31>(c0));
            let u = _mm256_mul_ps(_mm256_cvtepi32_ps(folded), scale);
            // SAFETY: `chunk` holds exactly 8 f32.
            unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), u) };
            base = base.wrapping_add(8);
        }
        rand_run_portable(seed, base, chunks.into_remainder());
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
    fn x4_stream_takes_four_words_per_counter() {
        let (seed, offset) = (7u64, (1u64 << 32) - 2);
        for first in [0u64, 1, 3, 6] {
            let mut out = [0f32; 13];
            rand_run_x4(seed, offset, first, &mut out);
            for (i, &u) in out.iter().enumerate() {
                let index = first + i as u64;
                let words = randint4x(seed, offset + index / 4);
                assert_eq!(
                    u.to_bits(),
                    uint_to_uniform(words[(index % 4) as usize]).to_bits()
                );
                assert_eq!(u.to_bits(), rand_x4(seed, offset, index).to_bits());
            }
        }
    }

    #[test]
    fn x16_stream_takes_sixteen_bytes_per_counter() {
        let (seed, offset) = (7u64, (1u64 << 32) - 2);
        for first in [0u64, 1, 5, 15, 17] {
            let mut out = [0f32; 37];
            rand_run_x16(seed, offset, first, &mut out);
            for (i, &u) in out.iter().enumerate() {
                let index = first + i as u64;
                let word = randint4x(seed, offset + index / 16)[((index / 4) % 4) as usize];
                let byte = (word >> (8 * (index % 4))) & 0xFF;
                assert_eq!(u, (byte as f32 + 0.5) / 256.0);
                assert_eq!(u.to_bits(), rand_x16(seed, offset, index).to_bits());
            }
        }
    }

    #[test]
    fn rand_run_equals_rand() {
        for (seed, first) in [
            (0x1234_5678_9abc_def0, u64::MAX - 5), // wraps across the 64-bit offset range
            (42, 0),
            (u64::MAX, (1u64 << 32) - 3), // carries into the high counter word
        ] {
            let mut out = [0f32; 45];
            rand_run(seed, first, &mut out);
            for (i, &u) in out.iter().enumerate() {
                assert_eq!(
                    u,
                    rand(seed, first.wrapping_add(i as u64)),
                    "{seed} {first} {i}"
                );
            }
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
