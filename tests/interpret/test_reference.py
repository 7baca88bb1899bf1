"""The PyTorch reference (fourcast.kernels.reference) against numerics.md directly and
against the Rust codec (fc.quantize / fc.rht / fc.philox) bit for bit."""

import itertools

import ml_dtypes
import numpy as np
import pytest
import torch

import fourcast as fc
from fourcast.kernels import reference as ref
from fourcast.kernels import testing
from fourcast.kernels.utils import GRIDS, SCALE_GRIDS

pytestmark = pytest.mark.interpret

RUST_FORMATS = {k: v for k, v in testing.FORMATS.items() if v["element"] not in ("e4m3", "e5m2")}


def to_fc(f):
    return fc.Format(element=f["element"], scale=f["scale"], block=(16, 16) if f["tile_2d"] else f["block"],
                     rule=f["rule"])


def test_philox_known_answers():
    hexes = lambda ws: [format(int(w), "08x") for w in ws]  # noqa: E731
    z = torch.zeros(1, dtype=torch.int64)
    assert hexes(ref.philox_rounds(z, z, z, z, 0, 0)) == ["6627e8d5", "e169c58d", "bc57ac4c", "9b00dbd8"]
    o = torch.full((1,), 0xFFFFFFFF, dtype=torch.int64)
    assert hexes(ref.philox_rounds(o, o, o, o, 0xFFFFFFFF, 0xFFFFFFFF)) == ["408f276d", "41c83b0e", "a20bc7c6", "6d5451fd"]
    c = [torch.tensor([v], dtype=torch.int64) for v in (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344)]
    assert hexes(ref.philox_rounds(*c, 0xA4093822, 0x299F31D0)) == ["d16cfe09", "94fdcceb", "5001e420", "24126ea1"]
    assert hexes(ref.philox(42, torch.zeros(1, dtype=torch.int64)))[0] == "9ceaf053"
    assert float(ref.uniform(42, torch.zeros(1, dtype=torch.int64))) == pytest.approx(0.77408016, abs=1e-8)


def test_philox_equals_rust_including_64bit_offsets():
    offs = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40 + 7, 2**63 - 1], dtype=torch.int64)
    for seed in (0, 1, 42, 2**32 + 5, 2**63 + 11):
        words = torch.stack(ref.philox(seed, offs), -1).numpy().astype(np.uint32)
        assert np.array_equal(words, fc.philox(seed, offs.numpy().astype(np.uint64)))
        assert np.array_equal(ref.uniform(seed, offs).numpy(), fc.philox_uniform(seed, offs.numpy().astype(np.uint64)))


def test_e2m1_ties_to_even_code():
    # numerics.md: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4; saturate past 6
    a = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], dtype=torch.float32)
    _, v = ref.round_grid(a, GRIDS["e2m1"], "rtne")
    assert v.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0]
    _, v = ref.round_grid(a, GRIDS["e2m1"], "away")
    assert v.tolist() == [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 6.0]


@pytest.mark.parametrize("name,oracle", [("e2m1", ml_dtypes.float4_e2m1fn), ("e4m3", ml_dtypes.float8_e4m3fn),
                                         ("e5m2", ml_dtypes.float8_e5m2)])
def test_grid_rtne_matches_ml_dtypes(name, oracle):
    g = GRIDS[name]
    vals = testing.make_input("heavy", (64, 64), seed=1).abs().reshape(-1) * (g.gmax / 8)
    gv = ref.grid_values(g).abs()
    vals = torch.cat([vals, gv[torch.isfinite(gv)]])
    vals = torch.clamp(vals, max=g.gmax)
    code, v = ref.round_grid(vals, g, "rtne")
    want = vals.numpy().astype(oracle).astype(np.float32)
    assert np.array_equal(v.numpy(), want)
    assert np.array_equal(code.numpy().astype(np.uint8), vals.numpy().astype(oracle).view(np.uint8))


