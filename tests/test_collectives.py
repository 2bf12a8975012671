"""Tests of dtbook.collectives: every algorithm against torch.distributed's own collective,
and its counted steps, bytes and messages against the closed forms of dtbook.comm.

One launch per world size (2, 3, 4) runs every check and returns what it saw; the tests
below read from it, so the whole file costs a few launches.
"""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from dtbook import collectives as C
from dtbook import comm
from dtbook.dist import launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORLD_SIZES = (2, 3, 4)
EVEN = 2 * 3 * 4 * 5       # elements: divides by P, by 2P and by every power of two used
ODD = 13                   # divides by none of them
TINY = 2                   # fewer elements than ranks: some blocks are empty
SIZES = (EVEN, ODD, TINY)
ITEM = 8                   # int64


def _hierarchies(P):
    return [g for g in range(1, P + 1) if P % g == 0]


def _allreduce_cases(P):
    cases = []
    for alg in C.algorithms("allreduce"):
        if alg == "hierarchical":
            cases += [(alg, {"inner": g}) for g in _hierarchies(P)]
            cases.append((alg, {"inner": 1, "outer_algorithm": "tree"}))
            if P == 4:
                cases.append((alg, {"inner": 2, "outer_algorithm": "rabenseifner"}))
        else:
            cases.append((alg, {}))
    return cases


def _key(alg, kw):
    return alg + "".join(f",{k}={v}" for k, v in sorted(kw.items()))


def _data(rank, numel, seed, dtype=torch.int64):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=g, dtype=dtype)
    return torch.randint(-1000, 1000, (numel,), generator=g, dtype=dtype)


