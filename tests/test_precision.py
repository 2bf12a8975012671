"""dtbook.precision (chapter 30) against what torch and NumPy do with the same bits."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from dtbook import precision as pr

TORCH = {name: f for name, f in pr.FORMATS.items() if f.torch_dtype}


def _all_values(dtype):
    """Every finite value of a 8- or 16-bit torch dtype, by enumerating its bit patterns."""
    bits = 8 if torch.finfo(dtype).bits == 8 else 16
    raw = torch.arange(2 ** bits, dtype=torch.int32)
    if bits == 8:
        vals = raw.to(torch.uint8).view(dtype).float()
    else:
        vals = (raw - 2 ** 15).to(torch.int16).view(dtype).float()
    return vals[torch.isfinite(vals)].double().numpy()


@pytest.mark.parametrize("name", list(TORCH))
def test_fields_give_what_torch_finfo_says(name):
    f = TORCH[name]
    fi = torch.finfo(getattr(torch, f.torch_dtype))
    assert f.max == fi.max and f.smallest_normal == fi.smallest_normal and f.eps == fi.eps
    assert f.bits == fi.bits


@pytest.mark.parametrize("name", ["fp16", "bf16", "e4m3", "e5m2"])
def test_fields_give_what_enumerating_every_bit_pattern_gives(name):
    f = TORCH[name]
    vals = _all_values(getattr(torch, f.torch_dtype))
    pos = np.unique(vals[vals > 0])
    assert pos.max() == f.max
    assert pos.min() == f.smallest_subnormal
    # spacing: the gap to the next value, at every positive value but the largest
    gaps = np.diff(pos)
    assert np.array_equal(gaps, pr.spacing(pos[:-1], f.exp_bits, f.man_bits))


def test_numpy_float64_and_float32_agree():
    for np_t, e, m in ((np.float64, 11, 52), (np.float32, 8, 23), (np.float16, 5, 10)):
        fi = np.finfo(np_t)
        assert pr.max_value(e, m) == float(fi.max)
        assert pr.smallest_normal(e) == float(fi.smallest_normal)
        assert pr.smallest_subnormal(e, m) == float(fi.smallest_subnormal)
        assert pr.spacing(3.0, e, m) == float(np.spacing(np_t(3.0)))


def test_symbolic_max_is_the_numeric_one():
    e, m = sp.symbols("e m", positive=True)
    expr = pr.max_value(e, m, "fn")
    assert float(expr.subs({e: 4, m: 3})) == 448.0
    assert float(pr.max_value(e, m).subs({e: 5, m: 2})) == 57344.0


def test_log_uniform_loss_matches_sampling_through_a_real_cast():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(10.0 ** rng.uniform(-8, 8, 400_000))
    h = x.to(torch.float16).double()
    over = float((~torch.isfinite(h)).double().mean())
    under_normal = float((x < 2.0 ** -14).double().mean())
    flushed = float((h == 0).double().mean())
    u, o = pr.log_uniform_loss(1e8, 5, 10)
    u_sub, _ = pr.log_uniform_loss(1e8, 5, 10, subnormals=True)
    assert abs(o - over) < 3e-3 and abs(u - under_normal) < 3e-3
    # only values below half the smallest subnormal round to zero: one binade (log10 2
    # decades of the 16) less than the model's "below the smallest subnormal"
    assert abs(u_sub - math.log10(2) / 16 - flushed) < 3e-3


def test_min_loss_scale_is_the_smallest_power_of_two_that_works():
    for g in (3e-5, 1e-6, 1e-7, 1e-8, 7.7e-9):
        s = pr.min_loss_scale(g)
        scaled = torch.tensor(g * s, dtype=torch.float64).to(torch.float16).item()
        below = torch.tensor(g * s / 2, dtype=torch.float64).to(torch.float16).item()
        assert scaled >= 2.0 ** -14 > below


def test_softmax_overflows_where_the_formula_says():
    t = pr.softmax_overflow(5, 10)
    assert torch.isfinite(torch.exp(torch.tensor(t - 1e-3, dtype=torch.float16)))
    assert torch.isinf(torch.exp(torch.tensor(t + 2e-2, dtype=torch.float16)))


def test_fp8_scale_maps_amax_onto_the_largest_value_without_overflow():
    x = torch.randn(1000, dtype=torch.float64) * 1e-3
    s = pr.fp8_scale(float(x.abs().max()))
    y = (x * s).to(torch.float8_e4m3fn).double()
    assert torch.isfinite(y).all() and y.abs().max() == 448


def test_bad_bits_are_refused_by_name():
    with pytest.raises(ValueError, match="exp_bits"):
        pr.max_value(0, 3)
    with pytest.raises(ValueError, match="man_bits"):
        pr.max_value(5, 60)
    with pytest.raises(ValueError, match="variant"):
        pr.max_value(5, 2, "ocp")
