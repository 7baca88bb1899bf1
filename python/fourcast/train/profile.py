"""Per-op timing of a few sampled training steps, written to run_dir/profile.json for
the throughput projection (`fourcast project`). On CUDA every region is bracketed by
CUDA events (read after the step, so the GPU queue is not drained per op); on the CPU
by perf_counter (useful for tests and the schema; not a CPU performance model).

Schema "fourcast.profile/1":
{
  "schema": "fourcast.profile/1",
  "device": "cuda:0", "gpu": "NVIDIA H200" | null, "timer": "cuda-events" | "perf_counter",
  "recipe": "nvfp4", "gemm_path": "dequant", "model": {...ModelConfig...},
  "batch": 8, "seq": 1024, "tokens_per_step": 8192, "world_size": 1,
  "steps": [12, 40, 68],                    # the profiled steps (0-based step index)
  "step_time_ms": {"profiled": 81.2,        # median over profiled steps
                   "unprofiled": 80.1},     # median over the run's other steps (warm-up skipped)
  "overhead": 0.0137,                       # profiled / unprofiled - 1
  "classes": {                              # ms per step, mean over profiled steps
     "gemm": .., "quantize": .., "dequantize": .., "attention": .., "optimizer": ..,
     "other": ..                            # step time minus every region (norms, SwiGLU,
  },                                        #  RoPE, loss, embedding, Python, launch gaps)
  "ops": [                                  # one entry per distinct op (same kind and shape)
    {"kind": "gemm", "role": "fprop"|"dgrad"|"wgrad"|"dgrad+wgrad", "layer": "blocks.0.attn.wqkv",
     "M": 8192, "N": 2304, "K": 768,       # C[M,N] = A[M,K] . B[N,K]^T, K = reduction dim
     "a": "e2m1/e4m3x16", "b": "e2m1/e4m3x16x16",   # operand formats ("bf16" = not quantized)
     "rht": 16, "path": "dequant", "calls_per_step": 1, "ms_per_call": 0.05, "ms_per_step": 0.05},
    {"kind": "quantize", "layer": .., "operand": "wgrad.x", "rows": 768, "cols": 8192,
     "fmt": "e2m1/e4m3x16", "rht": 16, "sr": false, "amax": "measured"|"given",
     "bytes_in": 12582912, "bytes_out": 3538944, "fake": false, ...timing fields},
    {"kind": "dequantize", "layer": .., "gemm": "fprop", "emulation": true, ...timing},
    {"kind": "attention", "phase": "fwd"|"bwd", "B": 8, "H": 12, "T": 1024, "D": 64, ...timing},
    {"kind": "optimizer", "params": 124000000, ...timing}
  ]
}
High-precision (nn.Linear) layers have role "fprop" and one "dgrad+wgrad" region (both
backward GEMMs, each 2*M*N*K flops) with a = b = "bf16" and path "torch"; a quantize op
whose "operand" is "fprop.x+wgrad.x" (or "dgrad.dy+wgrad.dy") made both copies of the
tensor in one pass (its "fmt"/"amax" fields are "+"-joined the same way).
A quantize op covers its fused RHT, stochastic rounding and amax (the flags say which
ran; "amax": "given" means the stored tensor amax was used and no amax pass ran).
"dequantize" ops exist only because Hopper has no FP4 MMA (emulation cost); on native
hardware the GEMM consumes the packed operands. Communication is not separated: under
DDP the gradient all-reduce overlaps the backward and shows up in "other".
"""

from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any

import torch

from fourcast import nn as fcnn

SCHEMA = "fourcast.profile/1"
TIMING_KEYS = ("calls_per_step", "ms_per_call", "ms_per_step")


