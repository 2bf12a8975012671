"""The one policy for timing on a shared machine and asserting on timings (DESIGN.md).

Readers run the chapters on busy laptops and CI runs them on two shared cores, so a measured
claim must survive interference. Interference only ever *adds* time, which gives the policy:

* repeat a measurement and keep the fastest, or a low quantile (:func:`fastest`,
  :func:`low_quantile`, :func:`repeat`);
* assert a *relation* with a margin the physics gives (a ratio, an ordering, a fit quality),
  never an absolute time;
* when the relation does not hold, measure again a bounded number of times before failing,
  and fail with every value seen (:func:`confirm`);
* a chapter spends a bounded time on measurement (:class:`Budget`), so a busy machine makes a
  chapter retry less, not run forever.

Used from chapter 02 on::

    from dtbook import measure
    budget = measure.Budget(20, "chapter 04")
    def ratio():
        t_small = measure.fastest(measure.repeat(small_step, repeats=7))
        t_big = measure.fastest(measure.repeat(big_step, repeats=7))
        return t_big / t_small
    r = measure.confirm(ratio, lambda r: r > 1.5, what="big/small step time", budget=budget)
"""

from __future__ import annotations

import math
import os
import time

from dtbook import _validate

__all__ = ["fastest", "low_quantile", "repeat", "Budget", "confirm", "MeasurementError",
           "load_average", "ATTEMPTS"]

ATTEMPTS = 3  # the default number of measurements before a relation is declared false


class MeasurementError(AssertionError):
    """A measured relation failed every attempt; the message lists what was seen.

    An ``AssertionError``, so a notebook cell that calls :func:`confirm` fails under nbval the
    way a plain ``assert`` does.
    """


def _times(times, name="times") -> list[float]:
    xs = [float(t) for t in times]
    if not xs:
        raise ValueError(f"{name} must not be empty")
    if any(not math.isfinite(t) or t < 0 for t in xs):
        raise ValueError(f"{name} must be finite and non-negative, got {xs}")
    return xs


def fastest(times) -> float:
    """The fastest of repeated timings: interference only adds time (chapter 02 on)."""
    return min(_times(times))


def low_quantile(times, q=0.1) -> float:
    """The ``q`` quantile of repeated timings (linear interpolation), for when the single
    fastest is too lucky, e.g. a cache-warm outlier (chapter 02 on)."""
    if not 0 <= q <= 1:
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    xs = sorted(_times(times))
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def repeat(fn, *args, repeats=5, warmup=1) -> list[float]:
    """Call ``fn(*args)`` ``warmup`` times untimed, then ``repeats`` times timed; return the
    seconds of each timed call. For timings inside a process group (every rank together,
    the slowest rank's time) use :func:`dtbook.dist.timed` instead (chapter 02 on)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a whole number >= 0, got {warmup!r}")
    for _ in range(warmup):
        fn(*args)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t0)
    return out


def load_average() -> float | None:
    """The one-minute load average, or None where the system does not report one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class Budget:
    """A time budget for a chapter's measurements (chapter 02 on).

    ``Budget(30, "chapter 12")`` starts a clock. ``remaining`` says how much is left;
    :func:`confirm` stops re-measuring once the budget is spent, and ``report()`` gives the
    sentence a page shows ("measurements took 12.3 s of a 30 s budget").
    """

    def __init__(self, seconds, name="this chapter"):
        self.seconds = float(_validate.positive("seconds", seconds))
        self.name = str(name)
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    @property
    def remaining(self) -> float:
        return max(0.0, self.seconds - self.elapsed)

    @property
    def spent(self) -> bool:
        return self.remaining <= 0

    def report(self) -> str:
        load = load_average()
        tail = f" (load average {load:.1f} on {os.cpu_count()} cores)" if load is not None else ""
        return (f"{self.name}: measurements took {self.elapsed:.1f} s of a "
                f"{self.seconds:g} s budget{tail}")

    def __repr__(self):
        return f"<Budget {self.name}: {self.elapsed:.1f} of {self.seconds:g} s>"


def _show(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def confirm(measure, holds, *, what="the measurement", attempts=ATTEMPTS, budget=None,
            expected=""):
    """Measure until a relation holds, a bounded number of times (chapter 02 on).

    ``measure()`` takes a fresh measurement and returns any value; ``holds(value)`` says
    whether the relation the chapter claims is true of it. The first value for which it holds
    is returned. If none of ``attempts`` measurements satisfies it (fewer when ``budget`` is
    spent, but always at least one), :class:`MeasurementError` is raised naming ``what``,
    the relation ``expected`` (a phrase such as "ratio > 1.5"), every value seen and the load
    average: a failure that a busy machine caused reads differently from one the physics did.
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be a whole number >= 1, got {attempts!r}")
    if not callable(measure) or not callable(holds):
        raise ValueError("measure and holds must both be callables")
    seen = []
    for _ in range(attempts):
        value = measure()
        seen.append(value)
        if holds(value):
            return value
        if budget is not None and budget.spent:
            break
    load = load_average()
    raise MeasurementError(
        f"{what}: the relation {expected or 'claimed'} did not hold in {len(seen)} "
        f"measurement(s): {', '.join(_show(v) for v in seen)}"
        + (f"; load average {load:.1f} on {os.cpu_count()} cores" if load is not None else "")
        + (f"; {budget.report()}" if budget is not None else ""))
