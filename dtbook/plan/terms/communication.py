"""The communication the planner's step exposes (chapter 27): tensor-parallel all-reduces,
ring-attention K/V transfers, expert-parallel all-to-alls, pipeline sends, and the data-parallel
reduction and ZeRO-3 gathers after and around the pipeline.
"""

from __future__ import annotations

import numpy as np

from ... import (comm, data_parallel, hardware, mesh, moe, pipeline_parallel,
                  sequence_parallel, tensor_parallel)
from .job import Job, LayerCompute, Layouts, Seconds, VALUE
from .compute import _expert_layout, expert_load_factor
from .footprint import _expert_params_per_gpu, expert_replicas, params_per_gpu

__all__ = ["tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_comm"]


def _in_node_allreduce(n, p, link, alpha, beta):
    """Ring all-reduce of ``n`` bytes over ``p`` GPUs of one node. Where the link has a
    published bus bandwidth curve (:func:`dtbook.hardware.busbw_curve`), at the bus bandwidth
    measured for that message size: ``2 (p - 1)/p n / busbw``, the curve (measured on its own
    ``ranks`` GPUs) read at the same per-step block, ``n/p`` bytes. Elsewhere the alpha-beta
    ring with NCCL's protocol efficiency (``alpha``, ``beta``)."""
    curve = hardware.busbw_curve(link)
    if curve is None:
        return comm.allreduce_time(n, p, alpha, beta)
    p = np.asarray(p, dtype=float)
    return 2 * (p - 1) / p * n / curve.at(n * curve.ranks / p)


def tp_comm(job: Job, lay: Layouts) -> Seconds:
    """One layer's tensor-parallel all-reduces, not overlapped: :func:`dtbook.tensor_parallel.
    allreduces_per_layer` of them (forward 2, backward 2, and with full recompute the
    forward's again; op-level recompute saves the reduce-scatters and re-runs the forward's
    all-gathers, half its collectives with sequence parallelism, all of them without), each
    a ring all-reduce of :func:`dtbook.tensor_parallel.activation_bytes` over NVLink (at the
    busbw measured for its size where published) or, for a TP group wider than a node, across
    nodes through each of its GPUs' NICs (:func:`group_collective_time`, TP innermost: a
    whole node of it in each)."""
    n = tensor_parallel.activation_bytes(lay.mb, job.seq / lay.cp, job.cfg.hidden,
                                         bytes_per_element=VALUE)
    t = np.where(lay.tp <= job.gpus_per_node, _in_node_allreduce(n, lay.tp, job.up, *job.up_ab),
                 group_collective_time(job, "allreduce", n, lay.tp, job.gpus_per_node))
    forward = tensor_parallel.allreduces_per_layer(backward=False)
    op_level = np.where(lay.sp == 1, forward / 2, forward)
    again = np.select([lay.rc == 2, lay.rc == 3], [forward, op_level], 0)
    backward = tensor_parallel.allreduces_per_layer() - forward + again
    on = lay.tp > 1
    return Seconds(np.where(on, forward * t, 0.0), np.where(on, backward * t, 0.0))


def cp_comm(job: Job, lay: Layouts, layer: LayerCompute) -> Seconds:
    """One layer's ring-attention K/V transfers beyond what the attention core they feed
    hides: ``cp - 1`` transfers of a K/V block (:func:`dtbook.sequence_parallel.
    ring_kv_step_bytes`, this rank's kv heads) forward and twice that backward, each a
    point-to-point send (:func:`dtbook.comm.p2p_time`) on NVLink while TP x CP fits a node:
    :func:`dtbook.sequence_parallel.ring_kv_transfers` with ``kv_saved=False``, the backward
    sending K and V again beside their gradients, as Megatron-Core's CP does."""
    cfg, cp = job.cfg, lay.cp
    if not np.any(cp > 1):
        return Seconds(np.zeros_like(cp), np.zeros_like(cp))
    kv_width = cfg.kv_heads * cfg.head_dim / np.minimum(lay.tp, cfg.kv_heads)
    block = sequence_parallel.ring_kv_step_bytes(lay.mb, job.seq, kv_width, cp, value_bytes=VALUE)
    inside = lay.tp * cp <= job.gpus_per_node
    step = comm.p2p_time(block, np.where(inside, job.up_ab[0], job.out_ab[0]),
                         np.where(inside, job.up_ab[1], job.out_ab[1]))
    # production CP (Transformer Engine): backward circulates K, V again beside dK, dV
    transfers = sequence_parallel.ring_kv_transfers(cp, kv_saved=False)
    exposed = np.maximum(0.0, transfers * step - (layer.core + layer.core_backward))
    forward = sequence_parallel.ring_kv_transfers(cp, backward=False) / np.maximum(transfers, 1)
    return Seconds(forward * exposed, (1 - forward) * exposed)


