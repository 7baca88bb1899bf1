"""Fit the H200 terms that explain the profiled training runs (RUNS/<recipe>/profile.json;
default training-h200-run5: session 3's kernels, fused projections) with an honest fit / hold-out
split, and print per-recipe class errors; --check-runs prices another run folder's
profiles with the fitted terms (a second model size and attention shape: all held out).

- attention: `efficiency.attention_tile_cycles` (fixed cycles per flash-attention tile, the
  small-shape term of rust/core/src/hw/attention.rs), fitted on every run's attention ops
  (all runs of one folder share one shape: the other folder's shape is the check).
- gemm: `emulation.torch_eager_call_us` (fixed cost of one eager GEMM call as the CUDA
  events time it), fitted on the BF16 run's GEMMs only; the FP4 runs' GEMMs are held out.
  The kernels run at `emulation.torch_eager_gemm_clock_ghz`, not fitted: the H200's max
  boost clock (datasheet), since a training step leaves the power headroom that the
  isolated back-to-back calibration GEMMs (fit.py, at the 1.83 GHz the rates refer to)
  do not. The script prints the clock that alone would close the BF16 GEMM class, as
  the check of that reading.
- quantize: `emulation.triton_quant_*` (fourcast's Triton quantizers: per call, per element
  written, per rotated element in calls with SR (split / transposing kernels) and in calls
  without (the strip kernel), per stochastically rounded element), least squares weighted
  by calls, on the quantize ops of QUANT_FIT; QUANT_HELD_OUT are predicted, not fitted.

--measure gpu fits and checks against GPU time: the profile's "gpu_ops" (the ops of the
timeline step, each with the GPU time of the kernels it launched; runs recorded with
FOURCAST_TIMELINE_STEP) instead of the sampled steps' CUDA-event spans, which also hold the
time the GPU waited for the host.

    python benchmarks/calibration/fit_emulation.py [--runs DIR] [--check-runs DIR...] [--measure gpu] [--write]
"""

from __future__ import annotations

import argparse
import pathlib
import re

import numpy as np

from fourcast import hw as fchw
from fourcast import project as P

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks/results/training-h200-run5"
RECIPES = ("bf16", "ue5m3", "nvfp4", "mxfp4", "ufp4")
MEASURE = "events"  # or "gpu"
GEMM_FIT = ("bf16",)
QUANT_FIT = ("nvfp4", "mxfp4", "ue5m3")
QUANT_HELD_OUT = ("ufp4",)
ATTN_FIT = RECIPES


def run_dir(recipe: str) -> pathlib.Path:
    """A run of --runs by recipe name, or any run folder given as a path relative to
    benchmarks/results ("training-h200-run11/125m/mxfp4+sr4")."""
    return ROOT / "benchmarks/results" / recipe if "/" in recipe else RUNS / recipe


def profile(recipe: str) -> dict:
    prof = P.load_profile(run_dir(recipe))
    if MEASURE == "events":
        return prof
    if not prof.get("gpu_ops"):
        raise SystemExit(f"{run_dir(recipe)}: no GPU times (record runs with FOURCAST_TIMELINE_STEP)")
    return {**prof, "ops": prof["gpu_ops"], "classes": P.class_ms(prof["gpu_ops"])}


QUANT_TERMS = ("triton_quant_call_us", "triton_quant_ns_per_elem", "triton_quant_rht_ns_per_elem",
               "triton_quant_strip_rht_ns_per_elem", "triton_quant_sr_ns_per_elem", "triton_quant_sr4_ns_per_elem",
               "triton_quant_sr16_ns_per_elem", "triton_quant_amax_ns_per_elem",
               "triton_quant_amax_tile_ns")  # quant_features' columns


