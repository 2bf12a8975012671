"""Independent values for chapter 34's exercises (Case Study: Llama 3 405B), the pattern of
tests/test_exercise_values_iii.py: each value comes from the exercise's prompt alone, the
arithmetic written out with the prompt's numbers (or counted another way: the parameter count
summed from the released configuration's shapes, a pipeline stepped tick by tick), and no
value calls a dtbook function its own exercise's reference calls.
"""

from __future__ import annotations

import math

import pytest

from dtbook.exercises import get, registry
from exercise_values import chapter_number, compare, unconfirmed

# meta-llama/Llama-3.1-405B config.json: hidden 16384, 126 layers, 128 heads of 128, 8 KV heads,
# SwiGLU 53248, vocab 128256, untied embedding and head, two RMSNorms per block and a final one.
_H, _L, _A, _KV, _DH, _FFN, _V = 16384, 126, 128, 8, 128, 53248, 128256
_PSI = (_L * (_H * _A * _DH + 2 * _H * _KV * _DH + _A * _DH * _H + 3 * _H * _FFN + 2 * _H)
        + 2 * _V * _H + _H)
_F = 989.4e12                  # H100 SXM dense BF16 (NVIDIA Hopper whitepaper)


def _bubble_by_ticks(p, m):
    """1F1B's idle share from chapter 16's simulator, which steps the schedule op by op (the
    exercise's reference uses the closed form)."""
    from dtbook import schedules

    return schedules.simulate("1f1b", p, m).bubble_fraction


def _34_2():
    n = 1 * 8192 * _H * 2
    a = 2 * 7 * 1e-6 + 2 * 7 / 8 * n / 450e9
    b = 2 * 15 * 2e-6 + 2 * 15 / 16 * n / 50e9
    # reduce-scatter and all-gather inside the node, each 7 steps of n/8; a 2-rank ring
    # all-reduce of the n/8 block between nodes: 2 steps of n/16
    c = 2 * (7 * 1e-6 + 7 * (n / 8) / 450e9) + 2 * (2e-6 + (n / 16) / 50e9)
    return a, b, c


def _34_3():
    held = 2 * _PSI / (8 * 16)
    sent = 2 * 127 / 128 * held
    t = sent / 50e9
    compute = 6 * _PSI * 2048 * 8192 / (16384 * _F * 0.41)
    return sent, t, t / compute


def _34_7():
    mtbf = 54 * 86400 / 419
    delta = (2 + 4 + 4 + 4) * _PSI / 2e12
    return mtbf, delta, math.sqrt(2 * delta * mtbf)


INDEPENDENT = {
    "34.1": (_PSI / 8, _PSI / 16, _PSI / 32,
             _bubble_by_ticks(8, 64), _bubble_by_ticks(16, 64), _bubble_by_ticks(32, 64)),
    "34.2": _34_2(),
    "34.3": _34_3(),
    # per step: (CP − 1) blocks of K and V, b·(S/CP)·(KV heads/TP)·head_dim·2 bytes each
    "34.4": (7 * 2 * (131072 // 8) * (_KV // 8) * _DH * 2,
             7 * 2 * (131072 // 8) * (_KV // 8) * _DH * 2 / 50e9),
    # the fraction of a day spent recovering: events per day × minutes each / minutes per day
    "34.5": (10 * 5 / 1440, 10 * 0.5 / 1440),
    "34.6": (4 / 6, 8 / 13, 16 / 26, 4 / 6, 4 / 9, 4 / 14),
    "34.7": _34_7(),
}


def test_the_parameter_count_is_the_catalogs():
    from dtbook import models

    assert models.get("llama3-405b").num_params() == _PSI


@pytest.mark.parametrize("ex_id", sorted(INDEPENDENT))
def test_independent_value(ex_id):
    compare(get(ex_id).solution(), INDEPENDENT[ex_id], 1e-9, ex_id)


def test_every_unconfirmed_exercise_of_chapter_34_is_covered():
    wanted = {i for i, e in registry().items() if chapter_number(i) == 34 and unconfirmed(e)}
    assert wanted <= set(INDEPENDENT), sorted(wanted - set(INDEPENDENT))
