"""dtbook.calibration: least-squares scale factors of a step-time model (chapter 27)."""

import numpy as np
import pytest

from dtbook import calibration as cal


def _steps(seed=0, n=12):
    rng = np.random.default_rng(seed)
    compute = rng.uniform(1e-3, 5e-2, n)
    comm = rng.uniform(1e-4, 2e-2, n)
    return compute, comm


def test_recovers_known_factors_from_exact_steps():
    compute, comm = _steps()
    measured = 2.5 * compute + 4.0 * comm + 3e-3
    fit = cal.fit_scale_factors(compute, comm, measured)
    assert fit.factors == pytest.approx({"compute": 2.5, "comm": 4.0, "overhead": 3e-3}, rel=1e-9)
    assert fit.rms_relative < 1e-10 and fit.r2_log == pytest.approx(1.0)


def test_relative_least_squares_matches_weighted_normal_equations():
    # an independent solution: weighted least squares with weights 1/t², by the normal equations
    compute, comm = _steps(1)
    rng = np.random.default_rng(2)
    measured = (1.7 * compute + 0.6 * comm + 1e-3) * rng.uniform(0.8, 1.25, compute.size)
    fit = cal.fit_scale_factors(compute, comm, measured)
    A = np.column_stack([compute, comm, np.ones_like(compute)])
    W = np.diag(1 / measured ** 2)
    x = np.linalg.solve(A.T @ W @ A, A.T @ W @ measured)
    assert np.all(x > 0)  # the free optimum is feasible here, so both must agree
    assert [fit.factors[k] for k in ("compute", "comm", "overhead")] == pytest.approx(x, rel=1e-8)
    assert fit.predicted == pytest.approx(A @ x, rel=1e-8)
    assert fit.rel_residuals == pytest.approx(measured / (A @ x) - 1, rel=1e-7, abs=1e-12)


def test_no_factor_goes_negative():
    # steps that get *shorter* with more communication: the free fit wants comm < 0
    compute, comm = _steps(3)
    measured = 2.0 * compute + 0.02 - 0.5 * comm
    fit = cal.fit_scale_factors(compute, comm, measured)
    assert min(fit.factors.values()) >= 0 and fit.factors["comm"] == 0.0
    # and it is no worse than the best one- and two-term fits
    for terms in ("compute", "compute,overhead", "comm,overhead"):
        other = cal.fit_scale_factors(compute, comm, measured, terms)
        assert np.sum(fit.rel_residuals ** 2) <= np.sum(other.rel_residuals ** 2) + 1e-12


def test_one_constant_efficiency_fits_worse_than_three_terms():
    compute, comm = _steps(4)
    measured = 1.5 * compute + 3.0 * comm + 2e-3
    single = cal.fit_scale_factors(compute, comm, measured, "compute")
    full = cal.fit_scale_factors(compute, comm, measured)
    assert set(single.factors) == {"compute"}
    assert single.rms_relative > 10 * full.rms_relative


def test_predict_and_calibrated_time_agree():
    compute, comm = _steps(5)
    fit = cal.fit_scale_factors(compute, comm, 2 * compute + comm + 1e-3)
    assert fit.predict(compute, comm) == pytest.approx(fit.predicted)
    assert cal.calibrated_time(0.01, 0.002, 2.0, 1.0, 1e-3) == pytest.approx(0.023)


def test_bad_input_names_the_argument():
    compute, comm = _steps()
    with pytest.raises(ValueError, match="terms"):
        cal.fit_scale_factors(compute, comm, compute, "compute,flops")
    with pytest.raises(ValueError, match="same length"):
        cal.fit_scale_factors(compute, comm[:3], compute)
    with pytest.raises(ValueError, match="measured"):
        cal.fit_scale_factors(compute[:3], comm[:3], compute[:3])
    with pytest.raises(ValueError, match="measured"):
        cal.fit_scale_factors(compute, comm, -compute)
    with pytest.raises(ValueError, match="predicted"):
        cal.relative_errors(0.0, 1.0)
