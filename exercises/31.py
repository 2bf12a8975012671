"""Exercises for chapter 31, Overlapping Communication with Computation."""

from dtbook import data_parallel, overlap, zero
from dtbook.exercises import exercise
from dtbook.units import GB, MB, ms, us


@exercise(
    "31.1",
    prompt=("A backward pass of 10 layers takes 5 ms per layer, and all-reducing one layer's "
            "gradients takes 3 ms. Gradients go in buckets of 2 layers, each bucket's "
            "all-reduce starting as soon as its last gradient exists, one all-reduce at a "
            "time. How long do backward plus all-reduce take (a) one after the other and "
            "(b) overlapped? Answer as a pair."),
    unit=("ms", "ms"),
    hint="Five buckets of t_c = 10 ms and t_m = 6 ms: with t_m < t_c only the last bucket's "
         "all-reduce is exposed, n·t_c + t_m.",
    book_answer=("80 ms", "56 ms"),
)
def _():
    buckets, t_c, t_m = 5, 2 * 5 * ms, 2 * 3 * ms
    serial = buckets * (t_c + t_m)
    return serial, data_parallel.overlapped_step_time(buckets * t_c, buckets * t_m, buckets)


@exercise(
    "31.2",
    prompt=("Gradients are all-reduced over a 100 Gb/s link whose every call costs 100 µs of "
            "latency. What is the smallest bucket whose call spends at least 90 % of its time "
            "moving bytes?"),
    unit="MB",
    hint="Efficiency B/(αβ + B) ≥ 0.9 gives B ≥ 9αβ; 100 Gb/s is 12.5 GB/s.",
    book_answer="11.25 MB",
)
def _():
    return overlap.bucket_for_efficiency(0.9, 100 * us, 100e9 / 8)


@exercise(
    "31.3",
    prompt=("The same link (100 Gb/s, 100 µs per call) carries 1 GB of gradients per step. "
            "How long does the gradient communication take in buckets of (a) 1 MB, "
            "(b) 25 MB and (c) 100 MB? Answer as a triple."),
    unit=("ms", "ms", "ms"),
    hint="G·α/B + G/β: the bytes cost 80 ms whatever the bucket; the latency is paid once "
         "per bucket.",
    book_answer=("180 ms", "84 ms", "81 ms"),
)
def _():
    return tuple(overlap.bucketed_comm_time(1 * GB, b, 100 * us, 100e9 / 8)
                 for b in (1 * MB, 25 * MB, 100 * MB))


@exercise(
    "31.4",
    prompt=("ZeRO-3 all-gathers each layer's parameters in 2 ms before computing with it. How "
            "many layers ahead must the gather be issued when a layer computes for "
            "(a) 8 ms, (b) 1 ms, (c) 0.5 ms? Answer as a triple of whole numbers."),
    unit=("", "", ""),
    hint="k·T_c ≥ T_g: k = ⌈T_g/T_c⌉.",
    book_answer=(1, 2, 4),
)
def _():
    return tuple(zero.prefetch_lookahead(2 * ms, t) for t in (8 * ms, 1 * ms, 0.5 * ms))


@exercise(
    "31.5",
    prompt=("A step has 80 ms of compute and 120 ms of communication and takes 140 ms. What "
            "share of the shorter activity ran hidden, and what share of the communication? "
            "Answer as a pair of fractions."),
    unit=("", ""),
    hint="60 ms were saved: divide by min(T_c, T_m), then by T_m.",
    book_answer=(0.75, 0.5),
)
def _():
    return (overlap.overlap_achieved(80 * ms, 120 * ms, 140 * ms, of="min"),
            overlap.overlap_achieved(80 * ms, 120 * ms, 140 * ms, of="comm"))


@exercise(
    "31.6",
    prompt=("Communication takes twice as long as compute. What speed-up over running them one "
            "after the other does (a) 50 % overlap give, and (b) perfect overlap? Answer as a "
            "pair."),
    unit=("", ""),
    hint="(T_c + T_m)/(T_c + T_m − a·min(T_c, T_m)) with T_c = 1, T_m = 2.",
    book_answer=(1.2, 1.5),
)
def _():
    return overlap.overlap_speedup(1.0, 2.0, 0.5), overlap.perfect_overlap_speedup(1.0, 2.0)


@exercise(
    "31.7",
    prompt=("A 70 × 10⁹-parameter model with 24 equal layers keeps bf16 parameters, sharded "
            "by ZeRO-3, and prefetches one layer ahead. How much memory does the prefetched "
            "layer hold on each GPU?"),
    unit="GB",
    hint="k·(model bytes)/L with k = 1, model bytes = 2Ψ.",
    book_answer="5.8 GB",
)
def _():
    return overlap.prefetch_buffer_bytes(1, 2 * 70e9, 24)
