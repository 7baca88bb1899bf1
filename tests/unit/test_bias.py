"""fourcast.bias: exact statistics on hand-computed cases, SR unbiasedness, RHT sanity,
distributions, depth helpers and the captured-tensor reader."""

import math

import numpy as np
import pytest

import fourcast as fc
from fourcast import _core
from fourcast.bias import analyse_run, depth, measure, resolve, study, synthetic
from fourcast.errors import ConfigError, FormatError, ShapeError

# --------------------------------------------------------------- core statistics


def test_core_statistics_exact():
    x = np.array([1, -2, 0, 4], np.float32)
    q = np.array([1, -1.5, 0.5, 4], np.float32)
    s = _core.bias_stats(x, q, 2)
    t = s["tensor"]
    assert t["bias"] == -0.5 / 7  # sign(0) = 0: the 0 -> 0.5 error does not count
    assert t["rel_rmse"] == math.sqrt(0.5 / 21)
    assert t["sqnr_db"] == 10 * math.log10(21 / 0.5)
    assert t["gain"] == 20 / 21
    assert t["norm_ratio"] == math.sqrt(19.5 / 21)
    assert s["blocks"]["bias"].tolist() == [-0.5 / 3, 0.0]


def test_core_rejects_mismatch_and_nan():
    with pytest.raises(ShapeError, match="3 and 2"):
        _core.bias_stats(np.zeros(3, np.float32), np.zeros(2, np.float32))
    with pytest.raises(fc.NonFiniteError):
        _core.bias_stats(np.array([1, np.nan], np.float32), np.zeros(2, np.float32))


def test_depth_helpers():
    assert _core.depth_product([-0.5, 1.0, 0.0]) == [0.5, 1.0, 1.0]
    assert _core.geometric_rate([0.9, 0.81, 0.729]) == pytest.approx(0.9, abs=1e-12)


# ------------------------------------------------------ measure: hand-computed cases
# MX floor with block amax in [4, 8) (E2M1, INT4) or [1, 2) (E1M2) gives scale 2^0 = 1,
# so q(x) is the grid's RTNE (ties to the even code) of x itself.


def _block(values, fill, n=32):
    return np.array(values + [fill] * (n - len(values)), np.float32).reshape(1, n)


def test_e2m1_rtne_bias_exact():
    # 0.75->1 (+.25), 1.25->1 (-.25), 2.5->2 (-.5), 3.5->4 (+.5), 5->4 (-1), -5->-4 (-1), 0.25->0 (-.25)
    x = _block([6, 0.75, 1.25, 2.5, 3.5, 5, -5, 0.25], 1.0)
    r = measure(x, "e2m1/mx", rounding="rtne")
    abs_sum = 6 + 0.75 + 1.25 + 2.5 + 3.5 + 5 + 5 + 0.25 + 24
    assert r.bias == -2.25 / abs_sum
    assert r.rel_rmse == math.sqrt((3 * 0.0625 + 2 * 0.25 + 2 * 1) / float(np.sum(x.astype(np.float64) ** 2)))
    # codes: 6->7, 1->2 (x24, plus 0.75 and 1.25), 2->4, 4->6 (3.5, 5), -4->14, 0->0
    want = [0] * 16
    want[7], want[2], want[4], want[6], want[14], want[0] = 1, 26, 1, 2, 1, 1
    assert r.histogram == want
    assert r.level_fraction[2] == 26 / 32


def test_e1m2_rtne_bias_exact():
    # step 0.25: .125->0 (-.125), .375->.5 (+.125), .625->.5 (-.125), .875->1 (+.125),
    # 1.625->1.5 (-.125), -1.125->-1 (-.125); 1.75 is the block amax (exact)
    x = _block([1.75, 0.125, 0.375, 0.625, 0.875, 1.625, -1.125], 0.5)
    r = measure(x, "e1m2/mx", rounding="rtne")
    abs_sum = 1.75 + 0.125 + 0.375 + 0.625 + 0.875 + 1.625 + 1.125 + 25 * 0.5
    assert r.bias == -0.25 / abs_sum


