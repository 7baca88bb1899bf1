"""Fake quantization (Triton): quantize then dequantize in ONE pass over x, writing
x_hat in x's dtype and orientation; bit-identical to dequantize(quantize(x)) because it
is the quantize kernel (quantize.py) with the code store swapped for the x_hat store.
This is the fastest emulation path: one memory pass, then cuBLAS on x_hat.

Example (CUDA):
    >>> from fourcast.kernels import fake_quant as fq          # doctest: +SKIP
    >>> xh = fq.fake_quant(x, nvfp4)                           # doctest: +SKIP
    >>> xr, xc = fq.fake_quant_rowcol(x, nvfp4, rht_c=(16, s))  # doctest: +SKIP
"""

from __future__ import annotations

import torch

from fourcast.kernels import quantize as qk
from fourcast.kernels.utils import check_kernel_input, check_rht, check_rounding, normalize_axis, parse_fmt


def fake_quant(x: torch.Tensor, fmt, *, axis: int = -1, rounding: str = "rtne", seed: int = 0, offset: int = 0,
               rht=None, tensor_amax=None, rht_impl: int = 0) -> torch.Tensor:
    """x_hat (x.dtype, x's shape) of quantize(x, fmt, axis=axis, ...)."""
    check_kernel_input(x)
    spec = parse_fmt(fmt)
    check_rounding(rounding)
    o = qk.launch(x, spec, normalize_axis(axis), rounding, seed, offset, check_rht(rht, x.device), tensor_amax,
                  write_codes=False, write_xhat=True, rht_impl=rht_impl)
    return o["xhat"]


def fake_quant_rowcol(x: torch.Tensor, fmt, *, rounding: str = "rtne", rounding_c: str | None = None,
                      seed: int = 0, offset: int = 0, rht=None, rht_c=None, tensor_amax=None,
                      tensor_amax_c=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(fake_quant(x, axis=-1, rht=rht), fake_quant(x, axis=0, rht=rht_c, offset=offset +
    x.numel())) of a 2-D x from one read per tile: what Fprop and Wgrad/Dgrad consume."""
    check_kernel_input(x)
    spec = parse_fmt(fmt)
    rounding_c = rounding if rounding_c is None else rounding_c
    check_rounding(rounding)
    check_rounding(rounding_c)
    o = qk.launch_rowcol(x, spec, rounding, rounding_c, seed, offset, check_rht(rht, x.device),
                         check_rht(rht_c, x.device), tensor_amax, tensor_amax_c, write_codes=False, write_xhat=True)
    return o["xhat"]
