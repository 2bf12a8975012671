"""Exercises for chapter 36, Case Study: Mistral and Mixtral."""

from dtbook import kv_cache as kv
from dtbook import models, moe, speculative
from dtbook.exercises import exercise

_ADAM_BYTES = 12      # fp32 master weights, momentum and variance: the original's accounting


def _expert_params(cfg):
    """One expert across all layers: L·3·H·F (SwiGLU), from the catalog's shape."""
    return cfg.layers * moe.expert_params(cfg.hidden, cfg.moe_ffn_hidden, 1, matrices=3)


_MX7 = models.get("mixtral-8x7b")
_E7 = _expert_params(_MX7)                         # one expert, all layers: ≈ 5.6B
_SHARED7 = _MX7.num_params() - _MX7.experts * _E7  # attention, router, norms, embeddings
_MX22 = models.get("mixtral-8x22b")
_E22 = _expert_params(_MX22)                       # ≈ 16.9B, not the 22B of the name
_MEM22 = tuple(2 * _E22 / tp + _ADAM_BYTES * _E22 / (tp * dp) for tp, dp in ((4, 2), (8, 1)))


@exercise(
    "36.1",
    prompt=("A 32-layer model with a sliding window in every layer should let the last token "
            "depend on 100,000 positions. A layer's window of w keys reaches w − 1 positions "
            "further back. What is the smallest window that does it, the power of two you "
            "would round it to, and that window's receptive field? Answer as three numbers."),
    unit=("", "", ""),
    hint="After L layers a token reaches L·(w − 1) positions back, plus itself: solve "
         "L·(w − 1) + 1 ≥ C for w (≈ C/L).",
    book_answer=(3125, 4096, 131072),
)
def _():
    w = int(kv.window_for_context(100_000, 32))
    pow2 = 1 << (w - 1).bit_length()
    return w, pow2, kv.receptive_field(32, pow2)


@exercise(
    "36.2",
    prompt=("Heads of width 128, bf16, one sequence of 8,192 tokens: how many bytes does one "
            "layer's KV cache hold with (a) MHA, 32 key-value heads, (b) MQA, one, (c) GQA, "
            "eight? Answer as three sizes in MB."),
    unit=("MB", "MB", "MB"),
    hint="2·g·d_h·2 bytes per token per layer, times S.",
    book_answer=(134, 4.2, 33.5),
)
def _():
    return tuple(kv.cache_bytes(kv.kv_bytes_per_token(g, 128), 8192) for g in (32, 1, 8))


@exercise(
    "36.3",
    prompt=("A mixture of 16 experts routes each token to 2. (a) What share of the expert "
            "parameters does a token use? (b) At the same FLOP budget, how many times the "
            "tokens of a dense model whose FFN is one such expert can the MoE train on "
            "(count the FFN FLOPs only)? (c) With Chinchilla's 20 tokens per parameter applied "
            "to 2.5 × Mixtral 8x7B's active parameters (embeddings included, from the "
            "catalog), how many tokens is that? Answer as three numbers."),
    unit=("", "", ""),
    hint="Per token the MoE runs k experts, each as costly as the dense FFN: 2·k·m·H·F FLOPs "
         "against 2·m·H·F.",
    book_answer=(0.125, 8, 645e9),
    book_note=("The original edition concludes that 12.5 % activation lets the MoE train on "
               "8× more tokens at the same FLOP budget. That holds against a dense model as "
               "large as all 16 experts; against the dense model whose FFN one expert copies, a "
               "top-2 MoE spends twice the FFN FLOPs per token (its own derivation, "
               "F_MoE = k·F_FFN), so it trains on half the tokens, 0.5×. The share (12.5 %) "
               "and 20·12.9B·2.5 ≈ 645B tokens stand. Its 'total params: 8 × 7B + shared = "
               "46.7B' cannot hold (8 × 7B alone is "
               f"{8 * 7}B): one expert's MLPs over the "
               f"{_MX7.layers} layers are {_E7 / 1e9:.1f}B, eight of them {8 * _E7 / 1e9:.1f}B, "
               f"and the shared attention, embeddings and norms {_SHARED7 / 1e9:.1f}B."),
)
def _():
    share = moe.active_expert_params(4096, 14336, 2, 3) / moe.expert_params(4096, 14336, 16, 3)
    dense = moe.expert_flops_per_token(4096, 14336, 1, 3)
    sparse = moe.expert_flops_per_token(4096, 14336, 2, 3)
    return share, dense / sparse, 20 * 2.5 * models.get("mixtral-8x7b").num_active_params()


