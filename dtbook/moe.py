"""Mixture of experts in closed form: what sparsity buys, what capacity costs, what the
all-to-all sends, and how to tell a healthy router from a collapsing one (chapter 18).

A mixture-of-experts layer holds E expert MLPs and sends each token to k of them, so its
parameters grow with E while the FLOPs per token grow only with k. Capacity C = ⌈c·kT/E⌉
slots per expert bound the buffers; tokens beyond it are dropped. Expert parallelism puts
the experts on different ranks and moves tokens with two all-to-alls per layer (dispatch
and combine), whose cost comes from :func:`dtbook.comm.alltoall_time` (chapters 11 and 13).

Names: ``tokens`` is T, the tokens one rank (or one batch) routes; ``experts`` is E;
``experts_per_token`` is k (as in :mod:`dtbook.models`); ``hidden`` is H; ``ffn_hidden``
the width of one expert's MLP; ``value_bytes`` is s. Arithmetic functions accept
Python numbers, NumPy arrays and SymPy symbols alike; functions of a load vector take a
sequence of numbers. Bytes and seconds, SI.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import sympy as sp

from . import _validate as check
from . import comm, mesh
from .symbolic import is_symbolic, minimum

__all__ = [
    "expert_params", "active_expert_params", "expert_flops_per_token", "capacity",
    "load_std", "drop_rate", "capacity_factor_for_overflow",
    "expert_choice_skip_fraction", "aux_loss", "aux_loss_uniform", "aux_gradient_direction",
    "alltoall_bytes", "layer_alltoall_bytes", "layer_alltoall_time", "dispatch_matrix",
    "dispatch_sent_bytes", "dispatch_received_bytes", "expert_tp_bytes_sent", "rank_of", "overlap_fraction",
    "normalized_entropy", "gini", "max_min_ratio", "max_mean_ratio",
]


def _ceil(x):
    return sp.ceiling(x) if is_symbolic(x) else np.ceil(x)


def _sqrt(x):
    return sp.sqrt(x) if is_symbolic(x) else np.sqrt(x)


def _upper_tail(z):
    """P(Z > z) for a standard normal Z: erfc(z/√2)/2."""
    if is_symbolic(z):
        return sp.erfc(z / sp.sqrt(2)) / 2
    return np.vectorize(lambda v: 0.5 * math.erfc(v / math.sqrt(2)), otypes=[float])(z)[()]


def _pdf(z):
    if is_symbolic(z):
        return sp.exp(-z**2 / 2) / sp.sqrt(2 * sp.pi)
    return np.exp(-np.asarray(z, dtype=float)**2 / 2)[()] / math.sqrt(2 * math.pi)


def _top(name, k, experts):
    check.count(name, k)
    if not is_symbolic(k, experts) and np.any(np.asarray(k) > np.asarray(experts)):
        raise ValueError(f"{name} must be at most experts ({experts!r}), got {k!r}")


# ------------------------------------------------------------------ sparsity

def expert_params(hidden, ffn_hidden, experts, matrices=2):
    """Parameters of the E experts of one layer: E·m·H·F, with m weight matrices per expert
    (2 for a GeLU MLP, 3 for SwiGLU). Grows with E (chapter 18)."""
    check.positive("hidden", hidden)
    check.positive("ffn_hidden", ffn_hidden)
    check.count("experts", experts)
    check.count("matrices", matrices)
    return experts * matrices * hidden * ffn_hidden


def active_expert_params(hidden, ffn_hidden, experts_per_token, matrices=2):
    """Expert parameters one token passes through: the k experts' k·m·H·F
    (:func:`expert_params` of k experts), independent of E (chapter 18)."""
    check.count("experts_per_token", experts_per_token)
    return expert_params(hidden, ffn_hidden, experts_per_token, matrices)


def expert_flops_per_token(hidden, ffn_hidden, experts_per_token, matrices=2):
    """Forward FLOPs of the experts per token: 2·k·m·H·F (a multiply and an add per weight
    used), independent of E (chapter 18)."""
    return 2 * active_expert_params(hidden, ffn_hidden, experts_per_token, matrices)


# ------------------------------------------------------------------ capacity and drops

def capacity(tokens, experts, experts_per_token=1, capacity_factor=1.25):
    """Slots per expert: C = ⌈c·kT/E⌉ (chapter 18)."""
    check.count("tokens", tokens)
    check.count("experts", experts)
    _top("experts_per_token", experts_per_token, experts)
    check.positive("capacity_factor", capacity_factor)
    return _ceil(capacity_factor * experts_per_token * tokens / experts)


def load_std(tokens, experts, experts_per_token=1):
    """Standard deviation of one expert's load when every token picks k distinct experts
    uniformly at random: the load is Binomial(T, k/E), σ = √(T·(k/E)(1 − k/E)) (chapter 18)."""
    check.count("tokens", tokens)
    check.count("experts", experts)
    _top("experts_per_token", experts_per_token, experts)
    q = experts_per_token / experts
    return _sqrt(tokens * q * (1 - q))


def _z(tokens, experts, experts_per_token, capacity_factor):
    cap = capacity(tokens, experts, experts_per_token, capacity_factor)  # checks the arguments
    mean = experts_per_token * tokens / experts
    sigma = load_std(tokens, experts, experts_per_token)
    if not is_symbolic(sigma) and np.any(np.asarray(sigma) == 0):
        raise ValueError("experts_per_token must be below experts: with k = E every expert "
                         "takes every token and nothing is random")
    return mean, sigma, (cap - mean) / sigma


def drop_rate(tokens, experts, experts_per_token=1, capacity_factor=1.25):
    """Expected fraction of token-expert assignments dropped, normal approximation:
    E[(L − C)⁺]/μ = σ[φ(z) − z(1 − Φ(z))]/μ with z = (C − μ)/σ (chapter 18)."""
    mean, sigma, z = _z(tokens, experts, experts_per_token, capacity_factor)
    return sigma * (_pdf(z) - z * _upper_tail(z)) / mean


def capacity_factor_for_overflow(tokens, experts, experts_per_token=1, overflow=0.01):
    """The capacity factor that keeps P(load > C) at ``overflow``, normal approximation:
    c = 1 + z·σ/μ with z the (1 − overflow) quantile (chapter 18)."""
    check.count("tokens", tokens)
    check.count("experts", experts)
    _top("experts_per_token", experts_per_token, experts)
    check.fraction("overflow", overflow)
    if is_symbolic(overflow):
        z = sp.sqrt(2) * sp.erfinv(1 - 2 * overflow)
    else:
        z = np.vectorize(lambda p: NormalDist().inv_cdf(1 - p) if p < 1 else -np.inf,
                         otypes=[float])(overflow)[()]
        if np.any(~np.isfinite(z)):
            raise ValueError(f"overflow must be below 1, got {overflow!r}")
    return 1 + z * load_std(tokens, experts, experts_per_token) / (
        experts_per_token * tokens / experts)


def expert_choice_skip_fraction(experts, experts_per_token=1):
    """Expected share of tokens no expert picks under expert choice with independent random
    scores: each expert takes a uniformly random C-subset of T tokens, C/T = k/E, so a token
    is missed by all E with probability (1 − k/E)^E, near e^(−k) for large E (chapter 18)."""
    check.count("experts", experts)
    _top("experts_per_token", experts_per_token, experts)
    return (1 - experts_per_token / experts) ** experts


# ------------------------------------------------------------------ load balancing

def _vector(name, values, positive=False):
    arr = np.asarray(check._numeric(name, values), dtype=float).ravel()
    if arr.size < 2 or not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() <= 0:
        raise ValueError(f"{name} must be at least two finite numbers >= 0, not all 0, "
                         f"got {values!r}")
    if positive and np.any(arr <= 0):
        raise ValueError(f"{name} must be numbers > 0, got {values!r}")
    return arr


def aux_loss(fractions, probabilities, alpha=0.01):
    """Switch/GShard balance loss αE·Σᵢ fᵢpᵢ, with fᵢ the share of tokens routed to expert i
    and pᵢ the mean router probability of expert i (chapter 18)."""
    f = _vector("fractions", fractions)
    p = _vector("probabilities", probabilities)
    if f.size != p.size:
        raise ValueError(f"fractions and probabilities must have the same length, "
                         f"got {f.size} and {p.size}")
    check.positive("alpha", alpha)
    return float(alpha * f.size * np.dot(f, p))


def aux_loss_uniform(experts, alpha=0.01):
    """L_aux at uniform routing, fᵢ = pᵢ = 1/E: αE·E·(1/E)² = α, whatever E (chapter 18)."""
    check.count("experts", experts)
    check.positive("alpha", alpha)
    return alpha * experts * experts * (1 / experts) ** 2


def aux_gradient_direction(fractions, probabilities):
    """pⱼ(fⱼ − f̄), f̄ = Σᵢ fᵢpᵢ: the gradient of L_aux with respect to logit j of a token whose
    router probabilities are p, up to the factor αE/T (f held fixed: the routing decision is
    not differentiable). Positive where an expert gets more than its share (chapter 18)."""
    f = _vector("fractions", fractions)
    p = _vector("probabilities", probabilities)
    if f.size != p.size:
        raise ValueError(f"fractions and probabilities must have the same length, "
                         f"got {f.size} and {p.size}")
    return p * (f - np.dot(f, p))


# ------------------------------------------------------------------ the all-to-all

def alltoall_bytes(tokens, hidden, experts_per_token=1, value_bytes=2):
    """n of one dispatch (or combine) all-to-all on one rank: k·T·H·s bytes, the whole
    buffer; with uniform routing a share (P − 1)/P of it leaves the rank (chapter 18)."""
    check.count("tokens", tokens)
    check.positive("hidden", hidden)
    check.count("experts_per_token", experts_per_token)
    check.positive("value_bytes", value_bytes)
    return experts_per_token * tokens * hidden * value_bytes


def _alltoalls(backward):
    return 4 if backward else 2  # dispatch and combine, and each again in the backward pass


def layer_alltoall_bytes(tokens, hidden, world, experts_per_token=1, value_bytes=2,
                         backward: bool = True):
    """Bytes one rank sends to other ranks per MoE layer, uniform routing:
    2 (dispatch + combine), or 4 with the backward pass, times (P − 1)/P·kTHs (chapter 18)."""
    check.count("world", world)
    n = alltoall_bytes(tokens, hidden, experts_per_token, value_bytes)
    return _alltoalls(backward) * comm.traffic("alltoall", n, world).sent_bytes


def layer_alltoall_time(tokens, hidden, world, alpha, beta, experts_per_token=1,
                        value_bytes=2, backward: bool = True):
    """Time of one MoE layer's all-to-alls: 2 (or 4 with backward) × chapter 13's pairwise
    all-to-all of n = kTHs, (P − 1)α + (P − 1)/P·n/β each (chapter 18)."""
    check.count("world", world)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    n = alltoall_bytes(tokens, hidden, experts_per_token, value_bytes)
    return _alltoalls(backward) * comm.alltoall_time(n, world, alpha, beta)


def dispatch_matrix(shares, tokens, world, experts_per_token=1):
    """Tokens rank i sends to rank j, when every rank routes its k·T assignments with the same
    expert distribution ``shares`` (length E, summing to 1) and rank j holds experts
    j·E/P … (j + 1)·E/P − 1: M[i, j] = kT·Σ shares of rank j's experts (chapter 18)."""
    s = _vector("shares", shares)
    check.count("tokens", tokens)
    check.count("world", world)
    check.count("experts_per_token", experts_per_token)
    if not np.isclose(s.sum(), 1):
        raise ValueError(f"shares must sum to 1, got {s.sum():.6g}")
    if s.size % int(world):
        raise ValueError(f"world must divide the number of experts ({s.size}), got {world!r}")
    per_rank = s.reshape(int(world), -1).sum(axis=1)
    return np.tile(experts_per_token * tokens * per_rank, (int(world), 1))


