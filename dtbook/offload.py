"""Offloading in closed form: what ZeRO-Offload keeps on the GPU and on the host, when a
transfer over PCIe hides behind compute, what buffering can and cannot buy, and when
compressing before a slow link pays (chapter 22).

Bytes per parameter come from :mod:`dtbook.memory` (chapter 01's widths: 2 bytes of bf16
parameters, 2 of gradients, 4 of fp32 master weights, 8 of Adam's moments). A link is the
α-β model of chapter 04 with ``bandwidth`` β in bytes/s per direction. Every function takes
Python numbers, NumPy arrays and SymPy symbols alike; times in seconds.
"""

from __future__ import annotations

import numpy as np

from . import _validate as check
from . import comm, memory, zero
from .symbolic import maximum

__all__ = ["transfer_time", "layer_transfer_time", "layer_compute_time", "overlap_tokens",
           "gpu_bytes", "host_bytes", "memory_reduction", "step_transfer_time",
           "optimizer_step_bytes", "cpu_step_time",
           "step_time",
           "efficiency", "compressed_time", "compression_breakeven", "buffered_time",
           "buffered_item_time"]


def transfer_time(nbytes, bandwidth, latency=0):
    """α + n/β: the time to move ``nbytes`` over a link or out of a memory tier
    (chapter 22; the α-β model is chapter 04's)."""
    check.nonnegative("nbytes", nbytes)
    check.positive("bandwidth", bandwidth)
    check.nonnegative("latency", latency)
    return comm.p2p_time(nbytes, latency, bandwidth)


def layer_transfer_time(hidden, bandwidth, param_bytes=2):
    """Time to bring one transformer layer's 12H² parameters over the link:
    12H²·s/β (chapter 22)."""
    check.positive("hidden", hidden)
    check.positive("bandwidth", bandwidth)
    check.positive("param_bytes", param_bytes)
    return 12 * hidden**2 * param_bytes / bandwidth


def layer_compute_time(hidden, batch, seq, peak_flops):
    """Forward time of one transformer layer at peak: 2 FLOP per parameter per token,
    24·B·S·H²/F (chapter 22; the count is chapter 01's, without attention scores)."""
    check.positive("hidden", hidden)
    check.positive("batch", batch)
    check.positive("seq", seq)
    check.positive("peak_flops", peak_flops)
    return 24 * batch * seq * hidden**2 / peak_flops


def overlap_tokens(peak_flops, bandwidth, param_bytes=2):
    """Tokens per micro-batch B·S above which a layer's parameter transfer hides behind the
    previous layer's forward: 12H²s/β ≤ 24BSH²/F gives B·S ≥ s·F/(2β), which is F/β for
    bf16 weights (chapter 22). H cancels: the condition is the same for every layer width."""
    check.positive("peak_flops", peak_flops)
    check.positive("bandwidth", bandwidth)
    check.positive("param_bytes", param_bytes)
    return param_bytes * peak_flops / (2 * bandwidth)


def gpu_bytes(params, peak=True, param_bytes=2, grad_bytes=2):
    """Model-state bytes ZeRO-Offload keeps on one GPU (chapter 22): the bf16 parameters
    (2Ψ) at all times and, at the peak of the backward pass, the bf16 gradients too (4Ψ).
    The master weights and moments live on the host (:func:`host_bytes`)."""
    check.positive("params", params)
    parts = memory.model_state_breakdown(params, param_bytes, grad_bytes)
    return parts["params"] + (parts["grads"] if peak else 0)


def host_bytes(params, dp=1, master_bytes=4, optimizer_bytes=8):
    """Bytes of optimizer state ZeRO-Offload keeps in host memory for one GPU: the fp32
    master weights and Adam's two moments, 12Ψ, sharded over ``dp`` data-parallel ranks as
    ZeRO-2 shards them (chapter 22)."""
    check.positive("params", params)
    check.count("dp", dp)
    parts = memory.zero_state_breakdown(params, dp, 2, master_bytes=master_bytes,
                                        optimizer_bytes=optimizer_bytes)
    return parts["master"] + parts["optimizer"]


