"""Gradient compression: how much a compressor saves, how much error it adds, and when it
pays (chapter 28).

* Error: QSGD's variance bound, Top-K's and Random-K's δ², the best rank-r error of a
  matrix (Eckart–Young), all relative to ‖g‖² (or ‖G‖_F).
* Size: a sparse message costs its values *and* its indices; a rank-r factorisation of an
  m×n matrix costs r(m + n) numbers.
* Time: the α-β all-reduce of chapter 12 (``dtbook.comm``) with and without compression,
  charged the compressor's own time; the link bandwidth below which compression pays.

Every function takes numbers, NumPy arrays or SymPy symbols (except
:func:`eckart_young_error`, which takes the singular values themselves).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _validate as check
from . import comm
from .symbolic import is_symbolic, minimum

__all__ = ["qsgd_variance_bound", "qsgd_delta2", "topk_delta2", "randk_variance",
           "sparse_message_bytes", "sparse_factor", "sparse_allgather_bytes",
           "lowrank_fraction", "lowrank_rank", "eckart_young_error",
           "compressed_allreduce_time", "compression_saving", "breakeven_beta"]


def _sqrt(x):
    return sp.sqrt(x) if is_symbolic(x) else np.sqrt(x)


# ---------------------------------------------------------------------------- error

def qsgd_variance_bound(d, s):
    """E‖Q_s(g) − g‖² / ‖g‖² ≤ min(d/(4s²), √d/s) for QSGD with s levels on d entries
    (chapter 28): each ξ_i has variance p(1 − p)/s² ≤ min(1/4, p)/s², and Σ p_i ≤ s√d."""
    check.positive("d", d)
    check.positive("s", s)
    return minimum(d / (4 * s**2), _sqrt(d) / s)


def qsgd_delta2(d, s):
    """The variance bound as Alistarh et al. (2017) state it, min(d/s², √d/s)
    (chapter 28); looser than :func:`qsgd_variance_bound` by 4 in its first term."""
    check.positive("d", d)
    check.positive("s", s)
    return minimum(d / s**2, _sqrt(d) / s)


def topk_delta2(d, k):
    """Top-K keeps the k largest of d entries: ‖g − top_k(g)‖² ≤ (1 − k/d)‖g‖² (chapter 28)."""
    check.positive("d", d)
    check.positive("k", k)
    return 1 - k / d


def randk_variance(d, k):
    """Random-K rescaled by d/k is unbiased, and E‖(d/k)·rand_k(g) − g‖² = (d/k − 1)‖g‖²
    (chapter 28)."""
    check.positive("d", d)
    check.positive("k", k)
    return d / k - 1


def eckart_young_error(singular_values, rank):
    """The smallest ‖G − G_r‖_F over rank-r matrices: √(Σ_{i>r} σ_i²), from the singular
    values in any order (chapter 28)."""
    check.count("rank", rank, minimum=0)
    sigma = np.sort(np.abs(np.asarray(singular_values, dtype=float)))[::-1]
    return float(np.sqrt(np.sum(sigma[int(rank):] ** 2)))


# ---------------------------------------------------------------------------- size

def sparse_message_bytes(k, value_bytes=2, index_bytes=4):
    """Bytes of a sparse message of k entries: each carries a value and its index (chapter 28)."""
    check.positive("k", k)
    check.positive("value_bytes", value_bytes)
    check.nonnegative("index_bytes", index_bytes)
    return k * (value_bytes + index_bytes)


def sparse_factor(d, k, value_bytes=2, index_bytes=4, dense_bytes=2):
    """How many times smaller k (value, index) pairs are than the dense d-entry gradient of
    ``dense_bytes`` per entry (chapter 28): d·dense_bytes / (k(value_bytes + index_bytes))."""
    check.positive("d", d)
    check.positive("dense_bytes", dense_bytes)
    return d * dense_bytes / sparse_message_bytes(k, value_bytes, index_bytes)


def sparse_allgather_bytes(k, world, value_bytes=2, index_bytes=4):
    """The n of the all-gather of a sparse all-reduce (chapter 28): every rank ends with
    every rank's k pairs, world·k·(value_bytes + index_bytes) bytes, growing with P."""
    check.positive("world", world)
    return world * sparse_message_bytes(k, value_bytes, index_bytes)


def lowrank_fraction(rows, cols, rank):
    """ρ = r(m + n)/(mn): the share of an m×n matrix that its rank-r factors P (m×r) and
    Q (n×r) take (chapter 28)."""
    check.positive("rows", rows)
    check.positive("cols", cols)
    check.positive("rank", rank)
    return rank * (rows + cols) / (rows * cols)


def lowrank_rank(rows, cols, factor):
    """The rank whose factors are ``factor`` times smaller than the m×n matrix,
    mn/(factor·(m + n)) (chapter 28); round it down for at least that factor."""
    check.positive("rows", rows)
    check.positive("cols", cols)
    check.positive("factor", factor)
    return rows * cols / (factor * (rows + cols))


# ---------------------------------------------------------------------------- time

def compressed_allreduce_time(nbytes, world, alpha, beta, factor, encode_rate):
    """A ring all-reduce of a buffer ``factor`` times smaller, plus the compressor's time,
    ``nbytes / encode_rate`` (gradient bytes it processes per second) (chapter 28). Fits a
    compressor whose messages can be summed as they are: low-rank factors, a shared scale."""
    check.nonnegative("nbytes", nbytes)
    check.count("world", world)
    check.positive("factor", factor)
    check.positive("encode_rate", encode_rate)
    return comm.allreduce_time(nbytes / factor, world, alpha, beta) + nbytes / encode_rate


def compression_saving(nbytes, world, alpha, beta, factor, encode_rate):
    """Time saved per all-reduce by compressing (negative: it costs) (chapter 28)."""
    check.nonnegative("nbytes", nbytes)
    check.count("world", world)
    return (comm.allreduce_time(nbytes, world, alpha, beta)
            - compressed_allreduce_time(nbytes, world, alpha, beta, factor, encode_rate))


def breakeven_beta(world, factor, encode_rate):
    """The link bandwidth below which compression saves time (chapter 28):
    β* = 2(P − 1)/P · (1 − 1/factor) · encode_rate. α cancels: both all-reduces take the
    same 2(P − 1) steps."""
    check.positive("world", world)
    check.positive("factor", factor)
    check.positive("encode_rate", encode_rate)
    return 2 * (world - 1) / world * (1 - 1 / factor) * encode_rate


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