def dispatch_sent_bytes(shares, tokens, hidden, world, experts_per_token=1,
                        value_bytes=2):
    """Bytes each rank sends to other ranks in one dispatch (array over ranks): its row of
    :func:`dispatch_matrix` without the diagonal, times H·s (chapter 18)."""
    check.positive("hidden", hidden)
    check.positive("value_bytes", value_bytes)
    m = dispatch_matrix(shares, tokens, world, experts_per_token)
    return (m.sum(axis=1) - np.diag(m)) * hidden * value_bytes


def dispatch_received_bytes(shares, tokens, hidden, world, experts_per_token=1,
                            value_bytes=2):
    """Bytes each rank receives from other ranks in one dispatch (array over ranks): its
    column of :func:`dispatch_matrix` without the diagonal, times H·s. A hot expert makes
    its rank receive (P − 1)·kT·share (chapter 18)."""
    check.positive("hidden", hidden)
    check.positive("value_bytes", value_bytes)
    m = dispatch_matrix(shares, tokens, world, experts_per_token)
    return (m.sum(axis=0) - np.diag(m)) * hidden * value_bytes


def expected_destinations(experts, experts_per_token, units, groups=1, group_topk=None):
    """Expected number of distinct ``units`` (ranks or nodes, each holding an equal
    contiguous block of the ``experts``) that one token's ``experts_per_token`` routed
    experts land on, with balanced routing (chapters 18 and 35). Group-limited routing
    (DeepSeek-V3's node-limited routing: ``n_group`` groups, ``topk_group`` chosen per token)
    first picks ``group_topk`` of ``groups`` equal blocks, then k experts among the chosen
    groups' experts; a unit then lies inside one group, so ``groups`` must divide ``units``.
    Among the n = group_topk·E/groups candidate experts in c = group_topk·units/groups
    candidate units of u = E/units experts each, a unit is missed with the hypergeometric
    probability C(n − u, k)/C(n, k), so the expectation is c·(1 − C(n − u, k)/C(n, k)).
    A dispatcher that sends a token once per destination (DeepSeek's kernels, DeepEP) moves
    this many copies where one copy per expert moves k."""
    for name, value in (("experts", experts), ("experts_per_token", experts_per_token),
                        ("units", units), ("groups", groups)):
        check.count(name, value)
    group_topk = groups if group_topk is None else group_topk
    check.count("group_topk", group_topk)
    if experts % units:
        raise ValueError(f"units must divide experts ({experts}), got {units!r}")
    if group_topk > groups:
        raise ValueError(f"group_topk must be at most groups ({groups}), got {group_topk!r}")
    if units % groups:
        raise ValueError(f"groups must divide units ({units}), got {groups!r}")
    n = group_topk * experts // groups
    if experts_per_token > n:
        raise ValueError(f"experts_per_token must be at most the {n} experts of the chosen "
                         f"groups, got {experts_per_token!r}")
    per_unit, candidates = experts // units, group_topk * units // groups
    missed = math.comb(n - per_unit, experts_per_token) / math.comb(n, experts_per_token)
    return candidates * (1 - missed)


