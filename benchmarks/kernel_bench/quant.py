"""The quantizer: bytes against the reference, the variant table, rowcol_gluon per tile against
the strip kernel, the amax pass, tile configs."""

from __future__ import annotations

import traceback

import torch

from fourcast.kernels import fake_quant as fk
from fourcast.kernels import launcher
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

from kernel_bench.io_floors import io_floor
from kernel_bench.harness import (
    ARGS, BIG, DEV, F, QSIZES, RES, SMOKE, left, log, ms, on_route, qbytes, rand, same_tensors, save, section,
    time_quantizer,
)


# rowcol_gluon.Config fields: (BM, BK, warps, row tiles a program, maxnreg, one lane a block of
# 16, looped, cp.async stages, programs an SM). The looped tiles (session 24; on an H100 all
# slower than the default but level on TE's dY call, kernels-h200.md):
# eight row tiles a program in a loop under 64 registers (four programs an SM, as the default;
# a few bytes spilled); a grid-stride loop at four programs an SM under 64 registers, and at
# three under 80 with the next one or two tiles' words copied ahead (cp.async).
GLUON_TILES = ((64, 128, 8, 1, None, True), (64, 128, 8, 2, None, True), (64, 128, 4, 1, None, True),
               (64, 128, 8, 8, 64, True, True), (64, 128, 8, 1, 64, True, True, 0, 4),
               (64, 128, 8, 1, 80, True, True, 2, 3), (64, 128, 8, 1, 80, True, True, 3, 3))
