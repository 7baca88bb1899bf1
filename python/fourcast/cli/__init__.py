"""The `fourcast` command. One typer app; each command group lives in its own module
and adds itself with `register(app)`. `main` is the one error boundary: a fourcast
error prints a one-line `Error: ...` (full traceback with --debug) and exits 2."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer

from fourcast.cli import bias, formats, hw, project, train

app = typer.Typer(
    name="fourcast",
    help="4-bit LLM training: bit-exact codecs, FP4 emulation, bias analysis, hardware what-ifs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_DEBUG = {"on": False}


def _version(value: bool) -> None:
    if value:
        from fourcast import __version__

        typer.echo(f"fourcast {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    _DEBUG["on"] = debug


for _group in (bias, formats, hw, project, train):
    _group.register(app)


def main(argv: list[str] | None = None) -> int:
    from fourcast.errors import FourcastError

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app(args=argv, standalone_mode=False)
    except FourcastError as exc:
        if debug:
            raise
        typer.echo(f"Error: {exc}", err=True)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("Aborted.", err=True)
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):  # click usage errors
            exc.show()
            return exc.exit_code
        if debug:
            raise
        typer.echo(f"Error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        return 1
    return 0


def console() -> NoReturn:
    """The installed `fourcast` command and `python -m fourcast.cli`."""
    exit_process(main())


def exit_process(code: int) -> NoReturn:
    """End the process with `code`; after training over gloo, without interpreter
    finalization (os._exit after flushing stdout and stderr). torch leaves the gloo group's
    worker threads running (train.loop._GLOO_USED says why), and one that frees a collective's
    tensors while the interpreter finalizes aborts the process: a rank's core dump, from a
    loaded 2-core machine after a run that had written everything, showed exactly that
    (ProcessGroupGloo::runLoop -> ~AsyncAllgatherCoalescedWork -> take_gil -> pthread_exit
    -> std::terminate)."""
    loop = sys.modules.get("fourcast.train.loop")  # loaded only by commands that train
    if loop is not None and loop.gloo_used():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
