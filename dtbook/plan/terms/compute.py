"""The compute of one layer for one micro-batch on one GPU (chapter 27): every GEMM at its
per-GPU shape (:func:`dtbook.plan.gemm.matmul_time`), the attention core at the fused kernel's
measured rate, dense and MoE MLPs (the routed experts' grouped GEMMs, chapter 18's busiest-rank
load), each kind of block apart, and what recomputation runs again.
"""

from __future__ import annotations

import functools

import numpy as np

from ... import flops, hardware, moe
from ..gemm import _matmul_time
from .job import Job, LayerCompute, LayerKinds, Layouts, Seconds, Stage

__all__ = ["attention_compute", "expert_load_factor", "mlp_compute", "layer_compute",
           "stage_on_free_sms", "recompute", "model_flops"]


def layer_compute(job: Job, lay: Layouts) -> LayerCompute:
    """Forward GEMMs and attention core of one (mean) layer, one micro-batch, one GPU
    (the notes of :mod:`dtbook.plan.terms`), with each kind of layer apart in ``kinds``
    (:class:`LayerKinds`): the attention of each window (:func:`attention_compute`) and the
    dense and MoE MLPs (:func:`mlp_compute`), the GEMMs at the shapes
    :func:`dtbook.flops.block_gemms` gives (MLA's low-rank projections, the routed experts'
    grouped GEMMs) timed by :func:`dtbook.plan.gemm.matmul_time`. The mean weighs each kind
    by its count of layers; :func:`~dtbook.plan.terms.stages.slowest_stage` adds up the
    kinds a stage actually holds."""
    cfg = job.cfg
    L = cfg.layers
    attention = {w: attention_compute(job, lay, w) for w, _ in _windows(cfg)}
    mlp = {moe_: mlp_compute(job, lay, moe_) for moe_ in _mlp_kinds(cfg)}
    n_moe = job.moe_layers
    counts = {w: n for w, n in _windows(cfg)}
    linear = (sum(counts[w] * a[0] for w, a in attention.items()) / L
              + sum((n_moe if moe_ else L - n_moe) * t for moe_, t in mlp.items()) / L)
    core = sum(counts[w] * a[1] for w, a in attention.items()) / L
    core_bwd = sum(counts[w] * a[2] for w, a in attention.items()) / L
    logits = _matmul_time(lay.tokens, cfg.vocab / lay.tp, cfg.hidden, gpu=job.gpu)
    mm_lin = functools.partial(_matmul_time, gpu=job.gpu, dtype=job.dtype)
    op = {}
    for moe_ in mlp if np.any(lay.rc == 3) else ():   # only where op-level recompute is asked
        # one block's recomputed matmuls, its attention half and its MLP half
        for g in _op_recomputed(cfg, cfg.dense_layers if moe_ else 0):
            mlp_half = g["name"] in _MLP_GEMMS or g["name"].startswith("shared")
            half = moe_ if mlp_half else "attention"
            op[half] = op.get(half, 0.0) + _gemm_seconds(mm_lin, lay.tokens, g, lay.tp)
    op["attention"] = op.get("attention", 0.0) / len(mlp)   # the same in every block
    op_again = op["attention"] + sum((n_moe if m else L - n_moe) * op.get(m, 0.0) for m in mlp) / L
    return LayerCompute(linear, core, core_bwd, logits, LayerKinds(attention, mlp, op), op_again)


_MLP_GEMMS = ("gate", "up", "down", "router")


def _op_matmuls(cfg, index):
    """The ``aten.mm`` calls of block ``index``'s forward, in the order they run:
    :func:`dtbook.flops.block_gemms` without the routed experts (a grouped GEMM, not an mm)."""
    return [g for g in flops.block_gemms(cfg, index) if not g["name"].startswith("expert_")]