def quant_features(q: dict) -> list[float]:
    """[1, elements written, rotated with SR, rotated without SR (strip kernel), rounded "sr",
    rounded "sr4", rounded "sr16", amax-pass elements, in-kernel amax programs] of a quantize
    op, as Rust counts them (the amax pass: refresh 1 and a format with a tensor scale; in-kernel
    amax: formats without one, two atomics per strip program, ops.rs in_kernel_amax_programs)."""
    n = float(q["numel"])
    copies = [2.0 if o["transposed_copy"] else 1.0 for o in q["outputs"]]
    rotated = n * sum(c for c, o in zip(copies, q["outputs"]) if o["rht"] > 0)

    def rounded(group: int) -> float:
        return n * sum(c for c, o in zip(copies, q["outputs"])
                       if o.get("sr") and (16 if o.get("sr16") else 4 if o.get("sr4") else 1) == group)

    sr, sr4, sr16 = rounded(1), rounded(4), rounded(16)
    strip = sr + sr4 + sr16 == 0
    measures = q.get("refresh", 1) == 1 and any(o["format"]["scale"] in ("e4m3", "ue5m3", "fp32") for o in q["outputs"])
    outs = q["outputs"]
    single = all(o["format"].get("block") and o["format"]["scale"] not in ("e4m3", "ue5m3", "fp32") for o in outs)
    programs = 0.0
    if single and q.get("refresh", 1) == 1:  # given, or recorded by nobody ("none"): no atomics
        block = max(o["format"]["block"] for o in outs)
        rows = max(block, 16, *(o["rht"] for o in outs[1:]))
        tiles = n / (rows * max(64 if strip else 32, outs[0]["rht"]))
        iters = 4.0 if rows == 16 and not any(o["rht"] for o in outs) else 1.0  # strip.strip_iters
        while iters > 1 and tiles // iters < 4096:
            iters /= 2
        programs = tiles / iters
    return [1.0, n * sum(copies), 0.0 if strip else rotated, rotated if strip else 0.0, sr, sr4, sr16,
            n if measures else 0.0, programs]


