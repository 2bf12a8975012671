"""Independent values for the exercises of chapters 19 to 31a that had no independent check:
no printed answer, or a printed answer the book rejects (issue 20).

Every value here is obtained from the exercise's prompt alone, another way than the reference:
the arithmetic written out with the prompt's numbers, a brute-force search, a simulation (a
prefetch/streaming link stepped layer by layer, an asynchronous parameter server stepped push
by push, a bf16 running sum in torch, PyTorch's DualPipe-V order timed by a scheduler written
here, the pipeline simulator against the step model), or the number formats' own limits as
NumPy and torch report them. No value calls a dtbook function that its own exercise's reference
calls; a facility another exercise's reference uses may be called where it is the other way for
this one (the pipeline simulator for 24.4, whose reference is composition.interleaving_gain;
31a.6's reference is that simulator, and its value here is PyTorch's own DualPipe-V order).
Catalog figures (link α and β, the A100 peak, model shapes) come from dtbook.hardware and
dtbook.models, which the prompts name, and are restated in comments.

Values are SI base units with the structure of ``get(id).solution()``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate

from dtbook import hardware, models, schedules
from dtbook.exercises import get, registry
from dtbook.units import GB, MB, MiB, hour, ms, us
from exercise_values import chapter_number, compare, unconfirmed

# ---- catalog figures the prompts name (dtbook.hardware, dtbook.models) -----------------------
NVL = hardware.get("nvlink4")                  # α = 1 µs, β = 450 GB/s per direction
IB = hardware.get("ib-ndr400")                 # α = 2 µs, β = 50 GB/s per direction
A100_BF16 = hardware.get("a100-80gb").peak("bf16")   # 312 TFLOP/s dense bf16 (A100 datasheet)
assert (NVL.alpha, NVL.beta, IB.alpha, IB.beta) == (1 * us, 450 * GB, 2 * us, 50 * GB)
assert A100_BF16 == 312e12

LLAMA2_7B = models.get("llama2-7b")
LLAMA3_70B = models.get("llama3-70b")
# meta-llama/Llama-2-7b-hf config.json: hidden 4096, 32 layers, 32 heads, SwiGLU 11008,
# vocab 32000, untied head; q, k, v, o + gate/up/down + two RMSNorms per block, a final norm.
_H, _L, _F, _V = 4096, 32, 11008, 32000
LLAMA2_7B_PARAMS = _L * (4 * _H * _H + 3 * _H * _F + 2 * _H) + 2 * _V * _H + _H
assert LLAMA2_7B_PARAMS == 6_738_415_616 == LLAMA2_7B.num_params()
# meta-llama/Meta-Llama-3-70B config.json
assert (LLAMA3_70B.hidden, LLAMA3_70B.ffn_hidden, LLAMA3_70B.heads, LLAMA3_70B.kv_heads,
        LLAMA3_70B.layers) == (8192, 28672, 64, 8, 80)


def _ring(steps_factor, n, p, alpha, beta):
    """A ring collective of `steps_factor` passes (1: all-gather or reduce-scatter, 2:
    all-reduce) over p ranks: steps_factor·[(P − 1)α + (P − 1)/P · n/β]."""
    return steps_factor * ((p - 1) * alpha + (p - 1) / p * n / beta)


# ---- simulations ------------------------------------------------------------------------------

def _streamed_layer_time(t_compute, t_transfer, buffers, layers=400):
    """Steady-state time per layer when layer weights stream over ONE link into `buffers`
    buffers: transfer i waits for the link and for the buffer layer i − buffers frees when its
    compute ends; compute i waits for transfer i and for compute i − 1. Stepped layer by layer."""
    link_free = 0.0
    compute_end = []
    for i in range(layers):
        buffer_free = compute_end[i - buffers] if i >= buffers else 0.0
        start = max(link_free, buffer_free)
        arrived = start + t_transfer
        link_free = arrived
        compute_end.append(max(arrived, compute_end[-1] if compute_end else 0.0) + t_compute)
    tail = 100
    return (compute_end[-1] - compute_end[-1 - tail]) / tail


def _async_ps_mean_staleness(workers, pushes_per_worker=200, warmup=5):
    """Asynchronous SGD on a parameter server, stepped push by push: equal-speed workers (step
    1.0), started at staggered offsets so no two pushes tie; each reads the current version
    right after its own push is applied. Staleness = versions applied between its read and its
    push. Mean over the pushes after `warmup` rounds."""
    events = sorted((w / workers + n, w) for w in range(workers)
                    for n in range(1, pushes_per_worker + 1))
    version, read_at, stale = 0, [0] * workers, []
    for time, w in events:
        if time > warmup:
            stale.append(version - read_at[w])
        version += 1
        read_at[w] = version
    return sum(stale) / len(stale)


def _bf16_running_sum_rel_rms(n=4096, trials=8000, seed=0):
    """Sum n N(0, 1) terms one after another, every partial sum rounded to bf16 (torch's
    round-to-nearest-even), against the exact fp64 sum: RMS error over RMS of the sum."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(trials, n, generator=gen, dtype=torch.float64)
    s = torch.zeros(trials, dtype=torch.bfloat16)
    for i in range(n):
        s = (s.double() + x[:, i]).to(torch.bfloat16)
    exact = x.sum(dim=1)
    return float((s.double() - exact).pow(2).mean().sqrt() / exact.pow(2).mean().sqrt())


