"""Stochastic rounding: bit-exact to the conventions' rule (u = tl.rand(seed, offset +
element index), round up when u * step < |y| - lo), within one grid step, unbiased
in the mean, seed-reproducible, seed-sensitive."""

import ml_dtypes
import numpy as np
import pytest

import fourcast as fc
from fourcast.quant import decode, encode

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], F32)


def sr_e2m1_reference(y, u):
    """Codes of y (clamped to +-6) with SR: neighbours lo <= |y| <= hi, up iff u*(hi-lo) < |y|-lo."""
    a = np.abs(y)
    idx = np.clip(np.searchsorted(E2M1, a, side="right") - 1, 0, 7)
    lo = E2M1[idx]
    hi = E2M1[np.minimum(idx + 1, 7)]
    up = (u * (hi - lo)).astype(F32) < (a - lo).astype(F32)
    mag = np.where(up & (idx < 7), idx + 1, idx).astype(np.uint8)
    return mag | (np.signbit(y).astype(np.uint8) << 3)


def _pack(c):
    return (c[:, 0::2] & 0xF) | (c[:, 1::2] << 4)


def _nvfp4_sr(seed: int, offset: int, rounding: str):
    """(x, its nvfp4 QTensor with `rounding`, x scaled onto the E2M1 grid as the codec does)."""
    rng = np.random.default_rng(seed % 89)
    x = (rng.standard_normal((8, 64)) * rng.lognormal(0, 1, (8, 1))).astype(F32)
    q = fc.quantize(x, "nvfp4", rounding=rounding, seed=seed, offset=offset)
    s = q.scales.view(ml_dtypes.float8_e4m3fn).astype(F32)
    enc = np.minimum(F32(1) / (s * (F32(1) / F32(q.tensor_scale))), FLT_MAX)
    return x, q, np.clip(x * np.repeat(enc, 16, axis=1), -6, 6).astype(F32)


@pytest.mark.parametrize("seed,offset", [(7, 0), (123456789, 1000), (2**63 + 1, 2**40)])
def test_nvfp4_sr_bit_exact_to_the_rule(seed, offset):
    rng = np.random.default_rng(seed % 97)
    x = (rng.standard_normal((8, 64)) * rng.lognormal(0, 1, (8, 1))).astype(F32)
    q = fc.quantize(x, "nvfp4", rounding="sr", seed=seed, offset=offset)
    rt = fc.quantize(x, "nvfp4")  # SR does not touch the scales
    np.testing.assert_array_equal(q.scales, rt.scales)
    s = q.scales.view(ml_dtypes.float8_e4m3fn).astype(F32)
    enc = np.minimum(F32(1) / (s * (F32(1) / F32(q.tensor_scale))), FLT_MAX)
    y = np.clip(x * np.repeat(enc, 16, axis=1), -6, 6).astype(F32)
    u = fc.philox_uniform(seed, offset + np.arange(x.size, dtype=np.uint64)).reshape(x.shape)
    np.testing.assert_array_equal(q.codes, _pack(sr_e2m1_reference(y, u)))


@pytest.mark.parametrize("seed,offset", [(7, 0), (2**63 + 1, 2**40 + 2)])
def test_nvfp4_sr4_takes_four_words_per_counter(seed, offset):
    """sr4: the same rounding rule; element i's uniform is word i % 4 at counter offset + i // 4."""
    x, q, y = _nvfp4_sr(seed, offset, "sr4")
    words = fc.philox(seed, offset + np.arange(x.size // 4, dtype=np.uint64)).reshape(-1)  # (counter, word) order
    i = words.view(np.int32)
    u = (np.where(i < 0, ~i, i).astype(F32) * F32(4.6566127342e-10)).reshape(x.shape)
    np.testing.assert_array_equal(q.codes, _pack(sr_e2m1_reference(y, u)))
    assert not np.array_equal(q.codes, fc.quantize(x, "nvfp4", rounding="sr", seed=seed, offset=offset).codes)


def test_sr_offsets_follow_the_quantized_layout():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 48)).astype(F32)
    a = fc.quantize(x, "nvfp4", axis=0, rounding="sr", seed=5, offset=3)
    b = fc.quantize(np.ascontiguousarray(x.T), "nvfp4", rounding="sr", seed=5, offset=3)
    np.testing.assert_array_equal(a.codes, b.codes)
    # A slice quantized with base offset = its first element index draws the same numbers.
    row = x[:1]
    amax = float(np.abs(row).max())
    whole = fc.quantize(row, "nvfp4", rounding="sr", seed=9, tensor_amax=amax)
    tail = fc.quantize(np.ascontiguousarray(row[:, 16:]), "nvfp4", rounding="sr", seed=9, offset=16, tensor_amax=amax)
    np.testing.assert_array_equal(whole.codes[:, 8:], tail.codes)


