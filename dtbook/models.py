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
  ``kv_heads < heads``), each with a bias when ``attn_bias``; or multi-head latent attention
  (MLA, DeepSeek-V2/V3) when ``kv_lora_rank > 0``, see :meth:`TransformerConfig.attention_params`;
* MLP: ``gate, up, down`` for SwiGLU (3 matrices) or ``up, down`` for a GELU MLP (2), with
  biases when ``mlp_bias``; in a mixture-of-experts layer, ``experts`` routed MLPs of width
  ``expert_ffn_hidden``, ``shared_experts`` always-on MLPs of the same width, and a router
  (``hidden x experts``, plus one bias per expert when ``router_bias``);
* two norms (before attention, before the MLP): RMSNorm has a weight only; LayerNorm has a
  weight and, when ``norm_bias``, a bias.

Outside the blocks: the token embedding (``vocab x hidden``), a learned position table
(``max_seq x hidden``) when ``positions == "learned"`` (rotary and ALiBi positions have no
parameters),
a final norm when ``final_norm``, a norm after the embedding when ``embedding_norm`` (BLOOM),
and the output head (``hidden x vocab``, no bias) unless
``tied_embeddings``, in which case the head reuses the embedding matrix and adds nothing.

Chapter 01 derives these counts and checks them against a torch model
(:mod:`dtbook.nn`), parameter by parameter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["TransformerConfig", "get", "names", "tiny"]

_MLP_KINDS = ("swiglu", "gelu")
_NORM_KINDS = ("rmsnorm", "layernorm")
_POSITION_KINDS = ("rotary", "learned", "alibi")

_INT_FIELDS_POSITIVE = ("hidden", "layers", "heads", "kv_heads", "ffn_hidden", "vocab", "max_seq")
_INT_FIELDS_NONNEGATIVE = (
    "experts", "experts_per_token", "shared_experts", "dense_layers", "q_lora_rank",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "mtp_layers",
)
_BOOL_FIELDS = ("norm_bias", "attn_bias", "mlp_bias", "tied_embeddings", "final_norm", "router_bias",
                "embedding_norm")


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
    attn_bias: bool = False
    mlp_bias: bool = False
    tied_embeddings: bool = False
    positions: str = "rotary"
    final_norm: bool = True
    embedding_norm: bool = False  # a norm right after the token embedding (BLOOM's StableEmbedding)
    explicit_head_dim: int | None = None  # per-head width when not hidden // heads
    # mixture of experts (experts == 0: dense)
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_ffn_hidden: int | None = None  # None: same as ffn_hidden
    dense_layers: int = 0  # leading dense blocks in an MoE model
    router_bias: bool = False  # one stored bias per expert (DeepSeek-V3's e_score_correction_bias)
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
        for f in ("explicit_head_dim", "expert_ffn_hidden"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{f} must be None or an integer >= 1, got {v!r}")
        for f in _BOOL_FIELDS:
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f} must be True or False, got {getattr(self, f)!r}")
        for f, allowed in (("mlp", _MLP_KINDS), ("norm", _NORM_KINDS), ("positions", _POSITION_KINDS)):
            if getattr(self, f) not in allowed:
                raise ValueError(f"{f} must be one of {allowed}, got {getattr(self, f)!r}")
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
        else:
            for f in ("experts_per_token", "shared_experts", "dense_layers"):
                if getattr(self, f):
                    raise ValueError(f"{f} needs experts > 0 (this config is dense)")
            if self.router_bias:
                raise ValueError("router_bias needs experts > 0 (this config is dense)")
            if self.expert_ffn_hidden is not None:
                raise ValueError("expert_ffn_hidden needs experts > 0 (this config is dense)")

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
        ``k`` and ``v`` are ``hidden x kv_heads*head_dim``.

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
            return (self._linear(h, q, b) + 2 * self._linear(h, kv, b) + self._linear(q, h, b))
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
        SwiGLU ``3 hidden width`` (gate, up, down), GELU ``2 hidden width`` (up, down), plus
        biases when ``mlp_bias``."""
        f = self.ffn_hidden if width is None else width
        h, b = self.hidden, self.mlp_bias
        if self.mlp == "swiglu":
            return 2 * self._linear(h, f, b) + self._linear(f, h, b)
        return self._linear(h, f, b) + self._linear(f, h, b)

    def router_params(self) -> int:
        """Parameters of one MoE router: ``hidden x experts`` (no bias), plus ``experts``
        stored biases when ``router_bias``."""
        return self.hidden * self.experts + (self.experts if self.router_bias else 0)

    def layer_breakdown(self, index: int) -> dict[str, int]:
        """Parameters of block ``index`` (0-based) by component: ``attention``, ``mlp``
        (a dense block's MLP), ``routed_experts``, ``shared_experts``, ``router``, ``norms``."""
        self._check_index(index)
        out = dict(attention=self.attention_params(), mlp=0, routed_experts=0,
                   shared_experts=0, router=0, norms=2 * self.norm_params(self.hidden))
        if self.is_moe_layer(index):
            expert = self.mlp_params(self.moe_ffn_hidden)
            out.update(routed_experts=self.experts * expert,
                       shared_experts=self.shared_experts * expert,
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
        mtp_layers=1,
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
