//! Single operations costed on their own: a GEMM with operand formats, a memory-bound
//! pass by bytes, a quantization by outputs, attention by shape. The projection of a
//! measured run (a list of such ops) and the calibration cases use these.
//!
//! Ops are JSON objects tagged by "op":
//! `{"op": "gemm", "m": 8192, "n": 6144, "k": 4096, "format": "nvfp4"}` (or "a"/"b"),
//! `{"op": "memory", "read_bytes": 1e9, "write_bytes": 1e9, "ops": 0, "exps": 0}`,
//! `{"op": "copy", "bytes": 2147483648}`,
//! `{"op": "quantize", "numel": 6.7e7, "outputs": [{"format": "nvfp4", "rht": 16, "sr": true}]}`,
//! `{"op": "attention", "batch": 4, "seq": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Domain, Error, Result};
use crate::recipe::TensorFormat;

use super::attention::{attention_time, AttnShape};
use super::datapath::{candidates, choose, describe};
use super::gemm::Shape;
use super::machine::{Class, EmulCost, Hw};
use super::memory::{pass_time, quant_cost, Pass, QuantOut};
use super::operand::{Elem, Operand, ScaleFmt};

/// A format by short name ("nvfp4") or as a recipe tensor format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FormatSpec {
    Name(String),
    Format(TensorFormat),
}

impl FormatSpec {
    pub fn operand(&self) -> Result<Operand> {
        match self {
            FormatSpec::Name(n) => Operand::named(n),
            FormatSpec::Format(f) => {
                let op = Operand::from_recipe(Some(f))?;
                if op.scale != ScaleFmt::Tensor && op.block == 0 {
                    return Err(Error::invalid(
                        Domain::Format,
                        format!("format {f:?}: block scales need block > 0"),
                    ));
                }
                Ok(op)
            }
        }
    }
}

fn opt_operand(f: &Option<FormatSpec>) -> Result<Option<Operand>> {
    f.as_ref().map(FormatSpec::operand).transpose()
}

fn one() -> u64 {
    1
}
fn one32() -> u32 {
    1
}
fn two() -> f64 {
    2.0
}
fn launch() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantOutSpec {
    pub format: FormatSpec,
    #[serde(default)]
    pub rht: u32,
    #[serde(default)]
    pub sr: bool,
    /// With `sr`: rounding "sr4" (the four-per-counter Philox stream).
    #[serde(default)]
    pub sr4: bool,
    /// With `sr`: rounding "sr16" (8-bit uniforms, sixteen per counter); wins over `sr4`.
    #[serde(default)]
    pub sr16: bool,
    /// Also write a transposed copy (TN-only MMA consuming the same data along the other dim).
    #[serde(default)]
    pub transposed_copy: bool,
    /// What the quantizer writes, if not the format's own element ("bf16" = fake-quant).
    #[serde(default)]
    pub container: Option<String>,
    /// The fourcast-triton emulation wrote this copy as decoded bf16 values, not codes
    /// (profiles from training-h200 run 18 on say which); only its pricing reads it.
    #[serde(default)]
    pub decoded: bool,
}

