"""The data pipeline: what a training run demands of storage and decoding, and how a loader
that prefetches hides (or fails to hide) the time it takes. Chapter 03a derives all of it.

A run of P devices at peak F and utilisation η consumes tokens at the rate its compute allows,

    tokens/s = P F η / (6Ψ)                          (chapter 01's 6ΨD, read as a rate)

and every token must first come off storage, b_tok bytes of it, times a read amplification
ρ = bytes read / bytes used (whole blocks read for part of their content, a shuffle that
skips around):

    B_req = tokens/s · b_tok · ρ  bytes/s.

Seen as a roofline, storage is a fourth ceiling: FLOP per byte read from storage is
I_io = 6Ψ / (b_tok ρ), and the run cannot exceed B_storage · I_io FLOP/s; the I/O ridge point
F / B_storage is the intensity below which storage, not compute, binds.

The loader itself is a pipeline, read → decode → consume. Stages that overlap run at the pace
of the slowest, so throughput = min(stage rates); a loader that does not overlap (PyTorch's
``num_workers=0``) adds the stage times instead. Compression divides the bytes read by the
ratio c and adds a decode stage: it pays only while the decoder outruns storage. Little's
law L = λW gives the depth of prefetch a rate λ and a latency W need.

Formula functions are plain arithmetic: numbers, NumPy arrays and SymPy symbols all work.
Units are SI (bytes, seconds, bytes/s, FLOP/s). The last section holds the small tools the
chapter's measurement uses (compressed token shards and a map-style dataset over them).
"""

from __future__ import annotations

import os
import time

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import is_symbolic, maximum, minimum
from . import comm as _comm
from . import flops as _flops
from . import roofline as _roofline

__all__ = [
    "required_tokens_per_second", "storage_bandwidth_demand", "required_storage_bandwidth",
    "io_intensity", "io_ridge_point", "attainable_flops",
    "read_amplification", "random_read_amplification", "compression_ratio",
    "compressed_read_rate", "compression_speedup",
    "prefetch_depth", "workers_needed", "pipeline_throughput", "serial_step_time",
    "overlapped_step_time", "step_time", "loader_throughput", "exposed_data_time",
    "exposed_stall", "data_fraction", "transfer_time",
    "CODECS", "make_tokens", "write_shards", "ShardDataset", "run_loader",
]


# --- what the run demands ----------------------------------------------------------------


def required_tokens_per_second(params, peak_flops, mfu=1.0, devices=1):
    """Tokens per second a run consumes: P F η / (6Ψ) (chapter 03a; the rate form of
    chapter 01's 6ΨD, computed by :func:`dtbook.flops.tokens_per_second`)."""
    return _flops.tokens_per_second(params, peak_flops, mfu=mfu, devices=devices)


def storage_bandwidth_demand(tokens_per_second, bytes_per_token, read_amplification=1.0):
    """Bytes per second storage must deliver: tokens/s · b_tok · ρ (chapter 03a).

    ``bytes_per_token`` is what one training token occupies on storage (after any
    compression); ``read_amplification`` ρ >= 1 is bytes read per byte used.
    """
    check.nonnegative("tokens_per_second", tokens_per_second)
    check.positive("bytes_per_token", bytes_per_token)
    check.positive("read_amplification", read_amplification)
    return tokens_per_second * bytes_per_token * read_amplification


def required_storage_bandwidth(params, peak_flops, mfu, devices, bytes_per_token,
                               read_amplification=1.0):
    """B_req = P F η / (6Ψ) · b_tok · ρ bytes/s for the whole run (chapter 03a)."""
    tps = required_tokens_per_second(params, peak_flops, mfu=mfu, devices=devices)
    return storage_bandwidth_demand(tps, bytes_per_token, read_amplification)


def io_intensity(params, bytes_per_token, read_amplification=1.0):
    """FLOP per byte read from storage: I_io = 6Ψ / (b_tok ρ) (chapter 03a).

    Each token costs 6Ψ FLOP of training and b_tok ρ bytes of reading, so the ratio is
    independent of how many devices share the work.
    """
    check.positive("params", params)
    check.positive("bytes_per_token", bytes_per_token)
    check.positive("read_amplification", read_amplification)
    return _flops.TRAINING_PER_PARAM_TOKEN * params / (bytes_per_token * read_amplification)


def io_ridge_point(peak_flops, storage_bandwidth):
    """The I/O ridge point F / B_storage in FLOP per byte (chapter 03a): below it, storage
    binds. Use one device's F with that device's share of the bandwidth, or the total of
    both. (Chapter 02's :func:`dtbook.roofline.ridge_point`, for the storage ceiling.)"""
    check.positive("peak_flops", peak_flops)
    check.positive("storage_bandwidth", storage_bandwidth)
    return _roofline.ridge_point(peak_flops, storage_bandwidth)


