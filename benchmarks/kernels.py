"""GPU benchmark of fourcast's Triton kernels against the peers, in ONE device call.

Checks correctness first (fake-quant outputs bit-exact to the PyTorch reference on the
same device, GEMM within the FP32-accumulation bound), then times every variant with
triton.testing.do_bench (median, fresh random bf16 inputs) beside: the device's copy
bandwidth, cuBLAS BF16 and FP8 (torch._scaled_mm) GEMMs, and PyTorch eager /
torch.compile NVFP4 fake-quant and quantize+pack written the way a user would.
Prints a short table last and writes JSON (incrementally) to $OUT/kernels-h200.json.
do_bench zeroes 256 MB before each call, and the timed call writes those lines back: a few
us on a memory-bound 8192^2 call; `timing_methods` times the same calls with the L2 flushed
clean and back to back, `graphed` as CUDA-graph replays (a ~100 us call launched eagerly can
wait for its own Python).

The sections live in benchmarks/kernel_bench/ (one module per area: ceilings, quant, io_floors,
io_tma, strip, against_peers, gemm, gemm_kernels, layer, timing; harness holds the shared state and
helpers).

Usage (on the GPU machine): python benchmarks/kernels.py --budget 240 [--only SECTION,...]
On the CPU, script bugs only: BENCH_SMOKE=1 TRITON_INTERPRET=1 python benchmarks/kernels.py
"""

from __future__ import annotations

import argparse
import time

import torch

from kernel_bench.against_peers import peers, peer_quant
from kernel_bench.ceilings import meta, ceiling_copy, ceiling_gemm, gemm_data
from kernel_bench.gemm import gemm_epilogue, gemm_bench, gemm_variants, gemm_fp8_idea
from kernel_bench.gemm_kernels import (gemm_wgmma_parts, gemm_ws_parts, gemm_ws, gemm_rs, gemm_rs_persistent,
                                      gemm_rs_regs, gemm_ue5m3_f16)
from kernel_bench.harness import ARGS, QSIZES, RES, T0, parse_overrides, save
from kernel_bench.timing import amax_calls, graphed, timing_methods
from kernel_bench.io_floors import io_floors
from kernel_bench.io_tma import io_floor_tma, io_mixed, io_reads, io_writes
from kernel_bench.layer import (decode_layout, layer_profiles, qlinear_graphed, qlinear_bench, qlinear_host, linear_bench,
                                weight_decoded)
from kernel_bench.quant import quant_checks, quant_timing, rowcol_gluon, amax_pass, quant_configs
from kernel_bench.strip import strip_sweep, sr_stream, strip_iters, strip_tall, strip_gather


# Every section, in the order a full run takes them (--only picks a subset, meta always runs).
STEPS = [meta, ceiling_copy, ceiling_gemm, quant_checks, quant_timing, io_floors, rowcol_gluon, amax_pass, strip_sweep,
         sr_stream, strip_iters, strip_tall, strip_gather, gemm_epilogue, decode_layout, layer_profiles, peers,
         peer_quant, gemm_bench, gemm_variants, gemm_wgmma_parts, gemm_ws_parts, gemm_ws, gemm_rs, gemm_ue5m3_f16,
         qlinear_graphed, qlinear_bench, qlinear_host, linear_bench, gemm_fp8_idea, quant_configs, timing_methods, graphed,
         amax_calls, gemm_rs_persistent, gemm_rs_regs, io_floor_tma, io_reads, io_writes,
         io_mixed, gemm_data, weight_decoded]


