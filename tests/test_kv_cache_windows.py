"""dtbook.kv_cache's chapter 36 section: the rolling slot, the window for a context, the
combined reduction and the serving batch, against arithmetic written out."""

import math

import pytest
import sympy as sp

from dtbook import kv_cache as kv
from dtbook import models


def test_rolling_slot():
    assert [int(kv.rolling_slot(i, 4)) for i in range(9)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    i, w = sp.symbols("i w", positive=True, integer=True)
    assert kv.rolling_slot(i, w) == sp.Mod(i, w)


@pytest.mark.parametrize("context,layers", [(100_000, 32), (131_041, 32), (131_042, 32), (7, 3), (1, 5)])
def test_window_for_context_is_the_smallest(context, layers):
    w = int(kv.window_for_context(context, layers))
    assert kv.receptive_field(layers, w) >= context
    assert w == 1 or kv.receptive_field(layers, w - 1) < context


def test_mistral_reduction_and_serving():
    cfg = models.get("mistral-7b")
    assert kv.cache_reduction(32768, cfg.sliding_window, cfg.kv_heads, cfg.heads) == 1 / 32
    assert kv.cache_reduction(1000, 4096, 8, 32) == 1 / 4
    per_seq = kv.cache_bytes(kv.bytes_per_token_layer(cfg), 32768, cfg.layers,
                             window=cfg.sliding_window)
    assert per_seq == 2 * 32 * 4096 * 8 * 128 * 2
    assert kv.max_batch(80e9, 14e9, per_seq) == math.floor(66e9 / per_seq)
    assert kv.max_batch(10e9, 14e9, per_seq) == 0
    m, mm, s = sp.symbols("M M_m s", positive=True)
    assert kv.max_batch(m, mm, s) == sp.floor(sp.Max(m - mm, 0) / s)


@pytest.mark.parametrize("fn,bad", [(kv.rolling_slot, dict(position=-1, window=4)),
                                    (kv.window_for_context, dict(context=0, layers=3)),
                                    (kv.cache_reduction, dict(seq=10, window=4, kv_heads=0, heads=8)),
                                    (kv.max_batch, dict(memory=80e9, model_bytes=1e9, sequence_bytes=0))])
def test_bad_arguments(fn, bad):
    name = next(k for k, v in bad.items() if v in (0, -1))
    with pytest.raises(ValueError, match=name):
        fn(**bad)
