//! Block-scaled 4-bit quantizers (numerics.md section 3, docs/conventions.md).
//!
//! A row-major (rows, cols) f32 array is quantized along its last axis (or, for
//! `Axis::First`, its transposed copy is). Each block of 16 or 32 consecutive
//! elements, or each 16x16 tile, gets one scale byte; elements become 4-bit
//! codes packed two per byte (element 2i in the low nibble). The scale rules:
//! - `floor` (OCP MX): e = floor_log2(amax) - emax_elem, clamped to [-127, 127];
//! - `rceil` (cuBLAS / TE / torchao RCEIL): e = ceil(log2(amax * f32(1/gmax)));
//! - `te` (Transformer Engine NVFP4, bit-exact), two-level with an FP32 S_enc;
//! - `torchao` (torchao nvfp4_quantize with a per-tensor scale), two-level.
//!
//! MX elements are x * 2^-e (an exact power of two, OCP semantics for every
//! scale byte); two-level elements are x * enc_b as the rule prescribes.

pub mod layout;
pub mod threads;

use rayon::prelude::*;

use crate::error::{Domain, Error, Result};
use crate::formats::{pow2, Element, MiniFloat, ScaleFormat};
use crate::rng;
use crate::rounding::Rounding;

/// How the block scale is derived from the block amax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Floor,
    Rceil,
    Te,
    Torchao,
}

pub const RULE_NAMES: &[&str] = &["floor", "rceil", "te", "torchao"];

impl Rule {
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "floor" => Ok(Rule::Floor),
            "rceil" => Ok(Rule::Rceil),
            "te" => Ok(Rule::Te),
            "torchao" => Ok(Rule::Torchao),
            _ => Err(Error::unknown(
                Domain::Format,
                "scale rule",
                name,
                RULE_NAMES,
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Rule::Floor => "floor",
            Rule::Rceil => "rceil",
            Rule::Te => "te",
            Rule::Torchao => "torchao",
        }
    }

    pub fn is_two_level(self) -> bool {
        matches!(self, Rule::Te | Rule::Torchao)
    }
}

/// Block layout: 1D blocks along the quantized axis, or 16x16 tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    Row(usize),
    Tile16,
}

impl Block {
    pub fn describe(self) -> String {
        match self {
            Block::Row(b) => b.to_string(),
            Block::Tile16 => "(16, 16)".to_string(),
        }
    }
}

/// Which axis of a 2-D (rows, cols) array the blocks run along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Row-wise: blocks along the last axis.
    Last,
    /// Column-wise: quantize the transposed copy along its last axis.
    First,
}

/// A complete block-scaled format.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Format {
    pub element: Element,
    pub scale: ScaleFormat,
    pub block: Block,
    pub rule: Rule,
    /// Two-level rules: the block-scale value the tensor amax maps to (smax in
    /// S_enc = smax * gmax / amax); 448 by default, lower for headroom.
    pub scale_max: f32,
}

pub const PRESETS: &[&str] = &["mxfp4", "nvfp4", "ue5m3", "e1m2", "int4", "int4-sm"];

impl Format {
    /// Build and validate a format. `rule` None picks floor for UE8M0, te otherwise;
    /// `scale_max` None picks 448 (two-level rules only).
    pub fn new(
        element: Element,
        scale: ScaleFormat,
        block: Block,
        rule: Option<Rule>,
        scale_max: Option<f32>,
    ) -> Result<Self> {
        let rule = rule.unwrap_or(match scale {
            ScaleFormat::Ue8m0 => Rule::Floor,
            _ => Rule::Te,
        });
        if let Block::Row(b) = block {
            if b != 16 && b != 32 {
                return Err(Error::invalid(
                    Domain::Format,
                    format!("block size {b} is not supported; valid: 16, 32, (16, 16)"),
                ));
            }
        }
        let ok = match scale {
            ScaleFormat::Ue8m0 => !rule.is_two_level(),
            _ => rule.is_two_level(),
        };
        if !ok {
            let valid: &[&str] = match scale {
                ScaleFormat::Ue8m0 => &["floor", "rceil"],
                _ => &["te", "torchao"],
            };
            return Err(Error::invalid(
                Domain::Format,
                format!(
                    "scale rule '{}' does not apply to scale format '{}'; valid: {}",
                    rule.name(),
                    scale.name(),
                    valid.join(", ")
                ),
            ));
        }
        let smax = scale_max.unwrap_or(448.0);
        if !(smax.is_finite() && smax > 0.0 && smax <= scale.max_value()) {
            return Err(Error::invalid(
                Domain::Format,
                format!(
                    "scale_max {smax} must be positive and at most the {} maximum {}",
                    scale.name(),
                    scale.max_value()
                ),
            ));
        }
        Ok(Format {
            element,
            scale,
            block,
            rule,
            scale_max: smax,
        })
    }

