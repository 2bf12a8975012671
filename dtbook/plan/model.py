"""The step-time and memory model of one training configuration (chapter 27; the 3D terms
are chapter 24's).

One optimizer step of ``global_batch`` sequences is ``m = global_batch / (dp * micro_batch)``
micro-batches through a pipeline of ``pp`` stages. For one micro-batch, one pipeline stage
(the busiest: ``ceil(layers / pp)`` layers, plus the logits on the last) spends:

* **compute**: every matmul at its per-GPU shape (after TP, ``micro_batch * seq / cp``
  tokens) timed by :func:`dtbook.plan.gemm.matmul_time`, backward twice forward (data and
  weight gradients). The causal attention core: with a fused (flash) kernel, half the
  ``s x s`` products at the kernel's own measured throughput
  (:func:`dtbook.hardware.attention_kernel`, FlashAttention-2's published forward and
  backward figures), backward 2.5 times the forward FLOPs (the kernel recomputes the scores);
  with ``attention="unfused"`` every product as two batched GEMMs (the score matrix is
  materialised and masked afterwards, as in Megatron-LM before FlashAttention, 2021-22);
* **dtype**: with ``dtype="fp8"`` the layers' linear GEMMs run at the measured FP8 ceiling
  (Transformer Engine's FP8 linears); the attention core and the logits stay BF16;
* **recompute**: ``"full"`` one more forward of the layers, ``"selective"`` one more forward
  of the attention core (Korthikanti et al. 2022);
* **elementwise**: norms, activations, residual adds, RoPE (and, with unfused attention, the
  softmax and dropout of the ``s x s`` scores) are memory-bound. Each op reads its inputs and
  writes its output in forward; in backward it reads its saved input and the output gradient
  and writes the input gradient (:func:`elementwise_values`). All of it at the *measured* HBM
  bandwidth, BabelStream's Triad (:func:`dtbook.hardware.memory_ceiling`: A100 1.70 TB/s of
  the datasheet's 2.039, H100 2.97 of 3.35), as the matmuls run at a measured ceiling;
* **TP**: 4 ring all-reduces of the ``tokens x hidden`` activation per layer (2 forward, 2
  backward; with sequence parallelism an all-gather and a reduce-scatter each, the same time),
  2 more with full recompute, on NVLink while the TP group fits in a node. *Not overlapped*:
  Megatron-LM runs them on the compute stream by default;
* **collective efficiency**: every collective runs at the link's rate times NCCL's protocol
  efficiency, the published nccl-tests bus bandwidth of a large ring over the line rate
  (:func:`protocol_efficiency`: 0.82 on the H100's NVLink, 0.77 on the A100's, 0.94 on
  InfiniBand). Where a link has a published bus bandwidth *by message size*
  (:func:`dtbook.hardware.busbw_curve`: the A100's NVSwitch), the TP all-reduce runs at the
  rate measured for its size instead (:func:`_in_node_allreduce`): a 100 MB all-reduce
  reaches about three quarters of what gigabyte buffers do;
* **CP**: a ring pass of K and V (``cp - 1`` steps forward, twice that backward), overlapped
  with the attention core it feeds; only the excess is exposed;
* **EP**: 4 all-to-alls of the routed tokens per MoE layer (dispatch and combine, forward and
  backward), exposed;
* **PP**: a send forward and one backward per micro-batch and model chunk, exposed (Megatron's
  1F1B blocks on ``send_forward_recv_backward`` and ``send_backward_recv_forward`` between
  steady-state steps). Across nodes each TP rank sends ``1/tp`` of the activation over its own
  NIC (the scatter/gather of Narayanan et al. 2021, Sec. 4.1; sequence parallelism splits it
  already) and, without SP, the receivers all-gather it over NVLink. DeepSpeed's pipeline
  engine (``pipeline_engine="deepspeed"``) splits the activation the same way
  (``PartitionedTensor`` over the tensor-parallel group) but issues its four transfers per
  micro-batch (receive activation, send gradient, send activation, receive gradient) as
  blocking calls one after another (``TrainSchedule``, deepspeed/runtime/pipe/schedule.py):
  four transfer times where Megatron's paired calls take two.

The pipeline runs ``m`` micro-batches in ``(m + (pp - 1) / vpp)`` micro-batch times: the
(interleaved) 1F1B bubble ``(pp - 1) / (vpp m + pp - 1)`` of :mod:`dtbook.pipeline_parallel`.
After it:

* **DP**: the gradients of the stage's parameters are reduced over the ``dp * cp`` replicas
  (an all-reduce, or with ZeRO >= 1 a reduce-scatter and later an all-gather of the updated
  parameters), on the scale-out network. Gradients travel in FP32 unless ``dtype="fp16"``
  (Megatron-LM accumulates and reduces BF16 gradients in FP32; Llama 3 reduce-scatters in
  FP32, Dubey et al. 2024 Sec. 3.3.2); parameters in BF16. Overlap rule: the reduction runs during the backward of
  the last micro-batch, bucket by bucket, so what is exposed is the larger of (DP time minus
  that backward) and the last bucket (one layer's share). With ``overlap_grad_reduce=False``
  all of it is exposed: Megatron-LM before its 2023 DistributedDataParallel reduced the
  gradients after the whole pipeline (``optimizer.reduce_model_grads``, "All-reduce all
  grads", called from ``train_step`` after the forward-backward pass), and DeepSpeed's
  pipeline engine runs ``ReduceGrads`` after the last micro-batch;
* **gradient accumulation**: every micro-batch's weight gradients are added into the
  accumulation buffer (in the reduction's precision: FP32, or FP16 with ``dtype="fp16"``).
  Without fusion that is an elementwise op per parameter per micro-batch: the wgrad GEMM
  writes ``param.grad`` in 16 bits and a hook adds it, ``param.main_grad.add_(param.grad.data)``
  (Megatron-LM's ``DistributedDataParallel._make_param_hook`` since "Bfloat with fp32 grad
  acc", commit b4bc51b, March 2021; BigScience's Megatron-DeepSpeed keeps it): read 2 bytes,
  read and write the accumulator (4 + 4, or 2 + 2 in FP16), for the stage's parameters on the
  GPU, at the measured HBM bandwidth. With ``gradient_accumulation_fusion=True`` (the default) the
  wgrad GEMM accumulates into the FP32 buffer itself (beta = 1): Megatron-LM's
  ``--gradient-accumulation-fusion``, merged on 2022-02-22 (commit 9c5a830, "gradient
  accumulation fusion", on unless ``--no-gradient-accumulation-fusion``; APEX's
  ``fused_weight_gradient_mlp_cuda`` from September 2022, Transformer Engine's linears in
  Megatron-Core). Then it costs only the GEMM's read and write of C, which a compute-bound
  wgrad GEMM hides: nothing is added;
* **ZeRO-3**: the parameters are all-gathered before each micro-batch's forward and
  backward, prefetched under compute: only the excess over a micro-batch's compute is exposed;
* **optimizer**: memory-bound, at the measured HBM bandwidth: Adam reads and writes its FP32 state
  (30 bytes per local parameter), the gradient norm for clipping reads the FP32 gradients
  (4 more), and the FP32 gradient buffer of every parameter on the GPU is zeroed for the next
  step (4 per parameter). Scaling the gradients when the norm exceeds the threshold is left out
  (it happens only on steps that clip).

Memory per GPU: model state from :func:`dtbook.memory.zero_state_bytes` (2 + 2 + 4 + 8 bytes
per parameter, sharded by ZeRO over ``dp * cp``), activations per layer from
:func:`dtbook.activations.activation_breakdown` (flash attention, no dropout) times the
micro-batches in flight of :func:`dtbook.memory.activations_in_flight`, and the FP32 logits on
the last stage; the larger of the first and last stage. An estimate ``fits`` when that is at
most the accelerator's HBM.

Assumptions stated once: BF16 values on the wire, FP32 master weights and Adam moments, every
collective a ring (:mod:`dtbook.comm`, ``links="switched"``), TP innermost then CP, EP, PP,
DP across nodes, one NIC per GPU (or, with ``node=``, the named node's links, its NICs
shared by its GPUs when it has fewer: :func:`links_for`). No constant is fitted to any
published run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from .. import _validate as check
from .. import activations as act
from .. import comm, flops, hardware, memory, models
from .gemm import _matmul_time, matmul_time  # noqa: F401 (matmul_time: the public name)

__all__ = ["Estimate", "estimate", "layer_time", "evaluate", "in_flight", "RECOMPUTE", "ATTENTION",
           "PIPELINE_ENGINES", "resolve_model",
           "links_for", "protocol_efficiency", "elementwise_values"]

RECOMPUTE = ("none", "selective", "full")
COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
           "sequence_parallel")
_SCALE_OUT = {"a100-80gb": ("nvlink3", "ib-hdr200"), "h100-sxm": ("nvlink4", "ib-ndr400"),
              "h200": ("nvlink4", "ib-ndr400"), "b200": ("nvlink5", "ib-ndr400")}
_VALUE = 2          # BF16 activations, gradients and parameters on the wire
_ADAM_BYTES = 30    # per local parameter: read+write FP32 master, m, v; read grad; write param
_NORM_BYTES = 4     # per local parameter: the gradient norm for clipping reads the FP32 grads
_ZERO_GRAD_BYTES = 4  # per parameter on the GPU: the FP32 gradient buffer is zeroed every step


def _grad_bytes(dtype):
    """Bytes per gradient value in the data-parallel reduction (module notes)."""
    return 2 if dtype == "fp16" else 4


def resolve_model(model) -> models.TransformerConfig:
    """A catalog name or a :class:`dtbook.models.TransformerConfig` (chapter 27)."""
    if isinstance(model, models.TransformerConfig):
        return model
    if isinstance(model, str):
        return models.get(model)
    raise ValueError(f"model must be a catalog name or a TransformerConfig, got {model!r}")


def links_for(gpu: str, node=None):
    """(scale-up link, scale-out link) of the node that holds ``gpu`` (chapter 27): the
    first node of :mod:`dtbook.hardware` with that accelerator, or the node named ``node``
    (its accelerator must be ``gpu``). A node with fewer NICs than GPUs shares them: every
    GPU sends off-node at once (data-parallel reductions, pipeline sends), so each gets
    ``nics / gpus`` of a port (Jean Zay: 4 Omni-Path ports for 8 GPUs)."""
    hardware.get(gpu)
    if node is not None:
        nd = hardware.node(node)
        if nd.accelerator != gpu:
            raise ValueError(f"node {nd.name!r} holds {nd.accelerator}, not gpu {gpu!r}")
        out = hardware.get(nd.scale_out)
        if nd.nics < nd.gpus:
            out = dataclasses.replace(out, beta=out.beta * nd.nics / nd.gpus)
        return hardware.get(nd.scale_up), out
    for name in hardware.nodes():
        nd = hardware.node(name)
        if nd.accelerator == gpu:
            return hardware.get(nd.scale_up), hardware.get(nd.scale_out)
    if gpu not in _SCALE_OUT:
        raise ValueError(f"gpu {gpu!r} has no node links in dtbook.hardware")
    up, out = _SCALE_OUT[gpu]
    return hardware.get(up), hardware.get(out)


ATTENTION = ("flash", "unfused")
PIPELINE_ENGINES = ("megatron", "deepspeed")


def protocol_efficiency(link) -> float:
    """Fraction of a link's line rate a large NCCL ring collective reaches (chapter 27):
    :func:`dtbook.hardware.published_busbw` ring rows (bus bandwidth over the line rate),
    measured on NVLink4 (H100), NVLink3 (A100) and InfiniBand NDR; a link with none takes the
    first catalogued row of its kind (``nvlink*``: the H100's; ``ib-*``: NDR's), the overhead
    being NCCL's protocol more than the generation; 1 for others."""
    name = link.name if hasattr(link, "name") else str(link)
    kind = "nvlink" if name.startswith("nvlink") else "ib-" if name.startswith("ib-") else None
    rows = [b for b in hardware.published_busbw() if b.algorithm == "ring"]
    same = [b for b in rows if b.link == name] or [b for b in rows if kind and b.link.startswith(kind)]
    if not same:
        return 1.0
    b = same[0]
    return 0.5 * (b.busbw_low + b.busbw_high) / hardware.get(b.link).beta


