"""Row + column quantizer with the transpose in explicit layouts (Gluon, Hopper): both
packed copies of a row-major bf16 (R, C) x from one read, the column copy's bytes stored
transposed (the Wgrad layout) in whole 32-byte runs.

strip.py avoids a transpose because Triton's tl.trans moves a tile at 13-25% of copy
bandwidth even with no arithmetic; with the transpose written as a Gluon layout conversion
the same bytes move at 65-68% (kernels-h200.md, session 16, `io_floors`). This kernel does
the quantizer's arithmetic on that tiling:

- a program loads a [BM, BK] tile as 32-bit words (two bf16 of a row), rows 2i and 2i + 1
  apart, in a layout where a thread holds 4 words of one row: a row block (B elements,
  B / 2 words) spans B / 8 lanes, so its amax is an in-thread max and one or two shuffles;
  the row copy's code bytes (a word's two elements make one) go out 4 a thread;
- gl.convert_layout moves the words (through shared memory) to a layout where a thread
  holds 4 row pairs of one word column: a column block (B rows, B / 2 row pairs) again
  spans B / 8 lanes, and rows 2i and 2i + 1 of a column, which share a byte of the
  column copy, sit in one thread;
- each block's scale is computed once per lane that holds a part of it, in the layout
  that owns the block.

The arithmetic is quantize.py's (_tensor_scales, _block_scales, _quant_elems, written to
serve both frontends), so codes, scale bytes, tensor scales and x_hat equal
reference.quantize bit for bit (tests/gpu). Scope, checked by `applies`: 4-bit grids with 1-D
blocks of 16 or 32, no RHT, bf16 input, R a multiple of BM x ITERS and C of BK; each copy
packed or decoded (unscaled x_hat in x's orientation: the column copy's goes back to the row
layout through a second conversion); round-to-nearest-even, or "sr16" on both copies with
blocks of 16 (a block is a Philox group: philox.sr_uniform_group's stream, the column copy's
at offset + numel); tensor amaxes given or measured by strip.py's amax pass (or recorded here,
for a format without a tensor scale). quantize.launch_rowcol routes its RTNE calls here on an
sm_90 GPU (route "gluon"), and its "sr16" calls only where CONFIG_OVERRIDE pins "gluon": the
dY call (both copies decoded, "sr16") ran 1.10-1.14x the strip kernel's time (session 17;
each Philox group is drawn on the two lanes that share it). Every other call goes to strip.py.

Gluon has no interpreter: the CPU tier compiles this kernel for sm_90a offline
(tests/unit/test_rowcol_gluon.py), tests/gpu checks its bytes.
"""

from __future__ import annotations

import torch
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from fourcast.kernels.quantize import _block_scales, _quant_elems, _tensor_scales

# (BM, BK, warps, row tiles a program[, maxnreg]). The io floor's fastest tiles were 64 x 128 on 4 warps
# and 128 x 128 on 4 (67-68% of copy, session 16); with the arithmetic, 64 x 128 on 8 warps,
# two row tiles a program (120 registers), was among the fastest in both shapes (session 17).
CONFIG = (64, 128, 8, 2)


@gluon.jit
def _halves(v):
    """The two bf16 of 32-bit words as f32 (exact: a bf16 is the top half of its f32),
    the one at the lower address first."""
    return (v << 16).to(gl.float32, bitcast=True), (v & -65536).to(gl.float32, bitcast=True)


@gluon.jit
def _abs_bits(v):
    """max(|lo|, |hi|) of a word's two elements as f32 bits (NaN above +inf's bits)."""
    return gl.maximum((v << 16) & 0x7FFFFFFF, v & 0x7FFF0000)


@gluon.jit
def _quant(y, sb_mult, sb_sv, sb_bad, ts, u, AXIS: gl.constexpr, EMIN: gl.constexpr, MBITS: gl.constexpr,
           FIXED: gl.constexpr, TWOS: gl.constexpr, BITS: gl.constexpr, GMAX: gl.constexpr, MODE: gl.constexpr):
    """(4-bit codes, unscaled x_hat) of y given its blocks' multipliers, decoded scales and
    non-finite flags (reduced along AXIS, broadcast back here): round-to-nearest-even (MODE
    0) or "sr16" (MODE 4, u: each element's byte)."""
    return _quant_elems(y, gl.expand_dims(sb_mult, AXIS), gl.expand_dims(sb_sv, AXIS), gl.expand_dims(sb_bad, AXIS),
                        ts, u, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE, True)


@gluon.jit
def _word(lo, hi, DTYPE: gl.constexpr):
    """Two f32 values (exact in DTYPE, a 16-bit float) as one 32-bit word of DTYPE, lo at
    the lower address."""
    lo16 = lo.to(DTYPE).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    return lo16 | (hi.to(DTYPE).to(gl.int16, bitcast=True).to(gl.int32) << 16)


