"""`fourcast bias`: shrinkage bias per grid, scale rule, rounding and RHT, on synthetic
tensors, through deep random stacks (--depth), or on tensors captured in a run (--run)."""

from __future__ import annotations

import contextlib
import pathlib
from typing import Iterator, Optional

import typer

from fourcast.cli._output import emit_json, emit_table


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _sizes(text: str) -> list[int]:
    from fourcast.bias import RHT_SIZES
    from fourcast.errors import FormatError

    out = []
    for t in _names(text):
        try:
            out.append(int(t))
        except ValueError:
            raise FormatError(f"unknown RHT size '{t}'; valid: {', '.join(map(str, RHT_SIZES))}") from None
    return out


def _shape(text: str) -> tuple[int, int]:
    from fourcast.errors import FormatError

    rows, sep, cols = text.lower().partition("x")
    if not sep or not rows.isdigit() or not cols.isdigit():
        raise FormatError(f"--size must look like ROWSxCOLS (e.g. 128x4096), got '{text}'")
    return int(rows), int(cols)


@contextlib.contextmanager
def _progress(label: str, enabled: bool) -> Iterator:
    """A rich progress bar on stderr (data stays alone on stdout); only on a terminal."""
    from rich.console import Console

    console = Console(stderr=True)
    if not (enabled and console.is_terminal):
        yield None
        return
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def bias(
    grid: str = typer.Option("e2m1,e1m2,int4", "--grid", help="Element grids, comma-separated (e2m1, e1m2, int4, int4-sm)."),
    scale: str = typer.Option("nv", "--scale", help="Scale rules: nv (E4M3 block-16, TE two-level), mx (UE8M0 block-32 floor), mx-rceil, ue5m3."),
    dist: str = typer.Option(
        "gaussian,laplace,student-t:3,lognormal:1,gaussian+outliers",
        "--dist",
        help="Synthetic distributions: gaussian, laplace, student-t[:nu], lognormal[:sigma], relu, each optionally +outliers.",
    ),
    rht: str = typer.Option("0,16,128", "--rht", help="RHT sizes (0 = none; 16, 32, 64, 128)."),
    rounding: str = typer.Option("rtne,sr", "--rounding", help="Roundings: rtne, away, sr."),
    depth: int = typer.Option(0, "--depth", help="Also run the deep-stack study with this many layers."),
    stack: str = typer.Option("linear,mlp", "--stack", help="Deep stacks for --depth: linear, mlp."),
    width: int = typer.Option(1024, "--width", help="Width of the --depth stacks."),
    tokens: int = typer.Option(256, "--tokens", help="Rows (tokens) pushed through the --depth stacks."),
    size: str = typer.Option("128x4096", "--size", help="Synthetic tensor shape ROWSxCOLS."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data, RHT signs and SR."),
    run: Optional[pathlib.Path] = typer.Option(None, "--run", help="Analyse tensors captured in this run folder instead."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    plot: Optional[pathlib.Path] = typer.Option(None, "--plot", help="Write PNG plots (bucket histograms; bias vs depth with --depth)."),
) -> None:
    """Measure shrinkage bias (signed bias, RMSE, SQNR, bucket use) per grid x scale x rounding x RHT."""
    from fourcast import bias as fb

    grids, scales, roundings, rhts = _names(grid), _names(scale), _names(rounding), _sizes(rht)
    show = not json_out
    if run is not None:
        with _progress("analysing captured tensors", show) as tick:
            analysis = fb.analyse_run(
                run, grids=grids, scale=scales, rhts=rhts, roundings=roundings, seed=seed, progress=tick
            )
        if plot is not None:
            typer.echo(f"wrote {fb.plot_run(analysis, plot)}", err=True)
        if json_out:
            emit_json(analysis)
            return
        emit_table(
            f"fourcast bias: {run} ({len(analysis.steps)} steps, {len(analysis.layers)} layers)",
            ["operand", "format", "round", "RHT", "n", "bias %", "min %", "max %", "rRMSE"],
            [
                [s["operand"], s["format"], s["rounding"], s["rht"], s["tensors"], f"{100 * s['bias_mean']:+.3f}",
                 f"{100 * s['bias_min']:+.3f}", f"{100 * s['bias_max']:+.3f}", f"{s['rel_rmse_mean']:.4f}"]
                for s in analysis.summary()
            ],
        )
        return

    with _progress("synthetic study", show) as tick:
        result = fb.study(grids, scales, _names(dist), roundings, rhts, _shape(size), seed, progress=tick)
    deep = None
    if depth > 0:
        with _progress("depth study", show) as tick:
            deep = fb.depth(
                grids, scales, rhts, roundings, depth, width, tokens, _names(stack), seed=seed, progress=tick
            )
    if plot is not None:
        written = [fb.plot_histograms(result, plot)]
        if deep is not None:
            written.append(fb.plot_depth(deep, plot.with_name(plot.stem + "-depth" + plot.suffix)))
        typer.echo("wrote " + ", ".join(str(p) for p in written), err=True)
    if json_out:
        emit_json({"study": result.to_dict(), **({"depth": deep.to_dict()} if deep is not None else {})})
        return
    emit_table(
        f"fourcast bias: synthetic {result.shape[0]}x{result.shape[1]}, seed {seed}",
        ["dist", "format", "round", "RHT", "bias %", "rRMSE", "SQNR", "gain", "H bits"],
        [
            [r["dist"], r["format"], r["rounding"], r["rht"], f"{100 * r['bias']:+.3f}", f"{r['rel_rmse']:.4f}",
             "inf" if r["sqnr_db"] is None else f"{r['sqnr_db']:.2f}", f"{r['gain']:.4f}",
             f"{r['value_entropy_bits']:.2f}"]
            for r in result.rows
        ],
    )
    if deep is not None:
        emit_table(
            f"depth study: {deep.depth} layers, width {deep.width}, {deep.tokens} tokens",
            ["stack", "format", "round", "RHT", "mean b %", "prod(1+b)", "prod g", "gain", "norm"],
            [
                [c["stack"], c["format"], c["rounding"], c["rht"], f"{100 * sum(c['bias']) / len(c['bias']):+.3f}",
                 f"{c['depth_product'][-1]:.4f}", f"{c['gain_product'][-1]:.4f}", f"{c['gain'][-1]:.4f}",
                 f"{c['norm_ratio'][-1]:.4f}"]
                for c in deep.curves
            ],
        )


def register(app: typer.Typer) -> None:
    app.command("bias")(bias)
