"""Compare run folders: final train and validation loss, relative degradation against
the BF16 run, step-time ratio against BF16, peak memory; and an overlay plot.

    >>> rows = compare(["runs/bf16", "runs/nvfp4"])          # doctest: +SKIP
    >>> rows[1]["val_degradation"]                            # doctest: +SKIP
    0.012
"""

from __future__ import annotations

import json
import os
import pathlib

from fourcast.errors import TrainError
from fourcast.train import run


def load_run(run_dir: str | os.PathLike) -> dict:
    d = pathlib.Path(run_dir)
    summary_path = d / "summary.json"
    if not summary_path.is_file():
        raise TrainError(f"{d} is not a finished run folder (no summary.json); train into it with `fourcast train --out {d}`")
    summary = json.loads(summary_path.read_text())
    config = json.loads((d / "config.json").read_text()) if (d / "config.json").is_file() else {}
    train, val = run.read_metrics(d)
    return {"dir": str(d), "summary": summary, "config": config, "train": train, "val": val}


def _rel(value, base):
    if value is None or base is None or base == 0:
        return None
    return value / base - 1


def compare(run_dirs: list[str], baseline: str | None = None) -> list[dict]:
    """One row per run. The baseline is `baseline` if given, else the first run whose
    recipe is bf16 (no degradation/ratio columns without one)."""
    if not run_dirs:
        raise TrainError("give at least one run folder to compare")
    runs = [load_run(d) for d in run_dirs]
    base = None
    if baseline is not None:
        base = load_run(baseline)
    else:
        base = next((r for r in runs if r["summary"].get("recipe") == "bf16"), None)
    rows = []
    for r in runs:
        s = r["summary"]
        b = base["summary"] if base else {}
        rows.append(
            {
                "run": r["dir"],
                "recipe": s.get("recipe"),
                "model": s.get("model"),
                "steps": s.get("steps"),
                "tokens": s.get("tokens"),
                "final_train_loss": s.get("final_train_loss"),
                "final_val_loss": s.get("final_val_loss"),
                "train_degradation": _rel(s.get("final_train_loss"), b.get("final_train_loss")),
                "val_degradation": _rel(s.get("final_val_loss"), b.get("final_val_loss")),
                "step_time_ms": s.get("step_time_ms"),
                "step_time_ratio": (s["step_time_ms"] / b["step_time_ms"]) if s.get("step_time_ms") and b.get("step_time_ms") else None,
                "tokens_per_s": s.get("tokens_per_s"),
                "peak_memory_gib": s["peak_memory_bytes"] / 2**30 if s.get("peak_memory_bytes") else None,
                "peak_memory_kind": s.get("peak_memory_kind"),
                "device": s.get("gpu") or s.get("device"),
                "baseline": base["dir"] if base else None,
            }
        )
    return rows


def plot(run_dirs: list[str], out_png: str | os.PathLike) -> None:
    """Training loss (EMA) and validation loss of every run against tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, d in enumerate(run_dirs):
        r = load_run(d)
        label = f"{r['summary'].get('recipe')} ({pathlib.Path(d).name})"
        color = f"C{i % 10}"
        if r["train"]:
            tok = [x["tokens"] for x in r["train"]]
            ax_t.plot(tok, run.ema([x["loss"] for x in r["train"]]), color=color, label=label)
        if r["val"]:
            per_step = {x["step"]: x["tokens"] for x in r["train"]}
            ax_v.plot([per_step.get(x["step"], x["step"]) for x in r["val"]], [x["val_loss"] for x in r["val"]], "o-", color=color, label=label)
    for ax, title in ((ax_t, "training loss (EMA 0.1)"), (ax_v, "validation loss")):
        ax.set_xlabel("tokens")
        ax.set_ylabel("loss (nats/token)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    pathlib.Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
