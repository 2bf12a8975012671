"""dtbook.investigation: the protocol's formulas, the log classifier, bisection, risk ratios
and localization (chapter 33). Pure functions: no processes here (see
test_parallel_investigation.py for the runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from dtbook import investigation as inv


# ---- formulas -----------------------------------------------------------------------------

def test_risk_ratio_counts_and_symbols():
    assert inv.risk_ratio(10, 100, 5, 100) == 2.0
    assert inv.risk_ratio(0, 50, 5, 100) == 0.0
    a, n1, c, n0 = sp.symbols("a n_1 c n_0", positive=True)
    assert sp.simplify(inv.risk_ratio(a, n1, c, n0) - a * n0 / (n1 * c)) == 0
    with pytest.raises(ValueError, match="unexposed_failures"):
        inv.risk_ratio(1, 10, 0, 10)
    with pytest.raises(ValueError, match="exposed"):
        inv.risk_ratio(1, 0, 1, 10)


def test_log_risk_ratio_se_is_katz():
    se = inv.log_risk_ratio_se(9, 1000, 250, 50000)
    assert math.isclose(se, math.sqrt(1 / 9 - 1 / 1000 + 1 / 250 - 1 / 50000))
    with pytest.raises(ValueError, match="exposed_failures"):
        inv.log_risk_ratio_se(0, 10, 1, 10)


@pytest.mark.parametrize("good,bad,steps", [(0, 1, 0), (0, 2, 1), (1, 8, 3), (8, 64, 6), (0, 7, 3),
                                            (0, 3, 2), (0, 1024, 10), (0, 1025, 11)])
def test_bisection_steps(good, bad, steps):
    assert inv.bisection_steps(good, bad) == steps


def test_bisection_steps_symbolic_and_bad_input():
    W = sp.Symbol("W", positive=True)
    assert inv.bisection_steps(0, W) == sp.ceiling(sp.log(W, 2))
    with pytest.raises(ValueError, match="bad must be larger"):
        inv.bisection_steps(8, 8)
    with pytest.raises(ValueError, match="good"):
        inv.bisection_steps(1.5, 8)


def test_drop_extra_time_slowdown_and_costs():
    assert math.isclose(inv.drop(42.3, 17.1), 1 - 17.1 / 42.3)
    assert math.isclose(inv.extra_time_fraction(142, 89), 142 / 89 - 1)
    # a busbw drop d on a share s of the step: (1 - s) + s / (1 - d)
    assert math.isclose(inv.slowdown(0.5, 0.5), 1.5)
    assert inv.slowdown(0.0, 0.9) == 1.0
    assert math.isclose(inv.incident_gpu_hours(256, 0.5), 128)
    assert math.isclose(inv.incident_cost(10, 2, 0.5, 4.0), 40.0)
    with pytest.raises(ValueError, match="busbw_drop"):
        inv.slowdown(0.5, 1.0)
    with pytest.raises(ValueError, match="comm_share"):
        inv.slowdown(1.5, 0.1)
    with pytest.raises(ValueError, match="good"):
        inv.drop(0, 1)
    with pytest.raises(ValueError, match="devices"):
        inv.incident_gpu_hours(0, 1)
    s, d = sp.symbols("s d", positive=True)
    assert sp.simplify(inv.slowdown(s, d) - ((1 - s) + s / (1 - d))) == 0


def test_postmortem_arithmetic_is_consistent():
    pm = inv.POSTMORTEM
    assert math.isclose(pm["compute"] + pm["allreduce"], pm["step"])
    step_bad = pm["compute"] + pm["allreduce"] * pm["busbw"] / pm["busbw_bad"]
    assert math.isclose(step_bad, pm["step_bad"], rel_tol=0.01)
    assert math.isclose(inv.slowdown(pm["allreduce"] / pm["step"], inv.drop(pm["busbw"], pm["busbw_bad"])),
                        pm["step_bad"] / pm["step"], rel_tol=0.01)
    assert sum(pm["phases_min"].values()) == 80


# ---- the classifier -----------------------------------------------------------------------

@pytest.mark.parametrize("text,category", [
    ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes", "oom"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "oom"),
    ("RuntimeError: Timed out waiting 2000ms for recv operation to complete", "network"),
    ("[Rank 0]: Ranks 3 failed to pass monitoredBarrier in 2000 ms", "network"),
    ("Connection closed by peer [127.0.0.1]:1443", "network"),
    ("FloatingPointError: non-finite gradient on rank(s) [3] in step 1", "numerical"),
    ("step 12 loss nan", "numerical"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "hardware"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "hardware"),
    ("KeyError: 'model.layers.0.weight'", "unknown"),
    ("", "unknown"),
])
def test_classify(text, category):
    v = inv.classify(text)
    assert v.category == category
    assert (v.confidence == 0) == (category == "unknown")
    assert 0 <= v.confidence <= 1


def test_classify_skips_traceback_frames_and_counts_a_symptom_once():
    tb = ("Traceback (most recent call last):\n"
          '  File "/x/torch/distributed/distributed_c10d.py", line 2, in all_reduce\n'
          '  File "/x/torch/distributed/c10d_logger.py", line 8, in wrapper\n'
          "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    v = inv.classify(tb)
    assert v.category == "oom" and v.confidence == 1.0
    v = inv.classify("Timed out waiting 1ms\n" * 5 + "step 3 loss nan")
    assert v.category == "numerical" and v.scores == {"oom": 0, "hardware": 0, "numerical": 3,
                                                        "network": 3}


def test_classify_words_are_whole():
    # "info" is not "inf", "finance" not "nan"
    assert inv.classify("INFO: finance report ready").category == "unknown"


def test_classify_prefers_the_cause_and_reports_its_share():
    text = "RuntimeError: CUDA out of memory\nConnection reset by peer"
    v = inv.classify(text)
    assert v.category == "oom"                       # a tie: the specific class wins
    assert v.confidence == 0.5 and v.scores["network"] == 3
    assert "out of memory" in v.evidence
    with pytest.raises(ValueError, match="text"):
        inv.classify(None)


def test_triage_names_the_rank_with_a_cause():
    texts = {0: "Timed out waiting 2000ms for recv", 1: "Connection closed by peer",
             2: "DefaultCPUAllocator: can't allocate memory", 3: ""}
    verdicts, focus = inv.triage(texts, failed_rank=0)
    assert focus == 2 and verdicts[3].category == "unknown"
    # only symptoms: the rank the launcher reported first
    _, focus = inv.triage({0: "Timed out waiting", 1: "Timed out waiting"}, failed_rank=1)
    assert focus == 1
    with pytest.raises(ValueError, match="texts"):
        inv.triage({})


# ---- bisection ----------------------------------------------------------------------------

def test_bisect_finds_every_boundary_within_the_bound():
    for gap in range(1, 70):
        for first_bad in range(1, gap + 1):
            calls = []

            def test(x):
                calls.append(x)
                return x < first_bad
            found = inv.bisect(test, 0, gap)
            assert (found.good, found.bad) == (first_bad - 1, first_bad)
            assert found.steps == len(calls) <= inv.bisection_steps(0, gap)
            assert 0 not in calls and gap not in calls        # the ends are known


def test_bisect_over_allowed_values():
    nodes = list(range(8, 65, 8))
    found = inv.bisect(lambda g: g < 40, 8, 64, values=nodes)
    assert (found.good, found.bad) == (32, 40)
    assert found.steps <= inv.bisection_steps(0, len(nodes) - 1) == 3
    with pytest.raises(ValueError, match="among values"):
        inv.bisect(lambda g: True, 8, 60, values=nodes)
    with pytest.raises(ValueError, match="sorted"):
        inv.bisect(lambda g: True, 8, 64, values=[64, 8])
    with pytest.raises(ValueError, match="callable"):
        inv.bisect(3, 0, 4)


# ---- event log and risk ratios --------------------------------------------------------------

KINDS = {"checkpoint": (0.1, 3.0), "eval": (0.1, 1.0)}


def test_event_log_is_seeded_and_well_formed():
    a = inv.simulate_event_log(KINDS, 0.01, 7 * 86400, 600, seed=3)
    b = inv.simulate_event_log(KINDS, 0.01, 7 * 86400, 600, seed=3)
    assert a == b
    events, failures = a
    assert all(t % 600 == 0 and k in KINDS for t, k in events)
    assert all(0 <= t < 7 * 86400 for t in failures)
    with pytest.raises(ValueError, match="probabilities"):
        inv.simulate_event_log({"x": (0.7, 1), "y": (0.5, 1)}, 0.01, 1000, 10)
    with pytest.raises(ValueError, match="base_rate"):
        inv.simulate_event_log({"x": (0.1, 200)}, 0.01, 1000, 10)


def test_risk_ratios_on_a_hand_made_log():
    # windows of 10 s over 100 s; events at 0 (ckpt), 50 (eval); failures at 5 (after ckpt),
    # 72 and 95 (no event)
    events = [(0.0, "ckpt"), (50.0, "eval")]
    found = inv.event_risk_ratios(events, [5.0, 72.0, 95.0], 100, 10)
    assert found["ckpt"] == {"exposed": 1, "exposed_failures": 1, "unexposed": 8,
                             "unexposed_failures": 2, "risk_ratio": 4.0}
    assert found["eval"]["exposed_failures"] == 0 and found["eval"]["risk_ratio"] == 0.0
    # an event inside a window covers the two grid windows its own window overlaps
    found = inv.event_risk_ratios([(15.0, "x")], [1.0], 100, 10)
    assert found["x"]["unexposed"] == 8


def test_risk_ratios_recover_the_known_answer():
    horizon = 400 * 86400
    events, failures = inv.simulate_event_log(KINDS, 0.01, horizon, 600, seed=0)
    found = inv.event_risk_ratios(events, failures, horizon, 600)
    for kind, (_, true) in KINDS.items():
        f = found[kind]
        se = inv.log_risk_ratio_se(f["exposed_failures"], f["exposed"], f["unexposed_failures"],
                                   f["unexposed"])
        assert abs(math.log(f["risk_ratio"] / true)) < 3 * se


# ---- localization ---------------------------------------------------------------------------

def test_localize():
    assert inv.localize([1, 2, 1, 1], [2, 0.5, 2, 2], baseline_comm=0.5) == ("straggler", 1)
    assert inv.localize([1, 1, 1, 1], [2, 2, 2, 2], baseline_comm=0.5) == ("communication", None)
    assert inv.localize([1, 1, 1, 1], [0.55] * 4, baseline_comm=0.5) == ("healthy", None)
    assert inv.localize([1, 1.1, 1, 1], [2] * 4) == ("healthy", None)    # no baseline given
    with pytest.raises(ValueError, match="same length"):
        inv.localize([1, 1], [1])
    with pytest.raises(ValueError, match="finite"):
        inv.localize([1, np.nan], [1, 1])
    with pytest.raises(ValueError, match="baseline_comm"):
        inv.localize([1, 1], [1, 1], baseline_comm=0)
