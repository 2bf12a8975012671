"""Chapter 20: dtbook.zero's closed forms against independent computations (SymPy limits,
data parallelism's all-reduce, an event simulation of prefetching), and the hand-written
ZeRO-1/2 against one process on gloo ranks."""

import itertools

import numpy as np
import pytest
import sympy as sp

from dtbook import data_parallel, memory, zero
from dtbook.symbolic import params as Psi, world as P


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_limit_is_the_sympy_limit_of_the_per_device_bytes(stage):
    per_device = memory.zero_state_bytes(Psi, P, stage)
    assert sp.simplify(sp.limit(per_device, P, sp.oo) - zero.memory_limit(Psi, stage)) == 0
    assert np.isclose(zero.memory_limit(7e9, stage), memory.zero_state_bytes(7e9, 1e12, stage),
                      rtol=1e-9, atol=1.0)


def test_reductions_are_the_papers_fractions():
    for p in (1, 4, 8, 64, 1000):
        assert np.isclose(zero.memory_reduction(p, 1), 4 * p / (p + 3))
        assert np.isclose(zero.memory_reduction(p, 2), 8 * p / (p + 7))
        assert np.isclose(zero.memory_reduction(p, 3), p)


def test_stages_one_and_two_send_dps_allreduce_and_stage_three_half_as_much_again():
    for p, s in itertools.product((2, 3, 8, 64), (2, 4)):
        dp = data_parallel.gradient_bytes_sent(1e9, p, grad_bytes=s)
        for stage in (0, 1, 2):
            assert np.isclose(zero.step_comm_bytes(1e9, p, stage, s, s), dp)
        assert np.isclose(zero.step_comm_bytes(1e9, p, 3, s, s), 1.5 * dp)
        assert np.isclose(zero.step_comm_bytes(1e9, p, 1, s, s, naive=True), 1.5 * dp)
    with pytest.raises(ValueError, match="naive"):
        zero.step_comm_bytes(1e9, 8, 2, naive=True)
    with pytest.raises(ValueError, match="stage"):
        zero.step_comm_bytes(1e9, 8, 4)


def test_batch_for_overhead_puts_the_overhead_where_asked():
    args = (7e9, 32, 64, 2048, 1e-5, 100e9, 150e12)
    b = zero.batch_for_overhead(*args, overhead=0.05)
    assert np.isclose(zero.zero3_overhead(7e9, 32, 64, b, 2048, 1e-5, 100e9, 150e12), 0.05)
    # α → 0 and P large: the bandwidth term alone, the same for every model size
    for params, layers in ((1e9, 16), (70e9, 80)):
        big = zero.batch_for_overhead(params, layers, 10**6, 2048, 0, 100e9, 150e12, 0.05)
        assert np.isclose(big, zero.breakeven_batch(2048, 150e12, 100e9, 0.05), rtol=1e-5)


def _simulate(layers, tc, tg, k, link):
    """Event simulation of the forward pass, gathers issued k layers ahead: layer j's gather
    is issued when layer j − k starts, a serial link takes one gather at a time."""
    if k == 0:
        return layers * (tg + tc)
    start, done = [], []
    link_free, t = 0.0, 0.0
    issue = {j: 0.0 for j in range(min(k, layers))}
    for j in range(layers):
        begin = max(issue[j], link_free) if link == "serial" else issue[j]
        done.append(begin + tg)
        link_free = done[-1]
        start.append(max(t, done[-1]))
        if j + k < layers:
            issue[j + k] = start[j]
        t = start[-1] + tc
    return t


@pytest.mark.parametrize("link", ["concurrent", "serial"])
def test_prefetch_step_time_equals_an_event_simulation(link):
    rng = np.random.default_rng(0)
    for _ in range(300):
        layers, k = int(rng.integers(1, 20)), int(rng.integers(0, 6))
        tc, tg = rng.uniform(0.1, 5.0, size=2)
        want = _simulate(layers, tc, tg, k, link)
        assert np.isclose(zero.prefetch_step_time(layers, tc, tg, k, link=link), want), \
            (layers, tc, tg, k, link)


def test_lookahead_hides_concurrent_gathers_exactly_from_k_star():
    tc, tg, layers = 1.0, 3.5, 12
    k_star = zero.prefetch_lookahead(tg, tc)
    assert k_star == 4
    floor = tg + layers * tc
    assert np.isclose(zero.prefetch_step_time(layers, tc, tg, k_star), floor)
    assert zero.prefetch_step_time(layers, tc, tg, k_star - 1) > floor + 0.1


def _sharded_worker(rank, world_size, stage, steps):
    import torch
    import torch.nn.functional as F
    from dtbook.parallel.zero import ShardedAdamW

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(12, 5, generator=g), torch.randn(12, 3, generator=g)
    rows = slice(rank * 12 // world_size, (rank + 1) * 12 // world_size)
    opt = ShardedAdamW(model.parameters(), stage=stage, lr=1e-2, weight_decay=0.1)
    for _ in range(steps):
        model.zero_grad()
        F.mse_loss(model(X[rows]), Y[rows]).backward()
        opt.step()
    return [p.detach() for p in model.parameters()], opt.state_bytes(), opt.shard


@pytest.mark.parametrize("stage", [1, 2])
def test_sharded_adamw_equals_one_process(stage):
    import torch
    import torch.nn.functional as F
    from dtbook.dist import launch

    world, steps = 4, 3
    runs = launch(_sharded_worker, world, stage, steps, timeout=120)
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(12, 5, generator=g), torch.randn(12, 3, generator=g)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(ref(X), Y).backward()
        opt.step()
    psi = sum(p.numel() for p in ref.parameters())      # 66 = 4·16 + 2: the flat buffer is padded
    for params, state, shard in runs:
        for p, q in zip(params, ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)
        assert shard == -(-psi // world)
        assert state["params"] == 4 * psi and state["master"] == 4 * shard
        assert state["optimizer"] == 8 * shard
        assert state["grads"] == (4 * psi if stage == 1 else 4 * shard)
