"""Exercises for chapter 27, Configuration Search."""

from itertools import product

import sympy as sp

from dtbook import activations, memory, pipeline_parallel
from dtbook.exercises import exercise


def _triples(gpus, tp_values=None, pp_values=None):
    """(TP, PP, DP) power-of-two triples with TP·PP·DP = gpus, counted by enumeration."""
    powers = [2 ** k for k in range(gpus.bit_length()) if gpus % 2 ** k == 0]
    tps = powers if tp_values is None else [t for t in powers if t in tp_values]
    pps = powers if pp_values is None else [p for p in powers if p in pp_values]
    return [(t, p, gpus // (t * p)) for t, p in product(tps, pps) if gpus % (t * p) == 0]


def _ga_for_bubble(pp, bubble):
    """The micro-batch count m at which (p − 1)/(m + p − 1) equals ``bubble``, rounded up."""
    m = sp.Symbol("m", positive=True)
    exact = sp.solve(sp.Eq(pipeline_parallel.bubble_fraction(pp, m), bubble), m)[0]
    return int(sp.ceiling(exact))


@exercise(
    "27.1",
    prompt=("512 GPUs; PP and TP each take a value in {1, 2, 4, 8} and DP takes the rest, "
            "TP·PP·DP = 512. How many (TP, PP, DP) configurations are there?"),
    hint="DP = 512/(TP·PP) is a whole number for every pair, so count the pairs.",
    book_answer=16,
)
def _():
    return len(_triples(512, {1, 2, 4, 8}, {1, 2, 4, 8}))


@exercise(
    "27.2",
    prompt=("A 30 × 10⁹-parameter model (L = 40, H = 7168) trains with TP = 4, PP = 4, "
            "DP = 16 and ZeRO-1, mixed-precision Adam (bf16 parameters and gradients, 12 bytes "
            "of fp32 master weights and moments per parameter). How many bytes of bf16 "
            "parameters, bf16 gradients and optimizer state (master + moments) does each GPU "
            "hold? Answer as a triple in GB."),
    unit=("GB", "GB", "GB"),
    hint="Each GPU holds Ψ/(TP·PP) parameters; ZeRO-1 shards only the 12 bytes of optimizer "
         "state, over DP.",
    book_answer=(3.75, 3.75, 1.41),
)
def _():
    parts = memory.zero_state_breakdown(30e9 / (4 * 4), 16, 1)
    return parts["params"], parts["grads"], parts["master"] + parts["optimizer"]


@exercise(
    "27.3",
    prompt=("A search space holds 10,000 configurations. Three filters run in turn: the "
            "first removes 80 %, the second half of what is left, the third 30 % of what "
            "then remains. How many configurations survive?"),
    hint="Survivors = N · Π(pass rates); the pass rates are 0.2, 0.5 and 0.7.",
    book_answer=700,
)
def _():
    survivors = 10_000
    for removed in (0.8, 0.5, 0.3):
        survivors *= 1 - removed
    return survivors


@exercise(
    "27.4",
    prompt=("Each trial run of a configuration takes 6 minutes on 64 GPUs rented at 4 dollars "
            "per GPU-hour. A grid search needs 1000 trials, a Bayesian search 50. How many hours "
            "of wall-clock and how many dollars does the Bayesian search save? Answer as a "
            "pair (hours, dollars)."),
    unit=("h", "$"),
    hint="Hours = trials × 0.1 h; dollars = hours × 64 GPUs × 4 dollars.",
    book_answer=(95, "$24,320"),
)
def _():
    hours = (1000 - 50) * 6 / 60
    return hours * 3600, hours * 64 * 4


@exercise(
    "27.5",
    prompt=("A 13 × 10⁹-parameter model (40 layers, H = 5120, 40 heads) on 64 GPUs as "
            "TP = 4, PP = 4, DP = 4, mixed-precision Adam (16 bytes per parameter). What are "
            "the model-state bytes per GPU without ZeRO, the same with ZeRO-1, and the "
            "activation bytes per layer for micro-batch 8 × 4096 tokens with sequence "
            "parallelism and selective recompute (34·s·b·h/TP)? Answer as a triple in GB."),
    unit=("GB", "GB", "GB"),
    hint="Per GPU Ψ/(TP·PP) parameters: 16 bytes each without ZeRO, 4 + 12/DP with ZeRO-1.",
    book_answer=(13.0, 5.7, 1.43),
)
def _():
    psi = 13e9 / (4 * 4)
    act = activations.layer_activation_bytes(8, 4096, 5120, 40, tp=4, sequence_parallel=True,
                                             recompute="selective")
    return memory.zero_state_bytes(psi, 4, 0), memory.zero_state_bytes(psi, 4, 1), act


@exercise(
    "27.6",
    prompt=("Pipeline bubble (p − 1)/(m + p − 1). (a) What is the bubble of PP = 4 with 16 "
            "micro-batches, and (b) of PP = 8 with 32? (c) From how many micro-batches on does "
            "PP = 8 have a bubble no larger than (a)? Answer as a triple (%, %, count)."),
    unit=("%", "%", ""),
    hint="Setting (p₂ − 1)/(m₂ + p₂ − 1) = (p₁ − 1)/(m₁ + p₁ − 1) gives "
         "m₂ = (p₂ − 1)(m₁ + p₁ − 1)/(p₁ − 1) − (p₂ − 1); round up.",
    book_answer=(15.8, 17.9, 38),
)
def _():
    a = pipeline_parallel.bubble_fraction(4, 16)
    b = pipeline_parallel.bubble_fraction(8, 32)
    m = sp.Symbol("m", positive=True)
    target = pipeline_parallel.bubble_fraction(4, sp.Integer(16))   # (a), exactly
    even = sp.solve(sp.Eq(pipeline_parallel.bubble_fraction(8, m), target), m)[0]
    return a, b, int(sp.ceiling(even))


@exercise(
    "27.7",
    prompt=("How many micro-batches per step keep the 1F1B bubble at or below 5 % with "
            "PP = 4, PP = 8 and PP = 16? Answer as a triple of counts."),
    unit=("", "", ""),
    hint="Solve (p − 1)/(m + p − 1) = b for m: m = (p − 1)(1 − b)/b.",
    book_answer=(57, 133, 285),
)
def _():
    return tuple(_ga_for_bubble(pp, sp.Rational(5, 100)) for pp in (4, 8, 16))


@exercise(
    "27.8",
    prompt=("1024 GPUs, no limit on TP or PP: how many (TP, PP, DP) triples of powers of two "
            "have TP·PP·DP = 1024?"),
    hint="With N = 2ᵏ, choose exponents a + b + c = k: stars and bars.",
    book_answer=50,
    book_note=("The original edition lets DP run to 1024, PP to 32 and TP to 8 and puts the "
               "(DP, PP, TP) combinations for 1024 GPUs at about 50. Under those caps there "
               "are 4 × 6 = 24 (each of the 4 TP and 6 PP values leaves a power-of-two DP); "
               "with no cap, the exponents a + b + c = 10 of N = 2¹⁰ have C(12, 2) = 66 "
               "solutions. Neither is about 50."),
)
def _():
    return len(_triples(1024))