// Ops are parsed once and costed once; the size difference between variants is harmless.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    Gemm {
        m: u64,
        n: u64,
        k: u64,
        #[serde(default = "one")]
        groups: u64,
        /// Both operands (unless `a` / `b` say otherwise); absent = bf16.
        #[serde(default)]
        format: Option<FormatSpec>,
        #[serde(default)]
        a: Option<FormatSpec>,
        #[serde(default)]
        b: Option<FormatSpec>,
        #[serde(default = "two")]
        out_bytes: f64,
        /// Absent = the kernel alone; "torch-eager" = as timed in a profiled eager run on a
        /// GPU with fitted `[emulation]` costs (the kernel at the run's GEMM clock, plus the
        /// per-call dispatch cost); "torch-cublaslt" = the same with the kernel time scaled by
        /// `emulation.cublaslt_gemm_time_factor` (fourcast's cuBLASLt call on decoded operands).
        #[serde(default, rename = "impl")]
        implementation: Option<String>,
    },
    Memory {
        #[serde(default)]
        read_bytes: f64,
        #[serde(default)]
        write_bytes: f64,
        #[serde(default)]
        ops: f64,
        #[serde(default)]
        exps: f64,
        #[serde(default = "launch")]
        launches: f64,
    },
    Copy {
        bytes: f64,
    },
    Quantize {
        numel: f64,
        outputs: Vec<QuantOutSpec>,
        #[serde(default = "one32")]
        refresh: u32,
        #[serde(default = "two")]
        src_bytes: f64,
        /// Which quantizer ran: absent = a vendor-grade kernel (the model's own pricing);
        /// "fourcast-triton" = fourcast's emulation quantizer, priced by the GPU's fitted
        /// `[emulation]` costs. Only for GPUs without FP4 MMAs (it explains a measured
        /// Hopper run; targets are never priced this way).
        #[serde(default, rename = "impl")]
        implementation: Option<String>,
        /// With "fourcast-triton": the session whose quantizer kernels ran (`quant_kernel`
        /// says what each did); absent: `QUANT_REV`, the current kernels. Profiles do not
        /// record it: training-h200 runs up to 14 ran 9, runs 15-16 ran 10, run 17 ran 11
        /// (from run 18 on the profile records it).
        #[serde(default)]
        quant_rev: Option<u32>,
    },
    Attention {
        batch: f64,
        seq: f64,
        heads: f64,
        kv_heads: f64,
        head_dim: f64,
        #[serde(default = "yes")]
        causal: bool,
        /// Forward and backward (else forward only).
        #[serde(default)]
        backward: bool,
        /// "bf16" (default) or "fp8" matmuls.
        #[serde(default)]
        precision: Option<String>,
    },
}

/// The GPU's fitted `[emulation]` costs, or an error saying it has none.
fn emulation(hw: &Hw) -> Result<EmulCost> {
    hw.emulation.ok_or_else(|| {
        Error::invalid(
            Domain::Hardware,
            format!(
                "{} has no [emulation] costs (fitted only where a measured run needs them)",
                hw.name
            ),
        )
    })
}

/// kernels/strip.py's `STRIP_ITERS`: the most row tiles a strip program takes (since session 10).
const STRIP_ITERS: u32 = 4;

/// The revision (session) of fourcast's current quantizer kernels: an op's `quant_rev` when
/// absent. Revision 19 (session 21: RTNE codes in fewer instructions) is priced as 18: timed
/// in session 22 at 0.83-0.98 of 18's time (kernels-h200.md), its factor waits for a training
/// run that records it. Revision 20 (session 25): the amax pass's column RHT in f32.
/// Revision 21 (session 26): a bf16 input's calls with both copies packed and a column RHT
/// of 16 on one row tile at 80 registers. Revision 22 (session 28: the scale byte stores kept
/// in L2, 128 x 128 tiles for RTNE calls without an RHT) is priced as 21: timed on an H100 at
/// 0.91-0.99 of 21's time (kernels-h200.md), its factor waits for a training run that records it.
/// Revision 23 (session 29: rowcol_gluon.py takes UFP4's calls, a row and a column RHT
/// together, and their amax pass, which ran strip.py; a bf16 input's RHT of 16 with the signs
/// and norm in f32) is priced as 21 likewise: UFP4's calls are priced as strip.py's until a
/// run records them. Revision 24 (session 30: that amax pass rotates a bf16 input's rows in f32
/// too where exact, as its columns; UFP4's calls measuring their amax 0.90-0.91x on an H100)
/// is priced as 21 likewise.
pub const QUANT_REV: u32 = 24;

