"""dtbook.composition (chapter 24): each closed form against an independent count — the
schedule simulator, the per-collective formulas of chapters 14-15, the memory equation, the
source's FLOP formula in dtbook.runs, and sympy."""

import pytest
import sympy as sp

from dtbook import comm, composition, data_parallel, memory, models, runs, schedules
from dtbook import tensor_parallel as tpar


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 4), (8, 16)])
def test_step_time_is_the_simulated_1f1b_makespan(p, m):
    t_f, t_b = 1.0, 2.0
    sim = schedules.simulate("1f1b", p, m, t_forward=t_f, t_backward=t_b)
    assert composition.step_time(t_f + t_b, 0.0, p, m) == pytest.approx(sim.makespan)


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4)])
def test_step_time_is_the_simulated_interleaved_makespan(p, m, v):
    sim = schedules.simulate("interleaved-1f1b", p, m, virtual_stages=v, t_forward=1.0,
                             t_backward=2.0)
    assert composition.step_time(2.0, 1.0, p, m, virtual_stages=v) == pytest.approx(sim.makespan)


def test_step_time_adds_the_exposed_dp_share():
    base = composition.step_time(1.0, 0.5, 4, 8)
    assert composition.step_time(1.0, 0.5, 4, 8, t_dp=2.0, dp_exposed=0.25) == pytest.approx(base + 0.5)


def test_tp_buffers_match_chapter_15s_sent_bytes_per_layer():
    b, s, h, L, p, m, t = 2, 1024, 4096, 32, 4, 8, 8
    per_layer_sent = tpar.layer_comm_bytes(b, s, h, t)        # 4 ring all-reduces, sent bytes
    n_total = composition.tp_buffer_bytes_per_step(b, s, h, L, p, m)
    assert n_total == 4 * L / p * m * b * s * h * 2           # the buffers, as CommCounter sees
    assert n_total * 2 * (t - 1) / t == pytest.approx(per_layer_sent * L / p * m)
    assert composition.tp_calls_per_step(L, p, m) == 4 * L / p * m


def test_dp_time_is_chapter_14s_all_reduce_of_the_rank_share():
    psi, t, p, d, alpha, beta = 7e9, 8, 4, 16, 1e-6, 5e10
    sent = data_parallel.gradient_bytes_sent(psi / (t * p), d, grad_bytes=2)
    assert sent == pytest.approx(2 * (d - 1) / d * psi / (t * p) * 2)
    assert composition.dp_time(psi, t, p, d, alpha, beta) == pytest.approx(
        2 * (d - 1) * alpha + sent / beta)


def test_pp_bytes_are_two_messages_per_microbatch():
    assert composition.pp_bytes_per_boundary(1, 2048, 12288, 32) == 2 * 32 * 2048 * 12288 * 2


def test_model_states_equal_the_memory_equation():
    cfg = models.get("gpt3-175b")
    psi = cfg.num_params()
    for zero in (0, 1, 2, 3):
        whole = memory.device_memory(psi, cfg.layers, cfg.hidden, cfg.heads, cfg.vocab, batch=1,
                                     seq=2048, tp=8, pp=16, dp=8, zero_stage=zero,
                                     microbatches=32)
        assert composition.model_states_per_gpu(psi, 8, 16, 8, zero) == pytest.approx(whole.model_states)
        mine = composition.memory_per_gpu(psi, cfg.layers, cfg.hidden, cfg.heads, cfg.vocab,
                                          batch=1, seq=2048, tp=8, pp=16, dp=8,
                                          microbatches=32, zero_stage=zero)
        assert mine.total == pytest.approx(whole.total)


def test_megatron_flops_match_the_run_catalog_and_recompute_is_one_forward():
    for name in ("megatron-gpt3-175b", "mtnlg-530b"):
        run = runs.get(name)
        cfg = models.get(run.model)
        args = (run.global_batch, run.seq, cfg.layers, cfg.hidden, cfg.vocab)
        B, s, l, h, V = args                   # Narayanan et al. 2021's printed formula
        assert composition.megatron_step_flops(*args) == pytest.approx(
            96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h)))
        assert runs.source_flops_per_step(run) == composition.megatron_step_flops(*args)
        # Korthikanti et al. 2022's model FLOPs, without recompute
        assert composition.megatron_step_flops(*args, recompute=False) == pytest.approx(
            72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h)))
        extra = composition.megatron_step_flops(*args) - composition.megatron_step_flops(*args, recompute=False)
        one_forward = cfg.layers * tpar.layer_forward_flops(run.global_batch, run.seq, cfg.hidden)
        assert extra == pytest.approx(one_forward)


def test_interleaving_gain_breaks_even_where_the_idle_time_removed_equals_the_sends_added():
    p, m, v = 16, 32, 2
    # by hand: the 1F1B bubble is 15/47 of the step's work; two chunks halve the idle slots,
    # removing 15/94 of it, and add one more pass of sends: break-even at T_comm = 15/94·T_work
    assert composition.interleaving_gain(p, m, v, 1.0, 0.0) == pytest.approx(15 / 94)
    assert composition.interleaving_gain(p, m, v, 1.0, 15 / 94) == pytest.approx(0, abs=1e-15)
    assert composition.interleaving_gain(p, m, 1, 1.0, 5.0) == 0


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4)])
def test_step_time_charges_a_send_per_chunk_as_the_simulator_does(p, m, v):
    # a blocking send of t_s after every chunk's forward and backward lengthens each chunk
    # op by t_s: a stage's forward (v chunks) by v·t_s, its backward likewise
    t_f, t_b, t_s = 1.0, 2.0, 0.125
    sim = schedules.simulate("interleaved-1f1b", p, m, virtual_stages=v,
                             t_forward=t_f + v * t_s, t_backward=t_b + v * t_s)
    assert composition.step_time(t_f + t_b, 0.0, p, m, virtual_stages=v, t_p2p=2 * t_s) \
        == pytest.approx(sim.makespan)


def test_interleaving_gain_is_the_step_models_difference():
    tc, ttp, tpp, p, m, v = sp.symbols("T_c T_TP T_PP P m v", positive=True)
    t_work = (m + p - 1) * (tc + ttp)            # v = 1, without the sends
    got = composition.interleaving_gain(p, m, v, t_work, m * tpp)
    want = (composition.step_time(tc, ttp, p, m, t_p2p=tpp)
            - composition.step_time(tc, ttp, p, m, virtual_stages=v, t_p2p=tpp))
    assert sp.simplify(got - want) == 0


def test_latency_and_scaling_against_comm():
    assert composition.tp_latency(1024, 1e-6) == pytest.approx(2 * 1023 * 1e-6)


def test_symbolic_step_time():
    tc, ttp, p, m, v = sp.symbols("T_c T_TP P m v", positive=True)
    got = composition.step_time(tc, ttp, p, m, virtual_stages=v)
    assert sp.simplify(got - (m + (p - 1) / v) * (tc + ttp)) == 0


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="pp"):
        composition.step_time(1.0, 0.1, 0, 8)
    with pytest.raises(ValueError, match="t_p2p"):
        composition.step_time(1.0, 0.1, 4, 8, t_p2p=-1.0)
    with pytest.raises(ValueError, match="tp"):
        composition.megatron_rank_params(16, 2, 0)
