"""Independent values for the exercises of chapter 37 (Conclusion), the pattern of
tests/test_exercise_values_iii.py: each value comes from the exercise's prompt and published
configurations alone, the arithmetic written out, and calls no dtbook function its own
exercise's reference calls. SI base units, the structure of ``get(id).solution()``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dtbook.exercises import get, registry
from exercise_values import chapter_number, compare, unconfirmed

INDEPENDENT: dict = {}
TOLERANCE: dict = {}          # only where not 1e-9, with the reason
CHAPTER = 37

GIB = 2 ** 30
DAY = 86400.0


# ==== 37.1: 16 bytes per parameter; ZeRO-1 shards the 12 bytes of master weights and moments
_PSI = 175e9
_states = 16 * _PSI
INDEPENDENT["37.1"] = (_states, math.ceil(_states / (80 * GIB)),
                       (2 + 2) * _PSI / 64 + 12 * _PSI / 64 / 8)


# ==== 37.2: count the keys each query sees, query by query
def _pairs(seq, window=None):
    i = np.arange(1, seq + 1, dtype=np.int64)          # query i sees keys 1..i
    return int(np.minimum(i, window).sum() if window else i.sum())


INDEPENDENT["37.2"] = (_pairs(32768, 256) / _pairs(32768), 1.0)


# ==== 37.3: Young's interval by hand; failures = run / MTBF; δ/I + I/(2M) at I*
_delta, _mtbf = 300.0, 3 * DAY
_i = math.sqrt(2 * _delta * _mtbf)
INDEPENDENT["37.3"] = (_i, 14 / 3, _delta / _i + _i / (2 * _mtbf))


# ==== 37.4: the H100 SXM's whitepaper figures (989.4 TFLOP/s dense BF16, 3.35 TB/s)
INDEPENDENT["37.4"] = ((2 * 989.4e12 / (3.35e12 / 2)) / (989.4e12 / 3.35e12))


# ==== 37.5: T ∝ Ψ·D/P with D ∝ Ψ
INDEPENDENT["37.5"] = 7 * DAY * (70 / 7) ** 2 / (640 / 64)


# ==== 37.6: GPU-hours ∝ tokens at a fixed per-GPU throughput; twice the GPUs
INDEPENDENT["37.6"] = (100_000 * 1.2, 1.2 / 2)


# ==== 37.7 and 37.8: parameter counts written out from the published config.json files
def _llama3_405b():
    # meta-llama/Llama-3.1-405B config.json: hidden 16384, 126 layers, 128 heads, 8 KV heads
    # (head 128), FFN 53248 (SwiGLU), vocab 128256, untied head, RMSNorm
    h, layers, kv, ffn, vocab = 16384, 126, 8 * 128, 53248, 128256
    block = h * h * 2 + 2 * h * kv + 3 * h * ffn + 2 * h
    return layers * block + 2 * vocab * h + h


def _mixtral_8x22b():
    # mistral-community/Mixtral-8x22B-v0.1 config.json: hidden 6144, 56 layers, 48 heads,
    # 8 KV heads (head 128), 8 experts of FFN 16384, top 2, vocab 32000, untied head
    h, layers, kv, ffn, vocab, experts, top = 6144, 56, 8 * 128, 16384, 32000, 8, 2
    attention, expert, router = 2 * h * h + 2 * h * kv, 3 * h * ffn, h * experts
    shared = layers * (attention + router + 2 * h) + 2 * vocab * h + h
    return shared + layers * experts * expert, shared + layers * top * expert


def _deepseek_v3():
    # deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers (first 3 dense, FFN 18432),
    # 128 heads; MLA q_lora 1536, kv_lora 512, qk 128 + 64 rope, v 128; 256 routed experts
    # (top 8) + 1 shared, expert FFN 2048; vocab 129280, untied; router bias per expert
    h, layers, dense, heads, vocab = 7168, 61, 3, 128, 129280
    ql, kvl, nope, rope, v = 1536, 512, 128, 64, 128
    attention = (h * ql + ql + ql * heads * (nope + rope)            # q down, its norm, q up
                 + h * (kvl + rope) + kvl + kvl * heads * (nope + v)  # kv down, norm, kv up
                 + heads * v * h)                                     # output
    expert, experts, top = 3 * h * 2048, 256, 8
    moe_fixed = h * experts + experts + expert                       # router, its bias, shared
    per_dense = attention + 3 * h * 18432 + 2 * h
    per_moe_all = attention + moe_fixed + experts * expert + 2 * h
    per_moe_active = attention + moe_fixed + top * expert + 2 * h
    ends = 2 * vocab * h + h
    total = dense * per_dense + (layers - dense) * per_moe_all + ends
    active = dense * per_dense + (layers - dense) * per_moe_active + ends
    return total, active


_L405 = _llama3_405b()
_DS_TOTAL, _DS_ACTIVE = _deepseek_v3()
_MX_TOTAL, _MX_ACTIVE = _mixtral_8x22b()
INDEPENDENT["37.7"] = (2 * _L405, 2 * _DS_TOTAL, 2 * _MX_TOTAL)
INDEPENDENT["37.8"] = (2 * _L405, 2 * _DS_ACTIVE, 2 * _MX_ACTIVE)


def test_published_totals():
    """The written-out counts are the published ones: 405B, 671B (37B active), 141B (39B)."""
    assert round(_L405 / 1e9) == 406 and round(_DS_TOTAL / 1e9) == 671
    assert round(_DS_ACTIVE / 1e9) == 38 and round(_MX_TOTAL / 1e9) == 141
    assert round(_MX_ACTIVE / 1e9) == 39


@pytest.mark.parametrize("ex_id", sorted(INDEPENDENT))
def test_independent_value(ex_id):
    compare(get(ex_id).solution(), INDEPENDENT[ex_id], TOLERANCE.get(ex_id, 1e-9), ex_id)


def test_every_unconfirmed_exercise_is_covered():
    wanted = {i for i, e in registry().items() if chapter_number(i) == CHAPTER and unconfirmed(e)}
    assert wanted <= set(INDEPENDENT), sorted(wanted - set(INDEPENDENT))
