"""Fused block-scaled quantizer (Triton): one read of x -> optional RHT -> block amax ->
scale byte -> optional SR -> packed 4-bit (or FP8) codes, row-wise, column-wise, or
both from one read (`quantize_rowcol`). The same kernel writes the dequantized tensor
instead (fake_quant.py) and the inverse, `dequantize`, lives here too.

Each step mirrors reference.py (read them side by side): only exact or correctly
rounded f32 operations (div_rn, bit tricks), so codes, scale bytes, tensor scale and
amax equal the reference bit for bit, SR included (philox.py).

Tensor amax. Power-of-two (MX) formats need none for their scales: it is fused into
the one pass as an atomic max on the f32 bit pattern. Two-level and per-tensor formats
need it BEFORE any code is decided, so a fresh amax costs a first read-only pass of the
same kernel (PASS=0, identical RHT arithmetic, hence identical rotated values); a
caller-supplied `tensor_amax` (periodic / delayed scaling) skips it. Holding x on chip
between the two would need a grid-wide barrier and all of x in SMEM, which 8192^2 bf16
(128 MiB) does not fit.

RHT: signs, then the FWHT butterflies in registers (reshape/permute/split/join) in f64,
the pairing, order and single rounding of the Rust core (reference.rht_lastdim), so the
rotated values, hence the codes, are bit-exact to fc.quantize(fc.rht(x)) too.
RHT_IMPL=1 instead multiplies by the block-diagonal (D H) on the tensor cores (faster
on Hopper; bits then depend on the MMA's summation: tests compare with the ROT output).
"""

from __future__ import annotations

import functools
import math
import struct

import torch
import triton
import triton.language as tl

from fourcast.errors import ShapeError
from fourcast.kernels import launcher, reference
from fourcast.kernels.philox import load_seed, sr_uniform, sr_uniform_group
from fourcast.kernels.utils import (
    NAN_BYTE,
    SCALE_GRIDS,
    SCALE_MIN_NORMAL,
    SCALE_TARGET,
    Packed,
    Spec,
    check_kernel_input,
    check_layout,
    check_rht,
    check_rounding,
    flat2d,
    interpreting,
    normalize_axis,
    parse_fmt,
    seed_arg,
)


SR_GROUP = {"sr4": 4, "sr16": 16}  # uniforms per Philox counter of the grouped SR streams


def _check_sr_group(rounding: str, k: int) -> None:
    """The kernels draw "sr4" ("sr16") uniforms 4 (16) columns at a time (philox.py)."""
    n = SR_GROUP.get(rounding)
    if n and k % n:
        raise ShapeError(f"rounding {rounding} on the GPU kernels needs the quantized length {k} to be a multiple of {n}")


