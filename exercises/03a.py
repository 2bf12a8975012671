"""Exercises for chapter 03a, Data Pipeline I/O."""
from dtbook.exercises import exercise
from dtbook import datapipe, hardware, models
from dtbook.units import GB, KB, MB, TB

H100 = hardware.get("h100-sxm")


def _tokens_per_second_13b():
    return datapipe.required_tokens_per_second(
        models.get("llama2-13b").num_params(), H100.peak("bf16"), mfu=0.45, devices=128)


@exercise(
    "03a.1",
    prompt="A 13B model (Llama 2 13B) trains on 128 H100s (bf16 dense peak) at 45% MFU. "
           "How many tokens per second must the data pipeline deliver?",
    unit="",
    rtol=0.01,
    hint="Each token costs 6Ψ FLOP and the cluster does P·F·MFU FLOP per second.",
    book_answer=73_000,
    book_note="The original edition prints ≈73,000 tokens/s, ten times too few: "
              "128 × 989 TFLOP/s × 0.45 / (6 × 13e9) = 7.3e5 tokens/s. The slip carries "
              "into its storage figure (exercise 03a.2).",
)
def _():
    return _tokens_per_second_13b()


@exercise(
    "03a.2",
    prompt="The same run stores 1.5 KB per token and reads with amplification ρ = 1.3. "
           "What storage bandwidth does it need, in total?",
    unit="GB/s",
    rtol=0.01,
    hint="B_req = tokens/s × bytes per token × ρ; take KB as 1000 bytes.",
    book_answer="142 MB/s",
    book_note="The original edition's ≈142 MB/s follows from its 73,000 tokens/s, which is ten times "
              "too low (exercise 03a.1); the run needs about 1.42 GB/s.",
)
def _():
    return datapipe.storage_bandwidth_demand(_tokens_per_second_13b(), 1.5 * KB, 1.3)


@exercise(
    "03a.3",
    prompt="A step takes 0.6 s, of which the loader, working inside the training loop, "
           "spends 0.25 s decoding and 0.05 s transferring. (a) What fraction of the step "
           "is data time? (b) How many seconds per step can a prefetching loader hide?",
    unit=("%", "s"),
    rtol=0.01,
    hint="Compute is what is left of the step. Overlap hides at most the shorter of the "
         "data time and the compute time.",
    book_answer=("50%", "0.3 s"),
)
def _():
    data = 0.25 + 0.05
    step = 0.6
    compute = step - data
    hidden = datapipe.serial_step_time(data, compute) - datapipe.step_time(data, compute, 1)
    return datapipe.data_fraction(data, step), hidden


@exercise(
    "03a.4",
    prompt="Before a run, 1 TB of tokens is copied from a shared file system that gives "
           "this job 300 MB/s to the nodes' local NVMe cache. How long does the fill take?",
    unit="min",
    rtol=0.02,
    hint="Time = bytes / bandwidth; mind the decimal prefixes (1 TB = 1e12 B).",
    book_answer="3333 s",
)
def _():
    return datapipe.transfer_time(1 * TB, 300 * MB)


@exercise(
    "03a.5",
    prompt="A step takes 0.5 s and producing one batch takes 2 s from request to arrival. "
           "By Little's law, how many batches must be in flight to keep the step fed?",
    unit="",
    rtol=0.01,
    hint="L = λW, with λ the batches consumed per second.",
    book_answer=4,
)
def _():
    return datapipe.prefetch_depth(1 / 0.5, 2.0)


@exercise(
    "03a.6",
    prompt="Storage delivers 2 GB/s. Shards compressed 3:1 are decoded at 0.6 GB/s of raw "
           "tokens per decode worker. What is the least number of decode workers for which "
           "reading compressed shards beats reading raw ones?",
    unit="",
    rtol=0.0,
    hint="The compressed path runs at min(B·c, n·R_decode); raw runs at B.",
)
def _():
    n = 1
    while datapipe.compression_speedup(2 * GB, 3, 0.6 * GB, decoders=n) <= 1:
        n += 1
    return n
