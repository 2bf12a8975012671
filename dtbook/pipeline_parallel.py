"""Pipeline parallelism in closed form: bubbles, activation memory, traffic, throughput and
load balance (chapter 16).

The model is split into ``p`` consecutive stages, one per rank, and a minibatch into ``m``
microbatches. A forward of one microbatch through one stage takes t_F, its backward t_B
(input gradient) plus t_W (weight gradient). Chapter 16 derives each formula from the
separability of the model, f = f_P ∘ ... ∘ f_1, and checks it against the discrete-event
simulator of :mod:`dtbook.schedules`, which runs the same schedules step by step.

Arithmetic functions accept Python numbers, NumPy arrays and SymPy symbols alike; the two
partition functions take a list of layer times.
"""

from __future__ import annotations

import numpy as np

from . import _validate as check
from . import tensor_parallel
from .memory import model_state_bytes
from .symbolic import is_symbolic, maximum, minimum

__all__ = ["bubble_fraction", "interleaved_bubble_fraction", "interleaved_bubble_approx",
           "zb_h1_bubble_fraction", "batch_time", "pipeline_efficiency", "throughput",
           "activations_in_flight", "p2p_message_bytes", "p2p_bytes_per_minibatch",
           "load_balance_efficiency", "stage_times", "stage_layers",
           "best_partition", "compute_comm_ratio", "stages_for_unit_ratio",
           "memory_per_device"]


def bubble_fraction(p, microbatches):
    """Idle share of GPipe and of 1F1B: (p − 1)/(m + p − 1) (chapter 16).

    Every stage works m(t_F + t_B) and waits (p − 1)(t_F + t_B): p − 1 forwards before the
    last stage starts and p − 1 backwards after it ends. m = 1 gives (p − 1)/p.
    """
    check.count("p", p)
    check.count("microbatches", microbatches)
    return (p - 1) / (microbatches + p - 1)


def interleaved_bubble_fraction(p, microbatches, virtual_stages):
    """Idle share of interleaved 1F1B with v chunks per rank: (p − 1)/(v·m + p − 1),
    exact when m is a multiple of p and a chunk costs 1/v of a stage (chapter 16)."""
    check.count("p", p)
    check.count("microbatches", microbatches)
    check.count("virtual_stages", virtual_stages)
    return (p - 1) / (virtual_stages * microbatches + p - 1)


def interleaved_bubble_approx(p, microbatches, virtual_stages):
    """The large-m form (p − 1)/(v·m): bubble time over *useful* time, not over the whole
    batch; it overstates the exact fraction, most at small m (chapter 16)."""
    check.count("p", p)
    check.count("microbatches", microbatches)
    check.count("virtual_stages", virtual_stages)
    return (p - 1) / (virtual_stages * microbatches)


def zb_h1_bubble_fraction(p, microbatches, t_forward, t_backward, t_weight):
    """Idle share of the zero-bubble H1 schedule for m ≥ p (chapter 16):

    bubble time (p − 1)·max(t_F + t_B − t_W, t_F, t_B) over the batch time
    m(t_F + t_B + t_W) + that bubble. When t_W ≤ t_F and t_W ≤ t_B this is the
    (p − 1)(t_F + t_B − t_W) of Qi et al.: each deferred W fills t_W of 1F1B's wait.
    """
    check.count("p", p)
    check.count("microbatches", microbatches)
    check.positive("t_forward", t_forward)
    check.positive("t_backward", t_backward)
    check.nonnegative("t_weight", t_weight)
    idle = (p - 1) * maximum(t_forward + t_backward - t_weight, t_forward, t_backward)
    return idle / (microbatches * (t_forward + t_backward + t_weight) + idle)


def batch_time(p, microbatches, t_forward, t_backward, *, virtual_stages=1):
    """Time of one minibatch: (m + (p − 1)/v)(t_F + t_B) (chapter 16). v = 1 is GPipe and
    1F1B, (m + p − 1)(t_F + t_B); interleaved 1F1B with v chunks per rank shrinks the fill
    and drain to (p − 1)/v stage-times, exact when m is a multiple of p
    (:func:`interleaved_bubble_fraction` is its idle share). ``t_forward`` and
    ``t_backward`` are one micro-batch's forward and whole backward (input and weight
    gradients) through one rank's share of the model."""
    check.count("p", p)
    check.count("microbatches", microbatches)
    check.nonnegative("t_forward", t_forward)
    check.nonnegative("t_backward", t_backward)
    check.count("virtual_stages", virtual_stages)
    return (microbatches + (p - 1) / virtual_stages) * (t_forward + t_backward)


