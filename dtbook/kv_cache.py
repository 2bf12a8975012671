"""The KV cache: bytes per token for MHA, GQA, MQA, sliding windows and MLA (chapter 31a).

At decode time every layer keeps, for every past token, what later queries attend to.
Multi-head attention (MHA) keeps a key and a value per head: ``2·A·d_h`` elements per token
per layer. Grouped-query attention (GQA) lets ``A/g`` query heads share one key-value head,
so it keeps ``2·g·d_h`` (MQA is g = 1, MHA is g = A). A sliding window of w keys keeps at most
w tokens whatever the sequence length. Multi-head latent attention (MLA, DeepSeek-V2/V3)
keeps one latent ``c_t`` of width ``d_c`` (``kv_lora_rank``) and one decoupled RoPE key of
width ``d_r`` (``qk_rope_head_dim``) shared by all heads: ``d_c + d_r`` elements.

Every formula takes Python numbers, NumPy arrays and SymPy symbols alike; sizes in bytes.
``value_bytes`` is 2 for bf16/fp16.
"""

from __future__ import annotations

from . import _validate as check
from .symbolic import minimum

__all__ = ["kv_bytes_per_token", "mla_bytes_per_token", "cached_tokens", "cache_bytes",
           "receptive_field", "bytes_per_token_layer"]


def kv_bytes_per_token(kv_heads, head_dim, value_bytes=2):
    """Bytes of K and V one token adds to one layer's cache with ``kv_heads`` key-value
    heads of width ``head_dim``: ``2·g·d_h·s`` (MHA: g = A; MQA: g = 1). Chapter 31a."""
    check.positive("kv_heads", kv_heads)
    check.positive("head_dim", head_dim)
    check.positive("value_bytes", value_bytes)
    return 2 * kv_heads * head_dim * value_bytes


def mla_bytes_per_token(kv_lora_rank, rope_head_dim, value_bytes=2):
    """Bytes one token adds to one layer's MLA cache: the latent (``d_c``) and the shared
    decoupled RoPE key (``d_r``), ``(d_c + d_r)·s``. Chapter 31a."""
    check.positive("kv_lora_rank", kv_lora_rank)
    check.nonnegative("rope_head_dim", rope_head_dim)
    check.positive("value_bytes", value_bytes)
    return (kv_lora_rank + rope_head_dim) * value_bytes


def cached_tokens(seq, window=None):
    """Tokens a layer keeps after ``seq`` tokens: all of them, or ``min(S, w)`` with a
    sliding window of ``w`` keys (chapter 31a)."""
    check.positive("seq", seq)
    if window is None:
        return seq
    check.positive("window", window)
    return minimum(seq, window)


def cache_bytes(per_token_layer, seq, layers=1, batch=1, window=None):
    """Whole cache: ``B · min(S, w) · L · bytes_per_token_layer`` (chapter 31a)."""
    check.positive("per_token_layer", per_token_layer)
    check.positive("layers", layers)
    check.positive("batch", batch)
    return batch * cached_tokens(seq, window) * layers * per_token_layer


def receptive_field(layers, window):
    """Positions a token can depend on after ``layers`` layers of a sliding window of
    ``window`` keys (itself and the w − 1 before it): each layer reaches w − 1 further back,
    so ``L·(w − 1) + 1`` (≈ L·w). Chapter 31a."""
    check.positive("layers", layers)
    check.positive("window", window)
    return layers * (window - 1) + 1


def bytes_per_token_layer(cfg, value_bytes=2, kv_heads=None):
    """One layer's cache bytes per token for a :class:`dtbook.models.TransformerConfig`:
    MLA when the config has a latent (``kv_lora_rank > 0``), else GQA with the config's
    ``kv_heads`` or the ``kv_heads`` given (``heads`` for the MHA it replaced). Chapter 31a."""
    if cfg.is_mla:
        return mla_bytes_per_token(cfg.kv_lora_rank, cfg.qk_rope_head_dim, value_bytes)
    return kv_bytes_per_token(cfg.kv_heads if kv_heads is None else kv_heads, cfg.head_dim,
                              value_bytes)


# ------------------------------------------------------------------ sliding windows and GQA serving (chapter 36)

import numpy as np  # noqa: E402 (this section's own imports)
import sympy as sp  # noqa: E402

from .symbolic import is_symbolic, maximum  # noqa: E402

__all__ += ["rolling_slot", "window_for_context", "cache_reduction", "max_batch"]


def rolling_slot(position, window):
    """Slot of position i in a rolling buffer of w slots: i mod w. Position i overwrites
    i − w, the newest key no query from i on can see (chapter 36)."""
    check.nonnegative("position", position)
    check.positive("window", window)
    return position % window


def window_for_context(context, layers):
    """Smallest window w whose receptive field after L layers, L·(w − 1) + 1
    (:func:`receptive_field`), reaches ``context`` positions: ⌈(C − 1)/L⌉ + 1 (chapter 36)."""
    check.positive("context", context)
    check.positive("layers", layers)
    if is_symbolic(context, layers):
        return sp.ceiling((context - 1) / layers) + 1
    return np.ceil((np.asarray(context, dtype=float) - 1) / layers)[()] + 1


def cache_reduction(seq, window, kv_heads, heads):
    """Cache bytes with a window of w keys and g key-value heads over those of full MHA at
    sequence length S: min(S, w)/S · g/A (chapter 36)."""
    check.positive("kv_heads", kv_heads)
    check.positive("heads", heads)
    return cached_tokens(seq, window) / seq * kv_heads / heads


def max_batch(memory, model_bytes, sequence_bytes):
    """Sequences one accelerator can serve at once: ⌊(M − M_model)/KV per sequence⌋, zero
    when the weights leave no room (chapter 36)."""
    check.positive("memory", memory)
    check.nonnegative("model_bytes", model_bytes)
    check.positive("sequence_bytes", sequence_bytes)
    room = maximum(memory - model_bytes, 0)
    if is_symbolic(memory, model_bytes, sequence_bytes):
        return sp.floor(room / sequence_bytes)
    return np.floor(np.asarray(room, dtype=float) / sequence_bytes)[()]


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
