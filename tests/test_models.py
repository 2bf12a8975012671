"""dtbook.models: catalog counts against published figures, validation, properties."""

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtbook import models
from dtbook.models import TransformerConfig

# --------------------------------------------------------------------------- published totals
# Exact counts. Hugging Face computes a checkpoint's parameter count from its safetensors
# headers (shown rounded on the model page, exact in the Hub API's "safetensors.total";
# transformers' model.num_parameters() gives the same figure).
EXACT_TOTALS = {
    # bigscience/bloom model card: "176,247,271,424 parameters" (Le Scao et al. 2022,
    # arXiv:2211.05100, "176,247M")
    "bloom-176b": 176_247_271_424,
    # meta-llama/Llama-2-7b-hf (Llama 2 paper, arXiv:2307.09288, "7B")
    "llama2-7b": 6_738_415_616,
    # meta-llama/Llama-2-13b-hf
    "llama2-13b": 13_015_864_320,
    # meta-llama/Llama-2-70b-hf
    "llama2-70b": 68_976_648_192,
    # meta-llama/Meta-Llama-3-8B (Llama-3.1-8B has the same count)
    "llama3-8b": 8_030_261_248,
    # meta-llama/Meta-Llama-3-70B (Llama-3.1-70B has the same count)
    "llama3-70b": 70_553_706_496,
    # meta-llama/Llama-3.1-405B ("405B"; model page shows 406B)
    "llama3-405b": 405_853_388_800,
    # mistralai/Mixtral-8x7B-v0.1 ("46.7B total", Mistral AI announcement and model page)
    "mixtral-8x7b": 46_702_792_704,
    # mistral-community/Mixtral-8x22B-v0.1, vocabulary 32000 ("141B", Mistral AI announcement)
    "mixtral-8x22b": 140_620_634_112,
    # DeepSeek-V3 main model, 61 blocks + embedding + head: "671B" (arXiv:2412.19437,
    # README_WEIGHTS.md); the exact figure is the per-tensor sum of the checkpoint's main
    # model (see test_deepseek_v3_checkpoint_exact for the decomposition it comes from).
    "deepseek-v3": 671_026_419_200,
    # mistralai/Mistral-7B-v0.1 ("7.24B" on the model page; Jiang et al. 2023, arXiv:2310.06825,
    # "7B"). The exact figures of the three models below are transformers' own count of the
    # architecture built from the published config.json (transformers 5.24 on the meta device,
    # AutoModelForCausalLM.from_config, checked when these entries were written); the
    # publishers' rounded figures are asserted in test_published_rounded_new_models.
    "mistral-7b": 7_241_732_096,
    # Qwen/Qwen1.5-MoE-A2.7B ("14.3B parameters in total", model card)
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    # Qwen/Qwen2-57B-A14B ("57B", Qwen2 Technical Report, arXiv:2407.10671, Table 1)
    "qwen2-57b-a14b": 57_408_658_944,
    # openai/gpt-oss-120b and gpt-oss-20b (model card, arXiv:2508.10925: 116.83B and 20.91B);
    # exact figures as for the three above
    "gpt-oss-120b": 116_829_156_672,
    "gpt-oss-20b": 20_914_757_184,
    # google/gemma-2-9b and gemma-2-27b: Gemma Team 2024, arXiv:2408.00118, Table 1 prints the
    # non-embedding parameters exactly (8,324,201,984 and 26,047,480,320, checked below); the
    # embedding it prints is for a 256,128-row table, the checkpoint's has 256,000 rows
    "gemma2-9b": 9_241_705_984,
    "gemma2-27b": 27_227_128_320,
    # Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B (model cards: "30.5B in total and 3.3B
    # activated", "235B in total and 22B activated"); exact figures as for Mistral 7B above
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
}


@pytest.mark.parametrize("name", sorted(EXACT_TOTALS))
def test_published_total_exact(name):
    assert models.get(name).num_params() == EXACT_TOTALS[name]


# Counts the Megatron-LM papers print rounded to 0.1 billion (Narayanan et al. 2021, Table 1;
# Korthikanti et al. 2022, Table 3 prints "22B"): added for chapters 24 and 27.
ROUNDED_TOTALS = {"megatron-18b": 18.4, "megatron-22b": 22.0, "megatron-39b": 39.1,
                  "megatron-76b": 76.1, "megatron-146b": 145.6, "megatron-310b": 310.1,
                  "mt-nlg-530b": 529.6, "megatron-1t": 1008.0}


@pytest.mark.parametrize("name", sorted(ROUNDED_TOTALS))
def test_published_total_rounded(name):
    # 22B is printed to the billion, the others to 0.1 billion
    digits = 0 if name == "megatron-22b" else 1
    assert round(models.get(name).num_params() / 1e9, digits) == ROUNDED_TOTALS[name]


def test_every_catalog_model_has_a_published_check():
    assert set(models.names()) == (set(EXACT_TOTALS) | set(ROUNDED_TOTALS)
                                   | {"gpt3-175b", "nemotron4-340b"})