    /// A named preset (see PRESETS).
    pub fn preset(name: &str) -> Result<Self> {
        use Element::*;
        let (el, sc, b, rule) = match name.to_ascii_lowercase().as_str() {
            "mxfp4" => (E2M1, ScaleFormat::Ue8m0, 32, Rule::Floor),
            "nvfp4" => (E2M1, ScaleFormat::Ue4m3, 16, Rule::Te),
            "ue5m3" => (E2M1, ScaleFormat::Ue5m3 { finite_ff: false }, 16, Rule::Te),
            "e1m2" => (E1M2, ScaleFormat::Ue4m3, 16, Rule::Te),
            "int4" => (Int4, ScaleFormat::Ue4m3, 16, Rule::Te),
            "int4-sm" => (Int4Sm, ScaleFormat::Ue4m3, 16, Rule::Te),
            _ => {
                return Err(Error::unknown(
                    Domain::Format,
                    "format preset",
                    name,
                    PRESETS,
                ))
            }
        };
        Format::new(el, sc, Block::Row(b), Some(rule), None)
    }

    /// Elements per scale.
    pub fn block_elems(&self) -> usize {
        match self.block {
            Block::Row(b) => b,
            Block::Tile16 => 256,
        }
    }
}

/// Per-call options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub rounding: Rounding,
    pub seed: u64,
    /// Base Philox offset: element i (row-major, quantized layout) uses offset + i.
    pub offset: u64,
    /// Tensor amax to use instead of the measured one (periodic refresh).
    pub tensor_amax: Option<f32>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rounding: Rounding::Rtne,
            seed: 0,
            offset: 0,
            tensor_amax: None,
        }
    }
}

/// Result of a quantization, in the quantized orientation (rows, cols); for
/// `Axis::First` that is the transposed shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    pub codes: Vec<u8>,
    pub scales: Vec<u8>,
    pub tensor_scale: f32,
    pub amax: f32,
    pub rows: usize,
    pub cols: usize,
    pub scale_rows: usize,
    pub scale_cols: usize,
}

/// Per-tensor constants of a rule, and the element multiplier of every scale byte.
struct Tensor {
    /// Stored tensor_scale (S_enc for te, 1/per_tensor_scale for torchao, 1 for MX).
    tensor_scale: f32,
    /// te: S_enc * f32(1/gmax); torchao: per_tensor_scale.
    k: f32,
    gmax: f32,
    r_gmax: f32,
    emax: i32,
    scale_mf: Option<&'static MiniFloat>,
    scale_min_normal: f32,
    scale_max_value: f32,
    rule: Rule,
    /// Element multiplier for each scale byte (depends only on the byte and tensor):
    /// MX 2^(127 - byte); te min(1 / (f32(s) * (1/S_enc)), FLT_MAX); torchao (1/pts) / f32(s).
    mult: [f32; 256],
}

impl Tensor {
    fn new(fmt: &Format, amax: f32) -> Tensor {
        let gmax = fmt.element.gmax();
        let r_gmax = 1.0f32 / gmax;
        let smax_g = fmt.scale_max * gmax;
        let mut t = Tensor {
            tensor_scale: 1.0,
            k: 0.0,
            gmax,
            r_gmax,
            emax: fmt.element.emax(),
            scale_mf: fmt.scale.minifloat(),
            scale_min_normal: fmt.scale.minifloat().map_or(0.0, |m| m.min_normal()),
            scale_max_value: fmt.scale.max_value(),
            rule: fmt.rule,
            mult: [0.0; 256],
        };
        let sval = |b: usize| {
            fmt.scale
                .minifloat()
                .map_or(0.0, |m| m.decode_mag(b as u32))
        };
        match fmt.rule {
            Rule::Floor | Rule::Rceil => {
                for (b, m) in t.mult.iter_mut().enumerate().take(255) {
                    *m = pow2(127 - b as i32);
                }
            }
            Rule::Te => {
                let mut s_enc = (smax_g / amax).min(f32::MAX);
                if amax == 0.0 || s_enc == 0.0 {
                    s_enc = 1.0;
                }
                t.tensor_scale = s_enc;
                t.k = s_enc * r_gmax;
                let s_dec = 1.0 / s_enc;
                for (b, m) in t.mult.iter_mut().enumerate() {
                    *m = (1.0 / (sval(b) * s_dec)).min(f32::MAX);
                }
            }
            Rule::Torchao => {
                // torchao: per_tensor_scale = amax / (448 * 6). Where torchao divides by
                // zero or overflows 1/pts (amax == 0, or amax below ~2688 / FLT_MAX),
                // fourcast uses 1 (single-level scaling) instead of producing inf/NaN.
                let mut pts = amax / smax_g;
                if pts == 0.0 || !(1.0 / pts).is_finite() {
                    pts = 1.0;
                }
                t.k = pts;
                t.tensor_scale = 1.0 / pts;
                for (b, m) in t.mult.iter_mut().enumerate() {
                    *m = t.tensor_scale / sval(b);
                }
            }
        }
        t
    }

