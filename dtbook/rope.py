"""Rotary position embeddings (RoPE) and Llama 3.1's frequency scaling for long context
(chapter 34).

RoPE (Su et al., RoFormer) rotates channel pair i (i = 0 … d/2 − 1) of a query or key at
position m by the angle m·θᵢ, with θᵢ = base^(−2i/d), so a query–key dot product depends on
positions only through their offset. Pair i turns once every λᵢ = 2π/θᵢ tokens, its
wavelength. A model trained on sequences of L tokens has seen full turns of the pairs with
λᵢ < L and only part of a turn of the others.

Llama 3.1 extends the context from L = 8,192 to 131,072 tokens by changing the frequencies
before training on long sequences (``apply_scaling`` in meta-llama/llama-models,
``models/llama3/reference_impl/model.py``; the same numbers in the ``rope_scaling`` block of
``meta-llama/Llama-3.1-405B``'s ``config.json``: factor 8, low_freq_factor 1,
high_freq_factor 4, original_max_position_embeddings 8192, and ``rope_theta`` 500000): pairs
whose wavelength is shorter than L/high_freq_factor keep θᵢ, pairs longer than
L/low_freq_factor turn ``scale`` times slower, θᵢ/s, and in between the two are blended
linearly in L/λᵢ, continuously at both ends.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _validate as check

__all__ = ["LLAMA31", "frequency", "frequencies", "wavelength", "scaled_frequency"]

# meta-llama/Llama-3.1-405B config.json: "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0,
# "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
LLAMA31 = {"base": 500_000.0, "scale": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_context": 8192}


def frequency(i, head_dim, base=LLAMA31["base"]):
    """θᵢ = base^(−2i/d), the angle per token of channel pair ``i`` of a head of ``head_dim``
    d channels (chapter 34)."""
    check.nonnegative("i", i)
    check.positive("head_dim", head_dim)
    check.positive("base", base)
    if any(isinstance(x, sp.Basic) for x in (i, head_dim, base)):
        return sp.sympify(base) ** (-2 * sp.sympify(i) / head_dim)
    out = np.power(float(base), -2 * np.asarray(i, dtype=float) / float(head_dim))
    return out if np.ndim(out) else float(out)


def frequencies(head_dim, base=LLAMA31["base"]):
    """The d/2 frequencies θ₀ … θ_{d/2−1} of a head of ``head_dim`` channels, as an array
    (chapter 34)."""
    check.count("head_dim", head_dim, minimum=2)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (channels rotate in pairs), got {head_dim}")
    return frequency(np.arange(head_dim // 2), head_dim, base)


def wavelength(freq):
    """Tokens per full turn of a channel pair turning ``freq`` radians per token, 2π/θ
    (chapter 34)."""
    check.positive("freq", freq)
    return 2 * (sp.pi if isinstance(freq, sp.Basic) else np.pi) / freq


def scaled_frequency(freq, scale=LLAMA31["scale"], low_freq_factor=LLAMA31["low_freq_factor"],
                     high_freq_factor=LLAMA31["high_freq_factor"],
                     original_context=LLAMA31["original_context"]):
    """Llama 3.1's long-context frequency θ' of a pair with frequency θ (chapter 34):
    θ where λ = 2π/θ < L/high_freq_factor, θ/s where λ > L/low_freq_factor, and in between
    (1 − r)·θ/s + r·θ with r = (L/λ − low_freq_factor)/(high_freq_factor − low_freq_factor).
    Defaults: :data:`LLAMA31`. A SymPy ``freq`` gives a ``Piecewise``."""
    check.positive("freq", freq)
    check.positive("scale", scale)
    check.positive("low_freq_factor", low_freq_factor)
    check.positive("high_freq_factor", high_freq_factor)
    check.positive("original_context", original_context)
    numeric = not any(isinstance(x, sp.Basic) and x.free_symbols
                      for x in (low_freq_factor, high_freq_factor))
    if numeric and not float(high_freq_factor) > float(low_freq_factor):
        raise ValueError(f"high_freq_factor ({high_freq_factor}) must exceed low_freq_factor "
                         f"({low_freq_factor})")
    lam = wavelength(freq)
    r = (original_context / lam - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - r) * freq / scale + r * freq
    if any(isinstance(x, sp.Basic) for x in (freq, scale, low_freq_factor, high_freq_factor,
                                              original_context)):
        return sp.Piecewise((freq, lam < original_context / high_freq_factor),
                            (freq / scale, lam > original_context / low_freq_factor),
                            (blended, True))
    return np.where(lam < original_context / high_freq_factor, freq,
                    np.where(lam > original_context / low_freq_factor, freq / scale, blended)) \
        if np.ndim(freq) else float(freq if lam < original_context / high_freq_factor else
                                    freq / scale if lam > original_context / low_freq_factor
                                    else blended)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