def table():
    print("\n==== fourcast kernels on", RES["meta"].get("gpu"), "torch", RES["meta"].get("torch"), "triton",
          RES["meta"].get("triton"))
    print(f"copy {RES['ceilings'].get('copy_tbps', 0):.2f} TB/s; peers (8192^2 ms):",
          {k: round(v, 3) for k, v in RES["peers"].items()})
    pc = RES["peers"].get("compiled_pack_ms")
    for q in RES["quantizer"]:
        sp = f" {pc / q['ms']:.1f}x compiled pack" if pc and q["shape"] == "8192x8192" else ""
        print(f"  Q {q['variant']:42s} {q['shape']:>10s} {q['ms'] * 1e3:7.1f} us {q['frac_copy']:5.0%} copy{sp}")
    for q in RES.get("peer_quant", []):
        print(f"  P {q['call']:52s} {q['shape']:>10s} {q['ms'] * 1e3:7.1f} us {q['frac_copy']:5.0%} copy "
              f"{q['vs_compiled']:5.1f}x compiled {q['vs_eager']:5.0f}x eager")
    for g in RES["gemm"]:
        r = g.get("vs_cublas_bf16")
        print(f"  G {g['variant']:42s} {g['shape']:>16s} {g['tflops']:6.0f} TF" + (f" {r:5.0%} bf16" if r else ""))
    for g in RES["gemm_fp8_exact"]:
        print(f"  F mxfp4-on-fp8 {g['shape']:>16s} {g['tflops']:6.0f} TF exact={g['exact_operands']} "
              f"{(g.get('vs_cublas_bf16') or 0):.0%} bf16")
    for key in ("qlinear", "qlinear_graphed"):
        for lrow in RES.get(key, []):
            print(f"  {key}", lrow["shape"], {k: round(v.get("ratio_median", v["ratio"]), 3) for k, v in lrow.items()
                                              if isinstance(v, dict)})
    for lrow in RES["linear"]:
        print("  L", lrow["shape"], {k: round(v["ratio"], 3) for k, v in lrow.items() if isinstance(v, dict)})
    print("checks:", [(c["what"], c["ok"]) for c in RES["checks"]])
    print("errors:", RES["errors"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    ap.add_argument("--only", default="", help="comma-separated section names to run")
    ap.add_argument("--repeat", type=int, default=1, help="qlinear_graphed, strip_gather, rowcol_gluon, amax_pass, amax_calls: samples "
                    "of every shape, "
                    "in turn")
    ap.add_argument("--interleave", type=int, default=0, help="qlinear_graphed: also K rounds of the BF16 layer "
                    "then each recipe's, and the median of the K ratios")
    ap.add_argument("--recipes", default="", help="qlinear_graphed: the recipes, comma-separated (a preset and "
                    "'+' suffixes sr16, sr4, delayed16, e.g. nvfp4+sr16+delayed16); default: "
                    "ue5m3, ue5m3+sr16, nvfp4+sr16, mxfp4+sr16, ufp4+sr16")
    ap.add_argument("--profile-all-shapes", action="store_true", help="layer_profiles: at every layer shape, not "
                    "only M8192 N4096 K4096")
    ap.add_argument("--rowcol-pin", action="store_true", help="qlinear_graphed: also time each recipe with "
                    "quantize_rowcol pinned to the strip kernel (the Gluon route's effect)")
    ap.add_argument("--variants", default="", help="gemm_variants: comma-separated label prefixes to run (then "
                    "at every GEMM shape and on ufp4 too); default: all, at 8192^3 and 8192x28672x4096; "
                    "rowcol_gluon, io_floor_tma, graphed: the calls whose names start so")
    ap.add_argument("--shapes", default="", help="the quantizer sections' shapes, RxC,... (e.g. the 125M model's "
                    "32768x768,32768x2304); default: the issue's 8192x8192,16384x4096")
    ap.add_argument("--default-tiles", action="store_true", help="graphed: each call at its default tile only")
    ap.add_argument("--tiles", default="", help="graphed: each call at its default tile and these rowcol_gluon "
                    "Configs, `;` between them (e.g. '128,128,16,1;128,128,16,1,80')")
    ap.add_argument("--quant-override", default="", help="quantize.CONFIG_OVERRIDE entries for the whole run, "
                    "KEY=VALUE,... (VALUE a Python literal), e.g. rowcol=strip; recorded in meta")
    ap.add_argument("--list", action="store_true", help="print the section names, one a line, and exit")
    vars(ARGS).update(vars(ap.parse_args()))
    try:
        overrides = parse_overrides(ARGS.quant_override)
    except ValueError as e:
        ap.error(f"--quant-override: {e}")
    if ARGS.list:
        print("\n".join(s.__name__ for s in STEPS))
        return
    if ARGS.shapes:
        shapes = [s.split("x") for s in ARGS.shapes.split(",")]
        if not all(len(s) == 2 and all(v.isdigit() and int(v) > 0 for v in s) for s in shapes):
            ap.error(f"--shapes: {ARGS.shapes!r} is not a list of RxC shapes such as 32768x768,32768x2304")
        QSIZES[:] = [(int(r), int(c)) for r, c in shapes]
    if ARGS.recipes:
        from kernel_bench.layer import bench_recipe
        for name in ARGS.recipes.split(","):
            try:
                bench_recipe(name)
            except Exception as e:  # a misspelt recipe fails here, not minutes into the run
                ap.error(f"--recipes: {e}")
    torch.manual_seed(0)
    only = [o for o in ARGS.only.split(",") if o]
    unknown = sorted(set(only) - {s.__name__ for s in STEPS})
    if unknown:  # a misspelt section would otherwise run nothing, silently
        ap.error(f"--only: no section {', '.join(unknown)}; the sections: {', '.join(s.__name__ for s in STEPS)}")
    from fourcast.kernels import quantize as qk
    qk.CONFIG_OVERRIDE.update(overrides)
    for s in STEPS:
        if not only or s.__name__ in only or s is meta:
            s()
            if s is meta and overrides:
                RES["meta"]["quant_override"] = {k: repr(v) for k, v in overrides.items()}
    RES["meta"]["wall_s"] = time.time() - T0
    save()
    table()


if __name__ == "__main__":
    main()
