//! Hardware descriptions: one TOML per GPU (hwmodels/*.toml, embedded at build time),
//! every number with its source and a confidence flag. `Profile` is the file as written
//! (serde, round-trips through JSON for the Python side); `validate` rejects impossible
//! values naming file, line and field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Domain, Error, Result};

/// How much to trust a number.
pub const CONFIDENCE: [&str; 4] = ["vendor", "measured", "derived", "preliminary"];
/// Element formats an MMA kind may accept (see `operand::Elem`).
pub const KIND_ELEMENTS: [&str; 9] = [
    "bf16", "e4m3", "e5m2", "e2m3", "e3m2", "e2m1", "e1m2", "int4", "int4-sm",
];
/// Block-scale modes an MMA kind may accept ("none" = per-tensor/row scales in the epilogue).
pub const KIND_SCALES: [&str; 7] = [
    "none", "ue8m0/32", "ue8m0/16", "ue4m3/16", "ue4m3/32", "ue5m3/16", "ue5m3/32",
];
/// Which operands must be K-major: none, sub-byte containers (FP6/FP4), or all.
pub const K_MAJOR: [&str; 3] = ["none", "subbyte", "all"];
/// Efficiency classes (one fitted main-loop efficiency each).
pub const CLASSES: [&str; 3] = ["bf16", "fp8", "fp4"];

/// The GPUs whose files ship inside the library.
pub const BUILTIN: [(&str, &str); 9] = [
    ("h100", include_str!("../../../../hwmodels/h100.toml")),
    ("h200", include_str!("../../../../hwmodels/h200.toml")),
    ("b200", include_str!("../../../../hwmodels/b200.toml")),
    ("gb200", include_str!("../../../../hwmodels/gb200.toml")),
    ("b300", include_str!("../../../../hwmodels/b300.toml")),
    ("gb300", include_str!("../../../../hwmodels/gb300.toml")),
    ("rubin", include_str!("../../../../hwmodels/rubin.toml")),
    ("mi300x", include_str!("../../../../hwmodels/mi300x.toml")),
    ("mi355x", include_str!("../../../../hwmodels/mi355x.toml")),
];

/// A number with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Num {
    pub value: f64,
    pub source: String,
    pub confidence: String,
}

/// A yes/no capability with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flag {
    pub value: bool,
    pub source: String,
    pub confidence: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chip {
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD).
    pub sms: Num,
    /// Clock the tensor rates refer to.
    pub clock_ghz: Num,
    /// FP32 vector (non-tensor) TFLOP/s, FMA = 2.
    pub vector_tflops: Num,
    /// Exponentials per second (SFU), in units of 1e12.
    pub sfu_texp_s: Num,
    pub tdp_w: Num,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub hbm_gb: Num,
    pub hbm_tbs: Num,
    pub l2_mb: Num,
    /// Effective operand-feed (L2) bandwidth that GEMM main loops draw on.
    pub l2_tbs: Num,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Links {
    /// Scale-up (NVLink / Infinity Fabric) bandwidth per GPU, both directions together.
    pub scaleup_gbs: Num,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Features {
    /// A stochastic-rounding convert instruction (random bits still come from software).
    pub hw_sr: Flag,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmTiles {
    /// Per-SM output tile footprints (rows, cols) the GEMM library chooses among.
    pub tiles: Vec<[u32; 2]>,
    /// How many SMs share one fetch of the B operand (cluster multicast / 2-SM MMA).
    pub multicast: u32,
    pub source: String,
    pub confidence: String,
}

/// One MMA instruction kind: which operand formats and block scales it takes, how fast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmaKind {
    pub name: String,
    #[serde(default)]
    pub instruction: String,
    pub a: Vec<String>,
    pub b: Vec<String>,
    pub scales: Vec<String>,
    pub k_major_only: String,
    pub class: String,
    /// Dense TFLOP/s of the whole chip with this kind.
    pub tflops: Num,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    pub mma_bf16: Num,
    pub mma_fp8: Num,
    pub mma_fp4: Num,
    pub tile_overhead_cycles: Num,
    pub mem: Num,
    pub quant: Num,
    pub vec: Num,
    pub attention: Num,
    pub launch_us: Num,
    pub comm: Num,
    /// Fixed cycles per flash-attention tile (Q load, softmax finish, O store); absent =
    /// `attention::DEFAULT_TILE_CYCLES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_tile_cycles: Option<Num>,
}

/// A hardware file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub display: String,
    pub vendor: String,
    pub arch: String,
    #[serde(default)]
    pub preliminary: bool,
    #[serde(default)]
    pub notes: Vec<String>,
    pub chip: Chip,
    pub memory: Memory,
    pub links: Links,
    pub features: Features,
    pub gemm: GemmTiles,
    pub mma: Vec<MmaKind>,
    pub efficiency: Efficiency,
    /// Costs of fourcast's own emulation kernels on this GPU (only used when an op asks
    /// for them with `"impl": "fourcast-triton"`; targets never do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulation: Option<Emulation>,
}

