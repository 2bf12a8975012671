"""Exercises for chapter 35, Case Study: DeepSeek-V3."""

from dtbook import flops, hardware, kv_cache, moe, pipeline_parallel, precision, scaling
from dtbook.exercises import exercise
from dtbook.units import GB, hour

SIGMA = 0.02                    # N(0, 0.02²) weights
N_WEIGHTS = 4096 * 4096         # one 4096 × 4096 matrix
BLOCK = 128                     # one scale per 128 values


@exercise(
    "35.1",
    prompt=("DeepSeek-V3 has 61 layers. Its MLA caches, per token and layer, a latent of width "
            "512 and one shared RoPE key of width 64; multi-head attention at the same widths "
            "would cache, for each of 128 heads, a key of width 192 and a value of width 128. "
            "In bf16, how many tokens of context fit in 60 GB (10⁹ bytes) of cache, for one "
            "sequence, with MLA and with MHA? Answer as a pair (MLA, MHA)."),
    unit=("", ""),
    hint="Tokens = bytes / (layers × bytes per token per layer); MLA keeps (d_c + d_r)·2 bytes, "
         "MHA A·(d_k + d_v)·2.",
    book_answer=(976e3, 30.5e3),
    book_note=("The original edition prints 30.5K tokens for MHA and 976K for MLA: it takes 60 "
               "layers, a key and a value of width 16,384 for MHA (32,768 bytes) and the "
               "latent alone, 512 elements, as 1,024 bytes for MLA. With the 61 layers of the "
               "released model, the shared RoPE key (512 + 64 elements, 1,152 bytes) and "
               "MHA's real widths (128 heads × (192 + 128) × 2 = 81,920 bytes), 60 GB holds "
               "≈ 854K tokens with MLA and ≈ 12K with MHA, a ratio of ≈ 71, not 32."),
)
def _():
    mla = kv_cache.mla_bytes_per_token(512, 64)
    mha = 128 * (192 + 128) * 2
    return 60 * GB / (61 * mla), 60 * GB / (61 * mha)


@exercise(
    "35.2",
    prompt=("A batch routes 4,096 tokens. Compare 256 experts with top-8 routing against 64 "
            "experts with top-2 (the same mean load, 128 tokens per expert). With uniform "
            "random routing the load of one expert is Binomial(T, k/E); take the largest of "
            "the E loads as μ + σ√(2 ln E). What is the peak-to-mean load for each, and by "
            "what factor is the 256-expert layout's excess over the mean (peak/mean − 1) "
            "larger than the 64-expert one's? Answer as a triple (256/top-8, 64/top-2, factor)."),
    unit=("", "", ""),
    hint="μ = Tk/E is the same for both, and σ² = μ(1 − k/E) almost; √(2 ln E) is 3.33 for 256 "
         "experts and 2.88 for 64.",
    book_answer=(None, None, 0.85),
    book_note=("The original edition concludes that the fine-grained layout has about 15 % "
               "lower peak imbalance. Its own factors say the opposite: the means are equal, "
               "the standard deviations nearly so (√(1 − 8/256) against √(1 − 2/64), equal), "
               "and √(2 ln 256)/√(2 ln 64) ≈ 1.15, so 256 experts with top-8 have about 15 % "
               "more excess load at the peak, not less."),
)
def _():
    tokens = 4096
    out = []
    for experts, k in ((256, 8), (64, 2)):
        mean = tokens * k / experts
        peak_excess = precision.gaussian_amax(moe.load_std(tokens, experts, k), experts)
        out.append(1 + peak_excess / mean)
    return out[0], out[1], (out[0] - 1) / (out[1] - 1)


@exercise(
    "35.3",
    prompt=("A 4096 × 4096 weight matrix of N(0, 0.02²) values is cast to float8_e4m3fn "
            "(largest value 448) with a scale that maps the largest magnitude onto 448: "
            "(a) one scale for the whole tensor, its largest magnitude taken as σ√(2 ln n) "
            "over all n values; (b) one scale per block of 128 values, each block's largest "
            "magnitude taken as σ√(2 ln 128). With rounding to nearest, an error of RMS Δ/√12 "
            "where Δ is the spacing of FP8 values at x, and the values given |x| ≤ the "
            "largest magnitude, what RMSE does each give, in the units of the weights? "
            "Answer as a pair (per tensor, per block)."),
    unit=("", ""),
    hint="FP8 is floating point: in each binade [2^e, 2^(e+1)) of the scaled value the spacing is "
         "2^(e−3), so the relative error hardly depends on the scale; only values pushed into "
         "the subnormals or past 448 notice it.",
    book_answer=(9.2e-6, 5.0e-6),
    book_note=("The original edition prints 9.2 × 10⁻⁶ per tensor and 5.0 × 10⁻⁶ per "
               "block of 128, a 1.8× gain, as if FP8 had a uniform step of amax/448·2⁻³. Its "
               "spacing grows with the value instead (3 mantissa bits), so for N(0, 0.02²) "
               "weights both scalings give an RMSE of ≈ 5.3 × 10⁻⁴, ≈ 2.6 % of σ, and block "
               "scaling gains under 1 %. Blocks pay off when a few outliers would otherwise "
               "push the rest of a tensor into the subnormals (the chapter's measurement)."),
)
def _():
    per_tensor = precision.scaled_rounding_rmse(SIGMA, precision.gaussian_amax(SIGMA, N_WEIGHTS))
    per_block = precision.scaled_rounding_rmse(SIGMA, precision.gaussian_amax(SIGMA, BLOCK))
    return per_tensor, per_block