def attainable_flops(io_intensity, peak_flops, storage_bandwidth, *other_ceilings):
    """min(F, B_storage · I_io, other ceilings...) in FLOP/s (chapter 03a): chapter 02's
    :func:`dtbook.roofline.attainable_flops` with storage as the bandwidth, B_storage · I_io
    the fourth ceiling, and its argument order.

    ``other_ceilings`` are further FLOP/s bounds, such as chapter 02's memory ceiling
    ``mem_bandwidth * mem_intensity`` and network ceiling ``net_bandwidth * net_intensity``:
    with both, this is the four-ceiling roofline.
    """
    check.positive("peak_flops", peak_flops)
    check.positive("storage_bandwidth", storage_bandwidth)
    check.nonnegative("io_intensity", io_intensity)
    for i, c in enumerate(other_ceilings):
        check.nonnegative(f"other_ceilings[{i}]", c)
    roof = _roofline.attainable_flops(io_intensity, peak_flops, storage_bandwidth)
    return minimum(roof, *other_ceilings) if other_ceilings else roof


def read_amplification(bytes_read, bytes_used):
    """ρ = bytes read / bytes used, at least 1 for any real reader (chapter 03a).

    Reading a 4 KB sample out of a 1 MB block has ρ = 250; a sequential pass over a shard
    has ρ close to 1.
    """
    check.nonnegative("bytes_read", bytes_read)
    check.positive("bytes_used", bytes_used)
    return bytes_read / bytes_used


def random_read_amplification(record_bytes, block_bytes):
    """Expected ρ when records of ``record_bytes`` are read one at a time in random order
    from storage that reads whole blocks of ``block_bytes`` (chapter 03a):
    (B + r − 1) / r, about 1 + B/r.

    A record that starts at a uniformly random byte of a block touches 1 + (r − 1)/B blocks
    on average, each read whole. Small records pay for their block (4 KB out of 1 MiB:
    ρ ≈ 257); records several blocks long pay only for the partial blocks at their ends
    (ρ → 1). Records aligned to the blocks do a little better (r dividing B: exactly B/r).
    Sequential reading, or shuffling within a shard after reading it whole, has ρ close
    to 1.
    """
    check.positive("record_bytes", record_bytes)
    check.positive("block_bytes", block_bytes)
    return (block_bytes + record_bytes - 1) / record_bytes


# --- compression -------------------------------------------------------------------------


def compression_ratio(raw_bytes, compressed_bytes):
    """c = b_raw / b_compressed (chapter 03a)."""
    check.positive("raw_bytes", raw_bytes)
    check.positive("compressed_bytes", compressed_bytes)
    return raw_bytes / compressed_bytes


def compressed_read_rate(storage_bandwidth, ratio, decode_rate, decoders=1):
    """Decompressed bytes per second out of a read → decode pipeline whose stages overlap:
    min(B_storage · c, decoders · R_decode) (chapter 03a).

    ``decode_rate`` R_decode is one decoder's output in decompressed bytes per second, so a
    byte read from storage yields c bytes of tokens. Without compression (c = 1, nothing to
    decode) the rate is just B_storage.
    """
    check.positive("storage_bandwidth", storage_bandwidth)
    check.positive("ratio", ratio)
    check.positive("decode_rate", decode_rate)
    check.positive("decoders", decoders)
    return minimum(storage_bandwidth * ratio, decoders * decode_rate)


def compression_speedup(storage_bandwidth, ratio, decode_rate, decoders=1):
    """How many times faster tokens arrive compressed than raw: min(c, n·R_decode/B_storage)
    (chapter 03a). Below 1, compression slows the pipeline: the decoder is the bottleneck.

    Compression helps exactly when c > 1 and the decoders together outrun storage
    (n·R_decode > B_storage).
    """
    return compressed_read_rate(storage_bandwidth, ratio, decode_rate, decoders) / storage_bandwidth


# --- prefetch and overlap ----------------------------------------------------------------


def prefetch_depth(arrival_rate, latency):
    """Little's law L = λW: batches that must be in flight to sustain ``arrival_rate`` λ
    (batches/s) when each takes ``latency`` W seconds to produce (chapter 03a).

    A 0.5 s step (λ = 2/s) fed by a 2 s load needs 4 batches in flight.
    """
    check.nonnegative("arrival_rate", arrival_rate)
    check.nonnegative("latency", latency)
    return arrival_rate * latency


