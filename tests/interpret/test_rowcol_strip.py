"""The column-strip row+col quantizer (strip.py, quantize_rowcol's default for block
formats) under TRITON_INTERPRET=1: codes, scale bytes, tensor scales, amax and decoded
values bit for bit against the PyTorch reference for every block format (2-D tiles and
FP8 elements included), per-copy outputs, SR on either copy, RHTs along either axis."""

import pytest
import torch

from fourcast.errors import ShapeError
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing

pytestmark = pytest.mark.interpret
F = testing.FORMATS
BLOCK_FORMATS = [n for n in F if not qk.parse_fmt(F[n]).per_tensor]


def test_block_formats_route_to_strip(monkeypatch):
    """Block formats take the strip kernel, or the Gluon one where it serves the call
    (gluon_ok); per-tensor formats the transposing kernel; CONFIG_OVERRIDE pins either.
    Off a GPU (here) the Gluon kernel never serves: _gluon_rowcol_ok is False."""
    nv = qk.parse_fmt(F["nvfp4"])
    for name in ("nvfp4-2d", "mxfp8", "nvfp4"):
        assert qk.rowcol_route(qk.parse_fmt(F[name])) == "strip"
    assert qk.rowcol_route(qk.parse_fmt(F["fp8"])) == "transpose"
    assert qk.rowcol_route(nv, gluon_ok=True) == "gluon"
    assert qk.rowcol_route(qk.parse_fmt(F["fp8"]), gluon_ok=True) == "transpose"
    x = torch.zeros(128, 256, dtype=torch.bfloat16)
    assert not qk._gluon_rowcol_ok(x, nv, "rtne", "rtne", (0, 0), (True, True), (False, False))
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    assert qk.rowcol_route(nv, gluon_ok=True) == "strip"
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "transpose")
    assert qk.rowcol_route(nv) == qk.rowcol_route(nv, gluon_ok=True) == "transpose"


def test_strip_tiles(monkeypatch):
    """SR calls take the narrower tile (register pressure of two Philox draws)."""
    from fourcast.kernels import strip

    assert strip.strip_config(16, 0, 0, False, None, False) == (16, 64, 1)
    assert strip.strip_config(16, 0, 0, True, None, False) == (16, 32, 1)
    assert strip.strip_config(16, 0, 16, True, None, False) == (16, 32, 1)
    assert strip.strip_config(32, 64, 0, False, None, False) == (32, 64, 1)
    assert strip.strip_config(16, 0, 0, False, (32, 64, 2), False) == (32, 64, 2)


@pytest.mark.parametrize("iters", [1, 2, 4])
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ue5m3-2d"])
def test_strip_programs_of_several_row_tiles(name, iters, monkeypatch):
    """A program takes `iters` row tiles, loading the next before quantizing the current:
    80 rows are 5 tiles of 16 (mxfp4: 32 rows, so 3 tiles with the last one half past the
    rows), so the last program has tiles past the end. The same bits, the amax included
    (single-level formats record it once a program now), for RTNE and both SR streams."""
    from fourcast.kernels import strip

    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "strip_iters", iters)
    f = F[name]
    rows = 96 if name == "mxfp4" else 80
    x = testing.make_input("heavy", (rows, 64), torch.bfloat16, seed=9, fmt=f)
    for rr, rc in (("rtne", "sr16"), ("sr4", "rtne")):
        testing.check_rowcol(x, f, rr, rc, 5, 7)
    assert strip.strip_iters(32768, 16, 768, 64, False, None, False) == strip.STRIP_ITERS
    assert strip.strip_iters(768, 16, 768, 64, False, None, False) == 1  # 576 tiles: one each
    assert strip.strip_iters(32768, 16, 768, 64, True, None, False) == 1  # an RHT: no room
    assert strip.strip_iters(32768, 32, 768, 32, False, None, False) == 1  # MX's 32-row tiles


