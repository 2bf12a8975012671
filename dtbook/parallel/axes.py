"""Context and expert parallelism added to a mesh: a transformer layer on (DP, CP, TP) and an
expert layer on an EP axis (chapter 25).

The pieces come from earlier chapters; this file only composes them.

* :class:`CPTPBlock` is chapter 15's Megatron layer (:mod:`dtbook.parallel.tensor_parallel`: f, the
  column-parallel Q, K, V with h/TP whole heads per rank, row-parallel output, g) whose
  per-head attention is chapter 17's ring attention over the CP group
  (:func:`dtbook.parallel.sequence_parallel.ring_attention`). A rank holds S/CP tokens, so the
  LayerNorms and the MLP, which act token by token, need nothing from the CP group. The ring
  passes K and V stacked in one tensor (one exchange per step): two gradient-carrying
  exchanges on independent autograd branches may run in different orders on different ranks.
* :func:`groups` builds the process groups of a (dp, cp, tp) mesh with
  :class:`dtbook.mesh.Mesh` and returns this rank's: tp, cp, and the gradient group dp×cp.
  Each rank's parameter gradients cover its own tokens only, so they are averaged over every
  rank that holds the same shard of the weights, the dp and cp coordinates together
  (:func:`average_gradients`, one all-reduce of a flat buffer).
* :func:`cut` slices any whole :class:`dtbook.parallel.tensor_parallel.Block` into the rank's shard,
  which is how a test compares a rank's gradients or trained weights with one process.
* :func:`tokens_sent` counts, from a realised routing, the token-expert assignments a rank
  sends to the other ranks of its EP group; chapter 18's ``ep_forward`` moves them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from dtbook.parallel import sequence_parallel, tensor_parallel

__all__ = ["CPTPAttention", "CPTPBlock", "groups", "cut", "average_gradients", "tokens_sent"]


class CPTPAttention(nn.Module):
    """Megatron attention over ``tp`` (h/tp heads here) with ring attention over ``cp``:
    x [b, S/cp, H] → f → Q, K, V [b, h/tp, S/cp, d] → causal ring attention → row-parallel
    output → g. Chapter 25."""

    def __init__(self, full: tensor_parallel.Attention, tp_rank, tp, tp_group=None, cp_group=None):
        super().__init__()
        self.tp_group, self.cp_group, self.head_dim = tp_group, cp_group, full.head_dim
        self.q, self.k, self.v = (tensor_parallel.ColumnParallelLinear(m, tp_rank, tp)
                                  for m in (full.q, full.k, full.v))
        self.o = tensor_parallel.RowParallelLinear(full.o, tp_rank, tp, tp_group)

    def forward(self, x):
        x = tensor_parallel.f(x, self.tp_group)
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, -1, self.head_dim).transpose(1, 2)
                   for t in (self.q(x), self.k(x), self.v(x)))
        y = sequence_parallel.ring_attention(q, k, v, causal=True, group=self.cp_group)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class CPTPBlock(nn.Module):
    """:class:`dtbook.parallel.tensor_parallel.Block` cut for one rank of a (cp, tp) grid: whole
    LayerNorms, :class:`CPTPAttention`, Megatron MLP. Input and output are this rank's S/cp
    tokens, replicated over tp. Chapter 25."""

    def __init__(self, full: tensor_parallel.Block, tp_rank, tp, tp_group=None, cp_group=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(full.ln1.normalized_shape)
        self.ln2 = nn.LayerNorm(full.ln2.normalized_shape)
        self.ln1.load_state_dict(full.ln1.state_dict())
        self.ln2.load_state_dict(full.ln2.state_dict())
        self.attn = CPTPAttention(full.attn, tp_rank, tp, tp_group, cp_group)
        self.mlp = tensor_parallel.ParallelMLP(full.mlp, tp_rank, tp, tp_group)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def groups(dims=(2, 2, 2)):
    """Create the tp, cp and dp×cp process groups of a row-major (dp, cp, tp) mesh (every
    rank creates every group, in the same order) and return this rank's as a dict of
    (group, ranks), with its coordinates under "coords". Chapter 25."""
    from dtbook.mesh import Mesh

    dp, cp, tp = dims
    m = Mesh(dims, names=("dp", "cp", "tp"))
    grad = Mesh((dp * cp, tp), names=("dpcp", "tp"))      # same ranks: dp and cp merged
    rank = dist.get_rank()
    mine = {"coords": m.coords(rank)}
    for name, mesh, axis in (("tp", m, "tp"), ("cp", m, "cp"),
                             ("grad", grad, "dpcp")):
        for ranks in mesh.groups(axis):
            g = dist.new_group(list(ranks), use_local_synchronization=True) if rank in ranks else None
            if rank in ranks:
                mine[name] = (g, tuple(ranks))
    return mine


def cut(full: tensor_parallel.Block, tp_rank, tp):
    """The shard of a whole block's parameters that tp rank ``tp_rank`` holds, as a dict
    name → tensor: the same slicing :class:`CPTPBlock` does (no process group needed).
    Chapter 25."""
    shard = CPTPBlock(full, tp_rank, tp)
    return {n: p.detach() for n, p in shard.named_parameters()}


def average_gradients(module, group, world):
    """Average the gradients over ``group`` (the dp×cp ranks holding the same shard) with one
    all-reduce of a flat buffer. Chapter 25."""
    params = [p for p in module.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, group=group)
    flat /= world
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()
    return flat.numel() * flat.element_size()


def tokens_sent(idx, ep_rank, experts, ep):
    """Token-expert assignments in ``idx`` (T, k) whose expert lives on another rank of the
    EP group (rank r holds experts r·E/ep … (r + 1)·E/ep − 1). Chapter 25."""
    owner = torch.as_tensor(idx) // (experts // ep)
    return int((owner != ep_rank).sum())
