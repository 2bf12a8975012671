"""Tests for dtbook.offload (chapter 22): each closed form against something obtained
another way (an event simulation, brute force, the memory module's own counts)."""

import itertools

import numpy as np
import pytest
import sympy as sp

from dtbook import memory, offload


def simulate(items, t_c, t_t, buffers, links=1):
    """Event simulation of streaming: transfer i starts when a link is free and item
    i − buffers has finished computing (its buffer is free); compute i starts when transfer
    i is done and compute i − 1 has finished. Returns (total time, per-item compute ends)."""
    link_free = [0.0] * links
    end_t, end_c = [], []
    for i in range(items):
        buffer_free = end_c[i - buffers] if i >= buffers else 0.0
        j = min(range(links), key=lambda q: link_free[q])
        start = max(link_free[j], buffer_free)
        link_free[j] = start + t_t
        end_t.append(start + t_t)
        end_c.append(max(end_t[i], end_c[i - 1] if i else 0.0) + t_c)
    return end_c[-1], end_c


@pytest.mark.parametrize("items,t_c,t_t,k", list(itertools.product(
    (1, 2, 7, 20), (1.0, 3.0, 5.0), (1.0, 2.5, 5.0, 8.0), (1, 2, 3, 5))))
def test_buffered_time_equals_event_simulation(items, t_c, t_t, k):
    total, _ = simulate(items, t_c, t_t, k)
    assert np.isclose(offload.buffered_time(items, t_c, t_t, k), total)


@pytest.mark.parametrize("t_c,t_t", [(50.0, 80.0), (80.0, 50.0), (10.0, 16.0), (4.0, 4.0)])
def test_no_depth_beats_the_link_in_steady_state(t_c, t_t):
    for k in (2, 3, 4, 8):
        _, ends = simulate(200, t_c, t_t, k)
        steady = (ends[-1] - ends[99]) / 100
        assert np.isclose(steady, offload.buffered_item_time(t_c, t_t, k))
        assert np.isclose(steady, max(t_c, t_t))
    _, ends = simulate(200, t_c, t_t, 1)
    assert np.isclose((ends[-1] - ends[99]) / 100, offload.buffered_item_time(t_c, t_t, 1))


def test_the_original_claim_needs_a_second_link():
    # max(T_c, T_t/2) per item is what two links give, not what a third buffer gives
    _, ends = simulate(200, 50.0, 80.0, 3, links=2)
    assert np.isclose((ends[-1] - ends[99]) / 100, max(50.0, 80.0 / 2))
    _, ends = simulate(200, 50.0, 80.0, 3, links=1)
    assert np.isclose((ends[-1] - ends[99]) / 100, 80.0)


def test_overlap_tokens_from_per_layer_times():
    H, F, beta = 8192, 312e12, 32e9
    tokens = offload.overlap_tokens(F, beta)
    assert np.isclose(tokens, F / beta)                         # bf16: B·S ≥ F/β
    for bs, hides in ((tokens * 0.9, False), (tokens * 1.1, True)):
        t_x = offload.layer_transfer_time(H, beta)
        t_c = offload.layer_compute_time(H, bs, 1, F)
        assert (t_x <= t_c) == hides


def test_offload_bytes_against_the_memory_module():
    psi = 13e9
    whole = memory.model_state_bytes(psi)
    assert offload.gpu_bytes(psi) + offload.host_bytes(psi) == whole
    assert offload.gpu_bytes(psi, peak=False) == 2 * psi
    assert offload.memory_reduction() == 4 and offload.memory_reduction(peak=False) == 8
    assert np.isclose(offload.host_bytes(psi, dp=8), 12 * psi / 8)


def test_compression_breakeven_is_where_the_times_cross():
    n, bw = 1e9, 7e9
    for r in (1.2, 1.5, 3.0):
        c = offload.compression_breakeven(bw, r)
        assert np.isclose(offload.compressed_time(n, bw, r, c), n / bw)
        assert offload.compressed_time(n, bw, r, 1.01 * c) < n / bw < offload.compressed_time(n, bw, r, 0.99 * c)
        cp = offload.compression_breakeven(bw, r, pipelined=True)
        assert offload.compressed_time(n, bw, r, 1.01 * cp, pipelined=True) < n / bw
    assert offload.compression_breakeven(bw, 1.0) == float("inf")
    R, Bs = sp.symbols("R B", positive=True)
    assert sp.simplify(offload.compression_breakeven(Bs, R) - Bs / (1 - 1 / R)) == 0


def test_step_time_and_efficiency():
    assert offload.step_time(0.1, 0.08, 0.005) == pytest.approx(0.105)
    assert offload.step_time(0.1, 0.08, 0.005, overlap=False) == pytest.approx(0.185)
    assert offload.efficiency(0.1, 0.2) == pytest.approx(0.5)


def test_cpu_step_time_is_the_bytes_the_adam_step_moves():
    # written out: read the bf16 gradient (2), read and write the fp32 master, m and v
    # (2 x (4 + 4 + 4)), write the bf16 copy (2): 28 bytes per parameter
    psi, host_bw = 10e9, 614.4e9 / 8              # a DGX H100 GPU's eighth of its host's DRAM
    assert offload.cpu_step_time(psi, host_bw) == pytest.approx(28 * 10e9 / 76.8e9)
    assert offload.cpu_step_time(psi, host_bw, dp=8) == pytest.approx(28 * 10e9 / 8 / 76.8e9)
    # fp32 gradients on the host (4 bytes), SGD with momentum (one 4-byte moment)
    assert offload.cpu_step_time(psi, host_bw, grad_bytes=4, optimizer_bytes=4) == \
        pytest.approx((4 + 2 * (4 + 4) + 2) * psi / host_bw)
    Psi, B = sp.symbols("Psi B", positive=True)
    assert sp.simplify(offload.cpu_step_time(Psi, B) - 28 * Psi / B) == 0
    with pytest.raises(ValueError, match="bandwidth"):
        offload.cpu_step_time(psi, 0)
    with pytest.raises(ValueError, match="dp"):
        offload.cpu_step_time(psi, host_bw, dp=0)