/// What a revision of fourcast's quantizer kernels did, as far as the pricing tells them
/// apart. The one place revisions map to kernels (benchmarks/calibration/fit_emulation.py
/// `quant_kernel` mirrors it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct QuantKernel {
    /// The most row tiles a strip program takes: 1 up to session 9 (training-h200 runs up
    /// to 14), `STRIP_ITERS` since session 10's prefetching strip kernel.
    max_iters: u32,
    /// "sr16" rounds in integers (session 11 on: training-h200 run 17): its elements earn
    /// `sr16_int_saving_s_per_elem`; before, the float form.
    int_sr16: bool,
    /// A strip program stores its column copy's code and scale bytes once, not a row tile
    /// at a time (session 12 on): a packed column copy earns `gather_saving_s_per_elem`.
    gather: bool,
    /// RTNE row+col calls without an RHT on 4-bit formats with 1-D blocks of 16 or 32 run
    /// kernels/rowcol_gluon.py (session 17 on): `gluon_time_factor` of the strip price.
    gluon: bool,
    /// rowcol_gluon.py with a block of 16 in one lane (session 18 on): its RTNE calls cost
    /// `gluon_one_lane_time_factor` of the strip price, and it takes the "sr16" calls with
    /// blocks of 16 too, at `gluon_sr16_time_factor`, and the calls whose packed column copy
    /// has an RHT of 16 (blocks of 16; RTNE or "sr16"), at `gluon_rht_time_factor`.
    one_lane: bool,
    /// A row+col call's amax pass runs rowcol_gluon.py's kernel (session 18 on, revision 15)
    /// where it applies (no row RHT, a column RHT of 16 or none): `gluon_amax_time_factor`
    /// (`gluon_amax_rht_time_factor` with the RHT) of strip.py's pass's price.
    gluon_amax: bool,
    /// TE's calls (session 19 on, revision 16): rowcol_gluon.py takes a column RHT of 16 on a
    /// decoded column copy too (TE's dY call, at `gluon_rht_decoded_time_factor`), and its
    /// RTNE calls with the RHT (TE's X call) run two row tiles a program, at
    /// `gluon_rht_rtne_time_factor`.
    te_calls: bool,
    /// rowcol_gluon.py and its amax pass take f32 inputs too (session 19 on, revision 17: a
    /// LayerNorm's output under autocast): the kernel at `gluon_f32_time_factor`, the amax
    /// pass at the bf16 passes' factors.
    f32_in: bool,
    /// rowcol_gluon.py holds a block of 32 in one lane too (session 19 on, revision 18), so
    /// it takes MXFP4's calls: "sr16" on blocks of 32 (`gluon_block32_sr16_time_factor`), a
    /// rounding for each copy, and a row RHT of the block size beside an unrotated column copy
    /// (`gluon_row_rht_time_factor`).
    block32: bool,
    /// rowcol_gluon.py's amax pass rotates a bf16 input's column copy in f32 where f32 is exact
    /// and redoes it in f64 only where a bound calls for it (session 25 on, revision 20):
    /// `gluon_amax_rht_split_time_factor` of strip.py's pass.
    split_rht_amax: bool,
    /// A bf16 input's rowcol_gluon.py calls with both copies packed and a column RHT of 16 run
    /// one row tile a program at 80 registers (session 26 on, revision 21): their revision-20
    /// price times `gluon_rht_packed_rtne_time_factor` (RTNE) or
    /// `gluon_rht_packed_sr16_time_factor` ("sr16").
    rht_packed_80: bool,
}

/// The kernels of quantizer revision `rev` (1 ..= `QUANT_REV`).
fn quant_kernel(rev: u32) -> Result<QuantKernel> {
    if !(1..=QUANT_REV).contains(&rev) {
        return Err(Error::invalid(
            Domain::Config,
            format!("quantize op: quant_rev {rev} is not a quantizer revision (1 ..= {QUANT_REV})"),
        ));
    }
    Ok(QuantKernel {
        max_iters: if rev <= 9 { 1 } else { STRIP_ITERS },
        int_sr16: rev >= 11,
        gather: rev >= 12,
        gluon: rev >= 13,
        one_lane: rev >= 14,
        gluon_amax: rev >= 15,
        te_calls: rev >= 16,
        f32_in: rev >= 17,
        block32: rev >= 18,
        split_rht_amax: rev >= 20,
        rht_packed_80: rev >= 21,
    })
}

/// What a call's copies hold beyond their formats (the op outputs' `decoded` and
/// `container` fields), as the emulation prices it.
#[derive(Debug, Clone, Copy)]
struct Written {
    /// A row+col call's column copy is packed codes (not decoded values, not a container).
    col_packed: bool,
    /// Its row copy likewise.
    row_packed: bool,
    /// No copy is written into a fake-quant container.
    no_container: bool,
    /// The input is 16-bit (bf16): rowcol_gluon.py's kernels read nothing else before
    /// revision 17, so an f32 input (a LayerNorm's output under autocast) kept strip.py's.
    bf16_in: bool,
}

