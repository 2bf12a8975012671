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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from .units import GB, GiB, TB, TFLOP, PFLOP, us

__all__ = ["Accelerator", "Link", "get", "names", "accelerators", "links",
           "Tier", "Node", "node", "nodes", "ladder", "BusBandwidth", "published_busbw",
           "BusBandwidthCurve", "busbw_curve",
           "MatmulCeiling", "matmul_ceiling", "MeasuredGemm", "published_gemms",
           "MemoryCeiling", "memory_ceiling",
           "AttentionKernel", "attention_kernel", "plannable", "register", "unregister",
           "registered"]


@dataclass(frozen=True)
class Accelerator:
    """One accelerator: dense peak FLOP/s per dtype, HBM capacity and bandwidth.

    ``peak_flops`` maps a dtype name (``"fp32"``, ``"tf32"``, ``"bf16"``, ``"fp16"``,
    ``"fp8"``, ...) to dense FLOP/s; ``hbm_bytes`` in bytes (binary, GiB: see the module notes);
    ``hbm_bandwidth`` in bytes/s; ``source`` the document the figures come from and
    ``sources`` the source of each figure by field name.
    """

    name: str
    peak_flops: Mapping[str, float]
    hbm_bytes: float
    hbm_bandwidth: float
    source: str
    sources: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def dtypes(self) -> list[str]:
        """The dtypes with a peak figure."""
        return list(self.peak_flops)

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype`` (F in the book's notation). Raises ``ValueError``
        listing the available dtypes for one this accelerator has no figure for."""
        key = dtype.strip().lower() if isinstance(dtype, str) else dtype
        if key not in self.peak_flops:
            raise ValueError(f"dtype {dtype!r} has no peak figure on {self.name}; "
                             f"available: {', '.join(self.peak_flops)}")
        return self.peak_flops[key]


@dataclass(frozen=True)
class Link:
    """A link in the α-β model: latency ``alpha`` (s) and bandwidth ``beta`` (bytes/s **per
    direction**), with the source of β (``source``) and of α (``alpha_source``)."""

    name: str
    alpha: float
    beta: float
    source: str
    alpha_source: str
    note: str = ""

    @property
    def beta_bidirectional(self) -> float:
        """Both directions added, the figure NVLink datasheets print: ``2 * beta``."""
        return 2 * self.beta


# ---------------------------------------------------------------------- accelerators
_H100_WHITEPAPER = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (Hopper), table "
                    "'NVIDIA H100 SXM5' peak figures: FP32 66.9, TF32 494.7, FP16/BF16 989.4, "
                    "FP8 1978.9 TFLOP/s dense (the datasheet's 989/1979/3958 TFLOP/s are with sparsity)")
# Dense tensor-core peaks of the Hopper SXM parts (H100, H200, H800 share the chip and clocks),
# from the H100 whitepaper; one dict so the three entries cannot drift apart.
_HOPPER_DENSE = {"fp32": 66.9 * TFLOP, "tf32": 494.7 * TFLOP, "bf16": 989.4 * TFLOP,
                 "fp16": 989.4 * TFLOP, "fp8": 1978.9 * TFLOP}
_H100_DATASHEET = ("NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column "
                   "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet): "
                   "GPU memory 80GB, GPU memory bandwidth 3.35TB/s")
_A100_DATASHEET = ("NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column "
                   "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                   "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): FP32 19.5, TF32 156, "
                   "BF16/FP16 312 TFLOP/s dense (312/624 with sparsity), 80GB HBM2e, 2,039GB/s")
_H200_DATASHEET = ("NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column "
                   "(https://www.nvidia.com/en-us/data-center/h200/): GPU memory 141GB HBM3e, "
                   "4.8TB/s; compute figures identical to H100 SXM (same GH100 GPU)")
_H800_SOURCES = ("NVIDIA H800 Tensor Core GPU datasheet, H800 SXM column: FP8 3,958 and BF16 1,979 "
                 "TFLOP/s with sparsity (1,979 and 989 dense, the H100 SXM's), GPU memory 80GB at "
                 "3.35TB/s, 'NVLink: 400GB/s' (both directions); DeepSeek-AI, 'Insights into "
                 "DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI "
                 "Architectures', arXiv:2505.09343 (ISCA 2025), Sec. 2: the H800 SXM has the "
                 "H100's compute with NVLink cut from 900 GB/s to 400 GB/s, each node eight "
                 "400 Gb/s InfiniBand CX7 NICs")
_B200_DATASHEET = ("NVIDIA HGX B200 specifications, per-GPU column "
                   "(https://www.nvidia.com/en-us/data-center/hgx/): FP8 9, FP16/BF16 4.5, TF32 2.2 "
                   "PFLOP/s with sparsity (halved here: 4.5, 2.25, 1.1 dense), FP4 18 (9 dense), "
                   "FP32 75 TFLOP/s, 180GB HBM3e at 7.7TB/s (HGX 8-GPU: 1.4TB, 62TB/s)")

# What the driver reports as the GPU's memory (nvidia-smi's "Memory-Usage" total, in MiB =
# 2**20 bytes): the vendor's "GB" is a binary figure, as memory capacities are
_SMI_A100 = ("nvidia-smi on an A100-SXM4-80GB: 81920MiB total, exactly 80 GiB (Modal, "
             "modal-labs/modal-client pull request #2797, 2025-01-23, nvidia-smi totals of its "
             "fleet: 'A100 80GB: 81920MiB', 'H100: 81559MiB'; the same 81920MiB on the "
             "A800-SXM4-80GB, dexmal/dexbotic issue #41)")
_SMI_H100 = ("nvidia-smi on an H100 SXM ('NVIDIA H100 80GB HBM3', driver 550.54.15): 81559MiB "
             "total (NVIDIA/nccl issue #1264, 2024; the same in Modal's list, modal-labs/"
             "modal-client pull request #2797): 80 GiB of five 16 GiB HBM3 stacks (G. Lockwood, "
             "glennklockwood.com/garden/processors/h100: '80 GB HBM3 (5 stacks)'), less 361 MiB "
             "the driver keeps; 80e9 bytes would be 76,294 MiB")
_SMI_H200 = ("nvidia-smi on an H200 SXM ('NVIDIA H200', 700 W, driver 550.54.15): 143771MiB "
             "total (NVIDIA/cuda-samples issue #311, 2024-12-06), 141 GiB (144,384 MiB) less "
             "613 MiB the driver keeps; 141e9 bytes would be 134,468 MiB")
_SMI_B200 = ("nvidia-smi on a B200 ('NVIDIA B200', 1000 W, driver 580.95.05): 183359MiB total "
             "(NVIDIA/TensorRT-LLM issue #10278, 2025-12-24), 180 GiB (184,320 MiB) less 961 MiB "
             "the driver keeps; 180e9 bytes would be 171,661 MiB")

_ACCELERATORS = {a.name: a for a in (
    Accelerator(
        name="a100-80gb",
        peak_flops={"fp32": 19.5 * TFLOP, "tf32": 156 * TFLOP, "bf16": 312 * TFLOP, "fp16": 312 * TFLOP},
        hbm_bytes=80 * GiB, hbm_bandwidth=2039 * GB,
        source=_A100_DATASHEET,
        sources={"peak_flops": _A100_DATASHEET, "hbm_bytes": _A100_DATASHEET + "; " + _SMI_A100,
                 "hbm_bandwidth": _A100_DATASHEET},
        note="A100 SXM4 80GB (Ampere). No FP8 tensor cores.",
    ),
    Accelerator(
        name="h100-sxm",
        peak_flops=dict(_HOPPER_DENSE),
        hbm_bytes=80 * GiB, hbm_bandwidth=3.35 * TB,
        source=_H100_DATASHEET + "; " + _H100_WHITEPAPER,
        sources={"peak_flops": _H100_WHITEPAPER, "hbm_bytes": _H100_DATASHEET + "; " + _SMI_H100,
                 "hbm_bandwidth": _H100_DATASHEET},
        note="H100 SXM5 80GB HBM3 (Hopper), 700 W. The book's reference GPU.",
    ),
    Accelerator(
        name="h200",
        peak_flops=dict(_HOPPER_DENSE),
        hbm_bytes=141 * GiB, hbm_bandwidth=4.8 * TB,
        source=_H200_DATASHEET,
        sources={"peak_flops": _H200_DATASHEET + "; dense figures from " + _H100_WHITEPAPER,
                 "hbm_bytes": _H200_DATASHEET + "; " + _SMI_H200, "hbm_bandwidth": _H200_DATASHEET},
        note="H200 SXM 141GB HBM3e (141 GiB): an H100 with more and faster memory.",
    ),
    Accelerator(
        name="h800",
        peak_flops=dict(_HOPPER_DENSE),
        hbm_bytes=80 * GiB, hbm_bandwidth=3.35 * TB,
        source=_H800_SOURCES,
        sources={"peak_flops": _H800_SOURCES + "; dense figures from " + _H100_WHITEPAPER,
                 "hbm_bytes": _H800_SOURCES + "; 80 GiB as the H100 SXM's (" + _SMI_H100 + ")",
                 "hbm_bandwidth": _H800_SOURCES},
        note=("H800 SXM (Hopper, for export to China, 2023): an H100 SXM whose NVLink is cut to "
              "400 GB/s both directions (link 'nvlink4-h800'); DeepSeek-V3 trained on 2,048 of "
              "them (node 'hgx-h800')."),
    ),
    Accelerator(
        name="b200",
        peak_flops={"fp32": 75 * TFLOP, "tf32": 1.1 * PFLOP, "bf16": 2.25 * PFLOP,
                    "fp16": 2.25 * PFLOP, "fp8": 4.5 * PFLOP, "fp4": 9 * PFLOP},
        hbm_bytes=180 * GiB, hbm_bandwidth=7.7 * TB,
        source=_B200_DATASHEET,
        sources={"peak_flops": _B200_DATASHEET, "hbm_bytes": _B200_DATASHEET + "; " + _SMI_B200,
                 "hbm_bandwidth": _B200_DATASHEET},
        note=("B200 as sold in HGX/DGX B200 (1,000 W): 180 GiB usable of the package's 192 GiB "
              "(8 HBM3e stacks of 24 GiB); the GB200 NVL72 part is specified at 186 GB, 8 TB/s and higher "
              "clocks (FP8 10 PFLOP/s with sparsity)."),
    ),
)}

# ---------------------------------------------------------------------- links
_ALPHA_BOOK = ("order-of-magnitude default, the original edition's hardware appendix "
               "('Typical Latency' column) and chapter 04's table")

_LINKS = {link.name: link for link in (
    Link(
        name="nvlink4", alpha=1 * us, beta=450 * GB,
        source=("NVIDIA H100 datasheet ('NVLink: 900GB/s', both directions) and Hopper "
                "whitepaper (18 fourth-generation NVLink links per GPU, 25 GB/s per direction "
                "each): 450 GB/s per direction per GPU"),
        alpha_source=_ALPHA_BOOK + ": NVLink ~1 µs",
        note="H100/H200 SXM through NVSwitch; 900 GB/s is the bidirectional sum.",
    ),
    Link(
        name="nvlink4-h800", alpha=1 * us, beta=200 * GB,
        source=("NVIDIA H800 datasheet ('NVLink: 400GB/s', both directions) and DeepSeek-AI, "
                "arXiv:2505.09343 Sec. 2 (NVLink 400 GB/s on the H800 against the H100's 900): "
                "200 GB/s per direction per GPU. DeepSeek-V3's report (arXiv:2412.19437, Sec. "
                "3.2.2) measures 160 GB/s of it in use ('NVLink offers a bandwidth of 160 GB/s, "
                "roughly 3.2 times that of IB (50 GB/s)')"),
        alpha_source=_ALPHA_BOOK + ": NVLink ~1 µs",
        note="H800 SXM through NVSwitch: the H100's NVLink4 with fewer links enabled.",
    ),
    Link(
        name="nvlink5", alpha=1 * us, beta=900 * GB,
        source=("NVIDIA HGX B200 specifications ('5th Generation NVLink: 1.8TB/s' per GPU, both "
                "directions; 18 links of 50 GB/s per direction): 900 GB/s per direction"),
        alpha_source=_ALPHA_BOOK + ": NVLink ~1 µs",
        note="B200 through NVSwitch; 1.8 TB/s is the bidirectional sum.",
    ),
    Link(
        name="ib-ndr400", alpha=2 * us, beta=50 * GB,
        source=("InfiniBand NDR, NVIDIA ConnectX-7 / Quantum-2 product briefs: 400 Gb/s per "
                "port per direction = 50 GB/s per direction (one NIC per GPU in DGX H100)"),
        alpha_source=_ALPHA_BOOK + ": IB 1-2 µs within a rack, 3-5 µs across racks",
        note="One 400 Gb/s NIC per GPU; full duplex.",
    ),
    Link(
        name="nvlink3", alpha=1 * us, beta=300 * GB,
        source=("NVIDIA A100 datasheet ('NVLink: 600GB/s', both directions) and Ampere "
                "whitepaper (12 third-generation NVLink links per GPU, 25 GB/s per direction "
                "each): 300 GB/s per direction per GPU"),
        alpha_source=_ALPHA_BOOK + ": NVLink ~1 µs",
        note="A100 SXM through NVSwitch (DGX A100); 600 GB/s is the bidirectional sum.",
    ),
    Link(
        name="ib-hdr200", alpha=2 * us, beta=25 * GB,
        source=("InfiniBand HDR, NVIDIA ConnectX-6 product brief: 200 Gb/s per port per "
                "direction = 25 GB/s per direction (one NIC per GPU in DGX A100)"),
        alpha_source=_ALPHA_BOOK + ": IB 1-2 µs within a rack, 3-5 µs across racks",
        note="One 200 Gb/s NIC per GPU (DGX A100, Selene); full duplex.",
    ),
    Link(
        name="opa-100", alpha=2 * us, beta=100e9 / 8,
        source=("Intel Omni-Path Architecture, 100 series host fabric interface: 100 Gb/s per "
                "port per direction = 12.5 GB/s per direction (Birrittella et al., 'Intel "
                "Omni-Path Architecture: Enabling Scalable, High Performance Fabrics', IEEE Hot "
                "Interconnects 2015; AnandTech, 'Exploring Intel's Omni-Path Network Fabric', "
                "2015: 'next-generation 100Gbps networking fabric')"),
        alpha_source=_ALPHA_BOOK + ": IB 1-2 µs within a rack (taken for Omni-Path, a fabric "
                     "of the same class; no Omni-Path latency measurement in the catalog)",
        note=("Jean Zay's A100 partition, where BLOOM trained: four Omni-Path ports per node of "
              "eight GPUs (node 'jean-zay-a100'). No NCCL bus-bandwidth measurement on it is "
              "in the catalog, so the planner runs it at its line rate (an upper bound)."),
    ),
    Link(
        name="pcie5-x16", alpha=1 * us, beta=16 * 32e9 * (128 / 130) / 8,
        source=("PCI Express Base Specification 5.0 (PCI-SIG): 32 GT/s per lane, 128b/130b "
                "encoding, 16 lanes: 63.0 GB/s per direction (64 GB/s before encoding; "
                "NVIDIA's 'PCIe Gen5: 128GB/s' is the bidirectional sum). The original "
                "edition's hardware appendix prints '~64 GB/s, bidirectional' for Gen5 x16, "
                "which is one direction's rate."),
        alpha_source="order of magnitude of a PCIe round trip (~1 µs); not from a datasheet",
        note="Protocol overhead (packet headers) leaves roughly 50-55 GB/s of payload in practice.",
    ),
    Link(
        name="ethernet-100g", alpha=10 * us, beta=100e9 / 8,
        source="IEEE 802.3 100 Gigabit Ethernet: 100 Gb/s per direction = 12.5 GB/s per direction",
        alpha_source=_ALPHA_BOOK + ": RoCE v2 5-10 µs, TCP Ethernet 10-50 µs",
        note="Commodity cluster network; RoCE v2 or TCP.",
    ),
)}


def accelerators() -> list[str]:
    """Names of the accelerators in the catalog."""
    return list(_ACCELERATORS)


def links() -> list[str]:
    """Names of the links in the catalog."""
    return list(_LINKS)


def names() -> list[str]:
    """Every name :func:`get` knows: accelerators, then links."""
    return accelerators() + links()


def _key(name):
    """A catalog name as the tables spell it: lower case, ``-`` for ``_``."""
    return name.strip().lower().replace("_", "-") if isinstance(name, str) else name


def get(name: str) -> Accelerator | Link:
    """The accelerator or link called ``name`` (case-insensitive; ``_`` and ``-`` alike).

    Raises ``ValueError`` listing the known names for an unknown one. (Chapter 02.)
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, one of {names()}; got {name!r}")
    key = _key(name)
    if key in _ACCELERATORS:
        return _ACCELERATORS[key]
    if key in _LINKS:
        return _LINKS[key]
    raise ValueError(f"unknown hardware {name!r}; accelerators: {', '.join(accelerators())}; "
                     f"links: {', '.join(links())}")


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


# ---------------------------------------------------------------------- the memory hierarchy
# Added for chapter 03 (The Memory Hierarchy of a Cluster): the rungs between a GPU's
# registers and the network, and the node that holds them. Same conventions as above: SI
# units, HBM in GiB, bandwidth per direction, every figure with its source.

@dataclass(frozen=True)
class Tier:
    """One rung of the memory hierarchy as one GPU sees it (chapter 03).

    ``capacity`` in bytes (``None`` for a link, whose reach is other devices' memory),
    ``bandwidth`` in bytes/s (per direction for a link; ``None`` where no vendor figure
    exists), ``latency`` a representative figure in seconds and ``latency_range`` the
    (low, high) order of magnitude it comes from (``None`` where unknown), ``scope`` what
    the figures cover ("per GPU", "per node", ...), ``kind`` ``"memory"`` or ``"link"``.
    """

    name: str
    kind: str
    capacity: float | None
    bandwidth: float | None
    latency: float | None
    latency_range: tuple | None
    scope: str
    source: str
    latency_source: str = ""
    note: str = ""

    def transfer_time(self, nbytes):
        """α + n/β for this rung (chapter 03): the α-β model with the rung's latency and
        bandwidth. Raises ``ValueError`` where either figure is missing."""
        if self.bandwidth is None or self.latency is None:
            raise ValueError(f"{self.name} has no {'bandwidth' if self.bandwidth is None else 'latency'} "
                             f"figure in the catalog")
        return self.latency + nbytes / self.bandwidth


@dataclass(frozen=True)
class Node:
    """A server of ``gpus`` accelerators (chapter 03): the accelerator and link names in
    the catalog, the host memory, and the scale-out NICs (``nics`` of link ``scale_out``)."""

    name: str
    gpus: int
    accelerator: str
    scale_up: str
    scale_out: str
    nics: int
    host_link: str
    host_memory: float | None       # None: not given (a node added with register())
    host_memory_bandwidth: float | None
    source: str
    sources: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def hbm_bytes(self) -> float:
        """HBM of all the node's GPUs together."""
        return self.gpus * get(self.accelerator).hbm_bytes

    @property
    def scale_out_bandwidth(self) -> float:
        """Bytes/s per direction the node can send off-node: NICs × the link's β."""
        return self.nics * get(self.scale_out).beta


_H100_ARCH = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (Hopper): H100 SXM5 has 132 "
              "SMs; per SM 256 KB of combined L1 data cache and shared memory, a 256 KB register "
              "file (65,536 32-bit registers) and 128 FP32 cores; 50 MB L2 cache")
