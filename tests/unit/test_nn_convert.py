"""convert(model, recipe): which linears become QLinear, which stay, and why."""

import pytest
import torch

import fourcast as fc
from fourcast import nn as fcnn
from fourcast.errors import RecipeError, ShapeError
from fourcast.train.config import model_config
from fourcast.train.model import Transformer


def _model(spec="tiny"):
    torch.manual_seed(0)
    return Transformer(model_config(spec))


def _names(rows):
    return {r["name"] for r in rows}


def test_nvfp4_keeps_last_blocks_and_head():
    model = _model()  # 4 blocks of wqkv, wo, w_gate_up, w_down
    params_before = {id(p) for p in model.parameters()}
    s = fc.convert(model, fc.recipe("nvfp4"))
    assert {r["name"].split(".")[1] for r in s.converted} == {"0", "1"}
    assert len(s.converted) == 8
    kept = {r["name"]: r["reason"] for r in s.kept}
    assert kept["head"].startswith("outside the blocks")
    assert "keep_bf16_last=2" in kept["blocks.3.mlp.w_down"]
    assert isinstance(model.blocks[0].attn.wqkv, fcnn.QLinear)
    assert type(model.blocks[2].attn.wqkv) is torch.nn.Linear
    assert type(model.head) is torch.nn.Linear
    # parameters are shared, not copied: an optimizer built before still points at them
    assert {id(p) for p in model.parameters()} == params_before
    assert model.blocks[0].attn.wqkv.layer_name == "blocks.0.attn.wqkv"
    assert "2 blocks" not in str(s) and "keep_bf16_last=2" in str(s)


def test_layer_ids_are_distinct_and_stable():
    a, b = _model(), _model()
    fc.convert(a, "ue5m3")
    fc.convert(b, "ue5m3")
    ids = [m.layer_id for m in fcnn.qlinears(a)]
    assert len(set(ids)) == len(ids) == 16
    assert ids == [m.layer_id for m in fcnn.qlinears(b)]


def test_fp4_layers_mlp_with_fp8_others():
    model = _model()
    s = fc.convert(model, fc.recipe("ue5m3", fp4_layers="mlp", other_precision="fp8"))
    by_name = {r["name"]: r["recipe"] for r in s.converted}
    assert by_name["blocks.1.mlp.w_gate_up"] == "ue5m3"
    assert by_name["blocks.1.attn.wqkv"] == "fp8"
    assert model.blocks[1].attn.wqkv.recipe.name == "fp8"
    assert _names(s.kept) == {"head"}


def test_fp4_layers_attn_with_bf16_others():
    model = _model()
    s = fc.convert(model, fc.recipe("ufp4", fp4_layers="attn"))
    assert all(".attn." in r["name"] for r in s.converted)
    assert any("fp4_layers=attn" in r["reason"] for r in s.kept)
    assert type(model.blocks[0].mlp.w_gate_up) is torch.nn.Linear


def test_keep_first_and_quantize_head():
    model = _model()
    s = fc.convert(model, fc.recipe("mxfp4", keep_bf16_first=1, quantize_head=True))
    names = _names(s.converted)
    assert "head" in names and not any(n.startswith("blocks.0.") for n in names)
    assert isinstance(model.head, fcnn.QLinear)


def test_bf16_recipe_converts_nothing():
    model = _model()
    s = fc.convert(model, "bf16")
    assert s.converted == [] and len(s.kept) == 17
    assert not fcnn.qlinears(model)


def test_moe_router_stays_experts_convert():
    model = _model("moe-tiny")
    s = fc.convert(model, "ue5m3")
    kept = {r["name"]: r["reason"] for r in s.kept}
    assert "router" in kept["blocks.0.mlp.router"]
    assert "blocks.1.mlp.experts.3.w_down" in _names(s.converted)
    assert all(r["kind"] == "mlp" for r in s.converted if ".experts." in r["name"])


def test_any_model_without_blocks():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    s = fc.convert(model, "ue5m3")
    assert [r["name"] for r in s.converted] == ["0", "2"]
    with pytest.raises(RecipeError, match="no block list.*keep_bf16_last=0"):
        fc.convert(torch.nn.Sequential(torch.nn.Linear(64, 64)), "nvfp4")
    # an explicit block list works for any model
    again = fc.convert(model, "ue5m3")
    assert [r["reason"] for r in again.kept] == ["already a QLinear (ue5m3)"] * 2
    # an explicit block list works for any model
    fresh = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    s = fc.convert(fresh, fc.recipe("nvfp4", keep_bf16_last=1), blocks=torch.nn.ModuleList([fresh[0], fresh[2]]))
    assert [r["name"] for r in s.kept] == ["2"] and [r["name"] for r in s.converted] == ["0"]


def test_converted_model_still_trains_the_same_parameters():
    model = _model("tiny,n_layers=1")
    fc.convert(model, "mxfp4")
    x = torch.randint(0, 256, (2, 64))
    _, loss = model(x, x)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_layer_that_does_not_fit_the_blocks_is_named():
    model = torch.nn.Sequential(torch.nn.Linear(64, 40))
    with pytest.raises(ShapeError, match="'?0'?: dgrad.dy.*40.*multiple of 16"):
        fc.convert(model, fc.recipe("ufp4"))
