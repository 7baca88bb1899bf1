"""The GPU tier: every test here needs a CUDA device (CI deselects it with -m 'not gpu';
run directly without CUDA, each test skips with this reason)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("tests/gpu needs a CUDA device; CI deselects this tier with -m 'not gpu'")
