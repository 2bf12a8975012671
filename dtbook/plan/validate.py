"""The planner beside published runs (chapter 27).

For each row of :mod:`dtbook.runs`, the planner's estimate against what the source reported,
both as tokens per second of the whole job: the source's printed figure is turned back into
tokens/s with the source's own FLOP formula (:func:`dtbook.runs.tokens_per_second`), so no
FLOP convention has to agree.

Sources rarely print every knob (micro-batch, virtual stages, ZeRO stage, recompute). A
guessed knob can decide the answer (Llama 3 405B on PP 16 with 16 micro-batches idles about
half the step without interleaving, a third with 2 virtual stages), so the prediction is the
planner's own **best** configuration with every field the source printed fixed
(``plan.search(..., top=1, **printed)``): the fields it did not print are chosen by the
planner's model, never by the reported figure. Nothing is fitted to these rows.

What the training stack did is taken from the run's recorded ``software``
(:data:`dtbook.runs.SOFTWARE`), each rule read in the stack's source:

* ``"megatron-deepspeed"`` (MT-NLG, BLOOM): DeepSpeed's pipeline engine
  (``pipeline_engine="deepspeed"``). Its ``TrainSchedule`` (deepspeed/runtime/pipe/
  schedule.py, commit 29bee73, October 2021) issues ``RecvActivation`` and ``SendGrad`` in a
  forward step and ``SendActivation`` and ``RecvGrad`` in a backward step, each a blocking
  ``p2p.send``/``p2p.recv`` (``dist.send``, or a two-rank ``dist.broadcast`` before torch
  1.8): four transfer times per micro-batch where Megatron's paired
  ``send_forward_recv_backward`` takes two. Like Megatron it splits each sent activation
  over the tensor-parallel group (``is_pipe_partitioned = is_model_parallel``,
  ``PartitionedTensor``; the receiver's ``.full()`` all-gathers it), so the per-NIC bytes
  are Megatron's. The last step runs ``ReduceTiedGrads``, ``ReduceGrads``, ``OptimizerStep``
  after the last backward: the reduction is not overlapped. With BF16 every micro-batch's
  BF16 gradients are added into FP32 (``BF16_Optimizer.update_hp_grads``, called from
  ``_exec_backward_pass``; commit 735406e, June 2022): unfused accumulation. Its reduction
  (``_bf16_reduce_grads``) all-reduces those FP32 gradients cast to BF16
  (``communication_data_type``), then all-gathers the BF16 parameters after the sharded
  step: a ring all-reduce of 2-byte values moves what the planner's ZeRO-1 reduce-scatter of
  4-byte values moves, so that term needs no change;
* ``"megatron-lm"``: dated by its era (:func:`overlaps_grad_reduce`,
  :func:`fuses_grad_accumulation`), Megatron's pipeline schedule;
* ``"llama3"``, ``"nemo"``, ``"megatron-bridge"``: overlapped reduction, fused
  accumulation, Megatron(-Core)'s schedule;
* ``"megatron-lm"``, ``"nemo"``, ``"megatron-bridge"`` where the source prints no ZeRO stage
  (the NeMo and Bridge tables' "FSDP 0"): Megatron's DDP, with or without its distributed
  optimizer (ZeRO 0 or 1), and on NeMo 1.x also Apex's ZeRO-2 optimizer
  (:func:`zero_stages_of`), never a stage the stack does not have;
* ``"torchtitan"``: PyTorch's FSDP2 (``data_parallel_engine="fsdp2"``: per-block
  ``fully_shard`` units gathered and reduce-scattered one unit ahead,
  :mod:`dtbook.plan.terms.fsdp2`), with torchtitan's defaults of its benchmark commit
  (9dec370): no HSDP (``data_parallel_replicate_degree = 1``), float8 all-gather off
  (``--float8.enable_fsdp_float8_all_gather`` is ``store_true``) unless the row's command
  set it (the run's ``fsdp_float8_all_gather``), FP32 reduce-scatter.

Rows the source ran but the planner cannot plan (no configuration of the printed fields
passes its constraints or fits) are kept, with ``predicted`` and ``error`` ``None`` and the
reason in ``failure``: :func:`summary` lists them as ``unplanned`` and never meets the target
with one. A row whose every layout field is printed and whose layout the planner estimates
but does not fit in HBM keeps its estimate, with ``fits`` ``False``.

``out_of_sample`` rows (:mod:`dtbook.runs`: added after the mechanisms that predict them were
written, issue 22's FSDP2 and MoE runs) are summarised apart from the rest by :func:`summary`.

A run's ``cluster`` names the :mod:`dtbook.hardware` node it trained on where that is not
the GPU's default node (BLOOM: Jean Zay, four Omni-Path ports for eight GPUs).

**The target** the planner is held to is stated here once, :data:`TARGET_MEDIAN` and
:data:`TARGET_WORST`, and :func:`summary` measures the rows against it; the tests and
chapter 27 read both from here.
"""

