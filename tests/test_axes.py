"""Chapter 25: dtbook.axes against independent paths — the memory equation of chapter 19,
chapter 18's dispatch matrix, a simulation of random routing, brute-force searches and the
α-β times of chapter 12."""

import numpy as np
import pytest
import sympy as sp

from dtbook import axes, comm, data_parallel, memory, models, moe, pipeline_parallel
from dtbook import sequence_parallel as sp_
from dtbook import tensor_parallel as tpf


@pytest.mark.parametrize("seq,cp,tp,pp,m", [(8192, 1, 8, 16, 16), (131072, 16, 8, 16, 16),
                                            (32768, 4, 4, 8, 3), (4096, 2, 1, 1, 1)])
def test_activations_equal_the_memory_equation_with_cp(seq, cp, tp, pp, m):
    cfg = models.get("llama3-405b")
    whole = memory.device_memory(cfg.num_params(), cfg.layers, cfg.hidden, cfg.heads, cfg.vocab,
                                 batch=1, seq=seq, ffn_hidden=cfg.ffn_hidden, tp=tp, cp=cp,
                                 pp=pp, sequence_parallel=True, microbatches=m,
                                 attention="flash")
    in_flight = pipeline_parallel.activations_in_flight(pp, m)
    ours = axes.device_activation_bytes(1, seq, cfg.hidden, cfg.heads, cfg.layers, tp=tp, cp=cp, pp=pp,
                                 ffn_hidden=cfg.ffn_hidden, in_flight=in_flight)
    assert np.isclose(ours, whole["activations"], rtol=1e-12)


def test_cp_restores_the_short_context_activations():
    args = (1, 4096, 16, 2, 2)
    assert np.isclose(axes.device_activation_bytes(*args, cp=1),
                      axes.device_activation_bytes(1, 4096 * 16, 16, 2, 2, cp=16))
    assert axes.device_activation_bytes(*args, recompute="full") < axes.device_activation_bytes(*args)


def test_state_bytes_equal_the_memory_equation_for_a_dense_model():
    for stage in (0, 1, 2, 3):
        whole = memory.device_memory(70e9, 80, 8192, 64, 128256, batch=1, seq=8, tp=8, pp=4,
                                     dp=16, zero_stage=stage)
        assert np.isclose(axes.state_bytes(70e9, tp=8, pp=4, dp=16, zero_stage=stage),
                          whole.model_states)


def test_expert_state_splits_by_ep_and_replicates_over_expert_dp():
    # the expert share alone: Ψ/(t·p·e) parameters, ZeRO-1 over expert_dp ranks
    got = axes.state_bytes(0, 640e9, tp=2, pp=4, ep=8, dp=64, expert_dp=8, zero_stage=1)
    assert np.isclose(got, memory.zero_state_bytes(640e9 / 64, 8, 1))
    assert np.isclose(axes.expert_bytes(640e9, ep=8, tp=2, pp=4), 2 * 640e9 / 64)


def test_ring_blocks_add_up_to_the_all_gathered_kv():
    b, S, H, c, t = 2, 4096, 1024, 8, 4
    gathered = 2 * b * S * H / t * 2               # K and V of the whole sequence, t's heads
    assert np.isclose(c * sp_.ring_kv_step_bytes(b, S, H, c) / t, gathered)
    # forward keeps the blocks it received: c − 1 blocks forward, c − 1 of gradients back
    assert np.isclose(axes.cp_ring_bytes(b, S, H, c, tp=t, kv_saved=True),
                      2 * (c - 1) / c * gathered)
    # Megatron-Core: backward sends K and V around again beside dK, dV
    assert np.isclose(axes.cp_ring_bytes(b, S, H, c, tp=t), 3 * (c - 1) / c * gathered)


