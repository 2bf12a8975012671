"""dtbook.hardware: datasheet figures, units, sources, and the catalog's access functions."""

import dataclasses

import pytest

from dtbook import hardware
from dtbook.hardware import Accelerator, Link
from dtbook.units import GB, TB, TFLOP, PFLOP, GiB


def test_listings():
    assert hardware.accelerators() == ["a100-80gb", "h100-sxm", "h200", "h800", "b200"]
    assert hardware.links() == ["nvlink4", "nvlink4-h800", "nvlink5", "ib-ndr400", "nvlink3", "ib-hdr200",
                                "opa-100", "pcie5-x16", "ethernet-100g"]
    assert hardware.names() == hardware.accelerators() + hardware.links()
    for name in hardware.accelerators():
        assert isinstance(hardware.get(name), Accelerator)
    for name in hardware.links():
        assert isinstance(hardware.get(name), Link)


def test_get_is_case_insensitive():
    assert hardware.get("H100-SXM") is hardware.get("h100_sxm")
    assert hardware.get(" NVLink4 ") is hardware.get("nvlink4")


def test_get_unknown_lists_names():
    with pytest.raises(ValueError) as err:
        hardware.get("tpu-v5")
    for name in hardware.names():
        assert name in str(err.value)
    with pytest.raises(ValueError):
        hardware.get(None)


# --------------------------------------------------------------------------- datasheet figures
def test_h100_datasheet():
    # NVIDIA H100 whitepaper / datasheet, SXM5, dense (datasheet prints twice these "with sparsity").
    h100 = hardware.get("h100-sxm")
    assert h100.peak("bf16") == 989.4 * TFLOP
    assert h100.peak("fp16") == 989.4 * TFLOP
    assert h100.peak("fp8") == 1978.9 * TFLOP
    assert h100.peak("tf32") == 494.7 * TFLOP
    assert h100.peak("fp32") == 66.9 * TFLOP
    assert h100.hbm_bytes == 80 * 2**30  # "80GB" is binary: see test_hbm_is_binary_as_the_vendor_means
    assert h100.hbm_bandwidth == 3.35e12


def test_a100_datasheet():
    a100 = hardware.get("a100-80gb")
    assert (a100.peak("bf16"), a100.peak("tf32"), a100.peak("fp32")) == (312e12, 156e12, 19.5e12)
    assert a100.hbm_bytes == 80 * 2**30 and a100.hbm_bandwidth == 2.039e12
    with pytest.raises(ValueError) as err:
        a100.peak("fp8")  # Ampere has no FP8 tensor cores
    for dtype in a100.dtypes:
        assert dtype in str(err.value)


def test_h200_datasheet():
    h200, h100 = hardware.get("h200"), hardware.get("h100-sxm")
    assert h200.hbm_bytes == 141 * 2**30 and h200.hbm_bandwidth == 4.8e12
    assert h200.peak_flops == h100.peak_flops  # same GH100 silicon and clocks


def test_b200_datasheet():
    # HGX B200 per GPU: 180 GB (GiB), 7.7 TB/s; FP8 9 and BF16 4.5 PFLOP/s with sparsity.
    b200 = hardware.get("b200")
    assert b200.hbm_bytes == 180 * 2**30 and b200.hbm_bandwidth == 7.7e12
    assert b200.peak("fp8") == 4.5e15 and b200.peak("bf16") == 2.25e15
    assert b200.peak("fp4") == 2 * b200.peak("fp8")


def test_peak_default_and_errors():
    h100 = hardware.get("h100-sxm")
    assert h100.peak() == h100.peak("bf16") == h100.peak(" BF16 ")
    with pytest.raises(ValueError, match="available"):
        h100.peak("int4")


