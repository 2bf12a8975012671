"""Exercises for chapter 37, Conclusion: The Algebra of Scale."""

import dataclasses

from dtbook import (composition, cost, flops, hardware, memory, models, plan, resilience,
                    roofline)
from dtbook.exercises import exercise
from dtbook.units import day, hour, minute

H100 = hardware.get("h100-sxm")
F = H100.peak("bf16")
THREE = ("llama3-405b", "deepseek-v3", "mixtral-8x22b")
_DS, _MX = models.get("deepseek-v3"), models.get("mixtral-8x22b")


@exercise(
    "37.1",
    prompt=("A 175B-parameter dense model is to train on 512 H100s (80 GiB each) with "
            "mixed-precision Adam. (a) How many bytes do its model states take (parameters, "
            "gradients, FP32 master weights, Adam's two moments)? (b) What is the fewest H100s "
            "whose memory could hold them, before any activation? (c) With TP 8, PP 8, DP 8 and "
            "ZeRO-1 (optimizer state and master weights sharded over DP), how many bytes of "
            "model state does one GPU hold? Answer as (bytes, GPUs, bytes)."),
    unit=("TB", "", "GB"),
    hint="16 bytes per parameter; ZeRO-1 keeps 4Ψ/(t·p) whole and shards 12Ψ/(t·p) over d.",
    book_answer=("2.8 TB", 35, None),
    book_note=("The original edition divides 2.8 TB by 80 GB and asks for at least 35 GPUs. An "
               "H100's 80 GB is 80 GiB, 85.9 × 10⁹ bytes, so 33 GPUs hold 2.8 TB; 35 is the "
               "count for 80 × 10⁹-byte devices. Neither leaves room for activations, which "
               "is why the layout spreads the model over 64 GPUs per replica."),
)
def _():
    states = memory.model_state_bytes(175e9)
    return (states, memory.min_devices(states, H100.hbm_bytes),
            composition.model_states_per_gpu(175e9, 8, 8, 8, zero_stage=1))


@exercise(
    "37.2",
    prompt=("A model with hidden size H = 8192 trains on sequences of S = 32,768 tokens under "
            "TP 8, and its attention is switched to a causal sliding window of w = 256 keys per "
            "query (itself included). (a) What fraction of the causal score pairs (query, key) "
            "does the window keep? (b) By what factor does the TP all-reduce volume per layer "
            "change? Answer as two numbers."),
    unit=("", ""),
    hint="A windowed query sees min(i, w) keys; TP's all-reduces carry the b·S·H activation "
         "whatever attention does inside the layer.",
)
def _():
    kept = flops.attention_score_pairs(32768, window=256) / flops.attention_score_pairs(32768)
    # the planner's TP term for a hidden-8192 model (Llama 3 70B's shape) with and without the
    # window: it sees the whole layer, so a window that changed TP traffic would show here
    full = dataclasses.replace(models.get("llama3-70b"), max_seq=32768)
    windowed = dataclasses.replace(full, sliding_window=256)
    kw = dict(gpus=8, tp=8, pp=1, dp=1, global_batch=1, seq=32768)
    ratio = (plan.estimate(windowed, **kw).breakdown["tp_comm"]
             / plan.estimate(full, **kw).breakdown["tp_comm"])
    return kept, ratio


@exercise(
    "37.3",
    prompt=("A two-week run has a system MTBF of 3 days and an asynchronous checkpoint that "
            "stalls training for 5 minutes. What checkpoint interval does Young's formula give, "
            "how many failures does the run expect, and what fraction of the time does "
            "checkpointing cost at that interval (writing plus lost work, first order)? Answer "
            "as (seconds, failures, fraction)."),
    unit=("s", "", ""),
    hint="I* = √(2δ·MTBF); at I* the writing and the expected lost work are equal, √(2δ/MTBF) "
         "together.",
    book_answer=("12470 s", 4.7, None),
)
def _():
    delta, mtbf = 5 * minute, 3 * day
    return (resilience.young_interval(delta, mtbf), 14 * day / mtbf,
            resilience.overhead_at_optimum(delta, mtbf))


@exercise(
    "37.4",
    prompt=("A new accelerator has twice the H100's FLOP/s and half its memory bandwidth. By "
            "what factor does its ridge point (FLOP per byte of HBM traffic needed to be "
            "compute-bound) move?"),
    unit="",
    hint="Ridge = peak FLOP/s / bandwidth.",
    book_answer=4,
)
def _():
    return (roofline.ridge_point(2 * F, H100.hbm_bandwidth / 2)
            / roofline.ridge_point(F, H100.hbm_bandwidth))


