"""Bad input is refused with typed errors; odd-but-valid input (empty, non-contiguous,
N-D, float64, torch) works and round-trips to the input's array type."""

import subprocess
import sys

import numpy as np
import pytest

import fourcast as fc

X = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(fc.FormatError, match="mxfp4, nvfp4, ue5m3, e1m2, int4, int4-sm"):
        fc.quantize(X, "fp5")
    with pytest.raises(fc.FormatError, match="rtne, away, sr"):
        fc.quantize(X, "nvfp4", rounding="nearest")
    with pytest.raises(fc.FormatError, match="floor, rceil, te, torchao"):
        fc.quantize(X, "nvfp4", scale_rule="ceil")
    with pytest.raises(fc.FormatError, match="e2m1, e1m2, int4, int4-sm"):
        fc.Format(element="e3m0")
    with pytest.raises(fc.FormatError, match="ue8m0, e4m3, ue5m3"):
        fc.Format(scale="e8m1")
    with pytest.raises(fc.FormatError, match="valid: te, torchao"):
        fc.quantize(X, "nvfp4", scale_rule="floor")
    with pytest.raises(fc.FormatError, match="valid: floor, rceil"):
        fc.quantize(X, "mxfp4", scale_rule="te")
    with pytest.raises(fc.FormatError, match="16, 32, \\(16, 16\\)"):
        fc.quantize(X, "nvfp4", block=8)
    with pytest.raises(fc.FormatError, match="scale_max"):
        fc.Format(scale="e4m3", scale_max=1000.0)
    assert issubclass(fc.FormatError, ValueError)


def test_shape_errors_name_the_shape_and_block():
    with pytest.raises(fc.ShapeError, match=r"\(3, 40\).*block 16"):
        fc.quantize(np.zeros((3, 40), np.float32), "nvfp4")
    with pytest.raises(fc.ShapeError, match=r"\(3, 32\).*block 32"):
        fc.quantize(np.zeros((3, 32), np.float32), "mxfp4", axis=0)
    with pytest.raises(fc.ShapeError, match=r"\(16, 40\).*\(16, 16\)"):
        fc.quantize(np.zeros((16, 40), np.float32), "nvfp4", block=(16, 16))
    with pytest.raises(fc.ShapeError):
        fc.quantize(np.array(1.0, np.float32), "nvfp4")
    with pytest.raises(fc.FormatError, match="axis"):
        fc.quantize(np.zeros((2, 16, 32), np.float32), "nvfp4", axis=1)


@pytest.mark.parametrize("bad", [np.zeros((2, 32), np.int32), np.zeros((2, 32), np.float16), [[0.0] * 32], "x"])
def test_wrong_dtype_is_a_type_error(bad):
    with pytest.raises(TypeError):
        fc.quantize(bad, "nvfp4")


def test_non_finite_values_are_refused_with_count_and_index():
    x = X.copy()
    x[1, 3] = np.nan
    x[2, 0] = -np.inf
    with pytest.raises(fc.NonFiniteError, match=r"2 non-finite.*index 35"):
        fc.quantize(x, "nvfp4")
    with pytest.raises(fc.NonFiniteError, match=r"16 non-finite.*index 259"):  # index into the input as given
        fc.quantize(np.ascontiguousarray(x[:, :32]).repeat(8, 0), "mxfp4", axis=0)
    big = np.full((1, 32), 1e300)  # float64 beyond float32's range
    with pytest.raises(fc.NonFiniteError):
        fc.quantize(big, "nvfp4")
    with pytest.raises(fc.FormatError, match="tensor_amax"):
        fc.quantize(X, "nvfp4", tensor_amax=float("nan"))
    with pytest.raises(fc.NonFiniteError):
        fc.quant.encode(np.array([np.inf], np.float32), "e2m1")


@pytest.mark.parametrize("shape", [(0, 32), (4, 0), (0,), (2, 0, 16)])
def test_empty_inputs(shape):
    x = np.zeros(shape, np.float32)
    q = fc.quantize(x, "nvfp4")
    assert q.codes.size == 0 and q.amax == 0.0
    y = q.dequantize()
    assert y.shape == shape and y.dtype == np.float32


def test_non_contiguous_inputs_equal_their_copies():
    base = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    for view in (base[:, ::2], base.T[:32], np.asfortranarray(base), base[::-1]):
        q = fc.quantize(view, "nvfp4")
        r = fc.quantize(np.ascontiguousarray(view), "nvfp4")
        np.testing.assert_array_equal(q.codes, r.codes)
        np.testing.assert_array_equal(q.scales, r.scales)


def test_nd_and_float64_inputs():
    x = np.random.default_rng(2).standard_normal((2, 3, 32))
    q = fc.quantize(x, "mxfp4")
    assert q.codes.shape == (6, 16) and q.scales.shape == (6, 1) and q.shape == (2, 3, 32)
    y = q.dequantize()
    assert y.shape == x.shape and y.dtype == np.float64
    np.testing.assert_array_equal(q.codes, fc.quantize(x.astype(np.float32).reshape(6, 32), "mxfp4").codes)
    x3 = np.random.default_rng(4).standard_normal((2, 16, 48)).astype(np.float32)
    q0 = fc.quantize(x3, "nvfp4", axis=0)  # leading dims flatten to 32 rows
    assert q0.codes.shape == (48, 16) and q0.scales.shape == (48, 2) and q0.axis == 0
    assert q0.dequantize().shape == x3.shape


def test_torch_inputs_round_trip_to_torch():
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(X.copy())
    for dtype in (torch.float32, torch.bfloat16):
        q = fc.quantize(t.to(dtype), "nvfp4")
        ref = fc.quantize(t.to(dtype).float().numpy(), "nvfp4")
        np.testing.assert_array_equal(q.codes, ref.codes)
        y = q.dequantize()
        assert isinstance(y, torch.Tensor) and y.dtype == dtype and tuple(y.shape) == tuple(t.shape)
    with pytest.raises(TypeError):
        fc.quantize(t.half(), "nvfp4")
    with pytest.raises(TypeError):
        fc.quantize(t.double(), "nvfp4")
    nc = torch.from_numpy(np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32)).t()
    np.testing.assert_array_equal(fc.quantize(nc, "nvfp4").codes, fc.quantize(nc.contiguous(), "nvfp4").codes)


def test_import_does_not_load_torch():
    code = "import sys, fourcast as fc, numpy as np; fc.quantize(np.zeros((1, 32), np.float32), 'nvfp4'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_qtensor_fields():
    q = fc.quantize(X, "nvfp4")
    assert q.codes.dtype == np.uint8 and q.scales.dtype == np.uint8
    assert q.format == fc.Format.preset("nvfp4") and q.format.rule == "te"
    assert isinstance(q.tensor_scale, float) and q.axis == -1 and q.shape == (4, 32)
    assert q.unpacked_codes().shape == (4, 32)
