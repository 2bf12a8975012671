"""dtbook.memory: the mixed-precision Adam memory equation and device counts (chapter 01)."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from dtbook import memory
from dtbook.symbolic import assert_same, params as Psi
from dtbook.units import GB

counts = st.integers(min_value=0, max_value=10**15)


def test_sixteen_bytes_per_parameter():
    assert memory.model_state_bytes(1) == 16
    assert memory.model_state_bytes(13e9) == 208e9  # the book's 13B example, decimal GB
    assert memory.model_state_bytes(70e9) == pytest.approx(1.12e12)


def test_breakdown_parts():
    parts = memory.model_state_breakdown(10)
    assert parts == {"params": 20, "grads": 20, "master": 40, "optimizer": 80}
    assert sum(parts.values()) == memory.model_state_bytes(10)
    assert memory.MIXED_PRECISION_ADAM == {"params": 2, "grads": 2, "master": 4, "optimizer": 8}


def test_other_precisions():
    # fp32 training with Adam and no separate master copy: 4 + 4 + 0 + 8 = 16 as well.
    assert memory.model_state_bytes(1, param_bytes=4, grad_bytes=4, master_bytes=0) == 16
    # SGD with momentum in mixed precision: one fp32 moment.
    assert memory.model_state_bytes(1, optimizer_bytes=4) == 12


def test_symbolic():
    assert_same(memory.model_state_bytes(Psi), 16 * Psi)
    b = sp.symbols("b_p b_g b_m b_o", positive=True)
    assert_same(memory.model_state_bytes(Psi, *b), Psi * sum(b))
    M, G = sp.symbols("M G", positive=True)
    assert memory.min_devices(M, G) == sp.ceiling(M / G)


def test_arrays():
    out = memory.model_state_bytes(np.array([1e9, 7e9]))
    np.testing.assert_allclose(out, [16e9, 112e9])
    np.testing.assert_array_equal(memory.min_devices(np.array([80e9, 80e9 + 1, 1.0]), 80e9), [1, 2, 1])


def test_min_devices():
    assert memory.min_devices(208 * GB, 80 * GB) == 3
    assert memory.min_devices(160 * GB, 80 * GB) == 2
    assert memory.min_devices(0, 80 * GB) == 0
    assert memory.min_devices(16 * 10**12 + 1, 10**12) == 17  # exact on integers
    assert isinstance(memory.min_devices(208e9, 80e9), int)


@pytest.mark.parametrize("kwargs, name", [
    ({"params": -1}, "params"),
    ({"params": float("nan")}, "params"),
    ({"params": 1, "param_bytes": -2}, "param_bytes"),
    ({"params": 1, "optimizer_bytes": "8"}, "optimizer_bytes"),
])
def test_bad_inputs_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        memory.model_state_bytes(**kwargs)


def test_min_devices_bad_inputs():
    with pytest.raises(ValueError, match="device_bytes"):
        memory.min_devices(1e9, 0)
    with pytest.raises(ValueError, match="total_bytes"):
        memory.min_devices(-1, 80e9)


@given(counts, counts)
def test_monotone_and_additive(a, b):
    assert memory.model_state_bytes(a + b) == memory.model_state_bytes(a) + memory.model_state_bytes(b)
    if a <= b:
        assert memory.model_state_bytes(a) <= memory.model_state_bytes(b)


@given(st.integers(0, 10**14), st.integers(1, 10**12))
def test_min_devices_is_the_least_that_fits(total, device):
    n = memory.min_devices(total, device)
    assert n * device >= total
    assert (n - 1) * device < total or n == 0


def test_zero_stages_against_the_paper_formulas():
    # ZeRO paper (Rajbhandari et al. 2020), Figure 1: (2 + 2 + K)Ψ, (2 + 2)Ψ + KΨ/N,
    # 2Ψ + (2 + K)Ψ/N, (2 + 2 + K)Ψ/N with K = 12.
    import sympy as sp
    from dtbook.symbolic import assert_same
    psi, N = sp.symbols("Psi N", positive=True)
    K = 12
    want = {0: (4 + K) * psi, 1: 4 * psi + K * psi / N, 2: 2 * psi + (2 + K) * psi / N,
            3: (4 + K) * psi / N}
    for stage, expr in want.items():
        assert_same(memory.zero_state_bytes(psi, N, stage), expr, f"stage {stage}")
    assert memory.zero_state_bytes(7.5e9, 64, 3) == pytest.approx(1.875e9)   # paper: 1.9 GB
    assert memory.zero_state_bytes(7.5e9, 64, 1) == pytest.approx(31.4e9, rel=0.01)  # 31.4 GB
    assert memory.zero_state_bytes(7.5e9, 64, 2) == pytest.approx(16.6e9, rel=0.01)  # 16.6 GB
    assert memory.zero_state_bytes(1e9, 1, 0) == memory.model_state_bytes(1e9)
    with pytest.raises(ValueError, match="stage"):
        memory.zero_state_bytes(1e9, 8, 4)
    with pytest.raises(ValueError, match="dp"):
        memory.zero_state_bytes(1e9, 0, 1)
