"""Transformer configurations, and parameter counts computed from the architecture.

A :class:`TransformerConfig` holds a model's shape as its published configuration gives it
(hidden size, layers, heads, MLP kind, experts, ...). Every count, :meth:`~TransformerConfig.
num_params`, :meth:`~TransformerConfig.num_active_params`, :meth:`~TransformerConfig.
param_breakdown`, is computed from those figures; no parameter count is typed in anywhere in
this module. The tests check the computed counts against the published ones (Hugging Face
checkpoint counts, papers), exact to the parameter where the publisher gives an exact count.

What is counted, per block (pre-norm decoder, as in GPT-2/3, Llama, Mixtral, DeepSeek):

* attention: ``q, k, v, o`` projections, ``hidden x heads*head_dim`` for q and o and
  ``hidden x kv_heads*head_dim`` for k and v (grouped-query attention when
  ``kv_heads < heads``), each with a bias when ``attn_bias`` (q, k and v only when
  ``qkv_bias``, as in Qwen2); or multi-head latent attention (MLA, DeepSeek-V2/V3) when
  ``kv_lora_rank > 0``, see :meth:`TransformerConfig.attention_params`. A sliding window
  (``sliding_window``, on every block or, with ``global_every``, on all but every k-th)
  limits what a query sees and adds no weight (:meth:`TransformerConfig.attention_window`);
* MLP: ``gate, up, down`` for SwiGLU or GeGLU (3 matrices) or ``up, down`` for a GELU MLP (2), with
  biases when ``mlp_bias``; in a mixture-of-experts layer (all but the first
  ``dense_layers``, DeepSeek's ``first_k_dense_replace``), ``experts`` routed MLPs of width
  ``expert_ffn_hidden``, ``shared_experts`` always-on MLPs of width
  ``shared_expert_ffn_hidden`` (default: the routed width) with an optional ``hidden x 1``
  gate (``shared_expert_gate``, Qwen2-MoE), and a router (``hidden x experts``, plus one
  bias per expert when ``router_bias``);
* two norms (before attention, before the MLP), four with ``sandwich_norms`` (Gemma 2 also
  normalises each sublayer's output): RMSNorm has a weight only; LayerNorm has a weight and,
  when ``norm_bias``, a bias.

Outside the blocks: the token embedding (``vocab x hidden``), a learned position table
(``max_seq x hidden``) when ``positions == "learned"`` (rotary and ALiBi positions have no
parameters),
a final norm when ``final_norm``, a norm after the embedding when ``embedding_norm`` (BLOOM),
and the output head (``hidden x vocab``, no bias) unless
``tied_embeddings``, in which case the head reuses the embedding matrix and adds nothing.

Chapter 01 derives these counts and checks them against a torch model
(:mod:`dtbook.nn`), parameter by parameter. :func:`from_hf_config` reads a Hugging Face
``config.json`` (Llama, Mistral, Mixtral, Qwen2/3 and their MoE, DeepSeek-V2/V3, gpt-oss and
Gemma 2 field names) into the same config, so a user's own model is counted the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TransformerConfig", "from_hf_config", "get", "names", "tiny"]

_MLP_KINDS = ("swiglu", "geglu", "gelu")  # gated SiLU, gated GELU (Gemma), plain GELU
_NORM_KINDS = ("rmsnorm", "layernorm")
_POSITION_KINDS = ("rotary", "learned", "alibi")

_INT_FIELDS_POSITIVE = ("hidden", "layers", "heads", "kv_heads", "ffn_hidden", "vocab", "max_seq")
_INT_FIELDS_NONNEGATIVE = (
    "experts", "experts_per_token", "shared_experts", "dense_layers", "q_lora_rank",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "mtp_layers",
    "sliding_window", "global_every", "router_group_topk",
)
_BOOL_FIELDS = ("norm_bias", "attn_bias", "qkv_bias", "mlp_bias", "tied_embeddings", "final_norm",
                "router_bias", "embedding_norm", "shared_expert_gate", "attention_sinks",
                "sandwich_norms", "qk_norm")


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """The shape of a decoder-only transformer, as its published configuration gives it.

    Fields keep the published figures as they are; derived sizes (:attr:`head_dim`, the
    expert width) are properties, so ``dataclasses.replace(cfg, hidden=...)`` never carries a
    stale derived value. Construction validates every field and raises ``ValueError`` naming
    the bad one. (Chapter 01.)

    MLA (multi-head latent attention, DeepSeek-V2/V3) is used when ``kv_lora_rank > 0``; then
    ``q_lora_rank`` (0: queries projected directly from the hidden state),
    ``qk_nope_head_dim``, ``qk_rope_head_dim`` and ``v_head_dim`` give the per-head widths and
    ``heads`` the number of heads (``kv_heads`` must equal ``heads``). ``mtp_layers`` is the
    number of multi-token-prediction modules (DeepSeek-V3's ``num_nextn_predict_layers``);
    they are not part of :meth:`num_params` unless asked for, see :meth:`num_mtp_params`.

    Sliding-window attention is ``sliding_window`` keys per query (itself included) on every
    block, or, with ``global_every = k``, on all blocks but those with ``i % k == k - 1``
    (Mistral 7B: every block; Gemma 2 and gpt-oss: ``k = 2``, windowed first; Mixtral: none,
    ``sliding_window = 0``); see :meth:`attention_window`.
    """

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    max_seq: int
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    norm_bias: bool = False
    attn_bias: bool = False  # biases on q, k, v and o
    qkv_bias: bool = False  # biases on q, k and v only (Qwen2, Qwen2-MoE)
    attention_sinks: bool = False  # one learned sink logit per head and block (gpt-oss)
    qk_norm: bool = False  # an RMSNorm over head_dim on queries and on keys (Qwen3)
    mlp_bias: bool = False
    tied_embeddings: bool = False
    positions: str = "rotary"
    final_norm: bool = True
    embedding_norm: bool = False  # a norm right after the token embedding (BLOOM's StableEmbedding)
    sandwich_norms: bool = False  # also norms after attention and the MLP (Gemma 2): 4 a block
    explicit_head_dim: int | None = None  # per-head width when not hidden // heads
    # mixture of experts (experts == 0: dense)
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_ffn_hidden: int | None = None  # None: same as ffn_hidden
    shared_expert_ffn_hidden: int | None = None  # each shared expert's width; None: routed width
    shared_expert_gate: bool = False  # a sigmoid gate (hidden -> 1) on it (Qwen2-MoE)
    dense_layers: int = 0  # leading dense blocks in an MoE model (DeepSeek's first_k_dense_replace)
    router_bias: bool = False  # one stored bias per expert (DeepSeek-V3's e_score_correction_bias)
    # group-limited routing (DeepSeek-V3's n_group, topk_group): a token's experts come from
    # router_group_topk of router_groups equal blocks of experts; 0 topk: no limit
    router_groups: int = 1
    router_group_topk: int = 0
    # sliding-window attention (sliding_window == 0: every layer attends to the whole prefix)
    sliding_window: int = 0  # a query sees itself and the sliding_window - 1 tokens before it
    global_every: int = 0  # 0: all windowed; k: block i full when i % k == k - 1
    # multi-head latent attention (kv_lora_rank == 0: ordinary attention)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # multi-token prediction modules (DeepSeek-V3)
    mtp_layers: int = 0
    source: str = ""

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for f in _INT_FIELDS_POSITIVE + _INT_FIELDS_NONNEGATIVE:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{f} must be an integer, got {v!r}")
            low = 1 if f in _INT_FIELDS_POSITIVE else 0
            if v < low:
                raise ValueError(f"{f} must be >= {low}, got {v}")
        for f in ("explicit_head_dim", "expert_ffn_hidden", "shared_expert_ffn_hidden"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{f} must be None or an integer >= 1, got {v!r}")
        for f in _BOOL_FIELDS:
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f} must be True or False, got {getattr(self, f)!r}")
        for f, allowed in (("mlp", _MLP_KINDS), ("norm", _NORM_KINDS), ("positions", _POSITION_KINDS)):
            if getattr(self, f) not in allowed:
                raise ValueError(f"{f} must be one of {allowed}, got {getattr(self, f)!r}")
        if self.attn_bias and self.qkv_bias:
            raise ValueError("qkv_bias (q, k, v biases only) and attn_bias (all four) "
                             "exclude each other")
        if self.global_every and not self.sliding_window:
            raise ValueError("global_every needs sliding_window > 0 (no layer is windowed)")
        if self.norm == "rmsnorm" and self.norm_bias:
            raise ValueError("norm_bias must be False when norm is 'rmsnorm' (RMSNorm has no bias)")
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.is_mla:
            for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f) < 1:
                    raise ValueError(f"{f} must be >= 1 when kv_lora_rank > 0 (MLA)")
            if self.kv_heads != self.heads:
                raise ValueError(f"kv_heads ({self.kv_heads}) must equal heads ({self.heads}) with MLA")
            if self.positions == "rotary" and self.qk_rope_head_dim % 2:
                raise ValueError(f"qk_rope_head_dim ({self.qk_rope_head_dim}) must be even for rotary positions")
            for f in ("qkv_bias", "attention_sinks", "qk_norm"):
                if getattr(self, f):
                    raise ValueError(f"{f} is not defined for MLA (kv_lora_rank > 0)")
        else:
            for f in ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f):
                    raise ValueError(f"{f} is an MLA field: it needs kv_lora_rank > 0")
            if self.explicit_head_dim is None and self.hidden % self.heads:
                raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}), "
                                 "or give explicit_head_dim")
            if self.positions == "rotary" and self.head_dim % 2:
                raise ValueError(f"head_dim ({self.head_dim}) must be even for rotary positions")
        if self.experts:
            if not 1 <= self.experts_per_token <= self.experts:
                raise ValueError(f"experts_per_token must lie in 1..experts ({self.experts}), "
                                 f"got {self.experts_per_token}")
            if self.dense_layers > self.layers:
                raise ValueError(f"dense_layers ({self.dense_layers}) must be <= layers ({self.layers})")
            if (not isinstance(self.router_groups, int) or isinstance(self.router_groups, bool)
                    or self.router_groups < 1 or self.experts % self.router_groups):
                raise ValueError(f"router_groups must be a whole number >= 1 dividing experts "
                                 f"({self.experts}), got {self.router_groups!r}")
            if self.router_group_topk > self.router_groups:
                raise ValueError(f"router_group_topk must be at most router_groups "
                                 f"({self.router_groups}), got {self.router_group_topk!r}")
            if not self.shared_experts:
                if self.shared_expert_gate:
                    raise ValueError("shared_expert_gate needs shared_experts > 0")
                if self.shared_expert_ffn_hidden is not None:
                    raise ValueError("shared_expert_ffn_hidden needs shared_experts > 0")
        else:
            for f in ("experts_per_token", "shared_experts", "dense_layers", "router_group_topk"):
                if getattr(self, f):
                    raise ValueError(f"{f} needs experts > 0 (this config is dense)")
            for f in ("router_bias", "shared_expert_gate"):
                if getattr(self, f):
                    raise ValueError(f"{f} needs experts > 0 (this config is dense)")
            for f in ("expert_ffn_hidden", "shared_expert_ffn_hidden"):
                if getattr(self, f) is not None:
                    raise ValueError(f"{f} needs experts > 0 (this config is dense)")

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        """Per-head width: ``explicit_head_dim`` if given, else ``hidden // heads``.

        For MLA this is the query/key width per head, ``qk_nope_head_dim + qk_rope_head_dim``.
        """
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.explicit_head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """True when attention is multi-head latent attention (``kv_lora_rank > 0``)."""
        return self.kv_lora_rank > 0

    @property
    def moe_ffn_hidden(self) -> int:
        """Width of one expert's MLP (``expert_ffn_hidden``, or ``ffn_hidden`` when None)."""
        return self.expert_ffn_hidden or self.ffn_hidden

    @property
    def gated_mlp(self) -> bool:
        """True when the MLP is gated (SwiGLU, GeGLU: gate, up and down, 3 matrices);
        False for a plain GELU MLP (up and down, 2)."""
        return self.mlp in ("swiglu", "geglu")

    @property
    def shared_ffn_hidden(self) -> int:
        """Width of one shared expert's MLP (``shared_expert_ffn_hidden``, or the routed
        experts' width when None: DeepSeek's shared experts are routed-expert sized, Qwen2-MoE's
        one shared expert is four of them wide)."""
        return self.shared_expert_ffn_hidden or self.moe_ffn_hidden

    @property
    def is_swa(self) -> bool:
        """True when some blocks use sliding-window attention (``sliding_window > 0``)."""
        return self.sliding_window > 0

    def attention_window(self, index: int) -> int | None:
        """Keys a query of block ``index`` (0-based) can see, itself included: the window for
        a sliding-window block, ``None`` for full causal attention. Mistral 7B windows every
        block (``global_every == 0``); Gemma 2 alternates, windowed first (``global_every=2``:
        blocks 1, 3, 5, ... full); Gemma 3 has five windowed blocks to one full
        (``global_every=6``). (Chapter 31a.)"""
        self._check_index(index)
        if not self.sliding_window:
            return None
        if self.global_every and index % self.global_every == self.global_every - 1:
            return None
        return self.sliding_window

    def windowed_layers(self) -> int:
        """Number of blocks that use sliding-window attention."""
        if not self.sliding_window:
            return 0
        if not self.global_every:
            return self.layers
        return self.layers - self.layers // self.global_every

    def is_moe_layer(self, index: int) -> bool:
        """True when block ``index`` (0-based) is a mixture-of-experts block."""
        self._check_index(index)
        return self.is_moe and index >= self.dense_layers

    def _check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.layers:
            raise ValueError(f"index must be a block number in 0..{self.layers - 1}, got {index!r}")

    # ------------------------------------------------------------------ building blocks
    def norm_params(self, width: int) -> int:
        """Parameters of one norm over ``width`` features: RMSNorm ``width``; LayerNorm
        ``width`` or ``2 width`` with its bias."""
        return width * (2 if self.norm_bias else 1)

    def _linear(self, fan_in: int, fan_out: int, bias: bool) -> int:
        return fan_in * fan_out + (fan_out if bias else 0)

    def attention_params(self) -> int:
        """Parameters of one attention block (norms outside it excluded).

        Ordinary (grouped-query) attention: ``q`` and ``o`` are ``hidden x heads*head_dim``,
        ``k`` and ``v`` are ``hidden x kv_heads*head_dim``; with ``qkv_bias`` (Qwen2) q, k and v
        have biases and o has none; ``attention_sinks`` (gpt-oss) adds one learned logit per
        head; ``qk_norm`` (Qwen3) a norm over ``head_dim`` on queries and one on keys, counted
        here as part of attention. A sliding window changes no weight.

        MLA, exactly as DeepSeek-V3's checkpoint stores it: queries either projected directly
        (``q_lora_rank == 0``) or through a low-rank path ``hidden -> q_lora_rank`` (with a
        norm over the latent) ``-> heads*(nope+rope)``; keys and values from a shared latent:
        ``hidden -> kv_lora_rank + rope`` (the ``rope`` part is the single decoupled RoPE key
        shared by all heads), a norm over the ``kv_lora_rank`` latent, then
        ``kv_lora_rank -> heads*(nope + v_head_dim)``; output ``heads*v_head_dim -> hidden``.
        The two latent norms are counted here, as part of attention.
        """
        h, b = self.hidden, self.attn_bias
        if not self.is_mla:
            q = self.heads * self.head_dim
            kv = self.kv_heads * self.head_dim
            bq = b or self.qkv_bias  # Qwen2: biases on q, k, v; none on o
            extra = (self.heads if self.attention_sinks else 0) + (
                2 * self.norm_params(self.head_dim) if self.qk_norm else 0)
            return (self._linear(h, q, bq) + 2 * self._linear(h, kv, bq) + self._linear(q, h, b)
                    + extra)
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = (self._linear(h, self.q_lora_rank, b) + self.norm_params(self.q_lora_rank)
                 + self._linear(self.q_lora_rank, self.heads * qk, b))
        else:
            q = self._linear(h, self.heads * qk, b)
        kv = (self._linear(h, self.kv_lora_rank + self.qk_rope_head_dim, b)
              + self.norm_params(self.kv_lora_rank)
              + self._linear(self.kv_lora_rank, self.heads * (self.qk_nope_head_dim + self.v_head_dim), b))
        o = self._linear(self.heads * self.v_head_dim, h, b)
        return q + kv + o

    def mlp_params(self, width: int | None = None) -> int:
        """Parameters of one MLP of inner width ``width`` (default ``ffn_hidden``):
        SwiGLU or GeGLU ``3 hidden width`` (gate, up, down), GELU ``2 hidden width`` (up,
        down), plus biases when ``mlp_bias``."""
        f = self.ffn_hidden if width is None else width
        h, b = self.hidden, self.mlp_bias
        if self.gated_mlp:
            return 2 * self._linear(h, f, b) + self._linear(f, h, b)
        return self._linear(h, f, b) + self._linear(f, h, b)

    def router_params(self) -> int:
        """Parameters of one MoE router: ``hidden x experts`` (no bias), plus ``experts``
        stored biases when ``router_bias``."""
        return self.hidden * self.experts + (self.experts if self.router_bias else 0)

    def shared_expert_params(self) -> int:
        """Parameters of one MoE block's shared experts: ``shared_experts`` MLPs of width
        :attr:`shared_ffn_hidden`, plus the ``hidden x 1`` gate when ``shared_expert_gate``."""
        return (self.shared_experts * self.mlp_params(self.shared_ffn_hidden)
                + (self.hidden if self.shared_expert_gate else 0))

    def layer_breakdown(self, index: int) -> dict[str, int]:
        """Parameters of block ``index`` (0-based) by component: ``attention``, ``mlp``
        (a dense block's MLP), ``routed_experts``, ``shared_experts``, ``router``, ``norms``."""
        self._check_index(index)
        norms = (4 if self.sandwich_norms else 2) * self.norm_params(self.hidden)
        out = dict(attention=self.attention_params(), mlp=0, routed_experts=0,
                   shared_experts=0, router=0, norms=norms)
        if self.is_moe_layer(index):
            out.update(routed_experts=self.experts * self.mlp_params(self.moe_ffn_hidden),
                       shared_experts=self.shared_expert_params(),
                       router=self.router_params())
        else:
            out["mlp"] = self.mlp_params()
        return out

    def layer_params(self, index: int) -> int:
        """Parameters of block ``index`` (0-based): attention, MLP or experts, two norms."""
        return sum(self.layer_breakdown(index).values())

    # ------------------------------------------------------------------ totals
    def param_breakdown(self, include_mtp: bool = False) -> dict[str, int]:
        """Parameters by component; the values sum to :meth:`num_params`.

        Keys: ``embedding`` (token table), ``positions`` (learned position table, else 0),
        ``attention``, ``mlp`` (dense blocks' MLPs), ``routed_experts``, ``shared_experts``,
        ``router``, ``norms`` (the blocks' norms, the final norm and the embedding norm), ``head`` (0 when tied),
        ``mtp`` (the multi-token-prediction modules' own parameters when ``include_mtp``,
        else 0).
        """
        total = dict(embedding=self.vocab * self.hidden,
                     positions=self.max_seq * self.hidden if self.positions == "learned" else 0,
                     attention=0, mlp=0, routed_experts=0, shared_experts=0, router=0,
                     norms=(self.norm_params(self.hidden) if self.final_norm else 0)
                     + (self.norm_params(self.hidden) if self.embedding_norm else 0),
                     head=0 if self.tied_embeddings else self.vocab * self.hidden,
                     mtp=self.num_mtp_params() if include_mtp else 0)
        # Blocks come in at most two kinds (dense, MoE): count one of each and multiply.
        kinds = [(0, self.dense_layers if self.is_moe else self.layers)]
        if self.is_moe:
            kinds.append((self.dense_layers, self.layers - self.dense_layers))
        for first, count in kinds:
            if count:
                for key, value in self.layer_breakdown(first).items():
                    total[key] += count * value
        return total

    def num_params(self, include_mtp: bool = False) -> int:
        """Total parameters of the model (Ψ). With ``include_mtp``, also the
        multi-token-prediction modules' own parameters (what training holds; their embedding
        and head are the main model's). (Chapter 01.)"""
        return sum(self.param_breakdown(include_mtp).values())

    def num_embedding_params(self) -> int:
        """Parameters of the input lookup tables: token embedding, plus the learned position
        table if any. (With tied embeddings the token table is also the output head.)"""
        b = self.param_breakdown()
        return b["embedding"] + b["positions"]

    def num_active_params(self, include_embedding: bool = True) -> int:
        """Parameters one token passes through (Ψ_active; chapter 18).

        Everything dense, the shared experts, the router, and ``experts_per_token`` of the
        routed experts in each MoE block. For a dense model this is :meth:`num_params`.

        Embeddings count in full by default, the convention of Mistral's "12.9B active" for
        Mixtral-8x7B and DeepSeek's "37B" for DeepSeek-V3. ``include_embedding=False`` drops
        the input lookup tables that are not also the output head (the position table, and the
        token table when untied): DeepSeek's README_WEIGHTS "36.6B (including the output
        head)" convention.
        """
        total = self.num_params()
        if self.is_moe:
            idle = self.experts - self.experts_per_token
            total -= (self.layers - self.dense_layers) * idle * self.mlp_params(self.moe_ffn_hidden)
        if not include_embedding:
            b = self.param_breakdown()
            total -= b["positions"] + (0 if self.tied_embeddings else b["embedding"])
        return total

    def num_mtp_params(self, stored_copies: bool = False) -> int:
        """Parameters of the multi-token-prediction modules (DeepSeek-V3, ``mtp_layers``).

        Each module, as in DeepSeek-V3's checkpoint: two norms over the hidden state
        (``enorm``, ``hnorm``), a projection ``eh_proj`` of the concatenated pair
        (``2 hidden -> hidden``, no bias), one transformer block of the model's own kind (an
        MoE block in an MoE model), and the norm before the shared output head. Its embedding
        and output head are the main model's, so they are not counted, unless
        ``stored_copies``: the released checkpoint stores a copy of both in every module.
        """
        if not self.mtp_layers:
            return 0
        block = self.layer_params(self.layers - 1)
        one = 3 * self.norm_params(self.hidden) + 2 * self.hidden * self.hidden + block
        if stored_copies:
            one += 2 * self.vocab * self.hidden
        return self.mtp_layers * one

    # ------------------------------------------------------------------ helpers
    @classmethod
    def tiny(cls, **overrides) -> "TransformerConfig":
        """A small config for CPU demos; see :func:`tiny`."""
        return tiny(**overrides)


def tiny(**overrides) -> TransformerConfig:
    """A small Llama-shaped config for CPU demos: hidden 64, 2 layers, 4 heads (no GQA),
    SwiGLU width 128, vocab 256, sequences up to 64, RMSNorm, rotary positions, untied.

    Any field can be overridden: ``tiny(kv_heads=2, mlp="gelu", experts=4,
    experts_per_token=2)``. The result is validated like any config. (Chapter 01.)
    """
    base = TransformerConfig(
        name="tiny", hidden=64, layers=2, heads=4, kv_heads=4, ffn_hidden=128, vocab=256,
        max_seq=64, source="dtbook.models.tiny: a toy configuration for CPU demos",
    )
    return dataclasses.replace(base, **overrides)


# ---------------------------------------------------------------------- the catalog
# Architecture figures only, as each source gives them. The counts are computed.

_HF = "https://huggingface.co/"

_CATALOG: dict[str, TransformerConfig] = {c.name: c for c in (
    TransformerConfig(
        name="gpt3-175b", hidden=12288, layers=96, heads=96, kv_heads=96, ffn_hidden=4 * 12288,
        vocab=50257, max_seq=2048, mlp="gelu", norm="layernorm", norm_bias=True,
        attn_bias=True, mlp_bias=True, tied_embeddings=True, positions="learned",
        source=("Brown et al. 2020, 'Language Models are Few-Shot Learners', arXiv:2005.14165, "
                "Table 2.1 (96 layers, d_model 12288, 96 heads of 128, context 2048) and Sec. 2.1 "
                "(d_ff = 4 d_model; 'the same model and architecture as GPT-2'). Assumed from "
                "GPT-2 (Radford et al. 2019): BPE vocabulary 50257, learned positions, pre-norm "
                "LayerNorm with bias, biases in every linear layer, final LayerNorm, output head "
                "tied to the token embedding. The sparse attention layers have no extra weights."),
    ),
    TransformerConfig(
        name="bloom-176b", hidden=14336, layers=70, heads=112, kv_heads=112, ffn_hidden=4 * 14336,
        vocab=250880, max_seq=2048, mlp="gelu", norm="layernorm", norm_bias=True,
        attn_bias=True, mlp_bias=True, tied_embeddings=True, positions="alibi",
        embedding_norm=True,
        source=(_HF + "bigscience/bloom/blob/main/config.json (hidden 14336, 70 layers, 112 "
                "heads, vocab_size 250880) and the model card ('176,247,271,424 parameters: "
                "3,596,615,680 embedding parameters'; LayerNorm on the word embeddings, ALiBi, "
                "GeLU); github.com/bigscience-workshop/bigscience train/tr11-176B-ml/README.md "
                "(one block 12h^2 + 13h, tied embedding padded to 250880, sequence 2048). "
                "Le Scao et al. 2022, arXiv:2211.05100"),
    ),
    TransformerConfig(
        name="llama2-7b", hidden=4096, layers=32, heads=32, kv_heads=32, ffn_hidden=11008,
        vocab=32000, max_seq=4096,
        source=_HF + "meta-llama/Llama-2-7b-hf/blob/main/config.json (Touvron et al. 2023, arXiv:2307.09288)",
    ),
    TransformerConfig(
        name="llama2-13b", hidden=5120, layers=40, heads=40, kv_heads=40, ffn_hidden=13824,
        vocab=32000, max_seq=4096,
        source=_HF + "meta-llama/Llama-2-13b-hf/blob/main/config.json (Touvron et al. 2023, arXiv:2307.09288)",
    ),
    TransformerConfig(
        name="llama2-70b", hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672,
        vocab=32000, max_seq=4096,
        source=_HF + "meta-llama/Llama-2-70b-hf/blob/main/config.json (Touvron et al. 2023, arXiv:2307.09288)",
    ),
    TransformerConfig(
        name="llama3-8b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=128256, max_seq=8192,
        source=_HF + "meta-llama/Meta-Llama-3-8B/blob/main/config.json",
    ),
    TransformerConfig(
        name="llama3-70b", hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672,
        vocab=128256, max_seq=8192,
        source=_HF + "meta-llama/Meta-Llama-3-70B/blob/main/config.json",
    ),
    TransformerConfig(
        name="llama3-405b", hidden=16384, layers=126, heads=128, kv_heads=8, ffn_hidden=53248,
        vocab=128256, max_seq=131072,
        source=(_HF + "meta-llama/Llama-3.1-405B/blob/main/config.json (405B was released as "
                "Llama 3.1; github.com/meta-llama/llama-models models/sku_list.py: dim 16384, "
                "126 layers, 128 heads, 8 KV heads, ffn_dim_multiplier 1.2, multiple_of 4096 "
                "-> FFN width 53248)"),
    ),
    TransformerConfig(
        name="mixtral-8x7b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=32000, max_seq=32768, experts=8, experts_per_token=2, expert_ffn_hidden=14336,
        source=_HF + "mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (Jiang et al. 2024, arXiv:2401.04088)",
    ),
    TransformerConfig(
        name="mixtral-8x22b", hidden=6144, layers=56, heads=48, kv_heads=8, ffn_hidden=16384,
        vocab=32000, max_seq=65536, experts=8, experts_per_token=2, expert_ffn_hidden=16384,
        source=(_HF + "mistral-community/Mixtral-8x22B-v0.1/blob/main/config.json (the base "
                "model as first released, vocabulary 32000; the Instruct release, "
                "mistralai/Mixtral-8x22B-Instruct-v0.1, has vocab_size 32768)"),
    ),
    TransformerConfig(
        name="deepseek-v3", hidden=7168, layers=61, heads=128, kv_heads=128, ffn_hidden=18432,
        vocab=129280, max_seq=163840, experts=256, experts_per_token=8, shared_experts=1,
        expert_ffn_hidden=2048, dense_layers=3, router_bias=True, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        mtp_layers=1, router_groups=8, router_group_topk=4,
        source=(_HF + "deepseek-ai/DeepSeek-V3/blob/main/config.json and README_WEIGHTS.md "
                "(DeepSeek-AI 2024, arXiv:2412.19437). Modelled exactly as the checkpoint "
                "stores it: MLA with q_lora_rank 1536, kv_lora_rank 512, per-head widths "
                "128 (no RoPE) + 64 (RoPE) for q/k and 128 for v; the first 3 of 61 blocks dense "
                "(width 18432), the other 58 with 256 routed experts (top 8) and 1 shared expert "
                "of width 2048, a router without bias plus a stored per-expert "
                "e_score_correction_bias (router_bias); untied head. num_params() is the "
                "main model (the paper's 671B); the one multi-token-prediction module is "
                "num_mtp_params(): its own weights, or with stored_copies=True as the "
                "checkpoint stores it, with copies of the embedding and head (the 685B total). "
                "FP8 block scales (weight_scale_inv) are not parameters and are not counted."),
    ),
)}

# Chapters 24 and 27: the GPT models of the Megatron-LM papers, as the tables give them
# (layers, hidden size, heads; sequence 2048, vocabulary 51,200). The architecture otherwise is
# GPT-2/3's (GELU MLP of width 4h, LayerNorm with bias, biases everywhere, learned positions,
# tied head). 51,200 is GPT-2's 50,257-token vocabulary padded to a multiple of 1,024, what
# Megatron-LM does with 8-way tensor parallelism (--make-vocab-size-divisible-by 128 x TP).
_MEGATRON_2021 = ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU "
                  "Clusters Using Megatron-LM', arXiv:2104.04473, Table 1 (vocabulary 51,200, "
                  "sequence 2048)")