from __future__ import annotations

from .. import runs as _runs
from .model import estimate, layer_time
from .search import _diagnose, search

__all__ = ["validate", "validate_layers", "predict_run", "overlaps_grad_reduce", "fuses_grad_accumulation",
           "pipeline_engine_of", "zero_stages_of", "run_keywords", "TARGET_MEDIAN", "TARGET_WORST", "summary"]

# The planner's target against published runs, in throughput terms (predicted / reported - 1):
# the median row within 10 % and every row within 25 %, over every row, dense and MoE, A100
# and H100, in sample and out of sample. It is set by what a plan is used for,
# not by any result: a capacity plan sizes a reservation in GPUs and days, where 10 % is three
# days of a month-long run and 25 % a reservation a quarter too large or too small. The rows
# that miss it are reported by name (summary(), chapter 27), never absorbed into a wider band.
TARGET_MEDIAN = 0.10
TARGET_WORST = 0.25

# Megatron-Core's DDP / distributed optimizer, and FSDP (Llama 3's, torchtitan's FSDP2): the
# reduction overlaps the backward, and gradients are not added by a separate kernel
_MODERN = ("llama3", "nemo", "megatron-bridge", "torchtitan")


def overlaps_grad_reduce(run) -> bool:
    """Whether ``run``'s software overlapped the data-parallel gradient reduction with the
    backward pass (chapter 27): the run's own ``overlap_grad_reduce`` where the catalog
    records it; otherwise by the software of its era, which the catalog's ``attention``
    field marks: the unfused-attention runs (2021-22) used Megatron-LM, which reduced the
    gradients after the pipeline (``optimizer.reduce_model_grads``), or DeepSpeed's pipeline
    engine (``ReduceGrads`` after the last micro-batch); the FlashAttention-era runs used
    Megatron-Core's DDP with ``overlap_grad_reduce`` or FSDP, which overlap it. A property
    of the software, not a correction fitted to any row."""
    recorded = getattr(run, "overlap_grad_reduce", None)
    if recorded is not None:
        return bool(recorded)
    software = getattr(run, "software", "")
    if software == "megatron-deepspeed":   # ReduceGrads after the last backward
        return False
    if software in _MODERN:
        return True
    return run.attention == "flash"


def fuses_grad_accumulation(run) -> bool:
    """Whether ``run``'s software accumulated the weight gradients inside the wgrad GEMMs
    (chapter 27; :mod:`dtbook.plan.terms` notes): the run's own
    ``gradient_accumulation_fusion`` where the catalog records it; otherwise by the software
    of its era, dated from Megatron-LM's history. Fusion reached Megatron-LM's main branch
    on 2022-02-22 (merge 9c5a830, on by default), for FP32 accumulation only until
    September 2022. Sequence parallelism was written after it (first commits 2022-03-02; the
    selective-recompute branch of Korthikanti et al. 2022 contains the fusion) and
    FlashAttention reached Megatron-LM in December 2022, so a run with either is fused. The
    others (unfused attention, no sequence parallelism) ran 2021-era code: Megatron-LM of
    Narayanan et al. 2021 (FP16), Megatron-DeepSpeed for MT-NLG and BLOOM (BigScience's fork
    never took the fusion; it keeps ``main_grad.add_``). Not the ``attention`` rule of
    :func:`overlaps_grad_reduce`: Korthikanti's runs have unfused attention and fused
    accumulation. A property of the software, not a correction fitted to any row."""
    recorded = getattr(run, "gradient_accumulation_fusion", None)
    if recorded is not None:
        return bool(recorded)
    software = getattr(run, "software", "")
    if software == "megatron-deepspeed":   # main_grad.add_ / BF16_Optimizer.update_hp_grads
        return False
    if software in _MODERN:
        return True
    return run.attention == "flash" or bool(run.sequence_parallel)


def pipeline_engine_of(run) -> str:
    """``"deepspeed"`` for a run on Megatron-DeepSpeed (DeepSpeed's pipeline engine; module
    notes), ``"megatron"`` otherwise (chapter 27)."""
    return "deepspeed" if getattr(run, "software", "") == "megatron-deepspeed" else "megatron"


