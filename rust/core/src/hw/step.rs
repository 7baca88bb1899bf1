//! One training step of a transformer (dense or MoE) on one GPU for a recipe: the three
//! GEMMs of every linear layer with each operand's format and chosen path, every
//! quantization pass the recipe implies (row/column copies, transposed copies for TN-only
//! MMAs, amax, RHT, SR, scale conversions; none for the layers kept in high precision),
//! attention, norms/activations, loss, optimizer and data-parallel communication.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Domain, Error, Result};
use crate::recipe::{Recipe, OPERANDS};

use super::attention::{attention_time, AttnShape};
use super::datapath::{choose, describe, Conv, Path};
use super::gemm::Shape;
use super::machine::Hw;
use super::memory::{pass_time, quant_cost, Pass, QuantCost, QuantOut};
use super::model::ModelSpec;
use super::operand::{Elem, Operand, ScaleFmt};

/// Breakdown categories, in report order.
pub const CATEGORIES: [&str; 11] = [
    "gemm",
    "gemm_hp",
    "attention",
    "quantize",
    "amax",
    "rht",
    "sr",
    "other",
    "loss",
    "optimizer",
    "comm_exposed",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    /// Tokens each GPU processes per optimizer step.
    #[serde(default = "default_tokens")]
    pub tokens_per_gpu: u64,
    /// Sequence length (0 = the model's).
    #[serde(default)]
    pub seq_len: u32,
    /// Micro-batches per step (weights are quantized once per step).
    #[serde(default = "one")]
    pub microbatches: u32,
    /// Data-parallel GPUs (gradients all-reduced over the scale-up links; ZeRO-1 optimizer).
    #[serde(default = "one")]
    pub dp: u32,
    /// Fraction of the backward pass that can hide gradient communication.
    #[serde(default = "default_overlap")]
    pub comm_overlap: f64,
}

fn default_tokens() -> u64 {
    16384
}
fn one() -> u32 {
    1
}
fn default_overlap() -> f64 {
    0.8
}

impl Default for StepConfig {
    fn default() -> Self {
        StepConfig {
            tokens_per_gpu: default_tokens(),
            seq_len: 0,
            microbatches: 1,
            dp: 1,
            comm_overlap: default_overlap(),
        }
    }
}

impl StepConfig {
    pub fn validate(&self, model: &ModelSpec) -> Result<u32> {
        let seq = if self.seq_len == 0 {
            model.seq_len
        } else {
            self.seq_len
        };
        let bad = |m: String| Err(Error::invalid(Domain::Config, m));
        if self.microbatches == 0 || self.dp == 0 {
            return bad("microbatches and dp must be >= 1".into());
        }
        let per_mb = self.tokens_per_gpu / self.microbatches as u64;
        if per_mb == 0
            || per_mb % seq as u64 != 0
            || self.tokens_per_gpu % self.microbatches as u64 != 0
        {
            return bad(format!(
                "tokens_per_gpu ({}) must split into {} micro-batch(es) of whole sequences of {seq} tokens",
                self.tokens_per_gpu, self.microbatches
            ));
        }
        if !(0.0..=1.0).contains(&self.comm_overlap) {
            return bad(format!(
                "comm_overlap must be in [0, 1], got {}",
                self.comm_overlap
            ));
        }
        Ok(seq)
    }
}

/// Operand formats of one linear layer's three GEMMs, resolved from a recipe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearFormats {
    /// In OPERANDS order: fprop.x, fprop.w, dgrad.dy, dgrad.w, wgrad.dy, wgrad.x.
    pub ops: [Operand; 6],
    /// RHT size per GEMM (fprop, dgrad, wgrad); 0 = none.
    pub rht: [u32; 3],
    pub sr: [bool; 6],
    /// The recipe's SR uniforms come four per Philox (sr_stream = "x4", rounding "sr4").
    pub sr4: bool,
    /// ... or sixteen, 8 bits each (sr_stream = "x16", rounding "sr16").
    pub sr16: bool,
    pub refresh: u32,
}

