"""The memory-bound work of the planner's step (chapter 27), at the measured HBM bandwidth:
norms, activations, residual adds, RoPE and unfused softmax (:func:`elementwise_values`), an MoE
block's routed activation and token permutation, FP8 casts, unfused gradient accumulation and
the optimizer step.
"""

from __future__ import annotations

import numpy as np

from ... import flops, offload
from .job import Job, Layouts, MAIN_GRAD, Seconds, VALUE
from .compute import _DUPLICATED, _ROW_PARALLEL, _expert_layout, _mlp_kinds, expert_load_factor

__all__ = ["elementwise_values", "moe_elementwise_values", "elementwise", "fp8_cast_bytes",
           "grad_accum", "optimizer"]


def elementwise_values(cfg, tokens, seq, tp, sp, attention="flash", heads_local=None,
                       mlp_activation=True):
    """Values (not bytes) the memory-bound ops of one layer read plus write for one
    micro-batch of ``tokens`` tokens on one GPU, as ``(forward, backward)`` (chapter 27).

    Forward: each norm reads h and writes h per token; the MLP activation reads f and writes f
    (GELU) or reads 2f and writes f (SwiGLU), f = ffn / tp; each of the 2 residual adds reads
    2h and writes h; RoPE reads and writes Q and K. Backward: each op reads its saved input
    and the output gradient and writes the input gradient (norm 3h, GELU 3f, SwiGLU 5f,
    residual 2h, RoPE 2 (q + k)). The h-wide ops run on every TP rank unless sequence
    parallelism (``sp``) splits them. With ``attention="unfused"`` the score matrix of
    ``heads_local`` heads (``heads / tp``) per sequence is scaled, masked and soft-maxed in one
    fused kernel (read and write) and dropped out (read, write, a 1-byte mask), Megatron-LM's
    path before FlashAttention: forward 4.5 values per score, backward 5.5 (softmax: read P
    and dP, write dS; dropout: read dy and mask, write dx). A flash kernel keeps its scores
    on chip: nothing here. ``mlp_activation=False`` leaves the MLP's activation out (an MoE
    block's runs over its routed rows: :func:`moe_elementwise_values`). Arrays broadcast."""
    tp, sp = np.asarray(tp, dtype=float), np.asarray(sp, dtype=float)
    h, f = cfg.hidden, cfg.ffn_hidden / tp
    hw = h / np.where(sp == 1, tp, 1.0)        # h-wide ops: split only by SP
    qk = (cfg.heads + cfg.kv_heads) * cfg.head_dim / np.minimum(tp, cfg.heads)
    act_f, act_b = _ACTIVATION_VALUES[cfg.gated_mlp]
    f = f if mlp_activation else 0.0
    fwd = tokens * (2 * 2 * hw + act_f * f + 2 * 3 * hw)
    bwd = tokens * (2 * 3 * hw + act_b * f + 2 * 2 * hw)
    if cfg.positions == "rotary":
        fwd = fwd + tokens * 2 * qk
        bwd = bwd + tokens * 2 * qk
    if attention == "unfused":
        a = cfg.heads / tp if heads_local is None else heads_local
        scores = (tokens / seq) * a * seq * seq
        fwd = fwd + 4.5 * scores
        bwd = bwd + 5.5 * scores
    return fwd, bwd


_ACTIVATION_VALUES = {True: (3, 5), False: (2, 3)}   # per width: SwiGLU, GELU (forward, backward)