/// Fitted costs of how the measured H200 runs executed (not of vendor-grade kernels):
/// fourcast's Triton quantizers per call, per element written (each output copy) and per
/// rotated element; the fixed cost of an eager torch GEMM call and the clock it ran at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Emulation {
    pub triton_quant_call_us: Num,
    pub triton_quant_ns_per_elem: Num,
    /// Per rotated element in calls with SR (the strip kernel's SR tile).
    pub triton_quant_rht_ns_per_elem: Num,
    /// As `triton_quant_rht_ns_per_elem`, for a copy rotated by an RHT of 16 in a call with
    /// SR (TE's dY call; MXFP4's row RHT of 32 keeps the other; absent: that price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_rht16_sr_ns_per_elem: Option<Num>,
    /// Per rotated element in calls without SR (the strip kernel's plain tile; absent: the SR price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_strip_rht_ns_per_elem: Option<Num>,
    /// Per stochastically rounded element written (absent: 0, the session-2 fit had no SR term).
    #[serde(default)]
    pub triton_quant_sr_ns_per_elem: Option<Num>,
    /// Per element written with rounding "sr4" (a Philox per four elements; absent: the
    /// "sr" price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_sr4_ns_per_elem: Option<Num>,
    /// Per element written with rounding "sr16" (8-bit uniforms, a Philox per sixteen
    /// elements; absent: the "sr4" price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_sr16_ns_per_elem: Option<Num>,
    /// Per input element of the amax pass, in calls that measure a tensor amax (two-level
    /// formats, refresh 1; absent: 0, the per-element terms then carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_amax_ns_per_elem: Option<Num>,
    /// Extra per input element of the amax pass of a call with an RHT on any copy: the pass
    /// rotates to measure the rotated copy's amax (strip.py's costs 2.5-2.9x its pass without,
    /// kernels-h200.md session 18 item 5; absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_amax_rht_ns_per_elem: Option<Num>,
    /// Per strip-kernel program in calls that record the amax in-kernel (single-level block
    /// formats: two atomics per program on the same two words; a program takes one or more
    /// tiles, ops.rs `in_kernel_amax_programs`; absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_amax_tile_ns: Option<Num>,
    /// Saving per element written in strip-kernel row+col calls whose programs take several
    /// row tiles (16-row tiles without an RHT, kernels/strip.py `strip_iters`): a program
    /// loads the next tile while it quantizes the current one, so (ITERS - 1) / ITERS of its
    /// elements count; subtracted (ops.rs `strip_tiles`; absent: 0, one tile a program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_prefetch_saving_ns_per_elem: Option<Num>,
    /// Saving per element written with rounding "sr16" in calls of quantizer revision 11
    /// on (ops.rs `quant_kernel`), whose sr16 rounds in integers; subtracted (absent: 0,
    /// the float form of earlier revisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_sr16_int_saving_ns_per_elem: Option<Num>,
    /// Saving per input element of a row+col call whose packed 4-bit column copy a strip
    /// program of several row tiles stores once (quantizer revision 12 on, ops.rs
    /// `quant_kernel`); subtracted (absent: 0, a tile's own stores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gather_saving_ns_per_elem: Option<Num>,
    /// Time of an RTNE row+col call on kernels/rowcol_gluon.py (quantizer revision 13 on,
    /// ops.rs `quant_kernel`) over the strip kernel's price of the same call, applied to the
    /// call's part beyond `triton_quant_call_us` (absent: 1, the strip kernel's price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_time_factor: Option<Num>,
    /// As `triton_quant_gluon_time_factor`, for the RTNE calls of quantizer revision 14 on
    /// (rowcol_gluon.py with a block of 16 in one lane; absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_one_lane_time_factor: Option<Num>,
    /// As `triton_quant_gluon_time_factor`, for the "sr16" row+col calls with blocks of 16
    /// that quantizer revision 14 on runs on rowcol_gluon.py (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_sr16_time_factor: Option<Num>,
    /// As `triton_quant_gluon_time_factor`, for the row+col calls with a column RHT of 16
    /// (blocks of 16, the column copy packed) that quantizer revision 14 on runs on
    /// rowcol_gluon.py (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_rht_time_factor: Option<Num>,
    /// As `triton_quant_gluon_rht_time_factor`, for its RTNE calls from quantizer revision 16
    /// (two row tiles a program: TE's X call) (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_rht_rtne_time_factor: Option<Num>,
    /// As `triton_quant_gluon_rht_time_factor`, for its "sr16" calls with a decoded column copy
    /// (quantizer revision 16 on: TE's dY call) (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_rht_decoded_time_factor: Option<Num>,
    /// As `triton_quant_gluon_time_factor`, for the calls of an f32 input that quantizer
    /// revision 17 on runs on rowcol_gluon.py (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_f32_time_factor: Option<Num>,
    /// As `triton_quant_gluon_time_factor`, for the calls with a row RHT of the block size
    /// that quantizer revision 18 on runs on rowcol_gluon.py (MXFP4's X and W) (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_row_rht_time_factor: Option<Num>,
    /// As `triton_quant_gluon_time_factor`, for the "sr16" calls on blocks of 32 that quantizer
    /// revision 18 on runs on rowcol_gluon.py (MXFP4's dY) (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_block32_sr16_time_factor: Option<Num>,
    /// A row+col call's amax pass on rowcol_gluon.py's kernel (quantizer revision 15 on, no
    /// RHT) over strip.py's, applied to `triton_quant_amax_ns_per_elem` (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_amax_time_factor: Option<Num>,
    /// As `triton_quant_gluon_amax_time_factor`, with a column RHT of 16: applied to the whole
    /// rotated pass, `triton_quant_amax_rht_ns_per_elem` included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_amax_rht_time_factor: Option<Num>,
    /// As `triton_quant_gluon_amax_rht_time_factor`, for quantizer revision 20 on: a bf16
    /// input's column RHT in f32 where f32 is exact, the f64 pass only where a bound calls for
    /// it (absent: `triton_quant_gluon_amax_rht_time_factor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_amax_rht_split_time_factor: Option<Num>,
    /// Quantizer revision 21 on: a bf16 input's RTNE call with both copies packed and a column
    /// RHT of 16 (one row tile at 80 registers) over its revision-20 price (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_rht_packed_rtne_time_factor: Option<Num>,
    /// As `triton_quant_gluon_rht_packed_rtne_time_factor`, for the "sr16" call (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_rht_packed_sr16_time_factor: Option<Num>,
    /// An amax pass over an f32 input (a LayerNorm's output under autocast) over the same pass
    /// over a bf16 one: strip.py's kernel without an RHT (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_amax_f32_time_factor: Option<Num>,
    /// As `triton_quant_amax_f32_time_factor`, for strip.py's rotated pass (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_amax_rht_f32_time_factor: Option<Num>,
    /// As `triton_quant_amax_f32_time_factor`, for rowcol_gluon.py's pass (quantizer revision
    /// 17 on takes f32 inputs) without an RHT (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_amax_f32_time_factor: Option<Num>,
    /// As `triton_quant_gluon_amax_f32_time_factor`, for its pass with a column RHT of 16 (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_quant_gluon_amax_rht_f32_time_factor: Option<Num>,
    /// Fixed GPU time of one profiled eager torch GEMM call beyond its kernel; ops opt in
    /// with `"impl": "torch-eager"`.
    pub torch_eager_call_us: Num,
    /// Clock the profiled eager GEMMs ran at (absent: `chip.clock_ghz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_eager_gemm_clock_ghz: Option<Num>,
    /// Kernel time of an emulated GEMM through fourcast's cuBLASLt call (decoded operands,
    /// the tensor scales as a device alpha) per unit of torch's BF16 GEMM of the same shape;
    /// ops opt in with `"impl": "torch-cublaslt"` (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cublaslt_gemm_time_factor: Option<Num>,
}

