"""Triton kernels that emulate the FP4 datapath on Hopper, one op per file, each beside
a plain PyTorch reference (reference.py). Importing this package needs torch; the
Triton modules (quantize, fake_quant, gemm, hadamard) also need triton and load lazily
when a CUDA tensor first reaches them. The public face is `ops`:

    from fourcast.kernels import ops
    p = ops.quantize(x, fmt)          # ops.Packed
"""

from fourcast.kernels import ops
from fourcast.kernels.utils import Packed

# The session whose quantizer kernels these are. A training profile records it, and the
# hardware model prices that run's quantize ops by what those kernels did (rust ops.rs
# `quant_kernel`, whose default `QUANT_REV` must equal this). Bump both with a kernel change
# the model must know: 9 one row tile a strip program, 10 up to four, 11 integer sr16,
# 12 the column copy's code and scale bytes stored once a strip program, 13 RTNE row+col
# calls on rowcol_gluon (0.77-0.81x the strip kernel's time at QLinear's large X and W
# calls, kernels-h200.md session 17: the model's triton_quant_gluon_time_factor, from
# kernel benchmarks until a profiled training run at 13 gives calls to fit), 14 rowcol_gluon
# with a block of 16 in one lane, taking the "sr16" calls with blocks of 16 and the calls with
# a column RHT of 16 too (0.66x, 0.94x and 0.62x, session 18: the model's
# triton_quant_gluon_one_lane_time_factor, _sr16_time_factor, _rht_time_factor), 15 the
# row+col calls' amax pass on rowcol_gluon where it applies (triton_quant_gluon_amax_*), 16
# TE's calls: the dY call's decoded rotated column copy on rowcol_gluon too (0.79x), the X
# call at two row tiles a program (0.56x, session 19: triton_quant_gluon_rht_decoded_ and
# _rht_rtne_time_factor), 17 an f32 input (a LayerNorm's output) on rowcol_gluon and its
# amax pass too, 18 MXFP4's calls there (one lane a block of 32: a row RHT of 32, "sr16", a
# rounding for each copy), 19 RTNE codes in fewer instructions (quantize._rtne_aligned, the
# sign by one IMAD.HI: rowcol_gluon's NVFP4 codes 44.75 -> 37.0 SASS an element, session 21;
# timed in session 22 at 0.83-0.98 of 18's time; priced as 18 until a training run records it),
# 20 the amax pass's column RHT in f32 where exact, f64 only where a bound calls for it (a bf16
# input; session 25: 0.47x strip.py's rotated pass against 0.58x, on an H100), 21 a bf16
# input's calls with both copies packed and a column RHT of 16 on one row tile at 80 registers
# (session 26: 0.96x RTNE, 0.91x TE's dY codes, on an H100), 22 every kernel's scale byte
# stores kept in L2 (quantize.SCALE_L2) and 128 x 128 tiles on 16 warps for a bf16 input's RTNE
# rowcol_gluon calls without an RHT (session 28, H100: the ue5m3 X call 0.91x, NVFP4 packed
# codes 0.98x, the one-copy and strip.py calls 0.99x; priced as 21 until a training run
# records it), 23 rowcol_gluon takes a row and a column RHT together (UFP4's calls, which ran
# strip.py), a bf16 input's RHT of 16 with its signs and 1/4 applied in f32 (TE's rotated calls
# 0.96-0.98x, UFP4's 0.87-0.96x of the same kernel without it), UFP4's X and W calls at 80
# registers (0.88-0.89x), and their amax pass on rowcol_gluon too (the calls measuring their
# amax 0.76-0.79x; session 29, H100; priced as 21 until a training run records it), 24 that
# amax pass rotates a bf16 input's rows in f32 too where exact (amax_gluon.ROW_RHT_F32: UFP4's
# calls measuring their amax 0.90-0.91x; session 30, H100; priced as 21 likewise).
QUANT_REV = 24

__all__ = ["ops", "Packed", "QUANT_REV"]
