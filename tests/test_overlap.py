"""Chapter 31: the overlap formulas against independent computations, and the hook-started
bucket all-reduce against a plain all-gather of the gradients on two gloo ranks."""

import numpy as np
import pytest
import sympy as sp

from dtbook import comm, data_parallel, overlap
from dtbook.dist import launch
from dtbook.parallel.data_parallel import bucket_plan

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


LINK_SECONDS = 0.001   # the emulated wire: every bucket spends this long on it


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
                             timeline=tl, link=(lambda nbytes: LINK_SECONDS) if link else None)
    torch.manual_seed(rank + 1)                           # each rank its own data
    loss = model(torch.randn(3, 16)).square().sum()
    results = []
    for step in range(2):                                 # twice: the buckets reset
        model.zero_grad()
        tl.clear()
        loss_ = model(torch.randn(3, 16)).square().sum() if step else loss
        # one counter over backward and finish: it patches torch.distributed's functions, so
        # it also sees the all-reduces the link thread makes, whenever it makes them
        with CommCounter(functional=False) as counter:
            loss_.backward()
            in_backward = len(counter.calls)              # issued from the hooks
            local = [p.grad.clone() for p in model.parameters()]
            sync.finish()
        gathered = [[torch.zeros_like(g) for _ in range(world)] for g in local]
        for g, out in zip(local, gathered):
            dist.all_gather(out, g)
        mean = [torch.stack(out).mean(0) for out in gathered]
        results.append((all(torch.allclose(p.grad, m, atol=1e-6) for p, m in zip(model.parameters(), mean)),
                        in_backward, counter.counts(), list(tl.spans)))
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
        for equal, in_backward, calls, spans in results:
            assert equal
            # one all-reduce per bucket, whatever the mode, and nothing else
            assert calls == {"all_reduce": len(plan)}
            if not overlap_on:                           # all of them sent in finish()
                assert in_backward == 0
            elif not link:                               # all of them sent by the hooks
                assert in_backward == len(plan)
            # (on the emulated link a bucket may still be on the wire when backward returns)
            kinds = [k for k, *_ in spans]
            assert kinds.count("compute") == 5
            ready = {lab: e for k, lab, s, e in spans if k == "ready"}
            comm = {lab: (s, e) for k, lab, s, e in spans if k == "comm"}
            labels = {f"bucket {b}" for b in range(len(plan))}
            assert set(ready) == set(comm) == labels and kinds.count("comm") == len(plan)
            for lab in labels:                           # a bucket is sent once it is ready
                start, end = comm[lab]
                assert start == ready[lab] and end > ready[lab]
                if link:                                 # and spends the emulated link's time
                    assert end - start >= LINK_SECONDS
            if overlap_on and link:                      # one link: buckets leave in order
                ends = [comm[f"bucket {b}"][1] for b in range(len(plan))]
                assert ends == sorted(ends)


def test_link_must_be_a_function_of_the_bytes():
    import torch
    from dtbook.parallel.overlap import BucketedAllReduce

    with pytest.raises(ValueError, match="link"):
        BucketedAllReduce(torch.nn.Linear(2, 2).parameters(), 64, 1, link=0.01)


def _hooked(link, overlap_on=True):
    import torch
    from dtbook.parallel.overlap import BucketedAllReduce

    model = torch.nn.Linear(4, 4)
    return model, BucketedAllReduce(model.parameters(), 1 << 20, 1, overlap=overlap_on, link=link)


@pytest.mark.parametrize("value", [-0.001, float("nan"), float("inf"), None, "1 ms", True])
@pytest.mark.parametrize("overlap_on", [True, False])
def test_what_link_returns_is_checked_in_the_caller(value, overlap_on):
    # the bad value surfaces from backward() (the hook) or finish(), before any all-reduce,
    # so no process group is needed; it is not left on the link thread
    import torch

    model, sync = _hooked(lambda nbytes: value, overlap_on)
    try:
        with pytest.raises(ValueError, match="link"):
            model(torch.ones(2, 4)).sum().backward()
            sync.finish()
    finally:
        sync.remove()


def test_finish_after_remove_says_so():
    import torch

    for overlap_on in (True, False):
        model, sync = _hooked(None, overlap_on)
        sync.remove()
        model(torch.ones(2, 4)).sum().backward()          # no hooks left: nothing is sent
        with pytest.raises(RuntimeError, match="remove"):
            sync.finish()
