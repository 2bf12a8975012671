"""The config of :mod:`dtbook.models`: :class:`TransformerConfig`, a decoder's shape as its
published configuration gives it, validated on construction, with every parameter count
computed from it (what is counted, block by block, is in the :mod:`dtbook.models`
docstring); and :func:`tiny`, a small config for CPU demos. (Chapter 01.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["TransformerConfig", "tiny"]

_MLP_KINDS = ("swiglu", "geglu", "gelu", "relu2")  # gated SiLU, gated GELU (Gemma), plain GELU,
# squared ReLU (So et al. 2021, Primer, arXiv:2109.08668; Nemotron-4): relu(x)^2, not gated
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
        False for a plain GELU or squared-ReLU MLP (up and down, 2)."""
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
