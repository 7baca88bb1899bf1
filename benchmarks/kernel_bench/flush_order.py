"""How the quantizers' fraction of copy depends on how they are timed (the state do_bench's
flush leaves the L2 in) and on rowcol_gluon's launch order (Config.group)."""

from __future__ import annotations

import contextlib
import subprocess

import torch

from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref

import peers as pp  # benchmarks/peers.py: the PyTorch peers
from kernel_bench.harness import (
    ARGS, DEV, F, QSIZES, RES, SMOKE, left, log, ms, ms_clean, ms_steady, qbytes, rand, same_tensors, save, section,
)
from kernel_bench.io_floors import _io_floor_kernel, _io_rowcol_gluon_decoded_kernel, _io_rowcol_gluon_kernel

METHODS = (("do_bench", ms), ("clean L2", ms_clean), ("steady", ms_steady))
GROUPS = (1, 4, 8)
TILE = (64, 128, 8, 1, None, True)  # rowcol_gluon.CONFIG, the default tile of the calls below


@section("flush and launch order: three timing methods, rowcol_gluon's launch order")
def flush_order():
    """Copy, the io floors and rowcol_gluon's calls at QSIZES timed three ways: do_bench (its
    flush zeroes 256 MB and leaves the L2 dirty), the L2 flushed clean by a read (ms_clean), and
    back to back (ms_steady); the io floors and the calls at each launch order GROUPS (bytes
    checked against group 1's). The torch.compile peer of the delayed NVFP4 call timed the same
    three ways. Rows: RES["flush_order"] (name, shape, group, method, ms, bytes, TB/s)."""
    if SMOKE:
        return
    out = RES.setdefault("flush_order", [])
    _copy_big(out)
    for (r, c) in QSIZES:
        done = _shape(out, r, c)
        save()
        if not done:
            break
    _table(out)


def _copy_big(out):
    big = rand((1 << 29,))
    big_out = torch.empty_like(big)
    _time(out, "copy 1 GiB", "-", 1, 4.0 * big.numel(), lambda: big_out.copy_(big))


