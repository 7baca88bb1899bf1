"""Packed block-scaled GEMM (Triton): C[M, N] = A[M, K] . B[N, K]^T with both operands
as Packed codes + scale bytes + tensor scale, blocked along K.

Each K-step loads nibbles and scale bytes, dequantizes in registers to bf16
(value(code) * block scale: every E2M1/E1M2/INT4 value times an E4M3, UE5M3 or UE8M0
scale is exact in bf16, and so is an FP8 value times an E4M3/UE8M0 scale; with E4M3
scales on 4-bit sign-magnitude grids also in f16, which the split kernel then uses), and
feeds tl.dot with FP32 accumulation. The tensor scales come out in the epilogue:
C = acc * alpha, alpha = (1 / ts_a) / ts_b in FP32 (`epilogue_alpha`; how a Blackwell
cuBLASLt GEMM takes the NVFP4 tensor scales, as a device alpha), cast to bf16 or f32
(after an exact power-of-two factor where a decode leaves one).

Error bound (tests/gpu/test_kernels_gpu.py): with A_hat, B_hat the dequantized operands
and C64 their float64 product, |C - C64| <= 2 * K * 2^-24 * (|A_hat| |B_hat|^T) + the output
rounding (2^-8 |C64| for bf16): FP32 accumulation in any order (tensor cores included)
plus the epilogue's alpha (two FP32 roundings) and product (one).

Three implementations (`impl`); "triton" and "dequant" within that bound, "fp8" not:
- "triton": on Hopper, for the LUT/CVT formats with K a multiple of 64, gemm_wgmma.py's
  warp-specialised kernels (KERNEL "ws": decode warps fill a shared-memory ring of decoded
  operands, one warpgroup runs the wgmmas; for NVFP4/UFP4 A is decoded in the MMA warps'
  registers instead, gemm_wgmma.launch_packed; the fastest, kernels-h200.md sessions 12, 14);
  elsewhere this module's split-nibble kernel (the section "the split-nibble kernel"
  below: low and high nibbles as two MMAs, decoded by PTX table lookups, two CTAs per SM
  so one's decode runs under the other's wgmma), or the original interleaved one ("v1",
  also the route for K not a multiple of 32). All three share the decode and the bound.
- "dequant": each operand dequantized once to bf16 without its tensor scale (exact, as
  above), then `scaled_mm`: one cuBLASLt bf16 GEMM with the epilogue's alpha as a device
  scalar, straight to out_dtype (kernels/cublaslt.py); without cuBLASLt, a cuBLAS GEMM
  with FP32 output and the same epilogue as a second pass (float32 matmul on CPU).
- "fp8" (MXFP4 only, sm_89+): each operand converted to E4M3 with a per-row power-of-two
  scale 2^r, r = clamp(row's max block exponent - 6, -64, 63): v * 2^(e - r) is
  v * 2^d with d <= 6, so |v| <= 6 gives <= 384 < 448, and it is an exact E4M3 value
  unless d is too small (v = 0.5 needs d >= -8: a row spanning more than ~14 binades).
  The conversion kernel checks every element (E4M3 round trip == the f32 value, which
  is exact in f32 because d is clamped to [-30, 30] and a clamped value cannot pass) and
  NaN scale bytes, per row; if any row of either operand fails, the call falls back to
  "dequant" (one host sync reads the flag; STATS counts the fallbacks). Then an FP8
  cuBLAS GEMM (torch._scaled_mm): with unit tensor scales (MXFP4's; the kernel flags
  others) the 2^r as rowwise scales straight to out_dtype where _scaled_mm allows it
  (bf16 from sm_89, f32 on sm_90); otherwise unit scales, FP32 out and an epilogue
  ((acc * 2^ra) * 2^rb) * alpha. The products of E4M3 values are exact and so
  are the power-of-two factors (r in [-64, 63] keeps acc * 2^ra and 2^ra * 2^rb
  normal), so under the interpreter (f32 emulation) it meets the bound. On Hopper it
  does not: the FP8 tensor cores add products with ~13-14 bits of alignment, not FP32
  (DeepSeek-V3 reports the same), so heavy-tailed rows lose the small products' low
  bits even with use_fast_accum=False. Measured on an H200 (cuBLAS, torch 2.11, K 128
  to 8192): up to 2^-11.4 * (|A_hat| |B_hat|^T), 3.7x the bound at K = 512; random
  normal data was exact. testing.gemm_bound(fp8_tc=True) adds 2^-9 |A||B|^T for it.
- "auto": "dequant" on CUDA ("fp8" where it applies, M, N, K multiples of 16 as cuBLAS
  FP8 needs, when AUTO_FP8 is set: faster, looser); "triton" under the interpreter.

Example (CUDA):
    >>> c = gemm(ops.quantize(a, f), ops.quantize(b, f))    # doctest: +SKIP
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from fourcast.errors import ShapeError
from fourcast.kernels import cublaslt, launcher
from fourcast.kernels.quantize import SCALE_KIND, _cast_out, _cdiv, _decode, _pow2, _scale_f32
from fourcast.kernels.reference import grid_values
from fourcast.kernels.quantize import dequantize as _dequantize
from fourcast.kernels.utils import (
    GRIDS,
    NAN_BYTE,
    SCALE_GRIDS,
    Packed,
    check_gemm_impl,
    check_kernel_input,
    device_scalar,
    interpreting,
    is_mx_e2m1,
)


@triton.jit
def _e2m1_bits(c):
    """E2M1 code (int32, 0..15) -> f32 value, from bits: normal magnitudes 2..7 are
    (mag << 22) + 0x3F000000 (exponent and mantissa line up), 1 is 0.5, 0 is 0."""
    mag = c & 7
    bits = tl.where(mag >= 2, (mag << 22) + 0x3F000000, tl.where(mag == 1, 0x3F000000, 0))
    return (bits | ((c & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _scaled_cast(acc, A_TS, B_TS, C, RNE_BF16: tl.constexpr):
    """The epilogue of every GEMM route: acc * alpha with alpha = (1 / ts_a) / ts_b (each
    step correctly rounded in FP32, as `epilogue_alpha`), then cast to C's element type
    (round to nearest even): what a cuBLASLt GEMM with a device alpha computes."""
    ts_a = tl.load(A_TS)
    alpha = tl.math.div_rn(tl.math.div_rn(tl.full(ts_a.shape, 1.0, tl.float32), ts_a), tl.load(B_TS))
    return _cast_out(acc * alpha, C, RNE_BF16)


@triton.jit
def _load_operand(CODES, SCALES, row, kk, k0, R, K, EMIN: tl.constexpr, MBITS: tl.constexpr,
                  FIXED: tl.constexpr, TWOS: tl.constexpr, BITS: tl.constexpr, FP8: tl.constexpr,
                  E2M1: tl.constexpr, SCALE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                  S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, NANB: tl.constexpr,
                  BR: tl.constexpr, BK: tl.constexpr, F32: tl.constexpr):
    """Dequantized [BR, BK] bf16 tile (rows `row`, columns k0 + kk) without the tensor
    scale; f32 (same values) when F32, for the interpreter, whose bf16 tl.dot is wrong."""
    rmask = row < R
    if BITS == 4:
        k2 = k0 // 2 + tl.arange(0, BK // 2)[None, :]
        byte = tl.load(CODES + row * (K // 2) + k2, mask=rmask, other=0).to(tl.int32)
        c = tl.reshape(tl.join(byte & 0xF, byte >> 4), (BR, BK))
    else:
        c = tl.load(CODES + row * K + k0 + kk, mask=rmask, other=0).to(tl.int32)
    if E2M1:
        v = _e2m1_bits(c)
    else:
        v = _decode(c, EMIN, MBITS, FIXED, TWOS, BITS, FP8)
    if SCALE != 0:
        if TILE2D:
            sb = tl.load(SCALES + (row // 16) * (K // 16) + (k0 // 16) + tl.arange(0, BK // 16)[None, :],
                         mask=rmask, other=0).to(tl.int32)
        else:
            sb = tl.load(SCALES + row * (K // B) + (k0 // B) + tl.arange(0, BK // B)[None, :],
                         mask=rmask, other=0).to(tl.int32)
        if SCALE == 1:
            sv = _pow2(sb - 127)
        else:
            sv = _decode(sb, S_EMIN, S_MBITS, False, False, 9, 0)
        sv = tl.where(sb == NANB, float("nan"), sv)
        if TILE2D:
            nb: tl.constexpr = BK // 16
            sv = tl.reshape(tl.broadcast_to(tl.reshape(sv, (BR, nb, 1)), (BR, nb, 16)), (BR, BK))
        else:
            nb2: tl.constexpr = BK // B
            sv = tl.reshape(tl.broadcast_to(tl.reshape(sv, (BR, nb2, 1)), (BR, nb2, B)), (BR, BK))
        v = v * sv
    if F32:
        return v
    else:
        return v.to(tl.bfloat16)


@triton.jit
def _tile_ids(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program, grouped GROUP_M row tiles at a time (L2 reuse)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (pid % group) % size_m, (pid % group) // size_m


@triton.jit
def _gemm_kernel(A_CODES, A_SCALES, A_TS, B_CODES, B_SCALES, B_TS, C, M, N, K,
                 A_EMIN: tl.constexpr, A_MBITS: tl.constexpr, A_FIXED: tl.constexpr, A_TWOS: tl.constexpr,
                 A_BITS: tl.constexpr, A_FP8: tl.constexpr, A_E2M1: tl.constexpr, A_SCALE: tl.constexpr,
                 A_B: tl.constexpr, A_TILE2D: tl.constexpr, A_S_EMIN: tl.constexpr, A_S_MBITS: tl.constexpr,
                 A_NANB: tl.constexpr,
                 B_EMIN: tl.constexpr, B_MBITS: tl.constexpr, B_FIXED: tl.constexpr, B_TWOS: tl.constexpr,
                 B_BITS: tl.constexpr, B_FP8: tl.constexpr, B_E2M1: tl.constexpr, B_SCALE: tl.constexpr,
                 B_B: tl.constexpr, B_TILE2D: tl.constexpr, B_S_EMIN: tl.constexpr, B_S_MBITS: tl.constexpr,
                 B_NANB: tl.constexpr,
                 RNE_BF16: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_ids(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)[:, None]
    rn = pid_n * BN + tl.arange(0, BN)[:, None]
    kk = tl.arange(0, BK)[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = _load_operand(A_CODES, A_SCALES, rm, kk, k0, M, K, A_EMIN, A_MBITS, A_FIXED, A_TWOS, A_BITS, A_FP8,
                          A_E2M1, A_SCALE, A_B, A_TILE2D, A_S_EMIN, A_S_MBITS, A_NANB, BM, BK, RNE_BF16)
        b = _load_operand(B_CODES, B_SCALES, rn, kk, k0, N, K, B_EMIN, B_MBITS, B_FIXED, B_TWOS, B_BITS, B_FP8,
                          B_E2M1, B_SCALE, B_B, B_TILE2D, B_S_EMIN, B_S_MBITS, B_NANB, BN, BK, RNE_BF16)
        if RNE_BF16:  # interpreter
            acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, tl.trans(b), acc)
    cm = pid_m * BM + tl.arange(0, BM)[:, None]
    cn = pid_n * BN + tl.arange(0, BN)[None, :]
    tl.store(C + cm * N + cn, _scaled_cast(acc, A_TS, B_TS, C, RNE_BF16), mask=(cm < M) & (cn < N))


# ------------------------------------------------------------------ the split-nibble kernel
#
# The product does not depend on the order of K, so one K-step of 4-bit operands is two
# MMAs of depth BK/2: the low nibbles of the [BR, BK/2] code bytes (elements 2j) of A and
# B, then the high nibbles (elements 2j + 1). Each tile is an elementwise function of the
# loaded bytes: no join/reshape, no register shuffle before the MMA, and on the GPU one
# PTX routine turns four code bytes and their four scales into four packed 16-bit pairs.
# 8-bit codes are split into even and odd elements the same way.
#
# Decode per operand (DEC): 0 generic (f32 decode and scale cast to the MMA type: every
# format, and the interpreter's path for all of them); 1 LUT (each |value|'s bytes picked
# by prmt from an 8-entry table, sign ORed in, times the scale: no conversion
# instructions, which the CUDA guide rates at 16 per SM per cycle against 64 for integer
# ones); 2 CVT (nibble -> E4M3 byte by shifts, cvt.rn.f16x2.e4m3x2, times the scale; the
# byte is value * 2^-6, multiplied back in the epilogue; fewer instructions, all the
# more conversions: GEMM_VARIANTS has a GPU run time both). The routines are exactly
# elementwise (each output element from its own byte and its own scale), so whatever
# register layout Triton picks for the tiles, A and B stay consistent. The MMA is f16
# when both operands are 4-bit sign-magnitude grids with E4M3 or UE5M3 scales, bf16
# otherwise (UE8M0 scales need bf16's exponent range). E4M3: |value * scale| <= 7 * 448
# with its last bit >= 2^-11, exact in f16, and E4M3 converts to f16 in hardware. UE5M3
# (up to 114688, last bit 2^-17) overflows f16 as it is, so its operand is decoded as
# value * scale * 2^-UE5M3_EXP: the table holds value * 2^-3 and the scale is taken at
# 2^-1 (bits from the byte in two integer operations), |product| <= 7 * 2^-3 * 57344 =
# 50176 with its last bit >= 2^-2 * 2^-3 * 2^-18 = 2^-23: exact (f16 subnormals reach
# 2^-24), and the epilogue multiplies 2^UE5M3_EXP back. The CVT decode (value * 2^-6)
# would leave bits under 2^-24: UE5M3 operands take the table.
# benchmarks/gemm_sass.py counts what each variant costs in SASS;
# tests/interpret/test_gemm_split.py checks the PTX routines bit for bit on the CPU.

# 4 code bytes ($4) and the scales of those 4 elements ($5, $6: packed pairs) -> the
# 4 low-nibble values ($0, $1) and the 4 high-nibble values ($2, $3), as f16 pairs.
# Magnitudes: prmt picks byte (code & 7) of the table {H0, H1} for 4 nibbles at once
# (prmt reads 4 selector nibbles; bit 3 would select sign replication, hence & 7); an
# f16 grid value has a zero low byte. Signs: (code >> 1) & 4 selects byte 0 (0x00) or
# byte 4 (0x80) of {0, 0x80}, both immediates (ptxas then needs no register for them;
# with one it rematerialises the constant before each use at 128 registers).
_LUT_MASKS = """and.b32 m, $4, 0x77777777;
shr.u32 g, $4, 1;
and.b32 g1, g, 0x44444444;
shr.u32 m2, m, 16;
shr.u32 g2, g1, 16;
"""  # both routines: magnitude selectors (code & 7; m2: the upper four nibbles), sign selectors
_LUT_SIGNS = """prmt.b32 s01, 0, 0x00000080, g1;
prmt.b32 s23, 0, 0x00000080, g2;
or.b32 h01, h01, s01;
or.b32 h23, h23, s23;
"""
_LUT_F16_ASM = ("""{{
.reg .b32 m, m2, g, g1, g2, h01, h23, s01, s23, t0, t1, t2, t3;
""" + _LUT_MASKS + """prmt.b32 h01, {H0}, {H1}, m;
prmt.b32 h23, {H0}, {H1}, m2;
""" + _LUT_SIGNS + """prmt.b32 t0, h01, 0, 0x2404;
prmt.b32 t1, h23, 0, 0x2404;
prmt.b32 t2, h01, 0, 0x3414;
prmt.b32 t3, h23, 0, 0x3414;
mul.rn.f16x2 $0, t0, $5;
mul.rn.f16x2 $1, t1, $6;
mul.rn.f16x2 $2, t2, $5;
mul.rn.f16x2 $3, t3, $6;
}}""")

# The same for bf16 values, whose low bytes are not all zero: a second table {L0, L1}
# and a byte interleave (as Triton's own fp4 -> bf16 upcast does).
_LUT_BF16_ASM = ("""{{
.reg .b32 m, m2, g, g1, g2, l01, l23, h01, h23, s01, s23;
""" + _LUT_MASKS + """prmt.b32 l01, {L0}, {L1}, m;
prmt.b32 l23, {L0}, {L1}, m2;
prmt.b32 h01, {H0}, {H1}, m;
prmt.b32 h23, {H0}, {H1}, m2;
""" + _LUT_SIGNS + """prmt.b32 s01, l01, h01, 0x6240;
prmt.b32 s23, l23, h23, 0x6240;
prmt.b32 l01, l01, h01, 0x7351;
prmt.b32 l23, l23, h23, 0x7351;
mul.rn.bf16x2 $0, s01, $5;
mul.rn.bf16x2 $1, s23, $6;
mul.rn.bf16x2 $2, l01, $5;
mul.rn.bf16x2 $3, l23, $6;
}}""")

# E2M1 / E1M2 nibble -> the E4M3 byte of value * 2^-6 (sign to bit 7, the magnitude
# shifted so its exponent bits land on E4M3's: subnormals line up too), four per
# instruction, then the hardware conversion to f16 pairs.
_CVT_F16_ASM = """{{
.reg .b32 a, b, c, h, lo4, hi4, l01, l23, h01, h23;
.reg .b16 p0, p1, q0, q1;
and.b32 a, $4, 0x07070707;
and.b32 b, $4, 0x08080808;
shl.b32 b, b, {LS};
or.b32 lo4, a, b;
shl.b32 lo4, lo4, {LF};
shr.u32 h, $4, {HS};
and.b32 c, $4, 0x80808080;
lop3.b32 hi4, h, {HM}, c, 0xEA;
mov.b32 {{p0, p1}}, lo4;
mov.b32 {{q0, q1}}, hi4;
cvt.rn.f16x2.e4m3x2 l01, p0;
cvt.rn.f16x2.e4m3x2 l23, p1;
cvt.rn.f16x2.e4m3x2 h01, q0;
cvt.rn.f16x2.e4m3x2 h23, q1;
mul.rn.f16x2 $0, l01, $5;
mul.rn.f16x2 $1, l23, $6;
mul.rn.f16x2 $2, h01, $5;
mul.rn.f16x2 $3, h23, $6;
}}"""
_CVT_SHIFTS = {"e2m1": dict(LS=2, LF=2, HS=2, HM="0x1C1C1C1C"), "e1m2": dict(LS=3, LF=1, HS=3, HM="0x0E0E0E0E")}
CVT_EXP = 6  # the CVT decode leaves value * 2^-6
UE5M3_TABLE_SHIFT = 3  # an f16-decoded UE5M3 operand: the table's values at 2^-3 ...
UE5M3_EXP = UE5M3_TABLE_SHIFT + 1  # ... times the scale at 2^-1 (_scale_values); see above
UE5M3_F16 = True  # False: UE5M3 operands decode to bf16 (as before session 16; benchmarks compare)


def _magnitude_bits(element: str, dtype: torch.dtype, shift: int = 0) -> list[int]:
    """16-bit patterns of value(code) * 2^-shift for the 8 magnitude codes of a
    sign-magnitude grid."""
    v = grid_values(GRIDS[element])[:8] * 2.0**-shift
    h = v.to(dtype)
    assert torch.equal(h.float(), v), f"{element} is not exact in {dtype}"
    return [int(x) & 0xFFFF for x in h.view(torch.int16)]


def _words(vals: list[int], shift: int) -> dict:
    b = [(v >> shift) & 0xFF for v in vals]
    return (f"0x{b[3]:02X}{b[2]:02X}{b[1]:02X}{b[0]:02X}", f"0x{b[7]:02X}{b[6]:02X}{b[5]:02X}{b[4]:02X}")


@functools.lru_cache(maxsize=None)
def decode_asm(element: str, dec: int, f16: bool, shift: int = 0) -> str:
    """The PTX routine of decode `dec` (1 LUT, 2 CVT) for a 4-bit grid, f16 or bf16 values;
    shift: the LUT's values are value * 2^-shift (3 for UE5M3 operands in f16)."""
    if dec == 2:
        assert shift == 0, "the CVT decode has a fixed exponent (CVT_EXP)"
        return _CVT_F16_ASM.format(**_CVT_SHIFTS[element])
    bits = _magnitude_bits(element, torch.float16 if f16 else torch.bfloat16, shift)
    h0, h1 = _words(bits, 8)
    if f16:
        assert all(b & 0xFF == 0 for b in bits)
        return _LUT_F16_ASM.format(H0=h0, H1=h1)
    l0, l1 = _words(bits, 0)
    return _LUT_BF16_ASM.format(H0=h0, H1=h1, L0=l0, L1=l1)


