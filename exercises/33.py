"""Exercises for chapter 33, Investigation Protocol."""

import math

from dtbook import batchsize, comm, flops, hardware, investigation
from dtbook.exercises import exercise
from dtbook.units import day, hour, minute

PM = investigation.POSTMORTEM

# Log lines the chapter's classifier never saw (its tests and page use other text).
HELD_OUT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 3; 79.35 GiB "
    "total capacity; 77.10 GiB already allocated)",
    "[E ProcessGroupNCCL.cpp:475] [Rank 12] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=88102, OpType=ALLREDUCE, NumelIn=2097152) ran for 1800087 milliseconds "
    "before timing out.",
    "NVRM: Xid (PCI:0000:b3:00): 79, pid=2134, GPU has fallen off the bus.",
    "step 48211 | loss nan | grad_norm inf | lr 3.0e-04",
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_00931.bin'",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process "
    "exiting prematurely.",
)

# A fleet's week of ten-minute windows: (windows after the event, of which with a failure).
WEEK = {"checkpoint": (10_752, 172), "lr_change": (2_000, 21), "batch_change": (1_000, 9),
        "eval": (2_688, 12)}
NO_EVENT = (50_000, 250)


@exercise(
    "33.1",
    prompt=("Classify each of seven log lines as 'oom', 'hardware', 'numerical', 'network' or "
            "'unknown' (write your classifier, or use the chapter's, and run it on them). Answer "
            "as a tuple of seven words. The lines: "
            + " || ".join(f"({i + 1}) {line}" for i, line in enumerate(HELD_OUT))),
    kind="choice",
    choices=investigation.CATEGORIES,
    hint="A collective that times out is a network symptom; an Xid or an ECC error is the "
         "hardware; a missing file matches none of the four.",
)
def _():
    return tuple(investigation.classify(line).category for line in HELD_OUT)


@exercise(
    "33.2",
    prompt=("A job works on 8 GPUs and fails on 64. In the worst case, how many test runs does "
            "a bisection need to find the first failing size if it may try (a) any GPU count, "
            "(b) only whole nodes of 8 GPUs, (c) only powers of two? Answer as three counts."),
    unit=("", "", ""),
    hint="Each run halves the candidates left between the last working and the first failing "
         "size: ⌈log₂ (gaps)⌉ runs.",
)
def _():
    nodes = list(range(8, 65, 8))
    powers = [8, 16, 32, 64]
    return (investigation.bisection_steps(8, 64),
            investigation.bisection_steps(0, len(nodes) - 1),
            investigation.bisection_steps(0, len(powers) - 1))


@exercise(
    "33.3",
    prompt=("Five Whys: a run's loss turns to NaN just after warm-up; the gradients grew for a "
            "few hundred steps before; the peak learning rate, 6×10⁻⁴, was copied from a run "
            "with a batch of 2,048 sequences into one with 512, without scaling. With the "
            "square-root rule for Adam, what peak learning rate fits 512, and by what factor "
            "was the copied one too high? Answer as a pair."),
    unit=("", ""),
    hint="η(B) = η₀·√(B/B₀) (chapter 10).",
)
def _():
    lr = batchsize.lr_sqrt(6e-4, 2048, 512)
    return lr, 6e-4 / lr


@exercise(
    "33.4",
    prompt=("A fleet logs a week of ten-minute windows. 50,000 windows with no event hold 250 "
            "failures. Windows right after a checkpoint: 10,752, with 172 failures; after a "
            "learning-rate change: 2,000 with 21; after a batch-size change: 1,000 with 9; after "
            "an evaluation: 2,688 with 12. What is the risk ratio of a failure for each event "
            "(checkpoint, LR change, batch change, eval)? Answer as four numbers."),
    unit=("", "", "", ""),
    hint="RR = P(failure | event) / P(failure | no event), each a fraction of windows.",
    book_answer=(3.2, 2.1, 1.8, 0.9),
)
def _():
    n0, c = NO_EVENT
    return tuple(investigation.risk_ratio(a, n, c, n0) for n, a in WEEK.values())


@exercise(
    "33.5",
    prompt=("For the batch-size change of 33.4 (9 failures in 1,000 windows, against 250 in "
            "50,000), what is the 95 % interval of the risk ratio, exp(ln RR ± 1.96·SE) with "
            "SE = √(1/a − 1/n₁ + 1/c − 1/n₀)? Answer as a pair (low, high); does it rule out "
            "a risk ratio of 1?"),
    unit=("", ""),
    hint="Nine failures carry a large SE: about 1/3 on the log scale.",
)
def _():
    n0, c = NO_EVENT
    n, a = WEEK["batch_change"]
    rr = investigation.risk_ratio(a, n, c, n0)
    se = investigation.log_risk_ratio_se(a, n, c, n0)
    return rr * math.exp(-1.96 * se), rr * math.exp(1.96 * se)


