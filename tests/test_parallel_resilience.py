"""dtbook.parallel.resilience (chapter 26): the optimizer against torch's, and one
kill-and-heal run of torchft checked step by step and against a replay in one process."""

import importlib.util
import os

import pytest
import torch

from dtbook.parallel import resilience as ft


def test_momentum_is_torch_sgd_with_momentum():
    ours, theirs = ft.make_model(0), ft.make_model(0)
    opt_ours = ft.Momentum(ours.parameters(), lr=0.05, mu=0.9)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    for step in range(5):
        for model in (ours, theirs):
            model.zero_grad()
            x, y = ft.batch(step, 0)
            (model(x) - y).square().mean().backward()
        opt_ours.step()
        opt_theirs.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_momentum_state_round_trips():
    model = ft.make_model(0)
    opt = ft.Momentum(model.parameters())
    model(torch.ones(1, 8)).sum().backward()
    opt.step()
    other = ft.Momentum(ft.make_model(1).parameters())
    other.load_state_dict(opt.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(opt.buffers, other.buffers))


def test_batches_differ_by_step_and_rank_and_repeat():
    assert torch.equal(ft.batch(3, 1)[0], ft.batch(3, 1)[0])
    assert not torch.equal(ft.batch(3, 0)[0], ft.batch(3, 1)[0])
    assert not torch.equal(ft.batch(3, 0)[0], ft.batch(4, 0)[0])


def _replay(records):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)             # as each replica runs: the same sums, bit for bit
    try:
        return _replay_records(records)
    finally:
        torch.set_num_threads(threads)


def _replay_records(records):
    model = ft.make_model(0)
    opt = ft.Momentum(model.parameters())
    for r in records:
        if "step" not in r or not r["committed"]:
            continue
        grads = []
        for rank in range(r["quorum"]):
            model.zero_grad()
            x, y = ft.batch(r["step"], rank)
            (model(x) - y).square().mean().backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        mean = sum(grads) / len(grads)
        for p, g in zip(model.parameters(), mean.split([p.numel() for p in model.parameters()])):
            p.grad = g.view_as(p).clone()
        opt.step()
    return [p.detach().tolist() for p in model.parameters()]


@pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft not installed")
def test_a_replica_dies_the_survivor_goes_on_and_a_new_one_heals():
    steps, die_at, alone = 10, 3, 2
    out = ft.run(steps=steps, die_at=die_at, alone=alone, timeout=90)
    assert out["exit"] == {"0": 0, "1": -9, "2": 0}, out["logs"]   # every replica ended; 1 by SIGKILL
    survivor, killed, fresh = ([r for r in out[n] if "step" in r] for n in ("0", "1", "2"))
    seen = [[(r["step"], r["quorum"], r["committed"]) for r in x] for x in (survivor, killed, fresh)]
    solo = [r["step"] for r in survivor if r["quorum"] == 1]
    assert len(solo) >= alone and solo == list(range(die_at, die_at + len(solo))), seen
    healed = die_at + len(solo)
    assert [r["step"] for r in killed] == list(range(die_at)), seen
    assert [(r["step"], r["committed"]) for r in survivor if r["step"] == die_at][0] == (die_at, False), seen
    assert [r["step"] for r in survivor if r["committed"]] == list(range(steps)), seen
    assert [(r["step"], r["quorum"]) for r in fresh] == [(s, 2) for s in range(healed, steps)], seen
    before = {r["step"]: r["weights"] for r in survivor if r["committed"]}
    assert fresh[0]["weights"] == before[healed], seen
    assert out["0"][-1]["final"] == out["2"][-1]["final"], seen
    assert _replay(out["0"]) == out["0"][-1]["state"], seen


def _children(pid):
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                after_name = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(after_name[1]) == pid:   # the field after the state: the parent's pid
                found.add(int(entry))
    return found


@pytest.mark.skipif(importlib.util.find_spec("torchft") is None or not os.path.isdir("/proc"),
                    reason="needs torchft and /proc")
def test_nothing_outlives_a_run():
    before = _children(os.getpid())
    out = ft.run(steps=6, die_at=2, alone=1, timeout=90)
    assert out["exit"] == {"0": 0, "1": -9, "2": 0}, out["logs"]
    assert _children(os.getpid()) <= before       # no fork server left
    # the replicas are the fork server's children, not ours: look them up by pid
    assert set(out["pids"]) == {"0", "1", "2"}
    assert not [pid for pid in out["pids"].values() if os.path.exists(f"/proc/{pid}")]