/// Names of the built-in GPUs.
pub fn names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

impl Profile {
    /// A built-in GPU by name, or a `.toml` / `.json` file by path.
    pub fn load(spec: &str) -> Result<Profile> {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == spec) {
            return Profile::from_toml_str(text, &format!("hwmodels/{name}.toml"));
        }
        let is_file = spec.ends_with(".toml") || spec.ends_with(".json");
        if !is_file {
            return Err(Error::unknown(Domain::Hardware, "hardware", spec, &names()));
        }
        let text = std::fs::read_to_string(spec).map_err(|e| Error::Config {
            file: spec.into(),
            line: 0,
            msg: format!("cannot read hardware file: {e}"),
        })?;
        if spec.ends_with(".json") {
            Profile::from_json_str(&text, spec)
        } else {
            Profile::from_toml_str(&text, spec)
        }
    }

    pub fn from_toml_str(text: &str, origin: &str) -> Result<Profile> {
        let p: Profile = toml::from_str(text).map_err(|e| Error::Config {
            file: origin.into(),
            line: e.span().map(|s| line_of(text, s.start)).unwrap_or(0),
            msg: e.message().to_string(),
        })?;
        p.validate().map_err(|(path, msg)| {
            let line = line_of_path(text, &path);
            Error::invalid(Domain::Hardware, format!("{origin}:{line}: {path}: {msg}"))
        })
    }

    pub fn from_json_str(text: &str, origin: &str) -> Result<Profile> {
        let p: Profile = serde_json::from_str(text).map_err(|e| Error::Config {
            file: origin.into(),
            line: e.line(),
            msg: e.to_string(),
        })?;
        p.validate().map_err(|(path, msg)| {
            Error::invalid(Domain::Hardware, format!("{origin}: {path}: {msg}"))
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("profile serialises")
    }

    /// Override one value by dotted path: `memory.hbm_tbs=10`, `mma.mxf4nvf4.tflops=20000`,
    /// `efficiency.mma_fp4=0.5`, `features.hw_sr=true`. Numbers keep their source, which
    /// gains a note, and become confidence "preliminary" (a what-if, not a fact).
    pub fn set(&self, path: &str, raw: &str) -> Result<Profile> {
        let mut value = serde_json::to_value(self).expect("serialises");
        let parsed: Value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.into()));
        let parts: Vec<&str> = path.split('.').collect();
        let mut slot = &mut value;
        let mut i = 0;
        while i < parts.len() {
            let part = parts[i];
            slot = match slot {
                Value::Object(map) if map.contains_key(part) => map.get_mut(part).expect("present"),
                Value::Array(items) => {
                    let found = items
                        .iter()
                        .position(|k| k.get("name").and_then(Value::as_str) == Some(part));
                    match found.or_else(|| part.parse::<usize>().ok().filter(|&j| j < items.len()))
                    {
                        Some(j) => &mut items[j],
                        None => return Err(no_field(path)),
                    }
                }
                _ => return Err(no_field(path)),
            };
            i += 1;
        }
        match slot {
            Value::Object(map) if map.contains_key("value") && map.contains_key("source") => {
                map.insert("value".into(), parsed);
                let src = map
                    .get("source")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                map.insert(
                    "source".into(),
                    Value::String(format!("set by user (was: {src})")),
                );
                map.insert("confidence".into(), Value::String("preliminary".into()));
            }
            other => *other = parsed,
        }
        let p: Profile = serde_json::from_value(value).map_err(|e| {
            Error::invalid(Domain::Hardware, format!("cannot set {path}={raw}: {e}"))
        })?;
        p.validate().map_err(|(field, msg)| {
            Error::invalid(
                Domain::Hardware,
                format!("cannot set {path}={raw}: {field}: {msg}"),
            )
        })
    }

    /// Check every name and number; Err((field path, why)).
    pub fn validate(self) -> std::result::Result<Profile, (String, String)> {
        let c = &self.chip;
        let m = &self.memory;
        let e = &self.efficiency;
        let positive: [(&str, &Num); 10] = [
            ("chip.sms", &c.sms),
            ("chip.clock_ghz", &c.clock_ghz),
            ("chip.vector_tflops", &c.vector_tflops),
            ("chip.sfu_texp_s", &c.sfu_texp_s),
            ("chip.tdp_w", &c.tdp_w),
            ("memory.hbm_gb", &m.hbm_gb),
            ("memory.hbm_tbs", &m.hbm_tbs),
            ("memory.l2_mb", &m.l2_mb),
            ("memory.l2_tbs", &m.l2_tbs),
            ("links.scaleup_gbs", &self.links.scaleup_gbs),
        ];
        for (path, n) in positive {
            check_num(path, n)?;
            if n.value <= 0.0 {
                return Err((path.into(), format!("must be > 0, got {}", n.value)));
            }
        }
        if c.sms.value.fract() != 0.0 {
            return Err((
                "chip.sms".into(),
                format!("must be a whole number, got {}", c.sms.value),
            ));
        }
        let fractions: [(&str, &Num); 8] = [
            ("efficiency.mma_bf16", &e.mma_bf16),
            ("efficiency.mma_fp8", &e.mma_fp8),
            ("efficiency.mma_fp4", &e.mma_fp4),
            ("efficiency.mem", &e.mem),
            ("efficiency.quant", &e.quant),
            ("efficiency.vec", &e.vec),
            ("efficiency.attention", &e.attention),
            ("efficiency.comm", &e.comm),
        ];
        for (path, n) in fractions {
            check_num(path, n)?;
            if !(n.value > 0.0 && n.value <= 1.0) {
                return Err((
                    path.into(),
                    format!("is a fraction of peak: must be in (0, 1], got {}", n.value),
                ));
            }
        }
        let default_attn = Num {
            value: 0.0,
            source: String::new(),
            confidence: "derived".into(),
        };
        for (path, n) in [
            ("efficiency.tile_overhead_cycles", &e.tile_overhead_cycles),
            ("efficiency.launch_us", &e.launch_us),
            (
                "efficiency.attention_tile_cycles",
                e.attention_tile_cycles.as_ref().unwrap_or(&default_attn),
            ),
        ] {
            check_num(path, n)?;
            if n.value < 0.0 {
                return Err((path.into(), format!("must be >= 0, got {}", n.value)));
            }
        }
        if let Some(em) = &self.emulation {
            for (path, n) in [
                ("emulation.triton_quant_call_us", &em.triton_quant_call_us),
                (
                    "emulation.triton_quant_ns_per_elem",
                    &em.triton_quant_ns_per_elem,
                ),
                (
                    "emulation.triton_quant_rht_ns_per_elem",
                    &em.triton_quant_rht_ns_per_elem,
                ),
                ("emulation.torch_eager_call_us", &em.torch_eager_call_us),
            ]
            .into_iter()
            .chain(
                [
                    (
                        "emulation.triton_quant_sr_ns_per_elem",
                        &em.triton_quant_sr_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_rht16_sr_ns_per_elem",
                        &em.triton_quant_rht16_sr_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_strip_rht_ns_per_elem",
                        &em.triton_quant_strip_rht_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_sr4_ns_per_elem",
                        &em.triton_quant_sr4_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_sr16_ns_per_elem",
                        &em.triton_quant_sr16_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_amax_ns_per_elem",
                        &em.triton_quant_amax_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_amax_rht_ns_per_elem",
                        &em.triton_quant_amax_rht_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_amax_tile_ns",
                        &em.triton_quant_amax_tile_ns,
                    ),
                    (
                        "emulation.triton_quant_prefetch_saving_ns_per_elem",
                        &em.triton_quant_prefetch_saving_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_sr16_int_saving_ns_per_elem",
                        &em.triton_quant_sr16_int_saving_ns_per_elem,
                    ),
                    (
                        "emulation.triton_quant_gather_saving_ns_per_elem",
                        &em.triton_quant_gather_saving_ns_per_elem,
                    ),
                    (
                        "emulation.cublaslt_gemm_time_factor",
                        &em.cublaslt_gemm_time_factor,
                    ),
                ]
                .into_iter()
                .filter_map(|(path, n)| n.as_ref().map(|n| (path, n))),
            ) {
                check_num(path, n)?;
                if n.value < 0.0 {
                    return Err((path.into(), format!("must be >= 0, got {}", n.value)));
                }
            }
        }
        if let Some(n) = self
            .emulation
            .as_ref()
            .and_then(|em| em.torch_eager_gemm_clock_ghz.as_ref())
        {
            let path = "emulation.torch_eager_gemm_clock_ghz";
            check_num(path, n)?;
            if n.value <= 0.0 {
                return Err((path.into(), format!("must be > 0, got {}", n.value)));
            }
        }
        check_conf("features.hw_sr", &self.features.hw_sr.confidence)?;
        check_conf("gemm.confidence", &self.gemm.confidence)?;
        if self.gemm.tiles.is_empty() || self.gemm.tiles.iter().any(|t| t[0] == 0 || t[1] == 0) {
            return Err((
                "gemm.tiles".into(),
                "needs at least one tile, each side > 0".into(),
            ));
        }
        if self.gemm.multicast == 0 {
            return Err(("gemm.multicast".into(), "must be >= 1".into()));
        }
        if self.mma.is_empty() {
            return Err(("mma".into(), "needs at least one MMA kind".into()));
        }
        for (i, k) in self.mma.iter().enumerate() {
            let at = |f: &str| format!("mma[{i}].{f}");
            check_num(&at("tflops"), &k.tflops)?;
            if k.tflops.value <= 0.0 {
                return Err((at("tflops"), format!("must be > 0, got {}", k.tflops.value)));
            }
            if k.name.is_empty() || k.name.contains('.') {
                return Err((
                    at("name"),
                    format!("must be non-empty without dots, got '{}'", k.name),
                ));
            }
            for (f, list) in [("a", &k.a), ("b", &k.b)] {
                if list.is_empty() {
                    return Err((at(f), "needs at least one element format".into()));
                }
                for x in list {
                    one_of(&at(f), x, &KIND_ELEMENTS)?;
                }
            }
            if k.scales.is_empty() {
                return Err((
                    at("scales"),
                    "needs at least one scale mode (\"none\" for none)".into(),
                ));
            }
            for s in &k.scales {
                one_of(&at("scales"), s, &KIND_SCALES)?;
            }
            one_of(&at("k_major_only"), &k.k_major_only, &K_MAJOR)?;
            one_of(&at("class"), &k.class, &CLASSES)?;
        }
        let has_bf16 = self
            .mma
            .iter()
            .any(|k| k.a.iter().any(|x| x == "bf16") && k.b.iter().any(|x| x == "bf16"));
        if !has_bf16 {
            return Err((
                "mma".into(),
                "needs a kind taking bf16 x bf16 (the fallback for every format)".into(),
            ));
        }
        Ok(self)
    }
}