impl LinearFormats {
    pub fn from_recipe(r: &Recipe) -> Result<LinearFormats> {
        let mut ops = [Operand::BF16; 6];
        let mut sr = [false; 6];
        for (i, key) in OPERANDS.iter().enumerate() {
            ops[i] = Operand::from_recipe(r.operand(key)?)?;
            sr[i] = r.sr_on(key);
        }
        let size = |g: &str| if r.rht_on(g) { r.rht.size } else { 0 };
        Ok(LinearFormats {
            ops,
            rht: [size("fprop"), size("dgrad"), size("wgrad")],
            sr,
            sr4: r.sr_stream == "x4",
            sr16: r.sr_stream == "x16",
            refresh: r.tensor_scale_refresh,
        })
    }

    /// High-precision layers: bf16, or fp8 with per-tensor current scaling.
    pub fn high_precision(precision: &str) -> LinearFormats {
        let mut ops = [Operand::BF16; 6];
        if precision == "fp8" {
            let f = |elem| Operand {
                elem,
                scale: ScaleFmt::Tensor,
                block: 0,
                tile_2d: false,
            };
            ops = [
                f(Elem::E4m3),
                f(Elem::E4m3),
                f(Elem::E5m2),
                f(Elem::E4m3),
                f(Elem::E5m2),
                f(Elem::E4m3),
            ];
        }
        LinearFormats {
            ops,
            rht: [0; 3],
            sr: [false; 6],
            sr4: false,
            sr16: false,
            refresh: 1,
        }
    }

    pub fn is_quantized(&self) -> bool {
        self.ops.iter().any(|o| o.is_quantized())
    }
}

/// One linear layer (or a group of expert linears).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Linear {
    pub name: &'static str,
    pub d_in: f64,
    pub d_out: f64,
    /// Tokens per group per micro-batch.
    pub tokens: f64,
    pub groups: f64,
}

/// The three GEMM shapes of a linear layer: fprop, dgrad, wgrad.
pub fn gemm_shapes(l: &Linear) -> [Shape; 3] {
    let s = |m, n, k| Shape {
        m,
        n,
        k,
        groups: l.groups,
    };
    [
        s(l.tokens, l.d_out, l.d_in),
        s(l.tokens, l.d_in, l.d_out),
        s(l.d_out, l.d_in, l.tokens),
    ]
}

/// Cost of one linear layer for one micro-batch (weights: once per call of `cost`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearCost {
    pub paths: [Path; 3],
    pub shapes: [Shape; 3],
    /// Activation and gradient quantization per micro-batch.
    pub act_quant: QuantCost,
    /// Weight quantization (once per step).
    pub weight_quant: QuantCost,
    /// dY quantization share (backward, for overlap accounting).
    pub bwd_quant_s: f64,
}

fn use_out(
    f: &LinearFormats,
    idx: usize,
    gemm: usize,
    path: &Path,
    side_a: bool,
) -> Option<QuantOut> {
    let op = f.ops[idx];
    if !op.is_quantized() {
        return None;
    }
    let pl = if side_a { path.a } else { path.b };
    Some(QuantOut {
        fmt: op,
        container: pl.container,
        rht: f.rht[gemm],
        sr: f.sr[idx],
        sr4: f.sr[idx] && f.sr4,
        sr16: f.sr[idx] && f.sr16,
        copies: 1,
        scale_conv: pl.conv == Conv::ScaleToE4m3,
    })
}

/// Outputs of one tensor used row-wise by one GEMM and column-wise by another.
fn tensor_outs(
    hw: &Hw,
    row: Option<QuantOut>,
    col: Option<QuantOut>,
    col_path: &Path,
) -> Vec<QuantOut> {
    match (row, col) {
        (Some(r), Some(c)) => {
            let shareable = r == c && (r.fmt.scale == ScaleFmt::Tensor || r.fmt.tile_2d);
            if shareable {
                // One quantization serves both; a TN-only MMA needs the transposed copy too.
                let kind = &hw.kinds[col_path.kind];
                let mut one = r;
                one.copies = if kind.needs_k_major(c.container) {
                    2
                } else {
                    1
                };
                vec![one]
            } else {
                vec![r, c]
            }
        }
        (Some(r), None) => vec![r],
        (None, Some(c)) => vec![c],
        (None, None) => vec![],
    }
}

