"""A collective over several GPUs per node spreads its network traffic over their NICs
(dtbook.plan.terms.communication.group_collective_time), set beside what NCCL measures."""

import numpy as np
import pytest

from dtbook import comm, mesh, models
from dtbook.plan import terms
from dtbook.plan.terms.communication import _replicas_per_node, group_collective_time

GB = 1e9
BIG = 8 * GB   # nccl-tests' largest buffers: bandwidth-bound


def _job(gpu):
    return terms.Job.make(models.get("llama3-8b"), gpu=gpu, seq=4096, global_batch=64)


def _busbw(job, p, per_node, collective="allreduce"):
    t = group_collective_time(job, collective, BIG, p, per_node)
    return comm.bus_bandwidth(BIG, t, p, collective)


def test_32_h100s_on_four_nodes_match_nccl_tests():
    # nccl-tests issue #309 (2025): all_reduce_perf on 4 HGX H100 nodes, 32 GPU-NIC pairs,
    # "max busbw can get 365.84 GB/s"; the model: 8 NICs at NDR's measured rate, capped by
    # NVLink's measured ring rate (the catalog's published bus bandwidths)
    assert _busbw(_job("h100-sxm"), 32, 8) == pytest.approx(365.84 * GB, rel=0.03)


def test_four_nics_reach_four_times_one():
    # nccl-tests issue #119 (S. Jeaugey): "24GB/s is the peak performance per 200G NIC ...
    # so in your case 96GB/s is the target" for four 200G NICs a node
    job = _job("a100-80gb")
    four = _busbw(job, 8, 4)
    assert four == pytest.approx(96 * GB, rel=0.05)
    assert four == pytest.approx(4 * _busbw(job, 8, 1), rel=1e-3)


def test_one_gpu_per_node_is_the_flat_network_ring_and_a_node_is_nvlink():
    job = _job("h100-sxm")
    p = np.array([16.0, 64.0])
    flat = comm.reduce_scatter_time(BIG, p, *job.out_ab)
    assert np.allclose(group_collective_time(job, "reduce_scatter", BIG, p, 1), flat)
    inside = comm.allgather_time(BIG, 8, *job.up_ab)
    assert group_collective_time(job, "allgather", BIG, 8, 8) == pytest.approx(inside)


def test_eight_gpus_of_a_group_in_a_node_take_nearly_eight_nics():
    # TP 8: a DP group has one GPU per node; TP 1: eight, capped by NVLink a little below 8x
    job = _job("h100-sxm")
    one = group_collective_time(job, "allreduce", BIG, 64, 1)
    eight = group_collective_time(job, "allreduce", BIG, 64, 8)
    assert 7.5 < one / eight < 8.0      # 8 NICs, capped by NVLink a little below 8x


@pytest.mark.parametrize("tp, cp, dp", [(1, 1, 64), (2, 1, 16), (4, 2, 8), (8, 1, 16),
                                        (16, 1, 4), (1, 2, 2), (2, 4, 4)])
def test_the_planners_group_per_node_is_the_meshs(tp, cp, dp):
    # Megatron-Core's tp-cp-ep-dp-pp order (EP folded into DP for the dense weights),
    # torchtitan's [pp, dp, cp, tp] mesh: the dp x cp ranks a gradient is reduced over are
    # one axis of the row-major mesh (pp, dp * cp, tp), counted by chapter 23's formula
    job = _job("h100-sxm")
    lay = terms.Layouts.of(dict(tp=[tp], pp=[2], dp=[dp], cp=[cp], ep=[1], vpp=[1],
                                micro_batch=[1], zero=[1], recompute=[0],
                                sequence_parallel=[0]), job)
    planner = min(_replicas_per_node(job, lay)[0], dp * cp)
    assert planner == mesh.axis_members_per_node((2, dp * cp, tp), 1, job.gpus_per_node)


