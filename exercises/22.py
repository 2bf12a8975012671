"""Exercises for chapter 22, Offloading: Extending Memory Beyond the GPU."""

import math

from dtbook import hardware, memory, offload, zero
from dtbook.exercises import exercise
from dtbook.units import GB, ms

B = 1e9          # a billion parameters
PCIE4 = 32 * GB  # PCIe 4.0 x16 per direction, as the original edition rounds it (given data)


@exercise(
    "22.1",
    prompt=("A 70B-parameter model keeps its bf16 weights in host memory and streams them to "
            "the GPU over PCIe 4.0 x16 at 32 GB/s for every forward pass. The forward pass "
            "computes for 2 s, spread evenly over 80 layers. How long does streaming all the "
            "weights take, how long does one layer's share take, and by what factor must the "
            "batch (hence each layer's compute) grow for a layer's transfer to hide behind "
            "one layer's compute? Answer as a triple."),
    unit=("s", "ms", ""),
    hint="2 bytes per parameter; per layer Ψ/80 parameters against 2 s/80 of compute.",
    book_answer=("4.375 s", "54.7 ms", 2.19),
)
def _():
    t_all = offload.transfer_time(70 * B * 2, PCIE4)
    t_layer = offload.transfer_time(70 * B * 2 / 80, PCIE4)
    return t_all, t_layer, t_layer / (2.0 / 80)


@exercise(
    "22.2",
    prompt=("A 175B-parameter model trains with mixed-precision Adam on 8 GPUs, the bf16 "
            "parameters sharded by ZeRO-3 and the optimizer (fp32 master weights and both "
            "moments) offloaded to host memory. How many bytes of parameters does each GPU "
            "hold at rest, and how many bytes of optimizer state does the host hold? Answer "
            "as a pair."),
    unit=("GB", "TB"),
    hint="2Ψ/8 on each GPU; 4 + 4 + 4 bytes per parameter on the host.",
    book_answer=("44 GB", "1.4 TB"),
    book_note=("The original edition gives 1.4 TB of optimizer state, which is 8 bytes per "
               "parameter: Adam's two moments without the fp32 master weights. With them it "
               "is 12Ψ = 2.1 TB, more than the 2 TB of host memory the same example assumes, "
               "so part of it must go to NVMe."),
)
def _():
    on_gpu = memory.zero_state_breakdown(175 * B, 8, 3)["params"]
    return on_gpu, offload.host_bytes(175 * B)


@exercise(
    "22.3",
    prompt=("An offloaded step computes for 100 ms, moves data over PCIe for 80 ms and "
            "synchronises for 5 ms. What share of the step is compute when the transfers run "
            "after the compute, when they overlap it, and when they overlap it and the "
            "synchronisation shrinks to 1 ms? Answer as a triple of percentages."),
    unit=("%", "%", "%"),
    hint="η = T_comp / T_step, with T_step = T_comp + T_xfer + T_sync or "
         "max(T_comp, T_xfer) + T_sync.",
    book_answer=("54%", "95.2%", "99%"),
)
def _():
    return (offload.efficiency(100 * ms, 80 * ms, 5 * ms, overlap=False),
            offload.efficiency(100 * ms, 80 * ms, 5 * ms),
            offload.efficiency(100 * ms, 80 * ms, 1 * ms))


@exercise(
    "22.4",
    prompt=("Layers stream over one PCIe link: each takes 80 ms to transfer and 50 ms to "
            "compute. In steady state, how long does each layer take with double buffering, "
            "how long with triple buffering, and how much faster is triple than double? "
            "Answer as a triple."),
    unit=("ms", "ms", ""),
    hint="A link carries one transfer at a time: over many layers it must move every "
         "layer's bytes, whatever the number of buffers.",
    book_answer=("80 ms", "50 ms", 1.6),
    book_note=("The original edition says a third buffer makes each layer take "
               "max(T_c, T_t/2) = 50 ms, 1.6 times faster. On one link the link must still "
               "carry 80 ms of bytes per layer, so any depth from two buffers on gives "
               "max(T_c, T_t) = 80 ms, and the third buffer buys nothing; T_t/2 needs a "
               "second link of the same bandwidth. Chapter 22 measures both."),
)
def _():
    two = offload.buffered_item_time(50 * ms, 80 * ms, 2)
    three = offload.buffered_item_time(50 * ms, 80 * ms, 3)
    return two, three, two / three


@exercise(
    "22.5",
    prompt=("10 GB of bf16 weights are read from an NVMe drive at 7 GB/s. Compressing them "
            "with LZ4 shrinks them 1.5 times at 2 GB/s, and compression finishes before the "
            "transfer starts. How long does the raw transfer take, how long does "
            "compress-then-transfer take, what compression rate is the break-even, and how "
            "long does compress-then-transfer take with a GPU compressor at 50 GB/s? Answer "
            "as a 4-tuple."),
    unit=("s", "s", "GB/s", "s"),
    hint="n/C + n/(R·B) against n/B; the break-even is C = B/(1 − 1/R).",
    book_answer=("1.43 s", "5.95 s", "21 GB/s", "1.15 s"),
)
def _():
    n, nvme, r = 10 * GB, 7 * GB, 1.5
    return (offload.transfer_time(n, nvme), offload.compressed_time(n, nvme, r, 2 * GB),
            offload.compression_breakeven(nvme, r), offload.compressed_time(n, nvme, r, 50 * GB))


@exercise(
    "22.6",
    prompt=("An A100 (its dense bf16 peak from the catalog) streams each layer's bf16 "
            "weights over PCIe 4.0 x16 at 32 GB/s while it computes the previous layer. How "
            "many tokens must a micro-batch hold for the transfer to hide, and how many "
            "sequences of 2,048 tokens is that, rounded up? Answer as a pair."),
    unit=("", ""),
    hint="12H² parameters of 2 bytes per layer against 24·B·S·H² FLOP: H cancels.",
)
def _():
    tokens = offload.overlap_tokens(hardware.get("a100-80gb").peak("bf16"), PCIE4)
    return tokens, math.ceil(tokens / 2048)


@exercise(
    "22.7",
    prompt=("Each layer's parameters take 2 GB and cross a 32 GB/s link; a layer computes "
            "for 50 ms. How long does one layer's transfer take, how many layers ahead "
            "k* = ⌈T_t/T_c⌉ must its transfer start, how much memory do k* + 1 layer buffers "
            "take, and how long does each layer take in steady state if the transfers share "
            "the one link? Answer as a 4-tuple."),
    unit=("ms", "", "GB", "ms"),
    hint="Lookahead hides a transfer's latency, not its bytes: one link still moves one "
         "layer per T_t.",
    book_answer=("62.5 ms", 2, "6 GB", "62.5 ms"),
)
def _():
    t_t = offload.transfer_time(2 * GB, PCIE4)
    k = zero.prefetch_lookahead(t_t, 50 * ms)
    return t_t, k, (k + 1) * 2 * GB, offload.buffered_item_time(50 * ms, t_t, k + 1)


@exercise(
    "22.8",
    prompt=("The 175B model of exercise 22.2 is split by 8-way tensor parallelism and its "
            "shards are sharded again by ZeRO-3 over 8 data-parallel ranks (64 GPUs). How "
            "many bytes of bf16 parameters does each GPU hold at rest?"),
    unit="GB",
    hint="Tensor parallelism divides the parameters by t, ZeRO-3 the rest by d.",
    book_answer="5.5 GB",
)
def _():
    return memory.zero_state_breakdown(175 * B / 8, 8, 3)["params"]
