//! `Hw`: a profile compiled to plain numbers (SI units) for fast evaluation, with the
//! what-if natives applied. Everything the model computes reads from here.

use crate::error::{Domain, Error, Result};

use super::native::{Feature, Native};
use super::operand::{Elem, ScaleFmt, ALL_ELEMS};
use super::profile::Profile;

/// Efficiency class of an MMA kind (one fitted main-loop efficiency each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Bf16 = 0,
    Fp8 = 1,
    Fp4 = 2,
}

/// Which operand layouts a kind needs K-major (TN-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KMajor {
    None,
    SubByte,
    All,
}

/// Block-scale mode of an MMA kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No block scales: per-tensor (or per-row/column) scales applied in the epilogue.
    NoBlock,
    Block(ScaleFmt, u32),
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        if s == "none" {
            return Some(Mode::NoBlock);
        }
        let (fmt, block) = s.split_once('/')?;
        let scale = match fmt {
            "ue8m0" => ScaleFmt::Ue8m0,
            "ue4m3" | "e4m3" => ScaleFmt::E4m3,
            "ue5m3" => ScaleFmt::Ue5m3,
            _ => return None,
        };
        Some(Mode::Block(scale, block.parse().ok()?))
    }

    pub fn label(&self) -> String {
        match self {
            Mode::NoBlock => "no block scales".into(),
            Mode::Block(s, b) => format!("{}/{}", s.name(), b),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Kind {
    pub name: String,
    /// Bit masks of accepted containers (Elem::bit) for A and B.
    pub a: u16,
    pub b: u16,
    pub modes: Vec<Mode>,
    /// Dense FLOP/s of the chip with this kind.
    pub flops: f64,
    pub class: Class,
    pub k_major: KMajor,
    /// Added by a what-if (`native`), not in the shipped part.
    pub hypothetical: bool,
}

impl Kind {
    /// True if an operand stored in `container` must be K-major for this kind.
    pub fn needs_k_major(&self, container: Elem) -> bool {
        match self.k_major {
            KMajor::None => false,
            KMajor::SubByte => container.bits() < 8,
            KMajor::All => true,
        }
    }

    pub fn accepts(&self, e: Elem) -> bool {
        self.a & e.bit() != 0 && self.b & e.bit() != 0
    }
}

/// Fitted efficiencies (fractions of peak) and fixed costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Eff {
    pub mma: [f64; 3],
    pub tile_cycles: f64,
    pub mem: f64,
    pub quant: f64,
    pub vec: f64,
    pub attention: f64,
    pub launch_s: f64,
    pub comm: f64,
    /// Fixed cycles per flash-attention tile.
    pub attn_tile_cycles: f64,
}

/// Fitted costs of the measured runs' own execution (see `profile::Emulation`), in GPU
/// time (the kernels an op launched, no host waits): one call of fourcast's Triton
/// quantizer is `call_s + elems * s_per_elem + rotated * (rht or strip_rht)_s_per_elem +
/// stochastic * sr_s_per_elem + stochastic4 * sr4_s_per_elem + stochastic16 *
/// sr16_s_per_elem + amax pass + programs * amax_tile_s - overlapped *
/// prefetch_saving_s_per_elem - stochastic16 * sr16_int_saving_s_per_elem - gathered *
/// gather_saving_s_per_elem` (the amax pass: `amax * amax_s_per_elem`, plus `amax *
/// amax_rht_s_per_elem` when a copy has an RHT, whose amax the pass measures rotated;
/// amax: the input elements when the call measures a tensor amax; rounding "sr" draws one
/// Philox4x32-10 per element and copy, "sr4" one per four elements, "sr16" one per
/// sixteen; the sr16 term only for quantizer revisions whose sr16 rounds in integers, the
/// gather term only for revisions that gather, ops.rs `quant_kernel`). Both kinds of call
/// run the strip kernel; a call with SR uses its narrower SR tile, which prices its
/// rotation differently (`rht_s_per_elem`; a copy with an RHT of 16 `rht16_sr_s_per_elem`)
/// from the plain tile (`strip_rht_s_per_elem`).
/// From revision 13 an RTNE row+col call without an RHT on 4-bit formats with 1-D blocks
/// runs the Gluon kernel instead: `call_s + amax pass + gluon_time_factor * (that price -
/// call_s - amax pass)` (the amax pass is its own kernel on either route, scaled by
/// `gluon_amax(_rht)_time_factor` from revision 15); from revision 14 at
/// `gluon_one_lane_time_factor`, its "sr16" calls with blocks of 16 at
/// `gluon_sr16_time_factor` and its calls with a column RHT of 16 at `gluon_rht_time_factor`
/// (from revision 16 the RTNE ones at `gluon_rht_rtne_time_factor`, the "sr16" ones with a
/// decoded column copy at `gluon_rht_decoded_time_factor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmulCost {
    pub call_s: f64,
    pub s_per_elem: f64,
    pub rht_s_per_elem: f64,
    /// As `rht_s_per_elem`, for a copy rotated by an RHT of 16 in a call with SR (TE's dY
    /// call; absent from the file: `rht_s_per_elem`).
    pub rht16_sr_s_per_elem: f64,
    pub strip_rht_s_per_elem: f64,
    pub sr_s_per_elem: f64,
    pub sr4_s_per_elem: f64,
    pub sr16_s_per_elem: f64,
    /// Per input element of a call's amax pass (two-level formats measuring their amax).
    pub amax_s_per_elem: f64,
    /// Extra per input element of the amax pass of a call with an RHT on any copy (the pass
    /// rotates to measure the rotated copy's amax).
    pub amax_rht_s_per_elem: f64,
    /// Per strip-kernel program of a call that records the amax in-kernel (single-level formats).
    pub amax_tile_s: f64,
    /// Saved per element written whose tile's load overlapped the previous tile's quantize
    /// (strip programs of several row tiles).
    pub prefetch_saving_s_per_elem: f64,
    /// Saved per element written with "sr16" by the integer form (quantizer revision 11 on).
    pub sr16_int_saving_s_per_elem: f64,
    /// Saved per input element of a row+col call whose strip programs of several tiles
    /// store the packed column copy's bytes once (quantizer revision 12 on).
    pub gather_saving_s_per_elem: f64,
    /// An RTNE row+col call on the Gluon kernel (revision 13 on) costs `call_s` plus this
    /// fraction of the rest of the strip kernel's price.
    pub gluon_time_factor: f64,
    /// As `gluon_time_factor`, for the RTNE calls of revision 14 on (a block of 16 in one lane).
    pub gluon_one_lane_time_factor: f64,
    /// As `gluon_time_factor`, for the "sr16" row+col calls with blocks of 16 that revision
    /// 14 on runs on the Gluon kernel.
    pub gluon_sr16_time_factor: f64,
    /// As `gluon_time_factor`, for the row+col calls with a column RHT of 16 (blocks of 16, the
    /// column copy packed) that revision 14 on runs on the Gluon kernel.
    pub gluon_rht_time_factor: f64,
    /// As `gluon_rht_time_factor`, for the RTNE ones from revision 16 (two row tiles a program).
    pub gluon_rht_rtne_time_factor: f64,
    /// As `gluon_rht_time_factor`, for the "sr16" ones whose column copy is decoded (revision 16 on).
    pub gluon_rht_decoded_time_factor: f64,
    /// As `gluon_time_factor`, for every call of an f32 input (revision 17 on) but those with a
    /// row RHT (`gluon_row_rht_time_factor`).
    pub gluon_f32_time_factor: f64,
    /// As `gluon_time_factor`, for the calls with a row RHT of the block size (revision 18 on:
    /// MXFP4's X and W calls).
    pub gluon_row_rht_time_factor: f64,
    /// As `gluon_time_factor`, for the "sr16" calls on blocks of 32 (revision 18 on: MXFP4's dY).
    pub gluon_block32_sr16_time_factor: f64,
    /// A row+col call's amax pass on rowcol_gluon.py's kernel (revision 15 on; no RHT) costs
    /// this fraction of strip.py's (`amax_s_per_elem` per input element).
    pub gluon_amax_time_factor: f64,
    /// As `gluon_amax_time_factor`, for an amax pass with a column RHT of 16 (of strip.py's
    /// whole rotated pass, `amax_rht_s_per_elem` included).
    pub gluon_amax_rht_time_factor: f64,
    /// As `gluon_amax_rht_time_factor`, from quantizer revision 20 (a bf16 input's column RHT
    /// in f32 where exact, f64 only where a bound calls for it).
    pub gluon_amax_rht_split_time_factor: f64,
    /// From quantizer revision 21, a bf16 input's RTNE call with both copies packed and a
    /// column RHT of 16 (one row tile at 80 registers) over its revision-20 price.
    pub gluon_rht_packed_rtne_time_factor: f64,
    /// As `gluon_rht_packed_rtne_time_factor`, for its "sr16" call (TE's dY codes).
    pub gluon_rht_packed_sr16_time_factor: f64,
    /// An amax pass over an f32 input over the same pass over a bf16 one, per kernel and
    /// rotation: strip.py's (plain, rotated), rowcol_gluon.py's (plain, column RHT of 16).
    pub amax_f32_time_factor: f64,
    pub amax_rht_f32_time_factor: f64,
    pub gluon_amax_f32_time_factor: f64,
    pub gluon_amax_rht_f32_time_factor: f64,
    /// Fixed cost of one profiled eager torch GEMM call.
    pub eager_call_s: f64,
    /// Clock the profiled eager GEMMs ran at: a training step leaves the chip power
    /// headroom (GEMMs are a fraction of it), so its GEMMs run above the sustained clock
    /// the isolated back-to-back calibration GEMMs measure.
    pub eager_clock_hz: f64,
    /// Kernel time of an emulated GEMM through fourcast's cuBLASLt call against torch's.
    pub lt_time_factor: f64,
}

