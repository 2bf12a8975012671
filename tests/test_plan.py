"""dtbook.plan: each term against an independent computation, the search against brute force,
the API's contract, and the validation band over dtbook.runs (chapter 27)."""

import subprocess
import sys

import numpy as np
import pytest

from dtbook import comm, hardware, memory, models, pipeline_parallel, plan, runs, schedules
from dtbook.plan.model import RECOMPUTE
from dtbook.plan.gemm import matmul_time
from dtbook.plan.terms import elementwise_values, links_for, protocol_efficiency
from dtbook.plan.validate import (fuses_grad_accumulation, overlaps_grad_reduce, zero_stages_of,
                                  pipeline_engine_of, run_keywords)

BASE = dict(gpus=64, gpu="h100-sxm", tp=8, pp=2, dp=4, global_batch=64, seq=4096)


def test_bubble_term_equals_the_schedule_formula_and_the_simulator():
    e = plan.estimate("llama3-8b", **{**BASE, "vpp": 2, "global_batch": 32})
    m = 32 // 4
    # one micro-batch's time from the other terms, which are m of them each
    b = e.breakdown
    work = sum(b[k] for k in ("compute", "recompute", "elementwise", "grad_accum", "tp_comm",
                              "cp_comm", "ep_comm", "pp_comm"))
    frac = pipeline_parallel.interleaved_bubble_fraction(2, m, 2)
    assert b["bubble"] > 0 and b["bubble"] / (b["bubble"] + work) == pytest.approx(frac)
    sim = schedules.simulate("1f1b", 4, 8)
    assert pipeline_parallel.bubble_fraction(4, 8) == pytest.approx(sim.bubble_fraction)


