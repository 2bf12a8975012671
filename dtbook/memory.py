"""The memory equation: how many bytes a model's training state takes, and how many devices hold it.

Chapter 01 derives the model-state part for mixed-precision Adam: every parameter carries a
16-bit copy of itself (2 bytes), a 16-bit gradient (2 bytes), an fp32 master copy (4 bytes)
and Adam's two fp32 moments m and v (8 bytes), so

    M = 2Ψ + 2Ψ + 12Ψ = 16Ψ bytes.

The byte counts are arguments, so the same function covers fp32 training (4 + 4 + 0 + 8),
SGD with momentum (optimizer_bytes=4), or an 8-bit optimizer. Chapter 20's ZeRO sharding is
:func:`zero_state_bytes`.

Chapter 19 writes the whole equation for one device, :func:`device_memory`: the model
states of its share of the model (ZeRO 0-3 over the data-parallel group), the activations
of the micro-batches its pipeline stage holds at once (per layer from
:mod:`dtbook.activations`, split by tensor, sequence and context parallelism, times the
schedule's activations in flight from :mod:`dtbook.pipeline_parallel`, less what
recomputation drops), the fp32 logits, the buffers that are easy to forget (communication buckets, a
gradient-accumulation buffer, kernel workspace) and an allowance for fragmentation.
:func:`ddp_bucket_bytes` and :func:`sharded_buffer_bytes` size the communication buffers.

All results are in bytes (SI base unit); convert at the edges with dtbook.units.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from . import _validate as check
from . import activations as act

#: Bytes per parameter of each part of the mixed-precision Adam state (chapter 01).
MIXED_PRECISION_ADAM = {"params": 2, "grads": 2, "master": 4, "optimizer": 8}


def model_state_breakdown(params, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Bytes of each part of the model state, as a dict (chapter 01).

    Keys: ``"params"`` (the working copy the forward pass reads), ``"grads"``, ``"master"``
    (the fp32 copy the optimizer updates; 0 when training in fp32 without one) and
    ``"optimizer"`` (Adam's m and v: 4 + 4 bytes in fp32). Defaults are mixed-precision Adam.
    """
    check.nonnegative("params", params)
    check.nonnegative("param_bytes", param_bytes)
    check.nonnegative("grad_bytes", grad_bytes)
    check.nonnegative("master_bytes", master_bytes)
    check.nonnegative("optimizer_bytes", optimizer_bytes)
    return {
        "params": param_bytes * params,
        "grads": grad_bytes * params,
        "master": master_bytes * params,
        "optimizer": optimizer_bytes * params,
    }


