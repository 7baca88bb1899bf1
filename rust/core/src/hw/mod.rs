//! Cycle/throughput model of GPU datapaths for 4-bit training: which MMA kind runs each
//! GEMM of a recipe (and what conversion that needs), what every quantization pass
//! costs, and how long a training step takes; plus "native" what-ifs (UE5M3 scales,
//! E1M2/INT4 MMAs, hardware SR/RHT, fused quantization).
//!
//! Layers: `profile` (the TOML files) -> `machine::Hw` (numbers, natives applied) ->
//! `datapath` (path choice) + `gemm` (tile model) + `memory` (passes, quantization) +
//! `attention` -> `step` (a transformer step for a `Recipe`) -> `whatif` (sweeps).
//! `ops` costs single ops for projections and calibration.
//!
//! ```
//! use fourcast_core::hw;
//! let b200 = hw::Hw::from_profile(&hw::Profile::load("b200").unwrap());
//! let a = hw::Operand::named("nvfp4").unwrap();
//! let g = hw::ops::gemm(&b200, &hw::Shape::new(8192, 6144, 4096), &a, &a, 2.0).unwrap();
//! assert_eq!(g.kind, "mxf4nvf4");
//! ```

pub mod attention;
pub mod datapath;
pub mod gemm;
pub mod machine;
pub mod memory;
pub mod model;
pub mod native;
pub mod operand;
pub mod ops;
pub mod profile;
pub mod step;
pub mod whatif;

#[cfg(test)]
mod tests;

pub use gemm::Shape;
pub use machine::Hw;
pub use model::ModelSpec;
pub use native::Native;
pub use operand::Operand;
pub use profile::{names, Profile};
pub use step::{step, StepConfig, StepReport, StepResult};

use crate::error::Result;
use crate::recipe::Recipe;

/// Any report as JSON text (what crosses to Python).
pub fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("reports serialise")
}

/// Load a profile (built-in name or file) and apply natives ("ue5m3", "e1m2@0.5", ...).
pub fn machine(profile: &Profile, natives: &[String]) -> Result<Hw> {
    Hw::from_profile(profile).with_natives(&native::parse(natives)?)
}

/// One step, reported with names.
pub fn step_report(
    profile: &Profile,
    model: &ModelSpec,
    recipe: &Recipe,
    natives: &[String],
    cfg: &StepConfig,
) -> Result<StepReport> {
    let hw = machine(profile, natives)?;
    Ok(step(&hw, model, recipe, cfg)?.report(&hw, model, recipe, cfg))
}
