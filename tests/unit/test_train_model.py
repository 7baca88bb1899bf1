"""The decoder and its MoE variant: shapes, parameter counts, RoPE, routing, presets."""

import math

import pytest
import torch

from fourcast.errors import TrainError
from fourcast.train.config import MODEL_PRESETS, ModelConfig, RunConfig, apply_sets, model_config
from fourcast.train.model import MoE, Transformer, apply_rope, rope_tables


def test_param_count_matches_the_config():
    for spec in ("tiny", "moe-tiny", "tiny,d_model=96,n_heads=3,ffn_hidden=256,n_layers=2"):
        cfg = model_config(spec)
        model = Transformer(cfg)
        assert sum(p.numel() for p in model.parameters()) == cfg.n_params(), spec


def test_presets_span_tiny_to_350m():
    sizes = {name: ModelConfig(**f, vocab_size=16384).n_params() for name, f in MODEL_PRESETS.items()}
    assert sizes["tiny"] < 3e6
    assert 3.2e8 < sizes["350m"] < 3.8e8
    assert 1.0e8 < sizes["125m"] < 1.3e8
    for name, fields in MODEL_PRESETS.items():
        ModelConfig(**fields).check()


def test_forward_shapes_and_initial_loss_near_uniform():
    torch.manual_seed(0)
    cfg = model_config("tiny")
    model = Transformer(cfg)
    x = torch.randint(0, 256, (2, 32))
    logits, loss = model(x, x)
    assert logits.shape == (2, 32, cfg.padded_vocab)
    assert abs(loss.item() - math.log(cfg.padded_vocab)) < 0.1


def test_causal():
    torch.manual_seed(0)
    model = Transformer(model_config("tiny"))
    x = torch.randint(0, 256, (1, 16))
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % 256
    a, _ = model(x)
    b, _ = model(y)
    assert torch.equal(a[0, :10], b[0, :10])
    assert not torch.equal(a[0, 10:], b[0, 10:])


def test_rope_is_a_rotation_by_relative_position():
    cos, sin = rope_tables(8, 32, 10000.0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(i, j):
        qi = apply_rope(q.expand(1, 1, 32, 8), cos, sin)[0, 0, i]
        kj = apply_rope(k.expand(1, 1, 32, 8), cos, sin)[0, 0, j]
        return (qi * kj).sum()

    assert torch.allclose(score(5, 3), score(12, 10), atol=1e-5)
    norm = apply_rope(q.expand(1, 1, 32, 8), cos, sin).norm(dim=-1)
    assert torch.allclose(norm, q.norm().expand_as(norm), atol=1e-5)


def test_moe_routes_top_k_and_padding_changes_nothing():
    torch.manual_seed(0)
    cfg = model_config("moe-tiny")
    moe = MoE(cfg)
    x = torch.randn(3, 10, cfg.d_model)
    padded = moe(x)
    moe.multiple = 1  # no zero-row padding
    plain = moe(x)
    assert torch.allclose(padded, plain, atol=1e-6)
    # each token's output is the gate-weighted sum of its top-k experts
    flat = x.reshape(-1, cfg.d_model)
    probs = torch.softmax(moe.router(flat), -1)
    p, i = probs.topk(cfg.top_k, -1)
    p = p / p.sum(-1, keepdim=True)
    t = 7
    expect = sum(p[t, s] * moe.experts[int(i[t, s])](flat[t : t + 1])[0] for s in range(cfg.top_k))
    assert torch.allclose(plain.reshape(-1, cfg.d_model)[t], expect, atol=1e-6)
    # balance loss: E * sum(share * mean prob) >= 1, equality when perfectly balanced
    assert moe.aux_loss.item() >= 1.0 - 1e-6


def test_moe_model_loss_includes_the_balance_term():
    torch.manual_seed(0)
    model = Transformer(model_config("moe-tiny"))
    x = torch.randint(0, 256, (2, 32))
    _, loss = model(x, x)
    parts = model.last_losses
    assert torch.allclose(loss, parts["ce"] + model.cfg.moe_aux_weight * parts["aux"])
    loss.backward()
    assert model.blocks[0].mlp.router.weight.grad is not None


def test_model_spec_errors():
    with pytest.raises(TrainError, match="unknown model preset 'huge'.*tiny"):
        model_config("huge")
    with pytest.raises(TrainError, match="multiple of 32"):
        model_config("tiny,d_model=48,n_heads=2")
    with pytest.raises(TrainError, match="no field 'width'"):
        model_config("tiny,width=3")
    with pytest.raises(TrainError, match="expected"):
        model_config("tiny,n_layers=two")
    assert model_config("n_layers=1").d_model == 64


def test_apply_sets_converts_types():
    cfg = RunConfig()
    apply_sets(cfg, {"train.warmup_steps": "7", "train.autocast": "false", "data.val_path": "none", "train.lr": "1e-3"})
    assert cfg.train.warmup_steps == 7 and cfg.train.autocast is False and cfg.data.val_path is None
    assert cfg.train.lr == 1e-3
    with pytest.raises(TrainError, match="no training field"):
        apply_sets(cfg, {"optim.lr": "1"})


def _moe_nonzero_per_expert(moe, x):
    """MoE.forward as it was before the sort-and-split grouping: a nonzero per expert."""
    flat = x.reshape(-1, x.shape[-1])
    k = moe.top_k
    probs = torch.softmax(moe.router(flat).float(), dim=-1)
    top_p, top_i = probs.topk(k, dim=-1)
    top_p = top_p / top_p.sum(-1, keepdim=True)
    slots = torch.zeros(flat.shape[0] * k, flat.shape[1])
    for e, expert in enumerate(moe.experts):
        where = (top_i.flatten() == e).nonzero().squeeze(1)
        if where.numel():
            tokens = flat[where // k]
            tokens = torch.cat([tokens, tokens.new_zeros(-where.numel() % moe.multiple, flat.shape[1])])
            out = expert(tokens)[: where.numel()]
            slots = slots.index_put((where,), out * top_p.flatten()[where, None])
    return slots.view(flat.shape[0], k, -1).sum(1).view(x.shape)


def test_moe_grouping_equals_a_nonzero_per_expert():
    """The sort-and-split grouping (one host sync per layer) gives the same bits as
    selecting each expert's assignments with a nonzero (one sync per expert), forward
    and every gradient."""
    torch.manual_seed(1)
    moe = MoE(model_config("moe-tiny"))
    x = torch.randn(4, 16, moe.router.in_features, requires_grad=True)
    g = torch.randn(4, 16, moe.router.in_features)
    runs = []
    for forward in (moe, lambda t: _moe_nonzero_per_expert(moe, t)):
        x.grad = None
        moe.zero_grad()
        y = forward(x)
        y.backward(g)
        runs.append([y.detach(), x.grad.clone()] + [p.grad.clone() for p in moe.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
