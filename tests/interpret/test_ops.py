"""The public face fourcast.kernels.ops on CPU tensors (the reference path): the
documented input rules, NonFiniteError like the Rust codec, and the torch.library
registration (opcheck: schema, fake tensors for torch.compile tracing)."""

import pytest
import torch

from fourcast.errors import FormatError, NonFiniteError, ShapeError
from fourcast.kernels import ops
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

pytestmark = pytest.mark.interpret
NV = testing.FORMATS["nvfp4"]


def test_cpu_ops_are_the_reference_and_fake_quant_is_dequantize_of_quantize():
    x = testing.make_input("heavy", (4, 8, 64), torch.bfloat16, seed=1)
    s = ops.rht_signs(16, "per-layer", 5)
    for kw in (dict(), dict(axis=0, rounding="sr", seed=3, offset=9), dict(rht=(16, s), tensor_amax=2.0)):
        p = ops.quantize(x, NV, **kw)
        assert testing.packed_diff(p, ref.quantize(x, NV, **kw)) == []
        assert ops.dequantize(p).shape == x.shape
        assert torch.equal(ops.fake_quant(x, NV, **kw), ops.dequantize(p, x.dtype))
    a, b = ops.quantize(x.reshape(32, 64), NV), ops.quantize(x.reshape(32, 64)[:16], NV)
    assert torch.equal(ops.gemm(a, b, torch.float32), ref.gemm(a, b, torch.float32))
    row, col = ops.quantize_rowcol(x.reshape(32, 64), NV, rht_col=(16, s))
    assert testing.packed_diff(col, ref.quantize(x.reshape(32, 64), NV, axis=0, rht=(16, s), offset=32 * 64)) == []
    assert torch.equal(ops.rht(x, 16, s), ref.rht(x, 16, s))


def test_input_rules():
    x = testing.make_input("random", (16, 64))
    assert torch.equal(ops.fake_quant(x.t().contiguous().t(), NV), ops.fake_quant(x, NV))  # non-contiguous: copied
    with pytest.raises(FormatError):
        ops.quantize(x.to(torch.float64), NV)
    with pytest.raises(FormatError):
        ops.quantize(x.to(torch.int32), NV)
    with pytest.raises(ShapeError):
        ops.quantize(x[:, :24], NV)
    with pytest.raises(ShapeError):
        ops.quantize(x, NV, rht=(32, ops.rht_signs(32)), axis=0)  # 16 rows: not a multiple of 32
    with pytest.raises(FormatError):
        ops.quantize(x, dict(NV, scale="ue8m0"))  # rule te does not fit ue8m0
    with pytest.raises(FormatError):
        ops.quantize(x, NV, rounding="nearest")
    with pytest.raises(FormatError):
        ops.quantize(x, NV, rht=(16, torch.zeros(16)))
    with pytest.raises(ShapeError):
        ops.gemm(ops.quantize(x, NV), ops.quantize(x[:, :32].contiguous(), NV))


def test_formats_by_preset_name():
    """A format may be named as fc.quantize takes it: the core's presets, the same dicts the
    recipes give; an unknown name or another type raises FormatError naming what is valid."""
    import fourcast as fc

    x = testing.make_input("random", (16, 64))
    for name in ("nvfp4", "mxfp4", "ue5m3", "e1m2", "int4", "int4-sm"):
        f = fc.Format.preset(name)
        d = dict(element=f.element, scale=f.scale, block=f.block, rule=f.rule)
        assert testing.packed_diff(ops.quantize(x, name), ops.quantize(x, d)) == [], name
    with pytest.raises(FormatError, match="valid: mxfp4, nvfp4"):
        ops.quantize(x, "nvfp5")
    with pytest.raises(FormatError, match="preset name or a dict"):
        ops.quantize(x, 16)


def test_gemm_impl_on_cpu_is_checked_then_the_reference():
    mx = testing.FORMATS["mxfp4"]
    x = testing.make_input("heavy", (32, 64), seed=2)
    a, b = ops.quantize(x, mx), ops.quantize(x[:16], mx)
    for impl in ("auto", "triton", "dequant", "fp8"):
        assert torch.equal(ops.gemm(a, b, torch.float32, impl=impl), ref.gemm(a, b, torch.float32))
    with pytest.raises(ValueError, match="expected one of auto, triton, dequant, fp8"):
        ops.gemm(a, b, impl="cutlass")
    with pytest.raises(FormatError, match="MXFP4"):
        ops.gemm(ops.quantize(x, NV), b, impl="fp8")


def test_cpu_nonfinite_raises_like_the_rust_codec():
    x = testing.nonfinite_input((16, 64))
    with pytest.raises(NonFiniteError, match="3 non-finite"):
        ops.quantize(x, NV)
    with pytest.raises(NonFiniteError):
        ops.fake_quant(x, NV)


def test_custom_ops_registration():
    x = testing.make_input("random", (16, 64))
    args = (x, ops._fmt_key(ref.parse_fmt(NV)), -1, "sr", 1, 0, 16, ops.rht_signs(16), None)
    torch.library.opcheck(torch.ops.fourcast.quantize.default, args, test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.fourcast.fake_quant.default, args, test_utils=("test_schema", "test_faketensor"))
    p = ops.quantize(x, NV)
    gargs = (p.codes, p.scales, p.tensor_scale, args[1], [16, 64], p.codes, p.scales, p.tensor_scale, args[1],
             [16, 64], torch.bfloat16)
    torch.library.opcheck(torch.ops.fourcast.gemm.default, gargs, test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.fourcast.gemm.default, gargs + ("dequant",),
                          test_utils=("test_schema", "test_faketensor"))


def test_traced_by_torch_compile():
    def f(x):
        return ops.fake_quant(x * 2, NV) + 1

    x = testing.make_input("random", (16, 64))
    g = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.equal(g(x), f(x))
