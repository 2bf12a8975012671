"""Exercises for chapter 09, Phase Transitions in Scaling."""

import math

from dtbook import flops, scaling
from dtbook.exercises import exercise
from dtbook.scaling import CHINCHILLA


@exercise(
    "09.1",
    prompt=("A 10B model's training loss goes from 2.1 to 2.0 while its validation loss stays "
            "at 2.3 when the training data grows from 200B to 500B tokens. Which regime is it "
            "in: 'capacity-limited', 'data-limited', 'optimizer-noise-limited' or "
            "'compute-optimal'?"),
    kind="choice",
    choices=("capacity-limited", "data-limited", "optimizer-noise-limited", "compute-optimal"),
    hint="More data did not move the loss that matters. What is left to limit it?",
    book_answer="capacity-limited",
)
def _():
    return "capacity-limited"


@exercise(
    "09.2",
    prompt=("A capability follows P = σ((L_c − L)/τ) with τ = 0.1 nats. It shows up half the "
            "time at 50B parameters and 5% of the time at 10B. How far is the 10B model's loss "
            "from the threshold, L_c − L(10B), in nats?"),
    unit="",
    hint="At 50% the model sits at the threshold; invert the sigmoid at p = 0.05.",
    book_answer=-0.294,
)
def _():
    return scaling.loss_gap(0.05, 0.1)


@exercise(
    "09.3",
    prompt=("By what factor is the model term A/Ψ^0.34 of a 10B model larger than that of a 50B "
            "model?"),
    unit="",
    rtol=0.005,
    hint="(50B/10B)^0.34.",
    book_answer="1.70",  # as printed: three significant figures
    book_note="5^0.34 = e^(0.34 ln 5) = 1.728; the original edition rounds it to 1.70.",
)
def _():
    return (50e9 / 10e9) ** CHINCHILLA.alpha


@exercise(
    "09.4",
    prompt=("Chain-of-thought reasoning is said to need a 60B model. At 20 tokens per parameter, "
            "(a) what compute does a compute-optimal 60B model take, (b) how many times short "
            "of that is a 1e23 FLOP budget, and (c) how many tokens would a 60B model see on "
            "1e23 FLOP? Answer as (a, b, c)."),
    unit=("", "", ""),
    hint="C = 6Ψ·20Ψ; then divide; then D = C/(6Ψ).",
    book_answer=(4.32e23, 4.3, 278e9),
)
def _():
    need = flops.training_flops(60e9, 20 * 60e9)
    return need, need / 1e23, scaling.tokens_for_compute(1e23, 60e9)


@exercise(
    "09.5",
    prompt=("A model's test loss rises as training goes on while its training loss keeps "
            "falling, and it is near the size at which it can just memorise its training set. "
            "Should you 'train longer' or 'double the model'?"),
    kind="choice",
    choices=("train longer", "double the model"),
    hint="Past the interpolation threshold, test loss falls again with size (double descent).",
    book_answer="double the model",
)
def _():
    return "double the model"


@exercise(
    "09.6",
    prompt=("A power law (2 parameters) leaves a residual sum of squares of 0.040 on 10 points; "
            "a broken power law (4 parameters) leaves 0.010. What is ΔBIC = BIC(single) − "
            "BIC(broken), with the noise estimated from the residuals?"),
    unit="",
    hint="BIC = n ln(RSS/n) + k ln n.",
)
def _():
    return (scaling.information_criterion(0.040, 10, 2)
            - scaling.information_criterion(0.010, 10, 4))


@exercise(
    "09.7",
    prompt=("A task is graded by exact match on a 10-token answer, and each token is right "
            "independently with probability p. What per-token accuracy p gives 50% exact "
            "match?"),
    unit="",
    rtol=0.002,
    hint="Exact match is p^10.",
)
def _():
    return 0.5 ** (1 / 10)


@exercise(
    "09.8",
    prompt=("Under L = 1.69 + 406.4/Ψ^0.34 (infinite data), a capability has threshold "
            "L_c = 2.0 nats and sharpness τ = 0.02 nats. By what factor must the model grow to "
            "take the capability from 10% to 90%?"),
    unit="",
    hint="P = 10% at L = L_c + τ ln 9 and 90% at L_c − τ ln 9; Ψ = (A/(L − E))^(1/α).",
)
def _():
    lo = scaling.emergence_params(2.0 + 0.02 * math.log(9))
    hi = scaling.emergence_params(2.0 - 0.02 * math.log(9))
    return hi / lo
