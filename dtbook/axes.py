"""The fourth and fifth axes: what context and expert parallelism divide, and what each mesh
axis communicates (chapter 25).

A 5D mesh (DP, PP, TP, CP, EP) divides a training run five ways. Per device:

* **activations** of a layer scale with the tokens the device holds, S/cp, split by tp
  inside the tensor-parallel regions (with sequence parallelism, everywhere):
  :func:`device_activation_bytes` is :func:`dtbook.activations.layer_activation_bytes` at
  sequence S/cp, times the layers of one pipeline stage and the micro-batches in flight;
* **parameters**: dense weights Ψ_dense/(tp·pp), expert weights Ψ_expert/(tp·pp·ep)
  (:func:`params_per_device`); their training state follows :mod:`dtbook.memory`'s ZeRO
  accounting, each part over the ranks that replicate it (:func:`state_bytes`);
* **communication**, per rank and training step, with how often it happens: TP's
  all-reduces of b(S/cp)H activations (:func:`dtbook.tensor_parallel.layer_comm_bytes`,
  4 per layer and micro-batch), CP's ring of K and V
  (:func:`dtbook.sequence_parallel.ring_kv_transfers`: 3(cp − 1) blocks per layer and
  micro-batch, forward and backward, as Megatron-Core sends them; 2(cp − 1) when forward
  keeps the blocks it received, as the runnable ring does), PP's activations between
  stages, DP's gradient all-reduce once per step
  (:func:`dtbook.data_parallel.gradient_buffer_bytes`), EP's all-to-alls
  (:func:`step_traffic`). Ordering the axes by this volume × frequency, heaviest innermost,
  is the placement rule; TP comes out innermost.

Also: the all-to-all tokens an EP rank sends (:func:`ep_tokens_sent`, expectation under
uniform routing), the capacity factor that avoids drops for a skewed routing
(:func:`min_capacity_factor`), and how the latency of the DP all-reduce grows with the DP
degree (:func:`dp_latency_growth`).

Numbers, NumPy arrays or SymPy symbols; bytes and seconds (SI).
"""

from __future__ import annotations

import numpy as np

from . import _validate as check
from . import activations as act
from . import data_parallel as dpar
from . import comm, memory, moe
from . import sequence_parallel as sp_
from . import tensor_parallel as tpar


# ------------------------------------------------------------------ memory per device

def device_activation_bytes(batch, seq, hidden, heads, layers, *, tp=1, cp=1, pp=1,
                            ffn_hidden=None, in_flight=1, recompute="none", value_bytes=2):
    """Activation bytes one device keeps (chapter 25): in_flight · (layers/pp) · one layer
    of :func:`dtbook.activations.layer_activation_bytes` at sequence ``seq``/cp, split by
    ``tp`` with sequence parallelism, flash attention (no s×s matrix) and no dropout.
    ``recompute="full"`` keeps only each layer's input. Linear in S/cp: CP divides what
    TP and PP cannot."""
    check.count("layers", layers)
    check.count("tp", tp)
    check.count("cp", cp)
    check.count("pp", pp)
    check.positive("seq", seq)
    check.positive("in_flight", in_flight)
    if recompute not in ("none", "full"):
        raise ValueError(f"recompute must be 'none' or 'full', got {recompute!r}")
    layer = act.layer_activation_bytes(batch, seq / cp, hidden, heads, ffn_hidden,
                                       value_bytes=value_bytes, dropout=False,
                                       attention="flash", tp=tp, sequence_parallel=True,
                                       recompute=recompute)
    return in_flight * layers / pp * layer


def expert_bytes(expert_params, *, ep=1, tp=1, pp=1, bytes_per_param=2):
    """Bytes of expert weights on one device, Ψ_expert·s/(ep·tp·pp) (chapter 25). Without
    EP (ep = 1), E experts of m·H·F weights each sit on every TP×PP slice."""
    check.positive("bytes_per_param", bytes_per_param)
    return params_per_device(0, expert_params, tp=tp, pp=pp, ep=ep) * bytes_per_param


def params_per_device(dense_params, expert_params=0, *, tp=1, pp=1, ep=1):
    """Parameters one device holds: Ψ_dense/(tp·pp) + Ψ_expert/(tp·pp·ep) (chapter 25)."""
    check.nonnegative("dense_params", dense_params)
    check.nonnegative("expert_params", expert_params)
    check.count("tp", tp)
    check.count("pp", pp)
    check.count("ep", ep)
    return dense_params / (tp * pp) + expert_params / (tp * pp * ep)


