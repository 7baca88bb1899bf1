"""Ceilings measured in the same run: the GPU and versions, copy bandwidth, cuBLAS BF16
and FP8 (torch._scaled_mm) GEMMs."""

from __future__ import annotations

import datetime
import sys

import torch
import triton


from kernel_bench.harness import DEV, GEMM_SHAPES, RES, SMOKE, log, ms, rand, section


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