def worker(rank, P):
    out = {"allreduce": {}, "allreduce_float": {}, "allreduce_max": {}, "reduce_scatter": {},
           "allgather": {}, "broadcast": {}, "alltoall": {}, "errors": {}}

    # all-reduce: every algorithm, three sizes, exact on integers
    for alg, kw in _allreduce_cases(P):
        for numel in SIZES:
            x = _data(rank, numel, 1)
            ref = x.clone()
            dist.all_reduce(ref)
            stats = C.all_reduce(x, alg, **kw)
            out["allreduce"][(_key(alg, kw), numel)] = (torch.equal(x, ref), stats)
    # floats agree up to the order of the additions; max is exact
    for alg, kw in _allreduce_cases(P):
        x = _data(rank, ODD, 2, torch.float32)
        ref = x.clone()
        dist.all_reduce(ref)
        C.all_reduce(x, alg, **kw)
        out["allreduce_float"][_key(alg, kw)] = torch.allclose(x, ref, rtol=1e-5, atol=1e-5)
        y = _data(rank, ODD, 3)
        ref = y.clone()
        dist.all_reduce(ref, op=dist.ReduceOp.MAX)
        C.all_reduce(y, alg, op="max", **kw)
        out["allreduce_max"][_key(alg, kw)] = torch.equal(y, ref)

    # reduce-scatter: block `rank` of tensor_split(input, P), against dist.reduce_scatter
    for alg in C.algorithms("reduce_scatter"):
        for numel in SIZES:
            x = _data(rank, numel, 4)
            blocks = torch.tensor_split(x, P)
            ref = torch.empty_like(blocks[rank])
            dist.reduce_scatter(ref, [b.clone() for b in blocks])
            got = torch.empty_like(ref)
            try:
                stats = C.reduce_scatter(got, x, alg)
            except ValueError as err:
                out["reduce_scatter"][(alg, numel)] = ("ValueError", str(err))
                continue
            same_input = torch.equal(x, _data(rank, numel, 4))
            out["reduce_scatter"][(alg, numel)] = (torch.equal(got, ref) and same_input, stats)

    # all-gather: against dist.all_gather, padded to equal blocks (gloo needs them equal)
    for alg in C.algorithms("allgather"):
        for numel in SIZES:
            sizes = [b.numel() for b in torch.tensor_split(torch.empty(numel), P)]
            mine = _data(rank, sizes[rank], 5)
            padded = torch.zeros(max(sizes), dtype=mine.dtype)
            padded[:sizes[rank]] = mine
            gathered = [torch.empty_like(padded) for _ in range(P)]
            dist.all_gather(gathered, padded)
            ref = torch.cat([g[:s] for g, s in zip(gathered, sizes)])
            got = torch.empty(numel, dtype=mine.dtype)
            try:
                stats = C.all_gather(got, mine, alg)
            except ValueError as err:
                out["allgather"][(alg, numel)] = ("ValueError", str(err))
                continue
            out["allgather"][(alg, numel)] = (torch.equal(got, ref), stats)

    # broadcast from the first and the last rank
    for alg, kw in [("tree", {}), ("ring", {}), ("ring", {"chunks": 3})]:
        for src in sorted({0, P - 1}):
            for numel in SIZES:
                x = _data(rank, numel, 6)
                ref = x.clone()
                dist.broadcast(ref, src)
                stats = C.broadcast(x, src, alg, **kw)
                out["broadcast"][(_key(alg, kw), src, numel)] = (torch.equal(x, ref), stats)

    # all-to-all, against dist.all_to_all_single
    x = _data(rank, EVEN, 7)
    ref = torch.empty_like(x)
    dist.all_to_all_single(ref, x)
    got = torch.empty_like(x)
    stats = C.all_to_all(got, x)
    out["alltoall"][EVEN] = (torch.equal(got, ref), stats)

    # emulated links: a step waits (bytes to the busiest peer) / β before sending
    import time
    x = torch.zeros(EVEN, dtype=torch.int64)
    dist.barrier()
    t0 = time.perf_counter()
    with C.emulated_links(1e6):
        stats = C.all_reduce(x, "ring")
    out["emulated"] = (time.perf_counter() - t0, stats)
    # per-link speeds: links into and out of rank 0 are 10x slower
    x = torch.zeros(EVEN, dtype=torch.int64)
    dist.barrier()
    t0 = time.perf_counter()
    with C.emulated_links(lambda s, d: 1e6 if 0 in (s, d) else 1e7):
        stats = C.all_reduce(x, "ring")
    out["emulated_slow0"] = (time.perf_counter() - t0, stats)

    # bad calls raise ValueError with a message (the same on every rank: nothing was sent)
    bad = {
        "algorithm": lambda: C.all_reduce(torch.zeros(4), "bogus"),
        "op": lambda: C.all_reduce(torch.zeros(4), "ring", op="mean"),
        "inner_flat": lambda: C.all_reduce(torch.zeros(4), "ring", inner=2),
        "inner_missing": lambda: C.all_reduce(torch.zeros(4), "hierarchical"),
        "inner_divides": lambda: C.all_reduce(torch.zeros(4), "hierarchical", inner=P + 1),
        "contiguous": lambda: C.all_reduce(torch.zeros(4, 4).t(), "ring"),
        "src": lambda: C.broadcast(torch.zeros(4), P, "tree"),
        "chunks": lambda: C.broadcast(torch.zeros(4), 0, "ring", chunks=0),
        "rs_output": lambda: C.reduce_scatter(torch.zeros(EVEN), torch.zeros(EVEN), "ring"),
        "ag_input": lambda: C.all_gather(torch.zeros(EVEN), torch.zeros(EVEN), "ring"),
        "a2a_size": lambda: C.all_to_all(torch.zeros(P * 2 + 1), torch.zeros(P * 2 + 1)),
        "emulate": lambda: C.emulated_links(0).__enter__(),
    }
    for name, call in bad.items():
        try:
            call()
            out["errors"][name] = None
        except ValueError as err:
            out["errors"][name] = str(err)
    return out


@pytest.fixture(scope="module")
def runs():
    return {P: launch(worker, P, timeout=120) for P in WORLD_SIZES}


def _combined(per_rank, section, key):
    oks = [r[section][key][0] for r in per_rank]
    return all(oks), C.combine(r[section][key][1] for r in per_rank)


def _expect_counts(got, want, numel):
    """Exact for sizes P divides; otherwise the same steps and bytes sent, and each step's
    busiest link at most one element more than the even share."""
    assert got.steps == want.steps
    assert got.sent_bytes == pytest.approx(float(want.sent_bytes), rel=1e-12)
    if numel == EVEN:
        assert got.step_bytes == pytest.approx(float(want.step_bytes), rel=1e-12)
        assert got.port_bytes == pytest.approx(float(want.port_bytes), rel=1e-12)
        assert got.messages == pytest.approx(float(want.messages), rel=1e-12)
    else:
        assert want.step_bytes <= got.step_bytes <= want.step_bytes + 2 * ITEM * want.steps
        assert want.port_bytes <= got.port_bytes <= want.port_bytes + 4 * ITEM * want.steps