def _torch_dualpipe_v_bubble(P, m, t_forward=1.0, t_backward=2.0):
    """DualPipe-V's bubble, timed here from PyTorch's own per-rank order: P ranks hold the 2P
    stages of a V (rank r: stages r and 2P − 1 − r), a chunk's forward takes t_forward/2 and its
    backward t_backward/2; an overlapped F&B pair runs as its two parts, a split-off weight
    gradient (W) takes 0. Each action starts when its rank is free and its inputs exist (the
    forward of the stage before, the backward of the stage after); bubble = 1 − busy/(P·span)."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    from torch.distributed.pipelining.schedules import ScheduleDualPipeV

    def flatten(ops):
        for a in ops:
            if a is None:
                continue
            kind = a.computation_type.name
            if kind == "OVERLAP_F_B":
                yield from flatten(a.sub_actions)
            elif kind in ("FORWARD", "FULL_BACKWARD", "BACKWARD_INPUT", "BACKWARD_WEIGHT"):
                yield {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "B",
                       "BACKWARD_WEIGHT": "W"}[kind], a.stage_index, a.microbatch_index

    orders = [list(flatten(r)) for r in get_schedule_ops(ScheduleDualPipeV, P, m,
                                                          num_stages_per_rank=2)]
    cost = {"F": t_forward / 2, "B": t_backward / 2, "W": 0.0}
    last = 2 * P - 1

    def inputs(kind, stage, mb):
        if kind == "F":
            return [("F", stage - 1, mb)] if stage else []
        if kind == "B":
            return [("F", stage, mb)] + ([("B", stage + 1, mb)] if stage < last else [])
        return [("B", stage, mb)]

    end, clock, nxt = {}, [0.0] * P, [0] * P
    while any(nxt[r] < len(orders[r]) for r in range(P)):
        # among the ranks whose next action has its inputs, run the one that can start first
        ready = []
        for r in range(P):
            if nxt[r] < len(orders[r]):
                a = orders[r][nxt[r]]
                need = inputs(*a)
                if all(d in end for d in need):
                    ready.append((max([clock[r]] + [end[d] for d in need]), r, a))
        assert ready, "the order deadlocks"
        start, r, a = min(ready)
        end[a] = clock[r] = start + cost[a[0]]
        nxt[r] += 1
    busy = P * m * (t_forward + t_backward)      # each rank: both chunks of every microbatch
    return 1 - busy / (P * max(clock))


# ---- one function per exercise where the arithmetic takes more than a line ------------------

def _19_4():
    """Largest micro-batch of LLaMA-2 7B on 40 GB, ZeRO-3 over 8, s = 2048, eager attention with
    dropout, a checkpoint every 4th layer's input. Chapter 19's memory equation written out."""
    psi, L, h, a, V, s = LLAMA2_7B_PARAMS, 32, 4096, 32, 32000, 2048
    states = 16 * psi / 8                              # ZeRO-3: all 16 bytes sharded over 8
    layer = s * h * (34 + 5 * a * s / h)               # bytes per sequence per layer (ch. 06)
    boundary = 2 * s * h                               # a kept bf16 layer input per sequence
    k = 4
    per_sequence = (L / k) * boundary + k * layer + 4 * s * V   # checkpoints, one block, logits
    batch = 0
    while states + (batch + 1) * per_sequence <= 40 * GB:
        batch += 1
    return batch


def _19_5():
    """The bytes of a real bf16 tensor of 7e9 elements (on the meta device) over 120 GB."""
    weights = torch.empty(7_000_000_000, dtype=torch.bfloat16, device="meta")
    return weights.nbytes / (120 * GB)


def _19_6():
    """An allocator's 100 blocks of 1 GB, 85 of them live, counted; the overhead from the
    fragmentation f by the identity alloc/used − 1 = f/(1 − f)."""
    live = np.zeros(100, dtype=bool)
    live[:85] = True
    fragmentation = np.count_nonzero(~live) / live.size
    return fragmentation, fragmentation / (1 - fragmentation)


def _20_5():
    """ZeRO-3 on 64 GPUs: per layer 2 all-gathers + 1 reduce-scatter of the layer's bf16
    parameters (ring, α = 10 µs, β = 100 GB/s); batch at which they cost 5 % of 6Ψ·B·S/F."""
    P, alpha, beta, F, S = 64, 10 * us, 100 * GB, 150e12, 2048
    out = []
    for psi, L in ((13e9, 40), (70e9, 80)):
        comm = 3 * L * _ring(1, 2 * psi / L, P, alpha, beta)   # 3 collectives per layer
        compute_per_sequence = 6 * psi * S / F
        out.append(comm / (0.05 * compute_per_sequence))
    return tuple(out)


def _21_5():
    """First stage of a 4-stage 1F1B pipeline, 8 micro-batches: min(P, m) = 4 in flight; 20
    layers of 64 MB activations, 4 MB inputs; one backward (one recomputed block) at a time."""
    p, L, layer, boundary = min(4, 8), 20, 64 * MB, 4 * MB
    k = math.sqrt(L)
    none = p * L * layer
    sqrt_ckpt = p * (L / k) * layer + k * layer        # conservative: a kept input = a layer
    full = p * L * boundary + 1 * layer                # every input kept, one layer recomputed
    return none, sqrt_ckpt, full


def _23_6():
    """Ring all-reduce of 64 MiB over 8 ranks on IB against NVLink: 2(P−1)α + 2(P−1)/P·n/β."""
    n = 64 * MiB
    return _ring(2, n, 8, IB.alpha, IB.beta) / _ring(2, n, 8, NVL.alpha, NVL.beta)


def _23_7():
    """1 GiB sharded over 8 on NVLink. All-to-all (pairwise): each rank sends its n/8 shard
    in 7 pieces, (P − 1)α + (P − 1)/P · (n/P)/β. All-gather to the whole n:
    (P − 1)α + (P − 1)/P · n/β."""
    n, P = 1024 * MiB, 8
    a2a = (P - 1) * NVL.alpha + (P - 1) / P * (n / P) / NVL.beta
    ag = (P - 1) * NVL.alpha + (P - 1) / P * n / NVL.beta
    return a2a, ag


def _24_4():
    """The pipeline simulator (F = 1, B = 2, free sends) run with v = 1 and v = 2 on 16 stages
    and 32 microbatches: the time v = 2 saves, as a share of the v = 1 step. The break-even
    (v − 1)·T_comm equals it."""
    one = schedules.simulate("1f1b", 16, 32)
    two = schedules.simulate("interleaved-1f1b", 16, 32, virtual_stages=2)
    return (one.makespan - two.makespan) / one.makespan


def _24_6():
    """Per-step communication time of each axis, the prompt's counts written out."""
    H, L, dp, pp, tp, batch, seq, m = 8192, 40, 8, 4, 4, 512, 2048, 32
    b = batch // (dp * m)                                   # 2 sequences per microbatch
    act = b * seq * H * 2                                   # one bf16 activation, bytes
    tp_t = m * (L // pp) * 4 * _ring(2, act, tp, 1 * us, 300 * GB)   # 4 all-reduces/layer
    pp_t = m * 2 * (2 * us + act / (25 * GB))               # 2 point-to-point messages
    psi = 12 * H**2 * L
    dp_t = _ring(2, psi / (tp * pp) * 2, dp, 2 * us, 25 * GB)        # bf16 gradients
    times = {"TP": tp_t, "PP": pp_t, "DP": dp_t}
    return max(times, key=times.get)


def _24_7():
    """Model FLOPs over the counted FLOPs: the counted 96BsLH²(1 + s/6H + V/16LH) is 4 passes of
    the layers (72 + 24 per BsLH²(1 + s/6H)) plus 6BsHV of logits; model FLOPs drop one pass."""
    s, L, H, V = 2048, 96, 12288, 50257
    layers_one_pass = 24 * s * L * H**2 * (1 + s / (6 * H))
    logits = 6 * s * H * V                                  # forward + backward, 3 × 2sHV
    counted = 96 * s * L * H**2 * (1 + s / (6 * H) + V / (16 * L * H))
    assert math.isclose(counted, 4 * layers_one_pass + logits, rel_tol=1e-12)
    model = 3 * layers_one_pass + logits
    return 141e12 / 312e12 * model / counted


def _24_8():
    """PyTorch's TP plan per layer, module by module, and FSDP's gathers."""
    L, H, t = 32, 4096, 8
    colwise = ["q", "k", "v", "fc1"]          # backward: all-reduce of each input gradient
    rowwise = ["out", "fc2"]                  # forward: all-reduce of each output
    allreduces = L * (len(colwise) + len(rowwise))
    gathers = L * 2                           # forward, and again in backward (resharded)
    weights = (3 * H * H + H * H + 4 * H * H + 4 * H * H) / t   # q,k,v,out,fc1,fc2 shards
    col_biases = (3 * H + 4 * H) / t          # q, k, v and fc1 biases are sharded
    row_biases = 2 * H                        # out and fc2 biases are replicated
    norms = 2 * 2 * H                         # two LayerNorms, weight and bias
    return allreduces, gathers, (weights + col_biases + row_biases + norms) * 2


def _25_6():
    """Llama 3 70B, TP 8, CP 8, S = 262,144, b = 1, bf16: per layer and micro-batch, TP's four
    ring all-reduces of b(S/c)H against CP's K/V ring forward, and K/V again with their
    gradients backward (Megatron-Core's ring)."""
    H, t, c, S = LLAMA3_70B.hidden, 8, 8, 262144
    kv = LLAMA3_70B.kv_heads * (H // LLAMA3_70B.heads)      # 8 × 128 = 1024
    tokens = S / c
    tp = 4 * 2 * (t - 1) / t * tokens * H * 2
    cp = 3 * (c - 1) * 2 * tokens * (kv / t) * 2            # (c−1) K+V blocks, ×3: K/V, dK/dV
    return tp / cp


def _26_5():
    """Young's first-order model with the asynchronous checkpoint's blocking time."""
    delta, mtbf = 50 * GB / (32 * GB), 2 * hour       # 1.5625 s: the copy over PCIe only
    interval = math.sqrt(2 * delta * mtbf)             # Young: I* = √(2δ·MTBF)
    return interval, delta / interval + interval / (2 * mtbf)   # writing + expected lost work


def _26_6():
    """Compressed, pipelined write of 100 GB: max(n/B_comp, n/(R·B_w)) against n/B_w. Brute
    force over write bandwidths 0.01 GB/s apart: the largest where compressing still wins."""
    n, R, comp = 100 * GB, 2.5, 4 * GB
    compressed = lambda bw: max(n / comp, n / (R * bw))
    wins = [bw for bw in (i * 0.01 * GB for i in range(1, 10_001)) if compressed(bw) < n / bw]
    # the crossing lies in (max(wins), max(wins) + 0.01 GB/s]; n/comp = n/bw gives it exactly
    assert max(wins) < comp <= max(wins) + 0.01 * GB
    return comp, n / (1.5 * GB), compressed(1.5 * GB)


def _28_5():
    """Eckart–Young: best rank-20 relative error with σ_i = i^−0.7, i = 1..4096, summed out."""
    energy = [i ** -1.4 for i in range(1, 4097)]
    return math.sqrt(sum(energy[20:]) / sum(energy))


def _28_7():
    """Brute force: the first P where the sparse all-gather, (P − 1)/P · P·k·6 bytes per rank,
    moves more than the dense ring all-reduce, 2(P − 1)/P · 2d."""
    d = 1e9
    k = d / 100
    P = 2
    while not (P - 1) / P * P * k * (2 + 4) > 2 * (P - 1) / P * 2 * d:
        P += 1
    return P


def _expected_max_exponential(P, mean):
    """E[max of P exponentials] = ∫₀^∞ P(max > x) dx = ∫₀^∞ 1 − (1 − e^(−x/mean))^P dx,
    integrated numerically (not the harmonic-number identity)."""
    value, _ = integrate.quad(lambda x: -math.expm1(P * math.log1p(-math.exp(-x / mean))),
                              0, math.inf, epsabs=0, epsrel=1e-12, limit=200)
    return value


def _29_3():
    """Brute force over whole H: C(H) = T_c + T_comm/H + κH with κ = 1 ms."""
    cost = lambda H: 100 * ms + 50 * ms / H + 1 * ms * H
    best = min(range(1, 1001), key=cost)
    return float(best), cost(best)


def _30_6():
    """bf16 spacing at 1.0 and whether 1.0 + 1e-3 rounds back to 1.0, in torch."""
    gap = torch.finfo(torch.bfloat16).eps                  # 2^−7, the spacing at 1
    w = torch.tensor(1.0, dtype=torch.bfloat16)
    changed = bool(w + torch.tensor(1e-3, dtype=torch.bfloat16) != w)
    return gap, changed


def _31a_5():
    """Bytes of the real bf16 tensors one token keeps in one layer (meta device): MLA's latent
    and shared RoPE key against 128 heads' keys (192 wide) and values (128 wide)."""
    bf16 = dict(dtype=torch.bfloat16, device="meta")
    mla = torch.empty(512, **bf16).nbytes + torch.empty(64, **bf16).nbytes
    mha = torch.empty(128, 192, **bf16).nbytes + torch.empty(128, 128, **bf16).nbytes
    return mla, mha / mla


def _31a_6():
    """1F1B: the closed form (P − 1)/(m + P − 1) (F + B slots, ramp-up and ramp-down);
    DualPipe-V: PyTorch's order timed by the scheduler above."""
    P, m = 16, 32
    return (P - 1) / (m + P - 1), _torch_dualpipe_v_bubble(P, m)


# every rank's (dp, pp, tp) coordinate in the row-major mesh (8, 16, 8)
MESH_24_1 = np.array(np.unravel_index(np.arange(1024), (8, 16, 8))).T

INDEPENDENT = {
    # 19
    "19.1": (13e9 * (2 + 2) + 13e9 * 12 / 8,              # ZeRO-1: master + moments sharded
             13e9 * 2 + 13e9 * 14 / 8,                    # ZeRO-2: also gradients
             13e9 * 16 / 8),                              # ZeRO-3: everything
    "19.2": (11 * 4096 / 32,                              # 11sbh = a s² b  → s = 11h/a
             34 * 4096 / (5 * 32)),                       # 34 sbh = 5a s² b → s = 34h/(5a)
    "19.3": math.ceil(16 * 70e9 / (80 * GB)),             # 1,120 GB of states / 80 GB
    "19.4": _19_4(),
    "19.5": _19_5(),
    "19.6": _19_6(),
    "19.7": 4 * 8192 * 1 * 128256,                        # fp32 logits: 4·s·b·V bytes
    # 20
    "20.3": (7e9 * 4 + 7e9 * 12 / 64, 7e9 * 2 + 7e9 * 14 / 64),
    "20.4": (2 * 7 / 8 * 7e9 * 2,                         # DP: ring all-reduce of 2Ψ bytes
             7 / 8 * 7e9 * 2 + 7 / 8 * 7e9 * 2,           # ZeRO-2: reduce-scatter + all-gather
             3 * 7 / 8 * 7e9 * 2),                        # ZeRO-3: 2 gathers + reduce-scatter
    "20.5": _20_5(),
    "20.6": (16 * 6e9 / 64 + (2 * 1e9 + 14 * 1e9 / 64),  # ZeRO-3 part + ZeRO-2 part
             63 / 64 * (6 * 6e9 + 4 * 1e9)),              # 3 and 2 ring passes of 2 bytes
    "20.7": (math.ceil((400e6 / (100 * GB)) / (10 * ms)),  # 4 ms gather over 10 ms
             math.ceil((400e6 / (25 * GB)) / (10 * ms)),   # 16 ms gather over 10 ms
             _streamed_layer_time(10 * ms, 400e6 / (25 * GB), buffers=3)),  # k = 2, stepped
    # 21
    "21.1": (math.sqrt(48),                               # k* = √L
             (48 / math.sqrt(48) + math.sqrt(48)) * GB,   # (L/k + k)·M_layer
             48 / (48 / math.sqrt(48) + math.sqrt(48))),  # L·M over (L/k + k)·M
    "21.2": (100 * ms * (1 + 1 / 3), 100 * ms * (1 + 0.5 / 3)),  # forward F of 3F recomputed
    "21.3": (4096 * 4 * 4096 * (34 + 5 * 32 * 4096 / 4096),     # sbh(34 + 5as/h)
             4096 * 4 * 4096 * 34),
    "21.4": (2048 * 4 * 4096 * (34 + 5 * 32 * 2048 / 4096),
             32 * 2048 * 4 * 4096 * (34 + 5 * 32 * 2048 / 4096)),
    "21.5": _21_5(),
    "21.6": (0.25 / 3, 0.5 / 3, 1.0 / 3),
    "21.7": 16 * 8192 * 8192 * 2 * 2,                     # a·S²·B values of 2 bytes
    # 22
    "22.1": (70e9 * 2 / (32 * GB),
             70e9 * 2 / 80 / (32 * GB),
             (70e9 * 2 / 80 / (32 * GB)) / (2.0 / 80)),
    "22.2": (175e9 * 2 / 8, 175e9 * (4 + 4 + 4)),
    "22.4": (_streamed_layer_time(50 * ms, 80 * ms, buffers=2),
             _streamed_layer_time(50 * ms, 80 * ms, buffers=3),
             _streamed_layer_time(50 * ms, 80 * ms, buffers=2)
             / _streamed_layer_time(50 * ms, 80 * ms, buffers=3)),
    "22.6": (A100_BF16 / (32 * GB),                       # 24H²·T/F = 24H²/β → T = F/β
             math.ceil(A100_BF16 / (32 * GB) / 2048)),
    # 23
    "23.3": int(np.arange(256).reshape(8, 4, 8)[2, 3, 5]),   # row-major mesh, looked up
    "23.5": LLAMA3_70B.ffn_hidden // 8 * LLAMA3_70B.hidden * 2,
    "23.6": _23_6(),
    "23.7": _23_7(),
    # 24
    "24.1": tuple(len({tuple(np.delete(c, axis)) for c in MESH_24_1})   # groups along an axis:
                  for axis in (2, 1, 0)),                 # the distinct other coordinates
    "24.4": _24_4(),
    "24.6": _24_6(),
    "24.7": _24_7(),
    "24.8": _24_8(),
    # 25
    "25.5": (200e9 / (8 * 16) + 800e9 / (8 * 16 * 4)) * (2 + 2 + 4 + 8),
    "25.6": _25_6(),
    "25.8": 131072 / 8192,                                # linear in tokens per GPU (flash)
    # 26
    "26.5": _26_5(),
    "26.6": _26_6(),
    # 27
    "27.8": sum(1 for a, b in itertools.product(range(11), repeat=2) if a + b <= 10),
    # 28
    "28.1": min(1e6 / (4 * 16**2), math.sqrt(1e6) / 16),
    "28.2": 2 / (0.01 * (2 + 4)),
    "28.3": 4 / (1e-3 * (4 + 4)),
    "28.5": _28_5(),
    "28.6": (2 * 63 / 64 * 2e9 / (100e9 / 8), 2 * 63 / 64 * 2e9 / (100e9 / 8) / (100 * ms)),
    "28.7": _28_7(),
    "28.8": 2 * 63 / 64 * (1 - 1 / 100) * 10 * GB,
    # 29
    "29.1": _expected_max_exponential(1000, 1.0),
    "29.2": (_async_ps_mean_staleness(16), 1 / (1 + 0.5 * _async_ps_mean_staleness(16))),
    "29.3": _29_3(),
    "29.4": math.sqrt(50 * ms / (0.001 * 100 * ms)),
    "29.5": (2 * 7 / 8 * 150e6 * 4 / 500,                 # ring all-reduce of fp32, every H
             (2 * 7 / 8 * 150e6 * 4) / (2 * 7 / 8 * 150e6 * 4 / 500)),
    "29.6": (_expected_max_exponential(64, 100 * ms) + 20 * ms,
             _expected_max_exponential(64, 100 * ms) - 100 * ms),
    # 30: the formats' limits as NumPy and torch implement them
    "30.1": (float(np.finfo(np.float16).max), float(np.finfo(np.float16).tiny),
             float(np.finfo(np.float16).smallest_subnormal)),
    "30.2": (torch.finfo(torch.float8_e4m3fn).max,
             2.0 ** (14 - 7) * (1 + 7 / 8)),              # top field reserved: exponent 14
    "30.5": (math.log(float(np.finfo(np.float16).max)),       # exp(x) finite while x ≤ ln max
             math.log(torch.finfo(torch.bfloat16).max)),
    "30.6": _30_6(),
    "30.7": (torch.finfo(torch.float8_e4m3fn).max / 0.02,    # format max over amax
             torch.finfo(torch.float8_e5m2).max / 0.02),
    "30.8": _bf16_running_sum_rel_rms(),
    # 31a
    "31a.1": 2 * 8 * 128 * 2 * 131072 * 80,               # K and V, g heads of d_h, bf16
    "31a.2": 2 * 64 * 128 * 2 * 131072 * 80,
    "31a.3": (2 * 8 * 128 * 2 * min(32768, 4096),
              (2 * 32 * 128 * 2 * 32768) / (2 * 8 * 128 * 2 * min(32768, 4096))),
    "31a.4": 1 + sum(4096 - 1 for _ in range(32)),        # each layer reaches w − 1 further
    "31a.5": _31a_5(),
    "31a.6": _31a_6(),
}

# Only where not 1e-9, with the reason.
TOLERANCE = {
    # a seeded simulation of 8,000 bf16 running sums against the random-walk model, which is
    # itself approximate (independent rounding errors, ln 2 averaged over the mantissa): seeds
    # 0-3 give 0.0736-0.0762 against the model's 0.0751, a sampling spread of about ±2 %
    # (seed 0 is 2.0 % low); 4 % leaves room for another RNG stream and still fails a wrong
    # rounding unit (2x) or a dropped √ln 2 (17 %)
    "30.8": 0.04,
}

# Disagreements with the reference, kept visible: id -> reason. (None at present.)
DISAGREE: dict[str, str] = {}


@pytest.mark.parametrize("ex_id", [
    pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=DISAGREE[i])) if i in DISAGREE
    else i for i in sorted(INDEPENDENT)])
def test_independent_value(ex_id):
    compare(get(ex_id).solution(), INDEPENDENT[ex_id], TOLERANCE.get(ex_id, 1e-9), ex_id)


def test_every_unconfirmed_exercise_of_chapters_19_to_31a_is_covered():
    """Each exercise of chapters 19–31a without a printed answer that confirms it (none, one
    its book_note rejects, or one with a part unprinted) has an independent value here."""
    wanted = {i for i, e in registry().items()
              if 19 <= chapter_number(i) <= 31 and unconfirmed(e)}
    assert wanted <= set(INDEPENDENT), sorted(wanted - set(INDEPENDENT))
