"""Sequence and context parallelism in closed form: what attention holds in memory at long
sequence lengths, and what Megatron sequence parallelism, ring attention and Ulysses send
(chapter 17).

Attention mixes positions, but it does so through sums: a softmax-weighted average is a sum
over keys divided by a sum over keys, and both sums can be computed block by block and merged
(the online softmax, :mod:`dtbook.parallel.sequence_parallel`). That decomposability lets the sequence
axis be split over P ranks. The shapes are b (``batch``), S (``seq``), H (``hidden``), n_h
(``heads``) and s (``value_bytes``, 2 for bf16). Every function accepts Python numbers, NumPy
arrays and SymPy symbols alike; sizes are bytes, times seconds.

"Bytes a rank sends" counts one direction of one rank's port, as :func:`dtbook.comm.traffic`
does: an all-gather or reduce-scatter of an n-byte buffer sends (P − 1)/P · n per rank. The
n of a b × S × H activation is :func:`dtbook.tensor_parallel.activation_bytes`; what tensor
parallelism sends per layer is :func:`dtbook.tensor_parallel.layer_comm_bytes`, and
:func:`megatron_sp_bytes` counts the same bytes as all-gathers and reduce-scatters.
Ring attention's traffic is :func:`ring_kv_transfers` blocks of :func:`ring_kv_step_bytes`;
``value_bytes`` is keyword-only everywhere.
"""

from __future__ import annotations

import numpy as np

from . import _validate as check
from . import activations as act
from . import comm
from .symbolic import maximum, minimum
from . import tensor_parallel as tpar

__all__ = [
    "attention_activation_bytes", "ring_activation_bytes",
    "ulysses_scores_bytes", "norm_activation_bytes", "megatron_sp_bytes",
    "ring_kv_step_bytes", "ring_kv_transfers", "ring_kv_bytes", "ulysses_bytes",
    "ring_ulysses_ratio", "hidden_fraction", "ring_time", "causal_blocks",
    "causal_steps_needed", "flash_ring_bytes",
]


def _shape(batch, seq, hidden=None, value_bytes=None):
    check.positive("batch", batch)
    check.positive("seq", seq)
    if hidden is not None:
        check.positive("hidden", hidden)
    if value_bytes is not None:
        check.positive("value_bytes", value_bytes)


def attention_activation_bytes(batch, seq, hidden, heads, *, value_bytes=2):
    """A two-term model of one layer's attention activations:
    (2bSH + b·n_h·S²)·s bytes, the input and output of the block plus the attention matrix
    (:func:`dtbook.activations.attention_scores_bytes`) (chapter 17). The second term grows
    with S² and dominates once S > 2H/n_h. Not :func:`dtbook.activations.layer_activation_bytes`,
    chapter 06's count of everything a layer keeps."""
    _shape(batch, seq, hidden, value_bytes)
    check.positive("heads", heads)
    return (2 * tpar.activation_bytes(batch, seq, hidden, bytes_per_element=value_bytes)
            + act.attention_scores_bytes(batch, seq, heads, value_bytes=value_bytes))


def ring_activation_bytes(batch, seq, hidden, heads, world, *, value_bytes=2):
    """Peak attention memory per rank under ring attention with S/P tokens per rank:
    (5b(S/P)H + b·n_h·(S/P)²)·s bytes: Q, K and V of the rank's tokens and the K/V block
    arriving (5 × b(S/P)H), plus one block of scores; the quadratic term shrinks by P²
    (chapter 17)."""
    _shape(batch, seq, hidden, value_bytes)
    check.positive("heads", heads)
    check.count("world", world)
    local = seq / world
    return (5 * tpar.activation_bytes(batch, local, hidden, bytes_per_element=value_bytes)
            + act.attention_scores_bytes(batch, local, heads, value_bytes=value_bytes))


def ulysses_scores_bytes(batch, seq, heads, world, *, value_bytes=2):
    """Ulysses gives each rank n_h/P whole heads over the whole sequence, so its attention
    matrix is b·(n_h/P)·S²·s bytes: it shrinks by P, not P² (chapter 17)."""
    _shape(batch, seq, value_bytes=value_bytes)
    check.positive("heads", heads)
    check.count("world", world)
    return act.attention_scores_bytes(batch, seq, heads / world, value_bytes=value_bytes)


def norm_activation_bytes(batch, seq, hidden, tp, *, value_bytes=2,
                          sequence_parallel: bool = True):
    """Activations a rank keeps for the LayerNorm and dropout regions of one layer inside a
    tensor-parallel group of t: 2bSH·s replicated on every rank without sequence parallelism,
    2b(S/t)H·s with it (chapter 17)."""
    _shape(batch, seq, hidden, value_bytes)
    check.count("tp", tp)
    per_rank = 2 * tpar.activation_bytes(batch, seq, hidden, bytes_per_element=value_bytes)
    return per_rank / tp if sequence_parallel else per_rank


def megatron_sp_bytes(batch, seq, hidden, tp, *, value_bytes=2):
    """Bytes a rank sends per layer in the forward pass of Megatron sequence parallelism:
    an all-gather before each column-parallel region and a reduce-scatter after each
    row-parallel one, two of each, 4(t − 1)/t · bSH·s (chapter 17). Counted from the
    collectives SP runs, it equals tensor parallelism's two all-reduces,
    :func:`dtbook.tensor_parallel.layer_comm_bytes` with ``backward=False``, because an
    all-reduce is a reduce-scatter then an all-gather."""
    _shape(batch, seq, hidden, value_bytes)
    check.count("tp", tp)
    n = tpar.activation_bytes(batch, seq, hidden, bytes_per_element=value_bytes)
    return 2 * (comm.traffic("allgather", n, tp).sent_bytes
                + comm.traffic("reduce_scatter", n, tp).sent_bytes)