_KORTHIKANTI_2022 = ("Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large "
                     "Transformer Models', arXiv:2205.05198, Table 3 (vocabulary 51,200, sequence 2048)")


def _megatron(name, hidden, layers, heads, source):
    return TransformerConfig(
        name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
        ffn_hidden=4 * hidden, vocab=51200, max_seq=2048, mlp="gelu", norm="layernorm",
        norm_bias=True, attn_bias=True, mlp_bias=True, tied_embeddings=True,
        positions="learned", source=source + "; GPT-2/3 block assumed (see dtbook.models)")


for _cfg in (
    _megatron("megatron-18b", 6144, 40, 48, _MEGATRON_2021 + ": '18.4' billion"),
    _megatron("megatron-22b", 6144, 48, 64, _KORTHIKANTI_2022 + ": '22B'"),
    _megatron("megatron-39b", 8192, 48, 64, _MEGATRON_2021 + ": '39.1' billion"),
    _megatron("megatron-76b", 10240, 60, 80, _MEGATRON_2021 + ": '76.1' billion"),
    _megatron("megatron-146b", 12288, 80, 96, _MEGATRON_2021 + ": '145.6' billion"),
    _megatron("megatron-310b", 16384, 96, 128, _MEGATRON_2021 + ": '310.1' billion"),
    _megatron("mt-nlg-530b", 20480, 105, 128,
              "Smith et al. 2022, 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG "
              "530B', arXiv:2201.11990, Sec. 3 (105 layers, hidden 20480, 128 heads, sequence "
              "2048, GPT-2 tokenizer); " + _MEGATRON_2021 + ": '529.6' billion"),
    _megatron("megatron-1t", 25600, 128, 160, _MEGATRON_2021 + ": '1008.0' billion; "
              + _KORTHIKANTI_2022 + ": '1T'"),
):
    _CATALOG[_cfg.name] = _cfg
