"""Gradient compressors by hand, for the demos of chapter 28.

Each is a few lines a reader can check against the algebra of chapter 28:

* :func:`qsgd`: stochastic rounding of |g_i|/‖g‖ to s levels, unbiased;
* :func:`topk` and :func:`randk`: keep k entries (the largest, or k at random, rescaled by
  d/k so the estimate stays unbiased), returned as (indices, values);
* :class:`ErrorFeedback`: remember what a compressor dropped and add it back next step;
* :func:`powersgd_step`: one power iteration G ≈ P Qᵀ, as in PowerSGD;
* :func:`sparse_allreduce`: the sum over ranks of a sparse (index, value) message, by one
  all-gather of every rank's packed indices and values, then a scatter-add into a dense
  vector.

Everything works on flat 1-D tensors (a matrix for PowerSGD) and on one process, except
:func:`sparse_allreduce`, which runs inside a torch.distributed worker.
"""

from __future__ import annotations

__all__ = ["qsgd", "topk", "randk", "densify", "ErrorFeedback", "powersgd_step",
           "sparse_allreduce"]


def qsgd(g, s, generator=None):
    """QSGD with s levels (chapter 28): ‖g‖·sign(g_i)·ξ_i, ξ_i rounded at random to one of
    the two levels ℓ/s, (ℓ+1)/s around |g_i|/‖g‖, up with probability s|g_i|/‖g‖ − ℓ.
    A 2-D ``g`` is a batch of vectors, each quantised with its own norm."""
    import torch

    norm = g.norm(dim=-1, keepdim=True)
    scaled = s * g.abs() / norm.clamp_min(torch.finfo(g.dtype).tiny)   # in [0, s]
    low = scaled.floor()
    up = torch.rand(g.shape, generator=generator, dtype=g.dtype) < (scaled - low)
    return norm * g.sign() * (low + up.to(g.dtype)) / s


def topk(g, k):
    """The k entries of largest magnitude (chapter 28): (int64 indices, values)."""
    idx = g.abs().topk(k, sorted=False).indices
    return idx, g[idx]


def randk(g, k, generator=None):
    """k entries drawn without replacement, scaled by d/k so that E[densify] = g (chapter 28)."""
    import torch

    idx = torch.randperm(g.numel(), generator=generator)[:k]
    return idx, g[idx] * (g.numel() / k)


def densify(idx, values, numel):
    """The dense vector a sparse (indices, values) message stands for; repeated indices add."""
    import torch

    out = torch.zeros(numel, dtype=values.dtype)
    return out.index_add_(0, idx.long(), values)


class ErrorFeedback:
    """Error feedback (chapter 28): compress e + g instead of g, and keep what was dropped,
    e ← e + g − D(C(e + g)). ``compress(v)`` returns (indices, values); ``numel`` is d."""

    def __init__(self, numel, compress):
        import torch

        self.error = torch.zeros(numel)
        self.compress = compress

    def __call__(self, g):
        acc = self.error + g
        idx, values = self.compress(acc)
        self.error = acc - densify(idx, values.to(acc.dtype), acc.numel())
        return idx, values


def powersgd_step(G, Q):
    """One power iteration of rank r = Q.shape[1] (chapter 28): P = G Q, orthonormalise P,
    Q = Gᵀ P; returns (P, Q) with G ≈ P Qᵀ. Feeding Q back in (warm start) refines it."""
    import torch

    P = G @ Q
    P, _ = torch.linalg.qr(P)
    return P, G.T @ P


def sparse_allreduce(idx, values, numel, group=None, index_dtype=None):
    """Sum a sparse message over the ranks (chapter 28). Every rank packs its k indices and
    k values into one byte buffer, all-gathers every rank's buffer (k equal on all ranks),
    unpacks and adds them into a dense vector of ``numel`` entries; returns that dense sum in
    float32, on every rank. Indices travel as ``index_dtype`` (default int32: enough for 2³¹
    entries), values in their own dtype (send fp16 for 2 bytes each)."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    idx = idx.to(index_dtype or torch.int32).contiguous()
    values = values.contiguous()
    packed = torch.cat([idx.view(torch.uint8), values.view(torch.uint8)])  # one message
    gathered = torch.empty(world * packed.numel(), dtype=torch.uint8)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # torch 2.13 name
    gather(gathered, packed, group=group)
    rows = gathered.view(world, packed.numel())
    cut = idx.numel() * idx.element_size()
    all_idx = rows[:, :cut].contiguous().view(idx.dtype).reshape(-1)
    all_val = rows[:, cut:].contiguous().view(values.dtype).reshape(-1)
    return densify(all_idx, all_val.float(), numel)
