"""The packed GEMM as a pipelined Gluon kernel for Hopper: the decode runs under the wgmma.

gemm.py's split kernel decodes a K-step in registers and hands tl.dot a register operand;
Triton issues that wgmma and waits for it, so one CTA's decode and its MMAs take turns
(two CTAs per SM overlap them at best: 40-51% of cuBLAS BF16, kernels-h200.md session 3).
Gluon (Triton's explicit-layout dialect) lets the kernel order it itself:

    for each K-step i:
        decode step i's code words (loaded a step ahead) into shared-memory ring slot i % 3
        fence the async proxy; CTA barrier
        issue step i's two wgmmas (low nibbles, high nibbles) asynchronously
        wait until only those two are in flight (step i - 1's are done)

so the warps decode step i + 1 while the tensor cores run step i. Three slots: a warpgroup
may store into slot i % 3 once every warpgroup has finished step i - 3, which the barrier
of step i - 1 guarantees (each warpgroup waits for its own wgmmas only).

Measured on the H200: correct, and slower than the split kernel at every tile tried (33-44%
of cuBLAS BF16 against 45-56%, kernels-h200.md session 10). Session 11 timed its parts
(PARTS) and profiled it: the decode side alone takes two thirds of the time, stalled on its
code-byte loads (each 8-byte load unpacked into bytes right after it is issued), and the
wgmmas do not run under it (the kernel takes the sum of its parts). With code words
(session 12) 42-56%; a variant (gemm.KERNEL "wgmma").

_ws_kernel (`launch_ws`) is the warp-specialised form, and gemm's route on Hopper
(gemm.KERNEL "ws") for UE5M3 and UE8M0 scales (`launch_packed`; NVFP4/UFP4 take _rs_kernel,
below): two decode partitions (A's rows, B's rows) fill the ring and one MMA
warpgroup consumes it, slots passed through mbarriers. Its decoders load each group's code
bytes as two 32-bit words and hand them to the PTX routine as they are (loaded as bytes,
each was unpacked into its own register and packed back right after its load). Measured on
the H200 (kernels-h200.md, session 12): 49-61% of cuBLAS BF16 against the split kernel's
37-53%; alone, its decode side runs at 70-83% and its MMA side at 111-129%, and the kernel
takes more than the longer of the two: together they hold the L1/shared-memory array at 84%
of its peak (Nsight Compute), the decoders waiting on their global loads.

The decode is gemm.py's: the same PTX routines (`decode_asm`: four code bytes and their
scales -> the low- and high-nibble values as f16/bf16 pairs), the same split of K into
low and high nibbles, the same MMA type rule (`split_plan`) and epilogue
(C = acc * 2^EPI_EXP * alpha, alpha = (1 / ts_a) / ts_b, each step rounded in FP32), so
the result is the split kernel's up to the order of FP32 accumulation (tests/gpu).
It covers what the LUT/CVT decode covers: 4-bit sign-magnitude grids (E2M1, E1M2) with
block scales (E4M3, UE5M3, UE8M0; 1-D blocks of 16 or 32, or 16 x 16 tiles). The code
bytes of a thread are 8 consecutive bytes of one row, so they share one scale byte,
which is loaded and converted once (a [rows, groups] tensor broadcast over the 8).

_rs_kernel (`launch_rs`): the MMA warpgroups decode A into wgmma's register operand and
only B goes through shared memory. With both sides' code words loaded two steps ahead it is
gemm's route for NVFP4/UFP4 (f16 decode; 1.01-1.09x _ws_kernel in four calls, 57-63% of
cuBLAS BF16, session 14), `launch_packed`, launched persistent (one program a
multiprocessor: B's decoders start a tile while the MMA warps store the last one's C; 59-65%,
session 23); the comment above it says why.

Gluon kernels compile for a GPU only: no interpreter. gemm.py runs launch_packed (KERNEL
"ws", the default) or _wgmma_kernel ("wgmma") on an sm_90 GPU where they apply
(`gemm._wgmma_ok`), the split kernel otherwise; the CPU tiers compile both for sm_90a
offline and test the routing, tests/gpu the results.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)

from fourcast.errors import ShapeError
from fourcast.kernels.gemm import multiprocessors
from fourcast.kernels.quantize import SCALE_KIND

# Triton 3.6 names the CTA barrier thread_barrier; later releases barrier.
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier

BYTES_PER_THREAD = gl.constexpr(8)  # code bytes a thread decodes per row and step: one scale byte covers them


@gluon.jit
def _tile_ids(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
    """(pid_m, pid_n), GROUP_M row tiles at a time (as gemm._tile_ids)."""
    return _tile_of(gl.program_id(0), M, N, BM, BN, GROUP_M)


@gluon.jit
def _tile_of(pid, M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
    """(pid_m, pid_n) of linear tile pid, GROUP_M row tiles at a time."""
    num_m = (M + BM - 1) // BM
    num_n = (N + BN - 1) // BN
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = gl.minimum(num_m - first_m, GROUP_M)
    return first_m + (pid % group) % size_m, (pid % group) // size_m


@gluon.jit
def _scale_values(sb, SCALE: gl.constexpr, DOT_F16: gl.constexpr):
    """Scale bytes -> their values in the MMA's 16-bit type, from the bits (gemm._scale_values'
    non-generic branches): E4M3 -> f16 in hardware, UE5M3 -> f16 at 2^-1 (gemm.UE5M3_EXP);
    for bf16, UE8M0 2^(b - 127) is b << 7 (byte 0 the subnormal 2^-127), E4M3 and UE5M3
    line up with bf16 at 2^-120 and 2^-112."""
    b = sb.to(gl.int32)
    if DOT_F16 and SCALE == 3:
        bits = gl.where(b < 16, b << 6, gl.where(b == 255, 0x7E00, (b << 7) - 1024))
        return bits.to(gl.uint16).to(gl.float16, bitcast=True)
    elif DOT_F16:
        return sb.to(gl.float8e4nv, bitcast=True).to(gl.float16)
    elif SCALE == 1:
        bits = gl.where(b == 0, 0x40, gl.where(b == 255, 0x7FC0, b << 7))
        return bits.to(gl.uint16).to(gl.bfloat16, bitcast=True)
    elif SCALE == 2:
        bits = ((b & 0x7F) << 4) | ((b & 0x80) << 8)
        sv = bits.to(gl.uint16).to(gl.bfloat16, bitcast=True) * 2.0**120
        return gl.where((b & 0x7F) == 0x7F, float("nan"), sv)
    else:
        sv = (b << 4).to(gl.uint16).to(gl.bfloat16, bitcast=True) * 2.0**112
        return gl.where(b == 255, float("nan"), sv)


@gluon.jit
def _load_scales(SCALES, rows, groups, k0, K, B: gl.constexpr, TILE2D: gl.constexpr):
    """A step's scale bytes [R, G]: group g holds elements k0 + 16 g .. k0 + 16 g + 15, in
    block (k0 + 16 g) // blk of its row (of its 16-row band for 16 x 16 tiles)."""
    blk: gl.constexpr = 16 if TILE2D else B
    srow = rows // 16 if TILE2D else rows
    return gl.load(SCALES + srow * (K // blk) + (k0 + groups * (2 * BYTES_PER_THREAD)) // blk)


@gluon.jit
def _load_words(CODES, SCALES, rows, groups, k0, K, B: gl.constexpr, TILE2D: gl.constexpr, LW: gl.constexpr):
    """One K-step's code bytes at element k0 as two 32-bit words per group [R, G, 2] (byte
    4w + j of a group in bits 8j .. 8j + 7 of word w; G groups of 8 bytes), and its scale
    bytes [R, G], for in-bounds rows (the caller clamps them). The PTX routine takes four
    code bytes in one register, so nothing unpacks them: loaded as uint8, each byte went
    to its own register and back (PRMT pairs) right after its load (kernels-h200.md,
    session 11). rows [R, 1] and groups [1, G] in SliceLayout(2, LW): the scale pointers
    are built in 2-D, where each thread holds a byte once."""
    w = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, LW)))
    w3 = gl.expand_dims(gl.expand_dims(w, 0), 1)
    base = gl.expand_dims(rows * (K // 8) + k0 // 8 + groups * 2, 2)
    words = gl.load(CODES.to(gl.pointer_type(gl.int32), bitcast=True) + base + w3)
    return words, _load_scales(SCALES, rows, groups, k0, K, B, TILE2D)


@gluon.jit
def _decode_words(words, sbytes, lo_slot, hi_slot, SCALE: gl.constexpr, DOT_F16: gl.constexpr,
                  ASM: gl.constexpr, R: gl.constexpr, BKH: gl.constexpr, CHUNKED: gl.constexpr = False):
    """Decode a step's code words and store the low- and high-nibble values into their
    slots: the PTX routine takes one word and the scale pair, and gives its four 16-bit pairs
    out as 32-bit words (low nibbles' 0-1 and 2-3, high nibbles' 0-1 and 2-3), stored into the
    slots viewed as 32-bit words. The swizzle moves 16-byte units, so that view holds the
    same bytes at the same places as the 16-bit one. CHUNKED: in _rs_kernel's K order."""
    h = _scale_values(sbytes, SCALE, DOT_F16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    pair = gl.broadcast(gl.expand_dims(h | (h << 16), 2), words)[0]
    l01, l23, h01, h23 = gl.inline_asm_elementwise(ASM, "=r,=r,=r,=r,r,r,r", [words, pair, pair],
                                                   dtype=(gl.int32, gl.int32, gl.int32, gl.int32), is_pure=True,
                                                   pack=1)
    SW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=min(128, 2 * BKH), element_bitwidth=32, rank=2)
    if CHUNKED:
        lo = _chunk_order(l01, l23, R, BKH // 4)
        hi = _chunk_order(h01, h23, R, BKH // 4)
    else:
        lo = gl.reshape(gl.join(l01, l23), [R, BKH // 2])
        hi = gl.reshape(gl.join(h01, h23), [R, BKH // 2])
    _as_words(lo_slot, R, BKH // 2, SW).store(lo)
    _as_words(hi_slot, R, BKH // 2, SW).store(hi)


@gluon.jit
def _as_words_36(slot, R: gl.constexpr, W: gl.constexpr, LAYOUT: gl.constexpr):
    return slot._reinterpret(gl.int32, [R, W], LAYOUT)


@gluon.jit
def _as_words_39(slot, R: gl.constexpr, W: gl.constexpr, LAYOUT: gl.constexpr):
    return slot.reinterpret(gl.int32, [R, W], LAYOUT)


# A ring slot viewed as 32-bit words: Triton 3.6 names the view _reinterpret, later
# releases reinterpret (the other function is never compiled).
_as_words = _as_words_39 if hasattr(gl.shared_memory_descriptor, "reinterpret") else _as_words_36


@gluon.jit
def _ring(DOT_F16: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BKH: gl.constexpr, STAGES: gl.constexpr):
    """The shared-memory ring of decoded operands: (A low nibbles, A high, B low, B high),
    STAGES slots of [rows, BKH] each, in the MMA's 16-bit type and wgmma's swizzled layout."""
    VT: gl.constexpr = gl.float16 if DOT_F16 else gl.bfloat16
    a_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BKH], VT)
    b_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BKH], VT)
    a_lo = gl.allocate_shared_memory(VT, [STAGES, BM, BKH], a_sl)
    a_hi = gl.allocate_shared_memory(VT, [STAGES, BM, BKH], a_sl)
    b_lo = gl.allocate_shared_memory(VT, [STAGES, BN, BKH], b_sl)
    b_hi = gl.allocate_shared_memory(VT, [STAGES, BN, BKH], b_sl)
    return a_lo, a_hi, b_lo, b_hi


@gluon.jit
def _wgmma_kernel(A_CODES, A_SCALES, A_TS, B_CODES, B_SCALES, B_TS, C, M, N, K,
                  A_SCALE: gl.constexpr, A_B: gl.constexpr, A_TILE2D: gl.constexpr, A_ASM: gl.constexpr,
                  B_SCALE: gl.constexpr, B_B: gl.constexpr, B_TILE2D: gl.constexpr, B_ASM: gl.constexpr,
                  DOT_F16: gl.constexpr, EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                  BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, INSTR_N: gl.constexpr,
                  num_warps: gl.constexpr, PARTS: gl.constexpr = 3):
    """PARTS (a timing experiment, results then meaningless): 1 = the loads, decodes and
    stores without the wgmmas, 2 = the wgmmas on whatever the ring holds, without the
    loads and decodes, 3 = the kernel."""
    BKH: gl.constexpr = BK // 2
    G: gl.constexpr = BKH // BYTES_PER_THREAD
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 2], [32 // G, G, 1], [num_warps, 1, 1], [2, 1, 0])  # code words
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 16])
    a_lo, a_hi, b_lo, b_hi = _ring(DOT_F16, BM, BN, BKH, STAGES)

    pid_m, pid_n = _tile_ids(M, N, BM, BN, GROUP_M)
    ROWS: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    GROUPS: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, L3))
    groups = gl.expand_dims(gl.arange(0, G, layout=GROUPS), 0)
    # Rows past M / N read row M - 1 / N - 1 (no masks in the loop); their results are not stored.
    rm = gl.expand_dims(gl.minimum(pid_m * BM + gl.arange(0, BM, layout=ROWS), M - 1), 1)
    rn = gl.expand_dims(gl.minimum(pid_n * BN + gl.arange(0, BN, layout=ROWS), N - 1), 1)

    acc = gl.zeros((BM, BN), gl.float32, layout=MMA)
    # A wait with nothing in flight ends the stage that the zeros' movs belong to: without it
    # ptxas serialises every wgmma of the loop ("non wgmma instructions defining accumulator
    # registers ... between start and end of the pipeline stage", C7515; Triton 3.6's ptxas).
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    ca, sa = _load_words(A_CODES, A_SCALES, rm, groups, 0, K, A_B, A_TILE2D, L3)
    cb, sb = _load_words(B_CODES, B_SCALES, rn, groups, 0, K, B_B, B_TILE2D, L3)
    steps = K // BK
    for i in range(steps):
        slot = i % STAGES
        if PARTS & 1:
            k_next = gl.where(i + 1 < steps, (i + 1) * BK, 0)  # the last step fetches step 0 again, unused
            ca_next, sa_next = _load_words(A_CODES, A_SCALES, rm, groups, k_next, K, A_B, A_TILE2D, L3)
            cb_next, sb_next = _load_words(B_CODES, B_SCALES, rn, groups, k_next, K, B_B, B_TILE2D, L3)
            _decode_words(ca, sa, a_lo.index(slot), a_hi.index(slot), A_SCALE, DOT_F16, A_ASM, BM, BKH)
            _decode_words(cb, sb, b_lo.index(slot), b_hi.index(slot), B_SCALE, DOT_F16, B_ASM, BN, BKH)
            ca, sa, cb, sb = ca_next, sa_next, cb_next, sb_next
        fence_async_shared()
        _cta_barrier()
        if PARTS & 2:
            acc = warpgroup_mma(a_lo.index(slot), b_lo.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma(a_hi.index(slot), b_hi.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=2, deps=(acc, ))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    _store_c(acc, C, A_TS, B_TS, M, N, pid_m, pid_n, EPI_EXP, BM, BN, MMA)


@gluon.jit
def _store_c(acc, C, A_TS, B_TS, M, N, pid_m, pid_n, EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
             MMA: gl.constexpr):
    """The epilogue: C = acc * 2^EPI_EXP (exact: the CVT operands' 2^-6) * alpha, alpha =
    (1 / ts_a) / ts_b, each step rounded in FP32; rows and columns past M, N not stored."""
    if EPI_EXP:
        acc = acc * 2.0**EPI_EXP
    ts_a = gl.load(A_TS)
    alpha = gl.div_rn(gl.div_rn(ts_a * 0.0 + 1.0, ts_a), gl.load(B_TS))
    cm = gl.expand_dims(pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, MMA)), 1)
    cn = gl.expand_dims(pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, MMA)), 0)
    gl.store(C + cm * N + cn, (acc * alpha).to(C.dtype.element_ty), mask=(cm < M) & (cn < N))


