//! The hardware model across the boundary: profiles, models, recipes, ops and results
//! all travel as JSON text; `fourcast.hw` turns them into dataclasses.

use fourcast_core::hw::{
    self, model::MODELS, native, ops, whatif, Hw, ModelSpec, Operand, Profile, Shape, StepConfig,
};
use fourcast_core::recipe::Recipe;
use fourcast_core::{Domain, Error};
use pyo3::prelude::*;

use crate::errors::IntoPy;

use fourcast_core::hw::to_json;

fn profile(json: &str) -> fourcast_core::Result<Profile> {
    Profile::from_json_str(json, "hardware")
}

fn machine(json: &str, natives: &[String]) -> fourcast_core::Result<Hw> {
    hw::machine(&profile(json)?, natives)
}

fn config(json: &str) -> fourcast_core::Result<StepConfig> {
    serde_json::from_str(json)
        .map_err(|e| Error::invalid(Domain::Config, format!("step options: {e}")))
}

/// Names of the built-in GPUs.
#[pyfunction]
fn hw_names() -> Vec<&'static str> {
    hw::names()
}

/// A built-in GPU by name or a .toml/.json file by path, as JSON.
#[pyfunction]
fn hw_load(spec: &str) -> PyResult<String> {
    Ok(Profile::load(spec).py_err()?.to_json())
}

/// Parse hardware text ("toml" or "json"); `origin` names it in errors.
#[pyfunction]
fn hw_parse(text: &str, kind: &str, origin: &str) -> PyResult<String> {
    let p = match kind {
        "toml" => Profile::from_toml_str(text, origin),
        _ => Profile::from_json_str(text, origin),
    };
    Ok(p.py_err()?.to_json())
}

/// Override one field of a profile given as JSON (`memory.hbm_tbs`, `mma.mxf4.tflops`).
#[pyfunction]
fn hw_set(json: &str, path: &str, value: &str) -> PyResult<String> {
    Ok(profile(json).py_err()?.set(path, value).py_err()?.to_json())
}

#[pyfunction]
fn hw_model_names() -> Vec<&'static str> {
    MODELS.to_vec()
}

/// A model preset or file, as JSON.
#[pyfunction]
fn hw_model(spec: &str) -> PyResult<String> {
    Ok(ModelSpec::load(spec).py_err()?.to_json())
}

/// Parse model text (JSON or TOML).
#[pyfunction]
fn hw_model_parse(text: &str, origin: &str) -> PyResult<String> {
    Ok(ModelSpec::parse(text, origin).py_err()?.to_json())
}

#[pyfunction]
fn hw_native_names() -> Vec<&'static str> {
    native::NATIVES.to_vec()
}

#[pyfunction]
fn hw_format_names() -> Vec<&'static str> {
    fourcast_core::hw::operand::FORMAT_NAMES.to_vec()
}

/// Cost one GEMM; `a`/`b` are format names or recipe tensor formats as JSON.
#[pyfunction]
#[pyo3(signature = (hw_json, m, n, k, a, b, native, groups=1, out_bytes=2.0))]
#[allow(clippy::too_many_arguments)]
fn hw_gemm(
    hw_json: &str,
    m: u64,
    n: u64,
    k: u64,
    a: &str,
    b: &str,
    native: Vec<String>,
    groups: u64,
    out_bytes: f64,
) -> PyResult<String> {
    let hw = machine(hw_json, &native).py_err()?;
    let spec = |t: &str| -> fourcast_core::Result<Operand> {
        let f: ops::FormatSpec = serde_json::from_str(t)
            .map_err(|e| Error::invalid(Domain::Format, format!("GEMM format {t}: {e}")))?;
        f.operand()
    };
    let (oa, ob) = (spec(a).py_err()?, spec(b).py_err()?);
    let s = Shape {
        groups: groups as f64,
        ..Shape::new(m, n, k)
    };
    Ok(to_json(&ops::gemm(&hw, &s, &oa, &ob, out_bytes).py_err()?))
}