def workers_needed(item_time, compute_time):
    """Loader workers that keep a step of ``compute_time`` fed when one worker needs
    ``item_time`` per batch: Little's law with λ = 1/compute_time (chapter 03a).

    Returns the ratio item_time / compute_time; round it up for a worker count. In a
    PyTorch DataLoader each worker builds one batch at a time, so the batches in progress
    are at most ``num_workers``; ``prefetch_factor`` adds finished batches waiting in a
    queue, which absorbs jitter but adds no throughput.
    """
    check.nonnegative("item_time", item_time)
    check.positive("compute_time", compute_time)
    return item_time / compute_time


def pipeline_throughput(*stage_rates):
    """Items per second through stages that overlap: the slowest stage sets the pace,
    min(r_1, r_2, ...) (chapter 03a)."""
    if not stage_rates:
        raise ValueError("stage_rates: give at least one stage rate")
    for i, r in enumerate(stage_rates):
        check.positive(f"stage_rates[{i}]", r)
    return minimum(*stage_rates)


def serial_step_time(data_time, compute_time):
    """Step time when loading does not overlap compute (``num_workers=0``): the stage
    times add, t_data + t_compute (chapter 03a)."""
    check.nonnegative("data_time", data_time)
    check.nonnegative("compute_time", compute_time)
    return data_time + compute_time


def overlapped_step_time(data_time, compute_time, workers=1):
    """Step time in steady state when ``workers`` loaders prefetch while the step computes:
    max(t_data / workers, t_compute) (chapter 03a).

    ``data_time`` is one worker's time to produce one batch (read + decode); the workers
    share the batches, so the loader stage delivers one every t_data / workers.
    """
    check.nonnegative("data_time", data_time)
    check.nonnegative("compute_time", compute_time)
    check.positive("workers", workers)
    return maximum(data_time / workers, compute_time)


def step_time(data_time, compute_time, workers):
    """Steady-state seconds per step of a DataLoader-style loop (chapter 03a):
    t_data + t_compute with ``workers == 0`` (loading inside the loop, nothing prefetched),
    max(t_data / workers, t_compute) with one or more workers.

    ``workers`` may be an array mixing 0 and positive counts; a SymPy symbol is taken as a
    positive count.
    """
    check.nonnegative("data_time", data_time)
    check.nonnegative("compute_time", compute_time)
    check.count("workers", workers, minimum=0)
    if isinstance(workers, sp.Basic) and workers.free_symbols:
        return overlapped_step_time(data_time, compute_time, workers)
    if np.ndim(workers) == 0:
        if float(workers) == 0:
            return serial_step_time(data_time, compute_time)
        return overlapped_step_time(data_time, compute_time, workers)
    if is_symbolic(data_time, compute_time):
        raise ValueError("workers: an array of worker counts needs numeric times")
    w, d = np.asarray(workers, dtype=float), np.asarray(data_time, dtype=float)
    c = np.asarray(compute_time, dtype=float)
    return np.where(w > 0, np.maximum(d / np.where(w > 0, w, 1.0), c), d + c)


def loader_throughput(data_time, compute_time, workers):
    """Steps per second of a DataLoader-style loop, 1 / :func:`step_time` (chapter 03a):
    min(workers / t_data, 1 / t_compute) with prefetching workers, 1 / (t_data + t_compute)
    without."""
    t = step_time(data_time, compute_time, workers)
    check.positive("data_time + compute_time", t)
    return 1 / t


def exposed_data_time(data_time, compute_time, workers):
    """Seconds per step the consumer waits for data (chapter 03a): all of t_data without
    workers, max(0, t_data / workers − t_compute) in steady state with them."""
    return step_time(data_time, compute_time, workers) - compute_time


def exposed_stall(stall, latency, depth, compute_time):
    """Seconds one slow request (``latency + stall`` instead of ``latency``) holds up the
    consumer when the loader keeps ``depth`` batches requested ahead: max(0, W − depth ·
    t_compute) with W = latency + stall (chapter 03a).

    A batch is requested ``depth`` steps before it is needed, so it has depth · t_compute
    seconds to arrive. With PyTorch's DataLoader, depth = num_workers · prefetch_factor.
    Little's law with the worst latency, depth >= (latency + stall) / t_compute, hides it.
    Assumes the loader otherwise runs ahead of the consumer (it has time to refill the queue
    between stalls).
    """
    check.nonnegative("stall", stall)
    check.nonnegative("latency", latency)
    check.nonnegative("depth", depth)
    check.positive("compute_time", compute_time)
    return maximum(latency + stall - depth * compute_time, 0)