def memory_reduction(peak=True, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """How many times less model state a GPU holds with ZeRO-Offload than without:
    16Ψ/4Ψ = 4 at the peak, 16Ψ/2Ψ = 8 at rest, for mixed-precision Adam (chapter 22)."""
    whole = memory.model_state_bytes(1, param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    return whole / gpu_bytes(1, peak, param_bytes, grad_bytes)


def step_transfer_time(params, bandwidth, param_bytes=2, grad_bytes=2):
    """PCIe time of one ZeRO-Offload step if nothing overlaps: the gradients go to the host
    (Ψ·s_g) and, after the CPU's optimizer step, the updated parameters come back (Ψ·s_p):
    Ψ(s_g + s_p)/β (chapter 22)."""
    check.positive("params", params)
    check.positive("bandwidth", bandwidth)
    return params * (param_bytes + grad_bytes) / bandwidth


def optimizer_step_bytes(*, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Bytes one mixed-precision Adam step moves per parameter it updates (chapter 22): it
    reads the gradient (s_g), reads and writes the fp32 master weight and the two moments
    (2(s_m + s_o)) and writes the low-precision copy the next forward reads (s_p),
    s_g + 2(s_m + s_o) + s_p: 28 bytes with bf16 gradients, 30 with the fp32 main gradients
    a GPU step reads (the planner's optimizer term, chapter 27). A step is memory-bound, so
    these bytes over a memory bandwidth are its time, on the host (:func:`cpu_step_time`)
    as on the GPU."""
    check.positive("param_bytes", param_bytes)
    check.positive("grad_bytes", grad_bytes)
    check.nonnegative("master_bytes", master_bytes)
    check.nonnegative("optimizer_bytes", optimizer_bytes)
    return grad_bytes + 2 * (master_bytes + optimizer_bytes) + param_bytes


def cpu_step_time(params, bandwidth, dp=1, param_bytes=2, grad_bytes=2, master_bytes=4,
                  optimizer_bytes=8):
    """Time of ZeRO-Offload's Adam step on the host for one GPU's share of the parameters,
    bounded by memory traffic (chapter 22): :func:`optimizer_step_bytes` for each of the
    Ψ/dp parameters whose state this GPU's host shard holds (sharded over ``dp`` as
    :func:`host_bytes` shards it; the gradient read is the one the GPU sent down, the copy
    written the one that goes back up), 28Ψ/dp bytes for mixed-precision Adam, at
    ``bandwidth``, the host memory bandwidth this GPU's optimizer gets (a node's DRAM
    bandwidth is shared by all its GPUs). A lower bound: the step's dozen or so FLOP per
    parameter hide behind the traffic only in a vectorised, multi-threaded implementation."""
    check.positive("params", params)
    check.positive("bandwidth", bandwidth)
    check.count("dp", dp)
    per_param = optimizer_step_bytes(param_bytes=param_bytes, grad_bytes=grad_bytes,
                                     master_bytes=master_bytes, optimizer_bytes=optimizer_bytes)
    return params / dp * per_param / bandwidth


def step_time(t_comp, t_xfer, t_sync=0, overlap=True):
    """T_step = max(T_comp, T_xfer) + T_sync when the transfers overlap the compute, and
    T_comp + T_xfer + T_sync when they do not (chapter 22)."""
    check.positive("t_comp", t_comp)
    check.nonnegative("t_xfer", t_xfer)
    check.nonnegative("t_sync", t_sync)
    return (maximum(t_comp, t_xfer) if overlap else t_comp + t_xfer) + t_sync


def efficiency(t_comp, t_xfer, t_sync=0, overlap=True):
    """η = T_comp/T_step: the share of a step the GPU spends computing (chapter 22)."""
    return t_comp / step_time(t_comp, t_xfer, t_sync, overlap)


def compressed_time(nbytes, bandwidth, ratio, compress_rate, pipelined=False):
    """Time to move ``nbytes`` compressed by ``ratio`` R at ``compress_rate`` C bytes/s
    over a link of ``bandwidth`` B (chapter 22): n/C + n/(R·B) when compression finishes
    before the transfer starts, max(n/C, n/(R·B)) when the two run in chunks side by side
    (``pipelined``). Decompression on the far side is taken as free (or overlapped)."""
    check.nonnegative("nbytes", nbytes)
    check.positive("bandwidth", bandwidth)
    check.positive("ratio", ratio)
    check.positive("compress_rate", compress_rate)
    t_c, t_x = nbytes / compress_rate, nbytes / (ratio * bandwidth)
    return maximum(t_c, t_x) if pipelined else t_c + t_x


def compression_breakeven(bandwidth, ratio, pipelined=False):
    """The compression rate C above which compressing pays (chapter 22): from
    n/C + n/(RB) < n/B, C > B/(1 − 1/R) = B·R/(R − 1); pipelined, C > B (for R > 1).
    For R ≤ 1 compression never pays: the result is infinite (``oo`` for symbols)."""
    check.positive("bandwidth", bandwidth)
    check.positive("ratio", ratio)
    if pipelined:
        return bandwidth
    if not isinstance(ratio, np.ndarray) and not hasattr(ratio, "free_symbols") and ratio <= 1:
        return float("inf")
    if isinstance(ratio, np.ndarray):
        with np.errstate(divide="ignore"):
            return np.where(ratio > 1, bandwidth * ratio / np.where(ratio > 1, ratio - 1, 1),
                            np.inf)
    return bandwidth * ratio / (ratio - 1)


def buffered_time(items, t_compute, t_transfer, buffers):
    """Time to stream ``items`` equal items through ``buffers`` buffers over one link
    (chapter 22): each item is transferred (T_t), then computed on (T_c); a transfer needs
    a free buffer, and the link carries one transfer at a time. One buffer serialises,
    N(T_t + T_c); any k ≥ 2 gives T_t + T_c + (N − 1)·max(T_t, T_c): the link or the
    compute sets the pace, and a third buffer adds nothing. It is chapter 20's prefetch
    on a serial link with lookahead k − 1 (:func:`dtbook.zero.prefetch_step_time`)."""
    check.count("items", items)
    check.positive("t_compute", t_compute)
    check.positive("t_transfer", t_transfer)
    check.count("buffers", buffers)
    return zero.prefetch_step_time(items, t_compute, t_transfer, buffers - 1, link="serial")


def buffered_item_time(t_compute, t_transfer, buffers):
    """Steady-state time per item with ``buffers`` buffers on one link (chapter 22):
    T_c + T_t for one buffer, max(T_c, T_t) for any k ≥ 2. No depth of buffering beats
    the link's rate."""
    check.positive("t_compute", t_compute)
    check.positive("t_transfer", t_transfer)
    check.count("buffers", buffers)
    if isinstance(buffers, (int, np.integer)) and buffers == 1:
        return t_compute + t_transfer
    return maximum(t_compute, t_transfer)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
