"""The planner's FSDP2 term (dtbook.plan.terms.fsdp2) beside the chapter functions it
calls, and its collective count beside a real FSDP2 run on gloo (chapters 19, 20, 27)."""

import numpy as np
import pytest

from dtbook import comm, memory, models, plan, zero
from dtbook.plan import model as pmodel
from dtbook.plan import terms

CFG = models.get("llama3-8b")
COLS = dict(tp=1, pp=1, cp=1, ep=1, vpp=1, micro_batch=2, zero=3, recompute=1,
            sequence_parallel=1)


def _evaluate(dp, **kw):
    cols = {k: np.array([v]) for k, v in {**COLS, "dp": dp, **kw.pop("cols", {})}.items()}
    out = pmodel.evaluate(CFG, gpus=dp, gpu="h100-sxm", seq=8192, global_batch=2 * dp,
                          dtype=kw.pop("dtype", "bf16"), gpus_per_node=8, cols=cols,
                          data_parallel_engine="fsdp2", **kw)
    job = terms.Job.make(CFG, gpu="h100-sxm", seq=8192, global_batch=2 * dp)
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}, job


def _units():
    blocks = sum(CFG.layer_params(i) for i in range(CFG.layers))
    return blocks / CFG.layers, CFG.num_params() - blocks


def _shard_link(job, dp):
    """NVLink inside a node; across nodes the network through the eight GPUs' NICs of each
    node, up to NVLink's rate (terms.communication.group_collective_time)."""
    if dp <= job.gpus_per_node:
        return job.up_ab
    return job.out_ab[0], min(job.gpus_per_node * job.out_ab[1], job.up_ab[1])


@pytest.mark.parametrize("dp", [8, 128])
def test_fsdp2_term_is_chapter_20s_prefetch_over_chapter_12s_collectives(dp):
    # one micro-batch, ZeRO-3 without PP: forward = the root's gather, then the blocks'
    # gathers one unit ahead on a serial link (chapter 20's prefetch_step_time); backward =
    # the next block's gather and this block's FP32 reduce-scatter per unit, less the last
    # block's gather (kept), then the root's reduce-scatter. Inside a node on NVLink, across
    # nodes on the scale-out link through every GPU's NIC.
    out, job = _evaluate(dp)
    ab = _shard_link(job, dp)
    block, root = _units()
    L, cf, cb = CFG.layers, out["layer_forward"], out["layer_backward"]
    g, r = comm.allgather_time(2 * block, dp, *ab), comm.reduce_scatter_time(4 * block, dp, *ab)
    rg, rr = comm.allgather_time(2 * root, dp, *ab), comm.reduce_scatter_time(4 * root, dp, *ab)
    fwd = rg + zero.prefetch_step_time(L, cf, g, 1, "serial") - L * cf
    bwd = zero.prefetch_step_time(L, cb, g + r, 1, "serial") - L * cb - g + rr
    assert out["zero3_comm"] == pytest.approx(fwd + bwd, rel=1e-9)
    assert out["dp_comm"] == 0.0               # FSDP2's reduce-scatters replace the DP term
    if g < cf and g + r < cb:                  # every gather but the first hides (chapter 20)
        assert out["zero3_comm"] == pytest.approx(rg + g + r + rr, rel=1e-9)


def test_zero2_and_pipeline_gather_once():
    # reshard_after_forward=False (ZeRO column 2): forward gathers, backward only reduces
    out, job = _evaluate(128, cols=dict(zero=2))
    block, root = _units()
    ab = _shard_link(job, 128)
    L, cf, cb = CFG.layers, out["layer_forward"], out["layer_backward"]
    g, r = comm.allgather_time(2 * block, 128, *ab), comm.reduce_scatter_time(4 * block, 128, *ab)
    rg, rr = comm.allgather_time(2 * root, 128, *ab), comm.reduce_scatter_time(4 * root, 128, *ab)
    want = (rg + zero.prefetch_step_time(L, cf, g, 1, "serial") - L * cf
            + zero.prefetch_step_time(L, cb, r, 1, "serial") - L * cb + rr)
    assert out["zero3_comm"] == pytest.approx(want, rel=1e-9)
    # ZeRO 0/1 under FSDP2 is DDP: the Megatron terms unchanged
    ddp, _ = _evaluate(128, cols=dict(zero=1))
    cols = {k: np.array([v]) for k, v in {**COLS, "dp": 128, "zero": 1}.items()}
    meg = pmodel.evaluate(CFG, gpus=128, gpu="h100-sxm", seq=8192, global_batch=256,
                          dtype="bf16", gpus_per_node=8, cols=cols)
    assert ddp["step_time"] == pytest.approx(float(meg["step_time"][0]))


