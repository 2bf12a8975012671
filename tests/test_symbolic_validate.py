import numpy as np
import pytest
import sympy as sp

from dtbook import _validate as check
from dtbook import symbolic


def test_same_accepts_identities_and_rejects_differences():
    a, b = symbolic.alpha, symbolic.beta
    n = symbolic.nbytes
    assert symbolic.same(a + n / b, (a * b + n) / b)
    assert not symbolic.same(a + n / b, a + 2 * n / b)
    assert symbolic.same(sp.sqrt(n**2), n)  # holds because n is declared positive


def test_same_falls_back_to_numeric_points():
    x = sp.Symbol("x", positive=True)
    # An identity SymPy's simplify may leave alone; the numeric fallback must agree.
    assert symbolic.same(sp.log(x**3), 3 * sp.log(x))
    assert not symbolic.same(sp.log(x**3), 2 * sp.log(x))


def test_assert_same_shows_both_sides():
    with pytest.raises(AssertionError, match="differ"):
        symbolic.assert_same(symbolic.params, 2 * symbolic.params, "the counts")


@pytest.mark.parametrize("fn", [check.positive, check.nonnegative, check.fraction, check.count])
def test_symbols_pass_through(fn):
    s = sp.Symbol("s", positive=True)
    assert fn("s", s) is s


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), [1, -2], np.array([0.5, 0.0])])
def test_positive_rejects_and_names(value):
    with pytest.raises(ValueError, match="widgets"):
        check.positive("widgets", value)


@pytest.mark.parametrize("value", ["3", True, None, {"a": 1}])
def test_non_numbers_are_rejected_by_name(value):
    with pytest.raises(ValueError, match="thing"):
        check.positive("thing", value)


def test_fraction_and_count():
    assert check.fraction("mfu", 0.5) == 0.5
    with pytest.raises(ValueError, match="mfu"):
        check.fraction("mfu", 1.5)
    assert check.count("world", 4) == 4
    with pytest.raises(ValueError, match="world"):
        check.count("world", 2.5)
    with pytest.raises(ValueError, match="chunks"):
        check.count("chunks", 0)
    assert check.count("chunks", 0, minimum=0) == 0
    with pytest.raises(ValueError, match="x"):
        check.positive("x", sp.Integer(-3))  # a SymPy number is checked like a number


def test_scalar_takes_one_number_or_a_symbol_and_names_several():
    for ok in (3, 2.5, np.float64(1.0), np.array(4.0), sp.Symbol("x")):
        assert check.scalar("n", ok) is ok
    for bad in ([1.0, 2.0], (1.0,), np.array([1.0, 2.0])):
        with pytest.raises(ValueError, match=r"\bn\b.*single number"):
            check.scalar("n", bad)


def test_guarded_modules_may_take_lists_as_arrays():
    def f(x, y=2.0):
        return x * y

    plain, arrays = check.guarded(f), check.guarded(f, arrays=True)
    assert plain([1.0, 2.0], 2) == [1.0, 2.0, 1.0, 2.0]  # Python's list repetition
    assert np.array_equal(arrays([1.0, 2.0], 2), np.array([2.0, 4.0]))
    assert np.array_equal(arrays(x=(1, 2), y=[1.0, 3.0]), np.array([1.0, 6.0]))
    nested = [[1.0, 2.0], [3.0, 4.0]]  # only a flat list of numbers is turned into an array
    assert arrays(nested, 1) == nested
    assert arrays.lists_as_arrays and not plain.lists_as_arrays
    with pytest.raises(ValueError, match=r"\bx\b"):
        arrays([1.0, None], 2)
