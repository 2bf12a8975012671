"""Synchronise less: local SGD, DiLoCo, SCAFFOLD and FedProx over gloo, and an asynchronous
parameter server on threads (chapter 29).

Each function runs on one rank of an initialised process group (inside a
:func:`dtbook.dist.launch` worker, or under ``torchrun``) and trains that rank's replica on
its own batches:

* :func:`local_sgd`: H optimizer steps on the replica, then one all-reduce that averages the
  parameters (one flat buffer, as PyTorch's ``PeriodicModelAverager`` does); with
  ``prox_mu`` > 0 the local loss gets FedProx's term μ/2·‖w − w_sync‖²;
* :func:`diloco`: H steps of an inner optimizer (AdamW in Douillard et al., 2023), then the
  pseudo-gradient Δ = w_sync − w_local is averaged and an outer optimizer (Nesterov SGD)
  steps the synced weights along it;
* :func:`scaffold`: local SGD whose steps are corrected by control variates, g − c_i + c,
  with the parameters' and control variates' updates averaged in one all-reduce;
* :func:`run_async_sgd`: P threads push gradients to a parameter server that applies each
  one when it arrives and records its staleness.

``on_sync(step, model)`` is called after every synchronisation with identical weights on
every rank, so a caller can evaluate there without communicating.
"""

from __future__ import annotations

import threading
import time

import numpy as np

__all__ = ["flat_average", "local_sgd", "diloco", "scaffold", "ParameterServer",
           "run_async_sgd"]


def _flat(tensors):
    import torch
    return torch.cat([t.reshape(-1) for t in tensors])


def _unflat(flat, tensors):
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def flat_average(tensors, world_size):
    """Average tensors over the ranks in place with one all-reduce of a flat buffer: n is
    the tensors' total bytes (chapter 29)."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        flat = _flat(tensors)
        dist.all_reduce(flat)
        flat /= world_size
        _unflat(flat, tensors)


def local_sgd(model, opt, batches, loss_fn, interval, world_size, prox_mu=0.0, on_sync=None):
    """Local SGD: step ``opt`` on each batch, average the parameters every ``interval``
    steps. ``prox_mu`` > 0 adds FedProx's μ/2·‖w − w_sync‖² to each local loss (chapter 29)."""
    import torch

    params = list(model.parameters())
    anchor = [p.detach().clone() for p in params]
    for step, batch in enumerate(batches, 1):
        opt.zero_grad()
        loss = loss_fn(model, batch)
        if prox_mu:
            loss = loss + prox_mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))
        loss.backward()
        opt.step()
        if step % interval == 0:
            flat_average([p.data for p in params], world_size)
            with torch.no_grad():
                for a, p in zip(anchor, params):
                    a.copy_(p)
            if on_sync:
                on_sync(step, model)
    return model


def diloco(model, inner_opt, outer_opt, batches, loss_fn, interval, world_size, on_sync=None):
    """DiLoCo: ``interval`` steps of ``inner_opt``, then the averaged pseudo-gradient
    Δ = w_sync − w_local becomes the gradient of ``outer_opt`` (built over the same
    parameters), which steps from w_sync (chapter 29)."""
    import torch

    params = list(model.parameters())
    synced = [p.detach().clone() for p in params]
    for step, batch in enumerate(batches, 1):
        inner_opt.zero_grad()
        loss_fn(model, batch).backward()
        inner_opt.step()
        if step % interval == 0:
            with torch.no_grad():
                delta = [s - p for s, p in zip(synced, params)]
            flat_average(delta, world_size)
            with torch.no_grad():
                for p, s, d in zip(params, synced, delta):
                    p.copy_(s)
                    p.grad = d
            outer_opt.step()
            outer_opt.zero_grad()
            with torch.no_grad():
                for s, p in zip(synced, params):
                    s.copy_(p)
            if on_sync:
                on_sync(step, model)
    return model