def pipeline_efficiency(p, microbatches):
    """Useful share of the batch time, m/(m + p − 1) = 1 − bubble (chapter 16)."""
    return 1 - bubble_fraction(p, microbatches)


def throughput(p, microbatches, batch, seq, t_forward, t_backward):
    """Tokens per second of a pipeline: m·b·S / T_batch, with b sequences of S tokens per
    microbatch (chapter 16)."""
    check.positive("batch", batch)
    check.positive("seq", seq)
    return microbatches * batch * seq / batch_time(p, microbatches, t_forward, t_backward)


def activations_in_flight(p, microbatches, *, stage=0, schedule="1f1b", virtual_stages=1):
    """Most micro-batches whose activations pipeline rank ``stage`` holds at once, counted
    per model chunk as :func:`dtbook.schedules.simulate` counts them (chapters 16 and 19).

    - ``"gpipe"``: m, every forward before any backward;
    - ``"1f1b"``: min(p − s, m), the warm-up forwards of rank s plus the one in flight;
    - ``"zb-h1"``: min(p, m) on every rank, since a micro-batch's activations stay until its
      deferred weight gradient W has run;
    - ``"interleaved-1f1b"`` with v chunks per rank: Megatron's warm-up of
      2(p − s − 1) + (v − 1)·p chunks plus the one in flight, min(v·m, 2(p − s − 1) +
      (v − 1)·p + 1).

    With p = 1 (numbers) it is 1 whatever the schedule: with no pipeline, micro-batches are
    gradient accumulation, each backward finished before the next forward. NumPy arrays
    broadcast; SymPy symbols give the closed forms above.
    """
    check.count("p", p)
    check.count("microbatches", microbatches)
    check.count("stage", stage, minimum=0)
    check.count("virtual_stages", virtual_stages)
    from .schedules import SCHEDULES
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    symbolic = is_symbolic(p, microbatches, stage, virtual_stages)
    if not (is_symbolic(stage) or is_symbolic(p)) and np.any(np.asarray(stage) >= np.asarray(p)):
        raise ValueError(f"stage must be below p = {p!r} (stages 0..p-1), got {stage!r}")
    if schedule != "interleaved-1f1b" and (is_symbolic(virtual_stages)
                                          or np.any(np.asarray(virtual_stages) != 1)):
        raise ValueError(f"virtual_stages applies to 'interleaved-1f1b' only; {schedule} "
                         f"holds one stage per rank, got virtual_stages={virtual_stages!r}")
    m, v = microbatches, virtual_stages
    if schedule == "gpipe":                      # + 0·s: one value per stage asked for
        held = m if symbolic else m + 0 * (p - stage)
    elif schedule == "1f1b":
        held = minimum(p - stage, m)
    elif schedule == "zb-h1":
        held = minimum(p + 0 * stage, m)
    else:
        held = minimum(v * m, 2 * (p - stage - 1) + (v - 1) * p + 1)
    if symbolic:
        return held
    held = np.where(np.asarray(p) == 1, 1, held)
    return held.item() if held.ndim == 0 else held


def p2p_message_bytes(batch, seq, hidden, bytes_per_value=2):
    """One activation (or its gradient) crossing a stage boundary: b·S·H·sizeof bytes, the
    same tensor a tensor-parallel all-reduce carries,
    :func:`dtbook.tensor_parallel.activation_bytes` (chapter 16)."""
    check.positive("bytes_per_value", bytes_per_value)
    return tensor_parallel.activation_bytes(batch, seq, hidden, bytes_per_element=bytes_per_value)


