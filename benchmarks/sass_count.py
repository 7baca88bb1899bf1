"""SASS instructions per element of the quantizer kernels, compiled for sm_90a on a
machine without a GPU (Triton's bundled ptxas + nvdisasm): the static instruction count
is the kernel's per-tile work (it has no loops), divided by the elements each thread
owns. An H200 affords about 20 per element at copy bandwidth for a one-copy 4-bit
quantizer (kernels-h200.md), so this ranks variants without device time.

    python benchmarks/sass_count.py            # table
    python benchmarks/sass_count.py --ops      # and the row+col kernels' instructions by opcode
    python benchmarks/sass_count.py --json     # for scripts
"""

from __future__ import annotations

import argparse
import collections
import json
import re

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fourcast.kernels import quantize as qk
from fourcast.kernels import testing
from fourcast.kernels.utils import parse_fmt

PTRS = dict(X="*bf16", CODES="*u8", SCALES="*u8", XHAT="*bf16", ROT="*fp32", AMAX_BITS="*i32", AMAX_IN="*fp32",
            TS_OUT="*fp32", SIGNS="*fp32", HMAT="*fp32")
SCALARS = dict(M="i32", K="i32", s_m="i32", seed="i64", offset="i64", rht_scale="fp32")
RC_PTRS = dict(X="*bf16", CODES_R="*u8", SCALES_R="*u8", XHAT_R="*bf16", CODES_C="*u8", SCALES_C="*u8",
               XHAT_C="*bf16", AMAX_BITS="*i32", AMAX_IN_R="*fp32", AMAX_IN_C="*fp32", TS_OUT="*fp32", SIGNS_R="*fp32", SIGNS_C="*fp32")
RC_SCALARS = dict(R="i32", C="i32", seed="i64", offset_r="i64", offset_c="i64", scale_r="fp32", scale_c="fp32")


# What the launcher's specialisation gives real launches: 16-byte aligned pointers and
# sizes/row strides divisible by 16 (tensors from torch.empty, K a multiple of 64).
ALIGNED = ("X", "CODES", "SCALES", "XHAT", "CODES_R", "SCALES_R", "XHAT_R", "CODES_C", "SCALES_C", "XHAT_C",
           "M", "K", "s_m", "R", "C")


def _sass(fn, signature: dict, constexprs: dict, warps: int) -> str:
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in ALIGNED if a in fn.arg_names}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    return testing.cuda_tool(k, "nvdisasm", "-c")


INSTR = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+\S")


def _count(sass: str) -> int:
    return sum(1 for line in sass.splitlines() if INSTR.match(line))


def _opcodes(sass: str, elems: float) -> dict:
    """Instructions per element by opcode (predicates and modifiers dropped), most first:
    where an issue-bound kernel's instructions go."""
    ops = collections.Counter(m.group(1) for line in sass.splitlines()
                              if (m := re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)))
    return {op: round(n / elems, 2) for op, n in ops.most_common()}


def one_layout(fmt: str, rounding: str, rht: int, write_codes=True, write_xhat=False, fast=None) -> dict:
    spec = parse_fmt(_fmt(fmt))
    bm, bk, warps = qk.config(spec, rht, -1)
    c = qk._constexprs(spec, rounding)
    c.update(PASS=1, FUSE_AMAX=False, WRITE_CODES=write_codes, WRITE_XHAT=write_xhat, WRITE_ROT=False,
             RHT_N=rht, LOG2N=rht.bit_length() - 1 if rht else 0, RHT_IMPL=0, DOT_BF16=False, RNE_BF16=False,
             RHT_NORM=qk.rht_norm(rht), BM=bm, BK=bk, s_k=1, UNSCALED=False, SEED_PTR=False)
    if fast is not None:
        c["FAST"] = fast
    sig = dict(PTRS, **SCALARS, **{k: "constexpr" for k in c})
    n = _count(_sass(qk._quantize_kernel, sig, c, warps))
    return dict(kernel="quantize", fmt=fmt, rounding=rounding, rht=rht, xhat=write_xhat, instr=n,
                per_elem=n / (bm * bk / (32 * warps)))