@pytest.mark.parametrize("reversed_", [True, False])
def test_amax_pass_in_either_order(reversed_, monkeypatch):
    """The amax pass runs its programs in the reverse of the quantize pass's launch order (the
    tiles it reads last are then in L2 when the quantize pass starts); CONFIG_OVERRIDE
    "amax_reversed" False (the benchmarks' comparison) keeps launch order. Both orders: the
    plan's REVERSED as asked, the amaxes (a column RHT's included) and codes the reference's,
    on 3 x 3 programs with tiles past the last row."""
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "amax_reversed", reversed_)
    f, s_c = F["nvfp4"], ref.rht_signs(16, "per-step", 5)
    x = testing.make_input("heavy", (80, 192), torch.bfloat16, seed=4, fmt=f)
    plan = qk._rowcol_plan(x, qk.parse_fmt(f), "rtne", "rtne", 0, 16, (True, True), (False, False), False,
                           True, False)
    (kernel, grid, consts), = plan["amax"]
    assert kernel == "strip" and consts["REVERSED"] is reversed_ and grid[0] > 1 and grid[1] > 1
    testing.check_rowcol(x, f, "rtne", "rtne", 0, 0, None, (16, s_c))


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_strip_is_bit_exact(name):
    f = F[name]
    spec = qk.parse_fmt(f)
    kinds = (("heavy", torch.bfloat16), ("ties", torch.bfloat16)) if name in ("nvfp4", "ufp4") else \
        (("heavy", torch.bfloat16),)
    for kind, dtype in kinds:
        x = testing.make_input(kind, (32, 96), dtype, seed=8, fmt=f)
        for rr, rc in (("rtne", "sr"), ("sr", "rtne")):
            testing.check_rowcol(x, f, rr, rc, 3, 11)
    x = testing.make_input("tiny", (32, 96), torch.float32, seed=8, fmt=f)
    o = qk.launch_rowcol(x, spec, "rtne", "sr", 3, 11, None, None, None, None, write_codes=(False, True),
                         write_xhat=(True, False), xhat_dtype=torch.bfloat16, unscaled=True)
    want_r = ref.quantize(x, f, seed=3, offset=11)
    want_c = ref.quantize(x, f, axis=0, rounding="sr", seed=3, offset=11 + x.numel())
    assert torch.equal(testing.bits(o["xhat"][0]), testing.bits(testing.dequantize_unscaled(want_r, torch.bfloat16)))
    assert torch.equal(o["codes"][1], want_c.codes) and torch.equal(o["scales"][1], want_c.scales)
    assert torch.equal(o["ts"], torch.stack([want_r.tensor_scale, want_c.tensor_scale]))
    assert all(torch.equal(a, w.amax) for a, w in zip(o["amax"], (want_r, want_c)))


@pytest.mark.parametrize("name,n", [("nvfp4", 16), ("ufp4", 16), ("mxfp4", 32)])
def test_strip_rht_either_axis(name, n, monkeypatch):
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    f = F[name]
    s_r, s_c = ref.rht_signs(n, "per-step", 4), ref.rht_signs(n, "per-step", 5)
    x = testing.make_input("heavy", (32, 64), torch.bfloat16, seed=2, fmt=f)
    for rht_r, rht_c in (((n, s_r), (n, s_c)), (None, (n, s_c))):
        testing.check_rowcol(x, f, "rtne", "sr", 1, 5, rht_r, rht_c)
    o = qk.launch_rowcol(x, qk.parse_fmt(f), "rtne", "rtne", 0, 0, (n, s_r), (n, s_c), None, None,
                         write_codes=False, write_xhat=True)
    want_r = ref.dequantize(ref.quantize(x, f, rht=(n, s_r)), x.dtype)
    want_c = ref.dequantize(ref.quantize(x, f, axis=0, rht=(n, s_c), offset=x.numel()), x.dtype)
    assert torch.equal(testing.bits(o["xhat"][0]), testing.bits(want_r)) and torch.equal(testing.bits(o["xhat"][1]), testing.bits(want_c))