/// Hardware features switched on by what-if natives that are not MMA kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fused {
    /// Random bits for SR come from hardware (no Philox work in the quantizer).
    pub sr: bool,
    /// The quantizer rotates on the fly: no RHT arithmetic, rotated and plain copies
    /// and their amaxes come from one read.
    pub rht: bool,
    /// Quantization folded into the producing kernel: no separate read or launch.
    pub quant: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hw {
    pub name: String,
    pub display: String,
    pub vendor: String,
    pub sms: f64,
    /// The clock the tensor rates and fitted efficiencies refer to.
    pub clock_hz: f64,
    /// The clock GEMM kernels run at (`clock_hz`, except for profiled eager GEMMs).
    pub gemm_clock_hz: f64,
    /// Vector instructions per second (FP32 FMA counts once).
    pub vector_ops: f64,
    /// Exponentials per second.
    pub sfu: f64,
    pub hbm_bps: f64,
    pub hbm_bytes: f64,
    pub l2_bps: f64,
    /// Scale-up bandwidth per GPU, both directions together (bytes/s).
    pub link_bps: f64,
    pub hw_sr: bool,
    pub tiles: Vec<(f64, f64)>,
    pub multicast: f64,
    pub kinds: Vec<Kind>,
    pub eff: Eff,
    pub fused: Fused,
    /// How the measured runs executed on this GPU (`[emulation]`), if fitted.
    pub emulation: Option<EmulCost>,
    /// Natives applied, as given ("ue5m3@0.5", ...).
    pub natives: Vec<String>,
    pub notes: Vec<String>,
}

