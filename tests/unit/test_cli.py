import json
import subprocess
import sys

from fourcast.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("fourcast ")


def test_formats_json(capsys):
    assert main(["formats", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in rows}
    assert "e2m1" in names


def test_bad_command_is_one_line_error():
    proc = subprocess.run([sys.executable, "-m", "fourcast.cli", "no-such-command"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "No such command" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_exit_process_skips_finalization_only_after_gloo_training():
    """After training over gloo, the command ends without interpreter finalization (atexit
    handlers do not run; cli.exit_process says why), its output flushed; otherwise it exits
    as usual. Both keep the exit code."""
    script = (
        "import atexit, sys\n"
        "from fourcast.cli import exit_process\n"
        "from fourcast.train import loop\n"
        "loop._GLOO_USED[0] = sys.argv[1] == 'gloo'\n"
        "atexit.register(lambda: print('finalized'))\n"
        "print('trained', end='')\n"
        "exit_process(3)\n"
    )
    for mode, tail in (("gloo", "trained"), ("none", "trainedfinalized\n")):
        proc = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True)
        assert (proc.returncode, proc.stdout, proc.stderr) == (3, tail, ""), mode
