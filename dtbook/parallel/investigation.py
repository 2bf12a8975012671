"""Faults injected into real gloo jobs, and what each one leaves behind (chapter 33).

:func:`inject` runs a small data-parallel training loop on ``world`` local gloo ranks
(:func:`dtbook.dist.launch`) with one fault in one rank, the *culprit*:

``"oom"``
    the culprit asks the allocator for 2⁶⁰ bytes in step 1: a real allocation failure,
    raised and not caught, so the launcher stops the job and names the rank;
``"short"``
    the culprit's data runs out one batch early, so it leaves the loop while the others
    wait in the next gradient all-reduce until the process group's timeout;
``"skip"``
    the culprit skips the gradient all-reduce of step 1 and calls the next collective (the
    loss all-reduce, one element) while the others are in the gradient one;
``"nan"``
    one input of the culprit's batch in step 1 is NaN.

Options: ``detail`` turns on ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` for the training group (its
collectives are checked against each other before they run), ``monitored`` calls
``monitored_barrier`` at the start of every step, ``check`` all-gathers a finite-gradient
flag before the all-reduce and raises ``FloatingPointError`` naming the ranks that are not.
Every rank catches what its step raises and reports it (except for ``"oom"``), so a run
returns one record per rank: what the rank saw, in its own words.

:func:`step_breakdown` times a step's compute and its all-reduce on every rank in three
situations (healthy, one straggling rank, one slow link), with the compute a sleep and the
links given a bandwidth by :func:`dtbook.collectives.emulated_links`; it also measures the
bus bandwidth of the all-reduce alone (the nccl-tests of a cluster) and of each pair of
neighbours, which isolates the slow link. :func:`even_shards_work` is the test a scale
bisection runs: does a job whose global batch is split over ``world`` ranks still train?
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from dtbook.dist import LaunchError, launch

__all__ = ["FAULTS", "FAULT_STEP", "WIDTH", "FaultRun", "train", "inject", "step_breakdown",
           "breakdown_worker", "even_shards_work", "shard_loss"]

FAULTS = ("oom", "short", "skip", "nan", None)
FAULT_STEP = 1          # the step in which the culprit misbehaves
WIDTH = 256             # the model is a Linear(WIDTH, WIDTH): 65,792 parameters
_BATCH = 8


@dataclass
class FaultRun:
    """One injected run: ``records`` (rank -> what the rank reported, when every rank got
    to report) or ``error`` (the :class:`~dtbook.dist.LaunchError` when the launch itself
    failed), and ``texts`` (rank -> the text that rank left: its error message, or its
    traceback and the end of its stderr), what a log classifier reads."""

    fault: object
    culprit: int
    records: dict = field(default_factory=dict)
    error: LaunchError | None = None
    texts: dict = field(default_factory=dict)
    seconds: float = 0.0


def train(rank, world, fault=None, culprit=3, steps=4, timeout=2.0, detail=False,
          monitored=False, check=False, catch=True):
    """A launch worker: ``steps`` data-parallel steps of a Linear layer with SGD, one fault
    in rank ``culprit`` (see the module docstring). Returns this rank's record: steps done,
    the error it saw (``type`` and ``message``), seconds, and per step whether its averaged
    gradient was finite and how many entries were not (chapter 33)."""
    import torch
    import torch.distributed as dist

    if detail:  # what TORCH_DISTRIBUTED_DEBUG=DETAIL sets at start-up, for groups made now
        dist.set_debug_level(dist.DebugLevel.DETAIL)
    group = dist.new_group(timeout=timedelta(seconds=timeout))
    torch.manual_seed(0)
    model = torch.nn.Linear(WIDTH, WIDTH)
    gen = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(_BATCH, WIDTH, generator=gen), torch.randn(_BATCH, WIDTH, generator=gen))
               for _ in range(steps)]
    if fault == "short" and rank == culprit:
        batches = batches[:-1]                       # its shard ran out one batch early
    if fault == "nan" and rank == culprit:
        batches[FAULT_STEP][0][0, 0] = float("nan")  # one bad input
    record = {"rank": rank, "steps": 0, "type": None, "message": None, "finite": [],
              "nonfinite": [], "loss": []}
    t0 = time.perf_counter()
    try:
        for step, (x, y) in enumerate(batches):
            if monitored:
                dist.monitored_barrier(group, timeout=timedelta(seconds=timeout),
                                       wait_all_ranks=True)
            if fault == "oom" and rank == culprit and step == FAULT_STEP:
                torch.empty(2**60, dtype=torch.uint8)   # the allocator refuses
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            grad = torch.cat([p.grad.flatten() for p in model.parameters()])
            if check:
                ok = torch.tensor([float(torch.isfinite(grad).all())])
                flags = [torch.zeros(1) for _ in range(world)]
                dist.all_gather(flags, ok, group=group)
                bad = [r for r, f in enumerate(flags) if f.item() == 0]
                if bad:
                    raise FloatingPointError(f"non-finite gradient on rank(s) {bad} in step {step}")
            if not (fault == "skip" and rank == culprit and step == FAULT_STEP):
                dist.all_reduce(grad, group=group)
                grad /= world
            loss_sum = loss.detach().reshape(1)
            dist.all_reduce(loss_sum, group=group)
            record["loss"].append(loss_sum.item() / world)
            record["finite"].append(bool(torch.isfinite(grad).all()))
            record["nonfinite"].append(int((~torch.isfinite(grad)).sum()))
            with torch.no_grad():
                offset = 0
                for p in model.parameters():
                    p -= 0.1 * grad[offset:offset + p.numel()].view_as(p)
                    offset += p.numel()
            record["steps"] = step + 1
    except Exception as exc:
        if not catch:
            raise
        record["type"], record["message"] = type(exc).__name__, str(exc)
    record["seconds"] = time.perf_counter() - t0
    return record


def inject(fault, world=4, culprit=None, *, steps=4, timeout=2.0, detail=False,
           monitored=False, check=False, launch_timeout=60.0) -> FaultRun:
    """Run :func:`train` with one fault on ``world`` gloo ranks; see the module docstring.

    ``timeout`` is the training group's timeout in seconds (a hang ends after it);
    ``culprit`` defaults to the last rank (rank 2 for ``"oom"``, so that the rank the
    launcher names is not simply the last one). Returns a :class:`FaultRun`; nothing it
    started is left running. Used by chapter 33.
    """
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
    if isinstance(world, bool) or not isinstance(world, int) or world < 2:
        raise ValueError(f"world must be a whole number >= 2, got {world!r}")
    if culprit is None:
        culprit = 2 if fault == "oom" else world - 1
    if isinstance(culprit, bool) or not isinstance(culprit, int) or not 0 <= culprit < world:
        raise ValueError(f"culprit must be a rank in 0..{world - 1}, got {culprit!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be seconds > 0, got {timeout!r}")
    run = FaultRun(fault, culprit)
    t0 = time.perf_counter()
    try:
        records = launch(train, world, fault, culprit, steps, timeout, detail, monitored,
                         check, fault != "oom", timeout=launch_timeout)
        run.records = {r["rank"]: r for r in records}
        run.texts = {r["rank"]: (f"{r['type']}: {r['message']}" if r["type"] else "")
                     for r in records}
    except LaunchError as err:
        run.error = err
        for r in range(world):
            parts = [err.tracebacks.get(r, ""), err.logs.get(r, "")]
            if r == err.rank and not err.tracebacks.get(r):
                parts.append(str(err))        # died without a traceback: the launcher's words
            run.texts[r] = "\n".join(p for p in parts if p)
    run.seconds = time.perf_counter() - t0
    return run


# --------------------------------------------------------------------------- timing

def breakdown_worker(rank, world, t_compute, delay, straggler, nbytes, beta, beta_slow,
                     slow_pair, steps, repeats):
    """A launch worker: per-rank (compute, all-reduce) seconds of ``steps`` steps in three
    situations, then the bus-bandwidth tests (chapter 33). See :func:`step_breakdown`."""
    import torch
    import torch.distributed as dist

    from dtbook import collectives

    slow = set(slow_pair)

    def link(src, dst):
        return beta_slow if {src, dst} == slow else beta

    x = torch.ones(nbytes // 4)
    out = {"rank": rank}
    for name, links, late in (("healthy", beta, 0.0), ("straggler", beta, delay),
                              ("slow link", link, 0.0)):
        times = []
        for _ in range(steps + 1):                    # the first is a warm-up
            dist.barrier()
            t0 = time.perf_counter()
            time.sleep(t_compute + (late if rank == straggler else 0.0))   # forward + backward
            t1 = time.perf_counter()
            with collectives.emulated_links(links):
                collectives.all_reduce(x, "ring")
            times.append((t1 - t0, time.perf_counter() - t1))
        out[name] = times[1:]

    def busbw_test(links, group=None):                # all_reduce_perf: the collective alone
        seconds = []
        for _ in range(repeats + 1):
            dist.barrier(group)
            t0 = time.perf_counter()
            with collectives.emulated_links(links):
                collectives.all_reduce(x, "ring", group=group)
            seconds.append(time.perf_counter() - t0)
        return seconds[1:]

    out["busbw healthy"] = busbw_test(beta)
    out["busbw slow link"] = busbw_test(link)
    # neighbour pairs, two at a time on disjoint ranks: (0,1)+(2,3), then (1,2)+(3,0)
    pairs = [(r, (r + 1) % world) for r in range(world)]
    groups = {p: dist.new_group(list(p)) for p in pairs}
    out["pairs"] = {}
    for first in (0, 1):
        for p in pairs[first::2]:
            if rank in p:
                out["pairs"][p] = busbw_test(link, groups[p])
        dist.barrier()
    return out


def step_breakdown(world=4, *, t_compute, delay, straggler, nbytes, beta, beta_slow,
                   slow_pair, steps=4, repeats=3, launch_timeout=60.0):
    """Time a data-parallel step on ``world`` gloo ranks, healthy and with two faults
    (chapter 33).

    Each step sleeps ``t_compute`` seconds (the forward and backward) and then all-reduces
    ``nbytes`` with a hand-written ring whose links have bandwidth ``beta`` (emulated: a
    rank holds a message back for bytes/β before sending, :mod:`dtbook.collectives`). In
    the "straggler" runs rank ``straggler`` sleeps ``delay`` longer; in the "slow link"
    runs the link between the two ranks of ``slow_pair`` has ``beta_slow``. Returns one dict
    per rank: for each situation the (compute, all-reduce) seconds of ``steps`` steps after
    a warm-up; "busbw healthy" and "busbw slow link": the seconds of ``repeats`` all-reduces
    alone; "pairs": for each neighbour pair this rank belongs to, the seconds of a 2-rank
    all-reduce over the slow-link network.
    """
    if len(set(slow_pair)) != 2 or not all(0 <= r < world for r in slow_pair):
        raise ValueError(f"slow_pair must be two distinct ranks of 0..{world - 1}, got {slow_pair!r}")
    if not 0 <= straggler < world:
        raise ValueError(f"straggler must be a rank of 0..{world - 1}, got {straggler!r}")
    if nbytes % (4 * world) or nbytes <= 0:
        raise ValueError(f"nbytes must be a positive multiple of 4·world, got {nbytes!r}")
    return launch(breakdown_worker, world, t_compute, delay, straggler, nbytes, beta,
                  beta_slow, tuple(slow_pair), steps, repeats, timeout=launch_timeout)


# --------------------------------------------------------------------------- bisection

def shard_loss(rank, world, global_batch):
    """A launch worker: split a global batch of ``global_batch`` rows evenly by floor
    division, take this rank's rows, and all-reduce the mean loss (chapter 33). Beyond
    ``global_batch`` ranks a shard is empty and its mean is NaN."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    x = torch.randn(global_batch, 4)
    per_rank = global_batch // world
    shard = x[rank * per_rank:(rank + 1) * per_rank]
    loss = shard.square().mean().reshape(1)
    dist.all_reduce(loss)
    return loss.item() / world


def even_shards_work(world, global_batch=5, launch_timeout=60.0) -> bool:
    """Does the job of :func:`shard_loss` train at ``world`` ranks (a finite loss on every
    rank)? The test a scale bisection runs (chapter 33)."""
    import math

    losses = launch(shard_loss, world, global_batch, timeout=launch_timeout)
    return all(math.isfinite(v) for v in losses)
