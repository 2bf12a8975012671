"""Decoding on one process: a rolling-buffer KV cache for sliding-window attention, and a
speculative sampler (chapter 36).

These run rather than compute a formula, and nothing in them is distributed, so they live
beside :mod:`dtbook.nn` and :mod:`dtbook.toylm` (runnable torch code named by what it is), not
in :mod:`dtbook.parallel`. Their formulas are :mod:`dtbook.kv_cache` (cache bytes, the slot
i mod w, the receptive field) and :mod:`dtbook.speculative` (acceptance, tokens per round,
speedup).

Attention tensors are (seq, heads, head_dim); a query head h of A reads key-value head
h // (A/g) of g (grouped-query attention; g = A is multi-head, g = 1 multi-query). A language
model for :func:`speculative_generate` is any callable mapping a 1-d tensor of token ids to
next-token logits at every position, shape (len, vocab), as :class:`dtbook.toylm.TinyLM` does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from . import _validate as check
from . import kv_cache

__all__ = ["RollingKVCache", "windowed_attention", "decode_windowed", "speculative_generate",
           "generate", "accept_or_resample", "FixedCost", "Generation"]


def _expand(kv, heads):
    """(S, g, d) key or value heads repeated so that query head h reads head h // (A/g)."""
    g = kv.shape[1]
    if heads % g:
        raise ValueError(f"kv heads ({g}) must divide heads ({heads})")
    return kv.repeat_interleave(heads // g, dim=1)


def windowed_attention(q, k, v, window):
    """Causal attention over a band: query i sees keys j with i − w < j ≤ i, all at once, with a
    banded mask on the full score matrix (the training-time form; chapter 36)."""
    check.count("window", window)
    seq, heads, d = q.shape
    k, v = _expand(k, heads), _expand(v, heads)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(d)
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    band = (j <= i) & (i - j < window)
    scores = scores.masked_fill(~band, float("-inf"))
    return torch.einsum("hij,jhd->ihd", scores.softmax(dim=-1), v)


class RollingKVCache:
    """A sliding window's KV cache of ``window`` slots: the key and value of position i go to
    slot i mod w (:func:`dtbook.kv_cache.rolling_slot`), overwriting position i − w, which no
    later query can see. Its size is fixed, whatever the sequence length (chapter 36).

    ``k``, ``v``: (window, kv_heads, head_dim); ``positions``: the position held in each slot
    (−1 while empty). Attention over the slots needs no reordering: softmax and the weighted
    sum do not depend on the order of the keys, and positions are already in them (RoPE)."""

    def __init__(self, window, kv_heads, head_dim, dtype=torch.float32):
        check.count("window", window)
        check.count("kv_heads", kv_heads)
        check.count("head_dim", head_dim)
        self.window = int(window)
        self.k = torch.zeros(self.window, kv_heads, head_dim, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.positions = torch.full((self.window,), -1, dtype=torch.long)
        self.seen = 0

    def append(self, k, v):
        """Store one position's (kv_heads, head_dim) key and value in its slot."""
        slot = int(kv_cache.rolling_slot(self.seen, self.window))
        self.k[slot], self.v[slot] = k, v
        self.positions[slot] = self.seen
        self.seen += 1
        return slot

    def valid(self):
        """Keys and values of the filled slots."""
        filled = self.positions >= 0
        return self.k[filled], self.v[filled]

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values held (the cache, not its bookkeeping)."""
        return self.k.nbytes + self.v.nbytes


def decode_windowed(q, k, v, window):
    """Sliding-window attention decoded token by token through a :class:`RollingKVCache`: at
    step t the cache receives position t, and query t attends over the filled slots. Returns
    the outputs (seq, heads, head_dim) and the cache (chapter 36)."""
    seq, heads, d = q.shape
    cache = RollingKVCache(window, k.shape[1], d, dtype=k.dtype)
    out = torch.empty_like(q)
    for t in range(seq):
        cache.append(k[t], v[t])
        kk, vv = cache.valid()
        kk, vv = _expand(kk, heads), _expand(vv, heads)
        w = (torch.einsum("hd,jhd->hj", q[t], kk) / math.sqrt(d)).softmax(dim=-1)
        out[t] = torch.einsum("hj,jhd->hd", w, vv)
    return out, cache


# ---------------------------------------------------------------------------- speculative sampling

def accept_or_resample(p, q, x, u, generator=None):
    """One verification, vectorised over a leading batch: keep draft token ``x`` (drawn from
    ``q``) when u < p(x)/q(x), else draw from the residual (p − q)⁺ normalised. ``p``, ``q``:
    (n, vocab); ``x``: (n,); ``u``: (n,) uniform. Returns (tokens, kept) (chapter 36)."""
    px = p.gather(-1, x[:, None])[:, 0]
    qx = q.gather(-1, x[:, None])[:, 0]
    kept = u * qx < px                        # u < p/q without dividing by a tiny q
    residual = (p - q).clamp_min(0)
    total = residual.sum(-1, keepdim=True)
    # p = q row: the draft is always kept, the residual is never used; keep it a distribution
    residual = torch.where(total > 0, residual, p)
    redraw = torch.multinomial(residual, 1, generator=generator)[:, 0]
    return torch.where(kept, x, redraw), kept


@dataclass
class Generation:
    """What a decode produced and what it cost: the ``tokens`` (prefix included), the calls
    made to each model, and per round the drafts kept (``kept``) and whether one was rejected
    (``rejected``)."""

    tokens: torch.Tensor
    target_calls: int = 0
    draft_calls: int = 0
    kept: list = field(default_factory=list)
    rejected: list = field(default_factory=list)


def _probs(model, tokens):
    return torch.softmax(model(tokens).double(), dim=-1)


@torch.no_grad()
def generate(model, prefix, new_tokens, generator=None):
    """Plain sampling: one model call per token (the baseline, chapter 36)."""
    check.count("new_tokens", new_tokens)
    out = Generation(prefix.clone())
    for _ in range(new_tokens):
        p = _probs(model, out.tokens)[-1]
        out.target_calls += 1
        nxt = torch.multinomial(p, 1, generator=generator)
        out.tokens = torch.cat([out.tokens, nxt])
    return out


@torch.no_grad()
def speculative_generate(draft, target, prefix, new_tokens, draft_tokens, generator=None):
    """Speculative sampling: each round the draft proposes K tokens, the target scores the K + 1
    positions in one call, the proposals are verified in order by :func:`accept_or_resample`
    until one is rejected (replaced by a residual draw), and if all K are kept the target's
    distribution at the last position gives one more. Every token is distributed as the
    target's own sampling would give it (chapter 36)."""
    check.count("new_tokens", new_tokens)
    check.count("draft_tokens", draft_tokens)
    out = Generation(prefix.clone())
    goal = len(prefix) + new_tokens
    while len(out.tokens) < goal:
        seq, qs = out.tokens, []
        for _ in range(draft_tokens):
            q = _probs(draft, seq)[-1]
            out.draft_calls += 1
            seq = torch.cat([seq, torch.multinomial(q, 1, generator=generator)])
            qs.append(q)
        proposed = seq[len(out.tokens):]
        p = _probs(target, seq)[len(out.tokens) - 1:]          # K + 1 distributions, one call
        out.target_calls += 1
        emitted, kept = [], 0
        for i in range(draft_tokens):
            u = torch.rand(1, generator=generator, dtype=torch.float64)
            tok, ok = accept_or_resample(p[i:i + 1], qs[i][None], proposed[i:i + 1], u,
                                         generator)
            emitted.append(tok)
            if not ok.item():
                break
            kept += 1
        else:
            emitted.append(torch.multinomial(p[draft_tokens], 1, generator=generator))
        out.kept.append(kept)
        out.rejected.append(kept < draft_tokens)
        out.tokens = torch.cat([out.tokens, *emitted])
    out.tokens = out.tokens[:goal]
    return out


class FixedCost(torch.nn.Module):
    """A model that also takes ``seconds`` per call, whatever the number of positions scored:
    a stand-in for a large model whose decode step is bound by reading its weights, so that
    scoring K + 1 positions costs about what scoring one does (chapter 36)."""

    def __init__(self, model, seconds):
        super().__init__()
        check.nonnegative("seconds", seconds)
        self.model, self.seconds = model, float(seconds)

    def forward(self, tokens):
        end = time.perf_counter() + self.seconds
        out = self.model(tokens)
        time.sleep(max(0.0, end - time.perf_counter()))
        return out