def test_int4_same_grid_as_e1m2_times_four():
    x = _block([7, 0.5, 1.5, 2.5, 3.5, 6.5, -4.5], 2.0)
    r = measure(x, "int4/mx", rounding="rtne")
    # .5->0 (-.5), 1.5->2 (+.5), 2.5->2 (-.5), 3.5->4 (+.5), 6.5->6 (-.5), -4.5->-4 (-.5)
    abs_sum = 7 + 0.5 + 1.5 + 2.5 + 3.5 + 6.5 + 4.5 + 25 * 2
    assert r.bias == -1.0 / abs_sum
    e1m2 = measure(x / 4, "e1m2/mx", rounding="rtne")
    assert e1m2.bias == r.bias


def test_per_block_statistics_merge_to_tensor():
    x = synthetic("laplace", (8, 64), seed=5)
    r = measure(x, "e2m1", keep_blocks=True)
    assert r.blocks["bias"].shape == (8 * 64 // 16,)
    assert r.block_bias["min"] <= r.bias <= r.block_bias["max"]
    assert sum(r.histogram) == x.size
    assert sum(r.level_fraction) == pytest.approx(1.0, abs=1e-12)


def test_axis_zero_measures_columns():
    x = synthetic("gaussian", (64, 48), seed=2)
    assert measure(x, "e2m1", axis=0).bias == measure(np.ascontiguousarray(x.T), "e2m1").bias


# ------------------------------------------------------------------ SR unbiasedness


@pytest.mark.parametrize("grid", ["e2m1", "e1m2"])
def test_sr_bias_is_statistically_zero(grid):
    # Every block holds +-amax of the tensor, so the TE rule's E4M3 block scale is exact
    # (448) and nothing saturates: the only bias left would be the rounding's.
    x = synthetic("gaussian", (512, 1024), seed=11)
    amax = float(np.abs(x).max())
    x.reshape(-1, 16)[:, 0] = amax
    r = measure(x, grid, rounding="sr", seed=3)
    abs_sum = float(np.abs(x.astype(np.float64)).sum())
    # standard error of the signed bias <= ||q - x|| / sum|x| (per-element SR variance <= err^2 in mean)
    se = r.rel_rmse * math.sqrt(float((x.astype(np.float64) ** 2).sum())) / abs_sum
    assert abs(r.bias) < 5 * se
    rtne = measure(x, grid, rounding="rtne")
    assert abs(rtne.bias) > 10 * se  # RTNE's shrinkage is well above SR's noise floor


def test_sr_differs_by_seed_and_repeats_per_seed():
    x = synthetic("gaussian", (16, 64), seed=1)
    a, b, c = (measure(x, "e2m1", rounding="sr", seed=s) for s in (1, 1, 2))
    assert a.bias == b.bias
    assert a.bias != c.bias


# --------------------------------------------------------------------------- RHT


def _normal_cdf(z):
    return 0.5 * (1 + np.frompyfunc(math.erf, 1, 1)(z / math.sqrt(2)).astype(np.float64))


@pytest.mark.parametrize("n", [16, 128])
def test_rht_of_gaussian_stays_gaussian(n):
    from fourcast.bias import _rht

    x = synthetic("gaussian", (64, 1024), seed=4)
    y = _rht(x, n, seed=9).astype(np.float64)
    # orthogonal: row norms kept, and the inverse recovers x
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-5)
    np.testing.assert_allclose(_rht(y.astype(np.float32), n, seed=9, inverse=True), x, atol=1e-5)
    v = y.ravel()
    count = v.size
    assert abs(v.mean()) < 5 / math.sqrt(count)
    assert abs(v.var() - 1) < 5 * math.sqrt(2 / count)
    kurt = float(np.mean(v**4) / v.var() ** 2)
    assert abs(kurt - 3) < 5 * math.sqrt(24 / count)
    # Kolmogorov-Smirnov against N(0, 1) on a subsample (critical value at 0.1% ~ 1.95/sqrt(m))
    s = np.sort(v[::16])
    cdf = _normal_cdf(s)
    m = s.size
    ks = max(np.max(np.arange(1, m + 1) / m - cdf), np.max(cdf - np.arange(m) / m))
    assert ks < 1.95 / math.sqrt(m)


def test_rht_gaussianises_heavy_tails():
    from fourcast.bias import _rht

    x = synthetic("laplace", (64, 1024), seed=4).astype(np.float64)
    y = _rht(x.astype(np.float32), 128, seed=1).astype(np.float64)
    kurt = lambda v: float(np.mean(v**4) / np.mean(v**2) ** 2)  # noqa: E731
    assert kurt(x) > 5.5 and abs(kurt(y) - 3) < 0.1


