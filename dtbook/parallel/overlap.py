"""Gradient all-reduce that overlaps the backward pass, by hand (chapter 31).

Data parallelism (chapter 14) all-reduces the gradients after ``loss.backward()``. They need
not wait: the last layer's gradients exist long before the first layer's. Here each
parameter gets a ``register_post_accumulate_grad_hook``; when every parameter of a bucket
(chapter 14's :func:`dtbook.parallel.data_parallel.bucket_plan`) has its gradient, the bucket is
flattened and sent with ``all_reduce(async_op=True)``, and the backward pass goes on while
gloo's thread moves the bytes. :meth:`BucketedAllReduce.finish` waits for what is still in
flight and writes the averages back. With ``overlap=False`` the same buckets are all-reduced
one after another in ``finish``, after the backward pass: the serial baseline.

:class:`Timeline` records, per rank, when each layer computed and when each bucket was
ready, sent and done (``time.perf_counter``); :class:`EmulatedCompute` wraps a layer so that
its backward sleeps a fixed time before the layer's gradients are formed. The chapter uses
the sleep because two cores shared by several processes do not run real matrix products and
gloo's thread side by side reproducibly; a sleep holds no core, as a GPU kernel holds no
CPU core, so the communication thread runs beside it.

``link=`` emulates the wire the same way: each bucket first spends ``link(nbytes)`` seconds
asleep on one link thread (buckets in the order they are ready, one at a time, as on one
link), then is all-reduced for real. With sleeps on both sides the overlap is a property of
the schedule, not of the machine's load. ``link`` is called where the bucket becomes ready
(in the hook, or in ``finish``), so a bad return value raises there, not on the link thread.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
import torch.distributed as dist

from .data_parallel import bucket_plan

__all__ = ["Timeline", "EmulatedCompute", "BucketedAllReduce"]


class Timeline:
    """Spans (kind, label, start, end) in seconds of ``time.perf_counter`` on one rank
    (chapter 31). Safe to add to from gloo's completion thread."""

    def __init__(self):
        self.spans: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()

    def add(self, kind: str, label: str, start: float, end: float) -> None:
        with self._lock:
            self.spans.append((kind, label, float(start), float(end)))

    @contextmanager
    def span(self, kind: str, label: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(kind, label, t0, time.perf_counter())

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()

    def shifted(self, origin: float) -> list[tuple[str, str, float, float]]:
        """The spans with times measured from ``origin``, sorted by start."""
        return sorted((k, lab, s - origin, e - origin) for k, lab, s, e in self.spans)

    def total(self, kind: str) -> float:
        """Summed duration of the spans of one kind."""
        return sum(e - s for k, _, s, e in self.spans if k == kind)


class _SleepInBackward(torch.autograd.Function):
    """Identity forward; the backward sleeps ``seconds`` (the emulated compute) first."""

    @staticmethod
    def forward(ctx, x, seconds, label, timeline):
        ctx.seconds, ctx.label, ctx.timeline = seconds, label, timeline
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        t0 = time.perf_counter()
        time.sleep(ctx.seconds)
        if ctx.timeline is not None:
            ctx.timeline.add("compute", ctx.label, t0, time.perf_counter())
        return grad, None, None, None


class EmulatedCompute(torch.nn.Module):
    """``layer`` whose backward costs ``t_backward`` seconds more, spent sleeping before the
    layer's own gradients are formed (chapter 31)."""

    def __init__(self, layer: torch.nn.Module, t_backward: float, label: str = "layer",
                 timeline: Timeline | None = None):
        super().__init__()
        self.layer, self.t_backward, self.label, self.timeline = layer, t_backward, label, timeline

    def forward(self, x):
        return _SleepInBackward.apply(self.layer(x), self.t_backward, self.label, self.timeline)


class BucketedAllReduce:
    """Average gradients over the ranks in buckets of about ``cap`` bytes (chapter 31).

    ``overlap=True``: a bucket's all-reduce starts, asynchronously, from the hook of the last
    of its parameters to receive a gradient. ``overlap=False``: every bucket is all-reduced in
    :meth:`finish`, after the backward pass. Call :meth:`finish` after each ``backward()``.
    ``link``: a function of a bucket's bytes giving the seconds it spends on an emulated link
    (a sleep on one link thread) before its real all-reduce; None sends at once. It must
    return a non-negative number of seconds; anything else is a ``ValueError`` naming
    ``link``, raised from the ``backward()`` or :meth:`finish` that made the bucket ready.
    After :meth:`remove`, :meth:`finish` raises ``RuntimeError``.
    """

    def __init__(self, parameters, cap, world_size, overlap=True, timeline=None, group=None,
                 link=None):
        if link is not None and not callable(link):
            raise ValueError(f"link must be None or a function of the bytes, got {link!r}")
        self.params = [p for p in parameters if p.requires_grad]
        self.plan = bucket_plan([p.numel() * p.element_size() for p in self.params], cap)
        self.bucket_of = {i: b for b, idx in enumerate(self.plan) for i in idx}
        self.world_size, self.overlap, self.group = world_size, overlap, group
        self.timeline = timeline if timeline is not None else Timeline()
        self._missing = [len(idx) for idx in self.plan]
        self._flat = [None] * len(self.plan)
        self._inflight = []
        self._hooks = []
        self._removed = False
        self.link = link
        self._wire = ThreadPoolExecutor(max_workers=1) if link is not None else None
        if overlap:
            for i, p in enumerate(self.params):
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda p, i=i: self._ready(i)))

    def bucket_bytes(self) -> list[int]:
        """Bytes of each bucket, in the order they are sent."""
        return [sum(self.params[i].numel() * self.params[i].element_size() for i in idx)
                for idx in self.plan]

    def _ready(self, i):
        b = self.bucket_of[i]
        self._missing[b] -= 1
        if self._missing[b] == 0:
            self._launch(b, async_op=True)

    def _launch(self, b, async_op):
        grads = [self.params[i].grad for i in self.plan[b]]
        if self._flat[b] is None:    # one buffer per bucket, kept: fresh pages cost page faults
            self._flat[b] = torch.empty(sum(g.numel() for g in grads), dtype=grads[0].dtype)
        flat = torch.cat([g.reshape(-1) for g in grads], out=self._flat[b])
        t0 = time.perf_counter()
        self.timeline.add("ready", f"bucket {b}", t0, t0)
        if self.link is not None:
            seconds = self._link_seconds(flat.numel() * flat.element_size())
            if async_op:
                done = self._wire.submit(self._over_link, b, flat, t0, seconds)
                self.timeline.add("launch", f"bucket {b}", t0, time.perf_counter())
                self._inflight.append((b, flat, done.result))
            else:
                self._over_link(b, flat, t0, seconds)
                self._write_back(b, flat)
            return
        if async_op:
            work = dist.all_reduce(flat, async_op=True, group=self.group)
            self.timeline.add("launch", f"bucket {b}", t0, time.perf_counter())
            # gloo completes the future on its own thread: that moment is when the bytes arrived
            done = work.get_future().then(
                lambda _f, b=b, t0=t0: self.timeline.add("comm", f"bucket {b}", t0,
                                                         time.perf_counter()))
            self._inflight.append((b, flat, done.wait))
        else:
            dist.all_reduce(flat, group=self.group)
            self.timeline.add("comm", f"bucket {b}", t0, time.perf_counter())
            self._write_back(b, flat)

    def _link_seconds(self, nbytes):
        """``link(nbytes)``, checked here, in the thread that made the bucket ready."""
        seconds = self.link(nbytes)
        if (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)
                or not math.isfinite(seconds) or seconds < 0):
            raise ValueError(f"link must return a non-negative number of seconds; "
                             f"link({nbytes}) returned {seconds!r}")
        return float(seconds)

    def _over_link(self, b, flat, t0, seconds):
        time.sleep(seconds)                                          # the emulated wire
        dist.all_reduce(flat, group=self.group)                      # the real sum
        self.timeline.add("comm", f"bucket {b}", t0, time.perf_counter())

    def _write_back(self, b, flat):
        flat /= self.world_size
        offset = 0
        for i in self.plan[b]:
            g = self.params[i].grad
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def finish(self) -> None:
        """Wait for every bucket (or, without overlap, send them all now) and write back the
        averaged gradients."""
        if self._removed:
            raise RuntimeError("finish() after remove(): the hooks and the link thread are "
                               "gone; make a new BucketedAllReduce")
        if not self.overlap:
            for b in range(len(self.plan)):
                self._launch(b, async_op=False)
        for b, flat, wait in self._inflight:
            wait()  # the all-reduce and what records its end
            self._write_back(b, flat)
        if any(m != 0 for m in self._missing) and self.overlap:
            raise RuntimeError(f"buckets never completed (parameters without gradients?): "
                               f"{[b for b, m in enumerate(self._missing) if m]}")
        self._inflight.clear()
        self._missing = [len(idx) for idx in self.plan]

    def remove(self) -> None:
        """Detach the hooks and stop the link thread; :meth:`finish` may not follow."""
        self._removed = True
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self._wire is not None:
            self._wire.shutdown(wait=True)
