"""Independent values for the exercises of chapter 36 (the pattern of
tests/test_exercise_values_iii.py): each value comes from the exercise's prompt alone, by
arithmetic written out, a search, a sum or an enumeration, and calls no dtbook function its
exercise's reference calls."""

from __future__ import annotations

import itertools

import pytest

from dtbook.exercises import get, registry
from exercise_values import chapter_number, compare, unconfirmed


def _36_1():
    # a walk back through the layers: each layer reaches w - 1 further; search w upward
    def reach(w, layers=32):
        return 1 + sum(w - 1 for _ in range(layers))
    w = next(w for w in itertools.count(1) if reach(w) >= 100_000)
    pow2 = next(2 ** n for n in itertools.count() if 2 ** n >= w)
    return w, pow2, reach(pow2)


def _36_3():
    # FLOPs of one expert per token, written out: 3 matrices of 4096 x 14336, 2 FLOPs a weight
    per_expert = 2 * 3 * 4096 * 14336
    # Mixtral 8x7B active parameters (config.json: 32 layers, H 4096, 32 q heads, 8 kv heads of
    # 128, SwiGLU 14336, vocab 32000, untied): attention + 2 experts + router + 2 norms a layer
    h, f, layers, vocab = 4096, 14336, 32, 32000
    attn = h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h
    layer = attn + 2 * 3 * h * f + 8 * h + 2 * h
    active = layers * layer + 2 * vocab * h + h
    return 2 / 16, per_expert / (2 * per_expert), 20 * 2.5 * active


def _36_4():
    expert = 56 * 3 * 6144 * 16384
    return tuple(2 * expert / tp + 12 * expert / (tp * dp) for tp, dp in ((4, 2), (8, 1)))


def _rounds(alpha, k):
    """Enumerate the 2^k accept/reject patterns of one round: kept = the leading accepts."""
    mean = 0.0
    for pattern in itertools.product((True, False), repeat=k):
        prob, kept, stopped = 1.0, 0, False
        for ok in pattern:
            prob *= alpha if ok else 1 - alpha
            if not stopped:
                kept, stopped = (kept + 1, False) if ok else (kept, True)
        mean += prob * kept
    return mean


def _36_6():
    out = []
    for alpha, k in ((0.6, 4), (0.8, 4), (0.7, 6)):
        tokens = _rounds(alpha, k) + 1
        out += [tokens, tokens / (1 + 0.2 * k)]
    return tuple(out)


INDEPENDENT = {
    "36.1": _36_1(),
    "36.2": tuple(2 * g * 128 * 2 * 8192 for g in (32, 1, 8)),
    "36.3": _36_3(),
    "36.4": _36_4(),
    "36.5": (_rounds(0.7, 4), (_rounds(0.7, 4) + 1) / (1 + 0.2 * 4)),
    "36.6": _36_6(),
}


@pytest.mark.parametrize("ex_id", sorted(INDEPENDENT))
def test_independent_value(ex_id):
    compare(get(ex_id).solution(), INDEPENDENT[ex_id], 1e-9, ex_id)


def test_every_unconfirmed_exercise_of_chapter_36_is_covered():
    wanted = {i for i, e in registry().items() if chapter_number(i) == 36 and unconfirmed(e)}
    assert wanted <= set(INDEPENDENT), sorted(wanted - set(INDEPENDENT))
