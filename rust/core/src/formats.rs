//! Bit layouts of every element grid and scale format, and exact f32 <-> code
//! conversion (numerics.md sections 1-2, docs/conventions.md "Codes").
//!
//! Every small float here is described by one [`MiniFloat`]: exponent bits,
//! mantissa bits, bias, sign, and the largest finite magnitude code. Rounding
//! happens in the integer domain on the f32 significand, so RTNE, ties-away and
//! stochastic rounding are exact for every input, subnormals included.

use crate::error::{Domain, Error, Result};
use crate::rounding::{round_shift, Rounding};

/// A small binary float: `ebits` exponent bits, `mbits` mantissa bits, IEEE-style
/// subnormals (exponent field 0), no infinities used (encoding saturates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniFloat {
    pub ebits: u32,
    pub mbits: u32,
    /// Exponent bias; may be negative (INT4-SM is e1m2 with bias -1).
    pub bias: i32,
    pub signed: bool,
    /// Largest finite magnitude code (encoding saturates here).
    pub max_code: u32,
}

impl MiniFloat {
    const fn new(ebits: u32, mbits: u32, bias: i32, signed: bool, max_code: u32) -> Self {
        MiniFloat {
            ebits,
            mbits,
            bias,
            signed,
            max_code,
        }
    }

    /// Bit position of the sign (number of magnitude bits).
    pub const fn sign_shift(&self) -> u32 {
        self.ebits + self.mbits
    }

    /// Magnitude code of a finite, non-negative `a` (sign bit ignored), saturated
    /// at `max_code`. `u` is the uniform draw, used only by [`Rounding::Sr`].
    #[inline]
    pub fn encode_mag(&self, a: f32, mode: Rounding, u: f32) -> u32 {
        let bits = a.to_bits() & 0x7fff_ffff;
        let field = (bits >> 23) as i32;
        let frac = (bits & 0x7f_ffff) as u64;
        // f32 value = m * 2^(e - 23); subnormal f32 have no hidden bit.
        let (m, e) = if field == 0 {
            (frac, -126)
        } else {
            (frac | 0x80_0000, field - 127)
        };
        if m == 0 {
            return 0;
        }
        let emin = 1 - self.bias;
        // Bits to drop so that one unit is the target's ulp at this exponent.
        let drop = 23 - self.mbits as i32 + (emin - e).max(0);
        let q = round_shift(m, drop as u32, mode, u) as i64;
        let code = if e >= emin {
            (((e + self.bias - 1) as i64) << self.mbits) + q
        } else {
            q
        };
        code.clamp(0, self.max_code as i64) as u32
    }

    /// RTNE magnitude code of a finite, non-negative `a`: a bit-level fast path for
    /// the normal range (round the f32 significand to `mbits` with one add), the
    /// integer path of [`encode_mag`](Self::encode_mag) for everything else.
    #[inline]
    pub fn encode_rtne(&self, a: f32) -> u32 {
        let bits = a.to_bits() & 0x7fff_ffff;
        let field = (bits >> 23) as i32;
        if field - 127 >= 1 - self.bias && field < 0xff {
            let shift = 23 - self.mbits;
            let r = bits + ((1 << (shift - 1)) - 1) + ((bits >> shift) & 1);
            let code = (r >> shift) as i64 - (((127 - self.bias) as i64) << self.mbits);
            return code.min(self.max_code as i64) as u32;
        }
        self.encode_mag(a, Rounding::Rtne, 0.0)
    }

    /// Value of a magnitude code (exact in f32 for every format here).
    #[inline]
    pub fn decode_mag(&self, code: u32) -> f32 {
        let field = (code >> self.mbits) as i32;
        let man = code & ((1 << self.mbits) - 1);
        let emin = 1 - self.bias;
        if field == 0 {
            pow2(emin - self.mbits as i32) * man as f32
        } else {
            pow2(field - self.bias - self.mbits as i32) * ((1 << self.mbits) + man) as f32
        }
    }

