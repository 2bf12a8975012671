"""Exercises for chapter 07, The Compute-Loss Surface.

Peak compute is the catalog's dense BF16 figure for an H100 SXM (989.4 TFLOP/s); the loss
constants are Hoffmann et al.'s printed fit (dtbook.scaling.CHINCHILLA).
"""

import math

from dtbook import flops, hardware, scaling
from dtbook.exercises import exercise
from dtbook.scaling import CHINCHILLA

F = hardware.get("h100-sxm").peak("bf16")


@exercise(
    "07.1",
    prompt=("A budget of 1e24 FLOP, spent by the rule of thumb of 20 training tokens per "
            "parameter. How many parameters Ψ* and tokens D*? Answer as a pair (Ψ*, D*)."),
    unit=("", ""),
    hint="6ΨD = C with D = 20Ψ gives C = 120Ψ².",
    book_answer=(91e9, 1.82e12),
)
def _():
    return scaling.rule_of_thumb(1e24)


@exercise(
    "07.2",
    prompt=("With Chinchilla's fitted exponents α = 0.34 (model) and β = 0.28 (data), the "
            "compute-optimal model grows as Ψ* ∝ C^a. What is a?"),
    unit="",
    rtol=0.005,
    hint="At the optimum Ψ^(α+β) ∝ (C/6)^β.",
    book_answer=0.50,
    book_note=("The original edition derives a = β/(α+β) = 0.45 and then states C^0.50 in its table, "
               "its takeaway and chapter 08. 0.50 is what Hoffmann et al.'s Approaches 1 and "
               "2 measured; their printed parametric fit (α = 0.34, β = 0.28) gives 0.452."),
)
def _():
    return scaling.optimal_exponents(CHINCHILLA)[0]


@exercise(
    "07.3",
    prompt=(f"How many days does a 1e24 FLOP training run take on 512 H100s ({F / 1e12:g} "
            "TFLOP/s dense BF16 each) at 45% MFU?"),
    unit="days",
    hint="T = C / (P F η).",
    book_answer="25.4 days",
    book_note=("The original edition writes T = 10²⁴/(512 × 9.89 × 10¹⁴ × 0.45) and then divides"
               " by 4.56 × 10¹⁷, twice that product (2.28 × 10¹⁷ FLOP/s), so it prints 25.4 "
               "days; at 989.4 TFLOP/s and 45% MFU the run takes 50.8 days."),
)
def _():
    psi, d = scaling.rule_of_thumb(1e24)  # any split with 6ΨD = 1e24 takes the same time
    return flops.training_time(psi, d, F, mfu=0.45, devices=512)


@exercise(
    "07.4",
    prompt=("Write the iso-loss curve: the number of tokens D with which a model of Psi "
            "parameters reaches the loss L_0, under L = E + A/Psi^alpha + B/D^beta. An "
            "expression in Psi, A, B, E, alpha, beta and L_0."),
    kind="expr",
    symbols="Psi A B E alpha beta L_0",
    hint="Set the loss equal to L_0 and solve for D: the data term must make up what the "
         "model term and E leave.",
)
def _():
    import sympy as sp
    return scaling.iso_loss_tokens(sp.Symbol("Psi", positive=True), sp.Symbol("L_0", positive=True),
                                   scaling.symbolic_law())


def _double_indifference(psi0, law=CHINCHILLA):
    """Tokens D0 at which doubling Ψ0 and doubling D0 lower the loss equally."""
    model_gain = law.A * (1 - 2**-law.alpha) / psi0**law.alpha
    return (law.B * (1 - 2**-law.beta) / model_gain) ** (1 / law.beta)


@exercise(
    "07.5",
    prompt=("A 1B-parameter model: with how many training tokens D0 does doubling the model "
            "lower the loss exactly as much as doubling the data (Chinchilla's fitted "
            "constants)? With more tokens than D0, doubling the model is the better buy."),
    unit="",
    hint="Doubling Ψ saves A(1 − 2^−α)/Ψ^α; doubling D saves B(1 − 2^−β)/D^β. Set them equal.",
)
def _():
    d0 = _double_indifference(1e9)
    gain_model = scaling.loss(1e9, d0) - scaling.loss(2e9, d0)
    gain_data = scaling.loss(1e9, d0) - scaling.loss(1e9, 2 * d0)
    assert math.isclose(gain_model, gain_data, rel_tol=1e-9)
    return d0


@exercise(
    "07.6",
    prompt=("Llama 2 7B was trained on 2 trillion tokens. Taking 7B parameters and the 20:1 "
            "rule, (a) how many times the compute-optimal number of tokens is that, and (b) "
            "by how many nats does the extra data lower the data term B/D^β (Chinchilla's "
            "constants)? Answer as a pair (a, b)."),
    unit=("", ""),
    hint="D_opt = 20 × 7B. The data term is B/D^β; subtract its value at 2T from its value "
         "at D_opt.",
)
def _():
    d_opt, d = 20 * 7e9, 2e12
    gain = scaling.loss(7e9, d_opt) - scaling.loss(7e9, d)  # only the data term changes
    return d / d_opt, gain


@exercise(
    "07.7",
    prompt=(f"Chinchilla (70B parameters, 1.4T tokens) on 1000 H100s ({F / 1e12:g} TFLOP/s) "
            "at 40% MFU: how many days?"),
    unit="days",
    hint="C = 6ΨD, then T = C / (P F η).",
    book_answer="17.3 days",
)
def _():
    return flops.training_time(70e9, 1.4e12, F, mfu=0.40, devices=1000)