def test_strip_one_amax_supplied_the_other_measured():
    f = F["ue5m3"]
    s = ref.rht_signs(32, "per-step", 4)
    x = testing.make_input("heavy", (32, 128), torch.bfloat16, seed=2)
    r, c = qk.quantize_rowcol(x, f, f, "rtne", "rtne", 0, 0, (32, s), None, 0.5, None)
    assert testing.packed_diff(r, ref.quantize(x, f, rht=(32, s), tensor_amax=0.5)) == []
    assert testing.packed_diff(c, ref.quantize(x, f, axis=0, offset=x.numel())) == []


@pytest.mark.parametrize("tile", [(32, 32, 1), (16, 32, 2)])
def test_strip_other_tiles(tile, monkeypatch):
    """Two column blocks per tile, and a block's rows split across warps."""
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "strip", tile)
    f = F["nvfp4"]
    x = testing.make_input("heavy", (64, 64), torch.bfloat16, seed=5, fmt=f)
    testing.check_rowcol(x, f, "sr", "sr", 4, 9, None, (16, ref.rht_signs(16, "te")))


@pytest.mark.parametrize("name,n", [("ue5m3", 0), ("nvfp4", 16), ("nvfp4-2d", 0), ("mxfp4", 32)])
def test_strip_sr4(name, n):
    """Rounding sr4 on both copies (the column copy's stream in its (C, R) layout): the
    reference's bits, with and without a column RHT."""
    f = F[name]
    rht_c = (n, ref.rht_signs(n, "te")) if n else None
    x = testing.make_input("heavy", (64, 96), torch.bfloat16, seed=5, fmt=f)
    testing.check_rowcol(x, f, "sr4", "sr4", 3, 2**32 - 7, None, rht_c)
    testing.check_rowcol(x, f, "sr16", "sr16", 3, 2**32 - 7, None, rht_c)


def test_transposing_rowcol_sr4_and_the_length_check(monkeypatch):
    """The transposing kernel (per-tensor formats) draws sr4 too; a length that is not a
    multiple of 4 is refused on the kernel path (the reference takes any length)."""
    f = F["fp8"]
    x = testing.make_input("heavy", (32, 64), torch.bfloat16, seed=6)
    testing.check_rowcol(x, f, "sr4", "sr4", 4, 9)
    testing.check_rowcol(x, f, "sr16", "sr16", 4, 9)
    with pytest.raises(ShapeError, match="sr4"):
        qk.quantize(testing.make_input("heavy", (8, 30), torch.bfloat16, seed=6), f, rounding="sr4")
    with pytest.raises(ShapeError, match="sr16"):
        qk.quantize(testing.make_input("heavy", (8, 40), torch.bfloat16, seed=6), f, rounding="sr16")


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "mxfp8"])
def test_strip_without_recording_the_amax(name):
    """measure_amax=False (QLinear's row+col calls): the same codes, scales and decoded
    values; a format without a tensor scale returns NaN for the amax it did not record, one
    with a tensor scale still measures it."""
    f = F[name]
    spec = qk.parse_fmt(f)
    x = testing.make_input("heavy", (32, 96), torch.bfloat16, seed=4, fmt=f)
    kw = dict(write_codes=(True, False), write_xhat=(False, True), xhat_dtype=torch.bfloat16, unscaled=True)
    a = qk.launch_rowcol(x, spec, "rtne", "sr", 3, 11, None, None, None, None, **kw)
    b = qk.launch_rowcol(x, spec, "rtne", "sr", 3, 11, None, None, None, None, measure_amax=False, **kw)
    assert torch.equal(a["codes"][0], b["codes"][0]) and torch.equal(a["scales"][0], b["scales"][0])
    assert torch.equal(testing.bits(a["xhat"][1]), testing.bits(b["xhat"][1]))
    if spec.two_level:
        assert all(torch.equal(p, q) for p, q in zip(a["amax"], b["amax"]))
    else:
        assert all(float(q) != float(q) for q in b["amax"]) and all(float(p) > 0 for p in a["amax"])
