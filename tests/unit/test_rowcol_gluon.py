"""The Gluon row+col quantizer (kernels/rowcol_gluon.py) without a GPU: which calls it takes,
and that it compiles for sm_90a with this Triton (the device runs 3.6) into what its design
says: 16-byte loads, the transpose through shared memory, code bytes 8 a store with one lane
a block of 16 (4 a store with two lanes a block of 32), 16-byte x_hat stores, no spills.
Its bytes are checked against the reference on the GPU (tests/gpu/test_fused_gpu.py).

The compiles run in a child process with a fresh Triton cache (testing.compiled_in_child: the
interpreter's patches of triton.language break a later real compile in this process)."""

import json

import pytest
import torch

from fourcast.kernels import quantize as qk
from fourcast.kernels import testing
from fourcast.kernels.utils import parse_fmt

rg = pytest.importorskip("fourcast.kernels.rowcol_gluon", reason="this Triton has no Gluon")
ag = pytest.importorskip("fourcast.kernels.amax_gluon", reason="this Triton has no Gluon")
F = testing.FORMATS

_CHILD = r"""
import json, re, sys
from fourcast.kernels import quantize as qk, rowcol_gluon as rg, testing
from fourcast.kernels.utils import parse_fmt

fmt, cfg, fuse, xhat, extra = json.loads(sys.argv[1])
k = rg.compile_sm90(qk._constexprs(parse_fmt(testing.FORMATS[fmt]), "rtne"), rg.Config(*cfg), fuse, xhat, **extra)
res = testing.cuda_tool(k, "cuobjdump", "-res-usage")
sass = testing.cuda_tool(k, "nvdisasm", "-c")
ops = [l.split("*/", 1)[1].strip() for l in sass.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+\S", l)]
ops = [re.sub(r"^@!?U?P\w+\s+", "", o) for o in ops]  # predicates off
ptx = k.asm["ptx"]
print(json.dumps(dict(local=testing.spilled_bytes(k), regs=int(re.search(r"REG:(\d+)", res).group(1)),
                      shared=k.metadata.shared,
                      sass=len(ops), viaddmnmx=sum(o.startswith("VIADDMNMX") for o in ops),
                      imad_hi=sum(o.startswith("IMAD.HI") for o in ops),
                      conversions=sum(o.startswith(("F2I", "I2F")) for o in ops),
                      f64=sum(o.startswith(("DADD", "DMUL", "DFMA")) for o in ops),
                      mul_rp=ptx.count("mul.rp.f32"),
                      ld_v4=len(re.findall(r"ld\.global(?:\.\w+)*\.v4\.b32", ptx)),
                      ld_v2_b64=len(re.findall(r"ld\.global(?:\.\w+)*\.v2\.b64", ptx)),
                      ld_shared=len(re.findall(r"ld\.shared", ptx)),
                      st_b32=len(re.findall(r"st\.global(?:\.\w+)?\.b32", ptx)),
                      st_v2=len(re.findall(r"st\.global(?:\.\w+)*\.v2\.b32", ptx)),
                      shfl=len(re.findall(r"shfl\.sync", ptx)),
                      st_v4=len(re.findall(r"st\.global(?:\.\w+)*\.v4\.b32", ptx)),
                      st_l2_hint=len(re.findall(r"st\.global\.L1::evict_last\.L2::cache_hint", ptx)),
                      atom=len(re.findall(r"atom\.global(?:\.\w+)*\.max", ptx)),
                      cp_async_16=len(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]+\], \[[^\]]+\], 0x10", ptx)),
                      commit=ptx.count("cp.async.commit_group"),
                      wait=[int(n) for n in re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx)],
                      ld_global=len(re.findall(r"ld\.global", ptx)))))
"""


def _compiled(fmt, cfg, fuse=False, xhat=False, **extra) -> dict:
    return testing.compiled_in_child(_CHILD, json.dumps([fmt, list(cfg), fuse, xhat, extra]))


@pytest.mark.parametrize("fmt,cfg,fuse", [
    ("nvfp4", rg.CONFIG, False), ("mxfp4", rg.CONFIG, True), ("int4-ue5m3", (128, 128, 8, 1), False),
    ("ufp4", (64, 128, 4, 2), False), ("nvfp4", (64, 128, 8, 2, None, False), False), ("nvfp4", rg.WIDE_CONFIG, False),
    ("ufp4", rg.WIDE_CONFIG, False)])
def test_compiles_for_sm90_as_designed(fmt, cfg, fuse):
    cfg = rg.Config(*cfg)
    one_lane = rg.one_lane_fits(parse_fmt(F[fmt]).block, cfg)
    assert one_lane == (fmt != "mxfp4" and cfg.one_lane)
    k = _compiled(fmt, cfg, fuse)
    assert k["local"] == 0  # nothing spilled
    per_thread = cfg.iters * cfg.bm * cfg.bk // (32 * cfg.warps)  # elements
    assert k["ld_v4"] == per_thread // 8  # rows 2i and 2i + 1: 4 words (8 elements) a load
    assert k["shared"] > 0 and k["ld_shared"] > 0  # the transpose
    if one_lane:  # a block's 8 code bytes a store, its amax in one thread
        assert k["st_v2"] == per_thread // 8 and k["shfl"] == 0
    else:  # code bytes 4 a store: per_thread / 2 bytes a copy
        assert k["st_b32"] >= per_thread // 4 and k["shfl"] > 0
    assert k["atom"] == (1 if fuse else 0)
    # each copy's scale bytes kept in L2 (rowcol_gluon.SCALE_L2); the code bytes' stores (counted
    # above) carry no hint
    assert k["st_l2_hint"] >= 2


@pytest.mark.parametrize("fmt,fuse,mode", [("nvfp4", False, 4), ("e1m2-mx16", True, 0)])
def test_column_rht16_compiles_in_thread(fmt, fuse, mode):
    """A column RHT of 16 on the one-lane layout: the f64 butterflies stay in each thread (no
    shuffles but a fused amax's), nothing spills, code bytes still 8 a store; a single-level format records
    two amaxes (the row copy's, the rotated column copy's)."""
    cfg = rg.CONFIG
    k = _compiled(fmt, cfg, fuse, rn_c=16, mode=mode)
    per_thread = cfg.iters * cfg.bm * cfg.bk // (32 * cfg.warps)
    assert k["local"] == 0 and (fuse or k["shfl"] == 0)  # a fused amax reduces across lanes
    assert k["st_v2"] == per_thread // 8
    assert k["atom"] == (2 if fuse else 0)


