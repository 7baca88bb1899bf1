"""Triton kernels under TRITON_INTERPRET=1 (tests/conftest.py sets it) against the
PyTorch reference, which test_reference.py ties to the Rust codec: codes, scale bytes,
tensor scale and amax bit for bit (SR included), x_hat bit for bit, GEMM within the
FP32-accumulation bound of fourcast.kernels.testing.gemm_bound. Tiny shapes."""

import numpy as np
import pytest
import torch

import fourcast as fc
from fourcast.errors import FormatError, KernelInputError, ShapeError
from fourcast.kernels import fake_quant as fk
from fourcast.kernels import gemm as gk
from fourcast.kernels import hadamard, ops, philox
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing
from fourcast.kernels.testing import check_quantizer as check
from fourcast.kernels.utils import interpreting, seed_arg

pytestmark = pytest.mark.interpret

F = testing.FORMATS
S16 = ref.rht_signs(16, "per-layer", 9)


def test_running_under_the_interpreter():
    assert interpreting(), "tests/interpret needs TRITON_INTERPRET=1 (set by tests/conftest.py without CUDA)"


@pytest.mark.parametrize("name", sorted(F))
def test_quantize_every_format(name):
    f = F[name]
    for axis, rnd in ((-1, "rtne"), (0, "sr")):
        x = testing.make_input("heavy", (32, 64), torch.float32, seed=len(name))
        check(x, f, axis=axis, rounding=rnd, seed=7, offset=3)


@pytest.mark.parametrize("kind", testing.INPUT_KINDS)
def test_quantize_adversarial_inputs(kind):
    for name in ("nvfp4", "mxfp4-rceil", "ue5m3-2d", "nvfp4-torchao"):
        x = testing.make_input(kind, (32, 64), seed=1, fmt=F[name])
        check(x, F[name], rounding="rtne")
    check(testing.make_input(kind, (32, 64), seed=2, fmt=F["nvfp4"]), F["nvfp4"], rounding="away", axis=0)


def test_quantize_bf16_fp16_inputs_odd_shapes_and_tensor_amax():
    x = testing.make_input("heavy", (3, 5, 96), torch.bfloat16, seed=3)  # R = 15: partial row tiles
    check(x, F["nvfp4"], rounding="sr", seed=1, offset=2**33 + 5)  # a 64-bit offset
    check(x, F["nvfp4"], rounding="sr4", seed=1, offset=2**33 + 5)
    check(testing.make_input("heavy", (64, 96), torch.bfloat16, seed=3), F["ue5m3"], rounding="sr4", seed=2, axis=0)
    check(x, F["nvfp4"], rounding="sr16", seed=1, offset=2**33 + 5)
    check(testing.make_input("heavy", (64, 96), torch.bfloat16, seed=3), F["ue5m3"], rounding="sr16", seed=2, axis=0)
    check(x.half(), F["mxfp4"])
    check(x, F["ue5m3"], tensor_amax=0.25)  # periodic scale far below the data: saturation
    check(testing.make_input("random", (48, 32), seed=4), F["nvfp4-2d"], axis=0)
    check(testing.make_input("random", (16, 16), seed=4), F["ufp4"], axis=0)  # one block


@pytest.mark.parametrize("n", [16, 32, 128])
def test_quantize_with_rht(n):
    s = ref.rht_signs(n, "per-step", n)
    x = testing.make_input("heavy", (128, 128), torch.bfloat16, seed=n)
    for axis, name in ((-1, "nvfp4"), (0, "ufp4"), (0, "mxfp4")):
        a = check(x, F[name], axis=axis, rht=(n, s), rounding="sr", seed=5)
        # the tensor-core variant: bit-exact on the rotated tensor it produced
        b, rot = qk.quantize_debug(x, F[name], axis=axis, rht=(n, s), rounding="sr", seed=5, rht_impl=1)
        want = ref.rht_lastdim(ref.to_layout(x, axis), n, s)
        assert float((rot - want).abs().max()) <= 2**-20 * float(want.abs().max())
        codes, scales, ts, amax = ref.quantize_layout(rot, ref.parse_fmt(F[name]), "sr", 5, 0)
        assert torch.equal(b.scales, scales) and torch.equal(b.amax, amax) and torch.equal(b.tensor_scale, ts)
        assert torch.equal(b.codes, ref.pack_nibbles(codes))
        assert a.codes.shape == b.codes.shape


