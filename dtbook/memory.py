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


def quadratic_crossover_seq(hidden, heads, linear_coeff=None, quadratic_coeff=None, **options):
    """The sequence length at which a layer's attention-matrix activations equal the rest
    (chapter 19). For a count linear_coeff·s·b·h + quadratic_coeff·a·s²·b it is
    s* = linear·h/(quadratic·a). Without coefficients they are read off
    :func:`dtbook.activations.activation_breakdown` (its
    :data:`~dtbook.activations.QUADRATIC_TERMS` against the rest), with ``options`` as
    there: chapter 06's complete count (bytes, with
    dropout) gives 34 and 5, s* = 6.8·h/a, and ``dropout=False`` 32 and 2. The original
    edition's count (elements) is 11 and 1, s* = 11·h/a."""
    check.positive("hidden", hidden)
    check.positive("heads", heads)
    if linear_coeff is None and quadratic_coeff is None:
        # one token of one sequence: every term is its coefficient times h (or a)
        terms = act.activation_breakdown(1, 1, hidden, heads, **options)
        quadratic = sum(t for key, t in terms.items() if key in act.QUADRATIC_TERMS)
        if not _symbolic(quadratic) and quadratic == 0:
            raise ValueError("options keep no attention matrix (attention='flash' or recompute), "
                             "so there is no crossover")
        return (sum(terms.values()) - quadratic) / quadratic
    if linear_coeff is None or quadratic_coeff is None or options:
        raise ValueError("give linear_coeff and quadratic_coeff together, or activation_breakdown "
                         f"options without them; got linear_coeff={linear_coeff!r}, "
                         f"quadratic_coeff={quadratic_coeff!r}, options={sorted(options)}")
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
        if recompute not in act.RECOMPUTE:
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
    layer = sum(t * cp if key in act.QUADRATIC_TERMS else t for key, t in terms.items())
    chunk_layers = layers / (pp * v)
    if k is None:
        parts["activations"] = in_flight * chunk_layers * layer
    else:
        kept = act.activation_breakdown(batch, seq / cp, hidden, heads, ffn_hidden,
                                        recompute="full", **options)["layer_input"]
        # every in-flight micro-batch keeps each k-th layer's input; one block of k layers
        # is recomputed at a time
        parts["activations"] = act.checkpointed_activation_bytes(
            chunk_layers, layer, k, boundary_bytes=in_flight * kept)

    last = (pp == 1) if _symbolic(pp) else stage == pp - 1
    parts["logits"] = logits_bytes * (seq / cp) * batch * vocab / tp if last else 0
    parts["buckets"] = bucket_bytes
    parts["workspace"] = workspace_bytes
    used = sum(parts.values())
    parts["fragmentation"] = used * fragmentation / (1 - fragmentation)
    return MemoryBreakdown((key, parts[key]) for key in PARTS)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)


# ======================================================================================
# W3, issue 22 item 5: what the framework takes beside the model (chapter 19)
# ======================================================================================
# Below the chapter's equation sit allocations no tensor of the model owns: what the
# driver keeps of the HBM, the CUDA context, and NCCL's buffers. Each figure is a source's.

#: NCCL's per-connection FIFO of each protocol, as NCCL sizes it by default (NVIDIA/nccl
#: src/init.cc, DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE and DEFAULT_BUFFSIZE, with the
#: constants of src/include/device.h): LL, NCCL_LL_LINES_PER_THREAD (8) x NCCL_LL_MAX_NTHREADS
#: (512) x NCCL_STEPS (8) x a 16-byte ncclLLFifoLine = 512 KiB; LL128,
#: NCCL_LL128_ELEMS_PER_THREAD (120) x NCCL_LL128_MAX_NTHREADS (640) x NCCL_STEPS x 8 bytes;
#: Simple, NCCL_BUFFSIZE, 4 MiB ("1 << 22 /* 4MiB */").
NCCL_PROTOCOL_BUFFERS = {"LL": 8 * 512 * 8 * 16, "LL128": 120 * 640 * 8 * 8, "Simple": 1 << 22}
#: Bytes one connection of one channel holds: the three protocols' FIFOs (9,633,792 bytes).
NCCL_CONNECTION_BYTES = sum(NCCL_PROTOCOL_BUFFERS.values())
#: Connections per channel of a collective communicator: the ring's one receive ("Ring uses a
#: limited amount of memory as it only has 2 connections regardless of the scale", S. Jeaugey,
#: NVIDIA/nccl issue #864; the receiver holds the buffers) and the tree's, a chain inside a
#: node (one up, one down). Each channel has its own buffers for collectives (S. Jeaugey,
#: NVIDIA/nccl issue #1450).
NCCL_CONNECTIONS = 3
#: Channels of a collective communicator on NVLink: NCCL picks the count from the topology
#: ("the memory usage is linearly tied to the number of channels", S. Jeaugey, NVIDIA/nccl
#: issue #986). 24 is the count at which 24 x 3 x NCCL_CONNECTION_BYTES = 694 MB matches the
#: 688 MB one communicator of more than two A100s on NVLink took, measured by creating
#: process groups one after another (NVIDIA/nccl issue #964, 2023): a count read off that one
#: measurement, not off NCCL's log. For two ranks (one tree connection) the formula gives
#: 462 MB against the 544 MB measured there.
NCCL_CHANNELS = 24
#: The CUDA context (driver state, the kernels loaded so far) with lazy module loading (CUDA
#: 11.7 and later, PyTorch's default): "around 400MB" (P. Bialecki, pytorch/pytorch issue
#: #109888, 2023); before CUDA 11.7 every kernel was loaded with the library, ">1000MB"
#: (pytorch/pytorch issue #107667): ``CUDA_CONTEXT_EAGER_BYTES``.
CUDA_CONTEXT_BYTES = 400 * 2**20
CUDA_CONTEXT_EAGER_BYTES = 1000 * 2**20
#: nvidia-smi's total memory (MiB) of each catalogued accelerator, the figures
#: :mod:`dtbook.hardware` cites (its _SMI_* sources): the rest of the GiB the vendor sells is
#: kept by the driver (:func:`driver_reserved_bytes`).
NVIDIA_SMI_TOTAL_MIB = {"a100-80gb": 81920, "h100-sxm": 81559, "h200": 143771, "b200": 183359}


