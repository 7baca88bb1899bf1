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
  ],
  # CUDA: one further step under torch.profiler (pick_timeline_step; FOURCAST_TIMELINE_STEP=N)
  "gpu_time": {"step": N, "busy_ms": .., "outside_regions_ms": ..,  # GPU work launched outside every op
               "by_gpu_span_ms": .., "kernel_ms_by_class": {..}},
  "gpu_ops": [...]                          # step N's ops, schema of "ops", timing fields in
}                                           #  GPU time: the kernels/copies each op launched
High-precision (nn.Linear) layers have role "fprop" and one "dgrad+wgrad" region (both
backward GEMMs, each 2*M*N*K flops) with a = b = "bf16" and path "torch"; a quantize op
whose "operand" is "fprop.x+wgrad.x" (or "dgrad.dy+wgrad.dy") made both copies of the
tensor in one pass (its "fmt"/"amax" fields are "+"-joined the same way, and "outputs", from
run 18 on, says what each copy wrote: "decoded" bf16 values or "packed" codes and scales).
A quantize op covers its fused RHT, stochastic rounding and amax (the flags say which
ran; "amax": "given" means the stored tensor amax was used and no amax pass ran).
CUDA-event spans hold every wait of the GPU inside a region (for the host, on a slow host:
run 8's 125M ue5m3 quantize ops span 50 ms on one machine and 74 on another for 53 ms of
GPU time); "gpu_ops" do not, so the hardware model is checked against them.
"dequantize" ops exist only because Hopper has no FP4 MMA (emulation cost); on native
hardware the GEMM consumes the packed operands. Communication has no region: under DDP
the gradient all-reduce overlaps the backward and its time is in "other"; a timeline
step's "kernel_ms_by_class" names its GPU time ("communication": the NCCL kernels).
"""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
import math
import pathlib
import statistics
import tempfile
import time
from typing import Any

import torch

from fourcast import nn as fcnn

SCHEMA = "fourcast.profile/1"


def sampled_steps(start: int, steps: int, k: int) -> list[int]:
    """k steps spread over [start + warm-up, steps), warm-up = 3 steps when possible."""
    if k <= 0 or steps <= start:
        return []
    first = min(start + 3, steps - 1)
    span = steps - first
    k = min(k, span)
    return sorted({first + (i * span) // k for i in range(k)})


def region_key(kind: str, meta: dict) -> str:
    """The one identity of a traced region: profile ops and timeline regions share it."""
    return json.dumps({"kind": kind, **meta}, sort_keys=True, default=str)


class _Regions:
    """What both tracers share: fourcast.nn's regions (nn.set_tracer) plus hooks that
    trace the nn.Linear layers left in high precision."""

    def __init__(self) -> None:
        self._handles: list = []

    def begin(self, kind: str, meta: dict) -> Any:
        raise NotImplementedError

    def end(self, token: Any) -> None:
        raise NotImplementedError

    def attach(self, model: torch.nn.Module | None) -> None:
        fcnn.set_tracer(self)
        if model is not None:
            self._hook_plain_linears(model)

    def detach(self) -> None:
        fcnn.set_tracer(None)
        for h in self._handles:
            h.remove()
        self._handles = []

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


class Profiler(_Regions):
    """The tracer that fourcast.nn's regions report to (nn.set_tracer): CUDA events."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.cuda = device.type == "cuda"
        self.device = device
        self._done: list[tuple[str, dict, Any, Any]] = []
        self.per_step: list[dict[str, Any]] = []

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
        self.attach(model)

    def stop_step(self, step: int, step_time_ms: float) -> None:
        self.detach()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        ops: dict[str, dict] = {}
        for kind, meta, a, b in self._done:
            ms = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
            key = region_key(kind, meta)
            slot = ops.setdefault(key, {"calls": 0, "ms": 0.0})
            slot["calls"] += 1
            slot["ms"] += ms
        self.per_step.append({"step": step, "step_time_ms": step_time_ms, "ops": ops})
        self._done = []

    def report(self, *, unprofiled_ms: float | None, context: dict, timeline: dict | None = None) -> dict:
        """The profile; `timeline` (a Timeline summary of another step of the run) adds that
        step's ops with their GPU time ("gpu_ops", see `gpu_times`)."""
        n = len(self.per_step)
        merged: dict[str, dict] = {}
        for rec in self.per_step:
            for key, slot in rec["ops"].items():
                m = merged.setdefault(key, {"calls": 0, "ms": 0.0})
                m["calls"] += slot["calls"]
                m["ms"] += slot["ms"]
        by_key: dict[str, dict] = {}
        classes: dict[str, float] = {}
        for key, m in merged.items():
            entry = by_key[key] = json.loads(key)
            entry.update(
                calls_per_step=m["calls"] / n,
                ms_per_call=m["ms"] / m["calls"],
                ms_per_step=m["ms"] / n,
            )
            classes[entry["kind"]] = classes.get(entry["kind"], 0.0) + entry["ms_per_step"]
        profiled = statistics.median(r["step_time_ms"] for r in self.per_step) if n else None
        if profiled is not None:
            mean_step = statistics.fmean(r["step_time_ms"] for r in self.per_step)
            classes["other"] = max(0.0, mean_step - sum(classes.values()))
        ops = sorted(by_key.values(), key=lambda e: -e["ms_per_step"])
        return {
            "schema": SCHEMA,
            "timer": "cuda-events" if self.cuda else "perf_counter",
            **context,
            "steps": [r["step"] for r in self.per_step],
            "step_time_ms": {"profiled": profiled, "unprofiled": unprofiled_ms},
            "overhead": (profiled / unprofiled_ms - 1) if profiled and unprofiled_ms else None,
            "classes": classes,
            "ops": ops,
            **(gpu_times(timeline) if timeline else {}),
        }


