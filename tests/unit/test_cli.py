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
