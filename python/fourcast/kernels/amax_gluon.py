"""The two-level formats' amax pass on rowcol_gluon's one-lane tiling (Gluon, Hopper): the
row copy's and the column copy's tensor amaxes of a bf16 or f32 (R, C) x, each after its RHT
of 16 where the call has one, as atomic maxima of |y| bits. quantize.launch_rowcol runs it
ahead of either row+col quantizer (rowcol_gluon's or strip.py's) where `applies`; every other
pass is strip.py's _strip_amax_kernel.

- A row's amax by halfword max.u16x2 on the words (session 18: 0.77-0.89x strip.py's pass);
  each RHT's butterflies in one thread (rowcol_gluon's layouts), where strip.py's cross lanes.
- A bf16 input's column RHT runs in f32 where that is exact (most blocks: every nonzero
  exponent within 12 binades of the block's largest) and bounds the rest; a second launch
  redoes the column amax in f64 only when a bound exceeds the exact blocks' max (session 25:
  the RHT's pass 99.7 -> 67 us at 8192^2 on an H100, the same bits).
- A row RHT of 16 beside a column one (UFP4's calls) ran in f64 there, in one thread as the
  quantizer's (session 29: UFP4's calls measuring their amax 0.75-0.79x on strip.py's pass);
  since session 30 a bf16 input's runs in f32 with its own bound and fallback, as the column
  RHT's (ROW_RHT_F32: those calls 0.90-0.91x again, the same bytes). A row RHT alone takes
  strip.py's pass.
- The f32 butterflies' last stage for a maximum is |a| + |b| per pair, the larger of |a + b|
  and |a - b| bit for bit (session 31, offline: 14.6 -> 12.6 SASS instructions an element for
  TE's column RHT, 24.8 -> 21.1 for UFP4's two).
- Its programs run in the reverse of the quantizer's launch order, so the tiles it reads last,
  still in L2, are the quantizer's first (session 25: never slower, gains under 1%).

Gluon has no interpreter: the CPU tier compiles this kernel for sm_90a offline
(tests/unit/test_rowcol_gluon.py); tests/gpu checks its bits against strip.py's pass and
against itself in f64.
"""

from __future__ import annotations

import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from fourcast.errors import ShapeError
from fourcast.kernels.rowcol_gluon import (INPUTS, Config, _abs_max16, _abs_max_col, _abs_max_elems, _col_layout,
                                           _elems, _halves, _log2, _max_u16x2, _min_u16x2, _prescaled, _rht_block,
                                           _rht_signs, _row_layout, _stage, compile_launch_sm90)