def moe_elementwise_values(job: "Job", lay: "Layouts"):
    """Values an MoE block's MLP half reads plus writes in memory-bound ops, per GPU and
    micro-batch, as ``(forward, backward)`` (chapter 27): the routed experts' activation over
    the rows this GPU's experts take (each token's k copies, times :func:`expert_load_factor`
    on the busiest rank), each ``moe_ffn / etp`` wide; the shared experts' activation over
    every token; and the token permutation around the dispatch, as Megatron-Core's token
    dispatcher runs it (``moe_utils.permute`` / ``unpermute``): forward, the gather of each
    token's k copies (read and write k·h) and the weighted sum back (read k·h, write h);
    backward, the reverse of each (read h, write k·h; read k·h, write h)."""
    cfg = job.cfg
    etp, routed, _ = _expert_layout(job, lay)
    gemms = {g["name"]: g for g in flops.block_gemms(cfg, cfg.dense_layers)}
    k, h = cfg.experts_per_token, cfg.hidden
    act_f, act_b = _ACTIVATION_VALUES[cfg.gated_mlp]
    rows = routed * k * expert_load_factor(job, lay)
    width = gemms["expert_up"]["out_features"] / etp
    fwd, bwd = rows * act_f * width, rows * act_b * width
    if "shared_up" in gemms:
        shared = gemms["shared_up"]["out_features"] * gemms["shared_up"]["count"] / lay.tp
        fwd, bwd = fwd + lay.tokens * act_f * shared, bwd + lay.tokens * act_b * shared
    return fwd + routed * (3 * k * h + h), bwd + routed * (2 * k * h + 2 * h)


def elementwise(job: Job, lay: Layouts) -> Seconds:
    """One layer's memory-bound ops (:func:`elementwise_values`) at the measured HBM
    bandwidth, an MoE block's MLP half from :func:`moe_elementwise_values` (the mean over the
    model's blocks); full and op-level recompute run the forward's again (the op-level policy
    saves no norm, activation or RoPE output), selective the unfused softmax."""
    s = job.seq / lay.cp
    fwd, bwd = elementwise_values(job.cfg, lay.tokens, s, lay.tp, lay.sp, job.attention)
    scores = 0.0
    if job.attention != "flash":   # the score-matrix ops (every block's): selective re-runs them
        scores = fwd - elementwise_values(job.cfg, lay.tokens, s, lay.tp, lay.sp, "flash")[0]
    if job.moe_layers:
        attn_f, attn_b = elementwise_values(job.cfg, lay.tokens, s, lay.tp, lay.sp, job.attention,
                                            mlp_activation=False)
        moe_f, moe_b = moe_elementwise_values(job, lay)
        share = job.moe_layers / job.cfg.layers
        fwd = (1 - share) * fwd + share * (attn_f + moe_f)
        bwd = (1 - share) * bwd + share * (attn_b + moe_b)
    again = np.where((lay.rc == 2) | (lay.rc == 3), fwd, np.where(lay.rc == 1, scores, 0.0))
    per_value = VALUE / job.hbm
    cast_f, cast_b = fp8_cast_bytes(job, lay) if job.dtype == "fp8" else (0.0, 0.0)
    cast_again = np.where((lay.rc == 2) | (lay.rc == 3), cast_f, 0.0)
    return Seconds(per_value * fwd + cast_f / job.hbm,
                   per_value * (bwd + again) + (cast_b + cast_again) / job.hbm)


# the GEMM inputs a block's norm writes straight in FP8 (Transformer Engine's LayerNorm linears:
# Megatron-Core's linear_qkv, linear_fc1, MLA's linear_q_up_proj and linear_kv_up_proj)
_NORM_FED = ("q", "k", "v", "gate", "up", "q_up", "kv_up")


# fused GEMMs (linear_qkv, a gated linear_fc1): one input, cast once, with its partner's
_SHARED_INPUT = {"k": "q", "v": "q", "up": "gate", "expert_up": "expert_gate",
                 "shared_up": "shared_gate"}


