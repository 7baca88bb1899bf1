"""The benchmark's shared state and helpers: the results written to $OUT, the time budget,
timing (do_bench median), sections, inputs, byte counts, the quantizer timer."""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import subprocess
import time
import traceback

import torch
from triton.testing import do_bench

from fourcast.kernels import quantize as qk
from fourcast.kernels import testing


F = testing.FORMATS
DEV = "cuda"
T0 = time.time()
RES: dict = {"meta": {}, "ceilings": {}, "quantizer": [], "peers": {}, "gemm": [], "gemm_fp8_exact": [], "qlinear": [],
             "linear": [], "checks": [], "errors": [], "notes": []}
# the command line; kernels.py main() fills it in place, so modules may import it by name
ARGS = argparse.Namespace(budget=240.0, only="", repeat=1, rowcol_pin=False, variants="", shapes="", list=False,
                          default_tiles=False, tiles="", interleave=0, quant_override="", recipes="",
                          profile_all_shapes=False)


def parse_overrides(text: str) -> dict:
    """'a=1,b=True,c=(64, 128, 8, 1)' -> {'a': 1, 'b': True, 'c': (64, 128, 8, 1)}
    (quantize.CONFIG_OVERRIDE entries; commas inside brackets belong to the value); a value that
    is no Python literal stays a string."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    out = {}
    for item in filter(str.strip, items):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out


def left() -> float:
    return ARGS.budget - (time.time() - T0)


def save():
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "kernels-h200.json"), "w") as fh:
        json.dump(RES, fh, indent=1, default=str)


SMOKE = os.environ.get("BENCH_SMOKE") == "1"  # CPU + TRITON_INTERPRET=1, tiny shapes: script bugs only
if SMOKE:
    DEV = "cpu"


def ms(fn, rep=100) -> float:
    if SMOKE:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


_FLUSH: dict = {}


def ms_clean(fn, rep=100) -> float:
    """do_bench's median with the L2 flushed clean. do_bench flushes it by zeroing 256 MB
    before each call, which leaves the L2 full of dirty lines that the timed call then writes
    back to DRAM beside its own bytes; here a read of 256 MB (a max) evicts the last call's
    outputs, their write-back before the timed region, and leaves clean lines."""
    if SMOKE:
        return ms(fn)
    buf = _FLUSH.setdefault("buf", torch.ones(1 << 26, device=DEV))  # 256 MB of f32
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        buf.amax()
        fn()
    torch.cuda.synchronize()
    n = max(5, int(rep / ((time.perf_counter() - t0) * 1e3 / 3)))
    times = []
    for _ in range(n):
        buf.amax()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return float(sorted(s.elapsed_time(e) for s, e in times)[n // 2])


def ms_graphed(fn, rep=100):
    """(do_bench's median of fn captured once in a CUDA graph and replayed, what the captured
    call returned after the last replay): the GPU's time with none of the host's (a call whose
    Python takes about as long as its kernels, ~100 us, otherwise times the host whenever it
    falls behind; training replays graphs too)."""
    if SMOKE:
        return ms(fn), fn()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm the allocations outside capture
        with torch.cuda.graph(graph, stream=stream):
            result = fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return ms(graph.replay, rep), result


def ms_steady(fn, calls=20, trials=7) -> float:
    """A call's time back to back with itself (no flush: each call writes back what the one
    before it left dirty, as in a steady stream of calls): median over trials of `calls` calls
    between two events, per call. Launched from Python: a call whose host work outlasts its GPU
    time shows the host's."""
    if SMOKE:
        return ms(fn)
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return float(sorted(times)[trials // 2])


def sm_clock():
    """The SM clock now (MHz), or None where neither pynvml nor nvidia-smi answers."""
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no pynvml: ask nvidia-smi
        try:
            got = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i",
                                  str(torch.cuda.current_device())], capture_output=True, text=True, timeout=10)
            return int(got.stdout.split()[0])
        except Exception:  # not recorded
            return None


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def section(name):
    def wrap(fn):
        @functools.wraps(fn)
        def run():
            if left() < 20:
                RES["errors"].append(f"{name}: skipped, budget exhausted")
                log("SKIP", name)
                return
            log("==", name)
            try:
                fn()
            except Exception as exc:  # keep going: one broken variant must not hide the rest
                RES["errors"].append(f"{name}: {exc!r}")
                traceback.print_exc()
            save()
        return run
    return wrap


def rand(shape, dtype=torch.bfloat16):
    return torch.randn(shape, device=DEV, dtype=torch.float32).to(dtype)


GEMM_SHAPES = [(8192, 8192, 8192), (8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336)]
if SMOKE:
    GEMM_SHAPES = [(64, 64, 128), (32, 48, 128)]  # K: one step of the deepest tile (128)


# the quantizer sections' shapes (the issue's); --shapes replaces them in place
QSIZES = [(8192, 8192), (16384, 4096)] if not SMOKE else [(64, 64)]
BIG = (8192, 8192) if not SMOKE else (64, 64)


def qbytes(r, c, spec_block, copies=1, xhat=False, src_bytes=2):
    """Fewest bytes: read the input once (bf16; src_bytes 4: f32); write per copy 0.5 B codes +
    1/block B scales (or 2 B x_hat). copies = (decoded, packed) counts when a call writes one of
    each (xhat None)."""
    if isinstance(copies, tuple):
        return r * c * (src_bytes + copies[0] * 2.0 + copies[1] * (0.5 + 1.0 / spec_block))
    per = 2.0 if xhat else 0.5 + 1.0 / spec_block
    return r * c * (src_bytes + copies * per)


def on_route(route, fn):
    """fn() with quantize_rowcol pinned to one kernel: "strip" or "transpose" ("gluon": the
    default route, rowcol_gluon.py where it applies)."""
    qk.CONFIG_OVERRIDE["rowcol"] = route
    try:
        return fn()
    finally:
        qk.CONFIG_OVERRIDE.pop("rowcol", None)


def output_tensors(p) -> list:
    """The tensor fields of a Packed (a dataclass) or Decoded (a NamedTuple) output, in order."""
    return [v for v in (p._asdict() if hasattr(p, "_asdict") else vars(p)).values() if isinstance(v, torch.Tensor)]


def same_tensors(got, want) -> bool:
    """Every tensor field of two tuples of Packed / Decoded outputs equal byte for byte."""
    def raw(t):
        return t.reshape(-1).view(torch.uint8)

    return all(len(output_tensors(g)) == len(output_tensors(w)) and all(
        torch.equal(raw(u), raw(v)) for u, v in zip(output_tensors(g), output_tensors(w))) for g, w in zip(got, want))
def time_quantizer(label: str, shape, copies, xhat, fn, src_bytes=2, **fields) -> float:
    """Time one quantizer call (do_bench median), record it in RES["quantizer"] with its
    fraction of copy bandwidth (qbytes: the input read once, codes or x_hat written);
    an exception is recorded as an error and gives inf."""
    try:
        fn()
        t = ms(fn)
    except Exception as exc:
        RES["errors"].append(f"{label}: {exc!r}")
        return float("inf")
    frac = qbytes(*shape, 16, copies, xhat, src_bytes) / (t * 1e-3) / 1e12 / RES["ceilings"].get("copy_tbps", 4.27)
    RES["quantizer"].append(dict(variant=label, shape="x".join(map(str, shape)), ms=t, frac_copy=frac, **fields))
    log(f"{label} {tuple(shape)}: {t * 1e3:.1f} us {frac:.0%} of copy")
    return t