pub fn linear_cost(hw: &Hw, l: &Linear, f: &LinearFormats) -> LinearCost {
    let shapes = gemm_shapes(l);
    let pair = [(0, 1), (2, 3), (4, 5)];
    let paths: [Path; 3] = std::array::from_fn(|g| {
        let (a, b) = pair[g];
        choose(hw, &shapes[g], &f.ops[a], &f.ops[b], 2.0)
    });
    // X: fprop.x (row) and wgrad.x (column); W: fprop.w (row), dgrad.w (column);
    // dY: dgrad.dy (row), wgrad.dy (column).
    let x = tensor_outs(
        hw,
        use_out(f, 0, 0, &paths[0], true),
        use_out(f, 5, 2, &paths[2], false),
        &paths[2],
    );
    let w = tensor_outs(
        hw,
        use_out(f, 1, 0, &paths[0], false),
        use_out(f, 3, 1, &paths[1], false),
        &paths[1],
    );
    let dy = tensor_outs(
        hw,
        use_out(f, 2, 1, &paths[1], true),
        use_out(f, 4, 2, &paths[2], true),
        &paths[2],
    );
    let n_x = l.groups * l.tokens * l.d_in;
    let n_w = l.groups * l.d_out * l.d_in;
    let n_dy = l.groups * l.tokens * l.d_out;
    let qx = quant_cost(hw, n_x, 2.0, &x, f.refresh);
    let qdy = quant_cost(hw, n_dy, 2.0, &dy, f.refresh);
    let mut act = qx;
    act.add(&qdy, 1.0);
    LinearCost {
        paths,
        shapes,
        act_quant: act,
        weight_quant: quant_cost(hw, n_w, 2.0, &w, f.refresh),
        bwd_quant_s: qdy.total(),
    }
}

/// Where a linear layer sits (decides which recipe setting quantizes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Attn,
    Mlp,
    Router,
}

fn block_linears(m: &ModelSpec, tokens: f64) -> Vec<(Part, Linear)> {
    let d = m.hidden as f64;
    let hd = m.head_dim() as f64;
    let q = m.heads as f64 * hd;
    let kv = m.kv_heads as f64 * hd;
    let lin = |name, d_in, d_out, tokens, groups| Linear {
        name,
        d_in,
        d_out,
        tokens,
        groups,
    };
    let mut v = vec![
        (Part::Attn, lin("attn.qkv", d, q + 2.0 * kv, tokens, 1.0)),
        (Part::Attn, lin("attn.out", q, d, tokens, 1.0)),
    ];
    let gate = if m.gated { 2.0 } else { 1.0 };
    if m.is_moe() {
        let e = m.experts as f64;
        let per = tokens * m.top_k as f64 / e;
        let fe = m.expert_ffn as f64;
        v.push((Part::Router, lin("moe.router", d, e, tokens, 1.0)));
        v.push((Part::Mlp, lin("moe.experts.up", d, gate * fe, per, e)));
        v.push((Part::Mlp, lin("moe.experts.down", fe, d, per, e)));
    } else {
        let f = m.ffn as f64;
        v.push((Part::Mlp, lin("mlp.up", d, gate * f, tokens, 1.0)));
        v.push((Part::Mlp, lin("mlp.down", f, d, tokens, 1.0)));
    }
    v
}

/// A linear layer's evaluated cost and how often it runs per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearUse {
    pub linear: Linear,
    pub quantized: bool,
    pub formats: LinearFormats,
    pub cost: LinearCost,
    /// Layers of this kind per step.
    pub count: f64,
}

