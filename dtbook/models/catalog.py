"""The model catalog of :mod:`dtbook.models`: the published models the book uses, each a
:class:`~dtbook.models.TransformerConfig` holding its architecture figures and their source;
:func:`names` lists them and :func:`get` looks one up. (Chapter 01; the GPTs of the
Megatron-LM papers, chapters 24 and 27.)
"""

from __future__ import annotations

from .config import TransformerConfig

__all__ = ["get", "names"]

# Architecture figures only, as each source gives them. The counts are computed.

_HF = "https://huggingface.co/"

_CATALOG: dict[str, TransformerConfig] = {c.name: c for c in (
    TransformerConfig(
        name="gpt3-175b", hidden=12288, layers=96, heads=96, kv_heads=96, ffn_hidden=4 * 12288,
        vocab=50257, max_seq=2048, mlp="gelu", norm="layernorm", norm_bias=True,
        attn_bias=True, mlp_bias=True, tied_embeddings=True, positions="learned",
        source=("Brown et al. 2020, 'Language Models are Few-Shot Learners', arXiv:2005.14165, "
                "Table 2.1 (96 layers, d_model 12288, 96 heads of 128, context 2048) and Sec. 2.1 "
                "(d_ff = 4 d_model; 'the same model and architecture as GPT-2'). Assumed from "
                "GPT-2 (Radford et al. 2019): BPE vocabulary 50257, learned positions, pre-norm "
                "LayerNorm with bias, biases in every linear layer, final LayerNorm, output head "
                "tied to the token embedding. The sparse attention layers have no extra weights."),
    ),
    TransformerConfig(
        name="bloom-176b", hidden=14336, layers=70, heads=112, kv_heads=112, ffn_hidden=4 * 14336,
        vocab=250880, max_seq=2048, mlp="gelu", norm="layernorm", norm_bias=True,
        attn_bias=True, mlp_bias=True, tied_embeddings=True, positions="alibi",
        embedding_norm=True,
        source=(_HF + "bigscience/bloom/blob/main/config.json (hidden 14336, 70 layers, 112 "
                "heads, vocab_size 250880) and the model card ('176,247,271,424 parameters: "
                "3,596,615,680 embedding parameters'; LayerNorm on the word embeddings, ALiBi, "
                "GeLU); github.com/bigscience-workshop/bigscience train/tr11-176B-ml/README.md "
                "(one block 12h^2 + 13h, tied embedding padded to 250880, sequence 2048). "
                "Le Scao et al. 2022, arXiv:2211.05100"),
    ),
    TransformerConfig(
        name="llama2-7b", hidden=4096, layers=32, heads=32, kv_heads=32, ffn_hidden=11008,
        vocab=32000, max_seq=4096,
        source=_HF + "meta-llama/Llama-2-7b-hf/blob/main/config.json (Touvron et al. 2023, arXiv:2307.09288)",
    ),
    TransformerConfig(
        name="llama2-13b", hidden=5120, layers=40, heads=40, kv_heads=40, ffn_hidden=13824,
        vocab=32000, max_seq=4096,
        source=_HF + "meta-llama/Llama-2-13b-hf/blob/main/config.json (Touvron et al. 2023, arXiv:2307.09288)",
    ),
    TransformerConfig(
        name="llama2-70b", hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672,
        vocab=32000, max_seq=4096,
        source=_HF + "meta-llama/Llama-2-70b-hf/blob/main/config.json (Touvron et al. 2023, arXiv:2307.09288)",
    ),
    TransformerConfig(
        name="llama3-8b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=128256, max_seq=8192,
        source=_HF + "meta-llama/Meta-Llama-3-8B/blob/main/config.json",
    ),
    TransformerConfig(
        name="llama3-70b", hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672,
        vocab=128256, max_seq=8192,
        source=_HF + "meta-llama/Meta-Llama-3-70B/blob/main/config.json",
    ),
    TransformerConfig(
        name="llama3-405b", hidden=16384, layers=126, heads=128, kv_heads=8, ffn_hidden=53248,
        vocab=128256, max_seq=131072,
        source=(_HF + "meta-llama/Llama-3.1-405B/blob/main/config.json (405B was released as "
                "Llama 3.1; github.com/meta-llama/llama-models models/sku_list.py: dim 16384, "
                "126 layers, 128 heads, 8 KV heads, ffn_dim_multiplier 1.2, multiple_of 4096 "
                "-> FFN width 53248)"),
    ),
    TransformerConfig(
        name="nemotron4-340b", hidden=18432, layers=96, heads=96, kv_heads=8,
        ffn_hidden=4 * 18432, vocab=256000, max_seq=4096, mlp="relu2", norm="layernorm",
        norm_bias=True,
        source=("NVIDIA 2024, 'Nemotron-4 340B Technical Report', arXiv:2406.11704, Sec. 2.1 "
                "(96 layers, hidden 18432, 96 heads, 8 KV heads, sequence 4096, vocabulary "
                "256,000; RoPE, squared-ReLU MLP, no biases, untied input and output "
                "embeddings); the FFN width 73728 = 4 x 18432 and LayerNorm (weight and bias, "
                "Megatron's 'layernorm1p') from NVIDIA NeMo's Nemotron4Config340B "
                "(nemo/collections/llm/gpt/model/nemotron.py at 8cfedd7) and NeMo-Megatron-"
                "Launcher's conf/training/nemotron/nemotron_340b.yaml (4550dc9)"),
    ),
    TransformerConfig(
        name="mixtral-8x7b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=32000, max_seq=32768, experts=8, experts_per_token=2, expert_ffn_hidden=14336,
        source=_HF + "mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (Jiang et al. 2024, arXiv:2401.04088)",
    ),
    TransformerConfig(
        name="mixtral-8x22b", hidden=6144, layers=56, heads=48, kv_heads=8, ffn_hidden=16384,
        vocab=32000, max_seq=65536, experts=8, experts_per_token=2, expert_ffn_hidden=16384,
        source=(_HF + "mistral-community/Mixtral-8x22B-v0.1/blob/main/config.json (the base "
                "model as first released, vocabulary 32000; the Instruct release, "
                "mistralai/Mixtral-8x22B-Instruct-v0.1, has vocab_size 32768)"),
    ),
    TransformerConfig(
        name="deepseek-v3", hidden=7168, layers=61, heads=128, kv_heads=128, ffn_hidden=18432,
        vocab=129280, max_seq=163840, experts=256, experts_per_token=8, shared_experts=1,
        expert_ffn_hidden=2048, dense_layers=3, router_bias=True, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        mtp_layers=1, router_groups=8, router_group_topk=4,
        source=(_HF + "deepseek-ai/DeepSeek-V3/blob/main/config.json and README_WEIGHTS.md "
                "(DeepSeek-AI 2024, arXiv:2412.19437). Modelled exactly as the checkpoint "
                "stores it: MLA with q_lora_rank 1536, kv_lora_rank 512, per-head widths "
                "128 (no RoPE) + 64 (RoPE) for q/k and 128 for v; the first 3 of 61 blocks dense "
                "(width 18432), the other 58 with 256 routed experts (top 8) and 1 shared expert "
                "of width 2048, a router without bias plus a stored per-expert "
                "e_score_correction_bias (router_bias); untied head. num_params() is the "
                "main model (the paper's 671B); the one multi-token-prediction module is "
                "num_mtp_params(): its own weights, or with stored_copies=True as the "
                "checkpoint stores it, with copies of the embedding and head (the 685B total). "
                "FP8 block scales (weight_scale_inv) are not parameters and are not counted."),
    ),
)}