fn mask(names: &[String]) -> u16 {
    names
        .iter()
        .filter_map(|n| Elem::parse(n))
        .fold(0, |m, e| m | e.bit())
}

impl Hw {
    pub fn from_profile(p: &Profile) -> Hw {
        let kinds = p
            .mma
            .iter()
            .map(|k| Kind {
                name: k.name.clone(),
                a: mask(&k.a),
                b: mask(&k.b),
                modes: k.scales.iter().filter_map(|s| Mode::parse(s)).collect(),
                flops: k.tflops.value * 1e12,
                class: match k.class.as_str() {
                    "bf16" => Class::Bf16,
                    "fp8" => Class::Fp8,
                    _ => Class::Fp4,
                },
                k_major: match k.k_major_only.as_str() {
                    "all" => KMajor::All,
                    "subbyte" => KMajor::SubByte,
                    _ => KMajor::None,
                },
                hypothetical: false,
            })
            .collect();
        let e = &p.efficiency;
        Hw {
            name: p.name.clone(),
            display: p.display.clone(),
            vendor: p.vendor.clone(),
            sms: p.chip.sms.value,
            clock_hz: p.chip.clock_ghz.value * 1e9,
            gemm_clock_hz: p.chip.clock_ghz.value * 1e9,
            vector_ops: p.chip.vector_tflops.value * 1e12 / 2.0,
            sfu: p.chip.sfu_texp_s.value * 1e12,
            hbm_bps: p.memory.hbm_tbs.value * 1e12,
            hbm_bytes: p.memory.hbm_gb.value * 1e9,
            l2_bps: p.memory.l2_tbs.value * 1e12,
            link_bps: p.links.scaleup_gbs.value * 1e9,
            hw_sr: p.features.hw_sr.value,
            tiles: p
                .gemm
                .tiles
                .iter()
                .map(|t| (t[0] as f64, t[1] as f64))
                .collect(),
            multicast: p.gemm.multicast as f64,
            kinds,
            eff: Eff {
                mma: [e.mma_bf16.value, e.mma_fp8.value, e.mma_fp4.value],
                tile_cycles: e.tile_overhead_cycles.value,
                mem: e.mem.value,
                quant: e.quant.value,
                vec: e.vec.value,
                attention: e.attention.value,
                launch_s: e.launch_us.value * 1e-6,
                comm: e.comm.value,
                attn_tile_cycles: e
                    .attention_tile_cycles
                    .as_ref()
                    .map_or(super::attention::DEFAULT_TILE_CYCLES, |n| n.value),
            },
            fused: Fused::default(),
            emulation: p.emulation.as_ref().map(|e| EmulCost {
                call_s: e.triton_quant_call_us.value * 1e-6,
                s_per_elem: e.triton_quant_ns_per_elem.value * 1e-9,
                rht_s_per_elem: e.triton_quant_rht_ns_per_elem.value * 1e-9,
                rht16_sr_s_per_elem: e
                    .triton_quant_rht16_sr_ns_per_elem
                    .as_ref()
                    .unwrap_or(&e.triton_quant_rht_ns_per_elem)
                    .value
                    * 1e-9,
                strip_rht_s_per_elem: e
                    .triton_quant_strip_rht_ns_per_elem
                    .as_ref()
                    .unwrap_or(&e.triton_quant_rht_ns_per_elem)
                    .value
                    * 1e-9,
                sr_s_per_elem: optional_ns(&e.triton_quant_sr_ns_per_elem),
                sr4_s_per_elem: optional_ns(
                    e.triton_quant_sr4_ns_per_elem
                        .as_ref()
                        .or(e.triton_quant_sr_ns_per_elem.as_ref()),
                ),
                sr16_s_per_elem: optional_ns(
                    e.triton_quant_sr16_ns_per_elem
                        .as_ref()
                        .or(e.triton_quant_sr4_ns_per_elem.as_ref())
                        .or(e.triton_quant_sr_ns_per_elem.as_ref()),
                ),
                amax_s_per_elem: optional_ns(&e.triton_quant_amax_ns_per_elem),
                amax_rht_s_per_elem: optional_ns(&e.triton_quant_amax_rht_ns_per_elem),
                amax_tile_s: optional_ns(&e.triton_quant_amax_tile_ns),
                prefetch_saving_s_per_elem: optional_ns(
                    &e.triton_quant_prefetch_saving_ns_per_elem,
                ),
                sr16_int_saving_s_per_elem: optional_ns(
                    &e.triton_quant_sr16_int_saving_ns_per_elem,
                ),
                gather_saving_s_per_elem: optional_ns(&e.triton_quant_gather_saving_ns_per_elem),
                gluon_time_factor: optional_factor(&e.triton_quant_gluon_time_factor),
                gluon_one_lane_time_factor: optional_factor(
                    &e.triton_quant_gluon_one_lane_time_factor,
                ),
                gluon_sr16_time_factor: optional_factor(&e.triton_quant_gluon_sr16_time_factor),
                gluon_rht_time_factor: optional_factor(&e.triton_quant_gluon_rht_time_factor),
                gluon_rht_rtne_time_factor: optional_factor(
                    &e.triton_quant_gluon_rht_rtne_time_factor,
                ),
                gluon_rht_decoded_time_factor: optional_factor(
                    &e.triton_quant_gluon_rht_decoded_time_factor,
                ),
                gluon_f32_time_factor: optional_factor(&e.triton_quant_gluon_f32_time_factor),
                gluon_row_rht_time_factor: optional_factor(
                    &e.triton_quant_gluon_row_rht_time_factor,
                ),
                gluon_block32_sr16_time_factor: optional_factor(
                    &e.triton_quant_gluon_block32_sr16_time_factor,
                ),
                gluon_amax_time_factor: optional_factor(&e.triton_quant_gluon_amax_time_factor),
                gluon_amax_rht_time_factor: optional_factor(
                    &e.triton_quant_gluon_amax_rht_time_factor,
                ),
                gluon_amax_rht_split_time_factor: e
                    .triton_quant_gluon_amax_rht_split_time_factor
                    .as_ref()
                    .or(e.triton_quant_gluon_amax_rht_time_factor.as_ref())
                    .map_or(1.0, |n| n.value),
                gluon_rht_packed_rtne_time_factor: optional_factor(
                    &e.triton_quant_gluon_rht_packed_rtne_time_factor,
                ),
                gluon_rht_packed_sr16_time_factor: optional_factor(
                    &e.triton_quant_gluon_rht_packed_sr16_time_factor,
                ),
                amax_f32_time_factor: optional_factor(&e.triton_quant_amax_f32_time_factor),
                amax_rht_f32_time_factor: optional_factor(&e.triton_quant_amax_rht_f32_time_factor),
                gluon_amax_f32_time_factor: optional_factor(
                    &e.triton_quant_gluon_amax_f32_time_factor,
                ),
                gluon_amax_rht_f32_time_factor: optional_factor(
                    &e.triton_quant_gluon_amax_rht_f32_time_factor,
                ),
                eager_call_s: e.torch_eager_call_us.value * 1e-6,
                eager_clock_hz: e
                    .torch_eager_gemm_clock_ghz
                    .as_ref()
                    .unwrap_or(&p.chip.clock_ghz)
                    .value
                    * 1e9,
                lt_time_factor: e
                    .cublaslt_gemm_time_factor
                    .as_ref()
                    .map_or(1.0, |n| n.value),
            }),
            natives: vec![],
            notes: vec![],
        }
    }

