"""The memory-hierarchy additions to dtbook.hardware (chapter 03)."""

import pytest

from dtbook import hardware
from dtbook.units import GB, GiB, TB


def test_dgx_h100_node():
    nd = hardware.node("dgx-h100")
    assert hardware.nodes()[0] == "dgx-h100"  # dgx-a100 follows (chapters 24, 27)
    assert nd.gpus == 8 and nd.nics == 8
    assert nd.hbm_bytes == 8 * 80 * GiB
    assert nd.scale_out_bandwidth == pytest.approx(400 * GB)  # 8 x 400 Gb/s
    assert nd.host_memory == 2 * TB
    assert nd.host_memory_bandwidth == pytest.approx(614.4 * GB)
    for figure in ("gpus", "nics", "host_memory", "host_memory_bandwidth"):
        assert nd.sources[figure]
    with pytest.raises(ValueError, match="dgx-h100"):
        hardware.node("dgx-z")


def test_ladder_order_and_sources():
    rungs = hardware.ladder("dgx-h100")
    names = [t.name for t in rungs]
    assert names[0].startswith("SRAM") and names[2] == "HBM3"
    assert all(t.source for t in rungs)
    known = [t for t in rungs if t.bandwidth is not None]
    # on one GPU's own path (SRAM, HBM, NVLink, PCIe, IB) each rung is narrower than the last
    path = [t for t in known if t.name.split()[0] in ("SRAM", "HBM3", "NVLink", "PCIe", "InfiniBand")]
    bws = [t.bandwidth for t in path]
    assert bws == sorted(bws, reverse=True)
    assert all(t.latency_source for t in rungs if t.latency is not None)


def test_ladder_figures_match_the_catalog():
    rungs = {t.name.split()[0]: t for t in hardware.ladder()}
    h100 = hardware.get("h100-sxm")
    assert rungs["HBM3"].bandwidth == h100.hbm_bandwidth
    assert rungs["NVLink"].bandwidth == hardware.get("nvlink4").beta
    assert rungs["InfiniBand"].latency == hardware.get("ib-ndr400").alpha
    # SRAM: 132 SMs x 128 B/clock at the clock implied by the FP32 peak (1.98 GHz)
    assert rungs["SRAM"].bandwidth == pytest.approx(132 * 128 * 1.98e9, rel=0.01)
    assert rungs["SRAM"].capacity == 132 * 256 * 2**10
    assert rungs["L2"].capacity == 50e6 and rungs["L2"].bandwidth is None


def test_tier_transfer_time():
    ib = {t.name.split()[0]: t for t in hardware.ladder()}["InfiniBand"]
    assert ib.transfer_time(1e6) == pytest.approx(2e-6 + 1e6 / 50e9)
    l2 = {t.name.split()[0]: t for t in hardware.ladder()}["L2"]
    with pytest.raises(ValueError, match="bandwidth"):
        l2.transfer_time(1.0)
