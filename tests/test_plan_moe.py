"""The planner's MoE, attention-variant and uneven-pipeline terms (issue 22, items 1-4), each
beside the chapter function it uses, called one configuration at a time (chapter 27):
:func:`dtbook.flops.block_gemms` and :func:`dtbook.plan.gemm.matmul_time` for the GEMMs,
:func:`dtbook.flops.mla_attention_flops` and :func:`dtbook.flops.attention_flops` (``window=``)
for attention, chapter 18's :func:`dtbook.moe.capacity_factor_for_overflow` and
:func:`dtbook.moe.layer_alltoall_time` for the experts, chapter 16's
:func:`dtbook.pipeline_parallel.stage_layers` for the stages."""

import numpy as np
import pytest

from dtbook import flops, hardware, models, moe, pipeline_parallel, plan
from dtbook.plan import terms
from dtbook.plan.gemm import matmul_time
from dtbook.plan.model import RECOMPUTE

KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
         "sequence_parallel")


def _setup(model, rows, **job):
    cfg = models.get(model)
    job = terms.Job.make(cfg, **job)
    cols = {k: np.array([float(r[i]) if k != "recompute" else float(RECOMPUTE.index(r[i]))
                         for r in rows]) for i, k in enumerate(KNOBS)}
    return cfg, job, terms.Layouts.of(cols, job), [dict(zip(KNOBS, r)) for r in rows]


DSV3 = dict(gpu="h800", seq=4096, global_batch=15360, dtype="fp8", node="hgx-h800")
DSV3_ROWS = [(1, 16, 128, 1, 64, 1, 1, 1, "none", 1),     # DeepSeek's own layout
             (1, 16, 128, 1, 8, 1, 2, 1, "none", 1),      # EP 8: one node
             (2, 8, 128, 1, 32, 2, 1, 1, "selective", 1)]


# --------------------------------------------------------------------------- chapter 16

