"""Packed block-scaled GEMM (Triton): C[M, N] = A[M, K] . B[N, K]^T with both operands
as Packed codes + scale bytes + tensor scale, blocked along K.

Each K-step loads nibbles and scale bytes, dequantizes in registers to bf16
(value(code) * block scale: every E2M1/E1M2/INT4 value times an E4M3, UE5M3 or UE8M0
scale is exact in bf16, and so is an FP8 value times an E4M3/UE8M0 scale), and feeds
tl.dot with FP32 accumulation. The tensor scales are divided out in the epilogue:
C = (acc / ts_a) / ts_b, cast to bf16 or f32.

Error bound (tests/gpu/test_gemm.py): with A_hat, B_hat the dequantized operands and
C64 their float64 product, |C - C64| <= 2 * K * 2^-24 * (|A_hat| |B_hat|^T) + the output
rounding (2^-8 |C64| for bf16): FP32 accumulation in any order (tensor cores included)
plus the two epilogue divisions.

Three implementations (`impl`); "triton" and "dequant" within that bound, "fp8" not:
- "triton": the kernel above (dequantization in registers, not overlapped with the MMA).
- "dequant": each operand dequantized once to bf16 without its tensor scale (exact, as
  above), one cuBLAS bf16 GEMM with FP32 output (torch.mm out_dtype=float32; float32
  matmul on CPU under the interpreter), then the same epilogue (acc / ts_a) / ts_b.
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
  ((acc * 2^ra) * 2^rb / ts_a) / ts_b. The products of E4M3 values are exact and so
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
from fourcast.kernels.quantize import SCALE_KIND, _cast_out, _cdiv, _decode, _pow2
from fourcast.kernels.quantize import dequantize as _dequantize
from fourcast.kernels.utils import (
    NAN_BYTE,
    SCALE_GRIDS,
    Packed,
    check_gemm_impl,
    check_kernel_input,
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
    """The epilogue of every GEMM route: (acc / ts_a) / ts_b, each division correctly
    rounded, then cast to C's element type (round to nearest even)."""
    out = tl.math.div_rn(tl.math.div_rn(acc, tl.broadcast_to(tl.load(A_TS), acc.shape)),
                         tl.broadcast_to(tl.load(B_TS), acc.shape))
    return _cast_out(out, C, RNE_BF16)


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
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
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


def gemm_config(m: int, n: int, k: int, k_align: int):
    """(BM, BN, BK, GROUP_M, warps, stages). Large output tiles amortise the per-element
    dequantization over more MMA work (dequant cost ~ (BM + BN) * BK, MMA ~ BM * BN * BK),
    but the dequantized tiles live in registers beside the accumulator: ptxas (sm_90a,
    compiled here without a GPU) reports 206 registers and no spills for 128x128x32 with
    8 warps, while 128x256x64 and 128x128x64 spill. BK must be a multiple of both
    operands' blocks (16 or 32) and divide K. benchmarks/kernels.py times the
    alternatives (CONFIG_OVERRIDE). Interpreter: one small config."""
    if interpreting():
        return 16, 16, 32 if k % 32 == 0 else 16, 1, 4, 1
    bk = 32 if k % 32 == 0 else 16
    return 128, 128, bk, 8, 8, 3


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


def _gemm_triton(a: Packed, b: Packed, m: int, n: int, k: int, out_dtype) -> torch.Tensor:
    blocks = [max(p.spec.block, 1) if not p.spec.tile_2d else 16 for p in (a, b)]
    bm, bn, bk, group, warps, stages = CONFIG_OVERRIDE.get("cfg") or gemm_config(m, n, k, max(blocks))
    if k % bk or any(bk % blk for blk in blocks):
        raise ShapeError(f"K={k} must be a multiple of the tile depth {bk}, itself a multiple of the blocks {blocks}")
    c = torch.empty((m, n), dtype=out_dtype, device=a.codes.device)
    dummy = a.codes
    grid = (_cdiv(m, bm) * _cdiv(n, bn),)
    _gemm_kernel[grid](
        a.codes, a.scales if a.scales.numel() else dummy, a.tensor_scale.reshape(1).float(),
        b.codes, b.scales if b.scales.numel() else dummy, b.tensor_scale.reshape(1).float(), c, m, n, k,
        **_fmt_consts("A_", a), **_fmt_consts("B_", b), RNE_BF16=interpreting(), BM=bm, BN=bn, BK=bk,
        GROUP_M=group, num_warps=warps, num_stages=stages)
    return c


