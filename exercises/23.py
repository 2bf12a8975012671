"""Exercises for chapter 23, The Device Mesh Abstraction."""

from dtbook import comm, hardware, mesh, models
from dtbook.exercises import exercise
from dtbook.units import MiB

_NV, _IB = hardware.get("nvlink4"), hardware.get("ib-ndr400")


@exercise(
    "23.1",
    prompt=("256 GPUs form a mesh (DP, PP, TP) = (8, 4, 8), TP innermost. How many TP groups, "
            "PP groups and DP groups are there? Answer as a tuple (TP, PP, DP)."),
    unit=("", "", ""),
    hint="An axis of size dₖ has P/dₖ groups, one for each setting of the other coordinates.",
    book_answer=(32, 64, 32),
)
def _():
    return tuple(mesh.groups_per_axis(256, d) for d in (8, 4, 8))


@exercise(
    "23.2",
    prompt="How many process groups does the mesh (8, 4, 8) need in all, over its three axes?",
    hint="G = P·Σ1/dᵢ.",
    book_answer=128,
)
def _():
    return mesh.total_groups((8, 4, 8))


@exercise(
    "23.3",
    prompt=("In the row-major mesh (DP, PP, TP) = (8, 4, 8), which rank sits at dp = 2, "
            "pp = 3, tp = 5?"),
    hint="rank = dp·(PP·TP) + pp·TP + tp.",
)
def _():
    return mesh.rank_of((2, 3, 5), (8, 4, 8))


@exercise(
    "23.4",
    prompt=("Fix the DP coordinate of the mesh (4, 4, 8) at 2. The submesh is (4, 8); which "
            "are its lowest and highest ranks? Answer as a pair."),
    unit=("", ""),
    hint="Fixing the outermost axis leaves a block of PP·TP consecutive ranks.",
    book_answer=(64, 95),
)
def _():
    sub = mesh.Mesh((4, 4, 8)).submesh(0, 2)
    return int(sub.ranks.min()), int(sub.ranks.max())


@exercise(
    "23.5",
    prompt=("Llama 3 70B's MLP up-projection has a weight of shape (ffn_hidden, hidden) = "
            "(28672, 8192) in bf16 (catalog `llama3-70b`). On the mesh (DP, PP, TP) = (8, 4, 8) "
            "it is placed (Replicate, Replicate, Shard(0)). How many MiB of it does each GPU "
            "hold?"),
    unit="MiB",
    hint="Only the TP axis shards it: dimension 0 is divided by 8, the rest stays whole.",
)
def _():
    cfg = models.get("llama3-70b")
    rows, cols = mesh.local_shape((cfg.ffn_hidden, cfg.hidden), (8, 4, 8), ("R", "R", "S0"))
    return rows * cols * 2


@exercise(
    "23.6",
    prompt=("32 DGX H100 nodes of 8 GPUs, mesh (DP, TP) = (32, 8). A TP all-reduce (ring) of a "
            "64 MiB activation: how many times longer does it take when the axes are laid out "
            "the wrong way round, so that each TP group spans 8 nodes and runs at one "
            "InfiniBand port (ib-ndr400) per GPU instead of NVLink (nvlink4)?"),
    hint="Both rings have the same steps and bytes; what changes is α and β of the link.",
    book_answer=18,
    book_note=("The original edition divides NVLink's 900 GB/s by InfiniBand's 50 GB/s. 900 GB/s "
               "is the sum of both directions; per direction an H100 has 450 GB/s, against "
               "50 GB/s per direction for a 400 Gb/s port, so the wrong order is about 9 times "
               "slower for a bandwidth-bound all-reduce, not 18."),
)
def _():
    ring = lambda link: comm.allreduce_time(64 * MiB, 8, link.alpha, link.beta)
    return ring(_IB) / ring(_NV)


@exercise(
    "23.7",
    prompt=("A 1 GiB tensor sharded on dimension 0 over 8 GPUs on NVLink (nvlink4) is "
            "redistributed to shard on dimension 1. How long does the all-to-all the algebra "
            "asks for take, and how long does an all-gather followed by a local chunk take "
            "(what DTensor falls back to on gloo)? Answer as a pair (all-to-all, all-gather)."),
    unit=("ms", "ms"),
    hint="In the all-to-all each rank sends its shard, 1/8 of the tensor; the all-gather "
         "brings the whole tensor to every rank.",
)
def _():
    n = 1024 * MiB
    a2a = mesh.redistribute_time("S0", "S1", n, 8, _NV.alpha, _NV.beta)
    ag = mesh.redistribute_time("S0", "R", n, 8, _NV.alpha, _NV.beta)
    return a2a, ag