def driver_reserved_bytes(hbm_bytes, smi_total_bytes):
    """Bytes of a GPU's HBM the driver keeps before any process runs (chapter 19): its
    capacity as sold (``hbm_bytes``, :attr:`dtbook.hardware.Accelerator.hbm_bytes`, in GiB)
    less the total nvidia-smi reports (``smi_total_bytes``; :data:`NVIDIA_SMI_TOTAL_MIB`):
    0 on an A100 80GB (81,920 MiB), 361 MiB on an H100 SXM, 613 MiB on an H200, 961 MiB on
    a B200."""
    check.nonnegative("hbm_bytes", hbm_bytes)
    check.nonnegative("smi_total_bytes", smi_total_bytes)
    return hbm_bytes - smi_total_bytes


def nccl_buffer_bytes(communicators, channels=NCCL_CHANNELS, connections=NCCL_CONNECTIONS,
                      connection_bytes=NCCL_CONNECTION_BYTES):
    """NCCL's buffers on one GPU (chapter 19): every communicator the GPU runs collectives in
    holds, per channel and connection, one FIFO per protocol (:data:`NCCL_CONNECTION_BYTES`),
    ``communicators * channels * connections * connection_bytes``. A communicator
    allocates them at its first collective and keeps them; more communicators, more memory
    (NVIDIA/nccl issues #864, #964). Arrays broadcast."""
    check.nonnegative("communicators", communicators)
    check.nonnegative("channels", channels)
    check.nonnegative("connections", connections)
    check.nonnegative("connection_bytes", connection_bytes)
    return communicators * channels * connections * connection_bytes


def framework_breakdown(communicators=0, *, driver_bytes=0, context_bytes=CUDA_CONTEXT_BYTES,
                        channels=NCCL_CHANNELS, connections=NCCL_CONNECTIONS,
                        connection_bytes=NCCL_CONNECTION_BYTES):
    """What the software stack takes on one GPU beside the model's tensors (chapter 19), as a
    dict of bytes: ``"driver"`` (``driver_bytes``: :func:`driver_reserved_bytes` of the GPU),
    ``"cuda_context"`` (:data:`CUDA_CONTEXT_BYTES`; :data:`CUDA_CONTEXT_EAGER_BYTES` before
    lazy loading) and ``"nccl"`` (:func:`nccl_buffer_bytes` of the ``communicators`` the GPU
    runs collectives in). Not here: the gradient buffers and ZeRO's gather buffers, which
    are model state (:func:`zero_state_bytes`, :func:`ddp_bucket_bytes`,
    :func:`sharded_buffer_bytes`), and the caching allocator's fragmentation, a share of what
    it holds (:func:`device_memory`'s ``fragmentation``) that no source sizes in general.
    Arrays broadcast."""
    check.nonnegative("driver_bytes", driver_bytes)
    check.nonnegative("context_bytes", context_bytes)
    nccl = nccl_buffer_bytes(communicators, channels, connections, connection_bytes)
    return {"driver": driver_bytes + 0 * nccl, "cuda_context": context_bytes + 0 * nccl,
            "nccl": nccl}


def framework_bytes(communicators=0, *, driver_bytes=0, context_bytes=CUDA_CONTEXT_BYTES,
                    channels=NCCL_CHANNELS, connections=NCCL_CONNECTIONS,
                    connection_bytes=NCCL_CONNECTION_BYTES):
    """Bytes the software stack takes on one GPU beside the model's tensors (chapter 19):
    the sum of :func:`framework_breakdown`. On an H100 SXM in three communicators (TP, PP,
    DP): 361 MiB + 400 MiB + 3 x 694 MB, 2.9 GB. Pass it as ``device_memory(workspace_bytes=...)``
    or add it to the planner's memory (:func:`dtbook.plan.terms.framework_memory`)."""
    parts = framework_breakdown(communicators, driver_bytes=driver_bytes,
                                context_bytes=context_bytes, channels=channels,
                                connections=connections, connection_bytes=connection_bytes)
    return parts["driver"] + parts["cuda_context"] + parts["nccl"]


# the module's guard ran above; these are guarded here (DESIGN.md)
driver_reserved_bytes = check.guarded(driver_reserved_bytes)
nccl_buffer_bytes = check.guarded(nccl_buffer_bytes)
framework_breakdown = check.guarded(framework_breakdown)
framework_bytes = check.guarded(framework_bytes)
# ================================================================== end of W3's section
