"""Op-level selective recompute (torchtitan's policy) in the planner, checked against PyTorch's
own selective checkpointing running that policy on a small Llama-style block: which matmuls
the backward runs again (counted), and what the checkpoint stores (bytes)."""

from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                    create_selective_checkpoint_contexts)
from torch.utils._python_dispatch import TorchDispatchMode

from dtbook import activations, flops, models, plan
from dtbook.plan import terms

CFG = models.tiny(hidden=64, heads=4, kv_heads=2, ffn_hidden=160, layers=2)
SEQ, BATCH = 32, 2
MM = torch.ops.aten.mm.default
# torchtitan 9dec370's save list: matmuls and the attention kernel (its CUDA flash and
# efficient variants; on CPU the kernel is the flash-for-cpu op, saved for the same reason)
SAVE = {MM, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy(meta):
    def policy(ctx, func, *args, **kwargs):     # torchtitan's alternating rule
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == MM:
            meta[key] += 1
        save = func in SAVE and not (func == MM and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def _weights():
    torch.manual_seed(0)
    return {g["name"]: torch.randn(g["in_features"], g["out_features"], requires_grad=True) * 0.1
            for g in flops.block_gemms(CFG, 0)}


def _block(x, w):
    """A Llama block with separate Q, K, V (as torchtitan writes it), GQA, SwiGLU."""
    b, s, h = x.shape
    hd = CFG.head_dim
    n = F.rms_norm(x, (h,))
    q = (n @ w["q"]).view(b, s, CFG.heads, hd).transpose(1, 2)
    k = (n @ w["k"]).view(b, s, CFG.kv_heads, hd).transpose(1, 2)
    v = (n @ w["v"]).view(b, s, CFG.kv_heads, hd).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + a.transpose(1, 2).reshape(b, s, h) @ w["o"]
    n = F.rms_norm(x, (h,))
    return x + (F.silu(n @ w["gate"]) * (n @ w["up"])) @ w["down"]


class _CountMM(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.mm = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.mm += func == MM
        return func(*args, **(kwargs or {}))


def _backward_mms(mode):
    w = _weights()
    x = torch.randn(BATCH, SEQ, CFG.hidden, requires_grad=True)
    contexts = []

    def context_fn():
        contexts.append(create_selective_checkpoint_contexts(_policy(defaultdict(int))))
        return contexts[-1]

    if mode == "none":
        y = _block(x, w)
    elif mode == "full":
        y = checkpoint(_block, x, w, use_reentrant=False)
    else:
        y = checkpoint(_block, x, w, use_reentrant=False, context_fn=context_fn)
    # what the policy saved (PyTorch's SAC cache: op -> call -> outputs), before backward frees it
    saved = [w.val for c, _ in contexts for calls in c.storage.values() for out in calls.values()
             for w in torch.utils._pytree.tree_leaves(out) if hasattr(w, "val")]
    stored = sum(t.numel() * t.element_size() for t in saved if isinstance(t, torch.Tensor))
    counter = _CountMM()
    with counter:
        y.sum().backward()
    return counter.mm, stored


def test_the_matmuls_run_again_are_the_planners():
    plain, _ = _backward_mms("none")
    full, _ = _backward_mms("full")
    op, _ = _backward_mms("op")
    matmuls = terms._op_matmuls(CFG, 0)
    # full recompute: every forward mm but the last, whose output no backward op reads (PyTorch's
    # non-reentrant checkpoint stops recomputing once it has every tensor backward needs)
    assert full - plain == len(matmuls) - 1
    assert op - plain == len(terms._op_recomputed(CFG, 0))
    assert [g["name"] for g in terms._op_recomputed(CFG, 0)] == ["k", "o", "up"]


def test_the_stored_bytes_are_the_formulas():
    _, stored = _backward_mms("op")
    tokens = BATCH * SEQ
    widths = [g["out_features"] for g in terms._op_matmuls(CFG, 0)]
    formula = activations.alternate_matmul_saved_bytes(
        tokens, widths, block_input=CFG.hidden, attention_output=CFG.heads * CFG.head_dim,
        attention_stats=CFG.heads, value_bytes=4)
    # the checkpoint keeps the block input itself, outside the policy's storage
    assert stored == formula - 4 * tokens * CFG.hidden


def test_op_recompute_sits_between_selective_memory_and_full_time():
    kw = dict(model="llama3-8b", gpus=8, gpu="h100-sxm", tp=1, pp=1, dp=8, global_batch=16,
              micro_batch=2, seq=8192, zero=3, data_parallel_engine="fsdp2")
    est = {rc: plan.estimate(recompute=rc, **kw) for rc in plan.model.RECOMPUTE}
    act = {rc: e.breakdown["memory_activations"] for rc, e in est.items()}
    again = {rc: e.breakdown["recompute"] for rc, e in est.items()}
    assert act["full"] < act["selective-op"] < act["none"]
    assert 0 < again["selective-op"] < again["full"]


def test_bad_widths_are_named():
    with pytest.raises(ValueError, match="matmul_widths"):
        activations.alternate_matmul_saved_bytes(8, [], block_input=4, attention_output=4)
    with pytest.raises(ValueError, match=r"matmul_widths\[1\]"):
        activations.alternate_matmul_saved_bytes(8, [4, -1], block_input=4, attention_output=4)


@pytest.mark.parametrize("sp", [True, False])
def test_op_recompute_reruns_the_all_gathers_and_every_elementwise_op(sp):
    """torchtitan's policy saves the reduce-scatters (sequence parallelism) but no all-reduce
    and no norm, activation or RoPE output: against full recompute, half the re-run TP
    collectives with SP, all of them without, and the same memory-bound ops again."""
    kw = dict(model="llama3-70b", gpus=64, gpu="h100-sxm", tp=8, pp=1, dp=8, global_batch=64,
              seq=8192, zero=1, sequence_parallel=sp)
    b = {rc: plan.estimate(recompute=rc, **kw).breakdown for rc in ("none", "full", "selective-op")}
    extra = {rc: {k: b[rc][k] - b["none"][k] for k in ("tp_comm", "elementwise")}
             for rc in ("full", "selective-op")}
    assert extra["full"]["tp_comm"] > 0
    assert extra["selective-op"]["tp_comm"] == pytest.approx(
        extra["full"]["tp_comm"] / (2 if sp else 1))
    assert extra["selective-op"]["elementwise"] == pytest.approx(extra["full"]["elementwise"])
