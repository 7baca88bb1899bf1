"""The Hopper packed-GEMM kernels of gemm_wgmma (wgmma, ws, rs): each kernel, and its parts
timed alone."""

from __future__ import annotations


import torch

from fourcast.kernels import gemm as gk
from fourcast.kernels import quantize as qk

from kernel_bench.harness import ARGS, DEV, F, GEMM_SHAPES, RES, SMOKE, left, log, ms, rand, save, section


# (decode, (BM, BN, BK, GROUP_M, warps, STAGES), maxnreg) of gemm_wgmma_parts. The decode side
# alone ran latency-bound at two warps per scheduler (ncu, session 11: 38% of issue slots
# busy, 0.56 eligible warps): 256 x 128 tiles on 16 warps give it four, and a quarter less
# decode per MAC.
WGMMA_PARTS_CFGS = (("cvt", (128, 128, 128, 8, 8, 3), None), ("cvt", (128, 128, 64, 8, 8, 3), 128),
                    ("lut", (128, 128, 128, 8, 8, 3), None), ("cvt", (256, 128, 64, 8, 16, 3), 128),
                    ("cvt", (256, 128, 64, 8, 16, 4), 128), ("lut", (256, 128, 64, 8, 16, 3), 128))


@section("gemm_wgmma: its parts timed alone")
def gemm_wgmma_parts():
    """Why is gemm_wgmma.py slower than the split kernel? (kernels-h200.md, session 10: its step
    takes about 3x what its instructions and MMAs need.) The kernel with PARTS 3 (all of it),
    1 (loads, decodes and shared-memory stores, no wgmma) and 2 (the wgmmas on whatever the
    ring holds, no loads or decodes), nvfp4, two tiles. If 1 alone takes most of 3, the
    decode side sets the time; if 2 does, the MMA side (shared-memory operands, barriers);
    if 3 is near 1 + 2, the two do not overlap. Outputs are meaningless for 1 and 2. NVFP4
    takes the CVT decode by default (a conversion per two elements); the LUT decode (no
    conversions) is timed beside it."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for (m, n, k) in (GEMM_SHAPES[0], (8192, 28672, 4096)):
        pa = qk.quantize(rand((m, k)), F["nvfp4"])
        pb = qk.quantize(rand((n, k)), F["nvfp4"])
        c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
        key = f"{m}x{n}x{k}"
        ref_c = gk.gemm(pa, pb, impl="dequant").float()
        for decode, cfg, nreg in WGMMA_PARTS_CFGS:
            plan = gk.split_plan(pa.spec, pb.spec, decode)
            for parts in (3, 1, 2):
                if left() < 30:
                    return
                try:
                    t = ms(lambda: gw.launch(pa, pb, c, m, n, k, plan, cfg, nreg, parts))
                except Exception as exc:
                    RES["errors"].append(f"gemm_wgmma_parts {key} {cfg} {parts}: {exc!r}")
                    continue
                tf = 2 * m * n * k / t / 1e9
                row = dict(shape=key, decode=decode, cfg=list(cfg), maxnreg=nreg, parts=parts, ms=t, tflops=tf,
                           vs_cublas_bf16=tf / bf[key]["tflops"] if key in bf else None)
                if parts == 3:  # the result against the dequant route's (FP32 sums in another order)
                    gw.launch(pa, pb, c, m, n, k, plan, cfg, nreg, parts)
                    row["max_rel_diff"] = float((c.float() - ref_c).abs().max() / ref_c.abs().max())
                RES.setdefault("gemm_wgmma_parts", []).append(row)
                log(row)
        save()


@section("gemm_ws: its parts timed alone")
def gemm_ws_parts():
    """gemm_wgmma_parts for the warp-specialised kernel (gemm's default on Hopper) at its
    default config: PARTS 3 (the kernel), 1 (the decode partitions only: the MMA partition
    passes the slots on) and 2 (the MMA partition only), nvfp4, ue5m3 and mxfp4, two shapes.
    With full overlap the kernel takes the longer part."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for (m, n, k) in (GEMM_SHAPES[0], (8192, 28672, 4096)):
        key = f"{m}x{n}x{k}"
        c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
        for fname in ("nvfp4", "ue5m3", "mxfp4"):
            pa = qk.quantize(rand((m, k)), F[fname])
            pb = qk.quantize(rand((n, k)), F[fname])
            plan = gk.split_plan(pa.spec, pb.spec)
            for parts in (3, 1, 2):
                if left() < 30:
                    return
                t = ms(lambda: gw.launch_ws(pa, pb, c, m, n, k, plan, None, parts))
                tf = 2 * m * n * k / t / 1e9
                row = dict(shape=key, fmt=fname, cfg=list(gw.ws_config(k)), parts=parts, ms=t, tflops=tf,
                           vs_cublas_bf16=tf / bf[key]["tflops"] if key in bf else None)
                RES.setdefault("gemm_ws_parts", []).append(row)
                log(row)
            save()


# (BM, BN, BK, GROUP_M, STAGES, producer warps, producer registers, maxnreg) of gemm_ws beside
# gemm_wgmma's WS_CONFIG and WS_CONFIG_BK64: 8-warp decoders at 80 registers (20 warps launch
# at 96, the MMA warpgroup gets 160): as fast as WS_CONFIG (session 12, call 2).
WS_CFGS = ((128, 128, 128, 8, 3, 8, 80, 96),)


def time_gemm_run(name, label, fn, c, ref_c, shape, bf, **fields) -> None:
    """Time one labelled packed-GEMM run into RES[name]: fn writes c (NaN-poisoned first) or
    returns C; checked against the dequant route's ref_c, % of cuBLAS BF16 where measured."""
    m, n, k = shape
    key = f"{m}x{n}x{k}"
    try:
        c.fill_(float("nan"))
        out = fn()
        got = out if isinstance(out, torch.Tensor) else c
        diff = float((got.float() - ref_c).abs().max() / ref_c.abs().max())
        t = ms(fn)
    except Exception as exc:
        RES["errors"].append(f"{name} {fields} {key} {label}: {exc!r}")
        return
    tf = 2 * m * n * k / t / 1e9
    row = dict(fields, shape=key, kernel=label, ms=t, tflops=tf,
               vs_cublas_bf16=tf / bf[key]["tflops"] if key in bf else None, max_rel_diff=diff)
    RES.setdefault(name, []).append(row)
    log(row)


@section("gemm_ws: the warp-specialised packed GEMM")
def gemm_ws():
    """gemm_wgmma's warp-specialised kernel (_ws_kernel, gemm's default on Hopper: decode
    partitions feed one MMA warpgroup through mbarriers) at its configs against the split
    kernel and _wgmma_kernel, each checked against the dequant route (FP32 sums in another
    order; the GPU tier checks the bound), at every GEMM shape; nvfp4 (CVT and LUT decode),
    ue5m3, mxfp4. WS_WIDE_CONFIG: a 128 x 256 tile on two MMA warpgroups (session 32; slower, session 33)."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fname, decode in (("nvfp4", None), ("nvfp4", "lut"), ("ue5m3", None), ("mxfp4", None)):
        for (m, n, k) in GEMM_SHAPES:
            pa = qk.quantize(rand((m, k)), F[fname])
            pb = qk.quantize(rand((n, k)), F[fname])
            ref_c = gk.gemm(pa, pb, impl="dequant").float()
            plan = gk.split_plan(pa.spec, pb.spec, decode)
            c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)

            def split():
                gk.CONFIG_OVERRIDE["kernel"] = "split"
                try:
                    return gk.gemm(pa, pb, impl="triton")
                finally:
                    gk.CONFIG_OVERRIDE.pop("kernel")

            runs = [("split", split), ("wgmma", lambda: gw.launch(pa, pb, c, m, n, k, plan))]
            runs += [(f"ws {list(cfg)}" + (" (default)" if cfg == gw.ws_config(k) else ""),
                      lambda cfg=cfg: gw.launch_ws(pa, pb, c, m, n, k, plan, cfg))
                     for cfg in (gw.WS_CONFIG, gw.WS_CONFIG_BK64, gw.WS_WIDE_CONFIG, *WS_CFGS)]
            for label, fn in runs:
                if left() < 20 or (label == "split" and decode):
                    continue
                time_gemm_run("gemm_ws", label, fn, c, ref_c, (m, n, k), bf, fmt=fname, decode=decode or gk.DECODE)
            save()


def _operands(fname, m, n, k):
    """Packed A (m x k) and B (n x k) of random bf16 in one format, the dequant route's C (the
    reference), their split_plan and a bf16 C to write."""
    pa = qk.quantize(rand((m, k)), F[fname])
    pb = qk.quantize(rand((n, k)), F[fname])
    return (pa, pb, gk.gemm(pa, pb, impl="dequant").float(), gk.split_plan(pa.spec, pb.spec),
            torch.empty((m, n), dtype=torch.bfloat16, device=DEV))


# _rs_kernel configs (BM, BN, BK, GROUP_M, STAGES, decode warps, decode registers, maxnreg).
RS_CFGS = ((128, 128, 128, 8, 6, 8, 96, 128), (128, 128, 128, 8, 6, 4, 128, 168))  # RS_CONFIG; 4 decode warps
# under a 168-register launch (the MMA warps' two operand sets then fit: session 14)


@section("gemm_rs: A from the MMA warpgroup's registers")
def gemm_rs():
    """gemm_wgmma._rs_kernel (A decoded straight into the wgmma's register operand, B alone
    through the shared-memory ring) at RS_CFGS against _ws_kernel's default, each checked
    against the dequant route, at every GEMM shape, nvfp4, ue5m3, mxfp4 and ufp4; then its
    parts (PARTS 1: B's decoders only, 2: the MMA warpgroup with A's decode) at 8192^3; each
    with both sides loading their code words one or two steps ahead ("ahead 1|2")."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fname in ("nvfp4", "ue5m3", "mxfp4", "ufp4"):
        for (m, n, k) in GEMM_SHAPES:
            pa, pb, ref_c, plan, c = _operands(fname, m, n, k)
            runs = [("ws (default)", lambda: gw.launch_ws(pa, pb, c, m, n, k, plan))]
            runs += [(f"rs {list(cfg)} ahead {a}", lambda cfg=cfg, a=a: gw.launch_rs(pa, pb, c, m, n, k, plan, cfg,
                                                                                   ahead=a))
                     for cfg in RS_CFGS for a in (1, 2)]
            if (m, n, k) == GEMM_SHAPES[0]:
                runs += [(f"rs {list(cfg)} parts {p} ahead {a}", lambda cfg=cfg, p=p, a=a: gw.launch_rs(
                    pa, pb, c, m, n, k, plan, cfg, p, a)) for cfg in RS_CFGS for p in (1, 2) for a in (1, 2)]
            for label, fn in runs:
                if left() < 20:
                    continue
                time_gemm_run("gemm_rs", label, fn, c, ref_c, (m, n, k), bf, fmt=fname)
            save()

