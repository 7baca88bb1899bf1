"""Standalone random Hadamard transform (Triton), for analysis: block-diagonal H_n
(Sylvester order) along one axis, signs applied first, normalised by 1/sqrt(n).
The arithmetic is quantize.py's `_rotate` (FWHT butterflies in f64, the order and the
single rounding to f32 of the Rust core and reference.rht_lastdim), so the result
equals reference.rht and fc.rht bit for bit (tests/interpret/test_hadamard.py).

Example (CUDA):
    >>> y = rht(x, 16, ops.rht_signs(16, "te"))    # doctest: +SKIP
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from fourcast.errors import ShapeError
from fourcast.kernels import launcher
from fourcast.kernels.quantize import _cast_out, _rht_scale, _rotate, rht_norm
from fourcast.kernels.utils import check_kernel_input, check_rht, interpreting


@triton.jit
def _rht_kernel(X, Y, SIGNS, R, C, scale, N: tl.constexpr, LOG2N: tl.constexpr, RNE_BF16: tl.constexpr, NORM: tl.constexpr,
                BM: tl.constexpr, BK: tl.constexpr):
    m = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    k = tl.program_id(1) * BK + tl.arange(0, BK)[None, :]
    inb = (m < R) & (k < C)
    x = tl.load(X + m * C + k, mask=inb, other=0.0).to(tl.float32)
    y = _rotate(x, k, SIGNS, SIGNS, scale, BM, BK, N, LOG2N, 0, False, NORM)
    tl.store(Y + m * C + k, _cast_out(y, Y, RNE_BF16), mask=inb)


def rht(x: torch.Tensor, n: int, signs: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """RHT of size n along `axis` (its length a multiple of n), result in x.dtype. A
    non-last axis is moved last (one copy) and back."""
    check_kernel_input(x)
    n, signs = check_rht((n, signs), x.device)
    if x.dim() == 0 or x.shape[axis] % n:
        raise ShapeError(f"length along axis {axis} of shape {tuple(x.shape)} is not a multiple of the RHT size {n}")
    xm = x.movedim(axis, -1).contiguous()
    c = xm.shape[-1]
    r = xm.numel() // c
    y = torch.empty_like(xm)
    bk = max(64, n) if not interpreting() else max(32, n)
    bm = max(16, 4096 // bk) if not interpreting() else 16
    scale = _rht_scale(n)
    launcher.run(_rht_kernel, (triton.cdiv(r, bm), triton.cdiv(c, bk)), (xm, y, signs.contiguous(), r, c, scale),
                 dict(N=n, LOG2N=int(math.log2(n)), RNE_BF16=interpreting(), NORM=rht_norm(n), BM=bm, BK=bk,
                      num_warps=4))
    return y.movedim(-1, axis)