/// Seconds of one call of fourcast's Triton quantizer, when `implementation` asks for it.
fn emulated_quant_s(
    hw: &Hw,
    implementation: Option<&str>,
    numel: f64,
    outs: &[QuantOut],
    refresh: u32,
    kernel: QuantKernel,
    written: Written,
) -> Result<Option<f64>> {
    match implementation {
        None | Some("vendor") => Ok(None),
        Some("fourcast-triton") => {
            if hw.kinds.iter().any(|k| k.class == Class::Fp4) {
                return Err(Error::invalid(
                    Domain::Hardware,
                    format!(
                        "{} has FP4 MMAs: the fourcast-triton emulation cost only describes GPUs without them",
                        hw.name
                    ),
                ));
            }
            let e = emulation(hw)?;
            let elems: f64 = outs.iter().map(|o| numel * o.copies as f64).sum();
            let rotated: f64 = outs
                .iter()
                .filter(|o| o.rht > 0)
                .map(|o| numel * o.copies as f64)
                .sum();
            let stochastic = |group: u32| -> f64 {
                outs.iter()
                    .filter(|o| o.sr && o.sr_group() == group)
                    .map(|o| numel * o.copies as f64)
                    .sum()
            };
            let (stochastic, stochastic4, stochastic16) =
                (stochastic(1), stochastic(4), stochastic(16));
            // The amax pass (kernels/strip.py _strip_amax_kernel) reads the input once for
            // every copy that needs a tensor amax, as the native model's refresh rule says.
            let measures = refresh == 1 && outs.iter().any(|o| o.fmt.scale.needs_tensor_amax());
            let amax = if measures { numel } else { 0.0 };
            // With an RHT on a copy the pass rotates to measure that copy's amax: strip.py's
            // rotated pass costs 2.5-2.9x its plain one (kernels-h200.md session 18 item 5).
            let amax_rht_s = if rotated > 0.0 {
                e.amax_rht_s_per_elem
            } else {
                0.0
            };
            let amax_pass_s = amax * (e.amax_s_per_elem + amax_rht_s);
            let sr_any = stochastic + stochastic4 + stochastic16 > 0.0;
            // The kernel that runs (kernels/quantize.py rowcol_route): the strip kernel
            // unless a copy uses SR; each prices its rotation differently. With SR a copy
            // rotated by an RHT of 16 (TE's dY call) has its own term, apart from other
            // rotations (MXFP4's row RHT of 32), which the calls price differently.
            let rotated16: f64 = outs
                .iter()
                .filter(|o| o.rht == 16)
                .map(|o| numel * o.copies as f64)
                .sum();
            let rotation_s = if sr_any {
                rotated16 * e.rht16_sr_s_per_elem + (rotated - rotated16) * e.rht_s_per_elem
            } else {
                rotated * e.strip_rht_s_per_elem
            };
            // A row+col call's strip programs of several tiles load the next tile while
            // they quantize the current one: ITERS - 1 of ITERS tiles overlap.
            let max_iters = kernel.max_iters;
            let (_, iters) = strip_tiles(numel, outs, sr_any, max_iters);
            let overlapped = if outs.len() == 2 {
                elems * (1.0 - 1.0 / iters)
            } else {
                0.0 // one copy: kernels/quantize.py's row kernel, not the strip kernel
            };
            // Revision 12's programs of several tiles store a packed 4-bit column copy's code
            // and scale bytes once (kernels/strip.py GATHER), where a tile wrote a quarter of
            // each code sector and one byte of each scale sector.
            let gathered = if kernel.gather
                && written.col_packed
                && outs.len() == 2
                && iters > 1.0
                && outs[1].fmt.elem.bits() == 4
            {
                numel
            } else {
                0.0
            };
            // Revision 13 on (kernels/quantize.py rowcol_route): the Gluon kernel takes RTNE
            // row+col calls without an RHT on 4-bit formats with 1-D blocks of a bf16 input
            // (decoded copies included, fake-quant containers not), priced as a measured fraction of the
            // strip kernel's time on the same calls (kernels-h200.md, sessions 17 and 18).
            // From revision 14 also "sr16" calls (both copies) with blocks of 16, and calls
            // whose packed column copy alone has an RHT of 16 (blocks of 16); from 16 a
            // decoded column copy with it too.
            // From 18 (a block of 32 in one lane) "sr16" on blocks of 32 too, each copy its own
            // rounding (RTNE or "sr16"), and a row RHT of the block size (MXFP4's calls).
            let blocks16 = outs.iter().all(|o| o.fmt.block == 16);
            let all_sr16 = stochastic16 == elems && kernel.one_lane && blocks16;
            let sr16_only = kernel.block32 && stochastic + stochastic4 == 0.0;
            let row_rht = kernel.block32
                && outs.len() == 2
                && outs[0].rht == outs[0].fmt.block
                && outs[1].rht == 0;
            let column_rht16 = kernel.one_lane
                && blocks16
                && (written.col_packed || kernel.te_calls)
                && outs.len() == 2
                && outs[0].rht == 0
                && outs[1].rht == 16;
            let gluon_input = written.bf16_in || kernel.f32_in;
            let on_gluon = kernel.gluon
                && written.no_container
                && gluon_input
                && outs.len() == 2
                && (!sr_any || all_sr16 || sr16_only)
                && (rotated == 0.0 || column_rht16 || row_rht)
                && outs.iter().all(|o| {
                    o.fmt.elem.bits() == 4 && !o.fmt.tile_2d && matches!(o.fmt.block, 16 | 32)
                });
            // An f32 input's call moves twice the input bytes: it runs near copy bandwidth on
            // either kernel, so it keeps a factor of its own (revision 17 on), but for a row
            // RHT's calls, whose f64 butterflies bound the strip kernel either way (run 23).
            let gluon_factor_r20 = match (kernel.one_lane, rotated > 0.0, sr_any) {
                _ if row_rht => e.gluon_row_rht_time_factor,
                _ if !written.bf16_in => e.gluon_f32_time_factor,
                (false, _, _) => e.gluon_time_factor,
                (true, false, true) if sr16_only && !blocks16 => e.gluon_block32_sr16_time_factor,
                (true, true, false) if kernel.te_calls => e.gluon_rht_rtne_time_factor,
                (true, true, true) if kernel.te_calls && !written.col_packed => {
                    e.gluon_rht_decoded_time_factor
                }
                (true, true, _) => e.gluon_rht_time_factor,
                (true, false, false) => e.gluon_one_lane_time_factor,
                (true, false, true) => e.gluon_sr16_time_factor,
            };
            // From 21 a bf16 input's calls with both copies packed and a column RHT of 16 run
            // one row tile at 80 registers (session 26: 0.96x RTNE, 0.91x "sr16", on an H100).
            let packed_80 = kernel.rht_packed_80
                && column_rht16
                && written.bf16_in
                && written.col_packed
                && written.row_packed;
            let gluon_factor = match (packed_80, sr_any) {
                (true, false) => gluon_factor_r20 * e.gluon_rht_packed_rtne_time_factor,
                (true, true) => gluon_factor_r20 * e.gluon_rht_packed_sr16_time_factor,
                (false, _) => gluon_factor_r20,
            };
            let strip_s = e.call_s
                + elems * e.s_per_elem
                + rotation_s
                + stochastic * e.sr_s_per_elem
                + stochastic4 * e.sr4_s_per_elem
                + stochastic16 * e.sr16_s_per_elem
                + amax_pass_s
                + if refresh == 1 {
                    in_kernel_amax_programs(numel, outs, sr_any, max_iters) * e.amax_tile_s
                } else {
                    0.0 // the amax is given, or not recorded (QLinear's row+col calls)
                }
                - overlapped * e.prefetch_saving_s_per_elem
                - gathered * e.gather_saving_s_per_elem
                - if kernel.int_sr16 {
                    stochastic16 * e.sr16_int_saving_s_per_elem
                } else {
                    0.0 // the float sr16 of revisions before 11
                };
            // The amax pass is its own kernel on either route: the Gluon factor scales only
            // the quantizing kernel after it. From revision 15 the pass is rowcol_gluon.py's
            // where it applies, at its measured fraction of strip.py's (kernels-h200.md,
            // session 18), else strip.py's (the fitted amax terms).
            let gluon_amax = kernel.gluon_amax
                && gluon_input
                && outs.len() == 2
                && outs[0].rht == 0
                && matches!(outs[1].rht, 0 | 16);
            // An f32 input's pass reads twice the bytes: its measured ratio to a bf16 input's
            // pass, per kernel and rotation (kernels-h200.md session 19, call 3, five shapes).
            // With the Gluon pass the rotated copy is the column's (a column RHT of 16).
            let amax_s = amax_pass_s
                * match (gluon_amax, rotated > 0.0, written.bf16_in) {
                    (false, _, true) => 1.0,
                    (false, false, false) => e.amax_f32_time_factor,
                    (false, true, false) => e.amax_rht_f32_time_factor,
                    (true, false, true) => e.gluon_amax_time_factor,
                    (true, true, true) if kernel.split_rht_amax => {
                        e.gluon_amax_rht_split_time_factor
                    }
                    (true, true, true) => e.gluon_amax_rht_time_factor,
                    (true, false, false) => e.gluon_amax_time_factor * e.gluon_amax_f32_time_factor,
                    (true, true, false) => {
                        e.gluon_amax_rht_time_factor * e.gluon_amax_rht_f32_time_factor
                    }
                };
            Ok(Some(if on_gluon {
                e.call_s + amax_s + gluon_factor * (strip_s - e.call_s - amax_pass_s)
            } else {
                strip_s - amax_pass_s + amax_s
            }))
        }
        Some(other) => Err(Error::unknown(
            Domain::Config,
            "quantize impl",
            other,
            &["vendor", "fourcast-triton"],
        )),
    }
}

