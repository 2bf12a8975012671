"""Failures and checkpoints: how often a big job fails, and how often it should checkpoint.

Chapter 26 derives everything here. Parts fail independently, each kind i with count nᵢ and
mean time between failures MTBFᵢ, so the job fails at λ = Σ nᵢ / MTBFᵢ and MTBF_sys = 1/λ.
Without checkpoints a job of T seconds of work expects (e^{λT} − 1)/λ of wall-clock time
(:func:`dtbook.cost.failure_multiplier_exact`, one formula in one place). Checkpointing every
I seconds at a cost of δ seconds costs, to first order, a factor 1 + δ/I + λI/2, smallest at
Young's interval I* = √(2δ·MTBF); Daly's higher-order interval refines it when δ is not small
against the MTBF. Times in seconds, rates per second, bytes and bytes per second.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _validate as check
from . import cost

__all__ = ["system_failure_rate", "system_mtbf", "expected_time_without_checkpoints",
           "overhead_factor", "young_interval", "daly_interval", "overhead_at_optimum",
           "sync_checkpoint_time", "async_checkpoint_time", "compressed_write_time"]


def _sqrt(x):
    return sp.sqrt(x) if isinstance(x, sp.Basic) else np.sqrt(x)


def system_failure_rate(part_mtbf, count=1):
    """Failures per second of a system of parts that fail independently: λ = Σ nᵢ / MTBFᵢ
    (chapter 26). ``part_mtbf`` and ``count`` are numbers or equal-length sequences; a
    sequence is summed over its kinds of part."""
    if isinstance(part_mtbf, (list, tuple)):
        counts = count if isinstance(count, (list, tuple)) else [count] * len(part_mtbf)
        if len(counts) != len(part_mtbf):
            raise ValueError(f"count has {len(counts)} entries, part_mtbf {len(part_mtbf)}")
        return sum(system_failure_rate(m, n) for m, n in zip(part_mtbf, counts))
    check.positive("part_mtbf", part_mtbf)
    check.nonnegative("count", count)
    return count / part_mtbf


def system_mtbf(part_mtbf, count=1):
    """Mean time between failures of the whole system, 1 / Σ nᵢ/MTBFᵢ (chapter 26)."""
    return 1 / system_failure_rate(part_mtbf, count)


def expected_time_without_checkpoints(work, failure_rate):
    """Expected wall-clock seconds to finish ``work`` seconds of work that restarts from zero
    at every failure: (e^{λT} − 1)/λ (chapter 26). The same renewal result as
    :func:`dtbook.cost.failure_multiplier_exact` with one segment, which computes it."""
    check.positive("work", work)
    return cost.failure_multiplier_exact(failure_rate, work) * work


def overhead_factor(interval, checkpoint_time, failure_rate):
    """First-order wall-clock factor of checkpointing every ``interval`` I seconds at
    ``checkpoint_time`` δ each, under failures at λ: 1 + δ/I + λI/2 (chapter 26). The second
    term is time spent writing, the third the half interval each failure loses."""
    check.positive("interval", interval)
    check.nonnegative("checkpoint_time", checkpoint_time)
    check.nonnegative("failure_rate", failure_rate)
    return 1 + checkpoint_time / interval + failure_rate * interval / 2


def young_interval(checkpoint_time, mtbf):
    """Young's optimal checkpoint interval √(2δ·MTBF), which minimises
    :func:`overhead_factor` (chapter 26)."""
    check.positive("checkpoint_time", checkpoint_time)
    check.positive("mtbf", mtbf)
    return _sqrt(2 * checkpoint_time * mtbf)


def daly_interval(checkpoint_time, mtbf):
    """Daly's higher-order optimum (2006, Future Generation Computer Systems 22, eq. 37),
    chapter 26: √(2δM)[1 + ⅓√(δ/2M) + (δ/2M)/9] − δ for δ < 2M, else M. It tends to Young's
    interval as δ/M → 0."""
    check.positive("checkpoint_time", checkpoint_time)
    check.positive("mtbf", mtbf)
    d, m = checkpoint_time, mtbf
    x = d / (2 * m)
    inner = _sqrt(2 * d * m) * (1 + _sqrt(x) / 3 + x / 9) - d
    if isinstance(x, sp.Basic) and x.free_symbols:
        return inner
    return np.where(d < 2 * m, inner, m) if np.ndim(x) else (inner if d < 2 * m else m)


def overhead_at_optimum(checkpoint_time, mtbf):
    """The first-order overhead (factor − 1) at Young's interval: √(2δ/MTBF), half of it
    writing checkpoints and half lost work (chapter 26)."""
    check.positive("checkpoint_time", checkpoint_time)
    check.positive("mtbf", mtbf)
    return _sqrt(2 * checkpoint_time / mtbf)


def sync_checkpoint_time(nbytes, copy_bandwidth, write_bandwidth):
    """Seconds training stops for a synchronous checkpoint: copy to host, then write,
    n/B_copy + n/B_write (chapter 26)."""
    check.nonnegative("nbytes", nbytes)
    check.positive("copy_bandwidth", copy_bandwidth)
    check.positive("write_bandwidth", write_bandwidth)
    return nbytes / copy_bandwidth + nbytes / write_bandwidth


def async_checkpoint_time(nbytes, copy_bandwidth):
    """Seconds training stops for an asynchronous checkpoint: only the copy to host,
    n/B_copy; the write overlaps the following steps (chapter 26)."""
    check.nonnegative("nbytes", nbytes)
    check.positive("copy_bandwidth", copy_bandwidth)
    return nbytes / copy_bandwidth


def compressed_write_time(nbytes, ratio, compress_bandwidth, write_bandwidth):
    """Seconds to write n bytes compressed by ``ratio`` R ≥ 1 at ``compress_bandwidth``,
    compression pipelined with the write: max(n/B_comp, n/(R·B_write)) (chapter 26). The
    disk limits it below B_write = B_comp/R, the compressor above; it beats the plain write
    n/B_write whenever B_write < B_comp."""
    check.nonnegative("nbytes", nbytes)
    check.positive("ratio", ratio)
    check.positive("compress_bandwidth", compress_bandwidth)
    check.positive("write_bandwidth", write_bandwidth)
    a, b = nbytes / compress_bandwidth, nbytes / (ratio * write_bandwidth)
    if isinstance(a, sp.Basic) or isinstance(b, sp.Basic):
        return sp.Max(a, b)
    return np.maximum(a, b)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
