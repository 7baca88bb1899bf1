"""kernels/launcher.py on the GPU: a launch through the cached fast path writes the same
bits as Triton's own launch, and a new argument class (a pointer off 16-byte alignment,
a size that is not a multiple of 16) takes a new entry and stays exact."""

import pytest
import torch

from fourcast.kernels import launcher
from fourcast.kernels import quantize as qk
from fourcast.kernels import testing
from fourcast.kernels.testing import check_quantizer as check

pytestmark = pytest.mark.gpu
F = testing.FORMATS
DEV = "cuda"


def _rowcol(x):
    row, col = qk.quantize_rowcol(x, F["ue5m3"], F["ue5m3"], "sr4", "sr4", 11, 2**33, None, None)
    return [t.clone() for p in (row, col) for t in (p.codes, p.scales, p.tensor_scale)]


def test_fast_launch_writes_the_bits_of_a_triton_launch(monkeypatch):
    x = testing.make_input("heavy", (1024, 2048), torch.bfloat16, DEV, seed=4)
    monkeypatch.setattr(launcher, "ENABLED", False)
    want = _rowcol(x)
    monkeypatch.setattr(launcher, "ENABLED", True)
    launcher._CACHE.clear()
    fast = launcher.STATS["fast"]
    for _ in range(3):  # the first fills the cache, the others launch through it
        got = _rowcol(x)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert launcher.STATS["fast"] >= fast + 2
    testing.check_rowcol(x, F["ue5m3"], "sr4", "sr4", 11, 2**33)  # and the reference's bits


def test_a_new_argument_class_takes_a_new_entry_and_stays_exact():
    x = testing.make_input("heavy", (1000, 96), torch.bfloat16, DEV, seed=5)
    buf = torch.empty(x.numel() + 8, dtype=torch.bfloat16, device=DEV)
    shifted = buf[1:1 + x.numel()].view(x.shape)  # data_ptr 2 bytes off 16-byte alignment
    shifted.copy_(x)
    assert shifted.data_ptr() % 16
    for t in (x, shifted, x, shifted):
        check(t, F["nvfp4"], rounding="sr", seed=7, offset=2**33)
        check(t, F["mxfp4"])