def _cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints (triton.cdiv is a constexpr function: ~10x the host cost)."""
    return -(-a // b)


SCALE_KIND = {"fp32": 0, "ue8m0": 1, "e4m3": 2, "ue5m3": 3}
RULE_ID = {"floor": 0, "rceil": 1, "te": 2, "torchao": 3}
ROUND_ID = {"rtne": 0, "away": 1, "sr": 2, "sr4": 3, "sr16": 4}  # 2-4: SR (philox.py streams)


# ------------------------------------------------------------------ jit helpers

@triton.jit
def _bcast(v, like):
    """v (a scalar, or a tensor of like's shape) in like's shape: tl.full and tl.broadcast_to
    take no layout, which Gluon needs (rowcol_gluon.py calls these helpers); a select of two
    equal operands folds to the splat either would make."""
    return tl.where(like == like, v, v)


# Inline PTX does not run under TRITON_INTERPRET=1: there the helpers below take their
# portable form (the same bits).
_PTX = tl.constexpr(not interpreting())


@triton.jit
def _add_max(b, D: tl.constexpr, C: tl.constexpr):
    """max(b + D, C) on int32, one VIADDMNMX on sm_90: written plainly, LLVM moves the add
    past the max (max(b, C - D) + D) and ptxas emits two instructions."""
    if _PTX:
        return tl.inline_asm_elementwise("{ .reg .s32 t; add.s32 t, $1, $2; max.s32 $0, t, $3; }", "=r,r,r,r",
                                         [b, _bcast(D, b), _bcast(C, b)], dtype=tl.int32, is_pure=True, pack=1)
    else:
        return tl.maximum(b + D, C)


@triton.jit
def _add_sub(x, C: tl.constexpr, y):
    """x + C - y on int32, one IADD3 on sm_90: written plainly, LLVM turns C - y into an XOR
    (y's bits lie under C's) and ptxas emits an XOR and an add."""
    if _PTX:
        return tl.inline_asm_elementwise("{ .reg .s32 t; add.s32 t, $1, $2; sub.s32 $0, t, $3; }", "=r,r,r,r",
                                         [x, _bcast(C, x), y], dtype=tl.int32, is_pure=True, pack=1)
    else:
        return x + C - y


@triton.jit
def _pow2(k):
    """2^k as f32 for int32 k in [-149, 127], from bits (exact, subnormals too)."""
    normal = (tl.minimum(tl.maximum(k, -126), 127) + 127) << 23
    sub = _bcast(1, k) << (tl.minimum(tl.maximum(k, -149), -127) + 149)
    return tl.where(k >= -126, normal, sub).to(tl.float32, bitcast=True)


@triton.jit
def _floor_log2(a):
    return ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def _round_grid(a, u, EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, MODE: tl.constexpr):
    """reference.round_grid: magnitudes 0 <= a <= gmax -> (code magnitude, value)."""
    if FIXED:
        e = _bcast(0, a.to(tl.int32, bitcast=True))
    else:
        e = tl.maximum(_floor_log2(a), EMIN)
    kk = e - MBITS
    step = _pow2(kk)
    r = a * _pow2(-kk)
    n = tl.floor(r)
    frac = r - n
    if MODE == 0:
        odd = (n.to(tl.int32) & 1) == 1
        up = (frac > 0.5) | ((frac == 0.5) & odd)
    elif MODE == 1:
        up = frac >= 0.5
    else:
        up = u * step < a - n * step
    n = n + up.to(tl.float32)
    ni = n.to(tl.int32)
    if FIXED:
        code = ni
    else:
        code = ((e - EMIN) << MBITS) + ni
    return code, n * step


@triton.jit
def _round_elem(a, u, EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, MODE: tl.constexpr):
    """_round_grid for magnitudes 0 <= a <= gmax, RTNE in 4 instructions to the value and
    SR in ~15 instead of ~40 (the same bits: every operation below is exact or the single
    rounding the grid defines).
    RTNE: v = (a + big) - big with big = 2^(max(e, EMIN) + 23 - MBITS), e = floor(log2 a):
    the f32 addition rounds a to the grid step ulp(big) = 2^(max(e, EMIN) - MBITS) once,
    to nearest even (big / step = 2^23 is even), and the subtraction is exact. The code
    is v's bits after scaling by 2^(-126 - EMIN), which lines the grid's exponent field up
    with f32's and its subnormals with f32's subnormals (v is on the grid: exact);
    _rtne_aligned gets that scaled value in one step, the cheaper path to codes.
    Integer grids: a + 2^23 holds the rounded integer in its low bits.
    SR: truncate the significand (normal range) or floor n = a / step (subnormal range
    and integer grids), then step up where u * step < the remainder.
    SR16 (MODE 4; u: the byte b of u = (b + 0.5) / 256, see _round_sr16): in integers."""
    if MODE == 4:
        return _round_sr16(a, u, EMIN, MBITS, FIXED)
    if MODE == 1:
        return _round_grid(a, u, EMIN, MBITS, FIXED, MODE)
    if MODE == 0:
        if FIXED:  # a + 2^23 rounds a to an integer n and holds it in its low bits
            s = a + 8388608.0
            return s.to(tl.int32, bitcast=True) - 0x4B000000, s - 8388608.0
        # big from a's bits: the add-then-max is one VIADDMNMX on sm_90, the mask one LOP3
        D: tl.constexpr = (23 - MBITS) << 23
        b = a.to(tl.int32, bitcast=True)
        big = (_add_max(b, D, ((127 + EMIN) << 23) + D) & 0x7F800000).to(tl.float32, bitcast=True)
        v = (a + big) - big
        code = (v * (2.0 ** (-126 - EMIN))).to(tl.int32, bitcast=True) >> (23 - MBITS)
        return code, v
    SHIFT: tl.constexpr = 23 - MBITS
    INV_STEP: tl.constexpr = 2.0 ** (MBITS - EMIN)
    STEP: tl.constexpr = 2.0 ** (EMIN - MBITS)
    t = a * INV_STEP  # exact: a power of two
    n0 = t.to(tl.int32)  # floor: t >= 0
    n = n0 + (u < t - n0.to(tl.float32)).to(tl.int32)  # u*step < a - n0*step, scaled by 1/step
    if FIXED:
        return n, n.to(tl.float32)
    b = a.to(tl.int32, bitcast=True)
    LOW: tl.constexpr = (1 << SHIFT) - 1
    tb = b & ~LOW
    step = ((b & 0x7F800000) - (MBITS << 23)).to(tl.float32, bitcast=True)
    up = u * step < a - tb.to(tl.float32, bitcast=True)
    rb = tb + (up.to(tl.int32) << SHIFT)  # a carry into the exponent is the next binade's code
    sub = a < 2.0 ** EMIN
    code = tl.where(sub, n, (rb >> SHIFT) - ((127 + EMIN - 1) << MBITS))
    value = tl.where(sub, n.to(tl.float32) * STEP, rb.to(tl.float32, bitcast=True))
    return code, value


@triton.jit
def _rtne_aligned(a, EMIN: tl.constexpr, MBITS: tl.constexpr):
    """_round_elem's RTNE for magnitudes 0 <= a <= gmax as (code magnitude, v * 2^K), K =
    -126 - EMIN: the code in 5 instructions where _round_elem takes 7 (VIADDMNMX, LOP3,
    FFMA, FADD, SHF). With big' = 2^(max(e, EMIN) + K + 23 - MBITS), the fused
    a * 2^K + big' rounds the exact a * 2^K (an f32 subnormal below 2^EMIN) once, to the
    grid step times 2^K = ulp(big'), to nearest even; subtracting big' is exact and leaves
    v * 2^K, whose bits are the code (see _round_elem). Needs a fused multiply-add that
    rounds once with subnormal products: the GPU's FFMA, and the interpreter's in Triton
    3.9 (3.6's rounds twice; tests/interpret/test_rtne_forms.py checks it)."""
    K: tl.constexpr = -126 - EMIN
    D: tl.constexpr = (K + 23 - MBITS) << 23
    b = a.to(tl.int32, bitcast=True)
    big = (_add_max(b, D, ((127 + EMIN) << 23) + D) & 0x7F800000).to(tl.float32, bitcast=True)
    v_al = tl.fma(a, 2.0 ** K, big) - big
    return v_al.to(tl.int32, bitcast=True) >> (23 - MBITS), v_al


@triton.jit
def _round_sr16(a, byte, EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr):
    """_round_elem's SR for u = (byte + 0.5) / 256 = t / 512, t = 2 byte + 1, in integers:
    the float form's bits (tests/interpret/test_sr16_integer.py, at every threshold), with
    no float uniform and no float compare. The issue-bound dY call (sr16, both copies):
    106.5 -> 92 SASS per element, 12% faster on the H200 (kernels-h200.md, session 11);
    _sr16_aligned's form (session 21) takes it lower.
    Integer grids: with T = a * 512 (exact) and n0 = floor(T / 512), step up iff T > 512 n0
    + t, i.e. ceil(T) > 512 n0 + t (t is an integer), which gives n = (ceil(T) - 1 - t +
    512) >> 9."""
    if FIXED:
        t = 2 * byte + 1
        n = (tl.math.ceil(a * 512.0).to(tl.int32) + 511 - t) >> 9
        return n, n.to(tl.float32)
    code, v_al = _sr16_aligned(a, byte, EMIN, MBITS)
    return code, v_al * (2.0 ** (126 + EMIN))


@triton.jit
def _sr16_aligned(a, byte, EMIN: tl.constexpr, MBITS: tl.constexpr):
    """"sr16" of magnitudes 0 <= a <= gmax on a floating grid as (code magnitude, v * 2^K),
    K = -126 - EMIN (as _rtne_aligned), in integers on the bits of a * 2^K rounded up:
    - a * 2^K lines the grid up with f32 (its subnormal range with f32's subnormals), so
      the grid step is 2^SHIFT units of the last bit, SHIFT = 23 - MBITS, in both ranges;
    - rounded up (mul.rp), its bits are ceil(a * 2^(149 + K)): exact in the normal range,
      and in the subnormal range the integer the strict compare needs (for an integer m,
      m < R iff m < ceil(R));
    - step up iff u * step < rem, i.e. (t << (SHIFT - 9)) < rem in those units, iff
      bits + LOW - (t << (SHIFT - 9)) carries into bit SHIFT (LOW = 2^SHIFT - 1): masked,
      that is v * 2^K's bits, and shifted, the code (a carry into the next binade is its
      code, as with _rtne_aligned).
    Four instructions where the two-range form took about ten, two of them conversions."""
    SHIFT: tl.constexpr = 23 - MBITS
    LOW: tl.constexpr = (1 << SHIFT) - 1
    K: tl.constexpr = -126 - EMIN
    b_al = _mul_up(a, 2.0 ** K, EMIN)
    rb = _add_sub(b_al, LOW - (1 << (SHIFT - 9)), byte << (SHIFT - 8)) & ~LOW  # + LOW - (t << (SHIFT - 9))
    return rb >> SHIFT, rb.to(tl.float32, bitcast=True)


@triton.jit
def _mul_up(a, scale: tl.constexpr, EMIN: tl.constexpr):
    """The bits of a * scale (a >= 0, scale = 2^(-126 - EMIN)) rounded toward +inf: one
    mul.rp on the GPU; under the interpreter (no inline PTX) ceil(a * 2^(23 - EMIN)) below
    2^EMIN (a subnormal product) and the exact product's bits above."""
    if _PTX:
        return tl.inline_asm_elementwise("mul.rp.f32 $0, $1, $2;", "=r,f,f", [a, _bcast(scale, a)], dtype=tl.int32,
                                         is_pure=True, pack=1)
    else:
        # clamped: above 2^EMIN this branch is not taken, and its int32 must not overflow
        sub = tl.math.ceil(tl.minimum(a, 2.0 ** EMIN) * (2.0 ** (23 - EMIN))).to(tl.int32)
        return tl.where(a < 2.0 ** EMIN, sub, (a * scale).to(tl.int32, bitcast=True))


@triton.jit
def _block_max(t, BM: tl.constexpr, BK: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr):
    """Per-block max of an int32 [BM, BK] tile: [BM, BK/B], or [BM/16, BK/16] tiles."""
    if TILE2D:
        return tl.max(tl.max(tl.reshape(t, (BM // 16, 16, BK // 16, 16)), axis=3), axis=1)
    else:
        return tl.max(tl.reshape(t, (BM, BK // B, B)), axis=2)


@triton.jit
def _expand(s, BM: tl.constexpr, BK: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr, TILE_K: tl.constexpr = 16):
    """Per-block values back to [BM, BK] (16 x TILE_K tiles for TILE2D)."""
    if TILE2D:
        s4 = tl.broadcast_to(tl.reshape(s, (BM // 16, 1, BK // TILE_K, 1)), (BM // 16, 16, BK // TILE_K, TILE_K))
        return tl.reshape(s4, (BM, BK))
    else:
        return tl.reshape(tl.broadcast_to(tl.reshape(s, (BM, BK // B, 1)), (BM, BK // B, B)), (BM, BK))


@triton.jit
def _fwht(y, BM: tl.constexpr, BK: tl.constexpr, LOG2N: tl.constexpr):
    """Unnormalised Walsh-Hadamard butterflies along dim 1 in blocks of 2^LOG2N, in the
    order of reference.rht_lastdim: stage h pairs (i, i + h) inside groups of 2h."""
    for s in tl.static_range(LOG2N):
        y4 = tl.permute(tl.reshape(y, (BM, BK // (2 << s), 2, 1 << s)), (0, 1, 3, 2))
        a, b = tl.split(y4)
        y = tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2)), (BM, BK))
    return y


@triton.jit
def _rotate(x, k, SIGNS, HMAT, rht_scale, BM: tl.constexpr, BK: tl.constexpr, RHT_N: tl.constexpr,
            LOG2N: tl.constexpr, RHT_IMPL: tl.constexpr, DOT_BF16: tl.constexpr, RHT_NORM: tl.constexpr):
    """RHT of an f32 tile along dim 1 (k: the tile's column indices).
    RHT_IMPL 0: reference.rht_lastdim exactly (f64 butterflies, times RHT_NORM = the f64
    1.0 / sqrt(n) computed on the host, one rounding to f32): the Rust core's arithmetic.
    RHT_IMPL 1: one dot with the block-diagonal (D H) (tensor cores for bf16 input),
    times f32 rht_scale: faster, bits depend on the MMA's summation."""
    if RHT_IMPL == 0:
        s = tl.load(SIGNS + (k % RHT_N)).to(tl.float64)
        y = _fwht(x.to(tl.float64) * s, BM, BK, LOG2N)
        return (y * tl.full((1, 1), RHT_NORM, tl.float64)).to(tl.float32)
    else:
        rows = tl.arange(0, BK)[:, None]
        cols = tl.arange(0, BK)[None, :]
        h = tl.load(HMAT + rows * BK + cols)
        if DOT_BF16:
            y = tl.dot(x.to(tl.bfloat16), h.to(tl.bfloat16))
        else:
            y = tl.dot(x, h, input_precision="ieee")
        return y * rht_scale


@triton.jit
def _with_sign(v, neg):
    """v (>= 0, f32) with its sign bit set where neg: -0.0 for a zero magnitude too.
    (Triton 3.6 lowers float negation as 0 - x, which turns -(+0.0) into +0.0; measured
    on the H200 run of 2026-12-02, where only the sign of zero differed.)"""
    sign = tl.where(neg, -2147483648, 0).to(tl.int32)
    return (v.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _finite(v):
    return tl.abs(v) <= 3.4028234663852886e38


@triton.jit
def _nonfinite(v):
    return (v != v) | (tl.abs(v) > 3.4028234663852886e38)


@triton.jit
def _tensor_scales(amax, PER_TENSOR: tl.constexpr, RULE: tl.constexpr, NUM: tl.constexpr):
    """(S_enc, the decode scale) from the tensor amax (reference.tensor_encode_scale): the
    decode scale is torchao's pts, or TE's 1 / S_enc (what _block_scales divides by; here
    once a program, where per block LLVM left it inside a looped kernel's loop)."""
    one = _bcast(1.0, amax)
    num = _bcast(NUM * 1.0, amax)
    if RULE == 3 and not PER_TENSOR:
        pts = tl.math.div_rn(amax, num)
        pts = tl.where((pts == 0) | _nonfinite(pts) | _nonfinite(tl.math.div_rn(one, pts)), one, pts)
        return tl.math.div_rn(one, pts), pts
    elif RULE == 2 or PER_TENSOR:
        s = tl.minimum(tl.math.div_rn(num, amax), 3.4028234663852886e38)
        bad = (amax == 0) | (s == 0) | _nonfinite(amax)
        s = tl.where(bad, one, s)
        if PER_TENSOR:
            return s, one
        return s, tl.math.div_rn(one, s)
    else:
        return one, one


@triton.jit
def _block_scales(bmax_bits, s_enc, s_dec, GMAX: tl.constexpr, EMAX: tl.constexpr, SCALE: tl.constexpr,
                  RULE: tl.constexpr, S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, S_GMAX: tl.constexpr,
                  S_MIN: tl.constexpr, NANB: tl.constexpr):
    """Per block, from the bits of its amax (any shape) and the tensor's scales (_tensor_scales:
    S_enc and the decode scale): (scale byte, multiplier taking x to the grid, decoded scale
    (NaN for a non-finite block), non-finite flag)."""
    bad = bmax_bits >= 0x7F800000
    bamax = tl.where(bad, 0.0, bmax_bits.to(tl.float32, bitcast=True))
    if SCALE == 1:  # ue8m0
        if RULE == 0:
            e = _floor_log2(bamax) - EMAX
        else:  # rceil (reference.rceil_exponent)
            t = (bamax * (1.0 / GMAX)).to(tl.int32, bitcast=True)
            field = (t >> 23) & 0xFF
            man = t & 0x7FFFFF
            byte = tl.where(field == 0, (man > 0x400000).to(tl.int32),
                            tl.minimum(field + (man != 0).to(tl.int32), 254))
            e = byte - 127
        e = tl.minimum(tl.maximum(e, -127), 127)
        sbytes = e + 127
        sv = _pow2(e)
        mult = _pow2(-e)
    elif RULE == 2:  # te
        s_blk = bamax * (s_enc * (1.0 / GMAX))
        sbytes, sv = _round_elem(tl.minimum(s_blk, S_GMAX), s_blk, S_EMIN, S_MBITS, False, 0)
        mult = tl.minimum(tl.math.div_rn(_bcast(1.0, sv), sv * s_dec), 3.4028234663852886e38)  # s_dec = 1 / S_enc
    else:  # torchao
        gm = _bcast(GMAX * 1.0, bamax)
        s = tl.math.div_rn(tl.math.div_rn(bamax, gm), _bcast(s_dec, bamax))  # s_dec = pts
        s = tl.minimum(tl.maximum(s, S_MIN), S_GMAX)
        sbytes, sv = _round_elem(s, s, S_EMIN, S_MBITS, False, 0)
        mult = tl.math.div_rn(_bcast(s_enc, sv), sv)
    return tl.where(bad, NANB, sbytes), mult, tl.where(bad, float("nan"), sv), bad


@triton.jit
def _quant_elems(y, mult, sval, bad_elem, ts, u, EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr,
                 TWOS: tl.constexpr, BITS: tl.constexpr, GMAX: tl.constexpr, MODE: tl.constexpr,
                 UNSCALED: tl.constexpr, CODES: tl.constexpr = True, SIGNED: tl.constexpr = True):
    """Elementwise: codes (int32) and x_hat of y given its block's multiplier and decoded
    scale (broadcast to y's shape). UNSCALED: x_hat without the tensor scale, value *
    scale, exact (a GEMM epilogue divides the tensor scales out). CODES: the caller
    writes the codes (RTNE on a floating grid takes _rtne_aligned's path, the cheaper
    one for codes; else _round_elem's, the cheaper one for x_hat): the same bits either way.
    "sr16" on a floating grid takes _sr16_aligned's path either way.
    A 4-bit code is the low 4 bits of its int32; on the aligned paths bits 8 and up may be
    set (callers pack codes into bytes and keep the byte). SIGNED False: x_hat's magnitude
    (the caller puts y's sign bits back on its 16-bit words at once)."""
    q = y * mult  # a non-finite block's garbage is masked below (codes 0, x_hat NaN)
    a = tl.minimum(tl.abs(q), GMAX)
    ALIGNED: tl.constexpr = (CODES and MODE == 0 or MODE == 4) and not FIXED
    if ALIGNED:
        if MODE == 4:
            mag, v_al = _sr16_aligned(a, u, EMIN, MBITS)
        else:
            mag, v_al = _rtne_aligned(a, EMIN, MBITS)
        val = v_al * (2.0 ** (126 + EMIN))
    else:
        mag, val = _round_elem(a, u, EMIN, MBITS, FIXED, MODE)
    qb = q.to(tl.int32, bitcast=True)
    if TWOS:  # two's complement has no -0: the decoded zero is +0
        neg = qb < 0
        codes = tl.where(neg, (0 - mag) & 0xF, mag)
        val = _with_sign(val, neg & (mag != 0))
    else:  # the sign bit of q onto the code's top bit and onto the value
        if ALIGNED and BITS == 4:
            # v * 2^K holds the code magnitude in bits 23 - MBITS .. 25 - MBITS and nothing else:
            # with q's sign bit OR'ed in, one IMAD.HI by 2^(9 + MBITS) + 2^4 moves those bits
            # to 0 .. 2 and the sign to 3 (no two images overlap, so no carries; the sign's
            # other image lands at bit 8 + MBITS), where two shifts and a LOP3 did. A
            # non-finite block multiplies by 0 (its codes 0): a select a block, not a code.
            w = (v_al.to(tl.int32, bitcast=True) | (qb & -2147483648)).to(tl.uint32, bitcast=True)
            k = tl.where(bad_elem, 0, (1 << (9 + MBITS)) + 16).to(tl.uint32)
            codes = tl.umulhi(w, k).to(tl.int32, bitcast=True)
        else:
            codes = tl.where(bad_elem, 0, mag | ((qb >> (32 - BITS)) & (1 << (BITS - 1))))
        if SIGNED:
            val = (val.to(tl.int32, bitcast=True) | (qb & -2147483648)).to(tl.float32, bitcast=True)
    if TWOS:
        codes = tl.where(bad_elem, 0, codes)
    if UNSCALED:
        xhat = val * sval
    else:
        xhat = tl.math.div_rn(val * sval, _bcast(ts, val))
    return codes, xhat


@triton.jit
def _quant_tile(y, m, k, k0, M, K, amax, seed, offset,
                EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
                BITS: tl.constexpr, GMAX: tl.constexpr, EMAX: tl.constexpr,
                SCALE: tl.constexpr, RULE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, S_GMAX: tl.constexpr, S_MIN: tl.constexpr,
                NUM: tl.constexpr, NANB: tl.constexpr, MODE: tl.constexpr,
                BM: tl.constexpr, BK: tl.constexpr, UNSCALED: tl.constexpr = False, CODES: tl.constexpr = True):
    """Quantize an f32 [BM, BK] tile of the (M, K) layout along K (reference.quantize_layout);
    k0: the tile's first column (k = k0 + 0 .. BK). Returns (codes int32 [BM, BK], x_hat f32
    [BM, BK], scale bytes per block, tensor scale); CODES: the codes are written (_quant_elems)."""
    PER_TENSOR: tl.constexpr = SCALE == 0
    s_enc, s_dec = _tensor_scales(amax, PER_TENSOR, RULE, NUM)
    if PER_TENSOR:
        bad_elem = tl.broadcast_to(_nonfinite(amax), y.shape)
        mult = tl.broadcast_to(s_enc, y.shape)
        sval = tl.full(y.shape, 1.0, tl.float32)
        sbytes = tl.zeros((1, 1), tl.int32)
        ts = tl.where(_finite(amax), s_enc, float("nan"))
    else:
        bmax_bits = _block_max(tl.abs(y).to(tl.int32, bitcast=True), BM, BK, B, TILE2D)
        sbytes, mult_b, sv, bad = _block_scales(bmax_bits, s_enc, s_dec, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS,
                                                S_GMAX, S_MIN, NANB)
        mult = _expand(mult_b, BM, BK, B, TILE2D)
        sval = _expand(sv, BM, BK, B, TILE2D)
        bad_elem = _expand(bad.to(tl.int32), BM, BK, B, TILE2D) != 0
        ts = s_enc
    if MODE == 2:
        u = sr_uniform(seed, m, k, K, offset)
    elif MODE >= 3:  # 3: sr4, 4: sr16
        u = sr_uniform_group(seed, m, k0, K, offset, BM, BK, 4 if MODE == 3 else 16)
    else:
        u = y
    codes, xhat = _quant_elems(y, mult, sval, bad_elem, ts, u, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE, UNSCALED,
                               CODES)
    return codes, xhat, sbytes, ts


@triton.jit
def _cast_out(v, PTR, RNE_BF16: tl.constexpr):
    """v (f32) in PTR's element type. The GPU's f32->bf16 cast rounds to nearest even;
    Triton's CPU interpreter truncates, so under it (RNE_BF16) the rounding is done on
    the bits: + 0x7FFF + lsb, keep the top half (finite values and canonical NaN)."""
    if RNE_BF16 and PTR.dtype.element_ty == tl.bfloat16:
        b = v.to(tl.uint32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        return b.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(PTR.dtype.element_ty)


@triton.jit
def _store_codes(CODES, codes, m, k, M, K, pid_k, BITS: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    """Codes of tile column `pid_k`: packed two per byte (element 2i low nibble) or FP8 bytes."""
    if BITS == 4:
        lo, hi = tl.split(tl.reshape(codes, (BM, BK // 2, 2)))
        packed = (lo + (hi << 4)).to(tl.uint8)  # disjoint nibbles: an add is one LEA
        k2 = pid_k * (BK // 2) + tl.arange(0, BK // 2)[None, :]
        tl.store(CODES + m * (K // 2) + k2, packed, mask=(m < M) & (k2 < K // 2))
    else:
        tl.store(CODES + m * K + k, codes.to(tl.uint8), mask=(m < M) & (k < K))


# The scale byte stores' L2 policy (every quantizer kernel's). A tile writes a few bytes of
# each 32-byte sector of scale bytes, which 2-8 programs share: written back before its
# neighbours' pieces arrive, a partial sector costs DRAM a read-modify-write; kept in L2
# (evict_last) the pieces merge first. Session 28 (H100, 8192^2): the row+col io floor 90.2 ->
# 81.4 us (77.8 without scale bytes), rowcol_gluon's X call 125.5 -> 117.5 us; this module's
# one-copy NVFP4 call 82.5 -> 81.9, MXFP4 91.0 -> 89.7, strip.py's X call 150.4 -> 148.6 (the
# RHT and "sr16" calls, issue-bound, within 0.8 us).
SCALE_L2: tl.constexpr = tl.constexpr("evict_last")


@triton.jit
def _store_scales(SCALES, sbytes, M, K, pid_m, pid_k, B: tl.constexpr, TILE2D: tl.constexpr, BM: tl.constexpr,
                  BK: tl.constexpr):
    if TILE2D:
        r = pid_m * (BM // 16) + tl.arange(0, BM // 16)[:, None]
        c = pid_k * (BK // 16) + tl.arange(0, BK // 16)[None, :]
        tl.store(SCALES + r * (K // 16) + c, sbytes.to(tl.uint8), mask=(r < M // 16) & (c < K // 16),
                 eviction_policy=SCALE_L2)
    else:
        r = pid_m * BM + tl.arange(0, BM)[:, None]
        c = pid_k * (BK // B) + tl.arange(0, BK // B)[None, :]
        tl.store(SCALES + r * (K // B) + c, sbytes.to(tl.uint8), mask=(r < M) & (c < K // B),
                 eviction_policy=SCALE_L2)


# ------------------------------------------------------------------ kernels

@triton.jit
def _quantize_kernel(X, CODES, SCALES, XHAT, ROT, AMAX_BITS, AMAX_IN, TS_OUT, SIGNS, HMAT,
                     M, K, s_m, s_k, seed, offset, rht_scale,
                     EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
                     BITS: tl.constexpr, GMAX: tl.constexpr, EMAX: tl.constexpr,
                     SCALE: tl.constexpr, RULE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                     S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, S_GMAX: tl.constexpr, S_MIN: tl.constexpr,
                     NUM: tl.constexpr, NANB: tl.constexpr, MODE: tl.constexpr,
                     PASS: tl.constexpr, FUSE_AMAX: tl.constexpr, WRITE_CODES: tl.constexpr,
                     WRITE_XHAT: tl.constexpr, WRITE_ROT: tl.constexpr,
                     RHT_N: tl.constexpr, LOG2N: tl.constexpr, RHT_IMPL: tl.constexpr, DOT_BF16: tl.constexpr,
                     RNE_BF16: tl.constexpr, RHT_NORM: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                     UNSCALED: tl.constexpr = False, SEED_PTR: tl.constexpr = False):
    """One [BM, BK] tile of the (M, K) layout (x viewed through strides s_m, s_k).
    PASS 0: tensor amax only (atomic max of |y| bits: NaN > Inf > finite, so NaN wins).
    PASS 1: quantize; codes/scales and/or x_hat (written through x's strides)."""
    m = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    k = tl.program_id(1) * BK + tl.arange(0, BK)[None, :]
    inb = (m < M) & (k < K)
    x = tl.load(X + m * s_m + k * s_k, mask=inb, other=0.0).to(tl.float32)
    if RHT_N > 0:
        y = _rotate(x, k, SIGNS, HMAT, rht_scale, BM, BK, RHT_N, LOG2N, RHT_IMPL, DOT_BF16, RHT_NORM)
    else:
        y = x
    if PASS == 0 or FUSE_AMAX:
        tmax = tl.max(tl.max(tl.abs(y).to(tl.int32, bitcast=True), axis=1), axis=0)
        tl.atomic_max(AMAX_BITS, tmax)
    if PASS == 1:
        if WRITE_ROT:
            tl.store(ROT + m * K + k, y, mask=inb)
        amax = tl.load(AMAX_IN).to(tl.float32)
        seed = load_seed(seed, SEED_PTR)
        codes, xhat, sbytes, ts = _quant_tile(
            y, m, k, tl.program_id(1) * BK, M, K, amax, seed, offset, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B,
            TILE2D, S_EMIN, S_MBITS, S_GMAX, S_MIN, NUM, NANB, MODE, BM, BK, UNSCALED, WRITE_CODES)
        if WRITE_CODES:
            _store_codes(CODES, codes, m, k, M, K, tl.program_id(1), BITS, BM, BK)
            if SCALE != 0:
                _store_scales(SCALES, sbytes, M, K, tl.program_id(0), tl.program_id(1), B, TILE2D, BM, BK)
        if WRITE_XHAT:
            tl.store(XHAT + m * s_m + k * s_k, _cast_out(xhat, XHAT, RNE_BF16), mask=inb)
        if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
            tl.store(TS_OUT, ts)


@triton.jit
def _rowcol_kernel(X, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, AMAX_BITS, AMAX_IN_R, AMAX_IN_C, TS_OUT,
                   SIGNS_R, SIGNS_C, R, C, seed, offset_r, offset_c, scale_r, scale_c,
                   EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
                   BITS: tl.constexpr, GMAX: tl.constexpr, EMAX: tl.constexpr,
                   SCALE: tl.constexpr, RULE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                   S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, S_GMAX: tl.constexpr, S_MIN: tl.constexpr,
                   NUM: tl.constexpr, NANB: tl.constexpr, MODE_R: tl.constexpr, MODE_C: tl.constexpr,
                   PASS: tl.constexpr, FUSE_AMAX: tl.constexpr, WRITE_CODES: tl.constexpr,
                   WRITE_XHAT: tl.constexpr, RN_R: tl.constexpr, LOG2N_R: tl.constexpr, RN_C: tl.constexpr,
                   LOG2N_C: tl.constexpr, RNE_BF16: tl.constexpr, NORM_R: tl.constexpr, NORM_C: tl.constexpr,
                   BR: tl.constexpr, BC: tl.constexpr, UNSCALED: tl.constexpr = False,
                   SEED_PTR: tl.constexpr = False):
    """Row-wise (blocks along C) AND column-wise (blocks along R: x^T's layout) copies of a
    row-major (R, C) x from ONE read of each [BR, BC] tile. Each copy has its own RHT,
    rounding and tensor amax (AMAX_BITS[0] row, [1] col); x_hat of both in x's orientation."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    r = pid_r * BR + tl.arange(0, BR)[:, None]
    c = pid_c * BC + tl.arange(0, BC)[None, :]
    inb = (r < R) & (c < C)
    x = tl.load(X + r * C + c, mask=inb, other=0.0).to(tl.float32)
    # row copy: layout (R, C), tile [BR, BC]
    if RN_R > 0:
        yr = _rotate(x, c, SIGNS_R, SIGNS_R, scale_r, BR, BC, RN_R, LOG2N_R, 0, False, NORM_R)
    else:
        yr = x
    # column copy: layout (C, R), tile [BC, BR] = x^T
    mt = pid_c * BC + tl.arange(0, BC)[:, None]
    kt = pid_r * BR + tl.arange(0, BR)[None, :]
    xt = tl.trans(x)
    if RN_C > 0:
        yc = _rotate(xt, kt, SIGNS_C, SIGNS_C, scale_c, BC, BR, RN_C, LOG2N_C, 0, False, NORM_C)
    else:
        yc = xt
    if PASS == 0 or FUSE_AMAX:
        tl.atomic_max(AMAX_BITS, tl.max(tl.max(tl.abs(yr).to(tl.int32, bitcast=True), axis=1), axis=0))
        tl.atomic_max(AMAX_BITS + 1, tl.max(tl.max(tl.abs(yc).to(tl.int32, bitcast=True), axis=1), axis=0))
    if PASS == 1:
        seed = load_seed(seed, SEED_PTR)
        amax_r = tl.load(AMAX_IN_R).to(tl.float32)
        amax_c = tl.load(AMAX_IN_C).to(tl.float32)
        codes, xhat, sbytes, ts_r = _quant_tile(
            yr, r, c, pid_c * BC, R, C, amax_r, seed, offset_r, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B,
            TILE2D, S_EMIN, S_MBITS, S_GMAX, S_MIN, NUM, NANB, MODE_R, BR, BC, UNSCALED)
        if WRITE_CODES:
            _store_codes(CODES_R, codes, r, c, R, C, pid_c, BITS, BR, BC)
            if SCALE != 0:
                _store_scales(SCALES_R, sbytes, R, C, pid_r, pid_c, B, TILE2D, BR, BC)
        if WRITE_XHAT:
            tl.store(XHAT_R + r * C + c, _cast_out(xhat, XHAT_R, RNE_BF16), mask=inb)
        codes, xhat, sbytes, ts_c = _quant_tile(
            yc, mt, kt, pid_r * BR, C, R, amax_c, seed, offset_c, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B,
            TILE2D, S_EMIN, S_MBITS, S_GMAX, S_MIN, NUM, NANB, MODE_C, BC, BR, UNSCALED)
        if WRITE_CODES:
            _store_codes(CODES_C, codes, mt, kt, C, R, pid_r, BITS, BC, BR)
            if SCALE != 0:
                _store_scales(SCALES_C, sbytes, C, R, pid_c, pid_r, B, TILE2D, BC, BR)
        if WRITE_XHAT:
            tl.store(XHAT_C + r * C + c, _cast_out(tl.trans(xhat), XHAT_C, RNE_BF16), mask=inb)
        if (pid_r == 0) & (pid_c == 0):
            tl.store(TS_OUT, ts_r)
            tl.store(TS_OUT + 1, ts_c)


@triton.jit
def _dequantize_kernel(CODES, SCALES, TS, OUT, M, K, s_m, s_k,
                       EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
                       BITS: tl.constexpr, FP8: tl.constexpr, SCALE: tl.constexpr, B: tl.constexpr,
                       TILE2D: tl.constexpr, S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, NANB: tl.constexpr,
                       RNE_BF16: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, K_FAST: tl.constexpr,
                       UNSCALED: tl.constexpr, ASM: tl.constexpr):
    """x_hat = value(code) * f32(scale) / tensor_scale (reference.dequantize_layout),
    written to OUT through strides (s_m, s_k) (the original orientation). K_FAST:
    neighbouring programs take neighbouring column tiles (dequant_config). Scale bytes
    are loaded and decoded once per block, then broadcast. UNSCALED: TS is 1 (value *
    block scale, what a GEMM consumes): the division, exact then, is skipped.
    ASM (not ""): the GEMM's PTX table decode (gemm.decode_asm, bf16) for a 4-bit
    sign-magnitude grid decoded unscaled to bf16: four code bytes -> eight values times
    their block scales in a dozen instructions, where the generic decode takes ~27 SASS
    per element (kernels-h200.md, session 7). The same bits: value * scale is exact in
    bf16 (gemm.py), and the scale is the generic decode's, converted exactly to bf16."""
    if K_FAST:
        pid_m, pid_k = tl.program_id(1), tl.program_id(0)
    else:
        pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    m = pid_m * BM + tl.arange(0, BM)[:, None]
    k = pid_k * BK + tl.arange(0, BK)[None, :]
    inb = (m < M) & (k < K)
    if BITS == 4:
        k2 = pid_k * (BK // 2) + tl.arange(0, BK // 2)[None, :]
        byte = tl.load(CODES + m * (K // 2) + k2, mask=(m < M) & (k2 < K // 2), other=0)
    if SCALE != 0:
        if TILE2D:  # one byte per 16 x 16 tile: [BM / 16, BK / 16]
            mt = pid_m * (BM // 16) + tl.arange(0, BM // 16)[:, None]
            kt = pid_k * (BK // 16) + tl.arange(0, BK // 16)[None, :]
            sb = tl.load(SCALES + mt * (K // 16) + kt, mask=(mt < (M + 15) // 16) & (kt < K // 16), other=0)
        else:  # one byte per block of B along the row: [BM, BK / B]
            kb = pid_k * (BK // B) + tl.arange(0, BK // B)[None, :]
            sb = tl.load(SCALES + m * (K // B) + kb, mask=(m < M) & (kb < K // B), other=0)
        sv = _scale_f32(sb, SCALE, S_EMIN, S_MBITS, NANB)
    if ASM != "":  # the low- and high-nibble values of the code bytes times their block's
        # scale (exact in bf16: <= 4 significant bits; a block of B elements is B / 2 bytes)
        s = _expand(sv.to(tl.bfloat16), BM, BK // 2, B // 2, TILE2D, 8)
        lo, hi = tl.inline_asm_elementwise(ASM, "=r,=r,=r,=r,r,r,r", [byte, s],
                                           dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
        tl.store(OUT + m * s_m + k * s_k, tl.reshape(tl.join(lo, hi), (BM, BK)), mask=inb)
        return
    if BITS == 4:
        c = byte.to(tl.int32)
        c = tl.reshape(tl.join(c & 0xF, c >> 4), (BM, BK))
    else:
        c = tl.load(CODES + m * K + k, mask=inb, other=0).to(tl.int32)
    v = _decode(c, EMIN, MBITS, FIXED, TWOS, BITS, FP8)
    if SCALE != 0:
        v = v * _expand(sv, BM, BK, B, TILE2D)
    if not UNSCALED:
        v = tl.math.div_rn(v, tl.broadcast_to(tl.load(TS), v.shape))
    tl.store(OUT + m * s_m + k * s_k, _cast_out(v, OUT, RNE_BF16), mask=inb)


@triton.jit
def _scale_f32(sb, SCALE: tl.constexpr, S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, NANB: tl.constexpr):
    """Scale bytes -> f32 as reference.decode_scale: UE8M0 2^(b - 127), E4M3 with its sign
    bit (a byte past 0x7F, which only foreign input has, is a negative scale), UE5M3
    unsigned; the NaN byte NaN."""
    b = sb.to(tl.int32)
    if SCALE == 1:
        sv = _pow2(b - 127)
    elif SCALE == 2:
        sv = _decode(b, S_EMIN, S_MBITS, False, False, 8, 1)
    else:
        sv = _decode(b, S_EMIN, S_MBITS, False, False, 9, 0)
    return tl.where(b == NANB, float("nan"), sv)


@triton.jit
def _decode(c, EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
            BITS: tl.constexpr, FP8: tl.constexpr):
    """reference.decode_codes. BITS=9 means an unsigned 8-bit scale code (no sign bit).
    FP8: 1 = E4M3 (0x7F NaN), 2 = E5M2 (0x7C Inf, above NaN); the quantizer never
    produces those codes, they only matter for foreign input."""
    if TWOS:
        v = tl.where(c >= 8, c - 16, c).to(tl.float32)
    else:
        if BITS == 9:
            mag = c
            neg = c < 0
        else:
            mag = c & ((1 << (BITS - 1)) - 1)
            neg = ((c >> (BITS - 1)) & 1) == 1
        if FIXED:
            v = mag.to(tl.float32)
        else:
            ef = mag >> MBITS
            mm = mag & ((1 << MBITS) - 1)
            sub = ef == 0
            e = tl.where(sub, EMIN, ef + EMIN - 1)
            n = tl.where(sub, mm, mm + (1 << MBITS))
            v = n.to(tl.float32) * _pow2(e - MBITS)
        if FP8 == 1:
            v = tl.where(mag == 0x7F, float("nan"), v)
        if FP8 == 2:
            v = tl.where(mag == 0x7C, float("inf"), tl.where(mag > 0x7C, float("nan"), v))
        v = _with_sign(v, neg)
    return v


# ------------------------------------------------------------------ host side

CONFIG_OVERRIDE: dict = {}


def config(spec: Spec, rht_n: int, axis: int):
    """(BM, BK, warps) of the one-layout quantizer. A memory-bound elementwise kernel:
    4K elements per program, 16 per thread with 8 warps (ptxas, sm_90a, compiled here:
    64x64/8 warps with SR needs 151 registers and no spills, 128x64/4 warps spills);
    BK covers the block and the RHT size; BM a multiple of 16 for 2D tiles.
    benchmarks/kernels.py times alternatives through CONFIG_OVERRIDE. One config, no
    autotune, so the interpreter and the GPU run the same code (interpreter: 16x32)."""
    if "cfg" in CONFIG_OVERRIDE:
        bm, bk, w = CONFIG_OVERRIDE["cfg"]
        return bm, max(bk, rht_n), w
    bk = max(64, rht_n)
    bm = max(16, 4096 // bk)
    if interpreting():
        bm, bk = 16, max(32, rht_n)
    return bm, bk, 8


_CONSTEXPRS: dict[tuple, dict] = {}


def _constexprs(spec: Spec, rounding: str) -> dict:
    """The kernel's format constexprs (a fresh dict; built once per (spec, rounding))."""
    cached = _CONSTEXPRS.get((spec, rounding))
    if cached is None:
        cached = _CONSTEXPRS[(spec, rounding)] = _make_constexprs(spec, rounding)
    return dict(cached)


def _make_constexprs(spec: Spec, rounding: str) -> dict:
    g = spec.grid
    sg = SCALE_GRIDS.get(spec.scale, SCALE_GRIDS["e4m3"])
    if spec.per_tensor:
        num = g.gmax
    elif spec.rule == "te":
        num = SCALE_TARGET[spec.scale] * g.gmax
    elif spec.rule == "torchao":
        num = SCALE_TARGET[spec.scale] * g.gmax
    else:
        num = 1.0
    return dict(
        EMIN=g.emin, MBITS=g.mbits, FIXED=g.fixed, TWOS=g.twos, BITS=g.bits, GMAX=g.gmax, EMAX=g.emax,
        SCALE=SCALE_KIND[spec.scale], RULE=RULE_ID[spec.rule], B=max(spec.block, 1), TILE2D=spec.tile_2d,
        S_EMIN=sg.emin, S_MBITS=sg.mbits, S_GMAX=sg.gmax, S_MIN=SCALE_MIN_NORMAL.get(spec.scale, 0.0),
        NUM=num, NANB=NAN_BYTE.get(spec.scale, 0), MODE=ROUND_ID[rounding],
    )


# Per-device constants of the launchers, made once: a dummy f32 pointer argument and an
# empty uint8 tensor (nothing ever writes through either).
_DUMMY_F32: dict[torch.device, torch.Tensor] = {}
_EMPTY_U8: dict[torch.device, torch.Tensor] = {}
_UNMEASURED: dict[torch.device, torch.Tensor] = {}


def _dummy_f32(device) -> torch.Tensor:
    t = _DUMMY_F32.get(device)
    if t is None:
        t = _DUMMY_F32[device] = torch.ones(1, dtype=torch.float32, device=device)
    return t


def _unmeasured_amax(device) -> torch.Tensor:
    """Two NaN amaxes (as int32 bits, like the measured ones) for calls that measure none:
    a given amax is returned as given, a format without a tensor scale reads NaN."""
    t = _UNMEASURED.get(device)
    if t is None:
        t = _UNMEASURED[device] = torch.full((2,), 0x7FC00000, dtype=torch.int32, device=device)
    return t


def _empty_u8(device) -> torch.Tensor:
    t = _EMPTY_U8.get(device)
    if t is None:
        t = _EMPTY_U8[device] = torch.empty(0, dtype=torch.uint8, device=device)
    return t


def _rht_scale(n: int) -> float:
    """f32(n^-1/2) as a Python float (struct round trip: no tensor, no device)."""
    return struct.unpack("f", struct.pack("f", 1.0 / math.sqrt(n)))[0]


# Block-diagonal (D H) matrices of RHT_IMPL=1, by (signs id, signs version, n, bk, device);
# the sign tensor is kept alive in the entry so its id cannot be reused.
_HMAT: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _rht_args(rht, bk: int, device, impl: int):
    """(signs, block-diagonal D*H for RHT_IMPL=1, f32(n^-1/2), n, log2 n); dummies without RHT."""
    if rht is None:
        dummy = _dummy_f32(device)
        return dummy, dummy, 1.0, 0, 0
    n, signs = rht
    signs = signs.to(device=device, dtype=torch.float32).contiguous()
    hmat = signs
    if impl == 1:
        key = (id(signs), signs._version, n, bk, str(device))
        hit = _HMAT.get(key)
        if hit is None or hit[0] is not signs:
            dh = signs[:, None] * reference.hadamard_matrix(n, device=device)
            if len(_HMAT) > 64:
                _HMAT.clear()
            hit = _HMAT[key] = (signs, torch.block_diag(*([dh] * (bk // n))).contiguous())
        hmat = hit[1]
    return signs, hmat, _rht_scale(n), n, int(math.log2(n))


def rht_norm(n: int) -> float:
    """f64 1 / sqrt(n), as the Rust core computes it (1.0 when there is no RHT)."""
    return 1.0 / math.sqrt(n) if n else 1.0


def _layout(x: torch.Tensor, axis: int):
    r, c = flat2d(x.shape)
    if axis == -1:
        return r, c, c, 1
    return c, r, 1, c


def launch(x, spec: Spec, axis: int, rounding: str, seed: int, offset: int, rht, tensor_amax, *,
           write_codes: bool, write_xhat: bool, write_rot: bool = False, rht_impl: int = 0, xhat_dtype=None,
           unscaled: bool = False):
    """Run the amax pass (if needed) and the quantize pass. Returns a dict of outputs.
    unscaled: x_hat is value x block scale, the tensor scale not applied (what a GEMM consumes)."""
    m, k, s_m, s_k = _layout(x, axis)
    check_layout(spec, m, k, rht)
    _check_sr_group(rounding, k)
    dev = x.device
    bm, bk, warps = config(spec, 0 if rht is None else rht[0], axis)
    signs, hmat, rscale, rn, log2n = _rht_args(rht, bk, dev, rht_impl)
    grid = (_cdiv(m, bm), _cdiv(k, bk))
    consts = _constexprs(spec, rounding)
    need_amax = (spec.two_level or spec.per_tensor) and tensor_amax is None
    # the amax's bits (atomic max: zeroed first) where a pass measures it
    amax_bits = torch.zeros(1, dtype=torch.int32, device=dev) if tensor_amax is None else \
        _dummy_f32(dev).view(torch.int32)
    u8 = _empty_u8(dev)
    pk = spec.packed
    codes = torch.empty((m, k // 2 if pk else k), dtype=torch.uint8, device=dev) if write_codes else u8
    if not write_codes or spec.per_tensor:
        scales = torch.empty((0,), dtype=torch.uint8, device=dev)  # an output: never shared
    elif spec.tile_2d:
        scales = torch.empty((m // 16, k // 16), dtype=torch.uint8, device=dev)
    else:
        scales = torch.empty((m, k // spec.block), dtype=torch.uint8, device=dev)
    xhat = torch.empty(x.shape, dtype=xhat_dtype or x.dtype, device=dev) if write_xhat else x
    rot = torch.empty((m, k), dtype=torch.float32, device=dev) if write_rot else amax_bits
    ts = torch.empty((), dtype=torch.float32, device=dev)
    if tensor_amax is not None:
        amax_in = torch.as_tensor(tensor_amax, dtype=torch.float32, device=dev).reshape(1)
    else:
        amax_in = amax_bits.view(torch.float32)
    interp = interpreting()
    common = dict(consts, RHT_N=rn, LOG2N=log2n, RHT_IMPL=rht_impl, DOT_BF16=x.dtype == torch.bfloat16 and not
                  interp, RNE_BF16=interp, RHT_NORM=rht_norm(rn), BM=bm, BK=bk, num_warps=warps)
    seed, common["SEED_PTR"] = seed_arg(seed, dev, ROUND_ID[rounding] >= 2)
    args = (x, codes, scales, xhat, rot, amax_bits, amax_in, ts, signs, hmat, m, k, s_m, s_k, seed,
            int(offset), rscale)
    if need_amax:
        launcher.run(_quantize_kernel, grid, args, dict(common, PASS=0, FUSE_AMAX=False, WRITE_CODES=False,
                                                        WRITE_XHAT=False, WRITE_ROT=False))
    launcher.run(_quantize_kernel, grid, args, dict(common, PASS=1, FUSE_AMAX=tensor_amax is None and not need_amax,
                                                    WRITE_CODES=write_codes, WRITE_XHAT=write_xhat, WRITE_ROT=write_rot,
                                                    UNSCALED=unscaled))
    amax = amax_in.view(()) if tensor_amax is not None else amax_bits.view(torch.float32).view(())
    return dict(codes=codes, scales=scales, xhat=xhat, rot=rot, ts=ts, amax=amax, m=m, k=k)


def _prepare(x, fmt, axis, rounding, rht):
    check_kernel_input(x)
    spec = parse_fmt(fmt)
    check_rounding(rounding)
    return spec, normalize_axis(axis), check_rht(rht, x.device)


def quantize(x: torch.Tensor, fmt, *, axis: int = -1, rounding: str = "rtne", seed: int = 0, offset: int = 0,
             rht=None, tensor_amax=None, rht_impl: int = 0) -> Packed:
    """Triton quantizer; same contract and bits as reference.quantize (CUDA tensors, or
    CPU tensors under TRITON_INTERPRET=1)."""
    spec, axis, rht = _prepare(x, fmt, axis, rounding, rht)
    o = launch(x, spec, axis, rounding, seed, offset, rht, tensor_amax, write_codes=True, write_xhat=False,
               rht_impl=rht_impl)
    return Packed(o["codes"], o["scales"], o["ts"], o["amax"], spec.as_dict(), tuple(x.shape), axis, rht)


def quantize_debug(x, fmt, *, axis=-1, rounding="rtne", seed=0, offset=0, rht=None, tensor_amax=None, rht_impl=0):
    """quantize() plus the rotated f32 layout the kernel quantized (for bit-exact tests
    of the RHT_IMPL=1 path against the reference quantizer on the same rotated values)."""
    spec, axis, rht = _prepare(x, fmt, axis, rounding, rht)
    o = launch(x, spec, axis, rounding, seed, offset, rht, tensor_amax, write_codes=True, write_xhat=False,
               write_rot=True, rht_impl=rht_impl)
    return Packed(o["codes"], o["scales"], o["ts"], o["amax"], spec.as_dict(), tuple(x.shape), axis, rht), o["rot"]


def dequantize(p: Packed, dtype=torch.bfloat16, *, unscaled: bool = False) -> torch.Tensor:
    """Triton dequantize: x_hat in the original orientation (reference.dequantize).
    unscaled: value * block scale, p's tensor scale not applied (what a GEMM consumes)."""
    spec = p.spec
    check_kernel_input(p.codes, "codes", (torch.uint8,))
    m, k = p.layout_shape
    out = torch.empty(p.shape, dtype=dtype, device=p.codes.device)
    r, c = flat2d(p.shape)
    s_m, s_k = (c, 1) if p.axis == -1 else (1, c)
    interp = interpreting()
    bm, bk, k_fast = dequant_config(s_k == 1, spec.tile_2d, interp)
    scales = p.scales if p.scales.numel() else p.codes
    ts = p.tensor_scale.to(torch.float32).reshape(1)
    grid = (_cdiv(k, bk), _cdiv(m, bm)) if k_fast else (_cdiv(m, bm), _cdiv(k, bk))
    asm = lut_decode_asm(spec) if unscaled and dtype == torch.bfloat16 and s_k == 1 and not interp else ""
    launcher.run(_dequantize_kernel, grid, (p.codes, scales, ts, out, m, k, s_m, s_k),
                 dict(_dequant_constexprs(spec), RNE_BF16=interp, BM=bm, BK=bk, K_FAST=k_fast, UNSCALED=unscaled,
                      ASM=asm))
    return out


LUT_DECODE = True  # the table decode where it applies (lut_decode_asm); False: the generic one


def lut_decode_asm(spec: Spec) -> str:
    """The PTX table decode of _dequantize_kernel for `spec` (4-bit sign-magnitude grid,
    block scales), or "" where it does not apply. Not under the interpreter: PTX (the
    routine is checked bit for bit offline, tests/interpret/test_gemm_split.py)."""
    return _lut_decode_asm(spec) if LUT_DECODE else ""


@functools.lru_cache(maxsize=None)
def _lut_decode_asm(spec: Spec) -> str:
    from fourcast.kernels import gemm  # gemm imports this module

    return gemm.decode_asm(spec.element, 1, False) if gemm._lut_ok(spec) else ""


def dequant_config(rows_out: bool, tile_2d: bool, interp: bool) -> tuple[int, int, bool]:
    """(BM, BK, K_FAST) of _dequantize_kernel. rows_out: the output is written in the
    quantized layout (rows contiguous): [8, 512] tiles ([16, 512] for 16 x 16 scale
    tiles), neighbouring programs along the row. Measured on the H200 (session 7, the
    kernel before per-block scale loads), decoding the 125M model's saved X in its
    layout (768 x 32768): [8, 512] 83 us, [16, 256] 101, [32, 256] 186, [64, 128] 170
    either program order; in x's orientation (transposed stores) [64, 128] 135 (the
    route of runs 1-10), [16, 256] with K_FAST 89. Transposed output keeps [64, 128].
    Session 10, unscaled to bf16 (QLinear's Wgrad operand) with the table decode
    (lut_decode_asm): [8, 512] 21 / 52.5 / 25.7 us for ue5m3 at 32768 x 768 / 32768 x 2304 /
    8192 x 4096 (73-88% of copy bandwidth), against 33 / 88 / 42 us for the generic
    decode; [16, 512] and [8, 1024] within noise of [8, 512] but for one sample each."""
    if "dequant" in CONFIG_OVERRIDE:
        return CONFIG_OVERRIDE["dequant"]
    if interp:
        return 16, 32, rows_out
    return (16 if tile_2d else 8, 512, True) if rows_out else (64, 128, False)


_DEQUANT_CONSTEXPRS: dict[Spec, dict] = {}


def _dequant_constexprs(spec: Spec) -> dict:
    """The dequantize kernel's format constexprs, built once per format."""
    d = _DEQUANT_CONSTEXPRS.get(spec)
    if d is None:
        g = spec.grid
        sg = SCALE_GRIDS.get(spec.scale, SCALE_GRIDS["e4m3"])
        d = _DEQUANT_CONSTEXPRS[spec] = dict(
            EMIN=g.emin, MBITS=g.mbits, FIXED=g.fixed, TWOS=g.twos, BITS=g.bits,
            FP8={"e4m3": 1, "e5m2": 2}.get(spec.element, 0), SCALE=SCALE_KIND[spec.scale], B=max(spec.block, 1),
            TILE2D=spec.tile_2d, S_EMIN=sg.emin, S_MBITS=sg.mbits, NANB=NAN_BYTE.get(spec.scale, 0))
    return d


def rowcol_config(rn_r: int, rn_c: int):
    """Square tiles so that one read feeds both copies; 64x64 (4K elements, 8 warps)
    unless an RHT of 128 needs more. Interpreter: 32x32."""
    t = max(64, rn_r, rn_c)
    if interpreting():
        t = max(32, rn_r, rn_c)
    return t, t, 8


def rowcol_route(spec: Spec, gluon_ok: bool = False) -> str:
    """Which kernel serves a row+col call: "strip" (strip.py) for every block format,
    "transpose" (_rowcol_kernel) for per-tensor formats. Measured on the H200 at 8192^2
    (kernels-h200.md): without SR, both copies as codes 221 us vs 340 (transposing), the
    fused X call 193 vs 345 (session 3's split kernel), with a column RHT16 320 vs 392;
    with SR (strip_config's narrower SR tile, session 4) the dY call 606 vs 596 (split,
    since retired) and with a column RHT16 725 vs 717 (transposing).
    "gluon" (rowcol_gluon.py) where gluon_ok (_gluon_rowcol_ok: its scope, on an sm_90 GPU):
    session 18 measured 0.66x the strip kernel's time on NVFP4 codes, 0.68x on the X call
    (decoded row + packed column), 0.61-0.62x on MXFP4 codes, 0.93-0.94x on the dY call (both
    copies decoded, "sr16") and 0.60-0.63x on TE's X and dY calls (a column RHT of 16);
    session 19 0.79x on TE's dY call with both copies decoded, 0.56x on TE's X call at two
    row tiles a program, 0.86-0.91x on an f32 input's X call (near copy bandwidth on both),
    0.56x on MXFP4's X call (a row RHT of 32, "sr16" on the column copy; one lane a block of 32).
    CONFIG_OVERRIDE["rowcol"] pins "transpose", "strip" or "gluon" (benchmarks)."""
    pin = CONFIG_OVERRIDE.get("rowcol")
    if spec.per_tensor or pin == "transpose":
        return "transpose"
    if gluon_ok and pin in (None, "gluon"):
        return "gluon"
    return "strip"


@functools.lru_cache(maxsize=None)
def _rowcol_gluon():
    """The rowcol_gluon module, or None where this Triton has no Gluon."""
    try:
        from fourcast.kernels import rowcol_gluon
    except ImportError:
        return None
    return rowcol_gluon


def _amax_gluon():
    """The amax_gluon module (rowcol_gluon's tiling: Gluon is there wherever that imports)."""
    from fourcast.kernels import amax_gluon

    return amax_gluon


def _rowcol_gluon_for(x: torch.Tensor):
    """The rowcol_gluon module where its kernels can run on x: an sm_90 GPU (gemm's device
    check), not the interpreter, Gluon importable; else None."""
    if interpreting() or not x.is_cuda:
        return None
    from fourcast.kernels.gemm import _capability

    if _capability(x.device.index if x.device.index is not None else torch.cuda.current_device())[0] != 9:
        return None
    return _rowcol_gluon()


def _gluon_rowcol_ok(x: torch.Tensor, spec: Spec, rounding_r: str, rounding_c: str, rht: tuple, codes_on: tuple,
                     xhat_on: tuple, unscaled: bool = False, xhat_dtype=None) -> bool:
    """rowcol_gluon serves this call: in its scope (rowcol_gluon.applies: RTNE, or "sr16"
    with blocks of 16; rht the (row, column) RHT sizes, both together included: UFP4's calls) where
    its kernels run (_rowcol_gluon_for)."""
    rg = _rowcol_gluon_for(x)
    if rg is None:
        return False
    config = _gluon_config(x.shape[0], rounding_r, rht[1], spec.block, rounding_c, rht[0], x.dtype == torch.bfloat16,
                           xhat_on)
    return rg.applies(x, spec, rounding_r, rounding_c, rht, codes_on, xhat_on, unscaled, xhat_dtype, config)


def _gluon_amax_ok(x: torch.Tensor, rht: tuple) -> bool:
    """amax_gluon's pass serves this row+col call's (amax_gluon.applies, on an
    sm_90 GPU with Gluon) unless the benchmarks pin strip.py's (CONFIG_OVERRIDE "rowcol" or
    "amax" = "strip"). Session 18: TE's X call measures its amax ahead of the quantizer,
    with the column RHT, in about half of the call's time on strip.py's pass (training-h200.md
    run 19)."""
    if CONFIG_OVERRIDE.get("rowcol") == "strip" or CONFIG_OVERRIDE.get("amax") == "strip":
        return False
    return _rowcol_gluon_for(x) is not None and _amax_gluon().applies(x, rht, CONFIG_OVERRIDE.get("amax_gluon"),
                                                                     CONFIG_OVERRIDE.get("amax_row_rht_f32"))


def _gluon_config(R: int, rounding: str, rn_c: int, block: int, rounding_c: str, rn_r: int, bf16: bool,
                  xhat_on: tuple) -> tuple:
    """rowcol_gluon's (BM, BK, warps, row tiles a program[, maxnreg]) for a call of R rows
    (bf16: a bf16 input; xhat_on: the copies written decoded): its config_for, or
    CONFIG_OVERRIDE["rowcol_gluon"] (benchmarks)."""
    return CONFIG_OVERRIDE.get("rowcol_gluon") or _rowcol_gluon().config_for(R, rounding, rn_c, block, rounding_c,
                                                                              rn_r, bf16, xhat_on)


_ROWCOL_PLANS: dict[tuple, dict] = {}


def _rowcol_plan(x: torch.Tensor, spec: Spec, rounding_r: str, rounding_c: str, rn: int, rnc: int, codes_on: tuple,
                 xhat_on: tuple, unscaled: bool, fresh: bool, fuse: bool, xhat_dtype=None) -> dict:
    """What launch_rowcol launches for one kind of call (route, grids, constexprs), checked
    and built once per key: a training step repeats a few dozen kinds every step, and
    building them is most of the call's Python. CONFIG_OVERRIDE (benchmarks) is part of the
    key: built afresh on every call, a benchmark's variants were timed with that Python in
    them, 2-3x the kernel's time whenever the host fell behind the GPU (session 23)."""
    interp = interpreting()
    R, C = x.shape
    key = (spec, rounding_r, rounding_c, rn, rnc, R, C, codes_on, xhat_on, unscaled, fresh, fuse, interp, x.dtype,
           x.device, xhat_dtype, repr(sorted(CONFIG_OVERRIDE.items())))
    plan = _ROWCOL_PLANS.get(key)
    if plan is not None:
        return plan
    check_layout(spec, R, C, (rn, None) if rn else None)
    check_layout(spec, C, R, (rnc, None) if rnc else None)
    _check_sr_group(rounding_r, C)
    _check_sr_group(rounding_c, R)
    from fourcast.kernels import strip  # strip.py builds on this module's jit helpers

    route = rowcol_route(spec, _gluon_rowcol_ok(x, spec, rounding_r, rounding_c, (rn, rnc), codes_on, xhat_on,
                                                unscaled, xhat_dtype or x.dtype))
    if route == "transpose":  # _rowcol_kernel writes an output kind for both copies or neither
        codes_on = (any(codes_on),) * 2
        xhat_on = (any(xhat_on),) * 2
    if route in ("strip", "gluon"):
        br, bc, warps = strip.strip_config(max(spec.block, 1), rn, rnc, ROUND_ID[rounding_r] >= 2 or ROUND_ID[rounding_c] >= 2,
                                           CONFIG_OVERRIDE.get("strip"), interp)
    else:
        br, bc, warps = rowcol_config(rn, rnc)
    l_r, l_c = (int(math.log2(n)) if n else 0 for n in (rn, rnc))
    common = dict(_constexprs(spec, rounding_r), MODE_R=ROUND_ID[rounding_r], MODE_C=ROUND_ID[rounding_c], RN_R=rn,
                  LOG2N_R=l_r, RNE_BF16=interp, NORM_R=rht_norm(rn), BR=br, BC=bc, UNSCALED=unscaled, num_warps=warps,
                  RN_C=rnc, LOG2N_C=l_c, NORM_C=rht_norm(rnc))
    common.pop("MODE")
    iters = 1
    if route == "strip":
        flags = dict(CODES_R_ON=codes_on[0], XHAT_R_ON=xhat_on[0], CODES_C_ON=codes_on[1], XHAT_C_ON=xhat_on[1])
        iters = strip.strip_iters(R, br, C, bc, bool(rn or rnc), CONFIG_OVERRIDE.get("strip_iters"), interp)
        flags["ITERS"] = iters
        if "strip_gather" in CONFIG_OVERRIDE:
            flags["GATHER_C"] = CONFIG_OVERRIDE["strip_gather"]
        if CONFIG_OVERRIDE.get("strip_maxnreg") and not interp:
            flags["maxnreg"] = CONFIG_OVERRIDE["strip_maxnreg"]
    else:
        flags = dict(WRITE_CODES=codes_on[0], WRITE_XHAT=xhat_on[0], PASS=1)
    consts = dict(common, FUSE_AMAX=fuse, **flags)
    grid = (_cdiv(R, br * iters), _cdiv(C, bc))
    if route == "gluon":
        rg, cfg = _rowcol_gluon(), _gluon_config(R, rounding_r, rnc, spec.block, rounding_c, rn,
                                                 x.dtype == torch.bfloat16, xhat_on)
        consts = dict(rg.constexprs(_constexprs(spec, rounding_r), cfg), FUSE_AMAX=fuse, XHAT_R_ON=xhat_on[0],
                      XHAT_C_ON=xhat_on[1], MODE_R=ROUND_ID[rounding_r], MODE_C=ROUND_ID[rounding_c],
                      SEED_PTR=False, RN_C=rnc, NORM_C=rht_norm(rnc), F32=x.dtype == torch.float32, RN_R=rn,
                      NORM_R=rht_norm(rn), COL_F32=rg.col_rht_f32(rnc, x.dtype == torch.float32,
                                                                  CONFIG_OVERRIDE.get("col_rht_f32")))
        from fourcast.kernels.gemm import multiprocessors

        grid = rg.grid(R, C, cfg, multiprocessors(x.device) if x.is_cuda else 132)  # CPU: the unit tests' stubs
    plan = dict(route=route, codes_on=codes_on, xhat_on=xhat_on, bc=bc, br=br, grid=grid, consts=consts,
                consts_seed_ptr=dict(consts, SEED_PTR=True), amax=None)
    # The amax pass's launches (kernel, grid, constexprs). Benchmarks only: "amax_reversed" False
    # runs it in launch order, "amax_rht_f32" False a column RHT's in f64 throughout ("col_rht_f32"
    # True puts the quantize pass's in f32: rowcol_gluon.col_rht_f32), "amax_row_rht_f32" True or
    # False a row RHT's in f32 or f64 (amax_gluon.row_f32_on).
    reversed_ = CONFIG_OVERRIDE.get("amax_reversed", True)
    if fresh and route in ("strip", "gluon") and _gluon_amax_ok(x, (rn, rnc)):
        ag, f32, tile = _amax_gluon(), x.dtype == torch.float32, CONFIG_OVERRIDE.get("amax_gluon")
        modes = ag.modes(rnc, f32, CONFIG_OVERRIDE.get("amax_rht_f32", True))
        row_f32 = modes == (1, 2) and ag.row_f32_on(rn, f32, CONFIG_OVERRIDE.get("amax_row_rht_f32"))
        plan["amax"] = tuple(("gluon", *ag.launch(R, C, rnc, tile, f32, reversed_, mode, rn, row_f32))
                             for mode in modes)
    elif fresh and route in ("strip", "gluon"):
        br0, bc0, amax_iters = strip.amax_config(br, bc, interp)
        plan["amax"] = (("strip", (_cdiv(R, br0 * amax_iters), _cdiv(C, bc0)),
                         dict(RN_R=rn, LOG2N_R=l_r, NORM_R=rht_norm(rn), RN_C=rnc, LOG2N_C=l_c, NORM_C=rht_norm(rnc),
                              BR=br0, BC=bc0, ITERS=amax_iters, REVERSED=reversed_, num_warps=1)),)
    elif fresh:
        plan["amax"] = (("transpose", plan["grid"], dict(common, PASS=0, FUSE_AMAX=False, WRITE_CODES=False,
                                                         WRITE_XHAT=False)),)
    if len(_ROWCOL_PLANS) > 512:
        _ROWCOL_PLANS.clear()
    _ROWCOL_PLANS[key] = plan
    return plan


def launch_rowcol(x, spec: Spec, rounding_r: str, rounding_c: str, seed: int, offset: int, rht_r, rht_c,
                  amax_r, amax_c, *, write_codes, write_xhat, xhat_dtype=None, unscaled: bool = False,
                  measure_amax: bool = True):
    """Both copies of a 2-D x from one read per tile (after an amax pass if needed).
    write_codes / write_xhat: a bool for both copies or a (row, col) pair. unscaled:
    x_hat without the tensor scale (value * block scale, exact in bf16). The returned
    amaxes are 0-d tensors: a given one as given (not copied), a measured one a view.
    measure_amax=False: a format without a tensor scale does not record its amax (it
    needs none; the kernel's atomics are skipped) and returns NaN for it. Same codes."""
    if x.dim() != 2:
        raise ValueError(f"quantize_rowcol needs a 2-D tensor, got shape {tuple(x.shape)}")
    R, C = x.shape
    dev = x.device
    needs = spec.two_level or spec.per_tensor
    fresh = needs and (amax_r is None or amax_c is None)
    fuse = not needs and amax_r is None and amax_c is None and measure_amax
    plan = _rowcol_plan(x, spec, rounding_r, rounding_c, 0 if rht_r is None else rht_r[0],
                        0 if rht_c is None else rht_c[0], (write_codes,) * 2 if isinstance(write_codes, bool) else tuple(write_codes),
                        (write_xhat,) * 2 if isinstance(write_xhat, bool) else tuple(write_xhat), unscaled, fresh, fuse,
                        xhat_dtype)
    codes_on, xhat_on = plan["codes_on"], plan["xhat_on"]
    sr_, _, scale_r, _, _ = _rht_args(rht_r, plan["bc"], dev, 0)
    sc_, _, scale_c, _, _ = _rht_args(rht_c, plan["br"], dev, 0)
    pk = spec.packed
    u8 = _empty_u8(dev)

    def bufs(m, k, on):
        if not on:
            return u8, u8
        codes = torch.empty((m, k // 2 if pk else k), dtype=torch.uint8, device=dev)
        if spec.per_tensor:
            return codes, torch.empty((0,), dtype=torch.uint8, device=dev)
        if spec.tile_2d:
            return codes, torch.empty((m // 16, k // 16), dtype=torch.uint8, device=dev)
        return codes, torch.empty((m, k // spec.block), dtype=torch.uint8, device=dev)

    codes_r, scales_r = bufs(R, C, codes_on[0])
    codes_c, scales_c = bufs(C, R, codes_on[1])
    xd = xhat_dtype or x.dtype
    xhat_r = torch.empty((R, C), dtype=xd, device=dev) if xhat_on[0] else x
    xhat_c = torch.empty((R, C), dtype=xd, device=dev) if xhat_on[1] else x
    ts = torch.empty(2, dtype=torch.float32, device=dev)
    # The measured amaxes' bits (atomic max, so zeroed first), only where a pass measures them.
    # (words 2 and 3: the bounds of amax_gluon's f32 column and row RHTs, RHT_MODE 1)
    amax_bits = torch.zeros(4, dtype=torch.int32, device=dev) if fresh or fuse else _unmeasured_amax(dev)
    measured = amax_bits.view(torch.float32)
    amax_in = tuple(measured[i] if a is None else torch.as_tensor(a, dtype=torch.float32, device=dev).reshape(())
                    for i, a in enumerate((amax_r, amax_c)))
    from fourcast.kernels import strip

    seed, seed_ptr = seed_arg(seed, dev, ROUND_ID[rounding_r] >= 2 or ROUND_ID[rounding_c] >= 2)
    route = plan["route"]
    if route == "gluon":
        if fuse and rht_c is None and rht_r is None:  # one amax: the kernel records it once, at amax_bits[0]
            amax_in = (measured[0], measured[0])
        kernel = _rowcol_gluon()._rowcol_kernel
        args = (x, codes_r, scales_r, xhat_r, codes_c, scales_c, xhat_c, amax_bits, *amax_in, ts, sr_, sc_, R, C,
                seed, int(offset), int(offset) + R * C)
    else:
        kernel = strip._strip_kernel if route == "strip" else _rowcol_kernel
        args = (x, codes_r, scales_r, xhat_r, codes_c, scales_c, xhat_c, amax_bits, *amax_in, ts, sr_, sc_, R, C,
                seed, int(offset), int(offset) + R * C)
        if route == "transpose":
            args += (scale_r, scale_c)
    for amax_kernel, grid0, consts0 in plan["amax"] or ():  # the amax pass: rowcol_gluon's, strip.py's or PASS 0
        if amax_kernel == "transpose":
            launcher.run(kernel, grid0, args, consts0)
        elif amax_kernel == "gluon":
            launcher.run(_amax_gluon()._amax_kernel, grid0, (x, amax_bits, sr_, sc_, R, C), consts0)
        else:
            launcher.run(strip._strip_amax_kernel, grid0, (x, amax_bits, sr_, sc_, R, C), consts0)
    launcher.run(kernel, plan["grid"], args, plan["consts_seed_ptr" if seed_ptr else "consts"])
    return dict(codes=(codes_r, codes_c), scales=(scales_r, scales_c), xhat=(xhat_r, xhat_c), ts=ts, amax=amax_in)


def quantize_rowcol(x, spec, spec_c, rounding_r, rounding_c, seed, offset, rht_r, rht_c, amax_r=None, amax_c=None):
    """Row-wise and column-wise Packed copies of a 2-D x (ops.quantize_rowcol's CUDA path).
    One kernel when both copies share the format; two quantize() calls otherwise."""
    check_kernel_input(x)
    spec, spec_c = parse_fmt(spec), parse_fmt(spec_c)
    if spec != spec_c:
        row = quantize(x, spec, axis=-1, rounding=rounding_r, seed=seed, offset=offset, rht=rht_r, tensor_amax=amax_r)
        col = quantize(x, spec_c, axis=0, rounding=rounding_c, seed=seed, offset=offset + x.numel(), rht=rht_c,
                       tensor_amax=amax_c)
        return row, col
    o = launch_rowcol(x, spec, rounding_r, rounding_c, seed, offset, rht_r, rht_c, amax_r, amax_c,
                      write_codes=True, write_xhat=False)
    shape = tuple(x.shape)
    row = Packed(o["codes"][0], o["scales"][0], o["ts"][0], o["amax"][0], spec.as_dict(), shape, -1, rht_r)
    col = Packed(o["codes"][1], o["scales"][1], o["ts"][1], o["amax"][1], spec.as_dict(), shape, 0, rht_c)
    return row, col
