"""ZeRO-1 and ZeRO-2 by hand: reduce-scatter the gradients, step AdamW on this rank's
shard, all-gather the parameters (chapter 20).

Every rank keeps the whole model (it still runs the whole forward and backward), but only
1/P of the optimizer: an fp32 copy of its shard of the flattened parameters (the "master"
shard) and AdamW's two moments for it. AdamW works element by element, so stepping each
shard on its own rank and gathering the shards gives exactly the update one process would
make. The two stages differ only in what happens to the full gradients after the
reduce-scatter: stage 1 keeps them, stage 2 frees them and keeps the reduced shard.
"""

from __future__ import annotations

__all__ = ["ShardedAdamW"]


def _collective(dist, name):
    """torch 2.13 names the flat-tensor collectives ``*_single`` and deprecates the older
    ``reduce_scatter_tensor``/``all_gather_into_tensor``; use whichever this torch has."""
    new = getattr(dist, f"{name}_single", None)
    old = "reduce_scatter_tensor" if name == "reduce_scatter" else "all_gather_into_tensor"
    return new if new is not None else getattr(dist, old)


class ShardedAdamW:
    """AdamW with its state sharded over the ranks of ``group`` (chapter 20).

    ``params`` are the model's parameters, identical on every rank; ``stage`` is 1 or 2;
    the keyword arguments go to ``torch.optim.AdamW``. Call :meth:`step` after
    ``loss.backward()``: it averages the gradients over the ranks and updates every rank's
    parameters in place.
    """

    def __init__(self, params, stage=2, group=None, **adamw):
        import torch
        import torch.distributed as dist

        if stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2, got {stage!r}")
        self.params, self.stage, self.group = list(params), stage, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        numel = sum(p.numel() for p in self.params)
        self.shard = -(-numel // self.world)           # pad the flat buffer to P equal shards
        flat = self._flatten([p.detach() for p in self.params])
        lo = self.rank * self.shard
        self.master = torch.nn.Parameter(flat[lo:lo + self.shard].clone())
        self.optimizer = torch.optim.AdamW([self.master], **adamw)

    def _flatten(self, tensors):
        import torch

        flat = torch.zeros(self.world * self.shard, dtype=torch.float32)
        torch.cat([t.reshape(-1).float() for t in tensors], out=flat[:sum(t.numel() for t in tensors)])
        return flat

    def step(self):
        import torch
        import torch.distributed as dist

        flat_grad = self._flatten([p.grad for p in self.params])
        if self.stage == 2:                            # ZeRO-2: the full gradients go
            for p in self.params:
                p.grad = None
        shard_grad = torch.empty(self.shard)
        _collective(dist, "reduce_scatter")(shard_grad, flat_grad, group=self.group)
        self.master.grad = shard_grad / self.world     # the mean over ranks, this shard only
        self.optimizer.step()
        flat = torch.empty(self.world * self.shard)
        _collective(dist, "all_gather")(flat, self.master.detach(), group=self.group)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    def state_bytes(self) -> dict:
        """Bytes this rank holds, by part, with the keys of ``memory.zero_state_breakdown``."""
        def nbytes(ts):
            return sum(t.numel() * t.element_size() for t in ts if t is not None)

        grads = [p.grad for p in self.params] if self.stage == 1 else [self.master.grad]
        moments = [v for s in self.optimizer.state.values() for k, v in s.items()
                   if k in ("exp_avg", "exp_avg_sq")]
        return {"params": nbytes(self.params), "grads": nbytes(grads),
                "master": nbytes([self.master]), "optimizer": nbytes(moments)}
