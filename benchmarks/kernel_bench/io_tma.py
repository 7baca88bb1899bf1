"""What the device's memory leaves the packed row+col calls (session 27, kernels-h200.md).

io_floor_tma: the packed calls' traffic (both packed copies, no arithmetic) moved by a
persistent kernel whose tiles reach shared memory by TMA, STAGES - 1 tiles ahead of the one
being stored, against rowcol_gluon's one-tile programs (_io_one_lane_kernel x1); same stand-in
bytes, checked by its model (_io_one_lane_ok). Measured on an H100: no gain (99.5 us against
90.3 at 8192^2 with the kernel's column layout).
io_reads, io_writes, io_mixed: x read alone by tile and load path, a packed copy's code bytes
written alone by run length, and a tile program's reads with half as many bytes written. On
the H100 reads alone run at 2.3 TB/s by any tile, registers or TMA, and barely overlap a
program's writes: the both-packed calls' ceiling is ~86% of copy, their tiling's floor 78%,
and 86% (81.3 us) with the same scale bytes written in whole sectors (SCALES_ON 2)."""

from __future__ import annotations

import itertools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from fourcast.kernels.gemm import multiprocessors
from fourcast.kernels.gemm_wgmma import _cta_barrier

from kernel_bench.harness import ARGS, DEV, QSIZES, RES, SMOKE, left, ms, ms_graphed, qbytes, rand, save, section
from kernel_bench.io_floors import _io_one_lane_kernel, _io_one_lane_ok, _nibble_byte, floor_outputs

# Triton 3.6 names the TMA load async_copy_global_to_shared, later releases async_load (the
# old name then raises)
_tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared

# (stages, programs an SM, column layout): 16 KB of shared memory a stage (rows 2i and 2i + 1 of a
# 64 x 128 tile); column layout 0: 32 word columns a warp, 1: rowcol_gluon's (4 column blocks x 8
# word columns a warp: 32 contiguous code bytes per 4 lanes, 4-way bank conflicts reading them;
# layout 0 writes each 32-byte sector as 8-byte pieces from four warps: 2x slower, session 27)
TMA_RUNS = ((2, 1, 0), (3, 1, 0), (4, 1, 0), (6, 1, 0), (8, 1, 0), (2, 2, 0), (3, 2, 0), (4, 2, 0), (3, 3, 0),
            (4, 1, 1), (3, 2, 1), (4, 2, 1))
# (stages, programs an SM, stores): the reads alone (0) and with the row copy's bytes (1)
TMA_PART_RUNS = ((4, 1, 0), (4, 1, 1), (3, 2, 0), (3, 2, 1), (8, 1, 0))
# reads alone by tile (bm, bk: a box of bm / 2 rows of bk / 2 words, each tile's rows 2i and
# 2i + 1 two boxes): (stages, programs an SM) for TMA; the same tiles loaded into registers
READ_TILES = ((64, 128), (32, 256), (16, 512), (128, 128), (64, 256))
READ_RUNS = ((4, 1), (3, 2))
# launch groups of column tiles (_program_tile): 4 x 128 columns make a row's 32-byte sector of
# scale bytes; the one-lane floor's tiles (BM, BK, warps) by their scale bytes' pieces
ORDER_GROUPS = (1, 2, 4, 8)
SCALE_TILES = ((64, 128, 8), (128, 128, 8), (128, 128, 16), (128, 256, 32), (256, 128, 32))
# the stores' L2 eviction policies (name, scale bytes', code bytes'): whether a scale byte sector's
# pieces, written by 4-8 programs, merge in L2 before it is written back when kept there longer
POLICY_TILES = ((64, 128, 8), (128, 128, 16))
POLICY_RUNS = (("scales evict_last", "evict_last", ""), ("scales evict_last, codes evict_first", "evict_last",
                                                         "evict_first"), ("codes evict_first", "", "evict_first"))


