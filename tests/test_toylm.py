"""dtbook.toylm: the synthetic language and the tiny models chapters 07-09 train on it."""

import math

import numpy as np
import pytest
import torch

from dtbook import toylm

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def source():
    return toylm.MarkovSource(toylm.power_spectrum(32, 1.0), scale=3.0, seed=0)


class _Oracle(torch.nn.Module):
    """A model that predicts with given logits."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, tokens):
        return self.logits[tokens]


def test_spectra():
    s = toylm.power_spectrum(8, 1.0)
    assert s[0] == 1 and s[3] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="vocab"):
        toylm.power_spectrum(1, 1.0)
    with pytest.raises(ValueError, match="spectrum"):
        toylm.MarkovSource([1.0])


def test_source_is_a_markov_chain(source):
    assert torch.allclose(source.probs.sum(-1), torch.ones(32, dtype=torch.float64))
    assert torch.allclose(source.stationary @ source.probs, source.stationary, atol=1e-12)
    assert 0 < source.entropy < math.log(32)
    # the logit matrix has the requested singular-value shape
    sv = torch.linalg.svdvals(source.logits).numpy()
    assert np.allclose(sv / sv[0], toylm.power_spectrum(32, 1.0), atol=1e-9)


def test_exact_cross_entropy(source):
    oracle = _Oracle(source.logits)
    assert source.cross_entropy(oracle) == pytest.approx(source.entropy, abs=1e-12)
    assert source.top1_agreement(oracle) == pytest.approx(1.0)
    assert source.greedy_match(oracle, 5) == pytest.approx(1.0)
    uniform = _Oracle(torch.zeros(32, 32, dtype=torch.float64))
    assert source.cross_entropy(uniform) == pytest.approx(math.log(32))


def test_sampling_matches_the_source(source):
    g = torch.Generator().manual_seed(0)
    cur, nxt = source.sample(200_000, g)
    freq = torch.bincount(cur, minlength=32).double() / len(cur)
    # 200,000 draws: a frequency's standard error is at most 0.0009
    assert torch.allclose(freq, source.stationary, atol=0.004)
    # empirical cross-entropy of the true model is close to the entropy
    nll = -source.probs[cur, nxt].log().mean().item()
    assert nll == pytest.approx(source.entropy, abs=0.02)


def test_tiny_lm_params():
    for v, w in ((16, 1), (128, 32)):
        assert toylm.TinyLM(v, w).num_params == toylm.TinyLM.count_params(v, w) == 2 * v * w + v


def test_training_is_deterministic_and_width_helps(source):
    a = toylm.train(source, 4, 2**14, batch=256)
    b = toylm.train(source, 4, 2**14, batch=256)
    assert a.loss == b.loss and a.tokens == 2**14 and a.params == 2 * 32 * 4 + 32
    family = toylm.train_family(source, [1, 4, 16], 2**15, batch=256)
    params, losses = toylm.losses(family)
    assert np.all(np.diff(losses) < 0) and np.all(losses > source.entropy)
    assert np.all(np.diff(params) > 0)
    state = torch.get_rng_state()
    toylm.train(source, 2, 2**12, batch=256)
    assert torch.equal(state, torch.get_rng_state())  # global RNG untouched
    m = family[-1].model
    assert source.greedy_match(m, 4) <= source.top1_agreement(m) + 1e-12