def ring_kv_step_bytes(batch, seq, hidden, world, *, value_bytes=2):
    """Bytes one rank sends in one step of ring attention: its current K and V blocks,
    2b(S/P)H·s (chapter 17). With grouped-query attention pass the K/V width as ``hidden``.
    The gradients dK and dV of a block are as large."""
    _shape(batch, seq, hidden, value_bytes)
    check.count("world", world)
    return 2 * tpar.activation_bytes(batch, seq / world, hidden, bytes_per_element=value_bytes)


def ring_kv_transfers(world, *, backward=True, kv_saved=False):
    """K/V-block transfers one rank makes per layer in ring attention, each of
    :func:`ring_kv_step_bytes` (chapter 17).

    Forward: P − 1 (the block in hand goes to the next rank, P − 1 times). With
    ``backward``, the gradients dK, dV of each block travel back to the rank that owns it,
    P − 1 more, and what else backward sends depends on what forward kept:

    - ``kv_saved=False`` (the default, what production context parallelism does:
      Megatron-Core through Transformer Engine's ``AttnFuncWithCPAndKVP2P``, and the Ring
      Attention paper): a rank keeps only its own K and V, so backward circulates K and V
      again beside dK, dV: 2(P − 1) in backward, 3(P − 1) per layer.
    - ``kv_saved=True``: forward keeps every block it received for backward (P − 1 more
      blocks of memory per layer), so backward sends only dK, dV: 2(P − 1) per layer. This
      is what the runnable :func:`dtbook.parallel.sequence_parallel.ring_attention` does,
      since autograd keeps each received block.
    """
    check.count("world", world)
    for name, flag in (("backward", backward), ("kv_saved", kv_saved)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    steps = world - 1
    if not backward:
        return steps
    return steps * (2 if kv_saved else 3)


def ring_kv_bytes(batch, seq, hidden, world, *, value_bytes=2):
    """Bytes one rank sends per layer (forward) in ring attention: P − 1 steps of K and V,
    2(P − 1)/P · bSH·s (chapter 17): :func:`ring_kv_transfers` (forward) times
    :func:`ring_kv_step_bytes`."""
    return (ring_kv_transfers(world, backward=False)
            * ring_kv_step_bytes(batch, seq, hidden, world, value_bytes=value_bytes))


def ulysses_bytes(batch, seq, hidden, world, *, value_bytes=2):
    """Bytes one rank sends per layer (forward) in Ulysses: four all-to-alls (Q, K and V from
    sequence-sharded to head-sharded, the output back), each sending (P − 1)/P of the rank's
    b(S/P)H·s buffer, 4(P − 1)bSH·s/P² in all (chapter 17)."""
    _shape(batch, seq, hidden, value_bytes)
    check.count("world", world)
    local = tpar.activation_bytes(batch, seq / world, hidden, bytes_per_element=value_bytes)
    return 4 * comm.traffic("alltoall", local, world).sent_bytes


def ring_ulysses_ratio(world):
    """Ring attention sends P/2 times the bytes of Ulysses per rank (chapter 17)."""
    check.count("world", world)
    return world / 2


def hidden_fraction(t_compute, t_comm):
    """Share of a ring step's K/V transfer hidden behind the block's compute:
    min(1, T_comp/T_comm) (chapter 17)."""
    check.nonnegative("t_compute", t_compute)
    check.positive("t_comm", t_comm)
    return minimum(1, t_compute / t_comm)


def ring_time(t_compute, t_comm, world, overlap: bool = True):
    """Time of one ring-attention pass over P blocks, with P − 1 transfers (chapter 17).

    Overlapped, each transfer runs beside the compute of the block in hand:
    T_comp + (P − 1)·max(T_comp, T_comm). Not overlapped: P·T_comp + (P − 1)·T_comm."""
    check.nonnegative("t_compute", t_compute)
    check.nonnegative("t_comm", t_comm)
    check.count("world", world)
    if overlap:
        return t_compute + (world - 1) * maximum(t_compute, t_comm)
    return world * t_compute + (world - 1) * t_comm


def causal_blocks(world, zigzag: bool = False):
    """Blocks of (S/P)² scores the busiest rank computes in causal ring attention, when a
    block whose keys all lie in the future of its queries is skipped (chapter 17).

    Contiguous split: rank r needs the blocks of sources 0 … r, so the last rank computes all
    P and the ring is no faster than without the mask. Zig-zag split (2P chunks of S/(2P),
    rank r holds chunks r and 2P − 1 − r, skipping at chunk granularity): every rank computes
    2P + 1 chunk pairs, (2P + 1)/4 blocks."""
    check.count("world", world)
    return (2 * world + 1) / 4 if zigzag else world


def causal_steps_needed(world):
    """Average blocks a rank needs under a causal mask with the contiguous split:
    (P + 1)/2 of P, so (P − 1)/2 can be skipped on average (chapter 17)."""
    check.count("world", world)
    return (world + 1) / 2


def flash_ring_bytes(seq, head_dim, world, *, value_bytes=2):
    """Attention state per head per rank when each ring step runs a flash (tiled) kernel:
    Q, K, V and the output of the rank's S/P tokens, and K/V blocks for the step in hand and
    the one arriving, 8·(S/P)·d·s bytes; the tile of scores, O(B_blk·d), is left out
    (chapter 17). Against the materialised (S/P)²·s block it saves (S/P)/(8d)."""
    check.positive("seq", seq)
    check.positive("head_dim", head_dim)
    check.count("world", world)
    check.positive("value_bytes", value_bytes)
    return 8 * seq / world * head_dim * value_bytes


check.guard_module(globals(), arrays=True)  # every public formula checks its arguments (DESIGN.md)
