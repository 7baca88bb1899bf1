"""Triton kernels on a CUDA device at real sizes: quantizer codes, scale bytes, tensor
scale and amax bit for bit against the PyTorch reference on the same device (random,
heavy-tailed, adversarial, odd shapes; SR with 64-bit offsets; RHT), against the Rust
codec on the CPU for a subset, fake-quant == dequantize(quantize), outputs poisoned
and fully written, GEMM within the FP32-accumulation bound of testing.gemm_bound."""

import numpy as np
import pytest
import torch

import fourcast as fc
from fourcast.kernels import fake_quant as fk
from fourcast.kernels import gemm as gk
from fourcast.kernels import ops
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing
from fourcast.kernels.testing import check_quantizer as check

pytestmark = pytest.mark.gpu
F = testing.FORMATS
DEV = "cuda"


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    real_empty = torch.empty

    def poisoned(*a, **k):
        t = real_empty(*a, **k)
        if t.numel() and t.is_cuda:
            t.fill_(0xAB if t.dtype == torch.uint8 else float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", poisoned)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ue5m3-2d", "ufp4", "ufp4-int4", "nvfp4-torchao",
                                  "mxfp4-rceil", "fp8", "mxfp8"])
def test_quantize_bit_exact_real_size(name):
    x = testing.make_input("heavy", (2048, 4096), torch.bfloat16, DEV, seed=1)
    check(x, F[name], rounding="sr", seed=123, offset=2**33)
    check(x, F[name], axis=0)


@pytest.mark.parametrize("kind", ["ties", "requant", "zeros", "tiny", "huge"])
def test_quantize_adversarial(kind):
    for name in ("nvfp4", "mxfp4", "ue5m3"):
        x = testing.make_input(kind, (512, 1024), torch.float32, DEV, seed=2, fmt=F[name])
        check(x, F[name])


def test_odd_shapes_dtypes_tensor_amax_and_nonfinite():
    check(testing.make_input("heavy", (3, 7, 160), torch.float16, DEV, seed=3), F["nvfp4"], rounding="sr")
    check(testing.make_input("heavy", (1000, 96), torch.float32, DEV, seed=3), F["mxfp4"], axis=-1)
    check(testing.make_input("heavy", (1008, 96), torch.bfloat16, DEV, seed=3), F["ue5m3"], tensor_amax=0.5)
    a = check(testing.nonfinite_input((256, 256), torch.bfloat16, DEV), F["nvfp4"])
    assert torch.isnan(a.amax) and int(a.scales.reshape(-1)[0]) == 0x7F


@pytest.mark.parametrize("n", [16, 32, 128])
def test_rht_quantize_bit_exact(n):
    s = ref.rht_signs(n, "per-layer", 5).to(DEV)
    x = testing.make_input("heavy", (1024, 2048), torch.bfloat16, DEV, seed=n)
    check(x, F["ufp4"], axis=0, rht=(n, s), rounding="sr", seed=7)
    b, rot = qk.quantize_debug(x, F["ufp4"], axis=0, rht=(n, s), rht_impl=1)
    want = ref.rht_lastdim(ref.to_layout(x, 0), n, s)
    assert float((rot - want).abs().max()) <= 2**-20 * float(want.abs().max())
    codes, scales, ts, amax = ref.quantize_layout(rot, ref.parse_fmt(F["ufp4"]))
    assert torch.equal(b.codes, ref.pack_nibbles(codes)) and torch.equal(b.scales, scales)


def test_rowcol_fused_equals_separate():
    x = testing.make_input("heavy", (2048, 1024), torch.bfloat16, DEV, seed=4)
    s = ref.rht_signs(16, "te").to(DEV)
    _, want = testing.check_rowcol(x, F["nvfp4"], "rtne", "sr", 9, 0, None, (16, s))
    xr, xc = fk.fake_quant_rowcol(x, F["nvfp4"], rounding="rtne", rounding_c="sr", seed=9, rht_c=(16, s))
    assert torch.equal(xc, ref.dequantize(want, x.dtype))


