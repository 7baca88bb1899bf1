"""`fourcast project RUN_DIR --to b200,b300,rubin,mi355x [--native ue5m3,e1m2]`."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from fourcast.cli._output import emit_json, emit_table


def project_cmd(
    run_dir: str = typer.Argument(..., help="Run folder of a CUDA `fourcast train --profile-steps` run."),
    to: str = typer.Option("b200,b300,rubin,mi355x", "--to", help="Target GPUs, comma-separated (names or .toml paths)."),
    native: str = typer.Option("", "--native", help="What-if native features, comma-separated (e.g. ue5m3,e1m2)."),
    no_correct: bool = typer.Option(False, "--no-correct", help="Do not correct classes by the H200 measured/predicted ratio."),
    other_from: Optional[str] = typer.Option(None, "--other-from", help="A BF16 run of the same model whose 'other' time replaces this run's (drops emulation host overhead)."),
    out: Optional[str] = typer.Option(None, "--out", help="Folder for projection.{json,md,png} (default: RUN_DIR)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Forecast a measured H200 run on other GPUs through the hardware model."""
    from fourcast import project

    rep = project.project(run_dir, to.split(","), [n for n in native.split(",") if n], correct=not no_correct,
                          other_from=other_from)
    paths = project.write_report(rep, out or run_dir)
    if json_out:
        emit_json(rep.to_dict())
        return
    gpu, gpred, gerr = rep.measured_gpu or {}, rep.h200_model_gpu or {}, rep.h200_error_gpu or {}
    emit_table(
        f"H200 measured vs model ({rep.recipe}; GPU time: "
        + (f"timeline step {rep.gpu_step})" if rep.measured_gpu else "not recorded)"),
        ["class", "events ms", "model ms", "error", "GPU ms", "model ms", "error"],
        [[c, rep.measured.get(c, 0.0), rep.h200_model.get(c, ""), f"{rep.h200_error[c]:+.1%}" if c in rep.h200_error else "",
          gpu.get(c, ""), gpred.get(c, ""), f"{gerr[c]:+.1%}" if c in gerr else ""]
         for c in ("gemm", "quantize", "attention", "optimizer", "dequantize", "other", "step")],
    )
    emit_table(
        "Projection",
        ["target", "native", "step ms", "tokens/s/GPU", "MFU", "vs H200", "gain", "preliminary"],
        [[r["hw"], ",".join(r["native"]), r["step_time_s"] * 1e3, round(r["tokens_per_s_per_gpu"]),
          "" if r["mfu"] is None else f"{r['mfu']:.1%}", f"{r['speedup_vs_h200']:.2f}x",
          f"{r['gain']:+.1%}" if "gain" in r else "", "yes" if r["preliminary"] else ""] for r in rep.targets],
    )
    print(f"report: {paths['md']}, {paths['png']}, {paths['json']}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("project")(project_cmd)
