"""strip.py's row+col kernel: tiles, the SR streams, row tiles a program, taller tiles,
gathered column stores."""

from __future__ import annotations


import torch

from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

from kernel_bench.harness import ARGS, BIG, DEV, F, RES, SMOKE, left, log, ms, rand, save, section, time_quantizer


STRIP_TILES = ((16, 64, 1), (32, 64, 1))


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
