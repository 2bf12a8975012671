"""Fermi estimates with error bars: how uncertainty in factors becomes uncertainty in a product.

Chapter 06 treats every planning number (step time, memory, cost) as a product of factors
each known only roughly, and carries the roughness through. Two rules:

- Interval (worst-case) arithmetic: if each factor xᵢ lies within a factor fᵢ of its central
  value, the product lies within a factor ∏ fᵢ. Safe, and far too wide once there are more
  than two or three factors, because it assumes every factor errs the same way at once.
- The multiplicative error rule: if the factors are independent and log-normal, with ln xᵢ of
  standard deviation σᵢ (a 1σ factor of fᵢ = e^{σᵢ}), then ln of the product is normal with
  σ = √(Σ σᵢ²), so the product's 1σ factor is exp(√(Σ ln² fᵢ)). Errors add in quadrature in
  log space: three factors each uncertain by 2× give 2^√3 ≈ 3.3×, not 2³ = 8×.

The chapter checks the rule with a Monte-Carlo sample (:func:`sample_product`, fixed seed).
Functions take numbers or NumPy arrays; the two combination rules also take SymPy symbols.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import is_symbolic

__all__ = ["fermi_params", "combined_factor", "worst_case_factor", "lognormal_from_range",
           "sample_product", "COVERAGE_1SIGMA"]

#: Probability that a normal variable lies within one standard deviation of its mean.
COVERAGE_1SIGMA = math.erf(1 / math.sqrt(2))


def fermi_params(layers, hidden, vocab, tied_embeddings=False):
    """Parameters of a GPT-style transformer to a few percent: Ψ ≈ 12·L·H² + 2·V·H (chapter 06).

    Per layer, attention holds four H × H matrices (Q, K, V, output) and a 4H-wide MLP two
    H × 4H ones: 12H². The embedding and the output head hold V·H each (one V·H when tied).
    Biases, norms and positions are left out; :meth:`dtbook.models.TransformerConfig.num_params`
    is the exact count, and chapter 06 compares the two.
    """
    check.count("layers", layers)
    check.positive("hidden", hidden)
    check.positive("vocab", vocab)
    return 12 * layers * hidden**2 + (1 if tied_embeddings else 2) * vocab * hidden


def _factors(name, factors):
    if len(factors) == 1 and isinstance(factors[0], (list, tuple)):
        factors = tuple(factors[0])
    if not factors:
        raise ValueError(f"{name} needs at least one factor")
    for i, f in enumerate(factors):
        check.positive(f"factors[{i}]", f)
        arr = check._numeric(f"factors[{i}]", f)
        if arr is not None and np.any(arr < 1):
            raise ValueError(f"factors[{i}] must be >= 1 (a 'within a factor of f' spread), "
                             f"got {f!r}")
    return factors


def combined_factor(*factors):
    """The 1σ uncertainty factor of a product of independent log-normal factors, each
    known within a 1σ factor fᵢ: exp(√(Σ (ln fᵢ)²)) (chapter 06).

    ``combined_factor(2, 2, 2)`` is 2^√3 ≈ 3.32. Accepts the factors as arguments or as one
    list.
    """
    factors = _factors("combined_factor", factors)
    if is_symbolic(*factors):
        return sp.exp(sp.sqrt(sum(sp.log(f) ** 2 for f in factors)))
    logs = [np.log(np.asarray(f, dtype=float)) for f in factors]
    out = np.exp(np.sqrt(sum(lg**2 for lg in logs)))
    return float(out) if np.ndim(out) == 0 else out


def worst_case_factor(*factors):
    """The interval-arithmetic bound on the same product: ∏ fᵢ (chapter 06). Every factor
    at its extreme in the same direction at once."""
    factors = _factors("worst_case_factor", factors)
    out = 1
    for f in factors:
        out = out * f
    return out


def lognormal_from_range(low, high, coverage=COVERAGE_1SIGMA):
    """(median, 1σ factor) of the log-normal that puts ``coverage`` of its probability
    between ``low`` and ``high`` (chapter 06).

    The median is the geometric mean √(low · high); the range spans ±z standard deviations of
    ln x, z the normal quantile of (1 + coverage)/2, so σ = ln(high/low) / (2z). With the
    default (one σ each side) "between 30% and 50% MFU" is a median of 38.7% within a factor
    of 1.29.
    """
    check.positive("low", low)
    check.positive("high", high)
    check.fraction("coverage", coverage)
    if np.any(np.asarray(high, dtype=float) < np.asarray(low, dtype=float)):
        raise ValueError(f"high must be >= low, got low={low!r}, high={high!r}")
    if coverage >= 1:
        raise ValueError("coverage must be < 1: a log-normal has no finite 100% range")
    z = math.sqrt(2) * _erfinv(coverage)
    median = np.sqrt(np.asarray(low, float) * np.asarray(high, float))
    factor = np.exp(np.log(np.asarray(high, float) / np.asarray(low, float)) / (2 * z))
    if np.ndim(median) == 0:
        return float(median), float(factor)
    return median, factor


def _erfinv(y: float) -> float:
    """Inverse error function by bisection on math.erf (no SciPy needed)."""
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.erf(mid) < y:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sample_product(medians, factors, samples=100_000, seed=0):
    """A Monte-Carlo sample of ∏ xᵢ with xᵢ independent log-normal, median ``medians[i]``
    and 1σ factor ``factors[i]`` (chapter 06). Returns a NumPy array of ``samples`` products;
    fixed ``seed``, so the same numbers every run."""
    medians = np.atleast_1d(np.asarray(medians, dtype=float))
    factors = np.atleast_1d(np.asarray(factors, dtype=float))
    if medians.shape != factors.shape or medians.ndim != 1:
        raise ValueError(f"medians and factors must be 1-D and the same length, got shapes "
                         f"{medians.shape} and {factors.shape}")
    check.positive("medians", medians)
    check.positive("factors", factors)
    if np.any(factors < 1):
        raise ValueError(f"factors must be >= 1, got {factors.tolist()}")
    check.count("samples", samples)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((int(samples), medians.size))
    return np.exp(np.log(medians) + z * np.log(factors)).prod(axis=1)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
