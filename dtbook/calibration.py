"""Calibrating a step-time model against measured steps (chapter 27).

A step-time model predicts a step as a sum of terms: compute (FLOPs over a nominal FLOP/s),
communication (the α-β time of the collectives at a nominal α and β) and a fixed overhead.
Each term's nominal constants are guesses about hardware; calibration replaces the guesses
by what a few measured steps say, with one scale factor per term:

    t̂ = a · T_compute + b · T_comm + c.

a and b are dimensionless (a = 2 means compute runs at half the nominal FLOP/s), c is
seconds. They are found by least squares on *relative* residuals, as ``comm.fit_alpha_beta``
does (chapter 04): steps that take 2 ms and 200 ms count alike, and no factor may be
negative (a negative compute factor would be a machine that gets faster with more work).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from dtbook import _validate as check

__all__ = ["CalibrationFit", "fit_scale_factors", "calibrated_time", "relative_errors"]

TERMS = ("compute", "comm", "overhead")


@dataclass(frozen=True)
class CalibrationFit:
    """The result of :func:`fit_scale_factors` (chapter 27).

    ``factors`` maps each fitted term to its scale factor (the overhead in seconds);
    ``rel_residuals`` are measured/predicted − 1 per step; ``r2_log`` is the coefficient of
    determination of log(time), as in ``comm.AlphaBetaFit``; ``rms_relative`` the root mean
    square of the relative residuals.
    """

    factors: dict
    predicted: np.ndarray = field(repr=False)
    rel_residuals: np.ndarray = field(repr=False)
    r2_log: float
    rms_relative: float

    def predict(self, compute, comm):
        """The calibrated time of steps whose nominal terms are ``compute`` and ``comm``."""
        f = self.factors
        return calibrated_time(compute, comm, f.get("compute", 0.0), f.get("comm", 0.0),
                               f.get("overhead", 0.0))


def _nonnegative_relative_lstsq(design: np.ndarray, times: np.ndarray) -> np.ndarray:
    """min Σ((design·x − t)/t)² subject to x ≥ 0, for a few columns.

    Dividing each row by its time makes it ordinary least squares with target 1. The
    non-negative optimum is the free optimum of some subset of the columns (the others at
    zero), so with three columns or fewer we try every subset and keep the best feasible one.
    """
    a = design / times[:, None]
    b = np.ones_like(times)
    k = design.shape[1]
    best, best_err = np.zeros(k), float(np.sum(b ** 2))
    for size in range(1, k + 1):
        for cols in combinations(range(k), size):
            sub, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(sub < 0):
                continue
            trial = np.zeros(k)
            trial[list(cols)] = sub
            err = float(np.sum((a @ trial - b) ** 2))
            if err < best_err - 1e-15:
                best, best_err = trial, err
    return best


def fit_scale_factors(compute, comm, measured, terms: str = "compute,comm,overhead") -> CalibrationFit:
    """Fit the scale factors of a step-time model to measured steps (chapter 27).

    ``compute`` and ``comm`` are the model's nominal compute and communication seconds of
    each step, ``measured`` the measured seconds. ``terms`` names the terms to fit, comma
    separated, from "compute", "comm" and "overhead": "compute" alone is a model with one
    constant efficiency (a single MFU); the three together are the full calibration.
    Minimises Σ((t̂ − t)/t)² with every factor ≥ 0. Returns a :class:`CalibrationFit`.
    """
    wanted = [t.strip() for t in terms.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in TERMS]
    if unknown or not wanted or len(set(wanted)) != len(wanted):
        raise ValueError(f"terms must be distinct names from {', '.join(TERMS)}, "
                         f"comma separated; got {terms!r}")
    tc = np.asarray(compute, dtype=float).ravel()
    tm = np.asarray(comm, dtype=float).ravel()
    t = np.asarray(measured, dtype=float).ravel()
    if not (tc.size == tm.size == t.size):
        raise ValueError(f"compute, comm and measured must have the same length, got "
                         f"{tc.size}, {tm.size} and {t.size}")
    check.nonnegative("compute", tc)
    check.nonnegative("comm", tm)
    check.positive("measured", t)
    if t.size < len(wanted) + 1:
        raise ValueError(f"measured needs at least {len(wanted) + 1} steps to fit and judge "
                         f"{len(wanted)} factor(s), got {t.size}")
    column = {"compute": tc, "comm": tm, "overhead": np.ones_like(t)}
    x = _nonnegative_relative_lstsq(np.column_stack([column[w] for w in wanted]), t)
    factors = {w: float(v) for w, v in zip(wanted, x)}
    predicted = sum(factors[w] * column[w] for w in wanted)
    rel = relative_errors(np.where(predicted > 0, predicted, np.finfo(float).tiny), t)
    log_t = np.log(t)
    log_p = np.log(np.where(predicted > 0, predicted, np.finfo(float).tiny))
    ss_res = float(np.sum((log_t - log_p) ** 2))
    ss_tot = float(np.sum((log_t - log_t.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else -np.inf)
    return CalibrationFit(factors, predicted, rel, r2, float(np.sqrt(np.mean(rel ** 2))))


def calibrated_time(compute, comm, compute_factor, comm_factor, overhead=0.0):
    """t̂ = a·T_compute + b·T_comm + c, the calibrated step time (chapter 27)."""
    check.nonnegative("compute", compute)
    check.nonnegative("comm", comm)
    check.nonnegative("compute_factor", compute_factor)
    check.nonnegative("comm_factor", comm_factor)
    check.nonnegative("overhead", overhead)
    return compute_factor * compute + comm_factor * comm + overhead


def relative_errors(predicted, measured):
    """measured/predicted − 1, elementwise: +0.2 means the step took 20 % longer than
    predicted (chapter 27; the convention of ``comm.AlphaBetaFit.rel_residuals``)."""
    check.positive("predicted", predicted)
    check.nonnegative("measured", measured)
    if isinstance(predicted, (list, tuple)):
        predicted = np.asarray(predicted, dtype=float)
    if isinstance(measured, (list, tuple)):
        measured = np.asarray(measured, dtype=float)
    return measured / predicted - 1


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
