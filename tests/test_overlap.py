"""Chapter 31: the overlap formulas against independent computations, and the hook-started
bucket all-reduce against a plain all-gather of the gradients on two gloo ranks."""

import numpy as np
import pytest
import sympy as sp

from dtbook import comm, data_parallel, overlap
from dtbook.dist import launch
from dtbook.parallel.data import bucket_plan

RNG = np.random.default_rng(31)


def test_the_two_ends_of_the_overlap_model():
    tc, tm = RNG.uniform(0.01, 1, 50), RNG.uniform(0.01, 1, 50)
    assert np.allclose(overlap.overlapped_time(tc, tm, 0), tc + tm)
    assert np.allclose(overlap.overlapped_time(tc, tm, 1), np.maximum(tc, tm))
    assert np.allclose(overlap.perfect_overlap_speedup(tc, tm), overlap.overlap_speedup(tc, tm, 1))
    assert np.all(overlap.perfect_overlap_speedup(tc, tm) <= 2)


def test_measured_overlap_inverts_the_model():
    for _ in range(20):
        tc, tm, a = RNG.uniform(0.01, 1), RNG.uniform(0.01, 1), RNG.uniform(0, 1)
        total = overlap.overlapped_time(tc, tm, a)
        assert np.isclose(overlap.overlap_achieved(tc, tm, total), a)
        assert np.isclose(overlap.overlap_achieved(tc, tm, total, of="comm") * tm, a * min(tc, tm))


def test_buckets_cost_the_sum_of_their_calls():
    g, alpha, beta = 64e6, 50e-6, 10e9
    for b in (1e6, 4e6, 16e6, 64e6):
        calls = sum(comm.p2p_time(b, alpha, beta) for _ in range(int(g // b)))
        assert np.isclose(overlap.bucketed_comm_time(g, b, alpha, beta), calls)


def test_bucket_size_for_an_efficiency_round_trips():
    alpha, beta = 100e-6, 12.5e9
    for e in (0.5, 0.9, 0.99):
        b = overlap.bucket_for_efficiency(e, alpha, beta)
        assert np.isclose(overlap.bucket_efficiency(b, alpha, beta), e)
    assert np.isclose(overlap.bucket_for_efficiency(0.9, alpha, beta), 9 * alpha * beta)
    e, a = sp.symbols("e a", positive=True)                # and in symbols
    assert sp.simplify(overlap.bucket_efficiency(overlap.bucket_for_efficiency(e, a, 1), a, 1) - e) == 0


def _two_stage_pipeline(t_c, t_m, n):
    """Event by event: bucket i is ready at (i + 1)·t_c; its all-reduce starts when it is
    ready and the previous one is done."""
    done = 0.0
    for i in range(n):
        done = max((i + 1) * t_c, done) + t_m
    return done


def test_pipelined_buckets_against_an_event_simulation():
    for _ in range(30):
        t_c, t_m, n = RNG.uniform(0.1, 2), RNG.uniform(0.1, 2), int(RNG.integers(1, 12))
        assert np.isclose(data_parallel.overlapped_step_time(n * t_c, n * t_m, n),
                          _two_stage_pipeline(t_c, t_m, n))


def test_prefetch_buffer_is_k_layers():
    layer_bytes = [3e9] * 24
    assert np.isclose(overlap.prefetch_buffer_bytes(2, sum(layer_bytes), 24), 2 * layer_bytes[0])


@pytest.mark.parametrize("call", [
    lambda: overlap.bucket_for_efficiency(1, 1e-6, 1e9),
    lambda: overlap.overlapped_time(1, 1, 1.5),
    lambda: overlap.overlap_achieved(1, 1, 1, of="max"),
    lambda: overlap.bucketed_comm_time(1e6, 0, 1e-6, 1e9),
])
def test_bad_arguments_are_named(call):
    with pytest.raises(ValueError):
        call()


def _worker(rank, world):
    return {(on, link): _run(rank, world, on, link) for on in (True, False) for link in (False, True)}


def _run(rank, world, overlap_on, link=False):
    import torch
    import torch.distributed as dist
    from dtbook.parallel.counting import CommCounter
    from dtbook.parallel.overlap import BucketedAllReduce, EmulatedCompute, Timeline

    torch.manual_seed(0)
    tl = Timeline()
    model = torch.nn.Sequential(*[EmulatedCompute(torch.nn.Linear(16, 16), 0.002, f"layer {i}", tl)
                                  for i in range(5)])
    sync = BucketedAllReduce(model.parameters(), 2 * 16 * 17 * 4, world, overlap=overlap_on,
                             timeline=tl, link=(lambda nbytes: 0.001) if link else None)
    torch.manual_seed(rank + 1)                           # each rank its own data
    loss = model(torch.randn(3, 16)).square().sum()
    results = []
    for step in range(2):                                 # twice: the buckets reset
        model.zero_grad()
        tl.clear()
        loss_ = model(torch.randn(3, 16)).square().sum() if step else loss
        loss_.backward()
        local = [p.grad.clone() for p in model.parameters()]
        with CommCounter() as counter:                    # the non-overlapped calls happen here
            sync.finish()
        gathered = [[torch.zeros_like(g) for _ in range(world)] for g in local]
        for g, out in zip(local, gathered):
            dist.all_gather(out, g)
        mean = [torch.stack(out).mean(0) for out in gathered]
        results.append((all(torch.allclose(p.grad, m, atol=1e-6) for p, m in zip(model.parameters(), mean)),
                        counter.counts().get("all_reduce", 0), sorted(k for k, *_ in tl.spans)))
    sync.remove()
    return results, sync.plan, sync.bucket_bytes()


def test_bucketed_allreduce_averages_like_an_all_gather():
    # grads cloned before finish() are each rank's own (the hooks copy them into the bucket
    # buffers and leave .grad alone); after finish() .grad must be their mean
    runs = [r for rank_result in launch(_worker, 2, timeout=90) for r in rank_result.items()]
    assert len(runs) == 2 * 4
    for (overlap_on, link), (results, plan, nbytes) in runs:
        assert plan == bucket_plan([16 * 16 * 4, 16 * 4] * 5, 2 * 16 * 17 * 4)
        assert sum(nbytes) == 5 * 17 * 16 * 4
        for equal, calls, kinds in results:
            assert equal
            if not link:   # on the emulated link a hook's bucket may still be on the wire in finish()
                assert calls == (0 if overlap_on else len(plan))   # with hooks, sent during backward
            elif not overlap_on:
                assert calls == len(plan)
            assert kinds.count("compute") == 5 and kinds.count("comm") == len(plan)


def test_link_must_be_a_function_of_the_bytes():
    import torch
    from dtbook.parallel.overlap import BucketedAllReduce

    with pytest.raises(ValueError, match="link"):
        BucketedAllReduce(torch.nn.Linear(2, 2).parameters(), 64, 1, link=0.01)
