"""CPU codec benchmark: fourcast.quantize vs a numpy + ml_dtypes implementation of the
same rule, and a measured memcpy, on 16M float32 values in one run.

Writes benchmarks/results/cpu-codecs.json and cpu-codecs.md. Run after a release
build (`maturin develop --release`):

    python benchmarks/cpu_codecs.py [--rows 4096 --cols 4096 --repeats 5]

Throughput is input bytes (4 per value) divided by the best wall time of the
repeats. The numpy path is checked byte for byte against fourcast before timing,
so both sides compute the same thing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import fourcast as fc

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
RESULTS = Path(__file__).resolve().parent / "results"


def _pack(c: np.ndarray) -> np.ndarray:
    return (c[:, 0::2] & 0xF) | (c[:, 1::2] << 4)


def nvfp4_numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NVFP4, TE rule (numerics.md), block 16 along the last axis."""
    rows, cols = x.shape
    amax = np.abs(x).max()
    s_enc = F32(1) if amax == 0 else np.minimum(F32(2688) / amax, FLT_MAX)
    xb = x.reshape(rows, cols // 16, 16)
    bamax = np.abs(xb).max(axis=-1)
    s = (bamax * (s_enc * (F32(1) / F32(6)))).astype(ml_dtypes.float8_e4m3fn)
    with np.errstate(divide="ignore"):
        enc = np.minimum(F32(1) / (s.astype(F32) * (F32(1) / s_enc)), FLT_MAX)
    y = np.clip(xb * enc[..., None], F32(-6), F32(6))
    c = y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    return _pack(c), s.view(np.uint8)


def mxfp4_numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MXFP4, OCP floor rule, block 32 along the last axis."""
    rows, cols = x.shape
    xb = x.reshape(rows, cols // 32, 32)
    bamax = np.abs(xb).max(axis=-1)
    e = np.clip(((bamax.view(np.uint32) >> 23) & 0xFF).astype(np.int32) - 127 - 2, -127, 127)
    mult = np.ldexp(F32(1), -e).astype(F32)
    y = np.clip(xb * mult[..., None], F32(-6), F32(6))
    c = y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    return _pack(c), (e + 127).astype(np.uint8)


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up (page faults, pool start)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def single_thread_times(rows: int, cols: int, repeats: int) -> dict[str, float]:
    """fourcast with FOURCAST_THREADS=1, in a child process (the pool size is fixed at start)."""
    code = (
        "import json, numpy as np, fourcast as fc, sys; sys.path.insert(0, %r);"
        "from cpu_codecs import best_time;"
        "x = np.random.default_rng(0).standard_normal((%d, %d)).astype(np.float32);"
        "print(json.dumps({f: best_time(lambda: fc.quantize(x, f), %d) for f in ('nvfp4', 'mxfp4')}))"
    ) % (str(Path(__file__).parent), rows, cols, repeats)
    env = dict(os.environ, FOURCAST_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(F32)
    n_bytes = x.nbytes
    gbps = lambda t: n_bytes / t / 1e9  # noqa: E731

    dst = np.empty_like(x)
    t_copy = best_time(lambda: np.copyto(dst, x), args.repeats)

    rows = {}
    for name, ref in (("nvfp4", nvfp4_numpy), ("mxfp4", mxfp4_numpy)):
        q = fc.quantize(x, name)
        codes, scales = ref(x)
        if not (np.array_equal(q.codes, codes) and np.array_equal(q.scales, scales)):
            raise SystemExit(f"{name}: numpy reference and fourcast disagree; benchmark invalid")
        t_fc = best_time(lambda: fc.quantize(x, name), args.repeats)
        t_np = best_time(lambda: ref(x), max(2, args.repeats // 2))
        t_sr = best_time(lambda: fc.quantize(x, name, rounding="sr", seed=1), args.repeats)
        rows[name] = {
            "fourcast_s": t_fc,
            "fourcast_sr_s": t_sr,
            "numpy_s": t_np,
            "fourcast_gbps": gbps(t_fc),
            "fourcast_sr_gbps": gbps(t_sr),
            "numpy_gbps": gbps(t_np),
            "speedup_vs_numpy": t_np / t_fc,
            "fraction_of_memcpy": t_copy / t_fc,
        }
    single = single_thread_times(args.rows, args.cols, args.repeats)
    for name, t in single.items():
        rows[name]["fourcast_1thread_s"] = t
        rows[name]["fourcast_1thread_gbps"] = gbps(t)

    result = {
        "values": int(x.size),
        "input_bytes": int(n_bytes),
        "threads": fc._core.codec_threads(),
        "memcpy_s": t_copy,
        "memcpy_gbps": gbps(t_copy),
        "formats": rows,
        "machine": machine(),
        "versions": {
            "fourcast": fc.__version__,
            "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__,
        },
        "repeats": args.repeats,
        "timing": "best of repeats, wall clock, after one warm-up",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cpu-codecs.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "cpu-codecs.md").write_text(render(result))
    print(render(result))


def render(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# CPU codec benchmark (benchmarks/cpu_codecs.py)",
        "",
        f"{r['values']:,} float32 values ({r['input_bytes'] / 2**20:.0f} MiB), RTNE unless noted; "
        f"{r['timing']}. GB/s = input bytes / time.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared with other jobs: 1-minute load average "
        f"{m['load_average_1m']:.1f} at the end of the run, so absolute numbers are noisy and low), "
        f"{m['platform']}, Python {m['python']}.",
        f"Versions: fourcast {r['versions']['fourcast']} (release build), numpy {r['versions']['numpy']}, "
        f"ml_dtypes {r['versions']['ml_dtypes']}. fourcast threads: {r['threads']}.",
        "",
        f"Measured memcpy (np.copyto): {r['memcpy_s'] * 1e3:.1f} ms, {r['memcpy_gbps']:.2f} GB/s.",
        "",
        "| format | fourcast ms | GB/s | 1 thread ms | SR ms | numpy + ml_dtypes ms | GB/s | speedup | memcpy time / fourcast time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in r["formats"].items():
        lines.append(
            f"| {name} | {f['fourcast_s'] * 1e3:.1f} | {f['fourcast_gbps']:.2f} | "
            f"{f['fourcast_1thread_s'] * 1e3:.1f} | {f['fourcast_sr_s'] * 1e3:.1f} | "
            f"{f['numpy_s'] * 1e3:.1f} | {f['numpy_gbps']:.3f} | {f['speedup_vs_numpy']:.1f}x | "
            f"{f['fraction_of_memcpy']:.2f} |"
        )
    lines += [
        "",
        "The numpy path implements the same rule (nvfp4: TE two-level; mxfp4: OCP floor) and is "
        "checked byte for byte against fourcast before timing. Target: >= 10x the numpy path.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
