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

Example (CUDA):
    >>> c = gemm(ops.quantize(a, f), ops.quantize(b, f))    # doctest: +SKIP
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fourcast.errors import ShapeError
from fourcast.kernels.quantize import SCALE_KIND, _cdiv, _decode, _pow2
from fourcast.kernels.utils import NAN_BYTE, SCALE_GRIDS, Packed, check_kernel_input, interpreting


@triton.jit
def _e2m1_bits(c):
    """E2M1 code (int32, 0..15) -> f32 value, from bits: normal magnitudes 2..7 are
    (mag << 22) + 0x3F000000 (exponent and mantissa line up), 1 is 0.5, 0 is 0."""
    mag = c & 7
    bits = tl.where(mag >= 2, (mag << 22) + 0x3F000000, tl.where(mag == 1, 0x3F000000, 0))
    return (bits | ((c & 8) << 28)).to(tl.float32, bitcast=True)


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
    ts_a = tl.load(A_TS)
    ts_b = tl.load(B_TS)
    out = tl.math.div_rn(tl.math.div_rn(acc, tl.broadcast_to(ts_a, acc.shape)), tl.broadcast_to(ts_b, acc.shape))
    cm = pid_m * BM + tl.arange(0, BM)[:, None]
    cn = pid_n * BN + tl.arange(0, BN)[None, :]
    if RNE_BF16 and C.dtype.element_ty == tl.bfloat16:
        bits = out.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        res = bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        res = out.to(C.dtype.element_ty)
    tl.store(C + cm * N + cn, res, mask=(cm < M) & (cn < N))


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


def gemm(a: Packed, b: Packed, out_dtype=torch.bfloat16) -> torch.Tensor:
    """C = A . B^T (see the module doc); A (M, K) and B (N, K) quantized layouts."""
    check_kernel_input(a.codes, "A codes", (torch.uint8,))
    check_kernel_input(b.codes, "B codes", (torch.uint8,))
    m, k = a.layout_shape
    n, kb = b.layout_shape
    if k != kb:
        raise ShapeError(f"gemm needs the same K: A is {m}x{k}, B is {n}x{kb}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"gemm out_dtype must be bfloat16 or float32, got {out_dtype}")
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
