"""One quantizer change timed across two installed wheels (session 28: the scale byte stores'
L2 policy in quantize.py's and strip.py's kernels): the calls those kernels serve, each as a
CUDA-graph replay, and a checksum of each call's bytes. Run once per wheel, in turns on one
machine; every run prints one JSON line (the checksums must agree between wheels; session 28's
runs drew x unseeded, so theirs do not compare).

    for w in a b a b; do pip install --no-deps --force-reinstall .devwheel/$w/*.whl
        python3 benchmarks/scale_l2_ab.py $w; done
"""

from __future__ import annotations

import json
import sys

import torch

from kernel_bench.harness import F, ms_graphed, on_route, output_tensors, rand
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref


def calls(x):
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


def checksum(out) -> int:
    """The sum of every output tensor's bytes as int64 words (a change that keeps the bits keeps it)."""
    total = 0
    for v in (t for p in (out if isinstance(out, tuple) else (out,)) for t in output_tensors(p)):
        b = v.contiguous().reshape(-1).view(torch.uint8).to(torch.int64)
        total += int(b.sum()) + 31 * int((b * (torch.arange(b.numel(), device=b.device) % 251)).sum())
    return total


def main() -> None:
    wheel = sys.argv[1] if len(sys.argv) > 1 else "?"
    rows = []
    for shape in ((8192, 8192), (16384, 4096)):
        torch.manual_seed(0)  # the same x under every wheel, so the checksums compare
        x = rand(shape)
        for name, fn in calls(x):
            t, out = ms_graphed(fn)
            rows.append(dict(call=name, shape="x".join(map(str, shape)), us=round(t * 1e3, 2), checksum=checksum(out)))
    print(json.dumps(dict(wheel=wheel, gpu=torch.cuda.get_device_name(), rows=rows)))


if __name__ == "__main__":
    main()
