"""Chapter 15: the tensor-parallel formulas against independent counts, and the hand-written
modules against the single process (the f/g algebra run in one process over a fake group)."""

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import comm, flops, models
from dtbook import tensor_parallel as tpf
from dtbook.parallel import tensor_parallel as tp
from dtbook.symbolic import assert_same, batch as b, hidden as d, seq as s, world as P


def _count_linear_flops(batch, seq, hidden, heads):
    """Forward FLOPs of one Block's weight matmuls, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    block = tp.Block(hidden, heads)
    x = torch.randn(batch, seq, hidden)
    with FlopCounterMode(display=False) as counter:
        block(x)
    return counter.get_total_flops()


def test_forward_flops_match_torch_flop_counter_and_chapter_01():
    # FlopCounterMode counts the weight matmuls (on CPU it does not see inside SDPA);
    # the attention products come from chapter 01's attention_flops
    for batch, seq, hidden, heads in ((2, 16, 32, 4), (1, 64, 48, 6)):
        counted = _count_linear_flops(batch, seq, hidden, heads)
        attention = flops.attention_flops(batch, seq, heads, hidden // heads)
        assert counted + attention == tpf.layer_forward_flops(batch, seq, hidden)


def test_training_flops_are_six_psi_per_token_for_the_weights():
    psi = 12 * d**2
    assert_same(tpf.layer_training_flops(b, s, d) - 12 * b * s**2 * d,
                flops.training_flops(psi, b * s), "6Ψ")


def test_comm_time_is_four_ring_allreduces():
    t = tpf.layer_comm_time(4, 2048, 4096, 8, 1e-6, 450e9)
    n = 4 * 2048 * 4096 * 2
    assert np.isclose(t, 4 * comm.allreduce_time(n, 8, 1e-6, 450e9))
    # bytes: what comm.traffic says a ring all-reduce sends per rank, four times
    sent = comm.traffic("allreduce", n, 8).sent_bytes
    assert np.isclose(tpf.layer_comm_bytes(4, 2048, 4096, 8), 4 * sent)


def test_ratio_limit_is_the_limit_of_the_full_ratio():
    full = tpf.compute_comm_ratio(b, s, d, P, sp.Symbol("F", positive=True), 0, sp.Symbol("beta", positive=True))
    limit = sp.limit(full, s, 0)
    assert_same(limit, tpf.ratio_bandwidth_limit(d, P, sp.Symbol("F", positive=True),
                                                 sp.Symbol("beta", positive=True)), "R limit")
    d_star = tpf.width_for_unit_ratio(8, 1e15, 450e9)
    assert np.isclose(tpf.ratio_bandwidth_limit(d_star, 8, 1e15, 450e9), 1.0)


def test_heads_and_gqa():
    assert tpf.heads_per_rank(64, 8) == 8
    with pytest.raises(ValueError, match="tp = 6 does not divide heads = 32"):
        tpf.heads_per_rank(32, 6)
    assert tpf.padded_heads(32, 6) == 36 and tpf.padded_heads(32, 8) == 32
    cfg = models.get("llama3-70b")
    assert tpf.kv_heads_per_rank(cfg.kv_heads, 8) == 1
    assert tpf.kv_heads_per_rank(cfg.kv_heads, 4) == 2
    with pytest.raises(ValueError):
        tpf.kv_heads_per_rank(8, 3)


def _sharded_forward_by_hand(full: tp.MLP, x, world):
    """Megatron MLP without processes: each rank's partial output, summed (what g does)."""
    parts = []
    for r in range(world):
        w1 = full.fc1.weight.chunk(world, 0)[r]
        b1 = full.fc1.bias.chunk(world, 0)[r]
        w2 = full.fc2.weight.chunk(world, 1)[r]
        parts.append(torch.nn.functional.gelu(x @ w1.T + b1) @ w2.T)
    return sum(parts) + full.fc2.bias


def test_column_row_mlp_equals_full_mlp_without_processes():
    torch.manual_seed(0)
    full = tp.MLP(16).double()
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    for world in (1, 2, 4):
        assert torch.allclose(_sharded_forward_by_hand(full, x, world), full(x), atol=1e-12)


def test_parallel_modules_slice_the_full_weights():
    torch.manual_seed(0)
    full = tp.Block(16, 4)
    col = tp.ColumnParallelLinear(full.attn.q, 1, 2)
    row = tp.RowParallelLinear(full.attn.o, 1, 2)
    assert torch.equal(col.weight, full.attn.q.weight[8:])
    assert torch.equal(col.bias, full.attn.q.bias[8:])
    assert torch.equal(row.weight, full.attn.o.weight[:, 8:])
    assert torch.equal(row.bias, full.attn.o.bias)          # whole: added once, after g


def test_tp_block_on_two_gloo_ranks_matches_one_process():
    from dtbook.dist import launch

    def worker(rank, world_size):
        import torch
        from dtbook.parallel import tensor_parallel as tp
        from dtbook.parallel.counting import CommCounter

        torch.manual_seed(0)
        full = tp.Block(16, 4).double()
        x = torch.randn(2, 4, 16, dtype=torch.float64)
        shard = tp.ParallelBlock(full, rank, world_size).double()
        xs, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        full(xr).sum().backward()
        with CommCounter() as c:
            y = shard(xs)
            y.sum().backward()
        return ((y - full(x)).abs().max().item(), (xs.grad - xr.grad).abs().max().item(),
                c.counts())

    for out_err, grad_err, counts in launch(worker, 2):
        assert out_err < 1e-10 and grad_err < 1e-10
        assert counts == {"all_reduce": tpf.allreduces_per_layer()}


@pytest.mark.parametrize("world", [1, 2, 4])
def test_layer_params_per_rank_counts_the_parallel_blocks_tensors(world):
    full = tp.Block(32, 4)
    for rank in range(world):
        shard = tp.ParallelBlock(full, rank, world) if world > 1 else full
        assert sum(p.numel() for p in shard.parameters()) == tpf.layer_params_per_rank(32, world)