/// The numbers of one step (strings are built only by `report`).
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    pub step_time_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    /// Seconds per category, in CATEGORIES order.
    pub breakdown: [f64; 11],
    pub linears: Vec<LinearUse>,
    pub quant_kernels: f64,
    pub memory_gb: f64,
    pub fits_memory: bool,
    pub seq_len: u32,
    pub microbatches: u32,
}

/// Evaluate one training step of `model` with `recipe` on `hw` (natives already applied).
pub fn step(hw: &Hw, model: &ModelSpec, recipe: &Recipe, cfg: &StepConfig) -> Result<StepResult> {
    let seq = cfg.validate(model)?;
    let mb = cfg.microbatches as f64;
    let tokens = (cfg.tokens_per_gpu as f64) / mb;
    let q_fmt = LinearFormats::from_recipe(recipe)?;
    let hp_fmt = LinearFormats::high_precision(&recipe.other_precision);
    let bf16 = LinearFormats::high_precision("bf16");
    let layers = model.layers as f64;
    let kept = (recipe.keep_bf16_first + recipe.keep_bf16_last).min(model.layers) as f64;
    let q_blocks = layers - kept;
    let part_q = |p: Part| match p {
        Part::Router => false,
        Part::Attn => recipe.fp4_layers != "mlp",
        Part::Mlp => recipe.fp4_layers != "attn",
    };
    let mut b = [0.0f64; 11];
    let mut bwd_s = 0.0;
    let mut linears: Vec<LinearUse> = Vec::with_capacity(12);
    let mut quant_kernels = 0.0;
    // "gemm": block linears in the recipe's own format; "gemm_hp": what the recipe keeps
    // in high precision (kept blocks, other parts, router, head).
    let body_bf16 = !q_fmt.is_quantized();
    let mut add_linear = |lin: Linear,
                          fmts: &LinearFormats,
                          quantized: bool,
                          count: f64,
                          b: &mut [f64; 11],
                          bwd: &mut f64| {
        if count == 0.0 {
            return;
        }
        let c = linear_cost(hw, &lin, fmts);
        let gemm: f64 = c.paths.iter().map(|p| p.gemm_s).sum();
        let in_body = lin.name != "head" && lin.name != "moe.router";
        let slot = if quantized || (body_bf16 && in_body) {
            0
        } else {
            1
        };
        b[slot] += gemm * mb * count;
        let mut q = QuantCost::default();
        q.add(&c.act_quant, mb * count);
        q.add(&c.weight_quant, count);
        b[3] += q.quantize;
        b[4] += q.amax;
        b[5] += q.rht;
        b[6] += q.sr;
        quant_kernels += q.passes;
        *bwd += (c.paths[1].gemm_s + c.paths[2].gemm_s + c.bwd_quant_s) * mb * count;
        linears.push(LinearUse {
            linear: lin,
            quantized,
            formats: *fmts,
            cost: c,
            count,
        });
    };
    for (part, lin) in block_linears(model, tokens) {
        if part == Part::Router {
            add_linear(lin, &bf16, false, layers, &mut b, &mut bwd_s);
            continue;
        }
        let quantize_part = part_q(part) && q_fmt.is_quantized();
        if quantize_part {
            add_linear(lin, &q_fmt, true, q_blocks, &mut b, &mut bwd_s);
            add_linear(lin, &hp_fmt, false, kept, &mut b, &mut bwd_s);
        } else {
            let f = if q_fmt.is_quantized() { &hp_fmt } else { &bf16 };
            add_linear(lin, f, false, layers, &mut b, &mut bwd_s);
        }
    }
    let d = model.hidden as f64;
    let head = Linear {
        name: "head",
        d_in: d,
        d_out: model.vocab as f64,
        tokens,
        groups: 1.0,
    };
    if recipe.quantize_head && q_fmt.is_quantized() {
        add_linear(head, &q_fmt, true, 1.0, &mut b, &mut bwd_s);
    } else {
        add_linear(head, &bf16, false, 1.0, &mut b, &mut bwd_s);
    }

    // Attention.
    let attn = AttnShape {
        batch: tokens / seq as f64,
        seq: seq as f64,
        heads: model.heads as f64,
        kv_heads: model.kv_heads as f64,
        head_dim: model.head_dim() as f64,
        causal: true,
        fp8: false,
    };
    let (af, ab, _) = attention_time(hw, &attn)?;
    b[2] = (af + ab) * layers * mb;
    bwd_s += ab * layers * mb;

    // Norms, rotary, activations, MoE dispatch: bytes per token, per micro-batch.
    let hd = model.head_dim() as f64;
    let rope = 8.0 * (model.heads + model.kv_heads) as f64 * hd;
    let (act_width, dispatch) = if model.is_moe() {
        (
            model.top_k as f64 * model.expert_ffn as f64,
            16.0 * model.top_k as f64 * d,
        )
    } else {
        (model.ffn as f64, 0.0)
    };
    let act = if model.gated {
        16.0 * act_width
    } else {
        10.0 * act_width
    };
    let per_block = Pass {
        read: tokens * (2.0 * 10.0 * d + rope + act + dispatch) / 2.0,
        write: tokens * (2.0 * 10.0 * d + rope + act + dispatch) / 2.0,
        ops: tokens * (2.0 * 4.0 * d + act_width * 6.0),
        exps: tokens * act_width * 2.0,
        launches: 8.0 + if model.is_moe() { 6.0 } else { 0.0 },
        quant: false,
    };
    let per_model = Pass {
        read: tokens * 20.0 * d / 2.0,
        write: tokens * 20.0 * d / 2.0,
        ops: tokens * 8.0 * d,
        launches: 4.0,
        ..Pass::default()
    };
    b[7] = (pass_time(hw, &per_block).0 * layers + pass_time(hw, &per_model).0) * mb;
    let v = model.vocab as f64;
    let loss = Pass {
        read: tokens * v * 2.0,
        write: tokens * v * 2.0,
        ops: tokens * v * 4.0,
        exps: tokens * v,
        launches: 2.0,
        quant: false,
    };
    b[8] = pass_time(hw, &loss).0 * mb;

    // Optimizer (Adam, FP32 master weights; ZeRO-1 sharded over data parallel ranks).
    let params = model.total_params();
    let dp = cfg.dp as f64;
    let opt = Pass {
        read: params * 16.0 / dp,
        write: params * 14.0 / dp,
        ops: params * 12.0 / dp,
        launches: 10.0,
        ..Pass::default()
    };
    b[9] = pass_time(hw, &opt).0;

    // Gradient reduce-scatter + parameter all-gather = one all-reduce of BF16 gradients.
    if cfg.dp > 1 {
        let bytes = 2.0 * params;
        let per_dir = hw.link_bps / 2.0 * hw.eff.comm;
        let comm = 2.0 * (dp - 1.0) / dp * bytes / per_dir;
        b[10] = (comm - cfg.comm_overlap * bwd_s).max(0.0);
    }

    let step_time_s: f64 = b.iter().sum();
    let flops = model.train_flops_per_token(seq as f64) * cfg.tokens_per_gpu as f64;
    let states = params * (2.0 + 4.0 + 12.0 / dp);
    let activations = 34.0 * d * tokens * layers;
    let memory = states + activations;
    Ok(StepResult {
        step_time_s,
        tokens_per_s_per_gpu: cfg.tokens_per_gpu as f64 / step_time_s,
        mfu: flops / (step_time_s * hw.bf16_peak()),
        breakdown: b,
        linears,
        quant_kernels,
        memory_gb: memory / 1e9,
        fits_memory: memory <= hw.hbm_bytes,
        seq_len: seq,
        microbatches: cfg.microbatches,
    })
}