# ----------------------------------------------------------------------------- all-reduce

@pytest.mark.parametrize("P", WORLD_SIZES)
def test_allreduce_matches_torch(runs, P):
    bad = [k for k in runs[P][0]["allreduce"] if not _combined(runs[P], "allreduce", k)[0]]
    assert not bad, f"P={P}: results differ from dist.all_reduce for {bad}"
    for section in ("allreduce_float", "allreduce_max"):
        bad = [k for k, ok in runs[P][0][section].items()
               if not all(r[section][k] for r in runs[P])]
        assert not bad, f"P={P}: {section} differs from dist.all_reduce for {bad}"


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_allreduce_counts_equal_closed_forms(runs, P):
    for alg, kw in _allreduce_cases(P):
        for numel in (EVEN, ODD):
            _, got = _combined(runs[P], "allreduce", (_key(alg, kw), numel))
            want = comm.traffic("allreduce", numel * ITEM, P, alg, **kw)
            _expect_counts(got, want, numel)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_ring_allreduce_per_rank(runs, P):
    # every rank, not just the average: 2(P − 1)/P · n bytes in 2(P − 1) messages
    n = EVEN * ITEM
    for r in runs[P]:
        s = r["allreduce"][("ring", EVEN)][1]
        assert s.sent_bytes == s.recv_bytes == 2 * (P - 1) * n // P
        assert s.messages == s.received == 2 * (P - 1)
        assert s.steps == 2 * (P - 1)
        assert set(s.sent_to) == {(s.rank + 1) % P}


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_tree_root_carries_the_load(runs, P):
    # A binomial tree moves as many bytes in all as a ring, but the root sends ⌈log₂P⌉ n.
    n = EVEN * ITEM
    _, g = _combined(runs[P], "allreduce", ("tree", EVEN))
    assert g.sent_bytes == pytest.approx(2 * (P - 1) / P * n)
    assert g.max_sent_bytes == (P - 1).bit_length() * n
    assert runs[P][0]["allreduce"][("tree", EVEN)][1].sent_bytes == g.max_sent_bytes


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_model_time_of_the_counted_schedule(runs, P):
    # Stats.time and GroupStats.time charge α per step and 1/β per byte, as comm does.
    a, b = 3e-6, 7e9
    n = EVEN * ITEM
    for alg, kw in _allreduce_cases(P):
        if alg == "hierarchical":
            continue
        _, g = _combined(runs[P], "allreduce", (_key(alg, kw), EVEN))
        for links in ("switched", "direct"):
            assert g.time(a, b, links) == pytest.approx(
                comm.allreduce_time(n, P, a, b, alg, links=links), rel=1e-12), (alg, links)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_port_and_wire_differ_only_for_two_peers_a_step(runs, P):
    # Ring-like schedules send one message each way per step: a port carries what a wire
    # does. The bidirectional rings and the binary trees talk to two peers at once.
    n = EVEN * ITEM
    two_peers = {"bidirectional_ring", "two_sided_ring", "binary_tree", "double_binary_tree"}
    for alg, kw in _allreduce_cases(P):
        _, g = _combined(runs[P], "allreduce", (_key(alg, kw), EVEN))
        if alg in two_peers and P > 2:
            assert g.port_bytes > g.step_bytes, alg
        else:
            assert g.port_bytes == g.step_bytes, (alg, kw)
    _, ring = _combined(runs[P], "allreduce", ("ring", EVEN))
    for alg in ("bidirectional_ring", "two_sided_ring"):  # no gain through a port
        assert _combined(runs[P], "allreduce", (alg, EVEN))[1].port_bytes == ring.port_bytes
    assert ring.port_bytes == 2 * (P - 1) * n // P


