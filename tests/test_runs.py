"""dtbook.runs: the published-runs catalog is self-consistent where a source prints two figures."""

import dataclasses
import re

import pytest

from dtbook import hardware, models, runs
from dtbook.pipeline_parallel import stage_layers
from dtbook.units import TFLOP


def test_required_rows_and_lookup():
    assert {"megatron-gpt3-175b", "mtnlg-530b"} <= set(runs.names())
    assert runs.get("MTNLG-530B") is runs.get("mtnlg-530b")
    with pytest.raises(ValueError, match="megatron-gpt3-175b"):
        runs.get("no-such-run")


@pytest.mark.parametrize("name", runs.names())
def test_rows_are_valid(name):
    r = runs.get(name)
    models.get(r.model), hardware.get(r.gpu)
    assert r.tp * r.pp * r.dp * r.cp == r.gpus
    assert r.global_batch % r.dp == 0 and r.source
    assert runs.tokens_per_second(r) > 0


@pytest.mark.parametrize("name", [n for n in runs.names()
                                  if runs.get(n).step_time and (runs.get(n).tflops_per_gpu or runs.get(n).mfu)])
def test_two_printed_figures_agree_through_the_source_formula(name):
    # The step time and the TFLOP/s (or MFU) a table prints are two readings of one run: the
    # source's own FLOP formula must turn one into the other (to the printed rounding).
    r = runs.get(name)
    from_time = runs.tokens_per_second(r)
    from_rate = runs.tokens_per_second(dataclasses.replace(r, step_time=None))
    assert from_rate == pytest.approx(from_time, rel=0.01)


@pytest.mark.parametrize("name", [n for n in runs.names()
                                  if runs.get(n).tokens_per_gpu and runs.get(n).tflops_per_gpu])
def test_printed_tokens_and_tflops_agree_through_the_source_formula(name):
    # NeMo's tables print tokens/s per GPU and model TFLOP/s per GPU: the convention named in
    # the row (full or causal scores) must turn one into the other to the printed rounding.
    # A wrong convention misses by several per cent (the scores are 6-9% of these models'
    # FLOPs at these sequence lengths), so this also pins which one each table uses.
    r = runs.get(name)
    from_tokens = runs.tokens_per_second(r)
    from_rate = runs.tokens_per_second(dataclasses.replace(r, tokens_per_gpu=None))
    assert from_rate == pytest.approx(from_tokens, rel=0.002)
    other = "nemo-causal" if r.convention == "nemo-full" else "nemo-full"
    wrong = runs.tokens_per_second(dataclasses.replace(r, tokens_per_gpu=None, convention=other))
    assert abs(wrong / from_tokens - 1) > 0.01


def test_nemotron4_mfu_is_megatron_lms_2024_count():
    # The report prints an iteration time (8.0 s) and an MFU (41.0 %) for its last stage: only
    # Megatron-LM's own 2024 count (GQA, plain MLP, padded vocabulary) ties them, to 0.4 %
    r = runs.get("nemotron4-340b-6144")
    from_time = runs.tokens_per_second(r)
    assert from_time == 2304 * 4096 / 8.0
    for convention, close in (("megatron-2024", True), ("megatron-mfu", False), ("llama3", False)):
        other = dataclasses.replace(r, step_time=None, convention=convention)
        assert (abs(runs.tokens_per_second(other) / from_time - 1) < 0.005) == close, convention


def test_megatron_2024_count_of_mixtral_by_hand():
    # Megatron-LM's count for Mixtral 8x7B (h 4096, 32 layers, 32 heads of 128, 8 KV heads,
    # top-2 of 8 SwiGLU experts of 14336, vocabulary 32000), written out from its terms
    r = runs.get("mcore-mixtral-8x7b-64")
    h, s, l = 4096, 4096, 32
    per_seq = 12 * s * l * h * h * ((1 + 8 / 32 + s / h) + 14336 / h * 2 * 1.5
                                    + 32000 / (2 * l * h))
    assert runs.source_flops_per_step(r) == pytest.approx(256 * per_seq, rel=1e-12)
    assert runs.tokens_per_second(r) == pytest.approx(438e12 * 64 / per_seq * s, rel=1e-12)
    # the vocabulary term reads Megatron's padded vocabulary: a multiple of 128 x TP (32000 is
    # one at TP 1; at TP 8 it pads to 32768)
    tp8 = dataclasses.replace(r, tp=8, dp=2)
    padded = 12 * s * l * h * h * ((1 + 8 / 32 + s / h) + 14336 / h * 2 * 1.5
                                   + 32768 / (2 * l * h))
    assert runs.source_flops_per_step(tp8) == pytest.approx(256 * padded, rel=1e-12)