def test_tp_traffic_is_twice_chapter_17s_forward_count():
    t = axes.step_traffic(4096, 1, 1e9, batch=2, seq=2048, microbatches=1, tp=8, cp=4)
    assert np.isclose(t["tp"], 2 * sp_.megatron_sp_bytes(2, 2048 / 4, 4096, 8))
    assert np.isclose(t["tp"], tpf.layer_comm_bytes(2, 2048 / 4, 4096, 8))
    assert t["dp"] == 0 and t["ep"] == 0


def test_dp_traffic_is_the_ring_all_reduce_of_the_rank_gradient_buffer():
    t = axes.step_traffic(4096, 4, 1e9, batch=1, seq=2048, microbatches=2, tp=4, pp=2, dp=8)
    n = 1e9 / (4 * 2) * 2                             # Ψ/(tp·pp) gradients, 2 bytes each
    assert np.isclose(t["dp"], 2 * (8 - 1) / 8 * n)
    assert np.isclose(n, data_parallel.gradient_buffer_bytes(1e9, tp=4, pp=2, grad_bytes=2))


def test_ep_tokens_sent_is_the_uniform_dispatch_matrix_off_its_diagonal():
    E, ep, T, k = 64, 8, 2048, 2
    m = moe.dispatch_matrix(np.full(E, 1 / E), T, ep, k)
    assert np.isclose(m[0].sum() - m[0, 0], axes.ep_tokens_sent(T, k, ep))


def test_ep_tokens_sent_is_the_mean_of_random_top_k_routing():
    rng = np.random.default_rng(0)
    E, ep, T, k, trials = 16, 4, 64, 2, 4000
    choice = np.argsort(rng.random((trials, T, E)), axis=-1)[:, :, :k]   # k distinct experts
    sent = ((choice // (E // ep)) != 0).sum(axis=(1, 2))                  # rank 0's copies out
    se = sent.std() / np.sqrt(trials)
    assert abs(sent.mean() - axes.ep_tokens_sent(T, k, ep)) < 4 * se


def test_min_capacity_factor_is_the_smallest_without_drops():
    shares = [0.30, 0.05, 0.25, 0.10, 0.05, 0.10, 0.10, 0.05]
    grid = np.arange(1.0, 3.0, 0.001)
    # many tokens, so that C = ⌈c·T/E⌉'s rounding is below the grid's step
    first = next(c for c in grid if axes.dropped_tokens(shares, 100_000, c) == 0)
    assert abs(first - axes.min_capacity_factor(shares)) < 0.002
    assert axes.dropped_tokens(shares, 1000, 1.25) == 143 + 93       # C = 157 slots


def test_dp_growth_is_the_ratio_of_alpha_beta_times():
    n = 1e9
    t = lambda p, alpha, beta, alg: comm.allreduce_time(n, p, alpha, beta, alg)
    for alg in ("ring", "tree"):
        assert np.isclose(axes.dp_latency_growth(16, 64, alg),
                          t(64, 1e-5, 1e30, alg) / t(16, 1e-5, 1e30, alg))
    assert np.isclose(axes.dp_bandwidth_growth(16, 64), t(64, 0, 5e10, "ring") / t(16, 0, 5e10, "ring"))
    assert np.isclose(axes.dp_latency_growth(16, 64), 126 / 30)


def test_symbols_pass_through():
    b, S, H, c, t = sp.symbols("b S H c t", positive=True)
    assert axes.cp_ring_bytes(b, S, H, c, tp=t).free_symbols == {b, S, H, c, t}
    assert axes.params_per_device(sp.Symbol("D"), sp.Symbol("X"), tp=t, ep=c).free_symbols


def test_bad_values_are_refused_by_name():
    with pytest.raises(ValueError, match="cp"):
        axes.cp_ring_bytes(1, 8, 8, 0)
    with pytest.raises(ValueError, match="fractions"):
        axes.min_capacity_factor([0.5, 0.2])
    with pytest.raises(ValueError, match="recompute"):
        axes.device_activation_bytes(1, 8, 8, 1, 1, recompute="selective")
