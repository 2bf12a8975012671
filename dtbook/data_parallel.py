"""Data parallelism in closed form: what a step communicates, what it computes, and when the
one hides the other (chapter 14).

Each of P ranks holds a full replica of Ψ parameters, computes the gradient of its own shard
of the batch and all-reduces it. The ring all-reduce and its α-β cost come from
:mod:`dtbook.comm` (chapters 04 and 12); this module adds what chapter 14 derives from them:
bytes and time per step, compute time 6Ψb/F, their ratio R = 3bβ/(F·s) and the batch where
R = 1, strong and weak scaling efficiency, gradient accumulation, overlap of communication
with the backward pass, stragglers, stale updates, and the floating-point error of a
reduction order.

Here ``tokens`` is b, the tokens one rank processes per step (the 6Ψb FLOP count counts
tokens, not sequences), and ``grad_bytes`` is s, the bytes of one gradient element
(4 for fp32, 2 for bf16/fp16): keyword-only and without a default, since a run's gradient
width is a choice the caller states. Every function accepts Python numbers, NumPy arrays and
SymPy symbols alike; times are seconds, bandwidths bytes per second per direction.
"""

from __future__ import annotations

import sympy as sp
import numpy as np

from . import _validate as check
from . import comm, flops
from .memory import model_state_bytes
from .symbolic import is_symbolic, maximum

__all__ = [
    "gradient_bytes_sent", "gradient_buffer_bytes", "comm_time", "compute_time", "compute_comm_ratio", "breakeven_tokens",
    "strong_scaling_efficiency", "weak_scaling_efficiency", "accumulation_speedup",
    "overlapped_step_time", "overlap_fraction", "straggler_step_time",
    "staleness_mean_penalty", "reduction_error_bound", "order_difference_bound",
    "memory_per_device",
]


def gradient_bytes_sent(params, world, *, grad_bytes):
    """Bytes each rank sends per step in a ring all-reduce of its Ψ gradients of
    ``grad_bytes`` s each: 2(P − 1)/P · Ψ·s, which tends to 2Ψ·s (chapter 14; the ring's
    traffic is chapter 12's :func:`dtbook.comm.traffic`). Give Ψ/(tp·pp), or the buffer of
    :func:`gradient_buffer_bytes` over s, when the model is also split."""
    check.positive("params", params)
    check.count("world", world)
    check.positive("grad_bytes", grad_bytes)
    return comm.traffic("allreduce", params * grad_bytes, world).sent_bytes


def gradient_buffer_bytes(params, *, tp=1, pp=1, grad_bytes, replicated=0):
    """The gradient buffer one rank all-reduces across its data-parallel group (chapters 14
    and 25): grad_bytes·((Ψ − Ψ_rep)/(tp·pp) + Ψ_rep/pp), the gradients of the rank's share
    of the parameters, where ``replicated`` Ψ_rep counts the weights every TP rank keeps
    whole (LayerNorms, the bias after a row-parallel layer). With CP the same all-reduce
    runs over the dp·cp ranks. What a rank *sends* to reduce it is
    :func:`gradient_bytes_sent`."""
    check.nonnegative("params", params)
    check.count("tp", tp)
    check.count("pp", pp)
    check.positive("grad_bytes", grad_bytes)
    check.nonnegative("replicated", replicated)
    return grad_bytes * ((params - replicated) / (tp * pp) + replicated / pp)


def comm_time(params, world, alpha, beta, *, grad_bytes):
    """Time of the gradient all-reduce per step, ring algorithm:
    2(P − 1)α + 2(P − 1)/P · Ψ·s/β (chapter 14, from chapter 12's ring); its bandwidth
    term is :func:`gradient_bytes_sent` over β."""
    check.positive("params", params)
    check.count("world", world)
    check.positive("grad_bytes", grad_bytes)
    return comm.allreduce_time(params * grad_bytes, world, alpha, beta)


def compute_time(params, tokens, peak_flops):
    """Forward and backward time of one rank's step at peak: 6Ψb/F, with b the tokens the
    rank processes (chapter 14; the 6Ψ per token is chapter 01's)."""
    check.positive("params", params)
    check.positive("tokens", tokens)
    check.positive("peak_flops", peak_flops)
    return flops.training_flops(params, tokens) / peak_flops


def compute_comm_ratio(tokens, peak_flops, beta, *, grad_bytes):
    """R = T_comp/T_comm = 3bβ/(F·s), for large P and negligible α (chapter 14).

    Ψ cancels: the compute and the gradient both grow with the model, so only the tokens per
    rank, the link and the chip decide whether communication can hide behind compute.
    """
    check.positive("tokens", tokens)
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    check.positive("grad_bytes", grad_bytes)
    return 3 * tokens * beta / (peak_flops * grad_bytes)


def breakeven_tokens(peak_flops, beta, *, grad_bytes, ratio=1):
    """Tokens per rank and step at which R reaches ``ratio``: b = R·F·s/(3β) (chapter 14).
    For R = 1 this is where compute first takes as long as the all-reduce."""
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    check.positive("grad_bytes", grad_bytes)
    check.positive("ratio", ratio)
    return ratio * peak_flops * grad_bytes / (3 * beta)


