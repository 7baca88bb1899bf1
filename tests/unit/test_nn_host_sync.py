"""No host-device synchronisation in QLinear's per-step hot path (CUDA code path).

A GPU training step of a small model is host-bound, and each sync (Tensor.item,
bool/float/int of a tensor, a tensor built from Python data and copied to the device)
drains the launch queue. This runs QLinear forward+backward through the CUDA branch of
fourcast.kernels on CPU tensors (Tensor.is_cuda forced True, the Triton kernels replaced
by no-ops, the bf16 GEMM by a CPU matmul) and counts every such call: there must be none.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import fourcast as fc
from fourcast import nn as fcnn

pytest.importorskip("triton")

from fourcast.kernels import gemm as gk  # noqa: E402
from fourcast.kernels import ops  # noqa: E402
from fourcast.kernels import quantize as qk  # noqa: E402
from fourcast.kernels import utils  # noqa: E402

SYNC_METHODS = ("item", "__bool__", "__float__", "__int__", "tolist")


class _NoLaunch:
    def __init__(self, log: list):
        self.log = log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append(grid)


@contextlib.contextmanager
def cuda_path_on_cpu(launches: list):
    kernels = ("_quantize_kernel", "_rowcol_kernel", "_dequantize_kernel")
    saved = {name: getattr(qk, name) for name in kernels}
    saved_mm = gk._mm_f32
    try:
        for name in kernels:
            setattr(qk, name, _NoLaunch(launches))
        gk._mm_f32 = lambda a, b: torch.mm(a.float(), b.float())
        torch.Tensor.is_cuda = property(lambda self: True)
        yield
    finally:
        del torch.Tensor.is_cuda
        for name, k in saved.items():
            setattr(qk, name, k)
        gk._mm_f32 = saved_mm


@contextlib.contextmanager
def count_syncs():
    counts: dict[str, int] = {}
    originals = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}
    new_fns = {"tensor": torch.tensor, "as_tensor": torch.as_tensor}

    def wrap(name, fn):
        def inner(*a, **k):
            counts[name] = counts.get(name, 0) + 1
            return fn(*a, **k)

        return inner

    def wrap_new(name, fn):
        def inner(data, *a, **k):
            if not isinstance(data, torch.Tensor):  # Python data -> a host->device copy on CUDA
                counts[name] = counts.get(name, 0) + 1
            return fn(data, *a, **k)

        return inner

    try:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, wrap(name, fn))
        for name, fn in new_fns.items():
            setattr(torch, name, wrap_new(name, fn))
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
        for name, fn in new_fns.items():
            setattr(torch, name, fn)


def _fwd_bwd(layer, x, gy, step):
    layer.step = step
    layer(x).backward(gy)


@pytest.mark.parametrize(
    "recipe",
    [
        fc.recipe("nvfp4"),  # RHT on wgrad, SR on dy, 2D weight tiles
        fc.recipe("mxfp4"),
        fc.recipe("nvfp4", **{"rht.signs": "per-step", "rht.gemms": ["fprop", "dgrad", "wgrad"]}),
        fc.recipe("nvfp4", tensor_scale_refresh=4),  # stored tensor amax, refresh steps
    ],
    ids=["nvfp4", "mxfp4", "nvfp4-rht-all-per-step", "nvfp4-refresh4"],
)
def test_qlinear_cuda_path_makes_no_sync(recipe):
    torch.manual_seed(0)
    layer = fcnn.QLinear(64, 32, bias=True, recipe=recipe, layer_id=2)
    layer.weight.data = layer.weight.data.bfloat16()
    layer.bias.data = layer.bias.data.bfloat16()
    x = torch.randn(128, 64, dtype=torch.bfloat16, requires_grad=True)
    gy = torch.randn(128, 32, dtype=torch.bfloat16)
    launches: list = []
    with cuda_path_on_cpu(launches):
        _fwd_bwd(layer, x, gy, 0)  # first step: sign vectors made and checked, caches filled
        for step in range(1, 6):  # steady state, refresh and non-refresh steps
            before = len(launches)
            with count_syncs() as counts:
                _fwd_bwd(layer, x, gy, step)
            assert counts == {}, f"step {step}: host-device syncs in the hot path: {counts}"
            assert len(launches) > before  # the CUDA branch really ran


def test_sync_counter_sees_the_old_per_call_sign_check():
    """The harness can fail: a sign vector not known to be +-1 is checked by reading it
    back (a sync on CUDA), once; rht_signs vectors never are."""
    fresh = torch.tensor([1.0, -1.0] * 8)
    with count_syncs() as counts:
        utils.check_rht((16, fresh))
    assert counts.get("__bool__") == 1
    with count_syncs() as counts:
        utils.check_rht((16, fresh))  # checked once already
        utils.check_rht((16, ops.rht_signs(16, "per-step", 7)))
    assert counts == {}


def test_sign_check_still_rejects_bad_signs_and_in_place_changes():
    bad = torch.ones(16)
    bad[3] = 0.5
    with pytest.raises(fc.errors.FormatError):
        utils.check_rht((16, bad))
    good = ops.rht_signs(16, "te")
    utils.check_rht((16, good))
    good[0] = 2.0  # an in-place change bumps the version: checked again
    with pytest.raises(fc.errors.FormatError):
        utils.check_rht((16, good))
