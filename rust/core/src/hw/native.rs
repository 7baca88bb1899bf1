//! What-if hardware features ("native" support). Each adds a hypothetical MMA kind or a
//! fused operation to a profile; MMA natives run at `rate` times the profile's fastest
//! FP4 kind (default 1.0; `ue5m3@0.5` = half that rate).
//!
//! | native | adds |
//! |---|---|
//! | ue5m3 | an FP4 kind taking UE5M3 block-16/32 scales |
//! | ue4m3 | an FP4 kind taking E4M3 block-16 scales (NVFP4 on hardware without it) |
//! | e1m2 | an FP4 kind taking E1M2 elements (4-bit container, the FP4 kind's scales) |
//! | int4 | an FP4 kind taking INT4 / INT4-SM elements |
//! | sr | random bits for stochastic rounding from hardware |
//! | rht | the quantizer rotates on the fly (one read for plain + rotated copies) |
//! | fused-quant | quantization folded into the producing kernel (no extra read/launch) |

use crate::error::{Domain, Error, Result};

pub const NATIVES: [&str; 8] = [
    "none",
    "ue5m3",
    "ue4m3",
    "e1m2",
    "int4",
    "sr",
    "rht",
    "fused-quant",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    Ue5m3,
    Ue4m3,
    E1m2,
    Int4,
    Sr,
    Rht,
    FusedQuant,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::Ue5m3 => "ue5m3",
            Feature::Ue4m3 => "ue4m3",
            Feature::E1m2 => "e1m2",
            Feature::Int4 => "int4",
            Feature::Sr => "sr",
            Feature::Rht => "rht",
            Feature::FusedQuant => "fused-quant",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Native {
    pub feature: Feature,
    /// MMA rate relative to the profile's fastest FP4 kind (MMA natives only).
    pub rate: f64,
}

impl Native {
    pub fn label(&self) -> String {
        if self.rate == 1.0 {
            self.feature.name().into()
        } else {
            format!("{}@{}", self.feature.name(), self.rate)
        }
    }
}

/// Parse natives: "ue5m3", "e1m2@0.5", "none" (ignored), comma lists allowed.
pub fn parse(items: &[String]) -> Result<Vec<Native>> {
    let mut out: Vec<Native> = vec![];
    for item in items.iter().flat_map(|s| s.split(',')) {
        let item = item.trim();
        if item.is_empty() || item == "none" {
            continue;
        }
        let (name, rate) = match item.split_once('@') {
            Some((n, r)) => {
                let rate: f64 = r.parse().map_err(|_| {
                    Error::invalid(
                        Domain::Hardware,
                        format!("native '{item}': rate after @ must be a number"),
                    )
                })?;
                if !(rate > 0.0 && rate.is_finite()) {
                    return Err(Error::invalid(
                        Domain::Hardware,
                        format!("native '{item}': rate must be > 0 (a multiple of the FP4 rate)"),
                    ));
                }
                (n, rate)
            }
            None => (item, 1.0),
        };
        let feature = match name {
            "ue5m3" => Feature::Ue5m3,
            "ue4m3" => Feature::Ue4m3,
            "e1m2" => Feature::E1m2,
            "int4" => Feature::Int4,
            "sr" => Feature::Sr,
            "rht" => Feature::Rht,
            "fused-quant" => Feature::FusedQuant,
            _ => {
                return Err(Error::unknown(
                    Domain::Hardware,
                    "native feature",
                    name,
                    &NATIVES,
                ))
            }
        };
        let is_mma = matches!(
            feature,
            Feature::Ue5m3 | Feature::Ue4m3 | Feature::E1m2 | Feature::Int4
        );
        if rate != 1.0 && !is_mma {
            return Err(Error::invalid(
                Domain::Hardware,
                format!("native '{item}': only MMA natives (ue5m3, ue4m3, e1m2, int4) take a rate"),
            ));
        }
        if out.iter().any(|n| n.feature == feature) {
            return Err(Error::invalid(
                Domain::Hardware,
                format!("native '{name}' given twice"),
            ));
        }
        out.push(Native { feature, rate });
    }
    Ok(out)
}
