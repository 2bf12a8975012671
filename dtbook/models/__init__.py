"""Transformer configurations, and parameter counts computed from the architecture.

A :class:`TransformerConfig` holds a model's shape as its published configuration gives it
(hidden size, layers, heads, MLP kind, experts, ...). Every count, :meth:`~TransformerConfig.
num_params`, :meth:`~TransformerConfig.num_active_params`, :meth:`~TransformerConfig.
param_breakdown`, is computed from those figures; no parameter count is typed in anywhere in
this package. The tests check the computed counts against the published ones (Hugging Face
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

The package is three files, one idea each: :mod:`dtbook.models.config` (the config and
:func:`tiny`), :mod:`dtbook.models.catalog` (the published models, :func:`names` and
:func:`get`) and :mod:`dtbook.models.hf_config` (the ``config.json`` reader). Every name is
re-exported here; use them as ``dtbook.models.X``.
"""

from __future__ import annotations

from .catalog import get, names
from .config import TransformerConfig, tiny
from .hf_config import from_hf_config

__all__ = ["TransformerConfig", "from_hf_config", "get", "names", "tiny"]
