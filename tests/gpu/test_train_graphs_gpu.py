"""CUDA-graph training (fourcast/train/graphs.py) on a CUDA device: a graphed run repeats an
eager run's losses and gradient norms bit for bit, through tensor-scale refresh steps
(their own graph), RHT recipes (fixed and per-layer signs), profiled steps (eager in
between replays) and a resume; and the graphs were captured and replayed."""

import gc
import json
import weakref

import pytest
import torch

import fourcast as fc
from fourcast.train import graphs
from fourcast.train.config import DataConfig, RunConfig, TrainConfig, model_config
from fourcast.train.loop import train

pytestmark = pytest.mark.gpu


def _cfg(tmp_path, shared_data, recipe, steps, **train_kw):
    text = tmp_path / "train.txt"
    if not text.exists():
        text.write_bytes((shared_data / "corpus" / "train" / "gutenberg.txt").read_bytes()[:200_000])
    r = fc.recipe(recipe).to_dict()
    if r.get("tensor_scale_refresh", 1) > 1:
        r["tensor_scale_refresh"] = 4  # refresh steps 0, 4, 8, ...: both graphs replay in 14 steps
    return RunConfig(recipe=r, model=model_config("tiny,n_layers=2"), model_name="tiny",
                     data=DataConfig(path=str(text), val_fraction=0.1, cache_dir=str(tmp_path / "cache")),
                     train=TrainConfig(steps=steps, batch=2, seq=128, eval_every=7, ckpt_every=7, device="cuda",
                                       progress=False, **train_kw))


def _lines(run_dir):
    lines = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(m["step"], m.get("loss"), m.get("grad_norm"), m.get("val_loss")) for m in lines]


@pytest.mark.parametrize("recipe", ["ue5m3", "nvfp4", "mxfp4", "bf16"])
def test_graphed_run_repeats_the_eager_run_bit_for_bit(recipe, shared_data, tmp_path, monkeypatch):
    monkeypatch.delenv("FOURCAST_TIMELINE_STEP", raising=False)
    eager = train(_cfg(tmp_path, shared_data, recipe, 14, cuda_graph=False), tmp_path / "eager")
    graphed = train(_cfg(tmp_path, shared_data, recipe, 14, profile_steps=2), tmp_path / "graphed")
    assert eager["cuda_graphs"] == {"used": False, "why_not": "cuda_graph is off", "captured": 0, "replayed": 0}
    g = graphed["cuda_graphs"]
    kinds = 2 if recipe == "ue5m3" else 1
    assert g["used"] and g["captured"] == kinds and g["replayed"] >= 14 - 2 * kinds - 3, g
    assert _lines(tmp_path / "graphed") == _lines(tmp_path / "eager")


class _Stop(Exception):
    pass


def _stop_at_7(done, record):
    if done == 7:  # after step 7's checkpoint: a run killed there
        raise _Stop


def test_graphed_resume_continues_bit_for_bit(shared_data, tmp_path):
    whole = train(_cfg(tmp_path, shared_data, "ue5m3", 14), tmp_path / "whole")
    with pytest.raises(_Stop):
        train(_cfg(tmp_path, shared_data, "ue5m3", 14), tmp_path / "part", on_step=_stop_at_7)
    resumed = train(_cfg(tmp_path, shared_data, "ue5m3", 14), tmp_path / "part", resume=True)
    # The messages say which way it failed (it failed once in session 13, under a cold
    # Triton cache and six workers, and did not come back in four whole-tier runs).
    assert whole["cuda_graphs"]["used"] and resumed["cuda_graphs"]["replayed"] > 0, \
        (whole["cuda_graphs"], resumed["cuda_graphs"])
    part, full = _lines(tmp_path / "part"), _lines(tmp_path / "whole")
    first = next((i for i, (a, b) in enumerate(zip(part, full)) if a != b), min(len(part), len(full)))
    assert part == full, f"first difference at line {first}: {part[first:first + 2]} vs {full[first:first + 2]}"


def test_capturable_optimizer_after_loading_a_host_step_checkpoint():
    """A checkpoint written before capturable AdamW holds host step counters and float
    learning rates; make_capturable moves them so a graph can capture the step."""
    p = torch.nn.Parameter(torch.ones(4, device="cuda"))
    old = torch.optim.AdamW([p], lr=1e-3)
    p.grad = torch.ones_like(p)
    old.step()
    opt = graphs.make_adamw([{"params": [p]}], 1e-3, (0.9, 0.95), p.device)
    opt.load_state_dict(old.state_dict())
    graphs.make_capturable(opt, p.device)
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor) and opt.param_groups[0]["capturable"]
    assert opt.state[p]["step"].is_cuda
    graphs.set_lr(opt, 5e-4)
    opt.step()
    assert opt.param_groups[0]["lr"].item() == torch.tensor(5e-4).item()  # an f32 tensor


def test_capture_collects_dead_graphs_first_and_holds_the_collector_off():
    """Destroying a dead CUDA graph inside a capture ends the capture (session 16's probe:
    "operation failed due to a previous error during capture", the GPU tier's intermittent
    failure). StepGraphs collects such garbage before it captures and keeps the collector
    off while it does; the replays then run the step."""

    class Holder:
        pass

    events = []
    x = torch.ones(1 << 12, device="cuda")
    p = torch.nn.Parameter(torch.zeros(8, device="cuda"))
    opt = torch.optim.SGD([p], lr=0.1)  # each step multiplies p + 1 by 0.8

    def body(a, b):
        if torch.cuda.is_current_stream_capturing():
            events.append(("capturing", gc.isenabled()))
        loss = (p * a[:8] + b[:8]).square().sum()
        loss.backward()
        opt.step()
        return loss.detach(), p.grad.norm()

    stepper = graphs.StepGraphs(body, opt, x, x)
    losses = [stepper.step((), x, x)[0].item() for _ in range(graphs.WARMUP)]
    dead = Holder()
    dead.me = dead
    dead.graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(dead.graph, stream=torch.cuda.Stream()):
        dead.out = x * 3
    weakref.finalize(dead, events.append, ("collected",))
    del dead
    losses += [stepper.step((), x, x)[0].item() for _ in range(3)]
    assert events == [("collected",), ("capturing", False)] and gc.isenabled()
    assert stepper.captured == 1 and stepper.replayed == 3
    assert losses == pytest.approx([8 * 0.64**i for i in range(len(losses))], rel=1e-5)