def rowcol(fmt: str, rounding: str, write_codes=True, write_xhat=False) -> dict:
    spec = parse_fmt(_fmt(fmt))
    br, bc, warps = qk.rowcol_config(0, 0)
    c = qk._constexprs(spec, rounding)
    mode = c.pop("MODE")
    c.update(MODE_R=mode, MODE_C=mode, PASS=1, FUSE_AMAX=False, WRITE_CODES=write_codes, WRITE_XHAT=write_xhat,
             RN_R=0, LOG2N_R=0, RN_C=0, LOG2N_C=0, RNE_BF16=False, NORM_R=1.0, NORM_C=1.0, BR=br, BC=bc, UNSCALED=False,
             SEED_PTR=False)
    sig = dict(RC_PTRS, **RC_SCALARS, **{k: "constexpr" for k in c})
    n = _count(_sass(qk._rowcol_kernel, sig, c, warps))
    return dict(kernel="rowcol", fmt=fmt, rounding=rounding, rht=0, xhat=write_xhat, instr=n,
                per_elem=n / (br * bc / (32 * warps)))


def _fmt(name: str) -> dict:
    """"element/scale/block/rule" -> a TensorFormat dict."""
    element, scale, block, rule = name.split("/")
    return dict(element=element, scale=scale, block=int(block), tile_2d=False, rule=rule)


def strip(fmt: str, rounding: str, codes=(True, True), xhat=(False, False), unscaled=False, rn_c=0,
          rounding_c: str | None = None, rn_r: int = 0) -> dict:
    """The strip row+col kernel at the tile quantize_rowcol gives the call (rounding_c: the
    column copy's, if not the row copy's; rn_r: a row RHT)."""
    from fourcast.kernels import strip as sk

    spec = parse_fmt(_fmt(fmt))
    rounding_c = rounding_c or rounding
    sr = any(r in ("sr", "sr4", "sr16") for r in (rounding, rounding_c))
    br, bc, warps = sk.strip_config(spec.block, rn_r, rn_c, sr, None, False)
    c = qk._constexprs(spec, rounding)
    c.pop("MODE")
    c.update(MODE_R=qk.ROUND_ID[rounding], MODE_C=qk.ROUND_ID[rounding_c], FUSE_AMAX=False, CODES_R_ON=codes[0],
             XHAT_R_ON=xhat[0], CODES_C_ON=codes[1], XHAT_C_ON=xhat[1], UNSCALED=unscaled, RN_R=rn_r,
             LOG2N_R=rn_r.bit_length() - 1 if rn_r else 0, NORM_R=qk.rht_norm(rn_r),
             RN_C=rn_c, LOG2N_C=rn_c.bit_length() - 1 if rn_c else 0, NORM_C=qk.rht_norm(rn_c), RNE_BF16=False,
             BR=br, BC=bc, SEED_PTR=False, ITERS=1,
             GATHER_C=True)  # ITERS 1: the count is one tile's work
    sig = dict(RC_PTRS, R="i32", C="i32", seed="i64", offset_r="i64", offset_c="i64", **{k: "constexpr" for k in c})
    sass = _sass(sk._strip_kernel, sig, c, warps)
    n, elems = _count(sass), br * bc / (32 * warps)
    out = "+".join(n for n, on in (("codes", any(codes)), ("x_hat" + (" unscaled" if unscaled else ""), any(xhat)))
                   if on)
    rot = (f" row RHT{rn_r}" if rn_r else "") + (f" col RHT{rn_c}" if rn_c else "")
    return dict(kernel=f"rowcol strip {br}x{bc}" + rot, fmt=fmt, rounding=_roundings(rounding, rounding_c),
                rht=rn_r or rn_c, out=out, instr=n, per_elem=n / elems, ops=_opcodes(sass, elems))


def _roundings(rounding_r: str, rounding_c: str) -> str:
    return rounding_r if rounding_r == rounding_c else f"{rounding_r}+{rounding_c}"


