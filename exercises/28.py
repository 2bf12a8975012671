"""Exercises for chapter 28, Gradient Compression."""

import math

import numpy as np

from dtbook import comm, compression as cz
from dtbook.exercises import exercise
from dtbook.units import GB, ms


@exercise(
    "28.1",
    prompt=("QSGD quantises a gradient of d = 10⁶ entries to s = 16 levels. By how much can "
            "its variance E‖Q_s(g) − g‖² exceed ‖g‖², at most? Give the bound as a multiple "
            "of ‖g‖² (take the smaller of the two bounds derived in the chapter)."),
    unit="",
    hint="Per entry p(1 − p)/s² ≤ min(1/4, p)/s², and the p_i add up to at most s√d: "
         "min(d/(4s²), √d/s).",
)
def _():
    return cz.qsgd_variance_bound(1e6, 16)


@exercise(
    "28.2",
    prompt=("A worker sends the top 1 % of a d-entry gradient, each kept value as fp16 (2 "
            "bytes) with its int32 index (4 bytes). How many times smaller is the message "
            "than the dense fp16 gradient?"),
    unit="",
    hint="d·2 bytes against 0.01·d·(2 + 4) bytes: the indices cost twice what the values do.",
)
def _():
    return cz.sparse_factor(1e9, 0.01 * 1e9, value_bytes=2, index_bytes=4, dense_bytes=2)


@exercise(
    "28.3",
    prompt=("Deep Gradient Compression (Lin et al., 2018) sends gradients at 99.9 % sparsity. "
            "With fp32 values and int32 indices, how many times smaller than the dense fp32 "
            "gradient is each worker's message?"),
    unit="",
    hint="99.9 % sparsity keeps one entry in a thousand; each kept entry costs 4 + 4 bytes "
         "against 4 bytes per entry of the dense gradient.",
    book_answer=100,
    book_note=("The original edition lists DGC's 99.9 % sparsity as 100× compression. Keeping "
               "1 entry in 1000 is 1000× before the indices; with an int32 index beside each "
               "fp32 value it is 500×."),
)
def _():
    return cz.sparse_factor(1e9, 1e-3 * 1e9, value_bytes=4, index_bytes=4, dense_bytes=4)


@exercise(
    "28.4",
    prompt=("PowerSGD compresses a 4096 × 4096 gradient matrix to rank-r factors P (4096 × r) "
            "and Q (4096 × r). What is the largest rank that still compresses it at least "
            "100×?"),
    unit="",
    hint="r(m + n) ≤ mn/100, so r ≤ mn/(100(m + n)); round down.",
    book_answer=20,
)
def _():
    return math.floor(cz.lowrank_rank(4096, 4096, 100))


@exercise(
    "28.5",
    prompt=("A 4096 × 4096 gradient has singular values σ_i ∝ i^(−0.7). What is the smallest "
            "relative error ‖G − G_r‖_F/‖G‖_F that any rank-20 approximation can reach?"),
    unit="",
    hint="Eckart–Young: the best rank-r error is √(Σ_{i>r} σ_i²); divide by √(Σ σ_i²). "
         "σ_i² ∝ i^(−1.4) decays slowly, so the tail holds a lot of the energy.",
    book_answer=0.10,
    book_note=("The original edition expects a relative error of about 10 % for rank 20 "
               "with σ_i ∝ i^(−0.7). Summing the spectrum gives about 47 %: σ_i² ∝ i^(−1.4) "
               "falls off too slowly for 20 of 4096 directions to hold 99 % of the energy. "
               "Low rank works on real gradients because their spectra fall much faster, "
               "and because error feedback carries the rest to the next step."),
)
def _():
    sigma = np.arange(1, 4097) ** -0.7
    return cz.eckart_young_error(sigma, 20) / float(np.sqrt(np.sum(sigma**2)))


@exercise(
    "28.6",
    prompt=("64 nodes, each with one 100 Gb/s Ethernet port, train a 10⁹-parameter model "
            "data-parallel with fp16 gradients; a step computes for 100 ms. Each node "
            "all-reduces the full gradient over one ring of the 64 nodes (ignore latency). "
            "How long does the all-reduce take, and by what factor must compression shrink "
            "it to fit inside the 100 ms of compute? Answer as a pair (time, factor)."),
    unit=("ms", ""),
    hint="2(P − 1)/P · n/β with n = 2 GB and β = 12.5 GB/s; then divide by 100 ms.",
)
def _():
    t = comm.allreduce_time(2e9, 64, 0, 100e9 / 8)
    return t, t / (100 * ms)


@exercise(
    "28.7",
    prompt=("A sparse all-reduce all-gathers every rank's top 1 % (fp16 values, int32 "
            "indices); the dense alternative is a ring all-reduce of the fp16 gradient. "
            "Counting bandwidth only, from how many ranks on (the smallest whole number P) "
            "does the all-gather move more bytes per rank than the dense ring?"),
    unit="",
    hint="All-gather: (P − 1)/P · P·k·6 bytes; ring all-reduce: 2(P − 1)/P · 2d bytes. "
         "Set them equal with k = d/100, then take the first whole P above the crossing.",
)
def _():
    d, k = 1e9, 1e7
    crossing = 2 * 2 * d / cz.sparse_message_bytes(k, 2, 4)  # 66.7 ranks: equal bytes
    return math.floor(crossing) + 1  # the first P with strictly more


@exercise(
    "28.8",
    prompt=("On 64 ranks, a compressor shrinks the all-reduce 100× and processes gradient "
            "bytes at 10 GB/s. Below which link bandwidth β does compressing save time? "
            "Compare it with 100 Gb/s Ethernet and with NVLink 4.0 (450 GB/s per direction)."),
    unit="GB/s",
    hint="Saving 2(P − 1)/P · n/β · (1 − 1/c) must beat n/R: β* = 2(P − 1)/P · (1 − 1/c) · R.",
)
def _():
    return cz.breakeven_beta(64, 100, 10 * GB)
