"""Derivation helpers the notebooks share: the house symbols and an equality check.

The names follow the notation table of DESIGN.md, so a derivation in any chapter prints
with the same letters (Ψ for parameters, α and β for a link, P for ranks, ...).
"""

from __future__ import annotations

import random

import numpy as np
import sympy as sp

# One symbol per house name, all positive so SymPy can simplify square roots and logs.
params, tokens, world, nbytes = sp.symbols("Psi D P n", positive=True)
alpha, beta = sp.symbols("alpha beta", positive=True)
batch, seq, hidden, layers, heads, vocab = sp.symbols("B S H L A V", positive=True)
peak_flops, mfu = sp.symbols("F eta", positive=True)
chunks = sp.symbols("k", positive=True, integer=True)


def same(a, b) -> bool:
    """True when two expressions are equal for every value of their symbols.

    Compares both sides at eight random positive rational points first (relative tolerance
    1e-9, in arbitrary-precision floats): a disagreement there is a proof of difference, and
    agreement at every point is strong evidence of an identity. A point where either side is
    not a finite number proves nothing and is skipped; when fewer than four points remain,
    ``simplify(a - b) == 0`` decides. Two infinities are never taken as equal.
    """
    a, b = sp.sympify(a), sp.sympify(b)
    free = sorted(a.free_symbols | b.free_symbols, key=str)
    rng = random.Random(0)
    agreed = 0
    for _ in range(8):
        point = {s: sp.Rational(rng.randint(1, 997), rng.randint(1, 97)) for s in free}
        va, vb = a.evalf(30, subs=point), b.evalf(30, subs=point)
        if not (va.is_number and vb.is_number and va.is_finite and vb.is_finite):
            continue
        if abs(va - vb) > 1e-9 * max(1, abs(va), abs(vb)):
            return False
        agreed += 1
    if agreed >= 4:
        return True
    return sp.simplify(a - b) == 0


def assert_same(a, b, what: str = "the two expressions") -> None:
    """Raise AssertionError, showing both sides, unless `same(a, b)`."""
    if not same(a, b):
        raise AssertionError(f"{what} differ:\n  {sp.simplify(a)}\n  {sp.simplify(b)}")


# Helpers for formula functions that must work on numbers, arrays and SymPy alike.

def is_symbolic(*values) -> bool:
    """True when any value is a SymPy expression with free symbols."""
    return any(isinstance(v, sp.Basic) and v.free_symbols for v in values)


def _extreme(values, sympy_fn, numpy_fn):
    if any(isinstance(v, sp.Basic) for v in values):
        return sympy_fn(*values)
    out = values[0]
    for v in values[1:]:
        out = numpy_fn(out, v)
    return float(out) if np.ndim(out) == 0 else out


def minimum(*values):
    """Elementwise minimum that stays a SymPy ``Min`` when any input is symbolic."""
    return _extreme(values, sp.Min, np.minimum)


def maximum(*values):
    """Elementwise maximum that stays a SymPy ``Max`` when any input is symbolic."""
    return _extreme(values, sp.Max, np.maximum)