/// (tiles, row tiles a program) of a call's strip kernel. The tile is kernels/strip.py's
/// `strip_config`: rows = the column block or the column copy's RHT (at least 16), columns
/// = 32 with SR (64 without) or the row copy's RHT. A program takes `strip_iters` tiles:
/// 16-row tiles without an RHT up to `max_iters` (`QuantKernel::max_iters`), halved while fewer
/// than 4096 programs would remain; the others one. outs: the row copy first, then the
/// column copy.
fn strip_tiles(numel: f64, outs: &[QuantOut], sr: bool, max_iters: u32) -> (f64, f64) {
    let block = outs.iter().map(|o| o.fmt.block).max().unwrap_or(16);
    let col_rht = outs.iter().skip(1).map(|o| o.rht).max().unwrap_or(0);
    let rows = block.max(col_rht).max(16);
    let cols = (if sr { 32 } else { 64 }).max(outs.first().map_or(0, |o| o.rht));
    let tiles = numel / f64::from(rows * cols);
    let mut iters = 1.0;
    if rows == 16 && outs.iter().all(|o| o.rht == 0) {
        iters = f64::from(max_iters.max(1));
        while iters > 1.0 && (tiles / iters).floor() < 4096.0 {
            iters /= 2.0;
        }
    }
    (tiles, iters)
}

