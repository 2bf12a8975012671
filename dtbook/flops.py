"""Training compute: 6ΨD, time to train, model FLOP utilisation, and the exact matmul count.

Chapter 01 derives the rule of thumb. A weight multiplies one input number per token in the
forward pass (a multiply and an add: 2 FLOP). The backward pass needs two products of the
same size, the gradient with respect to the input and the gradient with respect to the
weight (2 + 2 = 4 FLOP). So one training token costs 6 FLOP per parameter and a run of D
tokens costs

    C = 6ΨD FLOP,        T = 6ΨD / (P F η) seconds

on P devices of peak F FLOP/s each running at model FLOP utilisation η.

6ΨD counts every parameter as a matmul weight and ignores the attention scores.
`transformer_matmul_flops` counts a transformer term by term instead, which is what a FLOP
counter measures; chapter 01 shows that the difference between the two is exactly the
non-matmul parameters (embedding lookup, norms, biases) and the attention-score matmuls.

Every function is plain arithmetic: numbers, NumPy arrays and SymPy symbols all work.
Results are in FLOP, seconds and FLOP/s (SI).
"""

from __future__ import annotations

from . import _validate as check

#: FLOP per parameter per token: forward (one multiply-add), backward (dX and dW).
FORWARD_PER_PARAM_TOKEN = 2
BACKWARD_PER_PARAM_TOKEN = 4
TRAINING_PER_PARAM_TOKEN = FORWARD_PER_PARAM_TOKEN + BACKWARD_PER_PARAM_TOKEN


def forward_flops(params, tokens):
    """Forward-pass FLOP of a dense model: 2ΨD (chapter 01)."""
    check.nonnegative("params", params)
    check.nonnegative("tokens", tokens)
    return FORWARD_PER_PARAM_TOKEN * params * tokens


def backward_flops(params, tokens):
    """Backward-pass FLOP: 4ΨD, the input gradient and the weight gradient (chapter 01)."""
    check.nonnegative("params", params)
    check.nonnegative("tokens", tokens)
    return BACKWARD_PER_PARAM_TOKEN * params * tokens


def training_flops(params, tokens):
    """Total training compute C = 6ΨD FLOP (chapter 01): ``training_flops(175e9, 300e9)``
    is 3.15e23 FLOP for GPT-3."""
    check.nonnegative("params", params)
    check.nonnegative("tokens", tokens)
    return TRAINING_PER_PARAM_TOKEN * params * tokens


def training_time(params, tokens, peak_flops, mfu=1.0, devices=1):
    """Seconds to train: T = 6ΨD / (P F η) (chapter 01).

    ``peak_flops`` is one device's peak (FLOP/s), ``mfu`` the fraction of it achieved
    (model FLOP utilisation η), ``devices`` the number P of devices, assumed to share the
    work perfectly (communication shows up as a lower η).
    """
    check.positive("peak_flops", peak_flops)
    check.fraction("mfu", mfu)
    check.positive("devices", devices)
    return training_flops(params, tokens) / (devices * peak_flops * mfu)


def tokens_per_second(params, peak_flops, mfu=1.0, devices=1):
    """Training throughput P F η / (6Ψ) tokens per second (chapter 01)."""
    check.positive("params", params)
    check.positive("peak_flops", peak_flops)
    check.fraction("mfu", mfu)
    check.positive("devices", devices)
    return devices * peak_flops * mfu / (TRAINING_PER_PARAM_TOKEN * params)


def mfu(tokens_per_second, params, peak_flops, devices=1):
    """Model FLOP utilisation from a measured throughput: 6Ψ·(tokens/s) / (P F) (chapter 01).

    Counts only the model's 6Ψ FLOP per token (not recomputation: that is hardware FLOP
    utilisation), against the stated peak of the ``devices`` devices.
    """
    check.nonnegative("tokens_per_second", tokens_per_second)
    check.positive("params", params)
    check.positive("peak_flops", peak_flops)
    check.positive("devices", devices)
    return TRAINING_PER_PARAM_TOKEN * params * tokens_per_second / (devices * peak_flops)


def mfu_waste(mfu, achievable_mfu):
    """Fraction of the compute bill lost to running at ``mfu`` when ``achievable_mfu`` is
    within reach: (η_ach − η) / η_ach (chapter 01). 35% against 50% wastes 30%.

    The same work at the higher MFU costs η/η_ach of the bill, so the rest is waste.
    Negative when ``mfu`` already beats ``achievable_mfu``.
    """
    check.fraction("mfu", mfu)
    check.fraction("achievable_mfu", achievable_mfu)
    return (achievable_mfu - mfu) / achievable_mfu


def mfu_gain(mfu, achievable_mfu):
    """Extra training bought with the same budget by raising MFU from ``mfu`` to
    ``achievable_mfu``: η_ach / η − 1 (chapter 01). 35% to 50% buys 43% more tokens."""
    check.fraction("mfu", mfu)
    check.fraction("achievable_mfu", achievable_mfu)
    return achievable_mfu / mfu - 1


def training_cost(params, tokens, peak_flops, price_per_device_hour, mfu=1.0):
    """Dollars to train at ``price_per_device_hour``: 6ΨD / (F η) device-seconds (chapter 01).

    Independent of the number of devices under perfect scaling: more devices finish sooner
    and cost the same device-hours.
    """
    check.nonnegative("price_per_device_hour", price_per_device_hour)
    return training_time(params, tokens, peak_flops, mfu) * price_per_device_hour / 3600


