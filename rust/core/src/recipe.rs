//! One recipe definition for training and for the hardware model: which tensors of
//! each linear layer's three GEMMs are quantized, how, with which RHT and rounding,
//! and which layers stay in high precision. Presets, TOML/JSON files (optionally
//! `base = "preset"` plus overrides) and `field=value` overrides all end in `validate`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Domain, Error, Result};

/// The three training GEMMs of a linear layer y = x W^T.
pub const GEMMS: [&str; 3] = ["fprop", "dgrad", "wgrad"];
/// Operand keys "gemm.role": Fprop = X W^T, Dgrad = dY W, Wgrad = dY^T X.
pub const OPERANDS: [&str; 6] = [
    "fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x",
];
pub const ELEMENTS: [&str; 6] = ["e2m1", "e1m2", "int4", "int4-sm", "e4m3", "e5m2"];
pub const SCALES: [&str; 4] = ["ue8m0", "e4m3", "ue5m3", "fp32"];
pub const RULES: [&str; 4] = ["floor", "rceil", "te", "torchao"];
pub const SIGN_POLICIES: [&str; 3] = ["te", "per-layer", "per-step"];
pub const LAYER_SETS: [&str; 3] = ["all", "mlp", "attn"];
pub const PRECISIONS: [&str; 2] = ["bf16", "fp8"];
pub const SR_STREAMS: [&str; 3] = ["element", "x4", "x16"];
pub const PRESETS: [&str; 8] = [
    "bf16",
    "fp8",
    "mxfp8",
    "nvfp4",
    "mxfp4",
    "ue5m3",
    "ufp4",
    "ufp4-int4",
];

/// How one tensor operand is quantized.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorFormat {
    /// Element grid: e2m1 | e1m2 | int4 | int4-sm (4-bit) or e4m3 | e5m2 (FP8).
    pub element: String,
    /// Block scale format: ue8m0 | e4m3 | ue5m3, or fp32 for one per-tensor scale.
    pub scale: String,
    /// Elements per block along the GEMM's reduction dim (16 or 32; 0 = per tensor).
    pub block: u32,
    /// Weights only: 16x16 tiles so W and W^T quantize identically.
    #[serde(default)]
    pub tile_2d: bool,
    /// floor | rceil (power-of-two scales) or te | torchao (two-level).
    pub rule: String,
}

/// Random Hadamard transform: size 0 disables it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rht {
    pub size: u32,
    /// GEMMs whose two operands are rotated along their reduction dim.
    #[serde(default)]
    pub gemms: Vec<String>,
    /// te (one fixed vector) | per-layer | per-step (drawn from `seed`).
    #[serde(default = "default_signs")]
    pub signs: String,
    #[serde(default)]
    pub seed: u64,
}

fn default_signs() -> String {
    "te".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub name: String,
    /// Activations (Fprop and Wgrad operand); None = not quantized.
    pub x: Option<TensorFormat>,
    /// Weights (Fprop and Dgrad operand).
    pub w: Option<TensorFormat>,
    /// Output gradients (Dgrad and Wgrad operand).
    pub dy: Option<TensorFormat>,
    /// Per-operand overrides keyed "gemm.role" (see OPERANDS).
    #[serde(default)]
    pub overrides: BTreeMap<String, TensorFormat>,
    pub rht: Rht,
    /// Operands ("gemm.role") rounded stochastically; all others use RTNE.
    #[serde(default)]
    pub sr: Vec<String>,
    /// The SR uniforms' Philox stream: element (numerics.md section 4: one counter per
    /// element, word 0; rounding "sr") | x4 (one counter per four consecutive elements,
    /// all four words; rounding "sr4": the same rounding, a quarter of the Philox work)
    /// | x16 (8-bit uniforms, sixteen per counter, as Blackwell's cvt.rs spends 32 random
    /// bits per four FP4 elements; rounding "sr16": a sixteenth of the Philox work).
    #[serde(default = "element")]
    pub sr_stream: String,
    /// Steps between refreshes of the FP32 tensor scale (1 = every step).
    #[serde(default = "one")]
    pub tensor_scale_refresh: u32,
    /// Which linear layers are quantized: all | mlp | attn.
    #[serde(default = "all")]
    pub fp4_layers: String,
    /// Precision of the linear layers that are not quantized: bf16 | fp8.
    #[serde(default = "bf16")]
    pub other_precision: String,
    /// Transformer blocks kept in high precision at the start / end of the stack.
    #[serde(default)]
    pub keep_bf16_first: u32,
    #[serde(default)]
    pub keep_bf16_last: u32,
    /// Quantize the output head too (off in every preset).
    #[serde(default)]
    pub quantize_head: bool,
}