@exercise(
    "35.4",
    prompt=("A pipeline of 8 stages runs 16 micro-batches. What bubble fraction does 1F1B have, "
            "(P − 1)/(m + P − 1), and what does the DualPipe estimate (P − 1)/(2m) give? "
            "Answer as a pair (1F1B, DualPipe)."),
    unit=("", ""),
    hint="Both are fractions of the step; P = 8, m = 16.",
    book_answer=(0.304, 0.152),
    book_note=("The original edition gives DualPipe \"7/46 = 15.2 %\" here; its own "
               "formula, (P − 1)/(2m), gives 7/32 = 21.9 % at P = 8, m = 16 (7/46 would be "
               "(P − 1)/(2(m + P − 1)), half of 1F1B's)."),
)
def _():
    P, m = 8, 16
    return pipeline_parallel.bubble_fraction(P, m), (P - 1) / (2 * m)


@exercise(
    "35.5",
    prompt=("DeepSeek-V3 spreads its 256 routed experts over an expert-parallel group of 64 "
            "GPUs, 8 nodes of 8. Each token picks 8 distinct experts; take the choice as "
            "uniform. (a) What fraction of a token's expert choices lie on another node? "
            "(b) If a token crosses the network once per remote node it needs (then fans out "
            "over NVLink), how many network copies does it send on average, against 7 when "
            "each remote expert gets its own copy? Answer as a pair (fraction, copies)."),
    unit=("", ""),
    hint="(a) 1 − 8/64. (b) A node holds 32 experts and is missed with probability "
         "C(224, 8)/C(256, 8); count the 7 other nodes.",
    book_answer=(0.875, None),
)
def _():
    nodes = 64 // 8
    hit = moe.expected_destinations(256, 8, nodes) / nodes   # each node's chance of a hit
    return moe.internode_fraction(64, 8), (nodes - 1) * hit


@exercise(
    "35.6",
    prompt=("DeepSeek-V3 has 671B parameters, 37B of them active per token, and trained on "
            "14.8T tokens. (a) What does training cost at 6 FLOP per active parameter per "
            "token? (b) How many times more would a dense 671B model cost on the same tokens? "
            "(c) What dense model is compute-optimal for the MoE's compute at 20 tokens per "
            "parameter? Answer as a triple (FLOP, factor, parameters)."),
    unit=("FLOP", "", ""),
    hint="C = 6ΨD; Chinchilla's rule of thumb D = 20Ψ gives Ψ = √(C/120).",
    book_answer=(3.3e24, 18, 165e9),
)
def _():
    moe_flops = flops.training_flops(37e9, 14.8e12)
    return (moe_flops, flops.training_flops(671e9, 14.8e12) / moe_flops,
            scaling.rule_of_thumb(moe_flops)[0])


@exercise(
    "35.7",
    prompt=("DeepSeek-V3's report prices pre-training at 180K H800 GPU-hours per trillion "
            "tokens. With 37B active parameters and 6 FLOP per active parameter per token, "
            "what model FLOP utilisation is that against the H800's dense FP8 peak, and "
            "against its dense BF16 peak (1,979 and 989 TFLOP/s, as the H100 SXM)? Answer "
            "as a pair (FP8, BF16)."),
    unit=("", ""),
    hint="MFU = 6Ψ·(tokens per second per GPU) / F, with 10¹² tokens in 180,000 × 3,600 "
         "GPU-seconds.",
)
def _():
    per_gpu = 1e12 / (180e3 * hour)
    h800 = hardware.get("h800")
    return (flops.mfu(per_gpu, 37e9, h800.peak("fp8")), flops.mfu(per_gpu, 37e9, h800.peak("bf16")))