    /// Dense BF16 FLOP/s (the MFU reference).
    pub fn bf16_peak(&self) -> f64 {
        self.kinds
            .iter()
            .filter(|k| k.accepts(Elem::Bf16))
            .map(|k| k.flops)
            .fold(0.0, f64::max)
    }

    /// The fastest shipped FP4-class kind taking E2M1 (the reference for native rates).
    fn fp4_reference(&self) -> Option<&Kind> {
        self.kinds
            .iter()
            .filter(|k| k.class == Class::Fp4 && k.accepts(Elem::E2m1) && !k.hypothetical)
            .max_by(|x, y| x.flops.total_cmp(&y.flops))
    }

    /// A copy with the what-if natives added (see `native`).
    pub fn with_natives(&self, natives: &[Native]) -> Result<Hw> {
        let mut hw = self.clone();
        if natives.is_empty() {
            return Ok(hw);
        }
        let (ref_flops, ref_modes, ref_kmajor) = match self.fp4_reference() {
            Some(k) => (k.flops, k.modes.clone(), k.k_major),
            None => {
                let fp8 = self
                    .kinds
                    .iter()
                    .filter(|k| k.class == Class::Fp8)
                    .map(|k| k.flops)
                    .fold(0.0, f64::max);
                if fp8 == 0.0 {
                    return Err(Error::invalid(
                        Domain::Hardware,
                        format!(
                            "{}: no FP8 or FP4 kind to scale a native rate from",
                            self.name
                        ),
                    ));
                }
                hw.notes.push(format!(
                    "{} has no FP4 kind: native kinds assume FP4 = 2x the FP8 rate",
                    self.name
                ));
                (
                    2.0 * fp8,
                    vec![Mode::Block(ScaleFmt::Ue8m0, 32)],
                    KMajor::All,
                )
            }
        };
        let has = |f: Feature| natives.iter().any(|n| n.feature == f);
        let mut elems = Elem::E2m1.bit();
        if has(Feature::E1m2) {
            elems |= Elem::E1m2.bit();
        }
        if has(Feature::Int4) {
            elems |= Elem::Int4.bit() | Elem::Int4Sm.bit();
        }
        let mut extra_modes = vec![];
        if has(Feature::Ue4m3) {
            extra_modes.push(Mode::Block(ScaleFmt::E4m3, 16));
        }
        if has(Feature::Ue5m3) {
            extra_modes.extend([
                Mode::Block(ScaleFmt::Ue5m3, 16),
                Mode::Block(ScaleFmt::Ue5m3, 32),
            ]);
        }
        for n in natives {
            let (name, a, modes) = match n.feature {
                Feature::E1m2 | Feature::Int4 => {
                    let mut modes = ref_modes.clone();
                    modes.extend(extra_modes.iter().copied());
                    (n.feature.name(), elems, modes)
                }
                Feature::Ue5m3 => (
                    "ue5m3",
                    elems,
                    vec![
                        Mode::Block(ScaleFmt::Ue5m3, 16),
                        Mode::Block(ScaleFmt::Ue5m3, 32),
                    ],
                ),
                Feature::Ue4m3 => ("ue4m3", elems, vec![Mode::Block(ScaleFmt::E4m3, 16)]),
                Feature::Sr => {
                    hw.fused.sr = true;
                    continue;
                }
                Feature::Rht => {
                    hw.fused.rht = true;
                    continue;
                }
                Feature::FusedQuant => {
                    hw.fused.quant = true;
                    continue;
                }
            };
            hw.kinds.push(Kind {
                name: format!("native-{name}"),
                a,
                b: a,
                modes,
                flops: ref_flops * n.rate,
                class: Class::Fp4,
                k_major: ref_kmajor,
                hypothetical: true,
            });
        }
        hw.natives = natives.iter().map(|n| n.label()).collect();
        Ok(hw)
    }

    /// Names of the elements a kind accepts (for reports).
    pub fn elem_names(mask: u16) -> Vec<&'static str> {
        ALL_ELEMS
            .iter()
            .filter(|e| mask & e.bit() != 0)
            .map(|e| e.name())
            .collect()
    }
}

/// Seconds of an optional emulation term given in ns (absent: 0, the term not fitted).
fn optional_ns<'a>(term: impl Into<Option<&'a super::profile::Num>>) -> f64 {
    term.into().map_or(0.0, |n| n.value * 1e-9)
}

/// A time factor of the emulation, 1 (no change) where the file has none.
fn optional_factor(term: &Option<super::profile::Num>) -> f64 {
    term.as_ref().map_or(1.0, |n| n.value)
}
