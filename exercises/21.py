"""Exercises for chapter 21, Activation Recomputation."""

from dtbook import activations, pipeline_parallel, recompute
from dtbook.exercises import exercise
from dtbook.units import GB, MB, ms


@exercise(
    "21.1",
    prompt=("A 48-layer model keeps 1 GB of activations per layer, and a kept layer input "
            "is counted as costing a whole layer (the form M = (L/k + k)·M_layer). What "
            "checkpoint interval k* minimises the memory, how much memory does it keep, and "
            "how many times less is that than storing every layer? Answer as a triple "
            "(k* unrounded)."),
    unit=("", "GB", ""),
    hint="d/dk (L/k + k) = 0 gives k* = √L and memory 2√L·M_layer; the reduction is √L/2.",
)
def _():
    k = activations.optimal_checkpoint_interval(48)
    kept = activations.checkpointed_activation_bytes(48, 1 * GB, k)
    return k, kept, 48 * GB / kept          # every layer stored, over what k* keeps


@exercise(
    "21.2",
    prompt=("A compute-bound step takes 100 ms without recomputation. How long does it take "
            "when every layer is checkpointed, and when half of the layers are? Answer as a "
            "pair."),
    unit=("ms", "ms"),
    hint="Forward F, backward 2F: recomputing a fraction c of the forward adds c·F, an "
         "overhead of c/3.",
)
def _():
    return recompute.recompute_step_time(100 * ms, 1.0), recompute.recompute_step_time(100 * ms, 0.5)


@exercise(
    "21.3",
    prompt=("A GPT layer with B = 4, S = 4096, H = 4096 and 32 heads, 16-bit activations, "
            "eager attention with dropout (chapter 06's count): bytes per layer without "
            "recomputation and with selective recomputation of the attention core? Answer "
            "as a pair."),
    unit=("GB", "GB"),
    hint="sbh(34 + 5as/h) without; selective drops the 5as²b term and keeps 34·sbh.",
)
def _():
    return (activations.layer_activation_bytes(4, 4096, 4096, 32),
            activations.layer_activation_bytes(4, 4096, 4096, 32, recompute="selective"))


@exercise(
    "21.4",
    prompt=("A 7B model (L = 32, H = 4096, 32 heads) trains on B = 4 sequences of S = 2048 "
            "tokens, 16-bit activations, eager attention with dropout. Using chapter 06's "
            "complete count, how many bytes of activations does one layer keep, and all 32? "
            "Answer as a pair."),
    unit=("GB", "GB"),
    hint="sbh(34 + 5as/h) per layer, times L.",
    book_answer=("5.63 GB", "180 GB"),
    book_note=("The original edition counts a layer as 20BSH + 4BnS² bytes and then prints "
               "1.34 + 4.29 = 5.63 GB per layer and 180 GB for 32 layers. Its own formula "
               "gives 0.67 + 2.15 = 2.82 GB: each printed term is exactly twice the formula's. "
               "The formula itself is also short of the complete count of chapter 06 "
               "(Korthikanti et al.), sbh(34 + 5as/h) = 3.83 GB per layer, 122 GB for 32."),
)
def _():
    per_layer = activations.layer_activation_bytes(4, 2048, 4096, 32)
    return per_layer, activations.model_activation_bytes(32, 4, 2048, 4096, 32)


@exercise(
    "21.5",
    prompt=("A 4-stage 1F1B pipeline runs 8 micro-batches; each stage holds 20 layers, a "
            "layer keeps 64 MB of activations per micro-batch and its input alone is 4 MB. "
            "Peak activation bytes on the first stage: without recomputation, with √L "
            "checkpointing in the conservative form (a kept input costs a whole layer, "
            "k = √20), and with full recomputation (keep every layer's input, recompute one "
            "layer at a time)? The stage runs one backward pass at a time. Answer as a triple."),
    unit=("GB", "GB", "MB"),
    hint="The first stage holds p micro-batches in flight, each keeping its (L/k) checkpoints; "
         "a stage runs one backward at a time, so one block of k layers is recomputed at once: "
         "p·(L/k)·boundary + k·M_layer.",
    book_answer=("5.12 GB", "2.3 GB", "256 MB"),
    book_note=("The original edition gives 2.3 GB for √L checkpointing, 4 × 2 × 4.5 × 64 MB, "
               "and 256 MB for full checkpointing, 4 × 64 MB. The first counts a recomputed "
               "block for each of the 4 micro-batches in flight, but a stage runs one backward "
               "at a time, so only one block is live: 4 × (20/√20) × 64 MB + √20 × 64 MB = "
               "1.43 GB. The second keeps one layer's activations per micro-batch and no "
               "recomputed layer; keeping each of the 20 layer inputs (4 MB) of the 4 "
               "micro-batches and recomputing one layer at a time takes 4 × 20 × 4 MB + 64 MB "
               "= 384 MB. The 5.12 GB without recomputation agrees."),
)
def _():
    p = pipeline_parallel.activations_in_flight(4, 8)  # micro-batches in flight, first stage
    layers, layer, boundary = 20, 64 * MB, 4 * MB
    k = activations.optimal_checkpoint_interval(layers)
    # p micro-batches keep (L/k) inputs each; one block of k layers is live in backward:
    # the checkpointed form over p·L layers, as memory.device_memory counts a stage
    return (p * layers * layer,
            float(activations.checkpointed_activation_bytes(p * layers, layer, k)),
            activations.checkpointed_activation_bytes(p * layers, layer, 1, boundary_bytes=boundary))


@exercise(
    "21.6",
    prompt=("What share of extra compute does a training step pay when it recomputes a "
            "quarter, half, and all of its forward pass (forward F, backward 2F)? Answer as "
            "a triple of fractions of the step."),
    unit=("", "", ""),
    hint="c/3: the recomputed forward over the 3F of the step.",
)
def _():
    return tuple(recompute.recompute_overhead(c) for c in (0.25, 0.5, 1.0))


@exercise(
    "21.7",
    prompt=("A layer of 16 heads attends over S = 8192 tokens with a micro-batch of B = 2, "
            "bf16 activations. How many bytes does one layer's softmax output occupy, the "
            "tensor that selective recomputation stops keeping (without dropout)?"),
    unit="GB",
    hint="a·S²·B values of 2 bytes.",
)
def _():
    full = activations.activation_breakdown(2, 8192, 2048, 16, dropout=False)
    return full["softmax_output"]
