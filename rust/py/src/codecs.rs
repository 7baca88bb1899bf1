//! Codec bindings: numpy in, numpy out, the GIL released around the Rust work,
//! panics caught and turned into FormatError (a panic never reaches Python).
//! Inputs arrive C-contiguous (fourcast/quant.py makes them so).

use std::panic::{catch_unwind, AssertUnwindSafe};

use fourcast_core::formats::{Codec, Element, ScaleFormat};
use fourcast_core::hadamard;
use fourcast_core::quant::{self, layout, threads, Axis, Block, Format, Options, Rule};
use fourcast_core::rng;
use fourcast_core::rounding::Rounding;
use fourcast_core::{Domain, Error};
use numpy::ndarray::Dimension;
use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPy;

/// Run `f` without the GIL; a panic becomes a core error.
fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> fourcast_core::Result<T> + Send,
) -> PyResult<T> {
    py.detach(|| {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
            Err(Error::invalid(
                Domain::Format,
                "internal error in the Rust codec (please report)",
            ))
        })
    })
    .py_err()
}

/// The data of a C-contiguous array of any rank.
fn slice<'a, T: numpy::Element, D: Dimension>(
    a: &'a PyReadonlyArray<'_, T, D>,
) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("array must be C-contiguous"))
}

fn to2d<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
    r: usize,
    c: usize,
) -> PyResult<Bound<'py, PyArray2<T>>> {
    PyArray1::from_vec(py, v).reshape([r, c])
}

#[allow(clippy::too_many_arguments)]
fn make_format(
    element: &str,
    scale: &str,
    block: usize,
    tile: bool,
    rule: Option<&str>,
    scale_max: Option<f32>,
    ue5m3_finite_ff: bool,
) -> fourcast_core::Result<Format> {
    let el = Element::parse(element)?;
    let sc = ScaleFormat::parse(scale, ue5m3_finite_ff)?;
    let rule = rule.map(Rule::parse).transpose()?;
    let blk = if tile {
        Block::Tile16
    } else {
        Block::Row(block)
    };
    Format::new(el, sc, blk, rule, scale_max)
}

/// Quantize a C-contiguous float32 (rows, cols) array.
/// Returns (codes, scales, tensor_scale, amax) in the quantized orientation.
#[pyfunction]
#[pyo3(signature = (x, element, scale, block, tile, rule, rounding, seed, offset, tensor_amax, axis0, scale_max, ue5m3_finite_ff))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn quantize<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f32>,
    element: &str,
    scale: &str,
    block: usize,
    tile: bool,
    rule: Option<&str>,
    rounding: &str,
    seed: u64,
    offset: u64,
    tensor_amax: Option<f32>,
    axis0: bool,
    scale_max: Option<f32>,
    ue5m3_finite_ff: bool,
) -> PyResult<(Bound<'py, PyArray2<u8>>, Bound<'py, PyArray2<u8>>, f32, f32)> {
    let fmt = make_format(
        element,
        scale,
        block,
        tile,
        rule,
        scale_max,
        ue5m3_finite_ff,
    )
    .py_err()?;
    let opts = Options {
        rounding: Rounding::parse(rounding).py_err()?,
        seed,
        offset,
        tensor_amax,
    };
    let [rows, cols] = [x.shape()[0], x.shape()[1]];
    let data = slice(&x)?;
    let axis = if axis0 { Axis::First } else { Axis::Last };
    let q = detached(py, || quant::quantize(data, rows, cols, axis, &fmt, &opts))?;
    Ok((
        to2d(py, q.codes, q.rows, q.cols / 2)?,
        to2d(py, q.scales, q.scale_rows, q.scale_cols)?,
        q.tensor_scale,
        q.amax,
    ))
}

