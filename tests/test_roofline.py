import numpy as np
import pytest
import sympy as sp
from hypothesis import given, strategies as st

from dtbook import roofline
from dtbook.symbolic import assert_same

pos = st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False)


def test_ridge_point_is_where_the_ceilings_meet():
    F, bw = 989e12, 3.35e12
    ridge = roofline.ridge_point(F, bw)
    assert roofline.attainable_flops(ridge, F, bw) == pytest.approx(F)
    assert roofline.attainable_flops(ridge / 2, F, bw) == pytest.approx(F / 2)


def test_symbolic_path():
    F, bw, I = sp.symbols("F b I", positive=True)
    assert_same(roofline.ridge_point(F, bw), F / bw)
    assert roofline.attainable_flops(I, F, bw) == sp.Min(F, bw * I)


def test_arrays_work():
    intensity = np.array([1.0, 10.0, 1e4])
    got = roofline.attainable_flops(intensity, 100.0, 2.0)
    assert np.allclose(got, [2.0, 20.0, 100.0])


def test_extended_roofline_and_binding_ceiling():
    args = dict(peak_flops=100.0, mem_bandwidth=10.0, mem_intensity=20.0,
                net_bandwidth=1.0, net_intensity=50.0)
    assert roofline.extended_roofline(**args) == 50.0
    assert roofline.binding_ceiling(**args) == "network"
    args["net_intensity"] = 1e6
    assert roofline.binding_ceiling(**args) == "compute"
    args["mem_intensity"] = 1.0
    assert roofline.binding_ceiling(**args) == "memory"


@given(pos, pos, pos, pos, pos)
def test_extended_never_exceeds_any_ceiling(F, bm, im, bn, inet):
    value = roofline.extended_roofline(F, bm, im, bn, inet)
    assert value <= F * (1 + 1e-12)
    assert value <= bm * im * (1 + 1e-12)
    assert value <= bn * inet * (1 + 1e-12)
    assert value in (F, bm * im, bn * inet)


@given(pos, pos, pos, pos)
def test_attainable_is_monotone_in_intensity(i1, i2, F, bw):
    lo, hi = sorted((i1, i2))
    assert roofline.attainable_flops(lo, F, bw) <= roofline.attainable_flops(hi, F, bw)


@pytest.mark.parametrize("kwargs, name", [
    (dict(flops=1.0, nbytes=0.0), "nbytes"),
    (dict(flops=-1.0, nbytes=1.0), "flops"),
])
def test_bad_intensity_inputs_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        roofline.arithmetic_intensity(**kwargs)


def test_binding_ceiling_refuses_symbols():
    F = sp.Symbol("F", positive=True)
    with pytest.raises(ValueError, match="compute"):
        roofline.binding_ceiling(F, 1.0, 1.0, 1.0, 1.0)


# ---------------------------------------------------------------- extensions (chapter 02)

import math

from dtbook import data_parallel, hardware, tensor_parallel
from dtbook.symbolic import batch, seq, world, hidden, layers, params


def test_infinite_intensity_removes_a_ceiling():
    assert roofline.extended_roofline(100.0, 10.0, math.inf, 1.0, math.inf) == 100.0
    assert roofline.binding_ceiling(100.0, 10.0, 1.0, 1.0, math.inf) == "memory"
    assert roofline.binding_ceiling(100.0, 10.0, math.inf, 1.0, 5.0) == "network"
    with pytest.raises(ValueError, match="mem_intensity"):
        roofline.extended_roofline(100.0, 10.0, -math.inf, 1.0, 1.0)
    with pytest.raises(ValueError, match="net_intensity"):
        roofline.extended_roofline(100.0, 10.0, 1.0, 1.0, float("nan"))


def test_communication_intensity_is_the_arithmetic_intensity_of_the_bytes_sent():
    assert roofline.arithmetic_intensity(6e14, 3e10) == pytest.approx(2e4)
    assert roofline.Kernel("k", 6e14, 0.0, 3e10).net_intensity == pytest.approx(2e4)
    with pytest.raises(ValueError, match="nbytes"):
        roofline.arithmetic_intensity(1.0, 0.0)


def test_dp_intensity_is_flops_over_the_gradient_bytes_sent():
    s = sp.Symbol("s", positive=True)
    flops_per_gpu = 6 * params * batch * seq / world
    sent = data_parallel.gradient_bytes_sent(params, world, grad_bytes=s)
    assert_same(roofline.dp_intensity(batch, seq, world, grad_bytes=s, exact=True),
                flops_per_gpu / sent)
    assert_same(roofline.dp_intensity(batch, seq, world, grad_bytes=s),
                flops_per_gpu / sp.limit(sent, world, sp.oo))
    assert_same(roofline.dp_intensity(batch, seq, world, grad_bytes=s),
                3 * batch * seq / (world * s))
    # a 7B example: 1M tokens per step on 64 GPUs, BF16 gradients
    assert roofline.dp_intensity(1, 1e6, 64, grad_bytes=2) == pytest.approx(23437.5)


def test_dp_exact_tends_to_the_large_p_form():
    exact = roofline.dp_intensity(1024, 4096, world, grad_bytes=2, exact=True)
    approx = roofline.dp_intensity(1024, 4096, world, grad_bytes=2)
    assert sp.limit(exact / approx, world, sp.oo) == 1
    with pytest.raises(ValueError, match="world"):
        roofline.dp_intensity(1, 1, 1, grad_bytes=2, exact=True)