def fp8_cast_bytes(job: "Job", lay: "Layouts"):
    """Bytes one layer's FP8 casts move, per GPU and micro-batch, as ``(forward, backward)``
    (the mean over the model's blocks; chapter 27). Transformer Engine (``module/linear.py``,
    ``module/base.py``'s ``grad_output_preprocess``) casts each FP8 GEMM's input and writes
    it transposed too, for the weight gradient, in one kernel: read 2 bytes, write 1 + 1 per
    value; where a norm feeds the GEMM (``_NORM_FED``) the norm writes FP8 itself, a byte
    less than the BF16 it would write, and the transpose reads and writes one byte: 1 more.
    Backward casts and transposes each GEMM's output gradient the same way: 4 per value.
    Input and output widths per GPU follow the TP placement of
    :func:`~dtbook.plan.terms.compute._gemm_seconds`; the routed experts' rows are each
    token's k copies (times :func:`expert_load_factor`). The router stays BF16; the weights'
    casts, once per step, are left out."""
    cfg, tp = job.cfg, lay.tp
    etp, routed, _ = _expert_layout(job, lay)

    def block(index):
        fwd = bwd = 0.0
        gemms = flops.block_gemms(cfg, index)
        names = {g["name"] for g in gemms}
        for g in gemms:
            name = g["name"]
            if name in ("router", "shared_expert_gate"):
                continue
            expert = name.startswith("expert_")
            split = etp if expert else tp
            rows = (routed * cfg.experts_per_token * expert_load_factor(job, lay) if expert
                    else lay.tokens)
            # routed experts: rows summed over the experts; shared ones: one GEMM, count wide
            n, k = g["out_features"] * (1 if expert else g["count"]), g["in_features"]
            if name in _ROW_PARALLEL:
                k = k / split
            elif name not in _DUPLICATED:
                n = n / split
            if _SHARED_INPUT.get(name) not in names:      # its own input, not a partner's
                fwd = fwd + rows * k * (1 if name in _NORM_FED else 4)
            bwd = bwd + rows * n * 4
        return fwd, bwd

    fwd = bwd = 0.0
    for moe_ in _mlp_kinds(cfg):      # a dense and an MoE block, weighted by their counts
        blocks = job.moe_layers if moe_ else cfg.layers - job.moe_layers
        f, b = block(cfg.dense_layers if moe_ else 0)
        fwd, bwd = fwd + blocks * f / cfg.layers, bwd + blocks * b / cfg.layers
    return fwd, bwd


def grad_accum(job: Job, lay: Layouts, params):
    """Adding one micro-batch's 16-bit weight gradients into the accumulation buffer at the
    measured HBM bandwidth (read the gradient, read and write the buffer); nothing when the
    wgrad GEMMs accumulate themselves (``gradient_accumulation_fusion``)."""
    per_param = 0 if job.gradient_accumulation_fusion else VALUE + 2 * job.grad_bytes
    return params * per_param / job.hbm


def optimizer(job: Job, lay: Layouts, params):
    """The optimizer step at the measured HBM bandwidth: Adam's traffic per local parameter
    (:func:`dtbook.offload.optimizer_step_bytes` reading FP32 main gradients), the clipping
    norm's read of them, and zeroing every gradient on the GPU for the next step. The 16-bit
    copy is written by a kernel of its own that reads the FP32 master weight again (4 more
    bytes): Megatron's ``_copy_main_params_to_model_params`` (``_multi_tensor_copy_this_to_that``
    after the Adam step, megatron/optimizer/optimizer.py; the distributed optimizer's copies
    its shard into the buffer the same way). With FP16 gradients (``dtype="fp16"``, Megatron-LM
    2021) the step first casts them to FP32 main gradients (``.float()``: read 2, write 4) and
    unscales them with the overflow check (``_unscale_main_grads_and_check_for_nan``: read 4,
    write 4): 14 bytes more."""
    local = params / np.where(lay.zero >= 1, lay.replicas, 1)
    adam = offload.optimizer_step_bytes(grad_bytes=MAIN_GRAD) + MAIN_GRAD   # + the copy's read
    if job.grad_bytes < MAIN_GRAD:
        adam = adam + (job.grad_bytes + MAIN_GRAD) + 2 * MAIN_GRAD
    return ((adam + MAIN_GRAD) * local + MAIN_GRAD * params) / job.hbm