def _op_recomputed(cfg, index):
    """The matmuls torchtitan's op-level policy does not save (the second, fourth, ...): the
    ones its backward runs again (:func:`dtbook.activations.alternate_matmul_saved_bytes`)."""
    return _op_matmuls(cfg, index)[1::2]


def stage_on_free_sms(job: Job, stage: Stage) -> Stage:
    """The stage's compute when communication kernels hold ``job.moe_comm_sms`` of the GPU's
    SMs throughout (DualPipe pairs every forward with a backward, so the dispatch runs beside
    all of it; Megatron's 1F1B overlap leaves the warm-up and cool-down unpaired, for which
    this is an upper bound): the GEMMs and the attention run on the rest, each stretched by
    SMs / (SMs - comm SMs)."""
    n = job.moe_comm_sms
    if not n:
        return stage
    sms = hardware.matmul_ceiling(job.gpu, job.dtype).sms
    f = sms / (sms - n)
    m = stage.mean
    mean = m._replace(linear=m.linear * f, core=m.core * f, core_backward=m.core_backward * f,
                      logits=m.logits * f, op_again=m.op_again * f)
    return stage._replace(forward=stage.forward * f, backward=stage.backward * f, mean=mean)


def recompute(job: Job, lay: Layouts, layer: LayerCompute) -> Seconds:
    """What recomputation re-runs in one layer's backward: the whole forward (``"full"``),
    the attention core (``"selective"``, Korthikanti et al. 2022), or every second matmul
    of the block, the attention kernel's output being saved (``"selective-op"``,
    :func:`_op_recomputed`)."""
    again = np.select([lay.rc == 2, lay.rc == 1, lay.rc == 3],
                      [layer.forward, layer.core, layer.op_again], 0.0)
    return Seconds(np.zeros_like(again), again)


def model_flops(job: Job):
    """Model FLOPs of one step (MFU's numerator): :func:`dtbook.flops.transformer_matmul_flops`
    forward and backward, attention counted causal (half), recompute not counted."""
    return _model_flops(job.cfg, job.global_batch, job.seq)


@functools.lru_cache(maxsize=256)
def _model_flops(cfg, batch, seq):
    f = flops.transformer_matmul_flops(cfg, batch, seq)
    return 3 * (f["linear_forward"] + f["attention_forward"] / 2)


@functools.lru_cache(maxsize=64)
def _block_kinds(cfg):
    """``(window, moe)`` of every block: :meth:`dtbook.models.TransformerConfig.
    attention_window` and :meth:`~dtbook.models.TransformerConfig.is_moe_layer`."""
    return tuple((cfg.attention_window(i), cfg.is_moe_layer(i)) for i in range(cfg.layers))


def _windows(cfg):
    """``(window, blocks)`` pairs, full attention (``None``) first."""
    counts = {}
    for w, _ in _block_kinds(cfg):
        counts[w] = counts.get(w, 0) + 1
    return sorted(counts.items(), key=lambda wn: -1 if wn[0] is None else wn[0])


def _mlp_kinds(cfg):
    return sorted({moe_ for _, moe_ in _block_kinds(cfg)})


_DUPLICATED = ("q_down", "kv_down")   # MLA's down-projections: whole on every TP rank


_ROW_PARALLEL = ("o", "down", "expert_down", "shared_down")


def _gemm_seconds(mm_lin, rows, g, tp, count=1):
    """One GEMM of :func:`dtbook.flops.block_gemms` over ``rows`` tokens on one GPU: column-
    parallel (output split by TP), row-parallel (input split) or duplicated, Megatron-Core's
    placement (``TEColumnParallelLinear``, ``TERowParallelLinear``; MLA's
    ``linear_q_down_proj`` and ``linear_kv_down_proj`` are not split)."""
    n, k = g["out_features"], g["in_features"]
    if g["name"] in _ROW_PARALLEL:
        k = k / tp
    elif g["name"] not in _DUPLICATED:
        n = n / tp
    return mm_lin(rows, n, k, count=count)


