//! Tile-level GEMM cycle model for one MMA kind.
//!
//! Per output tile (tm x tn, per SM) and per unit of K, the main loop takes
//! max(MMA cycles at the kind's sustained rate, operand bytes over the SM's share of the
//! operand-feed bandwidth). A tile adds fixed cycles (pipeline fill, exposed epilogue);
//! tiles run in waves over the SMs (wave quantization); split-K (any factor up to
//! `MAX_SPLIT`) is tried when the tiles alone leave SMs idle. Cycles are counted at the
//! per-clock rates of the nominal clock (`Hw::clock_hz`, the one the rates and fitted
//! efficiencies refer to) and run at `Hw::gemm_clock_hz` (higher when the workload leaves
//! power headroom, see `machine::EmulCost::eager_clock_hz`). The result is never below
//! the compute or HBM roofline at that clock.

use super::machine::{Hw, Kind};

/// A GEMM C[m, n] = A[m, k] B[k, n], `groups` times (grouped GEMM, e.g. MoE experts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub m: f64,
    pub n: f64,
    pub k: f64,
    pub groups: f64,
}

impl Shape {
    pub fn new(m: u64, n: u64, k: u64) -> Shape {
        Shape {
            m: m as f64,
            n: n as f64,
            k: k as f64,
            groups: 1.0,
        }
    }

    pub fn flops(&self) -> f64 {
        2.0 * self.m * self.n * self.k * self.groups
    }
}

/// What limited a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// MMA issue rate.
    Compute,
    /// Operand feed (L2 / shared-memory bandwidth) in the main loop.
    Feed,
    /// HBM bandwidth.
    Memory,
    /// Vector ALUs (memory-bound kernels with heavy per-element work).
    Vector,
    /// Exponentials (attention softmax).
    Sfu,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Compute => "compute",
            Bound::Feed => "feed",
            Bound::Memory => "memory",
            Bound::Vector => "vector",
            Bound::Sfu => "sfu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelTime {
    pub time_s: f64,
    pub bound: Bound,
    pub tile: (u32, u32),
    pub split: u32,
}

/// Largest split-K factor tried: enough to fill the SMs from a handful of tiles (a
/// long-K weight-gradient GEMM, e.g. 768x768x32768 = 18 tiles of 128x256 -> split 7).
/// A cap, not a fit: the FP32 partial-sum traffic priced below decides within it.
const MAX_SPLIT: u32 = 8;

/// Bytes of A, B and C as they cross HBM once.
pub fn hbm_bytes(s: &Shape, a_bytes: f64, b_bytes: f64, out_bytes: f64) -> f64 {
    s.groups * (s.m * s.k * a_bytes + s.n * s.k * b_bytes + s.m * s.n * out_bytes)
}

/// Lower bound of `kernel_time` (roofline at the sustained rate), for pruning.
pub fn lower_bound(
    hw: &Hw,
    kind: &Kind,
    s: &Shape,
    a_bytes: f64,
    b_bytes: f64,
    out_bytes: f64,
) -> f64 {
    let eff = hw.eff.mma[kind.class as usize];
    let t_mma = s.flops() / (kind.flops * eff) * hw.clock_hz / hw.gemm_clock_hz;
    let t_hbm = hbm_bytes(s, a_bytes, b_bytes, out_bytes) / (hw.hbm_bps * hw.eff.mem);
    t_mma.max(t_hbm) + hw.eff.launch_s
}

/// Time of one GEMM kernel with `kind`; operand bytes per element include block scales.
pub fn kernel_time(
    hw: &Hw,
    kind: &Kind,
    s: &Shape,
    a_bytes: f64,
    b_bytes: f64,
    out_bytes: f64,
) -> KernelTime {
    let eff = hw.eff.mma[kind.class as usize];
    let per_sm_clk = hw.sms * hw.clock_hz;
    let flops_clk = kind.flops * eff / per_sm_clk;
    let feed_clk = hw.l2_bps / per_sm_clk;
    let bw = hw.hbm_bps * hw.eff.mem;
    let t_hbm = hbm_bytes(s, a_bytes, b_bytes, out_bytes) / bw;
    let mut best = KernelTime {
        time_s: f64::INFINITY,
        bound: Bound::Compute,
        tile: (0, 0),
        split: 1,
    };
    for &(tm, tn) in &hw.tiles {
        let tiles = s.groups * (s.m / tm).ceil() * (s.n / tn).ceil();
        let mma = 2.0 * tm * tn / flops_clk;
        let feed = (tm * a_bytes + tn * b_bytes / hw.multicast) / feed_clk;
        let per_k = mma.max(feed);
        for split in (1..=MAX_SPLIT).map(f64::from) {
            if split > 1.0 && (tiles >= hw.sms || s.k / split < 256.0) {
                break;
            }
            let waves = (tiles * split / hw.sms).ceil();
            let k_each = (s.k / split).ceil();
            let cycles = waves * (k_each * per_k + hw.eff.tile_cycles);
            let mut t = cycles / hw.gemm_clock_hz;
            if split > 1.0 {
                // FP32 partial sums written and read back once.
                t += s.groups * s.m * s.n * 4.0 * split * 2.0 / bw;
            }
            let total = t.max(t_hbm) + hw.eff.launch_s;
            if total < best.time_s {
                let bound = if t_hbm >= t {
                    Bound::Memory
                } else if feed > mma {
                    Bound::Feed
                } else {
                    Bound::Compute
                };
                best = KernelTime {
                    time_s: total,
                    bound,
                    tile: (tm as u32, tn as u32),
                    split: split as u32,
                };
            }
        }
    }
    best
}