@gluon.jit
def _sr16_bytes(seed, counter, n, AXIS: gl.constexpr):
    """"sr16" bytes of a 16-element group's members n (philox.sr_uniform_group: one Philox
    counter a group, member n takes byte n % 4 of word n // 4): counter holds the groups
    (reduced along AXIS), n the members (broadcast along the others)."""
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
                GMAX: gl.constexpr, MODE: gl.constexpr):
    """_quant of two elements that share a code byte (a in its low nibble): the byte and
    both x_hat. With "sr16" (MODE 4) they are members n and n + 1 of their block's group."""
    if MODE == 4:
        u_a = _sr16_bytes(seed, counter, n, AXIS)
        u_b = _sr16_bytes(seed, counter, n + 1, AXIS)
    else:
        u_a = a
        u_b = b
    c_a, x_a = _quant(a, sb_mult, sb_sv, sb_bad, ts, u_a, AXIS, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE)
    c_b, x_b = _quant(b, sb_mult, sb_sv, sb_bad, ts, u_b, AXIS, EMIN, MBITS, FIXED, TWOS, BITS, GMAX, MODE)
    return (c_a | (c_b << 4)).to(gl.uint8), x_a, x_b


@gluon.jit
def _col_half(ye, yo, s_c, p_c, seed, counter, p, EMIN: gl.constexpr, MBITS: gl.constexpr, FIXED: gl.constexpr,
              TWOS: gl.constexpr, BITS: gl.constexpr, GMAX: gl.constexpr, EMAX: gl.constexpr, SCALE: gl.constexpr,
              RULE: gl.constexpr, S_EMIN: gl.constexpr, S_MBITS: gl.constexpr, S_GMAX: gl.constexpr,
              S_MIN: gl.constexpr, NANB: gl.constexpr, MODE: gl.constexpr):
    """One element column of the column copy ([column block, row pair in block, word column]:
    ye its rows 2i, yo its rows 2i + 1): (code bytes of the row pairs, scale bytes, x_hat of
    ye, x_hat of yo). Row 2p (+1) of a block is member 2p (+1) of its "sr16" group."""
    bits = gl.maximum(ye.to(gl.int32, bitcast=True) & 0x7FFFFFFF, yo.to(gl.int32, bitcast=True) & 0x7FFFFFFF)
    sb, mult, sv, bad = _block_scales(gl.max(bits, axis=1), s_c, p_c, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS,
                                      S_GMAX, S_MIN, NANB)
    codes, x_e, x_o = _quant_pair(ye, yo, mult, sv, bad, s_c, seed, counter, 2 * p, 1, EMIN, MBITS, FIXED, TWOS,
                                  BITS, GMAX, MODE)
    return codes, sb.to(gl.uint8), x_e, x_o


