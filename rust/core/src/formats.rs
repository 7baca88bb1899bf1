//! Bit layouts of the 4-bit element grids and of the scale formats.
//! Placeholder: the codec work replaces this with the full tables.

/// One row of `fourcast formats`: name, kind, bits, largest finite value, smallest positive.
pub struct FormatInfo {
    pub name: &'static str,
    pub kind: &'static str,
    pub bits: u32,
    pub max: f64,
    pub min_positive: f64,
    pub note: &'static str,
}

pub fn catalogue() -> Vec<FormatInfo> {
    vec![FormatInfo {
        name: "e2m1",
        kind: "element",
        bits: 4,
        max: 6.0,
        min_positive: 0.5,
        note: "OCP MX FP4",
    }]
}
