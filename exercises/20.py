"""Exercises for chapter 20, ZeRO: Zero Redundancy Optimizer."""

from dtbook import memory, zero
from dtbook.exercises import exercise
from dtbook.units import ms

B = 1e9  # a billion parameters


@exercise(
    "20.1",
    prompt=("A 13B-parameter model trains with mixed-precision Adam (16 bytes of model state "
            "per parameter). How many bytes of model state does each GPU hold with plain "
            "data parallelism, with ZeRO-2 on 8 GPUs, and with ZeRO-3 on 32 GPUs? Answer as "
            "a triple."),
    unit=("GB", "GB", "GB"),
    hint="Stage 2 shards gradients, master weights and moments (14 of the 16 bytes) and "
         "keeps the bf16 parameters (2 bytes) whole; stage 3 shards all 16.",
    book_answer=("208 GB", "48.75 GB", "6.5 GB"),
)
def _():
    return (memory.zero_state_bytes(13 * B, 1, 0), memory.zero_state_bytes(13 * B, 8, 2),
            memory.zero_state_bytes(13 * B, 32, 3))


@exercise(
    "20.2",
    prompt=("By what factor do ZeRO-1 and ZeRO-2 cut the model state per GPU against plain "
            "data parallelism on 8 GPUs (mixed-precision Adam)? Answer as a pair."),
    unit=("", ""),
    hint="ρ = 16Ψ over the stage's bytes per device; Ψ cancels.",
    book_answer=(2.9, 4.3),
)
def _():
    return zero.memory_reduction(8, 1), zero.memory_reduction(8, 2)


@exercise(
    "20.3",
    prompt=("A 7B-parameter model, mixed-precision Adam, 64 GPUs: how many bytes of model "
            "state per GPU under ZeRO-1 and under ZeRO-2? Answer as a pair."),
    unit=("GB", "GB"),
    hint="ZeRO-1: 4Ψ + 12Ψ/P; ZeRO-2: 2Ψ + 14Ψ/P.",
    book_answer=("30.6 GB", "17.1 GB"),
    book_note=("The original edition's table gives 30.6 GB (ZeRO-1) and 17.1 GB (ZeRO-2) at 64 "
               "GPUs. Its own formulas give 28 + 84/64 = 29.3 GB and 14 + 98/64 = 15.5 GB; its "
               "4- and 8-GPU columns agree with the formulas (the 256-GPU ones within 0.1 GB), "
               "so the 64-GPU column is a slip."),
)
def _():
    return memory.zero_state_bytes(7 * B, 64, 1), memory.zero_state_bytes(7 * B, 64, 2)


@exercise(
    "20.4",
    prompt=("A 7B model with bf16 parameters and gradients on 8 GPUs, ring collectives: how "
            "many bytes does each GPU send per step under plain data parallelism, ZeRO-2 and "
            "ZeRO-3? Answer as a triple."),
    unit=("GB", "GB", "GB"),
    hint="A ring reduce-scatter or all-gather of n bytes sends (P − 1)/P · n per rank; "
         "DP's all-reduce is one of each; ZeRO-3 gathers the parameters twice.",
)
def _():
    return tuple(zero.step_comm_bytes(7 * B, 8, s) for s in (0, 2, 3))