def quant_rows(recipe: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X, y, w = [], [], []
    prof = profile(recipe)
    for op in prof["ops"]:
        if op["kind"] != "quantize":
            continue
        for _, q, calls in P.model_ops({**prof, "ops": [op]}):
            X.append(quant_features(q))
            y.append(float(op["ms_per_call"]) * 1e-3)
            w.append(calls)
    return np.array(X), np.array(y), np.array(w)


def fit_quant() -> dict[str, float]:
    """{term: value in the TOML's unit} for the QUANT_TERMS the fitted ops exercise (a
    column without data, e.g. "sr" in runs that only use "sr4", is left as the TOML has it)."""
    parts = [quant_rows(r) for r in QUANT_FIT]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    w = np.sqrt(np.concatenate([p[2] for p in parts]))
    cols = [j for j in range(X.shape[1]) if X[:, j].any()]
    while True:  # least squares without negative costs: drop the most negative term, refit
        coef, *_ = np.linalg.lstsq(X[:, cols] * w[:, None], y * w, rcond=None)
        if (coef >= 0).all():
            break
        dropped = cols.pop(int(np.argmin(coef)))
        print(f"quantize fit: {QUANT_TERMS[dropped]} came out negative; fixed at 0")
    exercised = [j for j in range(X.shape[1]) if X[:, j].any()]
    full = dict(zip(cols, coef))
    return {QUANT_TERMS[j]: round(full.get(j, 0.0) * (1e6 if j == 0 else 1e9), 2 if j == 0 else 5)
            for j in exercised}


def class_ms(hw: fchw.Hardware, recipe: str, cls: str) -> tuple[float, float]:
    """(measured, model) ms per step of one class, base ops tagged as measured."""
    prof = profile(recipe)
    ops = [o for o in P.as_measured(prof) if o[0] == cls]
    return float(prof["classes"].get(cls, 0.0)), P.cost(hw, ops).get(cls, 0.0) * 1e3


def fit_attention(hw: fchw.Hardware) -> float:
    """Tile cycles making the attention class total (all runs) match; bisection (monotone)."""
    meas = sum(class_ms(hw, r, "attention")[0] for r in ATTN_FIT)
    lo, hi = 0.0, 1e5
    for _ in range(50):
        mid = (lo + hi) / 2
        h = hw.set("efficiency.attention_tile_cycles", mid)
        model = sum(class_ms(h, r, "attention")[1] for r in ATTN_FIT)
        lo, hi = (mid, hi) if model < meas else (lo, mid)
    return (lo + hi) / 2


def fit_gemm(hw: fchw.Hardware) -> float:
    """Per-call eager cost closing the BF16 GEMM class (model is linear in it)."""
    h0 = hw.set("emulation.torch_eager_call_us", 0.0)
    meas, model0 = map(sum, zip(*(class_ms(h0, r, "gemm") for r in GEMM_FIT)))
    calls = sum(c for r in GEMM_FIT for cls, o, c in P.as_measured(profile(r)) if o.get("impl") == "torch-eager")
    return max(0.0, (meas - model0) / calls * 1e3)


def fit_cublaslt(hw: fchw.Hardware, runs: tuple[str, ...]) -> float:
    """`cublaslt_gemm_time_factor` closing the GEMM class of `runs` (FP4 runs whose GEMMs
    went through fourcast's cuBLASLt call); the model is linear in it."""
    m0 = sum(class_ms(hw.set("emulation.cublaslt_gemm_time_factor", 0.0), r, "gemm")[1] for r in runs)
    m1 = sum(class_ms(hw.set("emulation.cublaslt_gemm_time_factor", 1.0), r, "gemm")[1] for r in runs)
    meas = sum(class_ms(hw, r, "gemm")[0] for r in runs)
    return (meas - m0) / (m1 - m0)


def gemm_clock_check(hw: fchw.Hardware) -> float:
    """The eager GEMM clock (GHz) that alone closes the BF16 GEMM class (no eager cost)."""
    h0 = hw.set("emulation.torch_eager_call_us", 0.0)
    lo, hi = 1.0, 3.0
    for _ in range(40):
        mid = (lo + hi) / 2
        h = h0.set("emulation.torch_eager_gemm_clock_ghz", mid)
        meas, model = map(sum, zip(*(class_ms(h, r, "gemm") for r in GEMM_FIT)))
        lo, hi = (lo, mid) if model < meas else (mid, hi)
    return (lo + hi) / 2


def errors(hw: fchw.Hardware, recipes=None) -> dict:
    """{recipe: {class: (measured ms, model ms, error)}} for the three major classes."""
    out = {}
    for r in recipes or RECIPES:
        out[r] = {}
        for cls in ("gemm", "quantize", "attention"):
            m, p = class_ms(hw, r, cls)
            if m > 0:
                out[r][cls] = (m, p, p / m - 1)
    return out


def write_toml(values: dict) -> None:
    path = ROOT / "hwmodels/h200.toml"
    text = path.read_text()
    for key, (value, src) in values.items():
        line = f'{key} = {{ value = {value}, source = "{src}", confidence = "measured" }}'
        text, n = re.subn(rf"^{key} = .*$", line, text, flags=re.M)
        if n == 0 and key.startswith("triton_quant_"):  # a term the file has no line for yet
            last = list(re.finditer(r"^triton_quant_.*$", text, flags=re.M))[-1]
            text, n = text[:last.end()] + "\n" + line + text[last.end():], 1
        if n != 1:
            raise SystemExit(f"hwmodels/h200.toml: no single line for {key}")
    path.write_text(text)


def main() -> None:
    global RUNS, MEASURE, RECIPES, QUANT_FIT, QUANT_HELD_OUT, ATTN_FIT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder of profiled runs to fit on")
    ap.add_argument("--check-runs", nargs="+", default=[str(ROOT / "benchmarks/results/training-h200-run2")],
                    help="folders of runs of another size/shape, priced with the fitted terms (all held out)")
    ap.add_argument("--measure", choices=("events", "gpu"), default="events",
                    help="fit against CUDA-event spans or GPU kernel time")
    ap.add_argument("--quant-fit", default=",".join(QUANT_FIT),
                    help="comma-separated runs of --runs whose quantize ops are fitted (the other FP4 runs are held out)")
    ap.add_argument("--lt-fit", default="",
                    help="comma-separated runs (as --quant-fit) whose GEMM class fits cublaslt_gemm_time_factor")
    ap.add_argument("--write", action="store_true", help="update hwmodels/h200.toml")
    ap.add_argument("--quant-only", action="store_true",
                    help="fit (and write) only the quantizer terms; attention and GEMM terms stay as the file has them")
    args = ap.parse_args()
    RUNS, MEASURE = pathlib.Path(args.runs), args.measure
    RECIPES = ATTN_FIT = tuple(p.name for p in sorted(RUNS.iterdir()) if (p / "profile.json").is_file())
    QUANT_FIT = tuple(args.quant_fit.split(","))
    QUANT_HELD_OUT = tuple(r for r in RECIPES if r not in QUANT_FIT and r not in GEMM_FIT)
    hw = fchw.load("h200")
    if args.quant_only:
        tile = hw.data["efficiency"]["attention_tile_cycles"]["value"]
        eager = hw.data["emulation"]["torch_eager_call_us"]["value"]
        clock = float("nan")
    else:
        tile = round(fit_attention(hw), -1)
        hw = hw.set("efficiency.attention_tile_cycles", tile)
        clock = gemm_clock_check(hw)
        eager = round(fit_gemm(hw), 2)
        hw = hw.set("emulation.torch_eager_call_us", eager)
    quant = fit_quant()
    for key, v in quant.items():
        hw = hw.set(f"emulation.{key}", v)
    lt_fit = tuple(r for r in args.lt_fit.split(",") if r)
    if lt_fit:
        lt = round(fit_cublaslt(hw, lt_fit), 3)
        hw = hw.set("emulation.cublaslt_gemm_time_factor", lt)
        print(f"cublaslt_gemm_time_factor {lt} (the GEMM class of {', '.join(lt_fit)})")
    print(f"attention_tile_cycles {tile:.0f}; torch_eager_call_us {eager:.2f} (eager GEMM clock "
          f"{hw.data['emulation']['torch_eager_gemm_clock_ghz']['value']} GHz; alone it would take {clock:.3f}); "
          "triton quant (us/call, ns/elem): " + ", ".join(f"{k.removeprefix('triton_quant_')} {v}" for k, v in quant.items()))
    role = {"gemm": GEMM_FIT + lt_fit, "quantize": QUANT_FIT, "attention": ATTN_FIT}
    print(f"fit folder {RUNS.name}:")
    for r, row in errors(hw).items():
        cells = [f"{cls} {m:6.1f}/{p:6.1f} {e:+6.1%} ({'fit' if r in role[cls] else 'held out'})"
                 for cls, (m, p, e) in row.items()]
        print(f"  {r:10s} " + "  ".join(cells))
    checks = [pathlib.Path(c) for c in args.check_runs]
    for check in checks:
        if not check.is_dir() or check == RUNS:
            continue
        fit_dir, RUNS = RUNS, check
        print(f"check folder {check.name} (held out):")
        for r, row in errors(hw, [p.name for p in sorted(check.iterdir()) if (p / "profile.json").is_file()]).items():
            print(f"  {r:10s} " + "  ".join(f"{cls} {m:6.1f}/{p:6.1f} {e:+6.1%}" for cls, (m, p, e) in row.items()))
        RUNS = fit_dir
    if args.write:
        run = f"{RUNS.parent.name}/{RUNS.name}"
        timed = "GPU time" if MEASURE == "gpu" else "CUDA-event time"
        tool = "fit: benchmarks/calibration/fit_emulation.py"
        others = {} if args.quant_only else {
            "attention_tile_cycles": (tile, f"{tool} ({timed} of the attention ops of {run}, one shape; "
                                            f"{', '.join(c.name for c in checks)} as the check)"),
            "torch_eager_call_us": (eager, f"{tool} ({timed} of the GEMM calls of {run}/bf16 at the eager GEMM clock; "
                                           "FP4 runs held out)"),
        }
        fitted = ", ".join(f if "/" in f else f"{run}/{f}" for f in QUANT_FIT)
        if lt_fit:
            others["cublaslt_gemm_time_factor"] = (lt, f"{tool} ({timed} of the GEMM ops of "
                                                   f"{', '.join(f if '/' in f else f'{run}/{f}' for f in lt_fit)}: "
                                                   "FP4 runs whose GEMMs went through fourcast's cuBLASLt call; "
                                                   "the rest held out: projection-h200.md, session 10)")
        write_toml({
            **others,
            **{key: (v, f"{tool} ({timed} of the quantize ops of {fitted}; the rest held out: "
                        "projection-h200.md, session 9)") for key, v in quant.items()},
        })


if __name__ == "__main__":
    main()
