"""The training loop: AdamW, warmup + cosine LR, gradient clipping, bf16 autocast of the
non-quantized parts on CUDA, periodic validation, checkpoint + resume with bit-identical
continuation, a progress bar, and a self-describing run folder (see run.py).

Determinism: the model is initialised from torch.manual_seed(seed); batch s is drawn
from (seed, s, rank) alone (data.py); SR seeds and RHT signs come from (seed, layer,
step, role) (fourcast.nn); the checkpoint holds parameters, buffers (stored tensor
amax) and optimizer state. So a run resumed from its checkpoint repeats exactly the
losses the uninterrupted run produced (on the same machine and thread count).

Under torchrun (WORLD_SIZE set) the model is wrapped in DDP, or FSDP2 (`fully_shard`
per block, then the root) with train.dist = "fsdp"; each rank draws its own batches.
On one CUDA device a dense model's steps are captured in CUDA graphs and replayed
(graphs.py, train.cuda_graph): the same kernels and seeds, so the same bits as eager steps.

    >>> from fourcast.train.config import RunConfig, DataConfig, TrainConfig  # doctest: +SKIP
    >>> cfg = RunConfig(recipe=fc.recipe("ue5m3").to_dict(), data=DataConfig(path="text.txt"),
    ...                 train=TrainConfig(steps=50, batch=4, seq=64))      # doctest: +SKIP
    >>> summary = train(cfg, "runs/ue5m3")                                 # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from typing import Callable

import torch

from fourcast import _core
from fourcast import nn as fcnn
from fourcast.errors import TrainError
from fourcast.kernels import QUANT_REV
from fourcast.recipes import Recipe
from fourcast.train import checkpoint, graphs, run
from fourcast.train.capture import TensorCapture
from fourcast.train.config import RunConfig, TrainConfig, legacy_model_dict
from fourcast.train.data import load_data
from fourcast.train.model import Transformer
from fourcast.train.profile import TIMELINE_ENV, Profiler, Timeline, pick_timeline_step, sampled_steps

# Fields that may differ between a run and its resumption (everything else must match).
RESUMABLE_FIELDS = ("steps", "progress", "eval_every", "ckpt_every", "profile_steps", "capture_every", "capture_rows",
                    "cuda_graph")
# Model fields a resumed run takes from the checkpointed run, whatever was asked: they
# decide which modules (parameter names) the checkpoint holds, and a run folder written
# before fused_proj existed is unfused while new runs default to fused.
LAYOUT_FIELDS = ("fused_proj",)


def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warmup to t.lr, then cosine decay to t.lr * t.min_lr_ratio at t.steps."""
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def resolve_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise TrainError(f"device '{name}' asked for but no CUDA device is visible; use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", local_rank)
    elif dev.type != "cpu":
        raise TrainError(f"device '{name}' is not supported; use auto, cpu or cuda[:N]")
    return dev


def estimate_memory(cfg: RunConfig, autocast: bool) -> int:
    """Rough bytes one process needs: fp32 weights + grads + AdamW moments, and the
    activations autograd keeps (bf16/fp32 per element; an estimate, not a bound)."""
    m, t = cfg.model, cfg.train
    tokens = t.batch * t.seq
    act_bytes = 2 if autocast else 4
    ffn = m.ffn_hidden * (m.top_k if m.n_experts else 1)
    per_layer = tokens * (12 * m.d_model + 4 * ffn) * act_bytes + t.batch * m.n_heads * t.seq * 8
    logits = tokens * m.padded_vocab * (4 + 4 + act_bytes)
    return 16 * m.n_params() + m.n_layers * per_layer + logits


def available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:  # MemAvailable counts reclaimable page cache; free pages alone would not
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _init_distributed(device_name: str) -> tuple[int, int, int, bool]:
    """(rank, world size, local rank, whether this call created the process group)."""
    if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) <= 1:
        return 0, 1, 0, False
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and device_name != "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if dist.get_backend() == "gloo":
        _GLOO_USED[0] = True
    return dist.get_rank(), dist.get_world_size(), local_rank, created


# torch keeps a gloo group's worker threads alive past destroy_process_group (DDP and FSDP2
# keep references to the group; a plain torch DDP step leaves 10 of them), and such a thread
# that takes the GIL to free a finished collective's tensors while the interpreter finalizes
# aborts the process (std::terminate). cli.exit_process ends such a process without finalizing.
_GLOO_USED = [False]


