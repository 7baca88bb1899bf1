"""benchmarks/host_overhead.py runs on a machine without a GPU, as its doc says: in a child
process without TRITON_INTERPRET (the tests' conftest sets it, and under the interpreter the
Gluon routing never asks the device), a few iterations of each recipe, no sync-prone call.
Since the Gluon row+col route (session 17) the script had asked the missing driver for the
device's capability and failed."""

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "host_overhead.py"


def test_host_overhead_runs_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no device, even on the GPU machine
    out = subprocess.run([sys.executable, str(SCRIPT), "--iters", "5"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if "fwd+bwd host time" in ln]
    assert len(lines) == 2 and all(ln.endswith("sync-prone calls per fwd+bwd: none") for ln in lines), out.stdout
