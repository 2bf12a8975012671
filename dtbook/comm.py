"""The α-β model of communication, and the cost of collectives built on it.

A message of n bytes over a link with latency α (seconds) and bandwidth β (bytes per second,
one direction) takes

    T(n) = α + n / β.

Chapter 04 derives this model, its crossover size n* = αβ, the price of splitting a message
into chunks (sequential and pipelined), the ping-pong round trip used to measure α and β, the
least-squares fit that recovers them from timings, and a preview of the ring collectives.
Chapter 12 derives the collective algorithms (ring, bidirectional ring, binomial, binary and
double binary trees, recursive doubling, Rabenseifner, hierarchical) as schedules of steps:
:func:`traffic` gives each one's steps, bytes per link and bytes per rank, and
:func:`allreduce_time`, :func:`reduce_scatter_time`, :func:`allgather_time`,
:func:`broadcast_time` and :func:`alltoall_time` charge them α per step and 1/β per byte.
Chapter 13 adds algorithm and bus bandwidth (:func:`bus_bandwidth`).

Two link models (``links=``, DESIGN.md "Links: per-port and per-wire"):

* ``"switched"`` (the default): each rank has one port into a switch (NVSwitch inside an H100
  node, an InfiniBand or RoCE fat tree between nodes) that sends β and receives β at once,
  whatever the peers. A step costs the bytes through the busiest port in its busiest
  direction: a tree parent receiving n from each of two children takes 2n/β.
* ``"direct"``: every pair of neighbours is joined by its own wire carrying β in each
  direction (a TPU torus, a ring of point-to-point NVLink or PCIe wires). A step costs the
  bytes on the busiest wire, so messages to different neighbours travel side by side.

The ring, binomial tree, recursive doubling, Rabenseifner and pairwise all-to-all send at
most one message each way per step, so both models give them the same time. They differ for
the schedules that talk to two peers at once: the bidirectional rings and the binary trees.

Two latencies (chapter 04): ``alpha`` is the price of one message, what a ping-pong
measures, paid once per step; ``alpha_call`` is the fixed software cost of one library
collective call (dispatch, allocation, the library's own handshakes), paid once per call
however many steps the call has. The collective times take both; ``alpha_call`` defaults
to 0, the bare schedule. The same algorithms run
over real send/recv in :mod:`dtbook.collectives`, which counts what they send.

Every formula accepts Python numbers, NumPy arrays and SymPy symbols alike. Sizes are in
bytes, times in seconds, bandwidths in bytes per second per direction. For the collectives,
``n`` is the whole buffer as nccl-tests counts it: the vector being all-reduced or broadcast,
the input of a reduce-scatter, the output of an all-gather, what each rank sends in an
all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import is_symbolic

__all__ = [
    "p2p_time", "crossover_bytes", "pingpong_time", "messages_time", "bucket_saving",
    "chunked_time", "optimal_chunks", "best_chunk_count", "fit_alpha_beta", "AlphaBetaFit",
    "allreduce_time", "reduce_scatter_time", "allgather_time", "broadcast_time",
    "alltoall_time", "algorithms", "traffic", "Traffic", "algorithm_crossover",
    "bus_factor", "algorithm_bandwidth", "bus_bandwidth", "LINK_MODELS",
]

# The two network models (module docstring): a port per rank into a switch, or a wire per
# pair of neighbours.
LINK_MODELS = ("switched", "direct")


def _link_model(links):
    if links not in LINK_MODELS:
        raise ValueError(f"links must be 'switched' (one port per rank into a switch: "
                         f"NVSwitch, InfiniBand) or 'direct' (one wire per pair of neighbours: "
                         f"a torus, point-to-point rings); got {links!r}")
    return links




def _sqrt(x):
    return sp.sqrt(x) if isinstance(x, sp.Basic) else np.sqrt(x)


# --------------------------------------------------------------------------------------
# Point to point
# --------------------------------------------------------------------------------------

def p2p_time(nbytes, alpha, beta):
    """Time to send one message of ``nbytes`` over one link: α + n/β (chapter 04).

    ``alpha`` is the per-message latency in seconds, ``beta`` the bandwidth in bytes/s in the
    direction of the transfer.
    """
    check.nonnegative("nbytes", nbytes)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    return alpha + nbytes / beta


def crossover_bytes(alpha, beta):
    """The message size n* = αβ at which latency and transfer time are equal (chapter 04).

    Below n* a message is latency-bound (α dominates), above it bandwidth-bound.
    """
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    return alpha * beta


def pingpong_time(nbytes, alpha, beta):
    """Round trip of a ping-pong: n bytes there, n bytes back, 2α + 2n/β (chapter 04).

    Both legs are timed on one clock, which is why measurements use it.
    """
    return 2 * p2p_time(nbytes, alpha, beta)


def messages_time(count, nbytes_each, alpha, beta):
    """Sending ``count`` messages of ``nbytes_each`` one after another: k(α + m/β) (chapter 04).

    Compare with one bucket of the same bytes, ``p2p_time(count * nbytes_each, ...)``: the
    bucket saves (k − 1)α, see :func:`bucket_saving`.
    """
    check.count("count", count)
    check.nonnegative("nbytes_each", nbytes_each)
    return count * p2p_time(nbytes_each, alpha, beta)


def bucket_saving(count, alpha):
    """Time saved by sending k messages as one bucket: (k − 1)α (chapter 04)."""
    check.count("count", count)
    check.nonnegative("alpha", alpha)
    return (count - 1) * alpha


def chunked_time(nbytes, chunks, alpha, beta, hops=1):
    """A message of ``nbytes`` cut into ``chunks`` equal pieces and pipelined over a chain
    of ``hops`` store-and-forward links: (k + h − 1)(α + n/(kβ)) (chapter 04).

    The first chunk needs h steps to reach the end of the chain and every further chunk one
    more step, each step costing α + n/(kβ). With ``hops=1`` this is k chunks in sequence on
    one link, kα + n/β: (k − 1)α more than one message.
    """
    check.nonnegative("nbytes", nbytes)
    check.count("chunks", chunks)
    check.count("hops", hops)
    return (chunks + hops - 1) * p2p_time(nbytes / chunks, alpha, beta)


def optimal_chunks(nbytes, alpha, beta, hops):
    """The chunk count that minimises :func:`chunked_time`: k* = sqrt((h − 1) n / (αβ))
    (chapter 04, derived there in SymPy).

    This is the real-valued minimiser. With one hop it is 0: on a single link cutting a
    message only adds latency, and the best whole count is 1. For a whole count use
    :func:`best_chunk_count`.
    """
    check.nonnegative("nbytes", nbytes)
    check.positive("alpha", alpha)
    check.positive("beta", beta)
    check.count("hops", hops)
    return _sqrt((hops - 1) * nbytes / (alpha * beta))


def best_chunk_count(nbytes, alpha, beta, hops) -> int:
    """The whole number of chunks (at least 1) with the least :func:`chunked_time`
    (chapter 04). Numbers only: it compares the two whole neighbours of k*.
    """
    if is_symbolic(nbytes, alpha, beta, hops):
        raise ValueError("best_chunk_count needs numbers; use optimal_chunks for the formula")
    k = float(optimal_chunks(nbytes, alpha, beta, hops))
    candidates = {max(1, int(np.floor(k))), max(1, int(np.ceil(k)))}
    return min(sorted(candidates), key=lambda c: float(chunked_time(nbytes, c, alpha, beta, hops)))


# --------------------------------------------------------------------------------------
# Fitting α and β to timings
# --------------------------------------------------------------------------------------

_FIT_MODELS = ("alpha_beta", "latency_only", "bandwidth_only")


@dataclass(frozen=True)
class AlphaBetaFit:
    """The result of :func:`fit_alpha_beta`. Unpacks as ``alpha, beta = fit``.

    ``r2_log`` is the coefficient of determination of log(time): 1 − SS_res/SS_tot with both
    sums taken over log t, so every size counts alike however small its time. A constant
    (latency-only) model scores about 0 or below, a wrong shape far below 0.
    ``rel_residuals`` are (measured − model)/model, one per size, for the one-way time model
    (the round trip halves both, so the ratio is the same).
    """

    alpha: float
    beta: float
    r2_log: float
    rel_residuals: np.ndarray = field(repr=False)
    model: str = "alpha_beta"
    round_trip: bool = False

    def __iter__(self):
        return iter((self.alpha, self.beta))

    @property
    def crossover(self) -> float:
        """n* = αβ of the fitted link, in bytes (infinite for a latency-only fit)."""
        return self.alpha * self.beta

    @property
    def median_abs_rel_residual(self) -> float:
        return float(np.median(np.abs(self.rel_residuals)))

    @property
    def max_abs_rel_residual(self) -> float:
        return float(np.max(np.abs(self.rel_residuals)))

    def predict(self, nbytes):
        """Model time for ``nbytes``: α + n/β, or the round trip 2α + 2n/β if fitted so."""
        nbytes = np.asarray(nbytes, dtype=float)
        t = self.alpha + nbytes / self.beta
        return 2 * t if self.round_trip else t


def _relative_lstsq(design: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Minimise sum(((design @ x − t)/t)^2) subject to x >= 0, for two or fewer columns.

    Dividing each row by its own time turns relative least squares into ordinary least
    squares (target 1). With two unknowns the non-negative solution is either the free one or
    the best fit with one coefficient at zero, so we try them in turn.
    """
    a = design / times[:, None]
    b = np.ones_like(times)
    x, *_ = np.linalg.lstsq(a, b, rcond=None)
    if np.all(x >= 0):
        return x
    best, best_err = None, np.inf
    for keep in range(design.shape[1]):
        col = a[:, keep]
        xk = max(0.0, float(col @ b / (col @ col)))
        trial = np.zeros(design.shape[1])
        trial[keep] = xk
        err = float(np.sum((a @ trial - b) ** 2))
        if err < best_err:
            best, best_err = trial, err
    return best


