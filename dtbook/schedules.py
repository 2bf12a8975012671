"""Pipeline schedules as data, and a discrete-event simulator that runs them (chapter 16).

A schedule is, for each pipeline rank, the ordered list of what that rank computes: an
:class:`Action` is a forward ``"F"``, a backward ``"B"`` (with the weight gradient included
unless the schedule splits it off) or a weight-gradient pass ``"W"``, for one microbatch of
one *stage*. With ``virtual_stages = v`` a rank holds v model chunks; the model has
``stages × v`` stages and rank r holds stages r, r + P, r + 2P, ... (the looped placement
Megatron and PyTorch use).

:func:`build` writes the lists for ``"gpipe"``, ``"1f1b"``, ``"interleaved-1f1b"`` and
``"zb-h1"``, and takes ``"dualpipe-v"`` from PyTorch (chapter 31a: :func:`dualpipe_v`, whose
bubble :func:`table2_bubble` bounds); :func:`simulate` runs any such lists under one cost model:

* a forward of a whole rank's share of the model takes ``t_forward``, its input-gradient
  backward ``t_backward`` and its weight-gradient backward ``t_weight`` (a chunk of an
  interleaved rank takes 1/v of each); a schedule that does not split the backward pays
  ``t_backward + t_weight`` in its ``"B"`` (so does any B with no W of its own, as in
  DualPipe-V, which mixes both);
* F(j, i) starts after F(j − 1, i); B(j, i) after B(j + 1, i) and after F(j, i); W(j, i)
  after B(j, i); a rank runs one action at a time, in its list's order;
* communication is free (chapter 16 prices it separately).

Sizes are bounded (:data:`MAX_STAGES`, :data:`MAX_MICROBATCHES`, :data:`MAX_VIRTUAL_STAGES`
and their product :data:`MAX_CHUNK_MICROBATCHES`), far above any published pipeline: beyond
them a ``ValueError`` names the argument instead of lists that never finish building.

If the lists can never finish (an action waits on one that waits, through the ranks' orders,
on it) :func:`simulate` raises :class:`DeadlockError` naming the cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Action", "SCHEDULES", "LATER_SCHEDULES", "build", "simulate", "Simulation", "DeadlockError",
           "book_1f1b", "from_torch", "dualpipe_v", "table2_bubble", "MAX_STAGES", "MAX_MICROBATCHES",
           "MAX_VIRTUAL_STAGES", "MAX_CHUNK_MICROBATCHES"]

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
# Chapter 31a's DualPipe-V is built from PyTorch's order and needs m >= 2P; it stays out of
# SCHEDULES, which chapter 16's explorer and dtbook.memory offer for any P and m.
LATER_SCHEDULES = ("dualpipe-v",)


@dataclass(frozen=True)
class Action:
    """One unit of work: ``kind`` "F", "B" or "W" of ``microbatch`` on model ``stage``."""
    kind: str
    microbatch: int
    stage: int

    def __str__(self):  # PyTorch prints actions as "3F1": stage, kind, microbatch
        return f"{self.stage}{self.kind}{self.microbatch}"


class DeadlockError(RuntimeError):
    """The schedule's orders and the data dependencies form a cycle: it can never finish."""


# Upper bounds on what the action lists may hold. No published pipeline comes near them
# (Llama 3 405B: 16 stages; Megatron-LM's trillion-parameter run: 64 stages of a few hundred
# micro-batches), and the pure-Python simulator takes about 20 us per action, so a schedule
# at the limit of MAX_CHUNK_MICROBATCHES still finishes in minutes where 10**400 would
# build lists forever.
MAX_STAGES = 1024
MAX_MICROBATCHES = 65536
MAX_VIRTUAL_STAGES = 64
MAX_CHUNK_MICROBATCHES = 1 << 22   # stages x virtual_stages x microbatches


def _whole(name, value, minimum=1, maximum=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r:.40}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum:,} (dtbook.schedules bounds the "
                         f"action lists; no real pipeline comes near), got {value!r:.40}")
    return value


def _sizes(stages, microbatches, virtual_stages=1, min_stages=1):
    """Checked (P, m, v): whole numbers within the module's bounds, and their product too."""
    P = _whole("stages", stages, min_stages, MAX_STAGES)
    m = _whole("microbatches", microbatches, 1, MAX_MICROBATCHES)
    v = _whole("virtual_stages", virtual_stages, 1, MAX_VIRTUAL_STAGES)
    if P * v * m > MAX_CHUNK_MICROBATCHES:
        raise ValueError(f"stages x virtual_stages x microbatches = {P * v * m:,} exceeds "
                         f"{MAX_CHUNK_MICROBATCHES:,}: fewer microbatches or stages, please")
    return P, m, v


# --------------------------------------------------------------------------- the schedules

