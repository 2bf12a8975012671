"""The memory equation: how many bytes a model's training state takes, and how many devices hold it.

Chapter 01 derives the model-state part for mixed-precision Adam: every parameter carries a
16-bit copy of itself (2 bytes), a 16-bit gradient (2 bytes), an fp32 master copy (4 bytes)
and Adam's two fp32 moments m and v (8 bytes), so

    M = 2Ψ + 2Ψ + 12Ψ = 16Ψ bytes.

The byte counts are arguments, so the same function covers fp32 training (4 + 4 + 0 + 8),
SGD with momentum (optimizer_bytes=4), or an 8-bit optimizer. Later chapters (19, 20) add
ZeRO sharding and activation memory to this module.

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
