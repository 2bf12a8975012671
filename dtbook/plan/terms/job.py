"""What the planner's terms take (chapter 27): the :class:`Job` every candidate shares (the
model, the accelerator, its node's links with NCCL's protocol efficiency, the batch and the
software's choices), the :class:`Layouts` of candidate arrays, and the small records the terms
return (:class:`Seconds`, :class:`LayerCompute`, :class:`LayerKinds`, :class:`Stage`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ... import hardware

__all__ = ["COLUMNS", "links_for", "protocol_efficiency", "Job", "Layouts", "Seconds",
           "LayerCompute", "Stage", "LayerKinds", "DEEPEP_SMS", "default_comm_sms"]


COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
           "sequence_parallel")
VALUE = 2          # BF16 activations, gradients and parameters on the wire
MAIN_GRAD = 4      # FP32 main gradients: what the optimizer reads, the norm reads, zeroing writes
_SCALE_OUT = {"a100-80gb": ("nvlink3", "ib-hdr200"), "h100-sxm": ("nvlink4", "ib-ndr400"),
              "h200": ("nvlink4", "ib-ndr400"), "b200": ("nvlink5", "ib-ndr400")}


def links_for(gpu: str, node=None):
    """(scale-up link, scale-out link) of the node that holds ``gpu`` (chapter 27): the
    first node of :mod:`dtbook.hardware` with that accelerator, or the node named ``node``
    (its accelerator must be ``gpu``). A node with fewer NICs than GPUs shares them: every
    GPU sends off-node at once (data-parallel reductions, pipeline sends), so each gets
    ``nics / gpus`` of a port (Jean Zay: 4 Omni-Path ports for 8 GPUs)."""
    hardware.get(gpu)
    if node is not None:
        nd = hardware.node(node)
        if nd.accelerator != gpu:
            raise ValueError(f"node {nd.name!r} holds {nd.accelerator}, not gpu {gpu!r}")
        out = hardware.get(nd.scale_out)
        if nd.nics < nd.gpus:
            out = dataclasses.replace(out, beta=out.beta * nd.nics / nd.gpus)
        return hardware.get(nd.scale_up), out
    for name in hardware.nodes():
        nd = hardware.node(name)
        if nd.accelerator == gpu:
            return hardware.get(nd.scale_up), hardware.get(nd.scale_out)
    if gpu not in _SCALE_OUT:
        raise ValueError(f"gpu {gpu!r} has no node links in dtbook.hardware")
    up, out = _SCALE_OUT[gpu]
    return hardware.get(up), hardware.get(out)


def protocol_efficiency(link) -> float:
    """Fraction of a link's line rate a large NCCL ring collective reaches (chapter 27):
    :func:`dtbook.hardware.published_busbw` ring rows (bus bandwidth over the line rate),
    measured on NVLink4 (H100), NVLink3 (A100) and InfiniBand NDR; a link with none takes the
    first catalogued row of its kind (``nvlink*``: the H100's; ``ib-*``: NDR's), the overhead
    being NCCL's protocol more than the generation; 1 for others."""
    name = link.name if hasattr(link, "name") else str(link)
    kind = "nvlink" if name.startswith("nvlink") else "ib-" if name.startswith("ib-") else None
    rows = [b for b in hardware.published_busbw() if b.algorithm == "ring"]
    same = [b for b in rows if b.link == name] or [b for b in rows if kind and b.link.startswith(kind)]
    if not same:
        return 1.0
    b = same[0]
    return 0.5 * (b.busbw_low + b.busbw_high) / hardware.get(b.link).beta


