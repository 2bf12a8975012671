"""Asynchrony and local SGD in closed form: stragglers, staleness, and how often to sync
(chapter 29).

A synchronous step waits for the slowest of P ranks (:func:`dtbook.data_parallel.
straggler_step_time`); for i.i.d. exponential compute times the expected maximum is the
harmonic number H_P times the mean (:func:`expected_max_exponential`). Asynchronous SGD
removes the wait and pays in staleness: a worker's gradient is applied τ updates after the
weights it was computed on were read (:func:`staleness_mean`, P − 1 at equal speeds), and a
common correction shrinks its step to η/(1 + cτ) (:func:`stale_lr`). Local SGD and DiLoCo
keep the synchronisation but do it every H steps: the bytes per step fall by H
(:func:`sync_bytes_per_step`, :func:`sync_sent_bytes_per_step`), and the sync-interval cost
model C(H) = T_c + T_comm/H + κH has its optimum at H* = √(T_comm/κ)
(:func:`sync_interval_cost`, :func:`optimal_interval`).

Every function accepts Python numbers, NumPy arrays and SymPy symbols alike; times are
seconds.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _validate as check
from . import data_parallel
from .symbolic import is_symbolic

__all__ = ["harmonic_number", "expected_max_exponential", "staleness_mean",
           "first_round_staleness_mean", "stale_lr", "sync_interval_cost",
           "optimal_interval", "sync_bytes_per_step", "sync_sent_bytes_per_step"]


def harmonic_number(world):
    """H_P = 1 + 1/2 + ... + 1/P, about ln P + 0.5772 (chapter 29)."""
    check.count("world", world)
    if is_symbolic(world):
        return sp.harmonic(world)
    if isinstance(world, sp.Basic):
        return sp.harmonic(int(world))
    arr = np.asarray(world, dtype=float)
    top = int(arr.max())
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, top + 1))])
    out = table[arr.astype(int)]
    return float(out) if out.ndim == 0 else out


def expected_max_exponential(world, mean_time):
    """E[max of P i.i.d. exponential times of mean μ] = H_P·μ: the compute part of a
    synchronous step when every rank's time is exponential (chapter 29)."""
    check.count("world", world)
    check.positive("mean_time", mean_time)
    return harmonic_number(world) * mean_time


def staleness_mean(world):
    """Mean staleness of asynchronous SGD in steady state, P workers that each read the
    weights right after pushing their gradient: P − 1 (chapter 29).

    Each worker always has one gradient in flight, so every push lands inside the in-flight
    interval of each of the P − 1 other workers and adds one to their staleness: the total
    over N pushes is (P − 1)·N, whatever the speeds."""
    check.count("world", world)
    return world - 1


def first_round_staleness_mean(world):
    """Mean staleness of the first round only, when all P workers start from the same
    weights: the pushes are stale by 0, 1, ..., P − 1, mean (P − 1)/2 (chapter 29)."""
    check.count("world", world)
    return (world - 1) / sp.Integer(2) if is_symbolic(world) else (world - 1) / 2


def stale_lr(lr, staleness, c=1):
    """The staleness-corrected learning rate η/(1 + cτ) (chapter 29)."""
    check.positive("lr", lr)
    check.nonnegative("staleness", staleness)
    check.nonnegative("c", c)
    return lr / (1 + c * staleness)


def sync_interval_cost(interval, t_compute, t_comm, drift):
    """Time per step of local SGD that syncs every H steps, with the convergence lost to
    drift charged as time: C(H) = T_c + T_comm/H + κH (chapter 29).

    ``drift`` is κ, seconds of extra training per step per unit of H: the price of replicas
    drifting apart for H steps (κ = λγ in the penalty-times-divergence form)."""
    check.positive("interval", interval)
    check.nonnegative("t_compute", t_compute)
    check.nonnegative("t_comm", t_comm)
    check.nonnegative("drift", drift)
    return t_compute + t_comm / interval + drift * interval


def optimal_interval(t_comm, drift):
    """The H that minimises :func:`sync_interval_cost`: H* = √(T_comm/κ) (chapter 29)."""
    check.nonnegative("t_comm", t_comm)
    check.positive("drift", drift)
    ratio = t_comm / drift
    return sp.sqrt(ratio) if isinstance(ratio, sp.Basic) else np.sqrt(ratio)


def sync_bytes_per_step(params, interval, grad_bytes=4):
    """Bytes all-reduced per step (the all-reduce's n) by local SGD or DiLoCo syncing every
    H steps: Ψ·s/H. H = 1 is data parallelism; DiLoCo's pseudo-gradient has the
    parameters' size, so it sends the same (chapter 29)."""
    check.positive("params", params)
    check.positive("interval", interval)
    check.positive("grad_bytes", grad_bytes)
    return params * grad_bytes / interval


def sync_sent_bytes_per_step(params, world, interval, grad_bytes=4):
    """Bytes each rank sends per step over a ring: 2(P − 1)/P · Ψ·s/H, chapter 14's
    :func:`dtbook.data_parallel.gradient_bytes_sent` once every H steps (chapter 29)."""
    check.positive("interval", interval)
    return data_parallel.gradient_bytes_sent(params, world, grad_bytes=grad_bytes) / interval


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
