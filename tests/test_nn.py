"""dtbook.nn: the torch model has exactly the parameters dtbook.models counts, and it is a
working causal language model."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from dtbook import models
from dtbook.nn import MLP, TinyTransformer, component_counts

torch.set_num_threads(1)

MOE = dict(experts=4, experts_per_token=2, shared_experts=1, expert_ffn_hidden=24, dense_layers=1,
           router_bias=True)
MLA = dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6)


def small(**overrides):
    base = dict(hidden=32, layers=2, heads=4, kv_heads=4, ffn_hidden=40, vocab=50, max_seq=16)
    base.update(overrides)
    return models.tiny(**base)


def numel(model):
    return sum(p.numel() for p in model.parameters())


# Every combination that changes the count: attention (MHA, GQA, MLA), MLP kind, norm kind and
# its bias, linear biases, tied head, positions, dense or MoE.
COMBOS = list(itertools.product(
    ["mha", "gqa", "mla"], ["swiglu", "gelu"], ["rmsnorm", "layernorm", "layernorm-bias"],
    [False, True], [False, True], ["rotary", "learned"], [False, True]))


def combo_config(attn, mlp, norm, bias, tied, positions, moe):
    kw = dict(mlp=mlp, norm=norm.split("-")[0], norm_bias=norm.endswith("bias"), attn_bias=bias,
              mlp_bias=bias, tied_embeddings=tied, positions=positions)
    if attn == "gqa":
        kw["kv_heads"] = 2
    if attn == "mla":
        kw.update(MLA)
    if moe:
        kw.update(MOE)
    return small(**kw)


def test_parameter_count_matches_formula():
    # One test over all 288 combinations (one pytest item each would triple the run time);
    # a failure names every combination that disagrees.
    wrong = []
    for combo in COMBOS:
        cfg = combo_config(*combo)
        model = TinyTransformer(cfg)
        if numel(model) != cfg.num_params() or component_counts(model) != cfg.param_breakdown():
            wrong.append((combo, numel(model), cfg.num_params()))
    assert not wrong, wrong


@pytest.mark.parametrize("moe", [False, True])
def test_mtp_modules_match_formula(moe):
    cfg = small(**MLA, **(MOE if moe else {}), mtp_layers=2)
    plain, with_mtp = TinyTransformer(cfg), TinyTransformer(cfg, include_mtp=True)
    assert numel(plain) == cfg.num_params()
    assert numel(with_mtp) == cfg.num_params(include_mtp=True)
    assert component_counts(with_mtp)["mtp"] == cfg.num_mtp_params()
    tokens = torch.randint(0, cfg.vocab, (2, 10))
    depths = with_mtp.mtp_logits(tokens)
    assert [d.shape for d in depths] == [(2, 9, cfg.vocab), (2, 8, cfg.vocab)]


def test_final_norm_off():
    cfg = small(final_norm=False)
    assert numel(TinyTransformer(cfg)) == cfg.num_params()


def test_explicit_head_dim():
    cfg = small(hidden=30, heads=3, kv_heads=1, explicit_head_dim=8)
    model = TinyTransformer(cfg)
    assert numel(model) == cfg.num_params()
    assert model(torch.randint(0, cfg.vocab, (1, 5))).shape == (1, 5, cfg.vocab)


@st.composite
def random_configs(draw):
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.integers(1, 3))
    kw = dict(hidden=heads * 2 * draw(st.integers(1, 4)), layers=draw(st.integers(1, 3)), heads=heads,
              kv_heads=kv, ffn_hidden=draw(st.integers(1, 24)), vocab=draw(st.integers(2, 40)),
              max_seq=draw(st.integers(1, 12)),
              mlp=draw(st.sampled_from(["swiglu", "gelu", "geglu", "relu2"])),
              attn_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
              tied_embeddings=draw(st.booleans()), positions=draw(st.sampled_from(["rotary", "learned"])),
              final_norm=draw(st.booleans()))
    norm = draw(st.sampled_from(["rmsnorm", "layernorm"]))
    kw.update(norm=norm, norm_bias=norm == "layernorm" and draw(st.booleans()))
    if draw(st.booleans()):
        experts = draw(st.integers(1, 4))
        kw.update(experts=experts, experts_per_token=draw(st.integers(1, experts)),
                  shared_experts=draw(st.integers(0, 2)), expert_ffn_hidden=draw(st.integers(1, 16)),
                  dense_layers=draw(st.integers(0, kw["layers"])), router_bias=draw(st.booleans()))
    if draw(st.booleans()):
        kw.update(kv_heads=heads, q_lora_rank=draw(st.integers(0, 12)), kv_lora_rank=draw(st.integers(1, 12)),
                  qk_nope_head_dim=draw(st.integers(1, 6)), qk_rope_head_dim=2 * draw(st.integers(1, 3)),
                  v_head_dim=draw(st.integers(1, 6)))
    return models.tiny(**kw)


@settings(max_examples=40, deadline=None)
@given(random_configs())
def test_random_configs_match_formula(cfg):
    model = TinyTransformer(cfg)
    assert numel(model) == cfg.num_params()
    assert component_counts(model) == cfg.param_breakdown()


# --------------------------------------------------------------------------- behaviour
BEHAVIOUR = [small(), combo_config("gqa", "gelu", "layernorm-bias", True, True, "learned", False),
             combo_config("gqa", "swiglu", "rmsnorm", False, False, "rotary", True),
             combo_config("mla", "swiglu", "rmsnorm", False, False, "rotary", True)]


@pytest.mark.parametrize("cfg", BEHAVIOUR, ids=["llama", "gpt", "moe", "mla-moe"])
def test_logits_shape_and_causality(cfg):
    torch.manual_seed(0)
    model = TinyTransformer(cfg).eval()
    tokens = torch.randint(0, cfg.vocab, (3, cfg.max_seq))
    with torch.no_grad():
        logits = model(tokens)
        assert logits.shape == (3, cfg.max_seq, cfg.vocab)
        assert torch.isfinite(logits).all()
        changed = tokens.clone()
        changed[:, 10] = (changed[:, 10] + 1) % cfg.vocab
        other = model(changed)
    assert torch.allclose(logits[:, :10], other[:, :10], atol=1e-6)  # the past is untouched
    assert not torch.allclose(logits[:, 10:], other[:, 10:])  # the future sees the change


def test_positions_matter():
    # Without position information, attention is permutation-equivariant; rotary breaks that.
    torch.manual_seed(0)
    model = TinyTransformer(small()).eval()
    a = torch.tensor([[1, 2, 3, 4]])
    b = torch.tensor([[2, 1, 3, 4]])
    with torch.no_grad():
        assert not torch.allclose(model(a)[0, 3], model(b)[0, 3])


def test_backward_reaches_every_trained_parameter():
    cfg = small(**{**MOE, "experts_per_token": 4})  # every expert used, so every expert has a gradient
    model = TinyTransformer(cfg)
    model(torch.randint(0, cfg.vocab, (2, 8))).sum().backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, name


def test_bad_input():
    model = TinyTransformer(small())
    with pytest.raises(ValueError, match="seq"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="cfg"):
        TinyTransformer("llama2-7b")


def test_flop_counter_sees_every_matmul():
    # Forward FLOPs of a dense model without biases: 2 per weight per token for every linear
    # layer (the head included, the embedding lookup not), plus attention's two matmuls,
    # 2 * 2 * seq^2 * heads * head_dim per sequence and layer. FlopCounterMode counts the
    # full seq x seq score matrix (the causal mask does not skip work).
    cfg = small(kv_heads=2)
    model = TinyTransformer(cfg)
    batch, seq = 2, cfg.max_seq
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, cfg.vocab, (batch, seq)))
    b = cfg.param_breakdown()
    matmul_weights = b["attention"] + b["mlp"] + b["head"]
    attention = cfg.layers * 2 * 2 * batch * seq * seq * cfg.heads * cfg.head_dim
    assert counter.get_total_flops() == 2 * batch * seq * matmul_weights + attention


@pytest.mark.parametrize("name", ["llama2-7b", "mixtral-8x7b"])
def test_catalog_config_builds_on_meta_device(name):
    # A real architecture, built without allocating memory, has the published count.
    cfg = models.get(name)
    with torch.device("meta"):
        model = TinyTransformer(cfg)
    assert numel(model) == cfg.num_params()


def test_mlp_kinds_compute_their_activation():
    # each MLP kind by hand: gated ones multiply act(gate x) by up x, plain ones act(up x)
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    acts = {"swiglu": F.silu, "geglu": lambda y: F.gelu(y, approximate="tanh"), "gelu": F.gelu,
            "relu2": lambda y: torch.relu(y) ** 2}
    for kind, act in acts.items():
        cfg = small(hidden=8, ffn_hidden=5, mlp=kind)
        mlp = MLP(cfg, cfg.ffn_hidden)
        inner = act(mlp.gate(x)) * mlp.up(x) if cfg.gated_mlp else act(mlp.up(x))
        assert torch.allclose(mlp(x), mlp.down(inner)), kind
        assert hasattr(mlp, "gate") == (kind in ("swiglu", "geglu"))
