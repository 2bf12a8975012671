"""dtbook.schedules (chapter 16): the simulator against the closed forms of
dtbook.pipeline_parallel, and the action orders against PyTorch's own schedules."""

import itertools

import numpy as np
import pytest
import sympy as sp

from dtbook import pipeline_parallel as pp
from dtbook import schedules as S
from dtbook.symbolic import assert_same


@pytest.mark.parametrize("P,m", [(2, 1), (2, 5), (4, 1), (4, 4), (4, 9), (8, 32)])
def test_gpipe_and_1f1b_bubble_and_memory(P, m):
    for name in ("gpipe", "1f1b"):
        r = S.simulate(name, P, m, t_forward=1.0, t_backward=2.0)
        assert r.bubble_fraction == pytest.approx(pp.bubble_fraction(P, m), abs=1e-12)
        assert r.makespan == pytest.approx(pp.batch_time(P, m, 1.0, 2.0))
    assert S.simulate("gpipe", P, m).peak_activations == [m] * P
    assert S.simulate("1f1b", P, m).peak_activations == [
        pp.activations_in_flight(P, m, stage=s) for s in range(P)]


def test_activations_in_flight_is_the_simulators_peak_for_every_schedule():
    """The closed forms of pipeline_parallel.activations_in_flight equal the simulator's
    peak_activations over a grid of p, m, v and every stage (p >= 2; p = 1 is 1)."""
    cases = [(s, P, m, 1) for s in ("gpipe", "1f1b", "zb-h1")
             for P in range(2, 7) for m in range(1, 2 * P + 2)]
    cases += [("interleaved-1f1b", P, m, v) for P in range(2, 6) for v in range(1, 5)
              for m in range(P, 4 * P + 1, P)]
    for schedule, P, m, v in cases:
        peaks = S.simulate(schedule, P, m, virtual_stages=v).peak_activations
        want = [pp.activations_in_flight(P, m, stage=s, schedule=schedule, virtual_stages=v)
                for s in range(P)]
        assert peaks == want, (schedule, P, m, v)
        # the same from arrays, all stages at once
        arr = pp.activations_in_flight(np.full(P, P), m, stage=np.arange(P),
                                       schedule=schedule, virtual_stages=v)
        assert list(arr) == peaks, (schedule, P, m, v)
    for schedule in S.SCHEDULES:
        assert pp.activations_in_flight(1, 7, schedule=schedule) == 1


def test_activations_in_flight_closed_forms_are_symbolic():
    p, m, s, v = sp.symbols("p m s v", positive=True, integer=True)
    assert pp.activations_in_flight(p, m) == sp.Min(p, m)
    assert pp.activations_in_flight(p, m, stage=s) == sp.Min(p - s, m)
    assert pp.activations_in_flight(p, m, schedule="gpipe") == m
    assert pp.activations_in_flight(p, m, schedule="zb-h1") == sp.Min(p, m)
    assert_same(pp.activations_in_flight(p, m, stage=s, schedule="interleaved-1f1b",
                                         virtual_stages=v),
                sp.Min(v * m, 2 * (p - s - 1) + (v - 1) * p + 1))


def test_activations_in_flight_refuses_what_it_cannot_count():
    with pytest.raises(ValueError, match="stage"):
        pp.activations_in_flight(4, 8, stage=4)
    with pytest.raises(ValueError, match="schedule"):
        pp.activations_in_flight(4, 8, schedule="dualpipe")
    with pytest.raises(ValueError, match="virtual_stages"):
        pp.activations_in_flight(4, 8, schedule="1f1b", virtual_stages=2)
    with pytest.raises(TypeError):
        pp.activations_in_flight(4, 8, 1)          # stage is keyword-only


@pytest.mark.parametrize("P,m,v", [(2, 2, 1), (4, 8, 1), (4, 8, 2), (4, 12, 3), (3, 9, 4)])
def test_batch_time_is_the_simulators_makespan(P, m, v):
    name = "1f1b" if v == 1 else "interleaved-1f1b"
    r = S.simulate(name, P, m, virtual_stages=v, t_forward=1.0, t_backward=2.0)
    assert r.makespan == pytest.approx(pp.batch_time(P, m, 1.0, 2.0, virtual_stages=v))