@exercise(
    "20.5",
    prompt=("ZeRO-3 on 64 GPUs, ring collectives with α = 10 μs and β = 100 GB/s (an all-gather "
            "or a reduce-scatter of n bytes over P ranks takes (P − 1)·α + (P − 1)/P · n/β), "
            "150 TFLOP/s per GPU, sequences of 2,048 tokens, bf16 parameters. How many "
            "sequences per GPU must a step process for the (not overlapped) communication to "
            "cost 5% of the compute, for a 13B model of 40 layers and a 70B model of 80 layers? "
            "Give each batch unrounded (the whole batch is the next integer up); answer as a "
            "pair."),
    unit=("", ""),
    hint="Per layer two all-gathers and a reduce-scatter of Ψ/L parameters; compute is "
         "6Ψ·B·S/F. The bandwidth term's ratio is (P − 1)/P · F/(β·B·S): Ψ cancels; the "
         "latency term 3L(P − 1)α does not.",
    book_answer=(8, 2),
    book_note=("The original edition's table gives a minimum batch of 8 sequences for 13B and "
               "2 for 70B at S = 2048. In its own formula the bandwidth term, 6Ψ/β against "
               "6Ψ·B·S/F, does not depend on Ψ: every model needs about F/(β·S·0.05) = 14.6 "
               "sequences (it finds 15 for 7B). The ring's (P − 1)/P and latency 3L(P − 1)α "
               "make it 15.8 for 13B and 14.9 for 70B: 16 and 15 sequences, not 8 and 2."),
)
def _():
    args = (64, 2048, 10e-6, 100e9, 150e12)
    return (float(zero.batch_for_overhead(13 * B, 40, *args)),
            float(zero.batch_for_overhead(70 * B, 80, *args)))


@exercise(
    "20.6",
    prompt=("A hybrid layout on 64 GPUs: ZeRO-3 for the large modules (6B parameters), ZeRO-2 "
            "for the small ones (1B), mixed-precision Adam, bf16 parameters and gradients, "
            "ring collectives. Model-state bytes per GPU, and bytes each GPU sends per step? "
            "Answer as a pair."),
    unit=("GB", "GB"),
    hint="Add the two stages' memory and their traffic: ZeRO-3 sends 6(P − 1)/P bytes per "
         "parameter, ZeRO-2 4(P − 1)/P (a reduce-scatter and an all-gather).",
    book_answer=("3.72 GB", "38 GB"),
    book_note=("The original edition counts the hybrid's traffic as 6Ψ_L + 2Ψ_S (38 GB here): "
               "for the ZeRO-2 part it keeps the reduce-scatter of the gradients (2Ψ_S) and "
               "forgets the all-gather of the updated parameters, another 2Ψ_S. With both, and "
               "the ring's (P − 1)/P, the traffic is (6Ψ_L + 4Ψ_S)(P − 1)/P = 39.4 GB here."),
)
def _():
    mem = memory.zero_state_bytes(6 * B, 64, 3) + memory.zero_state_bytes(1 * B, 64, 2)
    sent = zero.step_comm_bytes(6 * B, 64, 3) + zero.step_comm_bytes(1 * B, 64, 2)
    return mem, sent


@exercise(
    "20.7",
    prompt=("Each layer's all-gather moves 400 MB, and each layer computes for 10 ms. At "
            "100 GB/s, how many layers ahead must a gather be issued (k* = ⌈T_g/T_c⌉)? At "
            "25 GB/s? And at 25 GB/s, with gathers sharing one link one at a time, how long "
            "does each layer take in steady state, whatever the lookahead? Answer as a "
            "triple."),
    unit=("", "", "ms"),
    hint="A gather takes n/β. On one link the gathers queue: the link must move 400 MB per "
         "layer, whatever the lookahead.",
    book_answer=(1, 2, "10 ms"),
    book_note=("The original edition's table gives a lookahead of k = 2 at 25 GB/s, where a 16 "
               "ms gather meets 10 ms of compute, as the lookahead that fully hides "
               "communication: each layer would then take its 10 ms of compute. That needs two "
               "gathers in flight each at the full 25 GB/s; on one link they share it, the link "
               "must still move 400 MB per layer, and every layer takes max(T_g, T_c) = 16 ms "
               "for any k ≥ 1. Lookahead hides latency, not a shortage of bandwidth."),
)
def _():
    tc = 10 * ms
    fast, slow = 400e6 / 100e9, 400e6 / 25e9
    per_layer = (zero.prefetch_step_time(101, tc, slow, 2, link="serial")
                 - zero.prefetch_step_time(100, tc, slow, 2, link="serial"))
    return zero.prefetch_lookahead(fast, tc), zero.prefetch_lookahead(slow, tc), per_layer
