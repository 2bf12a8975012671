"""Overlapping communication with computation, in closed form (chapter 31).

Two activities of T_c (compute) and T_m (communication) seconds cost T_c + T_m one after
the other and max(T_c, T_m) at best when they run at once. Chapter 31 describes where a real
step lands between the two by the *overlap fraction* a, the share of the shorter activity
that runs hidden: T = T_c + T_m − a·min(T_c, T_m). It then prices the gradient buckets that
make overlap possible: each bucket all-reduce pays a latency α besides its bytes, so G bytes
in buckets of B cost G·α/B + G/β, and a bucket spends B/(αβ + B) of its time moving bytes.

What is derived elsewhere is used from there, not repeated: the pipelined-bucket step time
is :func:`dtbook.data_parallel.overlapped_step_time` (chapter 14), the prefetch depth
k = ⌈T_g/T_c⌉ is :func:`dtbook.zero.prefetch_lookahead` (chapter 20), the per-call latency
saved by one bucket instead of k messages is :func:`dtbook.comm.bucket_saving` (chapter 04).

Every function accepts Python numbers, NumPy arrays and SymPy symbols alike; times are
seconds, sizes bytes, bandwidths bytes per second.
"""

from __future__ import annotations

import numpy as np

from . import _validate as check
from .symbolic import is_symbolic, maximum, minimum

__all__ = ["overlapped_time", "overlap_speedup", "perfect_overlap_speedup", "overlap_achieved",
           "bucketed_comm_time", "bucket_efficiency", "bucket_for_efficiency",
           "prefetch_buffer_bytes"]


def overlapped_time(t_compute, t_comm, overlap):
    """Step time when a fraction ``overlap`` (a) of the shorter activity runs hidden behind
    the longer: T = T_c + T_m − a·min(T_c, T_m) (chapter 31). a = 0 is serial, a = 1 gives
    the floor max(T_c, T_m)."""
    check.nonnegative("t_compute", t_compute)
    check.nonnegative("t_comm", t_comm)
    check.nonnegative("overlap", overlap)
    if not is_symbolic(overlap) and np.any(np.asarray(overlap, dtype=float) > 1):
        raise ValueError(f"overlap must lie in [0, 1]: no more than all of the shorter "
                         f"activity can hide, got {overlap!r}")
    return t_compute + t_comm - overlap * minimum(t_compute, t_comm)


def overlap_speedup(t_compute, t_comm, overlap):
    """Serial time over overlapped time: (T_c + T_m)/(T_c + T_m − a·min(T_c, T_m))
    (chapter 31)."""
    check.positive("t_compute", t_compute)
    check.positive("t_comm", t_comm)
    return (t_compute + t_comm) / overlapped_time(t_compute, t_comm, overlap)


def perfect_overlap_speedup(t_compute, t_comm):
    """The ceiling of :func:`overlap_speedup`, at a = 1: (T_c + T_m)/max(T_c, T_m), at most 2,
    reached when T_c = T_m (chapter 31)."""
    check.positive("t_compute", t_compute)
    check.positive("t_comm", t_comm)
    return (t_compute + t_comm) / maximum(t_compute, t_comm)


def overlap_achieved(t_compute, t_comm, t_total, of: str = "min"):
    """The overlap fraction a measured step shows: the time saved, (T_c + T_m) − T_total,
    as a share of min(T_c, T_m) (``of="min"``, the a of :func:`overlapped_time`) or of T_m
    (``of="comm"``, the share of communication hidden) (chapter 31)."""
    check.positive("t_compute", t_compute)
    check.positive("t_comm", t_comm)
    check.positive("t_total", t_total)
    if of not in ("min", "comm"):
        raise ValueError(f"of must be 'min' or 'comm', got {of!r}")
    base = minimum(t_compute, t_comm) if of == "min" else t_comm
    return (t_compute + t_comm - t_total) / base


def bucketed_comm_time(nbytes, bucket, alpha, beta):
    """G bytes of gradient sent in buckets of B bytes, each call costing α + B/β:
    G·α/B + G/β (chapter 31). Fewer, larger buckets pay less latency but start later."""
    check.positive("nbytes", nbytes)
    check.positive("bucket", bucket)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    return nbytes * alpha / bucket + nbytes / beta


def bucket_efficiency(bucket, alpha, beta):
    """Share of one bucket's call spent moving bytes: (B/β)/(α + B/β) = B/(αβ + B)
    (chapter 31)."""
    check.positive("bucket", bucket)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    return bucket / (alpha * beta + bucket)


def bucket_for_efficiency(efficiency, alpha, beta):
    """The smallest bucket reaching a target efficiency e: B = e/(1 − e)·αβ; 9αβ for 90 %
    (chapter 31)."""
    check.fraction("efficiency", efficiency)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    if not is_symbolic(efficiency) and efficiency >= 1:
        raise ValueError(f"efficiency must be below 1 (no bucket hides all latency), got {efficiency!r}")
    return efficiency / (1 - efficiency) * alpha * beta


def prefetch_buffer_bytes(lookahead, model_bytes, layers):
    """Memory held by k layers gathered ahead of use, for L equal layers of a model of
    ``model_bytes``: k·(model bytes)/L (chapter 31; k from chapter 20's
    :func:`dtbook.zero.prefetch_lookahead`)."""
    check.count("lookahead", lookahead, minimum=0)
    check.positive("model_bytes", model_bytes)
    check.count("layers", layers)
    return lookahead * model_bytes / layers


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