@gluon.jit
def _decode_partition(CODES, SCALES, row0, rows, K, lo_bufs, hi_bufs, empty, ready, SCALE: gl.constexpr,
                      B: gl.constexpr, TILE2D: gl.constexpr, ASM: gl.constexpr, DOT_F16: gl.constexpr,
                      R: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
                      PARTS: gl.constexpr, CHUNKED: gl.constexpr, AHEAD: gl.constexpr):
    """Worker of _ws_kernel: decode one operand's R rows, step after step, into the ring
    (wait until the MMA partition has freed the slot; store; fence; arrive on ready); a
    step's code words load AHEAD (1 or 2) steps ahead (two ahead was slower for _ws_kernel's
    bf16-decode formats, kernels-h200.md session 12). Without PARTS & 1 it only passes the
    slots on (_ws_kernel's timing experiment)."""
    _decode_steps(CODES, SCALES, row0, rows, K, lo_bufs, hi_bufs, empty, ready, 0, SCALE, B, TILE2D, ASM, DOT_F16, R,
                  BK, STAGES, NW, PARTS, CHUNKED, AHEAD)


@gluon.jit
def _decode_steps(CODES, SCALES, row0, rows, K, lo_bufs, hi_bufs, empty, ready, it0, SCALE: gl.constexpr,
                  B: gl.constexpr, TILE2D: gl.constexpr, ASM: gl.constexpr, DOT_F16: gl.constexpr,
                  R: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr,
                  PARTS: gl.constexpr, CHUNKED: gl.constexpr, AHEAD: gl.constexpr):
    """_decode_partition's work for one output tile (rows row0 ..): its K // BK steps into
    the ring, the first in ring step it0 (a persistent kernel's steps run on across tiles)."""
    gl.static_assert(AHEAD == 1 or AHEAD == 2, "code words load one or two steps ahead")
    BKH: gl.constexpr = BK // 2
    G: gl.constexpr = BKH // BYTES_PER_THREAD
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 2], [32 // G, G, 1], [NW, 1, 1], [2, 1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    GROUPS: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, L3))
    groups = gl.expand_dims(gl.arange(0, G, layout=GROUPS), 0)
    r = gl.expand_dims(gl.minimum(row0 + gl.arange(0, R, layout=ROWS), rows - 1), 1)
    steps = K // BK
    codes, sbytes = _load_words(CODES, SCALES, r, groups, 0, K, B, TILE2D, L3)
    if AHEAD == 2:
        codes1, sbytes1 = _load_words(CODES, SCALES, r, groups, gl.where(steps > 1, BK, 0), K, B, TILE2D, L3)
    else:
        codes1, sbytes1 = codes, sbytes  # unused
    for i in range(steps):
        slot = (it0 + i) % STAGES
        if PARTS & 1:  # past the last step: step 0 again, unused
            k_next = gl.where(i + AHEAD < steps, (i + AHEAD) * BK, 0)
            codes_next, sbytes_next = _load_words(CODES, SCALES, r, groups, k_next, K, B, TILE2D, L3)
        mbarrier.wait(empty.index(slot), (((it0 + i) // STAGES) & 1) ^ 1)
        if PARTS & 1:
            _decode_words(codes, sbytes, lo_bufs.index(slot), hi_bufs.index(slot), SCALE, DOT_F16, ASM, R, BKH,
                          CHUNKED)
            if AHEAD == 2:
                codes, sbytes, codes1, sbytes1 = codes1, sbytes1, codes_next, sbytes_next
            else:
                codes, sbytes = codes_next, sbytes_next
        fence_async_shared()
        mbarrier.arrive(ready.index(slot), count=1)


@gluon.jit
def _mma_partition(a_lo, a_hi, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n,
                   EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                   STAGES: gl.constexpr, MMA: gl.constexpr, PARTS: gl.constexpr):
    """Default partition of _ws_kernel: the wgmmas of each step as soon as both operands'
    slot is ready, freeing the slot of the step before once its wgmmas are done; then the
    epilogue (_store_c). Without PARTS & 2 it only passes the slots on."""
    acc = gl.zeros((BM, BN), gl.float32, layout=MMA)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))  # see _wgmma_kernel (C7515)
    steps = K // BK
    for i in range(steps):
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        if PARTS & 2:
            acc = warpgroup_mma(a_lo.index(slot), b_lo.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma(a_hi.index(slot), b_hi.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=2, deps=(acc, ))  # step i - 1's are done
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    _store_c(acc, C, A_TS, B_TS, M, N, pid_m, pid_n, EPI_EXP, BM, BN, MMA)


@gluon.jit
def _slot_barriers(STAGES: gl.constexpr, PRODUCERS: gl.constexpr):
    """The ring's mbarriers a slot: `empty` (the MMA side arrives once its wgmmas are done
    with the slot) and `ready` (each of PRODUCERS decode partitions arrives once it stored)."""
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(empty.index(s), count=1)
        mbarrier.init(ready.index(s), count=PRODUCERS)
    return empty, ready


@gluon.jit
def _ws_kernel(A_CODES, A_SCALES, A_TS, B_CODES, B_SCALES, B_TS, C, M, N, K,
               A_SCALE: gl.constexpr, A_B: gl.constexpr, A_TILE2D: gl.constexpr, A_ASM: gl.constexpr,
               B_SCALE: gl.constexpr, B_B: gl.constexpr, B_TILE2D: gl.constexpr, B_ASM: gl.constexpr,
               DOT_F16: gl.constexpr, EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
               BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, INSTR_N: gl.constexpr,
               num_warps: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
               PARTS: gl.constexpr = 3):
    """Warp-specialised _wgmma_kernel: two decode partitions (A's rows, B's rows) fill the
    shared-memory ring while the default partition (num_warps = ws_mma_warps: one warpgroup,
    two for a 128 x 256 tile) runs the wgmmas, so decode and MMA overlap by construction (in
    _wgmma_kernel they took turns: kernels-h200.md, session 11). Ring slots pass through
    mbarriers: `ready` (both decoders arrive) and `empty` (the MMA partition arrives once the
    slot's wgmmas are done).
    PARTS as _wgmma_kernel's (1: decode side only, 2: MMA side only; results meaningless)."""
    BKH: gl.constexpr = BK // 2
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 16])
    a_lo, a_hi, b_lo, b_hi = _ring(DOT_F16, BM, BN, BKH, STAGES)
    empty, ready = _slot_barriers(STAGES, 2)
    pid_m, pid_n = _tile_ids(M, N, BM, BN, GROUP_M)
    gl.warp_specialize([
        (_mma_partition, (a_lo, a_hi, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n, EPI_EXP,
                          BM, BN, BK, STAGES, MMA, PARTS)),
        (_decode_partition, (A_CODES, A_SCALES, pid_m * BM, M, K, a_lo, a_hi, empty, ready, A_SCALE, A_B, A_TILE2D,
                             A_ASM, DOT_F16, BM, BK, STAGES, PRODUCER_WARPS, PARTS, False, 1)),
        (_decode_partition, (B_CODES, B_SCALES, pid_n * BN, N, K, b_lo, b_hi, empty, ready, B_SCALE, B_B, B_TILE2D,
                             B_ASM, DOT_F16, BN, BK, STAGES, PRODUCER_WARPS, PARTS, False, 1)),
    ], [PRODUCER_WARPS, PRODUCER_WARPS], [PRODUCER_REGS, PRODUCER_REGS])


# (BM, BN, BK, GROUP_M, STAGES, producer warps, producer registers, kernel maxnreg) of the
# warp-specialised kernel: one MMA warpgroup, a 4-warp decoder per operand; BK 64 where K
# is not a multiple of 128 (a 4-slot ring). The CTA launches with maxnreg registers a
# thread for all its warps (ws_mma_warps + 2 x producer warps), so these must fit the 64K
# register file; Triton gives the MMA warps what the producers' setmaxnreg frees.
WS_CONFIG = (128, 128, 128, 8, 3, 4, 128, 168)
WS_CONFIG_BK64 = (128, 128, 64, 8, 4, 4, 120, 168)
REGISTER_FILE = 65536
# A 128 x 256 tile (two MMA warpgroups: 12 warps at 168 registers, where session 12's 16 warps
# capped them at 128, below the 154 an n256 wgmma needs). Per FLOP the ring carries 25% fewer
# decoded bytes in and its n256 wgmmas read 17% fewer out (the L1/TEX pipeline held the
# kernel at 82-84%), but each of B's two decode warps has twice session 12's rows a step.
# Offline (Triton 3.6 and 3.9, sm_90a): no spills with the decoders at 168 registers; at 152,
# 120, 96 or 72 they spill 40-696 bytes. Timed (session 33, H100, every GEMM shape): correct,
# and slower than WS_CONFIG everywhere: NVFP4 with the CVT decode at 0.84-0.92x its ratio to
# cuBLAS, the LUT decode, UE5M3 and MXFP4 at 0.36-0.62x: B's two decode warps fall behind.
# Kept in benchmarks' gemm_ws as the measured negative.
WS_WIDE_CONFIG = (128, 256, 64, 8, 4, 2, 168, 168)


def ws_mma_warps(cfg: tuple) -> int:
    """_ws_kernel's MMA warps for a config: a warpgroup holds a 128 x 128 f32 accumulator in
    128 registers a thread, so a larger tile takes two."""
    return 4 if cfg[0] * cfg[1] <= 128 * 128 else 8


def ws_config(k: int) -> tuple:
    """_ws_kernel's config for reduction depth K (a multiple of 64)."""
    return WS_CONFIG if k % 128 == 0 else WS_CONFIG_BK64


def _specialised_consts(cfg: tuple, mma_warps: int, decoders: int, parts: int) -> dict:
    """The tile constexprs of a warp-specialised kernel's config (BM, BN, BK, GROUP_M, STAGES,
    decode warps, decode registers, maxnreg); the CTA launches all its warps (mma_warps +
    decoders x decode warps) at maxnreg registers, so they must fit the register file."""
    bm, bn, bk, group, stages, pw, pregs, maxnreg = cfg
    warps = mma_warps + decoders * pw
    if warps * 32 * maxnreg > REGISTER_FILE:
        raise ValueError(f"{warps} warps at {maxnreg} registers exceed the {REGISTER_FILE}-register file")
    return dict(BM=bm, BN=bn, BK=bk, GROUP_M=group, STAGES=stages, INSTR_N=min(bn, 256), num_warps=mma_warps,
                PRODUCER_WARPS=pw, PRODUCER_REGS=pregs, PARTS=parts)


def _launch_specialised(kernel, a, b, c: torch.Tensor, m: int, n: int, k: int, plan: dict, cfg: tuple,
                        mma_warps: int, decoders: int, parts: int, **extra) -> None:
    bm, bn, bk = cfg[:3]
    if k % bk:
        raise ShapeError(f"K={k} must be a multiple of the tile depth {bk}")
    consts = dict(_specialised_consts(cfg, mma_warps, decoders, parts), **extra)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    if extra.get("PERSISTENT"):  # one program a multiprocessor (one fits: the ring takes its shared memory)
        grid = (min(grid[0], multiprocessors(c.device)),)
    kernel[grid](a.codes, a.scales, a.tensor_scale.reshape(1).float(), b.codes, b.scales,
                 b.tensor_scale.reshape(1).float(), c, m, n, k, **constants(a.spec, b.spec, plan), **consts,
                 maxnreg=cfg[7])


def launch_ws(a, b, c: torch.Tensor, m: int, n: int, k: int, plan: dict, cfg: tuple | None = None,
              parts: int = 3) -> None:
    """C = A . B^T into c with _ws_kernel; cfg as WS_CONFIG (default: ws_config(k)); parts:
    the kernel's PARTS (benchmarks only: anything but 3 leaves c meaningless)."""
    cfg = cfg or ws_config(k)
    if cfg[4] < 2:
        raise ValueError(f"the warp-specialised ring needs at least 2 slots, got {cfg[4]}")
    _launch_specialised(_ws_kernel, a, b, c, m, n, k, plan, cfg, ws_mma_warps(cfg), 2, parts)


def config(m: int, n: int, k: int) -> tuple:
    """(BM, BN, BK, GROUP_M, warps, STAGES): 128 x 128 tiles, 8 warps (two warpgroups of 64
    rows), a 3-slot ring; BK 128 where K allows it, else 64."""
    bk = 128 if k % 128 == 0 else 64
    return 128, 128, bk, 8, 8, 3


def launch(a, b, c: torch.Tensor, m: int, n: int, k: int, plan: dict, cfg: tuple | None = None,
           maxnreg: int | None = None, parts: int = 3) -> None:
    """C = A . B^T into c (bf16 or f32), a and b Packed, `plan` gemm.split_plan's; cfg
    (BM, BN, BK, GROUP_M, warps, STAGES) and maxnreg override the defaults; parts: the
    kernel's PARTS (benchmarks only: anything but 3 leaves c meaningless)."""
    bm, bn, bk, group, warps, stages = cfg or config(m, n, k)
    if k % bk:
        raise ShapeError(f"K={k} must be a multiple of the tile depth {bk}")
    if stages < 3:  # two slots would let a warpgroup overwrite one the other's wgmma still reads
        raise ValueError(f"gemm_wgmma needs a ring of at least 3 slots, got {stages}")
    options = {"maxnreg": maxnreg} if maxnreg else {}
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _wgmma_kernel[grid](a.codes, a.scales, a.tensor_scale.reshape(1).float(), b.codes, b.scales,
                        b.tensor_scale.reshape(1).float(), c, m, n, k, **constants(a.spec, b.spec, plan),
                        BM=bm, BN=bn, BK=bk, GROUP_M=group, STAGES=stages, INSTR_N=min(bn, 256), num_warps=warps,
                        PARTS=parts, **options)


def constants(a_spec, b_spec, plan: dict) -> dict:
    """The kernel's per-format constexprs."""
    consts = {"DOT_F16": plan["DOT_F16"], "EPI_EXP": plan["EPI_EXP"]}
    for pre, spec in (("A_", a_spec), ("B_", b_spec)):
        consts[pre + "SCALE"] = SCALE_KIND[spec.scale]
        consts[pre + "B"] = max(spec.block, 1)
        consts[pre + "TILE2D"] = spec.tile_2d
        consts[pre + "ASM"] = plan[pre + "ASM"]
    return consts


def _compile_offline(fn, consts: dict, out: str, options: dict):
    """A gemm_wgmma kernel compiled for sm_90a without a GPU (Triton's bundled ptxas)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    ptrs = dict(A_CODES="*u8", A_SCALES="*u8", A_TS="*fp32", B_CODES="*u8", B_SCALES="*u8", B_TS="*fp32", C=out)
    sig = dict(ptrs, M="i32", N="i32", K="i32", **{k: "constexpr" for k in consts})
    aligned = ("A_CODES", "A_SCALES", "B_CODES", "B_SCALES", "C", "M", "N", "K")
    attrs = {(fn.arg_names.index(x),): [["tt.divisibility", 16]] for x in aligned}
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def compile_sm90(a_spec, b_spec, plan: dict, cfg: tuple, out: str = "*bf16", parts: int = 3):
    """Compile _wgmma_kernel for sm_90a without a GPU: what the CPU tier checks (it compiles,
    wgmma runs asynchronously, nothing spills) and what benchmarks/gemm_sass.py counts."""
    bm, bn, bk, group, warps, stages = cfg
    consts = dict(constants(a_spec, b_spec, plan), BM=bm, BN=bn, BK=bk, GROUP_M=group, STAGES=stages,
                  INSTR_N=min(bn, 256), num_warps=warps, PARTS=parts)
    return _compile_offline(_wgmma_kernel, consts, out, dict(num_warps=warps))


def compile_ws_sm90(a_spec, b_spec, plan: dict, cfg: tuple = WS_CONFIG, out: str = "*bf16", parts: int = 3):
    """_ws_kernel compiled for sm_90a without a GPU (as compile_sm90)."""
    warps = ws_mma_warps(cfg)
    consts = dict(constants(a_spec, b_spec, plan), **_specialised_consts(cfg, warps, 2, parts))
    return _compile_offline(_ws_kernel, consts, out, dict(num_warps=warps, maxnreg=cfg[7]))


# ---- register-sourced A: the MMA warpgroups decode A themselves ---------------------------
#
# _ws_kernel moves both operands through shared memory as bf16: per 128 x 128 x 128 step the
# decoders store 64 KB and the wgmmas read 96 KB (B twice, once per m64 half), and
# Nsight Compute puts the L1/TEX pipeline at 84% (session 12). wgmma also takes A from
# registers. _rs_kernel's two MMA warpgroups load A's code words themselves and decode them
# straight into the dot-operand layout (CUTLASS's mixed-input GEMMs convert their narrow
# operand the same way), a step ahead of the wgmmas that use them, so A never enters shared
# memory (32 KB stored and 64 KB read a step) and the decode warps decode B only.
#
# K order inside a step: the wgmma's A fragment gives thread t of a quad the k16 columns
# {2t, 2t+1, 2t+8, 2t+9} of its rows; the PTX routine turns code word q (bytes 4q .. 4q+3)
# into the pairs lo(0,1), lo(2,3), hi(0,1), hi(2,3). Thread t takes words 4t .. 4t+3 of a
# row (one 16-byte run); word 4t + c feeds k16 chunk c: low nibbles, column 8h + 2t + e
# holding the low nibble of byte 4(4t + c) + 2h + e, and the high nibbles likewise. Any order
# of K serves as long as A and B agree: B's decoders store theirs the same way (CHUNKED).
#
# Measured on the H200 (kernels-h200.md, sessions 13 and 14, where the tables are): with code
# words one step ahead, level with _ws_kernel (0.92-1.05x). Two steps ahead (AHEAD 2) B's
# decoders alone outrun cuBLAS BF16 and the limit is the MMA warps' own decode of A: for
# f16-decoded operands (E4M3 scales) the kernel is 1.01-1.09x _ws_kernel, hence gemm's route
# for them (launch_packed); for bf16-decoded ones A's decode slows at AHEAD 2 (0.75-0.92x).
# Why A's decode is not hidden: at 128 registers the next step's operand set does not fit
# beside the accumulator and the current set, so ptxas decodes into the current set's
# registers after the wgmma wait. Tried and dropped (session 14): A and B ahead by different
# steps, a wgmma kept in flight across steps, a half-step pipeline, 4 decode warps under a
# 168-register launch (0.82-1.04x the kernel without them).


@gluon.jit
def _chunk_order(l01, l23, R: gl.constexpr, W: gl.constexpr):
    """A step's 32-bit value pairs of one nibble half, [R, W // 2, 2] (words q = 2g + w),
    into the int32 columns of the chunked order: word q's pair h at 8 (q % 4) + 4h + q // 4."""
    x = gl.reshape(gl.join(l01, l23), [R, W // 4, 2, 2, 2])  # (row, q // 4, (q // 2) % 2, q % 2, h)
    return gl.reshape(gl.permute(x, (0, 2, 3, 4, 1)), [R, W * 2])


@gluon.jit
def _a_step_words(CODES, SCALES, rows, q, rows4, t, k0, K, B: gl.constexpr, TILE2D: gl.constexpr):
    """A's code words q of the step at k0 [R, W] (word q: bytes 4q .. 4q + 3 of the step's
    row), and the scale bytes of each thread's 16-byte run [R, 4] (thread t: words 4t ..
    4t + 3, elements 32t .. 32t + 31): one byte for blocks of 32, two (one 16-bit load) for
    blocks of 16. One load a run, not one a word: loaded a word at a time, a warp's scale
    loads spanned 8 rows each and used 10 of every 32 bytes fetched (Nsight Compute,
    kernels-h200.md session 13)."""
    words = gl.load(CODES.to(gl.pointer_type(gl.int32), bitcast=True) + rows * (K // 8) + k0 // 8 + q)
    blk: gl.constexpr = 16 if TILE2D else B
    srow = rows4 // 16 if TILE2D else rows4
    ptr = SCALES + srow * (K // blk) + (k0 + 32 * t) // blk
    if blk == 16:
        return words, gl.load(ptr.to(gl.pointer_type(gl.uint16), bitcast=True))
    else:
        return words, gl.load(ptr)


@gluon.jit
def _word_scales(sraw, SCALE: gl.constexpr, DOT_F16: gl.constexpr, B: gl.constexpr, TILE2D: gl.constexpr,
                 BM: gl.constexpr, AW: gl.constexpr):
    """The run scale bytes [BM, 4] as each word's scale pair [BM, 16] (word 4t + j: the run's
    first scale for j < 2, its second for j >= 2 where blocks hold 16 elements)."""
    if (16 if TILE2D else B) == 16:
        s0 = (sraw & 0xFF).to(gl.uint8)
        s1 = (sraw >> 8).to(gl.uint8)
    else:
        s0 = sraw
        s1 = sraw
    h0 = _scale_values(s0, SCALE, DOT_F16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    h1 = _scale_values(s1, SCALE, DOT_F16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    p0 = h0 | (h0 << 16)
    p1 = h1 | (h1 << 16)
    x = gl.permute(gl.join(gl.join(p0, p0), gl.join(p1, p1)), (0, 1, 3, 2))  # (row, t, j // 2, j % 2)
    return gl.convert_layout(gl.reshape(x, [BM, 16]), AW)


@gluon.jit
def _halves(p, DOT_F16: gl.constexpr):
    """A 32-bit pair as its two 16-bit values (a register renaming once ptxas is done)."""
    if DOT_F16:
        return gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [p], dtype=(gl.float16, gl.float16),
                                         is_pure=True, pack=1)
    else:
        return gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [p], dtype=(gl.bfloat16, gl.bfloat16),
                                         is_pure=True, pack=1)


@gluon.jit
def _operand(p01, p23, DOT_F16: gl.constexpr, BM: gl.constexpr, BKH: gl.constexpr, DOT: gl.constexpr):
    """One nibble half's pairs [BM, W] (words q = 4t + c) as the step's A operand [BM, BKH]:
    column 16c + 8h + 2t + e from pair h's value e. The layouts line up: the convert only
    renames registers."""
    v0, v1 = _halves(p01, DOT_F16)
    v2, v3 = _halves(p23, DOT_F16)
    x = gl.reshape(gl.join(gl.join(v0, v1), gl.join(v2, v3)), [BM, 4, BKH // 16, 2, 2])  # (row, t, c, e, h)
    return gl.convert_layout(gl.reshape(gl.permute(x, (0, 2, 4, 1, 3)), [BM, BKH]), DOT)


@gluon.jit
def _a_step_operands(words, sraw, SCALE: gl.constexpr, DOT_F16: gl.constexpr, ASM: gl.constexpr,
                     B: gl.constexpr, TILE2D: gl.constexpr, BM: gl.constexpr, BKH: gl.constexpr,
                     AW: gl.constexpr, DOT: gl.constexpr):
    """A step's code words decoded into the two register operands (low and high nibbles)."""
    pair = _word_scales(sraw, SCALE, DOT_F16, B, TILE2D, BM, AW)
    l01, l23, h01, h23 = gl.inline_asm_elementwise(ASM, "=r,=r,=r,=r,r,r,r", [words, pair, pair],
                                                   dtype=(gl.int32, gl.int32, gl.int32, gl.int32), is_pure=True,
                                                   pack=1)
    return _operand(l01, l23, DOT_F16, BM, BKH, DOT), _operand(h01, h23, DOT_F16, BM, BKH, DOT)


@gluon.jit
def _rs_mma_partition(A_CODES, A_SCALES, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n,
                      A_SCALE: gl.constexpr, A_B: gl.constexpr, A_TILE2D: gl.constexpr, A_ASM: gl.constexpr,
                      DOT_F16: gl.constexpr, EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                      BK: gl.constexpr, STAGES: gl.constexpr, MMA: gl.constexpr, PARTS: gl.constexpr,
                      AHEAD: gl.constexpr, GROUP_M: gl.constexpr, PERSISTENT: gl.constexpr):
    """Default partition of _rs_kernel (two warpgroups, 64 rows each): its tile (_rs_tile), or
    with PERSISTENT every num_programs-th tile from program_id on, the ring's steps running on
    across them."""
    if PERSISTENT:
        tiles = gl.cdiv(M, BM) * gl.cdiv(N, BN)
        it = 0
        for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
            tm, tn = _tile_of(tile, M, N, BM, BN, GROUP_M)
            _rs_tile(A_CODES, A_SCALES, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, tm, tn, it, A_SCALE, A_B,
                     A_TILE2D, A_ASM, DOT_F16, EPI_EXP, BM, BN, BK, STAGES, MMA, PARTS, AHEAD)
            it += K // BK
    else:
        _rs_tile(A_CODES, A_SCALES, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n, 0, A_SCALE, A_B,
                 A_TILE2D, A_ASM, DOT_F16, EPI_EXP, BM, BN, BK, STAGES, MMA, PARTS, AHEAD)


@gluon.jit
def _rs_decode_persistent(CODES, SCALES, M, N, K, lo_bufs, hi_bufs, empty, ready, SCALE: gl.constexpr,
                          B: gl.constexpr, TILE2D: gl.constexpr, ASM: gl.constexpr, DOT_F16: gl.constexpr,
                          BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                          STAGES: gl.constexpr, NW: gl.constexpr, PARTS: gl.constexpr, AHEAD: gl.constexpr):
    """B's decode partition of a PERSISTENT _rs_kernel: the tiles of _rs_mma_partition's loop
    in its order, so the decoders run on into the next tile's steps while the MMA warps
    store the last tile's C."""
    tiles = gl.cdiv(M, BM) * gl.cdiv(N, BN)
    it = 0
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        tm, tn = _tile_of(tile, M, N, BM, BN, GROUP_M)
        _decode_steps(CODES, SCALES, tn * BN, N, K, lo_bufs, hi_bufs, empty, ready, it, SCALE, B, TILE2D, ASM,
                      DOT_F16, BN, BK, STAGES, NW, PARTS, True, AHEAD)
        it += K // BK


@gluon.jit
def _rs_tile(A_CODES, A_SCALES, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n, it0,
             A_SCALE: gl.constexpr, A_B: gl.constexpr, A_TILE2D: gl.constexpr, A_ASM: gl.constexpr,
             DOT_F16: gl.constexpr, EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
             BK: gl.constexpr, STAGES: gl.constexpr, MMA: gl.constexpr, PARTS: gl.constexpr,
             AHEAD: gl.constexpr):
    """One output tile of _rs_kernel's MMA warps, its first step ring step it0: step i's
    wgmmas run while the warps decode step i + 1's A into the other register operands (its
    words were loaded AHEAD steps before), then wait for them and free B's slot; then the
    epilogue."""
    gl.static_assert(BM == 128 and BK == 128, "the A word layout is written for 128 x 128 steps on 8 warps")
    BKH: gl.constexpr = BK // 2
    # Words [BM, BKH // 4] where the dot-operand layout wants them: thread t of a quad holds
    # words 4t .. 4t + 3 (16 bytes: one load) of rows r, r + 8 of its warp's 16.
    AW: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]], warp_bases=[[16, 0], [32, 0], [64, 0]],
        block_bases=[], shape=[BM, BKH // 4])
    # The run scales [BM, 4]: thread t of a quad holds its run's of the same rows.
    AS: gl.constexpr = gl.DistributedLinearLayout(reg_bases=[[8, 0]],
                                                  lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
                                                  warp_bases=[[16, 0], [32, 0], [64, 0]], block_bases=[],
                                                  shape=[BM, 4])
    DOT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    rows = gl.expand_dims(gl.minimum(pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, AW)), M - 1), 1)
    q = gl.expand_dims(gl.arange(0, BKH // 4, layout=gl.SliceLayout(0, AW)), 0)
    rows4 = gl.expand_dims(gl.minimum(pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, AS)), M - 1), 1)
    t = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, AS)), 0)
    acc = gl.zeros((BM, BN), gl.float32, layout=MMA)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))  # see _wgmma_kernel (C7515)
    steps = K // BK
    w, s = _a_step_words(A_CODES, A_SCALES, rows, q, rows4, t, 0, K, A_B, A_TILE2D)
    al, ah = _a_step_operands(w, s, A_SCALE, DOT_F16, A_ASM, A_B, A_TILE2D, BM, BKH, AW, DOT)
    w, s = _a_step_words(A_CODES, A_SCALES, rows, q, rows4, t, gl.where(steps > 1, BK, 0), K, A_B, A_TILE2D)
    if AHEAD == 2:  # step i + 2's words too
        w2, s2 = _a_step_words(A_CODES, A_SCALES, rows, q, rows4, t, gl.where(steps > 2, 2 * BK, 0), K, A_B,
                               A_TILE2D)
    else:
        w2, s2 = w, s  # unused
    for i in range(steps):
        slot = (it0 + i) % STAGES
        k_after = gl.where(i + 1 + AHEAD < steps, (i + 1 + AHEAD) * BK, 0)  # past the end: step 0, unused
        mbarrier.wait(ready.index(slot), ((it0 + i) // STAGES) & 1)
        if PARTS & 2:
            acc = warpgroup_mma(al, b_lo.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma(ah, b_hi.index(slot).permute((1, 0)), acc, is_async=True)
            nl, nh = _a_step_operands(w, s, A_SCALE, DOT_F16, A_ASM, A_B, A_TILE2D, BM, BKH, AW, DOT)
            wn, sn = _a_step_words(A_CODES, A_SCALES, rows, q, rows4, t, k_after, K, A_B, A_TILE2D)
            if AHEAD == 2:
                w, s, w2, s2 = w2, s2, wn, sn
            else:
                w, s = wn, sn
            acc, al, ah = warpgroup_mma_wait(num_outstanding=0, deps=(acc, al, ah))
            al, ah = nl, nh
        mbarrier.arrive(empty.index(slot), count=1)
    _store_c(acc, C, A_TS, B_TS, M, N, pid_m, pid_n, EPI_EXP, BM, BN, MMA)


@gluon.jit
def _rs_kernel(A_CODES, A_SCALES, A_TS, B_CODES, B_SCALES, B_TS, C, M, N, K,
               A_SCALE: gl.constexpr, A_B: gl.constexpr, A_TILE2D: gl.constexpr, A_ASM: gl.constexpr,
               B_SCALE: gl.constexpr, B_B: gl.constexpr, B_TILE2D: gl.constexpr, B_ASM: gl.constexpr,
               DOT_F16: gl.constexpr, EPI_EXP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
               BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, INSTR_N: gl.constexpr,
               num_warps: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
               PARTS: gl.constexpr = 3, AHEAD: gl.constexpr = 1, PERSISTENT: gl.constexpr = False):
    """_ws_kernel with A from registers: one decode partition (PRODUCER_WARPS warps) fills a
    ring of B only, in the chunked K order; the default partition (num_warps = 8: two MMA
    warpgroups) decodes A itself. PARTS as _ws_kernel's (1: B's decoders only, 2: the MMA
    warpgroups only, A's decode included); AHEAD: how many steps ahead both sides load their
    code words. PERSISTENT: a program takes every num_programs-th tile (launch_rs launches one
    a multiprocessor), so B's decoders start a tile while the MMA warps store the last one's C
    and no tile waits for a program to launch."""
    BKH: gl.constexpr = BK // 2
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 16])
    VT: gl.constexpr = gl.float16 if DOT_F16 else gl.bfloat16
    b_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BKH], VT)
    b_lo = gl.allocate_shared_memory(VT, [STAGES, BN, BKH], b_sl)
    b_hi = gl.allocate_shared_memory(VT, [STAGES, BN, BKH], b_sl)
    empty, ready = _slot_barriers(STAGES, 1)
    pid_m, pid_n = _tile_ids(M, N, BM, BN, GROUP_M)
    if PERSISTENT:
        gl.warp_specialize([
            (_rs_mma_partition, (A_CODES, A_SCALES, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n,
                                 A_SCALE, A_B, A_TILE2D, A_ASM, DOT_F16, EPI_EXP, BM, BN, BK, STAGES, MMA, PARTS,
                                 AHEAD, GROUP_M, True)),
            (_rs_decode_persistent, (B_CODES, B_SCALES, M, N, K, b_lo, b_hi, empty, ready, B_SCALE, B_B, B_TILE2D,
                                     B_ASM, DOT_F16, BM, BN, BK, GROUP_M, STAGES, PRODUCER_WARPS, PARTS, AHEAD)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_rs_mma_partition, (A_CODES, A_SCALES, b_lo, b_hi, empty, ready, C, A_TS, B_TS, M, N, K, pid_m, pid_n,
                                 A_SCALE, A_B, A_TILE2D, A_ASM, DOT_F16, EPI_EXP, BM, BN, BK, STAGES, MMA, PARTS,
                                 AHEAD, GROUP_M, False)),
            (_decode_partition, (B_CODES, B_SCALES, pid_n * BN, N, K, b_lo, b_hi, empty, ready, B_SCALE, B_B,
                                 B_TILE2D, B_ASM, DOT_F16, BN, BK, STAGES, PRODUCER_WARPS, PARTS, True, AHEAD)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])


# (BM, BN, BK, GROUP_M, STAGES, decode warps, decode registers, kernel maxnreg) of _rs_kernel.
# 8 decode warps at 96 registers (16 warps launch at 128) and a 6-slot ring: the fastest of
# those tried (session 13, call 10; 4 slots within 0-3%, 4 decode warps at 128 under a 168
# launch 8-25% slower). The MMA warps then run at 160 registers (the SASS's setmaxnreg), and
# Triton 3.6's ptxas places all of A's next-step decode after the wgmma wait, not under the
# wgmmas as the source orders it; with the decoders at 80 or 72 (MMA warps 176 or 184) it
# leaves 10 or 21 of its 34 conversions under them (session 24, offline SASS; the PTX has
# them all before the wait; a loop of two steps an iteration, two operand sets, moved none).
# Likely why: the PTX's last use of a step's operands is the wgmma, so ptxas may give the next
# step's the same registers, which the wgmma reads until the wait. A use after the wait (a
# store behind a test that never passes) moved between 0 and all 34 under the wgmmas as the
# store's form and the config changed, often with spills: too fragile to adopt untimed.
# benchmarks/kernel_bench gemm_rs_regs times the register splits: on an H100 (session 24, two
# samples, five shapes) 80 and 72 are level with 96, so RS_CONFIG stays.
RS_CONFIG = (128, 128, 128, 8, 6, 8, 96, 128)


def launch_rs(a, b, c: torch.Tensor, m: int, n: int, k: int, plan: dict, cfg: tuple | None = None,
              parts: int = 3, ahead: int = 1, persistent: bool = False) -> None:
    """C = A . B^T into c with _rs_kernel (as launch_ws): 8 MMA warps, one decode partition;
    ahead: how many steps ahead both sides load their code words (1 or 2); persistent: one
    program a multiprocessor, each taking every num_programs-th tile."""
    if ahead not in (1, 2):
        raise ValueError(f"code words load one or two steps ahead, not {ahead}")
    _launch_specialised(_rs_kernel, a, b, c, m, n, k, plan, cfg or RS_CONFIG, 8, 1, parts, AHEAD=ahead,
                        PERSISTENT=persistent)


# gemm's packed route on Hopper (gemm.KERNEL "ws"), by measurement (kernels-h200.md, sessions
# 14 and 16; % of cuBLAS BF16 at the five GEMM shapes): f16-decoded pairs with E4M3 scales
# (NVFP4, UFP4) and K a multiple of 128 take _rs_kernel with both sides' code words two steps
# ahead (1.01-1.09x _ws_kernel in session 14, 0.99-1.01x in session 16's call 4); the rest
# take _ws_kernel: bf16-decoded pairs (UE8M0 scales; _rs_kernel trails there, 0.75-0.92x),
# BK-64 depths, and UE5M3 pairs, f16-decoded since session 16 (f16 _ws_kernel 50.4-58.9%,
# _rs_kernel 48.3-57.7%: A's UE5M3 scales take integer operations in the MMA warps where
# E4M3's take one conversion). _rs_kernel runs persistent: against one tile a program at the
# five shapes, NVFP4 and UFP4, two samples each, faster in 17 of 20 pairs, median 1.02x
# (0.93-1.15x; session 23, call B).
RS_AHEAD = 2
RS_PERSISTENT = True


def packed_kernel(plan: dict, k: int, scales: tuple[str, str]) -> str:
    """"rs" or "ws": which kernel launch_packed runs for operands with this split_plan and
    these scale formats (A's, B's)."""
    return "rs" if plan["DOT_F16"] and "ue5m3" not in scales and k % RS_CONFIG[2] == 0 else "ws"


def launch_packed(a, b, c: torch.Tensor, m: int, n: int, k: int, plan: dict, cfg: tuple | None = None) -> None:
    """C = A . B^T into c with the faster kernel for these operands (packed_kernel); a cfg
    (a _ws_kernel config, from the benchmarks) pins _ws_kernel."""
    if cfg is None and packed_kernel(plan, k, (a.spec.scale, b.spec.scale)) == "rs":
        launch_rs(a, b, c, m, n, k, plan, ahead=RS_AHEAD, persistent=RS_PERSISTENT)
    else:
        launch_ws(a, b, c, m, n, k, plan, cfg)


def compile_rs_sm90(a_spec, b_spec, plan: dict, cfg: tuple = RS_CONFIG, out: str = "*bf16", parts: int = 3,
                    ahead: int = 1, persistent: bool = False):
    """_rs_kernel compiled for sm_90a without a GPU (as compile_sm90)."""
    consts = dict(constants(a_spec, b_spec, plan), **_specialised_consts(cfg, 8, 1, parts), AHEAD=ahead,
                  PERSISTENT=persistent)
    return _compile_offline(_rs_kernel, consts, out, dict(num_warps=8, maxnreg=cfg[7]))
