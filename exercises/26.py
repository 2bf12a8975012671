"""Exercises for chapter 26, Failures and Checkpointing."""

from dtbook import resilience
from dtbook.exercises import exercise
from dtbook.units import GB, hour


def _root(f, lo, hi, steps=200):
    """Bisection: the x in [lo, hi] where f changes sign (f(lo) and f(hi) differ in sign)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (f(mid) < 0) == (f(lo) < 0) else (lo, mid)
    return (lo + hi) / 2


@exercise(
    "26.1",
    prompt=("A cluster has 4,096 GPUs (MTBF 25,000 h each), 512 hosts (8,000 h) and 32 "
            "switches (100,000 h). What is the system MTBF in hours, and what fraction of the "
            "failures do the GPUs cause? Answer as a pair."),
    unit=("h", ""),
    hint="Add the failure rates nᵢ/MTBFᵢ, then invert; the GPU share is their rate over the sum.",
    book_answer=("4.38 h", 0.72),
)
def _():
    mtbfs, counts = [25_000 * hour, 8_000 * hour, 100_000 * hour], [4096, 512, 32]
    share = resilience.system_failure_rate(mtbfs[0], counts[0]) / resilience.system_failure_rate(mtbfs, counts)
    return resilience.system_mtbf(mtbfs, counts), share


@exercise(
    "26.2",
    prompt=("A job's MTBF is 2 h, a checkpoint costs 30 s and a training step 0.5 s. What is "
            "Young's checkpoint interval in seconds, and how many steps is it? Answer as a pair."),
    unit=("s", ""),
    hint="I* = √(2δ·MTBF).",
    book_answer=("657 s", 1314),
)
def _():
    interval = resilience.young_interval(30, 2 * hour)
    return interval, interval / 0.5


@exercise(
    "26.3",
    prompt=("The same job (MTBF 2 h, 30 s checkpoints): what is the first-order overhead "
            "δ/I + I/(2·MTBF) at Young's interval, at I = 200 s and at I = 2,000 s? Answer as "
            "three fractions."),
    unit=("", "", ""),
    hint="Both terms are equal at the optimum; away from it one of them grows.",
    book_answer=(0.091, 0.164, 0.154),
)
def _():
    lam = 1 / (2 * hour)
    best = resilience.young_interval(30, 2 * hour)
    return tuple(resilience.overhead_factor(i, 30, lam) - 1 for i in (best, 200, 2000))


@exercise(
    "26.4",
    prompt=("Each rank checkpoints 50 GB over PCIe at 32 GB/s to a file system that takes "
            "2 GB/s per rank. How long is training blocked by a synchronous checkpoint, and by "
            "an asynchronous one that only waits for the copy? Answer as a pair."),
    unit=("s", "s"),
    hint="Synchronous: copy and write; asynchronous: copy only.",
    book_answer=("26.56 s", "1.56 s"),
)
def _():
    n = 50 * GB
    return (resilience.sync_checkpoint_time(n, 32 * GB, 2 * GB),
            resilience.async_checkpoint_time(n, 32 * GB))


@exercise(
    "26.5",
    prompt=("With the asynchronous checkpoint of 26.4 (blocking 1.5625 s) and an MTBF of 2 h, "
            "in Young's first-order model (a checkpoint costs only its blocking time, and a "
            "failure loses on average half an interval; a failure during the background write, "
            "which would lose that checkpoint too, is left out): what is Young's interval, and "
            "the total overhead at it (checkpoint time plus expected lost work, as a fraction "
            "of the run)? Answer as a pair."),
    unit=("s", ""),
    hint="At the optimum the overhead is √(2δ/MTBF), half of it writing, half lost work.",
    # the original edition prints I*_async = √(2 × 1.56 × 7200) = 150 s; its 1.0% is the
    # expected lost work alone, and it gives no total, so the second part is not printed
    book_answer=("150 s", None),
)
def _():
    delta = resilience.async_checkpoint_time(50 * GB, 32 * GB)
    return resilience.young_interval(delta, 2 * hour), resilience.overhead_at_optimum(delta, 2 * hour)


@exercise(
    "26.6",
    prompt=("A 100 GB checkpoint, LZ4 compressing 2.5× at 4 GB/s, pipelined with the write. "
            "Below which write bandwidth (GB/s) does compressing win, and at 1.5 GB/s how long "
            "do the plain and the compressed writes take? Answer as three numbers."),
    unit=("GB/s", "s", "s"),
    hint="Compressed time is max(n/B_comp, n/(R·B_write)); compare it with n/B_write.",
    book_answer=("1.6 GB/s", "66.7 s", "26.7 s"),
    book_note=("The original edition puts the crossover at B_comp/R = 1.6 GB/s. Below that "
               "bandwidth the compressed write is limited by the disk, above it by the "
               "compressor, but compressing wins as long as n/B_comp < n/B_write, that is up to "
               "B_write = B_comp = 4 GB/s: at 3 GB/s the plain write takes 33 s against 25 s."),
)
def _():
    n = 100 * GB
    gap = lambda bw: float(resilience.compressed_write_time(n, 2.5, 4 * GB, bw)) - n / bw
    return (_root(gap, 0.1 * GB, 100 * GB), n / (1.5 * GB),
            float(resilience.compressed_write_time(n, 2.5, 4 * GB, 1.5 * GB)))
