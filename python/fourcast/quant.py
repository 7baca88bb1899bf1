"""Block-scaled 4-bit quantization, Philox RNG and the random Hadamard transform.

The bits are defined by the Rust core (``fourcast._core``) following
``docs/conventions.md``; this module only checks arguments, converts arrays and
wraps results. numpy is the only requirement; torch CPU tensors are accepted when
torch is installed (imported lazily, never at module import).

Example:
    >>> import numpy as np, fourcast as fc
    >>> x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    >>> q = fc.quantize(x, "nvfp4")
    >>> q.codes.shape, q.scales.shape
    ((2, 16), (2, 2))
    >>> bool(np.abs(q.dequantize() - x).max() <= 0.5)
    True
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Union

import numpy as np

from fourcast import _core
from fourcast.errors import FormatError, ShapeError

BlockSpec = Union[int, "tuple[int, int]"]

PRESETS = ("mxfp4", "nvfp4", "ue5m3", "e1m2", "int4", "int4-sm")
ROUNDINGS = ("rtne", "away", "sr", "sr4", "sr16")
_U64 = 1 << 64


def _parse_block(block: Any) -> tuple[int, bool]:
    """(block size, is 16x16 tile) from 16, 32 or (16, 16)."""
    if isinstance(block, (tuple, list)):
        if tuple(block) == (16, 16):
            return 16, True
    elif isinstance(block, (int, np.integer)) and not isinstance(block, bool):
        if int(block) in (16, 32):
            return int(block), False
    raise FormatError(f"block {block!r} is not supported; valid: 16, 32, (16, 16)")


@dataclasses.dataclass(frozen=True)
class Format:
    """A block-scaled 4-bit format.

    element: "e2m1" | "e1m2" | "int4" | "int4-sm"; scale: "ue8m0" | "e4m3" | "ue5m3";
    block: 16, 32 or (16, 16); rule: "floor" | "rceil" (UE8M0) or "te" | "torchao"
    (two-level), None = floor for UE8M0 and te otherwise; scale_max: the block-scale
    value the tensor amax maps to in two-level rules (default 448; a UE5M3 target
    below its 114688 maximum leaves headroom for a periodically refreshed tensor
    scale); ue5m3_ff: "nan" (0xFF is NaN, default) or "finite" (0xFF = 122880).

    Example:
        >>> import fourcast as fc
        >>> fc.Format(element="int4", scale="ue5m3", block=16).rule
        'te'
        >>> fc.Format.preset("mxfp4").block
        32
    """

    element: str = "e2m1"
    scale: str = "e4m3"
    block: BlockSpec = 16
    rule: str | None = None
    scale_max: float | None = None
    ue5m3_ff: str = "nan"

    def __post_init__(self) -> None:
        if self.ue5m3_ff not in ("nan", "finite"):
            raise FormatError(f"unknown ue5m3_ff {self.ue5m3_ff!r}; valid: nan, finite")
        size, tile = _parse_block(self.block)
        rule = _core.format_check(
            self.element, self.scale, size, tile, self.rule, self._smax(), self.ue5m3_ff == "finite"
        )
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "block", (16, 16) if tile else size)

    def _smax(self) -> float | None:
        return None if self.scale_max is None else float(self.scale_max)

    @classmethod
    def preset(cls, name: str) -> "Format":
        """A named preset: mxfp4, nvfp4, ue5m3, e1m2, int4, int4-sm."""
        if not isinstance(name, str):
            raise TypeError(f"format preset name must be a str, got {type(name).__name__}")
        d = _core.format_preset(name)
        return cls(element=d["element"], scale=d["scale"], block=d["block"], rule=d["rule"])

    def replace(self, **changes: Any) -> "Format":
        """A copy with some fields changed (re-validated)."""
        return dataclasses.replace(self, **changes)

    def _core_args(self) -> tuple:
        size, tile = _parse_block(self.block)
        return (self.element, self.scale, size, tile, self.rule)

    def _core_tail(self) -> tuple:
        return (self._smax(), self.ue5m3_ff == "finite")


def _resolve_format(fmt: Format | str, scale_rule: str | None, block: Any) -> Format:
    if isinstance(fmt, str):
        f = Format.preset(fmt)
    elif isinstance(fmt, Format):
        f = fmt
    else:
        raise TypeError(f"fmt must be a preset name or a fourcast.Format, got {type(fmt).__name__}")
    changes: dict[str, Any] = {}
    if scale_rule is not None:
        changes["rule"] = scale_rule
    if block is not None:
        changes["block"] = block
    return f.replace(**changes) if changes else f


# ---------------------------------------------------------------- array handling


@dataclasses.dataclass(frozen=True)
class _Origin:
    """What the input was, so results come back as the same kind of array."""

    kind: str  # "numpy" | "torch"
    dtype: Any
    shape: tuple[int, ...]


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _as_float(x: Any, what: str = "x") -> tuple[np.ndarray, _Origin]:
    """Input as a C-contiguous float32 or float64 numpy array, plus its origin."""
    if isinstance(x, np.ndarray):
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"{what} must be float32 or float64, got numpy {x.dtype}")
        return np.ascontiguousarray(x), _Origin("numpy", x.dtype, tuple(x.shape))
    if _is_torch(x):
        import torch

        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what} must be a numpy array or torch tensor, got {type(x).__name__}")
        if x.device.type != "cpu":
            raise TypeError(f"{what} must be a CPU tensor (got device {x.device}); the GPU path is fourcast.kernels")
        if x.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"{what} must be torch float32 or bfloat16, got {x.dtype}")
        arr = x.detach().to(torch.float32).contiguous().numpy()
        return arr, _Origin("torch", x.dtype, tuple(x.shape))
    raise TypeError(f"{what} must be a numpy array or torch CPU tensor, got {type(x).__name__}")


def _restore(y: np.ndarray, origin: _Origin) -> Any:
    y = y.reshape(origin.shape)
    if origin.kind == "numpy":
        return y.astype(origin.dtype, copy=False)
    import torch

    return torch.from_numpy(np.ascontiguousarray(y)).to(origin.dtype)


def _norm_axis(axis: Any, ndim: int) -> bool:
    """True when the blocks run along axis 0 (flattened leading dims), False for the last axis."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    axis = int(axis)
    if ndim <= 1 and axis in (0, -1):
        return False
    if axis in (-1, ndim - 1):
        return False
    if axis == 0:
        return True
    raise FormatError(f"axis {axis} is not supported for a {ndim}-D input; valid: -1 (last) or 0 (first)")


