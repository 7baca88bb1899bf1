"""CUDA graphs for the training step: each kind of step is captured once and replayed,
so the host no longer launches ~700 kernels a step one by one. At 125M parameters the
FP4 step was host-bound (training-h200.md, run 12: 1.13x BF16 of GPU work, 1.16-1.20x
of step time); a replayed step costs the host one launch.

What makes a step replayable (the loop's `cuda_graph` setting, on by default):
- the operand seeds live in device memory (fourcast.nn.StepSeeds) and `set_step` writes
  each step's values there before the replay;
- the learning rate is a device tensor of AdamW (capturable=True), filled every step;
- the batch is copied into static input tensors;
- a step that refreshes the tensor scales (recipe.tensor_scale_refresh) measures amaxes
  that the other steps reuse: it is its own kind, with its own graph. Both graphs share
  one memory pool; they never run at once and keep nothing in it across replays but
  their loss and gradient norm;
- the first WARMUP steps of each kind run eagerly (Triton compiles, cuBLASLt plans,
  AdamW state), on the same side stream as the captures;
- profiled, traced and tensor-capture steps run eagerly (their hooks need the host).

The kernels are the eager step's and read the same seeds, so a graphed run repeats an
eager run's losses bit for bit (tests/gpu/test_train_graphs_gpu.py). `unsupported` names
what keeps a run eager: not CUDA, several processes, a MoE model (its routing sizes
come to the host), RHT signs drawn per step (made on the host).
"""

from __future__ import annotations

import gc
from typing import Callable

import torch

from fourcast import nn as fcnn

WARMUP = 2  # eager steps of each kind before it is captured


def unsupported(device: torch.device, world: int, n_experts: int, model: torch.nn.Module) -> str | None:
    """Why this run cannot capture its steps (None: it can)."""
    if device.type != "cuda":
        return "the device is not CUDA"
    if world > 1:
        return "the run has several processes (DDP/FSDP collectives are not captured)"
    if n_experts:
        return "a MoE model sends its routing sizes to the host every step"
    for m in fcnn.qlinears(model):
        if m.recipe.rht_on("fprop") or m.recipe.rht_on("dgrad") or m.recipe.rht_on("wgrad"):
            if m.recipe.rht["signs"] == "per-step":
                return "the recipe draws RHT signs per step, on the host"
    return None


def step_kind(model: torch.nn.Module, step: int) -> tuple[bool, ...]:
    """What the host decides differently from step to step, which a graph fixes: for each
    tensor-scale refresh period of the model's layers, whether `step` refreshes."""
    periods = sorted({m.recipe.tensor_scale_refresh for m in fcnn.qlinears(model)} - {1})
    return tuple(step % n == 0 for n in periods)


def make_adamw(groups: list[dict], lr: float, betas: tuple[float, float], device: torch.device,
               world: int = 1) -> torch.optim.AdamW:
    """AdamW as a run uses it: on one CUDA device fused and capturable, with the learning rate
    a device tensor (set_lr fills it), whether or not the steps are captured, so eager and
    graphed runs do the same arithmetic. (The capturable foreach AdamW took 3.2 ms of GPU
    time a step at 125M, the plain foreach one 2.5: run 13.) Elsewhere (CPU, DDP, FSDP2) the
    plain AdamW."""
    if device.type != "cuda" or world > 1:
        return torch.optim.AdamW(groups, lr=lr, betas=betas)
    opt = torch.optim.AdamW(groups, lr=lr, betas=betas, capturable=True, fused=True)
    make_capturable(opt, device)
    return opt


def make_capturable(opt: torch.optim.Optimizer, device: torch.device) -> None:
    """After make_adamw or a checkpoint load (which brings float learning rates, and for a
    checkpoint written before capturable optimizers, host step counters): device lr
    tensors, capturable groups, step counters on the device."""
    if not opt.defaults.get("capturable"):
        return
    for g in opt.param_groups:
        if not isinstance(g["lr"], torch.Tensor):
            g["lr"] = torch.tensor(float(g["lr"]), dtype=torch.float32, device=device)
        g["capturable"] = True
    for state in opt.state.values():
        if "step" in state and state["step"].device != device:
            state["step"] = state["step"].to(device=device, dtype=torch.float32)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


def report(stepper: "StepGraphs | None", why_eager: str | None) -> dict:
    """summary.json's account of the graphs: captured, replayed, or why there were none."""
    if stepper is None:
        return {"used": False, "why_not": why_eager or "no step ran", "captured": 0, "replayed": 0}
    return {"used": True, "why_not": None, "captured": stepper.captured, "replayed": stepper.replayed}


class StepGraphs:
    """Runs training steps on one side stream: eagerly for the first WARMUP of each kind,
    then by replaying that kind's captured graph. `body(x, y)` is the whole step (forward,
    backward, clipping, optimizer) and returns (loss, grad norm) as device tensors."""

    def __init__(self, body: Callable, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
        self.body = body
        self.opt = opt
        self.x = torch.empty_like(x)  # static inputs: every replay reads these addresses
        self.y = torch.empty_like(y)
        self.stream = torch.cuda.Stream(x.device)
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, tuple]] = {}
        self.eager_runs: dict[tuple, int] = {}
        self.pool = None
        self.captured = 0
        self.replayed = 0

    def step(self, kind: tuple | None, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of `kind` (step_kind's; None: eager, not counted) on batch (x, y)."""
        caller = torch.cuda.current_stream(self.x.device)
        self.stream.wait_stream(caller)  # the seeds' and lr's copies, the batch
        with torch.cuda.stream(self.stream):
            self.x.copy_(x, non_blocking=True)
            self.y.copy_(y, non_blocking=True)
            hit = self.graphs.get(kind) if kind is not None else None
            if hit is None and kind is not None and self.eager_runs.get(kind, 0) >= WARMUP:
                hit = self.graphs[kind] = self._capture()
            if hit is not None:
                hit[0].replay()
                self.replayed += 1
                out = hit[1]
            else:
                self.opt.zero_grad(set_to_none=True)
                out = self.body(self.x, self.y)
                self.opt.zero_grad(set_to_none=True)
                if kind is not None:
                    self.eager_runs[kind] = self.eager_runs.get(kind, 0) + 1
        caller.wait_stream(self.stream)
        return out

    def _capture(self) -> tuple[torch.cuda.CUDAGraph, tuple]:
        # Gradients must not exist at capture: backward then allocates them in the graph
        # (a replay writes them) instead of accumulating into eager ones.
        self.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        # No garbage collection while capturing: destroying a dead CUDA graph (an earlier
        # run's, left in a reference cycle) ends the capture, which then fails at a later
        # launch with "operation failed due to a previous error during capture" (seen in
        # the GPU tier; kernels-h200.md, session 16). torch stopped collecting before a
        # capture (force_cudagraph_gc); collect here, then hold the collector off.
        collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                out = self.body(self.x, self.y)
        finally:
            if collecting:
                gc.enable()
        self.pool = graph.pool()
        self.captured += 1
        return graph, out

    def close(self) -> None:
        """Drop the captured graphs now, at a safe point (the counts stay for the report)."""
        self.graphs.clear()
        self.pool = None
