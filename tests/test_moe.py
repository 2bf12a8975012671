"""Chapter 18: dtbook.moe's closed forms against simulations and independent counts, and
dtbook.parallel.moe's layer against straightforward loops and one process."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import moe
from dtbook.parallel import moe as expert


def test_load_std_is_the_binomial_spread_summed_from_its_pmf():
    T, E, k = 64, 8, 2
    q = k / E
    pmf = np.array([math.comb(T, j) * q**j * (1 - q)**(T - j) for j in range(T + 1)])
    mean = (np.arange(T + 1) * pmf).sum()
    var = ((np.arange(T + 1) - mean) ** 2 * pmf).sum()
    assert np.isclose(moe.load_std(T, E, k), np.sqrt(var))


def test_drop_rate_matches_a_simulation_of_uniform_routing():
    rng = np.random.default_rng(0)
    T, E, k = 64, 8, 2
    for cf in (1.0, 1.25):
        C = int(moe.capacity(T, E, k, cf))
        choice = np.argsort(rng.random((3000, T, E)), axis=-1)[:, :, :k]
        load = np.stack([(choice == e).sum(axis=(1, 2)) for e in range(E)], axis=-1)
        simulated = np.maximum(load - C, 0).sum(-1).mean() / (k * T)
        assert abs(simulated - moe.drop_rate(T, E, k, cf)) < 0.004


def test_capacity_factor_for_overflow_puts_capacity_at_the_normal_quantile():
    from statistics import NormalDist

    c = moe.capacity_factor_for_overflow(64, 8, 2, 0.01)
    z = (c * 16 - 16) / np.sqrt(12)
    assert np.isclose(1 - NormalDist().cdf(z), 0.01)
    # the symbolic path gives the same number
    p = sp.Symbol("p", positive=True)
    expr = moe.capacity_factor_for_overflow(64, 8, 2, p)
    assert np.isclose(float(expr.subs(p, sp.Rational(1, 100))), c)


def test_drop_rate_symbolic_equals_numeric():
    cf = sp.Symbol("c", positive=True)
    expr = moe.drop_rate(64, 8, 2, cf)
    assert np.isclose(float(expr.subs(cf, sp.Rational(5, 4))), moe.drop_rate(64, 8, 2, 1.25))


def test_expert_choice_skip_fraction_matches_random_subsets():
    rng = np.random.default_rng(1)
    T, E, k = 400, 8, 2
    C = k * T // E
    missed = []
    for _ in range(300):
        taken = np.zeros(T, bool)
        for _e in range(E):
            taken[rng.choice(T, C, replace=False)] = True
        missed.append(1 - taken.mean())
    assert abs(np.mean(missed) - moe.expert_choice_skip_fraction(E, k)) < 0.005


def test_expert_choice_gives_every_expert_exactly_c_distinct_tokens():
    logits = torch.randn(100, 5, generator=torch.Generator().manual_seed(0))
    tokens, weights = expert.expert_choice(logits, 40)
    assert tokens.shape == (5, 40)
    assert all(len(set(row.tolist())) == 40 for row in tokens)
    g = logits.softmax(-1)
    assert torch.allclose(weights, g.T.gather(1, tokens))


def test_aux_loss_and_its_gradient_direction_match_autograd():
    torch.manual_seed(0)
    T, E = 50, 4
    z = torch.randn(T, E, requires_grad=True)
    _, idx, g = expert.route_topk(z, 1)
    loss = expert.aux_loss(g, idx, E, alpha=1.0)
    f = torch.bincount(idx.view(-1), minlength=E).double().numpy() / T
    assert np.isclose(loss.item(), moe.aux_loss(f, g.mean(0).detach().numpy(), 1.0), rtol=1e-6)
    loss.backward()
    # for each token, dL/dz_j = (αE/T)·g_j(f_j − Σ f_i g_i): the direction with its own g
    for t in (0, 7, 31):
        gt = g[t].detach().double().numpy()
        want = E / T * moe.aux_gradient_direction(f, gt)
        assert np.allclose(z.grad[t].numpy(), want, atol=1e-6)
    assert moe.aux_loss_uniform(8, 0.01) == pytest.approx(moe.aux_loss([1 / 8] * 8, [1 / 8] * 8))


def test_capacity_keep_equals_a_first_come_loop():
    idx = torch.randint(0, 4, (30, 2), generator=torch.Generator().manual_seed(3))
    idx[:, 1] = (idx[:, 0] + 1 + idx[:, 1] % 3) % 4                 # distinct experts per token
    keep = expert.capacity_keep(idx, 4, 6)
    seen, want = [0] * 4, torch.zeros_like(keep)
    for choice in range(2):                                        # first choices first
        for t in range(30):
            e = int(idx[t, choice])
            want[t, choice] = seen[e] < 6
            seen[e] += 1
    assert torch.equal(keep, want)


def test_moe_dense_equals_a_per_token_loop():
    gen = torch.Generator().manual_seed(4)
    x, wg = torch.randn(20, 6, generator=gen), torch.randn(5, 6, generator=gen)
    w1, w2 = torch.randn(5, 6, 8, generator=gen), torch.randn(5, 8, 6, generator=gen)
    y, info = expert.moe_dense(x, wg, w1, w2, 2)
    for t in range(20):
        g = (x[t] @ wg.T).softmax(-1)
        top = g.topk(2)
        want = sum(w / top.values.sum() * expert.expert_ffn(x[t:t + 1], w1[e], w2[e])[0]
                   for w, e in zip(top.values, top.indices))
        assert torch.allclose(y[t], want, atol=1e-5)
    assert info["load"].sum() == 40


def test_dispatch_matrix_equals_counting_a_forced_routing():
    P, E, T = 4, 8, 112
    shares = [0.5] + [0.5 / 7] * 7
    idx = torch.cat([torch.zeros(56, dtype=torch.long), torch.arange(56) % 7 + 1])
    per_rank = torch.bincount(idx // (E // P), minlength=P).double().numpy()
    m = moe.dispatch_matrix(shares, T, P)
    assert np.allclose(m, np.tile(per_rank, (P, 1)))
    assert np.allclose(moe.dispatch_received_bytes(shares, T, 1, P, 1, 1),
                       (P - 1) * per_rank)
    assert np.allclose(moe.dispatch_sent_bytes(shares, T, 1, P, 1, 1), T - per_rank)


def test_health_metrics_against_independent_formulas():
    load = np.array([50.0, 10, 10, 20, 5, 5])
    p = load / load.sum()
    assert np.isclose(moe.normalized_entropy(load), -(p * np.log(p)).sum() / np.log(6))
    x = np.sort(load)
    n = len(x)
    assert np.isclose(moe.gini(load), ((2 * np.arange(1, n + 1) - n - 1) * x).sum() / (n * x.sum()))
    assert moe.normalized_entropy([1, 1, 1, 1]) == pytest.approx(1.0)
    assert moe.gini([0, 0, 0, 4]) == pytest.approx(3 / 4)
    assert moe.max_min_ratio([0, 1]) == math.inf


def test_rank_layout_round_trips_and_partitions_the_world():
    tp, ep, world = 4, 8, 64
    for rank in range(world):
        assert moe.rank_of(*expert.coordinates(rank, tp, ep), tp, ep) == rank
    groups = expert.layout_groups(world, tp, ep)
    for kind, size in (("tp", tp), ("ep", ep), ("dp", world // (tp * ep))):
        members = sorted(r for g in groups[kind] for r in g)
        assert members == list(range(world)) and all(len(g) == size for g in groups[kind])
    with pytest.raises(ValueError):
        expert.layout_groups(10, 4, 2)


def _ep_worker(rank, world_size):
    import torch
    from dtbook.parallel import moe as expert
    from dtbook.parallel.counting import CommCounter

    gen = torch.Generator().manual_seed(0)
    E, H, T = 4, 6, 10
    x_all, wg = torch.randn(world_size * T, H, generator=gen), torch.randn(E, H, generator=gen)
    w1, w2 = torch.randn(E, H, 8, generator=gen), torch.randn(E, 8, H, generator=gen)
    loc = E // world_size
    x = x_all[rank * T:(rank + 1) * T].clone().requires_grad_()
    first = rank * loc                                   # global id of this rank's first expert
    w1l = w1[first:first + loc].clone().requires_grad_()
    weights, idx, _ = expert.route_topk(x @ wg.T, 2)
    with CommCounter() as c:
        y = expert.ep_forward(x, weights, idx,
                              lambda b, e: expert.expert_ffn(b, w1l[e - first], w2[e]), E)
    y.pow(2).sum().backward()
    return y.detach(), x.grad, w1l.grad, [(k.op, k.nbytes) for k in c.calls]


def test_expert_parallel_layer_equals_one_process_and_sends_ktHs():
    from dtbook.dist import launch

    out = launch(_ep_worker, 2, timeout=120)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20, 6, generator=gen).requires_grad_()
    wg = torch.randn(4, 6, generator=gen)
    w1 = torch.randn(4, 6, 8, generator=gen).requires_grad_()
    w2 = torch.randn(4, 8, 6, generator=gen)
    y, _ = expert.moe_dense(x, wg, w1, w2, 2)
    y.pow(2).sum().backward()
    assert torch.allclose(torch.cat([o[0] for o in out]), y.detach(), atol=1e-5)
    assert torch.allclose(torch.cat([o[1] for o in out]), x.grad, atol=1e-5)
    assert torch.allclose(torch.cat([o[2] for o in out]), w1.grad, atol=1e-5)
    for _, _, _, calls in out:
        assert calls[0] == ("all_to_all_single", 4 * 8)                  # the counts
        assert calls[1] == ("all_to_all_single", int(moe.alltoall_bytes(10, 6, 2, 4)))


def test_layout_bytes_are_the_ring_and_pairwise_counts():
    """Chapter 18's per-GPU bytes of each axis against chapter 12's closed forms, typed here:
    all-to-all (P − 1)/P·n per call, ring all-reduce 2(t − 1)/t·n per call."""
    T, H, k = 4096, 4096, 2
    n = k * T * H * 2
    assert moe.layer_alltoall_bytes(T, H, 8, k, 2) == pytest.approx(4 * 7 / 8 * n)
    assert moe.layer_alltoall_bytes(T, H, 8, k, 2, backward=False) == pytest.approx(2 * 7 / 8 * n)
    assert moe.expert_tp_bytes_sent(T, H, 4, k, 2) == pytest.approx(2 * 2 * 3 / 4 * n)
