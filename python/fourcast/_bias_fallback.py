"""TEMPORARY numpy codec and RHT for fourcast.bias while fourcast.quant is being built.

Follows docs/conventions.md for the TE two-level rule and the MX floor/rceil rules with
RTNE / away / SR rounding, but SR draws from numpy (not Philox) and RHT signs from numpy:
bits are NOT the library's. Delete once fourcast.quant.quantize and fourcast.rht exist.
"""

from __future__ import annotations

import numpy as np

from fourcast.errors import FormatError

_MAG = {
    "e2m1": np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32),
    "e1m2": np.arange(8, dtype=np.float32) / 4,
    "int4-sm": np.arange(8, dtype=np.float32),
    "int4": np.arange(8, dtype=np.float32),
}
_EMAX = {"e2m1": 2, "e1m2": 0, "int4": 2, "int4-sm": 2}


def _round_grid(a: np.ndarray, grid: np.ndarray, rounding: str, rng: np.random.Generator) -> np.ndarray:
    """Index into `grid` of each magnitude `a` (already clamped to the grid max)."""
    lo = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, len(grid) - 2)
    g_lo, g_hi = grid[lo], grid[lo + 1]
    if rounding == "sr":
        up = rng.random(a.shape, dtype=np.float32) * (g_hi - g_lo) < a - g_lo
    else:
        mid = (g_lo + g_hi) / 2
        tie_up = (lo % 2 == 1) if rounding == "rtne" else np.ones_like(a, bool)
        up = (a > mid) | ((a == mid) & tie_up)
    return lo + up


def roundtrip(x2: np.ndarray, spec, rounding: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    import ml_dtypes

    grid = _MAG[spec.element]
    gmax = np.float32(grid[-1])
    rows, cols = x2.shape
    xb = x2.reshape(rows, cols // spec.block, spec.block)
    bamax = np.abs(xb).max(-1, keepdims=True)
    if spec.rule == "te" and spec.scale == "e4m3":
        amax = np.float32(np.abs(x2).max())
        s_enc = np.float32(min(np.float32(448) * gmax / amax, np.finfo(np.float32).max)) if amax > 0 else np.float32(1)
        s_dec = (bamax * (s_enc * (np.float32(1) / gmax))).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        with np.errstate(divide="ignore"):
            enc = np.minimum(np.float32(1) / (s_dec * (np.float32(1) / s_enc)), np.finfo(np.float32).max)
        y = np.clip(xb * enc, -gmax, gmax)
        dec = s_dec / s_enc
    elif spec.scale == "ue8m0" and spec.rule in ("floor", "rceil"):
        safe = np.where(bamax > 0, bamax, np.float32(2.0**-127))
        if spec.rule == "floor":
            e = np.floor(np.log2(safe)) - _EMAX[spec.element]
        else:
            e = np.ceil(np.log2(safe * (np.float32(1) / gmax)))
        e = np.clip(e, -127, 127)
        dec = np.exp2(e).astype(np.float32)
        y = np.clip(xb / dec, -gmax, gmax)
    else:
        raise FormatError(f"the temporary bias codec has no {spec.scale}/{spec.rule}; wait for fourcast.quant")
    idx = _round_grid(np.abs(y), grid, rounding, np.random.default_rng(seed))
    q = (np.sign(y) * grid[idx] * dec).astype(np.float32).reshape(rows, cols)
    if spec.element == "int4":
        codes = np.where(y < 0, (16 - idx) % 16, idx)
    else:
        codes = idx | np.where(np.signbit(y), 8, 0)
    flat = codes.reshape(-1).astype(np.uint8)
    packed = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)
    return q, packed


def _hadamard(n: int) -> np.ndarray:
    h = np.ones((1, 1), np.float64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def rht(x2: np.ndarray, n: int, seed: int, inverse: bool = False) -> np.ndarray:
    rows, cols = x2.shape
    signs = np.random.default_rng(seed + 0x5EED).choice((-1.0, 1.0), n)
    h = _hadamard(n)
    blocks = x2.reshape(rows, cols // n, n).astype(np.float64)
    if inverse:
        out = (blocks @ h) * signs  # H symmetric: (D H)^-1 applied on the right
    else:
        out = (blocks * signs) @ h
    return np.ascontiguousarray(out.reshape(rows, cols), dtype=np.float32)