@pytest.mark.parametrize("rounding", ["sr", "sr4", "sr16"])
@pytest.mark.parametrize("codec", ["e2m1", "e1m2", "int4-sm", "e4m3", "ue5m3"])
def test_sr_within_one_grid_step(codec, rounding):
    rng = np.random.default_rng(2)
    top = float(decode(np.array([0x7E if codec in ("e4m3",) else (0xFE if codec == "ue5m3" else 7)], np.uint8), codec)[0])
    x = rng.uniform(0 if codec == "ue5m3" else -top, top, 20000).astype(F32)
    down = decode(encode(x, codec, rounding=rounding, seed=0, offset=0), codec)
    rtne = decode(encode(x, codec), codec)
    grid = np.unique(np.abs(decode(np.arange(256 if codec in ("e4m3", "ue5m3") else 16, dtype=np.uint8), codec)))
    grid = grid[np.isfinite(grid)]
    idx = np.clip(np.searchsorted(grid, np.abs(x), side="right") - 1, 0, len(grid) - 1)
    lo, hi = grid[idx], grid[np.minimum(idx + 1, len(grid) - 1)]
    a = np.abs(down)
    assert np.all((a == lo) | (a == hi))
    assert np.all(np.sign(down) * np.sign(x) >= 0)
    assert np.any(np.abs(down) != np.abs(rtne))  # SR is not RTNE


@pytest.mark.parametrize("rounding", ["sr", "sr4", "sr16"])
def test_sr_mean_converges_and_is_unbiased(rounding):
    values = np.array([0.3, 0.8, 1.1, 2.2, 3.7, 4.9, -5.5, -0.1], F32)
    n = 20000
    x = np.repeat(values, n)
    codes = encode(x, "e2m1", rounding=rounding, seed=11, offset=0)
    means = decode(codes, "e2m1").reshape(len(values), n).astype(np.float64).mean(axis=1)
    rtne = decode(encode(values, "e2m1"), "e2m1")
    err_mean = np.abs(means - values)
    assert np.all(err_mean < 0.03)
    # Error of the mean below the RTNE error wherever RTNE is inexact.
    inexact = rtne != values
    assert np.all(err_mean[inexact] < np.abs(rtne - values)[inexact])


