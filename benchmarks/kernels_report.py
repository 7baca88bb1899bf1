"""Turn benchmarks/results/kernels-h200.json (written by benchmarks/kernels.py on the GPU)
into the tables of benchmarks/results/kernels-h200.md. Runs anywhere (no torch).

    python benchmarks/kernels_report.py benchmarks/results/kernels-h200.json > tables.md
"""

import json
import sys

TARGETS = dict(quant_copy=0.80, quant_vs_compiled=8.0, gemm_vs_bf16=0.70, linear_ratio=1.2)


def peer_table(rows) -> None:
    """The quantizer target call by call: each row+col NVFP4 call against its own PyTorch peer."""
    if not rows:
        return
    print("\n| row+col NVFP4 call | shape | fourcast us | of copy BW | torch.compile peer us | vs compiled | "
          "eager peer us | vs eager | peer's codes = fourcast's (row / col) |\n|---|---|---|---|---|---|---|---|---|")
    for q in rows:
        a = q["agreement"]
        print(f"| {q['call']} | {q['shape']} | {q['ms'] * 1e3:.1f} | {q['frac_copy']:.0%} | {q['compiled_ms'] * 1e3:.1f} | "
              f"**{q['vs_compiled']:.1f}x** | {q['eager_ms'] * 1e3:.0f} | {q['vs_eager']:.0f}x | "
              f"{a['row']['codes_equal']:.2%} / {a['col']['codes_equal']:.2%} |")


