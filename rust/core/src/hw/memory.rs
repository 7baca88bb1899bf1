//! Memory-bound kernels: a pass reads and writes bytes and does per-element vector work;
//! its time is the larger of bytes over (HBM x efficiency) and work over the vector
//! ALUs, plus a launch gap. Quantization is a set of such passes: amax, quantize
//! (row-wise, column-wise, transposed copies), RHT, SR and scale conversions.

use super::gemm::Bound;
use super::machine::Hw;
use super::operand::{Elem, Operand};

/// Vector instructions per element and output of a quantize pass: block amax (abs, max),
/// scale multiply, convert, pack.
pub const QUANT_OPS: f64 = 6.0;
/// Vector instructions per element of an amax pass (abs, max).
pub const AMAX_OPS: f64 = 2.0;

/// Instructions per element of a size-n Hadamard (log2 n butterfly stages, signs, scale).
pub fn rht_ops(size: u32) -> f64 {
    if size == 0 {
        0.0
    } else {
        (size as f64).log2() + 2.0
    }
}

/// Instructions per element for stochastic rounding: Philox4x32-10 costs about 100
/// instructions per 128 random bits; a hardware SR convert (cvt.rs) needs 8 bits per
/// element, software SR 16 bits plus about 6 instructions of rounding logic; hardware
/// random bits (native "sr") leave one convert.
pub fn sr_ops(hw: &Hw) -> f64 {
    if hw.fused.sr {
        1.0
    } else if hw.hw_sr {
        100.0 / 16.0 + 1.0
    } else {
        100.0 / 8.0 + 6.0
    }
}

/// One memory-bound kernel (or a fused group counted as one launch each).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pass {
    pub read: f64,
    pub write: f64,
    /// Vector instructions.
    pub ops: f64,
    /// Exponentials.
    pub exps: f64,
    pub launches: f64,
    /// A quantize/amax kernel (uses the `quant` bandwidth efficiency, not `mem`).
    pub quant: bool,
}

pub fn pass_time(hw: &Hw, p: &Pass) -> (f64, Bound) {
    let eff = if p.quant { hw.eff.quant } else { hw.eff.mem };
    let t_mem = (p.read + p.write) / (hw.hbm_bps * eff);
    let t_vec = p.ops / (hw.vector_ops * hw.eff.vec);
    let t_exp = p.exps / hw.sfu;
    let (t, bound) = if t_mem >= t_vec && t_mem >= t_exp {
        (t_mem, Bound::Memory)
    } else if t_vec >= t_exp {
        (t_vec, Bound::Vector)
    } else {
        (t_exp, Bound::Sfu)
    };
    (t + p.launches * hw.eff.launch_s, bound)
}

/// One quantized output of a tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantOut {
    pub fmt: Operand,
    /// What the quantizer writes (E1M2 may be written as E2M3, emulation writes BF16).
    pub container: Elem,
    /// RHT size applied before quantizing this output (0 = none).
    pub rht: u32,
    pub sr: bool,
    /// SR uniforms four per Philox evaluation (rounding "sr4"): priced apart only by the
    /// emulation (native software SR is costed at 16 random bits per element either way).
    pub sr4: bool,
    /// SR uniforms sixteen per Philox evaluation, 8 bits each (rounding "sr16").
    pub sr16: bool,
    /// 2 when a transposed copy is written too (TN-only MMA with shared data).
    pub copies: u32,
    /// UE5M3 scales re-encoded as E4M3 + tensor scale afterwards.
    pub scale_conv: bool,
}

impl QuantOut {
    pub fn new(fmt: Operand) -> QuantOut {
        QuantOut {
            fmt,
            container: fmt.elem,
            rht: 0,
            sr: false,
            sr4: false,
            sr16: false,
            copies: 1,
            scale_conv: false,
        }
    }

    /// SR uniforms per Philox evaluation: 16 ("sr16"), 4 ("sr4") or 1.
    pub fn sr_group(&self) -> u32 {
        if self.sr16 {
            16
        } else if self.sr4 {
            4
        } else {
            1
        }
    }

    fn write_bytes(&self) -> f64 {
        let scales = if self.container == Elem::Bf16 {
            0.0
        } else {
            self.fmt.scale_bytes()
        };
        (self.container.bytes() + scales) * self.copies as f64
    }
}

/// Time of quantizing one tensor, by category.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QuantCost {
    pub amax: f64,
    pub quantize: f64,
    /// Extra time because of RHT (passes and arithmetic).
    pub rht: f64,
    /// Extra time because of stochastic rounding.
    pub sr: f64,
    /// Kernel launches.
    pub passes: f64,
}

