"""dtbook.parallel.counting: exact calls and bytes, against what each call was given."""

from dtbook.dist import launch


def _worker(rank, world_size):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from dtbook.parallel.counting import CommCounter

    mesh = init_device_mesh("cpu", (world_size,))
    before = dist.all_reduce
    with CommCounter() as c:
        dist.all_reduce(torch.ones(10))                                  # 40 B
        dist.all_gather_into_tensor(torch.empty(10 * world_size), torch.ones(10))
        d = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)])
        d.redistribute(mesh, [Replicate()]).to_local()                   # functional all-gather
        if rank == 0:
            dist.send(torch.ones(3, dtype=torch.float64), 1)
        else:
            dist.recv(torch.empty(3, dtype=torch.float64), 0)
        peer = 1 - rank                                  # a batched exchange through P2POp
        ops = [dist.P2POp(dist.isend, torch.ones(2), peer),
               dist.P2POp(dist.irecv, torch.empty(2), peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    return c.counts(), c.bytes(), dist.all_reduce is before  # restored on exit


def test_counts_module_and_functional_collectives():
    for counts, nbytes, restored in launch(_worker, 2, timeout=120):
        assert restored
        assert counts["all_reduce"] == 1 and nbytes["all_reduce"] == 40
        # one explicit all-gather (80 B gathered) and one from DTensor (8x4 fp32 = 128 B)
        assert counts["all_gather_into_tensor"] == 2
        assert nbytes["all_gather_into_tensor"] == 80 + 128
        p2p = counts.get("send", 0) + counts.get("recv", 0)
        assert p2p == 1 and nbytes.get("send", nbytes.get("recv")) == 24
        # torch's recv is built on irecv (and send on isend in some versions): one call each
        assert counts.get("irecv", 0) == counts.get("isend", 0) == 1, counts  # the P2POps
        assert nbytes["isend"] == nbytes["irecv"] == 8


def _module_only_worker(rank, world_size):
    import torch
    import torch.distributed as dist

    from dtbook.parallel.counting import CommCounter

    c = CommCounter(functional=False)
    for _ in range(2):                      # a counter may be entered again; calls add up
        with c:
            dist.all_reduce(torch.ones(10, dtype=torch.bfloat16))       # 20 B
    return c.counts(), c.bytes(), c._mode is None


def test_module_only_counter_skips_the_dispatch_mode():
    for counts, nbytes, no_mode in launch(_module_only_worker, 2, timeout=120):
        assert counts == {"all_reduce": 2} and nbytes == {"all_reduce": 40} and no_mode
