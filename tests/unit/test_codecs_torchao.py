"""MXFP4 (floor, rceil) and NVFP4 (torchao rule) codes and scale bytes against
torchao's reference quantizers, byte for byte.

torchao functions used (all CPU-capable, pure PyTorch):
- torchao.prototype.mx_formats.mx_tensor.to_mx(x, float4_e2m1fn_x2, 32, FLOOR|RCEIL).
  RCEIL's inline-PTX path (cvt.rp.satfinite.ue8m0) needs torch.compile on an sm100
  GPU; eager CPU runs its PyTorch fallback, which is what is compared here.
- torchao.prototype.mx_formats.nvfp4_tensor.nvfp4_quantize(x, 16, per_tensor_scale)
  with per_tensor_scale = per_tensor_amax_to_scale(amax) (two-level NVFP4).

One deliberate difference, pinned below rather than skipped: in MX blocks whose
scale byte is 0 (block amax below ~2^-124) torchao does not scale by 2^127 (floor
clamps the FP32 scale to 2^-126, rceil multiplies by 1.0, TE's exp2f_rcp quirk),
so its own dequantize (2^(byte-127)) does not reproduce those blocks. fourcast
follows OCP: elements are x / 2^-127 in such blocks (docs/conventions.md).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
nv = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")

import fourcast as fc  # noqa: E402
from fourcast.quant import decode  # noqa: E402

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)


def _inputs():
    rng = np.random.default_rng(1234)
    shape = (48, 256)
    yield "normal", rng.standard_normal(shape)
    yield "heavy", rng.standard_t(1.5, shape) * rng.lognormal(0, 4, (shape[0], 1))
    # Tie-aligned: grid midpoints and grid points times powers of two; each block keeps
    # its amax at 6 * 2^k so that the tie positions survive the scaling.
    mids = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6])
    t = rng.choice(mids, shape) * rng.choice([-1, 1], shape)
    t[:, ::16] = 6.0
    yield "ties", t * 2.0 ** rng.integers(-20, 20, (shape[0], 1))
    z = np.zeros(shape)
    z[3, 7] = 1.0
    z[5, 64:96] = -0.0
    yield "zeros", z
    yield "huge", rng.standard_normal(shape) * 3e37
    mix = rng.standard_normal(shape)
    mix[:, 32:64] *= 1e-30
    mix[:, 64:96] = 0.0
    mix[:, 96:128] *= 1e30
    mix[:, 128:160] = rng.choice([-1, 1], (shape[0], 32)) * 2.0 ** rng.integers(-100, 100, (shape[0], 32))
    yield "mixed", mix
    # Subnormal-amax blocks inside a tensor with normal amax (two-level rules) ...
    sub = rng.standard_normal(shape)
    sub[:, :128] *= 1e-41
    yield "subnormal-blocks", sub
    # ... and a tensor that is subnormal throughout.
    yield "all-subnormal", rng.standard_normal(shape) * 1e-41
    yield "tiny", rng.standard_normal(shape) * 1e-33


INPUTS = [(name, x.astype(np.float32)) for name, x in _inputs()]
# torchao's two-level rule is only defined while 1 / per_tensor_scale is finite
# (amax >= ~2688 / FLT_MAX); the all-subnormal tensor is the degenerate case below.
NV_INPUTS = [(n, x) for n, x in INPUTS if n != "all-subnormal"]


def _torchao_mx(x, mode):
    s, d = mx.to_mx(torch.from_numpy(x), torch.float4_e2m1fn_x2, 32, mode)
    return s.view(torch.uint8).numpy(), d.view(torch.uint8).numpy()


def _unpack(c):
    return np.stack([c & 0xF, c >> 4], axis=-1).reshape(c.shape[0], -1)


@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("name,x", INPUTS, ids=[n for n, _ in INPUTS])
def test_mxfp4_matches_torchao(name, x, rule):
    mode = mx.ScaleCalculationMode.FLOOR if rule == "floor" else mx.ScaleCalculationMode.RCEIL
    ref_s, ref_c = _torchao_mx(x, mode)
    q = fc.quantize(x, "mxfp4", scale_rule=rule)
    np.testing.assert_array_equal(q.scales, ref_s)
    byte0 = np.repeat(q.scales == 0, 32, axis=1)
    ours, theirs = _unpack(q.codes), _unpack(ref_c)
    np.testing.assert_array_equal(ours[~byte0], theirs[~byte0])
    # Byte-0 blocks: fourcast's codes are RTNE(x * 2^127) (OCP), so they decode back
    # with the scale byte; torchao's do not (its own dequantize is off there).
    if byte0.any():
        scale = np.float32(2.0**-127)
        ours_hat = decode(ours[byte0].astype(np.uint8), "e2m1") * scale
        expected = fc.quant.encode((x[byte0].astype(np.float64) * 2.0**127).astype(np.float32), "e2m1")
        np.testing.assert_array_equal(ours[byte0], expected)
        assert np.all(np.abs(ours_hat - x[byte0]) <= scale * 1.0)


def test_mx_byte0_difference_is_torchao_specific():
    """Shows why fourcast differs: torchao's own round trip loses the byte-0 block."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = np.float32(6 * 2.0**-127)  # floor: byte 0, value exactly 6 * 2^-127
    q = fc.quantize(x, "mxfp4")
    assert q.scales[0, 0] == 0
    assert q.dequantize()[0, 0] == x[0, 0]
    s, c = _torchao_mx(x, mx.ScaleCalculationMode.FLOOR)
    theirs = decode(np.array([c[0, 0] & 0xF], np.uint8), "e2m1")[0] * np.float32(2.0**-127)
    assert theirs != x[0, 0]


