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
    assert set(models.names()) == set(EXACT_TOTALS) | set(ROUNDED_TOTALS) | {"gpt3-175b"}


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
                "llama3-405b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"}
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
    if experts:
        kw.update(experts=experts, experts_per_token=draw(st.integers(1, experts)),
                  shared_experts=draw(st.integers(0, 2)), expert_ffn_hidden=draw(st.integers(1, 64)),
                  dense_layers=draw(st.integers(0, layers)), router_bias=draw(st.booleans()))
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
