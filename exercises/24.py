"""Exercises for chapter 24, 3D Parallelism."""

from dtbook import comm, composition, mesh, models
from dtbook import pipeline_parallel as pipe
from dtbook import tensor_parallel as tpar
from dtbook.exercises import exercise
from dtbook.units import GB, fmt_seconds, us


@exercise(
    "24.1",
    prompt=("1024 GPUs form the mesh (DP, PP, TP) = (8, 16, 8). How many TP groups, PP groups "
            "and DP groups are there? Answer as a tuple (TP, PP, DP)."),
    unit=("", "", ""),
    hint="An axis of size dₖ has N/dₖ groups, one per setting of the other two coordinates.",
)
def _():
    return tuple(mesh.groups_per_axis(1024, d) for d in (8, 16, 8))


@exercise(
    "24.2",
    prompt=("A 40B-parameter model trains on 256 A100s with TP = 8, PP = 8, DP = 4, "
            "mixed-precision Adam (16 bytes per parameter). How many GB of model states does "
            "each GPU hold without ZeRO, and with ZeRO-1 over the DP axis? Answer as a pair "
            "(GB, GB)."),
    unit=("GB", "GB"),
    hint="Ψ/(T·P) parameters per GPU; ZeRO-1 divides the 12 bytes of master weights and moments by D.",
    book_answer=(10, 4.375),
)
def _():
    return tuple(composition.model_states_per_gpu(40e9, 8, 8, 4, zero_stage=z) for z in (0, 1))


@exercise(
    "24.3",
    prompt=("A pipeline of 16 stages runs 32 microbatches. What is its bubble fraction with "
            "v = 1, 2 and 4 model chunks per GPU? Answer as a tuple of three fractions."),
    unit=("", "", ""),
    hint="(P − 1)/(v·m + P − 1).",
    book_answer=(0.319, 0.190, 0.105),
)
def _():
    return tuple(pipe.interleaved_bubble_fraction(16, 32, v) for v in (1, 2, 4))


@exercise(
    "24.4",
    prompt=("Same pipeline (16 stages, 32 microbatches). Take the chapter's step model: a step "
            "is m slots of work over (1 − bubble), and with v chunks per GPU the bubble is "
            "(P − 1)/(v·m + P − 1) while the pipeline's sends grow by (v − 1)·T_comm, T_comm "
            "being the pipeline communication of one pass. Going from v = 1 to v = 2 pays when "
            "T_comm is below what fraction of T_work, the step's time at v = 1 (bubble "
            "included, sends left out)?"),
    hint=("v chunks idle (P − 1)/v slots instead of P − 1: the time saved is b₁·(1 − 1/v)·T_work "
          "with b₁ = (P − 1)/(m + P − 1), the same as T_work·(b₁ − b₂)/(1 − b₂); Δbubble·T_work "
          "is only its first-order value."),
    book_answer=0.129,
    book_note=("The original edition says v = 2 pays when 0.129·T_c > T_comm, Δbubble times the "
               "compute time. Δbubble is the fall of a share of two different step times; the "
               "idle time two chunks remove is half the v = 1 step's idle slots, b₁·T/2 with b₁ "
               "= 15/47, so v = 2 pays below 15/94 = 0.160 of the v = 1 step (or 15/64 = 0.234 "
               "of its compute alone). Δbubble·T is only the first-order term."),
)
def _():
    # the gain is linear in T_comm and vanishes where T_comm/T_work equals the answer
    return composition.interleaving_gain(16, 32, 2, 1.0, 0.0)


@exercise(
    "24.5",
    prompt=("GPT-3 175B (catalog `gpt3-175b`) on 1024 GPUs as (DP, PP, TP) = (32, 8, 4), "
            "mixed-precision Adam. How many GB of model states (parameters, gradients, master "
            "weights, moments) does each GPU hold without ZeRO, and with ZeRO-1 over DP? Answer "
            "as a pair."),
    unit=("GB", "GB"),
    hint="16Ψ/(T·P), and with ZeRO-1 4Ψ/(T·P) + 12Ψ/(T·P·D).",
    book_answer=(87.4, 23.85),
)
def _():
    psi = models.get("gpt3-175b").num_params()
    return tuple(composition.model_states_per_gpu(psi, 4, 8, 32, zero_stage=z) for z in (0, 1))