def _gpipe(P, m):
    return [[Action("F", i, s) for i in range(m)] + [Action("B", i, s) for i in range(m)]
            for s in range(P)]


def _one_f_one_b(P, m):
    """Stage s: min(P − s − 1, m) warm-up forwards, then pairs (one F, one B), then the
    remaining backwards. Stage s must run P − s forwards before its first backward can
    arrive, and no more are needed: that is what bounds its activations by P − s."""
    out = []
    for s in range(P):
        warm = min(P - s - 1, m)
        acts = [Action("F", i, s) for i in range(warm)]
        for i in range(m - warm):
            acts += [Action("F", warm + i, s), Action("B", i, s)]
        acts += [Action("B", i, s) for i in range(m - warm, m)]
        out.append(acts)
    return out


def _interleaved(P, m, v):
    """Megatron's interleaved 1F1B: forwards go through the chunks in groups of P
    microbatches (chunk 0 for microbatches 0..P−1, then chunk 1 for the same, ...),
    backwards in the reverse chunk order; rank s warms up with 2(P − s − 1) + (v − 1)P
    forwards, then alternates one F and one B."""
    total = m * v

    def chunk_mb(k, backward):
        chunk = (k // P) % v
        return (v - 1 - chunk if backward else chunk), (k // (P * v)) * P + k % P

    out = []
    for s in range(P):
        warm = min(2 * (P - s - 1) + (v - 1) * P, total)
        acts, f, b = [], 0, 0

        def nxt(kind, k):
            c, i = chunk_mb(k, kind == "B")
            return Action(kind, i, c * P + s)

        for f in range(warm):
            acts.append(nxt("F", f))
        f = warm
        while f < total:
            acts += [nxt("F", f), nxt("B", b)]
            f, b = f + 1, b + 1
        while b < total:
            acts.append(nxt("B", b))
            b += 1
        out.append(acts)
    return out


def _zb_h1(P, m):
    """Zero-bubble H1: 1F1B's order with the backward split into B (input gradient, on the
    critical path) and W (weight gradient, off it). Stage s runs 1F1B's forwards and Bs in
    1F1B's order and lets up to s of its Ws wait, running them later where 1F1B would sit
    idle. The last stages, which 1F1B leaves with few activations, hold the waiting Ws, so
    no stage holds more than 1F1B's peak of P."""
    out = []
    for s in range(P):
        warm = min(P - s - 1, m)
        acts = [Action("F", i, s) for i in range(warm)]
        pending = []
        for i in range(m):
            if warm + i < m:
                acts.append(Action("F", warm + i, s))
            acts.append(Action("B", i, s))
            pending.append(i)
            if len(pending) > s:
                acts.append(Action("W", pending.pop(0), s))
        acts += [Action("W", i, s) for i in pending]
        out.append(acts)
    return out


def build(schedule, stages, microbatches, *, virtual_stages=1):
    """Per-rank ordered action lists of a named schedule (chapter 16).

    ``schedule`` is one of :data:`SCHEDULES` or ``"dualpipe-v"`` (chapter 31a,
    :func:`dualpipe_v`); ``stages`` is the number of pipeline ranks P;
    ``virtual_stages`` (v, chunks per rank) only for ``"interleaved-1f1b"``, which needs
    ``microbatches`` to be a multiple of ``stages``.
    """
    if schedule not in SCHEDULES + LATER_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; known: "
                         f"{', '.join(SCHEDULES + LATER_SCHEDULES)}")
    P, m, v = _sizes(stages, microbatches, virtual_stages)
    if schedule == "dualpipe-v":
        if v not in (1, 2):
            raise ValueError(f"dualpipe-v holds two chunks per rank; got virtual_stages={v}")
        return dualpipe_v(P, m)
    if schedule == "interleaved-1f1b":
        if m % P:
            raise ValueError(f"interleaved-1f1b needs microbatches to be a multiple of stages "
                             f"(it runs them in groups of P); got microbatches={m}, stages={P}")
        return _interleaved(P, m, v)
    if v != 1:
        raise ValueError(f"virtual_stages={v} applies to interleaved-1f1b only; "
                         f"{schedule} holds one stage per rank")
    return {"gpipe": _gpipe, "1f1b": _one_f_one_b, "zb-h1": _zb_h1}[schedule](P, m)


def book_1f1b(stages, microbatches):
    """The original edition's 1F1B listing, as data: stage s runs s + 1 warm-up forwards,
    then steady pairs backward first (one B, then one F), then the remaining backwards.
    :func:`simulate` shows it deadlocks (chapter 16)."""
    P, m, _ = _sizes(stages, microbatches)
    out = []
    for s in range(P):
        warm = min(s + 1, m)
        acts = [Action("F", i, s) for i in range(warm)]
        for i in range(m - warm):
            acts += [Action("B", i, s), Action("F", warm + i, s)]
        acts += [Action("B", i, s) for i in range(m - warm, m)]
        out.append(acts)
    return out


def dualpipe_v(stages, microbatches):
    """DualPipe-V (DeepSeek-V3's DualPipe folded into a V, chapter 31a), as PyTorch's
    ``ScheduleDualPipeV`` writes it: P ranks hold 2P stages, rank r holds stages r and
    2P − 1 − r; its overlapped ``F&B`` pairs run here one after the other (the simulator
    prices communication at zero, so overlap has nothing to hide). Needs torch and
    ``microbatches >= 2 * stages``. Simulate with ``virtual_stages=2``."""
    P, m, _ = _sizes(stages, microbatches, 2, min_stages=2)
    if m < 2 * P:
        raise ValueError(f"dualpipe-v needs microbatches >= 2 * stages; got microbatches={m}, "
                         f"stages={P}")
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    from torch.distributed.pipelining.schedules import ScheduleDualPipeV
    return from_torch(get_schedule_ops(ScheduleDualPipeV, P, m, num_stages_per_rank=2))


def table2_bubble(schedule, stages, t_forward, t_backward, t_weight=0.0, t_overlap=None):
    """Idle time per rank from DeepSeek-V3's Table 2 (arXiv 2412.19437), chapter 31a:
    1F1B ``(P − 1)(F + B)``, ZB1P ``(P − 1)(F + B − 2W)``, DualPipe
    ``(P/2 − 1)(F&B + B − 3W)`` with F, B, W one chunk's times and F&B the time of an
    overlapped forward-and-backward pair (``t_overlap``; default F + B, no overlap). Here B
    is the full backward (input and weight gradients), so B includes W. DualPipe-V on P
    ranks is DualPipe on 2P ranks folded in half: pass ``stages = 2P`` and chunk times.
    Under :func:`simulate` (no overlap) DualPipe-V's idle time stays within this figure when a
    backward takes at least a forward (tests/test_schedules.py); 1F1B's equals its figure."""
    P = _whole("stages", stages, 2, MAX_STAGES)
    F, B = _number("t_forward", t_forward, True), _number("t_backward", t_backward, True)
    W = _number("t_weight", t_weight)
    FB = F + B if t_overlap is None else _number("t_overlap", t_overlap, True)
    if schedule == "1f1b":
        return (P - 1) * (F + B)
    if schedule == "zb1p":
        return (P - 1) * (F + B - 2 * W)
    if schedule == "dualpipe":
        return (P / 2 - 1) * (FB + B - 3 * W)
    raise ValueError(f"unknown schedule {schedule!r}; Table 2 gives 1f1b, zb1p, dualpipe")


def from_torch(ops):
    """Turn PyTorch's per-rank action lists (``schedule.pipeline_order`` or
    ``torch.distributed.pipelining._schedule_visualizer.get_schedule_ops``) into ours:
    FORWARD → F, FULL_BACKWARD → B, BACKWARD_INPUT → B, BACKWARD_WEIGHT → W; idle slots
    (None) and gradient reductions are dropped (chapter 16). An OVERLAP_F_B pair (DualPipe-V)
    becomes its two actions, forward first (chapter 31a)."""
    kinds = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "B",
             "BACKWARD_WEIGHT": "W"}
    out = []
    for rank_ops in ops:
        acts = []
        for a in rank_ops:
            if a is None:
                continue
            if getattr(a.computation_type, "name", "") == "OVERLAP_F_B":
                acts += from_torch([list(a.sub_actions)])[0]
                continue
            kind = kinds.get(getattr(a.computation_type, "name", ""))
            if kind is None:
                continue  # REDUCE_GRAD and communication ops
            acts.append(Action(kind, int(a.microbatch_index), int(a.stage_index)))
        out.append(acts)
    return out


