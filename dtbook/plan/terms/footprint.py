"""Memory per GPU in the planner (chapter 27): parameters per GPU, model state under ZeRO
(chapter 19's and 20's :func:`dtbook.memory.zero_state_bytes`), activations times the
micro-batches in flight, and what the framework takes beside the model.
"""

from __future__ import annotations

import numpy as np

from ... import activations, memory, pipeline_parallel
from .job import Job, Layouts, MAIN_GRAD, Stage, VALUE
from .compute import _DUPLICATED, _ROW_PARALLEL, _expert_layout, _op_matmuls

__all__ = ["params_per_gpu", "expert_replicas", "state_memory", "activation_memory",
           "communicators", "framework_memory"]


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
