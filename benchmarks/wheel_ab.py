"""One quantizer change timed across two installed wheels: a set of calls, each as a CUDA-graph
replay, and a checksum of each call's bytes. Run once per wheel, in turns on one machine; every
run prints one JSON line (the checksums must agree between wheels where the change keeps the bits;
session 28's runs drew x unseeded, so theirs do not compare). Sets: "scale_l2" (session 28: the
scale byte stores' L2 policy in quantize.py's and strip.py's kernels), "rht" (session 29: the
rotated calls of TE's and UFP4's recipes on rowcol_gluon), "ufp4_amax" (UFP4's calls measuring
their amax), "rht_amax" (those and TE's X and dY calls measuring theirs, session 31). KEY=VALUE
arguments set quantize.CONFIG_OVERRIDE entries for the run, so one wheel can time two routes in
turns (amax=strip: strip.py's amax pass; amax_row_rht_f32=True: the amax pass's row RHT in f32,
session 30).

    for w in a b a b; do pip install --no-deps --force-reinstall .devwheel/$w/*.whl
        python3 benchmarks/wheel_ab.py rht $w; done
    for i in 1 2; do python3 benchmarks/wheel_ab.py ufp4_amax gluon
        python3 benchmarks/wheel_ab.py ufp4_amax strip amax=strip
        python3 benchmarks/wheel_ab.py ufp4_amax rowf32 amax_row_rht_f32=True; done
"""

from __future__ import annotations

import json
import sys

import torch

from kernel_bench.harness import F, ms_graphed, on_route, output_tensors, parse_overrides, rand
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref


def scale_l2_calls(x):
    """(name, call): single-copy quantizers (quantize.py's kernel) and row+col calls pinned to
    strip.py's kernel."""
    nv, mx, ue = F["nvfp4"], F["mxfp4"], F["ue5m3"]
    amax = x.abs().amax().float()
    s16 = ref.rht_signs(16, "te").to(x.device)
    return (("row nvfp4 delayed", lambda: qk.quantize(x, nv, tensor_amax=amax)),
            ("row mxfp4 (fused amax)", lambda: qk.quantize(x, mx)),
            ("col nvfp4 RHT16", lambda: qk.quantize(x, nv, axis=0, rht=(16, s16), tensor_amax=amax)),
            ("row+col nvfp4 delayed [strip]", lambda: on_route("strip", lambda: qk.quantize_rowcol(
                x, nv, nv, "rtne", "rtne", 0, 0, None, None, amax, amax))),
            ("X ue5m3 [strip]", lambda: on_route("strip", lambda: ops.rowcol_operands(
                x, ue, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "packed")))),
            ("row+col nvfp4 SR16 delayed [strip]", lambda: on_route("strip", lambda: qk.quantize_rowcol(
                x, nv, nv, "sr16", "sr16", 1, 0, None, None, amax, amax))))


def _rotated(x, fmt, outputs, rounding="rtne", row_rht=False, amax=None):
    """An ops.rowcol_operands call on x with a column RHT of 16 (TE's signs) and, if row_rht, a
    row RHT of 16 (per-layer signs); amax None: measured by the amax pass."""
    s16 = (16, ref.rht_signs(16, "te").to(x.device))
    r16 = (16, ref.rht_signs(16, "per-layer", 5).to(x.device)) if row_rht else None
    return lambda: ops.rowcol_operands(x, fmt, rounding=rounding, seed=1, rht=r16, rht_col=s16, tensor_amax=amax,
                                       tensor_amax_col=amax, outputs=outputs)


def rht_calls(x):
    """(name, call): the row+col calls with an RHT of 16 (rowcol_gluon), amax given: TE's X call
    (a column RHT), TE's packed codes and dY call, and UFP4's X, W and dY calls (a row and a
    column RHT)."""
    nv, uf = F["nvfp4"], F["ufp4"]
    a = x.abs().amax().float()
    dec, pk = "decoded", "packed"
    return (("TE X: decoded row + packed col, col RHT16", _rotated(x, nv, (dec, pk), amax=a)),
            ("TE codes, col RHT16", _rotated(x, nv, (pk, pk), amax=a)),
            ("TE dY: col RHT16, SR16", _rotated(x, nv, (pk, pk), "sr16", amax=a)),
            ("UFP4 X: row + col RHT16", _rotated(x, uf, (dec, pk), row_rht=True, amax=a)),
            ("UFP4 W: row + col RHT16, both decoded", _rotated(x, uf, (dec, dec), row_rht=True, amax=a)),
            ("UFP4 dY: row + col RHT16, SR16", _rotated(x, uf, (dec, dec), "sr16", row_rht=True, amax=a)))


def ufp4_amax_calls(x):
    """(name, call): UFP4's X, W and dY calls (a row and a column RHT of 16) measuring their
    amax (the recipe's tensor scale refreshed every step): the amax pass, then the quantizer."""
    uf, dec = F["ufp4"], "decoded"
    return (("UFP4 X, amax measured", _rotated(x, uf, (dec, "packed"), row_rht=True)),
            ("UFP4 W, amax measured", _rotated(x, uf, (dec, dec), row_rht=True)),
            ("UFP4 dY, amax measured, SR16", _rotated(x, uf, (dec, dec), "sr16", row_rht=True)))


def rht_amax_calls(x):
    """(name, call): the rotated calls measuring their amax, TE's (a column RHT) and UFP4's (both):
    the amax pass's f32 butterflies (session 31: their last stage as |a| + |b|)."""
    nv = F["nvfp4"]
    return (("TE X, amax measured", _rotated(x, nv, ("decoded", "packed"))),
            ("TE dY, amax measured, SR16", _rotated(x, nv, ("packed", "packed"), "sr16"))) + ufp4_amax_calls(x)


SETS = {"scale_l2": scale_l2_calls, "rht": rht_calls, "ufp4_amax": ufp4_amax_calls, "rht_amax": rht_amax_calls}


def checksum(out) -> int:
    """The sum of every output tensor's bytes as int64 words (a change that keeps the bits keeps it)."""
    total = 0
    for v in (t for p in (out if isinstance(out, tuple) else (out,)) for t in output_tensors(p)):
        b = v.contiguous().reshape(-1).view(torch.uint8).to(torch.int64)
        total += int(b.sum()) + 31 * int((b * (torch.arange(b.numel(), device=b.device) % 251)).sum())
    return total


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in SETS:
        sys.exit(f"usage: wheel_ab.py SET [LABEL [KEY=VALUE ...]]; SET one of {', '.join(SETS)}")
    calls = SETS[sys.argv[1]]
    wheel = sys.argv[2] if len(sys.argv) > 2 else "?"
    overrides = parse_overrides(",".join(sys.argv[3:]))
    qk.CONFIG_OVERRIDE.update(overrides)
    rows = []
    for shape in ((8192, 8192), (16384, 4096)):
        torch.manual_seed(0)  # the same x under every wheel, so the checksums compare
        x = rand(shape)
        for name, fn in calls(x):
            t, out = ms_graphed(fn)
            rows.append(dict(call=name, shape="x".join(map(str, shape)), us=round(t * 1e3, 2), checksum=checksum(out)))
    print(json.dumps(dict(set=sys.argv[1], wheel=wheel, overrides={k: repr(v) for k, v in overrides.items()},
                          gpu=torch.cuda.get_device_name(), rows=rows)))


if __name__ == "__main__":
    main()
