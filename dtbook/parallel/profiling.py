"""A data-parallel job profiled on gloo, and the reading of its Chrome traces (chapter 32).

Two halves. The first reads what ``torch.profiler`` writes: a Chrome trace is a list of
events, and a complete event (``"ph": "X"``) has a name, a thread, a start ``ts`` and a
duration ``dur`` in microseconds. A step's story is interval arithmetic over them: the
gradient all-reduces are the ``gloo:all_reduce`` events (``nccl:all_reduce`` under NCCL) on
the backend's threads, the backward pass is the autograd engine's
``autograd::engine::evaluate_function: ...`` events on the main thread, the forward is DDP's
``DistributedDataParallel.forward`` and the optimizer ``Optimizer.step#...``. With C the
union of the compute intervals and M the union of the communication intervals, the step's
overlap efficiency (chapter 32's formula, chapter 31's overlap fraction) is
|C ∩ M| / min(|C|, |M|): :func:`overlap_from_trace`. :func:`step_breakdown` splits a step's
window into forward, backward, optimizer, exposed communication and the rest, and
:func:`synthetic_trace` writes a trace whose answer is known, to check the reader.

The second half is the job itself, functions a ``dtbook.dist.launch`` worker calls on every
rank: :func:`profile_ddp` (DDP over a stack of linear layers whose backward sleeps a fixed
time, ``dtbook.parallel.overlap.EmulatedCompute``, under ``torch.profiler`` with a
``schedule(wait, warmup, active)``, ``record_shapes`` and ``with_flops``, one trace per
rank, and a DDP communication hook that times every bucket), :func:`straggler_steps` (one
rank slowed by a known delay, every rank's compute and communication time all-gathered),
:func:`allreduce_sweep` (the α-β calibration) and :func:`bucket_sweep` (DDP's
``bucket_cap_mb`` against chapter 14's bucket model).
"""

from __future__ import annotations

import json
import math
import os
import time

__all__ = ["union", "total", "intersection", "load_events", "spans", "comm_spans",
           "backward_spans", "step_windows", "collective_bytes", "overlap_from_trace",
           "overlap_from_spans", "step_breakdown", "synthetic_trace", "mlp",
           "profile_ddp", "straggler_steps", "allreduce_sweep", "bucket_sweep"]

COMM_PREFIXES = ("gloo:", "nccl:", "ncclDevKernel", "ncclKernel")
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
FORWARD_NAMES = ("DistributedDataParallel.forward",)
OPTIMIZER_PREFIX = "Optimizer.step"
STEP_PREFIX = "ProfilerStep#"
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4,
                "long int": 8, "signed char": 1, "unsigned char": 1, "bool": 1}


# --------------------------------------------------------------------------- intervals

def _check_span(s):
    try:
        a, b = float(s[0]), float(s[1])
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"spans must be (start, end) pairs of numbers, got {s!r}") from None
    if not (math.isfinite(a) and math.isfinite(b)) or b < a:
        raise ValueError(f"spans must be finite (start, end) pairs with end >= start, got {s!r}")
    return a, b


def union(spans_) -> list[tuple[float, float]]:
    """The union of (start, end) intervals, as sorted disjoint intervals (chapter 32)."""
    out: list[list[float]] = []
    for a, b in sorted(_check_span(s) for s in spans_):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def total(spans_) -> float:
    """Length of the union of intervals: time covered at least once (chapter 32)."""
    return sum(b - a for a, b in union(spans_))


def intersection(first, second) -> list[tuple[float, float]]:
    """The intervals covered by both unions (chapter 32)."""
    a, b = union(first), union(second)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _clip(spans_, window):
    lo, hi = window
    return [(max(a, lo), min(b, hi)) for a, b in spans_ if b > lo and a < hi]


# --------------------------------------------------------------------------- traces