del _cfg



for _cfg in (
    TransformerConfig(
        name="mistral-7b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=32000, max_seq=32768, sliding_window=4096,
        source=(_HF + "mistralai/Mistral-7B-v0.1/blob/main/config.json (hidden_size 4096, 32 "
                "layers, 32 heads, 8 KV heads, intermediate_size 14336, vocab_size 32000, "
                "sliding_window 4096 in every layer, max_position_embeddings 32768, untied); "
                "Jiang et al. 2023, 'Mistral 7B', arXiv:2310.06825, Table 1 (window_size 4096)"),
    ),
    TransformerConfig(
        name="qwen1.5-moe-a2.7b", hidden=2048, layers=24, heads=16, kv_heads=16, ffn_hidden=5632,
        vocab=151936, max_seq=8192, qkv_bias=True, experts=60, experts_per_token=4,
        shared_experts=1, expert_ffn_hidden=1408, shared_expert_ffn_hidden=5632,
        shared_expert_gate=True,
        source=(_HF + "Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (model_type qwen2_moe: "
                "hidden_size 2048, 24 layers, 16 heads, 16 KV heads, num_experts 60, "
                "num_experts_per_tok 4, moe_intermediate_size 1408, "
                "shared_expert_intermediate_size 5632, decoder_sparse_step 1, vocab_size 151936, "
                "use_sliding_window false, untied); transformers' Qwen2MoE block: biases on q, k, v "
                "(not o), one shared expert with a sigmoid gate (hidden -> 1). Model card: '14.3B "
                "parameters in total and 2.7B activated'; qwenlm.github.io/blog/qwen-moe/: 2.0B "
                "activated non-embedding parameters"),
    ),
    TransformerConfig(
        name="qwen2-57b-a14b", hidden=3584, layers=28, heads=28, kv_heads=4, ffn_hidden=18944,
        vocab=151936, max_seq=65536, qkv_bias=True, experts=64, experts_per_token=8,
        shared_experts=1, expert_ffn_hidden=2560, shared_expert_ffn_hidden=20480,
        shared_expert_gate=True,
        source=(_HF + "Qwen/Qwen2-57B-A14B/blob/main/config.json (model_type qwen2_moe: "
                "hidden_size 3584, 28 layers, 28 heads, 4 KV heads, num_experts 64, "
                "num_experts_per_tok 8, moe_intermediate_size 2560, "
                "shared_expert_intermediate_size 20480, vocab_size 151936, untied); Yang et al. "
                "2024, 'Qwen2 Technical Report', arXiv:2407.10671, Table 1 (57B total, 14B "
                "activated; 64 routed experts, 8 activated, the shared expert as 8 of width "
                "2560); context 64K tokens as qwenlm.github.io/blog/qwen2/ lists it"),
    ),
    *(TransformerConfig(
        name=f"gpt-oss-{size}", hidden=2880, layers=layers, heads=64, kv_heads=8,
        explicit_head_dim=64, ffn_hidden=2880, vocab=201088, max_seq=131072, attn_bias=True,
        mlp_bias=True, attention_sinks=True, experts=experts, experts_per_token=4,
        expert_ffn_hidden=2880, router_bias=True, sliding_window=128, global_every=2,
        source=(_HF + f"openai/gpt-oss-{size}/blob/main/config.json (model_type gpt_oss: "
                f"hidden_size 2880, {layers} layers, 64 heads of head_dim 64, 8 KV heads, "
                f"num_local_experts {experts}, num_experts_per_tok 4, intermediate_size 2880, "
                "vocab_size 201088, sliding_window 128 on alternate layers (layer_types: "
                "sliding, full, ...), attention_bias true, untied); transformers' GptOss block: "
                "biases on every projection, the router and the experts, one learned attention "
                "sink per head. OpenAI 2025, 'gpt-oss-120b & gpt-oss-20b Model Card', "
                "arXiv:2508.10925, Table 1 (total and active parameters)"),
    ) for size, layers, experts in (("120b", 36, 128), ("20b", 24, 32))),
    *(TransformerConfig(
        name=f"qwen3-{size}", hidden=hidden, layers=layers, heads=heads, kv_heads=4,
        explicit_head_dim=128, ffn_hidden=ffn, vocab=151936, max_seq=40960, qk_norm=True,
        experts=128, experts_per_token=8, expert_ffn_hidden=moe_ffn,
        source=(_HF + f"Qwen/Qwen3-{size.upper()}/blob/main/config.json "
                f"(model_type qwen3_moe: hidden_size {hidden}, {layers} layers, {heads} heads "
                f"of head_dim 128, 4 KV heads, num_experts 128, num_experts_per_tok 8, "
                f"moe_intermediate_size {moe_ffn}, no shared expert, vocab_size 151936, "
                "max_position_embeddings 40960, untied); transformers' Qwen3MoE block: no "
                "attention biases, an RMSNorm over head_dim on q and on k. Model card: "
                f"{published}"),
    ) for size, hidden, layers, heads, ffn, moe_ffn, published in (
        ("30b-a3b", 2048, 48, 32, 6144, 768, "'30.5B in total and 3.3B activated'"),
        ("235b-a22b", 4096, 94, 64, 12288, 1536, "'235B in total and 22B activated'"))),
    *(TransformerConfig(
        name=f"gemma2-{size}", hidden=hidden, layers=layers, heads=heads, kv_heads=kv,
        explicit_head_dim=head_dim, ffn_hidden=ffn, vocab=256000, max_seq=8192, mlp="geglu",
        tied_embeddings=True, sandwich_norms=True, sliding_window=4096, global_every=2,
        source=(_HF + f"google/gemma-2-{size}/blob/main/config.json (model_type gemma2: "
                f"hidden_size {hidden}, {layers} layers, {heads} heads of head_dim {head_dim}, "
                f"{kv} KV heads, intermediate_size {ffn}, hidden_activation gelu_pytorch_tanh "
                "(gated), vocab_size 256000, tied, sliding_window 4096 on alternate layers, "
                "windowed first); transformers' Gemma2 block: norms before and after both "
                "attention and MLP. Gemma Team 2024, 'Gemma 2', arXiv:2408.00118, Table 1"),
    ) for size, hidden, layers, heads, kv, head_dim, ffn in (
        ("9b", 3584, 42, 16, 8, 256, 14336), ("27b", 4608, 46, 32, 16, 128, 36864))),
):
    _CATALOG[_cfg.name] = _cfg
