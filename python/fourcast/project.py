"""Throughput projection: a training run measured on the H200 (its profile.json, see
fourcast/train/profile.py) becomes a forecast for other GPUs through the hardware model.

Every measured op is re-costed on the target by `fourcast.hw.op_times`:

- gemm: the same shape with the same operand formats; on the target the model picks the
  native MMA kind (or an emulated path, and says so). High-precision layers' backward
  region ("dgrad+wgrad") is split into its two GEMMs.
- quantize: the same pass (tensor size, output formats, RHT, SR, amax measured or given).
- dequantize: dropped. It exists only because Hopper has no FP4 MMA; a native GEMM
  consumes the packed operands (the GEMM's own cost says when a target must convert).
- attention: the same shapes (forward and backward).
- optimizer: AdamW as a memory pass (fp32 param, grad, two moments).
- other (norms, SwiGLU, RoPE, loss, launch gaps): not modelled op by op; scaled by the
  ratio of HBM bandwidths (it is elementwise work), and reported as such.

The H200 itself is costed the same way, except that its ops are tagged with how the run
actually executed (`as_measured`: fourcast's Triton quantizers, eager torch GEMM calls),
priced by the H200 file's fitted `[emulation]` costs, so the report shows the model's
error per op class against the measurement. Correction (``correct=True``, the default) multiplies a
target's class time by the H200 measured/predicted ratio for the classes whose H200
measurement runs the same kind of kernel a target would (attention: fused SDPA;
optimizer: torch AdamW). GEMMs and quantize passes are not corrected: on the H200 the
GEMMs are emulated (dequantize + BF16 cuBLAS) and the quantizers are fourcast's Triton
emulation kernels (the SR ones instruction-bound, see
benchmarks/results/kernels-h200.md), while a target runs native MMAs and vendor-grade
quantization kernels; their H200 errors say how far the emulation is from an efficient
implementation, not how wrong the target model is.

    >>> from fourcast import project                       # doctest: +SKIP
    >>> rep = project.project("runs/nvfp4", ["b200", "mi355x"], native=["ue5m3"])
    >>> rep.targets[0]["step_time_s"]
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from fourcast import hw as fchw
from fourcast.errors import FourcastError
from fourcast.train.config import legacy_model_dict

MAJOR = ("gemm", "quantize", "attention")
CORRECTED = ("attention", "optimizer")
ADAM_READ_BYTES = 16.0  # fp32 param, grad, exp_avg, exp_avg_sq
ADAM_WRITE_BYTES = 12.0  # param, exp_avg, exp_avg_sq


class ProjectionError(FourcastError, ValueError):
    """A run folder that cannot be projected (no profile), or a bad target."""


def parse_format(label: str) -> dict | None:
    """A profile's short label back into a recipe tensor format.

    >>> parse_format("e2m1/e4m3x16x16")["tile_2d"]
    True
    >>> parse_format("bf16") is None
    True
    """
    if label in ("bf16", "", None):
        return None
    element, _, rest = label.partition("/")
    if rest == "tensor":
        return {"element": element, "scale": "fp32", "block": 0, "tile_2d": False, "rule": "te"}
    scale, *dims = rest.split("x")
    if not dims:
        raise ProjectionError(f"unreadable format label '{label}' in profile")
    return {
        "element": element,
        "scale": scale,
        "block": int(dims[0]),
        "tile_2d": len(dims) == 2,
        "rule": "floor" if scale == "ue8m0" else "te",
    }


def load_profile(run_dir: str | pathlib.Path) -> dict:
    run = pathlib.Path(run_dir)
    path = run / "profile.json"
    if not run.is_dir():
        raise ProjectionError(f"no run folder at {run}")
    if not path.is_file():
        raise ProjectionError(
            f"{run} has no profile.json: profiles are recorded by CUDA runs; "
            "train on a GPU with `fourcast train ... --profile-steps 3`"
        )
    prof = json.loads(path.read_text())
    config = run / "config.json"
    if config.is_file():  # the run's full recipe says which copy got RHT / SR
        prof["recipe_spec"] = json.loads(config.read_text()).get("recipe")
    if prof.get("timer") != "cuda-events":
        raise ProjectionError(
            f"{path} was timed with {prof.get('timer')!r}, not CUDA events: a CPU run cannot be "
            "projected onto GPUs; train on a GPU with --profile-steps"
        )
    return prof


def _model_of(prof: dict) -> dict | None:
    """The profile's ModelConfig dict, fields it predates (fused_proj) as they were then."""
    model = prof.get("model")
    return legacy_model_dict(model) if isinstance(model, dict) else model


