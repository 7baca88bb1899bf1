"""benchmarks/peers.py, the PyTorch peers the quantizer target is measured against, does the
same work as fourcast: its RTNE copies equal the reference's bytes, its RHT and SR copies
stay within one grid step of fourcast's (they differ only in the RHT's float order and the
random stream)."""

import importlib.util
import pathlib

import pytest
import torch

from fourcast.kernels import reference as ref
from fourcast.kernels import testing

ROOT = pathlib.Path(__file__).resolve().parents[2]
NV = testing.FORMATS["nvfp4"]


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers_under_test", ROOT / "benchmarks/peers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inputs():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 96, generator=g)
    heavy = x * torch.exp(2 * torch.randn(64, 96, generator=g))
    ties = x.clone()  # re-quantized data: values on the grid's rounding ties
    ties[:, :48] = torch.randint(-12, 13, (64, 48), generator=g) * 0.25
    zeros = x.clone()
    zeros[3, 16:32] = 0  # a block whose scale is zero
    # 2688 / 4.09375 rounds to 656.61066 in f32; 2688 * (1 / 4.09375) (what `2688.0 / t` runs in
    # PyTorch) is one ulp above, and 1.0234375 then lands on the E2M1 tie 3.5 instead of below it
    ulp = x.clamp(-1, 1)
    ulp[0, 0] = 4.09375
    ulp[1, 16:32] = torch.tensor([-0.098, 0.486, 0.707, 0.043, -0.439, -0.676, 1.7421875, -0.941, -1.0625, -0.229,
                                  -1.2578125, 0.559, 0.157, 1.0234375, 1.2265625, -0.001])
    return {"normal": x, "heavy": heavy, "ties": ties, "zero block": zeros, "tensor scale ulp": ulp}


def packed(p):
    return p.codes, p.scales


@pytest.mark.parametrize("name", ["normal", "heavy", "ties", "zero block", "tensor scale ulp"])
@pytest.mark.parametrize("delayed", [False, True])
def test_rtne_rowcol_peer_equals_reference_bytes(peers, name, delayed):
    x = inputs()[name].to(torch.bfloat16)
    amax = x.float().abs().amax() * 1.5 if delayed else None
    row, col = peers.nvfp4_rowcol(x, amax)
    for got, axis in ((row, -1), (col, 0)):
        want = packed(ref.quantize(x, NV, axis=axis, tensor_amax=amax))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), axis


def test_fake_quant_and_pack_peers_equal_reference(peers):
    x = inputs()["ties"].to(torch.bfloat16)
    p = ref.quantize(x, NV)
    assert torch.equal(peers.nvfp4_fake_quant(x), ref.dequantize(p))
    assert all(torch.equal(a, b) for a, b in zip(peers.nvfp4_pack(x), packed(p)))


def test_rht_and_sr_peers_stay_within_one_step(peers):
    x = inputs()["normal"].to(torch.bfloat16)
    amax = x.float().abs().amax()
    h = peers.hadamard16()
    torch.manual_seed(0)
    row, col = peers.nvfp4_rowcol(x, amax, rht_col=h, sr=True)
    ours_row = packed(ref.quantize(x, NV, rounding="sr", seed=1, tensor_amax=amax))
    ours_col = packed(ref.quantize(x, NV, axis=0, rounding="sr", seed=1, rht=(16, ref.rht_signs(16, "te")),
                                   tensor_amax=amax))
    a_row, a_col = peers.agreement(row, ours_row), peers.agreement(col, ours_col)
    assert a_row["scales_equal"] == 1.0 and a_row["within_one_step"]
    assert a_col["within_one_step"] and a_col["scales_equal"] > 0.95
    assert 0.5 < a_row["codes_equal"] < 1.0  # two random streams: many, not all, codes agree


def test_rht_matrix_is_the_reference_rht(peers):
    x = torch.randn(8, 32)
    got = (x.reshape(-1, 16) @ peers.hadamard16()).reshape(8, 32)
    want = ref.rht(x, 16, ref.rht_signs(16, "te"))
    assert torch.allclose(got, want, rtol=0, atol=1e-5)


def test_agreement_counts_one_step_gaps(peers):
    codes = torch.tensor([[0x21, 0x00]], dtype=torch.uint8)  # elements 1, 2, 0, 0
    scales = torch.zeros(1, 1, dtype=torch.uint8)
    near = torch.tensor([[0x32, 0x08]], dtype=torch.uint8)  # 2, 3, 0, -0: each within one step
    far = torch.tensor([[0x21, 0x0A]], dtype=torch.uint8)  # 1, 2, -2, 0: two steps from 0
    a = peers.agreement((near, scales), (codes, scales), block=4)
    assert a["within_one_step"] and a["codes_equal"] == 0.25
    assert not peers.agreement((far, scales), (codes, scales), block=4)["within_one_step"]
    other_scale = torch.ones(1, 1, dtype=torch.uint8)  # gaps under a different scale byte are not counted
    assert peers.agreement((far, other_scale), (codes, scales), block=4)["within_one_step"]


@pytest.mark.parametrize("rht, sr", [(False, False), (True, True)])
def test_peer_traces_as_one_graph(peers, rht, sr):
    """kernel_bench/against_peers.py compiles the peer with fullgraph=True: a graph break would be an error there."""
    x = inputs()["normal"].to(torch.bfloat16)
    args = (x, x.float().abs().amax(), peers.hadamard16() if rht else None, sr)
    torch._dynamo.reset()
    got = torch.compile(peers.nvfp4_rowcol, dynamic=False, fullgraph=True, backend="eager")(*args)
    want = peers.nvfp4_rowcol(*args)
    assert all(a.shape == b.shape and a.dtype == b.dtype for g, w in zip(got, want) for a, b in zip(g, w))