del _cfg


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def names() -> list[str]:
    """The catalog's model names, in catalog order."""
    return list(_CATALOG)


def get(name: str) -> TransformerConfig:
    """The catalog config called ``name`` (case-insensitive; ``_`` and ``-`` alike).

    Raises ``ValueError`` listing the known names for an unknown one. (Chapter 01.)
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, one of {names()}; got {name!r}")
    try:
        return _CATALOG[_key(name)]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(names())}") from None



# ---------------------------------------------------------------------- Hugging Face config.json
# Fields of a config.json that change no weight's shape: token ids, dropout, initialisation,
# norm epsilons, RoPE settings, router loss and scoring settings, dtype and bookkeeping. FP8
# block scales (quantization_config) are not parameters. Any other field is refused by name,
# so a feature that would change the count (say, a bias) is never silently ignored.
_HF_IGNORED = frozenset({
    "_name_or_path", "architectures", "auto_map", "model_type", "transformers_version",
    "torch_dtype", "dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
    "rope_interleave", "attention_dropout", "hidden_dropout", "pretraining_tp",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha",
    "seq_aux", "scoring_func", "routed_scaling_factor", "n_group", "topk_group", "norm_topk_prob",
    "ep_size", "quantization_config", "return_dict", "output_attentions", "output_hidden_states",
    "is_encoder_decoder", "id2label", "label2id", "problem_type", "chunk_size_feed_forward",
    "tie_encoder_decoder", "use_return_dict", "max_window_layers", "swiglu_alpha", "swiglu_limit",
    "experts_per_token", "initial_context_length", "attn_logit_softcapping",
    "final_logit_softcapping", "query_pre_attn_scalar", "cache_implementation",
    "sliding_window_size",
})

_HF_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v2", "deepseek_v3",
             "gpt_oss", "gemma2", "qwen3", "qwen3_moe")


class _Fields:
    """Reads a config.json's fields, remembering which were used, naming the file in errors."""

    def __init__(self, data: Mapping, where: str):
        self.data, self.where, self.used = data, where, {"model_type"}
        self.kind = data["model_type"]

    def _fail(self, key: str, problem: str):
        raise ValueError(f"{self.where}: field {key!r} {problem} (model_type {self.kind!r})")

    def int(self, key: str, default=None, *, nullable=False, low=1):
        self.used.add(key)
        if key not in self.data:
            if default is None:
                self._fail(key, "is missing")
            return default
        v = self.data[key]
        if v is None and nullable:
            return 0
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            self._fail(key, f"must be an integer >= {low}, got {v!r}")
        return v

    def bool(self, key: str, default: bool = False) -> bool:
        self.used.add(key)
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            self._fail(key, f"must be true or false, got {v!r}")
        return v

    def must(self, key: str, allowed, default):
        """A field that this reader models only at the given value(s)."""
        self.used.add(key)
        v = self.data.get(key, default)
        if v not in allowed:
            self._fail(key, f"is {v!r}; dtbook models only {' or '.join(map(repr, allowed))}")
        return v

    def check_unknown(self):
        for key in self.data:
            if key not in self.used and key not in _HF_IGNORED:
                self._fail(key, "is not known to dtbook.models.from_hf_config, which cannot tell "
                                "whether it changes the parameter count")


