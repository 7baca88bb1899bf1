"""Fused projections (ModelConfig.fused_proj): wqkv / w_gate_up are the separate
wq, wk, wv / w_gate, w_up stacked by rows; same parameters, same init, same function;
convert() counts them as attn / mlp; run folders written before the field stay unfused."""

import json

import pytest
import torch

import fourcast as fc
from fourcast import nn as fcnn
from fourcast import project
from fourcast.train import checkpoint, run
from fourcast.train.config import DataConfig, ModelConfig, RunConfig, TrainConfig, model_config
from fourcast.train.loop import train
from fourcast.train.model import Transformer

FUSED = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up")}


def _pair(spec, seed_fused=0):
    torch.manual_seed(0)
    unfused = Transformer(model_config(f"{spec},fused_proj=false"))
    torch.manual_seed(seed_fused)
    fused = Transformer(model_config(spec))
    return unfused, fused


def _stacked(unfused_sd, order=FUSED):
    """The unfused state dict in the fused layout: each fused weight = its parts' rows."""
    out = {}
    for key, value in unfused_sd.items():
        prefix, _, last = key.rpartition(".")[0].rpartition(".")
        for fused, parts in order.items():
            if last == parts[0]:
                out[f"{prefix}.{fused}.weight"] = torch.cat([unfused_sd[f"{prefix}.{p}.weight"] for p in parts])
        if last not in {p for parts in order.values() for p in parts}:
            out[key] = value
    return out


@pytest.mark.parametrize("spec", ["tiny", "moe-tiny"])
def test_layout_names_and_parameter_count(spec):
    unfused, fused = _pair(spec)
    cfg = fused.cfg
    assert cfg.fused_proj and not unfused.cfg.fused_proj and ModelConfig().fused_proj
    names = {n for n, m in fused.named_modules() if isinstance(m, torch.nn.Linear)}
    old = {n for n, m in unfused.named_modules() if isinstance(m, torch.nn.Linear)}
    assert "blocks.0.attn.wqkv" in names and not any(n.endswith((".wq", ".wk", ".wv", ".w_gate", ".w_up")) for n in names)
    assert {"blocks.0.attn.wq", "blocks.0.attn.wk", "blocks.0.attn.wv"} <= old and not any("wqkv" in n or "gate_up" in n for n in old)
    mlp = "blocks.0.mlp.experts.3" if cfg.n_experts else "blocks.0.mlp"
    assert f"{mlp}.w_gate_up" in names and {f"{mlp}.w_gate", f"{mlp}.w_up"} <= old
    assert fused.get_submodule("blocks.0.attn.wqkv").weight.shape == (3 * cfg.d_model, cfg.d_model)
    assert fused.get_submodule(f"{mlp}.w_gate_up").weight.shape == (2 * cfg.ffn_hidden, cfg.d_model)
    n = sum(p.numel() for p in fused.parameters())
    assert n == sum(p.numel() for p in unfused.parameters()) == cfg.n_params()


@pytest.mark.parametrize("spec", ["tiny", "moe-tiny"])
def test_fused_init_is_the_unfused_init_stacked(spec):
    # Same seed: every fused weight holds exactly the separate weights' values (drawn part
    # by part in their order), every other parameter is identical.
    unfused, fused = _pair(spec)
    expect = _stacked(unfused.state_dict())
    got = fused.state_dict()
    assert list(got) == list(expect)
    for key in got:
        assert torch.equal(got[key], expect[key]), key


