"""QLinear: the Wgrad decode layout, per-layer profiles, fwd+bwd against nn.Linear (eager and
in CUDA graphs), host enqueue time."""

from __future__ import annotations

import time

import torch

import fourcast as fc
from fourcast.kernels import fake_quant as fk
from fourcast.kernels import launcher
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

from kernel_bench.harness import ARGS, DEV, F, RES, SMOKE, left, log, ms, ms_graphed, rand, save, section


@section("Wgrad decode of the saved packed X")
def decode_layout():
    """ops.decode_unscaled of a column-wise packed copy (QLinear's saved X, decoded for
    Wgrad): at the 125M model's shapes and the 8192-token Llama layer's, the table decode
    (qk.lut_decode_asm, the GEMM's PTX routine; session 10) against the generic one, both
    at the default tile [8, 512] and two others. GB/s counts the codes and scale bytes
    read and the bf16 written; the bits of the two decodes are compared in the same run."""
    from fourcast.kernels.utils import Packed

    shapes = ((32768, 768), (32768, 2304), (8192, 4096)) if not SMOKE else ((64, 64),)
    for name in ("ue5m3", "mxfp4") if not SMOKE else ("ue5m3",):
        for shape in shapes:
            x = rand(shape)
            p = ops.quantize(x, F[name], axis=0)
            r, c = shape
            unit = torch.ones((), device=DEV)
            layout = Packed(p.codes, p.scales, unit, unit, p.fmt, (c, r), -1)
            nbytes = r * c * (0.5 + 2) + p.scales.numel()
            outs = {}
            for lut in (True, False):
                qk.LUT_DECODE = lut
                for v in (None, (16, 512, True), (8, 1024, True)):
                    if v is None:
                        qk.CONFIG_OVERRIDE.pop("dequant", None)
                    else:
                        qk.CONFIG_OVERRIDE["dequant"] = v
                    label = f"{'table' if lut else 'generic'} {v or 'default [8, 512]'}"
                    try:
                        fn = lambda: qk.dequantize(layout, torch.bfloat16, unscaled=True)  # noqa: E731
                        outs.setdefault(lut, fn())
                        t = ms(fn)
                    except Exception as exc:
                        RES["errors"].append(f"decode {name} {label}: {exc!r}")
                        continue
                    row = dict(fmt=name, shape=f"{r}x{c}", variant=label, us=t * 1e3,
                               gbps=nbytes / (t * 1e-3) / 1e9, copy_frac=nbytes / (t * 1e-3) / 1e12 /
                               RES["ceilings"].get("copy_tbps", float("nan")))
                    RES.setdefault("decode_layout", []).append(row)
                    log(row)
            qk.LUT_DECODE = True
            qk.CONFIG_OVERRIDE.pop("dequant", None)
            if len(outs) == 2:
                RES["checks"].append(dict(what=f"table decode == generic decode {name} {r}x{c}",
                                          ok=testing.same_float(outs[True].float(), outs[False].float())))


def bench_recipe(name: str):
    """A preset and "+" suffixes: "sr16" / "sr4" the SR stream x16 / x4; "delayed16" the tensor
    amaxes measured every 16th step and given on the others (no amax pass in the steady state:
    what the layer costs where the amax comes fused from the op that made the tensor)."""
    preset, *mods = name.split("+")
    r = fc.recipe(preset)
    for mod in mods:
        if mod in ("sr16", "sr4"):
            r = r.set("sr_stream", {"sr16": "x16", "sr4": "x4"}[mod])
        elif mod == "delayed16":
            r = r.set("tensor_scale_refresh", 16)
        else:
            raise ValueError(f"bench recipe {name!r}: unknown suffix {mod!r} (sr16, sr4, delayed16)")
    return r


