"""A Llama-style decoder (RMSNorm, RoPE, SwiGLU, SDPA attention) and its MoE variant
(top-k router with a load-balancing loss). Every projection is a plain `nn.Linear`, so
`fourcast.convert(model, recipe)` can quantize it; transformer blocks sit in
`model.blocks` (what convert's keep_bf16_first/last count), the output head is
`model.head`, and MoE routers carry `keep_high_precision = True`.

Block linears (`ModelConfig.fused_proj`, on by default): `attn.wqkv` (d -> 3d, rows q,
k, v), `attn.wo`, `mlp.w_gate_up` (d -> 2*hidden, rows gate, up) and `mlp.w_down`; MoE
experts are `mlp.experts.E.w_gate_up` / `.w_down`. With `fused_proj=False` (and for run
folders whose config.json predates the field) they are the separate `attn.wq`, `.wk`,
`.wv`, `.wo` and `mlp.w_gate`, `.w_up`, `.w_down`. A fused Linear quantizes its input
once instead of three (two) times and runs one larger GEMM; its weight rows are the
separate weights stacked, initialised to the same values from the same seed. Under a
quantized recipe the weight row blocks are unchanged; what differs is the tensor amax
of W and dY (shared across the parts) and the per-layer RHT signs / SR seeds (layer ids
are counted over fewer linears). See ModelConfig.fused_proj.

    >>> import torch
    >>> from fourcast.train.config import model_config
    >>> m = Transformer(model_config("tiny"))
    >>> logits, loss = m(torch.zeros(2, 16, dtype=torch.long), torch.zeros(2, 16, dtype=torch.long))
    >>> tuple(logits.shape), loss.ndim
    ((2, 16, 256), 0)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fourcast import nn as fcnn
from fourcast.train.config import ModelConfig

# Fused projection -> how many separate Linears' weights it stacks (along its rows).
FUSED_PARTS = {"wqkv": 3, "w_gate_up": 2}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()  # the norm stays in fp32 under autocast
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight).type_as(x)


def rope_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float64), inv)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on (B, H, T, D); cos/sin are (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.fused = cfg.fused_proj
        if self.fused:
            # One GEMM and one quantization of x for q, k and v (rows in that order):
            # see ModelConfig.fused_proj.
            self.wqkv = nn.Linear(d, 3 * d, bias=False)
        else:
            self.wq = nn.Linear(d, d, bias=False)
            self.wk = nn.Linear(d, d, bias=False)
            self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        H = self.n_heads
        parts = self.wqkv(x).split(D, dim=-1) if self.fused else (self.wq(x), self.wk(x), self.wv(x))
        q, k, v = (p.view(B, T, H, D // H).transpose(1, 2) for p in parts)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        shape = dict(B=B, H=H, T=T, D=D // H)
        bwd = fcnn.BackwardRegion("attention", phase="bwd", **shape)
        with fcnn.trace_region("attention", phase="fwd", **shape):
            q, k, v = bwd.inputs(q, k, v)
            o = bwd.output(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.wo(o.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int, *, fused: bool = True):
        super().__init__()
        self.fused = fused
        if fused:
            # One GEMM and one quantization of x for gate and up (gate rows first):
            # see ModelConfig.fused_proj.
            self.w_gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
        else:
            self.w_gate = nn.Linear(d_model, hidden, bias=False)
            self.w_up = nn.Linear(d_model, hidden, bias=False)
        self.w_down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            gate, up = self.w_gate_up(x).chunk(2, dim=-1)
        else:
            gate, up = self.w_gate(x), self.w_up(x)
        return self.w_down(F.silu(gate) * up)


class MoE(nn.Module):
    """Top-k routed SwiGLU experts. The router stays high precision; experts are plain
    Linears (quantized like any other). Each expert's tokens are padded with zero rows
    to a multiple of `moe_token_multiple` so its Wgrad reduction dim fits the blocks;
    zero rows add nothing to any GEMM. Combining writes each (token, slot) once, so the
    result does not depend on atomics."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.top_k = cfg.top_k
        self.multiple = cfg.moe_token_multiple
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.router.keep_high_precision = True
        self.experts = nn.ModuleList(SwiGLU(cfg.d_model, cfg.ffn_hidden, fused=cfg.fused_proj) for _ in range(cfg.n_experts))
        self.aux_loss = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        n, k, E = flat.shape[0], self.top_k, len(self.experts)
        probs = torch.softmax(self.router(flat).float(), dim=-1)
        top_p, top_i = probs.topk(k, dim=-1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        # Switch-style balance loss: E * sum_e (share of assignments to e) * (mean prob of e).
        flat_i = top_i.flatten()
        counts = torch.bincount(flat_i, minlength=E)
        self.aux_loss = E * (counts.float() / (n * k) * probs.mean(0)).sum()
        slots = torch.zeros(n * k, shape[-1], dtype=x.dtype, device=x.device)
        # Assignment indices (token * k + slot) grouped by expert, ascending within each:
        # one host sync per layer for the group sizes (a nonzero per expert was one each).
        order = torch.sort(flat_i, stable=True).indices
        for expert, where in zip(self.experts, order.split(counts.tolist())):
            if where.numel() == 0:
                continue
            tokens = flat[where // k]
            pad = -where.numel() % self.multiple
            if pad:
                tokens = torch.cat([tokens, tokens.new_zeros(pad, shape[-1])])
            out = expert(tokens)[: where.numel()]
            slots = slots.index_put((where,), out.to(x.dtype) * top_p.flatten()[where, None].to(x.dtype))
        return slots.view(n, k, -1).sum(1).view(shape)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MoE(cfg) if cfg.n_experts else SwiGLU(cfg.d_model, cfg.ffn_hidden, fused=cfg.fused_proj)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        vocab = cfg.padded_vocab
        self.tok_emb = nn.Embedding(vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, vocab, bias=False)
        self._rope_len = 0
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        std = self.cfg.init_std
        residual_std = std / math.sqrt(2 * self.cfg.n_layers)  # GPT-2 style for residual outputs
        for name, p in self.named_parameters():
            if p.ndim < 2:
                continue
            last = name.rsplit(".", 2)[-2]
            # A fused weight is drawn part by part (q, k, v / gate, up), in the order
            # the separate Linears are, so from the same seed it holds exactly their
            # values stacked: fused and unfused runs start from the same model.
            for part in p.chunk(FUSED_PARTS.get(last, 1), dim=0):
                nn.init.normal_(part, 0.0, residual_std if last in ("wo", "w_down") else std)

    def _rope(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._rope_len < length or self._rope_cos.device != device:
            head_dim = self.cfg.d_model // self.cfg.n_heads
            cos, sin = rope_tables(head_dim, max(length, 256), self.cfg.rope_theta)
            self._rope_cos, self._rope_sin = cos.to(device), sin.to(device)
            self._rope_len = cos.shape[0]
        return self._rope_cos[:length], self._rope_sin[:length]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (B, T, padded_vocab) and, with targets, the loss (cross entropy plus
        the weighted MoE balance loss; the parts are in `self.last_losses`)."""
        cos, sin = self._rope(idx.shape[1], idx.device)
        x = self.tok_emb(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits, None
        ce = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        loss = ce
        aux = None
        if self.cfg.n_experts:
            aux = torch.stack([b.mlp.aux_loss for b in self.blocks]).mean()
            loss = ce + self.cfg.moe_aux_weight * aux
        self.last_losses = {"ce": ce.detach(), "aux": None if aux is None else aux.detach()}
        return logits, loss
