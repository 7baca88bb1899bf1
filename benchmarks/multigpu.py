"""Multi-GPU evidence for issue 8: collective bandwidth, a calibrated communication term
for the hardware model, and data-parallel training against one GPU.

Three stages (benchmarks/multigpu_run.sh runs them in order on one machine):

  ref     (plain python, one process) the 1-GPU runs of each recipe: batch N*b for
          `--steps` (the same global batch as the N-GPU run: its loss curve is the
          reference) and batch b for `--timing-steps` (the weak-scaling baseline).
  dist    (under torchrun, N processes) 1. all-reduce / reduce-scatter / all-gather
          timed from --min-bytes to --max-bytes (x2 steps), bus bandwidth as nccl-tests
          defines it, to $OUT/comm.json; 2. `fourcast train` of each recipe on N
          processes (DDP, batch b per process) into $OUT/runs/; 3. rank 0: `report`.
  report  (plain python) from $OUT/comm.json and $OUT/runs/: fit the hardware model's
          scale-up term, the error before and after, the what-if step against the
          measured N-GPU step, loss agreement and scaling efficiency; writes
          $OUT/multigpu.json and $OUT/multigpu.md.

The hardware model's data-parallel term (rust/core/src/hw/step.rs) is one all-reduce of
BF16 gradients at a bus bandwidth of links.scaleup_gbs / 2 * efficiency.comm per
direction, with no latency term. The fit sets efficiency.comm (and links.scaleup_gbs
only if the measured bus bandwidth beats the vendor link number) from the all-reduce
sizes >= --fit-min-bytes; the result is an override for
`fc.hw.load(name, set=report["calibration"]["override"])`.

NVLink SHARP / multicast stay off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), set below before torch (and so NCCL) is imported.

CPU functional check (gloo, numbers are not performance):
    torchrun --standalone --nproc_per_node 2 benchmarks/multigpu.py dist --backend gloo \\
        --device cpu --max-bytes 1MiB --model tiny --steps 8 --batch 2 --seq 64 ...
"""

from __future__ import annotations

import os

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NCCL_ENV)  # before anything imports torch or NCCL (forced, not defaults)

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

OPS = ("all_reduce", "reduce_scatter", "all_gather")


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor, algbw = bytes / time."""
    return 2.0 * (ranks - 1) / ranks if op == "all_reduce" else (ranks - 1) / ranks


def parse_bytes(text: str) -> int:
    """'1KiB', '64MiB', '1GiB' or a plain integer."""
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "b": 1}
    low = text.strip().lower()
    for unit, mult in units.items():
        if low.endswith(unit) and low[: -len(unit)].strip().replace(".", "", 1).isdigit():
            return int(float(low[: -len(unit)]) * mult)
    return int(low)


def human(n: float) -> str:
    for unit, mult in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= mult:
            return f"{n / mult:g} {unit}"
    return f"{n:g} B"


# ---------------------------------------------------------------- the hardware model side


def hw_total_params(m) -> float:
    """Parameters the hardware model counts for a dense or MoE `fc.hw.Model` (a mirror of
    ModelSpec::total_params in rust/core/src/hw/model.rs; `check_mirror` keeps it honest)."""
    hd = m.head_dim or m.hidden // m.heads
    attn = m.hidden * (m.heads * hd + 2 * m.kv_heads * hd) + m.heads * hd * m.hidden
    mats = 3 if m.gated else 2
    if m.experts:
        mlp = m.experts * mats * m.hidden * m.expert_ffn + m.hidden * m.experts
    else:
        mlp = mats * m.hidden * m.ffn
    emb = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return float(m.layers * (attn + mlp) + emb)


def model_busbw(hw) -> float:
    """The model's per-direction bus bandwidth in bytes/s (step.rs: link_bps / 2 * comm)."""
    return hw.data["links"]["scaleup_gbs"]["value"] * 1e9 / 2.0 * hw.data["efficiency"]["comm"]["value"]


def model_collective_s(hw, op: str, nbytes: float, ranks: int) -> float:
    """Time the hardware model gives one collective of `nbytes` (the full buffer) over
    `ranks` GPUs: bus_factor * bytes / bus bandwidth, no latency term (as step.rs)."""
    return bus_factor(op, ranks) * nbytes / model_busbw(hw)