    /// (scale byte, element multiplier) of a block with amax `bamax`.
    #[inline(always)]
    fn block(&self, bamax: f32) -> (u8, f32) {
        let byte = match self.rule {
            Rule::Floor => {
                let fl = ((bamax.to_bits() >> 23) & 0xff) as i32 - 127;
                ((fl - self.emax).clamp(-127, 127) + 127) as u8
            }
            Rule::Rceil => e8m0_ceil(bamax * self.r_gmax),
            Rule::Te => {
                let mf = self.scale_mf.expect("two-level scale");
                mf.encode_rtne((bamax * self.k).min(f32::MAX)) as u8
            }
            Rule::Torchao => {
                let mf = self.scale_mf.expect("two-level scale");
                let bs = bamax / self.gmax;
                let v = (bs / self.k).clamp(self.scale_min_normal, self.scale_max_value);
                mf.encode_rtne(v) as u8
            }
        };
        (byte, self.mult[byte as usize])
    }
}

/// UE8M0 byte of 2^ceil(log2(d)) clamped to [2^-127, 2^127]: exponent field plus
/// one when the mantissa is non-zero (TE `float_to_e8m0`, PTX cvt.rp.satfinite.ue8m0).
#[inline]
pub fn e8m0_ceil(d: f32) -> u8 {
    let bits = d.to_bits() & 0x7fff_ffff;
    let field = bits >> 23;
    let man = bits & 0x7f_ffff;
    if field == 0 {
        // Subnormal: at most 2^-127 -> byte 0, above -> byte 1 (2^-126).
        return (man > 0x40_0000) as u8;
    }
    (field + (man != 0) as u32).min(254) as u8
}

/// Bits of the largest |x| of a block: a max over the magnitude bits (same order as
/// the values for non-negative floats, NaN/Inf above every finite value), which vectorises.
#[inline]
fn block_amax_bits(xb: &[f32]) -> u32 {
    xb.iter()
        .fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff))
}

/// Largest |x| and the non-finite count / first index, in one parallel pass.
fn scan(x: &[f32]) -> (f32, usize, usize) {
    const CH: usize = 1 << 16;
    x.par_chunks(CH)
        .enumerate()
        .map(|(ci, ch)| {
            let maxbits = ch
                .iter()
                .fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
            if maxbits < 0x7f80_0000 {
                return (f32::from_bits(maxbits), 0, usize::MAX);
            }
            let mut m = 0f32;
            let (mut count, mut first) = (0usize, usize::MAX);
            for (i, v) in ch.iter().enumerate() {
                if v.is_finite() {
                    m = m.max(v.abs());
                } else {
                    count += 1;
                    first = first.min(ci * CH + i);
                }
            }
            (m, count, first)
        })
        .reduce(
            || (0f32, 0usize, usize::MAX),
            |a, b| (a.0.max(b.0), a.1 + b.1, a.2.min(b.2)),
        )
}

fn check_shape(fmt: &Format, rows: usize, cols: usize, axis: Axis) -> Result<()> {
    let (r, c) = match axis {
        Axis::Last => (rows, cols),
        Axis::First => (cols, rows),
    };
    let ax = if axis == Axis::Last { "-1" } else { "0" };
    let bad = match fmt.block {
        Block::Row(b) => c % b != 0,
        Block::Tile16 => r % 16 != 0 || c % 16 != 0,
    };
    if bad {
        let what = match fmt.block {
            Block::Row(b) => format!("the length along axis {ax} is not a multiple of {b}"),
            Block::Tile16 => "both dimensions must be multiples of 16".to_string(),
        };
        return Err(Error::Shape(format!(
            "cannot quantize shape ({rows}, {cols}) with block {} along axis {ax}: {what} (fourcast does not pad)",
            fmt.block.describe()
        )));
    }
    Ok(())
}

/// Codes of a run of N elements with RTNE or SR, written so the loop vectorises (fixed
/// N, branch-free): `mag(a, u)` maps |y| (already clamped to gmax) and its uniform to
/// the magnitude code; `twos` selects two's complement (INT4).
#[inline(always)]
fn run_codes<const N: usize, F: Fn(f32, f32) -> u32>(
    xs: &[f32; N],
    u: &[f32; N],
    mult: f32,
    g: f32,
    twos: bool,
    mag: F,
    out: &mut [u8],
) {
    // 32-bit lanes throughout (narrowing only at the final pack) keep this SIMD-friendly.
    let mut c = [0u32; N];
    for j in 0..N {
        let bits = (xs[j] * mult).to_bits();
        let a = f32::from_bits(bits & 0x7fff_ffff);
        let m = mag(if a > g { g } else { a }, u[j]);
        let neg = bits >> 31;
        c[j] = if twos {
            (m ^ 0u32.wrapping_sub(neg)).wrapping_add(neg) & 0xf
        } else {
            m | (neg << 3)
        };
    }
    let out = &mut out[..N / 2];
    for j in 0..N / 2 {
        out[j] = (c[2 * j] | (c[2 * j + 1] << 4)) as u8;
    }
}

