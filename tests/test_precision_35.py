"""Chapter 35's section of dtbook.precision: the Δ/√12 rounding model and the RMSE of FP8
with one scale per tensor or per block, against torch's own float8_e4m3fn cast."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import precision


def test_rounding_rmse_is_step_over_root_twelve_and_symbolic():
    d = sp.Symbol("Delta", positive=True)
    assert sp.simplify(precision.rounding_rmse(d) - d / sp.sqrt(12)) == 0
    assert math.isclose(precision.rounding_rmse(1.0), 1 / math.sqrt(12))
    # measured: uniform values rounded to a grid of step 0.5
    x = torch.rand(1_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 100
    err = (torch.round(x / 0.5) * 0.5 - x).pow(2).mean().sqrt().item()
    assert abs(err / precision.rounding_rmse(0.5) - 1) < 0.01


def test_gaussian_amax_leading_order():
    s, n = sp.symbols("sigma n", positive=True)
    assert sp.simplify(precision.gaussian_amax(s, n) - s * sp.sqrt(2 * sp.log(n))) == 0
    assert math.isclose(precision.gaussian_amax(0.02, 128), 0.02 * math.sqrt(2 * math.log(128)))


def _roundtrip(x, amax):
    scale = 448.0 / amax
    return (x * scale).to(torch.float8_e4m3fn).to(torch.float64) / scale


@pytest.mark.parametrize("sigma", [0.02, 1.0])
def test_model_matches_torch_per_tensor_and_per_block(sigma):
    torch.manual_seed(0)
    w = torch.randn(512, 1024, dtype=torch.float64) * sigma
    per_tensor = (_roundtrip(w, w.abs().max()) - w).pow(2).mean().sqrt().item()
    assert abs(per_tensor / precision.scaled_rounding_rmse(sigma, w.abs().max().item()) - 1) < 0.02
    blocks = w.reshape(-1, 128)
    amax = blocks.abs().amax(1, keepdim=True)
    per_block = (_roundtrip(blocks, amax) - blocks).pow(2).mean().sqrt().item()
    model = np.sqrt(np.mean(precision.scaled_rounding_rmse(sigma, amax.squeeze().numpy()) ** 2))
    assert abs(per_block / model - 1) < 0.02


def test_relative_error_ignores_the_scale_until_the_subnormals():
    # FP8 is floating point: scaling the same Gaussian's amax by 4 changes the RMSE little,
    # by 10^5 pushes it into the subnormals
    base = precision.scaled_rounding_rmse(1.0, 4.0)
    assert abs(precision.scaled_rounding_rmse(1.0, 16.0) / base - 1) < 0.02
    assert precision.scaled_rounding_rmse(1.0, 4e5) > 10 * base
    assert precision.scaled_rounding_rmse(1.0, np.array([4.0, 16.0])).shape == (2,)


@pytest.mark.parametrize("kwargs,name", [
    (dict(sigma=-1.0, amax=1.0), "sigma"), (dict(sigma=1.0, amax=0.0), "amax"),
    (dict(sigma=[1.0, 2.0], amax=1.0), "sigma"), (dict(sigma=1.0, amax=float("nan")), "amax"),
])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        precision.scaled_rounding_rmse(**kwargs)


def test_symbols_are_refused_by_name():
    with pytest.raises(ValueError, match="sigma"):
        precision.scaled_rounding_rmse(sp.Symbol("s", positive=True), 1.0)
