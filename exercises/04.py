"""Exercises for chapter 04, The α-β model."""

import sympy as sp

from dtbook import comm, hardware
from dtbook.exercises import exercise
from dtbook.units import GB, MB, us

# The original edition's InfiniBand figures for its worked examples (chapter 04, exercises 1, 2).
IB_ALPHA, IB_BETA = 2 * us, 50 * GB


@exercise(
    "04.1",
    prompt=("A ring all-reduce of a 10 GB gradient over 256 GPUs on InfiniBand with "
            "α = 2 µs and β = 50 GB/s per direction: how long does it take?"),
    unit="ms",
    hint="2(P − 1) latency terms, and 2(P − 1)/P of the buffer crosses each link.",
    book_answer="399 ms",
)
def _():
    return comm.allreduce_time(10 * GB, 256, IB_ALPHA, IB_BETA)


@exercise(
    "04.2",
    prompt=("1000 gradient tensors of 1 MB each on 64 GPUs (α = 2 µs, β = 50 GB/s). How long "
            "do (a) 1000 separate ring all-reduces take, and (b) one all-reduce of the 1 GB "
            "bucket? Answer as a pair (a, b)."),
    unit=("ms", "ms"),
    hint="Each all-reduce pays 2(P − 1)α whatever its size; the bandwidth term only "
         "depends on the total bytes.",
    book_answer=("291.4 ms", "39.7 ms"),
)
def _():
    separate = 1000 * comm.allreduce_time(1 * MB, 64, IB_ALPHA, IB_BETA)
    bucket = comm.allreduce_time(1000 * MB, 64, IB_ALPHA, IB_BETA)
    return separate, bucket


@exercise(
    "04.3",
    prompt=("In the previous exercise, how many times faster is the bucket than the 1000 "
            "separate all-reduces?"),
    unit="",
    hint="Divide the two times; the difference is 999 latency terms of 2(P − 1)α each.",
    book_answer=7.3,
)
def _():
    separate = 1000 * comm.allreduce_time(1 * MB, 64, IB_ALPHA, IB_BETA)
    bucket = comm.allreduce_time(1000 * MB, 64, IB_ALPHA, IB_BETA)
    return separate / bucket


def _crossover(link: str) -> float:
    spec = hardware.get(link)
    return comm.crossover_bytes(spec.alpha, spec.beta)


@exercise(
    "04.4",
    prompt=("Using the book's link catalog (dtbook.hardware), what is the crossover size "
            "n* = αβ of an NVLink 4.0 link (\"nvlink4\"), with β per direction?"),
    unit="KB",
    hint="n* = αβ, with β the bandwidth in one direction, not the two directions added.",
    book_answer="900 KB",
    book_note=("The original edition takes β = 900 GB/s for NVLink 4.0 and calls it per direction. "
               "900 GB/s is the two directions added (18 links × 50 GB/s, 25 GB/s each way "
               "per link); one direction carries 450 GB/s, which halves n*."),
)
def _():
    return _crossover("nvlink4")


@exercise(
    "04.5",
    prompt=("How many times larger is the NVLink 4.0 crossover than the InfiniBand NDR400 "
            "crossover (\"ib-ndr400\"), both from dtbook.hardware with β per direction?"),
    unit="",
    hint="Divide the two αβ products.",
    book_answer=9,
    book_note=("The original edition's 9× compares 900 GB/s NVLink (both directions added) with 50 GB/s "
               "InfiniBand (one direction). Per direction on both links NVLink's β is 450 GB/s, "
               "and the ratio halves."),
)
def _():
    return _crossover("nvlink4") / _crossover("ib-ndr400")


@exercise(
    "04.6",
    prompt=("An n-byte message is cut into k equal chunks and pipelined over a chain of h "
            "store-and-forward links, costing (k + h − 1)(α + n/(kβ)). Which k minimises the "
            "time? Give an expression in n, h, alpha, beta."),
    kind="expr",
    symbols="n h alpha beta",
    hint="Differentiate with respect to k and set the derivative to zero; only the terms "
         "kα and (h − 1)n/(kβ) depend on k.",
)
def _():
    n, h = sp.symbols("n h", positive=True)
    alpha, beta = sp.symbols("alpha beta", positive=True)
    return comm.optimal_chunks(n, alpha, beta, h)


@exercise(
    "04.7",
    prompt=("A ring all-reduce over P = 64 GPUs on InfiniBand (α = 2 µs, β = 50 GB/s): at what "
            "buffer size n are its latency term and its bandwidth term equal?"),
    unit="MB",
    hint="Set 2(P − 1)α equal to 2(P − 1)/P · n/β and solve for n: it is P times the "
         "point-to-point crossover.",
)
def _():
    n, P, a, b = sp.symbols("n P alpha beta", positive=True)
    latency = comm.allreduce_time(0, P, a, b)
    bandwidth = comm.allreduce_time(n, P, 0, b)
    (root,) = sp.solve(sp.Eq(latency, bandwidth), n)
    return float(root.subs({P: 64, a: IB_ALPHA, b: IB_BETA}))
