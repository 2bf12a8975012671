"""dtbook.rope: RoPE frequencies and Llama 3.1's scaling (chapter 34), checked against a
transcription of Meta's ``apply_scaling`` loop, against dtbook.nn's rotary tables, and through
dtbook.nn's rotation against the rotation property."""

import math

import numpy as np
import pytest
import sympy as sp

from dtbook import rope


def _meta_apply_scaling(freqs, scale_factor=8, low_freq_factor=1, high_freq_factor=4,
                        old_context_len=8192):
    # meta-llama/llama-models, models/llama3/reference_impl/model.py, apply_scaling, as a loop
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            out.append(freq)
        elif wavelen > low_freq_wavelen:
            out.append(freq / scale_factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * freq / scale_factor + smooth * freq)
    return out


def test_frequencies_are_base_powers():
    f = rope.frequencies(128)
    assert f.shape == (64,) and f[0] == 1.0
    assert np.allclose(f, [500000.0 ** (-2 * i / 128) for i in range(64)], rtol=1e-14, atol=0)
    assert rope.frequency(3, 128) == pytest.approx(500000.0 ** (-6 / 128), rel=1e-14)


def test_scaled_frequency_equals_meta_loop_and_is_continuous():
    f = rope.frequencies(128)
    assert np.allclose(rope.scaled_frequency(f), _meta_apply_scaling(f), rtol=1e-14, atol=0)
    # at the two edges of the blend the three branches agree
    for lam, want in ((8192 / 4, 1.0), (8192 / 1, 1 / 8)):
        theta = 2 * math.pi / lam
        for eps in (1 - 1e-12, 1 + 1e-12):
            assert rope.scaled_frequency(theta * eps) / (theta * eps) == pytest.approx(want, rel=1e-9)


def test_symbolic_piecewise_matches_numbers():
    th = sp.Symbol("theta", positive=True)
    expr = rope.scaled_frequency(th)
    assert isinstance(expr, sp.Piecewise)
    for theta in rope.frequencies(128)[::7]:
        assert float(expr.subs(th, theta)) == pytest.approx(rope.scaled_frequency(theta), rel=1e-12)
    i, d, b = sp.symbols("i d b", positive=True)
    assert sp.simplify(rope.frequency(i, d, b) - b ** (-2 * i / d)) == 0


def test_frequencies_are_the_model_code_s():
    # dtbook.nn's rotary tables (built from rope.frequencies) against θᵢ = base^(−2i/d) typed
    # here, in the "rotate half" layout apply_rotary expects: angle t·θᵢ at features i and i + d/2
    from dtbook import nn as dnn

    for base in (10_000.0, rope.LLAMA31["base"]):
        cos, sin = dnn.rotary_tables(128, 64, base)
        angles = np.outer(np.arange(64), base ** (-np.arange(0, 128, 2) / 128))
        angles = np.concatenate([angles, angles], axis=1)
        assert np.allclose(cos.double().numpy(), np.cos(angles), rtol=0, atol=2e-5)
        assert np.allclose(sin.double().numpy(), np.sin(angles), rtol=0, atol=2e-5)


def test_rotation_depends_on_offset_only():
    # the scaled frequencies in dtbook.nn's rotation: q·k depends on the offset alone
    import torch

    from dtbook import nn as dnn

    rng = np.random.default_rng(0)
    q, k = (torch.tensor(rng.standard_normal(128)) for _ in range(2))
    theta = rope.scaled_frequency(rope.frequencies(128))

    def rot(x, m):
        angles = torch.tensor(np.concatenate([m * theta, m * theta]))[None]
        return dnn.apply_rotary(x[None], angles.cos(), angles.sin())[0]

    assert float(rot(q, 1000) @ rot(k, 900)) == pytest.approx(
        float(rot(q, 100_100) @ rot(k, 100_000)), rel=1e-9)
    assert float(rot(q, 1000) @ rot(k, 900)) != pytest.approx(float(rot(q, 1000) @ rot(k, 500)), rel=1e-3)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="high_freq_factor"):
        rope.scaled_frequency(0.1, low_freq_factor=4, high_freq_factor=1)
    with pytest.raises(ValueError, match="head_dim"):
        rope.frequencies(127)
    with pytest.raises(ValueError, match="freq"):
        rope.scaled_frequency(-1.0)
