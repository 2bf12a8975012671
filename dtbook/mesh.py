"""The device mesh: an n-dimensional array of ranks, and what follows from it (chapter 23).

A mesh of shape (d₁, …, dₙ) numbers P = ∏dᵢ devices row-major, as PyTorch's
``init_device_mesh`` does: the last axis is innermost, so its groups are runs of consecutive
ranks (the GPUs of one node when that axis is TP). :class:`Mesh` is the map itself,
coordinates ↔ ranks and the groups along each axis. The functions are the arithmetic of
chapter 23: how many groups an axis has (P/dₖ) and all axes together (P·Σ1/dᵢ), the rank of
a coordinate, the local shape of a sharded tensor, which collective a redistribution needs
and what it costs (through :mod:`dtbook.comm`), and which link an axis's groups use when the
mesh is laid over nodes of g GPUs.

Placements are written as text: ``"R"`` replicate, ``"P"`` partial (a pending sum),
``"S0"``, ``"S1"``, … shard on tensor dimension 0, 1, ….
"""

from __future__ import annotations

from functools import reduce
import operator

import numpy as np
import sympy as sp

from . import _validate as check
from . import comm

__all__ = ["Mesh", "world_size", "groups_per_axis", "total_groups", "axis_strides", "rank_of",
           "local_shape", "redistribution", "redistribute_time", "axis_in_node",
           "axis_members_per_node", "network_ring_beta", "axis_link"]


def _dims(dims):
    if isinstance(dims, (int, np.integer, sp.Basic)):
        dims = (dims,)
    dims = tuple(dims)
    if not dims:
        raise ValueError("dims must name at least one axis, got ()")
    for d in dims:
        check.count("dims", d)
    return dims


def _prod(values):
    return reduce(operator.mul, values, 1)