def _copy_rounding(op: dict, key: str, recipe: dict | None) -> dict:
    """RHT size and SR (and its stream: "sr4" draws a Philox per four elements, "sr16" per
    sixteen; run 12's profiles mark sr16 ops sr4 too, and sr16 wins) of one
    quantized copy ("gemm.role"): from the run's recipe when the run folder has it (a fused
    op's RHT may apply to one copy only), else the op's flags."""
    if recipe is None:
        sr = bool(op.get("sr", False))
        sr16 = sr and bool(op.get("sr16", False))
        return {"rht": int(op.get("rht", 0) or 0), "sr": sr, "sr4": sr and not sr16 and bool(op.get("sr4", False)),
                "sr16": sr16}
    rht = recipe["rht"]
    gemm = key.partition(".")[0]
    sr = key in recipe["sr"]
    return {"rht": int(rht["size"]) if gemm in rht["gemms"] else 0, "sr": sr,
            "sr4": sr and recipe.get("sr_stream") == "x4", "sr16": sr and recipe.get("sr_stream") == "x16"}


def model_ops(prof: dict) -> list[tuple[str, dict, float]]:
    """(class, hardware-model op, calls per step) for every measured op worth costing."""
    out: list[tuple[str, dict, float]] = []
    for op in prof["ops"]:
        calls = float(op.get("calls_per_step", 1))
        kind = op["kind"]
        if kind == "gemm":
            m, n, k = op["M"], op["N"], op["K"]
            a, b = parse_format(op["a"]), parse_format(op["b"])
            fa = a if a is not None else "bf16"
            fb = b if b is not None else "bf16"
            if op["role"] == "dgrad+wgrad":
                out.append(("gemm", {"op": "gemm", "m": m, "n": k, "k": n, "a": fa, "b": fb}, calls))
                out.append(("gemm", {"op": "gemm", "m": n, "n": k, "k": m, "a": fa, "b": fb}, calls))
            else:
                out.append(("gemm", {"op": "gemm", "m": m, "n": n, "k": k, "a": fa, "b": fb}, calls))
        elif kind == "quantize":
            # One output per quantized copy ("fprop.x+wgrad.x" wrote two); each copy is
            # written once, so none is a model-side extra transposed copy.
            # "decoded" (where the profile says): the emulation wrote that copy as bf16 values,
            # not codes; only the emulation's pricing reads it (ops.rs emulated_quant_s).
            recipe = prof.get("recipe_spec")
            outputs = []
            kinds = str(op.get("outputs", "")).split("+")
            for i, (key, label) in enumerate(zip(op.get("operand", "").split("+"), op["fmt"].split("+"))):
                spec = parse_format(label)
                if spec is None:
                    continue
                decoded = {"decoded": True} if i < len(kinds) and kinds[i] == "decoded" else {}
                outputs.append({"format": spec, **_copy_rounding(op, key, recipe), "transposed_copy": False, **decoded})
            if not outputs:
                continue
            numel = int(op["rows"]) * int(op["cols"])
            # "none": a format without a tensor scale whose call records no amax either
            amax_given = all(a in ("given", "none") for a in str(op.get("amax", "measured")).split("+"))
            q = {"op": "quantize", "numel": numel, "outputs": outputs,
                 "src_bytes": float(op.get("bytes_in", 2 * numel)) / numel}
            if amax_given:
                q["refresh"] = 1000000
            out.append(("quantize", q, calls))
        elif kind == "attention":
            out.append(("attention", {
                "op": "attention", "batch": op["B"], "seq": op["T"], "heads": op["H"],
                "kv_heads": op.get("KV", op["H"]), "head_dim": op["D"], "causal": True,
                "backward": op.get("phase") == "bwd",
            }, calls))
        elif kind == "optimizer":
            p = float(op["params"])
            out.append(("optimizer", {"op": "memory", "read_bytes": ADAM_READ_BYTES * p,
                                      "write_bytes": ADAM_WRITE_BYTES * p, "launches": 1}, calls))
    return out