@dataclasses.dataclass(frozen=True)
class Job:
    """What every candidate of one evaluation shares (chapter 27): the model ``cfg``, the
    accelerator ``gpu`` and its measured HBM bandwidth ``hbm``, the node's links ``up``
    (scale-up) and ``out`` (scale-out) with NCCL's protocol efficiency applied to their
    ``(alpha, beta)`` (``up_ab``, ``out_ab``), the sequence length, the global batch and the
    software's choices; ``params`` is the model's parameter count and ``expert_params`` the
    routed experts' share of it. Build it with :meth:`make`."""

    cfg: object
    gpu: str
    seq: int
    global_batch: int
    dtype: str
    gpus_per_node: int
    attention: str
    overlap_grad_reduce: bool
    gradient_accumulation_fusion: bool
    pipeline_engine: str
    hbm: float
    up: object
    out: object
    up_ab: tuple
    out_ab: tuple
    params: float
    expert_params: float
    first_stage_layers: int | None = None   # Megatron's decoder_first_pipeline_num_layers
    last_stage_layers: int | None = None    # Megatron's decoder_last_pipeline_num_layers
    expert_tensor_parallel: int | None = None   # Megatron-Core's ETP (None: = tp)
    moe_dispatcher: str = "alltoall"    # "alltoall": a copy per expert; "deepep": per node
    moe_comm_overlap: bool = False      # EP all-to-alls hidden under another micro-batch
    moe_comm_sms: int = 0               # SMs the overlapped dispatch kernels hold

    @classmethod
    def make(cls, cfg, *, gpu, seq, global_batch, dtype="bf16", gpus_per_node=8,
             attention="flash", overlap_grad_reduce=True, gradient_accumulation_fusion=True,
             pipeline_engine="megatron", node=None, first_stage_layers=None,
             last_stage_layers=None, expert_tensor_parallel=None, moe_dispatcher="alltoall",
             moe_comm_overlap=False, moe_comm_sms=None) -> "Job":
        up, out = links_for(gpu, node)
        expert = 0
        if cfg.is_moe:
            expert = (cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
        return cls(cfg, gpu, seq, global_batch, dtype, gpus_per_node, attention,
                   overlap_grad_reduce, gradient_accumulation_fusion, pipeline_engine,
                   hardware.memory_ceiling(gpu).triad, up, out,
                   (up.alpha, up.beta * protocol_efficiency(up)),
                   (out.alpha, out.beta * protocol_efficiency(out)), cfg.num_params(), expert,
                   first_stage_layers, last_stage_layers, expert_tensor_parallel,
                   moe_dispatcher, bool(moe_comm_overlap),
                   default_comm_sms(moe_dispatcher, moe_comm_overlap) if moe_comm_sms is None
                   else int(moe_comm_sms))

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient value in the accumulation and the DP reduction: FP32, FP16 for
        ``dtype="fp16"`` runs."""
        return 2 if self.dtype == "fp16" else 4

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.cfg.layers - self.cfg.dense_layers if self.cfg.is_moe else 0


class Layouts(NamedTuple):
    """One float array per knob of :data:`COLUMNS`, one entry per candidate (``rc``:
    recompute as 0 none, 1 selective, 2 full, 3 selective-op; ``sp``: sequence parallelism
    0/1), and what follows from them with the :class:`Job`: ``m`` micro-batches per step and
    ``tokens`` per micro-batch on one GPU. Build it with :meth:`of`."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    mb: np.ndarray
    zero: np.ndarray
    rc: np.ndarray
    sp: np.ndarray
    m: np.ndarray
    tokens: np.ndarray

    @classmethod
    def of(cls, cols, job: Job) -> "Layouts":
        """The candidates of ``cols`` (a dict of :data:`COLUMNS` to arrays)."""
        tp, pp, dp, cp, ep, vpp, mb, zero, rc, sp = (np.asarray(cols[c], dtype=float)
                                                     for c in COLUMNS)
        return cls(tp, pp, dp, cp, ep, vpp, mb, zero, rc, sp,
                   m=job.global_batch / (dp * mb), tokens=mb * job.seq / cp)

    @property
    def replicas(self):
        """Data-parallel replicas a gradient is reduced over: ``dp * cp``."""
        return self.dp * self.cp


class Seconds(NamedTuple):
    """A time split into the share spent in the forward and in the backward pass."""

    forward: np.ndarray
    backward: np.ndarray

    @property
    def total(self):
        return self.forward + self.backward


class LayerCompute(NamedTuple):
    """Compute of one layer for one micro-batch on one GPU (seconds): its linear GEMMs
    (``linear``, forward), the attention core forward and backward (``core``,
    ``core_backward``), and the logits GEMM forward (``logits``); ``kinds``, each kind of
    layer apart (:class:`LayerKinds`); ``op_again``, the forward of the matmuls op-level
    selective recompute re-runs (:func:`~dtbook.plan.terms.compute._op_recomputed`)."""

    linear: np.ndarray
    core: np.ndarray
    core_backward: np.ndarray
    logits: np.ndarray
    kinds: object = None
    op_again: object = 0.0

    @property
    def forward(self):
        return self.linear + self.core

    @property
    def backward(self):
        return 2 * self.linear + self.core_backward   # data and weight gradients: 2 GEMMs per GEMM


class Stage(NamedTuple):
    """The slowest pipeline stage for one micro-batch: its ``layers``, the layer counts of the
    ``busiest`` and the ``last`` stage, and its ``compute`` split into ``forward`` and
    ``backward`` (seconds, the logits included when it is the last); the layers of the
    ``first`` stage, the slowest stage's ``moe`` layers and its ``mean`` layer
    (:class:`LayerCompute`)."""

    layers: np.ndarray
    busiest: np.ndarray
    last: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    first: np.ndarray = None
    moe: np.ndarray = None
    mean: object = None

    @property
    def compute(self):
        return self.forward + self.backward


# DeepEP's kernels run on 20 SMs: Megatron-Core's moe_deepep_num_sms default (transformer_config
# .py), DeepSeek-V3's own 20 of the H800's 132 (DeepSeek-V3 report, Sec. 3.2.2)
DEEPEP_SMS = 20


def default_comm_sms(moe_dispatcher, moe_comm_overlap):
    """SMs the EP dispatch kernels hold while they overlap compute: :data:`DEEPEP_SMS` for
    DeepEP overlapped, else 0 (not overlapped, they take nothing from compute; NCCL's
    all-to-all overlapped is not costed)."""
    return DEEPEP_SMS if moe_dispatcher == "deepep" and moe_comm_overlap else 0


class LayerKinds(NamedTuple):
    """Compute of each kind of layer for one micro-batch on one GPU (seconds, forward):
    ``attention`` maps a window (``None``: full causal attention) to ``(linear, core,
    core_backward)`` of the attention half of a block, ``mlp`` maps ``False`` (a dense MLP)
    and ``True`` (a mixture of experts) to the linear forward of the MLP half; ``op_again``
    maps ``"attention"`` and each MLP kind to the forward of the matmuls op-level selective
    recompute re-runs in that half (:func:`~dtbook.plan.terms.compute._op_recomputed`)."""

    attention: dict
    mlp: dict
    op_again: dict = None