def model_state_bytes(params, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Total bytes of parameters, gradients, master weights and optimizer state (chapter 01).

    With the defaults (mixed-precision Adam) this is 16 bytes per parameter:
    ``model_state_bytes(13e9) == 208e9`` (208 GB, decimal). Activations are not included.
    """
    parts = model_state_breakdown(params, param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    return parts["params"] + parts["grads"] + parts["master"] + parts["optimizer"]


# What each ZeRO stage shards over the data-parallel group (chapter 20): stage 1 the
# optimizer states (fp32 master copy and moments), stage 2 also the gradients, stage 3 also
# the parameters. Stage 0 is plain data parallelism: every rank holds everything.
_ZERO_SHARDED = {0: (), 1: ("master", "optimizer"), 2: ("master", "optimizer", "grads"),
                 3: ("master", "optimizer", "grads", "params")}


def zero_state_breakdown(params, dp, stage, param_bytes=2, grad_bytes=2, master_bytes=4,
                         optimizer_bytes=8):
    """Bytes of each part of the model state on one device under ZeRO ``stage`` (0-3) over
    ``dp`` data-parallel ranks, as a dict with the keys of :func:`model_state_breakdown`
    (chapters 19, 20). A sharded part holds 1/dp of its bytes; the others are replicated.
    Shards are taken as even (real implementations pad or, like ``ZeroRedundancyOptimizer``,
    split by whole parameters, chapter 20 shows by how much)."""
    check.count("dp", dp)
    check.scalar("stage", stage)  # one stage per call: an array of them is not a choice
    if isinstance(stage, np.ndarray):
        stage = stage.item()
    if stage not in _ZERO_SHARDED:
        raise ValueError(f"stage must be a ZeRO stage 0, 1, 2 or 3; got {stage!r}")
    parts = model_state_breakdown(params, param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    return {k: v / dp if k in _ZERO_SHARDED[stage] else v for k, v in parts.items()}


def zero_state_bytes(params, dp, stage, param_bytes=2, grad_bytes=2, master_bytes=4,
                     optimizer_bytes=8):
    """Model-state bytes per device under ZeRO ``stage`` over ``dp`` ranks (chapters 19, 20).

    With mixed-precision Adam (the defaults, K = 12 bytes of optimizer state per parameter):
    stage 0: 16Ψ; stage 1: 4Ψ + 12Ψ/dp; stage 2: 2Ψ + 14Ψ/dp; stage 3: 16Ψ/dp. Stage 0
    equals :func:`model_state_bytes`.
    """
    parts = zero_state_breakdown(params, dp, stage, param_bytes, grad_bytes, master_bytes,
                                 optimizer_bytes)
    return parts["params"] + parts["grads"] + parts["master"] + parts["optimizer"]


def min_devices(total_bytes, device_bytes):
    """The fewest devices of ``device_bytes`` each whose memory adds up to ``total_bytes``:
    ``ceil(total_bytes / device_bytes)`` (chapter 01).

    A lower bound: it assumes the state splits perfectly and leaves no room for activations,
    buffers or fragmentation. Returns an int for scalars, an array for arrays, and
    ``ceiling(...)`` for SymPy expressions.
    """
    check.nonnegative("total_bytes", total_bytes)
    check.positive("device_bytes", device_bytes)
    if isinstance(total_bytes, int) and isinstance(device_bytes, int):
        return -(-total_bytes // device_bytes)  # exact for integers of any size
    ratio = total_bytes / device_bytes
    if isinstance(ratio, sp.Basic):
        return sp.ceiling(ratio)
    if isinstance(ratio, np.ndarray):
        return np.ceil(ratio).astype(int)
    return int(math.ceil(ratio))


# --------------------------------------------------------------------------------------
# Chapter 19: the whole equation, per device
# --------------------------------------------------------------------------------------

#: The order in which :class:`MemoryBreakdown` lists its parts.
PARTS = ("params", "grads", "master", "optimizer", "accum_buffer", "activations", "logits",
         "buckets", "workspace", "fragmentation")


class MemoryBreakdown(dict):
    """Bytes per part on one device, in the order of :data:`PARTS` (chapter 19): a dict
    with ``.total``, ``.model_states`` and a readable ``str``."""

    @property
    def total(self):
        return sum(self.values())

    @property
    def model_states(self):
        return self["params"] + self["grads"] + self["master"] + self["optimizer"]

    def __str__(self):
        from .units import fmt_bytes

        def show(v):
            return fmt_bytes(float(v)) if not isinstance(v, sp.Basic) or v.is_number else str(v)
        rows = [f"{k:<14}{show(v):>14}" for k, v in self.items()]
        return "\n".join(rows + [f"{'total':<14}{show(self.total):>14}"])


def _symbolic(*values):
    return any(isinstance(v, sp.Basic) and v.free_symbols for v in values)


def quadratic_crossover_seq(hidden, heads, linear_coeff=34, quadratic_coeff=5):
    """The sequence length at which a layer's attention-matrix activations (quadratic_coeff
    · a·s²·b) equal the rest (linear_coeff · s·b·h): s* = linear·h/(quadratic·a)
    (chapter 19). The complete count of chapter 06 (bytes, with dropout) is 34 and 5,
    so s* = 6.8·h/a; the original edition's count (elements) is 11 and 1, so s* = 11·h/a."""
    check.positive("hidden", hidden)
    check.positive("heads", heads)
    check.positive("linear_coeff", linear_coeff)
    check.positive("quadratic_coeff", quadratic_coeff)
    return linear_coeff * hidden / (quadratic_coeff * heads)


