"""How the quantizers' fraction of copy depends on how they are timed: the state do_bench's
flush leaves the L2 in (timing_methods), and the host's share of an eager call (graphed).
Session 23 also timed rowcol_gluon at other launch orders here (g column tiles side by side):
no floor moved and every call was as fast or slower, so the knob was removed."""

from __future__ import annotations

import ast
import contextlib

import torch

from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref

import peers as pp  # benchmarks/peers.py: the PyTorch peers
from kernel_bench.against_peers import compiled_peer, peer_calls
from kernel_bench.harness import (
    ARGS, DEV, F, QSIZES, RES, SMOKE, left, log, ms, ms_clean, ms_graphed, ms_steady, qbytes, rand, same_tensors, save,
    section, sm_clock,
)
from kernel_bench.io_floors import _io_floor_kernel, _io_rowcol_gluon_decoded_kernel, _io_rowcol_gluon_kernel
from kernel_bench.quant import GLUON_RHT_TILES

METHODS = (("do_bench", ms), ("clean L2", ms_clean), ("steady", ms_steady))


@section("timing methods: copy, io floors, quantizer calls and a peer timed three ways")
def timing_methods():
    """Copy, the io floors and rowcol_gluon's calls at QSIZES timed three ways: do_bench (its
    flush zeroes 256 MB and leaves the L2 dirty), the L2 flushed clean by a read (ms_clean), and
    back to back (ms_steady), --repeat samples of the calls in alternation; the torch.compile
    peer of the delayed NVFP4 call the same three ways. Rows: RES["timing_methods"] (name,
    shape, method, ms, bytes, TB/s, sample, SM clock)."""
    if SMOKE:
        return
    out = RES.setdefault("timing_methods", [])
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
    _time(out, "copy 1 GiB", "-", 4.0 * big.numel(), lambda: big_out.copy_(big))