def test_scale_codecs_match_ml_dtypes_and_rust():
    s = torch.cat([torch.logspace(-12, 9, 2000, base=2.0), torch.tensor([448.0, 2.0**-9, 3 * 2.0**-10])])
    e4 = ref.encode_scale(s, "e4m3")
    assert np.array_equal(e4.numpy().astype(np.uint8), np.minimum(s.numpy(), 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    for name, codec in (("e4m3", "ue4m3"), ("ue5m3", "ue5m3")):
        mine = ref.encode_scale(torch.clamp(s, max=SCALE_GRIDS[name].gmax), name).numpy().astype(np.uint8)
        assert np.array_equal(mine, fc.quant.encode(np.minimum(s.numpy(), SCALE_GRIDS[name].gmax), codec))
        nb = 128 if name == "e4m3" else 256  # scale bytes of E4M3 never set bit 7
        assert testing.same_float(ref.decode_scale(torch.arange(nb, dtype=torch.int32), name),
                                  torch.from_numpy(fc.quant.decode(np.arange(nb, dtype=np.uint8), codec)))
    assert testing.same_float(ref.decode_scale(torch.arange(256), "ue8m0"),
                              torch.from_numpy(fc.quant.decode(np.arange(256, dtype=np.uint8), "ue8m0")))


@pytest.mark.parametrize("element", ["e2m1", "e1m2", "int4", "int4-sm"])
def test_element_codes_match_rust_encode_decode(element):
    x = torch.cat([torch.linspace(-8, 8, 4097), torch.tensor([-0.0, 0.0])])
    g = GRIDS[element]
    xc = torch.clamp(x, -g.gmax, g.gmax)
    for mode in ("rtne", "away"):
        mag, _ = ref.round_grid(xc.abs(), g, mode)
        neg = torch.signbit(xc)
        code = torch.where(neg, (-mag) & 0xF, mag) if g.twos else mag | (neg.int() << 3)
        assert np.array_equal(code.numpy().astype(np.uint8), fc.quant.encode(x.numpy(), element, mode))
    assert np.array_equal(ref.grid_values(g).numpy(), fc.quant.decode(np.arange(16, dtype=np.uint8), element))


def test_nvfp4_te_rule_by_hand():
    x = testing.make_input("heavy", (4, 32), seed=2)
    p = ref.quantize(x, testing.FORMATS["nvfp4"])
    f32 = np.float32
    amax = f32(np.abs(x.numpy()).max())
    s_enc = min(f32(2688.0) / amax, f32(np.finfo(np.float32).max))
    assert float(p.tensor_scale) == s_enc and float(p.amax) == amax
    blk = x.numpy().reshape(4, 2, 16)
    s_dec = (np.abs(blk).max(-1) * (f32(s_enc) * f32(1 / 6.0))).astype(f32)
    assert np.array_equal(p.scales.numpy(), s_dec.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    sq = s_dec.astype(ml_dtypes.float8_e4m3fn).astype(f32)
    enc = (f32(1.0) / (sq * (f32(1.0) / s_enc))).astype(f32)
    q = np.clip(blk * enc[..., None], -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(4, 32) & 0xF
    assert np.array_equal(ref.unpack_nibbles(p.codes).numpy(), q)


def test_mx_floor_scale_and_zero_block():
    x = torch.zeros(2, 32)
    x[0, 0] = 6.0  # floor_log2(6) - 2 = 0 -> byte 127
    p = ref.quantize(x, testing.FORMATS["mxfp4"])
    assert p.scales.flatten().tolist() == [127, 0]  # amax = 0 -> smallest scale 2^-127
    assert float(p.tensor_scale) == 1.0


@pytest.mark.parametrize("name", sorted(RUST_FORMATS))
def test_reference_equals_rust_codec(name):
    f = RUST_FORMATS[name]
    for kind, axis, rnd in itertools.product(testing.INPUT_KINDS, (-1, 0), ("rtne", "away", "sr", "sr4", "sr16")):
        x = testing.make_input(kind, (32, 64), seed=7, fmt=f)
        p = ref.quantize(x, f, axis=axis, rounding=rnd, seed=11, offset=5)
        q = fc.quantize(x.numpy(), to_fc(f), axis=axis, rounding=rnd, seed=11, offset=5)
        assert torch.equal(p.codes, torch.from_numpy(q.codes)), (kind, axis, rnd)
        assert torch.equal(p.scales, torch.from_numpy(q.scales)), (kind, axis, rnd)
        assert float(p.tensor_scale) == q.tensor_scale and float(p.amax) == q.amax, (kind, axis, rnd)
        assert testing.same_float(ref.dequantize(p, torch.float32), torch.from_numpy(q.dequantize()))


def test_reference_equals_rust_with_tensor_amax_and_rht():
    f = testing.FORMATS["ufp4"]
    x = testing.make_input("heavy", (64, 64), seed=9)
    p = ref.quantize(x, f, tensor_amax=0.5)
    q = fc.quantize(x.numpy(), to_fc(f), tensor_amax=0.5)
    assert torch.equal(p.codes, torch.from_numpy(q.codes)) and torch.equal(p.scales, torch.from_numpy(q.scales))
    for n, axis in ((16, -1), (32, 0), (64, -1)):
        s = ref.rht_signs(n, "per-layer", 3)
        assert np.array_equal(s.numpy(), fc.rht_signs(n, "per-layer", 3))
        p = ref.quantize(x, f, axis=axis, rht=(n, s), rounding="sr", seed=2)
        q = fc.quantize(fc.rht(x.numpy(), n, s.numpy(), axis=axis), to_fc(f), axis=axis, rounding="sr", seed=2)
        assert torch.equal(p.codes, torch.from_numpy(q.codes)) and torch.equal(p.scales, torch.from_numpy(q.scales))


def test_rht_orthogonal_and_close_to_float64():
    x = testing.make_input("heavy", (8, 128), seed=4)
    for n in (16, 32, 64, 128):
        s = ref.rht_signs(n, "te")
        y = ref.rht(x, n, s)
        h = ref.hadamard_matrix(n, torch.float64) / np.sqrt(n)
        want = ((x.double().reshape(-1, n) * s.double()) @ h).reshape(x.shape)
        assert float((y.double() - want).abs().max() / want.abs().max()) < 2**-23
        back = (y.double().reshape(-1, n) @ h).reshape(x.shape) * s.double().repeat(128 // n)
        assert float((back - x.double()).abs().max()) <= 2**-21 * float(x.abs().max())
    assert ref.rht_signs(32, "te")[16:].tolist() == ref.rht_signs(16, "te").tolist()


def test_sr_statistics(monkeypatch):
    f = testing.FORMATS["nvfp4"]
    x = testing.make_input("random", (16, 64), seed=5)
    xs = [ref.fake_quant(x, f, rounding="sr", seed=s) for s in range(64)]
    # u = 0 always rounds a non-grid magnitude up, u -> 1 never: the two neighbours
    monkeypatch.setattr(ref, "uniform", lambda seed, off: torch.zeros(off.shape))
    up = ref.fake_quant(x, f, rounding="sr")
    monkeypatch.setattr(ref, "uniform", lambda seed, off: torch.full(off.shape, 0.99999994))
    down = ref.fake_quant(x, f, rounding="sr")
    monkeypatch.undo()
    assert (up.abs() >= down.abs()).all()
    for y in xs:  # every SR draw is one of the two grid neighbours of x
        assert bool(((y == up) | (y == down)).all())
    near = ref.fake_quant(x, f)
    mean = torch.stack(xs).mean(0)
    assert float((mean - x).abs().mean()) < float((near - x).abs().mean())  # unbiased in expectation
    assert not torch.equal(xs[0], xs[1])  # seeds differ


def test_int4_twos_complement_and_2d_tiles_transpose():
    x = testing.make_input("random", (32, 48), seed=6)
    p = ref.quantize(x, testing.FORMATS["ufp4-int4"])
    codes = ref.unpack_nibbles(p.codes)
    assert int((codes == 8).sum()) == 0  # -8 never produced
    f = testing.FORMATS["nvfp4-2d"]
    w = ref.dequantize(ref.quantize(x, f), torch.float32)
    wt = ref.dequantize(ref.quantize(x, f, axis=0), torch.float32)
    assert torch.equal(w, wt)  # W and W^T quantize identically


def test_nonfinite_reference_flags_blocks():
    x = testing.nonfinite_input((16, 64))
    p = ref.quantize(x, testing.FORMATS["nvfp4"])
    assert p.scales.reshape(-1)[0] == 0x7F and torch.isnan(p.amax)
    d = ref.dequantize(p, torch.float32)
    assert torch.isnan(d.reshape(-1)[:16]).all() and torch.isfinite(d.reshape(-1)[16:32]).all()
    p = ref.quantize(x, testing.FORMATS["fp8"])
    assert torch.isnan(p.tensor_scale) and torch.isnan(ref.dequantize(p, torch.float32)).all()