@pytest.mark.parametrize("spec", ["tiny", "moe-tiny", "tiny,d_model=128,n_heads=4,ffn_hidden=256,n_layers=2"])
def test_same_function_with_stacked_weights(spec):
    """bf16 recipe (nothing quantized; fp32 math on the CPU). The fused GEMM computes every
    output element as the same length-d fp32 dot product as the separate GEMM (measured:
    bit-identical logits and loss here); the 1e-6 absolute bound on logits (|logits| < 1,
    ~8 fp32 ulps) only leaves room for a BLAS that blocks the wider GEMM differently and
    reassociates those sums. Gradients do differ by reassociation: Dgrad of a fused linear
    is one GEMM over 3d (2*hidden) where autograd adds three (two) GEMMs, so dX and every
    gradient upstream of it moves by fp32 rounding (measured <= 4e-7 of the largest
    element; bound 1e-5). Swapping k and v, or gate and up, moves logits by > 1e-3."""
    torch.set_num_threads(1)
    unfused, fused = _pair(spec, seed_fused=1)  # different init: the weights must come from the copy
    fused.load_state_dict(_stacked(unfused.state_dict()))
    assert fc.convert(unfused, "bf16").converted == [] and fc.convert(fused, "bf16").converted == []
    x = torch.randint(0, 256, (2, 64))
    la, loss_a = unfused(x, x)
    lb, loss_b = fused(x, x)
    assert la.abs().max() < 1
    torch.testing.assert_close(lb, la, rtol=0, atol=1e-6)
    torch.testing.assert_close(loss_b, loss_a, rtol=0, atol=1e-6)
    loss_a.backward()
    loss_b.backward()
    grads_a = _stacked({n: p.grad for n, p in unfused.named_parameters()})
    for name, p in fused.named_parameters():
        g = grads_a[name]
        assert (p.grad - g).abs().max() <= 1e-5 * g.abs().max(), name
    # not vacuous: the row order matters
    swapped = {"wqkv": ("wq", "wv", "wk"), "w_gate_up": ("w_up", "w_gate")}
    for fused_name, parts in swapped.items():
        fused.load_state_dict(_stacked(unfused.state_dict(), {**FUSED, fused_name: parts}))
        assert (fused(x)[0] - la).abs().max() > 1e-3, fused_name


def test_one_quantization_of_x_gives_the_same_codes():
    # MXFP4 without RHT: no tensor-level scale and W's row blocks unchanged, so the fused
    # forward (X quantized once for q, k, v) is bit-identical to three separate ones.
    # (With a two-level format the tensor amax of W is shared, with per-layer RHT signs
    # the layer ids differ: those do change the numbers, by design.)
    torch.set_num_threads(1)
    recipe = fc.recipe("mxfp4", {"rht.size": "0"})
    unfused, fused = _pair("tiny,n_layers=1")
    fc.convert(unfused, recipe)
    fc.convert(fused, recipe)
    x = torch.randint(0, 256, (2, 64))
    assert torch.equal(fused(x)[0], unfused(x)[0])


@pytest.mark.parametrize("fp4_layers", ["attn", "mlp"])
@pytest.mark.parametrize("fused_proj", [True, False])
def test_convert_counts_fused_linears_as_attn_and_mlp(fp4_layers, fused_proj):
    torch.manual_seed(0)
    model = Transformer(model_config(f"tiny,fused_proj={fused_proj}"))  # 4 blocks
    s = fc.convert(model, fc.recipe("ue5m3", fp4_layers=fp4_layers))
    per_block = {(True, "attn"): 2, (True, "mlp"): 2, (False, "attn"): 4, (False, "mlp"): 3}
    assert len(s.converted) == 4 * per_block[fused_proj, fp4_layers]
    assert {r["kind"] for r in s.converted} == {fp4_layers}
    assert len(s.kept) == 4 * (per_block[fused_proj, "attn"] + per_block[fused_proj, "mlp"]) - len(s.converted) + 1  # + head
    fused_name = {"attn": "wqkv", "mlp": "w_gate_up"}[fp4_layers]
    assert any(r["name"].endswith(fused_name) for r in s.converted) == fused_proj
    assert fcnn.layer_kind("wqkv") == fcnn.layer_kind("qkv_proj") == "attn"
    assert fcnn.layer_kind("w_gate_up") == fcnn.layer_kind("gate_up_proj") == "mlp"


