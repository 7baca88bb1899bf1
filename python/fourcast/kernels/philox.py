"""Triton side of fourcast's RNG: the uniform draws used by stochastic rounding.

The stream is Triton's own `tl.rand` (Philox4x32-10, word 0, counter = (offset lo,
offset hi, 0, 0), key = (seed lo, seed hi)): Triton >= 3.4 uses 32-bit Philox for
64-bit offsets too (triton-lang/triton#6832), so 3.6 on the GPU machine and 3.9 here
give the same bits, and reference.uniform reproduces them on CPU/CUDA with torch.

Rounding "sr" (numerics.md section 4) draws one Philox per element: element i of the
quantized layout takes word 0 at counter offset + i. Rounding "sr4" takes all four
words of one counter for four consecutive elements: element i takes word i % 4 at
counter offset + i // 4 (reference.uniform_x4, rng::rand_x4); "sr16" takes the sixteen
bytes of one counter as 8-bit uniforms (byte + 0.5) / 256 (reference.uniform_x16,
rng::rand_x16; docs/conventions.md). The draws are the
SR kernels' main cost (kernels-h200.md, session 6: an "sr4" dY call takes 0.54-0.62x
the time of an "sr" one). Writing the rounds with u64 products (IMAD.WIDE instead of
IMAD.HI + IMAD) cuts the SASS per draw from 64 to 51 but ran 1.19x slower: not used.
"""

import triton
import triton.language as tl


@triton.jit
def load_seed(seed, SEED_PTR: tl.constexpr):
    """The Philox seed of a kernel: its `seed` argument, or (SEED_PTR) the int64 that
    argument points to. A seed in device memory lets a captured CUDA graph replay each
    training step with that step's seeds (fourcast.nn.StepSeeds); the bits are the same."""
    if SEED_PTR:
        return tl.load(seed)
    else:
        return seed


@triton.jit
def sr_uniform(seed, m, k, K, offset):
    """u in [0, 1) for element (m, k) of a quantized (M, K) layout: Philox at
    seed, m * K + k + offset (int64, so any tensor size and base offset works)."""
    lin = m.to(tl.int64) * K + k + offset
    return tl.rand(seed, lin)


@triton.jit
def _interleave4(w0, w1, w2, w3):
    """[.., n] x 4 -> [.., n, 4] with [.., j, i] = w_i[.., j] (in registers)."""
    j = tl.join(tl.join(w0, w2), tl.join(w1, w3))  # [.., n, b, a] = w_(2b + a)
    return tl.reshape(j, j.shape[:-2] + [4])


@triton.jit
def _group_uniforms(w0, w1, w2, w3, G: tl.constexpr):
    """[.., n] Philox words x 4 -> [.., n, G] draws: G = 4 ("sr4"): [.., j, a] is w_a as
    tl.rand's uniform; G = 16 ("sr16"): [.., j, 4a + b] is byte b (from the low end) of
    w_a, an int32 that stands for the uniform (byte + 0.5) / 256 (rng::rand_x4,
    rng::rand_x16): quantize._round_elem rounds with it in integers, no float uniform."""
    if G == 4:
        u = _interleave4(tl.uint_to_uniform_float(w0), tl.uint_to_uniform_float(w1),
                         tl.uint_to_uniform_float(w2), tl.uint_to_uniform_float(w3))
    else:
        ws = tl.expand_dims(_interleave4(w0, w1, w2, w3), len(w0.shape) + 1)  # [.., n, 4, 1]
        u = ((ws >> (tl.arange(0, 4) * 8).to(tl.uint32)) & 0xFF).to(tl.int32)  # [.., n, 4, 4]
        u = tl.reshape(u, u.shape[:-2] + [16])
    return u


@triton.jit
def sr_uniform_group(seed, m, k0, K, offset, BM: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
    """"sr4" (G = 4) or "sr16" (G = 16) uniforms of the [BM, BK] tile of a (M, K) layout at
    rows m ([BM, 1]) and columns k0 .. k0 + BK (k0 and K multiples of G): one Philox
    counter (m * K + k) / G + offset per G consecutive elements."""
    kg = k0 // G + tl.arange(0, BK // G)[None, :]
    w0, w1, w2, w3 = tl.randint4x(seed, m.to(tl.int64) * (K // G) + kg + offset)
    return tl.reshape(_group_uniforms(w0, w1, w2, w3, G), (BM, BK))


@triton.jit
def sr_uniform_group_t(seed, m0, k, M, offset, BM: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
    """The same for the transposed layout: element (k, m) of a (K, M) layout, returned as
    the [BM, BK] tile of its transpose (rows m0 .. m0 + BM, columns k ([1, BK]))."""
    mg = m0 // G + tl.arange(0, BM // G)[:, None]
    w0, w1, w2, w3 = tl.randint4x(seed, k.to(tl.int64) * (M // G) + mg + offset)  # [BM / G, BK]
    return tl.reshape(tl.permute(_group_uniforms(w0, w1, w2, w3, G), (0, 2, 1)), (BM, BK))


@triton.jit
def _rand_kernel(OUT, seed, offset, N, BLOCK: tl.constexpr):
    """Test helper: OUT[i] = tl.rand(seed, i + offset)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    u = tl.rand(seed, i.to(tl.int64) + offset)
    tl.store(OUT + i, u, mask=i < N)


def rand(n: int, seed: int, offset: int = 0, device="cuda"):
    """n uniforms from Triton's stream (for tests against reference.uniform)."""
    import torch

    out = torch.empty(n, dtype=torch.float32, device=device)
    _rand_kernel[(triton.cdiv(n, 1024),)](out, seed, offset, n, BLOCK=1024)
    return out


@triton.jit
def _group_tile_kernel(OUT_R, OUT_C, seed, offset, M, K, BM: tl.constexpr, BK: tl.constexpr, G: tl.constexpr = 4):
    """Test helper: the "sr4" (G = 16: "sr16", as (byte + 0.5) / 256) uniforms of tile (1, 1)
    of a (M, K) layout into OUT_R and of its (K, M) transpose into OUT_C, both [BM, BK] in
    the (M, K) orientation."""
    m = BM + tl.arange(0, BM)[:, None]
    k = BK + tl.arange(0, BK)[None, :]
    u_r = sr_uniform_group(seed, m, BK, K, offset, BM, BK, G)
    u_c = sr_uniform_group_t(seed, BM, k, M, offset, BM, BK, G)
    if G == 16:
        u_r = (u_r.to(tl.float32) + 0.5) * (1.0 / 256.0)
        u_c = (u_c.to(tl.float32) + 0.5) * (1.0 / 256.0)
    tl.store(OUT_R + (m - BM) * BK + (k - BK), u_r)
    tl.store(OUT_C + (m - BM) * BK + (k - BK), u_c)