    /// Largest finite value.
    pub fn max_value(&self) -> f32 {
        self.decode_mag(self.max_code)
    }

    /// Smallest positive value (subnormal when the format has them).
    pub fn min_positive(&self) -> f32 {
        self.decode_mag(1)
    }

    /// Smallest positive normal value.
    pub fn min_normal(&self) -> f32 {
        self.decode_mag(1 << self.mbits)
    }
}

/// 2^e as f32 for e in [-149, 127] (exact, subnormals included).
#[inline]
pub fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (e + 149))
    }
}

pub const E2M1: MiniFloat = MiniFloat::new(2, 1, 1, true, 7);
pub const E1M2: MiniFloat = MiniFloat::new(1, 2, 1, true, 7);
/// Integer magnitudes 0..7 written as a float with bias -1 (subnormals 0..3, normals 4..7).
pub const INT_MAG: MiniFloat = MiniFloat::new(1, 2, -1, true, 7);
pub const E2M3: MiniFloat = MiniFloat::new(2, 3, 1, true, 0x1f);
pub const E3M2: MiniFloat = MiniFloat::new(3, 2, 3, true, 0x1f);
pub const E4M3: MiniFloat = MiniFloat::new(4, 3, 7, true, 0x7e);
pub const E5M2: MiniFloat = MiniFloat::new(5, 2, 15, true, 0x7b);
pub const UE4M3: MiniFloat = MiniFloat::new(4, 3, 7, false, 0x7e);
pub const UE5M3: MiniFloat = MiniFloat::new(5, 3, 15, false, 0xfe);
/// UE5M3 variant in which 0xFF is the finite 1.875 * 2^16 instead of NaN.
pub const UE5M3_FINITE_FF: MiniFloat = MiniFloat::new(5, 3, 15, false, 0xff);

/// The 4-bit element grids a block-scaled tensor can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    E2M1,
    E1M2,
    /// Two's complement -8..7; the quantizers map block amax to 7 (-8 unused).
    Int4,
    /// Sign-magnitude +-7 (bit 3 is the sign).
    Int4Sm,
}

pub const ELEMENT_NAMES: &[&str] = &["e2m1", "e1m2", "int4", "int4-sm"];

impl Element {
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "e2m1" | "fp4" => Ok(Element::E2M1),
            "e1m2" => Ok(Element::E1M2),
            "int4" => Ok(Element::Int4),
            "int4-sm" | "int4_sm" => Ok(Element::Int4Sm),
            _ => Err(Error::unknown(
                Domain::Format,
                "element grid",
                name,
                ELEMENT_NAMES,
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Element::E2M1 => "e2m1",
            Element::E1M2 => "e1m2",
            Element::Int4 => "int4",
            Element::Int4Sm => "int4-sm",
        }
    }

