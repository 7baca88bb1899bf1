"""Triton kernels that emulate the FP4 datapath on Hopper, one op per file, each beside
a plain PyTorch reference (reference.py). Importing this package needs torch; the
Triton modules (quantize, fake_quant, gemm, hadamard) also need triton and load lazily
when a CUDA tensor first reaches them. The public face is `ops`:

    from fourcast.kernels import ops
    p = ops.quantize(x, fmt)          # ops.Packed
"""

from fourcast.kernels import ops
from fourcast.kernels.utils import Packed

__all__ = ["ops", "Packed"]