def test_published_rounded_new_models():
    # the figures the publishers print, to the digit they print
    assert round(models.get("mistral-7b").num_params() / 1e7) == 724  # HF page "7.24B"
    # Nemotron-4 340B's report names it "340B": 96 blocks of 2 h^2 (q and o) + 2 x 8 x 192 h (GQA k
    # and v) + 2 x 4 h^2 (squared-ReLU MLP, no gate), two untied 256,000 x h embeddings
    n4 = models.get("nemotron4-340b")
    h = n4.hidden
    block = 2 * h * h + 2 * h * 8 * 192 + 2 * h * 4 * h + 2 * 2 * h      # two LayerNorms
    assert n4.num_params() == 96 * block + 2 * 256000 * h + 2 * h   # and the final LayerNorm
    assert round(n4.num_params() / 1e10) == 34
    qwen = models.get("qwen1.5-moe-a2.7b")
    assert round(qwen.num_params() / 1e8) == 143  # "14.3B parameters in total"
    assert round(qwen.num_active_params() / 1e8) == 27  # "2.7B activated parameters"
    # qwenlm.github.io/blog/qwen-moe/: "2.0 billion non-embedding parameters" activated: the
    # count without the embedding and the head is 2.07B, which the blog truncates
    non_embedding = qwen.num_active_params() - 2 * qwen.vocab * qwen.hidden
    assert int(non_embedding / 1e8) == 20
    qwen2 = models.get("qwen2-57b-a14b")
    assert round(qwen2.num_params() / 1e9) == 57 and round(qwen2.num_active_params() / 1e9) == 14
    # Qwen3 model cards: 30.5B total, 3.3B activated, 29.9B non-embedding; 235B, 22B, 234B.
    # The activated 3.35B is printed as 3.3B: truncated, like the Qwen1.5 blog's 2.0B
    small, large = models.get("qwen3-30b-a3b"), models.get("qwen3-235b-a22b")
    assert round(small.num_params() / 1e8) == 305 and int(small.num_active_params() / 1e8) == 33
    assert round(large.num_params() / 1e9) == 235 and round(large.num_active_params() / 1e9) == 22
    for cfg, unit, non_embedding in ((small, 1e8, 299), (large, 1e9, 234)):
        body = cfg.num_params() - cfg.num_embedding_params() - cfg.vocab * cfg.hidden
        assert round(body / unit) == non_embedding
    # gpt-oss model card: 116.83B total, 5.13B active; 20.91B and 3.61B. Its active count
    # leaves out the input embedding (the unembedding is a matmul every token pays)
    for name, total, active in (("gpt-oss-120b", 11683, 513), ("gpt-oss-20b", 2091, 361)):
        cfg = models.get(name)
        assert round(cfg.num_params() / 1e7) == total
        assert round(cfg.num_active_params(include_embedding=False) / 1e7) == active


def test_gpt3_175b_within_rounding():
    # Brown et al. 2020, Table 2.1 lists "175.0B" (rounded to 0.1B); the count here rests on
    # the GPT-2 assumptions named in the config's source (vocab 50257, learned positions,
    # biases, tied head), so we ask for the published figure to within 0.5%.
    cfg = models.get("gpt3-175b")
    assert abs(cfg.num_params() - 175.0e9) / 175.0e9 < 0.005
    assert round(cfg.num_params() / 1e9) == 175


def test_gpt3_closed_form():
    # The GPT block formula, derived independently: 12 d^2 + 13 d per layer (4 d^2 + 4 d
    # attention, 8 d^2 + 5 d MLP, 4 d for two LayerNorms), plus V d + S d + 2 d.
    cfg = models.get("gpt3-175b")
    d, L, V, S = cfg.hidden, cfg.layers, cfg.vocab, cfg.max_seq
    assert cfg.num_params() == L * (12 * d * d + 13 * d) + V * d + S * d + 2 * d


def test_llama_closed_form():
    # Llama block: q,o = d^2 each; k,v = d * kv*hd each; SwiGLU 3 d f; two RMSNorm weights.
    for name in ("llama2-7b", "llama2-70b", "llama3-8b", "llama3-405b"):
        c = models.get(name)
        d, f, kvd = c.hidden, c.ffn_hidden, c.kv_heads * c.head_dim
        layer = 2 * d * d + 2 * d * kvd + 3 * d * f + 2 * d
        assert c.num_params() == c.layers * layer + 2 * c.vocab * d + d


def test_mixtral_8x22b_instruct_vocab():
    # mistralai/Mixtral-8x22B-Instruct-v0.1 differs only in vocab_size (32768).
    cfg = dataclasses.replace(models.get("mixtral-8x22b"), vocab=32768)
    assert cfg.num_params() == 140_630_071_296


# --------------------------------------------------------------------------- active parameters
def test_mixtral_8x7b_active():
    # Mistral AI: "12.9B" parameters per token (Mixtral paper: "13B active"). Exact: total
    # minus 6 idle experts of 3 * 4096 * 14336 in each of 32 layers.
    cfg = models.get("mixtral-8x7b")
    assert cfg.num_active_params() == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248
    assert round(cfg.num_active_params() / 1e8) == 129


