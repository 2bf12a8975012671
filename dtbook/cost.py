"""The money side of training: what a run costs, what failures add, renting against buying.

Chapter 05 derives everything here from one chain. A run needs C = 6ΨD FLOP (chapter 01,
:mod:`dtbook.flops`); one device delivers F·η FLOP per second at peak F and model FLOP
utilisation η, so the run takes C / (F η) device-seconds whatever the number of devices, and
at R dollars per device-hour it costs

    cost = C / (F η) / 3600 · R · m

where m ≥ 1 is the overhead multiplier of failures: work lost since the last checkpoint,
restarts, and the time spent writing checkpoints. Cost is proportional to 1/η, so one point of
MFU at η is worth about 1/η of the bill per point; and cost does not depend on the device
count, which only sets how long the run takes.

Renting at R per device-hour against owning at a total cost of ownership TCO per device
breaks even after TCO / R device-hours of use.

Prices are inputs. :data:`PRICES` and :data:`ONPREM_TCO` hold the ranges the original edition
quotes for 2024–25 (its chapter 05), dated and labelled as the book's; quote your own
provider's figures when you have them.

Every formula is plain arithmetic on numbers, NumPy arrays or SymPy symbols. Times are in
seconds, rates in per-second, money in dollars; device-hours are named as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from . import _validate as check
from . import flops
from .units import hour, year

__all__ = [
    "PriceRange", "PRICES", "ONPREM_TCO", "PRICE_SOURCE", "DEEPSEEK_V3", "price",
    "device_hours", "flop_per_device_hour", "run_cost", "cost_per_token", "mfu_point_value",
    "tokens_for_budget", "devices_for_budget", "required_mfu",
    "job_failure_rate", "failure_multiplier", "failure_multiplier_exact",
    "breakeven_failure_rate", "simulate_failures",
    "breakeven_device_hours", "breakeven_time", "breakeven_utilization", "scaled_mfu", "month",
]

month = year / 12  # an average calendar month, 30.44 days


# --------------------------------------------------------------------------------------
# Price data: the book's 2024–25 ranges, labelled as such
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PriceRange:
    """A dollar range (low, high) as quoted by a source, with the period it describes."""

    low: float
    high: float
    source: str = ""
    as_of: str = ""

    @property
    def mid(self) -> float:
        """The midpoint of the range, for a single default figure."""
        return (self.low + self.high) / 2


PRICE_SOURCE = ("Ranges quoted in the original edition's chapter 05 for 2024–25 (cloud list and "
                "market prices); not re-verified against current quotes. Prices move: "
                "pass your own.")

#: $ per device-hour by (device, tier), tiers "on-demand", "reserved", "spot".
PRICES: dict[tuple[str, str], PriceRange] = {
    ("h100-sxm", "on-demand"): PriceRange(4.0, 5.0, PRICE_SOURCE, "2024–25"),
    ("h100-sxm", "reserved"): PriceRange(2.0, 3.0, PRICE_SOURCE, "2024–25"),
    ("h100-sxm", "spot"): PriceRange(1.0, 2.0, PRICE_SOURCE, "2024–25"),
    ("a100-80gb", "on-demand"): PriceRange(2.0, 3.0, PRICE_SOURCE, "2024–25"),
    ("a100-80gb", "reserved"): PriceRange(1.5, 2.0, PRICE_SOURCE, "2024–25"),
    ("a100-80gb", "spot"): PriceRange(0.5, 1.0, PRICE_SOURCE, "2024–25"),
    ("h200", "on-demand"): PriceRange(6.0, 6.0, PRICE_SOURCE, "2024–25"),
    ("h200", "reserved"): PriceRange(4.0, 5.0, PRICE_SOURCE, "2024–25"),
}

#: On-premises total cost of ownership per device over its service life, $ (purchase, share
#: of servers and network, power, cooling, space, operations). The book's figure for an H100:
#: about $50–60k, of which the GPU itself is about $30k.
ONPREM_TCO: dict[str, PriceRange] = {
    "h100-sxm": PriceRange(50e3, 60e3, PRICE_SOURCE, "2024–25"),
}

#: DeepSeek-V3's reported training bill, as published: GPU-hours on H800s and the rental
#: price the report assumed. Source: DeepSeek-AI, "DeepSeek-V3 Technical Report",
#: arXiv:2412.19437 (2024), Table 1 (pre-training 2,664K, context extension 119K,
#: post-training 5K H800 GPU-hours; $2 per GPU-hour), and its sections on the model
#: (671B total, 37B activated parameters; 14.8T training tokens; 2,048 H800 GPUs).
DEEPSEEK_V3 = {
    "gpu_hours": 2_788e3,
    "pretraining_gpu_hours": 2_664e3,
    "price_per_gpu_hour": 2.0,
    "gpus": 2048,
    "tokens": 14.8e12,
    "active_params": 37e9,
    "total_params": 671e9,
    "source": "DeepSeek-V3 Technical Report, arXiv:2412.19437, Table 1",
}


def price(device: str, tier: str = "on-demand") -> PriceRange:
    """The book's 2024–25 price range for ``device`` at ``tier`` ($ per device-hour;
    chapter 05). Raises ``ValueError`` listing what is known."""
    key = (device, tier)
    if key not in PRICES:
        known = ", ".join(f"{d}/{t}" for d, t in PRICES)
        raise ValueError(f"no price for device={device!r}, tier={tier!r}; known: {known}")
    return PRICES[key]


# --------------------------------------------------------------------------------------
# The cost of a run
# --------------------------------------------------------------------------------------

def device_hours(params, tokens, peak_flops, mfu=1.0):
    """Device-hours to train: 6ΨD / (F η) / 3600 (chapter 05).

    The time one device would take (:func:`dtbook.flops.training_time` with one device),
    in hours: P devices take 1/P of the wall-clock time and the same device-hours.
    """
    return flops.training_time(params, tokens, peak_flops, mfu) / hour


def flop_per_device_hour(peak_flops, mfu=1.0):
    """Useful FLOP one device delivers in an hour: F · η · 3600 (chapter 05).

    An H100 at 989 TFLOP/s and 45% MFU delivers 1.6e18 FLOP per hour.
    """
    check.positive("peak_flops", peak_flops)
    check.fraction("mfu", mfu)
    return peak_flops * mfu * hour


def run_cost(params, tokens, peak_flops, price_per_device_hour, mfu=1.0, overhead=1.0):
    """Dollars to train Ψ parameters on D tokens (chapter 05).

    6ΨD / (F η) device-seconds at ``price_per_device_hour``, times ``overhead`` ≥ 1 for
    failures and checkpointing (see :func:`failure_multiplier`). Built on
    :func:`dtbook.flops.training_cost`, so the two cannot drift apart. Independent of the
    device count: perfect scaling is assumed, and imperfect scaling shows up as a lower η
    (see :func:`scaled_mfu`).
    """
    _at_least_one("overhead", overhead)
    return flops.training_cost(params, tokens, peak_flops, price_per_device_hour, mfu) * overhead


def cost_per_token(total_cost, tokens):
    """Dollars per training token, C_total / D (chapter 05); times 1e9 for $ per billion."""
    check.nonnegative("total_cost", total_cost)
    check.positive("tokens", tokens)
    return total_cost / tokens


def mfu_point_value(params, tokens, peak_flops, price_per_device_hour, mfu, points=0.01,
                    overhead=1.0):
    """Dollars saved by raising MFU from η to η + ``points`` on a given run (chapter 05).

    cost(η) − cost(η + δ) = cost(η) · δ / (η + δ): at 40% MFU one point (δ = 0.01) is worth
    about 2.4% of the bill. Negative ``points`` give the (positive) extra cost of losing MFU
    as a negative saving.
    """
    check.fraction("mfu", mfu)
    check.fraction("mfu + points", mfu + points)
    base = run_cost(params, tokens, peak_flops, price_per_device_hour, mfu, overhead)
    better = run_cost(params, tokens, peak_flops, price_per_device_hour, mfu + points, overhead)
    return base - better


def tokens_for_budget(budget, params, peak_flops, price_per_device_hour, mfu=1.0, overhead=1.0):
    """Training tokens a budget buys: budget / (R m) · 3600 F η / (6Ψ) (chapter 05).

    The inverse of :func:`run_cost` in the tokens: run_cost(Ψ, tokens_for_budget(B, ...)) = B.
    """
    check.nonnegative("budget", budget)
    check.positive("params", params)
    check.positive("price_per_device_hour", price_per_device_hour)
    _at_least_one("overhead", overhead)
    seconds = budget / (price_per_device_hour * overhead) * hour
    return seconds * flops.tokens_per_second(params, peak_flops, mfu)


def devices_for_budget(budget, price_per_device_hour, duration):
    """The most devices a budget can rent for ``duration`` seconds: B / (R · T/3600)
    (chapter 05). A real number: round down to a count that suits your layout."""
    check.nonnegative("budget", budget)
    check.positive("price_per_device_hour", price_per_device_hour)
    check.positive("duration", duration)
    return budget / (price_per_device_hour * duration / hour)


def required_mfu(params, tokens, peak_flops, devices, duration):
    """The MFU a run must reach to train Ψ on D tokens with P devices in T seconds:
    η = 6ΨD / (P F T) (chapter 05). Above 1 (or, in practice, above ~0.5) the plan is
    infeasible."""
    check.positive("peak_flops", peak_flops)
    check.positive("devices", devices)
    check.positive("duration", duration)
    return flops.training_flops(params, tokens) / (devices * peak_flops * duration)


# --------------------------------------------------------------------------------------
# Failures and preemption as a multiplier on time (and so on cost)
# --------------------------------------------------------------------------------------

def _at_least_one(name, value):
    arr = check._numeric(name, value)
    if arr is not None and not (np.all(np.isfinite(arr)) and np.all(arr >= 1)):
        raise ValueError(f"{name} must be a finite number >= 1, got {value!r}")
    return value


def job_failure_rate(devices, device_mtbf):
    """Failures per second of a job on P devices, each failing independently with mean time
    between failures ``device_mtbf`` seconds: λ = P / MTBF (chapter 05; chapter 26 goes
    further). 1,000 GPUs with a 50,000-hour MTBF fail about once every 50 hours."""
    check.positive("devices", devices)
    check.positive("device_mtbf", device_mtbf)
    return devices / device_mtbf


def _loss_per_failure(checkpoint_interval, restart_time):
    return checkpoint_interval / 2 + restart_time


def failure_multiplier(failure_rate, checkpoint_interval, checkpoint_overhead=0, restart_time=0):
    """Wall-clock (and cost) multiplier of a run that fails or is preempted (chapter 05).

    Failures arrive at ``failure_rate`` λ per second of wall-clock time; the run checkpoints
    every ``checkpoint_interval`` c seconds of work, which costs a fraction
    ``checkpoint_overhead`` o of the time; each failure loses on average half an interval of
    work plus ``restart_time`` r. Then T_eff = (1 + o) T + λ T_eff (c/2 + r), so

        m = T_eff / T = (1 + o) / (1 − λ (c/2 + r)).

    This is the first-order model the book uses (it counts lost work as c/2 per failure);
    it is accurate while λc ≪ 1 and too pessimistic beyond that: see
    :func:`failure_multiplier_exact`. Raises ``ValueError`` when λ(c/2 + r) ≥ 1, where the
    model says the run never finishes.
    """
    check.nonnegative("failure_rate", failure_rate)
    check.nonnegative("checkpoint_interval", checkpoint_interval)
    check.nonnegative("checkpoint_overhead", checkpoint_overhead)
    check.nonnegative("restart_time", restart_time)
    lost = failure_rate * _loss_per_failure(checkpoint_interval, restart_time)
    arr = check._numeric("failure_rate", lost)
    if arr is not None and np.any(arr >= 1):
        raise ValueError("failure_rate × (checkpoint_interval/2 + restart_time) must be < 1 "
                         f"(got {lost!r}): at that rate the first-order model never finishes")
    return (1 + checkpoint_overhead) / (1 - lost)


def failure_multiplier_exact(failure_rate, checkpoint_interval, checkpoint_overhead=0,
                             restart_time=0):
    """The same multiplier for Poisson failures, without the first-order approximation
    (chapter 05).

    Work proceeds in segments of c seconds, each followed by a checkpoint write of o·c
    seconds; a segment and its write (w = (1 + o)c of wall-clock time) must finish without a
    failure, else the time since the last checkpoint is lost and r seconds go to the restart.
    For failures at rate λ the expected time to get one segment through is the renewal
    result (e^{λw} − 1)(1/λ + r), so

        m = (e^{λw} − 1)(1/λ + r) / c.

    To first order in λ this is (1 + o)(1 + λ(w/2 + r)), the same as
    :func:`failure_multiplier` when o is small; the notebook checks both against a
    Monte-Carlo simulation. ``failure_rate`` 0 gives 1 + o.
    """
    check.nonnegative("failure_rate", failure_rate)
    check.positive("checkpoint_interval", checkpoint_interval)
    check.nonnegative("checkpoint_overhead", checkpoint_overhead)
    check.nonnegative("restart_time", restart_time)
    lam, c, o, r = failure_rate, checkpoint_interval, checkpoint_overhead, restart_time
    if any(isinstance(v, sp.Basic) and v.free_symbols for v in (lam, c, o, r)):
        return (sp.exp(lam * (1 + o) * c) - 1) * (1 / lam + r) / c
    lam, c, o, r = (np.asarray(v, dtype=float) for v in (lam, c, o, r))
    exponent = np.asarray(lam * (1 + o) * c, dtype=float)
    if np.any(exponent > 700):  # e^700 is near the largest float
        raise ValueError(f"failure_rate × checkpoint_interval is {exponent.max():.3g}: a segment "
                         f"expects e^{exponent.max():.3g} attempts, far beyond any real run; "
                         "shorten checkpoint_interval")
    grow = np.expm1(lam * (1 + o) * c)  # e^{λw} − 1, accurate for small λw
    safe = np.where(lam > 0, lam, 1.0)
    # (e^{λw} − 1)/λ tends to w as λ → 0: take that limit exactly at λ = 0.
    per_segment = np.where(lam > 0, grow / safe, (1 + o) * c) + grow * r
    out = per_segment / c
    return float(out) if out.ndim == 0 else out


def breakeven_failure_rate(spot_price, on_demand_price, checkpoint_interval,
                           checkpoint_overhead=0, restart_time=0):
    """The preemption rate (per second) at which spot capacity at ``spot_price`` costs as much
    as on-demand at ``on_demand_price``, under :func:`failure_multiplier` (chapter 05):

        S (1 + o) / (1 − λ (c/2 + r)) = R   ⇒   λ* = (1 − S (1 + o) / R) / (c/2 + r).

    Below λ*, spot is cheaper. Zero or negative when spot loses even without preemptions.
    """
    check.positive("spot_price", spot_price)
    check.positive("on_demand_price", on_demand_price)
    check.positive("checkpoint_interval", checkpoint_interval)
    check.nonnegative("checkpoint_overhead", checkpoint_overhead)
    check.nonnegative("restart_time", restart_time)
    return ((1 - spot_price * (1 + checkpoint_overhead) / on_demand_price)
            / _loss_per_failure(checkpoint_interval, restart_time))


def simulate_failures(work, failure_rate, checkpoint_interval, checkpoint_overhead=0,
                      restart_time=0, runs=1000, seed=0):
    """Wall-clock seconds of ``runs`` simulated runs of ``work`` seconds of work (chapter 05).

    A discrete-event Monte Carlo of the model behind :func:`failure_multiplier_exact`:
    failures form a Poisson process of rate ``failure_rate`` in wall-clock time; work is
    done in segments of ``checkpoint_interval`` c (the last one may be shorter), each
    followed by a checkpoint write of ``checkpoint_overhead`` × its length; a failure before
    the write completes loses the segment in progress and costs ``restart_time``. All runs
    advance together, one attempt per step, so the cost is NumPy work per attempt, not per
    run. Returns a NumPy array of the runs' wall-clock times; divide by ``work`` for the
    multiplier. Fixed ``seed``: the same numbers every time.
    """
    check.positive("work", work)
    check.nonnegative("failure_rate", failure_rate)
    check.positive("checkpoint_interval", checkpoint_interval)
    check.nonnegative("checkpoint_overhead", checkpoint_overhead)
    check.nonnegative("restart_time", restart_time)
    check.count("runs", runs)
    rng = np.random.default_rng(seed)
    full, last = divmod(float(work), float(checkpoint_interval))
    segments = [float(checkpoint_interval)] * int(full) + ([last] if last > 1e-12 * work else [])
    walls = np.array([(1 + checkpoint_overhead) * s for s in segments])
    # Each segment needs e^(λ·wall) attempts on average: refuse a run that would not end.
    attempts = float(np.sum(np.exp(np.minimum(failure_rate * walls, 700.0))))
    if attempts > 1e6:
        raise ValueError(
            f"failure_rate {failure_rate!r}/s against segments of {walls.max():.4g} s: each run "
            f"would need about {attempts:.3g} attempts, so it would (almost) never finish; "
            "shorten checkpoint_interval or lower failure_rate")
    done = np.zeros(runs, dtype=int)  # segments completed by each run
    clock = np.zeros(runs)
    active = np.arange(runs)
    while active.size:
        need = walls[done[active]]
        if failure_rate > 0:
            fail_at = rng.exponential(1 / failure_rate, size=active.size)
        else:
            fail_at = np.full(active.size, np.inf)
        ok = fail_at >= need
        clock[active] += np.where(ok, need, fail_at + restart_time)
        done[active[ok]] += 1
        active = active[done[active] < len(walls)]
    return clock


# --------------------------------------------------------------------------------------
# Rent or buy
# --------------------------------------------------------------------------------------

def breakeven_device_hours(tco, price_per_device_hour):
    """Device-hours of use at which owning (total cost ``tco`` per device) costs the same as
    renting at ``price_per_device_hour``: TCO / R (chapter 05). $55k / $4 = 13,750 h."""
    check.positive("tco", tco)
    check.positive("price_per_device_hour", price_per_device_hour)
    return tco / price_per_device_hour


def breakeven_time(tco, price_per_device_hour, utilization=1.0):
    """Calendar seconds until an owned device has paid for itself against renting, when it
    is busy a fraction ``utilization`` of the time: TCO / (R u) hours (chapter 05).

    Renting is paid only for the hours used; an owned device costs the same idle or busy, so
    low utilisation stretches the break-even: 13,750 h is about 19 months at 100% and about
    3 years at 50%. Divide by :data:`month` or :data:`dtbook.units.year` to read it.
    """
    check.fraction("utilization", utilization)
    return breakeven_device_hours(tco, price_per_device_hour) * hour / utilization


def breakeven_utilization(tco, price_per_device_hour, lifetime):
    """The utilisation above which owning beats renting over a service life of ``lifetime``
    seconds: u* = TCO / (R · lifetime in hours) (chapter 05). Above 1: renting always wins."""
    check.positive("lifetime", lifetime)
    return breakeven_device_hours(tco, price_per_device_hour) / (lifetime / hour)


# --------------------------------------------------------------------------------------
# An efficiency curve: why more devices can cost more
# --------------------------------------------------------------------------------------

def scaled_mfu(mfu, compute_time, comm_time, overlap=0.0):
    """MFU once communication that is not hidden behind compute is paid for (chapter 05):

        η(P) = η₀ · t_c / (t_c + (1 − f) t_comm)

    ``mfu`` η₀ is the utilisation of the compute alone, ``compute_time`` t_c the step's
    compute time at that utilisation, ``comm_time`` t_comm the step's communication (from
    :mod:`dtbook.comm`), ``overlap`` f the fraction of it hidden behind compute. With a fixed
    global batch, t_c falls as 1/P while a ring all-reduce's time does not, so η falls with
    P: the efficiency cliff. A deliberately simple model; chapters 13, 14 and 31 refine it.
    """
    check.fraction("mfu", mfu)
    check.positive("compute_time", compute_time)
    check.nonnegative("comm_time", comm_time)
    check.nonnegative("overlap", overlap)
    arr = check._numeric("overlap", overlap)
    if arr is not None and np.any(arr > 1):
        raise ValueError(f"overlap must lie in [0, 1], got {overlap!r}")
    return mfu * compute_time / (compute_time + (1 - overlap) * comm_time)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