def ddp_bucket_bytes(params, grad_bytes=2, gradient_as_bucket_view=False):
    """Bytes DDP's gradient buckets add to a device (chapter 19): DDP copies every gradient
    into flat bucket buffers and all-reduces those, so the buckets together hold all Ψ
    gradients again, ``grad_bytes``·Ψ, unless ``gradient_as_bucket_view=True`` makes the
    gradients views into the buckets (0 extra). Pass it as ``device_memory(bucket_bytes=...)``.
    """
    check.nonnegative("params", params)
    check.nonnegative("grad_bytes", grad_bytes)
    return 0 * params if gradient_as_bucket_view else grad_bytes * params


def sharded_buffer_bytes(unit_params, gathers=2, reduces=1, param_bytes=2, reduce_bytes=2):
    """Bytes of ZeRO-3 / FSDP's communication buffers on a device at their peak (chapter 19).

    Each all-gather fills an output buffer with a whole unit's parameters (``unit_params``
    of them, ``param_bytes`` each), and each reduce-scatter reads an input buffer with a
    whole unit's gradients (``reduce_bytes`` each; 4 when gradients are reduced in fp32).
    ``gathers`` units are gathered at once (the one computing and the one prefetched: 2 by
    default, FSDP2's one-unit lookahead) and ``reduces`` reduce-scatters are in flight:
    ``(gathers·param_bytes + reduces·reduce_bytes)·unit_params``. The scattered output, the
    gradient shard, is counted with the gradients. Pass it as
    ``device_memory(bucket_bytes=...)``.
    """
    check.nonnegative("unit_params", unit_params)
    check.nonnegative("gathers", gathers)
    check.nonnegative("reduces", reduces)
    check.nonnegative("param_bytes", param_bytes)
    check.nonnegative("reduce_bytes", reduce_bytes)
    return (gathers * param_bytes + reduces * reduce_bytes) * unit_params


_QUADRATIC = ("softmax_output", "attn_dropout_mask", "attn_dropout_output")