def test_nonfinite_blocks_get_the_nan_byte():
    x = testing.nonfinite_input((32, 64))
    for name in ("nvfp4", "mxfp4", "ue5m3", "fp8", "nvfp4-torchao"):
        a = check(x, F[name])
        if not F[name]["block"]:
            assert torch.isnan(a.tensor_scale)
        else:
            assert int(a.scales.reshape(-1)[0]) in (0x7F, 0xFF)
        assert torch.isnan(a.amax)


def test_rowcol_one_read_equals_two_quantizations():
    x = testing.make_input("heavy", (64, 96), torch.bfloat16, seed=8)
    for name, rht_c in (("nvfp4", (16, S16)), ("mxfp4", None), ("nvfp4-2d", None)):
        f = F[name]
        _, want_c = testing.check_rowcol(x, f, "rtne", "sr", 3, 11, None, rht_c)
        xr, xc = fk.fake_quant_rowcol(x, f, rounding="rtne", rounding_c="sr", seed=3, offset=11, rht_c=rht_c)
        assert torch.equal(xr, ref.dequantize(ref.quantize(x, f, seed=3, offset=11), x.dtype))
        assert torch.equal(xc, ref.dequantize(want_c, x.dtype))
    r, c = qk.quantize_rowcol(x, F["nvfp4"], F["nvfp4"], "rtne", "rtne", 0, 0, None, None, 1.5, None)
    assert float(r.amax) == 1.5 and testing.packed_diff(c, ref.quantize(x, F["nvfp4"], axis=0)) == []


@pytest.mark.parametrize("rounding", ["sr", "sr4", "sr16"])
def test_a_seed_in_memory_gives_the_bits_of_the_int_seed(rounding, monkeypatch):
    """What CUDA-graph training relies on (fourcast.nn.StepSeeds): the quantize, transposing
    row+col and strip kernels read a one-element int64 seed tensor and write the same codes
    as with the int, a 63-bit seed included (an i64 kernel argument)."""
    x = testing.make_input("heavy", (32, 64), torch.bfloat16, seed=8)
    f = F["nvfp4"]
    for seed in (3, 2**62 + 12345):
        held = torch.tensor([seed], dtype=torch.int64)
        for axis in (-1, 0):
            a = qk.quantize(x, f, axis=axis, rounding=rounding, seed=seed, offset=5)
            b = qk.quantize(x, f, axis=axis, rounding=rounding, seed=held, offset=5)
            assert testing.packed_diff(a, b) == []
        for route in ("strip", "transpose"):
            monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", route)
            a = qk.quantize_rowcol(x, f, f, rounding, rounding, seed, 7, None, None)
            b = qk.quantize_rowcol(x, f, f, rounding, rounding, held.view(()), 7, None, None)
            assert all(testing.packed_diff(p, q) == [] for p, q in zip(a, b))
            monkeypatch.delitem(qk.CONFIG_OVERRIDE, "rowcol")
        other = qk.quantize(x, f, rounding=rounding, seed=torch.tensor([seed + 1]), offset=5)
        assert not torch.equal(other.codes, qk.quantize(x, f, rounding=rounding, seed=seed, offset=5).codes)
    assert torch.equal(ops.quantize(x, f, rounding=rounding, seed=torch.tensor(3)).codes,
                       ref.quantize(x, f, rounding=rounding, seed=3).codes)


