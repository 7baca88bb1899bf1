"""`fourcast hw list|show`, `fourcast gemm`, `fourcast whatif`: the hardware model from
the command line. Tables on stdout, `--json` for machines, the what-if chart as PNG."""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from fourcast.cli._output import emit_json

hw_app = typer.Typer(help="GPU descriptions the hardware model knows.", no_args_is_help=True)


def _split(text: Optional[str]) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _hw_sets(items: Optional[List[str]]) -> dict[str, str]:
    from fourcast.errors import HardwareError

    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HardwareError(f"--hw-set takes field=value (e.g. memory.hbm_tbs=10), got '{item}'")
        out[key.strip()] = value.strip()
    return out


@hw_app.command("list")
def hw_list(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Every built-in GPU with its peak rates (dense) and memory bandwidth."""
    from fourcast import hw

    rows = []
    for name in hw.names():
        h = hw.load(name)
        d = h.data
        by_class: dict[str, float] = {}
        for k in d["mma"]:
            by_class[k["class"]] = max(by_class.get(k["class"], 0.0), k["tflops"]["value"])
        rows.append({
            "name": name,
            "display": h.display,
            "vendor": h.vendor,
            "arch": h.arch,
            "bf16_tflops": by_class.get("bf16"),
            "fp8_tflops": by_class.get("fp8"),
            "fp4_tflops": by_class.get("fp4"),
            "hbm_tbs": d["memory"]["hbm_tbs"]["value"],
            "hbm_gb": d["memory"]["hbm_gb"]["value"],
            "preliminary": h.preliminary,
        })
    if json_out:
        emit_json(rows)
        return
    _wide_table(
        "fourcast hw list (dense TFLOP/s)",
        ["name", "GPU", "BF16", "FP8", "FP4", "HBM TB/s", "HBM GB", "note"],
        [[r["name"], r["display"], r["bf16_tflops"], r["fp8_tflops"] or "-", r["fp4_tflops"] or "-", r["hbm_tbs"], r["hbm_gb"],
          "preliminary" if r["preliminary"] else ""] for r in rows],
    )


@hw_app.command("show")
def hw_show(
    name: str = typer.Argument(..., help="A built-in GPU (fourcast hw list) or a .toml/.json file."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (the whole file)."),
) -> None:
    """Every number of one GPU with its source and confidence, and its MMA kinds."""
    from fourcast import hw

    h = hw.load(name)
    d = h.data
    if json_out:
        emit_json(d)
        return
    rows = []
    for section in ("chip", "memory", "links", "efficiency"):
        for key, n in d[section].items():
            rows.append([f"{section}.{key}", n["value"], n["confidence"], n["source"]])
    f = d["features"]["hw_sr"]
    rows.append(["features.hw_sr", f["value"], f["confidence"], f["source"]])
    _wide_table(f"{h.display} ({h.name})", ["field", "value", "confidence", "source"], rows)
    _wide_table(
        "MMA kinds (dense TFLOP/s)",
        ["kind", "A", "B", "block scales", "TN-only", "TFLOP/s", "confidence", "instruction"],
        [[k["name"], ",".join(k["a"]), ",".join(k["b"]), ",".join(k["scales"]), k["k_major_only"], k["tflops"]["value"],
          k["tflops"]["confidence"], k["instruction"]] for k in d["mma"]],
    )
    for note in d.get("notes", []):
        typer.echo(f"- {note}")


def gemm(
    hw_name: str = typer.Option("b200", "--hw", help="GPU name or .toml/.json file."),
    m: int = typer.Option(..., "--m", help="Rows of A and C."),
    n: int = typer.Option(..., "--n", help="Columns of B and C."),
    k: int = typer.Option(..., "--k", help="Reduction dimension."),
    fmt: str = typer.Option("bf16", "--format", help="bf16, fp8, mxfp8, mxfp4, nvfp4, ue5m3, e1m2, int4, ..."),
    fmt_b: Optional[str] = typer.Option(None, "--format-b", help="Format of B if it differs from A."),
    native: Optional[str] = typer.Option(None, "--native", help="What-if features, comma-separated (e.g. ue5m3,e1m2@0.5)."),
    hw_set: Optional[List[str]] = typer.Option(None, "--hw-set", help="Override a hardware value: field=value (repeatable)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Time of one GEMM, the MMA kind and path the model chooses, and the alternatives."""
    from fourcast import hw

    h = hw.load(hw_name, set=_hw_sets(hw_set))
    r = hw.gemm(h, m, n, k, fmt, fmt_b, native=native)
    if json_out:
        emit_json(r.to_dict())
        return
    typer.echo(f"{h.display}: {m}x{n}x{k} {fmt}{'' if fmt_b is None else ' x ' + fmt_b}")
    typer.echo(f"  {r.time_s * 1e3:.4f} ms, {r.tflops:.0f} TFLOP/s, {r.bound}-bound, kind {r.kind}")
    typer.echo(f"  path: {r.path}")
    _wide_table("every kind that can run it", ["kind", "ms", "path"], [[c["kind"], f"{c['time_s'] * 1e3:.4f}", c["path"]] for c in r.candidates])


def whatif(
    hw_names: Optional[str] = typer.Option(None, "--hw", help="GPUs, comma-separated (default: b200,b300,rubin,mi355x)."),
    model: str = typer.Option("llama3-8b", "--model", help="Model preset or .json/.toml file."),
    recipe: Optional[str] = typer.Option(None, "--recipe", help="Recipes (presets or files), comma-separated (default: bf16,nvfp4,mxfp4,ue5m3,ufp4)."),
    native: Optional[str] = typer.Option(
        None, "--native", help="Native sets, comma-separated; '+' joins features in one set (default: none,ue5m3,e1m2; e.g. none,ue5m3+sr,e1m2@0.5)."
    ),
    fp4_layers: Optional[str] = typer.Option(None, "--fp4-layers", help="Which linear layers are quantized: all, mlp or attn."),
    tokens_per_gpu: int = typer.Option(16384, "--tokens-per-gpu", help="Tokens per GPU per optimizer step."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (default: the model's)."),
    dp: int = typer.Option(1, "--dp", help="Data-parallel GPUs (gradient all-reduce on the scale-up links)."),
    sets: Optional[List[str]] = typer.Option(None, "--set", help="Recipe override field=value (repeatable), e.g. rht=none."),
    hw_set: Optional[List[str]] = typer.Option(None, "--hw-set", help="Hardware override field=value (repeatable), e.g. memory.hbm_tbs=30."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (one row per hw, recipe, native)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Save the chart here (default whatif.png unless --json or --no-plot)."),
    no_plot: bool = typer.Option(False, "--no-plot", help="Do not save a chart."),
) -> None:
    """Step time, tokens/s and MFU per (GPU, recipe, native features); with no
    arguments, the default study on llama3-8b."""
    from fourcast import hw
    from fourcast.recipes import parse_sets

    hws = _split(hw_names) or list(hw.DEFAULT_HW)
    recipes = _split(recipe) or list(hw.DEFAULT_RECIPES)
    natives = [n.replace("+", ",") for n in _split(native)] or list(hw.DEFAULT_NATIVES)
    overrides = _hw_sets(hw_set)
    machines = [hw.load(name, set=overrides) for name in hws]
    rows = hw.whatif(machines, model, recipes, natives, tokens_per_gpu=tokens_per_gpu, seq_len=seq_len, dp=dp,
                     fp4_layers=fp4_layers, set=parse_sets(sets))
    if json_out:
        emit_json([r.to_dict() for r in rows])
    else:
        _wide_table(
            f"fourcast whatif: {rows[0].model}, {tokens_per_gpu} tokens/GPU/step (model, not measurement)",
            ["hw", "recipe", "native", "step ms", "tok/s/GPU", "MFU", "vs bf16", "gain", "GEMM ms", "quant ms"],
            [[r.hw, r.recipe, "+".join(r.native) or "none", round(r.step_time_s * 1e3, 1), round(r.tokens_per_s_per_gpu),
              round(r.mfu, 3), f"{r.speedup_vs_bf16:.2f}x", f"{r.gain:.2f}x",
              round((r.breakdown["gemm"] + r.breakdown["gemm_hp"]) * 1e3, 1),
              round(sum(r.breakdown[c] for c in ("quantize", "amax", "rht", "sr")) * 1e3, 1)] for r in rows],
        )
        notes = sorted({n for r in rows for n in r.notes})
        for note in notes:
            typer.echo(f"- {note}")
    path = plot if plot else (None if (json_out or no_plot) else "whatif.png")
    if path and not no_plot:
        _chart(rows, path)
        typer.echo(f"chart saved to {path}", err=True)


def _wide_table(title: str, columns: list[str], rows: list[list]) -> None:
    """A rich table that never squeezes names when stdout is not a terminal."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        # Only the last column (sources, paths) may wrap.
        table.add_column(col, no_wrap=i < len(columns) - 1)
    for row in rows:
        table.add_row(*[f"{v:.6g}" if isinstance(v, float) else str(v) for v in row])
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


def _chart(rows, path: str) -> None:
    from fourcast.errors import require

    require("matplotlib", extra="plot")
    # Figure + Agg canvas directly: pyplot's import alone costs most of a second.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    hws = list(dict.fromkeys(r.hw for r in rows))
    recipes = list(dict.fromkeys(r.recipe for r in rows))
    natives = list(dict.fromkeys("+".join(r.native) or "none" for r in rows))
    fig = Figure(figsize=(3.2 * len(hws) + 1, 3.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(hws), sharey=True, squeeze=False)
    width = 0.8 / len(natives)
    top = max(r.tokens_per_s_per_gpu for r in rows) / 1e3
    for ax, name in zip(axes[0], hws):
        for j, nat in enumerate(natives):
            vals = []
            for rec in recipes:
                match = [r for r in rows if r.hw == name and r.recipe == rec and ("+".join(r.native) or "none") == nat]
                vals.append(match[0].tokens_per_s_per_gpu / 1e3 if match else 0.0)
            xs = [i + (j - (len(natives) - 1) / 2) * width for i in range(len(recipes))]
            ax.bar(xs, vals, width, label=f"native {nat}")
        ax.set_title(name)
        ax.set_xticks(range(len(recipes)))
        ax.set_xticklabels(recipes, rotation=45, ha="right")
        ax.set_ylim(0, top * 1.1)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("k tokens / s / GPU")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"fourcast whatif: {rows[0].model} (model, not measurement)")
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.25, top=0.86, wspace=0.08)
    fig.savefig(path, dpi=110)


def register(app: typer.Typer) -> None:
    app.add_typer(hw_app, name="hw")
    app.command("gemm")(gemm)
    app.command("whatif")(whatif)
