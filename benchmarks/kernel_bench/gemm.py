"""The packed GEMM's routes (Triton, dequant + cuBLAS, FP8) against cuBLAS BF16, kernel
variants, the epilogue, the exact MXFP4-on-FP8 idea."""

from __future__ import annotations

import traceback

import torch

from fourcast.kernels import gemm as gk
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

from kernel_bench.harness import ARGS, DEV, F, GEMM_SHAPES, RES, SMOKE, left, log, ms, rand, save, section


@section("GEMM epilogue cost")
def gemm_epilogue():
    """What the emulated GEMM's tensor-scale epilogue costs over a bf16-out cuBLAS GEMM at
    the 125M model's MLP shapes: as an FP32 output and a second pass (the fallback route),
    and fused into cuBLASLt with a device alpha (gemm.scaled_mm, the route taken)."""
    from fourcast.kernels import cublaslt

    shapes = ((32768, 4608, 768), (32768, 768, 4608), (4608, 768, 32768)) if not SMOKE else ((64, 64, 64),)
    ts = torch.tensor([3.0], device=DEV)
    alpha = gk.epilogue_alpha(ts, ts)
    for m, n, k in shapes:
        a = rand((m, k))
        b = rand((n, k)).t()
        t_bf16 = ms(lambda: torch.mm(a, b))
        t_f32 = ms(lambda: gk._mm_f32(a, b))
        t_epi = ms(lambda: gk._epilogue(gk._mm_f32(a, b), None, None, ts, ts, torch.bfloat16))
        row = dict(shape=f"{m}x{n}x{k}", bf16_out_ms=t_bf16, f32_out_ms=t_f32, f32_out_epilogue_ms=t_epi,
                   epilogue_ratio=t_epi / t_bf16)
        if cublaslt.available(a.device):  # not under BENCH_SMOKE
            row["lt_alpha_bf16_ms"] = t_lt = ms(lambda: cublaslt.matmul(a, b, alpha, torch.bfloat16))
            row["lt_alpha_f32_ms"] = ms(lambda: cublaslt.matmul(a, b, alpha, torch.float32))
            row["scaled_mm_ms"] = t_sc = ms(lambda: gk.scaled_mm(a, b, ts, ts, torch.bfloat16))  # + the alpha ops
            row.update(lt_ratio=t_lt / t_bf16, scaled_mm_ratio=t_sc / t_bf16)
        RES.setdefault("gemm_epilogue", []).append(row)
        log(row)


@section("packed GEMM")
def gemm_bench():
    bf = RES["ceilings"].get("bf16", {})
    # correctness at a size where float64 is cheap
    cs = ((2048, 4096), (1024, 4096)) if not SMOKE else ((32, 128), (16, 128))
    for (fa, fb) in (("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4")):
        a1, b1 = qk.quantize(rand(cs[0]), F[fa]), qk.quantize(rand(cs[1]), F[fb])
        for impl in gemm_impls(fa):
            c64, bound = testing.gemm_bound(ref.dequantize_layout(a1), ref.dequantize_layout(b1), torch.bfloat16,
                                            fp8_tc=impl == "fp8")
            before = gk.STATS["fp8_fallbacks"]
            err = (gk.gemm(a1, b1, impl=impl).double() - c64).abs()
            RES["checks"].append(dict(what=f"gemm {fa} x {fb} ({impl}) within bound" + (" (+FP8 TC term)" if
                                      impl == "fp8" else ""), ok=bool((err <= bound).all()),
                                      max_err_over_bound=float((err / bound).max()),
                                      fp8_fallback=gk.STATS["fp8_fallbacks"] != before))
    RES["notes"].append(f"gemm kernel used (triton impl): {gk.KERNEL} where it applies, with its default configs")
    for fname in ("nvfp4", "ue5m3", "mxfp4", "ufp4"):
        for (m, n, k) in GEMM_SHAPES:
            if left() < 60:
                break
            try:
                pa = qk.quantize(rand((m, k)), F[fname])
                pb = qk.quantize(rand((n, k)), F[fname])
            except Exception as exc:
                RES["errors"].append(f"gemm {fname} {m}x{n}x{k}: {exc!r}")
                continue
            for impl in gemm_impls(fname):
                time_gemm(fname, impl, pa, pb, (m, n, k), bf)
        save()