def check_mirror(hw, model, recipe, ranks: int) -> dict:
    """The Rust step's comm term with no overlap must equal model_collective_s on 2 bytes
    per parameter: proves this file's mirror formulas are the model's."""
    import fourcast as fc

    rust = fc.hw.step(hw, model, recipe, tokens_per_gpu=model.seq_len, dp=ranks, comm_overlap=0.0).breakdown["comm_exposed"]
    mirror = model_collective_s(hw, "all_reduce", 2.0 * hw_total_params(model), ranks)
    return {"rust_comm_s": rust, "mirror_comm_s": mirror, "agree": math.isclose(rust, mirror, rel_tol=1e-9)}


def fit_busbw(rows: list[dict], ranks: int, min_bytes: int) -> float:
    """Bus bandwidth (bytes/s) minimising the squared log error of bytes-proportional
    times over the sizes >= min_bytes: the geometric mean of their bus bandwidths."""
    sel = [r for r in rows if r["bytes"] >= min_bytes]
    if not sel:
        raise SystemExit(f"no all_reduce size >= {human(min_bytes)} to fit; lower --fit-min-bytes")
    return math.exp(statistics.fmean(math.log(r["busbw_gbs"] * 1e9) for r in sel))


def fit_alpha_beta(rows: list[dict], op: str, ranks: int) -> dict:
    """t = alpha + factor * bytes / busbw by least squares weighted by 1/t (relative
    error), for the record: the model has no alpha."""
    import numpy as np

    t = np.array([r["time_s"] for r in rows])
    x = np.array([bus_factor(op, ranks) * r["bytes"] for r in rows], dtype=float)
    a = np.stack([np.ones_like(x), x], 1) / t[:, None]
    (alpha, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return {"alpha_us": float(alpha) * 1e6, "busbw_gbs": (1.0 / inv_bw) / 1e9 if inv_bw > 0 else None}


def calibrate(comm: dict, hw_name: str, fit_min: int) -> dict:
    """Fit the hardware file's scale-up term to the measured all-reduce and report the
    model's error per size and op before and after."""
    import fourcast as fc

    ranks = comm["meta"]["world"]
    before = fc.hw.load(hw_name)
    measured = fit_busbw(comm["ops"]["all_reduce"], ranks, fit_min)
    link = before.data["links"]["scaleup_gbs"]["value"] * 1e9 / 2.0
    when = comm["meta"]["date"][:10]
    where = f"{comm['meta'].get('gpu') or comm['meta']['device']} x{ranks}, {comm['meta']['backend']}"
    note = f"measured all-reduce bus bandwidth {measured / 1e9:.1f} GB/s ({where}, sizes >= {human(fit_min)}, {when})"
    override: dict = {}
    if measured <= link:
        override["efficiency.comm"] = float(f"{measured / link:.4g}")
    else:  # faster than the vendor link number says: the link number is what is wrong
        override["efficiency.comm"] = 1.0
        override["links.scaleup_gbs"] = float(f"{2.0 * measured / 1e9:.4g}")
        override["links.scaleup_gbs.source"] = note
        override["links.scaleup_gbs.confidence"] = "measured"
    override["efficiency.comm.source"] = note
    override["efficiency.comm.confidence"] = "measured"
    after = fc.hw.load(hw_name, set=override)
    errors, summary = {}, {}
    for op, rows in comm["ops"].items():
        lines = []
        for r in rows:
            b, a = model_collective_s(before, op, r["bytes"], ranks), model_collective_s(after, op, r["bytes"], ranks)
            lines.append({"bytes": r["bytes"], "measured_s": r["time_s"], "model_before_s": b, "model_after_s": a,
                          "err_before": b / r["time_s"] - 1, "err_after": a / r["time_s"] - 1})  # fmt: skip
        errors[op] = lines
        big = [abs(x["err_after"]) for x in lines if x["bytes"] >= fit_min]
        summary[op] = {
            "max_abs_err_after_fit_range": max(big) if big else None,
            "median_abs_err_after_fit_range": statistics.median(big) if big else None,
            "max_abs_err_before_fit_range": max((abs(x["err_before"]) for x in lines if x["bytes"] >= fit_min), default=None),
            "alpha_beta": fit_alpha_beta(rows, op, ranks),
        }
    return {
        "hw": hw_name,
        "ranks": ranks,
        "fit_min_bytes": fit_min,
        "model_busbw_gbs_before": model_busbw(before) / 1e9,
        "model_busbw_gbs_after": model_busbw(after) / 1e9,
        "measured_busbw_gbs": measured / 1e9,
        "override": override,
        "summary": summary,
        "errors": errors,
    }


# ---------------------------------------------------------------- collectives


def sweep(args, device, rank: int, world: int) -> dict:
    """Time each op at each size: warm-up, then enough back-to-back calls for about
    --target-s (the count agreed across ranks), the slowest rank's mean."""
    import torch
    import torch.distributed as dist

    dtype = getattr(torch, args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    sizes, s = [], args.min_bytes
    while s <= args.max_bytes:
        sizes.append(max(world * elem, s // (world * elem) * world * elem))
        s *= 2

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    out = {op: [] for op in OPS}
    for op in OPS:
        for nbytes in sizes:
            numel = nbytes // elem
            if op == "all_reduce":
                buf = torch.ones(numel, dtype=dtype, device=device)
                call = lambda: dist.all_reduce(buf)  # noqa: E731
            elif op == "reduce_scatter":
                src, dst = torch.ones(numel, dtype=dtype, device=device), torch.empty(numel // world, dtype=dtype, device=device)
                call = lambda: dist.reduce_scatter_tensor(dst, src)  # noqa: E731
            else:
                src, dst = torch.ones(numel // world, dtype=dtype, device=device), torch.empty(numel, dtype=dtype, device=device)
                call = lambda: dist.all_gather_into_tensor(dst, src)  # noqa: E731
            for _ in range(args.warmup):
                call()
            sync()
            t0 = time.perf_counter()
            call()
            sync()
            probe = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
            dist.all_reduce(probe, op=dist.ReduceOp.MAX)
            iters = int(min(args.max_iters, max(args.min_iters, args.target_s / max(probe.item(), 1e-7))))
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            sync()
            took = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            t = took.item()
            out[op].append({"bytes": nbytes, "iters": iters, "time_s": t, "algbw_gbs": nbytes / t / 1e9,
                            "busbw_gbs": nbytes / t * bus_factor(op, world) / 1e9})  # fmt: skip
            if rank == 0 and args.verbose:
                print(f"{op:15s} {human(nbytes):>9s} {t * 1e6:10.1f} us  busbw {out[op][-1]['busbw_gbs']:8.2f} GB/s", flush=True)
            del call
            buf = src = dst = None  # noqa: F841
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def comm_meta(args, device, world: int) -> dict:
    import torch

    meta = {"world": world, "backend": args.backend, "device": device.type, "dtype": args.dtype,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "env": {k: os.environ.get(k) for k in NCCL_ENV}}  # fmt: skip
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
        v = torch.cuda.nccl.version()
        meta["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        meta["gpus_visible"] = torch.cuda.device_count()
    return meta


# ---------------------------------------------------------------- training runs


def train_argv(args, recipe: str, batch: int, steps: int, out: pathlib.Path) -> list[str]:
    argv = ["train", "--recipe", recipe, "--model", args.model, "--data", args.data, "--steps", str(steps),
            "--batch", str(batch), "--seq", str(args.seq), "--lr", str(args.lr), "--seed", str(args.seed),
            "--device", args.device, "--tokenizer", args.tokenizer, "--gemm-path", args.gemm_path,
            "--eval-every", "0", "--ckpt-every", "0", "--set", f"train.eval_batches={args.eval_batches}",
            "--no-progress", "--out", str(out)]  # fmt: skip
    if args.val:
        argv += ["--val", args.val]
    return argv


def run_dirs(out: pathlib.Path, recipe: str) -> dict:
    return {"dist": out / "runs" / f"dist-{recipe}", "ref": out / "runs" / f"1gpu-{recipe}-global-batch",
            "one": out / "runs" / f"1gpu-{recipe}-per-gpu-batch"}  # fmt: skip


def _cli(argv: list[str]) -> int:
    from fourcast.cli import main

    return main(argv)


def stage_ref(args) -> int:
    """The 1-GPU runs (no torchrun): same global batch (the loss reference) and the same
    per-GPU batch (the throughput baseline)."""
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        if key in os.environ:
            raise SystemExit(f"`ref` runs one process; {key} is set (run it without torchrun)")
    out = pathlib.Path(args.out)
    failed = 0
    for recipe in args.recipes.split(","):
        dirs = run_dirs(out, recipe)
        for key, batch, steps in (("ref", args.world * args.batch, args.steps), ("one", args.batch, args.timing_steps)):
            if (dirs[key] / "summary.json").is_file():
                print(f"{dirs[key]} exists: kept", flush=True)
                continue
            t0 = time.time()
            code = _cli(train_argv(args, recipe, batch, steps, dirs[key]))
            print(f"ref {recipe} batch {batch}: exit {code} in {time.time() - t0:.0f} s", flush=True)
            failed += code != 0
    return 1 if failed else 0


def stage_dist(args) -> int:
    """Under torchrun: the collective sweep, the N-process training, then the report."""
    import torch
    import torch.distributed as dist

    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("`dist` runs under torchrun (torchrun --standalone --nproc_per_node N benchmarks/multigpu.py dist ...)")
    local = int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "cpu":
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != args.world:
        raise SystemExit(f"--world {args.world} but torchrun started {world} processes")
    out = pathlib.Path(args.out)
    code = 0
    try:
        if not args.skip_comm:
            t0 = time.time()
            comm = {"meta": comm_meta(args, device, world), "ops": sweep(args, device, rank, world)}
            if rank == 0:
                out.mkdir(parents=True, exist_ok=True)
                (out / "comm.json").write_text(json.dumps(comm, indent=1) + "\n")
                print(f"collectives: {time.time() - t0:.0f} s -> {out / 'comm.json'}", flush=True)
        if not args.skip_train:
            for recipe in args.recipes.split(","):
                t0 = time.time()
                rc = _cli(train_argv(args, recipe, args.batch, args.steps, run_dirs(out, recipe)["dist"]))
                flag = torch.tensor([rc], device=device)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                if rank == 0:
                    print(f"dist {recipe}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
                code = max(code, int(flag.item()))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        code = max(code, stage_report(args))
    return code


# ---------------------------------------------------------------- the report


def loss_agreement(a: list[float], b: list[float]) -> dict:
    """Two loss curves of the same model and global batch size whose data order differs.
    Batch noise sigma: std of consecutive differences over each curve's second half / sqrt(2)
    (the slow trend cancels; independent batches add their variances). The final losses
    (mean of the last k steps, as run.final_loss) agree "within data-order noise" when
    their difference is <= 3 standard errors of a difference, 3 * sqrt(2) * sigma / sqrt(k)."""
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    half = n // 2

    def sigma(x):
        d = [x[i + 1] - x[i] for i in range(half, n - 1)]
        return statistics.pstdev(d) / math.sqrt(2) if len(d) > 1 else float("nan")

    s = math.sqrt((sigma(a) ** 2 + sigma(b) ** 2) / 2)
    k = max(1, min(50, n // 10))
    fa, fb = statistics.fmean(a[-k:]), statistics.fmean(b[-k:])
    bound = 3 * math.sqrt(2) * s / math.sqrt(k)
    rms = math.sqrt(statistics.fmean((x - y) ** 2 for x, y in zip(a[half:], b[half:])))
    return {"steps": n, "final_n": fa, "final_1": fb, "final_diff": fa - fb, "k": k, "batch_sigma": s,
            "bound_3se": bound, "within_noise": abs(fa - fb) <= bound,
            "rms_step_diff_second_half": rms, "rms_over_sqrt2_sigma": rms / (math.sqrt(2) * s) if s > 0 else None}  # fmt: skip


def train_model_for_hw(cfg: dict) -> dict:
    """The run's transformer as the hardware model's Model fields."""
    from fourcast.train.config import ModelConfig

    m = ModelConfig(**cfg["model"])
    return {"name": cfg["model_name"], "layers": m.n_layers, "hidden": m.d_model, "heads": m.n_heads,
            "kv_heads": m.n_heads, "head_dim": 0, "ffn": m.ffn_hidden, "gated": True, "vocab": m.padded_vocab,
            "seq_len": cfg["train"]["seq"], "experts": m.n_experts, "top_k": m.top_k if m.n_experts else 0,
            "expert_ffn": m.ffn_hidden if m.n_experts else 0, "tied_embeddings": False}  # fmt: skip


def _same_run(a: dict, b: dict) -> list[str]:
    """Config fields (other than batch, steps and dist) in which two runs differ."""
    diff = [s for s in ("recipe", "model", "data", "model_name") if a[s] != b[s]]
    skip = {"batch", "steps", "dist", "warmup_steps"}
    diff += [f"train.{k}" for k in a["train"] if k not in skip and a["train"][k] != b["train"].get(k)]
    return diff


def compare_training(out: pathlib.Path, recipe: str, world: int, hw_name: str, override: dict | None) -> dict:
    import fourcast as fc
    from fourcast import _core
    from fourcast.recipes import Recipe
    from fourcast.train import run
    from fourcast.train.config import ModelConfig

    dirs = run_dirs(out, recipe)
    missing = [k for k, d in dirs.items() if not (d / "summary.json").is_file()]
    if "dist" in missing:
        return {"error": f"no finished N-process run in {dirs['dist']}"}
    cfg = json.loads((dirs["dist"] / "config.json").read_text())
    summ = {k: json.loads((d / "summary.json").read_text()) for k, d in dirs.items() if k not in missing}
    res: dict = {"runs": {k: str(d) for k, d in dirs.items()}, "missing": missing,
                 "measured": {k: {f: s.get(f) for f in ("step_time_ms", "tokens_per_s", "final_train_loss", "world_size", "gpu", "device")}
                              for k, s in summ.items()}}  # fmt: skip
    for k in ("ref", "one"):
        if k in summ:
            other = json.loads((dirs[k] / "config.json").read_text())
            res.setdefault("config_mismatch", {})[k] = _same_run(cfg, other)
    if "ref" in summ:
        a = [r["loss"] for r in run.read_metrics(dirs["dist"])[0]]
        b = [r["loss"] for r in run.read_metrics(dirs["ref"])[0]]
        res["loss_agreement"] = loss_agreement(a, b)
    if "one" in summ and summ["one"]["tokens_per_s"]:
        res["scaling_efficiency"] = summ["dist"]["tokens_per_s"] / (world * summ["one"]["tokens_per_s"])
    # The what-if model: the same transformer, tokens and recipe, dp = N, before and after calibration.
    model = fc.hw.model(train_model_for_hw(cfg))
    rec = Recipe(_core.recipe_parse(json.dumps(cfg["recipe"]), "json", "config.json recipe"))
    tokens = cfg["train"]["batch"] * cfg["train"]["seq"]
    grad_bytes = 4.0 * ModelConfig(**cfg["model"]).n_params()  # DDP all-reduces the FP32 .grad of every parameter
    measured_n = summ["dist"]["step_time_ms"] / 1e3
    measured_1 = summ["one"]["step_time_ms"] / 1e3 if "one" in summ else None
    whatif = {}
    for label, hw in (("before", fc.hw.load(hw_name)), ("after", fc.hw.load(hw_name, set=override) if override else None)):
        if hw is None:
            continue
        s1 = fc.hw.step(hw, model, rec, tokens_per_gpu=tokens, seq_len=cfg["train"]["seq"], dp=1)
        sn = fc.hw.step(hw, model, rec, tokens_per_gpu=tokens, seq_len=cfg["train"]["seq"], dp=world)
        s0 = fc.hw.step(hw, model, rec, tokens_per_gpu=tokens, seq_len=cfg["train"]["seq"], dp=world, comm_overlap=0.0)
        whatif[label] = {
            "model_step_1_s": s1.step_time_s,
            "model_step_n_s": sn.step_time_s,
            "model_comm_exposed_s": sn.breakdown["comm_exposed"],
            "model_comm_bf16_no_overlap_s": s0.breakdown["comm_exposed"],
            "model_dp_overhead_s": sn.step_time_s - s1.step_time_s,
            "model_allreduce_fp32_grads_s": model_collective_s(hw, "all_reduce", grad_bytes, world),
            "measured_step_n_s": measured_n,
            "measured_step_1_s": measured_1,
            "measured_dp_overhead_s": (measured_n - measured_1) if measured_1 else None,
            "step_n_ratio_model_over_measured": sn.step_time_s / measured_n,
            "mirror_check": check_mirror(hw, model, rec, world),
        }
    res["whatif"] = whatif
    res["grad_bytes_fp32"] = grad_bytes
    return res


def stage_report(args) -> int:
    out = pathlib.Path(args.out)
    rep: dict = {"args": {k: v for k, v in vars(args).items() if k != "func"}, "env": {k: os.environ.get(k) for k in NCCL_ENV}}
    comm_path = out / "comm.json"
    override = None
    if comm_path.is_file():
        comm = json.loads(comm_path.read_text())
        rep["comm_meta"] = comm["meta"]
        rep["collectives"] = comm["ops"]
        rep["calibration"] = calibrate(comm, args.hw, args.fit_min_bytes)
        override = rep["calibration"]["override"]
    rep["training"] = {r: compare_training(out, r, args.world, args.hw, override) for r in args.recipes.split(",")}
    (out / "multigpu.json").write_text(json.dumps(rep, indent=1, default=str) + "\n")
    md = markdown(rep)
    (out / "multigpu.md").write_text(md)
    print(md, flush=True)
    bad = [r for r, t in rep["training"].items() if "error" in t]
    checks = [w["mirror_check"]["agree"] for t in rep["training"].values() for w in t.get("whatif", {}).values()]
    return 1 if bad or not all(checks) else 0


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _f(x, fmt=".3g") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(rep: dict) -> str:
    lines = []
    meta = rep.get("comm_meta")
    if meta:
        what = meta.get("gpu") or meta["device"]
        lines += [f"### Collectives: {what} x{meta['world']}, {meta['backend']}, {meta['dtype']} ({meta['date']})", ""]
        if meta.get("nccl"):
            lines += [f"NCCL {meta['nccl']}; env {meta['env']}", ""]
        lines += ["| bytes | " + " | ".join(f"{op} us | {op} busbw GB/s" for op in OPS) + " |",
                  "|---|" + "---|---|" * len(OPS)]  # fmt: skip
        by = {op: {r["bytes"]: r for r in rep["collectives"][op]} for op in OPS}
        for nbytes in sorted(by["all_reduce"]):
            cells = []
            for op in OPS:
                r = by[op].get(nbytes)
                cells += [_f(r and r["time_s"] * 1e6, ".1f"), _f(r and r["busbw_gbs"], ".2f")]
            lines.append(f"| {human(nbytes)} | " + " | ".join(cells) + " |")
        cal = rep["calibration"]
        lines += ["", f"### Calibration of `{cal['hw']}` (fit on all-reduce sizes >= {human(cal['fit_min_bytes'])})", "",
                  f"model bus bandwidth {cal['model_busbw_gbs_before']:.1f} GB/s before, measured {cal['measured_busbw_gbs']:.2f} GB/s, "
                  f"override `{json.dumps({k: v for k, v in cal['override'].items() if not k.endswith(('.source', '.confidence'))})}`", "",
                  "| op | max abs error before (fit range) | after: max | after: median | alpha (us, not modelled) | alpha-beta busbw GB/s |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for op, s in cal["summary"].items():
            ab = s["alpha_beta"]
            lines.append(f"| {op} | {_pct(s['max_abs_err_before_fit_range'])} | {_pct(s['max_abs_err_after_fit_range'])} | "
                         f"{_pct(s['median_abs_err_after_fit_range'])} | {_f(ab['alpha_us'], '.1f')} | {_f(ab['busbw_gbs'], '.2f')} |")  # fmt: skip
        lines += ["", "All-reduce, model after calibration against measured, per size:", "",
                  "| bytes | measured us | model us | error |", "|---|---|---|---|"]  # fmt: skip
        for e in cal["errors"]["all_reduce"]:
            lines.append(f"| {human(e['bytes'])} | {e['measured_s'] * 1e6:.1f} | {e['model_after_s'] * 1e6:.1f} | {_pct(e['err_after'])} |")
    for recipe, t in rep["training"].items():
        lines += ["", f"### Training: {recipe}", ""]
        if "error" in t:
            lines.append(f"not available: {t['error']}")
            continue
        m = t["measured"]
        lines += ["| run | step ms (median) | tokens/s | final train loss |", "|---|---|---|---|"]
        for k, label in (("dist", "N processes, batch b each"), ("ref", "1 process, batch N*b"), ("one", "1 process, batch b")):
            if k in m:
                lines.append(f"| {label} | {_f(m[k]['step_time_ms'], '.2f')} | {_f(m[k]['tokens_per_s'], '.0f')} | {_f(m[k]['final_train_loss'], '.4f')} |")
        if t.get("config_mismatch") and any(t["config_mismatch"].values()):
            lines.append(f"\nconfig differs: {t['config_mismatch']}")
        if "scaling_efficiency" in t:
            lines.append(f"\nweak-scaling efficiency (tokens/s of N / (N x 1-process, batch b)): {t['scaling_efficiency']:.3f}")
        la = t.get("loss_agreement")
        if la:
            lines.append(f"\nloss, N vs 1 process on the same global batch size (data order differs): final {la['final_n']:.4f} vs "
                         f"{la['final_1']:.4f}, diff {la['final_diff']:+.4f}, 3-SE data-order bound {la['bound_3se']:.4f} -> "
                         f"{'within' if la['within_noise'] else 'OUTSIDE'} noise; per-step RMS diff (2nd half) / (sqrt2 sigma) = {_f(la['rms_over_sqrt2_sigma'], '.2f')}")  # fmt: skip
        for label, w in t.get("whatif", {}).items():
            lines.append(f"\nwhat-if ({label} calibration): model step {w['model_step_n_s'] * 1e3:.3f} ms vs measured "
                         f"{w['measured_step_n_s'] * 1e3:.3f} ms (ratio {w['step_n_ratio_model_over_measured']:.3f}); model DP overhead "
                         f"{w['model_dp_overhead_s'] * 1e3:.3f} ms (exposed comm {w['model_comm_exposed_s'] * 1e3:.3f} ms, BF16 grads no overlap "
                         f"{w['model_comm_bf16_no_overlap_s'] * 1e3:.3f} ms, FP32 grads as DDP sends them {w['model_allreduce_fp32_grads_s'] * 1e3:.3f} ms) "
                         f"vs measured {_f(w['measured_dp_overhead_s'] and w['measured_dp_overhead_s'] * 1e3, '.3f')} ms; "
                         f"mirror check {'ok' if w['mirror_check']['agree'] else 'FAILED'}")  # fmt: skip
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=("ref", "dist", "report"))
    p.add_argument("--out", default=os.environ.get("OUT", "multigpu-out"))
    p.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", 2)), help="N (for ref and report: the N of the dist run)")
    p.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    p.add_argument("--device", default="cuda", help="cuda or cpu (cpu: with --backend gloo)")
    p.add_argument("--hw", default="h200", help="hardware file to calibrate")
    p.add_argument("--dtype", default="float32", help="collective element type (DDP reduces FP32 gradients)")
    p.add_argument("--min-bytes", type=parse_bytes, default=parse_bytes("1KiB"))
    p.add_argument("--max-bytes", type=parse_bytes, default=parse_bytes("1GiB"))
    p.add_argument("--fit-min-bytes", type=parse_bytes, default=parse_bytes("32MiB"), help="sizes the bandwidth fit uses")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--target-s", type=float, default=0.2, help="timed seconds per size (about)")
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--skip-comm", action="store_true")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--verbose", action="store_true")
    g = p.add_argument_group("training (the same in ref and dist)")
    g.add_argument("--recipes", default="bf16,ue5m3")
    g.add_argument("--model", default="50m")
    g.add_argument("--data", default=".devdata/train")
    g.add_argument("--val", default=".devdata/val")
    g.add_argument("--tokenizer", default="bpe:16384")
    g.add_argument("--batch", type=int, default=16, help="sequences per process")
    g.add_argument("--seq", type=int, default=512)
    g.add_argument("--steps", type=int, default=150)
    g.add_argument("--timing-steps", type=int, default=30, help="steps of the 1-process batch-b throughput run")
    g.add_argument("--lr", type=float, default=2e-3)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--gemm-path", default="dequant")
    g.add_argument("--eval-batches", type=int, default=2)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device == "cpu" and args.backend == "nccl":
        raise SystemExit("--device cpu needs --backend gloo")
    if args.val == "":
        args.val = None
    return {"ref": stage_ref, "dist": stage_dist, "report": stage_report}[args.stage](args)


if __name__ == "__main__":
    sys.exit(main())
