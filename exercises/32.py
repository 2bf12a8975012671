"""Exercises for chapter 32, Profiling Distributed Training.

Peak compute is the catalog's dense BF16 figure for an H100 SXM, 989.4 TFLOP/s (NVIDIA's
Hopper whitepaper); the datasheet's 1979 TFLOP/s is the same unit with 2:4 sparsity. The
7B-style model of 32.1 is Llama 2 7B's shape (H = 4096, L = 32, V = 32000), whose parameter
count dtbook.models computes from its config.
"""

import numpy as np

from dtbook import comm, data_parallel, flops, hardware, memory, models, overlap, profiling
from dtbook.exercises import exercise
from dtbook.units import GB, MB, TFLOP, ms, us

F = hardware.get("h100-sxm").peak("bf16")
_F = f"{F / TFLOP:g} TFLOP/s"
LLAMA2_7B = models.get("llama2-7b")

# 32.2: all-reduce times measured on one 8-GPU node, (bytes, seconds)
SIZES = (1e3, 1e6, 16e6, 256e6, 1e9)
TIMES = (10.2 * us, 14.6 * us, 91.5 * us, 1.27 * ms, 5.06 * ms)


@exercise(
    "32.1",
    prompt=(f"A model of Llama 2 7B's shape (Ψ = 6.74 × 10⁹) trains on one H100 ({_F} dense "
            "BF16) with B = 4 sequences of S = 2048 tokens per step. (a) What FLOP/s would a "
            "step of 180 ms achieve, counting 6Ψ per token? (b) What MFU is that? (c) How "
            "long does a step take at a realistic 40% MFU? Answer as a triple."),
    unit=("PFLOP/s", "%", "ms"),
    hint="The step trains B·S = 8192 tokens: 6Ψ·B·S FLOP. Divide by the step time, then by "
         "the dense peak; for (c), divide the FLOPs by 0.4·F.",
    book_answer=("450 TFLOP/s", "23%", None),
    book_note=("The original edition prints about 450 TFLOP/s and 23% MFU for a 180 ms step. "
               "450 TFLOP/s × 180 ms is 6Ψ × 2048 tokens: one sequence, not B·S = 8192; and "
               "23% divides by the 1979 TFLOP/s of the sparse datasheet figure, not the 989 "
               "TFLOP/s dense peak. Counting all 8192 tokens, 180 ms would need 1.84 PFLOP/s, "
               "186% of the dense peak: no H100 runs that step in 180 ms. At 40% MFU it takes "
               "about 0.84 s."),
)
def _():
    step_flops = flops.training_flops(LLAMA2_7B.num_params(), 4 * 2048)
    return (step_flops / (180 * ms),
            profiling.flop_utilization(step_flops, 180 * ms, F),
            step_flops / (0.40 * F))


@exercise(
    "32.2",
    prompt=("An all-reduce on one 8-GPU node lasts 10.2 µs for 1 KB, 14.6 µs for 1 MB, 91.5 µs for "
            "16 MB, 1.27 ms for 256 MB and 5.06 ms for 1 GB. Fit T = α + n/β by least squares "
            "on the relative residuals (each point weighted by 1/T, as chapter 04's "
            "fit_alpha_beta does). What are α and β? Answer as a pair."),
    unit=("us", "GB/s"),
    hint="Minimise Σ((α + n/β − T)/T)²: a straight line in n with weights 1/T (np.polyfit "
         "with w = 1/T), slope 1/β and intercept α. β comes out in bytes per second: "
         "GB/s, not Gb/s.",
    rtol=0.02,
)
def _():
    fit = comm.fit_alpha_beta(SIZES, TIMES)
    return fit.alpha, fit.beta


@exercise(
    "32.3",
    prompt=("A DDP step computes for 15 ms and communicates for 20 ms; serially that is 35 ms, "
            "and the profiled step lasts 24 ms. (a) What is its overlap efficiency, "
            "1 − (T − max(T_c, T_m))/((T_c + T_m) − max(T_c, T_m))? (b) What share of the "
            "communication was hidden? Answer as a pair."),
    unit=("%", "%"),
    hint="11 ms were saved against the serial 35 ms; the most that could be saved is the "
         "shorter activity, 15 ms. For (b), divide the saving by T_m.",
    book_answer=("79%", "55%"),
    book_note=("The original edition prints 79% overlap efficiency beside its own formula, "
               "which gives 1 − (24 − 20)/(35 − 20) = 11/15 = 73%; its 55% of communication "
               "hidden is right."),
)
def _():
    return (overlap.overlap_achieved(15 * ms, 20 * ms, 24 * ms, of="min"),
            overlap.overlap_achieved(15 * ms, 20 * ms, 24 * ms, of="comm"))


