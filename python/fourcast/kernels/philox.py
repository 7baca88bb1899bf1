"""Triton side of fourcast's RNG: the uniform draw used by stochastic rounding.

The stream is Triton's own `tl.rand` (Philox4x32-10, word 0, counter = (offset lo,
offset hi, 0, 0), key = (seed lo, seed hi)): Triton >= 3.4 uses 32-bit Philox for
64-bit offsets too (triton-lang/triton#6832), so 3.6 on the GPU machine and 3.9 here
give the same bits, and reference.uniform reproduces them on CPU/CUDA with torch.
"""

import triton
import triton.language as tl


@triton.jit
def sr_uniform(seed, m, k, K, offset):
    """u in [0, 1) for element (m, k) of a quantized (M, K) layout: Philox at
    seed, m * K + k + offset (int64, so any tensor size and base offset works)."""
    lin = m.to(tl.int64) * K + k + offset
    return tl.rand(seed, lin)


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
