"""The Hugging Face ``config.json`` reader of :mod:`dtbook.models`: :func:`from_hf_config`
turns a file, a folder holding one, or the parsed dict into a
:class:`~dtbook.models.TransformerConfig`, refusing by name any field it does not know.
(Chapter 01; the planner's ``dtbook plan --config``.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from .config import TransformerConfig

__all__ = ["from_hf_config"]

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
    "sliding_window_size", "norm_eps", "partial_rotary_factor",
})

_HF_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v2", "deepseek_v3",
             "gpt_oss", "gemma2", "qwen3", "qwen3_moe", "nemotron")


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
    ``qwen2_moe``, ``qwen3``, ``qwen3_moe``, ``deepseek_v2``, ``deepseek_v3``, ``gpt_oss``,
    ``gemma2`` and ``nemotron``, as transformers names them
    (``num_local_experts`` for Mixtral, ``num_experts`` and ``shared_expert_intermediate_size``
    for Qwen2-MoE, ``n_routed_experts``, ``first_k_dense_replace``, ``q_lora_rank``,
    ``kv_lora_rank`` ... for DeepSeek). What each type implies that the file does not say is
    transformers' model code: Qwen2 puts biases on q, k, v (not o) and gates its shared expert;
    Qwen3 normalises q and k per head and has no shared expert; Nemotron has a squared-ReLU
    MLP without a gate and LayerNorms with a bias (``NemotronLayerNorm1P``);
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
    elif kind == "nemotron":  # squared ReLU, no gate; LayerNorm with weight and bias ("1P")
        r.must("hidden_act", ("relu2",), "relu2")
        kw.update(mlp="relu2", norm="layernorm", norm_bias=True,
                  attn_bias=r.bool("attention_bias"), mlp_bias=r.bool("mlp_bias"))
    else:
        r.must("hidden_act", ("silu",), "silu")
    if kind in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gpt_oss", "gemma2", "qwen3",
                "qwen3_moe", "nemotron"):
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
