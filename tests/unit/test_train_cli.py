"""`fourcast train / compare / recipes / models`: output, and one-line errors with a hint."""

import json
import subprocess
import sys

import pytest
import torch

import fourcast as fc
from fourcast.cli import main


@pytest.fixture(autouse=True)
def one_thread(monkeypatch, tmp_path):
    monkeypatch.setenv("FOURCAST_CACHE", str(tmp_path / "cache"))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def text(shared_data, tmp_path):
    path = tmp_path / "text.txt"
    path.write_bytes((shared_data / "corpus" / "val" / "sotu.txt").read_bytes()[:100_000])
    return path


def _train_args(text, out, *extra):
    return ["train", "--recipe", "bf16", "--model", "tiny,n_layers=1", "--data", str(text), "--out", str(out),
            "--steps", "3", "--batch", "2", "--seq", "64", "--no-progress", "--set", "train.eval_batches=1", *extra]  # fmt: skip


def test_train_prints_a_summary_and_compare_reads_runs(text, tmp_path, capsys):
    assert main(_train_args(text, tmp_path / "a") + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["recipe"] == "bf16" and summary["steps"] == 3
    assert main(_train_args(text, tmp_path / "b", "--seed", "1")) == 0
    assert "train loss (first -> final)" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "--plot", str(tmp_path / "c.png")]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["recipe"] for r in rows] == ["bf16", "bf16"] and rows[0]["step_time_ratio"] == 1
    assert (tmp_path / "c.png").is_file()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    table = capsys.readouterr().out
    assert "against a" in table and "1.000×" not in table and "1.000x" in table


def test_recipes_and_models_listing(capsys):
    assert main(["recipes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == fc.recipes.names()
    assert rows[3]["rht"]["gemms"] == ["wgrad"] and rows[3]["keep_bf16_last"] == 2
    assert main(["recipes"]) == 0
    assert "ufp4" in capsys.readouterr().out
    assert main(["models", "--json"]) == 0
    models = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert {"tiny", "125m", "350m", "moe-tiny"} <= set(models)
    assert models["moe-125m"]["active_params"] < models["moe-125m"]["params"]


BAD = [
    (["--data", "{tmp}/nope.txt"], "data path not found", "pass a .txt file"),
    (["--data", "{tmp}/emptydir"], "has no .txt files", "plain-text"),
    (["--recipe", "fp3"], "fp3", "nvfp4"),
    (["--model", "huge"], "unknown model preset 'huge'", "presets: tiny"),
    (["--model", "350m", "--batch", "64", "--seq", "2048", "--device", "cpu"], "needs about", "use a smaller --model"),
    (["--resume"], "no checkpoint", "run without --resume"),
    (["--recipe", "nvfp4", "--model", "tiny", "--batch", "1", "--seq", "8"], "not a multiple of 16", "change --batch or --seq"),
    (["--set", "rht.size=7"], "rht.size", "16"),
    (["--set", "train.nope=1"], "no field 'nope'", "fields:"),
]


@pytest.mark.parametrize("change, problem, hint", BAD, ids=[b[1] for b in BAD])
def test_bad_input_is_a_one_line_error_with_a_hint(text, tmp_path, capsys, change, problem, hint):
    (tmp_path / "emptydir").mkdir()
    args = _train_args(text, tmp_path / "run")
    for i in range(0, len(change), 2):
        flag, value = change[i], change[i + 1] if i + 1 < len(change) else None
        value = value.replace("{tmp}", str(tmp_path)) if value else value
        if flag in args and flag not in ("--set",):
            args[args.index(flag) + 1] = value
        elif value is None:
            args.append(flag)
        else:
            args += [flag, value]
    if change == ["--resume"]:
        args.append("--resume")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("Error: ") and "\n" not in err, err
    assert problem in err and hint in err, err


def test_no_cuda_is_said_not_papered_over(text, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-CUDA error, so it needs a machine without CUDA")
    assert main(_train_args(text, tmp_path / "r", "--device", "cuda")) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_reusing_a_run_folder_needs_resume(text, tmp_path, capsys):
    assert main(_train_args(text, tmp_path / "r")) == 0
    capsys.readouterr()
    assert main(_train_args(text, tmp_path / "r")) == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err


def test_error_from_the_installed_command_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fourcast.cli", "train", "--recipe", "bf16", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: data path not found") and "Traceback" not in proc.stderr


def test_project_to_needs_cuda_and_says_so_before_training(text, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(_train_args(text, out, "--device", "cpu", "--project-to", "b200")) == 2
    assert "--project-to needs a CUDA run" in capsys.readouterr().err
    assert not out.exists()  # nothing was trained
