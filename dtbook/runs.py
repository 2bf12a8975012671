"""Published training runs: layouts and the throughput their authors reported, with sources.

Each :class:`PublishedRun` is one row of a paper's table: the model (a :mod:`dtbook.models`
name), the GPU (a :mod:`dtbook.hardware` name), the layout (tp, pp, dp, cp, ep, vpp,
micro-batch, global batch, sequence, recompute, sequence parallelism, ZeRO stage, dtype) and
the figure the source prints, as printed: TFLOP/s per GPU, MFU, step time, whichever the
table gives. Nothing here is fitted or corrected.

Sources count FLOPs differently, so a printed TFLOP/s is only comparable once its convention
is known. ``convention`` names it:

* ``"megatron-hfu"``: Narayanan et al. 2021, Sec. 5.1 / Appendix: ``96 B s l h^2 (1 + s/(6h)
  + V/(16 l h))`` per step, i.e. forward + backward + one full recomputed forward, attention
  counted as full (not causal), against the A100's 312 TFLOP/s;
* ``"megatron-mfu"``: Korthikanti et al. 2022, Sec. 6: ``72 B s l h^2 (1 + s/(6h) +
  V/(12 l h))`` per step (no recompute), attention full, peak 312 TFLOP/s;
* ``"llama3"``: Dubey et al. 2024 print TFLOP/s per GPU and BF16 MFU against 989 TFLOP/s
  without the formula; read here as model FLOPs without recompute (MFU's definition).
* ``"nemo-full"`` and ``"nemo-causal"``: NVIDIA's NeMo / Megatron-Bridge performance tables
  print tokens/s per GPU and "Model TFLOP/sec/GPU" from NeMo's FLOP formulas: 6 per weight
  per token in the blocks (``3 x 2`` for forward and backward), ``3 x 4 s h`` per token per
  layer for the scores, ``6 h V`` for the head, no recompute; NeMo 24.07 counts the scores
  in full, Megatron-Bridge (25.09 and later) halves them (causal). The printed tokens/s needs
  no convention; the convention only ties the two printed figures together.
* ``"megatron-2024"``: Megatron-LM's own count as its log prints it in 2024
  (``num_floating_point_operations``, megatron/training/training.py at df61e60, June 2024):
  ``12 B s l h^2 ((1 + g/a + s/h) q + f/h k r + V/(2 l h))`` per step, with ``q`` the query
  width over ``h``, ``g/a`` KV heads over heads, ``f`` the FFN width, ``k`` 1.5 for a gated
  MLP, ``r`` the experts a token is routed to (1 dense), ``V`` the padded vocabulary; no
  recompute, attention full. The Nemotron-4 340B report's MFU (989 TFLOP/s);
* ``"tokens"``: the source prints tokens/s and no FLOP figure this catalog uses (torchtitan's
  benchmark prints no MFU; Megatron-Bridge's MoE tables are compared on tokens/s, whose
  TFLOP/s is not NeMo's dense formula).

:func:`tokens_per_second` turns a row's printed figure back into what was measured, tokens
per second for the whole job, using the source's own formula; that is the quantity the
planner (chapter 27) predicts, and it needs no agreement on FLOP conventions.

``printed`` names the layout fields the source prints or states (in a table, in its text, or
fixed by the software it names: Megatron-LM in 2021 had neither ZeRO nor sequence
parallelism). The other layout fields (often micro-batch, interleaving, ZeRO stage) hold a
placeholder, named in ``note``; :func:`dtbook.plan.validate` does not use those placeholders
but lets the planner choose them (its own best choice, never fitted to the reported figure).
``printed=None`` means every layout field was printed.

A step time mixes everything; :class:`LayerTiming` rows hold what a source measured for one
transformer layer alone (forward and backward of one micro-batch on one GPU, its tensor-
parallel communication included), which :func:`dtbook.plan.validate.validate_layers` sets
beside the planner's layer. (Chapters 24 and 27.)
"""

from __future__ import annotations

from dataclasses import dataclass

from . import hardware, models
from .composition import megatron_step_flops
from .flops import attention_flops
from .recompute import RECOMPUTE
from .units import TFLOP

__all__ = ["PublishedRun", "get", "names", "runs", "tokens_per_second", "source_flops_per_step",
           "LAYOUT_FIELDS", "printed_fields", "reference", "SOFTWARE", "LayerTiming", "layer_timings",
           "InterruptionCause", "Interruptions", "LLAMA3_405B_INTERRUPTIONS"]

# The layout fields a source may or may not print (global batch, sequence, GPUs and the GPU
# type are always printed: a row without them is not admitted).
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
                 "sequence_parallel")

_CONVENTIONS = ("megatron-hfu", "megatron-mfu", "megatron-2024", "llama3", "nemo-full",
                "nemo-causal", "tokens")
# The training stacks the sources name: NVIDIA's Megatron-LM (Narayanan et al. 2021,
# Korthikanti et al. 2022, its README), Microsoft's and BigScience's Megatron-DeepSpeed
# (MT-NLG, BLOOM), Meta's own stack for Llama 3, NVIDIA NeMo and Megatron-Bridge (both on
# Megatron-Core), PyTorch's torchtitan (FSDP2, Liang et al. 2024), DeepSeek's in-house
# HAI-LLM (DeepSeek-V3).
SOFTWARE = ("", "megatron-lm", "megatron-deepspeed", "llama3", "nemo", "megatron-bridge",
            "torchtitan", "hai-llm")


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """One published training configuration and its reported throughput (chapters 24, 27).

    ``tflops_per_gpu`` (TFLOP/s, as printed), ``mfu`` (a fraction), ``step_time`` (s) and
    ``tokens_per_gpu`` (tokens/s per GPU) are ``None`` where the source does not print them; ``convention`` says how the source counts
    FLOPs (see the module notes), ``peak`` the per-GPU peak FLOP/s it divides by;
    ``attention`` is ``"unfused"`` for runs before FlashAttention (2022), whose Megatron-LM
    kernels materialise the score matrix, ``"flash"`` otherwise; ``printed`` the layout
    fields the source printed (module notes); ``software`` the training stack the source
    names (one of ``SOFTWARE``; ``""`` if unknown), from which :func:`dtbook.plan.validate`
    takes what the stack did (module notes of :mod:`dtbook.plan.validate`); ``cluster`` the
    :mod:`dtbook.hardware` node the run trained on where it is not the GPU's default node
    (``""``: the first node holding ``gpu``, DGX A100 or DGX H100);
    ``overlap_grad_reduce`` and ``gradient_accumulation_fusion`` what the source says its stack
    did, where it says it (``None``: :mod:`dtbook.plan.validate` dates the software instead);
    ``memory_per_gpu`` the memory the source printed (bytes; torchtitan's is the maximum over
    GPUs of the caching allocator's peak reservation, ``max_reserved``, which train.py at
    9dec370 logs), ``None`` where it prints none; ``out_of_sample`` marks rows added after the
    planner's mechanisms for them were written (issue 22: the FSDP2 and MoE rows), whose
    errors :func:`dtbook.plan.summary` reports apart from the rows the planner was built
    against. ``moe_dispatcher``, ``moe_comm_overlap`` and ``expert_tensor_parallel`` are the
    MoE settings the source's scripts set (:func:`dtbook.plan.estimate`'s keywords of the same
    names; ``None``: not set); ``fsdp_float8_all_gather`` whether a torchtitan run's command
    gathered its float8 weights in 1 byte (``estimate``'s keyword of that name).
    """

    name: str
    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    micro_batch: int = 1
    global_batch: int
    seq: int
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0
    dtype: str = "bf16"
    attention: str = "flash"
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    step_time: float | None = None
    tokens_per_gpu: float | None = None
    convention: str
    peak: float
    source: str
    note: str = ""
    printed: frozenset | None = None
    software: str = ""
    cluster: str = ""
    overlap_grad_reduce: bool | None = None
    gradient_accumulation_fusion: bool | None = None
    memory_per_gpu: float | None = None
    out_of_sample: bool = False
    moe_dispatcher: str = "alltoall"
    moe_comm_overlap: bool = False
    expert_tensor_parallel: int | None = None
    fsdp_float8_all_gather: bool = False

    def __post_init__(self) -> None:
        if self.printed is not None:
            object.__setattr__(self, "printed", frozenset(self.printed))
            unknown = self.printed - set(LAYOUT_FIELDS)
            if unknown:
                raise ValueError(f"{self.name}: printed names unknown fields {sorted(unknown)}; "
                                 f"layout fields: {LAYOUT_FIELDS}")
        models.get(self.model)
        hardware.get(self.gpu)
        if self.tp * self.pp * self.dp * self.cp != self.gpus:
            raise ValueError(f"{self.name}: tp*pp*dp*cp = {self.tp * self.pp * self.dp * self.cp} "
                             f"!= gpus = {self.gpus}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"{self.name}: recompute must be one of {RECOMPUTE}, "
                             f"got {self.recompute!r}")
        if self.attention not in ("flash", "unfused"):
            raise ValueError(f"{self.name}: attention must be flash or unfused")
        if self.software not in SOFTWARE:
            raise ValueError(f"{self.name}: software must be one of {SOFTWARE}")
        if self.cluster:
            if hardware.node(self.cluster).accelerator != self.gpu:
                raise ValueError(f"{self.name}: cluster {self.cluster!r} does not hold {self.gpu}")
        if self.convention not in _CONVENTIONS:
            raise ValueError(f"{self.name}: convention must be one of {_CONVENTIONS}")
        if (self.tflops_per_gpu is None and self.mfu is None and self.step_time is None
                and self.tokens_per_gpu is None):
            raise ValueError(f"{self.name}: a run needs at least one reported figure")