def state_bytes(dense_params, expert_params=0, *, tp=1, pp=1, ep=1, dp=1, expert_dp=None,
                zero_stage=0, param_bytes=2, grad_bytes=2, master_bytes=4, optimizer_bytes=8):
    """Model-state bytes on one device (chapter 25): :func:`dtbook.memory.zero_state_bytes`
    of the dense share Ψ_dense/(tp·pp) over the ``dp`` ranks that replicate it, plus that
    of the expert share Ψ_expert/(tp·pp·ep) over the ``expert_dp`` ranks that replicate an
    expert (default dp). Defaults: mixed-precision Adam, 16 bytes per parameter, no ZeRO."""
    check.count("dp", dp)
    expert_dp = dp if expert_dp is None else expert_dp
    check.count("expert_dp", expert_dp)
    widths = (param_bytes, grad_bytes, master_bytes, optimizer_bytes)
    dense = memory.zero_state_bytes(params_per_device(dense_params, 0, tp=tp, pp=pp),
                                    dp, zero_stage, *widths)
    experts = memory.zero_state_bytes(params_per_device(0, expert_params, tp=tp, pp=pp, ep=ep),
                                      expert_dp, zero_stage, *widths)
    return dense + experts


# ------------------------------------------------------------------ what each axis sends

def cp_ring_bytes(batch, seq, hidden, cp, *, tp=1, kv_hidden=None, value_bytes=2,
                  kv_saved=False):
    """Bytes one rank sends per layer in ring attention with TP inside, forward and backward
    (chapter 25): :func:`dtbook.sequence_parallel.ring_kv_transfers` blocks of
    :func:`dtbook.sequence_parallel.ring_kv_step_bytes` divided by tp, the K and V of the
    rank's S/cp tokens and its heads, 2·b·(S/cp)·(H_kv/tp)·s each. That is 3(cp − 1) blocks
    as Megatron-Core sends them (K and V forward; K and V again with dK, dV backward), and
    2(cp − 1) with ``kv_saved=True`` (forward keeps every block it received and backward
    sends only dK and dV, as the runnable ring does). ``kv_hidden`` is the K/V width
    (heads_kv · head_dim; default ``hidden``, no grouped-query attention)."""
    check.count("cp", cp)
    check.count("tp", tp)
    check.positive("hidden", hidden)
    kv_hidden = hidden if kv_hidden is None else check.positive("kv_hidden", kv_hidden)
    step = sp_.ring_kv_step_bytes(batch, seq, kv_hidden, cp, value_bytes=value_bytes) / tp
    return sp_.ring_kv_transfers(cp, kv_saved=kv_saved) * step


def ep_tokens_sent(tokens, experts_per_token, ep):
    """Token copies one EP rank sends to other ranks per dispatch (chapter 25): of its k·T
    assignments a share 1/ep stays with its own experts, so k·T·(1 − 1/ep) leave. Exact in
    expectation under uniform routing (chapter 18's ``dispatch_matrix`` with equal shares);
    a realised routing differs by its imbalance."""
    check.positive("tokens", tokens)
    check.count("experts_per_token", experts_per_token)
    check.count("ep", ep)
    # chapter 13's all-to-all share, counted in token copies instead of bytes
    return comm.traffic("alltoall", experts_per_token * tokens, ep).sent_bytes


