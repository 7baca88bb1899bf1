"""QLinear: output and all three gradients equal a float64 computation on the same
quantized operands (exact emulation), for every recipe preset and GEMM path; saved
activations are packed; seeds and the periodic tensor scale behave as documented."""

import dataclasses
import gc
import weakref

import pytest
import torch

import fourcast as fc
from fourcast import nn as fcnn
from fourcast.errors import RecipeError, ShapeError
from fourcast.kernels import ops

PRESETS = fc.recipes.names()
FOUR_BIT = [n for n in PRESETS if n not in ("bf16", "fp8", "mxfp8")]
M, K, N = 64, 64, 32  # tokens, in_features, out_features
SEED, LAYER, STEP = 11, 5, 7


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g) * 3
    w = torch.randn(N, K, generator=g) * 0.1
    b = torch.randn(N, generator=g)
    gy = torch.randn(M, N, generator=g) * 1e-3
    return x, w, b, gy


def _layer(recipe, w, b, path="dequant"):
    layer = fcnn.QLinear(K, N, bias=True, recipe=recipe, layer_id=LAYER, seed=SEED, gemm_path=path)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    layer.step = STEP
    return layer


def _run(layer, x, gy):
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(gy)
    return y.detach(), x.grad, layer.weight.grad, layer.bias.grad


def _operand64(r, t, key, axis, tensor_amax=None):
    """The operand as the recipe quantizes it, decoded exactly in float64:
    value(code) * scale / tensor_scale (RHT applied, basis kept rotated)."""
    gemm = key.split(".")[0]
    rht = None
    if r.rht_on(gemm):
        n, policy = r.rht["size"], r.rht["signs"]
        rht = (n, ops.rht_signs(n, policy, fcnn.rht_seed(r.rht["seed"], LAYER, STEP, policy)))
    fmt = r.operand(key)
    if fmt is None:
        return t.double() if rht is None else ops.rht(t, rht[0], rht[1], axis=axis).double()
    p = ops.quantize(
        t,
        fmt,
        axis=axis,
        rounding=fcnn.SR_ROUNDING[r.sr_stream] if r.sr_on(key) else "rtne",
        seed=fcnn.operand_seed(SEED, LAYER, STEP, key),
        offset=t.numel() if axis == 0 else 0,  # the column-wise copy's SR stream
        rht=rht,
        tensor_amax=tensor_amax,
    )
    unit = dataclasses.replace(p, tensor_scale=torch.ones_like(p.tensor_scale))
    return ops.dequantize(unit, torch.float32).double() / p.tensor_scale.double()


def _reference(r, x, w, b, gy):
    """y = X W^T + b, dx = dY W, dw = dY^T X in float64 on the quantized operands."""
    X, W = _operand64(r, x, "fprop.x", -1), _operand64(r, w, "fprop.w", -1)
    dY, Wc = _operand64(r, gy, "dgrad.dy", -1), _operand64(r, w, "dgrad.w", 0)
    dYc, Xc = _operand64(r, gy, "wgrad.dy", 0), _operand64(r, x, "wgrad.x", 0)
    pairs = {
        "y": (X, W.t()),
        "dx": (dY, Wc),
        "dw": (dYc.t(), Xc),
    }
    out = {name: (a @ bb, a.abs() @ bb.abs(), a.shape[1]) for name, (a, bb) in pairs.items()}
    out["y"] = (out["y"][0] + b.double(), out["y"][1] + b.double().abs(), out["y"][2])
    return out


def _assert_within(got, ref, name):
    """|got - exact| <= (K + 4) * 2^-24 * (|A| @ |B|): FP32 accumulation of exact
    products plus the tensor-scale divisions; any operand quantized differently
    (another code, scale, seed or axis) misses this by orders of magnitude."""
    exact, mag, k = ref
    bound = (k + 4) * 2.0**-24 * mag + 1e-30
    err = (got.double() - exact).abs()
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"{name}: error {worst:.3g}x the FP32 accumulation bound"
    return exact, bound