def test_matmul_time_roofline_and_waves():
    c = hardware.matmul_ceiling("h100-sxm")
    big = 8192
    tiles = (big // 128) ** 2  # 4096 tiles on 132 SMs: 32 waves where 31.03 would do
    assert matmul_time(big, big, big) == pytest.approx(2 * big**3 / c.flops * np.ceil(tiles / 132) / (tiles / 132))
    # a GEMV is memory-bound: bytes over HBM bandwidth
    assert matmul_time(1, big, big) == pytest.approx(2 * (big + big * big + big) / hardware.memory_ceiling("h100-sxm").triad)
    # 12 x 12 = 144 tiles need two waves on 132 SMs: 2 / (144 / 132) times the ideal time
    k = 8192
    ideal = 2 * 1536 * 1536 * k / c.flops
    assert matmul_time(1536, 1536, k) == pytest.approx(ideal * 2 / (144 / 132))


def test_tp_term_is_the_comm_formula():
    e = plan.estimate("llama3-8b", **BASE, micro_batch=1)
    m, layers = 64 // 4, 32 // 2
    n = 4096 * 4096 * 2
    link = hardware.get("nvlink4")
    beta = link.beta * protocol_efficiency(link)   # NCCL's ring reaches this fraction
    expect = m * layers * 4 * comm.allreduce_time(n, 8, link.alpha, beta)
    assert e.breakdown["tp_comm"] == pytest.approx(expect)


def test_memory_state_is_zero_state_bytes():
    cfg = models.get("llama3-8b")
    for zero in (0, 1, 2, 3):
        e = plan.estimate(cfg, **BASE, zero=zero)
        psi = cfg.num_params() / (8 * 2)
        # BF16 parameters with Megatron's FP32 gradient buffer: 18 bytes, 6 + 12/d (W3, issue 22)
        assert e.breakdown["memory_state"] == pytest.approx(
            memory.zero_state_bytes(psi, 4, zero, grad_bytes=4))


def test_flops_convention_is_model_flops_with_causal_attention():
    cfg = models.get("llama3-8b")
    e = plan.estimate(cfg, **BASE)
    dense = 6 * (cfg.num_params() - cfg.num_embedding_params()) * 64 * 4096
    attention = 6 * 2 * cfg.heads * cfg.head_dim * 4096**2 * cfg.layers * 64 / 2
    flops = e.tflops_per_gpu * 1e12 * e.step_time * 64
    assert flops == pytest.approx(dense + attention, rel=1e-4)  # norms are no matmul
    assert e.mfu == pytest.approx(e.tflops_per_gpu * 1e12 / hardware.get("h100-sxm").peak("bf16"))


def test_monotone_mechanisms():
    a = plan.estimate("llama3-70b", gpus=256, tp=8, pp=4, dp=8, global_batch=256, seq=8192)
    full = plan.estimate("llama3-70b", gpus=256, tp=8, pp=4, dp=8, global_batch=256, seq=8192,
                         recompute="full")
    assert full.step_time > a.step_time and full.memory_per_gpu < a.memory_per_gpu
    z3 = plan.estimate("llama3-70b", gpus=256, tp=8, pp=4, dp=8, global_batch=256, seq=8192, zero=3)
    assert z3.memory_per_gpu < a.memory_per_gpu


def test_search_equals_brute_force_over_configurations():
    kw = dict(gpus=32, global_batch=64, seq=2048)
    cands = plan.configurations("llama3-8b", **kw)
    assert cands and all(plan.estimate("llama3-8b", **kw, **c).fits for c in cands[:50])
    times = sorted(plan.estimate("llama3-8b", **kw, **c).step_time for c in cands)
    best = plan.search("llama3-8b", **kw, top=3)
    assert [b.step_time for b in best] == pytest.approx(times[:3])
    funnel = plan.funnel("llama3-8b", **kw)
    counts = list(funnel.values())
    assert counts == sorted(counts, reverse=True) and counts[-1] == len(cands)


def test_fixed_arguments_are_respected():
    best = plan.search("llama3-70b", gpus=1024, global_batch=1024, seq=8192, tp=8, zero=1, top=3)
    assert best and all(b.config["tp"] == 8 and b.config["zero"] == 1 for b in best)


def test_zero_fixed_to_the_stages_a_stack_offers():
    # a sequence of stages: the best over them is the best of the searches fixed to each one
    kw = dict(gpus=64, global_batch=128, seq=4096, tp=8)
    both = plan.search("llama3-70b", **kw, zero=(1, 0), top=5)
    assert both and {b.config["zero"] for b in both} <= {0, 1}
    each = [b for z in (0, 1) for b in plan.search("llama3-70b", **kw, zero=z, top=5)]
    assert both[0].step_time == pytest.approx(min(b.step_time for b in each))
    for bad in ((), (1, 4), (True,), "01"):
        with pytest.raises(ValueError, match="zero"):
            plan.search("llama3-70b", **kw, zero=bad)


def test_megatron_ddp_rows_choose_only_the_stages_megatron_has():
    # NeMo and Megatron-Bridge print 'FSDP 0' and no ZeRO stage: Megatron-Core's DDP with or
    # without the distributed optimizer (ZeRO 0 or 1), and on NeMo 1.x Apex's ZeRO-2
    # optimizer too; never parameter sharding
    names = [r.name for r in runs.runs() if r.software in ("nemo", "megatron-bridge")
             and "zero" not in runs.printed_fields(r)]
    assert len(names) >= 10
    for r in plan.validate(names):
        allowed = (0, 1) if r["software"] == "megatron-bridge" else (0, 1, 2)
        assert zero_stages_of(runs.get(r["name"])) == allowed
        assert r["chosen"]["zero"] in allowed, r["name"]
    bridge_fsdp = runs.get("bridge-llama3-8b-8")          # Megatron-FSDP prints its stage
    assert runs.printed_fields(bridge_fsdp)["zero"] == 3


@pytest.mark.parametrize("kwargs, word", [
    (dict(tp=8, pp=2, dp=5), "gpus"),
    (dict(tp=1, pp=40, dp=1, gpus=40), "pp"),   # 40 stages, 32 layers (5 now splits 6,7,7,7,5)
    (dict(tp=3, pp=2, dp=4, gpus=24), "tp"),
    (dict(tp=8, pp=2, dp=4, gpu="tpu-v9"), "tpu-v9"),
    (dict(tp=8, pp=2, dp=4, recompute="half"), "recompute"),
])
def test_bad_input_names_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        plan.estimate("llama3-8b", **{**BASE, **kwargs})
    with pytest.raises(ValueError, match="llama9"):
        plan.estimate("llama9", **BASE)


# The runs trained on Megatron-DeepSpeed, by name: the one exception to TARGET_WORST below,
# so a new row on that stack is not exempted without a look
DEEPSPEED_ROWS = {"mtnlg-530b", "mtnlg-530b-2800", "mtnlg-530b-3360", "bloom-176b"}


def test_validation_against_the_stated_target():
    # Reported and predicted tokens/s of every published run, each predicted as the planner's
    # best configuration over the fields its source did not print; no constant is fitted to
    # them. The one target is plan.TARGET_MEDIAN / TARGET_WORST, stated before and apart from
    # any result; the whole of it over every row is test_validation_target_over_every_row,
    # which fails today. Every bound here is that target or follows from it by a stated
    # rule, none from the last run:
    # - every row not trained on Megatron-DeepSpeed lies within TARGET_WORST;
    # - the H100 rows (Llama 3, NeMo, Megatron-Bridge) meet both bounds;
    # - the rows within TARGET_WORST have a median |error| at most halfway between the two
    #   bounds, (TARGET_MEDIAN + TARGET_WORST) / 2: the typical row nearer the median target
    #   than the worst-row limit. They do not meet TARGET_MEDIAN itself today (the strict
    #   xfail test_in_band_rows_meet_the_median_target says so, and turns red when they do);
    #   moving the A100 rows towards the limit fails this bound, as it fails no row bound;
    # - the Megatron-DeepSpeed rows (MT-NLG, BLOOM) are over-predicted (error > 0: their stack
    #   spent time outside the layer that the planner does not model; chapter 27's one-layer
    #   check, test_layer_against_korthikanti_table_4, puts the layer itself near the
    #   measurement) and by at most 2 * TARGET_WORST: the planner still accounts for
    #   1 / (1 + 2 * TARGET_WORST), two thirds, of their reported step time.
    # These bounds hold the rows the planner was built against (in sample). The rows added
    # after their mechanisms (issue 22's FSDP2 and MoE runs, out of sample) are held only by
    # the whole target, the strict xfail tests below, and are summarised apart (the next test).
    everything_rows = plan.validate()
    assert len(everything_rows) == len(runs.names())
    rows = [r for r in everything_rows if not r["out_of_sample"]]
    assert len(rows) == len([n for n in runs.names() if not runs.get(n).out_of_sample])
    assert all(r["fits"] for r in rows)  # a published layout ran, so it must fit
    deepspeed = {n for n in runs.names() if runs.get(n).software == "megatron-deepspeed"}
    assert deepspeed == DEEPSPEED_ROWS
    for r in rows:
        if r["name"] not in deepspeed:
            assert abs(r["error"]) <= plan.TARGET_WORST, (r["name"], r["error"])
        else:  # the planner leaves out time that stack spent: it can only be optimistic there
            assert 0 < r["error"] <= 2 * plan.TARGET_WORST, (r["name"], r["error"])
    h100 = plan.summary([r for r in rows if r["gpu"] == "h100-sxm"])
    assert h100["meets"], h100
    in_band = plan.summary([r for r in rows if abs(r["error"]) <= plan.TARGET_WORST])
    assert in_band["median"] <= (plan.TARGET_MEDIAN + plan.TARGET_WORST) / 2, in_band
    # summary() against a hand count on the whole table
    everything = plan.summary(rows)
    size = np.sort(np.abs([r["error"] for r in rows]))
    assert everything["median"] == pytest.approx(np.median(size))
    assert everything["mean"] == pytest.approx(np.mean(size))
    assert set(everything["outside"]) == {r["name"] for r in rows
                                          if abs(r["error"]) > plan.TARGET_WORST}
    assert set(everything["outside"]) <= deepspeed
    assert plan.summary(everything_rows)["in_sample"] == {
        k: v for k, v in everything.items() if k not in ("in_sample", "out_of_sample")}
    # memory: the rows that print a per-GPU reading (torchtitan's, the caching allocator's
    # peak reservation, max_reserved) never read below the bytes the planner counts, to the
    # reading's rounding
    read = [r for r in everything_rows if r["reported_memory"]]
    assert len(read) >= 15
    assert all(r["memory_per_gpu"] <= 1.01 * r["reported_memory"] for r in read), read


def test_summary_reports_out_of_sample_rows_apart():
    # summary() over every row gives the whole table and, apart, the rows the planner was
    # built against and those added after their mechanisms (dtbook.runs' out_of_sample)
    rows = plan.validate()
    s = plan.summary(rows)
    outside = [r for r in rows if r["out_of_sample"]]
    inside = [r for r in rows if not r["out_of_sample"]]
    assert outside and s["out_of_sample"]["count"] == len(outside)
    assert s["in_sample"]["count"] == len(inside) and s["count"] == len(rows)
    planned = [r for r in outside if r["error"] is not None]
    assert s["out_of_sample"]["median"] == pytest.approx(np.median([abs(r["error"]) for r in planned]))
    assert set(s["out_of_sample"]["unplanned"]) == {r["name"] for r in outside if r["error"] is None}
    assert set(s["outside"]) == set(s["in_sample"]["outside"]) | set(s["out_of_sample"]["outside"])
    for r in rows:          # a row the planner cannot plan says why, and has no error
        assert (r["error"] is None) == (r["predicted"] is None) == (r["failure"] is not None)
    # a hand-made table: the split by the flag, and an unplanned row never meets the target
    hand = [dict(name="a", error=0.05), dict(name="b", error=0.02, out_of_sample=True),
            dict(name="c", error=None, out_of_sample=True)]
    got = plan.summary(hand)
    assert got["in_sample"]["meets"] and not got["out_of_sample"]["meets"]
    assert got["out_of_sample"]["unplanned"] == ["c"] and got["median"] == pytest.approx(0.035)
    assert plan.summary(hand[:1])["out_of_sample"] is None


# strict: the day the planner meets the target these turn red, and the mark (and chapter 27's
# sentence saying it does not) must go; raises=AssertionError: an error elsewhere is no pass
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="the planner misses its stated target today (chapter 27 names the rows "
                          "outside TARGET_WORST and gives the median)")
