#!/usr/bin/env python
"""Fit the hardware model's efficiency parameters to calibration measurements.

    python benchmarks/calibration/fit.py           # fit, write TOMLs + cases + report
    python benchmarks/calibration/fit.py --check   # evaluate the embedded profiles only

Data: measurements.json (raw numbers as measured/published). This script expands them
into op lists (cases.json: what the Rust test replays), fits a few efficiency
parameters per calibrated GPU by Nelder-Mead on squared log errors, writes the fitted
values into hwmodels/{h200,b300}.toml (and copies them, flagged "derived", into the
profiles of the same silicon), records each case's committed error bound
(fitted.json) and writes benchmarks/results/model-calibration.md with leave-one-out
errors beside the in-sample ones. After `fit.py`, rebuild (`maturin develop`) so the
embedded profiles carry the new values, then `fit.py --check` must pass.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import re
import statistics
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HWMODELS = ROOT / "hwmodels"
RESULTS = ROOT / "benchmarks" / "results" / "model-calibration.md"

# Parameters fitted per calibrated GPU, and the profiles that inherit them.
FIT = {
    "h200": ["mma_bf16", "mma_fp8", "tile_overhead_cycles", "mem"],
    "b300": ["mma_bf16", "mma_fp8", "mma_fp4", "quant"],
}
BLACKWELL = ["mma_bf16", "mma_fp8", "mma_fp4", "quant", "tile_overhead_cycles", "mem"]
INHERIT = {
    "h200": {"h100": ["mma_bf16", "mma_fp8", "tile_overhead_cycles", "mem", "quant"]},
    "b300": {"b200": BLACKWELL, "gb200": BLACKWELL, "gb300": BLACKWELL},
}
# Values a GPU takes from another fit before its own fit (no data of its own to separate
# them): B300 shares the H200's per-tile overhead and copy efficiency; H200 takes the
# B300 quantize-kernel efficiency afterwards (no H200 quantize measurement).
SHARED = {
    ("b300", "tile_overhead_cycles"): ("h200", "tile_overhead_cycles"),
    ("b300", "mem"): ("h200", "mem"),
}
AFTER = {("h200", "quant"): ("b300", "quant")}


# ---------------------------------------------------------------- cases from raw data
def build_cases(raw: dict) -> list[dict]:
    cases = []
    h = raw["h200"]
    src = h["source"]
    nbytes = 2**31
    cases.append({
        "id": "h200 copy 2 GiB",
        "hw": "h200",
        "ops": [{"op": "copy", "bytes": nbytes}],
        "measured_s": 2 * nbytes / (h["copy_2GiB_tbs"] * 1e12),
        "measured": f"{h['copy_2GiB_tbs']} TB/s (read + write)",
        "source": src,
    })
    for key, fmt, label in [("bf16_tflops", "bf16", "bf16"), ("fp8_tensorwise_tflops", "fp8", "fp8 tensor-wise"), ("fp8_rowwise_tflops", "fp8", "fp8 row-wise")]:
        for shape, tflops in h[key].items():
            m, n, k = (int(x) for x in shape.split("x"))
            cases.append({
                "id": f"h200 {label} {shape}",
                "hw": "h200",
                "ops": [{"op": "gemm", "m": m, "n": n, "k": k, "format": fmt}],
                "measured_s": 2 * m * n * k / (tflops * 1e12),
                "measured": f"{tflops} TFLOP/s",
                "source": src,
            })
    b = raw["b300_te"]
    H, I, T = b["hidden"], b["intermediate"], b["tokens"]
    # TE's (M, K, N) for the 12 GEMMs of one layer (benchmark_gemm.py compute_gemm_shapes).
    mkn = [(T, H, 3 * H), (T, H, H), (T, H, I), (T, I, H),
           (T, 3 * H, H), (T, H, H), (T, I, H), (T, H, I),
           (H, T, 3 * H), (H, T, H), (H, T, I), (I, T, H)]
    nvfp4_2d = {"element": "e2m1", "scale": "e4m3", "block": 16, "tile_2d": True, "rule": "te"}
    for prec, fmt in [("bf16", "bf16"), ("mxfp8", "mxfp8"), ("nvfp4", "nvfp4")]:
        for mode, ms in b["layer_ms"][prec].items():
            ops = []
            for M, K, N in mkn:
                ops.append({"op": "gemm", "m": M, "n": N, "k": K, "format": fmt})
                if mode == "autocast" and prec == "mxfp8":
                    # te.Linear forward: input and weight quantized row- and column-wise, one kernel each.
                    ops.append({"op": "quantize", "numel": M * K, "outputs": [{"format": "mxfp8"}, {"format": "mxfp8"}]})
                    ops.append({"op": "quantize", "numel": N * K, "outputs": [{"format": "mxfp8"}, {"format": "mxfp8"}]})
                if mode == "autocast" and prec == "nvfp4":
                    # NVFP4BlockScaling defaults: input row-wise + column-wise with RHT-16 (own amax);
                    # weight 2D 16x16 (one quantization, transposed copy for the TN-only MMA).
                    ops.append({"op": "quantize", "numel": M * K, "outputs": [{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16}]})
                    ops.append({"op": "quantize", "numel": N * K, "outputs": [{"format": nvfp4_2d, "transposed_copy": True}]})
            cases.append({
                "id": f"b300 TE layer {prec} {mode}",
                "hw": "b300",
                "ops": ops,
                "measured_s": ms * 1e-3,
                "measured": f"{ms} ms per layer (12 GEMMs)",
                "source": b["source"],
            })
    return cases


# ---------------------------------------------------------------- model evaluation
def predict(fc_hw, profiles: dict, case: dict) -> float:
    hw = fc_hw.Hardware._from_json(json.dumps(profiles[case["hw"]]))
    return sum(r.time_s for r in fc_hw.op_times(hw, case["ops"]))


def set_param(profile: dict, key: str, value: float) -> None:
    profile["efficiency"][key]["value"] = float(value)


def to_free(key: str, v: float) -> float:
    return math.log(v) if key == "tile_overhead_cycles" else math.log(v / (1 - v))


def from_free(key: str, x: float) -> float:
    return math.exp(x) if key == "tile_overhead_cycles" else 1 / (1 + math.exp(-x))


def nelder_mead(f, x0, steps=0.3, iters=400, tol=1e-10):
    n = len(x0)
    simplex = [np.array(x0, float)] + [np.array(x0, float) + steps * np.eye(n)[i] for i in range(n)]
    vals = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(vals)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc_ = f(xc)
            if fc_ < vals[-1]:
                simplex[-1], vals[-1] = xc, fc_
            else:
                simplex = [simplex[0] + 0.5 * (s - simplex[0]) for s in simplex]
                vals = [f(s) for s in simplex]
    i = int(np.argmin(vals))
    return simplex[i], vals[i]


def fit_gpu(fc_hw, profiles: dict, gpu: str, cases: list[dict]) -> dict:
    keys = FIT[gpu]
    mine = [c for c in cases if c["hw"] == gpu]
    x0 = [to_free(k, profiles[gpu]["efficiency"][k]["value"]) for k in keys]

    def loss(x):
        for k, xi in zip(keys, x):
            set_param(profiles[gpu], k, from_free(k, xi))
        return sum(math.log(predict(fc_hw, profiles, c) / c["measured_s"]) ** 2 for c in mine)

    x, _ = nelder_mead(loss, x0)
    values = {k: round_sig(from_free(k, xi)) for k, xi in zip(keys, x)}
    for k, v in values.items():
        set_param(profiles[gpu], k, v)
    return values


def round_sig(v: float, sig: int = 4) -> float:
    return float(f"{v:.{sig}g}")


# ---------------------------------------------------------------- writing
def write_toml(gpu: str, values: dict, source: str, confidence: str) -> None:
    path = HWMODELS / f"{gpu}.toml"
    text = path.read_text()
    for key, v in values.items():
        pattern = re.compile(rf'^{key} = \{{ value = [^,]+, source = "[^"]*", confidence = "[^"]*" \}}$', re.M)
        new = f'{key} = {{ value = {v!r}, source = "{source}", confidence = "{confidence}" }}'
        text, n = pattern.subn(new, text)
        if n != 1:
            sys.exit(f"{path}: expected one line for {key}, found {n}")
    path.write_text(text)


def tolerance(err: float) -> float:
    """Committed bound: the error rounded up to the next half percent."""
    return max(0.005, math.ceil(abs(err) * 200) / 200)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="evaluate the embedded profiles against fitted.json")
    args = ap.parse_args()
    from fourcast import hw as fc_hw

    raw = json.loads((HERE / "measurements.json").read_text())
    cases = build_cases(raw)
    if args.check:
        committed = json.loads((HERE / "fitted.json").read_text())["cases"]
        bad = 0
        profiles = {g: fc_hw.load(g).data for g in {c["hw"] for c in cases}}
        for c in cases:
            err = predict(fc_hw, profiles, c) / c["measured_s"] - 1
            ok = abs(err) <= committed[c["id"]]["tolerance"]
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {c['id']:<40} {err:+.2%} (committed {committed[c['id']]['tolerance']:.1%})")
        sys.exit(1 if bad else 0)

    (HERE / "cases.json").write_text(json.dumps({"about": "generated by fit.py from measurements.json; replayed by the Rust test", "cases": cases}, indent=1) + "\n")
    profiles = {g: fc_hw.load(g).data for g in FIT}
    fitted = {}
    for gpu in FIT:  # h200 first: b300 shares its tile overhead
        for (g, k), (src_gpu, src_key) in SHARED.items():
            if g == gpu:
                set_param(profiles[g], k, profiles[src_gpu]["efficiency"][src_key]["value"])
        fitted[gpu] = fit_gpu(fc_hw, profiles, gpu, cases)

    # Leave-one-out: refit each GPU without one case, predict that case.
    loo = {}
    for c in cases:
        trial = json.loads(json.dumps(profiles))
        rest = [x for x in cases if x["id"] != c["id"]]
        fit_gpu(fc_hw, trial, c["hw"], rest)
        loo[c["id"]] = predict(fc_hw, trial, c) / c["measured_s"] - 1

    rows = []
    for c in cases:
        pred = predict(fc_hw, profiles, c)
        err = pred / c["measured_s"] - 1
        rows.append((c, pred, err))

    stamp = datetime.date.today().isoformat()
    cal_src = "fit: benchmarks/calibration/fit.py"
    write_toml("h200", fitted["h200"], f"{cal_src} (H200 cuBLAS GEMMs + copy, {stamp})", "measured")
    write_toml("b300", fitted["b300"], f"{cal_src} (B300 Transformer Engine layer table, {stamp})", "measured")
    all_values = {g: dict(v) for g, v in fitted.items()}
    for (g, k), (src_gpu, src_key) in list(SHARED.items()) + list(AFTER.items()):
        v = fitted[src_gpu][src_key]
        all_values[g][k] = v
        write_toml(g, {k: v}, f"taken from the {src_gpu.upper()} fit ({cal_src}); no {g.upper()} data separates it", "derived")
    for src_gpu, targets in INHERIT.items():
        for gpu, keys in targets.items():
            write_toml(gpu, {k: all_values[src_gpu][k] for k in keys}, f"copied from the {src_gpu.upper()} fit (same GPU family), {cal_src}", "derived")
    write_toml("rubin", {k: all_values["b300"][k] for k in BLACKWELL},
               "assumed equal to the B300 fit (Rubin unmeasured)", "preliminary")

    out = {
        "about": "fitted by benchmarks/calibration/fit.py; tolerance = committed error bound per case (the Rust test checks it)",
        "date": stamp,
        "parameters": all_values,
        "cases": {c["id"]: {"measured_s": c["measured_s"], "predicted_s": p, "error": e, "loo_error": loo[c["id"]], "tolerance": tolerance(e)} for c, p, e in rows},
    }
    (HERE / "fitted.json").write_text(json.dumps(out, indent=1) + "\n")
    write_report(rows, loo, all_values, stamp)
    errs = [abs(e) for _, _, e in rows]
    print(f"median |error| {statistics.median(errs):.2%}, max {max(errs):.2%}; LOO median {statistics.median(abs(v) for v in loo.values()):.2%}")
    print("now rebuild (maturin develop) and run fit.py --check")


def write_report(rows, loo, values, stamp) -> None:
    errs = [abs(e) for _, _, e in rows]
    loos = [abs(v) for v in loo.values()]
    lines = [
        "# Hardware model calibration",
        "",
        f"Generated by `benchmarks/calibration/fit.py` on {stamp} from `benchmarks/calibration/measurements.json`",
        "(ops per case: `cases.json`; fitted values and committed error bounds: `fitted.json`).",
        "The Rust test `hw::tests::calibration_cases_stay_within_committed_error` replays every case.",
        "",
        f"**Median |error| {statistics.median(errs):.1%}** (max {max(errs):.1%}) over {len(rows)} cases; "
        f"leave-one-out median {statistics.median(loos):.1%} (max {max(loos):.1%}).",
        "",
        "## Fitted parameters",
        "",
        "| GPU | parameter | value |",
        "|---|---|---|",
    ]
    for gpu, vals in values.items():
        for k, v in vals.items():
            lines.append(f"| {gpu} | {k} | {v} |")
    lines += [
        "",
        "H100 inherits the H200 values; B200, GB200 and GB300 inherit the B300 values (flagged",
        "`derived` in their files); Rubin copies them as `preliminary`; AMD profiles are not",
        "calibrated (every efficiency there is `preliminary`).",
        "",
        "## Cases",
        "",
        "| case | measured | measured (s) | predicted (s) | error | leave-one-out error |",
        "|---|---|---|---|---|---|",
    ]
    for c, p, e in rows:
        lines.append(f"| {c['id']} | {c['measured']} | {c['measured_s']:.4g} | {p:.4g} | {e:+.1%} | {loo[c['id']]:+.1%} |")
    lines += [
        "",
        "## Reading",
        "",
        "- H200: four parameters (BF16 and FP8 main-loop efficiency, per-tile overhead, copy",
        "  bandwidth efficiency) against 16 measurements. The model has no term for the",
        "  row-wise-scaled FP8 epilogue or for clock drops on the largest shapes, which is",
        "  most of what remains.",
        "- B300: four parameters (BF16, FP8 and FP4 main-loop efficiency, quantize-kernel",
        "  bandwidth) against 6 per-layer totals, two of which (BF16 autocast and",
        "  pre-quantized) measure the same kernels and differ by 5% in the source. These",
        "  cases anchor the Blackwell numbers more than they validate them; the",
        "  leave-one-out column says how much each case depends on itself.",
        "- The TE autocast cases model each GEMM as te.Linear forward: the input quantized",
        "  row-wise and column-wise (with RHT-16 and its own amax for NVFP4), the weight",
        "  quantized 2D with a transposed copy (NVFP4) or row+column (MXFP8), every call.",
        "- The fitted B300 quantize-kernel efficiency comes out above the H200 copy efficiency:",
        "  the byte model counts each TE kernel's reads and writes in full, and the fit absorbs",
        "  whatever TE saves (fused amax, L2 hits on the repeated inputs of a benchmark loop).",
        "  Treat `quant` as an effective number for TE-like kernels, not a bandwidth.",
        "- Not modelled: TE's FP8 block scaling (1x128 / 128x128 FP32 block scales; no recipe",
        "  preset and no MMA mode for it).",
        "",
        "## Speed of the model",
        "",
        "See `benchmarks/results/hw-model-speed.md`.",
        "",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
