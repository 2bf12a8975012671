"""What tests/test_exercise_values_i.py and _ii.py share: comparing an independent value with
an exercise's reference, and which exercises need one (issue 20)."""

from __future__ import annotations

import math

import numpy as np
import sympy as sp


def _rename(expr):
    """The same expression over positive symbols named alike (assumptions may differ)."""
    expr = sp.sympify(expr)
    return expr.subs({s: sp.Symbol(s.name, positive=True) for s in expr.free_symbols})


def compare(ref, mine, rtol, where="answer"):
    """Assert the independent value ``mine`` equals the reference ``ref`` leaf by leaf:
    numbers within ``rtol``, expressions by simplification, choices and bools exactly."""
    if isinstance(ref, dict):
        assert isinstance(mine, dict) and set(ref) == set(mine), where
        for k in ref:
            compare(ref[k], mine[k], rtol, f"{where}.{k}")
        return
    if isinstance(ref, (tuple, list)):
        assert isinstance(mine, (tuple, list)) and len(ref) == len(mine), where
        for i, (r, m) in enumerate(zip(ref, mine)):
            compare(r, m, rtol, f"{where}#{i + 1}")
        return
    if isinstance(ref, (bool, np.bool_)):
        assert isinstance(mine, (bool, np.bool_)) and bool(ref) == bool(mine), where
        return
    if isinstance(ref, str):
        assert ref == mine, where
        return
    if isinstance(ref, sp.Basic) and ref.free_symbols:
        assert sp.simplify(_rename(ref) - _rename(mine)) == 0, f"{where}: {ref} vs {mine}"
        return
    assert math.isclose(float(ref), float(mine), rel_tol=rtol), \
        f"{where}: reference {float(ref)!r}, independent {float(mine)!r}"


def unconfirmed(e) -> bool:
    """No printed answer, one the book_note rejects, or one that leaves a part unprinted:
    the exercise's reference needs a value obtained another way."""
    def leaves(x):
        return ([y for v in x for y in leaves(v)] if isinstance(x, (tuple, list))
                else [y for v in x.values() for y in leaves(v)] if isinstance(x, dict) else [x])
    return e.book_answer is None or bool(e.book_note) or None in leaves(e.book_answer)


def chapter_number(ex_id: str) -> int:
    """18 for "18.3", 31 for "31a.2"."""
    return int(ex_id.split(".")[0].rstrip("abcdefghijklmnopqrstuvwxyz"))