@gluon.jit
def _issue(desc, e_buf, o_buf, bar, t, n_c, C, pred, H: gl.constexpr, W: gl.constexpr):
    """Tile t's rows 2i (words [0, C/2) of row pair i in the (R/2, C) view) and 2i + 1 (words
    [C/2, C)) into one stage's two buffers, both on its barrier."""
    tr = t // n_c
    tc = t % n_c
    mbarrier.expect(bar, 2 * H * W * 4, pred=pred)
    _tma_load(desc, [tr * H, tc * W], bar, e_buf, pred=pred)
    _tma_load(desc, [tr * H, C // 2 + tc * W], bar, o_buf, pred=pred)


@gluon.jit
def _xor(a, b):
    return a ^ b


@gluon.constexpr_function
def _read_layout(W):
    """Rows of W words on 8 warps: 8 words a thread along a row, min(32, W / 8) lanes a row
    (64 words: [1, 8], [4, 8], [8, 1], the one-lane row layout's)."""
    tw = min(32, W // 8)
    return gl.BlockedLayout([1, 8], [32 // tw, tw], [8, 1], [1, 0])


@gluon.jit
def _io_ldg_reads_kernel(X, FOLD, C, BM: gl.constexpr, BK: gl.constexpr):
    """The reads of _io_one_lane_kernel x1 alone (a tile a program, rows 2i and 2i + 1 loaded
    as words into registers), folded into one byte a program: TMA's reads-only row against
    the loads the default kernel makes."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    LR: gl.constexpr = _read_layout(W)
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    i = gl.program_id(0) * H + gl.arange(0, H, layout=gl.SliceLayout(1, LR))[:, None]
    w = gl.program_id(1) * W + gl.arange(0, W, layout=gl.SliceLayout(0, LR))[None, :]
    v = gl.load(XW + (2 * i) * (C // 2) + w) ^ gl.load(XW + (2 * i + 1) * (C // 2) + w)
    fold = gl.reduce(gl.reduce(v, 1, _xor), 0, _xor)
    gl.store(FOLD + gl.program_id(0) * gl.num_programs(1) + gl.program_id(1), (fold & 0xFF).to(gl.uint8))


@gluon.jit
def _io_tma_kernel(desc, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: gl.constexpr, BK: gl.constexpr,
                   STAGES: gl.constexpr, COL_LAYOUT: gl.constexpr, STORES: gl.constexpr = 2):
    """_io_one_lane_kernel's packed floor (8 warps, one lane a block of 16) on a persistent grid:
    program p takes tiles p, p + P, ... in row-major order, each arriving by TMA STAGES - 1
    tiles ahead into rings of shared buffers [STAGES, BM / 2, BK / 2] (rows 2i, rows 2i + 1: words,
    no swizzle). STORES 2: both copies' bytes; 1: the row copy's only; 0: none (the words
    folded into one byte a program, so the reads stay): where the floor's time goes."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    # rows: 8 words (a block of 16) a thread, a row's 8 blocks on 8 lanes; columns: 8 row pairs
    # of one word column a thread, 32 word columns a warp (COL_LAYOUT 0) or rowcol_gluon's 4
    # column blocks x 8 word columns (1; TMA_RUNS says what each costs)
    LR: gl.constexpr = _read_layout(W)
    if COL_LAYOUT == 0:
        LC: gl.constexpr = gl.BlockedLayout([8, 1], [1, 32], [4, 2], [0, 1])
    else:
        LC: gl.constexpr = gl.BlockedLayout([8, 1], [4, 8], [1, 8], [0, 1])
    SL: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    e_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, H, W], SL)
    o_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, H, W], SL)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)
    pid = gl.program_id(0)
    P = gl.num_programs(0)
    n_c = C // BK
    count = ((R // BM) * n_c - pid + P - 1) // P
    for st in gl.static_range(STAGES - 1):
        _issue(desc, e_bufs.index(st), o_bufs.index(st), bars.index(st), pid + st * P, n_c, C, st < count, H, W)
    i = gl.arange(0, H, layout=gl.SliceLayout(1, LR))[:, None]
    w = gl.arange(0, W, layout=gl.SliceLayout(0, LR))[None, :]
    ic = gl.arange(0, H, layout=gl.SliceLayout(1, LC))[:, None]
    wc = gl.arange(0, W, layout=gl.SliceLayout(0, LC))[None, :]
    fold = gl.zeros([H, W], gl.int32, LR)
    for k in range(count):
        # the stage read in iteration k - 1 is free once every warp has read it
        fence_async_shared()
        _cta_barrier()
        kn = k + STAGES - 1
        sn = kn % STAGES
        _issue(desc, e_bufs.index(sn), o_bufs.index(sn), bars.index(sn), pid + kn * P, n_c, C, kn < count, H, W)
        s = k % STAGES
        mbarrier.wait(bars.index(s), (k // STAGES) & 1)
        t = pid + k * P
        tr = t // n_c
        tc = t % n_c
        r0 = tr * H
        for half in gl.static_range(2):
            v = (e_bufs if half == 0 else o_bufs).index(s).load(LR)
            if STORES == 0:
                fold = fold ^ v
            else:
                row = 2 * (r0 + i) + half
                gl.store(CODES_R + row * (C // 2) + tc * W + w, _nibble_byte(v, v >> 16, 12))
                m = gl.max(gl.reshape(v, [H, W // 8, 8]), axis=2)
                g = gl.arange(0, W // 8, layout=gl.SliceLayout(0, m.type.layout))[None, :]
                row_s = 2 * (r0 + gl.arange(0, H, layout=gl.SliceLayout(1, m.type.layout))[:, None]) + half
                gl.store(SCALES_R + row_s * (C // 16) + tc * (W // 8) + g, m.to(gl.uint8))
        if STORES == 2:
            ec = e_bufs.index(s).load(LC)
            oc = o_bufs.index(s).load(LC)
            col = 2 * (tc * W + wc)
            gl.store(CODES_C + col * (R // 2) + r0 + ic, _nibble_byte(ec, oc, 12))
            gl.store(CODES_C + (col + 1) * (R // 2) + r0 + ic, _nibble_byte(ec, oc, 28))
            mc = gl.maximum(gl.max(gl.reshape(ec, [H // 8, 8, W]), axis=1),
                            gl.max(gl.reshape(oc, [H // 8, 8, W]), axis=1))
            j = gl.arange(0, H // 8, layout=gl.SliceLayout(1, mc.type.layout))[:, None]
            wj = 2 * (tc * W + gl.arange(0, W, layout=gl.SliceLayout(0, mc.type.layout))[None, :])
            gl.store(SCALES_C + wj * (R // 16) + r0 // 8 + j, mc.to(gl.uint8))
            gl.store(SCALES_C + (wj + 1) * (R // 16) + r0 // 8 + j, (mc >> 16).to(gl.uint8))
    if STORES == 0:
        gl.store(CODES_R + pid, (gl.reduce(gl.reduce(fold, 1, _xor), 0, _xor) & 0xFF).to(gl.uint8))
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))


def tma_descriptor(x: torch.Tensor, bm: int = 64, bk: int = 128) -> TensorDescriptor:
    """x (R, C) bf16 as 32-bit words viewed (R / 2, C): row pair i's two rows side by side,
    boxes of [bm / 2, bk / 2] words."""
    r, c = x.shape
    words = x.view(torch.int32).view(r // 2, c)
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return TensorDescriptor.from_tensor(words, [bm // 2, bk // 2], layout)


def io_tma(x, cr, sr, cc, sc, stages: int, per_sm: int, col_layout: int = 0, stores: int = 2, bm: int = 64,
           bk: int = 128):
    r, c = x.shape
    grid = (min(per_sm * multiprocessors(x.device), (r // bm) * (c // bk)),)
    _io_tma_kernel[grid](tma_descriptor(x, bm, bk), cr, sr, cc, sc, r, c, BM=bm, BK=bk, STAGES=stages,
                         COL_LAYOUT=col_layout, STORES=stores, num_warps=8)


@section("io floor by TMA: the packed calls' traffic, tiles in shared memory stages ahead")
def io_floor_tma():
    """The both-packed io floor at 64 x 128 tiles, 8 warps: _io_one_lane_kernel x1 (the
    default's tiling) against _io_tma_kernel at each (stages, programs an SM) of TMA_RUNS,
    then its reads alone and with the row copy only (TMA_PART_RUNS, each fraction of copy over
    its own bytes), each by do_bench and as a CUDA-graph replay, --repeat samples in
    alternation; every both-copy variant's bytes checked (_io_one_lane_ok); --variants: the runs
    whose names start so. Rows: RES["io_tma"]."""
    if SMOKE:
        return
    out = RES.setdefault("io_tma", [])
    copy = RES["ceilings"].get("copy_tbps", 0)
    for (r, c) in QSIZES:
        x = rand((r, c))
        cr, sr, cc, sc, xr, _ = floor_outputs(x)
        both = qbytes(r, c, 16, 2)
        outs = (cr, sr, xr, cc, sc)
        codes_only = qbytes(r, c, 16, 2) - 2 * r * c // 16  # no scale bytes
        runs = [("one lane x1", both, _one_tile_floor(x, outs)),
                ("one lane x1, codes only (no scale bytes)", codes_only, _one_tile_floor(x, outs, SCALES_ON=0)),
                ("one lane x1, scale bytes contiguous a tile", both, _one_tile_floor(x, outs, SCALES_ON=2))]
        runs += _scale_runs(x, outs)
        runs += [(f"tma {st} stages, {ps} an SM{', kernel LC' if lc else ''}", both,
                  lambda st=st, ps=ps, lc=lc: io_tma(x, cr, sr, cc, sc, st, ps, lc)) for st, ps, lc in TMA_RUNS]
        runs += [(f"tma {st} stages, {ps} an SM, {('reads only', 'row copy only')[so]}",
                  (2 * r * c, qbytes(r, c, 16, 1))[so],
                  lambda st=st, ps=ps, so=so: io_tma(x, cr, sr, cc, sc, st, ps, 0, so)) for st, ps, so in TMA_PART_RUNS]
        if ARGS.variants:  # --variants: the runs whose names start so
            runs = [run for run in runs if run[0].startswith(tuple(ARGS.variants.split(",")))]
        for sample in range(max(1, ARGS.repeat)):
            for name, nbytes, fn in runs:
                if left() < 15:
                    save()
                    return
                try:
                    for t in (cr, sr, cc, sc):
                        t.zero_()
                    fn()
                    checked = nbytes == both and "contiguous" not in name  # stand-in bytes at their places
                    ok = _io_one_lane_ok(x, cr, sr, xr, cc, sc, False) if checked else None
                    t_bench = ms(fn)
                    t_graph, _ = ms_graphed(fn)
                except Exception as exc:  # a variant that does not compile or launch is a result
                    RES["errors"].append(f"io_tma {name} {r}x{c}: {exc!r}")
                    continue
                row = dict(name=name, shape=f"{r}x{c}", sample=sample, bytes_ok=ok, ms=t_bench, ms_graphed=t_graph,
                           frac_copy=nbytes / (t_bench * 1e-3) / 1e12 / copy if copy else None,
                           frac_copy_graphed=nbytes / (t_graph * 1e-3) / 1e12 / copy if copy else None)
                out.append(row)
                print(f"io_tma {name:26s} {r}x{c}: {t_bench * 1e3:6.1f} us (graphed {t_graph * 1e3:6.1f}) "
                      f"{row['frac_copy'] or 0:.0%} / {row['frac_copy_graphed'] or 0:.0%} of copy, bytes ok {ok}")
        save()


def _one_tile_floor(x, outs: tuple, bm: int = 64, bk: int = 128, warps: int = 8, grid=None, **consts):
    """A launch of _io_one_lane_kernel with one row tile a program (rowcol_gluon's default tiling
    unless bm, bk, warps say otherwise) writing outs (row codes, row scales, x_hat scratch, column
    codes, column scales) on the 2-D grid unless given; consts: SCALES_ON, GROUP, the policies."""
    r, c = x.shape
    grid = grid or (r // bm, c // bk)
    return lambda: _io_one_lane_kernel[grid](x, *outs, r, c, BM=bm, BK=bk, NW=warps, XHAT_R_ON=False, ITERS=1,
                                             STAGES=0, STRIDED=False, num_warps=warps, **consts)


def _scale_runs(x, outs: tuple) -> list:
    """The one-lane floor at each SCALE_TILES tile with its scale bytes in place, none, the row
    copy's only and the column copy's only (what each costs: a tile's row scale bytes are BK / 16-
    byte pieces of 32-byte sectors, its column ones BM / 16), at POLICY_TILES' tiles with each
    of POLICY_RUNS' L2 eviction policies, and at 64 x 128 in each launch order of ORDER_GROUPS
    (_program_tile)."""
    r, c = x.shape
    both = qbytes(r, c, 16, 2)
    runs = []
    for (bm, bk, w), (name, scales_on) in itertools.product(SCALE_TILES, (
            ("", 1), (", codes only (no scale bytes)", 0), (", row scale bytes only", 3),
            (", column scale bytes only", 4))):
        if (bm, bk, w) == (64, 128, 8) and scales_on in (0, 1):
            continue  # io_floor_tma's first runs
        nbytes = both - {0: r * c // 8, 1: 0, 3: r * c // 16, 4: r * c // 16}[scales_on]
        runs.append((f"one lane {bm}x{bk} {w} warps{name}", nbytes,
                     _one_tile_floor(x, outs, bm, bk, w, SCALES_ON=scales_on)))
    for (bm, bk, w), (name, scale_policy, code_policy) in itertools.product(POLICY_TILES, POLICY_RUNS):
        runs.append((f"one lane {bm}x{bk} {w} warps, {name}", both,
                     _one_tile_floor(x, outs, bm, bk, w, SCALE_POLICY=scale_policy, CODE_POLICY=code_policy)))
    for g in ORDER_GROUPS:
        runs.append((f"one lane x1, group {g}", both,
                     _one_tile_floor(x, outs, grid=(r // 64 * (c // 128),), GROUP=g)))
    return runs


def compile_sm90(stages: int = 3, col_layout: int = 0):
    """_io_tma_kernel compiled for sm_90a without a GPU (Triton's bundled ptxas): what the CPU
    tier checks (tests/unit/test_io_tma.py)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    fn = _io_tma_kernel
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    consts = dict(BM=64, BK=128, STAGES=stages, COL_LAYOUT=col_layout, STORES=2)
    sig = {a: "*u8" for a in ("CODES_R", "SCALES_R", "CODES_C", "SCALES_C")}
    sig.update(desc=f"tensordesc<i32[32, 64],{layout!r}>", R="i32", C="i32", **{k: "constexpr" for k in consts})
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in ("CODES_R", "SCALES_R", "CODES_C",
                                                                             "SCALES_C", "R", "C")}
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8))


def _time_runs(section_name: str, out: list, shape, runs, do_bench: bool = False) -> bool:
    """Time each (name, bytes, fn) of runs as a CUDA-graph replay (and by do_bench), a row in out
    with its TB/s and fraction of copy; a run that fails is recorded as an error. False once the
    budget is spent (saved)."""
    copy = RES["ceilings"].get("copy_tbps", 0)
    label = "x".join(map(str, shape))
    for name, nbytes, fn in runs:
        if left() < 15:
            save()
            return False
        try:
            fn()
            t_graph, _ = ms_graphed(fn)
            t_bench = ms(fn) if do_bench else None
        except Exception as exc:  # a variant that does not compile or launch is a result
            RES["errors"].append(f"{section_name} {name} {label}: {exc!r}")
            continue
        tbps = nbytes / (t_graph * 1e-3) / 1e12
        out.append(dict(name=name, shape=label, bytes=nbytes, ms_graphed=t_graph, ms=t_bench, tbps=tbps,
                        frac_copy_graphed=tbps / copy if copy else None))
        print(f"{section_name} {name:52s} {label}: {t_graph * 1e3:6.1f} us (graphed) {tbps:.2f} TB/s, "
              f"{tbps / copy if copy else 0:.0%} of copy")
    save()
    return True


@section("io reads: the input's reads alone, by tile, into registers or by TMA")
def io_reads():
    """x read once and nothing written (a byte a program): torch's x.amax() (a reduction that
    reads x in order), _io_ldg_reads_kernel (a tile a program, loads into registers: the
    default kernel's reads) and _io_tma_kernel's reads (STORES 0) at each READ_TILES tile and
    READ_RUNS (stages, programs an SM); do_bench and CUDA-graph replay, TB/s and fraction of
    copy over the input's bytes. Whether the tiles' reads alone stay under copy bandwidth.
    Rows: RES["io_reads"]."""
    if SMOKE:
        return
    out = RES.setdefault("io_reads", [])
    for (r, c) in QSIZES:
        x = rand((r, c))
        fold = torch.empty((r // 16) * (c // 128), dtype=torch.uint8, device=DEV)
        cr = torch.empty(multiprocessors(x.device) * 4, dtype=torch.uint8, device=DEV)
        runs = [("torch x.amax()", 2 * r * c, lambda: x.amax())]
        for bm, bk in READ_TILES:
            runs.append((f"{bm}x{bk} loads", 2 * r * c, lambda bm=bm, bk=bk: _io_ldg_reads_kernel[(r // bm, c // bk)](
                x, fold, c, BM=bm, BK=bk, num_warps=8)))
            runs += [(f"{bm}x{bk} tma {st} stages, {ps} an SM", 2 * r * c,
                      lambda bm=bm, bk=bk, st=st, ps=ps: io_tma(x, cr, cr, cr, cr, st, ps, 0, 0, bm, bk))
                     for st, ps in READ_RUNS]
        if not _time_runs("io_reads", out, (r, c), runs, do_bench=True):
            return


@gluon.jit
def _io_writes_kernel(OUT, ROWS, ROW_BYTES, RUN: gl.constexpr, TILE_ROWS: gl.constexpr, ROWS_FAST: gl.constexpr):
    """Writes alone, in a packed copy's pattern: a program writes TILE_ROWS output rows from byte
    a * RUN on, RUN bytes each (8 a lane), launched as rowcol_gluon's grid runs (row tiles
    fastest): programs side by side write the next run of the same rows (the column copy, R / 2
    bytes a row: 32-byte runs at the default 64-row tile) or (ROWS_FAST) the same run of the next
    rows (the row copy, C / 2 bytes a row: 64-byte runs at a 128-column tile)."""
    L: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (RUN // 8), RUN // 8], [4, 1], [1, 0])
    a = gl.program_id(1) if ROWS_FAST else gl.program_id(0)
    b = gl.program_id(0) if ROWS_FAST else gl.program_id(1)
    row = b * TILE_ROWS + gl.arange(0, TILE_ROWS, layout=gl.SliceLayout(1, L))[:, None]
    col = a * RUN + gl.arange(0, RUN, layout=gl.SliceLayout(0, L))[None, :]
    gl.store(OUT + row.to(gl.int64) * ROW_BYTES + col, (row + col).to(gl.uint8))


# (output, run bytes): the column copy's codes (C rows of R / 2 bytes) and the row copy's (R rows
# of C / 2), in runs of 32 .. 256 bytes
WRITE_RUNS = (("col", 32), ("col", 64), ("col", 128), ("col", 256), ("row", 64), ("row", 128), ("row", 256))


@section("io writes: a packed copy's code bytes written alone, by run length")
def io_writes():
    """The code bytes of one packed copy (R x C / 2 bytes) written with no reads: torch's
    contiguous fill, then _io_writes_kernel in the column copy's layout (C rows of R / 2 bytes)
    and the row copy's (R rows of C / 2), in runs of RUN bytes (WRITE_RUNS; the default tile's
    runs: 32 bytes a column, 64 a row); CUDA-graph replay, TB/s. Whether short runs, not the
    byte count, cost the packed calls their writes. Rows: RES["io_writes"]."""
    if SMOKE:
        return
    out = RES.setdefault("io_writes", [])
    for (r, c) in QSIZES:
        buf = torch.empty(r * c // 2, dtype=torch.uint8, device=DEV)
        runs = [("torch fill_ (contiguous)", buf.numel(), lambda: buf.fill_(7))]
        for kind, run in WRITE_RUNS:
            rows, row_bytes = (c, r // 2) if kind == "col" else (r, c // 2)
            grid = (rows // 128, row_bytes // run) if kind == "row" else (row_bytes // run, rows // 128)
            runs.append((f"{kind} copy, {run}-byte runs", buf.numel(),
                         lambda rows=rows, row_bytes=row_bytes, run=run, grid=grid, fast=kind == "row":
                         _io_writes_kernel[grid](buf, rows, row_bytes, RUN=run, TILE_ROWS=128, ROWS_FAST=fast,
                                                 num_warps=4)))
        if not _time_runs("io_writes", out, (r, c), runs):
            return


@gluon.jit
def _io_mixed_kernel(X, OUT, C, BM: gl.constexpr, BK: gl.constexpr, CONTIGUOUS: gl.constexpr):
    """Reads and writes together: a program loads its [BM, BK] tile as _io_ldg_reads_kernel does
    and writes half its bytes (rows 2i ^ rows 2i + 1, as words) into a contiguous slot of its
    own (CONTIGUOUS) or at the tile's place in an (R / 2, C / 2)-word output (runs of BK / 2
    words): whether a tile program's stores overlap its loads at the copy's 3 TB/s, and
    whether their pattern matters."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    LR: gl.constexpr = _read_layout(W)
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    OW = OUT.to(gl.pointer_type(gl.int32), bitcast=True)
    ii = gl.arange(0, H, layout=gl.SliceLayout(1, LR))[:, None]
    ww = gl.arange(0, W, layout=gl.SliceLayout(0, LR))[None, :]
    i = gl.program_id(0) * H + ii
    w = gl.program_id(1) * W + ww
    v = gl.load(XW + (2 * i) * (C // 2) + w) ^ gl.load(XW + (2 * i + 1) * (C // 2) + w)
    if CONTIGUOUS:
        slot = (gl.program_id(0) * gl.num_programs(1) + gl.program_id(1)).to(gl.int64) * (H * W)
        gl.store(OW + slot + ii * W + ww, v)
    else:
        gl.store(OW + i.to(gl.int64) * (C // 2) + w, v)


@section("io mixed: a tile program's reads and half as many bytes of writes")
def io_mixed():
    """_io_mixed_kernel (64 x 128 tiles: x read, half its bytes written) with contiguous slots and
    at the tiles' places, beside copy (the same read and write bytes: x's half-size copy of a
    half) as CUDA-graph replays: the time against the reads alone (io_reads) plus the writes
    alone, and against copy's rate. Rows: RES["io_mixed"]."""
    if SMOKE:
        return
    out = RES.setdefault("io_mixed", [])
    for (r, c) in QSIZES:
        x = rand((r, c))
        half = torch.empty((r // 2, c), dtype=torch.bfloat16, device=DEV)
        y = torch.empty_like(half)
        runs = [("copy of half of x", 2 * half.numel() * 2, lambda: y.copy_(half)),
                ("reads of x alone (64x128 loads)", 2 * r * c, lambda: _io_ldg_reads_kernel[(r // 64, c // 128)](
                    x, y, c, BM=64, BK=128, num_warps=8)),
                ("writes alone (fill_ of half x's bytes)", r * c, lambda: y.fill_(1.0))]
        for contiguous in (True, False):
            runs.append((f"x read, half its bytes written ({'contiguous slots' if contiguous else 'tile places'})",
                         3 * r * c, lambda contiguous=contiguous: _io_mixed_kernel[(r // 64, c // 128)](
                             x, y, c, BM=64, BK=128, CONTIGUOUS=contiguous, num_warps=8)))
        if not _time_runs("io_mixed", out, (r, c), runs):
            return