/// 32-bit-lane versions of the element RTNE maps (same results, see formats.rs).
#[inline(always)]
fn e2m1_rtne_mag32(a: f32) -> u32 {
    (a > 0.25) as u32
        + (a >= 0.75) as u32
        + (a > 1.25) as u32
        + (a >= 1.75) as u32
        + (a > 2.5) as u32
        + (a >= 3.5) as u32
        + (a > 5.0) as u32
}

#[inline(always)]
fn uniform_rtne_mag32(a: f32) -> u32 {
    // a in [0, 7]: a + 2^23 rounds to an integer (ties to even) held in the low bits.
    (a + 8_388_608.0).to_bits() & 0xf
}

/// E2M1 SR of a in [0, 6]: lo = the grid value below (step 0.5 / 1 / 2 by binade, exact
/// power-of-two arithmetic), up when u * step < a - lo (docs/conventions.md).
#[inline(always)]
fn e2m1_sr_mag32(a: f32, u: f32) -> u32 {
    let (step, inv, base) = if a >= 4.0 {
        (2.0f32, 0.5f32, 4u32)
    } else if a >= 2.0 {
        (1.0, 1.0, 2)
    } else {
        (0.5, 2.0, 0)
    };
    let k = (a * inv).floor();
    let up = (u * step < a - k * step) as u32;
    k as i32 as u32 + base + up
}

/// SR on the integer grid 0..7 (a already in grid units): up when u < a - floor(a).
#[inline(always)]
fn uniform_sr_mag32(a: f32, u: f32) -> u32 {
    let k = a.floor();
    k as i32 as u32 + (u < a - k) as u32
}

#[inline(always)]
fn fast_fixed<const N: usize>(
    el: Element,
    sr: bool,
    g: f32,
    xs: &[f32; N],
    u: &[f32; N],
    mult: f32,
    out: &mut [u8],
) {
    match (el, sr) {
        (Element::E2M1, false) => run_codes(xs, u, mult, g, false, |a, _| e2m1_rtne_mag32(a), out),
        (Element::E1M2, false) => run_codes(
            xs,
            u,
            mult,
            g,
            false,
            |a, _| uniform_rtne_mag32(a * 4.0),
            out,
        ),
        (Element::Int4Sm, false) => {
            run_codes(xs, u, mult, g, false, |a, _| uniform_rtne_mag32(a), out)
        }
        (Element::Int4, false) => {
            run_codes(xs, u, mult, g, true, |a, _| uniform_rtne_mag32(a), out)
        }
        (Element::E2M1, true) => run_codes(xs, u, mult, g, false, e2m1_sr_mag32, out),
        (Element::E1M2, true) => run_codes(
            xs,
            u,
            mult,
            g,
            false,
            |a, u| uniform_sr_mag32(a * 4.0, u),
            out,
        ),
        (Element::Int4Sm, true) => run_codes(xs, u, mult, g, false, uniform_sr_mag32, out),
        (Element::Int4, true) => run_codes(xs, u, mult, g, true, uniform_sr_mag32, out),
    }
}

/// RTNE or SR of a run of 16 or 32 elements through the vectorisable path.
#[inline(always)]
fn fast_run<const N: usize>(
    el: Element,
    t: &Tensor,
    xs: &[f32; N],
    mult: f32,
    opts: &Options,
    idx: usize,
    out: &mut [u8],
) {
    let mut u = [0f32; N];
    let sr = opts.rounding.is_stochastic();
    if sr {
        draws(opts, idx, &mut u);
    }
    fast_fixed(el, sr, t.gmax, xs, &u, mult, out)
}

/// SR uniforms of elements idx.. of the quantized layout, from the rounding's stream.
#[inline]
fn draws(opts: &Options, idx: usize, u: &mut [f32]) {
    if opts.rounding == Rounding::Sr4 {
        rng::rand_run_x4(opts.seed, opts.offset, idx as u64, u);
    } else if opts.rounding == Rounding::Sr16 {
        rng::rand_run_x16(opts.seed, opts.offset, idx as u64, u);
    } else {
        rng::rand_run(opts.seed, opts.offset.wrapping_add(idx as u64), u);
    }
}