def test_mixtral_8x22b_active():
    # Mistral AI: "39B active parameters out of 141B".
    cfg = models.get("mixtral-8x22b")
    assert round(cfg.num_active_params() / 1e9) == 39


def test_deepseek_v3_active():
    cfg = models.get("deepseek-v3")
    # Paper (arXiv:2412.19437): "37B activated for each token", embeddings counted.
    assert abs(cfg.num_active_params() - 37e9) / 37e9 < 0.02
    assert cfg.num_active_params() == 37_552_297_472
    # README_WEIGHTS.md (first version): "36.6B (including 0.9B for the output Head)": the
    # input embedding lookup not counted.
    assert round(cfg.num_active_params(include_embedding=False) / 1e8) == 366


def test_dense_active_equals_total():
    for name in models.names():
        cfg = models.get(name)
        if not cfg.is_moe:
            assert cfg.num_active_params() == cfg.num_params()


# --------------------------------------------------------------------------- DeepSeek-V3 checkpoint
def _fp8_block_scales(cfg):
    """Number of FP8 block scales (one float32 per 128 x 128 block of every FP8 weight) in
    DeepSeek-V3's checkpoint; every linear layer except the router and eh_proj is FP8."""
    def blocks(out_f, in_f):
        return math.ceil(out_f / 128) * math.ceil(in_f / 128)

    h, heads = cfg.hidden, cfg.heads
    attn = (blocks(cfg.q_lora_rank, h)
            + blocks(heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim), cfg.q_lora_rank)
            + blocks(cfg.kv_lora_rank + cfg.qk_rope_head_dim, h)
            + blocks(heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank)
            + blocks(h, heads * cfg.v_head_dim))
    expert = 2 * blocks(cfg.expert_ffn_hidden, h) + blocks(h, cfg.expert_ffn_hidden)
    dense = 2 * blocks(cfg.ffn_hidden, h) + blocks(h, cfg.ffn_hidden)
    moe_blocks = cfg.layers - cfg.dense_layers + cfg.mtp_layers
    return (cfg.dense_layers * (attn + dense)
            + moe_blocks * (attn + (cfg.experts + cfg.shared_experts) * expert))


def test_deepseek_v3_checkpoint_exact():
    # The Hugging Face Hub's safetensors summary of deepseek-ai/DeepSeek-V3:
    # {"BF16": 3918786560, "F8_E4M3": 680571043840, "F32": 41555600}, total 684,531,386,000
    # ("685B" on the model page: "671B of the Main Model weights and 14B of the
    # Multi-Token Prediction (MTP) Module weights"). The F32 tensors are the FP8 block scales
    # (weight_scale_inv, not parameters) and the routers' e_score_correction_bias.
    cfg = models.get("deepseek-v3")
    bf16, f8, f32 = 3_918_786_560, 680_571_043_840, 41_555_600
    router_biases = (cfg.layers - cfg.dense_layers + cfg.mtp_layers) * cfg.experts
    assert f32 == _fp8_block_scales(cfg) + router_biases
    stored = cfg.num_params() + cfg.num_mtp_params(stored_copies=True)
    assert stored == bf16 + f8 + router_biases == 684_489_845_504
    assert stored + _fp8_block_scales(cfg) == 684_531_386_000


def test_deepseek_v3_mtp():
    cfg = models.get("deepseek-v3")
    # README_WEIGHTS.md: MTP "11.5B unique parameters, excluding the shared 0.9B Embedding
    # and 0.9B output Head"; its transformer block alone is 11.507B, with eh_proj and norms
    # 11.61B.
    assert round(cfg.layer_params(cfg.layers - 1) / 1e8) == 115
    assert round(cfg.num_mtp_params() / 1e9, 1) == 11.6
    assert cfg.num_mtp_params(stored_copies=True) - cfg.num_mtp_params() == 2 * cfg.vocab * cfg.hidden
    # "14B of MTP module weights" counts the stored copies: 13.46B.
    assert round(cfg.num_mtp_params(stored_copies=True) / 1e9) == 13
    assert cfg.num_params(include_mtp=True) == cfg.num_params() + cfg.num_mtp_params()
    assert models.get("llama3-8b").num_mtp_params() == 0


def test_deepseek_v3_attention_exact():
    # MLA per block, from config.json's widths.
    cfg = models.get("deepseek-v3")
    h = 7168
    expected = (h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h)
    assert cfg.attention_params() == expected


# --------------------------------------------------------------------------- breakdown
KEYS = {"embedding", "positions", "attention", "mlp", "routed_experts", "shared_experts",
        "router", "norms", "head", "mtp"}


