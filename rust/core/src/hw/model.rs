//! Transformer shapes for the step model: presets and user JSON/TOML files.

use serde::{Deserialize, Serialize};

use crate::error::{Domain, Error, Result};

pub const MODELS: [&str; 5] = [
    "llama3-8b",
    "llama3-70b",
    "llama3.1-405b",
    "gpt-1.5b",
    "moe-8b",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub name: String,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    /// 0 = hidden / heads.
    #[serde(default)]
    pub head_dim: u32,
    /// Dense MLP width (per branch for gated MLPs).
    pub ffn: u32,
    /// SwiGLU-style gated MLP (three matrices) or a plain two-matrix MLP (GELU).
    #[serde(default = "yes")]
    pub gated: bool,
    pub vocab: u32,
    #[serde(default = "default_seq")]
    pub seq_len: u32,
    /// Routed experts (0 = dense).
    #[serde(default)]
    pub experts: u32,
    #[serde(default)]
    pub top_k: u32,
    /// Width of one expert's MLP.
    #[serde(default)]
    pub expert_ffn: u32,
    #[serde(default)]
    pub tied_embeddings: bool,
}

fn yes() -> bool {
    true
}
fn default_seq() -> u32 {
    4096
}

/// A dense, gated (SwiGLU) model: [layers, hidden, heads, kv_heads, ffn, vocab, seq_len].
fn dense(name: &str, dims: [u32; 7]) -> ModelSpec {
    let [layers, hidden, heads, kv_heads, ffn, vocab, seq_len] = dims;
    ModelSpec {
        name: name.into(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim: 0,
        ffn,
        gated: true,
        vocab,
        seq_len,
        experts: 0,
        top_k: 0,
        expert_ffn: 0,
        tied_embeddings: false,
    }
}

impl ModelSpec {
    pub fn preset(name: &str) -> Result<ModelSpec> {
        Ok(match name {
            "llama3-8b" => dense(name, [32, 4096, 32, 8, 14336, 128256, 8192]),
            "llama3-70b" => dense(name, [80, 8192, 64, 8, 28672, 128256, 8192]),
            "llama3.1-405b" => dense(name, [126, 16384, 128, 8, 53248, 128256, 8192]),
            "gpt-1.5b" => ModelSpec {
                gated: false,
                tied_embeddings: true,
                ..dense(name, [48, 1600, 25, 25, 6400, 50304, 1024])
            },
            // OLMoE-like: 64 experts, top-8, about 8.1B parameters in total, 1.4B active.
            "moe-8b" => ModelSpec {
                experts: 64,
                top_k: 8,
                expert_ffn: 1216,
                ..dense(name, [16, 2048, 16, 16, 0, 50304, 4096])
            },
            _ => return Err(Error::unknown(Domain::Config, "model", name, &MODELS)),
        })
    }

    /// A preset name or a `.json` / `.toml` file.
    pub fn load(spec: &str) -> Result<ModelSpec> {
        if MODELS.contains(&spec) {
            return ModelSpec::preset(spec);
        }
        if !(spec.ends_with(".json") || spec.ends_with(".toml")) {
            return Err(Error::unknown(Domain::Config, "model", spec, &MODELS));
        }
        let text = std::fs::read_to_string(spec).map_err(|e| Error::Config {
            file: spec.into(),
            line: 0,
            msg: format!("cannot read model file: {e}"),
        })?;
        ModelSpec::parse(&text, spec)
    }

    /// Parse model text; JSON if it starts with '{', else TOML.
    pub fn parse(text: &str, origin: &str) -> Result<ModelSpec> {
        let m: ModelSpec = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| Error::Config {
                file: origin.into(),
                line: e.line(),
                msg: e.to_string(),
            })?
        } else {
            toml::from_str(text).map_err(|e| Error::Config {
                file: origin.into(),
                line: e
                    .span()
                    .map(|s| text[..s.start].matches('\n').count() + 1)
                    .unwrap_or(0),
                msg: e.message().to_string(),
            })?
        };
        m.validate(origin)
    }

    pub fn validate(self, origin: &str) -> Result<ModelSpec> {
        let bad = |msg: String| {
            Err(Error::invalid(
                Domain::Config,
                format!("{origin}: model '{}': {msg}", self.name),
            ))
        };
        for (what, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
        ] {
            if v == 0 {
                return bad(format!("{what} must be > 0"));
            }
        }
        if self.heads % self.kv_heads != 0 {
            return bad(format!(
                "heads ({}) must be a multiple of kv_heads ({})",
                self.heads, self.kv_heads
            ));
        }
        if self.head_dim == 0 && self.hidden % self.heads != 0 {
            return bad(format!(
                "hidden ({}) must divide by heads ({}) or head_dim must be set",
                self.hidden, self.heads
            ));
        }
        if self.experts == 0 && self.ffn == 0 {
            return bad("a dense model needs ffn > 0".into());
        }
        if self.experts > 0
            && (self.top_k == 0 || self.top_k > self.experts || self.expert_ffn == 0)
        {
            return bad(format!(
                "a MoE needs 0 < top_k <= experts and expert_ffn > 0 (got experts {}, top_k {}, expert_ffn {})",
                self.experts, self.top_k, self.expert_ffn
            ));
        }
        Ok(self)
    }

    pub fn head_dim(&self) -> u32 {
        if self.head_dim > 0 {
            self.head_dim
        } else {
            self.hidden / self.heads
        }
    }

    pub fn is_moe(&self) -> bool {
        self.experts > 0
    }

    fn attn_params(&self) -> f64 {
        let d = self.hidden as f64;
        let hd = self.head_dim() as f64;
        let q = self.heads as f64 * hd;
        let kv = self.kv_heads as f64 * hd;
        d * (q + 2.0 * kv) + q * d
    }

    fn mlp_params(&self, width: u32) -> f64 {
        let mats = if self.gated { 3.0 } else { 2.0 };
        mats * self.hidden as f64 * width as f64
    }

    /// Parameters of the linear layers of one block, all experts counted.
    pub fn block_params(&self) -> f64 {
        let mlp = if self.is_moe() {
            self.experts as f64 * self.mlp_params(self.expert_ffn)
                + self.hidden as f64 * self.experts as f64
        } else {
            self.mlp_params(self.ffn)
        };
        self.attn_params() + mlp
    }

    /// Linear-layer parameters one token passes through in one block.
    pub fn block_active_params(&self) -> f64 {
        let mlp = if self.is_moe() {
            self.top_k as f64 * self.mlp_params(self.expert_ffn)
                + self.hidden as f64 * self.experts as f64
        } else {
            self.mlp_params(self.ffn)
        };
        self.attn_params() + mlp
    }

    pub fn embedding_params(&self) -> f64 {
        let e = self.vocab as f64 * self.hidden as f64;
        if self.tied_embeddings {
            e
        } else {
            2.0 * e
        }
    }

    pub fn total_params(&self) -> f64 {
        self.layers as f64 * self.block_params() + self.embedding_params()
    }

    pub fn active_params(&self) -> f64 {
        self.layers as f64 * self.block_active_params() + self.embedding_params()
    }

    /// Model FLOPs per token for training (6 x active matmul params incl. the head, plus
    /// causal attention fwd + bwd), the MFU numerator.
    pub fn train_flops_per_token(&self, seq: f64) -> f64 {
        let head = self.vocab as f64 * self.hidden as f64;
        let matmul = 6.0 * (self.layers as f64 * self.block_active_params() + head);
        let attn = 6.0 * seq * self.heads as f64 * self.head_dim() as f64 * self.layers as f64;
        matmul + attn
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("model serialises")
    }
}
