"""PyTorch's FSDP2 (``fully_shard``) as torchtitan applies it, in the planner (chapter 27):
per-unit all-gathers and reduce-scatters prefetched one unit ahead, HSDP, float8 all-gather, and
the memory its units hold.

PyTorch's own ZeRO-3, ``fully_shard`` (torch/distributed/fsdp/_fully_shard/, FSDP2), as
torchtitan applies it (torchtitan/parallelisms/parallelize_llama.py ``apply_fsdp`` at
9dec370, December 2024, the commit of its published benchmark; Liang et al. 2024,
"TorchTitan", arXiv:2410.06511, Sec. 2.1):

* **units**: one ``fully_shard`` per transformer block, then one on the whole model (the
  "root": token embedding, final norm, output projection). Each unit's parameters are one
  flat all-gather (``FSDPParamGroup.unshard``) and its gradients one reduce-scatter
  (``post_backward`` -> ``foreach_reduce``) over the shard group;
* **when**: ``pre_forward`` all-gathers a unit before its forward, ``post_forward``
  reshards it when ``reshard_after_forward`` (torchtitan: every block but the last, since
  the backward would gather it at once; ``False`` for every block under pipeline
  parallelism "to avoid per-microbatch all-gathers"), ``pre_backward`` gathers it again,
  ``post_backward`` reduce-scatters its gradients in the ``reduce_dtype`` (torchtitan's
  ``mixed_precision_reduce = "float32"``) on their own stream;
* **prefetch**: the next unit's all-gather is issued while this unit computes (implicit
  forward prefetch on the all-gather stream; ``_backward_prefetch`` in backward), one unit
  ahead. Collectives on one link run one at a time, so chapter 20's
  :func:`dtbook.zero.prefetch_step_time` with ``link="serial"`` is the pass: the first
  gather exposed, then per unit the larger of its compute and its communication. In
  backward a unit's communication is the next unit's gather and this unit's reduce-scatter;
* **HSDP** (``hsdp_replicas`` r > 1, torchtitan's ``data_parallel_replicate_degree``): the
  ``dp * cp`` ranks are r replicas of shard groups of ``dp * cp / r``; gathers and
  reduce-scatters run inside the shard group, and each unit's reduced gradient shard is
  then all-reduced across the r replicas (``foreach_reduce``'s ``all_reduce`` on
  ``all_reduce_stream``), concurrently with the shard group's traffic when the two use
  different links (shard group inside a node, replicas across), after it when they share one;
* **float8 all-gather** (``fsdp_float8_all_gather``, torchtitan's
  ``--float8.enable_fsdp_float8_all_gather``, off by default and not set in its benchmark):
  torchao's ``Float8Linear`` weights travel in 1 byte instead of 2; norms stay BF16;
* **pipeline parallelism**: ``torch.distributed.pipelining`` turns gradient sync off for
  all but the last micro-batch and torchtitan keeps the blocks unsharded after forward, so
  a stage gathers its parameters once per step (the first micro-batch) and reduce-scatters
  once (the last); without PP, every micro-batch gathers and reduces (FSDP2's default);
* **memory** (:func:`fsdp2_memory`): the model state fully sharded (chapter 19's
  :func:`dtbook.memory.zero_state_bytes`, stage 3) plus the units held unsharded: two
  gathered units and one reduce-scatter input (:func:`dtbook.memory.sharded_buffer_bytes`,
  FSDP2's one-unit lookahead) and the root, which stays gathered through the step; with
  ``reshard_after_forward=False`` (ZeRO column 2, or PP) every unit of the stage.

Not modelled: ``torch.compile``'s effect is the planner's fused elementwise model (one read
and one write per op, :func:`~dtbook.plan.terms.memory_bound.elementwise`), which compiled
blocks reach and eager PyTorch (several kernels per RMSNorm in FP32) does not, so eager runs
are not predicted; the copy-in/copy-out kernels around each collective; torchao's separate
amax pass before each float8 cast (the casts themselves are costed as Transformer Engine's
cast-transpose, :func:`~dtbook.plan.terms.memory_bound.fp8_cast_bytes`; the float8 GEMMs run
at the FP8 ceiling, ``dtype="fp8"``). torchtitan's op-level selective recompute (every
second matmul recomputed, the attention output kept) is ``recompute="selective-op"``
(:func:`~dtbook.plan.terms.compute.recompute`).
"""

from __future__ import annotations

import functools

import numpy as np

from ... import comm, memory
from ... import zero as _zero
from .job import Job, Layouts, VALUE
from .footprint import state_memory
from .communication import _replicas_per_node, group_collective_time

__all__ = ["DATA_PARALLEL_ENGINES", "fsdp2_units", "fsdp2_comm", "fsdp2_collectives",
           "fsdp2_memory", "check_data_parallel"]


DATA_PARALLEL_ENGINES = ("megatron", "fsdp2")


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
    across = lay.tp * lay.replicas <= job.gpus_per_node
    rab = tuple(np.where(across, u, o) for u, o in zip(job.up_ab, job.out_ab))
    return shard, inside == across, rab


def _unit_collectives(job, lay, params, width, hsdp_replicas):
    """(gather, reduce-scatter, replica all-reduce, same link) seconds of one unit of
    ``params`` parameters per GPU: the shard group's collectives as
    :func:`~dtbook.plan.terms.communication.group_collective_time` runs them (its GPUs of a
    node follow TP's)."""
    shard, same, rab = _fsdp_groups(job, lay, hsdp_replicas)
    on = shard > 1
    per_node = _replicas_per_node(job, lay)
    g = np.where(on, group_collective_time(job, "allgather", params * width, shard, per_node), 0.0)
    grads = params * job.grad_bytes
    r = np.where(on, group_collective_time(job, "reduce_scatter", grads, shard, per_node), 0.0)
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
    27; the module notes): ``layers`` blocks of the slowest stage, each computing
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