impl QuantCost {
    pub fn total(&self) -> f64 {
        self.amax + self.quantize + self.rht + self.sr
    }

    pub fn add(&mut self, o: &QuantCost, times: f64) {
        self.amax += o.amax * times;
        self.quantize += o.quantize * times;
        self.rht += o.rht * times;
        self.sr += o.sr * times;
        self.passes += o.passes * times;
    }
}

/// Quantize `numel` elements of a `src_bytes` tensor into `outs`. A tensor scale is
/// recomputed each call when `refresh` is 1 (one amax pass covering the plain and the
/// rotated amax); outputs without RHT share one read, rotated outputs another (one read
/// for all with native RHT); fused quantization removes the quantize reads and launches.
pub fn quant_cost(
    hw: &Hw,
    numel: f64,
    src_bytes: f64,
    outs: &[QuantOut],
    refresh: u32,
) -> QuantCost {
    if outs.is_empty() || numel == 0.0 {
        return QuantCost::default();
    }
    let full = raw(hw, numel, src_bytes, outs, refresh);
    let mut tmp = outs.to_vec();
    tmp.iter_mut().for_each(|o| o.sr = false);
    let no_sr = raw(hw, numel, src_bytes, &tmp, refresh);
    tmp.iter_mut().for_each(|o| o.rht = 0);
    let base = raw(hw, numel, src_bytes, &tmp, refresh);
    QuantCost {
        amax: base.0,
        quantize: base.1,
        rht: (no_sr.0 + no_sr.1) - (base.0 + base.1),
        sr: (full.0 + full.1) - (no_sr.0 + no_sr.1),
        passes: full.2,
    }
}

/// (amax seconds, quantize seconds, launches)
fn raw(hw: &Hw, numel: f64, src_bytes: f64, outs: &[QuantOut], refresh: u32) -> (f64, f64, f64) {
    let fused = hw.fused.quant;
    let rot_ops = |o: &QuantOut| if hw.fused.rht { 0.0 } else { rht_ops(o.rht) };
    let mut amax_s = 0.0;
    let mut launches = 0.0;
    let needs_amax: Vec<&QuantOut> = outs
        .iter()
        .filter(|o| refresh == 1 && o.fmt.scale.needs_tensor_amax())
        .collect();
    if !needs_amax.is_empty() {
        let rotated = needs_amax.iter().map(|o| rot_ops(o)).fold(0.0, f64::max);
        let p = Pass {
            read: numel * src_bytes,
            ops: numel * (AMAX_OPS + rotated),
            launches: 1.0,
            quant: true,
            ..Pass::default()
        };
        amax_s = pass_time(hw, &p).0;
        launches += 1.0;
    }
    let has_plain = outs.iter().any(|o| o.rht == 0);
    let has_rot = outs.iter().any(|o| o.rht > 0);
    // TE-style kernels: plain copies from one read, rotated copies from another.
    let split = !hw.fused.rht && has_plain && has_rot;
    let groups: &[Option<bool>] = if split {
        &[Some(false), Some(true)]
    } else {
        &[None]
    };
    let mut quant_s = 0.0;
    for g in groups {
        let members: Vec<&QuantOut> = outs
            .iter()
            .filter(|o| g.is_none_or(|r| (o.rht > 0) == r))
            .collect();
        let sr = sr_ops(hw);
        let p = Pass {
            read: if fused { 0.0 } else { numel * src_bytes },
            write: numel * members.iter().map(|o| o.write_bytes()).sum::<f64>(),
            ops: numel
                * members
                    .iter()
                    .map(|o| QUANT_OPS + rot_ops(o) + if o.sr { sr } else { 0.0 })
                    .sum::<f64>(),
            launches: if fused { 0.0 } else { 1.0 },
            quant: true,
            ..Pass::default()
        };
        quant_s += pass_time(hw, &p).0;
        launches += p.launches;
    }
    for o in outs.iter().filter(|o| o.scale_conv) {
        let sb = numel * o.fmt.scale_bytes() * o.copies as f64;
        let p = Pass {
            read: 2.0 * sb,
            write: sb,
            ops: 4.0 * sb,
            launches: if fused { 0.0 } else { 2.0 },
            quant: true,
            ..Pass::default()
        };
        quant_s += pass_time(hw, &p).0;
        launches += p.launches;
    }
    (amax_s, quant_s, launches)
}