def test_bloom_row_matches_its_log_line():
    # The README's log line prints samples per second (19.561) beside the step time: the
    # global batch over the step time must give it back.
    r = runs.get("bloom-176b")
    assert r.global_batch / r.step_time == pytest.approx(19.561, abs=0.001)
    assert r.printed is None and r.tp * r.pp == 48       # "One replica is 48 GPUs"


def test_llama3_mfu_is_tflops_over_peak():
    for r in runs.runs():
        if r.convention == "llama3":
            assert r.tflops_per_gpu * TFLOP / r.peak == pytest.approx(r.mfu, abs=0.006)
            assert r.global_batch * r.seq == pytest.approx(16 * 2**20, rel=0.01)  # "16M" tokens


def test_bad_rows_are_refused():
    r = runs.get("mtnlg-530b")
    with pytest.raises(ValueError, match="gpus"):
        dataclasses.replace(r, dp=9)
    with pytest.raises(ValueError, match="recompute"):
        dataclasses.replace(r, recompute="some")


@pytest.mark.parametrize("name", runs.names())
def test_every_row_names_its_software(name):
    # the stack is read from the row's own source: the Megatron-LM papers and README,
    # Megatron-DeepSpeed for MT-NLG (Smith et al.) and BLOOM (BigScience's README), Meta's
    # stack for Llama 3, NVIDIA's NeMo / Megatron-Bridge tables
    r = runs.get(name)
    assert r.software in runs.SOFTWARE and r.software
    expect = ("megatron-deepspeed" if r.name.startswith(("mtnlg", "bloom")) else
              "llama3" if r.convention == "llama3" else
              "megatron-bridge" if r.name.startswith("bridge") else
              "torchtitan" if r.name.startswith("torchtitan") else
              "hai-llm" if r.name == "deepseek-v3-2048" else
              "nemo" if r.name.startswith(("nemo", "nemotron4")) else "megatron-lm")
    # (mcore-*: Megatron-Core's own README, run with Megatron-LM's pretrain script)
    assert r.software == expect
    if r.cluster:
        assert hardware.node(r.cluster).accelerator == r.gpu


def test_bloom_trained_on_its_own_cluster_and_bad_fields_are_refused():
    r = runs.get("bloom-176b")
    assert r.cluster == "jean-zay-a100" and hardware.node(r.cluster).nics == 4
    with pytest.raises(ValueError, match="software"):
        dataclasses.replace(r, software="megatron-lm-2025")
    with pytest.raises(ValueError, match="cluster"):
        dataclasses.replace(r, cluster="dgx-h100")


def test_sources_cite_documents_not_how_they_were_looked_up():
    # a source is cited or not mentioned: no account of the search behind a row
    for r in runs.runs():
        assert r.source.startswith(runs.reference(r)) and runs.reference(r) != r.source, r.name
        for words in ("not reached", "search tool", "second pass", "not stored", "curriculum"):
            assert words not in (r.source + " " + r.note).lower(), (r.name, words)
    # one document per paper, README or performance table
    assert len({runs.reference(r) for r in runs.runs()}) == 16


# Issue 22's rows: torchtitan's FSDP2 benchmark and Megatron-Bridge's MoE tables, added after
# the mechanisms that predict them (out of sample), by name so a row is not moved in silently
TORCHTITAN = {"torchtitan-llama3-8b-8", "torchtitan-llama3-8b-8-fp8", "torchtitan-llama3-8b-128",
              "torchtitan-llama3-8b-128-fp8", "torchtitan-llama3-8b-cp1",
              "torchtitan-llama3-8b-cp2", "torchtitan-llama3-8b-cp4", "torchtitan-llama3-8b-cp8",
              "torchtitan-llama3-70b-256", "torchtitan-llama3-405b-512-1f1b",
              "torchtitan-llama3-405b-512", "torchtitan-llama3-8b-32-h200",
              "torchtitan-llama3-8b-64-h200", "torchtitan-llama3-70b-tp8-bf16",
              "torchtitan-llama3-70b-tp8-fp8", "torchtitan-llama3-8b-tp8-bf16",
              "torchtitan-llama3-8b-tp8-fp8", "torchtitan-llama3-405b-cp1",
              "torchtitan-llama3-405b-cp2", "torchtitan-llama3-405b-cp4",
              "torchtitan-llama3-405b-cp8"}
BRIDGE_FSDP = {"bridge-llama3-8b-8", "bridge-llama3-8b-8-2509"}
BRIDGE_MOE = {"bridge-deepseek-v3-1024", "bridge-qwen3-235b-256", "bridge-qwen3-30b-16",
              "bridge-qwen3-30b-16-vp12", "bridge-qwen3-30b-16-ep16",
              "bridge-gpt-oss-120b-64", "bridge-gpt-oss-120b-64-2604"}