/// Decode packed codes (rows, cols/2) and scales; returns float32 in the ORIGINAL
/// orientation ((cols, rows) of the quantized layout when axis0).
#[pyfunction]
#[pyo3(signature = (codes, scales, tensor_scale, element, scale, block, tile, rule, axis0, scale_max, ue5m3_finite_ff))]
#[allow(clippy::too_many_arguments)]
fn dequantize<'py>(
    py: Python<'py>,
    codes: PyReadonlyArray2<'py, u8>,
    scales: PyReadonlyArray2<'py, u8>,
    tensor_scale: f32,
    element: &str,
    scale: &str,
    block: usize,
    tile: bool,
    rule: Option<&str>,
    axis0: bool,
    scale_max: Option<f32>,
    ue5m3_finite_ff: bool,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let fmt = make_format(
        element,
        scale,
        block,
        tile,
        rule,
        scale_max,
        ue5m3_finite_ff,
    )
    .py_err()?;
    let (rows, cols) = (codes.shape()[0], codes.shape()[1] * 2);
    let (c, s) = (slice(&codes)?, slice(&scales)?);
    let axis = if axis0 { Axis::First } else { Axis::Last };
    let out = detached(py, || {
        quant::dequantize(c, s, rows, cols, tensor_scale, axis, &fmt)
    })?;
    if axis0 {
        to2d(py, out, cols, rows)
    } else {
        to2d(py, out, rows, cols)
    }
}

/// Codes of float32 values with unit scale in one codec (element grid, wide
/// float or scale format): one code per byte, unpacked.
#[pyfunction]
#[pyo3(signature = (x, codec, rounding="rtne", seed=0, offset=0))]
fn encode<'py>(
    py: Python<'py>,
    x: PyReadonlyArray1<'py, f32>,
    codec: &str,
    rounding: &str,
    seed: u64,
    offset: u64,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let c = Codec::parse(codec).py_err()?;
    let mode = Rounding::parse(rounding).py_err()?;
    let data = slice(&x)?;
    let out = detached(py, || quant::encode_values(data, c, mode, seed, offset))?;
    Ok(PyArray1::from_vec(py, out))
}

/// Values of codes in one codec (NaN for NaN codes).
#[pyfunction]
fn decode<'py>(
    py: Python<'py>,
    codes: PyReadonlyArray1<'py, u8>,
    codec: &str,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let c = Codec::parse(codec).py_err()?;
    let out: Vec<f32> = slice(&codes)?.iter().map(|&b| c.decode(b)).collect();
    Ok(PyArray1::from_vec(py, out))
}

/// Pack 4-bit codes (one per byte) two per byte along the last axis (low nibble first).
#[pyfunction]
fn pack_codes<'py>(
    py: Python<'py>,
    codes: PyReadonlyArray2<'py, u8>,
) -> PyResult<Bound<'py, PyArray2<u8>>> {
    let (r, c) = (codes.shape()[0], codes.shape()[1]);
    if c % 2 != 0 {
        return Err(Error::Shape(format!(
            "cannot pack shape ({r}, {c}): the last axis must be even"
        )))
        .py_err();
    }
    let data = slice(&codes)?;
    let out = detached(py, || Ok(threads::run(|| layout::pack(data))))?;
    to2d(py, out, r, c / 2)
}

/// Unpack bytes into two 4-bit codes each (low nibble first).
#[pyfunction]
fn unpack_codes<'py>(
    py: Python<'py>,
    packed: PyReadonlyArray2<'py, u8>,
) -> PyResult<Bound<'py, PyArray2<u8>>> {
    let (r, c) = (packed.shape()[0], packed.shape()[1]);
    let data = slice(&packed)?;
    let out = detached(py, || Ok(threads::run(|| layout::unpack(data))))?;
    to2d(py, out, r, c * 2)
}

/// Philox4x32-10 words for each offset: (N, 4) uint32, identical to tl.randint4x.
#[pyfunction]
fn philox<'py>(
    py: Python<'py>,
    seed: u64,
    offsets: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray2<u32>>> {
    let offs = slice(&offsets)?;
    let n = offs.len();
    let out = detached(py, || Ok(rng::randint4x_batch(seed, offs)))?;
    to2d(py, out, n, 4)
}

/// Raw Philox4x32-10 on a full counter and key (Random123 known-answer checks).
#[pyfunction]
fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    rng::philox4x32_10(counter, key)
}

/// tl.rand(seed, offsets): float32 uniforms in [0, 1).
#[pyfunction]
fn philox_uniform<'py>(
    py: Python<'py>,
    seed: u64,
    offsets: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let offs = slice(&offsets)?;
    let out = detached(py, || Ok(rng::rand_batch(seed, offs)))?;
    Ok(PyArray1::from_vec(py, out))
}