def sampled_steps(start: int, steps: int, k: int) -> list[int]:
    """k steps spread over [start + warm-up, steps), warm-up = 3 steps when possible."""
    if k <= 0 or steps <= start:
        return []
    first = min(start + 3, steps - 1)
    span = steps - first
    k = min(k, span)
    return sorted({first + (i * span) // k for i in range(k)})


class Profiler:
    """The tracer that fourcast.nn's regions report to (nn.set_tracer)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self._open: list[tuple[str, dict, Any]] = []
        self._done: list[tuple[str, dict, Any, Any]] = []
        self.per_step: list[dict[str, Any]] = []
        self._handles: list = []

    def _hook_plain_linears(self, model: torch.nn.Module) -> None:
        """Time the nn.Linear layers left in high precision: Fprop in the forward,
        Dgrad and Wgrad together in the backward (one region, role "dgrad+wgrad")."""
        for name, m in model.named_modules():
            if not isinstance(m, torch.nn.Linear) or isinstance(m, fcnn.QLinear):
                continue
            name = name.removeprefix("module.")

            def pre(mod, args, name=name):
                x = args[0]
                shape = dict(layer=name, M=x.numel() // mod.in_features, N=mod.out_features, K=mod.in_features,
                             a="bf16", b="bf16", rht=0, path="torch")
                mod._fc_region = fcnn.BackwardRegion("gemm", role="dgrad+wgrad", **shape)
                x = mod._fc_region.inputs(x)
                mod._fc_token = self.begin("gemm", dict(role="fprop", **shape))
                return (x, *args[1:])

            def post(mod, args, out):
                self.end(mod._fc_token)
                return mod._fc_region.output(out)

            self._handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]

    def _stamp(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def begin(self, kind: str, meta: dict) -> tuple:
        return (kind, dict(meta), self._stamp())

    def end(self, token: tuple) -> None:
        kind, meta, start = token
        self._done.append((kind, meta, start, self._stamp()))

    def start_step(self, model: torch.nn.Module | None = None) -> None:
        self._done = []
        fcnn.set_tracer(self)
        if model is not None:
            self._hook_plain_linears(model)

    def stop_step(self, step: int, step_time_ms: float) -> None:
        fcnn.set_tracer(None)
        for h in self._handles:
            h.remove()
        self._handles = []
        if self.cuda:
            torch.cuda.synchronize(self.device)
        ops: dict[str, dict] = {}
        for kind, meta, a, b in self._done:
            ms = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
            key = json.dumps({"kind": kind, **meta}, sort_keys=True, default=str)
            slot = ops.setdefault(key, {"calls": 0, "ms": 0.0})
            slot["calls"] += 1
            slot["ms"] += ms
        self.per_step.append({"step": step, "step_time_ms": step_time_ms, "ops": ops})
        self._done = []

    def report(self, *, unprofiled_ms: float | None, context: dict) -> dict:
        n = len(self.per_step)
        merged: dict[str, dict] = {}
        for rec in self.per_step:
            for key, slot in rec["ops"].items():
                m = merged.setdefault(key, {"calls": 0, "ms": 0.0})
                m["calls"] += slot["calls"]
                m["ms"] += slot["ms"]
        ops = []
        classes: dict[str, float] = {}
        for key, m in merged.items():
            entry = json.loads(key)
            entry.update(
                calls_per_step=m["calls"] / n,
                ms_per_call=m["ms"] / m["calls"],
                ms_per_step=m["ms"] / n,
            )
            ops.append(entry)
            classes[entry["kind"]] = classes.get(entry["kind"], 0.0) + entry["ms_per_step"]
        profiled = statistics.median(r["step_time_ms"] for r in self.per_step) if n else None
        if profiled is not None:
            mean_step = statistics.fmean(r["step_time_ms"] for r in self.per_step)
            classes["other"] = max(0.0, mean_step - sum(classes.values()))
        ops.sort(key=lambda e: -e["ms_per_step"])
        return {
            "schema": SCHEMA,
            "timer": "cuda-events" if self.cuda else "perf_counter",
            **context,
            "steps": [r["step"] for r in self.per_step],
            "step_time_ms": {"profiled": profiled, "unprofiled": unprofiled_ms},
            "overhead": (profiled / unprofiled_ms - 1) if profiled and unprofiled_ms else None,
            "classes": classes,
            "ops": ops,
        }


# ---------------------------------------------------------------- GPU timeline
TIMELINE_ENV = "FOURCAST_TIMELINE_STEP"
# The profile's classes: the emulated GEMM's scale epilogue is part of its GEMM region.
KERNEL_CLASSES = (("dequantize", ("_dequantize_kernel",)),
                  ("quantize", ("_strip_kernel", "_quantize_kernel", "_rowcol_kernel")),
                  ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "_split_kernel", "_epilogue_kernel")),
                  ("attention", ("flash", "fmha", "attention")))


def kernel_class(name: str) -> str:
    low = name.lower()
    return next((c for c, keys in KERNEL_CLASSES if any(k.lower() in low for k in keys)), "other")


def timeline_summary(kernels: list[tuple[str, float, float]], wall_ms: float) -> dict[str, Any]:
    """How busy the GPU was during one step: kernels are (name, start_us, dur_us) from a
    torch.profiler trace. busy_ms is the union of kernel intervals; idle_ms = wall - busy
    is time the GPU waited (for the host, or on a sync): the part of the CUDA-event
    profile's op times that is not GPU work."""
    busy, end = 0.0, -math.inf
    for s, e in sorted((s, s + d) for _, s, d in kernels):
        if e > end:  # the part of [s, e] past everything counted so far
            busy += e - max(s, end)
            end = e
    by_class: dict[str, float] = {}
    by_name: dict[str, list[float]] = {}
    for name, _, d in kernels:
        cls = kernel_class(name)
        by_class[cls] = by_class.get(cls, 0.0) + d / 1e3
        agg = by_name.setdefault(name[:80], [0, 0.0])
        agg[0] += 1
        agg[1] += d / 1e3
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:20]
    return {"wall_ms": wall_ms, "gpu_busy_ms": busy / 1e3, "gpu_idle_ms": wall_ms - busy / 1e3,
            "kernels": len(kernels), "kernel_ms_by_class": by_class,
            "top_kernels": [{"name": n, "calls": c, "ms": ms} for n, (c, ms) in top]}


class Timeline:
    """One step under torch.profiler (CUDA only; FOURCAST_TIMELINE_STEP=N picks step N),
    summarised to run_dir/timeline.json by `timeline_summary`. Diagnostic: the profiler
    itself adds host time, so the step it records is not a timing sample."""

    def __init__(self) -> None:
        self.prof = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        self.prof.__enter__()

    def stop(self, wall_ms: float) -> dict[str, Any]:
        self.prof.__exit__(None, None, None)
        # GPU-side events, less the ranges record_function mirrors onto the GPU timeline
        # (e.g. "Optimizer.step#AdamW.step"): those are not work
        kernels = [(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in self.prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
                   and "#" not in e.name]
        return timeline_summary(kernels, wall_ms)
