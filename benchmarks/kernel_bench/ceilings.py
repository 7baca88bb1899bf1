"""Ceilings measured in the same run: the GPU and versions, copy bandwidth, cuBLAS BF16
and FP8 (torch._scaled_mm) GEMMs."""

from __future__ import annotations

import datetime
import sys

import torch
import triton


from kernel_bench.harness import ARGS, DEV, F, GEMM_SHAPES, RES, SMOKE, log, ms, ms_graphed, rand, section, sm_clock


# ------------------------------------------------------------------ sections

@section("meta")
def meta():
    p = torch.cuda.get_device_properties(0) if not SMOKE else type("P", (), dict(name="cpu-smoke",
                                                                                    multi_processor_count=0))
    RES["meta"] = dict(gpu=p.name, sms=p.multi_processor_count, torch=torch.__version__, triton=triton.__version__,
                       date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       python=sys.version.split()[0], cuda=torch.version.cuda)
    log(RES["meta"])


@section("copy bandwidth")
def ceiling_copy():
    n = 1 << 29 if not SMOKE else 1 << 10  # 1 GiB of bf16
    a = rand((n,))
    b = torch.empty_like(a)
    t = ms(lambda: b.copy_(a))
    RES["ceilings"]["copy_tbps"] = 2 * a.numel() * 2 / t / 1e9
    log(f"copy {RES['ceilings']['copy_tbps']:.2f} TB/s")


@section("cuBLAS bf16 / fp8")
def ceiling_gemm():
    RES["ceilings"]["bf16"] = {}
    RES["ceilings"]["fp8"] = {}
    for (m, n, k) in GEMM_SHAPES:
        a, b = rand((m, k)), rand((n, k))
        t = ms(lambda: torch.mm(a, b.t()))
        RES["ceilings"]["bf16"][f"{m}x{n}x{k}"] = dict(ms=t, tflops=2 * m * n * k / t / 1e9)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=DEV)
        t8 = ms(lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16))
        RES["ceilings"]["fp8"][f"{m}x{n}x{k}"] = dict(ms=t8, tflops=2 * m * n * k / t8 / 1e9)
        log(f"{m}x{n}x{k}: bf16 {2 * m * n * k / t / 1e9:.0f} TFLOP/s, fp8 {2 * m * n * k / t8 / 1e9:.0f}")


@section("cuBLAS bf16 on random and on decoded 4-bit operands")
def gemm_data():
    """One cuBLAS BF16 GEMM per layer shape on random bf16 operands and on the same operands
    quantized and decoded as the fused QLinear path feeds cuBLAS (value x block scale: a few
    mantissa bits), in turns (--repeat rounds), each a CUDA-graph replay with the SM clock read
    after it. Session 29's layers ran faster than "BF16 layer + their quantizer bytes at copy
    rate" allows, so their GEMMs ran faster than the BF16 layer's: this says whether the data
    alone (its power, the clock it holds) moves cuBLAS's time, and so the FP4/BF16 layer ratio."""
    from fourcast.kernels import ops
    rows = RES.setdefault("gemm_data", [])
    for (m, n, k) in GEMM_SHAPES[1:]:  # the layer's: M 8192 tokens
        a, b = rand((m, k)), rand((n, k))
        data = {"random bf16": (a, b)}
        for fmt in ("nvfp4", "ufp4"):
            data[f"decoded {fmt}"] = tuple(ops.decode_unscaled(ops.quantize(t, F[fmt])).values for t in (a, b))
        shape, best = f"{m}x{n}x{k}", {}
        for sample in range(max(1, ARGS.repeat)):
            for name, (x, w) in data.items():
                t, _ = ms_graphed(lambda: torch.mm(x, w.t()))
                rows.append(dict(shape=shape, data=name, sample=sample, ms=t, tflops=2 * m * n * k / t / 1e9,
                                 sm_mhz=sm_clock()))
                best[name] = min(t, best.get(name, t))
        log(f"{shape}: fastest against random bf16", {d: round(t / best["random bf16"], 3) for d, t in best.items()})