fn one() -> u32 {
    1
}
fn all() -> String {
    "all".into()
}
fn element() -> String {
    "element".into()
}
fn bf16() -> String {
    "bf16".into()
}

fn fmt(element: &str, scale: &str, block: u32, rule: &str) -> TensorFormat {
    TensorFormat {
        element: element.into(),
        scale: scale.into(),
        block,
        tile_2d: false,
        rule: rule.into(),
    }
}

fn tiled(mut f: TensorFormat) -> TensorFormat {
    f.tile_2d = true;
    f
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn no_rht() -> Rht {
    Rht {
        size: 0,
        gemms: vec![],
        signs: default_signs(),
        seed: 0,
    }
}

impl Recipe {
    fn base(name: &str) -> Recipe {
        Recipe {
            name: name.into(),
            x: None,
            w: None,
            dy: None,
            overrides: BTreeMap::new(),
            rht: no_rht(),
            sr: vec![],
            sr_stream: element(),
            tensor_scale_refresh: 1,
            fp4_layers: all(),
            other_precision: bf16(),
            keep_bf16_first: 0,
            keep_bf16_last: 0,
            quantize_head: false,
        }
    }

    /// A named preset (see PRESETS and ../shared/docs/numerics.md section 3).
    pub fn preset(name: &str) -> Result<Recipe> {
        let mut r = Recipe::base(name);
        match name {
            "bf16" => {}
            "fp8" => {
                r.x = Some(fmt("e4m3", "fp32", 0, "te"));
                r.w = Some(fmt("e4m3", "fp32", 0, "te"));
                r.dy = Some(fmt("e5m2", "fp32", 0, "te"));
            }
            "mxfp8" => {
                let f = fmt("e4m3", "ue8m0", 32, "floor");
                (r.x, r.w, r.dy) = (Some(f.clone()), Some(f.clone()), Some(f));
            }
            "nvfp4" => {
                // Transformer Engine (arXiv 2509.25149): 2D weights, RHT-16 on Wgrad
                // operands with TE's fixed signs, SR on dY, last blocks in BF16.
                let f = fmt("e2m1", "e4m3", 16, "te");
                r.x = Some(f.clone());
                r.w = Some(tiled(f.clone()));
                r.dy = Some(f);
                r.rht = Rht {
                    size: 16,
                    gemms: strings(&["wgrad"]),
                    signs: "te".into(),
                    seed: 0,
                };
                r.sr = strings(&["dgrad.dy", "wgrad.dy"]);
                r.keep_bf16_last = 2;
            }
            "mxfp4" => {
                // Quartet-style: Hadamard-32 before forward operands, SR on backward.
                let f = fmt("e2m1", "ue8m0", 32, "floor");
                (r.x, r.w, r.dy) = (Some(f.clone()), Some(f.clone()), Some(f));
                r.rht = Rht {
                    size: 32,
                    gemms: strings(&["fprop"]),
                    signs: "per-layer".into(),
                    seed: 0,
                };
                r.sr = strings(&["dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"]);
            }
            "ue5m3" => {
                // UE5M3 block-16: periodic tensor scale, SR on gradients, no RHT,
                // no BF16 exemptions.
                let f = fmt("e2m1", "ue5m3", 16, "te");
                r.x = Some(f.clone());
                r.w = Some(tiled(f.clone()));
                r.dy = Some(f);
                r.sr = strings(&["dgrad.dy", "wgrad.dy"]);
                r.tensor_scale_refresh = 10;
            }
            "ufp4" | "ufp4-int4" => {
                // UFP4 (arXiv 2606.20381): uniform grid, two-level E4M3/16 scales, RHT
                // on both operands of all three GEMMs, SR only on dY.
                let grid = if name == "ufp4" { "e1m2" } else { "int4" };
                let f = fmt(grid, "e4m3", 16, "te");
                (r.x, r.w, r.dy) = (Some(f.clone()), Some(f.clone()), Some(f));
                r.rht = Rht {
                    size: 16,
                    gemms: strings(&GEMMS),
                    signs: "per-layer".into(),
                    seed: 0,
                };
                r.sr = strings(&["dgrad.dy", "wgrad.dy"]);
            }
            _ => return Err(Error::unknown(Domain::Recipe, "recipe", name, &PRESETS)),
        }
        Ok(r)
    }

    /// The format of one operand of one GEMM ("fprop.x", ...), overrides applied.
    pub fn operand(&self, key: &str) -> Result<Option<&TensorFormat>> {
        if let Some(f) = self.overrides.get(key) {
            return Ok(Some(f));
        }
        let role = key.split('.').nth(1).unwrap_or("");
        if !OPERANDS.contains(&key) {
            return Err(Error::unknown(Domain::Recipe, "operand", key, &OPERANDS));
        }
        Ok(match role {
            "x" => self.x.as_ref(),
            "w" => self.w.as_ref(),
            _ => self.dy.as_ref(),
        })
    }

    /// True if the two operands of `gemm` are Hadamard-rotated.
    pub fn rht_on(&self, gemm: &str) -> bool {
        self.rht.size > 0 && self.rht.gemms.iter().any(|g| g == gemm)
    }

    /// True if operand `key` ("gemm.role") uses stochastic rounding.
    pub fn sr_on(&self, key: &str) -> bool {
        self.sr.iter().any(|k| k == key)
    }

    /// Check every name and number; returns the recipe for chaining.
    pub fn validate(self) -> Result<Recipe> {
        let bad = |msg: String| Err(Error::invalid(Domain::Recipe, msg));
        let mut formats: Vec<(String, &TensorFormat)> = vec![];
        for (role, f) in [("x", &self.x), ("w", &self.w), ("dy", &self.dy)] {
            if let Some(f) = f {
                formats.push((role.to_string(), f));
            }
        }
        for (key, f) in &self.overrides {
            if !OPERANDS.contains(&key.as_str()) {
                return Err(Error::unknown(
                    Domain::Recipe,
                    "override operand",
                    key,
                    &OPERANDS,
                ));
            }
            formats.push((key.clone(), f));
        }
        for (who, f) in formats {
            check_name("element", &f.element, &ELEMENTS)?;
            check_name("scale", &f.scale, &SCALES)?;
            check_name("rule", &f.rule, &RULES)?;
            let per_tensor = f.scale == "fp32";
            if per_tensor != (f.block == 0) {
                return bad(format!("{who}: block must be 0 exactly when scale is fp32 (per tensor), got scale {} block {}", f.scale, f.block));
            }
            if !per_tensor && f.block != 16 && f.block != 32 {
                return bad(format!("{who}: block must be 16 or 32, got {}", f.block));
            }
            let pow2 = f.scale == "ue8m0";
            let pow2_rule = f.rule == "floor" || f.rule == "rceil";
            if !per_tensor && pow2 != pow2_rule {
                return bad(format!("{who}: rule '{}' does not fit scale '{}' (floor/rceil go with ue8m0; te/torchao with e4m3/ue5m3)", f.rule, f.scale));
            }
            if f.tile_2d && f.block != 16 {
                return bad(format!("{who}: 2D tiles are 16x16, so block must be 16"));
            }
        }
        check_name("sr_stream", &self.sr_stream, &SR_STREAMS)?;
        if ![0, 16, 32, 64, 128].contains(&self.rht.size) {
            return bad(format!(
                "rht.size must be 0 (off), 16, 32, 64 or 128, got {}",
                self.rht.size
            ));
        }
        for g in &self.rht.gemms {
            check_name("rht gemm", g, &GEMMS)?;
        }
        check_name("rht sign policy", &self.rht.signs, &SIGN_POLICIES)?;
        for k in &self.sr {
            check_name("sr operand", k, &OPERANDS)?;
        }
        if self.tensor_scale_refresh == 0 {
            return bad("tensor_scale_refresh must be >= 1 (steps)".into());
        }
        check_name("fp4_layers", &self.fp4_layers, &LAYER_SETS)?;
        check_name("other_precision", &self.other_precision, &PRECISIONS)?;
        Ok(self)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("recipe serialises")
    }

    pub fn from_json_str(text: &str, origin: &str) -> Result<Recipe> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::Config {
            file: origin.into(),
            line: e.line(),
            msg: e.to_string(),
        })?;
        Recipe::from_value(value, origin)
    }

    pub fn from_toml_str(text: &str, origin: &str) -> Result<Recipe> {
        let table: toml::Value = toml::from_str(text).map_err(|e| Error::Config {
            file: origin.into(),
            line: e.span().map(|s| line_of(text, s.start)).unwrap_or(0),
            msg: e.message().to_string(),
        })?;
        let value = serde_json::to_value(table).map_err(|e| Error::Config {
            file: origin.into(),
            line: 0,
            msg: e.to_string(),
        })?;
        Recipe::from_value(value, origin)
    }

    /// A file's value: optional `base = "preset"`, the rest overriding it field by field.
    fn from_value(mut value: Value, origin: &str) -> Result<Recipe> {
        let obj = value.as_object_mut().ok_or_else(|| Error::Config {
            file: origin.into(),
            line: 1,
            msg: "a recipe file must be a table/object".into(),
        })?;
        let merged = match obj.remove("base") {
            Some(Value::String(base)) => {
                let mut start = serde_json::to_value(Recipe::preset(&base)?).expect("serialises");
                merge(&mut start, Value::Object(obj.clone()));
                start
            }
            Some(other) => {
                return Err(Error::Config {
                    file: origin.into(),
                    line: 0,
                    msg: format!("base must be a preset name, got {other}"),
                })
            }
            None => value,
        };
        let recipe: Recipe = serde_json::from_value(merged).map_err(|e| Error::Config {
            file: origin.into(),
            line: 0,
            msg: e.to_string(),
        })?;
        recipe.validate()
    }

    /// Override one field by dotted path (`rht.size=0`, `x.element=int4`,
    /// `keep_bf16_last=0`); `rht=none` turns RHT off, `x=none` stops quantizing x.
    pub fn set(&self, path: &str, raw: &str) -> Result<Recipe> {
        let mut value = serde_json::to_value(self).expect("serialises");
        let parsed = if raw == "none" && (path == "x" || path == "w" || path == "dy") {
            Value::Null
        } else if raw == "none" && path == "rht" {
            serde_json::to_value(no_rht()).expect("serialises")
        } else {
            serde_json::from_str(raw).unwrap_or_else(|_| {
                if raw.contains(',') && (path == "sr" || path.ends_with("gemms")) {
                    Value::Array(
                        raw.split(',')
                            .map(|s| Value::String(s.trim().into()))
                            .collect(),
                    )
                } else {
                    Value::String(raw.into())
                }
            })
        };
        let mut slot = &mut value;
        for part in path.split('.') {
            slot = match slot {
                Value::Object(map) if map.contains_key(part) || path.starts_with("overrides.") => {
                    map.entry(part.to_string()).or_insert(Value::Null)
                }
                _ => {
                    return Err(Error::invalid(
                        Domain::Recipe,
                        format!("no recipe field '{path}' (fields: name, x, w, dy, overrides, rht, sr, sr_stream, tensor_scale_refresh, fp4_layers, other_precision, keep_bf16_first, keep_bf16_last, quantize_head)"),
                    ))
                }
            };
        }
        *slot = parsed;
        let recipe: Recipe = serde_json::from_value(value)
            .map_err(|e| Error::invalid(Domain::Recipe, format!("cannot set {path}={raw}: {e}")))?;
        recipe.validate()
    }
}