def test_moe_experts_are_fused_and_mlp():
    torch.manual_seed(0)
    model = Transformer(model_config("moe-tiny"))
    s = fc.convert(model, fc.recipe("ue5m3", fp4_layers="mlp"))
    experts = [r for r in s.converted if ".experts." in r["name"]]
    assert len(experts) == 2 * 4 * 2  # blocks x experts x (w_gate_up, w_down)
    assert "blocks.1.mlp.experts.3.w_gate_up" in {r["name"] for r in experts}
    assert "router" in {r["name"]: r["reason"] for r in s.kept}["blocks.0.mlp.router"]


def test_a_saved_config_without_the_field_is_unfused():
    new = RunConfig(model=model_config("tiny")).to_dict()
    assert new["model"]["fused_proj"] is True
    assert RunConfig.from_dict(new).model.fused_proj is True
    old = json.loads(json.dumps(new))
    del old["model"]["fused_proj"]
    assert RunConfig.from_dict(old).model.fused_proj is False
    assert ModelConfig.from_dict(old["model"]).fused_proj is False
    explicit = json.loads(json.dumps(new))
    explicit["model"]["fused_proj"] = False
    assert RunConfig.from_dict(explicit).model.fused_proj is False
    # profiles carry the model too (--other-from compares them)
    assert project._model_of({"model": old["model"]}) == project._model_of({"model": explicit["model"]})
    assert project._model_of({"model": old["model"]}) != project._model_of({"model": new["model"]})


@pytest.fixture(scope="module")
def text(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    corpus = shared_data / "corpus"
    (d / "train.txt").write_bytes((corpus / "train" / "gutenberg.txt").read_bytes()[:100_000])
    (d / "val.txt").write_bytes((corpus / "val" / "gutenberg.txt").read_bytes()[:20_000])
    return d


def _cfg(text, cache, steps, fused_proj=True):
    return RunConfig(
        recipe=fc.recipe("bf16").to_dict(),
        model=model_config(f"tiny,n_layers=1,fused_proj={fused_proj}"),
        model_name="tiny,n_layers=1",
        data=DataConfig(path=str(text / "train.txt"), val_path=str(text / "val.txt"), cache_dir=str(cache)),
        train=TrainConfig(steps=steps, batch=2, seq=64, eval_every=0, eval_batches=1, ckpt_every=2, progress=False),
    )


def test_resuming_a_run_folder_that_predates_the_field(text, tmp_path):
    # A run trained unfused whose config.json has no fused_proj (as written before the
    # field existed) resumes, from today's default config, as the unfused model it was.
    out = tmp_path / "old"
    train(_cfg(text, tmp_path / "cache", 2, fused_proj=False), out)
    saved = json.loads((out / "config.json").read_text())
    del saved["model"]["fused_proj"]
    (out / "config.json").write_text(json.dumps(saved))
    cfg = _cfg(text, tmp_path / "cache", 3)
    logs = []
    summary = train(cfg, out, resume=True, log=logs.append)
    assert summary["steps"] == 3 and len(run.read_metrics(out)[0]) == 3
    assert cfg.model.fused_proj is False and any("model.fused_proj=False" in line for line in logs)
    assert json.loads((out / "config.json").read_text())["model"]["fused_proj"] is False
    from safetensors import safe_open

    with safe_open(str(checkpoint.path_of(out)), framework="pt") as f:
        keys = set(f.keys())
    assert "model/blocks.0.attn.wq.weight" in keys and not any("wqkv" in k for k in keys)
    # ... and, its config.json now saying so, resumes again from the default config
    assert train(_cfg(text, tmp_path / "cache", 4), out, resume=True)["steps"] == 4
    # other model fields still have to match
    with pytest.raises(fc.TrainError, match="model differs.*n_layers"):
        bigger = _cfg(text, tmp_path / "cache", 6)
        bigger.model.n_layers = 2
        train(bigger, out, resume=True)