def _read_hf(source) -> tuple[dict, str, str]:
    if isinstance(source, Mapping):
        return dict(source), "the config dict", ""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as e:
            raise ValueError(f"source: cannot read {path!r}: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"source: {path!r} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"source: {path!r} holds a JSON {type(data).__name__}, not an object")
        folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
        return data, path, folder
    raise ValueError(f"source must be a path to a config.json or a dict, got {type(source).__name__}")


def _window_pattern(r: _Fields, window, layers: int) -> dict:
    """``sliding_window``/``global_every`` from a ``layer_types`` list, if it is one of the
    patterns the config can hold: all full, all windowed, or (k-1) windowed then one full."""
    r.used.add("layer_types")
    types = r.data["layer_types"]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {
            "full_attention", "sliding_attention"}:
        r._fail("layer_types", f"must list 'full_attention' or 'sliding_attention' for each of the "
                               f"{layers} layers")
    if "sliding_attention" not in types:
        return dict(sliding_window=0, global_every=0)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        r._fail("sliding_window", f"must be an integer >= 1 when layer_types has sliding layers, "
                                  f"got {window!r}")
    if "full_attention" not in types:
        return dict(sliding_window=window, global_every=0)
    k = types.index("full_attention") + 1
    if any((t == "full_attention") != (i % k == k - 1) for i, t in enumerate(types)):
        r._fail("layer_types", "is not a repeating pattern of windowed layers each followed by one "
                               "full layer, the only mix dtbook models")
    return dict(sliding_window=window, global_every=k)


