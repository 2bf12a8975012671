"""Exercises for chapter 34, Case Study: Llama 3 405B."""

from dtbook import (batchsize, comm, cost, flops, hardware, memory, models, pipeline_parallel,
                    resilience, sequence_parallel, tensor_parallel, data_parallel)
from dtbook.exercises import exercise
from dtbook.units import GB, day, minute

LLAMA = models.get("llama3-405b")
PSI = LLAMA.num_params()
H100 = hardware.get("h100-sxm")
NV, IB = hardware.get("nvlink4"), hardware.get("ib-ndr400")


@exercise(
    "34.1",
    prompt=("Llama 3 405B (catalog llama3-405b) is split into PP = 8, 16 or 32 pipeline stages "
            "and runs m = 64 micro-batches per step under 1F1B. How many parameters does each "
            "stage hold (Ψ/PP, before tensor parallelism splits it further), and what is the "
            "bubble fraction (p − 1)/(m + p − 1) for each? Answer as six numbers: the three "
            "parameter counts, then the three bubbles."),
    unit=("", "", "", "", "", ""),
    hint="Ψ ≈ 4.06 × 10¹¹. The bubble grows with p at fixed m: 7/71, 15/79, 31/95.",
    book_answer=(50.6e9, 25.3e9, 12.7e9, 0.099, 0.190, 0.326),
)
def _():
    pps = (8, 16, 32)
    return (tuple(PSI / p for p in pps)
            + tuple(pipeline_parallel.bubble_fraction(p, 64) for p in pps))


@exercise(
    "34.2",
    prompt=("One tensor-parallel all-reduce of one 8,192-token sequence's activations in Llama 3 "
            "405B carries b·s·H·2 bytes (b = 1, H = 16,384, bf16: 268 MB). How long does a ring "
            "all-reduce, 2(t − 1)α + 2(t − 1)/t · n/β, take (a) over TP 8 inside a node on NVLink "
            "(β = 450 GB/s per direction, α = 1 µs), (b) over TP 16 as one ring across two nodes, "
            "whose slowest link is a 400 Gb/s InfiniBand port (β = 50 GB/s, α = 2 µs), (c) over "
            "TP 16 hierarchically: a ring reduce-scatter in each node on NVLink, a ring all-reduce "
            "of the 1/8 blocks between the two nodes on InfiniBand, a ring all-gather in each node? "
            "Answer as three times."),
    unit=("ms", "ms", "ms"),
    hint="A ring runs at its slowest link. Hierarchically the network carries only n/8 per "
         "GPU: 2(8 − 1)α_NV + 2·(7/8)·n/β_NV + 2α_IB + (n/8)/β_IB.",
)
def _():
    n = tensor_parallel.activation_bytes(1, 8192, LLAMA.hidden)
    return (comm.allreduce_time(n, 8, NV.alpha, NV.beta),
            comm.allreduce_time(n, 16, IB.alpha, IB.beta),
            comm.allreduce_time(n, 16, IB.alpha, IB.beta, "hierarchical", inner=8,
                                alpha_inner=NV.alpha, beta_inner=NV.beta))


@exercise(
    "34.3",
    prompt=("Llama 3 405B trains on 16,384 H100s with TP 8, PP 16, DP 128 and 16M tokens "
            "(2,048 sequences of 8,192) per step. Its FSDP reduce-scatters the bf16 gradients and "
            "all-gathers the weights once per step: together the bytes of one ring all-reduce, "
            "2(d − 1)/d times the gradient bytes a GPU holds. How many bytes does one GPU send "
            "per step for data parallelism, how long does that take on its 50 GB/s InfiniBand "
            "port, and what fraction is that of the step's compute time at 41% MFU (989.4 "
            "TFLOP/s dense BF16, 6Ψ FLOP per token)? Answer as a triple."),
    unit=("GB", "s", ""),
    hint="A GPU holds the gradients of 1/(TP·PP) of the model: 2Ψ/128 bytes.",
    book_answer=("200 GB", "4 s", None),
    book_note=("The original edition divides the gradient bytes by TP only, 2Ψ/TP, and so "
               "sends about 200 GB per GPU per step (4 s at 50 GB/s). Each GPU holds the "
               "gradients of one pipeline stage's tensor-parallel shard, 2Ψ/(TP·PP): with the "
               "catalog's Ψ a GPU sends 12.6 GB, 0.25 s, about 4% of a 6.1 s step's compute, "
               "which FSDP overlaps with the backward pass."),
)
def _():
    grad = data_parallel.gradient_buffer_bytes(PSI, tp=8, pp=16, grad_bytes=2)
    sent = data_parallel.gradient_bytes_sent(grad / 2, 128, grad_bytes=2)
    compute = flops.training_time(PSI, 2048 * 8192, H100.peak("bf16"), 0.41, 16384)
    return sent, sent / IB.beta, (sent / IB.beta) / compute


