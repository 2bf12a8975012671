"""The planner's terms, each the book's formula for one quantity over arrays of candidate
configurations (chapter 27).

:func:`dtbook.plan.model.evaluate` adds these up. Each term takes the :class:`Job` (what
every candidate shares: the model, the accelerator and its links, the batch) and the
:class:`Layouts` (one NumPy array per knob, one entry per candidate) and calls the chapter
function that owns its quantity; ``tests/test_plan_terms.py`` sets every term beside that
function called one configuration at a time.

One optimizer step of ``global_batch`` sequences is ``m = global_batch / (dp * micro_batch)``
micro-batches through a pipeline of ``pp`` stages. For one micro-batch, one pipeline stage
(the slowest rank of the split :func:`dtbook.pipeline_parallel.stage_layers` gives: even,
lighter first and last stages where ``pp * vpp`` does not divide the layers, or Megatron's
``first_stage_layers`` / ``last_stage_layers``; the last also runs the logits and any MTP
module; :func:`slowest_stage`) spends, per layer:

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
  Engine's FP8 linears), their inputs and output gradients cast and transposed in memory-bound
  kernels (:func:`fp8_cast_bytes`, in the elementwise term); the attention core and the
  logits stay BF16;
* **recompute** (:func:`recompute`): ``"full"`` one more forward of the layers,
  ``"selective"`` one more forward of the attention core (Korthikanti et al. 2022),
  ``"selective-op"`` one more forward of every second matmul (torchtitan's op-level policy);
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
* **kinds of layer** (:class:`LayerKinds`, the "W1" section at the end): attention with
  the projections of :func:`dtbook.flops.block_gemms` (GQA/MQA through the K/V widths; MLA's
  low-rank ``q_down``/``q_up``/``kv_down``/``kv_up``, explicit form) and its core over each
  block's sliding window (:func:`attention_compute`); a dense MLP, or an MoE block's router,
  grouped expert GEMMs of E/ep local experts over their routed tokens (dropless, the busiest
  rank's chapter-18 load, :func:`expert_load_factor`) and shared experts, experts in
  ``dtype`` (FP8 as DeepSeek-V3 runs them; :func:`mlp_compute`). DeepSeek's dense first
  layers are dense blocks. Expert-tensor parallelism: TP with EP over the replicas, or
  Megatron-Core's ETP with MoE parallel folding (``expert_tensor_parallel``);
* **EP** (:func:`ep_comm`): the 4 all-to-alls of the routed tokens per MoE layer (dispatch
  and combine, forward and backward: :func:`dtbook.moe.layer_alltoall_time`), exposed, on
  NVLink while the EP group sits in one node, else its same-node share on NVLink and the
  rest on the NIC at once; with ``moe_dispatcher="deepep"`` a token crosses the network once
  per destination node (:func:`_per_node_dispatch_time`), and with ``moe_comm_overlap`` only
  the all-to-alls' excess over a layer's compute is exposed (DeepSeek's DualPipe, Megatron's
  ``--overlap-moe-expert-parallel-comm``), the GEMMs then running on the SMs the dispatch
  kernels leave (:func:`stage_on_free_sms`). The token permutation around the dispatch is
  memory-bound work (:func:`moe_elementwise_values`).

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
  gradients: 30), the separate kernel that writes the 16-bit copy reads the FP32 master again
  (4; Megatron's ``_copy_main_params_to_model_params``), the gradient norm for clipping reads
  the FP32 gradients (4 more), and the FP32 gradient buffer of every parameter on the GPU is
  zeroed for the next step (4 per parameter); FP16 gradients are cast to FP32 and unscaled
  first (14 more). Scaling the gradients when the norm exceeds the threshold is left out (it
  happens only on steps that clip).

Memory per GPU: model state from :func:`dtbook.memory.zero_state_bytes` (2 + 4 + 4 + 8 bytes
per parameter with Megatron's FP32 gradient buffer, 2 + 2 + 4 + 12 with FP16 gradients and
their FP32 copy; sharded by ZeRO over ``dp * cp``; :func:`state_memory`), activations per layer
from :func:`dtbook.activations.activation_breakdown` (flash attention, no dropout) times the
micro-batches in flight of :func:`dtbook.pipeline_parallel.activations_in_flight`, and the
FP32 logits on the last stage; the larger of the first and last stage
(:func:`activation_memory`); and what the software stack takes beside the model
(:func:`framework_memory`: :func:`dtbook.memory.framework_bytes`, the driver's reserve, the
CUDA context and NCCL's buffers of each communicator).

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
           "slowest_stage", "expert_replicas", "stage_on_free_sms", "default_comm_sms",
           "DEEPEP_SMS", "recompute", "elementwise", "tp_comm", "cp_comm", "ep_comm",
           "pp_comm", "grad_accum", "pipeline", "params_per_gpu", "dp_comm", "zero3_comm",
           "optimizer", "state_memory", "activation_memory", "model_flops", "links_for",
           "protocol_efficiency", "elementwise_values", "moe_elementwise_values", "fp8_cast_bytes",
           # W1: layer kinds (MoE, attention variants), uneven pipeline splits
           "LayerKinds", "attention_compute", "mlp_compute", "expert_load_factor", "splits",
           # W3: what the framework takes beside the model
           "communicators", "framework_memory"]

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
    first_stage_layers: int | None = None   # W1: Megatron's decoder_first_pipeline_num_layers
    last_stage_layers: int | None = None    # W1: decoder_last_pipeline_num_layers
    expert_tensor_parallel: int | None = None   # W1: Megatron-Core's ETP (None: = tp)
    moe_dispatcher: str = "alltoall"    # "alltoall": a copy per expert; "deepep": per node
    moe_comm_overlap: bool = False      # EP all-to-alls hidden under another micro-batch
    moe_comm_sms: int = 0               # SMs the overlapped dispatch kernels hold

    @classmethod
    def make(cls, cfg, *, gpu, seq, global_batch, dtype="bf16", gpus_per_node=8,
             attention="flash", overlap_grad_reduce=True, gradient_accumulation_fusion=True,
             pipeline_engine="megatron", node=None, first_stage_layers=None,
             last_stage_layers=None, expert_tensor_parallel=None, moe_dispatcher="alltoall",
             moe_comm_overlap=False, moe_comm_sms=None) -> "Job":
        up, out = links_for(gpu, node)
        expert = 0
        if cfg.is_moe:
            expert = (cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
        return cls(cfg, gpu, seq, global_batch, dtype, gpus_per_node, attention,
                   overlap_grad_reduce, gradient_accumulation_fusion, pipeline_engine,
                   hardware.memory_ceiling(gpu).triad, up, out,
                   (up.alpha, up.beta * protocol_efficiency(up)),
                   (out.alpha, out.beta * protocol_efficiency(out)), cfg.num_params(), expert,
                   first_stage_layers, last_stage_layers, expert_tensor_parallel,
                   moe_dispatcher, bool(moe_comm_overlap),
                   default_comm_sms(moe_dispatcher, moe_comm_overlap) if moe_comm_sms is None
                   else int(moe_comm_sms))

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
    recompute as 0 none, 1 selective, 2 full, 3 selective-op; ``sp``: sequence parallelism
    0/1), and what follows from them with the :class:`Job`: ``m`` micro-batches per step and
    ``tokens`` per micro-batch on one GPU. Build it with :meth:`of`."""

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
    ``core_backward``), and the logits GEMM forward (``logits``); ``kinds``, each kind of
    layer apart (:class:`LayerKinds`); ``op_again``, the forward of the matmuls op-level
    selective recompute re-runs (:func:`_op_recomputed`)."""

    linear: np.ndarray
    core: np.ndarray
    core_backward: np.ndarray
    logits: np.ndarray
    kinds: object = None
    op_again: object = 0.0

    @property
    def forward(self):
        return self.linear + self.core

    @property
    def backward(self):
        return 2 * self.linear + self.core_backward   # data and weight gradients: 2 GEMMs per GEMM


class Stage(NamedTuple):
    """The slowest pipeline stage for one micro-batch: its ``layers``, the layer counts of the
    ``busiest`` and the ``last`` stage, and its ``compute`` split into ``forward`` and
    ``backward`` (seconds, the logits included when it is the last); the layers of the
    ``first`` stage, the slowest stage's ``moe`` layers and its ``mean`` layer
    (:class:`LayerCompute`)."""

    layers: np.ndarray
    busiest: np.ndarray
    last: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    first: np.ndarray = None
    moe: np.ndarray = None
    mean: object = None

    @property
    def compute(self):
        return self.forward + self.backward


# ------------------------------------------------------------------ compute

def layer_compute(job: Job, lay: Layouts) -> LayerCompute:
    """Forward GEMMs and attention core of one (mean) layer, one micro-batch, one GPU
    (module notes), with each kind of layer apart in ``kinds`` (:class:`LayerKinds`): the
    attention of each window (:func:`attention_compute`) and the dense and MoE MLPs
    (:func:`mlp_compute`), the GEMMs at the shapes :func:`dtbook.flops.block_gemms` gives
    (MLA's low-rank projections, the routed experts' grouped GEMMs) timed by
    :func:`dtbook.plan.gemm.matmul_time`. The mean weighs each kind by its count of layers;
    :func:`slowest_stage` adds up the kinds a stage actually holds."""
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


# DeepEP's kernels run on 20 SMs: Megatron-Core's moe_deepep_num_sms default (transformer_config
# .py), DeepSeek-V3's own 20 of the H800's 132 (DeepSeek-V3 report, Sec. 3.2.2)
DEEPEP_SMS = 20


def default_comm_sms(moe_dispatcher, moe_comm_overlap):
    """SMs the EP dispatch kernels hold while they overlap compute: :data:`DEEPEP_SMS` for
    DeepEP overlapped, else 0 (not overlapped, they take nothing from compute; NCCL's
    all-to-all overlapped is not costed)."""
    return DEEPEP_SMS if moe_dispatcher == "deepep" and moe_comm_overlap else 0


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
    Input and output widths per GPU follow the TP placement of :func:`_gemm_seconds`; the
    routed experts' rows are each token's k copies (times :func:`expert_load_factor`). The
    router stays BF16; the weights' casts, once per step, are left out."""
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


