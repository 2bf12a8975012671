"""Data parallelism by hand: all-reduce the gradients, one tensor at a time or in buckets
(chapter 14).

After ``loss.backward()`` every rank holds the gradient of its own shard of the batch. By
the partitioning theorem the full-batch gradient is their average (equal shards) or their
weighted sum with weights |B_i|/|B| (unequal shards); an all-reduce computes it on every
rank, so every replica takes the same optimizer step. The functions here are the whole of it:

* :func:`allreduce_per_parameter`: one all-reduce per parameter tensor;
* :func:`bucket_plan` and :func:`allreduce_bucketed`: gradients packed into flat buffers of
  about ``cap`` bytes, walked in reverse parameter order (the order the backward pass
  produces them), one all-reduce per bucket, as PyTorch's DistributedDataParallel does;
* :func:`allreduce_weighted`: each rank scales by its share of the batch before summing;
* :func:`parameters_hash` and :func:`broadcast_parameters`: the replica invariant, checked
  and established.
"""

from __future__ import annotations

import hashlib

__all__ = ["bucket_plan", "allreduce_per_parameter", "allreduce_bucketed",
           "allreduce_weighted", "parameters_hash", "broadcast_parameters"]


def bucket_plan(nbytes, cap, first_cap=None) -> list[list[int]]:
    """Group parameters into buckets: indices into ``nbytes`` (each parameter's gradient
    bytes, in definition order), walked from the last parameter to the first (chapter 14).

    A bucket is closed as soon as it holds at least its limit: ``first_cap`` for the first
    bucket (default ``cap``), ``cap`` for every later one; so a bucket may exceed its limit
    by one tensor. This is the rule of DDP's ``compute_bucket_assignment_by_size``; DDP uses
    a 1 MiB first bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``) only when
    ``bucket_cap_mb`` is left at its default.
    """
    if cap <= 0 or (first_cap is not None and first_cap <= 0):
        raise ValueError(f"cap and first_cap must be > 0, got {cap!r} and {first_cap!r}")
    limit = cap if first_cap is None else first_cap
    plan, bucket, size = [], [], 0
    for i in reversed(range(len(nbytes))):
        bucket.append(i)
        size += nbytes[i]
        if size >= limit:
            plan.append(bucket)
            bucket, size, limit = [], 0, cap
    if bucket:
        plan.append(bucket)
    return plan


def allreduce_per_parameter(parameters, world_size, group=None):
    """Average every gradient over the ranks with one all-reduce per tensor (chapter 14)."""
    import torch.distributed as dist

    for p in parameters:
        dist.all_reduce(p.grad, group=group)
        p.grad /= world_size


def allreduce_bucketed(parameters, plan, world_size, group=None):
    """Average the gradients with one all-reduce per bucket of ``plan`` (from
    :func:`bucket_plan`): copy a bucket's gradients into one flat buffer, all-reduce it,
    copy the averages back (chapter 14)."""
    import torch
    import torch.distributed as dist

    params = list(parameters)
    for bucket in plan:
        grads = [params[i].grad for i in bucket]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=group)
        flat /= world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def allreduce_weighted(parameters, weight, group=None):
    """Unequal shards: each rank holds the mean gradient of its |B_i| examples; the
    full-batch mean is Σ_i w_i ∇L_{B_i} with w_i = |B_i|/|B|, an all-reduce of the weighted
    gradients (chapter 14)."""
    import torch.distributed as dist

    for p in parameters:
        p.grad *= weight
        dist.all_reduce(p.grad, group=group)


def parameters_hash(module) -> str:
    """SHA-256 of every parameter's bytes, in order: equal on all ranks exactly when the
    replicas are bit-for-bit identical (chapter 14)."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def broadcast_parameters(module, src=0, group=None):
    """Copy rank ``src``'s parameters to every rank: the invariant's base case (chapter 14)."""
    import torch.distributed as dist

    for p in module.parameters():
        dist.broadcast(p.data, src, group=group)