def _effective(link):
    """(alpha, beta) of ``link`` with NCCL's protocol efficiency applied to beta."""
    return link.alpha, link.beta * protocol_efficiency(link)


def _in_node_allreduce(n, p, link, alpha, beta):
    """Ring all-reduce of ``n`` bytes over ``p`` GPUs of one node. Where the link has a
    published bus bandwidth curve (:func:`dtbook.hardware.busbw_curve`), at the bus bandwidth
    measured for that message size: ``2 (p - 1)/p n / busbw``, the curve (measured on its own
    ``ranks`` GPUs) read at the same per-step block, ``n/p`` bytes. Elsewhere the alpha-beta
    ring with NCCL's protocol efficiency (``alpha``, ``beta``)."""
    curve = hardware.busbw_curve(link)
    if curve is None:
        return comm.allreduce_time(n, p, alpha, beta)
    p = np.asarray(p, dtype=float)
    return 2 * (p - 1) / p * n / curve.at(n * curve.ranks / p)


def elementwise_values(cfg, tokens, seq, tp, sp, attention="flash", heads_local=None):
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
    on chip: nothing here. Arrays broadcast."""
    tp, sp = np.asarray(tp, dtype=float), np.asarray(sp, dtype=float)
    h, f = cfg.hidden, cfg.ffn_hidden / tp
    hw = h / np.where(sp == 1, tp, 1.0)        # h-wide ops: split only by SP
    qk = (cfg.heads + cfg.kv_heads) * cfg.head_dim / np.minimum(tp, cfg.heads)
    gated = cfg.mlp == "swiglu"
    fwd = tokens * (2 * 2 * hw + (3 if gated else 2) * f + 2 * 3 * hw)
    bwd = tokens * (2 * 3 * hw + (5 if gated else 3) * f + 2 * 2 * hw)
    if cfg.positions == "rotary":
        fwd = fwd + tokens * 2 * qk
        bwd = bwd + tokens * 2 * qk
    if attention == "unfused":
        a = cfg.heads / tp if heads_local is None else heads_local
        scores = (tokens / seq) * a * seq * seq
        fwd = fwd + 4.5 * scores
        bwd = bwd + 5.5 * scores
    return fwd, bwd


def in_flight(pp, m, vpp, stage):
    """Model chunks whose activations pipeline rank ``stage`` holds at its peak (chapter 27):
    1F1B ``min(pp - stage, m)``; interleaved 1F1B (Megatron's warm-up of ``2 (pp - stage - 1)
    + (vpp - 1) pp`` chunks, plus the one in flight) ``min(vpp m, 2 (pp - stage - 1) + (vpp -
    1) pp + 1)``. Arrays broadcast. The tests check it against
    :func:`dtbook.memory.activations_in_flight`, which runs :func:`dtbook.schedules.simulate`.
    ``pp``, ``m``, ``vpp`` are whole numbers >= 1 and ``stage`` one in [0, pp)
    (``ValueError`` naming the one that is not); :func:`evaluate` calls the unchecked
    ``_in_flight`` on its candidate arrays."""
    for name, value in (("pp", pp), ("m", m), ("vpp", vpp)):
        check.count(name, value)
    check.count("stage", stage, minimum=0)
    if np.any(np.asarray(stage, dtype=float) >= np.asarray(pp, dtype=float)):
        raise ValueError(f"stage must be below pp = {pp!r}, got {stage!r}")
    return _in_flight(pp, m, vpp, stage)


def _in_flight(pp, m, vpp, stage):
    """:func:`in_flight` without the argument checks (the planner's candidate arrays)."""
    pp, m, vpp, stage = (np.asarray(x, dtype=float) for x in (pp, m, vpp, stage))
    plain = np.minimum(pp - stage, m)
    inter = np.minimum(vpp * m, 2 * (pp - stage - 1) + (vpp - 1) * pp + 1)
    return np.where(pp == 1, 1.0, np.where(vpp > 1, inter, plain))


def _stage_layers(layers, pp):
    """Layers on the busiest stage and on the last stage. Even split, or Llama 3's: the first
    and last stage hold one layer fewer (layers + 2 divisible by pp)."""
    busiest = np.ceil(layers / pp)
    even = (layers % pp) == 0
    last = np.where(even | (pp == 1), busiest, busiest - 1)
    return busiest, last


def evaluate(cfg, *, gpus, gpu, seq, global_batch, dtype, gpus_per_node, cols, attention="flash",
             overlap_grad_reduce=True, gradient_accumulation_fusion=True,
             pipeline_engine="megatron", node=None):
    """The model of the module notes over NumPy arrays of configurations: ``cols`` maps each
    of ``COLUMNS`` to an array (recompute as 0/1/2, sequence_parallel as 0/1). Returns a dict
    of arrays: the breakdown terms (seconds, bytes), ``step_time``, ``memory_per_gpu``,
    ``model_flops``. ``attention``: ``"flash"`` or ``"unfused"``; ``overlap_grad_reduce``:
    whether the DP reduction overlaps the last backward; ``gradient_accumulation_fusion``:
    whether the wgrad GEMMs accumulate into the FP32 buffer themselves; ``pipeline_engine``:
    ``"megatron"`` or ``"deepspeed"`` (how many pipeline transfers a micro-batch exposes);
    ``node``: a :mod:`dtbook.hardware` node whose links to use (module notes). Inputs are assumed valid (see :func:`dtbook.plan.search.configurations`
    and :func:`estimate`). (Chapter 27.)"""
    tp, pp, dp, cp, ep, vpp, mb, zero, rc, sp = (np.asarray(cols[c], dtype=float) for c in COLUMNS)
    acc = hardware.get(gpu)
    hbm = hardware.memory_ceiling(gpu).triad     # what streaming kernels reach (module notes)
    up, out = links_for(gpu, node)
    up_a, up_b = _effective(up)
    out_a, out_b = _effective(out)
    h, L, heads, kv, hd = cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim
    gated = cfg.mlp == "swiglu"
    mult = 2 if gated else 1
    m = global_batch / (dp * mb)                # micro-batches per step
    T = mb * seq / cp                           # tokens per micro-batch on one GPU
    mm = functools.partial(_matmul_time, gpu=gpu)
    # the transformer layers' linear GEMMs run in ``dtype`` (FP8 with Transformer Engine); the
    # attention core and the logits stay BF16 (Megatron's output layer is not a TE module)
    mm_lin = functools.partial(_matmul_time, gpu=gpu, dtype=dtype)

    # ---- forward compute of one layer, per micro-batch, on one GPU
    t_qkv = mm_lin(T, (heads + 2 * kv) * hd / tp, h)
    t_out = mm_lin(T, h, heads * hd / tp)
    # causal attention core (QK^T, softmax, AV) over s/cp queries and s keys. Unfused: two
    # batched GEMMs that compute every score (the mask is applied afterwards), backward two
    # GEMMs per forward one. Flash: a fused kernel that skips the masked half, timed at its
    # authors' measured throughput (hardware.attention_kernel), backward 2.5 x the forward
    # FLOPs (it recomputes the scores: 5 matmuls against 2)
    heads_gpu = mb * heads / tp
    if attention == "flash":
        kern = hardware.attention_kernel(gpu)
        f_core = 0.5 * 2 * 2 * (seq / cp) * seq * hd * heads_gpu     # causal: half the products
        t_core = f_core / kern.forward
        t_core_bwd = 2.5 * f_core / kern.backward
    else:
        t_core = mm(seq / cp, seq, hd, count=heads_gpu) + mm(seq / cp, hd, seq, count=heads_gpu)
        t_core_bwd = 2 * t_core
    t_dense_mlp = mm_lin(T, mult * cfg.ffn_hidden / tp, h) + mm_lin(T, h, cfg.ffn_hidden / tp)
    if cfg.is_moe:
        eff, k, E = cfg.moe_ffn_hidden, cfg.experts_per_token, cfg.experts
        te = T * k * ep / E                      # tokens per local expert
        t_moe_mlp = (mm_lin(te, mult * eff / tp, h, count=E / ep) + mm_lin(te, h, eff / tp, count=E / ep)
                     + mm(T, E, h))
        if cfg.shared_experts:
            t_moe_mlp = t_moe_mlp + mm_lin(T, mult * eff * cfg.shared_experts / tp, h) + mm_lin(
                T, h, eff * cfg.shared_experts / tp)
        n_moe = L - cfg.dense_layers
    else:
        t_moe_mlp, n_moe = 0.0, 0
    t_mlp = ((L - n_moe) * t_dense_mlp + n_moe * t_moe_mlp) / L   # mean over the layers
    t_linear = t_qkv + t_out + t_mlp
    t_layer_fwd = t_linear + t_core
    t_layer_bwd = 2 * t_linear + t_core_bwd     # data and weight gradients: 2 GEMMs per GEMM
    t_logits_fwd = mm(T, cfg.vocab / tp, h)

    busiest, last = _stage_layers(L, pp)
    # the slower of the busiest stage and the last one (which also runs the logits)
    busy_total = busiest * (t_layer_fwd + t_layer_bwd)
    last_total = last * (t_layer_fwd + t_layer_bwd) + 3 * t_logits_fwd
    on_busiest = busy_total >= last_total
    compute = np.maximum(busy_total, last_total)
    stage_layers = np.where(on_busiest, busiest, last)
    stage_bwd = np.where(on_busiest, busiest * t_layer_bwd, last * t_layer_bwd + 2 * t_logits_fwd)
    recompute = np.where(rc == 2, stage_layers * t_layer_fwd, np.where(rc == 1, stage_layers * t_core, 0.0))

    # ---- activation bytes kept per layer (memory), by SP and selective recompute
    eager = attention == "unfused"
    layer_act = {}
    for flag in (0, 1):
        for r in (0, 1):
            terms = act.activation_breakdown(mb, seq / cp, h, heads, cfg.ffn_hidden, dropout=eager,
                                             attention="eager" if eager else "flash", tp=tp,
                                             sequence_parallel=bool(flag),
                                             recompute="selective" if r else "none")
            layer_act[flag, r] = sum(terms.values())
    act_layer = np.where(sp == 1, layer_act[1, 0], layer_act[0, 0])

    # ---- memory-bound elementwise work: every op's reads and writes, forward and backward
    ew_fwd, ew_bwd = elementwise_values(cfg, T, seq / cp, tp, sp, attention)
    # full recompute runs the forward ops again; selective re-runs the (unfused) softmax
    ew_fwd_unfused = elementwise_values(cfg, T, seq / cp, tp, sp, attention)[0] - elementwise_values(
        cfg, T, seq / cp, tp, sp, "flash")[0]
    ew_re = np.where(rc == 2, ew_fwd, np.where(rc == 1, ew_fwd_unfused, 0.0))
    elementwise = stage_layers * _VALUE * (ew_fwd + ew_bwd + ew_re) / hbm

    # ---- tensor parallel: 4 (6 with full recompute) ring all-reduces of T x h per layer
    tp_link_in = tp <= gpus_per_node
    n_tp = T * h * _VALUE
    t_ar = np.where(tp_link_in, _in_node_allreduce(n_tp, tp, up, up_a, up_b),
                    comm.allreduce_time(n_tp, tp, out_a, out_b))
    tp_comm = np.where(tp > 1, stage_layers * np.where(rc == 2, 6, 4) * t_ar, 0.0)

    # ---- context parallel: ring K/V, overlapped with the attention core
    kv_bytes = 2 * T * kv * hd / np.minimum(tp, kv) * _VALUE
    cp_in = tp * cp <= gpus_per_node
    step = np.where(cp_in, up_a + kv_bytes / up_b, out_a + kv_bytes / out_b)
    t_cp_layer = 3 * (cp - 1) * step               # forward once, backward twice
    cp_comm = stage_layers * np.maximum(0.0, t_cp_layer - (t_core + t_core_bwd))

    # ---- expert parallel: 4 all-to-alls of the routed tokens per MoE layer
    if cfg.is_moe:
        n_a2a = T * cfg.experts_per_token * h * _VALUE
        ep_in = tp * ep <= gpus_per_node
        t_a2a = np.where(ep_in, comm.alltoall_time(n_a2a, np.maximum(ep, 2), up_a, up_b),
                         comm.alltoall_time(n_a2a, np.maximum(ep, 2), out_a, out_b))
        ep_comm = np.where(ep > 1, stage_layers * n_moe / L * 4 * t_a2a, 0.0)
    else:
        ep_comm = np.zeros_like(tp)

    # ---- pipeline sends: forward and backward per micro-batch and model chunk
    # Across nodes without SP, Megatron's scatter/gather (Narayanan et al. 2021, Sec. 4.1):
    # each TP rank sends 1/tp of the activation over its own NIC, the receivers all-gather it
    # over NVLink. With SP the activation is already split by tp.
    n_act = T * h * _VALUE
    n_p2p = n_act / np.where(sp == 1, tp, 1)
    pp_in = tp * cp * ep * pp <= gpus_per_node
    gather = np.where((sp == 0) & (tp > 1),
                      comm.allgather_time(n_act, np.maximum(tp, 2), up_a, up_b), 0.0)
    t_p2p = np.where(pp_in, up_a + n_p2p / up_b, out_a + n_act / tp / out_b + gather)
    # Megatron pairs each send with the opposite receive (send_forward_recv_backward): 2
    # transfer times per micro-batch; DeepSpeed's TrainSchedule issues RecvActivation,
    # SendGrad, SendActivation, RecvGrad as four blocking p2p calls, one after another: 4
    sends = 4 if pipeline_engine == "deepspeed" else 2
    pp_comm = np.where(pp > 1, sends * vpp * t_p2p, 0.0)

    # ---- parameters on one GPU (embedding and head on the end stages: counted in the mean)
    total = cfg.num_params()
    expert = 0
    if cfg.is_moe:
        expert = n_moe * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
    psi_gpu = (total - expert) / (tp * pp) + expert / (tp * pp * ep)
    replicas = dp * cp

    # ---- gradient accumulation, per micro-batch: unfused, main_grad.add_(grad) reads the
    # 16-bit gradient and reads and writes the accumulator; fused, the wgrad GEMM does it
    accum_bytes = 0 if gradient_accumulation_fusion else _VALUE + 2 * _grad_bytes(dtype)
    grad_accum = psi_gpu * accum_bytes / hbm

    per_mb = (compute + recompute + elementwise + grad_accum + tp_comm + cp_comm + ep_comm
              + pp_comm)
    pipeline = (m + (pp - 1) / vpp) * per_mb
    bubble = (pp - 1) / vpp * per_mb

    # ---- data parallel gradient reduction, overlapped with the last micro-batch's backward
    # Megatron-LM reduces BF16 (and FP8-trained, BF16-parameter) gradients in FP32 ("bfloat16
    # requires gradient accumulation and all-reduce to be done in fp32", arguments.py; Llama 3
    # reduce-scatters in FP32 too, Sec. 3.3.2); FP16 gradients travel in FP16. ZeRO >= 1: a
    # reduce-scatter of the gradients, then an all-gather of the updated BF16 parameters
    n_dp = psi_gpu * _VALUE
    n_grad = psi_gpu * _grad_bytes(dtype)
    reps = np.maximum(replicas, 2)
    t_dp = np.where(replicas > 1, np.where(
        zero >= 1, comm.reduce_scatter_time(n_grad, reps, out_a, out_b) + comm.allgather_time(n_dp, reps, out_a, out_b),
        comm.allreduce_time(n_grad, reps, out_a, out_b)), 0.0)
    backward_last = stage_bwd + recompute
    overlapped = np.maximum(t_dp - backward_last, t_dp / stage_layers)
    dp_exposed = np.where(replicas > 1, overlapped if overlap_grad_reduce else t_dp, 0.0)

    # ---- ZeRO-3: parameter all-gathers before each forward and backward, prefetched
    t_ag = np.where(replicas > 1, comm.allgather_time(n_dp, np.maximum(replicas, 2), out_a, out_b), 0.0)
    zero3 = np.where(zero == 3, m * np.maximum(0.0, 2 * t_ag - (compute + recompute)), 0.0)

    local = psi_gpu / np.where(zero >= 1, replicas, 1)
    optimizer = ((_ADAM_BYTES + _NORM_BYTES) * local + _ZERO_GRAD_BYTES * psi_gpu) / hbm
    step_time = pipeline + dp_exposed + zero3 + optimizer

    # ---- memory per GPU: the first stage (most in flight) and the last (logits)
    state = np.zeros(np.broadcast(psi_gpu, replicas, zero).shape)
    for stage in (0, 1, 2, 3):
        state = np.where(zero == stage, memory.zero_state_bytes(psi_gpu, replicas, stage), state)
    act_kept = np.where(rc == 1, np.where(sp == 1, layer_act[1, 1], layer_act[0, 1]), act_layer)
    layer_input = T * h * _VALUE / np.where(sp == 1, tp, 1)
    chunk = busiest / vpp
    first = _in_flight(pp, m, vpp, 0)
    lastf = _in_flight(pp, m, vpp, pp - 1)

    def stage_acts(in_flight, layers_per_chunk):
        kept = np.where(rc == 2, in_flight * layers_per_chunk * layer_input + act_layer,
                        in_flight * layers_per_chunk * act_kept)
        return kept

    logits = 4 * T * cfg.vocab / tp
    mem_first = state + stage_acts(first, chunk) + np.where(pp == 1, logits, 0.0)
    mem_last = state + stage_acts(lastf, np.where(pp == 1, chunk, last / vpp)) + logits
    mem = np.maximum(mem_first, mem_last)

    # ---- model FLOPs of the step: matmuls with causal attention, no recompute
    f = flops.transformer_matmul_flops(cfg, global_batch, seq)
    model_flops = 3 * (f["linear_forward"] + f["attention_forward"] / 2)

    # ---- one layer, one micro-batch, as a source measures it (layer_time): forward, and
    # backward with the recomputation it triggers; TP, CP and EP communication included
    hbm_layer = _VALUE / hbm
    re_layer = np.where(rc == 2, t_layer_fwd, np.where(rc == 1, t_core, 0.0))
    n_ar_bwd = np.where(rc == 2, 4, 2)
    cp_layer = np.maximum(0.0, t_cp_layer - (t_core + t_core_bwd))
    ep_layer = ep_comm / np.maximum(stage_layers, 1)
    layer_forward = (t_layer_fwd + hbm_layer * ew_fwd + np.where(tp > 1, 2 * t_ar, 0.0)
                     + cp_layer / 3 + ep_layer / 2)
    layer_backward = (t_layer_bwd + re_layer + hbm_layer * (ew_bwd + ew_re)
                      + np.where(tp > 1, n_ar_bwd * t_ar, 0.0) + 2 * cp_layer / 3 + ep_layer / 2)

    return dict(compute=m * compute, recompute=m * recompute, elementwise=m * elementwise,
                grad_accum=m * grad_accum,
                tp_comm=m * tp_comm, cp_comm=m * cp_comm, ep_comm=m * ep_comm,
                pp_comm=m * pp_comm, bubble=bubble, dp_comm=dp_exposed, zero3_comm=zero3,
                optimizer=optimizer, step_time=step_time, memory_per_gpu=mem,
                memory_state=state, memory_activations=mem - state,
                model_flops=np.broadcast_to(model_flops, np.shape(step_time)),
                layer_forward=layer_forward, layer_backward=layer_backward)


@dataclass(frozen=True)
class Estimate:
    """The planner's estimate of one configuration (chapter 27).

    ``step_time`` (s), ``tokens_per_second`` (whole job), ``tflops_per_gpu`` (model FLOP/s
    per GPU in TFLOP/s: causal attention counted, recompute not), ``mfu`` (against the dense
    peak of ``dtype``), ``memory_per_gpu`` (bytes), ``fits``, ``breakdown`` (seconds per step
    of each term, and the memory parts in bytes) and ``config`` (the arguments of
    :func:`estimate`)."""

    step_time: float
    tokens_per_second: float
    tflops_per_gpu: float
    mfu: float
    memory_per_gpu: float
    fits: bool
    breakdown: dict = field(repr=False)
    config: dict


def _whole(**values):
    """``ValueError`` naming the first of ``values`` that is not a whole number >= 1."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _check(cfg, gpus, gpu, tp, pp, dp, cp, ep, vpp, micro_batch, global_batch, seq, zero,
           recompute, dtype, gpus_per_node):
    _whole(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch,
           global_batch=global_batch, seq=seq, gpus_per_node=gpus_per_node)
    if tp * pp * dp * cp != gpus:
        raise ValueError(f"gpus: tp*pp*dp*cp = {tp * pp * dp * cp} must equal gpus = {gpus}")
    if (dp * cp) % ep:
        raise ValueError(f"ep ({ep}) must divide dp*cp ({dp * cp}): experts are spread over replicas")
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    acc = hardware.get(gpu)
    if not isinstance(acc, hardware.Accelerator):
        raise ValueError(f"gpu must name an accelerator, got {gpu!r}")
    acc.peak(dtype)
    if cfg.layers % (pp * vpp) and (cfg.layers + 2) % (pp * vpp):
        raise ValueError(f"pp: layers ({cfg.layers}) must split evenly over pp*vpp = {pp * vpp} "
                         "model chunks (or evenly once the first and last stage hold one fewer)")
    if cfg.heads % tp or cfg.kv_heads % tp and tp % cfg.kv_heads:
        raise ValueError(f"tp ({tp}) must divide the heads ({cfg.heads}) and the kv heads "
                         f"({cfg.kv_heads}) or be a multiple of them")
    if global_batch % (dp * micro_batch):
        raise ValueError(f"global_batch ({global_batch}) must be a multiple of dp*micro_batch "
                         f"= {dp * micro_batch}")
    if vpp > 1 and pp == 1:
        raise ValueError("vpp: virtual stages need a pipeline (pp > 1)")
    if vpp > 1 and (global_batch // (dp * micro_batch)) % pp:
        raise ValueError("vpp: the interleaved schedule needs the micro-batch count to be a "
                         f"multiple of pp ({pp})")
    if cp > 1 and seq % (2 * cp):
        raise ValueError(f"seq ({seq}) must split into 2*cp = {2 * cp} chunks")
    if cfg.is_moe and cfg.experts % ep:
        raise ValueError(f"ep ({ep}) must divide the experts ({cfg.experts})")
    if not cfg.is_moe and ep != 1:
        raise ValueError(f"ep must be 1 for a dense model, got {ep}")


def _check_engine(pipeline_engine, vpp):
    if pipeline_engine not in PIPELINE_ENGINES:
        raise ValueError(f"pipeline_engine must be one of {PIPELINE_ENGINES}, got {pipeline_engine!r}")
    if pipeline_engine == "deepspeed" and vpp != 1:
        raise ValueError(f"vpp: DeepSpeed's pipeline engine has no interleaved schedule, got vpp = {vpp}")


def estimate(model, *, gpus, gpu="h100-sxm", tp, pp, dp, cp=1, ep=1, vpp=1, micro_batch=1,
             global_batch, seq, zero=1, recompute="none", sequence_parallel=True,
             dtype="bf16", gpus_per_node=8, attention="flash", overlap_grad_reduce=True,
             gradient_accumulation_fusion=True, pipeline_engine="megatron",
             node: str | None = None) -> Estimate:
    """Step time, throughput and memory of one configuration (chapter 27; see the module
    notes for the model). ``model``: a :mod:`dtbook.models` name or a ``TransformerConfig``;
    ``gpu``: an accelerator of :mod:`dtbook.hardware`; ``ep`` splits the experts over the
    data-parallel (and context-parallel) replicas. Bad arguments raise ``ValueError`` naming
    the argument. ``attention``: ``"flash"`` (default: a fused kernel that skips the masked
    half and keeps no score matrix) or ``"unfused"`` (the score matrix materialised, soft-maxed
    and dropped out in HBM, Megatron-LM before FlashAttention). ``overlap_grad_reduce``:
    ``True`` (default) overlaps the data-parallel gradient reduction with the last backward,
    ``False`` runs it after the pipeline (Megatron-LM and DeepSpeed's pipeline engine before
    2023; module notes). ``gradient_accumulation_fusion``: ``True`` (default) has the weight-
    gradient GEMMs accumulate into the FP32 buffer (Megatron-LM from February 2022, Megatron-
    Core with Transformer Engine); ``False`` adds each micro-batch's gradients in a separate
    memory-bound op (Megatron-LM 2021, Megatron-DeepSpeed; the ``grad_accum`` term).
    ``pipeline_engine``: ``"megatron"`` (default) or ``"deepspeed"`` (DeepSpeed's pipeline
    engine: four blocking transfers per micro-batch instead of two, no interleaving, so
    ``vpp`` must be 1). ``node``: a :mod:`dtbook.hardware` node name whose links the
    estimate uses (default: the first node holding ``gpu``; ``"jean-zay-a100"`` for BLOOM's
    cluster)."""
    cfg = resolve_model(model)
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    _check_engine(pipeline_engine, vpp)
    if isinstance(gpu, str):
        gpu = gpu.strip().lower()
    _check(cfg, gpus, gpu, tp, pp, dp, cp, ep, vpp, micro_batch, global_batch, seq, zero,
           recompute, dtype, gpus_per_node)
    if node is not None:
        links_for(gpu, node)     # ValueError for an unknown node or one without this gpu
    cols = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch, zero=zero,
                recompute=RECOMPUTE.index(recompute), sequence_parallel=int(bool(sequence_parallel)))
    out = evaluate(cfg, gpus=gpus, gpu=gpu, seq=seq, global_batch=global_batch, dtype=dtype,
                   gpus_per_node=gpus_per_node, cols={k: np.array([v]) for k, v in cols.items()},
                   attention=attention, overlap_grad_reduce=bool(overlap_grad_reduce),
                   gradient_accumulation_fusion=bool(gradient_accumulation_fusion),
                   pipeline_engine=pipeline_engine, node=node)
    val = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}
    acc = hardware.get(gpu)
    step = val["step_time"]
    tflops = val["model_flops"] / step / gpus
    config = dict(model=cfg.name, gpus=gpus, gpu=gpu, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp,
                  micro_batch=micro_batch, global_batch=global_batch, seq=seq, zero=zero,
                  recompute=recompute, sequence_parallel=bool(sequence_parallel), dtype=dtype,
                  gpus_per_node=gpus_per_node, attention=attention,
                  overlap_grad_reduce=bool(overlap_grad_reduce),
                  gradient_accumulation_fusion=bool(gradient_accumulation_fusion))
    if pipeline_engine != "megatron":   # the defaults stay out of the dicts readers use
        config["pipeline_engine"] = pipeline_engine
    if node is not None:
        config["node"] = hardware.node(node).name
    breakdown = {k: val[k] for k in ("compute", "recompute", "elementwise", "grad_accum",
                                     "tp_comm", "cp_comm",
                                     "ep_comm", "pp_comm", "bubble", "dp_comm", "zero3_comm",
                                     "optimizer", "memory_state", "memory_activations")}
    return Estimate(step_time=step, tokens_per_second=global_batch * seq / step,
                    tflops_per_gpu=tflops / 1e12, mfu=tflops / acc.peak(dtype),
                    memory_per_gpu=val["memory_per_gpu"],
                    fits=bool(val["memory_per_gpu"] <= acc.hbm_bytes),
                    breakdown=breakdown, config=config)


def layer_time(model, *, gpu="h100-sxm", tp=1, cp=1, ep=1, micro_batch=1, seq,
               recompute="none", sequence_parallel=True, dtype="bf16", gpus_per_node=8,
               attention="flash") -> dict:
    """Seconds of one transformer layer for one micro-batch on one GPU, as the planner models
    it (chapter 27): ``{"forward": ..., "backward": ...}``, the backward including what
    ``recompute`` re-runs, each with the layer's tensor-parallel (and CP, EP) communication.
    This is what a source's per-layer measurement holds, with no pipeline, data parallelism,
    logits or optimizer around it: :func:`dtbook.plan.validate.validate_layers` sets it
    beside Korthikanti et al.'s Table 4. The terms are :func:`evaluate`'s own (module notes).
    Bad arguments raise ``ValueError`` naming the argument."""
    cfg = resolve_model(model)
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    if isinstance(gpu, str):
        gpu = gpu.strip().lower()
    _whole(tp=tp, cp=cp, ep=ep, micro_batch=micro_batch, seq=seq)   # before gpus = their product
    dp = ep                       # experts spread over the replicas: the smallest layout that has them
    _check(cfg, tp * cp * dp, gpu, tp, 1, dp, cp, ep, 1, micro_batch, micro_batch * dp, seq, 0,
           recompute, dtype, gpus_per_node)
    cols = dict(tp=tp, pp=1, dp=dp, cp=cp, ep=ep, vpp=1, micro_batch=micro_batch, zero=0,
                recompute=RECOMPUTE.index(recompute), sequence_parallel=int(bool(sequence_parallel)))
    out = evaluate(cfg, gpus=tp * cp * dp, gpu=gpu, seq=seq, global_batch=micro_batch * dp,
                   dtype=dtype, gpus_per_node=gpus_per_node,
                   cols={k: np.array([v]) for k, v in cols.items()}, attention=attention)
    return {k: float(np.asarray(out[f"layer_{k}"]).reshape(-1)[0]) for k in ("forward", "backward")}


# every public formula checks its arguments (DESIGN.md); the lookups and evaluate(), which
# takes arrays of candidates estimate() and search() have already checked, are left alone
check.guard_module(globals(), exclude=("resolve_model", "links_for", "protocol_efficiency",
                                       "elementwise_values", "evaluate"))