@exercise(
    "36.4",
    prompt=("Mixtral 8x22B on 64 GPUs, with the original edition's accounting: EP = 8 puts one "
            "expert (all its layers) on each expert-parallel rank, bf16 weights (2 bytes a "
            "parameter) are divided by TP, Adam's states (12 bytes a parameter) by TP·DP, and "
            "nothing else is counted. Take one expert's parameters from the catalog "
            "(L·3·H·F, 56 layers, H = 6144, F = 16384). What is the memory per GPU for "
            "(a) TP = 4, EP = 8, DP = 2 and (b) TP = 8, EP = 8, DP = 1? Answer as a pair in GB."),
    unit=("GB", "GB"),
    hint="An expert is 3·H·F parameters a layer, 56 layers: about 16.9B, not 22B.",
    book_answer=(44, 38.5),
    book_note=("The original edition takes each expert to hold 22B parameters (44 GB in bf16, "
               "264 GB of Adam states) and prints 11 + 33 = 44 GB for TP = 4, DP = 2 and "
               "5.5 + 33 = 38.5 GB for TP = 8, DP = 1. Eight 22B experts would be "
               f"{8 * 22}B, more than the model's {_MX22.num_params() / 1e9:.0f}B: the '22B' of "
               "the name counts the shared attention and embeddings with each expert. One expert "
               f"is {_MX22.layers}·3·{_MX22.hidden}·{_MX22.moe_ffn_hidden} ≈ {_E22 / 1e9:.1f}B "
               f"parameters, so its own accounting gives ≈ {_MEM22[0] / 1e9:.1f} GB and "
               f"≈ {_MEM22[1] / 1e9:.1f} GB (still without gradients, the "
               f"{(_MX22.num_params() - _MX22.experts * _E22) / 1e9:.1f}B shared parameters and "
               "activations, which the planner adds)."),
)
def _():
    return _MEM22


@exercise(
    "36.5",
    prompt=("A draft model is 5× faster than the target (t_draft/t_target = 0.2), proposes "
            "K = 4 tokens a round, and each proposal is accepted with probability 0.7, "
            "independently. How many proposals does a round keep on average, and what is the "
            "speedup over decoding with the target alone? Answer as a pair."),
    unit=("", ""),
    hint="E[kept] = (1 − α^{K+1})/(1 − α) − 1; a round emits E + 1 tokens for one target call "
         "and K draft calls.",
    book_answer=(1.77, 1.54),
)
def _():
    return float(speculative.expected_accepted(0.7, 4)), float(speculative.speedup(0.7, 4, 0.2))


@exercise(
    "36.6",
    prompt=("The same draft (t_draft/t_target = 0.2): tokens per round (kept proposals plus "
            "the target's own) and speedup for (a) α = 0.6, K = 4, (b) α = 0.8, K = 4, "
            "(c) α = 0.7, K = 6. Answer as six numbers: tokens and speedup of (a), of (b), "
            "of (c)."),
    unit=("",) * 6,
    hint="Tokens per round (1 − α^{K+1})/(1 − α); speedup that over 1 + 0.2·K.",
    book_answer=(2.13, 1.18, 3.59, 2.00, 3.02, 1.37),
    book_note=("The original edition's sensitivity table prints 2.13 tokens and 1.18× for "
               "α = 0.6, 3.59 and 2.00× for α = 0.8, and 3.02 and 1.37× for K = 6. Its own "
               "formula, (1 − α^{K+1})/(1 − α) over 1 + 0.2·K, gives 2.31 and 1.28×, 3.36 and "
               "1.87×, 3.06 and 1.39×; only its α = 0.7, K = 4 row (2.77, 1.54×) follows from "
               "it."),
)
def _():
    rows = ((0.6, 4), (0.8, 4), (0.7, 6))
    return tuple(float(f(a, k, 0.2) if f is speculative.speedup else f(a, k))
                 for a, k in rows for f in (speculative.tokens_per_round, speculative.speedup))