def from_hf_config(source) -> TransformerConfig:
    """A :class:`TransformerConfig` from a Hugging Face ``config.json`` (a path, a folder
    holding one, or the parsed dict). (Chapter 01; the planner's ``dtbook plan --config``.)

    ``model_type`` decides the field names: ``llama``, ``mistral``, ``mixtral``, ``qwen2``,
    ``qwen2_moe``, ``qwen3``, ``qwen3_moe``, ``deepseek_v2``, ``deepseek_v3``, ``gpt_oss`` and
    ``gemma2``, as transformers names them
    (``num_local_experts`` for Mixtral, ``num_experts`` and ``shared_expert_intermediate_size``
    for Qwen2-MoE, ``n_routed_experts``, ``first_k_dense_replace``, ``q_lora_rank``,
    ``kv_lora_rank`` ... for DeepSeek). What each type implies that the file does not say is
    transformers' model code: Qwen2 puts biases on q, k, v (not o) and gates its shared expert;
    Qwen3 normalises q and k per head and has no shared expert;
    gpt-oss has biases on every projection, router and expert and one attention sink per head,
    and its ``layer_types`` give the sliding-window pattern; Gemma 2 has a gated GELU MLP, four
    norms per block, a tied head and a 4096 window on every other block, windowed first;
    DeepSeek-V3's router (``topk_method`` ``noaux_tc``) stores one correction bias per expert,
    counted here as the checkpoint stores it (transformers keeps it as a buffer);
    ``num_nextn_predict_layers`` becomes ``mtp_layers`` (outside :meth:`~TransformerConfig.
    num_params`, see :meth:`~TransformerConfig.num_mtp_params`).

    A missing field without a documented default, a value this model does not cover (an
    activation other than SiLU, a sliding window on only some Qwen2 layers, MoE on every
    other layer) and any field it does not know raise ``ValueError`` naming the field and the
    file. Fields that change no weight (token ids, dropout, RoPE scaling, router loss
    settings, the FP8 ``quantization_config``) are read past.
    """
    data, where, folder = _read_hf(source)
    if "model_type" not in data:
        raise ValueError(f"{where}: field 'model_type' is missing; dtbook reads {', '.join(_HF_TYPES)}")
    kind = data["model_type"]
    if kind not in _HF_TYPES:
        raise ValueError(f"{where}: field 'model_type' is {kind!r}; dtbook reads {', '.join(_HF_TYPES)}")
    r = _Fields(data, where)
    heads = r.int("num_attention_heads")
    hidden = r.int("hidden_size")
    kw = dict(hidden=hidden, layers=r.int("num_hidden_layers"), heads=heads,
              kv_heads=r.int("num_key_value_heads", heads, nullable=True) or heads,
              ffn_hidden=r.int("intermediate_size"),
              vocab=r.int("vocab_size"), max_seq=r.int("max_position_embeddings"),
              tied_embeddings=r.bool("tie_word_embeddings", kind == "gemma2"))
    if kind == "gemma2":  # gated GELU (tanh form), sandwich norms, alternate 4096 windows
        act = r.must("hidden_activation", ("gelu_pytorch_tanh", "gelu"), "gelu_pytorch_tanh")
        r.must("hidden_act", ("gelu_pytorch_tanh", "gelu"), act)
        kw.update(mlp="geglu", sandwich_norms=True, attn_bias=r.bool("attention_bias"),
                  sliding_window=r.int("sliding_window", 4096))
        if "layer_types" not in data:  # transformers' Gemma2: block i windowed when i is even
            kw["global_every"] = 2
    else:
        r.must("hidden_act", ("silu",), "silu")
    if kind in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gpt_oss", "gemma2", "qwen3",
                "qwen3_moe"):
        head_dim = r.int("head_dim", hidden // heads, nullable=True) or hidden // heads
        if head_dim != hidden // heads or hidden % heads:
            kw["explicit_head_dim"] = head_dim
    if kind == "llama":
        kw.update(attn_bias=r.bool("attention_bias"), mlp_bias=r.bool("mlp_bias"))
    if kind in ("mistral", "mixtral", "gpt_oss"):
        kw["sliding_window"] = r.int("sliding_window", 0, nullable=True)
    if kind == "gpt_oss":  # biases everywhere, a router bias, one attention sink per head
        kw.update(attn_bias=r.bool("attention_bias", True), mlp_bias=True, router_bias=True,
                  attention_sinks=True)
        if "layer_types" not in data:
            r._fail("layer_types", "is missing; gpt_oss alternates sliding and full attention")
    if kind in ("mixtral", "gpt_oss"):
        kw.update(experts=r.int("num_local_experts"), experts_per_token=r.int("num_experts_per_tok"),
                  expert_ffn_hidden=kw["ffn_hidden"])
    if kind in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        r.must("use_sliding_window", (False,), False)
        r.used.add("sliding_window")  # only read by transformers when use_sliding_window is true
    if kind in ("qwen2", "qwen2_moe"):
        kw["qkv_bias"] = True
    if kind in ("qwen3", "qwen3_moe"):  # q and k normalised per head; biases only if asked
        kw.update(qk_norm=True, attn_bias=r.bool("attention_bias"))
    if kind in ("qwen2_moe", "qwen3_moe"):
        r.must("decoder_sparse_step", (1,), 1)
        r.must("mlp_only_layers", ([],), [])
    if kind == "qwen3_moe":
        kw.update(experts=r.int("num_experts"), experts_per_token=r.int("num_experts_per_tok"),
                  expert_ffn_hidden=r.int("moe_intermediate_size"))
    if kind == "qwen2_moe":
        shared = r.int("shared_expert_intermediate_size", 0, low=0)
        kw.update(experts=r.int("num_experts"), experts_per_token=r.int("num_experts_per_tok"),
                  expert_ffn_hidden=r.int("moe_intermediate_size"))
        if shared:
            kw.update(shared_experts=1, shared_expert_ffn_hidden=shared, shared_expert_gate=True)
    if kind in ("deepseek_v2", "deepseek_v3"):
        kw.update(attn_bias=r.bool("attention_bias"),
                  q_lora_rank=r.int("q_lora_rank", nullable=True, low=0),
                  kv_lora_rank=r.int("kv_lora_rank"), qk_nope_head_dim=r.int("qk_nope_head_dim"),
                  qk_rope_head_dim=r.int("qk_rope_head_dim"), v_head_dim=r.int("v_head_dim"))
        r.must("moe_layer_freq", (1,), 1)
        experts = r.int("n_routed_experts", nullable=True, low=0)
        if experts:
            kw.update(experts=experts, experts_per_token=r.int("num_experts_per_tok"),
                      shared_experts=r.int("n_shared_experts", 0, nullable=True, low=0),
                      expert_ffn_hidden=r.int("moe_intermediate_size"),
                      dense_layers=r.int("first_k_dense_replace", 0, low=0),
                      router_bias=r.must("topk_method", ("noaux_tc", "greedy", "group_limited_greedy"),
                                         "noaux_tc" if kind == "deepseek_v3" else "greedy")
                      == "noaux_tc")
            if data.get("topk_method") in ("noaux_tc", "group_limited_greedy"):   # group-limited
                kw.update(router_groups=r.int("n_group", 1, low=1),
                          router_group_topk=r.int("topk_group", 0, low=0))
        kw["mtp_layers"] = r.int("num_nextn_predict_layers", 0, low=0)
    if "layer_types" in data:  # newer transformers write each layer's attention out
        kw.update(_window_pattern(r, kw.get("sliding_window") or data.get("sliding_window"),
                                  kw["layers"]))
    r.check_unknown()
    name = data.get("_name_or_path") or folder or kind
    try:
        return TransformerConfig(name=str(name), source=f"{where} (Hugging Face config.json, "
                                 f"model_type {kind})", **kw)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