def test_a_seed_tensor_must_be_one_int64_on_the_data_device():
    x = testing.make_input("random", (16, 32), seed=1)
    for bad in (torch.tensor([1, 2]), torch.tensor([1], dtype=torch.int32), torch.tensor(1.0)):
        with pytest.raises(KernelInputError, match="seed tensor"):
            qk.quantize(x, F["nvfp4"], rounding="sr", seed=bad)
    # a call without SR passes 0 by value: no kernel loads a seed it does not use
    assert seed_arg(torch.tensor([5]), "cpu", used=False) == (0, False)
    assert seed_arg(torch.tensor([5]), "cpu")[1] is True


def test_outputs_fully_written_over_poison(monkeypatch):
    real_empty = torch.empty

    def poisoned(*a, **k):
        t = real_empty(*a, **k)
        return t.fill_(0xAB if t.dtype == torch.uint8 else float("nan")) if t.numel() else t

    monkeypatch.setattr(torch, "empty", poisoned)
    x = testing.make_input("random", (48, 64), seed=9)
    check(x, F["nvfp4"])
    check(testing.make_input("random", (64, 64), seed=9), F["mxfp8"], axis=0)


def test_triton_rand_equals_reference_stream():
    for seed, off in ((42, 2**32 - 3), (0x1234_5678_9ABC_DEF0, 3 << 32)):
        u = philox.rand(300, seed, off, device="cpu")
        assert torch.equal(u, ref.uniform(seed, torch.arange(300, dtype=torch.int64) + off))


def test_sr4_stream_in_both_orientations():
    """"sr4": element i of a layout takes word i % 4 at counter offset + i // 4, in the
    row layout and in the transposed (column) layout, tile (1, 1) of each."""
    M, K, BM, BK, seed, off = 64, 96, 16, 32, 7, 2**32 - 2
    out_r = torch.empty(BM, BK)
    out_c = torch.empty(BM, BK)
    philox._group_tile_kernel[(1,)](out_r, out_c, seed, off, M, K, BM=BM, BK=BK)
    want = ref.uniform_x4(seed, off, torch.arange(M * K, dtype=torch.int64))
    assert torch.equal(out_r, want.view(M, K)[BM:2 * BM, BK:2 * BK])
    want_t = ref.uniform_x4(seed, off, torch.arange(M * K, dtype=torch.int64)).view(K, M).t()
    assert torch.equal(out_c, want_t[BM:2 * BM, BK:2 * BK])
    words = ref.philox(seed, torch.tensor([off + 5]))
    assert torch.equal(ref.uniform_x4(seed, off, torch.arange(20, 24)), ref._to_uniform(torch.cat(words)))


def test_sr16_stream_in_both_orientations():
    """"sr16": element i takes byte i % 4 of word (i // 4) % 4 at counter offset + i // 16,
    as (byte + 0.5) / 256, in the row and the transposed layout (rng::rand_x16)."""
    M, K, BM, BK, seed, off = 64, 96, 16, 32, 7, 2**32 - 2
    out_r = torch.empty(BM, BK)
    out_c = torch.empty(BM, BK)
    philox._group_tile_kernel[(1,)](out_r, out_c, seed, off, M, K, BM=BM, BK=BK, G=16)
    want = ref.uniform_x16(seed, off, torch.arange(M * K, dtype=torch.int64))
    assert torch.equal(out_r, want.view(M, K)[BM:2 * BM, BK:2 * BK])
    assert torch.equal(out_c, want.view(K, M).t()[BM:2 * BM, BK:2 * BK])
    w = torch.stack(ref.philox(seed, torch.tensor([off + 1])), -1).reshape(-1)  # counter 1: elements 16..31
    byte = torch.stack([(w >> (8 * b)) & 0xFF for b in range(4)], -1).reshape(-1)
    assert torch.equal(ref.uniform_x16(seed, off, torch.arange(16, 32)), (byte.float() + 0.5) / 256)
    x = testing.make_input("heavy", (64, 256), torch.float32, seed=8)
    for name in ("nvfp4", "ue5m3", "mxfp4"):  # the PyTorch reference equals the Rust core
        f = F[name]
        fmt = fc.Format(element=f["element"], scale=f["scale"], rule=f["rule"], block=f["block"])
        for axis in (-1, 0):
            mine = ref.quantize(x, f, axis=axis, rounding="sr16", seed=seed, offset=off)
            rust = fc.quantize(x.numpy() if axis == -1 else x.t().contiguous().numpy(), fmt, rounding="sr16",
                               seed=seed, offset=off)
            assert np.array_equal(mine.codes.numpy(), rust.codes) and np.array_equal(mine.scales.numpy(), rust.scales)


