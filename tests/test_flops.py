"""dtbook.flops: 6ΨD, time to train, MFU, and the exact transformer matmul count (chapter 01)."""

from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from dtbook import flops
from dtbook.symbolic import assert_same, params as Psi, tokens as D, peak_flops as F, mfu as eta
from dtbook.units import day, year

sizes = st.floats(min_value=1.0, max_value=1e13, allow_nan=False)
rates = st.floats(min_value=1e9, max_value=1e16, allow_nan=False)
fractions = st.floats(min_value=1e-3, max_value=0.5, allow_nan=False)


# --- 6ΨD and its split -----------------------------------------------------------------------

def test_six_psi_d():
    assert flops.training_flops(1, 1) == 6
    assert flops.forward_flops(1, 1) == 2 and flops.backward_flops(1, 1) == 4
    assert flops.training_flops(175e9, 300e9) == pytest.approx(3.15e23)


def test_symbolic_path():
    assert_same(flops.training_flops(Psi, D), 6 * Psi * D)
    assert_same(flops.forward_flops(Psi, D) + flops.backward_flops(Psi, D), flops.training_flops(Psi, D))
    P = sp.symbols("P", positive=True)
    assert_same(flops.training_time(Psi, D, F, eta, P), 6 * Psi * D / (P * F * eta))
    assert_same(flops.tokens_per_second(Psi, F, eta, P), P * F * eta / (6 * Psi))
    tps = sp.symbols("R", positive=True)
    assert_same(flops.mfu(tps, Psi, F, P), 6 * Psi * tps / (P * F))
    a = sp.symbols("eta_a", positive=True)
    assert_same(flops.mfu_waste(eta, a), 1 - eta / a)
    assert_same(flops.mfu_gain(eta, a), a / eta - 1)
    B, S, A, d, L = sp.symbols("B S A d L", positive=True)
    assert_same(flops.attention_flops(B, S, A, d, L), 4 * B * S**2 * A * d * L)


def test_book_numbers():
    # GPT-3 on one H100 at the book's 989 TFLOP/s: 3.18e8 s, about 10 years.
    t = flops.training_time(175e9, 300e9, 989e12)
    assert t == pytest.approx(3.185e8, rel=1e-3)
    assert 10 < t / year < 10.2
    # 7B on 2T tokens at 50%: 1.70e8 s, about 1966 days.
    t = flops.training_time(7e9, 2e12, 989e12, mfu=0.5)
    assert t == pytest.approx(1.70e8, rel=0.01)
    assert t / day == pytest.approx(1965.6, rel=1e-3)
    assert flops.mfu_waste(0.35, 0.5) == pytest.approx(0.30)
    assert flops.mfu_gain(0.35, 0.5) == pytest.approx(3 / 7)


def test_mfu_round_trip():
    tps = flops.tokens_per_second(7e9, 989e12, mfu=0.4, devices=8)
    assert flops.mfu(tps, 7e9, 989e12, devices=8) == pytest.approx(0.4)


def test_cost():
    # one device-hour at $2 when 6ΨD = F·3600
    assert flops.training_cost(1, 600, 1.0, 2.0) == pytest.approx(2.0)
    assert flops.training_cost(1, 600, 1.0, 2.0, mfu=0.5) == pytest.approx(4.0)


def test_arrays():
    out = flops.training_time(np.array([1e9, 2e9]), 1e12, 1e15, mfu=0.5, devices=np.array([1, 2]))
    np.testing.assert_allclose(out, [1.2e7, 1.2e7])