DEEPSEEK = {"deepseek-v3-2048"}
# dense Megatron rows added after those: the rest of NeMo 24.07's table and Nemotron-4 340B
DENSE_LATER = {"nemo-llama2-7b-8", "nemo-llama2-13b-16", "nemo-llama3-8b-8",
               "nemo-nemotron4-340b-128", "nemotron4-340b-6144"}
MIXTRAL = {"mcore-mixtral-8x7b-64"}         # Megatron-Core's MoE README, added with them


def test_out_of_sample_rows_are_issue_22s():
    assert ({r.name for r in runs.runs() if r.out_of_sample}
            == TORCHTITAN | BRIDGE_FSDP | BRIDGE_MOE | DEEPSEEK | DENSE_LATER | MIXTRAL)
    assert len([r for r in runs.runs() if not r.out_of_sample]) == 31


@pytest.mark.parametrize("name", sorted(TORCHTITAN))
def test_torchtitan_rows(name):
    # FSDP2 (ZeRO-3 sharding) on torchtitan, tokens/s and GiB as the table prints them
    r = runs.get(name)
    assert r.software == "torchtitan" and r.zero == 3 and r.convention == "tokens"
    on_h200 = name.endswith("-h200")          # Trainy's table: the same stack on 700 W H200s
    vanilla_tp = "-tp8-" in name              # the async-TP benchmark's vanilla-TP column
    document = runs._TT_H200 if on_h200 else runs._TT_TP if vanilla_tp else runs._TT
    assert runs.reference(r) == document
    assert ("'Results' table" if on_h200 else "'Vanilla TP tokens/sec' column" if vanilla_tp
            else "Table") in r.source
    assert r.gpu == ("h200" if on_h200 else "h100-sxm")
    assert r.fsdp_float8_all_gather == on_h200                   # only Trainy's command sets it
    assert r.tokens_per_gpu and runs.tokens_per_second(r) == r.tokens_per_gpu * r.gpus
    if vanilla_tp:                            # that table prints no memory
        assert r.memory_per_gpu is None and "GiB" not in r.source and r.tp == 8
    else:
        gib = r.memory_per_gpu / 2**30
        assert 40 < gib < 85 and f"{gib} GiB" in r.source      # the printed reading, in GiB
    assert r.sequence_parallel == (r.tp > 1)                     # torchtitan's TP plan
    assert {"tp", "pp", "dp", "cp", "zero", "recompute"} <= r.printed
    if r.cp == 1 and r.pp == 1:       # Tables 1, 3, 4: global batch = FSDP degree x local batch
        assert r.global_batch == r.dp * r.micro_batch
    if name.endswith("1f1b"):         # local batch 32 in 8 micro-batches (one per stage)
        assert r.micro_batch * r.pp == r.global_batch // r.dp == 32
    with pytest.raises(ValueError, match="tokens"):
        runs.source_flops_per_step(r)


@pytest.mark.parametrize("name", sorted(BRIDGE_FSDP))
def test_bridge_fsdp_rows(name):
    # Megatron-FSDP over one DGX H100: the table's FSDP 8 is ZeRO-3 over all eight GPUs, and
    # the benchmark script turns gradient-accumulation fusion off whenever FSDP is on
    r = runs.get(name)
    assert r.software == "megatron-bridge" and runs.reference(r) == runs._BRIDGE_DENSE
    assert (r.gpus, r.dp, r.tp, r.pp, r.zero) == (8, 8, 1, 1, 3) and "FSDP 8" in r.source
    assert r.gradient_accumulation_fusion is False and "zero" in r.printed
    assert r.global_batch // (r.dp * r.micro_batch) == 16 and "GA 16" in r.source


