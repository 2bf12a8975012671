"""3D parallelism by hand: Megatron TP inside each pipeline stage, 1F1B between stages, data
parallelism across replicas, all on one (DP, PP, TP) mesh (chapter 24).

Nothing here is new: the groups come from :class:`dtbook.mesh.Mesh` (chapter 23,
:func:`mesh_groups`), a stage
is a stack of :class:`dtbook.parallel.tensor_parallel.ParallelBlock` (chapter 15) cut from the
single-process model, the stage runs the 1F1B action list of :func:`dtbook.schedules.build`
with :func:`dtbook.parallel.pipeline_parallel.run_schedule` (chapter 16), and the replicas average
their gradients with :func:`dtbook.parallel.data_parallel.allreduce_bucketed` (chapter 14). The
point is that they compose: each axis talks only inside its own groups.

The model is a stack of pre-norm transformer layers (:class:`dtbook.parallel.tensor_parallel.Block`)
trained to regress random targets (mean-squared error); a step takes ``dp·m`` microbatches
of ``batch`` sequences, replica r getting microbatches r·m … r·m + m − 1.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dtbook import schedules
from dtbook.parallel.data_parallel import allreduce_bucketed
from dtbook.parallel.pipeline_parallel import run_schedule
from dtbook.parallel.tensor_parallel import Block, ParallelBlock

__all__ = ["make_model", "make_data", "train_reference", "shard_stage", "mesh_groups",
           "train_3d", "state_bytes"]


def make_model(hidden, heads, layers, seed=0):
    """The single-process model: ``layers`` transformer blocks, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(*(Block(hidden, heads) for _ in range(layers)))


def make_data(steps, sequences, seq, hidden, seed=1):
    """Inputs and targets of shape (steps, sequences, seq, hidden), seeded."""
    g = torch.Generator().manual_seed(seed)
    shape = (steps, sequences, seq, hidden)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def train_reference(model, xs, ys, lr):
    """One process, the whole batch per step, Adam: what the 3D run must reproduce.
    The loss is the mean over the batch, as the pipeline (loss/m) and DP (average) give."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def shard_stage(model, pp_rank, pp, tp_rank, tp, group=None):
    """Pipeline stage ``pp_rank`` of ``pp`` (consecutive layers), TP shard ``tp_rank`` of
    each of its layers, cut from the whole ``model``."""
    blocks = list(model)
    per = len(blocks) // pp
    return nn.Sequential(*(ParallelBlock(b, tp_rank, tp, group)
                           for b in blocks[pp_rank * per:(pp_rank + 1) * per]))


def mesh_groups(dims):
    """Every rank's coordinates and the groups of each axis of the (dp, pp, tp) mesh of shape
    ``dims``, from :class:`dtbook.mesh.Mesh` (chapter 23), as plain tuples. Call it in the
    parent and hand the result to the ranks: it imports SymPy (through dtbook.mesh), which
    costs each of eight ranks about a second of CPU."""
    from dtbook.mesh import Mesh

    m = Mesh(dims, names=("dp", "pp", "tp"))
    return {"dims": tuple(int(x) for x in dims),
            "coords": [m.coords(r) for r in range(m.size)],
            **{axis: m.groups(axis) for axis in ("dp", "pp", "tp")}}


def _new_groups(groups, rank, axes):
    """Create every group of every axis in ``axes`` (all ranks must, in the same order) and
    return the one holding ``rank`` for each."""
    mine = {}
    for axis in axes:
        for ranks in groups[axis]:
            g = dist.new_group(list(ranks))
            if rank in ranks:
                mine[axis] = g
    return mine


def state_bytes(module, optimizer):
    """Bytes of parameters, gradients and optimizer state (Adam's two moments; the step
    counters, one scalar per tensor, left out) this rank holds."""
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)
    params = list(module.parameters())
    moments = [v for s in optimizer.state.values() for k, v in s.items() if k != "step"]
    return {"params": nbytes(params), "grads": nbytes([p.grad for p in params]),
            "optimizer": nbytes(moments)}


def train_3d(rank, world, groups, model, xs, ys, *, lr, microbatches, counters=None):
    """Train ``model`` on the (dp, pp, tp) mesh described by ``groups`` (from
    :func:`mesh_groups`); this is rank ``rank``'s part.

    Returns this rank's coordinates, its stage's final ``state_dict``, the per-step loss (on
    the last stage) and :func:`state_bytes`. ``counters``: optional ``(schedule, dp)``
    context managers (a :class:`~dtbook.parallel.counting.CommCounter` each) entered around
    the pipeline schedule (which issues the TP all-reduces and the PP sends) and around the
    DP all-reduce of every step.
    """
    dp, pp, tp = groups["dims"]
    torch.set_default_dtype(xs.dtype)             # the runner's receive buffers match the data
    d, p, t = groups["coords"][rank]
    mine = _new_groups(groups, rank, ("tp", "dp"))  # the PP axis uses point-to-point sends
    stage = shard_stage(model, p, pp, t, tp, mine["tp"])
    pp_group = next(g for g in groups["pp"] if rank in g)
    peers = (pp_group[p - 1] if p > 0 else None, pp_group[p + 1] if p < pp - 1 else None)
    actions = schedules.build("1f1b", pp, microbatches)[p]
    opt = torch.optim.Adam(stage.parameters(), lr=lr)
    params = list(stage.parameters())
    one_bucket = [list(reversed(range(len(params))))]   # one all-reduce per step
    act_shape = (xs.shape[1] // (dp * microbatches),) + tuple(xs.shape[2:])  # one microbatch
    losses = []
    for x, y in zip(xs, ys):
        part = slice(d * microbatches, (d + 1) * microbatches)  # this replica's microbatches
        xb = x.reshape(dp * microbatches, *act_shape)[part]
        yb = y.reshape(dp * microbatches, *act_shape)[part]
        opt.zero_grad()
        with counters[0] if counters else _null():
            out = run_schedule(stage, actions, p, pp, act_shape, inputs=xb, targets=yb,
                               loss_fn=F.mse_loss, microbatches=microbatches, peers=peers)
        with counters[1] if counters else _null():
            allreduce_bucketed(params, one_bucket, dp, group=mine["dp"])
        opt.step()
        losses.append(out["loss"])
    return {"coords": (d, p, t), "state": {k: v.detach().clone() for k, v in stage.state_dict().items()},
            "losses": losses, "bytes": state_bytes(stage, opt)}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
