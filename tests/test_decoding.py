"""dtbook.decoding's rolling-buffer KV cache (chapter 36): token-by-token decode equal to
full attention with a banded mask, and the cache's bytes equal to dtbook.kv_cache's."""

import pytest
import torch

from dtbook import decoding, kv_cache


@pytest.mark.parametrize("heads,kv_heads,window,seq", [(4, 4, 5, 17), (4, 2, 3, 12), (6, 1, 8, 8),
                                                       (2, 2, 1, 5), (4, 2, 20, 9)])
def test_rolling_cache_equals_banded_attention(heads, kv_heads, window, seq):
    g = torch.Generator().manual_seed(seq)
    q = torch.randn(seq, heads, 8, dtype=torch.float64, generator=g)
    k = torch.randn(seq, kv_heads, 8, dtype=torch.float64, generator=g)
    v = torch.randn(seq, kv_heads, 8, dtype=torch.float64, generator=g)
    out, cache = decoding.decode_windowed(q, k, v, window)
    ref = decoding.windowed_attention(q, k, v, window)
    assert torch.allclose(out, ref, rtol=0, atol=1e-12)
    # a plain loop over each query's band, no buffer, no mask
    rep = heads // kv_heads
    for i in range(seq):
        lo = max(0, i - window + 1)
        kk, vv = k[lo:i + 1].repeat_interleave(rep, 1), v[lo:i + 1].repeat_interleave(rep, 1)
        w = (torch.einsum("hd,jhd->hj", q[i], kk) / 8 ** 0.5).softmax(-1)
        assert torch.allclose(out[i], torch.einsum("hj,jhd->hd", w, vv), atol=1e-12)
    # the buffer is allocated at its full w slots: the cache of any sequence of w tokens or more
    assert cache.nbytes == kv_cache.cache_bytes(kv_cache.kv_bytes_per_token(kv_heads, 8, 8),
                                                max(seq, window), window=window)
    held = sorted(cache.positions[cache.positions >= 0].tolist())
    assert held == list(range(max(0, seq - window), seq))


def test_window_at_least_seq_is_causal_attention():
    from dtbook.nn import causal_attention
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(10, 2, 4, dtype=torch.float64, generator=g) for _ in range(3))
    ref = causal_attention(*(t.transpose(0, 1) for t in (q, k, v))).transpose(0, 1)
    assert torch.allclose(decoding.windowed_attention(q, k, v, 10), ref, atol=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match="window"):
        decoding.RollingKVCache(0, 2, 4)
    with pytest.raises(ValueError, match="divide"):
        decoding.windowed_attention(torch.zeros(3, 4, 2), torch.zeros(3, 3, 2), torch.zeros(3, 3, 2), 2)