@pytest.mark.parametrize("call, name", [
    (lambda: flops.training_flops(-1, 1), "params"),
    (lambda: flops.training_flops(1, float("inf")), "tokens"),
    (lambda: flops.training_time(1, 1, 0), "peak_flops"),
    (lambda: flops.training_time(1, 1, 1e15, mfu=1.5), "mfu"),
    (lambda: flops.training_time(1, 1, 1e15, mfu=0), "mfu"),
    (lambda: flops.training_time(1, 1, 1e15, devices=0), "devices"),
    (lambda: flops.mfu(-5, 1, 1), "tokens_per_second"),
    (lambda: flops.mfu_waste(0.35, 2), "achievable_mfu"),
    (lambda: flops.mfu_gain("35%", 0.5), "mfu"),
    (lambda: flops.training_cost(1, 1, 1, -2), "price_per_device_hour"),
    (lambda: flops.attention_flops(1, 1, 0, 1), "heads"),
    (lambda: flops.transformer_matmul_flops(_cfg(), -1, 8), "batch"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@given(sizes, sizes, sizes)
def test_monotone_and_linear(p, d, extra):
    assert flops.training_flops(p + extra, d) >= flops.training_flops(p, d)
    assert flops.training_flops(p, d + extra) >= flops.training_flops(p, d)
    assert flops.training_flops(p + extra, d) == pytest.approx(
        flops.training_flops(p, d) + flops.training_flops(extra, d), rel=1e-12)
    assert flops.training_flops(2 * p, d) == pytest.approx(2 * flops.training_flops(p, d), rel=1e-12)


@given(sizes, sizes, rates, fractions, st.integers(1, 10**5))
def test_time_halves_when_mfu_or_devices_double(p, d, f, eta_, n):
    t = flops.training_time(p, d, f, eta_, n)
    assert flops.training_time(p, d, f, 2 * eta_, n) == pytest.approx(t / 2, rel=1e-12)
    assert flops.training_time(p, d, f, eta_, 2 * n) == pytest.approx(t / 2, rel=1e-12)
    assert flops.training_time(p, d, f, eta_, n) * n * f * eta_ == pytest.approx(
        flops.training_flops(p, d), rel=1e-12)


@given(fractions, fractions)
def test_waste_and_gain_agree(a, b):
    lo, hi = min(a, b), max(a, b)
    waste, gain = flops.mfu_waste(lo, hi), flops.mfu_gain(lo, hi)
    assert 0 <= waste < 1 and gain >= 0
    # spending (1 - waste) of the budget at the higher MFU does the same work: gain = 1/(1-w) - 1
    assert gain == pytest.approx(1 / (1 - waste) - 1, rel=1e-9)


# --- the exact count -------------------------------------------------------------------------

def _cfg(**kw):
    base = dict(name="t", hidden=32, layers=2, heads=4, kv_heads=4, ffn_hidden=64, vocab=50,
                max_seq=16, mlp="gelu", experts=0)
    base.update(kw)
    return SimpleNamespace(**base)


def test_matmul_params_by_hand():
    c = _cfg()
    attn = 4 * 32 * 32
    mlp = 2 * 32 * 64
    assert flops.matmul_params(c) == 2 * (attn + mlp) + 32 * 50
    # grouped-query attention: k and v shrink to kv_heads * head_dim columns
    g = _cfg(kv_heads=1, mlp="swiglu")
    assert flops.matmul_params(g) == 2 * (2 * 32 * 32 + 2 * 32 * 8 + 3 * 32 * 64) + 32 * 50
    # MoE: router + the visited experts (top-2 of 8, one shared), first layer dense
    m = _cfg(mlp="swiglu", experts=8, experts_per_token=2, shared_experts=1, expert_ffn_hidden=16,
             dense_layers=1)
    moe = 32 * 8 + 3 * 3 * 32 * 16
    assert flops.matmul_params(m) == 2 * attn + 3 * 32 * 64 + moe + 32 * 50


def test_transformer_matmul_flops_symbolic():
    B, S = sp.symbols("B S", positive=True)
    c = _cfg()
    out = flops.transformer_matmul_flops(c, B, S)
    assert_same(out["forward"], 2 * flops.matmul_params(c) * B * S + 4 * B * S**2 * 32 * 2)
    assert_same(out["total"], 3 * out["forward"])
    assert_same(out["backward"], 2 * out["forward"])


def test_transformer_matmul_flops_against_flop_counter():
    """A hand-written pre-norm transformer with biases and learned positions: the counter
    sees exactly the term-by-term count, and 6ΨD misses by exactly the derived amount."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    c = _cfg()
    H, A, dh = c.hidden, c.heads, c.hidden // c.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(H), nn.LayerNorm(H)
            self.qkv, self.o = nn.Linear(H, 3 * H), nn.Linear(H, H)
            self.up, self.down = nn.Linear(H, c.ffn_hidden), nn.Linear(c.ffn_hidden, H)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, s, 3, A, dh).permute(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(-1, -2)) / dh**0.5
            mask = torch.ones(s, s, dtype=torch.bool).triu(1)
            a = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, s, H))
            return x + self.down(nn.functional.gelu(self.up(self.n2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(c.vocab, H), nn.Embedding(c.max_seq, H)
            self.blocks = nn.ModuleList(Block() for _ in range(c.layers))
            self.norm, self.head = nn.LayerNorm(H), nn.Linear(H, c.vocab, bias=False)

        def forward(self, ids):
            x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    model = Model()
    B, S = 3, 7
    ids = torch.randint(0, c.vocab, (B, S))
    with FlopCounterMode(display=False) as counter:
        model(ids).sum().backward()
    measured = counter.get_total_flops()
    predicted = flops.transformer_matmul_flops(c, B, S)
    assert measured == predicted["total"]

    psi = sum(p.numel() for p in model.parameters())
    linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    assert linear_weights == flops.matmul_params(c)
    gap = flops.training_flops(psi, B * S) - measured
    assert gap == 6 * B * S * (psi - linear_weights) - 3 * predicted["attention_forward"]


TINY_VARIANTS = {
    "llama-like": {},
    "gqa": {"kv_heads": 2},
    "gpt-like": {"mlp": "gelu", "norm": "layernorm", "norm_bias": True, "attn_bias": True,
                 "mlp_bias": True, "tied_embeddings": True, "positions": "learned"},
    "moe": {"experts": 4, "experts_per_token": 2, "shared_experts": 1, "expert_ffn_hidden": 32,
            "dense_layers": 1, "router_bias": True},
    "mla": {"kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
            "v_head_dim": 12},
    "mla-direct-q": {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                     "v_head_dim": 8},
}


@pytest.mark.parametrize("variant", list(TINY_VARIANTS))
def test_tiny_transformer_matches_flop_counter(variant):
    """dtbook.nn.TinyTransformer: the counter measures exactly the term-by-term count, for
    dense, GQA, GPT-style (biases, tied head, learned positions), MoE and MLA configs."""
    torch = pytest.importorskip("torch")
    from torch import nn as tnn
    from torch.utils.flop_counter import FlopCounterMode

    from dtbook import models, nn

    cfg = models.tiny(**TINY_VARIANTS[variant])
    torch.manual_seed(0)
    model = nn.TinyTransformer(cfg)
    B, S = 2, 12
    ids = torch.randint(0, cfg.vocab, (B, S))
    with FlopCounterMode(display=False) as fwd:
        logits = model(ids)
    with FlopCounterMode(display=False) as bwd:
        logits.float().pow(2).mean().backward()
    predicted = flops.transformer_matmul_flops(cfg, B, S)
    assert fwd.get_total_flops() == predicted["forward"]
    assert bwd.get_total_flops() == predicted["backward"]
    # the matmul weights are the Linear weights, plus the embedding again when it is the head
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, tnn.Linear))
    routed = 0
    if cfg.is_moe:  # a token visits experts_per_token of the experts, not all of them
        idle = cfg.experts - cfg.experts_per_token
        routed = (cfg.layers - cfg.dense_layers) * idle * cfg.mlp_params(cfg.moe_ffn_hidden)
    head = cfg.vocab * cfg.hidden if cfg.tied_embeddings else 0
    assert flops.matmul_params(cfg) == linear - routed + head


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "llama3-8b", "mixtral-8x7b", "deepseek-v3"])
def test_catalog_matmul_params_against_breakdown(name):
    """For published models, Ψ (active) less the lookup tables and norms, plus a tied head,
    leaves the matmul weights and the biases (GPT-3), latent norms (MLA) and router biases:
    a remainder of well under 0.1%."""
    from dtbook import models

    cfg = models.get(name)
    b = cfg.param_breakdown()
    tied_head = cfg.vocab * cfg.hidden if cfg.tied_embeddings else 0
    rest = (cfg.num_active_params() - b["embedding"] - b["positions"] - b["norms"] + tied_head
            - flops.matmul_params(cfg))
    assert 0 <= rest < 1e-3 * cfg.num_active_params()
    if name.startswith("llama"):
        assert rest == 0


# --- sliding windows, MLA, MoE -------------------------------------------------------------------

def _pairs_by_loop(seq, window, causal):
    """Count the (query, key) pairs one head scores, one pair at a time."""
    w = window or seq
    if causal:
        return sum(1 for i in range(seq) for j in range(seq) if 0 <= i - j < w)
    return sum(1 for i in range(seq) for j in range(seq) if abs(i - j) < w)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_score_pairs_against_a_loop(causal):
    for seq in range(0, 18):
        assert flops.attention_score_pairs(seq, None, causal) == _pairs_by_loop(seq, None, causal)
        for window in range(1, 22):
            assert flops.attention_score_pairs(seq, window, causal) == _pairs_by_loop(seq, window, causal)
    # the full-square convention with a window is twice the causal count less the diagonal
    for seq, window in [(100, 7), (7, 100), (64, 64), (4096, 128)]:
        assert (flops.attention_score_pairs(seq, window, False)
                == 2 * flops.attention_score_pairs(seq, window, True) - seq)


def test_sliding_window_symbolic():
    """Once S > w the count is linear in S: each query scores w keys, the first w − 1 fewer."""
    S, w = sp.symbols("S w", positive=True, integer=True)
    causal = flops.attention_score_pairs(S, w).subs(sp.Min(S, w), w)
    assert_same(causal, w * (w + 1) / 2 + (S - w) * w)
    assert sp.diff(causal, S) == w
    full = flops.attention_score_pairs(S, w, causal=False).subs(sp.Min(S, w), w)
    assert_same(full, S * (2 * w - 1) - w * (w - 1))
    # and when the window covers the sequence, it is ordinary causal attention
    assert_same(flops.attention_score_pairs(S, w).subs(sp.Min(S, w), S), S * (S + 1) / 2)
    B, A, d = sp.symbols("B A d", positive=True)
    assert_same(flops.attention_flops(B, S, A, d, window=w, causal=True).subs(sp.Min(S, w), w),
                2 * B * A * 2 * d * (w * (w + 1) / 2 + (S - w) * w))


def test_windowed_attention_against_flop_counter():
    """A sliding-window attention written as one product per query over only the keys it
    sees (what a windowed kernel computes): the counter measures the causal band exactly."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    B, A, S, d, dv, w = 2, 3, 13, 4, 5, 4
    q, k = torch.randn(B, A, S, d), torch.randn(B, A, S, d)
    v = torch.randn(B, A, S, dv)
    with FlopCounterMode(display=False) as counter:
        rows = []
        for i in range(S):
            lo = max(0, i - w + 1)
            p = (q[:, :, i:i + 1] @ k[:, :, lo:i + 1].transpose(-1, -2)).softmax(-1)
            rows.append(p @ v[:, :, lo:i + 1])
        out = torch.cat(rows, dim=2)
    assert counter.get_total_flops() == flops.attention_flops(B, S, A, d, 1, dv, window=w, causal=True)
    # and it is the masked full attention's result
    scores = q @ k.transpose(-1, -2)
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    ref = scores.masked_fill(~((i - j >= 0) & (i - j < w)), float("-inf")).softmax(-1) @ v
    torch.testing.assert_close(out, ref)


def test_transformer_matmul_flops_sliding_window_is_a_sum_over_layers():
    from dtbook import models

    for cfg in (models.tiny(layers=5, sliding_window=8, global_every=2),
                models.tiny(layers=3, sliding_window=8), models.get("mistral-7b"),
                models.get("gpt-oss-20b")):
        for seq in (4, 8, 50):
            out = flops.transformer_matmul_flops(cfg, 2, seq)
            per_layer = [flops.attention_flops(2, seq, cfg.heads, cfg.head_dim, 1, None,
                                               cfg.attention_window(i), causal)
                         for causal in (False, True) for i in range(cfg.layers)]
            assert out["attention_forward"] == sum(per_layer[:cfg.layers])
            assert out["attention_forward_causal"] == sum(per_layer[cfg.layers:])
            plain = flops.transformer_matmul_flops(dataclasses_replace(cfg, sliding_window=0,
                                                                       global_every=0), 2, seq)
            assert out["linear_forward"] == plain["linear_forward"]
            if seq <= cfg.sliding_window:  # the window covers the sequence: nothing changes
                assert out == plain
    # Mistral 7B at its 32k context: every layer scores 4096 keys per query, not up to 32k
    m = models.get("mistral-7b")
    out = flops.transformer_matmul_flops(m, 1, 32768)
    per_pair = 2 * m.heads * 2 * m.head_dim * m.layers
    assert out["attention_forward_causal"] == per_pair * (4096 * 4097 // 2 + (32768 - 4096) * 4096)


def dataclasses_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-8b", "llama3-405b", "mixtral-8x22b",
                                  "deepseek-v3", "qwen2-57b-a14b"])
def test_causal_count_is_half_the_square_plus_the_diagonal(name):
    from dtbook import models

    cfg = models.get(name)
    B, S = 3, 4096
    out = flops.transformer_matmul_flops(cfg, B, S)
    dqk = cfg.head_dim
    dv = cfg.v_head_dim if cfg.is_mla else dqk
    assert 2 * out["attention_forward_causal"] - out["attention_forward"] == (
        2 * B * cfg.heads * (dqk + dv) * S * cfg.layers)


def _mla_weights(torch, h=24, A=3, R=10, C=12, n=4, r=2, v=5):
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) / shape[-1] ** 0.5
    return dict(h=h, A=A, R=R, C=C, n=n, r=r, v=v, wq_a=w(R, h), wq_b=w(A * (n + r), R),
                wkv_a=w(C + r, h), wkv_b=w(A * (n + v), C), wo=w(h, A * v))


def _mla_cache(torch, W, ctx, new):
    """What a decoder has cached from the context's earlier tokens: their latents and rope
    keys (absorbed form) and their per-head keys and values (explicit form)."""
    F = torch.nn.functional
    old = F.linear(ctx[:, :ctx.shape[1] - new], W["wkv_a"])
    return old, F.linear(old[..., :W["C"]], W["wkv_b"])


def _mla(torch, W, x, cache, absorbed):
    """One MLA block as DeepSeek-V3's inference/model.py writes it (attn_impl "naive" or
    "absorb"), without RoPE and norms (elementwise, no matmul): the new tokens x attend to
    the cached context and to themselves (a training step has an empty cache)."""
    F = torch.nn.functional
    A, C, n, r, v = W["A"], W["C"], W["n"], W["r"], W["v"]
    B, S, _ = x.shape
    q = F.linear(F.linear(x, W["wq_a"]), W["wq_b"]).view(B, S, A, n + r)
    q_nope, q_pe = q.split([n, r], dim=-1)
    old_latent, old_kv = cache
    latent, k_pe = torch.cat([old_latent, F.linear(x, W["wkv_a"])], dim=1).split([C, r], dim=-1)
    T = latent.shape[1]
    if not absorbed:
        kv = torch.cat([old_kv, F.linear(latent[:, T - S:], W["wkv_b"])], dim=1)
        k_nope, val = kv.view(B, T, A, n + v).split([n, v], dim=-1)
        k = torch.cat([k_nope, k_pe[:, :, None].expand(B, T, A, r)], dim=-1)
        p = torch.einsum("bshd,bthd->bsht", q, k).softmax(-1)
        out = torch.einsum("bsht,bthd->bshd", p, val)
    else:
        wkv_b = W["wkv_b"].view(A, n + v, C)
        q_lat = torch.einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :n])
        p = (torch.einsum("bshc,btc->bsht", q_lat, latent)
             + torch.einsum("bshr,btr->bsht", q_pe, k_pe)).softmax(-1)
        out = torch.einsum("bshc,hdc->bshd", torch.einsum("bsht,btc->bshc", p, latent), wkv_b[:, -v:])
    return F.linear(out.reshape(B, S, A * v), W["wo"])