def test_hadamard_equals_reference():
    x = testing.make_input("heavy", (2, 64, 128), seed=5)
    for n, axis in ((16, -1), (64, 1), (128, -1)):
        s = ref.rht_signs(n, "te")
        assert torch.equal(hadamard.rht(x, n, s, axis), ref.rht(x, n, s, axis))
        assert torch.equal(hadamard.rht(x.bfloat16(), n, s, axis), ref.rht(x.bfloat16(), n, s, axis))


@pytest.mark.parametrize("pair", [("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4"), ("ue5m3", "ufp4"),
                                  ("ufp4-int4", "int4-sm-mx"), ("fp8", "mxfp8-e5m2")])
def test_gemm_within_fp32_accumulation_bound(pair):
    fa, fb = F[pair[0]], F[pair[1]]
    a = ref.quantize(testing.make_input("heavy", (48, 64), seed=1), fa)
    b = ref.quantize(testing.make_input("random", (32, 64), seed=2), fb)
    for out in (torch.float32, torch.bfloat16):
        c = gk.gemm(a, b, out)
        c64, bound = testing.gemm_bound(ref.dequantize_layout(a), ref.dequantize_layout(b), out)
        assert bool(((c.double() - c64).abs() <= bound).all()), pair


def test_gemm_column_wise_operand_and_errors():
    x = testing.make_input("random", (64, 32), seed=3)  # B stored column-wise: its layout is (32, 64)
    a = ref.quantize(testing.make_input("random", (16, 64), seed=4), F["nvfp4"])
    b = ref.quantize(x, F["nvfp4"], axis=0)
    c64, bound = testing.gemm_bound(ref.dequantize_layout(a), ref.dequantize_layout(b), torch.float32)
    assert bool(((gk.gemm(a, b, torch.float32).double() - c64).abs() <= bound).all())
    with pytest.raises(ShapeError):
        gk.gemm(a, ref.quantize(testing.make_input("random", (16, 32), seed=4), F["nvfp4"]))


