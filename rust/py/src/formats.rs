//! Format catalogue for `fourcast formats`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Every element grid, scale format and preset, as a list of dicts.
#[pyfunction]
fn format_catalogue(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    fourcast_core::formats::catalogue()
        .into_iter()
        .map(|f| {
            let d = PyDict::new(py);
            d.set_item("name", f.name)?;
            d.set_item("kind", f.kind)?;
            d.set_item("bits", f.bits)?;
            d.set_item("max", f.max)?;
            d.set_item("min_positive", f.min_positive)?;
            d.set_item("note", f.note)?;
            Ok(d)
        })
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(format_catalogue, m)?)
}
