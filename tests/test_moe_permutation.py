"""dtbook.parallel.moe's token permutation (chapter 36): the permuted layer equal to the loop
and to chapter 18's moe_dense, and chapter 18's ep_forward with these experts on four gloo
ranks equal to one process, with its splits equal to the routing's counts."""

import torch

from dtbook.parallel import moe as expert

T, H, F_, E, K = 48, 8, 16, 8, 2


def _setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g, dtype=torch.float64)
    wg = torch.randn(E, H, generator=g, dtype=torch.float64)
    w1, w3 = (torch.randn(E, H, F_, generator=g, dtype=torch.float64) / 3 for _ in range(2))
    w2 = torch.randn(E, F_, H, generator=g, dtype=torch.float64) / 4
    return x, wg, w1, w3, w2


def test_permute_is_a_stable_sort():
    idx = torch.tensor([[3, 1], [1, 0], [3, 2]])
    order, counts = expert.permute(idx, 4)
    assert order.tolist() == [3, 1, 2, 5, 0, 4] and counts.tolist() == [1, 2, 1, 2]


def test_permuted_equals_loop_and_moe_dense():
    x, wg, w1, w3, w2 = _setup()
    weights, idx, _ = expert.route_topk(x @ wg.T, K)
    swiglu = lambda b, e: expert.swiglu_expert(b, w1[e], w3[e], w2[e])
    assert torch.allclose(expert.moe_permuted(x, weights, idx, swiglu, E),
                          expert.moe_loop(x, weights, idx, swiglu), atol=1e-12)
    gelu = lambda b, e: expert.expert_ffn(b, w1[e], w2[e])
    dense, info = expert.moe_dense(x, wg, w1, w2, K)
    assert torch.allclose(expert.moe_permuted(x, weights, idx, gelu, E), dense, atol=1e-12)
    # an expert no token picks
    idx0 = idx.clone()
    idx0[idx0 == 5] = 4
    assert torch.allclose(expert.moe_permuted(x, weights, idx0, swiglu, E),
                          expert.moe_loop(x, weights, idx0, swiglu), atol=1e-12)


def _ep_worker(rank, world):
    import torch
    from dtbook.parallel import moe as expert
    x, wg, w1, w3, w2 = _setup()
    mine = slice(rank * T // world, (rank + 1) * T // world)
    weights, idx, _ = expert.route_topk(x[mine] @ wg.T, K)
    log = {}
    swiglu = lambda b, e: expert.swiglu_expert(b, w1[e], w3[e], w2[e])
    y = expert.ep_forward(x[mine], weights, idx, swiglu, E, log=log)
    try:                                      # E = 6 does not split over four ranks
        expert.ep_forward(x[mine], weights, idx, swiglu, 6)
        bad = None
    except ValueError as err:
        bad = str(err)
    return y, log, idx, bad


def test_ep_forward_with_swiglu_experts_on_four_ranks():
    from dtbook.dist import launch
    out = launch(_ep_worker, 4, timeout=120)
    x, wg, w1, w3, w2 = _setup()
    weights, idx, _ = expert.route_topk(x @ wg.T, K)
    ref = expert.moe_loop(x, weights, idx, lambda b, e: expert.swiglu_expert(b, w1[e], w3[e], w2[e]))
    assert torch.allclose(torch.cat([y for y, _, _, _ in out]), ref, atol=1e-12)
    m = torch.stack([torch.bincount(i.reshape(-1) // (E // 4), minlength=4) for _, _, i, _ in out])
    for r, (_, log, _, bad) in enumerate(out):
        assert log["in_splits"] == m[r].tolist() and log["out_splits"] == m[:, r].tolist()
        assert bad is not None and bad.startswith("experts")
