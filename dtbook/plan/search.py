"""The search space of layouts, its constraints, and exhaustive ranking (chapter 27).

The space: tp and cp powers of two, pp any divisor of the GPU count, dp what is left, ep a
divisor of the experts, ZeRO stage 0-3, recompute none/selective/full, micro-batch 1, 2, 4, 8
and 1-4 virtual stages. The constraints, in the order :func:`funnel` applies them:

1. **GPU product**: tp * pp * dp * cp = gpus with dp whole;
2. **TP inside a node**: tp <= gpus_per_node (TP's per-layer all-reduces need NVLink);
3. **heads**: tp divides the attention heads, and the kv heads or is a multiple of them;
4. **layers**: pp * vpp model chunks split the layers (evenly, or Llama 3's way);
5. **batch**: dp * micro_batch divides the global batch;
6. **interleaving**: vpp > 1 needs pp > 1 and the micro-batch count a multiple of pp;
7. **sequence**: cp > 1 needs seq divisible by 2 cp (load-balanced causal chunks);
8. **experts**: ep divides the experts and the dp * cp replicas (dense models: ep = 1);
9. **memory**: the estimate fits in HBM.

Every candidate is a row of NumPy arrays and :func:`dtbook.plan.model.evaluate` scores
them all at once, so the whole space of a 405B model on 16,384 GPUs takes well under a
second (``benchmarks/plan_search.py``).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .. import hardware
from .model import (ATTENTION, COLUMNS, RECOMPUTE, _check_engine, _whole, Estimate, estimate, evaluate,
                       links_for, resolve_model)

__all__ = ["configurations", "funnel", "search", "SPACE"]

SPACE = dict(zero=(0, 1, 2, 3), recompute=RECOMPUTE, micro_batch=(1, 2, 4, 8), vpp=(1, 2, 3, 4))
_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute", "sequence_parallel")


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers(n):
    out, p = [], 1
    while p <= n:
        out.append(p)
        p *= 2
    return out


def _grid(cfg, gpus, fixed):
    """Every candidate of the raw space as a dict of arrays (the product before any filter)."""
    tp_opts = [fixed["tp"]] if "tp" in fixed else _powers(gpus)
    cp_opts = [fixed["cp"]] if "cp" in fixed else _powers(gpus)
    pp_opts = [fixed["pp"]] if "pp" in fixed else _divisors(gpus)
    ep_opts = [fixed["ep"]] if "ep" in fixed else (_divisors(cfg.experts) if cfg.is_moe else [1])
    splits = []
    for tp in tp_opts:
        for cp in cp_opts:
            for pp in pp_opts:
                dp = gpus / (tp * cp * pp)
                for ep in ep_opts:
                    splits.append((tp, pp, dp, cp, ep))
    splits = np.array(splits, dtype=float).reshape(-1, 5)
    if "dp" in fixed:
        splits = splits[splits[:, 2] == fixed["dp"]]
    rest = {k: [fixed[k]] if k in fixed else list(v) for k, v in SPACE.items()}
    rest["recompute"] = [RECOMPUTE.index(r) for r in rest["recompute"]]
    sp = [int(bool(fixed.get("sequence_parallel", True)))]
    mesh = np.meshgrid(np.arange(len(splits)), rest["vpp"], rest["micro_batch"], rest["zero"],
                       rest["recompute"], sp, indexing="ij")
    idx = mesh[0].ravel()
    cols = dict(tp=splits[idx, 0], pp=splits[idx, 1], dp=splits[idx, 2], cp=splits[idx, 3],
                ep=splits[idx, 4], vpp=mesh[1].ravel().astype(float),
                micro_batch=mesh[2].ravel().astype(float), zero=mesh[3].ravel().astype(float),
                recompute=mesh[4].ravel().astype(float), sequence_parallel=mesh[5].ravel().astype(float))
    return cols


def _filters(cfg, gpus, global_batch, seq, gpus_per_node):
    """(name, predicate on the columns) in funnel order, memory last (it needs the model)."""
    L, H, KV = cfg.layers, cfg.heads, cfg.kv_heads

    def whole(x):
        return np.abs(x - np.round(x)) < 1e-9

    return [
        ("GPU product", lambda c: whole(c["dp"]) & (c["dp"] >= 1)),
        ("TP inside a node", lambda c: c["tp"] <= gpus_per_node),
        ("heads divisible by TP", lambda c: (H % c["tp"] == 0) & ((KV % c["tp"] == 0) | (c["tp"] % KV == 0))),
        ("layers divisible by PP x VPP", lambda c: (L % (c["pp"] * c["vpp"]) == 0)
         | ((L + 2) % (c["pp"] * c["vpp"]) == 0)),
        ("batch divisible by DP x micro-batch", lambda c: global_batch % (c["dp"] * c["micro_batch"]) == 0),
        ("interleaving: micro-batches a multiple of PP",
         lambda c: (c["vpp"] == 1) | ((c["pp"] > 1)
                                       & ((global_batch // (c["dp"] * c["micro_batch"])) % c["pp"] == 0))),
        ("sequence divisible by 2 x CP", lambda c: (c["cp"] == 1) | (seq % (2 * c["cp"]) == 0)),
        ("experts divisible by EP", lambda c: (c["ep"] == 1) | (
            (cfg.experts % c["ep"] == 0) & ((c["dp"] * c["cp"]) % c["ep"] == 0)) if cfg.is_moe
         else c["ep"] == 1),
    ]


def _run(model, gpus, global_batch, seq, gpu, fixed):
    cfg = resolve_model(model)
    gpu = gpu.strip().lower() if isinstance(gpu, str) else gpu
    acc = hardware.get(gpu)
    if not isinstance(acc, hardware.Accelerator):
        raise ValueError(f"gpu must name an accelerator, got {gpu!r}")
    _whole(gpus=gpus, global_batch=global_batch, seq=seq)
    _extra = ("dtype", "gpus_per_node", "attention", "overlap_grad_reduce",
              "gradient_accumulation_fusion", "pipeline_engine", "node")
    unknown = set(fixed) - set(_KEYS) - set(_extra)
    if unknown:
        raise ValueError(f"cannot fix {sorted(unknown)}: fix any of "
                         f"{_KEYS + _extra}")
    attention = fixed.get("attention", "flash")
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    overlap = bool(fixed.get("overlap_grad_reduce", True))
    fusion = bool(fixed.get("gradient_accumulation_fusion", True))
    engine = fixed.get("pipeline_engine", "megatron")
    _check_engine(engine, fixed.get("vpp", 1))
    if engine == "deepspeed":       # DeepSpeed's pipeline engine has no interleaving
        fixed = {**fixed, "vpp": 1}
    node = fixed.get("node")
    if node is not None:
        links_for(gpu, node)
    dtype = fixed.get("dtype", "bf16")
    acc.peak(dtype)
    gpn = fixed.get("gpus_per_node", 8)
    cols = _grid(cfg, gpus, fixed)
    stages = OrderedDict([("all candidates", len(cols["tp"]))])
    for name, pred in _filters(cfg, gpus, global_batch, seq, gpn):
        keep = np.asarray(pred(cols), dtype=bool)
        cols = {k: v[keep] for k, v in cols.items()}
        stages[name] = len(cols["tp"])
    out = evaluate(cfg, gpus=gpus, gpu=gpu, seq=seq, global_batch=global_batch, dtype=dtype,
                   gpus_per_node=gpn, cols=cols, attention=attention,
                   overlap_grad_reduce=overlap,
                   gradient_accumulation_fusion=fusion, pipeline_engine=engine,
                   node=node) if len(cols["tp"]) else None
    if out is not None:
        keep = out["memory_per_gpu"] <= acc.hbm_bytes
        cols = {k: v[keep] for k, v in cols.items()}
        out = {k: np.asarray(v)[keep] for k, v in out.items()}
    stages["memory fits in HBM"] = len(cols["tp"])
    return cfg, gpu, (dtype, attention, overlap, fusion, engine, node), gpn, cols, out, stages


def _as_kwargs(cols, i, dtype, gpn):
    dtype, attention, overlap, fusion, engine, node = dtype
    kw = {k: int(cols[k][i]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero")}
    kw["recompute"] = RECOMPUTE[int(cols["recompute"][i])]
    kw["sequence_parallel"] = bool(cols["sequence_parallel"][i])
    kw["dtype"], kw["gpus_per_node"] = dtype, gpn
    if attention != "flash":   # the default stays out of the dicts readers already use
        kw["attention"] = attention
    if not overlap:
        kw["overlap_grad_reduce"] = False
    if not fusion:
        kw["gradient_accumulation_fusion"] = False
    if engine != "megatron":
        kw["pipeline_engine"] = engine
    if node is not None:
        kw["node"] = node
    return kw


def configurations(model, *, gpus, global_batch, seq, gpu="h100-sxm", **fixed) -> list[dict]:
    """Every configuration that passes all constraints, memory included, as keyword
    arguments of :func:`dtbook.plan.estimate` (without model, gpus, gpu, global_batch, seq).
    Any of those arguments can be fixed. (Chapter 27.)"""
    cfg, gpu, dtype, gpn, cols, out, _ = _run(model, gpus, global_batch, seq, gpu, fixed)
    return [_as_kwargs(cols, i, dtype, gpn) for i in range(len(cols["tp"]))]


def funnel(model, *, gpus, global_batch, seq, gpu="h100-sxm", **fixed) -> "OrderedDict[str, int]":
    """{constraint: candidates surviving it}, in the order of the module notes, starting
    from the raw product of the space. (Chapter 27.)"""
    return _run(model, gpus, global_batch, seq, gpu, fixed)[-1]


def search(model, *, gpus, global_batch, seq, gpu="h100-sxm", top=10, **fixed) -> list[Estimate]:
    """The ``top`` fastest feasible configurations as :class:`Estimate` objects, fastest
    first (chapter 27). The whole space is scored at once with NumPy; only the winners are
    re-estimated one by one (the same model, so the same numbers)."""
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise ValueError(f"top must be a whole number >= 1, got {top!r}")
    cfg, gpu, dtype, gpn, cols, out, _ = _run(model, gpus, global_batch, seq, gpu, fixed)
    if out is None or not len(cols["tp"]):
        return []
    order = np.argsort(out["step_time"], kind="stable")[:top]
    return [estimate(cfg, gpus=gpus, gpu=gpu, global_batch=global_batch, seq=seq,
                     **_as_kwargs(cols, i, dtype, gpn)) for i in order]
