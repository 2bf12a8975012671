"""Exercises for chapter 02, The Extended Roofline.

Peak compute is the catalog's dense BF16 figure for an H100 SXM, 989.4 TFLOP/s; link
bandwidths are per direction (dtbook.hardware). The original edition divides by NVLink's
900 GB/s, which is both directions added, so its NVLink ridge point and its NVLink/IB ratio
are twice ours; its InfiniBand figure, 50 GB/s, is already per direction, and there the two
agree.
"""

import sympy as sp

from dtbook import data_parallel, hardware, roofline
from dtbook.exercises import exercise
from dtbook.symbolic import params, world

H100 = hardware.get("h100-sxm")
F = H100.peak("bf16")
IB, NVL = hardware.get("ib-ndr400"), hardware.get("nvlink4")
ON_IB = roofline.Ceilings.from_hardware(H100, IB, "bf16")
ON_NVL = roofline.Ceilings.from_hardware(H100, NVL, "bf16")

_A9 = ("It divides by 900 GB/s for NVLink 4.0. That is the two directions added "
       "(18 links × 25 GB/s each way); one direction carries 450 GB/s, the figure to compare "
       "with InfiniBand's 50 GB/s, which is per direction. With the per-direction figure the "
       "NVLink ridge point doubles.")


def _dp_kernel(tokens, gpus, psi=7e9, grad_bytes=2):
    """One GPU's share of a data-parallel step: FLOP, and the bytes its all-reduce sends."""
    flops = 6 * psi * tokens / gpus
    return roofline.Kernel("dp step", flops, mem_bytes=0,
                           net_bytes=data_parallel.gradient_bytes_sent(psi, gpus,
                                                                       grad_bytes=grad_bytes))


@exercise(
    "02.1",
    prompt=("A 7B-parameter model is trained data-parallel on 64 GPUs with 1M tokens per step "
            "and BF16 gradients. What is its communication intensity, FLOP per byte each GPU "
            "sends, using the large-P form of the all-reduce traffic (2Ψs bytes per GPU)?"),
    unit="",
    hint="Each GPU computes 6Ψ × (tokens / P) FLOP and sends about 2Ψs bytes; Ψ cancels: "
         "3BS/(Ps).",
    book_answer=23400,
)
def _():
    return roofline.dp_intensity(1, 1e6, 64, grad_bytes=2)


@exercise(
    "02.2",
    prompt=("The same job with 500K tokens per step, on H100s (BF16 peak) linked by "
            "InfiniBand NDR400: which ceiling binds the step, \"compute\" or \"network\"? "
            "(Memory traffic is not part of the question: leave it out.)"),
    kind="choice",
    choices=("compute", "network"),
    hint="Compare 3BS/(Ps) with the network ridge point F/β.",
    book_answer="network",
)
def _():
    return ON_IB.binding(_dp_kernel(5e5, 64))


@exercise(
    "02.3",
    prompt=("For that 7B job on 64 H100s over InfiniBand NDR400, how many tokens per step does "
            "it take at the least for the step to stop being network-bound (large-P form)?"),
    unit="",
    hint="Set 3BS/(Ps) equal to the ridge point F/β and solve for the tokens BS.",
)
def _():
    # 3 BS / (P s) = F / beta  ->  BS = (F / beta) P s / 3; dp_intensity is linear in BS
    per_token = roofline.dp_intensity(1, 1, 64, grad_bytes=2)
    return ON_IB.ridge("network") / per_token


@exercise(
    "02.4",
    prompt=("What is the network ridge point, in FLOP per byte, of an H100 (BF16 peak) on "
            "NVLink 4.0, with β per direction from dtbook.hardware?"),
    unit="",
    hint="Ridge = F / β, with β the bandwidth in one direction.",
    book_answer=1099,
    book_note="The original edition puts the NVLink ridge point at 1,099 FLOP per byte. " + _A9,
)
def _():
    return ON_NVL.ridge("network")


@exercise(
    "02.5",
    prompt=("How many times larger is the H100's InfiniBand NDR400 ridge point than its "
            "NVLink 4.0 ridge point (both with β per direction)?"),
    unit="",
    hint="The peak cancels: the ratio of the two bandwidths.",
    book_answer=18,
    book_note=("The original edition finds the InfiniBand ridge point 18 times the NVLink one. "
               + _A9 + " The ratio halves, to 9."),
)
def _():
    return ON_IB.ridge("network") / ON_NVL.ridge("network")


@exercise(
    "02.6",
    prompt=("Write the exact number of bytes each of P GPUs sends in a ring all-reduce of a "
            "gradient of Psi elements of s bytes each, as an expression in Psi, P and s."),
    kind="expr",
    symbols="Psi P s",
    hint="A reduce-scatter and an all-gather, each P − 1 steps of one 1/P piece.",
)
def _():
    s = sp.Symbol("s", positive=True)
    return data_parallel.gradient_bytes_sent(params, world, grad_bytes=s)


@exercise(
    "02.7",
    prompt=("A step on 256 GPUs spends 100 ms computing and 200 ms in the gradient all-reduce. "
            "(a) What share of the step is communication when the two do not overlap? "
            "(b) With perfect overlap, what share of the compute peak can the step reach at "
            "best? Answer as a pair (a, b) in percent."),
    unit=("%", "%"),
    hint="(a) Tm/(Tc + Tm). (b) The step takes max(Tc, Tm); compute is busy Tc of it.",
)
def _():
    tc, tm = 0.100, 0.200
    share = roofline.comm_fraction(tc, tm, overlap=0)
    busy = tc / roofline.step_time(tc, tm, overlap=1)
    return share, busy


@exercise(
    "02.8",
    prompt=("In that 256-GPU step, by what factor must the tokens per GPU per step grow for "
            "the step to become compute-bound with perfect overlap (the gradient, and so the "
            "all-reduce, stays the same size)?"),
    unit="",
    hint="The communication intensity 3BS/(Ps) grows in proportion to the tokens; it must "
         "reach the ridge, where compute time equals communication time.",
)
def _():
    tc, tm = 0.100, 0.200
    # any machine will do: the step is W = F·Tc of work and Q = β·Tm bytes of traffic
    step = roofline.Kernel("step", F * tc, mem_bytes=0, net_bytes=IB.beta * tm)
    return ON_IB.ridge("network") / step.net_intensity
