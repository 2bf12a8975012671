"""dtbook.batchsize: noise scales, the steps–examples trade-off, estimators and LR rules
(chapter 10)."""

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dtbook import batchsize as bs
from dtbook.symbolic import assert_same, batch as B

Bn, Smin, eps_max, eps = sp.symbols("B_noise S_min epsilon_max epsilon", positive=True)
G2, GHG, trS, trHS, k = sp.symbols("G2 GHG trSigma trHSigma k", positive=True)

batches = st.floats(min_value=1e-3, max_value=1e9, allow_nan=False)
scales = st.floats(min_value=1e-2, max_value=1e8, allow_nan=False)


# --- the symbolic path ------------------------------------------------------------------------

def test_symbolic_tradeoff_identity():
    S = bs.steps(B, Bn, Smin)
    E = bs.examples(B, Bn, Smin * Bn)
    assert_same(E, B * S, "examples = batch x steps")
    assert sp.simplify(bs.tradeoff(S, E, Smin, Smin * Bn) - 1) == 0
    assert_same(bs.critical_batch(Smin, Smin * Bn), Bn)


def test_symbolic_optimal_step():
    dl = bs.loss_decrease(eps, B, G2, GHG, trHS)
    best = sp.solve(sp.diff(dl, eps), eps)[0]
    lr_max, noise = bs.max_lr(G2, GHG), bs.noise_scale(trHS, GHG)
    assert_same(best, bs.optimal_lr(B, noise, lr_max))
    assert_same(dl.subs(eps, best), bs.optimal_loss_decrease(B, noise, G2**2 / (2 * GHG)))


def test_symbolic_estimators_invert_the_mean_square():
    b1, b2 = sp.symbols("b_1 b_2", positive=True)
    m1, m2 = bs.expected_grad_sq(G2, trS, b1), bs.expected_grad_sq(G2, trS, b2)
    assert_same(bs.estimate_grad_sq(m1, m2, b1, b2), G2)
    assert_same(bs.estimate_trace_cov(m1, m2, b1, b2), trS)
    assert_same(bs.noise_scale_simple(trS, G2), trS / G2)


def test_symbolic_lr_rules_and_loss_scale():
    eta0, b0 = sp.symbols("eta_0 B_0", positive=True)
    assert_same(bs.lr_linear(eta0, b0, B), eta0 * B / b0)
    assert_same(bs.lr_sqrt(eta0, b0, B), eta0 * sp.sqrt(B / b0))
    assert_same(bs.optimal_lr_adam(B, Bn, eps_max), eps_max / sp.sqrt(1 + Bn / B))
    # multiply the loss by k: gradients by k, H by k, Sigma by k^2
    assert_same(bs.noise_scale(k**3 * trHS, k**3 * GHG), bs.noise_scale(trHS, GHG))
    assert_same(bs.noise_scale_simple(k**2 * trS, k**2 * G2), bs.noise_scale_simple(trS, G2))
    assert_same(bs.max_lr(k**2 * G2, k**3 * GHG), bs.max_lr(G2, GHG) / k)
    assert_same(bs.scaling_efficiency(b0, bs.steps(b0, Bn, Smin), B, bs.steps(B, Bn, Smin)),
                (b0 + Bn) / (B + Bn))


def test_symbolic_lars():
    lr, w, g, lam = sp.symbols("eta w g lambda", positive=True)
    assert_same(bs.lars_trust_ratio(w, g, lam), w / (g + lam * w))
    assert_same(bs.lars_relative_update(lr, w, g, 0), lr)
    assert_same(bs.lars_relative_update(lr, w, g, lam, 1), lr)


# --- numbers -----------------------------------------------------------------------------------

def test_at_the_critical_batch_both_double():
    assert bs.steps(512, 512, 100) == 200 and bs.examples(512, 512, 51200) == 102400


def test_book_exercise_numbers():
    # two points of S = S_min + S_noise/B: 100K at 256 and 28K at 1024
    fit = bs.fit_steps([256, 1024, 1024], [100e3, 28e3, 28e3])
    assert fit.min_steps == pytest.approx(4000) and fit.min_examples == pytest.approx(24_576_000)
    assert fit.critical_batch == pytest.approx(6144)
    assert bs.lr_linear(1e-3, 256, 4096) == pytest.approx(0.016)
    assert bs.lr_sqrt(1e-3, 256, 4096) == pytest.approx(0.004)
    assert bs.scaling_efficiency(512, 50e3, 8192, 6e3) == pytest.approx(50 / 6 / 16)
    assert bs.ramp_updates([1e12, 1e12], [1e6, 4e6]) == pytest.approx(1.25e6)


def test_arrays():
    b = np.array([1.0, 10.0, 100.0])
    np.testing.assert_allclose(bs.steps(b, 10.0, 5.0), [55, 10, 5.5])
    np.testing.assert_allclose(bs.tradeoff(bs.steps(b, 10.0, 5.0), bs.examples(b, 10.0, 50.0), 5, 50), 1)