# Chapters 24 and 27: the GPT models of the Megatron-LM papers, as the tables give them
# (layers, hidden size, heads; sequence 2048, vocabulary 51,200). The architecture otherwise is
# GPT-2/3's (GELU MLP of width 4h, LayerNorm with bias, biases everywhere, learned positions,
# tied head). 51,200 is GPT-2's 50,257-token vocabulary padded to a multiple of 1,024, what
# Megatron-LM does with 8-way tensor parallelism (--make-vocab-size-divisible-by 128 x TP).
_MEGATRON_2021 = ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU "
                  "Clusters Using Megatron-LM', arXiv:2104.04473, Table 1 (vocabulary 51,200, "
                  "sequence 2048)")
_KORTHIKANTI_2022 = ("Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large "
                     "Transformer Models', arXiv:2205.05198, Table 3 (vocabulary 51,200, sequence 2048)")


def _megatron(name, hidden, layers, heads, source):
    return TransformerConfig(
        name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
        ffn_hidden=4 * hidden, vocab=51200, max_seq=2048, mlp="gelu", norm="layernorm",
        norm_bias=True, attn_bias=True, mlp_bias=True, tied_embeddings=True,
        positions="learned", source=source + "; GPT-2/3 block assumed (see dtbook.models)")


for _cfg in (
    _megatron("megatron-18b", 6144, 40, 48, _MEGATRON_2021 + ": '18.4' billion"),
    _megatron("megatron-22b", 6144, 48, 64, _KORTHIKANTI_2022 + ": '22B'"),
    _megatron("megatron-39b", 8192, 48, 64, _MEGATRON_2021 + ": '39.1' billion"),
    _megatron("megatron-76b", 10240, 60, 80, _MEGATRON_2021 + ": '76.1' billion"),
    _megatron("megatron-146b", 12288, 80, 96, _MEGATRON_2021 + ": '145.6' billion"),
    _megatron("megatron-310b", 16384, 96, 128, _MEGATRON_2021 + ": '310.1' billion"),
    _megatron("mt-nlg-530b", 20480, 105, 128,
              "Smith et al. 2022, 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG "
              "530B', arXiv:2201.11990, Sec. 3 (105 layers, hidden 20480, 128 heads, sequence "
              "2048, GPT-2 tokenizer); " + _MEGATRON_2021 + ": '529.6' billion"),
    _megatron("megatron-1t", 25600, 128, 160, _MEGATRON_2021 + ": '1008.0' billion; "
              + _KORTHIKANTI_2022 + ": '1T'"),
):
    _CATALOG[_cfg.name] = _cfg