def ep_comm(job: Job, lay: Layouts, stage=None) -> Seconds:
    """The expert-parallel all-to-alls of one (mean) layer of ``stage`` (the slowest stage;
    without it, of the model), exposed: :func:`dtbook.moe.layer_alltoall_time` (dispatch and
    combine, forward and backward: 4 pairwise all-to-alls of the tokens' k routed copies) in
    each MoE layer, carrying the busiest rank's :func:`expert_load_factor`. Placement: ranks
    in the order TP, CP, EP, so an EP group has g = gpus_per_node / (tp * cp) of its ``ep``
    ranks in each node (with an expert-tensor-parallel size: :func:`_expert_layout`). Inside
    one node (g >= ep) all of it runs on NVLink; across nodes a
    rank's g - 1 same-node peers take their (g - 1)/(ep - 1) share over NVLink while the
    other (ep - g)/(ep - 1) crosses the scale-out link, at the same time: the slower decides.
    Half forward, half backward.

    With ``moe_comm_overlap`` (Megatron-Core's ``overlap_moe_expert_parallel_comm``, which
    interleaves one micro-batch's forward with another's backward so that each one's
    all-to-alls run under the other's compute; DeepSeek-V3's DualPipe pairs them the same
    way, Sec. 3.2.1 of its report) only what exceeds one layer's forward and backward compute
    is exposed: max(0, all-to-alls - compute)."""
    cfg, ep = job.cfg, lay.ep
    if not job.moe_layers:
        return Seconds(np.zeros_like(ep), np.zeros_like(ep))
    share = (job.moe_layers / cfg.layers if stage is None or stage.moe is None
             else stage.moe / np.maximum(stage.layers, 1))
    a2a = _alltoall_per_moe_layer(job, lay)
    if job.moe_comm_overlap and stage is not None and stage.mean is not None:
        a2a = np.maximum(a2a - (stage.mean.forward + stage.mean.backward), 0.0)
    per_layer = share * a2a
    return Seconds(per_layer / 2, per_layer / 2)


def _alltoall_per_moe_layer(job: Job, lay: Layouts):
    """Seconds of one MoE layer's four all-to-alls (:func:`ep_comm`); 0 without EP."""
    cfg, ep = job.cfg, lay.ep
    if not job.moe_layers:
        return np.zeros_like(ep)
    world = np.maximum(ep, 2)
    _, tokens, g = _expert_layout(job, lay)
    g = np.clip(g, 1, world)
    kw = dict(experts_per_token=cfg.experts_per_token)
    t_up = moe.layer_alltoall_time(tokens, cfg.hidden, world, *job.up_ab, **kw)
    t_out = moe.layer_alltoall_time(tokens, cfg.hidden, world, *job.out_ab, **kw)
    t = np.where(g >= world, t_up,
                 np.maximum(t_out * (world - g) / (world - 1), t_up * (g - 1) / (world - 1)))
    if job.moe_dispatcher == "deepep":
        t = np.where(g >= world, t_up, _per_node_dispatch_time(job, tokens, world, g, t))
    return np.where(ep > 1, t * expert_load_factor(job, lay), 0.0)


