//! GEMM operand formats as the hardware model sees them: an element grid, a scale
//! format and a block size. Built from the recipe's `TensorFormat` (the one recipe
//! definition) or from a short name (`nvfp4`, `mxfp8`, ...).

use crate::error::{Domain, Error, Result};
use crate::recipe::TensorFormat;

/// Element grids (and the FP6/FP8/BF16 containers a 4-bit grid may travel in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    Bf16,
    E4m3,
    E5m2,
    E2m3,
    E3m2,
    E2m1,
    E1m2,
    Int4,
    Int4Sm,
}

pub const ALL_ELEMS: [Elem; 9] = [
    Elem::Bf16,
    Elem::E4m3,
    Elem::E5m2,
    Elem::E2m3,
    Elem::E3m2,
    Elem::E2m1,
    Elem::E1m2,
    Elem::Int4,
    Elem::Int4Sm,
];

impl Elem {
    pub fn parse(name: &str) -> Option<Elem> {
        ALL_ELEMS.iter().copied().find(|e| e.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Elem::Bf16 => "bf16",
            Elem::E4m3 => "e4m3",
            Elem::E5m2 => "e5m2",
            Elem::E2m3 => "e2m3",
            Elem::E3m2 => "e3m2",
            Elem::E2m1 => "e2m1",
            Elem::E1m2 => "e1m2",
            Elem::Int4 => "int4",
            Elem::Int4Sm => "int4-sm",
        }
    }

    /// Storage bits of one element.
    pub fn bits(self) -> u32 {
        match self {
            Elem::Bf16 => 16,
            Elem::E4m3 | Elem::E5m2 => 8,
            Elem::E2m3 | Elem::E3m2 => 6,
            _ => 4,
        }
    }

    pub fn bytes(self) -> f64 {
        self.bits() as f64 / 8.0
    }

    pub fn bit(self) -> u16 {
        1 << (self as u16)
    }

    /// Every value of `self` is exactly representable in `container` (after at most a
    /// power-of-two factor folded into the block scale, as for INT4 in E2M3).
    pub fn exact_in(self, container: Elem) -> bool {
        use Elem::*;
        if self == container || container == Bf16 {
            return true;
        }
        match self {
            // 0, 0.5 .. 6: two significant bits.
            E2m1 => matches!(container, E2m3 | E3m2 | E4m3 | E5m2),
            // k/4, k = 0..7: three significant bits, max 1.75.
            E1m2 => matches!(container, E2m3 | E3m2 | E4m3 | E5m2),
            // +-7 (three significant bits).
            Int4Sm => matches!(container, E2m3 | E3m2 | E4m3 | E5m2),
            // -8..7: E2M3 after halving (-4..3.5), which the scale absorbs.
            Int4 => matches!(container, E2m3 | E3m2 | E4m3 | E5m2),
            E2m3 => matches!(container, E4m3),
            E3m2 => matches!(container, E4m3 | E5m2),
            _ => false,
        }
    }
}

/// Block-scale formats (`Tensor` = one FP32 scale per tensor; `None` = not quantized).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaleFmt {
    None,
    Tensor,
    Ue8m0,
    E4m3,
    Ue5m3,
}

impl ScaleFmt {
    pub fn name(self) -> &'static str {
        match self {
            ScaleFmt::None => "none",
            ScaleFmt::Tensor => "fp32",
            ScaleFmt::Ue8m0 => "ue8m0",
            ScaleFmt::E4m3 => "ue4m3",
            ScaleFmt::Ue5m3 => "ue5m3",
        }
    }

    /// Two-level formats carry an FP32 tensor scale computed from the tensor amax.
    pub fn needs_tensor_amax(self) -> bool {
        matches!(self, ScaleFmt::Tensor | ScaleFmt::E4m3 | ScaleFmt::Ue5m3)
    }
}

/// One GEMM operand's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operand {
    pub elem: Elem,
    pub scale: ScaleFmt,
    /// Elements per block along K (0 for per-tensor or unquantized).
    pub block: u32,
    /// 16x16 tiles (W and W^T quantize identically).
    pub tile_2d: bool,
}

/// Short names accepted by `--format` and the Python API.
pub const FORMAT_NAMES: [&str; 11] = [
    "bf16", "fp8", "mxfp8", "mxfp4", "nvfp4", "ue5m3", "e1m2", "ufp4", "int4", "mxe1m2", "fp8-e5m2",
];

