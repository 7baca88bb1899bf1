//! Properties the model must keep, one file per area: hardware files (`hardware`), the
//! predictions (`predictions`), the H200's emulation cost (`emulation`). Shared helpers here.

use serde_json::Value;

use super::datapath::{candidates, choose, Conv};
use super::gemm::Shape;
use super::machine::{EmulCost, Hw};
use super::model::{ModelSpec, MODELS};
use super::native;
use super::operand::{Elem, Operand, FORMAT_NAMES};
use super::ops::{gemm, op_time, parse_op, QUANT_REV};
use super::profile::{names, Profile};
use super::step::{step, StepConfig, CATEGORIES};
use crate::error::{Domain, Error};
use crate::recipe::{Recipe, PRESETS};

mod emulation;
mod hardware;
mod predictions;

fn hw(name: &str) -> Hw {
    Hw::from_profile(&Profile::load(name).unwrap())
}

/// The `"quant_rev"` field an emulated quantize op's JSON ends with (after its outputs).
fn quant_rev(rev: u32) -> String {
    format!(r#", "quant_rev": {rev}"#)
}

fn with(name: &str, natives: &[&str]) -> Hw {
    let list: Vec<String> = natives.iter().map(|s| s.to_string()).collect();
    hw(name)
        .with_natives(&native::parse(&list).unwrap())
        .unwrap()
}