@pytest.mark.parametrize("name", models.names())
def test_breakdown_sums_to_total(name):
    cfg = models.get(name)
    for mtp in (False, True):
        b = cfg.param_breakdown(include_mtp=mtp)
        assert set(b) == KEYS
        assert all(v >= 0 for v in b.values())
        assert sum(b.values()) == cfg.num_params(include_mtp=mtp)
    assert sum(cfg.layer_params(i) for i in range(cfg.layers)) == (
        cfg.num_params() - cfg.num_embedding_params()
        - (0 if cfg.tied_embeddings else cfg.vocab * cfg.hidden)
        - (cfg.norm_params(cfg.hidden) if cfg.final_norm else 0)
        - (cfg.norm_params(cfg.hidden) if cfg.embedding_norm else 0))


def test_breakdown_details():
    llama = models.get("llama2-7b").param_breakdown()
    assert llama["head"] == llama["embedding"] == 32000 * 4096
    assert llama["positions"] == llama["router"] == llama["routed_experts"] == 0
    gpt = models.get("gpt3-175b").param_breakdown()
    assert gpt["head"] == 0 and gpt["positions"] == 2048 * 12288
    mix = models.get("mixtral-8x7b").param_breakdown()
    assert mix["mlp"] == 0 and mix["router"] == 32 * 4096 * 8
    assert mix["routed_experts"] == 32 * 8 * 3 * 4096 * 14336
    ds = models.get("deepseek-v3").param_breakdown()
    assert ds["mlp"] == 3 * 3 * 7168 * 18432
    assert ds["shared_experts"] == 58 * 3 * 7168 * 2048
    assert ds["router"] == 58 * (7168 * 256 + 256)


def test_bloom_closed_form_and_embedding():
    # The BigScience README's sizes, derived independently: 12 h^2 + 13 h per block, the
    # tied 250880 x h embedding (the model card's "3,596,615,680 embedding parameters"), and
    # 2 h for each of the two extra LayerNorms (after the embedding, at the end); ALiBi and
    # the embedding norm are what set BLOOM apart from the GPT-3 block.
    cfg = models.get("bloom-176b")
    h, L, V = cfg.hidden, cfg.layers, cfg.vocab
    assert cfg.num_embedding_params() == 3_596_615_680
    assert cfg.num_params() == L * (12 * h * h + 13 * h) + V * h + 2 * 2 * h
    plain = dataclasses.replace(cfg, embedding_norm=False)
    assert cfg.num_params() - plain.num_params() == 2 * h
    assert dataclasses.replace(cfg, positions="learned").num_params() - cfg.num_params() == 2048 * h


def test_embedding_params():
    assert models.get("llama3-8b").num_embedding_params() == 128256 * 4096
    assert models.get("gpt3-175b").num_embedding_params() == (50257 + 2048) * 12288


def test_layer_helpers():
    ds = models.get("deepseek-v3")
    assert not ds.is_moe_layer(2) and ds.is_moe_layer(3)
    assert ds.layer_params(0) < ds.layer_params(3)
    with pytest.raises(ValueError, match="index"):
        ds.layer_params(61)
    with pytest.raises(ValueError, match="index"):
        ds.is_moe_layer(-1)


# --------------------------------------------------------------------------- catalog access
def test_get_is_case_insensitive():
    assert models.get("LLaMA2-7B") is models.get("llama2-7b")
    assert models.get(" llama3_8b ") is models.get("llama3-8b")


def test_get_unknown_lists_names():
    with pytest.raises(ValueError) as err:
        models.get("gpt5")
    for name in models.names():
        assert name in str(err.value)
    with pytest.raises(ValueError):
        models.get(7)


def test_catalog_entries_cite_sources():
    for name in models.names():
        cfg = models.get(name)
        assert cfg.name == name
        assert len(cfg.source) > 20


def test_catalog_has_the_required_models():
    required = {"gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
                "llama3-405b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "mistral-7b",
                "qwen1.5-moe-a2.7b", "qwen2-57b-a14b", "gpt-oss-120b", "gpt-oss-20b",
                "qwen3-30b-a3b", "qwen3-235b-a22b", "gemma2-9b", "gemma2-27b"}
    assert required <= set(models.names())


def test_head_dim():
    assert models.get("llama3-8b").head_dim == 128
    assert models.get("gpt3-175b").head_dim == 128
    assert models.get("deepseek-v3").head_dim == 192  # 128 without RoPE + 64 with
    assert models.tiny(explicit_head_dim=32).head_dim == 32
    assert models.tiny(hidden=128).head_dim == 32  # derived, never stale after replace


# --------------------------------------------------------------------------- tiny and replace
def test_tiny_defaults_and_overrides():
    cfg = models.tiny()
    assert (cfg.hidden, cfg.layers, cfg.heads, cfg.vocab, cfg.max_seq) == (64, 2, 4, 256, 64)
    assert TransformerConfig.tiny() == cfg
    moe = models.tiny(experts=4, experts_per_token=2)
    assert moe.is_moe and moe.num_active_params() < moe.num_params()