def gluon(fmt: str, xhat_r: bool = False, xhat_c: bool = False, rounding: str = "rtne", rn_c: int = 0,
          rounding_c: str | None = None, rn_r: int = 0, cfg=None) -> dict:
    """rowcol_gluon's kernel at its default tile for the call (config_for) or at cfg (a
    rowcol_gluon.Config): both copies packed, the X call's decoded row (unscaled) + packed
    column, or the dY call (both decoded, "sr16"); rn_c: a column RHT. Unrolled, the count
    covers all of a program's tiles; looped (Config.loop), the loop body counts ITERS times."""
    from gemm_sass import main_loop

    from fourcast.kernels import rowcol_gluon as rg

    spec = parse_fmt(_fmt(fmt))
    rounding_c = rounding_c or rounding
    cfg = cfg or rg.config_for(1 << 16, rounding, rn_c, spec.block, rounding_c, rn_r, True, (xhat_r, xhat_c))
    bm, bk, warps, iters = cfg[:4]
    k = rg.compile_sm90(qk._constexprs(spec, rounding), cfg, fuse=False, xhat_r=xhat_r, xhat_c=xhat_c,
                        mode=qk.ROUND_ID[rounding], rn_c=rn_c, mode_c=qk.ROUND_ID[rounding_c], rn_r=rn_r)
    sass = testing.cuda_tool(k, "nvdisasm", "-c")
    n, elems = _count(sass), iters * bm * bk / (32 * warps)
    # up to the first EXIT: what runs (the division slow paths sit after it)
    to_exit = next(i for i, line in enumerate(l for l in sass.splitlines() if INSTR.match(l)) if "EXIT" in line)
    looped = ""
    if cfg.loop:  # the loop body runs ITERS times
        body = len(main_loop(sass))
        n += (iters - 1) * body
        to_exit += (iters - 1) * body
        looped = f" looped maxnreg {cfg.maxnreg}" + (f" {cfg.stages} stages" if cfg.stages else "")
    out = "+".join(("x_hat unscaled" if on else "codes") for on in (xhat_r, xhat_c))
    return dict(kernel=f"rowcol gluon {bm}x{bk} {warps}w x{iters}{looped}", fmt=fmt,
                rounding=_roundings(rounding, rounding_c), rht=rn_r or rn_c, out=out, instr=n, per_elem=n / elems,
                to_exit_per_elem=to_exit / elems, ops=_opcodes(sass, elems) if not cfg.loop else {})


def amax(rn_c: int, rn_r: int = 0, mode: int = 0, row_f32: bool = False) -> dict:
    """amax_gluon's pass (a bf16 input) at its tile for the launch: RHT_MODE 0 (f64 RHTs), 1
    (the column RHT in f32, the row RHT in f64 or, row_f32, in f32), 2 (the fallback: what it
    runs when a bound calls for it). The unrolled count covers the program's ITERS tiles."""
    from fourcast.kernels import amax_gluon as ag

    cfg = ag.tile_for(rn_c, mode, rn_r, row_f32)
    k = ag.compile_sm90(rn_c, None, False, mode, rn_r, row_f32)
    sass = testing.cuda_tool(k, "nvdisasm", "-c")
    n, elems = _count(sass), cfg.iters * cfg.bm * cfg.bk / (32 * cfg.warps)
    rht = (f" row RHT{rn_r}" + (" f32" if row_f32 and mode == 1 else "") if rn_r else "") + (
        f" col RHT{rn_c}" if rn_c else "")
    return dict(kernel=f"amax pass {cfg.bm}x{cfg.bk} {cfg.warps}w x{cfg.iters} mode {mode}" + rht, fmt="bf16 x",
                rounding="", rht=rn_r or rn_c, out="amax", instr=n, per_elem=n / elems, ops=_opcodes(sass, elems))


