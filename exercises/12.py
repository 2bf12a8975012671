"""Exercises for chapter 12, Ring and Tree Algorithms."""

from dtbook import comm
from dtbook.exercises import exercise
from dtbook.units import GB, MB, fmt_seconds, us


def _book_ring_reduce_scatter(data, P):
    """The original edition's schedule, simulated: in step k rank r sends chunk (r − k) mod P to
    rank r + 1, which adds it to its own copy. Returns the chunk sums each rank ends with."""
    chunks = [list(row) for row in data]          # chunks[r][c]: rank r's copy of chunk c
    for k in range(P - 1):
        sent = [(r, (r - k) % P, chunks[r][(r - k) % P]) for r in range(P)]
        for r, c, value in sent:                  # every rank sends at once, then adds
            chunks[(r + 1) % P][c] += value
    owned = [(r + 1) % P for r in range(P)]       # rank r finishes chunk r + 1
    return tuple(chunks[r][owned[r]] for r in range(P))


@exercise(
    "12.1",
    prompt=("Four ranks hold the numbers 1 to 16, rank r holding 4r + 1, ..., 4r + 4 as its "
            "chunks 0 to 3. Run the original edition's ring reduce-scatter by hand: in step k rank r "
            "sends chunk (r − k) mod 4 to rank r + 1, which adds it to its own copy. After "
            "three steps each rank holds one chunk summed over all ranks. Which sums do "
            "ranks 0, 1, 2 and 3 hold? Answer as a tuple of four numbers."),
    unit=("", "", "", ""),
    hint="After P − 1 steps rank r owns chunk (r + 1) mod P; chunk c sums to "
         "(c + 1) + (c + 5) + (c + 9) + (c + 13).",
    book_answer=(32, 36, 40, 28),
)
def _():
    data = [[4 * r + c + 1 for c in range(4)] for r in range(4)]
    return _book_ring_reduce_scatter(data, 4)


@exercise(
    "12.2",
    prompt=("P = 256 ranks, α = 5 µs, β = 200 GB/s. Below which buffer size does the "
            "binomial-tree all-reduce (reduce, then broadcast) beat the ring?"),
    unit="MB",
    hint="Set 2⌈log₂P⌉(α + n/β) equal to 2(P − 1)α + 2(P − 1)/P · n/β and solve for n.",
    book_answer="35.3 MB",
)
def _():
    return comm.algorithm_crossover(256, 5 * us, 200 * GB, "tree", "ring")


@exercise(
    "12.3",
    prompt=("64 GPUs, 8 nodes of 8. Inside a node: α = 1 µs, β = 600 GB/s; between nodes: "
            "α = 5 µs, β = 100 GB/s. A 1 GB all-reduce: how long does (a) a flat ring over "
            "all 64 take, its links limited by the network, and (b) the hierarchical "
            "all-reduce (ring reduce-scatter in the node, ring all-reduce of 1/8 of the "
            "buffer across nodes, ring all-gather in the node)? Answer as a pair (a, b)."),
    unit=("ms", "ms"),
    hint="Only n/G = 125 MB of each GPU's buffer crosses the network in the hierarchical "
         "version, over a ring of N = 8 nodes.",
    book_answer=("20.3 ms", "5.2 ms"),
)
def _():
    flat = comm.allreduce_time(1 * GB, 64, 5 * us, 100 * GB)
    hier = comm.allreduce_time(1 * GB, 64, 5 * us, 100 * GB, "hierarchical", inner=8,
                               alpha_inner=1 * us, beta_inner=600 * GB)
    return flat, hier


@exercise(
    "12.4",
    prompt=("1000 gradient tensors of 1 MB each, 8 ranks, α = 10 µs, β = 100 GB/s, ring "
            "all-reduce. How long do (a) 1000 separate all-reduces take, and (b) 40 buckets "
            "of 25 MB? Answer as a pair (a, b)."),
    unit=("ms", "ms"),
    hint="Each call pays 2(P − 1)α whatever its size; the bytes are the same either way.",
    book_answer=("157.5 ms", "23.1 ms"),
)
def _():
    separate = 1000 * comm.allreduce_time(1 * MB, 8, 10 * us, 100 * GB)
    buckets = 40 * comm.allreduce_time(25 * MB, 8, 10 * us, 100 * GB)
    return separate, buckets


@exercise(
    "12.5",
    prompt=("Rabenseifner's all-reduce needs a power of two. On P = 6 ranks, with the "
            "standard fold-in (two of the ranks hand their buffers to a partner first and "
            "get the result back at the end), how many steps does it take, and what byte "
            "count does its bandwidth term charge, as a multiple of the buffer size n? That "
            "count adds up, over the steps, the largest message any rank sends in that step "
            "(what the α-β model's steps·α + bytes/β charges). Answer as a pair (steps, "
            "multiple of n)."),
    unit=("", ""),
    hint="Fold 6 down to 4: one step of n in, 2·log₂4 steps of recursive halving and "
         "doubling moving 2·(4 − 1)/4 of n, one step of n out.",
)
def _():
    t = comm.traffic("allreduce", 1.0, 6, "rabenseifner")
    return t.steps, t.step_bytes


# The algorithm the original edition's 0.63 ms fits (chapter 12, "The bidirectional ring").
_TWO_SIDED = comm.allreduce_time(16 * MB, 64, 5 * us, 50 * GB, "two_sided_ring", links="direct")


@exercise(
    "12.6",
    prompt=("A bidirectional ring all-reduce of 16 MB over P = 64 ranks joined in a ring of "
            "direct links (a torus or a ring of point-to-point wires, each carrying β = 50 GB/s "
            "in each direction, α = 5 µs): half the buffer goes each way round, each half a "
            "full ring all-reduce (reduce-scatter, then all-gather) of its own. How long does "
            "it take?"),
    unit="ms",
    hint="Each half still needs its own reduce-scatter and all-gather of 2(P − 1) steps; "
         "only the bytes per step halve.",
    book_answer="0.63 ms",
    book_note=("The original edition's bidirectional ring halves both terms of the ring's time, "
               "(P − 1)α + (P − 1)/P · n/β, 0.63 ms here. With half the buffer going each way "
               "round, each of the two rings still takes 2(P − 1) steps for its half, so the "
               "latency term stays 2(P − 1)α; only the bandwidth term halves. Its figure is "
               "about what a different algorithm reaches on the same direct links: the two-sided"
               " ring, which reduces each block from both sides so that partial sums travel "
               "half-way round in each direction and the steps halve too, takes "
               + fmt_seconds(_TWO_SIDED) + " (one step more than the halved formula for an even"
               " P such as 64). On a switched fabric "
               "(NVSwitch, an InfiniBand fat tree) no bidirectional ring moves the bytes faster:"
               " a unidirectional ring already sends and receives at β on every port."),
)
def _():
    return comm.allreduce_time(16 * MB, 64, 5 * us, 50 * GB, "bidirectional_ring", links="direct")