# --- the exact count -------------------------------------------------------------------------


def attention_flops(batch, seq, heads, head_dim, layers=1, value_dim=None):
    """Forward FLOP of the attention-score matmuls QKᵀ and A·V (chapter 01).

    Per head and sequence, QKᵀ is an (S × d_head)·(d_head × S) product, 2·S²·d_head FLOP,
    and A·V an (S × S)·(S × d_v) product, 2·S²·d_v FLOP; with d_v = d_head (``value_dim``
    None) that is 4·B·S²·d_head·heads per layer. No parameter is involved, so 6ΨD misses
    them. The full S × S product is counted (a causal kernel that skips the masked half does
    about half of it).
    """
    check.nonnegative("batch", batch)
    check.nonnegative("seq", seq)
    check.positive("heads", heads)
    check.positive("head_dim", head_dim)
    check.nonnegative("layers", layers)
    if value_dim is None:
        value_dim = head_dim
    check.positive("value_dim", value_dim)
    return 2 * batch * seq**2 * heads * (head_dim + value_dim) * layers


def _mlp_weights(hidden, ffn, gated):
    return (3 if gated else 2) * hidden * ffn


def _attention_weights(cfg):
    """Matmul weights of one attention block (no biases, no latent norms)."""
    h, heads = cfg.hidden, cfg.heads
    if getattr(cfg, "kv_lora_rank", 0):  # multi-head latent attention (DeepSeek-V2/V3)
        qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        r = cfg.q_lora_rank
        q = h * r + r * heads * qk if r else h * heads * qk
        kv = h * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) + cfg.kv_lora_rank * heads * (
            cfg.qk_nope_head_dim + cfg.v_head_dim)
        return q + kv + heads * cfg.v_head_dim * h
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    kv_heads = getattr(cfg, "kv_heads", None) or heads
    return h * head_dim * (2 * heads + 2 * kv_heads)  # q and o, k and v


def matmul_params(cfg):
    """Weights a token is multiplied by in matmuls, per token (chapter 01).

    Counts the attention projections (query, key, value, output; or MLA's low-rank ones),
    the MLP (or, in an MoE block, the router, the shared experts and the
    ``experts_per_token`` routed experts a token visits) and the LM head, which is a matmul
    whether or not it is tied to the embedding. Leaves out what Ψ holds but no matmul uses:
    the embedding lookup, learned positions, norms and biases (a bias is an addition, not a
    product). Computed from the config's fields (a :class:`dtbook.models.TransformerConfig`),
    not from its parameter count; multi-token-prediction modules are not included.
    """
    hidden = cfg.hidden
    gated = cfg.mlp == "swiglu"
    dense_mlp = _mlp_weights(hidden, cfg.ffn_hidden, gated)
    experts = getattr(cfg, "experts", 0) or 0
    if experts:
        dense_layers = getattr(cfg, "dense_layers", 0) or 0
        expert_ffn = getattr(cfg, "expert_ffn_hidden", None) or cfg.ffn_hidden
        visited = cfg.experts_per_token + (getattr(cfg, "shared_experts", 0) or 0)
        moe_mlp = hidden * experts + visited * _mlp_weights(hidden, expert_ffn, gated)
        mlp_total = dense_layers * dense_mlp + (cfg.layers - dense_layers) * moe_mlp
    else:
        mlp_total = cfg.layers * dense_mlp
    return cfg.layers * _attention_weights(cfg) + mlp_total + hidden * cfg.vocab


def transformer_matmul_flops(cfg, batch, seq):
    """Exact matmul FLOP of one training step of a decoder transformer on ``batch`` sequences
    of ``seq`` tokens, as a dict (chapter 01).

    - ``"linear_forward"``: 2 · matmul_params(cfg) · B · S
    - ``"attention_forward"``: QKᵀ and A·V over the full S × S scores, 4·B·S²·d_head·heads·L
      (see :func:`attention_flops`)
    - ``"forward"``: their sum; ``"backward"``: twice the forward (every matmul Y = XW needs
      dX and dW, each as large as the forward product); ``"total"``: forward + backward.

    This is what ``torch.utils.flop_counter.FlopCounterMode`` reports for
    :class:`dtbook.nn.TinyTransformer`, which runs attention as explicit matmuls, provided
    every matmul input needs a gradient (a trainable embedding sees to that). In an MoE
    model it assumes each token visits exactly ``experts_per_token`` routed experts, as a
    top-k router without token dropping does. The gap to the rule of thumb is
    6ΨBS − total = 6·B·S·(Ψ − matmul_params) − 3·attention_forward.
    """
    check.nonnegative("batch", batch)
    check.nonnegative("seq", seq)
    if getattr(cfg, "kv_lora_rank", 0):
        head_dim, value_dim = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    else:
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden // cfg.heads
        value_dim = head_dim
    linear = FORWARD_PER_PARAM_TOKEN * matmul_params(cfg) * batch * seq
    attention = attention_flops(batch, seq, cfg.heads, head_dim, cfg.layers, value_dim)
    forward = linear + attention
    backward = 2 * forward
    return {
        "linear_forward": linear,
        "attention_forward": attention,
        "forward": forward,
        "backward": backward,
        "total": forward + backward,
    }


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