/// RHT sign vector (+-1 as float64).
#[pyfunction]
fn rht_signs<'py>(
    py: Python<'py>,
    n: usize,
    policy: &str,
    seed: u64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    Ok(PyArray1::from_vec(
        py,
        hadamard::signs(n, policy, seed).py_err()?,
    ))
}

/// One `#[pyfunction]` per float type: the RHT of a (rows, cols) array along the
/// last axis or axis 0, in the input's precision.
macro_rules! rht_binding {
    ($name:ident, $t:ty, $numpy:literal) => {
        #[doc = concat!("RHT of a ", $numpy, " (rows, cols) array along the last axis or axis 0.")]
        #[pyfunction]
        fn $name<'py>(
            py: Python<'py>,
            x: PyReadonlyArray2<'py, $t>,
            n: usize,
            signs: PyReadonlyArray1<'py, f64>,
            axis0: bool,
        ) -> PyResult<Bound<'py, PyArray2<$t>>> {
            let (r, c) = (x.shape()[0], x.shape()[1]);
            let (data, s) = (slice(&x)?, slice(&signs)?);
            let out = detached(py, || hadamard::rht(data, r, c, n, s, axis0))?;
            to2d(py, out, r, c)
        }
    };
}

rht_binding!(rht_f32, f32, "float32");
rht_binding!(rht_f64, f64, "float64");

/// A preset's fields: element, scale, block, rule, scale_max.
#[pyfunction]
fn format_preset<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
    let f = Format::preset(name).py_err()?;
    let d = PyDict::new(py);
    d.set_item("element", f.element.name())?;
    d.set_item("scale", f.scale.name())?;
    match f.block {
        Block::Row(b) => d.set_item("block", b)?,
        Block::Tile16 => d.set_item("block", (16, 16))?,
    }
    d.set_item("rule", f.rule.name())?;
    d.set_item("scale_max", f.scale_max)?;
    Ok(d)
}

/// Validate a format (raises FormatError naming the problem); returns the rule used.
#[pyfunction]
#[pyo3(signature = (element, scale, block, tile, rule, scale_max, ue5m3_finite_ff))]
#[allow(clippy::too_many_arguments)]
fn format_check(
    element: &str,
    scale: &str,
    block: usize,
    tile: bool,
    rule: Option<&str>,
    scale_max: Option<f32>,
    ue5m3_finite_ff: bool,
) -> PyResult<&'static str> {
    Ok(make_format(
        element,
        scale,
        block,
        tile,
        rule,
        scale_max,
        ue5m3_finite_ff,
    )
    .py_err()?
    .rule
    .name())
}

/// Names the codec layer accepts, by kind.
#[pyfunction]
fn codec_names<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("presets", quant::PRESETS.to_vec())?;
    d.set_item("elements", fourcast_core::formats::ELEMENT_NAMES.to_vec())?;
    d.set_item("scales", fourcast_core::formats::SCALE_NAMES.to_vec())?;
    d.set_item("rules", quant::RULE_NAMES.to_vec())?;
    d.set_item(
        "roundings",
        fourcast_core::rounding::ROUNDING_NAMES.to_vec(),
    )?;
    d.set_item("codecs", fourcast_core::formats::CODEC_NAMES.to_vec())?;
    d.set_item("rht_signs", hadamard::SIGN_POLICIES.to_vec())?;
    Ok(d)
}

/// Threads the codec pool uses (FOURCAST_THREADS caps it).
#[pyfunction]
fn codec_threads() -> usize {
    threads::threads()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(pack_codes, m)?)?;
    m.add_function(wrap_pyfunction!(unpack_codes, m)?)?;
    m.add_function(wrap_pyfunction!(philox, m)?)?;
    m.add_function(wrap_pyfunction!(philox_uniform, m)?)?;
    m.add_function(wrap_pyfunction!(philox4x32_10, m)?)?;
    m.add_function(wrap_pyfunction!(rht_signs, m)?)?;
    m.add_function(wrap_pyfunction!(rht_f32, m)?)?;
    m.add_function(wrap_pyfunction!(rht_f64, m)?)?;
    m.add_function(wrap_pyfunction!(format_preset, m)?)?;
    m.add_function(wrap_pyfunction!(format_check, m)?)?;
    m.add_function(wrap_pyfunction!(codec_names, m)?)?;
    m.add_function(wrap_pyfunction!(codec_threads, m)?)
}