def gloo_used() -> bool:
    """Whether this process trained over a gloo process group (see _GLOO_USED)."""
    return _GLOO_USED[0]


def _wrap(model: torch.nn.Module, t: TrainConfig, device: torch.device, world: int) -> torch.nn.Module:
    if world <= 1:
        return model
    if t.dist == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Buffers (stored tensor amax) are kept equal by fcnn.sync_amax, not re-sent every forward.
    import inspect

    no_sync = {"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DDP).parameters else {"broadcast_buffers": False}
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **no_sync)


def _mean_over_ranks(value: float, world: int, device: torch.device) -> float:
    if world <= 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item() / world


def _saved_config(run_dir: pathlib.Path) -> dict:
    """The run folder's config.json, its model section with the fields it predates
    filled in as they were then (config.LEGACY_MODEL_DEFAULTS)."""
    saved = json.loads((run_dir / "config.json").read_text())
    if isinstance(saved.get("model"), dict):
        saved["model"] = legacy_model_dict(saved["model"])
    return saved


def _follow_layout(run_dir: pathlib.Path, cfg: RunConfig, log: Callable[[str], None]) -> None:
    """Build the resumed model as the checkpointed one was (LAYOUT_FIELDS)."""
    saved = _saved_config(run_dir).get("model") or {}
    for name in LAYOUT_FIELDS:
        if name in saved and saved[name] != getattr(cfg.model, name):
            log(f"resuming {run_dir}: model.{name}={saved[name]}, as the checkpointed run was built")
            setattr(cfg.model, name, saved[name])


def _check_resume(run_dir: pathlib.Path, cfg: RunConfig) -> None:
    saved = _saved_config(run_dir)
    now = cfg.to_dict()
    for section in ("recipe", "model", "data", "train", "model_name"):
        a, b = saved.get(section), now.get(section)
        if section == "train":
            a = {k: v for k, v in a.items() if k not in RESUMABLE_FIELDS}
            b = {k: v for k, v in b.items() if k not in RESUMABLE_FIELDS}
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) else [section]
            raise TrainError(
                f"--resume: this run's {section} differs from the checkpointed run's ({', '.join(map(str, diff))}); "
                "resume with the same settings or start a new --out"
            )