@exercise(
    "34.4",
    prompt=("Llama 3 405B at 131,072 tokens per sequence with CP 8 and TP 8: in the forward "
            "pass of one layer, ring attention passes each GPU's K and V blocks around the CP "
            "ring, CP − 1 steps. With grouped-query attention (8 KV heads of 128 channels, so a "
            "K/V width of 1,024, split over TP) and bf16, how many bytes does one GPU send per "
            "layer, and how long does that take at 50 GB/s? Answer as a pair."),
    unit=("MB", "ms"),
    hint="One step sends 2·b·(S/CP)·(H_kv/TP)·2 bytes: its K and V.",
    book_answer=("7.35 GB", "147 ms"),
    book_note=("The original edition sends K and V of the full hidden width, 16,384 channels, "
               "undivided by tensor parallelism: 1.05 GB per step, 7 × 1.05 = 7.35 GB per layer, "
               "147 ms at 50 GB/s. Llama 3 405B uses grouped-query attention (8 KV heads of 128 "
               "channels: a K/V width of 1,024, 16× less) and TP 8 splits the KV heads (8× "
               "less): 8.4 MB per step, 59 MB per layer, about 1.2 ms."),
)
def _():
    kv = LLAMA.kv_heads * LLAMA.head_dim
    step = sequence_parallel.ring_kv_step_bytes(1, 131072, kv, 8) / 8
    sent = sequence_parallel.ring_kv_transfers(8, backward=False) * step
    return sent, sent / IB.beta


@exercise(
    "34.5",
    prompt=("A 16,384-GPU job is interrupted 10 times a day. What fraction of its wall-clock "
            "time goes to recovering if each interruption costs 5 minutes, and if it costs "
            "30 seconds? Answer as a pair of fractions."),
    unit=("", ""),
    hint="Rate × time per event: 10 per 1,440 minutes, times 5 minutes.",
    book_answer=(0.035, 0.0035),
)
def _():
    rate = 10 / day
    lost = lambda r: 1 - 1 / cost.failure_multiplier(rate, 0, restart_time=r)
    return lost(5 * minute), lost(30)


@exercise(
    "34.6",
    prompt=("Llama 3 grows its batch from 4M to 8M to 16M tokens. Suppose the critical batch "
            "over the same three phases is 2M, 5M and 10M tokens. With chapter 10's law, "
            "S = S_min(1 + B_crit/B), a batch B reaches S_min/S = B/(B + B_crit) of the ideal "
            "speed-up per step. What is that fraction in each phase for the ramp, and for a "
            "batch fixed at 4M? Answer as six numbers: the ramp's three, then the fixed batch's."),
    unit=("", "", "", "", "", ""),
    hint="4/(4 + 2) in the first phase for both; then 8/(8 + 5) against 4/(4 + 5).",
    book_answer=(0.75, 0.69, 0.69, 0.75, 0.44, 0.29),
    book_note=("The original edition uses B/(B + B_crit) below the critical batch and "
               "1 − B_crit/(2B) above it, and so prints 75% / 69% / 69% for the ramp against "
               "75% / 44% / 29% for a fixed 4M batch. The second branch is not chapter 10's law: "
               "the two branches meet at B = B_crit (50%) and part above it (at B = 2·B_crit, "
               "75% against the law's 67%). With S_min/S = "
               "B/(B + B_crit) throughout, the ramp keeps 67% / 62% / 62% and the fixed batch "
               "falls to 67% / 44% / 29%: the conclusion stands, the ramp's figures are lower."),
)
def _():
    ramp, fixed, crit = (4e6, 8e6, 16e6), (4e6,) * 3, (2e6, 5e6, 10e6)
    speed = lambda b, bc: 1 / (batchsize.steps(b, bc, 1.0))
    return tuple(speed(b, c) for b, c in zip(ramp, crit)) + tuple(speed(b, c) for b, c in zip(fixed, crit))


@exercise(
    "34.7",
    prompt=("Over a 54-day snapshot of Llama 3 405B's pre-training, 419 interruptions were "
            "unexpected. Suppose a checkpoint holds the bf16 weights, FP32 master weights and "
            "Adam's two FP32 moments (14 bytes per parameter, Ψ of the catalog) and training "
            "stops while it is written at 2 TB/s. What is the mean time between interruptions, "
            "the checkpoint's write time, and Young's interval √(2δ·MTBF)? Answer as three times."),
    unit=("h", "s", "min"),
    hint="MTBF = 54 days / 419. The checkpoint is about 5.7 TB.",
)
def _():
    mtbf = 54 * day / 419
    parts = memory.model_state_breakdown(PSI)
    nbytes = parts["params"] + parts["master"] + parts["optimizer"]
    delta = nbytes / 2e12
    return mtbf, delta, resilience.young_interval(delta, mtbf)