# ------------------------------------------------------------------ communication per layer

def tp_comm(job: Job, lay: Layouts) -> Seconds:
    """One layer's tensor-parallel all-reduces, not overlapped: :func:`dtbook.tensor_parallel.
    allreduces_per_layer` of them (forward 2, backward 2, and with full recompute the
    forward's again; op-level recompute saves the reduce-scatters and re-runs the forward's
    all-gathers, half its collectives with sequence parallelism, all of them without), each
    a ring all-reduce of :func:`dtbook.tensor_parallel.activation_bytes` over NVLink (at the
    busbw measured for its size where published) or the scale-out link."""
    n = tensor_parallel.activation_bytes(lay.mb, job.seq / lay.cp, job.cfg.hidden,
                                         bytes_per_element=VALUE)
    t = np.where(lay.tp <= job.gpus_per_node, _in_node_allreduce(n, lay.tp, job.up, *job.up_ab),
                 comm.allreduce_time(n, lay.tp, *job.out_ab))
    forward = tensor_parallel.allreduces_per_layer(backward=False)
    op_level = np.where(lay.sp == 1, forward / 2, forward)
    again = np.select([lay.rc == 2, lay.rc == 3], [forward, op_level], 0)
    backward = tensor_parallel.allreduces_per_layer() - forward + again
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