def p2p_bytes_per_minibatch(p, microbatches, batch, seq, hidden, bytes_per_value=2,
                            virtual_stages=1):
    """Bytes all ranks send together in one minibatch: 2(p·v − 1)·m messages of b·S·H·sizeof,
    one activation forward and one gradient backward per boundary and microbatch; v = 1 gives
    2(p − 1)·m·b·S·H·sizeof (chapter 16)."""
    check.count("p", p)
    check.count("microbatches", microbatches)
    check.count("virtual_stages", virtual_stages)
    return (2 * (p * virtual_stages - 1) * microbatches
            * p2p_message_bytes(batch, seq, hidden, bytes_per_value))


def compute_comm_ratio(params, p, hidden, peak_flops, beta, bytes_per_value=2):
    """R = T_comp/T_comm of an inner stage per microbatch (chapter 16): 6(Ψ/p)·bS FLOPs at F
    against two messages of b·S·H·sizeof at β (the activation forward, its gradient
    backward), R = 3Ψβ/(p·F·H·sizeof). The microbatch's tokens cancel: only the stage's
    share of the weights per unit of width decides."""
    check.positive("params", params)
    check.count("p", p)
    check.positive("hidden", hidden)
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    check.positive("bytes_per_value", bytes_per_value)
    return stages_for_unit_ratio(params, hidden, peak_flops, beta, bytes_per_value) / p


def stages_for_unit_ratio(params, hidden, peak_flops, beta, bytes_per_value=2):
    """The number of stages p* = 3Ψβ/(F·H·sizeof) at which R = 1 (chapter 16): with more
    (thinner) stages the point-to-point messages take longer than the compute."""
    check.positive("params", params)
    check.positive("hidden", hidden)
    check.positive("peak_flops", peak_flops)
    check.positive("beta", beta)
    check.positive("bytes_per_value", bytes_per_value)
    return 3 * params * beta / (peak_flops * hidden * bytes_per_value)


def memory_per_device(p, microbatches, params, activation_bytes, *, stage=0, schedule="1f1b",
                      virtual_stages=1, bytes_per_param=model_state_bytes(1)):
    """Bytes on pipeline rank ``stage`` (chapter 16): its 1/p of the model state,
    s_state·Ψ/p, plus the activations it holds at its peak, :func:`activations_in_flight`
    micro-batches (m under GPipe, min(p − s, m) under 1F1B) of ``activation_bytes`` each:
    one micro-batch's activations on one model chunk, a whole stage when v = 1."""
    check.positive("params", params)
    check.positive("activation_bytes", activation_bytes)
    check.positive("bytes_per_param", bytes_per_param)
    held = activations_in_flight(p, microbatches, stage=stage, schedule=schedule,
                                 virtual_stages=virtual_stages)
    return bytes_per_param * params / p + held * activation_bytes


# --------------------------------------------------------------------------- load balance

def _times(name, values):
    arr = np.asarray(check._numeric(name, values), dtype=float).ravel()
    if arr.size == 0 or not np.all(arr >= 0):
        raise ValueError(f"{name} must be a non-empty list of times >= 0, got {values!r}")
    return arr


def load_balance_efficiency(stage_times):
    """E = Σ tᵢ / (P·t_max): the share of the pipeline's time that does work when the
    slowest stage sets the pace; 1 − E is the imbalance bubble (chapter 16)."""
    t = _times("stage_times", stage_times)
    if t.max() <= 0:
        raise ValueError(f"stage_times must not all be zero, got {stage_times!r}")
    return float(t.sum() / (t.size * t.max()))


def stage_times(layer_times, boundaries):
    """Per-stage sums of ``layer_times`` split at ``boundaries`` (the index of each stage's
    first layer after the first stage's), chapter 16."""
    t = _times("layer_times", layer_times)
    cuts = [0] + [int(b) for b in boundaries] + [t.size]
    if any(b <= a for a, b in zip(cuts, cuts[1:])):
        raise ValueError(f"boundaries must increase strictly within 1..{t.size - 1}, "
                         f"got {boundaries!r}")
    return [float(t[a:b].sum()) for a, b in zip(cuts, cuts[1:])]


