"""Shared pieces of the kernels package: format parsing, the packed-tensor type, input
checks. Format tables here are the single source for the reference and the Triton
kernels (the kernels receive the numbers as constexprs), so the two cannot drift."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from fourcast.errors import FormatError, KernelInputError, ShapeError

FLT_MAX = 3.4028234663852886e38

ELEMENTS = ("e2m1", "e1m2", "int4", "int4-sm", "e4m3", "e5m2")
SCALES = ("ue8m0", "e4m3", "ue5m3", "fp32")
RULES = ("floor", "rceil", "te", "torchao")
ROUNDINGS = ("rtne", "away", "sr", "sr4", "sr16")  # sr4 / sr16: SR on four / sixteen uniforms per Philox
RHT_SIZES = (16, 32, 64, 128)
SIGN_POLICIES = ("te", "per-layer", "per-step")

# TE's fixed RHT sign vector (numerics.md section 3).
TE_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


@dataclasses.dataclass(frozen=True)
class Grid:
    """A sign-magnitude grid with `mbits` mantissa bits above exponent `emin` (its
    subnormal step is 2^(emin - mbits)), or a fixed-step integer grid (`fixed`)."""

    name: str
    bits: int  # 4 (packed two per byte) or 8
    emin: int  # smallest normal exponent (unused when fixed)
    mbits: int
    fixed: bool  # integer grid, step 1
    gmax: float  # largest magnitude
    emax: int  # MX floor rule: exponent of the largest power of two in the grid
    twos: bool = False  # two's complement codes (INT4)

    @property
    def sign_shift(self) -> int:
        return self.bits - 1


GRIDS = {
    "e2m1": Grid("e2m1", 4, 0, 1, False, 6.0, 2),
    "e1m2": Grid("e1m2", 4, 0, 2, False, 1.75, 0),
    "int4-sm": Grid("int4-sm", 4, 0, 0, True, 7.0, 2),
    "int4": Grid("int4", 4, 0, 0, True, 7.0, 2, twos=True),
    "e4m3": Grid("e4m3", 8, -6, 3, False, 448.0, 8),
    "e5m2": Grid("e5m2", 8, -14, 2, False, 57344.0, 15),
}
# Scale formats that are rounded onto a grid (unsigned: the sign bit is never set).
SCALE_GRIDS = {
    "e4m3": Grid("e4m3", 8, -6, 3, False, 448.0, 8),
    "ue5m3": Grid("ue5m3", 8, -14, 3, False, 114688.0, 16),
}
NAN_BYTE = {"e4m3": 0x7F, "ue8m0": 0xFF, "ue5m3": 0xFF}
# Two-level rules map the largest block scale to this value (conventions.md: smax).
SCALE_TARGET = {"e4m3": 448.0, "ue5m3": 448.0}
# torchao clamps the block scale below at the scale format's smallest normal.
SCALE_MIN_NORMAL = {"e4m3": 2.0**-6, "ue5m3": 2.0**-14}


@dataclasses.dataclass(frozen=True)
class Spec:
    """A validated TensorFormat (the recipe's dict) with its derived numbers."""

    element: str
    scale: str
    block: int
    tile_2d: bool
    rule: str

    @property
    def grid(self) -> Grid:
        return GRIDS[self.element]

    @property
    def per_tensor(self) -> bool:
        return self.scale == "fp32"

    @property
    def two_level(self) -> bool:
        return self.rule in ("te", "torchao") and not self.per_tensor

    @property
    def packed(self) -> bool:
        return self.grid.bits == 4

    def as_dict(self) -> dict:
        # A fresh shallow copy of a dict built once (dataclasses.asdict deep-copies).
        d = self.__dict__.get("_as_dict")
        if d is None:
            d = dataclasses.asdict(self)
            object.__setattr__(self, "_as_dict", d)
        return dict(d)

    @property
    def key(self) -> str:
        """"element,scale,block,tile_2d,rule": the custom ops' format argument."""
        k = self.__dict__.get("_key")
        if k is None:
            k = f"{self.element},{self.scale},{self.block},{int(self.tile_2d)},{self.rule}"
            object.__setattr__(self, "_key", k)
        return k


# Valid formats seen so far, by their dict items: the hot path parses the same few
# recipe formats on every call (a miss runs the full validation below).
_SPEC_CACHE: dict[tuple, Spec] = {}


def parse_fmt(fmt: Any) -> Spec:
    """Check a TensorFormat dict (keys element, scale, block, tile_2d, rule) with the
    same rules as the Rust `Recipe::validate`; a Spec passes through unchanged; a str is
    one of the core's format presets (fc.Format.preset's names: nvfp4, mxfp4, ue5m3, ..)."""
    if isinstance(fmt, Spec):
        return fmt
    if isinstance(fmt, str):
        return _preset(fmt)
    if type(fmt) is dict and not torch.compiler.is_compiling():
        try:
            key = tuple(fmt.items())
            spec = _SPEC_CACHE.get(key)
        except TypeError:  # an unhashable value: validate (and fail) below
            key, spec = None, None
        if spec is not None:
            return spec
        spec = _parse_fmt(fmt)
        if key is not None and len(_SPEC_CACHE) < 1024:
            _SPEC_CACHE[key] = spec
        return spec
    return _parse_fmt(fmt)


def _preset(name: str) -> Spec:
    """A format preset by name, as the core defines it (one list for fc.quantize and these
    kernels; the core's FormatError names the valid ones)."""
    spec = _SPEC_CACHE.get(("preset", name))
    if spec is None:
        from fourcast import _core

        d = _core.format_preset(name)
        spec = _SPEC_CACHE[("preset", name)] = _parse_fmt({k: d[k] for k in ("element", "scale", "block", "rule")})
    return spec


def _parse_fmt(fmt: Any) -> Spec:
    if not isinstance(fmt, dict):
        raise FormatError(f"format must be a preset name or a dict like a recipe TensorFormat, got {type(fmt).__name__}")
    unknown = set(fmt) - {"element", "scale", "block", "tile_2d", "rule"}
    if unknown:
        raise FormatError(f"unknown format keys {sorted(unknown)}")
    try:
        element, scale, block, rule = fmt["element"], fmt["scale"], int(fmt["block"]), fmt["rule"]
    except KeyError as exc:
        raise FormatError(f"format is missing key {exc.args[0]!r}") from None
    tile_2d = bool(fmt.get("tile_2d", False))
    for what, name, allowed in (("element", element, ELEMENTS), ("scale", scale, SCALES), ("rule", rule, RULES)):
        if name not in allowed:
            raise FormatError(f"unknown {what} {name!r}; expected one of {', '.join(allowed)}")
    per_tensor = scale == "fp32"
    if per_tensor != (block == 0):
        raise FormatError(f"block must be 0 exactly when scale is fp32 (per tensor), got scale {scale} block {block}")
    if not per_tensor and block not in (16, 32):
        raise FormatError(f"block must be 16 or 32, got {block}")
    if not per_tensor and (scale == "ue8m0") != (rule in ("floor", "rceil")):
        raise FormatError(f"rule {rule!r} does not fit scale {scale!r} (floor/rceil go with ue8m0; te/torchao with e4m3/ue5m3)")
    if tile_2d and block != 16:
        raise FormatError("2D tiles are 16x16, so block must be 16")
    return Spec(element, scale, block, tile_2d, rule)


def check_rounding(rounding: str) -> str:
    if rounding not in ROUNDINGS:
        raise FormatError(f"unknown rounding {rounding!r}; expected one of {', '.join(ROUNDINGS)}")
    return rounding


@dataclasses.dataclass
class Packed:
    """A quantized tensor (docs/conventions.md "Packed tensors").

    codes: uint8 (M, K/2) for 4-bit grids (element 2i in the low nibble), (M, K) for FP8;
    scales: uint8 raw scale bytes (M, K/block), (M/16, K/16) for 2D tiles, (0,) per tensor;
    tensor_scale: f32 0-d, the ENCODE factor S_enc (1.0 for power-of-two formats);
    amax: f32 0-d, the tensor amax used (after the RHT, if any);
    shape: the original shape; axis: -1 (row-wise) or 0 (column-wise: M, K are the
    flattened 2-D input's columns, rows); rht: None or (n, signs).
    """

    codes: torch.Tensor
    scales: torch.Tensor
    tensor_scale: torch.Tensor
    amax: torch.Tensor
    fmt: dict
    shape: tuple
    axis: int
    rht: Any = None

    @property
    def spec(self) -> Spec:
        return parse_fmt(self.fmt)

    @property
    def layout_shape(self) -> tuple[int, int]:
        """(M, K): the quantized layout, K the blocked (reduction) axis."""
        r, c = flat2d(self.shape)
        return (r, c) if self.axis == -1 else (c, r)


def flat2d(shape) -> tuple[int, int]:
    """Leading dims flattened: (R, C)."""
    if len(shape) == 0:
        raise ShapeError("a quantizer needs at least a 1-D tensor, got a scalar")
    c = int(shape[-1])
    r = 1
    for d in shape[:-1]:
        r *= int(d)
    return r, c


def normalize_axis(axis: int) -> int:
    if axis in (-1,):
        return -1
    if axis == 0:
        return 0
    raise ShapeError(f"axis must be -1 (row-wise) or 0 (column-wise of the 2-D view), got {axis}")


def check_layout(spec: Spec, m: int, k: int, rht) -> None:
    """The blocked length must be a multiple of the block (and of the RHT size); 2D
    tiles also need M a multiple of 16. No silent padding."""
    if not spec.per_tensor and k % spec.block:
        raise ShapeError(f"length {k} along the block axis is not a multiple of the block {spec.block} (layout {m}x{k})")
    if spec.packed and k % 2:
        raise ShapeError(f"length {k} along the block axis must be even to pack two 4-bit codes per byte")
    if spec.tile_2d and m % 16:
        raise ShapeError(f"2D 16x16 tiles need {m} rows (the non-block axis) to be a multiple of 16")
    if rht is not None:
        n = rht[0]
        if k % n:
            raise ShapeError(f"length {k} along the block axis is not a multiple of the RHT size {n}")


def mark_signs_valid(signs: torch.Tensor) -> torch.Tensor:
    """Record that `signs` (as it is now) holds only +1/-1, so check_rht skips the value
    check (a device sync on CUDA). For vectors made +-1 by construction (rht_signs);
    an in-place change bumps the tensor's version and brings the check back."""
    signs._fc_signs_ok = signs._version
    return signs


def _signs_known_valid(signs: torch.Tensor) -> bool:
    return getattr(signs, "_fc_signs_ok", None) == signs._version


def check_rht(rht, device=None):
    """Validate (n, signs) and return (n, signs as f32 on `device`). The +-1 check of
    the values runs once per sign tensor (it reads the values back, a host-device sync
    on CUDA); rht_signs vectors are known valid from the start."""
    if rht is None:
        return None
    try:
        n, signs = rht
    except (TypeError, ValueError):
        raise FormatError("rht must be None or (n, signs)") from None
    n = int(n)
    if n not in RHT_SIZES:
        raise FormatError(f"RHT size must be one of {RHT_SIZES}, got {n}")
    signs = torch.as_tensor(signs)
    if signs.shape != (n,):
        raise ShapeError(f"RHT signs must have shape ({n},), got {tuple(signs.shape)}")
    known = _signs_known_valid(signs)
    moved = signs.to(device=device, dtype=torch.float32)
    if known:
        if moved is not signs:  # the same values on another device / dtype
            mark_signs_valid(moved)
        return n, moved
    if not bool(((moved == 1) | (moved == -1)).all()):
        raise FormatError("RHT signs must all be +1 or -1")
    if not torch.compiler.is_compiling():
        mark_signs_valid(signs)
        if moved is not signs:
            mark_signs_valid(moved)
    return n, moved


SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_input(x: torch.Tensor, what: str = "x", dtypes=SUPPORTED_DTYPES) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        raise FormatError(f"{what} has dtype {x.dtype}; supported: {', '.join(str(d) for d in dtypes)}")


GEMM_IMPLS = ("auto", "triton", "dequant", "fp8")


def is_mx_e2m1(spec: Spec) -> bool:
    """E2M1 elements with UE8M0 block scales along K (MXFP4): what impl="fp8" can fold
    into E4M3 operands exactly (every value is a power of two times 1 or 1.5)."""
    return spec.element == "e2m1" and spec.scale == "ue8m0" and not spec.tile_2d


def check_gemm_impl(impl: str, a: Spec, b: Spec) -> str:
    """Validate a gemm `impl` (kernels/gemm.py says what each does); no triton needed,
    so the CPU path of ops.gemm refuses the same inputs as the CUDA one."""
    if impl not in GEMM_IMPLS:
        raise ValueError(f"unknown gemm impl {impl!r}; expected one of {', '.join(GEMM_IMPLS)}")
    if impl == "fp8":
        for what, spec in (("A", a), ("B", b)):
            if not is_mx_e2m1(spec):
                raise FormatError(f"gemm impl 'fp8' needs MXFP4 operands (e2m1 elements, ue8m0 block scales along K); "
                                  f"{what} is {spec.element}/{spec.scale}{' 2D tiles' if spec.tile_2d else ''} "
                                  f"(use impl='dequant' or 'triton')")
    return impl


_SCALARS: dict[tuple, torch.Tensor] = {}


def device_scalar(value: float, device) -> torch.Tensor:
    """A read-only f32 0-d tensor holding `value` on `device`, made once: constants a
    kernel or library call reads from device memory (unit tensor scales, cuBLASLt's
    beta) without a fill kernel per call. Never write to it."""
    key = (float(value), torch.device(device))
    t = _SCALARS.get(key)
    if t is None:
        t = _SCALARS[key] = torch.full((), value, dtype=torch.float32, device=device)
    return t


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (the kernels then run on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_kernel_input(x: torch.Tensor, what: str = "x", dtypes=SUPPORTED_DTYPES) -> None:
    """Entry checks of a Triton path: CUDA (or the interpreter), contiguous, dtype."""
    check_input(x, what, dtypes)
    if not x.is_cuda and not interpreting():
        raise KernelInputError(f"{what} is on {x.device}; the Triton kernels need a CUDA tensor (use fourcast.kernels.ops for CPU)")
    if not x.is_contiguous():
        raise KernelInputError(f"{what} is not contiguous (strides {tuple(x.stride())}); call .contiguous() first")


def seed_arg(seed, device, used: bool = True) -> tuple[Any, bool]:
    """(kernel argument, SEED_PTR) of an SR seed: a Python int is passed by value; a
    one-element int64 tensor on the kernel's device is read by the kernel (philox.load_seed),
    so a captured CUDA graph replays with whatever seed that memory holds. Same bits.
    used=False (no copy rounds stochastically): 0 by value, so no kernel loads a seed it
    does not need (and RTNE calls keep one compiled variant)."""
    if not isinstance(seed, torch.Tensor):
        return int(seed), False
    if seed.dtype != torch.int64 or seed.numel() != 1:
        raise KernelInputError(f"a seed tensor must hold one int64, got dtype {seed.dtype} and {seed.numel()} elements")
    if seed.device != torch.device(device):
        raise KernelInputError(f"the seed tensor is on {seed.device}, the data on {device}; keep them on one device")
    return (seed, True) if used else (0, False)
