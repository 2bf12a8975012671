"""Tests of dtbook.datapipe (chapter 03a): the demand formulas, compression, prefetch and
overlap, and the measurement tools over real compressed shards."""

import math
import os

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, strategies as st

from dtbook import datapipe as dp
from dtbook import flops, measure, roofline
from dtbook.symbolic import assert_same
from dtbook.units import GB, KB, KiB, MB, TB

pos = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
H100_BF16 = 989.4e12


# --- demand ------------------------------------------------------------------------------


def test_question_numbers():
    # 70B on 256 H100 at 40% MFU: about 241k tokens/s; 2 KiB/token, rho 1.2: about 0.59 GB/s
    tps = dp.required_tokens_per_second(70e9, H100_BF16, 0.40, 256)
    assert tps == pytest.approx(241_225, rel=1e-4)
    assert tps == flops.tokens_per_second(70e9, H100_BF16, 0.40, 256)
    bw = dp.storage_bandwidth_demand(tps, 2 * KiB, 1.2)
    assert bw == pytest.approx(0.593 * GB, rel=2e-3)
    total = dp.required_storage_bandwidth(70e9, H100_BF16, 0.40, 256, 2 * KiB, 1.2)
    assert total == pytest.approx(bw)


def test_exercise_one_is_ten_times_the_books_figure():
    tps = dp.required_tokens_per_second(13e9, H100_BF16, 0.45, 128)
    assert tps == pytest.approx(730_627, rel=1e-3)
    assert tps / 73_000 == pytest.approx(10, rel=0.01)
    bw = dp.storage_bandwidth_demand(tps, 1.5 * KB, 1.3)
    assert bw == pytest.approx(1.4247 * GB, rel=1e-3)


def test_io_intensity_and_ridge():
    assert dp.io_ridge_point(989e12, 1 * GB) == pytest.approx(9.89e5)
    assert dp.io_ridge_point(989e12, 1 * GB) == roofline.ridge_point(989e12, 1 * GB)
    intensity = dp.io_intensity(70e9, 2 * KiB, 1.2)
    assert intensity == pytest.approx(6 * 70e9 / (2048 * 1.2))
    # at the ridge, the storage ceiling meets the compute roof
    ridge = dp.io_ridge_point(H100_BF16, 2 * MB)
    assert dp.attainable_flops(ridge, H100_BF16, 2 * MB) == pytest.approx(H100_BF16)
    assert dp.attainable_flops(ridge / 4, H100_BF16, 2 * MB) == pytest.approx(H100_BF16 / 4)
    # other ceilings bind when they are lower
    assert dp.attainable_flops(1e3, 100.0, 1.0, 30.0, 50.0) == 30.0


def test_storage_bound_iff_intensity_below_ridge():
    # the demand form and the roofline form agree: storage keeps up with peak compute
    # exactly when I_io >= F / B_storage
    params, b, rho, F, P = 7e9, 4.0, 1.1, H100_BF16, 64
    intensity = dp.io_intensity(params, b, rho)
    need = dp.required_storage_bandwidth(params, F, 1.0, P, b, rho)
    for B in (need * 0.5, need * 2):
        per_device = B / P
        keeps_up = B >= need
        assert keeps_up == (intensity >= dp.io_ridge_point(F, per_device))


def test_read_amplification_and_compression():
    assert dp.read_amplification(1 * MB, 4 * KB) == pytest.approx(250)
    assert dp.compression_ratio(3 * GB, 1 * GB) == 3


def test_compression_helps_only_when_decode_outruns_storage():
    # the book's case: storage 2 GB/s, decode 0.6 GB/s -> compression gives nothing
    assert dp.compression_speedup(2 * GB, 3, 0.6 * GB) == pytest.approx(0.3)
    assert dp.compression_speedup(2 * GB, 3, 0.6 * GB, decoders=4) == pytest.approx(1.2)
    # a fast decoder gets the whole ratio
    assert dp.compression_speedup(1 * GB, 3, 10 * GB) == pytest.approx(3)
    assert dp.compressed_read_rate(1 * GB, 3, 2 * GB) == pytest.approx(2 * GB)


@given(pos, st.floats(1.0, 20.0), pos, st.integers(1, 16))
def test_compression_speedup_properties(B, c, R, n):
    s = dp.compression_speedup(B, c, R, n)
    assert s <= c * (1 + 1e-12)
    assert (s > 1) == (n * R > B and c > 1) or math.isclose(s, 1, rel_tol=1e-9)