@exercise(
    "33.6",
    prompt=("The post-mortem's nccl-tests give a bus bandwidth of 42.3 GB/s on healthy nodes "
            "and 17.1 GB/s on affected ones, and the healthy step's all-reduce takes 2.9 s. "
            "What is the bandwidth drop, and how long does the bandwidth make the same "
            "all-reduce on the bad path? Answer as a pair (fraction, seconds)."),
    unit=("", "s"),
    hint="For a fixed message and group, bus bandwidth = (bytes × bus factor) / time: time "
         "scales as 1/busbw.",
    rtol=0.02,  # the post-mortem's times have two significant figures
    book_answer=(0.59, "7.1 s"),
)
def _():
    drop = investigation.drop(PM["busbw"], PM["busbw_bad"])
    factor = comm.bus_factor("allreduce", PM["dp"])
    nbytes = PM["allreduce"] * PM["busbw"] / factor              # what the healthy call moved
    return drop, nbytes * factor / PM["busbw_bad"]


@exercise(
    "33.7",
    prompt=("The post-mortem's model has 70B parameters and trains at 142K tokens/s on 256 "
            "H100s (989.4 TFLOP/s dense bf16). What MFU is that (6Ψ FLOP per token), and what "
            "throughput would the 41 % MFU of its alert need? Answer as a pair (fraction, "
            "tokens/s)."),
    unit=("", "tokens/s"),
    hint="MFU = 6Ψ·(tokens/s) / (P·F).",
    book_answer=(0.41, None),
    book_note=("The original edition's post-mortem alerts on MFU falling from 41 % to 26 %. "
               "At 142K tokens/s a 70B model on 256 H100s runs at 6Ψ·142K/(256·989.4 TFLOP/s) "
               "≈ 23.5 % MFU, and 89K tokens/s is ≈ 14.8 %; 41 % would take ≈ 247K tokens/s. "
               "The ratio of the two printed MFUs (0.63) does match the throughput drop."),
)
def _():
    peak = hardware.get("h100-sxm").peak("bf16")
    return (flops.mfu(PM["tokens_per_s"], PM["params"], peak, PM["gpus"]),
            flops.tokens_per_second(PM["params"], peak, PM["mfu_printed"], PM["gpus"]))


@exercise(
    "33.8",
    prompt=("The post-mortem counts its incident as 80 minutes at the throughput drop "
            "(142K → 89K tokens/s) plus a 30-minute pause, on 256 GPUs at $4 per GPU-hour. "
            "How many GPU-hours were lost, and what did they cost? Answer as a pair "
            "(GPU-hours, dollars)."),
    unit=("", "$"),
    hint="GPUs × hours × waste fraction, the waste being 1 − 89/142 while slow and 1 while paused.",
    book_answer=(360, "$1,440"),
    book_note=("The original edition prints ≈ 360 GPU-hours ($1,440). By its own accounting, "
               "80 min at a 37.3 % drop on 256 GPUs is 127 GPU-hours and the 30-minute pause "
               "128 more: ≈ 255 GPU-hours, ≈ $1,020 at $4."),
)
def _():
    waste = investigation.drop(PM["tokens_per_s"], PM["tokens_per_s_bad"])
    slow = sum(PM["phases_min"].values()) * minute / hour
    hours = (investigation.incident_gpu_hours(PM["gpus"], slow, waste)
             + investigation.incident_gpu_hours(PM["gpus"], PM["pause_min"] * minute / hour))
    return hours, hours * PM["price"]


@exercise(
    "33.9",
    prompt=("Left undetected, the slowdown (142K → 89K tokens/s) would have lasted the "
            "remaining 12 days of the run on 256 GPUs at $4 per GPU-hour. What does it cost "
            "(a) counted as the wasted fraction of 12 days of GPU time, (b) counted as the "
            "extra days needed to finish the same tokens? Answer as a pair in dollars."),
    unit=("$", "$"),
    hint="(a) 12 days × the drop 1 − 89/142; (b) 12 days of work at 89K take 142/89 times as long.",
    book_answer=("$86K", None),
    book_note=("The original edition prints ~$86K for the undetected slowdown. Wasting 37.3 % "
               "of 256 GPUs for 12 days costs ≈ $110K; finishing the same tokens at 89K "
               "tokens/s takes 7.1 extra days, ≈ $176K. Neither accounting gives $86K."),
)
def _():
    hours = PM["remaining_days"] * day / hour
    good, bad = PM["tokens_per_s"], PM["tokens_per_s_bad"]
    return (investigation.incident_cost(PM["gpus"], hours, investigation.drop(good, bad), PM["price"]),
            investigation.incident_cost(PM["gpus"], hours, investigation.extra_time_fraction(good, bad),
                                        PM["price"]))