def fit_alpha_beta(sizes, times, round_trip: bool = False, model: str = "alpha_beta") -> AlphaBetaFit:
    """Fit α and β to measured (size, time) pairs (chapter 04).

    Minimises the sum of squared *relative* residuals, sum(((α + n/β − t)/t)^2), with α >= 0
    and 1/β >= 0. Timings across eight orders of magnitude of size span several orders of
    magnitude of time; an unweighted fit would be decided by the largest messages alone and
    could return any α at all. Weighting each point by 1/t makes a 10% miss at 1 byte cost as
    much as a 10% miss at 64 MB.

    ``round_trip=True`` reads ``times`` as ping-pong round trips, 2α + 2n/β, and still
    returns the one-way α and β. ``model`` may be ``"latency_only"`` (t = α, β infinite) or
    ``"bandwidth_only"`` (t = n/β, α = 0), to show how much worse a one-term model fits.
    Returns an :class:`AlphaBetaFit` with the fit's R² in log space and relative residuals.
    """
    if model not in _FIT_MODELS:
        raise ValueError(f"model must be one of {', '.join(_FIT_MODELS)}; got {model!r}")
    n = np.asarray(sizes, dtype=float).ravel()
    t = np.asarray(times, dtype=float).ravel()
    if n.size != t.size:
        raise ValueError(f"sizes and times must have the same length, got {n.size} and {t.size}")
    check.nonnegative("sizes", n)
    check.positive("times", t)
    needed = 2 if model == "alpha_beta" else 1
    if n.size < needed + 1:
        raise ValueError(f"sizes needs at least {needed + 1} points to fit and judge a "
                         f"{model} model, got {n.size}")
    if model == "alpha_beta" and np.unique(n).size < 2:
        raise ValueError("sizes must hold at least two different sizes to separate α from β")
    one_way = t / 2 if round_trip else t
    if model == "alpha_beta":
        alpha, inv_beta = _relative_lstsq(np.column_stack([np.ones_like(n), n]), one_way)
    elif model == "latency_only":
        alpha, inv_beta = _relative_lstsq(np.ones((n.size, 1)), one_way)[0], 0.0
    else:
        if np.all(n == 0):
            raise ValueError("a bandwidth-only model needs some sizes > 0")
        alpha, inv_beta = 0.0, _relative_lstsq(n[:, None], one_way)[0]
    beta = np.inf if inv_beta == 0 else 1.0 / inv_beta
    predicted = alpha + n * inv_beta
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(predicted > 0, one_way / predicted - 1.0, np.inf)
        log_pred = np.log(np.where(predicted > 0, predicted, np.finfo(float).tiny))
    log_t = np.log(one_way)
    ss_res = float(np.sum((log_t - log_pred) ** 2))
    ss_tot = float(np.sum((log_t - log_t.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else -np.inf)
    return AlphaBetaFit(float(alpha), float(beta), r2, rel, model, round_trip)


# --------------------------------------------------------------------------------------
# Collectives: what each algorithm sends, step by step (chapter 12), and what that costs
# --------------------------------------------------------------------------------------
#
# Every algorithm below runs in *steps*. In one step a rank sends and receives at most one
# message per link, all at once, and waits for them. A step costs α plus the bytes of the
# busiest link direction over β, so an algorithm's whole cost is
#
#     T = steps · α + step_bytes / β,
#
# where ``step_bytes`` adds up, step by step, the bytes that cross the busiest wire (the
# "direct" model), and ``port_bytes`` the bytes through the busiest port in one direction
# (the "switched" model: all of a rank's sends in a step share its one outgoing port, all
# its receives the incoming one). The functions below give these numbers in closed form,
# plus the bytes and messages an average rank sends; ``dtbook.collectives`` runs the same
# algorithms over real send/recv and counts the same numbers, and the tests check that
# they agree.

_COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast", "alltoall")
_DEFAULT_ALGORITHM = {"allreduce": "ring", "reduce_scatter": "ring", "allgather": "ring",
                      "broadcast": "tree", "alltoall": "pairwise"}


@dataclass(frozen=True)
class Traffic:
    """The schedule of a collective algorithm in numbers (chapter 12).

    ``steps``: how many steps run one after another (each pays α once);
    ``step_bytes``: bytes over the busiest wire in one direction, summed over the steps (what
    pays 1/β on direct links); ``port_bytes``: bytes through the busiest port in one
    direction, summed over the steps (what pays 1/β on a switched fabric; equal to
    ``step_bytes`` for schedules that send at most one message each way per step);
    ``sent_bytes``: bytes an average rank sends (all ranks' bytes over P); ``messages``:
    messages an average rank sends. ``phases`` is set for ``"hierarchical"``:
    ``(("inner", Traffic), ("outer", Traffic), ...)`` in the order they run.
    Unpacks as ``steps, step_bytes = traffic``.
    """

    steps: object
    step_bytes: object
    sent_bytes: object
    messages: object
    phases: tuple = ()
    port_bytes: object = None

    def __post_init__(self):
        if self.port_bytes is None:  # one message each way per step: port = wire
            object.__setattr__(self, "port_bytes", self.step_bytes)

    def __iter__(self):
        return iter((self.steps, self.step_bytes))

    def bytes(self, links="switched"):
        """The bytes that pay 1/β under a link model: ``port_bytes`` or ``step_bytes``."""
        return self.port_bytes if _link_model(links) == "switched" else self.step_bytes

    def time(self, alpha, beta, links="switched"):
        """steps · α + bytes(links) / β. For a hierarchical schedule, ``alpha`` and ``beta``
        may be dicts ``{"inner": ..., "outer": ...}``: each phase is charged its own link."""
        if self.phases:
            return sum(t.time(_level(alpha, lvl), _level(beta, lvl), links)
                       for lvl, t in self.phases)
        return self.steps * alpha + self.bytes(links) / beta


def _level(value, level):
    return value[level] if isinstance(value, dict) else value


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) and x.ndim > 0


def _int_map(fn, p):
    """Apply an integer function to a whole number p, element by element for arrays."""
    if _is_array(p):
        return np.vectorize(lambda q: fn(int(round(q))), otypes=[float])(p.astype(float))
    return fn(int(round(float(p))))


def _log2_ceil(p):
    """⌈log₂ P⌉: the steps of a binomial tree. For a symbol P, log₂ P (P a power of two)."""
    if is_symbolic(p):
        return sp.log(p, 2)
    return _int_map(lambda q: (q - 1).bit_length(), p)


def _log2_floor(p):
    """⌊log₂ P⌋: the depth of a binary heap of P nodes. For a symbol P, log₂ P."""
    if is_symbolic(p):
        return sp.log(p, 2)
    return _int_map(lambda q: q.bit_length() - 1, p)


def _flag(p, fn):
    """1 where fn(P) holds, else 0 (0 for a symbol, which stands for the generic case)."""
    if is_symbolic(p):
        return 0
    return _int_map(lambda q: int(bool(fn(q))), p)


def _fold(p):
    """For the power-of-two algorithms: (P', extra ranks, log₂ P', 1 if folding else 0).

    P' is the largest power of two <= P. The standard fold-in pairs the first 2(P − P')
    ranks: one of each pair hands its whole buffer to the other before the algorithm and
    gets the result back after it, two extra steps of n bytes."""
    if is_symbolic(p):
        return p, 0, sp.log(p, 2), 0
    p2 = _int_map(lambda q: 1 << (q.bit_length() - 1), p)
    return p2, p - p2, _log2_floor(p), _flag(p, lambda q: q & (q - 1))


def _require_power_of_two(p, what):
    if not is_symbolic(p) and np.any(_flag(p, lambda q: q & (q - 1))):
        raise ValueError(f"p must be a power of two for {what}, got {p!r} "
                         f"(use 'ring' for other sizes)")


# All-reduce ----------------------------------------------------------------------------

def _t_allreduce_ring(n, p):
    # Reduce-scatter then all-gather, P − 1 steps each; every step moves one n/P block per link.
    return Traffic(2 * (p - 1), 2 * (p - 1) * n / p, 2 * (p - 1) * n / p, 2 * (p - 1))


def _t_allreduce_bidirectional(n, p):
    # Two rings, one each way, each carrying half the buffer: the same 2(P − 1) steps, half
    # the bytes per wire. With P = 2 both rings use the one link between the two ranks. A
    # rank's port carries both halves, so on a switched fabric it is the plain ring.
    two = _flag(p, lambda q: q == 2)
    return Traffic(2 * (p - 1), (p - 1) * n / p * (1 + two), 2 * (p - 1) * n / p, 4 * (p - 1),
                   port_bytes=2 * (p - 1) * n / p)


def _half_floor(p):
    """⌊P/2⌋; for a symbol, P/2 (P even, the usual case)."""
    if is_symbolic(p):
        return p / 2
    return _int_map(lambda q: q // 2, p)


def _t_allreduce_two_sided(n, p):
    # Every block is reduced from both sides: partial sums travel clockwise from the ⌊P/2⌋
    # ranks behind its owner and counter-clockwise from the rest, so the reduce-scatter takes
    # ⌊P/2⌋ steps, one n/P block each way on every wire, and the all-gather the same. On
    # direct wires both terms halve; through a port the two directions' blocks queue, and
    # only the latency term does.
    a = _half_floor(p)
    return Traffic(2 * a, 2 * a * n / p, 2 * (p - 1) * n / p, 2 * (p - 1),
                   port_bytes=2 * (p - 1) * n / p)


def _t_allreduce_tree(n, p):
    # Binomial tree: reduce to rank 0 in ⌈log₂P⌉ steps, broadcast back in as many; the
    # whole buffer crosses one link in each step. Every rank but the root sends n once per
    # phase, so the average rank sends 2(P − 1)/P · n, as much as in a ring.
    L = _log2_ceil(p)
    return Traffic(2 * L, 2 * L * n, 2 * (p - 1) * n / p, 2 * (p - 1) / p)


def _power_of_two_flag(p):
    """1 where P > 1 is a power of two, else 0; 1 for a symbol (the generic case here)."""
    if is_symbolic(p):
        return 1
    return _flag(p, lambda q: q > 1 and not q & (q - 1))


def _t_allreduce_binary_tree(n, p):
    # Binary tree in heap order (children 2i + 1, 2i + 2): ⌊log₂P⌋ levels up, as many down.
    # Through a port a parent takes its two children's n one after the other: 2n a level,
    # except the deepest level when P is a power of two (it holds one node).
    D = _log2_floor(p)
    return Traffic(2 * D, 2 * D * n, 2 * (p - 1) * n / p, 2 * (p - 1) / p,
                   port_bytes=2 * (2 * D - _power_of_two_flag(p)) * n)


def _t_allreduce_double_binary_tree(n, p):
    # Two binary trees (the second the mirror image of the first), each reducing and
    # broadcasting half the buffer at the same time: half the bytes per wire of one tree.
    # Through a port, an inner rank of one tree takes n/2 from each of two children: n a
    # level, as much as one binomial tree (the deepest level n/2 when P is a power of two).
    D = _log2_floor(p)
    return Traffic(2 * D, D * n, 2 * (p - 1) * n / p, 4 * (p - 1) / p,
                   port_bytes=(2 * D - _power_of_two_flag(p)) * n)


def _t_allreduce_recursive_doubling(n, p):
    # log₂P' steps; in each, partners 2^k apart swap their whole buffers and both add.
    p2, extra, L, fold = _fold(p)
    return Traffic(L + 2 * fold, (L + 2 * fold) * n, (p2 * L + 2 * extra) * n / p,
                   (p2 * L + 2 * extra) / p)


def _t_allreduce_rabenseifner(n, p):
    # Recursive halving (a reduce-scatter in log₂P' steps of n/2, n/4, ..., n/P') then
    # recursive doubling (an all-gather in the reverse order).
    p2, extra, L, fold = _fold(p)
    return Traffic(2 * L + 2 * fold, (2 * (p2 - 1) / p2 + 2 * fold) * n,
                   2 * (p - 1) * n / p, (2 * p2 * L + 2 * extra) / p)


# Reduce-scatter and all-gather (n is the input of a reduce-scatter, the output of an
# all-gather; each rank ends with, or starts from, one block of n/P) ---------------------

def _t_ring_half(n, p):
    # P − 1 steps, one n/P block per link per step.
    return Traffic(p - 1, (p - 1) * n / p, (p - 1) * n / p, p - 1)


def _t_halving_doubling(n, p):
    # log₂P steps of n/2, n/4, ..., n/P (reduce-scatter; the all-gather is the reverse).
    _require_power_of_two(p, "recursive halving / doubling")
    L = _log2_floor(p)
    return Traffic(L, (p - 1) * n / p, (p - 1) * n / p, L)


# Broadcast (n is the buffer the root sends) -----------------------------------------------

def _t_broadcast_tree(n, p):
    # Binomial tree: the number of ranks holding the data doubles every step.
    L = _log2_ceil(p)
    return Traffic(L, L * n, (p - 1) * n / p, (p - 1) / p)


def _t_broadcast_ring(n, p, chunks=1):
    # A chain from the root, the buffer cut into k chunks and pipelined: the last rank gets
    # the first chunk after P − 1 steps and one more chunk every step after that, as in
    # chapter 04's chunked_time with P − 1 hops.
    k = chunks
    busy = 1 - _flag(p, lambda q: q == 1)
    steps = (p + k - 2) * busy
    return Traffic(steps, steps * n / k, (p - 1) * n / p, (p - 1) * k / p)


# All-to-all (n is the buffer each rank sends, one n/P block to every rank) -----------------

def _t_alltoall_pairwise(n, p):
    # In step k rank r sends its block for rank r + k and receives from rank r − k.
    return Traffic(p - 1, (p - 1) * n / p, (p - 1) * n / p, p - 1)


# One table per collective: algorithm name -> traffic function(n, p, **options).
_TRAFFIC = {
    "allreduce": {
        "ring": _t_allreduce_ring,
        "tree": _t_allreduce_tree,
        "recursive_doubling": _t_allreduce_recursive_doubling,
        "rabenseifner": _t_allreduce_rabenseifner,
        "hierarchical": None,
        "bidirectional_ring": _t_allreduce_bidirectional,
        "two_sided_ring": _t_allreduce_two_sided,
        "binary_tree": _t_allreduce_binary_tree,
        "double_binary_tree": _t_allreduce_double_binary_tree,
    },
    "reduce_scatter": {
        "ring": _t_ring_half,
        "recursive_halving": _t_halving_doubling,
        "recursive_doubling": _t_halving_doubling,
        "hierarchical": None,
    },
    "allgather": {
        "ring": _t_ring_half,
        "recursive_doubling": _t_halving_doubling,
        "hierarchical": None,
    },
    "broadcast": {"tree": _t_broadcast_tree, "ring": _t_broadcast_ring},
    "alltoall": {"pairwise": _t_alltoall_pairwise},
}

# Hierarchical: (level, collective run at that level, size of the buffer it runs on, as a
# function of n and the inner group size G) for each phase, in order.
_HIERARCHY = {
    "allreduce": (("inner", "reduce_scatter", lambda n, g: n),
                  ("outer", "allreduce", lambda n, g: n / g),
                  ("inner", "allgather", lambda n, g: n)),
    "reduce_scatter": (("inner", "reduce_scatter", lambda n, g: n),
                       ("outer", "reduce_scatter", lambda n, g: n / g)),
    "allgather": (("outer", "allgather", lambda n, g: n / g),
                  ("inner", "allgather", lambda n, g: n)),
}


def algorithms(collective: str) -> tuple[str, ...]:
    """The algorithm names :mod:`dtbook.comm` can cost for a collective: ``"allreduce"``,
    ``"reduce_scatter"``, ``"allgather"``, ``"broadcast"`` or ``"alltoall"``
    (chapters 04, 12, 13)."""
    if collective not in _TRAFFIC:
        raise ValueError(f"collective must be one of {', '.join(_TRAFFIC)}; got {collective!r}")
    return tuple(_TRAFFIC[collective])


def _check_collective(n, p, alpha=None, beta=None):
    check.nonnegative("n", n)
    check.count("p", p)
    if alpha is not None:
        check.nonnegative("alpha", alpha)
    if beta is not None:
        check.positive("beta", beta)


def _lookup(collective, algorithm):
    if collective not in _TRAFFIC:
        raise ValueError(f"collective must be one of {', '.join(_TRAFFIC)}; got {collective!r}")
    table = _TRAFFIC[collective]
    if algorithm is None:
        algorithm = _DEFAULT_ALGORITHM[collective]
    if algorithm not in table:
        raise ValueError(f"algorithm {algorithm!r} is not available for {collective}; "
                         f"supported: {', '.join(repr(a) for a in table)}")
    return algorithm


def _hierarchy_sizes(p, inner):
    if inner is None:
        raise ValueError("inner (the size of each inner group, e.g. GPUs per node) is "
                         "required for algorithm='hierarchical'")
    check.count("inner", inner)
    if not is_symbolic(p, inner):
        if np.any(np.asarray(p, dtype=float) % np.asarray(inner, dtype=float) != 0):
            raise ValueError(f"inner must divide p: p = {p!r} ranks cannot form groups of "
                             f"inner = {inner!r}")
    if isinstance(p, int) and isinstance(inner, int):
        return p // inner
    return p / inner


def traffic(collective, n, p, algorithm=None, *, inner=None, outer_algorithm="ring", chunks=1):
    """Steps, bytes and messages of one collective algorithm, as a :class:`Traffic`
    (chapter 12).

    ``collective`` is ``"allreduce"``, ``"reduce_scatter"``, ``"allgather"``,
    ``"broadcast"`` or ``"alltoall"``; ``n`` the whole buffer in bytes as nccl-tests counts
    it (see the module docstring); ``algorithm`` one of :func:`algorithms` (default: ring,
    or tree for broadcast, pairwise for all-to-all). ``inner`` and ``outer_algorithm``
    apply to ``"hierarchical"`` (see :func:`allreduce_time`), ``chunks`` to the ring
    broadcast. For a symbolic P, log₂ P stands for ⌈log₂ P⌉ and the power-of-two
    algorithms need no fold-in: the formulas are those of P a power of two.
    """
    algorithm = _lookup(collective, algorithm)
    _check_collective(n, p)
    if algorithm == "hierarchical":
        outer = _hierarchy_sizes(p, inner)
        phases = []
        for level, coll, size in _HIERARCHY[collective]:
            if level == "inner":
                t = traffic(coll, size(n, inner), inner, "ring")
            else:
                t = traffic(coll, size(n, inner), outer, outer_algorithm)
            phases.append((level, t))
        total = [sum(getattr(t, f) for _, t in phases)
                 for f in ("steps", "step_bytes", "sent_bytes", "messages")]
        return Traffic(*total, phases=tuple(phases),
                       port_bytes=sum(t.port_bytes for _, t in phases))
    if inner is not None or outer_algorithm != "ring":
        raise ValueError("inner and outer_algorithm only apply to algorithm='hierarchical'")
    if collective == "broadcast" and algorithm == "ring":
        check.count("chunks", chunks)
        return _t_broadcast_ring(n, p, chunks)
    if chunks != 1:
        raise ValueError("chunks only applies to the ring broadcast")
    return _TRAFFIC[collective][algorithm](n, p)


def _time(collective, n, p, alpha, beta, algorithm, inner=None, alpha_inner=None,
          beta_inner=None, alpha_outer=None, beta_outer=None, outer_algorithm="ring", chunks=1,
          links="switched", alpha_call=0):
    _check_collective(n, p, alpha, beta)
    _link_model(links)
    check.nonnegative("alpha_call", alpha_call)
    levels = {"alpha_inner": alpha_inner, "beta_inner": beta_inner,
              "alpha_outer": alpha_outer, "beta_outer": beta_outer}
    t = traffic(collective, n, p, algorithm, inner=inner, outer_algorithm=outer_algorithm,
                chunks=chunks)
    if not t.phases:
        given = [k for k, v in levels.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} only apply to algorithm='hierarchical'")
        return alpha_call + t.time(alpha, beta, links)
    a = {"inner": alpha if alpha_inner is None else alpha_inner,
         "outer": alpha if alpha_outer is None else alpha_outer}
    b = {"inner": beta if beta_inner is None else beta_inner,
         "outer": beta if beta_outer is None else beta_outer}
    check.nonnegative("alpha_inner", a["inner"])
    check.nonnegative("alpha_outer", a["outer"])
    check.positive("beta_inner", b["inner"])
    check.positive("beta_outer", b["outer"])
    return alpha_call + t.time(a, b, links)


_HIER_DOC = """
    ``"hierarchical"`` runs on P = G × N ranks in N groups of ``inner`` = G consecutive
    ranks (the GPUs of a node). Keyword arguments: ``inner`` (G, required; it must divide
    P), ``alpha_inner``, ``beta_inner`` (the link inside a group), ``alpha_outer``,
    ``beta_outer`` (the link between groups) and ``outer_algorithm`` (what runs between
    groups, default ``"ring"``). A per-level α or β left out is the positional ``alpha`` or
    ``beta``, so ``f(n, 64, a_net, b_net, "hierarchical", inner=8, alpha_inner=a_nv,
    beta_inner=b_nv)`` is an 8 × 8 cluster whose nodes talk over (a_net, b_net)."""

_COMMON_DOC = """
    ``links``: ``"switched"`` (default: one port per rank, as NVSwitch and InfiniBand give) or
    ``"direct"`` (a wire per pair of neighbours, as a torus gives); see the module notes.
    ``alpha_call``: the fixed cost of one library call on top of the schedule's steps
    (chapter 04), 0 by default."""


def allreduce_time(n, p, alpha, beta, algorithm="ring", *, inner=None, alpha_inner=None,
                   beta_inner=None, alpha_outer=None, beta_outer=None, outer_algorithm="ring",
                   links="switched", alpha_call=0):
    """All-reduce of an n-byte buffer over p ranks (chapter 04 preview; chapters 12, 13).

    - ``"ring"``: 2(P − 1)α + 2(P − 1)/P · n/β, a reduce-scatter then an all-gather. As P
      grows it tends to 2Pα + 2n/β: the latency term grows with P, the bandwidth term not.
    - ``"tree"`` (binomial reduce then broadcast): 2⌈log₂P⌉(α + n/β).
    - ``"recursive_doubling"``: log₂P (α + n/β); when P is not a power of two, P' = the
      largest power of two below it and two more steps fold the extra ranks in and out:
      (⌊log₂P⌋ + 2)(α + n/β).
    - ``"rabenseifner"`` (recursive halving, then doubling): 2 log₂P α + 2(P − 1)/P · n/β;
      with the fold-in, (2⌊log₂P⌋ + 2)α + (2(P' − 1)/P' + 2) n/β.
    - ``"hierarchical"``: a ring reduce-scatter inside each group, an all-reduce of the
      n/G-byte block between groups, a ring all-gather inside each group:
      2(G − 1)α_in + 2(G − 1)/G · n/β_in + T_outer(n/G, N).
    - ``"bidirectional_ring"``: two rings, one each way, each with half the buffer. Direct
      links: 2(P − 1)α + (P − 1)/P · n/β, only the bandwidth term halves; switched: the
      ring's time (both halves share each port).
    - ``"two_sided_ring"``: each block reduced from both sides at once, 2⌊P/2⌋ steps of one
      n/P block each way. Direct links: 2⌊P/2⌋(α + n/(Pβ)), both terms about halve;
      switched: 2⌊P/2⌋α + 2(P − 1)/P · n/β, only the latency term does.
    - ``"binary_tree"``: direct 2⌊log₂P⌋(α + n/β); switched, a parent takes 2n from its two
      children: 2⌊log₂P⌋α + 2(2⌊log₂P⌋ − [P a power of two]) n/β.
      ``"double_binary_tree"``, two mirrored binary trees with half the buffer each: direct
      2⌊log₂P⌋(α + n/(2β)); switched 2⌊log₂P⌋α + (2⌊log₂P⌋ − [P a power of two]) n/β.
    """
    return _time("allreduce", n, p, alpha, beta, algorithm, inner, alpha_inner, beta_inner,
                 alpha_outer, beta_outer, outer_algorithm, links=links, alpha_call=alpha_call)


def reduce_scatter_time(n, p, alpha, beta, algorithm="ring", *, inner=None, alpha_inner=None,
                        beta_inner=None, alpha_outer=None, beta_outer=None,
                        outer_algorithm="ring", links="switched", alpha_call=0):
    """Reduce-scatter of an n-byte input over p ranks, each keeping n/P (chapters 04, 12, 13).

    - ``"ring"``: (P − 1)α + (P − 1)/P · n/β.
    - ``"recursive_halving"`` (also accepted as ``"recursive_doubling"``, the same exchanges
      in reverse order): log₂P α + (P − 1)/P · n/β; P must be a power of two.
    - ``"hierarchical"``: a ring reduce-scatter inside each group (n), then one between
      groups on the n/G-byte block.
    """
    return _time("reduce_scatter", n, p, alpha, beta, algorithm, inner, alpha_inner,
                 beta_inner, alpha_outer, beta_outer, outer_algorithm, links=links,
                 alpha_call=alpha_call)


def allgather_time(n, p, alpha, beta, algorithm="ring", *, inner=None, alpha_inner=None,
                   beta_inner=None, alpha_outer=None, beta_outer=None, outer_algorithm="ring",
                   links="switched", alpha_call=0):
    """All-gather to an n-byte output over p ranks, each contributing n/P (chapters 04, 12, 13).

    - ``"ring"``: (P − 1)α + (P − 1)/P · n/β.
    - ``"recursive_doubling"``: log₂P α + (P − 1)/P · n/β; P must be a power of two.
    - ``"hierarchical"``: an all-gather between groups to n/G bytes, then a ring all-gather
      inside each group to n.
    """
    return _time("allgather", n, p, alpha, beta, algorithm, inner, alpha_inner, beta_inner,
                 alpha_outer, beta_outer, outer_algorithm, links=links, alpha_call=alpha_call)


for _f in (allreduce_time, reduce_scatter_time, allgather_time):
    if _f.__doc__:  # None under python -OO
        _f.__doc__ = _f.__doc__.rstrip() + "\n" + _HIER_DOC + "\n" + _COMMON_DOC


def broadcast_time(n, p, alpha, beta, algorithm="tree", *, chunks=1, links="switched",
                   alpha_call=0):
    """Broadcast of an n-byte buffer from one rank to p ranks (chapters 11, 12, 13).

    The default is ``"tree"``, a binomial tree: ⌈log₂P⌉(α + n/β). ``"ring"`` is a chain
    from the root with the buffer cut into ``chunks`` pieces and pipelined:
    (P + k − 2)(α + n/(kβ)), which is chapter 04's ``chunked_time`` over P − 1 hops; with
    one chunk (the default) it is the naive (P − 1)(α + n/β).
    """
    return _time("broadcast", n, p, alpha, beta, algorithm, chunks=chunks, links=links,
                 alpha_call=alpha_call)


def alltoall_time(n, p, alpha, beta, algorithm="pairwise", *, links="switched", alpha_call=0):
    """All-to-all where each rank sends n bytes, n/P to every rank (chapters 11, 13, 18).

    ``"pairwise"``: in step k each rank sends to the rank k ahead and receives from the
    rank k behind, (P − 1)α + (P − 1)/P · n/β.
    """
    return _time("alltoall", n, p, alpha, beta, algorithm, links=links, alpha_call=alpha_call)


for _f in (broadcast_time, alltoall_time):
    if _f.__doc__:
        _f.__doc__ = _f.__doc__.rstrip() + "\n" + _COMMON_DOC
del _f


def algorithm_crossover(p, alpha, beta, first="tree", second="ring", collective="allreduce",
                        links="switched", **options):
    """The buffer size n* at which two algorithms take the same time (chapter 12).

    Both times are linear in n, steps·α + c·n/β, so n* = (steps₂ − steps₁)αβ / (c₁ − c₂).
    Below n* the algorithm with fewer steps wins, above it the one with fewer bytes. For
    tree against ring all-reduce: 2αβ(P − 1 − ⌈log₂P⌉) / (2⌈log₂P⌉ − 2(P − 1)/P). Returns
    ``inf`` where the two never cross (nan where they are the same line). ``links`` as in
    :func:`allreduce_time`.
    """
    _link_model(links)
    check.count("p", p)
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    t1 = traffic(collective, 1, p, first, **options)
    t2 = traffic(collective, 1, p, second, **options)
    gap_steps = t2.steps - t1.steps
    gap_bytes = t1.bytes(links) - t2.bytes(links)     # per byte of buffer
    if is_symbolic(p, alpha, beta, gap_steps, gap_bytes):
        return gap_steps * alpha * beta / gap_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.divide(np.asarray(gap_steps * alpha * beta, dtype=float),
                        np.asarray(gap_bytes, dtype=float))
        out = np.where(np.asarray(gap_bytes) == 0,
                       np.where(np.asarray(gap_steps) == 0, np.nan, np.inf), out)
        out = np.where(out < 0, np.inf, out)
    return out if out.ndim else float(out)


# --------------------------------------------------------------------------------------
# Algorithm and bus bandwidth, as nccl-tests reports them (chapter 13)
# --------------------------------------------------------------------------------------

_BUS_FACTOR = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1,
    "reduce": lambda p: 1,
    "sendrecv": lambda p: 1,
}


def bus_factor(collective, p):
    """nccl-tests' factor from algorithm to bus bandwidth (chapter 13): 2(P − 1)/P for
    all-reduce, (P − 1)/P for reduce-scatter, all-gather and all-to-all, 1 for broadcast,
    reduce and send/recv. It is the share of the buffer a ring moves over each link, so the
    bus bandwidth of a good implementation approaches the link's β whatever P is."""
    if collective not in _BUS_FACTOR:
        raise ValueError(f"collective must be one of {', '.join(_BUS_FACTOR)}; got {collective!r}")
    check.count("p", p)
    return _BUS_FACTOR[collective](p)


def algorithm_bandwidth(n, seconds):
    """algbw = n / t, with n the buffer as nccl-tests counts it (chapter 13)."""
    check.nonnegative("n", n)
    check.positive("seconds", seconds)
    return n / seconds


def bus_bandwidth(n, seconds, p, collective="allreduce"):
    """busbw = algbw × bus_factor(collective, P), the nccl-tests convention (chapter 13).

    A ring all-reduce that runs at the link's speed has busbw = β:
    ``bus_bandwidth(n, allreduce_time(n, p, 0, beta), p) == beta``.
    """
    return algorithm_bandwidth(n, seconds) * bus_factor(collective, p)


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
