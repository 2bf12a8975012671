"""Tensor parallelism by hand: the f and g operators, column- and row-parallel linear layers,
the Megatron MLP and attention blocks, and LayerNorm from sharded statistics (chapter 15).

Linearity gives two splits of Y = XW. By columns, W = [W₁|…|W_P]: rank i computes XWᵢ, its
slice of Y, with no communication. By rows, W = [W₁;…;W_P] and X = [X₁|…|X_P]: rank i
computes XᵢWᵢ and Y = Σᵢ XᵢWᵢ is an all-reduce. Two operators place the communication:

* ``f``: identity forward, all-reduce backward. It sits before a column split: every rank
  uses the whole X, so ∂L/∂X is the sum of every rank's partial ∂L/∂Yᵢ · Wᵢᵀ.
* ``g``: all-reduce forward, identity backward. It ends a row split; what follows is
  replicated, so each rank already holds the whole gradient.

Megatron's MLP is f → column → GeLU → row → g, and attention is f → column Q, K, V (h/P heads
per rank) → attention per head → row output projection → g: 2 all-reduces forward and 2
backward per layer. The sharded modules are cut from a full one (:class:`Block`) by
slicing, so each rank's result can be compared with the single process directly.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__all__ = ["f", "g", "all_reduce_sum", "ColumnParallelLinear", "RowParallelLinear",
           "MLP", "Attention", "Block", "ParallelMLP", "ParallelAttention", "ParallelBlock",
           "parallel_layer_norm"]


class _F(torch.autograd.Function):
    """f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _G(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _AllReduceSum(torch.autograd.Function):
    """A sum whose result feeds *sharded* work: all-reduce forward and backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def f(x, group=None):
    """Megatron's f (chapter 15): identity forward, all-reduce backward."""
    return _F.apply(x, group)


def g(x, group=None):
    """Megatron's g (chapter 15): all-reduce forward, identity backward."""
    return _G.apply(x, group)


def all_reduce_sum(x, group=None):
    """A sum over ranks consumed by every rank's own shard (chapter 15's parallel LayerNorm):
    the backward must all-reduce too, since every rank's loss depends on the sum."""
    return _AllReduceSum.apply(x, group)


def _shard(t, dim, rank, world):
    return t.detach().chunk(world, dim=dim)[rank].clone()


class ColumnParallelLinear(nn.Module):
    """Y = XW + b with W split by output columns: this rank holds rows ``rank`` of
    ``full.weight`` chunked P ways (torch stores W transposed) and the matching bias slice,
    and returns its slice of Y. No communication here: the caller applies f once before
    all the column layers that read the same X (chapter 15)."""

    def __init__(self, full: nn.Linear, rank, world):
        super().__init__()
        self.weight = nn.Parameter(_shard(full.weight, 0, rank, world))
        self.bias = None if full.bias is None else nn.Parameter(_shard(full.bias, 0, rank, world))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Y = Σᵢ XᵢWᵢ + b with W split by input rows: this rank multiplies its slice of X by its
    rows of W. The bias is added once, after g's all-reduce; added on every rank before it,
    the sum would carry P·b (chapter 15)."""

    def __init__(self, full: nn.Linear, rank, world, group=None):
        super().__init__()
        self.group = group
        self.weight = nn.Parameter(_shard(full.weight, 1, rank, world))
        self.bias = None if full.bias is None else nn.Parameter(full.bias.detach().clone())

    def forward(self, x_shard):
        y = g(F.linear(x_shard, self.weight), self.group)
        return y if self.bias is None else y + self.bias


# ---------------------------------------------------------------- the single-process model

class MLP(nn.Module):
    """d → 4d → GeLU → d."""

    def __init__(self, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Attention(nn.Module):
    """Causal multi-head self-attention with separate Q, K, V projections. The head count
    is read from the projection's output width, so the same code runs whole, or on h/P
    heads once a plan has split Q, K, V by columns."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.head_dim = hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))

    def attend(self, q, k, v):
        b, s, _ = q.shape
        q, k, v = (t.reshape(b, s, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, s, -1)

    def forward(self, x):
        return self.o(self.attend(self.q(x), self.k(x), self.v(x)))


class Block(nn.Module):
    """A pre-norm transformer layer: x + Attn(LN(x)), then + MLP(LN(·))."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(hidden), Attention(hidden, heads)
        self.ln2, self.mlp = nn.LayerNorm(hidden), MLP(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


# ---------------------------------------------------------------- the same model, sharded

class ParallelMLP(nn.Module):
    """Megatron's MLP (chapter 15): f → column fc1 → GeLU (elementwise, so it acts on each
    column slice alone) → row fc2 → g."""

    def __init__(self, full: MLP, rank, world, group=None):
        super().__init__()
        self.group = group
        self.fc1 = ColumnParallelLinear(full.fc1, rank, world)
        self.fc2 = RowParallelLinear(full.fc2, rank, world, group)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(f(x, self.group))))


class ParallelAttention(nn.Module):
    """Megatron's attention (chapter 15): one f, then Q, K, V column-parallel (h/P whole heads
    on this rank), attention per head with no communication, row-parallel output, g."""

    def __init__(self, full: Attention, rank, world, group=None):
        super().__init__()
        self.group, self.full_head_dim = group, full.head_dim
        self.q, self.k, self.v = (ColumnParallelLinear(m, rank, world)
                                  for m in (full.q, full.k, full.v))
        self.o = RowParallelLinear(full.o, rank, world, group)

    def forward(self, x):
        x = f(x, self.group)      # one backward all-reduce for Q, K and V together
        q, k, v = self.q(x), self.k(x), self.v(x)
        b, s, _ = q.shape
        q, k, v = (t.reshape(b, s, -1, self.full_head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class ParallelBlock(nn.Module):
    """:class:`Block` with Megatron attention and MLP; the LayerNorms act on replicated
    activations, so they stay whole on every rank (chapter 15)."""

    def __init__(self, full: Block, rank, world, group=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(full.ln1.normalized_shape)
        self.ln2 = nn.LayerNorm(full.ln2.normalized_shape)
        self.ln1.load_state_dict(full.ln1.state_dict())
        self.ln2.load_state_dict(full.ln2.state_dict())
        self.attn = ParallelAttention(full.attn, rank, world, group)
        self.mlp = ParallelMLP(full.mlp, rank, world, group)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def parallel_layer_norm(x_shard, weight_shard, bias_shard, hidden, eps=1e-5, group=None):
    """LayerNorm over a hidden dimension split across ranks (chapter 15): each rank sums its
    slice, S = Σx and Q = Σx², one all-reduce of the stacked pair (two numbers per token)
    gives the whole-row sums, then μ = S/d and σ² = Q/d − μ²."""
    stats = torch.stack([x_shard.sum(-1), (x_shard * x_shard).sum(-1)])
    s, q = all_reduce_sum(stats, group)
    mu = s / hidden
    var = q / hidden - mu * mu
    return (x_shard - mu[..., None]) * torch.rsqrt(var[..., None] + eps) * weight_shard + bias_shard