    /// The magnitude grid (sign-magnitude view).
    pub fn grid(self) -> &'static MiniFloat {
        match self {
            Element::E2M1 => &E2M1,
            Element::E1M2 => &E1M2,
            Element::Int4 | Element::Int4Sm => &INT_MAG,
        }
    }

    /// Largest magnitude the quantizers map block amax to (6, 1.75, 7, 7).
    pub fn gmax(self) -> f32 {
        self.grid().max_value()
    }

    /// log2 of the largest power of two in the grid (MX floor rule's emax_elem).
    pub fn emax(self) -> i32 {
        match self {
            Element::E2M1 => 2,
            Element::E1M2 => 0,
            Element::Int4 | Element::Int4Sm => 2,
        }
    }

    /// 4-bit code of `y` (already scaled and clamped to +-gmax).
    #[inline]
    pub fn encode(self, y: f32, mode: Rounding, u: f32) -> u8 {
        let mag = if mode == Rounding::Rtne {
            self.rtne_mag(y.abs())
        } else {
            self.grid().encode_mag(y, mode, u) as u8
        };
        let neg = y.to_bits() >> 31 == 1;
        match self {
            Element::Int4 => {
                if neg {
                    mag.wrapping_neg() & 0xf
                } else {
                    mag
                }
            }
            _ => mag | ((neg as u8) << 3),
        }
    }

    /// RTNE magnitude code of `a` in [0, gmax], branch-free: comparisons against the
    /// E2M1 midpoints (strict where the lower neighbour is even, so ties go to the
    /// even code), or the 2^23 add/subtract (IEEE RTNE to an integer) on the uniform
    /// grids. Equal to `grid().encode_mag(a, Rtne, _)` (tested exhaustively on ranges).
    #[inline]
    pub fn rtne_mag(self, a: f32) -> u8 {
        match self {
            Element::E2M1 => e2m1_rtne_mag(a),
            Element::E1M2 => uniform_rtne_mag(a * 4.0),
            Element::Int4 | Element::Int4Sm => uniform_rtne_mag(a),
        }
    }

    /// Value of a 4-bit code (upper bits ignored).
    #[inline]
    pub fn decode(self, code: u8) -> f32 {
        let c = code & 0xf;
        match self {
            Element::Int4 => ((c as i8) << 4 >> 4) as f32,
            _ => {
                let v = self.grid().decode_mag((c & 7) as u32);
                if c & 8 != 0 {
                    -v
                } else {
                    v
                }
            }
        }
    }

    /// Table of the 16 decoded values, indexed by code.
    pub fn table(self) -> [f32; 16] {
        let mut t = [0f32; 16];
        for (c, v) in t.iter_mut().enumerate() {
            *v = self.decode(c as u8);
        }
        t
    }
}

/// E2M1 RTNE magnitude code of `a` in [0, 6]: one comparison per midpoint, strict
/// where the lower neighbour's code is even so that ties go to the even code.
#[inline(always)]
pub fn e2m1_rtne_mag(a: f32) -> u8 {
    (a > 0.25) as u8
        + (a >= 0.75) as u8
        + (a > 1.25) as u8
        + (a >= 1.75) as u8
        + (a > 2.5) as u8
        + (a >= 3.5) as u8
        + (a > 5.0) as u8
}

/// Nearest integer to `a` in [0, 2^22], ties to even: adding and subtracting 2^23
/// rounds in the IEEE default mode.
#[inline(always)]
pub fn uniform_rtne_mag(a: f32) -> u8 {
    const MAGIC: f32 = 8_388_608.0; // 2^23
    ((a + MAGIC) - MAGIC) as i32 as u8
}

/// Block-scale formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleFormat {
    /// Power of two 2^(byte - 127), 0xFF NaN, no zero.
    Ue8m0,
    /// FP8 E4M3fn used unsigned (NVFP4).
    Ue4m3,
    /// 5 exponent bits (bias 15), 3 mantissa bits, unsigned; 0xFF NaN unless `finite_ff`.
    Ue5m3 { finite_ff: bool },
}

pub const SCALE_NAMES: &[&str] = &["ue8m0", "e4m3", "ue5m3"];

impl ScaleFormat {
    /// Parse a scale name; `finite_ff` picks the UE5M3 variant.
    pub fn parse(name: &str, finite_ff: bool) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "ue8m0" | "e8m0" => Ok(ScaleFormat::Ue8m0),
            "e4m3" | "ue4m3" => Ok(ScaleFormat::Ue4m3),
            "ue5m3" => Ok(ScaleFormat::Ue5m3 { finite_ff }),
            _ => Err(Error::unknown(
                Domain::Format,
                "scale format",
                name,
                SCALE_NAMES,
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScaleFormat::Ue8m0 => "ue8m0",
            ScaleFormat::Ue4m3 => "e4m3",
            ScaleFormat::Ue5m3 { .. } => "ue5m3",
        }
    }