fn no_field(path: &str) -> Error {
    Error::invalid(
        Domain::Hardware,
        format!("no hardware field '{path}' (e.g. memory.hbm_tbs, chip.sms, mma.<kind>.tflops, efficiency.mma_fp4, features.hw_sr)"),
    )
}

fn check_num(path: &str, n: &Num) -> std::result::Result<(), (String, String)> {
    if !n.value.is_finite() {
        return Err((path.into(), format!("must be finite, got {}", n.value)));
    }
    check_conf(path, &n.confidence)
}

fn check_conf(path: &str, conf: &str) -> std::result::Result<(), (String, String)> {
    one_of(path, conf, &CONFIDENCE).map_err(|(p, m)| (p, format!("confidence: {m}")))
}

fn one_of(path: &str, name: &str, valid: &[&str]) -> std::result::Result<(), (String, String)> {
    if valid.contains(&name) {
        Ok(())
    } else {
        Err((
            path.into(),
            format!("unknown '{name}'; valid: {}", valid.join(", ")),
        ))
    }
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte.min(text.len())].matches('\n').count() + 1
}

/// The line of field `path` ("memory.hbm_tbs", "mma[2].tflops") in a TOML text written
/// with [table] / [[array]] headers; 0 if it cannot be found.
pub fn line_of_path(text: &str, path: &str) -> usize {
    let (table, index, key) = split_path(path);
    let mut current = String::new();
    let mut seen: i64 = -1;
    let mut fallback = 0;
    for (no, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(h) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            current = h.trim().to_string();
            if current == table {
                seen += 1;
                if Some(seen as usize) == index && key.is_empty() {
                    return no + 1;
                }
            }
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = h.trim().to_string();
            if !key.is_empty() && current == format!("{table}.{key}") {
                return no + 1;
            }
            if current == table && (key.is_empty() || fallback == 0) {
                fallback = no + 1;
                if key.is_empty() {
                    return no + 1;
                }
            }
            continue;
        }
        let in_table = current == table && index.is_none_or(|i| seen == i as i64);
        let top = table.is_empty() && current.is_empty();
        if (in_table || top) && !key.is_empty() {
            let k = line.split('=').next().unwrap_or("").trim();
            if k == key {
                return no + 1;
            }
        }
    }
    fallback
}

fn split_path(path: &str) -> (String, Option<usize>, String) {
    let (head, key) = match path.rsplit_once('.') {
        Some((h, k)) => (h.to_string(), k.to_string()),
        None => (String::new(), path.to_string()),
    };
    if let Some((name, rest)) = head.split_once('[') {
        let idx = rest.trim_end_matches(']').parse().ok();
        return (name.to_string(), idx, key);
    }
    if head.is_empty() {
        if let Some((name, rest)) = key.split_once('[') {
            let idx = rest.trim_end_matches(']').parse().ok();
            return (name.to_string(), idx, String::new());
        }
    }
    (head, None, key)
}
