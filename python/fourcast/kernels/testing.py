"""Inputs and comparisons shared by tests/interpret, tests/gpu and benchmarks/kernels.py:
named formats, random / heavy-tailed / adversarial inputs, bit-exact Packed comparison
and the GEMM error bound; and for the CPU tier's offline sm_90a compiles, a child process
that compiles with a fresh Triton cache, Triton's bundled CUDA tools on a kernel's cubin and
its spilled bytes.

Example:
    >>> from fourcast.kernels import testing
    >>> x = testing.make_input("ties", (32, 64), fmt=testing.FORMATS["mxfp4"])
    >>> tuple(x.shape)
    (32, 64)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import torch

from fourcast.kernels import reference
from fourcast.kernels.utils import GRIDS, Packed, parse_fmt


def _f(element, scale, block, rule, tile_2d=False):
    return dict(element=element, scale=scale, block=block, tile_2d=tile_2d, rule=rule)


# Every element grid x scale format x block layout x rule of the recipe presets, and more.
FORMATS = {
    "nvfp4": _f("e2m1", "e4m3", 16, "te"),
    "nvfp4-2d": _f("e2m1", "e4m3", 16, "te", True),
    "nvfp4-torchao": _f("e2m1", "e4m3", 16, "torchao"),
    "mxfp4": _f("e2m1", "ue8m0", 32, "floor"),
    "mxfp4-rceil": _f("e2m1", "ue8m0", 32, "rceil"),
    "ue5m3": _f("e2m1", "ue5m3", 16, "te"),
    "ue5m3-2d": _f("e2m1", "ue5m3", 16, "te", True),
    "ufp4": _f("e1m2", "e4m3", 16, "te"),
    "ufp4-int4": _f("int4", "e4m3", 16, "te"),
    "int4-sm-mx": _f("int4-sm", "ue8m0", 32, "floor"),
    "e1m2-mx16": _f("e1m2", "ue8m0", 16, "rceil"),
    "int4-ue5m3": _f("int4", "ue5m3", 16, "torchao"),
    "mxfp8": _f("e4m3", "ue8m0", 32, "floor"),
    "mxfp8-e5m2": _f("e5m2", "ue8m0", 32, "rceil"),
    "fp8": _f("e4m3", "fp32", 0, "te"),
    "fp8-e5m2": _f("e5m2", "fp32", 0, "te"),
}

INPUT_KINDS = ("random", "heavy", "ties", "requant", "zeros", "tiny", "huge")


def make_input(kind: str, shape, dtype=torch.float32, device="cpu", seed: int = 0, fmt=None) -> torch.Tensor:
    """A test tensor. random: N(0,1); heavy: N(0,1) * exp(2 N(0,1)) (log-normal spread);
    ties: per 16/32-block one element at gmax * 2^k and the rest on midpoints between grid
    neighbours times 2^k (exact RTNE ties under power-of-two scales); requant: the
    dequantized output of a first quantization (ties under any scale rule); zeros: whole
    zero blocks, -0.0 and +0.0; tiny: f32 subnormals and values near 2^-126 beside normal
    blocks; huge: values near 2^120 beside small ones."""
    g = torch.Generator().manual_seed(seed)
    r, c = shape[0], shape[-1]
    n = int(torch.tensor(shape).prod())
    base = torch.randn(n, generator=g).reshape(shape)
    if kind == "random":
        x = base
    elif kind == "heavy":
        x = base * torch.exp(2 * torch.randn(n, generator=g).reshape(shape))
    elif kind in ("ties", "requant"):
        spec = parse_fmt(fmt or FORMATS["nvfp4"])
        grid = reference.grid_values(GRIDS[spec.element])
        pos = grid[(grid > 0) & torch.isfinite(grid)].sort().values
        mids = torch.cat([pos[:1] / 2, (pos[1:] + pos[:-1]) / 2, pos])
        idx = torch.randint(0, len(mids), (n,), generator=g)
        sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
        k = torch.randint(-6, 6, (n // 16 + 1,), generator=g).repeat_interleave(16)[:n]
        x = (mids[idx] * sign * torch.pow(2.0, k.float())).reshape(shape)
        x.view(-1)[::16] = (pos[-1] * torch.pow(2.0, k[::16].float()))  # block amax on the grid max
        if kind == "requant":
            x = reference.fake_quant(base * 3, spec) * (1 + (torch.rand(shape, generator=g) < 0.1).float())
    elif kind == "zeros":
        x = base.clone()
        x.view(-1)[: n // 4] = 0.0
        x.view(-1)[n // 4: n // 4 + 16] = -0.0
        x[:, : min(c, 32)] = 0.0
    elif kind == "tiny":
        x = base * 2.0 ** -126
        x.view(-1)[::7] *= 2.0 ** -10  # subnormal
        x[: r // 2] = base[: r // 2]
    elif kind == "huge":
        x = base * 2.0 ** 120
        x[: r // 2] = base[: r // 2] * 1e-3
    else:
        raise ValueError(f"unknown input kind {kind!r}; expected one of {INPUT_KINDS}")
    return x.to(dtype=dtype).to(device)


def nonfinite_input(shape, dtype=torch.float32, device="cpu", seed: int = 0) -> torch.Tensor:
    """Random data with a NaN, +Inf and -Inf in separate blocks (GPU semantics tests)."""
    x = make_input("random", shape, torch.float32, "cpu", seed)
    x.view(-1)[3] = float("nan")
    x.view(-1)[min(40, x.numel() - 1)] = float("inf")
    x.view(-1)[-5] = float("-inf")
    return x.to(dtype=dtype).to(device)


def same_float(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where NaN (payloads may differ), -0.0 vs 0.0 distinguished."""
    a, b = a.float().cpu(), b.float().cpu()
    if a.shape != b.shape:
        return False
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    a, b = a[~nan], b[~nan]
    return torch.equal(a, b) and torch.equal(torch.signbit(a), torch.signbit(b))


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a bf16/f16 or f32 tensor (for bit-for-bit torch.equal)."""
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def dequantize_unscaled(p: Packed, dtype) -> torch.Tensor:
    """reference.dequantize without the tensor scale (value x block scale, exact in bf16):
    what a decoded copy of the fused path holds."""
    unit = torch.ones_like(p.tensor_scale)
    return reference.dequantize(reference.Packed(p.codes, p.scales, unit, p.amax, p.fmt, p.shape, p.axis, p.rht),
                                dtype)


def packed_diff(a: Packed, b: Packed) -> list[str]:
    """Names of the fields that differ bit-wise (empty list: identical)."""
    bad = []
    if not torch.equal(a.codes.cpu(), b.codes.cpu()):
        bad.append(f"codes ({int((a.codes.cpu() != b.codes.cpu()).sum())} bytes)")
    if not torch.equal(a.scales.cpu(), b.scales.cpu()):
        bad.append(f"scales ({int((a.scales.cpu() != b.scales.cpu()).sum())} bytes)")
    if not same_float(a.tensor_scale, b.tensor_scale):
        bad.append(f"tensor_scale ({float(a.tensor_scale)} vs {float(b.tensor_scale)})")
    if not same_float(a.amax, b.amax):
        bad.append(f"amax ({float(a.amax)} vs {float(b.amax)})")
    return bad


def check_quantizer(x: torch.Tensor, fmt, **kw) -> Packed:
    """Triton quantize / dequantize / fake_quant of `x` against the PyTorch reference,
    bit for bit; every comparison is made before failing, so one mismatch does not hide
    the others. Returns the Triton Packed. Raises AssertionError naming what differs."""
    # Imported here: the Triton kernels need triton, the rest of this module does not.
    from fourcast.kernels import fake_quant as fk
    from fourcast.kernels import quantize as qk

    a = qk.quantize(x, fmt, **kw)
    b = reference.quantize(x, fmt, **kw)
    bad = packed_diff(a, b)
    want = reference.dequantize(b, x.dtype)
    if not same_float(fk.fake_quant(x, fmt, **kw), want):
        bad.append("fake_quant != dequantize(reference)")
    if not same_float(qk.dequantize(a, x.dtype), want):
        bad.append("Triton dequantize != reference dequantize")
    if not same_float(qk.dequantize(a, torch.float32), reference.dequantize(b, torch.float32)):
        bad.append("Triton dequantize (f32) != reference")
    if bad:
        raise AssertionError((fmt, kw, bad))
    return a


def check_rowcol(x: torch.Tensor, fmt, rounding_r: str, rounding_c: str, seed: int, offset: int, rht_r=None,
                 rht_c=None) -> tuple[Packed, Packed]:
    """Triton quantize_rowcol's two copies of x against two reference quantizations (the
    column copy's SR stream starts at offset + numel), bit for bit. Returns the reference
    (row, column) Packed; raises AssertionError naming what differs in either copy."""
    from fourcast.kernels import quantize as qk

    r, c = qk.quantize_rowcol(x, fmt, fmt, rounding_r, rounding_c, seed, offset, rht_r, rht_c)
    want_r = reference.quantize(x, fmt, rounding=rounding_r, rht=rht_r, seed=seed, offset=offset)
    want_c = reference.quantize(x, fmt, axis=0, rounding=rounding_c, rht=rht_c, seed=seed, offset=offset + x.numel())
    bad = [f"row {d}" for d in packed_diff(r, want_r)] + [f"column {d}" for d in packed_diff(c, want_c)]
    if bad:
        raise AssertionError((fmt, rounding_r, rounding_c, bad))
    return want_r, want_c


def gemm_bound(a_hat: torch.Tensor, b_hat: torch.Tensor, out_dtype, fp8_tc: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 product C64, allowed |C - C64|) for C = A_hat . B_hat^T computed with FP32
    accumulation in any order plus the epilogue (alpha's two roundings and the product's
    one; covered twice over): 2 (K + 2) 2^-24 |A||B|^T,
    plus the bf16 output rounding (2^-8 |C64|) and the smallest subnormal. fp8_tc: plus
    2^-9 |A||B|^T for Hopper FP8 tensor-core accumulation (gemm impl "fp8"; empirical:
    at most 2^-11.4 seen on an H200, kernels/gemm.py)."""
    A, B = a_hat.double(), b_hat.double()
    c64 = A @ B.t()
    k = A.shape[1]
    bound = (2 * (k + 2) * 2.0**-24 + (2.0**-9 if fp8_tc else 0.0)) * (A.abs() @ B.abs().t())
    if out_dtype == torch.bfloat16:
        bound = bound + 2.0**-8 * c64.abs() * (1 + 2 * (k + 2) * 2.0**-24)
    return c64, bound + 2.0**-149


def compiled_in_child(code: str, *args: str) -> dict:
    """The JSON line a script printed last, run as `python -c code *args` with a fresh Triton
    cache and no TRITON_INTERPRET: kernels compiled for a GPU without one (the interpreter's
    patches of triton.language break a later real compile in the process that set them).
    AssertionError with the child's stderr if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as cache:
        env["TRITON_CACHE_DIR"] = cache
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                             timeout=600)
    if out.returncode != 0:
        raise AssertionError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def cuda_tool(kernel, tool: str, *args: str) -> str:
    """The output of one of Triton's bundled CUDA tools (nvdisasm, cuobjdump) on a compiled
    kernel's cubin."""
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([path, *args, f.name], capture_output=True, text=True, check=True).stdout


def spilled_bytes(kernel) -> int:
    """A compiled kernel's local and stack bytes a thread (cuobjdump -res-usage): its spills."""
    res = cuda_tool(kernel, "cuobjdump", "-res-usage")
    return sum(int(re.search(rf"{m}:(\d+)", res).group(1)) for m in ("LOCAL", "STACK"))
