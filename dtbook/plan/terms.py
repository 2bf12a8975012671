"""The planner's terms, each the book's formula for one quantity over arrays of candidate
configurations (chapter 27).

:func:`dtbook.plan.model.evaluate` adds these up. Each term takes the :class:`Job` (what
every candidate shares: the model, the accelerator and its links, the batch) and the
:class:`Layouts` (one NumPy array per knob, one entry per candidate) and calls the chapter
function that owns its quantity; ``tests/test_plan_terms.py`` sets every term beside that
function called one configuration at a time.

One optimizer step of ``global_batch`` sequences is ``m = global_batch / (dp * micro_batch)``
micro-batches through a pipeline of ``pp`` stages. For one micro-batch, one pipeline stage
(the slower of the busiest, ``ceil(layers / pp)`` layers, and the last, which also runs the
logits) spends, per layer:

* **compute** (:func:`layer_compute`, :func:`slowest_stage`): every matmul at its per-GPU
  shape (after TP, ``micro_batch * seq / cp`` tokens) timed by
  :func:`dtbook.plan.gemm.matmul_time`, backward twice forward (data and weight gradients).
  The causal attention core, :func:`dtbook.flops.attention_flops` over ``s/cp`` queries with
  the masked half skipped: with a fused (flash) kernel at the kernel's own measured
  throughput (:func:`dtbook.hardware.attention_kernel`, FlashAttention-2's published forward
  and backward figures), backward 2.5 times the forward FLOPs (the kernel recomputes the
  scores); with ``attention="unfused"`` every product as two batched GEMMs (the score matrix
  is materialised and masked afterwards, as in Megatron-LM before FlashAttention, 2021-22).
  With ``dtype="fp8"`` the layers' linear GEMMs run at the measured FP8 ceiling (Transformer
  Engine's FP8 linears); the attention core and the logits stay BF16;
* **recompute** (:func:`recompute`): ``"full"`` one more forward of the layers,
  ``"selective"`` one more forward of the attention core (Korthikanti et al. 2022);
* **elementwise** (:func:`elementwise`): norms, activations, residual adds, RoPE (and, with
  unfused attention, the softmax and dropout of the ``s x s`` scores) are memory-bound. Each
  op reads its inputs and writes its output in forward; in backward it reads its saved input
  and the output gradient and writes the input gradient (:func:`elementwise_values`). All of
  it at the *measured* HBM bandwidth, BabelStream's Triad
  (:func:`dtbook.hardware.memory_ceiling`: A100 1.70 TB/s of the datasheet's 2.039, H100
  2.97 of 3.35), as the matmuls run at a measured ceiling;
* **TP** (:func:`tp_comm`): :func:`dtbook.tensor_parallel.allreduces_per_layer` ring
  all-reduces of the activation (:func:`dtbook.tensor_parallel.activation_bytes`), 2
  forward and 2 backward (with sequence parallelism an all-gather and a reduce-scatter
  each, the same time), the forward's 2 again with full recompute, on NVLink while the TP
  group fits in a node. *Not overlapped*: Megatron-LM runs them on the compute stream by
  default;
* **collective efficiency**: every collective runs at the link's rate times NCCL's
  protocol efficiency, the published nccl-tests bus bandwidth of a large ring over the line
  rate (:func:`protocol_efficiency`: 0.82 on the H100's NVLink, 0.77 on the A100's, 0.94 on
  InfiniBand). Where a link has a published bus bandwidth *by message size*
  (:func:`dtbook.hardware.busbw_curve`: the A100's NVSwitch), the TP all-reduce runs at the
  rate measured for its size instead (:func:`_in_node_allreduce`): a 100 MB all-reduce
  reaches about three quarters of what gigabyte buffers do;
* **CP** (:func:`cp_comm`): a ring pass of K and V blocks
  (:func:`dtbook.sequence_parallel.ring_kv_step_bytes`; ``cp - 1`` transfers forward, twice
  that backward, :func:`dtbook.sequence_parallel.ring_kv_transfers` of production CP),
  overlapped with the attention core it feeds; only the excess is exposed;
* **EP** (:func:`ep_comm`): the 4 all-to-alls of the routed tokens per MoE layer (dispatch
  and combine, forward and backward: :func:`dtbook.moe.layer_alltoall_time`), exposed.

And per micro-batch:

* **PP** (:func:`pp_comm`): a send forward and one backward per micro-batch and model chunk
  (:func:`dtbook.pipeline_parallel.p2p_message_bytes`), exposed (Megatron's 1F1B blocks on
  ``send_forward_recv_backward`` and ``send_backward_recv_forward`` between steady-state
  steps). Across nodes each TP rank sends ``1/tp`` of the activation over its own NIC (the
  scatter/gather of Narayanan et al. 2021, Sec. 4.1; sequence parallelism splits it already)
  and, without SP, the receivers all-gather it over NVLink. DeepSpeed's pipeline engine
  (``pipeline_engine="deepspeed"``) splits the activation the same way
  (``PartitionedTensor`` over the tensor-parallel group) but issues its four transfers per
  micro-batch (receive activation, send gradient, send activation, receive gradient) as
  blocking calls one after another (``TrainSchedule``, deepspeed/runtime/pipe/schedule.py):
  four transfer times where Megatron's paired calls take two;
* **gradient accumulation** (:func:`grad_accum`): every micro-batch's weight gradients are
  added into the accumulation buffer (in the reduction's precision: FP32, or FP16 with
  ``dtype="fp16"``). Without fusion that is an elementwise op per parameter per micro-batch:
  the wgrad GEMM writes ``param.grad`` in 16 bits and a hook adds it,
  ``param.main_grad.add_(param.grad.data)`` (Megatron-LM's
  ``DistributedDataParallel._make_param_hook`` since "Bfloat with fp32 grad acc", commit
  b4bc51b, March 2021; BigScience's Megatron-DeepSpeed keeps it): read 2 bytes, read and
  write the accumulator (4 + 4, or 2 + 2 in FP16), for the stage's parameters on the GPU, at
  the measured HBM bandwidth. With ``gradient_accumulation_fusion=True`` (the default) the
  wgrad GEMM accumulates into the FP32 buffer itself (beta = 1): Megatron-LM's
  ``--gradient-accumulation-fusion``, merged on 2022-02-22 (commit 9c5a830, "gradient
  accumulation fusion", on unless ``--no-gradient-accumulation-fusion``; APEX's
  ``fused_weight_gradient_mlp_cuda`` from September 2022, Transformer Engine's linears in
  Megatron-Core). Then it costs only the GEMM's read and write of C, which a compute-bound
  wgrad GEMM hides: nothing is added.

The pipeline runs ``m`` micro-batches in ``(m + (pp - 1) / vpp)`` micro-batch times
(:func:`pipeline`: :func:`dtbook.pipeline_parallel.batch_time`, whose idle share is the
(interleaved) 1F1B bubble). After it:

* **DP** (:func:`dp_comm`): the gradients of the stage's parameters
  (:func:`dtbook.data_parallel.gradient_buffer_bytes`) are reduced over the ``dp * cp``
  replicas (an all-reduce, or with ZeRO >= 1 a reduce-scatter and later an all-gather of the
  updated parameters), on the scale-out network. Gradients travel in FP32 unless
  ``dtype="fp16"`` (Megatron-LM accumulates and reduces BF16 gradients in FP32; Llama 3
  reduce-scatters in FP32, Dubey et al. 2024 Sec. 3.3.2); parameters in BF16. Overlap rule:
  the reduction runs during the backward of the last micro-batch, bucket by bucket, one
  layer's gradients at a time (chapter 14's :func:`dtbook.data_parallel.
  overlapped_step_time`), so what is exposed is the last bucket when the backward is the
  longer, and the reduction's excess over the backward when it is not. With
  ``overlap_grad_reduce=False`` all of it is exposed: Megatron-LM before its 2023
  DistributedDataParallel reduced the gradients after the whole pipeline
  (``optimizer.reduce_model_grads``, "All-reduce all grads", called from ``train_step`` after
  the forward-backward pass), and DeepSpeed's pipeline engine runs ``ReduceGrads`` after the
  last micro-batch;
* **ZeRO-3** (:func:`zero3_comm`): the parameters are all-gathered before each
  micro-batch's forward and backward, prefetched under compute: only the excess over a
  micro-batch's compute is exposed;
* **optimizer** (:func:`optimizer`): memory-bound, at the measured HBM bandwidth: Adam's
  bytes per local parameter (:func:`dtbook.offload.optimizer_step_bytes` with FP32 main
  gradients: 30), the gradient norm for clipping reads the FP32 gradients (4 more), and the
  FP32 gradient buffer of every parameter on the GPU is zeroed for the next step (4 per
  parameter). Scaling the gradients when the norm exceeds the threshold is left out (it
  happens only on steps that clip).

Memory per GPU: model state from :func:`dtbook.memory.zero_state_bytes` (2 + 2 + 4 + 8 bytes
per parameter, sharded by ZeRO over ``dp * cp``; :func:`state_memory`), activations per layer
from :func:`dtbook.activations.activation_breakdown` (flash attention, no dropout) times the
micro-batches in flight of :func:`dtbook.pipeline_parallel.activations_in_flight`, and the
FP32 logits on the last stage; the larger of the first and last stage
(:func:`activation_memory`).

Assumptions stated once: BF16 values on the wire, FP32 master weights and Adam moments, every
collective a ring (:mod:`dtbook.comm`, ``links="switched"``), TP innermost then CP, EP, PP,
DP across nodes, one NIC per GPU (or, with ``node=``, the named node's links, its NICs
shared by its GPUs when it has fewer: :func:`links_for`). No constant is fitted to any
published run. The terms take arrays :func:`dtbook.plan.estimate` and
:func:`dtbook.plan.search` have already checked, and check nothing themselves.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import numpy as np

from .. import (activations, comm, data_parallel, flops, hardware, memory, moe, offload,
                pipeline_parallel, sequence_parallel, tensor_parallel)
from .gemm import _matmul_time

__all__ = ["COLUMNS", "Job", "Layouts", "Seconds", "LayerCompute", "Stage", "layer_compute",
           "slowest_stage", "recompute", "elementwise", "tp_comm", "cp_comm", "ep_comm",
           "pp_comm", "grad_accum", "pipeline", "params_per_gpu", "dp_comm", "zero3_comm",
           "optimizer", "state_memory", "activation_memory", "model_flops", "links_for",
           "protocol_efficiency", "elementwise_values"]

COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
           "sequence_parallel")
VALUE = 2          # BF16 activations, gradients and parameters on the wire
MAIN_GRAD = 4      # FP32 main gradients: what the optimizer reads, the norm reads, zeroing writes
_SCALE_OUT = {"a100-80gb": ("nvlink3", "ib-hdr200"), "h100-sxm": ("nvlink4", "ib-ndr400"),
              "h200": ("nvlink4", "ib-ndr400"), "b200": ("nvlink5", "ib-ndr400")}


# ------------------------------------------------------------------ links and elementwise ops

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
    gated = cfg.gated_mlp
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


# ------------------------------------------------------------------ what the terms take

@dataclasses.dataclass(frozen=True)
class Job:
    """What every candidate of one evaluation shares (chapter 27): the model ``cfg``, the
    accelerator ``gpu`` and its measured HBM bandwidth ``hbm``, the node's links ``up``
    (scale-up) and ``out`` (scale-out) with NCCL's protocol efficiency applied to their
    ``(alpha, beta)`` (``up_ab``, ``out_ab``), the sequence length, the global batch and the
    software's choices; ``params`` is the model's parameter count and ``expert_params`` the
    routed experts' share of it. Build it with :meth:`make`."""

    cfg: object
    gpu: str
    seq: int
    global_batch: int
    dtype: str
    gpus_per_node: int
    attention: str
    overlap_grad_reduce: bool
    gradient_accumulation_fusion: bool
    pipeline_engine: str
    hbm: float
    up: object
    out: object
    up_ab: tuple
    out_ab: tuple
    params: float
    expert_params: float

    @classmethod
    def make(cls, cfg, *, gpu, seq, global_batch, dtype="bf16", gpus_per_node=8,
             attention="flash", overlap_grad_reduce=True, gradient_accumulation_fusion=True,
             pipeline_engine="megatron", node=None) -> "Job":
        up, out = links_for(gpu, node)
        expert = 0
        if cfg.is_moe:
            expert = (cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
        return cls(cfg, gpu, seq, global_batch, dtype, gpus_per_node, attention,
                   overlap_grad_reduce, gradient_accumulation_fusion, pipeline_engine,
                   hardware.memory_ceiling(gpu).triad, up, out,
                   (up.alpha, up.beta * protocol_efficiency(up)),
                   (out.alpha, out.beta * protocol_efficiency(out)), cfg.num_params(), expert)

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient value in the accumulation and the DP reduction: FP32, FP16 for
        ``dtype="fp16"`` runs."""
        return 2 if self.dtype == "fp16" else 4

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.cfg.layers - self.cfg.dense_layers if self.cfg.is_moe else 0


class Layouts(NamedTuple):
    """One float array per knob of :data:`COLUMNS`, one entry per candidate (``rc``:
    recompute as 0 none, 1 selective, 2 full; ``sp``: sequence parallelism 0/1), and what
    follows from them with the :class:`Job`: ``m`` micro-batches per step and ``tokens``
    per micro-batch on one GPU. Build it with :meth:`of`."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    mb: np.ndarray
    zero: np.ndarray
    rc: np.ndarray
    sp: np.ndarray
    m: np.ndarray
    tokens: np.ndarray

    @classmethod
    def of(cls, cols, job: Job) -> "Layouts":
        """The candidates of ``cols`` (a dict of :data:`COLUMNS` to arrays)."""
        tp, pp, dp, cp, ep, vpp, mb, zero, rc, sp = (np.asarray(cols[c], dtype=float)
                                                     for c in COLUMNS)
        return cls(tp, pp, dp, cp, ep, vpp, mb, zero, rc, sp,
                   m=job.global_batch / (dp * mb), tokens=mb * job.seq / cp)

    @property
    def replicas(self):
        """Data-parallel replicas a gradient is reduced over: ``dp * cp``."""
        return self.dp * self.cp


class Seconds(NamedTuple):
    """A time split into the share spent in the forward and in the backward pass."""

    forward: np.ndarray
    backward: np.ndarray

    @property
    def total(self):
        return self.forward + self.backward


class LayerCompute(NamedTuple):
    """Compute of one layer for one micro-batch on one GPU (seconds): its linear GEMMs
    (``linear``, forward), the attention core forward and backward (``core``,
    ``core_backward``), and the logits GEMM forward (``logits``)."""

    linear: np.ndarray
    core: np.ndarray
    core_backward: np.ndarray
    logits: np.ndarray

    @property
    def forward(self):
        return self.linear + self.core

    @property
    def backward(self):
        return 2 * self.linear + self.core_backward   # data and weight gradients: 2 GEMMs per GEMM


class Stage(NamedTuple):
    """The slowest pipeline stage for one micro-batch: its ``layers``, the layer counts of the
    ``busiest`` and the ``last`` stage, and its ``compute`` split into ``forward`` and
    ``backward`` (seconds, the logits included when it is the last)."""

    layers: np.ndarray
    busiest: np.ndarray
    last: np.ndarray
    forward: np.ndarray
    backward: np.ndarray

    @property
    def compute(self):
        return self.forward + self.backward


# ------------------------------------------------------------------ compute

def layer_compute(job: Job, lay: Layouts) -> LayerCompute:
    """Forward GEMMs and attention core of one (mean) layer, one micro-batch, one GPU
    (module notes): :func:`dtbook.plan.gemm.matmul_time` at the per-GPU shapes, the causal
    attention core :func:`dtbook.flops.attention_flops` at the flash kernel's measured
    throughput, or two batched GEMMs when unfused."""
    cfg, gpu, seq = job.cfg, job.gpu, job.seq
    tp, cp, mb, T = lay.tp, lay.cp, lay.mb, lay.tokens
    h, L, heads, kv, hd = cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim
    mult = 2 if cfg.gated_mlp else 1
    mm = functools.partial(_matmul_time, gpu=gpu)
    # the layers' linear GEMMs run in ``dtype`` (FP8 with Transformer Engine); the attention
    # core and the logits stay BF16 (Megatron's output layer is not a TE module)
    mm_lin = functools.partial(_matmul_time, gpu=gpu, dtype=job.dtype)
    qkv = mm_lin(T, (heads + 2 * kv) * hd / tp, h)
    out = mm_lin(T, h, heads * hd / tp)
    heads_gpu = mb * heads / tp
    if job.attention == "flash":
        kern = hardware.attention_kernel(gpu)
        causal = 0.5 * flops.attention_flops(mb, seq, heads / tp, hd) / cp   # s/cp queries
        core, core_bwd = causal / kern.forward, 2.5 * causal / kern.backward
    else:
        core = mm(seq / cp, seq, hd, count=heads_gpu) + mm(seq / cp, hd, seq, count=heads_gpu)
        core_bwd = 2 * core
    mlp = mm_lin(T, mult * cfg.ffn_hidden / tp, h) + mm_lin(T, h, cfg.ffn_hidden / tp)
    n_moe = job.moe_layers
    if n_moe:
        eff, k, E, ep = cfg.moe_ffn_hidden, cfg.experts_per_token, cfg.experts, lay.ep
        te = T * k * ep / E                      # tokens per local expert
        moe_mlp = (mm_lin(te, mult * eff / tp, h, count=E / ep)
                   + mm_lin(te, h, eff / tp, count=E / ep) + mm(T, E, h))
        if cfg.shared_experts:
            shared = eff * cfg.shared_experts / tp
            moe_mlp = moe_mlp + mm_lin(T, mult * shared, h) + mm_lin(T, h, shared)
        mlp = ((L - n_moe) * mlp + n_moe * moe_mlp) / L   # mean over the layers
    return LayerCompute(qkv + out + mlp, core, core_bwd, mm(T, cfg.vocab / tp, h))


def slowest_stage(job: Job, lay: Layouts, layer: LayerCompute) -> Stage:
    """The slower of the busiest stage (``ceil(layers / pp)`` layers) and the last one, which
    also runs the logits (forward once, backward twice), for one micro-batch. Layers split
    evenly, or Llama 3's way: the first and last stage hold one layer fewer."""
    L, pp = job.cfg.layers, lay.pp
    busiest = np.ceil(L / pp)
    last = np.where((L % pp == 0) | (pp == 1), busiest, busiest - 1)
    per_layer = layer.forward + layer.backward
    on_busiest = busiest * per_layer >= last * per_layer + 3 * layer.logits
    return Stage(np.where(on_busiest, busiest, last), busiest, last,
                 np.where(on_busiest, busiest * layer.forward, last * layer.forward + layer.logits),
                 np.where(on_busiest, busiest * layer.backward,
                          last * layer.backward + 2 * layer.logits))


def recompute(job: Job, lay: Layouts, layer: LayerCompute) -> Seconds:
    """What recomputation re-runs in one layer's backward (Korthikanti et al. 2022): the
    whole forward (``"full"``) or the attention core (``"selective"``)."""
    again = np.where(lay.rc == 2, layer.forward, np.where(lay.rc == 1, layer.core, 0.0))
    return Seconds(np.zeros_like(again), again)


def elementwise(job: Job, lay: Layouts) -> Seconds:
    """One layer's memory-bound ops (:func:`elementwise_values`) at the measured HBM
    bandwidth; full recompute runs the forward's again, selective the unfused softmax."""
    s = job.seq / lay.cp
    fwd, bwd = elementwise_values(job.cfg, lay.tokens, s, lay.tp, lay.sp, job.attention)
    scores = 0.0
    if job.attention != "flash":   # the forward's score-matrix ops, which selective re-runs
        scores = fwd - elementwise_values(job.cfg, lay.tokens, s, lay.tp, lay.sp, "flash")[0]
    again = np.where(lay.rc == 2, fwd, np.where(lay.rc == 1, scores, 0.0))
    per_value = VALUE / job.hbm
    return Seconds(per_value * fwd, per_value * (bwd + again))


# ------------------------------------------------------------------ communication per layer

def tp_comm(job: Job, lay: Layouts) -> Seconds:
    """One layer's tensor-parallel all-reduces, not overlapped: :func:`dtbook.tensor_parallel.
    allreduces_per_layer` of them (forward 2, backward 2, and with full recompute the
    forward's again), each a ring all-reduce of :func:`dtbook.tensor_parallel.activation_bytes`
    over NVLink (at the busbw measured for its size where published) or the scale-out link."""
    n = tensor_parallel.activation_bytes(lay.mb, job.seq / lay.cp, job.cfg.hidden,
                                         bytes_per_element=VALUE)
    t = np.where(lay.tp <= job.gpus_per_node, _in_node_allreduce(n, lay.tp, job.up, *job.up_ab),
                 comm.allreduce_time(n, lay.tp, *job.out_ab))
    forward = tensor_parallel.allreduces_per_layer(backward=False)
    backward = tensor_parallel.allreduces_per_layer() - forward + np.where(lay.rc == 2, forward, 0)
    on = lay.tp > 1
    return Seconds(np.where(on, forward * t, 0.0), np.where(on, backward * t, 0.0))


def cp_comm(job: Job, lay: Layouts, layer: LayerCompute) -> Seconds:
    """One layer's ring-attention K/V transfers beyond what the attention core they feed
    hides: ``cp - 1`` transfers of a K/V block (:func:`dtbook.sequence_parallel.
    ring_kv_step_bytes`, this rank's kv heads) forward and twice that backward, each a
    point-to-point send (:func:`dtbook.comm.p2p_time`) on NVLink while TP x CP fits a node:
    :func:`dtbook.sequence_parallel.ring_kv_transfers` with ``kv_saved=False``, the backward
    sending K and V again beside their gradients, as Megatron-Core's CP does."""
    cfg, cp = job.cfg, lay.cp
    if not np.any(cp > 1):
        return Seconds(np.zeros_like(cp), np.zeros_like(cp))
    kv_width = cfg.kv_heads * cfg.head_dim / np.minimum(lay.tp, cfg.kv_heads)
    block = sequence_parallel.ring_kv_step_bytes(lay.mb, job.seq, kv_width, cp, value_bytes=VALUE)
    inside = lay.tp * cp <= job.gpus_per_node
    step = comm.p2p_time(block, np.where(inside, job.up_ab[0], job.out_ab[0]),
                         np.where(inside, job.up_ab[1], job.out_ab[1]))
    # production CP (Transformer Engine): backward circulates K, V again beside dK, dV
    transfers = sequence_parallel.ring_kv_transfers(cp, kv_saved=False)
    exposed = np.maximum(0.0, transfers * step - (layer.core + layer.core_backward))
    forward = sequence_parallel.ring_kv_transfers(cp, backward=False) / np.maximum(transfers, 1)
    return Seconds(forward * exposed, (1 - forward) * exposed)


def ep_comm(job: Job, lay: Layouts) -> Seconds:
    """One (mean) layer's expert-parallel all-to-alls, exposed: :func:`dtbook.moe.
    layer_alltoall_time` (dispatch and combine, forward and backward) of the tokens' k routed
    copies, in the MoE layers' share of the layers; half forward, half backward."""
    cfg, ep = job.cfg, lay.ep
    if not job.moe_layers:
        return Seconds(np.zeros_like(ep), np.zeros_like(ep))
    inside = lay.tp * ep <= job.gpus_per_node
    t = moe.layer_alltoall_time(lay.tokens, cfg.hidden, np.maximum(ep, 2),
                                np.where(inside, job.up_ab[0], job.out_ab[0]),
                                np.where(inside, job.up_ab[1], job.out_ab[1]),
                                experts_per_token=cfg.experts_per_token)
    per_layer = np.where(ep > 1, job.moe_layers / cfg.layers * t, 0.0)
    return Seconds(per_layer / 2, per_layer / 2)


# ------------------------------------------------------------------ per micro-batch

def pp_comm(job: Job, lay: Layouts):
    """Pipeline sends of one micro-batch, exposed: per model chunk the activation
    (:func:`dtbook.pipeline_parallel.p2p_message_bytes`) forward and its gradient backward
    (Megatron pairs each send with the opposite receive: 2 transfer times; DeepSpeed's
    TrainSchedule blocks on 4). Across nodes each TP rank sends 1/tp of it over its own NIC
    and, without SP, the receivers all-gather it over NVLink (Narayanan et al. 2021, 4.1)."""
    tp, sp = lay.tp, lay.sp
    if not np.any(lay.pp > 1):
        return np.zeros_like(tp)
    n = pipeline_parallel.p2p_message_bytes(lay.mb, job.seq / lay.cp, job.cfg.hidden,
                                            bytes_per_value=VALUE)
    gather = np.where((sp == 0) & (tp > 1),
                      comm.allgather_time(n, np.maximum(tp, 2), *job.up_ab), 0.0)
    inside = tp * lay.cp * lay.ep * lay.pp <= job.gpus_per_node
    send = np.where(inside, comm.p2p_time(n / np.where(sp == 1, tp, 1), *job.up_ab),
                    comm.p2p_time(n / tp, *job.out_ab) + gather)
    sends = 4 if job.pipeline_engine == "deepspeed" else 2
    return np.where(lay.pp > 1, sends * lay.vpp * send, 0.0)


def params_per_gpu(job: Job, lay: Layouts):
    """Parameters on one GPU: the dense ones split over TP x PP, the experts over EP too
    (the embedding and the head counted in the mean over the stages)."""
    expert = job.expert_params
    return (job.params - expert) / (lay.tp * lay.pp) + expert / (lay.tp * lay.pp * lay.ep)


def grad_accum(job: Job, lay: Layouts, params):
    """Adding one micro-batch's 16-bit weight gradients into the accumulation buffer at the
    measured HBM bandwidth (read the gradient, read and write the buffer); nothing when the
    wgrad GEMMs accumulate themselves (``gradient_accumulation_fusion``)."""
    per_param = 0 if job.gradient_accumulation_fusion else VALUE + 2 * job.grad_bytes
    return params * per_param / job.hbm


def pipeline(lay: Layouts, forward, backward):
    """``(time, bubble)`` of the step's ``m`` micro-batches through the pipeline, each taking
    ``forward`` + ``backward`` seconds on the slowest stage: :func:`dtbook.pipeline_parallel.
    batch_time` with ``vpp`` virtual stages, and its idle share :func:`dtbook.
    pipeline_parallel.interleaved_bubble_fraction`."""
    time = pipeline_parallel.batch_time(lay.pp, lay.m, forward, backward, virtual_stages=lay.vpp)
    return time, time * pipeline_parallel.interleaved_bubble_fraction(lay.pp, lay.m, lay.vpp)


# ------------------------------------------------------------------ after the pipeline

def dp_comm(job: Job, lay: Layouts, backward, layers):
    """The exposed data-parallel reduction of the stage's gradients
    (:func:`dtbook.data_parallel.gradient_buffer_bytes`, FP32 or FP16) over the ``dp * cp``
    replicas on the scale-out link: a ring all-reduce, or with ZeRO >= 1 a reduce-scatter and
    an all-gather of the BF16 parameters. Overlapped with the last micro-batch's ``backward``
    of ``layers`` layers bucket by bucket (:func:`dtbook.data_parallel.overlapped_step_time`),
    or all exposed without ``overlap_grad_reduce``."""
    held = job.params - job.expert_params + job.expert_params / lay.ep  # one TP x PP group's
    grads = data_parallel.gradient_buffer_bytes(held, tp=lay.tp, pp=lay.pp,
                                                grad_bytes=job.grad_bytes)
    weights = params_per_gpu(job, lay) * VALUE
    reps = np.maximum(lay.replicas, 2)
    t = np.where(lay.zero >= 1,
                 comm.reduce_scatter_time(grads, reps, *job.out_ab)
                 + comm.allgather_time(weights, reps, *job.out_ab),
                 comm.allreduce_time(grads, reps, *job.out_ab))
    if job.overlap_grad_reduce:
        t = data_parallel.overlapped_step_time(backward, t, layers) - backward
    return np.where(lay.replicas > 1, t, 0.0)


def zero3_comm(job: Job, lay: Layouts, params, compute):
    """ZeRO-3's parameter all-gathers before each micro-batch's forward and backward
    (:func:`dtbook.comm.allgather_time` of the BF16 parameters), prefetched: the excess over
    the micro-batch's ``compute``, for every micro-batch."""
    reps = lay.replicas
    if not np.any(lay.zero == 3):
        return np.zeros_like(reps)
    t = np.where(reps > 1, comm.allgather_time(params * VALUE, np.maximum(reps, 2), *job.out_ab), 0.0)
    return np.where(lay.zero == 3, lay.m * np.maximum(0.0, 2 * t - compute), 0.0)


def optimizer(job: Job, lay: Layouts, params):
    """The optimizer step at the measured HBM bandwidth: Adam's traffic per local parameter
    (:func:`dtbook.offload.optimizer_step_bytes` reading FP32 main gradients), the clipping
    norm's read of them, and zeroing every gradient on the GPU for the next step."""
    local = params / np.where(lay.zero >= 1, lay.replicas, 1)
    adam = offload.optimizer_step_bytes(grad_bytes=MAIN_GRAD)
    return ((adam + MAIN_GRAD) * local + MAIN_GRAD * params) / job.hbm


# ------------------------------------------------------------------ memory

def state_memory(job: Job, lay: Layouts, params):
    """Model-state bytes per GPU: :func:`dtbook.memory.zero_state_bytes` of the GPU's
    parameters under each candidate's ZeRO stage over the ``dp * cp`` replicas."""
    state = np.zeros(np.broadcast(params, lay.zero).shape)
    for stage in np.unique(lay.zero):
        stage = int(stage)
        state = np.where(lay.zero == stage, memory.zero_state_bytes(params, lay.replicas, stage),
                         state)
    return state


def _layer_activations(job: Job, lay: Layouts, recompute_mode):
    """:func:`dtbook.activations.activation_breakdown` of one layer under ``recompute_mode``,
    with or without sequence parallelism as each candidate has it (flash attention keeps no
    dropout mask; unfused keeps Megatron's masks)."""
    eager = job.attention != "flash"
    out = {}
    for flag in np.unique(lay.sp):
        terms = activations.activation_breakdown(
            lay.mb, job.seq / lay.cp, job.cfg.hidden, job.cfg.heads, job.cfg.ffn_hidden,
            dropout=eager, attention="eager" if eager else "flash", tp=lay.tp,
            sequence_parallel=bool(flag), recompute=recompute_mode)
        out[flag] = sum(terms.values())
    return np.where(lay.sp == 1, out.get(1.0, 0.0), out.get(0.0, 0.0))


def _in_flight(lay: Layouts, stage):
    """:func:`dtbook.pipeline_parallel.activations_in_flight` of pipeline rank ``stage``:
    1F1B, or interleaved 1F1B where ``vpp`` > 1 (counted in model chunks)."""
    interleaved = lay.vpp > 1
    held = 0.0
    if not np.all(interleaved):
        held = pipeline_parallel.activations_in_flight(lay.pp, lay.m, stage=stage, schedule="1f1b")
    if np.any(interleaved):
        inter = pipeline_parallel.activations_in_flight(
            lay.pp, lay.m, stage=stage, schedule="interleaved-1f1b", virtual_stages=lay.vpp)
        held = np.where(interleaved, inter, held)
    return held


def activation_memory(job: Job, lay: Layouts, stage: Stage):
    """Activation bytes per GPU, the larger of the first pipeline rank (most micro-batches in
    flight) and the last (the FP32 logits): each layer's :func:`dtbook.activations.
    activation_breakdown` times the layers of a model chunk times
    :func:`dtbook.pipeline_parallel.activations_in_flight`. Under full recompute a layer keeps
    only its input, and one layer's whole activations exist while it is recomputed."""
    rc = lay.rc
    whole = _layer_activations(job, lay, "none")
    kept = whole
    if np.any(rc == 1):
        kept = np.where(rc == 1, _layer_activations(job, lay, "selective"), whole)
    if np.any(rc == 2):
        kept = np.where(rc == 2, _layer_activations(job, lay, "full"), kept)

    def held(ranks_in_flight, layers_per_chunk):
        return ranks_in_flight * layers_per_chunk * kept + np.where(rc == 2, whole, 0.0)

    logits = 4 * lay.tokens * job.cfg.vocab / lay.tp      # FP32 logits on the last stage
    pp, vpp = lay.pp, lay.vpp
    first = held(_in_flight(lay, 0), stage.busiest / vpp) + np.where(pp == 1, logits, 0.0)
    last = held(_in_flight(lay, pp - 1), np.where(pp == 1, stage.busiest, stage.last) / vpp) + logits
    return np.maximum(first, last)


def model_flops(job: Job):
    """Model FLOPs of one step (MFU's numerator): :func:`dtbook.flops.transformer_matmul_flops`
    forward and backward, attention counted causal (half), recompute not counted."""
    return _model_flops(job.cfg, job.global_batch, job.seq)


@functools.lru_cache(maxsize=256)
def _model_flops(cfg, batch, seq):
    f = flops.transformer_matmul_flops(cfg, batch, seq)
    return 3 * (f["linear_forward"] + f["attention_forward"] / 2)