def ep_comm(job: Job, lay: Layouts, stage=None) -> Seconds:
    """The expert-parallel all-to-alls of one (mean) layer of ``stage`` (the slowest stage;
    without it, of the model), exposed: :func:`dtbook.moe.layer_alltoall_time` (dispatch and
    combine, forward and backward: 4 pairwise all-to-alls of the tokens' k routed copies) in
    each MoE layer, carrying the busiest rank's :func:`expert_load_factor`. Placement: ranks
    in the order TP, CP, EP, so an EP group has g = gpus_per_node / (tp * cp) of its ``ep``
    ranks in each node (with an expert-tensor-parallel size: :func:`_expert_layout`). Inside
    one node (g >= ep) all of it runs on NVLink; across nodes a
    rank's g - 1 same-node peers take their (g - 1)/(ep - 1) share over NVLink while the
    other (ep - g)/(ep - 1) crosses the scale-out link, at the same time: the slower decides.
    Half forward, half backward.

    With ``moe_comm_overlap`` (Megatron-Core's ``overlap_moe_expert_parallel_comm``, which
    interleaves one micro-batch's forward with another's backward so that each one's
    all-to-alls run under the other's compute; DeepSeek-V3's DualPipe pairs them the same
    way, Sec. 3.2.1 of its report) only what exceeds one layer's forward and backward compute
    is exposed: max(0, all-to-alls - compute)."""
    cfg, ep = job.cfg, lay.ep
    if not job.moe_layers:
        return Seconds(np.zeros_like(ep), np.zeros_like(ep))
    share = (job.moe_layers / cfg.layers if stage is None or stage.moe is None
             else stage.moe / np.maximum(stage.layers, 1))
    a2a = _alltoall_per_moe_layer(job, lay)
    if job.moe_comm_overlap and stage is not None and stage.mean is not None:
        a2a = np.maximum(a2a - (stage.mean.forward + stage.mean.backward), 0.0)
    per_layer = share * a2a
    return Seconds(per_layer / 2, per_layer / 2)


def _alltoall_per_moe_layer(job: Job, lay: Layouts):
    """Seconds of one MoE layer's four all-to-alls (:func:`ep_comm`); 0 without EP."""
    cfg, ep = job.cfg, lay.ep
    if not job.moe_layers:
        return np.zeros_like(ep)
    world = np.maximum(ep, 2)
    _, tokens, g = _expert_layout(job, lay)
    g = np.clip(g, 1, world)
    kw = dict(experts_per_token=cfg.experts_per_token)
    t_up = moe.layer_alltoall_time(tokens, cfg.hidden, world, *job.up_ab, **kw)
    t_out = moe.layer_alltoall_time(tokens, cfg.hidden, world, *job.out_ab, **kw)
    t = np.where(g >= world, t_up,
                 np.maximum(t_out * (world - g) / (world - 1), t_up * (g - 1) / (world - 1)))
    if job.moe_dispatcher == "deepep":
        t = np.where(g >= world, t_up, _per_node_dispatch_time(job, tokens, world, g, t))
    return np.where(ep > 1, t * expert_load_factor(job, lay), 0.0)


def _per_node_dispatch_time(job: Job, tokens, world, g, per_expert):
    """One MoE layer's four all-to-alls with a dispatcher that sends a token across the
    scale-out network once per destination node and fans it out inside the node over NVLink
    (DeepSeek-V3 report Sec. 3.2.2: IB to the GPU of the same in-node index, then NVLink;
    DeepEP's internode kernels; Megatron-Core's flex dispatcher). The EP group spans
    ``world / g`` nodes; a token's copies on the network are
    :func:`dtbook.moe.expected_destinations` of those nodes (with the model's group-limited
    routing where the nodes nest in its groups; where the node count is not a multiple of the
    groups, routing is taken as unlimited), a pairwise all-to-all among the nodes; inside each
    node the k copies move among its g ranks. The slower of the two decides. Tokens travel in
    BF16 both ways (DeepSeek dispatches in FP8, which is not modelled). Where the experts do
    not split evenly over the group's nodes, the count of destinations has no closed form
    here and the time stays ``per_expert``'s (one copy per expert)."""
    cfg = job.cfg
    kw = dict(experts_per_token=cfg.experts_per_token)
    t = np.array(np.broadcast_to(per_expert, np.broadcast(tokens, world, g, per_expert).shape),
                 dtype=float)
    for w, gg in set(zip(np.broadcast_to(world, t.shape).ravel().tolist(),
                         np.broadcast_to(g, t.shape).ravel().tolist())):
        nodes = int(np.ceil(w / gg))
        if nodes < 2 or cfg.experts % nodes:
            continue
        groups = cfg.router_groups if nodes % cfg.router_groups == 0 else 1
        copies = moe.expected_destinations(cfg.experts, cfg.experts_per_token, nodes, groups,
                                           (cfg.router_group_topk or groups) if groups > 1 else None)
        at = (np.broadcast_to(world, t.shape) == w) & (np.broadcast_to(g, t.shape) == gg)
        tok = np.broadcast_to(tokens, t.shape)[at]
        # four all-to-alls (dispatch, combine, and each again backward) of the per-node copies
        t_net = 4 * comm.alltoall_time(copies * moe.alltoall_bytes(tok, cfg.hidden), nodes,
                                       *job.out_ab)
        t_node = moe.layer_alltoall_time(tok, cfg.hidden, max(int(gg), 2), *job.up_ab, **kw)
        t[at] = np.maximum(t_net, t_node)
    return t


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
    return (job.params - job.expert_params) / (lay.tp * lay.pp) + _expert_params_per_gpu(job, lay)


def _expert_etp(job: Job, lay: Layouts):
    """The expert-tensor-parallel size (:func:`_expert_layout`'s first)."""
    return _expert_layout(job, lay)[0]


def _expert_params_per_gpu(job: Job, lay: Layouts):
    """The routed experts' parameters on one GPU: split over ETP x PP x EP."""
    return job.expert_params / (_expert_etp(job, lay) * lay.pp * lay.ep)