/// Strip-kernel programs of a call whose formats have no tensor scale: those record their
/// amax in-kernel, two atomics per program on the same two words, which contend (training-h200
/// run 9). A program takes one or more tiles (`strip_tiles`; the fitted cost, 0.915 ns, is
/// per program: one tile each in the runs it came from).
fn in_kernel_amax_programs(numel: f64, outs: &[QuantOut], sr: bool, max_iters: u32) -> f64 {
    let single_level = !outs.is_empty()
        && outs
            .iter()
            .all(|o| o.fmt.block > 0 && !o.fmt.scale.needs_tensor_amax());
    if !single_level {
        return 0.0;
    }
    let (tiles, iters) = strip_tiles(numel, outs, sr, max_iters);
    tiles / iters
}

/// The cost of one op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpReport {
    pub op: &'static str,
    pub time_s: f64,
    pub bound: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    /// Parts of the time (gemm_s, conversion_s, amax_s, quantize_s, rht_s, sr_s, fwd_s, bwd_s).
    pub detail: BTreeMap<&'static str, f64>,
}

impl OpReport {
    /// The report of an op that runs on no MMA kind (memory passes, attention).
    fn plain(
        op: &'static str,
        time_s: f64,
        bound: &'static str,
        detail: BTreeMap<&'static str, f64>,
    ) -> Self {
        OpReport {
            op,
            time_s,
            bound,
            kind: None,
            path: None,
            tflops: None,
            detail,
        }
    }
}

/// `v` must be finite and >= 0 (names the op and field otherwise).
fn non_negative(op: &str, name: &str, v: f64) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            Domain::Config,
            format!("{op} op: {name} must be >= 0, got {v}"),
        ))
    }
}

/// A GEMM's cost and every kind that could run it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmReport {
    pub time_s: f64,
    pub tflops: f64,
    pub bound: &'static str,
    pub kind: String,
    pub path: String,
    pub gemm_s: f64,
    /// Conversion passes when operands arrive packed in their own format.
    pub conversion_s: f64,
    pub tile: [u32; 2],
    pub split: u32,
    pub candidates: Vec<Candidate>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub kind: String,
    pub time_s: f64,
    pub path: String,
}