def device_memory(params, layers, hidden, heads, vocab, *, batch, seq, ffn_hidden=None,
                  tp=1, sequence_parallel=False, cp=1, pp=1, dp=1, zero_stage=0,
                  schedule="1f1b", microbatches=1, virtual_stages=1, stage=0,
                  recompute="none", attention="flash", dropout=False, value_bytes=2,
                  mask_bytes=1, norm_stat_bytes=0, param_bytes=2, grad_bytes=2,
                  master_bytes=4, optimizer_bytes=8, accum_bytes=0, logits_bytes=4,
                  bucket_bytes=0, workspace_bytes=0, fragmentation=0.0):
    """Bytes on one device of a training run, part by part, as a :class:`MemoryBreakdown`
    (chapter 19). Numbers or SymPy symbols.

    The model (``params`` Ψ, ``layers`` L, ``hidden``, ``heads``, ``vocab``, ``ffn_hidden``)
    trains on micro-batches of ``batch`` sequences of ``seq`` tokens. The device is pipeline
    rank ``stage`` of ``pp``, one of ``tp`` tensor-parallel, ``cp`` context-parallel and
    ``dp`` data-parallel ranks. Parts:

    - ``params``, ``grads``, ``master``, ``optimizer``: :func:`zero_state_breakdown` of
      Ψ/(tp·pp) parameters over ``dp`` ranks at ``zero_stage``, with the byte widths given;
    - ``accum_buffer``: a separate gradient-accumulation buffer of ``accum_bytes`` per
      parameter (4 for an fp32 "main_grad"; sharded like the gradients under ZeRO ≥ 2);
    - ``activations``: L/(pp·v) layers of :func:`dtbook.activations.activation_breakdown`
      (tp, sequence_parallel; sequence seq/cp, the s² terms of eager attention s²/cp),
      times :func:`dtbook.pipeline_parallel.activations_in_flight` (chapter 16's closed
      forms). ``recompute``: "none", "selective" (drop the attention matrix), "full" (keep each layer's input, recompute one layer at a time in
      backward) or an int k (keep every k-th layer's input, recompute blocks of k);
      ``attention``: "flash" (no s×s matrix) or "eager"; ``dropout`` adds the masks;
    - ``logits``: logits_bytes·(seq/cp)·batch·vocab/tp on the last stage (the fp32 logits,
      often the largest single tensor);
    - ``buckets``, ``workspace``: communication buffers and kernel workspace, in bytes, as
      the reader sets them (default none);
    - ``fragmentation``: the share f of the allocated memory that is lost, so the parts
      above are 1 − f of the total (default 0).
    """
    for name, value in (("params", params), ("batch", batch), ("seq", seq)):
        check.positive(name, value)
    for name, value in (("layers", layers), ("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp)):
        check.count(name, value)
    check.positive("hidden", hidden)
    check.positive("heads", heads)
    check.positive("vocab", vocab)
    for name, value in (("accum_bytes", accum_bytes), ("logits_bytes", logits_bytes),
                        ("bucket_bytes", bucket_bytes), ("workspace_bytes", workspace_bytes),
                        ("fragmentation", fragmentation)):
        check.nonnegative(name, value)
    if not _symbolic(fragmentation) and not fragmentation < 1:
        raise ValueError(f"fragmentation must be a share below 1, got {fragmentation!r}")
    if isinstance(recompute, str):
        if recompute not in ("none", "selective", "full"):
            raise ValueError("recompute must be 'none', 'selective', 'full' or a whole "
                             f"number k of layers per checkpoint, got {recompute!r}")
        k = 1 if recompute == "full" else None
    else:
        check.count("recompute", recompute)
        k = recompute
    from .pipeline_parallel import activations_in_flight   # it imports this module
    v = virtual_stages if schedule == "interleaved-1f1b" else 1
    in_flight = activations_in_flight(pp, microbatches, stage=stage, schedule=schedule,
                                      virtual_stages=v)

    parts = zero_state_breakdown(params / (tp * pp), dp, zero_stage, param_bytes, grad_bytes,
                                 master_bytes, optimizer_bytes)
    parts["accum_buffer"] = accum_bytes * params / (tp * pp) / (dp if zero_stage >= 2 else 1)

    options = dict(value_bytes=value_bytes, mask_bytes=mask_bytes, dropout=dropout,
                   attention=attention, norm_stat_bytes=norm_stat_bytes, tp=tp,
                   sequence_parallel=sequence_parallel)
    terms = act.activation_breakdown(batch, seq / cp, hidden, heads, ffn_hidden,
                                     recompute="selective" if recompute == "selective" else "none",
                                     **options)
    layer = sum(t * cp if key in _QUADRATIC else t for key, t in terms.items())
    chunk_layers = layers / (pp * v)
    if k is None:
        parts["activations"] = in_flight * chunk_layers * layer
    else:
        kept = act.activation_breakdown(batch, seq / cp, hidden, heads, ffn_hidden,
                                        recompute="full", **options)["layer_input"]
        parts["activations"] = in_flight * chunk_layers / k * kept + k * layer

    last = (pp == 1) if _symbolic(pp) else stage == pp - 1
    parts["logits"] = logits_bytes * (seq / cp) * batch * vocab / tp if last else 0
    parts["buckets"] = bucket_bytes
    parts["workspace"] = workspace_bytes
    used = sum(parts.values())
    parts["fragmentation"] = used * fragmentation / (1 - fragmentation)
    return MemoryBreakdown((key, parts[key]) for key in PARTS)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