@section("gemm_rs_persistent: _rs_kernel one program a multiprocessor")
def gemm_rs_persistent():
    """gemm's NVFP4/UFP4 route (_rs_kernel, code words two steps ahead, a program a tile)
    against the same kernel persistent (a program a multiprocessor taking every 132nd tile:
    B's decoders run into the next tile while the MMA warps store C), in alternation, each
    checked against the dequant route, at every GEMM shape; --repeat samples."""
    _rs_in_turn("gemm_rs_persistent", (("rs ahead 2 (route)", dict(ahead=2, persistent=False)),
                                       ("rs ahead 2 persistent", dict(ahead=2, persistent=True))))


# _rs_kernel's decode partition at fewer registers, so the MMA warps get more (setmaxnreg: 160
# at RS_CONFIG's 96, 176 at 80, 184 at 72): with more, ptxas (Triton 3.6's) leaves part of A's
# next-step decode under the wgmmas, where at 160 all of it waits for them (offline SASS,
# session 24: 0, 10 and 21 of the 34 e4m3 conversions before the wgmma wait; no spills). Timed
# on an H100 (session 24, call 4): level with 96 within two samples' spread.
RS_REG_CFGS = (RS_CFGS[0], (128, 128, 128, 8, 6, 8, 80, 128), (128, 128, 128, 8, 6, 8, 72, 128))


