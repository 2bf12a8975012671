"""Expert parallelism by hand: router, capacity, all-to-all dispatch and combine (chapter 18).

A mixture-of-experts layer computes y = Σ_{i∈S(x)} wᵢ·Eᵢ(x) with Eᵢ(x) = W₂⁽ⁱ⁾·GeLU(W₁⁽ⁱ⁾x):
the router picks the set S(x) of k experts and their weights w. Expert weights are stored
stacked, ``w1`` of shape (E, H, F) and ``w2`` of shape (E, F, H), so one rank's experts are
a slice of the stack.

With expert parallelism, rank r of P holds experts r·E/P … (r + 1)·E/P − 1 and the router
is replicated. :func:`ep_forward` moves each token-expert assignment to the rank of its
expert and back with two all-to-alls of uneven sizes: first the counts are exchanged (a
rank cannot receive what it does not know the size of), then the token vectors go out
(dispatch), the local experts run (any expert function: chapter 36 passes Mixtral's
SwiGLU), and the results come back (combine). The all-to-alls are
``all_to_all_single_autograd``, so the backward pass runs the reverse all-to-alls and
gradients reach the router, the experts and the inputs.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["route_topk", "noisy_logits", "expert_choice", "capacity_keep", "expert_ffn",
           "moe_dense", "aux_loss", "z_loss", "ep_forward", "coordinates", "layout_groups",
           "new_layout_groups"]


# ------------------------------------------------------------------ routers

def route_topk(logits, k):
    """Softmax, top-k, renormalise: weights (T, k) summing to 1 per token, expert ids (T, k),
    and the full probabilities g (T, E) that the balance loss needs (chapter 18)."""
    g = logits.softmax(dim=-1)
    top, idx = g.topk(k, dim=-1)
    return top / top.sum(dim=-1, keepdim=True), idx, g


def noisy_logits(x, w_gate, w_noise, generator=None):
    """Noisy top-k's logits h = W_g·x + ε·Softplus(W_noise·x), ε ~ N(0, 1) (chapter 18)."""
    clean = x @ w_gate.T
    eps = torch.randn(clean.shape, generator=generator, dtype=clean.dtype)
    return clean + eps * F.softplus(x @ w_noise.T)


def expert_choice(logits, capacity):
    """Expert choice: every expert takes its ``capacity`` highest-scoring tokens. Returns
    token ids (E, C) and their softmax-over-experts weights (E, C); every expert's load is
    C by construction, and a token may be taken by several experts or by none (chapter 18)."""
    g = logits.softmax(dim=-1)              # (T, E)
    weights, tokens = g.T.topk(capacity, dim=-1)
    return tokens, weights


def capacity_keep(idx, experts, capacity):
    """Which assignments fit: a token's slot at expert i is the number of earlier assignments
    to i (in token order, first choices of all tokens before second choices, as in Switch and
    GShard); slots ≥ C are dropped. Returns a bool mask shaped like ``idx`` (chapter 18)."""
    flat = idx.T.reshape(-1)                                   # choice-major order
    onehot = F.one_hot(flat, experts)
    slot = (onehot.cumsum(dim=0) - 1)[torch.arange(flat.numel()), flat]
    return (slot < capacity).reshape(idx.shape[1], idx.shape[0]).T


def expert_ffn(x, w1, w2):
    """One expert: W₂·GeLU(W₁·x) on a (n, H) block of tokens (chapter 18)."""
    return F.gelu(x @ w1) @ w2


def moe_dense(x, w_gate, w1, w2, k, capacity=None):
    """The whole layer in one process: route, (optionally) drop past ``capacity``, run every
    expert on its tokens, combine. Returns (y, info) with info holding the routing and the
    balance statistics (chapter 18)."""
    experts = w1.shape[0]
    logits = x @ w_gate.T
    weights, idx, g = route_topk(logits, k)
    keep = torch.ones_like(idx, dtype=torch.bool) if capacity is None \
        else capacity_keep(idx, experts, capacity)
    y = torch.zeros_like(x)
    for e in range(experts):
        tok, slot = ((idx == e) & keep).nonzero(as_tuple=True)
        if tok.numel():
            y = y.index_add(0, tok, weights[tok, slot, None] * expert_ffn(x[tok], w1[e], w2[e]))
    load = torch.bincount(idx[keep], minlength=experts)
    return y, dict(logits=logits, weights=weights, idx=idx, g=g, keep=keep, load=load)


