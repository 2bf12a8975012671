"""ZeRO in closed form: what each stage keeps per device, what it sends per step, when
ZeRO-3's gathers hide behind compute, and how far ahead to prefetch them (chapter 20).

Bytes per device come from :func:`dtbook.memory.zero_state_bytes` (chapter 19's model-state
count, sharded); this module adds their limits and reductions. Traffic comes from the ring
collectives of :mod:`dtbook.comm` (chapter 12): stages 1 and 2 make DP's all-reduce explicit
as a reduce-scatter of gradients and an all-gather of updated parameters, so they send what
DP sends; stage 3 gathers the parameters twice (forward and backward), 1.5 times as much.

``params`` is Ψ, ``world`` P, ``stage`` the ZeRO stage 0-3, ``param_bytes`` and
``grad_bytes`` the widths of what is gathered and reduced (2 for bf16). Every function takes
Python numbers, NumPy arrays and SymPy symbols alike; times in seconds, bandwidths in bytes
per second per direction.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from . import _validate as check
from . import comm, memory
from .data_parallel import compute_time, gradient_bytes_sent
from .symbolic import maximum

__all__ = ["memory_limit", "memory_reduction", "step_comm_bytes", "zero3_comm_time",
           "zero3_overhead", "batch_for_overhead", "breakeven_batch", "prefetch_lookahead",
           "prefetch_step_time"]


def _stage(stage):
    check.scalar("stage", stage)  # one stage per call: an array of them is not a choice
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be a ZeRO stage 0, 1, 2 or 3; got {stage!r}")
    return int(stage)


def _ceil(x):
    if isinstance(x, sp.Basic):
        return sp.ceiling(x)
    if isinstance(x, np.ndarray):
        return np.ceil(x).astype(int)
    return int(math.ceil(x))


def _floor(x):
    if isinstance(x, sp.Basic):
        return sp.floor(x)
    return np.floor(x)


def memory_limit(params, stage, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Model-state bytes per device as P → ∞ under ZeRO ``stage`` (chapter 20): what stays
    replicated. With the default widths: 16Ψ, 4Ψ, 2Ψ, 0 for stages 0-3."""
    _stage(stage)
    widths = (param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    one = memory.zero_state_bytes(params, 1, stage, *widths)
    two = memory.zero_state_bytes(params, 2, stage, *widths)
    return 2 * two - one  # bytes = R + S/P is affine in 1/P, so R = 2·b(2) − b(1)


def memory_reduction(world, stage, param_bytes=2, grad_bytes=2, master_bytes=4,
                     optimizer_bytes=8):
    """ρ = (bytes per device without ZeRO)/(bytes per device under ``stage``), which does
    not depend on Ψ (chapter 20). Defaults: ρ₁ = 4P/(P + 3) → 4, ρ₂ = 8P/(P + 7) → 8,
    ρ₃ = P."""
    _stage(stage)
    check.count("world", world)
    widths = (param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    return memory.zero_state_bytes(1, world, 0, *widths) / memory.zero_state_bytes(
        1, world, stage, *widths)


def step_comm_bytes(params, world, stage, param_bytes=2, grad_bytes=2, naive=False):
    """Bytes each rank sends per step under ZeRO ``stage`` with ring collectives
    (chapter 20; the rings are chapter 12's).

    - stage 0 (DP): all-reduce of the gradients, 2(P − 1)/P · Ψ·s_g
      (:func:`dtbook.data_parallel.gradient_bytes_sent`);
    - stages 1 and 2: reduce-scatter of the gradients, step on the shard, all-gather of the
      parameters: (P − 1)/P · Ψ·(s_g + s_p), the same as DP when s_g = s_p;
    - stage 1 with ``naive=True``: a full all-reduce, then the all-gather, 1.5 × DP;
    - stage 3: all-gather in the forward, again in the backward, reduce-scatter of the
      gradients: (P − 1)/P · Ψ·(2s_p + s_g), 1.5 × DP.
    """
    stage = _stage(stage)
    check.positive("params", params)
    check.count("world", world)
    check.positive("param_bytes", param_bytes)
    check.positive("grad_bytes", grad_bytes)
    if naive and stage != 1:
        raise ValueError("naive applies to stage 1 only (all-reduce, then all-gather)")

    def sent(collective, nbytes):
        return comm.traffic(collective, params * nbytes, world).sent_bytes

    if stage == 0:
        return gradient_bytes_sent(params, world, grad_bytes=grad_bytes)
    if naive:
        return sent("allreduce", grad_bytes) + sent("allgather", param_bytes)
    gathers = 2 if stage == 3 else 1
    return gathers * sent("allgather", param_bytes) + sent("reduce_scatter", grad_bytes)


def zero3_comm_time(params, layers, world, alpha, beta, param_bytes=2):
    """Time of ZeRO-3's collectives per step, not overlapped (chapter 20): per layer of
    Ψ/L parameters two ring all-gathers and one ring reduce-scatter,
    L·3[(P − 1)α + (P − 1)/P · Ψ·s/(Lβ)] → 3L(P − 1)α + 3Ψs/β for large P."""
    check.positive("params", params)
    check.count("layers", layers)
    check.count("world", world)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    check.positive("param_bytes", param_bytes)
    n = params * param_bytes / layers
    return layers * (2 * comm.allgather_time(n, world, alpha, beta)
                     + comm.reduce_scatter_time(n, world, alpha, beta))


def zero3_overhead(params, layers, world, batch, seq, alpha, beta, peak_flops, param_bytes=2):
    """T_comm/T_comp of ZeRO-3 for ``batch`` sequences of ``seq`` tokens per rank
    (chapter 20); T_comp = 6Ψ·B·S/F is chapter 14's compute time. For large P and α → 0
    it is s·F/(2β·B·S): Ψ cancels."""
    check.positive("batch", batch)
    check.positive("seq", seq)
    check.positive("peak_flops", peak_flops)
    return (zero3_comm_time(params, layers, world, alpha, beta, param_bytes)
            / compute_time(params, batch * seq, peak_flops))


def batch_for_overhead(params, layers, world, seq, alpha, beta, peak_flops, overhead=0.05,
                       param_bytes=2):
    """Sequences per rank at which ZeRO-3's communication is ``overhead`` of the compute:
    B = T_comm·F/(overhead · 6Ψ·S) (chapter 20). Round up for a batch size."""
    check.positive("overhead", overhead)
    return zero3_overhead(params, layers, world, 1, seq, alpha, beta, peak_flops,
                          param_bytes) / overhead


def breakeven_batch(seq, peak_flops, beta, overhead=0.05, param_bytes=2):
    """The bandwidth term of :func:`batch_for_overhead` for large P: B = s·F/(2β·S·overhead),
    the same for every model size (chapter 20)."""
    check.positive("seq", seq)
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    check.positive("overhead", overhead)
    check.positive("param_bytes", param_bytes)
    return param_bytes * peak_flops / (2 * beta * seq * overhead)


def prefetch_lookahead(t_gather, t_compute):
    """k* = ⌈T_g/T_c⌉: how many layers ahead a gather of time T_g must be issued to be done
    when its layer starts, if gathers in flight do not slow each other (chapter 20)."""
    check.positive("t_gather", t_gather)
    check.positive("t_compute", t_compute)
    return _ceil(t_gather / t_compute)


def prefetch_step_time(layers, t_compute, t_gather, lookahead, link="concurrent"):
    """Forward time of ``layers`` equal layers whose parameters are gathered ``lookahead``
    layers ahead (chapter 20). Layer j's gather is issued when layer j − k starts (layers
    0..k−1 at time 0); a layer starts when the previous one ends and its gather is done.

    ``link="concurrent"``: gathers in flight do not slow each other (each takes T_g, as when
    latency dominates). Layer j starts at T_g + max(j·T_c, ⌊j/k⌋T_g + (j mod k)T_c), so
    for k·T_c ≥ T_g the total is T_g + L·T_c: every gather but the first hides.
    ``link="serial"``: one gather at a time at full bandwidth; for k ≥ 1 the total is
    T_g + T_c + (L − 1)·max(T_g, T_c), whatever k: no lookahead beats the link's rate.
    ``lookahead=0`` gathers each layer when it is needed: L(T_g + T_c).
    """
    check.count("layers", layers)
    check.positive("t_compute", t_compute)
    check.positive("t_gather", t_gather)
    check.count("lookahead", lookahead, minimum=0)
    if link not in ("concurrent", "serial"):
        raise ValueError(f"link must be 'concurrent' or 'serial', got {link!r}")
    if isinstance(lookahead, (int, np.integer)) and lookahead == 0:
        return layers * (t_gather + t_compute)
    if link == "serial":
        return t_gather + t_compute + (layers - 1) * maximum(t_gather, t_compute)
    j = layers - 1
    blocks = _floor(j / lookahead)
    paced = blocks * t_gather + (j - blocks * lookahead) * t_compute  # ⌊j/k⌋T_g + (j mod k)T_c
    return t_gather + maximum(j * t_compute, paced) + t_compute


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
