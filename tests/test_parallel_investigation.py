"""dtbook.parallel.investigation: faults injected into real 4-rank gloo jobs and what each
leaves behind (chapter 33). Exact outcomes (which rank, which exception, which message);
the one timed run asserts relations through dtbook.measure.confirm."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from dtbook import comm, investigation, measure
from dtbook.dist import LaunchError
from dtbook.parallel import investigation as faults

TIMEOUT = 2.0
NPARAMS = faults.WIDTH * faults.WIDTH + faults.WIDTH


def test_bad_arguments():
    with pytest.raises(ValueError, match="fault"):
        faults.inject("boom")
    with pytest.raises(ValueError, match="culprit"):
        faults.inject("short", culprit=4)
    with pytest.raises(ValueError, match="world"):
        faults.inject("short", world=1)
    with pytest.raises(ValueError, match="timeout"):
        faults.inject("short", timeout=0)
    with pytest.raises(ValueError, match="slow_pair"):
        faults.step_breakdown(4, t_compute=0.01, delay=0.01, straggler=1, nbytes=1024,
                              beta=1e6, beta_slow=1e5, slow_pair=(2, 2))
    with pytest.raises(ValueError, match="nbytes"):
        faults.step_breakdown(4, t_compute=0.01, delay=0.01, straggler=1, nbytes=1000,
                              beta=1e6, beta_slow=1e5, slow_pair=(2, 3))


def test_healthy_run_trains_identically_on_every_rank():
    run = faults.inject(None)
    assert run.error is None and set(run.records) == {0, 1, 2, 3}
    losses = {tuple(r["loss"]) for r in run.records.values()}
    assert len(losses) == 1                                   # the all-reduced loss
    for rec in run.records.values():
        assert rec["type"] is None and rec["steps"] == 4 and all(rec["finite"])


def test_oom_rank_is_named_by_the_launcher():
    run = faults.inject("oom")
    err = run.error
    assert isinstance(err, LaunchError) and err.rank == 2 and not err.timed_out
    assert set(err.tracebacks) == {2} and "can't allocate memory" in err.tracebacks[2]
    verdicts, focus = investigation.triage(run.texts, err.rank)
    assert focus == 2 and verdicts[2].category == "oom"


def test_short_rank_hangs_the_others_until_the_timeout():
    run = faults.inject("short", timeout=TIMEOUT)
    assert run.error is None
    assert run.records[3]["type"] is None and run.records[3]["steps"] == 3
    for rank in (0, 1, 2):
        rec = run.records[rank]
        assert rec["type"] == "RuntimeError" and "Timed out waiting" in rec["message"]
        assert rec["steps"] == 3
        assert rec["seconds"] >= TIMEOUT                    # gloo gives up only after it
    verdicts, _ = investigation.triage(run.texts)
    assert [verdicts[r].category for r in range(4)] == ["network"] * 3 + ["unknown"]


@pytest.mark.parametrize("option", ["monitored", "detail"])
def test_monitored_barrier_and_detail_name_the_missing_rank(option):
    run = faults.inject("short", timeout=TIMEOUT, **{option: True})
    assert re.search(r"Ranks? 3 failed to pass monitoredBarrier", run.records[0]["message"])
    assert run.records[3]["type"] is None
    for rank in (1, 2):
        assert run.records[rank]["type"] == "RuntimeError"


def test_skipped_collective_aborts_without_detail_and_is_named_with_it():
    run = faults.inject("skip")
    err = run.error
    assert err.rank == 3 and "SIGABRT" in str(err) and "collective mismatch" in run.texts[3]
    assert investigation.triage(run.texts, err.rank)[1] == 3
    run = faults.inject("skip", detail=True)
    for rank, rec in run.records.items():
        assert rec["type"] == "RuntimeError" and "Detected mismatch between collectives" in rec["message"]
        shapes = re.findall(r"TensorShape=\[(\d+)\]", rec["message"])
        assert sorted(map(int, shapes)) == [1, NPARAMS]


def test_nan_spreads_through_the_all_reduce_unless_checked():
    run = faults.inject("nan")
    for rec in run.records.values():
        assert rec["type"] is None and rec["finite"] == [True, False, False, False]
        assert rec["nonfinite"][faults.FAULT_STEP] == NPARAMS
        assert math.isnan(rec["loss"][faults.FAULT_STEP])
    run = faults.inject("nan", check=True)
    for rec in run.records.values():
        assert rec["type"] == "FloatingPointError" and "rank(s) [3]" in rec["message"]
        assert rec["steps"] == faults.FAULT_STEP
    assert {investigation.classify(t).category for t in run.texts.values()} == {"numerical"}


def test_scale_bisection_on_real_launches():
    found = investigation.bisect(lambda w: faults.even_shards_work(w, 3), 1, 4)
    assert (found.good, found.bad) == (3, 4)
    assert found.steps == investigation.bisection_steps(1, 4) == 2


def test_step_breakdown_tells_a_straggler_from_a_slow_link():
    t_c, n, world = 0.03, 1 << 18, 4
    beta = comm.bus_factor("allreduce", world) * n / 0.02
    budget = measure.Budget(60, "test_parallel_investigation")

    def once():
        ranks = faults.step_breakdown(world, t_compute=t_c, delay=t_c, straggler=1, nbytes=n,
                                      beta=beta, beta_slow=beta / 3, slow_pair=(2, 3), steps=3,
                                      repeats=2)
        assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
        assert all(len(r[s]) == 3 for r in ranks for s in ("healthy", "straggler", "slow link"))
        fast = {s: (np.array([min(t[0] for t in r[s]) for r in ranks]),
                    np.array([min(t[1] for t in r[s]) for r in ranks]))
                for s in ("healthy", "straggler", "slow link")}
        base = float(np.median(fast["healthy"][1]))
        pairs = {}
        for r in ranks:
            for p, ts in r["pairs"].items():
                pairs[p] = max(pairs.get(p, 0), min(ts))
        return ({s: investigation.localize(*fast[s], baseline_comm=base) for s in fast},
                max(pairs, key=pairs.get), fast)

    def holds(m):
        verdicts, slowest_pair, fast = m
        return (verdicts == {"healthy": ("healthy", None), "straggler": ("straggler", 1),
                             "slow link": ("communication", None)}
                and set(slowest_pair) == {2, 3}
                and np.all(fast["straggler"][0][[0, 2, 3]] >= t_c)      # sleeps are a floor
                and fast["straggler"][0][1] >= 2 * t_c)

    measure.confirm(once, holds, budget=budget, what="localize() on 4 gloo ranks")