def _axis_times(nvlink=300 * GB, ib=25 * GB, psi=None):
    """Exercise 24.6: communication seconds per step of each axis (Ψ = 12H²L unless given)."""
    H, L, dp, pp, tp, batch, seq, m, nbytes = 8192, 40, 8, 4, 4, 512, 2048, 32, 2
    b = batch // (dp * m)                                  # sequences per microbatch
    psi = 12 * H**2 * L if psi is None else psi
    tp_t = m * composition.microbatch_tp_time(b, seq, H, L, tp, pp, 1 * us, nvlink,
                                              bytes_per_value=nbytes)
    pp_t = 2 * m * comm.p2p_time(b * seq * H * nbytes, 2 * us, ib)
    dp_t = composition.dp_time(psi, tp, pp, dp, 2 * us, ib, grad_bytes=nbytes)
    return {"TP": tp_t, "PP": pp_t, "DP": dp_t}


# The original edition's own assumptions: 450 GB/s NVLink, 50 GB/s InfiniBand, Ψ = 30B.
_ORIGINAL_24_6 = {k: fmt_seconds(v) for k, v in _axis_times(450 * GB, 50 * GB, 30e9).items()}


@exercise(
    "24.6",
    prompt=("A 30B-class model with H = 8192 and L = 40 trains with DP = 8, PP = 4, TP = 4 (TP "
            "on NVLink at 300 GB/s, α = 1 µs; PP and DP on 25 GB/s InfiniBand, α = 2 µs), "
            "global batch 512 sequences of 2048 tokens, 32 microbatches per step, bf16. Which "
            "axis spends the most time communicating per step: 'TP', 'PP' or 'DP'? (TP: 4 ring "
            "all-reduces per layer and microbatch; PP: 2 messages per microbatch; DP: one ring "
            "all-reduce of Ψ/(T·P) bf16 gradients with Ψ = 12H²L.)"),
    kind="choice",
    choices=("TP", "PP", "DP"),
    hint="Multiply the per-microbatch TP time by the microbatches of the step.",
    book_answer="DP",
    book_note=("The original edition prices TP at 18 ms, PP at 43 ms and DP at 66 ms per step, "
               "on 450 GB/s NVLink and 50 GB/s InfiniBand, and calls DP the bottleneck. It "
               "counts 2 bytes per bf16 value, but prices a ring all-reduce at (N − 1)/N of the "
               "buffer instead of 2(N − 1)/N, for TP and DP alike. Its TP total, 100 MB for each "
               "of 80 layers, is one pass of 2 all-reduces per layer, while each GPU of the "
               "4-stage pipeline runs 4 all-reduces (2 forward, 2 backward) in each of its "
               "40/4 = 10 layers for every one of the step's 32 microbatches; its PP figure "
               "counts the forward sends only. Counted so, on its own links and with its own "
               f"Ψ = 30B (over the prompt's 40 layers), TP takes {_ORIGINAL_24_6['TP']}, DP "
               f"{_ORIGINAL_24_6['DP']} and PP {_ORIGINAL_24_6['PP']}: TP costs the most by "
               "far."),
)
def _():
    times = _axis_times()
    return max(times, key=times.get)


@exercise(
    "24.7",
    prompt=("Narayanan et al. report 141 TFLOP/s per A100 (peak 312) for GPT-3 175B (H = 12288, "
            "L = 96, V = 50257, s = 2048) counted with 96·B·s·L·H²(1 + s/(6H) + V/(16LH)), "
            "which includes one recomputed forward pass. What MFU (model FLOPs, no "
            "recomputation) does that correspond to?"),
    hint="Model FLOPs count three passes of the layers instead of four; the logits three times either way.",
)
def _():
    args = (1, 2048, 96, 12288, 50257)
    ratio = (composition.megatron_step_flops(*args, recompute=False)
             / composition.megatron_step_flops(*args))
    return 141e12 * ratio / 312e12


@exercise(
    "24.8",
    prompt=("PyTorch's plan on one GPU: a model of L = 32 layers with H = 4096 (biases and two "
            "LayerNorms per layer, bf16) trains on a (dp, tp) = (16, 8) mesh, `parallelize_module` "
            "with ColwiseParallel on separate Q, K, V and the MLP's first linear and "
            "RowwiseParallel on the output projection and the second linear, `fully_shard` on "
            "every layer (default reshard), one forward pass per step. Per step, how many TP "
            "all-reduces and how many FSDP all-gathers does one GPU issue, and how many MB does "
            "each all-gather carry (its gathered output)? Answer as a tuple (all-reduces, "
            "all-gathers, MB)."),
    unit=("", "", "MB"),
    hint=("Six all-reduces per layer: two forward, one backward per column-parallel input. Two "
          "gathers per layer. A TP rank holds 12H²/t + 7H/t + 6H parameters of a layer."),
)
def _():
    layers, hidden, tp = 32, 4096, 8
    return (layers * tpar.allreduces_per_layer(column_inputs=4), 2 * layers,
            composition.megatron_rank_params(hidden, 1, tp) * 2)