_A100 = 312 * TFLOP
_H100 = 989 * TFLOP          # what Llama 3's MFU divides by (430 TFLOP/s = 43%)

_N21 = ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters "
        "Using Megatron-LM', arXiv:2104.04473")
_K22 = ("Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer "
        "Models', arXiv:2205.05198")
_S22 = ("Smith et al. 2022, 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B, "
        "A Large-Scale Generative Language Model', arXiv:2201.11990")
_L24 = "Llama Team (Dubey et al.) 2024, 'The Llama 3 Herd of Models', arXiv:2407.21783"
_DS24 = "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437"

_README_GPT3 = ("NVIDIA Megatron-LM README.md, 'GPT-3 Example' (github.com/NVIDIA/Megatron-LM, "
                "from commit 152aab3, January 2021, until 2024)")
_N21_NOTE = ("Full activation recomputation (the paper's setting for these runs); DGX A100 80GB "
             "nodes. Megatron-LM 2021 had no ZeRO and no sequence parallelism (fixed by the "
             "software). Not printed: the micro-batch and whether the interleaved schedule was "
             "used (vpp): the placeholders 1 and 1 are not used by plan.validate, which lets the "
             "planner choose them.")
_BLOOM = ("BigScience, github.com/bigscience-workshop/bigscience train/tr11-176B-ml/README.md "
          "(commit e726b15) and tr11-176B-ml.slurm; Le Scao et al. 2022, 'BLOOM: A 176B-Parameter "
          "Open-Access Multilingual Language Model', arXiv:2211.05100")
_NEMO_2407 = ("NVIDIA NeMo 24.07 performance summary, github.com/NVIDIA/NeMo "
              "docs/source/performance/performance_summary.md (commit 070a0bb), 'Pretraining' "
              "table (FP8, DGX-H100)")
_BRIDGE_2602 = ("NVIDIA Megatron-Bridge performance summary, 26.02 NeMo container, "
                "github.com/NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md "
                "(commit 0a25f91), DGX-H100 FP8 rows")
_NEMO_NOTE = ("FP8 (per-tensor current scaling in 25.11+ tables; Transformer Engine) on DGX H100. "
              "The table prints GPUs, GBS, MBS, sequence, TP, PP, CP, VP (and, from 25.09, FSDP "
              "0: DDP-style data parallelism, with or without a distributed optimizer, which it "
              "does not say); recompute, sequence parallelism and the ZeRO stage are not "
              "printed, so plan.validate lets the planner choose them, the stage among those "
              "the stack has (plan.validate.zero_stages_of). Tokens/s per GPU is the figure "
              "compared; the printed Model TFLOP/sec/GPU is checked against it through NeMo's "
              "formula (tests/test_runs.py). The table prints no MFU: peak is the H100's dense "
              "FP8 figure, for reference only.")
_NEMO_PRINTED = frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch"})
_H100_FP8 = hardware.get("h100-sxm").peak("fp8")


def _nemo(name, model, gpus, tp, pp, cp, vpp, mb, batch, seq, tokens, tflops, source, convention,
          out_of_sample=False):
    return PublishedRun(
        name=name, model=model, gpu="h100-sxm", gpus=gpus, tp=tp, pp=pp, cp=cp,
        dp=gpus // (tp * pp * cp), vpp=vpp, micro_batch=mb, global_batch=batch, seq=seq,
        dtype="fp8", tokens_per_gpu=tokens, tflops_per_gpu=tflops, convention=convention,
        peak=_H100_FP8, note=_NEMO_NOTE, printed=_NEMO_PRINTED,
        software="megatron-bridge" if "Bridge" in source else "nemo", out_of_sample=out_of_sample,
        source=source + f" ({gpus} GPUs, GBS {batch}, MBS {mb}, sequence {seq}, TP {tp}, PP {pp}, "
                        f"CP {cp}, VP {vpp}: {tokens} tokens/s/GPU, {tflops} model TFLOP/s/GPU)")


# Rows added after the FSDP2 and MoE rows, with no mechanism written for them: out of sample.
# The rest of NeMo 24.07's pretraining table (its Nemotron-8B and Nemotron-22B rows are left
# out: the benchmark's vocabulary for them is not printed), Nemotron-4 340B's own run, and
# Megatron-Core's reference Mixtral 8x7B run.
_N4 = "NVIDIA 2024, 'Nemotron-4 340B Technical Report', arXiv:2406.11704"
_MCORE_MOE = ("NVIDIA Megatron-LM megatron/core/transformer/moe/README.md at 7f22e210 "
              "(github.com/NVIDIA/Megatron-LM, November 2024)")
_N4_LAUNCHER = ("NVIDIA NeMo-Megatron-Launcher launcher_scripts/conf/training/nemotron/"
                "nemotron_340b.yaml (github.com/NVIDIA/NeMo-Megatron-Launcher, 4550dc9)")


# Issue 22's rows, added after the FSDP2 and MoE mechanisms were written: out of sample.
_TT = ("torchtitan benchmark 'llama3_h100_202412_torchtitan.md' (github.com/pytorch/torchtitan "
       "benchmarks/, December 2024: torch 1963fc8, torchao eab345c, torchtitan 9dec370), which "
       "updates the tables of Liang et al. 2024, 'TorchTitan', arXiv:2410.06511")
_TT_NOTE = ("Grand Teton hosts: 8 H100 per host with NVLink, 400 Gb/s RDMA per GPU, and H100s "
            "with 96 GB HBM2e (2.4 TB/s) at a 500 W power limit, whose peak the source says is "
            "'between SXM and NVL' and unknown. No measured GEMM, HBM or attention rates exist "
            "for that card, so the planner predicts the row on the catalog's H100 SXM (80 GiB, "
            "700 W, HBM3): expect it optimistic on speed and short on capacity. FSDP2 "
            "(fully_shard per transformer block and on the root; reshard_after_forward for every "
            "block but the last, False under PP; BF16 parameters, FP32 reduce-scatter; float8 "
            "all-gather off, torchtitan's default), torch.compile per block, torchao Float8 "
            "linears where 'Float8'; TP with sequence parallelism on the norms (torchtitan's TP "
            "plan). Sequence 8,192 where the table prints none: the benchmark commit's "
            "train_configs seq_len. Eager (uncompiled) rows are not catalogued: the planner's "
            "elementwise ops are fused, as compiled blocks are and eager ones are not.")
_TT_PRINTED = frozenset({"tp", "pp", "dp", "cp", "ep", "micro_batch", "zero", "recompute",
                         "sequence_parallel"})
_GIB = 2 ** 30


def _tt(name, model, tp, pp, dp, cp, mb, batch, seq, dtype, recompute, tokens, gib, where,
        vpp=1, printed=_TT_PRINTED, gpu="h100-sxm", document=_TT, note=_TT_NOTE,
        fsdp_float8_all_gather=False):
    return PublishedRun(
        name=name, model=model, gpu=gpu, gpus=tp * pp * dp * cp, tp=tp, pp=pp, dp=dp,
        cp=cp, vpp=vpp, micro_batch=mb, global_batch=batch, seq=seq, recompute=recompute,
        sequence_parallel=tp > 1, zero=3, dtype=dtype, tokens_per_gpu=tokens,
        memory_per_gpu=None if gib is None else gib * _GIB, convention="tokens",
        peak=hardware.get(gpu).peak(dtype),
        source=document + ", " + where + f": {tokens:,} tokens/s per GPU"
               + ("" if gib is None else f", {gib} GiB"),
        note=note, printed=printed | ({"vpp"} if pp == 1 else set()), software="torchtitan",
        out_of_sample=True, fsdp_float8_all_gather=fsdp_float8_all_gather)