def gpu_times(timeline: dict) -> dict[str, Any]:
    """The profile's fields from a timeline step: "gpu_ops", that step's ops in the schema
    of "ops" with the timing fields holding GPU time (kernels, copies and memsets the op
    launched; no host waits), and "gpu_time", how the step went. A step of its own: its
    ops may differ from the sampled steps' (a tensor-amax refresh, say), so the model is
    checked on the ops that ran in it."""
    regions = dict(timeline.get("regions", {}))
    outside = regions.pop("(unattributed)", {"gpu_ms": 0.0})
    ops = [{**json.loads(key), "calls_per_step": float(r["calls"]), "ms_per_call": r["gpu_ms"] / r["calls"],
            "ms_per_step": r["gpu_ms"]} for key, r in regions.items() if r["calls"]]
    return {"gpu_time": {"step": timeline.get("step"), "busy_ms": timeline.get("gpu_busy_ms"),
                         "outside_regions_ms": outside["gpu_ms"], "by_gpu_span_ms": outside.get("by_gpu_span_ms", 0.0),
                         "kernel_ms_by_class": timeline.get("kernel_ms_by_class")},
            "gpu_ops": sorted(ops, key=lambda e: -e["ms_per_step"])}


# ---------------------------------------------------------------- GPU timeline
TIMELINE_ENV = "FOURCAST_TIMELINE_STEP"


def pick_timeline_step(env: str | None, start: int, steps: int, profile_at: set[int]) -> int:
    """The step a CUDA run traces for its ops' GPU time (-1: none). FOURCAST_TIMELINE_STEP
    picks it ("off" or -1: none); unset, a profiled run traces the middle one of its steps
    past warm-up that the CUDA-event profile does not sample (one tracer per step)."""
    if env is not None:
        step = -1 if env.strip().lower() in ("off", "-1", "") else int(env)
        profile_at.discard(step)
        return step
    free = [s for s in range(start + 3, steps) if s not in profile_at] if profile_at else []
    return free[len(free) // 2] if free else -1
# The profile's classes: the emulated GEMM's scale epilogue is part of its GEMM region; "_amax_kernel"
# names both amax passes (strip.py's _strip_amax_kernel, rowcol_gluon's).
KERNEL_CLASSES = (("dequantize", ("_dequantize_kernel",)),
                  ("quantize", ("_strip_kernel", "_amax_kernel", "_quantize_kernel", "_rowcol_kernel")),
                  ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "_split_kernel", "_epilogue_kernel")),
                  ("attention", ("flash", "fmha", "attention", "sdpa")),
                  ("communication", ("nccl",)))


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


REGION_PREFIX = "fc:"  # a timeline region's record_function name: the prefix, kind, layer, number
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # chrome-trace categories of GPU work
LAUNCHES = ("cuda_runtime", "cuda_driver")  # host calls that enqueue it (Triton: cuLaunchKernelEx)


class _Ranges:
    """Time ranges [start, end] with a label; `innermost(t)` is the label of the
    latest-starting range still open at t (None when no range holds t)."""

    def __init__(self, ranges: list[tuple[float, float, str]]) -> None:
        self.ranges = sorted(ranges)
        self.starts = [r[0] for r in self.ranges]
        self.reach = list(itertools.accumulate((r[1] for r in self.ranges), max))

    def innermost(self, t: float) -> str | None:
        i = bisect.bisect_right(self.starts, t) - 1
        while i >= 0 and self.reach[i] >= t:  # no earlier range reaches t: stop
            if self.ranges[i][1] >= t:
                return self.ranges[i][2]
            i -= 1
        return None