def model_flops_per_step(ops: list[tuple[str, dict, float]]) -> float:
    """Useful FLOPs of a step: every GEMM (2mnk) and causal attention (QK^T and PV,
    half the square; backward 2.5x forward), for MFU."""
    total = 0.0
    for cls, o, calls in ops:
        if cls == "gemm":
            total += 2.0 * o["m"] * o["n"] * o["k"] * calls
        elif cls == "attention":
            fwd = 2.0 * 2.0 * o["batch"] * o["heads"] * o["seq"] ** 2 * o["head_dim"] * 0.5
            total += (2.5 if o["backward"] else 1.0) * fwd * calls
    return total


def cost(hw: Any, ops: list[tuple[str, dict, float]], native: Iterable[str] = ()) -> dict[str, float]:
    """Seconds per step by class on one GPU."""
    results = fchw.op_times(hw, [o for _, o, _ in ops], native=list(native))
    by: dict[str, float] = {}
    for (cls, o, calls), r in zip(ops, results):
        # A profile times attention's forward and backward as separate ops; the model's
        # backward op prices both, so a measured backward op takes only its bwd part.
        t = r.detail["bwd_s"] if o["op"] == "attention" and o["backward"] else r.time_s
        by[cls] = by.get(cls, 0.0) + t * calls
    return by


def as_measured(prof: dict) -> list[tuple[str, dict, float]]:
    """`model_ops` tagged with how the H200 run actually executed, for the base prediction
    only (targets keep vendor-grade pricing): quantize passes are fourcast's Triton
    emulation quantizers (``"impl": "fourcast-triton"``), and every GEMM is an eager torch
    call (``"impl": "torch-eager"``: a per-call dispatch cost, and the kernel at the clock a
    training step's GEMMs run at; a "dgrad+wgrad" region holds two). A GEMM of an emulation path (fused,
    dequant, fake) ran as a BF16 cuBLAS GEMM on decoded operands whatever its formats, with
    the tensor scales in its epilogue (op "epilogue": "fused": fourcast's cuBLASLt call,
    ``"impl": "torch-cublaslt"``, whose kernels run faster than torch's for the same shape)
    or, in runs before session 7, an FP32 product and a scale/cast pass after it, so it is
    priced as that. The costs are the H200 file's ``[emulation]`` table, fitted by
    benchmarks/calibration/fit_emulation.py. A profile's "quant_rev" (recorded by training
    since session 11, `fourcast.kernels.QUANT_REV`; or set by `project`'s argument) is the
    session whose quantizer kernels ran, passed to every quantize op (the model derives from
    it what those kernels did: rust ops.rs `quant_kernel`); absent, the current kernels."""
    out: list[tuple[str, dict, float]] = []
    rev = {"quant_rev": int(prof["quant_rev"])} if prof.get("quant_rev") is not None else {}
    for op in prof["ops"]:
        for cls, o, calls in model_ops({**prof, "ops": [op]}):
            if cls == "quantize":
                o = {**o, "impl": "fourcast-triton", **rev}
            elif cls == "gemm":
                emulated = op.get("path", "torch") in ("fused", "dequant", "fake")
                if emulated:
                    o = {**o, "a": "bf16", "b": "bf16"}
                lt = emulated and op.get("epilogue") == "fused"  # fourcast's cuBLASLt call
                o = {**o, "impl": "torch-cublaslt" if lt else "torch-eager"}
                out.append((cls, o, calls))
                if emulated and op.get("epilogue", "pass") == "pass":
                    # FP32 product, then the tensor-scale epilogue: ~8 B more per output (runs
                    # before the cuBLASLt route, whose epilogue is inside the GEMM: "fused")
                    mn = float(o["m"]) * float(o["n"])
                    out.append((cls, {"op": "memory", "read_bytes": 4 * mn, "write_bytes": 4 * mn, "ops": 0,
                                      "exps": 0}, calls))
                continue
            out.append((cls, o, calls))
    return out