def test_validation_target_over_every_row():
    # the median row within TARGET_MEDIAN and every row within TARGET_WORST, over every row,
    # dense and MoE, A100 and H100, in sample and out of sample (no row left unplanned)
    assert plan.summary(plan.validate())["meets"]


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="the in-sample rows miss TARGET_MEDIAN today, narrowly: every A100 row "
                          "is over-predicted (chapter 27)")
def test_in_sample_rows_meet_the_median_target():
    # over every in-sample row (a row leaving the band cannot lower this median)
    assert plan.summary(plan.validate())["in_sample"]["median"] <= plan.TARGET_MEDIAN


def test_summary_of_a_hand_made_table():
    rows = [dict(name="a", error=0.05), dict(name="b", error=-0.30), dict(name="c", error=0.12),
            dict(name="d", error=0.26)]
    got = plan.summary(rows)
    # |errors| 0.05, 0.12, 0.26, 0.30: median (0.12 + 0.26) / 2, worst -0.30
    assert got["median"] == pytest.approx(0.19) and got["mean"] == pytest.approx(0.1825)
    assert (got["worst"], got["worst_name"]) == (-0.30, "b")
    assert got["outside"] == ["b", "d"] and not got["meets"]
    assert plan.summary([dict(name="a", error=0.1)])["meets"]
    with pytest.raises(ValueError, match="rows"):
        plan.summary([])
    with pytest.raises(ValueError, match=r"rows\[1\] has no 'error'"):
        plan.summary([dict(name="a", error=0.1), dict(name="b")])
    with pytest.raises(ValueError, match="'name'"):
        plan.summary([dict(error=0.1)])


