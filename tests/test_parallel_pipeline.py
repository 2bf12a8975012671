"""dtbook.parallel.pipeline_parallel and dtbook.pipeline_parallel (chapter 16): the stage runner's
gradients against one process, its sends counted against the formula, and the partition
against brute force."""

import itertools

import numpy as np
import pytest

from dtbook import pipeline_parallel as pp


def _worker(rank, world, m, name):
    import torch
    import torch.nn as nn

    from dtbook import schedules
    from dtbook.parallel.counting import CommCounter
    from dtbook.parallel.pipeline_parallel import run_schedule

    torch.manual_seed(0)
    H, B = 8, 8
    full = nn.Sequential(*[nn.Sequential(nn.Linear(H, H), nn.Tanh()) for _ in range(world)])
    x, y = torch.randn(B, H), torch.randn(B, H)
    with CommCounter() as c:
        out = run_schedule(full[rank], schedules.build(name, world, m)[rank], rank, world,
                           (B // m, H), inputs=x.chunk(m), targets=y.chunk(m),
                           loss_fn=nn.functional.mse_loss, microbatches=m)
    return [p.grad for p in full[rank].parameters()], c.counts().get("isend", 0), \
        c.bytes().get("isend", 0), out["peak"]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_runner_gradients_and_sends(name):
    import torch
    import torch.nn as nn

    from dtbook.dist import launch

    P, m = 3, 4
    res = launch(_worker, P, m, name, timeout=120)
    torch.manual_seed(0)
    full = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(P)])
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    nn.functional.mse_loss(full(x), y).backward()
    ref = [p.grad for p in full.parameters()]
    got = [g for r in res for g in r[0]]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, ref))
    assert sum(r[1] for r in res) == 2 * (P - 1) * m
    assert sum(r[2] for r in res) == pp.p2p_bytes_per_minibatch(P, m, 2, 1, 8, 4)
    assert [r[3] for r in res] == ([m] * P if name == "gpipe" else [3, 2, 1])


def _brute(times, p):
    L = len(times)
    return min(max(pp.stage_times(times, list(c))) for c in itertools.combinations(range(1, L), p - 1))


def test_best_partition_equals_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(30):
        L = int(rng.integers(2, 9))
        p = int(rng.integers(1, L + 1))
        times = rng.integers(1, 20, size=L).astype(float).tolist()
        got = max(pp.stage_times(times, pp.best_partition(times, p)))
        assert got == pytest.approx(_brute(times, p))


def test_partition_and_balance_errors():
    with pytest.raises(ValueError, match="layer_times"):
        pp.best_partition([], 2)
    with pytest.raises(ValueError, match="p=5"):
        pp.best_partition([1.0, 2.0], 5)
    with pytest.raises(ValueError, match="boundaries"):
        pp.stage_times([1.0, 2.0, 3.0], [2, 1])
    assert pp.load_balance_efficiency([10, 10, 10, 10]) == 1.0


def test_ratio_is_stage_compute_over_two_messages():
    from dtbook import data_parallel as dp

    psi, p, H, F, beta, b, S = 70e9, 8, 8192, 989e12, 50e9, 2, 4096
    t_comp = dp.compute_time(psi / p, b * S, F)               # 6(Ψ/p)·bS / F
    t_comm = 2 * pp.p2p_message_bytes(b, S, H, 2) / beta       # activation out, gradient back
    assert np.isclose(pp.compute_comm_ratio(psi, p, H, F, beta), t_comp / t_comm)
    # at p* stages one stage's compute equals its two messages
    p_star = pp.stages_for_unit_ratio(psi, H, F, beta)
    assert np.isclose(dp.compute_time(psi / p_star, b * S, F), t_comm)


def test_a_stage_outside_the_pipeline_is_refused():
    with pytest.raises(ValueError, match="stage"):
        pp.memory_per_device(4, 8, 1e9, 1e6, stage=4)
    assert pp.activations_in_flight(4, 8, stage=3) == 1      # the last stage holds one


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_memory_per_device_uses_the_simulators_peak(schedule):
    from dtbook import schedules

    P, m, act, psi = 4, 6, 3.0e6, 1e9
    peaks = schedules.simulate(schedule, P, m).peak_activations
    for s in range(P):
        want = 16 * psi / P + peaks[s] * act
        assert np.isclose(pp.memory_per_device(P, m, psi, act, stage=s, schedule=schedule), want)