def _unit_ts(p):
    """p with tensor scale 1: its dequantize_layout is value(code) * block scale."""
    return ref.Packed(p.codes, p.scales, torch.ones(()), torch.ones(()), p.fmt, p.shape, p.axis)


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-2d", "mxfp4", "ue5m3", "ufp4-int4", "fp8", "mxfp8-e5m2"])
def test_unscaled_decode_is_value_times_block_scale(name):
    """qk.dequantize(unscaled=True) (no division by the tensor scale) and ops.decode_unscaled
    (a column-wise copy decoded in its own layout, returned as the transposed view) give
    the reference's value(code) * block scale bits."""
    from fourcast.kernels.utils import Packed

    x = testing.make_input("heavy", (96, 160), torch.float32, seed=5)  # 160 = 5 blocks of 32
    for axis in (-1, 0):
        p = ref.quantize(x, F[name], axis=axis)
        want = ref.dequantize_layout(_unit_ts(p))
        m, k = want.shape
        layout = Packed(p.codes, p.scales, p.tensor_scale, p.amax, p.fmt, (m, k), -1)
        assert testing.same_float(qk.dequantize(layout, torch.float32, unscaled=True), want), (name, axis)
        dec = ops.decode_unscaled(p, torch.float32)
        assert testing.same_float(dec.values, want.t() if axis == 0 else want), (name, axis)
        assert dec.values.shape == x.shape and dec.tensor_scale is p.tensor_scale


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-2d", "mxfp4", "ue5m3", "ufp4", "ufp4-int4", "fp8"])
def test_quantize_pass_writes_value_times_block_scale(name):
    """The quantize pass with unscaled x_hat and no codes (ops.quantize_decoded's one pass on
    CUDA: QLinear's 2-D tiled weight) writes the reference's value(code) * block scale bits
    and its tensor scale, SR and a given amax included; ops.quantize_decoded off CUDA
    (decode_unscaled of quantize) gives the same."""
    spec = ref.parse_fmt(F[name])
    for dtype in (torch.float32, torch.bfloat16):
        x = testing.make_input("heavy", (64, 160), torch.float32, seed=6).to(dtype)
        for rnd, amax in (("rtne", None), ("sr", torch.tensor(7.5))):
            p = ref.quantize(x, F[name], rounding=rnd, seed=7, offset=3, tensor_amax=amax)
            want = ref.dequantize_layout(_unit_ts(p)).to(dtype)
            o = qk.launch(x, spec, -1, rnd, 7, 3, None, amax, write_codes=False, write_xhat=True, unscaled=True)
            assert testing.same_float(o["xhat"], want), (name, dtype, rnd)
            assert testing.same_float(o["ts"], p.tensor_scale), (name, dtype, rnd)
            dec = ops.quantize_decoded(x, F[name], rounding=rnd, seed=7, offset=3, tensor_amax=amax, dtype=dtype)
            assert testing.same_float(dec.values, want) and testing.same_float(dec.amax, p.amax), (name, dtype, rnd)
    with pytest.raises(ShapeError):  # ops.quantize's checks, first
        ops.quantize_decoded(torch.ones(4, 24), F[name] if spec.block == 16 else F["nvfp4"])


