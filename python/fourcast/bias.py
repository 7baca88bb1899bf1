"""Shrinkage-bias analysis: how a 4-bit grid, scale rule, rounding and RHT bias a tensor.

For a tensor x and its quantize-dequantize q(x) (../shared/docs/numerics.md section 6):

- ``bias``      relative signed bias sum(sign(x) (q - x)) / sum(|x|); negative = shrinkage
- ``rel_rmse``  ||q - x|| / ||x||;  ``sqnr_db`` = 10 log10(||x||^2 / ||q - x||^2)
- ``gain``      <q, x> / <x, x> (the systematic scale of x inside q; noise leaves it alone)
- bucket utilisation: histogram of the 16 codes, folded to magnitude levels, and its
  entropy in bits (4 = every code equally used)

per tensor and per block (the statistics are summed in the Rust core, ``_core.bias_stats``).
With an RHT the statistics describe what the quantizer sees, the rotated tensor; the
bias of the un-rotated round trip is reported beside it (``bias_unrotated``).

Entry points:

- :func:`measure`  one tensor, one format
- :func:`synthetic` Gaussian, Laplace, Student-t, log-normal magnitudes, block outliers
- :func:`study`    grid x scale rule x rounding x RHT x distribution sweep
- :func:`depth`    deep random linear / MLP stacks whose layer inputs are quantized:
  the product of (1 + b_l) and the measured ||y_q|| / ||y|| versus depth (numpy only)
- :func:`analyse_run` tensors captured during ``fourcast train``

Captured-tensor format (what :func:`analyse_run` reads; QLinear writes it)
--------------------------------------------------------------------------
``fourcast train ... --capture-every K`` makes every quantized linear layer save its
high-precision GEMM operands, BEFORE any RHT or quantization, every K optimizer steps::

    RUN_DIR/tensors/step{S:06d}/{layer}.{role}.npy

- ``S``: the optimizer step (0-based) at which the tensors were taken.
- ``layer``: the module's qualified name in the model (``blocks.3.mlp.fc1``; dots allowed).
- ``role``: ``x`` (layer input, shape (tokens, in_features)), ``w`` (weight,
  (out_features, in_features)) or ``dy`` (gradient of the layer output,
  (tokens, out_features)). Leading batch dims are flattened into ``tokens``.
- dtype float32 (bf16 tensors are upcast exactly), 2-D, C order, ``numpy.save`` format.
  A row subset of x / dy (the first N tokens) is allowed; keep N a multiple of 128 so
  Wgrad-direction blocks and RHT sizes fit.
- optional ``RUN_DIR/tensors/capture.json``: {"every": K, "max_tokens": N,
  "recipe": "<name>"}; informative only.

Each tensor is analysed along both of its GEMM reduction axes, named like the recipe's
operands: ``fprop.x`` (x, last axis), ``wgrad.x`` (x, axis 0), ``fprop.w`` (w, last),
``dgrad.w`` (w, axis 0), ``dgrad.dy`` (dy, last), ``wgrad.dy`` (dy, axis 0).

    >>> import fourcast as fc
    >>> x = fc.bias.synthetic("gaussian", (64, 256), seed=0)
    >>> r = fc.bias.measure(x, "e2m1", rounding="rtne")
    >>> r.bias < 0
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fourcast import _core, quant
from fourcast.errors import ConfigError, FormatError

GRIDS = ("e2m1", "e1m2", "int4", "int4-sm")
#: short scale-rule names of the studies -> (block scale format, block, rule)
SCALE_RULES: dict[str, dict[str, Any]] = {
    "nv": {"scale": "e4m3", "block": 16, "rule": "te"},  # NVFP4 two-level (TE rule)
    "mx": {"scale": "ue8m0", "block": 32, "rule": "floor"},  # OCP MX floor
    "mx-rceil": {"scale": "ue8m0", "block": 32, "rule": "rceil"},
    "ue5m3": {"scale": "ue5m3", "block": 16, "rule": "te"},
}
ROUNDINGS = ("rtne", "away", "sr")
RHT_SIZES = (0, 16, 32, 64, 128)
DISTRIBUTIONS = ("gaussian", "laplace", "student-t", "lognormal", "relu")
ROLES = ("x", "w", "dy")
#: recipe operand -> (captured role, axis of the GEMM's reduction dim)
OPERANDS: dict[str, tuple[str, int]] = {
    "fprop.x": ("x", -1),
    "wgrad.x": ("x", 0),
    "fprop.w": ("w", -1),
    "dgrad.w": ("w", 0),
    "dgrad.dy": ("dy", -1),
    "wgrad.dy": ("dy", 0),
}
CAPTURE_HINT = (
    "capture them with `fourcast train ... --capture-every K` (quantized layers then write "
    "RUN_DIR/tensors/step{S:06d}/{layer}.{x|w|dy}.npy every K steps)"
)

# magnitude of each sign-magnitude code 0..7, in grid units
_LEVELS = {
    "e2m1": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),
    "e1m2": tuple(k / 4 for k in range(8)),
    "int4-sm": tuple(float(k) for k in range(8)),
    "int4": tuple(float(k) for k in range(9)),  # two's complement: |-8| = 8 (unused)
}


def _as_list(names: str | Sequence[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


def _unknown(what: str, name: Any, valid: Iterable[Any]) -> FormatError:
    return FormatError(f"unknown {what} '{name}'; valid: {', '.join(str(v) for v in valid)}")


def _num(v: float) -> float | None:
    """JSON-safe float: +-inf / NaN (an exact round trip's SQNR) become None."""
    v = float(v)
    return v if math.isfinite(v) else None


# --------------------------------------------------------------------------- formats


@dataclass(frozen=True)
class QuantSpec:
    """How one tensor is quantized: element grid, block scale format, block, scale rule."""

    element: str
    scale: str
    block: int
    rule: str

    @property
    def label(self) -> str:
        for short, s in SCALE_RULES.items():
            if (s["scale"], s["block"], s["rule"]) == (self.scale, self.block, self.rule):
                return f"{self.element}/{short}"
        return f"{self.element}/{self.scale}-b{self.block}-{self.rule}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def resolve(fmt: str | Mapping[str, Any] | QuantSpec, scale: str | None = None) -> QuantSpec:
    """A quantization spec from a grid name (``"e1m2"``, with ``scale`` = a
    :data:`SCALE_RULES` name, default ``"nv"``), ``"grid/scale"``, a recipe preset
    (``"nvfp4"``: its activation format) or a dict with element/scale/block/rule.

    >>> resolve("e1m2/mx").block, resolve("nvfp4").element
    (32, 'e2m1')
    """
    if isinstance(fmt, QuantSpec):
        return fmt
    if isinstance(fmt, Mapping):
        try:
            return QuantSpec(str(fmt["element"]), str(fmt["scale"]), int(fmt["block"]), str(fmt["rule"]))
        except KeyError as exc:
            raise FormatError(f"format dict needs element, scale, block and rule; missing {exc}") from None
    name = str(fmt).lower()
    if "/" in name:
        name, _, scale = name.partition("/")
    if name in GRIDS:
        rule_name = scale or "nv"
        if rule_name not in SCALE_RULES:
            raise _unknown("scale rule", rule_name, SCALE_RULES)
        return QuantSpec(name, **SCALE_RULES[rule_name])
    from fourcast import recipes

    if name in recipes.names():
        operand = recipes.recipe(name).x
        if operand is None or operand["element"] not in GRIDS:
            raise FormatError(f"recipe '{name}' has no 4-bit activation format; use a grid name: {', '.join(GRIDS)}")
        spec = QuantSpec(operand["element"], operand["scale"], operand["block"], operand["rule"])
        if scale is not None:
            if scale not in SCALE_RULES:
                raise _unknown("scale rule", scale, SCALE_RULES)
            spec = QuantSpec(spec.element, **SCALE_RULES[scale])
        return spec
    raise _unknown("grid or preset", fmt, [*GRIDS, *recipes.names()])


# ---------------------------------------------------------------------- distributions


def _parse_dist(name: str) -> tuple[str, float | None, bool]:
    """'student-t:3+outliers' -> ('student-t', 3.0, True)."""
    base, plus, extra = name.lower().partition("+")
    if plus and extra != "outliers":
        raise FormatError(f"unknown distribution modifier '+{extra}' in '{name}'; valid: +outliers")
    base, colon, param = base.partition(":")
    if base in ("t", "student_t", "studentt"):
        base = "student-t"
    if base not in DISTRIBUTIONS:
        raise _unknown("distribution", name, DISTRIBUTIONS)
    value = None
    if colon:
        try:
            value = float(param)
        except ValueError:
            raise FormatError(f"distribution parameter in '{name}' is not a number") from None
    return base, value, bool(plus)


def synthetic(
    dist: str,
    shape: Sequence[int] = (256, 4096),
    seed: int = 0,
    *,
    nu: float | None = None,
    sigma: float | None = None,
    outliers: float = 0.0,
    outlier_scale: float = 20.0,
    outlier_block: int = 16,
) -> np.ndarray:
    """A float32 test tensor. ``dist``: ``gaussian`` (unit variance), ``laplace`` (unit
    variance), ``student-t`` (``nu`` degrees of freedom, default 4; also ``"student-t:3"``),
    ``lognormal`` (magnitudes exp(N(0, sigma^2)), default sigma 1, random signs; also
    ``"lognormal:2"``), ``relu`` (sqrt(2) max(0, N(0, 1)): half exact zeros, like an
    MLP's second-GEMM input). A ``+outliers`` suffix (or ``outliers=`` > 0) puts one element of
    ``outlier_scale`` times the tensor's RMS in that fraction of blocks of
    ``outlier_block`` along the last axis (default 5% when given by suffix).

    >>> synthetic("student-t:3", (2, 16), seed=1).dtype
    dtype('float32')
    """
    base, param, with_outliers = _parse_dist(dist)
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in shape)
    if base == "gaussian":
        x = rng.standard_normal(shape)
    elif base == "laplace":
        x = rng.laplace(0.0, 1.0 / math.sqrt(2.0), shape)
    elif base == "student-t":
        dof = float(param if param is not None else (nu if nu is not None else 4.0))
        if dof <= 0:
            raise FormatError(f"student-t needs nu > 0, got {dof}")
        x = rng.standard_t(dof, shape)
    elif base == "lognormal":
        s = float(param if param is not None else (sigma if sigma is not None else 1.0))
        x = np.exp(rng.normal(0.0, s, shape)) * rng.choice((-1.0, 1.0), shape)
    else:
        x = math.sqrt(2.0) * np.maximum(rng.standard_normal(shape), 0.0)
    if with_outliers and outliers == 0.0:
        outliers = 0.05
    if outliers > 0.0:
        x = _add_outliers(x, rng, outliers, outlier_scale, outlier_block)
    return np.ascontiguousarray(x, dtype=np.float32)