def test_rht_reports_unrotated_bias():
    x = synthetic("student-t:3", (32, 256), seed=0)
    r = measure(x, "e2m1", rht=16)
    assert r.rht == 16 and r.bias_unrotated is not None
    assert measure(x, "e2m1").bias_unrotated is None


# ------------------------------------------------------------------- distributions


def test_distributions_shapes_and_scale():
    for name in ("gaussian", "laplace"):
        x = synthetic(name, (256, 1024), seed=0)
        assert x.dtype == np.float32 and x.shape == (256, 1024)
        assert float(x.astype(np.float64).var()) == pytest.approx(1.0, abs=0.02)
    t3 = synthetic("student-t:3", (64, 64), seed=0)
    assert np.array_equal(t3, synthetic("student-t", (64, 64), seed=0, nu=3))
    logn = synthetic("lognormal:2", (64, 64), seed=0)
    assert np.all(logn != 0) and np.any(logn < 0)
    assert np.array_equal(np.log(np.abs(logn)) / 2, np.log(np.abs(synthetic("lognormal", (64, 64), seed=0, sigma=2))) / 2)


def test_outliers_hit_the_requested_fraction_of_blocks():
    base = synthetic("gaussian", (512, 512), seed=1)
    x = synthetic("gaussian", (512, 512), seed=1, outliers=0.1, outlier_scale=50)
    rms = float(np.sqrt(np.mean(base.astype(np.float64) ** 2)))
    hit = (np.abs(x.reshape(-1, 16)) > 40 * rms).any(axis=1).mean()
    assert hit == pytest.approx(0.1, abs=0.01)
    assert synthetic("gaussian+outliers", (32, 32), seed=0).shape == (32, 32)


# --------------------------------------------------------------------- bad names


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: synthetic("cauchy", (4, 16)), ["distribution 'cauchy'", "gaussian", "laplace", "student-t", "lognormal"]),
        (lambda: measure(np.ones((1, 16), np.float32), "e3m0"), ["grid or preset 'e3m0'", "e2m1", "e1m2", "int4", "nvfp4"]),
        (lambda: measure(np.ones((1, 16), np.float32), "e2m1/nope"), ["scale rule 'nope'", "nv", "mx"]),
        (lambda: measure(np.ones((1, 16), np.float32), "e2m1", rounding="up"), ["rounding 'up'", "rtne", "sr"]),
        (lambda: measure(np.ones((1, 16), np.float32), "e2m1", rht=8), ["RHT size '8'", "16", "128"]),
        (lambda: depth(["e2m1"], stacks=["conv"], depth=1), ["stack 'conv'", "linear", "mlp"]),
    ],
)
def test_bad_names_list_the_valid_ones(call, words):
    with pytest.raises(FormatError) as info:
        call()
    for w in words:
        assert w in str(info.value)


def test_shape_that_does_not_fit_is_named():
    with pytest.raises(ShapeError, match="length 24 .* block 16"):
        measure(np.ones((2, 24), np.float32), "e2m1")


def test_resolve_forms():
    assert resolve("nvfp4").to_dict() == {"element": "e2m1", "scale": "e4m3", "block": 16, "rule": "te"}
    assert resolve("e1m2", "mx").label == "e1m2/mx"
    assert resolve({"element": "int4", "scale": "ue5m3", "block": 16, "rule": "te"}).label == "int4/ue5m3"


# ---------------------------------------------------------------------------- study


def test_study_sweeps_the_full_product():
    s = study(["e2m1", "e1m2"], ["nv", "mx"], ["gaussian", "laplace"], ["rtne", "sr"], [0, 32], shape=(8, 128))
    assert len(s.rows) == 2 * 2 * 2 * 2 * 2
    keys = {(r["dist"], r["format"], r["rounding"], r["rht"]) for r in s.rows}
    assert len(keys) == len(s.rows)
    assert "| dist | format |" in s.to_markdown()


# ---------------------------------------------------------------------------- depth


def test_depth_curves_are_consistent():
    d = depth(["e2m1", "e1m2"], rhts=[0, 16], depth=4, width=64, tokens=32, stacks=["linear", "mlp"])
    assert len(d.curves) == 2 * 2 * 2
    for c in d.curves:
        assert len(c["norm_ratio"]) == 4
        assert c["depth_product"] == pytest.approx(np.cumprod(1 + np.array(c["bias"])).tolist(), rel=1e-12)
        assert c["gain_product"] == pytest.approx(np.cumprod(c["input_gain"]).tolist(), rel=1e-12)
        assert all(0 < v <= 1 for v in c["cosine"])
    assert "prod(1+b_l)" in d.to_markdown()