def test_validation_fixes_every_printed_field_and_chooses_the_rest():
    for r in plan.validate(["llama3-405b-16k", "megatron-weak-1t", "mtnlg-530b"]):
        run = runs.get(r["name"])
        assert r["printed"] == runs.printed_fields(run)
        assert all(r["config"][k] == v for k, v in r["printed"].items())
        assert set(r["chosen"]) == set(runs.LAYOUT_FIELDS) - set(r["printed"])
        # the choice is the best: estimate every feasible layout with the printed fields fixed
        kw = dict(gpus=run.gpus, gpu=run.gpu, global_batch=run.global_batch, seq=run.seq,
                  **run_keywords(run), **r["printed"])
        rates = [plan.estimate(run.model, **{**kw, **c}).tokens_per_second
                 for c in plan.configurations(run.model, **kw)]
        assert rates and r["predicted"] == pytest.approx(max(rates))


def test_protocol_efficiency_is_the_published_ring_busbw_over_line_rate():
    busbw = {b.link: b for b in hardware.published_busbw() if b.algorithm == "ring"}
    nv = busbw["nvlink4"]
    nv_eff = 0.5 * (nv.busbw_low + nv.busbw_high) / hardware.get("nvlink4").beta
    assert protocol_efficiency(hardware.get("nvlink4")) == pytest.approx(nv_eff)
    # the A100's NVSwitch has its own measurement (Azure ND A100 v4, about 0.77 of 300 GB/s)
    a100 = busbw["nvlink3"]
    assert protocol_efficiency(hardware.get("nvlink3")) == pytest.approx(
        0.5 * (a100.busbw_low + a100.busbw_high) / hardware.get("nvlink3").beta)
    # a link without a measurement takes its kind's figure
    assert protocol_efficiency(hardware.get("nvlink5")) == pytest.approx(nv_eff)
    ib = busbw["ib-ndr400"]
    assert protocol_efficiency(hardware.get("ib-hdr200")) == pytest.approx(
        (ib.busbw_low + ib.busbw_high) / 2 / 50e9)


def test_elementwise_values_count_each_op_by_hand():
    cfg = models.get("gpt3-175b")   # GELU, learned positions
    h, f, T = cfg.hidden, cfg.ffn_hidden, 2048
    fwd, bwd = elementwise_values(cfg, T, 2048, tp=8, sp=0)
    # norms 2 x (h in, h out), GELU f/8 in and out, residuals 2 x (2h in, h out)
    assert fwd == pytest.approx(T * (4 * h + 2 * f / 8 + 6 * h))
    assert bwd == pytest.approx(T * (6 * h + 3 * f / 8 + 4 * h))
    ufwd, ubwd = elementwise_values(cfg, T, 2048, tp=8, sp=0, attention="unfused")
    assert ufwd - fwd == pytest.approx(4.5 * 12 * 2048 * 2048)   # 96/8 heads, one sequence
    # sequence parallelism splits the h-wide ops over TP
    sfwd, _ = elementwise_values(cfg, T, 2048, tp=8, sp=1)
    assert sfwd == pytest.approx(T * (10 * h / 8 + 2 * f / 8))


def test_unfused_attention_is_slower_than_flash():
    kw = dict(gpus=64, tp=8, pp=8, dp=1, global_batch=64, seq=2048, gpu="a100-80gb", recompute="full")
    flash = plan.estimate("gpt3-175b", **kw)
    unfused = plan.estimate("gpt3-175b", **kw, attention="unfused")
    assert unfused.step_time > flash.step_time and unfused.config["attention"] == "unfused"
    with pytest.raises(ValueError, match="attention"):
        plan.estimate("gpt3-175b", **kw, attention="sparse")