/// Encode one run of elements (a block, or a tile row) into packed bytes; `idx` is
/// the run's first element index (SR offsets).
#[inline(always)]
fn encode_run(
    el: Element,
    t: &Tensor,
    xs: &[f32],
    mult: f32,
    opts: &Options,
    idx: usize,
    out: &mut [u8],
) {
    if opts.rounding != Rounding::Away {
        if let Ok(x16) = <&[f32; 16]>::try_from(xs) {
            return fast_run(el, t, x16, mult, opts, idx, out);
        }
        if let Ok(x32) = <&[f32; 32]>::try_from(xs) {
            return fast_run(el, t, x32, mult, opts, idx, out);
        }
    }
    // Generic path (ties away, other run lengths): the integer rounding of formats.rs.
    let mut u = [0f32; 32];
    let u = &mut u[..xs.len()];
    if opts.rounding.is_stochastic() {
        draws(opts, idx, u);
    }
    let g = t.gmax;
    for (j, o) in out.iter_mut().enumerate() {
        let (i0, i1) = (2 * j, 2 * j + 1);
        let ca = el.encode((xs[i0] * mult).clamp(-g, g), opts.rounding, u[i0]);
        let cb = el.encode((xs[i1] * mult).clamp(-g, g), opts.rounding, u[i1]);
        *o = ca | (cb << 4);
    }
}

/// Bits of the largest |x| seen (>= 0x7f80_0000 means a NaN/Inf was there).
type MaxBits = u32;

fn quantize_rows(
    x: &[f32],
    t: &Tensor,
    el: Element,
    opts: &Options,
    b: usize,
) -> (Vec<u8>, Vec<u8>, MaxBits) {
    let n = x.len();
    let mut codes = vec![0u8; n / 2];
    let mut scales = vec![0u8; n / b];
    let per_task = (1 << 14) / b;
    let seen = codes
        .par_chunks_mut(per_task * b / 2)
        .zip(scales.par_chunks_mut(per_task))
        .zip(x.par_chunks(per_task * b))
        .enumerate()
        .map(|(i, ((c, s), xs))| {
            let task = RowTask {
                t,
                el,
                opts,
                b,
                first: i * per_task * b,
            };
            rows_task_best(&task, xs, c, s)
        })
        .reduce(|| 0, u32::max);
    (codes, scales, seen)
}

/// What one task of the row-wise pass works with besides its slices: the tensor
/// state, element grid, options, block size and the flat index of its first element.
struct RowTask<'a> {
    t: &'a Tensor,
    el: Element,
    opts: &'a Options,
    b: usize,
    first: usize,
}

/// One task of the row-wise pass: blocks of `xs` into codes `c` and scale bytes `s`.
/// Returns the largest magnitude bits seen.
#[inline(always)]
fn rows_task(task: &RowTask, xs: &[f32], c: &mut [u8], s: &mut [u8]) -> MaxBits {
    let b = task.b;
    let mut seen = 0u32;
    for (k, (xb, cb)) in xs.chunks(b).zip(c.chunks_mut(b / 2)).enumerate() {
        let bits = block_amax_bits(xb);
        seen = seen.max(bits);
        let (byte, mult) = task.t.block(f32::from_bits(bits));
        s[k] = byte;
        let first = task.first + k * b;
        encode_run(task.el, task.t, xb, mult, task.opts, first, cb);
    }
    seen
}

/// `rows_task` compiled for AVX2 (8-lane loops); same IEEE operations, same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_task_avx2(task: &RowTask, xs: &[f32], c: &mut [u8], s: &mut [u8]) -> MaxBits {
    rows_task(task, xs, c, s)
}

fn rows_task_best(task: &RowTask, xs: &[f32], c: &mut [u8], s: &mut [u8]) -> MaxBits {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { rows_task_avx2(task, xs, c, s) };
    }
    rows_task(task, xs, c, s)
}

fn quantize_tiles(
    x: &[f32],
    rows: usize,
    cols: usize,
    t: &Tensor,
    el: Element,
    opts: &Options,
) -> (Vec<u8>, Vec<u8>, MaxBits) {
    let mut codes = vec![0u8; rows * cols / 2];
    let mut scales = vec![0u8; (rows / 16) * (cols / 16)];
    if rows == 0 || cols == 0 {
        return (codes, scales, 0);
    }
    let seen = codes
        .par_chunks_mut(16 * cols / 2)
        .zip(scales.par_chunks_mut(cols / 16))
        .zip(x.par_chunks(16 * cols))
        .enumerate()
        .map(|(tr, ((c, s), xs))| {
            let mut seen = 0u32;
            for (tc, sb) in s.iter_mut().enumerate() {
                let c0 = tc * 16;
                let row = |r: usize| &xs[r * cols + c0..r * cols + c0 + 16];
                let bits = (0..16).map(|r| block_amax_bits(row(r))).max().unwrap_or(0);
                seen = seen.max(bits);
                let (byte, mult) = t.block(f32::from_bits(bits));
                *sb = byte;
                for r in 0..16 {
                    let out = &mut c[(r * cols + c0) / 2..(r * cols + c0) / 2 + 8];
                    encode_run(el, t, row(r), mult, opts, (tr * 16 + r) * cols + c0, out);
                }
            }
            seen
        })
        .reduce(|| 0, u32::max);
    (codes, scales, seen)
}