def test_lars_relative_update_is_bounded_by_lr():
    assert bs.lars_relative_update(0.01, 2.0, 0.5, 0.0, cos=0.3) == pytest.approx(0.01)
    r = bs.lars_relative_update(0.01, 2.0, 0.5, 0.1, cos=0.0)
    assert r == pytest.approx(0.01 * math.sqrt(0.25 + 0.04) / 0.7) and r < 0.01
    # the same from vectors
    w, g = np.array([2.0, 0.0]), np.array([0.0, 0.5])
    step = 0.01 * bs.lars_trust_ratio(2.0, 0.5, 0.1) * (g + 0.1 * w)
    assert np.linalg.norm(step) / np.linalg.norm(w) == pytest.approx(r)


# --- estimators on synthetic Gaussian gradients -----------------------------------------------

def _synthetic(n, seed=0, P=50):
    rng = np.random.default_rng(seed)
    G = rng.normal(size=P) * 0.2
    scales = rng.uniform(0.5, 2.0, size=P)
    L = rng.normal(size=(P, P)) * 0.1 + np.diag(scales)
    cov = L @ L.T
    grads = rng.multivariate_normal(G, cov, size=n)
    return G, cov, grads


def test_per_example_estimator_recovers_known_statistics():
    G, cov, grads = _synthetic(20000)
    est = bs.noise_from_per_example(grads)
    assert est.grad_sq == pytest.approx(G @ G, rel=0.05)
    assert est.trace_cov == pytest.approx(np.trace(cov), rel=0.02)
    assert est.simple == pytest.approx(np.trace(cov) / (G @ G), rel=0.06)
    assert est.noise is None and est.samples == 20000


def test_per_example_estimator_is_unbiased_where_the_naive_one_is_not():
    G, cov, _ = _synthetic(1)
    chol = np.linalg.cholesky(cov)
    rng = np.random.default_rng(1)
    n, reps = 16, 2000
    g = G + rng.normal(size=(reps, n, G.size)) @ chol.T  # reps batches of n Gaussian gradients
    naive = [m @ m for m in g.mean(1)]
    unbiased = [bs.noise_from_per_example(b).grad_sq for b in g]
    truth, bias = G @ G, np.trace(cov) / n
    assert np.mean(naive) == pytest.approx(truth + bias, rel=0.05)  # biased up by tr(Σ)/n
    assert abs(np.mean(unbiased) - truth) < 0.1 * bias


def test_two_batch_estimator_recovers_known_statistics():
    G, cov, grads = _synthetic(32768, seed=2)
    small, big = 8, 512
    sq = lambda b: np.mean([np.sum(m**2) for m in grads.reshape(-1, b, grads.shape[1]).mean(1)])  # noqa: E731
    est = bs.noise_from_two_batches(sq(small), sq(big), small, big)
    # over seeds the estimates scatter by 1.3%, 0.4% and 1.3% (one standard deviation):
    # the tolerances are about four of them
    assert est.grad_sq == pytest.approx(G @ G, rel=0.05)
    assert est.trace_cov == pytest.approx(np.trace(cov), rel=0.02)
    assert est.simple == pytest.approx(np.trace(cov) / (G @ G), rel=0.05)


def test_hessian_noise_scale():
    G, cov, grads = _synthetic(20000, seed=3)
    rng = np.random.default_rng(4)
    A = rng.normal(size=(50, 50))
    H = A @ A.T / 50 + np.eye(50)
    est = bs.noise_from_per_example(grads, H)
    truth = np.trace(H @ cov) / (G @ H @ G)
    # 20,000 samples: both scatter by under 1% over seeds (one standard deviation)
    assert est.noise == pytest.approx(truth, rel=0.03)
    assert est.lr_max == pytest.approx((G @ G) / (G @ H @ G), rel=0.03)
    iso = bs.noise_from_per_example(grads, 3.0 * np.eye(50))  # H ∝ I: B_noise = B_simple
    assert iso.noise == pytest.approx(iso.simple, rel=1e-9)
    assert iso.lr_max == pytest.approx(1 / 3.0 * iso.grad_sq / iso.grad_sq, rel=1e-9)


def test_torch_tensor_input():
    torch = pytest.importorskip("torch")
    _, _, grads = _synthetic(1000, seed=5)
    a = bs.noise_from_per_example(grads)
    b = bs.noise_from_per_example(torch.tensor(grads, dtype=torch.float64))
    assert a == b


def test_unresolved_gradient_gives_infinite_noise_scale():
    rng = np.random.default_rng(6)
    grads = rng.normal(size=(8, 100))  # G = 0: the unbiased |G|^2 is ~0 or negative
    est = bs.noise_from_per_example(grads)
    assert est.simple == np.inf or est.simple > 10


# --- the fit -----------------------------------------------------------------------------------

