"""The fused QLinear path and the transpose-free row+col quantizer on a CUDA device:
QLinear outputs and all three gradients of gemm_path="fused" equal the "dequant" path
bit for bit for every preset (same codes, decoded in the quantizer instead of a
dequantize pass), and the row+col kernels' outputs (strip, the default for block formats;
transposing) equal the reference at real sizes, RHTs and every SR tile included."""

import pytest
import torch

import fourcast as fc
from fourcast import nn as fcnn
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

pytestmark = pytest.mark.gpu
F = testing.FORMATS
DEV = "cuda"


def _run(recipe, path, x, w, gy):
    layer = fcnn.QLinear(w.shape[1], w.shape[0], bias=False, recipe=recipe, layer_id=3, seed=5, gemm_path=path)
    layer = layer.to(DEV)
    with torch.no_grad():
        layer.weight.copy_(w)
    layer.step = 4
    x = x.clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = layer(x)
    y.backward(gy)
    return y.detach(), x.grad, layer.weight.grad


@pytest.mark.parametrize("name", fc.recipes.names())
def test_fused_equals_dequant_on_cuda(name):
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn(512, 384, device=DEV, generator=g).bfloat16()
    w = torch.randn(256, 384, device=DEV, generator=g) * 0.05
    gy = (torch.randn(512, 256, device=DEV, generator=g) * 1e-3).bfloat16()
    want = _run(fc.recipe(name), "dequant", x, w, gy)
    got = _run(fc.recipe(name), "fused", x, w, gy)
    for what, a, b in zip(("y", "dx", "dw"), got, want):
        assert torch.equal(a, b), f"{name}: {what} differs"


ROWCOL = ["nvfp4", "mxfp4", "ue5m3", "ufp4", "ufp4-int4", "mxfp8", "nvfp4-2d"]