_SMEM_BW = ("derived: CUDA C++ Programming Guide, shared memory of compute capability 9.x, 32 "
            "banks each delivering 32 bits per clock = 128 B per clock per SM; times 132 SMs "
            "times 1.98 GHz, the clock implied by the catalog's FP32 peak (66.9 TFLOP/s = 132 "
            "SMs x 128 FP32 lanes x 2 FLOP x f)")
_DGX_H100 = ("NVIDIA DGX H100 datasheet and user guide: 8x H100 SXM5 (640 GB HBM3 in all), 4x "
             "third-generation NVSwitch (900 GB/s NVLink per GPU, both directions), 8x "
             "single-port ConnectX-7 at 400 Gb/s (InfiniBand/Ethernet) for the compute fabric, "
             "2x Intel Xeon Platinum 8480C (112 cores), 2 TB system memory")
_DGX_A100 = ("NVIDIA DGX A100 datasheet and user guide: 8x A100 SXM4 80GB, 6x NVSwitch (600 GB/s "
             "NVLink per GPU, both directions), 8x single-port ConnectX-6 at 200 Gb/s HDR "
             "InfiniBand for the compute fabric, 2x AMD EPYC 7742 with 8 channels of DDR4-3200 "
             "each, 2 TB system memory")
_JEAN_ZAY = ("BigScience, github.com/bigscience-workshop/bigscience train/tr11-176B-ml/README.md "
             "'Hardware' (commit 39ed811) and jz/hpc-specs.md 'JZ3': 416 A100 80GB GPUs in 52 "
             "nodes of 8, '8 GPUs per node Using NVLink 4 inter-gpu connects, 4 OmniPath links', "
             "'Inter-node connect: Omni-Path Architecture (OPA)', 'NCCL-communications network: "
             "a fully dedicated subnet', 'CPU memory: 512GB per node'")
