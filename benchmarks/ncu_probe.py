"""One kernel call, three times, for Nsight Compute to profile the last (benchmarks/ncu_probe.sh
runs ncu over each case). The cases are the calls whose time the issue-#3 notes could not
explain from instruction counts alone: the strip quantizer's X and dY calls, and the packed
GEMM's split, wgmma, warp-specialised and register-sourced kernels (wgmma, ws and rs also
with PARTS 1: decode side only; rs with PARTS 2: the MMA warpgroups with A's decode; rs2:
RS_CONFIG with code words two steps ahead, gemm's NVFP4/UFP4 route); and the row+col NVFP4
codes call and the both-packed io floor (their DRAM bytes: ncu_probe.sh DRAM=1).

    python benchmarks/ncu_probe.py CASE      # CASE in CASES
    PROBE_SMOKE=1 TRITON_INTERPRET=1 python benchmarks/ncu_probe.py CASE   # CPU, tiny shapes: script bugs only
"""

from __future__ import annotations

import os
import sys

import torch

from fourcast.kernels import gemm as gk
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels.testing import FORMATS
from fourcast.kernels.utils import parse_fmt

SMOKE = os.environ.get("PROBE_SMOKE") == "1"
ZERO_FLUSH = os.environ.get("ZERO_FLUSH") == "1"
DEV = "cpu" if SMOKE else "cuda"
F = {name: parse_fmt(FORMATS[name]) for name in ("ue5m3", "nvfp4")}


def _strip(rounding: str, outputs: tuple, shape=(32768, 2304)):
    shape = (64, 64) if SMOKE else shape
    x = torch.randn(shape, device=DEV, dtype=torch.bfloat16)
    amax = x.abs().amax().float()
    return lambda: ops.rowcol_operands(x, F["ue5m3"], rounding=rounding, seed=1, offset=5, tensor_amax=amax,
                                       tensor_amax_col=amax, outputs=outputs)


def _gemm(kernel: str, parts: int = 3, shape=(8192, 8192, 8192), decode: str | None = None, cfg=None, nreg=None,
          ahead: int = 1):
    m, n, k = (64, 64, 128) if SMOKE else shape
    pa = qk.quantize(torch.randn((m, k), device=DEV, dtype=torch.bfloat16), F["nvfp4"])
    pb = qk.quantize(torch.randn((n, k), device=DEV, dtype=torch.bfloat16), F["nvfp4"])
    if kernel == "split":
        return lambda: gk.gemm(pa, pb, impl="triton")
    from fourcast.kernels import gemm_wgmma as gw

    plan = gk.split_plan(pa.spec, pb.spec, decode)
    c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
    if kernel == "ws":
        return lambda: gw.launch_ws(pa, pb, c, m, n, k, plan, cfg, parts)
    if kernel == "rs":
        return lambda: gw.launch_rs(pa, pb, c, m, n, k, plan, cfg, parts, ahead)
    return lambda: gw.launch(pa, pb, c, m, n, k, plan, cfg, nreg, parts)


def _rowcol():
    """The row+col NVFP4 codes call, delayed amax, 8192^2 (rowcol_gluon's default tile)."""
    x = torch.randn((64, 128) if SMOKE else (8192, 8192), device=DEV, dtype=torch.bfloat16)
    amax = x.abs().amax().float()
    return lambda: qk.quantize_rowcol(x, F["nvfp4"], F["nvfp4"], "rtne", "rtne", 0, 0, None, None, amax, amax)


def _io_packed():
    """The both-packed io floor (benchmarks/kernel_bench/io_floors.py) at 8192^2, 64 x 128 on
    8 warps."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kernel_bench.io_floors import _io_rowcol_gluon_kernel

    r, c = (64, 128) if SMOKE else (8192, 8192)
    x = torch.randn((r, c), device=DEV, dtype=torch.bfloat16)
    u8 = dict(dtype=torch.uint8, device=DEV)
    cr, sr = torch.empty((r, c // 2), **u8), torch.empty((r, c // 16), **u8)
    cc, sc = torch.empty((c, r // 2), **u8), torch.empty((c, r // 16), **u8)
    return lambda: _io_rowcol_gluon_kernel[(r // 64, c // 128)](x, cr, sr, cc, sc, r, c, BM=64, BK=128, NW=8,
                                                                 num_warps=8)


CASES = {
    "rowcol_nvfp4": _rowcol,
    "io_packed": _io_packed,
    "strip_x": lambda: _strip("rtne", ("decoded", "packed")),
    "strip_dy": lambda: _strip("sr16", ("decoded", "decoded"), (32768, 4608)),
    "gemm_split": lambda: _gemm("split"),
    "gemm_wgmma": lambda: _gemm("wgmma", 3),
    "gemm_wgmma_decode": lambda: _gemm("wgmma", 1),
    "gemm_wgmma_lut": lambda: _gemm("wgmma", 3, decode="lut"),
    "gemm_wgmma_lut_decode": lambda: _gemm("wgmma", 1, decode="lut"),
    "gemm_wgmma16": lambda: _gemm("wgmma", 3, cfg=(256, 128, 64, 8, 16, 3), nreg=128),
    "gemm_wgmma16_decode": lambda: _gemm("wgmma", 1, cfg=(256, 128, 64, 8, 16, 3), nreg=128),
    "gemm_ws": lambda: _gemm("ws", 3),
    "gemm_ws_decode": lambda: _gemm("ws", 1),
    "gemm_rs": lambda: _gemm("rs", 3, cfg=(128, 128, 128, 8, 4, 8, 96, 128)),
    "gemm_rs_decode": lambda: _gemm("rs", 1, cfg=(128, 128, 128, 8, 4, 8, 96, 128)),
    "gemm_rs_mma": lambda: _gemm("rs", 2, cfg=(128, 128, 128, 8, 4, 8, 96, 128)),
    "gemm_rs2": lambda: _gemm("rs", 3, ahead=2),  # gemm's NVFP4 route (session 14)
    "gemm_rs2_mma": lambda: _gemm("rs", 2, ahead=2),
}


def main() -> None:
    fn = CASES[sys.argv[1]]()
    # ZERO_FLUSH=1: zero 256 MB before each call, as do_bench's flush (the L2 left dirty)
    flush = torch.empty(1 << 28 if not SMOKE else 1, dtype=torch.uint8, device=DEV) if ZERO_FLUSH else None
    for _ in range(3):
        if flush is not None:
            flush.zero_()
        fn()
    if not SMOKE:
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
