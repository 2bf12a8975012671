"""The search space of layouts, its constraints, and exhaustive ranking (chapter 27).

The space: tp and cp powers of two, pp any divisor of the GPU count, dp what is left, ep a
divisor of the experts, ZeRO stage 0-3, recompute none/selective/full, micro-batch 1, 2, 4, 8
and 1-4 virtual stages. The constraints, in the order :func:`funnel` applies them:

1. **GPU product**: tp * pp * dp * cp = gpus with dp whole;
2. **TP inside a node**: tp <= gpus_per_node (TP's per-layer all-reduces need NVLink);
3. **heads**: tp divides the attention heads, and the kv heads or is a multiple of them;
4. **layers**: pp * vpp model chunks split the layers (evenly, or with lighter first and
   last chunks when they do not divide: :func:`dtbook.pipeline_parallel.stage_layers`);
5. **batch**: dp * micro_batch divides the global batch;
6. **interleaving**: vpp > 1 needs pp > 1 and the micro-batch count a multiple of pp;
7. **sequence**: cp > 1 needs seq divisible by 2 cp (load-balanced causal chunks);
8. **experts**: ep divides the experts and the dp * cp replicas (dense models: ep = 1);
9. **memory**: the estimate fits in HBM.

Counting is not enumerating. The raw space of ``gpus = 10**9`` holds about 10⁸ candidates,
almost all of them excluded by the first three constraints or by the layers; the search
lists only the candidates that can pass them (tp a power of two up to ``gpus_per_node``
dividing the heads, pp a divisor up to ``layers + 2``, cp and ep whatever divides) and
*counts* the rest from the prime factorisation of ``gpus`` (the number of divisors of
``gpus / (tp cp)`` is a product over its prime exponents), so :func:`funnel` reports the
same counts as enumerating everything would. ZeRO stage, recompute and sequence parallelism
enter no constraint before memory: they multiply the count and are expanded only for the
candidates that reach it. What is listed is bounded by the model, not by ``gpus``
(:func:`listed_bound`); ``gpus`` may go up to :data:`GPUS_MAX`, ``2**53``, the largest
count a float64 (what :func:`dtbook.plan.model.evaluate` computes in) holds exactly.

Every listed candidate is a row of NumPy arrays and :func:`dtbook.plan.model.evaluate`
scores them all at once, so the whole space of a 405B model on 16,384 GPUs takes well under
a second (``benchmarks/plan_search.py``). Rows that tie on step time are ordered by memory
per GPU, the smaller first.
"""

from __future__ import annotations

import inspect
import math
from collections import OrderedDict

import numpy as np

from .. import hardware
from . import terms
from .model import (ATTENTION, MOE_DISPATCHERS, RECOMPUTE, _check_comm_sms, _check_engine, _whole,
                    Estimate, estimate, evaluate, links_for, resolve_model)

__all__ = ["configurations", "funnel", "search", "listed_bound", "SPACE", "GPUS_MAX"]

# the search tries Megatron's three recompute modes; torchtitan's "selective-op" is for fixing
SPACE = dict(zero=(0, 1, 2, 3), recompute=RECOMPUTE[:3], micro_batch=(1, 2, 4, 8), vpp=(1, 2, 3, 4))
_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute", "sequence_parallel")
GPUS_MAX = 2 ** 53      # float64 holds every whole number up to here exactly
_STAGES = ("GPU product", "TP inside a node", "heads divisible by TP", "layers split over PP x VPP",
           "batch divisible by DP x micro-batch", "interleaving: micro-batches a multiple of PP",
           "sequence divisible by 2 x CP", "experts divisible by EP")
_MEMORY = "memory fits in HBM"


