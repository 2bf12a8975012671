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
`layer_matmul_flops` and `lm_head_matmul_flops` give the same count block by block, for a
pipeline stage.

The architectures trained now each change one term: a sliding window of w keys makes the
score matmuls grow as S·w instead of S² once S > w (`attention_score_pairs`, chapter 31a);
multi-head latent attention has low-rank projections and, at inference, an absorbed form that
trades per-token expansions for wider scores (`mla_attention_flops`, chapter 31a); a
mixture-of-experts MLP costs the router GEMM, the shared experts and only the k routed experts
each token visits (`moe_flops`, chapter 18).

Every function is plain arithmetic: numbers, NumPy arrays and SymPy symbols all work.
Results are in FLOP, seconds and FLOP/s (SI).
"""

from __future__ import annotations

import fractions
import numbers

from . import _validate as check
from .symbolic import minimum

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


def _min(a, b):
    """min that keeps integers exact and stays a SymPy ``Min`` for symbols."""
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        return min(a, b)
    return minimum(a, b)


def attention_score_pairs(seq, window=None, causal=True):
    """Query-key pairs one head scores in one sequence of ``seq`` tokens (chapters 01, 31a).

    ``causal`` (what a causal kernel computes): query i sees keys 0..i, S(S+1)/2 pairs; with a
    sliding ``window`` of w keys (itself and the w − 1 before it) it sees min(i + 1, w), so
    with m = min(S, w) the pairs are m(m + 1)/2 + (S − m)·w: linear in S once S > w.

    ``causal=False`` is the full-square convention of :func:`attention_flops` (every query
    against every key, S², what explicit matmuls with a mask compute); with a window it counts
    the keys within distance w − 1 on either side, S(2m − 1) − m(m − 1), which is S² when
    S ≤ w and exactly twice the causal count less the diagonal (2·causal − S) always, so
    halving it, as a planner does for causal attention, lands within S/2 of the causal count.
    """
    check.nonnegative("seq", seq)
    if window is None:
        return seq * (seq + 1) // 2 if causal and isinstance(seq, numbers.Integral) else (
            seq * (seq + 1) / 2 if causal else seq**2)
    check.positive("window", window)
    m = _min(seq, window)
    if causal:
        half = m * (m + 1)
        half = half // 2 if isinstance(half, numbers.Integral) else half / 2
        return half + (seq - m) * window
    return seq * (2 * m - 1) - m * (m - 1)


def attention_flops(batch, seq, heads, head_dim, layers=1, value_dim=None, window=None,
                    causal=False):
    """Forward FLOP of the attention-score matmuls QKᵀ and A·V (chapter 01).

    Per head and sequence, QKᵀ is an (S × d_head)·(d_head × S) product, 2·S²·d_head FLOP,
    and A·V an (S × S)·(S × d_v) product, 2·S²·d_v FLOP; with d_v = d_head (``value_dim``
    None) that is 4·B·S²·d_head·heads per layer. No parameter is involved, so 6ΨD misses
    them. By default the full S × S product is counted (a causal kernel that skips the
    masked half does about half of it); in general the count is
    2·B·heads·(d_head + d_v)·pairs·layers with the pairs of :func:`attention_score_pairs`
    (``window``: a sliding window of that many keys; ``causal=True``: only the pairs a causal
    kernel computes). (Chapter 31a for the window.)
    """
    check.nonnegative("batch", batch)
    check.nonnegative("seq", seq)
    check.positive("heads", heads)
    check.positive("head_dim", head_dim)
    check.nonnegative("layers", layers)
    if value_dim is None:
        value_dim = head_dim
    check.positive("value_dim", value_dim)
    if window is None and not causal:  # the original closed form, kept term for term
        return 2 * batch * seq**2 * heads * (head_dim + value_dim) * layers
    pairs = attention_score_pairs(seq, window, causal)
    return 2 * batch * heads * (head_dim + value_dim) * pairs * layers


def mla_attention_flops(batch, seq, hidden, heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                        qk_rope_head_dim, v_head_dim, absorbed=False, context=None):
    """Forward FLOP of one multi-head latent attention block (DeepSeek-V2/V3; chapter 31a), as
    a dict: ``projections`` (the linear layers), ``core`` (scores and values), ``total``.

    ``seq`` new tokens each attend to ``context`` keys (default ``seq``: a training step or
    a prefill, counted in the full-square convention of :func:`attention_flops`). Write
    C = ``kv_lora_rank``, r = ``qk_rope_head_dim``, n = ``qk_nope_head_dim``, v =
    ``v_head_dim``, A = ``heads``, h = ``hidden``, R = ``q_lora_rank`` (0: queries projected
    directly). Both forms share the query path (h·R + R·A(n + r), or h·A(n + r)), the latent
    down-projection h(C + r) and the output A·v·h, per new token.

    - Explicit (``absorbed=False``; what training runs, and DeepSeek's ``attn_impl="naive"``):
      every new token's latent is expanded to per-head keys and values, C·A(n + v) weights, and
      attention runs per head with d_qk = n + r, d_v = v: core 2·S·T·A·(n + r + v).
    - Absorbed (``absorbed=True``; DeepSeek-V3's ``inference/model.py`` default
      ``attn_impl="absorb"``): the key up-projection is folded into the query (A·n·C per
      token) and the value up-projection applied after attention (A·C·v per token), so keys and
      values stay C-wide latents shared by all heads (what the KV cache holds) and no
      expansion runs; the core then works at width C + r for scores and C for values:
      2·S·T·A·(2C + r).

    With DeepSeek-V3's widths (C = 512, r = 64, n = v = 128) the absorbed core costs
    (2C + r)/(n + r + v) = 1088/320 = 3.4 times the explicit one per key, and the projections
    are the same (A·n·C + A·C·v = C·A(n + v)): absorbing never saves FLOPs. It saves memory
    traffic: per cached token it reads C + r = 576 numbers instead of A(n + r + v) = 40,960
    (DeepSeek-V3), and decoding is bound by reading the cache; a cache of latents that the
    explicit form had to re-expand would cost 2·T·C·A(n + v) per step instead. Training, with
    nothing cached, uses the explicit form, and so do :func:`matmul_params` and
    :func:`transformer_matmul_flops`.
    """
    for name, value in (("batch", batch), ("seq", seq), ("q_lora_rank", q_lora_rank)):
        check.nonnegative(name, value)
    for name, value in (("hidden", hidden), ("heads", heads), ("kv_lora_rank", kv_lora_rank),
                        ("qk_nope_head_dim", qk_nope_head_dim),
                        ("qk_rope_head_dim", qk_rope_head_dim), ("v_head_dim", v_head_dim)):
        check.positive(name, value)
    if context is None:
        context = seq
    check.nonnegative("context", context)
    h, A, R, C = hidden, heads, q_lora_rank, kv_lora_rank
    n, r, v = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    query = (h * R + R * A * (n + r)) if _nonzero(R) else h * A * (n + r)
    shared = query + h * (C + r) + A * v * h
    tokens = batch * seq
    if absorbed:
        projections = 2 * tokens * (shared + A * n * C + A * C * v)
        core = 2 * tokens * context * A * (2 * C + r)
    else:
        projections = 2 * tokens * (shared + C * A * (n + v))
        core = 2 * tokens * context * A * (n + r + v)
    return {"projections": projections, "core": core, "total": projections + core}


def _nonzero(x):
    return bool(x) if isinstance(x, numbers.Number) else True


def moe_flops(tokens, hidden, experts, experts_per_token, expert_ffn_hidden, shared_experts=0,
              shared_ffn_hidden=None, gated=True, shared_gate=False):
    """Forward FLOP of one mixture-of-experts MLP over ``tokens`` tokens (chapter 18), a dict:

    - ``router``: the gating GEMM, tokens × hidden × experts, 2·T·h·E (every token is scored
      against every expert, whichever it then visits);
    - ``routed``: each token through ``experts_per_token`` experts of width f:
      2·T·k·m·h·f, with m = 3 matrices for a gated (SwiGLU) MLP, 2 otherwise;
    - ``shared``: each token through every shared expert of width ``shared_ffn_hidden``
      (default f), 2·T·s·m·h·f_s, plus 2·T·h for a shared-expert gate (Qwen2-MoE);
    - ``total``: their sum.

    It assumes every token reaches its k experts (top-k without dropping): capacity limits
    drop some, padding to a capacity adds idle rows (chapter 18). The backward pass is twice
    each term. Softmax, top-k and the weighting by router scores are not matmuls.
    """
    check.nonnegative("tokens", tokens)
    check.positive("hidden", hidden)
    check.positive("experts", experts)
    check.positive("experts_per_token", experts_per_token)
    check.positive("expert_ffn_hidden", expert_ffn_hidden)
    check.nonnegative("shared_experts", shared_experts)
    if shared_ffn_hidden is None:
        shared_ffn_hidden = expert_ffn_hidden
    check.positive("shared_ffn_hidden", shared_ffn_hidden)
    if isinstance(experts_per_token, numbers.Real) and isinstance(experts, numbers.Real) \
            and experts_per_token > experts:
        raise ValueError(f"experts_per_token ({experts_per_token}) must be <= experts ({experts})")
    m = 3 if gated else 2
    router = 2 * tokens * hidden * experts
    routed = 2 * tokens * experts_per_token * m * hidden * expert_ffn_hidden
    shared = 2 * tokens * shared_experts * m * hidden * shared_ffn_hidden
    if shared_gate:
        shared = shared + 2 * tokens * hidden
    return {"router": router, "routed": routed, "shared": shared, "total": router + routed + shared}


def _get(cfg, name, default):
    value = getattr(cfg, name, default)
    return default if value is None else value


def _mlp_weights(hidden, ffn, gated):
    return (3 if gated else 2) * hidden * ffn


def _attention_weights(cfg):
    """Matmul weights of one attention block (no biases, no latent norms)."""
    h, heads = cfg.hidden, cfg.heads
    if _get(cfg, "kv_lora_rank", 0):  # multi-head latent attention (DeepSeek-V2/V3)
        # the explicit form's projections, per token: mla_attention_flops / (2 B S)
        return mla_attention_flops(1, 1, h, heads, cfg.q_lora_rank, cfg.kv_lora_rank,
                                   cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
                                   cfg.v_head_dim)["projections"] // 2
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    kv_heads = getattr(cfg, "kv_heads", None) or heads
    return h * head_dim * (2 * heads + 2 * kv_heads)  # q and o, k and v


def _block_weights(cfg, moe):
    """Matmul weights per token of one block: attention plus a dense MLP or an MoE MLP."""
    hidden = cfg.hidden
    gated = cfg.mlp in ("swiglu", "geglu")  # gate, up, down: 3 matrices
    if not moe:
        return _attention_weights(cfg) + _mlp_weights(hidden, cfg.ffn_hidden, gated)
    expert_ffn = _get(cfg, "expert_ffn_hidden", cfg.ffn_hidden)
    mlp = moe_flops(1, hidden, cfg.experts, cfg.experts_per_token, expert_ffn,
                    _get(cfg, "shared_experts", 0),
                    _get(cfg, "shared_expert_ffn_hidden", expert_ffn), gated,
                    _get(cfg, "shared_expert_gate", False))["total"] // 2
    return _attention_weights(cfg) + mlp


def matmul_params(cfg):
    """Weights a token is multiplied by in matmuls, per token (chapter 01).

    Counts the attention projections (query, key, value, output; or MLA's low-rank ones, in
    the explicit form training uses), the MLP (or, in an MoE block, the router, the shared
    experts with their gate and the ``experts_per_token`` routed experts a token visits: the
    weights of :func:`moe_flops`) and the LM head, which is a matmul whether or not it is tied
    to the embedding. Leaves out what Ψ holds but no matmul uses: the embedding lookup,
    learned positions, norms and biases (a bias is an addition, not a product). Computed from
    the config's fields (a :class:`dtbook.models.TransformerConfig`), not from its parameter
    count; multi-token-prediction modules are not included.
    """
    experts = _get(cfg, "experts", 0)
    dense_layers = _get(cfg, "dense_layers", 0) if experts else cfg.layers
    total = dense_layers * _block_weights(cfg, False)
    if experts:
        total += (cfg.layers - dense_layers) * _block_weights(cfg, True)
    return total + cfg.hidden * cfg.vocab


def _layer_windows(cfg):
    """(window, number of blocks) pairs: None for full attention."""
    window, every, layers = _get(cfg, "sliding_window", 0), _get(cfg, "global_every", 0), cfg.layers
    if not window:
        return [(None, layers)]
    full = layers // every if every else 0
    return [(w, n) for w, n in ((window, layers - full), (None, full)) if n]


def transformer_matmul_flops(cfg, batch, seq):
    """Exact matmul FLOP of one training step of a decoder transformer on ``batch`` sequences
    of ``seq`` tokens, as a dict (chapter 01).

    - ``"linear_forward"``: 2 · matmul_params(cfg) · B · S (MLA in its explicit form, MoE
      blocks as :func:`moe_flops`: router, shared experts, the visited routed experts)
    - ``"attention_forward"``: QKᵀ and A·V over the full S × S scores, 4·B·S²·d_head·heads·L
      (see :func:`attention_flops`); a sliding-window block (``cfg.sliding_window``) counts
      the band of keys within w − 1 either side, S(2m − 1) − m(m − 1) pairs, m = min(S, w),
      which is S² when S ≤ w and grows as S·w, not S², beyond
    - ``"attention_forward_causal"``: the pairs a causal kernel computes, S(S + 1)/2 per
      head (with a window, m(m + 1)/2 + (S − m)·w): what FlashAttention runs, to the element
    - ``"forward"``: linear + attention; ``"backward"``: twice the forward (every matmul Y = XW
      needs dX and dW, each as large as the forward product); ``"total"``: forward + backward.

    This is what ``torch.utils.flop_counter.FlopCounterMode`` reports for
    :class:`dtbook.nn.TinyTransformer`, which runs attention as explicit matmuls, provided
    every matmul input needs a gradient (a trainable embedding sees to that). In an MoE
    model it assumes each token visits exactly ``experts_per_token`` routed experts, as a
    top-k router without token dropping does. The gap to the rule of thumb is
    6ΨBS − total = 6·B·S·(Ψ − matmul_params) − 3·attention_forward.
    """
    check.nonnegative("batch", batch)
    check.nonnegative("seq", seq)
    head_dim, value_dim = _head_dims(cfg)
    linear = FORWARD_PER_PARAM_TOKEN * matmul_params(cfg) * batch * seq
    attention = causal = 0
    for window, count in _layer_windows(cfg):
        attention += attention_flops(batch, seq, cfg.heads, head_dim, count, value_dim, window)
        causal += attention_flops(batch, seq, cfg.heads, head_dim, count, value_dim, window, True)
    forward = linear + attention
    backward = 2 * forward
    return {
        "linear_forward": linear,
        "attention_forward": attention,
        "forward": forward,
        "backward": backward,
        "total": forward + backward,
        "attention_forward_causal": causal,
    }


def layer_matmul_flops(cfg, index, batch, seq):
    """Matmul FLOP of block ``index`` (0-based) for one training step on ``batch`` sequences
    of ``seq`` tokens: the same keys as :func:`transformer_matmul_flops`, for that block alone
    (its attention window, dense or MoE MLP). What a pipeline stage holding blocks i..j
    computes, with :func:`lm_head_matmul_flops` on the last stage; the blocks and the head sum
    to :func:`transformer_matmul_flops` exactly. (Chapters 01 and 24.)"""
    check.nonnegative("batch", batch)
    check.nonnegative("seq", seq)
    if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < cfg.layers:
        raise ValueError(f"index must be a block number in 0..{cfg.layers - 1}, got {index!r}")
    experts = _get(cfg, "experts", 0)
    moe = bool(experts) and index >= _get(cfg, "dense_layers", 0)
    linear = FORWARD_PER_PARAM_TOKEN * _block_weights(cfg, moe) * batch * seq
    window, every = _get(cfg, "sliding_window", 0) or None, _get(cfg, "global_every", 0)
    if window and every and index % every == every - 1:
        window = None
    head_dim, value_dim = _head_dims(cfg)
    attention = attention_flops(batch, seq, cfg.heads, head_dim, 1, value_dim, window)
    causal = attention_flops(batch, seq, cfg.heads, head_dim, 1, value_dim, window, True)
    return _step(linear, attention, causal)


def block_gemms(cfg, index):
    """The weight GEMMs of block ``index`` (0-based) at their real shapes, as a list of dicts
    ``name``, ``in_features``, ``out_features``, ``count`` (how many such matrices) and
    ``token_share`` (the fraction of the block's tokens each one multiplies: 1, or k/E for
    a routed expert when routing is balanced). Per token the block's matmul weights are
    Σ count · token_share · in · out, which :func:`layer_matmul_flops` counts. (Chapters 01,
    18; what a GEMM-time model needs: MLA's low-rank projections, the experts' narrow GEMMs.)

    Attention: ``q``, ``k``, ``v``, ``o``; or MLA's ``q_down``, ``q_up`` (``q`` when
    ``q_lora_rank`` is 0), ``kv_down`` (the latent and the shared rope key), ``kv_up``, ``o``.
    MLP: ``gate``, ``up``, ``down`` (``up``, ``down`` for GELU); in an MoE block ``router``,
    ``expert_gate``, ``expert_up``, ``expert_down``, ``shared_gate``/``shared_up``/
    ``shared_down`` and ``shared_expert_gate``. The output head (hidden × vocab) is not in a
    block: see :func:`lm_head_matmul_flops`.
    """
    if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < cfg.layers:
        raise ValueError(f"index must be a block number in 0..{cfg.layers - 1}, got {index!r}")
    h, heads = cfg.hidden, cfg.heads
    out = []

    def add(name, fan_in, fan_out, count=1, share=1):
        out.append({"name": name, "in_features": fan_in, "out_features": fan_out,
                    "count": count, "token_share": share})

    if _get(cfg, "kv_lora_rank", 0):
        R, C = cfg.q_lora_rank, cfg.kv_lora_rank
        n, r, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        if R:
            add("q_down", h, R)
            add("q_up", R, heads * (n + r))
        else:
            add("q", h, heads * (n + r))
        add("kv_down", h, C + r)
        add("kv_up", C, heads * (n + v))
        add("o", heads * v, h)
    else:
        hd = getattr(cfg, "head_dim", None) or h // heads
        kv = getattr(cfg, "kv_heads", None) or heads
        for name, fan_in, fan_out in (("q", h, heads * hd), ("k", h, kv * hd), ("v", h, kv * hd),
                                      ("o", heads * hd, h)):
            add(name, fan_in, fan_out)
    gated = cfg.mlp in ("swiglu", "geglu")

    def mlp(prefix, width, count, share):
        for name, fan_in, fan_out in ((("gate", h, width),) if gated else ()) + (
                ("up", h, width), ("down", width, h)):
            add(prefix + name, fan_in, fan_out, count, share)

    experts = _get(cfg, "experts", 0)
    if experts and index >= _get(cfg, "dense_layers", 0):
        add("router", h, experts)
        mlp("expert_", _get(cfg, "expert_ffn_hidden", cfg.ffn_hidden), experts,
            fractions.Fraction(cfg.experts_per_token, experts))
        shared = _get(cfg, "shared_experts", 0)
        if shared:
            width = _get(cfg, "shared_expert_ffn_hidden", None) or _get(
                cfg, "expert_ffn_hidden", cfg.ffn_hidden)
            mlp("shared_", width, shared, 1)
            if _get(cfg, "shared_expert_gate", False):
                add("shared_expert_gate", h, 1)
    else:
        mlp("", cfg.ffn_hidden, 1, 1)
    return out


def lm_head_matmul_flops(cfg, batch, seq):
    """Matmul FLOP of the output head (hidden × vocab, tied or not) for one training step,
    forward, backward and total: the last pipeline stage's extra work. (Chapters 01, 24.)"""
    check.nonnegative("batch", batch)
    check.nonnegative("seq", seq)
    return _step(FORWARD_PER_PARAM_TOKEN * cfg.hidden * cfg.vocab * batch * seq, 0, 0)


def _head_dims(cfg):
    if _get(cfg, "kv_lora_rank", 0):
        return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden // cfg.heads
    return head_dim, head_dim


def _step(linear, attention, causal):
    forward = linear + attention
    return {"linear_forward": linear, "attention_forward": attention, "forward": forward,
            "backward": 2 * forward, "total": 3 * forward, "attention_forward_causal": causal}


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