def test_replace_revalidates():
    cfg = models.get("llama3-8b")
    bigger = dataclasses.replace(cfg, layers=64)
    assert bigger.num_params() > cfg.num_params()
    with pytest.raises(ValueError, match="kv_heads"):
        dataclasses.replace(cfg, kv_heads=5)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.get("llama2-7b").hidden = 1


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("overrides, field", [
    (dict(hidden=65), "hidden"),
    (dict(kv_heads=3), "kv_heads"),
    (dict(kv_heads=8), "kv_heads"),
    (dict(hidden=-64), "hidden"),
    (dict(layers=0), "layers"),
    (dict(vocab=0), "vocab"),
    (dict(ffn_hidden=2.5), "ffn_hidden"),
    (dict(heads=True), "heads"),
    (dict(mlp="relu"), "mlp"),
    (dict(norm="batchnorm"), "norm"),
    (dict(positions="sinusoidal"), "positions"),
    (dict(embedding_norm=1), "embedding_norm"),
    (dict(norm_bias=True), "norm_bias"),
    (dict(attn_bias="yes"), "attn_bias"),
    (dict(experts=4, experts_per_token=5), "experts_per_token"),
    (dict(experts=4, experts_per_token=0), "experts_per_token"),
    (dict(experts=4, experts_per_token=2, dense_layers=3), "dense_layers"),
    (dict(shared_experts=1), "shared_experts"),
    (dict(experts_per_token=2), "experts_per_token"),
    (dict(router_bias=True), "router_bias"),
    (dict(expert_ffn_hidden=32), "expert_ffn_hidden"),
    (dict(experts=-1), "experts"),
    (dict(qk_rope_head_dim=8), "qk_rope_head_dim"),
    (dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4), "v_head_dim"),
    (dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=3, v_head_dim=8), "qk_rope_head_dim"),
    (dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, kv_heads=2), "kv_heads"),
    (dict(explicit_head_dim=0), "explicit_head_dim"),
    (dict(hidden=60, heads=4, kv_heads=4), "head_dim"),  # 15 is odd: no rotary pairs
    (dict(name=""), "name"),
    (dict(sliding_window=-1), "sliding_window"),
    (dict(global_every=2), "global_every"),
    (dict(sliding_window=8, global_every=1.5), "global_every"),
    (dict(attn_bias=True, qkv_bias=True), "qkv_bias"),
    (dict(qkv_bias=1), "qkv_bias"),
    (dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, qkv_bias=True),
     "qkv_bias"),
    (dict(shared_expert_gate=True), "shared_expert_gate"),
    (dict(shared_expert_ffn_hidden=32), "shared_expert_ffn_hidden"),
    (dict(experts=4, experts_per_token=2, shared_expert_gate=True), "shared_expert_gate"),
    (dict(experts=4, experts_per_token=2, shared_expert_ffn_hidden=32), "shared_expert_ffn_hidden"),
    (dict(experts=4, experts_per_token=2, shared_experts=1, shared_expert_ffn_hidden=0),
     "shared_expert_ffn_hidden"),
    (dict(attention_sinks="yes"), "attention_sinks"),
    (dict(sandwich_norms=1), "sandwich_norms"),
    (dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, qk_norm=True),
     "qk_norm"),
    (dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
          attention_sinks=True), "attention_sinks"),
])
def test_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        models.tiny(**overrides)


def test_explicit_head_dim_allows_indivisible_hidden():
    cfg = models.tiny(hidden=60, explicit_head_dim=16)
    assert cfg.attention_params() == 2 * 60 * 64 + 2 * 60 * 64


# --------------------------------------------------------------------------- properties
@st.composite
def configs(draw):
    kv = draw(st.sampled_from([1, 2, 4]))
    heads = kv * draw(st.integers(1, 3))
    head_dim = 2 * draw(st.integers(1, 8))
    experts = draw(st.sampled_from([0, 0, 2, 4, 8]))
    layers = draw(st.integers(1, 4))
    norm = draw(st.sampled_from(["rmsnorm", "layernorm"]))
    kw = dict(name="random", hidden=heads * head_dim, layers=layers, heads=heads, kv_heads=kv,
              ffn_hidden=draw(st.integers(1, 96)), vocab=draw(st.integers(1, 300)),
              max_seq=draw(st.integers(1, 128)), mlp=draw(st.sampled_from(["swiglu", "gelu"])),
              norm=norm, norm_bias=norm == "layernorm" and draw(st.booleans()),
              attn_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
              tied_embeddings=draw(st.booleans()),
              positions=draw(st.sampled_from(["rotary", "learned"])), final_norm=draw(st.booleans()))
    # the fields of the architectures trained now: none of them may break a count's identity
    window = draw(st.sampled_from([0, 0, 4, 16]))
    kw.update(mlp=draw(st.sampled_from(["swiglu", "geglu", "gelu"])), sliding_window=window,
              global_every=draw(st.integers(0, 3)) if window else 0,
              qkv_bias=not kw["attn_bias"] and draw(st.booleans()),
              attention_sinks=draw(st.booleans()), qk_norm=draw(st.booleans()),
              sandwich_norms=draw(st.booleans()))
    if experts:
        shared = draw(st.integers(0, 2))
        kw.update(experts=experts, experts_per_token=draw(st.integers(1, experts)),
                  shared_experts=shared, expert_ffn_hidden=draw(st.integers(1, 64)),
                  dense_layers=draw(st.integers(0, layers)), router_bias=draw(st.booleans()))
        if shared:
            kw.update(shared_expert_ffn_hidden=draw(st.one_of(st.none(), st.integers(1, 64))),
                      shared_expert_gate=draw(st.booleans()))
    return TransformerConfig(**kw)