@pytest.mark.parametrize("name", PRESETS)
def test_qlinear_is_exact_emulation(name):
    r = fc.recipe(name)
    x, w, b, gy = _inputs()
    y, dx, dw, db = _run(_layer(r, w, b), x, gy)
    ref = _reference(r, x, w, b, gy)
    _assert_within(y, ref["y"], "y")
    _assert_within(dx, ref["dx"], "dx")
    exact, bound = _assert_within(dw, ref["dw"], "dw")
    assert torch.equal(db, gy.sum(0))
    if r.is_quantized:
        # The check is sharp: the unquantized product misses the bound by far.
        plain = gy.double().t() @ x.double()
        assert ((plain - exact).abs() / bound).max() > 100


@pytest.mark.parametrize("name,stream", [("nvfp4", "x4"), ("ufp4", "x4"), ("ue5m3", "x16"), ("nvfp4", "x16")])
def test_qlinear_sr4_stream_is_exact_emulation(name, stream):
    """sr_stream = "x4" / "x16": the SR operands use rounding "sr4" / "sr16", and the layer
    still equals the float64 product of its operands; the draws (so dw) differ from the
    default stream."""
    r = fc.recipe(name, {"sr_stream": stream})
    x, w, b, gy = _inputs(3)
    y, dx, dw, _ = _run(_layer(r, w, b), x, gy)
    ref = _reference(r, x, w, b, gy)
    _assert_within(y, ref["y"], "y")
    _assert_within(dx, ref["dx"], "dx")
    _assert_within(dw, ref["dw"], "dw")
    assert not torch.equal(dw, _run(_layer(fc.recipe(name), w, b), x, gy)[2])
    with pytest.raises(fc.errors.RecipeError, match="sr_stream"):
        fc.recipe(name, {"sr_stream": "x8"})


@pytest.mark.parametrize("name", FOUR_BIT)
def test_packed_gemm_path_is_exact_emulation(name):
    r = fc.recipe(name)
    x, w, b, gy = _inputs(1)
    y, dx, dw, _ = _run(_layer(r, w, b, path="packed"), x, gy)
    ref = _reference(r, x, w, b, gy)
    _assert_within(y, ref["y"], "y")
    _assert_within(dx, ref["dx"], "dx")
    _assert_within(dw, ref["dw"], "dw")


@pytest.mark.parametrize("name", PRESETS)
def test_fused_path_equals_dequant_path_bit_for_bit(name):
    r = fc.recipe(name)
    x, w, b, gy = _inputs(2)
    want = _run(_layer(r, w, b), x, gy)
    got = _run(_layer(r, w, b, path="fused"), x, gy)
    for g, e in zip(got, want):
        assert torch.equal(g, e)


@pytest.mark.parametrize("name", ["bf16", "fp8", "mxfp8"])
def test_packed_path_refuses_non_fp4_recipes(name):
    with pytest.raises(RecipeError, match="gemm_path 'packed' runs block-scaled 4-bit GEMMs only"):
        fcnn.QLinear(K, N, recipe=fc.recipe(name), gemm_path="packed")


def test_unknown_gemm_path():
    with pytest.raises(RecipeError, match="gemm_path must be one of"):
        fcnn.QLinear(K, N, recipe="nvfp4", gemm_path="cutlass")


def test_fake_path_matches_dequant_path_in_fp32():
    # In FP32 fake_quant's x_hat = q*s/S_enc is what dequant's split computes, up to
    # the FP32 rounding of that division: same bound.
    r = fc.recipe("ufp4")
    x, w, b, gy = _inputs(2)
    y, dx, dw, _ = _run(_layer(r, w, b, path="fake"), x, gy)
    ref = _reference(r, x, w, b, gy)
    _assert_within(y, ref["y"], "y")
    _assert_within(dx, ref["dx"], "dx")
    _assert_within(dw, ref["dw"], "dw")


def test_operand_with_no_format_is_rotated_with_its_partner():
    # x left unquantized while RHT is on: the bf16 X is rotated like W so the GEMM stays right.
    r = fc.recipe("ufp4", x="none")
    x, w, b, gy = _inputs(3)
    y, dx, dw, _ = _run(_layer(r, w, b), x, gy)
    ref = _reference(r, x, w, b, gy)
    _assert_within(y, ref["y"], "y")
    _assert_within(dw, ref["dw"], "dw")