_EPYC_7543 = ("AMD EPYC 7543 product page (the CPU of Jean Zay's A100 nodes per BigScience's "
              "write-ups): 8 channels of DDR4-3200 per socket, 8 x 3200 MT/s x 8 B = 204.8 GB/s")
_SPR_MEMORY = ("Intel Xeon Platinum 8480+ product specifications (ark.intel.com; the 8480C of a "
               "DGX is the same Sapphire Rapids part): 8 channels of DDR5-4800 per socket, "
               "8 x 4800 MT/s x 8 B = 307.2 GB/s per socket, 614.4 GB/s for two sockets (peak)")
_LAT_BOOK = "order of magnitude from the original edition's hardware appendix, chapter 03's hierarchy"
_LAT_DRAM = ("order of magnitude: 'main memory reference ~100 ns' (J. Dean, Numbers Everyone "
             "Should Know, 2009); not a datasheet figure")

_NODES = {nd.name: nd for nd in (
    Node(
        name="dgx-h100", gpus=8, accelerator="h100-sxm", scale_up="nvlink4",
        scale_out="ib-ndr400", nics=8, host_link="pcie5-x16",
        host_memory=2 * TB, host_memory_bandwidth=2 * 8 * 4800e6 * 8,
        source=_DGX_H100,
        sources={"gpus": _DGX_H100, "nics": _DGX_H100, "host_memory": _DGX_H100,
                 "host_memory_bandwidth": _SPR_MEMORY},
        note=("The book's reference node (also the layout of DGX H200 and of Meta's Grand "
              "Teton): NVSwitch inside the node is non-blocking, one 400 Gb/s NIC per GPU."),
    ),
    Node(
        name="hgx-h800", gpus=8, accelerator="h800", scale_up="nvlink4-h800",
        scale_out="ib-ndr400", nics=8, host_link="pcie5-x16",
        host_memory=None, host_memory_bandwidth=None,
        source=_H800_SOURCES,
        sources={"gpus": _H800_SOURCES, "nics": _H800_SOURCES},
        note=("DeepSeek-V3's node (2,048 H800s, 256 nodes; arXiv:2412.19437 Sec. 3.1): eight "
              "H800 through NVSwitch, eight 400 Gb/s InfiniBand NICs. Host memory not given."),
    ),
    Node(
        name="dgx-a100", gpus=8, accelerator="a100-80gb", scale_up="nvlink3",
        scale_out="ib-hdr200", nics=8, host_link="pcie5-x16",
        host_memory=2 * TB, host_memory_bandwidth=2 * 8 * 3200e6 * 8,
        source=_DGX_A100,
        sources={"gpus": _DGX_A100, "nics": _DGX_A100, "host_memory": _DGX_A100,
                 "host_memory_bandwidth": _DGX_A100},
        note=("Chapters 24 and 27: the node of Selene, where the Megatron-LM and MT-NLG runs "
              "of dtbook.runs were measured. Its host link is PCIe 4.0 (half the catalog's "
              "PCIe 5 figure); the planner does not use it."),
    ),
    Node(
        name="jean-zay-a100", gpus=8, accelerator="a100-80gb", scale_up="nvlink3",
        scale_out="opa-100", nics=4, host_link="pcie5-x16",
        host_memory=512 * GB, host_memory_bandwidth=8 * 3200e6 * 8,
        source=_JEAN_ZAY,
        sources={"gpus": _JEAN_ZAY, "nics": _JEAN_ZAY, "host_memory": _JEAN_ZAY,
                 "host_memory_bandwidth": _EPYC_7543},
        note=("Chapter 27: the node BLOOM-176B trained on (dtbook.runs 'bloom-176b'). Four "
              "100 Gb/s Omni-Path ports for eight GPUs: when every GPU sends off-node at once "
              "(data-parallel reductions, pipeline sends), each has half a port, 6.25 GB/s, a "
              "quarter of a DGX A100 GPU's 25 GB/s. NVLink: the README's 'NVLink 4 inter-gpu "
              "connects' does not say whether an NVSwitch joins all eight GPUs; the entry "
              "takes the A100's NVLink3 rate through a switch (an upper bound if not). Host "
              "link and memory bandwidth: not used by the planner; memory bandwidth is one "
              "EPYC 7543 socket's (the socket count is not in the source)."),
    ),
)}