def load_events(trace) -> list[dict]:
    """The complete events (``"ph": "X"``) of a Chrome trace: a path to the JSON file
    ``export_chrome_trace`` wrote, the loaded dict, or a list of events (chapter 32)."""
    if isinstance(trace, (str, os.PathLike)):
        with open(trace) as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise ValueError(f"trace must be a path, a Chrome trace dict or a list of events, "
                         f"got {type(trace).__name__}")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e]


def spans(events, prefix, main_thread=None) -> list[tuple[float, float]]:
    """(start, end) in seconds of the events whose name starts with ``prefix`` (a string or
    a tuple of them); ``main_thread=True`` keeps the events on the process's main thread
    (tid == pid), False those off it, None all (chapter 32)."""
    out = []
    for e in events:
        if not str(e.get("name", "")).startswith(prefix):
            continue
        if main_thread is not None and (e.get("tid") == e.get("pid")) != main_thread:
            continue
        out.append((e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6))
    return sorted(out)


def comm_spans(events, window=None) -> list[tuple[float, float]]:
    """The collectives' spans (``gloo:...``, ``nccl:...``), optionally clipped to a window
    (chapter 32)."""
    found = spans(events, COMM_PREFIXES)
    return _clip(found, window) if window else found


def backward_spans(events, window=None) -> list[tuple[float, float]]:
    """The backward pass's compute: the autograd engine's ``evaluate_function`` events on
    the main thread, optionally clipped to a window (chapter 32)."""
    found = spans(events, BACKWARD_PREFIX, main_thread=True)
    return _clip(found, window) if window else found


def step_windows(events) -> list[tuple[float, float]]:
    """The profiled steps, one (start, end) per ``ProfilerStep#N`` (chapter 32)."""
    return spans(events, STEP_PREFIX, main_thread=True)


def collective_bytes(events, window=None) -> list[int]:
    """Bytes of each collective's input, from the shapes ``record_shapes=True`` stores
    (``Input Dims`` and ``Input type``), in start order (chapter 32)."""
    out = []
    for e in sorted(events, key=lambda e: e["ts"]):
        if not str(e.get("name", "")).startswith(COMM_PREFIXES):
            continue
        t = e["ts"] * 1e-6
        if window and not window[0] <= t < window[1]:
            continue
        args = e.get("args", {})
        dims, types = args.get("Input Dims", []), args.get("Input type", [])
        n = 0
        for d, ty in zip(dims, types):
            count = math.prod(d) if isinstance(d, list) else 0
            n += count * _DTYPE_BYTES.get(ty, 0)
        out.append(n)
    return out


def overlap_from_spans(compute, comm) -> dict:
    """T_c = |C|, T_m = |M|, the time covered T = |C ∪ M|, the hidden time |C ∩ M| and the
    overlap efficiency 1 − (T − max)/(T_c + T_m − max) = |C ∩ M|/min(T_c, T_m) of two sets of
    intervals (chapter 32)."""
    t_c, t_m = total(compute), total(comm)
    hidden = total(intersection(compute, comm))
    t = total(list(compute) + list(comm))
    shorter = min(t_c, t_m)
    return {"t_compute": t_c, "t_comm": t_m, "t_total": t, "hidden": hidden,
            "efficiency": hidden / shorter if shorter > 0 else float("nan")}


def overlap_from_trace(events, window=None) -> dict:
    """:func:`overlap_from_spans` of the backward pass and the collectives of one trace, inside
    ``window`` (a profiled step) or over the whole trace (chapter 32)."""
    return overlap_from_spans(backward_spans(events, window), comm_spans(events, window))


def step_breakdown(events, window) -> dict:
    """Split a step's window into forward, backward, optimizer, exposed communication (a
    collective running while the main thread computes none of the three) and other (the rest:
    the Python between, zeroing gradients, the wait for the last bucket's reduction, idle);
    the parts add up to the window exactly (chapter 32)."""
    lo, hi = window
    fwd = union(_clip(spans(events, FORWARD_NAMES, main_thread=True), window))
    bwd = union(_clip(spans(events, BACKWARD_PREFIX, main_thread=True), window))
    opt = union(_clip(spans(events, OPTIMIZER_PREFIX, main_thread=True), window))
    taken: list = []
    parts = {}
    for name, s in (("forward", fwd), ("backward", bwd), ("optimizer", opt)):
        parts[name] = total(s) - total(intersection(s, taken))
        taken = union(taken + s)
    m = comm_spans(events, window)
    parts["exposed comm"] = total(m) - total(intersection(m, taken))
    taken = union(taken + m)
    parts["other"] = (hi - lo) - total(taken)
    return parts


