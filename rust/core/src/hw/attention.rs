//! Flash attention: matmul FLOPs at the BF16 (or FP8) rate times an efficiency, overlapped
//! with the softmax exponentials on the SFUs; whichever is slower sets the time. The
//! backward pass does 2.5x the forward matmuls and recomputes the exponentials.
//!
//! The matmul time is tile-level, like the GEMM model: one CTA per (sequence, head,
//! 128-query block), in waves over the SMs; each walks its key blocks (causal: the
//! diagonal block is computed whole) and pays fixed cycles per tile (Q load, softmax
//! finish, O store). At short sequences and small head dims that fixed cost and the
//! diagonal waste dominate; at LLM shapes they are a few percent. Never below the
//! plain FLOP roofline.

use serde::{Deserialize, Serialize};

use crate::error::{Domain, Error, Result};

use super::gemm::Bound;
use super::machine::{Class, Hw};
use super::operand::Elem;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttnShape {
    /// Sequences.
    pub batch: f64,
    pub seq: f64,
    pub heads: f64,
    pub kv_heads: f64,
    pub head_dim: f64,
    #[serde(default = "yes")]
    pub causal: bool,
    /// Matmuls at the FP8 rate (FlashAttention-3 style) instead of BF16.
    #[serde(default)]
    pub fp8: bool,
}

fn yes() -> bool {
    true
}

impl AttnShape {
    /// Matmul FLOPs of the forward pass (QK^T and PV; half of them when causal).
    pub fn fwd_flops(&self) -> f64 {
        let full = 4.0 * self.batch * self.seq * self.seq * self.heads * self.head_dim;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    fn exps(&self) -> f64 {
        let full = self.batch * self.heads * self.seq * self.seq;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    fn io_bytes(&self) -> f64 {
        2.0 * self.batch * self.seq * self.head_dim * (2.0 * self.heads + 2.0 * self.kv_heads)
    }
}

/// Query and key block of a flash-attention tile.
const BLOCK: f64 = 128.0;

/// Fixed cycles per attention tile for GPUs whose file does not give
/// `efficiency.attention_tile_cycles`: the H200 fit (benchmarks/calibration/fit_emulation.py,
/// torch SDPA in the GPU-bound training-h200-run4 profiles, B=32 H=12 T=1024 D=64; the
/// host-bound run-2 fit was 20560), the only measurement there is.
pub const DEFAULT_TILE_CYCLES: f64 = 11220.0;

/// Seconds of the matmul part (`work` = 1 forward, 2.5 backward) by tiles.
fn tiled_mma_s(hw: &Hw, s: &AttnShape, rate: f64, work: f64) -> f64 {
    let q_blocks = (s.seq / BLOCK).ceil();
    let tiles = s.batch * s.heads * q_blocks;
    let waves = (tiles / hw.sms).ceil();
    let key_blocks = if s.causal {
        (q_blocks + 1.0) / 2.0
    } else {
        q_blocks
    };
    let block_flops = work * 4.0 * BLOCK * BLOCK * s.head_dim;
    let per_tile =
        key_blocks * block_flops / (rate / hw.sms) + hw.eff.attn_tile_cycles / hw.clock_hz;
    (waves * per_tile).max(work * s.fwd_flops() / rate)
}

/// The dense FP8 (E4M3) rate, if the GPU has one.
pub fn fp8_peak(hw: &Hw) -> Option<f64> {
    hw.kinds
        .iter()
        .filter(|k| k.class == Class::Fp8 && k.accepts(Elem::E4m3) && !k.hypothetical)
        .map(|k| k.flops)
        .reduce(f64::max)
}

/// (forward seconds, backward seconds, what bounds the forward)
pub fn attention_time(hw: &Hw, s: &AttnShape) -> Result<(f64, f64, Bound)> {
    let peak = if s.fp8 {
        fp8_peak(hw).ok_or_else(|| {
            Error::invalid(
                Domain::Hardware,
                format!("{} has no FP8 MMA for fp8 attention", hw.name),
            )
        })?
    } else {
        hw.bf16_peak()
    };
    let rate = peak * hw.eff.attention;
    let bw = hw.hbm_bps * hw.eff.mem;
    let t = |work: f64, exps: f64, bytes: f64| -> (f64, Bound) {
        let (mma, sfu, mem) = (tiled_mma_s(hw, s, rate, work), exps / hw.sfu, bytes / bw);
        let bound = if mma >= sfu && mma >= mem {
            Bound::Compute
        } else if sfu >= mem {
            Bound::Sfu
        } else {
            Bound::Memory
        };
        (mma.max(sfu).max(mem) + hw.eff.launch_s, bound)
    };
    let (fwd, bound) = t(1.0, s.exps(), s.io_bytes());
    let (bwd, _) = t(2.5, s.exps(), 2.5 * s.io_bytes());
    Ok((fwd, bwd, bound))
}
