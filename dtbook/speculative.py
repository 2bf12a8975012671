"""Speculative decoding in closed form: how many tokens one target call yields, and what that
buys once the draft's own time is paid (chapter 36).

A small draft model proposes K tokens one by one; the large target scores all K positions
(and one more) in a single call and keeps the longest prefix it accepts, plus one token of its
own. With rejection sampling (Leviathan et al. 2023; Chen et al. 2023) draft token x, drawn
from the draft's distribution q, is kept with probability min(1, p(x)/q(x)), and on a
rejection a token is drawn from the residual (p − q)⁺ normalised: the emitted token is then
distributed exactly as the target's p. The chance that one proposal is kept is
α = Σₓ min(p(x), q(x)) = 1 − TV(p, q) (:func:`acceptance_rate`).

If every proposal is kept with the same probability α, independently, the number of kept
drafts N of one round is truncated geometric: P(N = i) = αⁱ(1 − α) for i < K and P(N = K) = α^K,
so E[N] = α(1 − α^K)/(1 − α) = (1 − α^{K+1})/(1 − α) − 1 (:func:`expected_accepted`), and the
round emits N + 1 tokens for one target call. With a draft call costing c = t_draft/t_target of
a target call, the speedup over plain decoding is (E[N] + 1)/(1 + K·c) (:func:`speedup`).

Names: ``acceptance`` is α (the original edition's p), ``draft_tokens`` is K, ``cost_ratio``
is c. Formulas take Python numbers, NumPy arrays and SymPy symbols alike.
"""

from __future__ import annotations

import numpy as np

from . import _validate as check
from .symbolic import is_symbolic

__all__ = ["expected_accepted", "tokens_per_round", "speedup", "acceptance_rate",
           "accepted_distribution"]


def _acceptance(acceptance):
    check.fraction("acceptance", acceptance)
    return acceptance


def expected_accepted(acceptance, draft_tokens):
    """Expected number of the K drafted tokens the target keeps in one round, each kept with
    probability α independently: Σ_{i<K} i·αⁱ(1 − α) + K·α^K = α(1 − α^K)/(1 − α), which is
    (1 − α^{K+1})/(1 − α) − 1; K when α = 1 (chapter 36)."""
    _acceptance(acceptance)
    check.count("draft_tokens", draft_tokens)
    a, k = acceptance, draft_tokens
    if is_symbolic(a, k):
        return (1 - a ** (k + 1)) / (1 - a) - 1
    a_arr = np.asarray(a, dtype=float)
    one = a_arr == 1
    safe = np.where(one, 0.5, a_arr)
    out = np.where(one, k, safe * (1 - safe ** k) / (1 - safe))
    return out[()] if np.ndim(out) == 0 else out


def tokens_per_round(acceptance, draft_tokens):
    """Tokens one round emits, on average, for its one target call: the kept drafts and the
    target's own token, E[N] + 1 = (1 − α^{K+1})/(1 − α) (chapter 36)."""
    return expected_accepted(acceptance, draft_tokens) + 1


def speedup(acceptance, draft_tokens, cost_ratio):
    """Decoding speedup over the target alone: (E[N] + 1)/(1 + K·c), one round costing K draft
    calls of c target calls each plus one target call (chapter 36)."""
    check.nonnegative("cost_ratio", cost_ratio)
    return tokens_per_round(acceptance, draft_tokens) / (1 + draft_tokens * cost_ratio)


def _distributions(target, draft):
    p = np.asarray(check._numeric("target", target), dtype=float)
    q = np.asarray(check._numeric("draft", draft), dtype=float)
    for name, d in (("target", p), ("draft", q)):
        if d.ndim < 1 or d.shape[-1] < 2 or not np.all(np.isfinite(d)) or np.any(d < 0) \
                or not np.allclose(d.sum(axis=-1), 1, rtol=0, atol=1e-9):
            raise ValueError(f"{name} must be probabilities over at least two tokens, each "
                             f"row summing to 1, got {d!r:.80}")
    if p.shape != q.shape:
        raise ValueError(f"target and draft must have the same shape, got {p.shape} and {q.shape}")
    return p, q


def acceptance_rate(target, draft):
    """Probability that a token drawn from the draft's q is kept by rejection sampling against
    the target's p: Σₓ q(x)·min(1, p(x)/q(x)) = Σₓ min(p(x), q(x)) = 1 − TV(p, q). Rows of a 2-d
    array are contexts (chapter 36)."""
    p, q = _distributions(target, draft)
    out = np.minimum(p, q).sum(axis=-1)
    return out[()] if np.ndim(out) == 0 else out


def accepted_distribution(target, draft):
    """The distribution of the token one round emits first, by enumeration: kept with
    probability q(x)·min(1, p(x)/q(x)), or, with the probability 1 − α of a rejection, drawn from
    the residual (p − q)⁺/Σ(p − q)⁺. It is the target's p exactly: min(p, q) + (p − q)⁺ = p
    (chapter 36)."""
    p, q = _distributions(target, draft)
    ratio = np.divide(p, q, out=np.ones_like(p), where=q > 0)
    kept = q * np.minimum(1, ratio)
    residual = np.maximum(p - q, 0)
    mass = residual.sum(axis=-1, keepdims=True)
    residual = np.divide(residual, mass, out=np.zeros_like(residual), where=mass > 0)
    return kept + (1 - kept.sum(axis=-1, keepdims=True)) * residual


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
