"""Chapter 14: the data-parallel formulas against independent computations, and the bucket
plan against PyTorch's own bucketing."""

import numpy as np
import pytest
import sympy as sp
import torch
import torch.distributed as dist

from dtbook import comm, data_parallel as dp
from dtbook import symbolic as S
from dtbook.parallel.data_parallel import bucket_plan


def _simulate_overlap(t_backward, t_comm, layers):
    """Event by event: layer i's gradient is ready at (i + 1)·T_b/L; the link sends one
    layer's T_r/L at a time, in order."""
    c, r = t_backward / layers, t_comm / layers
    link_free = 0.0
    for i in range(layers):
        link_free = max(link_free, (i + 1) * c) + r
    return link_free


@pytest.mark.parametrize("tb,tr,L", [(80, 100, 100), (100, 40, 10), (5, 5, 1), (3, 7, 4)])
def test_overlapped_step_time_equals_an_event_simulation(tb, tr, L):
    assert np.isclose(dp.overlapped_step_time(tb, tr, L), _simulate_overlap(tb, tr, L))


def test_ratio_is_compute_over_comm_for_large_world():
    params, b, F, beta = 7e9, 2048, 989e12, 450e9
    t_comp = dp.compute_time(params, b, F)
    t_comm = dp.comm_time(params, 10**6, 0, beta, grad_bytes=2)
    assert np.isclose(dp.compute_comm_ratio(b, F, beta, grad_bytes=2), t_comp / t_comm,
                      rtol=1e-5)
    b3 = dp.breakeven_tokens(F, beta, grad_bytes=2, ratio=3)
    assert np.isclose(dp.compute_comm_ratio(b3, F, beta, grad_bytes=2), 3)


def test_gradient_bytes_sent_is_the_ring_count_and_symbolic():
    assert dp.gradient_bytes_sent(1000, 4, grad_bytes=4) == 2 * 3 / 4 * 4000
    s = sp.Symbol("s", positive=True)
    expr = dp.gradient_bytes_sent(S.params, S.world, grad_bytes=s)
    assert S.same(expr, 2 * (S.world - 1) / S.world * S.params * s)
    assert sp.limit(expr, S.world, sp.oo) == 2 * S.params * s
    with pytest.raises(TypeError):
        dp.gradient_bytes_sent(1000, 4, 4)       # the byte width is keyword-only, required
    with pytest.raises(TypeError):
        dp.gradient_bytes_sent(1000, 4)


def test_gradient_buffer_bytes_is_the_rank_share_and_what_the_ring_reduces():
    psi, rep = 7e9, 1e6
    assert dp.gradient_buffer_bytes(psi, grad_bytes=2) == 2 * psi
    buf = dp.gradient_buffer_bytes(psi, tp=4, pp=2, grad_bytes=2, replicated=rep)
    assert np.isclose(buf, 2 * ((psi - rep) / 8 + rep / 2))
    # what a rank sends to all-reduce it is the ring's 2(P - 1)/P of the buffer
    assert np.isclose(dp.gradient_bytes_sent(buf / 2, 8, grad_bytes=2), 2 * 7 / 8 * buf)
    with pytest.raises(ValueError, match="tp"):
        dp.gradient_buffer_bytes(psi, tp=0, grad_bytes=2)


def test_accumulation_and_staleness_against_direct_sums():
    A, tc, tr = 6, 0.3, 0.3
    assert np.isclose(dp.accumulation_speedup(A, tc, tr), 2 * A / (A + 1))
    tau = np.arange(16)
    assert np.isclose(dp.staleness_mean_penalty(15, 0.1), np.mean(np.exp(-0.1 * tau)))


def test_scaling_efficiencies():
    assert dp.strong_scaling_efficiency(8.0, 0.0, 8) == 1.0
    assert np.isclose(dp.strong_scaling_efficiency(8.0, 1.0, 8), 0.5)
    assert np.isclose(dp.strong_scaling_efficiency(8.0, 2.0, 8, overlap=True), 8.0 / 16)
    assert dp.strong_scaling_efficiency(8.0, 0.5, 8, overlap=True) == 1.0
    assert np.isclose(dp.weak_scaling_efficiency(3.0, 1.0), 0.75)
    assert dp.straggler_step_time([1.0, 1.5, 1.2], 0.25) == 1.75


def test_reduction_bound_holds_for_fp16_chains():
    g = torch.randn(8, 20000, generator=torch.Generator().manual_seed(1)).half()
    chain = g[0].clone()
    for row in g[1:]:
        chain = chain + row
    exact = g.double().sum(0)
    bound = dp.reduction_error_bound(8, 2.0**-11, g.double().abs().sum(0).numpy())
    assert np.all((chain.double() - exact).abs().numpy() <= bound * 1.01 + 1e-12)


def _torch_plan(sizes_numel, cap, first_cap):
    """PyTorch's own assignment (C++), on tensors in the order the backward produces them."""
    tensors = [torch.empty(n) for n in reversed(sizes_numel)]
    buckets, _ = dist._compute_bucket_assignment_by_size(tensors, [first_cap, cap], [False] * len(tensors))
    last = len(sizes_numel) - 1
    return sorted([sorted(last - i for i in b) for b in buckets], key=lambda b: -max(b))


@pytest.mark.parametrize("seed", range(6))
def test_bucket_plan_matches_pytorch(seed):
    rng = np.random.default_rng(seed)
    numel = [int(x) for x in rng.integers(1, 300_000, size=int(rng.integers(1, 30)))]
    cap, first = int(rng.integers(100_000, 2_000_000)), int(rng.integers(10_000, 500_000))
    ours = bucket_plan([4 * n for n in numel], cap, first_cap=first)
    assert sorted(sorted(b) for b in ours) == sorted(_torch_plan(numel, cap, first))
    assert sorted(i for b in ours for i in b) == list(range(len(numel)))


def test_bucket_plan_refuses_a_zero_cap():
    with pytest.raises(ValueError, match="cap"):
        bucket_plan([4, 4], 0)


def test_memory_per_device_is_a_whole_replica_of_adams_state():
    """fp32 Adam holds parameter, gradient and two moments, 4 + 4 + 8 bytes, on every rank:
    counted from torch's own tensors, and equal to chapter 19's breakdown for mixed precision."""
    from dtbook import memory

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    opt.step()
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters()]
    tensors += [t for st in opt.state.values() for t in st.values() if t.dim() > 0]
    counted = sum(t.numel() * t.element_size() for t in tensors)
    psi = sum(p.numel() for p in model.parameters())
    assert counted == dp.memory_per_device(psi, 16)
    assert dp.memory_per_device(7e9) == memory.model_state_bytes(7e9)