def test_depth_first_layer_matches_a_direct_computation():
    d = depth(["e2m1"], rhts=[0], depth=1, width=64, tokens=32, stacks=["linear"], seed=7)
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    x = synthetic("gaussian", (32, 64), seed=7)
    from fourcast.bias import _quantize

    q, _ = _quantize(x, resolve("e2m1"), "rtne", 7 * 1_000_003)
    y, yq = x @ w.T, q @ w.T
    assert d.curves[0]["norm_ratio"][0] == pytest.approx(np.linalg.norm(yq) / np.linalg.norm(y), rel=1e-5)


# ------------------------------------------------------------------ captured tensors


def test_run_without_tensors_says_how_to_capture(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        analyse_run(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"--capture-every K"):
        analyse_run(tmp_path)


def test_analyse_captured_tensors(tmp_path):
    step = tmp_path / "tensors" / "step000010"
    step.mkdir(parents=True)
    np.save(step / "blocks.0.mlp.fc1.x.npy", synthetic("gaussian", (128, 64), seed=1))
    np.save(step / "blocks.0.mlp.fc1.w.npy", synthetic("gaussian", (96, 64), seed=2))
    np.save(step / "blocks.0.mlp.fc1.dy.npy", synthetic("laplace", (128, 96), seed=3))
    np.save(step / "notes.npy", np.zeros(3))  # not layer.role: ignored
    a = analyse_run(tmp_path, grids=["e2m1"], rhts=[0, 128])
    assert a.steps == [10] and a.layers == ["blocks.0.mlp.fc1"]
    ops = {(r["operand"], r["rht"]) for r in a.rows}
    # x: 64 columns, 128 rows; w: 64 cols, 96 rows; dy: 96 cols, 128 rows -> RHT 128 fits only along 128
    assert ops == {("fprop.x", 0), ("wgrad.x", 0), ("wgrad.x", 128), ("fprop.w", 0), ("dgrad.w", 0),
                   ("dgrad.dy", 0), ("wgrad.dy", 0), ("wgrad.dy", 128)}
    assert len(a.skipped) == 4
    summary = {(s["operand"], s["rht"]): s for s in a.summary()}
    fx = next(r for r in a.rows if (r["operand"], r["rht"]) == ("fprop.x", 0))
    assert summary[("fprop.x", 0)]["bias_mean"] == fx["bias"]


def test_captured_tensor_must_be_float32_2d(tmp_path):
    step = tmp_path / "tensors" / "step000000"
    step.mkdir(parents=True)
    np.save(step / "l.x.npy", np.zeros((4, 4, 4), np.float32))
    with pytest.raises(ConfigError, match="2-D float32"):
        analyse_run(tmp_path)


def test_depth_and_run_accept_several_scale_rules():
    d = depth(["e2m1"], ["nv", "mx"], rhts=[0], depth=1, width=64, tokens=16, stacks=["linear"])
    assert [c["format"] for c in d.curves] == ["e2m1/nv", "e2m1/mx"]


def test_relu_distribution_is_half_exact_zeros():
    x = synthetic("relu", (256, 256), seed=0)
    assert x.min() == 0.0
    assert (x == 0).mean() == pytest.approx(0.5, abs=0.01)
    assert float(np.mean(x.astype(np.float64) ** 2)) == pytest.approx(1.0, abs=0.02)


def test_run_analysis_groups_by_step_and_layer(tmp_path):
    for step in (0, 5):
        d = tmp_path / "tensors" / f"step{step:06d}"
        d.mkdir(parents=True)
        for layer in ("a", "b"):
            np.save(d / f"{layer}.x.npy", synthetic("laplace", (32, 64), seed=step + len(layer)))
    a = analyse_run(tmp_path, grids=["e2m1"], rhts=[0], operands=["fprop.x"])
    assert len(a.rows) == 4
    steps = {s["step"]: s for s in a.per_step()}
    assert set(steps) == {0, 5} and steps[5]["tensors"] == 2
    rows5 = [r["bias"] for r in a.rows if r["step"] == 5]
    assert steps[5]["bias_mean"] == pytest.approx(np.mean(rows5), rel=1e-15)
    assert {s["layer"] for s in a.per_layer()} == {"a", "b"}
    assert a.summary()[0]["tensors"] == 4
