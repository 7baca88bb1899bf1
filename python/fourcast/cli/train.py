"""`fourcast train`, `fourcast compare`, `fourcast recipes`, `fourcast models`."""

from __future__ import annotations

import pathlib
from typing import List, Optional

import typer

from fourcast.cli._output import emit_json, emit_table


def train(
    recipe: str = typer.Option(..., "--recipe", help="Recipe preset (see `fourcast recipes`) or a .toml/.json recipe file."),
    model: str = typer.Option("tiny", "--model", help="Model preset (see `fourcast models`), optionally with ',field=value' sizes."),
    data: str = typer.Option(..., "--data", help="Training text: a .txt file or a folder of .txt files."),
    out: str = typer.Option(..., "--out", help="Run folder to create (or to continue with --resume)."),
    val: Optional[str] = typer.Option(None, "--val", help="Validation text (default: the last 5% of --data)."),
    steps: int = typer.Option(100, "--steps", help="Optimizer steps."),
    sets: List[str] = typer.Option([], "--set", help="Recipe field=value (rht.size=0, keep_bf16_last=0) or train./model./data.field=value."),
    seed: int = typer.Option(0, "--seed"),
    batch: int = typer.Option(8, "--batch", help="Sequences per step (per process)."),
    seq: int = typer.Option(128, "--seq", help="Tokens per sequence."),
    lr: float = typer.Option(3e-3, "--lr", help="Peak learning rate."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    tokenizer: str = typer.Option("bytes", "--tokenizer", help="bytes, gpt2:DIR (encoder.json + vocab.bpe) or bpe:N."),
    gemm_path: str = typer.Option("fused", "--gemm-path",
                                  help="QLinear emulation: fused (exact, fewest passes), dequant (exact), fake, packed."),
    eval_every: int = typer.Option(50, "--eval-every", help="Steps between validation passes (0: at the end)."),
    ckpt_every: int = typer.Option(100, "--ckpt-every", help="Steps between checkpoints (0: at the end)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its checkpoint."),
    capture_every: int = typer.Option(0, "--capture-every", help="Save X, W, dY samples of every linear every K steps."),
    profile_steps: int = typer.Option(0, "--profile-steps", help="Profile this many sampled steps into profile.json."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    project_to: Optional[str] = typer.Option(None, "--project-to", help="After training, project the run onto these GPUs (e.g. b200,mi355x); needs CUDA, implies --profile-steps 3."),
    native: str = typer.Option("", "--native", help="With --project-to: what-if native features (e.g. ue5m3,e1m2)."),
) -> None:
    """Train a language model with a recipe; writes a self-describing run folder."""
    import fourcast as fc
    from fourcast.recipes import parse_sets
    from fourcast.train.config import DataConfig, RunConfig, TrainConfig, apply_sets, model_config

    if project_to:
        _check_projectable(device)
        profile_steps = profile_steps or 3
    pairs = parse_sets(sets)
    recipe_sets = {k: v for k, v in pairs.items() if k.split(".")[0] not in ("train", "model", "data")}
    other_sets = {k: v for k, v in pairs.items() if k not in recipe_sets}
    r = fc.recipe(recipe, recipe_sets)
    cfg = RunConfig(
        recipe=r.to_dict(),
        model=model_config(model),
        model_name=model,
        data=DataConfig(path=data, val_path=val, tokenizer=tokenizer),
        train=TrainConfig(
            steps=steps,
            batch=batch,
            seq=seq,
            lr=lr,
            seed=seed,
            device=device,
            gemm_path=gemm_path,
            eval_every=eval_every,
            ckpt_every=ckpt_every,
            capture_every=capture_every,
            profile_steps=profile_steps,
            progress=not no_progress,
        ),
    )
    apply_sets(cfg, other_sets)
    cfg.model.check()
    from fourcast.train.data import text_files

    text_files(cfg.data.path, "data")  # say a bad path before torch is even imported
    if cfg.data.val_path:
        text_files(cfg.data.val_path, "validation")

    from fourcast.train.loop import train as run_training

    summary = run_training(cfg, out, resume=resume, log=lambda s: typer.echo(s, err=True))
    if not summary:
        return  # ranks other than 0 under torchrun
    if project_to:
        from fourcast import project

        rep = project.project(out, project_to.split(","), [n for n in native.split(",") if n])
        paths = project.write_report(rep, out)
        summary["projection"] = rep.to_dict()["targets"]
        typer.echo(f"projection: {paths['md']}", err=True)
    if json_out:
        emit_json(summary)
        return
    rows = [
        ["recipe", summary["recipe"]],
        ["model", f"{summary['model']} ({summary['params'] / 1e6:.2f}M params)"],
        ["steps / tokens", f"{summary['steps']} / {summary['tokens']}"],
        ["train loss (first -> final)", f"{summary['first_train_loss']:.4f} -> {summary['final_train_loss']:.4f}"],
        ["val loss", summary["final_val_loss"]],
        ["step time (ms, median)", summary["step_time_ms"]],
        ["tokens/s", summary["tokens_per_s"]],
        ["peak memory (GiB)", summary["peak_memory_bytes"] / 2**30],
        ["run folder", out],
    ]
    emit_table("fourcast train", ["", "value"], rows)


def _check_projectable(device: str) -> None:
    """--project-to needs a CUDA profile: say so before training, not after."""
    from fourcast.errors import TrainError

    if device.startswith("cpu"):
        raise TrainError("--project-to needs a CUDA run (profiles are CUDA-event timings); drop --device cpu")
    if device == "auto":
        import torch

        if not torch.cuda.is_available():
            raise TrainError("--project-to needs a CUDA run and no CUDA device is visible; train on a GPU or drop --project-to")


def compare(
    runs: List[str] = typer.Argument(..., help="Run folders written by `fourcast train`."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline run (default: the bf16 run among RUNS)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write an overlay loss plot (PNG) here."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Final losses, degradation and step-time ratio against BF16, peak memory."""
    from fourcast.train import compare as cmp

    rows = cmp.compare(runs, baseline)
    if plot:
        cmp.plot(runs, plot)
        typer.echo(f"wrote {plot}", err=True)
    if json_out:
        emit_json(rows)
        return

    def pct(v):
        return "-" if v is None else f"{100 * v:+.2f}%"

    def num(v, fmt="{:.4f}"):
        return "-" if v is None else fmt.format(v)

    emit_table(
        f"fourcast compare: final losses; Δ and × against {pathlib.Path(rows[0]['baseline']).name if rows[0]['baseline'] else 'nothing (no bf16 run)'}",
        ["run", "recipe", "train", "val", "val Δ", "train Δ", "step ms", "step ×", "peak GiB"],
        [
            [
                pathlib.Path(r["run"]).name,
                r["recipe"],
                num(r["final_train_loss"]),
                num(r["final_val_loss"]),
                pct(r["val_degradation"]),
                pct(r["train_degradation"]),
                num(r["step_time_ms"], "{:.1f}"),
                num(r["step_time_ratio"], "{:.3f}x"),
                num(r["peak_memory_gib"], "{:.2f}"),
            ]
            for r in rows
        ],
    )


def recipes(json_out: bool = typer.Option(False, "--json", help="Machine-readable output (every field).")) -> None:
    """List the recipe presets with their fields."""
    import fourcast as fc

    items = [fc.recipe(n) for n in fc.recipes.names()]
    if json_out:
        emit_json([r.to_dict() for r in items])
        return

    def fmt(f):
        if f is None:
            return "bf16"
        if f["scale"] == "fp32":
            return f"{f['element']}/tensor"
        return f"{f['element']}/{f['scale']}x{'16x16' if f.get('tile_2d') else f['block']} {f['rule']}"

    rows = []
    for r in items:
        rht = f"{r.rht['size']} {','.join(r.rht['gemms'])} ({r.rht['signs']})" if r.rht["size"] else "off"
        keep = f"first {r.keep_bf16_first}, last {r.keep_bf16_last}" + (", head q" if r.quantize_head else "")
        rows.append([r.name, fmt(r.x), fmt(r.w), fmt(r.dy), rht, ",".join(r.sr) or "-", r.tensor_scale_refresh, f"{r.fp4_layers}/{r.other_precision}", keep])
    emit_table("fourcast recipes (change any field with --set field=value)", ["name", "x", "w", "dy", "rht", "sr", "ts refresh", "layers/other", "bf16 blocks"], rows)


def models(
    vocab: int = typer.Option(16384, "--vocab", help="Vocabulary size used for the parameter counts."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the model presets with their sizes and parameter counts."""
    import dataclasses

    from fourcast.train.config import MODEL_PRESETS, ModelConfig

    rows = []
    for name, fields in MODEL_PRESETS.items():
        m = ModelConfig(**fields, vocab_size=vocab)
        rows.append({"name": name, **dataclasses.asdict(m), "params": m.n_params(), "active_params": m.n_active_params()})
    if json_out:
        emit_json(rows)
        return
    emit_table(
        f"fourcast models (params with a {vocab}-token vocabulary)",
        ["name", "d_model", "layers", "heads", "ffn", "experts", "params (M)", "active (M)"],
        [[r["name"], r["d_model"], r["n_layers"], r["n_heads"], r["ffn_hidden"], f"{r['n_experts']} top-{r['top_k']}" if r["n_experts"] else "-", f"{r['params'] / 1e6:.1f}", f"{r['active_params'] / 1e6:.1f}"] for r in rows],
    )


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("compare")(compare)
    app.command("recipes")(recipes)
    app.command("models")(models)
