"""dtbook.search_strategies: grid, random, Bayesian and evolutionary search (chapter 27)."""

import numpy as np
import pytest

from dtbook import search_strategies as ss

GPUS_LOG2 = 8


def _space():
    # (TP, PP, DP) with TP·PP·DP = 256 GPUs, TP ≤ 8, and a micro-batch: a planner-like space
    cands = [dict(tp=2 ** a, pp=2 ** b, dp=2 ** (GPUS_LOG2 - a - b), micro_batch=2 ** m)
             for a in range(4) for b in range(GPUS_LOG2 - a + 1) for m in range(4)]
    X = ss.encode(cands, ["tp", "pp", "dp", "micro_batch"])
    # a smooth bowl with its minimum at TP 4, PP 8, micro-batch 2, and a wall of failures
    values = 1 + (X[:, 0] - 2) ** 2 + 0.5 * (X[:, 1] - 3) ** 2 + 0.3 * (X[:, 3] - 1) ** 2
    values[(X[:, 0] == 0) & (X[:, 1] == 0)] = np.inf          # "does not fit in memory"
    return cands, X, values


def test_encode_takes_log2_of_numbers_and_ranks_text():
    X = ss.encode([dict(tp=8, r="none", z=0), dict(tp=1, r="full", z=3),
                   dict(tp=2, r="selective", z=1)], ["tp", "r", "z"])
    assert X.tolist() == [[3, 1, 0], [0, 0, 3], [1, 2, 1]]


def test_every_strategy_evaluates_each_candidate_once_and_reports_what_it_saw():
    cands, X, values = _space()
    for name, fn in ss.STRATEGIES.items():
        calls = []
        trace = fn(X, lambda i: calls.append(i) or values[i], budget=40, seed=1)
        assert len(calls) == len(set(calls)) == len(trace.order) == 40, name
        assert trace.values.tolist() == values[trace.order].tolist()
        b = trace.best_so_far
        assert np.all(b[1:] <= b[:-1])


def test_exhaustive_strategies_find_the_true_best():
    cands, X, values = _space()
    best = values.min()
    grid = ss.grid_search(X, values.__getitem__)
    rand = ss.random_search(X, values.__getitem__, seed=3)
    assert grid.best_so_far[-1] == rand.best_so_far[-1] == best
    assert grid.evaluations_to(best) == int(np.argmin(values)) + 1      # enumeration order
    assert rand.evaluations_to(best) == int(np.nonzero(rand.order == np.argmin(values))[0][0]) + 1


def test_target_stops_a_search_at_the_best():
    cands, X, values = _space()
    trace = ss.random_search(X, values.__getitem__, seed=0, target=values.min())
    assert trace.values[-1] == values.min() and trace.evaluations_to(values.min()) == len(trace.order)


def test_model_based_searches_beat_random_on_a_smooth_objective():
    # over several seeds: the surrogate and the genetic algorithm exploit smoothness
    cands, X, values = _space()
    best = values.min()
    def median_evals(fn, **kw):
        return np.median([fn(X, values.__getitem__, seed=s, target=best, **kw).evaluations_to(best)
                          for s in range(5)])
    rand = median_evals(ss.random_search)
    bayes = median_evals(ss.bayesian_search)
    evo = median_evals(ss.evolutionary_search, product=(0, 1, 2), total=GPUS_LOG2, free=2)
    assert bayes < rand / 2 and evo < rand, (rand, bayes, evo)


def test_gpu_count_repair_keeps_children_on_the_gpu_budget():
    # with the repair and no snapping needed, every child is a valid triple
    cands, X, values = _space()
    trace = ss.evolutionary_search(X, values.__getitem__, budget=30, seed=2,
                                   product=(0, 1, 2), total=GPUS_LOG2, free=2)
    for i in trace.order:
        c = cands[i]
        assert c["tp"] * c["pp"] * c["dp"] == 2 ** GPUS_LOG2


def test_budget_must_be_a_whole_number():
    cands, X, values = _space()
    with pytest.raises(ValueError, match="budget"):
        ss.random_search(X, values.__getitem__, budget=0)
