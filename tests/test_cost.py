"""dtbook.cost: run cost, failures, rent against buy, the efficiency curve (chapter 05)."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from dtbook import comm, cost, flops
from dtbook.symbolic import assert_same, params as Psi, tokens as D, peak_flops as F, mfu as eta
from dtbook.units import hour, year

R, lam, c, o, r = sp.symbols("R lambda c o r", positive=True)
fractions = st.floats(min_value=0.01, max_value=1.0, allow_nan=False)


# --- the cost of a run ---------------------------------------------------------------------

def test_book_exercise_numbers():
    # 70B, 2T tokens, 45% MFU at $4/h on a 989 TFLOP/s part (the book's worked example).
    assert flops.training_flops(70e9, 2e12) == pytest.approx(8.4e23)
    assert cost.flop_per_device_hour(989e12, 0.45) == pytest.approx(1.602e18, rel=1e-3)
    assert cost.device_hours(70e9, 2e12, 989e12, 0.45) == pytest.approx(524_286, rel=1e-4)
    assert cost.run_cost(70e9, 2e12, 989e12, 4.0, 0.45) == pytest.approx(2.097e6, rel=1e-3)


def test_symbolic_path():
    assert_same(cost.device_hours(Psi, D, F, eta), 6 * Psi * D / (F * eta) / 3600)
    assert_same(cost.run_cost(Psi, D, F, R, eta), 6 * Psi * D * R / (F * eta * 3600))
    m = sp.symbols("m", positive=True)
    assert_same(cost.run_cost(Psi, D, F, R, eta, m), m * 6 * Psi * D * R / (F * eta * 3600))
    assert_same(cost.failure_multiplier(lam, c, o, r), (1 + o) / (1 - lam * (c / 2 + r)))
    assert_same(cost.failure_multiplier_exact(lam, c, o, r),
                (sp.exp(lam * (1 + o) * c) - 1) * (1 / lam + r) / c)
    # To first order in λ the exact form is (1 + o)(1 + λ(w/2 + r)), w = (1 + o)c.
    series = sp.series(cost.failure_multiplier_exact(lam, c, o, r), lam, 0, 2).removeO()
    assert_same(series, (1 + o) * (1 + lam * ((1 + o) * c / 2 + r)))
    delta = sp.symbols("delta", positive=True)
    saved = cost.mfu_point_value(Psi, D, F, R, eta, delta)
    assert_same(saved, cost.run_cost(Psi, D, F, R, eta) * delta / (eta + delta))
    T, P, B = sp.symbols("T P B", positive=True)
    assert_same(cost.required_mfu(Psi, D, F, P, T), 6 * Psi * D / (P * F * T))
    assert_same(cost.devices_for_budget(B, R, T), B * 3600 / (R * T))
    assert_same(cost.breakeven_time(B, R, eta), B / (R * eta) * 3600)
    assert_same(cost.scaled_mfu(eta, T, c, o), eta * T / (T + (1 - o) * c))


def test_cost_independent_of_devices_and_inverse_in_mfu():
    a = cost.run_cost(70e9, 2e12, 989e12, 4.0, 0.5)
    b = cost.run_cost(70e9, 2e12, 989e12, 4.0, 0.35)
    assert b / a == pytest.approx(0.5 / 0.35)
    assert b / a == pytest.approx(1 + flops.mfu_gain(0.35, 0.5))


@given(fractions, st.floats(min_value=1e6, max_value=1e8))
def test_budget_round_trip(mfu, budget):
    tokens = cost.tokens_for_budget(budget, 7e9, 989e12, 4.0, mfu)
    assert cost.run_cost(7e9, tokens, 989e12, 4.0, mfu) == pytest.approx(budget, rel=1e-9)


def test_budget_and_required_mfu():
    # $2M at $4/h for 30 days: 500k GPU-hours, 694 GPUs.
    assert cost.devices_for_budget(2e6, 4.0, 30 * 24 * hour) == pytest.approx(694.4, rel=1e-3)
    assert cost.required_mfu(30e9, 2e12, 989e12, 640, 30 * 24 * hour) == pytest.approx(0.219, rel=0.01)


def test_mfu_point_value():
    base = cost.run_cost(70e9, 2e12, 989e12, 4.0, 0.40)
    one = cost.mfu_point_value(70e9, 2e12, 989e12, 4.0, 0.40)
    assert one == pytest.approx(base * 0.01 / 0.41)
    assert cost.mfu_point_value(70e9, 2e12, 989e12, 4.0, 0.40, -0.01) < 0


def test_cost_per_token():
    assert cost.cost_per_token(2.1e6, 2e12) * 1e9 == pytest.approx(1050)


# --- failures --------------------------------------------------------------------------------

def test_book_preemption_multipliers():
    m = [cost.failure_multiplier(p / hour, hour, 0.05) for p in (0.05, 0.20, 0.50)]
    assert m == pytest.approx([1.0769, 1.1667, 1.40], rel=1e-3)
    assert cost.breakeven_failure_rate(1.5, 4.0, hour, 0.05) * hour == pytest.approx(1.2125)
    # at the break-even rate spot costs exactly what on-demand does
    lam_star = cost.breakeven_failure_rate(1.5, 4.0, hour, 0.05)
    assert 1.5 * cost.failure_multiplier(lam_star, hour, 0.05) == pytest.approx(4.0)


def test_failure_multiplier_limits_and_errors():
    assert cost.failure_multiplier(0, hour) == 1
    assert cost.failure_multiplier_exact(0, hour, 0.05) == pytest.approx(1.05)
    arr = cost.failure_multiplier_exact(np.array([0.0, 0.1, 1.0]) / hour, hour)
    assert arr.shape == (3,) and np.all(np.diff(arr) > 0)
    with pytest.raises(ValueError, match="failure_rate"):
        cost.failure_multiplier(3 / hour, hour)
    with pytest.raises(ValueError, match="checkpoint_interval"):
        cost.failure_multiplier(0.1 / hour, -1.0)
    with pytest.raises(ValueError, match="overhead"):
        cost.run_cost(7e9, 1e12, 989e12, 4.0, 0.5, overhead=0.9)


@given(st.floats(min_value=1e-4, max_value=1.9), st.floats(min_value=0, max_value=0.2))
def test_exact_below_first_order(lam_c, o):
    # With o = r = 0, (e^x − 1)/x ≤ 1/(1 − x/2) term by term (1/(n+1)! ≤ 1/2^n): the
    # first-order model is pessimistic, and the two agree as λc → 0.
    exact = cost.failure_multiplier_exact(lam_c / hour, hour)
    first = cost.failure_multiplier(lam_c / hour, hour)
    assert exact <= first * (1 + 1e-12)
    small = cost.failure_multiplier_exact(1e-6 / hour, hour, o)
    assert small == pytest.approx(1 + o, rel=1e-5)


def test_simulation_matches_exact_model():
    work = 100 * hour
    for rate, restart in ((0.1, 0.0), (1.0, 0.1 * hour)):
        wall = cost.simulate_failures(work, rate / hour, hour, 0.05, restart, runs=2000, seed=3)
        m = wall / work
        exact = cost.failure_multiplier_exact(rate / hour, hour, 0.05, restart)
        assert abs(m.mean() - exact) < 4 * m.std() / np.sqrt(m.size)
    same = cost.simulate_failures(work, 0.1 / hour, hour, runs=50, seed=1)
    assert np.array_equal(same, cost.simulate_failures(work, 0.1 / hour, hour, runs=50, seed=1))
    # no failures: exactly the work plus checkpoint writes, partial last segment included
    assert np.allclose(cost.simulate_failures(2.5 * hour, 0, hour, 0.1, runs=3), 2.75 * hour)


def test_job_failure_rate():
    assert 1 / cost.job_failure_rate(1000, 50_000 * hour) == pytest.approx(50 * hour)


# --- rent or buy -----------------------------------------------------------------------------

def test_breakeven_book_numbers():
    assert cost.breakeven_device_hours(55e3, 4.0) == 13_750
    assert cost.breakeven_time(55e3, 4.0) / cost.month == pytest.approx(18.8, abs=0.05)
    assert cost.breakeven_time(55e3, 4.0, 0.5) / year == pytest.approx(3.14, abs=0.01)
    assert cost.breakeven_utilization(55e3, 4.0, 3 * year) == pytest.approx(0.523, abs=1e-3)


@given(fractions)
def test_breakeven_time_falls_with_utilization(u):
    assert cost.breakeven_time(55e3, 4.0, u) >= cost.breakeven_time(55e3, 4.0, 1.0)


# --- the efficiency curve --------------------------------------------------------------------

def test_scaled_mfu_cliff():
    tokens_per_step, psi, peak = 4e6, 70e9, 989e12
    devices = np.array([256, 512, 1024, 2048, 4096])
    t_c = flops.training_flops(psi, tokens_per_step) / (devices * peak * 0.5)
    t_ar = comm.allreduce_time(2 * psi / 8, devices // 8, 2e-6, 50e9)
    eta = cost.scaled_mfu(0.5, t_c, t_ar)
    assert np.all(np.diff(eta) < 0) and eta[0] < 0.5
    assert cost.scaled_mfu(0.5, 1.0, 1.0, overlap=1.0) == 0.5
    with pytest.raises(ValueError, match="overlap"):
        cost.scaled_mfu(0.5, 1.0, 1.0, overlap=1.5)


# --- data and validation ---------------------------------------------------------------------

def test_prices_are_labelled():
    p = cost.price("h100-sxm", "on-demand")
    assert (p.low, p.high, p.mid) == (4.0, 5.0, 4.5)
    assert "2024" in p.as_of and "original edition" in p.source
    assert cost.ONPREM_TCO["h100-sxm"].low == 50e3
    with pytest.raises(ValueError, match="h100-sxm/on-demand"):
        cost.price("tpu", "spot")
    ds = cost.DEEPSEEK_V3
    assert ds["gpu_hours"] * ds["price_per_gpu_hour"] == pytest.approx(5.576e6)


@pytest.mark.parametrize("call, name", [
    (lambda: cost.run_cost(7e9, 1e12, 989e12, -1.0, 0.5), "price_per_device_hour"),
    (lambda: cost.run_cost(7e9, 1e12, 989e12, 4.0, 1.5), "mfu"),
    (lambda: cost.device_hours(7e9, 1e12, 0, 0.5), "peak_flops"),
    (lambda: cost.breakeven_time(55e3, 4.0, 0), "utilization"),
    (lambda: cost.devices_for_budget(1e6, 4.0, float("nan")), "duration"),
    (lambda: cost.simulate_failures(hour, 0.1, hour, runs=0), "runs"),
    (lambda: cost.job_failure_rate(True, 1.0), "devices"),
])
def test_value_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