def test_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dtbook", "plan", "llama3-70b", "--gpus", "1024",
                          "--batch", "1024", "--seq", "8192", "--top", "3"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 4
    bad = subprocess.run([sys.executable, "-m", "dtbook", "plan", "nope", "--gpus", "8",
                          "--batch", "8", "--seq", "8"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "llama3-70b" in bad.stderr


def test_flash_attention_core_runs_at_the_kernel_figures():
    # one stage, no TP: the compute term is every GEMM (backward twice forward) plus the
    # attention core at FlashAttention-2's forward and backward rates (backward 2.5 x FLOPs)
    cfg = models.get("llama3-8b")
    kw = dict(gpus=8, tp=1, pp=1, dp=8, global_batch=16, seq=4096, zero=1)
    e = plan.estimate(cfg, **kw)
    s, h, hd, H, KV, f = 4096, cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.ffn_hidden
    gemms = (matmul_time(s, (H + 2 * KV) * hd, h) + matmul_time(s, h, H * hd)
             + matmul_time(s, 2 * f, h) + matmul_time(s, h, f))
    core_flops = 2 * s * s * hd * H                       # causal: half of 4 s^2 hd per head
    k = hardware.attention_kernel("h100-sxm")
    core = core_flops / k.forward + 2.5 * core_flops / k.backward
    per_mb = cfg.layers * (3 * gemms + core) + 3 * matmul_time(s, cfg.vocab, h)
    assert e.breakdown["compute"] == pytest.approx(2 * per_mb)    # 2 micro-batches per rank


def test_pipeline_sends_across_nodes_use_scatter_gather():
    # TP 8 fills a node, so every stage boundary crosses InfiniBand: without SP each TP rank
    # sends 1/8 of the activation over its own NIC and the receivers all-gather it on NVLink
    kw = dict(gpus=32, gpu="a100-80gb", tp=8, pp=4, dp=1, global_batch=8, seq=2048)
    e = plan.estimate("gpt3-175b", **kw, sequence_parallel=False)
    up, ib = hardware.get("nvlink3"), hardware.get("ib-hdr200")
    n = 2048 * 12288 * 2
    t = (ib.alpha + n / 8 / (ib.beta * protocol_efficiency(ib))
         + comm.allgather_time(n, 8, up.alpha, up.beta * protocol_efficiency(up)))
    assert e.breakdown["pp_comm"] == pytest.approx(8 * 2 * t)      # 8 micro-batches, 2 sends each
    sp = plan.estimate("gpt3-175b", **kw, sequence_parallel=True)   # already split: no gather
    assert sp.breakdown["pp_comm"] == pytest.approx(8 * 2 * (ib.alpha + n / 8 / (ib.beta * protocol_efficiency(ib))))


def test_fp8_runs_the_linear_gemms_at_the_fp8_ceiling():
    kw = dict(gpus=8, tp=1, pp=1, dp=8, global_batch=8, seq=4096)
    bf16 = plan.estimate("llama3-8b", **kw)
    fp8 = plan.estimate("llama3-8b", **kw, dtype="fp8")
    cfg = models.get("llama3-8b")
    s, h, f = 4096, cfg.hidden, cfg.ffn_hidden
    shapes = [(s, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, h), (s, h, cfg.heads * cfg.head_dim),
              (s, 2 * f, h), (s, h, f)]
    saved = sum(matmul_time(*x) - matmul_time(*x, dtype="fp8") for x in shapes)
    assert bf16.breakdown["compute"] - fp8.breakdown["compute"] == pytest.approx(3 * cfg.layers * saved)
    assert fp8.mfu == pytest.approx(fp8.tflops_per_gpu * 1e12 / hardware.get("h100-sxm").peak("fp8"))


def test_gradients_reduce_in_fp32_unless_fp16_and_the_optimizer_reads_its_bytes():
    # A100 runs BF16 and FP16 at the same rate, so only the DP bytes differ: FP32 gradients
    # for BF16 (Megatron-LM, Llama 3), FP16 for FP16. The reduction is mostly exposed here.
    cfg = models.get("llama3-8b")
    kw = dict(gpus=32, gpu="a100-80gb", tp=8, pp=1, dp=4, global_batch=4, seq=4096, zero=0)
    bf16 = plan.estimate(cfg, **kw, dtype="bf16")
    fp16 = plan.estimate(cfg, **kw, dtype="fp16")
    psi = cfg.num_params() / 8
    ib = hardware.get("ib-hdr200")
    beta = ib.beta * protocol_efficiency(ib)
    assert bf16.breakdown["dp_comm"] - fp16.breakdown["dp_comm"] == pytest.approx(
        comm.allreduce_time(4 * psi, 4, ib.alpha, beta) - comm.allreduce_time(2 * psi, 4, ib.alpha, beta))
    # Adam 30 B + the 16-bit copy's read of the master 4 B (Megatron's separate
    # _copy_main_params_to_model_params) + norm 4 B per local parameter (ZeRO-1 shards over 4),
    # zeroing 4 B per parameter
    z1 = plan.estimate(cfg, **{**kw, "zero": 1})
    hbm = hardware.memory_ceiling("a100-80gb").triad
    assert z1.breakdown["optimizer"] == pytest.approx((38 * psi / 4 + 4 * psi) / hbm)


def test_gradient_reduction_after_the_pipeline_is_all_exposed():
    kw = dict(gpus=256, gpu="a100-80gb", tp=8, pp=1, dp=32, global_batch=1024, seq=2048,
              zero=0, micro_batch=8, recompute="full", dtype="fp16", attention="unfused",
              sequence_parallel=False)
    late = plan.estimate("megatron-18b", **kw, overlap_grad_reduce=False)
    ib = hardware.get("ib-hdr200")
    psi = models.get("megatron-18b").num_params() / 8
    full = comm.allreduce_time(2 * psi, 32, ib.alpha, ib.beta * protocol_efficiency(ib))
    assert late.breakdown["dp_comm"] == pytest.approx(full)           # FP16 gradients, all exposed
    early = plan.estimate("megatron-18b", **kw)
    assert early.breakdown["dp_comm"] < 0.1 * full                    # hidden under the last backward
    # validate() takes the software's rule: the 2021 Megatron rows reduce after the pipeline
    assert not overlaps_grad_reduce(runs.get("megatron-weak-18b"))
    assert overlaps_grad_reduce(runs.get("llama3-405b-16k"))
    assert plan.search("megatron-18b", gpus=256, gpu="a100-80gb", global_batch=1024, seq=2048,
                       top=1, overlap_grad_reduce=False)[0].config["overlap_grad_reduce"] is False


def test_public_formulas_check_what_the_planner_skips():
    # matmul_time checks its arguments (the planner's vectorised path, _matmul_time, skips them)
    for bad in (dict(m=None), dict(n=float("nan")), dict(k=0)):
        args = dict(dict(m=64, n=64, k=64), **bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            matmul_time(**args)


def test_unfused_gradient_accumulation_adds_its_bytes_every_micro_batch():
    # Without fusion each micro-batch's 16-bit weight gradients are added into the FP32
    # buffer (read 2, read 4, write 4 bytes per parameter on the GPU), in FP16 (2 + 2 + 2)
    # for FP16 runs; every micro-batch of the pipeline pays it, the bubble's included.
    cfg = models.get("gpt3-175b")
    kw = dict(gpus=768, gpu="a100-80gb", tp=8, pp=12, dp=8, global_batch=512, seq=2048,
              recompute="full", attention="unfused", sequence_parallel=False)
    hbm = hardware.memory_ceiling("a100-80gb").triad
    psi = cfg.num_params() / (8 * 12)
    m, slots = 512 / 8, 512 / 8 + 11         # micro-batches; micro-batch times with the bubble
    for dtype, nbytes in (("bf16", 10), ("fp16", 6)):
        fused = plan.estimate(cfg, **kw, dtype=dtype)
        unfused = plan.estimate(cfg, **kw, dtype=dtype, gradient_accumulation_fusion=False)
        add = psi * nbytes / hbm
        assert fused.breakdown["grad_accum"] == 0
        assert unfused.breakdown["grad_accum"] == pytest.approx(m * add)
        assert unfused.step_time - fused.step_time == pytest.approx(slots * add)
    # validate() dates the software: 2021-era Megatron-LM and Megatron-DeepSpeed unfused;
    # Korthikanti et al. 2022 (sequence parallelism) and the FlashAttention era fused
    assert not fuses_grad_accumulation(runs.get("megatron-weak-18b"))
    assert not fuses_grad_accumulation(runs.get("bloom-176b"))
    assert fuses_grad_accumulation(runs.get("korthikanti-175b"))
    assert fuses_grad_accumulation(runs.get("nemo-llama3-70b-64"))
    assert plan.search("gpt3-175b", top=1, **{k: v for k, v in kw.items() if k not in ("tp", "pp", "dp")},
                       gradient_accumulation_fusion=False)[0].config[
        "gradient_accumulation_fusion"] is False


def test_deepspeed_pipeline_engine_blocks_on_four_transfers_per_micro_batch():
    # DeepSpeed's TrainSchedule: RecvActivation + SendGrad (forward step), SendActivation +
    # RecvGrad (backward step), four blocking p2p calls; Megatron pairs them into two. Both
    # split the activation over TP (DeepSpeed's PartitionedTensor), so each transfer is the same.
    kw = dict(gpus=64, gpu="a100-80gb", tp=8, pp=8, dp=1, global_batch=16, seq=2048,
              recompute="full", attention="unfused", sequence_parallel=False)
    mega = plan.estimate("gpt3-175b", **kw)
    ds = plan.estimate("gpt3-175b", **kw, pipeline_engine="deepspeed")
    assert ds.breakdown["pp_comm"] == pytest.approx(2 * mega.breakdown["pp_comm"])
    assert ds.config["pipeline_engine"] == "deepspeed" and "pipeline_engine" not in mega.config
    with pytest.raises(ValueError, match="vpp"):
        plan.estimate("gpt3-175b", **{**kw, "vpp": 2}, pipeline_engine="deepspeed")
    with pytest.raises(ValueError, match="pipeline_engine"):
        plan.estimate("gpt3-175b", **kw, pipeline_engine="gpipe")
    best = plan.search("gpt3-175b", gpus=64, gpu="a100-80gb", global_batch=64, seq=2048, top=3,
                       pipeline_engine="deepspeed")
    assert best and all(b.config["vpp"] == 1 for b in best)
    # validate() reads the stack from the row: MT-NLG and BLOOM ran Megatron-DeepSpeed
    assert pipeline_engine_of(runs.get("mtnlg-530b")) == "deepspeed"
    assert pipeline_engine_of(runs.get("bloom-176b")) == "deepspeed"
    assert pipeline_engine_of(runs.get("megatron-530b-2240")) == "megatron"
    assert not overlaps_grad_reduce(runs.get("mtnlg-530b"))
    assert not fuses_grad_accumulation(runs.get("mtnlg-530b"))


def test_a_named_node_sets_the_scale_out_link_shared_by_its_gpus():
    # Jean Zay: 4 Omni-Path ports (12.5 GB/s each way) for 8 GPUs, half a port per GPU; no
    # NCCL measurement on Omni-Path, so no protocol efficiency (1)
    up, out = links_for("a100-80gb", "jean-zay-a100")
    assert up is hardware.get("nvlink3") and out.beta == pytest.approx(12.5e9 * 4 / 8)
    assert protocol_efficiency(out) == 1.0
    kw = dict(gpus=256, gpu="a100-80gb", tp=8, pp=1, dp=32, global_batch=256, seq=2048, zero=0,
              dtype="fp16", overlap_grad_reduce=False)
    jz = plan.estimate("megatron-18b", **kw, node="jean-zay-a100")
    psi = models.get("megatron-18b").num_params() / 8
    assert jz.breakdown["dp_comm"] == pytest.approx(comm.allreduce_time(2 * psi, 32, out.alpha, out.beta))
    assert jz.config["node"] == "jean-zay-a100"
    dgx = plan.estimate("megatron-18b", **kw)
    assert dgx.step_time < jz.step_time
    assert plan.estimate("megatron-18b", **kw, node="dgx-a100").step_time == dgx.step_time
    with pytest.raises(ValueError, match="dgx-h100"):
        plan.estimate("megatron-18b", **kw, node="dgx-h100")      # holds H100s, not A100s
    assert run_keywords(runs.get("bloom-176b"))["node"] == "jean-zay-a100"
    assert "node" not in run_keywords(runs.get("mtnlg-530b"))


def test_layer_time_is_the_layer_inside_the_estimate():
    # With one stage and one replica a step is the layers, the logits (forward and its two
    # backward GEMMs) and the optimizer: what is left of the step once those are taken away
    # must be layers x (forward + backward) of layer_time, for every recompute mode.
    for cfg, kw in ((models.get("megatron-22b"),
                     dict(gpu="a100-80gb", tp=8, micro_batch=4, seq=2048, attention="unfused")),
                    (models.get("llama3-8b"), dict(gpu="h100-sxm", tp=4, micro_batch=2, seq=4096))):
        for rc in RECOMPUTE:
            for sp in (False, True):
                layer = plan.layer_time(cfg, recompute=rc, sequence_parallel=sp, **kw)
                est = plan.estimate(cfg, gpus=kw["tp"], pp=1, dp=1, global_batch=kw["micro_batch"],
                                    zero=0, recompute=rc, sequence_parallel=sp, **kw)
                tokens = kw["micro_batch"] * kw["seq"]
                logits = 3 * matmul_time(tokens, cfg.vocab / kw["tp"], cfg.hidden,
                                                       gpu=kw["gpu"])
                rest = est.step_time - est.breakdown["optimizer"] - logits
                assert rest == pytest.approx(cfg.layers * (layer["forward"] + layer["backward"]))
                assert layer["forward"] > 0 and layer["backward"] > layer["forward"]
            # the split: full recompute re-runs the whole forward (its all-reduces included)
            # inside the backward, so it adds exactly one forward there
            none, full = (plan.layer_time(cfg, recompute=rc, sequence_parallel=sp, **kw)
                          for rc in ("none", "full"))
            assert full["forward"] == pytest.approx(none["forward"])
            assert full["backward"] - none["backward"] == pytest.approx(none["forward"])


def test_layer_against_korthikanti_table_4():
    # Table 4 of Korthikanti et al. prints forward, backward, their sum and the overhead
    # against the baseline: the stored forward and backward must give back the printed sums
    # and overheads (a check of the transcription).
    rows = {r.name.removeprefix("korthikanti-22b-layer-"): r for r in runs.layer_timings()}
    combined = dict(baseline=19.6, sp=19.0, full=27.2, selective=20.9, **{"selective-sp": 20.3})
    overhead = dict(sp=-3, full=39, selective=7, **{"selective-sp": 4})
    total = {tag: r.forward + r.backward for tag, r in rows.items()}
    for tag, printed in combined.items():
        assert 1e3 * total[tag] == pytest.approx(printed, abs=0.01)
    for tag, pct in overhead.items():
        assert round(100 * (total[tag] / total["baseline"] - 1)) == pct
    # Table 5's iteration of the same 22B configuration holds its 48 layers and more
    for tag, run in (("selective-sp", "korthikanti-22b"), ("full", "korthikanti-22b-full")):
        layer = rows[tag]
        assert 48 * (layer.forward + layer.backward) < runs.get(run).step_time
    # The planner's layer beside the measurement. Last run: every variant's layer is
    # faster than measured by +4 % to +8 % (throughput terms); with the datasheet HBM rate
    # and a flat all-reduce bandwidth it was +16 % to +20 % (chapter 27). The differences between
    # variants are what the mechanisms decide: sequence parallelism shortens the forward,
    # full recompute adds about one forward to the backward (measured 7.6 of 7.7 ms),
    # selective recompute a small part of that.
    got = {r["name"].removeprefix("korthikanti-22b-layer-"): r for r in plan.validate_layers()}
    assert set(got) == set(rows)
    assert all(abs(r["error"]) < 0.12 for r in got.values())
    pf = {k: r["predicted"]["forward"] for k, r in got.items()}
    pb = {k: r["predicted"]["backward"] for k, r in got.items()}
    assert pf["sp"] < pf["baseline"] and rows["sp"].forward < rows["baseline"].forward
    measured_ratio = (rows["full"].backward - rows["baseline"].backward) / rows["baseline"].forward
    predicted_ratio = (pb["full"] - pb["baseline"]) / pf["baseline"]
    assert predicted_ratio == pytest.approx(measured_ratio, rel=0.1)
    for where in (pb, {k: r.backward for k, r in rows.items()}):
        extra_sel, extra_full = where["selective"] - where["baseline"], where["full"] - where["baseline"]
        assert 0 < extra_sel < 0.25 * extra_full


def test_tp_all_reduce_in_an_a100_node_runs_at_the_published_busbw_for_its_size():
    # Azure's nccl-tests table for 8 A100s: the TP term of a layer is 2(p - 1)/p n / busbw,
    # busbw read at the per-step block n/p (the 8-GPU curve at n 8/p); on H100 (no published
    # ring curve) the alpha-beta ring with NCCL's protocol efficiency
    curve = hardware.busbw_curve("nvlink3")
    assert hardware.busbw_curve("nvlink4") is None
    # read by hand from Azure's table: 64 MiB 166.63 GB/s, 128 MiB 174.18, 8 GiB 231.58
    assert 166.63e9 < curve.at(4 * 2048 * 6144 * 2) < 174.18e9      # the 22B layer's 96 MiB
    assert curve.at(2**33) == pytest.approx(231.58e9) and curve.at(2**40) == curve.at(2**33)
    cfg = models.get("megatron-22b")
    for tp, sp in ((8, False), (4, True), (2, False)):
        layer = plan.layer_time(cfg, gpu="a100-80gb", tp=tp, micro_batch=4, seq=2048,
                                attention="unfused", sequence_parallel=sp)
        n = 4 * 2048 * cfg.hidden * 2
        t_ar = 2 * (tp - 1) / tp * n / curve.at(n * 8 / tp)
        no_tp = plan.layer_time(cfg, gpu="a100-80gb", tp=tp, micro_batch=4, seq=2048,
                                attention="unfused", sequence_parallel=sp,
                                gpus_per_node=1)          # TP off the node: not the curve
        assert layer["forward"] - 2 * t_ar == pytest.approx(
            no_tp["forward"] - 2 * comm.allreduce_time(n, tp, *_ib_effective()))


def _ib_effective():
    ib = links_for("a100-80gb")[1]
    return ib.alpha, ib.beta * protocol_efficiency(ib)


def test_gemm_model_against_published_cublaslt_shapes():
    # Azure's cuBLASLt tables (A100 FP16, H100 FP8), measured, not read by the model. Last
    # run: the large shapes (4096^3 and up) come out 1-12 % faster than measured; the small
    # and skinny ones (1024^3, 1024 x 2145 x 1024, 802816 x 192 x 768) 27-148 % faster, the
    # model's wave quantization and roofline leaving out what a small GEMM loses besides;
    # the A100's 2048^3 alone 5 % slower.
    for g in hardware.published_gemms():
        t = matmul_time(g.m, g.n, g.k, gpu=g.accelerator, dtype=g.dtype)
        ratio = 2 * g.m * g.n * g.k / t / g.flops
        assert ratio > 0.9, (g, ratio)                   # never much slower than measured
        if min(g.m, g.n, g.k) >= 4096:
            assert ratio < 1.15, (g, ratio)