def expert_replicas(job: Job, lay: Layouts):
    """Copies of each expert's weights, the expert-data-parallel group a ZeRO optimizer shards
    its state over: the stage's tp x cp x dp GPUs over ETP x EP (``dp * cp / ep`` when the
    experts split over TP; Megatron-Core's expert data-parallel group)."""
    return lay.tp * lay.cp * lay.dp / (_expert_etp(job, lay) * lay.ep)


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


# ------------------------------------------------------------------ FSDP2 (issue 22, item 4)
#
# PyTorch's own ZeRO-3, ``fully_shard`` (torch/distributed/fsdp/_fully_shard/, FSDP2), as
# torchtitan applies it (torchtitan/parallelisms/parallelize_llama.py ``apply_fsdp`` at
# 9dec370, December 2024, the commit of its published benchmark; Liang et al. 2024,
# "TorchTitan", arXiv:2410.06511, Sec. 2.1):
#
# * **units**: one ``fully_shard`` per transformer block, then one on the whole model (the
#   "root": token embedding, final norm, output projection). Each unit's parameters are one
#   flat all-gather (``FSDPParamGroup.unshard``) and its gradients one reduce-scatter
#   (``post_backward`` -> ``foreach_reduce``) over the shard group;
# * **when**: ``pre_forward`` all-gathers a unit before its forward, ``post_forward``
#   reshards it when ``reshard_after_forward`` (torchtitan: every block but the last, since
#   the backward would gather it at once; ``False`` for every block under pipeline
#   parallelism "to avoid per-microbatch all-gathers"), ``pre_backward`` gathers it again,
#   ``post_backward`` reduce-scatters its gradients in the ``reduce_dtype`` (torchtitan's
#   ``mixed_precision_reduce = "float32"``) on their own stream;
# * **prefetch**: the next unit's all-gather is issued while this unit computes (implicit
#   forward prefetch on the all-gather stream; ``_backward_prefetch`` in backward), one unit
#   ahead. Collectives on one link run one at a time, so chapter 20's
#   :func:`dtbook.zero.prefetch_step_time` with ``link="serial"`` is the pass: the first
#   gather exposed, then per unit the larger of its compute and its communication. In
#   backward a unit's communication is the next unit's gather and this unit's reduce-scatter;
# * **HSDP** (``hsdp_replicas`` r > 1, torchtitan's ``data_parallel_replicate_degree``): the
#   ``dp * cp`` ranks are r replicas of shard groups of ``dp * cp / r``; gathers and
#   reduce-scatters run inside the shard group, and each unit's reduced gradient shard is
#   then all-reduced across the r replicas (``foreach_reduce``'s ``all_reduce`` on
#   ``all_reduce_stream``), concurrently with the shard group's traffic when the two use
#   different links (shard group inside a node, replicas across), after it when they share one;
# * **float8 all-gather** (``fsdp_float8_all_gather``, torchtitan's
#   ``--float8.enable_fsdp_float8_all_gather``, off by default and not set in its benchmark):
#   torchao's ``Float8Linear`` weights travel in 1 byte instead of 2; norms stay BF16;
# * **pipeline parallelism**: ``torch.distributed.pipelining`` turns gradient sync off for
#   all but the last micro-batch and torchtitan keeps the blocks unsharded after forward, so
#   a stage gathers its parameters once per step (the first micro-batch) and reduce-scatters
#   once (the last); without PP, every micro-batch gathers and reduces (FSDP2's default);
# * **memory** (:func:`fsdp2_memory`): the model state fully sharded (chapter 19's
#   :func:`dtbook.memory.zero_state_bytes`, stage 3) plus the units held unsharded: two
#   gathered units and one reduce-scatter input (:func:`dtbook.memory.sharded_buffer_bytes`,
#   FSDP2's one-unit lookahead) and the root, which stays gathered through the step; with
#   ``reshard_after_forward=False`` (ZeRO column 2, or PP) every unit of the stage.
#
# Not modelled: ``torch.compile``'s effect is the planner's fused elementwise model (one read
# and one write per op, :func:`elementwise`), which compiled blocks reach and eager PyTorch
# (several kernels per RMSNorm in FP32) does not, so eager runs are not predicted; the
# copy-in/copy-out kernels around each collective; torchao's separate amax pass before each
# float8 cast (the casts themselves are costed as Transformer Engine's cast-transpose,
# :func:`fp8_cast_bytes`; the float8 GEMMs run at the FP8 ceiling, ``dtype="fp8"``). torchtitan's
# op-level selective recompute (every second matmul recomputed, the attention output kept)
# is ``recompute="selective-op"`` (:func:`recompute`).

DATA_PARALLEL_ENGINES = ("megatron", "fsdp2")
__all__ += ["DATA_PARALLEL_ENGINES", "fsdp2_units", "fsdp2_comm", "fsdp2_collectives",
            "fsdp2_memory", "check_data_parallel"]


@functools.lru_cache(maxsize=256)
def _fsdp_split(cfg):
    """(block parameters, root parameters, the linear weights' share of the blocks)."""
    blocks = sum(cfg.layer_params(i) for i in range(cfg.layers))
    b = cfg.param_breakdown()
    linear = b["attention"] + b["mlp"] + b["routed_experts"] + b["shared_experts"]
    return blocks, cfg.num_params() - blocks, linear / blocks


def fsdp2_units(job: Job, lay: Layouts, float8_all_gather=False):
    """One GPU's FSDP2 units before sharding (chapter 27): ``(block, root, gathered_width)``,
    the parameters of one (mean) transformer block after TP (and EP for the experts), those
    of the root unit (embedding, final norm and head; under PP a stage holds about half of
    them, the embedding or the head), and the bytes per parameter a gather moves (BF16, or
    1 byte for the linear weights with float8 all-gather)."""
    blocks, root, linear = _fsdp_split(job.cfg)
    expert = job.expert_params
    block = ((blocks - expert) + expert / lay.ep) / (job.cfg.layers * lay.tp)
    root = np.where(lay.pp > 1, root / 2, root) / lay.tp
    width = VALUE - (VALUE - 1) * linear if float8_all_gather else float(VALUE)
    return block, root, width