def _add_outliers(x: np.ndarray, rng: np.random.Generator, frac: float, scale: float, block: int) -> np.ndarray:
    if x.shape[-1] % block:
        raise FormatError(f"outlier blocks of {block} do not tile the last axis of shape {x.shape}")
    rms = float(np.sqrt(np.mean(x * x)))
    blocks = x.reshape(-1, block).copy()
    hit = rng.random(blocks.shape[0]) < frac
    where = rng.integers(0, block, blocks.shape[0])
    rows = np.nonzero(hit)[0]
    blocks[rows, where[rows]] = np.sign(blocks[rows, where[rows]] + 1e-30) * scale * rms
    return blocks.reshape(x.shape)


# ------------------------------------------------------------------ quantize adapters


def _quantize(x2: np.ndarray, spec: QuantSpec, rounding: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Round trip of a 2-D float32 array along its last axis with fc.quantize:
    (dequantized float32, packed codes)."""
    fmt = quant.Format(element=spec.element, scale=spec.scale, block=spec.block, rule=spec.rule)
    qt = quant.quantize(x2, fmt, axis=-1, rounding=rounding, seed=seed)
    return np.ascontiguousarray(qt.dequantize(), dtype=np.float32), qt.codes


def _rht(x2: np.ndarray, n: int, seed: int, inverse: bool = False) -> np.ndarray:
    """fc.rht of size n along the last axis with signs fc.rht_signs(n, "per-layer", seed),
    or its inverse d * (H y / sqrt(n))."""
    signs = quant.rht_signs(n, "per-layer", seed)
    if not inverse:
        return quant.rht(x2, n, signs=signs, axis=-1)
    y = quant.rht(x2, n, signs=np.ones(n, np.float32), axis=-1)
    return np.ascontiguousarray((y.reshape(-1, n) * signs).reshape(x2.shape), dtype=np.float32)


# ---------------------------------------------------------------------------- measure


@dataclass
class BiasResult:
    """Statistics of one tensor's quantize-dequantize round trip (see module docstring)."""

    format: str
    spec: dict
    rounding: str
    rht: int
    seed: int
    n: int
    bias: float
    rel_rmse: float
    sqnr_db: float
    norm_ratio: float
    gain: float
    bias_unrotated: float | None
    block_bias: dict
    histogram: list[int]
    levels: list[float]
    level_fraction: list[float]
    value_entropy_bits: float
    blocks: dict | None = field(default=None, repr=False)

    def to_dict(self, blocks: bool = False) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "blocks"}
        for key in ("bias", "rel_rmse", "sqnr_db", "norm_ratio", "gain", "bias_unrotated", "value_entropy_bits"):
            out[key] = None if out[key] is None else _num(out[key])
        out["block_bias"] = {k: _num(v) for k, v in self.block_bias.items()}
        if blocks and self.blocks is not None:
            out["blocks"] = {k: [_num(v) for v in a] for k, a in self.blocks.items()}
        return out


