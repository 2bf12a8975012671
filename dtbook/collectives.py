"""Collective algorithms written over point-to-point send and receive (chapters 11, 12, 13a).

Each function here does what a ``torch.distributed`` collective does, by an algorithm you can
read: ring, bidirectional ring, two-sided ring, binomial / binary / double binary tree, recursive doubling,
Rabenseifner (recursive halving then doubling) and hierarchical (inside groups, then
between them). It runs inside a worker that already has a process group, such as one
started by :func:`dtbook.dist.launch`, and returns a :class:`Stats` that counts what this
rank sent and received, step by step::

    import torch
    from dtbook import collectives
    from dtbook.dist import launch

    def worker(rank, world_size):
        x = torch.arange(10.0) * (rank + 1)
        stats = collectives.all_reduce(x, algorithm="ring")   # in place, like dist.all_reduce
        return x, stats

    results = launch(worker, 4)
    total = collectives.combine([s for _, s in results])      # the whole group's schedule
    total.steps, total.step_bytes                              # 6 steps, 2·3/4 of the buffer

Every algorithm runs in *steps*. In a step, a rank posts all its receives and sends at once
(``irecv``/``isend``, so two ranks sending to each other never wait on each other) and then
waits for them. :class:`Stats` records, for every step, the bytes on the busiest link
direction of this rank (a wire to one peer, the "direct" model of :mod:`dtbook.comm`) and
the bytes through its port in the busier direction (all its sends, or all its receives: the
"switched" model), so that ``steps · α + bytes / β`` is the time the α-β model charges under
either, the same closed forms as :func:`dtbook.comm.traffic`. Buffers are cut into blocks
with ``torch.tensor_split``, so sizes that P does not divide work everywhere (the first
blocks are one element longer); empty blocks are not sent. Recursive doubling and
Rabenseifner handle any P with the standard fold-in of the extra ranks; the stand-alone
recursive-halving reduce-scatter and recursive-doubling all-gather need P a power of two
(``ValueError`` otherwise). Reductions: ``op`` = ``"sum"`` (default), ``"prod"``, ``"max"``
or ``"min"``.

Ranks (``src``, peers) are ranks of ``group`` (the default group when None), as in
``torch.distributed``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = [
    "Stats", "GroupStats", "combine", "all_reduce", "reduce_scatter", "all_gather",
    "broadcast", "all_to_all", "Hierarchy", "hierarchy", "algorithms", "emulated_links",
]


# ------------------------------------------------------------------------------- counting

@dataclass
class Stats:
    """What one rank sent and received in one call.

    ``sent_bytes``, ``recv_bytes``, ``messages`` (sent), ``received`` (messages);
    ``sent_to``: bytes sent to each peer, by global rank; ``rounds``: step index ->
    (level, bytes on this rank's busiest link direction in that step), level being
    ``"flat"``, or ``"inner"``/``"outer"`` in a hierarchical all-reduce; ``through``: step
    index -> bytes in and out of this rank together (what a step costs when one resource
    moves all of a rank's bytes, such as a CPU copying them or a half-duplex port);
    ``ports``: step index -> (level, bytes through this rank's port in the busier direction:
    everything it sent, or everything it received, in that step).
    """

    rank: int = -1
    sent_bytes: int = 0
    recv_bytes: int = 0
    messages: int = 0
    received: int = 0
    sent_to: dict = field(default_factory=dict)
    rounds: dict = field(default_factory=dict)
    through: dict = field(default_factory=dict)
    ports: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """Steps this rank took part in."""
        return len(self.rounds)

    @property
    def step_bytes(self) -> int:
        """Bytes on this rank's busiest link direction, summed over its steps."""
        return sum(b for _, b in self.rounds.values())

    def time(self, alpha, beta, links="switched"):
        """steps · α + bytes / β under ``links`` ("switched": port bytes, "direct": wire
        bytes); α and β may be dicts keyed by level."""
        return _model_time(self.ports if _switched(links) else self.rounds, alpha, beta)


@dataclass
class GroupStats:
    """The whole group's view of one call, from every rank's :class:`Stats` (:func:`combine`).

    ``steps``: steps in the schedule; ``step_bytes``: for each step the busiest link of any
    rank, summed; ``sent_bytes`` and ``messages``: per rank, averaged over the ranks (the
    figures :func:`dtbook.comm.traffic` gives in closed form); ``max_sent_bytes``: the
    busiest rank's bytes; ``links``: (source, destination) global ranks -> bytes;
    ``through_bytes``: for each step the most bytes in and out of any one rank, summed (the
    bandwidth term when a rank's own bytes, not a link's, set the pace); ``port_bytes``: for
    each step the busiest port in its busier direction, summed (the switched model's
    bandwidth term, :attr:`dtbook.comm.Traffic.port_bytes`).
    """

    steps: int
    step_bytes: int
    sent_bytes: float
    messages: float
    max_sent_bytes: int
    links: dict
    rounds: dict
    through_bytes: int = 0
    port_bytes: int = 0
    ports: dict = field(default_factory=dict)

    def time(self, alpha, beta, links="switched"):
        """The α-β model's time for the schedule: Σ over steps of α + busiest bytes / β, the
        busiest port ("switched") or the busiest wire ("direct")."""
        return _model_time(self.ports if _switched(links) else self.rounds, alpha, beta)


def _switched(links):
    if links not in ("switched", "direct"):
        raise ValueError(f"links must be 'switched' or 'direct', got {links!r}")
    return links == "switched"


def _model_time(rounds, alpha, beta):
    def pick(v, level):
        return v[level] if isinstance(v, dict) else v
    return sum(pick(alpha, lvl) + b / pick(beta, lvl) for lvl, b in rounds.values())


def combine(stats) -> GroupStats:
    """Merge the :class:`Stats` of every rank of one call into a :class:`GroupStats`."""
    stats = list(stats)
    if not stats:
        raise ValueError("stats must hold one Stats per rank, got none")
    rounds, links, through, ports = {}, {}, {}, {}
    for s in stats:
        for i, b in s.through.items():
            through[i] = max(through.get(i, 0), b)
        for mine, merged in ((s.rounds, rounds), (s.ports, ports)):
            for i, (level, b) in mine.items():
                merged[i] = (level, max(merged.get(i, (level, 0))[1], b))
        for dst, b in s.sent_to.items():
            links[(s.rank, dst)] = links.get((s.rank, dst), 0) + b
    rounds, ports = dict(sorted(rounds.items())), dict(sorted(ports.items()))
    return GroupStats(
        steps=len(rounds),
        step_bytes=sum(b for _, b in rounds.values()),
        sent_bytes=sum(s.sent_bytes for s in stats) / len(stats),
        messages=sum(s.messages for s in stats) / len(stats),
        max_sent_bytes=max(s.sent_bytes for s in stats),
        links=links,
        rounds=rounds,
        through_bytes=sum(through.values()),
        port_bytes=sum(b for _, b in ports.values()),
        ports=ports,
    )


_EMULATED = {"beta": None}


@contextlib.contextmanager
def emulated_links(beta):
    """Give the links a bandwidth inside the block (chapters 12, 13a).

    Processes on one machine share its cores and memory, so their "links" are not the
    independent, full-duplex wires the α-β model assumes. Inside this block each rank holds
    a step's messages back for (bytes to that peer) / β before sending, as a wire of
    bandwidth β would; messages to different peers wait side by side, the two directions
    of a link do not wait on each other, and waiting costs no CPU. The latency stays the
    real one. ``beta`` is bytes/s per direction for every link, or a function
    ``beta(src, dst)`` of the two global ranks, to give links different speeds (a slow
    network between "nodes", say); ``None`` turns emulation off. Use it in the worker,
    around the calls to time::

        with collectives.emulated_links(50e6):
            collectives.all_reduce(x, "ring")

        node = lambda r: r // 2        # 2 nodes of 2: fast inside, 10x slower between
        with collectives.emulated_links(lambda s, d: 500e6 if node(s) == node(d) else 50e6):
            collectives.all_reduce(x, "hierarchical", inner=2)
    """
    if beta is not None and not callable(beta) and not (
            isinstance(beta, (int, float)) and not isinstance(beta, bool) and beta > 0):
        raise ValueError(f"beta must be bytes/s > 0, a function beta(src, dst), or None; "
                         f"got {beta!r}")
    before = _EMULATED["beta"]
    _EMULATED["beta"] = beta
    try:
        yield
    finally:
        _EMULATED["beta"] = before


def _emulated_wait(me, out):
    """Seconds the busiest emulated outgoing link needs for ``out`` (global peer -> bytes)."""
    beta = _EMULATED["beta"]
    if beta is None or not out:
        return 0.0
    if callable(beta):
        return max(b / beta(me, peer) for peer, b in out.items())
    return max(out.values()) / beta


class _Links:
    """The point-to-point links of one process group as one rank sees them, counted."""

    def __init__(self, group, stats: Stats, level: str = "flat"):
        self.group = group
        self.ranks = dist.get_process_group_ranks(group or dist.group.WORLD)  # group -> global
        self.size = len(self.ranks)
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError("this rank is not a member of the group")
        self.stats, self.level = stats, level

    def step(self, index, send=(), recv=()):
        """One step: post every receive and every send, then wait for all of them.

        ``send`` and ``recv`` hold ``(peer, tensor)`` or ``(peer, tensor, tag)``, peers being
        ranks of this group; two messages between the same pair in the same step need
        different tags. Empty tensors are not sent.
        """
        works, load = [], {}
        for item in recv:
            peer, tensor, tag = (*item, 0)[:3]
            if tensor.numel():
                works.append(dist.irecv(tensor, self.ranks[peer], group=self.group, tag=tag))
                nbytes = tensor.numel() * tensor.element_size()
                self.stats.recv_bytes += nbytes
                self.stats.received += 1
                load[("in", peer)] = load.get(("in", peer), 0) + nbytes
        if _EMULATED["beta"] is not None:  # the wire of the busiest outgoing link, emulated
            out = {}
            for peer, tensor, *_ in send:
                dst = self.ranks[peer]
                out[dst] = out.get(dst, 0) + tensor.numel() * tensor.element_size()
            wait = _emulated_wait(self.ranks[self.rank], out)
            if wait > 0:
                time.sleep(wait)
        for item in send:
            peer, tensor, tag = (*item, 0)[:3]
            if tensor.numel():
                works.append(dist.isend(tensor, self.ranks[peer], group=self.group, tag=tag))
                nbytes = tensor.numel() * tensor.element_size()
                self.stats.sent_bytes += nbytes
                self.stats.messages += 1
                dst = self.ranks[peer]
                self.stats.sent_to[dst] = self.stats.sent_to.get(dst, 0) + nbytes
                load[("out", peer)] = load.get(("out", peer), 0) + nbytes
        for work in works:
            work.wait()
        if load:  # each peer is its own link, full duplex: the busiest direction sets the pace
            level, before = self.stats.rounds.get(index, (self.level, 0))
            self.stats.rounds[index] = (level, max(before, max(load.values())))
            self.stats.through[index] = self.stats.through.get(index, 0) + sum(load.values())
            port = {way: sum(b for (w, _), b in load.items() if w == way) for way in ("in", "out")}
            level, before = self.stats.ports.get(index, (self.level, 0))
            self.stats.ports[index] = (level, max(before, port["in"], port["out"]))


_OPS = {
    "sum": lambda acc, x: acc.add_(x),
    "prod": lambda acc, x: acc.mul_(x),
    "max": lambda acc, x: torch.maximum(acc, x, out=acc),
    "min": lambda acc, x: torch.minimum(acc, x, out=acc),
}


def _reducer(op):
    if op not in _OPS:
        raise ValueError(f"op must be one of {', '.join(_OPS)}; got {op!r}")
    return _OPS[op]


def _flat(tensor, name="tensor"):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return tensor.view(-1)


def _segments(buf, parts):
    """Cut buf into `parts` blocks; return (blocks, seg) with seg(a, b) = blocks a..b-1 as one view."""
    blocks = torch.tensor_split(buf, parts)
    offsets = [0]
    for b in blocks:
        offsets.append(offsets[-1] + b.numel())
    return blocks, lambda a, b: buf[offsets[a]:offsets[b]]


# ------------------------------------------------------------------------------- rings

def _ring(links, lanes, phase, reduce, first):
    """The reduce-scatter (phase "rs") or all-gather ("ag") half of a ring, on every lane at once.

    A lane is ``(buffer, direction)``: the buffer is cut into P blocks and passed to rank
    r + 1 (direction +1) or r − 1 (direction −1). Counting ranks along the lane, rank r sits
    at position v (r going clockwise, −r mod P the other way). In reduce-scatter step k the
    rank at v sends block v − k − 1 and adds the block v − k − 2 it receives into its own
    copy; after P − 1 steps it holds block v summed over every rank. In all-gather step k it
    passes on block v − k, which it already holds, and receives block v − k − 1.
    """
    P, r = links.size, links.rank
    for k in range(P - 1):
        send, recv, pending = [], [], []
        for tag, (buf, direction) in enumerate(lanes):
            blocks = torch.tensor_split(buf, P)
            v = r if direction == 1 else (-r) % P
            after, before = (r + direction) % P, (r - direction) % P
            if phase == "rs":
                into = blocks[(v - k - 2) % P]
                incoming = torch.empty_like(into)
                send.append((after, blocks[(v - k - 1) % P], tag))
                recv.append((before, incoming, tag))
                pending.append((into, incoming))
            else:
                send.append((after, blocks[(v - k) % P], tag))
                recv.append((before, blocks[(v - k - 1) % P], tag))
        links.step(first + k, send, recv)
        for into, incoming in pending:
            reduce(into, incoming)
    return first + max(P - 1, 0)


def _allreduce_ring(links, buf, reduce, first):
    lanes = [(buf, 1)]
    step = _ring(links, lanes, "rs", reduce, first)
    return _ring(links, lanes, "ag", reduce, step)


def _allreduce_bidirectional(links, buf, reduce, first):
    # Half the buffer goes clockwise, half counter-clockwise, in the same steps.
    lanes = list(zip(torch.tensor_split(buf, 2), (1, -1)))
    step = _ring(links, lanes, "rs", reduce, first)
    return _ring(links, lanes, "ag", reduce, step)


def _allreduce_two_sided(links, buf, reduce, first):
    """Every block reduced from both sides. Block j's partial sums travel clockwise from the
    a = ⌊P/2⌋ ranks behind rank j and counter-clockwise from the c = P − 1 − a ranks ahead
    of it, one hop a step, each rank adding its own copy as the sum passes; rank j adds
    both. Then rank j's block travels out the same two ways. A rank sends one block each
    way per step, so a step costs one block per wire and two per port."""
    P, r = links.size, links.rank
    a, c = P // 2, (P - 1) // 2
    blocks = torch.tensor_split(buf, P)
    after, before = (r + 1) % P, (r - 1) % P
    for t in range(a):                                 # reduce-scatter
        send, recv, pending = [], [], []
        cw_in, ccw_in = blocks[(r - 1 + a - t) % P], blocks[(r + 1 - c + t) % P]
        send.append((after, blocks[(r + a - t) % P], 0))
        recv.append((before, incoming := torch.empty_like(cw_in), 0))
        pending.append((cw_in, incoming))
        if t < c:
            send.append((before, blocks[(r - c + t) % P], 1))
            recv.append((after, incoming := torch.empty_like(ccw_in), 1))
            pending.append((ccw_in, incoming))
        links.step(first + t, send, recv)
        for into, incoming in pending:
            reduce(into, incoming)
    for t in range(a):                                 # all-gather
        send = [(after, blocks[(r - t) % P], 0)]
        recv = [(before, blocks[(r - 1 - t) % P], 0)]
        if t < c:
            send.append((before, blocks[(r + t) % P], 1))
            recv.append((after, blocks[(r + 1 + t) % P], 1))
        links.step(first + a + t, send, recv)
    return first + 2 * a


# ------------------------------------------------------------------------------- trees
#
# A tree is given by every rank's parent (None for the root) and the step of the reduce
# phase in which the rank sends to its parent; a rank's children send in earlier steps, so
# it has their data by then. The broadcast phase runs the same edges in reverse order.

def _binomial(P, root=0):
    """Binomial tree: rank v (counted from the root) sends to v minus its lowest set bit, in
    step log₂ of that bit. The ranks holding a partial result halve every step: ⌈log₂P⌉ steps."""
    parent, step = [None] * P, [None] * P
    for r in range(P):
        v = (r - root) % P
        if v:
            low = v & -v
            parent[r] = (v - low + root) % P
            step[r] = low.bit_length() - 1
    return parent, step


def _heap(P, mirror=False):
    """Binary tree in heap order (position h has children 2h + 1 and 2h + 2), or its mirror
    image (position h is rank P − 1 − h). A rank at depth d sends up in step D − d, where
    D = ⌊log₂P⌋ is the deepest level."""
    def position(r):
        return P - 1 - r if mirror else r  # its own inverse

    deepest = P.bit_length() - 1
    parent, step = [None] * P, [None] * P
    for r in range(P):
        h = position(r)
        if h:
            parent[r] = position((h - 1) // 2)
            step[r] = deepest - ((h + 1).bit_length() - 1)
    return parent, step


def _tree_steps(lanes):
    return 1 + max((s for _, _, steps in lanes for s in steps if s is not None), default=-1)


def _tree_up(links, lanes, reduce, first):
    """Reduce every lane's part up its tree; a lane is (part, parents, steps)."""
    me, count = links.rank, _tree_steps(lanes)
    for j in range(count):
        send, recv, pending = [], [], []
        for tag, (part, parent, steps) in enumerate(lanes):
            if steps[me] == j:
                send.append((parent[me], part, tag))
            for child in range(links.size):
                if parent[child] == me and steps[child] == j:
                    incoming = torch.empty_like(part)
                    recv.append((child, incoming, tag))
                    pending.append((part, incoming))
        links.step(first + j, send, recv)
        for part, incoming in pending:
            reduce(part, incoming)
    return first + count


def _tree_down(links, lanes, first):
    """Broadcast every lane's part down its tree: the edges of _tree_up, last step first."""
    me, count = links.rank, _tree_steps(lanes)
    for j in range(count):
        send, recv = [], []
        for tag, (part, parent, steps) in enumerate(lanes):
            if parent[me] is not None and count - 1 - steps[me] == j:
                recv.append((parent[me], part, tag))
            for child in range(links.size):
                if parent[child] == me and count - 1 - steps[child] == j:
                    send.append((child, part, tag))
        links.step(first + j, send, recv)
    return first + count


def _allreduce_tree(links, buf, reduce, first):
    lanes = [(buf, *_binomial(links.size))]
    return _tree_down(links, lanes, _tree_up(links, lanes, reduce, first))


def _allreduce_binary_tree(links, buf, reduce, first):
    lanes = [(buf, *_heap(links.size))]
    return _tree_down(links, lanes, _tree_up(links, lanes, reduce, first))


def _allreduce_double_binary_tree(links, buf, reduce, first):
    # Two binary trees, each carrying half the buffer. In the mirror image the inner ranks
    # of the first tree are leaves, so the work of the inner nodes is spread over all ranks.
    halves = torch.tensor_split(buf, 2)
    lanes = [(halves[0], *_heap(links.size)), (halves[1], *_heap(links.size, mirror=True))]
    return _tree_down(links, lanes, _tree_up(links, lanes, reduce, first))


# ------------------------------------------------------------------------------- recursive

def _fold(P):
    """Largest power of two P' <= P, the extra ranks, and the map from a position among the
    P' ranks that stay to its rank (the odd rank of each of the first P − P' pairs)."""
    p2 = 1 << (P.bit_length() - 1)
    extra = P - p2

    def rank_of(v):
        return 2 * v + 1 if v < extra else v + extra
    return p2, extra, rank_of


def _fold_in(links, buf, reduce, step):
    """Of the first 2(P − P') ranks, each even one hands its buffer to the odd one above it
    and sits out. Returns this rank's position among the P' that stay, or None."""
    r = links.rank
    p2, extra, _ = _fold(links.size)
    if r >= 2 * extra:
        return r - extra
    if r % 2 == 0:
        links.step(step, send=[(r + 1, buf)])
        return None
    incoming = torch.empty_like(buf)
    links.step(step, recv=[(r - 1, incoming)])
    reduce(buf, incoming)
    return r // 2


def _fold_out(links, buf, step):
    """The odd rank of each folded pair hands the result back to the even one."""
    r = links.rank
    _, extra, _ = _fold(links.size)
    if r < 2 * extra:
        if r % 2:
            links.step(step, send=[(r - 1, buf)])
        else:
            links.step(step, recv=[(r + 1, buf)])


def _halving(links, buf, p2, v, rank_of, reduce, first):
    """Recursive halving reduce-scatter among p2 ranks (a power of two), at positions v.

    Partners p2/2, p2/4, ..., 1 positions apart split the range of blocks they are both
    responsible for: each keeps the half its bit of v selects, sends the other half, and
    adds the partner's copy of the half it keeps. After log₂p2 steps position v holds block
    v, fully reduced, having sent n/2 + n/4 + ... + n/p2 bytes.
    """
    _, seg = _segments(buf, p2)
    lo, hi, mask, k = 0, p2, p2 // 2, 0
    while mask:
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if v & mask else ((lo, mid), (mid, hi))
        mine = seg(*keep)
        incoming = torch.empty_like(mine)
        partner = rank_of(v ^ mask)
        links.step(first + k, send=[(partner, seg(*give))], recv=[(partner, incoming)])
        reduce(mine, incoming)
        lo, hi = keep
        mask, k = mask // 2, k + 1
    return first + k


def _doubling(links, buf, p2, v, rank_of, first):
    """Recursive doubling all-gather among p2 ranks: position v starts with block v; partners
    1, 2, 4, ... positions apart swap everything they hold, so the held range doubles."""
    _, seg = _segments(buf, p2)
    lo, hi, mask, k = v, v + 1, 1, 0
    while mask < p2:
        width = hi - lo
        theirs = (lo - width, lo) if v & mask else (hi, hi + width)
        partner = rank_of(v ^ mask)
        links.step(first + k, send=[(partner, seg(lo, hi))], recv=[(partner, seg(*theirs))])
        lo, hi = min(lo, theirs[0]), max(hi, theirs[1])
        mask, k = mask * 2, k + 1
    return first + k


def _allreduce_recursive_doubling(links, buf, reduce, first):
    p2, extra, rank_of = _fold(links.size)
    middle = first + (1 if extra else 0)
    steps = p2.bit_length() - 1
    v = _fold_in(links, buf, reduce, first) if extra else links.rank
    if v is not None:
        for k in range(steps):  # partners 2^k apart swap whole buffers and both add
            partner = rank_of(v ^ (1 << k))
            incoming = torch.empty_like(buf)
            links.step(middle + k, send=[(partner, buf)], recv=[(partner, incoming)])
            reduce(buf, incoming)
    end = middle + steps
    if extra:
        _fold_out(links, buf, end)
        end += 1
    return end


def _allreduce_rabenseifner(links, buf, reduce, first):
    p2, extra, rank_of = _fold(links.size)
    middle = first + (1 if extra else 0)
    steps = p2.bit_length() - 1
    v = _fold_in(links, buf, reduce, first) if extra else links.rank
    if v is not None:
        step = _halving(links, buf, p2, v, rank_of, reduce, middle)
        _doubling(links, buf, p2, v, rank_of, step)
    end = middle + 2 * steps
    if extra:
        _fold_out(links, buf, end)
        end += 1
    return end


_ALLREDUCE = {
    "ring": _allreduce_ring,
    "tree": _allreduce_tree,
    "recursive_doubling": _allreduce_recursive_doubling,
    "rabenseifner": _allreduce_rabenseifner,
    "hierarchical": None,
    "bidirectional_ring": _allreduce_bidirectional,
    "two_sided_ring": _allreduce_two_sided,
    "binary_tree": _allreduce_binary_tree,
    "double_binary_tree": _allreduce_double_binary_tree,
}
_REDUCE_SCATTER = ("ring", "recursive_halving", "recursive_doubling")
_ALL_GATHER = ("ring", "recursive_doubling")
_BROADCAST = ("tree", "ring")


def algorithms(collective: str) -> tuple[str, ...]:
    """The algorithms implemented here for ``"allreduce"``, ``"reduce_scatter"``,
    ``"allgather"``, ``"broadcast"`` or ``"alltoall"``."""
    table = {"allreduce": tuple(_ALLREDUCE), "reduce_scatter": _REDUCE_SCATTER,
             "allgather": _ALL_GATHER, "broadcast": _BROADCAST, "alltoall": ("pairwise",)}
    if collective not in table:
        raise ValueError(f"collective must be one of {', '.join(table)}; got {collective!r}")
    return table[collective]


def _choose(algorithm, supported, collective):
    if algorithm not in supported:
        raise ValueError(f"algorithm {algorithm!r} is not available for {collective}; "
                         f"supported: {', '.join(repr(a) for a in supported)}")


# ------------------------------------------------------------------------------- hierarchy

@dataclass(frozen=True)
class Hierarchy:
    """A group cut into ``outer`` = N groups of ``inner`` = G consecutive ranks (the nodes).

    ``intra`` is this rank's node; ``inter`` holds the ranks with the same index in every
    node (this rank's "rail")."""

    inner: int
    outer: int
    intra: object
    inter: object


_HIERARCHIES: dict = {}


def hierarchy(inner: int, group=None) -> Hierarchy:
    """Cut ``group`` into N = P/G nodes of ``inner`` = G consecutive ranks, with
    ``dist.new_group`` (chapter 13a).

    Collective: every rank of the default group must call it, in the same order, because
    ``new_group`` is. The result is cached, so calling again with the same arguments is free.
    """
    ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
    P = len(ranks)
    if isinstance(inner, bool) or not isinstance(inner, int) or inner < 1 or P % inner:
        raise ValueError(f"inner must be a whole number that divides the group size {P}, "
                         f"got {inner!r}")
    key = (tuple(ranks), inner)
    if key not in _HIERARCHIES:
        me = dist.get_rank(group)
        intra = inter = None
        for g in range(P // inner):  # every rank creates every group, in the same order
            pg = dist.new_group([ranks[g * inner + i] for i in range(inner)])
            if me // inner == g:
                intra = pg
        for i in range(inner):
            pg = dist.new_group([ranks[g * inner + i] for g in range(P // inner)])
            if me % inner == i:
                inter = pg
        _HIERARCHIES[key] = Hierarchy(inner, P // inner, intra, inter)
    return _HIERARCHIES[key]


def _allreduce_hierarchical(buf, h: Hierarchy, reduce, outer_algorithm, stats):
    """Reduce-scatter inside the node, all-reduce this rank's block across the nodes,
    all-gather inside the node: only n/G bytes of each rank's buffer leave the node."""
    intra, inter = _Links(h.intra, stats, "inner"), _Links(h.inter, stats, "outer")
    lanes = [(buf, 1)]
    step = _ring(intra, lanes, "rs", reduce, 0)
    block = torch.tensor_split(buf, h.inner)[intra.rank]
    step = _ALLREDUCE[outer_algorithm](inter, block, reduce, step)
    _ring(intra, lanes, "ag", reduce, step)


# ------------------------------------------------------------------------------- public

def all_reduce(tensor, algorithm="ring", group=None, op="sum", *, inner=None,
               outer_algorithm="ring") -> Stats:
    """All-reduce ``tensor`` in place over ``group``; returns this rank's :class:`Stats`.

    ``algorithm``: ``"ring"``, ``"tree"`` (binomial), ``"recursive_doubling"``,
    ``"rabenseifner"``, ``"hierarchical"``, ``"bidirectional_ring"``, ``"two_sided_ring"``,
    ``"binary_tree"`` or ``"double_binary_tree"`` (chapter 12; costs in
    :func:`dtbook.comm.allreduce_time`).
    ``"hierarchical"`` needs ``inner`` = G, the ranks per node (it must divide P): a ring
    reduce-scatter inside each node, an all-reduce by ``outer_algorithm`` (default ring)
    across nodes of the n/G-byte block, a ring all-gather inside each node. Its first call
    creates the subgroups (:func:`hierarchy`), so every rank must make it; steps inside a
    node are counted at level ``"inner"``, between nodes at ``"outer"``.
    """
    _choose(algorithm, tuple(_ALLREDUCE), "allreduce")
    reduce = _reducer(op)
    buf = _flat(tensor)
    if algorithm == "hierarchical":
        _choose(outer_algorithm, tuple(a for a in _ALLREDUCE if a != "hierarchical"),
                "the outer all-reduce")
        if inner is None:
            raise ValueError("algorithm='hierarchical' needs inner, the number of ranks per group")
        h = hierarchy(inner, group)
        stats = Stats(rank=dist.get_rank())
        _allreduce_hierarchical(buf, h, reduce, outer_algorithm, stats)
        return stats
    if inner is not None or outer_algorithm != "ring":
        raise ValueError("inner and outer_algorithm only apply to algorithm='hierarchical'")
    stats = Stats(rank=dist.get_rank())
    _ALLREDUCE[algorithm](_Links(group, stats), buf, reduce, 0)
    return stats


def _power_of_two(P, what):
    if P & (P - 1):
        raise ValueError(f"{what} needs a power-of-two number of ranks, got {P}; "
                         f"use algorithm='ring'")


def reduce_scatter(output, input, algorithm="ring", group=None, op="sum") -> Stats:
    """Reduce ``input`` (the whole n-element buffer, the same shape on every rank) and leave
    block ``rank`` of ``torch.tensor_split(input, P)`` in ``output``; ``input`` is not
    changed. ``algorithm``: ``"ring"`` or ``"recursive_halving"`` (alias
    ``"recursive_doubling"``; P a power of two). Costs: :func:`dtbook.comm.reduce_scatter_time`.
    """
    _choose(algorithm, _REDUCE_SCATTER, "reduce_scatter")
    reduce = _reducer(op)
    stats = Stats(rank=dist.get_rank())
    links = _Links(group, stats)
    work = _flat(input, "input").clone()
    out = _flat(output, "output")
    mine = torch.tensor_split(work, links.size)[links.rank]
    if out.numel() != mine.numel():
        raise ValueError(f"output must hold {mine.numel()} elements (block {links.rank} of "
                         f"the input), got {out.numel()}")
    if algorithm == "ring":
        _ring(links, [(work, 1)], "rs", reduce, 0)
    else:
        _power_of_two(links.size, "recursive halving")
        _halving(links, work, links.size, links.rank, lambda v: v, reduce, 0)
    out.copy_(mine)
    return stats


def all_gather(output, input, algorithm="ring", group=None) -> Stats:
    """Gather every rank's ``input`` into ``output`` (n elements): rank r's input becomes
    block r of ``torch.tensor_split(output, P)``. ``algorithm``: ``"ring"`` or
    ``"recursive_doubling"`` (P a power of two). Costs: :func:`dtbook.comm.allgather_time`.
    """
    _choose(algorithm, _ALL_GATHER, "allgather")
    stats = Stats(rank=dist.get_rank())
    links = _Links(group, stats)
    out = _flat(output, "output")
    mine = torch.tensor_split(out, links.size)[links.rank]
    src = _flat(input, "input")
    if src.numel() != mine.numel():
        raise ValueError(f"input must hold {mine.numel()} elements (block {links.rank} of "
                         f"the output), got {src.numel()}")
    mine.copy_(src)
    if algorithm == "ring":
        _ring(links, [(out, 1)], "ag", None, 0)
    else:
        _power_of_two(links.size, "recursive doubling")
        _doubling(links, out, links.size, links.rank, lambda v: v, 0)
    return stats


def broadcast(tensor, src=0, algorithm="tree", group=None, *, chunks=1) -> Stats:
    """Broadcast ``tensor`` from rank ``src`` in place. ``algorithm``: ``"tree"`` (binomial)
    or ``"ring"``, a chain from ``src`` with the buffer cut into ``chunks`` pieces and
    pipelined. Costs: :func:`dtbook.comm.broadcast_time`.
    """
    _choose(algorithm, _BROADCAST, "broadcast")
    stats = Stats(rank=dist.get_rank())
    links = _Links(group, stats)
    P, r = links.size, links.rank
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < P:
        raise ValueError(f"src must be a rank of the group (0 to {P - 1}), got {src!r}")
    buf = _flat(tensor)
    if algorithm == "tree":
        _tree_down(links, [(buf, *_binomial(P, src))], 0)
        return stats
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a whole number >= 1, got {chunks!r}")
    pieces = torch.tensor_split(buf, chunks)
    v = (r - src) % P  # position along the chain
    for t in range(P + chunks - 2 if P > 1 else 0):
        send, recv = [], []
        if v < P - 1 and 0 <= t - v < chunks:      # pass on piece t − v
            send.append(((r + 1) % P, pieces[t - v]))
        if v > 0 and 0 <= t - v + 1 < chunks:      # piece t − v + 1 arrives from behind
            recv.append(((r - 1) % P, pieces[t - v + 1]))
        if send or recv:
            links.step(t, send, recv)
    return stats


def all_to_all(output, input, group=None) -> Stats:
    """Pairwise all-to-all: block j of rank i's ``input`` becomes block i of rank j's
    ``output`` (P equal blocks: the size must divide by P). In step k a rank sends to the
    rank k ahead and receives from the rank k behind. Costs: :func:`dtbook.comm.alltoall_time`.
    """
    stats = Stats(rank=dist.get_rank())
    links = _Links(group, stats)
    P, r = links.size, links.rank
    src, out = _flat(input, "input"), _flat(output, "output")
    if src.numel() % P or out.numel() != src.numel():
        raise ValueError(f"input and output must hold the same number of elements, a "
                         f"multiple of P = {P}; got {src.numel()} and {out.numel()}")
    send_blocks, recv_blocks = torch.tensor_split(src, P), torch.tensor_split(out, P)
    recv_blocks[r].copy_(send_blocks[r])
    for k in range(1, P):
        to, frm = (r + k) % P, (r - k) % P
        links.step(k - 1, send=[(to, send_blocks[to])], recv=[(frm, recv_blocks[frm])])
    return stats
