"""Chapter 17: the sequence-parallel formulas against independent counts, and the hand-written
ring attention, Ulysses and Megatron-SP against one process."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import comm
from dtbook import sequence_parallel as sq
from dtbook.parallel import sequence_parallel as sequence
from dtbook.symbolic import same


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_volumes_against_message_counts(p):
    b, s, h, nb = 2, 64 * p, 96, 2
    n = b * s * h * nb
    # Megatron-SP: each all-gather / reduce-scatter ring sends P − 1 messages of n/P
    assert sq.megatron_sp_bytes(b, s, h, p, nb) == pytest.approx(4 * (p - 1) * n / p)
    assert sq.megatron_sp_bytes(b, s, h, p, nb) == pytest.approx(sq.tp_allreduce_bytes(b, s, h, p, nb))
    # ring: one K and one V block of b·(S/P)·H to the neighbour, P − 1 times
    block = b * (s // p) * h * nb
    assert sq.ring_kv_bytes(b, s, h, p, nb) == pytest.approx((p - 1) * 2 * block)
    # Ulysses: each all-to-all sends every peer 1/P of the rank's buffer; four of them
    sent = sum(block / p for peer in range(p) if peer != 0) * 4
    assert sq.ulysses_bytes(b, s, h, p, nb) == pytest.approx(sent)
    assert sq.ring_kv_bytes(b, s, h, p, nb) / sq.ulysses_bytes(b, s, h, p, nb) == pytest.approx(sq.ring_ulysses_ratio(p))


def test_symbolic_ratio_and_memory():
    P, S, H, b = sp.symbols("P S H b", positive=True)
    assert same(sq.ring_kv_bytes(b, S, H, P) / sq.ulysses_bytes(b, S, H, P), P / 2)
    assert same(sq.attention_scores_bytes(b, S, 32) / sq.ulysses_scores_bytes(b, S, 32, P), P)
    assert sq.attention_scores_bytes(1, 128 * 1024, 32, 2) == 32 * (128 * 1024) ** 2 * 2


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_causal_blocks_against_brute_force(p):
    local = 4 * 2                                  # two chunks of 4 tokens
    for layout, zig in (("contiguous", False), ("zigzag", True)):
        work = []
        for r in range(p):
            q = sequence.positions(r, p, local, layout)
            pairs = 0
            for src in range(p):
                k = sequence.positions(src, p, local, layout)
                chunks = 2 if zig else 1
                for i, j in itertools.product(range(chunks), repeat=2):
                    qs = q[i * local // chunks:(i + 1) * local // chunks]
                    ks = k[j * local // chunks:(j + 1) * local // chunks]
                    pairs += bool((qs[:, None] >= ks[None, :]).any())
            work.append(pairs / (4 if zig else 1))
        assert max(work) == sq.causal_blocks(p, zigzag=zig)
        if not zig:
            assert np.mean(work) == sq.causal_steps_needed(p)
        # the positions of all ranks tile the sequence exactly once
        allpos = torch.cat([sequence.positions(r, p, local, layout) for r in range(p)])
        assert sorted(allpos.tolist()) == list(range(p * local))


def _simulate_ring(t_comp, t_comm, p, overlap):
    """Event by event: block i starts when block i − 1 is done and its K/V has arrived;
    the transfer of block i + 1 starts with block i (overlap) or after it (no overlap)."""
    done, arrived = 0.0, 0.0
    for i in range(p):
        start = max(done, arrived)
        done = start + t_comp
        if i < p - 1:
            arrived = (start if overlap else done) + t_comm
            if not overlap:
                done = arrived
    return done


@pytest.mark.parametrize("tc,tm", [(10, 2), (2, 10), (5, 5), (0, 3)])
@pytest.mark.parametrize("p", [1, 2, 8])
def test_ring_time_against_simulation(tc, tm, p):
    for overlap in (True, False):
        assert sq.ring_time(tc, tm, p, overlap) == pytest.approx(_simulate_ring(tc, tm, p, overlap))
    assert sq.hidden_fraction(tc, tm) == pytest.approx(min(1, tc / tm))


def test_merge_in_any_order_equals_softmax():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=g) for _ in range(3))
    k, v = (torch.randn(2, 3, 24, 8, dtype=torch.float64, generator=g) for _ in range(2))
    full = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
    parts = [sequence.block_state(q, k[..., j:j + 6, :], v[..., j:j + 6, :]) for j in range(0, 24, 6)]
    for order in itertools.permutations(range(4)):
        state = parts[order[0]]
        for i in order[1:]:
            state = sequence.merge(state, parts[i])
        assert torch.allclose(state[2], full, atol=1e-13)


def test_empty_rows_nan_unguarded_identity_guarded():
    q, k, v = torch.randn(1, 4), torch.randn(3, 4), torch.randn(3, 4)
    mask = torch.zeros(1, 3, dtype=torch.bool)
    assert torch.isnan(sequence.block_state(q, k, v, mask, safe=False)[2]).all()
    empty = sequence.block_state(q, k, v, mask)
    other = sequence.block_state(q, k, v)
    assert torch.equal(sequence.merge(empty, other)[2], other[2])


def _dist_worker(rank, world):
    import torch
    import torch.nn.functional as F
    from dtbook.parallel import sequence_parallel as sequence, tensor_parallel as tp

    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, 1, 2, 8, 4, dtype=torch.float64, generator=g)
    dy = torch.randn(1, 2, 8, 4, dtype=torch.float64, generator=g)
    errs = {}
    for causal, layout in ((True, "contiguous"), (True, "zigzag"), (False, "contiguous")):
        full = qkv.clone().requires_grad_()
        ref = F.scaled_dot_product_attention(*full, is_causal=causal)
        gref = torch.autograd.grad(ref, full, dy)[0]
        pos = sequence.positions(rank, world, 8 // world, layout)
        q, k, v = (t[..., pos, :].clone().requires_grad_() for t in qkv)
        o = sequence.ring_attention(q, k, v, causal=causal, layout=layout)
        grads = torch.autograd.grad(o, (q, k, v), dy[..., pos, :])
        errs[layout + str(causal)] = max([float((o - ref[..., pos, :]).abs().max())]
                                         + [float((gi - gref[i][..., pos, :]).abs().max())
                                            for i, gi in enumerate(grads)])
    # without the guard on empty rows, skipping the blocks wholly in the future is what keeps
    # NaN out; computing them under the right mask turns every row of rank 0 (whose future
    # holds rank 1's block) NaN, and leaves the last rank right
    pos = sequence.positions(rank, world, 4, "contiguous")
    q, k, v = (t[..., pos, :] for t in qkv)
    o = sequence.ring_attention(q, k, v, causal=True, safe=False)
    errs["unguarded, skipped"] = float((o - ref_causal(qkv)[..., pos, :]).abs().max())
    o = sequence.ring_attention(q, k, v, causal=True, safe=False,
                                mask_fn=lambda step, qp, kp: qp[:, None] >= kp[None, :])
    if rank == 0:
        errs["unguarded, computed: NaN"] = float(not torch.isnan(o).all())
    else:
        errs["unguarded, computed"] = float((o - ref_causal(qkv)[..., pos, :]).abs().max())
    sl = slice(rank * 4, rank * 4 + 4)
    q, k, v = (t[..., sl, :].transpose(1, 2).clone() for t in qkv)
    o = sequence.ulysses_attention(q, k, v, causal=True)
    errs["ulysses"] = float((o.transpose(1, 2) - ref_causal(qkv)[..., sl, :]).abs().max())
    torch.manual_seed(0)
    full = tp.Block(8, 2).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    blk = sequence.SPBlock(full, rank, world)
    import warnings
    with warnings.catch_warnings(record=True) as caught:   # torch 2.13 deprecates the *_tensor
        warnings.simplefilter("always")                     # collectives: none may be used
        y = blk(x[:, rank * 2:rank * 2 + 2])
        y.sum().backward()                                  # the backward's reduce-scatter too
    errs["sp"] = float((y - full(x)[:, rank * 2:rank * 2 + 2]).abs().max())
    errs["deprecation warnings"] = float(sum(issubclass(w.category, FutureWarning) for w in caught))
    return errs


def ref_causal(qkv):
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(*qkv, is_causal=True)


def test_ring_ulysses_sp_on_two_ranks_equal_one_process():
    from dtbook.dist import launch

    for errs in launch(_dist_worker, 2, timeout=120):
        assert max(errs.values()) < 1e-12, errs


def test_formulas_refuse_bad_numbers():
    with pytest.raises(ValueError, match="world"):
        sq.ring_kv_bytes(1, 1024, 64, 0)
    with pytest.raises(ValueError, match="t_comm"):
        sq.hidden_fraction(1.0, 0)