/// Quantize a row-major (rows, cols) array. NaN/Inf are refused (NonFinite error
/// with the count and the first flat index of `x`).
pub fn quantize(
    x: &[f32],
    rows: usize,
    cols: usize,
    axis: Axis,
    fmt: &Format,
    opts: &Options,
) -> Result<Quantized> {
    if x.len() != rows * cols {
        return Err(Error::Shape(format!(
            "data length {} does not match shape ({rows}, {cols})",
            x.len()
        )));
    }
    check_shape(fmt, rows, cols, axis)?;
    if let Some(a) = opts.tensor_amax {
        if !(a.is_finite() && a >= 0.0) {
            return Err(Error::invalid(
                Domain::Format,
                format!("tensor_amax must be finite and non-negative, got {a}"),
            ));
        }
    }
    threads::run(|| {
        // Two-level rules need the tensor amax before the block pass; otherwise the
        // block pass itself notices NaN/Inf and the scan only runs to report them.
        let nonfinite = || {
            let (_, count, first) = scan(x);
            Error::NonFinite {
                count,
                first_index: first,
            }
        };
        let measured = if fmt.rule.is_two_level() && opts.tensor_amax.is_none() {
            let (m, count, _) = scan(x);
            if count > 0 {
                return Err(nonfinite());
            }
            Some(m)
        } else {
            None
        };
        let t = Tensor::new(fmt, opts.tensor_amax.or(measured).unwrap_or(0.0));
        let transposed;
        let (data, r, c) = match axis {
            Axis::Last => (x, rows, cols),
            Axis::First => {
                transposed = layout::transpose(x, rows, cols);
                (&transposed[..], cols, rows)
            }
        };
        let (codes, scales, seen, sr, sc) = match fmt.block {
            Block::Row(b) => {
                let (co, s, seen) = quantize_rows(data, &t, fmt.element, opts, b);
                (co, s, seen, r, c / b)
            }
            Block::Tile16 => {
                let (co, s, seen) = quantize_tiles(data, r, c, &t, fmt.element, opts);
                (co, s, seen, r / 16, c / 16)
            }
        };
        if seen >= 0x7f80_0000 {
            return Err(nonfinite());
        }
        let amax = opts
            .tensor_amax
            .or(measured)
            .unwrap_or(f32::from_bits(seen));
        Ok(Quantized {
            codes,
            scales,
            tensor_scale: t.tensor_scale,
            amax,
            rows: r,
            cols: c,
            scale_rows: sr,
            scale_cols: sc,
        })
    })
}

/// Decode packed codes and scale bytes of a tensor quantized in orientation
/// (rows, cols): x_hat = value(code) * f32(scale) / tensor_scale. Returns the
/// original orientation (transposed back for `Axis::First`).
pub fn dequantize(
    codes: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    tensor_scale: f32,
    axis: Axis,
    fmt: &Format,
) -> Result<Vec<f32>> {
    let (sr, sc) = match fmt.block {
        Block::Row(b) => (rows, if cols % b == 0 { cols / b } else { usize::MAX }),
        Block::Tile16 => (rows / 16, cols / 16),
    };
    let tiles_ok = fmt.block != Block::Tile16 || (rows % 16 == 0 && cols % 16 == 0);
    if cols % 2 != 0
        || codes.len() * 2 != rows * cols
        || sc == usize::MAX
        || !tiles_ok
        || scales.len() != sr * sc
    {
        return Err(Error::Shape(format!(
            "codes ({} bytes) and scales ({} bytes) do not fit shape ({rows}, {cols}) with block {}",
            codes.len(),
            scales.len(),
            fmt.block.describe()
        )));
    }
    let table = fmt.element.table();
    let scale = fmt.scale;
    let out = threads::run(|| {
        let mut out = vec![0f32; rows * cols];
        if rows == 0 || cols == 0 {
            return out;
        }
        // Every run of 16 elements shares one scale: decode its 16 possible values
        // once ((value * scale) / tensor_scale, the exact per-element operations),
        // then look each code up.
        let seg_scale = |r: usize, seg: usize| match fmt.block {
            Block::Row(b) => r * sc + seg * 16 / b,
            Block::Tile16 => (r / 16) * sc + seg,
        };
        out.par_chunks_mut(cols)
            .zip(codes.par_chunks(cols / 2))
            .enumerate()
            .for_each(|(r, (o, c))| {
                for (seg, (os, cs)) in o.chunks_mut(16).zip(c.chunks(8)).enumerate() {
                    let sv = scale.decode(scales[seg_scale(r, seg)]);
                    let mut lut = [0f32; 16];
                    for (l, &v) in lut.iter_mut().zip(table.iter()) {
                        *l = v * sv / tensor_scale;
                    }
                    for (pair, &byte) in os.chunks_mut(2).zip(cs) {
                        pair[0] = lut[(byte & 0xf) as usize];
                        pair[1] = lut[(byte >> 4) as usize];
                    }
                }
            });
        match axis {
            Axis::Last => out,
            Axis::First => layout::transpose(&out, rows, cols),
        }
    });
    Ok(out)
}