# --------------------------------------------------------------------------- units sanity
@pytest.mark.parametrize("name", hardware.accelerators())
def test_accelerator_units(name):
    a = hardware.get(name)
    assert a.peak("bf16") / a.peak("fp32") > 1  # tensor cores beat plain FP32
    assert a.peak("bf16") == a.peak("fp16")
    assert a.peak("tf32") < a.peak("bf16")
    if "fp8" in a.dtypes:
        assert a.peak("fp8") == pytest.approx(2 * a.peak("bf16"), rel=1e-3)
    assert 10 * TFLOP < a.peak("bf16") < 10 * PFLOP  # FLOP/s, not TFLOP/s
    assert 40 * GB < a.hbm_bytes < 300 * GB  # bytes
    assert 1 * TB < a.hbm_bandwidth < 10 * TB  # bytes/s
    # Ridge point (FLOP per byte of HBM traffic) in the range the roofline chapter uses.
    assert 100 < a.peak("bf16") / a.hbm_bandwidth < 400


# What nvidia-smi prints as each part's total memory (MiB), from the sources the catalog cites:
# NVIDIA/cuda-samples #311 (H200), NVIDIA/nccl #1264 (H100), NVIDIA/TensorRT-LLM #10278 (B200),
# modal-labs/modal-client #2797 (A100 80GB and H100).
# the H800 is an H100 SXM with NVLink cut: its HBM is the H100's (no nvidia-smi reading of its own found)
NVIDIA_SMI_MIB = {"a100-80gb": 81920, "h100-sxm": 81559, "h200": 143771, "h800": 81559, "b200": 183359}
SOLD_AS_GB = {"a100-80gb": 80, "h100-sxm": 80, "h200": 141, "h800": 80, "b200": 180}


@pytest.mark.parametrize("name", hardware.accelerators())
def test_hbm_is_binary_as_the_vendor_means(name):
    # the vendor's "80GB" is 80 GiB: the driver reports more than 80e9 bytes on every part,
    # and at most the binary figure (it keeps a few hundred MiB for itself)
    a, smi = hardware.get(name), NVIDIA_SMI_MIB[name] * 2**20
    assert a.hbm_bytes == SOLD_AS_GB[name] * GiB
    assert SOLD_AS_GB[name] * GB < 0.98 * a.hbm_bytes < smi <= a.hbm_bytes
    assert f"{NVIDIA_SMI_MIB[name]}MiB" in a.sources["hbm_bytes"]


@pytest.mark.parametrize("name", hardware.links())
def test_link_units(name):
    link = hardware.get(name)
    assert 100e-9 <= link.alpha <= 100e-6  # seconds: 0.1 to 100 µs
    assert 1 * GB <= link.beta <= 2 * TB  # bytes/s per direction
    assert link.beta < link.beta_bidirectional == 2 * link.beta


def test_link_figures_per_direction():
    assert hardware.get("nvlink4").beta == 450e9  # "900 GB/s" is both directions
    assert hardware.get("nvlink4").beta_bidirectional == 900e9
    assert hardware.get("nvlink5").beta == 900e9  # "1.8 TB/s" is both directions
    assert hardware.get("ib-ndr400").beta == 400e9 / 8  # 400 Gb/s each way
    assert hardware.get("ethernet-100g").beta == 100e9 / 8
    assert hardware.get("nvlink3").beta_bidirectional == 600e9  # A100: "600 GB/s"
    assert hardware.get("ib-hdr200").beta == 200e9 / 8  # HDR 200 Gb/s each way
    assert hardware.get("pcie5-x16").beta == pytest.approx(63.0e9, rel=1e-3)  # after 128b/130b
    # NVLink4 per direction against IB per direction: 9x (the book's "18x" mixes conventions).
    assert hardware.get("nvlink4").beta / hardware.get("ib-ndr400").beta == 9


def test_latency_ordering():
    nv, ib, eth = (hardware.get(n).alpha for n in ("nvlink4", "ib-ndr400", "ethernet-100g"))
    assert nv <= ib < eth


