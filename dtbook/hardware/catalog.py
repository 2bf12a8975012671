"""The catalog's accelerators and links (chapter 02): :class:`Accelerator` and :class:`Link`,
their tables, and the lookups :func:`get`, :func:`names`, :func:`accelerators` and
:func:`links`. The conventions every figure keeps (dense peaks, HBM in GiB, β per direction,
α an order of magnitude) are stated once, in :mod:`dtbook.hardware`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..units import GB, GiB, TB, TFLOP, PFLOP, us

__all__ = ["Accelerator", "Link", "get", "names", "accelerators", "links"]


@dataclass(frozen=True)
class Accelerator:
    """One accelerator: dense peak FLOP/s per dtype, HBM capacity and bandwidth.

    ``peak_flops`` maps a dtype name (``"fp32"``, ``"tf32"``, ``"bf16"``, ``"fp16"``,
    ``"fp8"``, ...) to dense FLOP/s; ``hbm_bytes`` in bytes (binary, GiB: see the package notes);
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