@section("packed GEMM kernel variants")
def gemm_variants():
    """gk.GEMM_VARIANTS (the in-register Triton kernels: the session-2 kernel "v1" and
    the split-nibble kernel's decodes/tiles): each checked against the float64 bound on
    NVFP4 x NVFP4-2D and MXFP4, then timed at 8192^3 and 8192x28672x4096."""
    bf = RES["ceilings"].get("bf16", {})
    cs = ((2048, 4096), (1024, 4096)) if not SMOKE else ((32, 128), (16, 128))
    chosen = [v for v in ARGS.variants.split(",") if v]
    shapes = GEMM_SHAPES[:1] + [s for s in GEMM_SHAPES if s[1] == 28672] if not chosen else GEMM_SHAPES
    shapes = shapes if not SMOKE else GEMM_SHAPES[:1]
    ops_ = {}
    for fname in ("nvfp4", "mxfp4") + (("ufp4",) if chosen else ()):
        for (m, n, k) in shapes:
            ops_[fname, (m, n, k)] = (qk.quantize(rand((m, k)), F[fname]), qk.quantize(rand((n, k)), F[fname]))
    for label, ov in gk.GEMM_VARIANTS:
        if chosen and not any(label.startswith(c) for c in chosen):
            continue
        if left() < 45:
            RES["errors"].append(f"gemm variant {label}: skipped (budget)")
            continue
        gk.CONFIG_OVERRIDE.clear()
        gk.CONFIG_OVERRIDE.update(ov)
        try:
            for (fa, fb) in (("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4")):
                a1, b1 = qk.quantize(rand(cs[0]), F[fa]), qk.quantize(rand(cs[1]), F[fb])
                c64, bound = testing.gemm_bound(ref.dequantize_layout(a1), ref.dequantize_layout(b1), torch.bfloat16)
                err = (gk.gemm(a1, b1, impl="triton").double() - c64).abs()
                RES["checks"].append(dict(what=f"gemm variant {label} {fa} x {fb} within bound",
                                          ok=bool((err <= bound).all()), max_err_over_bound=float((err / bound).max())))
            for (fname, shape), (pa, pb) in ops_.items():
                m, n, k = shape
                key = f"{m}x{n}x{k}"
                t = ms(lambda: gk.gemm(pa, pb, impl="triton"))
                tf = 2 * m * n * k / t / 1e9
                ratio = tf / bf[key]["tflops"] if key in bf else None
                RES["gemm"].append(dict(variant=f"packed {fname} triton [{label}]", impl="triton", fmt=fname,
                                        shape=key, ms=t, tflops=tf, vs_cublas_bf16=ratio))
                log(f"{label} {fname} {key}: {tf:.0f} TFLOP/s ({ratio or 0:.0%} of cuBLAS bf16)")
        except Exception as exc:
            RES["errors"].append(f"gemm variant {label}: {exc!r}")
            traceback.print_exc()
        save()
    gk.CONFIG_OVERRIDE.clear()


GEMM_IMPL_LABEL = {"triton": "triton", "dequant": "dequant+cuBLAS", "fp8": "E4M3+cuBLAS FP8"}


def gemm_impls(fname):
    """Every gk.gemm impl that applies to the format (fp8: MXFP4 only)."""
    return ("triton", "dequant", "fp8") if fname.startswith("mxfp4") else ("triton", "dequant")


def time_gemm(fname, impl, pa, pb, shape, bf):
    """Time the whole gk.gemm call: the conversion / dequantization of both operands,
    the GEMM and the epilogue (and, for fp8, the flag read-back)."""
    m, n, k = shape
    key = f"{m}x{n}x{k}"
    variant = f"packed {fname} ({GEMM_IMPL_LABEL[impl]})"
    try:
        before = gk.STATS["fp8_fallbacks"]
        gk.gemm(pa, pb, impl=impl)
        fell_back = gk.STATS["fp8_fallbacks"] != before
        t = ms(lambda: gk.gemm(pa, pb, impl=impl))
    except Exception as exc:
        RES["errors"].append(f"gemm {variant} {key}: {exc!r}")
        return
    tf = 2 * m * n * k / t / 1e9
    ratio = tf / bf[key]["tflops"] if key in bf else None
    RES["gemm"].append(dict(variant=variant, impl=impl, fmt=fname, shape=key, ms=t, tflops=tf,
                            vs_cublas_bf16=ratio, fp8_fallback=fell_back))
    log(f"{variant} {key}: {tf:.0f} TFLOP/s ({ratio or 0:.0%} of cuBLAS bf16)")


def to_fp8_rowref(p):
    """MXFP4-style (UE8M0) packed operand -> (E4M3 tensor, per-row power-of-two scale,
    exact?): each block's 2^e folded into the FP8 values relative to the row's largest
    block exponent minus 6 (so 6 * 2^6 = 384 <= 448); exact while a row spans <= 14 binades."""
    vals = ref.decode_codes(ref.unpack_nibbles(p.codes), ref.GRIDS[p.spec.element])
    e = p.scales.to(torch.int32) - 127
    r = e.amax(1, keepdim=True) - 6
    v = vals * ref.pow2((e - r).clamp(-149, 127)).repeat_interleave(p.spec.block, 1)
    v8 = v.to(torch.float8_e4m3fn)
    exact = bool((v8.float() == v).all())
    return v8, ref.pow2(r).float(), exact


@section("exact MXFP4 GEMM on FP8 tensor cores (idea)")
def gemm_fp8_idea():
    bf = RES["ceilings"].get("bf16", {})
    for (m, n, k) in GEMM_SHAPES:
        if left() < 45:
            break
        pa = qk.quantize(rand((m, k)), F["mxfp4"])
        pb = qk.quantize(rand((n, k)), F["mxfp4"])
        a8, sa, ea = to_fp8_rowref(pa)
        b8, sb, eb = to_fp8_rowref(pb)
        fn = lambda: torch._scaled_mm(a8, b8.t(), sa, sb.t(), out_dtype=torch.bfloat16)  # noqa: E731
        c = fn()
        t = ms(fn)
        key = f"{m}x{n}x{k}"
        entry = dict(shape=key, ms=t, tflops=2 * m * n * k / t / 1e9, exact_operands=ea and eb,
                     vs_cublas_bf16=(2 * m * n * k / t / 1e9) / bf[key]["tflops"] if key in bf else None)
        if m * n * k <= 8192 * 6144 * 4096:
            c64, bound = testing.gemm_bound(ref.dequantize_layout(pa)[:1024], ref.dequantize_layout(pb)[:1024],
                                            torch.bfloat16)
            entry["within_bound"] = bool(((c[:1024, :1024].double() - c64).abs() <= bound).all())
        RES["gemm_fp8_exact"].append(entry)
        log(entry)
