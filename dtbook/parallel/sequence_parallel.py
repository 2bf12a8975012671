"""Sequence and context parallelism by hand: Megatron-SP's operators, the online-softmax
merge, ring attention and Ulysses (chapter 17).

* :func:`gather_seq` / :func:`scatter_seq`: Megatron sequence parallelism's two operators.
  ``gather_seq`` all-gathers the sequence shards before a column-parallel region and
  reduce-scatters the gradient; ``scatter_seq`` reduce-scatters the row-parallel partial sums
  back to sequence shards and all-gathers the gradient. :class:`SPBlock` is chapter 15's
  transformer layer with them in place of f and g.
* :func:`block_state` and :func:`merge`: attention over one block of keys as a state
  (m, l, o), the row maximum, the sum of exponentials and the normalised output, and the
  associative merge of two states. Works on torch tensors and on SymPy expressions.
* :func:`ring_attention`: each rank keeps its queries and passes its K and V around the ring
  (``batch_isend_irecv``), merging one block per step; causal masks come from global
  positions, contiguous or zig-zag (:func:`positions`).
* :func:`ulysses_attention`: two all-to-alls swap a sequence shard for a head shard and back.

K and V travel as one stacked tensor in every exchange: two gradient-carrying exchanges on
independent autograd branches may run in different orders on different ranks.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["gather_seq", "scatter_seq", "SPBlock", "sync_replicated_grads", "block_state",
           "merge", "positions", "ring_attention", "ulysses_attention"]

SEQ = 1  # activations are [batch, seq, hidden] (or [batch, heads, seq, d] in attention)


# ---------------------------------------------------------------- Megatron-SP operators

def _flat_collective(name):
    """torch 2.13 names the flat-tensor collectives ``*_single`` and deprecates (with a
    FutureWarning) the older ``all_gather_into_tensor``/``reduce_scatter_tensor``; use whichever
    this torch has. The arguments are the same: (output, input, ..., group=...)."""
    old = "all_gather_into_tensor" if name == "all_gather" else "reduce_scatter_tensor"
    return getattr(dist, f"{name}_single", None) or getattr(dist, old)


def _all_gather(x, dim, group):
    world = dist.get_world_size(group)
    xt = x.movedim(dim, 0).contiguous()
    out = xt.new_empty((world * xt.shape[0],) + tuple(xt.shape[1:]))
    _flat_collective("all_gather")(out, xt, group=group)
    return out.movedim(0, dim)


def _reduce_scatter(x, dim, group):
    world = dist.get_world_size(group)
    xt = x.movedim(dim, 0).contiguous()
    out = xt.new_empty((xt.shape[0] // world,) + tuple(xt.shape[1:]))
    _flat_collective("reduce_scatter")(out, xt, group=group)
    return out.movedim(0, dim)


def _sequence_collective(forward_op, backward_op):
    """An autograd Function that runs `forward_op` along the sequence and its dual `backward_op`
    on the gradient (chapter 17): an all-gather's backward is a reduce-scatter, and back."""

    class SequenceCollective(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return forward_op(x, SEQ, group)

        @staticmethod
        def backward(ctx, grad):
            return backward_op(grad, SEQ, ctx.group), None

    SequenceCollective.__doc__ = (f"Forward {forward_op.__name__.strip('_')} along the sequence, "
                                  f"backward {backward_op.__name__.strip('_')} (chapter 17).")
    return SequenceCollective


_GatherSeq = _sequence_collective(_all_gather, _reduce_scatter)
_ScatterSeq = _sequence_collective(_reduce_scatter, _all_gather)


def gather_seq(x, group=None):
    """[b, S/t, H] on each rank → [b, S, H]; the gradient is reduce-scattered (chapter 17)."""
    return _GatherSeq.apply(x, group)


def scatter_seq(x, group=None):
    """Partial sums [b, S, H] → this rank's [b, S/t, H] of their sum; the gradient is
    all-gathered (chapter 17)."""
    return _ScatterSeq.apply(x, group)


def _rows(t, dim, rank, world):
    return nn.Parameter(t.detach().chunk(world, dim=dim)[rank].clone())


class SPBlock(nn.Module):
    """Chapter 15's pre-norm layer (``dtbook.parallel.tensor_parallel.Block``) under tensor parallelism
    with sequence parallelism (chapter 17): the LayerNorms, residuals and row-parallel biases
    act on a sequence shard [b, S/t, H]; ``gather_seq`` replaces f before each
    column-parallel region and ``scatter_seq`` replaces g after each row-parallel one. Per
    layer: two all-gathers and two reduce-scatters forward, the same backward."""

    def __init__(self, full, rank, world, group=None):
        super().__init__()
        self.group, self.head_dim = group, full.attn.head_dim
        self.ln1, self.ln2 = copy.deepcopy(full.ln1), copy.deepcopy(full.ln2)  # whole, per token
        a, m = full.attn, full.mlp
        for name, lin in (("q", a.q), ("k", a.k), ("v", a.v), ("fc1", m.fc1)):  # column
            setattr(self, name + "_w", _rows(lin.weight, 0, rank, world))
            setattr(self, name + "_b", _rows(lin.bias, 0, rank, world))
        for name, lin in (("o", a.o), ("fc2", m.fc2)):                           # row
            setattr(self, name + "_w", _rows(lin.weight, 1, rank, world))
            setattr(self, name + "_b", nn.Parameter(lin.bias.detach().clone()))

    def forward(self, x):                                  # x: [b, S/t, H]
        h = gather_seq(self.ln1(x), self.group)            # all-gather: [b, S, H]
        b, s, _ = h.shape
        q, k, v = (F.linear(h, getattr(self, n + "_w"), getattr(self, n + "_b"))
                   .reshape(b, s, -1, self.head_dim).transpose(1, 2) for n in "qkv")
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = F.linear(y.transpose(1, 2).reshape(b, s, -1), self.o_w)      # partial sums
        x = x + scatter_seq(y, self.group) + self.o_b      # reduce-scatter: [b, S/t, H]
        h = gather_seq(self.ln2(x), self.group)
        h = F.gelu(F.linear(h, self.fc1_w, self.fc1_b))
        return x + scatter_seq(F.linear(h, self.fc2_w), self.group) + self.fc2_b


def sync_replicated_grads(module, group=None):
    """Sum the gradients of the parameters every rank holds whole (LayerNorms, row-parallel
    biases) over the group: each rank saw only its sequence shard (chapter 17). One
    all-reduce of them all, flattened."""
    params = [p for n, p in module.named_parameters() if n.startswith("ln") or n in ("o_b", "fc2_b")]
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, group=group)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