impl Operand {
    pub const BF16: Operand = Operand {
        elem: Elem::Bf16,
        scale: ScaleFmt::None,
        block: 0,
        tile_2d: false,
    };

    pub fn is_quantized(&self) -> bool {
        self.scale != ScaleFmt::None
    }

    /// Scale bytes per element (block scales are one byte each).
    pub fn scale_bytes(&self) -> f64 {
        match self.scale {
            ScaleFmt::None | ScaleFmt::Tensor => 0.0,
            // 2D tiles are stored expanded to one scale per 16 along K, as the MMA reads them.
            _ => 1.0 / self.block.max(1) as f64,
        }
    }

    /// Packed bytes per element as stored (element + scales).
    pub fn packed_bytes(&self) -> f64 {
        self.elem.bytes() + self.scale_bytes()
    }

    /// A recipe operand format (None = the operand stays BF16).
    pub fn from_recipe(f: Option<&TensorFormat>) -> Result<Operand> {
        let Some(f) = f else { return Ok(Operand::BF16) };
        let elem = match f.element.as_str() {
            "e2m1" => Elem::E2m1,
            "e1m2" => Elem::E1m2,
            "int4" => Elem::Int4,
            "int4-sm" => Elem::Int4Sm,
            "e4m3" => Elem::E4m3,
            "e5m2" => Elem::E5m2,
            other => {
                return Err(Error::unknown(
                    Domain::Recipe,
                    "element",
                    other,
                    &crate::recipe::ELEMENTS,
                ))
            }
        };
        let scale = match f.scale.as_str() {
            "ue8m0" => ScaleFmt::Ue8m0,
            "e4m3" => ScaleFmt::E4m3,
            "ue5m3" => ScaleFmt::Ue5m3,
            "fp32" => ScaleFmt::Tensor,
            other => {
                return Err(Error::unknown(
                    Domain::Recipe,
                    "scale",
                    other,
                    &crate::recipe::SCALES,
                ))
            }
        };
        Ok(Operand {
            elem,
            scale,
            block: if scale == ScaleFmt::Tensor {
                0
            } else {
                f.block
            },
            tile_2d: f.tile_2d,
        })
    }

    /// A short format name: bf16, fp8 (E4M3 per tensor), mxfp8, mxfp4, nvfp4, ue5m3
    /// (E2M1 + UE5M3/16), e1m2 or ufp4 (E1M2 + E4M3/16), int4 (INT4 + E4M3/16),
    /// mxe1m2 (E1M2 + UE8M0/32), fp8-e5m2.
    pub fn named(name: &str) -> Result<Operand> {
        let q = |elem, scale, block| Operand {
            elem,
            scale,
            block,
            tile_2d: false,
        };
        Ok(match name {
            "bf16" => Operand::BF16,
            "fp8" => q(Elem::E4m3, ScaleFmt::Tensor, 0),
            "fp8-e5m2" => q(Elem::E5m2, ScaleFmt::Tensor, 0),
            "mxfp8" => q(Elem::E4m3, ScaleFmt::Ue8m0, 32),
            "mxfp4" => q(Elem::E2m1, ScaleFmt::Ue8m0, 32),
            "nvfp4" => q(Elem::E2m1, ScaleFmt::E4m3, 16),
            "ue5m3" => q(Elem::E2m1, ScaleFmt::Ue5m3, 16),
            "e1m2" | "ufp4" => q(Elem::E1m2, ScaleFmt::E4m3, 16),
            "int4" => q(Elem::Int4, ScaleFmt::E4m3, 16),
            "mxe1m2" => q(Elem::E1m2, ScaleFmt::Ue8m0, 32),
            _ => {
                return Err(Error::unknown(
                    Domain::Format,
                    "GEMM format",
                    name,
                    &FORMAT_NAMES,
                ))
            }
        })
    }

    /// A readable label: "e2m1+ue4m3/16", "e4m3+fp32", "bf16".
    pub fn label(&self) -> String {
        match self.scale {
            ScaleFmt::None => "bf16".into(),
            ScaleFmt::Tensor => format!("{}+fp32", self.elem.name()),
            s => format!(
                "{}+{}/{}{}",
                self.elem.name(),
                s.name(),
                if self.tile_2d { 16 } else { self.block },
                if self.tile_2d { "x16" } else { "" }
            ),
        }
    }
}