@settings(max_examples=200, deadline=None)
@given(configs())
def test_counts_are_consistent(cfg):
    b = cfg.param_breakdown()
    assert sum(b.values()) == cfg.num_params()
    assert 0 < cfg.num_active_params(include_embedding=False) <= cfg.num_active_params() <= cfg.num_params()
    if not cfg.is_moe or cfg.experts_per_token == cfg.experts or cfg.dense_layers == cfg.layers:
        assert cfg.num_active_params() == cfg.num_params()
    else:
        assert cfg.num_active_params() < cfg.num_params()


@settings(max_examples=100, deadline=None)
@given(configs(), st.integers(1, 3))
def test_monotone_in_layers_and_vocab(cfg, extra):
    more_layers = dataclasses.replace(cfg, layers=cfg.layers + extra)
    assert more_layers.num_params() > cfg.num_params()
    more_vocab = dataclasses.replace(cfg, vocab=cfg.vocab + extra)
    per_token = cfg.hidden * (1 if cfg.tied_embeddings else 2)
    assert more_vocab.num_params() - cfg.num_params() == extra * per_token


# --------------------------------------------------------------------------- Qwen2-MoE, sliding windows
def test_qwen_moe_block_exact():
    # Qwen2-MoE's block, written out from transformers' modeling_qwen2_moe.py: q, k, v with
    # biases and o without; a router hidden x 60; 60 experts of width 1408; one shared expert
    # of width 5632 with a hidden -> 1 sigmoid gate; two RMSNorms.
    cfg = models.get("qwen1.5-moe-a2.7b")
    h = 2048
    attention = 4 * h * h + 3 * h
    moe = h * 60 + 60 * 3 * h * 1408 + 3 * h * 5632 + h
    assert cfg.layer_params(0) == attention + moe + 2 * h
    assert cfg.num_params() == 24 * (attention + moe + 2 * h) + 2 * 151936 * h + h
    b = cfg.param_breakdown()
    assert b["shared_experts"] == 24 * (3 * h * 5632 + h)
    assert cfg.shared_ffn_hidden == 5632 and cfg.moe_ffn_hidden == 1408
    # a DeepSeek shared expert is routed-expert sized
    assert models.get("deepseek-v3").shared_ffn_hidden == 2048


def test_gemma2_published_non_embedding_exact():
    for name, non_embedding, paper_embedding in (("gemma2-9b", 8_324_201_984, 917_962_752),
                                                 ("gemma2-27b", 26_047_480_320, 1_180_237_824)):
        cfg = models.get(name)
        assert cfg.num_params() - cfg.num_embedding_params() == non_embedding
        assert paper_embedding == 256128 * cfg.hidden  # the paper's table, 128 rows larger
        assert cfg.gated_mlp and cfg.tied_embeddings
        assert cfg.layer_breakdown(0)["norms"] == 4 * cfg.hidden  # sandwich norms
        assert cfg.attention_window(0) == 4096 and cfg.attention_window(1) is None


def test_gpt_oss_block_exact():
    # transformers' GptOss block: q, k, v, o with biases (64 heads of 64, 8 KV heads), one
    # sink per head, a router with bias, 128 experts with biased gate_up (2 x 2880) and down
    cfg = models.get("gpt-oss-120b")
    h, f, q, kv = 2880, 2880, 64 * 64, 8 * 64
    attention = 2 * h * q + q + h + 2 * (h * kv + kv) + 64
    experts = 128 * (3 * h * f + 2 * f + h)
    assert cfg.attention_params() == attention
    assert cfg.layer_params(0) == attention + experts + (h * 128 + 128) + 2 * h
    assert [cfg.attention_window(i) for i in range(4)] == [128, None, 128, None]


def test_qkv_bias_adds_three_biases():
    base = models.tiny(kv_heads=2)
    qwen = models.tiny(kv_heads=2, qkv_bias=True)
    full = models.tiny(kv_heads=2, attn_bias=True)
    q, kv = base.heads * base.head_dim, base.kv_heads * base.head_dim
    assert qwen.attention_params() - base.attention_params() == q + 2 * kv
    assert full.attention_params() - qwen.attention_params() == base.hidden  # o's bias


