//! Shrinkage-bias statistics (`fourcast.bias`): flat float32 arrays in, dicts and
//! float64 arrays out. The GIL is released while the core sums.

use fourcast_core::bias::{self, ErrorSums};
use fourcast_core::Error;
use numpy::{Element, IntoPyArray, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{to_py, IntoPy};

fn contiguous<'a, T: Element>(a: &'a PyReadonlyArrayDyn<'_, T>, name: &str) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| to_py(Error::Shape(format!("{name} must be a C-contiguous array"))))
}

fn sums_dict<'py>(py: Python<'py>, s: &ErrorSums) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("n", s.n)?;
    d.set_item("bias", s.bias())?;
    d.set_item("rel_rmse", s.rel_rmse())?;
    d.set_item("sqnr_db", s.sqnr_db())?;
    d.set_item("norm_ratio", s.norm_ratio())?;
    d.set_item("gain", s.gain())?;
    d.set_item("sum_abs_x", s.abs_x)?;
    d.set_item("sum_signed_err", s.signed_err)?;
    Ok(d)
}

/// Statistics of `x` against its round trip `q` (same size, any shape, C order).
/// Returns {"tensor": {...}} and, when `block` > 0, "blocks": {stat: float64 array}
/// over contiguous blocks of `block` elements (blocks along the last axis).
#[pyfunction]
#[pyo3(signature = (x, q, block=0))]
fn bias_stats<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    q: PyReadonlyArrayDyn<'py, f32>,
    block: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let (xs, qs) = (contiguous(&x, "x")?, contiguous(&q, "q")?);
    let (whole, blocks) = py
        .detach(|| -> fourcast_core::Result<_> {
            let whole = bias::tensor_sums(xs, qs)?;
            let blocks = if block > 0 {
                Some(bias::block_sums(xs, qs, block)?)
            } else {
                None
            };
            Ok((whole, blocks))
        })
        .py_err()?;
    let out = PyDict::new(py);
    out.set_item("tensor", sums_dict(py, &whole)?)?;
    if let Some(blocks) = blocks {
        let per = PyDict::new(py);
        let column = |f: fn(&ErrorSums) -> f64| blocks.iter().map(f).collect::<Vec<f64>>();
        per.set_item("bias", column(ErrorSums::bias).into_pyarray(py))?;
        per.set_item("rel_rmse", column(ErrorSums::rel_rmse).into_pyarray(py))?;
        per.set_item("sqnr_db", column(ErrorSums::sqnr_db).into_pyarray(py))?;
        per.set_item("norm_ratio", column(ErrorSums::norm_ratio).into_pyarray(py))?;
        out.set_item("blocks", per)?;
    }
    Ok(out)
}

/// Count of each nibble code 0..15 among the first `count` packed elements.
#[pyfunction]
fn code_histogram(codes: PyReadonlyArrayDyn<'_, u8>, count: usize) -> PyResult<Vec<u64>> {
    let bytes = contiguous(&codes, "codes")?;
    let hist = codes
        .py()
        .detach(|| bias::code_histogram(bytes, count))
        .py_err()?;
    Ok(hist.to_vec())
}

/// Running product of (1 + b_l).
#[pyfunction]
fn depth_product(biases: Vec<f64>) -> Vec<f64> {
    bias::depth_product(&biases)
}

/// Per-layer geometric rate r with ratios[l] ~ r^(l+1).
#[pyfunction]
fn geometric_rate(ratios: Vec<f64>) -> PyResult<f64> {
    bias::geometric_rate(&ratios).py_err()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(bias_stats, m)?)?;
    m.add_function(wrap_pyfunction!(code_histogram, m)?)?;
    m.add_function(wrap_pyfunction!(depth_product, m)?)?;
    m.add_function(wrap_pyfunction!(geometric_rate, m)?)
}