def test_against_rust_codec():
    x = testing.make_input("heavy", (256, 512), torch.float32, "cpu", seed=5)
    for name in ("nvfp4", "mxfp4", "ue5m3-2d", "ufp4", "nvfp4-torchao"):
        f = F[name]
        p = qk.quantize(x.to(DEV), f, rounding="sr", seed=3, offset=17)
        fmt = fc.Format(element=f["element"], scale=f["scale"], rule=f["rule"],
                        block=(16, 16) if f["tile_2d"] else f["block"])
        q = fc.quantize(x.numpy(), fmt, rounding="sr", seed=3, offset=17)
        assert np.array_equal(p.codes.cpu().numpy(), q.codes) and np.array_equal(p.scales.cpu().numpy(), q.scales)
        assert float(p.tensor_scale) == q.tensor_scale and float(p.amax) == q.amax


@pytest.mark.parametrize("name", ["ue5m3", "nvfp4-2d", "mxfp4", "fp8"])
def test_decode_unscaled_real_size(name):
    """ops.decode_unscaled on CUDA (the unscaled Triton decode; a column-wise copy in its
    own layout, returned transposed): value(code) * block scale bit for bit, at the 125M
    model's saved-X shape, into a poisoned output."""
    from fourcast.kernels.utils import Packed

    x = testing.make_input("heavy", (4096, 768), torch.bfloat16, DEV, seed=31)
    for axis in (-1, 0):
        p = ops.quantize(x, F[name], axis=axis)
        unit = torch.ones((), device=DEV)
        want = ref.dequantize_layout(Packed(p.codes, p.scales, unit, unit, p.fmt, p.layout_shape, -1))
        dec = ops.decode_unscaled(p, torch.bfloat16)
        assert dec.values.shape == x.shape
        got = dec.values.t() if axis == 0 else dec.values
        assert testing.same_float(got.float(), want.to(torch.bfloat16).float()), (name, axis)


