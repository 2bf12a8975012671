"""Exercises for chapter 11, Primitives and Properties."""

import math

import numpy as np
import sympy as sp

from dtbook.exercises import exercise
from dtbook.units import GB


def _reduce_scatter_then_all_gather(xs):
    """Reduce-scatter (rank r keeps piece r of the sum) then all-gather, by definition."""
    p = len(xs)
    pieces = [sum(np.array_split(x, p)[r] for x in xs) for r in range(p)]
    return np.concatenate(pieces)


@exercise(
    "11.1",
    prompt=("Four ranks hold x_r = (r + 1)·[1, 2, 3, 4] for r = 0..3. They run a "
            "reduce-scatter (rank r keeps piece r of the sum) and then an all-gather. What "
            "does every rank hold at the end? Answer as a tuple of four numbers."),
    unit=("", "", "", ""),
    rtol=0,
    hint="Piece r of the sum is the sum over ranks of element r; the all-gather "
         "concatenates the four pieces on every rank.",
    book_answer=(10, 20, 30, 40),
)
def _():
    xs = [(r + 1) * np.arange(1, 5) for r in range(4)]
    return tuple(int(v) for v in _reduce_scatter_then_all_gather(xs))


@exercise(
    "11.2",
    prompt=("In float64, with a = 1e20, b = -1e20 and c = 1: what are (a + b) + c and "
            "a + (b + c)? Answer as a pair."),
    unit=("", ""),
    rtol=0,
    hint="Adding 1 to -1e20 rounds back to -1e20: neighbouring doubles there are 16384 apart.",
    book_answer=(1, 0),
)
def _():
    a, b, c = 1e20, -1e20, 1.0
    return ((a + b) + c, a + (b + c))


def _pairwise_f32(values):
    """Sum float32 values as a balanced binary tree, rounding to float32 at every add."""
    v = np.asarray(values, dtype=np.float32)
    while v.size > 1:
        if v.size % 2:
            v = np.append(v, np.float32(0))
        v = v[0::2] + v[1::2]
    return v[0]


@exercise(
    "11.3",
    prompt=("In float32, start from 1.0 and add 1e-8 to it a million times, one addition "
            "after another. What do you get? And if you first add the million values of "
            "1e-8 to each other pairwise (as a balanced tree) and add 1.0 at the end? "
            "Answer as a pair."),
    unit=("", ""),
    rtol=1e-6,
    hint="Neighbouring float32 numbers near 1 are 2**-23 apart; what happens to an addend "
         "smaller than half that?",
    book_answer=(1.0100002, 1.0099999),
    book_note=("The original edition prints 1.0100002 for the sequential sum and 1.0099999 for "
               "the tree, from code that puts the 1.0 after the million small values. Run, that "
               "code gives 1.0099673 one at a time (the small values, summed first, lose 0.3% to"
               " rounding) and 1.0099999 as a tree. In the order asked here, starting from 1.0, "
               "every addition of 1e-8 rounds back to 1.0 (1e-8 is below half an ulp of 1, "
               "2**-24 ≈ 6e-8), so the one-at-a-time sum is exactly 1.0; the tree of the small "
               "values, with 1.0 added last, gives 1.01."),
)
def _():
    small = np.full(10**6, 1e-8, dtype=np.float32)
    one_at_a_time = np.add.accumulate(np.concatenate([[np.float32(1.0)], small]),
                                      dtype=np.float32)[-1]
    tree_then_one = np.float32(1.0) + _pairwise_f32(small)
    return (float(one_at_a_time), float(tree_then_one))


@exercise(
    "11.4",
    prompt=("An all-reduce over P = 64 ranks is done as a direct reduce to rank 0 followed "
            "by a direct broadcast from it. How many times more bytes does rank 0 receive "
            "than a rank of a ring all-reduce, which receives 2(P − 1)/P · n?"),
    unit="",
    hint="In the direct reduce, the root receives every other rank's whole buffer.",
    book_answer=32,
)
def _():
    p, n = 64, 1.0
    return ((p - 1) * n) / (2 * (p - 1) / p * n)


@exercise(
    "11.5",
    prompt=("A 1 GB buffer is broadcast from one root to 8 ranks in all (the root "
            "included) with a binomial tree. How many bytes are received in total, summed "
            "over all ranks?"),
    unit="GB",
    hint="Every rank but the root must end up with the whole buffer.",
    book_answer="3 GB",
    book_note=("The original edition gives a tree broadcast a total volume of n log2 P (3 GB here). "
               "Every broadcast delivers n(P − 1) bytes in total, whatever the algorithm; "
               "n log2 P is what the root sends in a binomial tree, the bytes on the "
               "critical path."),
)
def _():
    p, n = 8, 1 * GB
    assert math.ceil(math.log2(p)) * n == 3 * GB        # the original edition's figure, for the record
    return (p - 1) * n


@exercise(
    "11.6",
    prompt="Each of 8 ranks holds 1 GB and runs an all-to-all. How many bytes does each rank send?",
    unit="MB",
    hint="A rank keeps the piece addressed to itself.",
    book_answer="875 MB",
)
def _():
    p, n = 8, 1 * GB
    return (p - 1) / p * n


@exercise(
    "11.7",
    prompt=("Rank r holds a piece x. The ranks run an all-gather, then a reduce-scatter of "
            "the gathered buffer. What does rank r hold? Give an expression in x and P."),
    kind="expr",
    symbols="x P",
    hint="After the all-gather, every rank holds a copy of rank r's piece; the "
         "reduce-scatter adds up piece r over all ranks.",
)
def _():
    x, p = sp.symbols("x P", positive=True)
    return p * x
