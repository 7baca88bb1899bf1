"""Two-level rules (NVFP4 "te", UE5M3, uniform grids) against the TE rule exactly as
written in numerics.md, implemented here in numpy float32 (one IEEE operation per
step) with ml_dtypes for the E4M3 cast and E2M1 rounding.

Transformer Engine is not installed here, so the reference is numerics.md's
operation sequence (which follows TE's core_nvfp4.cuh and its reference
quantizer). Tie-aligned inputs (re-quantized data) are where operation order
matters: the test checks that a divide-by-decode-scale variant DOES diverge on
them, so the comparison is sensitive to the order, and that fourcast does not.
"""

import ml_dtypes
import numpy as np
import pytest

import fourcast as fc

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
GMAX = {"e2m1": 6.0, "e1m2": 1.75, "int4": 7.0, "int4-sm": 7.0}
UE5M3_GRID = fc.quant.decode(np.arange(255, dtype=np.uint8), "ue5m3").astype(np.float64)


def _ue5m3_rne(v):
    """Nearest UE5M3 byte, ties to even, saturating at 0xFE (independent of fourcast)."""
    v = np.minimum(v.astype(np.float64), UE5M3_GRID[-1])
    hi = np.clip(np.searchsorted(UE5M3_GRID, v), 1, 254)
    lo = hi - 1
    d_lo, d_hi = v - UE5M3_GRID[lo], UE5M3_GRID[hi] - v
    out = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(v == UE5M3_GRID[hi], hi, out).astype(np.uint8)


def _scale_cast(v, scale):
    if scale == "e4m3":
        b = np.minimum(v, F32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        return b, b.view(ml_dtypes.float8_e4m3fn).astype(F32)
    b = _ue5m3_rne(v)
    return b, UE5M3_GRID[b].astype(F32)


def _element_codes(y, element):
    """RTNE codes of y (already clamped to +-gmax)."""
    sign = np.signbit(y).astype(np.uint8) << 3
    if element == "e2m1":
        return y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    step = 0.25 if element == "e1m2" else 1.0
    k = np.round(np.abs(y).astype(np.float64) / step).astype(np.uint8)  # np.round: ties to even
    if element == "int4":
        return np.where(np.signbit(y), (16 - k) % 16, k).astype(np.uint8)
    return k | sign


def te_reference(x, element="e2m1", scale="e4m3", smax=448.0, amax=None, divide=False):
    """numerics.md's TE rule, block 16 along the last axis. Returns (codes, scales, S_enc)."""
    gmax = F32(GMAX[element])
    amax = F32(np.abs(x).max()) if amax is None else F32(amax)
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = np.minimum(F32(F32(smax) * gmax) / amax, FLT_MAX)
    if amax == 0 or s_enc == 0:
        s_enc = F32(1)
    xb = x.reshape(x.shape[0], -1, 16)
    bamax = np.abs(xb).max(axis=-1)
    with np.errstate(over="ignore"):
        v = np.minimum(bamax * (s_enc * (F32(1) / gmax)), FLT_MAX)
    sbytes, s = _scale_cast(v, scale)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if divide:  # the tempting variant: x / (s / S_enc) instead of x * enc_b
            y = xb / (s / s_enc)[..., None]
            y = np.where(s[..., None] == 0, F32(0), y)
        else:
            enc = np.minimum(F32(1) / (s * (F32(1) / s_enc)), FLT_MAX)
            y = xb * enc[..., None]
    y = np.clip(y, -gmax, gmax).astype(F32)
    c = _element_codes(y, element).reshape(x.shape[0], -1)
    packed = (c[:, 0::2] & 0xF) | (c[:, 1::2] << 4)
    return packed, sbytes, s_enc


def _tie_aligned(rng):
    """Re-quantized data: NVFP4 round trips, rescaled and re-blocked (ties galore)."""
    base = (rng.standard_normal((64, 128)) * rng.lognormal(0, 1, (64, 1))).astype(F32)
    x1 = fc.quantize(base, "nvfp4").dequantize()
    out = [x1, x1 * F32(1.5), x1 * F32(0.75), x1 * F32(3)]
    out.append(np.ascontiguousarray(x1.T))  # the column-wise (Wgrad) copy of row-quantized data
    x2 = fc.quantize(base, "mxfp4").dequantize()
    out += [x2, x2 * F32(0.375)]
    # Finer-grid data decoded the way dequantize does (m * s / S_enc) with m on E2M1
    # midpoints: x * enc_b lands within a few ulps of a tie, and the operation order
    # decides the code (numerics.md: dividing by the decode scale diverges here).
    rows, cols = 64, 128
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], F32)
    m = rng.choice(mids, (rows, cols)) * rng.choice([-1, 1], (rows, cols)).astype(F32)
    m[:, ::16] = 6.0  # each block keeps amax 6 * s / S_enc, so its scale byte is s
    s = rng.integers(0x30, 0x7E, (rows, cols // 16)).astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)
    s[0, 0] = 448.0
    s_enc = F32(2688) / F32(rng.uniform(1, 100))
    out.append(((m * np.repeat(s, 16, axis=1)).astype(F32) / s_enc).astype(F32))
    return out


def _random_inputs(rng):
    yield rng.standard_normal((32, 64)).astype(F32)
    yield (rng.standard_t(2, (32, 64)) * rng.lognormal(0, 3, (32, 1))).astype(F32)
    z = rng.standard_normal((32, 64)).astype(F32)
    z[:, :16] = 0
    z[:, 16:32] *= F32(1e-40)
    z[:, 32:48] *= F32(1e30)
    yield z


@pytest.mark.parametrize("element", ["e2m1", "e1m2", "int4", "int4-sm"])
def test_te_rule_random_inputs(element):
    rng = np.random.default_rng(7)
    for x in _random_inputs(rng):
        fmt = fc.Format(element=element, scale="e4m3", block=16)
        q = fc.quantize(x, fmt)
        codes, scales, s_enc = te_reference(x, element)
        np.testing.assert_array_equal(q.scales, scales)
        np.testing.assert_array_equal(q.codes, codes)
        assert q.tensor_scale == s_enc


def test_te_rule_tie_aligned_inputs_and_order_sensitivity():
    rng = np.random.default_rng(11)
    diverging = 0
    total = 0
    for x in _tie_aligned(rng):
        q = fc.quantize(x, "nvfp4")
        codes, scales, _ = te_reference(x)
        np.testing.assert_array_equal(q.scales, scales)
        np.testing.assert_array_equal(q.codes, codes)
        div_codes, _, _ = te_reference(x, divide=True)
        diverging += int((div_codes != codes).sum())
        total += codes.size
    # The divide variant must differ on a good share, or this test could not catch it.
    assert diverging > 0.01 * total, "tie-aligned inputs do not exercise the operation order"


@pytest.mark.parametrize("smax", [448.0, 32.0, 1024.0])
def test_ue5m3_rule_with_target_and_supplied_amax(smax):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 128)) * rng.lognormal(0, 2, (16, 1))).astype(F32)
    fmt = fc.Format(element="e2m1", scale="ue5m3", block=16, scale_max=smax)
    for amax in (None, float(np.abs(x).max()) * 0.01, float(np.abs(x).max()) * 10):
        q = fc.quantize(x, fmt, tensor_amax=amax)
        codes, scales, s_enc = te_reference(x, "e2m1", "ue5m3", smax=smax, amax=amax)
        np.testing.assert_array_equal(q.scales, scales)
        np.testing.assert_array_equal(q.codes, codes)
        assert q.tensor_scale == s_enc
        assert q.amax == F32(np.abs(x).max() if amax is None else amax)