def data_fraction(data_time, step_time):
    """Share of a step spent waiting for data, t_data / t_step (chapter 03a). Above about
    10%, the run is input-bound and the loader is worth fixing first."""
    check.nonnegative("data_time", data_time)
    check.positive("step_time", step_time)
    return data_time / step_time


def transfer_time(nbytes, bandwidth):
    """Seconds to move ``nbytes`` at ``bandwidth`` bytes/s, n / B: filling a local cache
    from a shared file system, for one (chapter 03a)."""
    check.nonnegative("nbytes", nbytes)
    check.positive("bandwidth", bandwidth)
    return _comm.p2p_time(nbytes, 0, bandwidth)   # chapter 04's α + n/β, with no α


# --- measurement tools -------------------------------------------------------------------
# Chapter 03a writes token shards to a temporary folder and reads them back through a real
# torch DataLoader. They live here, not in the notebook, so that DataLoader workers can
# import them under any multiprocessing start method (fork, spawn or forkserver).


def _zlib():
    import zlib
    return zlib


def _lzma():
    import lzma
    return lzma


#: name -> (compress(bytes) -> bytes, decompress(bytes) -> bytes). "raw" stores the bytes.
CODECS = {
    "raw": (lambda b: bytes(b), lambda b: b),
    "zlib": (lambda b: _zlib().compress(b, 1), lambda b: _zlib().decompress(b)),
    "lzma": (lambda b: _lzma().compress(b, preset=0), lambda b: _lzma().decompress(b)),
}


def make_tokens(n, vocab=32000, seed=0, exponent=1.2):
    """``n`` token ids (uint16) drawn from a Zipf law over ``vocab`` ids, p(k) ∝ 1/k^s,
    roughly how word frequencies fall off: a stand-in for a tokenized text shard
    (chapter 03a)."""
    check.count("n", n)
    check.count("vocab", vocab, minimum=2)
    check.positive("exponent", exponent)
    if vocab > 2**16:
        raise ValueError(f"vocab must fit in uint16 (<= 65536), got {vocab!r}")
    cdf = np.cumsum(1.0 / np.arange(1, vocab + 1) ** exponent)
    u = np.random.default_rng(seed).random(int(n)) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u), vocab - 1).astype(np.uint16)


def write_shards(folder, shards, codec="lzma"):
    """Write each token array in ``shards`` to its own file in ``folder``, compressed with
    ``codec`` (a key of :data:`CODECS`); return the paths (chapter 03a)."""
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    if len(shards) == 0:
        raise ValueError("shards: give at least one token array")
    compress = CODECS[codec][0]
    paths = []
    for i, tokens in enumerate(shards):
        path = os.path.join(folder, f"shard-{i:04d}.{codec}")
        with open(path, "wb") as f:
            f.write(compress(np.ascontiguousarray(tokens).tobytes()))
        paths.append(path)
    return paths


class ShardDataset:
    """A map-style dataset whose item i is shard ``paths[i % len(paths)]``, decoded into a
    token tensor (chapter 03a). Each item is one batch (use ``batch_size=None``).

    ``__getitem__`` does what a worker does for a batch: wait ``latency`` seconds (a
    simulated storage request: sleep, so it costs no CPU), read the file, optionally wait
    ``bytes_read / bandwidth`` more (a simulated link), and decode it with ``codec`` (real
    CPU work). With ``decode=False`` it returns the compressed bytes undecoded, so a
    consumer can decode them itself. Every item also carries its own timings, so a
    measurement can see each stage from inside the workers: ``(tokens, timings)`` where
    timings is a float64 tensor [wall seconds in __getitem__, wall seconds decoding, CPU
    seconds decoding].
    """

    def __init__(self, paths, length=None, codec="lzma", latency=0.0, bandwidth=None,
                 decode=True, stall_every=0, stall=0.0):
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
        if not paths:
            raise ValueError("paths: give at least one shard")
        check.nonnegative("latency", latency)
        check.nonnegative("stall", stall)
        check.count("stall_every", stall_every, minimum=0)
        if bandwidth is not None:
            check.positive("bandwidth", bandwidth)
        self.paths, self.codec = list(paths), codec
        self.length = len(self.paths) if length is None else int(length)
        self.latency, self.bandwidth, self.decode = latency, bandwidth, decode
        self.stall_every, self.stall = int(stall_every), stall

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        import torch

        if not 0 <= i < self.length:
            raise IndexError(i)
        start = time.perf_counter()
        wait = self.latency
        if self.stall_every and i % self.stall_every == self.stall_every - 1:
            wait += self.stall
        with open(self.paths[i % len(self.paths)], "rb") as f:
            blob = f.read()
        if self.bandwidth:
            wait += len(blob) / self.bandwidth
        if wait:
            time.sleep(wait)
        t_dec = time.perf_counter()
        cpu = time.thread_time()
        if self.decode:
            data = torch.from_numpy(np.frombuffer(CODECS[self.codec][1](blob), dtype=np.uint16)
                                    .astype(np.int32))
        else:
            data = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        end = time.perf_counter()
        timings = torch.tensor([end - start, end - t_dec, time.thread_time() - cpu],
                               dtype=torch.float64)
        return data, timings