def test_fit_recovers_exact_and_noisy_data():
    b = np.array([4, 16, 64, 256, 1024], float)
    exact = bs.steps(b, 100.0, 50.0)
    fit = bs.fit_steps(b, exact)
    assert fit.min_steps == pytest.approx(50) and fit.critical_batch == pytest.approx(100)
    assert fit.max_abs_rel_residual < 1e-9
    np.testing.assert_allclose(fit.steps(b), exact)
    np.testing.assert_allclose(fit.examples(b), b * exact)
    min_steps, min_examples = fit
    assert min_examples == pytest.approx(5000)
    noisy = exact * np.random.default_rng(0).uniform(0.9, 1.1, size=b.size)
    assert bs.fit_steps(b, noisy).critical_batch == pytest.approx(100, rel=0.3)


def test_fit_keeps_coefficients_nonnegative():
    b = np.array([1, 2, 4, 8], float)
    fit = bs.fit_steps(b, 100 / b * np.array([1.0, 1.1, 1.25, 1.5]))  # steeper than 1/B
    assert fit.min_steps >= 0 and fit.min_examples >= 0
    flat = bs.fit_steps(b, [10, 10, 10, 10])
    assert flat.min_examples == 0 and flat.critical_batch == 0
    assert bs.fit_steps(b, 8 / b).critical_batch > 1e6  # pure 1/B: no S_min to speak of


# --- properties ----------------------------------------------------------------------------------

@given(st.floats(min_value=1e-4, max_value=1e4), scales, st.floats(min_value=1, max_value=1e7))
def test_tradeoff_identity_for_every_batch(ratio, noise, s_min):
    b = ratio * noise  # B / B_noise within eight decades (beyond, 1 + x loses x to rounding)
    s = bs.steps(b, noise, s_min)
    e = bs.examples(b, noise, s_min * noise)
    assert e == pytest.approx(b * s, rel=1e-9)
    assert bs.tradeoff(s, e, s_min, s_min * noise) == pytest.approx(1, rel=1e-6)


@given(batches, st.floats(min_value=1.001, max_value=1e3), scales)
def test_steps_fall_and_examples_rise_with_batch(b, factor, noise):
    assert bs.steps(b * factor, noise, 1.0) < bs.steps(b, noise, 1.0)
    assert bs.examples(b * factor, noise, 1.0) > bs.examples(b, noise, 1.0)
    assert bs.optimal_lr(b * factor, noise, 1.0) > bs.optimal_lr(b, noise, 1.0)
    assert bs.scaling_efficiency(b, bs.steps(b, noise, 1.0), b * factor,
                                 bs.steps(b * factor, noise, 1.0)) <= 1 + 1e-12


@given(scales, scales)
def test_lr_limits(noise, lr_max):
    tiny, huge = noise * 1e-6, noise * 1e6
    # below the noise scale: linear (SGD) and square-root (Adam-like) in B; above it: saturated
    assert bs.optimal_lr(2 * tiny, noise, lr_max) / bs.optimal_lr(tiny, noise, lr_max) == pytest.approx(2, rel=1e-5)
    assert bs.optimal_lr_adam(4 * tiny, noise, lr_max) / bs.optimal_lr_adam(tiny, noise, lr_max) == pytest.approx(2, rel=1e-5)
    assert bs.optimal_lr(huge, noise, lr_max) == pytest.approx(lr_max, rel=1e-5)
    assert bs.optimal_lr_adam(huge, noise, lr_max) == pytest.approx(lr_max, rel=1e-5)


@settings(max_examples=50)
@given(st.floats(min_value=1e-6, max_value=10), st.floats(min_value=1e-6, max_value=10),
       st.floats(min_value=0, max_value=1), st.floats(min_value=-1, max_value=1))
def test_lars_never_exceeds_lr(w, g, lam, cos):
    assert bs.lars_relative_update(0.1, w, g, lam, cos) <= 0.1 * (1 + 1e-9)


# --- validation --------------------------------------------------------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda: bs.steps(0, 1, 1), "batch"),
    (lambda: bs.steps(1, -1, 1), "noise_scale"),
    (lambda: bs.examples(1, 1, float("nan")), "min_examples"),
    (lambda: bs.noise_scale_simple(1, 0), "grad_sq"),
    (lambda: bs.estimate_grad_sq(1, 1, 8, 8), "batch_small and batch_big"),
    (lambda: bs.estimate_trace_cov(-1, 1, 8, 16), "grad_sq_small"),
    (lambda: bs.lr_linear(0.1, 0, 8), "batch0"),
    (lambda: bs.lr_sqrt(0.1, 8, True), "batch"),
    (lambda: bs.lars_relative_update(0.1, 1, 1, 0.1, cos=2), "cos"),
    (lambda: bs.fit_steps([1, 2], [3, 4]), "at least three"),
    (lambda: bs.fit_steps([1, 2, 3], [3, 4]), "same length"),
    (lambda: bs.noise_from_per_example(np.ones(5)), "grads"),
    (lambda: bs.noise_from_per_example(np.ones((5, 3)), np.eye(2)), "hessian"),
    (lambda: bs.ramp_updates([1, 2], [1]), "same length"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
