"""3D parallelism in closed form: what a (TP, PP, DP) layout communicates per axis, how long a
step takes, when interleaving pays, and what one GPU holds (chapter 24).

A layout of N = t·p·d GPUs runs tensor parallelism inside each pipeline stage (t ranks
share every layer), a pipeline of p stages (each holds L/p layers) and d data-parallel
replicas. Per training step, one GPU

* all-reduces an activation of b·s·H values 4 times per layer and microbatch over its TP
  group (2 forward, 2 backward, chapter 15);
* sends and receives one activation and one gradient of b·s·H values per microbatch across
  each stage boundary it touches (chapter 16);
* all-reduces the gradients of its Ψ/(t·p) parameters over its DP group once (chapter 14).

The step-time model puts these together with the pipeline bubble:
T_step = (m + (p − 1)/v)(T_c + T_TP + v·T_PP) + e·T_DP, where T_c, T_TP and T_PP are one
microbatch's compute, TP time and pipeline send/receive time (per model chunk) on one GPU.
The pipeline's sends are charged, not hidden: Megatron's schedules block on each paired
send/receive between steps, as :mod:`dtbook.plan.model` charges them too, and with v
model chunks a microbatch crosses v boundaries per GPU. It reuses
:mod:`dtbook.pipeline_parallel` (bubbles, :func:`~dtbook.pipeline_parallel.batch_time`),
:mod:`dtbook.tensor_parallel`, :mod:`dtbook.data_parallel` and :mod:`dtbook.comm`
(collective bytes and times), :mod:`dtbook.flops` and :mod:`dtbook.memory` (bytes per GPU);
nothing here re-derives them. The DP bytes one GPU sends are
:func:`dtbook.data_parallel.gradient_bytes_sent` of Ψ/(t·p).

Numbers, NumPy arrays and SymPy symbols alike; bytes, seconds, FLOP.
"""

from __future__ import annotations

from . import _validate as check
from . import comm, flops, memory
from . import data_parallel as dpar
from . import pipeline_parallel as pipe
from . import tensor_parallel as tpar

__all__ = ["layers_per_stage", "tp_calls_per_step", "tp_buffer_bytes_per_step",
           "pp_bytes_per_boundary", "megatron_rank_params",
           "microbatch_compute_time", "microbatch_tp_time", "dp_time", "step_time",
           "interleaving_gain", "model_states_per_gpu", "memory_per_gpu",
           "megatron_step_flops", "tp_latency"]

_TP_ALLREDUCES = tpar.allreduces_per_layer()      # 2 forward (g) + 2 backward (f), chapter 15


def layers_per_stage(layers, pp, virtual_stages=1):
    """Layers one pipeline rank holds per model chunk, L/(p·v) (chapter 24); with v = 1 the
    L/p of a stage."""
    check.count("layers", layers)
    check.count("pp", pp)
    check.count("virtual_stages", virtual_stages)
    return layers / (pp * virtual_stages)


# --------------------------------------------------------------------------- per axis

def tp_calls_per_step(layers, pp, microbatches):
    """TP all-reduces one GPU runs per step: 4·(L/p)·m, two forward and two backward per
    layer and microbatch (chapters 15, 24). Interleaving does not change it: a rank holds
    L/p layers in all."""
    check.count("microbatches", microbatches)
    return _TP_ALLREDUCES * layers_per_stage(layers, pp) * microbatches


def tp_buffer_bytes_per_step(batch, seq, hidden, layers, pp, microbatches, *,
                             bytes_per_value=2):
    """The buffers of those all-reduces added up, :func:`tp_calls_per_step` times
    :func:`dtbook.tensor_parallel.activation_bytes`, 4·(L/p)·m·b·s·H·sizeof: the n of each
    call (what :class:`dtbook.parallel.counting.CommCounter` counts), not the bytes a ring
    sends, which are 2(t − 1)/t of it, :func:`dtbook.tensor_parallel.layer_comm_bytes` per
    layer (chapter 24)."""
    return (tp_calls_per_step(layers, pp, microbatches)
            * tpar.activation_bytes(batch, seq, hidden, bytes_per_element=bytes_per_value))


def pp_bytes_per_boundary(batch, seq, hidden, microbatches, *, bytes_per_value=2):
    """Bytes crossing one stage boundary per step: m activations forward and m gradients
    backward, 2m·b·s·H·sizeof, in 2m messages (chapters 16, 24)."""
    check.count("microbatches", microbatches)
    return 2 * microbatches * pipe.p2p_message_bytes(batch, seq, hidden, bytes_per_value)