def _per_node_dispatch_time(job: Job, tokens, world, g, per_expert):
    """One MoE layer's four all-to-alls with a dispatcher that sends a token across the
    scale-out network once per destination node and fans it out inside the node over NVLink
    (DeepSeek-V3 report Sec. 3.2.2: IB to the GPU of the same in-node index, then NVLink;
    DeepEP's internode kernels; Megatron-Core's flex dispatcher). The EP group spans
    ``world / g`` nodes; a token's copies on the network are
    :func:`dtbook.moe.expected_destinations` of those nodes (with the model's group-limited
    routing where the nodes nest in its groups; where the node count is not a multiple of the
    groups, routing is taken as unlimited), a pairwise all-to-all among the nodes; inside each
    node the k copies move among its g ranks. The slower of the two decides. Tokens travel in
    BF16 both ways (DeepSeek dispatches in FP8, which is not modelled). Where the experts do
    not split evenly over the group's nodes, the count of destinations has no closed form
    here and the time stays ``per_expert``'s (one copy per expert)."""
    cfg = job.cfg
    kw = dict(experts_per_token=cfg.experts_per_token)
    t = np.array(np.broadcast_to(per_expert, np.broadcast(tokens, world, g, per_expert).shape),
                 dtype=float)
    for w, gg in set(zip(np.broadcast_to(world, t.shape).ravel().tolist(),
                         np.broadcast_to(g, t.shape).ravel().tolist())):
        nodes = int(np.ceil(w / gg))
        if nodes < 2 or cfg.experts % nodes:
            continue
        groups = cfg.router_groups if nodes % cfg.router_groups == 0 else 1
        copies = moe.expected_destinations(cfg.experts, cfg.experts_per_token, nodes, groups,
                                           (cfg.router_group_topk or groups) if groups > 1 else None)
        at = (np.broadcast_to(world, t.shape) == w) & (np.broadcast_to(g, t.shape) == gg)
        tok = np.broadcast_to(tokens, t.shape)[at]
        # four all-to-alls (dispatch, combine, and each again backward) of the per-node copies
        t_net = 4 * comm.alltoall_time(copies * moe.alltoall_bytes(tok, cfg.hidden), nodes,
                                       *job.out_ab)
        t_node = moe.layer_alltoall_time(tok, cfg.hidden, max(int(gg), 2), *job.up_ab, **kw)
        t[at] = np.maximum(t_net, t_node)
    return t


def pp_comm(job: Job, lay: Layouts):
    """Pipeline sends of one micro-batch, exposed: per model chunk the activation
    (:func:`dtbook.pipeline_parallel.p2p_message_bytes`) forward and its gradient backward
    (Megatron pairs each send with the opposite receive: 2 transfer times; DeepSpeed's
    TrainSchedule blocks on 4). Across nodes each TP rank sends 1/tp of it over its own NIC
    and, without SP, the receivers all-gather it over NVLink (Narayanan et al. 2021, 4.1)."""
    tp, sp = lay.tp, lay.sp
    if not np.any(lay.pp > 1):
        return np.zeros_like(tp)
    n = pipeline_parallel.p2p_message_bytes(lay.mb, job.seq / lay.cp, job.cfg.hidden,
                                            bytes_per_value=VALUE)
    gather = np.where((sp == 0) & (tp > 1),
                      comm.allgather_time(n, np.maximum(tp, 2), *job.up_ab), 0.0)
    inside = tp * lay.cp * lay.ep * lay.pp <= job.gpus_per_node
    send = np.where(inside, comm.p2p_time(n / np.where(sp == 1, tp, 1), *job.up_ab),
                    comm.p2p_time(n / tp, *job.out_ab) + gather)
    sends = 4 if job.pipeline_engine == "deepspeed" else 2
    return np.where(lay.pp > 1, sends * lay.vpp * send, 0.0)


_COLLECTIVES = {"allreduce": comm.allreduce_time, "reduce_scatter": comm.reduce_scatter_time,
                "allgather": comm.allgather_time}


def group_collective_time(job: Job, collective, nbytes, p, per_node):
    """Seconds of one ring ``collective`` (``"allreduce"``, ``"reduce_scatter"``,
    ``"allgather"``) of ``nbytes`` over a group of ``p`` ranks with ``per_node`` of them in
    each node (chapter 27): inside one node (``per_node >= p``) on NVLink; across nodes at
    the network's α and chapter 23's :func:`dtbook.mesh.network_ring_beta`, the per-NIC rate
    times the group's NICs in a node, up to NVLink's (32 H100s over four nodes measure a
    365.84 GB/s all-reduce, nccl-tests issue #309, where one NIC gives 46-48, issue #290).
    One GPU per node is the flat ring on the network."""
    fn = _COLLECTIVES[collective]
    p = np.maximum(np.asarray(p, dtype=float), 2)
    per_node = np.clip(np.asarray(per_node, dtype=float), 1, p)
    beta = mesh.network_ring_beta(per_node, job.up_ab[1], job.out_ab[1])
    return np.where(per_node >= p, fn(nbytes, p, *job.up_ab), fn(nbytes, p, job.out_ab[0], beta))