@pytest.mark.parametrize("layers, stages, first, last, want", [
    (32, 4, None, None, [8] * 4),
    (126, 16, None, None, [7] + [8] * 14 + [7]),          # Llama 3 405B, Dubey et al. 3.3.2
    (61, 16, None, None, [3] + [4] * 14 + [2]),           # DeepSeek-V3 on 16 stages
    (61, 32, None, None, [1] + [2] * 30 + [0]),           # Megatron's layout Et|(tt|)*30L
    (126, 128, None, None, [0] + [1] * 126 + [0]),        # embedding and loss each a stage
    (61, 16, 4, 1, [4] * 15 + [1]),                       # decoder_first/last_pipeline_num_layers
    (30, 4, 6, None, [6, 8, 8, 8]),
    (5, 2, None, None, [3, 2]),
])
def test_stage_layers(layers, stages, first, last, want):
    got = pipeline_parallel.stage_layers(layers, stages, first, last)
    assert got == want and sum(got) == layers
    if first is None and last is None:     # the busiest stage holds ceil(L / p), the least possible
        assert max(got) == -(-layers // stages)


@pytest.mark.parametrize("args, word", [((10, 8), "stages"), ((8, 11), "stages"),
                                        ((61, 16, 3), "first"), ((61, 16, None, 4), "last"),
                                        ((61, 1, 3), "stages")])
def test_stage_layers_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        pipeline_parallel.stage_layers(*args)


def test_slowest_stage_adds_each_ranks_kinds():
    """Every distinct rank of DeepSeek-V3's split summed from its blocks' kinds (3 dense
    blocks first, MoE after), the last with the logits and the MTP module: the slowest is
    the largest of them, with its MoE layers' all-to-alls."""
    cfg, job, lay, configs = _setup("deepseek-v3", DSV3_ROWS, **DSV3)
    layer = terms.layer_compute(job, lay)
    stage = terms.slowest_stage(job, lay, layer)
    a2a = terms.ep_comm(job, lay)   # the model-mean layer's share: rescale to one MoE layer
    per_moe = a2a.total * cfg.layers / (cfg.layers - cfg.dense_layers)
    for i, c in enumerate(configs):
        att = terms.attention_compute(job, lay)
        f_att, b_att = att[0][i] + att[1][i], 2 * att[0][i] + att[2][i]
        dense, sparse = terms.mlp_compute(job, lay, False)[i], terms.mlp_compute(job, lay, True)[i]
        chunks = pipeline_parallel.stage_layers(cfg.layers, c["pp"] * c["vpp"])
        starts = np.cumsum([0] + chunks)
        best = None
        for r in range(c["pp"]):
            blocks = [b for ch in range(r, c["pp"] * c["vpp"], c["pp"])
                      for b in range(starts[ch], starts[ch + 1])]
            n_moe = sum(cfg.is_moe_layer(b) for b in blocks)
            f = len(blocks) * f_att + n_moe * sparse + (len(blocks) - n_moe) * dense
            b = len(blocks) * b_att + 2 * n_moe * sparse + 2 * (len(blocks) - n_moe) * dense
            if r == c["pp"] - 1:     # logits, and the MTP module: a block, its projection, logits
                proj = matmul_time(lay.tokens[i], cfg.hidden, 2 * cfg.hidden, job.gpu, dtype="fp8")
                f += layer.logits[i] + f_att + sparse + proj + layer.logits[i]
                b += 2 * layer.logits[i] + b_att + 2 * sparse + 2 * proj + 2 * layer.logits[i]
                n_moe += 1
            cost = f + b + n_moe * per_moe[i]
            if best is None or cost > best[0]:
                best = (cost, f, b, n_moe)
        assert stage.forward[i] == pytest.approx(best[1], rel=1e-12)
        assert stage.backward[i] == pytest.approx(best[2], rel=1e-12)
        assert stage.moe[i] == best[3]
        assert stage.busiest[i] == max(sum(chunks[ch] for ch in range(r, len(chunks), c["pp"]))
                                       for r in range(c["pp"]))


def test_dense_split_is_the_old_one_where_layers_divide():
    """Where pp divides the layers (or Llama 3's first and last hold one fewer), a dense
    model's stage is the busiest ceil(L/pp) layers, or the last with the logits."""
    cfg, job, lay, configs = _setup("llama3-70b", [(8, 4, 16, 1, 1, 1, 1, 1, "none", 1),
                                                   (8, 5, 16, 1, 1, 1, 1, 1, "none", 1)],
                                    gpu="h100-sxm", seq=8192, global_batch=512)
    layer = terms.layer_compute(job, lay)
    stage = terms.slowest_stage(job, lay, layer)
    per = layer.forward + layer.backward
    for i, c in enumerate(configs):
        split = pipeline_parallel.stage_layers(cfg.layers, c["pp"])
        want = max(max(split[:-1]) * per[i], split[-1] * per[i] + 3 * layer.logits[i])
        assert stage.compute[i] == pytest.approx(want, rel=1e-12)
    assert list(stage.busiest) == [20, 16] and list(stage.last) == [20, 16]  # 80 on 5: 16 each


# --------------------------------------------------------------------------- attention

def test_mla_projections_are_block_gemms_at_their_shapes():
    """MLA's QKV at its real shapes: the GEMMs of flops.block_gemms (q_down, q_up, kv_down,
    kv_up, o), each timed by matmul_time; their FLOPs are mla_attention_flops' projections.
    The old projections (q, k, v, o at heads x head_dim) held 3.77 times MLA's weights."""
    cfg, job, lay, configs = _setup("deepseek-v3", DSV3_ROWS, **DSV3)
    linear, core, core_bwd = terms.attention_compute(job, lay)
    gemms = [g for g in flops.block_gemms(cfg, 0) if g["name"] in
             ("q_down", "q_up", "kv_down", "kv_up", "o")]
    per_token = sum(2 * g["in_features"] * g["out_features"] for g in gemms)
    mla = flops.mla_attention_flops(1, 1, cfg.hidden, cfg.heads, cfg.q_lora_rank, cfg.kv_lora_rank,
                                    cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim)
    assert per_token == mla["projections"]
    mla_weights = sum(g["in_features"] * g["out_features"] for g in gemms)
    old = cfg.hidden * (2 * cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim   # q, k, v, o at head_dim
    assert 3.7 < old / mla_weights < 3.8
    kern = hardware.attention_kernel(job.gpu)
    for i, c in enumerate(configs):
        tp, T = c["tp"], lay.tokens[i]
        want = 0.0
        for g in gemms:
            n, k = g["out_features"], g["in_features"]
            if g["name"] == "o":
                k = k / tp
            elif g["name"] in ("q_up", "kv_up"):
                n = n / tp
            want += matmul_time(T, n, k, job.gpu, dtype=job.dtype)
        assert linear[i] == pytest.approx(want, rel=1e-12)
        causal = flops.attention_flops(c["micro_batch"], job.seq, cfg.heads / tp, cfg.head_dim,
                                       value_dim=cfg.v_head_dim) / 2
        assert core[i] == pytest.approx(causal / kern.forward, rel=1e-12)
        assert core_bwd[i] == pytest.approx(2.5 * causal / kern.backward, rel=1e-12)


@pytest.mark.parametrize("model, seq", [("gpt-oss-120b", 4096), ("mistral-7b", 16384),
                                        ("gemma2-9b", 8192)])
def test_sliding_window_core_scales_with_the_window(model, seq):
    cfg, job, lay, configs = _setup(model, [(1, 1, 8, 1, 1, 1, 1, 1, "none", 1),
                                            (2, 1, 4, 1, 1, 1, 2, 1, "none", 1)],
                                    gpu="h100-sxm", seq=seq, global_batch=32)
    w = cfg.sliding_window
    kern = hardware.attention_kernel(job.gpu)
    win = terms.attention_compute(job, lay, w)
    full = terms.attention_compute(job, lay, None)
    for i, c in enumerate(configs):
        f = flops.attention_flops(c["micro_batch"], seq, cfg.heads / c["tp"], cfg.head_dim,
                                  window=w) / 2
        assert win[1][i] == pytest.approx(f / kern.forward, rel=1e-12)
        ratio = (flops.attention_score_pairs(seq, w, causal=False)
                 / flops.attention_score_pairs(seq, None, causal=False))
        assert win[1][i] / full[1][i] == pytest.approx(ratio, rel=1e-12)
        assert win[0][i] == full[0][i]                    # a window changes no weight
    # the mean layer weighs the windowed and full blocks by their counts
    layer = terms.layer_compute(job, lay)
    n_win = cfg.windowed_layers()
    mean = (n_win * win[1] + (cfg.layers - n_win) * full[1]) / cfg.layers
    assert np.allclose(layer.core, mean, rtol=1e-12)
    if seq > w:
        assert np.all(layer.core < full[1])


# --------------------------------------------------------------------------- MoE

@pytest.mark.parametrize("model, kw, rows", [
    ("deepseek-v3", DSV3, DSV3_ROWS),
    ("mixtral-8x7b", dict(gpu="h100-sxm", seq=4096, global_batch=256),
     [(2, 4, 8, 1, 8, 1, 1, 1, "none", 1), (1, 1, 64, 1, 2, 1, 1, 0, "selective", 1)]),
    ("qwen2-57b-a14b", dict(gpu="h100-sxm", seq=4096, global_batch=256, dtype="fp8"),
     [(2, 2, 16, 1, 8, 1, 1, 1, "none", 1)]),
])
def test_moe_mlp_is_router_grouped_experts_and_shared(model, kw, rows):
    cfg, job, lay, configs = _setup(model, rows, **kw)
    t = terms.mlp_compute(job, lay, True)
    load = terms.expert_load_factor(job, lay)
    gemms = {g["name"]: g for g in flops.block_gemms(cfg, cfg.dense_layers)}
    E, k, f = cfg.experts, cfg.experts_per_token, cfg.moe_ffn_hidden
    for i, c in enumerate(configs):
        tp, ep, T = c["tp"], c["ep"], lay.tokens[i]
        # chapter 18: the busiest of ep ranks at the (1 - 1/ep) quantile of one expert's
        # Binomial load, its spread shrunk by sqrt(E/ep) over the rank's experts
        want_load = 1.0
        if ep > 1:
            c_e = moe.capacity_factor_for_overflow(int(ep * T), E, k, overflow=1 / ep)
            want_load = 1 + (c_e - 1) * np.sqrt(ep / E)
        assert load[i] == pytest.approx(want_load, rel=1e-12)
        rows_e = float(gemms["expert_up"]["token_share"]) * ep * T * want_load
        assert rows_e == pytest.approx(k * ep * T / E * want_load)
        mult = 2 if cfg.gated_mlp else 1
        want = (matmul_time(T, E, cfg.hidden, job.gpu)                          # the router, BF16
                + matmul_time(rows_e, mult * f / tp, cfg.hidden, job.gpu, count=E / ep, dtype=job.dtype)
                + matmul_time(rows_e, cfg.hidden, f / tp, job.gpu, count=E / ep, dtype=job.dtype))
        if cfg.shared_experts:
            s = cfg.shared_experts * cfg.shared_ffn_hidden
            want += (matmul_time(T, mult * s / tp, cfg.hidden, job.gpu, dtype=job.dtype)
                     + matmul_time(T, cfg.hidden, s / tp, job.gpu, dtype=job.dtype))
            if cfg.shared_expert_gate:
                want += matmul_time(T, 1, cfg.hidden, job.gpu)
        assert t[i] == pytest.approx(want, rel=1e-12)
    # the expert FLOPs the grouped GEMMs run are moe_flops' routed term (balanced routing)
    routed = sum(2 * g["count"] * g["token_share"] * g["in_features"] * g["out_features"]
                 for n, g in gemms.items() if n.startswith("expert_"))
    assert routed == moe_flops_routed(cfg)


def moe_flops_routed(cfg):
    return flops.moe_flops(1, cfg.hidden, cfg.experts, cfg.experts_per_token,
                           cfg.moe_ffn_hidden, gated=cfg.gated_mlp)["routed"]


def test_fp8_runs_the_experts_at_the_fp8_ceiling():
    rows = [DSV3_ROWS[0]]
    _, bf, lay_b, _ = _setup("deepseek-v3", rows, **{**DSV3, "dtype": "bf16"})
    _, f8, lay_f, _ = _setup("deepseek-v3", rows, **DSV3)
    assert terms.mlp_compute(f8, lay_f, True)[0] < terms.mlp_compute(bf, lay_b, True)[0]
    assert terms.attention_compute(f8, lay_f)[1][0] == terms.attention_compute(bf, lay_b)[1][0]


def test_dense_first_layers_use_the_dense_mlp():
    cfg, job, lay, _ = _setup("deepseek-v3", DSV3_ROWS, **DSV3)
    layer = terms.layer_compute(job, lay)
    dense, sparse = terms.mlp_compute(job, lay, False), terms.mlp_compute(job, lay, True)
    att = terms.attention_compute(job, lay)
    mean = att[0] + (cfg.dense_layers * dense + (cfg.layers - cfg.dense_layers) * sparse) / cfg.layers
    assert np.allclose(layer.linear, mean, rtol=1e-12)
    T = lay.tokens[0]
    assert dense[0] == pytest.approx(matmul_time(T, 2 * cfg.ffn_hidden, cfg.hidden, "h800", dtype="fp8")
                                     + matmul_time(T, cfg.hidden, cfg.ffn_hidden, "h800", dtype="fp8"))


@pytest.mark.parametrize("etp", [None, 1])
def test_alltoall_at_the_ep_groups_placement(etp):
    """Inside a node the four all-to-alls run on NVLink; across nodes the same-node share on
    NVLink and the rest on the NIC at once, the slower deciding (chapter 18's
    layer_alltoall_time on each link), times the busiest rank's load."""
    rows = [(1, 16, 128, 1, 64, 1, 1, 1, "none", 1), (1, 16, 128, 1, 8, 1, 1, 1, "none", 1),
            (2, 8, 128, 1, 16, 1, 1, 1, "none", 1)]
    cfg, job, lay, configs = _setup("deepseek-v3", rows, **DSV3, expert_tensor_parallel=etp)
    t = terms.ep_comm(job, lay)
    load = terms.expert_load_factor(job, lay)
    share = (cfg.layers - cfg.dense_layers) / cfg.layers
    for i, c in enumerate(configs):
        ep, tp = c["ep"], c["tp"]
        e = tp if etp is None else etp
        tokens = lay.tokens[i] * e / tp
        g = min(ep, 8 // (tp if etp is None else etp))
        up, out = (moe.layer_alltoall_time(tokens, cfg.hidden, ep, *ab, experts_per_token=8)
                   for ab in (job.up_ab, job.out_ab))
        want = up if g >= ep else max(out * (ep - g) / (ep - 1), up * (g - 1) / (ep - 1))
        assert t.total[i] == pytest.approx(share * want * load[i], rel=1e-12)
        assert t.forward[i] == pytest.approx(t.backward[i])
    assert job.up_ab[1] == pytest.approx(200e9 * terms.protocol_efficiency(job.up))  # H800 NVLink


# --------------------------------------------------------------------------- the estimate

def test_deepseek_v3_plans_with_its_own_layout():
    e = plan.estimate("deepseek-v3", gpus=2048, gpu="h800", tp=1, pp=16, dp=128, ep=64,
                      global_batch=15360, seq=4096, dtype="fp8", zero=1, node="hgx-h800")
    assert e.fits and e.breakdown["ep_comm"] > 0 and e.breakdown["tp_comm"] == 0
    gpu_hours = e.step_time * 2048 / 3600 * 1e12 / (15360 * 4096)   # per trillion tokens
    assert gpu_hours > 0
    # Megatron's explicit first/last stage gives the same model another split
    f = plan.estimate("deepseek-v3", gpus=2048, gpu="h800", tp=1, pp=16, dp=128, ep=64,
                      global_batch=15360, seq=4096, dtype="fp8", zero=1, node="hgx-h800",
                      first_stage_layers=4, last_stage_layers=1)
    assert f.config["first_stage_layers"] == 4 and f.step_time != e.step_time


@pytest.mark.parametrize("kwargs, word", [
    (dict(first_stage_layers=3), "first_stage_layers"),          # 58 on 15 stages
    (dict(last_stage_layers=-1), "last_stage_layers"),
    (dict(first_stage_layers=4, last_stage_layers=1, vpp=2), "first_stage_layers"),
    (dict(expert_tensor_parallel=3), "expert_tensor_parallel"),
    (dict(pp=64, dp=32, ep=16), "pp"),                             # 64 stages, 61 layers
])
def test_bad_split_input_names_the_argument(kwargs, word):
    base = dict(gpus=2048, gpu="h800", tp=1, pp=16, dp=128, ep=64, global_batch=15360,
                seq=4096, dtype="fp8")
    with pytest.raises(ValueError, match=word):
        plan.estimate("deepseek-v3", **{**base, **kwargs})


def test_search_picks_a_split_when_layers_do_not_divide():
    best = plan.search("deepseek-v3", gpus=2048, gpu="h800", global_batch=15360, seq=4096,
                       dtype="fp8", tp=1, pp=16, ep=64, zero=1, top=3)
    assert best and all(b.config["pp"] == 16 for b in best)
    # the funnel's layer constraint is stage_layers' own
    cfg = models.get("llama3-8b")
    pp = np.arange(1, 40, dtype=float)
    ok = terms.splits(cfg, pp, np.ones_like(pp))
    for p, good in zip(pp.astype(int), ok):
        try:
            pipeline_parallel.stage_layers(cfg.layers, int(p))
            assert good
        except ValueError:
            assert not good


def test_estimate_keywords_reach_the_command_line():
    from dtbook.plan import cli
    names = {n for n, *_ in cli._extra_knobs()}
    assert {"first_stage_layers", "last_stage_layers", "expert_tensor_parallel"} <= names


@pytest.mark.parametrize("model", ["gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"])
def test_moe_elementwise_runs_over_the_routed_rows_and_the_permutation(model):
    """An MoE block's activation runs over k copies of each token at the experts' width (gpt-oss:
    4 x 2880 per token, where a dense block of the config's ffn_hidden would be 2880), the shared
    experts over every token, and Megatron-Core's permute/unpermute move each token's k copies:
    forward 3k·h + h values, backward 2k·h + 2h (a hand count of moe_utils' gathers and sums)."""
    cfg = models.get(model)
    rows = [(1, 1, 8, 1, 1, 1, 1, 1, "none", 0)]        # EP 1: no load imbalance to model
    _, job, lay, _ = _setup(model, rows, gpu="h100-sxm", seq=4096, global_batch=64)
    T, k, h = lay.tokens[0], cfg.experts_per_token, cfg.hidden
    act_f, act_b = (3, 5) if cfg.gated_mlp else (2, 3)
    width = k * cfg.moe_ffn_hidden + cfg.shared_experts * (cfg.shared_ffn_hidden or 0)
    fwd, bwd = terms.moe_elementwise_values(job, lay)
    assert fwd[0] == pytest.approx(T * (act_f * width + 3 * k * h + h))
    assert bwd[0] == pytest.approx(T * (act_b * width + 2 * k * h + 2 * h))
    # the block's mean: attention-half ops of every block, the MLP half by its kind
    dense_f, _ = terms.elementwise_values(cfg, lay.tokens, 4096, lay.tp, lay.sp)
    attn_f, _ = terms.elementwise_values(cfg, lay.tokens, 4096, lay.tp, lay.sp,
                                         mlp_activation=False)
    share = job.moe_layers / cfg.layers
    want = (1 - share) * dense_f + share * (attn_f + fwd)
    assert terms.elementwise(job, lay).forward[0] == pytest.approx(want[0] * 2 / job.hbm)


def test_selective_reruns_only_the_score_ops_in_an_moe_model():
    """With unfused attention, selective recompute re-runs the softmax and dropout over the
    scores, the same ops in a dense block and an MoE one: what a dense model of the same
    attention re-runs, whatever the MoE block's MLP half costs."""
    rows = [(1, 1, 8, 1, 1, 1, 1, 1, rc, 0) for rc in ("none", "selective")]
    again = {}
    for model in ("mixtral-8x7b", "mistral-7b"):          # the same attention, MoE and dense
        _, job, lay, _ = _setup(model, rows, gpu="h100-sxm", seq=4096, global_batch=64,
                                attention="unfused")
        bwd = terms.elementwise(job, lay).backward
        again[model] = bwd[1] - bwd[0]
    assert again["mixtral-8x7b"] > 0
    assert again["mixtral-8x7b"] == pytest.approx(again["mistral-7b"])
