"""The MoE dispatcher and all-to-all overlap of the planner (issue 22): the expected number of
destinations a token's experts reach (dtbook.moe.expected_destinations) against a simulation
of the router, the per-node dispatcher's term against chapter 13's all-to-all called by hand,
and the overlapped term against its definition."""

import dataclasses
import math

import numpy as np
import pytest

from dtbook import comm, hardware, models, moe, plan, runs
from dtbook.plan import terms
from dtbook.plan.validate import predict_run
from dtbook.plan.model import RECOMPUTE

RNG = np.random.default_rng(35)


def _simulated_destinations(experts, k, units, groups, group_topk, trials=20000):
    """Route ``trials`` tokens: pick group_topk of the groups, then k distinct experts among
    their experts, uniformly; count the distinct units (blocks of experts) reached."""
    per_group, per_unit = experts // groups, experts // units
    hits = np.empty(trials)
    for t in range(trials):
        chosen = RNG.choice(groups, size=group_topk, replace=False)
        pool = np.concatenate([np.arange(g * per_group, (g + 1) * per_group) for g in chosen])
        picked = RNG.choice(pool, size=k, replace=False)
        hits[t] = len(set((picked // per_unit).tolist()))
    return hits.mean(), hits.std()


@pytest.mark.parametrize("experts, k, units, groups, topk", [
    (256, 8, 8, 8, 4),       # DeepSeek-V3 on 8 nodes: node-limited to 4 of 8
    (256, 8, 16, 8, 4),      # the same over 16 nodes (a group spans two)
    (256, 8, 8, 1, 1),       # no group limit
    (64, 2, 8, 1, 1),        # coarse: top-2 of 64
    (8, 2, 4, 1, 1),         # Mixtral over 4 ranks
])
def test_expected_destinations_match_a_simulated_router(experts, k, units, groups, topk):
    formula = moe.expected_destinations(experts, k, units, groups, topk)
    mean, spread = _simulated_destinations(experts, k, units, groups, topk)
    # six standard errors of the simulated mean: tight enough that picking with replacement
    # (a wrong model: 1.75 instead of 1.857 at 8 experts, top-2, 4 ranks) fails
    assert formula == pytest.approx(mean, abs=6 * spread / math.sqrt(20000))


def test_expected_destinations_limits():
    # one unit per expert and no limit: every pick is a new destination
    assert moe.expected_destinations(16, 4, 16) == pytest.approx(4)
    # one unit: always one destination
    assert moe.expected_destinations(16, 4, 1) == pytest.approx(1)
    # node-limited routing reaches at most group_topk groups' units
    assert moe.expected_destinations(256, 8, 8, 8, 4) <= 4


@pytest.mark.parametrize("args, word", [
    ((256, 8, 7), "units"), ((256, 8, 8, 16, 4), "groups"), ((256, 8, 8, 8, 9), "group_topk"),
    ((16, 9, 4, 4, 1), "experts_per_token"), ((256, 0, 8), "experts_per_token"),
])
def test_expected_destinations_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        moe.expected_destinations(*args)


def test_deepseek_routing_groups_come_from_its_config():
    cfg = models.get("deepseek-v3")
    assert (cfg.router_groups, cfg.router_group_topk) == (8, 4)
    with pytest.raises(ValueError, match="router_groups"):
        models.TransformerConfig(name="x", hidden=64, layers=2, heads=4, kv_heads=4,
                                 ffn_hidden=128, vocab=100, max_seq=64, experts=8,
                                 experts_per_token=2, router_groups=3)


def _job_and_layout(**job_kw):
    cfg = models.get("deepseek-v3")
    job = terms.Job.make(cfg, gpu="h100-sxm", seq=4096, global_batch=8192, dtype="fp8", **job_kw)
    row = dict(tp=2, pp=8, dp=64, cp=1, ep=64, vpp=4, micro_batch=1, zero=2,
               recompute=RECOMPUTE.index("none"), sequence_parallel=1)
    return cfg, job, terms.Layouts.of({k: np.array([float(v)]) for k, v in row.items()}, job)


def test_per_node_dispatch_is_chapter_13s_alltoall_of_the_node_copies():
    cfg, job, lay = _job_and_layout(moe_dispatcher="deepep")
    _, tokens, g = terms._expert_layout(job, lay)
    tokens, g = float(tokens[0]), int(np.ravel(g)[0])
    assert (tokens, g) == (4096, 4)        # TP 2 x EP 64 ranks in the order TP, EP: 4 per node
    nodes = 16
    copies = moe.expected_destinations(256, 8, nodes, 8, 4)
    n = copies * tokens * cfg.hidden * 2
    t_net = 4 * comm.alltoall_time(n, nodes, *job.out_ab)
    t_node = moe.layer_alltoall_time(int(tokens), cfg.hidden, g, *job.up_ab, experts_per_token=8)
    load = terms.expert_load_factor(job, lay)[0]
    assert terms._alltoall_per_moe_layer(job, lay)[0] == pytest.approx(max(t_net, t_node) * load)
    # fewer copies cross the network than Megatron's one-per-expert dispatcher sends
    _, plain_job, _ = _job_and_layout()
    assert terms._alltoall_per_moe_layer(job, lay)[0] < terms._alltoall_per_moe_layer(
        plain_job, lay)[0]


def test_overlapped_alltoall_exposes_only_its_excess_over_a_layers_compute():
    cfg, job, lay = _job_and_layout(moe_dispatcher="deepep", moe_comm_overlap=True)
    layer = terms.layer_compute(job, lay)
    stage = terms.slowest_stage(job, lay, layer)
    a2a = terms._alltoall_per_moe_layer(job, lay)
    want = np.maximum(a2a - (stage.mean.forward + stage.mean.backward), 0) * stage.moe / stage.layers
    assert terms.ep_comm(job, lay, stage).total == pytest.approx(want)
    _, plain_job, _ = _job_and_layout(moe_dispatcher="deepep")
    assert terms.ep_comm(job, lay, stage).total[0] < terms.ep_comm(plain_job, lay, stage).total[0]


def test_estimate_takes_the_dispatcher_and_names_a_bad_one():
    kw = dict(gpus=1024, gpu="h100-sxm", tp=2, pp=8, dp=64, ep=64, vpp=4, global_batch=8192,
              seq=4096, zero=2, dtype="fp8")
    plain = plan.estimate("deepseek-v3", **kw)
    deepep = plan.estimate("deepseek-v3", moe_dispatcher="deepep", moe_comm_overlap=True, **kw)
    assert deepep.breakdown["ep_comm"] < plain.breakdown["ep_comm"]
    assert deepep.config["moe_dispatcher"] == "deepep" and "moe_dispatcher" not in plain.config
    with pytest.raises(ValueError, match="moe_dispatcher"):
        plan.estimate("deepseek-v3", moe_dispatcher="nccl", **kw)
    with pytest.raises(ValueError, match="moe_dispatcher"):
        plan.search("deepseek-v3", gpus=1024, global_batch=8192, seq=4096, moe_dispatcher="x")


def test_search_folds_the_experts_when_etp_is_fixed():
    # Qwen3-235B as Megatron-Bridge runs it: EP 32 over a stage of TP 2 x DP 16 GPUs only with
    # expert-tensor parallelism 1 (the experts refold the stage); without it EP must divide DP
    kw = dict(gpus=256, global_batch=2048, seq=4096, tp=2, pp=8, dp=16, ep=32, vpp=4,
              micro_batch=1, dtype="fp8")
    assert plan.search("qwen3-235b-a22b", expert_tensor_parallel=1, top=1, **kw)
    assert not plan.search("qwen3-235b-a22b", top=1, **kw)
    run = dataclasses.replace(runs.get("bridge-qwen3-235b-256"), ep=64)    # 64 > 2 x 16
    with pytest.raises(ValueError, match="expert_tensor_parallel = 1 x ep divide tp x cp x dp"):
        predict_run(run)


def test_per_node_dispatch_keeps_the_per_expert_time_where_experts_do_not_split_over_nodes():
    # Qwen1.5-MoE's 60 experts over EP 60 spans 8 nodes (7.5 of them full): no even split,
    # so the estimate plans with one copy per expert instead of raising
    kw = dict(gpus=480, tp=1, pp=1, dp=480, ep=60, global_batch=480, seq=4096)
    deepep = plan.estimate("qwen1.5-moe-a2.7b", moe_dispatcher="deepep", **kw)
    plain = plan.estimate("qwen1.5-moe-a2.7b", **kw)
    assert deepep.breakdown["ep_comm"] == pytest.approx(plain.breakdown["ep_comm"])


def test_overlapped_deepep_computes_on_the_sms_its_kernels_leave():
    kw = dict(gpus=1024, gpu="h100-sxm", tp=2, pp=8, dp=64, ep=64, vpp=4, global_batch=8192,
              seq=4096, zero=2, dtype="fp8", moe_dispatcher="deepep", moe_comm_overlap=True)
    default = plan.estimate("deepseek-v3", **kw)
    free = plan.estimate("deepseek-v3", moe_comm_sms=0, **kw)
    sms = hardware.matmul_ceiling("h100-sxm", "fp8").sms      # 132 on an H100 SXM
    assert default.config["moe_comm_sms"] == terms.DEEPEP_SMS == 20
    assert "moe_comm_sms" not in free.config
    assert default.breakdown["compute"] / free.breakdown["compute"] == pytest.approx(
        sms / (sms - 20))
    # the matmuls op-level recompute runs again share the SMs too
    op = {n: plan.estimate("deepseek-v3", recompute="selective-op", moe_comm_sms=n, **kw)
          for n in (None, 0)}
    assert op[None].breakdown["recompute"] / op[0].breakdown["recompute"] == pytest.approx(
        sms / (sms - 20))
    # not overlapped, the kernels take nothing from compute: no default, and no setting
    apart = plan.estimate("deepseek-v3", **{**kw, "moe_comm_overlap": False})
    assert "moe_comm_sms" not in apart.config


@pytest.mark.parametrize("sms, overlap, word", [(132, True, "132 SMs"), (-1, True, ">= 0"),
                                                 (2.5, True, "whole number"),
                                                 (20, False, "moe_comm_overlap")])
def test_bad_comm_sms_are_named(sms, overlap, word):
    kw = dict(gpus=1024, gpu="h100-sxm", tp=2, pp=8, dp=64, ep=64, vpp=4, global_batch=8192,
              seq=4096, zero=2, dtype="fp8", moe_dispatcher="deepep")
    with pytest.raises(ValueError, match=word):
        plan.estimate("deepseek-v3", moe_comm_sms=sms, moe_comm_overlap=overlap, **kw)
    with pytest.raises(ValueError, match=word):     # the search (dtbook plan without --dp) too
        plan.search("deepseek-v3", moe_comm_sms=sms, moe_comm_overlap=overlap, **kw)