/// Codes of values with unit scale in one codec (elements saturate at +-gmax,
/// wide and scale formats at their largest finite value). SR uses
/// rand(seed, offset + i) for value i (sr4: rand_x4(seed, offset, i); sr16: rand_x16). NaN/Inf are refused.
pub fn encode_values(
    x: &[f32],
    codec: crate::formats::Codec,
    mode: Rounding,
    seed: u64,
    offset: u64,
) -> Result<Vec<u8>> {
    threads::run(|| {
        let (_, count, first) = scan(x);
        if count > 0 {
            return Err(Error::NonFinite {
                count,
                first_index: first,
            });
        }
        Ok(x.par_iter()
            .enumerate()
            .map(|(i, &v)| {
                let u = if mode == Rounding::Sr {
                    rng::rand(seed, offset.wrapping_add(i as u64))
                } else if mode == Rounding::Sr4 {
                    rng::rand_x4(seed, offset, i as u64)
                } else if mode == Rounding::Sr16 {
                    rng::rand_x16(seed, offset, i as u64)
                } else {
                    0.0
                };
                codec.encode(v, mode, u)
            })
            .collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(x: &[f32], rows: usize, cols: usize, fmt: &str) -> Quantized {
        quantize(
            x,
            rows,
            cols,
            Axis::Last,
            &Format::preset(fmt).unwrap(),
            &Options::default(),
        )
        .unwrap()
    }

    #[test]
    fn mxfp4_floor_basic() {
        let mut x = vec![0f32; 32];
        x[0] = 6.0;
        x[1] = -3.0;
        x[2] = 0.7;
        let r = q(&x, 1, 32, "mxfp4");
        // amax 6 -> floor_log2 = 2 -> e = 0 -> byte 127.
        assert_eq!(r.scales, vec![127]);
        assert_eq!(r.codes[0], 0x7 | (0xd << 4));
        assert_eq!(r.codes[1] & 0xf, 0x1); // 0.7 -> 0.5
    }

    #[test]
    fn nvfp4_roundtrip_small() {
        let x: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.73).sin() * 3.0).collect();
        let fmt = Format::preset("nvfp4").unwrap();
        let r = quantize(&x, 2, 32, Axis::Last, &fmt, &Options::default()).unwrap();
        let y = dequantize(&r.codes, &r.scales, 2, 32, r.tensor_scale, Axis::Last, &fmt).unwrap();
        for (a, b) in x.iter().zip(&y) {
            // Largest half step of E2M1 is 1, times a block scale of at most ~amax/6.
            assert!((a - b).abs() <= r.amax / 6.0 * 1.01, "{a} {b}");
        }
    }

    #[test]
    fn shape_and_nonfinite_errors() {
        let fmt = Format::preset("nvfp4").unwrap();
        let e = quantize(&[0.0; 20], 1, 20, Axis::Last, &fmt, &Options::default()).unwrap_err();
        assert!(e.to_string().contains("(1, 20)") && e.to_string().contains("16"));
        let mut x = vec![0f32; 32];
        x[5] = f32::NAN;
        x[9] = f32::INFINITY;
        match quantize(&x, 1, 32, Axis::Last, &fmt, &Options::default()) {
            Err(Error::NonFinite { count, first_index }) => {
                assert_eq!((count, first_index), (2, 5))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn axis_first_equals_transpose() {
        let (r, c) = (32, 48);
        let x: Vec<f32> = (0..r * c)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0)
            .collect();
        let fmt = Format::preset("nvfp4").unwrap();
        let a = quantize(&x, r, c, Axis::First, &fmt, &Options::default()).unwrap();
        let t = layout::transpose(&x, r, c);
        let b = quantize(&t, c, r, Axis::Last, &fmt, &Options::default()).unwrap();
        assert_eq!(a, b);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_pass_equals_the_portable_pass() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        // Ties, zeros, subnormals, huge values and ordinary ones.
        let x: Vec<f32> = (0..4096)
            .map(|i| {
                let u = rng::rand(3, i as u64);
                match i % 7 {
                    0 => {
                        [0.25f32, 0.75, 2.5, 5.0, -3.5, 0.0, -0.0][(i / 7) % 7]
                            * (1 << (i % 5)) as f32
                    }
                    1 => (u - 0.5) * 1e-40,
                    2 => (u - 0.5) * 3e37,
                    _ => (u - 0.5) * 8.0,
                }
            })
            .collect();
        let presets = ["mxfp4", "nvfp4", "ue5m3", "e1m2", "int4", "int4-sm"];
        for name in presets {
            for rule in [None, Some(Rule::Rceil), Some(Rule::Torchao)] {
                let mut fmt = Format::preset(name).unwrap();
                match (rule, fmt.rule.is_two_level()) {
                    (Some(Rule::Rceil), false) | (Some(Rule::Torchao), true) => {
                        fmt.rule = rule.unwrap()
                    }
                    (None, _) => {}
                    _ => continue,
                }
                for rounding in [Rounding::Rtne, Rounding::Away, Rounding::Sr] {
                    let opts = Options {
                        rounding,
                        seed: 5,
                        offset: 9,
                        tensor_amax: None,
                    };
                    let t = Tensor::new(&fmt, 3.0);
                    let b = fmt.block_elems();
                    let (mut c1, mut s1) = (vec![0u8; x.len() / 2], vec![0u8; x.len() / b]);
                    let (mut c2, mut s2) = (c1.clone(), s1.clone());
                    let task = RowTask {
                        t: &t,
                        el: fmt.element,
                        opts: &opts,
                        b,
                        first: 0,
                    };
                    let m1 = rows_task(&task, &x, &mut c1, &mut s1);
                    // SAFETY: AVX2 support checked at the top of the test.
                    let m2 = unsafe { rows_task_avx2(&task, &x, &mut c2, &mut s2) };
                    assert_eq!((c1, s1, m1), (c2, s2, m2), "{name} {rule:?} {rounding:?}");
                }
            }
        }
    }

    #[test]
    fn fast_sr_and_rtne_maps_equal_the_integer_rounding() {
        type SrMap = fn(f32, f32) -> u32;
        let cases: [(Element, SrMap, f32); 3] = [
            (Element::E2M1, e2m1_sr_mag32, 1.0),
            (Element::E1M2, uniform_sr_mag32, 4.0),
            (Element::Int4Sm, uniform_sr_mag32, 1.0),
        ];
        for (el, sr, unit) in cases {
            let g = el.gmax();
            // Every bf16-like pattern in [0, gmax] and a spread of uniforms, including 0,
            // the largest one and the exact threshold (a - lo) / step of each value.
            let mut values: Vec<f32> = (0..0x8000u32)
                .map(|h| f32::from_bits(h << 16))
                .filter(|a| *a <= g)
                .collect();
            values.extend((0..2000).map(|i| rng::rand(11, i) * g));
            for &a in &values {
                let lo = el
                    .grid()
                    .decode_mag(el.grid().encode_mag(a, Rounding::Sr, 0.999_999_9));
                let step = if a >= 4.0 / unit {
                    2.0 / unit
                } else if a >= 2.0 / unit {
                    1.0 / unit
                } else {
                    0.5 / unit
                };
                let step = if el == Element::E2M1 {
                    step
                } else {
                    1.0 / unit
                };
                let thr = (a - lo) / step;
                for u in [
                    0.0,
                    0.25,
                    0.5,
                    0.999_999_94,
                    thr,
                    f32::from_bits(thr.to_bits().wrapping_sub(1)),
                    rng::rand(5, a.to_bits() as u64),
                ] {
                    // Only values tl.rand can produce: 0 or at least 2^-31 (so u * step
                    // is exact; a subnormal u would not be).
                    if !(0.0..1.0).contains(&u) || (u > 0.0 && u < 4.656_612_7e-10) {
                        continue;
                    }
                    let want = el.grid().encode_mag(a, Rounding::Sr, u);
                    assert_eq!(sr(a * unit, u), want, "{el:?} a={a} u={u}");
                }
                assert_eq!(
                    el.rtne_mag(a) as u32,
                    el.grid().encode_mag(a, Rounding::Rtne, 0.0)
                );
            }
        }
    }

    #[test]
    fn rceil_bytes() {
        assert_eq!(e8m0_ceil(1.0), 127);
        assert_eq!(e8m0_ceil(1.5), 128);
        assert_eq!(e8m0_ceil(0.0), 0);
        assert_eq!(e8m0_ceil(pow2(-127)), 0);
        assert_eq!(e8m0_ceil(pow2(-127) * 1.5), 1);
        assert_eq!(e8m0_ceil(f32::MAX), 254);
    }

    #[test]
    fn rules_validate() {
        let e = Format::new(
            Element::E2M1,
            ScaleFormat::Ue8m0,
            Block::Row(32),
            Some(Rule::Te),
            None,
        );
        assert!(e.is_err());
        assert!(Format::new(
            Element::E2M1,
            ScaleFormat::Ue4m3,
            Block::Row(24),
            None,
            None
        )
        .is_err());
        assert!(Format::preset("nope")
            .unwrap_err()
            .to_string()
            .contains("mxfp4"));
    }
}
