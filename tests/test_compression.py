"""Chapter 28: the compression formulas against simulations of the compressors, and the
hand-written compressors against their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import comm, compression as cz
from dtbook.parallel import compression as C


def test_qsgd_is_unbiased_and_its_variance_is_the_exact_sum_and_under_the_bound():
    g = torch.randn(40, generator=torch.Generator().manual_seed(0)).double()
    gen = torch.Generator().manual_seed(1)
    for s in (1, 3, 8):
        samples = C.qsgd(g.expand(50_000, -1), s, gen)
        frac = s * g.abs() / g.norm()
        p = frac - frac.floor()
        exact = float(g.norm() ** 2 / s**2 * (p * (1 - p)).sum())
        mc = float(((samples - g) ** 2).sum(1).mean())
        assert abs(mc / exact - 1) < 0.03
        assert float((samples.mean(0) - g).abs().max()) < 5 * float(g.norm()) / (2 * s) / math.sqrt(50_000)
        assert exact <= cz.qsgd_variance_bound(40, s) * float(g.norm() ** 2)
        # every sample sits on a level: |Q|/‖g‖ · s is a whole number
        levels = samples.abs() / g.norm() * s
        assert torch.allclose(levels, levels.round(), atol=1e-9)


def test_qsgd_bound_is_the_smaller_branch_and_looser_form_is_4x_in_the_first_term():
    assert cz.qsgd_variance_bound(100, 1) == 10.0          # √d/s = 10 < d/4 = 25
    assert cz.qsgd_variance_bound(100, 100) == 100 / (4 * 100**2)
    assert cz.qsgd_delta2(100, 100) == 4 * cz.qsgd_variance_bound(100, 100)
    d, s = sp.symbols("d s", positive=True)
    assert isinstance(cz.qsgd_variance_bound(d, s), sp.Min)


def test_topk_error_is_within_its_contraction_and_randk_variance_matches_simulation():
    gen = torch.Generator().manual_seed(2)
    g = torch.randn(500, generator=gen) ** 3                 # heavy tails, like gradients
    k = 25
    idx, val = C.topk(g, k)
    kept = C.densify(idx, val, g.numel())
    assert float((g - kept).norm() ** 2 / g.norm() ** 2) <= cz.topk_delta2(500, k)
    assert set(idx.tolist()) == set(g.abs().argsort(descending=True)[:k].tolist())
    draws = torch.stack([C.densify(*C.randk(g, k, gen), 500) for _ in range(5_000)])
    rel = float(((draws - g) ** 2).sum(1).mean() / g.norm() ** 2)
    # 5,000 draws: the mean's standard error is 1.6%, so four of them
    assert rel == pytest.approx(cz.randk_variance(500, k), rel=0.065)


def test_error_feedback_loses_nothing():
    """Over T steps the sum of what was sent plus the final memory is the sum of the
    gradients: e_T = Σ g_t − Σ c_t, exactly."""
    gen = torch.Generator().manual_seed(3)
    ef = C.ErrorFeedback(200, lambda v: C.topk(v, 5))
    sent, total = torch.zeros(200, dtype=torch.float64), torch.zeros(200, dtype=torch.float64)
    ef.error = ef.error.double()
    for _ in range(30):
        g = torch.randn(200, generator=gen, dtype=torch.float64)
        total += g
        sent += C.densify(*ef(g), 200)
    assert torch.allclose(sent + ef.error, total, atol=1e-12)


def test_powersgd_never_beats_the_svd_and_converges_to_it():
    gen = torch.Generator().manual_seed(4)
    U, _ = torch.linalg.qr(torch.randn(60, 60, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(30, 30, generator=gen, dtype=torch.float64))
    sigma = 0.5 ** torch.arange(30, dtype=torch.float64)
    G = U[:, :30] @ torch.diag(sigma) @ V.T
    for r in (1, 3):
        best = cz.eckart_young_error(sigma.numpy(), r)
        assert best == pytest.approx(float(torch.sqrt((sigma[r:] ** 2).sum())))
        Q = torch.randn(30, r, generator=gen, dtype=torch.float64)
        for _ in range(30):
            P, Q = C.powersgd_step(G, Q)
            err = float((G - P @ Q.T).norm())
            assert err >= best * (1 - 1e-9)
        assert err == pytest.approx(best, rel=1e-6)


def test_lowrank_size_and_rank_are_inverse():
    assert cz.lowrank_fraction(4096, 4096, 4) == pytest.approx(8 * 4096 / 4096**2)
    r = cz.lowrank_rank(300, 500, 10)
    assert cz.lowrank_fraction(300, 500, r) == pytest.approx(0.1)


def test_sparse_sizes_count_values_and_indices():
    assert cz.sparse_factor(1000, 10, 2, 4, 2) == pytest.approx(100 / 3)
    assert cz.sparse_allgather_bytes(10, 4, 2, 4) == 240


def test_breakeven_beta_is_where_the_saving_changes_sign():
    P, c, R, n, alpha = 16, 20.0, 5e9, 1e9, 1e-5
    b = cz.breakeven_beta(P, c, R)
    assert cz.compression_saving(n, P, alpha, b, c, R) == pytest.approx(0, abs=1e-12)
    assert cz.compression_saving(n, P, alpha, b / 2, c, R) > 0 > cz.compression_saving(n, P, alpha, 2 * b, c, R)


def test_sparse_allreduce_on_gloo_equals_the_sum_of_the_sparse_vectors():
    from dtbook.dist import launch

    def worker(rank, world_size):
        import torch
        from dtbook.parallel import compression as C
        from dtbook.parallel.counting import CommCounter
        g = torch.randn(100, generator=torch.Generator().manual_seed(rank))
        idx, val = C.topk(g, 7)
        with CommCounter(functional=False) as c:
            out = C.sparse_allreduce(idx, val.half(), 100)
        return g, out, c.counts(), c.bytes()

    results = launch(worker, 3)
    want = sum(C.densify(*(lambda i, v: (i, v.half().float()))(*C.topk(g, 7)), 100) for g, *_ in results)
    for _, out, counts, nbytes in results:
        assert torch.allclose(out, want, atol=1e-6)
        assert counts == {"all_gather_into_tensor": 1}
        assert nbytes["all_gather_into_tensor"] == cz.sparse_allgather_bytes(7, 3, 2, 4)