@pytest.mark.parametrize("name,route", [(n, "strip") for n in ROWCOL] + [("nvfp4", "transpose")])
def test_rowcol_real_size(name, route, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", route)
    f = F[name]
    x = testing.make_input("heavy", (2048, 1536), torch.bfloat16, DEV, seed=7)
    testing.check_rowcol(x, f, "sr", "sr", 9, 2**33)
    o = qk.launch_rowcol(x, qk.parse_fmt(f), "rtne", "rtne", 0, 0, None, None, None, None, write_codes=False,
                         write_xhat=True, unscaled=True)
    want = testing.dequantize_unscaled(ref.quantize(x, f, axis=0, offset=x.numel()), x.dtype)
    assert torch.equal(testing.bits(o["xhat"][1]), testing.bits(want))


@pytest.mark.parametrize("name,n", [("nvfp4", 16), ("ufp4", 16), ("mxfp4", 32)])
def test_strip_rht_real_size(name, n, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    f = F[name]
    s_r, s_c = ref.rht_signs(n, "per-step", 4).to(DEV), ref.rht_signs(n, "per-step", 5).to(DEV)
    x = testing.make_input("heavy", (1024, 768), torch.bfloat16, DEV, seed=3)
    testing.check_rowcol(x, f, "rtne", "sr", 2, 77, (n, s_r), (n, s_c))


# Tiles the SR sweep times (benchmarks/kernel_bench/strip.py STRIP_SR_TILES): more warps split a
# column block's rows across warps, so the reductions cross warps; bit-exact all the same.
@pytest.mark.parametrize("tile", [(16, 32, 1), (16, 64, 2), (16, 64, 4), (32, 64, 2), (16, 128, 4), (32, 64, 1)])
@pytest.mark.parametrize("name,n", [("ue5m3", 0), ("nvfp4", 16)])
def test_strip_tiles_sr(name, n, tile, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "strip", tile)
    f = F[name]
    rht_c = (n, ref.rht_signs(n, "te").to(DEV)) if n else None
    x = testing.make_input("heavy", (1024, 768), torch.bfloat16, DEV, seed=4)
    testing.check_rowcol(x, f, "sr", "sr", 6, 2**32 - 5, None, rht_c)


@pytest.mark.parametrize("name,n", [("ue5m3", 0), ("nvfp4", 16), ("ufp4", 16), ("mxfp4", 32)])
def test_strip_sr4_real_size(name, n, monkeypatch):
    """Rounding sr4 and sr16 (one Philox per four / sixteen elements) on both copies at the default SR tile:
    the reference's bits, with and without a column RHT; and on the one-layout kernel."""
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    f = F[name]
    rht_c = (n, ref.rht_signs(n, "te").to(DEV)) if n else None
    x = testing.make_input("heavy", (2048, 1536), torch.bfloat16, DEV, seed=11)
    for rounding in ("sr4", "sr16"):
        testing.check_rowcol(x, f, rounding, rounding, 12, 2**32 - 9, None, rht_c)
        assert testing.packed_diff(qk.quantize(x, f, axis=0, rounding=rounding, seed=12, offset=5),
                                   ref.quantize(x, f, axis=0, rounding=rounding, seed=12, offset=5)) == []


# rowcol_gluon's scope: 4-bit grids with 1-D blocks, every scale format and rule.
GLUON_ROWCOL = ["nvfp4", "nvfp4-torchao", "mxfp4", "mxfp4-rceil", "ue5m3", "ufp4", "ufp4-int4", "int4-sm-mx",
                "e1m2-mx16", "int4-ue5m3"]


def _hopper():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("rowcol_gluon runs on sm_90 only")


def _route(x, f, fuse):
    spec = qk.parse_fmt(f)
    return qk._rowcol_plan(x, spec, "rtne", "rtne", 0, 0, (True, True), (False, False), False,
                           spec.two_level, fuse)["route"]


@pytest.mark.parametrize("name", GLUON_ROWCOL)
@pytest.mark.parametrize("kind", ["heavy", "ties", "tiny", "huge", "zeros"])
def test_rowcol_gluon_equals_reference(name, kind):
    """Codes, scale bytes, tensor scales and amaxes of both copies, bit for bit, twice (the
    second call takes the launcher's fast path); the call is routed to the Gluon kernel."""
    _hopper()
    f = F[name]
    x = testing.make_input(kind, (512, 768), torch.bfloat16, DEV, seed=3, fmt=f)
    assert _route(x, f, not qk.parse_fmt(f).two_level) == "gluon"
    for _ in range(2):
        testing.check_rowcol(x, f, "rtne", "rtne", 0, 0)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ufp4-int4", "int4-ue5m3"])
def test_rowcol_gluon_nonfinite_and_given_amax(name):
    """NaN and infinities in some row and column blocks (their scale bytes and zero codes),
    a tensor amax given below the true one (scales clamp), and odd tile counts."""
    _hopper()
    f = F[name]
    x = testing.make_input("heavy", (320, 1152), torch.bfloat16, DEV, seed=5)
    x[3, 17] = float("nan")
    x[100, 200] = float("inf")
    x[64:80, 256] = float("-inf")
    testing.check_rowcol(x, f, "rtne", "rtne", 0, 0)
    amax = torch.tensor(0.25, device=DEV)
    r, c = qk.quantize_rowcol(x, f, f, "rtne", "rtne", 0, 0, None, None, amax, amax)
    want_r = ref.quantize(x, f, tensor_amax=amax)
    want_c = ref.quantize(x, f, axis=0, tensor_amax=amax)
    assert testing.packed_diff(r, want_r) == [] and testing.packed_diff(c, want_c) == []


@pytest.mark.parametrize("name", ["ue5m3", "nvfp4", "mxfp4", "ufp4-int4"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rowcol_gluon_x_call_decoded_row(name, dtype):
    """The X call (ops.rowcol_operands: row copy decoded, column copy packed) on the Gluon
    kernel: the decoded row is the reference's unscaled x_hat bit for bit, the packed column
    the reference's codes and scales; NaN and an infinity included."""
    _hopper()
    from fourcast.kernels import ops

    f = F[name]
    x = testing.make_input("heavy", (256, 640), torch.bfloat16, DEV, seed=9)
    x[7, 300] = float("nan")
    x[130, 5] = float("-inf")
    amax = x[x.isfinite()].abs().amax().float()
    spec = qk.parse_fmt(f)
    plan = qk._rowcol_plan(x, spec, "rtne", "rtne", 0, 0, (False, True), (True, False), True, False, False, dtype)
    assert plan["route"] == "gluon"
    for _ in range(2):
        dec, col = ops.rowcol_operands(x, f, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "packed"),
                                       dtype=dtype)
        want_r = ref.quantize(x, f, tensor_amax=amax)
        assert torch.equal(testing.bits(dec.values), testing.bits(testing.dequantize_unscaled(want_r, dtype)))
        assert testing.same_float(dec.tensor_scale, want_r.tensor_scale)
        assert testing.packed_diff(col, ref.quantize(x, f, axis=0, tensor_amax=amax)) == []


GLUON_SR16 = ["ue5m3", "nvfp4", "ufp4", "ufp4-int4", "int4-ue5m3", "e1m2-mx16"]  # blocks of 16


@pytest.mark.parametrize("name", GLUON_SR16)
def test_rowcol_gluon_sr16_equals_reference(name):
    """"sr16" on both copies (the column copy's stream at offset + numel), packed: the
    reference's bits, at a base offset past 2^32, on the Gluon kernel (its route)."""
    _hopper()
    f = F[name]
    x = testing.make_input("heavy", (384, 640), torch.bfloat16, DEV, seed=13)
    x[5, 77] = float("nan")
    spec = qk.parse_fmt(f)
    plan = qk._rowcol_plan(x, spec, "sr16", "sr16", 0, 0, (True, True), (False, False), False, spec.two_level,
                           not spec.two_level)
    assert plan["route"] == "gluon"
    for _ in range(2):
        testing.check_rowcol(x, f, "sr16", "sr16", 21, 2**33 + 48)


@pytest.mark.parametrize("name", ["ue5m3", "nvfp4", "ufp4"])
def test_rowcol_gluon_dy_call_decoded_both(name):
    """The dY call (ops.rowcol_operands: both copies decoded, "sr16", the seed as a device
    int64 as under CUDA graphs, and as an int) on the Gluon kernel (its route): both x_hat
    copies are the reference's unscaled x_hat bit for bit, in x's orientation."""
    _hopper()
    from fourcast.kernels import ops

    f = F[name]
    x = testing.make_input("heavy", (256, 768), torch.bfloat16, DEV, seed=17)
    x[200, 3] = float("inf")
    amax = x[x.isfinite()].abs().amax().float()
    plan = qk._rowcol_plan(x, qk.parse_fmt(f), "sr16", "sr16", 0, 0, (False, False), (True, True), True, False,
                           False, torch.bfloat16)
    assert plan["route"] == "gluon"
    want_r = testing.dequantize_unscaled(ref.quantize(x, f, rounding="sr16", seed=7, offset=96, tensor_amax=amax),
                                         x.dtype)
    want_c = testing.dequantize_unscaled(ref.quantize(x, f, axis=0, rounding="sr16", seed=7, offset=96 + x.numel(),
                                                      tensor_amax=amax), x.dtype)
    for seed in (7, torch.tensor([7], dtype=torch.int64, device=DEV)):
        row, col = ops.rowcol_operands(x, f, rounding="sr16", seed=seed, offset=96, tensor_amax=amax,
                                       tensor_amax_col=amax, outputs=("decoded", "decoded"))
        assert torch.equal(testing.bits(row.values), testing.bits(want_r))
        assert torch.equal(testing.bits(col.values), testing.bits(want_c))
    # and one copy of each kind: the row packed, the column decoded
    row, col = ops.rowcol_operands(x, f, rounding="sr16", seed=7, offset=96, tensor_amax=amax, tensor_amax_col=amax,
                                   outputs=("packed", "decoded"))
    assert testing.packed_diff(row, ref.quantize(x, f, rounding="sr16", seed=7, offset=96, tensor_amax=amax)) == []
    assert torch.equal(testing.bits(col.values), testing.bits(want_c))


@pytest.mark.parametrize("name", ["nvfp4", "ufp4", "int4-ue5m3", "e1m2-mx16"])
@pytest.mark.parametrize("rounding,kind", [("rtne", "heavy"), ("rtne", "huge"), ("rtne", "tiny"), ("sr16", "heavy")])
def test_rowcol_gluon_column_rht16_equals_reference(name, rounding, kind):
    """A column RHT of 16 (TE's Wgrad operands) on the Gluon kernel: both packed copies, the
    column copy rotated in f64 in one thread, bit for bit against the reference, with
    exponents far apart (huge, tiny: the f64 butterflies' order matters), NaN in a block and
    "sr16" at an offset past 2^32; a single-level format records both amaxes."""
    _hopper()
    f = F[name]
    spec = qk.parse_fmt(f)
    x = testing.make_input(kind, (512, 640), torch.bfloat16, DEV, seed=29, fmt=f)
    x[77, 5] = float("nan")
    signs = ref.rht_signs(16, "te").to(DEV)
    plan = qk._rowcol_plan(x, spec, rounding, rounding, 0, 16, (True, True), (False, False), False, spec.two_level,
                           not spec.two_level)
    assert plan["route"] == "gluon"
    for _ in range(2):
        testing.check_rowcol(x, f, rounding, rounding, 5, 2**32 + 16, None, (16, signs))


@pytest.mark.parametrize("name", ["nvfp4", "ufp4"])
def test_rowcol_gluon_x_call_column_rht16(name):
    """TE's X call: the row copy decoded, the column copy packed after an RHT of 16, on the
    Gluon kernel, the reference's bits."""
    _hopper()
    from fourcast.kernels import ops

    f = F[name]
    x = testing.make_input("heavy", (256, 640), torch.bfloat16, DEV, seed=31)
    amax = x.abs().amax().float()
    signs = ref.rht_signs(16, "te").to(DEV)
    plan = qk._rowcol_plan(x, qk.parse_fmt(f), "rtne", "rtne", 0, 16, (False, True), (True, False), True, False,
                           False, torch.bfloat16)
    assert plan["route"] == "gluon"
    dec, col = ops.rowcol_operands(x, f, rht_col=(16, signs), tensor_amax=amax, tensor_amax_col=amax,
                                   outputs=("decoded", "packed"))
    want_r = ref.quantize(x, f, tensor_amax=amax)
    assert torch.equal(testing.bits(dec.values), testing.bits(testing.dequantize_unscaled(want_r, x.dtype)))
    assert testing.packed_diff(col, ref.quantize(x, f, axis=0, rht=(16, signs), tensor_amax=amax)) == []


@pytest.mark.parametrize("name", ["nvfp4", "ufp4"])
@pytest.mark.parametrize("kind", ["heavy", "huge", "tiny"])
def test_rowcol_gluon_te_dy_call_decoded_rotated_column(name, kind):
    """TE's dY call (ops.rowcol_operands: both copies decoded, "sr16", a column RHT of 16, the
    seed as a device int64 and as an int, an offset past 2^32) on the Gluon kernel: the row
    x_hat and the rotated column x_hat (in x's orientation) are the reference's unscaled x_hat
    bit for bit, with exponents far apart (huge, tiny) and an infinity in a block."""
    _hopper()
    from fourcast.kernels import ops

    f = F[name]
    x = testing.make_input(kind, (256, 640), torch.bfloat16, DEV, seed=41, fmt=f)
    x[200, 3] = float("inf")
    amax = x[x.isfinite()].abs().amax().float()
    signs = ref.rht_signs(16, "te").to(DEV)
    plan = qk._rowcol_plan(x, qk.parse_fmt(f), "sr16", "sr16", 0, 16, (False, False), (True, True), True, False,
                           False, torch.bfloat16)
    assert plan["route"] == "gluon"
    off = 2**32 + 32
    want_r = testing.dequantize_unscaled(ref.quantize(x, f, rounding="sr16", seed=9, offset=off, tensor_amax=amax),
                                         x.dtype)
    want_c = testing.dequantize_unscaled(ref.quantize(x, f, axis=0, rounding="sr16", seed=9, offset=off + x.numel(),
                                                      rht=(16, signs), tensor_amax=amax), x.dtype)
    for seed in (9, torch.tensor([9], dtype=torch.int64, device=DEV)):
        row, col = ops.rowcol_operands(x, f, rounding="sr16", seed=seed, offset=off, rht_col=(16, signs),
                                       tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "decoded"))
        assert torch.equal(testing.bits(row.values), testing.bits(want_r))
        assert torch.equal(testing.bits(col.values), testing.bits(want_c))


@pytest.mark.parametrize("name,rounding,rn_c", [("nvfp4", "rtne", 0), ("mxfp4", "rtne", 0), ("ue5m3", "sr16", 0),
                                                ("nvfp4", "rtne", 16), ("nvfp4", "sr16", 16), ("e1m2-mx16", "rtne", 16)])
@pytest.mark.parametrize("kind", ["heavy", "huge", "tiny"])
def test_rowcol_gluon_f32_input_equals_reference(name, rounding, rn_c, kind):
    """An f32 input (a LayerNorm's output under autocast: two f32 a 64-bit word) on the Gluon
    kernel and its amax pass: both packed copies bit for bit against the reference, with
    values bf16 cannot hold, NaN and an infinity in blocks, a column RHT of 16, "sr16" at an
    offset past 2^32; and QLinear's X call (row decoded, column packed) likewise."""
    _hopper()
    from fourcast.kernels import ops

    f = F[name]
    spec = qk.parse_fmt(f)
    x = testing.make_input(kind, (512, 640), torch.float32, DEV, seed=43, fmt=f)
    x = x * (1 + 2.0**-12)  # off the bf16 grid
    x[77, 5] = float("nan")
    x[300, 600] = float("-inf")
    rht_c = (16, ref.rht_signs(16, "te").to(DEV)) if rn_c else None
    plan = qk._rowcol_plan(x, spec, rounding, rounding, 0, rn_c, (True, True), (False, False), False, spec.two_level,
                           not spec.two_level)
    assert plan["route"] == "gluon" and (plan["amax"] is None or plan["amax"][0][0] == "gluon")
    for _ in range(2):
        testing.check_rowcol(x, f, rounding, rounding, 5, 2**32 + 16, None, rht_c)
    if rounding == "rtne":
        good = x.nan_to_num(0.0, 0.0, 0.0)
        dec, col = ops.rowcol_operands(good, f, rht_col=rht_c, outputs=("decoded", "packed"))
        want_r = ref.quantize(good, f)
        assert torch.equal(testing.bits(dec.values), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
        assert testing.packed_diff(col, ref.quantize(good, f, axis=0, rht=rht_c)) == []


def _with_nonfinite(x):
    """x (512 x 640) with a NaN at (77, 5) and an infinity at (300, 600): a block of each copy
    non-finite."""
    x[77, 5] = float("nan")
    x[300, 600] = float("inf")
    return x


@pytest.mark.parametrize("name,n", [("mxfp4", 32), ("mxfp4-rceil", 32), ("nvfp4", 16), ("e1m2-mx16", 16)])
@pytest.mark.parametrize("kind", ["heavy", "huge", "tiny"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rowcol_gluon_row_rht_and_mixed_rounding_equal_reference(name, n, kind, dtype):
    """MXFP4's calls on the Gluon kernel (one lane a block of 32): a row RHT of the block
    (RTNE) beside an "sr16" column copy, "sr16" on both, and RTNE on both, every copy packed,
    bit for bit against the reference with NaN and an infinity in blocks and an offset past
    2^32; a row RHT of 16 on blocks of 16 likewise; bf16 and f32 inputs."""
    _hopper()
    f = F[name]
    spec = qk.parse_fmt(f)
    x = _with_nonfinite(testing.make_input(kind, (512, 640), dtype, DEV, seed=47, fmt=f))
    rht_r = (n, ref.rht_signs(n, "per-layer", 3).to(DEV))
    for r_r, r_c, rot in (("rtne", "sr16", rht_r), ("sr16", "sr16", None), ("rtne", "rtne", rht_r), ("rtne", "rtne", None)):
        plan = qk._rowcol_plan(x, spec, r_r, r_c, rot[0] if rot else 0, 0, (True, True), (False, False), False,
                               spec.two_level, not spec.two_level)
        assert plan["route"] == "gluon", (r_r, r_c, rot is not None)
        testing.check_rowcol(x, f, r_r, r_c, 5, 2**32 + 48, rot, None)


@pytest.mark.parametrize("name", ["ufp4", "ufp4-int4", "nvfp4"])
@pytest.mark.parametrize("kind", ["heavy", "huge", "tiny"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rowcol_gluon_row_and_column_rht_equal_reference(name, kind, dtype):
    """A row and a column RHT of 16 in one call (UFP4's X, W and dY calls), on the Gluon
    kernel (passed on an H100 in session 29; the W call's check was added after, not yet run on
    a GPU): both packed (RTNE; "sr16" past 2^32), the X call (row decoded, column packed, RTNE),
    the W call (both decoded, RTNE) and the dY call (both decoded, "sr16"), amax given or
    measured, bit for bit against the reference with NaN and an infinity in blocks; bf16 and
    f32 inputs."""
    _hopper()
    from fourcast.kernels import ops

    f = F[name]
    spec = qk.parse_fmt(f)
    x = _with_nonfinite(testing.make_input(kind, (512, 640), dtype, DEV, seed=53, fmt=f))
    rht_r = (16, ref.rht_signs(16, "per-layer", 5).to(DEV))
    rht_c = (16, ref.rht_signs(16, "per-layer", 6).to(DEV))
    for r in ("rtne", "sr16"):
        plan = qk._rowcol_plan(x, spec, r, r, 16, 16, (True, True), (False, False), False, spec.two_level,
                               not spec.two_level)
        assert plan["route"] == "gluon", r
        testing.check_rowcol(x, f, r, r, 5, 2**32 + 48, rht_r, rht_c)
    good = x.clone()
    good[~good.isfinite()] = 0
    amax_r = ref.quantize(good, f, rht=rht_r).amax
    amax_c = ref.quantize(good, f, axis=0, rht=rht_c).amax
    dec, col = ops.rowcol_operands(good, f, rht=rht_r, rht_col=rht_c, tensor_amax=amax_r, tensor_amax_col=amax_c,
                                   outputs=("decoded", "packed"))
    want_r = ref.quantize(good, f, rht=rht_r, tensor_amax=amax_r)
    assert torch.equal(testing.bits(dec.values), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
    assert testing.packed_diff(col, ref.quantize(good, f, axis=0, rht=rht_c, tensor_amax=amax_c)) == []
    off = 2**32 + 32
    for r in ("rtne", "sr16"):  # the W call (RTNE: 80 registers for a bf16 input) and the dY call, both decoded
        row, col = ops.rowcol_operands(good, f, rounding=r, seed=9, offset=off, rht=rht_r, rht_col=rht_c,
                                       tensor_amax=amax_r, tensor_amax_col=amax_c, outputs=("decoded", "decoded"))
        want_r = ref.quantize(good, f, rounding=r, seed=9, offset=off, rht=rht_r, tensor_amax=amax_r)
        want_c = ref.quantize(good, f, axis=0, rounding=r, seed=9, offset=off + x.numel(), rht=rht_c,
                              tensor_amax=amax_c)
        assert torch.equal(testing.bits(row.values), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
        assert torch.equal(testing.bits(col.values), testing.bits(testing.dequantize_unscaled(want_c, torch.bfloat16)))


def test_calls_beside_rowcol_gluons_scope_take_strip_and_equal_reference():
    """Two calls session 30 found mis-served by the Gluon route (offline): "sr16" MXFP4 with a
    column RHT of 16 (routed to rowcol_gluon, whose kernel refuses it: a column RHT there spans a
    block of 32) and a row RHT of 16 alone with the amax measured (the Gluon amax pass recorded
    the rotated row amax as the column copy's). Both now take strip.py (the kernel, the amax
    pass): the reference's bits, amaxes included."""
    _hopper()
    x = _with_nonfinite(testing.make_input("heavy", (512, 640), torch.bfloat16, DEV, seed=61))
    s16 = (16, ref.rht_signs(16, "per-layer", 4).to(DEV))
    for name, rounding, rht_r, rht_c in (("mxfp4", "sr16", None, s16), ("nvfp4", "rtne", s16, None),
                                         ("nvfp4", "sr16", s16, None)):
        spec = qk.parse_fmt(F[name])
        plan = qk._rowcol_plan(x, spec, rounding, rounding, rht_r[0] if rht_r else 0, rht_c[0] if rht_c else 0,
                               (True, True), (False, False), False, spec.two_level, not spec.two_level)
        assert plan["route"] == ("strip" if rht_c else "gluon"), name
        assert plan["amax"] is None or [a[0] for a in plan["amax"]] == ["strip"], name
        testing.check_rowcol(x, F[name], rounding, rounding, 5, 2**32 + 48, rht_r, rht_c)


@pytest.mark.parametrize("name", ["mxfp4", "ufp4-int4"])
def test_rowcol_gluon_mxfp4_recipe_calls(name):
    """QLinear's calls under an MXFP4-style recipe (ops.rowcol_operands): X (row decoded after
    an RHT of 32, column packed with "sr16"), W (both decoded, row RHT, column "sr16") and dY
    (both decoded, "sr16"), seed as a device int64: the reference's bits, on the Gluon kernel."""
    _hopper()
    from fourcast.kernels import ops

    f = dict(F[name], block=32) if F[name]["block"] != 32 else F[name]
    spec = qk.parse_fmt(f)
    x = testing.make_input("heavy", (256, 768), torch.bfloat16, DEV, seed=53)
    s32 = ref.rht_signs(32, "per-layer", 7).to(DEV)
    seed = torch.tensor([11], dtype=torch.int64, device=DEV)
    off = 2**32 + 64

    def want(axis, rounding, rht):
        return ref.quantize(x, f, axis=axis, rounding=rounding, seed=11, offset=off + (x.numel() if axis == 0 else 0),
                            rht=rht)

    for outs, r_r, rot in ((("decoded", "packed"), "rtne", (32, s32)), (("decoded", "decoded"), "rtne", (32, s32)),
                           (("decoded", "decoded"), "sr16", None)):
        plan = qk._rowcol_plan(x, spec, r_r, "sr16", rot[0] if rot else 0, 0,
                               tuple(o == "packed" for o in outs), tuple(o == "decoded" for o in outs), True, False,
                               False, torch.bfloat16)
        assert plan["route"] == "gluon", outs
        row, col = ops.rowcol_operands(x, f, rounding=r_r, rounding_col="sr16", seed=seed, offset=off, rht=rot,
                                       outputs=outs)
        assert torch.equal(testing.bits(row.values),
                           testing.bits(testing.dequantize_unscaled(want(-1, r_r, rot), x.dtype))), outs
        if outs[1] == "packed":
            assert testing.packed_diff(col, want(0, "sr16", None)) == [], outs
        else:
            assert torch.equal(testing.bits(col.values),
                               testing.bits(testing.dequantize_unscaled(want(0, "sr16", None), x.dtype))), outs


@pytest.mark.parametrize("rn_r,rn_c,row_f32", [(0, 0, None), (0, 16, None), (16, 16, False), (16, 16, True)])
@pytest.mark.parametrize("kind", ["heavy", "huge", "tiny", "zeros"])
@pytest.mark.parametrize("amax_cfg", [None, (64, 128, 4, 8), (64, 128, 8, 2)])
def test_rowcol_gluon_amax_pass_equals_strip(rn_r, rn_c, row_f32, kind, amax_cfg, monkeypatch):
    """rowcol_gluon's amax pass (the default for nvfp4's row+col calls on sm_90, and UFP4's with
    a row and a column RHT, the row RHT in f64 or in f32 with its fallback: row_f32) records the
    bits strip.py's does, row copy and rotated column copy, with NaN and infinities in the input
    too (a NaN amax is NaN from both; its payload is not defined: strip.py's pass, with a column
    RHT, gave 0x7fff0000 for the row copy where this one gives 0x7fc00000, session 18); the
    call's codes and scales are the reference's either way."""
    _hopper()
    f = F["ufp4" if rn_r else "nvfp4"]
    if row_f32 is not None:
        monkeypatch.setitem(qk.CONFIG_OVERRIDE, "amax_row_rht_f32", row_f32)
    if amax_cfg:
        monkeypatch.setitem(qk.CONFIG_OVERRIDE, "amax_gluon", amax_cfg)
    x = testing.make_input(kind, (1024, 640), torch.bfloat16, DEV, seed=37, fmt=f)
    rht_c = (16, ref.rht_signs(16, "te").to(DEV)) if rn_c else None
    rht_r = (16, ref.rht_signs(16, "per-layer", 5).to(DEV)) if rn_r else None
    spec = qk.parse_fmt(f)
    plan = qk._rowcol_plan(x, spec, "rtne", "rtne", rn_r, rn_c, (True, True), (False, False), False, True, False)
    assert plan["amax"][0][0] == "gluon"

    def amaxes(pin):
        if pin:
            monkeypatch.setitem(qk.CONFIG_OVERRIDE, "amax", "strip")
        else:
            monkeypatch.delitem(qk.CONFIG_OVERRIDE, "amax", raising=False)
        o = qk.launch_rowcol(x, spec, "rtne", "rtne", 0, 0, rht_r, rht_c, None, None, write_codes=True,
                             write_xhat=False)
        return [testing.bits(a.reshape(1)) for a in o["amax"]]

    bad = x.clone()
    bad[5, 9] = float("nan")
    bad[700, 3] = float("-inf")
    for x in (x, bad):
        got, want = amaxes(False), amaxes(True)
        nan = [a.view(torch.float32).isnan().item() for a in got + want]
        assert all(torch.equal(a, b) or nan[i] and nan[i + 2] for i, (a, b) in enumerate(zip(got, want))), (got, want)
    monkeypatch.delitem(qk.CONFIG_OVERRIDE, "amax", raising=False)
    testing.check_rowcol(x, f, "rtne", "rtne", 0, 0, rht_r, rht_c)


def _amax_words(x, signs_c, modes, signs_r=None, row_f32=False):
    """amax_gluon's pass over a bf16 x with a column RHT of 16 (and a row RHT of 16 with signs_r:
    UFP4's calls, its rows in f32 if row_f32), its launches at RHT_MODEs `modes` in turn: its four
    words (row amax, column amax, RHT_MODE 1's bounds on the column and the row copies)."""
    from fourcast.kernels import amax_gluon as ag
    from fourcast.kernels import launcher

    R, C = x.shape
    bits = torch.zeros(4, dtype=torch.int32, device=DEV)
    for mode in modes:
        grid, consts = ag.launch(R, C, 16, None, False, True, mode, 16 if signs_r is not None else 0, row_f32)
        launcher.run(ag._amax_kernel, grid, (x, bits, signs_c if signs_r is None else signs_r, signs_c, R, C), consts)
    return bits.tolist()


# (case, whether the f32 pass leaves a block that may hold the max to the f64 fallback)
F32_RHT_CASES = [("gaussian", None), ("zeros", False), ("tiny beside the max", True), ("subnormal beside the max", True),
                 ("near overflow", True), ("nan", True), ("inf", True), ("wide, not the max", False)]


def _f32_rht_input(case: str) -> torch.Tensor:
    """A (1024, 640) bf16 input for F32_RHT_CASES: column blocks are 16-row runs of a column."""
    g = torch.Generator(device=DEV).manual_seed(11)
    x = torch.randn(1024, 640, device=DEV, generator=g)
    if case == "zeros":
        x.zero_()
    elif case == "tiny beside the max":  # a column block of rows 512-527: 40 and 2^-20
        x[520, 77], x[515, 77] = 40.0, 2.0 ** -20
    elif case == "subnormal beside the max":
        x[16, 5], x[17, 5] = -50.0, 1e-39
    elif case == "near overflow":  # f32's partial sums overflow where f64's do not
        x[48:52, 9] = 2.0 ** 127
        x[52:56, 9] = -(2.0 ** 127)
    elif case == "nan":
        x[100, 3] = float("nan")
    elif case == "inf":
        x[200, 4] = float("-inf")
    elif case == "wide, not the max":
        x[300, 10], x[301, 10], x[302, 10] = 0.5, 2.0 ** -30, 0.0
        x[592:608, 20] = 1.0  # the max's block exact: exponents within 6
        x[600, 20] = 60.0
    return x.bfloat16()


@pytest.mark.parametrize("case,fallback", F32_RHT_CASES)
def test_amax_pass_column_rht_in_f32_equals_f64(case, fallback):
    """The amax pass's column RHT of 16 in f32 then the gated f64 fallback (the default for a
    bf16 input, RHT_MODE 1 then 2) records mode 0's bits (f64 for every block) exactly, NaN
    payloads included; the fallback runs (the bound above the exact blocks' max) where a block
    f32 cannot settle (a spread of exponents over 12, a subnormal, near overflow, non-finite)
    holds the max, and not where such a block lies below it."""
    _hopper()
    x = _f32_rht_input(case)
    signs = ref.rht_signs(16, "te").to(DEV).float()
    want = _amax_words(x, signs, (0,))
    got = _amax_words(x, signs, (1, 2))
    assert got[:2] == want[:2], (case, got, want)
    first = _amax_words(x, signs, (1,))
    if fallback is not None:
        assert (first[2] > first[1]) == fallback, (case, first)
    if not first[2] > first[1]:  # the f32 pass alone settled it
        assert first[:2] == want[:2]
    # and the call: the amaxes launch_rowcol returns, the codes the reference's
    spec = qk.parse_fmt(F["nvfp4"])
    o = qk.launch_rowcol(x, spec, "rtne", "rtne", 0, 0, None, (16, signs), None, None, write_codes=True,
                         write_xhat=False)
    assert [testing.bits(a.reshape(1)).item() for a in o["amax"]] == want[:2]


@pytest.mark.parametrize("case,fallback", F32_RHT_CASES)
def test_amax_pass_row_rht_in_f32_equals_f64(case, fallback):
    """UFP4's amax pass with its row RHT of 16 in f32 too (amax_gluon.ROW_RHT_F32's
    variant: RHT_MODE 1 then 2 with ROW_F32) records mode 0's bits (f64 for every block of both
    copies) exactly, NaN payloads included; the row copy's fallback runs where a row block f32
    cannot settle holds the max, and not where such a block lies below it. The inputs are the
    column test's, transposed: its column blocks become row blocks."""
    _hopper()
    x = _f32_rht_input(case).t()  # (640, 1024): the special blocks along rows; zero rows up to 1024, whole
    x = torch.cat([x, torch.zeros(384, 1024, dtype=x.dtype, device=DEV)])  # tiles of every launch (RHT_CONFIG: 512)
    signs_r = ref.rht_signs(16, "per-layer", 5).to(DEV).float()
    signs_c = ref.rht_signs(16, "te").to(DEV).float()
    want = _amax_words(x, signs_c, (0,), signs_r, False)
    got = _amax_words(x, signs_c, (1, 2), signs_r, True)
    assert got[:2] == want[:2], (case, got, want)
    assert _amax_words(x, signs_c, (1, 2), signs_r, False)[:2] == want[:2], case  # the row RHT in f64
    first = _amax_words(x, signs_c, (1,), signs_r, True)
    if fallback is not None:
        assert (first[3] > first[0]) == fallback, (case, first)
    if not first[3] > first[0]:  # the f32 pass alone settled the row copy
        assert first[0] == want[0]
    # and the call: the amaxes launch_rowcol returns, the codes the reference's
    spec = qk.parse_fmt(F["ufp4"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(qk.CONFIG_OVERRIDE, "amax_row_rht_f32", True)
        o = qk.launch_rowcol(x, spec, "rtne", "rtne", 0, 0, (16, signs_r), (16, signs_c), None, None,
                             write_codes=True, write_xhat=False)
        assert [testing.bits(a.reshape(1)).item() for a in o["amax"]] == want[:2]
        testing.check_rowcol(x, F["ufp4"], "rtne", "rtne", 0, 0, (16, signs_r), (16, signs_c))


# The quantize pass's column RHT in f32 (rowcol_gluon COL_F32): cases, and whether a program's
# column copy must be redone in f64 (the f32 sums give other bits there: a -0 of f64's, an overflow)
COL_F32_CASES = [("gaussian", False), ("signed zeros", False), ("split blocks", False), ("negative zero sum", True),
                 ("near overflow", True), ("nan and inf", True), ("subnormal", True)]


def _col_f32_input(case: str) -> torch.Tensor:
    """A (512, 256) bf16 input for COL_F32_CASES: column blocks are 16-row runs of a column."""
    g = torch.Generator(device=DEV).manual_seed(5)
    x = torch.randn(512, 256, device=DEV, generator=g)
    if case == "signed zeros":
        x[:64] = torch.where(x[:64] < 0, -0.0, 0.0)
    elif case == "split blocks":  # values 13-25 binades below their block's largest
        x = x * 2.0 ** -torch.randint(0, 26, x.shape, device=DEV, generator=g).float().where(
            torch.rand(x.shape, device=DEV, generator=g) < 0.2, torch.zeros(()).to(DEV))
        x[::16] = 4.0  # each block's largest: the others' fields at most 25 below it
    elif case == "negative zero sum":  # rows 32-47 of column 7: f64's output 13 is -0, the split's +0
        x[32:48, 7] = torch.tensor([-0.0, 0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 2.0**-12 * (1 + 2.0**-7),
                                    0.0, 2.0**-12, 2.0**-19, 0.0, 0.0])
    elif case == "near overflow":  # f32's partial sums overflow where f64's do not
        x[48:52, 9] = 2.0 ** 127
        x[52:56, 9] = -(2.0 ** 127)
    elif case == "nan and inf":
        x[100, 3] = float("nan")
        x[200, 4] = float("-inf")
    elif case == "subnormal":
        x[16, 5], x[17, 5] = -50.0, 1e-39
    return x.bfloat16()


@pytest.mark.parametrize("case,redo", COL_F32_CASES)
def test_column_rht_in_f32_gives_the_f64_bits(case, redo, monkeypatch):
    """The quantize pass's column RHT of 16 in f32 (rowcol_gluon COL_F32, a bf16 input) stores the
    f64 RHT's bits in every output of TE's calls: NVFP4 codes RTNE and "sr16", and the decoded
    dY copies; also the reference's codes. Cases where f32's sums differ (redo) pass only if
    the program's column copy is redone in f64."""
    _hopper()
    from fourcast.kernels import rowcol_gluon as rg

    x = _col_f32_input(case)
    signs = ref.rht_signs(16, "te").to(DEV).float()
    if redo and case == "negative zero sum":  # the case is what it claims: f64 gives a -0 there
        y = ref.rht_lastdim(x[32:48, 7].float().reshape(1, 16).cpu(), 16, signs.cpu())
        assert int(testing.bits(y)[0, 13]) == -(2**31)
    spec = qk.parse_fmt(F["nvfp4"])
    amax = x.float().abs().nan_to_num(0.0, 0.0, 0.0).amax()

    def outputs(on: bool):
        monkeypatch.setitem(qk.CONFIG_OVERRIDE, "col_rht_f32", on)
        plan = qk._rowcol_plan(x, spec, "rtne", "rtne", 0, 16, (True, True), (False, False), False, False, False)
        assert plan["route"] == "gluon" and plan["consts"]["COL_F32"] == on
        got = []
        for rounding, xhat in (("rtne", False), ("sr16", False), ("sr16", True)):
            o = qk.launch_rowcol(x, spec, rounding, rounding, 3, 2**32 + 16, None, (16, signs), amax, amax,
                                 write_codes=not xhat, write_xhat=xhat, unscaled=xhat)
            got += [t.clone() for key in ("codes", "scales", "xhat") for t in o[key] if t is not None and t.numel()]
        return got

    fast, f64 = outputs(True), outputs(False)
    assert len(fast) == len(f64) >= 6
    for a, b in zip(fast, f64):  # bytes: a bf16 -0 and +0 differ
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), case
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "col_rht_f32", True)  # and the reference's bits
    if case != "nan and inf":
        for rounding in ("rtne", "sr16"):
            testing.check_rowcol(x, F["nvfp4"], rounding, rounding, 3, 2**32 + 16, None, (16, signs))
    assert rg.col_rht_f32(16, False, True) and not rg.col_rht_f32(16, True, True)


# rowcol_gluon.Config: the session-17 layouts (B / 8 lanes a block), other one-lane tiles, and
# the looped tiles (Config.loop) the benchmarks time
GLUON_TILES = [(64, 128, 8, 2, None, False), (64, 128, 4, 2), (128, 128, 8, 1), (128, 128, 16, 1), (64, 128, 8, 1),
               (64, 128, 4, 1),
               (64, 128, 8, 8, 64, True, True), (64, 128, 8, 4, 80, True, True), (64, 128, 8, 4, 80, True, True, 2),
               (64, 128, 8, 4, 80, True, True, 3), (64, 128, 8, 1, 80, True, True, 2, 3)]


@pytest.mark.parametrize("tile", GLUON_TILES)
@pytest.mark.parametrize("name,rounding", [("nvfp4", "rtne"), ("ufp4-int4", "rtne"), ("mxfp4", "rtne"),
                                           ("ue5m3", "sr16"), ("int4-ue5m3", "sr16")])
def test_rowcol_gluon_tiles_equal_reference(name, rounding, tile, monkeypatch):
    """Every tile and layout the benchmarks time gives the reference's bits: both copies
    packed, NaN in a block, "sr16" at an offset past 2^32."""
    _hopper()
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "gluon")
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol_gluon", tile)
    f = F[name]
    x = testing.make_input("heavy", (512, 640), torch.bfloat16, DEV, seed=23)
    x[300, 9] = float("nan")
    spec = qk.parse_fmt(f)
    plan = qk._rowcol_plan(x, spec, rounding, rounding, 0, 0, (True, True), (False, False), False, spec.two_level,
                           not spec.two_level)
    assert plan["route"] == "gluon"
    testing.check_rowcol(x, f, rounding, rounding, 3, 2**32 + 80)


@pytest.mark.parametrize("stages,per_sm", [(0, 0), (2, 0), (2, 3)])
@pytest.mark.parametrize("call", ["x", "dy", "fuse", "te_dy", "mx_x", "f32"])
def test_rowcol_gluon_looped_calls_equal_reference(call, stages, per_sm, monkeypatch):
    """A looped program (Config.loop: four row tiles, each loading its words as it starts; with
    2 stages the next tile's copied ahead through shared memory; per_sm 3: a grid-stride loop,
    1-2 row tiles a program on 512 x 8192) on the calls whose paths differ from packed RTNE
    codes: the X call (decoded row), the dY call (both decoded, "sr16"), a fused amax (MXFP4:
    the running maximum across the loop), TE's dY call (column RHT16 + "sr16"), MXFP4's X call
    (row RHT32, "sr16" column; blocks of 32 in one lane take 4 warps) and an f32 input: the
    reference's bits, the call routed to the Gluon kernel there."""
    _hopper()
    from fourcast.kernels import ops

    warps, maxnreg = (4, None) if call == "mx_x" else (8, 80)
    tile = (64, 128, warps, 4, maxnreg, True, True, stages, per_sm)
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "gluon")
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol_gluon", tile)
    routes, plan = [], qk._rowcol_plan

    def spy(*args, **kwargs):
        p = plan(*args, **kwargs)
        routes.append(p["route"])
        return p

    monkeypatch.setattr(qk, "_rowcol_plan", spy)
    x = testing.make_input("heavy", (512, 8192 if per_sm else 640), torch.bfloat16, DEV, seed=29)
    x[300, 9] = float("nan")
    amax = x[x.isfinite()].abs().amax().float()
    if call == "x":
        f = F["ue5m3"]
        dec, col = ops.rowcol_operands(x, f, tensor_amax=amax, tensor_amax_col=amax, outputs=("decoded", "packed"))
        want_r = ref.quantize(x, f, tensor_amax=amax)
        assert torch.equal(testing.bits(dec.values), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
        assert testing.packed_diff(col, ref.quantize(x, f, axis=0, tensor_amax=amax)) == []
    elif call == "dy":
        f = F["nvfp4"]
        row, col = ops.rowcol_operands(x, f, rounding="sr16", seed=5, offset=2**32 + 16, tensor_amax=amax,
                                       tensor_amax_col=amax, outputs=("decoded", "decoded"))
        want_r = ref.quantize(x, f, rounding="sr16", seed=5, offset=2**32 + 16, tensor_amax=amax)
        want_c = ref.quantize(x, f, axis=0, rounding="sr16", seed=5, offset=2**32 + 16 + x.numel(), tensor_amax=amax)
        assert torch.equal(testing.bits(row.values), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
        assert torch.equal(testing.bits(col.values), testing.bits(testing.dequantize_unscaled(want_c, torch.bfloat16)))
    elif call == "fuse":
        testing.check_rowcol(x, F["mxfp4"], "rtne", "rtne", 0, 0)
    elif call == "te_dy":
        testing.check_rowcol(x, F["nvfp4"], "sr16", "sr16", 3, 2**32 + 80, None, (16, ref.rht_signs(16, "te").to(DEV)))
    elif call == "mx_x":
        testing.check_rowcol(x, F["mxfp4"], "rtne", "sr16", 7, 64, (32, ref.rht_signs(32, "per-layer", 1).to(DEV)))
    else:
        testing.check_rowcol(x.float() * (1 + 2.0**-12), F["nvfp4"], "rtne", "rtne", 0, 0)
    assert routes and set(routes) == {"gluon"}


def test_rowcol_gluon_routes_only_its_scope(monkeypatch):
    """What rowcol_gluon does not cover goes to the strip kernel: "sr" and "sr4", a row RHT
    other than the block's, a column RHT other than 16, a scaled x_hat or a copy written both
    ways, 16 x 16 tiles, shapes off its tile, f16 input; CONFIG_OVERRIDE pins either kernel."""
    _hopper()
    nv = qk.parse_fmt(F["nvfp4"])
    x = torch.zeros(512, 768, dtype=torch.bfloat16, device=DEV)

    def route(x=x, spec=nv, rounding="rtne", rn=0, codes=(True, True), xhat=(False, False), rnc=0, unscaled=False):
        return qk._rowcol_plan(x, spec, rounding, rounding, rn, rnc, codes, xhat, unscaled, True, False)["route"]

    assert route() == "gluon"
    assert route(codes=(False, True), xhat=(True, False)) == "strip"  # a scaled x_hat
    assert route(rounding="sr") == route(rounding="sr4") == route(xhat=(True, False)) == "strip"
    assert route(rn=16) == "gluon" and route(rn=32) == "strip"  # a row RHT of the block
    assert route(rnc=16) == route(rnc=16, rounding="sr16") == "gluon"  # a column RHT of 16
    assert route(rnc=16, codes=(True, False), xhat=(False, True), unscaled=True) == "gluon"  # a decoded column too
    assert route(rnc=16, rn=16) == route(rnc=16, rn=16, rounding="sr16") == "gluon"  # both (UFP4's calls)
    assert route(rnc=32) == route(rnc=32, rn=16) == "strip"  # a column RHT of 32
    mx = qk.parse_fmt(F["mxfp4"])
    assert route(rounding="sr16") == route(spec=mx, rounding="sr16") == route(spec=mx, rn=32) == "gluon"
    assert route(spec=qk.parse_fmt(F["nvfp4-2d"])) == route(spec=qk.parse_fmt(F["mxfp8"])) == "strip"
    assert route(x=x[:, :704]) == route(x=x[:480]) == route(x=x.half()) == "strip"
    assert route(x=x.float()) == "gluon"  # an f32 input: two f32 a 64-bit word
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    assert route() == "strip"