def test_tp_and_pp_intensity_follow_from_the_byte_counts():
    s, t, p = sp.symbols("s t p", positive=True)
    tokens = batch * seq
    tp_flops = 72 * hidden**2 * tokens / t
    assert_same(roofline.tp_intensity(hidden, t, value_bytes=s),
                tp_flops / (4 * 2 * (t - 1) / t * tokens * hidden * s))   # four ring all-reduces
    assert_same(roofline.tp_intensity(hidden, t, value_bytes=s),
                tp_flops / tensor_parallel.layer_comm_bytes(batch, seq, hidden, t,
                                                            bytes_per_element=s))
    pp_flops = 72 * hidden**2 * layers / p * tokens
    assert_same(roofline.pp_intensity(hidden, layers, p, value_bytes=s),
                pp_flops / (2 * tokens * hidden * s))   # activation forward, gradient backward
    assert roofline.tp_intensity(8192, 8, value_bytes=2) == pytest.approx(9 * 8192 / 14)
    with pytest.raises(ValueError, match="tp"):
        roofline.tp_intensity(8192, 1)


def test_min_time_is_the_roofline_in_time():
    F, bm, bn = 100.0, 10.0, 1.0
    W, qm, qn = 1000.0, 50.0, 2.0
    t = roofline.min_time(W, F, qm, bm, qn, bn)
    assert t == pytest.approx(10.0)
    # the same bound as a rate: W / t equals the extended roofline
    assert W / t == pytest.approx(roofline.extended_roofline(F, bm, W / qm, bn, W / qn))
    assert roofline.min_time(W, F) == pytest.approx(10.0)
    Wsym, Fsym = sp.symbols("W F", positive=True)
    assert_same(roofline.min_time(Wsym, Fsym), Wsym / Fsym)


@given(pos, pos, pos, pos, pos, pos)
def test_min_time_never_below_any_single_resource(W, F, qm, bm, qn, bn):
    t = roofline.min_time(W, F, qm, bm, qn, bn)
    for need in (W / F, qm / bm, qn / bn):
        assert t >= need * (1 - 1e-12)


def test_step_time_and_comm_fraction():
    # the chapter's question: 100 ms compute, 200 ms all-reduce
    assert roofline.step_time(0.1, 0.2) == pytest.approx(0.3)
    assert roofline.step_time(0.1, 0.2, overlap=1) == pytest.approx(0.2)
    assert roofline.step_time(0.1, 0.2, overlap=0.5) == pytest.approx(0.25)
    assert roofline.comm_fraction(0.1, 0.2) == pytest.approx(2 / 3)
    assert roofline.comm_fraction(0.1, 0.2, overlap=1) == pytest.approx(0.5)
    assert roofline.comm_fraction(0.3, 0.2, overlap=1) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="overlap"):
        roofline.step_time(0.1, 0.2, overlap=1.5)
    Tc, Tm = sp.symbols("T_c T_m", positive=True)
    assert_same(roofline.step_time(Tc, Tm), Tc + Tm)


@given(pos, pos, st.floats(min_value=0, max_value=1))
def test_step_time_between_max_and_sum(tc, tm, f):
    t = roofline.step_time(tc, tm, f)
    assert max(tc, tm) * (1 - 1e-12) <= t <= (tc + tm) * (1 + 1e-12)
    assert 0 <= roofline.comm_fraction(tc, tm, f) <= 1 + 1e-12


def test_ceilings_and_kernels():
    h100_ib = roofline.Ceilings.from_hardware("h100-sxm", "ib-ndr400", "bf16")
    acc, ib = hardware.get("h100-sxm"), hardware.get("ib-ndr400")
    assert h100_ib.ridge("network") == pytest.approx(acc.peak("bf16") / ib.beta)
    assert h100_ib.ridge("memory") == pytest.approx(acc.peak("bf16") / acc.hbm_bandwidth)
    n = 8192
    mm = roofline.Kernel("matmul", 2 * n**3, 3 * n * n * 2)
    add = roofline.Kernel("add", n * n, 3 * n * n * 2)
    ar = roofline.Kernel("allreduce", 1e6, 12e6, 8e6)
    assert mm.net_intensity == math.inf
    assert h100_ib.binding(mm) == "compute"
    assert h100_ib.binding(add) == "memory"
    assert h100_ib.binding(ar) == "network"
    assert h100_ib.attainable(add) == pytest.approx(acc.hbm_bandwidth * add.mem_intensity)
    assert h100_ib.min_time(ar) == pytest.approx(8e6 / ib.beta)
    assert h100_ib.ceiling("network", 2.0) == pytest.approx(2 * ib.beta)
    assert h100_ib.ceiling("compute", 1.0) == acc.peak("bf16")
    with pytest.raises(ValueError, match="resource"):
        h100_ib.ridge("disk")
    with pytest.raises(ValueError, match="flops"):
        roofline.Kernel("nothing", 0.0, 1.0)
    with pytest.raises(ValueError, match="net_bandwidth"):
        roofline.Ceilings(1.0, 1.0, 0.0)


def test_nvlink_ridge_is_twice_the_books():
    # Source issue A.9: the book divides by NVLink's 900 GB/s, both directions added.
    c = roofline.Ceilings.from_hardware("h100-sxm", "nvlink4", "bf16")
    assert c.ridge("network") == pytest.approx(2 * 989.4e12 / 900e9)