def test_ue5m3_full_range_target_matches_transformer_engine():
    # TE's UE5M3 unit test: global amax 12 -> S_enc = 6 * 114688 / 12 (scale max 114688).
    x = np.zeros((1, 16), F32)
    x[0, 0] = 12.0
    q = fc.quantize(x, fc.Format(element="e2m1", scale="ue5m3", scale_max=114688.0))
    assert q.tensor_scale == F32(6.0 * 114688.0 / 12.0)
    assert fc.quant.decode(q.scales, "ue5m3")[0, 0] == 114688.0


def test_ue5m3_preset_and_stale_amax_saturates_e4m3():
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(F32)
    amax = float(np.abs(x).max()) / 4  # stale: block scales want up to 4 * 448
    q = fc.quantize(x, "nvfp4", tensor_amax=amax)
    codes, scales, _ = te_reference(x, amax=amax)
    np.testing.assert_array_equal(q.scales, scales)
    np.testing.assert_array_equal(q.codes, codes)
    assert q.scales.max() == 0x7E  # saturated at 448
    u = fc.quantize(x, "ue5m3", tensor_amax=amax)  # UE5M3 holds the larger scales
    assert fc.quant.decode(u.scales, "ue5m3").max() > 448


def test_zero_tensor_gives_unit_tensor_scale():
    q = fc.quantize(np.zeros((2, 32), F32), "nvfp4")
    assert q.tensor_scale == 1.0 and q.amax == 0.0
    assert np.all(q.codes == 0) and np.all(q.scales == 0)
    np.testing.assert_array_equal(q.dequantize(), 0)


def test_tiles_and_axis0_use_the_same_rule():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((32, 48)).astype(F32)
    # axis=0 is the transposed copy quantized along its last axis.
    q0 = fc.quantize(x, "nvfp4", axis=0)
    codes, scales, _ = te_reference(np.ascontiguousarray(x.T))
    np.testing.assert_array_equal(q0.codes, codes)
    np.testing.assert_array_equal(q0.scales, scales)
    # 16x16 tiles: one scale per tile from the tile amax; W and W^T quantize identically.
    qt = fc.quantize(x, "nvfp4", block=(16, 16))
    qtt = fc.quantize(np.ascontiguousarray(x.T), "nvfp4", block=(16, 16))
    assert qt.scales.shape == (2, 3)
    np.testing.assert_array_equal(qt.scales, qtt.scales.T)
    np.testing.assert_array_equal(qt.dequantize(), qtt.dequantize().T)
    tile_amax = np.abs(x.reshape(2, 16, 3, 16)).max(axis=(1, 3))
    s_enc = F32(2688) / F32(np.abs(x).max())
    expected = (tile_amax * (s_enc * (F32(1) / F32(6)))).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(qt.scales, expected)
    # Tile codes equal row-wise codes computed with the tile's scale broadcast.
    enc = np.minimum(F32(1) / (expected.view(ml_dtypes.float8_e4m3fn).astype(F32) * (F32(1) / s_enc)), FLT_MAX)
    y = np.clip(x * np.repeat(np.repeat(enc, 16, 0), 16, 1), -6, 6).astype(F32)
    c = y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    np.testing.assert_array_equal(qt.codes, (c[:, 0::2] & 0xF) | (c[:, 1::2] << 4))
