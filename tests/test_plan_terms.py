"""Each term of the planner (dtbook.plan.terms), computed over an array of candidate
configurations, beside the chapter function it stands for called one configuration at a time
with plain numbers (chapter 27). A disagreement is a bug in one of the two.

The configurations cover dense and MoE models, pp 1 and > 1, interleaving (vpp > 1), cp > 1
inside and across nodes, sequence parallelism on and off, ZeRO 0-3, recompute none,
selective and full, flash and unfused attention, and the A100's measured all-reduce curve."""

import numpy as np
import pytest

from dtbook import (activations, comm, data_parallel, flops, hardware, memory, models, moe,
                    offload, pipeline_parallel, plan, schedules, sequence_parallel,
                    tensor_parallel)
from dtbook.plan import terms
from dtbook.plan.gemm import matmul_time
from dtbook.plan.model import RECOMPUTE, evaluate

KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
         "sequence_parallel")

# (model, job keywords, candidates as (tp, pp, dp, cp, ep, vpp, micro_batch, zero, recompute, sp))
GROUPS = {
    "dense": ("llama3-70b", dict(gpu="h100-sxm", seq=8192, global_batch=512), [
        (8, 1, 64, 1, 1, 1, 1, 0, "none", 1),          # no pipeline, plain ZeRO-0
        (4, 4, 8, 2, 1, 2, 2, 1, "selective", 0),      # interleaved, CP 2 in a node, no SP
        (8, 8, 4, 1, 1, 1, 1, 3, "full", 1),           # ZeRO-3, full recompute
        (2, 2, 16, 4, 1, 1, 1, 2, "none", 1),          # CP 4 in a node, ZeRO-2
        (8, 16, 2, 2, 1, 5, 1, 1, "none", 1),          # CP across nodes, 5 virtual stages
        (1, 1, 512, 1, 1, 1, 1, 1, "selective", 1),    # data parallel only
    ]),
    "moe": ("mixtral-8x7b", dict(gpu="h100-sxm", seq=4096, global_batch=256), [
        (2, 4, 8, 1, 8, 1, 1, 1, "none", 1),           # EP 8: TP x EP = 16, across nodes
        (4, 2, 4, 2, 4, 2, 2, 2, "full", 0),           # EP x TP = 16, CP 2, interleaved
        (1, 1, 64, 1, 2, 1, 1, 0, "selective", 1),     # EP 2 inside a node
    ]),
    "short": ("llama3-70b", dict(gpu="h100-sxm", seq=2048, global_batch=64), [
        (8, 1, 1, 8, 1, 1, 1, 1, "none", 1),           # CP 8 across nodes: the ring is exposed
        (8, 2, 2, 4, 1, 2, 1, 0, "full", 0),
    ]),
    "unfused": ("gpt3-175b", dict(gpu="a100-80gb", seq=2048, global_batch=1536, dtype="fp16",
                                  attention="unfused", overlap_grad_reduce=False,
                                  gradient_accumulation_fusion=False,
                                  pipeline_engine="deepspeed"), [
        (8, 12, 8, 1, 1, 1, 1, 1, "full", 0),
        (8, 8, 16, 1, 1, 1, 2, 0, "selective", 0),
        (4, 8, 32, 1, 1, 1, 1, 2, "none", 1),
    ]),
}


def _setup(group):
    name, kw, rows = GROUPS[group]
    cfg = models.get(name)
    job = terms.Job.make(cfg, **kw)
    cols = {k: np.array([float(r[i]) if k != "recompute" else float(RECOMPUTE.index(r[i]))
                         for r in rows]) for i, k in enumerate(KNOBS)}
    lay = terms.Layouts.of(cols, job)
    configs = [dict(zip(KNOBS, r)) for r in rows]
    for c in configs:   # each is a configuration estimate() accepts
        gpus = c["tp"] * c["pp"] * c["dp"] * c["cp"]
        plan.estimate(cfg, gpus=gpus, **kw, **{k: c[k] for k in KNOBS[:-1]},
                      sequence_parallel=bool(c["sequence_parallel"]))
    return cfg, job, lay, configs, cols, kw


