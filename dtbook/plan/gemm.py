"""Matmul time by per-GPU shape: the planner's compute model (chapter 27).

One matmul C[M, N] = A[M, K] B[K, N] of ``M N K`` multiply-adds takes the longest of

* its FLOPs at the accelerator's *measured* matmul ceiling (:func:`dtbook.hardware.
  matmul_ceiling`: the best large BF16, or FP8, matmul anyone measured, not the datasheet
  peak),
  stretched by **wave quantization**: the output is cut into 128 x 128 tiles, one per SM at a
  time, and a last partial wave of tiles costs a whole wave;
* its bytes (read A and B, write C once) at the measured HBM bandwidth
  (:func:`dtbook.hardware.memory_ceiling`): small or skinny matmuls are memory-bound.

The data is two measurements per accelerator (the matmul ceiling, the HBM bandwidth) and its
SM count; the shape dependence comes from the two mechanisms, not from a fitted curve.
Everything is NumPy-vectorised over candidate arrays.
"""

from __future__ import annotations

import numpy as np

from .. import _validate as check
from .. import hardware

__all__ = ["matmul_time", "TILE"]

TILE = 128  # output tile edge of a Hopper/Ampere BF16 cuBLAS kernel (128 x 128 or larger)


def matmul_time(m, n, k, gpu="h100-sxm", count=1, value_bytes=2, dtype="bf16"):
    """Seconds for ``count`` independent (batched) matmuls of shape M x K times K x N on one
    ``gpu`` (chapter 27), at the measured ceiling of ``dtype`` (``"fp8"``: FP8 inputs, one
    byte per value; anything else: the BF16 ceiling). Arrays broadcast. ``m``, ``n``, ``k``,
    ``count`` and ``value_bytes`` must be finite and > 0 (``ValueError`` naming the one that
    is not); the planner's own vectorised calls skip the checks (``_matmul_time``)."""
    for name, value in (("m", m), ("n", n), ("k", k), ("count", count),
                        ("value_bytes", value_bytes)):
        check.positive(name, value)
    return _matmul_time(m, n, k, gpu, count, value_bytes, dtype)


def _matmul_time(m, n, k, gpu="h100-sxm", count=1, value_bytes=2, dtype="bf16"):
    """:func:`matmul_time` without the argument checks: the planner calls it on arrays of
    candidates it has already checked, many times per search."""
    ceiling = hardware.matmul_ceiling(gpu, "fp8" if dtype == "fp8" else "bf16")
    if dtype == "fp8":
        value_bytes = 1
    m, n, k, count = (np.asarray(x, dtype=float) for x in (m, n, k, count))
    tiles = count * np.ceil(m / TILE) * np.ceil(n / TILE)
    waves = np.ceil(tiles / ceiling.sms)
    full = tiles / ceiling.sms  # waves' worth of work if the last wave were full
    quantization = np.where(tiles > 0, waves / np.maximum(full, 1e-300), 1.0)
    flops = 2 * m * n * k * count
    t_compute = flops / ceiling.flops * np.maximum(quantization, 1.0)
    t_memory = value_bytes * count * (m * k + k * n + m * n) / hardware.memory_ceiling(gpu).triad
    return np.maximum(t_compute, t_memory)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