# ---------------------------------------------------------------- online softmax

def _is_torch(x):
    return isinstance(x, torch.Tensor)


def block_state(q, k, v, mask=None, safe=True):
    """Attention of queries q [..., n_q, d] over one block of keys and values as a state
    (m, l, o): m the row maximum of the scaled scores, l = Σ exp(score − m), o the
    softmax-weighted average of v (chapter 17). ``mask`` [n_q, n_k] is True where a query
    may see a key. A row that sees no key has m = −∞; ``safe`` gives it l = 0 and o = 0,
    and without it the row is 0/0 = NaN. m is a stabiliser only (o does not depend on it),
    so it carries no gradient."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(-1).detach()
    m_shift = torch.where(torch.isinf(m), torch.zeros_like(m), m) if safe else m
    p = torch.exp(scores - m_shift[..., None])
    l = p.sum(-1)
    denom = torch.where(l == 0, torch.ones_like(l), l) if safe else l
    return m, l, (p @ v) / denom[..., None]


def merge(a, b):
    """Merge two states (m, l, o) over disjoint key blocks (chapter 17):
    m = max(m_A, m_B), l = l_A e^(m_A − m) + l_B e^(m_B − m),
    o = (o_A l_A e^(m_A − m) + o_B l_B e^(m_B − m)) / l. Associative and commutative, because
    (l e^m, o l e^m) is just the pair of sums (Σ e^score, Σ e^score v), which add. Torch
    tensors (rows with no key stay 0) or SymPy expressions."""
    (ma, la, oa), (mb, lb, ob) = a, b
    if not _is_torch(ma):
        import sympy as sp
        m = sp.Max(ma, mb)
        wa, wb = la * sp.exp(ma - m), lb * sp.exp(mb - m)
        return m, wa + wb, (oa * wa + ob * wb) / (wa + wb)
    m = torch.maximum(ma, mb)
    m_shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = la * torch.exp(ma - m_shift), lb * torch.exp(mb - m_shift)
    l = wa + wb
    denom = torch.where(l == 0, torch.ones_like(l), l)
    return m, l, (oa * wa[..., None] + ob * wb[..., None]) / denom[..., None]


# ---------------------------------------------------------------- ring attention

def positions(rank, world, local, layout="contiguous"):
    """Global positions of the ``local`` tokens rank ``rank`` holds (chapter 17).
    "contiguous": rank·local … ; "zigzag": chunks r and 2P − 1 − r of 2P chunks of local/2,
    which gives every rank the same causal work."""
    if layout == "contiguous":
        return torch.arange(rank * local, (rank + 1) * local)
    half = local // 2
    return torch.cat([torch.arange(rank * half, (rank + 1) * half),
                      torch.arange((2 * world - 1 - rank) * half, (2 * world - rank) * half)])


class _RingShift(torch.autograd.Function):
    """Send x to the next rank, receive the previous rank's; the gradient goes the other way."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _exchange(x, +1, group)

    @staticmethod
    def backward(ctx, grad):
        return _exchange(grad.contiguous(), -1, ctx.group), None


