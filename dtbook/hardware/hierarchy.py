"""Nodes and the memory hierarchy of a cluster (chapter 03): :class:`Node`, a server of GPUs
with its links and host memory; :class:`Tier`, one rung between a GPU's registers and the
network; the nodes' table and the lookups :func:`nodes`, :func:`node` and :func:`ladder`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..units import GB, TB
from .catalog import _H800_SOURCES, Link, get

__all__ = ["Tier", "Node", "node", "nodes", "ladder"]


# ---------------------------------------------------------------------- the memory hierarchy
# Added for chapter 03 (The Memory Hierarchy of a Cluster): the rungs between a GPU's
# registers and the network, and the node that holds them. Same conventions as the catalog: SI
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