@dataclass
class Report:
    run: str
    recipe: str
    tokens_per_step: int
    measured: dict  # H200 ms per class + step
    h200_model: dict  # model's H200 ms per class
    h200_error: dict  # (model - measured) / measured per class
    corrected: bool
    targets: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    gpu_idle_fraction: float | None = None  # 1 - GPU busy / step, from the timeline step if recorded
    measured_gpu: dict | None = None  # GPU ms per class of the profile's timeline step (its "gpu_ops")
    h200_model_gpu: dict | None = None  # the model's H200 ms per class for the same ops
    h200_error_gpu: dict | None = None  # (model - GPU time) / GPU time per class
    gpu_step: int | None = None  # the timeline step

    def to_dict(self) -> dict:
        return asdict(self)


HOST_BOUND_IDLE = 0.25  # GPU idle fraction above which a run is reported as host-bound


def _idle(prof: dict, step_ms: float) -> float | None:
    """1 - (GPU busy ms of the traced step) / (the run's unprofiled step ms), when the run
    recorded a timeline step; kernel times are not inflated by the
    profiler's host cost, the traced step's wall time is, hence the unprofiled step."""
    busy = (prof.get("gpu_time") or {}).get("busy_ms")
    return None if busy is None or step_ms <= 0 else max(0.0, 1.0 - float(busy) / step_ms)


def _other_ms(prof: dict) -> tuple[float, bool]:
    """The unmodelled 'other' ms of a profile, and whether it is GPU time: the GPU work
    launched outside every traced op in the timeline step when the run recorded one (no
    host waits, like every class the model prices), else the CUDA-event remainder."""
    outside = (prof.get("gpu_time") or {}).get("outside_regions_ms")
    if prof.get("gpu_ops") and outside is not None:
        return float(outside), True
    return float(prof["classes"].get("other", 0.0)), False


def class_ms(ops: list[dict]) -> dict[str, float]:
    """ms per step by op kind."""
    out: dict[str, float] = {}
    for op in ops:
        out[op["kind"]] = out.get(op["kind"], 0.0) + float(op["ms_per_step"])
    return out


def _errors(pred: dict, measured: dict) -> dict:
    """(model - measured) / measured for every class both have."""
    return {c: (pred[c] - measured[c]) / measured[c] for c in pred if measured.get(c, 0) > 0}


def _bandwidth(hw: fchw.Hardware) -> float:
    return float(hw.data["memory"]["hbm_tbs"]["value"])