def _as_2d(arr: np.ndarray) -> np.ndarray:
    if arr.ndim == 0:
        raise ShapeError("cannot quantize a 0-D (scalar) array; give at least one axis")
    if arr.ndim == 1:
        return arr.reshape(1, arr.shape[0])
    rows = math.prod(arr.shape[:-1])
    return arr.reshape(rows, arr.shape[-1])


def _check_seed(seed: Any, what: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < _U64:
        raise FormatError(f"{what} must be in [0, 2**64), got {seed}")
    return seed


def _to_f32(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.float32:
        return arr
    with np.errstate(over="ignore"):
        return arr.astype(np.float32)  # out-of-range float64 -> inf -> NonFiniteError


# ---------------------------------------------------------------- quantize


@dataclasses.dataclass(frozen=True, eq=False)
class QTensor:
    """A quantized tensor (docs/conventions.md "Packed tensors").

    codes: uint8 (R, C/2), element 2i in the low nibble, in the quantized orientation
    (for axis=0 that is the transposed copy: (C, R/2)); scales: raw scale bytes,
    (R, C/block) or (R/16, C/16) for 16x16 tiles; tensor_scale: S_enc, the encode
    factor (1.0 for MX formats); amax: the tensor amax used; shape: the input shape
    (leading dims flattened to R); axis: -1 or 0.
    """

    codes: np.ndarray
    scales: np.ndarray
    tensor_scale: float
    amax: float
    format: Format
    shape: tuple[int, ...]
    axis: int
    _origin: _Origin = dataclasses.field(repr=False)

    def dequantize(self) -> Any:
        """x_hat = value(code) * scale / tensor_scale, in the input's shape and array type."""
        y = _core.dequantize(
            self.codes,
            self.scales,
            self.tensor_scale,
            *self.format._core_args(),
            self.axis == 0,
            *self.format._core_tail(),
        )
        return _restore(y, self._origin)

    def unpacked_codes(self) -> np.ndarray:
        """Codes one per byte, (R, C) in the quantized orientation."""
        return unpack_codes(self.codes)


def quantize(
    x: Any,
    fmt: Format | str = "nvfp4",
    *,
    axis: int = -1,
    rounding: str = "rtne",
    seed: int = 0,
    offset: int = 0,
    scale_rule: str | None = None,
    block: BlockSpec | None = None,
    tensor_amax: float | None = None,
) -> QTensor:
    """Quantize ``x`` into a block-scaled 4-bit format.

    x: numpy float32/float64 or torch float32/bfloat16 (CPU), any shape with at least
    one axis (leading dims are flattened to rows); fmt: a preset name or a Format;
    axis: -1 (row-wise) or 0 (column-wise: the transposed copy); rounding: "rtne",
    "away", "sr" (Philox rand(seed, offset + element index i in the quantized
    layout)) or "sr4" (the same rounding on the four-per-counter stream: word i % 4
    of randint4x(seed, offset + i // 4), a quarter of the Philox work) or "sr16"
    (8-bit uniforms (byte + 0.5) / 256, byte i % 4 of word (i // 4) % 4 of
    randint4x(seed, offset + i // 16): Blackwell's SR randomness budget); scale_rule /
    block override the format's; tensor_amax replaces the measured tensor amax
    (two-level rules: periodic refresh). NaN/Inf raise
    NonFiniteError; a length along the block axis that is not a multiple of the
    block raises ShapeError (no padding).

    Example:
        >>> import numpy as np, fourcast as fc
        >>> x = np.array([[6.0, -3.0, 0.7] + [0.0] * 29], dtype=np.float32)
        >>> q = fc.quantize(x, "mxfp4")
        >>> int(q.scales[0, 0]), hex(q.codes[0, 0])
        (127, '0xd7')
        >>> fc.quantize(x, "nvfp4", rounding="sr", seed=7).dequantize().shape
        (1, 32)
    """
    f = _resolve_format(fmt, scale_rule, block)
    if rounding not in ROUNDINGS:
        raise FormatError(f"unknown rounding {rounding!r}; valid: {', '.join(ROUNDINGS)}")
    seed = _check_seed(seed)
    offset = _check_seed(offset, "offset")
    if tensor_amax is not None:
        tensor_amax = float(tensor_amax)
        if not (math.isfinite(tensor_amax) and tensor_amax >= 0):
            raise FormatError(f"tensor_amax must be finite and >= 0, got {tensor_amax}")
    arr, origin = _as_float(x)
    axis0 = _norm_axis(axis, arr.ndim)
    x2 = _as_2d(arr)
    size, tile = _parse_block(f.block)
    length = x2.shape[0] if axis0 else x2.shape[1]
    if (tile and (x2.shape[0] % 16 or x2.shape[1] % 16)) or (not tile and length % size):
        need = "both dimensions (leading dims flattened) must be multiples of 16" if tile else (
            f"length {length} along axis {0 if axis0 else -1} is not a multiple of {size}"
        )
        raise ShapeError(f"cannot quantize shape {origin.shape} with block {f.block}: {need} (fourcast does not pad)")
    codes, scales, ts, amax = _core.quantize(
        _to_f32(x2), *f._core_args(), rounding, seed, offset, tensor_amax, axis0, *f._core_tail()
    )
    return QTensor(codes, scales, float(ts), float(amax), f, origin.shape, 0 if axis0 else -1, origin)


# ---------------------------------------------------------------- codes


def encode(x: Any, codec: str, rounding: str = "rtne", seed: int = 0, offset: int = 0) -> np.ndarray:
    """Codes of values with unit scale in one codec (one code per byte, input shape).

    codec: e2m1, e1m2, int4, int4-sm (4-bit, saturating at the grid max), e2m3, e3m2,
    e4m3, e5m2 (wide, satfinite), ue8m0, ue4m3, ue5m3, ue5m3-ff (scales, of |x|).

    Example:
        >>> import numpy as np, fourcast as fc
        >>> fc.quant.encode(np.array([0.25, 0.75, 5.0], np.float32), "e2m1").tolist()
        [0, 2, 6]
    """
    arr, origin = _as_float(x)
    out = _core.encode(_to_f32(arr).reshape(-1), codec, rounding, _check_seed(seed), _check_seed(offset, "offset"))
    return out.reshape(origin.shape)


def decode(codes: Any, codec: str) -> np.ndarray:
    """float32 values of codes (uint8) in one codec; NaN codes give NaN.

    Example:
        >>> import numpy as np, fourcast as fc
        >>> fc.quant.decode(np.arange(8, dtype=np.uint8), "e2m1").tolist()
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    """
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise TypeError(f"codes must be uint8, got {c.dtype}")
    return _core.decode(np.ascontiguousarray(c).reshape(-1), codec).reshape(c.shape)


def _as_u8_2d(a: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    c = np.asarray(a)
    if c.dtype != np.uint8:
        raise TypeError(f"codes must be uint8, got {c.dtype}")
    if c.ndim == 0:
        raise ShapeError("codes must have at least one axis")
    return np.ascontiguousarray(c.reshape(-1, c.shape[-1]) if c.ndim > 1 else c.reshape(1, -1)), c.shape


def pack_codes(codes: Any) -> np.ndarray:
    """Pack 4-bit codes two per byte along the last axis (element 2i in the low nibble).

    Example:
        >>> import numpy as np, fourcast as fc
        >>> fc.quant.pack_codes(np.array([1, 2, 15, 0], np.uint8)).tolist()
        [33, 15]
    """
    c2, shape = _as_u8_2d(codes)
    return _core.pack_codes(c2).reshape(*shape[:-1], shape[-1] // 2)


def unpack_codes(packed: Any) -> np.ndarray:
    """Inverse of pack_codes: two codes per byte, low nibble first.

    Example:
        >>> import numpy as np, fourcast as fc
        >>> fc.quant.unpack_codes(np.array([33, 15], np.uint8)).tolist()
        [1, 2, 15, 0]
    """
    c2, shape = _as_u8_2d(packed)
    return _core.unpack_codes(c2).reshape(*shape[:-1], shape[-1] * 2)


# ---------------------------------------------------------------- RNG


def _offsets(offsets: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    o = np.asarray(offsets)
    if o.dtype.kind not in "iu":
        raise TypeError(f"offsets must be integers, got {o.dtype}")
    if o.dtype.kind == "i" and o.size and o.min() < 0:
        raise FormatError("offsets must be non-negative")
    return np.ascontiguousarray(o.astype(np.uint64).reshape(-1)), o.shape


def philox(seed: int, offsets: Any) -> np.ndarray:
    """Philox4x32-10 words, identical to Triton's ``tl.randint4x(seed, offsets)``.

    Returns uint32 of shape offsets.shape + (4,); word 0 is ``tl.randint``.

    Example:
        >>> import fourcast as fc
        >>> hex(int(fc.philox(42, [0])[0, 0]))
        '0x9ceaf053'
    """
    o, shape = _offsets(offsets)
    return _core.philox(_check_seed(seed), o).reshape(*shape, 4)


def philox_uniform(seed: int, offsets: Any) -> np.ndarray:
    """float32 uniforms in [0, 1), identical to Triton's ``tl.rand(seed, offsets)``.

    Example:
        >>> import fourcast as fc
        >>> float(fc.philox_uniform(42, [0])[0])
        0.7740801572799683
    """
    o, shape = _offsets(offsets)
    return _core.philox_uniform(_check_seed(seed), o).reshape(shape)


# ---------------------------------------------------------------- RHT


def rht_signs(n: int = 16, policy: str = "te", seed: int = 0) -> np.ndarray:
    """The +-1 sign diagonal (float32) of an RHT of size n.

    policy: "te" (Transformer Engine's fixed 16-vector, repeated), "per-layer" /
    "per-step" (sign i = -1 when bit 0 of Philox word 0 at (seed, i) is set; the
    caller mixes layer and step into seed), "none" (all +1).

    Example:
        >>> import fourcast as fc
        >>> fc.rht_signs(16, "te")[:4].tolist()
        [1.0, 1.0, 1.0, -1.0]
    """
    return _core.rht_signs(int(n), policy, _check_seed(seed)).astype(np.float32)


def rht(x: Any, n: int = 16, signs: Any = "te", seed: int = 0, axis: int = -1) -> Any:
    """Random Hadamard transform along ``axis`` (-1 or 0) in blocks of n (16/32/64/128).

    y_block = H_n (d * x_block) / sqrt(n), signs d applied before H (a policy name as
    in rht_signs, or an explicit +-1 array of length n). Orthogonal, so transforming
    both GEMM operands along the reduction axis with the same signs keeps A @ B.
    Returns the input's array type and dtype (computed in float64, rounded once).

    Example:
        >>> import numpy as np, fourcast as fc
        >>> a = np.random.default_rng(0).standard_normal((4, 32))
        >>> b = np.random.default_rng(1).standard_normal((32, 5))
        >>> bool(np.allclose(fc.rht(a) @ fc.rht(b, axis=0), a @ b))
        True
    """
    if isinstance(signs, str):
        s = _core.rht_signs(int(n), signs, _check_seed(seed))
    else:
        s = np.ascontiguousarray(np.asarray(signs, dtype=np.float64).reshape(-1))
        if s.shape != (n,) or not np.all(np.abs(s) == 1):
            raise FormatError(f"signs must be {n} values of +-1")
    arr, origin = _as_float(x)
    axis0 = _norm_axis(axis, arr.ndim)
    x2 = _as_2d(arr)
    length = x2.shape[0] if axis0 else x2.shape[1]
    if length % n:
        raise ShapeError(
            f"cannot apply an RHT of size {n} to shape {origin.shape} along axis {0 if axis0 else -1}: "
            f"length {length} is not a multiple of {n}"
        )
    if not np.all(np.isfinite(x2)):
        from fourcast.errors import NonFiniteError

        bad = np.flatnonzero(~np.isfinite(x2))
        raise NonFiniteError(f"input has {bad.size} non-finite value(s), first at flat index {bad[0]}")
    fn = _core.rht_f64 if x2.dtype == np.float64 else _core.rht_f32
    return _restore(fn(x2, int(n), s, axis0), origin)


__all__ = [
    "Format",
    "PRESETS",
    "QTensor",
    "decode",
    "encode",
    "pack_codes",
    "philox",
    "philox_uniform",
    "quantize",
    "rht",
    "rht_signs",
    "unpack_codes",
]
