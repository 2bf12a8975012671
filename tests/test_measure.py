"""dtbook.measure: the timing policy, checked on values we control (no real clocks asserted)."""

import pytest

from dtbook import measure


def test_fastest_and_low_quantile():
    assert measure.fastest([0.3, 0.1, 0.2]) == 0.1
    assert measure.low_quantile([1, 2, 3, 4, 5], 0.25) == 2.0
    assert measure.low_quantile([1, 2, 3, 4, 5], 0.0) == 1.0
    assert measure.low_quantile([4.0], 0.9) == 4.0


@pytest.mark.parametrize("bad", [[], [float("nan")], [-1.0]])
def test_bad_times_are_named(bad):
    with pytest.raises(ValueError, match="times"):
        measure.fastest(bad)


def test_repeat_counts_calls():
    calls = []
    times = measure.repeat(calls.append, 1, repeats=4, warmup=2)
    assert len(calls) == 6 and len(times) == 4 and all(t >= 0 for t in times)
    with pytest.raises(ValueError, match="repeats"):
        measure.repeat(print, repeats=0)


def test_confirm_retries_then_returns_the_first_value_that_holds():
    values = iter([1.0, 1.2, 2.5, 9.0])
    assert measure.confirm(lambda: next(values), lambda v: v > 2) == 2.5


def test_confirm_fails_with_every_value_seen():
    values = iter([1.0, 1.1, 1.2, 5.0])
    with pytest.raises(measure.MeasurementError) as err:
        measure.confirm(lambda: next(values), lambda v: v > 2, what="ratio", expected="> 2")
    msg = str(err.value)
    assert "ratio" in msg and "> 2" in msg and "1, 1.1, 1.2" in msg and "3 measurement" in msg
    assert isinstance(err.value, AssertionError)  # nbval fails the cell like a plain assert


def test_confirm_stops_when_the_budget_is_spent():
    budget = measure.Budget(1e-9, "tiny")
    seen = []
    with pytest.raises(measure.MeasurementError, match="tiny"):
        measure.confirm(lambda: seen.append(1) or 0, lambda v: False, attempts=5, budget=budget)
    assert len(seen) == 1  # at least one, and no more once the budget is gone


def test_budget_report_and_validation():
    b = measure.Budget(30, "chapter 99")
    assert 0 <= b.elapsed < 30 and b.remaining > 0 and not b.spent
    assert "chapter 99" in b.report() and "30 s budget" in b.report()
    with pytest.raises(ValueError, match="seconds"):
        measure.Budget(-1)
