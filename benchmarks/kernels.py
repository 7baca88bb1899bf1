"""GPU benchmark of fourcast's Triton kernels against the peers, in ONE device call.

Checks correctness first (fake-quant outputs bit-exact to the PyTorch reference on the
same device, GEMM within the FP32-accumulation bound), then times every variant with
triton.testing.do_bench (median, fresh random bf16 inputs) beside: the device's copy
bandwidth, cuBLAS BF16 and FP8 (torch._scaled_mm) GEMMs, and PyTorch eager /
torch.compile NVFP4 fake-quant and quantize+pack written the way a user would.
Prints a short table last and writes JSON (incrementally) to $OUT/kernels-h200.json.

Usage (on the GPU machine): python benchmarks/kernels.py --budget 240
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import time
import traceback

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.testing import do_bench

import fourcast as fc
from fourcast.kernels import fake_quant as fk
from fourcast.kernels import gemm as gk
from fourcast.kernels import launcher
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

import peers as pp  # benchmarks/peers.py: the PyTorch peers

F = testing.FORMATS
DEV = "cuda"
T0 = time.time()
RES: dict = {"meta": {}, "ceilings": {}, "quantizer": [], "peers": {}, "gemm": [], "gemm_fp8_exact": [], "qlinear": [],
             "linear": [], "checks": [], "errors": [], "notes": []}
ARGS = None


def left() -> float:
    return ARGS.budget - (time.time() - T0)


def save():
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "kernels-h200.json"), "w") as fh:
        json.dump(RES, fh, indent=1, default=str)


SMOKE = os.environ.get("BENCH_SMOKE") == "1"  # CPU + TRITON_INTERPRET=1, tiny shapes: script bugs only
if SMOKE:
    DEV = "cpu"


def ms(fn, rep=100) -> float:
    if SMOKE:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def section(name):
    def wrap(fn):
        @functools.wraps(fn)
        def run():
            if left() < 20:
                RES["errors"].append(f"{name}: skipped, budget exhausted")
                log("SKIP", name)
                return
            log("==", name)
            try:
                fn()
            except Exception as exc:  # keep going: one broken variant must not hide the rest
                RES["errors"].append(f"{name}: {exc!r}")
                traceback.print_exc()
            save()
        return run
    return wrap


def rand(shape, dtype=torch.bfloat16):
    return torch.randn(shape, device=DEV, dtype=torch.float32).to(dtype)


# ------------------------------------------------------------------ sections

@section("meta")
def meta():
    p = torch.cuda.get_device_properties(0) if not SMOKE else type("P", (), dict(name="cpu-smoke",
                                                                                    multi_processor_count=0))
    RES["meta"] = dict(gpu=p.name, sms=p.multi_processor_count, torch=torch.__version__, triton=triton.__version__,
                       date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       python=sys.version.split()[0], cuda=torch.version.cuda)
    log(RES["meta"])


@section("copy bandwidth")
def ceiling_copy():
    n = 1 << 29 if not SMOKE else 1 << 10  # 1 GiB of bf16
    a = rand((n,))
    b = torch.empty_like(a)
    t = ms(lambda: b.copy_(a))
    RES["ceilings"]["copy_tbps"] = 2 * a.numel() * 2 / t / 1e9
    log(f"copy {RES['ceilings']['copy_tbps']:.2f} TB/s")


GEMM_SHAPES = [(8192, 8192, 8192), (8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336)]
if SMOKE:
    GEMM_SHAPES = [(64, 64, 64), (32, 48, 64)]


@section("cuBLAS bf16 / fp8")
def ceiling_gemm():
    RES["ceilings"]["bf16"] = {}
    RES["ceilings"]["fp8"] = {}
    for (m, n, k) in GEMM_SHAPES:
        a, b = rand((m, k)), rand((n, k))
        t = ms(lambda: torch.mm(a, b.t()))
        RES["ceilings"]["bf16"][f"{m}x{n}x{k}"] = dict(ms=t, tflops=2 * m * n * k / t / 1e9)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=DEV)
        t8 = ms(lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16))
        RES["ceilings"]["fp8"][f"{m}x{n}x{k}"] = dict(ms=t8, tflops=2 * m * n * k / t8 / 1e9)
        log(f"{m}x{n}x{k}: bf16 {2 * m * n * k / t / 1e9:.0f} TFLOP/s, fp8 {2 * m * n * k / t8 / 1e9:.0f}")


QSIZES = [(8192, 8192), (16384, 4096)] if not SMOKE else [(64, 64)]
BIG = (8192, 8192) if not SMOKE else (64, 64)


def qbytes(r, c, spec_block, copies=1, xhat=False, src_bytes=2):
    """Fewest bytes: read the input once (bf16; src_bytes 4: f32); write per copy 0.5 B codes +
    1/block B scales (or 2 B x_hat). copies = (decoded, packed) counts when a call writes one of
    each (xhat None)."""
    if isinstance(copies, tuple):
        return r * c * (src_bytes + copies[0] * 2.0 + copies[1] * (0.5 + 1.0 / spec_block))
    per = 2.0 if xhat else 0.5 + 1.0 / spec_block
    return r * c * (src_bytes + copies * per)


def _route(route, fn):
    """fn() with quantize_rowcol pinned to one kernel: "strip" or "transpose" ("gluon": the
    default route, rowcol_gluon.py where it applies)."""
    qk.CONFIG_OVERRIDE["rowcol"] = route
    try:
        return fn()
    finally:
        qk.CONFIG_OVERRIDE.pop("rowcol", None)


@triton.jit
def _io_store_rows(b, CODES, SCALES, pid_r, pid_k, K, BM: tl.constexpr, BK: tl.constexpr):
    """A quantizer's bytes for an int [BM, BK] tile of bf16 bits, rows pid_r's and columns
    pid_k's of a (., K) layout: BK/2 code bytes (a stand-in nibble pair) and BK/16 scale
    bytes (a block max) per row; no quantizer arithmetic."""
    m = pid_r * BM + tl.arange(0, BM)[:, None]
    lo, hi = tl.split(tl.reshape(b, (BM, BK // 2, 2)))
    k2 = pid_k * (BK // 2) + tl.arange(0, BK // 2)[None, :]
    tl.store(CODES + m * (K // 2) + k2, ((lo >> 12) | ((hi >> 12) << 4)).to(tl.uint8))
    k16 = pid_k * (BK // 16) + tl.arange(0, BK // 16)[None, :]
    tl.store(SCALES + m * (K // 16) + k16, tl.max(tl.reshape(b, (BM, BK // 16, 16)), axis=2).to(tl.uint8))


@triton.jit
def _io_tile(X, K, BM: tl.constexpr, BK: tl.constexpr):
    m = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    k = tl.program_id(1) * BK + tl.arange(0, BK)[None, :]
    return tl.load(X + m * K + k).to(tl.int16, bitcast=True).to(tl.int32)


@triton.jit
def _io_floor_kernel(X, CODES, SCALES, M, K, BM: tl.constexpr, BK: tl.constexpr):
    """The quantizer's memory traffic without its arithmetic: load a bf16 tile, store
    BK/2 bytes + BK/16 bytes per row (a calibration of the tiling, not a quantizer)."""
    _io_store_rows(_io_tile(X, K, BM, BK), CODES, SCALES, tl.program_id(0), tl.program_id(1), K, BM, BK)


def io_floor(x):
    r, c = x.shape
    codes = torch.empty((r, c // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((r, c // 16), dtype=torch.uint8, device=x.device)
    _io_floor_kernel[(r // 64, c // 64)](x, codes, scales, r, c, BM=64, BK=64, num_warps=8)


@triton.jit
def _io_floor_rowcol_kernel(X, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: tl.constexpr, BK: tl.constexpr):
    """_io_floor_kernel for both copies: the row copy's bytes as there, the column copy's
    (rows 2i and 2i + 1 of a column share a code byte) stored transposed through tl.trans
    (Triton moves the tile through shared memory): the traffic of a transposing row+col
    quantizer without its arithmetic."""
    b = _io_tile(X, C, BM, BK)
    _io_store_rows(b, CODES_R, SCALES_R, tl.program_id(0), tl.program_id(1), C, BM, BK)
    _io_store_rows(tl.trans(b), CODES_C, SCALES_C, tl.program_id(1), tl.program_id(0), R, BK, BM)


@triton.jit
def _io_floor_rowcol_packed_kernel(X, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: tl.constexpr,
                                   BK: tl.constexpr):
    """_io_floor_rowcol_kernel with the column copy's bytes made before the transpose: code
    bytes of row pairs and block maxes in x's orientation, then tl.trans of those bytes (an
    eighth of the tile's bytes through shared memory, where the other moves the tile)."""
    b = _io_tile(X, C, BM, BK)
    _io_store_rows(b, CODES_R, SCALES_R, tl.program_id(0), tl.program_id(1), C, BM, BK)
    lo, hi = tl.split(tl.permute(tl.reshape(b, (BM // 2, 2, BK)), (0, 2, 1)))
    codes = tl.trans(((lo >> 12) | ((hi >> 12) << 4)).to(tl.uint8))  # [BK, BM / 2]
    scales = tl.trans(tl.max(tl.reshape(b, (BM // 16, 16, BK)), axis=1).to(tl.uint8))  # [BK, BM / 16]
    c = tl.program_id(1) * BK + tl.arange(0, BK)[:, None]
    i = tl.program_id(0) * (BM // 2) + tl.arange(0, BM // 2)[None, :]
    tl.store(CODES_C + c * (R // 2) + i, codes)
    j = tl.program_id(0) * (BM // 16) + tl.arange(0, BM // 16)[None, :]
    tl.store(SCALES_C + c * (R // 16) + j, scales)


@gluon.jit
def _nibble_byte(lo, hi, SHIFT: gl.constexpr):
    """The stand-in code byte of two bf16 elements: 4 bits of each (bits SHIFT .. SHIFT + 3
    of their words)."""
    return (((lo >> SHIFT) & 0xF) | (((hi >> SHIFT) & 0xF) << 4)).to(gl.uint8)


@gluon.jit
def _io_rowcol_gluon_kernel(X, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: gl.constexpr, BK: gl.constexpr,
                            NW: gl.constexpr):
    """The row+col io floor with the transpose in explicit layouts (Gluon): rows 2i and 2i + 1
    loaded as 32-bit words (two bf16), the row copy's bytes stored from them, then both moved
    by gl.convert_layout to a layout whose threads hold 4 row pairs of a column, so the column
    copy's code bytes go out 4 a thread and 32 a column per warp; scale bytes from stand-in
    loads. BK a multiple of 128, BM of 64."""
    H: gl.constexpr = BM // 2  # row pairs
    W: gl.constexpr = BK // 2  # 32-bit words (two bf16) per row
    LR: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [NW, 1], [1, 0])  # rows: 16-byte loads along a row
    LC: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, NW], [0, 1])  # columns: 4 row pairs a thread
    LS: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [NW, 1], [1, 0])
    LT: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, NW], [0, 1])
    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    i = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LR))[:, None]
    w = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LR))[None, :]
    e = gl.load(XW + (2 * i) * (C // 2) + w)  # rows 2i
    o = gl.load(XW + (2 * i + 1) * (C // 2) + w)  # rows 2i + 1
    # row copy: a word's two elements make a code byte; a scale byte per 8 words (a stand-in load)
    gl.store(CODES_R + (2 * i) * (C // 2) + w, _nibble_byte(e, e >> 16, 12))
    gl.store(CODES_R + (2 * i + 1) * (C // 2) + w, _nibble_byte(o, o >> 16, 12))
    i_s = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LS))[:, None]
    g = pid_c * (W // 8) + gl.arange(0, W // 8, layout=gl.SliceLayout(0, LS))[None, :]
    gl.store(SCALES_R + (2 * i_s) * (C // 16) + g, gl.load(XW + (2 * i_s) * (C // 2) + 8 * g).to(gl.uint8))
    gl.store(SCALES_R + (2 * i_s + 1) * (C // 16) + g, gl.load(XW + (2 * i_s + 1) * (C // 2) + 8 * g).to(gl.uint8))
    # column copy: the same words with row pairs along each thread (a transpose through shared
    # memory that gl.convert_layout makes), then bytes of element columns 2w and 2w + 1
    ec = gl.convert_layout(e, LC)
    oc = gl.convert_layout(o, LC)
    ic = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LC))[:, None]
    wc = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LC))[None, :]
    gl.store(CODES_C + (2 * wc) * (R // 2) + ic, _nibble_byte(ec, oc, 12))
    gl.store(CODES_C + (2 * wc + 1) * (R // 2) + ic, _nibble_byte(ec, oc, 28))
    j = pid_r * (BM // 16) + gl.arange(0, BM // 16, layout=gl.SliceLayout(1, LT))[:, None]
    wt = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LT))[None, :]
    s = gl.load(XW + (16 * j) * (C // 2) + wt)
    gl.store(SCALES_C + (2 * wt) * (R // 16) + j, s.to(gl.uint8))
    gl.store(SCALES_C + (2 * wt + 1) * (R // 16) + j, (s >> 16).to(gl.uint8))


def _io_gluon_bytes_ok(x, cr, sr, cc, sc) -> bool:
    """_io_rowcol_gluon_kernel's stand-in bytes, from x in torch: code nibbles are bits 12-15
    of each element; scale bytes the low byte of the block's first element."""
    bits = x.view(torch.int16).to(torch.int32) & 0xFFFF
    nib, low = (bits >> 12) & 0xF, bits & 0xFF
    t, lt = nib.t(), low.t()
    return bool(torch.equal(cr, (nib[:, 0::2] | nib[:, 1::2] << 4).to(torch.uint8))
                and torch.equal(cc, (t[:, 0::2] | t[:, 1::2] << 4).to(torch.uint8))
                and torch.equal(sr, low[:, 0::16].to(torch.uint8)) and torch.equal(sc, lt[:, 0::16].to(torch.uint8)))


IO_TILES = ((64, 64, 8), (64, 64, 4), (128, 64, 8), (64, 128, 8), (128, 128, 8), (32, 128, 4), (256, 64, 8),
            (128, 256, 8), (64, 128, 4), (128, 128, 4))


@section("io floors: the quantizers' traffic without arithmetic, per tile")
def io_floors():
    """What fraction of copy bandwidth a quantizer's memory traffic reaches at each tile
    (BM, BK, warps), with no arithmetic: one copy (_io_floor_kernel, as the quantizer
    table's "io floor" row) and both copies, the column one transposed through shared
    memory (_io_floor_rowcol_kernel: the tile; _io_floor_rowcol_packed_kernel: its bytes).
    Whether 80% of copy is reachable at all."""
    if SMOKE:
        return
    for (r, c) in QSIZES:
        x = rand((r, c))
        cr = torch.empty((r, c // 2), dtype=torch.uint8, device=DEV)
        sr = torch.empty((r, c // 16), dtype=torch.uint8, device=DEV)
        cc = torch.empty((c, r // 2), dtype=torch.uint8, device=DEV)
        sc = torch.empty((c, r // 16), dtype=torch.uint8, device=DEV)
        for (bm, bk, w) in IO_TILES:
            grid = (r // bm, c // bk)
            runs = (("row", 1, lambda: _io_floor_kernel[grid](x, cr, sr, r, c, BM=bm, BK=bk, num_warps=w)),
                    ("row+col", 2, lambda: _io_floor_rowcol_kernel[grid](x, cr, sr, cc, sc, r, c, BM=bm, BK=bk,
                                                                         num_warps=w)),
                    ("row+col packed first", 2, lambda: _io_floor_rowcol_packed_kernel[grid](
                        x, cr, sr, cc, sc, r, c, BM=bm, BK=bk, num_warps=w)))
            if bk % 128 == 0 and bm % 64 == 0 and w in (4, 8):
                runs += (("row+col gluon transpose", 2, lambda: _io_rowcol_gluon_kernel[grid](
                    x, cr, sr, cc, sc, r, c, BM=bm, BK=bk, NW=w, num_warps=w)),)
            for name, copies, fn in runs:
                if left() < 20:
                    return
                time_quantizer(f"io floor {name} {bm}x{bk} {w} warps", (r, c), copies, False, fn, tile=[bm, bk, w])
                if name == "row+col gluon transpose":
                    RES["checks"].append(dict(what=f"io floor gluon {bm}x{bk} {w} warps {r}x{c}: every byte where it "
                                              "belongs", ok=_io_gluon_bytes_ok(x, cr, sr, cc, sc)))
        save()


def _same_tensors(got, want) -> bool:
    """Every tensor field of two tuples of Packed / Decoded outputs equal byte for byte."""
    def raw(t):
        return t.reshape(-1).view(torch.uint8)

    def tensors(p):  # Decoded is a NamedTuple, Packed a dataclass
        return [v for v in (p._asdict() if hasattr(p, "_asdict") else vars(p)).values() if isinstance(v, torch.Tensor)]

    return all(len(tensors(g)) == len(tensors(w)) and all(torch.equal(raw(u), raw(v)) for u, v in
                                                          zip(tensors(g), tensors(w))) for g, w in zip(got, want))


# rowcol_gluon.Config fields: (BM, BK, warps, row tiles a program, maxnreg, one lane a block of 16)
GLUON_TILES = ((64, 128, 8, 1, None, True), (64, 128, 8, 2, None, True), (64, 128, 8, 2, None, False),
               (64, 128, 4, 1, None, True))


@section("rowcol gluon: the Gluon row+col quantizer per tile, against the strip kernel")
def rowcol_gluon():
    """The row+col calls in rowcol_gluon's scope (codes; QLinear's X and dY calls for ue5m3,
    TE NVFP4 and MXFP4; f32 inputs) on rowcol_gluon.py at each GLUON_TILES tile that serves
    the call and on the strip kernel, in turn, --repeat samples (these calls' times swing
    between runs: medians of interleaved samples); every tile's bytes checked against the
    strip kernel's (itself checked against the reference in tests/gpu). --variants: the
    calls whose names start so. Summary: RES["rowcol_gluon"], per call and variant the
    median time and ratio to the strip kernel's."""
    if SMOKE:
        return
    nv, mx, ue = F["nvfp4"], F["mxfp4"], F["ue5m3"]
    summary = RES.setdefault("rowcol_gluon", [])
    packed, x_call = ((True, True), (False, False)), ((False, True), (True, False))
    for shape in QSIZES:
        x = rand(shape)
        x32 = x.float() * (1 + 2.0**-12)  # a LayerNorm's f32 output: off the bf16 grid
        amax = x.abs().amax().float()
        dy_call = ((False, False), (True, True))
        s16 = ref.rht_signs(16, "te").to(DEV)
        s32 = ref.rht_signs(32, "per-layer", 1).to(DEV)
        calls = (("row+col nvfp4 delayed (codes)", nv, "rtne", packed, 2, False, 0, lambda: qk.quantize_rowcol(
                     x, nv, nv, "rtne", "rtne", 0, 0, None, None, amax, amax)),
                 ("row+col mxfp4 (codes)", mx, "rtne", packed, 2, False, 0, lambda: qk.quantize_rowcol(
                     x, mx, mx, "rtne", "rtne", 0, 0, None, None)),
                 ("X: decoded row + packed col, ue5m3 delayed", ue, "rtne", x_call, (1, 1), None, 0,
                  lambda: ops.rowcol_operands(x, ue, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("dY: decoded row + col, ue5m3 delayed, SR16", ue, "sr16", dy_call, 2, True, 0,
                  lambda: ops.rowcol_operands(x, ue, rounding="sr16", seed=1, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "decoded"))),
                 ("row+col nvfp4, col RHT16+SR16 (TE dY, codes)", nv, "sr16", packed, 2, False, 16,
                  lambda: qk.quantize_rowcol(x, nv, nv, "sr16", "sr16", 0, 0, None, (16, s16), amax, amax)),
                 ("dY nvfp4: decoded row + col, col RHT16+SR16 (TE dY)", nv, "sr16", dy_call, 2, True, 16,
                  lambda: ops.rowcol_operands(x, nv, rounding="sr16", seed=1, rht_col=(16, s16), tensor_amax=amax,
                                              tensor_amax_col=amax, outputs=("decoded", "decoded"))),
                 ("X mxfp4: RHT32 decoded row + SR16 packed col", mx, ("rtne", "sr16"), x_call, (1, 1), None,
                  (32, 0), lambda: ops.rowcol_operands(x, mx, rounding="rtne", rounding_col="sr16", seed=1,
                                                       rht=(32, s32), outputs=("decoded", "packed"))),
                 ("dY mxfp4: decoded row + col, SR16", mx, "sr16", dy_call, 2, True, 0,
                  lambda: ops.rowcol_operands(x, mx, rounding="sr16", seed=1, outputs=("decoded", "decoded"))),
                 ("X f32: decoded row + packed col, ue5m3 delayed", ue, "rtne", x_call, (1, 1), None, 0,
                  lambda: ops.rowcol_operands(x32, ue, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("X nvfp4 f32: decoded row + packed col RHT16", nv, "rtne", x_call, (1, 1), None, 16,
                  lambda: ops.rowcol_operands(x32, nv, rht_col=(16, s16), tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("X nvfp4: decoded row + packed col RHT16", nv, "rtne", x_call, (1, 1), None, 16,
                  lambda: ops.rowcol_operands(x, nv, rht_col=(16, s16), tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))))
        for name, f, rounding, (codes_on, xhat_on), copies, xhat, rht, fn in calls:
            rounding_r, rounding_c = (rounding, rounding) if isinstance(rounding, str) else rounding
            rht = (0, rht) if isinstance(rht, int) else rht  # (row, column) RHT sizes
            if ARGS.variants and not name.startswith(tuple(ARGS.variants.split(","))):
                continue
            src = x32 if " f32" in name else x
            src_bytes = src.element_size()
            want = _route("strip", fn)
            times = {}
            for sample in range(ARGS.repeat):
                if left() < 20:
                    return
                t = time_quantizer(f"{name} [strip]", shape, copies, xhat, lambda fn=fn: _route("strip", fn),
                                   src_bytes=src_bytes, sample=sample)
                times.setdefault("strip", []).append(t)
                for tile in GLUON_TILES:
                    qk.CONFIG_OVERRIDE["rowcol_gluon"] = tile
                    try:
                        routed = _route("gluon", lambda: qk._gluon_rowcol_ok(
                            src, qk.parse_fmt(f), rounding_r, rounding_c, rht, codes_on, xhat_on, True,
                            torch.bfloat16))
                        if not routed:  # an RHT or "sr16" on blocks of 32 needs the one-lane layouts
                            continue
                        if sample == 0:
                            same = routed and _same_tensors(_route("gluon", fn), want)
                            RES["checks"].append(dict(what=f"rowcol gluon {name} {tile} {shape}: routed there, "
                                                      "bytes = strip's", ok=same))
                        lanes = ", one lane a block" if len(tile) > 5 and tile[5] else ""
                        label = f"{name} [gluon {tile[0]}x{tile[1]} {tile[2]} warps x{tile[3]}{lanes}]"
                        t = time_quantizer(label, shape, copies, xhat, lambda fn=fn: _route("gluon", fn),
                                           src_bytes=src_bytes, tile=list(tile), sample=sample)
                        times.setdefault(tile, []).append(t)
                    finally:
                        qk.CONFIG_OVERRIDE.pop("rowcol_gluon", None)
            med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            for k, t in med.items():
                summary.append(dict(call=name, shape="x".join(map(str, shape)), variant=str(k), median_ms=t,
                                    samples_ms=times[k], vs_strip=t / med["strip"]))
                log(f"rowcol gluon {name} {shape} {k}: median {t * 1e3:.1f} us, {t / med['strip']:.2f}x strip")
        del x, x32
        save()


AMAX_SHAPES = ((8192, 8192), (16384, 4096), (32768, 2304), (32768, 4608), (32768, 768))
AMAX_TILES = ((64, 128, 8, 8), (64, 128, 4, 8), (64, 128, 8, 4), (64, 128, 8, 2))
AMAX_DTYPES = (torch.bfloat16, torch.float32)  # f32: a LayerNorm's output under autocast


@section("amax pass: rowcol_gluon's against strip.py's")
def amax_pass():
    """The two-level formats' amax pass of a row+col call alone (launcher.run, do_bench
    medians of --repeat interleaved samples): strip._strip_amax_kernel against
    rowcol_gluon._amax_kernel at AMAX_TILES, without and with a column RHT of 16, at the
    quantizer shapes and the 125M model's X/dY shapes; the two kernels' amax bits compared.
    Summary: RES["amax_pass"]."""
    if SMOKE:
        return
    from fourcast.kernels import rowcol_gluon as rg
    from fourcast.kernels import strip

    nv = qk.parse_fmt(F["nvfp4"])
    s16 = ref.rht_signs(16, "te").to(DEV).float()
    summary = RES.setdefault("amax_pass", [])
    for shape, dtype in [(s, d) for s in AMAX_SHAPES for d in AMAX_DTYPES]:
        x = rand(shape, dtype)
        R, C = shape
        f32 = dtype == torch.float32
        for rn_c in (0, 16):
            dummy = torch.zeros(1, device=DEV)
            signs = s16 if rn_c else dummy
            qk.CONFIG_OVERRIDE["amax"] = "strip"
            try:
                _, g0, c0 = qk._rowcol_plan(x, nv, "rtne", "rtne", 0, rn_c, (True, True), (False, False), False, True,
                                            False)["amax"]
            finally:
                qk.CONFIG_OVERRIDE.pop("amax", None)
            runs = {"strip": (strip._strip_amax_kernel, g0, lambda b: (x, b, dummy, signs, R, C), c0)}
            for tile in AMAX_TILES:
                if rg.amax_applies(x, (0, rn_c), tile):
                    g1, c1 = rg.amax_launch(R, C, rn_c, tile, f32)
                    runs[tile] = (rg._amax_kernel, g1, lambda b: (x, b, signs, R, C), c1)
            bits = {}
            for name, (fn, grid, args, consts) in runs.items():
                b = torch.zeros(2, dtype=torch.int32, device=DEV)
                launcher.run(fn, grid, args(b), consts)
                bits[name] = b.tolist()
            RES["checks"].append(dict(what=f"amax pass {shape} {dtype} rht {rn_c}: gluon bits = strip's",
                                      ok=all(v == bits["strip"] for v in bits.values())))
            times = {}
            for sample in range(ARGS.repeat):
                if left() < 10:
                    return
                for name, (fn, grid, args, consts) in runs.items():
                    b = torch.zeros(2, dtype=torch.int32, device=DEV)
                    a = args(b)
                    times.setdefault(name, []).append(ms(lambda: launcher.run(fn, grid, a, consts)))
            med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            for k, t in med.items():
                gbs = R * C * x.element_size() / (t * 1e-3) / 1e9
                summary.append(dict(shape="x".join(map(str, shape)), dtype=str(dtype), rht=rn_c, variant=str(k),
                                    median_ms=t, samples_ms=times[k], vs_strip=t / med["strip"], read_gbs=gbs))
                log(f"amax pass {shape} {dtype} rht {rn_c} {k}: {t * 1e3:.1f} us ({gbs:.0f} GB/s), "
                    f"{t / med['strip']:.2f}x strip")
        del x
        save()


def qvariants(x):
    s16 = ref.rht_signs(16, "te").to(DEV)
    amax = x.abs().amax().float()
    nv, mx = F["nvfp4"], F["mxfp4"]
    if not SMOKE:
        yield "io floor: load + store, no math (64x64)", 1, False, 16, lambda: io_floor(x)
    yield "row nvfp4 (amax pass + quantize)", 1, False, 16, lambda: qk.quantize(x, nv)
    yield "row nvfp4 delayed amax (1 pass)", 1, False, 16, lambda: qk.quantize(x, nv, tensor_amax=amax)
    yield "row nvfp4 SR", 1, False, 16, lambda: qk.quantize(x, nv, rounding="sr", seed=1)
    yield "row nvfp4 SR16 delayed", 1, False, 16, lambda: qk.quantize(x, nv, rounding="sr16", seed=1, tensor_amax=amax)
    yield "row mxfp4 (1 pass, fused amax)", 1, False, 32, lambda: qk.quantize(x, mx)
    yield "col nvfp4 RHT16 (butterfly)", 1, False, 16, lambda: qk.quantize(x, nv, axis=0, rht=(16, s16))
    yield "col nvfp4 RHT16 (tensor-core dot)", 1, False, 16, lambda: qk.quantize(x, nv, axis=0, rht=(16, s16),
                                                                                   rht_impl=1)
    ue = F["ue5m3"]
    calls = (
        ("row+col nvfp4 delayed (codes)", 2, False, 16, lambda: qk.quantize_rowcol(
            x, nv, nv, "rtne", "rtne", 0, 0, None, None, amax, amax)),
        ("row+col mxfp4 (codes)", 2, False, 32, lambda: qk.quantize_rowcol(x, mx, mx, "rtne", "rtne", 0, 0, None,
                                                                           None)),
        ("X: decoded row + packed col, ue5m3 delayed", (1, 1), None, 16, lambda: ops.rowcol_operands(
            x, ue, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "packed"))),
        ("dY: decoded row + col, ue5m3 delayed, SR", 2, True, 16, lambda: ops.rowcol_operands(
            x, ue, rounding="sr", seed=1, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "decoded"))),
        ("dY: decoded row + col, ue5m3 delayed, SR16", 2, True, 16, lambda: ops.rowcol_operands(
            x, ue, rounding="sr16", seed=1, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "decoded"))),
        ("row+col nvfp4, col RHT16+SR16 (TE dY, codes)", 2, False, 16, lambda: qk.quantize_rowcol(
            x, nv, nv, "sr16", "sr16", 0, 0, None, (16, s16), amax, amax)),
        ("X nvfp4: decoded row + packed col RHT16", (1, 1), None, 16, lambda: ops.rowcol_operands(
            x, nv, rht_col=(16, s16), tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "packed"))),
        ("row+col nvfp4, col RHT16+SR (TE dY, codes)", 2, False, 16, lambda: qk.quantize_rowcol(
            x, nv, nv, "sr", "sr", 0, 0, None, (16, s16), amax, amax)),
    )
    for name, copies, xhat, blk, fn in calls:
        # rowcol_gluon's scope: RTNE or SR16, no RHT but a column RHT16
        gluon = ("SR" not in name or "SR16" in name) and ("RHT" not in name or "col RHT16" in name)
        for route in ("gluon", "strip", "transpose") if gluon else ("strip", "transpose"):
            yield f"{name} [{route}]", copies, xhat, blk, (lambda fn=fn, route=route: _route(route, fn))
    yield "fake-quant row nvfp4", 1, True, 16, lambda: fk.fake_quant(x, nv)
    yield "fake-quant row nvfp4 delayed", 1, True, 16, lambda: fk.fake_quant(x, nv, tensor_amax=amax)
    yield "fake-quant row+col nvfp4 delayed", 2, True, 16, lambda: fk.fake_quant_rowcol(
        x, nv, tensor_amax=amax, tensor_amax_c=amax)


@section("quantizer correctness")
def quant_checks():
    x = rand((4096, 4096) if not SMOKE else (64, 64))
    s16 = ref.rht_signs(16, "te").to(DEV)
    for name, kw in (("nvfp4", {}), ("nvfp4", dict(axis=0, rht=(16, s16), rounding="sr", seed=3)),
                     ("mxfp4", {}), ("ue5m3-2d", {}), ("ufp4", dict(rht=(16, s16)))):
        a, b = qk.quantize(x, F[name], **kw), ref.quantize(x, F[name], **kw)
        ok = testing.packed_diff(a, b) == [] and torch.equal(fk.fake_quant(x, F[name], **kw), ref.dequantize(b))
        RES["checks"].append(dict(what=f"quantize {name} {sorted(kw)} == reference", ok=bool(ok)))
        log("check", name, sorted(kw), ok)


@section("quantizer timing")
def quant_timing():
    copy = RES["ceilings"].get("copy_tbps", 4.27)
    for (r, c) in QSIZES:
        x = rand((r, c))
        for name, copies, xhat, blk, fn in qvariants(x):
            if left() < 60:
                RES["errors"].append(f"quantizer {name} {r}x{c}: skipped (budget)")
                continue
            try:
                fn()
                t = ms(fn)
            except Exception as exc:
                RES["errors"].append(f"quantizer {name}: {exc!r}")
                traceback.print_exc()
                continue
            tbps = qbytes(r, c, blk, copies, xhat) / (t * 1e-3) / 1e12  # t in ms
            RES["quantizer"].append(dict(variant=name, shape=f"{r}x{c}", ms=t, tbps=tbps, frac_copy=tbps / copy))
            log(f"{name:42s} {r}x{c}: {t * 1e3:7.1f} us  {tbps:.2f} TB/s  {tbps / copy:.0%} of copy")
        save()


STRIP_TILES = ((16, 64, 1), (32, 64, 1))
def time_quantizer(label: str, shape, copies, xhat, fn, src_bytes=2, **fields) -> float:
    """Time one quantizer call (do_bench median), record it in RES["quantizer"] with its
    fraction of copy bandwidth (qbytes: the input read once, codes or x_hat written);
    an exception is recorded as an error and gives inf."""
    try:
        fn()
        t = ms(fn)
    except Exception as exc:
        RES["errors"].append(f"{label}: {exc!r}")
        return float("inf")
    frac = qbytes(*shape, 16, copies, xhat, src_bytes) / (t * 1e-3) / 1e12 / RES["ceilings"].get("copy_tbps", 4.27)
    RES["quantizer"].append(dict(variant=label, shape="x".join(map(str, shape)), ms=t, frac_copy=frac, **fields))
    log(f"{label} {tuple(shape)}: {t * 1e3:.1f} us {frac:.0%} of copy")
    return t


# SR calls: a Philox per element and copy lives in registers, so fewer elements per
# thread (narrower tiles or more warps) may pay; timed beside the old SR kernels.
STRIP_SR_TILES = ((16, 64, 1), (16, 32, 1), (16, 64, 2), (16, 64, 4), (32, 64, 2), (16, 128, 4), (32, 32, 1))


@section("strip row+col tile sweep")
def strip_sweep():
    """strip.py tiles on the calls a fused QLinear makes per activation (X) and gradient
    (dY, SR) tensor; the SR calls also on the transposing kernel."""
    x = rand(BIG)
    amax = x.abs().amax().float()
    ue, nv = F["ue5m3"], F["nvfp4"]
    s16 = ref.rht_signs(16, "te").to(DEV)
    x_call = ("X: decoded row + packed col", (1, 1), None, lambda: ops.rowcol_operands(
        x, ue, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "packed")))
    sr_calls = (("dY: decoded both, SR", 2, True, lambda: ops.rowcol_operands(
                    x, ue, rounding="sr", seed=1, tensor_amax=amax, tensor_amax_col=amax,
                    outputs=("decoded", "decoded"))),
                ("dY nvfp4: decoded both, SR, col RHT16", 2, True, lambda: ops.rowcol_operands(
                    x, nv, rounding="sr", seed=1, rht_col=(16, s16), tensor_amax=amax, tensor_amax_col=amax,
                    outputs=("decoded", "decoded"))))

    def timed(label, copies, xhat, fn):
        return time_quantizer(label, BIG, copies, xhat, fn)

    qk.CONFIG_OVERRIDE["rowcol"] = "transpose"
    for name, copies, xhat, fn in sr_calls:
        timed(f"transposing kernel {name}", copies, xhat, fn)
    qk.CONFIG_OVERRIDE["rowcol"] = "strip"
    for tiles, calls in ((STRIP_TILES, (x_call,)), (STRIP_SR_TILES, sr_calls)):
        for cfg in tiles if not SMOKE else ((16, 32, 1),):
            qk.CONFIG_OVERRIDE["strip"] = cfg
            for name, copies, xhat, fn in calls:
                timed(f"strip {name}, tile {cfg}", copies, xhat, fn)
        save()
    qk.CONFIG_OVERRIDE.pop("strip", None)
    qk.CONFIG_OVERRIDE.pop("rowcol", None)


# (rows, cols, warps) for the SR stream comparison: the default SR tile first.
SR_STREAM_TILES = ((16, 32, 1), (16, 64, 1))


@section("SR streams")
def sr_stream():
    """The strip kernel's two dY SR calls with rounding "sr" (a Philox per element), "sr4"
    (one per four elements) and "sr16" (one per sixteen, 8-bit uniforms; philox.py), at
    the SR tiles; 8192^2 and the 125M
    model's 32768 x 4608 dY. Session 6's first call timed the same calls with the draw
    written three ways (kernels-h200-session6.json: RNG 0/1/2)."""
    qk.CONFIG_OVERRIDE["rowcol"] = "strip"
    s16 = ref.rht_signs(16, "te").to(DEV)
    for shape in (BIG, (32768, 4608)) if not SMOKE else (BIG,):
        x = rand(shape)
        amax = x.abs().amax().float()
        for name, kw in (("dY ue5m3: decoded both", dict(fmt=F["ue5m3"])),
                         ("dY nvfp4: decoded both, col RHT16", dict(fmt=F["nvfp4"], rht_col=(16, s16)))):
            for tile in SR_STREAM_TILES if not SMOKE else SR_STREAM_TILES[:1]:
                qk.CONFIG_OVERRIDE["strip"] = tile
                for rounding in ("sr", "sr4", "sr16"):
                    def call(x=x, rounding=rounding, kw=kw):
                        return ops.rowcol_operands(x, rounding=rounding, seed=1, offset=2**32 - 3, tensor_amax=amax,
                                                   tensor_amax_col=amax, outputs=("decoded", "decoded"), **kw)

                    time_quantizer(f"sr_stream {name}, {rounding}, tile {tile}", shape, 2, True, call,
                                   rounding=rounding, tile=list(tile))
            save()
        # as training calls them: the tensor amaxes measured (two-level formats: the amax
        # kernel first; MX: recorded by the quantize pass's own atomics)
        qk.CONFIG_OVERRIDE.pop("strip", None)
        for name, fmt in (("dY ue5m3", F["ue5m3"]), ("dY mxfp4", F["mxfp4"])):
            for rounding in ("sr", "sr4", "sr16"):
                time_quantizer(f"sr_stream {name}: decoded both, {rounding}, amax measured", shape, 2, True,
                               lambda x=x, fmt=fmt, rounding=rounding: ops.rowcol_operands(
                                   x, fmt, rounding=rounding, seed=1, outputs=("decoded", "decoded")),
                               rounding=rounding)
        save()
        del x
    for k in ("strip", "rowcol"):
        qk.CONFIG_OVERRIDE.pop(k, None)


# QLinear's two row+col calls on the strip kernel (ue5m3, tensor amaxes given): name,
# rounding, outputs, bytes moved per element (the bf16 read and every byte written).
STRIP_CALLS = (("X", "rtne", ("decoded", "packed"), 2 + 2 + 0.5 + 1 / 16),
               ("dY sr16", "sr16", ("decoded", "decoded"), 2 + 2 + 2))


STRIP_OVERRIDES = ("strip", "strip_iters", "strip_maxnreg", "strip_gather")


def strip_variants(key: str, shapes, variants_of):
    """Time STRIP_CALLS at each shape under each variant (variants_of(call name): a list of
    (label fields, CONFIG_OVERRIDE entries)), each variant's outputs compared bit for bit
    with the first one's; rows go to RES[key]."""
    f = F["ue5m3"]
    for shape in shapes:
        x = rand(shape)
        amax = x.abs().amax().float()
        for name, rounding, outputs, bpe in STRIP_CALLS:
            if name == "X" and shape[1] == 4608:
                continue  # (the 125M model has no such X)
            want = None
            for fields, overrides in variants_of(name):
                if left() < 30:
                    break
                for k in STRIP_OVERRIDES:
                    qk.CONFIG_OVERRIDE.pop(k, None)
                qk.CONFIG_OVERRIDE.update(overrides)

                def call(x=x, rounding=rounding, outputs=outputs):
                    return ops.rowcol_operands(x, f, rounding=rounding, seed=1, offset=5, tensor_amax=amax,
                                               tensor_amax_col=amax, outputs=outputs)
                try:
                    got = call()
                    t = ms(call)
                except Exception as exc:
                    RES["errors"].append(f"{key} {name} {shape} {fields}: {exc!r}")
                    continue
                flat = [t for o in got for t in ((o.values,) if hasattr(o, "values") else (o.codes, o.scales))]
                if want is None:
                    want = flat
                same = all(torch.equal(a, b) if a.dtype == torch.uint8 else testing.same_float(a, b)
                           for a, b in zip(flat, want))
                frac = shape[0] * shape[1] * bpe / (t * 1e-3) / 1e12 / RES["ceilings"].get("copy_tbps", 4.2)
                row = dict(call=name, shape="x".join(map(str, shape)), **fields, us=t * 1e3, frac_copy=frac,
                           same_as_first=same)
                RES.setdefault(key, []).append(row)
                log(row)
        save()
        del x
    for k in STRIP_OVERRIDES:
        qk.CONFIG_OVERRIDE.pop(k, None)


@section("strip kernel: row tiles per program")
def strip_iters():
    """STRIP_CALLS with ITERS row tiles a program (the next tile loaded before the current
    one is quantized; strip.strip_iters picks ITERS) and a register cap, at the 125M
    model's and the Llama layer's shapes; outputs compared with ITERS 1's."""
    variants = ((1, None), (2, None), (4, None), (8, None), (2, 128), (4, 128)) if not SMOKE else ((1, None), (2, None))
    shapes = ((32768, 768), (32768, 2304), (32768, 4608), (8192, 4096)) if not SMOKE else ((64, 64),)
    strip_variants("strip_iters", shapes, lambda name: [
        (dict(iters=i, maxnreg=n), dict(strip_iters=i, **({"strip_maxnreg": n} if n else {}))) for i, n in variants])


# (rows, cols, warps), row tiles a program (None: strip.strip_iters' rule). The X call
# writes its column copy transposed: a [16, 64] tile stores 8 code bytes and 1 scale byte
# per column, a quarter of a 32-byte sector each, and ncu saw its L2 at 88% of peak with
# DRAM at 36% (session 11, call 3): taller tiles write more of each sector at once. None
# was faster beyond noise (kernels-h200.md, session 11).
STRIP_TALL = (((16, 64, 1), None), ((16, 64, 1), 1), ((32, 64, 1), 1), ((32, 64, 1), 2), ((64, 64, 2), 1),
              ((64, 64, 4), 1), ((32, 32, 1), 1), ((64, 32, 2), 1), ((64, 16, 1), 1))
STRIP_TALL_SR = (((16, 32, 1), None), ((32, 32, 1), 1), ((32, 64, 2), 1), ((64, 32, 2), 1), ((64, 64, 4), 1))


@section("strip kernel: taller tiles")
def strip_tall():
    """STRIP_CALLS at taller strip tiles (STRIP_TALL, STRIP_TALL_SR), each compared with the
    default tile's outputs bit for bit."""
    shapes = ((32768, 2304), (8192, 4096), (32768, 768), (32768, 4608)) if not SMOKE else ((64, 64),)

    def variants(name):
        tiles = STRIP_TALL if name == "X" else STRIP_TALL_SR
        if SMOKE:
            tiles = (((16, 32, 1), None), ((32, 32, 1), 1))
        return [(dict(tile=list(t), iters=i), dict(strip=t, **({"strip_iters": i} if i is not None else {})))
                for t, i in tiles]
    strip_variants("strip_tall", shapes, variants)


@section("strip kernel: gathered column stores")
def strip_gather():
    """The X call with the column copy's code and scale bytes stored once a program
    (strip GATHER, the default) and a tile at a time (the session-11 kernel), at ITERS 4
    (the default at these shapes) and 2; outputs compared with the default's bit for bit."""
    shapes = ((32768, 2304), (32768, 768), (8192, 4096), (32768, 4096)) if not SMOKE else ((64, 64),)
    for sample in range(ARGS.repeat):  # --repeat: samples of every variant, in turn
        variants = [(dict(gather=g, iters=i, sample=sample), dict(strip_gather=g, **({"strip_iters": i} if i else {})))
                    for i in (None, 2) for g in (True, False)]
        strip_variants("strip_gather", shapes, lambda name, v=variants: v if name == "X" else [])


@section("GEMM epilogue cost")
def gemm_epilogue():
    """What the emulated GEMM's tensor-scale epilogue costs over a bf16-out cuBLAS GEMM at
    the 125M model's MLP shapes: as an FP32 output and a second pass (the fallback route),
    and fused into cuBLASLt with a device alpha (gemm.scaled_mm, the route taken)."""
    from fourcast.kernels import cublaslt

    shapes = ((32768, 4608, 768), (32768, 768, 4608), (4608, 768, 32768)) if not SMOKE else ((64, 64, 64),)
    ts = torch.tensor([3.0], device=DEV)
    alpha = gk.epilogue_alpha(ts, ts)
    for m, n, k in shapes:
        a = rand((m, k))
        b = rand((n, k)).t()
        t_bf16 = ms(lambda: torch.mm(a, b))
        t_f32 = ms(lambda: gk._mm_f32(a, b))
        t_epi = ms(lambda: gk._epilogue(gk._mm_f32(a, b), None, None, ts, ts, torch.bfloat16))
        row = dict(shape=f"{m}x{n}x{k}", bf16_out_ms=t_bf16, f32_out_ms=t_f32, f32_out_epilogue_ms=t_epi,
                   epilogue_ratio=t_epi / t_bf16)
        if cublaslt.available(a.device):  # not under BENCH_SMOKE
            row["lt_alpha_bf16_ms"] = t_lt = ms(lambda: cublaslt.matmul(a, b, alpha, torch.bfloat16))
            row["lt_alpha_f32_ms"] = ms(lambda: cublaslt.matmul(a, b, alpha, torch.float32))
            row["scaled_mm_ms"] = t_sc = ms(lambda: gk.scaled_mm(a, b, ts, ts, torch.bfloat16))  # + the alpha ops
            row.update(lt_ratio=t_lt / t_bf16, scaled_mm_ratio=t_sc / t_bf16)
        RES.setdefault("gemm_epilogue", []).append(row)
        log(row)


@section("Wgrad decode of the saved packed X")
def decode_layout():
    """ops.decode_unscaled of a column-wise packed copy (QLinear's saved X, decoded for
    Wgrad): at the 125M model's shapes and the 8192-token Llama layer's, the table decode
    (qk.lut_decode_asm, the GEMM's PTX routine; session 10) against the generic one, both
    at the default tile [8, 512] and two others. GB/s counts the codes and scale bytes
    read and the bf16 written; the bits of the two decodes are compared in the same run."""
    from fourcast.kernels.utils import Packed

    shapes = ((32768, 768), (32768, 2304), (8192, 4096)) if not SMOKE else ((64, 64),)
    for name in ("ue5m3", "mxfp4") if not SMOKE else ("ue5m3",):
        for shape in shapes:
            x = rand(shape)
            p = ops.quantize(x, F[name], axis=0)
            r, c = shape
            unit = torch.ones((), device=DEV)
            layout = Packed(p.codes, p.scales, unit, unit, p.fmt, (c, r), -1)
            nbytes = r * c * (0.5 + 2) + p.scales.numel()
            outs = {}
            for lut in (True, False):
                qk.LUT_DECODE = lut
                for v in (None, (16, 512, True), (8, 1024, True)):
                    if v is None:
                        qk.CONFIG_OVERRIDE.pop("dequant", None)
                    else:
                        qk.CONFIG_OVERRIDE["dequant"] = v
                    label = f"{'table' if lut else 'generic'} {v or 'default [8, 512]'}"
                    try:
                        fn = lambda: qk.dequantize(layout, torch.bfloat16, unscaled=True)  # noqa: E731
                        outs.setdefault(lut, fn())
                        t = ms(fn)
                    except Exception as exc:
                        RES["errors"].append(f"decode {name} {label}: {exc!r}")
                        continue
                    row = dict(fmt=name, shape=f"{r}x{c}", variant=label, us=t * 1e3,
                               gbps=nbytes / (t * 1e-3) / 1e9, copy_frac=nbytes / (t * 1e-3) / 1e12 /
                               RES["ceilings"].get("copy_tbps", float("nan")))
                    RES.setdefault("decode_layout", []).append(row)
                    log(row)
            qk.LUT_DECODE = True
            qk.CONFIG_OVERRIDE.pop("dequant", None)
            if len(outs) == 2:
                RES["checks"].append(dict(what=f"table decode == generic decode {name} {r}x{c}",
                                          ok=testing.same_float(outs[True].float(), outs[False].float())))


def profile_layer(name="mxfp4", path="fused", shape=(8192, 4096, 4096)):
    """Top CUDA kernels of one QLinear fwd+bwd (torch.profiler), to see where it goes."""
    from fourcast import nn as fcnn

    m, n, k = shape
    x = rand((m, k)).requires_grad_(True)
    dy = rand((m, n))
    layer = fcnn.QLinear(k, n, bias=False, recipe=fc.recipe(name), gemm_path=path, device=DEV, dtype=torch.bfloat16)
    fn = lambda: torch.autograd.grad(layer(x), (x, layer.weight), dy)  # noqa: E731
    fn()
    fn()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
        if not SMOKE:
            torch.cuda.synchronize()
    table_ = prof.key_averages().table(sort_by="cuda_time_total" if not SMOKE else "cpu_time_total", row_limit=12)
    RES["notes"].append(f"profile {name} {path} {shape}:\n{table_}")
    log(table_)


@section("QLinear profiles")
def layer_profiles():
    for name in ("mxfp4", "ue5m3"):
        if left() < 30:
            break
        profile_layer(name)


@section("quantizer tile configs")
def quant_configs():
    x = rand(BIG)
    amax = x.abs().amax().float()
    for cfg in ((64, 64, 8), (32, 64, 4), (64, 128, 8), (128, 64, 8), (32, 128, 4)) if not SMOKE else ((16, 32, 4),):
        qk.CONFIG_OVERRIDE["cfg"] = cfg
        try:
            fn = lambda: qk.quantize(x, F["nvfp4"], tensor_amax=amax)  # noqa: E731
            fn()
            t = ms(fn)
            RES["quantizer"].append(dict(variant=f"row nvfp4 delayed, tile {cfg}", shape="8192x8192", ms=t,
                                         tbps=qbytes(*BIG, 16) / (t * 1e-3) / 1e12,
                                         frac_copy=qbytes(*BIG, 16) / (t * 1e-3) / 1e12
                                         / RES["ceilings"].get("copy_tbps", 4.27)))
            log(f"tile {cfg}: {t * 1e3:.1f} us")
        except Exception as exc:
            RES["errors"].append(f"quantizer tile {cfg}: {exc!r}")
    qk.CONFIG_OVERRIDE.pop("cfg", None)


@section("peers eager / torch.compile")
def peers():
    x = rand(BIG)
    want = fk.fake_quant(x, F["nvfp4"])
    got = pp.nvfp4_fake_quant(x)
    RES["peers"]["eager_fq_matches_fourcast_frac"] = float((got == want).float().mean())
    RES["peers"]["eager_fq_ms"] = ms(lambda: pp.nvfp4_fake_quant(x), rep=50)
    RES["peers"]["eager_pack_ms"] = ms(lambda: pp.nvfp4_pack(x), rep=50)
    fq_c = torch.compile(pp.nvfp4_fake_quant) if not SMOKE else pp.nvfp4_fake_quant
    fq_c(x)
    RES["peers"]["compiled_fq_ms"] = ms(lambda: fq_c(x))
    pk_c = torch.compile(pp.nvfp4_pack) if not SMOKE else pp.nvfp4_pack
    pk_c(x)
    RES["peers"]["compiled_pack_ms"] = ms(lambda: pk_c(x))
    log(RES["peers"])


def peer_calls(x, amax):
    """(name, fourcast's call, its PyTorch peer's kwargs) for the row+col NVFP4 calls of the
    quantizer target: with and without the column RHT16 and SR, amax fresh or given."""
    nv, s16 = F["nvfp4"], ref.rht_signs(16, "te").to(DEV)

    def rowcol(rounding, rht, amax_in):
        return lambda: qk.quantize_rowcol(x, nv, nv, rounding, rounding, 1, 0, None, rht, amax_in, amax_in)

    yield "row+col nvfp4, amax pass", rowcol("rtne", None, None), dict()
    yield "row+col nvfp4 delayed", rowcol("rtne", None, amax), dict(amax=amax)
    yield "row+col nvfp4 delayed, SR16", rowcol("sr16", None, amax), dict(amax=amax, sr=True)
    yield "row+col nvfp4 delayed, col RHT16", rowcol("rtne", (16, s16), amax), dict(amax=amax, rht=True)
    yield "row+col nvfp4 delayed, col RHT16 + SR16 (TE dY)", rowcol("sr16", (16, s16), amax), dict(
        amax=amax, rht=True, sr=True)
    yield "row+col nvfp4 delayed, col RHT16 + SR (numerics.md stream)", rowcol("sr", (16, s16), amax), dict(
        amax=amax, rht=True, sr=True)


@section("quantizer against its PyTorch peer, call by call")
def peer_quant():
    """Each row+col NVFP4 call of the quantizer target beside benchmarks/peers.py doing the
    same work (eager and torch.compile'd), at QSIZES: times, fourcast's fraction of copy
    bandwidth, the speed-ups, and how the peer's bytes agree with fourcast's (equal for
    RTNE without RHT; SR and the RHT's f32 matmul: within one grid step)."""
    h16 = pp.hadamard16(device=DEV)
    out = RES.setdefault("peer_quant", [])
    copy = RES["ceilings"].get("copy_tbps", 4.27)
    for (r, c) in QSIZES:
        x = rand((r, c))
        amax = x.abs().amax().float()
        for name, ours, kw in peer_calls(x, amax):
            if left() < 60:
                RES["errors"].append(f"peer_quant {name} {r}x{c}: skipped (budget)")
                continue

            args = (x, kw.get("amax"), h16 if kw.get("rht") else None, kw.get("sr", False))
            # a fresh compile per call and shape: past dynamo's recompile limit a function runs
            # eagerly without an error; fullgraph: no silent graph breaks either
            torch._dynamo.reset()
            compiled = torch.compile(pp.nvfp4_rowcol, dynamic=False, fullgraph=True) if not SMOKE else pp.nvfp4_rowcol

            def peer(args=args):
                return pp.nvfp4_rowcol(*args)

            got = ours()
            p_row, p_col = compiled(*args)
            agree = {axis: pp.agreement(p, (o.codes, o.scales)) for axis, p, o in (("row", p_row, got[0]),
                                                                                   ("col", p_col, got[1]))}
            exact = not kw.get("sr") and not kw.get("rht")
            ok = all(a["within_one_step"] for a in agree.values()) and (
                not exact or all(a["codes_equal"] == 1.0 and a["scales_equal"] == 1.0 for a in agree.values()))
            RES["checks"].append(dict(what=f"peer {name} {r}x{c}: " + ("bytes = fourcast's" if exact else
                                                                        "within one grid step of fourcast's"), ok=ok))
            t, t_eager, t_comp = ms(ours), ms(peer, rep=50), ms(lambda: compiled(*args))
            frac = qbytes(r, c, 16, 2) / (t * 1e-3) / 1e12 / copy
            out.append(dict(call=name, shape=f"{r}x{c}", ms=t, eager_ms=t_eager, compiled_ms=t_comp, frac_copy=frac,
                            vs_compiled=t_comp / t, vs_eager=t_eager / t, agreement=agree))
            log(f"peer {name} {r}x{c}: fourcast {t * 1e3:.1f} us ({frac:.0%} of copy), torch.compile "
                f"{t_comp * 1e3:.1f} us ({t_comp / t:.1f}x), eager {t_eager * 1e3:.0f} us ({t_eager / t:.0f}x); {agree}")
        del x
        save()


@section("packed GEMM")
def gemm_bench():
    bf = RES["ceilings"].get("bf16", {})
    # correctness at a size where float64 is cheap
    cs = ((2048, 4096), (1024, 4096)) if not SMOKE else ((32, 64), (16, 64))
    for (fa, fb) in (("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4")):
        a1, b1 = qk.quantize(rand(cs[0]), F[fa]), qk.quantize(rand(cs[1]), F[fb])
        for impl in gemm_impls(fa):
            c64, bound = testing.gemm_bound(ref.dequantize_layout(a1), ref.dequantize_layout(b1), torch.bfloat16,
                                            fp8_tc=impl == "fp8")
            before = gk.STATS["fp8_fallbacks"]
            err = (gk.gemm(a1, b1, impl=impl).double() - c64).abs()
            RES["checks"].append(dict(what=f"gemm {fa} x {fb} ({impl}) within bound" + (" (+FP8 TC term)" if
                                      impl == "fp8" else ""), ok=bool((err <= bound).all()),
                                      max_err_over_bound=float((err / bound).max()),
                                      fp8_fallback=gk.STATS["fp8_fallbacks"] != before))
    RES["notes"].append(f"gemm kernel used (triton impl): {gk.KERNEL} where it applies, with its default configs")
    for fname in ("nvfp4", "ue5m3", "mxfp4", "ufp4"):
        for (m, n, k) in GEMM_SHAPES:
            if left() < 60:
                break
            try:
                pa = qk.quantize(rand((m, k)), F[fname])
                pb = qk.quantize(rand((n, k)), F[fname])
            except Exception as exc:
                RES["errors"].append(f"gemm {fname} {m}x{n}x{k}: {exc!r}")
                continue
            for impl in gemm_impls(fname):
                time_gemm(fname, impl, pa, pb, (m, n, k), bf)
        save()


@section("packed GEMM kernel variants")
def gemm_variants():
    """gk.GEMM_VARIANTS (the in-register Triton kernels: the session-2 kernel "v1" and
    the split-nibble kernel's decodes/tiles): each checked against the float64 bound on
    NVFP4 x NVFP4-2D and MXFP4, then timed at 8192^3 and 8192x28672x4096."""
    bf = RES["ceilings"].get("bf16", {})
    cs = ((2048, 4096), (1024, 4096)) if not SMOKE else ((32, 64), (16, 64))
    chosen = [v for v in ARGS.variants.split(",") if v]
    shapes = GEMM_SHAPES[:1] + [s for s in GEMM_SHAPES if s[1] == 28672] if not chosen else GEMM_SHAPES
    shapes = shapes if not SMOKE else GEMM_SHAPES[:1]
    ops_ = {}
    for fname in ("nvfp4", "mxfp4") + (("ufp4",) if chosen else ()):
        for (m, n, k) in shapes:
            ops_[fname, (m, n, k)] = (qk.quantize(rand((m, k)), F[fname]), qk.quantize(rand((n, k)), F[fname]))
    for label, ov in gk.GEMM_VARIANTS:
        if chosen and not any(label.startswith(c) for c in chosen):
            continue
        if left() < 45:
            RES["errors"].append(f"gemm variant {label}: skipped (budget)")
            continue
        gk.CONFIG_OVERRIDE.clear()
        gk.CONFIG_OVERRIDE.update(ov)
        try:
            for (fa, fb) in (("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4")):
                a1, b1 = qk.quantize(rand(cs[0]), F[fa]), qk.quantize(rand(cs[1]), F[fb])
                c64, bound = testing.gemm_bound(ref.dequantize_layout(a1), ref.dequantize_layout(b1), torch.bfloat16)
                err = (gk.gemm(a1, b1, impl="triton").double() - c64).abs()
                RES["checks"].append(dict(what=f"gemm variant {label} {fa} x {fb} within bound",
                                          ok=bool((err <= bound).all()), max_err_over_bound=float((err / bound).max())))
            for (fname, shape), (pa, pb) in ops_.items():
                m, n, k = shape
                key = f"{m}x{n}x{k}"
                t = ms(lambda: gk.gemm(pa, pb, impl="triton"))
                tf = 2 * m * n * k / t / 1e9
                ratio = tf / bf[key]["tflops"] if key in bf else None
                RES["gemm"].append(dict(variant=f"packed {fname} triton [{label}]", impl="triton", fmt=fname,
                                        shape=key, ms=t, tflops=tf, vs_cublas_bf16=ratio))
                log(f"{label} {fname} {key}: {tf:.0f} TFLOP/s ({ratio or 0:.0%} of cuBLAS bf16)")
        except Exception as exc:
            RES["errors"].append(f"gemm variant {label}: {exc!r}")
            traceback.print_exc()
        save()
    gk.CONFIG_OVERRIDE.clear()


# (decode, (BM, BN, BK, GROUP_M, warps, STAGES), maxnreg) of gemm_wgmma_parts. The decode side
# alone ran latency-bound at two warps per scheduler (ncu, session 11: 38% of issue slots
# busy, 0.56 eligible warps): 256 x 128 tiles on 16 warps give it four, and a quarter less
# decode per MAC.
WGMMA_PARTS_CFGS = (("cvt", (128, 128, 128, 8, 8, 3), None), ("cvt", (128, 128, 64, 8, 8, 3), 128),
                    ("lut", (128, 128, 128, 8, 8, 3), None), ("cvt", (256, 128, 64, 8, 16, 3), 128),
                    ("cvt", (256, 128, 64, 8, 16, 4), 128), ("lut", (256, 128, 64, 8, 16, 3), 128))


@section("gemm_wgmma: its parts timed alone")
def gemm_wgmma_parts():
    """Why is gemm_wgmma.py slower than the split kernel? (kernels-h200.md, session 10: its step
    takes about 3x what its instructions and MMAs need.) The kernel with PARTS 3 (all of it),
    1 (loads, decodes and shared-memory stores, no wgmma) and 2 (the wgmmas on whatever the
    ring holds, no loads or decodes), nvfp4, two tiles. If 1 alone takes most of 3, the
    decode side sets the time; if 2 does, the MMA side (shared-memory operands, barriers);
    if 3 is near 1 + 2, the two do not overlap. Outputs are meaningless for 1 and 2. NVFP4
    takes the CVT decode by default (a conversion per two elements); the LUT decode (no
    conversions) is timed beside it."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for (m, n, k) in (GEMM_SHAPES[0], (8192, 28672, 4096)):
        pa = qk.quantize(rand((m, k)), F["nvfp4"])
        pb = qk.quantize(rand((n, k)), F["nvfp4"])
        c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
        key = f"{m}x{n}x{k}"
        ref_c = gk.gemm(pa, pb, impl="dequant").float()
        for decode, cfg, nreg in WGMMA_PARTS_CFGS:
            plan = gk.split_plan(pa.spec, pb.spec, decode)
            for parts in (3, 1, 2):
                if left() < 30:
                    return
                try:
                    t = ms(lambda: gw.launch(pa, pb, c, m, n, k, plan, cfg, nreg, parts))
                except Exception as exc:
                    RES["errors"].append(f"gemm_wgmma_parts {key} {cfg} {parts}: {exc!r}")
                    continue
                tf = 2 * m * n * k / t / 1e9
                row = dict(shape=key, decode=decode, cfg=list(cfg), maxnreg=nreg, parts=parts, ms=t, tflops=tf,
                           vs_cublas_bf16=tf / bf[key]["tflops"] if key in bf else None)
                if parts == 3:  # the result against the dequant route's (FP32 sums in another order)
                    gw.launch(pa, pb, c, m, n, k, plan, cfg, nreg, parts)
                    row["max_rel_diff"] = float((c.float() - ref_c).abs().max() / ref_c.abs().max())
                RES.setdefault("gemm_wgmma_parts", []).append(row)
                log(row)
        save()


@section("gemm_ws: its parts timed alone")
def gemm_ws_parts():
    """gemm_wgmma_parts for the warp-specialised kernel (gemm's default on Hopper) at its
    default config: PARTS 3 (the kernel), 1 (the decode partitions only: the MMA partition
    passes the slots on) and 2 (the MMA partition only), nvfp4, ue5m3 and mxfp4, two shapes.
    With full overlap the kernel takes the longer part."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for (m, n, k) in (GEMM_SHAPES[0], (8192, 28672, 4096)):
        key = f"{m}x{n}x{k}"
        c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
        for fname in ("nvfp4", "ue5m3", "mxfp4"):
            pa = qk.quantize(rand((m, k)), F[fname])
            pb = qk.quantize(rand((n, k)), F[fname])
            plan = gk.split_plan(pa.spec, pb.spec)
            for parts in (3, 1, 2):
                if left() < 30:
                    return
                t = ms(lambda: gw.launch_ws(pa, pb, c, m, n, k, plan, None, parts))
                tf = 2 * m * n * k / t / 1e9
                row = dict(shape=key, fmt=fname, cfg=list(gw.ws_config(k)), parts=parts, ms=t, tflops=tf,
                           vs_cublas_bf16=tf / bf[key]["tflops"] if key in bf else None)
                RES.setdefault("gemm_ws_parts", []).append(row)
                log(row)
            save()


# (BM, BN, BK, GROUP_M, STAGES, producer warps, producer registers, maxnreg) of gemm_ws beside
# gemm_wgmma's WS_CONFIG and WS_CONFIG_BK64: 8-warp decoders at 80 registers (20 warps launch
# at 96, the MMA warpgroup gets 160): as fast as WS_CONFIG (session 12, call 2).
WS_CFGS = ((128, 128, 128, 8, 3, 8, 80, 96),)


def time_gemm_run(name, label, fn, c, ref_c, shape, bf, **fields) -> None:
    """Time one labelled packed-GEMM run into RES[name]: fn writes c (NaN-poisoned first) or
    returns C; checked against the dequant route's ref_c, % of cuBLAS BF16 where measured."""
    m, n, k = shape
    key = f"{m}x{n}x{k}"
    try:
        c.fill_(float("nan"))
        out = fn()
        got = out if isinstance(out, torch.Tensor) else c
        diff = float((got.float() - ref_c).abs().max() / ref_c.abs().max())
        t = ms(fn)
    except Exception as exc:
        RES["errors"].append(f"{name} {fields} {key} {label}: {exc!r}")
        return
    tf = 2 * m * n * k / t / 1e9
    row = dict(fields, shape=key, kernel=label, ms=t, tflops=tf,
               vs_cublas_bf16=tf / bf[key]["tflops"] if key in bf else None, max_rel_diff=diff)
    RES.setdefault(name, []).append(row)
    log(row)


@section("gemm_ws: the warp-specialised packed GEMM")
def gemm_ws():
    """gemm_wgmma's warp-specialised kernel (_ws_kernel, gemm's default on Hopper: decode
    partitions feed one MMA warpgroup through mbarriers) at its configs against the split
    kernel and _wgmma_kernel, each checked against the dequant route (FP32 sums in another
    order; the GPU tier checks the bound), at every GEMM shape; nvfp4 (CVT and LUT decode),
    ue5m3, mxfp4."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fname, decode in (("nvfp4", None), ("nvfp4", "lut"), ("ue5m3", None), ("mxfp4", None)):
        for (m, n, k) in GEMM_SHAPES:
            pa = qk.quantize(rand((m, k)), F[fname])
            pb = qk.quantize(rand((n, k)), F[fname])
            ref_c = gk.gemm(pa, pb, impl="dequant").float()
            plan = gk.split_plan(pa.spec, pb.spec, decode)
            c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)

            def split():
                gk.CONFIG_OVERRIDE["kernel"] = "split"
                try:
                    return gk.gemm(pa, pb, impl="triton")
                finally:
                    gk.CONFIG_OVERRIDE.pop("kernel")

            runs = [("split", split), ("wgmma", lambda: gw.launch(pa, pb, c, m, n, k, plan))]
            runs += [(f"ws {list(cfg)}" + (" (default)" if cfg == gw.ws_config(k) else ""),
                      lambda cfg=cfg: gw.launch_ws(pa, pb, c, m, n, k, plan, cfg))
                     for cfg in (gw.WS_CONFIG, gw.WS_CONFIG_BK64, *WS_CFGS)]
            for label, fn in runs:
                if left() < 20 or (label == "split" and decode):
                    continue
                time_gemm_run("gemm_ws", label, fn, c, ref_c, (m, n, k), bf, fmt=fname, decode=decode or gk.DECODE)
            save()



# _rs_kernel configs (BM, BN, BK, GROUP_M, STAGES, decode warps, decode registers, maxnreg).
RS_CFGS = ((128, 128, 128, 8, 6, 8, 96, 128), (128, 128, 128, 8, 6, 4, 128, 168))  # RS_CONFIG; 4 decode warps
# under a 168-register launch (the MMA warps' two operand sets then fit: session 14)


@section("gemm_rs: A from the MMA warpgroup's registers")
def gemm_rs():
    """gemm_wgmma._rs_kernel (A decoded straight into the wgmma's register operand, B alone
    through the shared-memory ring) at RS_CFGS against _ws_kernel's default, each checked
    against the dequant route, at every GEMM shape, nvfp4, ue5m3, mxfp4 and ufp4; then its
    parts (PARTS 1: B's decoders only, 2: the MMA warpgroup with A's decode) at 8192^3; each
    with both sides loading their code words one or two steps ahead ("ahead 1|2")."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fname in ("nvfp4", "ue5m3", "mxfp4", "ufp4"):
        for (m, n, k) in GEMM_SHAPES:
            pa = qk.quantize(rand((m, k)), F[fname])
            pb = qk.quantize(rand((n, k)), F[fname])
            ref_c = gk.gemm(pa, pb, impl="dequant").float()
            plan = gk.split_plan(pa.spec, pb.spec)
            c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            runs = [("ws (default)", lambda: gw.launch_ws(pa, pb, c, m, n, k, plan))]
            runs += [(f"rs {list(cfg)} ahead {a}", lambda cfg=cfg, a=a: gw.launch_rs(pa, pb, c, m, n, k, plan, cfg,
                                                                                   ahead=a))
                     for cfg in RS_CFGS for a in (1, 2)]
            if (m, n, k) == GEMM_SHAPES[0]:
                runs += [(f"rs {list(cfg)} parts {p} ahead {a}", lambda cfg=cfg, p=p, a=a: gw.launch_rs(
                    pa, pb, c, m, n, k, plan, cfg, p, a)) for cfg in RS_CFGS for p in (1, 2) for a in (1, 2)]
            for label, fn in runs:
                if left() < 20:
                    continue
                time_gemm_run("gemm_rs", label, fn, c, ref_c, (m, n, k), bf, fmt=fname)
            save()

@section("gemm_ue5m3_f16: UE5M3 operands decoded to f16 at an offset")
def gemm_ue5m3_f16():
    """UE5M3 pairs decoded to bf16 (gk.UE5M3_F16 off: the route before session 16, _ws_kernel)
    against f16 at 2^-UE5M3_EXP (the f16 MMA, which lets them take _rs_kernel), each kernel
    on both plans where it applies, checked against the dequant route; NVFP4's route in the
    same call for reference."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fa, fb in (("ue5m3", "ue5m3-2d"), ("ue5m3", "ue5m3"), ("nvfp4", "nvfp4-2d")):
        for (m, n, k) in GEMM_SHAPES:
            pa = qk.quantize(rand((m, k)), F[fa])
            pb = qk.quantize(rand((n, k)), F[fb])
            ref_c = gk.gemm(pa, pb, impl="dequant").float()
            plans = {"f16": gk.split_plan(pa.spec, pb.spec)}
            if fa.startswith("ue5m3"):
                gk.UE5M3_F16 = False
                try:
                    plans["bf16"] = gk.split_plan(pa.spec, pb.spec)
                finally:
                    gk.UE5M3_F16 = True
            c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            runs = [(f"{d} ws", lambda p=p: gw.launch_ws(pa, pb, c, m, n, k, p)) for d, p in plans.items()]
            runs += [(f"{d} rs ahead {a}", lambda p=p, a=a: gw.launch_rs(pa, pb, c, m, n, k, p, ahead=a))
                     for d, p in plans.items() for a in (1, 2) if p["DOT_F16"]]
            runs += [("route", lambda: gk.gemm(pa, pb, torch.bfloat16, impl="triton"))]
            for label, fn in runs:
                if left() < 20:
                    continue
                time_gemm_run("gemm_ue5m3_f16", label, fn, c, ref_c, (m, n, k), bf, fmt=f"{fa} x {fb}")
            save()


GEMM_IMPL_LABEL = {"triton": "triton", "dequant": "dequant+cuBLAS", "fp8": "E4M3+cuBLAS FP8"}


def gemm_impls(fname):
    """Every gk.gemm impl that applies to the format (fp8: MXFP4 only)."""
    return ("triton", "dequant", "fp8") if fname.startswith("mxfp4") else ("triton", "dequant")


def time_gemm(fname, impl, pa, pb, shape, bf):
    """Time the whole gk.gemm call: the conversion / dequantization of both operands,
    the GEMM and the epilogue (and, for fp8, the flag read-back)."""
    m, n, k = shape
    key = f"{m}x{n}x{k}"
    variant = f"packed {fname} ({GEMM_IMPL_LABEL[impl]})"
    try:
        before = gk.STATS["fp8_fallbacks"]
        gk.gemm(pa, pb, impl=impl)
        fell_back = gk.STATS["fp8_fallbacks"] != before
        t = ms(lambda: gk.gemm(pa, pb, impl=impl))
    except Exception as exc:
        RES["errors"].append(f"gemm {variant} {key}: {exc!r}")
        return
    tf = 2 * m * n * k / t / 1e9
    ratio = tf / bf[key]["tflops"] if key in bf else None
    RES["gemm"].append(dict(variant=variant, impl=impl, fmt=fname, shape=key, ms=t, tflops=tf,
                            vs_cublas_bf16=ratio, fp8_fallback=fell_back))
    log(f"{variant} {key}: {tf:.0f} TFLOP/s ({ratio or 0:.0%} of cuBLAS bf16)")


def to_fp8_rowref(p):
    """MXFP4-style (UE8M0) packed operand -> (E4M3 tensor, per-row power-of-two scale,
    exact?): each block's 2^e folded into the FP8 values relative to the row's largest
    block exponent minus 6 (so 6 * 2^6 = 384 <= 448); exact while a row spans <= 14 binades."""
    vals = ref.decode_codes(ref.unpack_nibbles(p.codes), ref.GRIDS[p.spec.element])
    e = p.scales.to(torch.int32) - 127
    r = e.amax(1, keepdim=True) - 6
    v = vals * ref.pow2((e - r).clamp(-149, 127)).repeat_interleave(p.spec.block, 1)
    v8 = v.to(torch.float8_e4m3fn)
    exact = bool((v8.float() == v).all())
    return v8, ref.pow2(r).float(), exact


@section("exact MXFP4 GEMM on FP8 tensor cores (idea)")
def gemm_fp8_idea():
    bf = RES["ceilings"].get("bf16", {})
    for (m, n, k) in GEMM_SHAPES:
        if left() < 45:
            break
        pa = qk.quantize(rand((m, k)), F["mxfp4"])
        pb = qk.quantize(rand((n, k)), F["mxfp4"])
        a8, sa, ea = to_fp8_rowref(pa)
        b8, sb, eb = to_fp8_rowref(pb)
        fn = lambda: torch._scaled_mm(a8, b8.t(), sa, sb.t(), out_dtype=torch.bfloat16)  # noqa: E731
        c = fn()
        t = ms(fn)
        key = f"{m}x{n}x{k}"
        entry = dict(shape=key, ms=t, tflops=2 * m * n * k / t / 1e9, exact_operands=ea and eb,
                     vs_cublas_bf16=(2 * m * n * k / t / 1e9) / bf[key]["tflops"] if key in bf else None)
        if m * n * k <= 8192 * 6144 * 4096:
            c64, bound = testing.gemm_bound(ref.dequantize_layout(pa)[:1024], ref.dequantize_layout(pb)[:1024],
                                            torch.bfloat16)
            entry["within_bound"] = bool(((c[:1024, :1024].double() - c64).abs() <= bound).all())
        RES["gemm_fp8_exact"].append(entry)
        log(entry)


LINEAR = [(8192, 4096, 4096), (8192, 6144, 4096), (8192, 28672, 4096), (8192, 4096, 14336)]
if SMOKE:
    LINEAR = [(64, 32, 64)]


@section("linear fwd+bwd")
def linear_bench():
    s16 = ref.rht_signs(16, "te").to(DEV)
    nv, nv2d, mx = F["nvfp4"], F["nvfp4-2d"], F["mxfp4"]
    for (m, n, k) in LINEAR:
        if left() < 40:
            break
        x, w, dy = rand((m, k)), rand((n, k)), rand((m, n))

        def bf16():
            torch.mm(x, w.t())
            torch.mm(dy, w)
            torch.mm(dy.t(), x)

        ax, aw, ady = x.abs().amax().float(), w.abs().amax().float(), dy.abs().amax().float()

        def nvfp4(delayed):
            xa, wa, da = (ax, aw, ady) if delayed else (None, None, None)
            xr, xc = fk.fake_quant_rowcol(x, nv, rht_c=(16, s16), tensor_amax=xa, tensor_amax_c=xa)
            wq = fk.fake_quant(w, nv2d, tensor_amax=wa)
            dr, dc = fk.fake_quant_rowcol(dy, nv, rounding="sr", seed=1, rht_c=(16, s16), tensor_amax=da,
                                          tensor_amax_c=da)
            torch.mm(xr, wq.t())
            torch.mm(dr, wq)
            torch.mm(dc.t(), xc)

        def mxfp4():
            xr, xc = fk.fake_quant_rowcol(x, mx)
            wr, wc = fk.fake_quant_rowcol(w, mx)
            dr, dc = fk.fake_quant_rowcol(dy, mx, rounding="sr", seed=1)
            torch.mm(xr, wr.t())
            torch.mm(dr, wc)
            torch.mm(dc.t(), xc)

        t0 = ms(bf16)
        row = dict(shape=f"M{m} N{n} K{k}", bf16_ms=t0)
        for name, fn in (("nvfp4 (TE recipe, fresh amax)", lambda: nvfp4(False)),
                         ("nvfp4 (TE recipe, delayed amax)", lambda: nvfp4(True)), ("mxfp4", mxfp4)):
            fn()
            t = ms(fn)
            row[name] = dict(ms=t, ratio=t / t0)
        RES["linear"].append(row)
        log(row)


LAYER_RECIPES = ("ue5m3", "mxfp4", "nvfp4", "ufp4")
GRAPHED_RECIPES = ("ue5m3", "ue5m3+sr16", "nvfp4+sr16", "mxfp4+sr16", "ufp4+sr16")  # "+sr16": sr_stream x16


def steady_qlinear(recipe: str, x, dy, path: str):
    """fwd+bwd of a fresh QLinear (bf16 weights) in the recipe's steady state: step 0
    measures and stores the periodic tensor amaxes, the returned call runs at step 1."""
    from fourcast import nn as fcnn

    layer = fcnn.QLinear(x.shape[1], dy.shape[1], bias=False, recipe=fc.recipe(recipe), gemm_path=path, device=DEV,
                         dtype=torch.bfloat16)
    layer.step = 0
    torch.autograd.grad(layer(x), (x, layer.weight), dy)
    layer.step = 1
    return lambda: torch.autograd.grad(layer(x), (x, layer.weight), dy)


def linear_step(m: int, n: int, k: int):
    """(x, dy, fwd+bwd of a bf16 nn.Linear(k, n) on x with output gradient dy): the baseline
    of the layer benchmarks."""
    x = rand((m, k)).requires_grad_(True)
    dy = rand((m, n))
    lin = torch.nn.Linear(k, n, bias=False, device=DEV, dtype=torch.bfloat16)
    return x, dy, lambda: torch.autograd.grad(lin(x), (x, lin.weight), dy)


@section("QLinear layer fwd+bwd vs nn.Linear")
def qlinear_bench():
    """The real layer (fourcast.nn.QLinear, bf16 weights, recipe's steady state: step 1,
    so periodic tensor scales are reused) against nn.Linear, both through autograd, at the
    Llama-3-8B shapes: what a training step pays per linear."""
    for (m, n, k) in LINEAR:
        if left() < 60:
            break
        x, dy, base = linear_step(m, n, k)
        base()
        t0 = ms(base, rep=50)
        row = dict(shape=f"M{m} N{n} K{k}", bf16_ms=t0)
        for name in LAYER_RECIPES:
            for path in ("fused", "dequant"):
                if left() < 40:
                    break
                fn = steady_qlinear(name, x, dy, path)
                fn()
                t = ms(fn, rep=50)
                row[f"{name} {path}"] = dict(ms=t, ratio=t / t0)
        RES["qlinear"].append(row)
        log(row)
        save()


def cuda_graphed(fn):
    """fn captured in a CUDA graph (after two warm-up calls on a side stream, as torch asks):
    the replay's launch costs the host one call, so the timing is the GPU's alone."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


@section("QLinear layer fwd+bwd in CUDA graphs vs nn.Linear")
def qlinear_graphed():
    """qlinear_bench with both layers captured in CUDA graphs, as the trainer runs its steps
    (fourcast/train/graphs.py): the layer's seeds in device memory (StepSeeds), no Python
    per launch. The ratio is then GPU work against GPU work."""
    if SMOKE:
        return  # graphs need CUDA
    from fourcast import nn as fcnn

    for sample, (m, n, k) in [(i, s) for i in range(ARGS.repeat) for s in LINEAR]:
        if left() < 60:
            break
        x, dy, base = linear_step(m, n, k)
        base_graph = cuda_graphed(base)
        t0 = ms(base_graph, rep=50)
        row = dict(shape=f"M{m} N{n} K{k}", bf16_ms=t0, sample=sample)
        t_eager = ms(base, rep=50)
        row["bf16 eager"] = dict(ms=t_eager, ratio=t_eager / t0)
        for name in GRAPHED_RECIPES:
            if left() < 40:
                break
            preset, _, stream = name.partition("+")  # (not `base`: base_graph's closure must outlive it)
            recipe = (fc.recipe(preset).set("sr_stream", {"sr16": "x16", "sr4": "x4"}[stream]) if stream
                      else fc.recipe(preset))
            layer = fcnn.QLinear(k, n, bias=False, recipe=recipe, gemm_path="fused", device=DEV, dtype=torch.bfloat16)
            fcnn.StepSeeds(layer, DEV)
            fcnn.set_step(layer, 0)  # measures and stores the periodic tensor amaxes
            step = lambda: torch.autograd.grad(layer(x), (x, layer.weight), dy)  # noqa: E731
            step()
            fcnn.set_step(layer, 1)  # the steady state, captured
            t = ms(cuda_graphed(step), rep=50)
            # The captured nn.Linear moves by up to 15% between calls (kernels-h200.md, session 10):
            # each recipe also gets a baseline timed right after it, and the ratio to that one.
            t_next = ms(base_graph, rep=50)
            row[f"{name} fused"] = dict(ms=t, ratio=t / t0, bf16_next_ms=t_next, ratio_next=t / t_next)
            t = ms(step, rep=50)  # the same layer, launched from Python (against the graphed bf16)
            row[f"{name} fused eager"] = dict(ms=t, ratio=t / t0)
            if ARGS.rowcol_pin:  # the same graphed step with every row+col call on the strip kernel
                qk.CONFIG_OVERRIDE["rowcol"] = "strip"
                try:
                    t = ms(cuda_graphed(step), rep=50)
                finally:
                    qk.CONFIG_OVERRIDE.pop("rowcol", None)
                t_next = ms(base_graph, rep=50)
                row[f"{name} fused, row+col on strip"] = dict(ms=t, ratio=t / t0, bf16_next_ms=t_next,
                                                               ratio_next=t / t_next)
        RES.setdefault("qlinear_graphed", []).append(row)
        log(row)
        save()


@section("QLinear host enqueue time vs GPU time")
def qlinear_host():
    """Is a QLinear fwd+bwd host-bound? Host time to enqueue one (20 back to back, no
    sync, averaged: the queue stays far below its depth) against its GPU time (do_bench).
    Where the enqueue time reaches the GPU time the layer waits on Python, not kernels."""
    sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)
    for (m, n, k) in LINEAR[:2] + [(4096, 1024, 1024), (2048, 1024, 512)] if not SMOKE else [(64, 64, 64)]:
        x = rand((m, k)).requires_grad_(True)
        dy = rand((m, n))
        lin = torch.nn.Linear(k, n, bias=False, device=DEV, dtype=torch.bfloat16)
        layers = {"bf16": lambda: torch.autograd.grad(lin(x), (x, lin.weight), dy)}
        for name in ("ue5m3", "nvfp4"):
            layers[name] = steady_qlinear(name, x, dy, "fused")
        row = dict(shape=f"M{m} N{n} K{k}")

        def enqueue_ms(fn):
            sync()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            t = (time.perf_counter() - t0) / 20 * 1e3
            sync()
            return t

        for name, fn in layers.items():
            fn()
            gpu = ms(fn, rep=50)
            row[name] = dict(gpu_ms=gpu, enqueue_ms=enqueue_ms(fn))
            if name != "bf16":  # the same launches through Triton's own binding (launcher.py off)
                launcher.ENABLED = False
                try:
                    row[name]["enqueue_ms_triton_launch"] = enqueue_ms(fn)
                finally:
                    launcher.ENABLED = True
        RES.setdefault("qlinear_host", []).append(row)
        log(row)
        save()


def table():
    print("\n==== fourcast kernels on", RES["meta"].get("gpu"), "torch", RES["meta"].get("torch"), "triton",
          RES["meta"].get("triton"))
    print(f"copy {RES['ceilings'].get('copy_tbps', 0):.2f} TB/s; peers (8192^2 ms):",
          {k: round(v, 3) for k, v in RES["peers"].items()})
    pc = RES["peers"].get("compiled_pack_ms")
    for q in RES["quantizer"]:
        sp = f" {pc / q['ms']:.1f}x compiled pack" if pc and q["shape"] == "8192x8192" else ""
        print(f"  Q {q['variant']:42s} {q['shape']:>10s} {q['ms'] * 1e3:7.1f} us {q['frac_copy']:5.0%} copy{sp}")
    for q in RES.get("peer_quant", []):
        print(f"  P {q['call']:52s} {q['shape']:>10s} {q['ms'] * 1e3:7.1f} us {q['frac_copy']:5.0%} copy "
              f"{q['vs_compiled']:5.1f}x compiled {q['vs_eager']:5.0f}x eager")
    for g in RES["gemm"]:
        r = g.get("vs_cublas_bf16")
        print(f"  G {g['variant']:42s} {g['shape']:>16s} {g['tflops']:6.0f} TF" + (f" {r:5.0%} bf16" if r else ""))
    for g in RES["gemm_fp8_exact"]:
        print(f"  F mxfp4-on-fp8 {g['shape']:>16s} {g['tflops']:6.0f} TF exact={g['exact_operands']} "
              f"{(g.get('vs_cublas_bf16') or 0):.0%} bf16")
    for key in ("qlinear", "qlinear_graphed"):
        for lrow in RES.get(key, []):
            print(f"  {key}", lrow["shape"], {k: round(v["ratio"], 3) for k, v in lrow.items() if isinstance(v, dict)})
    for lrow in RES["linear"]:
        print("  L", lrow["shape"], {k: round(v["ratio"], 3) for k, v in lrow.items() if isinstance(v, dict)})
    print("checks:", [(c["what"], c["ok"]) for c in RES["checks"]])
    print("errors:", RES["errors"])


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    ap.add_argument("--only", default="", help="comma-separated section names to run")
    ap.add_argument("--repeat", type=int, default=1, help="qlinear_graphed, strip_gather, rowcol_gluon, amax_pass: samples "
                    "of every shape, "
                    "in turn")
    ap.add_argument("--rowcol-pin", action="store_true", help="qlinear_graphed: also time each recipe with "
                    "quantize_rowcol pinned to the strip kernel (the Gluon route's effect)")
    ap.add_argument("--variants", default="", help="gemm_variants: comma-separated label prefixes to run (then "
                    "at every GEMM shape and on ufp4 too); default: all, at 8192^3 and 8192x28672x4096; "
                    "rowcol_gluon: the calls whose names start so")
    ARGS = ap.parse_args()
    torch.manual_seed(0)
    steps = [meta, ceiling_copy, ceiling_gemm, quant_checks, quant_timing, io_floors, rowcol_gluon, amax_pass, strip_sweep,
             sr_stream,
             strip_iters, strip_tall, strip_gather, gemm_epilogue,
             decode_layout,
             layer_profiles, peers, peer_quant,
             gemm_bench, gemm_variants, gemm_wgmma_parts, gemm_ws_parts, gemm_ws, gemm_rs, gemm_ue5m3_f16,
             qlinear_graphed, qlinear_bench, qlinear_host, linear_bench,
             gemm_fp8_idea, quant_configs]
    only = [o for o in ARGS.only.split(",") if o]
    for s in steps:
        if not only or s.__name__ in only or s is meta:
            s()
    RES["meta"]["wall_s"] = time.time() - T0
    save()
    table()


if __name__ == "__main__":
    main()