def test_table_decode_applies_to_4bit_sign_magnitude_block_formats(monkeypatch):
    """qk.lut_decode_asm: the GEMM's PTX routine where it applies (the GPU runs it; its bits
    are checked on every byte by tests/gpu), "" for INT4, FP8 and per-tensor formats, and
    "" everywhere when LUT_DECODE is off."""
    takes = {n: bool(qk.lut_decode_asm(ref.parse_fmt(F[n]))) for n in
             ("nvfp4", "nvfp4-2d", "mxfp4", "ue5m3", "ufp4", "ufp4-int4", "fp8", "mxfp8")}
    assert takes == {"nvfp4": True, "nvfp4-2d": True, "mxfp4": True, "ue5m3": True, "ufp4": True,
                     "ufp4-int4": False, "fp8": False, "mxfp8": False}
    monkeypatch.setattr(qk, "LUT_DECODE", False)
    assert qk.lut_decode_asm(ref.parse_fmt(F["nvfp4"])) == ""


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-2d", "mxfp4", "ue5m3", "ufp4"])
def test_dequantize_every_code_and_scale_byte_as_reference(name):
    """Every code byte and every scale byte, NaN bytes and (E4M3) bytes past 0x7F that only
    foreign input has: a negative scale, as reference.decode_scale reads it (the kernel read
    them unsigned until session 10)."""
    from fourcast.kernels.utils import Packed

    f = ref.parse_fmt(F[name])
    m, k = 32, 1056
    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 256, (m, k // 2), generator=g, dtype=torch.uint8)
    codes[0, :256] = torch.arange(256, dtype=torch.uint8)
    scales = torch.randint(0, 256, (m // 16, k // 16) if f.tile_2d else (m, k // f.block), generator=g,
                           dtype=torch.uint8)
    scales.view(-1)[:min(256, scales.numel())] = torch.arange(min(256, scales.numel()), dtype=torch.uint8)
    unit = torch.ones(())
    p = Packed(codes, scales, unit, unit, F[name], (m, k), -1)
    want = ref.dequantize_layout(p)
    assert testing.same_float(qk.dequantize(p, torch.float32, unscaled=True), want), name
    assert testing.same_float(qk.dequantize(p, torch.bfloat16, unscaled=True).float(), want.to(torch.bfloat16).float())


@pytest.mark.parametrize("pair", [("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4"), ("ue5m3", "ufp4"), ("fp8", "mxfp8-e5m2")])
def test_gemm_dequant_is_the_f32_product_of_unscaled_operands(pair):
    a = ref.quantize(testing.make_input("heavy", (32, 64), seed=1), F[pair[0]])
    b = ref.quantize(testing.make_input("random", (64, 16), seed=2), F[pair[1]], axis=0)  # column-wise B
    prod = ref.dequantize_layout(_unit_ts(a)) @ ref.dequantize_layout(_unit_ts(b)).t()
    for out in (torch.float32, torch.bfloat16):
        c = gk.gemm(a, b, out, impl="dequant")
        assert torch.equal(c, (prod * gk.epilogue_alpha(a.tensor_scale, b.tensor_scale)).to(out)), pair
        c64, bound = testing.gemm_bound(ref.dequantize_layout(a), ref.dequantize_layout(b), out)
        assert bool(((c.double() - c64).abs() <= bound).all()), pair


@pytest.mark.parametrize("ts_a,ts_b", [(3.0, 7.0), (2688.0 / 1e-30, 1e-20), (1e-30, 2.0**100), (0.75, None)])
def test_epilogue_alpha_and_the_triton_epilogue(ts_a, ts_b):
    """alpha = (1 / ts_a) / ts_b, each step rounded to FP32 (finite where ts_a * ts_b is
    not), and the Triton epilogue pass gives the bits of (acc * alpha).to(out)."""
    a32 = np.float32(1) / np.float32(ts_a)
    want = a32 if ts_b is None else a32 / np.float32(ts_b)
    ta = torch.tensor(ts_a, dtype=torch.float32)
    tb = None if ts_b is None else torch.tensor(ts_b, dtype=torch.float32)
    alpha = gk.epilogue_alpha(ta, tb)
    assert alpha.dtype == torch.float32 and alpha.item() == float(want) and np.isfinite(want)
    kernel_alpha = torch.empty((), dtype=torch.float32)  # the CUDA route's kernel
    gk._alpha_kernel[(1,)](ta, torch.ones(()) if tb is None else tb, kernel_alpha)
    assert kernel_alpha.item() == float(want)
    acc = testing.make_input("heavy", (40, 72), seed=3) * 1e3
    for out in (torch.float32, torch.bfloat16):
        got = gk._epilogue(acc.clone(), None, None, ta, torch.ones(()) if tb is None else tb, out)
        assert torch.equal(got, (acc * alpha).to(out))


def _mx_operand_with_bad_rows():
    """MXFP4 (32, 64): row 3 spans 2^10 .. 2^-10 (0.5 * 2^-10 needs 2^(-10 - 4) in E4M3:
    not exact), row 5 has a NaN scale byte, row 7 is all zero; the rest heavy-tailed."""
    x = testing.make_input("heavy", (32, 64), seed=4)
    x[3, :32], x[3, 32:] = 6 * 2.0**10, 0.5 * 2.0**-10
    x[7] = 0.0
    p = ref.quantize(x, F["mxfp4"])
    p.scales[5, 1] = 0xFF
    return p


def test_fp8_conversion_is_bit_exact_and_flags_rows_it_cannot_hold():
    p = _mx_operand_with_bad_rows()
    a8, rs, ok = gk.to_e4m3_rowref(p)
    assert a8.dtype == torch.float8_e4m3fn and rs.dtype == torch.float32 and ok.tolist() == [
        i not in (3, 5) for i in range(32)]
    want = ref.dequantize_layout(p)
    got = a8.float() * rs[:, None]
    assert testing.same_float(got[ok], want[ok])
    assert torch.equal(a8.view(torch.uint8)[ok], (want[ok] / rs[ok, None]).to(torch.float8_e4m3fn).view(torch.uint8))
    e = p.scales.int() - 127
    assert torch.equal(rs[ok], torch.pow(2.0, (e.amax(1) - 6).clamp(-64, 63).float())[ok])
    flags = torch.zeros(1, dtype=torch.int32)
    gk.to_e4m3_rowref(p, flags)
    assert flags.item() == 1  # bit 0: some row not exact
    q = ref.quantize(testing.make_input("heavy", (16, 64), seed=3), F["mxfp4"])
    q.tensor_scale = torch.tensor(0.5)
    flags.zero_()
    gk.to_e4m3_rowref(q, flags)
    assert flags.item() == 2  # bit 1: a tensor scale to divide by
    with pytest.raises(FormatError):
        gk.to_e4m3_rowref(ref.quantize(testing.make_input("random", (16, 64)), F["nvfp4"]))


def test_gemm_fp8_route_emulated_and_its_fallback():
    a = ref.quantize(testing.make_input("heavy", (32, 64), seed=5), F["mxfp4-rceil"])
    b = ref.quantize(testing.make_input("random", (16, 64), seed=6), F["mxfp4"])
    for bb in (b, _mx_operand_with_bad_rows()):
        before = gk.STATS["fp8_fallbacks"]
        for out in (torch.float32, torch.bfloat16):
            c = gk.gemm(a, bb, out, impl="fp8")
            c64, bound = testing.gemm_bound(ref.dequantize_layout(a), ref.dequantize_layout(bb), out)
            fin = torch.isfinite(c64)
            assert bool(((c.double() - c64).abs() <= bound)[fin].all())
            assert torch.equal(torch.isnan(c), torch.isnan(c64))
        fell_back = gk.STATS["fp8_fallbacks"] - before
        assert fell_back == (0 if bb is b else 2)
        if fell_back:
            assert testing.same_float(gk.gemm(a, bb, torch.float32, impl="fp8"),
                                      gk.gemm(a, bb, torch.float32, impl="dequant"))


def test_gemm_impl_errors():
    a = ref.quantize(testing.make_input("random", (16, 64)), F["mxfp4"])
    nv = ref.quantize(testing.make_input("random", (16, 64)), F["nvfp4"])
    with pytest.raises(ValueError, match="auto, triton, dequant, fp8"):
        gk.gemm(a, a, impl="cublas")
    with pytest.raises(FormatError, match="MXFP4"):
        gk.gemm(a, nv, impl="fp8")
    with pytest.raises(ShapeError):
        gk.gemm(ref.quantize(testing.make_input("random", (8, 64)), F["mxfp4"]), a, impl="fp8")  # M = 8
    assert torch.equal(gk.gemm(a, a, torch.float32), gk.gemm(a, a, torch.float32, impl="triton"))  # auto


def test_kernel_entry_rejects_bad_input():
    x = testing.make_input("random", (16, 64))
    with pytest.raises(KernelInputError):
        qk.quantize(x.t(), F["nvfp4"])  # non-contiguous
    with pytest.raises(FormatError):
        qk.quantize(x.double(), F["nvfp4"])
    with pytest.raises(ShapeError):
        qk.quantize(x[:, :40].contiguous(), F["nvfp4"])  # 40 is not a multiple of 16
    with pytest.raises(ShapeError):
        qk.quantize(x[:8].contiguous(), F["nvfp4-2d"], axis=0)  # 2D tiles need 16 | rows
    with pytest.raises(FormatError):
        qk.quantize(x, dict(F["nvfp4"], element="e3m0"))
