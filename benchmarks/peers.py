"""The PyTorch peers of fourcast's quantizer: NVFP4 (TE rule, numerics.md section 3) written
the way a user writes it in plain PyTorch, to run eagerly or under torch.compile.

Issue #3 asks for each fused quantizer call to be >= 8x faster than torch.compile'd
PyTorch doing the same work, so each call has its own peer here: the same tensor amax (fresh
or given), both copies (row-wise and the column-wise Wgrad copy), the same column RHT16 and
stochastic rounding, and the same packed output (codes two a byte, E4M3 scale bytes).
What a user writes differs from fourcast's kernels in two places, said where they occur:
the RHT is a float32 matmul by the 16 x 16 matrix (fourcast: f64 butterflies, one rounding),
and SR draws a float32 torch.rand per element (fourcast: Philox, 8-bit uniforms for "sr16").
So only the RTNE peers without an RHT equal fourcast bit for bit (tests/unit/test_peers.py).
"""

from __future__ import annotations

import torch

from fourcast.kernels.utils import FLT_MAX, TE_SIGNS  # numerics.md's constants, one definition


def hadamard16(signs=TE_SIGNS, device=None) -> torch.Tensor:
    """diag(signs) . H16 / 4 (f32): a row block times it is the block's RHT16."""
    h = torch.ones(1, 1)
    while h.shape[0] < 16:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (torch.tensor(signs, dtype=torch.float32)[:, None] * h / 4).to(device)


def _e2m1(a: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
    """|y| (<= 6) onto the E2M1 grid: RTNE (torch.round is half-to-even), or SR with uniforms u."""
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    if u is None:
        return torch.round(a / step) * step
    lo = torch.floor(a / step) * step
    return torch.clamp(lo + step * (u < (a - lo) / step), max=6.0)


def nvfp4_blocks(xf: torch.Tensor, s_enc: torch.Tensor, sr: bool = False):
    """Rows of f32 blocks (n, 16) -> (magnitudes on the E2M1 grid, signs, f32 decode
    scales, E4M3 scales): the TE rule's operation sequence."""
    s_dec = torch.clamp(xf.abs().amax(-1, keepdim=True) * (s_enc * (1 / 6)), max=448.0).to(torch.float8_e4m3fn)
    sd = s_dec.float()
    enc = torch.clamp(1.0 / (sd * (1.0 / s_enc)), max=FLT_MAX)  # a zero scale: x * FLT_MAX, not 0 * inf
    y = torch.clamp(xf * enc, -6.0, 6.0)
    return _e2m1(y.abs(), torch.rand_like(y) if sr else None), torch.signbit(y), sd, s_dec


def tensor_scale(xf: torch.Tensor, amax: torch.Tensor | None) -> torch.Tensor:
    """S_enc = min(448 * 6 / amax, FLT_MAX), amax fresh when not given (delayed)."""
    amax = xf.abs().amax() if amax is None else amax
    # a tensor numerator: PyTorch runs `2688.0 / amax` as 2688 * (1 / amax), one rounding too many
    return torch.clamp(torch.full_like(amax, 2688.0) / amax, max=FLT_MAX)


def pack(q: torch.Tensor, neg: torch.Tensor, s_dec: torch.Tensor, rows: int):
    """E2M1 magnitudes + signs -> codes two a byte (element 2i in the low nibble) and scale bytes."""
    mag = torch.where(q < 2, q * 2, torch.where(q < 4, q + 2, q / 2 + 4)).to(torch.uint8)
    code = (mag | (neg.to(torch.uint8) << 3)).reshape(rows, -1)
    return code[:, 0::2] | (code[:, 1::2] << 4), s_dec.view(torch.uint8).reshape(rows, -1)


def nvfp4_packed(x2: torch.Tensor, s_enc, rht: torch.Tensor | None = None, sr: bool = False):
    """One copy: the rows of a 2-D f32 x2 in blocks of 16, optionally rotated by `rht`
    (hadamard16) first -> (codes, scale bytes)."""
    xf = x2.reshape(-1, 16)
    if rht is not None:
        xf = xf @ rht
    q, neg, _, s_dec = nvfp4_blocks(xf, s_enc, sr)
    return pack(q, neg, s_dec, x2.shape[0])


def nvfp4_rowcol(x: torch.Tensor, amax=None, rht_col: torch.Tensor | None = None, sr: bool = False):
    """Row-wise and column-wise NVFP4 copies of a 2-D x, as fourcast's quantize_rowcol
    returns them (the column copy quantizes x.t()'s rows); one tensor amax for both."""
    xf = x.float()
    s_enc = tensor_scale(xf, amax)
    return nvfp4_packed(xf, s_enc, None, sr), nvfp4_packed(xf.t(), s_enc, rht_col, sr)


def nvfp4_fake_quant(x: torch.Tensor) -> torch.Tensor:
    """Row-wise NVFP4 fake-quant (quantize, dequantize to x.dtype), fresh amax."""
    xf = x.float()
    s_enc = tensor_scale(xf, None)
    q, neg, sd, _ = nvfp4_blocks(xf.reshape(-1, 16), s_enc)
    return (torch.where(neg, -q, q) * sd / s_enc).to(x.dtype).reshape(x.shape)


def nvfp4_pack(x: torch.Tensor):
    """Row-wise codes + E4M3 scale bytes, fresh amax."""
    xf = x.float()
    return nvfp4_packed(xf, tensor_scale(xf, None))


def nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Packed codes (rows, n / 2) -> one code an element (rows, n), int8."""
    return torch.stack([codes & 15, codes >> 4], -1).reshape(codes.shape[0], -1).to(torch.int8)


def signed_steps(codes: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 codes -> each element's signed position on the grid (-7 .. 7; a magnitude
    code is its grid index, so neighbours differ by one)."""
    c = nibbles(codes)
    return torch.where(c >= 8, 8 - c, c)


def agreement(peer, ours, block: int = 16) -> dict:
    """How a peer's (codes, scale bytes) copy compares with fourcast's: the fractions of
    equal codes and equal scale bytes, and whether every element of a block whose scale
    byte agrees sits within one grid step of fourcast's (RTNE and SR both round to one of
    a value's two neighbours, so this holds whenever the scaled values are the same)."""
    (pc, ps), (oc, os_) = peer, ours
    same_scale = (ps == os_).repeat_interleave(block, dim=1)
    gap = (signed_steps(pc).int() - signed_steps(oc).int()).abs()
    return dict(codes_equal=float((nibbles(pc) == nibbles(oc)).float().mean()),
                scales_equal=float((ps == os_).float().mean()),
                within_one_step=bool((gap[same_scale] <= 1).all()))