def attention_compute(job: Job, lay: Layouts, window=None):
    """``(linear, core, core_backward)`` seconds of one block's attention for one micro-batch
    on one GPU. The projections are :func:`dtbook.flops.block_gemms`'s: Q, K and V as one
    fused GEMM (Megatron's ``linear_qkv``; GQA and MQA through the K and V widths), or MLA's
    low-rank ``q_down``, ``q_up``, ``kv_down`` (latent plus the shared RoPE key) and ``kv_up``
    in the explicit form training runs (:func:`dtbook.flops.mla_attention_flops`), then the
    output projection. The core is :func:`dtbook.flops.attention_flops` with MLA's value width
    and the block's sliding ``window`` (the band of keys within w - 1, halved for causal
    attention as the full square is), at the flash kernel's measured rate; unfused, two
    batched GEMMs over the whole score matrix (masked afterwards: a window saves nothing)."""
    cfg, tp, cp, mb, T = job.cfg, lay.tp, lay.cp, lay.mb, lay.tokens
    mm_lin = functools.partial(_matmul_time, gpu=job.gpu, dtype=job.dtype)
    mm = functools.partial(_matmul_time, gpu=job.gpu)
    gemms = [g for g in flops.block_gemms(cfg, 0) if g["name"] in
             ("q", "k", "v", "o", "q_down", "q_up", "kv_down", "kv_up")]
    if cfg.is_mla:
        linear = sum(_gemm_seconds(mm_lin, T, g, tp) for g in gemms)
    else:
        qkv = sum(g["out_features"] for g in gemms if g["name"] in ("q", "k", "v"))
        linear = (mm_lin(T, qkv / tp, cfg.hidden)
                  + sum(_gemm_seconds(mm_lin, T, g, tp) for g in gemms if g["name"] == "o"))
    hd = cfg.head_dim
    vd = cfg.v_head_dim if cfg.is_mla else hd
    if job.attention == "flash":
        kern = hardware.attention_kernel(job.gpu)
        full = flops.attention_flops(mb, job.seq, cfg.heads / tp, hd, value_dim=vd, window=window)
        causal = 0.5 * full / cp                                          # s/cp queries
        return linear, causal / kern.forward, 2.5 * causal / kern.backward
    heads_gpu = mb * cfg.heads / tp
    core = (mm(job.seq / cp, job.seq, hd, count=heads_gpu)
            + mm(job.seq / cp, vd, job.seq, count=heads_gpu))
    return linear, core, 2 * core