@pytest.mark.parametrize("P,m,v", [(2, 2, 2), (4, 4, 2), (4, 8, 2), (4, 8, 3), (3, 9, 4)])
def test_interleaved_bubble_is_exact(P, m, v):
    r = S.simulate("interleaved-1f1b", P, m, virtual_stages=v)
    assert r.bubble_fraction == pytest.approx(pp.interleaved_bubble_fraction(P, m, v), abs=1e-12)
    assert r.bubble_fraction < pp.interleaved_bubble_approx(P, m, v)


def test_zb_h1_bubble_and_memory():
    for (P, m), tf, tb, tw in itertools.product([(2, 5), (4, 4), (4, 16), (8, 32)], (0.5, 1, 3),
                                                (0.5, 1, 2), (0.1, 1, 3)):
        r = S.simulate("zb-h1", P, m, t_forward=tf, t_backward=tb, t_weight=tw)
        assert r.bubble_fraction == pytest.approx(pp.zb_h1_bubble_fraction(P, m, tf, tb, tw),
                                                  abs=1e-12)
        assert max(r.peak_activations) <= P
        one = S.simulate("1f1b", P, m, t_forward=tf, t_backward=tb, t_weight=tw)
        assert r.makespan <= one.makespan + 1e-12


def test_zb_h1_formula_reduces_to_the_papers_when_w_is_small():
    p, m, f, b, w = sp.symbols("p m f b w", positive=True)
    ours = pp.zb_h1_bubble_fraction(p, m, f, b, w)
    paper = (p - 1) * (f + b - w) / (m * (f + b + w) + (p - 1) * (f + b - w))
    assert_same(ours.subs({f: 1, b: 1, w: sp.Rational(3, 10)}),
                paper.subs({f: 1, b: 1, w: sp.Rational(3, 10)}))


def test_every_action_runs_once_and_ranks_never_overlap():
    r = S.simulate("interleaved-1f1b", 4, 8, virtual_stages=2)
    for tl in r.timeline:
        for (_, _, e), (_, s, _) in zip(tl, tl[1:]):
            assert s >= e - 1e-12
    acts = [a for tl in r.timeline for a, _, _ in tl]
    assert len(acts) == len(set(acts)) == 2 * 8 * 8


