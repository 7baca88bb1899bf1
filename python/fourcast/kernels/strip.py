"""Row + column quantizer in column strips (Triton): both copies of a row-major (R, C) x
from one read, with no transpose of the data.

A program owns [BR, BC] tiles whose BR rows are whole column blocks (B, or the column
RHT's size), one warp wide (strip_config); ITERS of them down one column strip, the
next one's load issued before the current one is quantized (strip_iters). Triton's load
layout gives each thread 8 consecutive columns of several rows, with few lanes per column
(four for [16, 64]), so a column block's amax is an in-thread max plus a shuffle, and a
row block (16 or 32 columns) spans 2 or 4 lanes: no shared memory but the byte-sized
column codes' store.
Rows 2i and 2i + 1 of a column share a byte of the transposed copy (a sum of shifted
codes over an in-thread axis). Decoded (x_hat) copies of both are written in x's
orientation, like the load; only the column copy's codes and scale bytes are stored
transposed (the Wgrad layout), and a program of several row tiles gathers them into words
and stores them once (GATHER: 32 code bytes a column, a whole sector, where a tile had 8). Against the transposing kernel (and the split kernel of
session 3): no transpose of the data and 36-59 SASS instructions per element for both
copies without SR, not 64-114.

The arithmetic is quantize.py's (_block_scales, _quant_elems, _round_elem), so codes,
scale bytes, tensor scales and x_hat equal reference.quantize / dequantize bit for bit,
SR included (philox.py: element (c, r) of the column layout uses offset_c; "sr4" ("sr16")
draws four (sixteen) columns, or rows of the column copy, per Philox). RHTs: f64 butterflies in the
Rust core's order and one rounding (reference.rht_lastdim), written as pair sums (no
split/join); the stages that cross lanes cost f64 shuffles. Two-level formats measure
their tensor amaxes first, in _strip_amax_kernel (the same RHTs, few atomics).
"""

from __future__ import annotations

import triton
import triton.language as tl

from fourcast.kernels.philox import load_seed, sr_uniform, sr_uniform_group, sr_uniform_group_t
from fourcast.kernels.quantize import (
    SCALE_L2,
    _block_max,
    _block_scales,
    _cast_out,
    _expand,
    _quant_elems,
    _store_codes,
    _store_scales,
    _tensor_scales,
)


@triton.jit
def _pair_stage(y4, AXIS: tl.constexpr):
    """One butterfly stage on a view whose AXIS (size 2) holds the pair (a, b):
    (a + b, a - b) in place, each one f64 addition (a sum of two is a + b in any order)."""
    sgn = tl.where(tl.arange(0, 2) == 0, 1.0, -1.0).to(tl.float64)
    if AXIS == 1:
        w = tl.reshape(sgn, (1, 2, 1, 1))
    else:
        w = tl.reshape(sgn, (1, 1, 2, 1))
    plus = tl.expand_dims(tl.sum(y4, axis=AXIS), AXIS)
    minus = tl.expand_dims(tl.sum(y4 * w, axis=AXIS), AXIS)
    return tl.where(w > 0, plus, minus)