# --------------------------------------------------------------------------- sources
@pytest.mark.parametrize("name", hardware.accelerators())
def test_every_accelerator_figure_has_a_source(name):
    a = hardware.get(name)
    assert len(a.source) > 20
    for figure in ("peak_flops", "hbm_bytes", "hbm_bandwidth"):
        assert len(a.sources.get(figure, "")) > 20, figure


@pytest.mark.parametrize("name", hardware.links())
def test_every_link_figure_has_a_source(name):
    link = hardware.get(name)
    assert len(link.source) > 20 and len(link.alpha_source) > 20
    assert "direction" in link.source


def test_entries_are_immutable():
    h100 = hardware.get("h100-sxm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        h100.hbm_bytes = 1
    with pytest.raises(TypeError):
        h100.peak_flops["bf16"] = 1
    assert hash(h100) == hash(hardware.get("h100-sxm"))


def test_published_bus_bandwidths_respect_the_line_rate():
    # Two independent sources: NVIDIA's measured busbw and the datasheet's β. A ring moves
    # 2(P − 1)/P · n over every port, so its busbw cannot exceed β; with the switch adding
    # (NVLS) each GPU sends n once, so algbw, not busbw, is what β bounds.
    from dtbook import comm
    published = hardware.published_busbw()
    assert {b.link for b in published} <= set(hardware.links())
    for b in published:
        beta = hardware.get(b.link).beta
        assert ("https://github.com/NVIDIA/nccl-tests/issues/" in b.source
                or "github.com/Azure/AI-benchmarking-guide" in b.source)
        assert 0 < b.busbw_low <= b.busbw_high
        if b.algorithm == "ring":
            assert 0.7 * beta < b.busbw_high <= beta, b.name
        else:
            assert b.busbw_high > beta                      # beats the ring's ceiling
            assert b.busbw_high / comm.bus_factor(b.collective, b.ranks) <= beta


def test_attention_kernels_sit_below_the_matmul_ceiling_and_quote_their_source():
    # FlashAttention-2's fused kernel: up to 73% (forward) and 63% (backward) of the A100's
    # 312 TFLOP/s, up to 335 TFLOP/s forward + backward on H100 (Dao 2023, Sec. 1 and 4.1)
    a100 = hardware.attention_kernel("A100_80GB")
    assert a100.forward == pytest.approx(0.73 * 312 * TFLOP) and a100.backward == pytest.approx(0.63 * 312 * TFLOP)
    assert "73%" in a100.source and "63%" in a100.source
    assert hardware.attention_kernel("h100-sxm").forward == 335 * TFLOP
    for gpu in ("a100-80gb", "h100-sxm", "h200"):
        k = hardware.attention_kernel(gpu)
        assert k.backward <= k.forward < hardware.matmul_ceiling(gpu).flops
        assert "2307.08691" in k.source
    with pytest.raises(ValueError, match="a100-80gb"):
        hardware.attention_kernel("b200")


def test_fp8_matmul_ceiling_is_measured_below_the_fp8_peak():
    for gpu in ("h100-sxm", "h200"):
        fp8, bf16 = hardware.matmul_ceiling(gpu, "fp8"), hardware.matmul_ceiling(gpu)
        assert fp8.dtype == "fp8" and bf16.dtype == "bf16"
        assert bf16.flops < fp8.flops < hardware.get(gpu).peak("fp8")
    assert hardware.matmul_ceiling("h100-sxm", "fp16") is hardware.matmul_ceiling("h100-sxm")
    with pytest.raises(ValueError, match="h100-sxm"):
        hardware.matmul_ceiling("a100-80gb", "fp8")   # Ampere has no FP8 tensor cores


def test_jean_zay_node_shares_four_omni_path_ports_among_eight_gpus():
    # BigScience's README: 8 A100 80GB per node, '4 OmniPath links'; Omni-Path 100 series
    # runs 100 Gb/s per port per direction
    nd = hardware.node("jean-zay-a100")
    assert (nd.gpus, nd.nics, nd.accelerator, nd.scale_out) == (8, 4, "a100-80gb", "opa-100")
    assert hardware.get("opa-100").beta == 100e9 / 8
    assert nd.scale_out_bandwidth == 4 * 100e9 / 8          # a quarter of a DGX A100's
    assert nd.scale_out_bandwidth * 4 == hardware.node("dgx-a100").scale_out_bandwidth
    assert "OmniPath" in nd.source and "opa-100" in hardware.links()


def test_measured_memory_bandwidth_sits_below_the_datasheet():
    # BabelStream on Azure's A100, H100 and H200 nodes: a streaming kernel reaches 79-89 % of
    # the datasheet's HBM rate; Copy (one read, one write) no faster than Triad
    for name in ("a100-80gb", "h100-sxm", "h200"):
        m, spec = hardware.memory_ceiling(name), hardware.get(name).hbm_bandwidth
        assert 0.75 * spec < m.copy <= m.triad < spec, name
        assert "Azure/AI-benchmarking-guide" in m.source
    with pytest.raises(ValueError, match="a100-80gb"):
        hardware.memory_ceiling("b200")


def test_plannable_accelerators_have_every_measured_rate():
    assert hardware.plannable() == ["a100-80gb", "h100-sxm", "h200", "h800"]
    for name in hardware.plannable():
        hardware.matmul_ceiling(name), hardware.memory_ceiling(name), hardware.attention_kernel(name)
    from dtbook import plan
    with pytest.raises(ValueError, match="b200"):      # listed in the catalog, not plannable
        plan.estimate("llama3-8b", gpus=8, gpu="b200", tp=8, pp=1, dp=1, global_batch=8, seq=2048)


# --------------------------------------------------------------------------- your own accelerator
def _spec(name="lab-gpu"):
    return {"accelerator": {"name": name, "peak_flops": {"bf16": "1000 TFLOP/s", "fp8": 2e15},
                            "hbm_bytes": "96 GiB", "hbm_bandwidth": "4 TB/s", "source": "lab notes",
                            "matmul_ceiling": {"bf16": "800 TFLOP/s", "sms": 132},
                            "memory_ceiling": {"triad": "3.5 TB/s"},
                            "attention_kernel": {"forward": "400 TFLOP/s", "backward": "350 TFLOP/s"}},
            "links": [{"name": name + "-link", "alpha": "1 us", "beta": "400 GB/s"}],
            "node": {"name": name + "-node", "gpus": 4, "scale_up": name + "-link",
                     "scale_out": "ib-ndr400", "nics": 2}}


@pytest.fixture
def registered():
    yield
    for name in hardware.registered():
        hardware.unregister(name)


def test_register_from_a_dict(registered):
    before = (hardware.accelerators(), hardware.links(), hardware.nodes())
    acc = hardware.register(_spec())
    assert hardware.get("Lab_GPU") is acc and acc.name == "lab-gpu"
    assert (acc.hbm_bytes, acc.hbm_bandwidth, acc.peak("bf16"), acc.peak("fp8")) == (
        96 * GiB, 4 * TB, 1000 * TFLOP, 2e15)
    assert hardware.get("lab-gpu-link").alpha == 1e-6 and hardware.get("lab-gpu-link").beta == 400 * GB
    nd = hardware.node("lab-gpu-node")
    assert (nd.gpus, nd.nics, nd.accelerator, nd.scale_out_bandwidth) == (4, 2, "lab-gpu", 2 * 50 * GB)
    assert hardware.matmul_ceiling("lab-gpu").flops == 800 * TFLOP and hardware.matmul_ceiling("lab-gpu").sms == 132
    assert hardware.memory_ceiling("lab-gpu").triad == hardware.memory_ceiling("lab-gpu").copy == 3.5 * TB
    assert hardware.attention_kernel("lab-gpu").backward == 350 * TFLOP
    assert "lab-gpu" in hardware.plannable() and hardware.registered() == ["lab-gpu"]
    with pytest.raises(ValueError, match="FP8 matmul ceiling"):   # none given: the planner says so
        hardware.matmul_ceiling("lab-gpu", "fp8")
    hardware.register(dict(_spec(), node=None, links=[]))          # the same name again: replaced
    assert "lab-gpu-node" not in hardware.nodes() and "lab-gpu-link" not in hardware.links()
    hardware.unregister("lab-gpu")
    assert (hardware.accelerators(), hardware.links(), hardware.nodes()) == before
    with pytest.raises(ValueError, match="was not registered"):
        hardware.unregister("h100-sxm")


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_register_from_a_file(registered, tmp_path, suffix):
    import json

    import yaml
    path = tmp_path / ("gpu" + suffix)
    path.write_text(json.dumps(_spec()) if suffix == ".json" else yaml.safe_dump(_spec()))
    acc = hardware.register(str(path))
    assert acc.hbm_bytes == 96 * GiB and hardware.node("lab-gpu-node").accelerator == "lab-gpu"
    from dtbook import plan
    e = plan.estimate("llama3-8b", gpus=8, gpu="lab-gpu", tp=4, pp=1, dp=2, global_batch=16, seq=2048,
                      gpus_per_node=4)
    assert e.config["gpu"] == "lab-gpu" and e.step_time > 0


def test_yaml_exponents_without_a_sign_are_read_as_numbers(registered, tmp_path):
    # YAML 1.1 reads 1e15 (no dot, no sign) as a string; the loader reads it as a number
    path = tmp_path / "gpu.yaml"
    path.write_text("accelerator: {name: y-gpu, peak_flops: {bf16: 1e15}, hbm_bytes: 8.0e+10, "
                    "hbm_bandwidth: 2e12}\n")
    acc = hardware.register(str(path))
    assert (acc.peak("bf16"), acc.hbm_bytes, acc.hbm_bandwidth) == (1e15, 80e9, 2e12)


@pytest.mark.parametrize("change, field", [
    (lambda s: s.pop("accelerator"), "accelerator"),
    (lambda s: s["accelerator"].update(name="H100_SXM"), "accelerator.name"),
    (lambda s: s["accelerator"].update(name="nvlink4"), "accelerator.name"),
    (lambda s: s["accelerator"].update(peak_flops={}), "accelerator.peak_flops"),
    (lambda s: s["accelerator"].update(hbm_bandwidth="4 TB"), "accelerator.hbm_bandwidth"),
    (lambda s: s["accelerator"].update(hbm_bytes=float("nan")), "accelerator.hbm_bytes"),
    (lambda s: s["accelerator"].update(hbm_bytes=True), "accelerator.hbm_bytes"),
    (lambda s: s["accelerator"]["memory_ceiling"].pop("triad"), "accelerator.memory_ceiling.triad"),
    (lambda s: s["accelerator"]["attention_kernel"].update(forward=-1), "accelerator.attention_kernel.forward"),
    (lambda s: s["links"][0].update(alpha="1 GB"), r"links\[0\].alpha"),
    (lambda s: s["links"][0].update(name="ib-ndr400"), r"links\[0\].name"),
    (lambda s: s.update(links={"a": 1}), "links"),
    (lambda s: s["node"].pop("scale_out"), "node.scale_out"),
    (lambda s: s["node"].update(name="dgx-h100"), "node.name"),
    (lambda s: s["node"].update(nics=1.5), "node.nics"),
])
def test_register_names_the_bad_field(registered, change, field):
    spec = _spec()
    change(spec)
    with pytest.raises(ValueError, match=field):
        hardware.register(spec)
    assert hardware.registered() == []


def test_register_file_errors(registered, tmp_path):
    with pytest.raises(ValueError, match="cannot be read"):
        hardware.register(str(tmp_path / "absent.json"))
    bad = tmp_path / "gpu.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        hardware.register(str(bad))
    with pytest.raises(ValueError, match="spec must be a mapping"):
        hardware.register(["accelerator"])
