"""Exercises for chapter 14, Data Parallelism from Associativity."""

import numpy as np

from dtbook import data_parallel as dp
from dtbook import hardware
from dtbook.exercises import exercise
from dtbook.parallel.data_parallel import bucket_plan
from dtbook.units import MiB, ms

H100 = hardware.get("h100-sxm")
NVLINK = hardware.get("nvlink4")


@exercise(
    "14.1",
    prompt=("Three ranks hold 2, 3 and 5 examples of a 10-example batch, and each computes "
            "the mean gradient of its own examples: 1.0, 2.0 and 4.0 (one parameter). What "
            "is the gradient of the full batch's mean loss? (A plain average of the three "
            "would give 2.33.)"),
    unit="",
    hint="Weight each rank's mean by its share of the batch, w_i = |B_i|/|B|, and add.",
)
def _():
    sizes, means = np.array([2, 3, 5]), np.array([1.0, 2.0, 4.0])
    return float(np.sum(sizes / sizes.sum() * means))


@exercise(
    "14.2",
    prompt=("A 7B-parameter model trains data-parallel on 8 H100s (989.4 TFLOP/s dense "
            "bf16) joined by NVLink through NVSwitch, 450 GB/s per direction per GPU (the "
            "datasheet's 900 GB/s adds both directions), with bf16 gradients. How many "
            "tokens must each GPU process per step for compute to take twice as long as "
            "the ring all-reduce, in the large-P form R = 3bβ/(F·s) = 2?"),
    unit="",
    hint="b = R·F·s/(3β). The 6Ψb FLOP count counts tokens, so b is tokens, not sequences.",
    book_answer=1465,
    book_note=("The original edition gets b = 1,465 by taking β = 900 GB/s, which is the "
               "sum of NVLink's two directions; a ring through NVSwitch uses one port's "
               "450 GB/s each way, which doubles b to about 2,930. It then reads b as "
               "sequences and converts it to 750K, 3.0M and 6.0M tokens per GPU for "
               "sequence lengths 512, 2,048 and 4,096 (the text also says about 12M). But b "
               "entered the ratio through 6Ψb FLOPs, which counts tokens: b is already "
               "tokens per GPU per step, a handful of sequences, not hundreds."),
)
def _():
    return dp.breakeven_tokens(H100.peak("bf16"), NVLINK.beta, grad_bytes=2, ratio=2)


@exercise(
    "14.3",
    prompt=("A model of 100 equal layers has an 80 ms backward pass, and all-reducing its "
            "gradients takes 100 ms in all. Each layer's gradient is all-reduced as soon as "
            "it is ready, one all-reduce at a time. What share of the communication is "
            "hidden behind the backward pass, and how long do backward and communication "
            "take together? Answer as a pair (fraction, time)."),
    unit=("%", "ms"),
    hint="The first all-reduce starts after one layer's backward (0.8 ms); from then on the "
         "network, the slower of the two, is never idle.",
    book_answer=(79.2, "100.8 ms"),
)
def _():
    return dp.overlap_fraction(80 * ms, 100 * ms, 100), dp.overlapped_step_time(80 * ms, 100 * ms, 100)


@exercise(
    "14.4",
    prompt=("Each rank computes a local batch of 32 in 100 ms, and the gradient all-reduce "
            "takes 40 ms. Four such micro-batches are accumulated before one all-reduce. "
            "How long is the accumulated step, and how much faster is it than all-reducing "
            "after every micro-batch? Answer as a pair (time, speed-up)."),
    unit=("ms", ""),
    hint="A·T_c + T_r against A·(T_c + T_r).",
)
def _():
    return 4 * 100 * ms + 40 * ms, dp.accumulation_speedup(4, 100 * ms, 40 * ms)


@exercise(
    "14.5",
    prompt=("Asynchronous SGD on 16 workers damps a gradient that is τ steps stale by "
            "f(τ) = e^(−0.1τ). Staleness is uniform on 0, 1, ..., 15. What is the weight of "
            "the stalest gradient, and the mean weight? Answer as a pair of fractions of "
            "the learning rate."),
    unit=("", ""),
    hint="The mean of a geometric sequence: (1 − q^16)/(16(1 − q)) with q = e^(−0.1).",
    book_answer=(0.223, 0.525),
)
def _():
    return float(np.exp(-0.1 * 15)), dp.staleness_mean_penalty(15, 0.1)


@exercise(
    "14.6",
    prompt=("Eight ranks all-reduce fp16 gradients of a 1B-parameter model, each element "
            "of magnitude about 1e-4 on every rank (all the same sign), with ε = 1e-3. By "
            "how much can a ring order and a tree order differ, at most, per element, "
            "relative to the element's sum, and over the whole gradient in the L2 norm, if "
            "every element reached its bound? Take Σ|g_i| = |g_sum| = 1e-4 as the "
            "original edition does. Answer as a triple (per element, relative, L2)."),
    unit=("", "%", ""),
    hint="2(P − 1)ε|g| per element; the L2 norm of a billion equal entries is √10⁹ times one.",
    book_answer=(1.4e-6, 1.4, 0.022),
    book_note=("The original edition bounds the difference of two orders by 2(P − 1)ε|g| = "
               "1.4e-6 per element, but its L2 figure, 0.022, is √10⁹ × 7e-7: the bound of "
               "one order, (P − 1)ε|g|, not of the difference. The difference's L2 bound is "
               "√10⁹ × 1.4e-6 ≈ 0.044."),
)
def _():
    per = dp.order_difference_bound(8, 1e-3, 1e-4)
    return per, per / 1e-4, per * np.sqrt(1e9)


@exercise(
    "14.7",
    prompt=("A model's parameters, in the order they are defined, have gradients of 4, 16, "
            "16, 16, 16 and 4 MiB. DDP runs with the default bucket_cap_mb (25 MiB, and a "
            "first bucket of 1 MiB), rebuilt after the first iteration in the order the "
            "gradients arrive: the last layer's first. How many all-reduces does one step "
            "issue, and how large is the largest bucket? Answer as a pair (count, size)."),
    unit=("", "MiB"),
    hint="Walk the tensors from the last; a bucket closes as soon as it holds at least its "
         "limit, so it may overshoot by one tensor.",
)
def _():
    sizes = [s * MiB for s in (4, 16, 16, 16, 16, 4)]
    plan = bucket_plan(sizes, 25 * MiB, first_cap=1 * MiB)
    return len(plan), max(sum(sizes[i] for i in b) for b in plan)
