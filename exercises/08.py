"""Exercises for chapter 08, Chinchilla Optimality.

Losses use Hoffmann et al.'s printed constants (dtbook.scaling.CHINCHILLA) unless a prompt
names the replication's (dtbook.scaling.BESIROGLU).
"""

import math

from dtbook import flops, scaling
from dtbook.exercises import exercise
from dtbook.scaling import BESIROGLU, CHINCHILLA


@exercise(
    "08.1",
    prompt=("With 20 tokens per parameter, what model size and token count spend 1e22 FLOP? "
            "Answer as a pair (Ψ, D)."),
    unit=("", ""),
    hint="C = 6Ψ·20Ψ = 120Ψ².",
    book_answer=(9.1e9, 182e9),
)
def _():
    return scaling.rule_of_thumb(1e22)


@exercise(
    "08.2",
    prompt=("A 30B-parameter model is trained on 150B tokens. What compute C did it use, and "
            "what model size and token count would have been compute-optimal for that C by "
            "the 20:1 rule? Answer as (C, Ψ*, D*)."),
    unit=("", "", ""),
    hint="C = 6ΨD; then Ψ* = √(C/120).",
    book_answer=(2.7e22, 15e9, 300e9),
)
def _():
    c = flops.training_flops(30e9, 150e9)
    return (c, *scaling.rule_of_thumb(c))


@exercise(
    "08.3",
    prompt=("Model X (70B) cost $10M to train and costs $0.001 per million tokens served; model "
            "Y (7B, over-trained to similar quality) cost $15M and costs $0.0001 per million "
            "tokens. After how many served tokens is Y the cheaper of the two?"),
    unit="",
    hint="Solve 10M + 0.001·T/1e6 = 15M + 0.0001·T/1e6 for T.",
    book_answer=5.56e15,
)
def _():
    per_token_x, per_token_y = 0.001 / 1e6, 0.0001 / 1e6
    return (15e6 - 10e6) / (per_token_x - per_token_y)


@exercise(
    "08.4",
    prompt=("Only 500B tokens of data exist. The 20:1 rule says a 25B model. By what percentage "
            "does the loss L(Ψ, D) change if a 50B model is trained on the same 500B tokens "
            "instead (Chinchilla's fitted constants)? Negative for a lower loss."),
    unit="%",
    rtol=0.02,
    hint="Only the model term changes: A/Ψ^α at 50B against 25B, relative to the whole loss.",
    book_answer="+20%",
    book_note=("The original edition says the 50B model has about 20% higher loss. Under the additive law "
               "a larger model never does worse on the same data: the model term falls and the "
               "data term is unchanged, so the loss drops, by about 1%. The 50B model costs "
               "twice the compute, which is the real reason not to train it."),
)
def _():
    l25, l50 = scaling.loss(25e9, 500e9), scaling.loss(50e9, 500e9)
    return (l50 - l25) / l25


@exercise(
    "08.5",
    prompt=("A mixture-of-experts model has 70B active and 1T total parameters. Taking its "
            "effective size as Ψ_eff = Ψ_active·(Ψ_total/Ψ_active)^0.5, what is the ratio of "
            "its model term A/Ψ_eff^0.34 to that of a dense 70B model (a number below 1)?"),
    unit="",
    hint="The ratio is (Ψ_eff/Ψ_active)^−0.34.",
    book_answer=0.69,
    book_note=("Ψ_eff/Ψ_active = (1T/70B)^0.5 = 3.78, and 3.78^−0.34 = 0.636: the model term is "
               "36% lower, not the original edition's 0.69 (31%)."),
)
def _():
    act, total = 70e9, 1e12
    eff = act * (total / act) ** 0.5
    return (eff / act) ** -CHINCHILLA.alpha


@exercise(
    "08.6",
    prompt=("How many times GPT-3's training compute (175B parameters, 300B tokens) did "
            "Chinchilla use (70B parameters, 1.4T tokens)? Use C = 6ΨD."),
    unit="",
    hint="Divide the two 6ΨD.",
    book_answer=0.25,
    book_note=("The original edition says Chinchilla matched GPT-3 with about 4× less compute, yet its own "
               "opening numbers are 5.9e23 against 3.15e23 FLOP: Chinchilla used 1.87 times "
               "as much. It matched Gopher's budget, not a quarter of GPT-3's."),
)
def _():
    return flops.training_flops(70e9, 1.4e12) / flops.training_flops(175e9, 300e9)


@exercise(
    "08.7",
    prompt=("Using Chinchilla's Approach 1 (the power law through the paper's Table 3), what "
            "model size and token count are compute-optimal at 1e21 FLOP? Answer as (Ψ, D)."),
    unit=("", ""),
    rtol=0.02,
    hint="dtbook.scaling.chinchilla_optimal(1e21, 'approach1'); check that 6ΨD = 1e21.",
    book_answer=(19e9, 400e9),
    book_note=("The original edition's 19B parameters and 400B tokens would take 6·19e9·400e9 = 4.6e22 "
               "FLOP, 46 times the budget. Approach 1 gives about 2.9B parameters (the model "
               "the paper itself trains at 1e21 FLOP in its Appendix D.4) on 58B tokens."),
)
def _():
    return scaling.chinchilla_optimal(1e21, "approach1")


@exercise(
    "08.8",
    prompt=("Under the replication's constants (Besiroglu et al. 2024), a lab wants the loss "
            "that the compute-optimal model reaches with 1e23 FLOP, and expects to serve 1e13 "
            "tokens over the model's life (2Ψ FLOP each). What model size minimises training "
            "plus inference compute?"),
    unit="",
    hint="dtbook.scaling.inference_aware_optimal(target_loss, 1e13, BESIROGLU), with the "
         "target from scaling.optimal_loss(1e23, BESIROGLU).",
)
def _():
    target = scaling.optimal_loss(1e23, BESIROGLU)
    psi, d = scaling.inference_aware_optimal(target, 1e13, BESIROGLU)
    assert math.isclose(scaling.loss(psi, d, BESIROGLU), target, rel_tol=1e-9)
    return psi