# ------------------------------------------------------------------ layouts

def expert_tp_bytes_sent(tokens, hidden, tp, experts_per_token=1, value_bytes=2):
    """Bytes one GPU sends per MoE layer, forward and backward, for tensor parallelism inside
    the experts: one ring all-reduce of the expert outputs forward and one of the input
    gradients backward, 2 · 2(t − 1)/t·kTHs (:func:`dtbook.comm.traffic` of
    :func:`alltoall_bytes`). Under EP the outputs are reduced per token-expert assignment
    (k·T rows, before the combine); TP alone can combine locally first and reduce T rows:
    pass ``experts_per_token=1`` (chapter 18). The expert weights' gradient all-reduce over
    the data-parallel ranks is :func:`dtbook.data_parallel.gradient_bytes_sent`."""
    check.count("tp", tp)
    n = alltoall_bytes(tokens, hidden, experts_per_token, value_bytes)
    return 2 * comm.traffic("allreduce", n, tp).sent_bytes


def rank_of(tp_index, ep_index, dp_index, tp, ep):
    """Global rank of the GPU at (tp, ep, dp) coordinates, TP innermost:
    rank = dp·(t·e) + ep·t + tp. TP neighbours are adjacent ranks, inside one node (ch. 18).
    It is chapter 23's row-major :func:`dtbook.mesh.rank_of` of the mesh (dp, ep, tp), whose
    dp extent does not enter the rank."""
    check.count("tp_index", tp_index, minimum=0)
    check.count("ep_index", ep_index, minimum=0)
    check.count("dp_index", dp_index, minimum=0)
    check.count("tp", tp)
    check.count("ep", ep)
    return mesh.rank_of((dp_index, ep_index, tp_index), (dp_index + 1, ep, tp))