@pytest.mark.parametrize("name,x", NV_INPUTS, ids=[n for n, _ in NV_INPUTS])
def test_nvfp4_torchao_rule_matches_torchao(name, x):
    xt = torch.from_numpy(x)
    pts = nv.per_tensor_amax_to_scale(xt.abs().max())
    ref_s, ref_c = nv.nvfp4_quantize(xt, 16, pts)
    q = fc.quantize(x, "nvfp4", scale_rule="torchao")
    np.testing.assert_array_equal(q.scales, ref_s.view(torch.uint8).numpy())
    np.testing.assert_array_equal(q.codes, ref_c.view(torch.uint8).numpy().reshape(q.codes.shape))
    assert q.tensor_scale == np.float32(1.0) / pts.item()


@pytest.mark.parametrize("magnitude", [0.0, 1e-41, 1e-37])
def test_nvfp4_torchao_degenerate_amax(magnitude):
    # amax == 0 or below ~2688 / FLT_MAX: torchao divides by zero or its 1/per_tensor_scale
    # overflows to inf, so every code saturates (shown below for the non-zero case).
    # fourcast falls back to a unit per-tensor scale (documented): single-level scaling.
    x = (np.random.default_rng(5).standard_normal((2, 32)) * magnitude).astype(np.float32)
    q = fc.quantize(x, "nvfp4", scale_rule="torchao")
    assert q.tensor_scale == 1.0
    assert np.all(q.scales == 0x08)  # clamped to E4M3's smallest normal, 2^-6
    assert np.all(q.dequantize() == 0)  # |x| * 64 is far below half of E2M1's 0.5
    if magnitude > 0:
        xt = torch.from_numpy(x)
        _, ref_c = nv.nvfp4_quantize(xt, 16, nv.per_tensor_amax_to_scale(xt.abs().max()))
        ref_c = ref_c.view(torch.uint8).numpy()
        assert np.all((ref_c & 7) == 7) and np.all(((ref_c >> 4) & 7) == 7)


@pytest.mark.parametrize("name,x", INPUTS[:4], ids=[n for n, _ in INPUTS[:4]])
def test_nvfp4_torchao_with_supplied_amax(name, x):
    amax = np.float32(np.abs(x).max() * 0.5)  # stale amax: block scales saturate at 448
    xt = torch.from_numpy(x)
    pts = nv.per_tensor_amax_to_scale(torch.tensor(amax))
    ref_s, ref_c = nv.nvfp4_quantize(xt, 16, pts)
    q = fc.quantize(x, "nvfp4", scale_rule="torchao", tensor_amax=amax)
    np.testing.assert_array_equal(q.scales, ref_s.view(torch.uint8).numpy())
    np.testing.assert_array_equal(q.codes, ref_c.view(torch.uint8).numpy().reshape(q.codes.shape))
