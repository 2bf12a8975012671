"""Exercises for chapter 19, The Memory Equation."""

from dtbook import memory, models
from dtbook.exercises import exercise
from dtbook.units import GB

LLAMA = models.get("llama2-7b")


@exercise(
    "19.1",
    prompt=("A 13B-parameter model trains with mixed-precision AdamW (2 + 2 + 4 + 8 = 16 "
            "bytes per parameter) on 8 GPUs. How many GB of model states does each GPU hold "
            "under ZeRO-1, ZeRO-2 and ZeRO-3? Answer as a triple."),
    unit=("GB", "GB", "GB"),
    hint="ZeRO-1 shards the 12 bytes of master and moments, ZeRO-2 also the 2 of gradients, "
         "ZeRO-3 everything.",
    book_answer=(71.5, 48.25, 26),
    book_note=("The original edition prints 48.25 GB for ZeRO-2. ZeRO-2 keeps the 2-byte "
               "weights whole (26 GB) and shards the other 14 bytes per parameter "
               "(182 GB / 8 = 22.75 GB): 48.75 GB. Its ZeRO-1 and ZeRO-3 figures are right."),
)
def _():
    return tuple(memory.zero_state_bytes(13e9, 8, stage) for stage in (1, 2, 3))


@exercise(
    "19.2",
    prompt=("For h = 4096 and a = 32, at what sequence length do a layer's attention-matrix "
            "activations equal the rest of its activations, (a) in the count 11·sbh + a·s²·b "
            "elements, (b) in the complete count s·b·h·(34 + 5as/h) bytes? Answer as a pair."),
    unit=("", ""),
    hint="Set the linear term equal to the quadratic one and solve for s.",
    book_answer=(1408, 4352),
    book_note=("The original edition's exercise gives 34H/A = 4,352 for the complete count. "
               "34 is bytes per s·b·h, and the attention matrix costs 5 bytes per a·s²·b "
               "(softmax output, dropout mask, dropped-out probabilities), so s* = 34h/(5a) "
               "= 870; its table multiplies 34 by 2 bytes again and counts the matrix once "
               "(2 bytes), which moves the crossover fivefold."),
)
def _():
    return (memory.quadratic_crossover_seq(4096, 32, 11, 1),
            memory.quadratic_crossover_seq(4096, 32))


@exercise(
    "19.3",
    prompt=("A 70B-parameter model trains with mixed-precision AdamW, its model states "
            "sharded by ZeRO-3 over GPUs of 80 GB. Ignoring activations and buffers, what is "
            "the fewest GPUs that can hold the model states?"),
    unit="",
    hint="16 bytes per parameter in all, divided by 80 GB, rounded up.",
    book_answer=2,
    book_note=("The original edition says the 70B model trains on 2 GPUs with ZeRO-3. Its "
               "states are 16 × 70e9 = 1,120 GB; on 2 GPUs that is 560 GB each, seven times "
               "an 80 GB GPU. At least 14 GPUs are needed (11 with SGD and momentum, 7 with "
               "plain SGD), before any activation."),
)
def _():
    return memory.min_devices(memory.model_state_bytes(70e9), 80 * GB)


def _largest_batch(limit=40 * GB):
    batch = 0
    while memory.device_memory(LLAMA.num_params(), LLAMA.layers, LLAMA.hidden, LLAMA.heads,
                               LLAMA.vocab, batch=batch + 1, seq=2048, dp=8, zero_stage=3,
                               recompute=4, attention="eager", dropout=True).total <= limit:
        batch += 1
    return batch


@exercise(
    "19.4",
    prompt=("LLaMA-2 7B (L = 32, h = 4096, a = 32, V = 32,000) trains on 40 GB GPUs with "
            "ZeRO-3 over 8 of them, sequences of 2,048 tokens, eager attention with dropout, "
            "and a checkpoint at every 4th layer's input (recompute=4). What is the largest "
            "micro-batch (in sequences) that fits, by memory.device_memory?"),
    unit="",
    rtol=0.0,
    hint="Model states are 16Ψ/8; each sequence adds 8 kept layer inputs, 4 recomputed "
         "layers and its logits.",
    book_answer=4,
    book_note=("The original edition boxes a batch of 4 (5 with careful tuning): 24 GB free "
               "after 14 GB of ZeRO-3 states and 2 GB of overhead, over 5.4 GB per sequence, "
               "(32/4 + 4) × 0.45 GB, which counts each of the 8 kept layer inputs as a whole "
               "layer; its check then speaks of 7 × 2,048 tokens per GPU. A kept input is 2sbh "
               "bytes (17 MB); with the 4 recomputed layers in chapter 06's complete count, "
               "eager attention with dropout, and the fp32 logits, a sequence takes 4.2 GB of "
               "the 26.5 GB left beside 13.5 GB of states, so 6 fit."),
)
def _():
    return _largest_batch()


@exercise(
    "19.5",
    prompt=("A 7B-parameter model (Ψ = 7e9, bf16 weights) uses 120 GB while training. What "
            "is its memory efficiency η = Ψ·b_p / M, in percent?"),
    unit="%",
    hint="14 GB of weights out of 120 GB.",
)
def _():
    return 7e9 * 2 / (120 * GB)


@exercise(
    "19.6",
    prompt=("The allocator holds 100 GB, of which live tensors use 85 GB. What are the "
            "fragmentation (alloc − used)/alloc and the overhead alloc/used − 1, in percent? "
            "Answer as a pair."),
    unit=("%", "%"),
    hint="The same 15 GB over two denominators.",
)
def _():
    alloc, used = 100 * GB, 85 * GB
    return (alloc - used) / alloc, alloc / used - 1


@exercise(
    "19.7",
    prompt=("LLaMA-3 8B has a vocabulary of 128,256 tokens. How many GB do its fp32 logits "
            "take for one sequence of 8,192 tokens without tensor parallelism?"),
    unit="GB",
    hint="4·s·b·V bytes.",
)
def _():
    cfg = models.get("llama3-8b")
    return memory.device_memory(cfg.num_params(), cfg.layers, cfg.hidden, cfg.heads, cfg.vocab,
                                batch=1, seq=8192)["logits"]
