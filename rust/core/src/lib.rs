//! fourcast-core: pure-Rust numerics and models for 4-bit LLM training.
//!
//! Modules follow the data flow of ../docs/architecture.md: `formats` (bit
//! layouts of every grid and scale), `rng` (Philox4x32-10, identical to
//! Triton), `hadamard` (RHT), `quant` (block-scaled codecs), `bias` (shrinkage
//! statistics), `recipe` (one recipe definition for training and the model),
//! `hw` (cycle/throughput model of FP4 datapaths). No Python here.

pub mod bias;
pub mod error;
pub mod formats;
pub mod hadamard;
pub mod hw;
pub mod quant;
pub mod recipe;
pub mod rng;
pub mod rounding;

pub use error::{Domain, Error, Result};

/// Version of the core crate (also reported by `fourcast --version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
