"""The roofline and its third, network, ceiling.

A kernel or a training step runs no faster than its slowest resource allows. With peak
compute F, memory bandwidth and network bandwidth, and the work's arithmetic intensity
against each (FLOP per byte moved), the attainable rate is the least of three ceilings:

    min(F, bw_mem * I_mem, bw_net * I_net)

The same bound read as time: a piece of work of W FLOP that moves Q_mem bytes through
memory and Q_net bytes over the network takes at least max(W/F, Q_mem/bw_mem, Q_net/bw_net).

The module holds the ceilings (:func:`attainable_flops`, :func:`extended_roofline`,
:func:`binding_ceiling`, :func:`ridge_point`, :func:`min_time`), the communication
intensity of the three parallelisms (:func:`dp_intensity`, :func:`tp_intensity`,
:func:`pp_intensity`, from the bytes each parallelism's own module counts),
compute/communication overlap (:func:`step_time`, :func:`comm_fraction`), and two small records, :class:`Ceilings` (a
machine) and :class:`Kernel` (a piece of work), that let a chapter place measured kernels on
a roofline. An intensity may be ``math.inf``: work that moves no bytes over a resource is
never bound by it.

Chapter 01 previews it; chapter 02 derives and measures it; chapter 03 uses the TP and PP
intensities to place parallelisms on the memory hierarchy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import maximum, minimum

__all__ = [
    "arithmetic_intensity", "ridge_point", "attainable_flops",
    "extended_roofline", "binding_ceiling", "min_time", "dp_intensity",
    "tp_intensity", "pp_intensity", "step_time",
    "comm_fraction", "Ceilings", "Kernel", "CEILINGS",
]

CEILINGS = ("compute", "memory", "network")


def _intensity(name, value):
    """Like ``check.nonnegative``, but ``inf`` is allowed: no bytes moved, no ceiling."""
    if isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) \
            and math.isinf(value) and value > 0:
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        finite = np.where(np.isposinf(value), 0.0, value)
        check.nonnegative(name, finite)
        return value
    return check.nonnegative(name, value)


def arithmetic_intensity(flops, nbytes):
    """FLOP performed per byte moved (chapter 02): through memory, or, with the bytes a
    device sends over the network, the communication intensity I_net."""
    check.nonnegative("flops", flops)
    check.positive("nbytes", nbytes)
    return flops / nbytes


def ridge_point(peak_flops, bandwidth):
    """The intensity F/bw at which a bandwidth ceiling meets the compute roof (chapter 02)."""
    check.positive("peak_flops", peak_flops)
    check.positive("bandwidth", bandwidth)
    return peak_flops / bandwidth


def attainable_flops(intensity, peak_flops, bandwidth):
    """Classic roofline: min(F, bandwidth * intensity) in FLOP/s (chapter 02)."""
    check.nonnegative("intensity", intensity)
    check.positive("peak_flops", peak_flops)
    check.positive("bandwidth", bandwidth)
    return minimum(peak_flops, bandwidth * intensity)


def extended_roofline(peak_flops, mem_bandwidth, mem_intensity, net_bandwidth, net_intensity):
    """Three ceilings: min(F, bw_mem * I_mem, bw_net * I_net) in FLOP/s (chapters 01, 02).

    An intensity of ``math.inf`` (no bytes over that resource) removes that ceiling.
    """
    check.positive("peak_flops", peak_flops)
    check.positive("mem_bandwidth", mem_bandwidth)
    _intensity("mem_intensity", mem_intensity)
    check.positive("net_bandwidth", net_bandwidth)
    _intensity("net_intensity", net_intensity)
    return minimum(peak_flops, mem_bandwidth * mem_intensity, net_bandwidth * net_intensity)


def binding_ceiling(peak_flops, mem_bandwidth, mem_intensity, net_bandwidth, net_intensity) -> str:
    """Which of "compute", "memory" or "network" sets the extended roofline (chapter 02).

    Numeric inputs only: which ceiling binds is a comparison, not an expression. An
    intensity of ``math.inf`` means that resource carries no bytes and never binds; on a tie
    the earlier of compute, memory, network is named.
    """
    extended_roofline(peak_flops, mem_bandwidth, mem_intensity, net_bandwidth, net_intensity)
    for name, value in (("peak_flops", peak_flops), ("mem_bandwidth", mem_bandwidth),
                        ("mem_intensity", mem_intensity), ("net_bandwidth", net_bandwidth),
                        ("net_intensity", net_intensity)):
        check.scalar(name, value)  # the answer names one ceiling
    ceilings = {
        "compute": peak_flops,
        "memory": mem_bandwidth * mem_intensity,
        "network": net_bandwidth * net_intensity,
    }
    for name, value in ceilings.items():
        if isinstance(value, sp.Basic) and value.free_symbols:
            raise ValueError(f"binding_ceiling needs numbers; the {name} ceiling is symbolic")
    return min(ceilings, key=lambda k: float(ceilings[k]))


def min_time(flops, peak_flops, mem_bytes=0.0, mem_bandwidth=math.inf, net_bytes=0.0,
             net_bandwidth=math.inf):
    """The roofline read as time: max(W/F, Q_mem/bw_mem, Q_net/bw_net) seconds (chapter 02).

    ``flops`` W, ``mem_bytes`` and ``net_bytes`` the bytes moved through memory and over the
    network; a bandwidth left at ``math.inf`` (the default) takes no time. This is the least
    time the work can take when compute, memory traffic and communication overlap perfectly;
    :func:`step_time` covers the case where communication does not overlap.
    """
    check.nonnegative("flops", flops)
    check.positive("peak_flops", peak_flops)
    check.nonnegative("mem_bytes", mem_bytes)
    check.nonnegative("net_bytes", net_bytes)
    for name, bw in (("mem_bandwidth", mem_bandwidth), ("net_bandwidth", net_bandwidth)):
        if not (isinstance(bw, float) and math.isinf(bw) and bw > 0):
            check.positive(name, bw)
    return maximum(flops / peak_flops, mem_bytes / mem_bandwidth, net_bytes / net_bandwidth)


# --------------------------------------------------------------------------------------
# Communication intensity of the three parallelisms (chapter 02; used again in 03, 14-16)
# --------------------------------------------------------------------------------------

def dp_intensity(batch, seq, world, *, grad_bytes, exact=False):
    """Communication intensity of data parallelism, FLOP per byte sent (chapter 02).

    Each of P GPUs processes B·S/P of the B·S tokens of a step, 6Ψ·BS/P FLOP, and sends
    :func:`dtbook.data_parallel.gradient_bytes_sent`, 2(P − 1)/P · Ψs for the ring
    (``exact=True``): (6ΨBS/P) / (2(P − 1)/P · Ψs) = 3BS/((P − 1)s). The book's large-P
    form (``exact=False``) divides by that count's limit 2Ψs: 3BS/(Ps). Ψ cancels: only the
    tokens per step, the number of GPUs and the gradient's bytes per element decide.
    """
    from . import data_parallel
    check.positive("batch", batch)
    check.positive("seq", seq)
    check.count("world", world, minimum=2 if exact else 1)
    check.positive("grad_bytes", grad_bytes)
    flops = 6 * batch * seq / world                    # per parameter, per GPU
    if exact:
        return flops / data_parallel.gradient_bytes_sent(1, world, grad_bytes=grad_bytes)
    return flops / (2 * grad_bytes)                   # lim P→∞ of gradient_bytes_sent / Ψ


def tp_intensity(hidden, tp, *, value_bytes=2):
    """Communication intensity of tensor parallelism for one layer: 9H/((t − 1)s) (chapter 02).

    A layer's 12H² weights cost 6 · 12H² = 72H² FLOP per token forward and backward, split
    over t GPUs; divided by :func:`dtbook.tensor_parallel.layer_comm_bytes` per token (four
    ring all-reduces of the H·s activation, 8(t − 1)/t · Hs), it is 9H/((t − 1)s): it grows
    with the hidden size H, not with the batch (attention's S-dependent FLOPs are left out,
    which makes this a lower bound).
    """
    from . import tensor_parallel
    check.positive("hidden", hidden)
    check.count("tp", tp, minimum=2)
    check.positive("value_bytes", value_bytes)
    sent = tensor_parallel.layer_comm_bytes(1, 1, hidden, tp, bytes_per_element=value_bytes)
    return 72 * hidden**2 / tp / sent


def pp_intensity(hidden, layers, pp, *, value_bytes=2):
    """Communication intensity of pipeline parallelism: 36HL/(ps) (chapter 02).

    A stage holds L/p layers, 72H² · L/p FLOP per token forward and backward, and sends two
    :func:`dtbook.pipeline_parallel.p2p_message_bytes` per token (the activation forward,
    its gradient backward, 2Hs): (72H²L/p)/(2Hs) = 36HL/(ps). It is larger than the TP
    intensity by about 4L(t − 1)/p: a stage boundary is crossed once per L/p layers, TP's
    all-reduces four times per layer.
    """
    from . import pipeline_parallel
    check.positive("hidden", hidden)
    check.positive("layers", layers)
    check.count("pp", pp, minimum=1)
    check.positive("value_bytes", value_bytes)
    sent = 2 * pipeline_parallel.p2p_message_bytes(1, 1, hidden, value_bytes)
    return 72 * hidden**2 * layers / pp / sent


def step_time(compute_time, comm_time, overlap=0.0):
    """Step time when a fraction ``overlap`` of the shorter phase hides under the longer:
    Tc + Tm − f·min(Tc, Tm) (chapter 02).

    ``overlap=0``: nothing overlaps, Tc + Tm. ``overlap=1``: perfect overlap, max(Tc, Tm),
    the roofline bound. (The fraction is of the shorter phase; the original edition also uses a
    fraction of the communication time.)
    """
    check.nonnegative("compute_time", compute_time)
    check.nonnegative("comm_time", comm_time)
    check.nonnegative("overlap", overlap)
    if not isinstance(overlap, sp.Basic) and np.any(np.asarray(overlap) > 1):
        raise ValueError(f"overlap must lie in [0, 1], got {overlap!r}")
    shorter = minimum(compute_time, comm_time)
    return compute_time + comm_time - overlap * shorter


def comm_fraction(compute_time, comm_time, overlap=0.0):
    """The share of a step spent in communication that compute does not hide (chapter 02):
    (Tm − f·min(Tc, Tm)) / step_time."""
    total = step_time(compute_time, comm_time, overlap)
    check.positive("step time", total)
    return (comm_time - overlap * minimum(compute_time, comm_time)) / total


# --------------------------------------------------------------------------------------
# A machine and a piece of work, for placing measured kernels on a roofline
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ceilings:
    """The three roofs of one machine: ``peak_flops`` (FLOP/s), ``mem_bandwidth`` and
    ``net_bandwidth`` (bytes/s; the network figure per direction). Chapter 02.

    Build one from the catalog with :meth:`from_hardware`, or from measurements.
    """

    peak_flops: float
    mem_bandwidth: float
    net_bandwidth: float
    name: str = ""

    def __post_init__(self):
        check.positive("peak_flops", self.peak_flops)
        check.positive("mem_bandwidth", self.mem_bandwidth)
        check.positive("net_bandwidth", self.net_bandwidth)

    @classmethod
    def from_hardware(cls, accelerator, link, dtype="bf16"):
        """Ceilings of a catalog accelerator (peak for ``dtype``, HBM bandwidth) on a
        catalog link (β per direction); names or :mod:`dtbook.hardware` objects."""
        from . import hardware

        acc = hardware.get(accelerator) if isinstance(accelerator, str) else accelerator
        net = hardware.get(link) if isinstance(link, str) else link
        return cls(acc.peak(dtype), acc.hbm_bandwidth, net.beta,
                   name=f"{acc.name} {dtype} on {net.name}")

    def ridge(self, resource):
        """The ridge point F/bw of ``"memory"`` or ``"network"``, in FLOP per byte."""
        if resource == "memory":
            return ridge_point(self.peak_flops, self.mem_bandwidth)
        if resource == "network":
            return ridge_point(self.peak_flops, self.net_bandwidth)
        raise ValueError(f"resource must be 'memory' or 'network', got {resource!r}")

    def ceiling(self, resource, intensity):
        """The rate one ceiling allows at ``intensity``: F for ``"compute"``, bw·I otherwise."""
        if resource == "compute":
            return self.peak_flops
        bw = {"memory": self.mem_bandwidth, "network": self.net_bandwidth}.get(resource)
        if bw is None:
            raise ValueError(f"resource must be one of {', '.join(CEILINGS)}, got {resource!r}")
        _intensity("intensity", intensity)
        return bw * intensity

    def attainable(self, kernel):
        """The extended roofline's bound on ``kernel``'s FLOP/s."""
        return extended_roofline(self.peak_flops, self.mem_bandwidth, kernel.mem_intensity,
                                 self.net_bandwidth, kernel.net_intensity)

    def binding(self, kernel):
        """Which ceiling, ``"compute"``, ``"memory"`` or ``"network"``, bounds ``kernel``."""
        return binding_ceiling(self.peak_flops, self.mem_bandwidth, kernel.mem_intensity,
                               self.net_bandwidth, kernel.net_intensity)

    def min_time(self, kernel):
        """The least time ``kernel`` can take on this machine (:func:`min_time`)."""
        return min_time(kernel.flops, self.peak_flops, kernel.mem_bytes, self.mem_bandwidth,
                        kernel.net_bytes, self.net_bandwidth)


@dataclass(frozen=True)
class Kernel:
    """A piece of work: ``flops`` performed, ``mem_bytes`` read and written in memory,
    ``net_bytes`` sent over the network (chapter 02). Zero bytes give an infinite intensity."""

    name: str
    flops: float
    mem_bytes: float
    net_bytes: float = 0.0

    def __post_init__(self):
        check.positive("flops", self.flops)
        check.nonnegative("mem_bytes", self.mem_bytes)
        check.nonnegative("net_bytes", self.net_bytes)

    @property
    def mem_intensity(self) -> float:
        """FLOP per byte of memory traffic (``inf`` if it moves none)."""
        return arithmetic_intensity(self.flops, self.mem_bytes) if self.mem_bytes else math.inf

    @property
    def net_intensity(self) -> float:
        """FLOP per byte sent over the network (``inf`` if it sends none)."""
        return arithmetic_intensity(self.flops, self.net_bytes) if self.net_bytes else math.inf

    def intensity(self, resource):
        """The intensity against ``"memory"`` or ``"network"``."""
        if resource == "memory":
            return self.mem_intensity
        if resource == "network":
            return self.net_intensity
        raise ValueError(f"resource must be 'memory' or 'network', got {resource!r}")


check.guard_module(globals(), arrays=True)  # every public formula checks its arguments (DESIGN.md); lists are arrays
