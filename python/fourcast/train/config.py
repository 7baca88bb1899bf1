"""Typed configuration of a training run: the model, the data, the loop.

A run is `RunConfig(recipe, model, data, train)`; `config.json` in the run folder is
its `to_dict()`. Model sizes come from a preset name, optionally followed by
`field=value` overrides (`"125m,n_layers=6"`), or from overrides alone (on top of
`tiny`). Other fields change through `apply_sets(cfg, {"train.warmup_steps": "20"})`,
which converts each value to the field's declared type (no eval, no exec).

    >>> from fourcast.train.config import model_config
    >>> m = model_config("tiny,n_layers=3")
    >>> (m.d_model, m.n_layers, m.n_experts)
    (64, 3, 0)
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from fourcast.errors import TrainError

# Vocabulary rows are padded to a multiple of this so every GEMM dimension divides
# 16x16 tiles, block 32 and RHT up to 128 (and tensor cores like it).
VOCAB_MULTIPLE = 128


@dataclass
class ModelConfig:
    """A Llama-style decoder: RMSNorm, RoPE, SwiGLU, SDPA; MoE when n_experts > 0."""

    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 2
    ffn_hidden: int = 192
    vocab_size: int = 256  # set from the tokenizer at run time (before padding)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    n_experts: int = 0  # 0 = dense MLP
    top_k: int = 2
    moe_aux_weight: float = 0.01  # load-balancing loss weight
    # Tokens routed to an expert are padded with zero rows to a multiple of this, so
    # the expert GEMMs' token dimension (Wgrad's reduction dim) fits every block/RHT.
    moe_token_multiple: int = 128
    # Fused projections: one wqkv Linear (d -> 3d; q, k, v rows in that order) in
    # attention and one w_gate_up Linear (d -> 2*hidden; gate rows, then up) in every
    # SwiGLU (MoE experts too) instead of wq/wk/wv and w_gate/w_up. Each fused Linear
    # quantizes its input X once instead of three (two) times, launches fewer kernels
    # and runs larger GEMMs. Numerically every weight row block is the same as
    # unfused, but the tensor amax (two-level rules' FP32 scale) of W and of dY is
    # shared across q/k/v (gate/up), and per-layer RHT signs / SR seeds follow the new
    # layer ids. Same parameter count. False builds the older model exactly (module
    # names, init), which config.json files written before this field existed mean
    # (see LEGACY_MODEL_DEFAULTS).
    fused_proj: bool = True

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelConfig":
        """A saved `model` section (config.json, profile.json): fields it predates take
        their legacy value, not today's default."""
        return cls(**legacy_model_dict(d))

    @property
    def padded_vocab(self) -> int:
        return -(-self.vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    def n_params(self) -> int:
        """Parameter count (embedding and head included, untied)."""
        d, f, L = self.d_model, self.ffn_hidden, self.n_layers
        attn = 4 * d * d
        mlp = 3 * d * f
        if self.n_experts:
            mlp = self.n_experts * mlp + d * self.n_experts
        return L * (attn + mlp + 2 * d) + 2 * self.padded_vocab * d + d

    def n_active_params(self) -> int:
        """Parameters one token touches (differs from n_params for MoE)."""
        if not self.n_experts:
            return self.n_params()
        d, f, L = self.d_model, self.ffn_hidden, self.n_layers
        return L * (4 * d * d + self.top_k * 3 * d * f + d * self.n_experts + 2 * d) + 2 * self.padded_vocab * d + d

    def check(self) -> "ModelConfig":
        if self.d_model % self.n_heads:
            raise TrainError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise TrainError(f"head size {self.d_model // self.n_heads} must be even for RoPE")
        for name in ("d_model", "ffn_hidden"):
            if getattr(self, name) % 32:
                raise TrainError(
                    f"{name}={getattr(self, name)} must be a multiple of 32 so it fits FP4 blocks "
                    "(a multiple of 128 fits every block and RHT size)"
                )
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise TrainError(f"top_k {self.top_k} must be between 1 and n_experts {self.n_experts}")
        if min(self.n_layers, self.n_heads, self.d_model, self.ffn_hidden) < 1:
            raise TrainError("model sizes must be positive")
        return self


# ModelConfig fields added after run folders were first written, with the value a saved
# config that lacks them means (how the model was built before the field existed),
# which can differ from the default for new runs.
LEGACY_MODEL_DEFAULTS: dict[str, Any] = {"fused_proj": False}


def legacy_model_dict(d: Mapping[str, Any]) -> dict[str, Any]:
    """A saved model section with the fields it predates filled in as LEGACY_MODEL_DEFAULTS."""
    return {**LEGACY_MODEL_DEFAULTS, **d}


# Presets: a CPU-sized tiny model up to ~350M parameters (counts with a 16k vocabulary:
# see `fourcast models`). d_model and ffn_hidden are multiples of 64 or 128 so every
# GEMM fits the FP4 block layouts.
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, n_layers=4, n_heads=2, ffn_hidden=192),
    "10m": dict(d_model=384, n_layers=6, n_heads=6, ffn_hidden=1024),
    "50m": dict(d_model=640, n_layers=10, n_heads=10, ffn_hidden=1792),
    "125m": dict(d_model=768, n_layers=12, n_heads=12, ffn_hidden=2304),
    "350m": dict(d_model=1024, n_layers=24, n_heads=16, ffn_hidden=2816),
    "moe-tiny": dict(d_model=64, n_layers=2, n_heads=2, ffn_hidden=96, n_experts=4, top_k=2),
    "moe-125m": dict(d_model=512, n_layers=8, n_heads=8, ffn_hidden=1024, n_experts=8, top_k=2),
}


