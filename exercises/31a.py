"""Exercises for chapter 31a, Architecture-Aware Efficiency."""

from dtbook import kv_cache as kv
from dtbook import models, schedules
from dtbook.exercises import exercise

_128K = 128 * 1024


@exercise(
    "31a.1",
    prompt=("Llama 3 70B (80 layers, 64 query heads, 8 key-value heads of width 128) serves "
            "one sequence of 128K = 131072 tokens with a bf16 KV cache. How many bytes does "
            "the cache hold? Answer in GB."),
    unit="GB",
    hint="2·g·d_h·2 bytes per token per layer, times S tokens, times L layers.",
)
def _():
    cfg = models.get("llama3-70b")
    return kv.cache_bytes(kv.bytes_per_token_layer(cfg), _128K, cfg.layers)


@exercise(
    "31a.2",
    prompt=("The same shape with multi-head attention (a key and a value for each of the 64 "
            "heads): how many bytes does the 128K-token bf16 cache hold? Answer in GB."),
    unit="GB",
    hint="g = A = 64: eight times the GQA cache. Mind GB (10⁹) against GiB (2³⁰).",
)
def _():
    cfg = models.get("llama3-70b")
    return kv.cache_bytes(kv.bytes_per_token_layer(cfg, kv_heads=cfg.heads), _128K, cfg.layers)


@exercise(
    "31a.3",
    prompt=("A Mistral-7B-like model: 32 layers, 8 key-value heads of width 128, bf16, a "
            "sliding window of 4096 keys. What does one layer's cache hold for one sequence "
            "at S = 32768 tokens, and by what factor is that smaller than the same layer "
            "with 32-head MHA and no window? Answer as a pair (MB, factor)."),
    unit=("MB", ""),
    hint="The window caps the tokens at min(S, w); the two savings multiply: (A/g)·(S/w).",
)
def _():
    swa = kv.cache_bytes(kv.kv_bytes_per_token(8, 128), 32768, window=4096)
    mha = kv.cache_bytes(kv.kv_bytes_per_token(32, 128), 32768)
    return swa, mha / swa


@exercise(
    "31a.4",
    prompt=("Each of 32 layers lets a token attend to itself and the 4095 tokens before it "
            "(a window of w = 4096 keys). How many positions of the input can the last "
            "layer's output at one position depend on, at most?"),
    unit="",
    rtol=0.0,
    hint="Each layer reaches w − 1 positions further back than the one below: L(w − 1) + 1, "
         "a little less than L·w.",
)
def _():
    return kv.receptive_field(32, 4096)


@exercise(
    "31a.5",
    prompt=("DeepSeek-V3's MLA caches a latent of width 512 and one shared RoPE key of width "
            "64 per token per layer, in bf16. Its 128 heads would otherwise each keep a key "
            "of width 192 (128 + 64) and a value of width 128. How many bytes per token per "
            "layer does MLA keep, and how many times fewer than that MHA? Answer as a pair "
            "(bytes, factor)."),
    unit=("B", ""),
    hint="(d_c + d_r)·2 against A·(d_k + d_v)·2.",
)
def _():
    cfg = models.get("deepseek-v3")
    mla = kv.bytes_per_token_layer(cfg)
    mha = cfg.heads * (cfg.head_dim + cfg.v_head_dim) * 2
    return mla, mha / mla


@exercise(
    "31a.6",
    prompt=("Simulate 1F1B and DualPipe-V on P = 16 pipeline ranks with m = 32 micro-batches, "
            "a forward of a rank's share taking 1 and its backward 2 (no split-off weight "
            "gradient, no overlap, free communication). What bubble fractions do they have? "
            "Answer as a pair (1F1B, DualPipe-V) of fractions."),
    unit=("", ""),
    hint="dtbook.schedules.simulate('1f1b', 16, 32) and simulate('dualpipe-v', 16, 32, "
         "virtual_stages=2); the bubble is 1 − busy/(P·makespan).",
)
def _():
    one = schedules.simulate("1f1b", 16, 32)
    dpv = schedules.simulate("dualpipe-v", 16, 32, virtual_stages=2)
    return one.bubble_fraction, dpv.bubble_fraction