# torchtitan's async-TP benchmark on the same Grand Teton hosts: its vanilla-TP columns
_TT_TP = ("torchtitan benchmark 'asyncTP_llama3_h100_2025-06_torchtitan.md' (github.com/pytorch/"
          "torchtitan benchmarks/, June 2025: torch 38410cf9, torchao 6243040, torchtitan "
          "820504e)")
_TT_TP_NOTE = (_TT_NOTE + " From this table the 'Vanilla TP' column of the bfloat16 and "
               "float8 tensorwise rows: the async-TP column and the float8 rowwise rows are not "
               "catalogued (the planner models neither). Sequence 8,192, the commit's "
               "train_configs seq_len; global batch = local batch x FSDP degree. The table "
               "prints no memory.")
_TT_TP_70B = ("Llama3 70b on 256 H100s with FSDP=32, TP=8, torch.compile, full AC, local batch "
              "size 16")
_TT_TP_8B = ("Llama3 8b on 64 H100s with FSDP=8, TP=8, torch.compile, per op SAC, local batch "
             "size 12")


# torchtitan on standard 700 W parts, out of sample: the same stack off the Grand Teton card
_TT_H200 = ("torchtitan benchmark 'llama3-8b_h200_202506_trainy-whitefiber.md' (github.com/"
            "pytorch/torchtitan benchmarks/, June 2025, by Trainy on WhiteFiber: torch "
            "2.8.0a0+5228986c39 of NGC 25.05, torchao 0afa4c1, torchtitan e7c0cae)")
_TT_H200_NOTE = ("Hosts of 8 H200 with NVLink and a 400 Gb/s ConnectX-7 RDMA NIC per GPU (the "
                 "source); it prints no power limit, so the row is planned on the catalog's "
                 "H200 SXM (700 W). The source's command: torchtitan's llama3_8b.toml at "
                 "e7c0cae (sequence 8,192, selective_ac_option 'op': recompute "
                 "'selective-op'; FSDP over every GPU, data_parallel_replicate_degree 1), "
                 "local batch 2, torch.compile, torchao Float8 linears with "
                 "enable_fsdp_float8_all_gather (the planner's fsdp_float8_all_gather), "
                 "precompute_float8_dynamic_scale_for_fsdp and "
                 "force_recompute_fp8_weight_in_bwd. Tokens/s and memory are one reading, at "
                 "the 100th step (the source says so).")


_BRIDGE_MOE = ("NVIDIA Megatron-Bridge performance summary archive, github.com/NVIDIA-NeMo/"
               "Megatron-Bridge docs/performance-summary-archive.md (commit 4ab94dfa), DGX-H100 "
               "MoE rows")
_BRIDGE_MOE_NOTE = ("Megatron-Core MoE on DGX H100 with DDP (the table's FSDP 0); every MoE "
                    "table notes 'we force-balance the token distribution among experts' "
                    "(perfectly balanced routing). Printed: GPUs, GBS, MBS, sequence, TP, PP, CP, "
                    "VP, EP and ETP (1: the benchmark scripts' perf_matrix, e.g. Megatron-Bridge "
                    "scripts/performance/configs at fa0315ae, so the experts refold a stage's "
                    "TP x DP ranks: MoE parallel folding); recompute, sequence parallelism and the distributed optimizer are not, "
                    "so plan.validate lets the planner choose them. Tokens/s per GPU is compared; "
                    "the table's model TFLOP/s (in the source line) is not NeMo's dense formula.")


# What the 25.09 benchmark script set for DeepSeek-V3 on H100 (Megatron-Bridge
# scripts/performance/run_script.py at fa0315ae, 2025-10-10): DeepEP (enable_deepep for
# "h100": the flex dispatcher), the EP all-to-all overlapped in 1F1B
# (overlap_moe_expert_parallel_comm, delay_wgrad_compute) and no overlap of the gradient
# reduction (overlap_grad_reduce False on H100). Its recompute_modules ["mla_up_proj", "mlp"]
# have no planner setting; the row's recompute is left to the planner like the others'.
_BRIDGE_DSV3_H100 = dict(moe_dispatcher="deepep", moe_comm_overlap=True, overlap_grad_reduce=False)


_BRIDGE_DENSE = ("NVIDIA Megatron-Bridge performance summary archive, github.com/NVIDIA-NeMo/"
                 "Megatron-Bridge docs/performance-summary-archive.md (commit 4ab94dfa), DGX-H100 "
                 "dense rows")
_BRIDGE_FSDP_NOTE = ("Megatron-Core with Megatron-FSDP on one DGX H100, FP8 with per-tensor "
                     "current scaling (Transformer Engine). The table prints FSDP 8 ('FSDP > 0: "
                     "use FSDP with sharding group size = #GPUs / (TP x PP)'), so ZeRO-3 "
                     "sharding over the 8 GPUs (zero 3, printed); with Megatron-FSDP the "
                     "benchmark script turns gradient-accumulation fusion off ('Disabled to "
                     "avoid functional errors', scripts/performance/configs/llama/"
                     "llama3_llm_pretrain.py at 97ad8cc6, llama3_8b_pretrain_config_h100). "
                     "That commit's H100 FP8 preset sets recompute_num_layers 5 (full "
                     "recompute of 5 of the 32 blocks), which the planner has no setting for, "
                     "and does not itself set use_megatron_fsdp: the table's FSDP column is "
                     "taken as printed. Recompute and sequence parallelism are not printed, so "
                     "plan.validate lets the planner choose them.")


def _bridge_fsdp(name, tokens, tflops, where):
    """A row of the DGX-H100 Llama 3 8B tables: 8 GPUs, Megatron-FSDP over all of them."""
    return PublishedRun(
        name=name, model="llama3-8b", gpu="h100-sxm", gpus=8, tp=1, pp=1, dp=8, cp=1,
        micro_batch=1, global_batch=128, seq=8192, zero=3, dtype="fp8", tokens_per_gpu=tokens,
        tflops_per_gpu=tflops, convention="nemo-causal", peak=_H100_FP8,
        source=_BRIDGE_DENSE + f", {where} (8 GPUs, FP8-CS, GBS 128, MBS 1, sequence 8192, "
                               f"FSDP 8, TP 1, PP 1, CP 1, VP n/a, EP 1, GA 16: {tokens:,} "
                               f"tokens/s/GPU, {tflops} model TFLOP/s/GPU)",
        note=_BRIDGE_FSDP_NOTE, printed=_NEMO_PRINTED | {"zero"}, software="megatron-bridge",
        gradient_accumulation_fusion=False, out_of_sample=True)


def _bridge_moe(name, model, gpus, tp, pp, vpp, ep, mb, batch, dtype, tokens, tflops, where,
                ga=None, note="", **software):
    """A row of the MoE tables; ``ga`` the GA column (gradient accumulation, micro-batches
    per pipeline) where the table has one, ``note`` what this row adds to the common note."""
    dp = gpus // (tp * pp)
    notes = [_BRIDGE_MOE_NOTE]
    if ga is not None and ga * mb * dp != batch:
        notes.append(f"The table prints GA {ga} for this row, but its own GBS {batch}, MBS {mb} "
                     f"and PP {pp} on {gpus} GPUs (TP {tp}, DP {dp}) give GBS / (MBS x DP) = "
                     f"{batch / (mb * dp):g} micro-batches per pipeline. The planner uses the "
                     f"printed layout (PP {pp}, MBS {mb}), so the row carries that uncertainty.")
    return PublishedRun(
        name=name, model=model, gpu="h100-sxm", gpus=gpus, tp=tp, pp=pp, dp=dp,
        ep=ep, vpp=vpp, micro_batch=mb, global_batch=batch, seq=4096, dtype=dtype,
        tokens_per_gpu=tokens, convention="tokens", peak=hardware.get("h100-sxm").peak(dtype),
        source=_BRIDGE_MOE + f", {where} ({gpus} GPUs, GBS {batch}, MBS {mb}, sequence 4096, "
                             f"TP {tp}, PP {pp}, CP 1, VP {vpp}, EP {ep}"
                             + ("" if ga is None else f", GA {ga}")
                             + f": {tokens:,} tokens/s/GPU, {tflops} model TFLOP/s/GPU)",
        note=" ".join(notes + ([note] if note else [])), printed=_NEMO_PRINTED,
        software="megatron-bridge", out_of_sample=True, expert_tensor_parallel=1, **software)