/// One GEMM of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmLine {
    pub layer: &'static str,
    pub precision: &'static str,
    pub gemm: &'static str,
    pub m: f64,
    pub n: f64,
    pub k: f64,
    pub groups: f64,
    pub kind: String,
    pub path: String,
    pub time_s: f64,
    pub bound: &'static str,
    /// Calls per step.
    pub count: f64,
}

/// A step result with names, for JSON / Python.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    pub hw: String,
    pub model: String,
    pub recipe: String,
    pub native: Vec<String>,
    pub step_time_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    pub breakdown: BTreeMap<&'static str, f64>,
    pub gemms: Vec<GemmLine>,
    pub quant_kernels_per_step: f64,
    pub memory_gb: f64,
    pub fits_memory: bool,
    pub tokens_per_gpu: u64,
    pub seq_len: u32,
    pub dp: u32,
    pub notes: Vec<String>,
}

impl StepResult {
    pub fn report(
        &self,
        hw: &Hw,
        model: &ModelSpec,
        recipe: &Recipe,
        cfg: &StepConfig,
    ) -> StepReport {
        let mut gemms = vec![];
        let mut notes: Vec<String> = hw.notes.clone();
        let names = ["fprop", "dgrad", "wgrad"];
        let pair = [(0, 1), (2, 3), (4, 5)];
        for u in &self.linears {
            let precision = if u.quantized {
                "quantized"
            } else if u.formats.is_quantized() {
                "fp8"
            } else {
                "bf16"
            };
            for g in 0..3 {
                let p = &u.cost.paths[g];
                let s = &u.cost.shapes[g];
                let (a, b) = (u.formats.ops[pair[g].0], u.formats.ops[pair[g].1]);
                for (pl, op) in [(p.a, a), (p.b, b)] {
                    let note = match pl.conv {
                        Conv::Dequant => Some(format!(
                            "{} operands are emulated on {} (dequantized to bf16): no native path",
                            op.label(),
                            hw.name
                        )),
                        Conv::ScaleToE4m3 => Some(format!(
                            "ue5m3 scales are re-encoded as e4m3 + tensor scale on {} (no native ue5m3; lossy if a tensor's block scales span > 17.8 binades)",
                            hw.name
                        )),
                        Conv::FoldPow2 => Some(format!(
                            "{} runs as row-scaled fp8 on {} (ue8m0 folded into the elements; exact while a row's block exponents span <= 14 binades)",
                            op.label(),
                            hw.name
                        )),
                        Conv::None => None,
                    };
                    if let Some(n) = note {
                        if !notes.contains(&n) {
                            notes.push(n);
                        }
                    }
                }
                gemms.push(GemmLine {
                    layer: u.linear.name,
                    precision,
                    gemm: names[g],
                    m: s.m,
                    n: s.n,
                    k: s.k,
                    groups: s.groups,
                    kind: hw.kinds[p.kind].name.clone(),
                    path: describe(hw, p, &a, &b),
                    time_s: p.gemm_s,
                    bound: p.bound.name(),
                    count: u.count * self.microbatches as f64,
                });
            }
        }
        if !self.fits_memory {
            notes.push(format!(
                "needs about {:.0} GB (weights, grads, optimizer, activations without recompute) > {:.0} GB HBM: add data/tensor parallelism or recompute",
                self.memory_gb,
                hw.hbm_bytes / 1e9
            ));
        }
        StepReport {
            hw: hw.name.clone(),
            model: model.name.clone(),
            recipe: recipe.name.clone(),
            native: hw.natives.clone(),
            step_time_s: self.step_time_s,
            tokens_per_s_per_gpu: self.tokens_per_s_per_gpu,
            mfu: self.mfu,
            breakdown: CATEGORIES.iter().copied().zip(self.breakdown).collect(),
            gemms,
            quant_kernels_per_step: self.quant_kernels,
            memory_gb: self.memory_gb,
            fits_memory: self.fits_memory,
            tokens_per_gpu: cfg.tokens_per_gpu,
            seq_len: self.seq_len,
            dp: cfg.dp,
            notes,
        }
    }
}