def nodes() -> list[str]:
    """Names of the nodes in the catalog."""
    return list(_NODES)


def node(name: str) -> Node:
    """The node called ``name`` (``"dgx-h100"``). Raises ``ValueError`` for an unknown one.
    (Chapter 03.)"""
    key = name.strip().lower().replace("_", "-") if isinstance(name, str) else name
    if key not in _NODES:
        raise ValueError(f"unknown node {name!r}; nodes: {', '.join(nodes())}")
    return _NODES[key]


def _link_tier(name, link: Link, scope, note=""):
    return Tier(name=name, kind="link", capacity=None, bandwidth=link.beta, latency=link.alpha,
                latency_range=None, scope=scope, source=link.source,
                latency_source=link.alpha_source, note=note)


def ladder(node_name: str = "dgx-h100") -> list[Tier]:
    """The memory hierarchy one GPU of ``node_name`` sees, fastest rung first (chapter 03):
    on-chip SRAM, L2, HBM, NVLink to the other GPUs, PCIe to the host, host DRAM, the
    scale-out network, and commodity Ethernet for comparison."""
    nd = node(node_name)
    if nd.accelerator != "h100-sxm":  # the on-chip figures below are Hopper's
        raise ValueError(f"the on-chip rungs are catalogued for h100-sxm only, not {nd.accelerator}")
    acc = get(nd.accelerator)
    sms, smem, fp32_lanes, smem_bytes_per_clock = 132, 256 * 2**10, 128, 32 * 4
    clock = acc.peak("fp32") / (sms * fp32_lanes * 2)      # 1.98 GHz
    return [
        Tier("SRAM (L1/shared)", "memory", capacity=sms * smem,
             bandwidth=sms * smem_bytes_per_clock * clock, latency=5e-9,
             latency_range=(1e-9, 10e-9), scope="per GPU, all SMs",
             source=_H100_ARCH + "; bandwidth " + _SMEM_BW, latency_source=_LAT_BOOK,
             note=("The original edition's '~80 TB/s' for SRAM has no stated derivation; the "
                   "shared-memory figure derived here is about 33 TB/s. Registers (as much "
                   "again, 256 KB per SM) feed the cores faster still.")),
        Tier("L2 cache", "memory", capacity=50e6, bandwidth=None, latency=None,
             latency_range=None, scope="per GPU", source=_H100_ARCH,
             note=("NVIDIA publishes the size but not the bandwidth or latency of H100's L2; "
                   "microbenchmarks place both between SRAM and HBM.")),
        Tier("HBM3", "memory", capacity=acc.hbm_bytes, bandwidth=acc.hbm_bandwidth,
             latency=300e-9, latency_range=(200e-9, 500e-9), scope="per GPU",
             source=acc.sources.get("hbm_bandwidth", acc.source), latency_source=_LAT_BOOK),
        _link_tier("NVLink 4 (other GPUs' HBM)", get(nd.scale_up), "per GPU, per direction",
                   note=f"reaches the other {nd.gpus - 1} GPUs of the node through NVSwitch"),
        _link_tier("PCIe 5 x16 (to the host)", get(nd.host_link), "per GPU, per direction"),
        Tier("host DRAM", "memory", capacity=nd.host_memory, bandwidth=nd.host_memory_bandwidth,
             latency=100e-9, latency_range=(80e-9, 150e-9), scope="per node, shared by its GPUs",
             source=nd.sources["host_memory"] + "; bandwidth " + nd.sources["host_memory_bandwidth"],
             latency_source=_LAT_DRAM,
             note="a GPU reaches it through its PCIe link, which is the narrower of the two"),
        _link_tier("InfiniBand NDR400 (other nodes)", get(nd.scale_out), "per GPU, per direction",
                   note=f"{nd.nics} NICs per node, one per GPU"),
        _link_tier("Ethernet 100G", get("ethernet-100g"), "per port, per direction",
                   note="a commodity network, for comparison"),
    ]


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