def aux_loss(g, idx, experts, alpha=0.01):
    """αE·Σᵢ fᵢpᵢ: f from the (non-differentiable) top-k choices, p the mean probabilities,
    through which the gradient flows (chapter 18)."""
    f = torch.bincount(idx.reshape(-1), minlength=experts).to(g.dtype) / idx.numel()
    return alpha * experts * (f * g.mean(dim=0)).sum()


def z_loss(logits, coef=1e-3):
    """coef·(1/T)·Σₜ (log Σᵢ e^{hᵢ})²: keeps router logits small (ST-MoE; chapter 18)."""
    return coef * logits.logsumexp(dim=-1).pow(2).mean()


# ------------------------------------------------------------------ expert parallelism

def ep_forward(x, weights, idx, ffn, experts, group=None, log=None, sleep_per_token=0.0):
    """The layer's expert part on one rank of an EP group: dispatch, local experts, combine.

    ``x`` (T, H) are this rank's tokens, ``weights``/``idx`` (T, k) its routing, and
    ``ffn(block, e)`` runs expert e (a global id, one of the E/P this rank holds) on a block
    of rows: chapter 18's GeLU experts (chapter 25's too), or Mixtral's SwiGLU ones in
    chapter 36. The assignments are sorted by expert (:func:`permute`), which sorts them by
    destination rank; the ranks exchange their counts, send each rank its block (uneven
    splits), sort what arrived by local expert and run each local expert once on its
    contiguous block, undo that sort, send the results back and add them to their tokens
    with the routing weights. The all-to-alls carry gradients
    (``all_to_all_single_autograd``), so the backward pass runs the reverse all-to-alls and
    gradients reach the router, the experts and the inputs.

    ``log``, a dict, receives the splits and the bytes each all-to-all moved, for counting.
    ``sleep_per_token`` adds that many seconds per received token after the local experts:
    an emulated expert compute whose duration is known exactly, for timing on a shared CPU
    (chapter 18).
    """
    from torch.distributed._functional_collectives import all_to_all_single_autograd

    group = group if group is not None else dist.group.WORLD
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if experts % world:
        raise ValueError(f"experts ({experts}) must be a multiple of the group size ({world})")
    local = experts // world
    k = idx.shape[1]
    order, counts = permute(idx, experts)                # sorted by expert = by destination rank
    send = x[order // k]                                 # (T·k, H), token of each assignment
    # 1. exchange counts: rank r learns how many tokens each source sends to each of its experts
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    in_splits = counts.view(world, local).sum(1).tolist()
    from_src = recv_counts.view(world, local)            # [source rank, local expert]
    out_splits = from_src.sum(1).tolist()
    # 2. dispatch
    got = all_to_all_single_autograd(send, out_splits, in_splits, group)
    # 3. local experts: each source's block is sorted by expert; a stable sort by local
    #    expert makes each expert's rows one block, and index_copy undoes that sort
    expert_of = torch.arange(local).repeat(world).repeat_interleave(from_src.reshape(-1))
    local_order = expert_of.argsort(stable=True)
    ran = _grouped(got[local_order], from_src.sum(0), ffn, first=rank * local)
    out = torch.empty_like(got).index_copy(0, local_order, ran)
    if sleep_per_token:
        time.sleep(sleep_per_token * got.shape[0])
    # 4. combine: the reverse all-to-all, then weight and sum each token's k results
    back = all_to_all_single_autograd(out, in_splits, out_splits, group)
    y = torch.zeros_like(x).index_add(0, order // k, weights.reshape(-1)[order, None] * back)
    if log is not None:
        s = x.element_size() * x.shape[1]
        log.update(in_splits=in_splits, out_splits=out_splits, sent_bytes=sum(in_splits) * s,
                   received_bytes=sum(out_splits) * s, received_tokens=int(sum(out_splits)),
                   counts_bytes=counts.numel() * counts.element_size())
    return y


# ------------------------------------------------------------------ rank layout

def coordinates(rank, tp, ep):
    """(tp, ep, dp) coordinates of a global rank, the inverse of
    ``dtbook.moe.rank_of``: rank = dp·(t·e) + ep·t + tp (chapter 18)."""
    return rank % tp, (rank // tp) % ep, rank // (tp * ep)


def layout_groups(world, tp, ep):
    """The TP, EP and DP groups of a world of t·e·d ranks, as lists of rank lists: a group
    holds the ranks that differ only in its own coordinate (chapter 18)."""
    from dtbook.moe import rank_of

    dp = world // (tp * ep)
    if tp * ep * dp != world:
        raise ValueError(f"tp·ep ({tp}·{ep}) must divide world ({world})")
    r = lambda a, b, c: int(rank_of(a, b, c, tp, ep))
    return dict(
        tp=[[r(a, b, c) for a in range(tp)] for c in range(dp) for b in range(ep)],
        ep=[[r(a, b, c) for b in range(ep)] for c in range(dp) for a in range(tp)],
        dp=[[r(a, b, c) for c in range(dp)] for b in range(ep) for a in range(tp)])


def new_layout_groups(tp, ep):
    """Create every group of :func:`layout_groups` with ``dist.new_group`` (every rank must
    create every group, in the same order) and return this rank's three (chapter 18)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = {}
    for kind, groups in layout_groups(world, tp, ep).items():
        for ranks in groups:
            g = dist.new_group(ranks)
            if rank in ranks:
                mine[kind] = (g, ranks)
    return mine


# ------------------------------------------------------------------ token permutation (chapter 36)

__all__ += ["swiglu_expert", "permute", "moe_permuted", "moe_loop"]


def swiglu_expert(x, w1, w3, w2):
    """One Mixtral expert: W₂·(SiLU(W₁x) ⊙ W₃x) on a (n, H) block of tokens, with ``w1``,
    ``w3`` of shape (H, F) and ``w2`` (F, H) (chapter 36)."""
    return (F.silu(x @ w1) * (x @ w3)) @ w2


def permute(idx, experts):
    """The token permutation of a (T, k) routing: ``order``, the T·k assignments sorted by
    expert with a stable sort (assignment a is token a // k, choice a % k; ties keep token
    order), and ``counts``, assignments per expert, so that expert e's tokens are the
    contiguous rows counts[:e].sum() … counts[:e + 1].sum() − 1 (chapter 36)."""
    flat = idx.reshape(-1)
    return flat.argsort(stable=True), torch.bincount(flat, minlength=experts)


def _grouped(rows, counts, ffn, first=0):
    """Run expert first + e on its contiguous block of ``rows``: one GEMM chain per expert."""
    blocks = rows.split(counts.tolist())
    return torch.cat([ffn(b, first + e) if len(b) else b for e, b in enumerate(blocks)])


def moe_permuted(x, weights, idx, ffn, experts):
    """The routed experts by token permutation (MegaBlocks-style, without padding): gather
    the T·k assignments sorted by expert, run each expert once on its contiguous block
    (``ffn(block, e)``), and scatter the weighted results back to their tokens (the unpermute,
    an index_add). Equal to :func:`moe_loop` (chapter 36)."""
    k = idx.shape[1]
    order, counts = permute(idx, experts)
    out = _grouped(x[order // k], counts, ffn)
    w = weights.reshape(-1)[order, None]
    return torch.zeros_like(x).index_add(0, order // k, w * out)


def moe_loop(x, weights, idx, ffn):
    """The reference: every token, every one of its k choices, one expert call on one row
    (chapter 36)."""
    y = torch.zeros_like(x)
    for t in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[t, j])
            y[t] += weights[t, j] * ffn(x[t:t + 1], e)[0]
    return y