def main(path: str) -> None:
    r = json.load(open(path))
    m = r["meta"]
    print(f"GPU: {m.get('gpu')} ({m.get('sms')} SMs), torch {m.get('torch')}, Triton {m.get('triton')}, "
          f"CUDA {m.get('cuda')}, Python {m.get('python')}, run {m.get('date')}, {m.get('wall_s', 0):.0f} s\n")
    c = r["ceilings"]
    print(f"Copy bandwidth (read + write): **{c.get('copy_tbps', 0):.2f} TB/s**\n")
    print("| GEMM M x N x K | cuBLAS BF16 TFLOP/s | FP8 _scaled_mm TFLOP/s |\n|---|---|---|")
    for k, v in c.get("bf16", {}).items():
        print(f"| {k} | {v['tflops']:.0f} | {c.get('fp8', {}).get(k, {}).get('tflops', 0):.0f} |")
    p = r["peers"]
    print("\nPeers, NVFP4 (TE rule) on bf16 8192x8192, plain PyTorch written as a user would "
          "(benchmarks/peers.py):\n")
    print("| peer | ms |\n|---|---|")
    for k in ("eager_fq_ms", "compiled_fq_ms", "eager_pack_ms", "compiled_pack_ms"):
        if k in p:
            print(f"| {k[:-3].replace('_', ' ')} | {p[k]:.3f} |")
    if "eager_fq_matches_fourcast_frac" in p:
        print(f"\n(the peer's fake-quant equals fourcast's bit for bit on {p['eager_fq_matches_fourcast_frac']:.4%} "
              "of elements)")
    pc, pf = p.get("compiled_pack_ms"), p.get("compiled_fq_ms")
    print("\n| quantizer variant | shape | us | TB/s | of copy BW | vs compiled one-copy peer x copies (estimate; "
          "the row+col calls' own peers: next table) |\n|---|---|---|---|---|---|")
    for q in r["quantizer"]:
        peer = pf if q["variant"].startswith("fake-quant") else pc
        copies = 2 if "row+col" in q["variant"] else 1
        sp = f"{peer * copies / q['ms']:.1f}x" if peer and q["shape"] == "8192x8192" else ""
        tbps = q.get("tbps", q["frac_copy"] * c.get("copy_tbps", 0))  # time_quantizer's rows record the fraction only
        print(f"| {q['variant']} | {q['shape']} | {q['ms'] * 1e3:.1f} | {tbps:.2f} | {q['frac_copy']:.0%} | {sp} |")
    peer_table(r.get("peer_quant", []))
    print("\n| GEMM variant | shape | TFLOP/s | of cuBLAS BF16 |\n|---|---|---|---|")
    for g in r["gemm"]:
        v = g.get("vs_cublas_bf16")
        print(f"| {g['variant']} | {g['shape']} | {g['tflops']:.0f} | {'' if v is None else f'{v:.0%}'} |")
    gemm_impl_pivot(r["gemm"])
    if r.get("gemm_fp8_exact"):
        print("\n| exact MXFP4 GEMM on FP8 tensor cores | TFLOP/s | of cuBLAS BF16 | operands exact | within bound |"
              "\n|---|---|---|---|---|")
        for g in r["gemm_fp8_exact"]:
            print(f"| {g['shape']} | {g['tflops']:.0f} | {(g.get('vs_cublas_bf16') or 0):.0%} | "
                  f"{g['exact_operands']} | {g.get('within_bound', '')} |")
    if r.get("linear"):
        names = [k for k in r["linear"][0] if isinstance(r["linear"][0][k], dict)]
        print("\n| linear fwd+bwd (M=8192) | BF16 ms | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for row in r["linear"]:
            cells = " | ".join(f"{row[n]['ms']:.2f} ms ({row[n]['ratio']:.2f}x)" for n in names if n in row)
            print(f"| {row['shape']} | {row['bf16_ms']:.2f} | {cells} |")
    graphed_table(r.get("graphed", []))
    amax_calls_table(r.get("amax_calls", []))
    rowcol_gluon_table(r.get("rowcol_gluon", []))
    for name in ("gemm_rs_regs", "gemm_rs_persistent"):
        gemm_runs_table(name, r.get(name, []))
    print("\nChecks:", ", ".join(f"{c['what']}: {'ok' if c['ok'] else 'FAILED'}" for c in r["checks"]))
    if r["errors"]:
        print("\nErrors / skipped:\n" + "\n".join(f"- {e}" for e in r["errors"]))


def graphed_table(rows) -> None:
    """The `graphed` section: each call's GPU time (CUDA-graph replay) at each tile, against its
    compiled peer replayed the same way (the >= 8x target without the host)."""
    if not rows:
        return
    print("\n| call (CUDA graph replay) | shape | rowcol_gluon tile | route | GPU us | of copy BW | eager us | "
          "compiled peer us | vs compiled |\n|---|---|---|---|---|---|---|---|---|")
    for g in rows:
        tile = "default" if g.get("tile") is None else "x".join(map(str, g["tile"][:4])) + " " + ",".join(
            map(str, g["tile"][4:]))
        peer = g.get("compiled_ms")
        print(f"| {g['call']} | {g['shape']} | {tile if g['call'] != 'copy' else ''} | {'/'.join(g.get('routes', []))} |"
              f" {g['ms'] * 1e3:.1f} | {g['frac_copy']:.0%} | "
              + (f"{g['eager_ms'] * 1e3:.1f}" if "eager_ms" in g else "") + " | "
              + (f"{peer * 1e3:.1f} | **{g['vs_compiled']:.1f}x**" if peer else " | ") + " |")


def amax_calls_table(rows) -> None:
    """The `amax_calls` section: the calls that measure their amax, by the amax pass's variant
    (GPU us, the pass's share, the ratio to the compiled peer where timed)."""
    if not rows:
        return
    print("\n| call, amax measured (CUDA graph replay) | shape | variant | GPU us | amax pass us | vs compiled |"
          "\n|---|---|---|---|---|---|")
    for g in rows:
        for v, t in g["ms"].items():
            share = g["amax_pass_ms"].get(v)
            ratio = g.get("vs_compiled", {}).get(v)
            print(f"| {g['call']} | {g['shape']} | {v} | {t * 1e3:.1f} | "
                  + (f"{share * 1e3:.1f}" if share is not None else "") + " | "
                  + (f"{ratio:.2f}x" if ratio is not None else "") + " |")


def rowcol_gluon_table(rows) -> None:
    """The `rowcol_gluon` section: each call's median time per tile, against the strip kernel's."""
    if not rows:
        return
    print("\n| rowcol_gluon call | shape | tile | median us | vs strip |\n|---|---|---|---|---|")
    for g in rows:
        print(f"| {g['call']} | {g['shape']} | {g['variant']} | {g['median_ms'] * 1e3:.1f} | {g['vs_strip']:.2f}x |")


def gemm_runs_table(name: str, rows) -> None:
    """A packed-GEMM variant section (time_gemm_run's rows): kernel, shape, sample, of cuBLAS BF16."""
    if not rows:
        return
    print(f"\n| {name} | format | shape | sample | TFLOP/s | of cuBLAS BF16 |\n|---|---|---|---|---|---|")
    for g in rows:
        v = g.get("vs_cublas_bf16")
        print(f"| {g['kernel']} | {g.get('fmt', '')} | {g['shape']} | {g.get('sample', '')} | {g['tflops']:.0f} |"
              f" {'' if v is None else f'{v:.0%}'} |")


def gemm_impl_pivot(rows) -> None:
    """Shapes x (format, impl): fraction of cuBLAS BF16, the whole gemm() call timed
    (rows written by benchmarks/kernel_bench/gemm.py time_gemm, which records fmt and impl)."""
    rows = [g for g in rows if "impl" in g]
    if not rows:
        return
    cols = list(dict.fromkeys((g["fmt"], g["impl"]) for g in rows))
    cell = {(g["shape"], g["fmt"], g["impl"]): g for g in rows}
    print("\n| packed GEMM, of cuBLAS BF16 | " + " | ".join(f"{f} {i}" for f, i in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for shape in dict.fromkeys(g["shape"] for g in rows):
        vals = []
        for f, i in cols:
            g = cell.get((shape, f, i))
            v = g and g.get("vs_cublas_bf16")
            vals.append("" if not v else f"{v:.0%}" + (" (fell back)" if g.get("fp8_fallback") else ""))
        print(f"| {shape} | " + " | ".join(vals) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/kernels-h200.json")