def test_littles_law():
    assert dp.prefetch_depth(2.0, 2.0) == 4  # 0.5 s step, 2 s latency
    assert dp.workers_needed(0.06, 0.03) == pytest.approx(2)


def test_pipeline_and_step_time():
    assert dp.pipeline_throughput(10.0, 4.0, 7.0) == 4.0
    assert dp.serial_step_time(0.3, 0.3) == pytest.approx(0.6)
    assert dp.overlapped_step_time(0.3, 0.3) == pytest.approx(0.3)
    assert dp.step_time(0.05, 0.03, 0) == pytest.approx(0.08)
    assert dp.step_time(0.05, 0.03, 1) == pytest.approx(0.05)
    assert dp.step_time(0.05, 0.03, 2) == pytest.approx(0.03)
    got = dp.step_time(0.05, 0.03, np.array([0, 1, 2, 4]))
    assert np.allclose(got, [0.08, 0.05, 0.03, 0.03])
    assert np.allclose(dp.loader_throughput(0.05, 0.03, [0, 1, 2]), [12.5, 20, 1 / 0.03])
    assert np.allclose(dp.exposed_data_time(0.05, 0.03, [0, 1, 2]), [0.05, 0.02, 0.0])
    assert dp.data_fraction(0.3, 0.6) == pytest.approx(0.5)
    assert dp.transfer_time(1 * TB, 300 * MB) == pytest.approx(3333.33, rel=1e-5)


def test_exposed_stall():
    assert dp.exposed_stall(0.15, 0.02, 2, 0.03) == pytest.approx(0.11)
    assert dp.exposed_stall(0.15, 0.02, 8, 0.03) == 0
    # Little's law with the worst latency gives the depth at which the stall disappears
    depth = dp.prefetch_depth(1 / 0.03, 0.17)
    assert dp.exposed_stall(0.15, 0.02, depth, 0.03) == pytest.approx(0, abs=1e-12)


@given(pos, pos, st.integers(0, 16))
def test_step_time_bounds(d, c, w):
    t = dp.step_time(d, c, w)
    assert t >= c * (1 - 1e-12)
    assert t <= (d + c) * (1 + 1e-12)
    if w:
        assert t <= dp.step_time(d, c, 0)
        assert dp.step_time(d, c, w + 1) <= t * (1 + 1e-12)  # more workers never hurt


def test_symbolic_path():
    P, F, eta, psi, b, rho, B, c, R, t, tc, W = sp.symbols(
        "P F eta Psi b rho B c R t t_c W", positive=True)
    assert_same(dp.required_tokens_per_second(psi, F, eta, P), P * F * eta / (6 * psi))
    assert_same(dp.required_storage_bandwidth(psi, F, eta, P, b, rho),
                P * F * eta * b * rho / (6 * psi))
    assert_same(dp.io_intensity(psi, b, rho), 6 * psi / (b * rho))
    assert dp.compressed_read_rate(B, c, R) == sp.Min(B * c, R)
    assert dp.step_time(t, tc, W) == sp.Max(tc, t / W)
    assert_same(dp.step_time(t, tc, 0), t + tc)
    assert dp.pipeline_throughput(B, R) == sp.Min(B, R)
    assert_same(dp.prefetch_depth(1 / tc, t), t / tc)


@pytest.mark.parametrize("fn, args, name", [
    (dp.storage_bandwidth_demand, (1.0, 0.0, 1.0), "bytes_per_token"),
    (dp.storage_bandwidth_demand, (-1.0, 1.0, 1.0), "tokens_per_second"),
    (dp.io_intensity, (1e9, 2.0, -1.0), "read_amplification"),
    (dp.compressed_read_rate, (1.0, 2.0, float("nan")), "decode_rate"),
    (dp.prefetch_depth, (-1.0, 1.0), "arrival_rate"),
    (dp.step_time, (0.1, 0.1, 1.5), "workers"),
    (dp.step_time, (0.1, -0.1, 1), "compute_time"),
    (dp.transfer_time, (1.0, 0.0), "bandwidth"),
    (dp.required_tokens_per_second, (7e9, 1e15, 1.5, 8), "mfu"),
    (dp.loader_throughput, (0.0, 0.0, 0), r"data_time \+ compute_time"),
])
def test_bad_arguments_name_themselves(fn, args, name):
    with pytest.raises(ValueError, match=name):
        fn(*args)