def _evaluate(model, batches, device, autocast) -> float:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                _, loss = model(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
            total += loss.item()
    model.train()
    return total / len(batches)


def train(
    cfg: RunConfig,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    on_step: Callable[[int, dict], None] | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> dict:
    """Train as `cfg` says into the run folder `out`; returns the summary dict.
    `on_step(step, record)` is called after each step's metrics line is written."""
    t = cfg.train.check()
    cfg.model.check()
    run_dir = pathlib.Path(out)
    recipe = Recipe(_core.recipe_parse(json.dumps(cfg.recipe), "json", "config.json recipe"))
    rank, world, local_rank, created_pg = _init_distributed(t.device)
    try:
        return _train(cfg, t, run_dir, recipe, rank, world, local_rank, resume, on_step, log if rank == 0 else (lambda s: None))
    finally:
        if created_pg:
            import torch.distributed as dist

            dist.destroy_process_group()


def _train(cfg, t, run_dir, recipe, rank, world, local_rank, resume, on_step, log) -> dict:
    device = resolve_device(t.device, local_rank)
    autocast = t.autocast and device.type == "cuda"

    if resume:
        checkpoint.read_meta(run_dir)  # fails early, with a hint, when there is none
    elif (run_dir / checkpoint.FILE).exists() or (run_dir / "metrics.jsonl").exists():
        raise TrainError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --out")

    data = load_data(cfg.data, t.seq) if rank == 0 or world == 1 else None
    if world > 1:
        import torch.distributed as dist

        dist.barrier()  # rank 0 built the token cache; the others now read it
        data = data or load_data(cfg.data, t.seq)
    cfg.model.vocab_size = data.vocab_size
    if resume:
        _follow_layout(run_dir, cfg, log)
        _check_resume(run_dir, cfg)

    need, have = estimate_memory(cfg, autocast), available_memory(device)
    if need > have:
        raise TrainError(
            f"model '{cfg.model_name}' ({cfg.model.n_params() / 1e6:.0f}M params) at batch {t.batch} x seq {t.seq} needs "
            f"about {_gib(need)} but {device} has {_gib(have)} free; use a smaller --model, --batch or --seq"
        )

    torch.manual_seed(t.seed)
    model = Transformer(cfg.model)
    summary_convert = fcnn.convert(model, recipe, seed=t.seed, gemm_path=t.gemm_path)
    model.to(device)
    multiple = math.lcm(1, *(q.token_multiple() for q in fcnn.qlinears(model)))
    if (t.batch * t.seq) % multiple:
        raise TrainError(
            f"batch*seq = {t.batch * t.seq} tokens is not a multiple of {multiple}, which recipe "
            f"'{recipe.name}' needs (Wgrad quantizes along tokens); change --batch or --seq"
        )
    net = _wrap(model, t, device, world)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = graphs.make_adamw([{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            t.lr, (t.beta1, t.beta2), device, world)

    start, tokens = 0, 0
    if resume:
        info = checkpoint.load(run_dir, net, opt)
        graphs.make_capturable(opt, device)
        start, tokens = info["step"], info["extra"].get("tokens", 0)
        if rank == 0:
            run.truncate_metrics(run_dir, start)
        log(f"resumed {run_dir} at step {start}")
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        run.write_json(run_dir / "config.json", cfg.to_dict())
        run.write_json(run_dir / "env.json", run.environment(device, world))
        log(str(summary_convert))
        if recipe.is_quantized and not summary_convert.converted:
            log(f"warning: recipe {recipe.name} quantizes no layer of this model (see the reasons above)")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    profiler = Profiler(device) if t.profile_steps > 0 else None
    profile_at = set(sampled_steps(start, t.steps, t.profile_steps))
    capture = TensorCapture(run_dir, model, t.capture_every, t.capture_rows) if t.capture_every and rank == 0 else None
    if capture:
        capture.write_index()
    val_batches = data.val_batches(t.eval_batches, t.batch, t.seq)
    metrics = open(run_dir / "metrics.jsonl", "a") if rank == 0 else None
    bar = None
    if t.progress and rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=t.steps, initial=start, desc=f"{recipe.name} {cfg.model_name}", unit="step", dynamic_ncols=True)
    refresh = recipe.tensor_scale_refresh
    timeline_step = pick_timeline_step(os.environ.get(TIMELINE_ENV), start, t.steps, profile_at) \
        if device.type == "cuda" and rank == 0 else -1
    traced = None  # the timeline step's summary: GPU kernel time per profiled op
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)

    stepper = None  # graphs.StepGraphs when the steps are captured
    why_eager = graphs.unsupported(device, world, cfg.model.n_experts, model) if t.cuda_graph else "cuda_graph is off"

    def body(x, y):
        """One step's work on the device: forward, backward, clipping, AdamW. It reads
        why_eager, not stepper: a closure over stepper, which holds it, would make a cycle
        that keeps the run's CUDA graphs alive until a garbage collection, which can fall
        inside a later capture (StepGraphs._capture)."""
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast, cache_enabled=why_eager is not None):
            _, loss = net(x, y)
        loss.backward()
        if t.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, t.grad_clip)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        with fcnn.trace_region("optimizer", params=n_params):
            opt.step()
        return loss.detach(), grad_norm

    if why_eager is None:
        fcnn.StepSeeds(model, device)
    elif t.cuda_graph and device.type == "cuda":
        log(f"steps run eagerly (no CUDA graphs): {why_eager}")
    wall = time.perf_counter()
    try:
        for step in range(start, t.steps):
            lr = lr_at(step, t)
            graphs.set_lr(opt, lr)
            fcnn.set_step(model, step, rank)
            xb, yb = data.batch(step, t.batch, t.seq, seed=t.seed, rank=rank)
            x, y = torch.from_numpy(xb).to(device), torch.from_numpy(yb).to(device)
            if why_eager is None and stepper is None:
                stepper = graphs.StepGraphs(body, opt, x, y)
            profiled = profiler is not None and step in profile_at
            captured = bool(capture and capture.due(step))
            if captured:
                capture.arm(step)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            timeline = Timeline(model) if step == timeline_step else None  # rank 0 only: see pick above
            if timeline:
                timeline.start()
            t0 = time.perf_counter()
            if profiled:
                profiler.start_step(model)
            if stepper is not None:
                hooked = profiled or timeline is not None or captured  # these need the host: eager
                kind = None if hooked else graphs.step_kind(model, step)
                loss, grad_norm = stepper.step(kind, x, y)
            else:
                loss, grad_norm = body(x, y)
                opt.zero_grad(set_to_none=True)
            if world > 1 and refresh > 1 and step % refresh == 0:
                fcnn.sync_amax(model)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            if timeline:
                try:
                    traced = {"step": step, **timeline.stop(dt * 1e3, run_dir / "timeline-trace.json.gz")}
                    run.write_json(run_dir / "timeline.json", traced)
                except Exception as exc:  # a diagnostic: never the reason a run fails
                    log(f"timeline of step {step} failed: {exc!r}")
            if profiled:
                profiler.stop_step(step, dt * 1e3)
            if capture:
                capture.disarm()
            tokens += t.batch * t.seq * world
            done = step + 1
            record = {
                "step": done,
                "loss": _mean_over_ranks(loss.item(), world, device),
                "lr": lr,
                "grad_norm": float(grad_norm),
                "tokens": tokens,
                "step_time_ms": dt * 1e3,
                "tok_s": t.batch * t.seq * world / dt,
            }
            if profiled or timeline:  # timed under a tracer: not a step-time sample
                record["profiled"] = True
            losses = getattr(model, "last_losses", {})
            if losses.get("aux") is not None:
                record["aux_loss"] = float(losses["aux"])
            if not math.isfinite(record["loss"]):
                raise TrainError(f"loss became {record['loss']} at step {done}; lower --lr or check the recipe")
            if metrics:
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
            if bar:
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tok_s']:.0f}")
            if (t.eval_every and done % t.eval_every == 0) or done == t.steps:
                val = _mean_over_ranks(_evaluate(net, val_batches, device, autocast), world, device)
                if metrics:
                    metrics.write(json.dumps({"step": done, "val_loss": val}) + "\n")
                    metrics.flush()
                if bar:
                    bar.write(f"step {done}: val loss {val:.4f}")
            if (t.ckpt_every and done % t.ckpt_every == 0) or done == t.steps:
                checkpoint.save(run_dir, net, opt, step=done, extra={"tokens": tokens}, rank=rank)
            if on_step:
                on_step(done, record)
    finally:
        fcnn.set_tracer(None)
        if stepper is not None:
            stepper.close()
        if bar:
            bar.close()
        if metrics:
            metrics.close()
    summary = {}
    if rank == 0:
        summary = _finish(run_dir, cfg, recipe, model, summary_convert, device, world, profiler, time.perf_counter() - wall,
                          traced, graphs.report(stepper, why_eager))
    return summary


