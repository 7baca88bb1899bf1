"""Offline cost of the packed GEMM kernels (kernels/gemm.py, impl="triton"), compiled for
sm_90a on a machine without a GPU (Triton's bundled ptxas + nvdisasm, as
benchmarks/sass_count.py does): per variant (kernel, decode, format, tile config) the
SASS instructions of one K-step of the main loop per thread, split by pipe, registers and
local-memory spills, whether tl.dot became wgmma, whether the code bytes are pipelined
(cp.async, LDGSTS) and the scale bytes fetched a step ahead, and cycle estimates per
K-step per SM:

  mma     BM*BN*BK / FMA_CLK (H100/H200 dense bf16/f16: 989 TFLOP/s = 132 SMs x 1.83 GHz
          x 2048 FMA per cycle; --fma-clk 1024 gives the rougher figure)
  issue   loop instructions x warps / 4 (four schedulers, one instruction each a cycle)
  alu     integer-pipe instructions x warps / 2 (LOP3/SHF/PRMT/IADD3/...: 16 lanes per
          scheduler); conversions (F2FP, I2F, ...) are counted apart: Hopper runs them at
          a quarter of that rate, so cvt4 = conversions x warps x 2
  ctas    CTAs per SM that the registers and shared memory allow; with 2+ one CTA's
          dequantization can run under another's wgmma, with 1 they add up
  est%    mma / max(mma, issue, alu + cvt4) with 2+ CTAs, mma / (mma + issue) with one:
          the fraction of MMA peak the loop's issue allows, not a timing

    python benchmarks/gemm_sass.py            # table: kernels/gemm.py GEMM_VARIANTS on NVFP4
    python benchmarks/gemm_sass.py --all      # every format, and the configs that were tried
    python benchmarks/gemm_sass.py --json
    python benchmarks/gemm_sass.py --rs-placement   # where _rs_kernel's A decode lands (below)

--rs-placement: gemm_wgmma._rs_kernel (persistent, code words two steps ahead) at the
decode-register splits gemm_kernels.RS_REG_CFGS times: how many of a step's 34 e4m3
conversions (F2FP) and 32 scale products (HMUL2) of A's next-step decode ptxas leaves between
the step's last HGMMA and its WARPGROUP.DEPBAR (under the wgmmas; the rest follow the wait),
the registers the MMA warps get (setmaxnreg) and spills.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fourcast.kernels import gemm as gk
from fourcast.kernels import testing
from fourcast.kernels.utils import Packed, parse_fmt

PTRS = dict(A_CODES="*u8", A_SCALES="*u8", A_TS="*fp32", B_CODES="*u8", B_SCALES="*u8", B_TS="*fp32", C="*bf16")
SCALARS = dict(M="i32", N="i32", K="i32")
# What real launches get from the launcher's specialisation: 16-byte aligned tensors,
# M, N, K multiples of 16.
ALIGNED = ("A_CODES", "A_SCALES", "B_CODES", "B_SCALES", "C", "M", "N", "K")
TOOLS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")

PIPES = {
    "alu": ("LOP3", "LOP", "SHF", "PRMT", "IADD3", "ISETP", "SEL", "LEA", "IABS", "IMNMX", "SGXT", "BMSK", "PLOP3",
            "P2R", "R2P", "MOV", "VIADD", "FSEL", "FSETP", "FMNMX", "HSETP2", "BFE", "BFI", "POPC", "FLO", "BREV"),
    "fma": ("IMAD", "HMUL2", "HFMA2", "HADD2", "FMUL", "FFMA", "FADD", "IDP", "IMUL"),
    "cvt": ("F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP", "FRND"),
    "mem": ("LDS", "STS", "LDSM", "LDG", "LDGSTS", "STG", "LDL", "STL", "LDC", "ATOM", "RED"),
    "mma": ("HGMMA", "WARPGROUP", "HMMA"),
}

FORMAT_PAIRS = [("nvfp4", "nvfp4"), ("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4"), ("ufp4", "ufp4")]
# Tile configs tried for the split kernel beyond gk.GEMM_VARIANTS (--all; kernels/gemm.py
# gemm_config says why they were not kept).
TRIED = [(128, 128, 128, 8, 8, 3), (256, 128, 64, 8, 8, 3), (64, 128, 64, 8, 4, 3), (128, 64, 64, 8, 4, 3)]


def cases(all_: bool):
    """(label, format A, format B, kernel, decode, config): every variant of
    gk.GEMM_VARIANTS on NVFP4, the default and the old one on the other formats."""
    out = []
    for label, ov in gk.GEMM_VARIANTS + [("split generic 128x128x64 w8 s3", dict(kernel="split", decode="generic"))]:
        cfg = ov.get("cfg") or gk.gemm_config(8192, 8192, 8192, 16, ov["kernel"])
        for fa, fb in FORMAT_PAIRS if all_ or "default" in label or "old" in label else FORMAT_PAIRS[:1]:
            out.append((label, fa, fb, ov["kernel"], ov.get("decode"), cfg))
    if all_:
        out += [(f"split lut {'x'.join(map(str, c[:3]))} w{c[4]} s{c[5]}", "nvfp4", "nvfp4", "split", "lut", c)
                for c in TRIED]
    return out


def _spec_packed(fmt: str) -> Packed:
    """A stand-in Packed with only the spec (all _fmt_consts reads)."""
    spec = parse_fmt(testing.FORMATS[fmt])
    return type("P", (), {"spec": spec})()


def compile_variant(fa: str, fb: str, kernel: str, decode: str | None, cfg):
    bm, bn, bk, group, warps, stages = cfg
    a, b = _spec_packed(fa), _spec_packed(fb)
    consts = dict(**gk._fmt_consts("A_", a), **gk._fmt_consts("B_", b), RNE_BF16=False, BM=bm, BN=bn, BK=bk,
                  GROUP_M=group)
    fn = gk._gemm_kernel
    options = dict(num_warps=warps, num_stages=stages)
    if kernel == "split":  # as _gemm_triton launches it
        consts.update(gk.split_plan(a.spec, b.spec, decode))
        fn = gk._split_kernel
        options["maxnreg"] = gk.split_maxnreg(bm, bn, warps)
    sig = dict(PTRS, **SCALARS, **{k: "constexpr" for k in consts})
    attrs = {(fn.arg_names.index(x),): [["tt.divisibility", 16]] for x in ALIGNED}
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _tool(name: str, cubin: bytes, *args) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([os.path.join(TOOLS, name), *args, f.name], capture_output=True, text=True,
                              check=True).stdout


INS = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def main_loop(sass: str) -> list[str]:
    """Opcodes of the main loop: the longest span from a label to a backward branch to it."""
    labels, ops, best = {}, [], None
    for line in sass.splitlines():
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ops)
            continue
        m = INS.match(line)
        if not m:
            continue
        ops.append(m.group(2))
        b = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if b and b.group(1) in labels and labels[b.group(1)] < len(ops) - 1:
            span = (labels[b.group(1)], len(ops))
            if best is None or span[1] - span[0] > best[1] - best[0]:
                best = span
    return ops[best[0]:best[1]] if best else []


def pipe_of(op: str) -> str:
    if op.startswith("U"):
        return "uniform"
    return next((p for p, names in PIPES.items() if op in names), "other")


def analyse(label: str, fa: str, fb: str, kernel: str, decode, cfg, fma_clk: int) -> dict:
    bm, bn, bk, group, warps, stages = cfg
    k = compile_variant(fa, fb, kernel, decode, cfg)
    cubin = k.asm["cubin"]
    sass = _tool("nvdisasm", cubin, "-c")
    res = _tool("cuobjdump", cubin, "-res-usage")
    regs = int(re.search(r"REG:(\d+)", res).group(1))
    local = int(re.search(r"LOCAL:(\d+)", res).group(1))
    loop = main_loop(sass)
    ops = collections.Counter(loop)
    pipes = collections.Counter()
    for op, n in ops.items():
        pipes[pipe_of(op)] += n
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    smem = k.metadata.shared
    elems = (bm + bn) * bk / (32 * warps)  # decoded elements per thread per K-step
    regs_alloc = -(-regs // 8) * 8
    ctas = min(65536 // (regs_alloc * 32 * warps), (232448 // smem) if smem else 32, 64 // warps, 32)
    mma = bm * bn * bk / fma_clk
    issue = len(loop) * warps / 4
    alu = pipes["alu"] * warps / 2
    cvt4 = pipes["cvt"] * warps * 2
    if ctas >= 2:
        est = mma / max(mma, issue, alu + cvt4)
    else:
        est = mma / (mma + max(issue, alu + cvt4))
    return dict(
        variant=label, a=fa, b=fb, kernel=kernel, decode=decode or "-", cfg="x".join(map(str, cfg[:3])) +
        f" g{group} w{warps} s{stages}", triton=triton.__version__, regs=regs, spill_bytes=local,
        stl_ldl=ops["STL"] + ops["LDL"], wgmma="wgmma.mma_async" in ptx, mma_sync="mma.sync" in ptx,
        cp_async=ttgir.count("ttg.async_copy_global_to_local"), ldgsts_loop=ops["LDGSTS"], ldg_loop=ops["LDG"],
        cvt_layout=ttgir.count("ttg.convert_layout"), smem=smem, ctas_per_sm=ctas, loop=len(loop),
        per_elem=len(loop) / elems, pipes=dict(pipes), f2fp=ops["F2FP"], hgmma=ops["HGMMA"], mma_cyc=mma,
        issue_cyc=issue, alu_cyc=alu, cvt4_cyc=cvt4, est_pct=100 * est)


RS_DECODE_REGS = (96, 80, 72)  # gemm_kernels.RS_REG_CFGS's decode registers


def rs_placement(fmt: str = "nvfp4") -> list[dict]:
    """_rs_kernel's A decode against its wgmmas at each decode-register split (module doc)."""
    from fourcast.kernels import gemm_wgmma as gw

    a = parse_fmt(testing.FORMATS[fmt])
    rows = []
    for regs in RS_DECODE_REGS:
        cfg = gw.RS_CONFIG[:6] + (regs,) + gw.RS_CONFIG[7:]
        k = gw.compile_rs_sm90(a, a, gk.split_plan(a, a), cfg, ahead=2, persistent=True)
        sass = _tool("nvdisasm", k.asm["cubin"], "-c")
        res = _tool("cuobjdump", k.asm["cubin"], "-res-usage")
        ops = [line.split("*/", 1)[1].split() for line in sass.splitlines() if INS.match(line)]
        ops = [o[1] if o[0].startswith("@") else o[0] for o in ops]  # the opcode, predicate dropped
        last = max(i for i, o in enumerate(ops) if o.startswith("HGMMA"))
        wait = next(i for i in range(last, len(ops)) if ops[i].startswith("WARPGROUP.DEPBAR"))
        under = ops[last:wait]
        mma_regs = [int(v, 16) for v in re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", sass)]
        rows.append(dict(fmt=fmt, decode_regs=regs, mma_regs=max(mma_regs) if mma_regs else None,
                         f2fp_under=sum(o.startswith("F2FP") for o in under),
                         hmul2_under=sum(o.startswith("HMUL2") for o in under),
                         spill_bytes=sum(int(re.search(m + r":(\d+)", res).group(1)) for m in ("LOCAL", "STACK"))))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--all", action="store_true", help="every format pair, and the tile configs that were tried")
    ap.add_argument("--fma-clk", type=int, default=2048, help="MMA FMA per SM per cycle (default 2048)")
    ap.add_argument("--rs-placement", action="store_true", help="where _rs_kernel's A decode lands (module doc)")
    args = ap.parse_args()
    if args.rs_placement:
        _emit(rs_placement(), args.json,
              f"Triton {triton.__version__}, sm_90a: _rs_kernel persistent, ahead 2; A's next-step decode a K-step\n"
              "| decode regs | MMA warps' regs | F2FP under the wgmmas (of 34) | HMUL2 (of 32) | spill B |\n"
              "|---|---|---|---|---|", _placement_line)
        return
    rows = []
    for c in cases(args.all):
        try:
            rows.append(analyse(*c, args.fma_clk))
        except Exception as exc:  # a config that does not compile is a result too
            rows.append(dict(variant=c[0], a=c[1], b=c[2], cfg="x".join(map(str, c[5][:3])), error=repr(exc)[:200]))
    _emit(rows, args.json,
          f"Triton {triton.__version__}, sm_90a, MMA {args.fma_clk} FMA/SM/cycle; per thread per K-step\n"
          "| variant | A x B | BMxBNxBK g w s | regs | spill B / STL+LDL | wgmma | cp.async | LDG in loop | CTAs/SM | loop instr |"
          " per elem | alu | fma | cvt | mem | mma cyc | issue cyc | alu+cvt4 cyc | est % MMA |\n" + "|" + "---|" * 20,
          _analysis_line)


def _emit(rows, as_json: bool, head: str, line) -> None:
    """rows as JSON, or `head` and a table line (`line`) a row."""
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    print(head)
    for r in rows:
        print(line(r))


def _placement_line(r) -> str:
    return (f"| {r['decode_regs']} | {r['mma_regs']} | {r['f2fp_under']} | {r['hmul2_under']} |"
            f" {r['spill_bytes']} |")


def _analysis_line(r) -> str:
    if "error" in r:
        return f"| {r['variant']} | {r['a']} x {r['b']} | {r['cfg']} | error: {r['error']} |"
    p = r["pipes"]
    return (f"| {r['variant']} | {r['a']} x {r['b']} | {r['cfg']} | {r['regs']} | {r['spill_bytes']} / {r['stl_ldl']} |"
            f" {'yes' if r['wgmma'] else 'no'} | {r['cp_async']} | {r['ldg_loop']} | {r['ctas_per_sm']} |"
            f" {r['loop']} | {r['per_elem']:.2f} | {p.get('alu', 0)} | {p.get('fma', 0)} | {p.get('cvt', 0)} |"
            f" {p.get('mem', 0)} | {r['mma_cyc']:.0f} | {r['issue_cyc']:.0f} | {r['alu_cyc'] + r['cvt4_cyc']:.0f} |"
            f" {r['est_pct']:.0f} |")


if __name__ == "__main__":
    main()
