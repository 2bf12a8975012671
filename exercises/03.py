"""Exercises for chapter 03, The Memory Hierarchy of a Cluster.

Links from dtbook.hardware, β per direction: NVLink 4.0 450 GB/s per GPU, InfiniBand NDR400
50 GB/s per GPU. The original edition uses NVLink's bidirectional 900 GB/s as if it were one
direction, and approximates a ring all-reduce's traffic as 2× the buffer whatever the ring's
size; where either changes its printed answer, the exercise records why.
"""

from dtbook import comm, hardware, roofline, tensor_parallel
from dtbook.exercises import exercise
from dtbook.units import GB

H100 = hardware.get("h100-sxm")
IB, NVL = hardware.get("ib-ndr400"), hardware.get("nvlink4")

_A9 = ("It uses 900 GB/s for NVLink 4.0, the two directions added; a ring sends "
       "and receives at the same time, so each link carries 450 GB/s each way, which halves the "
       "effective bandwidth.")
_RING = ("It counts each all-reduce as 2× the tensor, the large-P limit; a ring "
         "of t = 8 GPUs sends 2(t − 1)/t = 1.75× the tensor from each GPU.")

# The TP layer of exercises 3-6: hidden 8192, 32 sequences of 2048 tokens, BF16 activations.
B, S, H, T = 32, 2048, 8192, 8


def _effective_bandwidth(world, beta):
    """Buffer size over ring all-reduce time, latency left out: βP/(2(P − 1))."""
    n = 1 * GB
    return n / comm.allreduce_time(n, world, 0, beta)


@exercise(
    "03.1",
    prompt=("An 8-GPU ring all-reduce over NVLink 4.0 (β per direction from dtbook.hardware): "
            "what is its effective bandwidth, the buffer size divided by the all-reduce time "
            "(latency left out)?"),
    unit="GB/s",
    hint="T = 2(P − 1)/P · n/β, so n/T = βP/(2(P − 1)).",
    book_answer="514 GB/s",
    book_note="The original edition gives 514 GB/s. " + _A9,
)
def _():
    return _effective_bandwidth(8, NVL.beta)


@exercise(
    "03.2",
    prompt=("32 GPUs in 4 DGX H100 nodes run a hierarchical all-reduce: reduce-scatter inside "
            "each node, a ring all-reduce across the 4 nodes on every GPU's own InfiniBand "
            "NDR400 NIC, all-gather inside each node. What is the effective bandwidth of the "
            "inter-node stage, per NIC?"),
    unit="GB/s",
    hint="The same βP/(2(P − 1)), with P the number of nodes in each cross-node ring.",
    book_answer="33.3 GB/s",
)
def _():
    return _effective_bandwidth(4, IB.beta)


@exercise(
    "03.3",
    prompt=("Tensor parallelism over t = 8 GPUs all-reduces a layer's B·S·H activation twice in "
            "the forward pass (B = 32, S = 2048, H = 8192, BF16). How many bytes does each GPU "
            "send per layer in the forward pass, with a ring all-reduce?"),
    unit="GB",
    hint="Two all-reduces of B·S·H·2 bytes, each sending 2(t − 1)/t of it from every GPU.",
    book_answer="4.28 GB",
    book_note="The original edition gives 4.28 GB per layer. " + _RING,
)
def _():
    return tensor_parallel.layer_comm_bytes(B, S, H, T, bytes_per_element=2, backward=False)


@exercise(
    "03.4",
    prompt=("How long do those two forward all-reduces take per layer (a) on NVLink 4.0 inside "
            "a node and (b) across nodes on InfiniBand NDR400, with α and β from "
            "dtbook.hardware? Answer as a pair (a, b)."),
    unit=("ms", "ms"),
    hint="Two ring all-reduces of B·S·H·2 bytes over t = 8: 2 × [2(t − 1)α + 2(t − 1)/t · n/β].",
    book_answer=("4.8 ms", "86 ms"),
    book_note=("The original edition gives 4.8 ms on NVLink and 86 ms on InfiniBand. " + _A9
               + " " + _RING.replace("It counts", "It also counts")),
)
def _():
    n = B * S * H * 2
    return tuple(2 * comm.allreduce_time(n, T, link.alpha, link.beta) for link in (NVL, IB))


@exercise(
    "03.5",
    prompt=("What is the communication intensity of that TP layer (t = 8, H = 8192, BF16), "
            "forward and backward FLOP per byte each GPU sends, counting 72H² FLOP per token "
            "for the layer's weights?"),
    unit="",
    hint="72H²/t FLOP per token against 4 all-reduces of 2(t − 1)/t · H·s bytes per token: "
         "9H/((t − 1)s).",
)
def _():
    return roofline.tp_intensity(H, T, value_bytes=2)


@exercise(
    "03.6",
    prompt=("With that intensity, which ceiling binds the TP layer on H100s (BF16 peak) (a) "
            "inside a node on NVLink 4.0 and (b) across nodes on InfiniBand NDR400: "
            "\"compute\" or \"network\"? Answer as a pair (a, b)."),
    kind="choice",
    choices=("compute", "network"),
    hint="Compare 9H/((t − 1)s) with each link's ridge point F/β.",
)
def _():
    tokens = B * S
    kernel = roofline.Kernel("tp layer", 72 * H**2 * tokens / T, mem_bytes=0,
                             net_bytes=tensor_parallel.layer_comm_bytes(B, S, H, T,
                                                                        bytes_per_element=2))
    return tuple(roofline.Ceilings.from_hardware(H100, link, "bf16").binding(kernel)
                 for link in (NVL, IB))