def project(run_dir: str | pathlib.Path, targets: Iterable[str], native: Iterable[str] = (),
            *, correct: bool = True, base: str = "h200", other_from: str | pathlib.Path | None = None,
            quant_rev: int | None = None) -> Report:
    """Forecast a measured run on each target (and each target with `native` features).

    `quant_rev`: the session whose quantizer kernels the run ran, for the H200 check of the
    run (`as_measured`); None: the one its profile records, else the current kernels
    (`fourcast.kernels.QUANT_REV`). training-h200 runs up to 14 ran 9
    (one row tile a strip program, float sr16), runs 15-16 ran 10 (up to four tiles, float
    sr16), run 17 on 11 (integer sr16).

    `other_from`: a BF16 run of the same model and batch whose unmodelled 'other' time
    (norms, activations, loss, launch gaps) replaces this run's: an emulated FP4 run's
    'other' also holds the emulation's host overhead, which native hardware would not pay.
    """
    prof = load_profile(run_dir)
    if quant_rev is not None:
        prof["quant_rev"] = quant_rev
    targets = [t.strip() for t in targets if t.strip()]
    valid = fchw.names()
    for t in targets:
        if t not in valid and not pathlib.Path(t).is_file():
            raise ProjectionError(f"unknown target '{t}'; valid: {', '.join(valid)} (or a .toml path)")
    ops = model_ops(prof)
    classes = prof["classes"]
    measured_ms = {c: float(classes.get(c, 0.0)) for c in ("gemm", "quantize", "dequantize", "attention", "optimizer", "other")}
    step_ms = float(prof["step_time_ms"]["unprofiled"] or prof["step_time_ms"]["profiled"])
    measured_ms["step"] = step_ms
    base_hw = fchw.load(base)
    base_pred = {c: s * 1e3 for c, s in cost(base_hw, as_measured(prof)).items()}
    err = _errors(base_pred, measured_ms)
    # The model prices GPU work: where the run measured its ops' GPU time (the timeline
    # step's "gpu_ops"), the model is checked on those ops against it, and corrected by it
    # (CUDA-event spans also hold the time the GPU waited for the host).
    gpu_ms = gpu_pred = None
    if prof.get("gpu_ops"):
        gpu_ms = class_ms(prof["gpu_ops"])
        gpu_pred = {c: s * 1e3 for c, s in cost(base_hw, as_measured({**prof, "ops": prof["gpu_ops"]})).items()}
    ref, ref_pred = (gpu_ms, gpu_pred) if gpu_ms else (measured_ms, base_pred)
    ratio = {c: ref[c] / ref_pred[c] for c in CORRECTED if ref_pred.get(c, 0) > 0 and ref.get(c, 0) > 0}
    base_bw = _bandwidth(base_hw)
    other_src = prof
    if other_from is not None:
        other_src = load_profile(other_from)
        if other_src["tokens_per_step"] != prof["tokens_per_step"] or _model_of(other_src) != _model_of(prof):
            raise ProjectionError(f"--other-from {other_from} is not the same model and batch as {run_dir}")
    other_ms, other_gpu = _other_ms(other_src)
    if gpu_ms is not None:
        gpu_ms["other"] = _other_ms(prof)[0]
    tokens = int(prof["tokens_per_step"])
    model_flops = model_flops_per_step(ops)

    rep = Report(run=str(run_dir), recipe=prof["recipe"], tokens_per_step=tokens, measured=measured_ms,
                 h200_model=base_pred, h200_error=err, corrected=correct, gpu_idle_fraction=_idle(prof, step_ms),
                 measured_gpu=gpu_ms, h200_model_gpu=gpu_pred, h200_error_gpu=_errors(gpu_pred, gpu_ms) if gpu_ms else None,
                 gpu_step=(prof.get("gpu_time") or {}).get("step"))
    if rep.gpu_idle_fraction is not None and rep.gpu_idle_fraction > HOST_BOUND_IDLE:
        rep.notes.append(f"host-bound run: the GPU was idle {rep.gpu_idle_fraction:.0%} of the step (the timeline "
                         "step's GPU busy time against the unprofiled step); its CUDA-event op times include host waits, so "
                         "only the errors against GPU kernel time check the GPU model, and the targets' times "
                         "price the GPU work only")
    rep.notes.append("dequantize (emulation-only on Hopper) is dropped on every target")
    rep.notes.append("'other' (norms, activations, loss" + ("" if other_gpu else ", launch gaps")
                     + ") is scaled by the HBM bandwidth ratio"
                     + ("; GPU time of the work launched outside every traced op" if other_gpu else "")
                     + (f"; taken from the BF16 run {other_from}" if other_from is not None else ""))
    if correct:
        rep.notes.append(f"classes {', '.join(ratio)} corrected by the H200 measured/predicted ratio; "
                         "GEMMs and quantize passes not corrected (emulated on the H200)")
    variants = [[]] + [[n] for n in native if n and n != "none"]
    for t in targets:
        hw = fchw.load(t)
        for nat in variants:
            by = {c: s * 1e3 for c, s in cost(hw, ops, nat).items()}
            if correct:
                by = {c: v * ratio.get(c, 1.0) for c, v in by.items()}
            by["other"] = other_ms * base_bw / _bandwidth(hw)
            total = sum(by.values())
            peak = _bf16_peak_tflops(hw)
            rep.targets.append({
                "hw": t, "native": nat or ["none"], "step_time_s": total / 1e3,
                "tokens_per_s_per_gpu": tokens / (total / 1e3),
                "mfu": (model_flops / (total / 1e3)) / (peak * 1e12) if model_flops and peak else None,
                "speedup_vs_h200": step_ms / total, "breakdown_ms": by,
                "preliminary": bool(hw.preliminary),
            })
    for row in rep.targets:
        if row["native"] != ["none"]:
            plain = next(r for r in rep.targets if r["hw"] == row["hw"] and r["native"] == ["none"])
            row["gain"] = plain["step_time_s"] / row["step_time_s"] - 1
    return rep


