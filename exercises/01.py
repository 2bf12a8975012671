"""Exercises for chapter 01, The Scale Imperative.

Peak compute is the catalog's dense BF16 figure for an H100 SXM, 989.4 TFLOP/s (NVIDIA's
Hopper whitepaper). The original edition writes "~989 TFLOP/s"; its printed answers (1965 days,
3.18e8 s) match 989.4 to the digit, and 989 would move the fourth digit only (1966 days),
well inside the 1% tolerance.
"""


from dtbook import flops, hardware, memory, models, symbolic
from dtbook.exercises import exercise
from dtbook.units import GB, TFLOP, fmt_bytes

H100 = hardware.get("h100-sxm")
F = H100.peak("bf16")
_F = f"{F / TFLOP:g} TFLOP/s"


@exercise(
    "01.1",
    prompt=("How much memory does the model state of a 13B-parameter model take when it is "
            "trained with Adam in mixed precision (bf16 parameters and gradients, fp32 master "
            "weights and moments)? Answer in GB (decimal, 10^9 bytes)."),
    unit="GB",
    hint="2 + 2 + 4 + 4 + 4 bytes per parameter: working copy, gradient, master copy, m, v.",
    book_answer="208 GB",
)
def _():
    return memory.model_state_bytes(13e9)


@exercise(
    "01.2",
    prompt=(f"How many H100s ({fmt_bytes(H100.hbm_bytes, binary=True)} each) does it take, at the very "
            "least, just to hold that 13B model's state?"),
    unit="",
    hint="Divide the state by one GPU's memory and round up: a GPU is not divisible.",
    book_answer=3,
)
def _():
    return memory.min_devices(memory.model_state_bytes(13e9), H100.hbm_bytes)


@exercise(
    "01.3",
    prompt=(f"A 7B-parameter model is trained on 2 trillion tokens on a single H100 ({_F} "
            "dense BF16) at 50% of peak. How many days does training take?"),
    unit="days",
    hint="T = 6ΨD / (F η).",
    book_answer="1965 days",
)
def _():
    return flops.training_time(7e9, 2e12, F, mfu=0.5)


@exercise(
    "01.4",
    prompt=("A $10M training run reaches 35% MFU where 50% is achievable. How many dollars of "
            "its budget are lost to the gap?"),
    unit="$",
    hint="The same work at 50% would cost 35/50 of the bill; the rest is waste.",
    book_answer="$3M",
)
def _():
    return flops.mfu_waste(0.35, 0.5) * 10e6


@exercise(
    "01.5",
    prompt=("Keeping that $10M budget, how much more training (in tokens) would raising MFU "
            "from 35% to 50% buy? Answer in percent."),
    unit="%",
    hint="Tokens per dollar are proportional to MFU.",
    book_answer="43%",
)
def _():
    return flops.mfu_gain(0.35, 0.5)


@exercise(
    "01.6",
    prompt=("Write the time to train a model of Psi parameters on D tokens with P devices of "
            "peak F FLOP/s each, running at MFU eta, as an expression in Psi, D, F, eta and P."),
    kind="expr",
    symbols="Psi D F eta P",
    hint="The work is 6ΨD FLOP; the devices together deliver P·F·η FLOP per second.",
)
def _():
    return flops.training_time(symbolic.params, symbolic.tokens, symbolic.peak_flops,
                               symbolic.mfu, symbolic.world)


@exercise(
    "01.7",
    prompt=("Llama 2 7B (Ψ from dtbook.models.get('llama2-7b').num_params()) trains at "
            f"80,000 tokens/s on 8 H100s ({_F} each). What is its MFU? Answer in percent."),
    unit="%",
    hint="MFU = 6Ψ · (tokens/s) / (P F).",
)
def _():
    return flops.mfu(80_000, models.get("llama2-7b").num_params(), F, devices=8)


@exercise(
    "01.8",
    prompt=("6ΨD leaves out the attention-score matmuls QKᵀ and A·V. For Llama 3 70B "
            "(dtbook.models.get('llama3-70b')) trained on sequences of 8192 tokens, with the "
            "full S × S score matrix computed, what share of the step's matmul FLOPs do they "
            "take? Count as matmul FLOPs the score matmuls plus 2 FLOP per token for every "
            "weight of a matrix multiplication, the output head included and the embedding "
            "table left out (a lookup is no matmul). Answer in percent."),
    unit="%",
    hint="Per layer and sequence, QKᵀ and A·V each cost 2·S²·d_head·heads FLOP forward; the "
         "linear layers cost 2 FLOP per matmul weight per token. The backward triples both.",
)
def _():
    count = flops.transformer_matmul_flops(models.get("llama3-70b"), 1, 8192)
    return count["attention_forward"] / count["forward"]