@triton.jit
def _rht_rows(x, r, SIGNS, NORM: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr, BR: tl.constexpr,
              BC: tl.constexpr):
    """RHT along dim 0 (blocks of N rows; r: the tile's row indices [BR, 1])."""
    y = x.to(tl.float64) * tl.load(SIGNS + (r % N)).to(tl.float64)
    for s in tl.static_range(LOG2N):
        y = tl.reshape(_pair_stage(tl.reshape(y, (BR // (2 << s), 2, 1 << s, BC)), 1), (BR, BC))
    return (y * tl.full((1, 1), NORM, tl.float64)).to(tl.float32)


@triton.jit
def _rht_cols(x, c, SIGNS, NORM: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr, BR: tl.constexpr,
              BC: tl.constexpr):
    """RHT along dim 1 (blocks of N columns; c: the tile's column indices [1, BC])."""
    y = x.to(tl.float64) * tl.load(SIGNS + (c % N)).to(tl.float64)
    for s in tl.static_range(LOG2N):
        y = tl.reshape(_pair_stage(tl.reshape(y, (BR, BC // (2 << s), 2, 1 << s)), 2), (BR, BC))
    return (y * tl.full((1, 1), NORM, tl.float64)).to(tl.float32)


@triton.jit
def _col_max(bits, BR: tl.constexpr, BC: tl.constexpr, B: tl.constexpr):
    """Per column block (B rows): [BR / B, BC]."""
    return tl.max(tl.reshape(bits, (BR // B, B, BC)), axis=1)


@triton.jit
def _col_expand(v, BR: tl.constexpr, BC: tl.constexpr, B: tl.constexpr):
    return tl.reshape(tl.broadcast_to(tl.reshape(v, (BR // B, 1, BC)), (BR // B, B, BC)), (BR, BC))


@triton.jit
def _copies(x, r, c, SIGNS_R, SIGNS_C, RN_R: tl.constexpr, LOG2N_R: tl.constexpr, NORM_R: tl.constexpr,
            RN_C: tl.constexpr, LOG2N_C: tl.constexpr, NORM_C: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """(row copy, column copy) of an x tile before quantizing: each rotated by its RHT, if any."""
    if RN_R > 0:
        yr = _rht_cols(x, c, SIGNS_R, NORM_R, RN_R, LOG2N_R, BR, BC)
    else:
        yr = x
    if RN_C > 0:
        yc = _rht_rows(x, r, SIGNS_C, NORM_C, RN_C, LOG2N_C, BR, BC)
    else:
        yc = x
    return yr, yc


@triton.jit
def _strip_amax_kernel(X, AMAX_BITS, SIGNS_R, SIGNS_C, R, C, RN_R: tl.constexpr, LOG2N_R: tl.constexpr,
                       NORM_R: tl.constexpr, RN_C: tl.constexpr, LOG2N_C: tl.constexpr, NORM_C: tl.constexpr,
                       BR: tl.constexpr, BC: tl.constexpr, ITERS: tl.constexpr, REVERSED: tl.constexpr = True):
    """The amax pass of two-level formats: the two tensor amaxes (atomic max of |y| bits,
    row copy at AMAX_BITS[0], column copy, after its RHT, at [1]). A program takes ITERS
    row tiles and makes two atomics: every atomic hits the same two words, so with one
    per [16, 32] tile they, not the read, set the time (0.6 ms of a 32768 x 4608 dY call,
    training-h200.md run 9). REVERSED: the programs in the reverse of the quantize pass's
    launch order, as rowcol_gluon._amax_kernel's (why there)."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    if REVERSED:
        pid_r = tl.num_programs(0) - 1 - pid_r
        pid_c = tl.num_programs(1) - 1 - pid_c
    c = pid_c * BC + tl.arange(0, BC)[None, :]
    m_r = tl.zeros((BR, BC), tl.int32)
    m_c = tl.zeros((BR, BC), tl.int32)
    for it in range(ITERS):
        r = (pid_r * ITERS + it) * BR + tl.arange(0, BR)[:, None]
        x = tl.load(X + r * C + c, mask=(r < R) & (c < C), other=0.0).to(tl.float32)
        yr, yc = _copies(x, r, c, SIGNS_R, SIGNS_C, RN_R, LOG2N_R, NORM_R, RN_C, LOG2N_C, NORM_C, BR, BC)
        m_r = tl.maximum(m_r, tl.abs(yr).to(tl.int32, bitcast=True))
        m_c = tl.maximum(m_c, tl.abs(yc).to(tl.int32, bitcast=True))
    tl.atomic_max(AMAX_BITS, tl.max(tl.max(m_r, axis=1), axis=0))
    tl.atomic_max(AMAX_BITS + 1, tl.max(tl.max(m_c, axis=1), axis=0))


@triton.jit
def _strip_kernel(X, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, AMAX_BITS, AMAX_IN_R, AMAX_IN_C, TS_OUT,
                  SIGNS_R, SIGNS_C, R, C, seed, offset_r, offset_c,
                  EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
                  BITS: tl.constexpr, GMAX: tl.constexpr, EMAX: tl.constexpr,
                  SCALE: tl.constexpr, RULE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                  S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, S_GMAX: tl.constexpr, S_MIN: tl.constexpr,
                  NUM: tl.constexpr, NANB: tl.constexpr, MODE_R: tl.constexpr, MODE_C: tl.constexpr,
                  FUSE_AMAX: tl.constexpr, CODES_R_ON: tl.constexpr,
                  XHAT_R_ON: tl.constexpr, CODES_C_ON: tl.constexpr, XHAT_C_ON: tl.constexpr,
                  UNSCALED: tl.constexpr, RN_R: tl.constexpr, LOG2N_R: tl.constexpr, NORM_R: tl.constexpr,
                  RN_C: tl.constexpr, LOG2N_C: tl.constexpr, NORM_C: tl.constexpr,
                  RNE_BF16: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, SEED_PTR: tl.constexpr = False,
                  ITERS: tl.constexpr = 1, GATHER_C: tl.constexpr = True):
    """See the module doc: quantize and store what *_ON ask (the tensor amaxes from
    AMAX_IN_R / AMAX_IN_C: _strip_amax_kernel's, or given; FUSE_AMAX: single-level formats record them
    here). A program takes ITERS row tiles of one column strip, loading tile i + 1 before it
    quantizes tile i, so that a warp has a load in flight while it computes (strip_iters).
    Program ids: rows fastest, so neighbouring programs fill the same transposed rows."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    c = pid_c * BC + tl.arange(0, BC)[None, :]
    seed = load_seed(seed, SEED_PTR)
    s_r, p_r = _tensor_scales(tl.load(AMAX_IN_R).to(tl.float32), False, RULE, NUM)
    s_c, p_c = _tensor_scales(tl.load(AMAX_IN_C).to(tl.float32), False, RULE, NUM)
    m_r = tl.zeros((BR, BC), tl.int32)
    m_c = tl.zeros((BR, BC), tl.int32)
    # GATHER: the column copy's code and scale bytes of the ITERS tiles go out in one store
    # after the loop (_store_gathered), byte `it` of a word per (code pair, column) and per
    # (scale, column) gathering them; a tile's own stores wrote a quarter of each code sector
    # and 1 byte of each scale sector (kernels-h200.md, session 11). GATHER_C=False (the
    # benchmarks' "strip_gather" override) keeps the per-tile stores, for comparison.
    GATHER: tl.constexpr = (GATHER_C and CODES_C_ON and BITS == 4 and ITERS > 1 and ITERS <= 4
                            and BR == (16 if TILE2D else B))
    g_codes = tl.zeros((BR // 2, BC), tl.int32)
    g_scales = tl.zeros((1, BC // 16 if TILE2D else BC), tl.int32)
    r = pid_r * ITERS * BR + tl.arange(0, BR)[:, None]
    x_next = tl.load(X + r * C + c, mask=(r < R) & (c < C), other=0.0)
    for it in range(ITERS):
        tile = pid_r * ITERS + it
        r = tile * BR + tl.arange(0, BR)[:, None]
        x = x_next.to(tl.float32)
        if ITERS > 1:  # the next tile's load, issued before this one's arithmetic
            r_next = r + BR
            x_next = tl.load(X + r_next * C + c, mask=(r_next < R) & (c < C), other=0.0)
        yr, yc = _copies(x, r, c, SIGNS_R, SIGNS_C, RN_R, LOG2N_R, NORM_R, RN_C, LOG2N_C, NORM_C, BR, BC)
        if FUSE_AMAX:
            m_r = tl.maximum(m_r, tl.abs(yr).to(tl.int32, bitcast=True))
            m_c = tl.maximum(m_c, tl.abs(yc).to(tl.int32, bitcast=True))
        packed, sb = _strip_tile(yr, yc, r, c, tile, pid_c, s_r, p_r, s_c, p_c, seed, offset_r, offset_c, R, C,
                                 CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, EMIN, MBITS, FIXED, TWOS,
                                 BITS, GMAX, EMAX, SCALE, RULE, B, TILE2D, S_EMIN, S_MBITS, S_GMAX, S_MIN, NANB,
                                 MODE_R, MODE_C, CODES_R_ON, XHAT_R_ON, CODES_C_ON, XHAT_C_ON, UNSCALED, RNE_BF16,
                                 BR, BC, GATHER)
        if GATHER:
            g_codes |= (packed & 0xFF) << (8 * it)  # a packed pair's int32 may carry bits above its byte
            g_scales |= sb << (8 * it)
    if GATHER:
        _store_gathered(g_codes, g_scales, pid_r, pid_c, R, C, CODES_C, SCALES_C, B, TILE2D, BR, BC, ITERS)
    if FUSE_AMAX:  # two atomics a program (rows past R are zeros: they do not move a max)
        tl.atomic_max(AMAX_BITS, tl.max(tl.max(m_r, axis=1), axis=0))
        tl.atomic_max(AMAX_BITS + 1, tl.max(tl.max(m_c, axis=1), axis=0))
    if (pid_r == 0) & (pid_c == 0):
        tl.store(TS_OUT, s_r)
        tl.store(TS_OUT + 1, s_c)


@triton.jit
def _strip_tile(yr, yc, r, c, pid_r, pid_c, s_r, p_r, s_c, p_c, seed, offset_r, offset_c, R, C,
                CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C,
                EMIN: tl.constexpr, MBITS: tl.constexpr, FIXED: tl.constexpr, TWOS: tl.constexpr,
                BITS: tl.constexpr, GMAX: tl.constexpr, EMAX: tl.constexpr,
                SCALE: tl.constexpr, RULE: tl.constexpr, B: tl.constexpr, TILE2D: tl.constexpr,
                S_EMIN: tl.constexpr, S_MBITS: tl.constexpr, S_GMAX: tl.constexpr, S_MIN: tl.constexpr,
                NANB: tl.constexpr, MODE_R: tl.constexpr, MODE_C: tl.constexpr,
                CODES_R_ON: tl.constexpr, XHAT_R_ON: tl.constexpr, CODES_C_ON: tl.constexpr,
                XHAT_C_ON: tl.constexpr, UNSCALED: tl.constexpr, RNE_BF16: tl.constexpr, BR: tl.constexpr,
                BC: tl.constexpr, GATHER: tl.constexpr = False):
    """Quantize and store row tile pid_r of the strip: yr, yc its two copies (after RHTs).
    GATHER: the column copy's code pairs [BR / 2, BC] and scale bytes are returned, not
    stored (the kernel stores a program's tiles at once); otherwise (0, 0)."""
    packed_c = 0
    sb_c = 0
    inb = (r < R) & (c < C)
    if CODES_R_ON or XHAT_R_ON:
        bmax = _block_max(tl.abs(yr).to(tl.int32, bitcast=True), BR, BC, B, TILE2D)
        sb, mult, sv, bad = _block_scales(bmax, s_r, p_r, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX,
                                          S_MIN, NANB)
        if MODE_R == 2:
            u = sr_uniform(seed, r, c, C, offset_r)
        elif MODE_R >= 3:  # 3: sr4, 4: sr16
            u = sr_uniform_group(seed, r, pid_c * BC, C, offset_r, BR, BC, 4 if MODE_R == 3 else 16)
        else:
            u = yr
        codes, xhat = _quant_elems(yr, _expand(mult, BR, BC, B, TILE2D), _expand(sv, BR, BC, B, TILE2D),
                                   _expand(bad.to(tl.int32), BR, BC, B, TILE2D) != 0, s_r, u, EMIN, MBITS,
                                   FIXED, TWOS, BITS, GMAX, MODE_R, UNSCALED, CODES_R_ON)
        if CODES_R_ON:
            _store_codes(CODES_R, codes, r, c, R, C, pid_c, BITS, BR, BC)
            _store_scales(SCALES_R, sb, R, C, pid_r, pid_c, B, TILE2D, BR, BC)
        if XHAT_R_ON:
            tl.store(XHAT_R + r * C + c, _cast_out(xhat, XHAT_R, RNE_BF16), mask=inb)
    if CODES_C_ON or XHAT_C_ON:
        bits_c = tl.abs(yc).to(tl.int32, bitcast=True)
        if TILE2D:
            bmax = _block_max(bits_c, BR, BC, 16, True)  # [BR/16, BC/16]: the same 16x16 tiles
        else:
            bmax = _col_max(bits_c, BR, BC, B)
        sb, mult, sv, bad = _block_scales(bmax, s_c, p_c, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX,
                                          S_MIN, NANB)
        if TILE2D:
            mult_e = _expand(mult, BR, BC, 16, True)
            sv_e = _expand(sv, BR, BC, 16, True)
            bad_e = _expand(bad.to(tl.int32), BR, BC, 16, True) != 0
        else:
            mult_e = _col_expand(mult, BR, BC, B)
            sv_e = _col_expand(sv, BR, BC, B)
            bad_e = _col_expand(bad.to(tl.int32), BR, BC, B) != 0
        if MODE_C == 2:  # the column layout (C, R): element (c, r)
            u = sr_uniform(seed, c, r, R, offset_c)
        elif MODE_C >= 3:
            u = sr_uniform_group_t(seed, pid_r * BR, c, R, offset_c, BR, BC, 4 if MODE_C == 3 else 16)
        else:
            u = yc
        codes, xhat = _quant_elems(yc, mult_e, sv_e, bad_e, s_c, u, EMIN, MBITS, FIXED, TWOS, BITS, GMAX,
                                   MODE_C, UNSCALED, CODES_C_ON)
        if CODES_C_ON and BITS == 4:  # rows 2i (low nibble) and 2i + 1 of a column share a byte
            shift = tl.reshape(tl.where(tl.arange(0, 2) == 0, 0, 4), (1, 2, 1))
            packed = tl.sum(tl.reshape(codes, (BR // 2, 2, BC)) << shift, axis=1)
        if GATHER:
            packed_c = packed
            sb_c = sb
        elif CODES_C_ON:
            if BITS == 4:
                i = pid_r * (BR // 2) + tl.arange(0, BR // 2)[:, None]
                tl.store(CODES_C + c * (R // 2) + i, packed.to(tl.uint8), mask=(i < R // 2) & (c < C))
            else:
                tl.store(CODES_C + c * R + r, codes.to(tl.uint8), mask=inb)
            if TILE2D:
                j = pid_r * (BR // 16) + tl.arange(0, BR // 16)[:, None]
                c16 = pid_c * (BC // 16) + tl.arange(0, BC // 16)[None, :]
                tl.store(SCALES_C + c16 * (R // 16) + j, sb.to(tl.uint8), mask=(j < R // 16) & (c16 < C // 16),
                         eviction_policy=SCALE_L2)
            else:
                j = pid_r * (BR // B) + tl.arange(0, BR // B)[:, None]
                tl.store(SCALES_C + c * (R // B) + j, sb.to(tl.uint8), mask=(j < R // B) & (c < C),
                         eviction_policy=SCALE_L2)
        if XHAT_C_ON:
            tl.store(XHAT_C + r * C + c, _cast_out(xhat, XHAT_C, RNE_BF16), mask=inb)
    return packed_c, sb_c


@triton.jit
def _unpack_bytes(words, ITERS: tl.constexpr, N: tl.constexpr, BC: tl.constexpr):
    """[N, BC] words whose byte `it` belongs to tile `it` -> [ITERS * N, BC] bytes, tile-major."""
    it = tl.arange(0, ITERS)[:, None, None]
    return tl.reshape((words[None, :, :] >> (8 * it)) & 0xFF, (ITERS * N, BC)).to(tl.uint8)


@triton.jit
def _store_gathered(g_codes, g_scales, pid_r, pid_c, R, C, CODES_C, SCALES_C, B: tl.constexpr,
                    TILE2D: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ITERS: tl.constexpr):
    """The column copy's code and scale bytes of a program's ITERS row tiles (GATHER in
    _strip_kernel), in the transposed layout: ITERS * BR / 2 consecutive code bytes a column,
    ITERS scale bytes (one column block a tile: BR is the block, or 16 for 16 x 16 tiles)."""
    c = pid_c * BC + tl.arange(0, BC)[None, :]
    i = pid_r * (ITERS * BR // 2) + tl.arange(0, ITERS * BR // 2)[:, None]
    tl.store(CODES_C + c * (R // 2) + i, _unpack_bytes(g_codes, ITERS, BR // 2, BC), mask=(i < R // 2) & (c < C))
    j = pid_r * ITERS + tl.arange(0, ITERS)[:, None]
    if TILE2D:
        c16 = pid_c * (BC // 16) + tl.arange(0, BC // 16)[None, :]
        tl.store(SCALES_C + c16 * (R // 16) + j, _unpack_bytes(g_scales, ITERS, 1, BC // 16),
                 mask=(j < R // 16) & (c16 < C // 16), eviction_policy=SCALE_L2)
    else:
        tl.store(SCALES_C + c * (R // B) + j, _unpack_bytes(g_scales, ITERS, 1, BC), mask=(j < R // B) & (c < C),
                 eviction_policy=SCALE_L2)


# Row tiles a _strip_kernel program takes at most, and the fewest programs it keeps (132 SMs
# x about 16 one-warp programs each, twice over) before taking fewer (strip_iters).
STRIP_ITERS = 4
MIN_PROGRAMS = 4096


def strip_iters(rows: int, br: int, cols: int, bc: int, rht: bool, override, interpreting: bool) -> int:
    """Row tiles per _strip_kernel program. Measured on the H200 (kernels-h200.md, session
    10; training-h200 runs 14-15): 16-row tiles without an RHT take STRIP_ITERS (4: the
    125M model's ue5m3 calls 4-11% faster, 8 slower again), halved until the grid keeps
    MIN_PROGRAMS programs; calls with an RHT or 32-row (MX) tiles take 1 (their registers
    leave no room for the next tile: MXFP4's X calls with an RHT32 ran 1.5x slower at 4).
    Under the interpreter 2, so the CPU tier runs the loop, its prefetch and a last
    program past the rows. override: from the benchmarks."""
    if override is not None:
        return override
    if interpreting:
        return 2
    if rht or br > 16:
        return 1
    tiles = -(-rows // br) * -(-cols // bc)
    iters = STRIP_ITERS
    while iters > 1 and tiles // iters < MIN_PROGRAMS:
        iters //= 2
    return iters


def amax_config(br: int, bc: int, interpreting: bool) -> tuple[int, int, int]:
    """(BR, BC, row tiles per program) of _strip_amax_kernel: the quantize tile's rows
    (whole column blocks and column RHTs), at least 64 columns, 8 row tiles a program:
    2048 programs for a 32768 x 4608 dY call where the SR tile has 295k."""
    return br, max(bc, 64), 2 if interpreting else 8


def strip_config(spec_block: int, rn_r: int, rn_c: int, sr: bool, override, interpreting: bool):
    """(BR, BC, warps). BR: one column block, or the column RHT if taller; one warp.
    Without SR 64 columns: Triton's load layout then gives each thread 4 rows x 8 columns
    (four lanes per column block, two per 16-column row block), 126 registers (ptxas,
    sm_90a); fastest of six tiles on the H200 (kernels-h200.md, session 3; [32, 64] is
    5-7% faster on the X call alone but needs 190 registers with a column RHT). With SR
    32 columns: two Philox draws per element at 64 columns need 167-242 registers, which
    starves occupancy (dY call 738 us at 8192^2); at 32 columns 78 and 606 us, the old
    split kernel's 596 (session 4 sweep: [16, 64] on 2 or 4 warps is as fast without an
    RHT but 2-4x slower with one). override: a (BR, BC, warps) from the benchmarks."""
    br = max(spec_block, rn_c, 16)
    if override is not None:
        return max(br, override[0]), max(override[1], rn_r), override[2]
    if interpreting or sr:
        return br, max(32, rn_r), 1
    return br, max(64, rn_r), 1