# ---------------------------------------------------------------------- your own hardware
# Chapter 27: a capacity engineer plans on hardware the catalog does not hold. ``register``
# adds an accelerator (with the measured rates the planner needs), the links of its node and
# the node, from a dict or a YAML/JSON file; ``dtbook plan --accelerator FILE`` calls it.

_BUILTIN = (frozenset(_ACCELERATORS), frozenset(_LINKS), frozenset(_NODES))
_REGISTERED: dict = {}      # accelerator name -> (node name or None, [link names])

_SPEC_KEYS = ("accelerator", "links", "node")
_ACC_KEYS = ("name", "peak_flops", "hbm_bytes", "hbm_bandwidth", "source", "note",
             "matmul_ceiling", "memory_ceiling", "attention_kernel")
_LINK_KEYS = ("name", "alpha", "beta", "source", "alpha_source", "note")
_NODE_KEYS = ("name", "gpus", "scale_up", "scale_out", "nics", "host_link", "host_memory",
              "host_memory_bandwidth", "source", "note")
_DIMENSION = {"bytes": "bytes, such as '80 GiB'", "bytes/s": "bytes/s, such as '3.35 TB/s'",
              "flop/s": "FLOP/s, such as '989.4 TFLOP/s'", "seconds": "seconds, such as '2 us'"}


