"""Row + column quantizer with the transpose in explicit layouts (Gluon, Hopper): both
packed copies of a row-major bf16 or f32 (R, C) x from one read, the column copy's bytes stored
transposed (the Wgrad layout) in whole 32-byte runs.

strip.py avoids a transpose because Triton's tl.trans moves a tile at 13-25% of copy
bandwidth even with no arithmetic; with the transpose written as a Gluon layout conversion
the same bytes move at 65-68% (kernels-h200.md, session 16, `io_floors`). This kernel does
the quantizer's arithmetic on that tiling:

- a program loads a [BM, BK] tile as 32-bit words (two bf16 of a row), rows 2i and 2i + 1
  apart, in a layout where a thread holds a whole row block (blocks of 16: 8 words, two
  16-byte loads), so a block's amax is in-thread (halfword max.u16x2 on the words) and its
  scale is computed once; the row copy's code bytes (a word's two elements make one) go
  out 8 a thread;
- gl.convert_layout moves the words (through shared memory) to a layout where a thread
  holds a whole column block: 8 row pairs of one word column. Rows 2i and 2i + 1 of a
  column, which share a byte of the column copy, sit in one thread, and the word's halves
  are two element columns, whose amaxes one max.u16x2 reduction gives together;
- a column RHT of 16 (TE's Wgrad operands) runs down a column block, so in one thread:
  reference.rht_lastdim's f64 butterflies in its order, one rounding to f32 (the strip
  kernel's cross lanes with f64 shuffles); opt-in for a bf16 input (COL_F32, session 26: exact
  and 1.08-1.19x slower, the pass being issue-bound), f32 butterflies on the block's values
  split at 12 binades below its largest, whose sum is the f64 one's bits wherever the exponents
  prove it, the program's column copy redone in f64 where not;
- a row RHT of the block size (MXFP4's Fprop operands) runs along a row block, in one thread
  likewise;
- blocks of 32 take the one-lane layouts on a tile that fits them (16 words, or 16 row
  pairs, a thread: BLOCK32_CONFIG, for "sr16" and a row RHT, session 19); elsewhere session
  17's layouts (4 words, or 4 row pairs, a thread; a block spans lanes: shuffles);
  `Config.one_lane` = False gives those to blocks of 16 too.

Session 18 (these layouts, the halfword amax, the paired cvt, one row tile a program) took
NVFP4 codes from 0.78-0.80x the strip kernel's time to 0.66x, the X call from 0.80-0.81x to
0.68x and the dY call ("sr16", both copies decoded) from 1.10-1.14x to 0.93-0.94x; in one run
the layouts alone gave 0.76x -> 0.66x, 0.77x -> 0.68x and 1.08x -> 0.95x (a group's Philox is
drawn once, not on both lanes that shared it). TE's calls with a column RHT of 16 run 0.60-0.63x
the strip kernel's time. UFP4's calls carry a row and a column RHT of 16: both in one thread
(session 28-29; the layer 1.37-1.64x -> 1.12-1.37x BF16 in one run). A bf16 input's RHT takes its
signs and 1 / 4 in f32 before the f64 butterflies (_rht_block PRE: the same bits, 0.87-0.98x).

The arithmetic is quantize.py's (_tensor_scales, _block_scales, _quant_elems, written to
serve both frontends), so codes, scale bytes, tensor scales and x_hat equal
reference.quantize bit for bit (tests/gpu). Scope, checked by `applies`: 4-bit grids with 1-D
blocks of 16 or 32; no RHT but a column RHT of 16 (one lane a block; the column copy packed
or decoded), a row RHT of the block size (one lane a block), or both on blocks of 16; a bf16
or f32 input (two bf16 a 32-bit word, two f32 a 64-bit one: F32); R a multiple of rows_per_program
and C of BK; each copy packed or decoded (unscaled x_hat in x's orientation, two values a paired
cvt: the column copy's goes back to the row layout through a second conversion); each copy
round-to-nearest-even or "sr16" (a 16-element group a Philox counter, two a block of 32, which
needs one lane a block: philox.sr_uniform_group's stream, the column copy's at offset +
numel); tensor amaxes given or measured by an amax pass (or recorded here, for a format
without a tensor scale). quantize.launch_rowcol
routes every call in that scope here on an sm_90 GPU (route "gluon"); every other call goes
to strip.py.

amax_gluon.py is the two-level formats' amax pass on this tiling (its layouts and RHT helpers
are this module's).

A program takes one row tile (the default), several unrolled with the next one's words in
flight, or (session 24) several in a loop that is not unrolled: a fixed count or a grid-stride
loop, the words loaded as a tile starts or copied tiles ahead through shared memory by
cp.async (Config.loop, stages, per_sm; slower than the default on an H100 where timed).
Session 28 (H100): the scale byte stores keep their sectors in L2 (SCALE_L2: 2-8 programs each
write a piece of one; the packed calls' io floor 90 -> 81 us at 8192^2) and a bf16 input's RTNE
calls without an RHT take 128 x 128 tiles on 16 warps (WIDE_CONFIG): the ue5m3 X call 129.0
-> 117.5 us (79% -> 87% of copy), NVFP4 codes 99.7 -> 97.4 us.

Gluon has no interpreter: the CPU tier compiles these kernels for sm_90a offline
(tests/unit/test_rowcol_gluon.py), tests/gpu checks its bytes.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from fourcast.kernels.quantize import SCALE_L2, _block_scales, _quant_elems, _tensor_scales



class Config(NamedTuple):
    """A launch of _rowcol_kernel: a [bm, bk] tile, `iters` row tiles a program.
    one_lane: with blocks of 16, one lane holds a whole block in both layouts (a row block's
    8 words; a column block's 8 row pairs), so a block's amax needs no shuffle, its scale
    is computed once and an "sr16" group is drawn once; otherwise (and with blocks of 32) a
    block spans B / 8 lanes.
    loop: the `iters` tiles run in a loop that is not unrolled, each loading its words as it
    starts. Unrolled (the default), the next tile's words are in flight under this one's
    arithmetic, which takes registers: NVFP4 codes at 64 x 128 on 8 warps take 64 a thread at
    one tile (four programs an SM) and 95 at two (two). Looped, a program's prologue (four
    divisions for the tensor scales, the index tensors) is shared by its tiles at one tile's
    registers, given maxnreg (its loop-invariant values would take more): offline SASS
    (Triton 3.6, sass_count.py), instructions an element, NVFP4 codes 37.0 at one tile, 30.2
    at eight looped under 64 registers, 29.7 under 80 (session 24). Timed on an H100 (session
    24, CUDA-graph replay) every looped form is slower than the one-tile default on the calls
    without an RHT (the X call 146-157 us against 129) and level on TE's dY call: fewer
    programs in flight hide less DRAM latency (the io floor drops likewise, 78% -> 69-71%).
    stages (looped): 0, each tile's words loaded into registers as it starts; 2 or 3, the next
    stages - 1 tiles' words on their way to shared memory (cp.async, a thread copying the
    words it will read) while this one is quantized, where the unrolled form's prefetch took
    registers: 32-48 KB of shared memory a program, 8 warps at 80 registers (three programs
    an SM) without spills for the packed and X calls.
    per_sm (looped): programs a multiprocessor in a grid-stride loop instead of `iters` tiles
    a program: each program keeps one column tile and takes every P-th row tile (grid (P, C /
    bk), P = per_sm x SMs / (C / bk)), so all programs run in one wave: eight tiles a program
    at three an SM leave the last of 2.6 waves 60% full (8192^2: 1024 programs on 396 slots)."""

    bm: int
    bk: int
    warps: int
    iters: int
    maxnreg: int | None = None
    one_lane: bool = True
    loop: bool = False
    stages: int = 0
    per_sm: int = 0


# The io floor's fastest tiles were 64 x 128 on 4 warps and 128 x 128 on 4 (67-68% of copy,
# session 16); with the arithmetic, 64 x 128 on 8 warps, two row tiles a program, was among the
# fastest in both shapes (session 17). With one lane a block (session 18, calls 2 and 4) one
# row tile a program is level with two on the RTNE calls and faster on the "sr16" ones (the
# dY call 0.93x against 0.95x the strip kernel, TE's dY call with a column RHT 0.63x against
# 0.75x): 98 registers against 161 there, two programs an SM.
CONFIG = Config(64, 128, 8, 1)
# TE's X call (RTNE, a column RHT of 16) runs faster at two row tiles a program: 0.55-0.56x
# the strip kernel's time against 0.60-0.61x at one (session 18, call 5).
RHT_RTNE_CONFIG = Config(64, 128, 8, 2)
# A bf16 input's calls with both copies packed and a column RHT of 16, RTNE or "sr16": one row
# tile at 80 registers (three programs an SM, no spills), faster than both above on an H100
# (session 26, CUDA-graph replays, amax given, both quantizer shapes): RTNE 136.2-137.2 ->
# 131.4 us (two tiles, 128 registers), TE's dY codes ("sr16") 180.4-181.6 -> 165.6 us (one
# tile, 100). TE's X call (a decoded row) keeps two tiles (session 18 timed one slower there).
RHT_PACKED_CONFIG = Config(64, 128, 8, 1, 80)
# A bf16 input's RTNE calls without an RHT whose column copy is packed (both copies packed, or
# the X call's decoded row): 128 x 128 tiles on 16 warps (the same 32 elements and 64 registers
# a thread, two programs an SM). A tile's column scale bytes go out in 8-byte pieces of their
# 32-byte sectors, not 4: the io floor's column scale bytes cost 4 us, not 6.3 (session 28, H100,
# 8192^2 and 16384 x 4096, CUDA-graph replays): NVFP4 delayed 99.7-100.0 -> 97.4-97.8 us, the
# ue5m3 X call 128.9-129.0 -> 125.1-125.5; with SCALE_L2 too, 98.3-98.7 -> 96.9-97.4 and
# 118.9-119.1 -> 117.4-117.6 (87% of copy). "sr16" (131.8 against 129.1) and a column RHT (1
# program an SM at 80 registers: 172 against 131) run slower there.
WIDE_CONFIG = Config(128, 128, 16, 1)


# Blocks of 32 in one lane ("sr16" or a row RHT on MXFP4's calls): a thread holds 16 words
# of a row or 16 row pairs of a word column, so the 64 x 128 tile takes 4 warps.
BLOCK32_CONFIG = Config(64, 128, 4, 1)


def config_for(R: int, rounding: str, rn_c: int, block: int = 16, rounding_c: str | None = None,
               rn_r: int = 0, bf16: bool = False, xhat: tuple = (False, False)) -> Config:
    """The default tile of a call with R rows (bf16: a bf16 input; xhat: which copies are
    written decoded): BLOCK32_CONFIG for blocks of 32 with "sr16" or a row RHT (one lane a
    block), RHT_PACKED_CONFIG for a column RHT of 16 with both copies packed from a bf16 input
    and for UFP4's X and W calls (a row and a column RHT of 16, a decoded row, RTNE),
    RHT_RTNE_CONFIG for the other RTNE calls with a column RHT where R fills its two row tiles,
    WIDE_CONFIG for a bf16 input's RTNE calls without an RHT, blocks of 16 and a packed column
    copy where R fills its tile, else CONFIG (UFP4's other calls among them)."""
    rounding_c = rounding if rounding_c is None else rounding_c
    if block == 32 and (rn_r or "sr16" in (rounding, rounding_c)):
        return BLOCK32_CONFIG
    if rn_r and rn_c:  # both RHTs (UFP4's calls): the X and W calls (RTNE, bf16, a decoded row) at 80 registers,
        if (rounding, rounding_c, bf16, xhat[0]) == ("rtne", "rtne", True, True):  # where they spill 8-16 bytes
            return RHT_PACKED_CONFIG  # (Triton 3.6): 0.88-0.89x the time on an H100 (session 29, 8192^2)
        return CONFIG  # the dY call ran slower there (205.5 -> 212.8 us); both packed was not timed
    if rn_c == 16 and bf16 and not any(xhat):  # measured there (a decoded column copy spills at 80)
        return RHT_PACKED_CONFIG
    tile = RHT_RTNE_CONFIG
    if rounding == "rtne" and rn_c and R % (tile.bm * tile.iters) == 0:
        return tile
    if (bf16 and block == 16 and (rounding, rounding_c) == ("rtne", "rtne") and not (rn_r or rn_c or xhat[1])
            and R % WIDE_CONFIG.bm == 0):
        return WIDE_CONFIG
    return CONFIG


@gluon.constexpr_function
def _row_layout(W, WB, NW, one_lane):
    """A tile's words [row pair, row block, word in block] (W words a row, blocks of WB
    words) on NW warps: a whole block a thread (one_lane), else 4 words of one row a thread
    (16-byte loads), a block on WB / 4 lanes."""
    if one_lane:
        return gl.BlockedLayout([1, 1, WB], [32 // (W // WB), W // WB, 1], [NW, 1, 1], [2, 1, 0])
    tb = WB // 4
    return gl.BlockedLayout([1, 1, 4], [2, 16 // tb, tb], [NW, 1, 1], [2, 1, 0])


@gluon.constexpr_function
def _col_layout(H, W, WB, NW, one_lane):
    """The same words [column block, row pair in block, word column]: a whole column block (WB
    row pairs of one word column) a thread (one_lane), else 4 row pairs of a word column a
    thread, a block on WB / 4 lanes."""
    if one_lane:
        return gl.BlockedLayout([1, WB, 1], [H // WB, 1, 32 // (H // WB)], [1, 1, NW], [1, 0, 2])
    tb = WB // 4
    return gl.BlockedLayout([1, 4, 1], [8 // tb, tb, 4], [1, 1, NW], [1, 0, 2])


@gluon.jit
def _halves(v):
    """The two bf16 of 32-bit words as f32 (exact: a bf16 is the top half of its f32),
    the one at the lower address first."""
    return (v << 16).to(gl.float32, bitcast=True), (v & -65536).to(gl.float32, bitcast=True)


@gluon.jit
def _elems(v, F32: gl.constexpr):
    """The two elements of words as f32, the one at the lower address first: two bf16 in 32
    bits (_halves), or two f32 in 64 (F32: an f32 input)."""
    if F32:
        return (v & 0xFFFFFFFF).to(gl.int32).to(gl.float32, bitcast=True), (v >> 32).to(gl.int32).to(
            gl.float32, bitcast=True)
    else:
        return _halves(v)


@gluon.jit
def _abs_max_elems(v, AXIS: gl.constexpr, F32: gl.constexpr):
    """(lower, upper): the max |x| bits (as f32 bits) over AXIS of the words' two elements;
    NaN above +inf, as the strip kernel's block max."""
    if F32:
        lo, hi = _elems(v, True)
        return (gl.max(lo.to(gl.int32, bitcast=True) & 0x7FFFFFFF, axis=AXIS),
                gl.max(hi.to(gl.int32, bitcast=True) & 0x7FFFFFFF, axis=AXIS))
    else:
        m = _abs_max16(v, AXIS)
        return m << 16, m & -65536


@gluon.jit
def _max_u16x2(a, b):
    """Halfword-wise unsigned max of two 32-bit words (one instruction on sm_90)."""
    return gl.inline_asm_elementwise("max.u16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _abs_max16(v, AXIS: gl.constexpr):
    """Per halfword, the max |x| bits over AXIS of words of two bf16: a bf16's magnitude bits
    order as its value does, with NaN above +inf (as f32 bits: the halfword << 16)."""
    return gl.reduce(v & 0x7FFF7FFF, AXIS, _max_u16x2)


@gluon.jit
def _quant(y, sb_mult, sb_sv, sb_bad, ts, u, AXIS: gl.constexpr, EMIN: gl.constexpr, MBITS: gl.constexpr,
           FIXED: gl.constexpr, TWOS: gl.constexpr, BITS: gl.constexpr, GMAX: gl.constexpr, MODE: gl.constexpr,
           CODES: gl.constexpr, SIGNED: gl.constexpr):
    """(4-bit codes, unscaled x_hat) of y given its blocks' multipliers, decoded scales and
    non-finite flags (reduced along AXIS, broadcast back here): round-to-nearest-even (MODE
    0) or "sr16" (MODE 4, u: each element's byte); CODES: the codes are written; SIGNED
    False: x_hat's magnitude (_signed_words puts the signs back)."""
    return _quant_elems(y, gl.expand_dims(sb_mult, AXIS), gl.expand_dims(sb_sv, AXIS), gl.expand_dims(sb_bad, AXIS),
                        ts, u, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE, True, CODES, SIGNED)


@gluon.jit
def _word(lo, hi, DTYPE: gl.constexpr):
    """Two f32 values (exact in DTYPE, a 16-bit float) as one 32-bit word of DTYPE, lo at
    the lower address: one paired conversion (cvt's first source goes to the upper half)."""
    if DTYPE == gl.bfloat16:
        return gl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", [hi, lo], dtype=gl.int32,
                                         is_pure=True, pack=1)
    else:
        return gl.inline_asm_elementwise("cvt.rn.f16x2.f32 $0, $1, $2;", "=r,f,f", [hi, lo], dtype=gl.int32,
                                         is_pure=True, pack=1)


@gluon.jit
def _signed_words(lo, hi, words, sign_mask, DTYPE: gl.constexpr):
    """_word of two x_hat magnitudes with the signs of the input words they came from (bf16
    pairs in the same order), where sign_mask (_sign_mask) lets them through: one LOP3 a
    word where a sign on each value took two. x_hat's sign is y's (the block multiplier is
    not negative), -0.0 included; a non-finite block's x_hat is the decoded NaN scale's
    positive NaN whatever y's sign, so its half of the mask is 0."""
    return _word(lo, hi, DTYPE) | (words & sign_mask)


@gluon.jit
def _sign_mask(bad_lo, bad_hi):
    """The input sign bits _signed_words keeps, per block: bit 15 (the lower element's) unless
    its block is non-finite (bad_lo), bit 31 unless bad_hi. Per block, not per element."""
    return gl.where(bad_lo, 0, 0x8000) | gl.where(bad_hi, 0, -2147483648)


@gluon.jit
def _sr16_bytes(seed, counter, n, AXIS: gl.constexpr, B: gl.constexpr = 16):
    """"sr16" bytes of a block's members n: counter holds each block's first 16-element group
    (reduced along AXIS), n the members (broadcast along the others). A block of 32 is two
    groups: its members 16 .. 31 are members 0 .. 15 of the next counter."""
    if B == 32:
        first = _group_bytes(seed, counter, n % 16, AXIS)
        second = _group_bytes(seed, counter + 1, n % 16, AXIS)
        return gl.where(n < 16, first, second)
    return _group_bytes(seed, counter, n, AXIS)


@gluon.jit
def _group_bytes(seed, counter, n, AXIS: gl.constexpr):
    """"sr16" bytes of a 16-element group's members n (philox.sr_uniform_group: one Philox
    counter a group, member n takes byte n % 4 of word n // 4)."""
    w0, w1, w2, w3 = tl.randint4x(seed, counter)
    w0 = gl.expand_dims(w0, AXIS)
    w1 = gl.expand_dims(w1, AXIS)
    w2 = gl.expand_dims(w2, AXIS)
    w3 = gl.expand_dims(w3, AXIS)
    word = gl.where(n < 4, w0, gl.where(n < 8, w1, gl.where(n < 12, w2, w3)))
    return ((word >> ((n % 4) * 8).to(gl.uint32)) & 0xFF).to(gl.int32)


@gluon.jit
def _quant_pair(a, b, sb_mult, sb_sv, sb_bad, ts, seed, counter, n, AXIS: gl.constexpr, EMIN: gl.constexpr,
                MBITS: gl.constexpr, FIXED: gl.constexpr, TWOS: gl.constexpr, BITS: gl.constexpr,
                GMAX: gl.constexpr, MODE: gl.constexpr, B: gl.constexpr, CODES: gl.constexpr,
                SIGNED: gl.constexpr):
    """_quant of two elements that share a code byte (a in its low nibble): the byte and
    both x_hat. With "sr16" (MODE 4) they are members n and n + 1 of their block (B).
    CODES: the byte is written (else x_hat); SIGNED False: x_hat's magnitudes."""
    if MODE == 4:
        u_a = _sr16_bytes(seed, counter, n, AXIS, B)
        u_b = _sr16_bytes(seed, counter, n + 1, AXIS, B)
    else:
        u_a = a
        u_b = b
    c_a, x_a = _quant(a, sb_mult, sb_sv, sb_bad, ts, u_a, AXIS, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE, CODES,
                      SIGNED)
    c_b, x_b = _quant(b, sb_mult, sb_sv, sb_bad, ts, u_b, AXIS, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE, CODES,
                      SIGNED)
    return (c_a + (c_b << 4)).to(gl.uint8), x_a, x_b  # disjoint nibbles: an add is one LEA


@gluon.constexpr_function
def _log2(n):
    return int(math.log2(n))


@gluon.jit
def _stage(y, S: gl.constexpr, AXIS: gl.constexpr):
    """One butterfly stage along AXIS (1 or 2) of an in-thread 3-D f64 tensor: entries k and
    k + S inside groups of 2S become (a + b, a - b), each one f64 addition."""
    D0: gl.constexpr = y.shape[0]
    D1: gl.constexpr = y.shape[1]
    D2: gl.constexpr = y.shape[2]
    if AXIS == 1:
        y5 = gl.permute(gl.reshape(y, [D0, D1 // (2 * S), 2, S, D2]), [0, 1, 3, 4, 2])  # the pair last
        a, b = gl.split(y5)
        return gl.reshape(gl.permute(gl.join(a + b, a - b), [0, 1, 4, 2, 3]), [D0, D1, D2])
    else:
        y5 = gl.permute(gl.reshape(y, [D0, D1, D2 // (2 * S), 2, S]), [0, 1, 2, 4, 3])
        a, b = gl.split(y5)
        return gl.reshape(gl.permute(gl.join(a + b, a - b), [0, 1, 2, 4, 3]), [D0, D1, D2])


@gluon.constexpr_function
def _prescaled(f32, norm):
    """An RHT whose signs carry its norm, applied in f32 (_rht_block's PRE): a bf16 input's and
    a power-of-two norm's (RHT sizes 4^n: 16)."""
    return not f32 and norm == 2.0 ** round(math.log2(norm))


@gluon.jit
def _rht_block(ye, yo, sign_e, sign_o, NORM: gl.constexpr, AXIS: gl.constexpr, L: gl.constexpr,
               PRE: gl.constexpr = False):
    """An RHT of a block held in one thread, its even elements ye and odd ones yo, their
    pairs along AXIS (the column copy's: [column block, row pair, word column], AXIS 1, ye
    rows 2p and yo rows 2p + 1; the row copy's: [row pair, row block, word], AXIS 2, ye the
    words' elements 2k and yo 2k + 1): reference.rht_lastdim's f64 butterflies in its order
    (stage h pairs elements i and i + h inside groups of 2h: h = 1 pairs ye with yo, h = 2, 4,
    .. pairs p and p + h / 2 along AXIS), times the f64 NORM, one rounding to f32, in L.
    PRE (_prescaled; signs f32, times NORM): the inputs times sign * NORM in f32, before the
    butterflies. The same bits: a bf16 value times 2^-2 is exact in f32 (its last bit, >= 2^-135,
    stays above f32's 2^-149), and every f64 partial sum is then 2^-2 times the unscaled one,
    roundings included (nothing near f64's range ends). One FMUL an element for the two DMULs."""
    if PRE:
        a, b = _butterflies((ye * sign_e).to(gl.float64), (yo * sign_o).to(gl.float64), AXIS)
        a = a.to(gl.float32)
        b = b.to(gl.float32)
    else:
        a, b = _butterflies(ye.to(gl.float64) * sign_e, yo.to(gl.float64) * sign_o, AXIS)
        a = (a * NORM).to(gl.float32)
        b = (b * NORM).to(gl.float32)
    return gl.convert_layout(a, L), gl.convert_layout(b, L)


@gluon.jit
def _rht_signs(ptrs, NORM: gl.constexpr, PRE: gl.constexpr):
    """An RHT's f32 signs at ptrs as _rht_block takes them: times NORM in f32 (PRE), else f64."""
    if PRE:
        signs = gl.load(ptrs) * NORM
    else:
        signs = gl.load(ptrs).to(gl.float64)
    return signs


@gluon.jit
def _butterflies(a, b, AXIS: gl.constexpr):
    """The RHT's butterflies on a block's signed even (a) and odd (b) elements, in their dtype:
    stage 1 pairs a with b, the later stages pair along AXIS (_rht_block's order)."""
    a, b = a + b, a - b
    for s in gl.static_range(_log2(a.shape[AXIS])):
        a = _stage(a, 1 << s, AXIS)
        b = _stage(b, 1 << s, AXIS)
    return a, b


@gluon.jit
def _min_u16x2(a, b):
    """Halfword-wise unsigned min of two 32-bit words (one instruction on sm_90)."""
    return gl.inline_asm_elementwise("min.u16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _rht16_col_f32(ec, oc, e_lo, e_hi, o_lo, o_hi, sign_e, sign_o):
    """A tile's column RHT of 16 on bf16 words ([column block, row pair, word column]: ec rows
    2p, oc 2p + 1, e_lo .. o_hi their halves as f32; sign_e, sign_o their f32 signs) in f32,
    reference.rht_lastdim's bits wherever this proves them: (y of e_lo, o_lo, e_hi, o_hi, and
    per [column block, word column] 1 where a block of either half is not proven: its column
    copy must be redone in f64). _rht16_split_half says how."""
    me = ec & 0x7FFF7FFF
    mo = oc & 0x7FFF7FFF
    top = gl.reduce(_max_u16x2(me, mo), 1, _max_u16x2)
    low = gl.reduce(_min_u16x2((me + 0x7FFF7FFF) ^ -2147450880, (mo + 0x7FFF7FFF) ^ -2147450880), 1, _min_u16x2)
    q_e = sign_e * 0.25  # the 1 / 4 applied up front: exact, as no value is subnormal where proven
    q_o = sign_o * 0.25
    ye_lo, yo_lo, bad_lo = _rht16_split_half(e_lo * q_e, o_lo * q_o, top & 0xFFFF, low & 0xFFFF)
    ye_hi, yo_hi, bad_hi = _rht16_split_half(e_hi * q_e, o_hi * q_o, (top >> 16) & 0xFFFF, (low >> 16) & 0xFFFF)
    return ye_lo, yo_lo, ye_hi, yo_hi, bad_lo | bad_hi


@gluon.jit
def _rht16_split_half(xe, xo, top, low):
    """One element column's RHT of 16 per block (xe, xo: its rows 2p and 2p + 1 as f32 times
    their signs / 4;
    top, the block's max |x| as bf16 bits; low, its smallest nonzero |x|'s minus 1, 0xFFFF for
    none) as (ye, yo, unproven blocks). The reference's y is RN_f32(S / 4), S its f64
    butterflies. Split the block at exponent field emax - 12: the butterflies of the values at
    or above it (zeros included, other values +0) are exact in f32 (amax_gluon._rht16_amax_f32's argument)
    and so are those of the values below it (others +0) while those lie within 12 fields of
    each other: every nonzero field in [emax - 25, emax], at least 25, emax at most 249. Then
    f64's S is exact too (37 bits), and one f32 add of the two exact sums (of x / 4: no value is
    subnormal) is RN_f32(S / 4), the reference's y (S / 4 is 0 or above 2^-111). A
    block without small values takes the first sums alone, zeros' signs included (every
    operation exact, as f64's). A zero S with small values is left unproven (the sign of f64's
    zero follows its partial sums), as is every block outside those bounds (rare in data: a
    value 2^-25 of its block's largest)."""
    emax = top >> 7
    emin = (low + 1) >> 7  # 512 for an all-zero block
    proven = (emax <= 249) & (emin >= 25) & (emax - emin <= 25)
    split = gl.expand_dims(emax - emin > 12, 1)
    edge = gl.expand_dims(((emax - 14) << 23).to(gl.float32, bitcast=True), 1)  # field emax - 12's least / 4
    small_e = (gl.abs(xe) < edge) & (xe != 0.0)
    small_o = (gl.abs(xo) < edge) & (xo != 0.0)
    a, b = _butterflies(gl.where(small_e, 0.0, xe), gl.where(small_o, 0.0, xo), 1)
    c, d = _butterflies(gl.where(small_e, xe, 0.0), gl.where(small_o, xo, 0.0), 1)
    ye = gl.where(split, a + c, a)
    yo = gl.where(split, b + d, b)
    zero = gl.max(((ye == 0.0) | (yo == 0.0)).to(gl.int32), axis=1)
    return ye, yo, gl.where(proven, zero & (emax - emin > 12).to(gl.int32), 1)


@gluon.jit
def _abs_max_col(ye, yo):
    """A column block's max |y| bits (axis 1 of [column block, row pair, word column]) from
    its rows 2p and 2p + 1 (f32: after an RHT)."""
    bits = gl.maximum(ye.to(gl.int32, bitcast=True) & 0x7FFFFFFF, yo.to(gl.int32, bitcast=True) & 0x7FFFFFFF)
    return gl.max(bits, axis=1)


@gluon.jit
def _col_half(ye, yo, bmax, s_c, p_c, seed, counter, p, EMIN: gl.constexpr, MBITS: gl.constexpr, FIXED: gl.constexpr,
              TWOS: gl.constexpr, BITS: gl.constexpr, GMAX: gl.constexpr, EMAX: gl.constexpr, SCALE: gl.constexpr,
              RULE: gl.constexpr, S_EMIN: gl.constexpr, S_MBITS: gl.constexpr, S_GMAX: gl.constexpr,
              S_MIN: gl.constexpr, NANB: gl.constexpr, MODE: gl.constexpr, B: gl.constexpr, CODES: gl.constexpr,
              SIGNED: gl.constexpr):
    """One element column of the column copy ([column block, row pair in block, word column]:
    ye its rows 2i, yo its rows 2i + 1; bmax its blocks' amax bits): (code bytes of the row
    pairs, scale bytes, x_hat of ye, x_hat of yo). Row 2p (+1) of a block is member 2p (+1) of its "sr16" group."""
    sb, mult, sv, bad = _block_scales(bmax, s_c, p_c, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX, S_MIN,
                                      NANB)
    codes, x_e, x_o = _quant_pair(ye, yo, mult, sv, bad, s_c, seed, counter, 2 * p, 1, EMIN, MBITS, FIXED, TWOS,
                                  BITS, GMAX, MODE, B, CODES, SIGNED)
    return codes, sb.to(gl.uint8), x_e, x_o, bad


@gluon.jit
def _row_tiles(pid_r, R, BM: gl.constexpr, ITERS: gl.constexpr, STRIDED: gl.constexpr):
    """A looped program's row tiles as (first, step, count): ITERS from pid_r x ITERS on, or
    (STRIDED) every num_programs-th from pid_r on."""
    if STRIDED:
        step = gl.num_programs(0)
        return pid_r, step, (R // BM - pid_r + step - 1) // step
    else:
        return pid_r * ITERS, 1, ITERS


@gluon.jit
def _words_ring(XW, first, step, count, i, w, C, H: gl.constexpr, W: gl.constexpr, WB: gl.constexpr,
                STAGES: gl.constexpr):
    """A looped program's shared-memory ring of tile words (STAGES slots of rows 2i and 2i + 1),
    its first STAGES - 1 tiles' copies issued (cp.async); (0, 0) without stages."""
    if STAGES > 0:
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[2, 1, 0])
        buf_e = gl.allocate_shared_memory(XW.dtype.element_ty, [STAGES, H, W // WB, WB], SL)
        buf_o = gl.allocate_shared_memory(XW.dtype.element_ty, [STAGES, H, W // WB, WB], SL)
        for s in gl.static_range(STAGES - 1):
            _words_async(buf_e.index(s), buf_o.index(s), XW, (first + s * step) * H, i, w, C, s < count)
        return buf_e, buf_o
    else:
        return 0, 0


@gluon.jit
def _tile_words(buf_e, buf_o, XW, first, step, count, it, i, w, C, H: gl.constexpr, LR: gl.constexpr,
                STAGES: gl.constexpr):
    """Words (rows 2i, rows 2i + 1) of a looped program's tile `it`: loaded now, or (STAGES)
    from the ring, after issuing the copies of tile it + STAGES - 1."""
    if STAGES > 0:
        ahead = it + STAGES - 1
        _words_async(buf_e.index(ahead % STAGES), buf_o.index(ahead % STAGES), XW, (first + ahead * step) * H, i, w,
                     C, ahead < count)
        async_copy.wait_group(STAGES - 1)  # this thread's copies of tile it are done: it reads only those
        return buf_e.index(it % STAGES).load(LR), buf_o.index(it % STAGES).load(LR)
    else:
        r0 = (first + it * step) * H
        return gl.load(XW + (2 * (r0 + i)) * (C // 2) + w), gl.load(XW + (2 * (r0 + i) + 1) * (C // 2) + w)


# cp.async global -> shared: Triton 3.6 names it async_copy_global_to_shared, later releases
# async_load (the old name raises there)
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def _words_async(buf_e, buf_o, XW, r0, i, w, C, valid):
    """Copy a tile's words (rows 2i and 2i + 1 from row pair r0 on) into buf_e and buf_o
    without registers (cp.async, 16 bytes a copy), as one commit group; nothing where not
    valid. Each thread copies the words it will load: the shared layout puts a word at the
    same place whichever thread writes or reads it, so its own wait_group orders them."""
    on = (i * 0 + w * 0 + (r0 * 0 + valid)) != 0  # valid: a bool or an i1 scalar
    _async_load(buf_e, XW + (2 * (r0 + i)) * (C // 2) + w, mask=on)
    _async_load(buf_o, XW + (2 * (r0 + i) + 1) * (C // 2) + w, mask=on)
    async_copy.commit_group()


@gluon.jit
def _tile(e, o, r0, tile_max, tile_max_c, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, SIGNS_C, R, C, seed,
          offset_r, offset_c, s_r, p_r, s_c, p_c, sign_lo, sign_hi, i, k, w, i2, g2, p, ic, wc, j, wj,
          EMIN: gl.constexpr, MBITS: gl.constexpr, FIXED: gl.constexpr, TWOS: gl.constexpr, BITS: gl.constexpr,
          GMAX: gl.constexpr, EMAX: gl.constexpr, SCALE: gl.constexpr, RULE: gl.constexpr, B: gl.constexpr,
          S_EMIN: gl.constexpr, S_MBITS: gl.constexpr, S_GMAX: gl.constexpr, S_MIN: gl.constexpr,
          NANB: gl.constexpr, FUSE_AMAX: gl.constexpr, XHAT_R_ON: gl.constexpr, XHAT_C_ON: gl.constexpr,
          MODE_R: gl.constexpr, MODE_C: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, LR: gl.constexpr,
          LC: gl.constexpr, RN_C: gl.constexpr, NORM_C: gl.constexpr, F32: gl.constexpr, RN_R: gl.constexpr,
          NORM_R: gl.constexpr, COL_F32: gl.constexpr, ROW_ON: gl.constexpr = True):
    """_rowcol_kernel's work on one tile: its words e (rows 2i) and o (rows 2i + 1) from row
    pair r0 on, both copies (the column copy only, without ROW_ON) quantized and stored; the
    running amaxes (FUSE_AMAX) returned, and the column blocks COL_F32's RHT left unproven
    (nonzero where its column copy must be redone in f64)."""
    SPLIT_AMAX: gl.constexpr = RN_R > 0 or RN_C > 0  # the copies' amaxes differ
    # a decoded copy of unrotated bf16 takes its x_hat words' signs from the input words (a
    # sign-magnitude grid: two's complement decodes a negative value's zero as +0)
    WORD_SIGNS_R: gl.constexpr = XHAT_R_ON and RN_R == 0 and not F32 and not TWOS
    WORD_SIGNS_C: gl.constexpr = XHAT_C_ON and RN_C == 0 and not F32 and not TWOS
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    WB: gl.constexpr = B // 2
    # ---- the row copy
    for half in gl.static_range(2 if ROW_ON else 0):
        v = e if half == 0 else o
        lo, hi = _elems(v, F32)
        if RN_R > 0:  # the RHT runs along a row block, in one thread
            lo, hi = _rht_block(lo, hi, sign_lo, sign_hi, NORM_R, 2, LR, _prescaled(F32, NORM_R))
            m_lo = gl.max(lo.to(gl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
            m_hi = gl.max(hi.to(gl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
        else:
            m_lo, m_hi = _abs_max_elems(v, 2, F32)
        bmax = gl.maximum(m_lo, m_hi)  # a row block's words are all its elements
        if FUSE_AMAX:
            tile_max = gl.maximum(tile_max, gl.max(gl.max(bmax, axis=1), axis=0))
        sb, mult, sv, bad = _block_scales(bmax, s_r, p_r, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX,
                                          S_MIN, NANB)
        # word k of a block holds its members 2k and 2k + 1 ("sr16": B / 16 groups a block)
        counter = (2 * (r0 + i2) + half).to(gl.int64) * (C // 16) + g2 * (B // 16) + offset_r
        codes, x_lo, x_hi = _quant_pair(lo, hi, mult, sv, bad, s_r, seed, counter, 2 * k, 2, EMIN, MBITS, FIXED,
                                        TWOS, BITS, GMAX, MODE_R, B, not XHAT_R_ON, not WORD_SIGNS_R)
        if XHAT_R_ON:
            XW_OUT = XHAT_R.to(gl.pointer_type(gl.int32), bitcast=True)
            if WORD_SIGNS_R:  # a word's two elements share their row block
                xw = _signed_words(x_lo, x_hi, v, gl.expand_dims(_sign_mask(bad, bad), 2),
                                   XHAT_R.dtype.element_ty)
            else:
                xw = _word(x_lo, x_hi, XHAT_R.dtype.element_ty)
            gl.store(XW_OUT + (2 * (r0 + i) + half) * (C // 2) + w, xw)
        else:
            gl.store(CODES_R + (2 * (r0 + i) + half) * (C // 2) + w, codes)
            gl.store(SCALES_R + (2 * (r0 + i2) + half) * (C // B) + g2, sb.to(gl.uint8), eviction_policy=SCALE_L2)
    # ---- the column copy: words to a column block a thread (one lane), else 4 row pairs
    ec = gl.convert_layout(gl.reshape(gl.reshape(e, [H, W]), [H // WB, WB, W]), LC)
    oc = gl.convert_layout(gl.reshape(gl.reshape(o, [H, W]), [H // WB, WB, W]), LC)
    e_lo, e_hi = _elems(ec, F32)
    o_lo, o_hi = _elems(oc, F32)
    unproven = 0
    if RN_C > 0:  # the RHT runs down a column block: rows 2p and 2p + 1 take signs 2p and 2p + 1
        if COL_F32:
            sign_e = gl.load(SIGNS_C + 2 * p)
            sign_o = gl.load(SIGNS_C + 2 * p + 1)
            e_lo, o_lo, e_hi, o_hi, unproven = _rht16_col_f32(ec, oc, e_lo, e_hi, o_lo, o_hi, sign_e, sign_o)
        else:
            PRE_C: gl.constexpr = _prescaled(F32, NORM_C)
            sign_e = _rht_signs(SIGNS_C + 2 * p, NORM_C, PRE_C)
            sign_o = _rht_signs(SIGNS_C + 2 * p + 1, NORM_C, PRE_C)
            e_lo, o_lo = _rht_block(e_lo, o_lo, sign_e, sign_o, NORM_C, 1, LC, PRE_C)
            e_hi, o_hi = _rht_block(e_hi, o_hi, sign_e, sign_o, NORM_C, 1, LC, PRE_C)
        m_lo = _abs_max_col(e_lo, o_lo)
        m_hi = _abs_max_col(e_hi, o_hi)
        if FUSE_AMAX:
            tile_max_c = gl.maximum(tile_max_c, gl.max(gl.max(gl.maximum(m_lo, m_hi), axis=1), axis=0))
    else:
        if F32:  # element columns 2w (the words' lower elements) and 2w + 1
            me_lo, me_hi = _abs_max_elems(ec, 1, True)
            mo_lo, mo_hi = _abs_max_elems(oc, 1, True)
            m_lo = gl.maximum(me_lo, mo_lo)
            m_hi = gl.maximum(me_hi, mo_hi)
        else:  # element columns 2w (the words' low halves) and 2w + 1 from one halfword max
            m = _max_u16x2(_abs_max16(ec, 1), _abs_max16(oc, 1))
            m_lo = m << 16
            m_hi = m & -65536
        if FUSE_AMAX and SPLIT_AMAX:  # a row RHT: the column copy's amax is the input's
            tile_max_c = gl.maximum(tile_max_c, gl.max(gl.max(gl.maximum(m_lo, m_hi), axis=1), axis=0))
    # element columns 2w (the words' low halves) and 2w + 1; a column's "sr16" groups are
    # its blocks' 16-row runs
    counter = (2 * wj).to(gl.int64) * (R // 16) + r0 // 8 + j * (B // 16) + offset_c
    b_lo, s_lo, xe_lo, xo_lo, bad_lo = _col_half(e_lo, o_lo, m_lo, s_c, p_c, seed, counter, p, EMIN, MBITS,
                                                 FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS,
                                                 S_GMAX, S_MIN, NANB, MODE_C, B, not XHAT_C_ON, not WORD_SIGNS_C)
    b_hi, s_hi, xe_hi, xo_hi, bad_hi = _col_half(e_hi, o_hi, m_hi, s_c, p_c, seed, counter + R // 16, p, EMIN,
                                                 MBITS, FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, S_EMIN,
                                                 S_MBITS, S_GMAX, S_MIN, NANB, MODE_C, B, not XHAT_C_ON,
                                                 not WORD_SIGNS_C)
    if XHAT_C_ON:  # back to the row layout, to store rows of x's orientation
        XC_OUT = XHAT_C.to(gl.pointer_type(gl.int32), bitcast=True)
        if WORD_SIGNS_C:  # a row pair's x_hat words sit where its input words do; a word's
            mask = gl.expand_dims(_sign_mask(bad_lo, bad_hi), 1)  # halves: two column blocks
            we = _signed_words(xe_lo, xe_hi, ec, mask, XHAT_C.dtype.element_ty)
            wo = _signed_words(xo_lo, xo_hi, oc, mask, XHAT_C.dtype.element_ty)
        else:
            we = _word(xe_lo, xe_hi, XHAT_C.dtype.element_ty)
            wo = _word(xo_lo, xo_hi, XHAT_C.dtype.element_ty)
        we = gl.convert_layout(gl.reshape(gl.reshape(we, [H, W]), [H, W // WB, WB]), LR)
        wo = gl.convert_layout(gl.reshape(gl.reshape(wo, [H, W]), [H, W // WB, WB]), LR)
        gl.store(XC_OUT + (2 * (r0 + i)) * (C // 2) + w, we)
        gl.store(XC_OUT + (2 * (r0 + i) + 1) * (C // 2) + w, wo)
    else:
        gl.store(CODES_C + (2 * wc) * (R // 2) + r0 + ic, b_lo)
        gl.store(CODES_C + (2 * wc + 1) * (R // 2) + r0 + ic, b_hi)
        gl.store(SCALES_C + (2 * wj) * (R // B) + r0 // WB + j, s_lo, eviction_policy=SCALE_L2)
        gl.store(SCALES_C + (2 * wj + 1) * (R // B) + r0 // WB + j, s_hi, eviction_policy=SCALE_L2)
    return tile_max, tile_max_c, unproven


@gluon.jit
def _col_copies_f64(XW, tile_max, tile_max_c, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, SIGNS_C, R, C,
                    seed, offset_r, offset_c, s_r, p_r, s_c, p_c, sign_lo, sign_hi, i, k, w, i2, g2, p, ic, wc, j,
                    wj, first, step, count, EMIN: gl.constexpr, MBITS: gl.constexpr, FIXED: gl.constexpr,
                    TWOS: gl.constexpr, BITS: gl.constexpr, GMAX: gl.constexpr, EMAX: gl.constexpr,
                    SCALE: gl.constexpr, RULE: gl.constexpr, B: gl.constexpr, S_EMIN: gl.constexpr,
                    S_MBITS: gl.constexpr, S_GMAX: gl.constexpr, S_MIN: gl.constexpr, NANB: gl.constexpr,
                    FUSE_AMAX: gl.constexpr, XHAT_R_ON: gl.constexpr, XHAT_C_ON: gl.constexpr,
                    MODE_R: gl.constexpr, MODE_C: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
                    LR: gl.constexpr, LC: gl.constexpr, RN_C: gl.constexpr, NORM_C: gl.constexpr,
                    F32: gl.constexpr, RN_R: gl.constexpr, NORM_R: gl.constexpr):
    """The column copy of a program's tiles (`count` row tiles from `first`, `step` apart)
    quantized and stored again with the f64 RHT, over what the f32 one stored; the column
    copy's running amax (FUSE_AMAX) recomputed and returned."""
    H: gl.constexpr = BM // 2
    m_c = tile_max_c * 0
    for it in range(count):
        r0 = (first + it * step) * H
        e = gl.load(XW + (2 * (r0 + i)) * (C // 2) + w)
        o = gl.load(XW + (2 * (r0 + i) + 1) * (C // 2) + w)
        _, m_c, _ = _tile(e, o, r0, tile_max, m_c, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, SIGNS_C,
                          R, C, seed, offset_r, offset_c, s_r, p_r, s_c, p_c, sign_lo, sign_hi, i, k, w, i2, g2,
                          p, ic, wc, j, wj, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B, S_EMIN,
                          S_MBITS, S_GMAX, S_MIN, NANB, FUSE_AMAX, XHAT_R_ON, XHAT_C_ON, MODE_R, MODE_C, BM, BK,
                          LR, LC, RN_C, NORM_C, F32, RN_R, NORM_R, False, False)
    return m_c


@gluon.jit
def _rowcol_kernel(X, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, AMAX_BITS, AMAX_IN_R, AMAX_IN_C, TS_OUT,
                   SIGNS_R, SIGNS_C, R, C, seed, offset_r, offset_c,
                   EMIN: gl.constexpr, MBITS: gl.constexpr, FIXED: gl.constexpr, TWOS: gl.constexpr,
                   BITS: gl.constexpr, GMAX: gl.constexpr, EMAX: gl.constexpr, SCALE: gl.constexpr,
                   RULE: gl.constexpr, B: gl.constexpr, S_EMIN: gl.constexpr, S_MBITS: gl.constexpr,
                   S_GMAX: gl.constexpr, S_MIN: gl.constexpr, NUM: gl.constexpr, NANB: gl.constexpr,
                   FUSE_AMAX: gl.constexpr, XHAT_R_ON: gl.constexpr, XHAT_C_ON: gl.constexpr,
                   MODE_R: gl.constexpr, MODE_C: gl.constexpr,
                   SEED_PTR: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, NW: gl.constexpr,
                   ITERS: gl.constexpr, ONE_LANE: gl.constexpr, RN_C: gl.constexpr = 0,
                   NORM_C: gl.constexpr = 1.0, F32: gl.constexpr = False, RN_R: gl.constexpr = 0,
                   NORM_R: gl.constexpr = 1.0, LOOP: gl.constexpr = False, STAGES: gl.constexpr = 0,
                   STRIDED: gl.constexpr = False, COL_F32: gl.constexpr = False):
    """See the module doc. Program (pid_r, pid_c) owns columns pid_c * BK .. of ITERS row tiles
    from pid_r * ITERS * BM on (_tile each), unrolled, loading tile it + 1 before it quantizes
    tile it (as strip.py's ITERS), or with LOOP in a loop that is not unrolled, each tile's
    words loaded as it starts or, with STAGES, STAGES - 1 tiles ahead through shared memory
    (Config.loop and Config.stages say why); a tile is H row pairs of W words, with
    blocks of WB words (row copy) or WB row pairs (column copy). FUSE_AMAX: formats without a
    tensor scale record the amax (bits, an atomic max a program) at AMAX_BITS[0]: both copies'
    without an RHT, else the row copy's, and the column copy's at AMAX_BITS[1]. XHAT_R_ON /
    XHAT_C_ON: that copy is written decoded (unscaled x_hat, value x block scale, exact in
    the 16-bit type of XHAT_R / XHAT_C, in x's orientation: two a word) instead of as codes
    and scale bytes. MODE_R / MODE_C, each copy's rounding: 0 round-to-nearest-even, 4 "sr16"
    (a 16-element group a Philox counter, two a block of 32; seed, or the int64 it points to
    (SEED_PTR); the column copy's stream at offset_c, as quantize.launch_rowcol's).
    ONE_LANE: Config.one_lane's layouts, where one_lane_fits. RN_C: 16 rotates the column copy
    by an RHT of 16 (SIGNS_C its signs, NORM_C the f64 1 / 4) before it is quantized: one
    block of 16, in one thread (ONE_LANE). RN_R: B rotates the row copy by an RHT of its block
    (SIGNS_R, NORM_R; MXFP4's Fprop operands), one block in one thread likewise.
    F32: x is f32 (a LayerNorm's output under autocast), a word two f32 in 64 bits.
    COL_F32 (a bf16 x, RN_C 16): the column RHT in f32 (_rht16_col_f32) where it provably gives
    the f64 butterflies' bits; if a block of the program's is not proven, its column copy is
    quantized again with f64 (_col_copies_f64) once its tiles are done."""
    gl.static_assert(RN_C == 0 or (RN_C == 16 and B == 16 and ONE_LANE), "a column RHT is one block in one lane")
    gl.static_assert(not COL_F32 or (RN_C == 16 and not F32), "COL_F32 is a bf16 input's column RHT of 16")
    gl.static_assert(RN_R == 0 or (RN_R == B and ONE_LANE), "a row RHT is one block in one lane")
    SPLIT_AMAX: gl.constexpr = RN_R > 0 or RN_C > 0  # the copies' amaxes differ
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    WB: gl.constexpr = B // 2
    LR: gl.constexpr = _row_layout(W, WB, NW, ONE_LANE)
    LC: gl.constexpr = _col_layout(H, W, WB, NW, ONE_LANE)
    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    if SEED_PTR:
        seed = gl.load(seed)
    s_r, p_r = _tensor_scales(gl.load(AMAX_IN_R), False, RULE, NUM)
    s_c, p_c = _tensor_scales(gl.load(AMAX_IN_C), False, RULE, NUM)
    # row copy indices (row pairs from the tile's first), and the column copy's
    i = gl.arange(0, H, layout=gl.SliceLayout(1, gl.SliceLayout(2, LR)))[:, None, None]
    g = gl.arange(0, W // WB, layout=gl.SliceLayout(0, gl.SliceLayout(2, LR)))[None, :, None]
    k = gl.arange(0, WB, layout=gl.SliceLayout(0, gl.SliceLayout(1, LR)))[None, None, :]
    w = pid_c * W + g * WB + k
    i2 = gl.arange(0, H, layout=gl.SliceLayout(1, gl.SliceLayout(2, LR)))[:, None]
    g2 = pid_c * (W // WB) + gl.arange(0, W // WB, layout=gl.SliceLayout(0, gl.SliceLayout(2, LR)))[None, :]
    p = gl.arange(0, WB, layout=gl.SliceLayout(0, gl.SliceLayout(2, LC)))[None, :, None]
    ic = gl.arange(0, H // WB, layout=gl.SliceLayout(1, gl.SliceLayout(2, LC)))[:, None, None] * WB + p
    wc = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, LC)))[None, None, :]
    j = gl.arange(0, H // WB, layout=gl.SliceLayout(1, gl.SliceLayout(1, LC)))[:, None]
    wj = pid_c * W + gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, LC)))[None, :]
    XW = X.to(gl.pointer_type(gl.int64 if F32 else gl.int32), bitcast=True)
    t0 = pid_r * ITERS
    tile_max = 0
    tile_max_c = 0  # the column copy's, where an RHT makes it differ
    if RN_R > 0:  # word k of a row block holds its elements 2k and 2k + 1: their signs
        sign_lo = _rht_signs(SIGNS_R + 2 * k, NORM_R, _prescaled(F32, NORM_R))
        sign_hi = _rht_signs(SIGNS_R + 2 * k + 1, NORM_R, _prescaled(F32, NORM_R))
    else:
        sign_lo = 0.0
        sign_hi = 0.0
    # the column blocks COL_F32's RHT left unproven, per thread over its tiles
    unproven = gl.zeros([H // WB, W], gl.int32, layout=gl.SliceLayout(1, LC))
    if LOOP:  # a loop, not unrolled: the prologue shared by its tiles (row tiles first + j step)
        first, step, count = _row_tiles(pid_r, R, BM, ITERS, STRIDED)
        buf_e, buf_o = _words_ring(XW, first, step, count, i, w, C, H, W, WB, STAGES)
        for it in range(count):
            r0 = (first + it * step) * H
            e, o = _tile_words(buf_e, buf_o, XW, first, step, count, it, i, w, C, H, LR, STAGES)
            tile_max, tile_max_c, u = _tile(e, o, r0, tile_max, tile_max_c, CODES_R, SCALES_R, XHAT_R, CODES_C,
                                            SCALES_C, XHAT_C, SIGNS_C, R, C, seed, offset_r, offset_c, s_r, p_r, s_c,
                                            p_c, sign_lo, sign_hi, i, k, w, i2, g2, p, ic, wc, j, wj, EMIN, MBITS,
                                            FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B, S_EMIN, S_MBITS, S_GMAX,
                                            S_MIN, NANB, FUSE_AMAX, XHAT_R_ON, XHAT_C_ON, MODE_R, MODE_C, BM, BK, LR,
                                            LC, RN_C, NORM_C, F32, RN_R, NORM_R, COL_F32)
            unproven = unproven | u
        if STAGES > 0:  # the copies past the last tile (masked off, zero-filling) done before the program ends
            async_copy.wait_group(0)
    else:
        e_next = gl.load(XW + (2 * (t0 * H + i)) * (C // 2) + w)  # rows 2i
        o_next = gl.load(XW + (2 * (t0 * H + i) + 1) * (C // 2) + w)  # rows 2i + 1
        for it in gl.static_range(ITERS):
            e = e_next
            o = o_next
            r0 = (t0 + it) * H  # the tile's first row pair
            if it + 1 < ITERS:  # the next tile's words, in flight while this one is quantized
                e_next = gl.load(XW + (2 * (r0 + H + i)) * (C // 2) + w)
                o_next = gl.load(XW + (2 * (r0 + H + i) + 1) * (C // 2) + w)
            tile_max, tile_max_c, u = _tile(e, o, r0, tile_max, tile_max_c, CODES_R, SCALES_R, XHAT_R, CODES_C,
                                            SCALES_C, XHAT_C, SIGNS_C, R, C, seed, offset_r, offset_c, s_r, p_r, s_c,
                                            p_c, sign_lo, sign_hi, i, k, w, i2, g2, p, ic, wc, j, wj, EMIN, MBITS,
                                            FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B, S_EMIN, S_MBITS, S_GMAX,
                                            S_MIN, NANB, FUSE_AMAX, XHAT_R_ON, XHAT_C_ON, MODE_R, MODE_C, BM, BK, LR,
                                            LC, RN_C, NORM_C, F32, RN_R, NORM_R, COL_F32)
            unproven = unproven | u
        first, step, count = t0, 1, ITERS
    if COL_F32:  # a block f32 did not prove (rare in data): the program's column copy again, in f64
        if gl.max(gl.max(unproven, axis=1), axis=0) != 0:
            tile_max_c = _col_copies_f64(XW, tile_max, tile_max_c, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C,
                                         XHAT_C, SIGNS_C, R, C, seed, offset_r, offset_c, s_r, p_r, s_c, p_c, sign_lo,
                                         sign_hi, i, k, w, i2, g2, p, ic, wc, j, wj, first, step, count, EMIN, MBITS,
                                         FIXED, TWOS, BITS, GMAX, EMAX, SCALE, RULE, B, S_EMIN, S_MBITS, S_GMAX,
                                         S_MIN, NANB, FUSE_AMAX, XHAT_R_ON, XHAT_C_ON, MODE_R, MODE_C, BM, BK, LR,
                                         LC, RN_C, NORM_C, F32, RN_R, NORM_R)
    if FUSE_AMAX:
        gl.atomic_max(AMAX_BITS, tile_max)
        if SPLIT_AMAX:
            gl.atomic_max(AMAX_BITS + 1, tile_max_c)
    if (pid_r == 0) & (pid_c == 0):
        gl.store(TS_OUT, s_r)
        gl.store(TS_OUT + 1, s_c)


# Whether a bf16 input's column RHT of 16 runs in f32 by default (_rowcol_kernel's COL_F32).
COL_RHT_F32 = False


def col_rht_f32(rn_c: int, f32: bool, on: bool | None = None) -> bool:
    """_rowcol_kernel's COL_F32: a bf16 input's column RHT of 16 in f32 where that is
    provably exact, the program's column copy redone in f64 otherwise; `on` (None: COL_RHT_F32)
    False gives f64 for every block, the benchmarks' comparison."""
    return rn_c == 16 and not f32 and (COL_RHT_F32 if on is None else on)


def applies(x: torch.Tensor, spec, rounding_r: str, rounding_c: str, rht: tuple, codes_on: tuple, xhat_on: tuple,
            unscaled: bool, xhat_dtype, config: tuple = CONFIG) -> bool:
    """Whether _rowcol_kernel serves this row+col call (the module doc's scope): each copy
    packed or decoded (unscaled, 16-bit), each RTNE or "sr16" (blocks of 32: one lane a
    block); rht: the (row, column) RHT sizes (0: none), a column RHT of 16 only with blocks
    of 16 in one lane (the column copy packed, or decoded: TE's dY call), a row RHT of the
    block size only in one lane (MXFP4's calls), both on blocks of 16 (UFP4's calls)."""
    config = checked(config)
    R, C = x.shape
    rn_r, rn_c = rht
    lane = one_lane_fits(spec.block, config)
    one_each = all(c != h for c, h in zip(codes_on, xhat_on))
    decoded_ok = not any(xhat_on) or (unscaled and xhat_dtype in (torch.bfloat16, torch.float16))
    rounding_ok = all(r == "rtne" or r == "sr16" and (spec.block == 16 or lane) for r in (rounding_r, rounding_c))
    rht_ok = ((rn_r == 0 and (rn_c == 0 or rn_c == spec.block == 16 and lane))
              or (rn_c == 0 and rn_r == spec.block and lane)
              or (rn_r == rn_c == spec.block == 16 and lane))
    return (x.dtype in INPUTS and spec.packed and spec.block in (16, 32) and not spec.tile_2d
            and not spec.per_tensor and rounding_ok and rht_ok and one_each and decoded_ok
            and R % rows_per_program(config) == 0 and C % config.bk == 0)


def checked(config: tuple) -> Config:
    """A quantizer Config from a tuple (a benchmark's CONFIG_OVERRIDE tile), refused with a
    ValueError where its fields cannot work together: stages and per_sm drive the looped form
    only (without `loop` a per_sm grid would leave rows unquantized), iters >= 1, 0-4 stages."""
    c = Config(*config)
    if (c.stages or c.per_sm) and not c.loop:
        raise ValueError(f"stages and per_sm are for looped tiles (Config.loop), got {c}")
    if c.iters < 1 or c.per_sm < 0 or not 0 <= c.stages <= 4:
        raise ValueError(f"a Config needs iters >= 1, per_sm >= 0 and 0-4 stages, got {c}")
    return c


def rows_per_program(config: Config) -> int:
    """The rows R must be a multiple of: a program's `iters` row tiles, or one (per_sm)."""
    return config.bm if config.per_sm else config.bm * config.iters


# The input dtypes: two bf16 a 32-bit word, or two f32 a 64-bit one (the F32 constexpr).
INPUTS = (torch.bfloat16, torch.float32)


def one_lane_fits(block: int, config: Config) -> bool:
    """Config.one_lane's layouts serve this block size and tile: blocks of 16 or 32 (block / 2
    words, block / 2 row pairs a thread), the tile's row blocks and column blocks each
    dividing a warp, and no layout wider than the tile (no lane would hold a copy of
    another's elements)."""
    if block not in (16, 32) or not config.one_lane:
        return False
    rows, words = config.bm // 2, config.bk // 2
    row_blocks, col_blocks = words // (block // 2), rows // (block // 2)
    return (row_blocks <= 32 and 32 % row_blocks == 0 and col_blocks <= 32 and 32 % col_blocks == 0
            and 32 // row_blocks * config.warps <= rows and 32 // col_blocks * config.warps <= words)


def constexprs(fmt_consts: dict, config: tuple = CONFIG) -> dict:
    """_rowcol_kernel's constexprs from quantize._constexprs' (which it shares but for
    the tile, the layouts' warps and what it does not take)."""
    config = checked(config)
    drop = ("TILE2D", "MODE")  # the modes are per copy: MODE_R, MODE_C
    launch = dict(num_warps=config.warps, **({"maxnreg": config.maxnreg} if config.maxnreg else {}))
    return dict({k: v for k, v in fmt_consts.items() if k not in drop}, BM=config.bm, BK=config.bk,
                NW=config.warps, ITERS=config.iters, ONE_LANE=one_lane_fits(fmt_consts["B"], config),
                LOOP=config.loop, STAGES=config.stages, STRIDED=config.per_sm > 0, **launch)


def grid(R: int, C: int, config: tuple = CONFIG, sms: int = 132) -> tuple:
    """The launch grid of an (R, C) call at `config` on `sms` multiprocessors: a program per
    `iters` row tiles and column tile, or with per_sm, per_sm x sms programs (at least one a
    column tile, at most a row tile each) sharing the column tiles."""
    config = checked(config)
    cols = C // config.bk
    if config.per_sm:
        return (max(1, min(R // config.bm, config.per_sm * sms // cols)), cols)
    return (R // (config.bm * config.iters), cols)


def compile_sm90(fmt_consts: dict, config: tuple = CONFIG, fuse: bool = False, xhat_r: bool = False,
                 maxnreg: int | None = None, xhat_c: bool = False, mode: int = 0, seed_ptr: bool = False,
                 rn_c: int = 0, f32: bool = False, mode_c: int | None = None, rn_r: int = 0, col_f32: bool = False):
    """_rowcol_kernel compiled for sm_90a without a GPU (Triton's bundled ptxas): what the
    CPU tier checks (tests/unit/test_rowcol_gluon.py)."""
    consts = dict(constexprs(fmt_consts, config), FUSE_AMAX=fuse, XHAT_R_ON=xhat_r, XHAT_C_ON=xhat_c, MODE_R=mode,
                  MODE_C=mode if mode_c is None else mode_c, SEED_PTR=seed_ptr, RN_C=rn_c,
                  NORM_C=1.0 / math.sqrt(rn_c) if rn_c else 1.0, F32=f32, RN_R=rn_r,
                  NORM_R=1.0 / math.sqrt(rn_r) if rn_r else 1.0, COL_F32=col_f32)
    if maxnreg and "maxnreg" not in consts:
        consts["maxnreg"] = maxnreg
    return compile_launch_sm90(_rowcol_kernel, consts, f32)


def compile_launch_sm90(fn, consts: dict, f32: bool = False):
    """A Gluon kernel (this module's or amax_gluon's) compiled for sm_90a without a GPU from a
    launch's constexprs (num_warps and maxnreg among them, as launcher.run takes them; f32: an
    f32 input): the pointers and sizes aligned as the launcher's specialisation gives them."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    consts = dict(consts)
    warps = consts.pop("num_warps")
    maxnreg = consts.pop("maxnreg", None)
    types = dict(X="*fp32" if f32 else "*bf16", XHAT_R="*bf16", XHAT_C="*bf16", AMAX_BITS="*i32", AMAX_IN_R="*fp32",
                 AMAX_IN_C="*fp32", TS_OUT="*fp32", SIGNS_R="*fp32", SIGNS_C="*fp32", R="i32", C="i32",
                 seed="*i64" if consts.get("SEED_PTR") else "i64", offset_r="i64", offset_c="i64")
    sig = {a: types.get(a, "*u8") for a in fn.arg_names if a not in consts}
    sig.update({k: "constexpr" for k in consts})
    aligned = ("X", "CODES_R", "SCALES_R", "XHAT_R", "CODES_C", "SCALES_C", "XHAT_C", "R", "C")
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned if a in fn.arg_names}
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    options = dict(num_warps=warps, **({"maxnreg": maxnreg} if maxnreg else {}))
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
