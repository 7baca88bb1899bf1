//! The one place where core errors become Python exceptions. The classes live in
//! `fourcast/errors.py` (so they can subclass both FourcastError and ValueError).

use fourcast_core::{Domain, Error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn class_name(err: &Error) -> &'static str {
    match err {
        Error::Shape(_) => "ShapeError",
        Error::NonFinite { .. } => "NonFiniteError",
        _ => match err.domain() {
            Domain::Format => "FormatError",
            Domain::Recipe => "RecipeError",
            Domain::Hardware => "HardwareError",
            Domain::Config => "ConfigError",
        },
    }
}

/// Convert a core error into the matching `fourcast.errors` exception.
pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| {
        let msg = err.to_string();
        let instance = py
            .import("fourcast.errors")
            .and_then(|m| m.getattr(class_name(&err)))
            .and_then(|cls| cls.call1((msg.clone(),)));
        match instance {
            Ok(exc) => PyErr::from_value(exc),
            Err(_) => PyValueError::new_err(msg),
        }
    })
}

/// `Result` of the core, as a `PyResult`.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for fourcast_core::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