def test_hsdp_all_reduces_across_replicas_beside_the_shard_group():
    # 128 GPUs as 16 replicas of 8-GPU shard groups: gathers and reduce-scatters on NVLink,
    # each unit's FP32 gradient shard all-reduced over the 16 replicas across nodes, the two
    # links at once: per unit the larger of the two
    out, job = _evaluate(128, hsdp_replicas=16)
    block, root = _units()
    L, cf, cb = CFG.layers, out["layer_forward"], out["layer_backward"]
    g = comm.allgather_time(2 * block, 8, *job.up_ab)
    r = comm.reduce_scatter_time(4 * block, 8, *job.up_ab)
    a = comm.allreduce_time(4 * block / 8, 16, *job.out_ab)
    rg = comm.allgather_time(2 * root, 8, *job.up_ab)
    rr = max(comm.reduce_scatter_time(4 * root, 8, *job.up_ab),
             comm.allreduce_time(4 * root / 8, 16, *job.out_ab))
    want = (rg + zero.prefetch_step_time(L, cf, g, 1, "serial") - L * cf
            + zero.prefetch_step_time(L, cb, max(g + r, a), 1, "serial") - L * cb - g + rr)
    assert out["zero3_comm"] == pytest.approx(want, rel=1e-9)
    fsdp, _ = _evaluate(128)
    # memory: the state sharded over the 8-GPU shard group only
    assert out["memory_state"] > fsdp["memory_state"]


def test_fsdp2_memory_is_chapter_19s_sharded_state_and_buffers():
    # ZeRO-3 state over the shard group, two gathered units and one FP32 reduce-scatter input
    # (memory.sharded_buffer_bytes, FSDP2's one-unit lookahead), the root held gathered
    out, _ = _evaluate(128)
    block, root = _units()
    psi = CFG.num_params()
    want = (memory.zero_state_bytes(psi, 128, 3)
            + memory.sharded_buffer_bytes(block, gathers=2, reduces=1, param_bytes=2,
                                          reduce_bytes=4) + 2 * root)
    assert out["memory_state"] == pytest.approx(want, rel=1e-9)


def test_float8_all_gather_sends_the_linear_weights_in_one_byte():
    cols = {k: np.array([v]) for k, v in {**COLS, "dp": 128}.items()}
    job = terms.Job.make(CFG, gpu="h100-sxm", seq=8192, global_batch=256, dtype="fp8")
    lay = terms.Layouts.of(cols, job)
    b = CFG.param_breakdown()
    blocks, _ = _units()
    linear = (b["attention"] + b["mlp"]) / (blocks * CFG.layers)   # of the blocks' parameters
    assert terms.fsdp2_units(job, lay, True)[2] == pytest.approx(1 * linear + 2 * (1 - linear))
    assert terms.fsdp2_units(job, lay, False)[2] == 2
    f8, _ = _evaluate(128, dtype="fp8", fsdp_float8_all_gather=True)
    bf, _ = _evaluate(128, dtype="fp8")
    assert f8["zero3_comm"] < bf["zero3_comm"]


def test_estimate_takes_the_engine_and_names_bad_arguments():
    kw = dict(gpus=8, tp=1, pp=1, dp=8, micro_batch=2, global_batch=16, seq=8192, zero=3)
    e = plan.estimate("llama3-8b", data_parallel_engine="fsdp2", **kw)
    assert e.config["data_parallel_engine"] == "fsdp2" and e.breakdown["dp_comm"] == 0
    assert "data_parallel_engine" not in plan.estimate("llama3-8b", **kw).config
    for bad, word in ((dict(data_parallel_engine="deepspeed"), "data_parallel_engine"),
                      (dict(data_parallel_engine="fsdp2", hsdp_replicas=3), "hsdp_replicas"),
                      (dict(hsdp_replicas=2), "hsdp_replicas"),
                      (dict(data_parallel_engine="fsdp2", hsdp_replicas=0), "hsdp_replicas"),
                      (dict(data_parallel_engine="fsdp2", fsdp_float8_all_gather=True),
                       "fsdp_float8_all_gather")):
        with pytest.raises(ValueError, match=word):
            plan.estimate("llama3-8b", **kw, **bad)
    # search passes the engine through (evaluate's keywords are searchable)
    best = plan.search("llama3-8b", gpus=8, global_batch=16, seq=8192, top=1,
                       data_parallel_engine="fsdp2", tp=1, pp=1, zero=3)
    assert best[0].config["data_parallel_engine"] == "fsdp2"