# The ZeRO stages of Megatron's own data parallelism, where a source prints none. Megatron-LM
# and Megatron-Core (under NeMo 2 and Megatron-Bridge, Megatron-FSDP off): DDP, or DDP with
# the distributed optimizer, which shards the optimizer state and keeps a whole gradient
# buffer on every rank (Megatron-LM docs/user-guide/features/dist_optimizer.md at d98e8a6:
# 6 + 12/d bytes per parameter with BF16 parameters and FP32 gradients), i.e. ZeRO 1. NeMo
# 1.x (the 'nemo' rows: NeMo 24.07 and before) also offered Apex's DistributedFusedAdam, its
# 'distributed_fused_adam' optimizer, which "implements the ZeRO-2 algorithm, which
# distributes the optimizer state and gradients" (apex/contrib/optimizers/
# distributed_fused_adam.py, class docstring). Parameter sharding (3) is FSDP's.
_ZERO_STAGES = {"megatron-lm": (0, 1), "megatron-bridge": (0, 1), "nemo": (0, 1, 2)}


def zero_stages_of(run) -> tuple | None:
    """The ZeRO stages ``run``'s stack offers where its source prints none (chapter 27):
    Megatron's DDP and distributed optimizer, ``(0, 1)``, and NeMo 1.x's ZeRO-2 optimizer
    too, ``(0, 1, 2)`` (module notes); ``None`` (every stage) for another stack, and when
    the source printed the stage (the printed value is fixed instead)."""
    if "zero" in _runs.printed_fields(run):
        return None
    return _ZERO_STAGES.get(getattr(run, "software", ""))


def run_keywords(run) -> dict:
    """The :func:`dtbook.plan.search` keywords that describe ``run``'s software and cluster
    (chapter 27): dtype, attention, overlap, fusion, pipeline engine, node, MoE dispatcher."""
    kw = dict(dtype=run.dtype, attention=run.attention,
              overlap_grad_reduce=overlaps_grad_reduce(run),
              gradient_accumulation_fusion=fuses_grad_accumulation(run),
              pipeline_engine=pipeline_engine_of(run))
    if getattr(run, "cluster", ""):
        kw["node"] = run.cluster
    if (getattr(run, "moe_dispatcher", "alltoall") != "alltoall"
            or getattr(run, "moe_comm_overlap", False)):
        kw.update(moe_dispatcher=run.moe_dispatcher, moe_comm_overlap=run.moe_comm_overlap)
    if getattr(run, "expert_tensor_parallel", None) is not None:
        kw["expert_tensor_parallel"] = run.expert_tensor_parallel
    if getattr(run, "software", "") == "torchtitan":   # FSDP2, torchtitan's defaults (notes)
        kw.update(data_parallel_engine="fsdp2", hsdp_replicas=1,
                  fsdp_float8_all_gather=bool(run.fsdp_float8_all_gather))
    return kw


def predict_run(run):
    """The planner's :class:`~dtbook.plan.Estimate` of a :class:`dtbook.runs.PublishedRun`
    (chapter 27): the fastest feasible configuration with every field the source printed
    fixed (:func:`dtbook.runs.printed_fields`) and the rest chosen by :func:`search`; when
    every layout field is printed and that layout does not fit, its estimate (``fits``
    ``False``). ``ValueError`` naming the constraint no candidate passed otherwise."""
    fixed = _runs.printed_fields(run)
    stages = zero_stages_of(run)
    offered = {} if stages is None else {"zero": stages}
    best = search(run.model, gpus=run.gpus, gpu=run.gpu, global_batch=run.global_batch,
                  seq=run.seq, top=1, **run_keywords(run), **fixed, **offered)
    if best:
        return best[0]
    if set(fixed) == set(_runs.LAYOUT_FIELDS):   # the whole layout printed: its estimate, unfit
        return estimate(run.model, gpus=run.gpus, gpu=run.gpu, global_batch=run.global_batch,
                        seq=run.seq, **run_keywords(run), **fixed)
    why = _diagnose(run.model, gpus=run.gpus, gpu=run.gpu, global_batch=run.global_batch,
                    seq=run.seq, **run_keywords(run), **fixed, **offered)[1]
    raise ValueError(f"{run.name}: {why or 'no configuration of the printed fields fits'}")