def _shape(out, r, c) -> bool:
    """flush_order at one shape; False once the budget is spent."""
    nv, ue = F["nvfp4"], F["ue5m3"]
    s16 = ref.rht_signs(16, "te").to(DEV)
    shape = f"{r}x{c}"
    x = rand((r, c))
    y = torch.empty_like(x)
    amax = x.abs().amax().float()
    _time(out, "copy", shape, 1, 4.0 * r * c, lambda: y.copy_(x))
    cr = torch.empty((r, c // 2), dtype=torch.uint8, device=DEV)
    sr = torch.empty((r, c // 16), dtype=torch.uint8, device=DEV)
    cc = torch.empty((c, r // 2), dtype=torch.uint8, device=DEV)
    sc = torch.empty((c, r // 16), dtype=torch.uint8, device=DEV)
    xr, xc = torch.empty_like(x), torch.empty_like(x)
    grid = (r // 64, c // 128)
    _time(out, "io floor row", shape, 1, qbytes(r, c, 16, 1),
          lambda: _io_floor_kernel[grid](x, cr, sr, r, c, BM=64, BK=128, num_warps=8))
    # the io floors at launch orders 1-8 measured the same (session 23, call A): order 1 only
    _time(out, "io floor both packed", shape, 1, qbytes(r, c, 16, 2), lambda: _io_rowcol_gluon_kernel[grid](
        x, cr, sr, cc, sc, r, c, BM=64, BK=128, NW=8, num_warps=8))
    _time(out, "io floor X", shape, 1, qbytes(r, c, 16, (1, 1)), lambda: _io_rowcol_gluon_decoded_kernel[grid](
        x, xr, cc, sc, xc, r, c, BM=64, BK=128, NW=8, COL_DECODED=False, num_warps=8))
    _time(out, "io floor dY", shape, 1, qbytes(r, c, 16, 2, True), lambda: _io_rowcol_gluon_decoded_kernel[grid](
        x, xr, cc, sc, xc, r, c, BM=64, BK=128, NW=8, COL_DECODED=True, num_warps=8))
    calls = (("row+col nvfp4 delayed (codes)", qbytes(r, c, 16, 2),
              lambda: qk.quantize_rowcol(x, nv, nv, "rtne", "rtne", 0, 0, None, None, amax, amax)),
             ("X: decoded row + packed col, ue5m3 delayed", qbytes(r, c, 16, (1, 1)),
              lambda: ops.rowcol_operands(x, ue, tensor_amax=amax, tensor_amax_col=amax,
                                          outputs=("decoded", "packed"))),
             ("dY: decoded row + col, ue5m3 delayed, SR16", qbytes(r, c, 16, 2, True),
              lambda: ops.rowcol_operands(x, ue, rounding="sr16", seed=1, tensor_amax=amax, tensor_amax_col=amax,
                                          outputs=("decoded", "decoded"))),
             ("row+col nvfp4, col RHT16+SR16 (TE dY, codes)", qbytes(r, c, 16, 2),
              lambda: qk.quantize_rowcol(x, nv, nv, "sr16", "sr16", 0, 0, None, (16, s16), amax, amax)))
    for name, nbytes, fn in calls:
        want = fn()
        for g in GROUPS:
            with _group(g):
                RES["checks"].append(dict(what=f"flush_order {name} {shape} group {g}: bytes = group 1's",
                                          ok=same_tensors(fn(), want)))
    for sample in range(ARGS.repeat):  # samples in alternation: the calls' times swing between runs
        for name, nbytes, fn in calls:
            for g in GROUPS:
                if left() < 30:
                    return False
                with _group(g):
                    _time(out, name, shape, g, nbytes, fn, sample)
    torch._dynamo.reset()
    peer = torch.compile(pp.nvfp4_rowcol, dynamic=False, fullgraph=True)
    peer(x, amax, None, False)
    _time(out, "peer: row+col nvfp4 delayed, torch.compile", shape, 1, qbytes(r, c, 16, 2),
          lambda: peer(x, amax, None, False))
    return True


@contextlib.contextmanager
def _group(g):
    """rowcol_gluon's calls at its default tile with launch order g."""
    qk.CONFIG_OVERRIDE["rowcol_gluon"] = TILE + (g,)
    try:
        yield
    finally:
        qk.CONFIG_OVERRIDE.pop("rowcol_gluon", None)


def _time(out, name, shape, group, nbytes, fn, sample=0):
    """fn timed by each of METHODS; the SM clock (MHz) read after each: a compute-bound call
    slows with it where a memory-bound one does not."""
    for method, timer in METHODS:
        t = timer(fn)
        out.append(dict(name=name, shape=shape, group=group, method=method, ms=t, bytes=nbytes,
                        tbps=nbytes / (t * 1e-3) / 1e12, sample=sample, sm_mhz=_sm_clock()))


def _sm_clock():
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no pynvml: ask nvidia-smi
        try:
            got = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i",
                                  str(torch.cuda.current_device())], capture_output=True, text=True, timeout=10)
            return int(got.stdout.split()[0])
        except Exception:  # not recorded
            return None


def _table(out):
    """Each row's TB/s by method and its fraction of the 1 GiB copy timed the same way."""
    copy = {o["method"]: o["tbps"] for o in out if o["name"] == "copy 1 GiB"}
    rows = {}
    for o in out:
        rows.setdefault((o["name"], o["shape"], o["group"], o.get("sample", 0)), {})[o["method"]] = o
    log("flush_order: us, fraction of the 1 GiB copy timed the same way, per method " + ", ".join(
        f"{m} {copy.get(m, 0):.2f} TB/s" for m, _ in METHODS))
    for (name, shape, group, sample), by in rows.items():
        cells = "  ".join(f"{by[m]['ms'] * 1e3:7.1f} us {by[m]['tbps'] / copy[m]:.3f}" for m, _ in METHODS
                          if m in by and m in copy)
        mhz = by[METHODS[0][0]].get("sm_mhz")
        log(f"  {name[:44]:44s} {shape:10s} g{group} s{sample} {cells}  {mhz} MHz")
