"""What CUDA-graph training (fourcast/train/graphs.py) decides on the host, checked on
the CPU: which runs can be captured, the kinds of step, the seeds in memory (StepSeeds)
giving the layer the bits of int seeds, and a checkpoint of a device learning rate.
tests/gpu/test_train_graphs_gpu.py runs the graphs themselves."""

import pytest
import torch

import fourcast as fc
from fourcast.train import checkpoint, graphs
from fourcast.train.config import model_config
from fourcast.train.model import Transformer

CUDA = torch.device("cuda")  # a device object only: nothing here runs on a GPU


def _model(recipe, **over):
    torch.manual_seed(0)
    model = Transformer(model_config("tiny,n_layers=2", **over) if over else model_config("tiny,n_layers=2"))
    fc.convert(model, fc.recipe(recipe) if isinstance(recipe, str) else recipe)
    return model


def test_which_runs_can_be_captured():
    dense = _model("ue5m3")
    assert graphs.unsupported(CUDA, 1, 0, dense) is None
    assert "not CUDA" in graphs.unsupported(torch.device("cpu"), 1, 0, dense)
    assert "processes" in graphs.unsupported(CUDA, 2, 0, dense)
    assert "MoE" in graphs.unsupported(CUDA, 1, 4, dense)
    per_step = fc.recipe("ufp4").set("rht.signs", "per-step")
    assert "per step" in graphs.unsupported(CUDA, 1, 0, _model(per_step))
    assert graphs.unsupported(CUDA, 1, 0, _model("ufp4")) is None  # per-layer signs: fixed tensors


def test_step_kinds_follow_the_tensor_scale_refresh():
    model = _model("ue5m3")  # refresh every 10 steps
    assert [graphs.step_kind(model, s) for s in (0, 3, 10, 11)] == [(True,), (False,), (True,), (False,)]
    assert graphs.step_kind(_model("nvfp4"), 10) == ()  # measures every step: one kind
    assert graphs.step_kind(_model("bf16"), 0) == ()


def test_step_seeds_are_operand_seeds():
    """StepSeeds' vectorised mix equals operand_seed: 63-bit global seeds, big steps, ranks."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    fc.convert(model, "ue5m3", seed=2**40 + 5)
    seeds = fc.nn.StepSeeds(model, "cpu")
    for step in (0, 7, 12345678901):
        for rank in (0, 3):
            fc.nn.set_step(model, step, rank)
            want = [[fc.nn.operand_seed(q.seed, q.layer_id, step, key, rank) for key in ("fprop.x", "fprop.w", "dgrad.dy")]
                    for q in fc.nn.qlinears(model)]
            assert seeds.table.tolist() == want


def test_seeds_in_memory_give_the_layer_the_bits_of_int_seeds():
    """QLinear with StepSeeds (the CPU reference reads the cell's value) equals QLinear with
    int seeds: output and the three gradients, SR on dY, at two steps."""
    outs = []
    for in_memory in (False, True):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 32))
        fc.convert(model, "ue5m3", seed=5)
        if in_memory:
            seeds = fc.nn.StepSeeds(model, "cpu")
        got = []
        for step in (3, 4):
            fc.nn.set_step(model, step)
            x = torch.randn(32, 64, generator=torch.Generator().manual_seed(step), requires_grad=True)
            y = model(x)
            y.square().sum().backward()
            got += [y.detach(), x.grad, model[0].weight.grad.clone(), model[1].weight.grad.clone()]
            model.zero_grad()
        outs.append(got)
        if in_memory:
            assert seeds.step == 4 and all(q._step_seeds is seeds for q in fc.nn.qlinears(model))
            seeds.detach()
            assert all(q._step_seeds is None for q in fc.nn.qlinears(model))
    assert all(torch.equal(a, b) for a, b in zip(*outs))


def test_a_device_learning_rate_is_checkpointed_as_a_number(tmp_path):
    m = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(m.parameters(), lr=torch.tensor(0.02))
    graphs.set_lr(opt, 0.01)
    checkpoint.save(tmp_path, m, opt, step=1)
    fresh = torch.optim.AdamW(m.parameters(), lr=0.5)
    checkpoint.load(tmp_path, m, fresh)
    assert fresh.param_groups[0]["lr"] == pytest.approx(0.01)
    graphs.make_capturable(fresh, torch.device("cpu"))  # not a capturable optimizer: nothing to do
    assert not isinstance(fresh.param_groups[0]["lr"], torch.Tensor)


def test_adamw_is_capturable_only_on_one_cuda_device():
    groups = lambda: [{"params": [torch.nn.Parameter(torch.ones(2))]}]  # noqa: E731
    for device, world in ((torch.device("cpu"), 1), (CUDA, 2)):  # several processes: DDP/FSDP2's AdamW
        opt = graphs.make_adamw(groups(), 1e-3, (0.9, 0.95), device, world)
        assert not opt.defaults["capturable"] and not isinstance(opt.param_groups[0]["lr"], torch.Tensor)
