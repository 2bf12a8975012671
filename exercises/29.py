"""Exercises for chapter 29, Asynchrony and Local SGD."""

import math

from dtbook import data_parallel as dp
from dtbook import local_sgd as ls
from dtbook.exercises import exercise
from dtbook.units import ms


@exercise(
    "29.1",
    prompt=("A synchronous job has 1000 workers whose step compute times are independent and "
            "exponential with the same mean. How many times the mean does the slowest worker "
            "take, on average?"),
    unit="",
    hint="The maximum of P exponentials has expectation H_P times the mean; H_P ≈ ln P + 0.577.",
)
def _():
    return ls.expected_max_exponential(1000, 1.0)


@exercise(
    "29.2",
    prompt=("Asynchronous SGD with 16 workers of equal speed; each worker reads the weights "
            "again as soon as its gradient is applied. In steady state, what is the mean "
            "staleness τ of an applied gradient, and by what factor does the correction "
            "η/(1 + cτ) with c = 0.5 scale the learning rate at that τ? Answer as a pair."),
    unit=("", ""),
    hint="Each worker has one gradient in flight at all times, so every push is seen by "
         "the in-flight gradients of all the other workers.",
    book_answer=(7.5, 0.21),
    book_note=("The original edition takes the mean staleness to be (P − 1)/2 = 7.5 and the "
               "factor 1/4.75 ≈ 0.21. (P − 1)/2 is the mean of the first round only, when "
               "every worker starts from the same weights and the pushes are 0, 1, ..., P − 1 "
               "versions old. From then on each worker always has one gradient in flight, "
               "every push lands inside the in-flight interval of the P − 1 other workers, "
               "and the mean staleness is P − 1 = 15, whatever the speeds (chapter 29 "
               "measures it on a parameter server); the factor is 1/8.5 ≈ 0.12."),
)
def _():
    tau = ls.staleness_mean(16)
    return tau, ls.stale_lr(1.0, tau, 0.5)


@exercise(
    "29.3",
    prompt=("Local SGD: a step computes in T_c = 100 ms, a parameter all-reduce takes "
            "T_comm = 50 ms, and the replicas' drift costs κ = λγ = 1 ms of extra training "
            "time per step for each step of the sync interval H (a penalty λ = 1000 on a "
            "drift γ = 0.001 ms per step). H is a whole number of steps: which H minimises "
            "C(H) = T_c + T_comm/H + κH, and what is C there? Answer as a pair."),
    unit=("", "ms"),
    hint="Set dC/dH = −T_comm/H² + κ to zero for the real optimum √(T_comm/κ), then compare C "
         "at the whole numbers on either side of it.",
)
def _():
    best = ls.optimal_interval(50 * ms, 1 * ms)  # the real optimum, √50 = 7.07
    h = min((math.floor(best), math.ceil(best)),
            key=lambda n: ls.sync_interval_cost(n, 100 * ms, 50 * ms, 1 * ms))
    return float(h), float(ls.sync_interval_cost(h, 100 * ms, 50 * ms, 1 * ms))


@exercise(
    "29.4",
    prompt=("Same step (T_c = 100 ms, T_comm = 50 ms), but now the drift penalty is a "
            "fraction γ = 0.001 of a step's compute per unit of H: κ = γ·T_c. What is H*?"),
    unit="",
    hint="κ = 0.001 × 100 ms = 0.1 ms; H* = √(T_comm/κ).",
)
def _():
    return float(ls.optimal_interval(50 * ms, 0.001 * 100 * ms))


@exercise(
    "29.5",
    prompt=("DiLoCo on 8 workers syncs a 150 × 10⁶-parameter model every H = 500 inner "
            "steps, all-reducing an fp32 pseudo-gradient over a ring. How many bytes does "
            "each worker send per inner step, and how many times fewer than data "
            "parallelism's all-reduce of fp32 gradients every step? Answer as a pair (MB, "
            "factor)."),
    unit=("MB", ""),
    hint="A ring all-reduce sends 2(P − 1)/P · n per rank; divide by H.",
)
def _():
    per_step = ls.sync_sent_bytes_per_step(150e6, 8, 500, 4)
    return per_step, dp.gradient_bytes_sent(150e6, 8, grad_bytes=4) / per_step


@exercise(
    "29.6",
    prompt=("64 workers with exponential compute times of mean 100 ms and a 20 ms gradient "
            "all-reduce. What is the expected time of a synchronous step, and how much "
            "of it is waiting for the slowest worker beyond the mean? Answer as a pair."),
    unit=("ms", "ms"),
    hint="E[max] = H_64 · 100 ms; the step adds the all-reduce.",
)
def _():
    step = ls.expected_max_exponential(64, 100 * ms) + 20 * ms
    return step, step - 20 * ms - 100 * ms