def _fsdp_groups(job: Job, lay: Layouts, hsdp_replicas):
    shard = lay.replicas / hsdp_replicas
    inside = lay.tp * shard <= job.gpus_per_node
    ab = tuple(np.where(inside, u, o) for u, o in zip(job.up_ab, job.out_ab))
    across = lay.tp * lay.replicas <= job.gpus_per_node
    rab = tuple(np.where(across, u, o) for u, o in zip(job.up_ab, job.out_ab))
    return shard, inside == across, ab, rab


def _unit_collectives(job, lay, params, width, hsdp_replicas):
    """(gather, reduce-scatter, replica all-reduce, same link) seconds of one unit of
    ``params`` parameters per GPU."""
    shard, same, ab, rab = _fsdp_groups(job, lay, hsdp_replicas)
    on = shard > 1
    g = np.where(on, comm.allgather_time(params * width, np.maximum(shard, 2), *ab), 0.0)
    grads = params * job.grad_bytes
    r = np.where(on, comm.reduce_scatter_time(grads, np.maximum(shard, 2), *ab), 0.0)
    a = 0.0
    if hsdp_replicas > 1:
        a = comm.allreduce_time(grads / shard, hsdp_replicas, *rab)
    return g, r, a, same


def _pass_exposed(layers, compute, comm_time):
    """What a pass of ``layers`` units exposes beyond their ``compute`` when each unit's
    communication ``comm_time`` is issued one unit ahead on a serial link: chapter 20's
    :func:`dtbook.zero.prefetch_step_time` (lookahead 1, ``"serial"``) minus the compute."""
    t = np.maximum(comm_time, 1e-300)
    return _zero.prefetch_step_time(layers, compute, t, 1, "serial") - layers * compute


def fsdp2_comm(job: Job, lay: Layouts, layers, unit_forward, unit_backward,
               hsdp_replicas=1, float8_all_gather=False):
    """Exposed seconds per step of FSDP2's per-unit all-gathers and reduce-scatters (chapter
    27; the section notes above): ``layers`` blocks of the slowest stage, each computing
    ``unit_forward`` and ``unit_backward`` seconds per micro-batch, plus the root unit.
    Candidates with ZeRO 0 or 1 (replicated parameters: DDP) get 0 here. Forward: the root's
    gather, then :func:`_pass_exposed` of the blocks' gathers. Backward: the blocks' gather of
    the next unit and reduce-scatter (and HSDP all-reduce) of this one, less the last
    block's gather (torchtitan keeps it), then the root's reduce (FSDP2 never reshards the
    root after forward: ``FSDPState._lazy_init``). ``zero == 3``
    without PP: every micro-batch; ``zero == 2`` without PP: every micro-batch gathers only
    in forward; with PP: one forward's gathers and one backward's reduce-scatters per step."""
    block, root, width = fsdp2_units(job, lay, float8_all_gather)
    g, r, a, same = _unit_collectives(job, lay, block, width, hsdp_replicas)
    rg, rr, ra, _ = _unit_collectives(job, lay, root, width, hsdp_replicas)

    def reduce(gather):   # one unit's backward traffic: its own link(s) serial, two links concurrent
        return np.where(same, gather + r + a, np.maximum(gather + r, a))

    gathers = rg + _pass_exposed(layers, unit_forward, g)
    reduces = _pass_exposed(layers, unit_backward, reduce(0.0)) + np.where(same, rr + ra, np.maximum(rr, ra))
    regather = _pass_exposed(layers, unit_backward, reduce(g)) - g \
        + np.where(same, rr + ra, np.maximum(rr, ra))
    per_mb = np.where(lay.zero == 3, gathers + regather, gathers + reduces)
    exposed = np.where(lay.pp > 1, gathers + reduces, lay.m * per_mb)
    return np.where(lay.zero >= 2, exposed, 0.0)


def fsdp2_collectives(layers, zero=3, pp=1, microbatches=1):
    """The all-gathers and reduce-scatters per step that :func:`fsdp2_comm` times, counted
    (chapter 27): ``{"all_gather": ..., "reduce_scatter": ...}`` for ``layers`` block units
    and the root. Per micro-batch without PP, ZeRO 3: forward gathers every block and the
    root (``layers + 1``), backward every block but the last (kept after forward) and not
    the root (never resharded): ``2 layers``; ZeRO 2 gathers only in forward; each unit's
    gradients are reduce-scattered once (``layers + 1``). With PP, one forward's gathers and
    one backward's reduce-scatters per step. ``tests/test_plan_fsdp.py`` counts them on a real
    FSDP2 run."""
    gathers = 2 * layers if zero == 3 and pp == 1 else layers + 1
    per = 1 if pp > 1 else microbatches
    return {"all_gather": per * gathers, "reduce_scatter": per * (layers + 1)}


def fsdp2_memory(job: Job, lay: Layouts, params, layers, hsdp_replicas=1,
                 float8_all_gather=False):
    """Bytes FSDP2 holds beyond what :func:`state_memory` counted for the candidate's ZeRO
    stage (chapter 27): the model state sharded over the shard group
    (:func:`dtbook.memory.zero_state_bytes`, stage 3: FP32 parameters and gradients, Adam's
    moments; HSDP shards over ``dp * cp / hsdp_replicas``), the root unit gathered, and
    either two gathered blocks and one reduce-scatter input (:func:`dtbook.memory.
    sharded_buffer_bytes`) or, when blocks are not resharded after forward (ZeRO column 2,
    or PP), every block of the ``layers`` gathered and, under PP, their unsharded gradients
    kept across micro-batches. 0 for ZeRO 0 and 1."""
    block, root, width = fsdp2_units(job, lay, float8_all_gather)
    shard = lay.replicas / hsdp_replicas
    fsdp_state = memory.zero_state_bytes(params, shard, 3)
    listed = state_memory(job, lay, params)
    rolling = memory.sharded_buffer_bytes(block, gathers=2, reduces=1, param_bytes=width,
                                          reduce_bytes=job.grad_bytes)
    held = memory.sharded_buffer_bytes(block * layers, gathers=1, reduces=0, param_bytes=VALUE) \
        + np.where(lay.pp > 1, VALUE * (block * layers + root), 0.0) \
        + memory.sharded_buffer_bytes(block, gathers=0, reduces=1, reduce_bytes=job.grad_bytes)
    buffers = VALUE * root + np.where((lay.zero == 3) & (lay.pp == 1), rolling, held)
    return np.where(lay.zero >= 2, fsdp_state + buffers - listed, 0.0)