@exercise(
    "37.5",
    prompt=("A 7B model trains compute-optimally (tokens proportional to parameters) in one week "
            "on 64 GPUs. At the same MFU, how many days does a compute-optimal 70B model take on "
            "640 GPUs?"),
    unit="days",
    hint="T = 6ΨD/(P·F·MFU) with D ∝ Ψ: T ∝ Ψ²/P.",
    book_answer="70 days",
)
def _():
    def time(params, gpus):
        return flops.training_time(params, 20 * params, F, mfu=0.4, devices=gpus)
    return 7 * day * time(70e9, 640) / time(7e9, 64)


@exercise(
    "37.6",
    prompt=("A 13B run costs 100,000 GPU-hours. Doubling the batch (and the GPUs) shortens it, "
            "but the larger batch needs 20% more tokens to reach the same loss. At the same "
            "throughput per GPU, how many GPU-hours does the doubled run cost, and what "
            "fraction of the first run's wall-clock time does it take? Answer as (GPU-hours, "
            "fraction)."),
    unit=("", ""),
    hint="GPU-hours follow the tokens; wall-clock is GPU-hours over GPUs.",
    book_answer=(120_000, 0.5),
    book_note=("The original edition says the larger batch 'halves wall-clock'. With the 20 % "
               "more tokens behind its own 120K GPU-hours, twice the GPUs take 1.2/2 = 0.6 of "
               "the first run's time; half holds only for a batch that needs no more tokens."),
)
def _():
    tokens = 20 * 13e9                                  # any count: only the ratio matters
    first = cost.device_hours(13e9, tokens, F, mfu=0.4)
    second = cost.device_hours(13e9, 1.2 * tokens, F, mfu=0.4)
    return 100_000 * second / first, (second / 2) / first


@exercise(
    "37.7",
    prompt=("How many bytes do the BF16 weights of Llama 3 405B, DeepSeek-V3 and Mixtral 8x22B "
            "take for inference (weights only: every expert must be resident)? Use "
            "dtbook.models for the parameter counts. Answer as three byte counts."),
    unit=("GB", "TB", "GB"),
    hint="2 bytes per parameter, every parameter, active or not.",
    book_answer=("810 GB", "1.34 TB", "352 GB"),
    book_note=("The original edition gives Mixtral 8x22B 352 GB, reading the name as 8 experts "
               "of 22B, 176B in all. The experts share attention, embeddings and norms: only the "
               "MLPs are replicated, and the model has "
               f"{_MX.num_params() / 1e9:.0f}B parameters (Mistral's own figure), "
               f"{2 * _MX.num_params() / 1e9:.0f} GB in BF16."),
)
def _():
    return tuple(2 * models.get(name).num_params() for name in THREE)


@exercise(
    "37.8",
    prompt=("Forward FLOPs per token, 2 per active parameter, for Llama 3 405B, DeepSeek-V3 and "
            "Mixtral 8x22B (active parameters as dtbook.models counts them, embeddings "
            "included)? Answer as three FLOP counts."),
    unit=("GFLOP", "GFLOP", "GFLOP"),
    hint="An MoE token passes through the shared layers and k of the E experts.",
    book_answer=("810 GFLOP", None, "88 GFLOP"),
    book_note=("The original edition counts Mixtral 8x22B at 2 × 44B, two whole 22B models per "
               "token. Its top-2 routing runs two experts' MLPs but one attention: "
               f"{_MX.num_active_params() / 1e9:.0f}B active parameters (Mistral's figure), "
               f"{flops.forward_flops(_MX.num_active_params(), 1) / 1e9:.0f} GFLOP per token. "
               f"DeepSeek-V3's '2 × 37B' is the rounded {_DS.num_active_params() / 1e9:.1f}B. "
               "Its verdict that Mixtral is the most efficient for inference "
               "because it has the smallest active parameters contradicts its own (b): 37B "
               "active for DeepSeek-V3 against 44B for Mixtral (as counted here "
               f"{_DS.num_active_params() / 1e9:.1f}B and {_MX.num_active_params() / 1e9:.1f}B). "
               f"What Mixtral has least of is total parameters ({_MX.num_params() / 1e9:.0f}B "
               f"against {models.get('llama3-405b').num_params() / 1e9:.0f}B and "
               f"{_DS.num_params() / 1e9:.0f}B), which is why it fits on fewer GPUs."),
)
def _():
    return tuple(flops.forward_flops(models.get(name).num_active_params(), 1) for name in THREE)
