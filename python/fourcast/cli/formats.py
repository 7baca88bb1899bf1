"""`fourcast formats`: every element grid, scale format and preset with their ranges."""

from __future__ import annotations

import typer

from fourcast.cli._output import emit_json, emit_table


def formats(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List every element grid, scale format and preset with their ranges."""
    from fourcast import _core

    rows = _core.format_catalogue()
    if json_out:
        emit_json(rows)
        return
    emit_table(
        "fourcast formats",
        ["name", "kind", "bits", "max", "min positive", "note"],
        [[r["name"], r["kind"], r["bits"], r["max"], r["min_positive"], r["note"]] for r in rows],
    )


def register(app: typer.Typer) -> None:
    app.command("formats")(formats)
