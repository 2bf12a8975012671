"""Chapter 26's formulas against independent computations: brute-force minimisation, the
chapter 05 simulator, and worked numbers from the original edition."""

import numpy as np
import pytest
import sympy as sp

from dtbook import cost, resilience
from dtbook.units import GB, hour


def test_system_rate_adds_parts_and_matches_cost_module():
    lam = resilience.system_failure_rate([20_000 * hour, 10_000 * hour], [10_000, 1_250])
    assert np.isclose(lam * hour, 0.625)
    assert np.isclose(resilience.system_mtbf([20_000 * hour, 10_000 * hour], [10_000, 1_250]), 1.6 * hour)
    # one kind of part is chapter 05's job_failure_rate
    assert np.isclose(resilience.system_failure_rate(50_000 * hour, 1000), cost.job_failure_rate(1000, 50_000 * hour))
    with pytest.raises(ValueError, match="count"):
        resilience.system_failure_rate([1.0, 2.0], [1, 2, 3])


def test_young_interval_minimises_overhead_by_brute_force():
    for delta, mtbf in [(60, 1.6 * hour), (30, 2 * hour), (1.5625, 2 * hour)]:
        grid = np.geomspace(1, 1e6, 200_001)
        best = grid[np.argmin(resilience.overhead_factor(grid, delta, 1 / mtbf))]
        assert np.isclose(best, resilience.young_interval(delta, mtbf), rtol=1e-3)
        assert np.isclose(resilience.overhead_factor(best, delta, 1 / mtbf) - 1,
                          resilience.overhead_at_optimum(delta, mtbf), rtol=1e-6)


def test_daly_interval_sits_near_the_exact_renewal_optimum():
    delta, mtbf = 600.0, 1 * hour          # δ not small: first order is visibly off
    grid = np.geomspace(100, 20_000, 20_001)
    exact = grid[np.argmin(cost.failure_multiplier_exact(1 / mtbf, grid, delta / grid))]
    daly, young = float(resilience.daly_interval(delta, mtbf)), resilience.young_interval(delta, mtbf)
    assert abs(daly - exact) < abs(young - exact)
    assert resilience.daly_interval(3 * hour, 1 * hour) == 1 * hour   # δ ≥ 2M: checkpoint every MTBF


def test_no_checkpoint_time_against_simulation():
    lam, work = 1 / hour, 0.5 * hour
    sim = cost.simulate_failures(work, lam, work, runs=20_000, seed=1).mean()
    assert np.isclose(sim, resilience.expected_time_without_checkpoints(work, lam), rtol=0.02)
    T, l = sp.symbols("T lambda", positive=True)
    assert sp.simplify(resilience.expected_time_without_checkpoints(T, l) - (sp.exp(l * T) - 1) / l) == 0


def test_checkpoint_times():
    n = 50 * GB
    assert np.isclose(resilience.sync_checkpoint_time(n, 32 * GB, 2 * GB), 26.5625)
    assert np.isclose(resilience.async_checkpoint_time(n, 32 * GB), 1.5625)
    # compression pays exactly below B_comp (not B_comp / R, where only the bottleneck moves)
    plain = lambda bw: 100 * GB / bw
    for bw, wins in [(1.5 * GB, True), (3.9 * GB, True), (4.1 * GB, False)]:
        assert (resilience.compressed_write_time(100 * GB, 2.5, 4 * GB, bw) < plain(bw)) == wins
