"""io floors: a quantizer's bytes moved with no arithmetic, per tile (Triton's transpose and
explicit Gluon layouts), the ceiling each tiling leaves the quantizers."""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


from triton.experimental.gluon.language.nvidia.ampere import async_copy

from fourcast.kernels import rowcol_gluon as rg
from fourcast.kernels.gemm import multiprocessors
from fourcast.kernels.quantize import SCALE_L2
from fourcast.kernels.rowcol_gluon import _col_layout, _row_layout, _row_tiles, _tile_words, _words_ring

from kernel_bench.harness import QSIZES, RES, SMOKE, left, rand, save, section, time_quantizer


@triton.jit
def _io_store_rows(b, CODES, SCALES, pid_r, pid_k, K, BM: tl.constexpr, BK: tl.constexpr):
    """A quantizer's bytes for an int [BM, BK] tile of bf16 bits, rows pid_r's and columns
    pid_k's of a (., K) layout: BK/2 code bytes (a stand-in nibble pair) and BK/16 scale
    bytes (a block max) per row; no quantizer arithmetic."""
    m = pid_r * BM + tl.arange(0, BM)[:, None]
    lo, hi = tl.split(tl.reshape(b, (BM, BK // 2, 2)))
    k2 = pid_k * (BK // 2) + tl.arange(0, BK // 2)[None, :]
    tl.store(CODES + m * (K // 2) + k2, ((lo >> 12) | ((hi >> 12) << 4)).to(tl.uint8))
    k16 = pid_k * (BK // 16) + tl.arange(0, BK // 16)[None, :]
    tl.store(SCALES + m * (K // 16) + k16, tl.max(tl.reshape(b, (BM, BK // 16, 16)), axis=2).to(tl.uint8))


@triton.jit
def _io_tile(X, K, BM: tl.constexpr, BK: tl.constexpr):
    m = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    k = tl.program_id(1) * BK + tl.arange(0, BK)[None, :]
    return tl.load(X + m * K + k).to(tl.int16, bitcast=True).to(tl.int32)


@triton.jit
def _io_floor_kernel(X, CODES, SCALES, M, K, BM: tl.constexpr, BK: tl.constexpr):
    """The quantizer's memory traffic without its arithmetic: load a bf16 tile, store
    BK/2 bytes + BK/16 bytes per row (a calibration of the tiling, not a quantizer)."""
    _io_store_rows(_io_tile(X, K, BM, BK), CODES, SCALES, tl.program_id(0), tl.program_id(1), K, BM, BK)


def io_floor(x):
    r, c = x.shape
    codes = torch.empty((r, c // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((r, c // 16), dtype=torch.uint8, device=x.device)
    _io_floor_kernel[(r // 64, c // 64)](x, codes, scales, r, c, BM=64, BK=64, num_warps=8)


@triton.jit
def _io_floor_rowcol_kernel(X, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: tl.constexpr, BK: tl.constexpr):
    """_io_floor_kernel for both copies: the row copy's bytes as there, the column copy's
    (rows 2i and 2i + 1 of a column share a code byte) stored transposed through tl.trans
    (Triton moves the tile through shared memory): the traffic of a transposing row+col
    quantizer without its arithmetic."""
    b = _io_tile(X, C, BM, BK)
    _io_store_rows(b, CODES_R, SCALES_R, tl.program_id(0), tl.program_id(1), C, BM, BK)
    _io_store_rows(tl.trans(b), CODES_C, SCALES_C, tl.program_id(1), tl.program_id(0), R, BK, BM)


@triton.jit
def _io_floor_rowcol_packed_kernel(X, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: tl.constexpr,
                                   BK: tl.constexpr):
    """_io_floor_rowcol_kernel with the column copy's bytes made before the transpose: code
    bytes of row pairs and block maxes in x's orientation, then tl.trans of those bytes (an
    eighth of the tile's bytes through shared memory, where the other moves the tile)."""
    b = _io_tile(X, C, BM, BK)
    _io_store_rows(b, CODES_R, SCALES_R, tl.program_id(0), tl.program_id(1), C, BM, BK)
    lo, hi = tl.split(tl.permute(tl.reshape(b, (BM // 2, 2, BK)), (0, 2, 1)))
    codes = tl.trans(((lo >> 12) | ((hi >> 12) << 4)).to(tl.uint8))  # [BK, BM / 2]
    scales = tl.trans(tl.max(tl.reshape(b, (BM // 16, 16, BK)), axis=1).to(tl.uint8))  # [BK, BM / 16]
    c = tl.program_id(1) * BK + tl.arange(0, BK)[:, None]
    i = tl.program_id(0) * (BM // 2) + tl.arange(0, BM // 2)[None, :]
    tl.store(CODES_C + c * (R // 2) + i, codes)
    j = tl.program_id(0) * (BM // 16) + tl.arange(0, BM // 16)[None, :]
    tl.store(SCALES_C + c * (R // 16) + j, scales)


@gluon.jit
def _nibble_byte(lo, hi, SHIFT: gl.constexpr):
    """The stand-in code byte of two bf16 elements: 4 bits of each (bits SHIFT .. SHIFT + 3
    of their words)."""
    return (((lo >> SHIFT) & 0xF) | (((hi >> SHIFT) & 0xF) << 4)).to(gl.uint8)


@gluon.jit
def _io_rowcol_gluon_kernel(X, CODES_R, SCALES_R, CODES_C, SCALES_C, R, C, BM: gl.constexpr, BK: gl.constexpr,
                            NW: gl.constexpr):
    """The row+col io floor with the transpose in explicit layouts (Gluon): rows 2i and 2i + 1
    loaded as 32-bit words (two bf16), the row copy's bytes stored from them, then both moved
    by gl.convert_layout to a layout whose threads hold 4 row pairs of a column, so the column
    copy's code bytes go out 4 a thread and 32 a column per warp; scale bytes from stand-in
    loads. BK a multiple of 128, BM of 64."""
    H: gl.constexpr = BM // 2  # row pairs
    W: gl.constexpr = BK // 2  # 32-bit words (two bf16) per row
    LR: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [NW, 1], [1, 0])  # rows: 16-byte loads along a row
    LC: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, NW], [0, 1])  # columns: 4 row pairs a thread
    LS: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [NW, 1], [1, 0])
    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    i = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LR))[:, None]
    w = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LR))[None, :]
    e = gl.load(XW + (2 * i) * (C // 2) + w)  # rows 2i
    o = gl.load(XW + (2 * i + 1) * (C // 2) + w)  # rows 2i + 1
    # row copy: a word's two elements make a code byte; a scale byte per 8 words (a stand-in load)
    gl.store(CODES_R + (2 * i) * (C // 2) + w, _nibble_byte(e, e >> 16, 12))
    gl.store(CODES_R + (2 * i + 1) * (C // 2) + w, _nibble_byte(o, o >> 16, 12))
    i_s = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LS))[:, None]
    g = pid_c * (W // 8) + gl.arange(0, W // 8, layout=gl.SliceLayout(0, LS))[None, :]
    gl.store(SCALES_R + (2 * i_s) * (C // 16) + g, gl.load(XW + (2 * i_s) * (C // 2) + 8 * g).to(gl.uint8))
    gl.store(SCALES_R + (2 * i_s + 1) * (C // 16) + g, gl.load(XW + (2 * i_s + 1) * (C // 2) + 8 * g).to(gl.uint8))
    # column copy: the same words with row pairs along each thread (a transpose through shared
    # memory that gl.convert_layout makes), then bytes of element columns 2w and 2w + 1
    _io_store_col(gl.convert_layout(e, LC), gl.convert_layout(o, LC), XW, CODES_C, SCALES_C, R, C, BM, BK, NW)


@gluon.jit
def _io_store_col(ec, oc, XW, CODES_C, SCALES_C, R, C, BM: gl.constexpr, BK: gl.constexpr, NW: gl.constexpr):
    """The column copy's stand-in bytes from a tile's words in the column layout (4 row pairs
    of a word column a thread): code bytes of element columns 2w and 2w + 1, 4 a thread and 32
    a column per warp; scale bytes from stand-in loads."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    LC: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, NW], [0, 1])
    LT: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, NW], [0, 1])
    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    ic = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LC))[:, None]
    wc = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LC))[None, :]
    gl.store(CODES_C + (2 * wc) * (R // 2) + ic, _nibble_byte(ec, oc, 12))
    gl.store(CODES_C + (2 * wc + 1) * (R // 2) + ic, _nibble_byte(ec, oc, 28))
    j = pid_r * (BM // 16) + gl.arange(0, BM // 16, layout=gl.SliceLayout(1, LT))[:, None]
    wt = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LT))[None, :]
    s = gl.load(XW + (16 * j) * (C // 2) + wt)
    gl.store(SCALES_C + (2 * wt) * (R // 16) + j, s.to(gl.uint8))
    gl.store(SCALES_C + (2 * wt + 1) * (R // 16) + j, (s >> 16).to(gl.uint8))


@gluon.jit
def _io_rowcol_gluon_decoded_kernel(X, XHAT_R, CODES_C, SCALES_C, XHAT_C, R, C, BM: gl.constexpr, BK: gl.constexpr,
                                    NW: gl.constexpr, COL_DECODED: gl.constexpr):
    """_io_rowcol_gluon_kernel's floor for the decoded calls: the row copy decoded (its x_hat
    words in x's orientation, here the input words themselves), the column copy packed (the X
    call) or, COL_DECODED, decoded too (the dY call: its words moved to the column layout and
    back, as rowcol_gluon's second conversion, then stored in x's orientation)."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    LR: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [NW, 1], [1, 0])
    LC: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, NW], [0, 1])
    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    i = pid_r * H + gl.arange(0, H, layout=gl.SliceLayout(1, LR))[:, None]
    w = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, LR))[None, :]
    e = gl.load(XW + (2 * i) * (C // 2) + w)
    o = gl.load(XW + (2 * i + 1) * (C // 2) + w)
    XR = XHAT_R.to(gl.pointer_type(gl.int32), bitcast=True)
    gl.store(XR + (2 * i) * (C // 2) + w, e)
    gl.store(XR + (2 * i + 1) * (C // 2) + w, o)
    ec = gl.convert_layout(e, LC)
    oc = gl.convert_layout(o, LC)
    if COL_DECODED:
        XCW = XHAT_C.to(gl.pointer_type(gl.int32), bitcast=True)
        gl.store(XCW + (2 * i) * (C // 2) + w, gl.convert_layout(ec, LR))
        gl.store(XCW + (2 * i + 1) * (C // 2) + w, gl.convert_layout(oc, LR))
    else:
        _io_store_col(ec, oc, XW, CODES_C, SCALES_C, R, C, BM, BK, NW)


@gluon.jit
def _program_tile(rows, cols, GROUP: gl.constexpr):
    """This program's (row, column) tile indices: a 2-D grid's (GROUP 0), or in a 1-D grid of rows
    x cols programs, launch groups of GROUP column tiles (fewer in the last), each group's row
    tiles in turn with its column tiles side by side: at GROUP 4 the four programs that share a
    32-byte sector of row scale bytes (512 columns) run together. Measured no faster (session 28:
    the floor within 1%; in rowcol_gluon's kernel, 82b6956, up to 11% slower)."""
    if GROUP == 0:
        return gl.program_id(0), gl.program_id(1)
    pid = gl.program_id(0)
    first = pid // (rows * GROUP) * GROUP  # the group's first column tile
    width = gl.minimum(cols - first, GROUP)
    rest = pid - first * rows
    return rest // width, first + rest % width


@gluon.jit
def _io_one_lane_kernel(X, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, R, C, BM: gl.constexpr, BK: gl.constexpr,
                        NW: gl.constexpr, XHAT_R_ON: gl.constexpr, ITERS: gl.constexpr, STAGES: gl.constexpr,
                        STRIDED: gl.constexpr, SCALES_ON: gl.constexpr = 1, GROUP: gl.constexpr = 0,
                        SCALE_POLICY: gl.constexpr = "", CODE_POLICY: gl.constexpr = ""):
    """The floor of rowcol_gluon's packed and X calls in that kernel's own one-lane layouts and
    stores (blocks of 16: a thread holds a row block's 8 words, then a column block's 8 row
    pairs): code bytes are stand-in nibbles, x_hat the input words, and a scale byte the low
    byte of its block's largest word, reduced in the thread that holds the block as the
    kernel's block amax is (where _io_rowcol_gluon_kernel loads stand-ins: 79% more L2 reads,
    session 23). ITERS row tiles a program in a loop (rowcol_gluon.Config.loop), or every
    num_programs-th (STRIDED: Config.per_sm), their words loaded as each starts or, STAGES >
    0, STAGES - 1 tiles ahead by cp.async (Config.stages). SCALES_ON 0: no scale bytes; 2: the
    same bytes in a contiguous slot a tile (XHAT_R as scratch): what their short writes cost
    (io_floor_tma); 3: the row copy's only, 4: the column copy's only. GROUP: the launch order
    (_program_tile; not with STRIDED). SCALE_POLICY / CODE_POLICY: the L2 eviction policy of the
    scale / code byte stores ("", "evict_last", "evict_first")."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    LR: gl.constexpr = _row_layout(W, 8, NW, True)
    LC: gl.constexpr = _col_layout(H, W, 8, NW, True)
    pid_r, pid_c = _program_tile(R // (BM * ITERS), C // BK, GROUP)
    i = gl.arange(0, H, layout=gl.SliceLayout(1, gl.SliceLayout(2, LR)))[:, None, None]
    g = gl.arange(0, W // 8, layout=gl.SliceLayout(0, gl.SliceLayout(2, LR)))[None, :, None]
    k = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, LR)))[None, None, :]
    w = pid_c * W + g * 8 + k
    i2 = gl.arange(0, H, layout=gl.SliceLayout(1, gl.SliceLayout(2, LR)))[:, None]
    g2 = pid_c * (W // 8) + gl.arange(0, W // 8, layout=gl.SliceLayout(0, gl.SliceLayout(2, LR)))[None, :]
    p = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(2, LC)))[None, :, None]
    ic = gl.arange(0, H // 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, LC)))[:, None, None] * 8 + p
    wc = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, LC)))[None, None, :]
    j = gl.arange(0, H // 8, layout=gl.SliceLayout(1, gl.SliceLayout(1, LC)))[:, None]
    wj = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, LC)))[None, :]
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    first, step, count = _row_tiles(pid_r, R, BM, ITERS, STRIDED)
    buf_e, buf_o = _words_ring(XW, first, step, count, i, w, C, H, W, 8, STAGES)
    for it in range(count):
        r0 = (first + it * step) * H
        e, o = _tile_words(buf_e, buf_o, XW, first, step, count, it, i, w, C, H, LR, STAGES)
        for half in gl.static_range(2):
            v = e if half == 0 else o
            row = 2 * (r0 + i) + half
            if XHAT_R_ON:
                gl.store(XHAT_R.to(gl.pointer_type(gl.int32), bitcast=True) + row * (C // 2) + w, v)
            else:
                gl.store(CODES_R + row * (C // 2) + w, _nibble_byte(v, v >> 16, 12), eviction_policy=CODE_POLICY)
                if SCALES_ON == 1 or SCALES_ON == 3:
                    gl.store(SCALES_R + (2 * (r0 + i2) + half) * (C // 16) + g2, gl.max(v, axis=2).to(gl.uint8),
                             eviction_policy=SCALE_POLICY)
                elif SCALES_ON == 2:  # the same bytes in a contiguous slot a tile (XHAT_R as scratch)
                    slot = XHAT_R.to(gl.pointer_type(gl.uint8), bitcast=True) + (
                        (r0 // H) * (C // BK) + pid_c).to(gl.int64) * (2 * H * (W // 4))
                    gl.store(slot + half * H * (W // 8) + i2 * (W // 8) + (g2 - pid_c * (W // 8)),
                             gl.max(v, axis=2).to(gl.uint8))
        ec = gl.convert_layout(gl.reshape(gl.reshape(e, [H, W]), [H // 8, 8, W]), LC)
        oc = gl.convert_layout(gl.reshape(gl.reshape(o, [H, W]), [H // 8, 8, W]), LC)
        gl.store(CODES_C + (2 * wc) * (R // 2) + r0 + ic, _nibble_byte(ec, oc, 12), eviction_policy=CODE_POLICY)
        gl.store(CODES_C + (2 * wc + 1) * (R // 2) + r0 + ic, _nibble_byte(ec, oc, 28), eviction_policy=CODE_POLICY)
        m = gl.maximum(gl.max(ec, axis=1), gl.max(oc, axis=1))
        if SCALES_ON == 1 or SCALES_ON == 4:
            gl.store(SCALES_C + (2 * wj) * (R // 16) + r0 // 8 + j, m.to(gl.uint8), eviction_policy=SCALE_POLICY)
            gl.store(SCALES_C + (2 * wj + 1) * (R // 16) + r0 // 8 + j, (m >> 16).to(gl.uint8),
                     eviction_policy=SCALE_POLICY)
        elif SCALES_ON == 2:
            slot = XHAT_R.to(gl.pointer_type(gl.uint8), bitcast=True) + (
                (r0 // H) * (C // BK) + pid_c).to(gl.int64) * (2 * H * (W // 4)) + 2 * H * (W // 8)
            col = j * (2 * W) + 2 * (wj - pid_c * W)
            gl.store(slot + col, m.to(gl.uint8))
            gl.store(slot + col + 1, (m >> 16).to(gl.uint8))
    if STAGES > 0:
        async_copy.wait_group(0)


def _io_one_lane_ok(x, cr, sr, xr, cc, sc, xhat_r: bool) -> bool:
    """_io_one_lane_kernel's bytes, from x in torch: the row copy as _io_gluon_copy_ok's
    nibbles with scale bytes the low byte of the block's largest word (x_hat: x itself); the
    column copy's nibbles likewise, its scale bytes the low (element column 2w) or high
    (2w + 1) half's low byte of the largest word of rows 16j .. 16j + 15 in word column w."""
    words = x.view(torch.int32)  # (R, C / 2): two bf16 a word
    rows = torch.equal(xr, x) if xhat_r else (
        _nibbles_ok(x, cr) and torch.equal(sr, (words.view(x.shape[0], -1, 8).amax(2) & 0xFF).to(torch.uint8)))
    m = words.view(-1, 16, words.shape[1]).amax(1).t()  # (C / 2, R / 16)
    col_scales = torch.stack(((m & 0xFF), ((m >> 16) & 0xFF)), 1).reshape(-1, m.shape[1]).to(torch.uint8)
    return bool(rows and _nibbles_ok(x.t(), cc) and torch.equal(sc, col_scales))


def _nibbles_ok(x, codes) -> bool:
    bits = x.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    nib = (bits >> 12) & 0xF
    return bool(torch.equal(codes, (nib[:, 0::2] | nib[:, 1::2] << 4).to(torch.uint8)))


def _io_gluon_bytes_ok(x, cr, sr, cc, sc) -> bool:
    """_io_rowcol_gluon_kernel's stand-in bytes, from x in torch: code nibbles are bits 12-15
    of each element; scale bytes the low byte of the block's first element."""
    return _io_gluon_copy_ok(x, cr, sr) and _io_gluon_copy_ok(x.t(), cc, sc)


def _io_gluon_copy_ok(x, codes, scales) -> bool:
    """One copy's stand-in bytes (x transposed for the column copy)."""
    low = x.contiguous().view(torch.int16).to(torch.int32) & 0xFF
    return _nibbles_ok(x, codes) and bool(torch.equal(scales, low[:, 0::16].to(torch.uint8)))


# _io_one_lane_kernel's tiles: rowcol_gluon's CONFIG and its 4-warp tile
ONE_LANE_TILES = ((64, 128, 8), (64, 128, 4))
IO_TILES = ((64, 64, 8), (64, 64, 4), (128, 64, 8), (64, 128, 8), (128, 128, 8), (32, 128, 4), (256, 64, 8),
            (128, 256, 8), (64, 128, 4), (128, 128, 4))


def floor_outputs(x):
    """The io floors' outputs for x (R, C): row codes and scale bytes, column codes and scale
    bytes (blocks of 16), and the decoded calls' two x_hat in x's orientation."""
    r, c = x.shape
    u8 = dict(dtype=torch.uint8, device=x.device)
    return (torch.empty((r, c // 2), **u8), torch.empty((r, c // 16), **u8), torch.empty((c, r // 2), **u8),
            torch.empty((c, r // 16), **u8), torch.empty_like(x), torch.empty_like(x))


@section("io floors: the quantizers' traffic without arithmetic, per tile")
def io_floors():
    """What fraction of copy bandwidth a quantizer's memory traffic reaches at each tile
    (BM, BK, warps), with no arithmetic: one copy (_io_floor_kernel, as the quantizer
    table's "io floor" row) and both copies, the column one transposed through shared
    memory (_io_floor_rowcol_kernel: the tile; _io_floor_rowcol_packed_kernel: its bytes).
    Whether 80% of copy is reachable at all."""
    if SMOKE:
        return
    for (r, c) in QSIZES:
        x = rand((r, c))
        cr, sr, cc, sc, xr, xc = floor_outputs(x)
        for (bm, bk, w) in IO_TILES:
            grid = (r // bm, c // bk)
            runs = (("row", 1, lambda: _io_floor_kernel[grid](x, cr, sr, r, c, BM=bm, BK=bk, num_warps=w)),
                    ("row+col", 2, lambda: _io_floor_rowcol_kernel[grid](x, cr, sr, cc, sc, r, c, BM=bm, BK=bk,
                                                                         num_warps=w)),
                    ("row+col packed first", 2, lambda: _io_floor_rowcol_packed_kernel[grid](
                        x, cr, sr, cc, sc, r, c, BM=bm, BK=bk, num_warps=w)))
            if bk % 128 == 0 and bm % 64 == 0 and w in (4, 8):
                runs += (("row+col gluon transpose", 2, lambda: _io_rowcol_gluon_kernel[grid](
                    x, cr, sr, cc, sc, r, c, BM=bm, BK=bk, NW=w, num_warps=w)),
                         ("X gluon: decoded row + packed col", (1, 1), lambda: _io_rowcol_gluon_decoded_kernel[grid](
                             x, xr, cc, sc, xc, r, c, BM=bm, BK=bk, NW=w, COL_DECODED=False, num_warps=w)),
                         ("dY gluon: decoded row + col", 2, lambda: _io_rowcol_gluon_decoded_kernel[grid](
                             x, xr, cc, sc, xc, r, c, BM=bm, BK=bk, NW=w, COL_DECODED=True, num_warps=w)))
            for name, copies, fn in runs:
                if left() < 20:
                    return
                xhat = None if name.startswith("X ") else name.startswith("dY ")
                time_quantizer(f"io floor {name} {bm}x{bk} {w} warps", (r, c), copies, xhat, fn, tile=[bm, bk, w])
                if name == "row+col gluon transpose":
                    RES["checks"].append(dict(what=f"io floor gluon {bm}x{bk} {w} warps {r}x{c}: every byte where it "
                                              "belongs", ok=_io_gluon_bytes_ok(x, cr, sr, cc, sc)))
                elif name.startswith(("X gluon", "dY gluon")):
                    for t in (xr, xc, cc, sc):
                        t.zero_()
                    fn()
                    col_ok = torch.equal(xc, x) if name.startswith("dY") else _io_gluon_copy_ok(x.t(), cc, sc)
                    RES["checks"].append(dict(what=f"io floor {name} {bm}x{bk} {w} warps {r}x{c}: every word and "
                                              "byte where it belongs", ok=bool(torch.equal(xr, x) and col_ok)))
        for (bm, bk, w), (iters, stages, per_sm), (name, copies, xhat_r), policy in itertools.product(
                ONE_LANE_TILES, ((1, 0, 0), (8, 0, 0), (8, 2, 0), (1, 0, 4), (1, 2, 3)),
                (("packed", 2, False), ("X: decoded row + packed col", (1, 1), True)), ("", SCALE_L2.value)):
            if left() < 20:
                return
            grid = rg.grid(r, c, rg.Config(bm, bk, w, iters, None, True, True, stages, per_sm),
                           multiprocessors(x.device))

            def fn(grid=grid, bm=bm, bk=bk, w=w, xhat_r=xhat_r, iters=iters, stages=stages, per_sm=per_sm,
                   policy=policy):
                _io_one_lane_kernel[grid](x, cr, sr, xr, cc, sc, r, c, BM=bm, BK=bk, NW=w, XHAT_R_ON=xhat_r,
                                          ITERS=iters, STAGES=stages, STRIDED=per_sm > 0, SCALE_POLICY=policy,
                                          num_warps=w)
            label = (f"io floor one lane {name} {bm}x{bk} {w} warps "
                     + (f"{per_sm} an SM, grid-stride" if per_sm else f"x{iters}{' looped' if iters > 1 else ''}")
                     + (f", {stages} stages" if stages else "") + (", scale bytes kept in L2" if policy else ""))
            time_quantizer(label, (r, c), copies, None if xhat_r else False, fn,
                           tile=[bm, bk, w, iters, stages, per_sm])
            for t in (cr, sr, xr, cc, sc):
                t.zero_()
            fn()
            RES["checks"].append(dict(what=f"{label} {r}x{c}: every word and byte where it belongs",
                                      ok=_io_one_lane_ok(x, cr, sr, xr, cc, sc, xhat_r)))
        save()