def test_hierarchical_levels_and_links(runs):
    P, G = 4, 2
    n = EVEN * ITEM
    _, g = _combined(runs[P], "allreduce", (_key("hierarchical", {"inner": G}), EVEN))
    a = {"inner": 1e-6, "outer": 5e-6}
    b = {"inner": 600e9, "outer": 50e9}
    want = comm.allreduce_time(n, P, 0, 1, "hierarchical", inner=G, alpha_inner=a["inner"],
                               beta_inner=b["inner"], alpha_outer=a["outer"],
                               beta_outer=b["outer"])
    assert g.time(a, b) == pytest.approx(want, rel=1e-12)
    levels = [lvl for lvl, _ in g.rounds.values()]
    assert levels == ["inner"] * (G - 1) + ["outer"] * 2 * (P // G - 1) + ["inner"] * (G - 1)
    # bytes that leave a node: each rank sends 2(N − 1)/N · n/G across, not 2(P − 1)/P · n
    across = sum(v for (s, d), v in g.links.items() if s // G != d // G)
    inside = sum(v for (s, d), v in g.links.items() if s // G == d // G)
    assert across == P * 2 * (P // G - 1) / (P // G) * n / G
    assert inside == P * 2 * (G - 1) / G * n


# ----------------------------------------------------------------------------- others

@pytest.mark.parametrize("P", WORLD_SIZES)
def test_reduce_scatter_and_allgather(runs, P):
    for section, coll in (("reduce_scatter", "reduce_scatter"), ("allgather", "allgather")):
        for (alg, numel), first in runs[P][0][section].items():
            if first[0] == "ValueError":
                assert P & (P - 1) and alg != "ring", (section, alg, P)
                assert "power-of-two" in first[1]
                with pytest.raises(ValueError, match="power of two"):
                    comm.traffic(coll, numel * ITEM, P, alg)
                continue
            ok, got = _combined(runs[P], section, (alg, numel))
            assert ok, f"{section} {alg} P={P} numel={numel} differs from torch"
            if numel != TINY:
                _expect_counts(got, comm.traffic(coll, numel * ITEM, P, alg), numel)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_broadcast_and_alltoall(runs, P):
    for (key, src, numel), _ in runs[P][0]["broadcast"].items():
        ok, got = _combined(runs[P], "broadcast", (key, src, numel))
        assert ok, f"broadcast {key} from {src}, P={P}, numel={numel} differs from torch"
        if numel == EVEN:
            alg, *opt = key.split(",")
            kw = {"chunks": int(opt[0].split("=")[1])} if opt else {}
            _expect_counts(got, comm.traffic("broadcast", numel * ITEM, P, alg, **kw), numel)
    ok, got = _combined(runs[P], "alltoall", EVEN)
    assert ok
    _expect_counts(got, comm.traffic("alltoall", EVEN * ITEM, P), EVEN)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_bad_calls_raise_value_error(runs, P):
    errors = runs[P][0]["errors"]
    assert all(msg for msg in errors.values()), errors
    assert "supported: 'ring'" in errors["algorithm"]
    assert "inner" in errors["inner_missing"] and "divides" in errors["inner_divides"]


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_emulated_links_wait_for_the_bytes(runs, P):
    elapsed, _ = runs[P][0]["emulated"]
    g = C.combine(r["emulated"][1] for r in runs[P])
    assert elapsed >= g.step_bytes / 1e6          # at least bytes on the busiest link / β
    assert g.steps == 2 * (P - 1)
    # every step has a link out of rank 0 in it, at 1 MB/s
    elapsed0, _ = runs[P][0]["emulated_slow0"]
    assert elapsed0 >= g.step_bytes / 1e6


def test_through_bytes_count_both_directions(runs):
    # With two ranks, ring, tree and recursive doubling all move 2n through each rank,
    # although their busiest links carry n, 2n and n.
    n = EVEN * ITEM
    for alg, link in (("ring", n), ("tree", 2 * n), ("recursive_doubling", n)):
        _, g = _combined(runs[2], "allreduce", (alg, EVEN))
        assert g.through_bytes == 2 * n and g.step_bytes == link, alg


def test_algorithm_lists():
    assert set(C.algorithms("allreduce")) == set(comm.algorithms("allreduce"))
    assert set(C.algorithms("reduce_scatter")) <= set(comm.algorithms("reduce_scatter"))
    assert set(C.algorithms("allgather")) <= set(comm.algorithms("allgather"))
    assert set(C.algorithms("broadcast")) == set(comm.algorithms("broadcast"))
    with pytest.raises(ValueError, match="allreduce"):
        C.algorithms("gossip")


def test_combine_needs_stats():
    with pytest.raises(ValueError):
        C.combine([])