def test_collective_counts():
    assert terms.fsdp2_collectives(32) == {"all_gather": 64, "reduce_scatter": 33}
    assert terms.fsdp2_collectives(32, zero=2, microbatches=4) == {"all_gather": 132,
                                                                   "reduce_scatter": 132}
    assert terms.fsdp2_collectives(16, pp=8, microbatches=8) == {"all_gather": 17,
                                                                 "reduce_scatter": 17}


# ------------------------------------------------------------------ a real FSDP2 step on gloo

LAYERS, WIDTH = 3, 16


def _fsdp_worker(rank, world_size):
    # torchtitan's wrapping on a toy model: fully_shard per block (reshard_after_forward for
    # every block but the last, or for none: ZeRO 2), then the root (its own embedding and
    # head; default reshard), BF16 parameters, FP32 reduce-scatter; one step, counted
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from dtbook.parallel.counting import CommCounter

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(WIDTH, WIDTH, bias=False)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
                for _ in range(LAYERS))
            self.head = nn.Linear(WIDTH, 4, bias=False)

        def forward(self, x):
            x = self.embed(x)
            for b in self.blocks:
                x = x + b(x)
            return self.head(x)

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    out = {}
    for stage in (3, 2):
        torch.manual_seed(0)
        model = Toy()
        for i, b in enumerate(model.blocks):
            fully_shard(b, mp_policy=mp,
                        reshard_after_forward=stage == 3 and i < LAYERS - 1)
        fully_shard(model, mp_policy=mp)
        with CommCounter() as c:
            model(torch.randn(4, WIDTH)).float().sum().backward()
        block = sum(p.numel() for p in model.blocks[0].parameters())
        root = sum(p.numel() for p in model.parameters()) - LAYERS * block
        out[stage] = dict(calls=[(k.op, k.nbytes) for k in c.calls], block=block, root=root)
    return out


def test_collectives_of_a_real_fsdp2_step_match_the_count():
    from dtbook.dist import launch

    for r in launch(_fsdp_worker, 2, timeout=180):
        for stage in (3, 2):
            got = r[stage]
            gathers = sorted(n for op, n in got["calls"] if "all_gather" in op)
            scatters = sorted(n for op, n in got["calls"] if "reduce_scatter" in op)
            want = terms.fsdp2_collectives(LAYERS, zero=stage)
            assert (len(gathers), len(scatters)) == (want["all_gather"], want["reduce_scatter"])
            # bytes: BF16 gathers of a unit, FP32 reduce-scatter inputs (sharded_buffer_bytes)
            block, root = got["block"], got["root"]
            n_block = want["all_gather"] - 1
            assert gathers == sorted([memory.sharded_buffer_bytes(block, 1, 0, 2)] * n_block
                                     + [memory.sharded_buffer_bytes(root, 1, 0, 2)])
            assert scatters == sorted([memory.sharded_buffer_bytes(block, 0, 1, 2, 4)] * LAYERS
                                      + [memory.sharded_buffer_bytes(root, 0, 1, 2, 4)])


def test_search_keeps_only_layouts_the_hsdp_replicas_divide():
    kw = dict(gpus=128, global_batch=512, seq=8192, data_parallel_engine="fsdp2")
    rows = plan.search("llama3-8b", **kw, hsdp_replicas=16, top=20)
    assert rows and all((r.config["dp"] * r.config["cp"]) % 16 == 0 and r.config["zero"] >= 2
                        for r in rows)
    stages = plan.funnel("llama3-8b", **kw, hsdp_replicas=3)
    assert list(stages.values())[-1] == 0 and "HSDP replicas divide DP x CP, sharded" in stages
    with pytest.raises(ValueError, match="hsdp_replicas"):
        plan.search("llama3-8b", gpus=128, global_batch=512, seq=8192, hsdp_replicas=2)