@pytest.mark.parametrize("name", sorted(BRIDGE_MOE))
def test_bridge_moe_rows(name):
    r = runs.get(name)
    cfg = models.get(r.model)
    assert cfg.is_moe and cfg.experts % r.ep == 0 and r.seq == 4096
    assert r.software == "megatron-bridge" and runs.reference(r) == runs._BRIDGE_MOE
    assert r.dp * r.tp * r.pp == r.gpus and r.global_batch % (r.dp * r.micro_batch) == 0
    assert r.printed == {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch"}
    assert f"{r.tokens_per_gpu:,} tokens/s/GPU" in r.source


def test_bridge_moe_ga_column_against_the_rows_own_layout():
    # GA (micro-batches per pipeline) is GBS / (MBS x DP), DP = GPUs / (TP x PP x CP): the
    # rows whose table prints GA agree with it, except DGX-H100 GPT-OSS 120B (25.11), printed
    # GA 2 where its own GBS 512, MBS 4 and PP 4 give 8; the note says so from the same data
    seen = {}
    for name in sorted(BRIDGE_MOE):
        r = runs.get(name)
        printed = re.search(r", GA (\d+):", r.source)
        if printed is None:
            continue
        dp = r.gpus // (r.tp * r.pp * r.cp)
        assert dp == r.dp
        seen[name] = (int(printed[1]), r.global_batch / (r.micro_batch * dp))
    no_ga = {"bridge-gpt-oss-120b-64-2604", "bridge-qwen3-30b-16-vp12",   # the 26.x tables
             "bridge-qwen3-30b-16-ep16"}                                  # print no GA column
    assert set(seen) == BRIDGE_MOE - no_ga
    odd = runs.get("bridge-gpt-oss-120b-64")
    assert seen.pop(odd.name) == (2, 8) and odd.pp == 4
    assert "prints GA 2 for this row" in odd.note and "= 8 micro-batches per pipeline" in odd.note
    assert all(ga == micro for ga, micro in seen.values()), seen
    assert not any("prints GA" in runs.get(name).note for name in seen)


@pytest.mark.parametrize("name, tflops", [("bridge-qwen3-235b-256", 233),
                                          ("bridge-qwen3-30b-16", 121)])
def test_bridge_moe_tflops_are_the_causal_model_flops(name, tflops):
    # the page's two figures for the Qwen3 rows agree through dtbook's own count (causal
    # attention, no recompute): an independent check that the row was copied right
    from dtbook import flops
    r = runs.get(name)
    f = flops.transformer_matmul_flops(models.get(r.model), 1, r.seq)
    per_token = 3 * (f["linear_forward"] + f["attention_forward"] / 2) / r.seq
    assert r.tokens_per_gpu * per_token / TFLOP == pytest.approx(tflops, rel=0.01)
    assert f"{tflops} model TFLOP/s/GPU" in r.source


def test_deepseek_v3_row_is_its_reports_gpu_hours():
    # 180K H800 GPU-hours per trillion tokens, turned into tokens/s per GPU; DeepSeek's own
    # dispatch (once per node, node-limited) and DualPipe's overlap, on its H800 nodes
    r = runs.get("deepseek-v3-2048")
    assert r.gpu == "h800" and r.cluster == "hgx-h800" and r.gpus == 2048
    assert r.tp * r.pp * r.dp == 2048 and (r.pp, r.ep) == (16, 64)
    # the report's other figure: a trillion tokens in "3.7 days on our cluster with 2048 H800"
    assert 1e12 / (r.tokens_per_gpu * r.gpus) / 86400 == pytest.approx(3.7, abs=0.05)
    assert (r.moe_dispatcher, r.moe_comm_overlap) == ("deepep", True)
    assert "180K H800 GPU hours" in r.source and runs.reference(r).endswith("arXiv:2412.19437")


@pytest.mark.parametrize("name", sorted(BRIDGE_MOE))
def test_bridge_moe_rows_fold_the_experts(name):
    # the benchmark scripts' perf_matrix sets etp 1; DeepSeek-V3's H100 script also DeepEP and
    # the 1F1B all-to-all overlap, without overlapping the gradient reduction
    r = runs.get(name)
    assert r.expert_tensor_parallel == 1
    ds = name == "bridge-deepseek-v3-1024"
    assert (r.moe_dispatcher, r.moe_comm_overlap) == (("deepep", True) if ds else ("alltoall", False))
    assert r.overlap_grad_reduce is (False if ds else None)


def test_torchtitan_pipeline_rows_use_its_defaults():
    # Table 5 prints neither micro-batches nor stages per rank: torchtitan's defaults at its
    # benchmark commit are pp micro-batches (pipelining_utils.build_pipeline_schedule) and,
    # for a looped schedule, two stages per rank (pipelining_utils.generate_split_points)
    for name, stages_per_rank in (("torchtitan-llama3-405b-512-1f1b", 1),
                                  ("torchtitan-llama3-405b-512", 2)):
        r = runs.get(name)
        assert r.global_batch // r.dp // r.micro_batch == r.pp, name
        assert r.vpp == stages_per_rank and {"micro_batch", "vpp"} <= r.printed, name
    # the split the note states, as generate_split_points makes it: base = layers // stages
    # on the first stage, one more on each middle stage while the remainder lasts
    r = runs.get("torchtitan-llama3-405b-512")
    layers, stages = models.get(r.model).layers, r.pp * r.vpp
    base, extra = divmod(layers, stages)
    split = [base] + [base + 1 if i < extra else base for i in range(stages - 2)]
    split.append(layers - sum(split))
    assert split == stage_layers(layers, stages)            # what the planner splits it as
    first, middle = split[0], set(split[1:-1])
    assert split[-1] == first and len(middle) == 1
    assert (f"{layers} layers over {stages} stages, {first} on the first and last, "
            f"{middle.pop()} on the others") in r.source
