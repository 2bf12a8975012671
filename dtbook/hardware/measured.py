"""What others measured on the catalog's hardware, each figure with its source: NCCL bus
bandwidths (chapters 13, 27) and the rates the planner times kernels at (chapter 27): matmul
ceilings and per-shape GEMMs, HBM bandwidth, fused attention; :func:`plannable` names the
accelerators that have all three the planner needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..units import GB, TB, TFLOP
from .catalog import _ACCELERATORS, _key

__all__ = ["BusBandwidth", "published_busbw", "BusBandwidthCurve", "busbw_curve",
           "MatmulCeiling", "matmul_ceiling", "MeasuredGemm", "published_gemms",
           "MemoryCeiling", "memory_ceiling", "AttentionKernel", "attention_kernel", "plannable"]


# ---------------------------------------------------------------------- measured by others
# What NCCL reaches on real fabrics, as nccl-tests reports it (chapter 13 sets these beside
# the α-β model). Maintainers' statements of the expected figure, not one user's run.

@dataclass(frozen=True)
class BusBandwidth:
    """A published nccl-tests bus bandwidth (chapter 13): ``busbw_low``..``busbw_high`` in
    bytes/s (nccl-tests' busbw, :func:`dtbook.comm.bus_bandwidth`), for ``collective`` on
    ``ranks`` GPUs over the catalog link ``link``, with NCCL's ``algorithm``."""

    name: str
    collective: str
    link: str
    ranks: int
    algorithm: str
    busbw_low: float
    busbw_high: float
    setting: str
    source: str


_NCCL_TESTS_212 = ("S. Jeaugey (NVIDIA), NVIDIA/nccl-tests issue #212, 2024-05-06 "
                   "(https://github.com/NVIDIA/nccl-tests/issues/212): '450GB/s is the line "
                   "rate. With the protocol overhead (~20%) NCCL can get an effective NVLink "
                   "bandwidth of 370GB/s ... with NCCL_ALGO=RING'; with NVLink SHARP 'on 8 GPUs, "
                   "you should reach a peak busBw of ~480GB/s (algbw ~275GB/s)'")
_NCCL_TESTS_290 = ("D. Addison (NVIDIA), NVIDIA/nccl-tests issue #290, 2025-03-03 "
                   "(https://github.com/NVIDIA/nccl-tests/issues/290): single-node H100 all-reduce "
                   "at 476 GB/s 'in the expected range'; 'For NDR @ 400Gbps you should see "
                   "46-48GB/s per NIC' (two nodes, NCCL_ALGO=RING)")

_AZURE = ("Microsoft Azure, AI-benchmarking-guide "
          "(https://github.com/Azure/AI-benchmarking-guide, commit 8fd0c6e, September 2024), "
          "Azure_Results/")

# nccl-tests prints sizes in its own shorthand (1K = 1024 B, 1M = 2^20 B, "33M" = 2^25 B)
_A100_AR_SIZES = tuple(2.0 ** k for k in range(10, 34))          # 1K .. 8G
_A100_AR_BUSBW = tuple(x * GB for x in (
    0.04, 0.08, 0.17, 0.33, 0.67, 1.37, 2.70, 5.15, 10.11, 19.24, 36.22, 53.54, 71.43, 89.99,
    109.22, 132.77, 166.63, 174.18, 213.87, 221.58, 228.10, 230.22, 230.48, 231.58))
_PUBLISHED = {b.name: b for b in (
    BusBandwidth("h100-nvswitch-ring", "allreduce", "nvlink4", 8, "ring", 370 * GB, 370 * GB,
                 "8 H100 SXM in one node through NVSwitch, NCCL_ALGO=RING, large buffers",
                 _NCCL_TESTS_212),
    BusBandwidth("h100-nvswitch-nvls", "allreduce", "nvlink4", 8, "nvls", 476 * GB, 480 * GB,
                 "8 H100 SXM in one node, NVLink SHARP (the switch adds), large buffers",
                 _NCCL_TESTS_212 + "; " + _NCCL_TESTS_290),
    BusBandwidth("a100-nvswitch-ring", "allreduce", "nvlink3", 8, "ring",
                 min(_A100_AR_BUSBW[-3:]), max(_A100_AR_BUSBW[-3:]),
                 "8 A100 SXM4 80GB in one Azure ND A100 v4 node through NVSwitch, nccl-tests "
                 "all_reduce_perf in place, 2-8 GB buffers, NCCL 2.18.5 (the page's caption names "
                 "NVLS, which needs the H100's NVSwitch; A100 runs NCCL's ring and tree)",
                 _AZURE + "ND_A100_v4_results.md, 'NCCL Bandwidth' (230.22, 230.48, 231.58 GB/s "
                 "at 2G, 4G, 8G)"),
    BusBandwidth("ndr400-ring", "allreduce", "ib-ndr400", 16, "ring", 46 * GB, 48 * GB,
                 "two nodes over InfiniBand NDR, NCCL_ALGO=RING, per 400 Gb/s NIC",
                 _NCCL_TESTS_290),
)}


@dataclass(frozen=True)
class BusBandwidthCurve:
    """A published nccl-tests bus bandwidth by message size (chapter 27): ``sizes`` in bytes,
    ``busbw`` in bytes/s, for ``collective`` on ``ranks`` GPUs over the catalog link ``link``
    with NCCL's ``algorithm``; ``setting`` and ``source`` say where it was measured."""

    name: str
    collective: str
    link: str
    ranks: int
    algorithm: str
    sizes: tuple
    busbw: tuple
    setting: str
    source: str

    def at(self, n):
        """Bus bandwidth (bytes/s) at message size ``n`` bytes: the table read linearly in
        log size, held at its end points outside it. Arrays broadcast."""
        return np.interp(np.log(np.maximum(np.asarray(n, dtype=float), 1.0)),
                         np.log(self.sizes), self.busbw)


_CURVES = {c.link: c for c in (
    BusBandwidthCurve("a100-nvswitch-allreduce", "allreduce", "nvlink3", 8, "ring",
                      _A100_AR_SIZES, _A100_AR_BUSBW,
                      "8 A100 SXM4 80GB in one Azure ND A100 v4 node, nccl-tests all_reduce_perf "
                      "in place, NCCL 2.18.5 (ring: the A100's NVSwitch has no NVLS)",
                      _AZURE + "ND_A100_v4_results.md, 'NCCL Bandwidth' table, 1K to 8G"),
)}


def busbw_curve(link: str):
    """The published bus bandwidth by message size of ``link``'s in-node ring all-reduce,
    or ``None`` where none is catalogued (chapter 27). Only the A100's NVSwitch has one:
    the published H100 curves are NVLink SHARP's (NVLS), not the ring's."""
    return _CURVES.get(link.name if hasattr(link, "name") else _key(str(link)))


def published_busbw() -> list[BusBandwidth]:
    """Published nccl-tests bus bandwidths for H100 and A100 NVSwitch and InfiniBand NDR,
    each with its source (chapters 13, 27)."""
    return list(_PUBLISHED.values())


# ---------------------------------------------------------------------- matmul ceilings
# Chapter 27: what a large, well-shaped BF16 matmul reaches in practice, the ceiling the
# planner's compute model scales from (dtbook.plan.gemm), with the SM count that sets wave
# quantization. Measured by others, not by us. A training run keeps the GPU busy for days, so
# the ceiling is a *sustained* rate where one is published: Azure's cuBLASLt tables run 10,000
# warm-up iterations before timing, and their largest square is the sustained ceiling (A100
# FP16, BF16's tensor-core rate; H100 and H200 FP8); mamf-finder's sweep times each shape briefly and reports the best,
# a rate the clocks hold only before power and heat settle (A100: 267.9 against Azure's 256.5
# at 16384^3). Where no sustained figure is published (H100 BF16) mamf-finder's is used.

@dataclass(frozen=True)
class MatmulCeiling:
    """Maximum achievable BF16 matmul FLOP/s (``flops``) on ``accelerator``, the shape that
    reached it (M, N, K), the streaming multiprocessors (``sms``) and the sources."""

    accelerator: str
    flops: float
    best_shape: tuple
    sms: int
    source: str
    dtype: str = "bf16"


_MAMF = ("S. Bekman, 'Machine Learning Engineering', compute/accelerator/README.md, 'Maximum "
         "Achievable Matmul FLOPS comparison table' (github.com/stas00/ml-engineering; "
         "measured with its mamf-finder.py, BF16, CUDA 12.1)")
_CEILINGS = {c.accelerator: c for c in (
    MatmulCeiling("a100-80gb", 256.5 * TFLOP, (16384, 16384, 16384), 108,
                  _AZURE + "ND_A100_v4_results.md, 'GEMM CuBLASLt' (10,000 warm-up iterations, FP16, "
                  "BF16's tensor-core rate): 256.5 TFLOP/s at 16384^3, sustained, of 312 "
                  "(82.2%); the short-run best of " + _MAMF + " is 267.9; 108 SMs from the "
                  "NVIDIA A100 Tensor Core GPU Architecture whitepaper"),
    MatmulCeiling("h100-sxm", 792.1 * TFLOP, (6144, 17920, 2816), 132,
                  _MAMF + ": H100 SXM 792.1 TFLOP/s of 989 (80.1%); 132 SMs from the Hopper "
                  "whitepaper"),
    MatmulCeiling("h200", 792.1 * TFLOP, (6144, 17920, 2816), 132,
                  "the H100 SXM figure: the same GH100 GPU and clocks (" + _MAMF + ")"),
    MatmulCeiling("h800", 792.1 * TFLOP, (6144, 17920, 2816), 132,
                  "the H100 SXM figure: the same GH100 GPU, clocks and SMs, only NVLink "
                  "differs (" + _MAMF + ")"),
)}
# FP8 (float8_e4m3fn inputs), the same table's later FP8 section (torch 2.7, CUDA 12.6/12.8)
_CEILINGS_FP8 = {c.accelerator: c for c in (
    MatmulCeiling("h100-sxm", 1382.2 * TFLOP, (32768, 32768, 32768), 132,
                  _AZURE + "ND_H100_v5_results.md, 'GEMM CuBLASLt' (10,000 warm-up iterations, "
                  "FP8): 1382.2 TFLOP/s at 32768^3, sustained, of 1979 (69.8%); the short-run "
                  "best of " + _MAMF + ", FP8 (float8_e4m3fn) section, is 1402.6 (torch "
                  "2.7.0+cu126)", dtype="fp8"),
    MatmulCeiling("h200", 1349.5 * TFLOP, (32768, 32768, 32768), 132,
                  _AZURE + "ND_H200_v5_results.md, 'GEMM CuBLASLt' (10,000 warm-up iterations, "
                  "FP8): 1349.5 TFLOP/s at 32768^3, sustained, of 1979 (68.2%); the short-run "
                  "best of " + _MAMF + ", FP8 (float8_e4m3fn) section, is 1453.4 (torch "
                  "2.7.1+cu128)", dtype="fp8"),
    MatmulCeiling("h800", 1382.2 * TFLOP, (32768, 32768, 32768), 132,
                  "the H100 SXM figure: the same GH100 GPU and clocks (" + _AZURE
                  + "ND_H100_v5_results.md, 'GEMM CuBLASLt', FP8)", dtype="fp8"),
)}


@dataclass(frozen=True)
class MeasuredGemm:
    """One published cuBLASLt matmul measurement (chapter 27): C[m, n] = A[m, k] B[k, n] in
    ``dtype`` on ``accelerator`` at ``flops`` FLOP/s, with the ``source``."""

    accelerator: str
    m: int
    n: int
    k: int
    dtype: str
    flops: float
    source: str


def _azure_gemms(accelerator, page, dtype, rows):
    src = (_AZURE + page + ", 'GEMM CuBLASLt' (random initialisation, 10,000 warm-up "
           "iterations, " + dtype.upper() + ")")
    return tuple(MeasuredGemm(accelerator, m, n, k, dtype, tf * TFLOP, src) for m, n, k, tf in rows)


_SQUARE = (1024, 2048, 4096, 8192, 16384, 32768)
_GEMMS = (
    *_azure_gemms("a100-80gb", "ND_A100_v4_results.md", "fp16", (
        *((d, d, d, tf) for d, tf in zip(_SQUARE[:5], (119.4, 221.8, 228.0, 253.7, 256.5),
                                         strict=True)),
        (1024, 2145, 1024, 132.8), (6144, 12288, 12288, 250.8), (802816, 192, 768, 157.8))),
    *_azure_gemms("h100-sxm", "ND_H100_v5_results.md", "fp8", (
        *((d, d, d, tf) for d, tf in zip(_SQUARE, (274.1, 1011.3, 1216.9, 1290.1, 1377.3, 1382.2),
                                         strict=True)),
        (1024, 2145, 1024, 410.7), (6144, 12288, 12288, 1351.4), (802816, 192, 768, 663.8))),
)


def published_gemms(accelerator: str | None = None) -> list[MeasuredGemm]:
    """Published per-shape matmul measurements (chapter 27), all or those of
    ``accelerator``: Azure's cuBLASLt tables, FP16 on the A100 (BF16's rate) and FP8 on the
    H100. The planner's GEMM model (:func:`dtbook.plan.gemm.matmul_time`) is checked against
    them; it does not read them."""
    if accelerator is None:
        return list(_GEMMS)
    return [g for g in _GEMMS if g.accelerator == accelerator]


def matmul_ceiling(accelerator: str, dtype: str = "bf16") -> MatmulCeiling:
    """The measured matmul ceiling of ``accelerator`` (chapter 27): BF16 (also used for FP16,
    which runs at the same tensor-core rate, and for any other dtype without a measurement),
    or FP8 with ``dtype="fp8"``. ``ValueError`` naming the accelerators that have one, for one
    that has none."""
    return _measured(_CEILINGS_FP8 if dtype == "fp8" else _CEILINGS, accelerator,
                     f"{'FP8 ' if dtype == 'fp8' else ''}matmul ceiling")


def _measured(table, accelerator, what):
    """``table``'s entry for ``accelerator`` (spelt any way ``get`` accepts), or a
    ``ValueError`` naming ``what`` is missing and the accelerators that have one."""
    key = _key(accelerator)
    if key not in table:
        raise ValueError(f"no measured {what} for gpu {accelerator!r}; available: "
                         f"{', '.join(table)}")
    return table[key]


# ---------------------------------------------------------------------- memory ceilings
# Chapter 27: what a streaming kernel reaches in HBM, measured, as the matmul ceiling above is
# for the tensor cores. The datasheet figure is the interface's rate; kernels that stream
# their operands once (norms, activations, residual adds, the optimizer) see this one. The
# planner takes Triad (two reads, one write): its memory-bound ops read more than they write
# (a residual add or a backward op reads two tensors and writes one; Adam reads more than it
# writes). Copy, one read and one write, is about 5 % slower on these GPUs.

@dataclass(frozen=True)
class MemoryCeiling:
    """Measured HBM bandwidth of ``accelerator`` (chapter 27): ``triad`` (bytes/s, BabelStream's
    Triad, a[i] = b[i] + s c[i]: two reads and a write, the rate the planner uses for memory-
    bound kernels) and ``copy`` (one read, one write), with the ``source``."""

    accelerator: str
    triad: float
    copy: float
    source: str


_MEMORY = {c.accelerator: c for c in (
    MemoryCeiling("a100-80gb", 1.70 * TB, 1.61 * TB,
                  _AZURE + "ND_A100_v4_results.md, 'HBM Bandwidth' (BabelStream on an A100-"
                  "SXM4-80GB, CUDA 12.5): Copy 1.61, Mul 1.61, Add 1.70, Triad 1.70, Dot 1.75 "
                  "TB/s, against the datasheet's 2.039"),
    MemoryCeiling("h100-sxm", 2.97 * TB, 2.90 * TB,
                  _AZURE + "ND_H100_v5_results.md, 'HBM Bandwidth' (BabelStream on an H100 80GB "
                  "HBM3, CUDA 12.6): Copy 2.90, Mul 2.90, Add 2.97, Triad 2.97, Dot 3.18 TB/s, "
                  "against the datasheet's 3.35"),
    MemoryCeiling("h200", 4.15 * TB, 4.01 * TB,
                  _AZURE + "ND_H200_v5_results.md, 'HBM Bandwidth' (BabelStream on an H200 141GB, "
                  "CUDA 12.6): Copy 4.01, Mul 4.00, Add 4.15, Triad 4.15, Dot 4.48 TB/s, against "
                  "the datasheet's 4.8"),
    MemoryCeiling("h800", 2.97 * TB, 2.90 * TB,
                  "the H100 SXM figure: the same 80 GB HBM3 at 3.35 TB/s (" + _AZURE
                  + "ND_H100_v5_results.md, 'HBM Bandwidth')"),
)}


def memory_ceiling(accelerator: str) -> MemoryCeiling:
    """The measured HBM bandwidth of ``accelerator`` (chapter 27). ``ValueError`` naming the
    accelerators that have one, for one that has none."""
    return _measured(_MEMORY, accelerator, "memory bandwidth")


# ---------------------------------------------------------------------- attention kernels
# Chapter 27: a fused (flash) attention kernel does not run at the dense-GEMM ceiling: its
# two matmuls per block are interleaved with the online softmax, and its backward recomputes
# the scores (5 matmuls where the forward has 2). Measured by the kernel's authors.

@dataclass(frozen=True)
class AttentionKernel:
    """Best measured throughput of a fused attention kernel on ``accelerator`` (chapter 27):
    ``forward`` and ``backward`` FLOP/s counted the kernel authors' way (causal attention
    counts the computed half; backward counts 2.5 times the forward FLOPs, its 5 matmuls
    against the forward's 2), the ``kernel`` and the ``source``."""

    accelerator: str
    kernel: str
    forward: float
    backward: float
    source: str


_FA2 = ("T. Dao, 'FlashAttention-2: Faster Attention with Better Parallelism and Work "
        "Partitioning', arXiv:2307.08691 (2023), Sec. 1 and 4.1")
_ATTENTION = {k.accelerator: k for k in (
    AttentionKernel("a100-80gb", "FlashAttention-2", 0.73 * 312 * TFLOP, 0.63 * 312 * TFLOP,
                    _FA2 + ": 'reaching up to 73% of the theoretical max throughput in the "
                    "forward pass, and up to 63% ... in the backward pass' on A100 80GB SXM4 "
                    "(forward 'up to 230 TFLOPs/s'); the best of its sweep over sequence length "
                    "512-16k, head dimension 64/128, with and without causal mask"),
    AttentionKernel("h100-sxm", "FlashAttention-2", 335 * TFLOP, 335 * TFLOP,
                    _FA2 + ": 'Just running the same implementation on H100 GPUs ... we obtain "
                    "up to 335 TFLOPs/s (Fig. 7)', forward + backward together (one figure, "
                    "used for both passes); FlashAttention-3 (Shah et al. 2024, "
                    "arXiv:2407.08608) is faster on Hopper but prints its backward only in a "
                    "chart"),
    AttentionKernel("h200", "FlashAttention-2", 335 * TFLOP, 335 * TFLOP,
                    "the H100 SXM figure: the same GH100 GPU and clocks (" + _FA2 + ")"),
    AttentionKernel("h800", "FlashAttention-2", 335 * TFLOP, 335 * TFLOP,
                    "the H100 SXM figure: the same GH100 GPU and clocks (" + _FA2 + ")"),
)}


def attention_kernel(accelerator: str) -> AttentionKernel:
    """The measured fused-attention throughput of ``accelerator`` (chapter 27).
    ``ValueError`` naming the accelerators that have one, for one that has none."""
    return _measured(_ATTENTION, accelerator, "attention kernel")


# ---------------------------------------------------------------------- what the planner needs
def plannable() -> list[str]:
    """The accelerators :mod:`dtbook.plan` can estimate (chapter 27): those with a measured
    BF16 matmul ceiling, a measured HBM bandwidth and a measured fused-attention rate (the
    planner times kernels at measured rates, never at datasheet peaks). The B200 is in the
    catalog but not here: no such measurement of it is catalogued yet."""
    return [a for a in _ACCELERATORS if a in _CEILINGS and a in _MEMORY and a in _ATTENTION]