fn check_name(what: &str, name: &str, valid: &[&str]) -> Result<()> {
    if valid.contains(&name) {
        Ok(())
    } else {
        Err(Error::unknown(Domain::Recipe, what, name, valid))
    }
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_validates_and_round_trips() {
        for name in PRESETS {
            let r = Recipe::preset(name).unwrap().validate().unwrap();
            let back = Recipe::from_json_str(&r.to_json(), "mem").unwrap();
            assert_eq!(r, back, "{name}");
        }
    }

    #[test]
    fn presets_say_what_the_papers_say() {
        let te = Recipe::preset("nvfp4").unwrap();
        assert!(te.rht_on("wgrad") && !te.rht_on("fprop") && !te.rht_on("dgrad"));
        assert!(te.sr_on("dgrad.dy") && !te.sr_on("fprop.x"));
        assert!(te.w.as_ref().unwrap().tile_2d);
        let ufp4 = Recipe::preset("ufp4").unwrap();
        assert!(GEMMS.iter().all(|g| ufp4.rht_on(g)));
        assert_eq!(ufp4.operand("fprop.x").unwrap().unwrap().element, "e1m2");
        let ue5m3 = Recipe::preset("ue5m3").unwrap();
        assert_eq!(ue5m3.rht.size, 0);
        assert_eq!(ue5m3.keep_bf16_last, 0);
    }

    #[test]
    fn set_overrides_fields() {
        let r = Recipe::preset("nvfp4").unwrap();
        let r2 = r
            .set("rht", "none")
            .unwrap()
            .set("keep_bf16_last", "0")
            .unwrap();
        assert_eq!(r2.rht.size, 0);
        assert_eq!(r2.keep_bf16_last, 0);
        let r3 = r.set("x.element", "int4").unwrap();
        assert_eq!(r3.x.unwrap().element, "int4");
        assert!(r.set("nope", "1").is_err());
        assert!(r.set("x.element", "e9m9").is_err());
    }

    #[test]
    fn toml_with_base_and_errors_with_line() {
        let r = Recipe::from_toml_str(
            "base = \"ue5m3\"\ntensor_scale_refresh = 50\n[rht]\nsize = 16\ngemms = [\"wgrad\"]\n",
            "my.toml",
        )
        .unwrap();
        assert_eq!(r.tensor_scale_refresh, 50);
        assert!(r.rht_on("wgrad"));
        let err = Recipe::from_toml_str("base = \"nvfp4\"\nkeep_bf16_last = = 3\n", "bad.toml")
            .unwrap_err();
        assert!(err.to_string().starts_with("bad.toml:2:"), "{err}");
        let err = Recipe::from_toml_str("base = \"nvfp4\"\n[x]\nelement = \"e2m1\"\nscale = \"ue8m0\"\nblock = 16\nrule = \"te\"\n", "f.toml").unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
    }

    #[test]
    fn unknown_preset_lists_valid() {
        let err = Recipe::preset("fp3").unwrap_err();
        assert!(err.to_string().contains("nvfp4"));
    }
}
