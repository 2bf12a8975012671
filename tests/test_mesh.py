"""dtbook.mesh (chapter 23): the group theorem on our Mesh class, checked by brute force over
random shapes, and our groups against PyTorch's init_device_mesh on gloo ranks."""

import math
from collections import Counter
from itertools import product

import pytest
import numpy as np
import sympy as sp
from hypothesis import given, settings, strategies as st

from dtbook import comm, mesh

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_every_device_is_in_exactly_one_group_per_axis(dims):
    m = mesh.Mesh(dims)
    for axis in range(len(dims)):
        groups = m.groups(axis)
        seen = Counter(r for g in groups for r in g)
        assert seen == Counter(range(m.size))                 # a partition of the devices
        assert len(groups) == mesh.groups_per_axis(m.size, dims[axis])
        assert all(len(g) == dims[axis] for g in groups)
        for r in range(m.size):                               # group_of agrees with groups
            assert m.group_of(r, axis) in groups
    assert sum(len(m.groups(a)) for a in range(len(dims))) == mesh.total_groups(dims)


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_the_map_is_row_major_and_invertible(dims):
    m = mesh.Mesh(dims)
    for coords in product(*(range(d) for d in dims)):
        r = mesh.rank_of(coords, dims)
        assert m.rank(coords) == r and m.coords(r) == coords
    assert sorted(m.ranks.ravel()) == list(range(math.prod(dims)))


@settings(max_examples=40, deadline=None)
@given(shapes, st.data())
def test_submesh_transpose_and_reshape_keep_the_groups_they_should(dims, data):
    m = mesh.Mesh(dims)
    k = data.draw(st.integers(0, len(dims) - 1))
    if len(dims) > 1:
        i = data.draw(st.integers(0, dims[k] - 1))
        sub = m.submesh(k, i)
        assert all(m.coords(r)[k] == i for r in sub.ranks.ravel())
        assert sub.size == m.size // dims[k]
    order = data.draw(st.permutations(range(len(dims))))
    t = m.transpose(order)
    for new_axis, old_axis in enumerate(order):               # the same groups, renamed
        assert sorted(t.groups(new_axis)) == sorted(m.groups(old_axis))
    flat = m.reshape((m.size,))
    assert flat.groups(0) == [tuple(range(m.size))]


def test_total_groups_closed_forms():
    a, b, d = sp.symbols("a b d", positive=True, integer=True)
    assert sp.simplify(mesh.total_groups((a, b)) - (a + b)) == 0
    assert sp.simplify(mesh.total_groups((d, d, d)) - 3 * d**2) == 0
    assert mesh.total_groups((8, 4, 8)) == 128 and mesh.total_groups((7,)) == 1


def test_local_shape_and_redistribution():
    assert mesh.local_shape((64, 32), (2, 4), ("R", "S0")) == (16, 32)
    assert mesh.local_shape((64, 32), (2, 4), ("S0", "S0")) == (8, 32)
    assert mesh.local_shape((64, 32), (2, 4), ("S1", "P")) == (64, 16)
    with pytest.raises(ValueError, match="divide"):
        mesh.local_shape((6, 4), (4,), ("S0",))
    assert mesh.redistribution("R", "S0", 1e6, 4) == (None, 0)
    assert mesh.redistribution("S0", "S1", 1e6, 4) == ("alltoall", 2.5e5)
    t = mesh.redistribute_time("P", "S0", 1e6, 4, 1e-6, 1e9)
    assert t == comm.reduce_scatter_time(1e6, 4, 1e-6, 1e9)
    with pytest.raises(ValueError, match="src"):
        mesh.redistribution("X", "R", 1e6, 4)


def test_axis_placement_on_nodes():
    assert mesh.axis_in_node((32, 8), 1, 8) and not mesh.axis_in_node((32, 8), 0, 8)
    assert not mesh.axis_in_node((8, 32), 1, 8)                  # TP outer: across nodes
    assert mesh.axis_in_node((4, 2, 4), 1, 8) and not mesh.axis_in_node((4, 4, 2), 0, 8)
    assert mesh.axis_link((32, 8), 0, 8, 1e-6, 4.5e11, 2e-6, 5e10) == (2e-6, 5e10)


@pytest.mark.parametrize("dims", [(16, 4), (8, 2, 4), (4, 8), (32, 8), (2, 16), (64,)])
def test_members_per_node_counts_the_mesh_groups(dims):
    # the formula beside the mesh itself: ranks of each group in each node of 8
    m = mesh.Mesh(dims)
    for axis in range(len(dims)):
        counted = {sum(1 for r in g if r // 8 == node)
                   for g in m.groups(axis) for node in {r // 8 for r in g}}
        assert counted == {mesh.axis_members_per_node(dims, axis, 8)}, (dims, axis)


def test_a_ring_across_nodes_takes_each_members_nic():
    # two GPUs of each DP group in a node (TP 4 inside): twice the network, up to NVLink
    assert mesh.axis_link((16, 4), 0, 8, 1e-6, 4.5e11, 2e-6, 5e10) == (2e-6, 1e11)
    assert mesh.network_ring_beta(8, 3.7e11, 4.7e10) == 3.7e11          # NVLink bounds it
    assert np.allclose(mesh.network_ring_beta(np.array([1, 2, 4]), 4.5e11, 5e10),
                       [5e10, 1e11, 2e11])
    g = sp.Symbol("g", positive=True, integer=True)
    assert mesh.network_ring_beta(g, sp.Symbol("B"), sp.Symbol("b")) == sp.Min(
        g * sp.Symbol("b"), sp.Symbol("B"))
    # and through axis_link, symbols in: two members of each DP group per node
    B, b = sp.symbols("B b", positive=True)
    assert mesh.axis_link((16, 4), 0, 8, 1e-6, B, 2e-6, b) == (2e-6, sp.Min(2 * b, B))


# Every shape of 4 and of 8 ranks with at least two axes, plus the flat mesh.
TORCH_SHAPES = {
    4: (((2, 2), ("dp", "tp")), ((4,), ("dp",))),
    8: (((2, 2, 2), ("dp", "pp", "tp")), ((2, 4), ("dp", "tp")), ((4, 2), ("dp", "tp"))),
}


def _torch_groups(rank, world_size):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    out = {}
    for dims, names in TORCH_SHAPES[world_size]:
        m = init_device_mesh("cpu", dims, mesh_dim_names=names)
        out[dims] = {n: tuple(dist.get_process_group_ranks(m[n].get_group())) for n in names}
    return out


@pytest.mark.parametrize("world_size", sorted(TORCH_SHAPES))
def test_our_groups_equal_init_device_mesh(world_size):
    from dtbook.dist import launch

    per_rank = launch(_torch_groups, world_size, timeout=120)
    for dims, names in TORCH_SHAPES[world_size]:
        ours = mesh.Mesh(dims, names)
        for rank, got in enumerate(per_rank):
            for n in names:
                assert got[dims][n] == ours.group_of(rank, n), (dims, n, rank)
