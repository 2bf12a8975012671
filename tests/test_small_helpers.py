"""Direct tests of small public helpers that other tests only reach indirectly."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import datapipe, microbench, models, nn, scaling, symbolic


def test_is_symbolic_minimum_maximum():
    x = sp.Symbol("x", positive=True)
    assert symbolic.is_symbolic(1.0, x) and not symbolic.is_symbolic(1.0, sp.Integer(3))
    assert symbolic.minimum(2.0, 3.0) == 2.0 and symbolic.maximum(2.0, 3.0) == 3.0
    assert np.array_equal(symbolic.minimum(np.array([1.0, 5.0]), 3.0), [1.0, 3.0])
    assert symbolic.minimum(x, 2) == sp.Min(x, 2)
    assert symbolic.maximum(x, 2) == sp.Max(x, 2)


def test_storage_roofline_is_chapter_02s_roofline():
    assert datapipe.attainable_flops(5e4, 1e15, 2e9) == pytest.approx(1e14)
    b, i, f = sp.symbols("b i F", positive=True)
    assert datapipe.attainable_flops(i, f, b) == sp.Min(f, b * i)
    with pytest.raises(ValueError, match="storage_bandwidth"):
        datapipe.attainable_flops(1.0, 1.0, 0)


def test_frontier_coefficient_is_where_the_loss_is_flat_along_the_budget():
    # At C = 6 FLOP the optimum is Ψ* = G, D* = 1/G. Check it against the loss law itself:
    # along 6ΨD = 6 the loss must be stationary at Ψ = G and higher on both sides.
    law = scaling.CHINCHILLA
    G = scaling.frontier_coefficient(law)

    def along(psi):
        return scaling.loss(psi, 1.0 / psi, law)

    h = 1e-4 * G
    slope = (along(G + h) - along(G - h)) / (2 * h)
    assert abs(slope) < 1e-6 * abs(along(G)) / G
    assert along(0.9 * G) > along(G) < along(1.1 * G)


def test_num_threads_restores_the_setting():
    before = torch.get_num_threads()
    with microbench.num_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with microbench.num_threads(0):
            pass


def test_rotary_preserves_norms_and_depends_on_relative_position():
    torch.manual_seed(0)
    cos, sin = nn.rotary_tables(8, 16)
    q, k = torch.randn(1, 8), torch.randn(1, 8)

    def at(x, t):  # place x at position t in a sequence and rotate it
        seq = torch.zeros(t + 1, 8)
        seq[t] = x
        return nn.apply_rotary(seq, cos, sin)[t]

    assert torch.allclose(at(q[0], 5).norm(), q.norm(), atol=1e-5)
    # A rotation by position: q·k depends only on the distance between the two positions.
    assert torch.allclose(at(q[0], 7) @ at(k[0], 4), at(q[0], 3) @ at(k[0], 0), atol=1e-5)


def test_causal_attention_ignores_the_future():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    out = nn.causal_attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 1.0
    v2[..., 4:, :] -= 1.0
    out2 = nn.causal_attention(q, k2, v2)
    assert torch.allclose(out[..., :4, :], out2[..., :4, :])
    assert not torch.allclose(out[..., 4:, :], out2[..., 4:, :])
    # The first position can only attend to itself.
    assert torch.allclose(out[..., 0, :], v[..., 0, :])


def test_make_norm_follows_the_config():
    rms = nn.make_norm(models.tiny(norm="rmsnorm", norm_bias=False), 16)
    ln = nn.make_norm(models.tiny(norm="layernorm", norm_bias=True), 16)
    ln_nobias = nn.make_norm(models.tiny(norm="layernorm", norm_bias=False), 16)
    counts = [sum(p.numel() for p in m.parameters()) for m in (rms, ln, ln_nobias)]
    assert counts == [16, 32, 16]
    x = torch.randn(3, 16)
    y = ln(x)
    assert torch.allclose(y.mean(-1), torch.zeros(3), atol=1e-5)
    assert math.isclose(float(rms(x).detach().pow(2).mean(-1)[0]), 1.0, rel_tol=1e-3)


def test_fmt_sci_prints_powers_of_ten_for_prose():
    from dtbook.units import fmt_sci

    assert fmt_sci(5.88e23) == "5.88×10²³"
    assert fmt_sci(4.6e22, 2) == "4.6×10²²"
    assert fmt_sci(1.2e-5) == "1.2×10⁻⁵"
    # Round trip: the printed mantissa and exponent give the number back to its digits.
    text = fmt_sci(6.02214e23, 4)
    mant, exp = text.split("×10")
    exp = exp.translate(str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789"))
    assert float(mant) * 10 ** int(exp) == pytest.approx(6.022e23, rel=1e-4)
