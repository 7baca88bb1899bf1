"""Public entry points of the kernels package, registered as torch custom ops
(`torch.ops.fourcast.*`, opaque to torch.compile, with fake implementations for
tracing).

Dispatch: a CUDA tensor goes to the Triton kernels, a CPU tensor to the PyTorch
reference (reference.py), which is bit-exact to the Rust codec. There is no silent
fallback: a CUDA input in a case no Triton path covers raises NotImplementedError
naming it. CPU inputs with NaN/Inf raise NonFiniteError (as the Rust codec does); on
CUDA a non-finite block gets its scale format's NaN byte (docs/conventions.md).

Input rules (tested in tests/interpret/test_ops_errors.py): float32/bfloat16/float16
only (FormatError otherwise); a non-contiguous input is copied to a contiguous one
first (the Triton kernels themselves refuse non-contiguous tensors with
KernelInputError); the length along the block axis must be a multiple of the block
and of the RHT size (ShapeError); unknown format names raise FormatError.

Example:
    >>> import torch
    >>> from fourcast.kernels import ops
    >>> nvfp4 = dict(element="e2m1", scale="e4m3", block=16, tile_2d=False, rule="te")
    >>> x = torch.randn(4, 64)
    >>> p = ops.quantize(x, nvfp4)
    >>> bool((ops.dequantize(p, torch.float32) == ops.fake_quant(x.float(), nvfp4)).all())
    True
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from fourcast.errors import KernelInputError, NonFiniteError, ShapeError
from fourcast.kernels import reference
from fourcast.kernels.utils import (
    Packed,
    check_gemm_impl,
    check_input,
    check_layout,
    check_rht,
    check_rounding,
    flat2d,
    mark_signs_valid,
    normalize_axis,
    parse_fmt,
)

__all__ = ["Packed", "Decoded", "mark_signs_valid", "quantize", "dequantize", "fake_quant", "gemm", "rht", "rht_signs",
           "quantize_rowcol", "rowcol_operands", "decode_unscaled"]


def _fmt_key(spec) -> str:
    """The format as the custom ops' string argument: "element,scale,block,tile_2d,rule"
    (plain string formatting under torch.compile, so it traces; cached on the Spec in eager)."""
    if not torch.compiler.is_compiling():
        return spec.key
    return f"{spec.element},{spec.scale},{spec.block},{int(spec.tile_2d)},{spec.rule}"


def _direct(*tensors) -> bool:
    """True when a public function may call an op's implementation directly instead of
    going through torch.library's dispatcher (tens of microseconds per call, which a
    host-bound training step pays ~10 times per layer): eager mode, plain tensors, no
    dispatch mode active (fake tensors, opcheck) and no input that autograd would track
    (the ops register no autograd formula; through the dispatcher such a call errors at
    backward, so that case keeps the dispatcher). Same implementation, same bits."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN_TYPES or (grad and t.requires_grad)):
            return False
    return True


_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)  # no __torch_function__ / dispatch behaviour of their own


def _fmt_dict(key: str) -> dict:
    element, scale, block, tile, rule = key.split(",")
    return dict(element=element, scale=scale, block=int(block), tile_2d=tile == "1", rule=rule)


def _spec(fmt_key: str):
    return parse_fmt(_fmt_dict(fmt_key))


def _check_finite(x: torch.Tensor) -> None:
    bad = ~torch.isfinite(x)
    count = int(bad.sum())
    if count:
        first = int(bad.reshape(-1).nonzero()[0])
        raise NonFiniteError(f"{count} non-finite value(s) in the input; first at flat index {first}")


def _prepare(x: torch.Tensor, fmt, axis, rounding, rht):
    check_input(x)
    spec = parse_fmt(fmt)
    check_rounding(rounding)
    axis = normalize_axis(axis)
    rht = check_rht(rht, x.device)
    r, c = flat2d(x.shape)
    m, k = (r, c) if axis == -1 else (c, r)
    check_layout(spec, m, k, rht)
    return x.contiguous(), spec, axis, rht, m, k


def _seed(seed, direct: bool):
    """The seed an op gets: an int, or a one-element int64 tensor that the Triton kernels
    read from device memory (CUDA graphs: kernels.utils.seed_arg). The CPU reference reads
    its value. The dispatcher's schema takes an int, so a tensor seed needs the direct path."""
    if not isinstance(seed, torch.Tensor):
        return int(seed)
    if not direct:
        raise KernelInputError("a seed tensor works in eager mode only (CUDA graphs); pass an int seed under "
                               "torch.compile or with inputs that require grad")
    return seed