def _quantity(where, value, dimension):
    """``value`` (a number in SI base units, or a string with its unit) as a positive finite
    float of ``dimension``; ``ValueError`` naming ``where`` otherwise."""
    from .units import parse_quantity
    if isinstance(value, str):
        try:
            q = parse_quantity(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        if q.dimension not in (dimension, "1"):
            raise ValueError(f"{where}: {value!r} is {q.dimension}, expected "
                             f"{_DIMENSION[dimension]}")
        value = q.value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where} must be a number in {_DIMENSION[dimension]}, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be finite and > 0, got {value!r}")
    return value


def _count(where, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{where} must be a whole number >= 1, got {value!r}")
    return int(value)


def _text(where, value, required=True):
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _table(where, value, keys, required=()):
    """``value`` as a dict whose keys are among ``keys`` and include ``required``."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping of {', '.join(keys)}; got {value!r}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}; known fields: {', '.join(keys)}")
    for k in required:
        if k not in value:
            raise ValueError(f"{where}.{k} is missing (required: {', '.join(required)})")
    return value


def _new_name(where, value, taken, kind):
    name = _key(_text(where, value))
    if any(c.isspace() for c in name):
        raise ValueError(f"{where} must not contain spaces, got {value!r}")
    if name in taken:
        raise ValueError(f"{where}: {name!r} is a catalog {kind} of dtbook.hardware; "
                         f"choose another name")
    return name


def _load(spec):
    """A spec given as a dict, or a path to a .json/.yaml/.yml file, as a dict."""
    import os
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as err:
            raise ValueError(f"accelerator file {path!r} cannot be read: {err.strerror}") from None
        if path.lower().endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:   # pragma: no cover - PyYAML ships with Jupyter
                raise ValueError("accelerator file: reading YAML needs PyYAML "
                                 "(pip install pyyaml); or write the file as JSON") from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as err:
                raise ValueError(f"accelerator file {path!r} is not valid YAML: {err}") from None
        else:
            import json
            try:
                data = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"accelerator file {path!r} is not valid JSON: {err}") from None
        return data, f"registered from {os.path.basename(path)}"
    return spec, "registered from a dict"


def register(spec) -> Accelerator:
    """Add your own accelerator to the catalog, with its node and links (chapter 27).

    ``spec`` is a dict, or the path of a JSON or YAML file holding one, with the keys
    ``accelerator`` (required), ``links`` (a list of new links) and ``node``::

        accelerator:
          name: my-gpu
          peak_flops: {bf16: 989.4 TFLOP/s, fp8: 1978.9 TFLOP/s}   # dense
          hbm_bytes: 80 GiB
          hbm_bandwidth: 3.35 TB/s
          source: the datasheet and the benchmarks below
          # measured rates: the planner needs all three (dtbook.plan times kernels at them)
          matmul_ceiling: {bf16: 792 TFLOP/s, fp8: 1400 TFLOP/s, sms: 132}
          memory_ceiling: {triad: 2.97 TB/s, copy: 2.90 TB/s}
          attention_kernel: {forward: 335 TFLOP/s, backward: 335 TFLOP/s, kernel: FlashAttention-2}
        links:
          - {name: my-link, alpha: 1 us, beta: 450 GB/s}     # beta per direction
        node:
          name: my-node
          gpus: 8
          scale_up: my-link                                  # a link above or in the catalog
          scale_out: ib-ndr400
          nics: 8

    Figures are numbers in SI base units or strings with a unit (``"80 GiB"``, ``"3.35 TB/s"``,
    ``"1 us"``). Every field is checked before anything is added; a bad one raises
    ``ValueError`` naming it (``accelerator.hbm_bytes``, ``node.scale_up``, ...). Names are
    spelt as :func:`get` spells them and must not be catalog names; registering a name you
    registered before replaces it. Returns the :class:`Accelerator`; :func:`get`,
    :func:`node`, :func:`matmul_ceiling`, :func:`memory_ceiling`, :func:`attention_kernel` and
    the planner (``gpu=`` its name) then know it, until :func:`unregister`."""
    data, origin = _load(spec)
    _table("spec", data, _SPEC_KEYS, required=("accelerator",))
    a = _table("accelerator", data["accelerator"], _ACC_KEYS,
               required=("name", "peak_flops", "hbm_bytes", "hbm_bandwidth"))
    acc_names, link_names, node_names = _BUILTIN
    name = _new_name("accelerator.name", a["name"], acc_names | link_names, "name")
    source = _text("accelerator.source", a.get("source", origin))
    peaks = a["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ValueError(f"accelerator.peak_flops must map dtypes to FLOP/s, such as "
                         f"{{bf16: '989.4 TFLOP/s'}}; got {peaks!r}")
    peak_flops = {_text("accelerator.peak_flops", d).lower(): _quantity(f"accelerator.peak_flops.{d}", v, "flop/s")
                  for d, v in peaks.items()}
    acc = Accelerator(name=name, peak_flops=peak_flops,
                      hbm_bytes=_quantity("accelerator.hbm_bytes", a["hbm_bytes"], "bytes"),
                      hbm_bandwidth=_quantity("accelerator.hbm_bandwidth", a["hbm_bandwidth"], "bytes/s"),
                      source=source, sources={f: source for f in ("peak_flops", "hbm_bytes", "hbm_bandwidth")},
                      note=_text("accelerator.note", a.get("note"), required=False))
    ceilings = {}
    if "matmul_ceiling" in a:
        m = _table("accelerator.matmul_ceiling", a["matmul_ceiling"], ("bf16", "fp8", "sms", "source"),
                   required=("bf16", "sms"))
        sms = _count("accelerator.matmul_ceiling.sms", m["sms"])
        msrc = _text("accelerator.matmul_ceiling.source", m.get("source", source))
        for dtype, table in (("bf16", _CEILINGS), ("fp8", _CEILINGS_FP8)):
            if dtype in m:
                flops = _quantity(f"accelerator.matmul_ceiling.{dtype}", m[dtype], "flop/s")
                ceilings[id(table)] = (table, MatmulCeiling(name, flops, (), sms, msrc, dtype=dtype))
    if "memory_ceiling" in a:
        m = _table("accelerator.memory_ceiling", a["memory_ceiling"], ("triad", "copy", "source"),
                   required=("triad",))
        triad = _quantity("accelerator.memory_ceiling.triad", m["triad"], "bytes/s")
        copy = _quantity("accelerator.memory_ceiling.copy", m.get("copy", triad), "bytes/s")
        ceilings[id(_MEMORY)] = (_MEMORY, MemoryCeiling(
            name, triad, copy, _text("accelerator.memory_ceiling.source", m.get("source", source))))
    if "attention_kernel" in a:
        m = _table("accelerator.attention_kernel", a["attention_kernel"],
                   ("forward", "backward", "kernel", "source"), required=("forward", "backward"))
        ceilings[id(_ATTENTION)] = (_ATTENTION, AttentionKernel(
            name, _text("accelerator.attention_kernel.kernel", m.get("kernel", "fused attention")),
            _quantity("accelerator.attention_kernel.forward", m["forward"], "flop/s"),
            _quantity("accelerator.attention_kernel.backward", m["backward"], "flop/s"),
            _text("accelerator.attention_kernel.source", m.get("source", source))))
    new_links = {}
    raw_links = data.get("links", [])
    if not isinstance(raw_links, list):
        raise ValueError(f"links must be a list of links, got {raw_links!r}")
    for i, raw in enumerate(raw_links):
        where = f"links[{i}]"
        ln = _table(where, raw, _LINK_KEYS, required=("name", "alpha", "beta"))
        lname = _new_name(f"{where}.name", ln["name"], acc_names | link_names | {name}, "name")
        lsrc = _text(f"{where}.source", ln.get("source", source))
        new_links[lname] = Link(name=lname, alpha=_quantity(f"{where}.alpha", ln["alpha"], "seconds"),
                                beta=_quantity(f"{where}.beta", ln["beta"], "bytes/s"), source=lsrc,
                                alpha_source=_text(f"{where}.alpha_source", ln.get("alpha_source", lsrc)),
                                note=_text(f"{where}.note", ln.get("note"), required=False))
    nd = None
    if data.get("node") is not None:
        n = _table("node", data["node"], _NODE_KEYS, required=("name", "gpus", "scale_up", "scale_out"))
        nname = _new_name("node.name", n["name"], node_names, "node")
        known = {k for k in _LINKS if k not in _owned_links(name)} | set(new_links)
        ups = {}
        for f in ("scale_up", "scale_out", "host_link"):
            if f == "host_link" and f not in n:
                continue
            ups[f] = _key(_text(f"node.{f}", n[f]))
            if ups[f] not in known:
                raise ValueError(f"node.{f}: unknown link {n[f]!r}; links: {', '.join(sorted(known))}")
        gpus = _count("node.gpus", n["gpus"])
        nsrc = _text("node.source", n.get("source", source))
        nd = Node(name=nname, gpus=gpus, accelerator=name, scale_up=ups["scale_up"],
                  scale_out=ups["scale_out"], nics=_count("node.nics", n.get("nics", gpus)),
                  host_link=ups.get("host_link", ""),
                  host_memory=(_quantity("node.host_memory", n["host_memory"], "bytes")
                               if "host_memory" in n else None),
                  host_memory_bandwidth=(_quantity("node.host_memory_bandwidth",
                                                   n["host_memory_bandwidth"], "bytes/s")
                                         if "host_memory_bandwidth" in n else None),
                  source=nsrc, sources={"gpus": nsrc, "nics": nsrc},
                  note=_text("node.note", n.get("note"), required=False))
        owner = next((acc_name for acc_name, (node_name, _) in _REGISTERED.items()
                      if node_name == nname and acc_name != name), None)
        if owner is not None:
            raise ValueError(f"node.name: {nname!r} is already registered with accelerator {owner!r}")
    for lname in new_links:
        owner = next((acc_name for acc_name, (_, owned) in _REGISTERED.items()
                      if lname in owned and acc_name != name), None)
        if owner is not None:
            raise ValueError(f"links: {lname!r} is already registered with accelerator {owner!r}")
    # every field checked: replace what this name registered before, then add
    if name in _REGISTERED:
        unregister(name)
    _ACCELERATORS[name] = acc
    for table, entry in ceilings.values():
        table[name] = entry
    _LINKS.update(new_links)
    if nd is not None:
        _NODES[nd.name] = nd
    _REGISTERED[name] = (nd.name if nd is not None else None, list(new_links))
    return acc


def _owned_links(name):
    return _REGISTERED.get(name, (None, []))[1]


def unregister(name: str) -> None:
    """Remove an accelerator added with :func:`register`, with its node and links (chapter
    27). ``ValueError`` for a catalog name or one that was never registered."""
    key = _key(name) if isinstance(name, str) else name
    if key not in _REGISTERED:
        raise ValueError(f"name {name!r} was not registered; registered: "
                         f"{', '.join(_REGISTERED) or 'none'}")
    node_name, link_names = _REGISTERED.pop(key)
    for table in (_ACCELERATORS, _CEILINGS, _CEILINGS_FP8, _MEMORY, _ATTENTION):
        table.pop(key, None)
    for lname in link_names:
        _LINKS.pop(lname, None)
    if node_name is not None:
        _NODES.pop(node_name, None)


def registered() -> list[str]:
    """The accelerators added with :func:`register` (chapter 27)."""
    return list(_REGISTERED)
