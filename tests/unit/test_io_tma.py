"""benchmarks/kernel_bench/io_tma.py's TMA io floor without a GPU: it compiles for sm_90a with
this Triton (the device runs 3.6) into what its design says: the tile arrives by TMA only (two
2-D loads a stage, no global loads), both layouts read it from shared memory, no spills. Its
bytes are checked on the GPU by the section itself (_io_one_lane_ok). In a child process with a
fresh Triton cache, as test_rowcol_gluon.py's compiles."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("triton.experimental.gluon.nvidia.hopper", reason="this Triton has no Gluon")

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"

_CHILD = r"""
import json, os, re, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[2])
import triton
from kernel_bench import io_tma

k = io_tma.compile_sm90(int(sys.argv[1]), int(sys.argv[3]))
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(k.asm["cubin"])
    f.flush()
    res = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True,
                         check=True).stdout
    sass = subprocess.run([os.path.join(bin_dir, "nvdisasm"), "-c", f.name], capture_output=True, text=True,
                          check=True).stdout
ptx = k.asm["ptx"]
print(json.dumps(dict(spilled=sum(int(re.search(rf"{m}:(\d+)", res).group(1)) for m in ("LOCAL", "STACK")),
                      tma=sass.count("UTMALDG.2D"), ld_global=len(re.findall(r"ld\.global", ptx)),
                      ld_shared_v4=len(re.findall(r"ld\.shared\.v4", ptx)), shared=k.metadata.shared)))
"""


@pytest.mark.parametrize("stages,col_layout", [(2, 0), (4, 0), (3, 1)])
def test_tma_floor_compiles_as_designed(stages, col_layout):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as cache:
        env["TRITON_CACHE_DIR"] = cache
        out = subprocess.run([sys.executable, "-c", _CHILD, str(stages), str(BENCH), str(col_layout)],
                             capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # STAGES - 1 tiles issued ahead, then one a loop trip: two loads (rows 2i, rows 2i + 1) each
    assert got["tma"] == 2 * stages and got["ld_global"] == 0 and got["spilled"] == 0, got
    assert got["ld_shared_v4"] >= 4, got  # the row layout's 16-byte reads of both halves
    assert got["shared"] >= stages * 16384, got  # a stage: 2 x 32 rows x 64 words