# ---------------------------------------------------------------------- whole numbers
def _is_prime(n):
    """Miller-Rabin with the first 12 primes as witnesses: exact for n < 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _rho(n):
    """A nontrivial factor of the composite odd ``n`` (Pollard's rho, Brent's cycle finding)."""
    for c in range(1, n):
        y, m, g, r, q = 2, 128, 1, 1, 1
        x = ys = y
        while g == 1:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(m, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += m
            r *= 2
        if g == n:
            g = 1
            while g == 1:
                ys = (ys * ys + c) % n
                g = math.gcd(abs(x - ys), n)
        if g != n:
            return g
    raise ArithmeticError(f"no factor of {n} found")   # pragma: no cover


def _factorize(n) -> dict:
    """{prime: exponent} of the whole number ``n >= 1``: trial division by the small primes,
    then Miller-Rabin and Pollard's rho, so any ``n`` up to :data:`GPUS_MAX` takes
    milliseconds (walking the divisors one by one took a minute for 10**9)."""
    out = {}
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47):
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if _is_prime(m):
            out[m] = out.get(m, 0) + 1
            continue
        f = _rho(m)
        stack += [f, m // f]
    return out


def _tau(factors) -> int:
    """Number of divisors of the number whose factorisation is ``factors``."""
    return math.prod(e + 1 for e in factors.values())


def _quotient(factors, d):
    """Factorisation of ``n / d`` for ``d`` dividing ``n`` (``factors`` is ``n``'s)."""
    out = dict(factors)
    for p, e in _factorize(d).items():
        out[p] -= e
    return out


def _divisors(n, limit=None):
    """The divisors of ``n`` up to ``limit`` (all of them without one), ascending."""
    top = n if limit is None else min(n, limit)
    if top <= 4096:
        return [d for d in range(1, top + 1) if n % d == 0]
    divs = [1]
    for p, e in _factorize(n).items():
        divs = [d * p ** k for d in divs for k in range(e + 1)]
    return sorted(d for d in divs if d <= top)


def _powers(n):
    """Powers of two up to ``n``."""
    return [2 ** i for i in range(int(n).bit_length())]


# ---------------------------------------------------------------------- the space
def _rest(fixed):
    """The values each of :data:`SPACE`'s fields takes: the fixed one, or for ``zero`` the
    fixed stages when a sequence of them is given (a stack that allows only some: Megatron's
    DDP, 0 or 1), or every value of the space."""
    rest = {}
    for k, v in SPACE.items():
        if k not in fixed:
            rest[k] = list(v)
        elif k == "zero" and isinstance(fixed[k], (tuple, list)):
            rest[k] = sorted(set(fixed[k]))
        else:
            rest[k] = [fixed[k]]
    return rest


def _grid(cfg, gpus, fixed, gpn):
    """The space, listed where it can pass the cheap constraints and counted elsewhere.

    Returns ``(cols, implicit, weight)``: ``cols`` the listed candidates as arrays of
    (tp, pp, dp, cp, ep, vpp, micro_batch) in the order of the raw product, each standing for
    ``weight`` candidates (ZeRO x recompute x sequence parallelism, which no constraint before
    memory reads); ``implicit`` the count of candidates *not* listed that each constraint
    removes (index into ``_STAGES``): those fail it and passed every one before it."""
    L, H, KV = cfg.layers, cfg.heads, cfg.kv_heads
    facs = _factorize(gpus)
    tp_opts = [fixed["tp"]] if "tp" in fixed else _powers(gpus)
    cp_opts = [fixed["cp"]] if "cp" in fixed else _powers(gpus)
    n_pp = 1 if "pp" in fixed else _tau(facs)
    ep_opts = [fixed["ep"]] if "ep" in fixed else (_divisors(cfg.experts) if cfg.is_moe else [1])
    rest = _rest(fixed)
    weight = len(rest["zero"]) * len(rest["recompute"])        # x 1 sequence-parallel value
    per_split = len(rest["vpp"]) * len(rest["micro_batch"]) * weight
    implicit = [0] * len(_STAGES)
    splits = []
    for tp in tp_opts:
        heads_ok = H % tp == 0 and (KV % tp == 0 or tp % KV == 0)
        for cp in cp_opts:
            if "dp" in fixed:          # the raw space holds only the splits with this dp
                prod = tp * cp * fixed["dp"]
                pp = gpus // prod if gpus % prod == 0 else None
                if pp is None or ("pp" in fixed and pp != fixed["pp"]):
                    continue
                whole, listable = 1, [pp] if pp <= L + 2 else []
            else:
                if "pp" in fixed:
                    pp = fixed["pp"]
                    whole = 1 if gpus % (tp * cp * pp) == 0 else 0
                    listable = [pp] if whole and pp <= L + 2 else []
                elif gpus % (tp * cp) == 0:
                    q = gpus // (tp * cp)
                    whole = _tau(_quotient(facs, tp * cp))
                    listable = _divisors(q, L + 2) if tp <= gpn and heads_ok else []
                else:
                    whole, listable = 0, []
                implicit[0] += (n_pp - whole) * len(ep_opts) * per_split
            if not whole:
                continue
            if tp > gpn:
                implicit[1] += whole * len(ep_opts) * per_split
                continue
            if not heads_ok:
                implicit[2] += whole * len(ep_opts) * per_split
                continue
            implicit[3] += (whole - len(listable)) * len(ep_opts) * per_split
            for pp in listable:
                dp = gpus // (tp * cp * pp)
                for ep in ep_opts:
                    splits.append((tp, pp, dp, cp, ep))
    splits = np.array(splits, dtype=float).reshape(-1, 5)
    mesh = np.meshgrid(np.arange(len(splits)), rest["vpp"], rest["micro_batch"], indexing="ij")
    idx = mesh[0].ravel()
    cols = dict(tp=splits[idx, 0], pp=splits[idx, 1], dp=splits[idx, 2], cp=splits[idx, 3],
                ep=splits[idx, 4], vpp=mesh[1].ravel().astype(float),
                micro_batch=mesh[2].ravel().astype(float))
    return cols, implicit, weight


def _expand(cols, fixed):
    """Each listed candidate times every ZeRO stage, recompute mode and the sequence-
    parallel setting, innermost, in the order of the raw product."""
    rest = _rest(fixed)
    rc = [RECOMPUTE.index(r) for r in rest["recompute"]]
    sp = [int(bool(fixed.get("sequence_parallel", True)))]
    mesh = np.meshgrid(np.arange(len(cols["tp"])), rest["zero"], rc, sp, indexing="ij")
    idx = mesh[0].ravel()
    out = {k: v[idx] for k, v in cols.items()}
    out.update(zero=mesh[1].ravel().astype(float), recompute=mesh[2].ravel().astype(float),
               sequence_parallel=mesh[3].ravel().astype(float))
    return out


def listed_bound(model, *, gpus_per_node=8) -> int:
    """The most candidates a search lists and scores for ``model``, whatever the GPU count
    (chapter 27): tp among the powers of two up to ``gpus_per_node``, cp among the powers of
    two up to :data:`GPUS_MAX`, pp among the numbers up to ``layers + 2``, ep among the
    experts' divisors, times the free knobs of ``SPACE``. (The rest of the space is counted,
    not listed: module notes.)"""
    cfg = resolve_model(model)
    _whole(gpus_per_node=gpus_per_node)
    n_tp = len(_powers(gpus_per_node))
    n_cp = len(_powers(GPUS_MAX))
    n_ep = len(_divisors(cfg.experts)) if cfg.is_moe else 1
    return n_tp * n_cp * (cfg.layers + 2) * n_ep * math.prod(len(v) for v in SPACE.values())


def _filters(cfg, gpus, global_batch, seq, gpus_per_node, first=None, last=None, etp=None):
    """(name, predicate on the columns) in funnel order, memory last (it needs the model);
    ``first``, ``last``: the fixed layers of the first and last pipeline stage, if any;
    ``etp``: the expert-tensor-parallel size, if fixed (the experts then refold a stage's
    TP x CP x DP GPUs, so ETP x EP must divide them, as :func:`estimate` checks)."""
    L, H, KV = cfg.layers, cfg.heads, cfg.kv_heads

    def whole(x):
        return np.abs(x - np.round(x)) < 1e-9

    def experts_fit(c):
        if etp is None:        # EP over the data-parallel (and context-parallel) replicas
            return (c["dp"] * c["cp"]) % c["ep"] == 0
        return (c["tp"] % etp == 0) & ((c["tp"] * c["cp"] * c["dp"]) % (etp * c["ep"]) == 0)

    return [
        ("GPU product", lambda c: whole(c["dp"]) & (c["dp"] >= 1)),
        ("TP inside a node", lambda c: c["tp"] <= gpus_per_node),
        ("heads divisible by TP", lambda c: (H % c["tp"] == 0) & ((KV % c["tp"] == 0) | (c["tp"] % KV == 0))),
        ("layers split over PP x VPP", lambda c: terms.splits(cfg, c["pp"], c["vpp"], first, last)),
        ("batch divisible by DP x micro-batch", lambda c: global_batch % (c["dp"] * c["micro_batch"]) == 0),
        ("interleaving: micro-batches a multiple of PP",
         lambda c: (c["vpp"] == 1) | ((c["pp"] > 1)
                                       & ((global_batch // (c["dp"] * c["micro_batch"])) % c["pp"] == 0))),
        ("sequence divisible by 2 x CP", lambda c: (c["cp"] == 1) | (seq % (2 * c["cp"]) == 0)),
        ("experts divisible by EP", lambda c: (c["ep"] == 1) | (
            (cfg.experts % c["ep"] == 0) & experts_fit(c)) if cfg.is_moe
         else c["ep"] == 1),
    ]


# keywords of evaluate() that search() passes through from ``fixed`` (beyond the columns)
_HSDP = "HSDP replicas divide DP x CP, sharded"
_EVALUATE_FIXED = ("cfg", "gpus", "gpu", "seq", "global_batch", "dtype", "gpus_per_node", "cols")


def _passthrough() -> dict:
    """{keyword: default} of evaluate()'s knobs a search can fix beyond the columns
    (attention, overlap, pipeline engine, node, ...), read from its signature, so a knob
    added to the model is searchable at once."""
    return {k: p.default for k, p in inspect.signature(evaluate).parameters.items()
            if k not in _EVALUATE_FIXED}


def _check_fixed(fixed):
    for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch"):
        if k in fixed:
            _whole(**{k: fixed[k]})
    if "zero" in fixed:
        z = fixed["zero"]
        stages = list(z) if isinstance(z, (tuple, list)) else [z]
        if not stages or any(isinstance(v, bool) or v not in (0, 1, 2, 3) for v in stages):
            raise ValueError(f"zero must be 0, 1, 2 or 3, or a non-empty sequence of them, "
                             f"got {z!r}")
    if "recompute" in fixed and fixed["recompute"] not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {fixed['recompute']!r}")


def _measured(gpu, dtype, attention):
    """``ValueError`` naming what the planner lacks to time kernels on ``gpu``."""
    try:
        hardware.matmul_ceiling(gpu, dtype)
        hardware.memory_ceiling(gpu)
        if attention == "flash":
            hardware.attention_kernel(gpu)
    except ValueError as err:
        raise ValueError(f"gpu {gpu!r} cannot be planned: {err}. The planner times kernels at "
                         f"measured rates, catalogued for {', '.join(hardware.plannable())}; "
                         "add yours with dtbook.hardware.register (dtbook plan --accelerator "
                         "FILE)") from None


def _run(model, gpus, global_batch, seq, gpu, fixed):
    cfg = resolve_model(model)
    gpu = gpu.strip().lower() if isinstance(gpu, str) else gpu
    acc = hardware.get(gpu)
    if not isinstance(acc, hardware.Accelerator):
        raise ValueError(f"gpu must name an accelerator, got {gpu!r}")
    gpu = acc.name
    _whole(gpus=gpus, global_batch=global_batch, seq=seq)
    if gpus > GPUS_MAX:
        raise ValueError(f"gpus must be at most 2**53 = {GPUS_MAX:,} (the planner computes in "
                         f"float64, exact for whole numbers up to there), got {gpus:,}")
    defaults = _passthrough()
    extra = ("dtype", "gpus_per_node") + tuple(defaults)
    unknown = set(fixed) - set(_KEYS) - set(extra)
    if unknown:
        raise ValueError(f"cannot fix {sorted(unknown)}: fix any of {_KEYS + extra}")
    _check_fixed(fixed)
    attention = fixed.get("attention", "flash")
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    engine = fixed.get("pipeline_engine", "megatron")
    _check_engine(engine, fixed.get("vpp", 1))
    if engine == "deepspeed":       # DeepSpeed's pipeline engine has no interleaving
        fixed = {**fixed, "vpp": 1}
    node = fixed.get("node")
    if node is not None:
        links_for(gpu, node)
    dtype = fixed.get("dtype", "bf16")
    acc.peak(dtype)
    _measured(gpu, dtype, attention)
    gpn = fixed.get("gpus_per_node", 8)
    _whole(gpus_per_node=gpn)
    knobs = {k: fixed.get(k, v) for k, v in defaults.items()}
    for k, v in defaults.items():       # on/off knobs arrive as any truthy value
        if isinstance(v, bool):
            knobs[k] = bool(knobs[k])
    knobs["attention"], knobs["pipeline_engine"] = attention, engine
    if knobs.get("moe_dispatcher", "alltoall") not in MOE_DISPATCHERS:
        raise ValueError(f"moe_dispatcher must be one of {MOE_DISPATCHERS}, "
                         f"got {knobs['moe_dispatcher']!r}")
    _check_comm_sms(knobs.get("moe_comm_sms"), knobs.get("moe_dispatcher", "alltoall"),
                    knobs.get("moe_comm_overlap", False), gpu, dtype)
    replicas = knobs.get("hsdp_replicas", 1)
    # the engine's own arguments, named when bad (a layout's divisibility is a filter below)
    terms.check_data_parallel(knobs.get("data_parallel_engine", "megatron"), replicas,
                              knobs.get("fsdp_float8_all_gather", False), dp=replicas, cp=1,
                              zero=3 if replicas != 1 else 0, dtype=dtype)
    cols, implicit, weight = _grid(cfg, gpus, fixed, gpn)
    listed = len(cols["tp"])
    stages = OrderedDict([("all candidates", listed * weight + sum(implicit))])
    reached = {}
    left = sum(implicit)
    for i, (name, pred) in enumerate(_filters(cfg, gpus, global_batch, seq, gpn,
                                              fixed.get("first_stage_layers"),
                                              fixed.get("last_stage_layers"),
                                              fixed.get("expert_tensor_parallel"))):
        reached[name] = cols
        keep = np.asarray(pred(cols), dtype=bool)
        cols = {k: v[keep] for k, v in cols.items()}
        left -= implicit[i]
        stages[name] = len(cols["tp"]) * weight + left
    cols = _expand(cols, fixed)
    if replicas > 1:                # HSDP: replicas divide the dp*cp ranks, which shard (ZeRO 2/3)
        reached[_HSDP] = cols
        keep = ((cols["dp"] * cols["cp"]) % replicas == 0) & (cols["zero"] >= 2)
        cols = {k: v[keep] for k, v in cols.items()}
        stages[_HSDP] = len(cols["tp"])
    reached[_MEMORY] = cols
    out = evaluate(cfg, gpus=gpus, gpu=gpu, seq=seq, global_batch=global_batch, dtype=dtype,
                   gpus_per_node=gpn, cols=cols, **knobs) if len(cols["tp"]) else None
    least = None
    if out is not None:
        least = float(np.min(out["memory_per_gpu"]))
        keep = out["memory_per_gpu"] <= acc.hbm_bytes
        cols = {k: v[keep] for k, v in cols.items()}
        out = {k: np.asarray(v)[keep] for k, v in out.items()}
    stages[_MEMORY] = len(cols["tp"])
    info = dict(cfg=cfg, acc=acc, gpus=gpus, global_batch=global_batch, seq=seq, gpn=gpn,
                reached=reached, least_memory=least, fixed=fixed)
    return cfg, gpu, (dtype, knobs), gpn, cols, out, stages, info


def _as_kwargs(cols, i, dtype, gpn):
    dtype, knobs = dtype
    kw = {k: int(cols[k][i]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero")}
    kw["recompute"] = RECOMPUTE[int(cols["recompute"][i])]
    kw["sequence_parallel"] = bool(cols["sequence_parallel"][i])
    kw["dtype"], kw["gpus_per_node"] = dtype, gpn
    defaults = _passthrough()
    for k, v in knobs.items():   # the defaults stay out of the dicts readers already use
        if v != defaults[k]:
            kw[k] = v
    return kw


def configurations(model, *, gpus, global_batch, seq, gpu="h100-sxm", **fixed) -> list[dict]:
    """Every configuration that passes all constraints, memory included, as keyword
    arguments of :func:`dtbook.plan.estimate` (without model, gpus, gpu, global_batch, seq).
    Any of those arguments can be fixed. (Chapter 27.)"""
    cfg, gpu, dtype, gpn, cols, out, _, _ = _run(model, gpus, global_batch, seq, gpu, fixed)
    return [_as_kwargs(cols, i, dtype, gpn) for i in range(len(cols["tp"]))]


def funnel(model, *, gpus, global_batch, seq, gpu="h100-sxm", **fixed) -> "OrderedDict[str, int]":
    """{constraint: candidates surviving it}, in the order of the module notes, starting
    from the raw product of the space. (Chapter 27.)"""
    return _run(model, gpus, global_batch, seq, gpu, fixed)[-2]


def _order(out):
    """Fastest first; step times equal to 12 significant digits ordered by memory, smaller
    first (module notes)."""
    t = np.asarray(out["step_time"], dtype=float)
    tied = np.round(t / np.min(t), 12)
    return np.lexsort((np.asarray(out["memory_per_gpu"], dtype=float), tied))


def search(model, *, gpus, global_batch, seq, gpu="h100-sxm", top=10, **fixed) -> list[Estimate]:
    """The ``top`` fastest feasible configurations as :class:`Estimate` objects, fastest
    first, ties on step time by memory per GPU (chapter 27). The whole space is scored at
    once with NumPy; only the winners are re-estimated one by one (the same model, so the
    same numbers). Any field of the layout can be fixed; ``zero`` also as a sequence of the
    stages the training stack offers (``zero=(0, 1)``: Megatron's DDP, with or without its
    distributed optimizer), among which the search chooses."""
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise ValueError(f"top must be a whole number >= 1, got {top!r}")
    cfg, gpu, dtype, gpn, cols, out, _, _ = _run(model, gpus, global_batch, seq, gpu, fixed)
    if out is None or not len(cols["tp"]):
        return []
    order = _order(out)[:top]
    return [estimate(cfg, gpus=gpus, gpu=gpu, global_batch=global_batch, seq=seq,
                     **_as_kwargs(cols, i, dtype, gpn)) for i in order]


# ---------------------------------------------------------------------- why nothing fits
def _least(cols, key, above=0):
    v = np.asarray(cols[key])
    v = v[v > above]
    return f"{int(v.min()):,}" if len(v) else "none"


def _why(name, info):
    """One sentence: what constraint ``name`` asks, with the figures that broke it."""
    cfg, c = info["cfg"], info["reached"].get(name)
    listed = c is not None and len(c["tp"]) > 0
    gpus, batch, seq = info["gpus"], info["global_batch"], info["seq"]
    if name == "GPU product":
        return f"tp x pp x cp must divide gpus = {gpus:,} leaving a whole dp"
    if name == "TP inside a node":
        return f"tp must be at most gpus_per_node = {info['gpn']}"
    if name == "heads divisible by TP":
        return (f"tp must divide the {cfg.heads} attention heads and the {cfg.kv_heads} kv "
                f"heads (or be a multiple of them)")
    if name == "layers split over PP x VPP":
        return (f"pp x vpp must be at most the {cfg.layers} layers and split them: evenly, or "
                f"with ceil(layers / (pp x vpp)) on every middle chunk and at least one on "
                f"each end (dtbook.pipeline_parallel.stage_layers)")
    if name == "batch divisible by DP x micro-batch":
        tail = f"; the smallest dp left is {_least(c, 'dp')}" if listed else ""
        return f"dp x micro_batch must divide the global batch of {batch:,} sequences{tail}"
    if name == "interleaving: micro-batches a multiple of PP":
        return "vpp > 1 needs pp > 1 and the micro-batch count a multiple of pp"
    if name == "sequence divisible by 2 x CP":
        tail = f"; the smallest cp > 1 left is {_least(c, 'cp', 1)}" if listed else ""
        return f"cp > 1 needs seq = {seq:,} divisible by 2 x cp{tail}"
    if name == "experts divisible by EP":
        if not cfg.is_moe:
            return f"ep must be 1 for the dense model {cfg.name}"
        etp = info["fixed"].get("expert_tensor_parallel")
        if etp is not None:
            return (f"ep must divide the {cfg.experts} experts, and expert_tensor_parallel = "
                    f"{etp} x ep divide tp x cp x dp (with etp dividing tp)")
        return f"ep must divide the {cfg.experts} experts and dp x cp"
    if name == _HSDP:
        r = info["fixed"].get("hsdp_replicas", 1)
        return f"hsdp_replicas = {r} must divide dp x cp, with zero 2 or 3 sharding inside"
    if name == _MEMORY:
        gib = 2 ** 30
        return (f"the least memory per GPU among them is {info['least_memory'] / gib:,.1f} GiB, "
                f"above the {info['acc'].hbm_bytes / gib:,.1f} GiB of HBM of one "
                f"{info['acc'].name}")
    return name   # pragma: no cover


def _diagnose(model, *, gpus, global_batch, seq, gpu="h100-sxm", **fixed):
    """(funnel, message): why no configuration is left, naming the constraint at which the
    count reached zero, or ``None`` for the message when some are left. (Chapter 27.)"""
    *_, stages, info = _run(model, gpus, global_batch, seq, gpu, fixed)
    names, counts = list(stages), list(stages.values())
    if counts[-1]:
        return stages, None
    i = next(k for k in range(1, len(counts)) if counts[k] == 0)
    before = counts[i - 1]
    msg = (f"no configuration passes '{names[i]}': {before:,} "
           f"candidate{'s' if before != 1 else ''} reached it, none passed ({_why(names[i], info)})")
    if before == 0:    # pragma: no cover - the raw space is never empty
        msg = "the search space is empty"
    return stages, msg
