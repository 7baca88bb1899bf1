"""benchmarks/kernels.py on the CPU (BENCH_SMOKE=1, Triton's interpreter, tiny shapes): every
section runs to its end with no error and every check it makes holds, so a script bug costs
no device time. The timings mean nothing here."""

import json
import os
import re
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks/kernels.py"


def run(tmp_path, *args, timeout=900):
    env = dict(os.environ, BENCH_SMOKE="1", TRITON_INTERPRET="1", OUT=str(tmp_path))
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def sections(tmp_path) -> list[str]:
    """The script's section names (--list)."""
    proc = run(tmp_path, "--list", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


@pytest.mark.interpret
@pytest.mark.slow
def test_every_section_runs_clean_on_the_cpu(tmp_path):
    proc = run(tmp_path, "--budget", "800")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "kernels-h200.json").read_text())
    assert res["errors"] == [], res["errors"]
    failed = [c["what"] for c in res["checks"] if not c["ok"]]
    assert res["checks"] and not failed, failed
    ran = len(re.findall(r"^\[ *[0-9.]+s\] == ", proc.stdout, re.M))  # harness.section's "== name" lines
    names = sections(tmp_path)
    assert names[0] == "meta" and "peer_quant" in names
    assert ran == len(names), f"{ran} of {len(names)} sections ran:\n{proc.stdout[-2000:]}"
    assert len(res["peer_quant"]) == 6 and all(q["agreement"]["row"]["within_one_step"] for q in res["peer_quant"])
    table = report(tmp_path / "kernels-h200.json")  # the markdown report reads what the run wrote
    peers = table.split("| row+col NVFP4 call |", 1)[1].split("\n\n", 1)[0]
    assert peers.count("\n| row+col nvfp4") == 6 and "vs compiled" in peers


def report(path) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/kernels_report.py"), str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_report_reads_the_committed_gpu_run():
    """kernels_report.py on the committed kernels-h200.json (session 14's GPU run, before the
    per-call peers): every table it has, and no peer table."""
    table = report(ROOT / "benchmarks/results/kernels-h200.json")
    assert "NVIDIA H200" in table and "| packed GEMM" in table and "| row+col NVFP4 call" not in table


@pytest.mark.interpret
def test_a_misspelt_section_is_an_error(tmp_path):
    proc = run(tmp_path, "--only", "peer_quant,gemm_bnech", timeout=300)
    assert proc.returncode == 2
    assert "no section gemm_bnech" in proc.stderr and "gemm_bench" in proc.stderr


@pytest.mark.interpret
def test_bad_shapes_are_an_error(tmp_path):
    proc = run(tmp_path, "--only", "quant_checks", "--shapes", "32768x768,2304", timeout=300)
    assert proc.returncode == 2 and "not a list of RxC shapes" in proc.stderr
