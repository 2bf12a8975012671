"""The FP8 casts of the planner (terms.fp8_cast_bytes), counted by hand from Megatron-Core's
layer and Transformer Engine's cast-transpose: each FP8 GEMM's input cast and transposed (read
2 bytes, write 1 + 1), one byte net where the norm writes FP8 itself (linear_qkv, linear_fc1),
and each output gradient cast and transposed in backward (4 bytes per value)."""

import numpy as np
import pytest

from dtbook import models
from dtbook.plan import terms
from dtbook.plan.model import RECOMPUTE

KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
         "sequence_parallel")


def _setup(model, row, dtype):
    cfg = models.get(model)
    job = terms.Job.make(cfg, gpu="h100-sxm", seq=4096, global_batch=256, dtype=dtype)
    cols = {k: np.array([float(v) if k != "recompute" else float(RECOMPUTE.index(v))])
            for k, v in zip(KNOBS, row)}
    return cfg, job, terms.Layouts.of(cols, job)


def test_a_dense_blocks_casts():
    cfg, job, lay = _setup("llama3-70b", (4, 1, 64, 1, 1, 1, 1, 1, "none", 1), "fp8")
    T, h, tp, hd = lay.tokens[0], cfg.hidden, 4, cfg.head_dim
    qkv = (cfg.heads + 2 * cfg.kv_heads) * hd / tp
    fwd = T * (1 * h                        # linear_qkv: the norm writes FP8, + its transpose
               + 4 * cfg.heads * hd / tp    # linear_proj's input, cast and transposed
               + 1 * h                      # linear_fc1: norm-fed
               + 4 * cfg.ffn_hidden / tp)   # linear_fc2's input
    bwd = T * 4 * (qkv + h + 2 * cfg.ffn_hidden / tp + h)   # every output gradient
    f, b = terms.fp8_cast_bytes(job, lay)
    assert f[0] == pytest.approx(fwd) and b[0] == pytest.approx(bwd)
    # the elementwise term carries them at the HBM bandwidth; BF16 has none
    _, bf16_job, _ = _setup("llama3-70b", (4, 1, 64, 1, 1, 1, 1, 1, "none", 1), "bf16")
    ew, bf16_ew = terms.elementwise(job, lay), terms.elementwise(bf16_job, lay)
    assert (ew.forward - bf16_ew.forward)[0] == pytest.approx(fwd / job.hbm)
    assert (ew.backward - bf16_ew.backward)[0] == pytest.approx(bwd / job.hbm)


def test_an_moe_blocks_casts_run_over_the_routed_rows():
    cfg, job, lay = _setup("mixtral-8x7b", (1, 1, 64, 1, 1, 1, 1, 1, "none", 1), "fp8")
    T, h, k, f = lay.tokens[0], cfg.hidden, cfg.experts_per_token, cfg.moe_ffn_hidden
    rows = T * k                                   # EP 1: no load imbalance
    qkv = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    fwd = T * (h + 4 * cfg.heads * cfg.head_dim) + rows * (4 * h + 4 * f)
    bwd = T * 4 * (qkv + h) + rows * 4 * (2 * f + h)
    got = terms.fp8_cast_bytes(job, lay)
    assert got[0][0] == pytest.approx(fwd) and got[1][0] == pytest.approx(bwd)


def test_full_recompute_casts_the_forward_again():
    backward = {}
    for rc in ("none", "full"):
        _, job, lay = _setup("llama3-70b", (4, 1, 64, 1, 1, 1, 1, 1, rc, 1), "fp8")
        backward[rc] = terms.elementwise(job, lay).backward[0]
    cast_forward = terms.fp8_cast_bytes(job, lay)[0][0]
    forward = terms.elementwise(job, lay).forward[0]
    assert backward["full"] - backward["none"] == pytest.approx(forward)   # casts included
    assert forward > cast_forward / job.hbm > 0


def test_a_gelu_blocks_fc1_casts_its_own_input():
    """GPT-3's MLP has no gate: linear_fc1 is one GEMM, norm-fed, and casts its input itself."""
    cfg, job, lay = _setup("gpt3-175b", (8, 1, 8, 1, 1, 1, 1, 1, "none", 1), "fp8")
    T, h, tp, hd = lay.tokens[0], cfg.hidden, 8, cfg.head_dim
    fwd = T * (h + 4 * cfg.heads * hd / tp + h + 4 * cfg.ffn_hidden / tp)
    bwd = T * 4 * (3 * cfg.heads * hd / tp + h + cfg.ffn_hidden / tp + h)
    f, b = terms.fp8_cast_bytes(job, lay)
    assert f[0] == pytest.approx(fwd) and b[0] == pytest.approx(bwd)