    /// The float layout of a non-power-of-two scale (None for UE8M0).
    pub fn minifloat(self) -> Option<&'static MiniFloat> {
        match self {
            ScaleFormat::Ue8m0 => None,
            ScaleFormat::Ue4m3 => Some(&UE4M3),
            ScaleFormat::Ue5m3 { finite_ff: false } => Some(&UE5M3),
            ScaleFormat::Ue5m3 { finite_ff: true } => Some(&UE5M3_FINITE_FF),
        }
    }

    /// The byte that marks a NaN scale (what GPU kernels write for a non-finite block).
    pub fn nan_byte(self) -> Option<u8> {
        match self {
            ScaleFormat::Ue8m0 => Some(0xff),
            ScaleFormat::Ue4m3 => Some(0x7f),
            ScaleFormat::Ue5m3 { finite_ff: false } => Some(0xff),
            ScaleFormat::Ue5m3 { finite_ff: true } => None,
        }
    }

    /// Value of a scale byte as f32 (NaN for the NaN byte). An E4M3 byte past 0x7F, which
    /// no quantizer writes, reads with its sign bit as FP8 E4M3 does (0xFF NaN), as the
    /// PyTorch reference and the Triton kernels read it (docs/conventions.md).
    #[inline]
    pub fn decode(self, byte: u8) -> f32 {
        if Some(byte) == self.nan_byte() {
            return f32::NAN;
        }
        match self.minifloat() {
            None => pow2(byte as i32 - 127),
            Some(_) if self == ScaleFormat::Ue4m3 && byte & 0x80 != 0 => -self.decode(byte & 0x7f),
            Some(f) => f.decode_mag(byte as u32),
        }
    }

    /// Largest finite scale value.
    pub fn max_value(self) -> f32 {
        match self.minifloat() {
            None => pow2(127),
            Some(f) => f.max_value(),
        }
    }

    pub fn min_positive(self) -> f32 {
        match self.minifloat() {
            None => pow2(-127),
            Some(f) => f.min_positive(),
        }
    }
}

/// UE8M0 with round-to-nearest-even in the linear domain (ties between 2^e and
/// 2^(e+1) go to the even byte), saturating to [2^-127, 2^127]. Only used for
/// conversions; the MX rules compute their exponents directly (quant.rs).
pub fn e8m0_encode(a: f32, mode: Rounding, u: f32) -> u8 {
    let a = a.abs() as f64;
    if a == 0.0 {
        return 0;
    }
    let bits = a.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let frac = bits & ((1u64 << 52) - 1);
    // a = (1 + frac/2^52) * 2^e, neighbours 2^e and 2^(e+1), step 2^e.
    let up = match mode {
        Rounding::Rtne => {
            let half = 1u64 << 51;
            frac > half || (frac == half && (e + 127) % 2 != 0)
        }
        Rounding::Away => frac >= 1u64 << 51,
        Rounding::Sr | Rounding::Sr4 | Rounding::Sr16 => {
            (u as f64) < frac as f64 / (1u64 << 52) as f64
        }
    };
    (e + 127 + up as i64).clamp(0, 254) as u8
}

/// Every codec a caller can encode to / decode from with unit scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Element(Element),
    /// Wider signed floats: FP6 E2M3/E3M2, FP8 E4M3fn/E5M2.
    Wide(&'static str, &'static MiniFloat),
    Scale(ScaleFormat),
}

pub const CODEC_NAMES: &[&str] = &[
    "e2m1", "e1m2", "int4", "int4-sm", "e2m3", "e3m2", "e4m3", "e5m2", "ue8m0", "ue4m3", "ue5m3",
    "ue5m3-ff",
];

