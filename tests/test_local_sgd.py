"""Chapter 29: the formulas of dtbook.local_sgd against independent computations, and the
hand-written strategies of dtbook.parallel.local_sgd against one process and each other."""

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from dtbook import comm
from dtbook import local_sgd as ls
from dtbook.dist import launch
from dtbook.parallel.local_sgd import run_async_sgd


@pytest.mark.parametrize("p", [1, 2, 7, 64, 1000])
def test_harmonic_number_is_the_exact_sum(p):
    exact = sum(Fraction(1, k) for k in range(1, p + 1))
    assert ls.harmonic_number(p) == pytest.approx(float(exact), rel=1e-12)
    assert ls.harmonic_number(sp.Integer(p)) == sp.harmonic(p)


@pytest.mark.parametrize("p", [1, 3, 16])
def test_expected_max_is_the_integral_of_the_tail(p):
    t = np.linspace(0, 60, 600_001)                     # E[max] = ∫ 1 - (1 - e^-t)^p dt
    tail = 1 - (1 - np.exp(-t)) ** p
    integral = np.sum((tail[1:] + tail[:-1]) / 2 * np.diff(t))
    assert ls.expected_max_exponential(p, 2.5) == pytest.approx(2.5 * integral, rel=1e-6)


def test_optimal_interval_minimises_the_cost_on_a_grid():
    grid = np.linspace(0.5, 200, 400_000)
    cost = ls.sync_interval_cost(grid, 0.1, 0.05, 2e-5)
    assert ls.optimal_interval(0.05, 2e-5) == pytest.approx(grid[np.argmin(cost)], rel=1e-3)


def test_sent_bytes_per_step_is_the_ring_traffic_over_h():
    ring = comm.traffic("allreduce", 4e6 * 2, 8).sent_bytes
    assert ls.sync_sent_bytes_per_step(4e6, 8, 25, 2) == pytest.approx(ring / 25)
    assert ls.sync_bytes_per_step(4e6, 25, 2) == pytest.approx(4e6 * 2 / 25)


def test_stale_lr_and_staleness_means():
    assert ls.stale_lr(0.1, 7, 0.5) == pytest.approx(0.1 / 4.5)
    assert ls.staleness_mean(16) == 15
    assert ls.first_round_staleness_mean(16) == np.mean(np.arange(16))
    with pytest.raises(ValueError, match="world"):
        ls.staleness_mean(0)


def test_parameter_server_staleness_adds_up():
    """Each push is seen by every other worker's gradient in flight: the total staleness is
    (P - 1)·N less the pushes after each discarded read, whatever the timing."""
    w = 5
    server = run_async_sgd(lambda x: x, np.ones(3), w, 300, lambda tau: 0.01,
                           lambda rng: rng.exponential(2e-4), seed=3)
    taus = np.array([tau for _, _, tau in server.log])
    unseen = sum(len(taus) - v for _, v in server.discarded)
    assert len(taus) == 300 and len(server.discarded) == w - 1
    assert taus.sum() == (w - 1) * len(taus) - unseen
    assert taus.mean() > 0.8 * ls.staleness_mean(w)


def _strategies(rank, world_size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from dtbook.parallel import local_sgd as L

    torch.manual_seed(0)
    X, Y = torch.randn(16, 6), torch.randn(16, 2)
    mine = [(X[i::4][rank::world_size], Y[i::4][rank::world_size]) for i in range(4)]
    loss_fn = lambda m, b: F.mse_loss(m(b[0]), b[1])

    def model():
        torch.manual_seed(1)
        return nn.Linear(6, 2)

    out = {}
    m = model()
    L.local_sgd(m, torch.optim.SGD(m.parameters(), lr=0.1), mine, loss_fn, 1, world_size)
    out["h1"] = [p.detach() for p in m.parameters()]
    m = model()
    L.local_sgd(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.5), mine, loss_fn, 2,
                world_size)
    out["local"] = [p.detach() for p in m.parameters()]
    m = model()
    L.diloco(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.5),
             torch.optim.SGD(m.parameters(), lr=1.0), mine, loss_fn, 2, world_size)
    out["diloco"] = [p.detach() for p in m.parameters()]
    return out, [(x, y) for x, y in mine]


def test_local_sgd_h1_is_one_process_and_diloco_1_0_is_local_sgd():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    results = launch(_strategies, 2)
    torch.manual_seed(1)
    ref = nn.Linear(6, 2)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):                     # equal shards: the mean loss of the union
        opt.zero_grad()
        xb = torch.cat([results[r][1][step][0] for r in range(2)])
        yb = torch.cat([results[r][1][step][1] for r in range(2)])
        F.mse_loss(ref(xb), yb).backward()
        opt.step()
    for r in range(2):
        out = results[r][0]
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(out["h1"], ref.parameters()))
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(out["diloco"], out["local"]))