CASES = [
    ("e2m1/e4m3/16/te", "rtne", 0), ("e2m1/ue8m0/32/floor", "rtne", 0), ("e2m1/ue5m3/16/te", "rtne", 0),
    ("e1m2/ue5m3/16/te", "rtne", 0), ("e2m1/e4m3/16/te", "sr", 0), ("e2m1/e4m3/16/te", "rtne", 16),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="only the first two cases and one rowcol")
    ap.add_argument("--ops", action="store_true", help="also each row+col kernel's instructions per element by "
                    "opcode (the ten most frequent)")
    args = ap.parse_args()
    cases = CASES[:2] if args.quick else CASES
    rows = [one_layout(f, r, n) for f, r, n in cases]
    rows.append(rowcol("e2m1/e4m3/16/te", "rtne"))
    if not args.quick:
        rows.append(rowcol("e2m1/e4m3/16/te", "rtne", write_codes=False, write_xhat=True))
    rows.append(strip("e2m1/e4m3/16/te", "rtne"))
    if not args.quick:
        rows.append(strip("e2m1/ue5m3/16/te", "rtne", codes=(False, True), xhat=(True, False), unscaled=True))
        rows.append(strip("e2m1/ue5m3/16/te", "sr", codes=(False, False), xhat=(True, True), unscaled=True))
        rows.append(strip("e2m1/ue5m3/16/te", "sr16", codes=(False, False), xhat=(True, True), unscaled=True))
        rows.append(strip("e2m1/e4m3/16/te", "sr", codes=(False, False), xhat=(True, True), unscaled=True, rn_c=16))
        rows.append(strip("e2m1/ue8m0/32/floor", "rtne"))
        rows.append(gluon("e2m1/e4m3/16/te"))
        rows.append(gluon("e2m1/ue5m3/16/te", xhat_r=True))
        rows.append(gluon("e2m1/ue8m0/32/floor"))
        rows.append(gluon("e2m1/ue5m3/16/te", xhat_r=True, xhat_c=True, rounding="sr16"))
        rows.append(strip("e2m1/e4m3/16/te", "sr16", rn_c=16))
        rows.append(gluon("e2m1/e4m3/16/te", rounding="sr16", rn_c=16))
        rows.append(strip("e2m1/e4m3/16/te", "rtne", codes=(False, True), xhat=(True, False), unscaled=True, rn_c=16))
        rows.append(gluon("e2m1/e4m3/16/te", xhat_r=True, rn_c=16))
        rows.append(strip("e2m1/e4m3/16/te", "sr16", codes=(False, False), xhat=(True, True), unscaled=True, rn_c=16))
        rows.append(gluon("e2m1/e4m3/16/te", xhat_r=True, xhat_c=True, rounding="sr16", rn_c=16))
        mx = "e2m1/ue8m0/32/floor"  # MXFP4's X call: a row RHT of 32, the column copy "sr16"
        rows.append(strip(mx, "rtne", codes=(False, True), xhat=(True, False), unscaled=True, rounding_c="sr16",
                          rn_r=32))
        rows.append(gluon(mx, xhat_r=True, rounding="rtne", rounding_c="sr16", rn_r=32))
        rows += [amax(0), amax(16, mode=1), amax(16, mode=0), amax(16, 16, 1), amax(16, 16, 1, True),
                 amax(16, 16, 2, True)]  # the amax pass: TE's, UFP4's (row RHT f64, f32), a fallback
        from fourcast.kernels import rowcol_gluon as rg

        for cfg in (rg.Config(64, 128, 8, 8, 64, True, True), rg.Config(64, 128, 8, 8, 80, True, True),
                    rg.Config(64, 128, 8, 8, 80, True, True, 2)):  # looped
            rows.append(gluon("e2m1/e4m3/16/te", cfg=cfg))
            rows.append(gluon("e2m1/ue5m3/16/te", xhat_r=True, cfg=cfg))
            rows.append(gluon("e2m1/ue5m3/16/te", xhat_r=True, xhat_c=True, rounding="sr16", cfg=cfg))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| kernel | format | rounding | RHT | out | SASS instr | per element | to the first EXIT, per element |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        out = r.get("out") or ("x_hat" if r["xhat"] else "codes")
        to_exit = f"{r['to_exit_per_elem']:.2f}" if "to_exit_per_elem" in r else ""
        print(f"| {r['kernel']} | {r['fmt']} | {r['rounding']} | {r['rht']} | {out} | {r['instr']} |"
              f" {r['per_elem']:.2f} | {to_exit} |")
    if args.ops:
        print("\n| kernel | format | rounding | RHT | out | per element, by opcode |\n|---|---|---|---|---|---|")
        for r in rows:
            if "ops" in r:
                top = ", ".join(f"{op} {v:.2f}" for op, v in list(r["ops"].items())[:10])
                print(f"| {r['kernel']} | {r['fmt']} | {r['rounding']} | {r['rht']} | {r['out']} | {top} |")


if __name__ == "__main__":
    main()