def synthetic_trace(compute, comm, step=None, pid=1, comm_tid=2, name="gloo:all_reduce") -> dict:
    """A Chrome trace with the given compute intervals (as backward ``evaluate_function``
    events on the main thread) and communication intervals (as collectives on another
    thread), in seconds, and optionally a ``ProfilerStep#1`` window: a trace whose answer is
    known, to test a reader (chapter 32)."""
    def event(n, tid, a, b, **args):
        a, b = _check_span((a, b))
        return {"ph": "X", "name": n, "pid": pid, "tid": tid, "ts": a * 1e6, "dur": (b - a) * 1e6,
                "args": args}
    events = [event(f"{BACKWARD_PREFIX}: MmBackward0", pid, a, b) for a, b in compute]
    events += [event(name, comm_tid, a, b, **{"Input Dims": [[1]], "Input type": ["float"]})
               for a, b in comm]
    if step is not None:
        events.append(event(f"{STEP_PREFIX}1", pid, *step))
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# --------------------------------------------------------------------------- the job

def mlp(layers, width, t_backward, timeline=None, seed=0):
    """``layers`` bias-free linear layers of ``width``, each backward sleeping ``t_backward``
    seconds (``EmulatedCompute``): Ψ = layers·width², and a known compute time (chapter 32)."""
    import torch

    from .overlap import EmulatedCompute

    torch.manual_seed(seed)
    return torch.nn.Sequential(*[
        EmulatedCompute(torch.nn.Linear(width, width, bias=False), t_backward, f"layer {i}",
                        timeline) for i in range(layers)])


def _batch(rank, batch, width, seed=1):
    import torch

    g = torch.Generator().manual_seed(seed + rank)
    return torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)