@pytest.mark.parametrize("mode", [0, 4])
def test_column_rht16_in_f32_compiles(mode):
    """COL_F32 (a bf16 input's column RHT in f32): no f64 arithmetic but the fallback's, whose
    loop over the program's tiles is not unrolled, so the f64 butterflies appear once where the
    f64 kernel has them in each of its two tiles. Either way they are the only f64 arithmetic:
    four DADD stages an element, the signs and the 1 / 4 applied in f32 (_rht_block's PRE). No
    spills; two programs an SM as the f64 kernel (at most 128 registers)."""
    cfg = rg.RHT_RTNE_CONFIG
    f64 = _compiled("nvfp4", cfg, rn_c=16, mode=mode)
    f32 = _compiled("nvfp4", cfg, rn_c=16, mode=mode, col_f32=True)
    per_thread = cfg.iters * cfg.bm * cfg.bk // (32 * cfg.warps)
    assert cfg.iters == 2 and f64["f64"] == 4 * per_thread and f32["f64"] == f64["f64"] // 2
    assert f32["local"] == 0 and max(f32["regs"], f64["regs"]) <= 128


@pytest.mark.parametrize("rn_c,f32,mode,rn_r,row_f32", [
    (0, False, 0, 0, False), (16, False, 0, 0, False), (0, True, 0, 0, False), (16, True, 0, 0, False),
    (16, False, 1, 0, False), (16, False, 2, 0, False), (16, False, 1, 16, False), (16, False, 2, 16, False),
    (16, True, 0, 16, False), (16, False, 1, 16, True), (16, False, 2, 16, True)])
def test_amax_pass_compiles(rn_c, f32, mode, rn_r, row_f32):
    """rowcol_gluon's amax pass, bf16 or f32 input: no spills, two atomics a program, and with
    a column RHT of 16 the f64 butterflies in each thread (the rows' max needs no shuffle
    either; only the program's final reductions cross lanes). RHT_MODE 1 (a bf16 input's
    column RHT in f32): no f64 but a row RHT's, a third atomic (the bound); 2 (the fallback):
    the column amax's atomic alone, in f64. A row RHT of 16 (UFP4's calls): its f64 butterflies
    wherever the row amax is taken (not in the fallback); in f32 (row_f32), none in mode 1 and
    a fourth atomic (the row copy's bound), and the fallback's second branch (the row amax, in
    f64) in mode 2."""
    code = ("import json\n"
            "from fourcast.kernels import amax_gluon as ag, testing\n"
            f"k = ag.compile_sm90({rn_c}, None, {f32}, {mode}, {rn_r}, {row_f32})\n"
            "print(json.dumps(dict(local=testing.spilled_bytes(k),\n"
            "                      atom=k.asm['ptx'].count('atom.global'), f64=k.asm['ptx'].count('add.rn.f64')\n"
            "                      + k.asm['ptx'].count('add.f64') + k.asm['ptx'].count('fma.rn.f64'))))\n")
    k = testing.compiled_in_child(code)
    # f32 with the RHT sits at 254-255 registers: Triton 3.6 (the device's) spills nothing,
    # 3.9's ptxas one register (a 4-byte store and load, 8 bytes of stack)
    atoms = {0: 2, 1: 3, 2: 1}[mode] + (row_f32 and mode != 0)
    assert k["local"] <= (8 if f32 and rn_c == 16 else 0) and k["atom"] == atoms
    assert (k["f64"] > 0) == (rn_c == 16 and mode != 1 or rn_r == 16 and (mode == 0 or (mode == 1) != row_f32))


def test_amax_launch_refuses_a_partial_grid():
    """amax_gluon.launch takes whole programs only: a grid of R // rows would skip the rest."""
    from fourcast.errors import ShapeError

    assert ag.launch(512, 384, 16)[0] == (1, 3)  # RHT_CONFIG: 4 warps x 8 tiles of 64 rows
    with pytest.raises(ShapeError, match="whole 512 x 128 programs"):
        ag.launch(640, 384, 16)
    with pytest.raises(ShapeError):
        ag.launch(512, 320, 0)