# --------------------------------------------------------------------------- the simulator

@dataclass
class Simulation:
    """What :func:`simulate` found (chapter 16).

    ``timeline[r]`` lists ``(action, start, end)`` for rank r in execution order;
    ``busy[r]`` is rank r's compute time; ``peak_activations[r]`` the most microbatches
    whose forward has started on rank r and whose last backward part (B, or W when split)
    has not finished, counted per stage (an interleaved rank holds one per chunk).
    """
    makespan: float
    timeline: list
    busy: list
    peak_activations: list
    stages: int
    microbatches: int
    virtual_stages: int
    schedule: str = ""
    bubble_fraction: float = field(init=False)

    def __post_init__(self):
        total = sum(self.busy)
        self.bubble_fraction = (1 - total / (self.stages * self.makespan)
                                if self.makespan > 0 else 0.0)

    def order(self, rank):
        """Rank ``rank``'s actions in the order it ran them, as strings ("3F1")."""
        return [str(a) for a, _, _ in self.timeline[rank]]


def _durations(orders, v, t_forward, t_backward, t_weight):
    """Per-kind durations, and the (microbatch, stage) pairs whose backward is split off a
    W. A B with no W of its own is a full backward and pays t_backward + t_weight (DualPipe-V
    mixes both kinds)."""
    split = {(a.microbatch, a.stage) for acts in orders for a in acts if a.kind == "W"}
    return {"F": t_forward / v, "B": t_backward / v, "W": t_weight / v,
            "B_full": (t_backward + t_weight) / v}, split


