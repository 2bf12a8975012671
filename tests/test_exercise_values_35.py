"""Independent values for the exercises of chapter 35 (Case Study: DeepSeek-V3), the pattern of
tests/test_exercise_values_iii.py: each value comes from the exercise's prompt alone, obtained
another way than the reference (the arithmetic written out, exact binomials from
``math.comb``, a Monte Carlo of the routing, FP8 rounding done by torch's own cast), and no
value calls a dtbook function its own exercise's reference calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dtbook.exercises import get, registry
from exercise_values import chapter_number, compare, unconfirmed

INDEPENDENT: dict = {}
TOLERANCE: dict = {}          # only where not 1e-9, with the reason


def _35_2():
    """The prompt's formula with the binomial σ written out."""
    out = []
    for experts, k in ((256, 8), (64, 2)):
        mu = 4096 * k / experts
        sigma = math.sqrt(4096 * (k / experts) * (1 - k / experts))
        out.append((mu + sigma * math.sqrt(2 * math.log(experts))) / mu)
    return out[0], out[1], (out[0] - 1) / (out[1] - 1)


def _fp8_rmse(sigma, amax):
    """E[(x − q(x))² | |x| ≤ amax] for x ~ N(0, σ²), by quadrature on a fine grid with the
    rounding done by torch's float8_e4m3fn cast (round to nearest even), not by a model."""
    x = torch.linspace(0, amax, 2_000_001, dtype=torch.float64)
    scale = 448.0 / amax
    q = (x * scale).to(torch.float8_e4m3fn).to(torch.float64) / scale
    w = torch.exp(-0.5 * (x / sigma) ** 2)
    return math.sqrt(float(((x - q) ** 2 * w).sum() / w.sum()))


def _35_3():
    sigma = 0.02
    return (_fp8_rmse(sigma, sigma * math.sqrt(2 * math.log(4096 * 4096))),
            _fp8_rmse(sigma, sigma * math.sqrt(2 * math.log(128))))


def _35_5():
    # (b) exactly: a remote node holding 32 of the 256 experts is hit unless all 8 choices
    # fall among the other 224
    miss = math.comb(224, 8) / math.comb(256, 8)
    return 1 - 8 / 64, 7 * (1 - miss)


def _35_5_monte_carlo(trials=200_000, seed=0):
    """The same expectation by sampling: 8 distinct experts of 256, expert e on node e // 32,
    the token's home node 0; counts the distinct other nodes hit."""
    rng = np.random.default_rng(seed)
    picks = np.argsort(rng.random((trials, 256)), axis=1)[:, :8] // 32
    hit = np.zeros((trials, 8), dtype=bool)
    np.put_along_axis(hit, picks, True, axis=1)
    return hit[:, 1:].sum(axis=1).mean()


INDEPENDENT.update({
    # (60e9 bytes) / (61 layers × bytes per token per layer), bf16
    "35.1": (60e9 / (61 * (512 + 64) * 2), 60e9 / (61 * 128 * (192 + 128) * 2)),
    "35.2": _35_2(),
    "35.3": _35_3(),
    "35.4": (7 / 23, 7 / 32),
    "35.5": _35_5(),
    "35.7": (6 * 37e9 * 1e12 / (180e3 * 3600) / 1978.9e12,
             6 * 37e9 * 1e12 / (180e3 * 3600) / 989.4e12),
})
# the exact rounding error (quadrature over torch's cast) against the prompt's model, which
# takes the values as spread evenly within each FP8 step (Δ/√12): the Gaussian's slope across
# the wide top steps moves the exact figure by a few tenths of a percent
TOLERANCE["35.3"] = 5e-3


@pytest.mark.parametrize("ex_id", sorted(INDEPENDENT))
def test_independent_value(ex_id):
    compare(get(ex_id).solution(), INDEPENDENT[ex_id], TOLERANCE.get(ex_id, 1e-9), ex_id)


def test_every_unconfirmed_exercise_of_chapter_35_is_covered():
    wanted = {i for i, e in registry().items() if chapter_number(i) == 35 and unconfirmed(e)}
    assert wanted <= set(INDEPENDENT), sorted(wanted - set(INDEPENDENT))


def test_the_network_copies_agree_with_sampling():
    """35.5(b)'s exact expectation against 200,000 sampled tokens (σ of the mean ≈ 0.002)."""
    assert abs(_35_5_monte_carlo() - _35_5()[1]) < 0.01