def megatron_rank_params(hidden, layers, tp):
    """Parameters one TP rank holds of ``layers`` Megatron layers of width H with biases and
    two LayerNorms (chapter 24): L·(12H²/t + 7H/t + 6H). Sharded: the Q, K, V, output and MLP
    weights (12H²) and the column-parallel biases (Q, K, V, fc1: 7H); replicated: the biases
    of the two row-parallel layers and the LayerNorms' weights and biases (6H)."""
    check.nonnegative("layers", layers)
    return layers * tpar.layer_params_per_rank(hidden, tp)


# --------------------------------------------------------------------------- step time

def microbatch_compute_time(params, batch, seq, tp, pp, peak_flops, passes=3):
    """One microbatch's compute on one GPU: passes·2Ψ·b·s/(t·p·F) (chapter 24). ``passes``
    counts forward-sized passes: 3 (forward, backward = 2 forwards), 4 with full recompute."""
    for name, v in (("params", params), ("batch", batch), ("seq", seq),
                    ("peak_flops", peak_flops), ("passes", passes)):
        check.positive(name, v)
    check.count("tp", tp)
    check.count("pp", pp)
    return passes * flops.forward_flops(params / (tp * pp), batch * seq) / peak_flops


def microbatch_tp_time(batch, seq, hidden, layers, tp, pp, alpha, beta, *, bytes_per_value=2):
    """One microbatch's TP communication on one GPU: 4·(L/p) ring all-reduces of b·s·H·sizeof
    over t ranks, 4(L/p)·(2(t − 1)α + 2(t − 1)/t · bsH·sizeof/β) (chapter 24, with
    :func:`dtbook.comm.allreduce_time`). Megatron does not overlap them with compute."""
    return layers_per_stage(layers, pp) * tpar.layer_comm_time(
        batch, seq, hidden, tp, alpha, beta, bytes_per_element=bytes_per_value)


def dp_time(params, tp, pp, dp, alpha, beta, *, grad_bytes=2):
    """The gradient all-reduce of Ψ/(t·p) parameters over d ranks, chapter 14's
    :func:`dtbook.data_parallel.comm_time`: 2(d − 1)α + 2(d − 1)/d · Ψ·s/(t·p·β)
    (chapters 14, 24). TP and PP shrink the buffer the DP axis reduces; the bytes one GPU
    sends are :func:`dtbook.data_parallel.gradient_bytes_sent` of Ψ/(t·p)."""
    check.count("tp", tp)
    check.count("pp", pp)
    check.count("dp", dp)
    check.positive("params", params)
    return dpar.comm_time(params / (tp * pp), dp, alpha, beta, grad_bytes=grad_bytes)


def step_time(t_compute, t_tp, pp, microbatches, t_dp=0, virtual_stages=1, dp_exposed=1,
              t_p2p=0):
    """The 3D step: T = (m + (p − 1)/v)(T_c + T_TP + v·T_PP) + e·T_DP (chapter 24).

    ``t_compute`` and ``t_tp`` are one microbatch's compute and TP time on one GPU, ``t_p2p``
    its pipeline send/receive time per model chunk (one activation forward, one gradient
    backward). The sends are charged, not hidden: Megatron's 1F1B waits for each paired
    ``send_forward_recv_backward`` before its next step, so each of the v chunks a
    microbatch passes on a GPU adds T_PP to that GPU's slot. The pipeline part is
    :func:`dtbook.pipeline_parallel.batch_time` of that slot, whose bubble is
    :func:`dtbook.pipeline_parallel.interleaved_bubble_fraction` of the slots (v = 1: 1F1B's
    (p − 1)/(m + p − 1)); ``dp_exposed`` e is the share of the gradient all-reduce not
    overlapped with the backward pass (1: none overlapped).
    """
    check.nonnegative("t_compute", t_compute)
    check.nonnegative("t_tp", t_tp)
    check.nonnegative("t_dp", t_dp)
    check.nonnegative("dp_exposed", dp_exposed)
    check.nonnegative("t_p2p", t_p2p)
    check.count("pp", pp)
    check.count("microbatches", microbatches)
    check.count("virtual_stages", virtual_stages)
    # batch_time adds a micro-batch's forward and backward; the slot is both together
    slot = t_compute + t_tp + virtual_stages * t_p2p
    return pipe.batch_time(pp, microbatches, slot, 0, virtual_stages=virtual_stages) \
        + dp_exposed * t_dp