del _cfg


for _cfg in (
    TransformerConfig(
        name="mistral-7b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=32000, max_seq=32768, sliding_window=4096,
        source=(_HF + "mistralai/Mistral-7B-v0.1/blob/main/config.json (hidden_size 4096, 32 "
                "layers, 32 heads, 8 KV heads, intermediate_size 14336, vocab_size 32000, "
                "sliding_window 4096 in every layer, max_position_embeddings 32768, untied); "
                "Jiang et al. 2023, 'Mistral 7B', arXiv:2310.06825, Table 1 (window_size 4096)"),
    ),
    TransformerConfig(
        name="qwen1.5-moe-a2.7b", hidden=2048, layers=24, heads=16, kv_heads=16, ffn_hidden=5632,
        vocab=151936, max_seq=8192, qkv_bias=True, experts=60, experts_per_token=4,
        shared_experts=1, expert_ffn_hidden=1408, shared_expert_ffn_hidden=5632,
        shared_expert_gate=True,
        source=(_HF + "Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (model_type qwen2_moe: "
                "hidden_size 2048, 24 layers, 16 heads, 16 KV heads, num_experts 60, "
                "num_experts_per_tok 4, moe_intermediate_size 1408, "
                "shared_expert_intermediate_size 5632, decoder_sparse_step 1, vocab_size 151936, "
                "use_sliding_window false, untied); transformers' Qwen2MoE block: biases on q, k, v "
                "(not o), one shared expert with a sigmoid gate (hidden -> 1). Model card: '14.3B "
                "parameters in total and 2.7B activated'; qwenlm.github.io/blog/qwen-moe/: 2.0B "
                "activated non-embedding parameters"),
    ),
    TransformerConfig(
        name="qwen2-57b-a14b", hidden=3584, layers=28, heads=28, kv_heads=4, ffn_hidden=18944,
        vocab=151936, max_seq=65536, qkv_bias=True, experts=64, experts_per_token=8,
        shared_experts=1, expert_ffn_hidden=2560, shared_expert_ffn_hidden=20480,
        shared_expert_gate=True,
        source=(_HF + "Qwen/Qwen2-57B-A14B/blob/main/config.json (model_type qwen2_moe: "
                "hidden_size 3584, 28 layers, 28 heads, 4 KV heads, num_experts 64, "
                "num_experts_per_tok 8, moe_intermediate_size 2560, "
                "shared_expert_intermediate_size 20480, vocab_size 151936, untied); Yang et al. "
                "2024, 'Qwen2 Technical Report', arXiv:2407.10671, Table 1 (57B total, 14B "
                "activated; 64 routed experts, 8 activated, the shared expert as 8 of width "
                "2560); context 64K tokens as qwenlm.github.io/blog/qwen2/ lists it"),
    ),
    *(TransformerConfig(
        name=f"gpt-oss-{size}", hidden=2880, layers=layers, heads=64, kv_heads=8,
        explicit_head_dim=64, ffn_hidden=2880, vocab=201088, max_seq=131072, attn_bias=True,
        mlp_bias=True, attention_sinks=True, experts=experts, experts_per_token=4,
        expert_ffn_hidden=2880, router_bias=True, sliding_window=128, global_every=2,
        source=(_HF + f"openai/gpt-oss-{size}/blob/main/config.json (model_type gpt_oss: "
                f"hidden_size 2880, {layers} layers, 64 heads of head_dim 64, 8 KV heads, "
                f"num_local_experts {experts}, num_experts_per_tok 4, intermediate_size 2880, "
                "vocab_size 201088, sliding_window 128 on alternate layers (layer_types: "
                "sliding, full, ...), attention_bias true, untied); transformers' GptOss block: "
                "biases on every projection, the router and the experts, one learned attention "
                "sink per head. OpenAI 2025, 'gpt-oss-120b & gpt-oss-20b Model Card', "
                "arXiv:2508.10925, Table 1 (total and active parameters)"),
    ) for size, layers, experts in (("120b", 36, 128), ("20b", 24, 32))),
    *(TransformerConfig(
        name=f"qwen3-{size}", hidden=hidden, layers=layers, heads=heads, kv_heads=4,
        explicit_head_dim=128, ffn_hidden=ffn, vocab=151936, max_seq=40960, qk_norm=True,
        experts=128, experts_per_token=8, expert_ffn_hidden=moe_ffn,
        source=(_HF + f"Qwen/Qwen3-{size.upper()}/blob/main/config.json "
                f"(model_type qwen3_moe: hidden_size {hidden}, {layers} layers, {heads} heads "
                f"of head_dim 128, 4 KV heads, num_experts 128, num_experts_per_tok 8, "
                f"moe_intermediate_size {moe_ffn}, no shared expert, vocab_size 151936, "
                "max_position_embeddings 40960, untied); transformers' Qwen3MoE block: no "
                "attention biases, an RMSNorm over head_dim on q and on k. Model card: "
                f"{published}"),
    ) for size, hidden, layers, heads, ffn, moe_ffn, published in (
        ("30b-a3b", 2048, 48, 32, 6144, 768, "'30.5B in total and 3.3B activated'"),
        ("235b-a22b", 4096, 94, 64, 12288, 1536, "'235B in total and 22B activated'"))),
    *(TransformerConfig(
        name=f"gemma2-{size}", hidden=hidden, layers=layers, heads=heads, kv_heads=kv,
        explicit_head_dim=head_dim, ffn_hidden=ffn, vocab=256000, max_seq=8192, mlp="geglu",
        tied_embeddings=True, sandwich_norms=True, sliding_window=4096, global_every=2,
        source=(_HF + f"google/gemma-2-{size}/blob/main/config.json (model_type gemma2: "
                f"hidden_size {hidden}, {layers} layers, {heads} heads of head_dim {head_dim}, "
                f"{kv} KV heads, intermediate_size {ffn}, hidden_activation gelu_pytorch_tanh "
                "(gated), vocab_size 256000, tied, sliding_window 4096 on alternate layers, "
                "windowed first); transformers' Gemma2 block: norms before and after both "
                "attention and MLP. Gemma Team 2024, 'Gemma 2', arXiv:2408.00118, Table 1"),
    ) for size, hidden, layers, heads, kv, head_dim, ffn in (
        ("9b", 3584, 42, 16, 8, 256, 14336), ("27b", 4608, 46, 32, 16, 128, 36864))),
):
    _CATALOG[_cfg.name] = _cfg
del _cfg


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def names() -> list[str]:
    """The catalog's model names, in catalog order."""
    return list(_CATALOG)


def get(name: str) -> TransformerConfig:
    """The catalog config called ``name`` (case-insensitive; ``_`` and ``-`` alike).

    Raises ``ValueError`` listing the known names for an unknown one. (Chapter 01.)
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, one of {names()}; got {name!r}")
    try:
        return _CATALOG[_key(name)]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(names())}") from None
