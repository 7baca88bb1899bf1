"""The run folder: what a run writes so it describes itself.

    config.json        the RunConfig (recipe in full, model, data, train)
    env.json           versions, git commit, device/GPU, world size, command line
    metrics.jsonl      one JSON line per step {"step", "loss", "lr", "grad_norm", "tokens",
                       "step_time_ms", "tok_s"} and per evaluation {"step", "val_loss"}
                       ("step" counts completed optimizer steps)
    summary.json       final losses, median step time, tokens/s, peak memory, params,
                       what convert quantized and the saved activation memory
    loss.png           training loss (raw and smoothed) and validation loss
    checkpoint.safetensors   see checkpoint.py
    profile.json       (with --profile-steps) see profile.py
    tensors/           (with --capture-every) see capture.py
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
from typing import Any

REQUIRED = ("config.json", "env.json", "metrics.jsonl", "summary.json", "loss.png", "checkpoint.safetensors")


def write_json(path: pathlib.Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def git_commit() -> dict:
    """The commit of the fourcast source tree (None when installed from a wheel)."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def environment(device: Any, world_size: int) -> dict:
    import numpy
    import torch

    import fourcast

    versions = {"python": platform.python_version(), "fourcast": fourcast.__version__, "torch": torch.__version__, "numpy": numpy.__version__}
    for name in ("triton", "safetensors", "tokenizers"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    info: dict[str, Any] = {
        "versions": versions,
        "git": git_commit(),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "world_size": world_size,
        "argv": sys.argv,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_bytes": props.total_memory,
            "count": torch.cuda.device_count(),
            "cuda": torch.version.cuda,
        }
    return info


def read_metrics(run_dir: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """(train lines, val lines) of a run's metrics.jsonl."""
    train, val = [], []
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                (val if "val_loss" in rec else train).append(rec)
    return train, val


def truncate_metrics(run_dir: pathlib.Path, step: int) -> None:
    """Drop lines after `step` (steps a killed run did past its last checkpoint)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    path.write_text("".join(ln + "\n" for ln in keep))


def final_loss(train: list[dict]) -> float | None:
    """Mean training loss over the last 10% of steps (at least 1, at most 50)."""
    if not train:
        return None
    k = max(1, min(50, len(train) // 10))
    return statistics.fmean(r["loss"] for r in train[-k:])


def median_step_ms(train: list[dict]) -> float | None:
    """Median step time, skipping the first 3 steps (warm-up) when there are more."""
    times = [r["step_time_ms"] for r in train if not r.get("profiled")]
    times = times[3:] if len(times) > 6 else times
    return statistics.median(times) if times else None


def plot_losses(run_dir: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, val = read_metrics(run_dir)
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        steps = [r["step"] for r in train]
        losses = [r["loss"] for r in train]
        ax.plot(steps, losses, color="tab:blue", alpha=0.3, lw=0.8, label="train")
        ax.plot(steps, ema(losses), color="tab:blue", lw=1.5, label="train (EMA)")
    if val:
        ax.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", color="tab:red", label="val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(run_dir / "loss.png", dpi=110)
    plt.close(fig)


def ema(values: list[float], alpha: float = 0.1) -> list[float]:
    out, acc = [], None
    for v in values:
        acc = v if acc is None else (1 - alpha) * acc + alpha * v
        out.append(acc)
    return out