def _lut_ok(spec) -> bool:
    """A 4-bit sign-magnitude grid with block scales: the LUT decode applies."""
    g = spec.grid
    return g.bits == 4 and not g.twos and spec.scale != "fp32"


def _f16_ok(spec) -> bool:
    return _lut_ok(spec) and (spec.scale == "e4m3" or (spec.scale == "ue5m3" and UE5M3_F16))


def split_plan(a_spec, b_spec, decode: str | None = None) -> dict:
    """The decode of each operand and the MMA type (see the section comment). decode:
    "lut" | "cvt" (CVT where it applies, LUT otherwise) | "generic"; None: DECODE."""
    decode = decode or CONFIG_OVERRIDE.get("decode") or DECODE
    f16 = decode != "generic" and _f16_ok(a_spec) and _f16_ok(b_spec)
    plan = {"DOT_F16": f16}
    epi = 0
    for pre, spec in (("A_", a_spec), ("B_", b_spec)):
        if decode == "generic" or not _lut_ok(spec):
            dec = 0
        elif f16 and decode == "cvt" and spec.element in _CVT_SHIFTS and spec.scale == "e4m3":
            dec = 2
        else:
            dec = 1
        offset = f16 and dec == 1 and spec.scale == "ue5m3"
        plan[pre + "DEC"] = dec
        plan[pre + "ASM"] = decode_asm(spec.element, dec, f16, UE5M3_TABLE_SHIFT if offset else 0) if dec else ""
        epi += CVT_EXP if dec == 2 else UE5M3_EXP if offset else 0
    plan["EPI_EXP"] = epi
    return plan