def region_gpu_times(trace: dict, keys: dict[str, str]) -> dict[str, dict]:
    """GPU time of each traced region of one step, from torch.profiler's chrome trace:
    every kernel, copy and memset is followed through its correlation id to the host call
    that launched it, and counted for the innermost fourcast region open on that thread at
    that moment. Unlike a CUDA-event pair around the region this holds no host waits.
    GPU work whose launch call the trace lacks goes to the region whose GPU-side mirror
    holds its midpoint ("by_gpu_span_ms" says how much). Returns {region key: {"calls",
    "gpu_ms"}} plus "(unattributed)" for GPU work launched outside every region (norms,
    activations, the loss, ...). `keys` maps each region's trace name to its region key
    (the trace rewrites quotes in names, so keys stay out of them)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    launch_at = {e["args"]["correlation"]: (e.get("tid"), float(e["ts"])) for e in events
                 if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})}
    host: dict[Any, list] = {}
    mirrors: list[tuple[float, float, str]] = []
    regions: dict[str, dict] = {}
    for e in events:
        key = keys.get(e["name"])
        if key is None:
            continue
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]), key)
        if e.get("cat") == "user_annotation":
            host.setdefault(e.get("tid"), []).append(span)
            regions.setdefault(key, {"calls": 0, "gpu_ms": 0.0})["calls"] += 1
        elif e.get("cat") == "gpu_user_annotation":
            mirrors.append(span)
    on_host = {tid: _Ranges(r) for tid, r in host.items()}
    on_gpu = _Ranges(mirrors)
    outside = {"calls": 0, "gpu_ms": 0.0, "by_gpu_span_ms": 0.0}
    for e in events:
        if e.get("cat") not in GPU_WORK:
            continue
        ms = float(e["dur"]) / 1e3
        launch = launch_at.get(e.get("args", {}).get("correlation"))
        if launch is not None:
            ranges = on_host.get(launch[0])
            key = ranges.innermost(launch[1]) if ranges else None
        else:
            key = on_gpu.innermost(float(e["ts"]) + float(e["dur"]) / 2)
            outside["by_gpu_span_ms"] += ms if key is not None else 0.0
        slot = regions[key] if key is not None else outside
        slot["gpu_ms"] += ms
        outside["calls"] += key is None
    return {**regions, "(unattributed)": outside}


class Timeline(_Regions):
    """One step under torch.profiler (`pick_timeline_step` says which), summarised to
    run_dir/timeline.json by `timeline_summary`, with every fourcast region's GPU kernel
    time (`region_gpu_times`: the profile's ops, timed without host waits). Diagnostic: the
    profiler adds host time, so the step's wall time is not a timing sample; kernel times
    are unaffected."""

    def __init__(self, model: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.model = model
        self.prof = None
        self.names: dict[str, str] = {}  # region key -> its record_function name

    def begin(self, kind: str, meta: dict) -> Any:
        key = region_key(kind, meta)
        name = self.names.setdefault(key, f"{REGION_PREFIX}{kind}:{meta.get('layer', '')}:{len(self.names)}")
        rf = torch.autograd.profiler.record_function(name)
        rf.__enter__()
        return rf

    def end(self, token: Any) -> None:
        token.__exit__(None, None, None)

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()
        self.attach(self.model)

    def stop(self, wall_ms: float, trace_path: pathlib.Path | None = None) -> dict[str, Any]:
        """The summary; the step's chrome trace (for Perfetto / chrome://tracing) is kept
        gzipped at `trace_path` when given."""
        self.detach()
        self.prof.__exit__(None, None, None)
        with tempfile.TemporaryDirectory() as tmp:
            raw = pathlib.Path(tmp) / "trace.json"
            self.prof.export_chrome_trace(str(raw))
            text = raw.read_text()
        if trace_path is not None:
            with gzip.open(trace_path, "wt") as f:
                f.write(text)
        trace = json.loads(text)
        # The trace's GPU work, not prof.events(): that view of torch 2.11 drops kernels
        # (H200, 125M ue5m3 step: 1,807 of the trace's 2,075 kernels, 134 of 185 ms).
        work = [(e["name"], float(e["ts"]), float(e["dur"])) for e in trace.get("traceEvents", [])
                if e.get("ph") == "X" and e.get("cat") in GPU_WORK]
        return {**timeline_summary(work, wall_ms), "regions": region_gpu_times(trace, {n: k for k, n in self.names.items()}),
                "trace_names": self.names}
