//! Flash attention: matmul FLOPs at the BF16 rate (times a fitted efficiency) overlapped
//! with the softmax exponentials on the SFUs; whichever is slower sets the time. The
//! backward pass does 2.5x the forward matmuls and recomputes the exponentials.

use serde::{Deserialize, Serialize};

use super::gemm::Bound;
use super::machine::Hw;

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

/// (forward seconds, backward seconds, what bounds the forward)
pub fn attention_time(hw: &Hw, s: &AttnShape) -> (f64, f64, Bound) {
    let rate = hw.bf16_peak() * hw.eff.attention;
    let bw = hw.hbm_bps * hw.eff.mem;
    let t = |flops: f64, exps: f64, bytes: f64| -> (f64, Bound) {
        let (mma, sfu, mem) = (flops / rate, exps / hw.sfu, bytes / bw);
        let bound = if mma >= sfu && mma >= mem {
            Bound::Compute
        } else if sfu >= mem {
            Bound::Sfu
        } else {
            Bound::Memory
        };
        (mma.max(sfu).max(mem) + hw.eff.launch_s, bound)
    };
    let (fwd, bound) = t(s.fwd_flops(), s.exps(), s.io_bytes());
    let (bwd, _) = t(2.5 * s.fwd_flops(), s.exps(), 2.5 * s.io_bytes());
    (fwd, bwd, bound)
}
