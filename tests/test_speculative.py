"""dtbook.speculative (chapter 36): the closed forms against sums written out and against
enumeration, and dtbook.decoding's speculative sampler against the target's distribution."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import decoding, speculative as spec


@pytest.mark.parametrize("a,k", [(0.6, 4), (0.7, 4), (0.8, 4), (0.7, 6), (0.05, 1), (0.99, 12)])
def test_expected_accepted_is_the_truncated_geometric_mean(a, k):
    pmf = [a ** i * (1 - a) for i in range(k)] + [a ** k]
    assert math.isclose(sum(pmf), 1)
    assert math.isclose(spec.expected_accepted(a, k), sum(i * p for i, p in enumerate(pmf)))
    assert math.isclose(spec.tokens_per_round(a, k), (1 - a ** (k + 1)) / (1 - a))


def test_symbolic_and_limits():
    a, k = sp.symbols("alpha K", positive=True)
    e = spec.expected_accepted(a, k)
    assert sp.simplify(e - a * (1 - a ** k) / (1 - a)) == 0
    assert sp.limit(e.subs(k, 4), a, 1) == 4
    assert spec.expected_accepted(1.0, 4) == 4
    assert np.allclose(spec.expected_accepted(np.array([0.5, 1.0]), 3), [0.875, 3])


def test_speedup():
    assert math.isclose(spec.speedup(0.7, 4, 0.2), 2.7731 / 1.8, rel_tol=1e-12)
    assert math.isclose(spec.speedup(0.7, 4, 0), spec.tokens_per_round(0.7, 4))


@pytest.mark.parametrize("bad", [dict(acceptance=0), dict(acceptance=1.2), dict(draft_tokens=0),
                                 dict(draft_tokens=2.5), dict(cost_ratio=-1)])
def test_bad_arguments_name_themselves(bad):
    args = dict(acceptance=0.7, draft_tokens=4, cost_ratio=0.2) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        spec.speedup(**args)


def test_acceptance_and_enumeration():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6), size=5), rng.dirichlet(np.ones(6), size=5)
    alpha = spec.acceptance_rate(p, q)
    assert np.allclose(alpha, 1 - 0.5 * np.abs(p - q).sum(-1))
    assert np.allclose(spec.accepted_distribution(p, q), p, atol=1e-15)
    assert np.allclose(spec.accepted_distribution(p, p), p) and np.allclose(spec.acceptance_rate(p, p), 1)
    with pytest.raises(ValueError, match="target"):
        spec.acceptance_rate([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(ValueError, match="same shape"):
        spec.acceptance_rate([0.5, 0.5], [0.2, 0.3, 0.5])


def test_accept_or_resample_draws_from_the_target():
    """N seeded trials of one verification: the emitted token's frequencies against p. Each
    frequency is within t of its probability except with chance ≤ 2V·exp(−2Nt²) (Hoeffding),
    here 1e-6; the draft's own q is farther from p than that, so the test can tell them apart."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.45, 0.25, 0.15, 0.1, 0.05], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2], dtype=torch.float64)
    n, v = 100_000, 5
    x = torch.multinomial(q, n, replacement=True, generator=g)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    tok, kept = decoding.accept_or_resample(p.expand(n, v), q.expand(n, v), x, u, g)
    freq = torch.bincount(tok, minlength=v).double() / n
    t = math.sqrt(math.log(2 * v / 1e-6) / (2 * n))
    assert (freq - p).abs().max() < t < (q - p).abs().max()
    assert abs(kept.double().mean() - spec.acceptance_rate(p.numpy(), q.numpy())) < t


class _Bigram(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, tokens):
        return self.logits[tokens]


def test_speculative_generate_counts():
    g = torch.Generator().manual_seed(0)
    target = _Bigram(torch.randn(8, 8, generator=g, dtype=torch.float64))
    out = decoding.speculative_generate(target, target, torch.tensor([0]), 40, 4,
                                        torch.Generator().manual_seed(1))
    assert len(out.tokens) == 41 and all(k == 4 for k in out.kept)   # q = p: all kept
    assert out.target_calls == 8 and out.draft_calls == 32            # 5 tokens a round
    draft = _Bigram(torch.randn(8, 8, generator=g, dtype=torch.float64))
    out = decoding.speculative_generate(draft, target, torch.tensor([0]), 50, 3,
                                        torch.Generator().manual_seed(2))
    assert len(out.tokens) == 51 and out.draft_calls == 3 * out.target_calls
    assert sum(k + 1 for k in out.kept) >= 50 > sum(k + 1 for k in out.kept[:-1])
    plain = decoding.generate(target, torch.tensor([0]), 10, torch.Generator().manual_seed(0))
    assert len(plain.tokens) == 11 and plain.target_calls == 10


@pytest.mark.parametrize("k", [1, 2])
def test_speculative_generate_samples_the_targets_sequences(k):
    """Whole generations, not one verification: the joint law of the first two new tokens of
    N seeded speculative runs (K = 1: the second is the bonus token when the first is kept;
    K = 2: two verifications in a row) against the target's own P(a | 0)·P(b | a). Hoeffding
    bounds each of the V² frequencies within t except with chance ≤ 2V²·exp(−2Nt²) = 1e-6,
    and the draft's own joint law is farther from the target's than t. A bonus token drawn
    from the wrong row (K = 1), a verification against the wrong row (K = 2) or drafts
    emitted unchecked all fail it (tried)."""
    v, n = 4, 1000
    # rows peaked on different tokens, so a token drawn from the wrong row is seen
    target = _Bigram(torch.tensor([[0.0, 2.5, 0.0, 0.5], [0.0, 0.0, 2.5, 0.5],
                                   [0.5, 0.0, 0.0, 2.5], [2.5, 0.5, 0.0, 0.0]], dtype=torch.float64))
    draft = _Bigram(torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0],
                                  [0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0]], dtype=torch.float64))
    p, q = (torch.softmax(m.logits, -1) for m in (target, draft))
    want, draft_law = p[0][:, None] * p, q[0][:, None] * q
    g = torch.Generator().manual_seed(7)
    counts = torch.zeros(v, v, dtype=torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                 # tiny tensors: threads only add overhead under load
    try:
        for _ in range(n):
            a, b = decoding.speculative_generate(draft, target, torch.tensor([0]), 2, k, g).tokens[1:]
            counts[a, b] += 1
    finally:
        torch.set_num_threads(threads)
    t = math.sqrt(math.log(2 * v * v / 1e-6) / (2 * n))
    assert (counts / n - want).abs().max() < t < (draft_law - want).abs().max()
