"""dtbook.fermi: Fermi parameter count and error propagation (chapter 06)."""

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from dtbook import fermi as E
from dtbook import models
from dtbook.symbolic import assert_same

factors = st.floats(min_value=1.0, max_value=10.0, allow_nan=False)


def test_fermi_params_against_exact_count():
    L, H, V = sp.symbols("L H V", positive=True)
    assert_same(E.fermi_params(L, H, V), 12 * L * H**2 + 2 * V * H)
    assert_same(E.fermi_params(L, H, V, tied_embeddings=True), 12 * L * H**2 + V * H)
    cfg = models.get("gpt3-175b")
    approx = E.fermi_params(cfg.layers, cfg.hidden, cfg.vocab, cfg.tied_embeddings)
    assert approx == pytest.approx(cfg.num_params(), rel=0.01)


def test_multiplicative_rule():
    assert E.combined_factor(2, 2, 2) == pytest.approx(2 ** math.sqrt(3))
    assert E.combined_factor([2, 2, 2]) == E.combined_factor(2, 2, 2)
    assert E.worst_case_factor(2, 2, 2) == 8
    f, g = sp.symbols("f g", positive=True)
    assert_same(E.combined_factor(f, g), sp.exp(sp.sqrt(sp.log(f) ** 2 + sp.log(g) ** 2)))
    assert_same(E.worst_case_factor(f, g), f * g)


@given(st.lists(factors, min_size=1, max_size=6))
def test_combined_never_wider_than_worst_case(fs):
    assert 1 <= E.combined_factor(*fs) <= E.worst_case_factor(*fs) * (1 + 1e-12)
    assert E.combined_factor(*fs) >= max(fs) * (1 - 1e-12)


def test_monte_carlo_agrees_with_rule():
    medians, fs = [3.0, 0.5, 20.0, 1.2], [1.5, 2.0, 1.3, 1.1]
    x = E.sample_product(medians, fs, samples=200_000, seed=1)
    sigma = math.log(E.combined_factor(*fs))
    assert np.std(np.log(x)) == pytest.approx(sigma, rel=0.01)
    assert np.median(x) == pytest.approx(np.prod(medians), rel=0.01)
    inside = np.mean(np.abs(np.log(x / np.prod(medians))) <= sigma)
    assert inside == pytest.approx(E.COVERAGE_1SIGMA, abs=0.005)
    assert np.array_equal(x[:10], E.sample_product(medians, fs, samples=200_000, seed=1)[:10])


def test_ranges():
    m, f = E.lognormal_from_range(0.3, 0.5)
    assert m == pytest.approx(math.sqrt(0.15))
    assert m / f == pytest.approx(0.3) and m * f == pytest.approx(0.5)
    m90, f90 = E.lognormal_from_range(0.3, 0.5, coverage=0.9)
    assert f90 < f  # a range held with more confidence implies a smaller σ


@pytest.mark.parametrize("call, name", [
    (lambda: E.combined_factor(0.5), "factors"),
    (lambda: E.combined_factor(), "at least one"),
    (lambda: E.lognormal_from_range(0.5, 0.3), "high"),
    (lambda: E.lognormal_from_range(0.3, 0.5, 1.0), "coverage"),
    (lambda: E.sample_product([1, 2], [2]), "medians"),
    (lambda: E.fermi_params(0, 10, 10), "layers"),
])
def test_errors(call, name):
    with pytest.raises(ValueError, match=name):
        call()