def _div(a, b):
    # whole numbers stay whole (a group count), symbols stay symbols
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)) and a % b == 0:
        return int(a // b)
    return a / b


# --------------------------------------------------------------------------------------
# The map and its groups
# --------------------------------------------------------------------------------------

class Mesh:
    """A row-major device mesh of shape ``dims`` over ranks ``start … start + P − 1``
    (chapter 23). ``names`` label the axes (``("dp", "tp")``).

    ``rank(coords)`` and ``coords(rank)`` are the map and its inverse; ``groups(axis)`` the
    groups along an axis, each a tuple of ranks in axis order; ``submesh(axis, index)`` fixes
    one axis; ``reshape`` and ``transpose`` give other meshes over the same devices.
    """

    def __init__(self, dims, names=None, ranks=None):
        dims = tuple(int(d) for d in _dims(dims))
        self.ranks = (np.arange(_prod(dims)).reshape(dims) if ranks is None
                      else np.asarray(ranks).reshape(dims))
        self.names = tuple(names) if names is not None else tuple(f"axis{i}" for i in range(len(dims)))
        if len(self.names) != len(dims):
            raise ValueError(f"names must give one name per axis ({len(dims)}), got {names!r}")

    @property
    def shape(self):
        return self.ranks.shape

    @property
    def size(self):
        return int(self.ranks.size)

    def _axis(self, axis):
        return self.names.index(axis) if isinstance(axis, str) else int(axis)

    def rank(self, coords):
        return int(self.ranks[tuple(coords)])

    def coords(self, rank):
        where = np.argwhere(self.ranks == rank)
        if len(where) != 1:
            raise ValueError(f"rank {rank} is not in this mesh")
        return tuple(int(i) for i in where[0])

    def groups(self, axis):
        """The groups along ``axis``: one per setting of the other coordinates, in order."""
        k = self._axis(axis)
        moved = np.moveaxis(self.ranks, k, -1).reshape(-1, self.shape[k])
        return [tuple(int(r) for r in row) for row in moved]

    def group_of(self, rank, axis):
        """The one group along ``axis`` that holds ``rank``."""
        k = self._axis(axis)
        c = list(self.coords(rank))
        return tuple(self.rank(c[:k] + [j] + c[k + 1:]) for j in range(self.shape[k]))

    def submesh(self, axis, index):
        """Fix ``axis`` at ``index``: an (n − 1)-dimensional mesh of the remaining axes."""
        k = self._axis(axis)
        names = self.names[:k] + self.names[k + 1:]
        return Mesh(self.shape[:k] + self.shape[k + 1:], names, np.take(self.ranks, index, axis=k))

    def reshape(self, dims, names=None):
        """The same devices, in the same row-major order, viewed with another shape."""
        return Mesh(dims, names, self.ranks.reshape(dims))

    def transpose(self, order, names=None):
        """Reorder the axes; each device keeps its rank, so the groups are unchanged."""
        order = [self._axis(a) for a in order]
        return Mesh([self.shape[i] for i in order],
                    names or [self.names[i] for i in order], self.ranks.transpose(order))

    def __repr__(self):
        return f"Mesh({self.shape}, names={self.names})"


# --------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------

def world_size(dims):
    """P = ∏dᵢ, the devices of a mesh of shape ``dims`` (chapter 23)."""
    return _prod(_dims(dims))


def groups_per_axis(world, d):
    """Groups along an axis of size d in a mesh of P devices: P/d, disjoint, each of d
    devices (chapter 23)."""
    check.count("world", world)
    check.count("d", d)
    return _div(world, d)


def total_groups(dims):
    """All the process groups a mesh of shape ``dims`` needs, one set per axis:
    G = Σ P/dᵢ = P·Σ1/dᵢ (chapter 23). 1-D: 1; (a, b): a + b; (d)ⁿ: n·dⁿ⁻¹."""
    dims = _dims(dims)
    world = _prod(dims)
    return sum((_div(world, d) for d in dims), 0)


def axis_strides(dims):
    """Row-major strides: how far apart in rank two neighbours along each axis are,
    ∏ of the later axes' sizes (chapter 23). The last axis has stride 1."""
    dims = _dims(dims)
    return tuple(_prod(dims[k + 1:]) for k in range(len(dims)))


def rank_of(coords, dims):
    """The rank at ``coords`` in a row-major mesh of shape ``dims``: Σ cₖ·strideₖ (chapter
    23). For (dp, pp, tp): dp·(PP·TP) + pp·TP + tp."""
    dims = _dims(dims)
    coords = tuple(coords)
    if len(coords) != len(dims):
        raise ValueError(f"coords must have one entry per axis ({len(dims)}), got {coords!r}")
    for c, d in zip(coords, dims):
        check.count("coords", c, minimum=0)
        if not isinstance(c, sp.Basic) and not isinstance(d, sp.Basic) and c >= d:
            raise ValueError(f"coords must lie inside the mesh, got {coords!r} for {dims!r}")
    return sum((c * s for c, s in zip(coords, axis_strides(dims))), 0)


# --------------------------------------------------------------------------------------
# Placements and redistribution
# --------------------------------------------------------------------------------------

def _placement(name, p):
    if not isinstance(p, str) or not (p in ("R", "P") or (p[:1] == "S" and p[1:].isdigit())):
        raise ValueError(f"{name} must be 'R', 'P' or 'S<dim>' (as 'S0'), got {p!r}")
    return p


def local_shape(shape, dims, placements):
    """The shape each device holds of a tensor of global ``shape`` placed on a mesh of shape
    ``dims`` with one placement per mesh axis (chapter 23): every dimension sharded on mesh
    axis k is divided by dₖ (by the product, when several axes shard it); R and P keep it.
    Even splits only (DTensor pads uneven ones)."""
    dims = _dims(dims)
    shape = list(shape)
    for s in shape:
        check.count("shape", s)
    placements = tuple(placements)
    if len(placements) != len(dims):
        raise ValueError(f"placements must give one placement per mesh axis ({len(dims)}), "
                         f"got {placements!r}")
    for p, d in zip(placements, dims):
        _placement("placements", p)
        if p[0] == "S":
            dim = int(p[1:])
            if dim >= len(shape):
                raise ValueError(f"placements shard dimension {dim} of a {len(shape)}-d tensor")
            if isinstance(shape[dim], (int, np.integer)) and isinstance(d, (int, np.integer)) \
                    and shape[dim] % d:
                raise ValueError(f"shape dimension {dim} ({shape[dim]}) does not divide by the "
                                 f"mesh axis ({d}); placements must split evenly")
            shape[dim] = _div(shape[dim], d)
    return tuple(shape)


def redistribution(src: str, dst: str, nbytes, p):
    """The collective that takes a tensor of ``nbytes`` (global) from placement ``src`` to
    ``dst`` along one mesh axis of p devices, and its n as :mod:`dtbook.comm` counts it
    (chapter 23). Returns ``(collective, n)``; ``(None, 0)`` when no communication is needed.

    S→R all-gather (n = the whole tensor); P→R all-reduce (n = whole); P→S reduce-scatter
    (n = whole); Sᵢ→Sⱼ all-to-all (n = what each device sends, its shard nbytes/P);
    R→S a local chunk and X→X nothing (free); R→P keeps the tensor on one device, free too.
    """
    _placement("src", src)
    _placement("dst", dst)
    check.nonnegative("nbytes", nbytes)
    check.count("p", p)
    if src == dst or src == "R":
        return (None, 0)
    if src[0] == "S":
        if dst == "R":
            return ("allgather", nbytes)
        if dst[0] == "S":
            return ("alltoall", nbytes / p)
        raise ValueError(f"dst 'P' from a shard is not a redistribution DTensor performs")
    return ("allreduce", nbytes) if dst == "R" else ("reduce_scatter", nbytes)


_TIMES = {"allgather": comm.allgather_time, "allreduce": comm.allreduce_time,
          "reduce_scatter": comm.reduce_scatter_time, "alltoall": comm.alltoall_time}


def redistribute_time(src: str, dst: str, nbytes, p, alpha, beta):
    """Time of :func:`redistribution` over p devices on links (α, β): the ring
    collective's time from :mod:`dtbook.comm` (chapters 12, 23); 0 when it is free."""
    check.nonnegative("alpha", alpha)
    check.positive("beta", beta)
    collective, n = redistribution(src, dst, nbytes, p)
    if collective is None:
        return 0
    return _TIMES[collective](n, p, alpha, beta)


# --------------------------------------------------------------------------------------
# The mesh laid over nodes
# --------------------------------------------------------------------------------------

def axis_in_node(dims, axis, gpus_per_node):
    """Whether every group along ``axis`` (an index) of a row-major mesh stays inside one
    node of ``gpus_per_node`` consecutive ranks (chapter 23): its span stride·d fits in a node
    and the node size is a multiple of it, so no group straddles a node boundary."""
    dims = _dims(dims)
    check.count("gpus_per_node", gpus_per_node)
    check.scalar("axis", axis)  # one axis per call: an array of them is not an index
    if (isinstance(axis, sp.Basic) and axis.free_symbols) or not 0 <= axis < len(dims) \
            or axis != int(axis):
        raise ValueError(f"axis must index one of the {len(dims)} mesh axes, got {axis!r}")
    axis = int(axis)
    span = axis_strides(dims)[axis] * dims[axis]
    return bool(span <= gpus_per_node and gpus_per_node % span == 0)


def axis_members_per_node(dims, axis, gpus_per_node):
    """How many ranks of one group along ``axis`` share a node of ``gpus_per_node``
    consecutive ranks (chapter 23): ``gpus_per_node / stride`` while the axis's stride is
    below the node size (at most the axis's size), else 1."""
    dims = _dims(dims)
    check.count("gpus_per_node", gpus_per_node)
    axis_in_node(dims, axis, gpus_per_node)            # checks the axis
    stride = axis_strides(dims)[int(axis)]
    return int(max(1, min(dims[int(axis)], gpus_per_node // stride)))


def network_ring_beta(members_per_node, beta_in, beta_out):
    """The bandwidth a ring collective reaches across nodes when ``members_per_node`` of its
    ranks share each node (chapter 23): ``min(members · β_out, β_in)``. NCCL lays one ring per
    channel through the group's GPUs and leaves a node through the NIC of the GPU it exits
    from, its channels spread over the group's NICs, so each NIC carries 1/members of the
    network traffic. Its maintainers put a multi-node all-reduce's bus bandwidth at the
    per-NIC rate times the NICs (NVIDIA/nccl-tests issue #119, "24GB/s is the peak
    performance per 200G NIC ... so in your case 96GB/s is the target" for four), more NICs
    giving more "up to 160GB/s which is the NVLink intra-node bandwidth" of an A800 node
    (NVIDIA/nccl issue #412): NVLink's ring rate β_in bounds it. An all-to-all "cannot
    aggregate the bandwidth of multiple NICs" (nccl-tests issue #267) and runs at one NIC's
    β. Arrays broadcast; symbols give ``Min``."""
    check.count("members_per_node", members_per_node)
    check.positive("beta_in", beta_in)
    check.positive("beta_out", beta_out)
    if isinstance(members_per_node, sp.Basic) or isinstance(beta_in, sp.Basic) \
            or isinstance(beta_out, sp.Basic):
        return sp.Min(members_per_node * beta_out, beta_in)
    return np.minimum(np.asarray(members_per_node) * beta_out, beta_in)


def axis_link(dims, axis, gpus_per_node, alpha_in, beta_in, alpha_out, beta_out):
    """The (α, β) the groups along ``axis`` run on (chapter 23): the node's scale-up link
    when :func:`axis_in_node`, else the network's α and, with :func:`axis_members_per_node`
    of a group in each node, :func:`network_ring_beta` (one member: the network's β, a ring
    being as slow as its slowest hop)."""
    for name, v in (("alpha_in", alpha_in), ("alpha_out", alpha_out)):
        check.nonnegative(name, v)
    for name, v in (("beta_in", beta_in), ("beta_out", beta_out)):
        check.positive(name, v)
    if axis_in_node(dims, axis, gpus_per_node):
        return (alpha_in, beta_in)
    g = axis_members_per_node(dims, axis, gpus_per_node)
    return (alpha_out, beta_out if g == 1 else network_ring_beta(g, beta_in, beta_out))


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