@pytest.mark.parametrize("absorbed", [False, True])
@pytest.mark.parametrize("new, context", [(7, 7), (1, 9), (3, 11)])
def test_mla_flops_against_flop_counter(absorbed, new, context):
    """Both forms of MLA, on a training step (new == context) and on decoding steps: the
    counter measures the derived count, and the two forms give the same output."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    W = _mla_weights(torch)
    B = 2
    ctx = torch.randn(B, context, W["h"], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x, cache = ctx[:, context - new:], _mla_cache(torch, W, ctx, new)
    with FlopCounterMode(display=False) as counter:
        out = _mla(torch, W, x, cache, absorbed)
    expected = flops.mla_attention_flops(B, new, W["h"], W["A"], W["R"], W["C"], W["n"], W["r"],
                                         W["v"], absorbed=absorbed, context=context)
    assert counter.get_total_flops() == expected["total"]
    other = _mla(torch, W, x, cache, not absorbed)
    torch.testing.assert_close(out, other)


def test_mla_forms_compared():
    """The absorbed form costs more FLOP per key (its gain is the cache it reads); the
    explicit projections are matmul_params' attention weights for DeepSeek-V3."""
    from dtbook import models

    cfg = models.get("deepseek-v3")
    args = (cfg.hidden, cfg.heads, cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_head_dim,
            cfg.qk_rope_head_dim, cfg.v_head_dim)
    train = [flops.mla_attention_flops(1, 4096, *args, absorbed=a)["total"] for a in (False, True)]
    assert train[0] < train[1]
    T = 4096
    decode = [flops.mla_attention_flops(1, 1, *args, absorbed=a, context=T)["total"]
              for a in (False, True)]
    assert decode[0] < decode[1]  # explicit, from a cache of per-head keys and values
    # ... which holds A(n + r + v) numbers per token; re-expanding a latent cache instead
    # costs the expansion for every cached token, and then absorbing is cheaper
    expand = 2 * (T - 1) * cfg.kv_lora_rank * cfg.heads * (cfg.qk_nope_head_dim + cfg.v_head_dim)
    assert decode[1] < decode[0] + expand
    # the core per key: (2C + r) / (n + r + v) = 1088 / 320
    core = [flops.mla_attention_flops(1, 1, *args, absorbed=a, context=1)["core"] for a in (False, True)]
    assert core[1] * 320 == core[0] * 1088
    per_token = flops.mla_attention_flops(1, 1, *args)["projections"] // 2
    expected = (cfg.attention_params() - cfg.norm_params(cfg.q_lora_rank)
                - cfg.norm_params(cfg.kv_lora_rank))
    assert per_token == expected
    R, C, n, r, v, A, h = sp.symbols("R C n r v A h", positive=True)
    S, T = sp.symbols("S T", positive=True)
    explicit = flops.mla_attention_flops(1, S, h, A, R, C, n, r, v, context=T)
    absorbed = flops.mla_attention_flops(1, S, h, A, R, C, n, r, v, absorbed=True, context=T)
    # absorbing trades the per-token expansion C·A(n + v) for A·C(n + v) on the query side
    # (equal), and the core's widths n + r + v for 2C + r
    assert_same(absorbed["projections"] - explicit["projections"], 0)
    assert_same(absorbed["core"] - explicit["core"], 2 * S * T * A * (2 * C - n - v))


