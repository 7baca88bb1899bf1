"""The transpose-free row+col quantizer (_rowcol_split_kernel, quantize_rowcol's route
for SR calls with a decoded copy, 1-D blocks and no RHT) under TRITON_INTERPRET=1: codes, scale
bytes, tensor scales, amax and decoded values (scaled, and unscaled = value * block
scale) bit for bit against the PyTorch reference, per-copy output selection, SR on
either copy, a row RHT, supplied amaxes."""

import pytest
import torch

from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

pytestmark = pytest.mark.interpret
F = testing.FORMATS
SPLIT = ["nvfp4", "mxfp4", "ue5m3", "ufp4", "ufp4-int4", "mxfp8", "nvfp4-torchao", "mxfp4-rceil", "e1m2-mx16",
         "int4-sm-mx"]


@pytest.fixture
def force_split(monkeypatch):
    """Pin the split kernel (quantize.rowcol_route sends non-SR calls to the strip kernel
    and codes-only or RHT calls elsewhere; the split kernel supports them all)."""
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "split")


@pytest.mark.parametrize("name", SPLIT)
def test_split_kernel_serves_and_is_bit_exact(name, force_split):
    f = F[name]
    spec = qk.parse_fmt(f)
    assert qk.split_eligible(spec, None) and not qk.split_eligible(spec, None, decoded=False)
    for kind, dtype in (("heavy", torch.bfloat16), ("ties", torch.bfloat16), ("tiny", torch.float32)):
        x = testing.make_input(kind, (64, 96), dtype, seed=8, fmt=f)
        for rr, rc in (("rtne", "sr"), ("sr", "rtne")):
            r, c = qk.quantize_rowcol(x, f, f, rr, rc, 3, 11, None, None)
            want_r = ref.quantize(x, f, rounding=rr, seed=3, offset=11)
            want_c = ref.quantize(x, f, axis=0, rounding=rc, seed=3, offset=11 + x.numel())
            assert testing.packed_diff(r, want_r) == [] and testing.packed_diff(c, want_c) == []
        o = qk.launch_rowcol(x, spec, "rtne", "sr", 3, 11, None, None, None, None, write_codes=(False, True),
                             write_xhat=(True, False), xhat_dtype=torch.bfloat16, unscaled=True)
        want_r = ref.quantize(x, f, seed=3, offset=11)
        want_c = ref.quantize(x, f, axis=0, rounding="sr", seed=3, offset=11 + x.numel())
        assert torch.equal(testing.bits(o["xhat"][0]), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
        assert torch.equal(o["codes"][1], want_c.codes) and torch.equal(o["scales"][1], want_c.scales)
        assert torch.equal(o["ts"], torch.stack([want_r.tensor_scale, want_c.tensor_scale]))


def test_split_with_row_rht_supplied_amax_and_scaled_xhat(force_split):
    f = F["ue5m3"]
    s = ref.rht_signs(32, "per-step", 4)
    x = testing.make_input("heavy", (64, 128), torch.bfloat16, seed=2)
    r, c = qk.quantize_rowcol(x, f, f, "rtne", "rtne", 0, 0, (32, s), None, 0.5, None)
    assert testing.packed_diff(r, ref.quantize(x, f, rht=(32, s), tensor_amax=0.5)) == []
    assert testing.packed_diff(c, ref.quantize(x, f, axis=0, offset=x.numel())) == []
    o = qk.launch_rowcol(x, qk.parse_fmt(f), "rtne", "rtne", 0, 0, (32, s), None, None, None, write_codes=False,
                         write_xhat=True)
    assert torch.equal(testing.bits(o["xhat"][0]), testing.bits(ref.dequantize(ref.quantize(x, f, rht=(32, s)), x.dtype)))
    assert torch.equal(testing.bits(o["xhat"][1]), testing.bits(ref.dequantize(ref.quantize(x, f, axis=0, offset=x.numel()),
                                                                 x.dtype)))


def test_other_layouts_keep_the_transposing_kernel():
    spec = qk.parse_fmt(F["nvfp4-2d"])
    assert not qk.split_eligible(spec, None)
    assert not qk.split_eligible(qk.parse_fmt(F["nvfp4"]), (16, ref.rht_signs(16, "te")))
    assert not qk.split_eligible(qk.parse_fmt(F["fp8"]), None)
    assert not qk.split_eligible(qk.parse_fmt(F["mxfp4"]), None, (32, ref.rht_signs(32, "te")))


def test_rowcol_operands_decoded_and_packed():
    x = testing.make_input("heavy", (32, 64), seed=3)
    f = F["nvfp4"]
    d, p = ops.rowcol_operands(x, f, rounding_col="sr", seed=1, outputs=("decoded", "packed"))
    want_r = ref.quantize(x, f, seed=1)
    assert torch.equal(d.values, testing.dequantize_unscaled(want_r, torch.bfloat16)) and torch.equal(d.tensor_scale, want_r.tensor_scale)
    assert testing.packed_diff(p, ref.quantize(x, f, axis=0, rounding="sr", seed=1, offset=x.numel())) == []
    with pytest.raises(ValueError, match="'decoded' or 'packed'"):
        ops.rowcol_operands(x, f, outputs=("decoded", "bf16"))


def test_scale_epilogue_equals_torch():
    from fourcast.kernels import gemm as gk

    g = torch.Generator().manual_seed(3)
    acc = torch.randn(33, 70, generator=g) * torch.exp(3 * torch.randn(33, 70, generator=g))
    ts_a, ts_b = torch.tensor(3.7e-3), torch.tensor(812.25)
    for dtype in (torch.bfloat16, torch.float32):
        want = acc.clone().div_(ts_a).div_(ts_b).to(dtype)
        assert torch.equal(testing.bits(gk.scale_epilogue(acc.clone(), ts_a, ts_b, dtype)), testing.bits(want))
    assert torch.equal(gk.scale_epilogue(acc.clone(), ts_a, None, torch.float32), acc / ts_a)