# ------------------------------------------------------------------ impl="dequant" and "fp8"

STATS = {"fp8_fallbacks": 0}  # fp8 calls that fell back to dequant (some row not exact in E4M3)


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


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


_UNITS: dict[torch.device, torch.Tensor] = {}


def _unit(device) -> torch.Tensor:
    """A read-only f32 1.0 per device (unit tensor scale, unit _scaled_mm scale)."""
    u = _UNITS.get(device)
    if u is None:
        u = _UNITS[device] = torch.ones((), dtype=torch.float32, device=device)
    return u


def dequantize_unscaled(p: Packed, dtype=torch.bfloat16) -> torch.Tensor:
    """value(code) * block scale in the quantized (M, K) layout, no tensor scale: exact
    in bf16 for every format (module doc), so a bf16 GEMM on it loses nothing."""
    m, k = p.layout_shape
    unit = _unit(p.codes.device)
    return _dequantize(Packed(p.codes, p.scales, unit, unit, p.fmt, (m, k), -1), dtype)


def _gemm_dequant(a: Packed, b: Packed, m: int, n: int, k: int, out_dtype) -> torch.Tensor:
    if a.codes.is_cuda:
        acc = torch.mm(dequantize_unscaled(a), dequantize_unscaled(b).t(), out_dtype=torch.float32)
    else:  # interpreter: no bf16 -> f32 mm on CPU; the same values in f32
        acc = torch.mm(dequantize_unscaled(a, torch.float32), dequantize_unscaled(b, torch.float32).t())
    return _epilogue(acc, None, None, a.tensor_scale, b.tensor_scale, out_dtype)


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
    scale is not 1 (then the division epilogue is needed). NB2: K / B rounded up to a
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
    _mx_to_e4m3_kernel[(_cdiv(r, br),)](p.codes, p.scales, p.tensor_scale.reshape(1).float(), out, rscale, ok, flags,
                                        r, k, B=spec.block, NB2=triton.next_power_of_2(k // spec.block), BR=br,
                                        BK=bk, num_warps=warps)
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
    """C = ((ACC * SA[m]) * SB[n] / ts_a) / ts_b (the row/column factors when ROWCOL),
    cast to C's dtype: _gemm_kernel's epilogue on an FP32 product from cuBLAS."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    rn = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    mask = (rm < M) & (rn < N)
    acc = tl.load(ACC + rm * N + rn, mask=mask, other=0.0)
    if ROWCOL:
        acc = acc * tl.load(SA + rm, mask=rm < M, other=1.0)
        acc = acc * tl.load(SB + rn, mask=rn < N, other=1.0)
    tl.store(C + rm * N + rn, _scaled_cast(acc, A_TS, B_TS, C, RNE_BF16), mask=mask)


def scale_epilogue(acc: torch.Tensor, ts_a: torch.Tensor, ts_b: torch.Tensor | None, out_dtype) -> torch.Tensor:
    """(acc / ts_a) / ts_b cast to out_dtype in one pass over an FP32 GEMM product (ts_b
    None: acc / ts_a): the bits of torch's acc.div_(ts_a).div_(ts_b).to(out_dtype) (each
    step correctly rounded) for a third of the traffic; QLinear's emulated GEMMs use it."""
    return _epilogue(acc, None, None, ts_a, _unit(acc.device) if ts_b is None else ts_b, out_dtype)


def _epilogue(acc: torch.Tensor, sa, sb, ts_a: torch.Tensor, ts_b: torch.Tensor, out_dtype) -> torch.Tensor:
    """One pass over the FP32 product (in place for an f32 output)."""
    acc = acc.contiguous()
    m, n = acc.shape
    c = acc if out_dtype == torch.float32 else torch.empty((m, n), dtype=out_dtype, device=acc.device)
    bm, bn = (32, 32) if interpreting() else (64, 128)
    rowcol = sa is not None
    _epilogue_kernel[(_cdiv(m, bm), _cdiv(n, bn))](
        acc, sa if rowcol else acc, sb if rowcol else acc, ts_a.reshape(1).float(), ts_b.reshape(1).float(), c, m, n,
        ROWCOL=rowcol, RNE_BF16=interpreting(), BM=bm, BN=bn, num_warps=4)
    return c