def _to_rows(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim == 0:
        raise FormatError("bias statistics need an array, got a scalar")
    if not np.issubdtype(x.dtype, np.floating):
        raise FormatError(f"bias statistics need a floating-point array, got {x.dtype}")
    x = np.moveaxis(x, axis, -1) if x.ndim > 1 else x
    return np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=np.float32)


def _check_fits(x2: np.ndarray, spec: QuantSpec, rht: int) -> None:
    if rht not in RHT_SIZES:
        raise _unknown("RHT size", rht, RHT_SIZES)
    for what, size in (("block", spec.block), ("RHT size", rht)):
        if size and x2.shape[-1] % size:
            from fourcast.errors import ShapeError

            raise ShapeError(f"quantized axis of length {x2.shape[-1]} is not a multiple of the {what} {size}")


def measure(
    x: np.ndarray,
    fmt: str | Mapping[str, Any] | QuantSpec = "nvfp4",
    *,
    scale: str | None = None,
    rounding: str = "rtne",
    rht: int = 0,
    seed: int = 0,
    axis: int = -1,
    keep_blocks: bool = False,
) -> BiasResult:
    """Quantize ``x`` along ``axis`` with ``fmt`` (see :func:`resolve`), optionally after
    a block RHT of size ``rht`` (signs drawn from ``seed``), and measure the round trip.
    ``rounding``: rtne | away | sr (SR draws from ``seed``). ``keep_blocks`` keeps the
    per-block arrays (``result.blocks``).

    >>> x = synthetic("laplace", (32, 128), seed=3)
    >>> r = measure(x, "e1m2", scale="mx", rht=16)
    >>> (r.rht, r.spec["block"], len(r.histogram))
    (16, 32, 16)
    """
    spec = resolve(fmt, scale)
    if rounding not in ROUNDINGS:
        raise _unknown("rounding", rounding, ROUNDINGS)
    x2 = _to_rows(x, axis)
    _check_fits(x2, spec, int(rht))
    seen = _rht(x2, rht, seed) if rht else x2
    q, codes = _quantize(seen, spec, rounding, seed)
    stats = _core.bias_stats(seen, q, spec.block)
    tensor, blocks = stats["tensor"], stats["blocks"]
    bias_unrotated = None
    if rht:
        back = _rht(q, rht, seed, inverse=True)
        bias_unrotated = _core.bias_stats(x2, back)["tensor"]["bias"]
    hist = _core.code_histogram(np.ascontiguousarray(codes), x2.size)
    levels, fraction = _fold_levels(spec.element, hist)
    entropy = _value_entropy(spec.element, hist)
    bb = blocks["bias"]
    return BiasResult(
        format=spec.label,
        spec=spec.to_dict(),
        rounding=rounding,
        rht=int(rht),
        seed=int(seed),
        n=int(tensor["n"]),
        bias=tensor["bias"],
        rel_rmse=tensor["rel_rmse"],
        sqnr_db=tensor["sqnr_db"],
        norm_ratio=tensor["norm_ratio"],
        gain=tensor["gain"],
        bias_unrotated=bias_unrotated,
        block_bias={
            "mean": float(bb.mean()),
            "std": float(bb.std()),
            "min": float(bb.min()),
            "max": float(bb.max()),
            "frac_negative": float((bb < 0).mean()),
        },
        histogram=[int(h) for h in hist],
        levels=list(levels),
        level_fraction=fraction,
        value_entropy_bits=entropy,
        blocks=blocks if keep_blocks else None,
    )