def _amax_arg(tensor_amax, device):
    if tensor_amax is None:
        return None
    return torch.as_tensor(tensor_amax, dtype=torch.float32, device=device).reshape(())


def _packed_shapes(spec, m: int, k: int):
    codes = (m, k // 2) if spec.packed else (m, k)
    if spec.per_tensor:
        scales = (0,)
    elif spec.tile_2d:
        scales = (m // 16, k // 16)
    else:
        scales = (m, k // spec.block)
    return codes, scales


# ------------------------------------------------------------------ custom ops

@torch.library.custom_op("fourcast::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, fmt_key: str, axis: int, rounding: str, seed: int, offset: int,
                 rht_n: int, signs: torch.Tensor | None, tensor_amax: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _quantize_impl(x, _spec(fmt_key), axis, rounding, seed, offset, rht_n, signs, tensor_amax)


def _quantize_impl(x, spec, axis, rounding, seed, offset, rht_n, signs, tensor_amax):
    rht = None if rht_n == 0 else (rht_n, signs)
    if x.is_cuda:
        from fourcast.kernels import quantize as qk

        p = qk.quantize(x, spec, axis=axis, rounding=rounding, seed=seed, offset=offset, rht=rht,
                        tensor_amax=tensor_amax)
        # The kernel's tensor scale and measured amax are fresh buffers; a given amax is
        # returned as a view of tensor_amax, so copy that one (never alias an input).
        amax = p.amax if tensor_amax is None else p.amax.clone()
        return p.codes, p.scales, p.tensor_scale, amax
    _check_finite(x)
    p = reference.quantize(x, spec, axis=axis, rounding=rounding, seed=int(seed), offset=offset, rht=rht,
                           tensor_amax=tensor_amax)
    return p.codes, p.scales, p.tensor_scale.clone(), p.amax.clone()  # never alias tensor_amax


@_quantize_op.register_fake
def _(x, fmt_key, axis, rounding, seed, offset, rht_n, signs, tensor_amax):
    spec = _spec(fmt_key)
    r, c = flat2d(x.shape)
    m, k = (r, c) if axis == -1 else (c, r)
    cs, ss = _packed_shapes(spec, m, k)
    return (x.new_empty(cs, dtype=torch.uint8), x.new_empty(ss, dtype=torch.uint8),
            x.new_empty((), dtype=torch.float32), x.new_empty((), dtype=torch.float32))


@torch.library.custom_op("fourcast::fake_quant", mutates_args=())
def _fake_quant_op(x: torch.Tensor, fmt_key: str, axis: int, rounding: str, seed: int, offset: int,
                   rht_n: int, signs: torch.Tensor | None, tensor_amax: torch.Tensor | None) -> torch.Tensor:
    return _fake_quant_impl(x, _spec(fmt_key), axis, rounding, seed, offset, rht_n, signs, tensor_amax)


def _fake_quant_impl(x, spec, axis, rounding, seed, offset, rht_n, signs, tensor_amax):
    rht = None if rht_n == 0 else (rht_n, signs)
    if x.is_cuda:
        from fourcast.kernels import fake_quant as fk

        return fk.fake_quant(x, spec, axis=axis, rounding=rounding, seed=seed, offset=offset, rht=rht,
                             tensor_amax=tensor_amax)
    _check_finite(x)
    return reference.fake_quant(x, spec, axis=axis, rounding=rounding, seed=int(seed), offset=offset, rht=rht,
                                tensor_amax=tensor_amax)


@_fake_quant_op.register_fake
def _(x, fmt_key, axis, rounding, seed, offset, rht_n, signs, tensor_amax):
    return torch.empty_like(x)


@torch.library.custom_op("fourcast::dequantize", mutates_args=())
def _dequantize_op(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: torch.Tensor, fmt_key: str,
                   shape: list[int], axis: int, dtype: torch.dtype) -> torch.Tensor:
    return _dequantize_impl(Packed(codes, scales, tensor_scale, tensor_scale, _fmt_dict(fmt_key), tuple(shape), axis),
                            dtype)


def _dequantize_impl(p: Packed, dtype: torch.dtype) -> torch.Tensor:
    if p.codes.is_cuda:
        from fourcast.kernels import quantize as qk

        return qk.dequantize(p, dtype)
    return reference.dequantize(p, dtype)


@_dequantize_op.register_fake
def _(codes, scales, tensor_scale, fmt_key, shape, axis, dtype):
    return codes.new_empty(tuple(shape), dtype=dtype)


@torch.library.custom_op("fourcast::gemm", mutates_args=())
def _gemm_op(a_codes: torch.Tensor, a_scales: torch.Tensor, a_ts: torch.Tensor, a_fmt: str, a_mk: list[int],
             b_codes: torch.Tensor, b_scales: torch.Tensor, b_ts: torch.Tensor, b_fmt: str, b_nk: list[int],
             out_dtype: torch.dtype, impl: str = "auto") -> torch.Tensor:
    a = Packed(a_codes, a_scales, a_ts, a_ts, _fmt_dict(a_fmt), tuple(a_mk), -1)
    b = Packed(b_codes, b_scales, b_ts, b_ts, _fmt_dict(b_fmt), tuple(b_nk), -1)
    return _gemm_impl(a, b, out_dtype, impl)


def _gemm_impl(a: Packed, b: Packed, out_dtype: torch.dtype, impl: str = "auto") -> torch.Tensor:
    if a.codes.is_cuda:
        from fourcast.kernels import gemm as gk

        return gk.gemm(a, b, out_dtype, impl)
    return reference.gemm(a, b, out_dtype)  # CPU: the reference, whatever the impl


@_gemm_op.register_fake
def _(a_codes, a_scales, a_ts, a_fmt, a_mk, b_codes, b_scales, b_ts, b_fmt, b_nk, out_dtype, impl="auto"):
    return a_codes.new_empty((a_mk[0], b_nk[0]), dtype=out_dtype)


# ------------------------------------------------------------------ public API

def quantize(x: torch.Tensor, fmt, *, axis: int = -1, rounding: str = "rtne", seed: int = 0, offset: int = 0,
             rht=None, tensor_amax=None) -> Packed:
    """Quantize x along `axis` (-1: row-wise; 0: column-wise of the flattened 2-D view,
    i.e. x.T along its last axis) to packed codes + scale bytes.

    fmt: a recipe TensorFormat dict (element, scale, block, tile_2d, rule).
    rounding: rtne | away | sr (SR uses Philox at (seed, element index in the quantized
    layout + offset)) | sr4 (SR on word i % 4 at counter offset + i // 4, i the
    element index). rht: None or (n, signs): rotate along the quantized axis first.
    tensor_amax: a caller-supplied tensor amax (periodic refresh) instead of the measured.

    >>> import torch
    >>> from fourcast.kernels import ops
    >>> f = dict(element="e2m1", scale="ue8m0", block=32, tile_2d=False, rule="floor")
    >>> ops.quantize(torch.ones(2, 32), f).scales.flatten().tolist()   # 2^(0-2): byte 125
    [125, 125]
    """
    x, spec, axis, rht, m, k = _prepare(x, fmt, axis, rounding, rht)
    rht_n, signs = (0, None) if rht is None else rht
    amax_arg = _amax_arg(tensor_amax, x.device)
    op = _quantize_impl if _direct(x, signs, amax_arg) else _quantize_op
    codes, scales, ts, amax = op(x, spec if op is _quantize_impl else _fmt_key(spec), axis, rounding,
                                 _seed(seed, op is _quantize_impl), int(offset), rht_n, signs, amax_arg)
    return Packed(codes, scales, ts, amax, spec.as_dict(), tuple(x.shape), axis, rht)


def dequantize(p: Packed, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """x_hat = value(code) * scale / tensor_scale in the ORIGINAL orientation and shape.
    The RHT is not undone: the result is in the rotated basis, what a GEMM consumes."""
    spec = p.spec
    codes, scales = p.codes.contiguous(), p.scales.contiguous()
    if _direct(codes, scales, p.tensor_scale):
        return _dequantize_impl(Packed(codes, scales, p.tensor_scale, p.tensor_scale, p.fmt, tuple(p.shape), p.axis),
                                dtype)
    return _dequantize_op(codes, scales, p.tensor_scale, _fmt_key(spec), list(p.shape), p.axis, dtype)


def fake_quant(x: torch.Tensor, fmt, *, axis: int = -1, rounding: str = "rtne", seed: int = 0, offset: int = 0,
               rht=None, tensor_amax=None) -> torch.Tensor:
    """dequantize(quantize(x, ...), x.dtype), bit for bit, in one pass on CUDA.

    >>> import torch
    >>> from fourcast.kernels import ops
    >>> f = dict(element="e2m1", scale="e4m3", block=16, tile_2d=False, rule="te")
    >>> ops.fake_quant(torch.full((1, 16), 6.0), f).tolist()[0][:2]
    [6.0, 6.0]
    """
    x, spec, axis, rht, m, k = _prepare(x, fmt, axis, rounding, rht)
    rht_n, signs = (0, None) if rht is None else rht
    amax_arg = _amax_arg(tensor_amax, x.device)
    if _direct(x, signs, amax_arg):
        return _fake_quant_impl(x, spec, axis, rounding, _seed(seed, True), int(offset), rht_n, signs, amax_arg)
    return _fake_quant_op(x, _fmt_key(spec), axis, rounding, _seed(seed, False), int(offset), rht_n, signs, amax_arg)


def gemm(a: Packed, b: Packed, out_dtype: torch.dtype = torch.bfloat16, *, impl: str = "auto") -> torch.Tensor:
    """C[M, N] = A[M, K] . B[N, K]^T from packed operands, both blocked along K (their
    quantized layouts). FP32 accumulation; out_dtype bfloat16 or float32.

    impl (CUDA; CPU tensors always get the reference): "auto" ("dequant" unless
    kernels.gemm.AUTO_FP8), "triton" (in-register dequant kernel), "dequant"
    (dequantize once + cuBLAS bf16), "fp8" (MXFP4 only, FormatError otherwise: exact
    E4M3 operands on FP8 tensor cores, whose accumulation is looser than FP32). All but
    "fp8" within testing.gemm_bound; kernels/gemm.py tells how.

    >>> import torch
    >>> from fourcast.kernels import ops
    >>> f = dict(element="e2m1", scale="ue8m0", block=32, tile_2d=False, rule="floor")
    >>> a = ops.quantize(torch.ones(2, 32), f); b = ops.quantize(torch.ones(3, 32), f)
    >>> ops.gemm(a, b, torch.float32).tolist()
    [[32.0, 32.0, 32.0], [32.0, 32.0, 32.0]]
    """
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"gemm out_dtype must be bfloat16 or float32, got {out_dtype}")
    ma, ka = a.layout_shape
    nb, kb = b.layout_shape
    if ka != kb:
        raise ShapeError(f"gemm needs the same K: A is {ma}x{ka}, B is {nb}x{kb} (quantized layouts)")
    if a.codes.device != b.codes.device:
        raise ValueError(f"gemm operands on different devices: {a.codes.device} and {b.codes.device}")
    check_gemm_impl(impl, a.spec, b.spec)
    if _direct(a.codes, a.scales, a.tensor_scale, b.codes, b.scales, b.tensor_scale):
        return _gemm_impl(Packed(a.codes, a.scales, a.tensor_scale, a.tensor_scale, a.fmt, (ma, ka), -1),
                          Packed(b.codes, b.scales, b.tensor_scale, b.tensor_scale, b.fmt, (nb, kb), -1), out_dtype,
                          impl)
    return _gemm_op(a.codes, a.scales, a.tensor_scale, _fmt_key(a.spec), [ma, ka],
                    b.codes, b.scales, b.tensor_scale, _fmt_key(b.spec), [nb, kb], out_dtype, impl)


def rht(x: torch.Tensor, n: int, signs: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """Block-diagonal random Hadamard transform of size n along `axis` (signs applied
    before H, normalised by 1/sqrt(n)); f32 arithmetic, result in x.dtype.

    >>> import torch
    >>> from fourcast.kernels import ops
    >>> ops.rht(torch.ones(1, 16), 16, ops.rht_signs(16, "te", 0)).abs().sum().item()
    4.0
    """
    check_input(x)
    if x.is_cuda:
        from fourcast.kernels import hadamard

        return hadamard.rht(x, n, signs, axis)
    return reference.rht(x, n, signs, axis)


def rht_signs(n: int, policy: str = "te", seed: int = 0, device=None) -> torch.Tensor:
    """+-1 f32 sign vector for an RHT of size n: te (TE's fixed vector, repeated past 16),
    per-layer / per-step (bit 0 of Philox word 0 at (seed, i); the caller mixes layer
    and step into seed).

    >>> from fourcast.kernels import ops
    >>> ops.rht_signs(16, "te")[:4].tolist()
    [1.0, 1.0, 1.0, -1.0]
    """
    return mark_signs_valid(reference.rht_signs(n, policy, seed, device))


def quantize_rowcol(x: torch.Tensor, fmt, *, fmt_col=None, rounding: str = "rtne", rounding_col=None,
                    seed: int = 0, offset: int = 0, rht=None, rht_col=None, tensor_amax=None,
                    tensor_amax_col=None) -> tuple[Packed, Packed]:
    """Row-wise AND column-wise copies of a 2-D x (what Fprop and Wgrad/Dgrad need), from
    one read of x on CUDA. Equal to (quantize(x, fmt, axis=-1, rht=rht, ...),
    quantize(x, fmt_col, axis=0, rht=rht_col, seed=seed, offset=offset + x.numel(), ...))."""
    fmt_col = fmt if fmt_col is None else fmt_col
    rounding_col = rounding if rounding_col is None else rounding_col
    if x.is_cuda:
        from fourcast.kernels import quantize as qk

        x, spec, _, rht, _, _ = _prepare(x, fmt, -1, rounding, rht)
        _, spec_c, _, rht_col, _, _ = _prepare(x, fmt_col, 0, rounding_col, rht_col)
        return qk.quantize_rowcol(x, spec, spec_c, rounding, rounding_col, seed, offset, rht, rht_col,
                                  _amax_arg(tensor_amax, x.device), _amax_arg(tensor_amax_col, x.device))
    row = quantize(x, fmt, axis=-1, rounding=rounding, seed=seed, offset=offset, rht=rht, tensor_amax=tensor_amax)
    col = quantize(x, fmt_col, axis=0, rounding=rounding_col, seed=seed, offset=offset + x.numel(), rht=rht_col,
                   tensor_amax=tensor_amax_col)
    return row, col


class Decoded(NamedTuple):
    """A quantized operand as its decoded values WITHOUT the tensor scale (value(code) *
    block scale: exact in bf16 for every 4-bit and FP8 grid), in x's orientation, plus
    the FP32 tensor scale that a GEMM epilogue divides out and the tensor amax."""

    values: torch.Tensor
    tensor_scale: torch.Tensor
    amax: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


def rowcol_operands(x: torch.Tensor, fmt, *, fmt_col=None, rounding: str = "rtne", rounding_col=None, seed: int = 0,
                    offset: int = 0, rht=None, rht_col=None, tensor_amax=None, tensor_amax_col=None,
                    outputs=("decoded", "packed"), dtype: torch.dtype = torch.bfloat16, measure_amax: bool = True):
    """quantize_rowcol, with each copy returned as "packed" (a Packed) or "decoded" (a
    Decoded in `dtype`, what a GEMM consumes directly): the same codes and scales either
    way. On CUDA one Triton pass writes whichever outputs are asked for (the decoded
    copies without a separate dequantize pass); elsewhere quantize_rowcol + dequantize.
    measure_amax=False: on CUDA a format without a tensor scale skips recording its amax
    (NaN comes back; the codes are the same); a format with one measures what it needs."""
    fmt_col = fmt if fmt_col is None else fmt_col
    rounding_col = rounding if rounding_col is None else rounding_col
    for o in outputs:
        if o not in ("decoded", "packed"):
            raise ValueError(f"rowcol_operands outputs are 'decoded' or 'packed', got {o!r}")
    if x.is_cuda and parse_fmt(fmt) == parse_fmt(fmt_col):
        from fourcast.kernels import quantize as qk

        x, spec, _, rht, _, _ = _prepare(x, fmt, -1, rounding, rht)
        _, _, _, rht_col, _, _ = _prepare(x, fmt_col, 0, rounding_col, rht_col)
        dec = tuple(o == "decoded" for o in outputs)
        o = qk.launch_rowcol(x, spec, rounding, rounding_col, seed, offset, rht, rht_col,
                             _amax_arg(tensor_amax, x.device), _amax_arg(tensor_amax_col, x.device),
                             write_codes=(not dec[0], not dec[1]), write_xhat=dec, xhat_dtype=dtype, unscaled=True,
                             measure_amax=measure_amax)
        shape = tuple(x.shape)
        out = []
        for i, axis, r in ((0, -1, rht), (1, 0, rht_col)):
            if dec[i]:
                out.append(Decoded(o["xhat"][i], o["ts"][i], o["amax"][i]))
            else:
                out.append(Packed(o["codes"][i], o["scales"][i], o["ts"][i], o["amax"][i], spec.as_dict(), shape,
                                  axis, r))
        return tuple(out)
    pair = quantize_rowcol(x, fmt, fmt_col=fmt_col, rounding=rounding, rounding_col=rounding_col, seed=seed,
                           offset=offset, rht=rht, rht_col=rht_col, tensor_amax=tensor_amax,
                           tensor_amax_col=tensor_amax_col)
    return tuple(decode_unscaled(p, dtype) if o == "decoded" else p for p, o in zip(pair, outputs))


def quantize_decoded(x: torch.Tensor, fmt, *, axis: int = -1, rounding: str = "rtne", seed: int = 0,
                     offset: int = 0, rht=None, tensor_amax=None, dtype: torch.dtype = torch.bfloat16) -> Decoded:
    """decode_unscaled(quantize(x, fmt, ...), dtype): the same values, tensor scale and
    amax. Row-wise on CUDA in eager mode one Triton pass writes the decoded values where
    quantize would write codes, so no code bytes go out and come back (QLinear's 2-D tiled
    weight, decoded once for Fprop and Dgrad); otherwise those two calls."""
    x, spec, axis, rht, _, _ = _prepare(x, fmt, axis, rounding, rht)
    amax_arg = _amax_arg(tensor_amax, x.device)
    if not (x.is_cuda and axis == -1 and _direct(x, None if rht is None else rht[1], amax_arg)):
        return decode_unscaled(quantize(x, fmt, axis=axis, rounding=rounding, seed=seed, offset=offset, rht=rht,
                                        tensor_amax=tensor_amax), dtype)
    from fourcast.kernels import quantize as qk

    o = qk.launch(x, spec, axis, rounding, _seed(seed, True), int(offset), rht, amax_arg, write_codes=False,
                  write_xhat=True, xhat_dtype=dtype, unscaled=True)
    return Decoded(o["xhat"], o["ts"], o["amax"] if tensor_amax is None else o["amax"].clone())


def decode_unscaled(p: Packed, dtype: torch.dtype = torch.bfloat16) -> Decoded:
    """A Packed operand as a Decoded one: dequantize with a unit tensor scale, so the
    values are value * block scale (exact in bf16 for every 4-bit and FP8 grid) and the
    FP32 tensor scale goes to the GEMM's epilogue, as the hardware does.
    A column-wise copy (axis 0, 2-D) decodes in its own quantized layout, whose rows are
    contiguous, and comes back as the transposed view (a GEMM takes it as it is,
    column-major): x's orientation would need transposed stores (Wgrad's saved X: 135 us
    against 83 at 32768 x 768 on an H200, session 7)."""
    unit = _unit_like(p.tensor_scale)
    t = p.axis == 0 and len(p.shape) == 2
    q = Packed(p.codes.contiguous(), p.scales.contiguous(), unit, p.amax, p.fmt,
               tuple(p.shape[::-1]) if t else tuple(p.shape), -1 if t else p.axis, p.rht)
    if p.codes.is_cuda and _direct(p.codes, p.scales):
        from fourcast.kernels import quantize as qk

        values = qk.dequantize(q, dtype, unscaled=True)
    else:
        values = dequantize(q, dtype)
    return Decoded(values.t() if t else values, p.tensor_scale, p.amax)


# Read-only ones, one per (device, dtype, shape): a unit tensor scale without a fill
# kernel per call.
_UNITS: dict[tuple, torch.Tensor] = {}


def _unit_like(ts):
    if not isinstance(ts, torch.Tensor):
        return 1.0
    key = (ts.device, ts.dtype, tuple(ts.shape))
    unit = _UNITS.get(key)
    if unit is None:
        unit = _UNITS[key] = torch.ones_like(ts)
    return unit
