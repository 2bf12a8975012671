"""Exercises for chapter 15, Tensor Parallelism from Linearity."""

import numpy as np

from dtbook import hardware, models
from dtbook import tensor_parallel as tpf
from dtbook.exercises import exercise
from dtbook.units import us

H100 = hardware.get("h100-sxm")
NVLINK = hardware.get("nvlink4")
F_BF16 = H100.peak_flops["bf16"]


@exercise(
    "15.1",
    prompt=("A row-parallel linear layer runs on P = 8 ranks, and every rank adds the whole "
            "bias b to its partial product XᵢWᵢ before the all-reduce. The result is "
            "XW + k·b. What is k?"),
    unit="",
    hint="The all-reduce sums whatever each rank holds, the bias included.",
)
def _():
    rng = np.random.default_rng(0)
    P, x, w, b = 8, rng.normal(size=(3, 16)), rng.normal(size=(16, 5)), rng.normal(size=5)
    summed = sum(xi @ wi + b for xi, wi in zip(np.split(x, P, 1), np.split(w, P, 0)))
    return float(np.mean((summed - x @ w) / b))


@exercise(
    "15.2",
    prompt=("A layer with d = 4096, sequence 2048, batch 4 runs at TP = 8 in fp16. How big "
            "is the activation an all-reduce carries (MiB), how many bytes does each rank "
            "send in one ring all-reduce of it (MiB), and how many in the forward passes of "
            "80 such layers, two all-reduces each (GiB)? Answer as a triple."),
    unit=("MiB", "MiB", "GiB"),
    hint="n = b·s·d·2 bytes; a ring all-reduce sends 2(P − 1)/P · n per rank.",
    book_answer=("64 MB", "112 MB", "17.92 GB"),
    book_note=("The original edition counts in binary units and labels them decimal: its "
               "64 MB and 112 MB are 64 MiB and 112 MiB (67.1 MB and 117.4 MB), and its "
               "17.92 GB is 80 × 224 MiB = 17,920 MiB, which is 17.5 GiB or 18.8 GB."),
)
def _():
    n = tpf.activation_bytes(4, 2048, 4096, bytes_per_element=2)
    per_ar = 2 * (8 - 1) / 8 * n
    return n, per_ar, 80 * tpf.layer_comm_bytes(4, 2048, 4096, 8, bytes_per_element=2, backward=False)


@exercise(
    "15.3",
    prompt=("The same layer (d = 4096, s = 2048, b = 4, TP = 8, fp16) on H100s (989.4 TFLOP/s "
            "bf16 dense) over NVLink 4 (450 GB/s per direction, α = 1 µs). Count the forward "
            "FLOPs consistently with 6Ψ, 24bsd² + 4bs²d, and price the two forward "
            "all-reduces as ring all-reduces. What is the forward pass's R = T_compute / "
            "T_comm?"),
    unit="",
    hint="Compute per rank: (24bsd² + 4bs²d)/(P·F). Each all-reduce: 2(P − 1)α + "
         "2(P − 1)/P · n/β.",
    book_answer=0.35,
    book_note=("The original edition counts the layer's forward FLOPs as 4bsd² + 2bs²d "
               "(6.87 × 10¹¹, 86.9 µs) where the four attention projections and the 4d MLP "
               "do 24bsd² (2 FLOPs per multiply-add on 12d² weights, the 2Ψ per token of 6Ψ) "
               "and attention 4bs²d, and it divides by 900 GB/s, the two directions of NVLink "
               "added; so it finds R = 0.35. Its summary table then prints 42.9 µs and "
               "R = 0.17, half its own worked example. With the 6Ψ count and 450 GB/s per "
               "direction the forward R is about 0.8 (and the training step's, with three "
               "times the FLOPs and twice the all-reduces, about 1.2)."),
)
def _():
    return tpf.compute_comm_ratio(4, 2048, 4096, 8, F_BF16, 1 * us, NVLINK.beta,
                                  bytes_per_element=2, backward=False)


