"""A small, plain torch transformer built from a :class:`~dtbook.models.TransformerConfig`.

Chapter 01 counts its FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` and the bytes
of a mixed-precision AdamW step from its tensors; later chapters measure its activation
memory. It is written to be read: every block is a few lines of ordinary torch, and
attention is spelled out as ``q @ k^T``, softmax, ``@ v`` with explicit matmuls (no fused
``scaled_dot_product_attention``), so a FLOP counter sees every multiplication.

It builds every architecture :mod:`dtbook.models` counts: multi-head or grouped-query
attention, or multi-head latent attention (MLA); rotary or learned positions; SwiGLU or GELU
MLPs; RMSNorm or LayerNorm with or without bias; biases on or off; tied or untied output
head; dense or mixture-of-experts blocks (router, top-k routed experts, shared experts), and
DeepSeek-style multi-token-prediction modules. ``sum(p.numel() for p in model.parameters())
== cfg.num_params()`` for every config, and :func:`component_counts` agrees with
``cfg.param_breakdown()`` key by key: that is the independent check of the counting formulas.
It is a model for counting and demonstrating, not for speed (the MoE loop visits experts one
at a time).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from . import rope
from .models import TransformerConfig

__all__ = ["TinyTransformer", "component_counts", "RMSNorm"]


class RMSNorm(nn.Module):
    """Root-mean-square norm: ``x / rms(x) * weight``, one weight per feature, no bias."""

    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(cfg: TransformerConfig, width: int) -> nn.Module:
    """The config's norm over ``width`` features: RMSNorm, or LayerNorm with or without bias."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(width)
    return nn.LayerNorm(width, bias=cfg.norm_bias)


def rotary_tables(dim: int, max_seq: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each ``(max_seq, dim)``, for rotary position embeddings (RoPE).

    Feature pair ``(i, i + dim/2)`` at position ``t`` is rotated by the angle
    ``t * base**(-2i/dim)``: low features turn fast, high features slowly.
    """
    inv_freq = torch.tensor(rope.frequencies(dim, base), dtype=torch.float32)   # chapter 34's θᵢ
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)  # (S, dim/2)
    angles = torch.cat([angles, angles], dim=-1)  # (S, dim)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (``..., seq, dim``) by the position angles: the "rotate half" form of
    ``(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)``."""
    seq = x.shape[-2]
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos[:seq] + rotated * sin[:seq]


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention with explicit matmuls.

    ``q``, ``k``: ``(batch, heads, seq, d_qk)``; ``v``: ``(batch, heads, seq, d_v)``.
    Scores ``q @ k^T / sqrt(d_qk)``, future positions masked, softmax, then ``@ v``.
    """
    seq = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.matmul(scores.softmax(dim=-1), v)


class Attention(nn.Module):
    """Multi-head attention; grouped-query when ``kv_heads < heads`` (each group of
    ``heads // kv_heads`` query heads shares one key head and one value head)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.rotary = cfg.positions == "rotary"
        d, b = cfg.head_dim, cfg.attn_bias
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * d, bias=b)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=b)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=b)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=b)
        if self.rotary:
            cos, sin = rotary_tables(d, cfg.max_seq)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # (batch, seq, heads * d) -> (batch, heads, seq, d)
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary:
            q, k = apply_rotary(q, self.cos, self.sin), apply_rotary(k, self.cos, self.sin)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = causal_attention(q, k, v).transpose(1, 2).reshape(batch, seq, -1)
        return self.o_proj(out)