def test_sliding_window_layers():
    mistral = models.get("mistral-7b")
    assert mistral.is_swa and mistral.windowed_layers() == 32
    assert {mistral.attention_window(i) for i in range(32)} == {4096}
    assert models.get("mixtral-8x7b").attention_window(0) is None  # Mixtral: full attention
    assert models.get("llama3-8b").windowed_layers() == 0
    # Gemma 2: windowed, full, windowed, ... ; Gemma 3: five windowed to one full
    gemma2 = models.tiny(layers=6, sliding_window=16, global_every=2)
    assert [gemma2.attention_window(i) for i in range(6)] == [16, None] * 3
    gemma3 = models.tiny(layers=7, sliding_window=16, global_every=6)
    assert [gemma3.attention_window(i) for i in range(7)] == [16] * 5 + [None, 16]
    assert gemma3.windowed_layers() == 6
    # a window changes no weight
    assert gemma2.num_params() == models.tiny(layers=6).num_params()
    with pytest.raises(ValueError, match="index"):
        mistral.attention_window(32)


# --------------------------------------------------------------------------- from_hf_config
# The published config.json files, field by field. Where a whole file is given it is the file
# as published (Hugging Face model repositories, main branch); for Qwen2-57B-A14B and the
# DeepSeek-V2 pair only the fields that set a shape are copied (the rest change no weight).
LLAMA3_8B = {  # huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256}
MISTRAL_7B = {  # huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000}
MIXTRAL_8X7B = {  # huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
MIXTRAL_8X22B = {  # huggingface.co/mistral-community/Mixtral-8x22B-v0.1/blob/main/config.json
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 6144, "initializer_range": 0.02,
    "intermediate_size": 16384, "max_position_embeddings": 65536, "model_type": "mixtral",
    "num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 56,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0", "use_cache": True, "vocab_size": 32000}
QWEN15_MOE = {  # huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24,
    "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.39.0.dev0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
    "norm_topk_prob": False, "output_router_logits": False, "router_aux_loss_coef": 0.001}
QWEN2_57B = {  # huggingface.co/Qwen/Qwen2-57B-A14B/blob/main/config.json (shape fields)
    "model_type": "qwen2_moe", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "vocab_size": 151936, "max_position_embeddings": 65536,
    "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480, "num_experts": 64,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "use_sliding_window": False,
    "tie_word_embeddings": False}
DEEPSEEK_V3 = {  # huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (auto_map and
    # rope_scaling's YaRN values left out: they change no weight); the shapes agree with
    # github.com/deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06, "rope_theta": 10000, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False, "topk_group": 4,
    "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280}
# github.com/deepseek-ai/DeepSeek-V3 inference/configs/config_236B.json (DeepSeek-V2) and
# config_16B.json (DeepSeek-V2-Lite), under the Hugging Face names of the deepseek_v2 type
DEEPSEEK_V2 = {
    "model_type": "deepseek_v2", "hidden_size": 5120, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "num_hidden_layers": 60, "first_k_dense_replace": 1,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 160,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
    "max_position_embeddings": 163840, "topk_method": "group_limited_greedy"}
DEEPSEEK_V2_LITE = dict(
    DEEPSEEK_V2, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
    num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64,
    q_lora_rank=None, topk_method="greedy")

GPT_OSS_120B = {  # huggingface.co/openai/gpt-oss-120b/blob/main/config.json (shape fields; the
    # MXFP4 quantization_config and YaRN rope_scaling change no weight)
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "experts_per_token": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "vocab_size": 201088}

GEMMA2_9B = {  # huggingface.co/google/gemma-2-9b/blob/main/config.json
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
    "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32",
    "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 256000}

QWEN3_30B = {  # huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (shape fields)
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "mlp_only_layers": [],
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "sliding_window": None, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936}

HF_FILES = {"qwen3-30b-a3b": QWEN3_30B, "gemma2-9b": GEMMA2_9B, "gpt-oss-120b": GPT_OSS_120B, "llama3-8b": LLAMA3_8B,
            "mistral-7b": MISTRAL_7B, "mixtral-8x7b": MIXTRAL_8X7B,
            "mixtral-8x22b": MIXTRAL_8X22B, "qwen1.5-moe-a2.7b": QWEN15_MOE,
            "qwen2-57b-a14b": QWEN2_57B, "deepseek-v3": DEEPSEEK_V3}


def _write(tmp_path, data, folder="model"):
    import json

    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("name", sorted(HF_FILES))
def test_from_hf_config_file_matches_published_count(tmp_path, name):
    path = _write(tmp_path, HF_FILES[name], folder=name)
    cfg = models.from_hf_config(path)
    assert cfg.name == name and str(path) in cfg.source
    assert cfg.num_params() == EXACT_TOTALS[name]
    catalog = models.get(name)
    assert cfg.num_active_params() == catalog.num_active_params()
    assert cfg.num_mtp_params() == catalog.num_mtp_params()
    # the same model as the catalog's entry, field by field (max_seq is the file's)
    assert dataclasses.replace(cfg, name=name, source=catalog.source,
                               max_seq=catalog.max_seq) == catalog
    # a folder holding config.json, and the parsed dict, read the same
    assert models.from_hf_config(path.parent) == cfg
    assert dataclasses.replace(models.from_hf_config(HF_FILES[name]), name=name,
                               source=cfg.source) == cfg


def test_from_hf_config_deepseek_v2():
    # DeepSeek-V2 (arXiv:2405.04434): "236B total parameters, of which 21B are activated";
    # DeepSeek-V2-Lite: "15.7B". Exact: transformers' count of the same configs.
    v2 = models.from_hf_config(DEEPSEEK_V2)
    assert v2.num_params() == 235_741_434_880
    assert round(v2.num_params() / 1e9) == 236 and round(v2.num_active_params() / 1e9) == 21
    lite = models.from_hf_config(DEEPSEEK_V2_LITE)
    assert lite.q_lora_rank == 0 and lite.num_params() == 15_706_484_224
    assert round(lite.num_params() / 1e8) == 157
    assert not v2.router_bias and v2.mtp_layers == 0


def test_from_hf_config_layer_types():
    base = dict(MISTRAL_7B, num_hidden_layers=4)
    gemma_like = models.from_hf_config(dict(base, layer_types=["sliding_attention",
                                                               "full_attention"] * 2))
    assert (gemma_like.sliding_window, gemma_like.global_every) == (4096, 2)
    full = models.from_hf_config(dict(base, layer_types=["full_attention"] * 4))
    assert full.sliding_window == 0
    windowed = models.from_hf_config(dict(base, layer_types=["sliding_attention"] * 4))
    assert (windowed.sliding_window, windowed.global_every) == (4096, 0)
    with pytest.raises(ValueError, match="layer_types"):
        models.from_hf_config(dict(base, layer_types=["full_attention", "sliding_attention",
                                                      "sliding_attention", "full_attention"]))
    with pytest.raises(ValueError, match="layer_types"):
        models.from_hf_config(dict(base, layer_types=["full_attention"] * 3))


def _drop(data, key):
    return {k: v for k, v in data.items() if k != key}


@pytest.mark.parametrize("data, field", [
    (_drop(MIXTRAL_8X7B, "num_local_experts"), "num_local_experts"),
    (_drop(DEEPSEEK_V3, "kv_lora_rank"), "kv_lora_rank"),
    (_drop(LLAMA3_8B, "hidden_size"), "hidden_size"),
    (_drop(LLAMA3_8B, "model_type"), "model_type"),
    (dict(LLAMA3_8B, model_type="gpt2"), "model_type"),
    (dict(LLAMA3_8B, hidden_act="gelu"), "hidden_act"),
    (dict(LLAMA3_8B, attention_bias="no"), "attention_bias"),
    (dict(LLAMA3_8B, hidden_size="4096"), "hidden_size"),
    (dict(LLAMA3_8B, num_hidden_layers=0), "num_hidden_layers"),
    (dict(LLAMA3_8B, qk_layernorm=True), "qk_layernorm"),  # unknown: might add weights
    (dict(MISTRAL_7B, sliding_window=-5), "sliding_window"),
    (dict(QWEN15_MOE, use_sliding_window=True), "use_sliding_window"),
    (dict(QWEN15_MOE, decoder_sparse_step=2), "decoder_sparse_step"),
    (dict(QWEN15_MOE, mlp_only_layers=[0]), "mlp_only_layers"),
    (dict(DEEPSEEK_V3, moe_layer_freq=2), "moe_layer_freq"),
    (dict(DEEPSEEK_V3, topk_method="sinkhorn"), "topk_method"),
    (dict(MIXTRAL_8X7B, num_experts_per_tok=9), "experts_per_token"),
    (_drop(GPT_OSS_120B, "layer_types"), "layer_types"),
    (dict(GEMMA2_9B, hidden_activation="silu"), "hidden_activation"),
])
def test_from_hf_config_names_the_field_and_the_file(tmp_path, data, field):
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=field) as err:
        models.from_hf_config(path)
    assert str(path) in str(err.value)


def test_from_hf_config_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="source"):
        models.from_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        models.from_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="bad.json"):
        models.from_hf_config(bad)
    with pytest.raises(ValueError, match="source"):
        models.from_hf_config(42)
    with pytest.raises(ValueError, match="the config dict"):
        models.from_hf_config(_drop(LLAMA3_8B, "vocab_size"))


def test_from_hf_config_nemotron():
    # transformers' NemotronConfig field names with Nemotron-4 340B's figures (the report's;
    # written here, not copied from a published file): the catalog's model, field by field
    data = {"architectures": ["NemotronForCausalLM"], "model_type": "nemotron",
            "hidden_act": "relu2", "hidden_size": 18432, "intermediate_size": 73728,
            "num_hidden_layers": 96, "num_attention_heads": 96, "num_key_value_heads": 8,
            "head_dim": None, "max_position_embeddings": 4096, "vocab_size": 256000,
            "norm_eps": 1e-5, "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
            "torch_dtype": "bfloat16"}
    cfg = models.from_hf_config(data)
    catalog = models.get("nemotron4-340b")
    assert dataclasses.replace(cfg, name=catalog.name, source=catalog.source) == catalog
    with pytest.raises(ValueError, match="hidden_act"):
        models.from_hf_config(dict(data, hidden_act="silu"))
