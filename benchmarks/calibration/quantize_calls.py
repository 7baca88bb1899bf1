"""Per-call check of the H200 quantizer terms: every quantize op of a run's timeline step
(GPU time, one op per layer and call site) against the hardware model's price for it, and
the error per call, summarised per call kind (X: fprop.x+wgrad.x, dY: dgrad.dy+wgrad.dy,
W: the weight) and recipe as max and median |error|. The class totals can be right while
the calls err in opposite directions (projection-h200.md, session 11); this shows it.

Default runs: every committed profile that records its quantizer revision (`"quant_rev"`,
run 18 on); --runs adds others (revision from fit_emulation.quant_rev_of). --set prices
with other term values (`triton_quant_call_us=4.0`), as a what-if before a refit.

    python benchmarks/calibration/quantize_calls.py [--runs DIR...] [--set TERM=V ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fit_emulation as F  # noqa: E402  (the feature counts live beside the fit)

from fourcast import hw as fchw  # noqa: E402


def recorded_runs() -> list[pathlib.Path]:
    """Run folders (one recipe each) of benchmarks/results whose profile records "quant_rev"."""
    out = []
    for path in sorted((F.ROOT / "benchmarks/results").glob("training-h200-run*/*/*/profile.json")):
        if json.loads(path.read_text()).get("quant_rev") is not None:
            out.append(path.parent)
    return out


def recipe_dirs(path: pathlib.Path) -> list[pathlib.Path]:
    """A run folder of one recipe, or every recipe folder under it."""
    if (path / "profile.json").is_file():
        return [path]
    return sorted(p.parent for p in path.rglob("profile.json"))


def table(hw: fchw.Hardware, dirs: list[pathlib.Path]) -> tuple[list[dict], list[dict]]:
    """(calls, summary): one row per quantize op with measured and model us and the error;
    one row per (run, recipe, kind) with the calls' max and median |error|. FP4 runs only
    (a BF16 run has no quantize ops)."""
    calls = []
    for d in dirs:
        rows = F.call_rows(d, hw.data["emulation"])
        if not rows:
            continue
        model = F.price_calls(hw, rows)
        for row, us in zip(rows, model):
            calls.append({k: row[k] for k in ("run", "recipe", "rev", "layer", "operand", "kind", "rows", "cols",
                                               "calls", "us")} | {"model_us": float(us), "error": us / row["us"] - 1})
    summary = []
    for key in dict.fromkeys((c["run"], c["recipe"], c["kind"]) for c in calls):
        err = np.abs([c["error"] for c in calls if (c["run"], c["recipe"], c["kind"]) == key])
        signed = [c["error"] for c in calls if (c["run"], c["recipe"], c["kind"]) == key]
        summary.append({"run": key[0], "recipe": key[1], "kind": key[2], "calls": len(err),
                        "min": float(min(signed)), "max": float(max(signed)),
                        "max_abs": float(err.max()), "median_abs": float(np.median(err))})
    return calls, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=[], help="more run folders (a recipe's, or a folder of them)")
    ap.add_argument("--only", nargs="*", default=None, help="these run folders instead of the recorded ones")
    ap.add_argument("--set", nargs="*", default=[], metavar="TERM=V", help="price with emulation.TERM = V")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dirs = [d for r in (args.only if args.only is not None else []) + args.runs for d in recipe_dirs(pathlib.Path(r))]
    if args.only is None:
        dirs = recorded_runs() + dirs
    hw = fchw.load("h200")
    for kv in args.set:
        key, _, v = kv.partition("=")
        hw = F.set_term(hw, key, float(v))
    calls, summary = table(hw, dirs)
    if args.json:
        print(json.dumps({"calls": calls, "summary": summary}, indent=1))
        return
    groups: dict[tuple, list[dict]] = {}
    for c in calls:
        groups.setdefault((c["run"], c["recipe"], c["kind"], c["operand"], c["rows"], c["cols"]), []).append(c)
    print(f"{'run':22s} {'recipe':11s} {'kind':4s} {'shape':12s} {'n':>3s} {'measured us':>16s} {'model us':>9s} "
          f"{'error':>16s}")
    for (run, recipe, kind, _, rows, cols), cs in groups.items():
        us = [c["us"] for c in cs]
        err = [c["error"] for c in cs]
        print(f"{run:22s} {recipe:11s} {kind:4s} {f'{rows}x{cols}':12s} {len(cs):3d} {np.mean(us):7.1f} "
              f"({min(us):5.1f}-{max(us):5.1f}) {cs[0]['model_us']:8.1f} {min(err):+7.1%} .. {max(err):+7.1%}")
    print("\nper call kind: max |error|, median |error| (signed range)")
    for s in summary:
        print(f"  {s['run']:22s} {s['recipe']:11s} {s['kind']:3s} {s['calls']:4d} calls  max {s['max_abs']:6.1%}  "
              f"median {s['median_abs']:6.1%}  ({s['min']:+.1%} .. {s['max']:+.1%})")


if __name__ == "__main__":
    main()