class LatentAttention(nn.Module):
    """Multi-head latent attention (MLA, DeepSeek-V2/V3).

    Keys and values are rebuilt from a small shared latent (``kv_lora_rank`` wide), which is
    all an inference cache needs to keep. Each head's query and key have a part without
    position information (``qk_nope_head_dim``) and a rotary part (``qk_rope_head_dim``); the
    rotary key is one vector shared by all heads, projected directly from the hidden state.
    Queries go through their own low-rank path when ``q_lora_rank > 0``.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.heads, self.nope, self.rope, self.v_dim = (
            cfg.heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim)
        self.rotary = cfg.positions == "rotary"
        h, b, qk = cfg.hidden, cfg.attn_bias, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        if cfg.q_lora_rank:
            self.q_proj = nn.Sequential(nn.Linear(h, cfg.q_lora_rank, bias=b), make_norm(cfg, cfg.q_lora_rank),
                                        nn.Linear(cfg.q_lora_rank, cfg.heads * qk, bias=b))
        else:
            self.q_proj = nn.Linear(h, cfg.heads * qk, bias=b)
        self.kv_down = nn.Linear(h, cfg.kv_lora_rank + self.rope, bias=b)  # latent + shared rope key
        self.kv_norm = make_norm(cfg, cfg.kv_lora_rank)
        self.kv_up = nn.Linear(cfg.kv_lora_rank, cfg.heads * (self.nope + self.v_dim), bias=b)
        self.o_proj = nn.Linear(cfg.heads * self.v_dim, h, bias=b)
        self.kv_lora_rank = cfg.kv_lora_rank
        if self.rotary:
            cos, sin = rotary_tables(self.rope, cfg.max_seq)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.nope + self.rope).transpose(1, 2)
        q_nope, q_rope = q.split([self.nope, self.rope], dim=-1)
        latent, k_rope = self.kv_down(x).split([self.kv_lora_rank, self.rope], dim=-1)
        kv = self.kv_up(self.kv_norm(latent)).view(batch, seq, self.heads, self.nope + self.v_dim)
        k_nope, v = kv.transpose(1, 2).split([self.nope, self.v_dim], dim=-1)
        k_rope = k_rope.unsqueeze(1)  # (batch, 1, seq, rope): one rotary key for all heads
        if self.rotary:
            q_rope, k_rope = apply_rotary(q_rope, self.cos, self.sin), apply_rotary(k_rope, self.cos, self.sin)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, self.heads, -1, -1)], dim=-1)
        out = causal_attention(q, k, v).transpose(1, 2).reshape(batch, seq, -1)
        return self.o_proj(out)


_ACTIVATIONS = {"swiglu": F.silu, "geglu": functools.partial(F.gelu, approximate="tanh"),
                "gelu": F.gelu, "relu2": lambda y: F.relu(y).square()}


class MLP(nn.Module):
    """Gated (SwiGLU, GeGLU): ``down(act(gate(x)) * up(x))``; plain (GELU, squared ReLU):
    ``down(act(up(x)))``."""

    def __init__(self, cfg: TransformerConfig, width: int):
        super().__init__()
        self.gated = cfg.gated_mlp
        self.act = _ACTIVATIONS[cfg.mlp]
        b = cfg.mlp_bias
        if self.gated:
            self.gate = nn.Linear(cfg.hidden, width, bias=b)
        self.up = nn.Linear(cfg.hidden, width, bias=b)
        self.down = nn.Linear(width, cfg.hidden, bias=b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down(self.act(self.gate(x)) * self.up(x))
        return self.down(self.act(self.up(x)))


class MoE(nn.Module):
    """Mixture of experts: each token goes to its top ``experts_per_token`` routed experts,
    weighted by the router's (renormalised) softmax scores, plus every shared expert.

    With ``router_bias`` a per-expert bias is added to the scores when choosing experts (not
    when weighting them), as DeepSeek-V3 balances load; it is stored but not trained by
    gradients.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.top_k = cfg.experts_per_token
        self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.score_bias = nn.Parameter(torch.zeros(cfg.experts), requires_grad=False) if cfg.router_bias else None
        self.experts = nn.ModuleList(MLP(cfg, cfg.moe_ffn_hidden) for _ in range(cfg.experts))
        self.shared = nn.ModuleList(MLP(cfg, cfg.moe_ffn_hidden) for _ in range(cfg.shared_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        scores = self.router(tokens).softmax(dim=-1)  # (tokens, experts)
        choice = scores if self.score_bias is None else scores + self.score_bias
        chosen = choice.topk(self.top_k, dim=-1).indices  # (tokens, k)
        weights = scores.gather(-1, chosen)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token_idx, slot = (chosen == e).nonzero(as_tuple=True)
            if token_idx.numel():
                out.index_add_(0, token_idx, weights[token_idx, slot, None] * expert(tokens[token_idx]))
        for expert in self.shared:
            out = out + expert(tokens)
        return out.view_as(x)


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, cfg: TransformerConfig, moe: bool):
        super().__init__()
        self.norm1 = make_norm(cfg, cfg.hidden)
        self.attn = LatentAttention(cfg) if cfg.is_mla else Attention(cfg)
        self.norm2 = make_norm(cfg, cfg.hidden)
        self.mlp = MoE(cfg) if moe else MLP(cfg, cfg.ffn_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class MTPModule(nn.Module):
    """One multi-token-prediction module (DeepSeek-V3): from the previous depth's hidden
    state at position ``t`` and the embedding of token ``t + 1``, predict token ``t + 2``.
    It uses the main model's embedding and output head; its own weights are two norms, a
    projection of the concatenated pair, one block and a norm before the head."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.hidden_norm = make_norm(cfg, cfg.hidden)
        self.embed_norm = make_norm(cfg, cfg.hidden)
        self.proj = nn.Linear(2 * cfg.hidden, cfg.hidden, bias=False)
        self.block = Block(cfg, moe=cfg.is_moe_layer(cfg.layers - 1))
        self.head_norm = make_norm(cfg, cfg.hidden)

    def forward(self, h: torch.Tensor, next_embedding: torch.Tensor) -> torch.Tensor:
        x = self.proj(torch.cat([self.hidden_norm(h), self.embed_norm(next_embedding)], dim=-1))
        return self.block(x)


class TinyTransformer(nn.Module):
    """A decoder-only transformer whose shape is ``cfg``: token ids ``(batch, seq)`` in,
    logits ``(batch, seq, vocab)`` out.

    Token embedding, optional learned positions, ``cfg.layers`` pre-norm blocks (the first
    ``cfg.dense_layers`` dense, the rest MoE in an MoE config), final norm, output head (the
    embedding matrix itself when ``tied_embeddings``). With ``include_mtp`` the model also
    holds ``cfg.mtp_layers`` multi-token-prediction modules, used by :meth:`mtp_logits`.
    """

    def __init__(self, cfg: TransformerConfig, include_mtp: bool = False):
        super().__init__()
        if not isinstance(cfg, TransformerConfig):
            raise ValueError(f"cfg must be a TransformerConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pos = nn.Embedding(cfg.max_seq, cfg.hidden) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg, cfg.is_moe_layer(i)) for i in range(cfg.layers))
        self.norm = make_norm(cfg, cfg.hidden) if cfg.final_norm else nn.Identity()
        self.lm_head = None if cfg.tied_embeddings else nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.mtp = nn.ModuleList(MTPModule(cfg) for _ in range(cfg.mtp_layers if include_mtp else 0))

    def _check(self, tokens: torch.Tensor) -> None:
        if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be integer ids of shape (batch, seq), got {tuple(tokens.shape)} "
                             f"{tokens.dtype}")
        if tokens.shape[1] > self.cfg.max_seq:
            raise ValueError(f"seq ({tokens.shape[1]}) must be <= max_seq ({self.cfg.max_seq})")

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings, plus learned positions when the config has them."""
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Output logits from final hidden states (norm not included)."""
        return F.linear(x, self.embed.weight) if self.lm_head is None else self.lm_head(x)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """The last block's output, before the final norm: ``(batch, seq, hidden)``."""
        self._check(tokens)
        x = self.embed_tokens(tokens)
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.hidden_states(tokens)))

    def mtp_logits(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Logits of each multi-token-prediction depth ``d = 1, 2, ...``: position ``t``
        predicts token ``t + 1 + d``, so depth ``d`` has ``seq - d`` positions."""
        h = self.hidden_states(tokens)
        out = []
        for d, module in enumerate(self.mtp, start=1):
            h = module(h[:, :-1], self.embed_tokens(tokens)[:, d:])
            out.append(self.head(module.head_norm(h)))
        return out


def component_counts(model: TinyTransformer) -> dict[str, int]:
    """Parameters of ``model`` by component, with the keys of
    :meth:`TransformerConfig.param_breakdown`, found from the module tree alone."""
    counts = dict.fromkeys(["embedding", "positions", "attention", "mlp", "routed_experts",
                            "shared_experts", "router", "norms", "head", "mtp"], 0)
    for name, p in model.named_parameters():
        parts = name.split(".")
        if parts[0] == "embed":
            key = "embedding"
        elif parts[0] == "pos":
            key = "positions"
        elif parts[0] == "lm_head":
            key = "head"
        elif parts[0] == "mtp":
            key = "mtp"
        elif parts[0] == "norm":
            key = "norms"
        else:  # blocks.<i>.<part>...
            part = parts[2]
            if part in ("norm1", "norm2"):
                key = "norms"
            elif part == "attn":
                key = "attention"
            elif parts[3] == "experts":
                key = "routed_experts"
            elif parts[3] == "shared":
                key = "shared_experts"
            elif parts[3] in ("router", "score_bias"):
                key = "router"
            else:
                key = "mlp"
        counts[key] += p.numel()
    return counts
