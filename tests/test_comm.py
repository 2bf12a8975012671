"""Tests of dtbook.comm: the α-β model (chapter 04) and the ring collective costs."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, strategies as st

from dtbook import comm
from dtbook.symbolic import alpha as a_, assert_same, beta as b_, nbytes as n_, world as P_
from dtbook.units import GB, KB, MB, ms, us

sizes = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)
alphas = st.floats(min_value=1e-9, max_value=1e-2, allow_nan=False, allow_infinity=False)
betas = st.floats(min_value=1e6, max_value=1e13, allow_nan=False, allow_infinity=False)
ranks = st.integers(min_value=1, max_value=100_000)

COLLECTIVES = [comm.allreduce_time, comm.reduce_scatter_time, comm.allgather_time]


# ---------------------------------------------------------------- point to point, numbers

def test_p2p_time_and_crossover():
    assert comm.p2p_time(0, 2 * us, 50 * GB) == pytest.approx(2 * us)
    assert comm.p2p_time(1 * GB, 2 * us, 50 * GB) == pytest.approx(2 * us + 20 * ms)
    assert comm.crossover_bytes(2 * us, 50 * GB) == pytest.approx(100 * KB)
    assert comm.pingpong_time(1 * MB, 2 * us, 50 * GB) == pytest.approx(2 * (2 * us + 20 * us))


def test_messages_and_bucket():
    k, m, a, b = 1000, 1 * MB, 2 * us, 50 * GB
    many = comm.messages_time(k, m, a, b)
    one = comm.p2p_time(k * m, a, b)
    assert many - one == pytest.approx(comm.bucket_saving(k, a))
    assert comm.bucket_saving(1, a) == 0


def test_chunked_time_special_cases():
    n, a, b = 64 * MB, 5 * us, 10 * GB
    # one chunk over one hop is one message
    assert comm.chunked_time(n, 1, a, b) == pytest.approx(comm.p2p_time(n, a, b))
    # k chunks in sequence on one link cost (k - 1) alpha more
    assert comm.chunked_time(n, 8, a, b) - comm.p2p_time(n, a, b) == pytest.approx(7 * a)
    # one chunk over h hops is store-and-forward: h full messages
    assert comm.chunked_time(n, 1, a, b, hops=4) == pytest.approx(4 * comm.p2p_time(n, a, b))


def test_optimal_chunks_is_the_minimum():
    n, a, b, h = 64 * MB, 5 * us, 10 * GB, 8
    k_star = comm.optimal_chunks(n, a, b, h)
    assert k_star == pytest.approx(np.sqrt((h - 1) * n / (a * b)))
    best = comm.best_chunk_count(n, a, b, h)
    assert abs(best - k_star) < 1
    t_best = comm.chunked_time(n, best, a, b, h)
    for k in range(1, 400):
        assert t_best <= comm.chunked_time(n, k, a, b, h) * (1 + 1e-12)
    # on a single link the best is not to cut at all
    assert comm.optimal_chunks(n, a, b, 1) == 0
    assert comm.best_chunk_count(n, a, b, 1) == 1


def test_arrays_work():
    n = np.array([0.0, 1e3, 1e6, 1e9])
    t = comm.p2p_time(n, 1e-6, 1e9)
    assert np.allclose(t, 1e-6 + n / 1e9)
    p = np.array([2, 4, 8])
    assert np.allclose(comm.allreduce_time(1e9, p, 1e-6, 1e9),
                       2 * (p - 1) * 1e-6 + 2 * (p - 1) / p * 1.0)


# ---------------------------------------------------------------- symbolic path

def test_symbolic_point_to_point():
    k, h = sp.symbols("k h", positive=True)
    assert_same(comm.p2p_time(n_, a_, b_), a_ + n_ / b_)
    assert_same(comm.crossover_bytes(a_, b_), a_ * b_)
    assert_same(comm.pingpong_time(n_, a_, b_), 2 * a_ + 2 * n_ / b_)
    assert_same(comm.messages_time(k, n_, a_, b_), k * a_ + k * n_ / b_)
    assert_same(comm.chunked_time(n_, k, a_, b_, h), (k + h - 1) * (a_ + n_ / (k * b_)))
    assert_same(comm.optimal_chunks(n_, a_, b_, h), sp.sqrt((h - 1) * n_ / (a_ * b_)))


def test_symbolic_optimal_chunks_solves_the_derivative():
    k, h = sp.symbols("k h", positive=True)
    T = comm.chunked_time(n_, k, a_, b_, h)
    k_star = comm.optimal_chunks(n_, a_, b_, h)
    assert sp.simplify(sp.diff(T, k).subs(k, k_star)) == 0
    # convex in k for h > 1: the stationary point is the minimum
    assert_same(sp.diff(T, k, 2), 2 * (h - 1) * n_ / (k**3 * b_))


def test_symbolic_collectives():
    assert_same(comm.allreduce_time(n_, P_, a_, b_),
                2 * (P_ - 1) * a_ + 2 * (P_ - 1) / P_ * n_ / b_)
    assert_same(comm.reduce_scatter_time(n_, P_, a_, b_), (P_ - 1) * a_ + (P_ - 1) / P_ * n_ / b_)
    assert_same(comm.allgather_time(n_, P_, a_, b_), (P_ - 1) * a_ + (P_ - 1) / P_ * n_ / b_)
    assert_same(comm.allreduce_time(n_, P_, a_, b_),
                comm.reduce_scatter_time(n_, P_, a_, b_) + comm.allgather_time(n_, P_, a_, b_))
    # large-P limit: the ratio to 2P alpha + 2n/beta tends to 1
    ratio = comm.allreduce_time(n_, P_, a_, b_) / (2 * P_ * a_ + 2 * n_ / b_)
    assert sp.limit(ratio, P_, sp.oo) == 1
    # the bandwidth term on its own tends to 2n/beta: independent of P
    assert sp.limit(comm.allreduce_time(n_, P_, 0, b_), P_, sp.oo) == 2 * n_ / b_


def test_symbolic_crossover_equalises_terms():
    latency, bandwidth = a_, comm.crossover_bytes(a_, b_) / b_
    assert sp.simplify(latency - bandwidth) == 0


# ---------------------------------------------------------------- worked numbers (chapter 04)

def test_book_worked_examples():
    t = comm.allreduce_time(10 * GB, 256, 2 * us, 50 * GB)
    assert 2 * 255 * 2 * us == pytest.approx(1.02 * ms)
    assert t == pytest.approx(399.4 * ms, rel=1e-3)
    many = 1000 * comm.allreduce_time(1 * MB, 64, 2 * us, 50 * GB)
    one = comm.allreduce_time(1 * GB, 64, 2 * us, 50 * GB)
    assert many == pytest.approx(291.375 * ms)
    assert one == pytest.approx(39.627 * ms, rel=1e-4)
    assert comm.crossover_bytes(1 * us, 900 * GB) == pytest.approx(900 * KB)


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("call, name", [
    (lambda: comm.p2p_time(-1, 1e-6, 1e9), "nbytes"),
    (lambda: comm.p2p_time(1, -1e-6, 1e9), "alpha"),
    (lambda: comm.p2p_time(1, 1e-6, 0), "beta"),
    (lambda: comm.p2p_time(1, 1e-6, float("nan")), "beta"),
    (lambda: comm.p2p_time("1 MB", 1e-6, 1e9), "nbytes"),
    (lambda: comm.crossover_bytes(1e-6, -1), "beta"),
    (lambda: comm.messages_time(0, 1, 1e-6, 1e9), "count"),
    (lambda: comm.messages_time(2.5, 1, 1e-6, 1e9), "count"),
    (lambda: comm.messages_time(2, -1, 1e-6, 1e9), "nbytes_each"),
    (lambda: comm.bucket_saving(0, 1e-6), "count"),
    (lambda: comm.chunked_time(1, 0, 1e-6, 1e9), "chunks"),
    (lambda: comm.chunked_time(1, 2, 1e-6, 1e9, hops=0), "hops"),
    (lambda: comm.optimal_chunks(1, 0, 1e9, 2), "alpha"),
    (lambda: comm.allreduce_time(-1, 4, 1e-6, 1e9), "n"),
    (lambda: comm.allreduce_time(1, 0, 1e-6, 1e9), "p"),
    (lambda: comm.allreduce_time(1, 2.5, 1e-6, 1e9), "p"),
    (lambda: comm.reduce_scatter_time(1, 4, 1e-6, 0), "beta"),
    (lambda: comm.allgather_time(1, 4, -1, 1e9), "alpha"),
    (lambda: comm.allreduce_time(1, 4, 1e-6, 1e9, algorithm="bogus"), "ring"),
    (lambda: comm.fit_alpha_beta([1, 2, 3], [1, 2]), "same length"),
    (lambda: comm.fit_alpha_beta([1, 2, 3], [1, -2, 3]), "times"),
    (lambda: comm.fit_alpha_beta([-1, 2, 3], [1, 2, 3]), "sizes"),
    (lambda: comm.fit_alpha_beta([5, 5, 5], [1, 2, 3]), "two different sizes"),
    (lambda: comm.fit_alpha_beta([1, 2], [1, 2]), "at least 3"),
    (lambda: comm.fit_alpha_beta([1, 2, 3], [1, 2, 3], model="cubic"), "alpha_beta"),
    (lambda: comm.algorithms("broadcast_tree"), "allreduce"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_unknown_algorithm_lists_the_supported_ones():
    with pytest.raises(ValueError) as err:
        comm.allreduce_time(1 * GB, 8, 1 * us, 50 * GB, algorithm="gossip")
    assert "'gossip'" in str(err.value) and "supported: 'ring', 'tree'" in str(err.value)
    assert comm.algorithms("allreduce")[:5] == ("ring", "tree", "recursive_doubling",
                                                "rabenseifner", "hierarchical")
    assert "tree" not in comm.algorithms("allgather")
    with pytest.raises(ValueError, match="not available for allgather"):
        comm.allgather_time(1 * GB, 8, 1 * us, 50 * GB, algorithm="tree")


def test_best_chunk_count_refuses_symbols():
    with pytest.raises(ValueError, match="numbers"):
        comm.best_chunk_count(n_, 1e-6, 1e9, 4)


# ---------------------------------------------------------------- properties

@given(sizes, sizes, alphas, betas)
def test_p2p_monotone_in_n(n1, n2, a, b):
    lo, hi = sorted((n1, n2))
    assert comm.p2p_time(lo, a, b) <= comm.p2p_time(hi, a, b)


@given(alphas, betas)
def test_crossover_equalises_the_two_terms(a, b):
    n_star = comm.crossover_bytes(a, b)
    assert n_star / b == pytest.approx(a, rel=1e-12)
    assert comm.p2p_time(n_star, a, b) == pytest.approx(2 * a, rel=1e-12)


@given(st.sampled_from(COLLECTIVES), sizes, sizes, ranks, alphas, betas)
def test_collectives_monotone_in_n(fn, n1, n2, p, a, b):
    lo, hi = sorted((n1, n2))
    assert fn(lo, p, a, b) <= fn(hi, p, a, b)


@given(st.sampled_from(COLLECTIVES), sizes, ranks, ranks, alphas, betas)
def test_collectives_monotone_in_p(fn, n, p1, p2, a, b):
    lo, hi = sorted((p1, p2))
    assert fn(n, lo, a, b) <= fn(n, hi, a, b) * (1 + 1e-12)


@given(sizes, alphas, betas)
def test_one_rank_costs_nothing(n, a, b):
    for fn in COLLECTIVES:
        assert fn(n, 1, a, b) == 0


@given(sizes, ranks, alphas, betas)
def test_allreduce_is_reduce_scatter_plus_allgather(n, p, a, b):
    ar = comm.allreduce_time(n, p, a, b)
    assert ar == pytest.approx(comm.reduce_scatter_time(n, p, a, b) + comm.allgather_time(n, p, a, b),
                               rel=1e-12)


@given(sizes, alphas, betas)
def test_allreduce_large_p_limit(n, a, b):
    p = 10**7
    limit = 2 * p * a + 2 * n / b
    assert comm.allreduce_time(n, p, a, b) == pytest.approx(limit, rel=1e-6)
    # and it never exceeds the limit
    for q in (2, 8, 1000):
        assert comm.allreduce_time(n, q, a, b) <= 2 * q * a + 2 * n / b


@given(st.integers(1, 2000), st.floats(1.0, 1e9), alphas, betas)
def test_bucket_never_slower(k, m, a, b):
    assert comm.p2p_time(k * m, a, b) <= comm.messages_time(k, m, a, b) * (1 + 1e-12)


@given(st.floats(1e3, 1e10), alphas, betas, st.integers(2, 64))
def test_best_chunk_count_beats_neighbours(n, a, b, h):
    best = comm.best_chunk_count(n, a, b, h)
    t = comm.chunked_time(n, best, a, b, h)
    for k in (best - 1, best + 1, 1, 2 * best):
        if k >= 1:
            assert t <= comm.chunked_time(n, k, a, b, h) * (1 + 1e-9)


# ---------------------------------------------------------------- fitting

def _synthetic(alpha, beta, noise, seed, round_trip=False):
    rng = np.random.default_rng(seed)
    n = 4.0 ** np.arange(0, 14)  # 1 B .. 64 MiB
    t = (alpha + n / beta) * (2 if round_trip else 1)
    return n, t * np.exp(rng.normal(0.0, noise, n.size))


def test_fit_recovers_exact_parameters():
    n, t = _synthetic(50 * us, 2 * GB, 0.0, 0)
    fit = comm.fit_alpha_beta(n, t)
    assert fit.alpha == pytest.approx(50 * us, rel=1e-9)
    assert fit.beta == pytest.approx(2 * GB, rel=1e-9)
    assert fit.r2_log == pytest.approx(1.0)
    assert fit.max_abs_rel_residual < 1e-9
    alpha, beta = fit  # unpacks as a pair
    assert fit.crossover == pytest.approx(alpha * beta)
    assert np.allclose(fit.predict(n), t)


@pytest.mark.parametrize("seed", range(5))
def test_fit_recovers_parameters_from_noisy_round_trips(seed):
    n, t = _synthetic(80 * us, 1.5 * GB, 0.10, seed, round_trip=True)
    fit = comm.fit_alpha_beta(n, t, round_trip=True)
    assert fit.alpha == pytest.approx(80 * us, rel=0.15)
    assert fit.beta == pytest.approx(1.5 * GB, rel=0.15)
    assert fit.r2_log > 0.95
    assert np.allclose(fit.predict(n), 2 * (fit.alpha + n / fit.beta))


@pytest.mark.parametrize("seed", range(3))
def test_one_term_models_fit_much_worse(seed):
    n, t = _synthetic(80 * us, 1.5 * GB, 0.10, seed)
    good = comm.fit_alpha_beta(n, t)
    latency = comm.fit_alpha_beta(n, t, model="latency_only")
    bandwidth = comm.fit_alpha_beta(n, t, model="bandwidth_only")
    assert latency.beta == np.inf and bandwidth.alpha == 0
    assert good.r2_log > 0.95
    assert latency.r2_log < 0.5 and bandwidth.r2_log < 0.5


def test_relative_fit_is_not_decided_by_the_big_sizes():
    # An unweighted fit would put all its weight on 64 MiB and miss alpha entirely;
    # the relative fit gets the latency of the small messages right.
    n, t = _synthetic(80 * us, 1.5 * GB, 0.0, 0)
    t = t.copy()
    t[-1] *= 1.3  # one slow big transfer
    fit = comm.fit_alpha_beta(n, t)
    assert fit.alpha == pytest.approx(80 * us, rel=0.05)


def test_fit_clamps_to_nonnegative():
    # Times that fall with size would need a negative 1/beta: the fit keeps beta infinite.
    n = np.array([1.0, 10.0, 100.0, 1000.0])
    t = np.array([4e-5, 3e-5, 2e-5, 1e-5])
    fit = comm.fit_alpha_beta(n, t)
    assert fit.alpha > 0 and fit.beta == np.inf


# ================================================================ chapter 12: the algorithms

ALLREDUCE_FLAT = [a for a in comm.algorithms("allreduce") if a != "hierarchical"]
log2 = sp.log(P_, 2)


def test_symbolic_allreduce_algorithms():
    """The closed forms chapter 12 derives, for P a power of two, on direct wires and
    through switch ports (they differ only where a rank talks to two peers in a step)."""
    ring = 2 * (P_ - 1) * a_ + 2 * (P_ - 1) / P_ * n_ / b_
    direct = {
        "ring": ring,
        "tree": 2 * log2 * (a_ + n_ / b_),
        "recursive_doubling": log2 * (a_ + n_ / b_),
        "rabenseifner": 2 * log2 * a_ + 2 * (P_ - 1) / P_ * n_ / b_,
        "bidirectional_ring": 2 * (P_ - 1) * a_ + (P_ - 1) / P_ * n_ / b_,
        "two_sided_ring": P_ * a_ + n_ / b_,
        "binary_tree": 2 * log2 * (a_ + n_ / b_),
        "double_binary_tree": 2 * log2 * (a_ + n_ / (2 * b_)),
    }
    switched = dict(direct, **{
        "bidirectional_ring": ring,
        "two_sided_ring": P_ * a_ + 2 * (P_ - 1) / P_ * n_ / b_,
        "binary_tree": 2 * log2 * a_ + 2 * (2 * log2 - 1) * n_ / b_,
        "double_binary_tree": 2 * log2 * a_ + (2 * log2 - 1) * n_ / b_,
    })
    assert set(direct) == set(ALLREDUCE_FLAT)
    for links, want in (("direct", direct), ("switched", switched)):
        for alg, expr in want.items():
            assert_same(comm.allreduce_time(n_, P_, a_, b_, alg, links=links), expr,
                        f"{alg}, {links}")
    assert_same(comm.allreduce_time(n_, P_, a_, b_, "binary_tree"), switched["binary_tree"])


def test_call_overhead_is_paid_once_per_call():
    a_call = sp.Symbol("alpha_call", positive=True)
    for f in (comm.allreduce_time, comm.allgather_time, comm.reduce_scatter_time,
              comm.broadcast_time, comm.alltoall_time):
        assert_same(f(n_, P_, a_, b_, alpha_call=a_call) - f(n_, P_, a_, b_), a_call, f.__name__)
    with pytest.raises(ValueError, match="alpha_call"):
        comm.allreduce_time(1.0, 4, 1e-6, 1e9, alpha_call=-1)
    with pytest.raises(ValueError, match="links"):
        comm.allreduce_time(1.0, 4, 1e-6, 1e9, links="torus")


def test_symbolic_other_collectives():
    assert_same(comm.reduce_scatter_time(n_, P_, a_, b_, "recursive_halving"),
                log2 * a_ + (P_ - 1) / P_ * n_ / b_)
    assert_same(comm.allgather_time(n_, P_, a_, b_, "recursive_doubling"),
                log2 * a_ + (P_ - 1) / P_ * n_ / b_)
    assert_same(comm.broadcast_time(n_, P_, a_, b_), log2 * (a_ + n_ / b_))
    k = sp.Symbol("k", positive=True)
    assert_same(comm.broadcast_time(n_, P_, a_, b_, "ring", chunks=k),
                comm.chunked_time(n_, k, a_, b_, hops=P_ - 1))
    assert_same(comm.alltoall_time(n_, P_, a_, b_), (P_ - 1) * a_ + (P_ - 1) / P_ * n_ / b_)
    # Rabenseifner is its own reduce-scatter followed by its own all-gather
    assert_same(comm.allreduce_time(n_, P_, a_, b_, "rabenseifner"),
                comm.reduce_scatter_time(n_, P_, a_, b_, "recursive_halving")
                + comm.allgather_time(n_, P_, a_, b_, "recursive_doubling"))


def test_symbolic_hierarchical():
    G, N = sp.symbols("G N", positive=True)
    ai, bi, ao, bo = sp.symbols("alpha_i beta_i alpha_o beta_o", positive=True)
    got = comm.allreduce_time(n_, G * N, a_, b_, "hierarchical", inner=G, alpha_inner=ai,
                              beta_inner=bi, alpha_outer=ao, beta_outer=bo)
    want = (2 * (G - 1) * ai + 2 * (G - 1) / G * n_ / bi
            + 2 * (N - 1) * ao + 2 * (N - 1) / N * (n_ / G) / bo)
    assert_same(got, want, "hierarchical all-reduce")
    # the positional link stands in for any level left out
    assert_same(comm.allreduce_time(n_, G * N, ao, bo, "hierarchical", inner=G,
                                    alpha_inner=ai, beta_inner=bi), want)
    # equal links: the same bandwidth term as a flat ring, a latency term 2(G + N − 2)α
    flat = comm.allreduce_time(n_, G * N, a_, b_)
    hier = comm.allreduce_time(n_, G * N, a_, b_, "hierarchical", inner=G)
    assert_same(hier.subs(a_, 0), flat.subs(a_, 0), "bandwidth terms")
    assert_same(hier.subs(n_, 0), 2 * (G + N - 2) * a_, "latency term")
    # reduce-scatter + all-gather = all-reduce, level by level
    rs = comm.reduce_scatter_time(n_, G * N, a_, b_, "hierarchical", inner=G)
    ag = comm.allgather_time(n_, G * N, a_, b_, "hierarchical", inner=G)
    assert_same(rs + ag, hier)


def test_traffic_fields():
    t = comm.traffic("allreduce", 8 * MB, 4)
    assert (t.steps, t.step_bytes, t.sent_bytes, t.messages) == (6, 12 * MB, 12 * MB, 6)
    steps, step_bytes = t
    assert t.time(1 * us, 1 * GB) == pytest.approx(6 * us + 12 * MB / GB)
    tree = comm.traffic("allreduce", 8 * MB, 4, "tree")
    assert tree.sent_bytes == t.sent_bytes            # same volume, different schedule
    assert tree.messages == pytest.approx(1.5)        # 2(P − 1)/P: the root sends log₂P
    h = comm.traffic("allreduce", 8 * MB, 8, "hierarchical", inner=4)
    assert [lvl for lvl, _ in h.phases] == ["inner", "outer", "inner"]
    assert h.steps == 3 + 2 + 3
    assert h.phases[1][1].step_bytes == pytest.approx(2 * (1 / 2) * 2 * MB)


def test_fold_in_for_non_powers_of_two():
    n, a, b = 1 * MB, 1 * us, 1 * GB
    for p, (steps, per_byte) in {5: (4, 4), 6: (4, 4), 7: (4, 4), 8: (3, 3), 3: (3, 3)}.items():
        t = comm.traffic("allreduce", n, p, "recursive_doubling")
        assert (t.steps, t.step_bytes / n) == (steps, per_byte), p
    # Rabenseifner on 6 ranks: fold to 4, 2·2 steps, plus one in and one out
    t = comm.traffic("allreduce", n, 6, "rabenseifner")
    assert t.steps == 6 and t.step_bytes == pytest.approx((2 * 3 / 4 + 2) * n)
    assert t.sent_bytes == pytest.approx(2 * 5 / 6 * n)   # the volume of a ring, still
    # a power of two needs no folding
    assert comm.traffic("allreduce", n, 8, "rabenseifner").steps == 6
    assert comm.allreduce_time(n, 6, a, b, "rabenseifner") > comm.allreduce_time(n, 8, a, b, "rabenseifner")


def test_bidirectional_ring_with_two_ranks_gains_nothing():
    # With two ranks one ring already uses both directions of the one link; through a
    # switch port a unidirectional ring already uses both directions whatever P is.
    for links in ("direct", "switched"):
        assert comm.allreduce_time(1 * GB, 2, 1 * us, 1 * GB, "bidirectional_ring",
                                   links=links) == \
            pytest.approx(comm.allreduce_time(1 * GB, 2, 1 * us, 1 * GB))
    assert comm.allreduce_time(1 * GB, 3, 0, 1 * GB, "bidirectional_ring", links="direct") == \
        pytest.approx(comm.allreduce_time(1 * GB, 3, 0, 1 * GB) / 2)
    assert comm.allreduce_time(1 * GB, 3, 0, 1 * GB, "bidirectional_ring") == \
        pytest.approx(comm.allreduce_time(1 * GB, 3, 0, 1 * GB))


def test_two_sided_ring_reaches_the_originals_figure_on_direct_links():
    # Exercise 12.6's setting: 16 MB, 64 ranks, 5 µs, 50 GB/s. Each block reduced from both
    # sides takes 64 steps of n/64 bytes: 64 · (5 µs + 5 µs) = 0.64 ms.
    t = comm.allreduce_time(16 * MB, 64, 5 * us, 50 * GB, "two_sided_ring", links="direct")
    assert t == pytest.approx(64 * (5 * us + 16 * MB / 64 / (50 * GB)))
    odd = comm.traffic("allreduce", 7.0, 7, "two_sided_ring")
    assert odd.steps == 6 and odd.step_bytes == pytest.approx(6.0)  # P − 1 steps of n/P


def test_arrays_of_ranks_for_every_algorithm():
    p = np.array([1, 2, 3, 4, 5, 6, 7, 8, 16, 100])
    for alg in ALLREDUCE_FLAT:
        got = comm.allreduce_time(1 * MB, p, 1 * us, 1 * GB, alg)
        one_by_one = [comm.allreduce_time(1 * MB, int(q), 1 * us, 1 * GB, alg) for q in p]
        assert np.allclose(got, one_by_one), alg
    got = comm.allreduce_time(1 * MB, p * 4, 1 * us, 1 * GB, "hierarchical", inner=4)
    assert got.shape == p.shape


def test_book_numbers_chapters_12_and_13():
    # ring against tree, P = 64, α = 1 µs, β = 100 GB/s: they cross at 1.14 MB
    assert comm.algorithm_crossover(64, 1 * us, 100 * GB) == pytest.approx(1.14 * MB, rel=5e-3)
    assert comm.algorithm_crossover(256, 5 * us, 200 * GB) == pytest.approx(35.3 * MB, rel=3e-3)
    # 8 × 8, NVLink 600 GB/s / 1 µs inside, 100 GB/s / 5 µs between nodes, 1 GB
    flat = comm.allreduce_time(1 * GB, 64, 5 * us, 100 * GB)
    hier = comm.allreduce_time(1 * GB, 64, 5 * us, 100 * GB, "hierarchical", inner=8,
                               alpha_inner=1 * us, beta_inner=600 * GB)
    assert flat == pytest.approx(20.3 * ms, rel=3e-3)
    assert hier == pytest.approx(5.19 * ms, rel=3e-3)
    # chapter 13: P = 16, 100 MB, α = 10 µs, β = 100 GB/s
    assert comm.allreduce_time(100 * MB, 16, 10 * us, 100 * GB) == pytest.approx(2.175 * ms)
    assert comm.allgather_time(100 * MB, 16, 10 * us, 100 * GB) == pytest.approx(1.0875 * ms)
    assert comm.allreduce_time(100 * MB, 16, 10 * us, 100 * GB, "hierarchical", inner=4) == \
        pytest.approx(1.995 * ms)
    # chapter 13: 8 × 8 against 16 nodes × 4 for 4 GB (NVLink 300 GB/s, network 50 GB/s)
    kw = dict(alpha_inner=1 * us, beta_inner=300 * GB)
    assert comm.allreduce_time(4 * GB, 64, 5 * us, 50 * GB, "hierarchical", inner=8, **kw) \
        == pytest.approx(40.91 * ms, rel=1e-3)
    assert comm.allreduce_time(4 * GB, 64, 5 * us, 50 * GB, "hierarchical", inner=4, **kw) \
        == pytest.approx(57.65 * ms, rel=1e-3)


def test_crossover_equalises_the_two_algorithms():
    for p in (4, 8, 64, 1000):
        n_star = comm.algorithm_crossover(p, 2 * us, 50 * GB)
        assert comm.allreduce_time(n_star, p, 2 * us, 50 * GB, "tree") == \
            pytest.approx(comm.allreduce_time(n_star, p, 2 * us, 50 * GB), rel=1e-9)
    # Rabenseifner never loses to a ring on a power of two: fewer steps, same bytes
    assert comm.algorithm_crossover(8, 2 * us, 50 * GB, "ring", "rabenseifner") == np.inf
    # two algorithms on the same line never cross
    assert np.isnan(comm.algorithm_crossover(2, 2 * us, 50 * GB, "ring", "rabenseifner"))
    # symbolic: the exact formula of chapter 12
    want = 2 * a_ * b_ * (P_ - 1 - log2) / (2 * log2 - 2 * (P_ - 1) / P_)
    assert_same(comm.algorithm_crossover(P_, a_, b_), want)


def test_bus_bandwidth_convention():
    # a ring all-reduce running at the link's speed has bus bandwidth = β, whatever P
    for p in (2, 8, 64):
        t = comm.allreduce_time(1 * GB, p, 0, 50 * GB)
        assert comm.bus_bandwidth(1 * GB, t, p) == pytest.approx(50 * GB)
        t = comm.allgather_time(1 * GB, p, 0, 50 * GB)
        assert comm.bus_bandwidth(1 * GB, t, p, "allgather") == pytest.approx(50 * GB)
    # chapter 13: 1 GB on 8 GPUs in 80 ms: algbw 12.5 GB/s, busbw 21.875 GB/s
    assert comm.algorithm_bandwidth(1 * GB, 80 * ms) == pytest.approx(12.5 * GB)
    assert comm.bus_bandwidth(1 * GB, 80 * ms, 8) == pytest.approx(21.875 * GB)
    assert comm.bus_factor("broadcast", 8) == 1
    assert_same(comm.bus_factor("allreduce", P_), 2 * (P_ - 1) / P_)


@pytest.mark.parametrize("call, name", [
    (lambda: comm.allreduce_time(1, 4, 1e-6, 1e9, "hierarchical"), "inner"),
    (lambda: comm.allreduce_time(1, 6, 1e-6, 1e9, "hierarchical", inner=4), "inner must divide"),
    (lambda: comm.allreduce_time(1, 6, 1e-6, 1e9, "hierarchical", inner=0), "inner"),
    (lambda: comm.allreduce_time(1, 8, 1e-6, 1e9, "hierarchical", inner=4, beta_inner=0),
     "beta_inner"),
    (lambda: comm.allreduce_time(1, 8, 1e-6, 1e9, "hierarchical", inner=4, alpha_outer=-1),
     "alpha_outer"),
    (lambda: comm.allreduce_time(1, 8, 1e-6, 1e9, "ring", inner=4), "hierarchical"),
    (lambda: comm.allreduce_time(1, 8, 1e-6, 1e9, "ring", beta_inner=1e9), "beta_inner"),
    (lambda: comm.allreduce_time(1, 8, 1e-6, 1e9, "hierarchical", inner=4,
                                 outer_algorithm="gossip"), "gossip"),
    (lambda: comm.allgather_time(1, 6, 1e-6, 1e9, "recursive_doubling"), "power of two"),
    (lambda: comm.reduce_scatter_time(1, 6, 1e-6, 1e9, "recursive_halving"), "power of two"),
    (lambda: comm.broadcast_time(1, 4, 1e-6, 1e9, "ring", chunks=0), "chunks"),
    (lambda: comm.traffic("allreduce", 1, 4, chunks=3), "chunks"),
    (lambda: comm.traffic("gossip", 1, 4), "collective"),
    (lambda: comm.alltoall_time(1, 4, 1e-6, 1e9, "ring"), "pairwise"),
    (lambda: comm.broadcast_time(-1, 4, 1e-6, 1e9), "n"),
    (lambda: comm.bus_factor("scan", 4), "collective"),
    (lambda: comm.bus_bandwidth(1, 0, 4), "seconds"),
    (lambda: comm.algorithm_crossover(0, 1e-6, 1e9), "p"),
])
def test_bad_input_for_algorithms(call, name):
    with pytest.raises(ValueError, match=name):
        call()


ALL_PAIRS = ([("allreduce", a) for a in ALLREDUCE_FLAT]
             + [("reduce_scatter", "ring"), ("allgather", "ring"), ("broadcast", "tree"),
                ("broadcast", "ring"), ("alltoall", "pairwise")])
TIME = {"allreduce": comm.allreduce_time, "reduce_scatter": comm.reduce_scatter_time,
        "allgather": comm.allgather_time, "broadcast": comm.broadcast_time,
        "alltoall": comm.alltoall_time}


@given(st.sampled_from(ALL_PAIRS), sizes, sizes, ranks, alphas, betas)
def test_every_algorithm_monotone_in_n(pair, n1, n2, p, a, b):
    coll, alg = pair
    lo, hi = sorted((n1, n2))
    assert TIME[coll](lo, p, a, b, alg) <= TIME[coll](hi, p, a, b, alg)


@given(st.sampled_from(ALL_PAIRS), sizes, alphas, betas)
def test_one_rank_costs_nothing_for_every_algorithm(pair, n, a, b):
    coll, alg = pair
    assert TIME[coll](n, 1, a, b, alg) == 0


@given(st.integers(2, 10**6), st.floats(1.0, 1e12), betas)
def test_ring_bandwidth_term_barely_depends_on_p(p, n, b):
    # 2(P − 1)/P · n/β lies in [n/β, 2n/β) and approaches 2n/β as P grows
    t = comm.allreduce_time(n, p, 0, b)
    assert n / b <= t * (1 + 1e-12) and t < 2 * n / b
    assert t == pytest.approx(2 * n / b, rel=1.0 / p + 1e-12)


@given(st.integers(2, 10**6), alphas, betas)
def test_tree_latency_grows_like_log_p(p, a, b):
    L = (p - 1).bit_length()                       # ⌈log₂P⌉
    assert comm.allreduce_time(0, p, a, b, "tree") == pytest.approx(2 * L * a)
    assert comm.broadcast_time(0, p, a, b) == pytest.approx(L * a)
    assert L - 1 < np.log2(p) <= L
    # and the ring's grows like P
    assert comm.allreduce_time(0, p, a, b) == pytest.approx(2 * (p - 1) * a)


@given(st.integers(1, 20), sizes, alphas, betas)
def test_power_of_two_algorithms(k, n, a, b):
    p = 2**k
    ring = comm.allreduce_time(n, p, a, b)
    rab = comm.allreduce_time(n, p, a, b, "rabenseifner")
    assert rab <= ring * (1 + 1e-12)                 # same bytes, fewer steps
    assert comm.allreduce_time(n, p, a, b, "recursive_doubling") == pytest.approx(k * (a + n / b))


@given(st.integers(1, 64), st.integers(1, 64), sizes, alphas, betas)
def test_hierarchical_with_equal_links(g, nodes, n, a, b):
    p = g * nodes
    flat = comm.allreduce_time(n, p, a, b)
    hier = comm.allreduce_time(n, p, a, b, "hierarchical", inner=g)
    # same bandwidth term as the flat ring, latency 2(G + N − 2)α <= 2(P − 1)α
    assert comm.allreduce_time(n, p, 0, b, "hierarchical", inner=g) == \
        pytest.approx(comm.allreduce_time(n, p, 0, b), rel=1e-9, abs=1e-300)
    assert hier <= flat * (1 + 1e-12)
    if g in (1, p):  # one level only: exactly the flat ring
        assert hier == pytest.approx(flat, rel=1e-12)


@given(st.integers(2, 4096), alphas, betas)
def test_tree_wins_small_ring_wins_large(p, a, b):
    n_star = comm.algorithm_crossover(p, a, b)
    if not np.isfinite(n_star):
        return                                     # P = 2: the tree never wins
    assert comm.allreduce_time(n_star / 2, p, a, b, "tree") <= comm.allreduce_time(n_star / 2, p, a, b)
    assert comm.allreduce_time(n_star * 2, p, a, b, "tree") >= comm.allreduce_time(n_star * 2, p, a, b)