def interleaving_gain(pp, microbatches, virtual_stages, t_work, t_comm):
    """Time v model chunks save per step against one, under :func:`step_time`'s model
    (chapter 24): b·(1 − 1/v)·T_work − (v − 1)·T_comm.

    ``t_work`` is the step's work at v = 1 without its pipeline sends, (m + p − 1)(T_c + T_TP),
    of which the 1F1B bubble fraction b = (p − 1)/(m + p − 1) is idle; v chunks divide the idle
    slots by v. ``t_comm`` is one pass of pipeline sends on a GPU, m·T_PP, which v chunks make
    v times: the same charge :func:`step_time` makes, so the gain is exactly
    ``step_time(..., 1) - step_time(..., v)``. Positive: interleaving pays."""
    check.count("pp", pp)
    check.count("microbatches", microbatches)
    check.count("virtual_stages", virtual_stages)
    check.nonnegative("t_work", t_work)
    check.nonnegative("t_comm", t_comm)
    idle = pipe.bubble_fraction(pp, microbatches) * t_work
    return idle * (1 - 1 / virtual_stages) - (virtual_stages - 1) * t_comm


def tp_latency(tp, alpha):
    """The latency floor of one ring all-reduce over t ranks, 2(t − 1)α (chapter 24): why TP
    alone cannot span a cluster."""
    check.count("tp", tp)
    check.nonnegative("alpha", alpha)
    return comm.allreduce_time(0, tp, alpha, 1)


# --------------------------------------------------------------------------- memory and FLOPs

def model_states_per_gpu(params, tp, pp, dp, zero_stage=0, param_bytes=2, grad_bytes=2,
                         master_bytes=4, optimizer_bytes=8):
    """Parameters, gradients, master weights and optimizer state on one GPU: the ZeRO stage's
    share (over d) of Ψ/(t·p) parameters, :func:`dtbook.memory.zero_state_bytes` (chapters
    19, 20, 24). Mixed-precision Adam without ZeRO: 16Ψ/(t·p)."""
    check.count("tp", tp)
    check.count("pp", pp)
    check.positive("params", params)
    return memory.zero_state_bytes(params / (tp * pp), dp, zero_stage, param_bytes,
                                   grad_bytes, master_bytes, optimizer_bytes)


def memory_per_gpu(params, layers, hidden, heads, vocab, *, batch, seq, tp, pp, dp,
                   microbatches, zero_stage=0, virtual_stages=1, recompute="none",
                   sequence_parallel=False, stage=0, value_bytes=2):
    """Bytes on pipeline rank ``stage`` of a 3D layout (chapter 24): the whole equation of
    :func:`dtbook.memory.device_memory` with 1F1B (interleaved when v > 1), flash attention,
    no dropout, mixed-precision Adam. Returns its :class:`~dtbook.memory.MemoryBreakdown`."""
    schedule = "1f1b" if virtual_stages == 1 else "interleaved-1f1b"
    return memory.device_memory(params, layers, hidden, heads, vocab, batch=batch, seq=seq,
                                tp=tp, sequence_parallel=sequence_parallel, pp=pp, dp=dp,
                                zero_stage=zero_stage, schedule=schedule,
                                microbatches=microbatches, virtual_stages=virtual_stages,
                                stage=stage, recompute=recompute, value_bytes=value_bytes)


def megatron_step_flops(batch, seq, layers, hidden, vocab, recompute=True):
    """FLOPs of one step of a GPT layer stack as Narayanan et al. (2021) count them,
    96·B·s·L·H²(1 + s/(6H) + V/(16·L·H)) with full recompute (chapter 24).

    That is 4 forward-sized passes of the layers (L times
    :func:`dtbook.tensor_parallel.layer_forward_flops`, 24BsH² + 4Bs²H: full, non-causal
    attention) and 3 of the logits (2BsHV each, :func:`dtbook.flops.training_flops` of the
    H·V head). ``recompute=False`` counts 3 passes of the
    layers: the model FLOPs an MFU is measured against."""
    for name, v in (("batch", batch), ("seq", seq), ("layers", layers), ("hidden", hidden),
                    ("vocab", vocab)):
        check.positive(name, v)
    passes = 4 if recompute else 3
    return (passes * layers * tpar.layer_forward_flops(batch, seq, hidden)
            + flops.training_flops(hidden * vocab, batch * seq))


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