def check_data_parallel(engine, hsdp_replicas, fsdp_float8_all_gather, *, dp, cp, zero, dtype):
    """``ValueError`` naming the argument for a bad data-parallel engine choice (chapter 27):
    ``engine`` one of :data:`DATA_PARALLEL_ENGINES`; ``hsdp_replicas`` a whole number that
    divides ``dp * cp``, above 1 only with FSDP2 sharding (``zero`` 2 or 3);
    ``fsdp_float8_all_gather`` only with FSDP2 and ``dtype="fp8"`` (torchao's float8 linears)."""
    if engine not in DATA_PARALLEL_ENGINES:
        raise ValueError(f"data_parallel_engine must be one of {DATA_PARALLEL_ENGINES}, "
                         f"got {engine!r}")
    if isinstance(hsdp_replicas, bool) or not isinstance(hsdp_replicas, (int, np.integer)) \
            or hsdp_replicas < 1:
        raise ValueError(f"hsdp_replicas must be a whole number >= 1, got {hsdp_replicas!r}")
    if hsdp_replicas > 1 and (engine != "fsdp2" or zero < 2):
        raise ValueError("hsdp_replicas > 1 needs data_parallel_engine='fsdp2' with zero 2 or 3")
    if (dp * cp) % hsdp_replicas:
        raise ValueError(f"hsdp_replicas ({hsdp_replicas}) must divide dp*cp ({dp * cp})")
    if fsdp_float8_all_gather and (engine != "fsdp2" or dtype != "fp8"):
        raise ValueError("fsdp_float8_all_gather needs data_parallel_engine='fsdp2' and dtype='fp8'")


from .. import zero as _zero  # noqa: E402  (chapter 20's prefetch schedule, for FSDP2 above)


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
    write 4): 14 bytes more (W3, issue 22)."""
    local = params / np.where(lay.zero >= 1, lay.replicas, 1)
    adam = offload.optimizer_step_bytes(grad_bytes=MAIN_GRAD) + MAIN_GRAD   # + the copy's read
    if job.grad_bytes < MAIN_GRAD:
        adam = adam + (job.grad_bytes + MAIN_GRAD) + 2 * MAIN_GRAD
    return ((adam + MAIN_GRAD) * local + MAIN_GRAD * params) / job.hbm


# ------------------------------------------------------------------ memory

def state_memory(job: Job, lay: Layouts, params):
    """Model-state bytes per GPU: :func:`dtbook.memory.zero_state_bytes` of the GPU's
    parameters under each candidate's ZeRO stage over the ``dp * cp`` replicas, with the
    gradient buffer the time model reduces (``job.grad_bytes``): Megatron-LM keeps its
    gradients in a contiguous FP32 buffer beside BF16 parameters (18 bytes per parameter,
    6 + 12/d with the distributed optimizer), and with FP16 parameters FP16 gradients plus
    an FP32 copy of the main gradients held with the optimizer state (20, 4 + 16/d): the
    README's "Distributed Optimizer" table (github.com/NVIDIA/Megatron-LM, README.md). The
    routed experts' share is sharded over their own copies only (:func:`expert_replicas`),
    not over every replica of the dense weights."""
    widths = dict(grad_bytes=job.grad_bytes,
                  optimizer_bytes=8 + (MAIN_GRAD if job.grad_bytes < MAIN_GRAD else 0))
    expert = _expert_params_per_gpu(job, lay) if job.expert_params else 0.0
    state = np.zeros(np.broadcast(params, lay.zero).shape)
    for stage in np.unique(lay.zero):
        stage = int(stage)
        both = memory.zero_state_bytes(params - expert, lay.replicas, stage, **widths)
        if job.expert_params:       # a dense model skips the second pass (search time)
            both = both + memory.zero_state_bytes(expert, expert_replicas(job, lay), stage,
                                                  **widths)
        state = np.where(lay.zero == stage, both, state)
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


def _op_saved_bytes(job: Job, lay: Layouts):
    """What one block keeps under op-level selective recompute, per GPU
    (:func:`dtbook.activations.alternate_matmul_saved_bytes`): the outputs of its first,
    third, ... matmul (column-parallel ones split by TP; a row-parallel one's partial sums
    whole), the attention kernel's output and log-sum-exp (split by TP) and the block's
    input (split by TP under sequence parallelism). The first block's shapes stand for
    every block, as :func:`_layer_activations` takes one layer for all."""
    cfg, tp = job.cfg, lay.tp
    widths = [g["out_features"] if g["name"] in _ROW_PARALLEL + _DUPLICATED
              else g["out_features"] / tp for g in _op_matmuls(cfg, 0)]
    value_dim = cfg.v_head_dim if cfg.is_mla else cfg.head_dim
    return activations.alternate_matmul_saved_bytes(
        lay.mb * job.seq / lay.cp, widths, block_input=cfg.hidden / np.where(lay.sp == 1, tp, 1),
        attention_output=cfg.heads * value_dim / tp, attention_stats=cfg.heads / tp,
        value_bytes=VALUE)


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
    only its input, and one layer's whole activations exist while it is recomputed; under
    op-level recompute a layer keeps :func:`_op_saved_bytes`, and the rest of one layer's
    exists while it is recomputed."""
    rc = lay.rc
    whole = _layer_activations(job, lay, "none")
    kept = whole
    if np.any(rc == 1):
        kept = np.where(rc == 1, _layer_activations(job, lay, "selective"), whole)
    if np.any(rc == 2):
        kept = np.where(rc == 2, _layer_activations(job, lay, "full"), kept)
    if np.any(rc == 3):
        kept = np.where(rc == 3, np.minimum(_op_saved_bytes(job, lay), whole), kept)
    transient = np.select([rc == 2, rc == 3], [whole, whole - kept], 0.0)

    def held(ranks_in_flight, layers_per_chunk):
        return ranks_in_flight * layers_per_chunk * kept + transient

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