def step_traffic(hidden, layers, params, *, batch, seq, microbatches, tp=1, cp=1, pp=1, dp=1,
                 ep=1, experts_per_token=1, moe_layers=0, kv_hidden=None, value_bytes=2,
                 grad_bytes=2, kv_saved=False):
    """Bytes one rank sends per training step along each mesh axis, as a dict
    {"tp", "cp", "pp", "dp", "ep"} (chapter 25). Per micro-batch of ``batch`` sequences
    (S/cp tokens each on this rank) and per layer of the rank's stage (layers/pp):

    - tp: :func:`dtbook.tensor_parallel.layer_comm_bytes` at sequence S/cp, four ring
      all-reduces of b(S/cp)H·s, 2(tp − 1)/tp of each sent;
    - cp: :func:`cp_ring_bytes` (``kv_saved`` as there);
    - pp: the stage boundary's activation b(S/cp)H·s/tp (sequence-parallel) forward and its
      gradient backward, per micro-batch;
    - ep: four all-to-alls (dispatch, combine, and both backward) on the ``moe_layers`` of
      the stage, k·b(S/cp)·H·s·(ep − 1)/ep each;
    - dp: one ring all-reduce of the rank's gradients
      (:func:`dtbook.data_parallel.gradient_buffer_bytes`), 2(dp − 1)/dp of them
      (:func:`dtbook.data_parallel.gradient_bytes_sent`), once per step.

    Volume × frequency, ordered, is the placement rule: the heaviest axis goes innermost.
    """
    for name, value in (("microbatches", microbatches), ("layers", layers), ("tp", tp),
                        ("cp", cp), ("pp", pp), ("dp", dp), ("ep", ep)):
        check.count(name, value)
    for name, value in (("hidden", hidden), ("batch", batch), ("seq", seq),
                        ("value_bytes", value_bytes)):
        check.positive(name, value)
    check.count("experts_per_token", experts_per_token)
    check.nonnegative("moe_layers", moe_layers)
    stage_layers = layers / pp
    tokens = seq / cp                                     # per sequence, on this rank
    tp_bytes = tpar.layer_comm_bytes(batch, tokens, hidden, tp, bytes_per_element=value_bytes)
    cp_bytes = cp_ring_bytes(batch, seq, hidden, cp, tp=tp, kv_hidden=kv_hidden,
                             value_bytes=value_bytes, kv_saved=kv_saved)
    n_act = tpar.activation_bytes(batch, tokens, hidden, bytes_per_element=value_bytes)
    pp_bytes = 2 * n_act / tp * (1 if _many(pp) else 0)
    ep_bytes = (moe.layer_alltoall_bytes(batch * tokens, hidden, ep, experts_per_token,
                                         value_bytes) * moe_layers / pp)
    n_grad = dpar.gradient_buffer_bytes(params, tp=tp, pp=pp, grad_bytes=grad_bytes)
    dp_bytes = dpar.gradient_bytes_sent(n_grad / grad_bytes, dp, grad_bytes=grad_bytes)
    per_micro = microbatches * stage_layers
    return {"tp": per_micro * tp_bytes, "cp": per_micro * cp_bytes,
            "pp": microbatches * pp_bytes, "ep": microbatches * ep_bytes, "dp": dp_bytes}


def _many(p):
    # a symbol is taken as > 1; a number of 1 ranks means the axis sends nothing
    return not (isinstance(p, (int, float, np.integer, np.floating)) and p == 1)


# ------------------------------------------------------------------ routing and growth

def min_capacity_factor(fractions):
    """The smallest capacity factor that drops no token when expert i receives a share fᵢ of
    the assignments: c = max fᵢ / (1/E) = E·max fᵢ (chapter 25)."""
    f = np.asarray(check.nonnegative("fractions", fractions), dtype=float)
    if f.ndim != 1 or f.size < 1:
        raise ValueError(f"fractions must be a list of shares, got {fractions!r}")
    if not np.isclose(f.sum(), 1):
        raise ValueError(f"fractions must sum to 1, got {f.sum():.6g}")
    return float(f.size * f.max())


def dropped_tokens(fractions, tokens, capacity_factor=1.25, experts_per_token=1):
    """Assignments dropped when expert i receives fᵢ·k·T of them and holds C =
    :func:`dtbook.moe.capacity` slots: Σ max(0, fᵢ·k·T − C) (chapter 25)."""
    f = np.asarray(check.nonnegative("fractions", fractions), dtype=float)
    min_capacity_factor(fractions)                        # the same checks on the shares
    for name, value in (("tokens", tokens), ("capacity_factor", capacity_factor),
                        ("experts_per_token", experts_per_token)):
        check.scalar(name, value)  # the answer is one sum over the experts
    slots = moe.capacity(tokens, f.size, experts_per_token, capacity_factor)
    load = f * experts_per_token * tokens
    return float(np.maximum(0.0, load - slots).sum())


def dp_latency_growth(dp_from, dp_to, algorithm="ring"):
    """How many times the latency term (steps · α) of the DP all-reduce grows from
    ``dp_from`` to ``dp_to`` ranks (chapter 25): ring 2(P − 1) steps, so (P₂ − 1)/(P₁ − 1);
    a tree or recursive halving/doubling 2·log₂P steps, so log P₂/log P₁. Steps from
    :func:`dtbook.comm.traffic`."""
    check.count("dp_from", dp_from, minimum=2)
    check.count("dp_to", dp_to, minimum=2)
    steps = lambda p: comm.traffic("allreduce", 1, p, algorithm).steps
    return steps(dp_to) / steps(dp_from)


def dp_bandwidth_growth(dp_from, dp_to):
    """How many times the bytes each rank sends in a ring all-reduce grow from ``dp_from``
    to ``dp_to`` ranks: ((P₂ − 1)/P₂)/((P₁ − 1)/P₁), close to 1 (chapter 25)."""
    check.count("dp_from", dp_from, minimum=2)
    check.count("dp_to", dp_to, minimum=2)
    sent = lambda p: comm.traffic("allreduce", 1, p).sent_bytes
    return sent(dp_to) / sent(dp_from)


check.guard_module(globals(), arrays=True)  # every public formula checks its arguments (DESIGN.md)
