"""`fourcast bias`: JSON equals the API, bad names are one-line errors, plots, --run."""

import json

import numpy as np
import pytest

from fourcast import bias as fb
from fourcast.cli import main

SMALL = ["--grid", "e2m1,e1m2", "--dist", "gaussian,laplace", "--rht", "0,16", "--rounding", "rtne,sr",
         "--size", "8x128", "--seed", "3"]


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_json_equals_the_api(capsys):
    out = _json(capsys, ["bias", *SMALL, "--json"])
    api = fb.study(["e2m1", "e1m2"], ["nv"], ["gaussian", "laplace"], ["rtne", "sr"], [0, 16], (8, 128), 3)
    assert out == {"study": json.loads(fb.dumps(api))}


def test_depth_json_equals_the_api(capsys):
    argv = ["bias", "--grid", "int4", "--dist", "gaussian", "--rht", "0", "--rounding", "rtne", "--size", "4x64",
            "--depth", "3", "--width", "64", "--tokens", "16", "--stack", "mlp", "--json"]
    out = _json(capsys, argv)
    api = fb.depth(["int4"], "nv", [0], ["rtne"], 3, 64, 16, ["mlp"], seed=0)
    assert out["depth"] == json.loads(fb.dumps(api))


def test_table_output(capsys):
    assert main(["bias", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "e2m1/nv" in out and "laplace" in out and "bias %" in out


@pytest.mark.parametrize(
    "flag, value, words",
    [
        ("--dist", "cauchy", ["distribution 'cauchy'", "gaussian, laplace, student-t, lognormal"]),
        ("--grid", "fp3", ["grid or preset 'fp3'", "e2m1", "int4"]),
        ("--rounding", "floor", ["rounding 'floor'", "rtne, away, sr"]),
        ("--rht", "12", ["RHT size '12'", "0, 16, 32, 64, 128"]),
        ("--scale", "ue4m4", ["scale rule 'ue4m4'", "nv, mx"]),
    ],
)
def test_bad_names_are_one_line_errors(capsys, flag, value, words):
    assert main(["bias", "--size", "4x64", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1
    for w in words:
        assert w in err


def test_run_without_tensors_says_how_to_capture(capsys, tmp_path):
    assert main(["bias", "--run", str(tmp_path)]) == 2
    assert "fourcast train ... --capture-every K" in capsys.readouterr().err


def test_run_json_equals_the_api(capsys, tmp_path):
    step = tmp_path / "tensors" / "step000000"
    step.mkdir(parents=True)
    np.save(step / "fc.x.npy", fb.synthetic("gaussian", (32, 64), seed=1))
    out = _json(capsys, ["bias", "--run", str(tmp_path), "--grid", "e2m1", "--rht", "0,16", "--rounding", "rtne",
                         "--json"])
    api = fb.analyse_run(tmp_path, ["e2m1"], "nv", [0, 16], ["rtne"])
    assert out == json.loads(fb.dumps(api))
    assert {s["operand"] for s in out["summary"]} == {"fprop.x", "wgrad.x"}


def test_plots_are_written(capsys, tmp_path):
    png = tmp_path / "bias.png"
    argv = ["bias", "--grid", "e2m1,e1m2", "--dist", "gaussian", "--rht", "0,16", "--rounding", "rtne",
            "--size", "4x64", "--depth", "2", "--width", "32", "--tokens", "8", "--plot", str(png)]
    assert main(argv) == 0
    for path in (png, tmp_path / "bias-depth.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_plot_is_written(capsys, tmp_path):
    for step in (0, 1):
        d = tmp_path / "tensors" / f"step{step:06d}"
        d.mkdir(parents=True)
        np.save(d / "fc.dy.npy", fb.synthetic("laplace", (32, 64), seed=step))
    png = tmp_path / "run.png"
    assert main(["bias", "--run", str(tmp_path), "--grid", "e2m1", "--rht", "0", "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "dgrad.dy" in capsys.readouterr().out