def _expert_layout(job: Job, lay: Layouts):
    """``(etp, tokens, g)``: the expert-tensor-parallel size, the tokens one GPU dispatches per
    micro-batch and the EP ranks of one group in a node. ``expert_tensor_parallel`` None
    (Megatron-Core before MoE parallel folding, and its default ETP = TP): the experts split
    over the attention's TP group, every TP rank dispatches the micro-batch's ``tokens`` and
    EP runs over the data-parallel replicas, its ranks ``tp * cp`` apart (g = gpus_per_node /
    (tp cp)). An ETP e dividing TP (MoE parallel folding, Liu et al. 2025, arXiv:2504.14960;
    ``--expert-tensor-parallel-size``): the expert mesh ETP x EP x EDP refolds the TP x CP x DP
    ranks, ETP innermost, so a GPU holds ``tokens / tp`` (sequence parallelism) gathered over
    its e ETP ranks, ``tokens * e / tp``, and an EP group's ranks are e apart (g =
    gpus_per_node / e)."""
    e = job.expert_tensor_parallel
    if e is None:
        return lay.tp, lay.tokens, job.gpus_per_node // (lay.tp * lay.cp)
    return e, lay.tokens * e / lay.tp, np.full_like(lay.tp, job.gpus_per_node // e)


def expert_load_factor(job: Job, lay: Layouts):
    """Routed tokens on the busiest expert-parallel rank over the mean, chapter 18's model
    (tokens pick their k experts independently and uniformly: an expert's load is
    Binomial(N, k/E) over the N = ep * tokens the EP group routes per micro-batch). The
    largest of ``ep`` ranks' loads is taken at the (1 - 1/ep) quantile (the characteristic
    largest value of ``ep`` draws): :func:`dtbook.moe.capacity_factor_for_overflow` with
    ``overflow = 1/ep`` gives it for one expert, ``1 + z sigma/mu``; a rank sums E/ep
    experts' loads, whose relative spread is sqrt(E/ep) times smaller. Dropless routing
    (Megatron-Core's default, DeepSeek-V3's): the busiest rank's GEMMs and all-to-alls carry
    all of it. A trained router's skew (what the auxiliary losses fight) is not in the model.
    1 without EP: every expert is local and the total is fixed."""
    cfg, ep = job.cfg, lay.ep
    if not job.moe_layers or not np.any(ep > 1):
        return np.ones_like(ep)
    n = np.maximum(ep, 2) * _expert_layout(job, lay)[1]
    c = moe.capacity_factor_for_overflow(n, cfg.experts, cfg.experts_per_token,
                                         overflow=1 / np.maximum(ep, 2))
    return np.where(ep > 1, 1 + (c - 1) * np.sqrt(ep / cfg.experts), 1.0)


def mlp_compute(job: Job, lay: Layouts, moe_block=False):
    """Linear forward seconds of one block's MLP for one micro-batch on one GPU, at the shapes
    of :func:`dtbook.flops.block_gemms`: a dense MLP (gate and up as one GEMM, then down), or
    an MoE block's router (BF16, every token against every expert), the routed experts as a
    grouped GEMM of E/ep local experts, each over its share k/E of the EP group's ``ep *
    tokens`` tokens times :func:`expert_load_factor` (dropless), and the shared experts as one
    MLP over all tokens (split by the attention's TP). Expert-tensor-parallel size: TP
    (Megatron-Core's default) with EP carved out of DP, or the ETP of MoE parallel folding
    (:func:`_expert_layout`), the experts' width split by ETP. The
    experts' and shared experts' GEMMs run in ``dtype`` (FP8 with Transformer Engine, as
    DeepSeek-V3 runs them); the router stays BF16."""
    cfg, tp, T = job.cfg, lay.tp, lay.tokens
    index = cfg.dense_layers if moe_block else 0
    mm_lin = functools.partial(_matmul_time, gpu=job.gpu, dtype=job.dtype)
    gemms = {g["name"]: g for g in flops.block_gemms(cfg, index)}
    mult = 2 if cfg.gated_mlp else 1

    def mlp(prefix, rows, count=1, fuse=1):
        up, down = gemms[prefix + "up"], gemms[prefix + "down"]
        width = up["out_features"] * fuse
        return (mm_lin(rows, mult * width / tp, up["in_features"], count=count)
                + mm_lin(rows, down["out_features"], width / tp, count=count))

    if not moe_block:
        return mlp("", T)
    ep = lay.ep
    etp, routed, _ = _expert_layout(job, lay)
    share = float(gemms["expert_up"]["token_share"])
    rows = share * ep * routed * expert_load_factor(job, lay)   # tokens per local expert
    up, down = gemms["expert_up"], gemms["expert_down"]
    count = up["count"] / ep
    t = (_matmul_time(T, cfg.experts, cfg.hidden, gpu=job.gpu)  # the router
         + mm_lin(rows, mult * up["out_features"] / etp, up["in_features"], count=count)
         + mm_lin(rows, down["out_features"], down["in_features"] / etp, count=count))
    if "shared_up" in gemms:
        t = t + mlp("shared_", T, fuse=gemms["shared_up"]["count"])
        if "shared_expert_gate" in gemms:
            t = t + _matmul_time(T, 1, cfg.hidden, gpu=job.gpu)
    return t