def test_moe_flops_against_flop_counter():
    """An MoE MLP with an explicit dispatch (each expert runs on exactly the tokens routed
    to it), a router and a gated shared expert, as Qwen2-MoE writes it."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    T, h, E, k, f, fs = 37, 16, 6, 2, 8, 24

    class SwiGLU(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.gate, self.up = nn.Linear(h, width, bias=False), nn.Linear(h, width, bias=False)
            self.down = nn.Linear(width, h, bias=False)

        def forward(self, x):
            return self.down(nn.functional.silu(self.gate(x)) * self.up(x))

    router, experts = nn.Linear(h, E, bias=False), nn.ModuleList(SwiGLU(f) for _ in range(E))
    shared, shared_gate = SwiGLU(fs), nn.Linear(h, 1, bias=False)
    x = torch.randn(T, h)
    with FlopCounterMode(display=False) as counter:
        weights, chosen = router(x).softmax(-1).topk(k, dim=-1)
        y = torch.zeros_like(x)
        for e, expert in enumerate(experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                y = y.index_add(0, rows, weights[rows, slot, None] * expert(x[rows]))
        y = y + torch.sigmoid(shared_gate(x)) * shared(x)
    expected = flops.moe_flops(T, h, E, k, f, 1, fs, shared_gate=True)
    assert counter.get_total_flops() == expected["total"]
    assert expected["router"] == 2 * T * h * E
    # matmul_params is the per-token half of it for an MoE block
    from dtbook import models

    cfg = models.tiny(hidden=h, layers=1, experts=E, experts_per_token=k, expert_ffn_hidden=f,
                      shared_experts=1, shared_expert_ffn_hidden=fs, shared_expert_gate=True)
    attention = 4 * h * h
    assert flops.matmul_params(cfg) == attention + expected["total"] // (2 * T) + h * cfg.vocab


def test_moe_flops_symbolic_and_catalog():
    T, h, E, k, f, s = sp.symbols("T h E k f s", positive=True)
    out = flops.moe_flops(T, h, E, k, f, s)
    assert_same(out["total"], 2 * T * h * (E + 3 * k * f + 3 * s * f))
    from dtbook import models

    ds = models.get("deepseek-v3")
    one = flops.moe_flops(1, ds.hidden, ds.experts, ds.experts_per_token, ds.moe_ffn_hidden,
                          ds.shared_experts)
    # per token, the active expert weights of one block (router biases are additions)
    active = (ds.layer_params(3) - ds.attention_params() - 2 * ds.hidden - ds.experts
              - (ds.experts - ds.experts_per_token) * ds.mlp_params(ds.moe_ffn_hidden))
    assert one["total"] == 2 * active
    with pytest.raises(ValueError, match="experts_per_token"):
        flops.moe_flops(10, 8, 4, 5, 8)


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-175b", "deepseek-v3", "gpt-oss-120b",
                                  "mistral-7b", "qwen1.5-moe-a2.7b"])
def test_blocks_and_head_sum_to_the_model(name):
    """What a pipeline stage computes: its blocks, and the head on the last stage."""
    from dtbook import models

    cfg = models.get(name)
    B, S = 2, 4096
    total = flops.transformer_matmul_flops(cfg, B, S)
    parts = [flops.layer_matmul_flops(cfg, i, B, S) for i in range(cfg.layers)]
    parts.append(flops.lm_head_matmul_flops(cfg, B, S))
    assert set(parts[0]) == set(total)
    for key in total:
        assert sum(p[key] for p in parts) == total[key]
    if cfg.is_moe and cfg.dense_layers:
        # DeepSeek-V3's dense MLP is as wide as the nine experts a token visits (18432 =
        # 9 x 2048), so an MoE block costs a dense one plus exactly the router GEMM
        assert cfg.ffn_hidden == (cfg.experts_per_token + cfg.shared_experts) * cfg.moe_ffn_hidden
        assert (parts[cfg.dense_layers]["linear_forward"] - parts[0]["linear_forward"]
                == 2 * B * S * cfg.hidden * cfg.experts)
    if cfg.is_swa and cfg.global_every:  # gpt-oss: windowed blocks score fewer pairs
        assert parts[0]["attention_forward"] < parts[1]["attention_forward"]
    with pytest.raises(ValueError, match="index"):
        flops.layer_matmul_flops(cfg, cfg.layers, B, S)


def test_layer_flops_symbolic():
    from dtbook import models

    B, S = sp.symbols("B S", positive=True)
    cfg = models.tiny()
    out = flops.layer_matmul_flops(cfg, 0, B, S)
    h, f, A, d = cfg.hidden, cfg.ffn_hidden, cfg.heads, cfg.head_dim
    assert_same(out["forward"], 2 * B * S * (4 * h * h + 3 * h * f) + 4 * B * S**2 * A * d)
    assert_same(flops.lm_head_matmul_flops(cfg, B, S)["total"], 6 * B * S * h * cfg.vocab)


def test_gated_mlps_count_three_matrices():
    from dtbook import models

    swiglu, geglu, gelu = (models.tiny(mlp=m) for m in ("swiglu", "geglu", "gelu"))
    assert flops.matmul_params(geglu) == flops.matmul_params(swiglu)
    assert flops.matmul_params(swiglu) - flops.matmul_params(gelu) == swiglu.layers * 64 * 128
    gemma = models.get("gemma2-9b")  # tied head: still a matmul; sandwich norms: none
    b = gemma.param_breakdown()
    assert flops.matmul_params(gemma) == b["attention"] + b["mlp"] + gemma.vocab * gemma.hidden


@pytest.mark.parametrize("name", ["llama3-70b", "gpt3-175b", "deepseek-v3", "qwen1.5-moe-a2.7b",
                                  "gpt-oss-20b", "gemma2-9b"])
def test_block_gemms_are_the_block_weights(name):
    """The GEMM list of a block, weighted by how many tokens each GEMM sees, is the block's
    per-token matmul weights; at DeepSeek-V3's shapes MLA's projections are far narrower than
    the q, k, v of ordinary attention with the same heads and widths."""
    from dtbook import models

    cfg = models.get(name)
    B, S = 1, 1
    for index in sorted({0, cfg.layers - 1}):
        gemms = flops.block_gemms(cfg, index)
        weights = sum(g["count"] * g["token_share"] * g["in_features"] * g["out_features"]
                      for g in gemms)
        assert 2 * weights == flops.layer_matmul_flops(cfg, index, B, S)["linear_forward"]
    if cfg.is_mla:
        mla = {g["name"]: g for g in flops.block_gemms(cfg, 0)}
        widths = sum(mla[k]["out_features"] for k in ("q_down", "kv_down"))
        assert widths == 1536 + 576  # what the hidden state is multiplied into
        mha_qkv = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
        assert mha_qkv / widths > 30
    if cfg.is_moe:
        moe = {g["name"]: g for g in flops.block_gemms(cfg, cfg.layers - 1)}
        assert moe["expert_up"]["count"] == cfg.experts
        assert moe["expert_up"]["token_share"] * cfg.experts == cfg.experts_per_token