def _finish(run_dir, cfg, recipe, model, converted, device, world, profiler, wall_s, traced=None, cuda_graphs=None) -> dict:
    train_lines, val_lines = run.read_metrics(run_dir)
    step_ms = run.median_step_ms(train_lines)
    if device.type == "cuda":
        peak, peak_kind = torch.cuda.max_memory_allocated(device), "cuda_max_memory_allocated"
    else:
        import resource

        peak, peak_kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_max_rss"
    t = cfg.train
    summary = {
        "recipe": recipe.name,
        "model": cfg.model_name,
        "params": cfg.model.n_params(),
        "active_params": cfg.model.n_active_params(),
        "steps": train_lines[-1]["step"] if train_lines else 0,
        "tokens": train_lines[-1]["tokens"] if train_lines else 0,
        "final_train_loss": run.final_loss(train_lines),
        "final_val_loss": val_lines[-1]["val_loss"] if val_lines else None,
        "first_train_loss": train_lines[0]["loss"] if train_lines else None,
        "step_time_ms": step_ms,
        "tokens_per_s": (t.batch * t.seq * world * 1e3 / step_ms) if step_ms else None,
        "peak_memory_bytes": peak,
        "peak_memory_kind": peak_kind,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "world_size": world,
        "gemm_path": t.gemm_path,
        "cuda_graphs": cuda_graphs,
        "activation_memory": fcnn.memory_report(model),
        "convert": converted.to_dict(),
        "wall_s_this_process": wall_s,
    }
    run.write_json(run_dir / "summary.json", summary)
    run.plot_losses(run_dir, f"{recipe.name} / {cfg.model_name}")
    if profiler is not None and profiler.per_step:
        context = {
            "device": str(device),
            "gpu": summary["gpu"],
            "recipe": recipe.name,
            "gemm_path": t.gemm_path,
            "model": cfg.to_dict()["model"],
            "batch": t.batch,
            "seq": t.seq,
            "tokens_per_step": t.batch * t.seq,
            "world_size": world,
            "quant_rev": QUANT_REV,  # which quantizer kernels ran (the model prices by it)
        }
        run.write_json(run_dir / "profile.json", profiler.report(unprofiled_ms=step_ms, context=context,
                                                                     timeline=traced))
    return summary