@gluon.jit
def _rowcol_kernel(X, CODES_R, SCALES_R, XHAT_R, CODES_C, SCALES_C, XHAT_C, AMAX_BITS, AMAX_IN_R, AMAX_IN_C, TS_OUT,
                   R, C, seed, offset_r, offset_c,
                   EMIN: gl.constexpr, MBITS: gl.constexpr, FIXED: gl.constexpr, TWOS: gl.constexpr,
                   BITS: gl.constexpr, GMAX: gl.constexpr, EMAX: gl.constexpr, SCALE: gl.constexpr,
                   RULE: gl.constexpr, B: gl.constexpr, S_EMIN: gl.constexpr, S_MBITS: gl.constexpr,
                   S_GMAX: gl.constexpr, S_MIN: gl.constexpr, NUM: gl.constexpr, NANB: gl.constexpr,
                   FUSE_AMAX: gl.constexpr, XHAT_R_ON: gl.constexpr, XHAT_C_ON: gl.constexpr, MODE: gl.constexpr,
                   SEED_PTR: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, NW: gl.constexpr,
                   ITERS: gl.constexpr):
    """See the module doc. Program (pid_r, pid_c) owns columns pid_c * BK .. of ITERS row tiles
    from pid_r * ITERS * BM on, loading tile it + 1 before it quantizes tile it (as strip.py's
    ITERS); a tile is H row pairs of W words, with blocks of WB words (row copy) or WB row
    pairs (column copy). FUSE_AMAX: formats without a tensor scale record the amax (bits, an
    atomic max a program) at AMAX_BITS[0]: both copies' (no RHT: the same). XHAT_R_ON /
    XHAT_C_ON: that copy is written decoded (unscaled x_hat, value x block scale, exact in
    the 16-bit type of XHAT_R / XHAT_C, in x's orientation: two a word) instead of as codes
    and scale bytes. MODE: 0 round-to-nearest-even, 4 "sr16" (blocks of 16: a block is a
    Philox group; seed, or the int64 it points to (SEED_PTR); the column copy's stream at
    offset_c, as quantize.launch_rowcol's)."""
    H: gl.constexpr = BM // 2
    W: gl.constexpr = BK // 2
    WB: gl.constexpr = B // 2
    TB: gl.constexpr = WB // 4  # lanes a block spans: 4 words (row) or 4 row pairs (column) a thread
    # rows: [row pair, row block, word in block], 4 words of one row a thread (16-byte loads)
    LR: gl.constexpr = gl.BlockedLayout([1, 1, 4], [2, 16 // TB, TB], [NW, 1, 1], [2, 1, 0])
    # columns: [column block, row pair in block, word column], 4 row pairs of a word column a thread
    LC: gl.constexpr = gl.BlockedLayout([1, 4, 1], [8 // TB, TB, 4], [1, 1, NW], [1, 0, 2])
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
    XW = X.to(gl.pointer_type(gl.int32), bitcast=True)
    t0 = pid_r * ITERS
    e_next = gl.load(XW + (2 * (t0 * H + i)) * (C // 2) + w)  # rows 2i
    o_next = gl.load(XW + (2 * (t0 * H + i) + 1) * (C // 2) + w)  # rows 2i + 1
    tile_max = 0
    for it in gl.static_range(ITERS):
        e = e_next
        o = o_next
        r0 = (t0 + it) * H  # the tile's first row pair
        if it + 1 < ITERS:  # the next tile's words, in flight while this one is quantized
            e_next = gl.load(XW + (2 * (r0 + H + i)) * (C // 2) + w)
            o_next = gl.load(XW + (2 * (r0 + H + i) + 1) * (C // 2) + w)
        # ---- the row copy
        for half in gl.static_range(2):
            v = e if half == 0 else o
            bmax = gl.max(_abs_bits(v), axis=2)
            if FUSE_AMAX:
                tile_max = gl.maximum(tile_max, gl.max(gl.max(bmax, axis=1), axis=0))
            sb, mult, sv, bad = _block_scales(bmax, s_r, p_r, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX,
                                              S_MIN, NANB)
            lo, hi = _halves(v)
            # word k of a block holds members 2k and 2k + 1 of its "sr16" group
            counter = (2 * (r0 + i2) + half).to(gl.int64) * (C // 16) + g2 + offset_r
            codes, x_lo, x_hi = _quant_pair(lo, hi, mult, sv, bad, s_r, seed, counter, 2 * k, 2, EMIN, MBITS, FIXED,
                                            TWOS, BITS, GMAX, MODE)
            if XHAT_R_ON:
                XW_OUT = XHAT_R.to(gl.pointer_type(gl.int32), bitcast=True)
                gl.store(XW_OUT + (2 * (r0 + i) + half) * (C // 2) + w, _word(x_lo, x_hi, XHAT_R.dtype.element_ty))
            else:
                gl.store(CODES_R + (2 * (r0 + i) + half) * (C // 2) + w, codes)
                gl.store(SCALES_R + (2 * (r0 + i2) + half) * (C // B) + g2, sb.to(gl.uint8))
        # ---- the column copy: words to 4 row pairs of a word column a thread
        ec = gl.convert_layout(gl.reshape(gl.reshape(e, [H, W]), [H // WB, WB, W]), LC)
        oc = gl.convert_layout(gl.reshape(gl.reshape(o, [H, W]), [H // WB, WB, W]), LC)
        e_lo, e_hi = _halves(ec)
        o_lo, o_hi = _halves(oc)
        # element columns 2w (the words' low halves) and 2w + 1; a column's "sr16" group is its block
        counter = (2 * wj).to(gl.int64) * (R // 16) + r0 // 8 + j + offset_c
        b_lo, s_lo, xe_lo, xo_lo = _col_half(e_lo, o_lo, s_c, p_c, seed, counter, p, EMIN, MBITS, FIXED, TWOS, BITS,
                                             GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX, S_MIN, NANB, MODE)
        b_hi, s_hi, xe_hi, xo_hi = _col_half(e_hi, o_hi, s_c, p_c, seed, counter + R // 16, p, EMIN, MBITS, FIXED,
                                             TWOS, BITS, GMAX, EMAX, SCALE, RULE, S_EMIN, S_MBITS, S_GMAX, S_MIN,
                                             NANB, MODE)
        if XHAT_C_ON:  # back to the row layout, to store rows of x's orientation
            XC_OUT = XHAT_C.to(gl.pointer_type(gl.int32), bitcast=True)
            we = _word(xe_lo, xe_hi, XHAT_C.dtype.element_ty)
            wo = _word(xo_lo, xo_hi, XHAT_C.dtype.element_ty)
            we = gl.convert_layout(gl.reshape(gl.reshape(we, [H, W]), [H, W // WB, WB]), LR)
            wo = gl.convert_layout(gl.reshape(gl.reshape(wo, [H, W]), [H, W // WB, WB]), LR)
            gl.store(XC_OUT + (2 * (r0 + i)) * (C // 2) + w, we)
            gl.store(XC_OUT + (2 * (r0 + i) + 1) * (C // 2) + w, wo)
        else:
            gl.store(CODES_C + (2 * wc) * (R // 2) + r0 + ic, b_lo)
            gl.store(CODES_C + (2 * wc + 1) * (R // 2) + r0 + ic, b_hi)
            gl.store(SCALES_C + (2 * wj) * (R // B) + r0 // WB + j, s_lo)
            gl.store(SCALES_C + (2 * wj + 1) * (R // B) + r0 // WB + j, s_hi)
    if FUSE_AMAX:
        gl.atomic_max(AMAX_BITS, tile_max)
    if (pid_r == 0) & (pid_c == 0):
        gl.store(TS_OUT, s_r)
        gl.store(TS_OUT + 1, s_c)


def applies(x: torch.Tensor, spec, rounding_r: str, rounding_c: str, rht: bool, codes_on: tuple, xhat_on: tuple,
            unscaled: bool, xhat_dtype, config: tuple = CONFIG) -> bool:
    """Whether _rowcol_kernel serves this row+col call (the module doc's scope): each copy
    packed or decoded (unscaled, 16-bit), RTNE, or "sr16" on both with blocks of 16."""
    bm, bk, _, iters = config[:4]
    R, C = x.shape
    one_each = all(c != h for c, h in zip(codes_on, xhat_on))
    decoded_ok = not any(xhat_on) or (unscaled and xhat_dtype in (torch.bfloat16, torch.float16))
    rounding_ok = rounding_r == rounding_c and (rounding_r == "rtne" or rounding_r == "sr16" and spec.block == 16)
    return (x.dtype == torch.bfloat16 and spec.packed and spec.block in (16, 32) and not spec.tile_2d
            and not spec.per_tensor and rounding_ok and not rht and one_each and decoded_ok
            and R % (bm * iters) == 0 and C % bk == 0)


def constexprs(fmt_consts: dict, config: tuple = CONFIG) -> dict:
    """_rowcol_kernel's constexprs from quantize._constexprs' (which it shares but for
    the tile, the layouts' warps and what it does not take)."""
    bm, bk, warps, iters = config[:4]
    drop = ("TILE2D", "MODE")
    launch = dict(num_warps=warps, **({"maxnreg": config[4]} if len(config) > 4 and config[4] else {}))
    return dict({k: v for k, v in fmt_consts.items() if k not in drop}, BM=bm, BK=bk, NW=warps, ITERS=iters,
                **launch)


def grid(R: int, C: int, config: tuple = CONFIG) -> tuple:
    return (R // (config[0] * config[3]), C // config[1])


def compile_sm90(fmt_consts: dict, config: tuple = CONFIG, fuse: bool = False, xhat_r: bool = False,
                 maxnreg: int | None = None, xhat_c: bool = False, mode: int = 0, seed_ptr: bool = False):
    """_rowcol_kernel compiled for sm_90a without a GPU (Triton's bundled ptxas): what the
    CPU tier checks (tests/unit/test_rowcol_gluon.py)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    consts = dict(constexprs(fmt_consts, config), FUSE_AMAX=fuse, XHAT_R_ON=xhat_r, XHAT_C_ON=xhat_c, MODE=mode,
                  SEED_PTR=seed_ptr)
    warps = consts.pop("num_warps")
    maxnreg = consts.pop("maxnreg", maxnreg)
    fn = _rowcol_kernel
    types = dict(X="*bf16", XHAT_R="*bf16", XHAT_C="*bf16", AMAX_BITS="*i32", AMAX_IN_R="*fp32", AMAX_IN_C="*fp32",
                 TS_OUT="*fp32", R="i32", C="i32", seed="*i64" if seed_ptr else "i64", offset_r="i64", offset_c="i64")
    sig = {a: types.get(a, "*u8") for a in fn.arg_names if a not in consts}
    sig.update({k: "constexpr" for k in consts})
    aligned = ("X", "CODES_R", "SCALES_R", "XHAT_R", "CODES_C", "SCALES_C", "XHAT_C", "R", "C")
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    options = dict(num_warps=warps, **({"maxnreg": maxnreg} if maxnreg else {}))
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