impl Codec {
    pub fn parse(name: &str) -> Result<Self> {
        let n = name.to_ascii_lowercase();
        Ok(match n.as_str() {
            "e2m3" => Codec::Wide("e2m3", &E2M3),
            "e3m2" => Codec::Wide("e3m2", &E3M2),
            "e4m3" => Codec::Wide("e4m3", &E4M3),
            "e5m2" => Codec::Wide("e5m2", &E5M2),
            "ue8m0" => Codec::Scale(ScaleFormat::Ue8m0),
            "ue4m3" => Codec::Scale(ScaleFormat::Ue4m3),
            "ue5m3" => Codec::Scale(ScaleFormat::Ue5m3 { finite_ff: false }),
            "ue5m3-ff" => Codec::Scale(ScaleFormat::Ue5m3 { finite_ff: true }),
            _ => match Element::parse(&n) {
                Ok(e) => Codec::Element(e),
                Err(_) => return Err(Error::unknown(Domain::Format, "codec", name, CODEC_NAMES)),
            },
        })
    }

    /// Code of one value with unit scale. Signed formats keep the sign of -0 and of
    /// values that round to 0; unsigned scale formats encode |x|; everything
    /// saturates at the largest finite value (satfinite).
    #[inline]
    pub fn encode(self, x: f32, mode: Rounding, u: f32) -> u8 {
        match self {
            Codec::Element(e) => {
                let g = e.gmax();
                e.encode(x.clamp(-g, g), mode, u)
            }
            Codec::Wide(_, f) => {
                let neg = (x.to_bits() >> 31) as u8;
                f.encode_mag(x.abs(), mode, u) as u8 | (neg << f.sign_shift())
            }
            Codec::Scale(ScaleFormat::Ue8m0) => e8m0_encode(x, mode, u),
            Codec::Scale(s) => s.minifloat().unwrap().encode_mag(x.abs(), mode, u) as u8,
        }
    }

    #[inline]
    pub fn decode(self, code: u8) -> f32 {
        match self {
            Codec::Element(e) => e.decode(code),
            Codec::Wide(_, f) => {
                let mask = (1u32 << f.sign_shift()) - 1;
                let mag = code as u32 & mask;
                if mag > f.max_code {
                    return f32::NAN;
                }
                let v = f.decode_mag(mag);
                if (code as u32 >> f.sign_shift()) & 1 == 1 {
                    -v
                } else {
                    v
                }
            }
            Codec::Scale(s) => s.decode(code),
        }
    }
}

/// One row of `fourcast formats`: name, kind, bits, largest finite value, smallest positive.
pub struct FormatInfo {
    pub name: &'static str,
    pub kind: &'static str,
    pub bits: u32,
    pub max: f64,
    pub min_positive: f64,
    pub note: &'static str,
}

fn row(
    name: &'static str,
    kind: &'static str,
    bits: u32,
    max: f32,
    min_positive: f32,
    note: &'static str,
) -> FormatInfo {
    FormatInfo {
        name,
        kind,
        bits,
        max: max as f64,
        min_positive: min_positive as f64,
        note,
    }
}