@section("gemm_rs_regs: _rs_kernel's registers split between its partitions")
def gemm_rs_regs():
    """gemm's NVFP4/UFP4 route (_rs_kernel persistent, code words two steps ahead) at
    RS_REG_CFGS, in alternation, each checked against the dequant route, at every GEMM shape;
    --repeat samples."""
    _rs_in_turn("gemm_rs_regs", tuple((f"rs persistent ahead 2, decode registers {cfg[6]}",
                                       dict(cfg=cfg, ahead=2, persistent=True)) for cfg in RS_REG_CFGS))


def _rs_in_turn(name: str, variants) -> None:
    """_rs_kernel (gemm_wgmma.launch_rs) at each (label, launch_rs keywords) of variants, in
    alternation, --repeat samples, NVFP4 and UFP4 at every GEMM shape, into RES[name]."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fname in ("nvfp4", "ufp4"):
        for (m, n, k) in GEMM_SHAPES:
            pa, pb, ref_c, plan, c = _operands(fname, m, n, k)
            for sample in range(ARGS.repeat):
                for label, kw in variants:
                    if left() < 20:
                        return
                    time_gemm_run(name, label, lambda kw=kw: gw.launch_rs(pa, pb, c, m, n, k, plan, **kw), c, ref_c,
                                  (m, n, k), bf, fmt=fname, sample=sample)
            save()


@section("gemm_ue5m3_f16: UE5M3 operands decoded to f16 at an offset")
def gemm_ue5m3_f16():
    """UE5M3 pairs decoded to bf16 (gk.UE5M3_F16 off: the route before session 16, _ws_kernel)
    against f16 at 2^-UE5M3_EXP (the f16 MMA, which lets them take _rs_kernel), each kernel
    on both plans where it applies, checked against the dequant route; NVFP4's route in the
    same call for reference."""
    if SMOKE:
        return  # Gluon: a GPU only
    from fourcast.kernels import gemm_wgmma as gw

    bf = RES["ceilings"].get("bf16", {})
    for fa, fb in (("ue5m3", "ue5m3-2d"), ("ue5m3", "ue5m3"), ("nvfp4", "nvfp4-2d")):
        for (m, n, k) in GEMM_SHAPES:
            pa = qk.quantize(rand((m, k)), F[fa])
            pb = qk.quantize(rand((n, k)), F[fb])
            ref_c = gk.gemm(pa, pb, impl="dequant").float()
            plans = {"f16": gk.split_plan(pa.spec, pb.spec)}
            if fa.startswith("ue5m3"):
                gk.UE5M3_F16 = False
                try:
                    plans["bf16"] = gk.split_plan(pa.spec, pb.spec)
                finally:
                    gk.UE5M3_F16 = True
            c = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            runs = [(f"{d} ws", lambda p=p: gw.launch_ws(pa, pb, c, m, n, k, p)) for d, p in plans.items()]
            runs += [(f"{d} rs ahead {a}", lambda p=p, a=a: gw.launch_rs(pa, pb, c, m, n, k, p, ahead=a))
                     for d, p in plans.items() for a in (1, 2) if p["DOT_F16"]]
            runs += [("route", lambda: gk.gemm(pa, pb, torch.bfloat16, impl="triton"))]
            for label, fn in runs:
                if left() < 20:
                    continue
                time_gemm_run("gemm_ue5m3_f16", label, fn, c, ref_c, (m, n, k), bf, fmt=f"{fa} x {fb}")
            save()
