"""Random Hadamard transform: orthogonal, equal to the float64 Sylvester matrix
product, and (A H)(H^T B) = A B; sign policies as docs/conventions.md defines them.

Tolerances: float64 inputs are transformed in float64 (errors ~1e-15 relative);
float32 inputs are computed in float64 and rounded once, so each output is within
one float32 rounding (2^-24 relative to the block norm, plus f64 noise)."""

import numpy as np
import pytest

import fourcast as fc

TE_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
SIZES = [16, 32, 64, 128]


def sylvester(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def rht_matrix(n, signs):
    """Right-multiplication matrix: x_block @ M = H (d * x_block) / sqrt(n)."""
    return np.diag(signs) @ sylvester(n) / np.sqrt(n)


@pytest.mark.parametrize("n", SIZES)
def test_orthogonal_and_equal_to_the_matrix(n):
    signs = fc.rht_signs(n, "per-layer", seed=n).astype(np.float64)
    m = fc.rht(np.eye(n), n=n, signs=signs)
    np.testing.assert_allclose(m, rht_matrix(n, signs), atol=1e-15)
    np.testing.assert_allclose(m @ m.T, np.eye(n), atol=1e-14)
    x = np.random.default_rng(n).standard_normal((5, 3 * n))
    expected = (x.reshape(5, 3, n) @ rht_matrix(n, signs)).reshape(5, 3 * n)
    np.testing.assert_allclose(fc.rht(x, n=n, signs=signs), expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("n", SIZES)
def test_float32_rounds_once(n):
    x = np.random.default_rng(1).standard_normal((4, 2 * n)).astype(np.float32)
    y = fc.rht(x, n=n)
    assert y.dtype == np.float32
    exact = (x.astype(np.float64).reshape(4, 2, n) @ rht_matrix(n, fc.rht_signs(n, "te"))).reshape(4, 2 * n)
    np.testing.assert_array_less(np.abs(y - exact), np.abs(exact) * 2.0**-24 + 1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_gemm_identity(n):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((7, 2 * n))
    b = rng.standard_normal((2 * n, 9))
    for policy in ("te", "per-step", "none"):
        at = fc.rht(a, n=n, signs=policy, seed=3)
        bt = fc.rht(b, n=n, signs=policy, seed=3, axis=0)
        np.testing.assert_allclose(at @ bt, a @ b, rtol=0, atol=1e-12)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    prod = fc.rht(a32, n=n) @ fc.rht(b32, n=n, axis=0)
    # float32 rounding of the transform and of the product: relative to |a||b|.
    bound = 1e-5 * np.abs(a32).sum(1, keepdims=True) @ np.abs(b32).max(0, keepdims=True)
    assert np.all(np.abs(prod - a32 @ b32) <= bound)


def test_sign_policies():
    np.testing.assert_array_equal(fc.rht_signs(16, "te"), TE_SIGNS)
    np.testing.assert_array_equal(fc.rht_signs(64, "te"), TE_SIGNS * 4)
    s = fc.rht_signs(128, "per-layer", seed=77)
    bits = fc.philox(77, np.arange(128)).astype(np.int64)[:, 0] & 1
    np.testing.assert_array_equal(s, np.where(bits == 1, -1.0, 1.0))
    np.testing.assert_array_equal(fc.rht_signs(32, "per-step", seed=77), s[:32])
    assert np.any(fc.rht_signs(32, "per-layer", seed=1) != fc.rht_signs(32, "per-layer", seed=2))
    np.testing.assert_array_equal(fc.rht_signs(16, "none"), np.ones(16))
    with pytest.raises(fc.FormatError, match="te"):
        fc.rht_signs(16, "random")
    with pytest.raises(fc.FormatError, match="16, 32, 64, 128"):
        fc.rht_signs(8, "te")


def test_axis0_and_nd_and_types():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)  # leading dims flatten to 32 rows
    y = fc.rht(x, axis=0)
    flat = x.reshape(32, 8)
    np.testing.assert_array_equal(y.reshape(32, 8), fc.rht(np.ascontiguousarray(flat.T)).T)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(rng.standard_normal((4, 32)).astype(np.float32)).to(torch.bfloat16)
    out = fc.rht(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    ref = fc.rht(t.float().numpy())
    np.testing.assert_array_equal(out.float().numpy(), torch.from_numpy(ref).to(torch.bfloat16).float().numpy())


def test_rht_errors():
    with pytest.raises(fc.ShapeError, match="multiple of 16"):
        fc.rht(np.zeros((2, 24)))
    with pytest.raises(fc.FormatError):
        fc.rht(np.zeros((2, 16)), signs=np.ones(8))
    with pytest.raises(TypeError):
        fc.rht(np.zeros((2, 16), np.int32))
    with pytest.raises(fc.NonFiniteError):
        fc.rht(np.full((1, 16), np.inf))