@exercise(
    "15.4",
    prompt=("In the bandwidth-bound, short-sequence limit a training step of one layer has "
            "R = dβ/(c·P·F). For d = 8192, TP = 8, H100 bf16 (989.4 TFLOP/s) and NVLink 4 "
            "(450 GB/s per direction), fp16 activations, with the 6Ψ-consistent FLOP count "
            "(72bsd² per layer, forward and backward) and four ring all-reduces of b·s·d "
            "elements, what is R?"),
    unit="",
    hint="c = 4 · 2(P − 1)/P · 2 bytes / 72.",
    book_answer=0.23,
    book_note=("The original edition writes R = dβ/(2PF) with F = 989 TFLOP/s and β = 900 "
               "GB/s, which gives 0.46 for d = 8192 and P = 8, and then prints 0.23. Its c = 2 "
               "comes from counting only 4bsd² FLOPs per layer; with 72bsd² for forward and "
               "backward (6Ψ), four all-reduces and β per direction, R is about 2.4: an "
               "8192-wide layer at TP = 8 is compute-bound on NVLink."),
)
def _():
    return tpf.ratio_bandwidth_limit(8192, 8, F_BF16, NVLINK.beta, bytes_per_element=2)


@exercise(
    "15.5",
    prompt=("A LayerNorm whose hidden dimension is split across ranks all-reduces two fp32 "
            "numbers per token, Σx and Σx². For batch 4 and sequence 2048, how many bytes is "
            "that (KiB), and how many times smaller is it than the fp16 activation (d = 4096) "
            "that a tensor-parallel all-reduce carries? Answer as a pair."),
    unit=("KiB", ""),
    hint="2·b·s·4 bytes against b·s·d·2 bytes.",
    book_answer=("64 KB", 2000),
    book_note=("The original edition compares the 64 KiB of statistics with a '128 MB' "
               "activation and calls them 2000× smaller. The fp16 activation of this shape "
               "is 64 MiB (its 128 MB would be fp32), so the statistics are 1024× smaller: "
               "d·2/(2·4) = d/4."),
)
def _():
    stats = tpf.layernorm_stats_bytes(4, 2048, bytes_per_element=4)
    return stats, tpf.activation_bytes(4, 2048, 4096, bytes_per_element=2) / stats


@exercise(
    "15.6",
    prompt=("A model with 32 attention heads is to run at TP = 6. 32/6 is not whole, so the "
            "heads are padded to the next multiple of 6. How many heads after padding, and "
            "what fraction of extra attention work does the padding add (as a percentage of "
            "the 32 real heads)? Answer as a pair."),
    unit=("", "%"),
    hint="h' = ⌈h/P⌉·P; the waste is (h' − h)/h.",
    book_answer=(36, "12.5%"),
)
def _():
    return float(tpf.padded_heads(32, 6)), float(tpf.head_padding_waste(32, 6))


@exercise(
    "15.7",
    prompt=("Llama 3 70B (catalog `llama3-70b`) uses grouped-query attention. At TP = 8, how "
            "many query heads and how many key/value heads does each rank hold? Answer as a "
            "pair (query heads, KV heads)."),
    unit=("", ""),
    hint="Look up heads and kv_heads in dtbook.models; both are split P ways.",
)
def _():
    cfg = models.get("llama3-70b")
    return tpf.heads_per_rank(cfg.heads, 8), tpf.kv_heads_per_rank(cfg.kv_heads, 8)


@exercise(
    "15.8",
    prompt=("A layer is parallelised module by module: Q, K and V each as its own "
            "column-parallel linear, the attention output and the MLP's second linear "
            "row-parallel, the MLP's first linear column-parallel. How many all-reduces "
            "does one forward-and-backward pass of the layer run?"),
    unit="",
    hint="Forward: one per row-parallel layer. Backward: one per column-parallel layer "
         "whose input gradient is a partial sum.",
)
def _():
    return tpf.allreduces_per_layer(backward=True, column_inputs=4)
