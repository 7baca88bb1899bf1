"""benchmarks/kernel_bench/io_tma.py's TMA io floor without a GPU: it compiles for sm_90a with
this Triton (the device runs 3.6) into what its design says: the tile arrives by TMA only (two
2-D loads a stage, no global loads), both layouts read it from shared memory, no spills. Its
bytes are checked on the GPU by the section itself (_io_one_lane_ok). In a child process with a
fresh Triton cache (testing.compiled_in_child)."""

import pathlib

import pytest

from fourcast.kernels import testing

pytest.importorskip("triton.experimental.gluon.nvidia.hopper", reason="this Triton has no Gluon")

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"

_CHILD = r"""
import json, re, sys
sys.path.insert(0, sys.argv[2])
from fourcast.kernels import testing
from kernel_bench import io_tma

k = io_tma.compile_sm90(int(sys.argv[1]), int(sys.argv[3]))
ptx = k.asm["ptx"]
print(json.dumps(dict(spilled=testing.spilled_bytes(k),
                      tma=testing.cuda_tool(k, "nvdisasm", "-c").count("UTMALDG.2D"),
                      ld_global=len(re.findall(r"ld\.global", ptx)),
                      ld_shared_v4=len(re.findall(r"ld\.shared\.v4", ptx)), shared=k.metadata.shared)))
"""


@pytest.mark.parametrize("stages,col_layout", [(2, 0), (4, 0), (3, 1)])
def test_tma_floor_compiles_as_designed(stages, col_layout):
    got = testing.compiled_in_child(_CHILD, str(stages), str(BENCH), str(col_layout))
    # STAGES - 1 tiles issued ahead, then one a loop trip: two loads (rows 2i, rows 2i + 1) each
    assert got["tma"] == 2 * stages and got["ld_global"] == 0 and got["spilled"] == 0, got
    assert got["ld_shared_v4"] >= 4, got  # the row layout's 16-byte reads of both halves
    assert got["shared"] >= stages * 16384, got  # a stage: 2 x 32 rows x 64 words
