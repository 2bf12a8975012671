"""The memory equation: how many bytes a model's training state takes, and how many devices hold it.

Chapter 01 derives the model-state part for mixed-precision Adam: every parameter carries a
16-bit copy of itself (2 bytes), a 16-bit gradient (2 bytes), an fp32 master copy (4 bytes)
and Adam's two fp32 moments m and v (8 bytes), so

    M = 2Ψ + 2Ψ + 12Ψ = 16Ψ bytes.

The byte counts are arguments, so the same function covers fp32 training (4 + 4 + 0 + 8),
SGD with momentum (optimizer_bytes=4), or an 8-bit optimizer. Chapter 20's ZeRO sharding is
:func:`zero_state_bytes`; chapter 19 adds activation memory and buffers to this module.

All results are in bytes (SI base unit); convert at the edges with dtbook.units.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from . import _validate as check

#: Bytes per parameter of each part of the mixed-precision Adam state (chapter 01).
MIXED_PRECISION_ADAM = {"params": 2, "grads": 2, "master": 4, "optimizer": 8}


def model_state_breakdown(params, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Bytes of each part of the model state, as a dict (chapter 01).

    Keys: ``"params"`` (the working copy the forward pass reads), ``"grads"``, ``"master"``
    (the fp32 copy the optimizer updates; 0 when training in fp32 without one) and
    ``"optimizer"`` (Adam's m and v: 4 + 4 bytes in fp32). Defaults are mixed-precision Adam.
    """
    check.nonnegative("params", params)
    check.nonnegative("param_bytes", param_bytes)
    check.nonnegative("grad_bytes", grad_bytes)
    check.nonnegative("master_bytes", master_bytes)
    check.nonnegative("optimizer_bytes", optimizer_bytes)
    return {
        "params": param_bytes * params,
        "grads": grad_bytes * params,
        "master": master_bytes * params,
        "optimizer": optimizer_bytes * params,
    }


def model_state_bytes(params, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Total bytes of parameters, gradients, master weights and optimizer state (chapter 01).

    With the defaults (mixed-precision Adam) this is 16 bytes per parameter:
    ``model_state_bytes(13e9) == 208e9`` (208 GB, decimal). Activations are not included.
    """
    parts = model_state_breakdown(params, param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    return parts["params"] + parts["grads"] + parts["master"] + parts["optimizer"]


# What each ZeRO stage shards over the data-parallel group (chapter 20): stage 1 the
# optimizer states (fp32 master copy and moments), stage 2 also the gradients, stage 3 also
# the parameters. Stage 0 is plain data parallelism: every rank holds everything.
_ZERO_SHARDED = {0: (), 1: ("master", "optimizer"), 2: ("master", "optimizer", "grads"),
                 3: ("master", "optimizer", "grads", "params")}


def zero_state_breakdown(params, dp, stage, param_bytes=2, grad_bytes=2, master_bytes=4,
                         optimizer_bytes=8):
    """Bytes of each part of the model state on one device under ZeRO ``stage`` (0-3) over
    ``dp`` data-parallel ranks, as a dict with the keys of :func:`model_state_breakdown`
    (chapters 19, 20). A sharded part holds 1/dp of its bytes; the others are replicated.
    Shards are taken as even (real implementations pad or, like ``ZeroRedundancyOptimizer``,
    split by whole parameters, chapter 20 shows by how much)."""
    check.count("dp", dp)
    if stage not in _ZERO_SHARDED:
        raise ValueError(f"stage must be a ZeRO stage 0, 1, 2 or 3; got {stage!r}")
    parts = model_state_breakdown(params, param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    return {k: v / dp if k in _ZERO_SHARDED[stage] else v for k, v in parts.items()}


def zero_state_bytes(params, dp, stage, param_bytes=2, grad_bytes=2, master_bytes=4,
                     optimizer_bytes=8):
    """Model-state bytes per device under ZeRO ``stage`` over ``dp`` ranks (chapters 19, 20).

    With mixed-precision Adam (the defaults, K = 12 bytes of optimizer state per parameter):
    stage 0: 16Ψ; stage 1: 4Ψ + 12Ψ/dp; stage 2: 2Ψ + 14Ψ/dp; stage 3: 16Ψ/dp. Stage 0
    equals :func:`model_state_bytes`.
    """
    parts = zero_state_breakdown(params, dp, stage, param_bytes, grad_bytes, master_bytes,
                                 optimizer_bytes)
    return parts["params"] + parts["grads"] + parts["master"] + parts["optimizer"]


def min_devices(total_bytes, device_bytes):
    """The fewest devices of ``device_bytes`` each whose memory adds up to ``total_bytes``:
    ``ceil(total_bytes / device_bytes)`` (chapter 01).

    A lower bound: it assumes the state splits perfectly and leaves no room for activations,
    buffers or fragmentation. Returns an int for scalars, an array for arrays, and
    ``ceiling(...)`` for SymPy expressions.
    """
    check.nonnegative("total_bytes", total_bytes)
    check.positive("device_bytes", device_bytes)
    if isinstance(total_bytes, int) and isinstance(device_bytes, int):
        return -(-total_bytes // device_bytes)  # exact for integers of any size
    ratio = total_bytes / device_bytes
    if isinstance(ratio, sp.Basic):
        return sp.ceiling(ratio)
    if isinstance(ratio, np.ndarray):
        return np.ceil(ratio).astype(int)
    return int(math.ceil(ratio))


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
