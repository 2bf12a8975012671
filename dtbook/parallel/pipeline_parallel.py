"""A pipeline stage runner: one rank executes its schedule's action list over send/recv
(chapter 16).

Separability, f = f_P ∘ ... ∘ f_1, lets rank s hold f_s alone. For a forward F(i) it
receives h_{s−1} of microbatch i from rank s − 1, computes h_s = f_s(h_{s−1}) and sends it
to rank s + 1; for a backward B(i) it receives ∂L/∂h_s from rank s + 1, back-propagates it
through f_s (accumulating the weight gradients) and sends ∂L/∂h_{s−1} to rank s − 1. The last
rank starts the backward from its loss, divided by m so that the accumulated gradient is the
minibatch mean. The order of the actions is the schedule's (:func:`dtbook.schedules.build`);
the runner only follows it.

Sends are ``isend`` (waited for at the end), receives are blocking ``recv``: a rank blocks
only on data it needs, so a schedule whose dependencies are acyclic cannot deadlock here, and
one whose dependencies form a cycle (:func:`dtbook.schedules.simulate` finds it) would. Each
message carries a tag: the microbatch, offset for gradients, so nothing is matched out of
order.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

__all__ = ["run_schedule"]

_GRAD_TAG = 1 << 20  # tags for gradients: microbatch + this; activations: the microbatch


def run_schedule(module, actions, rank, world, act_shape, *, inputs=None, targets=None,
                 loss_fn=None, microbatches, delay=None, clock=time.perf_counter, peers=None):
    """Run rank ``rank``'s ``actions`` (one stage per rank: GPipe, 1F1B) and return a dict:
    ``loss`` (the sum over microbatches of loss/m, on the last rank, else None),
    ``timeline`` (kind, microbatch, start, end per action on ``clock``, from the moment its
    input had arrived) and ``peak`` (most
    microbatches whose activations this rank held at once). Chapter 16.

    ``inputs``/``targets`` are the microbatches on the first/last rank; ``act_shape`` the
    shape of the tensor crossing every stage boundary. ``delay=(t_F, t_B)`` adds a sleep to
    each forward and backward, to emulate a stage's compute time. ``peers=(prev, next)``:
    the global ranks of the neighbouring stages when ``rank``/``world`` are the stage index
    and count inside a larger mesh (chapter 24); default ``(rank − 1, rank + 1)``.
    """
    prev, nxt = peers if peers is not None else (rank - 1, rank + 1)
    held, peak, pending, timeline = {}, 0, [], []
    total = torch.zeros(())
    first, last = rank == 0, rank == world - 1
    for a in actions:
        i = a.microbatch
        if a.kind == "F":
            if first:
                x = inputs[i]
            else:
                x = torch.empty(act_shape)
                dist.recv(x, prev, tag=i)
                x.requires_grad_(True)
            start = clock()  # the timeline shows work, not the wait for the input
            y = module(x)
            if delay:
                time.sleep(delay[0])  # the emulated compute ends before its result leaves
            if last:
                y = loss_fn(y, targets[i]) / microbatches
                total += y.detach()
            else:
                pending.append(dist.isend(y.detach(), nxt, tag=i))
            held[i] = (x, y)
            peak = max(peak, len(held))
        elif a.kind == "B":
            x, y = held.pop(i)
            if last:
                start = clock()
                y.backward()
            else:
                g = torch.empty(act_shape)
                dist.recv(g, nxt, tag=_GRAD_TAG + i)
                start = clock()
                y.backward(g)
            if delay:
                time.sleep(delay[1])
            if not first:
                pending.append(dist.isend(x.grad, prev, tag=_GRAD_TAG + i))
        else:
            raise ValueError(f"the runner executes F and B actions, got {a}")
        timeline.append((a.kind, i, start, clock()))
    for req in pending:
        req.wait()
    return {"loss": total.item() if last else None, "timeline": timeline, "peak": peak}
