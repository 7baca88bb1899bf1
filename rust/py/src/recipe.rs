//! Recipes cross the boundary as JSON text: the Rust struct is the one definition,
//! `fourcast.recipes.Recipe` is a read-only Python view of it.

use fourcast_core::recipe::{Recipe, PRESETS};
use pyo3::prelude::*;

use crate::errors::IntoPy;

#[pyfunction]
fn recipe_names() -> Vec<&'static str> {
    PRESETS.to_vec()
}

#[pyfunction]
fn recipe_preset(name: &str) -> PyResult<String> {
    Ok(Recipe::preset(name).py_err()?.to_json())
}

/// Parse a recipe file's text; `kind` is "toml" or "json", `origin` names it in errors.
#[pyfunction]
fn recipe_parse(text: &str, kind: &str, origin: &str) -> PyResult<String> {
    let r = match kind {
        "toml" => Recipe::from_toml_str(text, origin),
        _ => Recipe::from_json_str(text, origin),
    };
    Ok(r.py_err()?.to_json())
}

/// Apply one `field=value` override to a recipe given as JSON.
#[pyfunction]
fn recipe_set(json: &str, path: &str, value: &str) -> PyResult<String> {
    let r = Recipe::from_json_str(json, "recipe").py_err()?;
    Ok(r.set(path, value).py_err()?.to_json())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(recipe_names, m)?)?;
    m.add_function(wrap_pyfunction!(recipe_preset, m)?)?;
    m.add_function(wrap_pyfunction!(recipe_parse, m)?)?;
    m.add_function(wrap_pyfunction!(recipe_set, m)?)
}
