//! Rounding modes and the one integer rounding step every codec uses.
//!
//! A value is written as an integer significand `m` times a power of two; the
//! target keeps `m >> drop`. The three modes decide on the dropped remainder
//! `r = m mod 2^drop` (docs/conventions.md "Rounding and RNG"):
//! - rtne: up when r > half, or r == half and the kept part is odd;
//! - away: up when r >= half (ties away from zero, microxcaling's "nearest");
//! - sr:   up when u * step < |y| - lo, i.e. u * 2^drop < r (exact: both sides
//!   are the same real numbers scaled by one power of two);
//! - sr4:  sr with the four-per-counter Philox stream (rng::rand_x4): the same
//!   rounding, a quarter of the Philox evaluations;
//! - sr16: sr with 8-bit uniforms, sixteen per Philox counter (rng::rand_x16), the
//!   random-bit budget of Blackwell's cvt.rs (32 bits per four FP4 elements): a
//!   sixteenth of the Philox evaluations, each rounding unbiased to within 2^-9 step.

use crate::error::{Domain, Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Round to nearest, ties to even code (the default).
    Rtne,
    /// Round to nearest, ties away from zero.
    Away,
    /// Stochastic rounding with a Philox uniform per element (rng::rand).
    Sr,
    /// Stochastic rounding with the four-per-counter stream (rng::rand_x4).
    Sr4,
    /// Stochastic rounding with 8-bit uniforms, sixteen per counter (rng::rand_x16).
    Sr16,
}

pub const ROUNDING_NAMES: &[&str] = &["rtne", "away", "sr", "sr4", "sr16"];

impl Rounding {
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "rtne" | "rne" | "nearest-even" => Ok(Rounding::Rtne),
            "away" => Ok(Rounding::Away),
            "sr" | "stochastic" => Ok(Rounding::Sr),
            "sr4" => Ok(Rounding::Sr4),
            "sr16" => Ok(Rounding::Sr16),
            _ => Err(Error::unknown(
                Domain::Format,
                "rounding",
                name,
                ROUNDING_NAMES,
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Rounding::Rtne => "rtne",
            Rounding::Away => "away",
            Rounding::Sr => "sr",
            Rounding::Sr4 => "sr4",
            Rounding::Sr16 => "sr16",
        }
    }

    /// A stochastic mode (they round alike; only the uniforms' stream differs).
    pub fn is_stochastic(self) -> bool {
        matches!(self, Rounding::Sr | Rounding::Sr4 | Rounding::Sr16)
    }
}

/// `m / 2^drop` rounded to an integer with `mode`; `u` in [0, 1) is used by SR only.
/// `m` must be below 2^32 (an f32 significand); `drop` may be any size.
#[inline]
pub fn round_shift(m: u64, drop: u32, mode: Rounding, u: f32) -> u64 {
    if drop == 0 {
        return m;
    }
    if drop >= 40 {
        // Kept part is 0 and r = m < 2^32 < half: only SR with u*2^drop < m rounds up.
        let up = mode.is_stochastic() && m > 0 && (u as f64) * pow2_f64(drop) < m as f64;
        return up as u64;
    }
    let q = m >> drop;
    let r = m & ((1u64 << drop) - 1);
    let half = 1u64 << (drop - 1);
    let up = match mode {
        Rounding::Rtne => r > half || (r == half && q & 1 == 1),
        Rounding::Away => r >= half,
        Rounding::Sr | Rounding::Sr4 | Rounding::Sr16 => {
            (u as f64) * ((1u64 << drop) as f64) < r as f64
        }
    };
    q + up as u64
}

#[inline]
fn pow2_f64(e: u32) -> f64 {
    f64::from_bits(((e as u64) + 1023) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        // 5 / 2 = 2.5
        assert_eq!(round_shift(5, 1, Rounding::Rtne, 0.0), 2);
        assert_eq!(round_shift(7, 1, Rounding::Rtne, 0.0), 4);
        assert_eq!(round_shift(5, 1, Rounding::Away, 0.0), 3);
        // 9 / 4 = 2.25: SR up iff u*4 < 1
        assert_eq!(round_shift(9, 2, Rounding::Sr, 0.24), 3);
        assert_eq!(round_shift(9, 2, Rounding::Sr, 0.25), 2);
        assert_eq!(round_shift(12, 2, Rounding::Sr, 0.0), 3);
        assert_eq!(round_shift(1, 60, Rounding::Sr, 0.0), 1);
        assert_eq!(round_shift(1, 60, Rounding::Sr, 1e-9), 0);
        assert_eq!(round_shift(1, 60, Rounding::Rtne, 0.0), 0);
        assert_eq!(round_shift(9, 2, Rounding::Sr4, 0.24), 3);
        assert_eq!(round_shift(1, 60, Rounding::Sr4, 0.0), 1);
        assert_eq!(Rounding::parse("sr4").unwrap(), Rounding::Sr4);
        assert_eq!(Rounding::parse("sr16").unwrap(), Rounding::Sr16);
        // an 8-bit uniform (r + 0.5) / 256 rounds like any other
        assert_eq!(round_shift(9, 2, Rounding::Sr16, 63.5 / 256.0), 3);
        assert_eq!(round_shift(9, 2, Rounding::Sr16, 64.5 / 256.0), 2);
        assert!(Rounding::parse("bogus").is_err());
    }
}