def _shape(out, r, c) -> bool:
    """timing_methods at one shape; False once the budget is spent."""
    nv, ue = F["nvfp4"], F["ue5m3"]
    s16 = ref.rht_signs(16, "te").to(DEV)
    shape = f"{r}x{c}"
    x = rand((r, c))
    y = torch.empty_like(x)
    amax = x.abs().amax().float()
    _time(out, "copy", shape, 4.0 * r * c, lambda: y.copy_(x))
    cr = torch.empty((r, c // 2), dtype=torch.uint8, device=DEV)
    sr = torch.empty((r, c // 16), dtype=torch.uint8, device=DEV)
    cc = torch.empty((c, r // 2), dtype=torch.uint8, device=DEV)
    sc = torch.empty((c, r // 16), dtype=torch.uint8, device=DEV)
    xr, xc = torch.empty_like(x), torch.empty_like(x)
    grid = (r // 64, c // 128)
    _time(out, "io floor row", shape, qbytes(r, c, 16, 1),
          lambda: _io_floor_kernel[grid](x, cr, sr, r, c, BM=64, BK=128, num_warps=8))
    _time(out, "io floor both packed", shape, qbytes(r, c, 16, 2), lambda: _io_rowcol_gluon_kernel[grid](
        x, cr, sr, cc, sc, r, c, BM=64, BK=128, NW=8, num_warps=8))
    _time(out, "io floor X", shape, qbytes(r, c, 16, (1, 1)), lambda: _io_rowcol_gluon_decoded_kernel[grid](
        x, xr, cc, sc, xc, r, c, BM=64, BK=128, NW=8, COL_DECODED=False, num_warps=8))
    _time(out, "io floor dY", shape, qbytes(r, c, 16, 2, True), lambda: _io_rowcol_gluon_decoded_kernel[grid](
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
    for sample in range(ARGS.repeat):  # samples in alternation: the calls' times swing between runs
        for name, nbytes, fn in calls:
            if left() < 30:
                return False
            _time(out, name, shape, nbytes, fn, sample)
    peer, args = compiled_peer(x, dict(amax=amax), None)
    peer(*args)
    _time(out, "peer: row+col nvfp4 delayed, torch.compile", shape, qbytes(r, c, 16, 2), lambda: peer(*args))
    return True


def _time(out, name, shape, nbytes, fn, sample=0):
    """fn timed by each of METHODS; the SM clock (MHz) read after each: a compute-bound call
    slows with it where a memory-bound one does not."""
    for method, timer in METHODS:
        t = timer(fn)
        out.append(dict(name=name, shape=shape, method=method, ms=t, bytes=nbytes,
                        tbps=nbytes / (t * 1e-3) / 1e12, sample=sample, sm_mhz=sm_clock()))


def _table(out):
    """Each row's TB/s by method and its fraction of the 1 GiB copy timed the same way."""
    copy = {o["method"]: o["tbps"] for o in out if o["name"] == "copy 1 GiB"}
    rows = {}
    for o in out:
        rows.setdefault((o["name"], o["shape"], o.get("sample", 0)), {})[o["method"]] = o
    log("timing_methods: us, fraction of the 1 GiB copy timed the same way, per method " + ", ".join(
        f"{m} {copy.get(m, 0):.2f} TB/s" for m, _ in METHODS))
    for (name, shape, sample), by in rows.items():
        cells = "  ".join(f"{by[m]['ms'] * 1e3:7.1f} us {by[m]['tbps'] / copy[m]:.3f}" for m, _ in METHODS
                          if m in by and m in copy)
        mhz = by[METHODS[0][0]].get("sm_mhz")
        log(f"  {name[:44]:44s} {shape:10s} s{sample} {cells}  {mhz} MHz")


# graphed's tiles: the default (None: config_for's) and session 24's looped ones (quant.GLUON_TILES;
# quant.GLUON_RHT_TILES for the calls with a column RHT)
GRAPHED_TILES = (None, (64, 128, 8, 8, 64, True, True), (64, 128, 8, 1, 64, True, True, 0, 4),
                 (64, 128, 8, 1, 80, True, True, 2, 3))
GRAPHED_RHT_TILES = (None,) + GLUON_RHT_TILES[2:]


def parse_tiles(text: str) -> list[tuple]:
    """--tiles' rowcol_gluon Configs: tuples of Python literals, `;` between tiles (e.g.
    "128,128,16,1;128,128,16,1,80")."""
    return [tuple(ast.literal_eval(f"({t},)")) for t in text.split(";") if t.strip()]


@section("graphed: the quantizer calls and their peers as GPU time (CUDA graph replay)")
def graphed():
    """Each row+col NVFP4 call of the quantizer target, the X and dY calls, copy and each call's
    torch.compile peer, captured in a CUDA graph and timed by do_bench on its replay
    (harness.ms_graphed): the GPU's time, none of the host's. Each call at the default tile
    and (unless --default-tiles) at GRAPHED_TILES' others (rowcol_gluon.Config; the route each ran on recorded: a tile
    that does not serve a call leaves it on the strip kernel). Rows: RES["graphed"]; the
    replayed call's bytes checked against an eager call's."""
    if SMOKE:
        return
    out = RES.setdefault("graphed", [])
    h16 = pp.hadamard16(device=DEV)
    copy_tbps = RES["ceilings"].get("copy_tbps", 4.27)
    for (r, c) in QSIZES:
        x = rand((r, c))
        y = torch.empty_like(x)
        amax = x.abs().amax().float()
        t_copy, _ = ms_graphed(lambda: y.copy_(x))
        out.append(dict(call="copy", shape=f"{r}x{c}", ms=t_copy, frac_copy=4.0 * r * c / (t_copy * 1e9) / copy_tbps))
        ue, uf = F["ue5m3"], F["ufp4"]
        rot_r, rot_c = (16, ref.rht_signs(16, "per-layer", 5).to(DEV)), (16, ref.rht_signs(16, "per-layer", 6).to(DEV))
        extra = (("X: decoded row + packed col, ue5m3 delayed", qbytes(r, c, 16, (1, 1)), None,
                  lambda: ops.rowcol_operands(x, ue, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("dY: decoded row + col, ue5m3 delayed, SR16", qbytes(r, c, 16, 2, True), None,
                  lambda: ops.rowcol_operands(x, ue, rounding="sr16", seed=1, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "decoded"))),
                 # UFP4's calls: a row and a column RHT of 16 on every operand
                 ("UFP4 X: decoded row + packed col, row + col RHT16, delayed", qbytes(r, c, 16, (1, 1)), None,
                  lambda: ops.rowcol_operands(x, uf, rht=rot_r, rht_col=rot_c, tensor_amax=amax,
                                              tensor_amax_col=amax, outputs=("decoded", "packed"))),
                 ("UFP4 W: decoded row + col, row + col RHT16, delayed", qbytes(r, c, 16, 2, True), None,
                  lambda: ops.rowcol_operands(x, uf, rht=rot_r, rht_col=rot_c, tensor_amax=amax,
                                              tensor_amax_col=amax, outputs=("decoded", "decoded"))),
                 ("UFP4 dY: decoded row + col, row + col RHT16, SR16", qbytes(r, c, 16, 2, True), None,
                  lambda: ops.rowcol_operands(x, uf, rounding="sr16", seed=1, rht=rot_r, rht_col=rot_c,
                                              tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "decoded"))))
        calls = [(name, qbytes(r, c, 16, 2), kw, ours) for name, ours, kw in peer_calls(x, amax)][:5] + list(extra)
        if ARGS.variants:  # the calls whose names start so
            calls = [c for c in calls if c[0].startswith(tuple(v.strip() for v in ARGS.variants.split(",")))]
        for name, nbytes, kw, ours in calls:
            compiled_ms = None
            tiles = (None,) if ARGS.default_tiles else GRAPHED_RHT_TILES if "RHT" in name else GRAPHED_TILES
            if ARGS.tiles:
                tiles = (None, *parse_tiles(ARGS.tiles))
            for tile in tiles:
                if left() < 40:
                    return
                with _pinned_tile(tile) as routes:
                    try:
                        t, got = ms_graphed(ours)
                    except Exception as exc:  # one call failing to capture must not lose the others
                        RES["errors"].append(f"graphed {name} {tile} {r}x{c}: {exc!r}")
                        continue
                    RES["checks"].append(dict(what=f"graphed {name} {tile} {r}x{c}: replayed bytes = an eager call's",
                                              ok=same_tensors(got, ours())))
                    eager = ms(ours)
                row = dict(call=name, shape=f"{r}x{c}", tile=tile and list(tile), routes=sorted(set(routes)), ms=t,
                           frac_copy=nbytes / (t * 1e9) / copy_tbps, eager_ms=eager)
                out.append(row)
                if kw is not None and compiled_ms is None:
                    try:
                        peer, args = compiled_peer(x, kw, h16)
                        peer(*args)
                        compiled_ms = ms_graphed(lambda: peer(*args))[0]
                    except Exception as exc:  # the peer's capture failing keeps ours
                        compiled_ms = float("nan")
                        RES["errors"].append(f"graphed peer {name} {r}x{c}: {exc!r}")
                if compiled_ms is not None:
                    row["compiled_ms"] = compiled_ms
                    row["vs_compiled"] = compiled_ms / t
                log(f"graphed {name} {r}x{c} {tile or 'default'} {row['routes']}: {t * 1e3:.1f} us "
                    f"({row['frac_copy']:.3f} of copy; eager {eager * 1e3:.1f} us)"
                    + (f", compiled peer {compiled_ms * 1e3:.1f} us, {row['vs_compiled']:.2f}x"
                       if compiled_ms is not None else ""))
        save()


# amax_calls' variants: (the amax given, quantize.CONFIG_OVERRIDE entries). A column RHT's in
# either pass: "f64 column RHT", the amax pass's in f64 (session 24's pass); "f32 RHTs", both
# passes' in f32 (session 26's quantize pass, rowcol_gluon COL_F32); "f64 RHTs", both in f64;
# "given, f32 / f64 RHT": the quantize pass alone with its RHT in f32 / f64; ", 80 regs": on
# one row tile a program capped at 80 registers (three programs an SM).
AMAX_VARIANTS = {"given": (True, {}), "given, f32 RHT": (True, dict(col_rht_f32=True)),
                 "given, f64 RHT": (True, dict(col_rht_f32=False)),
                 "launch order": (False, dict(amax_reversed=False)), "default": (False, {}),
                 "f32 RHTs": (False, dict(col_rht_f32=True)), "f64 column RHT": (False, dict(amax_rht_f32=False)),
                 "f64 RHTs": (False, dict(amax_rht_f32=False, col_rht_f32=False)),
                 "given, f32 RHT, 80 regs": (True, dict(col_rht_f32=True, rowcol_gluon=(64, 128, 8, 1, 80))),
                 "given, f64 RHT, 80 regs": (True, dict(col_rht_f32=False, rowcol_gluon=(64, 128, 8, 1, 80)))}
# each variant's quantize pass alone: the given variant with its col_rht_f32
_GIVEN = {None: "given", True: "given, f32 RHT", False: "given, f64 RHT"}


@section("amax calls: the calls that measure their amax, by the amax pass's variant")
def amax_calls():
    """The calls that measure their amax (NVFP4 codes, TE's dY codes: column RHT16 + SR16, the
    ue5m3 X call, and the column RHT16 call) as CUDA-graph replays with each AMAX_VARIANTS pass:
    the default (the pass's programs in reverse launch order, so the tiles it reads last, still
    in L2, are the ones the quantize pass reads first; a bf16 column RHT in f32 in both passes,
    f64 where f32 cannot settle it), in launch order, with the RHT in f64 in the amax pass or in
    both, and the amax given (the quantize pass alone, its RHT in f32 or f64); --repeat samples
    in alternation. Every variant's bytes equal the default's (the amax given: its own
    default's); the torch.compile peer, measuring its amax too, beside the NVFP4 calls. Rows:
    RES["amax_calls"], amax_pass_ms against the quantize pass with the same RHT."""
    out = RES.setdefault("amax_calls", [])
    nv, ue, s16 = F["nvfp4"], F["ue5m3"], ref.rht_signs(16, "te").to(DEV)
    for (r, c) in QSIZES:
        x = rand((r, c))
        amax = x.abs().amax().float()
        calls = (("row+col nvfp4 (codes)", dict(), False,
                  lambda a: qk.quantize_rowcol(x, nv, nv, "rtne", "rtne", 0, 0, None, None, a, a)),
                 ("row+col nvfp4, col RHT16 (codes)", dict(rht=True), True,
                  lambda a: qk.quantize_rowcol(x, nv, nv, "rtne", "rtne", 0, 0, None, (16, s16), a, a)),
                 ("TE dY codes (col RHT16 + SR16)", dict(rht=True, sr=True), True,
                  lambda a: qk.quantize_rowcol(x, nv, nv, "sr16", "sr16", 0, 0, None, (16, s16), a, a)),
                 ("X: ue5m3 decoded row + packed col", None, False,
                  lambda a: ops.rowcol_operands(x, ue, tensor_amax=a, tensor_amax_col=a,
                                                outputs=("decoded", "packed"))))
        for name, peer_kw, rht, call in calls:
            variants = [v for v in AMAX_VARIANTS if rht or "RHT" not in v]
            measured = [v for v in variants if not AMAX_VARIANTS[v][0]]
            got, times = {}, {}
            for sample in range(ARGS.repeat):
                for v in variants:
                    if left() < 30:
                        return
                    given, override = AMAX_VARIANTS[v]
                    qk.CONFIG_OVERRIDE.update(override)
                    try:
                        t, got[v] = ms_graphed(lambda: call(amax if given else None))
                    finally:
                        for key in override:
                            qk.CONFIG_OVERRIDE.pop(key, None)
                    times.setdefault(v, []).append(t)
            for v in variants:  # the amax given differs where an RHT's amax is not |x|'s
                base = "given" if AMAX_VARIANTS[v][0] else "default"
                if v != base:
                    RES["checks"].append(dict(what=f"amax calls {name} {r}x{c}: {v}'s bytes = {base}'s",
                                              ok=same_tensors(got[v], got[base])))
            med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            row = dict(call=name, shape=f"{r}x{c}", samples_ms=times, ms=med,
                       amax_pass_ms={k: med[k] - med[_GIVEN[AMAX_VARIANTS[k][1].get("col_rht_f32")]]
                                     for k in measured})
            if peer_kw is not None:  # its torch.compile peer, measuring its amax too, replayed likewise
                peer, args = compiled_peer(x, peer_kw, pp.hadamard16(device=DEV))
                peer(*args)
                row["compiled_ms"] = ms_graphed(lambda: peer(*args))[0]
                row["vs_compiled"] = {k: row["compiled_ms"] / med[k] for k in measured}
            out.append(row)
            log(f"amax calls {name} {r}x{c}: " + ", ".join(
                f"{k} {med[k] * 1e3:.1f} us" + (f" (pass {row['amax_pass_ms'][k] * 1e3:.1f})" if k in measured else "")
                + (f" {row['vs_compiled'][k]:.2f}x compiled" if "vs_compiled" in row and k in measured else "")
                for k in variants))
        save()


@contextlib.contextmanager
def _pinned_tile(tile):
    """rowcol_gluon's tile pinned to `tile` (None: the default) while the block runs; yields the
    list of routes (quantize._rowcol_plan's) the calls inside take."""
    routes, plan = [], qk._rowcol_plan

    def spy(*args, **kwargs):
        p = plan(*args, **kwargs)
        routes.append(p["route"])
        return p

    qk._rowcol_plan = spy
    if tile is not None:
        qk.CONFIG_OVERRIDE["rowcol_gluon"] = tile
    try:
        yield routes
    finally:
        qk._rowcol_plan = plan
        qk.CONFIG_OVERRIDE.pop("rowcol_gluon", None)
