"""Chapter 35's section of dtbook.moe: the share of expert choices that leave a node."""

import numpy as np
import pytest
import sympy as sp

from dtbook import moe


def test_internode_fraction_values_and_symbols():
    assert moe.internode_fraction(64, 8) == 0.875
    assert moe.internode_fraction(8, 8) == moe.internode_fraction(4, 8) == 0
    assert moe.internode_fraction(16, 8) == 0.5
    e = sp.Symbol("e", positive=True)
    assert sp.simplify(moe.internode_fraction(e, 8).subs(e, 32) - sp.Rational(3, 4)) == 0


def test_internode_fraction_against_sampled_routing():
    # expert choices spread uniformly over 64 ranks of 8-GPU nodes, the token on rank 0
    rng = np.random.default_rng(0)
    ranks = rng.integers(0, 64, size=200_000)
    assert abs((ranks // 8 != 0).mean() - moe.internode_fraction(64, 8)) < 0.005


@pytest.mark.parametrize("kwargs,name", [(dict(ep=0), "ep"), (dict(ep=2.5), "ep"),
                                         (dict(ep=8, gpus_per_node=-1), "gpus_per_node")])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        moe.internode_fraction(**kwargs)