@pytest.mark.parametrize("name", ["nvfp4-2d", "nvfp4", "mxfp4", "ue5m3", "ufp4"])
def test_quantize_decoded_in_one_pass_equals_decode_of_quantize(name):
    """ops.quantize_decoded on CUDA (one quantize pass writing value x block scale, QLinear's
    2-D tiled weight) against ops.decode_unscaled(ops.quantize(...)) bit for bit: values,
    tensor scale and amax, RTNE with the amax measured and "sr16" with it given and the seed in
    device memory, at Llama-3-8B's 4096 x 4096 weight and a partial row tile, into bf16 and f16."""
    for shape in ((4096, 4096), (272, 1056)):
        x = testing.make_input("heavy", shape, torch.bfloat16, DEV, seed=32)
        for dtype in (torch.bfloat16, torch.float16):
            for rnd, amax, seed in (("rtne", None, 0), ("sr16", torch.tensor(9.0, device=DEV),
                                                         torch.tensor([11], device=DEV))):
                kw = dict(rounding=rnd, seed=seed, offset=5, tensor_amax=amax)
                want = ops.decode_unscaled(ops.quantize(x, F[name], **kw), dtype)
                got = ops.quantize_decoded(x, F[name], dtype=dtype, **kw)
                assert got.values.dtype == dtype and got.values.shape == x.shape
                for a, b in ((got.values, want.values), (got.tensor_scale, want.tensor_scale), (got.amax, want.amax)):
                    assert testing.same_float(a.float(), b.float()), (name, shape, dtype, rnd)


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-2d", "mxfp4", "ue5m3", "ufp4"])
def test_table_decode_equals_generic_decode_on_every_byte(name, monkeypatch):
    """The table decode of qk.dequantize(unscaled=True) (qk.lut_decode_asm: the GEMM's PTX
    routine) against the generic decode and the reference, bit for bit, on every code byte
    and every scale byte (NaN, zero, subnormal, the largest, and E4M3 bytes past 0x7F that
    only foreign input has), rows of 2 x 512 + 32 elements (a partial tile)."""
    from fourcast.kernels.utils import Packed

    f = ref.parse_fmt(F[name])
    m, k = 256, 1056
    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 256, (m, k // 2), generator=g, dtype=torch.uint8)
    codes[0, :256] = torch.arange(256, dtype=torch.uint8)
    shape = (m // 16, k // 16) if f.tile_2d else (m, k // f.block)
    scales = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    scales.view(-1)[:256] = torch.arange(256, dtype=torch.uint8)
    unit = torch.ones((), device=DEV)
    p = Packed(codes.to(DEV), scales.to(DEV), unit, unit, F[name], (m, k), -1)
    assert qk.lut_decode_asm(f)
    fast = qk.dequantize(p, torch.bfloat16, unscaled=True)
    monkeypatch.setattr(qk, "LUT_DECODE", False)
    generic = qk.dequantize(p, torch.bfloat16, unscaled=True)
    assert testing.same_float(fast.float(), generic.float()), name
    want = ref.dequantize_layout(Packed(p.codes, p.scales, unit, unit, p.fmt, (m, k), -1))
    assert testing.same_float(fast.float(), want.to(torch.bfloat16).float()), name


def test_ops_dispatch_cuda_to_triton():
    x = testing.make_input("heavy", (256, 512), torch.bfloat16, DEV, seed=6)
    p = ops.quantize(x, F["nvfp4"])
    assert p.codes.is_cuda and testing.packed_diff(p, ref.quantize(x, F["nvfp4"])) == []
    assert torch.equal(ops.fake_quant(x, F["nvfp4"]), ops.dequantize(p, x.dtype))


GEMM_SHAPES = [(1024, 768, 2048), (512, 256, 4096)]
MX = ("mxfp4", "mxfp4-rceil")


def _within_bound(c, a, b, out, fp8_tc=False) -> bool:
    c64, bound = testing.gemm_bound(ref.dequantize_layout(a), ref.dequantize_layout(b), out, fp8_tc)
    return bool(((c.double() - c64).abs() <= bound).all())


@pytest.mark.parametrize("impl", ["triton", "dequant", "fp8", "auto"])
@pytest.mark.parametrize("pair", [("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4"), ("mxfp4-rceil", "mxfp4"), ("ufp4", "ufp4"),
                                  ("fp8", "mxfp8")])
def test_gemm_bound(pair, impl):
    if impl == "fp8" and not (pair[0] in MX and pair[1] in MX):
        pytest.skip("impl='fp8' is MXFP4 only (the FormatError is tested in tests/interpret)")
    for (m, n, k) in GEMM_SHAPES:
        a = ref.quantize(testing.make_input("heavy", (m, k), torch.bfloat16, DEV, seed=7), F[pair[0]])
        b = ref.quantize(testing.make_input("random", (n, k), torch.bfloat16, DEV, seed=8), F[pair[1]])
        before = gk.STATS["fp8_fallbacks"]
        for out in (torch.bfloat16, torch.float32):
            c = gk.gemm(a, b, out, impl=impl)  # fp8: FP8 tensor-core accumulation, looser (gemm.py)
            assert _within_bound(c, a, b, out, impl == "fp8"), (pair, impl, (m, n, k), out)
        assert gk.STATS["fp8_fallbacks"] == before  # heavy-tailed rows still fit E4M3 exactly


WGMMA_PAIRS = [("nvfp4", "nvfp4-2d"), ("mxfp4", "mxfp4"), ("mxfp4-rceil", "mxfp4"), ("ufp4", "ufp4"),
               ("ue5m3", "ue5m3-2d")]


@pytest.mark.parametrize("cfg", [None, (128, 128, 64, 8, 8, 3), (128, 128, 64, 8, 8, 4)])
@pytest.mark.parametrize("pair", WGMMA_PAIRS)
def test_gemm_wgmma_within_bound(pair, cfg, monkeypatch):
    """The Gluon kernel (gemm_wgmma.py) runs for every LUT/CVT pair and meets the bound, on
    shapes with partial tiles (M, N not multiples of 128) and K of 1, 3 and 64 steps."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("gemm_wgmma is for Hopper (sm_90) only")
    from fourcast.kernels import gemm_wgmma

    launched = []
    real = gemm_wgmma.launch
    monkeypatch.setattr(gemm_wgmma, "launch", lambda *a, **k: (launched.append(1), real(*a, **k))[1])
    monkeypatch.setattr(gk, "CONFIG_OVERRIDE", {"kernel": "wgmma", **({"cfg": cfg} if cfg else {})})
    for (m, n, k) in [(1008, 208, 128), (304, 528, 192), (1024, 768, 4096)]:  # 2D tiles: multiples of 16
        if cfg is None and k % 128:
            continue  # (the default takes BK 64 there; the cfg cases cover it)
        a = ref.quantize(testing.make_input("heavy", (m, k), torch.bfloat16, DEV, seed=7), F[pair[0]])
        b = ref.quantize(testing.make_input("random", (n, k), torch.bfloat16, DEV, seed=8), F[pair[1]])
        for out in (torch.bfloat16, torch.float32):
            c = gk.gemm(a, b, out, impl="triton")
            assert _within_bound(c, a, b, out), (pair, cfg, (m, n, k), out)
    assert launched


@pytest.mark.parametrize("cfg", [None, (128, 128, 64, 8, 4, 4, 120, 168), (128, 128, 128, 8, 3, 8, 80, 96),
                                 (128, 256, 64, 8, 4, 2, 168, 168)])
@pytest.mark.parametrize("pair", WGMMA_PAIRS)
def test_gemm_ws_within_bound(pair, cfg):
    """The warp-specialised kernel (gemm_wgmma._ws_kernel) meets the bound for every LUT/CVT
    pair, on shapes with partial tiles and K of 1, 3 and 64 steps (its mbarrier phases wrap),
    into a poisoned output (every element written). cfg None: ws_config's (BK 128, and BK 64
    for a K of 192); the last, WS_WIDE_CONFIG (128 x 256 tiles, two MMA warpgroups)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("gemm_wgmma is for Hopper (sm_90) only")
    from fourcast.kernels import gemm_wgmma

    bk = (cfg or gemm_wgmma.WS_CONFIG)[2]
    shapes = [(1008, 208, bk), (304, 528, 3 * bk), (1024, 768, 64 * bk)] + ([(304, 528, 192)] if cfg is None else [])
    for (m, n, k) in shapes:
        a = ref.quantize(testing.make_input("heavy", (m, k), torch.bfloat16, DEV, seed=7), F[pair[0]])
        b = ref.quantize(testing.make_input("random", (n, k), torch.bfloat16, DEV, seed=8), F[pair[1]])
        for out in (torch.bfloat16, torch.float32):
            c = torch.full((m, n), float("nan"), dtype=out, device=DEV)
            gemm_wgmma.launch_ws(a, b, c, m, n, k, gk.split_plan(a.spec, b.spec), cfg)
            assert _within_bound(c, a, b, out), (pair, cfg, (m, n, k), out)


@pytest.mark.parametrize("pair", WGMMA_PAIRS)
def test_gemm_triton_route_is_launch_packed(pair, monkeypatch):
    """gemm(impl="triton") on Hopper runs gemm_wgmma.launch_packed: the kernel packed_kernel
    names (_rs_kernel for NVFP4/UFP4 with K in 128-deep steps, _ws_kernel otherwise, BK 64
    for a K of 192), with the same bits as launching it directly."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("gemm_wgmma is for Hopper (sm_90) only")
    from fourcast.kernels import gemm_wgmma

    ran = []
    for name in ("launch_rs", "launch_ws"):
        real = getattr(gemm_wgmma, name)
        monkeypatch.setattr(gemm_wgmma, name, lambda *a, _r=real, _n=name, **k: (ran.append(_n), _r(*a, **k))[1])
    for (m, n, k) in [(304, 528, 384), (304, 528, 192)]:
        a = ref.quantize(testing.make_input("heavy", (m, k), torch.bfloat16, DEV, seed=7), F[pair[0]])
        b = ref.quantize(testing.make_input("random", (n, k), torch.bfloat16, DEV, seed=8), F[pair[1]])
        plan = gk.split_plan(a.spec, b.spec)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEV)
        gemm_wgmma.launch_packed(a, b, c, m, n, k, plan)
        ran.clear()
        assert torch.equal(gk.gemm(a, b, torch.bfloat16, impl="triton"), c), (pair, (m, n, k))
        assert ran == ["launch_" + gemm_wgmma.packed_kernel(plan, k, (a.spec.scale, b.spec.scale))], (pair, k, ran)
        assert _within_bound(c, a, b, torch.bfloat16), (pair, (m, n, k))



@pytest.mark.parametrize("cfg,ahead,persistent", [(None, 1, False), (None, 2, False),
                                                  ((128, 128, 128, 8, 3, 8, 96, 128), 2, False), (None, 2, True),
                                                  ((128, 128, 128, 8, 6, 8, 72, 128), 2, True)])
@pytest.mark.parametrize("pair", WGMMA_PAIRS)
def test_gemm_rs_within_bound(pair, cfg, ahead, persistent):
    """The register-sourced kernel (gemm_wgmma._rs_kernel: A decoded into the MMA warpgroup's
    registers, B through shared memory in the chunked K order) meets the bound for every
    LUT/CVT pair, on shapes with partial tiles and K of 1, 3 and 64 steps (the ring's phases
    wrap), into a poisoned output (every element written); code words one or two steps
    ahead; persistent: a program a multiprocessor, the ring's steps running on across its
    tiles (2176 x 1040: 153 tiles, more than the H200's 132 programs, 3 steps each)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("gemm_wgmma is for Hopper (sm_90) only")
    from fourcast.kernels import gemm_wgmma

    for (m, n, k) in [(1008, 208, 128), (304, 528, 384), (1024, 768, 8192), (2176, 1040, 384)]:
        a = ref.quantize(testing.make_input("heavy", (m, k), torch.bfloat16, DEV, seed=7), F[pair[0]])
        b = ref.quantize(testing.make_input("random", (n, k), torch.bfloat16, DEV, seed=8), F[pair[1]])
        for out in (torch.bfloat16, torch.float32):
            c = torch.full((m, n), float("nan"), dtype=out, device=DEV)
            gemm_wgmma.launch_rs(a, b, c, m, n, k, gk.split_plan(a.spec, b.spec), cfg, ahead=ahead,
                                 persistent=persistent)
            assert _within_bound(c, a, b, out), (pair, cfg, ahead, persistent, (m, n, k), out)

@pytest.mark.parametrize("kernel", ["split", "ws", "rs"])
def test_ue5m3_in_f16_at_the_ends_of_its_scale_range(kernel, monkeypatch):
    """UE5M3 operands take the f16 MMA at 2^-UE5M3_EXP (gk.split_plan): rows 2^0 .. 2^-36
    apart give block scales down to UE5M3's subnormals (f16 subnormal operands), and the
    first rows' scale bytes are set to the largest exponent's (over f16's range without the
    offset); in every kernel that decodes them: within the bound, NaN-poisoned output fully
    written."""
    if kernel != "split" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("gemm_wgmma is for Hopper (sm_90) only")
    from fourcast.kernels import gemm_wgmma

    m, n, k = 296, 160, 1024
    rows = lambda r, seed: testing.make_input("random", (r, k), torch.float32, DEV, seed=seed) * (  # noqa: E731
        2.0 ** -(torch.arange(r, device=DEV) % 37).float())[:, None]
    a = ref.quantize(rows(m, 3), F["ue5m3"])
    b = ref.quantize(rows(n, 4), F["ue5m3-2d"])
    # The TE rule keeps scales <= 448; bytes from elsewhere reach 2^16 * 1.75 (byte 254)
    a.scales[:8] = torch.arange(248, 255, device=DEV, dtype=torch.uint8).repeat(a.scales[:8].numel() // 7 + 1)[
        :a.scales[:8].numel()].view(a.scales[:8].shape)
    b.scales[:1] = 254
    sb = torch.cat([a.scales.flatten(), b.scales.flatten()])
    assert (sb < 16).any() and (sb >= 248).any() and (sb < 255).all()  # both ends of the range, no NaN
    plan = gk.split_plan(a.spec, b.spec)
    assert plan["DOT_F16"] and plan["EPI_EXP"] == 2 * gk.UE5M3_EXP
    for out in (torch.bfloat16, torch.float32):
        c = torch.full((m, n), float("nan"), dtype=out, device=DEV)
        if kernel == "split":
            monkeypatch.setattr(gk, "CONFIG_OVERRIDE", {"kernel": "split", "decode": "lut"})
            c = gk.gemm(a, b, out, impl="triton")
        elif kernel == "ws":
            gemm_wgmma.launch_ws(a, b, c, m, n, k, plan)
        else:
            gemm_wgmma.launch_rs(a, b, c, m, n, k, plan, ahead=2)
        assert _within_bound(c, a, b, out), (kernel, out)


def _mx_with_wide_row(m, k, seed):
    x = testing.make_input("heavy", (m, k), torch.float32, DEV, seed=seed)
    x[5, :32], x[5, 32:] = 6 * 2.0**12, 0.75 * 2.0**-12  # 24 binades apart: 0.5 * 2^e is not an E4M3 value
    return ref.quantize(x, F["mxfp4"])


def test_fp8_conversion_bit_exact_and_fallback():
    a = _mx_with_wide_row(1024, 2048, 9)
    a8, rs, ok = gk.to_e4m3_rowref(a)
    assert ok.sum().item() == 1023 and not ok[5].item()
    want = ref.dequantize_layout(a)
    assert testing.same_float((a8.float() * rs[:, None])[ok], want[ok])
    b = ref.quantize(testing.make_input("random", (768, 2048), torch.bfloat16, DEV, seed=10), F["mxfp4"])
    for x, y in ((a, b), (b, a)):
        before = gk.STATS["fp8_fallbacks"]
        c = gk.gemm(x, y, torch.float32, impl="fp8")
        assert gk.STATS["fp8_fallbacks"] == before + 1
        assert torch.equal(c, gk.gemm(x, y, torch.float32, impl="dequant"))
        assert _within_bound(c, x, y, torch.float32)  # dequant's: the strict bound


def test_fp8_with_a_tensor_scale_takes_the_alpha_epilogue():
    a = ref.quantize(testing.make_input("heavy", (512, 1024), torch.bfloat16, DEV, seed=13), F["mxfp4"])
    b = ref.quantize(testing.make_input("random", (256, 1024), torch.bfloat16, DEV, seed=14), F["mxfp4"])
    a.tensor_scale = torch.tensor(0.75, device=DEV)  # not MXFP4's own: the FP32 epilogue path
    for out in (torch.bfloat16, torch.float32):
        assert _within_bound(gk.gemm(a, b, out, impl="fp8"), a, b, out, fp8_tc=True)


@pytest.mark.parametrize("a_t,b_t", [(False, True), (False, False), (True, False), (True, True)])
def test_cublaslt_scaled_mm_layouts(a_t, b_t):
    """scaled_mm through cuBLASLt (device alpha, out straight to bf16/f32) on row- and
    column-major views, against float64 within the bound; no fallback taken."""
    from fourcast.kernels import cublaslt

    assert cublaslt.available(torch.device(DEV))
    m, n, k = 1000, 768, 2048  # M not a multiple of 8: unaligned rows too
    a = testing.make_input("heavy", (k, m) if a_t else (m, k), torch.bfloat16, DEV, seed=21)
    b = testing.make_input("random", (n, k) if b_t else (k, n), torch.bfloat16, DEV, seed=22)
    a, b = (a.t() if a_t else a), (b.t() if b_t else b)
    ts_a, ts_b = torch.tensor(2688.0 / 37.5, device=DEV), torch.tensor(0.3, device=DEV)
    alpha = gk.epilogue_alpha(ts_a, ts_b)
    assert alpha.item() == float(np.float32(1) / np.float32(2688.0 / 37.5) / np.float32(0.3))
    before = gk.STATS["lt_fallbacks"]
    for out in (torch.bfloat16, torch.float32):
        c = gk.scaled_mm(a, b, ts_a, ts_b, out)
        assert c.dtype == out and c.shape == (m, n)
        c64, bound = testing.gemm_bound(a.double() * alpha.double(), b.t(), out)
        assert bool(((c.double() - c64).abs() <= bound).all()), (a_t, b_t, out)
    assert gk.STATS["lt_fallbacks"] == before
    unit = gk.scaled_mm(a, b, None, None, torch.bfloat16)  # no tensor scale: alpha 1
    assert torch.equal(unit, cublaslt.matmul(a, b, gk._unit(a.device), torch.bfloat16))


def test_ops_gemm_auto_is_dequant_unless_auto_fp8(monkeypatch):
    a = ops.quantize(testing.make_input("heavy", (512, 1024), torch.bfloat16, DEV, seed=11), F["mxfp4"])
    b = ops.quantize(testing.make_input("random", (256, 1024), torch.bfloat16, DEV, seed=12), F["mxfp4"])
    assert torch.equal(ops.gemm(a, b), gk.gemm(a, b, impl="dequant"))
    assert torch.equal(ops.gemm(a, b, impl="triton"), gk.gemm(a, b, impl="triton"))
    monkeypatch.setattr(gk, "AUTO_FP8", True)
    assert torch.equal(ops.gemm(a, b), gk.gemm(a, b, impl="fp8"))


def test_cpu_tensor_to_kernel_entry_is_refused():
    from fourcast.errors import KernelInputError

    with pytest.raises(KernelInputError):
        qk.quantize(torch.randn(16, 64), F["nvfp4"])