/// Every element grid, wide format, scale format and preset.
pub fn catalogue() -> Vec<FormatInfo> {
    let mut rows = vec![
        row(
            "e2m1",
            "element",
            4,
            6.0,
            0.5,
            "OCP MX FP4; 0,.5,1,1.5,2,3,4,6; RTNE, saturating",
        ),
        row(
            "e1m2",
            "element",
            4,
            1.75,
            0.25,
            "uniform k/4; = INT4-SM / 4",
        ),
        row(
            "int4",
            "element",
            4,
            7.0,
            1.0,
            "two's complement; quantizers map amax to 7, -8 unused",
        ),
        row(
            "int4-sm",
            "element",
            4,
            7.0,
            1.0,
            "sign-magnitude +-7 (microxcaling int4)",
        ),
    ];
    for (name, f, note) in [
        ("e2m3", &E2M3, "FP6, bias 1"),
        ("e3m2", &E3M2, "FP6, bias 3"),
        (
            "e4m3",
            &E4M3,
            "FP8 E4M3fn, bias 7, 0x7F NaN; encoding saturates",
        ),
        (
            "e5m2",
            &E5M2,
            "FP8 E5M2, bias 15; encoding saturates at 57344",
        ),
    ] {
        let bits = f.ebits + f.mbits + 1;
        rows.push(row(
            name,
            "wide",
            bits,
            f.max_value(),
            f.min_positive(),
            note,
        ));
    }
    rows.push(row(
        "ue8m0",
        "scale",
        8,
        pow2(127),
        pow2(-127),
        "2^(b-127); 0xFF NaN; no zero",
    ));
    rows.push(row(
        "ue4m3",
        "scale",
        8,
        448.0,
        pow2(-9),
        "FP8 E4M3fn as unsigned (NVFP4 block scale)",
    ));
    rows.push(row(
        "ue5m3",
        "scale",
        8,
        UE5M3.max_value(),
        UE5M3.min_positive(),
        "bias 15; 0x00 zero; 0xFF NaN (default)",
    ));
    rows.push(row(
        "ue5m3-ff",
        "scale",
        8,
        UE5M3_FINITE_FF.max_value(),
        UE5M3.min_positive(),
        "UE5M3 variant: 0xFF finite",
    ));
    rows.push(row(
        "fp32",
        "scale",
        32,
        f32::MAX,
        f32::MIN_POSITIVE,
        "per-tensor second-level scale (S_enc)",
    ));
    for (name, note) in [
        (
            "mxfp4",
            "e2m1 + ue8m0, block 32, floor rule (preset ranges: tensor_scale 1)",
        ),
        ("nvfp4", "e2m1 + e4m3 block 16 + fp32 tensor scale, TE rule"),
        (
            "ue5m3",
            "e2m1 + ue5m3 block 16 + fp32 tensor scale (periodic refresh)",
        ),
        ("e1m2", "e1m2 + e4m3 block 16 + fp32 tensor scale"),
        (
            "int4",
            "int4 + e4m3 block 16 + fp32 tensor scale, amax -> 7",
        ),
        ("int4-sm", "int4-sm + e4m3 block 16 + fp32 tensor scale"),
    ] {
        // Range with tensor_scale 1: grid extremes times scale extremes (f64: no overflow).
        let fmt = crate::quant::Format::preset(name).expect("preset");
        rows.push(FormatInfo {
            name,
            kind: "preset",
            bits: 4,
            max: fmt.element.gmax() as f64 * fmt.scale.max_value() as f64,
            min_positive: fmt.element.grid().min_positive() as f64
                * fmt.scale.min_positive() as f64,
            note,
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2m1_table_and_ties() {
        let t = Element::E2M1.table();
        assert_eq!(&t[..8], &[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        let r = |x: f32| Element::E2M1.encode(x, Rounding::Rtne, 0.0);
        let cases = [
            (0.25, 0),
            (0.75, 2),
            (1.25, 2),
            (1.75, 4),
            (2.5, 4),
            (3.5, 6),
            (5.0, 6),
            (6.0, 7),
            (-0.1, 8),
        ];
        for (x, c) in cases {
            assert_eq!(r(x), c, "x={x}");
        }
        assert_eq!(Element::E2M1.encode(0.25, Rounding::Away, 0.0), 1);
    }

    #[test]
    fn rtne_fast_path_equals_the_generic_rounding() {
        // Every 97th f32 pattern in [0, 8), plus the patterns at and next to midpoints.
        let top = 8.0f32.to_bits();
        let mut bits: Vec<u32> = (0..top).step_by(97).collect();
        for m in [
            0.25f32, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.125, 0.375, 0.625, 0.875, 1.125, 1.375,
            1.625, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5,
        ] {
            let b = m.to_bits();
            bits.extend([b - 1, b, b + 1]);
        }
        for el in [Element::E2M1, Element::E1M2, Element::Int4Sm, Element::Int4] {
            let g = el.gmax();
            for &b in &bits {
                let a = f32::from_bits(b).min(g);
                let generic = el.grid().encode_mag(a, Rounding::Rtne, 0.0) as u8;
                assert_eq!(el.rtne_mag(a), generic, "{el:?} {a}");
            }
        }
    }

    #[test]
    fn rtne_fast_path_of_scale_formats() {
        for f in [&E4M3, &UE4M3, &UE5M3, &UE5M3_FINITE_FF, &E5M2, &E2M3, &E3M2] {
            let top = (f.max_value() * 4.0).to_bits();
            let mut bits: Vec<u32> = (0..top).step_by(1009).collect();
            for c in 0..f.max_code {
                let mid = (f.decode_mag(c) + f.decode_mag(c + 1)) / 2.0; // exact in f32
                let m = mid.to_bits();
                bits.extend([m - 1, m, m + 1, f.decode_mag(c).to_bits()]);
            }
            bits.push(f.max_value().to_bits() + 1);
            for b in bits {
                let a = f32::from_bits(b);
                assert_eq!(
                    f.encode_rtne(a),
                    f.encode_mag(a, Rounding::Rtne, 0.0),
                    "{f:?} {a}"
                );
            }
        }
    }

    #[test]
    fn int4_codes() {
        let e = Element::Int4;
        assert_eq!(e.encode(-7.0, Rounding::Rtne, 0.0), 9);
        assert_eq!(e.encode(-0.2, Rounding::Rtne, 0.0), 0);
        assert_eq!(e.decode(9), -7.0);
        assert_eq!(e.decode(8), -8.0);
        for k in 0..8 {
            assert_eq!(Element::Int4Sm.encode(k as f32, Rounding::Rtne, 0.0), k);
        }
        assert_eq!(Element::Int4Sm.encode(2.5, Rounding::Rtne, 0.0), 2);
        assert_eq!(Element::Int4Sm.encode(3.5, Rounding::Rtne, 0.0), 4);
    }

    #[test]
    fn scale_ranges() {
        assert_eq!(UE5M3.max_value(), 114688.0);
        assert_eq!(UE5M3_FINITE_FF.max_value(), 122880.0);
        assert_eq!(UE5M3.min_positive(), pow2(-17));
        assert_eq!(E4M3.max_value(), 448.0);
        assert_eq!(E5M2.max_value(), 57344.0);
        assert_eq!(E3M2.max_value(), 28.0);
        assert_eq!(E2M3.max_value(), 7.5);
        let c = Codec::parse("e4m3").unwrap();
        assert_eq!(c.encode(1000.0, Rounding::Rtne, 0.0), 0x7e);
        assert_eq!(c.encode(-448.0, Rounding::Rtne, 0.0), 0xfe);
        assert!(c.decode(0x7f).is_nan());
        // a foreign UE4M3 scale byte past 0x7F: a negative scale, 0xFF NaN (conventions.md)
        assert_eq!(ScaleFormat::Ue4m3.decode(0xb8), -1.0);
        assert_eq!(
            ScaleFormat::Ue4m3.decode(0x80).to_bits(),
            (-0.0f32).to_bits()
        );
        assert!(ScaleFormat::Ue4m3.decode(0xff).is_nan());
        assert_eq!(ScaleFormat::Ue4m3.decode(0x38), 1.0);
        assert_eq!(e8m0_encode(1.5, Rounding::Rtne, 0.0), 128);
        assert_eq!(e8m0_encode(3.0, Rounding::Rtne, 0.0), 128);
    }

    #[test]
    fn catalogue_lists_presets() {
        let c = catalogue();
        assert!(c.iter().any(|r| r.name == "nvfp4" && r.kind == "preset"));
        assert!(c.iter().any(|r| r.name == "ue5m3" && r.kind == "scale"));
    }
}