def test_amax_pass_tiles_and_scope():
    """The amax pass's tile per launch (session 25's timings): without an RHT and with the f32
    column RHT (mode 1) 8 warps x 4 tiles, the f64 RHT (modes 0 and 2) 4 x 8, a row RHT 8 x 2
    (the f64 fallback, mode 2, takes no row amax); a call is served only where every launch's
    tile divides it (the f64 fallback's 512 rows too)."""
    assert ag.tile_for(0) == ag.tile_for(16, 1) == ag.CONFIG == rg.Config(64, 128, 8, 4)
    assert ag.tile_for(16, 1, 16) == ag.tile_for(0, 0, 16) == ag.ROW_RHT_CONFIG == rg.Config(64, 128, 8, 2)
    assert ag.tile_for(16, 2, 16) == ag.RHT_CONFIG
    # the row RHT in f32 (ROW_RHT_F32's variant): its fallback recomputes the row amax in f64
    assert ag.tile_for(16, 1, 16, True) == ag.ROW_F32_CONFIG == rg.Config(64, 128, 8, 4, 128)
    assert ag.tile_for(16, 2, 16, True) == ag.ROW_RHT_CONFIG
    assert ag.row_f32_on(16, False, True) and not ag.row_f32_on(16, True, True)
    assert not ag.row_f32_on(0, False, True)
    assert ag.row_f32_on(16, False) == ag.ROW_RHT_F32
    assert ag.tile_for(16, 0) == ag.tile_for(16, 2) == ag.RHT_CONFIG == rg.Config(64, 128, 4, 8)
    assert ag.modes(16, False) == (1, 2) and ag.modes(16, True) == ag.modes(0, False) == (0,)
    assert ag.modes(16, False, rht_f32=False) == (0,)
    bf, f32 = torch.bfloat16, torch.float32
    assert ag.applies(torch.empty(256, 128, dtype=bf), (0, 0))
    assert not ag.applies(torch.empty(256, 128, dtype=bf), (0, 16))  # the fallback's tile: 512 rows
    assert ag.applies(torch.empty(512, 128, dtype=bf), (0, 16))
    assert ag.applies(torch.empty(256, 128, dtype=f32), (0, 0))
    assert not ag.applies(torch.empty(128, 128, dtype=f32), (0, 0))
    assert ag.applies(torch.empty(512, 128, dtype=bf), (16, 16))
    assert ag.applies(torch.empty(512, 128, dtype=f32), (16, 16))
    assert not ag.applies(torch.empty(64, 128, dtype=f32), (16, 16))  # a row RHT's tile: 128 rows
    # both RHTs in f32: 256 rows (mode 1), the fallback's 128; the row RHT in f64: the fallback's 512
    assert ag.applies(torch.empty(256, 128, dtype=bf), (16, 16), row_f32=True)
    assert not ag.applies(torch.empty(128, 128, dtype=bf), (16, 16), row_f32=True)
    assert not ag.applies(torch.empty(256, 128, dtype=bf), (16, 16), row_f32=False)
    # a row RHT alone: strip.py's pass (the kernel records the column copy's amax after a column RHT)
    assert not ag.applies(torch.empty(512, 128, dtype=bf), (16, 0))
    assert not ag.applies(torch.empty(512, 128, dtype=f32), (16, 0))
    assert not ag.applies(torch.empty(512, 128, dtype=bf), (32, 0))  # a row RHT of 32: strip.py's pass
    assert ag.applies(torch.empty(128, 128, dtype=bf), (0, 0), (64, 128, 8, 2))


