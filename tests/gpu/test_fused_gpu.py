"""The fused QLinear path and the transpose-free row+col quantizer on a CUDA device:
QLinear outputs and all three gradients of gemm_path="fused" equal the "dequant" path
bit for bit for every preset (same codes, decoded in the quantizer instead of a
dequantize pass), and the row+col kernels' outputs (strip, the default for block formats;
transposing) equal the reference at real sizes, RHTs and every SR tile included."""

import pytest
import torch

import fourcast as fc
from fourcast import nn as fcnn
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

pytestmark = pytest.mark.gpu
F = testing.FORMATS
DEV = "cuda"


def _run(recipe, path, x, w, gy):
    layer = fcnn.QLinear(w.shape[1], w.shape[0], bias=False, recipe=recipe, layer_id=3, seed=5, gemm_path=path)
    layer = layer.to(DEV)
    with torch.no_grad():
        layer.weight.copy_(w)
    layer.step = 4
    x = x.clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = layer(x)
    y.backward(gy)
    return y.detach(), x.grad, layer.weight.grad


@pytest.mark.parametrize("name", fc.recipes.names())
def test_fused_equals_dequant_on_cuda(name):
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn(512, 384, device=DEV, generator=g).bfloat16()
    w = torch.randn(256, 384, device=DEV, generator=g) * 0.05
    gy = (torch.randn(512, 256, device=DEV, generator=g) * 1e-3).bfloat16()
    want = _run(fc.recipe(name), "dequant", x, w, gy)
    got = _run(fc.recipe(name), "fused", x, w, gy)
    for what, a, b in zip(("y", "dx", "dw"), got, want):
        assert torch.equal(a, b), f"{name}: {what} differs"


ROWCOL = ["nvfp4", "mxfp4", "ue5m3", "ufp4", "ufp4-int4", "mxfp8", "nvfp4-2d"]


@pytest.mark.parametrize("name,route", [(n, "strip") for n in ROWCOL] + [("nvfp4", "transpose")])
def test_rowcol_real_size(name, route, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", route)
    f = F[name]
    x = testing.make_input("heavy", (2048, 1536), torch.bfloat16, DEV, seed=7)
    testing.check_rowcol(x, f, "sr", "sr", 9, 2**33)
    o = qk.launch_rowcol(x, qk.parse_fmt(f), "rtne", "rtne", 0, 0, None, None, None, None, write_codes=False,
                         write_xhat=True, unscaled=True)
    want = testing.dequantize_unscaled(ref.quantize(x, f, axis=0, offset=x.numel()), x.dtype)
    assert torch.equal(testing.bits(o["xhat"][1]), testing.bits(want))


@pytest.mark.parametrize("name,n", [("nvfp4", 16), ("ufp4", 16), ("mxfp4", 32)])
def test_strip_rht_real_size(name, n, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    f = F[name]
    s_r, s_c = ref.rht_signs(n, "per-step", 4).to(DEV), ref.rht_signs(n, "per-step", 5).to(DEV)
    x = testing.make_input("heavy", (1024, 768), torch.bfloat16, DEV, seed=3)
    testing.check_rowcol(x, f, "rtne", "sr", 2, 77, (n, s_r), (n, s_c))


# Tiles the SR sweep times (benchmarks/kernels.py STRIP_SR_TILES): more warps split a
# column block's rows across warps, so the reductions cross warps; bit-exact all the same.
@pytest.mark.parametrize("tile", [(16, 32, 1), (16, 64, 2), (16, 64, 4), (32, 64, 2), (16, 128, 4), (32, 64, 1)])
@pytest.mark.parametrize("name,n", [("ue5m3", 0), ("nvfp4", 16)])
def test_strip_tiles_sr(name, n, tile, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "strip", tile)
    f = F[name]
    rht_c = (n, ref.rht_signs(n, "te").to(DEV)) if n else None
    x = testing.make_input("heavy", (1024, 768), torch.bfloat16, DEV, seed=4)
    testing.check_rowcol(x, f, "sr", "sr", 6, 2**32 - 5, None, rht_c)


@pytest.mark.parametrize("name,n", [("ue5m3", 0), ("nvfp4", 16), ("ufp4", 16), ("mxfp4", 32)])
def test_strip_sr4_real_size(name, n, monkeypatch):
    """Rounding sr4 and sr16 (one Philox per four / sixteen elements) on both copies at the default SR tile:
    the reference's bits, with and without a column RHT; and on the one-layout kernel."""
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    f = F[name]
    rht_c = (n, ref.rht_signs(n, "te").to(DEV)) if n else None
    x = testing.make_input("heavy", (2048, 1536), torch.bfloat16, DEV, seed=11)
    for rounding in ("sr4", "sr16"):
        testing.check_rowcol(x, f, rounding, rounding, 12, 2**32 - 9, None, rht_c)
        assert testing.packed_diff(qk.quantize(x, f, axis=0, rounding=rounding, seed=12, offset=5),
                                   ref.quantize(x, f, axis=0, rounding=rounding, seed=12, offset=5)) == []