def strong_scaling_efficiency(t_compute, t_comm, world, overlap: bool = False):
    """E = T₁/(P·T_P) for a fixed global batch whose compute takes ``t_compute`` on one rank
    (chapter 14). Without overlap T_P = T₁/P + T_comm; with perfect overlap
    T_P = max(T₁/P, T_comm), so E = 1 while compute-bound and T₁/(P·T_comm) (R/P in the
    per-rank ratio of the full step) once communication dominates."""
    check.positive("t_compute", t_compute)
    check.nonnegative("t_comm", t_comm)
    check.count("world", world)
    per_rank = t_compute / world
    t_p = maximum(per_rank, t_comm) if overlap else per_rank + t_comm
    return t_compute / (world * t_p)


def weak_scaling_efficiency(t_compute, t_comm):
    """E_weak = T_c/(T_c + T_r): each rank keeps its own batch, so compute per step stays
    T_c and the all-reduce T_r(P) is all that is added (chapter 14)."""
    check.positive("t_compute", t_compute)
    check.nonnegative("t_comm", t_comm)
    return t_compute / (t_compute + t_comm)


def accumulation_speedup(steps, t_compute, t_comm):
    """Speed-up of accumulating A micro-batches before one all-reduce, against an all-reduce
    after each: (A·T_c + A·T_r)/(A·T_c + T_r); 2A/(A + 1) when T_r = T_c (chapter 14)."""
    check.count("steps", steps)
    check.positive("t_compute", t_compute)
    check.nonnegative("t_comm", t_comm)
    return (steps * t_compute + steps * t_comm) / (steps * t_compute + t_comm)


def overlapped_step_time(t_backward, t_comm, layers):
    """Backward plus gradient all-reduce when each of L equal layers' gradients is
    all-reduced as soon as it is ready, one all-reduce at a time (chapter 14):
    T_b/L + (L − 1)/L · max(T_b, T_r) + T_r/L. The first layer's all-reduce cannot start
    before its gradient exists, and the last cannot start before the backward ends."""
    check.nonnegative("t_backward", t_backward)
    check.nonnegative("t_comm", t_comm)
    check.count("layers", layers)
    return t_backward / layers + (layers - 1) / layers * maximum(t_backward, t_comm) \
        + t_comm / layers


def overlap_fraction(t_backward, t_comm, layers):
    """Share of the all-reduce hidden behind the backward pass:
    (T_b + T_r − T_step)/T_r with T_step from :func:`overlapped_step_time` (chapter 14)."""
    check.positive("t_comm", t_comm)
    return (t_backward + t_comm - overlapped_step_time(t_backward, t_comm, layers)) / t_comm


def straggler_step_time(times, t_comm):
    """A synchronous step waits for the slowest rank: max_i T_i + T_AR (chapter 14).
    ``times`` holds each rank's compute time."""
    check.nonnegative("t_comm", t_comm)
    values = list(times) if isinstance(times, (list, tuple)) else [times]
    if not is_symbolic(*values):
        arr = np.asarray(times, dtype=float)
        check.nonnegative("times", arr)
        if arr.size == 0:
            raise ValueError("times must hold at least one rank's time")
        return float(arr.max()) + t_comm
    return maximum(*values) + t_comm


def staleness_mean_penalty(tau_max, decay):
    """Mean of the stale-gradient weight f(τ) = e^(−λτ) for τ uniform on 0, 1, ..., τ_max:
    (1 − e^(−λ(τ_max + 1))) / ((τ_max + 1)(1 − e^(−λ))) (chapter 14)."""
    check.count("tau_max", tau_max, minimum=0)
    check.positive("decay", decay)
    exp = sp.exp if is_symbolic(tau_max, decay) else np.exp
    return (1 - exp(-decay * (tau_max + 1))) / ((tau_max + 1) * (1 - exp(-decay)))


def reduction_error_bound(world, eps, abs_sum):
    """Bound on the rounding error of summing P numbers in any order, one rounding per
    addition: (P − 1)·ε·Σ|g_i|, to first order in ε (chapter 14). ``eps`` is the unit
    roundoff (2⁻¹¹ for fp16, 2⁻⁸ for bf16), ``abs_sum`` the sum of the addends' magnitudes:
    with cancellation Σ|g_i| can be far larger than |Σ g_i|."""
    check.count("world", world)
    check.positive("eps", eps)
    check.nonnegative("abs_sum", abs_sum)
    return (world - 1) * eps * abs_sum


def order_difference_bound(world, eps, abs_sum):
    """Two reduction orders (a ring's chain, a tree's pairs) can differ by at most the sum of
    their bounds: 2(P − 1)·ε·Σ|g_i| (chapter 14)."""
    return 2 * reduction_error_bound(world, eps, abs_sum)


def memory_per_device(params, bytes_per_param=model_state_bytes(1)):
    """Model-state bytes on each rank: Ψ·s_state, the same for every P, because every rank
    holds a whole replica of the parameters, gradients and optimizer state (chapter 14;
    16 bytes per parameter for mixed-precision Adam, chapter 19; ZeRO, chapter 20, removes
    the redundancy)."""
    check.positive("params", params)
    check.positive("bytes_per_param", bytes_per_param)
    return params * bytes_per_param


check.guard_module(globals(), arrays=True)  # every public formula checks its arguments (DESIGN.md)