def overlap_fraction(t_attention, t_alltoall):
    """Share of an all-to-all hidden behind independent attention compute:
    min(1, T_attn/T_A2A) (chapter 18)."""
    check.nonnegative("t_attention", t_attention)
    check.positive("t_alltoall", t_alltoall)
    return minimum(1, t_attention / t_alltoall)


# ------------------------------------------------------------------ router health

def normalized_entropy(load):
    """H/ln E of the load shares, 1 for a uniform load and 0 when one expert takes all
    (chapter 18)."""
    p = _vector("load", load)
    p = p / p.sum()
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum() / math.log(p.size))


def gini(load):
    """Gini coefficient Σᵢⱼ|lᵢ − lⱼ| / (2E·Σᵢlᵢ): 0 for a uniform load, (E − 1)/E when one
    expert takes all (chapter 18)."""
    l_ = _vector("load", load)
    return float(np.abs(l_[:, None] - l_[None, :]).sum() / (2 * l_.size * l_.sum()))


def max_min_ratio(load):
    """Largest load over smallest, inf when an expert gets nothing (chapter 18)."""
    l_ = _vector("load", load)
    return float(l_.max() / l_.min()) if l_.min() > 0 else math.inf


def max_mean_ratio(load):
    """Largest load over the mean load: the hot spot's slowdown when expert compute dominates
    the layer (chapter 18)."""
    l_ = _vector("load", load)
    return float(l_.max() / l_.mean())


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)


# ==== chapter 35: where the experts sit, and what crosses nodes ================================
# (DeepSeek-V3: 256 routed experts over EP 64 on 8-GPU nodes, each token sent to at most 4
# nodes; a token bound for a node crosses InfiniBand once and fans out over NVLink.)

def internode_fraction(ep, gpus_per_node=8):
    """Share of a token's routed-expert choices that leave its node when routing is uniform
    and the ``ep`` ranks of an expert-parallel group fill whole nodes of ``gpus_per_node``:
    1 − min(ep, g)/ep (chapter 35). 7/8 for EP 64 on 8-GPU nodes, 0 for EP ≤ 8."""
    check.count("ep", ep)
    check.count("gpus_per_node", gpus_per_node)
    return 1 - minimum(ep, gpus_per_node) / ep


__all__ += ["internode_fraction"]
internode_fraction = check.guarded(internode_fraction)