# ================================================================== W3 (issue 22): framework
def communicators(lay: Layouts):
    """NCCL communicators one GPU runs collectives or sends in (chapter 27): one per parallel
    group of more than one rank, tensor, context, expert, pipeline and data-parallel
    (``dp * cp`` replicas). Each holds its own buffers (:func:`dtbook.memory.nccl_buffer_bytes`)."""
    return ((lay.tp > 1).astype(float) + (lay.cp > 1) + (lay.ep > 1) + (lay.pp > 1)
            + (lay.replicas > 1))


def framework_memory(job: Job, lay: Layouts):
    """Bytes per GPU the software stack takes beside the model (chapter 27):
    :func:`dtbook.memory.framework_bytes`, the CUDA context and NCCL's buffers of the GPU's
    :func:`communicators`. The driver's reserve (:func:`dtbook.memory.driver_reserved_bytes`,
    361 MiB on an H100) is not added: it needs the accelerator's nvidia-smi total, which
    :mod:`dtbook.hardware` does not yet hold as a figure (an accelerator a user registers
    with the H100's figures must plan as the H100 does)."""
    return memory.framework_bytes(communicators(lay))
# ================================================================== end of W3's section


# ------------------------------------------------------------------ W1: layer kinds (MoE,
# attention variants) and uneven pipeline splits

class LayerKinds(NamedTuple):
    """Compute of each kind of layer for one micro-batch on one GPU (seconds, forward):
    ``attention`` maps a window (``None``: full causal attention) to ``(linear, core,
    core_backward)`` of the attention half of a block, ``mlp`` maps ``False`` (a dense MLP)
    and ``True`` (a mixture of experts) to the linear forward of the MLP half; ``op_again``
    maps ``"attention"`` and each MLP kind to the forward of the matmuls op-level selective
    recompute re-runs in that half (:func:`_op_recomputed`)."""

    attention: dict
    mlp: dict
    op_again: dict = None


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


@functools.lru_cache(maxsize=1024)
def _rank_profiles(cfg, pp, vpp, first, last):
    """Distinct pipeline ranks of a split: ``(counts, layers, moe, is_first, is_last)`` with
    ``counts`` the rank's blocks of each kind (attention windows of :func:`_windows`, then
    MLP kinds of :func:`_mlp_kinds`), from :func:`dtbook.pipeline_parallel.stage_layers` over
    ``pp * vpp`` model chunks, rank r holding chunks r, r + pp, ... (interleaving)."""
    kinds = _block_kinds(cfg)
    wins = [w for w, _ in _windows(cfg)]
    mlps = _mlp_kinds(cfg)
    chunks = pipeline_parallel.stage_layers(cfg.layers, pp * vpp,
                                            first if vpp == 1 else None,
                                            last if vpp == 1 else None)
    starts = np.concatenate([[0], np.cumsum(chunks)])
    out = {}
    for r in range(pp):
        blocks = [i for c in range(r, pp * vpp, pp) for i in range(starts[c], starts[c + 1])]
        counts = tuple([sum(kinds[i][0] == w for i in blocks) for w in wins]
                       + [sum(kinds[i][1] == m for i in blocks) for m in mlps])
        key = (counts, r == 0, r == pp - 1)
        if key not in out:
            out[key] = (counts, len(blocks), sum(kinds[i][1] for i in blocks), r == 0, r == pp - 1)
    return tuple(out.values())


def splits(cfg, pp, vpp=1, first=None, last=None):
    """True where ``pp * vpp`` model chunks split the layers
    (:func:`dtbook.pipeline_parallel.stage_layers`: evenly, or with the lighter first and
    last stage it picks, or ``first``/``last`` layers on them as given)."""
    pp, vpp = np.asarray(pp), np.asarray(vpp)
    out = np.zeros(np.broadcast(pp, vpp).shape, dtype=bool)
    given = first is not None or last is not None
    for p, v in set(zip(np.broadcast_to(pp, out.shape).ravel().tolist(),
                        np.broadcast_to(vpp, out.shape).ravel().tolist())):
        try:
            _rank_profiles(cfg, int(p), int(v), first, last)
            ok = not (given and (p == 1 or v > 1))     # given ends: pp > 1, vpp 1
        except ValueError:
            ok = False
        out[(pp == p) & (vpp == v)] = ok
    return out