def _value_entropy(element: str, hist: Sequence[int]) -> float:
    """Entropy (bits) of the distribution over distinct values: +0 and -0 (code 8 of the
    sign-magnitude grids) count as one value. 4 bits would be all 16 codes equally used."""
    counts = np.asarray(hist, dtype=np.float64).copy()
    if element != "int4":
        counts[0] += counts[8]
        counts[8] = 0.0
    p = counts[counts > 0] / max(1.0, counts.sum())
    return float(-(p * np.log2(p)).sum())


def _fold_levels(element: str, hist: Sequence[int]) -> tuple[tuple[float, ...], list[float]]:
    """Fold 16 code counts to magnitude levels (sign-magnitude: code & 7; int4: |value|)."""
    levels = _LEVELS[element]
    counts = [0] * len(levels)
    for code, c in enumerate(hist):
        if element == "int4":
            counts[abs(code - 16 if code >= 8 else code)] += c
        else:
            counts[code & 7] += c
    total = max(1, sum(counts))
    return levels, [c / total for c in counts]


# ------------------------------------------------------------------------------ study


@dataclass
class StudyResult:
    """Rows of a synthetic sweep, one per (dist, format, rounding, rht)."""

    shape: list[int]
    seed: int
    rows: list[dict]

    def to_dict(self) -> dict:
        return {"shape": self.shape, "seed": self.seed, "rows": self.rows}

    def to_markdown(self) -> str:
        head = "| dist | format | rounding | RHT | bias (%) | rel RMSE | SQNR dB | gain | value entropy (bits) |"
        lines = [head, "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in self.rows:
            lines.append(
                f"| {r['dist']} | {r['format']} | {r['rounding']} | {r['rht']} | {100 * r['bias']:+.3f} "
                f"| {r['rel_rmse']:.4f} | {_fmt(r['sqnr_db'], '.2f')} | {r['gain']:.5f} | {r['value_entropy_bits']:.3f} |"
            )
        return "\n".join(lines) + "\n"


def _fmt(v: float | None, spec: str) -> str:
    return "inf" if v is None else format(v, spec)


def study(
    grids: Sequence[str] = ("e2m1", "e1m2", "int4"),
    scales: Sequence[str] = ("nv",),
    dists: Sequence[str] = ("gaussian", "laplace", "student-t:3", "lognormal:1", "gaussian+outliers"),
    roundings: Sequence[str] = ("rtne", "sr"),
    rhts: Sequence[int] = (0, 16, 32, 128),
    shape: Sequence[int] = (256, 4096),
    seed: int = 0,
    progress: Any = None,
) -> StudyResult:
    """Sweep every grid x scale rule x rounding x RHT over each distribution (one tensor
    per distribution, the same for every format). ``progress(done, total)`` is called
    after each measurement when given.

    >>> s = study(["e2m1"], dists=["gaussian"], roundings=["rtne"], rhts=[0], shape=(16, 64))
    >>> [r["format"] for r in s.rows]
    ['e2m1/nv']
    """
    specs = [resolve(g, s) for g in grids for s in scales]
    for r in roundings:
        if r not in ROUNDINGS:
            raise _unknown("rounding", r, ROUNDINGS)
    for n in rhts:
        if int(n) not in RHT_SIZES:
            raise _unknown("RHT size", n, RHT_SIZES)
    tensors = {d: synthetic(d, shape, seed) for d in dists}
    total = len(dists) * len(specs) * len(roundings) * len(rhts)
    rows, done = [], 0
    for d, x in tensors.items():
        for spec in specs:
            for rounding in roundings:
                for n in rhts:
                    res = measure(x, spec, rounding=rounding, rht=int(n), seed=seed)
                    row = {"dist": d, **res.to_dict()}
                    rows.append(row)
                    done += 1
                    if progress is not None:
                        progress(done, total)
    return StudyResult([int(s) for s in shape], int(seed), rows)


# ------------------------------------------------------------------------------ depth


@dataclass
class DepthResult:
    """Per-layer curves of quantized deep stacks, one entry per (stack, format, rounding, rht).

    ``curves[i]`` holds lists over layers 1..depth: ``bias`` (b_l of the quantized layer
    input), ``depth_product`` (running product of 1 + b_l), ``input_gain`` (g_l =
    <q, x> / <x, x> of that input) and ``gain_product`` (running product of g_l: what a
    purely multiplicative shrinkage predicts for the output gain), ``norm_ratio``
    (||y_q|| / ||y|| at the layer output, quantized path vs exact path), ``gain``
    (<y_q, y> / <y, y>), ``cosine``; and ``rate`` (per-layer geometric rate fitted to
    norm_ratio) and ``rate_product`` (the same for depth_product)."""

    depth: int
    width: int
    tokens: int
    dist: str
    seed: int
    curves: list[dict]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_markdown(self) -> str:
        lines = [
            f"| stack | format | rounding | RHT | mean b_l (%) | prod(1+b_l) @{self.depth} "
            f"| prod(g_l) @{self.depth} | gain @{self.depth} | norm ratio @{self.depth} | cos @{self.depth} "
            "| norm rate - 1 (%/layer) |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.curves:
            lines.append(
                f"| {c['stack']} | {c['format']} | {c['rounding']} | {c['rht']} | {100 * np.mean(c['bias']):+.3f} "
                f"| {c['depth_product'][-1]:.4f} | {c['gain_product'][-1]:.4f} | {c['gain'][-1]:.4f} "
                f"| {c['norm_ratio'][-1]:.4f} | {c['cosine'][-1]:.4f} | {100 * (c['rate'] - 1):+.3f} |"
            )
        return "\n".join(lines) + "\n"


def depth(
    grids: Sequence[str] = ("e2m1", "e1m2", "int4"),
    scale: str | Sequence[str] = "nv",
    rhts: Sequence[int] = (0, 16),
    roundings: Sequence[str] = ("rtne",),
    depth: int = 32,
    width: int = 1024,
    tokens: int = 256,
    stacks: Sequence[str] = ("linear", "mlp"),
    dist: str = "gaussian",
    seed: int = 0,
    progress: Any = None,
) -> DepthResult:
    """Deep random stacks where every layer's input is quantized (weights stay exact):

    - ``linear``: y_{l+1} = y_l W_l^T, W_l ~ N(0, 1/width) (norm-preserving on average)
    - ``mlp``:    y_{l+1} = sqrt(2) relu(y_l W_l^T) (He scaling; inputs after layer 1
      are half zeros and non-negative)

    With an RHT the quantized input is Q(y H) H^T (H the block RHT along the reduction
    axis, fresh signs per layer), which equals y in exact arithmetic. The exact and the
    quantized path share the weights; curves compare them layer by layer.

    >>> d = depth(["e2m1"], rhts=[0], depth=3, width=64, tokens=16, stacks=["linear"])
    >>> len(d.curves[0]["norm_ratio"])
    3
    """
    if depth < 1:
        raise FormatError(f"depth must be >= 1, got {depth}")
    for s in stacks:
        if s not in ("linear", "mlp"):
            raise _unknown("stack", s, ("linear", "mlp"))
    specs = [resolve(g, s) for g in grids for s in _as_list(scale)]
    rng = np.random.default_rng(seed)
    x0 = synthetic(dist, (tokens, width), seed)
    weights = [
        (rng.standard_normal((width, width)) / math.sqrt(width)).astype(np.float32) for _ in range(depth)
    ]
    exact = {s: _forward(x0, weights, s) for s in stacks}
    total = len(stacks) * len(specs) * len(roundings) * len(rhts)
    curves, done = [], 0
    for s in stacks:
        for spec in specs:
            for rounding in roundings:
                for n in rhts:
                    curves.append(_depth_curve(x0, weights, exact[s], s, spec, rounding, int(n), seed))
                    done += 1
                    if progress is not None:
                        progress(done, total)
    return DepthResult(int(depth), int(width), int(tokens), dist, int(seed), curves)


def _layer(y: np.ndarray, w: np.ndarray, stack: str) -> np.ndarray:
    z = y @ w.T
    return np.sqrt(np.float32(2.0)) * np.maximum(z, 0) if stack == "mlp" else z


def _forward(x0: np.ndarray, weights: list[np.ndarray], stack: str) -> list[np.ndarray]:
    ys, y = [], x0
    for w in weights:
        y = _layer(y, w, stack)
        ys.append(y)
    return ys


def _depth_curve(x0, weights, exact, stack, spec, rounding, rht, seed) -> dict:
    bias, in_gain, norm, gain, cos = [], [], [], [], []
    y = x0
    for layer, (w, y_ref) in enumerate(zip(weights, exact)):
        layer_seed = seed * 1_000_003 + layer
        seen = _rht(y, rht, layer_seed) if rht else y
        q, _ = _quantize(seen, spec, rounding, layer_seed)
        seen_stats = _core.bias_stats(seen, q)["tensor"]
        bias.append(seen_stats["bias"])
        in_gain.append(seen_stats["gain"])
        yq_in = _rht(q, rht, layer_seed, inverse=True) if rht else q
        y = _layer(yq_in, w, stack)
        s = _core.bias_stats(y_ref, y)["tensor"]
        norm.append(s["norm_ratio"])
        gain.append(s["gain"])
        cos.append(s["gain"] / s["norm_ratio"] if s["norm_ratio"] else 0.0)
    product = _core.depth_product(bias)
    return {
        "stack": stack,
        "format": spec.label,
        "rounding": rounding,
        "rht": rht,
        "bias": bias,
        "depth_product": product,
        "input_gain": in_gain,
        "gain_product": _core.depth_product([g - 1.0 for g in in_gain]),
        "norm_ratio": norm,
        "gain": gain,
        "cosine": cos,
        "rate": _core.geometric_rate(norm),
        "rate_product": _core.geometric_rate(product),
    }


# ------------------------------------------------------------------- captured tensors


@dataclass
class RunAnalysis:
    """Per (step, layer, operand, format, rounding, rht) rows, and means over them:
    ``summary()`` per operand/format/rounding/rht, ``per_step()`` adds the step (bias
    over training), ``per_layer()`` adds the layer (bias through depth)."""

    run_dir: str
    steps: list[int]
    layers: list[str]
    rows: list[dict]
    skipped: list[str]

    _KEYS = ("operand", "format", "rounding", "rht")

    def _group(self, extra: tuple[str, ...]) -> list[dict]:
        keys = (*extra, *self._KEYS)
        groups: dict[tuple, list[dict]] = {}
        for r in self.rows:
            groups.setdefault(tuple(r[k] for k in keys), []).append(r)
        out = []
        for key, rs in sorted(groups.items()):
            bias = [r["bias"] for r in rs]
            out.append(
                {
                    **dict(zip(keys, key)),
                    "tensors": len(rs),
                    "bias_mean": float(np.mean(bias)),
                    "bias_min": float(np.min(bias)),
                    "bias_max": float(np.max(bias)),
                    "gain_mean": float(np.mean([r["gain"] for r in rs])),
                    "rel_rmse_mean": float(np.mean([r["rel_rmse"] for r in rs])),
                }
            )
        return out

    def summary(self) -> list[dict]:
        return self._group(())

    def per_step(self) -> list[dict]:
        return self._group(("step",))

    def per_layer(self) -> list[dict]:
        return self._group(("layer",))

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "summary": self.summary(),
            "per_step": self.per_step(),
            "per_layer": self.per_layer(),
        }


_STEP_DIR = re.compile(r"^step(\d+)$")


def captured(run_dir: str | pathlib.Path) -> dict[int, dict[tuple[str, str], pathlib.Path]]:
    """The captured tensor files of a run: {step: {(layer, role): path}}. Raises
    ConfigError saying how to capture when there are none."""
    root = pathlib.Path(run_dir)
    if not root.is_dir():
        raise ConfigError(f"run folder {root} does not exist")
    found: dict[int, dict[tuple[str, str], pathlib.Path]] = {}
    tensors = root / "tensors"
    if tensors.is_dir():
        for step_dir in sorted(tensors.iterdir()):
            m = _STEP_DIR.match(step_dir.name)
            if not (m and step_dir.is_dir()):
                continue
            for f in sorted(step_dir.glob("*.npy")):
                layer, _, role = f.name[: -len(".npy")].rpartition(".")
                if layer and role in ROLES:
                    found.setdefault(int(m.group(1)), {})[(layer, role)] = f
    if not found:
        raise ConfigError(f"no captured tensors in {tensors}; {CAPTURE_HINT}")
    return found


def analyse_run(
    run_dir: str | pathlib.Path,
    grids: Sequence[str] = ("e2m1", "e1m2", "int4"),
    scale: str | Sequence[str] = "nv",
    rhts: Sequence[int] = (0, 16),
    roundings: Sequence[str] = ("rtne",),
    operands: Sequence[str] = tuple(OPERANDS),
    seed: int = 0,
    progress: Any = None,
) -> RunAnalysis:
    """Measure every captured tensor (format in the module docstring) along each of its
    GEMM reduction axes, per grid, RHT size and rounding. Operands whose axis does not
    fit the block or RHT size are listed in ``skipped`` rather than padded.

    >>> analyse_run("/nonexistent")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    fourcast.errors.ConfigError: run folder /nonexistent does not exist
    """
    for op in operands:
        if op not in OPERANDS:
            raise _unknown("operand", op, OPERANDS)
    files = captured(run_dir)
    specs = [resolve(g, s) for g in grids for s in _as_list(scale)]
    jobs = [(s, k, p) for s, by in sorted(files.items()) for k, p in sorted(by.items())]
    rows, skipped, layers = [], [], set()
    for done, (step, (layer, role), path) in enumerate(jobs, 1):
        x = np.load(path)
        if x.ndim != 2 or x.dtype != np.float32:
            raise ConfigError(f"{path}: captured tensors must be 2-D float32, got {x.dtype} {x.shape}")
        layers.add(layer)
        for op in operands:
            op_role, axis = OPERANDS[op]
            if op_role != role:
                continue
            for spec in specs:
                for n in rhts:
                    length = x.shape[axis]
                    if length % spec.block or (n and length % n):
                        skipped.append(f"step {step} {layer} {op} {spec.label} rht {n}: axis length {length}")
                        continue
                    for rounding in roundings:
                        r = measure(x, spec, rounding=rounding, rht=int(n), seed=seed, axis=axis)
                        rows.append({"step": step, "layer": layer, "operand": op, **r.to_dict()})
        if progress is not None:
            progress(done, len(jobs))
    return RunAnalysis(str(run_dir), sorted(files), sorted(layers), rows, skipped)


def dumps(obj: Any) -> str:
    """JSON text of any result here (non-finite floats as null)."""
    return json.dumps(obj.to_dict() if hasattr(obj, "to_dict") else obj, indent=2)


# ------------------------------------------------------------------------------ plots


def _pyplot():
    from fourcast.errors import require

    mpl = require("matplotlib", "plot")
    mpl.use("Agg")
    return require("matplotlib.pyplot", "plot")


def plot_histograms(result: StudyResult, path: str | pathlib.Path, rounding: str = "rtne") -> pathlib.Path:
    """Bucket utilisation (fraction per magnitude level) per distribution x format, one bar
    group per RHT size, for one rounding. Writes a PNG and returns its path."""
    plt = _pyplot()
    rows = [r for r in result.rows if r["rounding"] == rounding] or result.rows
    dists = list(dict.fromkeys(r["dist"] for r in rows))
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    rhts = list(dict.fromkeys(r["rht"] for r in rows))
    fig, axes = plt.subplots(len(dists), len(fmts), figsize=(3.2 * len(fmts), 2.2 * len(dists)), squeeze=False)
    width = 0.8 / max(1, len(rhts))
    for i, d in enumerate(dists):
        for j, f in enumerate(fmts):
            ax = axes[i][j]
            for k, n in enumerate(rhts):
                match = [r for r in rows if (r["dist"], r["format"], r["rht"]) == (d, f, n)]
                if not match:
                    continue
                frac = match[0]["level_fraction"]
                xs = np.arange(len(frac)) + (k - (len(rhts) - 1) / 2) * width
                ax.bar(xs, frac, width, label=f"RHT {n}" if n else "no RHT")
                ax.set_xticks(range(len(frac)), [f"{v:g}" for v in match[0]["levels"]], fontsize=6)
            ax.set_title(f"{d} | {f}", fontsize=8)
            ax.tick_params(labelsize=6)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"bucket utilisation (fraction of elements per |level|, {rounding})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    out = pathlib.Path(path)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def plot_depth(result: DepthResult, path: str | pathlib.Path) -> pathlib.Path:
    """Per stack (columns), versus depth: the measured gain <y_q, y> / <y, y>, the
    product of (1 + b_l), and the norm ratio ||y_q|| / ||y||. Colour = format and
    rounding, line style = RHT size. Writes a PNG and returns its path."""
    plt = _pyplot()
    stacks = list(dict.fromkeys(c["stack"] for c in result.curves))
    keys = list(dict.fromkeys((c["format"], c["rounding"]) for c in result.curves))
    rhts = list(dict.fromkeys(c["rht"] for c in result.curves))
    styles = ["-", "--", ":", "-."]
    panels = [("gain", "measured gain <y_q,y>/<y,y>"), ("depth_product", "prod(1 + b_l)"),
              ("norm_ratio", "measured ||y_q|| / ||y||")]
    fig, axes = plt.subplots(len(panels), len(stacks), figsize=(5.5 * len(stacks) + 2, 3 * len(panels)), squeeze=False)
    layers = np.arange(1, result.depth + 1)
    for j, s in enumerate(stacks):
        for c in (x for x in result.curves if x["stack"] == s):
            color = f"C{keys.index((c['format'], c['rounding'])) % 10}"
            style = styles[rhts.index(c["rht"]) % len(styles)]
            label = f"{c['format']} {c['rounding']} RHT {c['rht']}"
            for i, (key, _) in enumerate(panels):
                axes[i][j].plot(layers, c[key], color=color, linestyle=style, label=label)
        for i, (_, title) in enumerate(panels):
            axes[i][j].set_title(f"{s}: {title}", fontsize=9)
            axes[i][j].axhline(1.0, color="grey", linewidth=0.5)
            axes[i][j].tick_params(labelsize=7)
        axes[-1][j].set_xlabel("layer")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7)
    fig.suptitle(f"depth study: width {result.width}, {result.tokens} tokens, input {result.dist}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1 - 1.9 / fig.get_figwidth(), 1))
    out = pathlib.Path(path)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def plot_run(analysis: RunAnalysis, path: str | pathlib.Path) -> pathlib.Path:
    """Captured tensors: mean signed bias over layers versus training step, one panel per
    operand, one line per format x rounding x RHT. Writes a PNG and returns its path."""
    plt = _pyplot()
    per_step = analysis.per_step()
    operands = list(dict.fromkeys(s["operand"] for s in per_step))
    cols = min(3, max(1, len(operands)))
    rows = -(-len(operands) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    for i, op in enumerate(operands):
        ax = axes[i // cols][i % cols]
        series: dict[tuple, list[tuple[int, float]]] = {}
        for s in per_step:
            if s["operand"] == op:
                series.setdefault((s["format"], s["rounding"], s["rht"]), []).append((s["step"], s["bias_mean"]))
        for (fmt, rounding, rht), pts in series.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", markersize=3,
                    label=f"{fmt} {rounding} RHT {rht}")
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_title(op, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("signed bias % (mean over layers)")
        ax.tick_params(labelsize=7)
    for j in range(len(operands), rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"captured tensors of {analysis.run_dir}", fontsize=10)
    fig.tight_layout()
    out = pathlib.Path(path)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
