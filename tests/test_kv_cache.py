"""dtbook.kv_cache (chapter 31a): the formulas against the bytes of real torch tensors and
against the catalog's published shapes."""

import pytest
import sympy as sp
import torch

from dtbook import kv_cache as kv
from dtbook import models


def _cache_bytes_of_real_tensors(cfg, seq, window=None):
    """Run K and V projections of one layer over `seq` tokens and keep what a decoder keeps."""
    torch.manual_seed(0)
    x = torch.randn(1, seq, cfg.hidden, dtype=torch.bfloat16)
    if cfg.is_mla:
        down = torch.nn.Linear(cfg.hidden, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=False,
                               dtype=torch.bfloat16)
        kept = [down(x)]                         # latent c_t and the shared RoPE key
    else:
        proj = torch.nn.Linear(cfg.hidden, 2 * cfg.kv_heads * cfg.head_dim, bias=False,
                               dtype=torch.bfloat16)
        k, v = proj(x).view(1, seq, 2, cfg.kv_heads, cfg.head_dim).unbind(2)
        kept = [k, v]
    if window is not None:
        kept = [t[:, -window:].contiguous() for t in kept]
    return sum(t.numel() * t.element_size() for t in kept)


@pytest.mark.parametrize("kv_heads,window", [(4, None), (2, None), (1, None), (2, 5), (4, 50)])
def test_formula_equals_bytes_of_torch_tensors(kv_heads, window):
    cfg = models.tiny(kv_heads=kv_heads)
    seq = 12
    want = kv.cache_bytes(kv.bytes_per_token_layer(cfg), seq, window=window)
    assert _cache_bytes_of_real_tensors(cfg, seq, window) == want


def test_mla_formula_equals_bytes_of_a_torch_latent():
    cfg = models.tiny(heads=4, kv_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
                      qk_rope_head_dim=4, v_head_dim=8)
    assert _cache_bytes_of_real_tensors(cfg, 9) == kv.cache_bytes(kv.bytes_per_token_layer(cfg), 9)


def test_catalog_models():
    # Llama 3 70B: 8 KV heads of 128, bf16: 4 KiB per token per layer; MHA would be 8x
    cfg = models.get("llama3-70b")
    assert kv.bytes_per_token_layer(cfg) == 2 * 8 * 128 * 2
    assert kv.bytes_per_token_layer(cfg, kv_heads=cfg.heads) / kv.bytes_per_token_layer(cfg) == 8
    # DeepSeek-V3: latent 512 plus RoPE key 64
    assert kv.bytes_per_token_layer(models.get("deepseek-v3")) == (512 + 64) * 2


def test_window_and_receptive_field_symbolic_and_numeric_agree():
    S, w, L = sp.symbols("S w L", positive=True)
    assert kv.cached_tokens(S, w) == sp.Min(S, w)
    assert kv.cached_tokens(100, 30) == 30 and kv.cached_tokens(10, 30) == 10
    assert kv.receptive_field(L, w).subs({L: 32, w: 4096}) == kv.receptive_field(32, 4096) == 131041


def test_bad_numbers_are_refused_by_name():
    with pytest.raises(ValueError, match="kv_heads"):
        kv.kv_bytes_per_token(0, 128)
    with pytest.raises(ValueError, match="window"):
        kv.cached_tokens(10, -1)