/// Cost one op given as JSON ({"op": "gemm" | "memory" | "copy" | "quantize" | "attention", ...}).
#[pyfunction]
fn hw_op_time(hw_json: &str, op_json: &str, native: Vec<String>) -> PyResult<String> {
    let hw = machine(hw_json, &native).py_err()?;
    let op = ops::parse_op(op_json).py_err()?;
    Ok(to_json(&ops::op_time(&hw, &op).py_err()?))
}

/// Cost a list of ops (JSON array) in one call; returns a JSON array of reports.
#[pyfunction]
fn hw_op_times(
    py: Python<'_>,
    hw_json: &str,
    ops_json: &str,
    native: Vec<String>,
) -> PyResult<String> {
    let hw = machine(hw_json, &native).py_err()?;
    let list: Vec<ops::Op> = serde_json::from_str(ops_json)
        .map_err(|e| Error::Config {
            file: "ops".into(),
            line: e.line(),
            msg: format!("{e} (ops: gemm, memory, copy, quantize, attention)"),
        })
        .py_err()?;
    let reports = py
        .detach(|| {
            list.iter()
                .map(|op| ops::op_time(&hw, op))
                .collect::<fourcast_core::Result<Vec<_>>>()
        })
        .py_err()?;
    Ok(to_json(&reports))
}

/// One training step.
#[pyfunction]
fn hw_step(
    hw_json: &str,
    model_json: &str,
    recipe_json: &str,
    native: Vec<String>,
    config_json: &str,
) -> PyResult<String> {
    let p = profile(hw_json).py_err()?;
    let model: ModelSpec = ModelSpec::parse(model_json, "model").py_err()?;
    let recipe = Recipe::from_json_str(recipe_json, "recipe").py_err()?;
    let cfg = config(config_json).py_err()?;
    Ok(to_json(
        &hw::step_report(&p, &model, &recipe, &native, &cfg).py_err()?,
    ))
}

/// The grid hws x recipes x natives on one model (the GIL is released while it runs).
#[pyfunction]
fn hw_whatif(
    py: Python<'_>,
    hw_jsons: Vec<String>,
    model_json: &str,
    recipe_jsons: Vec<String>,
    natives: Vec<Vec<String>>,
    config_json: &str,
) -> PyResult<String> {
    let hws: Vec<Hw> = hw_jsons
        .iter()
        .map(|j| machine(j, &[]))
        .collect::<fourcast_core::Result<_>>()
        .py_err()?;
    let model = ModelSpec::parse(model_json, "model").py_err()?;
    let recipes: Vec<Recipe> = recipe_jsons
        .iter()
        .map(|j| Recipe::from_json_str(j, "recipe"))
        .collect::<fourcast_core::Result<_>>()
        .py_err()?;
    let natives: Vec<Vec<native::Native>> = natives
        .iter()
        .map(|n| native::parse(n))
        .collect::<fourcast_core::Result<_>>()
        .py_err()?;
    let cfg = config(config_json).py_err()?;
    let rows = py
        .detach(|| whatif::whatif(&hws, &model, &recipes, &natives, &cfg))
        .py_err()?;
    Ok(to_json(&rows))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(hw_names, m)?)?;
    m.add_function(wrap_pyfunction!(hw_load, m)?)?;
    m.add_function(wrap_pyfunction!(hw_parse, m)?)?;
    m.add_function(wrap_pyfunction!(hw_set, m)?)?;
    m.add_function(wrap_pyfunction!(hw_model_names, m)?)?;
    m.add_function(wrap_pyfunction!(hw_model, m)?)?;
    m.add_function(wrap_pyfunction!(hw_model_parse, m)?)?;
    m.add_function(wrap_pyfunction!(hw_native_names, m)?)?;
    m.add_function(wrap_pyfunction!(hw_format_names, m)?)?;
    m.add_function(wrap_pyfunction!(hw_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(hw_op_time, m)?)?;
    m.add_function(wrap_pyfunction!(hw_op_times, m)?)?;
    m.add_function(wrap_pyfunction!(hw_step, m)?)?;
    m.add_function(wrap_pyfunction!(hw_whatif, m)?)
}
