//! Choosing the native path for a GEMM's operand formats: which MMA kind, which scale
//! mode, which container each operand travels in, and what conversion that needs.
//!
//! An operand fits a kind when its element is exact in one of the kind's containers
//! (E1M2 in FP6 E2M3, E2M1 in FP8, anything in BF16) and its scales fit a mode of the
//! kind: the same scale type with a block that divides the operand's block; UE5M3
//! re-encoded as E4M3 under a new tensor scale; UE8M0 folded into FP8 elements (a
//! row-scaled FP8 GEMM); per-tensor scales anywhere. BF16 kinds take any operand
//! dequantized (emulation). The fastest valid path wins, conversions included.

use super::gemm::{kernel_time, lower_bound, Bound, Shape};
use super::machine::{Hw, Kind, Mode};
use super::memory::{pass_time, Pass};
use super::operand::{Elem, Operand, ScaleFmt, ALL_ELEMS};

/// How an operand reaches the MMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conv {
    /// As quantized (possibly in a wider exact container, e.g. E1M2 as E2M3).
    None,
    /// Dequantized to BF16 (emulation).
    Dequant,
    /// UE8M0 block scales folded into FP8 elements against a per-row power of two.
    FoldPow2,
    /// UE5M3 block scales re-encoded as E4M3 under a new FP32 tensor scale.
    ScaleToE4m3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub container: Elem,
    pub conv: Conv,
}

impl Placement {
    /// Bytes per element the MMA reads (container + block scales the mode carries).
    pub fn bytes(&self, mode: Mode) -> f64 {
        let scale = match mode {
            Mode::Block(_, b) if self.conv != Conv::Dequant => 1.0 / b as f64,
            _ => 0.0,
        };
        self.container.bytes() + scale
    }
}

/// A chosen way to run one GEMM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Path {
    pub kind: usize,
    pub mode: Mode,
    pub a: Placement,
    pub b: Placement,
    /// GEMM kernel time.
    pub gemm_s: f64,
    /// Conversion passes when operands arrive packed in their own format.
    pub conv_s: f64,
    pub bound: Bound,
    pub tile: (u32, u32),
    pub split: u32,
}

impl Path {
    pub fn total_s(&self) -> f64 {
        self.gemm_s + self.conv_s
    }
}

fn fits_scale(op: &Operand, container: Elem, mode: Mode) -> Option<Conv> {
    if container == Elem::Bf16 {
        // BF16 kinds have no block scales; quantized operands are dequantized.
        return (mode == Mode::NoBlock).then_some(if op.is_quantized() {
            Conv::Dequant
        } else {
            Conv::None
        });
    }
    match (op.scale, mode) {
        (ScaleFmt::None, _) => None,
        (ScaleFmt::Tensor, _) => Some(Conv::None),
        (s, Mode::Block(ms, mb)) if s == ms && op.block % mb == 0 => Some(Conv::None),
        (ScaleFmt::Ue5m3, Mode::Block(ScaleFmt::E4m3, mb)) if op.block % mb == 0 => {
            Some(Conv::ScaleToE4m3)
        }
        // Folding 2^e into FP8 elements is exact only for narrow 4-bit grids (E2M1 spans
        // about 4 binades, leaving E4M3 room for the block exponents); an MXFP8 block already
        // spans E4M3's range, so it cannot be folded.
        (ScaleFmt::Ue8m0, Mode::NoBlock) if container.bits() == 8 && op.elem.bits() == 4 => {
            Some(Conv::FoldPow2)
        }
        _ => None,
    }
}

/// The narrowest exact container of `mask` for `op` under `mode`.
pub fn place(op: &Operand, mask: u16, mode: Mode) -> Option<Placement> {
    let mut best: Option<Placement> = None;
    for c in ALL_ELEMS {
        if mask & c.bit() == 0 || !op.elem.exact_in(c) {
            continue;
        }
        let Some(conv) = fits_scale(op, c, mode) else {
            continue;
        };
        let better = match best {
            None => true,
            Some(b) => {
                c.bits() < b.container.bits()
                    || (c.bits() == b.container.bits()
                        && b.conv != Conv::None
                        && conv == Conv::None)
            }
        };
        if better {
            best = Some(Placement { container: c, conv });
        }
    }
    best
}

