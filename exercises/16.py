"""Exercises for chapter 16, Pipeline Parallelism from Separability."""

from dtbook import pipeline_parallel as pp
from dtbook import schedules
from dtbook.exercises import exercise
from dtbook.units import MB, GB, MiB


@exercise(
    "16.1",
    prompt=("P = 8 pipeline stages, m = 48 microbatches, equal stages. What fraction of the "
            "time is bubble (a) under 1F1B, and (b) under interleaved 1F1B with v = 2 chunks "
            "per rank, each chunk costing half a stage? Answer in percent, as a pair."),
    unit=("%", "%"),
    hint="Interleaving divides the (P − 1) idle slots by v, but the batch still takes the "
         "useful time plus the idle time: (P − 1)/(v·m + P − 1).",
    book_answer=("12.7%", "7.3%"),
    book_note=("The original edition prints 7/96 = 7.3 % for the interleaved schedule, the "
               "large-m form (P − 1)/(v·m), which divides the idle time by the useful time "
               "only. The idle share of the whole batch is (P − 1)/(v·m + P − 1) = 7/103 = "
               "6.8 %; the chapter's simulator of Megatron's and PyTorch's interleaved order "
               "gives exactly that."),
)
def _():
    return pp.bubble_fraction(8, 48), pp.interleaved_bubble_fraction(8, 48, 2)


@exercise(
    "16.2",
    prompt=("P = 4 stages, m = 16 microbatches, 32 MB of saved activations per microbatch "
            "on a stage. What is the first stage's peak activation memory under GPipe and "
            "under 1F1B? Answer in MB, as a pair."),
    unit=("MB", "MB"),
    hint="GPipe runs every forward before any backward; 1F1B's first stage has P "
         "microbatches in flight at most.",
    book_answer=("512 MB", "128 MB"),
)
def _():
    gpipe = schedules.simulate("gpipe", 4, 16).peak_activations[0]
    ofob = schedules.simulate("1f1b", 4, 16).peak_activations[0]
    return gpipe * 32 * MB, ofob * 32 * MB


@exercise(
    "16.3",
    prompt=("Eight layers take 10, 10, 10, 10, 20, 20, 20, 20 ms and must go onto 4 pipeline "
            "stages. A stage holds consecutive layers (the activations flow from stage to "
            "stage). What is the smallest possible time of the slowest stage, and the "
            "load-balance efficiency Σtᵢ/(P·t_max) it gives? Answer as a pair (ms, %)."),
    unit=("ms", "%"),
    hint="Try a bound of 30 ms: how many consecutive groups of at most 30 ms do the eight "
         "layers need?",
    book_answer=("30 ms", "100%"),
    book_note=("The original edition pairs a 10 ms layer with a 20 ms layer on every stage, "
               "reaching 30 ms and no imbalance (1.33× the naive split). Such a stage holds "
               "layers that are not consecutive, so a microbatch would cross between ranks "
               "several times per pass; with consecutive layers, as a pipeline requires, "
               "30 ms needs five stages and the best of four is 40 ms, the naive split "
               "itself (75 %)."),
)
def _():
    times = [10, 10, 10, 10, 20, 20, 20, 20]
    per_stage = pp.stage_times(times, pp.best_partition(times, 4))
    return max(per_stage) * 1e-3, pp.load_balance_efficiency(per_stage)


@exercise(
    "16.4",
    prompt=("A 70 × 10⁹-parameter model with H = 8192 runs microbatches of b = 2 sequences "
            "of S = 4096 tokens in bf16. How large is one activation message between two "
            "stages (in MiB), and how many times larger is the model's bf16 gradient (what "
            "data parallelism would all-reduce)? Answer as a pair (MiB, plain number)."),
    unit=("MiB", ""),
    hint="b·S·H·2 bytes; the gradient is 2 bytes per parameter. Keep MiB and MB apart.",
    book_answer=("128 MiB", 1094),
    book_note=("The original edition divides 140 GB (decimal) by 128 MB taken as 128 × 10⁶ "
               "bytes and gets 1,094×; the message is 128 MiB = 134.2 × 10⁶ bytes, so the "
               "gradient is 1,043 times larger."),
)
def _():
    act = pp.p2p_message_bytes(2, 4096, 8192, 2)
    return act, 2 * 70e9 / act


@exercise(
    "16.5",
    prompt=("Zero-bubble H1 on P = 8 stages with m = 32 microbatches. A forward takes 1 unit, "
            "the input-gradient backward B 1 unit and the weight-gradient backward W 0.3 "
            "unit. What are the bubble fractions of ZB-H1 and of plain 1F1B (which runs B and "
            "W together)? Answer in percent, as a pair."),
    unit=("%", "%"),
    hint="Simulate it, or use the chapter's bubble (P − 1)·max(t_F + t_B − t_W, t_F, t_B) "
         "over m(t_F + t_B + t_W) plus that bubble.",
    book_answer=("3.5%", "17.9%"),
    book_note=("The original edition's model gives ZB-H1 max(0, αm − (P − 1))/((2 + α)m) = "
               "2.6/73.6 = 3.5 %, a 5.1× gain. Deferring W does not remove the warm-up and "
               "cool-down: each stage still waits (P − 1)(t_F + t_B − t_W) = 7 × 1.7 units, "
               "13.9 % of the batch, which the chapter's simulator confirms; the gain over "
               "1F1B's 17.9 % is 1.29×. Bubbles near zero need more: ZB-H2, ZB-V or "
               "DualPipe-V, which also reorder the forwards."),
)
def _():
    zb = schedules.simulate("zb-h1", 8, 32, t_forward=1, t_backward=1, t_weight=0.3)
    ofob = schedules.simulate("1f1b", 8, 32, t_forward=1, t_backward=1, t_weight=0.3)
    return zb.bubble_fraction, ofob.bubble_fraction


@exercise(
    "16.6",
    prompt=("A 32-layer model on 8 pipeline stages, t_F = 10 ms and t_B = 20 ms per stage "
            "and microbatch, m = 64 microbatches of b = 4 sequences of 2048 tokens. What are "
            "the batch time, the pipeline efficiency and the throughput? Answer as a triple "
            "(ms, %, tokens/s)."),
    unit=("ms", "%", "tokens/s"),
    hint="(m + P − 1)(t_F + t_B); m/(m + P − 1); m·b·S over the batch time.",
    book_answer=("2130 ms", "90.1%", "245760 tokens/s"),
)
def _():
    T = pp.batch_time(8, 64, 10e-3, 20e-3)
    return T, pp.pipeline_efficiency(8, 64), pp.throughput(8, 64, 4, 2048, 10e-3, 20e-3)


@exercise(
    "16.7",
    prompt=("P = 4 stages, m = 8 microbatches. What is the bubble fraction under 1F1B, and "
            "under interleaved 1F1B with v = 2? Answer in percent, as a pair."),
    unit=("%", "%"),
    hint="Count the idle slots of the simulator's timeline, or use the exact form.",
    book_answer=("27%", "19%"),
    book_note=("The original edition's 19 % is the large-m form (P − 1)/(v·m) = 3/16; the "
               "interleaved schedule's idle share is 3/19 = 15.8 %."),
)
def _():
    return (schedules.simulate("1f1b", 4, 8).bubble_fraction,
            schedules.simulate("interleaved-1f1b", 4, 8, virtual_stages=2).bubble_fraction)
