"""Chapter 17: the sequence-parallel formulas against independent counts, and the hand-written
ring attention, Ulysses and Megatron-SP against one process."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import activations, comm
from dtbook import sequence_parallel as sq
from dtbook import tensor_parallel as tpf
from dtbook.parallel import sequence_parallel as sequence
from dtbook.symbolic import same


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_volumes_against_message_counts(p):
    b, s, h, nb = 2, 64 * p, 96, 2
    n = b * s * h * nb
    # Megatron-SP: each all-gather / reduce-scatter ring sends P − 1 messages of n/P
    sp_sent = sq.megatron_sp_bytes(b, s, h, p, value_bytes=nb)
    assert sp_sent == pytest.approx(4 * (p - 1) * n / p)
    # the same bytes as tensor parallelism's two forward all-reduces (chapter 15)
    assert sp_sent == pytest.approx(tpf.layer_comm_bytes(b, s, h, p, bytes_per_element=nb,
                                                         backward=False))
    # ring: one K and one V block of b·(S/P)·H to the neighbour, P − 1 times
    block = b * (s // p) * h * nb
    ring = sq.ring_kv_bytes(b, s, h, p, value_bytes=nb)
    assert ring == pytest.approx((p - 1) * 2 * block)
    # Ulysses: each all-to-all sends every peer 1/P of the rank's buffer; four of them
    sent = sum(block / p for peer in range(p) if peer != 0) * 4
    uly = sq.ulysses_bytes(b, s, h, p, value_bytes=nb)
    assert uly == pytest.approx(sent)
    assert ring / uly == pytest.approx(sq.ring_ulysses_ratio(p))


def test_symbolic_ratio_and_memory():
    P, S, H, b = sp.symbols("P S H b", positive=True)
    assert same(sq.ring_kv_bytes(b, S, H, P) / sq.ulysses_bytes(b, S, H, P), P / 2)
    assert same(activations.attention_scores_bytes(b, S, 32) / sq.ulysses_scores_bytes(b, S, 32, P), P)
    assert activations.attention_scores_bytes(1, 128 * 1024, 32, value_bytes=2) == 32 * (128 * 1024) ** 2 * 2
    # the two-term model is the block's input and output plus the scores
    assert same(sq.attention_activation_bytes(b, S, H, 32),
                2 * 2 * b * S * H + activations.attention_scores_bytes(b, S, 32))


def _te_backward_sends(p):
    """K/V-block-sized sends of one rank in Transformer Engine's ring backward
    (AttnFuncWithCPAndKVP2P.backward, not FP8), its loop replayed: step 0 sends K and V,
    steps 1 … P−2 send K, V and the accumulated dK, dV in one buffer, step P−1 sends dK, dV."""
    sends = 0
    for i in range(p):
        kv = i < p - 1                    # the K/V half of the buffer goes on but at the end
        dkv = i > 0                       # the dK/dV half once a step has produced it
        sends += kv + dkv
    return sends


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_ring_transfers_forward_and_the_two_backwards(p):
    assert sq.ring_kv_transfers(p, backward=False) == p - 1          # forward: P − 1 steps
    # production (K, V kept only for the own block): backward re-circulates K and V
    assert sq.ring_kv_transfers(p) - sq.ring_kv_transfers(p, backward=False) == _te_backward_sends(p)
    # forward keeps every block it received: backward sends dK, dV back, P − 1 times
    assert sq.ring_kv_transfers(p, kv_saved=True) == 2 * (p - 1)
    P = sp.Symbol("P", positive=True)
    assert same(sq.ring_kv_transfers(P), 3 * (P - 1))


def _ring_count_worker(rank, world, b, S, H):
    import torch
    from dtbook.parallel import sequence_parallel as sequence
    from dtbook.parallel.counting import CommCounter

    g = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(b, 1, S // world, H, dtype=torch.float64, generator=g,
                           requires_grad=True) for _ in range(3))
    with CommCounter() as fwd:
        o = sequence.ring_attention(q, k, v)
    with CommCounter() as bwd:
        o.sum().backward()
    return fwd.counts(), fwd.bytes(), bwd.counts(), bwd.bytes()


def test_runnable_ring_sends_what_ring_kv_transfers_counts_with_kv_saved():
    from dtbook.dist import launch

    b, S, H, world = 2, 12, 4, 3            # one head of width H: the K/V block is b·(S/P)·H
    step = sq.ring_kv_step_bytes(b, S, H, world, value_bytes=8)
    for f_calls, f_bytes, b_calls, b_bytes in launch(_ring_count_worker, world, b, S, H,
                                                     timeout=120):
        assert f_calls["isend"] == sq.ring_kv_transfers(world, backward=False)
        assert f_bytes["isend"] == sq.ring_kv_bytes(b, S, H, world, value_bytes=8)
        assert f_bytes["isend"] + b_bytes["isend"] == sq.ring_kv_transfers(world, kv_saved=True) * step


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
    with pytest.raises(ValueError, match="kv_saved"):
        sq.ring_kv_transfers(4, kv_saved=1)
    with pytest.raises(ValueError, match="t_comm"):
        sq.hidden_fraction(1.0, 0)
