"""Exercises for chapter 25, 4D and 5D Parallelism."""

from dtbook import axes, comm, memory, models, moe
from dtbook import sequence_parallel as sp_
from dtbook.exercises import exercise

_ROUTING = [0.30, 0.05, 0.25, 0.10, 0.05, 0.10, 0.10, 0.05]


@exercise(
    "25.1",
    prompt=("An MoE layer has 64 experts spread over an EP group of 8 GPUs (8 experts each). "
            "Each GPU holds 2,048 tokens of hidden size 4096 in fp16 and routes each token to "
            "its top 2 experts, uniformly on average. How many bytes does one GPU send to the "
            "other seven in one dispatch all-to-all? Answer in MB."),
    unit="MB",
    hint="Of the k·T token copies a rank routes, a share 1/EP stays on its own experts.",
    book_answer=29.4,
)
def _():
    return comm.traffic("alltoall", moe.alltoall_bytes(2048, 4096, 2, 2), 8).sent_bytes


@exercise(
    "25.2",
    prompt=("Context parallelism over 8 GPUs, sequence 131,072 tokens, batch 2, K and V of "
            "width 8192 each in bf16. For one layer's attention, how many bytes of K and V "
            "does a GPU hold (a) when it all-gathers the whole sequence's K and V, (b) in ring "
            "attention with two blocks in hand (the one it computes on and the one arriving)? "
            "Answer as a pair in GB."),
    unit=("GB", "GB"),
    hint="One ring block is 2·B·(S/CP)·H·2 bytes (K and V); the all-gather holds all CP blocks.",
    book_answer=(8.59, 2.14),
)
def _():
    block = sp_.ring_kv_step_bytes(2, 131072, 8192, 8)
    return 8 * block, 2 * block


@exercise(
    "25.3",
    prompt=("A router sends 1,000 tokens (top-1) to 8 experts in the shares 30, 5, 25, 10, 5, "
            "10, 10, 5 %. Each expert has C = ⌈c·T/E⌉ slots with capacity factor c = 1.25. "
            "What fraction of the tokens is dropped, and what is the smallest capacity factor "
            "that drops none? Answer as a pair (fraction, factor)."),
    unit=("", ""),
    rtol=0.02,
    hint="Only the experts whose load exceeds C drop; no drops needs C ≥ the largest load.",
    book_answer=(0.238, 2.4),
)
def _():
    return axes.dropped_tokens(_ROUTING, 1000, 1.25) / 1000, axes.min_capacity_factor(_ROUTING)


@exercise(
    "25.4",
    prompt=("Data parallelism grows from 16 to 64 ranks (the global batch grows with it). By "
            "what factor does the latency term of the gradient all-reduce grow for a ring, and "
            "for a tree, and by what factor do the bytes each rank sends grow (ring)? Answer "
            "as a triple."),
    unit=("", "", ""),
    hint="A ring all-reduce takes 2(P − 1) steps and sends 2(P − 1)/P·n; a tree 2·log₂P steps.",
    book_answer=(4.2, 1.5, 1.05),
)
def _():
    return (axes.dp_latency_growth(16, 64, "ring"), axes.dp_latency_growth(16, 64, "tree"),
            axes.dp_bandwidth_growth(16, 64))


@exercise(
    "25.5",
    prompt=("A 1T-parameter MoE (200B dense, 800B in experts) trains on 16,384 GPUs as DP 8 × "
            "PP 16 × TP 8 × CP 4 × EP 4, mixed-precision Adam, no ZeRO. How many GB of model "
            "state (weights, gradients, fp32 master weights, Adam's m and v) does each GPU "
            "hold?"),
    unit="GB",
    hint=("Dense weights are split by TP·PP, expert weights by TP·PP·EP; each parameter "
          "carries 2 + 2 + 4 + 8 bytes."),
    book_answer=31,
    book_note=("The original edition adds 3.1 GB of dense and 3.1 GB of expert weights to 24.8 "
               "GB of optimizer state (4 × the 2-byte weights: Adam's m and v in fp32), 31 GB, "
               "and reaches about 65 GB with 34 GB of activations. That is 10 bytes per "
               "parameter: it leaves out the bf16 gradients (2 bytes) and the fp32 master "
               "weights (4 bytes). With all 16 bytes the model state is 50 GB, and with the same"
               " activations the GPU needs about 84 GB, nearly all of an H100's 80 GiB (85.9 GB); ZeRO-1 "
               "over the ranks that replicate each weight brings the state back to about 13 GB."),
)
def _():
    return axes.state_bytes(200e9, 800e9, tp=8, pp=16, ep=4)


@exercise(
    "25.6",
    prompt=("Llama 3 70B (catalog `llama3-70b`: hidden 8192, 8 KV heads of 128) trains at "
            "262,144 tokens per sequence with TP 8 and CP 8 (ring attention), one sequence "
            "per micro-batch, bf16. Per layer and micro-batch, forward and backward, how many "
            "times more bytes does a GPU send for TP (four ring all-reduces) than for CP (ring "
            "attention as Megatron-Core runs it: K and V around the ring forward, and in "
            "backward K and V again with their gradients)?"),
    hint=("TP sends 4·2(t − 1)/t·b(S/c)H·2; CP sends 3(c − 1) blocks of 2·b(S/c)·(H_kv/t)·2 "
          "with H_kv = 8·128: c − 1 forward, 2(c − 1) backward."),
)
def _():
    cfg = models.get("llama3-70b")
    kv = cfg.kv_heads * cfg.head_dim
    t = axes.step_traffic(cfg.hidden, 1, 1e9, batch=1, seq=262144, microbatches=1, tp=8, cp=8,
                          kv_hidden=kv, kv_saved=False)
    return t["tp"] / t["cp"]


@exercise(
    "25.7",
    prompt=("An MoE layer with hidden size 12,288 has 128 experts, each a two-matrix FFN "
            "(H × 4H and 4H × H) in bf16. How many GB do one layer's experts take, and how "
            "many per GPU with EP = 8? Answer as a pair in GB."),
    unit=("GB", "GB"),
    rtol=0.015,
    hint="One expert is 2·H·4H weights of 2 bytes, 16H² bytes.",
    book_answer=(310, 39),
)
def _():
    from dtbook import moe

    per_layer = moe.expert_params(12288, 4 * 12288, 128, matrices=2)
    return axes.expert_bytes(per_layer), axes.expert_bytes(per_layer, ep=8)


@exercise(
    "25.8",
    prompt=("Llama 3 405B (catalog `llama3-405b`) trains at 8,192 tokens per sequence with TP 8, "
            "PP 16, CP 1, and at 131,072 tokens with CP 16 (Dubey et al. 2024, Table 4). "
            "Without CP, how many times the activation memory per GPU of the 8K run would the "
            "128K run need (same micro-batch, schedule and recompute)?"),
    hint="Activations per layer are linear in the tokens a GPU holds, S/CP (flash attention).",
)
def _():
    cfg = models.get("llama3-405b")
    shape = dict(tp=8, pp=16, ffn_hidden=cfg.ffn_hidden)
    a = lambda seq, cp: axes.device_activation_bytes(1, seq, cfg.hidden, cfg.heads, cfg.layers,
                                                     cp=cp, **shape)
    return a(131072, 1) / a(8192, 1)
