"""Tensor parallelism as arithmetic: what a Megatron layer communicates and computes (chapter 15).

Chapter 15 derives tensor parallelism from linearity, (X₁ + X₂)W = X₁W + X₂W: a column split
of W needs no communication in the forward pass, a row split needs one all-reduce of the
output. A transformer layer pairs them twice (attention, MLP), so it all-reduces its
activation of b·s·d elements twice forward and twice backward. This module prices that:

* :func:`activation_bytes`, the all-reduced buffer n = b·s·d·sizeof;
* :func:`allreduces_per_layer`, 2 forward + 2 backward (more when Q, K, V, or gate and up,
  are separate column-parallel modules, each adding a backward all-reduce);
* :func:`layer_comm_bytes` and :func:`layer_comm_time` (through :func:`dtbook.comm.allreduce_time`);
* :func:`layer_forward_flops`, 24bsd² + 4bs²d, consistent with 6Ψ for Ψ = 12d² per layer;
* :func:`compute_comm_ratio`, its bandwidth-bound limit R = dβ/(c·P·F)
  (:func:`ratio_coefficient` gives c) and the width :func:`width_for_unit_ratio` where R = 1;
* :func:`layernorm_stats_bytes`, the two statistics per token of a LayerNorm over a sharded
  hidden dimension;
* head divisibility: :func:`heads_per_rank`, :func:`padded_heads`, :func:`kv_heads_per_rank`.

Numbers, NumPy arrays and SymPy symbols alike; sizes in bytes, times in seconds.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _validate as check
from . import comm
from .symbolic import is_symbolic

__all__ = ["activation_bytes", "allreduces_per_layer", "layer_comm_bytes", "layer_comm_time",
           "layer_forward_flops", "layer_training_flops", "compute_comm_ratio",
           "ratio_coefficient", "ratio_bandwidth_limit", "width_for_unit_ratio",
           "layernorm_stats_bytes", "heads_per_rank", "padded_heads", "head_padding_waste",
           "kv_heads_per_rank", "layer_params_per_rank"]

# Forward FLOPs of one layer per token, in units of d²: Q, K, V and the output projection
# (4 matmuls of d × d, 2 FLOPs per multiply-add) and the MLP's d → 4d → d (2 matmuls of 4d²).
_FLOPS_PER_TOKEN_D2 = 2 * 4 + 2 * 2 * 4          # = 24
_ATTENTION_PER_TOKEN_SD = 2 + 2                  # QKᵀ and (softmax)V: 2sd each, per token


def activation_bytes(batch, seq, hidden, *, bytes_per_element=2):
    """The buffer a tensor-parallel all-reduce carries: n = b·s·d·sizeof (chapter 15).

    It is the output of a row-parallel layer (forward) or the input gradient of a
    column-parallel one (backward), whole on every rank: tensor parallelism does not shrink it.
    """
    for name, v in (("batch", batch), ("seq", seq), ("hidden", hidden)):
        check.positive(name, v)
    check.positive("bytes_per_element", bytes_per_element)
    return batch * seq * hidden * bytes_per_element


def allreduces_per_layer(backward=True, column_inputs=2):
    """All-reduces one Megatron layer runs: 2 forward (after attention's output projection and
    after the MLP's second linear), and with ``backward`` one per column-parallel input
    (chapter 15).

    The backward all-reduces are those of the f operator: the input gradient of a column
    split is a sum of per-rank partial gradients. Applied once before attention's Q, K, V
    (or to one fused QKV projection) and once before the MLP, that is ``column_inputs`` = 2.
    Three separate Q, K, V modules each doing their own f, as a per-module plan does, make
    it 4: 3 for attention, 1 for the MLP.
    """
    check.count("column_inputs", column_inputs)
    return 2 + (column_inputs if backward else 0)


def layer_comm_bytes(batch, seq, hidden, tp, *, bytes_per_element=2, backward=True):
    """Bytes one rank sends per layer: :func:`allreduces_per_layer` ring all-reduces of
    :func:`activation_bytes`, each sending 2(P − 1)/P of it (:func:`dtbook.comm.traffic`),
    count · 2(P − 1)/P · b·s·d·sizeof (chapter 15). Forward only: 4(P − 1)/P · bsd·sizeof,
    ≈ 8bsd bytes in fp16 for large P; Megatron sequence parallelism sends the same
    (chapter 17, :func:`dtbook.sequence_parallel.megatron_sp_bytes`)."""
    check.count("tp", tp)
    n = activation_bytes(batch, seq, hidden, bytes_per_element=bytes_per_element)
    return allreduces_per_layer(backward) * comm.traffic("allreduce", n, tp).sent_bytes


def layer_comm_time(batch, seq, hidden, tp, alpha, beta, *, bytes_per_element=2, backward=True):
    """Time of one layer's tensor-parallel all-reduces, each a ring all-reduce of
    :func:`activation_bytes` priced by :func:`dtbook.comm.allreduce_time` (chapter 15).
    Forward only: 2(2(P − 1)α + 2(P − 1)/P · bsd·sizeof/β)."""
    check.count("tp", tp)
    n = activation_bytes(batch, seq, hidden, bytes_per_element=bytes_per_element)
    return allreduces_per_layer(backward) * comm.allreduce_time(n, tp, alpha, beta)


def layer_forward_flops(batch, seq, hidden):
    """Forward FLOPs of one standard layer (4d MLP, full attention): 24bsd² + 4bs²d (chapter 15).

    24bsd² is 2 FLOPs per multiply-add times the 12d² weights of Q, K, V, output (4d²) and the
    MLP (8d²): 2Ψ per token, as in 6Ψ. 4bs²d is QKᵀ and the product with V (no weights).
    """
    for name, v in (("batch", batch), ("seq", seq), ("hidden", hidden)):
        check.positive(name, v)
    return (_FLOPS_PER_TOKEN_D2 * batch * seq * hidden**2
            + _ATTENTION_PER_TOKEN_SD * batch * seq**2 * hidden)


def layer_training_flops(batch, seq, hidden):
    """Forward plus backward FLOPs of one layer: 3 × :func:`layer_forward_flops` =
    72bsd² + 12bs²d, i.e. 6Ψ per token for Ψ = 12d² (chapter 15)."""
    return 3 * layer_forward_flops(batch, seq, hidden)


def compute_comm_ratio(batch, seq, hidden, tp, peak_flops, alpha, beta, *, bytes_per_element=2,
                       backward=True):
    """R = (per-rank compute time) / (all-reduce time) for one layer (chapter 15).

    Compute is :func:`layer_training_flops` (or the forward FLOPs when ``backward`` is
    False) split over P ranks at ``peak_flops``; communication is :func:`layer_comm_time`.
    R > 1: compute-bound, the all-reduces can hide behind the matmuls; R < 1: comm-bound.
    """
    check.count("tp", tp)
    check.positive("peak_flops", peak_flops)
    flops = layer_training_flops(batch, seq, hidden) if backward else \
        layer_forward_flops(batch, seq, hidden)
    t_compute = flops / (tp * peak_flops)
    return t_compute / layer_comm_time(batch, seq, hidden, tp, alpha, beta,
                                       bytes_per_element=bytes_per_element, backward=backward)


def ratio_coefficient(tp, *, bytes_per_element=2, backward=True):
    """The c of R = dβ/(c·P·F), the bandwidth-bound (α → 0), short-sequence (s ≪ d) limit of
    :func:`compute_comm_ratio` (chapter 15).

    c = (all-reduces per layer) · 2(P − 1)/P · sizeof / (FLOPs per token per d²). Training
    in fp16: 4 · 2(P − 1)/P · 2 / 72 → 2/9 for large P; forward only: 2 · 2 · 2 / 24 = 1/3.
    """
    check.count("tp", tp)
    check.positive("bytes_per_element", bytes_per_element)
    flops_d2 = _FLOPS_PER_TOKEN_D2 * (3 if backward else 1)
    sent = comm.traffic("allreduce", bytes_per_element, tp).sent_bytes   # 2(P − 1)/P · sizeof
    return allreduces_per_layer(backward) * sent / flops_d2


def ratio_bandwidth_limit(hidden, tp, peak_flops, beta, *, bytes_per_element=2, backward=True):
    """R = dβ/(c·P·F) with c from :func:`ratio_coefficient` (chapter 15): R grows with the
    width d and falls with the TP degree P."""
    check.positive("hidden", hidden)
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    c = ratio_coefficient(tp, bytes_per_element=bytes_per_element, backward=backward)
    return hidden * beta / (c * tp * peak_flops)


def width_for_unit_ratio(tp, peak_flops, beta, *, bytes_per_element=2, backward=True):
    """The hidden size d* = c·P·F/β at which R = 1 (chapter 15): narrower layers are
    communication-bound at this TP degree."""
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    return (ratio_coefficient(tp, bytes_per_element=bytes_per_element, backward=backward)
            * tp * peak_flops / beta)


def layernorm_stats_bytes(batch, seq, *, bytes_per_element=4):
    """The all-reduce of a LayerNorm over a hidden dimension sharded P ways: the two sums
    S = Σx and Q = Σx² for each of b·s tokens, 2·b·s·sizeof bytes (fp32: 8bs) (chapter 15)."""
    check.positive("batch", batch)
    check.positive("seq", seq)
    check.positive("bytes_per_element", bytes_per_element)
    return 2 * batch * seq * bytes_per_element


def heads_per_rank(heads, tp):
    """Attention heads on each rank, h/P (chapter 15). P must divide h: a head is the unit of
    the column split (its Q, K, V columns and its softmax stay on one rank)."""
    check.count("heads", heads)
    check.count("tp", tp)
    if not is_symbolic(heads, tp):
        h, p = np.asarray(heads), np.asarray(tp)
        if np.any(h % p != 0):
            raise ValueError(
                f"tp = {tp} does not divide heads = {heads}: {heads}/{tp} heads per rank. Use a "
                f"tp that divides {heads}, pad to {np.asarray(padded_heads(heads, tp)).astype(int).tolist()} heads, or fewer heads")
    return heads / tp


def padded_heads(heads, tp):
    """The head count padded to a multiple of P: h' = ⌈h/P⌉·P (chapter 15)."""
    check.count("heads", heads)
    check.count("tp", tp)
    if is_symbolic(heads, tp):
        return sp.ceiling(heads / tp) * tp
    return np.ceil(np.asarray(heads, dtype=float) / tp) * tp


def head_padding_waste(heads, tp):
    """The extra work of padding, (h' − h)/h, as a fraction of the real heads (chapter 15)."""
    return (padded_heads(heads, tp) - heads) / heads


def kv_heads_per_rank(kv_heads, tp):
    """Key/value heads each rank holds under grouped-query attention (chapter 15).

    With at least P KV heads, P must divide them and each rank holds kv_heads/P. With fewer
    (P = 16, 8 KV heads), each KV head is replicated P/kv_heads times and every rank holds
    one; then kv_heads must divide P.
    """
    check.count("kv_heads", kv_heads)
    check.count("tp", tp)
    if is_symbolic(kv_heads, tp):
        return kv_heads / tp
    kv, p = int(kv_heads), int(tp)
    if kv >= p:
        if kv % p:
            raise ValueError(f"tp = {tp} does not divide kv_heads = {kv_heads}")
        return kv // p
    if p % kv:
        raise ValueError(f"kv_heads = {kv_heads} does not divide tp = {tp}: the replicas of "
                         f"a KV head would be uneven")
    return 1

def layer_params_per_rank(hidden, tp):
    """Parameters one rank holds of a Megatron layer (chapter 15): the 12d² weights and the
    7d biases of the column-parallel Q, K, V and first MLP linear are split t ways; the
    row-parallel layers' two biases (added after the all-reduce) and the two LayerNorms'
    4d are replicated: 12d²/t + 7d/t + 6d. The full layer (t = 1) has 12d² + 13d."""
    check.positive("hidden", hidden)
    check.count("tp", tp)
    return 12 * hidden**2 / tp + 7 * hidden / tp + 6 * hidden


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
