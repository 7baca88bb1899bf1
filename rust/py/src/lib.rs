//! Python bindings of fourcast-core: numpy in/out, GIL released around heavy work,
//! errors mapped once (errors.rs). No numerics live here; each area has one file.

use pyo3::prelude::*;

mod bias;
mod codecs;
mod errors;
mod formats;
mod hw;
mod recipe;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", fourcast_core::VERSION)?;
    bias::register(m)?;
    codecs::register(m)?;
    formats::register(m)?;
    hw::register(m)?;
    recipe::register(m)?;
    Ok(())
}
