"""Exercises for chapter 06, Estimation as Discipline.

Activation memory is the Korthikanti et al. count that chapter 06 derives
(``dtbook.activations``: 16-bit activations, 1-byte dropout masks); peak compute is the
catalog's dense BF16 figure for an H100 SXM.
"""

from dtbook import activations, cost, fermi, flops, hardware, memory
from dtbook.exercises import exercise
from dtbook.units import TFLOP, day

H100 = hardware.get("h100-sxm")
F = H100.peak("bf16")
_F = f"{F / TFLOP:g} TFLOP/s"

# The 13B configuration of exercises 06.1 to 06.3.
_13B = dict(batch=8, seq=4096, hidden=5120, heads=40)
_LAYERS, _TP = 40, 4


@exercise(
    "06.1",
    prompt=("A 13B model (L = 40, H = 5120, A = 40) trains on micro-batches of B = 8 sequences "
            "of S = 4096 tokens. How many bytes of activations does one layer keep for "
            "backward (16-bit activations, 1-byte dropout masks, no recomputation), and how "
            "many per GPU under tensor parallelism t = 4 with sequence parallelism? Answer as "
            "a tuple in GB."),
    unit=("GB", "GB"),
    hint="sbh(34 + 5as/h); with TP and SP every term is split t ways.",
    book_answer=("32.5 GB", "8.1 GB"),
)
def _():
    return (activations.layer_activation_bytes(**_13B),
            activations.layer_activation_bytes(**_13B, tp=_TP, sequence_parallel=True))


@exercise(
    "06.2",
    prompt=("Same model and layout, now checkpointing every k = 4 layers, costed the "
            "conservative way, (L/k + k) × one layer's activations per GPU. How many GB of "
            "activations per GPU? And with the model states sharded by ZeRO-3 over 32 GPUs "
            "(16Ψ/32 bytes each), do states plus activations fit in an H100 (80 GiB)? "
            "Answer as a tuple (GB, True/False)."),
    unit=("GB", ""),
    hint="(40/4 + 4) layers' worth of the per-GPU figure of 06.1; then add 16 × 13e9 / 32 bytes.",
    book_answer=("113 GB", False),
)
def _():
    per_gpu_layer = activations.layer_activation_bytes(**_13B, tp=_TP, sequence_parallel=True)
    acts = activations.checkpointed_activation_bytes(_LAYERS, per_gpu_layer, 4)
    static = memory.model_state_bytes(13e9) / 32
    return (acts, bool(acts + static <= H100.hbm_bytes))


@exercise(
    "06.3",
    prompt=("Same again with full recomputation: every layer keeps only its 16-bit input "
            "(2sbh, split t ways by sequence parallelism), and during backward one layer at a "
            "time is recomputed and holds its full activations (per GPU, as in 06.1). How many "
            "GB of activations per GPU at the peak?"),
    unit="GB",
    hint="L × 2sbh/t for the stored inputs, plus one layer's per-GPU activations.",
    book_answer="32 GB",
    book_note=("The original edition prints ~4 × 8.1 = 32 GB for full recomputation (and ~44 GB "
               "in total): four layers of its per-GPU 8.1 GB, as if four layers were recomputed "
               "at once, and no stored inputs. Full recomputation keeps each layer's 16-bit "
               "input and recomputes one layer at a time: the recomputed layer holds 8.1 GB and "
               "the 40 stored inputs 3.4 GB, 11.5 GB per GPU."),
)
def _():
    inputs = activations.model_activation_bytes(_LAYERS, **_13B, tp=_TP, sequence_parallel=True,
                                                recompute="full")
    one_layer = activations.layer_activation_bytes(**_13B, tp=_TP, sequence_parallel=True)
    return inputs + one_layer


@exercise(
    "06.4",
    prompt=(f"A 7B model trains at 150,000 tokens/s on 64 H100s ({_F} dense BF16). What is "
            "its MFU, and how many tokens/s would it reach at 45% MFU? Answer as a tuple "
            "(MFU in %, tokens/s)."),
    unit=("%", ""),
    hint="MFU = 6Ψ · tokens/s / (P F); throughput scales in proportion to MFU.",
    book_answer=("9.95%", 680_000),
)
def _():
    return (flops.mfu(150e3, 7e9, F, 64), flops.tokens_per_second(7e9, F, 0.45, 64))


@exercise(
    "06.5",
    prompt=("You must train a 30B model within 30 days on a $2M budget, renting H100s at $4/h. "
            "How many GPUs can you afford for the whole 30 days? With 640 of them, what MFU "
            "must you reach to train on 2T tokens in that time, and with 512? Answer as a "
            "tuple (GPUs, MFU with 640 in %, MFU with 512 in %)."),
    unit=("", "%", "%"),
    hint="P = budget / (price × hours); MFU = 6ΨD / (P F T).",
    book_answer=(694, "22%", "28%"),
    book_note="The original edition rounds the third figure, 27.4%, up to ~28%.",
)
def _():
    T = 30 * day
    return (cost.devices_for_budget(2e6, 4.0, T), cost.required_mfu(30e9, 2e12, F, 640, T),
            cost.required_mfu(30e9, 2e12, F, 512, T))


@exercise(
    "06.6",
    prompt=("An estimate is the product of three independent factors, each known only to "
            "within a factor of 2 (one standard deviation, log-normal). Within what factor is "
            "the product known (one standard deviation)? And what factor does worst-case "
            "interval arithmetic give? Answer as a tuple."),
    unit=("", ""),
    hint="Errors add in quadrature in log space: exp(√(Σ ln² fᵢ)); the worst case multiplies.",
)
def _():
    return (fermi.combined_factor(2, 2, 2), fermi.worst_case_factor(2, 2, 2))


@exercise(
    "06.7",
    prompt=("Someone sizes a mixed-precision Adam training run by counting only the 16-bit "
            "parameters and gradients, 4 bytes per parameter. By what factor does that "
            "underestimate the model-state memory?"),
    unit="",
    hint="Add the fp32 master copy and Adam's two fp32 moments: 2 + 2 + 4 + 4 + 4 bytes.",
    book_answer=3,
    book_note=("The original edition calls it a 3× underestimate; the full state is 16Ψ against the 4Ψ "
               "counted, 4×. (3× is the missing part, 12Ψ, relative to what was counted.)"),
)
def _():
    parts = memory.model_state_breakdown(1)
    return memory.model_state_bytes(1) / (parts["params"] + parts["grads"])