_MEGATRON_2021 = frozenset({"tp", "pp", "dp", "cp", "ep", "zero", "recompute", "sequence_parallel"})
_N21_PRINTED = _MEGATRON_2021
_MTNLG_CHECK = ("; the three node counts (280, 350 and 420 nodes: 60.1, 50.2, 44.4 s; 126, 121, "
                "113 TFLOP/s) as tabulated in github.com/cli99/llm-analysis "
                "examples/megatron-turing-nlg/README.md, citing Sec. 2.4 of the paper")
_MTNLG_PRINTED = frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "recompute", "sequence_parallel"})


def _n21_weak(model, gpus, tp, pp, batch, tflops):
    return PublishedRun(
        name=f"megatron-weak-{model.split('-')[-1]}", model=model, gpu="a100-80gb", gpus=gpus,
        tp=tp, pp=pp, dp=gpus // (tp * pp), global_batch=batch, seq=2048, recompute="full",
        dtype="fp16", attention="unfused", tflops_per_gpu=tflops, convention="megatron-hfu", peak=_A100,
        source=_N21 + ", Table 1 (weak scaling: GPUs, model-parallel size, batch, teraFLOP/s "
               "per GPU); the same table in NVIDIA's Megatron-LM README.md "
               "(images/cases_april2021.png, April 2021 to May 2022, commit 2e90a34), whose text "
               "reads the model-parallel column as 'typically tensor parallel of size 8' above 8 "
               "(TP 8 x PP here)" + (
            "; also the paper's abstract (502 petaFLOP/s on 3072 GPUs, 52% of peak)"
            if gpus == 3072 else ""),
        note=_N21_NOTE, printed=_N21_PRINTED, software="megatron-lm")