def test_saves_packed_activation_not_the_input():
    layer = _layer(fc.recipe("nvfp4"), *_inputs()[1:3])
    a = torch.randn(M, K, requires_grad=True)
    x = a * 1.0  # an intermediate: only the graph could keep it alive
    ref = weakref.ref(x)
    y = layer(x)
    del x
    gc.collect()
    assert ref() is None, "QLinear kept the high-precision input alive"
    # column-wise E2M1 codes (K x M/2 bytes) + one E4M3 scale per 16 tokens
    assert layer.saved_bytes == K * M // 2 + K * M // 16
    assert layer.bf16_bytes == 2 * M * K
    report = fcnn.memory_report(torch.nn.Sequential(layer))
    assert report["bytes_saved"] == 2 * M * K - layer.saved_bytes
    y.sum().backward()
    assert a.grad is not None


def test_seeds_follow_the_documented_mix():
    assert fcnn.mix(1, 2) != fcnn.mix(2, 1)
    # one seed per tensor (x 1, w 2, dy 3 after the +1); copies differ by offset
    assert fcnn.operand_seed(0, 1, 2, "wgrad.x") == fcnn.operand_seed(0, 1, 2, "fprop.x") == fcnn.mix(0, 1, 2, 1)
    assert fcnn.operand_seed(0, 1, 2, "dgrad.w") == fcnn.mix(0, 1, 2, 2)
    assert fcnn.operand_seed(0, 1, 2, "wgrad.dy") == fcnn.mix(0, 1, 2, 3)
    assert fcnn.operand_seed(0, 1, 2, "fprop.x", rank=3) == fcnn.mix(fcnn.mix(0, 1, 2, 1), 3)
    assert [fcnn.operand_offset(k, 100) for k in fcnn.ROLES] == [0, 0, 0, 100, 100, 100]
    assert 0 <= fcnn.mix(2**64 - 1, 5) < 2**63
    assert fcnn.rht_seed(9, 4, 100, "te") == 0
    assert fcnn.rht_seed(9, 4, 100, "per-layer") == fcnn.rht_seed(9, 4, 7, "per-layer")
    assert fcnn.rht_seed(9, 4, 100, "per-step") != fcnn.rht_seed(9, 4, 7, "per-step")


def test_sr_changes_with_step_and_repeats_for_the_same_step():
    r = fc.recipe("nvfp4")  # SR on dY
    x, w, b, gy = _inputs()
    layer = _layer(r, w, b)
    first = _run(layer, x, gy)[1]
    layer.weight.grad = None
    again = _run(layer, x, gy)[1]
    layer.weight.grad = None
    layer.step = STEP + 1
    other = _run(layer, x, gy)[1]
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_periodic_tensor_scale_uses_the_stored_amax():
    r = fc.recipe("ue5m3")  # tensor_scale_refresh = 10
    assert r.tensor_scale_refresh == 10
    x, w, b, gy = _inputs()
    layer = _layer(r, w, b)
    layer.step = 10  # a refresh step: measure and store
    _run(layer, x, gy)
    stored = layer.tensor_amax.clone()
    slot = fcnn.ROLE_INDEX["fprop.x"]
    assert stored[slot] == x.abs().max()
    assert stored[fcnn.ROLE_INDEX["wgrad.dy"]] == gy.abs().max()
    layer.step = 11  # not a refresh step: the stored amax is passed in, nothing changes
    big = x * 4
    layer.weight.grad = None
    y = _run(layer, big, gy)[0]
    assert torch.equal(layer.tensor_amax, stored)
    fmt = r.operand("fprop.x")
    kw = dict(seed=fcnn.operand_seed(SEED, LAYER, 11, "fprop.x"))
    with_stored = ops.quantize(big, fmt, tensor_amax=stored[slot], **kw)
    measured = ops.quantize(big, fmt, **kw)
    assert not torch.equal(with_stored.scales, measured.scales)
    w_q = ops.quantize(w, r.operand("fprop.w"), tensor_amax=stored[fcnn.ROLE_INDEX["fprop.w"]], **kw)
    expect = ops.dequantize(with_stored, torch.float32).double() @ ops.dequantize(w_q, torch.float32).double().t()
    assert torch.allclose(y.double(), expect + b.double(), rtol=0, atol=1e-4)
    # The buffer survives a checkpoint: a fresh layer that loads it uses it at once.
    fresh = _layer(r, w, b)
    fresh.load_state_dict(layer.state_dict())
    fresh.step = 11
    assert torch.equal(_run(fresh, big, gy)[0], y)