def slowest_stage(job: Job, lay: Layouts, layer: LayerCompute) -> Stage:
    """The slowest pipeline rank for one micro-batch: every distinct rank of the split
    (:func:`_rank_profiles`, :func:`dtbook.pipeline_parallel.stage_layers`: even, Llama 3's
    and DeepSeek's lighter first and last stage, or ``first_stage_layers`` /
    ``last_stage_layers`` as given) adds up the compute of the kinds of block it holds
    (:class:`LayerKinds`: full or windowed attention, dense or MoE MLP); the last also runs
    the logits (forward once, backward twice) and, for a model with multi-token prediction
    (DeepSeek-V3, ``mtp_layers``), each MTP module: one more block like the last, its
    2h -> h projection and the logits again (DeepSeek-V3 report, Sec. 2.2). The busiest
    decides, its compute and its MoE layers' all-to-alls (:func:`ep_comm`, which only a rank
    with more MoE layers pays more of) together; ties go to the rank without the logits. The
    MTP modules count as blocks of the last rank (``layers``, ``moe``)."""
    cfg, kinds = job.cfg, layer.kinds
    n = np.broadcast(lay.pp, lay.vpp, layer.linear).shape
    attn = [kinds.attention[w] for w, _ in _windows(cfg)]
    fwd_k = [a[0] + a[1] for a in attn] + [kinds.mlp[m] for m in _mlp_kinds(cfg)]
    bwd_k = [2 * a[0] + a[2] for a in attn] + [2 * kinds.mlp[m] for m in _mlp_kinds(cfg)]
    lin_k = [a[0] for a in attn] + [kinds.mlp[m] for m in _mlp_kinds(cfg)]
    core_k = [a[1] for a in attn] + [0.0] * len(_mlp_kinds(cfg))
    cbwd_k = [a[2] for a in attn] + [0.0] * len(_mlp_kinds(cfg))
    op = kinds.op_again or {}
    op_k = [op.get("attention", 0.0)] * len(attn) + [op.get(m, 0.0) for m in _mlp_kinds(cfg)]
    F, B, LIN, CORE, CBWD, OP = (np.stack([np.broadcast_to(x, n) for x in v])
                                 for v in (fwd_k, bwd_k, lin_k, core_k, cbwd_k, op_k))
    logits = np.broadcast_to(layer.logits, n)
    extra_f = logits
    if getattr(cfg, "mtp_layers", 0):
        last_kind = _block_kinds(cfg)[-1]
        w_i = [w for w, _ in _windows(cfg)].index(last_kind[0])
        m_i = len(attn) + _mlp_kinds(cfg).index(last_kind[1])
        proj = _matmul_time(lay.tokens, cfg.hidden, 2 * cfg.hidden, gpu=job.gpu, dtype=job.dtype)
        mtp_f = F[w_i] + F[m_i] + proj + logits
        mtp_b = B[w_i] + B[m_i] + 2 * proj + 2 * logits
    a2a = np.broadcast_to(_alltoall_per_moe_layer(job, lay), n)
    mtp = getattr(cfg, "mtp_layers", 0)
    mtp_moe = mtp * int(_block_kinds(cfg)[-1][1]) if mtp else 0
    pp, vpp = np.broadcast_to(lay.pp, n).ravel(), np.broadcast_to(lay.vpp, n).ravel()
    stride = int(vpp.max()) + 1
    keys = pp.astype(np.int64) * stride + vpp.astype(np.int64)
    present = np.zeros(int(keys.max()) + 1, dtype=bool)
    present[keys] = True
    uniq = np.flatnonzero(present)
    lookup = np.zeros(present.size, dtype=np.int64)
    lookup[uniq] = np.arange(uniq.size)
    inv = lookup[keys]                    # each candidate's split, without sorting them all
    tables = [sorted(_rank_profiles(cfg, int(k // stride), int(k % stride), job.first_stage_layers,
                                    job.last_stage_layers), key=lambda pr: pr[4])
              for k in uniq]               # ties go to a rank without the logits: it comes first
    R, K = max(len(t) for t in tables), F.shape[0]
    cnt, nls, nms = np.zeros((len(tables), R, K)), np.zeros((len(tables), R)), np.zeros((len(tables), R))
    last_rank, valid = np.zeros((len(tables), R)), np.zeros((len(tables), R), dtype=bool)
    for u, t in enumerate(tables):
        for r, (counts, nl, nm, _, is_last) in enumerate(t):
            cnt[u, r], nls[u, r], nms[u, r] = counts, nl, nm
            last_rank[u, r], valid[u, r] = is_last, True
    ends = np.array([[max(pr[1] for pr in t), next(pr[1] for pr in t if pr[4]),
                      next(pr[1] for pr in t if pr[3])] for t in tables])[inv]
    F, B, LIN, CORE, CBWD, OP = (x.reshape(K, -1) for x in (F, B, LIN, CORE, CBWD, OP))
    extra_f, logits_flat, a2a = extra_f.reshape(-1), logits.reshape(-1), a2a.reshape(-1)
    def dot(c, x):              # sum over the kinds of count times seconds, per candidate
        return sum(c[k] * x[k] for k in range(K))

    best = None
    for r in range(R):          # each rank's sum over the kinds it holds; keep the slowest
        c = cnt[:, r, :][inv].T                           # (kinds, candidates)
        last = last_rank[inv, r]
        f = dot(c, F) + last * extra_f
        b = dot(c, B) + last * 2 * logits_flat
        nl, nm = nls[inv, r], nms[inv, r]
        if mtp:
            f = f + last * mtp * mtp_f.reshape(-1)
            b = b + last * mtp * mtp_b.reshape(-1)
            nl, nm = nl + last * mtp, nm + last * mtp_moe
        cost = np.where(valid[inv, r], f + b + nm * a2a, -np.inf)
        row = dict(cost=cost, fwd=f, bwd=b, layers=nl, moe=nm, own=nls[inv, r], c=c)
        if best is None:
            best = row
        else:
            slower = cost > best["cost"]
            best = {k: np.where(slower, row[k], best[k]) for k in best}
    span = np.maximum(best["own"], 1)       # the stage's own blocks (the MTP module apart)
    c = best["c"]
    out = dict(layers=best["layers"].reshape(n), moe=best["moe"].reshape(n),
               fwd=best["fwd"].reshape(n), bwd=best["bwd"].reshape(n),
               lin=(dot(c, LIN) / span).reshape(n),
               core=(dot(c, CORE) / span).reshape(n),
               cbwd=(dot(c, CBWD) / span).reshape(n),
               op=(dot(c, OP) / span).reshape(n),
               busiest=ends[:, 0].reshape(n), last=ends[:, 1].reshape(n),
               first=ends[:, 2].reshape(n))
    mean = LayerCompute(out["lin"], out["core"], out["cbwd"], logits, op_again=out["op"])
    return Stage(out["layers"], out["busiest"], out["last"], out["fwd"], out["bwd"],
                 out["first"], out["moe"], mean)
