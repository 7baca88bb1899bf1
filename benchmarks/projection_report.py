"""Write benchmarks/results/projection-h200.md from the six per-run projection.json files of
training-h200-run2 (made by `fourcast project RUN --to b200,b300,rubin,mi355x --native
ue5m3,e1m2 --other-from RUN2/bf16 --out RUN`), so the summary page is reproducible.

    python benchmarks/projection_report.py            # rewrite the page
    python benchmarks/projection_report.py --stdout   # print it instead

Which recipes each H200 term was fitted on (and which are held out) comes from
benchmarks/calibration/fit_emulation.py, the script that fits them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks/results/training-h200-run2"
PAGE = ROOT / "benchmarks/results/projection-h200.md"
RECIPES = ("bf16", "nvfp4", "mxfp4", "ue5m3", "ufp4", "ufp4-int4")
TARGETS = ("b200", "b300", "rubin", "mi355x")
MAJOR = ("gemm", "quantize", "attention")
TARGET_ERR = 0.15
MIN_GAIN = 0.005  # gains below half a percent are reported as none


def fit_split() -> dict[str, tuple[str, ...]]:
    """{class: recipes whose ops fitted that class's H200 term}."""
    spec = importlib.util.spec_from_file_location("fit_emulation", ROOT / "benchmarks/calibration/fit_emulation.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return {"gemm": mod.GEMM_FIT, "quantize": mod.QUANT_FIT, "attention": mod.ATTN_FIT}


def load() -> dict[str, dict]:
    return {r: json.loads((RUNS / r / "projection.json").read_text()) for r in RECIPES}


def accuracy_table(reps: dict[str, dict], fit: dict) -> tuple[list[str], dict]:
    """Rows of the model-vs-measured table and {class: [held-out errors]}."""
    head = "| recipe | " + " | ".join(f"{c} meas. | {c} model | err" for c in MAJOR) + " |"
    lines = [head, "|---" * (1 + 3 * len(MAJOR)) + "|"]
    held: dict[str, list[float]] = {c: [] for c in MAJOR}
    for r, rep in reps.items():
        cells = [r]
        for c in MAJOR:
            m = rep["measured"].get(c, 0.0)
            p = rep["h200_model"].get(c)
            if not m or p is None:
                cells += [f"{m:.1f}", "-", "-"]
                continue
            e = rep["h200_error"][c]
            role = "fit" if r in fit[c] else "held out"
            if role == "held out":
                held[c].append(e)
            cells += [f"{m:.1f}", f"{p:.1f}", f"{e:+.0%} ({role})"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines, held


def verdict(held: dict, fit: dict) -> list[str]:
    out = []
    for c in MAJOR:
        errs = held[c]
        if not errs:
            out.append(f"- {c}: no held-out recipe (fitted on {', '.join(fit[c])}); "
                       "its agreement is a fit, not a validation.")
            continue
        worst = max(errs, key=abs)
        ok = all(abs(e) <= TARGET_ERR for e in errs)
        n_ok = sum(abs(e) <= TARGET_ERR for e in errs)
        out.append(f"- {c}: {'MEETS' if ok else 'MISSES'} 15% on the held-out recipes "
                   f"({n_ok} of {len(errs)} within; worst {worst:+.0%}).")
    return out


def target_table(reps: dict[str, dict]) -> list[str]:
    lines = ["| recipe | H200 measured | " + " | ".join(TARGETS) + " | native ue5m3 gain | native e1m2 gain |",
             "|---" * (4 + len(TARGETS)) + "|"]
    for r, rep in reps.items():
        step = rep["measured"]["step"]
        plain = {t["hw"]: t for t in rep["targets"] if t["native"] == ["none"]}
        cells = [r, f"{step:.1f}"]
        for hw in TARGETS:
            t = plain[hw]
            cells.append(f"{t['step_time_s'] * 1e3:.1f} ({t['speedup_vs_h200']:.1f}x)")
        for nat in ("ue5m3", "e1m2"):
            gains = [f"{t['hw']}: {t['gain']:+.1%}" for t in rep["targets"]
                     if t["native"] == [nat] and t.get("gain", 0.0) >= MIN_GAIN]
            cells.append(", ".join(gains) or "none")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def page(reps: dict[str, dict], fit: dict) -> str:
    acc, held = accuracy_table(reps, fit)
    params = [f"attention fitted on {', '.join(fit['attention'])}",
              f"GEMM on {', '.join(fit['gemm'])}", f"quantize on {', '.join(fit['quantize'])}"]
    lines = [
        "# Projection of the H200 training runs onto B200, B300, Rubin and MI355X",
        "",
        "Source: the six profiled runs of `training-h200-run2/` (NVIDIA H200, torch 2.11, Triton 3.6;",
        "model `50m`, 16,384 tokens/step), projected with `fourcast project RUN --to b200,b300,rubin,mi355x",
        "--native ue5m3,e1m2 --other-from RUN2/bf16 --out RUN` (per-run reports:",
        "`training-h200-run2/<recipe>/projection.md`). This page is written by",
        "`python benchmarks/projection_report.py` from the six projection.json files.",
        "Rubin rests on PRELIMINARY hardware data (SM count, clocks, FP8/BF16 rates assumed; only NVFP4",
        "PF, HBM4 bandwidth and NVLink6 are public): treat its rows as a parameterised what-if.",
        "",
        "## The model's H200 prediction against the measurement (ms per step)",
        "",
        f"Fit / hold-out ({'; '.join(params)}; every other cell is held out): the terms are",
        "fitted by `benchmarks/calibration/fit_emulation.py` and written to `hwmodels/h200.toml`.",
        "",
        *acc,
        "",
        "**Target (within 15% per major op class), judged on held-out recipes only:**",
        *verdict(held, fit),
        "",
        "What the H200 prediction now contains, and why:",
        "- attention: a tile-level flash-attention model (rust/core/src/hw/attention.rs): one CTA per",
        "  (sequence, head, 128-query block) in waves over the SMs, the causal diagonal block computed",
        "  whole, and a fixed cost per tile (`efficiency.attention_tile_cycles`, fitted: ~20.6k cycles,",
        "  ~11 us). A profile's forward and backward attention ops are priced separately (the",
        "  backward op takes the model's backward part only). At B=32, H=10, T=512, D=64 the fixed",
        "  cost and the diagonal waste dominate. All six runs share one attention shape, so this is",
        "  a one-shape fit: it explains the H200 class total but is not validated at other shapes. It",
        "  applies to every GPU (targets take the H200-fitted cycles, the only measurement there is);",
        "  at LLM shapes (B=4, T=8192, H=32, D=128) the tile cost adds a few tens of percent to the",
        "  attention roofline time, an estimate until attention is measured at a second shape.",
        "- GEMMs: cuBLAS kernel times from the calibrated tile model plus a fixed cost per profiled",
        "  eager GEMM region (`emulation.torch_eager_call_us`, fitted on the BF16 run: ~45 us per",
        "  region). These runs are host-bound (the unmodelled `other` class is 36 ms of a 46 ms BF16",
        "  step), so the CUDA-event time of a small GEMM includes the host dispatch it waits for: a",
        "  16384x640x640 BF16 GEMM measures ~90 us where the kernel takes ~30 us. This is a property",
        "  of the measured eager run, not of the GPU kernel: it is priced only for ops the projection",
        "  tags `\"impl\": \"torch-eager\"` (the H200 prediction), never for targets, and the LLM-shape",
        "  calibration cases (`model-calibration.md`) are unchanged. The FP4 runs' GEMM regions",
        "  (the dequant emulation: BF16 matmul with FP32 output, then the scales) are held out: the",
        "  same per-region cost, no FP4-specific term.",
        "- quantize: fourcast's own Triton quantizers (`emulation.triton_quant_*`, ops tagged",
        "  `\"impl\": \"fourcast-triton\"`, allowed only on GPUs without FP4 MMAs): ~188 us per call plus a",
        "  small per-element term; the fixed term is host dispatch and launch of the multi-kernel",
        "  emulation path (GPU work is microseconds at these sizes). Targets keep the vendor-grade,",
        "  memory-bound price. ufp4 and ufp4-int4 run identical quantize op mixes (same shapes,",
        "  RHT and SR; E1M2 vs INT4 only), yet measure 104.5 vs 80.0 ms in run 2 and 132.9 vs",
        "  147.0 ms in run 1 (training-h200-run1, before the host-overhead fix): identical op mixes",
        "  differ by 10-30% within one call and the order flips between calls, which bounds how",
        "  closely any model can match one run. That noise, not a per-format cost, is why ufp4 misses while ufp4-int4",
        "  is within 10%. The quantize class is not used to correct the targets (they would run a",
        "  fused vendor kernel).",
        "",
        "## Projected step time per target (ms; speed-up over the measured H200 emulated step)",
        "",
        *target_table(reps),
        "",
        "Notes: the dequantize class (emulation only) is dropped on every target; `other` is the BF16",
        "run's, scaled by the HBM bandwidth ratio; attention and optimizer corrected by the H200 ratio.",
        "At this model size (71.8M parameters) the projected steps are dominated by `other` and",
        "attention, so native-format gains are small; `fourcast whatif` gives them at llama3-8b scale.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stdout", action="store_true")
    args = ap.parse_args()
    text = page(load(), fit_split())
    if args.stdout:
        print(text)
    else:
        PAGE.write_text(text)


if __name__ == "__main__":
    main()