def run_loader(dataset, workers, compute_time=0.0, consume=None, prefetch_factor=2,
               warmup=2, seed=0):
    """Drive a real ``torch.utils.data.DataLoader`` over ``dataset`` and time it (chapter 03a).

    Each step asks the loader for the next batch (the time it blocks is the *exposed* data
    time), then "trains": sleeps ``compute_time`` seconds, or calls ``consume(batch)`` when
    given. Batches are ``dataset`` items as they are (``batch_size=None``). The first
    ``warmup`` steps (worker start-up, an empty prefetch queue) are left out of every
    statistic: the clock starts when batch ``warmup - 1`` arrives. With several workers,
    make the number of timed steps a multiple of ``workers`` so that each worker's batches
    are counted alike.

    Returns a dict: ``throughput`` (timed steps per second), ``step`` (mean seconds per
    step), ``wait`` (mean exposed data seconds per step), ``item`` (mean wall seconds a
    worker spent per item), ``decode`` and ``decode_cpu`` (mean wall and CPU seconds
    decoding per item), ``consume`` (mean seconds in the consumer), ``steps``, and per step
    after warm-up: ``waits`` (exposed data seconds) and ``indices`` (item index of each
    step). The means are what a run experiences, stalls included. ``median`` holds the
    steady state without them, for a shared machine where a process is now and then
    descheduled: ``throughput`` (1 / the median over steps i of (arrival of batch i+k −
    arrival of batch i) / k, with k = max(1, workers), one worker's whole cycle), and the
    medians of ``item``, ``decode`` and ``consume``.
    """
    import torch
    from torch.utils.data import DataLoader

    check.count("workers", workers, minimum=0)
    check.nonnegative("compute_time", compute_time)
    check.count("warmup", warmup, minimum=1)
    if len(dataset) <= warmup + 1:
        raise ValueError(f"dataset: needs more than warmup + 1 = {warmup + 1} items")
    torch.manual_seed(seed)
    kwargs = dict(prefetch_factor=prefetch_factor) if workers else {}
    loader = DataLoader(dataset, batch_size=None, shuffle=False, num_workers=workers, **kwargs)
    waits, consumes, items, arrivals = [], [], [], []
    it = iter(loader)
    try:
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            if consume is not None:
                consume(batch)
            elif compute_time:
                time.sleep(compute_time)
            t2 = time.perf_counter()
            arrivals.append(t1)
            waits.append(t1 - t0)
            consumes.append(t2 - t1)
            if isinstance(batch, (tuple, list)) and len(batch) == 2:
                items.append(np.asarray(batch[1], dtype=float))
        end = time.perf_counter()
    finally:
        del it
    n = len(arrivals) - warmup
    span = end - arrivals[warmup - 1]
    timing = np.array(items[warmup:]) if items else np.full((n, 3), np.nan)
    k = max(1, int(workers))
    arr = np.array(arrivals[warmup - 1:])
    period = (float(np.median((arr[k:] - arr[:-k]) / k)) if len(arr) > k
              else span / n)
    median = {
        "throughput": 1 / period,
        "item": float(np.median(timing[:, 0])),
        "decode": float(np.median(timing[:, 1])),
        "consume": float(np.median(consumes[warmup:])),
    }
    return {
        "throughput": n / span,
        "step": span / n,
        "wait": float(np.mean(waits[warmup:])),
        "item": float(np.mean(timing[:, 0])),
        "decode": float(np.mean(timing[:, 1])),
        "decode_cpu": float(np.mean(timing[:, 2])),
        "consume": float(np.mean(consumes[warmup:])),
        "steps": n,
        "waits": np.array(waits[warmup:]),
        "indices": np.arange(warmup, warmup + n),
        "median": median,
    }


check.guard_module(globals(), exclude={"make_tokens", "write_shards", "run_loader"})  # DESIGN.md