def test_eval_pass_does_not_touch_the_stored_amax():
    r = fc.recipe("ue5m3")
    x, w, b, _ = _inputs()
    layer = _layer(r, w, b)
    layer.step = 0
    with torch.no_grad():
        layer(x)
    assert torch.equal(layer.tensor_amax, torch.zeros(6))


def test_shape_errors_name_the_layer():
    with pytest.raises(ShapeError, match="blocks.3.mlp.w_up.*multiple of 16"):
        fcnn.QLinear(40, 32, recipe="nvfp4", name="blocks.3.mlp.w_up")
    with pytest.raises(ShapeError, match="multiple of 32"):
        fcnn.QLinear(48, 32, recipe="mxfp4")
    layer = fcnn.QLinear(64, 32, recipe="nvfp4", name="lin")
    with pytest.raises(ShapeError, match="lin: 40 tokens.*multiple of 16"):
        layer(torch.randn(40, 64))
    with torch.no_grad():  # a forward alone (evaluation) has no token rule
        assert layer(torch.randn(40, 64)).shape == (40, 32)


class _Recorder:
    def __init__(self):
        self.ops = []
        self.outputs = {}

    def begin(self, kind, meta):
        self.ops.append((kind, meta.get("operand") or meta.get("role")))
        self.outputs[meta.get("operand")] = meta.get("outputs")
        return None

    def end(self, token):
        pass


def _recorded(name: str, path: str) -> _Recorder:
    """The ops one fwd+bwd of a layer with recipe `name` on gemm path `path` traced."""
    x, w, b, gy = _inputs()
    layer = _layer(fc.recipe(name), w, b, path=path)
    rec = _Recorder()
    fcnn.set_tracer(rec)
    try:
        _run(layer, x, gy)
    finally:
        fcnn.set_tracer(None)
    return rec


@pytest.mark.parametrize(
    "name, quantized",
    [
        ("nvfp4", {"fprop.x+wgrad.x", "fprop.w", "dgrad.dy+wgrad.dy"}),  # 2D-tiled W reused for Dgrad
        ("mxfp4", {"fprop.x+wgrad.x", "fprop.w+dgrad.w", "dgrad.dy+wgrad.dy"}),
    ],
)
def test_each_tensor_is_quantized_in_one_pass(name, quantized):
    rec = _recorded(name, "dequant")
    assert {op for kind, op in rec.ops if kind == "quantize"} == quantized
    assert [op for kind, op in rec.ops if kind == "gemm"] == ["fprop", "dgrad", "wgrad"]


@pytest.mark.parametrize("name, w_outputs", [("nvfp4", "decoded"), ("mxfp4", "decoded+decoded")])
def test_fused_path_records_what_each_quantize_pass_wrote(name, w_outputs):
    """The fused path's quantize ops say which copies were written as decoded values (the
    hardware model prices those as bf16 writes): the weight decoded in its own pass (2-D
    tiles: one copy for Fprop and Dgrad; 1-D: both), X's row decoded beside its packed column
    (saved for Wgrad), both of dY's copies decoded."""
    rec = _recorded(name, "fused")
    w_key = "fprop.w" if name == "nvfp4" else "fprop.w+dgrad.w"
    assert rec.outputs[w_key] == w_outputs
    assert rec.outputs["fprop.x+wgrad.x"] == "decoded+packed"
    assert rec.outputs["dgrad.dy+wgrad.dy"] == "decoded+decoded"