def validate(names=None) -> list[dict]:
    """One dict per published run: ``name``, ``predicted`` and ``reported`` tokens/s,
    ``error`` (predicted / reported - 1), the predicted ``tflops_per_gpu`` and ``mfu`` in the
    planner's convention, the reported figure converted to it (``reported_tflops_per_gpu``),
    ``memory_per_gpu``, ``fits``, ``printed`` (the fields the source printed, fixed) and
    ``chosen`` (the planner's choice for the others), ``out_of_sample``, ``software``,
    ``reported_memory`` (bytes, or ``None``) and ``failure`` (why the planner could not plan
    the row, with ``predicted`` and ``error`` ``None``; else ``None``). (Chapter 27.)"""
    rows = []
    for name in (names or _runs.names()):
        run = _runs.get(name)
        printed = _runs.printed_fields(run)
        reported = _runs.tokens_per_second(run)
        extra = dict(out_of_sample=run.out_of_sample, software=run.software,
                     reported_memory=run.memory_per_gpu)
        try:
            est = predict_run(run)
        except ValueError as failure:      # the planner cannot plan this published layout
            rows.append(dict(name=run.name, model=run.model, gpu=run.gpu, gpus=run.gpus,
                             predicted=None, reported=reported, error=None, fits=False,
                             printed=printed, chosen={}, config=None, source=run.source,
                             failure=str(failure), **extra))
            continue
        chosen = {k: est.config[k] for k in _runs.LAYOUT_FIELDS if k not in printed}
        rows.append(dict(name=run.name, model=run.model, gpu=run.gpu, gpus=run.gpus,
                         predicted=est.tokens_per_second, reported=reported,
                         error=est.tokens_per_second / reported - 1,
                         tflops_per_gpu=est.tflops_per_gpu, mfu=est.mfu,
                         reported_tflops_per_gpu=est.tflops_per_gpu * reported / est.tokens_per_second,
                         memory_per_gpu=est.memory_per_gpu, fits=est.fits, printed=printed,
                         chosen=chosen, config=est.config, source=run.source, failure=None,
                         **extra))
    return rows


def validate_layers(names=None) -> list[dict]:
    """One dict per published per-layer measurement (:func:`dtbook.runs.layer_timings`):
    ``name``, the ``measured`` and ``predicted`` forward and backward seconds
    (:func:`dtbook.plan.model.layer_time` on the measured layout), and ``error``, the
    combined forward + backward in throughput terms like :func:`validate`'s: measured time
    over predicted time, minus 1 (positive: the planner's layer is faster than the
    measurement). (Chapter 27.)"""
    rows = []
    for t in _runs.layer_timings():
        if names is not None and t.name not in names:
            continue
        pred = layer_time(t.model, gpu=t.gpu, tp=t.tp, micro_batch=t.micro_batch, seq=t.seq,
                          recompute=t.recompute, sequence_parallel=t.sequence_parallel,
                          attention=t.attention)
        measured = dict(forward=t.forward, backward=t.backward)
        rows.append(dict(name=t.name, recompute=t.recompute,
                         sequence_parallel=t.sequence_parallel, measured=measured,
                         predicted=pred,
                         error=(t.forward + t.backward) / (pred["forward"] + pred["backward"]) - 1,
                         source=t.source))
    return rows


def _stats(rows) -> dict:
    planned = [r for r in rows if r["error"] is not None]
    unplanned = [r["name"] for r in rows if r["error"] is None]
    if not planned:
        return dict(count=len(rows), median=None, mean=None, worst=None, worst_name=None,
                    outside=[], unplanned=unplanned, meets=False)
    errors = [float(r["error"]) for r in planned]
    size = sorted(abs(e) for e in errors)
    n = len(size)
    median = size[n // 2] if n % 2 else (size[n // 2 - 1] + size[n // 2]) / 2
    worst = max(range(n), key=lambda i: abs(errors[i]))
    outside = sorted((r for r in planned if abs(r["error"]) > TARGET_WORST),
                     key=lambda r: -abs(r["error"]))
    return dict(count=len(rows), median=median, mean=sum(size) / n, worst=errors[worst],
                worst_name=planned[worst]["name"], outside=[r["name"] for r in outside],
                unplanned=unplanned,
                meets=median <= TARGET_MEDIAN and not outside and not unplanned)


def summary(rows) -> dict:
    """The rows of :func:`validate` (or :func:`validate_layers`) against the target (chapter
    27): ``count`` rows, ``median`` |error|, ``mean`` |error|, the ``worst`` signed error and
    its ``worst_name``, ``outside`` (the names with |error| > :data:`TARGET_WORST`, worst
    first), ``unplanned`` (rows with ``error`` ``None``: the planner could not plan them;
    left out of the median and never meeting the target) and ``meets`` (median <=
    :data:`TARGET_MEDIAN`, no row outside, none unplanned); and the same for the
    ``in_sample`` and ``out_of_sample`` rows apart (a row's ``out_of_sample`` flag; absent:
    in sample), each ``None`` when there are no such rows. ``ValueError`` if ``rows`` is
    empty or a row lacks its ``name`` or ``error``."""
    rows = list(rows)
    if not rows:
        raise ValueError("rows is empty: nothing to summarise")
    for i, r in enumerate(rows):
        missing = [k for k in ("name", "error") if not isinstance(r, dict) or k not in r]
        if missing:
            raise ValueError(f"rows[{i}] has no {' and no '.join(map(repr, missing))}: each row "
                             f"is a dict with a 'name' and an 'error' (plan.validate's rows)")
    out = _stats(rows)
    for key, flag in (("in_sample", False), ("out_of_sample", True)):
        part = [r for r in rows if bool(r.get("out_of_sample", False)) == flag]
        out[key] = _stats(part) if part else None
    return out
