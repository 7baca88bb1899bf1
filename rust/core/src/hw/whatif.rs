//! What-if sweeps: every (hardware, recipe, natives) combination on one model, with the
//! gain of each native set over the shipped part and each recipe's speed-up over BF16.

use serde::Serialize;

use crate::error::Result;
use crate::recipe::Recipe;

use super::machine::Hw;
use super::model::ModelSpec;
use super::native::Native;
use super::step::{step, StepConfig, StepReport};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatifRow {
    #[serde(flatten)]
    pub step: StepReport,
    /// Step time with no natives / step time with these natives.
    pub gain: f64,
    /// BF16 step time (no natives) / this step time.
    pub speedup_vs_bf16: f64,
}

/// Evaluate the grid hws x recipes x natives on `model`.
pub fn whatif(
    hws: &[Hw],
    model: &ModelSpec,
    recipes: &[Recipe],
    natives: &[Vec<Native>],
    cfg: &StepConfig,
) -> Result<Vec<WhatifRow>> {
    let bf16 = Recipe::preset("bf16")?;
    let mut rows = vec![];
    for base in hws {
        let t_bf16 = step(base, model, &bf16, cfg)?.step_time_s;
        let variants: Vec<Hw> = natives
            .iter()
            .map(|n| base.with_natives(n))
            .collect::<Result<_>>()?;
        for recipe in recipes {
            let t_plain = step(base, model, recipe, cfg)?.step_time_s;
            for hw in &variants {
                let r = step(hw, model, recipe, cfg)?;
                rows.push(WhatifRow {
                    gain: t_plain / r.step_time_s,
                    speedup_vs_bf16: t_bf16 / r.step_time_s,
                    step: r.report(hw, model, recipe, cfg),
                });
            }
        }
    }
    Ok(rows)
}