def profile_layer(name="mxfp4", path="fused", shape=(8192, 4096, 4096)):
    """Top CUDA kernels of one QLinear fwd+bwd (torch.profiler), to see where it goes; name
    "bf16": the baseline nn.Linear. Records each kernel in launch order and their sum."""
    from fourcast import nn as fcnn

    m, n, k = shape if not SMOKE else (64, 64, 64)
    if name == "bf16":
        _, _, fn = linear_step(m, n, k)
        fn()
    else:
        x = rand((m, k)).requires_grad_(True)
        dy = rand((m, n))
        layer = fcnn.QLinear(k, n, bias=False, recipe=bench_recipe(name), gemm_path=path, device=DEV,
                             dtype=torch.bfloat16)
        fn = lambda: torch.autograd.grad(layer(x), (x, layer.weight), dy)  # noqa: E731
        fn()  # step 0 measures (and, +delayed16, stores) the tensor amaxes
        fcnn.set_step(layer, 1)  # the steady state
    fn()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
        if not SMOKE:
            torch.cuda.synchronize()
    table_ = prof.key_averages().table(sort_by="cuda_time_total" if not SMOKE else "cpu_time_total", row_limit=12)
    RES["notes"].append(f"profile {name} {path} {shape}:\n{table_}")
    log(table_)
    # Each GPU kernel in launch order with its time: which call is which, beyond the table's sums.
    kernels = [dict(kernel=e.name[:60], us=round(e.time_range.elapsed_us(), 2)) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    row = dict(recipe=name, path=path, shape=list(shape), kernel_us=round(sum(e["us"] for e in kernels), 1),
               kernels=kernels)
    base = [r for r in RES.get("layer_kernels", []) if r["recipe"] == "bf16" and r["shape"] == list(shape)]
    if base and base[-1]["kernel_us"]:
        row["vs_bf16_kernels"] = row["kernel_us"] / base[-1]["kernel_us"]
    RES.setdefault("layer_kernels", []).append(row)


PROFILE_RECIPES = ("ufp4+sr16", "nvfp4+sr16", "ue5m3+sr16", "mxfp4+sr16")


@section("QLinear profiles")
def layer_profiles():
    """Each recipe's profile after the BF16 layer's, at M8192 N4096 K4096 (--profile-all-shapes:
    at every LINEAR shape); the kernels' GPU time summed, and its ratio to the BF16 layer's."""
    names = ARGS.recipes.split(",") if ARGS.recipes else PROFILE_RECIPES
    for shape in LINEAR if ARGS.profile_all_shapes else LINEAR[:1]:
        for name in ("bf16", *names):
            if left() < 30:
                return
            profile_layer(name, shape=shape)
        log({r["recipe"]: round(r.get("vs_bf16_kernels", 1.0), 3) for r in RES["layer_kernels"]
             if r["shape"] == list(shape)})
    save()


LINEAR = [(8192, 4096, 4096), (8192, 6144, 4096), (8192, 28672, 4096), (8192, 4096, 14336)]
if SMOKE:
    LINEAR = [(64, 32, 64)]


@section("QLinear's 2-D tiled weight: decoded in its quantize pass against quantize + decode")
def weight_decoded():
    """NVFP4's weight as QLinear's fused path takes it each step (amax measured, 16 x 16 tiles,
    decoded unscaled to bf16 for Fprop and Dgrad) at each layer's (N, K): ops.quantize_decoded
    (one quantize pass writes the values, session 33) against decode_unscaled(quantize(...))
    (codes out, then a decode launch reads them back), each a CUDA-graph replay, --repeat
    samples in turn; the values must agree bit for bit."""
    f = F["nvfp4-2d"]
    rows = RES.setdefault("weight_decoded", [])
    for sample in range(max(1, ARGS.repeat)):
        for (_, n, k) in LINEAR:
            if left() < 20:
                return
            w = rand((n, k))
            t1, one = ms_graphed(lambda: ops.quantize_decoded(w, f).values)
            t2, two = ms_graphed(lambda: ops.decode_unscaled(ops.quantize(w, f)).values)
            row = dict(shape=f"{n}x{k}", sample=sample, one_pass_ms=t1, two_pass_ms=t2, ratio=t1 / t2,
                       same=bool(torch.equal(one.view(torch.int16), two.view(torch.int16))))
            rows.append(row)
            log(row)
    save()


@section("linear fwd+bwd")
def linear_bench():
    s16 = ref.rht_signs(16, "te").to(DEV)
    nv, nv2d, mx = F["nvfp4"], F["nvfp4-2d"], F["mxfp4"]
    for (m, n, k) in LINEAR:
        if left() < 40:
            break
        x, w, dy = rand((m, k)), rand((n, k)), rand((m, n))

        def bf16():
            torch.mm(x, w.t())
            torch.mm(dy, w)
            torch.mm(dy.t(), x)

        ax, aw, ady = x.abs().amax().float(), w.abs().amax().float(), dy.abs().amax().float()

        def nvfp4(delayed):
            xa, wa, da = (ax, aw, ady) if delayed else (None, None, None)
            xr, xc = fk.fake_quant_rowcol(x, nv, rht_c=(16, s16), tensor_amax=xa, tensor_amax_c=xa)
            wq = fk.fake_quant(w, nv2d, tensor_amax=wa)
            dr, dc = fk.fake_quant_rowcol(dy, nv, rounding="sr", seed=1, rht_c=(16, s16), tensor_amax=da,
                                          tensor_amax_c=da)
            torch.mm(xr, wq.t())
            torch.mm(dr, wq)
            torch.mm(dc.t(), xc)

        def mxfp4():
            xr, xc = fk.fake_quant_rowcol(x, mx)
            wr, wc = fk.fake_quant_rowcol(w, mx)
            dr, dc = fk.fake_quant_rowcol(dy, mx, rounding="sr", seed=1)
            torch.mm(xr, wr.t())
            torch.mm(dr, wc)
            torch.mm(dc.t(), xc)

        t0 = ms(bf16)
        row = dict(shape=f"M{m} N{n} K{k}", bf16_ms=t0)
        for name, fn in (("nvfp4 (TE recipe, fresh amax)", lambda: nvfp4(False)),
                         ("nvfp4 (TE recipe, delayed amax)", lambda: nvfp4(True)), ("mxfp4", mxfp4)):
            fn()
            t = ms(fn)
            row[name] = dict(ms=t, ratio=t / t0)
        RES["linear"].append(row)
        log(row)


LAYER_RECIPES = ("ue5m3", "mxfp4", "nvfp4", "ufp4")
GRAPHED_RECIPES = ("ue5m3", "ue5m3+sr16", "nvfp4+sr16", "mxfp4+sr16", "ufp4+sr16")  # "+sr16": sr_stream x16


def steady_qlinear(recipe: str, x, dy, path: str):
    """fwd+bwd of a fresh QLinear (bf16 weights) in the recipe's steady state: step 0
    measures and stores the periodic tensor amaxes, the returned call runs at step 1."""
    from fourcast import nn as fcnn

    layer = fcnn.QLinear(x.shape[1], dy.shape[1], bias=False, recipe=fc.recipe(recipe), gemm_path=path, device=DEV,
                         dtype=torch.bfloat16)
    layer.step = 0
    torch.autograd.grad(layer(x), (x, layer.weight), dy)
    layer.step = 1
    return lambda: torch.autograd.grad(layer(x), (x, layer.weight), dy)


def linear_step(m: int, n: int, k: int):
    """(x, dy, fwd+bwd of a bf16 nn.Linear(k, n) on x with output gradient dy): the baseline
    of the layer benchmarks."""
    x = rand((m, k)).requires_grad_(True)
    dy = rand((m, n))
    lin = torch.nn.Linear(k, n, bias=False, device=DEV, dtype=torch.bfloat16)
    return x, dy, lambda: torch.autograd.grad(lin(x), (x, lin.weight), dy)


@section("QLinear layer fwd+bwd vs nn.Linear")
def qlinear_bench():
    """The real layer (fourcast.nn.QLinear, bf16 weights, recipe's steady state: step 1,
    so periodic tensor scales are reused) against nn.Linear, both through autograd, at the
    Llama-3-8B shapes: what a training step pays per linear."""
    for (m, n, k) in LINEAR:
        if left() < 60:
            break
        x, dy, base = linear_step(m, n, k)
        base()
        t0 = ms(base, rep=50)
        row = dict(shape=f"M{m} N{n} K{k}", bf16_ms=t0)
        for name in LAYER_RECIPES:
            for path in ("fused", "dequant"):
                if left() < 40:
                    break
                fn = steady_qlinear(name, x, dy, path)
                fn()
                t = ms(fn, rep=50)
                row[f"{name} {path}"] = dict(ms=t, ratio=t / t0)
        RES["qlinear"].append(row)
        log(row)
        save()


def cuda_graphed(fn):
    """fn captured in a CUDA graph (after two warm-up calls on a side stream, as torch asks):
    the replay's launch costs the host one call, so the timing is the GPU's alone."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


@section("QLinear layer fwd+bwd in CUDA graphs vs nn.Linear")
def qlinear_graphed():
    """qlinear_bench with both layers captured in CUDA graphs, as the trainer runs its steps
    (fourcast/train/graphs.py): the layer's seeds in device memory (StepSeeds), no Python
    per launch. The ratio is then GPU work against GPU work. --interleave K: also K rounds of
    the BF16 layer then the recipe's, each timed briefly, and the median of the K ratios: the
    BF16 layer's time moved by up to 27% within one call on an H100 (session 29) while the FP4
    layers' held within 4%, so a ratio to one BF16 timing carries that noise."""
    if SMOKE:
        return  # graphs need CUDA
    from fourcast import nn as fcnn

    for sample, (m, n, k) in [(i, s) for i in range(ARGS.repeat) for s in LINEAR]:
        if left() < 60:
            break
        x, dy, base = linear_step(m, n, k)
        base_graph = cuda_graphed(base)
        t0 = ms(base_graph, rep=50)
        row = dict(shape=f"M{m} N{n} K{k}", bf16_ms=t0, sample=sample)
        t_eager = ms(base, rep=50)
        row["bf16 eager"] = dict(ms=t_eager, ratio=t_eager / t0)
        for name in ARGS.recipes.split(",") if ARGS.recipes else GRAPHED_RECIPES:
            if left() < 40:
                break
            layer = fcnn.QLinear(k, n, bias=False, recipe=bench_recipe(name), gemm_path="fused", device=DEV,
                                 dtype=torch.bfloat16)
            fcnn.StepSeeds(layer, DEV)
            fcnn.set_step(layer, 0)  # measures and stores the periodic tensor amaxes
            step = lambda: torch.autograd.grad(layer(x), (x, layer.weight), dy)  # noqa: E731
            step()
            fcnn.set_step(layer, 1)  # the steady state, captured
            graph = cuda_graphed(step)
            t = ms(graph, rep=50)
            # The captured nn.Linear moves by up to 15% between calls (kernels-h200.md, session 10):
            # each recipe also gets a baseline timed right after it, and the ratio to that one.
            t_next = ms(base_graph, rep=50)
            row[f"{name} fused"] = dict(ms=t, ratio=t / t0, bf16_next_ms=t_next, ratio_next=t / t_next)
            if ARGS.interleave:
                pairs = [(ms(base_graph, rep=20), ms(graph, rep=20)) for _ in range(ARGS.interleave)]
                ratios = sorted(q / b for b, q in pairs)
                row[f"{name} fused"].update(interleaved_ms=pairs, ratio_median=ratios[len(ratios) // 2])
            t = ms(step, rep=50)  # the same layer, launched from Python (against the graphed bf16)
            row[f"{name} fused eager"] = dict(ms=t, ratio=t / t0)
            if ARGS.rowcol_pin:  # the same graphed step with every row+col call on the strip kernel
                qk.CONFIG_OVERRIDE["rowcol"] = "strip"
                try:
                    t = ms(cuda_graphed(step), rep=50)
                finally:
                    qk.CONFIG_OVERRIDE.pop("rowcol", None)
                t_next = ms(base_graph, rep=50)
                row[f"{name} fused, row+col on strip"] = dict(ms=t, ratio=t / t0, bf16_next_ms=t_next,
                                                               ratio_next=t / t_next)
        RES.setdefault("qlinear_graphed", []).append(row)
        log(row)
        save()


@section("QLinear host enqueue time vs GPU time")
def qlinear_host():
    """Is a QLinear fwd+bwd host-bound? Host time to enqueue one (20 back to back, no
    sync, averaged: the queue stays far below its depth) against its GPU time (do_bench).
    Where the enqueue time reaches the GPU time the layer waits on Python, not kernels."""
    sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)
    for (m, n, k) in LINEAR[:2] + [(4096, 1024, 1024), (2048, 1024, 512)] if not SMOKE else [(64, 64, 64)]:
        x = rand((m, k)).requires_grad_(True)
        dy = rand((m, n))
        lin = torch.nn.Linear(k, n, bias=False, device=DEV, dtype=torch.bfloat16)
        layers = {"bf16": lambda: torch.autograd.grad(lin(x), (x, lin.weight), dy)}
        for name in ("ue5m3", "nvfp4"):
            layers[name] = steady_qlinear(name, x, dy, "fused")
        row = dict(shape=f"M{m} N{n} K{k}")

        def enqueue_ms(fn):
            sync()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            t = (time.perf_counter() - t0) / 20 * 1e3
            sync()
            return t

        for name, fn in layers.items():
            fn()
            gpu = ms(fn, rep=50)
            row[name] = dict(gpu_ms=gpu, enqueue_ms=enqueue_ms(fn))
            if name != "bf16":  # the same launches through Triton's own binding (launcher.py off)
                launcher.ENABLED = False
                try:
                    row[name]["enqueue_ms_triton_launch"] = enqueue_ms(fn)
                finally:
                    launcher.ENABLED = True
        RES.setdefault("qlinear_host", []).append(row)
        log(row)
        save()