/// Cost of converting `numel` elements of `op` that arrive packed into `p`.
pub fn conversion(hw: &Hw, op: &Operand, p: &Placement, numel: f64) -> f64 {
    let pass = match p.conv {
        Conv::None => return 0.0,
        Conv::Dequant | Conv::FoldPow2 => Pass {
            read: numel * op.packed_bytes(),
            write: numel * p.container.bytes(),
            ops: numel * 3.0,
            launches: 1.0,
            ..Pass::default()
        },
        Conv::ScaleToE4m3 => Pass {
            read: numel * op.scale_bytes() * 2.0,
            write: numel * op.scale_bytes(),
            ops: numel * op.scale_bytes() * 4.0,
            launches: 2.0,
            ..Pass::default()
        },
    };
    pass_time(hw, &pass).0
}

/// The best path with one kind, if the operands fit it at all.
pub fn best_with_kind(
    hw: &Hw,
    idx: usize,
    s: &Shape,
    a: &Operand,
    b: &Operand,
    out_bytes: f64,
    cutoff: f64,
) -> Option<Path> {
    let kind: &Kind = &hw.kinds[idx];
    let mut best: Option<Path> = None;
    for &mode in &kind.modes {
        let (Some(pa), Some(pb)) = (place(a, kind.a, mode), place(b, kind.b, mode)) else {
            continue;
        };
        let (ab, bb) = (pa.bytes(mode), pb.bytes(mode));
        let conv_s = conversion(hw, a, &pa, s.groups * s.m * s.k)
            + conversion(hw, b, &pb, s.groups * s.n * s.k);
        let limit = best.map_or(cutoff, |p| p.total_s().min(cutoff));
        if lower_bound(hw, kind, s, ab, bb, out_bytes) + conv_s >= limit {
            continue;
        }
        let t = kernel_time(hw, kind, s, ab, bb, out_bytes);
        let path = Path {
            kind: idx,
            mode,
            a: pa,
            b: pb,
            gemm_s: t.time_s,
            conv_s,
            bound: t.bound,
            tile: t.tile,
            split: t.split,
        };
        if best.is_none_or(|p| path.total_s() < p.total_s()) {
            best = Some(path);
        }
    }
    best
}

/// The fastest valid path over every kind (there is always one: BF16 takes anything).
pub fn choose(hw: &Hw, s: &Shape, a: &Operand, b: &Operand, out_bytes: f64) -> Path {
    let mut best: Option<Path> = None;
    for idx in 0..hw.kinds.len() {
        let cutoff = best.map_or(f64::INFINITY, |p| p.total_s());
        if let Some(p) = best_with_kind(hw, idx, s, a, b, out_bytes, cutoff) {
            if best.is_none_or(|q| p.total_s() < q.total_s()) {
                best = Some(p);
            }
        }
    }
    best.expect("every profile has a bf16 kind (validated)")
}

/// The best path of every kind that accepts the operands (for reports and tests).
pub fn candidates(hw: &Hw, s: &Shape, a: &Operand, b: &Operand, out_bytes: f64) -> Vec<Path> {
    (0..hw.kinds.len())
        .filter_map(|i| best_with_kind(hw, i, s, a, b, out_bytes, f64::INFINITY))
        .collect()
}

/// One line saying what the path does, e.g. "e1m2 as e2m3 via mxf8f6f4 (ue8m0/32)".
pub fn describe(hw: &Hw, p: &Path, a: &Operand, b: &Operand) -> String {
    let kind = &hw.kinds[p.kind];
    let side = |op: &Operand, pl: &Placement| -> String {
        let base = op.label();
        match pl.conv {
            Conv::Dequant => format!("{base} dequantized to bf16 (emulated)"),
            Conv::FoldPow2 => format!(
                "{base} with ue8m0 scales folded into {} (row-scaled; exact while a row's block exponents span <= 14 binades)",
                pl.container.name()
            ),
            Conv::ScaleToE4m3 => format!(
                "{base} with ue5m3 scales re-encoded as e4m3 + tensor scale (lossy if a tensor's scales span > 17.8 binades)"
            ),
            Conv::None if pl.container != op.elem && op.is_quantized() => {
                format!("{base} as {}", pl.container.name())
            }
            Conv::None => base,
        }
    };
    let sa = side(a, &p.a);
    let sb = side(b, &p.b);
    let operands = if sa == sb { sa } else { format!("{sa} x {sb}") };
    let tag = if kind.hypothetical { " [what-if]" } else { "" };
    format!("{operands} via {}{tag} ({})", kind.name, p.mode.label())
}