_RUNS: dict[str, PublishedRun] = {r.name: r for r in (
    # GPT-3 175B and MT-NLG 530B with PTD-P, the paper's comparison with ZeRO-3:
    # model-parallel size 96 (TP 8 x PP 12) and 280 (TP 8 x PP 35), micro-batch 1.
    PublishedRun(
        name="megatron-gpt3-175b", model="gpt3-175b", gpu="a100-80gb", gpus=1536, tp=8, pp=12,
        dp=16, global_batch=1536, seq=2048, recompute="full", dtype="fp16", attention="unfused",
        tflops_per_gpu=141, convention="megatron-hfu", peak=_A100,
        source=_N21 + ", Table 2 (PTD-P rows: 174.6B, model-parallel size 96, batch 1536, "
               "micro-batch 1, 1536 GPUs: 141 teraFLOP/s per GPU)",
        note=("Model-parallel size 96 read as TP 8 x PP 12 (8-way TP inside a DGX A100, the "
              "paper's rule). The catalog's gpt3-175b has vocabulary 50,257 where Megatron pads "
              "to 51,200: 0.04% of the FLOPs. " + _N21_NOTE),
        printed=_MEGATRON_2021 | {"micro_batch"}, software="megatron-lm"),
    PublishedRun(
        name="megatron-gpt3-175b-384", model="gpt3-175b", gpu="a100-80gb", gpus=384, tp=8, pp=12,
        dp=4, global_batch=1536, seq=2048, recompute="full", dtype="fp16", attention="unfused",
        tflops_per_gpu=153, convention="megatron-hfu", peak=_A100,
        source=_N21 + ", Table 2 (PTD-P, 174.6B, 384 GPUs: 153 teraFLOP/s per GPU)",
        note="See megatron-gpt3-175b. " + _N21_NOTE, printed=_MEGATRON_2021 | {"micro_batch"}, software="megatron-lm"),
    PublishedRun(
        name="megatron-530b-2240", model="mt-nlg-530b", gpu="a100-80gb", gpus=2240, tp=8, pp=35,
        dp=8, global_batch=2240, seq=2048, recompute="full", dtype="fp16", attention="unfused",
        tflops_per_gpu=159, convention="megatron-hfu", peak=_A100,
        source=_N21 + ", Table 2 (PTD-P, 529.6B, model-parallel size 280, batch 2240, "
               "2240 GPUs: 159 teraFLOP/s per GPU)",
        note=_N21_NOTE, printed=_MEGATRON_2021 | {"micro_batch"}, software="megatron-lm"),
    # MT-NLG 530B as trained (DeepSpeed + Megatron), Smith et al. Table 1.
    PublishedRun(
        name="mtnlg-530b", model="mt-nlg-530b", gpu="a100-80gb", gpus=2240, tp=8, pp=35, dp=8,
        global_batch=1920, seq=2048, recompute="full", dtype="bf16", attention="unfused",
        tflops_per_gpu=126, step_time=60.1, convention="megatron-hfu", peak=_A100,
        source=_S22 + ", Sec. 3.3 and Table 1 (280 DGX A100 nodes: iteration 60.1 s, 126 "
               "teraFLOP/s per GPU; batch 1920, sequence 2048)" + _MTNLG_CHECK,
        note=("8-way TP and 35-way PP as the paper states; full activation checkpointing; "
              "DeepSpeed's pipeline engine has no interleaved schedule (vpp 1) and Megatron-"
              "DeepSpeed of 2021 no sequence parallelism. Not printed: micro-batch and ZeRO "
              "stage (placeholders 1 and 0, chosen by the planner in plan.validate). TFLOP/s "
              "counted with Narayanan et al.'s formula (60.1 s reproduces 126)."),
        printed=_MTNLG_PRINTED, software="megatron-deepspeed"),
    # the same layout on 420 and 350 nodes (data-parallel 12 and 10)
    *(PublishedRun(
        name=f"mtnlg-530b-{8 * 35 * dp}", model="mt-nlg-530b", gpu="a100-80gb", gpus=8 * 35 * dp,
        tp=8, pp=35, dp=dp, global_batch=1920, seq=2048, recompute="full", dtype="bf16",
        attention="unfused", tflops_per_gpu=tflops, step_time=step, convention="megatron-hfu",
        peak=_A100, source=_S22 + where + _MTNLG_CHECK, note="See mtnlg-530b.",
        printed=_MTNLG_PRINTED, software="megatron-deepspeed")
      for dp, tflops, step, where in (
          (12, 113, 44.4, ", Table 1 (420 nodes: iteration 44.4 s, 113 teraFLOP/s per GPU)"),
          (10, 121, 50.2, " (350 nodes: iteration 50.2 s, 121 teraFLOP/s per GPU)"))),
    # The Megatron-LM README's GPT-3 example: every layout field is in its script.
    PublishedRun(
        name="megatron-gpt3-175b-1024", model="gpt3-175b", gpu="a100-80gb", gpus=1024, tp=8,
        pp=16, dp=8, micro_batch=1, global_batch=1536, seq=2048, recompute="full", dtype="fp16",
        attention="unfused", tflops_per_gpu=138, convention="megatron-hfu", peak=_A100,
        source=(_README_GPT3 + ": 'With full global batch size of "
                "1536 on 1024 A100 GPUs, each iteration takes around 32 seconds resulting in 138 "
                "teraFLOPs per GPU which is 44% of the theoretical peak FLOPs'; the layout from "
                "examples/pretrain_gpt3_175B.sh at that commit (TP 8, PP 16, micro-batch 1, "
                "global batch 1536, sequence 2048, --fp16, --checkpoint-activations, no virtual "
                "stages). Narayanan et al.'s formula turns 138 TFLOP/s into 31.9 s, the "
                "README's 'around 32 seconds'."),
        note=("Megatron-LM of January 2021: no interleaved schedule, no ZeRO, no sequence "
              "parallelism (fixed by the software); the README's cluster is Selene (DGX A100 "
              "80GB)."),
        printed=None, software="megatron-lm"),
    # Weak scaling, Narayanan et al. Table 1 (a selection of its rows).
    _n21_weak("megatron-18b", 256, 8, 1, 1024, 135),
    _n21_weak("megatron-39b", 512, 8, 2, 1536, 138),
    _n21_weak("megatron-76b", 1024, 8, 4, 1792, 140),
    _n21_weak("megatron-146b", 1536, 8, 8, 2304, 148),
    _n21_weak("megatron-310b", 1920, 8, 16, 2160, 155),
    _n21_weak("mt-nlg-530b", 2520, 8, 35, 2520, 163),
    _n21_weak("megatron-1t", 3072, 8, 64, 3072, 163),
    # Korthikanti et al., data-parallel size 1: Table 3 prints the layouts and micro-batches,
    # Sec. 6 the interleaving (three model chunks per stage for 175B and 530B), Table 5 the
    # iteration times of both columns: full recompute without sequence parallelism, and
    # sequence parallelism + selective recompute ("present work", with its MFU).
    *(PublishedRun(
        name=f"korthikanti-{tag}" + ("" if present else "-full"), model=model,
        gpu="a100-80gb", gpus=tp * pp, tp=tp, pp=pp, dp=1, vpp=vpp, micro_batch=mb,
        global_batch=batch, seq=2048, recompute="selective" if present else "full",
        sequence_parallel=present, dtype="bf16", attention="unfused",
        mfu=mfu if present else None, step_time=step if present else step_full,
        convention="megatron-mfu", peak=_A100,
        source=_K22 + (", Table 3 (layout, global and micro-batch), Sec. 6 ('three "
                       "interleaving stages (m = 3) for the 175B and 530B models'), Table 5 ("
                       + ("'Present Work' iteration time and MFU; the MFU column (41.5, 51.4, "
                          "56.0, 56.3 %) also in the Megatron-LM README's table, "
                          "github.com/NVIDIA/Megatron-LM README.md at commit 2e90a34, May 2022)"
                          if present else "'Full Recompute' iteration time)")),
        note=("Data-parallel size 1 (benchmark runs on Selene, DGX A100 80GB). The ZeRO stage "
              "is not printed (no data parallelism, so it moves nothing); "
              + ("" if vpp > 1 or pp == 1 else "nor the interleaving of the 1T model; ")
              + "plan.validate lets the planner choose. Sec. 6.3: no overlap of the gradient "
              "all-reduce with back-propagation. The code is the paper's 2022 Megatron-LM "
              "branch, which accumulates gradients in the wgrad GEMMs."),
        printed=frozenset({"tp", "pp", "dp", "cp", "ep", "micro_batch", "recompute",
                           "sequence_parallel"} | ({"vpp"} if vpp > 1 or pp == 1 else set())),
        software="megatron-lm", overlap_grad_reduce=False, gradient_accumulation_fusion=True)
      for present in (True, False)
      for tag, model, tp, pp, vpp, mb, batch, mfu, step, step_full in (
          ("22b", "megatron-22b", 8, 1, 1, 4, 4, 0.415, 1.10, 1.42),
          ("175b", "gpt3-175b", 8, 8, 3, 1, 64, 0.514, 13.75, 18.13),
          ("530b", "mt-nlg-530b", 8, 35, 3, 1, 280, 0.560, 37.83, 49.05),
          ("1t", "megatron-1t", 8, 64, 1, 1, 512, 0.563, 71.49, 94.42))),
    # Llama 3 405B, Table 4: TFLOP/s per GPU and BF16 MFU on H100, 16M tokens per batch.
    *(PublishedRun(
        name=f"llama3-405b-{tag}", model="llama3-405b", gpu="h100-sxm", gpus=gpus, tp=8, cp=cp,
        pp=16, dp=dp, global_batch=dp * per_dp, seq=seq, recompute="none",
        sequence_parallel=True, zero=1, dtype="bf16", tflops_per_gpu=tflops, mfu=mfu,
        convention="llama3", peak=_H100,
        source=_L24 + ", Table 4 (GPUs, TP, CP, PP, DP, sequence, batch per DP group, "
               "tokens per batch, TFLOP/s per GPU, BF16 MFU)",
        note=("Sec. 3.3.2: FSDP (weights, optimizer state and gradients sharded over DP, "
              "weights not resharded after forward) read as ZeRO-1-like traffic (ZeRO 1 and 2 "
              "move the same bytes); the text says an interleaved schedule was used but prints "
              "neither the virtual stages nor the micro-batch; recompute and sequence "
              "parallelism not stated. The placeholders (vpp 1, micro-batch 1, no recompute) "
              "are not used by plan.validate: the planner chooses them."),
        printed=frozenset({"tp", "pp", "dp", "cp", "ep", "zero"}), software="llama3")
      for tag, gpus, cp, dp, seq, per_dp, tflops, mfu in (
          ("8k", 8192, 1, 64, 8192, 32, 430, 0.43),
          ("16k", 16384, 1, 128, 8192, 16, 400, 0.41),
          ("16k-128k", 16384, 16, 8, 131072, 16, 380, 0.38))),
    # BLOOM-176B as trained on Jean Zay: every layout field is in the README or the slurm
    # script, and the README quotes a training-log line with both the step time and TFLOP/s.
    PublishedRun(
        name="bloom-176b", model="bloom-176b", gpu="a100-80gb", gpus=384, tp=4, pp=12, dp=8,
        micro_batch=2, global_batch=2048, seq=2048, recompute="full", sequence_parallel=False,
        zero=1, dtype="bf16", attention="unfused", tflops_per_gpu=149.77, step_time=104.70,
        convention="megatron-hfu", peak=_A100,
        source=_BLOOM + ". README 'Replica setup' (384 GPUs: TP 4, PP 12, DP 8, MBS 2), "
               "'Global batch size' (GBS 2048, sequence 2048), 'Deepspeed config' (BF16_Optimizer "
               "'implements its own ZeRO Stage 1'), --checkpoint-activations in the slurm script, "
               "and 'Important checkpoints': the log line at iteration 85376, 'elapsed time per "
               "iteration (s): 104.70 | global batch size: 2048 | ... | TFLOPs: 149.77'. The "
               "README's 'Throughput' section names the 4 x 2 (recompute-counted) coefficient; "
               "Narayanan et al.'s formula with the padded vocabulary 250880 turns 104.70 s into "
               "149.76 TFLOP/s.",
        note=("DeepSpeed's pipeline engine (no interleaving: vpp 1) with Megatron-LM tensor "
              "parallelism, 2022: no sequence parallelism, no FlashAttention (fused softmax "
              "kernels that still materialise the scores). Hardware differs from a DGX A100: "
              "Jean Zay's nodes have 8 A100 80GB with NVLink and four Omni-Path links per node "
              "(README 'Hardware'; 100 Gb/s each, Intel's Omni-Path 100 series), a quarter of a "
              "DGX A100's eight 200 Gb/s HDR links: cluster 'jean-zay-a100' (dtbook.hardware), "
              "so the planner predicts BLOOM on its own network."),
        printed=None, software="megatron-deepspeed", cluster="jean-zay-a100"),
    # NVIDIA's published NeMo / Megatron-Bridge benchmarks on DGX H100 (FP8).
    _nemo("nemo-gpt3-175b-512", "gpt3-175b", 512, 4, 8, 1, 6, 2, 2048, 2048, 782, 842,
          _NEMO_2407, "nemo-full"),
    _nemo("nemo-llama2-70b-64", "llama2-70b", 64, 4, 4, 1, 20, 1, 128, 4096, 1707, 759,
          _NEMO_2407, "nemo-full"),
    _nemo("nemo-llama3-70b-64", "llama3-70b", 64, 4, 4, 2, 5, 1, 128, 8192, 1533, 738,
          _NEMO_2407, "nemo-full"),
    _nemo("nemo-llama2-7b-8", "llama2-7b", 8, 1, 1, 1, 1, 1, 128, 4096, 16847, 776,
          _NEMO_2407, "nemo-full", out_of_sample=True),
    _nemo("nemo-llama2-13b-16", "llama2-13b", 16, 1, 4, 1, 10, 1, 128, 4096, 8646, 754,
          _NEMO_2407, "nemo-full", out_of_sample=True),
    _nemo("nemo-llama3-8b-8", "llama3-8b", 8, 1, 1, 2, 1, 1, 128, 8192, 12036, 697,
          _NEMO_2407, "nemo-full", out_of_sample=True),
    _nemo("nemo-nemotron4-340b-128", "nemotron4-340b", 128, 8, 8, 1, 12, 1, 32, 4096, 322, 678,
          _NEMO_2407, "nemo-full", out_of_sample=True),
    PublishedRun(
        name="mcore-mixtral-8x7b-64", model="mixtral-8x7b", gpu="h100-sxm", gpus=64, tp=1, pp=4,
        dp=16, ep=8, vpp=8, micro_batch=1, global_batch=256, seq=4096, dtype="bf16",
        tflops_per_gpu=438, convention="megatron-2024", peak=_H100, out_of_sample=True,
        software="megatron-lm",
        source=_MCORE_MOE + ": 'Mixtral 8X7B bf16 training to achieve 438 TFLOPS as of MCore "
               "v0.8' and its 'Reference Best Parallel Mapping' of MCore v0.8 for Mixtral 8x7B "
               "(dropless, all-to-all dispatcher, BF16, 64 GPUs, sequence 4096, TP 1, EP 8, PP "
               "4, VP 8, MBS 1, GBS 256) on 8xH100 80GB HBM3 nodes with 8x400 Gbit/s "
               "InfiniBand (PyTorch 24.04 container, Transformer Engine 1.9)",
        note=("The TFLOP/s is Megatron-LM's own count (num_floating_point_operations, the "
              "'megatron-2024' convention: top-2 routed experts, gated MLP; the router is not "
              "counted), the headline figure of the README that prints the mapping, both stated "
              "for MCore v0.8. Routing is the trained router's (dropless), not force-balanced; "
              "recompute and the ZeRO stage are not printed, so plan.validate lets the planner "
              "choose them. Experts split over the data-parallel replicas (EP 8 of DP 16, "
              "expert-tensor-parallel size = TP = 1)."),
        printed=frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch",
                           "sequence_parallel"})),
    PublishedRun(
        name="nemotron4-340b-6144", model="nemotron4-340b", gpu="h100-sxm", gpus=6144, tp=8,
        pp=12, dp=64, vpp=8, micro_batch=1, global_batch=2304, seq=4096, recompute="selective",
        sequence_parallel=True, dtype="bf16", step_time=8.0, mfu=0.41, convention="megatron-2024",
        peak=_H100, out_of_sample=True, software="nemo",
        source=_N4 + ", Sec. 2.3 (768 DGX H100 nodes; 8-way tensor, 12-way pipeline parallelism "
               "with interleaving, data parallelism) and Table 2, the last stage of the batch "
               "ramp (data-parallel size 64, 6,144 GPUs, batch 2,304, iteration time 8.0 s, "
               "MFU 41.0%, 7.6T of the 9T tokens): 2304 x 4096 / 8.0 / 6144 = 192 tokens/s "
               "per GPU; " + _N4_LAUNCHER + " for the settings the report does not print (768 "
               "nodes, GBS 2304, MBS 1, TP 8, PP 12, VP 8, sequence 4096, BF16, selective "
               "recompute, sequence parallelism)",
        note=("A production run's steady iteration time, not a benchmark's. The report prints "
              "the layout and batch; the micro-batch, the interleaving depth (VP 8), selective "
              "recompute, sequence parallelism and BF16 are NVIDIA's published launcher "
              "configuration for this model at this scale, taken as the run's. The ZeRO stage "
              "is not printed (NeMo 1.x: 0, 1 or 2, plan.validate.zero_stages_of; the "
              "launcher's optimizer is Apex's ZeRO-2 distributed_fused_adam)."),
        printed=frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute",
                           "sequence_parallel"})),
    _nemo("bridge-llama3-70b-64", "llama3-70b", 64, 4, 8, 1, 5, 1, 256, 8192, 1621, 728,
          _BRIDGE_2602 + ", table 'Model: LLAMA3_70B'", "nemo-causal"),
    _nemo("bridge-llama3-405b-1024", "llama3-405b", 1024, 8, 8, 2, 8, 1, 1536, 8192, 311, 784,
          _BRIDGE_2602 + ", table 'Model: LLAMA3.1_405B'", "nemo-causal"),
    # torchtitan (FSDP2) on Grand Teton H100s, out of sample (_TT_NOTE)
    # "Selective activation checkpointing": the commit's llama3_8b.toml sets
    # selective_ac_option = 'op', torchtitan's op-level policy (recompute "selective-op")
    _tt("torchtitan-llama3-8b-8", "llama3-8b", 1, 1, 8, 1, 2, 16, 8192, "bf16", "selective-op",
        6667, 77.0, "Table 1 (FSDP 8, local batch 2, global 16, selective AC, FSDP + "
                    "torch.compile)"),
    _tt("torchtitan-llama3-8b-8-fp8", "llama3-8b", 1, 1, 8, 1, 2, 16, 8192, "fp8", "selective-op",
        8532, 76.8, "Table 1 (FSDP + torch.compile + Float8)"),
    _tt("torchtitan-llama3-8b-128", "llama3-8b", 1, 1, 128, 1, 2, 256, 8192, "bf16",
        "selective-op", 6514, 62.0, "Table 3 (FSDP 128, local batch 2, global 256, selective "
                                    "AC, FSDP + torch.compile)"),
    _tt("torchtitan-llama3-8b-128-fp8", "llama3-8b", 1, 1, 128, 1, 2, 256, 8192, "fp8",
        "selective-op", 8380, 61.8, "Table 3 (FSDP + torch.compile + Float8)"),
    *(_tt(f"torchtitan-llama3-8b-cp{cp}", "llama3-8b", 1, 1, 8 // cp, cp, 1, 8 // cp, seq, "fp8",
          "full", tokens, gib, f"Table 2 (FSDP {8 // cp}, CP {cp}, sequence {seq:,}, local batch 1, "
                               "torch.compile + Float8, full AC)")
      for cp, seq, tokens, gib in ((1, 32768, 3890, 83.9), (2, 65536, 2540, 84.2),
                                   (4, 131072, 1071, 84.0), (8, 262144, 548, 84.5))),
    _tt("torchtitan-llama3-70b-256", "llama3-70b", 8, 1, 32, 1, 16, 512, 8192, "fp8", "full",
        829, 71.9, "Table 4 (FSDP 32 x TP 8, local batch 16, global 512, torch.compile + "
                   "Float8, full AC; '2D', without AsyncTP)"),
    _tt("torchtitan-llama3-405b-512-1f1b", "llama3-405b", 8, 8, 8, 1, 4, 256, 8192, "fp8", "full",
        100, 82.5, "Table 5 (FSDP 8 x TP 8 x PP 8, local batch 32, global 256, torch.compile + "
                   "Float8 + AsyncTP, full AC, 1F1B); micro-batch 32 / 8 = 4: torchtitan's "
                   "default number of micro-batches at 9dec370 is the PP degree, 8 "
                   "(torchtitan/parallelisms/pipelining_utils.py, build_pipeline_schedule: "
                   "pipeline_parallel_microbatches None -> pipeline_parallel_degree)",
        printed=_TT_PRINTED | {"vpp"}),
    _tt("torchtitan-llama3-405b-512", "llama3-405b", 8, 8, 8, 1, 4, 256, 8192, "fp8", "full",
        128, 72.7, "Table 5 (the same with interleaved 1F1B); the stages per rank and the "
                   "micro-batches are not printed, so they are torchtitan's defaults at 9dec370: "
                   "two stages per rank for a looped schedule given no split points "
                   "(torchtitan/parallelisms/pipelining_utils.py, generate_split_points: 126 "
                   "layers over 16 stages, 7 on the first and last, 8 on the others) and "
                   "pp = 8 micro-batches (build_pipeline_schedule), micro-batch 32 / 8 = 4",
        vpp=2, printed=_TT_PRINTED | {"vpp"}),
    # Table 6: 4D, the 405B at long sequences, 1F1B, local batch 8 = 8 micro-batches of 1
    *(_tt(f"torchtitan-llama3-405b-cp{cp}", "llama3-405b", 8, 8, 8 // cp, cp, 1, 8 * (8 // cp),
          seq, "fp8", "full", tokens, gib,
          f"Table 6 (FSDP {8 // cp} x TP 8 x PP 8 x CP {cp}, sequence {seq:,}, local batch 8, "
          "torch.compile + Float8 + AsyncTP, 1F1B, full AC); the global batch is local batch "
          "x FSDP degree as in Tables 1 to 5, and the local batch runs as pp = 8 micro-batches "
          "of 1 (build_pipeline_schedule's default, as for Table 5)",
          printed=_TT_PRINTED | {"vpp"})
      for cp, seq, tokens, gib in ((1, 32768, 76, 75.3), (2, 65536, 47, 75.9),
                                   (4, 131072, 31, 77.1), (8, 262144, 16, 84.9))),
    # FSDP x TP on Grand Teton, the async-TP benchmark's vanilla-TP columns (_TT_TP_NOTE)
    *(_tt(f"torchtitan-llama3-{size}-tp8-{dtype}", f"llama3-{size}", 8, 1, n // 8, 1, mb,
          mb * n // 8, 8192, dtype, recompute, tokens, None,
          f"'{title}' table, '{quant}' row, 'Vanilla TP tokens/sec' column (FSDP {n // 8}, "
          f"TP 8, local batch {mb}, torch.compile, "
          f"{'full AC' if recompute == 'full' else 'per op SAC'})",
          document=_TT_TP, note=_TT_TP_NOTE)
      for size, n, mb, recompute, title, dtype, quant, tokens in (
          ("70b", 256, 16, "full", _TT_TP_70B, "bf16", "None (bfloat16)", 597.3),
          ("70b", 256, 16, "full", _TT_TP_70B, "fp8", "float8 tensorwise", 809.8),
          ("8b", 64, 12, "selective-op", _TT_TP_8B, "bf16", "None (bfloat16)", 4378),
          ("8b", 64, 12, "selective-op", _TT_TP_8B, "fp8", "float8 tensorwise", 5078.1))),
    # the same stack on 700 W H200s (_TT_H200_NOTE): FSDP over 4 and 8 hosts, local batch 2
    *(_tt(f"torchtitan-llama3-8b-{n}-h200", "llama3-8b", 1, 1, n, 1, 2, 2 * n, 8192, "fp8",
          "selective-op", tokens, gib, f"'Results' table, NUM_NODES {n // 8} (FSDP {n}, local "
                                       "batch 2, torch.compile + Float8 with float8 all-gather)",
          gpu="h200", document=_TT_H200, note=_TT_H200_NOTE, fsdp_float8_all_gather=True)
      for n, tokens, gib in ((32, 10938, 47.96), (64, 10753, 46.97))),
    # Llama 3 8B on one DGX H100 with Megatron-FSDP, out of sample (_BRIDGE_FSDP_NOTE)
    _bridge_fsdp("bridge-llama3-8b-8", 14451, 744,
                 "section '25.11 NeMo Container', System: DGX-H100, LLAMA3_8B row"),
    _bridge_fsdp("bridge-llama3-8b-8-2509", 14079, 725,
                 "section '25.09 NeMo Container', System: DGX-H100, LLAMA3_8B row"),
    # Megatron-Bridge MoE rows on DGX H100, out of sample (_BRIDGE_MOE_NOTE)
    _bridge_moe("bridge-deepseek-v3-1024", "deepseek-v3", 1024, 2, 8, 4, 64, 1, 8192, "fp8", 1297,
                338, "section '25.09 NeMo Container', DGX-H100 DeepSeek-V3 row", ga=128,
                **_BRIDGE_DSV3_H100),
    # DeepSeek-V3's own pre-training on 2,048 H800s, out of sample: a whole run's GPU-hours
    PublishedRun(
        name="deepseek-v3-2048", model="deepseek-v3", gpu="h800", gpus=2048, tp=1, pp=16,
        dp=128, ep=64, global_batch=15360, seq=4096, zero=1, dtype="fp8",
        tokens_per_gpu=1e12 / (180e3 * 3600), convention="tokens",
        peak=hardware.get("h800").peak("fp8"),
        source=_DS24 + ", Sec. 1 and Table 1 ('180K H800 GPU hours' per trillion tokens, "
               "'2048 H800 GPUs'), Sec. 3.2 (PP 16, EP 64 over 8 nodes, ZeRO-1 data parallelism, "
               "no TP), Sec. 3.3 (FP8 GEMMs), Sec. 4.2 (sequence 4K; batch 15,360 after the "
               "ramp): 1e12 / (180e3 x 3600) = 1,543 tokens/s per GPU",
        note=("A whole run's GPU-hours (restarts, evaluation and the batch ramp included), not "
              "a benchmark's steady state: the planner should come out faster. DualPipe pairs "
              "each micro-batch's all-to-alls with another's compute and the node-limited "
              "dispatch sends a token to at most 4 nodes over InfiniBand (Sec. 2.1.2, 3.2.2), "
              "hence moe_dispatcher 'deepep' and moe_comm_overlap; DualPipe's own bubble, "
              "(p/2 - 1) chunks, is not modelled (the planner's 1F1B bubble is larger); the "
              "recomputation of RMSNorm and the MLA up-projections (Sec. 3.2.3) has no planner "
              "setting; micro-batch and recompute are chosen by the planner."),
        printed=frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "zero", "sequence_parallel"}),
        software="hai-llm", cluster="hgx-h800", overlap_grad_reduce=True,
        moe_dispatcher="deepep", moe_comm_overlap=True, out_of_sample=True),
    _bridge_moe("bridge-qwen3-235b-256", "qwen3-235b-a22b", 256, 2, 8, 4, 32, 1, 2048, "fp8", 1575,
                233, "section '25.11 NeMo Container', DGX-H100 Qwen3-235B-A22B row", ga=128),
    _bridge_moe("bridge-qwen3-30b-16", "qwen3-30b-a3b", 16, 1, 2, 24, 8, 2, 512, "fp8", 5275, 121,
                "section '25.11 NeMo Container', DGX-H100 Qwen3-30B-A3B row", ga=32,
                note="The same archive prints 5,113 tokens/s/GPU for this model on 16 DGX H100 "
                     "GPUs at PP 2, VP 12, EP 8, MBS 1, GBS 1024 in its 26.02 table and 9,058 "
                     "for that same layout in 26.02.01 (row bridge-qwen3-30b-16-vp12): a point "
                     "release of the software moved it 1.77x, so this 25.11 figure may carry "
                     "a slowdown fixed since."),
    _bridge_moe("bridge-qwen3-30b-16-vp12", "qwen3-30b-a3b", 16, 1, 2, 12, 8, 1, 1024, "fp8", 9058,
                208, "section '26.02.01 NeMo Container', 'Model: Qwen3_30B_a3B', DGX-H100 row"),
    _bridge_moe("bridge-qwen3-30b-16-ep16", "qwen3-30b-a3b", 16, 1, 1, 1, 16, 1, 1024, "fp8", 8826,
                203, "section '26.06 NeMo Container', 'Model: Qwen3_30B_a3B', DGX-H100 row"),
    _bridge_moe("bridge-gpt-oss-120b-64", "gpt-oss-120b", 64, 1, 4, 1, 8, 4, 512, "bf16", 5630, 153,
                "section '25.11 NeMo Container', DGX-H100 GPT-OSS 120B row", ga=2,
                note="The DGX-B200 row of that table (PP 1, the same GBS and MBS) prints GA 2 "
                     "too. Megatron-Bridge's benchmark preset of the commit that added the "
                     "table (scripts/performance/configs/gpt_oss/"
                     "gpt_oss_workload_base_configs.py at 97ad8cc6) sets PP 4, as printed, "
                     "and MBS 1, not the printed 4."),
    _bridge_moe("bridge-gpt-oss-120b-64-2604", "gpt-oss-120b", 64, 1, 4, 1, 8, 1, 1280, "bf16",
                5810, 158, "section '26.04 NeMo Container', 'Model: GPT OSS 120B'"),
)}


