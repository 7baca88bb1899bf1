"""Hypothesis properties that hold by construction of the codecs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fourcast as fc
from fourcast.quant import decode

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
PRESETS = list(fc.quant.PRESETS)
GRIDS = {e: np.unique(np.abs(decode(np.arange(16, dtype=np.uint8), e))) for e in ("e2m1", "e1m2", "int4-sm")}
GRIDS["int4"] = GRIDS["int4-sm"]  # -8 is never produced: the quantizers map amax to 7

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
# Values of one tensor share a magnitude range (a random exponent) plus outliers.
scaled = st.tuples(st.floats(-1, 1, width=32), st.integers(-140, 120)).map(lambda t: F32(t[0]) * F32(2.0) ** t[1])


@st.composite
def tensors(draw, col_multiple=32):
    rows = draw(st.integers(1, 3))
    cols = col_multiple * draw(st.integers(1, 3))
    elements = st.one_of(finite32, scaled, st.sampled_from([0.0, -0.0, 0.25, 0.75, 2.5, 5.0, 6.0, -3.5]))
    return draw(hnp.arrays(np.float32, (rows, cols), elements=elements))


def _multiplier(q):
    """Per-element multiplier the rule applied (x * m = the scaled value y)."""
    s = q.scales
    if q.format.rule in ("floor", "rceil"):
        m = np.ldexp(np.float64(1), 127 - s.astype(np.int32)).astype(F32)
    else:
        sv = decode(s, "ue4m3" if q.format.scale == "e4m3" else "ue5m3")
        with np.errstate(divide="ignore", over="ignore"):
            m = np.minimum(F32(1) / (sv * (F32(1) / F32(q.tensor_scale))), FLT_MAX)
    return np.repeat(m, q.format.block, axis=1)


def _levels(q):
    """Signed grid values of the codes."""
    return decode(q.unpacked_codes(), q.format.element)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.uint8, st.tuples(st.integers(1, 4), st.integers(1, 40).map(lambda n: 2 * n)), elements=st.integers(0, 15)))
def test_pack_unpack_round_trip(nibbles):
    packed = fc.quant.pack_codes(nibbles)
    assert packed.shape == (nibbles.shape[0], nibbles.shape[1] // 2)
    np.testing.assert_array_equal(fc.quant.unpack_codes(packed), nibbles)
    np.testing.assert_array_equal(packed & 0xF, nibbles[:, 0::2])  # element 2i in the low nibble
    np.testing.assert_array_equal(fc.quant.pack_codes(fc.quant.unpack_codes(packed)), packed)


@settings(max_examples=60, deadline=None)
@given(tensors(), st.sampled_from(PRESETS), st.sampled_from(["rtne", "away", "sr"]))
def test_dequantized_values_are_grid_times_scale(x, preset, rounding):
    q = fc.quantize(x, preset, rounding=rounding, seed=1)
    fmt = q.format
    scale_codec = {"ue8m0": "ue8m0", "e4m3": "ue4m3", "ue5m3": "ue5m3"}[fmt.scale]
    s = np.repeat(decode(q.scales, scale_codec), fmt.block, axis=1)
    v = _levels(q)
    assert set(np.unique(np.abs(v))) <= set(GRIDS[fmt.element])
    expected = (v * s).astype(F32) / F32(q.tensor_scale)
    np.testing.assert_array_equal(q.dequantize(), expected)


def _half_step(y, grid):
    a = np.abs(y)
    idx = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, len(grid) - 2)
    return (grid[idx + 1] - grid[idx]) / 2


@settings(max_examples=80, deadline=None)
@given(tensors(), st.sampled_from(PRESETS + ["mxfp4-rceil"]))
def test_rtne_error_at_most_half_a_step_inside_the_range(x, preset):
    q = fc.quantize(x, "mxfp4", scale_rule="rceil") if preset == "mxfp4-rceil" else fc.quantize(x, preset)
    grid = GRIDS[q.format.element].astype(np.float64)
    with np.errstate(over="ignore"):  # the scaled value exactly as the codec computes it
        y32 = (x * _multiplier(q)).astype(np.float64)
    inside = np.abs(y32) <= grid[-1]
    err = np.abs(_levels(q).astype(np.float64) - y32)
    assert np.all(err[inside] <= _half_step(y32[inside], grid))
    # Outside the range the code saturates at the grid max.
    assert np.all(np.abs(_levels(q)[~inside]) == grid[-1])


@settings(max_examples=80, deadline=None)
@given(tensors())
def test_mx_floor_requantization_is_idempotent(x):
    q1 = fc.quantize(x, "mxfp4")
    x1 = q1.dequantize()
    q2 = fc.quantize(x1, "mxfp4")
    np.testing.assert_array_equal(q2.scales, q1.scales)
    np.testing.assert_array_equal(q2.codes & 0x77, q1.codes & 0x77)  # -0 may become +0
    np.testing.assert_array_equal(q2.dequantize(), x1)


@settings(max_examples=40, deadline=None)
@given(tensors(col_multiple=16), st.sampled_from(PRESETS))
def test_axis0_is_the_transposed_copy(x, preset):
    if x.shape[0] % 32:
        x = np.resize(x, (32, x.shape[1]))
    a = fc.quantize(x, preset, axis=0)
    b = fc.quantize(np.ascontiguousarray(x.T), preset)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.scales, b.scales)
    np.testing.assert_array_equal(a.dequantize(), b.dequantize().T)
