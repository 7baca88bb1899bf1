"""Test tiers: tests/unit (CPU), tests/interpret (Triton kernels under
TRITON_INTERPRET=1, set here before any kernel module is imported), tests/gpu (CUDA).
The GPU tier runs only on a machine with a CUDA device; elsewhere it is deselected by
.ci/run (not silently skipped): see README."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

try:  # Triton's interpreter must be chosen before triton.jit runs anywhere.
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    """A GPU-tier test run without a CUDA device skips, saying why (CI deselects the tier by
    marker; on the GPU machine every one runs)."""
    if _HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: the GPU tier runs on the GPU machine (README)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    path = SHARED / "data"
    if not path.is_dir():
        pytest.fail(f"shared data folder missing at {path}")
    return path