def _replicas_per_node(job: Job, lay: Layouts, stride=None):
    """GPUs of one data-parallel group in a node: its ranks follow TP's (Megatron-Core's
    tp-cp-ep-dp-pp order, torchtitan's tp-innermost mesh), ``stride`` (default ``tp``)
    apart."""
    stride = lay.tp if stride is None else stride
    return np.maximum(np.floor(job.gpus_per_node / stride), 1.0)


def dp_comm(job: Job, lay: Layouts, backward, layers):
    """The exposed data-parallel reduction of the stage's gradients
    (:func:`dtbook.data_parallel.gradient_buffer_bytes`, FP32 or FP16), each over its own
    group (:func:`group_collective_time`: NVLink inside a node, across nodes the network
    through each of the group's NICs there): the dense weights' over the ``dp * cp``
    replicas, the routed experts' over their expert-data-parallel copies
    (:func:`~dtbook.plan.terms.footprint.expert_replicas`, Megatron-Core's expert data-parallel
    group, its ranks following the expert mesh's ETP x EP). A ring all-reduce, or with ZeRO >=
    1 a reduce-scatter and an all-gather of the BF16 parameters. Overlapped with the last
    micro-batch's ``backward`` of ``layers`` layers bucket by bucket
    (:func:`dtbook.data_parallel.overlapped_step_time`), or all exposed without
    ``overlap_grad_reduce``."""
    def grads(params):      # one TP x PP group's gradient buffer of ``params`` parameters
        return data_parallel.gradient_buffer_bytes(params, tp=lay.tp, pp=lay.pp,
                                                   grad_bytes=job.grad_bytes)

    def reduce(buffer, weights, group, per_node):
        return np.where(lay.zero >= 1,
                        group_collective_time(job, "reduce_scatter", buffer, group, per_node)
                        + group_collective_time(job, "allgather", weights, group, per_node),
                        group_collective_time(job, "allreduce", buffer, group, per_node))

    expert_w = _expert_params_per_gpu(job, lay) * VALUE if job.expert_params else 0.0
    t = reduce(grads(job.params - job.expert_params), params_per_gpu(job, lay) * VALUE - expert_w,
               lay.replicas, _replicas_per_node(job, lay))
    if job.expert_params:   # EDP ranks follow the expert mesh's ETP x EP (_expert_layout)
        e, copies = job.expert_tensor_parallel, expert_replicas(job, lay)
        stride = lay.tp * lay.cp * lay.ep if e is None else e * lay.ep
        # an expert's gradients are split over its ETP ranks, as its weights (expert_w)
        buffer = data_parallel.gradient_buffer_bytes(job.expert_params / lay.ep,
                                                     tp=_expert_layout(job, lay)[0], pp=lay.pp,
                                                     grad_bytes=job.grad_bytes)
        t = t + np.where(copies > 1, reduce(buffer, expert_w, copies,
                                            _replicas_per_node(job, lay, stride)), 0.0)
    if job.overlap_grad_reduce:
        t = data_parallel.overlapped_step_time(backward, t, layers) - backward
    return np.where(lay.replicas > 1, t, 0.0)


def zero3_comm(job: Job, lay: Layouts, params, compute):
    """ZeRO-3's parameter all-gathers before each micro-batch's forward and backward
    (:func:`dtbook.comm.allgather_time` of the BF16 parameters), prefetched: the excess over
    the micro-batch's ``compute``, for every micro-batch."""
    reps = lay.replicas
    if not np.any(lay.zero == 3):
        return np.zeros_like(reps)
    t = np.where(reps > 1, group_collective_time(job, "allgather", params * VALUE, reps,
                                                 _replicas_per_node(job, lay)), 0.0)
    return np.where(lay.zero == 3, lay.m * np.maximum(0.0, 2 * t - compute), 0.0)
