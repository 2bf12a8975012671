"""Exercises for chapter 18, Expert Parallelism from Sparsity."""

import numpy as np

from dtbook import models, moe
from dtbook.exercises import exercise
from dtbook.parallel.moe import coordinates
from dtbook.units import ms

SKEW = [0.5] + [0.5 / 7] * 7          # half the tokens to expert 0, the rest spread evenly


@exercise(
    "18.1",
    prompt=("Eight GPUs hold one expert each; every GPU routes 1024 tokens of hidden size "
            "4096 in bf16, top-1, evenly over the eight experts. How many bytes does each "
            "GPU send to other GPUs in the dispatch all-to-all, and in dispatch plus "
            "combine? Answer as a pair."),
    unit=("MB", "MB"),
    hint="A share (P − 1)/P of the k·T·H·s buffer leaves the GPU; the combine sends the "
         "same amount back.",
    book_answer=(7.34, 14.68),
)
def _():
    n = moe.alltoall_bytes(1024, 4096, 1, 2)
    return 7 * n / 8, moe.layer_alltoall_bytes(1024, 4096, 8, 1, 2, backward=False)


@exercise(
    "18.2",
    prompt=("The same eight GPUs, but the router sends half of every GPU's 1024 tokens to "
            "expert 0 (on GPU 0) and spreads the other half evenly over experts 1 to 7. In "
            "the dispatch, how many bytes does GPU 0 send to others, how many does any "
            "other GPU send, and how many does GPU 0 receive? Answer as a triple."),
    unit=("MB", "MB", "MB"),
    hint="Build the 8×8 matrix of tokens from GPU i to GPU j; drop its diagonal; rows are "
         "what a GPU sends, columns what it receives.",
    book_answer=(4.19, 7.78, 29.4),
)
def _():
    sent = moe.dispatch_sent_bytes(SKEW, 1024, 4096, 8, 1, 2)
    received = moe.dispatch_received_bytes(SKEW, 1024, 4096, 8, 1, 2)
    return float(sent[0]), float(sent[1]), float(received[0])


@exercise(
    "18.3",
    prompt=("A batch of 64 tokens is routed top-2 over 8 experts, each token to 2 distinct "
            "experts chosen uniformly. In the normal approximation of one expert's load, "
            "what capacity factor keeps the probability that the expert overflows at 1%?"),
    unit="",
    hint="The load is Binomial(T, k/E): μ = 16, σ = √(T·(k/E)(1 − k/E)). Put C at μ + 2.33σ "
         "and divide by μ.",
    book_answer=1.45,
    book_note=("The original edition takes σ ≈ 3.1 for the load of one expert and finds "
               "C ≈ 23.2 slots, a capacity factor of about 1.45 (rounded up to 1.5). The "
               "load of one expert is Binomial(64, 2/8): σ = √(64 · 1/4 · 3/4) = √12 ≈ "
               "3.46, so C ≈ 16 + 2.33 · 3.46 ≈ 24.1 and the factor is 1.50; the rounded "
               "1.5 is right, the 1.45 is not."),
)
def _():
    return moe.capacity_factor_for_overflow(64, 8, 2, 0.01)


@exercise(
    "18.4",
    prompt=("Two experts; the router sends 60% of the tokens to expert 1 and 40% to expert "
            "2, and its mean probabilities are the same, p = (0.6, 0.4). For the balance "
            "loss αE·Σfᵢpᵢ, what is f̄ = Σfᵢpᵢ, and what is pⱼ(fⱼ − f̄) for expert 1 (the "
            "gradient with respect to its logit, up to the factor αE/T)? Answer as a pair."),
    unit=("", ""),
    hint="∂pᵢ/∂zⱼ = pᵢ(δᵢⱼ − pⱼ) for one token; f does not depend on z.",
    book_answer=(0.52, 0.048),
)
def _():
    return 0.6 * 0.6 + 0.4 * 0.4, float(moe.aux_gradient_direction([0.6, 0.4], [0.6, 0.4])[0])


@exercise(
    "18.5",
    prompt=("An MoE layer's dispatch all-to-all can run while the attention of another "
            "micro-batch computes. Attention takes 5 ms and the all-to-all 10 ms. What "
            "share of the all-to-all is hidden, and how many milliseconds stay exposed? "
            "Answer as a pair."),
    unit=("%", "ms"),
    hint="Hidden share min(1, T_attn/T_A2A); the rest of the all-to-all is exposed.",
    book_answer=(50, 5),
)
def _():
    f = moe.overlap_fraction(5 * ms, 10 * ms)
    return f, (1 - f) * 10 * ms


@exercise(
    "18.6",
    prompt=("64 GPUs run TP = 4 inside EP = 8 inside DP = 2, with rank = dp·(TP·EP) + "
            "ep·TP + tp. What are rank 13's coordinates (tp, ep, dp)? Answer as a triple."),
    unit=("", "", ""),
    hint="tp = rank mod 4, ep = ⌊rank/4⌋ mod 8, dp = ⌊rank/32⌋.",
    book_answer=(1, 3, 0),
)
def _():
    return coordinates(13, 4, 8)


@exercise(
    "18.7",
    prompt=("Expert choice with 8 experts and k = 2: every expert takes the C = kT/E tokens "
            "it scores highest. If the scores are independent and random, what share of the "
            "tokens does no expert take?"),
    unit="%",
    hint="Each expert takes a random C-subset of the T tokens; a token escapes one expert "
         "with probability 1 − C/T = 1 − k/E, and all E independently.",
)
def _():
    return moe.expert_choice_skip_fraction(8, 2)


@exercise(
    "18.8",
    prompt=("A router sends half its tokens to one of 8 experts and spreads the rest evenly. "
            "What are the load's normalised entropy, its Gini coefficient and its busiest "
            "expert's load over the mean? Answer as a triple."),
    unit=("", "", ""),
    hint="Entropy of the shares over ln 8; Gini Σᵢⱼ|lᵢ − lⱼ|/(2E·Σl); 0.5 against 1/8.",
)
def _():
    return moe.normalized_entropy(SKEW), moe.gini(SKEW), moe.max_mean_ratio(SKEW)


@exercise(
    "18.9",
    prompt=("Mixtral 8x7B (dtbook.models) routes each token to 2 of its 8 experts in each "
            "of 32 layers. How many parameters does it have, and how many does one token "
            "pass through (embeddings included)? Answer as a pair of plain numbers (4.2e10)."),
    unit=("", ""),
    hint="Only the experts are sparse: attention, norms, embeddings and head are always "
         "used; 6 of the 8 experts of every layer are not.",
)
def _():
    cfg = models.get("mixtral-8x7b")
    return cfg.num_params(), cfg.num_active_params()
