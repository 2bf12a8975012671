"""Accelerators and links: the hardware figures the book computes with, each with its source.

Conventions, stated once and kept everywhere:

* **Peak FLOP/s are dense.** NVIDIA's datasheets print tensor-core figures "with sparsity"
  (2:4 structured sparsity), twice the dense rate; the catalog holds the dense rate, the one
  that MFU is measured against. FP32 is the non-tensor-core rate.
* **HBM capacity is in the unit the vendor means: GiB.** Memory capacities are binary: an
  "80GB" A100 or H100 has 80 GiB (80 * 2**30 bytes; the H100's five HBM3 stacks of 16 GiB),
  and the driver shows it: ``nvidia-smi`` reports 81,920 MiB (exactly 80 GiB) on an A100
  80GB, 81,559 MiB on an H100 SXM (80 GiB less 361 MiB the driver keeps), 143,771 MiB on an
  H200 "141GB" and 183,359 MiB on a B200 "180GB", each above the decimal reading (80e9 bytes
  are 76,294 MiB). What the framework itself reserves is not subtracted here.
* **Link bandwidth β is per direction.** NVLink figures are printed as the bidirectional sum
  (H100: "900 GB/s" = 450 GB/s each way); network and PCIe figures are per direction. The
  original edition mixes the two; here every β is what one GPU can
  send while it also receives at the same rate, and :attr:`Link.beta_bidirectional` is the
  sum a datasheet prints.
* **Latency α is an order-of-magnitude default** for one small message, hardware and driver
  (not NCCL's per-operation software overhead, 10-50 µs); fit α to measurements where it
  matters (chapter 04).

All figures are SI base units: FLOP/s, bytes, bytes/s, seconds. (Chapter 02 introduces the
catalog; appendix A3 lists it.)

The package holds the catalog in four modules, one idea each: ``catalog`` (accelerators and
links), ``hierarchy`` (nodes and the memory hierarchy), ``measured`` (figures others measured:
bus bandwidths, matmul, memory and attention ceilings) and ``custom`` (your own hardware,
:func:`register`). Use the names from ``dtbook.hardware`` itself; they are the same objects.
"""

from __future__ import annotations

from .catalog import Accelerator, Link, accelerators, get, links, names
from .hierarchy import Node, Tier, ladder, node, nodes
from .measured import (AttentionKernel, BusBandwidth, BusBandwidthCurve, MatmulCeiling,
                       MeasuredGemm, MemoryCeiling, attention_kernel, busbw_curve,
                       matmul_ceiling, memory_ceiling, plannable, published_busbw,
                       published_gemms)
from .custom import register, registered, unregister

__all__ = ["Accelerator", "Link", "get", "names", "accelerators", "links",
           "Tier", "Node", "node", "nodes", "ladder", "BusBandwidth", "published_busbw",
           "BusBandwidthCurve", "busbw_curve",
           "MatmulCeiling", "matmul_ceiling", "MeasuredGemm", "published_gemms",
           "MemoryCeiling", "memory_ceiling",
           "AttentionKernel", "attention_kernel", "plannable", "register", "unregister",
           "registered"]