@gluon.jit
def _abs_sum_stage(y, AXIS: gl.constexpr):
    """The last butterfly stage along AXIS (1 or 2, in-thread, entries k and k + S of the axis's
    2S) for a maximum: |a| + |b| in place of the pair (a + b, a - b), whose larger magnitude it
    is. Bit for bit: round-to-nearest is odd and monotone, so RN(|a| + |b|) = max(|RN(a + b)|,
    |RN(a - b)|), -0 as +0, and it is +0 or above, or a NaN (positive: the GPU's default NaN)
    where the pair's was one. Half the additions and maxima of the stage, and no sign masks."""
    D0: gl.constexpr = y.shape[0]
    D1: gl.constexpr = y.shape[1]
    D2: gl.constexpr = y.shape[2]
    if AXIS == 1:
        a, b = gl.split(gl.permute(gl.reshape(y, [D0, 2, D1 // 2, D2]), [0, 2, 3, 1]))
    else:
        a, b = gl.split(gl.permute(gl.reshape(y, [D0, D1, 2, D2 // 2]), [0, 1, 3, 2]))
    return gl.abs(a) + gl.abs(b)


@gluon.jit
def _butterflies_abs(a, b, AXIS: gl.constexpr):
    """_butterflies' |S| for a block's maximum: their stages, the last as _abs_sum_stage's (half
    as many values, the same maximum, bit for bit)."""
    gl.static_assert(a.shape[AXIS] >= 2, "a block of at least 4")
    a, b = a + b, a - b
    for s in gl.static_range(_log2(a.shape[AXIS]) - 1):
        a = _stage(a, 1 << s, AXIS)
        b = _stage(b, 1 << s, AXIS)
    return _abs_sum_stage(a, AXIS), _abs_sum_stage(b, AXIS)


@gluon.jit
def _rht16_sums_f32(we, wo, sign_e, sign_o, SHIFT: gl.constexpr):
    """The column RHT of 16's sums S (y = S / 4) of the bf16 at bit SHIFT (0 or 16) of words
    [column block, row pair, word column] (we rows 2p, wo 2p + 1), by _rht_block's butterflies
    in f32: exact where _rht16_amax_f32 says so. Their max |S| bits per column block."""
    a, b = _butterflies_abs(((we >> SHIFT) << 16).to(gl.float32, bitcast=True) * sign_e,
                            ((wo >> SHIFT) << 16).to(gl.float32, bitcast=True) * sign_o, 1)
    m = gl.max(gl.maximum(a.to(gl.int32, bitcast=True), b.to(gl.int32, bitcast=True)), axis=1)
    return gl.convert_layout(m, gl.SliceLayout(1, we.type.layout))  # the same registers, renamed


@gluon.jit
def _rht16_amax_f32(we, wo, sign_e, sign_o, m_exact, m_bound):
    """A tile's column RHT of 16 in f32 (bf16 words as _rht16_sums_f32's), into the running
    per-column-block maxima of max |S| bits over the blocks where f32 is exact (m_exact) and of
    an upper bound on max |S| over the others (m_bound; 0x7FFFFFFF where one holds a non-finite
    x). Exact: every nonzero x's exponent field within 12 of the largest and above 24, the
    largest at most 249, so each partial sum of up to 16 x (multiples of the smallest's ulp,
    below 16x the largest) fits f32's 24 bits without overflow or subnormals; f64's sums, the
    reference's, are then exact too, and S / 4 its y's bits. Elsewhere f32's S is within
    2^-18 max |x| of the exact one (four rounded additions of partial sums below 16 max |x|):
    the bound adds 2^-14 max |x|. Spreads by halfword max / min over the block's words (a zero
    half mapped above every nonzero one: h + 0x7FFF, top bit flipped, is 0xFFFF for h = 0 and
    h - 1 otherwise, no carry across halves)."""
    me = we & 0x7FFF7FFF
    mo = wo & 0x7FFF7FFF
    top = gl.reduce(_max_u16x2(me, mo), 1, _max_u16x2)
    low = gl.reduce(_min_u16x2((me + 0x7FFF7FFF) ^ -2147450880, (mo + 0x7FFF7FFF) ^ -2147450880), 1, _min_u16x2)
    for h in gl.static_range(2):
        m_exact, m_bound = _exact_or_bound(_rht16_sums_f32(we, wo, sign_e, sign_o, 16 * h), (top >> (16 * h)) & 0x7FFF,
                                           (low >> (16 * h)) & 0xFFFF, m_exact, m_bound)
    return m_exact, m_bound


@gluon.jit
def _exact_or_bound(sums, xmax, low, m_exact, m_bound):
    """Blocks' max |S| bits (sums, f32's) into the running maxima: m_exact where the block's
    exponent fields prove f32 exact (_rht16_amax_f32's test), else the bound (sums + 2^-14 max
    |x|; 0x7FFFFFFF for a non-finite x) into m_bound. xmax: the block's max |x| as bf16 bits;
    low: its smallest nonzero magnitude's minus 1 (0xFFFF for none: an all-zero block, exact)."""
    emax = xmax >> 7
    emin = (low + 1) >> 7  # 512 for an all-zero block
    exact = (emax - emin <= 12) & (emax <= 249) & (emin >= 25)
    bound = (sums.to(gl.float32, bitcast=True) + (xmax << 16).to(gl.float32, bitcast=True) * (2.0 ** -14)).to(
        gl.int32, bitcast=True)
    bound = gl.where(emax == 255, 0x7FFFFFFF, bound)
    return gl.maximum(m_exact, gl.where(exact, sums, 0)), gl.maximum(m_bound, gl.where(exact, 0, bound))


@gluon.jit
def _rht16_row_amax_f32(words, sign_lo, sign_hi, m_exact, m_bound):
    """_rht16_amax_f32 for the row RHT of 16: words [row, row block, word] (a block's 16 bf16
    in one thread's 8 words, sign_lo / sign_hi the f32 signs of their low / high halves), into
    the running per-row-block maxima of max |S| bits over the exact blocks and of the bound on
    the others. The same butterflies in the same order (_rht_block's, AXIS 2), the same
    exactness test and bound: a block's spread is the halfword max / min over its words, then
    over the two halves."""
    m = words & 0x7FFF7FFF
    top = gl.reduce(m, 2, _max_u16x2)
    low = gl.reduce((m + 0x7FFF7FFF) ^ -2147450880, 2, _min_u16x2)
    lo, hi = _halves(words)
    a, b = _butterflies_abs(lo * sign_lo, hi * sign_hi, 2)
    sums = gl.max(gl.maximum(a.to(gl.int32, bitcast=True), b.to(gl.int32, bitcast=True)), axis=2)
    sums = gl.convert_layout(sums, gl.SliceLayout(2, words.type.layout))  # the same registers, renamed
    return _exact_or_bound(sums, gl.maximum(top & 0xFFFF, (top >> 16) & 0xFFFF),
                           gl.minimum(low & 0xFFFF, (low >> 16) & 0xFFFF), m_exact, m_bound)


@gluon.jit
def _amax_kernel(X, AMAX_BITS, SIGNS_R, SIGNS_C, R, C, RN_C: gl.constexpr, NORM_C: gl.constexpr, BM: gl.constexpr,
                 BK: gl.constexpr, NW: gl.constexpr, ITERS: gl.constexpr, F32: gl.constexpr = False,
                 REVERSED: gl.constexpr = True, RHT_MODE: gl.constexpr = 0, RN_R: gl.constexpr = 0,
                 NORM_R: gl.constexpr = 1.0, ROW_F32: gl.constexpr = False):
    """strip._strip_amax_kernel's two tensor amaxes (atomic max of |y| bits: the row copy's at
    AMAX_BITS[0], after a row RHT of 16 if RN_R (UFP4's calls, which rotate both copies: a row
    RHT needs a column one here), the column copy's at [1], after an RHT of 16 if RN_C) on
    _rowcol_kernel's one-lane tiling: a row's amax by halfword max.u16x2 on the words, each RHT's
    butterflies in one thread, where the strip kernel's cross lanes. A program takes ITERS row
    tiles, the next one's words in flight, and makes two atomics (three or four with RHT_MODE
    1's bounds). F32: x is f32 (two elements a 64-bit word; the row amax by integer max on the
    bits). REVERSED: the tiles in the
    reverse of the quantize pass's launch order (False: the same order; the benchmarks time
    both), so the tiles read last, still in L2, are the ones it reads first.
    The RHTs' arithmetic (RHT_MODE): 0, f64 for every block (_rht_block: the reference's); 1
    (bf16 x), the column RHT in f32 (_rht16_amax_f32) and, if ROW_F32, the row RHT too
    (_rht16_row_amax_f32; else in f64): the blocks where f32 is exact go to the copy's amax word,
    an upper bound on the others' max |y| to AMAX_BITS[2] (the column copy's) or [3] (the row
    copy's); 2, run after 1 with the same ROW_F32: for each copy whose bound exceeds its amax
    (a block f32 could not settle may hold the max), that amax again by mode 0's f64. 1 then 2
    give mode 0's bits: the max is an exact block's unless the bound says otherwise, and then
    mode 0's."""
    gl.static_assert(RN_R == 0 or RN_C > 0, "a row RHT alone: strip.py's pass (applies)")
    gl.static_assert(RHT_MODE == 0 or RN_C > 0, "RHT_MODE 1 and 2: a column RHT's f32 pass and its fallback")
    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    if REVERSED:
        pid_r = gl.num_programs(0) - 1 - pid_r
        pid_c = gl.num_programs(1) - 1 - pid_c
    if RHT_MODE == 2:
        if gl.load(AMAX_BITS + 2) > gl.load(AMAX_BITS + 1):
            _, m_c, _, _ = _amax_tiles(X, SIGNS_R, SIGNS_C, C, pid_r, pid_c, RN_C, NORM_C, BM, BK, NW, ITERS, F32, 0,
                                       False, 0, 1.0, False)
            gl.atomic_max(AMAX_BITS + 1, m_c)
        if ROW_F32 and RN_R > 0:
            if gl.load(AMAX_BITS + 3) > gl.load(AMAX_BITS):
                row, _, _, _ = _amax_tiles(X, SIGNS_R, SIGNS_C, C, pid_r, pid_c, 0, 1.0, BM, BK, NW, ITERS, F32, 0,
                                           True, RN_R, NORM_R, False)
                gl.atomic_max(AMAX_BITS, row)
    else:
        row, m_c, bound_c, bound_r = _amax_tiles(X, SIGNS_R, SIGNS_C, C, pid_r, pid_c, RN_C, NORM_C, BM, BK, NW,
                                                 ITERS, F32, RHT_MODE, True, RN_R, NORM_R, ROW_F32)
        gl.atomic_max(AMAX_BITS, row)
        gl.atomic_max(AMAX_BITS + 1, m_c if RN_C > 0 else row)
        if RHT_MODE == 1:
            gl.atomic_max(AMAX_BITS + 2, bound_c)
            if ROW_F32 and RN_R > 0:
                gl.atomic_max(AMAX_BITS + 3, bound_r)


@gluon.jit
def _amax_tiles(X, SIGNS_R, SIGNS_C, C, pid_r, pid_c, RN_C: gl.constexpr, NORM_C: gl.constexpr, BM: gl.constexpr,
                BK: gl.constexpr, NW: gl.constexpr, ITERS: gl.constexpr, F32: gl.constexpr, RHT_MODE: gl.constexpr,
                ROWS: gl.constexpr, RN_R: gl.constexpr, NORM_R: gl.constexpr, ROW_F32: gl.constexpr):
    """_amax_kernel's program: (the row amax's bits if ROWS, the column copy's max |y| bits,
    RHT_MODE 1's bounds on the column copy's and (ROW_F32) the row copy's) over its ITERS row
    tiles: running maxima per thread, reduced across the program once (a tile at a time where
    F64 below says so). With a row RHT the row maximum is of f32 bits (ROW_BITS), as with an f32
    input."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    WB: gl.constexpr = 8
    ROW_RHT_F32: gl.constexpr = ROWS and RN_R > 0 and RHT_MODE == 1 and ROW_F32
    # every maximum reduced a tile with f64 butterflies (they need the registers) or an f32 input
    # (running maxima of its 64-bit words took 70-173 registers, and twice the time, session 25)
    F64: gl.constexpr = (RN_C > 0 and RHT_MODE != 1) or F32 or (RN_R > 0 and not ROW_RHT_F32)
    ROW_BITS: gl.constexpr = F32 or RN_R > 0  # m_r holds f32 bits, not halfword pairs
    LR: gl.constexpr = _row_layout(W, WB, NW, True)
    LC: gl.constexpr = _col_layout(H, W, WB, NW, True)
    i = gl.arange(0, H, layout=gl.SliceLayout(1, gl.SliceLayout(2, LR)))[:, None, None]
    g = gl.arange(0, W // WB, layout=gl.SliceLayout(0, gl.SliceLayout(2, LR)))[None, :, None]
    k = gl.arange(0, WB, layout=gl.SliceLayout(0, gl.SliceLayout(1, LR)))[None, None, :]
    w = pid_c * W + g * WB + k
    p = gl.arange(0, WB, layout=gl.SliceLayout(0, gl.SliceLayout(2, LC)))[None, :, None]
    XW = X.to(gl.pointer_type(gl.int64 if F32 else gl.int32), bitcast=True)
    t0 = pid_r * ITERS
    e_next = gl.load(XW + (2 * (t0 * H + i)) * (C // 2) + w)
    o_next = gl.load(XW + (2 * (t0 * H + i) + 1) * (C // 2) + w)
    m_r = 0  # bf16: halfword maxima (max.u16x2), both halves row amaxes; f32: the bits
    m_c = 0
    m_bound = 0
    m_bound_r = 0
    if RN_C > 0:
        sign_e = gl.load(SIGNS_C + 2 * p).to(gl.float32 if RHT_MODE == 1 else gl.float64)
        sign_o = gl.load(SIGNS_C + 2 * p + 1).to(gl.float32 if RHT_MODE == 1 else gl.float64)
    PRE_R: gl.constexpr = _prescaled(F32, NORM_R)
    if ROW_RHT_F32:  # the signs alone: the f32 sums S, y = S / 4 (_rht16_row_amax_f32)
        sign_lo = gl.load(SIGNS_R + 2 * k)
        sign_hi = gl.load(SIGNS_R + 2 * k + 1)
    elif RN_R > 0 and ROWS:  # the row RHT's signs (_rowcol_kernel's)
        sign_lo = _rht_signs(SIGNS_R + 2 * k, NORM_R, PRE_R)
        sign_hi = _rht_signs(SIGNS_R + 2 * k + 1, NORM_R, PRE_R)
    for it in gl.static_range(ITERS):
        e = e_next
        o = o_next
        if it + 1 < ITERS:
            r1 = (t0 + it + 1) * H
            e_next = gl.load(XW + (2 * (r1 + i)) * (C // 2) + w)
            o_next = gl.load(XW + (2 * (r1 + i) + 1) * (C // 2) + w)
        if ROW_RHT_F32:
            m_r, m_bound_r = _rht16_row_amax_f32(e, sign_lo, sign_hi, m_r, m_bound_r)
            m_r, m_bound_r = _rht16_row_amax_f32(o, sign_lo, sign_hi, m_r, m_bound_r)
        elif ROWS and RN_R > 0:  # each row block rotated, its |y| bits' maximum
            for half in gl.static_range(2):
                lo, hi = _elems(e if half == 0 else o, F32)
                lo, hi = _rht_block(lo, hi, sign_lo, sign_hi, NORM_R, 2, LR, PRE_R)
                m = gl.maximum(lo.to(gl.int32, bitcast=True) & 0x7FFFFFFF, hi.to(gl.int32, bitcast=True) & 0x7FFFFFFF)
                m_r = gl.maximum(m_r, gl.max(gl.max(gl.max(m, axis=2), axis=1), axis=0))
        elif ROWS and F32:
            e_lo, e_hi = _abs_max_elems(e, 2, True)
            o_lo, o_hi = _abs_max_elems(o, 2, True)
            m = gl.maximum(gl.maximum(e_lo, e_hi), gl.maximum(o_lo, o_hi))
            m_r = gl.maximum(m_r, gl.max(gl.max(m, axis=1), axis=0) if F64 else m)
        elif ROWS:
            m = _max_u16x2(_abs_max16(e, 2), _abs_max16(o, 2))
            m_r = _max_u16x2(m_r, gl.reduce(gl.reduce(m, 1, _max_u16x2), 0, _max_u16x2) if F64 else m)
        if RN_C > 0:
            ec = gl.convert_layout(gl.reshape(gl.reshape(e, [H, W]), [H // WB, WB, W]), LC)
            oc = gl.convert_layout(gl.reshape(gl.reshape(o, [H, W]), [H // WB, WB, W]), LC)
            if RHT_MODE == 1:
                m_c, m_bound = _rht16_amax_f32(ec, oc, sign_e, sign_o, m_c, m_bound)
            else:
                e_lo, e_hi = _elems(ec, F32)
                o_lo, o_hi = _elems(oc, F32)
                e_lo, o_lo = _rht_block(e_lo, o_lo, sign_e, sign_o, NORM_C, 1, LC)
                e_hi, o_hi = _rht_block(e_hi, o_hi, sign_e, sign_o, NORM_C, 1, LC)
                mc = gl.maximum(_abs_max_col(e_lo, o_lo), _abs_max_col(e_hi, o_hi))
                m_c = gl.maximum(m_c, gl.max(gl.max(mc, axis=1), axis=0))
    bound_r = 0
    if ROW_RHT_F32:  # max |S| -> max |y| = |S| / 4, as the column copy's below
        m_r = _quarter(gl.max(gl.max(m_r, axis=1), axis=0))
        bound_r = _quarter(gl.max(gl.max(m_bound_r, axis=1), axis=0))
    elif ROWS and not F64:
        m_r = gl.max(gl.max(m_r, axis=1), axis=0) if F32 else gl.reduce(gl.reduce(m_r, 1, _max_u16x2), 0, _max_u16x2)
    row = m_r if ROW_BITS else gl.maximum(m_r << 16, m_r & -65536)
    col = m_c
    bound = 0
    if RHT_MODE == 1:  # max |S| -> max |y| = |S| / 4, exact (S is 0 or above 2^-110: no subnormal)
        col = _quarter(gl.max(gl.max(m_c, axis=1), axis=0))
        bound = _quarter(gl.max(gl.max(m_bound, axis=1), axis=0))
    return row, col, bound, bound_r


@gluon.jit
def _quarter(bits):
    """The f32 bits of |S| / 4 from |S|'s (an RHT of 16's y from its butterflies' sum)."""
    return (bits.to(gl.float32, bitcast=True) * 0.25).to(gl.int32, bitcast=True)


# _amax_kernel's tiles: the quantizer's 64 x 128, several row tiles a program (a read-only
# pass: its two atomics a program would otherwise count). Fastest of four in session 18 (call
# 8, five shapes from 8192^2 to 32768 x 4608, against strip.py's pass): without an RHT 8 warps,
# four tiles (0.77-0.89x), with the column RHT 4 warps, eight tiles (0.56-0.73x; its f64
# butterflies take 170 registers, so fewer warps a program let more programs share an SM).
# Session 25 (H100, the four tiles at five shapes): the column RHT in f32 (RHT_MODE 1, 80
# registers) fastest at the tile without an RHT (0.44-0.60x strip.py's pass, 0.57-0.76x at
# 4 warps).
CONFIG = Config(64, 128, 8, 4)
RHT_CONFIG = Config(64, 128, 4, 8)
# With a row RHT of 16 (UFP4's calls) two tiles on 8 warps: the row's f64 butterflies beside the
# column RHT's f32 ones take 105-108 registers, no spills (Triton 3.6 and 3.9), where
# RHT_CONFIG's 4 warps spill 16-56 bytes and CONFIG's 4 tiles take 176. Session 29 (H100):
# the calls measuring their amax 0.75-0.79x strip.py's pass; no other tile timed.
ROW_RHT_CONFIG = Config(64, 128, 8, 2)
# Both RHTs in f32 (ROW_RHT_F32), by the offline counts (session 30, Triton 3.6, sm_90a): 8 warps
# x 4 tiles 121 registers, 24.8 SASS instructions an element, no f64 (x 2: 99, 27.1); the f64 row
# RHT at ROW_RHT_CONFIG 105 registers, 26.9 an element of which 4 DADD and 2 F2F (f64 adds at
# half f32's rate on an H100, f32 <-> f64 conversions slower still); 8 x 8 spills 56 bytes. Timed
# against the f64 row RHT at ROW_RHT_CONFIG (ROW_RHT_F32), not against other tiles. Session 31: with
# the last stage as |a| + |b| (_abs_sum_stage) 8 x 4 took 146 registers (one program an SM), so
# it runs under 128: 115 registers (104 under Triton 3.9), no spills, 21.1 an element.
ROW_F32_CONFIG = Config(64, 128, 8, 4, 128)


def tile_for(rn_c: int, rht_mode: int = 0, rn_r: int = 0, row_f32: bool = False) -> Config:
    """_amax_kernel's tile for a column RHT of rn_c (0: none) at RHT_MODE rht_mode and a row RHT
    of rn_r (row_f32: in f32 at RHT_MODE 1, its f64 fallback at 2): ROW_F32_CONFIG where
    both RHTs run in f32, ROW_RHT_CONFIG where the row RHT runs in f64 (mode 1 without
    row_f32, or its fallback), RHT_CONFIG where a column RHT runs in f64, else CONFIG."""
    if rn_r and rht_mode == 1 and row_f32:
        return ROW_F32_CONFIG
    if rn_r and (rht_mode != 2 or row_f32):
        return ROW_RHT_CONFIG
    return RHT_CONFIG if rn_c and rht_mode != 1 else CONFIG


def applies(x: torch.Tensor, rht: tuple, config: tuple | None = None, row_f32: bool | None = None) -> bool:
    """Whether _amax_kernel serves this row+col call's amax pass: bf16 or f32, R a multiple
    of BM x ITERS (each launch's: `config`, else tile_for's) and C of BK, a column RHT of 16
    or none, a row RHT of 16 beside a column one (UFP4's calls) or none. row_f32: as
    row_f32_on's `on`."""
    if x.dtype not in INPUTS or rht[0] not in (0, 16) or rht[1] not in (0, 16) or rht[0] and not rht[1]:
        return False
    f32 = x.dtype == torch.float32
    rf = row_f32_on(rht[0], f32, row_f32)
    configs = [config] if config else [tile_for(rht[1], m, rht[0], rf) for m in modes(rht[1], f32)]
    R, C = x.shape
    return all(R % (c.bm * c.iters) == 0 and C % c.bk == 0 for c in (Config(*c) for c in configs))


def modes(rn_c: int, f32: bool, rht_f32: bool = True) -> tuple[int, ...]:
    """The _amax_kernel launches (their RHT_MODEs) of a pass: a bf16 input's column RHT in f32
    and then the f64 fallback, which exits at once unless needed (rht_f32 False: f64 for
    every block, the benchmarks' comparison); otherwise one launch."""
    return (1, 2) if rn_c == 16 and not f32 and rht_f32 else (0,)


# Whether a bf16 input's row RHT of 16 (beside a column one: UFP4's calls) runs in f32 in the
# amax pass's RHT_MODE 1 by default, as the column RHT does, its f64 fallback in mode 2.
# Session 30 (H100, CUDA-graph replays, two samples in turns, the same bytes): UFP4's calls
# measuring their amax 0.90-0.91x their time with the row RHT in f64 (the X call 282.6 -> 253.4
# us at 8192^2, W 306.3 -> 277.9, dY 331.7 -> 302.5; 16384 x 4096 alike).
ROW_RHT_F32 = True


def row_f32_on(rn_r: int, f32: bool, on: bool | None = None) -> bool:
    """_amax_kernel's ROW_F32 for a pass with a row RHT of rn_r: a bf16 input's row RHT of 16
    in f32 where exact (`on`, None: ROW_RHT_F32; the benchmarks' CONFIG_OVERRIDE
    "amax_row_rht_f32")."""
    return rn_r == 16 and not f32 and (ROW_RHT_F32 if on is None else on)


def launch(R: int, C: int, rn_c: int, config: tuple | None = None, f32: bool = False, reversed_: bool = True,
           rht_mode: int = 0, rn_r: int = 0, row_f32: bool = False) -> tuple[tuple, dict]:
    """(grid, constexprs) of _amax_kernel for an (R, C) input (f32: an f32 one) with a
    column RHT of rn_c and a row RHT of rn_r (reversed_, rht_mode, row_f32: its REVERSED,
    RHT_MODE, ROW_F32); its arguments (X, AMAX_BITS, SIGNS_R, SIGNS_C, R, C): four words, zeroed."""
    config = Config(*(config or tile_for(rn_c, rht_mode, rn_r, row_f32)))
    if R % (config.bm * config.iters) or C % config.bk:  # a partial grid would skip rows or columns
        raise ShapeError(f"amax pass: ({R}, {C}) is not whole {config.bm * config.iters} x {config.bk} programs "
                         f"(applies says where it serves)")
    consts = dict(RN_C=rn_c, NORM_C=1.0 / math.sqrt(rn_c) if rn_c else 1.0, BM=config.bm, BK=config.bk,
                  NW=config.warps, ITERS=config.iters, F32=f32, REVERSED=reversed_, RHT_MODE=rht_mode,
                  RN_R=rn_r, NORM_R=1.0 / math.sqrt(rn_r) if rn_r else 1.0, ROW_F32=row_f32,
                  num_warps=config.warps, **({"maxnreg": config.maxnreg} if config.maxnreg else {}))
    return (R // (config.bm * config.iters), C // config.bk), consts


def compile_sm90(rn_c: int, config: tuple | None = None, f32: bool = False, rht_mode: int = 0, rn_r: int = 0,
                 row_f32: bool = False):
    """_amax_kernel compiled for sm_90a without a GPU (rowcol_gluon.compile_launch_sm90): what
    the CPU tier checks."""
    _, consts = launch(0, 0, rn_c, config, f32, rht_mode=rht_mode, rn_r=rn_r, row_f32=row_f32)
    return compile_launch_sm90(_amax_kernel, consts, f32)