@pytest.mark.parametrize("seed,offset", [(7, 0), (2**63 + 1, 2**40 + 2)])
def test_nvfp4_sr16_takes_sixteen_bytes_per_counter(seed, offset):
    """sr16: the same rounding rule; element i's uniform is (byte + 0.5) / 256 of byte i % 4
    of word (i // 4) % 4 at counter offset + i // 16 (8 random bits per element, as
    Blackwell's cvt.rs spends 32 per four FP4 elements)."""
    x, q, y = _nvfp4_sr(seed, offset, "sr16")
    words = fc.philox(seed, offset + np.arange(x.size // 16, dtype=np.uint64)).reshape(-1)  # (counter, word) order
    byte = words.astype("<u4").view(np.uint8)  # little end first: byte b of word w at 4 w + b
    u = ((byte.astype(F32) + F32(0.5)) / F32(256)).reshape(x.shape)
    np.testing.assert_array_equal(q.codes, _pack(sr_e2m1_reference(y, u)))
    assert not np.array_equal(q.codes, fc.quantize(x, "nvfp4", rounding="sr4", seed=seed, offset=offset).codes)


def test_sr16_is_unbiased_to_its_resolution():
    """8-bit uniforms (r + 0.5) / 256: P(up) is the remainder rounded to a multiple of
    1/256, so each value's expected rounding is within 2^-9 of a step of it."""
    fracs = np.array([0.001, 0.1, 1 / 3, 0.5, 0.77, 0.999], F32)
    n = 200000
    x = np.repeat(F32(0.5) * fracs, n)  # E2M1 between 0 and 0.5: step 0.5
    up = decode(encode(x, "e2m1", rounding="sr16", seed=5, offset=0), "e2m1").reshape(len(fracs), n) == 0.5
    p = up.mean(axis=1)
    want = np.round(fracs * 256) / 256  # count of r with (r + 0.5) / 256 < f
    assert np.all(np.abs(p - want) < 4 * np.sqrt(want * (1 - want) / n) + 1e-9), (p, want)
    assert np.all(np.abs(want - fracs) <= 1 / 512 + 1e-7)


def test_sr4_words_of_one_counter_round_independently():
    """sr4 gives four consecutive elements the four words of one Philox counter: at
    p(up) = 1/2 (0.25 between E2M1's 0 and 0.5) each pair of them rounds up together a
    quarter of the time, as independent draws would."""
    codes = encode(np.full(160000, 0.25, F32), "e2m1", rounding="sr4", seed=3, offset=0)
    up = (decode(codes, "e2m1") == 0.5).reshape(-1, 4)
    assert abs(up.mean() - 0.5) < 0.01
    for i, j in ((0, 1), (0, 3), (1, 2), (2, 3)):
        assert abs((up[:, i] & up[:, j]).mean() - 0.25) < 0.01, (i, j)


@pytest.mark.parametrize("rounding", ["sr", "sr4", "sr16"])
def test_sr_seeds(rounding):
    x = np.random.default_rng(3).standard_normal((16, 64)).astype(F32)
    a = fc.quantize(x, "nvfp4", rounding=rounding, seed=1)
    b = fc.quantize(x, "nvfp4", rounding=rounding, seed=1)
    c = fc.quantize(x, "nvfp4", rounding=rounding, seed=2)
    d = fc.quantize(x, "nvfp4", rounding=rounding, seed=1, offset=1)
    np.testing.assert_array_equal(a.codes, b.codes)
    assert np.any(a.codes != c.codes)
    assert np.any(a.codes != d.codes)


def test_sr_on_grid_values_is_exact():
    g = np.concatenate([E2M1, -E2M1[1:]])
    x = np.tile(g, 100)
    np.testing.assert_array_equal(decode(encode(x, "e2m1", rounding="sr", seed=4), "e2m1"), x)


@pytest.mark.parametrize("preset", ["mxfp4", "e1m2", "int4", "int4-sm", "ue5m3"])
def test_sr_picks_a_neighbour_of_the_input_in_every_preset(preset):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 64)).astype(F32)
    q = fc.quantize(x, preset, rounding="sr", seed=8)
    r = fc.quantize(x, preset)
    np.testing.assert_array_equal(q.scales, r.scales)
    element = q.format.element

    def level(codes):  # signed grid index of each code
        c = codes.astype(np.int16)
        if element == "int4":
            return np.where(c >= 8, c - 16, c)
        return np.where(c >= 8, -(c - 8), c)

    lq, lr = level(q.unpacked_codes()), level(r.unpacked_codes())
    assert np.all(np.abs(lq - lr) <= 1)  # at most one grid step from the RTNE code
    assert np.any(lq != lr)
    xs, xr = q.dequantize(), r.dequantize()
    moved = xs != xr
    lo, hi = np.minimum(xs, xr), np.maximum(xs, xr)
    assert np.all((lo[moved] <= x[moved]) & (x[moved] <= hi[moved]))  # x lies between them