@dataclass
class DataConfig:
    """Where the text is and how it becomes tokens."""

    path: str = ""  # a .txt file or a folder of them (searched recursively)
    val_path: str | None = None  # held-out text; None = the last val_fraction of path
    val_fraction: float = 0.05
    # "bytes" (vocab 256), "gpt2:DIR" (DIR holds encoder.json + vocab.bpe) or
    # "bpe:N" (a byte-level BPE of N tokens trained on the training text, cached).
    tokenizer: str = "bytes"
    cache_dir: str | None = None  # default $FOURCAST_CACHE or ~/.cache/fourcast


@dataclass
class TrainConfig:
    """The loop: optimiser, schedule, evaluation, checkpoints, device, extras."""

    steps: int = 100
    batch: int = 8  # sequences per step per process
    seq: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int | None = None  # None = 5% of steps (at least 1)
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 = off
    seed: int = 0
    eval_every: int = 50  # 0 = only at the end
    eval_batches: int = 4
    ckpt_every: int = 100  # 0 = only at the end
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    autocast: bool = True  # bf16 autocast of the non-quantized parts (CUDA only)
    gemm_path: str = "fused"  # QLinear emulation path: fused | dequant (both exact) | fake | packed
    dist: str = "ddp"  # under torchrun (WORLD_SIZE set): ddp | fsdp
    profile_steps: int = 0  # sampled steps written to profile.json (0 = off)
    capture_every: int = 0  # save X, W, dY samples every K steps (0 = off)
    capture_rows: int = 256  # rows kept per captured tensor
    progress: bool = True
    cuda_graph: bool = True  # capture the steps in CUDA graphs where the run allows (train/graphs.py)

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)

    def check(self) -> "TrainConfig":
        for name in ("steps", "batch", "seq"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.gemm_path not in ("fused", "dequant", "fake", "packed"):
            raise TrainError(f"gemm_path must be fused, dequant, fake or packed, got '{self.gemm_path}'")
        if self.dist not in ("ddp", "fsdp"):
            raise TrainError(f"dist must be ddp or fsdp, got '{self.dist}'")
        return self


@dataclass
class RunConfig:
    recipe: dict = field(default_factory=dict)  # the full recipe (Recipe.to_dict())
    model: ModelConfig = field(default_factory=ModelConfig)
    model_name: str = "tiny"
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunConfig":
        return cls(
            recipe=dict(d["recipe"]),
            model=ModelConfig.from_dict(d["model"]),
            model_name=d.get("model_name", "custom"),
            data=DataConfig(**d["data"]),
            train=TrainConfig(**d["train"]),
        )


def model_config(spec: str) -> ModelConfig:
    """`PRESET`, `PRESET,field=value,...` or `field=value,...` (on top of `tiny`)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise TrainError(f"empty model spec; presets: {', '.join(MODEL_PRESETS)}")
    base = "tiny"
    if "=" not in parts[0]:
        base = parts.pop(0)
        if base not in MODEL_PRESETS:
            raise TrainError(
                f"unknown model preset '{base}'; presets: {', '.join(MODEL_PRESETS)} "
                "(or sizes like 'd_model=256,n_layers=4,n_heads=4,ffn_hidden=768')"
            )
    cfg = ModelConfig(**MODEL_PRESETS[base])
    overrides = {}
    for p in parts:
        key, sep, value = p.partition("=")
        if not sep:
            raise TrainError(f"model spec part '{p}' is not field=value")
        overrides[f"model.{key.strip()}"] = value.strip()
    holder = RunConfig(model=cfg)
    apply_sets(holder, overrides)
    return holder.model.check()


def apply_sets(cfg: RunConfig, sets: Mapping[str, str]) -> RunConfig:
    """Set `section.field` (model/data/train) from strings, converted by declared type."""
    for path, raw in sets.items():
        section, _, name = path.partition(".")
        target = getattr(cfg, section, None) if section in ("model", "data", "train") else None
        if target is None or not name:
            raise TrainError(f"no training field '{path}'; use model.X, data.X or train.X")
        fields = {f.name: f for f in dataclasses.fields(target)}
        if name not in fields:
            raise TrainError(f"no field '{name}' in {section}; fields: {', '.join(fields)}")
        hint = typing.get_type_hints(type(target))[name]
        setattr(target, name, _convert(raw, hint, path))
    return cfg


def _convert(raw: str, hint: Any, path: str) -> Any:
    options = typing.get_args(hint) or (hint,)
    if type(None) in options and raw.lower() in ("none", "null", ""):
        return None
    for typ in options:
        if typ is type(None):
            continue
        try:
            if typ is bool:
                if raw.lower() in ("1", "true", "yes", "on"):
                    return True
                if raw.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(raw)
            return typ(raw)
        except (TypeError, ValueError):
            continue
    raise TrainError(f"{path}={raw}: expected {hint}")