def _exchange(x, direction, group):
    # c10d's own isend/irecv: P2POp checks the op by identity against them (and a counter
    # that wraps them still sees the call)
    from torch.distributed import distributed_c10d as c10d

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    peer = lambda r: r if group is None else dist.get_global_rank(group, r)
    out = torch.empty_like(x)
    ops = [dist.P2POp(c10d.isend, x, peer((rank + direction) % world), group),
           dist.P2POp(c10d.irecv, out, peer((rank - direction) % world), group)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return out


def ring_attention(q, k, v, causal=False, layout="contiguous", group=None, stats=None,
                   mask_fn=None, safe=True):
    """Attention of this rank's queries over every rank's keys (chapter 17). q, k, v are
    [b, n_h, S/P, d] for the tokens :func:`positions` gives this rank. P steps: merge the
    block in hand, pass the stacked K/V to the next rank. Under ``causal`` the mask compares
    global positions, and chunk pairs with every key in the future are skipped; ``stats``
    (a dict) receives the chunk pairs computed. ``mask_fn(step, q_pos, k_pos)`` overrides the
    mask (to show a wrong one); ``safe=False`` drops the guard on rows that see no key of a
    block, which then turn NaN (see :func:`block_state`)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    local = q.shape[-2]
    chunks = 2 if layout == "zigzag" else 1
    q_pos = positions(rank, world, local, layout)
    kv = torch.stack([k, v])                        # one exchange carries both
    state = None
    for step in range(world):
        src = (rank - step) % world
        k_pos = positions(src, world, local, layout)
        for qc, kc in [(i, j) for i in range(chunks) for j in range(chunks)]:
            qs = slice(qc * local // chunks, (qc + 1) * local // chunks)
            ks = slice(kc * local // chunks, (kc + 1) * local // chunks)
            if mask_fn is not None:
                mask = mask_fn(step, q_pos[qs], k_pos[ks])
            elif causal:
                mask = q_pos[qs, None] >= k_pos[None, ks]
                if not mask.any():                  # every key in the future: skip
                    continue
            else:
                mask = None
            if stats is not None:
                stats["chunk_pairs"] = stats.get("chunk_pairs", 0) + 1
            part = block_state(q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :], mask, safe)
            part = _pad_rows(part, qs, local, q) if chunks > 1 else part
            state = part if state is None else merge(state, part)
        if step < world - 1:
            kv = _RingShift.apply(kv, group)
    # every rank must run every exchange's backward, in the same order; a causal rank that
    # used none of the last blocks would skip them and leave its neighbours waiting
    return state[2] + 0 * kv.sum()


def _pad_rows(part, qs, local, q):
    """A state over some query rows, extended to all ``local`` rows with empty ones
    (m = −∞, l = 0, o = 0), so it merges with a state over every row."""
    m, l, o = part
    full_m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    return (_scatter_rows(full_m, m, qs), _scatter_rows(torch.zeros_like(full_m), l, qs),
            _scatter_rows(torch.zeros(q.shape[:-1] + (o.shape[-1],), dtype=q.dtype), o, qs,
                          rows_dim=-2))


def _scatter_rows(base, part, qs, rows_dim=-1):
    pieces = list(base.split([qs.start, qs.stop - qs.start, base.shape[rows_dim] - qs.stop],
                             dim=rows_dim))
    pieces[1] = part
    return torch.cat(pieces, dim=rows_dim)


# ---------------------------------------------------------------- Ulysses

def _a2a(x, group):
    from torch.distributed._functional_collectives import all_to_all_single_autograd
    return all_to_all_single_autograd(x.contiguous(), None, None,
                                      group if group is not None else dist.group.WORLD)


def ulysses_attention(q, k, v, causal=False, group=None):
    """Attention with the sequence sharded, by two all-to-alls (chapter 17). q, k, v are
    [b, S/P, n_h, d] (this rank's contiguous tokens, every head). One all-to-all of the
    stacked Q, K, V gives each rank n_h/P heads over the whole sequence; attention runs
    locally; one all-to-all of the output gives the sequence shard back."""
    world = dist.get_world_size(group)
    b, s_loc, heads, d = q.shape
    h_loc = heads // world
    x = torch.stack([q, k, v]).reshape(3, b, s_loc, world, h_loc, d).permute(3, 0, 1, 2, 4, 5)
    x = _a2a(x, group)                                   # [P (seq chunk), 3, b, S/P, h/P, d]
    x = x.permute(1, 2, 0, 3, 4, 5).reshape(3, b, world * s_loc, h_loc, d)
    qh, kh, vh = (t.transpose(1, 2) for t in x)          # [b, h/P, S, d]
    y = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    y = y.transpose(1, 2).reshape(b, world, s_loc, h_loc, d).permute(1, 0, 2, 3, 4)
    y = _a2a(y, group)                                   # [P (head group), b, S/P, h/P, d]
    return y.permute(1, 2, 0, 3, 4).reshape(b, s_loc, heads, d)