@pytest.mark.parametrize("row_f32", [False, True])
def test_ufp4_amax_pass_takes_the_row_rht_in_f32_on_request(monkeypatch, row_f32):
    """UFP4's X call measuring its amax (a row and a column RHT of 16) on an sm_90 GPU (forced
    here): two amax launches, RHT_MODE 1 then its fallback, with ROW_F32 as CONFIG_OVERRIDE
    "amax_row_rht_f32" says (the benchmarks' switch; amax_gluon.ROW_RHT_F32 by default), each at
    tile_for's tile for it."""
    monkeypatch.setattr(qk, "_gluon_rowcol_ok", lambda *a, **k: True)
    monkeypatch.setattr(qk, "_rowcol_gluon_for", lambda x: rg)
    monkeypatch.setattr(qk, "_ROWCOL_PLANS", {})
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "amax_row_rht_f32", row_f32)
    calls = []
    monkeypatch.setattr(qk.launcher, "run", lambda fn, grid, args, consts: calls.append((fn, grid, consts)))
    x = torch.zeros(512, 256, dtype=torch.bfloat16)
    rht = (16, torch.ones(16))
    qk.launch_rowcol(x, parse_fmt(F["ufp4"]), "rtne", "rtne", 0, 0, rht, rht, None, None, write_codes=(False, True),
                     write_xhat=(True, False), unscaled=True)
    assert [c[0] for c in calls] == [ag._amax_kernel, ag._amax_kernel, rg._rowcol_kernel]
    for (_, grid, consts), mode in zip(calls, (1, 2)):
        cfg = ag.tile_for(16, mode, 16, row_f32)
        assert consts["RHT_MODE"] == mode and consts["ROW_F32"] == row_f32 and consts["RN_R"] == 16
        assert grid == (512 // (cfg.bm * cfg.iters), 256 // cfg.bk) and consts["NW"] == cfg.warps


_SWEEP = r"""
import itertools, json, torch
from fourcast.kernels import amax_gluon as ag, quantize as qk, rowcol_gluon as rg, testing
qk._rowcol_gluon_for = lambda x: rg  # plan as on an sm_90 GPU
names = ["nvfp4", "nvfp4-torchao", "mxfp4", "mxfp4-rceil", "ue5m3", "ufp4", "ufp4-int4", "int4-sm-mx", "e1m2-mx16",
         "int4-ue5m3"]
rhts = [(0, 0), (0, 16), (16, 0), (32, 0), (16, 16), (32, 16), (0, 32), (32, 32)]
outs = [((True, True), (False, False)), ((False, True), (True, False)), ((False, False), (True, True)),
        ((True, False), (False, True))]
KEY = ("BM", "BK", "NW", "RN_R", "RN_C", "B", "F32", "COL_F32")  # what the kernels' static asserts read
todo, kinds = {}, 0
for name, r_r, r_c, rht, (codes, xhat), dtype in itertools.product(
        names, ("rtne", "sr16"), ("rtne", "sr16"), rhts, outs, (torch.bfloat16, torch.float32)):
    spec = qk.parse_fmt(testing.FORMATS[name])
    x = torch.zeros(512, 512, dtype=dtype)
    try:
        plan = qk._rowcol_plan(x, spec, r_r, r_c, rht[0], rht[1], codes, xhat, any(xhat), spec.two_level,
                               not spec.two_level, torch.bfloat16 if any(xhat) else None)
    except Exception:  # refused up front, a typed error (tests elsewhere)
        continue
    kinds += 1
    f32 = dtype == torch.float32
    call = [name, r_r, r_c, list(rht), str(dtype)]
    if plan["route"] == "gluon":
        todo.setdefault(("rowcol",) + tuple(plan["consts"].get(k) for k in KEY),
                        (rg._rowcol_kernel, plan["consts"], f32, call))
    for route, _, consts in plan["amax"] or ():
        if route == "gluon":
            todo.setdefault(("amax",) + tuple(sorted(consts.items())), (ag._amax_kernel, consts, f32, call))
failed = []
for fn, consts, f32, call in todo.values():
    try:
        rg.compile_launch_sm90(fn, consts, f32)
    except Exception as e:
        failed.append(call + [fn.__name__, str(e).strip().splitlines()[-1][:160]])
print(json.dumps(dict(kinds=kinds, compiled=len(todo), failed=failed)))
"""


def test_every_call_kind_the_gluon_route_takes_compiles():
    """quantize routes a row+col call to rowcol_gluon (and its amax pass to amax_gluon) only where
    the kernel takes it: every call kind of a grid (10 formats x 4 rounding pairs x 8 RHT pairs x
    4 output pairs x bf16 / f32), planned as on an sm_90 GPU, compiles: one kernel per distinct
    tile, RHTs, block, input dtype and COL_F32 (what the static asserts read) and every distinct
    amax launch. Session 30 found an "sr16" MXFP4 call with a column RHT routed to a kernel that
    refuses it; its sweep compiled all 1096 distinct kernels of this grid (Triton 3.6), none failed."""
    r = testing.compiled_in_child(_SWEEP)
    assert r["kinds"] == 2560 and r["compiled"] >= 20 and r["failed"] == [], r


def test_one_lane_layouts_fit_their_tiles_only():
    """Config.one_lane's layouts are used where they cover the tile without a lane holding a
    copy of another's elements: blocks of 16, tiles whose row and column blocks divide a warp."""
    fits = rg.one_lane_fits
    assert fits(16, rg.CONFIG) and fits(16, rg.Config(64, 128, 4, 1)) and fits(16, rg.Config(128, 128, 8, 1))
    assert not fits(32, rg.CONFIG) and not fits(16, rg.CONFIG._replace(one_lane=False))
    assert not fits(16, rg.Config(32, 128, 8, 1))  # 16 row pairs: 4 lanes x 8 warps would be 32
    assert not fits(16, rg.Config(64, 64, 8, 1))  # 4 row blocks: 8 lanes x 8 warps of 32 row pairs


@pytest.mark.parametrize("fmt,kw", [("nvfp4", {}), ("ue5m3", dict(xhat=True)), ("mxfp4", {}),
                                    ("ue5m3", dict(xhat=True, xhat_c=True, mode=4))])
def test_looped_tiles_compile_into_a_loop(fmt, kw):
    """Config.loop: a program's row tiles in a loop, not unrolled: one tile's loads and stores
    in the code, at most maxnreg registers. At 80 NVFP4 codes and the X call fit without spills
    (Triton 3.6 and 3.9); the dY call spills 16 bytes there (3.6), MXFP4's fused amax 0 (3.6) or
    32 (3.9); at 64 all four spill, 8-88 bytes (3.6)."""
    cfg = rg.Config(64, 128, 8, 8, 80, True, True)
    k = _compiled(fmt, cfg, fuse=fmt == "mxfp4", **kw)
    per_tile = cfg.bm * cfg.bk // (32 * cfg.warps)  # elements a thread
    assert k["ld_v4"] == per_tile // 8 and k["regs"] <= 80
    if fmt == "nvfp4" or kw == dict(xhat=True):
        assert k["local"] == 0
    if fmt == "nvfp4":
        assert k["st_v2"] == per_tile // 8  # code bytes of one tile, 8 a store
    assert k["atom"] == (1 if fmt == "mxfp4" else 0)  # once a program, after the loop


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("fmt,kw", [("nvfp4", {}), ("ue5m3", dict(xhat=True)), ("nvfp4", dict(f32=True))])
def test_looped_tiles_copy_ahead_through_shared_memory(fmt, kw, stages):
    """Config.stages: the loop's words come through shared memory by cp.async, 16 bytes a copy,
    STAGES - 1 tiles ahead (a commit group a tile: the copies before the loop and one an
    iteration; wait_group leaves STAGES - 1 pending, and 0 after the loop); no global load of x
    left but the two amaxes; at 80 registers nothing spills (NVFP4 codes, the X call, Triton
    3.6 and 3.9)."""
    cfg = rg.Config(64, 128, 8, 8, 80, True, True, stages)
    k = _compiled(fmt, cfg, **kw)
    per_tile = cfg.bm * cfg.bk // (32 * cfg.warps)  # elements a thread
    words_bytes = per_tile * (4 if kw.get("f32") else 2)
    assert k["cp_async_16"] == stages * words_bytes // 16  # the prologue's stages - 1 tiles and the loop's one
    assert k["commit"] == stages and k["wait"] == [stages - 1, 0]  # the loop's wait, then the drain
    assert k["ld_global"] == 2 and k["regs"] <= 80
    if not kw.get("f32"):
        assert k["local"] == 0


def test_grid_stride_tiles_launch_one_wave():
    """Config.per_sm: per_sm x SMs programs (the column tiles each taking P = per_sm x SMs /
    columns of them), at least one a column tile and at most a row tile each; R then needs
    to be a multiple of one row tile only."""
    strided = rg.Config(64, 128, 8, 1, 80, True, True, 2, 3)
    assert rg.grid(8192, 8192, strided, 132) == (6, 64)  # 384 programs on 396 slots
    assert rg.grid(16384, 4096, strided, 132) == (12, 32)
    assert rg.grid(8192, 65536, strided, 132) == (1, 512)  # more column tiles than slots
    assert rg.grid(128, 4096, strided, 132) == (2, 32)  # no more programs than row tiles
    assert rg.grid(8192, 8192, rg.Config(64, 128, 8, 8, 80, True, True), 132) == (16, 64)
    assert rg.rows_per_program(strided) == 64 and rg.rows_per_program(rg.Config(64, 128, 8, 8)) == 512
    x = torch.empty((576, 256), dtype=torch.bfloat16)  # 9 row tiles: not a multiple of 8
    spec = parse_fmt(F["nvfp4"])
    args = (spec, "rtne", "rtne", (0, 0), (True, True), (False, False), False, torch.bfloat16)
    assert rg.applies(x, *args, strided) and not rg.applies(x, *args, rg.Config(64, 128, 8, 8, 80, True, True))


@pytest.mark.parametrize("tile", [(64, 128, 8, 1, None, True, False, 2), (64, 128, 8, 1, None, True, False, 0, 3),
                                  (64, 128, 8, 0), (64, 128, 8, 1, 80, True, True, 5)])
def test_configs_that_cannot_work_are_refused(tile):
    """Stages or per_sm without `loop` (a per_sm grid over the unrolled form would leave rows
    unquantized), no row tile, too many stages: a ValueError naming the Config, from the
    routing check (applies), the constexprs and the grid alike."""
    x = torch.empty((512, 256), dtype=torch.bfloat16)
    args = (parse_fmt(F["nvfp4"]), "rtne", "rtne", (0, 0), (True, True), (False, False), False, torch.bfloat16)
    for call in (lambda: rg.applies(x, *args, tile), lambda: rg.grid(512, 256, tile),
                 lambda: rg.constexprs(qk._constexprs(args[0], "rtne"), tile)):
        with pytest.raises(ValueError, match="Config"):
            call()


@pytest.mark.parametrize("fmt,kw", [("nvfp4", {}), ("ue5m3", dict(xhat=True))])
def test_grid_stride_tiles_compile_into_a_loop(fmt, kw):
    """The grid-stride form (per_sm) compiles to the looped form's one tile of loads, copied
    ahead by cp.async, at most 80 registers: the X call spills nothing (Triton 3.6 and 3.9),
    NVFP4 codes nothing under 3.6 and one register under 3.9 (8 bytes of stack)."""
    cfg = rg.Config(64, 128, 8, 1, 80, True, True, 2, 3)
    k = _compiled(fmt, cfg, **kw)
    per_tile = cfg.bm * cfg.bk // (32 * cfg.warps)
    assert k["cp_async_16"] == 2 * per_tile * 2 // 16 and k["wait"] == [1, 0]
    assert k["local"] <= (0 if kw else 8) and k["regs"] <= 80


def test_sr16_dy_call_compiles_without_spills():
    """The dY call (both copies decoded, "sr16", the seed in device memory as under CUDA
    graphs): no spills; both x_hat copies go out 16 bytes a store (the column copy's through
    a second layout conversion)."""
    bm, bk, warps, iters = rg.CONFIG[:4]
    k = _compiled("ue5m3", rg.CONFIG, xhat=True, xhat_c=True, mode=4, seed_ptr=True)
    assert k["local"] == 0
    assert k["st_v4"] == 2 * iters * bm * bk // (32 * warps) // 8
    assert k["st_l2_hint"] == 0  # no scale bytes written


@pytest.mark.parametrize("fmt,kw", [("nvfp4", {}), ("mxfp4", {}), ("ue5m3", dict(xhat=True)),
                                    ("ue5m3", dict(xhat=True, xhat_c=True, mode=4)),
                                    ("nvfp4", dict(xhat=True, xhat_c=True, mode=4, rn_c=16))])
def test_short_arithmetic_reaches_the_sass(fmt, kw):
    """Session 21's forms compile to what they are for (quantize._add_max, _sr16_aligned):
    an element's big' of RTNE codes one VIADDMNMX (both copies codes: two an element), and
    "sr16" one mul.rp an element and no F2I or I2F; no conversion anywhere."""
    cfg = rg.CONFIG
    k = _compiled(fmt, cfg, **kw)
    per_thread = cfg.iters * cfg.bm * cfg.bk // (32 * cfg.warps)
    assert k["conversions"] == 0 and k["local"] == 0
    codes = 2 - kw.get("xhat", False) - kw.get("xhat_c", False)  # copies written as codes
    if kw.get("mode") == 4:
        assert k["mul_rp"] == 2 * per_thread
    else:
        assert k["mul_rp"] == 0 and k["viaddmnmx"] >= codes * per_thread


def test_config_for_takes_each_tile_only_where_measured_faster():
    """A bf16 input's packed column copy with a column RHT takes one row tile at 80 registers
    (RTNE and "sr16"); other RTNE calls with a column RHT (TE's X call) two row tiles a program
    where the rows fill them; a bf16 input's RTNE calls without an RHT whose column copy is
    packed (both packed; the X call) the 128 x 128 tile on 16 warps where the rows fill it;
    every other call, and shapes they do not fit, the one-tile CONFIG."""
    r80 = rg.RHT_PACKED_CONFIG
    assert r80.iters == 1 and r80.maxnreg == 80 and r80[:3] == rg.CONFIG[:3]
    assert rg.config_for(32768, "rtne", 16, bf16=True) == rg.config_for(64, "sr16", 16, bf16=True) == r80
    two = rg.RHT_RTNE_CONFIG
    assert two.iters == 2 and two[:3] == rg.CONFIG[:3] and rg.CONFIG.iters == 1
    assert rg.config_for(32768, "rtne", 16) == rg.config_for(32768, "rtne", 16, bf16=True, xhat=(True, False)) == two
    assert rg.config_for(32768 - 64, "rtne", 16) == rg.CONFIG  # one row tile left over
    assert rg.config_for(32768, "sr16", 16) == rg.config_for(32768, "rtne", 0) == rg.CONFIG
    wide = rg.WIDE_CONFIG
    assert (wide.bm, wide.bk, wide.warps, wide.iters) == (128, 128, 16, 1)
    assert wide.bm * wide.bk // wide.warps == rg.CONFIG.bm * rg.CONFIG.bk // rg.CONFIG.warps  # elements a warp
    assert rg.config_for(32768, "rtne", 0, bf16=True) == rg.config_for(128, "rtne", 0, bf16=True,
                                                                       xhat=(True, False)) == wide
    assert rg.config_for(32768 - 64, "rtne", 0, bf16=True) == rg.CONFIG  # half a 128-row tile left over
    assert rg.config_for(32768, "sr16", 0, bf16=True) == rg.config_for(32768, "rtne", 0, bf16=True,
                                                                       xhat=(True, True)) == rg.CONFIG
    assert rg.config_for(32768, "rtne", 0, 32, bf16=True) == rg.config_for(32768, "rtne", 0, 16, "sr16",
                                                                           bf16=True) == rg.CONFIG
    # blocks of 32 with "sr16" on a copy or a row RHT: one lane a block, on 4 warps
    b32 = rg.BLOCK32_CONFIG
    assert rg.one_lane_fits(32, b32) and not rg.one_lane_fits(32, rg.CONFIG)
    assert rg.config_for(32768, "rtne", 0, 32, "sr16") == rg.config_for(32768, "rtne", 0, 32, "rtne", 32) == b32
    assert rg.config_for(32768, "rtne", 0, 32) == rg.CONFIG  # MXFP4 codes keep session 17's layouts


@pytest.mark.parametrize("fmt,kw", [("nvfp4", {}), ("ue5m3", dict(xhat=True)), ("nvfp4", dict(xhat=True, rn_c=16))])
def test_f32_input_compiles_without_spills(fmt, kw):
    """An f32 input: two f32 a 64-bit word, loaded 16 bytes at a time (two words), no spills."""
    cfg = rg.config_for(1 << 16, "rtne", kw.get("rn_c", 0))
    k = _compiled(fmt, cfg, f32=True, **kw)
    assert k["local"] == 0 and k["ld_v2_b64"] == cfg.iters * cfg.bm * cfg.bk // (32 * cfg.warps) // 4


def test_mxfp4_x_call_compiles_without_spills():
    """MXFP4's X call (a row RHT of 32 in one thread, RTNE, decoded; the column copy "sr16",
    packed) at one lane a block of 32: no spills, no shuffles (a block's amax, RHT and two
    Philox groups stay in its thread), the row x_hat 16 bytes a store (16-byte stores of the
    column copy's code bytes besides)."""
    cfg = rg.BLOCK32_CONFIG
    k = _compiled("mxfp4", cfg, xhat=True, rn_r=32, mode=0, mode_c=4)
    assert k["local"] == 0 and k["shfl"] == 0
    assert k["st_v4"] > cfg.iters * cfg.bm * cfg.bk // (32 * cfg.warps) // 8


def test_te_dy_call_compiles_without_spills():
    """TE's dY call (both copies decoded, "sr16", a column RHT of 16, the seed in device
    memory): the f64 butterflies and the second layout conversion fit without spills, both
    x_hat copies 16 bytes a store."""
    bm, bk, warps, iters = rg.CONFIG[:4]
    k = _compiled("nvfp4", rg.CONFIG, xhat=True, xhat_c=True, mode=4, seed_ptr=True, rn_c=16)
    assert k["local"] == 0 and k["shfl"] == 0
    assert k["st_v4"] == 2 * iters * bm * bk // (32 * warps) // 8


def test_decoded_row_goes_out_16_bytes_a_store():
    """The X call's row copy as x_hat: a thread's 8 elements of a row as one 16-byte store."""
    bm, bk, warps, iters = rg.CONFIG[:4]
    k = _compiled("ue5m3", rg.CONFIG, xhat=True)
    assert k["local"] == 0
    assert k["st_v4"] == iters * bm * bk // (32 * warps) // 8


def _applies(x, fmt="nvfp4", rounding="rtne", rht=(0, 0), codes=(True, True), xhat=(False, False), unscaled=True,
             dtype=torch.bfloat16, config=rg.CONFIG):
    return rg.applies(x, parse_fmt(F[fmt]), rounding, rounding, rht, codes, xhat, unscaled, dtype, config)


@pytest.mark.parametrize("fmt", ["ufp4", "ufp4-int4"])
@pytest.mark.parametrize("call", ["packed", "X", "W", "X f32", "dY", "packed sr16"])
def test_row_and_column_rht_compile_at_their_tiles(fmt, call):
    """UFP4's calls carry a row and a column RHT of 16 (both f64 butterflies in one lane). At
    config_for's tile, one a program with registers unbounded (106-126 under Triton 3.6), each
    compiles without spills; but the X and W calls (a bf16 input's), at 80 registers for three
    programs an SM: they spill 8-16 bytes under Triton 3.6 and ran 0.88-0.89x the unbounded
    tile's time on an H100 (session 29); 32-56 under Triton 3.9, so at most 64 bytes a thread here."""
    xhat_r, xhat_c, mode, f32 = dict(packed=(False, False, 0, False), X=(True, False, 0, False),
                                     W=(True, True, 0, False),
                                     **{"X f32": (True, False, 0, True), "dY": (True, True, 4, False),
                                        "packed sr16": (False, False, 4, False)})[call]
    rounding = "sr16" if mode else "rtne"
    cfg = rg.config_for(1 << 16, rounding, 16, 16, rounding, 16, not f32, (xhat_r, xhat_c))
    capped = call in ("X", "W")
    assert cfg == (rg.RHT_PACKED_CONFIG if capped else rg.CONFIG)
    k = _compiled(fmt, cfg, False, xhat_r, xhat_c=xhat_c, mode=mode, rn_c=16, rn_r=16, f32=f32, seed_ptr=mode == 4)
    assert k["f64"] > 0 and (k["local"] <= 64 if capped else k["local"] == 0)


def test_row_and_column_rht_go_to_gluon(monkeypatch):
    """quantize routes a call with a row and a column RHT (UFP4's) to rowcol_gluon, as one with either."""
    monkeypatch.setattr(qk, "_rowcol_gluon_for", lambda x: rg)
    x = torch.zeros(128, 256, dtype=torch.bfloat16)
    spec = parse_fmt(F["ufp4"])
    on = (True, True), (False, False)
    assert all(qk._gluon_rowcol_ok(x, spec, "rtne", "rtne", rht, *on) for rht in ((16, 16), (0, 16), (16, 0)))


def test_applies_to_its_scope_only():
    x = torch.zeros(128, 256, dtype=torch.bfloat16)
    assert _applies(x) and _applies(x, "mxfp4") and _applies(x, "ufp4-int4") and _applies(x, "int4-ue5m3")
    assert not _applies(x, "nvfp4-2d") and not _applies(x, "mxfp8") and not _applies(x, "fp8")
    assert _applies(x.float()) and not _applies(x.half())  # f32: two elements a 64-bit word
    assert not _applies(x, rounding="sr") and not _applies(x, rounding="sr4")
    # a column RHT of 16: blocks of 16 in one lane, either copy packed or decoded; no row RHT
    assert _applies(x, rht=(0, 16)) and _applies(x, rht=(0, 16), rounding="sr16")
    assert _applies(x, rht=(0, 16), codes=(False, True), xhat=(True, False))  # the X call
    assert _applies(x, rht=(0, 16), codes=(False, False), xhat=(True, True), rounding="sr16")  # TE's dY call
    assert not _applies(x, rht=(0, 32)) and not _applies(x, "mxfp4", rht=(0, 32))
    # not on blocks of 32, even where their one-lane tile fits (the kernel's column RHT spans a
    # block: a static assert; session 30 found "sr16" MXFP4 calls routed here and refused there)
    assert not _applies(x, "mxfp4", rht=(0, 16), rounding="sr16", config=rg.BLOCK32_CONFIG)
    # a row RHT of the block size in one lane (MXFP4's Fprop operands); beside a column RHT of
    # 16 on blocks of 16 (UFP4's calls; quantize routes them here only once checked on a GPU)
    b32 = rg.BLOCK32_CONFIG
    assert _applies(x, rht=(16, 0)) and _applies(x, rht=(16, 16)) and not _applies(x, rht=(32, 0))
    assert _applies(x, "ufp4", rht=(16, 16), codes=(False, True), xhat=(True, False))
    two_lanes = (64, 128, 8, 2, None, False)
    assert not _applies(x, "mxfp4", rht=(32, 16), config=b32) and not _applies(x, rht=(16, 16), config=two_lanes)
    assert _applies(x, "mxfp4", rht=(32, 0), config=b32) and not _applies(x, "mxfp4", rht=(32, 0))
    assert _applies(x, "mxfp4", rounding="sr16", config=b32)
    mixed = rg.applies(x, parse_fmt(F["mxfp4"]), "rtne", "sr16", (32, 0), (False, True), (True, False), True,
                       torch.bfloat16, b32)  # MXFP4's X call
    assert mixed
    assert not _applies(x, rht=(0, 16), config=(64, 128, 8, 2, None, False))
    # "sr16": a block of 16 is a group; a block of 32 two, in one lane
    assert _applies(x, rounding="sr16") and not _applies(x, "mxfp4", rounding="sr16")
    assert rg.applies(x, parse_fmt(F["nvfp4"]), "rtne", "sr16", (0, 0), (True, True), (False, False), True,
                      torch.bfloat16)  # each copy its own rounding
    assert not rg.applies(x, parse_fmt(F["nvfp4"]), "rtne", "sr", (0, 0), (True, True), (False, False), True,
                          torch.bfloat16)
    assert not _applies(x, codes=(True, False)) and not _applies(x, xhat=(True, True))  # one output a copy
    x_call = dict(codes=(False, True), xhat=(True, False))  # ops.rowcol_operands' X call
    assert _applies(x, **x_call) and _applies(x, dtype=torch.float16, **x_call)
    assert not _applies(x, unscaled=False, **x_call) and not _applies(x, dtype=torch.float32, **x_call)
    dy_call = dict(codes=(False, False), xhat=(True, True), rounding="sr16")  # both decoded, "sr16"
    assert _applies(x, "ue5m3", **dy_call) and _applies(x, codes=(True, False), xhat=(False, True))
    assert not _applies(x.double()) and not _applies(x[:96]) and not _applies(x[:, :192])
    assert _applies(x[:, :128]) and not _applies(x[:, :128], config=(64, 256, 4, 1))
    assert _applies(x, config=(64, 128, 4, 2)) and not _applies(x, config=(64, 128, 4, 4))


@pytest.mark.parametrize("name,rounding,codes,xhat,amax,seed,rn_c", [
    ("nvfp4", "rtne", (True, True), (False, False), None, 0, 0),  # two-level, measured: strip.py's amax pass first
    ("mxfp4", "rtne", (True, True), (False, False), None, 0, 0),  # single-level: the amax recorded in-kernel
    ("ue5m3", "rtne", (False, True), (True, False), 0.5, 0, 0),  # the X call, amax given
    ("ue5m3", "sr16", (False, False), (True, True), 0.5, "tensor", 0),  # the dY call, seed in memory
    ("nvfp4", "sr16", (True, True), (False, False), None, 0, 16),  # TE's dY call: a column RHT of 16
    ("e1m2-mx16", "rtne", (True, True), (False, False), None, 0, 16),  # single-level, rotated column: two amaxes
    ("nvfp4", "sr16", (False, False), (True, True), 0.5, "tensor", 16),  # TE's dY call: both decoded
    ("mxfp4", "rtne", (False, True), (True, False), None, 0, -32),  # MXFP4's X call: a row RHT of 32
    ("ufp4", "rtne", (False, True), (True, False), None, 0, (16, 16)),  # UFP4's X call: both RHTs, amax measured
])
def test_launch_rowcol_hands_the_gluon_kernel_every_parameter(monkeypatch, name, rounding, codes, xhat, amax, seed,
                                                              rn_c):
    """quantize.launch_rowcol on the Gluon route (forced here; it needs an sm_90 GPU): the
    launch's runtime arguments are the kernel's, in its order, and every constexpr is given,
    so what tests/gpu checks in bits is what a launch hands over."""
    monkeypatch.setattr(qk, "_gluon_rowcol_ok", lambda *a, **k: True)
    monkeypatch.setattr(qk, "_ROWCOL_PLANS", {})
    calls = []
    monkeypatch.setattr(qk.launcher, "run", lambda fn, grid, args, consts: calls.append((fn, grid, args, consts)))
    x = torch.zeros(512, 384, dtype=torch.bfloat16)  # whole programs of every amax tile
    seed_arg = torch.tensor([5], dtype=torch.int64) if seed == "tensor" else 5
    spec = parse_fmt(F[name])
    # rn_c < 0: a row RHT of -rn_c; a pair: (row, column) RHT sizes
    rn_r, rn_c = rn_c if isinstance(rn_c, tuple) else (-rn_c, 0) if rn_c < 0 else (0, rn_c)
    signs, signs_r = torch.ones(16), -torch.ones(rn_r or 32)
    rht_c = (16, signs) if rn_c else None
    rht_r = (rn_r, signs_r) if rn_r else None
    o = qk.launch_rowcol(x, spec, rounding, rounding, seed_arg, 7, rht_r, rht_c, amax, amax, write_codes=codes,
                         write_xhat=xhat, unscaled=True)
    fn, grid, args, consts = calls[-1]
    cfg = rg.config_for(512, rounding, rn_c, spec.block, rounding, rn_r, True, xhat)
    assert fn is rg._rowcol_kernel and grid == rg.grid(512, 384, cfg)
    names = [p.name for p in fn.params]
    runtime = [p.name for p in fn.params if not p.is_constexpr]
    assert len(args) == len(runtime)
    assert set(consts) - {"num_warps", "maxnreg"} == {p.name for p in fn.params if p.is_constexpr}
    arg = dict(zip(names, args))
    assert arg["X"] is x and (arg["R"], arg["C"]) == (512, 384)
    assert (arg["offset_r"], arg["offset_c"]) == (7, 7 + x.numel())
    assert arg["seed"] is seed_arg if seed == "tensor" else arg["seed"] == 5
    assert consts["SEED_PTR"] == (seed == "tensor") and consts["MODE_R"] == consts["MODE_C"] == qk.ROUND_ID[rounding]
    assert (consts["XHAT_R_ON"], consts["XHAT_C_ON"]) == xhat
    for i, side in enumerate("RC"):
        assert arg[f"CODES_{side}"] is o["codes"][i] and arg[f"SCALES_{side}"] is o["scales"][i]
        assert arg[f"XHAT_{side}"] is o["xhat"][i]
        assert (arg[f"XHAT_{side}"].shape == x.shape) if xhat[i] else (arg[f"CODES_{side}"].numel() == x.numel() // 2)
    assert arg["TS_OUT"] is o["ts"]
    fresh = spec.two_level and amax is None
    assert len(calls) == (2 if fresh else 1) and (not fresh or calls[0][0].__name__ == "_strip_amax_kernel")
    if fresh:  # on an sm_90 GPU the amax pass is rowcol_gluon's: its arguments and every constexpr
        monkeypatch.setattr(qk, "_gluon_amax_ok", lambda *a, **k: True)
        monkeypatch.setattr(qk, "_ROWCOL_PLANS", {})
        calls.clear()
        o = qk.launch_rowcol(x, spec, rounding, rounding, seed_arg, 7, rht_r, rht_c, amax, amax, write_codes=codes,
                             write_xhat=xhat, unscaled=True)
        modes = ag.modes(rn_c, False)  # a column RHT: in f32, then the f64 fallback
        assert modes == ((1, 2) if rn_c else (0,)) and len(calls) == len(modes) + 1
        for (fn0, grid0, args0, consts0), mode in zip(calls, modes):
            assert fn0 is ag._amax_kernel and consts0["RHT_MODE"] == mode and consts0["REVERSED"]
            cfg0 = ag.tile_for(rn_c, mode, rn_r, consts0["ROW_F32"])
            assert grid0 == (512 // (cfg0.bm * cfg0.iters), 384 // cfg0.bk) and consts0["NW"] == cfg0.warps
            amax_arg = dict(zip([q.name for q in fn0.params], args0))
            assert amax_arg["X"] is x and (amax_arg["R"], amax_arg["C"]) == (512, 384)
            assert amax_arg["AMAX_BITS"].data_ptr() == calls[-1][2][names.index("AMAX_IN_R")].data_ptr()
            assert amax_arg["AMAX_BITS"].numel() == 4  # words 2 and 3: RHT_MODE 1's bounds
            assert (amax_arg["SIGNS_C"] is signs) if rn_c else amax_arg["SIGNS_C"].numel() <= 1
            assert (amax_arg["SIGNS_R"] is signs_r) if rn_r else amax_arg["SIGNS_R"].numel() <= 1
            assert set(consts0) - {"num_warps", "maxnreg"} == {q.name for q in fn0.params if q.is_constexpr}
            assert consts0["RN_C"] == rn_c and consts0["RN_R"] == rn_r
            assert consts0["ROW_F32"] == (rn_r == 16 and ag.ROW_RHT_F32)
    assert consts["FUSE_AMAX"] == (not spec.two_level and amax is None)
    if consts["FUSE_AMAX"] and not (rn_c or rn_r):  # one amax, recorded at AMAX_BITS[0], returned for both copies
        assert arg["AMAX_IN_R"].data_ptr() == arg["AMAX_IN_C"].data_ptr() == arg["AMAX_BITS"].data_ptr()
        assert o["amax"][0].data_ptr() == o["amax"][1].data_ptr()
    elif consts["FUSE_AMAX"]:  # an RHT: the column copy's at AMAX_BITS[1]
        assert arg["AMAX_IN_C"].data_ptr() == arg["AMAX_BITS"].data_ptr() + 4 == o["amax"][1].data_ptr()
    assert consts["RN_C"] == rn_c and consts["NORM_C"] == (0.25 if rn_c else 1.0)
    assert consts["COL_F32"] == (rn_c == 16 and rg.COL_RHT_F32)
    assert consts["RN_R"] == rn_r and consts["NORM_R"] == qk.rht_norm(rn_r)  # the core's f64 1 / sqrt(n)
    assert arg["SIGNS_R"].data_ptr() == signs_r.data_ptr() if rn_r else arg["SIGNS_R"].numel() <= 1
    assert arg["SIGNS_C"].data_ptr() == signs.data_ptr() if rn_c else arg["SIGNS_C"].numel() <= 1


def test_rowcol_plans_are_cached_per_override(monkeypatch):
    """quantize._rowcol_plan builds a kind of call's plan once, also under a benchmark's
    CONFIG_OVERRIDE (part of the key): built afresh on every call, the benchmarks' variants
    were timed with the plan's Python in them whenever the host fell behind the GPU."""
    monkeypatch.setattr(qk, "_ROWCOL_PLANS", {})
    x = torch.zeros(256, 384, dtype=torch.bfloat16)
    args = (x, parse_fmt(F["nvfp4"]), "rtne", "rtne", 0, 0, (True, True), (False, False), True, False, False)
    plain = qk._rowcol_plan(*args)
    assert qk._rowcol_plan(*args) is plain
    monkeypatch.setitem(qk.CONFIG_OVERRIDE, "rowcol", "strip")
    pinned = qk._rowcol_plan(*args)
    assert pinned is not plain and pinned["route"] == "strip" and qk._rowcol_plan(*args) is pinned
    monkeypatch.delitem(qk.CONFIG_OVERRIDE, "rowcol")
    assert qk._rowcol_plan(*args) is plain
