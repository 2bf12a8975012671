"""The step-time and memory model of one training configuration (chapter 27; the 3D terms
are chapter 24's).

:func:`evaluate` composes the terms of :mod:`dtbook.plan.terms`, each the chapter formula
for its quantity over NumPy arrays of candidate configurations (the module notes there state
the model term by term). One step is the pipeline of ``m`` micro-batches, each costing the
slowest stage's compute and its exposed communication, followed by whatever of the
data-parallel reduction, ZeRO-3's gathers and the optimizer step is not hidden:

    step = batch_time(pp, m, forward, backward, vpp) + dp + zero3 + optimizer

:func:`estimate` checks one configuration and returns an :class:`Estimate`;
:func:`layer_time` one layer's forward and backward, as a source measures it. An estimate
``fits`` when its memory is at most the accelerator's HBM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import _validate as check
from .. import hardware, models, pipeline_parallel
from ..recompute import RECOMPUTE  # the recompute modes' one home (chapter 21)
from . import terms
from .gemm import matmul_time  # noqa: F401 (the planner's GEMM model, chapter 27)
from .terms import COLUMNS, elementwise_values, links_for, protocol_efficiency  # noqa: F401

__all__ = ["Estimate", "estimate", "layer_time", "evaluate", "RECOMPUTE", "ATTENTION",
           "MOE_DISPATCHERS", "PIPELINE_ENGINES", "COLUMNS", "resolve_model",
           "links_for", "protocol_efficiency", "elementwise_values"]

ATTENTION = ("flash", "unfused")
MOE_DISPATCHERS = ("alltoall", "deepep")
PIPELINE_ENGINES = ("megatron", "deepspeed")


def resolve_model(model) -> models.TransformerConfig:
    """A catalog name or a :class:`dtbook.models.TransformerConfig` (chapter 27)."""
    if isinstance(model, models.TransformerConfig):
        return model
    if isinstance(model, str):
        return models.get(model)
    raise ValueError(f"model must be a catalog name or a TransformerConfig, got {model!r}")


def evaluate(cfg, *, gpus, gpu, seq, global_batch, dtype, gpus_per_node, cols, attention="flash",
             overlap_grad_reduce=True, gradient_accumulation_fusion=True,
             pipeline_engine="megatron", node=None, data_parallel_engine="megatron",
             hsdp_replicas=1, fsdp_float8_all_gather=False, first_stage_layers=None,
             last_stage_layers=None, expert_tensor_parallel=None, moe_dispatcher="alltoall",
             moe_comm_overlap=False, moe_comm_sms=None):
    """The model over NumPy arrays of configurations (chapter 27): ``cols`` maps each of
    ``COLUMNS`` to an array (recompute as 0/1/2, sequence_parallel as 0/1). Returns a dict
    of arrays: the breakdown terms (seconds per step, bytes), ``step_time``,
    ``memory_per_gpu``, ``model_flops``, and one layer's ``layer_forward`` and
    ``layer_backward``. The keywords are :func:`estimate`'s; inputs are assumed valid (see
    :func:`dtbook.plan.search.configurations` and :func:`estimate`). ``gpus`` is implied by
    the columns and not used."""
    job = terms.Job.make(cfg, gpu=gpu, seq=seq, global_batch=global_batch, dtype=dtype,
                         gpus_per_node=gpus_per_node, attention=attention,
                         overlap_grad_reduce=overlap_grad_reduce,
                         gradient_accumulation_fusion=gradient_accumulation_fusion,
                         pipeline_engine=pipeline_engine, node=node,
                         first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                         expert_tensor_parallel=expert_tensor_parallel,
                         moe_dispatcher=moe_dispatcher, moe_comm_overlap=moe_comm_overlap,
                         moe_comm_sms=moe_comm_sms)
    lay = terms.Layouts.of(cols, job)
    layer = terms.layer_compute(job, lay)          # one layer, one micro-batch, one GPU
    stage = terms.slowest_stage(job, lay, layer)   # its layers; compute with the logits
    stage = terms.stage_on_free_sms(job, stage)    # on fewer SMs beside overlapped dispatch
    params = terms.params_per_gpu(job, lay)

    # each layer's exposed extra work, split into its forward and backward share
    per_layer = dict(recompute=terms.recompute(job, lay, stage.mean),
                     elementwise=terms.elementwise(job, lay),
                     tp_comm=terms.tp_comm(job, lay),
                     cp_comm=terms.cp_comm(job, lay, stage.mean),
                     ep_comm=terms.ep_comm(job, lay, stage))
    # one micro-batch on the slowest stage
    per_mb = dict(compute=stage.compute,
                  **{name: stage.layers * t.total for name, t in per_layer.items()},
                  grad_accum=terms.grad_accum(job, lay, params),
                  pp_comm=terms.pp_comm(job, lay))
    forward = (stage.forward + stage.layers * sum(t.forward for t in per_layer.values())
               + per_mb["pp_comm"] / 2)
    backward = sum(per_mb.values()) - forward
    pipeline, bubble = terms.pipeline(lay, forward, backward)

    dp = terms.dp_comm(job, lay, stage.backward + per_mb["recompute"], stage.layers)
    zero3 = terms.zero3_comm(job, lay, params, stage.compute + per_mb["recompute"])
    if data_parallel_engine == "fsdp2":   # FSDP2's per-unit gathers and reduces replace both
        dp, zero3 = np.where(lay.zero >= 2, 0.0, dp), terms.fsdp2_comm(
            job, lay, stage.layers, layer.forward + sum(t.forward for t in per_layer.values()),
            layer.backward + sum(t.backward for t in per_layer.values()), hsdp_replicas,
            fsdp_float8_all_gather)
    optimizer = terms.optimizer(job, lay, params)
    step_time = pipeline + dp + zero3 + optimizer

    state = terms.state_memory(job, lay, params)
    if data_parallel_engine == "fsdp2":   # FSDP2: fully sharded state and its gathered units
        state = state + terms.fsdp2_memory(job, lay, params, stage.layers, hsdp_replicas,
                                           fsdp_float8_all_gather)
    acts = terms.activation_memory(job, lay, stage)
    layer_forward = layer.forward + sum(t.forward for t in per_layer.values())
    layer_backward = layer.backward + sum(t.backward for t in per_layer.values())
    return dict(**{name: lay.m * t for name, t in per_mb.items()}, bubble=bubble, dp_comm=dp,
                zero3_comm=zero3, optimizer=optimizer, step_time=step_time,
                memory_per_gpu=state + acts + (framework := terms.framework_memory(job, lay)),
                memory_state=state, memory_activations=acts, memory_framework=framework,
                model_flops=np.broadcast_to(terms.model_flops(job), np.shape(step_time)),
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


def _whole(minimum=1, /, **values):
    """``ValueError`` naming the first of ``values`` that is not a whole number >= ``minimum``
    (an int, not a bool or a float; the command line's ``cli._at_least`` is its argparse twin)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def _check(cfg, gpus, gpu, tp, pp, dp, cp, ep, vpp, micro_batch, global_batch, seq, zero,
           recompute, dtype, gpus_per_node, first_stage_layers=None, last_stage_layers=None,
           expert_tensor_parallel=None):
    _whole(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch,
           global_batch=global_batch, seq=seq, gpus_per_node=gpus_per_node)
    if tp * pp * dp * cp != gpus:
        raise ValueError(f"gpus: tp*pp*dp*cp = {tp * pp * dp * cp} must equal gpus = {gpus}")
    if expert_tensor_parallel is not None:
        _whole(expert_tensor_parallel=expert_tensor_parallel)
        if tp % expert_tensor_parallel or (tp * cp * dp) % (expert_tensor_parallel * ep):
            raise ValueError(f"expert_tensor_parallel ({expert_tensor_parallel}) must divide tp "
                             f"({tp}), and times ep ({ep}) divide tp*cp*dp ({tp * cp * dp}): "
                             "the expert mesh refolds a stage's GPUs")
    elif (dp * cp) % ep:
        raise ValueError(f"ep ({ep}) must divide dp*cp ({dp * cp}): experts are spread over replicas")
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    acc = hardware.get(gpu)
    if not isinstance(acc, hardware.Accelerator):
        raise ValueError(f"gpu must name an accelerator, got {gpu!r}")
    acc.peak(dtype)
    for name, value in (("first_stage_layers", first_stage_layers),
                        ("last_stage_layers", last_stage_layers)):
        if value is not None:
            _whole(0, **{name: value})
            if pp == 1 or vpp > 1:
                raise ValueError(f"{name}: an uneven first or last stage needs pp > 1 and vpp = 1")
    try:       # the layers on each stage (chapter 16): evenly, lighter ends, or as given
        pipeline_parallel.stage_layers(cfg.layers, pp * vpp, first_stage_layers, last_stage_layers)
    except ValueError as err:
        name = ("first_stage_layers" if "first" in str(err).split(":")[0] else
                "last_stage_layers" if "last" in str(err).split(":")[0] else "pp")
        raise ValueError(f"{name}: {cfg.layers} layers do not split over pp*vpp = {pp * vpp} "
                         f"model chunks ({err})") from None
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


