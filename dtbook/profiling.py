"""Profiling a distributed step, in closed form (chapter 32).

A profile answers where a step's time goes. Chapter 32 writes the answer as a budget,
T_step = T_fwd + T_bwd + T_comm + T_opt + T_other with the gradient all-reduce partly hidden
behind the backward pass, and reads three ratios off a measured step: the FLOP utilisation
(achieved over peak FLOP/s: model FLOP utilisation when the FLOPs are the model's, hardware
FLOP utilisation when recomputed forward passes are counted too), the link efficiency (the
bus bandwidth a collective reached over the link's β), and the spread of the ranks' times
(slowdown max/mean and the z-scores that name a straggler).

What is derived elsewhere is used from there, not repeated: 6Ψ FLOP per token and MFU from a
throughput are :mod:`dtbook.flops` (chapter 01); the overlap model and the overlap fraction
a measured step shows are :mod:`dtbook.overlap` (chapter 31), whose
:func:`~dtbook.overlap.overlap_achieved` is the chapter's *overlap efficiency*; the extra
compute of recomputation is :func:`dtbook.recompute.recompute_overhead` (chapter 21); bus
bandwidth is :func:`dtbook.comm.bus_bandwidth` (chapter 13); the α-β fit is
:func:`dtbook.comm.fit_alpha_beta` (chapter 04); a synchronous step's wait for its slowest
rank is :func:`dtbook.data_parallel.straggler_step_time` (chapter 14). The runnable half, a
profiled DDP job on gloo and the reading of its Chrome traces, is
:mod:`dtbook.parallel.profiling`.

Every function accepts Python numbers, NumPy arrays and, where it is algebra, SymPy symbols;
times are seconds, sizes bytes, bandwidths bytes per second, compute FLOP and FLOP/s.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _validate as check
from . import comm, overlap, recompute, units
from .symbolic import is_symbolic

__all__ = ["flop_utilization", "hardware_flops", "step_budget", "slowdown",
           "zscores", "max_zscore", "throughput_loss", "wasted_device_hours"]


def flop_utilization(flops_per_step, step_time, peak_flops, devices=1):
    """Achieved over peak FLOP/s: C_step / (T_step · P · F) (chapter 32).

    With C_step the model's FLOPs (6Ψ per token for a dense model, or what a FLOP counter
    reports for the model's own matmuls) this is the model FLOP utilisation, MFU; with the
    FLOPs the hardware executed, recomputation included (:func:`hardware_flops`), it is the
    hardware FLOP utilisation, HFU. ``devices`` is P, the devices the step ran on.
    """
    check.nonnegative("flops_per_step", flops_per_step)
    check.positive("step_time", step_time)
    check.positive("peak_flops", peak_flops)
    check.positive("devices", devices)
    return flops_per_step / (step_time * devices * peak_flops)


def hardware_flops(model_flops, recompute_fraction=1.0, backward_ratio=2):
    """FLOPs the hardware executes when a fraction c of the forward pass is recomputed in the
    backward: C·(1 + c/(1 + r)) with r = ``backward_ratio`` (chapter 32, from chapter 21's
    :func:`dtbook.recompute.recompute_overhead`). Full recomputation (c = 1, r = 2) makes
    HFU/MFU = 8/6 = 4/3: one more forward pass (2Ψ per token) on top of 6Ψ, not twice
    the work."""
    check.nonnegative("model_flops", model_flops)
    check.nonnegative("recompute_fraction", recompute_fraction)
    if not is_symbolic(recompute_fraction) and np.any(np.asarray(recompute_fraction, dtype=float) > 1):
        raise ValueError(f"recompute_fraction must lie in [0, 1]: at most the whole forward "
                         f"pass is recomputed, got {recompute_fraction!r}")
    return model_flops * (1 + recompute.recompute_overhead(recompute_fraction, backward_ratio))


def step_budget(t_forward, t_backward, t_comm, t_optimizer, t_other=0, overlap_fraction=0):
    """One training step as a budget: T_fwd + T_bwd + T_comm + T_opt + T_other, less the
    part of the gradient communication hidden behind the backward pass,
    a·min(T_bwd, T_comm) (chapter 32; the overlap model is chapter 31's
    :func:`dtbook.overlap.overlapped_time`). Gradients exist only during the backward, so the
    forward, the optimizer step and everything else stay exposed."""
    check.nonnegative("t_forward", t_forward)
    check.nonnegative("t_backward", t_backward)
    check.nonnegative("t_comm", t_comm)
    check.nonnegative("overlap_fraction", overlap_fraction)
    check.nonnegative("t_optimizer", t_optimizer)
    check.nonnegative("t_other", t_other)
    return (t_forward + overlap.overlapped_time(t_backward, t_comm, overlap_fraction)
            + t_optimizer + t_other)


def _times(name, times):
    arr = np.atleast_1d(np.asarray(check.positive(name, times), dtype=float))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be one time per rank (a flat list), got {times!r}")
    return arr


def slowdown(times):
    """max/mean of the ranks' times (chapter 32): 1 when every rank is equally fast; a
    synchronous step runs at the slowest rank's pace, so this is what the spread costs
    against ranks all at the mean."""
    arr = _times("times", times)
    return float(arr.max() / arr.mean())


def zscores(times):
    """Each rank's time as a z-score, (t_i − mean)/σ with σ the population standard deviation
    (chapter 32). All zeros when every rank took the same time. The largest a z-score can
    be among P values is √(P − 1) (:func:`max_zscore`)."""
    arr = _times("times", times)
    sd = arr.std()
    if sd == 0 or not np.isfinite(sd) or sd <= 1e-12 * arr.mean():
        return np.zeros_like(arr)
    return (arr - arr.mean()) / sd


def max_zscore(world):
    """The largest z-score any one of P values can have, √(P − 1) (Samuelson's inequality),
    and exactly the z-score of a single straggler among P − 1 equal ranks, however slow it is
    (chapter 32). A "z > 3" alarm cannot fire on fewer than 11 ranks."""
    check.count("world", world)
    return sp.sqrt(world - 1) if is_symbolic(world) else np.sqrt(np.asarray(world, dtype=float) - 1)


def throughput_loss(t_base, t_slow):
    """Share of throughput lost when a step slows from T to T′: 1 − T/T′ (chapter 32). One
    rank delayed by d on a synchronous step of T gives T′ = T + d and a loss d/(T + d)."""
    check.positive("t_base", t_base)
    check.positive("t_slow", t_slow)
    return 1 - t_base / t_slow


def wasted_device_hours(inefficiency, devices, duration=units.day):
    """Device-hours lost to running a share ``inefficiency`` below what is reachable, on
    ``devices`` devices for ``duration`` seconds: inefficiency · P · duration / 1 h
    (chapter 32). 10 % on 64 GPUs is 153.6 GPU-hours a day."""
    check.nonnegative("inefficiency", inefficiency)
    if not is_symbolic(inefficiency) and np.any(np.asarray(inefficiency, dtype=float) > 1):
        raise ValueError(f"inefficiency must lie in [0, 1], got {inefficiency!r}")
    check.positive("devices", devices)
    check.positive("duration", duration)
    return inefficiency * devices * duration / units.hour


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
