//! The one error type of the core. The binding crate maps each `Domain` to one
//! Python exception class, so users catch `fourcast.FormatError`, not a string.

use std::fmt;

/// Which part of the library an error belongs to (decides the Python class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    Format,
    Recipe,
    Hardware,
    Config,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name (format, rule, rounding, preset, GPU, ...) that is not known.
    #[error("unknown {what} '{name}'; valid: {}", valid.join(", "))]
    UnknownName {
        domain: Domain,
        what: String,
        name: String,
        valid: Vec<String>,
    },
    /// A shape that does not fit the block layout (names the shape and block).
    #[error("{0}")]
    Shape(String),
    /// NaN or Inf in the input of a quantizer (fourcast's NaN policy: refuse, say where).
    #[error("input has {count} non-finite value(s) (NaN or Inf), first at flat index {first_index}; fourcast refuses to quantize them")]
    NonFinite { count: usize, first_index: usize },
    /// Any other invalid value, with the domain it belongs to.
    #[error("{msg}")]
    Invalid { domain: Domain, msg: String },
    /// A file that does not parse or validate, with file and line.
    #[error("{file}:{line}: {msg}")]
    Config {
        file: String,
        line: usize,
        msg: String,
    },
}

impl Error {
    pub fn domain(&self) -> Domain {
        match self {
            Error::UnknownName { domain, .. } | Error::Invalid { domain, .. } => *domain,
            Error::Shape(_) | Error::NonFinite { .. } => Domain::Format,
            Error::Config { .. } => Domain::Config,
        }
    }

    pub fn unknown(domain: Domain, what: &str, name: &str, valid: &[&str]) -> Self {
        Error::UnknownName {
            domain,
            what: what.to_string(),
            name: name.to_string(),
            valid: valid.iter().map(|s| s.to_string()).collect(),
        }
    }

    pub fn invalid(domain: Domain, msg: impl fmt::Display) -> Self {
        Error::Invalid {
            domain,
            msg: msg.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