pub fn gemm(hw: &Hw, s: &Shape, a: &Operand, b: &Operand, out_bytes: f64) -> Result<GemmReport> {
    if s.m < 1.0 || s.n < 1.0 || s.k < 1.0 || s.groups < 1.0 {
        return Err(Error::Shape(format!(
            "GEMM needs m, n, k, groups >= 1, got m={} n={} k={} groups={}",
            s.m, s.n, s.k, s.groups
        )));
    }
    let p = choose(hw, s, a, b, out_bytes);
    let mut cands: Vec<Candidate> = candidates(hw, s, a, b, out_bytes)
        .iter()
        .map(|c| Candidate {
            kind: hw.kinds[c.kind].name.clone(),
            time_s: c.total_s(),
            path: describe(hw, c, a, b),
        })
        .collect();
    cands.sort_by(|x, y| x.time_s.total_cmp(&y.time_s));
    Ok(GemmReport {
        time_s: p.total_s(),
        tflops: s.flops() / p.total_s() / 1e12,
        bound: p.bound.name(),
        kind: hw.kinds[p.kind].name.clone(),
        path: describe(hw, &p, a, b),
        gemm_s: p.gemm_s,
        conversion_s: p.conv_s,
        tile: [p.tile.0, p.tile.1],
        split: p.split,
        candidates: cands,
    })
}