def test_the_book_listing_deadlocks_and_the_right_warmup_does_not():
    with pytest.raises(S.DeadlockError, match="rank 0 is at 0B0"):
        S.simulate(S.book_1f1b(4, 8), 4, 8)
    S.simulate(S.build("1f1b", 4, 8), 4, 8)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="known: gpipe"):
        S.build("pipedream", 4, 8)
    with pytest.raises(ValueError, match="multiple of stages"):
        S.build("interleaved-1f1b", 4, 6, virtual_stages=2)
    with pytest.raises(ValueError, match="virtual_stages"):
        S.build("1f1b", 4, 8, virtual_stages=2)
    for kw in (dict(t_forward=0), dict(t_backward=float("nan")), dict(t_weight=-1)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            S.simulate("1f1b", 4, 8, **kw)
    with pytest.raises(ValueError, match="microbatches"):
        S.simulate("1f1b", 4, 0)


# --------------------------------------------------------------------------- PyTorch's orders
# get_schedule_ops is private (torch.distributed.pipelining._schedule_visualizer, torch 2.13):
# these tests pin what chapter 16 uses of it.

def _torch(cls, P, m, v=None):
    from torch.distributed.pipelining import _schedule_visualizer as V
    return S.from_torch(V.get_schedule_ops(cls, P, m, num_stages_per_rank=v))


@pytest.mark.parametrize("P,m", [(2, 6), (4, 4), (4, 8), (4, 12)])
def test_orders_equal_pytorchs(P, m):
    from torch.distributed.pipelining import schedules as TS

    assert _torch(TS.ScheduleGPipe, P, m) == S.build("gpipe", P, m)
    for v in (2, 3):
        assert _torch(TS.ScheduleInterleaved1F1B, P, m, v) == S.build(
            "interleaved-1f1b", P, m, virtual_stages=v)
    ours, theirs = S.build("1f1b", P, m), _torch(TS.Schedule1F1B, P, m)
    assert theirs[:-1] == ours[:-1]
    # PyTorch's 1F1B IR numbers the last rank's forwards 1..m (its runtime does not use it)
    shifted = [S.Action(a.kind, a.microbatch + (a.kind == "F"), a.stage) for a in ours[-1]]
    assert theirs[-1] == shifted


def test_pytorchs_zero_bubble_orders_simulate():
    from torch.distributed.pipelining import schedules as TS

    izb = S.simulate(_torch(TS.ScheduleInterleavedZeroBubble, 4, 8, 2), 4, 8, virtual_stages=2,
                     t_forward=1, t_backward=1, t_weight=1)
    il = S.simulate("interleaved-1f1b", 4, 8, virtual_stages=2, t_forward=1, t_backward=1,
                    t_weight=1)
    assert izb.bubble_fraction < il.bubble_fraction


# ---- DualPipe-V (chapter 31a): PyTorch's schedule under our simulator, against Table 2 of
# the DeepSeek-V3 report (arXiv 2412.19437).

@pytest.mark.parametrize("P,m", [(2, 4), (3, 7), (4, 8), (4, 13), (8, 16)])
def test_dualpipe_v_against_table2_and_1f1b(P, m):
    for tf, tb, tw in itertools.product((0.5, 1.0), (1.0, 2.0), (0.0, 0.25, 0.5)):
        r = S.simulate("dualpipe-v", P, m, virtual_stages=2, t_forward=tf, t_backward=tb,
                       t_weight=tw)
        idle = [r.makespan - b for b in r.busy]
        # every rank waits the same, and the wait does not grow with m
        assert max(idle) - min(idle) < 1e-9
        more = S.simulate("dualpipe-v", P, m + 5, virtual_stages=2, t_forward=tf,
                          t_backward=tb, t_weight=tw)
        assert more.makespan - max(more.busy) == pytest.approx(idle[0], abs=1e-9)
        # 1F1B's idle is Table 2's (P - 1)(F + B) exactly (B the full backward) ...
        one = S.simulate("1f1b", P, m, t_forward=tf, t_backward=tb, t_weight=tw)
        assert one.makespan - one.busy[0] == pytest.approx(S.table2_bubble("1f1b", P, tf, tb + tw))
        # ... and DualPipe-V (DualPipe on 2P chunks, F&B not overlapped) stays within
        # Table 2's (PP/2 - 1)(F&B + B - 3W) and below 1F1B
        bound = S.table2_bubble("dualpipe", 2 * P, tf / 2, (tb + tw) / 2, tw / 2)
        assert idle[0] <= bound + 1e-9
        assert idle[0] < one.makespan - one.busy[0]


def test_dualpipe_v_every_action_once_and_its_memory():
    P, m = 4, 8
    orders = S.build("dualpipe-v", P, m)
    for r, acts in enumerate(orders):
        assert {a.stage for a in acts} == {r, 2 * P - 1 - r}          # the V placement
        assert sum(a.kind == "F" for a in acts) == 2 * m
    r = S.simulate("dualpipe-v", P, m, virtual_stages=2)
    # each rank holds at most 2P + 1 chunk activations: P + 1/2 stages' worth of 1F1B's
    assert r.peak_activations == [2 * P + 1] * P


def test_dualpipe_v_refuses_too_few_microbatches():
    with pytest.raises(ValueError, match="microbatches"):
        S.build("dualpipe-v", 4, 7)


def test_dualpipe_v_by_name_always_runs_two_chunks_per_rank():
    assert S.simulate("dualpipe-v", 4, 8).makespan == S.simulate(
        "dualpipe-v", 4, 8, virtual_stages=2).makespan
    assert "dualpipe-v" not in S.SCHEDULES      # chapter 16's explorer offers SCHEDULES


def test_sizes_are_bounded_by_name():
    # 10**400 stages once built lists forever; the bounds name the argument at once, and a
    # layout at a bound still builds (the bound is not below a schedule anyone runs)
    for kwargs, name in ((dict(stages=S.MAX_STAGES + 1, microbatches=1), "stages"),
                         (dict(stages=2, microbatches=S.MAX_MICROBATCHES + 1), "microbatches"),
                         (dict(stages=1024, microbatches=8192), "microbatches")):
        with pytest.raises(ValueError, match=name):
            S.build("1f1b", **kwargs)
    assert len(S.build("gpipe", S.MAX_STAGES, 2)) == S.MAX_STAGES
    with pytest.raises(ValueError, match="t_forward"):  # was a bare OverflowError
        S.table2_bubble("1f1b", 4, 10**400, 1.0)
