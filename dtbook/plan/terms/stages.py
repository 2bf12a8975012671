"""The pipeline in the planner (chapter 27): how the layers split over ``pp * vpp`` model
chunks, the slowest rank's compute for one micro-batch, and the step's micro-batches through
the (interleaved) 1F1B schedule.
"""

from __future__ import annotations

import functools

import numpy as np

from ... import pipeline_parallel
from ..gemm import _matmul_time
from .job import Job, LayerCompute, Layouts, Stage
from .compute import _block_kinds, _mlp_kinds, _windows
from .communication import _alltoall_per_moe_layer

__all__ = ["pipeline", "splits", "slowest_stage"]


def pipeline(lay: Layouts, forward, backward):
    """``(time, bubble)`` of the step's ``m`` micro-batches through the pipeline, each taking
    ``forward`` + ``backward`` seconds on the slowest stage: :func:`dtbook.pipeline_parallel.
    batch_time` with ``vpp`` virtual stages, and its idle share :func:`dtbook.
    pipeline_parallel.interleaved_bubble_fraction`."""
    time = pipeline_parallel.batch_time(lay.pp, lay.m, forward, backward, virtual_stages=lay.vpp)
    return time, time * pipeline_parallel.interleaved_bubble_fraction(lay.pp, lay.m, lay.vpp)


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
    (:class:`~dtbook.plan.terms.job.LayerKinds`: full or windowed attention, dense or MoE
    MLP); the last also runs the logits (forward once, backward twice) and, for a model with
    multi-token prediction (DeepSeek-V3, ``mtp_layers``), each MTP module: one more block
    like the last, its 2h -> h projection and the logits again (DeepSeek-V3 report, Sec.
    2.2). The busiest decides, its compute and its MoE layers' all-to-alls
    (:func:`~dtbook.plan.terms.communication.ep_comm`, which only a rank with more MoE
    layers pays more of) together; ties go to the rank without the logits. The MTP modules
    count as blocks of the last rank (``layers``, ``moe``)."""
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