pub fn op_time(hw: &Hw, op: &Op) -> Result<OpReport> {
    let mut detail = BTreeMap::new();
    Ok(match op {
        Op::Gemm {
            m,
            n,
            k,
            groups,
            format,
            a,
            b,
            out_bytes,
            implementation,
        } => {
            let both = opt_operand(format)?.unwrap_or(Operand::BF16);
            let oa = opt_operand(a)?.unwrap_or(both);
            let ob = opt_operand(b)?.unwrap_or(both);
            let s = Shape {
                m: *m as f64,
                n: *n as f64,
                k: *k as f64,
                groups: *groups as f64,
            };
            let (g, eager) = match implementation.as_deref() {
                None | Some("vendor") => (gemm(hw, &s, &oa, &ob, *out_bytes)?, 0.0),
                Some(how @ ("torch-eager" | "torch-cublaslt")) => {
                    let e = emulation(hw)?;
                    let at_clock = Hw {
                        gemm_clock_hz: e.eager_clock_hz,
                        ..hw.clone()
                    };
                    let mut g = gemm(&at_clock, &s, &oa, &ob, *out_bytes)?;
                    if how == "torch-cublaslt" {
                        // the kernel cuBLASLt picks for the decoded operands, not torch's
                        g.gemm_s *= e.lt_time_factor;
                        g.time_s = g.gemm_s + g.conversion_s;
                        g.tflops = s.flops() / g.time_s / 1e12;
                    }
                    (g, e.eager_call_s)
                }
                Some(other) => {
                    return Err(Error::unknown(
                        Domain::Config,
                        "gemm impl",
                        other,
                        &["vendor", "torch-eager", "torch-cublaslt"],
                    ))
                }
            };
            detail.insert("gemm_s", g.gemm_s);
            detail.insert("conversion_s", g.conversion_s);
            if eager > 0.0 {
                detail.insert("eager_s", eager);
            }
            OpReport {
                op: "gemm",
                time_s: g.time_s + eager,
                bound: g.bound,
                kind: Some(g.kind),
                path: Some(g.path),
                tflops: Some(g.tflops),
                detail,
            }
        }
        Op::Memory {
            read_bytes,
            write_bytes,
            ops,
            exps,
            launches,
        } => {
            for (name, v) in [
                ("read_bytes", read_bytes),
                ("write_bytes", write_bytes),
                ("ops", ops),
                ("exps", exps),
                ("launches", launches),
            ] {
                non_negative("memory", name, *v)?;
            }
            let (t, bound) = pass_time(
                hw,
                &Pass {
                    read: *read_bytes,
                    write: *write_bytes,
                    ops: *ops,
                    exps: *exps,
                    launches: *launches,
                    quant: false,
                },
            );
            OpReport::plain("memory", t, bound.name(), detail)
        }
        Op::Copy { bytes } => {
            non_negative("copy", "bytes", *bytes)?;
            let (t, bound) = pass_time(
                hw,
                &Pass {
                    read: *bytes,
                    write: *bytes,
                    launches: 1.0,
                    ..Pass::default()
                },
            );
            OpReport::plain("copy", t, bound.name(), detail)
        }
        Op::Quantize {
            numel,
            outputs,
            refresh,
            src_bytes,
            implementation,
            quant_rev,
        } => {
            if *refresh == 0 || !(numel.is_finite() && *numel >= 0.0) {
                return Err(Error::invalid(
                    Domain::Config,
                    "quantize op: numel >= 0 and refresh >= 1 required",
                ));
            }
            let kernel = quant_kernel(quant_rev.unwrap_or(QUANT_REV))?;
            let mut outs = vec![];
            for o in outputs {
                let fmt = o.format.operand()?;
                if !fmt.is_quantized() {
                    return Err(Error::invalid(
                        Domain::Config,
                        "quantize op: an output format cannot be bf16",
                    ));
                }
                let container = match &o.container {
                    None => fmt.elem,
                    Some(c) => {
                        let e = Elem::parse(c).ok_or_else(|| {
                            Error::unknown(
                                Domain::Format,
                                "container",
                                c,
                                &super::profile::KIND_ELEMENTS,
                            )
                        })?;
                        if !fmt.elem.exact_in(e) {
                            return Err(Error::invalid(
                                Domain::Format,
                                format!("{} is not exact in container {c}", fmt.elem.name()),
                            ));
                        }
                        e
                    }
                };
                outs.push(QuantOut {
                    fmt,
                    container,
                    rht: o.rht,
                    sr: o.sr,
                    sr4: o.sr && o.sr4 && !o.sr16,
                    sr16: o.sr && o.sr16,
                    copies: if o.transposed_copy { 2 } else { 1 },
                    scale_conv: false,
                });
            }
            let q = quant_cost(hw, *numel, *src_bytes, &outs, *refresh);
            let written = Written {
                col_packed: outputs.len() == 2
                    && !outputs[1].decoded
                    && outputs[1].container.is_none(),
                row_packed: !outputs.is_empty()
                    && !outputs[0].decoded
                    && outputs[0].container.is_none(),
                no_container: outputs.iter().all(|o| o.container.is_none()),
                bf16_in: *src_bytes == 2.0,
            };
            let emulated = emulated_quant_s(
                hw,
                implementation.as_deref(),
                *numel,
                &outs,
                *refresh,
                kernel,
                written,
            )?;
            if let Some(t) = emulated {
                detail.insert("emulation_s", t);
            }
            detail.insert("amax_s", q.amax);
            detail.insert("quantize_s", q.quantize);
            detail.insert("rht_s", q.rht);
            detail.insert("sr_s", q.sr);
            detail.insert("launches", q.passes);
            // Never below the vendor-grade (memory-roofline) price.
            let time_s = emulated.map_or(q.total(), |t| t.max(q.total()));
            let bound = if emulated.is_some_and(|t| t > q.total()) {
                "emulation"
            } else {
                "memory"
            };
            OpReport::plain("quantize", time_s, bound, detail)
        }
        Op::Attention {
            batch,
            seq,
            heads,
            kv_heads,
            head_dim,
            causal,
            backward,
            precision,
        } => {
            let fp8 = match precision.as_deref() {
                None | Some("bf16") => false,
                Some("fp8") => true,
                Some(other) => {
                    return Err(Error::unknown(
                        Domain::Format,
                        "attention precision",
                        other,
                        &["bf16", "fp8"],
                    ))
                }
            };
            let s = AttnShape {
                batch: *batch,
                seq: *seq,
                heads: *heads,
                kv_heads: *kv_heads,
                head_dim: *head_dim,
                causal: *causal,
                fp8,
            };
            if [s.batch, s.seq, s.heads, s.kv_heads, s.head_dim]
                .iter()
                .any(|v| v.is_nan() || *v < 1.0)
            {
                return Err(Error::Shape(
                    "attention needs batch, seq, heads, kv_heads, head_dim >= 1".into(),
                ));
            }
            let (f, bw, bound) = attention_time(hw, &s)?;
            detail.insert("fwd_s", f);
            if *backward {
                detail.insert("bwd_s", bw);
            }
            let flops = s.fwd_flops() * if *backward { 3.5 } else { 1.0 };
            let t = f + if *backward { bw } else { 0.0 };
            OpReport {
                tflops: Some(flops / t / 1e12),
                ..OpReport::plain("attention", t, bound.name(), detail)
            }
        }
    })
}

/// Parse an op from JSON text (names the problem on failure).
pub fn parse_op(text: &str) -> Result<Op> {
    serde_json::from_str(text).map_err(|e| Error::Config {
        file: "op".into(),
        line: e.line(),
        msg: format!("{e} (ops: gemm, memory, copy, quantize, attention)"),
    })
}
