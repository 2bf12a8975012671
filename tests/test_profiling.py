"""dtbook.profiling: the formulas of chapter 32 against independent arithmetic, their algebra,
and their refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dtbook import data_parallel, flops, overlap, profiling, recompute
from dtbook.symbolic import assert_same


def test_flop_utilization_is_mfu_for_model_flops():
    # 6Ψ per token at a measured throughput: the same number chapter 01's mfu gives
    psi, tokens, t, peak, devices = 7e9, 4 * 2048, 0.9, 989.4e12, 1
    mine = profiling.flop_utilization(flops.training_flops(psi, tokens), t, peak, devices)
    assert math.isclose(mine, flops.mfu(tokens / t, psi, peak, devices))
    assert math.isclose(profiling.flop_utilization(2e15, 1.0, 1e15, 4), 0.5)


def test_hardware_flops_full_recompute_is_four_thirds():
    assert profiling.hardware_flops(6.0) == pytest.approx(8.0)        # 6Ψ + one more 2Ψ forward
    assert profiling.hardware_flops(6.0, 0.0) == 6.0
    assert profiling.hardware_flops(6.0, 0.5) == pytest.approx(7.0)
    c = sp.Symbol("c", positive=True)
    assert_same(profiling.hardware_flops(1, c), 1 + recompute.recompute_overhead(c), "HFU/MFU")
    with pytest.raises(ValueError, match="recompute_fraction"):
        profiling.hardware_flops(6.0, 1.5)


def test_step_budget():
    assert profiling.step_budget(0.04, 0.05, 0.05, 0.01) == pytest.approx(0.15)
    assert profiling.step_budget(0.04, 0.05, 0.05, 0.01, 0.0, 1.0) == pytest.approx(0.10)
    f, b, m, o, x, a = sp.symbols("f b m o x a", positive=True)
    assert_same(profiling.step_budget(f, b, m, o, x, a),
                f + b + m + o + x - a * sp.Min(b, m), "step budget")
    with pytest.raises(ValueError, match="t_backward"):
        profiling.step_budget(0.0, -1.0, 0.0, 0.0)


def test_slowdown_and_zscores():
    times = [15.0] * 7 + [65.0]
    assert profiling.slowdown(times) == pytest.approx(65 / np.mean(times))
    z = profiling.zscores(times)
    assert z[-1] == pytest.approx(math.sqrt(7)) == pytest.approx(profiling.max_zscore(8))
    assert np.allclose(z[:-1], (15 - np.mean(times)) / np.std(times))
    assert np.all(profiling.zscores([3.0, 3.0, 3.0]) == 0)
    assert profiling.slowdown(2.0) == 1.0
    with pytest.raises(ValueError, match="times"):
        profiling.zscores([1.0, -1.0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-4, 10.0), min_size=2, max_size=64))
def test_samuelson_bound(times):
    z = profiling.zscores(times)
    assert np.all(np.abs(z) <= profiling.max_zscore(len(times)) + 1e-9)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 128), st.floats(1e-3, 1.0), st.floats(1e-3, 10.0))
def test_one_straggler_has_the_largest_zscore_whatever_its_delay(p, base, delay):
    times = [base] * (p - 1) + [base + delay]
    assert profiling.zscores(times)[-1] == pytest.approx(math.sqrt(p - 1), rel=1e-6)


def test_max_zscore_symbolic():
    P = sp.Symbol("P", positive=True)
    assert_same(profiling.max_zscore(P), sp.sqrt(P - 1), "√(P − 1)")
    assert profiling.max_zscore(11) == pytest.approx(math.sqrt(10))   # z > 3 needs 11 ranks


def test_throughput_loss_matches_the_straggler_model():
    t, d = 15e-3, 50e-3
    t_slow = data_parallel.straggler_step_time([t] * 7 + [t + d], 0.0)
    assert profiling.throughput_loss(t, t_slow) == pytest.approx(d / (t + d))
    T, D = sp.symbols("T d", positive=True)
    assert_same(profiling.throughput_loss(T, T + D), D / (T + D), "d/(T + d)")


def test_wasted_device_hours():
    assert profiling.wasted_device_hours(0.10, 64) == pytest.approx(153.6)
    assert profiling.wasted_device_hours(0.10, 64, 3600.0) == pytest.approx(6.4)
    with pytest.raises(ValueError, match="inefficiency"):
        profiling.wasted_device_hours(1.5, 64)


def test_overlap_efficiency_formula_is_chapter_31s_overlap_fraction():
    tc, tm, t = sp.symbols("T_c T_m T", positive=True)
    curriculum = 1 - (t - sp.Max(tc, tm)) / ((tc + tm) - sp.Max(tc, tm))
    for a, b in ((tc, tm), (tm, tc)):
        d = sp.Symbol("d", positive=True)
        at = {a: b + d}
        assert sp.simplify((curriculum - overlap.overlap_achieved(tc, tm, t)).subs(at)) == 0