def test_a_tp_group_wider_than_a_node_rings_over_its_nics():
    # TP 16 on nodes of 8: each node holds eight of the group, whose rings leave through
    # eight NICs (chapter 15's layer time on that link)
    from dtbook import tensor_parallel
    cfg = models.get("llama3-70b")
    job = terms.Job.make(cfg, gpu="h100-sxm", seq=4096, global_batch=64)
    cols = dict(tp=[16.0], pp=[1.0], dp=[4.0], cp=[1.0], ep=[1.0], vpp=[1.0], micro_batch=[1.0],
                zero=[1.0], recompute=[0.0], sequence_parallel=[1.0])
    lay = terms.Layouts.of({k: np.array(v) for k, v in cols.items()}, job)
    link = job.out_ab[0], min(8 * job.out_ab[1], job.up_ab[1])
    want = tensor_parallel.layer_comm_time(1, 4096, cfg.hidden, 16, *link)
    assert terms.tp_comm(job, lay).total[0] == pytest.approx(want)
    one_nic = tensor_parallel.layer_comm_time(1, 4096, cfg.hidden, 16, *job.out_ab)
    assert want < one_nic / 6         # eight NICs, NVLink-capped, plus the ring's latency


def test_the_expert_data_parallel_group_follows_the_expert_mesh():
    # MoE parallel folding with ETP 1 under TP 2 (the Megatron-Bridge rows): the experts'
    # gradients, split over ETP (not TP), reduce over their dp / ep * tp copies, whose ranks
    # are ETP x EP = 4 apart in the expert mesh (pp, edp, ep, etp): two of them in a node
    from dtbook import data_parallel
    cfg = models.get("mixtral-8x7b")
    job = terms.Job.make(cfg, gpu="h100-sxm", seq=4096, global_batch=256,
                         expert_tensor_parallel=1, overlap_grad_reduce=False)
    tp, pp, dp, ep = 2, 1, 16, 4
    cols = dict(tp=[tp], pp=[pp], dp=[dp], cp=[1], ep=[ep], vpp=[1], micro_batch=[1], zero=[1],
                recompute=[0], sequence_parallel=[1])
    lay = terms.Layouts.of({k: np.array(v, dtype=float) for k, v in cols.items()}, job)
    expert = (cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
    dense = cfg.num_params() - expert

    def reduce(params, split, group, per_node):
        link = job.out_ab[0], mesh.network_ring_beta(per_node, job.up_ab[1], job.out_ab[1])
        grads = data_parallel.gradient_buffer_bytes(params, tp=split, pp=pp,
                                                    grad_bytes=job.grad_bytes)
        return (comm.reduce_scatter_time(grads, group, *link)
                + comm.allgather_time(2 * params / (split * pp), group, *link))

    copies = tp * dp // ep
    per_node = mesh.axis_members_per_node((pp, copies, ep, 1), 1, job.gpus_per_node)
    assert (copies, per_node) == (8, 2)
    want = (reduce(dense, tp, dp, mesh.axis_members_per_node((pp, dp, tp), 1, 8))
            + reduce(expert / ep, 1, copies, per_node))
    got = terms.dp_comm(job, lay, np.zeros(1), np.full(1, float(cfg.layers)))
    assert got[0] == pytest.approx(want)


def test_zero3_gathers_through_each_replicas_nic():
    # ZeRO-3 under TP 2 across nodes: four GPUs of each DP group in a node, four NICs
    job = _job("h100-sxm")
    tp, dp = 2, 32
    cols = dict(tp=[tp], pp=[1], dp=[dp], cp=[1], ep=[1], vpp=[1], micro_batch=[1], zero=[3],
                recompute=[0], sequence_parallel=[1])
    lay = terms.Layouts.of({k: np.array(v, dtype=float) for k, v in cols.items()}, job)
    params = terms.params_per_gpu(job, lay)
    per_node = mesh.axis_members_per_node((1, dp, tp), 1, job.gpus_per_node)
    assert per_node == 4
    link = job.out_ab[0], mesh.network_ring_beta(per_node, job.up_ab[1], job.out_ab[1])
    gather = comm.allgather_time(2 * params[0], dp, *link)
    micro_batches = job.global_batch / dp
    got = terms.zero3_comm(job, lay, params, np.zeros(1))
    assert got[0] == pytest.approx(micro_batches * 2 * gather)