def _bf16_peak_tflops(hw: fchw.Hardware) -> float | None:
    peak = hw.kinds.get("bf16")
    return None if peak is None else float(peak)


def write_report(rep: Report, out_dir: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """projection.json, projection.md and projection.png (stacked bars) into out_dir."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "projection.json", "md": out / "projection.md", "png": out / "projection.png"}
    paths["json"].write_text(json.dumps(rep.to_dict(), indent=2) + "\n")
    paths["md"].write_text(markdown(rep))
    plot(rep, paths["png"])
    return paths


def markdown(rep: Report) -> str:
    lines = [f"# Projection of {rep.run} (recipe {rep.recipe}, {rep.tokens_per_step} tokens/step)", ""]
    gpu, gpred, gerr = rep.measured_gpu or {}, rep.h200_model_gpu or {}, rep.h200_error_gpu or {}
    lines += ["## H200: measured vs model (ms per step)", "",
              "CUDA events time each op's region over the sampled steps (host waits included). "
              + (f"GPU time is the kernels, copies and memsets each op launched in the timeline step ({rep.gpu_step}), "
                 "priced by the model for that step's ops: the check of a GPU model." if rep.measured_gpu else
                 "GPU time: not recorded (no timeline step in this run)."), "",
              "| class | events | model | error | GPU time | model | error |", "|---|---|---|---|---|---|---|"]

    def cell(v: float | None, fmt: str) -> str:
        return "" if v is None else format(v, fmt)

    for c in ("gemm", "quantize", "attention", "optimizer", "dequantize", "other", "step"):
        lines.append(f"| {c} | {cell(rep.measured.get(c), '.3f')} | {cell(rep.h200_model.get(c), '.3f')} | "
                     f"{cell(rep.h200_error.get(c), '+.1%')} | {cell(gpu.get(c), '.3f')} | "
                     f"{cell(gpred.get(c), '.3f')} | {cell(gerr.get(c), '+.1%')} |")
    lines += ["", "## Targets", "", "| target | native | step ms | tokens/s/GPU | MFU | vs H200 | gain | preliminary |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rep.targets:
        mfu = "" if r["mfu"] is None else f"{r['mfu']:.1%}"
        gain = f"{r['gain']:+.1%}" if "gain" in r else ""
        lines.append(f"| {r['hw']} | {','.join(r['native'])} | {r['step_time_s'] * 1e3:.2f} | "
                     f"{r['tokens_per_s_per_gpu']:.0f} | {mfu} | {r['speedup_vs_h200']:.2f}x | {gain} | "
                     f"{'yes' if r['preliminary'] else ''} |")
    lines += ["", *[f"- {n}" for n in rep.notes], ""]
    return "\n".join(lines)


def plot(rep: Report, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["h200 (measured)"] + [f"{r['hw']}" + ("" if r["native"] == ["none"] else f"+{','.join(r['native'])}")
                                    for r in rep.targets]
    rows = [{c: rep.measured.get(c, 0.0) for c in ("gemm", "quantize", "dequantize", "attention", "optimizer", "other")}]
    rows += [r["breakdown_ms"] for r in rep.targets]
    classes = ["gemm", "quantize", "dequantize", "attention", "optimizer", "other"]
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(labels)), 4))
    bottom = [0.0] * len(labels)
    for c in classes:
        vals = [row.get(c, 0.0) for row in rows]
        ax.bar(labels, vals, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per step")
    ax.set_title(f"{rep.recipe}: measured H200 step and projections")
    ax.legend(fontsize=7)
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
