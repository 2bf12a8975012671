"""The investigation protocol's arithmetic and its tools for logs (chapter 33).

Formulas (plain arithmetic: numbers, NumPy arrays and SymPy symbols alike):
:func:`risk_ratio`, :func:`bisection_steps`, :func:`drop`, :func:`incident_gpu_hours`,
:func:`incident_cost`, :func:`extra_time_fraction`.

Tools that read what a run left behind (text and numbers, no processes):
:func:`classify` sorts a log into OOM / network / numerical / hardware / unknown with a
confidence and the line that decided it, :func:`triage` does it for every rank of a job and
names the rank to look at first, :func:`bisect` finds the first failing value of a monotone
test (a world size, a batch size, a layer count) in ⌈log₂ (bad − good)⌉ trials,
:func:`event_risk_ratios` measures how much an event raises the chance of a failure in the
window after it, and :func:`simulate_event_log` writes an event log whose answer is known.
:func:`localize` reads per-rank compute and communication times and says whether one rank
straggles or the communication of every rank is slow.

The runs that produce the logs (faults injected into real gloo jobs) are
:mod:`dtbook.parallel.investigation`.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from dtbook import _validate as check

__all__ = [
    "POSTMORTEM", "risk_ratio", "log_risk_ratio_se", "bisection_steps", "drop", "incident_gpu_hours", "incident_cost",
    "extra_time_fraction", "slowdown", "CATEGORIES", "PATTERNS", "Verdict", "classify", "triage",
    "Bisection", "bisect", "simulate_event_log", "event_risk_ratios", "localize",
]


#: The original edition's worked post-mortem ("the 3 AM throughput collapse", a composite
#: incident): what its report states, as given. Chapter 33 computes everything else from
#: these (the drops, MFU, the all-reduce time the bus bandwidth predicts, the costs).
POSTMORTEM = {
    "params": 70e9, "gpus": 256, "gpus_per_node": 8, "tp": 8, "dp": 32,
    "tokens_per_s": 142e3, "tokens_per_s_bad": 89e3, "tokens_per_s_fixed": 139e3,
    "step": 7.0, "step_bad": 11.2, "compute": 4.1, "allreduce": 2.9, "allreduce_bad": 7.1,
    "busbw": 42.3e9, "busbw_bad": 17.1e9, "mfu_printed": 0.41, "mfu_bad_printed": 0.26,
    "phases_min": {"triage": 5, "localization": 15, "isolation": 20, "root cause": 10,
                   "resolution": 30},
    "pause_min": 30, "price": 4.0, "run_days": 21, "day": 9, "remaining_days": 12,
    "printed_gpu_hours": 360, "printed_cost": 1440, "printed_undetected": 86e3,
    "crc_errors": 14_302, "flaps_per_h": 3, "alert_drop": 0.20, "crc_alert_per_h": 1000,
    "health_check_h": 6,
    "source": ("The Algebra of Distributed Training (original edition), chapter "
               "'Investigation Protocol', section 'Worked Post-Mortem'"),
}


# --------------------------------------------------------------------------- formulas

def risk_ratio(exposed_failures, exposed, unexposed_failures, unexposed):
    """P(failure | event) / P(failure | no event) from counts of windows (chapter 33).

    ``exposed`` windows follow an event and ``exposed_failures`` of them hold a failure;
    likewise for the windows with no event. 1 means the event tells nothing; above 1 it
    precedes failures more often than chance.
    """
    check.nonnegative("exposed_failures", exposed_failures)
    check.positive("exposed", exposed)
    check.positive("unexposed_failures", unexposed_failures)
    check.positive("unexposed", unexposed)
    return (exposed_failures / exposed) / (unexposed_failures / unexposed)


def log_risk_ratio_se(exposed_failures, exposed, unexposed_failures, unexposed):
    """Standard error of ln(risk ratio) from the four counts (Katz):
    √(1/a − 1/n₁ + 1/c − 1/n₀) (chapter 33). ln RR ± 1.96·SE is a 95 % interval."""
    check.positive("exposed_failures", exposed_failures)
    check.positive("exposed", exposed)
    check.positive("unexposed_failures", unexposed_failures)
    check.positive("unexposed", unexposed)
    return (1 / exposed_failures - 1 / exposed + 1 / unexposed_failures - 1 / unexposed) ** 0.5


def _numeric(x) -> bool:
    return not (isinstance(x, sp.Basic) and x.free_symbols)


def _whole(name, value):
    """A whole number as an int (a SymPy expression with symbols passes through)."""
    if isinstance(value, sp.Basic):
        if value.free_symbols:
            return value
        if value.is_integer:
            return int(value)
    elif isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    elif (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
          and math.isfinite(value) and float(value).is_integer()):
        return int(value)
    raise ValueError(f"{name} must be a whole number, got {value!r:.60}")


def bisection_steps(good, bad):
    """Trials to find the first failing value between a known-good ``good`` and a
    known-bad ``bad`` (integers, good < bad) by halving: ⌈log₂ (bad − good)⌉ (chapter 33).

    Each trial halves the interval [good, bad] (rounding up), and the search stops when its
    width is 1. Symbolic arguments give the ceiling expression.
    """
    good, bad = _whole("good", good), _whole("bad", bad)
    width = bad - good
    if isinstance(width, sp.Basic) and width.free_symbols:
        return sp.ceiling(sp.log(width, 2))
    if width < 1:
        raise ValueError(f"bad must be larger than good, got good={good!r}, bad={bad!r}")
    return (width - 1).bit_length()          # ⌈log₂ width⌉, exactly, for any integer


def drop(good, bad):
    """The fractional drop of a rate from ``good`` to ``bad``: 1 − bad/good (chapter 33).

    A bus-bandwidth drop (nccl-tests on a healthy and a suspect path), a throughput drop
    (tokens/s before and after an incident)."""
    check.positive("good", good)
    check.nonnegative("bad", bad)
    return 1 - bad / good


def extra_time_fraction(good, bad):
    """Extra wall-clock time to do the same work at rate ``bad`` instead of ``good``:
    good/bad − 1 (chapter 33). A 37.5 % throughput drop costs 60 % more time."""
    check.positive("good", good)
    check.positive("bad", bad)
    return good / bad - 1


def slowdown(comm_share, busbw_drop):
    """Step-time factor when the bus bandwidth of a step's (unoverlapped) collectives drops
    by ``busbw_drop`` and they took ``comm_share`` of the healthy step:
    (1 − s) + s / (1 − d) (chapter 33). Throughput falls to its inverse."""
    check.nonnegative("comm_share", comm_share)
    check.nonnegative("busbw_drop", busbw_drop)
    if _numeric(comm_share) and not np.all(np.asarray(comm_share, float) <= 1):
        raise ValueError(f"comm_share must be at most 1, got {comm_share!r}")
    if _numeric(busbw_drop) and not np.all(np.asarray(busbw_drop, float) < 1):
        raise ValueError(f"busbw_drop must be below 1, got {busbw_drop!r}")
    return (1 - comm_share) + comm_share / (1 - busbw_drop)


def incident_gpu_hours(devices, hours, waste=1.0):
    """GPU-hours lost: devices × hours × waste fraction (chapter 33). ``waste`` is 1 for
    an outage, the throughput drop for a slowdown."""
    check.positive("devices", devices)
    check.nonnegative("hours", hours)
    check.nonnegative("waste", waste)
    return devices * hours * waste


def incident_cost(devices, hours, waste, price_per_device_hour):
    """Dollars lost: devices × hours × waste × $/device-hour (chapter 33)."""
    check.nonnegative("price_per_device_hour", price_per_device_hour)
    return incident_gpu_hours(devices, hours, waste) * price_per_device_hour


# --------------------------------------------------------------------------- the classifier

CATEGORIES = ("oom", "hardware", "numerical", "network", "unknown")

#: (category, weight, regular expression): a log line that matches says the category with
#: that weight. A strong, specific phrase weighs 3, a telling one 2, a weak hint 1.
PATTERNS = (
    ("oom", 3, r"out of memory|OutOfMemoryError|can't allocate memory|Cannot allocate memory"),
    ("oom", 3, r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|std::bad_alloc"),
    ("oom", 2, r"killed by SIGKILL|oom[- ]?kill|Killed process \d+"),
    ("hardware", 3, r"\bXid\b|ECC error|uncorrectable|fallen off the bus|double[- ]bit"),
    ("hardware", 3, r"NVLink (?:error|down)|PCIe (?:error|bus error)|machine check|MCE\b"),
    ("hardware", 2, r"SIGBUS|Bus error|Input/output error|thermal|throttl|CRC error|link flap"),
    ("numerical", 3, r"\bnan\b|\binf\b|non-finite|not finite|FloatingPointError"),
    ("numerical", 2, r"overflow|underflow|loss (?:spike|scale)|grad(?:ient)? norm"),
    ("network", 3, r"NCCL (?:error|WARN)|ncclSystemError|ncclRemoteError|ncclInternalError"),
    ("network", 3, r"Timed out waiting|timed out|Timeout|deadline exceeded|watchdog"),
    ("network", 3, r"Connection (?:closed|reset|refused)|Broken pipe|peer"),
    ("network", 2, r"failed to pass monitoredBarrier|monitoredBarrier|mismatch between collectives"),
    ("network", 2, r"collective mismatch|Received data size|gloo|c10d|ProcessGroup|rendezvous"),
)
_COMPILED = tuple((cat, w, re.compile(rx, re.IGNORECASE)) for cat, w, rx in PATTERNS)


@dataclass(frozen=True)
class Verdict:
    """What :func:`classify` concluded: the category, a confidence in [0, 1] (the winning
    category's share of the evidence), the line that decided it, and every category's
    score."""

    category: str
    confidence: float
    evidence: str = ""
    scores: dict = field(default_factory=dict)


def classify(text) -> Verdict:
    """Sort a log (a rank's stderr, a traceback, one line) into a category (chapter 33).

    Every line is matched against :data:`PATTERNS` (a traceback's ``File "..."`` lines are
    skipped: a path through ``distributed_c10d.py`` is where an error passed, not what it
    was); a category's score is the heaviest pattern of that category any line matches, so
    a symptom repeated on many lines counts once. The highest score wins; ties go to the
    more specific category, in the order of :data:`CATEGORIES` (an allocator failure that
    closes a peer's socket is an OOM, not a network fault). The confidence is the winner's
    share of all the scores; a log that matches nothing is "unknown" with confidence 0.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string (a log), got {type(text).__name__}")
    scores = {c: 0 for c in CATEGORIES[:-1]}
    best_line = {}
    for line in text.splitlines():
        if line.lstrip().startswith('File "'):
            continue
        for cat in scores:
            w = max((w for c, w, rx in _COMPILED if c == cat and rx.search(line)), default=0)
            if w > scores[cat]:
                scores[cat] = w
                best_line[cat] = (w, line.strip())
    total = sum(scores.values())
    if total == 0:
        return Verdict("unknown", 0.0, "", scores)
    winner = max(scores, key=lambda c: (scores[c], -CATEGORIES.index(c)))
    return Verdict(winner, scores[winner] / total, best_line[winner][1], scores)


def triage(texts, failed_rank=None):
    """Classify every rank's log and name where to look first (chapter 33).

    ``texts`` maps rank -> log text; ``failed_rank`` is the rank a launcher reported first,
    if any. Returns ``(verdicts, focus)``: the per-rank :class:`Verdict` dict and the rank
    whose log is most specific (OOM, hardware or numerical before network and unknown, then
    the higher confidence, then ``failed_rank``, then the lowest rank). A rank that only
    reports a network symptom (a timeout, a closed peer) is usually a victim; the rank with a
    cause of its own is the one to read.
    """
    if not isinstance(texts, dict) or not texts:
        raise ValueError("texts must be a non-empty dict rank -> log text")
    verdicts = {r: classify(t) for r, t in texts.items()}
    focus = min(verdicts, key=lambda r: (CATEGORIES.index(verdicts[r].category),
                                         -verdicts[r].confidence, r != failed_rank, r))
    return verdicts, focus


# --------------------------------------------------------------------------- bisection

@dataclass
class Bisection:
    """The outcome of :func:`bisect`: the last passing and first failing value, and the
    trials made, in order, as (value, passed)."""

    good: object
    bad: object
    trials: list

    @property
    def steps(self) -> int:
        return len(self.trials)


def bisect(test, good, bad, values=None) -> Bisection:
    """Find where a monotone test starts failing, by halving (chapter 33).

    ``test(value)`` returns True when the run works. ``good`` must pass and ``bad`` fail
    (they are not run again). Without ``values`` the candidates are the integers between
    them; with ``values`` (sorted, e.g. the world sizes a cluster can run: powers of two,
    whole nodes) only those are tried. Makes at most ⌈log₂ (number of gaps)⌉ trials.
    """
    if not callable(test):
        raise ValueError(f"test must be callable, got {test!r}")
    if values is None:
        bisection_steps(good, bad)               # refuses anything but whole good < bad
        lo, hi, at = int(good), int(bad), (lambda i: i)
    else:
        values = list(values)
        if values != sorted(values) or len(set(values)) != len(values):
            raise ValueError("values must be sorted and distinct")
        if good not in values or bad not in values:
            raise ValueError(f"good ({good!r}) and bad ({bad!r}) must be among values")
        lo, hi, at = values.index(good), values.index(bad), values.__getitem__
        if lo >= hi:
            raise ValueError(f"bad must come after good, got good={good!r}, bad={bad!r}")
    trials = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        passed = bool(test(at(mid)))
        trials.append((at(mid), passed))
        lo, hi = (mid, hi) if passed else (lo, mid)
    return Bisection(at(lo), at(hi), trials)


# --------------------------------------------------------------------------- correlation

def simulate_event_log(kinds, base_rate, horizon, window, seed=0):
    """An event log with a known answer (chapter 33).

    Time is cut into windows of ``window`` seconds over ``horizon`` seconds. Each window
    starts with at most one event: kind ``k`` with probability ``kinds[k][0]``. A window with
    no event holds a failure with probability ``base_rate``; a window that starts with an
    event of kind ``k`` with probability ``base_rate × kinds[k][1]``, so the true risk ratio
    of kind ``k`` is ``kinds[k][1]``. Failures fall at a uniform time inside their window.
    Returns ``(events, failures)``: a list of (time, kind) and a list of times.
    """
    if not isinstance(kinds, dict) or not kinds:
        raise ValueError("kinds must be a dict kind -> (probability per window, risk ratio)")
    check.positive("horizon", horizon)
    check.positive("window", window)
    check.fraction("base_rate", base_rate)
    probs = np.array([float(p) for p, _ in kinds.values()])
    if probs.sum() > 1 or np.any(probs < 0):
        raise ValueError("kinds' probabilities must be >= 0 and sum to at most 1")
    if any(base_rate * r > 1 or r < 0 for _, r in kinds.values()):
        raise ValueError("base_rate × risk ratio must be a probability for every kind")
    rng = np.random.default_rng(seed)
    n = int(horizon // window)
    names = list(kinds)
    which = rng.choice(len(names) + 1, size=n, p=[*probs, 1 - probs.sum()])
    p_fail = np.array([base_rate * kinds[k][1] for k in names] + [base_rate])[which]
    failed = rng.random(n) < p_fail
    starts = np.arange(n) * window
    events = [(float(starts[i]), names[w]) for i, w in enumerate(which) if w < len(names)]
    failures = [float(starts[i] + rng.random() * window) for i in np.flatnonzero(failed)]
    return events, failures


def event_risk_ratios(events, failures, horizon, window):
    """Risk ratio of each event kind for a failure within ``window`` seconds after it
    (chapter 33).

    Exposed: the window [t, t + window) after each event of a kind; it counts as failed if
    a failure falls in it. Unexposed: the windows [i·window, (i + 1)·window) of the horizon
    that no event's window overlaps. Returns kind -> dict with the four counts and the
    ``risk_ratio``.
    """
    check.positive("horizon", horizon)
    check.positive("window", window)
    f = np.sort(np.asarray(failures, dtype=float))

    def any_in(lo, hi):
        return bool(np.searchsorted(f, hi, "left") > np.searchsorted(f, lo, "left"))

    starts = np.arange(int(horizon // window)) * window
    covered = np.zeros(starts.size, dtype=bool)
    for t, _ in events:  # grid windows touched by [t, t + window)
        first = int(t // window)
        last = int(np.ceil((t + window) / window)) - 1
        covered[max(first, 0):min(last, starts.size - 1) + 1] = True
    free = starts[~covered]
    unexposed = int(free.size)
    unexposed_failures = sum(any_in(s, s + window) for s in free)
    out = {}
    for kind in dict.fromkeys(k for _, k in events):
        ts = [t for t, k in events if k == kind]
        hit = sum(any_in(t, t + window) for t in ts)
        out[kind] = {"exposed": len(ts), "exposed_failures": hit, "unexposed": unexposed,
                     "unexposed_failures": unexposed_failures,
                     "risk_ratio": (risk_ratio(hit, len(ts), unexposed_failures, unexposed)
                                    if unexposed_failures else float("inf"))}
    return out


# --------------------------------------------------------------------------- localization

def localize(compute, comm, baseline_comm=None, tolerance=0.25):
    """Read a step's per-rank times the way the protocol's second phase does (chapter 33).

    ``compute`` and ``comm`` are per-rank seconds of one step (or a low quantile of many).
    Returns ``("straggler", rank)`` when one rank computes more than ``1 + tolerance`` times
    the median of the others (the others then wait for it inside their collective),
    ``("communication", None)`` when compute is even but the communication of the ranks
    exceeds ``baseline_comm`` by that factor, and ``("healthy", None)`` otherwise.
    """
    c = np.asarray(compute, dtype=float)
    m = np.asarray(comm, dtype=float)
    if c.ndim != 1 or c.shape != m.shape or c.size < 2:
        raise ValueError("compute and comm must be per-rank lists of the same length >= 2")
    if np.any(~np.isfinite(c)) or np.any(c < 0) or np.any(~np.isfinite(m)) or np.any(m < 0):
        raise ValueError("compute and comm must be finite seconds >= 0")
    check.positive("tolerance", tolerance)
    slowest = int(np.argmax(c))
    others = np.delete(c, slowest)
    if c[slowest] > (1 + tolerance) * np.median(others):
        return ("straggler", slowest)
    if baseline_comm is not None:
        check.positive("baseline_comm", baseline_comm)
        if np.median(m) > (1 + tolerance) * baseline_comm:
            return ("communication", None)
    return ("healthy", None)