# The calls with a column RHT16 (TE's): its f64 butterflies take 100-128 registers, two programs
# an SM at one tile or two; looped, eight tiles or a grid-stride loop at two an SM under 128
# (offline SASS: TE's dY codes 52.8 -> 48.3 instructions an element, its X call 38.6 -> 37.5).
GLUON_RHT_TILES = ((64, 128, 8, 1, None, True), (64, 128, 8, 2, None, True), (64, 128, 8, 8, 128, True, True),
                   (64, 128, 8, 1, 128, True, True, 0, 2), (64, 128, 8, 1, 128, True, True, 2, 2))


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
        calls = (("row+col nvfp4 delayed (codes)", nv, ("rtne", "rtne"), packed, 2, False, (0, 0),
                  lambda: qk.quantize_rowcol(x, nv, nv, "rtne", "rtne", 0, 0, None, None, amax, amax)),
                 ("row+col mxfp4 (codes)", mx, ("rtne", "rtne"), packed, 2, False, (0, 0), lambda: qk.quantize_rowcol(
                     x, mx, mx, "rtne", "rtne", 0, 0, None, None)),
                 ("X: decoded row + packed col, ue5m3 delayed", ue, ("rtne", "rtne"), x_call, (1, 1), None, (0, 0),
                  lambda: ops.rowcol_operands(x, ue, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("dY: decoded row + col, ue5m3 delayed, SR16", ue, ("sr16", "sr16"), dy_call, 2, True, (0, 0),
                  lambda: ops.rowcol_operands(x, ue, rounding="sr16", seed=1, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "decoded"))),
                 ("row+col nvfp4, col RHT16+SR16 (TE dY, codes)", nv, ("sr16", "sr16"), packed, 2, False,
                  (0, 16), lambda: qk.quantize_rowcol(x, nv, nv, "sr16", "sr16", 0, 0, None, (16, s16), amax, amax)),
                 ("dY nvfp4: decoded row + col, col RHT16+SR16 (TE dY)", nv, ("sr16", "sr16"), dy_call, 2, True,
                  (0, 16),
                  lambda: ops.rowcol_operands(x, nv, rounding="sr16", seed=1, rht_col=(16, s16), tensor_amax=amax,
                                              tensor_amax_col=amax, outputs=("decoded", "decoded"))),
                 ("X mxfp4: RHT32 decoded row + SR16 packed col", mx, ("rtne", "sr16"), x_call, (1, 1), None,
                  (32, 0), lambda: ops.rowcol_operands(x, mx, rounding="rtne", rounding_col="sr16", seed=1,
                                                       rht=(32, s32), outputs=("decoded", "packed"))),
                 ("dY mxfp4: decoded row + col, SR16", mx, ("sr16", "sr16"), dy_call, 2, True, (0, 0),
                  lambda: ops.rowcol_operands(x, mx, rounding="sr16", seed=1, outputs=("decoded", "decoded"))),
                 ("X f32: decoded row + packed col, ue5m3 delayed", ue, ("rtne", "rtne"), x_call, (1, 1), None, (0, 0),
                  lambda: ops.rowcol_operands(x32, ue, tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("X nvfp4 f32: decoded row + packed col RHT16", nv, ("rtne", "rtne"), x_call, (1, 1), None, (0, 16),
                  lambda: ops.rowcol_operands(x32, nv, rht_col=(16, s16), tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))),
                 ("X nvfp4: decoded row + packed col RHT16", nv, ("rtne", "rtne"), x_call, (1, 1), None, (0, 16),
                  lambda: ops.rowcol_operands(x, nv, rht_col=(16, s16), tensor_amax=amax, tensor_amax_col=amax,
                                              outputs=("decoded", "packed"))))
        # each call: name, format, (row, column) roundings, (codes, x_hat) per copy, copies,
        # x_hat written, (row, column) RHT sizes, the call
        for name, f, (rounding_r, rounding_c), (codes_on, xhat_on), copies, xhat, rht, fn in calls:
            if ARGS.variants and not name.startswith(tuple(ARGS.variants.split(","))):
                continue
            src = x32 if " f32" in name else x
            src_bytes = src.element_size()
            want = on_route("strip", fn)
            times = {}
            for sample in range(ARGS.repeat):
                if left() < 20:
                    return
                t = time_quantizer(f"{name} [strip]", shape, copies, xhat, lambda fn=fn: on_route("strip", fn),
                                   src_bytes=src_bytes, sample=sample)
                times.setdefault("strip", []).append(t)
                for tile in (GLUON_RHT_TILES if rht[1] else GLUON_TILES):
                    qk.CONFIG_OVERRIDE["rowcol_gluon"] = tile
                    try:
                        routed = on_route("gluon", lambda: qk._gluon_rowcol_ok(
                            src, qk.parse_fmt(f), rounding_r, rounding_c, rht, codes_on, xhat_on, True,
                            torch.bfloat16))
                        if not routed:  # an RHT or "sr16" on blocks of 32 needs the one-lane layouts
                            continue
                        if sample == 0:
                            same = routed and same_tensors(on_route("gluon", fn), want)
                            RES["checks"].append(dict(what=f"rowcol gluon {name} {tile} {shape}: routed there, "
                                                      "bytes = strip's", ok=same))
                        lanes = ", one lane a block" if len(tile) > 5 and tile[5] else ""
                        looped = f", looped, maxnreg {tile[4]}" if len(tile) > 6 and tile[6] else ""
                        looped += f", {tile[7]} stages" if len(tile) > 7 and tile[7] else ""
                        looped += f", {tile[8]} an SM" if len(tile) > 8 and tile[8] else ""
                        label = f"{name} [gluon {tile[0]}x{tile[1]} {tile[2]} warps x{tile[3]}{lanes}{looped}]"
                        t = time_quantizer(label, shape, copies, xhat, lambda fn=fn: on_route("gluon", fn),
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
    amax_gluon._amax_kernel at AMAX_TILES, without an RHT, with a column RHT of 16 (TE's) and
    with a row and a column RHT of 16 (UFP4's). A bf16 input's column RHT both in f64 (RHT_MODE
    0) and in f32 then the gated f64 fallback, the default (modes 1 and 2, mode 1 at each tile;
    and mode 1 alone, which shows what the fallback's launch costs); UFP4's row RHT in f64 (the
    default) and in f32 ("row f32": amax_gluon.ROW_RHT_F32's variant, at each tile). At the quantizer
    shapes and the 125M model's X/dY shapes; the kernels' amax bits compared (mode 1 alone's
    only where it needed no fallback). Summary: RES["amax_pass"]."""
    if SMOKE:
        return
    from fourcast.kernels import amax_gluon as ag
    from fourcast.kernels import strip

    nv = qk.parse_fmt(F["nvfp4"])
    s16 = ref.rht_signs(16, "te").to(DEV).float()
    r16 = ref.rht_signs(16, "per-layer", 5).to(DEV).float()
    summary = RES.setdefault("amax_pass", [])
    for shape, dtype in [(s, d) for s in AMAX_SHAPES for d in AMAX_DTYPES]:
        x = rand(shape, dtype)
        R, C = shape
        f32 = dtype == torch.float32
        for rn_r, rn_c in ((0, 0), (0, 16), (16, 16)):
            dummy = torch.zeros(1, device=DEV)
            signs_c, signs_r = (s16 if rn_c else dummy), (r16 if rn_r else dummy)
            qk.CONFIG_OVERRIDE["amax"] = "strip"
            try:
                (_, g0, c0), = qk._rowcol_plan(x, nv, "rtne", "rtne", rn_r, rn_c, (True, True), (False, False),
                                               False, True, False)["amax"]
            finally:
                qk.CONFIG_OVERRIDE.pop("amax", None)
            # each variant: its launches (kernel, grid, arguments given the amax words, constexprs)
            args = (lambda b: (x, b, signs_r, signs_c, R, C))
            runs = {"strip": [(strip._strip_amax_kernel, g0, args, c0)]}

            def gluon(tile, mode, row_f32=False):
                grid, consts = ag.launch(R, C, rn_c, tile, f32, rht_mode=mode, rn_r=rn_r, row_f32=row_f32)
                return ag._amax_kernel, grid, args, consts

            two = ag.modes(rn_c, f32) == (1, 2)
            for tile in AMAX_TILES:
                if ag.applies(x, (rn_r, rn_c), tile):
                    runs[tile] = [gluon(tile, 0)]
                    if two:
                        runs[f"{tile} f32"] = [gluon(tile, 1), gluon(None, 2)]
                    if two and rn_r:
                        runs[f"{tile} row f32"] = [gluon(tile, 1, True), gluon(None, 2, True)]
            if ag.applies(x, (rn_r, rn_c)) and two:
                runs["f32 alone"] = [gluon(None, 1)]
            bits = {}
            for name, launches in runs.items():
                bits[name] = _run_amax(launches).tolist()
            exact = {k: v for k, v in bits.items() if k != "f32 alone" or v[2] <= v[1] and v[3] <= v[0]}
            RES["checks"].append(dict(what=f"amax pass {shape} {dtype} rht {rn_r},{rn_c}: gluon bits = strip's",
                                      ok=all(v[:2] == bits["strip"][:2] for v in exact.values())))
            times = {}
            for sample in range(ARGS.repeat):
                if left() < 10:
                    return
                for name, launches in runs.items():
                    b = torch.zeros(4, dtype=torch.int32, device=DEV)
                    times.setdefault(name, []).append(ms(lambda: _run_amax(launches, b)))
            med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            for k, t in med.items():
                gbs = R * C * x.element_size() / (t * 1e-3) / 1e9
                summary.append(dict(shape="x".join(map(str, shape)), dtype=str(dtype), rht=rn_c, row_rht=rn_r,
                                    variant=str(k), median_ms=t, samples_ms=times[k], vs_strip=t / med["strip"],
                                    read_gbs=gbs))
                log(f"amax pass {shape} {dtype} rht {rn_r},{rn_c} {k}: {t * 1e3:.1f} us ({gbs:.0f} GB/s), "
                    f"{t / med['strip']:.2f}x strip")
        del x
        save()


def _run_amax(launches, b=None):
    """An amax pass's launches in turn on the amax words b (fresh zeros if None): b."""
    b = torch.zeros(4, dtype=torch.int32, device=DEV) if b is None else b
    for fn, grid, args, consts in launches:
        launcher.run(fn, grid, args(b), consts)
    return b


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
            yield f"{name} [{route}]", copies, xhat, blk, (lambda fn=fn, route=route: on_route(route, fn))
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