def _check_comm_sms(moe_comm_sms, moe_dispatcher, moe_comm_overlap, gpu, dtype):
    """``moe_comm_sms`` as the planner uses it (None: the dispatcher's default), or a
    ``ValueError`` naming it: a whole number below the GPU's SMs, and only with the overlap."""
    if moe_comm_sms is None:
        return terms.default_comm_sms(moe_dispatcher, moe_comm_overlap)
    _whole(0, moe_comm_sms=moe_comm_sms)
    sms = hardware.matmul_ceiling(gpu, dtype).sms
    if moe_comm_sms >= sms:
        raise ValueError(f"moe_comm_sms ({moe_comm_sms}) must leave the {gpu}'s {sms} SMs some "
                         "to compute on")
    if moe_comm_sms and not moe_comm_overlap:
        raise ValueError("moe_comm_sms only applies with moe_comm_overlap=True: without the "
                         "overlap the dispatch takes no SMs from compute")
    return moe_comm_sms


def estimate(model, *, gpus, gpu="h100-sxm", tp, pp, dp, cp=1, ep=1, vpp=1, micro_batch=1,
             global_batch, seq, zero=1, recompute="none", sequence_parallel=True,
             dtype="bf16", gpus_per_node=8, attention="flash", overlap_grad_reduce=True,
             gradient_accumulation_fusion=True, pipeline_engine="megatron",
             node: str | None = None, data_parallel_engine="megatron", hsdp_replicas=1,
             fsdp_float8_all_gather=False, first_stage_layers: int | None = None,
             last_stage_layers: int | None = None,
             expert_tensor_parallel: int | None = None, moe_dispatcher="alltoall",
             moe_comm_overlap=False, moe_comm_sms: int | None = None) -> Estimate:
    """Step time, throughput and memory of one configuration (chapter 27; the model is
    :func:`evaluate`'s, term by term in :mod:`dtbook.plan.terms`). ``model``: a :mod:`dtbook.models` name or a ``TransformerConfig``;
    ``gpu``: an accelerator of :mod:`dtbook.hardware`; ``ep`` splits the experts over the
    data-parallel (and context-parallel) replicas. Bad arguments raise ``ValueError`` naming
    the argument. ``attention``: ``"flash"`` (default: a fused kernel that skips the masked
    half and keeps no score matrix) or ``"unfused"`` (the score matrix materialised, soft-maxed
    and dropped out in HBM, Megatron-LM before FlashAttention). ``overlap_grad_reduce``:
    ``True`` (default) overlaps the data-parallel gradient reduction with the last backward,
    ``False`` runs it after the pipeline (Megatron-LM and DeepSpeed's pipeline engine before
    2023; :mod:`dtbook.plan.terms`). ``gradient_accumulation_fusion``: ``True`` (default) has the weight-
    gradient GEMMs accumulate into the FP32 buffer (Megatron-LM from February 2022, Megatron-
    Core with Transformer Engine); ``False`` adds each micro-batch's gradients in a separate
    memory-bound op (Megatron-LM 2021, Megatron-DeepSpeed; the ``grad_accum`` term).
    ``pipeline_engine``: ``"megatron"`` (default) or ``"deepspeed"`` (DeepSpeed's pipeline
    engine: four blocking transfers per micro-batch instead of two, no interleaving, so
    ``vpp`` must be 1). ``node``: a :mod:`dtbook.hardware` node name whose links the
    estimate uses (default: the first node holding ``gpu``; ``"jean-zay-a100"`` for BLOOM's
    cluster). ``data_parallel_engine``: ``"megatron"`` (default: Megatron's DDP and
    distributed optimizer) or ``"fsdp2"`` (PyTorch's ``fully_shard`` as torchtitan applies
    it: with ``zero`` 3 every block resharded after forward, with 2 not; per-unit gathers and
    reduce-scatters prefetched one unit ahead; :mod:`dtbook.plan.terms.fsdp2`);
    ``hsdp_replicas``: FSDP2's replicate degree (HSDP), 1 by default; ``fsdp_float8_all_gather``:
    FSDP2 gathers torchao's float8 linear weights in 1 byte (needs ``dtype="fp8"``).
    ``first_stage_layers``, ``last_stage_layers``: layers on the first and last pipeline stage
    (Megatron-Core's ``decoder_first_pipeline_num_layers`` and
    ``decoder_last_pipeline_num_layers``; the other stages share the rest evenly, vpp 1);
    by default an even split, or where ``pp * vpp`` does not divide the layers the lighter
    first and last stage of :func:`dtbook.pipeline_parallel.stage_layers`.
    ``expert_tensor_parallel``: Megatron-Core's ``--expert-tensor-parallel-size`` for an MoE
    model: ``None`` (default) splits the experts over TP and ``ep`` over ``dp * cp``; a
    divisor of ``tp`` refolds the stage's GPUs into ETP x EP x EDP (MoE parallel folding;
    :mod:`dtbook.plan.terms`, ``_expert_layout``). ``moe_dispatcher``: ``"alltoall"``
    (default: Megatron-Core's all-to-all dispatcher, one copy of a token per chosen expert) or
    ``"deepep"`` (a token crosses the scale-out network once per destination node and fans
    out over NVLink: DeepSeek-V3's own kernels, DeepEP, Megatron-Core's flex dispatcher);
    ``moe_comm_overlap``: the EP all-to-alls run under another micro-batch's compute
    (Megatron-Core's ``overlap_moe_expert_parallel_comm``, DeepSeek's DualPipe; terms.ep_comm);
    ``moe_comm_sms``: the SMs the overlapped dispatch kernels hold, the compute running on the
    rest (terms.stage_on_free_sms); ``None`` (default) is DeepEP's 20 with ``"deepep"`` and the
    overlap, else 0 (Megatron-Core's ``moe_deepep_num_sms``)."""
    cfg = resolve_model(model)
    if moe_dispatcher not in MOE_DISPATCHERS:
        raise ValueError(f"moe_dispatcher must be one of {MOE_DISPATCHERS}, got {moe_dispatcher!r}")
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    _check_engine(pipeline_engine, vpp)
    if isinstance(gpu, str):
        gpu = gpu.strip().lower()
    _check(cfg, gpus, gpu, tp, pp, dp, cp, ep, vpp, micro_batch, global_batch, seq, zero,
           recompute, dtype, gpus_per_node, first_stage_layers, last_stage_layers,
           expert_tensor_parallel)
    if node is not None:
        links_for(gpu, node)     # ValueError for an unknown node or one without this gpu
    terms.check_data_parallel(data_parallel_engine, hsdp_replicas, fsdp_float8_all_gather,
                              dp=dp, cp=cp, zero=zero, dtype=dtype)
    comm_sms = _check_comm_sms(moe_comm_sms, moe_dispatcher, moe_comm_overlap, gpu, dtype)
    cols = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch, zero=zero,
                recompute=RECOMPUTE.index(recompute), sequence_parallel=int(bool(sequence_parallel)))
    out = evaluate(cfg, gpus=gpus, gpu=gpu, seq=seq, global_batch=global_batch, dtype=dtype,
                   gpus_per_node=gpus_per_node, cols={k: np.array([v]) for k, v in cols.items()},
                   attention=attention, overlap_grad_reduce=bool(overlap_grad_reduce),
                   gradient_accumulation_fusion=bool(gradient_accumulation_fusion),
                   pipeline_engine=pipeline_engine, node=node,
                   data_parallel_engine=data_parallel_engine, hsdp_replicas=hsdp_replicas,
                   fsdp_float8_all_gather=bool(fsdp_float8_all_gather),
                   first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                   expert_tensor_parallel=expert_tensor_parallel, moe_dispatcher=moe_dispatcher,
                   moe_comm_overlap=bool(moe_comm_overlap), moe_comm_sms=moe_comm_sms)
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
    if data_parallel_engine != "megatron":
        config.update(data_parallel_engine=data_parallel_engine, hsdp_replicas=hsdp_replicas,
                      fsdp_float8_all_gather=bool(fsdp_float8_all_gather))
    if node is not None:
        config["node"] = hardware.node(node).name
    if first_stage_layers is not None or last_stage_layers is not None:
        config.update(first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers)
    if expert_tensor_parallel is not None:
        config["expert_tensor_parallel"] = expert_tensor_parallel
    if moe_dispatcher != "alltoall" or moe_comm_overlap:
        config.update(moe_dispatcher=moe_dispatcher, moe_comm_overlap=bool(moe_comm_overlap))
    if comm_sms:
        config["moe_comm_sms"] = comm_sms
    breakdown = {k: val[k] for k in ("compute", "recompute", "elementwise", "grad_accum",
                                     "tp_comm", "cp_comm",
                                     "ep_comm", "pp_comm", "bubble", "dp_comm", "zero3_comm",
                                     "optimizer", "memory_state", "memory_activations",
                                     "memory_framework")}
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
    beside Korthikanti et al.'s Table 4. The terms are :func:`evaluate`'s own (:mod:`dtbook.plan.terms`).
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
check.guard_module(globals(), exclude=("resolve_model", "evaluate"))