def scaffold(model, lr, batches, loss_fn, interval, world_size, on_sync=None):
    """SCAFFOLD (Karimireddy et al., 2020, option II, server step 1): plain SGD steps on
    g − c_i + c; at each sync c_i ← c_i − c + (w_sync − w_i)/(H·lr), and the updates of w and
    c are averaged in one all-reduce of 2Ψ values (chapter 29)."""
    import torch

    params = list(model.parameters())
    synced = [p.detach().clone() for p in params]
    c_local = [torch.zeros_like(p) for p in params]
    c_global = [torch.zeros_like(p) for p in params]
    for step, batch in enumerate(batches, 1):
        for p in params:
            p.grad = None
        loss_fn(model, batch).backward()
        with torch.no_grad():
            for p, ci, c in zip(params, c_local, c_global):
                p -= lr * (p.grad - ci + c)
        if step % interval == 0:
            with torch.no_grad():
                new_ci = [ci - c + (s - p) / (interval * lr)
                          for ci, c, s, p in zip(c_local, c_global, synced, params)]
                updates = [p - s for p, s in zip(params, synced)] + \
                          [n - ci for n, ci in zip(new_ci, c_local)]
            flat_average(updates, world_size)  # one call: Δw and Δc together
            with torch.no_grad():
                k = len(params)
                for p, s, dw in zip(params, synced, updates[:k]):
                    p.copy_(s + dw)
                    s.copy_(p)
                for c, dc in zip(c_global, updates[k:]):
                    c += dc
                for ci, n in zip(c_local, new_ci):
                    ci.copy_(n)
            if on_sync:
                on_sync(step, model)
    return model


class ParameterServer:
    """Weights behind a lock, a version counter, and the staleness of every push
    (chapter 29). ``lr_rule(tau)`` gives the learning rate of a gradient τ versions old."""

    def __init__(self, weights, lr_rule, loss_fn=None):
        self.w = np.array(weights, dtype=float)
        self.version = 0
        self.lr_rule = lr_rule
        self.loss_fn = loss_fn
        self.lock = threading.Lock()
        self.log = []        # (worker, version read, staleness) for every applied push
        self.discarded = []  # (worker, version read) of gradients still in flight at the end
        self.losses = []     # loss after every push
        self.stopped = False

    def read(self):
        with self.lock:
            return self.w.copy(), self.version

    def push(self, worker, grad, version_read, limit):
        """Apply a gradient computed on ``version_read``; then hand back the fresh weights
        in the same critical section (None once ``limit`` pushes are applied)."""
        with self.lock:
            if self.stopped:
                self.discarded.append((worker, version_read))
                return None
            tau = self.version - version_read
            self.w -= self.lr_rule(tau) * grad
            self.version += 1
            self.log.append((worker, version_read, tau))
            if self.loss_fn is not None:
                self.losses.append(float(self.loss_fn(self.w)))
            if self.version >= limit or not np.all(np.isfinite(self.w)):
                self.stopped = True  # the others' gradients in flight are discarded
                return None
            return self.w.copy(), self.version


def run_async_sgd(grad_fn, w0, workers, pushes, lr_rule, compute_time, loss_fn=None, seed=0):
    """Asynchronous SGD on ``workers`` threads until ``pushes`` gradients are applied
    (chapter 29). Each worker reads the weights, spends ``compute_time(rng)`` seconds (a
    sleep standing in for compute), pushes ``grad_fn(w)`` and reads again at once. All
    workers read version 0 before any computes. Returns the :class:`ParameterServer`."""
    server = ParameterServer(w0, lr_rule, loss_fn)
    start = threading.Barrier(workers)

    def work(i):
        rng = np.random.default_rng(seed + i)
        state = server.read()
        start.wait()
        while state is not None:
            w, version = state
            time.sleep(compute_time(rng))
            state = server.push(i, grad_fn(w), version, pushes)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return server