@exercise(
    "32.4",
    prompt=("Eight data-parallel ranks each take 15 ms per step (compute and communication). "
            "One rank's compute is delayed by 50 ms every step. (a) How long is a step now? "
            "(b) What share of the throughput is lost? (c) Each rank also times its own work, "
            "without the waiting: 15 ms, and 65 ms on the slow rank. What is the slow rank's "
            "z-score among the eight (population standard deviation)? Answer as a triple."),
    unit=("ms", "%", ""),
    hint="A synchronous step waits for the slowest rank: 15 + 50 ms. The loss is 1 − T/T′. "
         "One outlier among P values has z = √(P − 1) whatever its size.",
    book_answer=("65 ms", "77%", None),
)
def _():
    times = [15 * ms] * 7 + [65 * ms]
    t_slow = data_parallel.straggler_step_time(times, 0.0)
    return (t_slow, profiling.throughput_loss(15 * ms, t_slow),
            float(profiling.zscores(times)[-1]))


# 32.5: a 1 GB gradient all-reduced in buckets over 8 ranks
_G, _TB, _ALPHA, _BETA, _P = 1 * GB, 100 * ms, 20 * us, 25 * GB, 8


def _bucketed_step(bucket):
    n = round(_G / bucket)
    t_m = comm.allreduce_time(_G / n, _P, _ALPHA, _BETA)
    return data_parallel.overlapped_step_time(_TB, n * t_m, n)


@exercise(
    "32.5",
    prompt=("A backward pass of 100 ms produces 1 GB of fp32 gradients at an even rate. DDP "
            "all-reduces them over 8 ranks in buckets of B bytes, each with a ring all-reduce "
            "(α = 20 µs per step, β = 25 GB/s), starting each bucket when its gradients exist, "
            "one all-reduce at a time. How long do backward plus communication take for "
            "buckets of (a) 1 MB, (b) 25 MB and (c) 250 MB? Answer as a triple."),
    unit=("ms", "ms", "ms"),
    hint="n = G/B buckets, each t_m = 2(P − 1)α + 2(P − 1)/P · B/β after t_c = T_b/n of "
         "compute; the pipeline ends at t_c + (n − 1)·max(t_c, t_m) + t_m.",
)
def _():
    return tuple(_bucketed_step(b) for b in (1 * MB, 25 * MB, 250 * MB))


@exercise(
    "32.6",
    prompt=("A 7 × 10⁹-parameter model trains in fp32 with Adam (parameters, gradients, and "
            "two moments, 4 bytes each), and the forward pass stores 64 GB of activations in "
            "32 equal layers. (a) How much memory is in use at the end of the forward pass if "
            "the gradients of the last step are kept (zero_grad(set_to_none=False))? "
            "(b) What is the peak if gradients are freed between steps and each layer's "
            "backward first allocates that layer's gradients, then frees its activations? "
            "Answer as a pair."),
    unit=("GB", "GB"),
    hint="(a) 28 + 28 + 56 + 64 GB. (b) The gradients start at zero; the first layer of the "
         "backward adds 1/32 of them while every activation is still held, and from then on "
         "each layer frees more than it allocates.",
)
def _():
    states = memory.model_state_breakdown(7e9, param_bytes=4, grad_bytes=4, master_bytes=0,
                                          optimizer_bytes=8)
    activations, layers = 64 * GB, 32
    kept = sum(states.values()) + activations
    freed = states["params"] + states["optimizer"] + activations + states["grads"] / layers
    return kept, freed


@exercise(
    "32.7",
    prompt=("A job on 64 GPUs runs 10% below the efficiency it could reach. How many "
            "GPU-hours does that waste per day?"),
    unit="GPU-hours",
    hint="inefficiency × GPUs × 24 hours.",
    book_answer=154,
)
def _():
    return profiling.wasted_device_hours(0.10, 64)