def profile_ddp(rank, world, trace_dir, *, layers, width, batch, t_backward, cap_mb,
                wait=1, warmup=1, active=2):
    """Train ``wait + warmup + active`` DDP steps of :func:`mlp` under ``torch.profiler``
    (CPU activities, ``schedule(wait, warmup, active)``, ``record_shapes``, ``with_flops``),
    writing this rank's Chrome trace to ``trace_dir/rank{rank}.json``. A communication hook
    records each bucket's bytes, the moment it was handed to the backend and the moment its
    future completed (``time.perf_counter``), and a :class:`~dtbook.parallel.overlap.Timeline`
    the backward's sleeps, for the active steps. Returns the trace's path, the hook's and the
    timeline's records per active step, the profiler's FLOP total, and the top operators of
    its ``key_averages()`` (chapter 32)."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .overlap import Timeline

    timeline = Timeline()
    model = DDP(mlp(layers, width, t_backward, timeline), bucket_cap_mb=cap_mb)
    state = {"step": -1}
    hook_log: dict = {}

    def timed_hook(_, bucket):
        n = bucket.buffer().numel() * bucket.buffer().element_size()
        t0 = time.perf_counter()
        step = state["step"]

        def done(fut):
            hook_log.setdefault(step, []).append((n, t0, time.perf_counter()))
            return fut.value()
        return default_hooks.allreduce_hook(None, bucket).then(done)

    model.register_comm_hook(None, timed_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _batch(rank, batch, width)
    path = os.path.join(trace_dir, f"rank{rank}.json")
    steps = wait + warmup + active
    compute: dict = {}
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active),
            record_shapes=True, with_flops=True,
            on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for step in range(steps):
            state["step"] = step
            timeline.clear()
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            compute[step] = [(s, e) for kind, _, s, e in timeline.spans if kind == "compute"]
            prof.step()
    first = wait + warmup
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    return {"trace": path, "active": list(range(first, steps)),
            "hook": {s: sorted(hook_log.get(s, []), key=lambda r: r[1]) for s in range(first, steps)},
            "compute": {s: compute[s] for s in range(first, steps)},
            "flops": sum(e.flops for e in prof.key_averages()),
            "top_ops": [(e.key, e.count, e.self_cpu_time_total * 1e-6) for e in ops[:8]]}


def straggler_steps(rank, world, *, layers, width, batch, delay, slow_rank, repeats):
    """Plain data-parallel steps of :func:`mlp` (no sleeps): each rank times its compute
    (forward and backward) and then the all-reduce of its flattened gradient; in the slowed
    steps ``slow_rank`` sleeps ``delay`` seconds inside its compute. Baseline and slowed steps
    alternate, ``repeats`` of each; every rank's (compute, comm, step) times are all-gathered.
    Returns {"base": [...], "slow": [...]}, each a list over repeats of per-rank triples
    (chapter 32)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    model = mlp(layers, width, 0.0)
    params = list(model.parameters())
    x, y = _batch(rank, batch, width)
    out = {"base": [], "slow": []}
    for rep in range(repeats + 1):                     # repeat 0 warms up
        for mode in ("base", "slow"):
            for p in params:
                p.grad = None
            dist.barrier()
            t0 = time.perf_counter()
            F.mse_loss(model(x), y).backward()
            if mode == "slow" and rank == slow_rank:
                time.sleep(delay)
            t1 = time.perf_counter()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            t2 = time.perf_counter()
            mine = torch.tensor([t1 - t0, t2 - t1, t2 - t0], dtype=torch.float64)
            every = [torch.zeros(3, dtype=torch.float64) for _ in range(world)]
            dist.all_gather(every, mine)
            if rep:
                out[mode].append([t.tolist() for t in every])
    return out


def allreduce_sweep(rank, world, sizes, repeats=5):
    """Fastest all-reduce time (the slowest rank's, ``dtbook.dist.timed``) of fp32 buffers of
    each size in bytes, the sizes interleaved round by round (chapter 32's α-β calibration)."""
    import torch

    from ..dist import timed

    import torch.distributed as dist

    buffers = {n: torch.ones(max(1, n // 4)) for n in sizes}
    best = {n: math.inf for n in sizes}
    for round_ in range(repeats):
        for n in sizes:
            t = timed(dist.all_reduce, buffers[n], warmup=2 if round_ == 0 else 0, repeats=1)[0]
            best[n] = min(best[n], t)
    return best


def bucket_sweep(rank, world, caps_mb, *, layers, width, batch, t_backward, repeats=3):
    """DDP's backward pass (all buckets reduced) timed for each ``bucket_cap_mb``, the
    configurations interleaved round by round, the fastest of ``repeats`` kept (the slowest
    rank's time); a communication hook records every bucket's bytes. Returns
    {cap: (seconds, [bucket bytes of the last step])} (chapter 32)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = _batch(rank, batch, width)
    runs = {}
    for cap in caps_mb:
        seen: list = []

        def hook(log, bucket):
            log.append(bucket.buffer().numel() * bucket.buffer().element_size())
            return default_hooks.allreduce_hook(None, bucket)
        model = DDP(mlp(layers, width, t_backward), bucket_cap_mb=cap)
        model.register_comm_hook(seen, hook)
        runs[cap] = (model, seen)
    best = {cap: math.inf for cap in caps_mb}
    for rep in range(repeats + 2):                      # two warm-up steps rebuild the buckets
        for cap, (model, seen) in runs.items():
            loss = F.mse_loss(model(x), y)
            seen.clear()
            dist.barrier()
            t0 = time.perf_counter()
            loss.backward()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            model.zero_grad(set_to_none=True)
            if rep >= 2:
                best[cap] = min(best[cap], t.item())
    return {cap: (best[cap], list(runs[cap][1])) for cap in caps_mb}