def test_pipeline_throughput_needs_a_stage():
    with pytest.raises(ValueError, match="stage_rates"):
        dp.pipeline_throughput()


# --- measurement tools -------------------------------------------------------------------


def test_tokens_are_deterministic_and_compressible():
    a, b = dp.make_tokens(50_000, seed=3), dp.make_tokens(50_000, seed=3)
    assert a.dtype == np.uint16 and np.array_equal(a, b)
    assert a.max() < 32000
    assert np.bincount(a)[0] > np.bincount(a)[100]  # Zipf: low ids are common
    with pytest.raises(ValueError, match="vocab"):
        dp.make_tokens(10, vocab=70_000)


@pytest.mark.parametrize("codec", sorted(dp.CODECS))
def test_shards_round_trip(tmp_path, codec):
    tokens = [dp.make_tokens(20_000, seed=s) for s in range(2)]
    paths = dp.write_shards(tmp_path, tokens, codec=codec)
    ds = dp.ShardDataset(paths, length=5, codec=codec)
    assert len(ds) == 5
    for i in range(5):
        data, timing = ds[i]
        assert np.array_equal(data.numpy(), tokens[i % 2].astype(np.int32))
        assert timing.shape == (3,) and (timing.numpy() >= 0).all()
    if codec != "raw":
        stored = os.path.getsize(paths[0])
        assert dp.compression_ratio(tokens[0].nbytes, stored) > 1.2
    with pytest.raises(IndexError):
        ds[5]


def test_bad_dataset_arguments(tmp_path):
    with pytest.raises(ValueError, match="codec"):
        dp.ShardDataset(["x"], codec="zip")
    with pytest.raises(ValueError, match="paths"):
        dp.ShardDataset([])
    with pytest.raises(ValueError, match="latency"):
        dp.ShardDataset(["x"], latency=-1)
    with pytest.raises(ValueError, match="codec"):
        dp.write_shards(tmp_path, [np.zeros(3, np.uint16)], codec="zip")


def test_run_loader_counts_and_overlaps(tmp_path):
    paths = dp.write_shards(tmp_path, [dp.make_tokens(1000)], codec="zlib")
    ds = dp.ShardDataset(paths, length=8, codec="zlib", latency=0.02)
    def both():
        return (dp.run_loader(ds, 0, compute_time=0.02, warmup=2),
                dp.run_loader(ds, 1, compute_time=0.02, warmup=2))

    # Without workers every step waits for the whole item; with one, the wait overlaps
    # compute. Steady-state (median) rates, re-measured before failing: a busy machine
    # stalls the worker now and then (DESIGN.md, "Measuring on a shared machine").
    serial, overlapped = measure.confirm(
        both, lambda r: r[1]["median"]["throughput"] > 1.2 * r[0]["median"]["throughput"],
        what="loader throughput, one worker against none", expected="ratio > 1.2")
    assert serial["steps"] == overlapped["steps"] == 6
    assert len(serial["waits"]) == 6
    assert serial["wait"] >= 0.9 * serial["item"]  # no worker: nothing hides the item
    with pytest.raises(ValueError, match="dataset"):
        dp.run_loader(dp.ShardDataset(paths, length=2, codec="zlib"), 0)


def test_random_read_amplification_matches_a_count():
    # back-to-back records of r bytes read in any order, whole 1 MiB blocks per read:
    # count the blocks each record touches and compare with (B + r - 1) / r
    B = 2**20
    for r in (4096, 100_003, 2**20 + 1, 3_000_017):
        start = np.arange(20_000, dtype=np.int64) * r
        touched = (start + r - 1) // B - start // B + 1
        counted = dp.read_amplification(touched.sum() * B, r * start.size)
        assert counted == pytest.approx(dp.random_read_amplification(r, B), rel=0.01)
    assert dp.random_read_amplification(4 * KB, 1 * MB) == pytest.approx(1 + (1e6 - 1) / 4e3)
    # a record exactly one block long and aligned to the blocks reads nothing extra
    start = np.arange(1000, dtype=np.int64) * B
    assert ((start + B - 1) // B - start // B + 1 == 1).all()
