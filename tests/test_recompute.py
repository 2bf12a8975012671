"""Tests for dtbook.recompute (chapter 21): the overhead against FLOPs counted by PyTorch,
the √L reduction against a brute-force minimum, and LiveBytes against autograd's own saves
and the checkpoint formula."""

import math

import numpy as np
import pytest
import sympy as sp
import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from dtbook import activations, recompute


def _stack(layers=8, width=16, seed=0):
    torch.manual_seed(seed)
    return torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))


def _run(stack, x, k=None, checkpointed=None):
    """Segments of k layers; the first ``checkpointed`` layers inside checkpoints."""
    n = len(stack)
    checkpointed = n if checkpointed is None else checkpointed
    step = k or n

    def seg(y, layers):
        for layer in layers:
            y = torch.tanh(layer(y))
        return y

    for i in range(0, n, step):
        layers = stack[i:i + step]
        x = checkpoint(seg, x, layers, use_reentrant=False) if k and i < checkpointed else seg(x, layers)
    return x


def _flops(stack, x, **kw):
    with FlopCounterMode(display=False) as fc:
        _run(stack, x.clone().requires_grad_(), **kw).sum().backward()
    return fc.get_total_flops()


@pytest.mark.parametrize("checkpointed, fraction", [(8, 1.0), (4, 0.5), (2, 0.25)])
def test_overhead_matches_counted_flops(checkpointed, fraction):
    stack, x = _stack(), torch.randn(4, 16)
    base = _flops(stack, x)
    with_ckpt = _flops(stack, x, k=2, checkpointed=checkpointed)
    assert math.isclose(with_ckpt / base - 1, recompute.recompute_overhead(fraction), abs_tol=1e-12)


def test_step_time_and_symbols():
    T, c = sp.symbols("T c", positive=True)
    assert sp.simplify(recompute.recompute_step_time(T, 1) - sp.Rational(4, 3) * T) == 0
    assert sp.simplify(recompute.recompute_overhead(c) - c / 3) == 0
    assert recompute.recompute_overhead(0) == 0
    assert np.allclose(recompute.recompute_step_time(0.1, np.array([0.0, 0.5, 1.0])), [0.1, 0.1 + 0.1 / 6, 0.4 / 3])
    with pytest.raises(ValueError, match="fraction"):
        recompute.recompute_overhead(-0.1)


@pytest.mark.parametrize("layers", [4, 16, 48, 80])
def test_sqrt_reduction_against_brute_force(layers):
    ks = np.linspace(0.5, layers, 200001)
    best = np.min(activations.checkpointed_activation_bytes(layers, 1.0, ks))
    at_k_star = activations.checkpointed_activation_bytes(
        layers, 1.0, activations.optimal_checkpoint_interval(layers))
    assert math.isclose(best, at_k_star, rel_tol=1e-6)
    assert math.isclose(layers / at_k_star, math.sqrt(layers) / 2)   # the √L/2 reduction


def test_live_bytes_after_forward_equals_what_autograd_saves():
    stack, x = _stack(), torch.randn(4, 16, requires_grad=True)
    saved = activations.saved_tensors(lambda t: _run(stack, t), x, exclude=[stack, x])
    with recompute.LiveBytes(exclude=[stack, x]) as live:
        y = _run(stack, x)
    # alive after forward: every saved tanh output (the last one is also the output y)
    assert sum(live.final) == saved.total_bytes() == len(stack) * y.numel() * 4


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_live_peak_follows_the_checkpoint_formula(k):
    stack, x = _stack(16, 32), torch.randn(8, 32, requires_grad=True)
    unit = 8 * 32 * 4
    with recompute.LiveBytes(exclude=[stack, x]) as live:
        _run(stack, x, k=k).sum().backward()
    extra = live.peak - activations.checkpointed_activation_bytes(16, unit, k)
    assert 0 < extra < 64, extra                     # the loss scalar and its gradient only


def test_live_bytes_leaves_out_parameters_and_their_gradients():
    stack, x = _stack(2, 64), torch.randn(1, 64)
    with recompute.LiveBytes(exclude=stack) as live:
        _run(stack, x).sum().backward()
    weight_bytes = 64 * 64 * 4
    assert all(p.grad is not None for p in stack.parameters())
    assert live.peak < weight_bytes                   # activations of one row, not the weights
