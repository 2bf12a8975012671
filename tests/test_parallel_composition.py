"""dtbook.parallel.composition (chapter 24): a TP x PP run on 4 gloo ranks against one process,
with its calls counted against dtbook.composition; the per-rank parameter count against the
sharded modules themselves."""

import copy

import pytest

from dtbook import composition


@pytest.mark.parametrize("hidden, layers, tp", [(16, 2, 2), (32, 3, 4), (24, 1, 1)])
def test_rank_params_count_the_sharded_block(hidden, layers, tp):
    from dtbook.parallel.tensor_parallel import Block, ParallelBlock

    heads = 4
    count = 0
    for _ in range(layers):
        shard = ParallelBlock(Block(hidden, heads), 0, tp)
        count += sum(p.numel() for p in shard.parameters())
    assert count == composition.megatron_rank_params(hidden, layers, tp)


def _worker(rank, world, groups, model, xs, ys, m):
    from dtbook.parallel import composition as composition_run
    from dtbook.parallel.counting import CommCounter

    c = (CommCounter(), CommCounter())
    out = composition_run.train_3d(rank, world, groups, model, xs, ys, lr=1e-3, microbatches=m, counters=c)
    out["counts"] = (c[0].counts(), c[1].counts())
    return out


def test_tp_pp_run_equals_one_process():
    import torch

    from dtbook.dist import launch
    from dtbook.parallel import composition as composition_run

    dims, m, steps = (1, 2, 2), 2, 2                     # (dp, pp, tp): PP peers are 2 apart
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = composition_run.make_model(8, 2, 2)
        xs, ys = composition_run.make_data(steps, m * 2, 4, 8)
        results = launch(_worker, 4, composition_run.mesh_groups(dims), model, xs, ys, m, timeout=120)
        ref = copy.deepcopy(model)
        composition_run.train_reference(ref, xs, ys, 1e-3)
        for r in results:
            _, p, t = r["coords"]
            want = composition_run.shard_stage(ref, p, dims[1], t, dims[2]).state_dict()
            for k, v in want.items():
                assert torch.allclose(r["state"][k], v, rtol=0, atol=1e-10), k
            schedule, dp = r["counts"]
            assert schedule["all_reduce"] == steps * composition.tp_calls_per_step(2, 2, m)
            assert schedule["isend"] == schedule["recv"] == steps * m
            assert dp == {"all_reduce": steps}
    finally:
        torch.set_default_dtype(old)


def test_the_ranks_module_does_not_import_sympy():
    # each of eight ranks on two cores would pay about a second for it (chapter 24's budget)
    import subprocess
    import sys

    code = "import sys, dtbook.parallel.composition; assert 'sympy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