@triton.jit
def _scale_bytes(SCALES, row, k0, K, SCALE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                 BK: tl.constexpr):
    """Scale bytes of the K-step at k0 (< K), [BR, BK // block], for in-bounds rows (the
    caller clamps them: no mask, no predicate). The loop fetches the next step's bytes a
    step ahead (too small for cp.async, the pipeliner leaves them alone). One byte per
    thread: a wider load (an alignment hint makes a row's bytes one word) makes the layout
    of the scales, and so of the code bytes they multiply, non-contiguous per thread, and
    packing for the PTX decode then costs a prmt per byte (gemm_sass.py: 166 registers)."""
    if SCALE == 0:
        return tl.zeros((row.shape[0], 1), tl.uint8)
    else:
        blk: tl.constexpr = 16 if TILE2D else B
        nb: tl.constexpr = BK // blk
        srow = row // 16 if TILE2D else row
        return tl.load(SCALES + srow * (K // blk) + k0 // blk + tl.arange(0, nb)[None, :])


@triton.jit
def _scale_values(sb, SCALE: tl.constexpr, S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, NANB: tl.constexpr,
                  GENERIC: tl.constexpr, DOT_F16: tl.constexpr):
    """Block scale values: f32 for the generic decode (the reference's decode_scale: E4M3
    read with its sign bit), else exact in the MMA's 16-bit type from the bits: E4M3 -> f16
    by the hardware conversion, UE5M3 -> f16 at 2^-1 (UE5M3_EXP); for bf16, UE8M0
    2^(b - 127) is b << 7 (byte 0 the subnormal 2^-127), E4M3 and UE5M3 line up with bf16
    at 2^-120 and 2^-112."""
    b = sb.to(tl.int32)
    if GENERIC:
        return _scale_f32(b, SCALE, S_EMIN, S_MBITS, NANB)
    elif DOT_F16 and SCALE == 3:  # UE5M3 at 2^-1: exponent field e - 1, subnormal for e < 2
        bits = tl.where(b < 16, b << 6, tl.where(b == 255, 0x7E00, (b << 7) - 1024))
        return bits.to(tl.uint16).to(tl.float16, bitcast=True)
    elif DOT_F16:
        return sb.to(tl.float8e4nv, bitcast=True).to(tl.float16)
    elif SCALE == 1:
        bits = tl.where(b == 0, 0x40, tl.where(b == 255, 0x7FC0, b << 7))
        return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    elif SCALE == 2:
        bits = ((b & 0x7F) << 4) | ((b & 0x80) << 8)
        sv = bits.to(tl.uint16).to(tl.bfloat16, bitcast=True) * 2.0**120
        return tl.where((b & 0x7F) == 0x7F, float("nan"), sv)
    else:
        sv = (b << 4).to(tl.uint16).to(tl.bfloat16, bitcast=True) * 2.0**112
        return tl.where(b == 255, float("nan"), sv)


@triton.jit
def _split_operand(CODES, sb, row, k0, K, EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr,
                   TWOS: tl.constexpr, BITS: tl.constexpr, FP8: tl.constexpr, E2M1: tl.constexpr,
                   SCALE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr, S_EMIN: tl.constexpr,
                   S_MBITS: tl.constexpr, NANB: tl.constexpr, DEC: tl.constexpr, ASM: tl.constexpr,
                   DOT_F16: tl.constexpr, F32: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr):
    """(even, odd) [BR, BK/2] tiles of the K-step at k0 (elements k0 + 2j and k0 + 2j + 1)
    without the tensor scale, given the step's scale bytes `sb`, for in-bounds rows. f32
    under the interpreter (F32, whose bf16 tl.dot is wrong): the same values, CVT's 2^-6
    and UE5M3's 2^-4 in f16 included."""
    NB: tl.constexpr = BK // (16 if TILE2D else B)
    generic: tl.constexpr = F32 or DEC == 0
    if SCALE != 0:
        s = _per_block(_scale_values(sb, SCALE, S_EMIN, S_MBITS, NANB, generic, DOT_F16), BR, BK // 2, BK // 2 // NB)
    if BITS == 4:
        byte = tl.load(CODES + row * (K // 2) + k0 // 2 + tl.arange(0, BK // 2)[None, :])
        if generic:
            c = byte.to(tl.int32)
            c_lo = c & 0xF
            c_hi = c >> 4
    else:
        x = tl.load(CODES + row * K + k0 + tl.arange(0, BK)[None, :]).to(tl.int32)
        c_lo, c_hi = tl.split(tl.reshape(x, (BR, BK // 2, 2)))
    if generic:
        if E2M1:
            lo = _e2m1_bits(c_lo)
            hi = _e2m1_bits(c_hi)
        else:
            lo = _decode(c_lo, EMIN, MBITS, FIXED, TWOS, BITS, FP8)
            hi = _decode(c_hi, EMIN, MBITS, FIXED, TWOS, BITS, FP8)
        if SCALE != 0:
            lo = lo * s
            hi = hi * s
        if DEC == 2:
            lo = lo * 2.0**-6
            hi = hi * 2.0**-6
        elif DOT_F16 and SCALE == 3:  # the f16 table decode of UE5M3 operands: value * 2^-UE5M3_EXP
            lo = lo * 2.0**-4
            hi = hi * 2.0**-4
        if not F32:
            lo = lo.to(tl.float16 if DOT_F16 else tl.bfloat16)
            hi = hi.to(tl.float16 if DOT_F16 else tl.bfloat16)
    else:
        lo, hi = tl.inline_asm_elementwise(ASM, "=r,=r,=r,=r,r,r,r", [byte, s],
                                           dtype=(s.dtype, s.dtype), is_pure=True, pack=4)
    return lo, hi


@triton.jit
def _split_kernel(A_CODES, A_SCALES, A_TS, B_CODES, B_SCALES, B_TS, C, M, N, K,
                  A_EMIN: tl.constexpr, A_MBITS: tl.constexpr, A_FIXED: tl.constexpr, A_TWOS: tl.constexpr,
                  A_BITS: tl.constexpr, A_FP8: tl.constexpr, A_E2M1: tl.constexpr, A_SCALE: tl.constexpr,
                  A_B: tl.constexpr, A_TILE2D: tl.constexpr, A_S_EMIN: tl.constexpr, A_S_MBITS: tl.constexpr,
                  A_NANB: tl.constexpr,
                  B_EMIN: tl.constexpr, B_MBITS: tl.constexpr, B_FIXED: tl.constexpr, B_TWOS: tl.constexpr,
                  B_BITS: tl.constexpr, B_FP8: tl.constexpr, B_E2M1: tl.constexpr, B_SCALE: tl.constexpr,
                  B_B: tl.constexpr, B_TILE2D: tl.constexpr, B_S_EMIN: tl.constexpr, B_S_MBITS: tl.constexpr,
                  B_NANB: tl.constexpr,
                  A_DEC: tl.constexpr, A_ASM: tl.constexpr, B_DEC: tl.constexpr, B_ASM: tl.constexpr,
                  DOT_F16: tl.constexpr, EPI_EXP: tl.constexpr,
                  RNE_BF16: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_ids(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)[:, None]
    rn = pid_n * BN + tl.arange(0, BN)[:, None]
    # Rows past M / N load row M - 1 / N - 1 instead of being masked (no predicates in the
    # loop): they only reach C's rows / columns past M / N, which are not stored.
    rm = tl.minimum(rm, M - 1)
    rn = tl.minimum(rn, N - 1)
    sa = _scale_bytes(A_SCALES, rm, 0, K, A_SCALE, A_B, A_TILE2D, BK)
    sb = _scale_bytes(B_SCALES, rn, 0, K, B_SCALE, B_B, B_TILE2D, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        k_next = tl.where(k0 + BK < K, k0 + BK, 0)  # the last step fetches step 0 again, unused
        sa_next = _scale_bytes(A_SCALES, rm, k_next, K, A_SCALE, A_B, A_TILE2D, BK)
        sb_next = _scale_bytes(B_SCALES, rn, k_next, K, B_SCALE, B_B, B_TILE2D, BK)
        a_lo, a_hi = _split_operand(A_CODES, sa, rm, k0, K, A_EMIN, A_MBITS, A_FIXED, A_TWOS, A_BITS, A_FP8,
                                    A_E2M1, A_SCALE, A_B, A_TILE2D, A_S_EMIN, A_S_MBITS, A_NANB, A_DEC, A_ASM,
                                    DOT_F16, RNE_BF16, BM, BK)
        b_lo, b_hi = _split_operand(B_CODES, sb, rn, k0, K, B_EMIN, B_MBITS, B_FIXED, B_TWOS, B_BITS, B_FP8,
                                    B_E2M1, B_SCALE, B_B, B_TILE2D, B_S_EMIN, B_S_MBITS, B_NANB, B_DEC, B_ASM,
                                    DOT_F16, RNE_BF16, BN, BK)
        if RNE_BF16:  # interpreter: f32 tiles
            acc = tl.dot(a_lo, tl.trans(b_lo), acc, input_precision="ieee")
            acc = tl.dot(a_hi, tl.trans(b_hi), acc, input_precision="ieee")
        else:
            acc = tl.dot(a_lo, tl.trans(b_lo), acc)
            acc = tl.dot(a_hi, tl.trans(b_hi), acc)
        sa = sa_next
        sb = sb_next
    if EPI_EXP:
        acc = acc * 2.0**EPI_EXP  # exact: the CVT operands' 2^-6
    cm = pid_m * BM + tl.arange(0, BM)[:, None]
    cn = pid_n * BN + tl.arange(0, BN)[None, :]
    tl.store(C + cm * N + cn, _scaled_cast(acc, A_TS, B_TS, C, RNE_BF16), mask=(cm < M) & (cn < N))


# Kernel and decode variants, for benchmarks/kernels.py to time old against new in one run
# (CONFIG_OVERRIDE["kernel"] / ["decode"] override these per call; ["cfg"] is the named
# kernel's tile config): KERNEL "ws" (the warp-specialised kernels, gemm_wgmma.launch_packed:
# _ws_kernel, decode warps fill a shared-memory ring that one MMA warpgroup consumes, or for
# NVFP4/UFP4 _rs_kernel, A decoded in the MMA warpgroups' registers; Hopper only, LUT/CVT
# formats, K a multiple of 64; elsewhere "split" runs; 49-62% of cuBLAS BF16 against split's
# 37-53%, kernels-h200.md sessions 12 and 14), "wgmma" (gemm_wgmma._wgmma_kernel, the same decode without warp
# specialisation), "split" (above) or "v1" (_gemm_kernel: interleaved nibbles decoded to
# f32); DECODE "lut" | "cvt" | "generic" (split_plan).
KERNEL = "ws"
DECODE = "cvt"  # CVT where both operands allow it (then BK 128), LUT otherwise: gemm_config

# What a GPU run should time against each other (label, CONFIG_OVERRIDE entries; an
# entry without "cfg" takes gemm_config's). benchmarks/gemm_sass.py has their offline
# counts: LUT vs CVT turns on the rate of cvt.rn.f16x2.e4m3x2 (F2FP), which only a
# GPU can tell; stages and 4 warps trade instructions against latency hiding.
GEMM_VARIANTS = [
    ("v1 128x128x32 w8 s3 (old)", dict(kernel="v1", cfg=(128, 128, 32, 8, 8, 3))),
    ("split lut 128x128x64 w8 s3", dict(kernel="split", decode="lut", cfg=(128, 128, 64, 8, 8, 3))),
    ("split cvt 128x128x64 w8 s3", dict(kernel="split", decode="cvt", cfg=(128, 128, 64, 8, 8, 3))),
    ("split lut 128x128x64 w8 s2", dict(kernel="split", decode="lut", cfg=(128, 128, 64, 8, 8, 2))),
    ("split lut 128x128x64 w8 s4", dict(kernel="split", decode="lut", cfg=(128, 128, 64, 8, 8, 4))),
    ("split lut 128x128x64 w4 s3", dict(kernel="split", decode="lut", cfg=(128, 128, 64, 8, 4, 3))),
    ("split cvt 128x128x128 w8 s3", dict(kernel="split", decode="cvt", cfg=(128, 128, 128, 8, 8, 3))),
    ("split default (cvt + BK 128 where both operands allow it)", dict(kernel="split")),
    ("split lut 128x256x64 w8 s3 (1 CTA/SM)", dict(kernel="split", decode="lut", cfg=(128, 256, 64, 8, 8, 3))),
    ("wgmma 128x128x128 w8 ring 3", dict(kernel="wgmma", cfg=(128, 128, 128, 8, 8, 3))),
    ("wgmma 128x128x64 w8 ring 3", dict(kernel="wgmma", cfg=(128, 128, 64, 8, 8, 3))),
    ("wgmma 128x128x64 w8 ring 3, 128 registers (2 CTAs/SM)", dict(kernel="wgmma", cfg=(128, 128, 64, 8, 8, 3),
                                                                   maxnreg=128)),
    ("wgmma 128x128x64 w8 ring 4", dict(kernel="wgmma", cfg=(128, 128, 64, 8, 8, 4))),
    ("wgmma 256x128x64 w16 ring 3", dict(kernel="wgmma", cfg=(256, 128, 64, 8, 16, 3))),
    ("wgmma 128x256x64 w8 ring 3", dict(kernel="wgmma", cfg=(128, 256, 64, 8, 8, 3))),
]


def gemm_config(m: int, n: int, k: int, k_align: int, kernel: str | None = None, wide: bool = False,
                cvt: bool = False):
    """(BM, BN, BK, GROUP_M, warps, stages) of `kernel` (None: the one _gemm_triton runs);
    wide: an operand has 8-bit codes; cvt: both operands take the CVT decode.

    Measured on the H200 (kernels-h200.md, session 3; % of cuBLAS BF16 at 8192^3 and
    8192x28672x4096): v1 14-20%; split LUT 128x128x64 w8 s3 37-45% (s2, s4, 4 warps and
    128x256 all slower); CVT at 128x128x64 the same as LUT, CVT at 128x128x128 45-51% for
    NVFP4 (its 7 spill stores notwithstanding) but 32-36% for MXFP4, which has no CVT
    decode (bf16 MMA) and spills there: so BK 128 only where both operands take CVT.

    split: the compile-time evidence (benchmarks/gemm_sass.py: sm_90a, Triton 3.6, no GPU;
    per thread per K-step, MMA at 2048 FMA per SM per cycle) for NVFP4 x NVFP4 with the
    LUT decode: 128x128x64, 8 warps, 3 stages, register cap 128 (split_maxnreg): 127
    registers, no spills, wgmma, code bytes through cp.async, two CTAs per SM; 269 loop
    instructions = 4.2 per decoded element (v1: 432 = 13.5), 538 issue cycles per 512 MMA
    cycles per CTA, integer pipe ~690. BK 128 spills under the cap (18 STL/LDL; CVT does
    not: 400 instructions, 3.1 per element); 128x256 and 256x128 need 216+ registers
    (uncapped: one CTA per SM, dequantization and MMA no longer overlap; capped at 128:
    ptxas fails or spills 276); 4 warps (231 registers, 2 CTAs) is 505 instructions per
    512 MMA cycles. 8-bit codes take the generic decode, which spills at BK 64 (13-34
    STL/LDL): BK 32. BK must be a multiple of both operands' blocks, divide K, and give
    MMAs of depth BK/2 >= 16 on the GPU (else v1 runs).

    v1: 128x128x32 with 8 warps (BK 16 where K is not a multiple of 32).
    Interpreter: one small config."""
    kernel = kernel or CONFIG_OVERRIDE.get("kernel") or KERNEL
    if interpreting():
        return 16, 16, 32 if k % 32 == 0 else 16, 1, 4, 1
    if kernel == "split" and cvt and k % 128 == 0 and not wide:
        return 128, 128, 128, 8, 8, 3
    if kernel == "split" and k % 64 == 0 and not wide:
        return 128, 128, 64, 8, 8, 3
    bk = 32 if k % 32 == 0 else 16
    return 128, 128, bk, 8, 8, 3


def split_maxnreg(bm: int, bn: int, warps: int) -> int | None:
    """Register cap of the split kernel: 128 where the accumulator takes at most 64 per
    thread (128x128 with 8 warps), so two CTAs share an SM (2 x 256 threads x 128 = 64K)
    and one's dequantization runs under the other's wgmma. Uncapped, ptxas settles at 127
    for NVFP4 / UFP4 but at 164 for MXFP4 (the bf16 decode; capped: 128, no spills, 1.05x
    the instructions). Larger tiles are left uncapped (128 registers cannot hold them)."""
    return 128 if bm * bn <= 64 * 32 * warps else None


CONFIG_OVERRIDE: dict = {}


def _fmt_consts(prefix: str, p: Packed) -> dict:
    spec = p.spec
    g = spec.grid
    sg = SCALE_GRIDS.get(spec.scale, SCALE_GRIDS["e4m3"])
    return {
        f"{prefix}EMIN": g.emin, f"{prefix}MBITS": g.mbits, f"{prefix}FIXED": g.fixed, f"{prefix}TWOS": g.twos,
        f"{prefix}BITS": g.bits, f"{prefix}FP8": {"e4m3": 1, "e5m2": 2}.get(g.name, 0),
        f"{prefix}E2M1": g.name == "e2m1", f"{prefix}SCALE": SCALE_KIND[spec.scale],
        f"{prefix}B": max(spec.block, 1), f"{prefix}TILE2D": spec.tile_2d, f"{prefix}S_EMIN": sg.emin,
        f"{prefix}S_MBITS": sg.mbits, f"{prefix}NANB": NAN_BYTE.get(spec.scale, 0),
    }


def gemm(a: Packed, b: Packed, out_dtype=torch.bfloat16, impl: str = "auto") -> torch.Tensor:
    """C = A . B^T (see the module doc); A (M, K) and B (N, K) quantized layouts.
    impl: auto | triton | dequant | fp8 (ValueError otherwise; FormatError for fp8 on a
    format other than MXFP4)."""
    check_kernel_input(a.codes, "A codes", (torch.uint8,))
    check_kernel_input(b.codes, "B codes", (torch.uint8,))
    m, k = a.layout_shape
    n, kb = b.layout_shape
    if k != kb:
        raise ShapeError(f"gemm needs the same K: A is {m}x{k}, B is {n}x{kb}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"gemm out_dtype must be bfloat16 or float32, got {out_dtype}")
    impl = check_gemm_impl(impl, a.spec, b.spec)
    if impl == "auto":
        impl = _auto_impl(a, b, m, n, k)
    if impl == "dequant":
        return _gemm_dequant(a, b, m, n, k, out_dtype)
    if impl == "fp8":
        return _gemm_fp8(a, b, m, n, k, out_dtype)
    return _gemm_triton(a, b, m, n, k, out_dtype)


def _wgmma_ok(a: Packed, b: Packed, k: int) -> bool:
    """gemm_wgmma applies: a Hopper GPU (wgmma is sm_90 only), Gluon importable, both
    operands on the LUT/CVT decode with blocks of 16 elements or more, K a multiple of 64."""
    if interpreting() or not a.codes.is_cuda:
        return False
    dev = a.codes.device
    if _capability(dev.index if dev.index is not None else torch.cuda.current_device())[0] != 9:
        return False
    if _gluon() is None:
        return False
    return all(_lut_ok(p.spec) and (p.spec.tile_2d or p.spec.block % 16 == 0) for p in (a, b)) and k % 64 == 0


@functools.lru_cache(maxsize=None)
def _gluon():
    """The gemm_wgmma module, or None where this Triton has no Gluon for Hopper."""
    try:
        from fourcast.kernels import gemm_wgmma
    except ImportError:
        return None
    return gemm_wgmma


def _gemm_triton(a: Packed, b: Packed, m: int, n: int, k: int, out_dtype) -> torch.Tensor:
    blocks = [max(p.spec.block, 1) if not p.spec.tile_2d else 16 for p in (a, b)]
    kernel = CONFIG_OVERRIDE.get("kernel") or KERNEL
    if kernel in ("ws", "wgmma"):
        if _wgmma_ok(a, b, k):
            c = torch.empty((m, n), dtype=out_dtype, device=a.codes.device)
            plan, cfg = split_plan(a.spec, b.spec), CONFIG_OVERRIDE.get("cfg")
            if kernel == "ws":
                _gluon().launch_packed(a, b, c, m, n, k, plan, cfg)
            else:
                _gluon().launch(a, b, c, m, n, k, plan, cfg, CONFIG_OVERRIDE.get("maxnreg"))
            return c
        kernel = "split"
    wide = max(a.spec.grid.bits, b.spec.grid.bits) == 8
    plan = split_plan(a.spec, b.spec)
    cvt = plan["A_DEC"] == 2 and plan["B_DEC"] == 2
    bm, bn, bk, group, warps, stages = CONFIG_OVERRIDE.get("cfg") or gemm_config(m, n, k, max(blocks), kernel, wide,
                                                                               cvt)
    if k % bk or any(bk % blk for blk in blocks):
        raise ShapeError(f"K={k} must be a multiple of the tile depth {bk}, itself a multiple of the blocks {blocks}")
    if kernel == "split" and bk < 32 and not interpreting():
        kernel = "v1"  # MMAs of depth BK/2 < 16: K is not a multiple of 32
    c = torch.empty((m, n), dtype=out_dtype, device=a.codes.device)
    dummy = a.codes
    grid = (_cdiv(m, bm) * _cdiv(n, bn),)
    args = (a.codes, a.scales if a.scales.numel() else dummy, a.tensor_scale.reshape(1).float(),
            b.codes, b.scales if b.scales.numel() else dummy, b.tensor_scale.reshape(1).float(), c, m, n, k)
    consts = dict(**_fmt_consts("A_", a), **_fmt_consts("B_", b), RNE_BF16=interpreting(), BM=bm, BN=bn, BK=bk,
                  GROUP_M=group, num_warps=warps, num_stages=stages)
    if kernel == "split":
        if not interpreting():
            consts["maxnreg"] = CONFIG_OVERRIDE.get("maxnreg", split_maxnreg(bm, bn, warps))
        launcher.run(_split_kernel, grid, args, dict(consts, **plan))
    else:
        launcher.run(_gemm_kernel, grid, args, consts)
    return c


# ------------------------------------------------------------------ impl="dequant" and "fp8"

STATS = {"fp8_fallbacks": 0,  # fp8 calls that fell back to dequant (some row not exact in E4M3)
         "lt_fallbacks": 0}  # scaled_mm calls cuBLASLt had no algorithm for


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=None)
def multiprocessors(device: torch.device) -> int:
    """The SM count of a CUDA device (the persistent kernels' grids)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def _fp8_device_ok(device: torch.device) -> bool:
    """E4M3 tensor cores (sm_89+), or the interpreter (the FP8 GEMM is emulated in f32)."""
    if device.type != "cuda":
        return interpreting()
    return _capability(device.index if device.index is not None else torch.cuda.current_device()) >= (8, 9)


# Let impl="auto" take "fp8" for MXFP4 (1.2-1.6x cuBLAS BF16 on an H200 instead of
# 0.5-0.8x) at the price of FP8 tensor-core accumulation (module doc): off by default,
# so ops.gemm keeps the FP32-accumulation bound it documents.
AUTO_FP8 = False


def _auto_impl(a: Packed, b: Packed, m: int, n: int, k: int) -> str:
    if interpreting():
        return "triton"
    fp8 = (AUTO_FP8 and is_mx_e2m1(a.spec) and is_mx_e2m1(b.spec) and not (m % 16 or n % 16 or k % 16)
           and _fp8_device_ok(a.codes.device))
    return "fp8" if fp8 else "dequant"


def _unit(device) -> torch.Tensor:
    """A read-only f32 1.0 per device (unit tensor scale, unit _scaled_mm scale)."""
    return device_scalar(1.0, device)


def dequantize_unscaled(p: Packed, dtype=torch.bfloat16) -> torch.Tensor:
    """value(code) * block scale in the quantized (M, K) layout, no tensor scale: exact
    in bf16 for every format (module doc), so a bf16 GEMM on it loses nothing."""
    m, k = p.layout_shape
    unit = _unit(p.codes.device)
    return _dequantize(Packed(p.codes, p.scales, unit, unit, p.fmt, (m, k), -1), dtype, unscaled=True)


def _gemm_dequant(a: Packed, b: Packed, m: int, n: int, k: int, out_dtype) -> torch.Tensor:
    dtype = torch.bfloat16 if a.codes.is_cuda else torch.float32  # interpreter: f32 matmul on CPU, same values
    return scaled_mm(dequantize_unscaled(a, dtype), dequantize_unscaled(b, dtype).t(), a.tensor_scale, b.tensor_scale,
                     out_dtype)


@triton.jit
def _per_block(v, BR: tl.constexpr, BK: tl.constexpr, B: tl.constexpr):
    """[BR, BK // B] per-block values -> [BR, BK]."""
    NB: tl.constexpr = BK // B
    return tl.reshape(tl.broadcast_to(tl.reshape(v, (BR, NB, 1)), (BR, NB, B)), (BR, BK))


@triton.jit
def _mx_to_e4m3_kernel(CODES, SCALES, TS, OUT, RSCALE, OK, FLAGS, R, K, B: tl.constexpr, NB2: tl.constexpr,
                       BR: tl.constexpr, BK: tl.constexpr):
    """BR rows of an MXFP4 operand -> E4M3 v * 2^(e - r) and RSCALE = 2^r with
    r = clamp(max_e - 6, -64, 63). OK[row] = 0 where some value is not an exact E4M3
    value or a scale byte is NaN; FLAGS |= 1 if any row is not OK, |= 2 if the tensor
    scale is not 1 (then the alpha epilogue is needed). NB2: K / B rounded up to a
    power of two, so the row maxima take one load."""
    row = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    rmask = row < R
    nb = tl.arange(0, NB2)[None, :]
    sall = tl.load(SCALES + row * (K // B) + nb, mask=rmask & (nb < K // B), other=0).to(tl.int32)
    mx = tl.max(sall, axis=1, keep_dims=True)
    r = tl.minimum(tl.maximum(mx - 133, -64), 63)  # max_e - 6, max_e = byte - 127
    bad = (mx == 255).to(tl.int32)
    jb = tl.arange(0, BK // B)[None, :]
    k2 = tl.arange(0, BK // 2)[None, :]
    kk = tl.arange(0, BK)[None, :]
    for k0 in range(0, K, BK):
        byte = tl.load(CODES + row * (K // 2) + k0 // 2 + k2, mask=rmask, other=0).to(tl.int32)
        c = tl.reshape(tl.join(byte & 0xF, byte >> 4), (BR, BK))
        sb = tl.load(SCALES + row * (K // B) + k0 // B + jb, mask=rmask, other=0).to(tl.int32)
        d = tl.minimum(tl.maximum(sb - 127 - r, -30), 30)  # |v| 2^d stays exact in f32
        f = _e2m1_bits(c) * _per_block(_pow2(d), BR, BK, B)
        q = f.to(tl.float8e4nv)
        bad += tl.sum((q.to(tl.float32) != f).to(tl.int32), axis=1, keep_dims=True)
        tl.store(OUT + row * K + k0 + kk, q, mask=rmask)
    tl.store(RSCALE + row, _pow2(r), mask=rmask)
    tl.store(OK + row, (bad == 0).to(tl.uint8), mask=rmask)
    any_bad = tl.max(tl.max((bad != 0).to(tl.int32), axis=1), axis=0)
    tl.atomic_or(FLAGS, any_bad | tl.where(tl.load(TS) != 1.0, 2, 0))


CONV_OVERRIDE: dict = {}


def _conv_config(k: int, block: int):
    """(BR, BK, warps): BK a multiple of the block dividing K; small under the interpreter.
    benchmarks/kernels.py times alternatives (CONV_OVERRIDE)."""
    if "cfg" in CONV_OVERRIDE:
        return CONV_OVERRIDE["cfg"]
    bk = next(t for t in ((64, 32, 16) if interpreting() else (256, 128, 64, 32, 16)) if k % t == 0 and t % block == 0)
    return 16, bk, 4


def to_e4m3_rowref(p: Packed, flags: torch.Tensor | None = None):
    """MXFP4 operand (quantized layout (R, K)) -> (E4M3 (R, K), f32 2^r (R,), ok (R,) bool):
    where ok, e4m3.float() * 2^r is value(code) * 2^e exactly (dequantize_layout without
    the tensor scale). `flags` (int32 (1,)) gets bit 0 when some row is not ok, bit 1
    when the tensor scale is not 1."""
    check_kernel_input(p.codes, "codes", (torch.uint8,))
    spec = p.spec
    if not is_mx_e2m1(spec):
        check_gemm_impl("fp8", spec, spec)
    r, k = p.layout_shape
    dev = p.codes.device
    out = torch.empty((r, k), dtype=torch.float8_e4m3fn, device=dev)
    rscale = torch.empty((r,), dtype=torch.float32, device=dev)
    ok = torch.empty((r,), dtype=torch.uint8, device=dev)
    flags = torch.zeros((1,), dtype=torch.int32, device=dev) if flags is None else flags
    br, bk, warps = _conv_config(k, spec.block)
    launcher.run(_mx_to_e4m3_kernel, (_cdiv(r, br),),
                 (p.codes, p.scales, p.tensor_scale.reshape(1).float(), out, rscale, ok, flags, r, k),
                 dict(B=spec.block, NB2=triton.next_power_of_2(k // spec.block), BR=br, BK=bk, num_warps=warps))
    return out, rscale, ok.bool()


def _mm_e4m3(a8: torch.Tensor, b8: torch.Tensor) -> torch.Tensor:
    """FP32 A8 . B8^T: cuBLAS FP8 (B column-major as _scaled_mm needs, unit tensor-wise
    scales), or an f32 matmul under the interpreter (E4M3 products are exact in f32)."""
    if a8.is_cuda:
        one = _unit(a8.device)
        return torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
    return torch.mm(a8.float(), b8.float().t())


@functools.lru_cache(maxsize=None)
def _rowwise_ok(device: torch.device, out_dtype: torch.dtype) -> bool:
    """Whether _scaled_mm takes per-row / per-column f32 scales with this output dtype
    here (bf16 from sm_89; f32 only through cuBLAS on sm_90): tried once, on 16x16x16."""
    try:
        x = torch.zeros((16, 16), dtype=torch.float8_e4m3fn, device=device)
        s = torch.ones((16, 1), dtype=torch.float32, device=device)
        torch._scaled_mm(x, x.t(), scale_a=s, scale_b=s.t(), out_dtype=out_dtype)
        return True
    except (RuntimeError, ValueError, NotImplementedError):
        return False


def _gemm_fp8(a: Packed, b: Packed, m: int, n: int, k: int, out_dtype) -> torch.Tensor:
    if not _fp8_device_ok(a.codes.device):
        raise NotImplementedError("gemm impl 'fp8' needs E4M3 tensor cores (compute capability 8.9+); "
                                  "use impl='dequant'")
    if m % 16 or n % 16 or k % 16:
        raise ShapeError(f"gemm impl 'fp8' needs M, N, K multiples of 16 (cuBLAS FP8), got {m}x{n}x{k}")
    flags = torch.zeros((1,), dtype=torch.int32, device=a.codes.device)
    a8, sa, _ = to_e4m3_rowref(a, flags)
    b8, sb, _ = to_e4m3_rowref(b, flags)
    f = int(flags.item())  # the one host sync
    if f & 1:  # a row spans too many binades for E4M3 (or has a NaN scale): not exact
        STATS["fp8_fallbacks"] += 1
        return _gemm_dequant(a, b, m, n, k, out_dtype)
    if not f & 2 and a8.is_cuda and _rowwise_ok(a8.device, out_dtype):
        # unit tensor scales (MXFP4's): the divisions are identities, and cuBLAS's
        # acc * 2^ra * 2^rb (exact) rounded once to out_dtype is the epilogue's result
        return torch._scaled_mm(a8, b8.t(), scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=out_dtype)
    return _epilogue(_mm_e4m3(a8, b8), sa, sb, a.tensor_scale, b.tensor_scale, out_dtype)


@triton.jit
def _epilogue_kernel(ACC, SA, SB, A_TS, B_TS, C, M, N, ROWCOL: tl.constexpr, RNE_BF16: tl.constexpr,
                     BM: tl.constexpr, BN: tl.constexpr):
    """C = ((ACC * SA[m]) * SB[n]) * alpha (the row/column factors when ROWCOL), cast to
    C's dtype: _gemm_kernel's epilogue on an FP32 product from cuBLAS."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    rn = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    mask = (rm < M) & (rn < N)
    acc = tl.load(ACC + rm * N + rn, mask=mask, other=0.0)
    if ROWCOL:
        acc = acc * tl.load(SA + rm, mask=rm < M, other=1.0)
        acc = acc * tl.load(SB + rn, mask=rn < N, other=1.0)
    tl.store(C + rm * N + rn, _scaled_cast(acc, A_TS, B_TS, C, RNE_BF16), mask=mask)


def _epilogue(acc: torch.Tensor, sa, sb, ts_a: torch.Tensor, ts_b: torch.Tensor, out_dtype) -> torch.Tensor:
    """One pass over the FP32 product (in place for an f32 output)."""
    acc = acc.contiguous()
    m, n = acc.shape
    c = acc if out_dtype == torch.float32 else torch.empty((m, n), dtype=out_dtype, device=acc.device)
    bm, bn = (32, 32) if interpreting() else (64, 128)
    rowcol = sa is not None
    launcher.run(_epilogue_kernel, (_cdiv(m, bm), _cdiv(n, bn)),
                 (acc, sa if rowcol else acc, sb if rowcol else acc, ts_a.reshape(1).float(), ts_b.reshape(1).float(),
                  c, m, n), dict(ROWCOL=rowcol, RNE_BF16=interpreting(), BM=bm, BN=bn, num_warps=4))
    return c


# ------------------------------------------------------------------ the emulated GEMM on decoded operands


@triton.jit
def _alpha_kernel(TS_A, TS_B, OUT):
    """OUT = (1 / TS_A) / TS_B, each step correctly rounded (epilogue_alpha on CUDA)."""
    ts_a = tl.load(TS_A)
    tl.store(OUT, tl.math.div_rn(tl.math.div_rn(tl.full(ts_a.shape, 1.0, tl.float32), ts_a), tl.load(TS_B)))


def epilogue_alpha(ts_a: torch.Tensor | None, ts_b: torch.Tensor | None) -> torch.Tensor:
    """alpha = (1 / ts_a) / ts_b, an f32 scalar on their device (a missing scale counts as
    1): the factor every GEMM route's epilogue multiplies the FP32 product by. Taking the
    reciprocal first keeps it finite wherever the result is (ts_a * ts_b can overflow).
    On CUDA one tiny kernel (one launch per GEMM where torch's ops took two), the same bits."""
    if ts_a is None:
        ts_a, ts_b = ts_b, None
    if ts_a is None:
        raise ValueError("epilogue_alpha needs at least one tensor scale")
    ts_a = ts_a.reshape(()).float()
    ts_b = _unit(ts_a.device) if ts_b is None else ts_b.reshape(()).float()
    if ts_a.is_cuda:
        alpha = torch.empty((), dtype=torch.float32, device=ts_a.device)
        launcher.run(_alpha_kernel, (1,), (ts_a, ts_b, alpha), dict(num_warps=1))
        return alpha
    return torch.reciprocal(ts_a).div_(ts_b)


def _mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with FP32 accumulation and an FP32 result (bf16 tensor cores on CUDA)."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a.float(), b.float())


def fused_epilogue(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when scaled_mm takes the cuBLASLt route (the epilogue inside the GEMM)."""
    return (a.is_cuda and a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16 and not torch.compiler.is_compiling()
            and cublaslt.available(a.device))


def scaled_mm(a: torch.Tensor, b: torch.Tensor, ts_a: torch.Tensor | None, ts_b: torch.Tensor | None,
              out_dtype: torch.dtype) -> torch.Tensor:
    """(a @ b) * epilogue_alpha(ts_a, ts_b) rounded once to out_dtype, FP32 accumulation:
    the GEMM of every route that decodes its operands first (impl "dequant", QLinear).
    a (M, K), b (K, N): decoded values without their tensor scales (None: no scale),
    transposed views welcome. bf16 on CUDA: one cuBLASLt call with alpha on the device
    (kernels/cublaslt.py). Otherwise, or where cuBLASLt has no algorithm for the case
    (STATS counts those): an FP32 product and the epilogue as a second pass (f32 on CPU)."""
    if fused_epilogue(a, b):
        alpha = _unit(a.device) if ts_a is None and ts_b is None else epilogue_alpha(ts_a, ts_b)
        out = cublaslt.matmul(a, b, alpha, out_dtype)
        if out is not None:
            return out
        STATS["lt_fallbacks"] += 1
    acc = _mm_f32(a, b)
    if ts_a is None and ts_b is None:
        return acc.to(out_dtype)
    if acc.is_cuda:
        unit = _unit(acc.device)
        return _epilogue(acc, None, None, unit if ts_a is None else ts_a, unit if ts_b is None else ts_b, out_dtype)
    return acc.mul_(epilogue_alpha(ts_a, ts_b)).to(out_dtype)
