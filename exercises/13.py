"""Exercises for chapter 13, The Collective Cost Model."""

from dtbook import comm
from dtbook.exercises import exercise
from dtbook.units import GB, MB, ms, us


@exercise(
    "13.1",
    prompt=("Sixteen ranks, α = 10 µs, β = 100 GB/s. How long does a ring all-reduce of a "
            "100 MB buffer take, and how long a ring all-gather with a 100 MB output? "
            "Answer as a pair."),
    unit=("ms", "ms"),
    hint="All-reduce: 2(P − 1)α + 2(P − 1)/P · n/β. The all-gather is one of its two halves.",
    book_answer=("2.175 ms", "1.09 ms"),
)
def _():
    return (comm.allreduce_time(100 * MB, 16, 10 * us, 100 * GB),
            comm.allgather_time(100 * MB, 16, 10 * us, 100 * GB))


@exercise(
    "13.2",
    prompt=("The same sixteen ranks and 100 MB, but the all-reduce runs hierarchically as 4 "
            "groups of 4: a ring reduce-scatter inside each group, a ring all-reduce of the "
            "25 MB blocks between groups, a ring all-gather inside each group, every link "
            "with α = 10 µs and β = 100 GB/s. How long does it take?"),
    unit="ms",
    hint="(G − 1)α + (G − 1)/G · n/β for each intra-group phase, and a ring all-reduce of "
         "n/G bytes over the N groups.",
    book_answer="1.995 ms",
)
def _():
    return comm.allreduce_time(100 * MB, 16, 10 * us, 100 * GB, "hierarchical", inner=4)


@exercise(
    "13.3",
    prompt=("An all-reduce of 1 GB across 8 GPUs takes 80 ms, each GPU on a 400 Gb/s link. "
            "What are its algorithm bandwidth, its bus bandwidth, and its bus bandwidth as "
            "a percentage of the link's bandwidth? Answer as a triple (a fraction such as "
            "0.5 is read as 50%)."),
    unit=("GB/s", "GB/s", "%"),
    hint="algbw = n/t; busbw = algbw × 2(P − 1)/P; 400 Gb/s is 50 GB/s.",
    book_answer=("12.5 GB/s", "21.875 GB/s", 43.75),
)
def _():
    n, t, p = 1 * GB, 80 * ms, 8
    busbw = comm.bus_bandwidth(n, t, p, "allreduce")
    return (comm.algorithm_bandwidth(n, t), busbw, busbw / (400e9 / 8))


@exercise(
    "13.4",
    prompt=("For 64 ranks with α = 1 µs and β = 100 GB/s, below what buffer size is a "
            "binomial-tree all-reduce, 2 log2 P (α + n/β), faster than a ring all-reduce?"),
    unit="MB",
    hint="Set the two times equal and solve for n: both are linear in n.",
    book_answer="1.14 MB",
)
def _():
    return comm.algorithm_crossover(64, 1 * us, 100 * GB, "tree", "ring")


def _step_comm(grad_bytes, tp_layers, tp_microbatches):
    act, microbatches = 64 * MB, 8  # the original edition's round 64 MB, decimal
    tp = 4 * tp_layers * tp_microbatches * comm.allreduce_time(act, 8, 1 * us, 300 * GB)
    dp = comm.allreduce_time(grad_bytes, 8, 5 * us, 50 * GB)
    pp = 2 * microbatches * comm.p2p_time(act, 5 * us, 50 * GB)
    return tp + dp + pp


@exercise(
    "13.5",
    prompt=("A 70e9-parameter model (bf16 gradients) trains with TP = 8 (NVLink: α = 1 µs, "
            "β = 300 GB/s), PP = 8 and DP = 8 (network: α = 5 µs, β = 50 GB/s), 80 layers, "
            "8 micro-batches per step and activation messages of 64 MB = 64·10⁶ bytes (the "
            "original edition's round figure; the chapter's Llama 2 example computes S·H·2 = "
            "64 MiB, and this exercise keeps the decimal 64 MB). Per step, each GPU does "
            "4 ring all-reduces of the activation per layer of its stage per micro-batch "
            "(TP), one ring all-reduce of its gradient shard over DP, and one send forward "
            "plus one backward per micro-batch (PP). What is the total communication time "
            "per step?"),
    unit="ms",
    hint="Each GPU holds 1/(TP·PP) of the gradient, and its stage has 80/PP layers.",
    book_answer="757 ms",
    book_note=("The original edition totals 757 ms. It all-reduces 140 GB / 8 = 17.5 GB per GPU, "
               "but with TP = 8 and "
               "PP = 8 each GPU holds 140 GB / 64; it also counts 80 layers of TP "
               "all-reduces for one micro-batch instead of 10 layers for each of 8 "
               "(the same count here, by coincidence)."),
)
def _():
    return _step_comm(2 * 70e9 / 64, tp_layers=10, tp_microbatches=8)


@exercise(
    "13.6",
    prompt=("A step has 2000 ms of compute and 600 ms of communication, and 80 % of the "
            "communication is hidden behind compute (the step costs T_comp + (1 − f) T_comm). "
            "How long is the step, and what is the speedup over running them one after the "
            "other? Answer as a pair."),
    unit=("ms", ""),
    hint="Only the unhidden 20 % of the communication adds to the compute.",
    book_answer=("2120 ms", 1.23),
)
def _():
    comp, comm_t, f = 2000 * ms, 600 * ms, 0.8
    step = comp + (1 - f) * comm_t
    return (step, (comp + comm_t) / step)


@exercise(
    "13.7",
    prompt=("If a reduce-scatter were a ring, what ratio of its time to the time of a ring "
            "all-reduce of the same buffer would the α-β model predict for large buffers?"),
    unit="",
    hint="Compare the bandwidth terms of the two rows of the cost table.",
)
def _():
    n, p = 1e12, 4
    return (comm.reduce_scatter_time(n, p, 0, 1.0) / comm.allreduce_time(n, p, 0, 1.0))