@pytest.fixture(params=list(GROUPS))
def case(request):
    return _setup(request.param)


def _links(job, inside):
    return job.up_ab if inside else job.out_ab


def _seq(job, c):
    return job.seq / c["cp"]


def test_layer_compute_is_the_gemm_model_and_the_attention_flops(case):
    cfg, job, lay, configs, _, _ = case
    layer = terms.layer_compute(job, lay)
    h, hd = cfg.hidden, cfg.head_dim
    for i, c in enumerate(configs):
        tp, cp, mb = c["tp"], c["cp"], c["micro_batch"]
        if job.attention == "flash":
            kern = hardware.attention_kernel(job.gpu)
            causal = flops.attention_flops(mb, job.seq, cfg.heads // tp, hd) / 2 / cp
            assert layer.core[i] == pytest.approx(causal / kern.forward, rel=1e-12)
            assert layer.core_backward[i] == pytest.approx(2.5 * causal / kern.backward, rel=1e-12)
        else:   # the score matrix as two batched GEMMs, every product
            t = (matmul_time(_seq(job, c), job.seq, hd, job.gpu, count=mb * cfg.heads / tp)
                 + matmul_time(_seq(job, c), hd, job.seq, job.gpu, count=mb * cfg.heads / tp))
            assert layer.core[i] == pytest.approx(t, rel=1e-12)
        T = mb * job.seq / cp
        assert layer.logits[i] == pytest.approx(matmul_time(T, cfg.vocab / tp, h, job.gpu), rel=1e-12)
        if not cfg.is_moe:
            mult = 2 if cfg.mlp == "swiglu" else 1
            lin = sum(matmul_time(T, n, k, job.gpu, dtype=job.dtype) for n, k in (
                ((cfg.heads + 2 * cfg.kv_heads) * hd / tp, h), (h, cfg.heads * hd / tp),
                (mult * cfg.ffn_hidden / tp, h), (h, cfg.ffn_hidden / tp)))
            assert layer.linear[i] == pytest.approx(lin, rel=1e-12)


def test_stage_and_recompute_follow_the_layer_split(case):
    cfg, job, lay, configs, _, _ = case
    layer = terms.layer_compute(job, lay)
    stage = terms.slowest_stage(job, lay, layer)
    again = terms.recompute(job, lay, layer)
    for i, c in enumerate(configs):
        pp = c["pp"]
        per = layer.forward[i] + layer.backward[i]
        busiest = -(-cfg.layers // pp)
        last = busiest if cfg.layers % pp == 0 or pp == 1 else busiest - 1
        assert stage.compute[i] == pytest.approx(max(busiest * per, last * per + 3 * layer.logits[i]))
        mode = c["recompute"]
        expect = {"none": 0.0, "selective": layer.core[i], "full": layer.forward[i]}[mode]
        assert again.forward[i] == 0 and again.backward[i] == pytest.approx(expect)


def test_elementwise_is_every_ops_values_at_the_measured_bandwidth(case):
    cfg, job, lay, configs, _, _ = case
    ew = terms.elementwise(job, lay)
    triad = hardware.memory_ceiling(job.gpu).triad
    for i, c in enumerate(configs):
        T = c["micro_batch"] * _seq(job, c)
        fwd, bwd = terms.elementwise_values(cfg, T, _seq(job, c), c["tp"], c["sequence_parallel"],
                                            job.attention)
        flash_fwd, _ = terms.elementwise_values(cfg, T, _seq(job, c), c["tp"],
                                                c["sequence_parallel"])
        scores = fwd - flash_fwd       # the unfused softmax's ops, which selective re-runs
        if cfg.is_moe:   # an MoE block: its experts' activation over k routed copies of each
            # token (the busiest rank's load), Megatron-Core's permute and unpermute (3k·h + h
            # values forward, 2k·h + 2h backward), the attention half's ops as a dense block's
            attn_f, attn_b = terms.elementwise_values(cfg, T, _seq(job, c), c["tp"],
                                                      c["sequence_parallel"], job.attention,
                                                      mlp_activation=False)
            k, h, f = cfg.experts_per_token, cfg.hidden, cfg.moe_ffn_hidden / c["tp"]
            rows = T * k * terms.expert_load_factor(job, lay)[i]
            moe_f = attn_f + 3 * rows * f + T * (3 * k * h + h)
            moe_b = attn_b + 5 * rows * f + T * (2 * k * h + 2 * h)
            share = (cfg.layers - cfg.dense_layers) / cfg.layers
            fwd, bwd = (1 - share) * fwd + share * moe_f, (1 - share) * bwd + share * moe_b
        again = {"none": 0.0, "selective": scores, "full": fwd}[c["recompute"]]
        assert ew.forward[i] == pytest.approx(2 * fwd / triad)
        assert ew.backward[i] == pytest.approx(2 * (bwd + again) / triad)


def test_tp_term_is_chapter_15s_layer_comm_time(case):
    cfg, job, lay, configs, _, _ = case
    tp_t = terms.tp_comm(job, lay)
    curve = hardware.busbw_curve(job.up)
    for i, c in enumerate(configs):
        tp, mb = c["tp"], c["micro_batch"]
        full = c["recompute"] == "full"
        if tp == 1:
            assert tp_t.total[i] == 0
            continue
        alpha, beta = _links(job, tp <= job.gpus_per_node)
        if curve is None:
            fwd = tensor_parallel.layer_comm_time(mb, _seq(job, c), cfg.hidden, tp, alpha, beta,
                                                  backward=False)
            both = tensor_parallel.layer_comm_time(mb, _seq(job, c), cfg.hidden, tp, alpha, beta)
        else:   # at the bus bandwidth measured for the message size (A100 NVSwitch)
            n = tensor_parallel.activation_bytes(mb, _seq(job, c), cfg.hidden)
            one = 2 * (tp - 1) / tp * n / curve.at(n * curve.ranks / tp)
            fwd = tensor_parallel.allreduces_per_layer(backward=False) * one
            both = tensor_parallel.allreduces_per_layer() * one
        assert tp_t.forward[i] == pytest.approx(fwd)
        assert tp_t.total[i] == pytest.approx(both + (fwd if full else 0.0))


def test_cp_term_is_chapter_17s_ring_transfers_less_the_core(case):
    cfg, job, lay, configs, _, _ = case
    layer = terms.layer_compute(job, lay)
    cp_t = terms.cp_comm(job, lay, layer)
    for i, c in enumerate(configs):
        tp, cp = c["tp"], c["cp"]
        width = cfg.kv_heads * cfg.head_dim / min(tp, cfg.kv_heads)   # this rank's kv heads
        block = sequence_parallel.ring_kv_step_bytes(c["micro_batch"], job.seq, width, cp)
        step = comm.p2p_time(block, *_links(job, tp * cp <= job.gpus_per_node))
        ring = sequence_parallel.ring_kv_transfers(cp) * step
        exposed = max(0.0, ring - layer.core[i] - layer.core_backward[i])
        assert cp_t.total[i] == pytest.approx(exposed, abs=1e-15)
        assert cp_t.forward[i] == pytest.approx(exposed / 3, abs=1e-15)   # cp - 1 of 3 (cp - 1)
        if cp > 1:
            assert ring > 0 and sequence_parallel.ring_kv_transfers(cp) == 3 * (cp - 1)


def test_ep_term_is_chapter_18s_layer_alltoall_time(case):
    cfg, job, lay, configs, _, _ = case
    ep_t = terms.ep_comm(job, lay)
    for i, c in enumerate(configs):
        if not cfg.is_moe or c["ep"] == 1:
            assert ep_t.total[i] == 0
            continue
        T, ep, k, E = c["micro_batch"] * _seq(job, c), c["ep"], cfg.experts_per_token, cfg.experts
        # ranks in the order TP, CP, EP: g of the EP group's ranks share a node; the rest of
        # the all-to-all crosses the scale-out link while that share runs on NVLink
        g = min(ep, max(1, job.gpus_per_node // (c["tp"] * c["cp"])))
        t_up, t_out = (moe.layer_alltoall_time(int(T), cfg.hidden, ep, *_links(job, inside),
                                               experts_per_token=k) for inside in (True, False))
        t = t_up if g >= ep else max(t_out * (ep - g) / (ep - 1), t_up * (g - 1) / (ep - 1))
        # the busiest EP rank: chapter 18's (1 - 1/ep) load quantile over its E/ep experts
        c_e = moe.capacity_factor_for_overflow(int(ep * T), E, k, overflow=1 / ep)
        load = 1 + (c_e - 1) * np.sqrt(ep / E)
        assert ep_t.total[i] == pytest.approx((cfg.layers - cfg.dense_layers) / cfg.layers * t * load)


def test_pp_term_is_chapter_16s_message_over_the_links(case):
    cfg, job, lay, configs, _, _ = case
    sends = terms.pp_comm(job, lay)
    per_mb = 4 if job.pipeline_engine == "deepspeed" else 2
    for i, c in enumerate(configs):
        tp, sp = c["tp"], c["sequence_parallel"]
        if c["pp"] == 1:
            assert sends[i] == 0
            continue
        n = pipeline_parallel.p2p_message_bytes(c["micro_batch"], _seq(job, c), cfg.hidden)
        if tp * c["cp"] * c["ep"] * c["pp"] <= job.gpus_per_node:
            t = comm.p2p_time(n / (tp if sp else 1), *job.up_ab)
        else:
            t = comm.p2p_time(n / tp, *job.out_ab)
            if not sp and tp > 1:
                t += comm.allgather_time(n, tp, *job.up_ab)
        assert sends[i] == pytest.approx(per_mb * c["vpp"] * t)


def test_pipeline_is_chapter_16s_batch_time_and_its_bubble(case):
    cfg, job, lay, configs, _, _ = case
    fwd, bwd = np.linspace(1.0, 2.0, len(configs)), np.linspace(2.0, 3.0, len(configs))
    total, bubble = terms.pipeline(lay, fwd, bwd)
    for i, c in enumerate(configs):
        m = job.global_batch // (c["dp"] * c["micro_batch"])
        t = pipeline_parallel.batch_time(c["pp"], m, fwd[i], bwd[i], virtual_stages=c["vpp"])
        assert total[i] == pytest.approx(t)
        idle = pipeline_parallel.interleaved_bubble_fraction(c["pp"], m, c["vpp"])
        assert bubble[i] == pytest.approx(idle * t, abs=1e-12)
        if c["pp"] > 1:   # and the schedule simulator agrees on the idle share
            name = "interleaved-1f1b" if c["vpp"] > 1 else "1f1b"
            sim = schedules.simulate(name, c["pp"], m, virtual_stages=c["vpp"],
                                     t_forward=fwd[i] / c["vpp"], t_backward=bwd[i] / c["vpp"])
            assert sim.bubble_fraction == pytest.approx(idle)


def _params(cfg, c):
    expert = 0
    if cfg.is_moe:
        expert = (cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
    return (cfg.num_params() - expert + expert / c["ep"]) / (c["tp"] * c["pp"])


def _replica_link(job, c, reps, stride=None):
    """The link a data-parallel group's ring runs on: NVLink inside a node; across nodes the
    network through each of the group's GPUs' NICs in a node (its ranks ``stride`` apart,
    TP's size by default), up to NVLink's rate (nccl-tests issue #119)."""
    per_node = min(max(job.gpus_per_node // (stride or c["tp"]), 1), reps)
    if per_node >= reps:
        return job.up_ab
    return job.out_ab[0], min(per_node * job.out_ab[1], job.up_ab[1])


def _reduce(job, c, grads, weights, reps, stride=None):
    link = _replica_link(job, c, max(reps, 2), stride)
    if c["zero"] >= 1:
        return (comm.reduce_scatter_time(grads, max(reps, 2), *link)
                + comm.allgather_time(weights, max(reps, 2), *link))
    return comm.allreduce_time(grads, max(reps, 2), *link)


def test_dp_term_is_chapter_14s_gradient_buffer_and_overlap(case):
    # the dense weights' gradients over the dp x cp replicas; an MoE model's routed experts'
    # over their expert-data-parallel copies (dp x cp / ep, ranks tp x cp x ep apart)
    cfg, job, lay, configs, _, _ = case
    params = terms.params_per_gpu(job, lay)
    backward, layers = np.full(len(configs), 0.5), np.full(len(configs), 10.0)
    dp_t = terms.dp_comm(job, lay, backward, layers)
    expert = ((cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
              if cfg.is_moe else 0)
    for i, c in enumerate(configs):
        psi = _params(cfg, c)
        assert params[i] == pytest.approx(psi)
        reps = c["dp"] * c["cp"]
        held = psi * c["tp"] * c["pp"]
        grads = data_parallel.gradient_buffer_bytes(held, tp=c["tp"], pp=c["pp"],
                                                    grad_bytes=job.grad_bytes)
        assert grads == pytest.approx(psi * (2 if job.dtype == "fp16" else 4))
        tp_pp = c["tp"] * c["pp"]
        dense = cfg.num_params() - expert
        t = _reduce(job, c, data_parallel.gradient_buffer_bytes(dense, tp=c["tp"], pp=c["pp"],
                                                                grad_bytes=job.grad_bytes),
                    2 * dense / tp_pp, reps)
        copies = reps / c["ep"]
        if expert and copies > 1:
            local = expert / c["ep"]
            t += _reduce(job, c, data_parallel.gradient_buffer_bytes(
                local, tp=c["tp"], pp=c["pp"], grad_bytes=job.grad_bytes), 2 * local / tp_pp,
                copies, c["tp"] * c["cp"] * c["ep"])
        if job.overlap_grad_reduce:
            t = data_parallel.overlapped_step_time(0.5, t, 10) - 0.5
        assert dp_t[i] == pytest.approx(t, abs=1e-15)


def test_zero3_and_optimizer_terms(case):
    cfg, job, lay, configs, _, _ = case
    params = terms.params_per_gpu(job, lay)
    compute = np.full(len(configs), 0.01)
    z3 = terms.zero3_comm(job, lay, params, compute)
    opt = terms.optimizer(job, lay, params)
    triad = hardware.memory_ceiling(job.gpu).triad
    assert offload.optimizer_step_bytes(grad_bytes=4) == 30
    for i, c in enumerate(configs):
        psi, reps = _params(cfg, c), c["dp"] * c["cp"]
        m = job.global_batch / (c["dp"] * c["micro_batch"])
        gather = comm.allgather_time(2 * psi, max(reps, 2), *_replica_link(job, c, max(reps, 2)))
        assert z3[i] == pytest.approx(m * max(0.0, 2 * gather - 0.01) if c["zero"] == 3 else 0.0)
        local = psi / (reps if c["zero"] >= 1 else 1)
        # Adam, the 16-bit copy's second read of the master weight (Megatron's
        # _copy_main_params_to_model_params), with FP16 gradients their cast and unscale
        adam = offload.optimizer_step_bytes(grad_bytes=4) + 4 + (14 if job.dtype == "fp16" else 0)
        assert opt[i] == pytest.approx(((adam + 4) * local + 4 * psi) / triad)


def test_state_memory_is_chapter_20s_zero_state(case):
    cfg, job, lay, configs, _, _ = case
    state = terms.state_memory(job, lay, terms.params_per_gpu(job, lay))
    # Megatron's gradient buffer (W3, issue 22): FP32 with BF16; FP16 plus an FP32 main-grad
    # copy held with the optimizer state with FP16 (tests/test_plan_memory.py: the README's table)
    widths = (dict(grad_bytes=2, optimizer_bytes=12) if job.dtype == "fp16"
              else dict(grad_bytes=4))
    for i, c in enumerate(configs):
        # an expert's weights live on dp·cp/ep GPUs of the stage, and only those share its state
        experts = 0.0
        if cfg.is_moe:
            experts = ((cfg.layers - cfg.dense_layers) * cfg.experts
                       * cfg.mlp_params(cfg.moe_ffn_hidden) / (c["tp"] * c["pp"] * c["ep"]))
        reps = c["dp"] * c["cp"]
        assert state[i] == pytest.approx(
            memory.zero_state_bytes(_params(cfg, c) - experts, reps, c["zero"], **widths)
            + memory.zero_state_bytes(experts, reps / c["ep"], c["zero"], **widths))


def test_activation_memory_is_chapter_06s_breakdown_times_chapter_16s_in_flight(case):
    cfg, job, lay, configs, _, _ = case
    stage = terms.slowest_stage(job, lay, terms.layer_compute(job, lay))
    acts = terms.activation_memory(job, lay, stage)
    eager = job.attention != "flash"
    for i, c in enumerate(configs):
        pp, vpp, rc = c["pp"], c["vpp"], c["recompute"]
        m = job.global_batch // (c["dp"] * c["micro_batch"])

        def layer(mode):
            return activations.layer_activation_bytes(
                c["micro_batch"], _seq(job, c), cfg.hidden, cfg.heads, cfg.ffn_hidden,
                dropout=eager, attention="eager" if eager else "flash", tp=c["tp"],
                sequence_parallel=bool(c["sequence_parallel"]), recompute=mode)

        kept = layer(rc)
        extra = layer("none") if rc == "full" else 0.0

        def in_flight(s):
            if vpp > 1:
                return pipeline_parallel.activations_in_flight(
                    pp, m, stage=s, schedule="interleaved-1f1b", virtual_stages=vpp)
            return pipeline_parallel.activations_in_flight(pp, m, stage=s)

        busiest = -(-cfg.layers // pp)
        last = busiest if cfg.layers % pp == 0 or pp == 1 else busiest - 1
        logits = 4 * c["micro_batch"] * _seq(job, c) * cfg.vocab / c["tp"]
        first = in_flight(0) * busiest / vpp * kept + extra + (logits if pp == 1 else 0.0)
        end = in_flight(pp - 1) * last / vpp * kept + extra + logits
        assert acts[i] == pytest.approx(max(first, end))


def test_model_flops_is_chapter_01s_count_with_causal_attention():
    cfg = models.get("llama3-70b")
    job = terms.Job.make(cfg, gpu="h100-sxm", seq=8192, global_batch=512)
    f = flops.transformer_matmul_flops(cfg, 512, 8192)
    assert terms.model_flops(job) == pytest.approx(3 * (f["forward"] - f["attention_forward"] / 2))


def test_evaluate_is_the_sum_of_the_terms(case):
    cfg, job, lay, configs, cols, kw = case
    out = evaluate(cfg, gpus=0, gpus_per_node=8, cols=cols, **{"dtype": "bf16", **kw})
    time_terms = ("compute", "recompute", "elementwise", "grad_accum", "tp_comm", "cp_comm",
                  "ep_comm", "pp_comm", "bubble", "dp_comm", "zero3_comm", "optimizer")
    np.testing.assert_allclose(sum(out[k] for k in time_terms), out["step_time"], rtol=1e-12)
    np.testing.assert_allclose(out["memory_state"] + out["memory_activations"]
                               + out["memory_framework"], out["memory_per_gpu"], rtol=1e-12)
    for i, c in enumerate(configs):   # and estimate() of one configuration is the same row
        gpus = c["tp"] * c["pp"] * c["dp"] * c["cp"]
        e = plan.estimate(cfg, gpus=gpus, **{k: c[k] for k in KNOBS[:-1]},
                          sequence_parallel=bool(c["sequence_parallel"]), **kw)
        assert e.step_time == pytest.approx(out["step_time"][i], rel=1e-12)
        assert e.memory_per_gpu == pytest.approx(out["memory_per_gpu"][i], rel=1e-12)