def best_partition(layer_times, p):
    """Split layers into ``p`` contiguous stages minimising the slowest stage (chapter 16).

    A pipeline passes activations from stage to stage, so a stage must hold consecutive
    layers. Dynamic programming over (layers used, stages used), O(p·L²). Returns the
    boundaries (see :func:`stage_times`); ties go to the earliest cut.
    """
    t = _times("layer_times", layer_times)
    check.count("p", p)
    p = int(p)
    L = t.size
    if p > L:
        raise ValueError(f"p={p} stages need at least {p} layers, got {L}")
    prefix = np.concatenate([[0.0], np.cumsum(t)])
    INF = float("inf")
    # best[k][j]: smallest slowest-stage time for the first j layers in k stages
    best = [[INF] * (L + 1) for _ in range(p + 1)]
    cut = [[0] * (L + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        for j in range(k, L + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                if cost < best[k][j] - 1e-12:
                    best[k][j], cut[k][j] = cost, i
    bounds, j = [], L
    for k in range(p, 1, -1):
        j = cut[k][j]
        bounds.append(j)
    return bounds[::-1]


def stage_layers(layers, stages, first=None, last=None):
    """Layers on each of ``stages`` consecutive pipeline stages (or model chunks), first to
    last, as a list of ints (chapter 16).

    Megatron-Core's uneven split: ``first`` layers on the first stage
    (``decoder_first_pipeline_num_layers``), ``last`` on the last
    (``decoder_last_pipeline_num_layers``), and the rest divided evenly over the stages in
    between (Megatron asserts that they divide; with only one of the two given, the other
    stages share the rest evenly). The first stage also holds the embedding and the last the
    output head and loss, so they are the ones made lighter (Llama 3 405B: 126 layers on 16
    stages as 7, 8 × 14, 7, Dubey et al. 2024 Sec. 3.3.2; DeepSeek-V3: 61 layers on 16).

    With neither given: an even split when ``stages`` divides ``layers``; otherwise every
    stage but the two ends holds b = ⌈layers/stages⌉ and the two ends share the remainder
    r = layers − (stages − 2)·b, the first ⌈r/2⌉ and the last ⌊r/2⌋ (the last also runs the
    logits); with r = 1 the last stage holds no layer, only the head and the loss (Megatron-
    Core's ``pipeline_model_parallel_layout`` ``Et|(tt|)*30L`` for DeepSeek-V3's 61 layers on
    32 model chunks), with r = 0 the first holds only the embedding too (Megatron's
    ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``:
    126 layers on 128 chunks). The busiest stage then holds b, the fewest any split can give
    it, so a pipeline whose slowest stage sets the pace (:func:`load_balance_efficiency`)
    loses least. ``ValueError`` naming ``stages`` when r < 0 (at most layers + 2 stages), and
    naming ``first`` or ``last`` (each a whole number >= 0) when the given ones leave a rest
    that does not divide.
    """
    check.count("layers", layers)
    check.count("stages", stages)
    L, s = int(layers), int(stages)
    if s > L + 2:
        raise ValueError(f"stages ({s}) must be at most layers + 2 ({L + 2}): every stage but "
                         "the first and the last holds a layer")
    if first is None and last is None:
        if L % s == 0:
            return [L // s] * s
        if s == 2:
            return [L - L // 2, L // 2]
        b = -(-L // s)
        rest = L - (s - 2) * b
        if rest < 0:
            raise ValueError(f"stages ({s}): {L} layers do not split with {b} on each middle "
                             f"stage")
        return [rest - rest // 2] + [b] * (s - 2) + [rest // 2]
    for name, value in (("first", first), ("last", last)):
        if value is not None:
            check.count(name, value, minimum=0)
    if s == 1:
        raise ValueError("stages: an uneven first or last stage needs at least 2 stages")
    ends = (first or 0) + (last or 0)
    inner = s - (first is not None) - (last is not None)
    if ends > L - inner or (inner and (L - ends) % inner):
        name = "first" if first is not None else "last"
        raise ValueError(f"{name}: after first={first} and last={last}, the other {L - ends} "
                         f"layers must divide evenly over {inner} stages (at least one each)")
    mid = (L - ends) // inner if inner else 0
    return ([first if first is not None else mid] + [mid] * (s - 2)
            + [last if last is not None else mid])


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