def _number(name, value, positive=False):
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if not bad:
        try:
            value = float(value)
        except OverflowError:  # an int beyond any float
            bad = True
    if bad or value != value or value in (float("inf"), float("-inf")) or value < 0 \
            or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r:.40}")
    return value


def simulate(schedule, stages, microbatches, *, virtual_stages=1, t_forward=1.0,
             t_backward=2.0, t_weight=0.0):
    """Run a schedule under the chapter's cost model and return a :class:`Simulation`
    (chapter 16).

    ``schedule`` is a name from :data:`SCHEDULES` or per-rank action lists (from
    :func:`build`, :func:`book_1f1b` or :func:`from_torch`). Raises :class:`DeadlockError`
    when the orders cannot complete, naming the actions that wait on each other.
    """
    P, m, v = _sizes(stages, microbatches, virtual_stages)
    tf = _number("t_forward", t_forward, positive=True)
    tb = _number("t_backward", t_backward, positive=True)
    tw = _number("t_weight", t_weight)
    if isinstance(schedule, str):
        if schedule == "dualpipe-v":
            v = 2  # two chunks per rank by construction, whatever was asked (chapter 31a)
        name, orders = schedule, build(schedule, P, m, virtual_stages=v)
    else:
        name, orders = "", [list(acts) for acts in schedule]
        if len(orders) != P:
            raise ValueError(f"schedule has {len(orders)} ranks' lists, stages={P}")
    dur, split = _durations(orders, v, tf, tb, tw)
    last = P * v - 1
    done: dict[Action, float] = {}
    free = [0.0] * P
    pos = [0] * P
    timeline = [[] for _ in range(P)]

    def deps(a):
        if a.kind == "F":
            return [Action("F", a.microbatch, a.stage - 1)] if a.stage > 0 else []
        if a.kind == "B":
            d = [Action("F", a.microbatch, a.stage)]
            return d + ([Action("B", a.microbatch, a.stage + 1)] if a.stage < last else [])
        return [Action("B", a.microbatch, a.stage)]

    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(P):
            while pos[r] < len(orders[r]):
                a = orders[r][pos[r]]
                need = deps(a)
                if any(d not in done for d in need):
                    break
                start = max([free[r]] + [done[d] for d in need])
                kind = a.kind if a.kind != "B" or (a.microbatch, a.stage) in split else "B_full"
                end = start + dur[kind]
                done[a] = end
                free[r] = end
                timeline[r].append((a, start, end))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise DeadlockError(_cycle(orders, pos, deps, done))
    busy = [sum(e - s for _, s, e in tl) for tl in timeline]
    peaks = [_peak(tl, split) for tl in timeline]
    return Simulation(max(free), timeline, busy, peaks, P, m, v, name)


def _peak(timeline, split):
    """Most activations held at once: +1 when a forward starts, −1 when the last backward
    part of that microbatch and stage ends."""
    events = []
    for a, start, end in timeline:
        if a.kind == "F":
            events.append((start, 1))
        elif a.kind == ("W" if (a.microbatch, a.stage) in split else "B"):
            events.append((end, -1))
    held = peak = 0
    for _, step in sorted(events):  # at equal times the release (-1) sorts first
        held += step
        peak = max(peak, held)
    return peak


def _cycle(orders, pos, deps, done):
    """Describe the wait-for cycle among the ranks' next actions."""
    where = {a: r for r, acts in enumerate(orders) for a in acts}
    waiting = {r: orders[r][pos[r]] for r in range(len(orders)) if pos[r] < len(orders[r])}
    lines, r, seen = [], next(iter(waiting)), []
    while r is not None and r not in seen:
        seen.append(r)
        a = waiting[r]
        missing = [d for d in deps(a) if d not in done]
        if not missing:
            break
        d = missing[0]
        owner = where.get(d)
        if owner is None:
            lines.append(f"rank {r} waits for {a}, which needs {d}, which no rank runs")
            break
        lines.append(f"rank {r} is at {a}, which needs {d} (rank {owner}'s list, still "
                     f"behind its {waiting.get(owner, 'end')})")
        r = owner
    return "the schedule deadlocks: " + "; ".join(lines)
