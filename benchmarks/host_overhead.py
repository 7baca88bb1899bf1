"""Host (Python) cost of one QLinear forward + backward on the CUDA code path, on a CPU.

The GPU step of a small model is host-bound: the time is the Python around each
kernel launch, plus the host-device synchronisations that stall the launch queue. This
benchmark measures the first and counts the second without a GPU:

- CPU tensors are made to look like CUDA tensors (`Tensor.is_cuda` -> True), so
  fourcast.kernels.ops takes its Triton path and runs every host-side line of it
  (argument checks, format parsing, RHT arguments, buffer allocation, launch set-up);
- the Triton kernels are replaced by no-ops (the launch itself is Triton's cost, the
  same before and after), and the bf16 GEMM by a CPU matmul of a tiny matrix;
- the shapes are tiny (128 tokens x 64 -> 64), so the torch work that remains is small
  and the time is dominated by the per-op Python.

It also counts, per forward+backward, the calls that synchronise a CUDA stream when the
tensor is on the GPU: Tensor.item / __bool__ / __float__ / __int__ / tolist, and
torch.tensor / torch.as_tensor built from Python data (a pageable host->device copy
when given a CUDA device).

    python benchmarks/host_overhead.py                 # nvfp4, 300 iterations
    python benchmarks/host_overhead.py --recipe mxfp4 --iters 500
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

import fourcast as fc
from fourcast import nn as fcnn

SYNC_METHODS = ("item", "__bool__", "__float__", "__int__", "tolist")


class _NoLaunch:
    """Stands in for a @triton.jit kernel: kernel[grid](...) does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def fake_cuda():
    """CPU tensors report is_cuda, the Triton kernels are no-ops, the GEMM runs on CPU."""
    from fourcast.kernels import gemm as gk
    from fourcast.kernels import quantize as qk
    from fourcast.kernels import strip as sk

    kernels = ((qk, "_quantize_kernel"), (qk, "_rowcol_kernel"), (qk, "_dequantize_kernel"), (sk, "_strip_kernel"),
               (sk, "_strip_amax_kernel"), (gk, "_epilogue_kernel"), (gk, "_alpha_kernel"))
    saved = {(mod, name): getattr(mod, name) for mod, name in kernels}
    saved[(qk, "_rowcol_gluon_for")] = qk._rowcol_gluon_for  # no device to ask: the strip route
    saved_mm = gk._mm_f32
    had_prop = "is_cuda" in torch.Tensor.__dict__
    old_prop = torch.Tensor.__dict__.get("is_cuda")
    try:
        for mod, name in kernels:
            setattr(mod, name, _NoLaunch())
        qk._rowcol_gluon_for = lambda x: None
        gk._mm_f32 = lambda a, b: torch.mm(a.float(), b.float())
        torch.Tensor.is_cuda = property(lambda self: True)
        yield
    finally:
        for (mod, name), k in saved.items():
            setattr(mod, name, k)
        gk._mm_f32 = saved_mm
        if had_prop:
            torch.Tensor.is_cuda = old_prop
        else:
            del torch.Tensor.is_cuda


@contextlib.contextmanager
def count_syncs(counts: dict):
    """Count the calls that would synchronise a CUDA stream (see the module doc)."""
    originals = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}
    orig_tensor, orig_as_tensor = torch.tensor, torch.as_tensor

    def wrap(name, fn):
        def inner(self, *a, **k):
            counts[name] = counts.get(name, 0) + 1
            return fn(self, *a, **k)

        return inner

    def wrap_new(name, fn):
        def inner(data, *a, **k):
            if not isinstance(data, torch.Tensor):
                counts[name] = counts.get(name, 0) + 1
            return fn(data, *a, **k)

        return inner

    try:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, wrap(name, fn))
        torch.tensor = wrap_new("torch.tensor(data)", orig_tensor)
        torch.as_tensor = wrap_new("torch.as_tensor(data)", orig_as_tensor)
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
        torch.tensor, torch.as_tensor = orig_tensor, orig_as_tensor


def make_layer(recipe: str, tokens: int = 128, features: int = 64, path: str = "fused"):
    layer = fcnn.QLinear(features, features, bias=False, recipe=fc.recipe(recipe), layer_id=3, name="bench",
                         gemm_path=path)
    layer.weight.data = layer.weight.data.to(torch.bfloat16)
    x = torch.randn(tokens, features, dtype=torch.bfloat16, requires_grad=True)
    gy = torch.randn(tokens, features, dtype=torch.bfloat16)
    return layer, x, gy


def step(layer, x, gy, i: int) -> None:
    layer.step = i
    y = layer(x)
    y.backward(gy)


def measure(recipe: str, iters: int, warmup: int = 20, path: str = "fused") -> dict:
    layer, x, gy = make_layer(recipe, path=path)
    with fake_cuda():
        for i in range(warmup):
            step(layer, x, gy, i)
        counts: dict = {}
        with count_syncs(counts):
            step(layer, x, gy, warmup)
        times = []
        for i in range(iters):
            t0 = time.perf_counter()
            step(layer, x, gy, warmup + 1 + i)
            times.append(time.perf_counter() - t0)
    return {
        "recipe": recipe,
        "median_us": statistics.median(times) * 1e6,
        "p10_us": sorted(times)[len(times) // 10] * 1e6,
        "sync_calls": counts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", action="append", help="recipe(s) to time (default nvfp4, mxfp4)")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--path", default="fused", help="QLinear gemm_path (training uses fused)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for recipe in args.recipe or ["nvfp4", "mxfp4"]:
        r = measure(recipe, args.iters, path=args.path)
        syncs = ", ".join(f"{k} {v}" for k, v in sorted(r["sync_calls"].items())) or "none"
        print(f"{recipe:8s} {args.path} fwd+bwd host time: median {r['median_us']:8.1f} us  p10 {r['p10_us']:8.1f} us"
              f"   sync-prone calls per fwd+bwd: {syncs}")


if __name__ == "__main__":
    main()