# The documents the rows come from, each named once (reference()).
_DOCUMENTS = (_N21, _K22, _S22, _L24, _DS24, _README_GPT3, _BLOOM, _NEMO_2407, _BRIDGE_2602, _TT,
              _BRIDGE_MOE, _TT_H200, _BRIDGE_DENSE, _TT_TP, _N4, _MCORE_MOE)


def reference(run: PublishedRun) -> str:
    """The document ``run`` comes from, without the row's detail (chapter 27): a paper,
    a README or a performance table; ``run.source`` says where in it."""
    for doc in _DOCUMENTS:
        if run.source.startswith(doc):
            return doc
    return run.source


def printed_fields(run: PublishedRun) -> dict:
    """The layout fields ``run``'s source printed, with their values (chapter 27); every
    layout field when ``run.printed`` is ``None``."""
    keys = LAYOUT_FIELDS if run.printed is None else [k for k in LAYOUT_FIELDS if k in run.printed]
    return {k: getattr(run, k) for k in keys}


def names() -> list[str]:
    """The catalog's run names, in catalog order."""
    return list(_RUNS)


def runs() -> list[PublishedRun]:
    """Every run in the catalog."""
    return list(_RUNS.values())


def get(name: str) -> PublishedRun:
    """The run called ``name``; ``ValueError`` listing the names for an unknown one."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _RUNS:
        raise ValueError(f"unknown run {name!r}; known runs: {', '.join(names())}")
    return _RUNS[key]


def source_flops_per_step(run: PublishedRun) -> float:
    """FLOPs of one step as the run's source counts them (its ``convention``).

    Megatron's formulas are :func:`dtbook.composition.megatron_step_flops` of the model's
    hidden size ``h``, layers ``l``, vocabulary ``V``, batch ``B`` and sequence ``s``; NeMo's count 6 FLOPs per block weight per token plus the
    scores (full or causal) and the head; the Llama 3 row counts model FLOPs: 6 per parameter per
    token (embedding excluded) plus causal attention, :func:`dtbook.flops` style.
    (Chapter 27.)
    """
    if run.convention == "tokens":
        raise ValueError(f"{run.name}: its source prints tokens/s and no FLOP figure "
                         "(convention 'tokens'): there is no source FLOP count to use")
    cfg = models.get(run.model)
    B, s, l, h, V = run.global_batch, run.seq, cfg.layers, cfg.hidden, cfg.vocab
    if run.convention in ("megatron-hfu", "megatron-mfu"):      # with and without recompute
        return megatron_step_flops(B, s, l, h, V, recompute=run.convention == "megatron-hfu")
    if run.convention == "megatron-2024":
        # Megatron-LM's num_floating_point_operations at df61e60: GQA, gated MLP, routed experts,
        # and padded_vocab_size: the vocabulary rounded up to a multiple of 128 x TP
        # (make_vocab_size_divisible_by, default 128; _vocab_size_with_padding)
        multiple = 128 * run.tp
        V = -(-V // multiple) * multiple
        q = cfg.heads * cfg.head_dim / h
        routed, width = ((cfg.experts_per_token, cfg.moe_ffn_hidden) if cfg.is_moe
                         else (1, cfg.ffn_hidden))
        gated = 1.5 if cfg.gated_mlp else 1.0
        return 12 * B * s * l * h * h * ((1 + cfg.kv_heads / cfg.heads + s / h) * q
                                         + width / h * routed * gated + V / (2 * l * h))
    if run.convention in ("nemo-full", "nemo-causal"):
        # NeMo's formulas, written per weight matrix (they reduce to NeMo's gpt3 and llama
        # expressions): 3 x 2 FLOPs per weight per token in q, k, v, o and the MLP, 3 x 4 s h
        # per token per layer for the scores (halved when causal), 6 h V for the head.
        hd = cfg.head_dim
        attn = 2 * h * cfg.heads * hd + 2 * h * cfg.kv_heads * hd
        mlp = (3 if cfg.gated_mlp else 2) * h * cfg.ffn_hidden
        causal = 0.5 if run.convention == "nemo-causal" else 1.0
        # the scores as NeMo writes them, 4·s²·h per sequence per layer: the full product of
        # attention_flops with the hidden size as the width of Q·K and A·V
        scores = 3 * attention_flops(B, s, 1, h, l) * causal
        return (l * 6 * (attn + mlp) + 6 * h * V) * B * s + scores
    # llama3: model FLOPs, no recompute, causal attention counted as half the full s x s
    # product (s²/2 pairs, the paper's convention, not attention_flops(causal=True)'s s(s+1)/2)
    dense = 6 * (cfg.num_params() - cfg.num_embedding_params()) * B * s
    return dense + 3 * attention_flops(B, s, cfg.heads, cfg.head_dim, l) / 2


def tokens_per_second(run: PublishedRun) -> float:
    """Tokens per second of the whole job, recovered from what the source printed.

    Tokens/s per GPU times the GPUs when printed; else from the step time; else from TFLOP/s
    per GPU (or MFU x peak) divided by the source's own FLOPs per token
    (:func:`source_flops_per_step`). (Chapter 27.)
    """
    tokens = run.global_batch * run.seq
    if run.tokens_per_gpu is not None:
        return run.tokens_per_gpu * run.gpus
    if run.step_time is not None:
        return tokens / run.step_time
    rate = run.tflops_per_gpu * TFLOP if run.tflops_per_gpu is not None else run.mfu * run.peak
    return rate * run.gpus / source_flops_per_step(run) * tokens


@dataclass(frozen=True, kw_only=True)
class LayerTiming:
    """The measured forward and backward time (s) of one transformer layer for one
    micro-batch on one GPU, tensor-parallel communication included, as a source printed it
    (chapter 27)."""

    name: str
    model: str
    gpu: str
    tp: int
    micro_batch: int
    seq: int
    sequence_parallel: bool
    recompute: str
    attention: str
    forward: float
    backward: float
    source: str

    def __post_init__(self) -> None:
        models.get(self.model)
        hardware.get(self.gpu)
        if self.recompute not in RECOMPUTE:      # what plan.layer_time takes
            raise ValueError(f"{self.name}: recompute must be one of {RECOMPUTE}, "
                             f"got {self.recompute!r}")
        if not (self.forward > 0 and self.backward > 0):
            raise ValueError(f"{self.name}: forward and backward must be > 0 seconds")


# Korthikanti et al. Table 4: one layer of the 22B model (Table 3: h 6144, 64 heads, TP 8,
# micro-batch 4, s 2048) on Selene's DGX A100 80GB, Megatron-LM of 2022 (unfused attention).
_LAYERS = tuple(
    LayerTiming(name=f"korthikanti-22b-layer-{tag}", model="megatron-22b", gpu="a100-80gb",
                tp=8, micro_batch=4, seq=2048, sequence_parallel=sp, recompute=rc,
                attention="unfused", forward=fwd * 1e-3, backward=bwd * 1e-3,
                source=_K22 + ", Table 4 ('" + row + "'; forward and backward in ms) with "
                       "Table 3's 22B configuration")
    for tag, row, sp, rc, fwd, bwd in (
        ("baseline", "Baseline no recompute", False, "none", 7.7, 11.9),
        ("sp", "Sequence Parallelism", True, "none", 7.2, 11.8),
        ("full", "Baseline with recompute", False, "full", 7.7, 19.5),
        ("selective", "Selective Recompute", False, "selective", 7.7, 13.2),
        ("selective-sp", "Selective + Sequence", True, "selective", 7.2, 13.1)))


def layer_timings() -> list[LayerTiming]:
    """The published per-layer measurements, in catalog order (chapter 27)."""
    return list(_LAYERS)


# --------------------------------------------------------------------------------------
# Job interruptions as a source counted them (chapter 34; the failure model of chapter 26)
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InterruptionCause:
    """One row of a table of interruptions by root cause, as printed: the component, the
    category the source files it under, the count and the printed share of the unexpected
    interruptions (a percentage, as printed; not recomputed from the count)."""

    component: str
    category: str
    count: int
    percent: float


@dataclass(frozen=True)
class Interruptions:
    """The interruptions of one training job over ``days`` days, as a source printed them:
    ``planned`` and ``unexpected`` counts and the unexpected ones by root cause, in the
    source's order (chapter 34)."""

    name: str
    days: float
    planned: int
    unexpected: int
    causes: tuple[InterruptionCause, ...]
    source: str

    def __post_init__(self) -> None:
        if not self.days > 0:
            raise ValueError(f"days must be > 0, got {self.days!r}")
        for field in ("planned", "unexpected"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0, got {getattr(self, field)!r}")
        if any(c.count < 0 for c in self.causes):
            raise ValueError(f"causes: every count must be >= 0 ({self.name})")

    def count(self, component: str) -> int:
        """The printed count of one component's interruptions."""
        for c in self.causes:
            if c.component == component:
                return c.count
        raise ValueError(f"component {component!r} is not a row of {self.name}; rows: "
                         f"{', '.join(c.component for c in self.causes)}")

    def category(self, category: str) -> tuple[InterruptionCause, ...]:
        """The rows the source files under ``category`` ("GPU", "Host", ...)."""
        rows = tuple(c for c in self.causes if c.category == category)
        if not rows:
            raise ValueError(f"category {category!r} has no rows in {self.name}")
        return rows


# Dubey et al. 2024, Sec. 3.3.4: "During a 54-day snapshot period of pre-training, we
# experienced a total of 466 job interruptions. Of these, 47 were planned ... and 419 were
# unexpected"; Table 5 gives the root cause of the 419 (component, category, count, %).
LLAMA3_405B_INTERRUPTIONS = Interruptions(
    name="llama3-405b-pretraining-54d", days=54, planned=47, unexpected=419,
    causes=tuple(InterruptionCause(*row) for row in (
        ("Faulty GPU", "GPU", 148, 30.1),
        ("GPU HBM3 Memory", "GPU", 72, 17.2),
        ("Software Bug", "Dependency", 54, 12.9),
        ("Network Switch/Cable", "Network", 35, 8.4),
        ("Host Maintenance", "Unplanned Maintenance", 32, 7.6),
        ("GPU SRAM Memory", "GPU", 19, 4.5),
        ("GPU System Processor", "GPU", 17, 4.1),
        ("NIC", "Host", 7, 1.7),
        ("NCCL Watchdog Timeouts", "Unknown", 7, 1.7),
        ("Silent Data Corruption", "GPU", 6, 1.4),
        ("GPU Thermal Interface + Sensor", "GPU", 6, 1.4),
        ("SSD", "Host", 3, 0.7),
        ("Power Supply", "Host", 3, 0.7),
        ("Server Chassis", "Host", 2, 0.5),
        ("IO Expansion Board", "Host", 2, 0.5),
        ("Dependency", "Dependency", 2, 0.5),
        ("CPU", "Host", 2, 0.5),
        ("System Memory", "Host", 2, 0.5))),
    source=_L24 + ", Sec. 3.3.4 (the 54-day snapshot: 466 interruptions, 47 planned, "
                  "419 unexpected) and Table 5 (root causes of the unexpected ones)")
