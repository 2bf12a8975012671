"""What the framework takes beside the model (chapter 19's buffers) and the planner's memory
terms that call it (issue 22, item 5): each figure against the source it comes from."""

import numpy as np
import pytest

from dtbook import hardware, memory, models, plan
from dtbook.plan import terms
from dtbook.plan.model import evaluate
from dtbook.units import GiB, MiB


def test_nccl_connection_is_ncclsdefault_fifos():
    # NVIDIA/nccl src/init.cc with src/include/device.h: LL 8 lines x 512 threads x 8 steps x
    # 16-byte line; LL128 120 elements x 640 threads x 8 steps x 8 bytes; Simple 1 << 22
    assert memory.NCCL_PROTOCOL_BUFFERS == {"LL": 512 * 1024, "LL128": 4_915_200, "Simple": 4 * MiB}
    assert memory.NCCL_CONNECTION_BYTES == 9_633_792


def test_one_communicator_is_the_measured_688_mb():
    # NVIDIA/nccl issue #964: one process group of more than two A100s on NVLink took 688 MB
    assert memory.nccl_buffer_bytes(1) == pytest.approx(688e6, rel=0.02)
    assert memory.nccl_buffer_bytes(np.array([0, 1, 3])) == pytest.approx(
        [0, memory.nccl_buffer_bytes(1), 3 * memory.nccl_buffer_bytes(1)])


def test_driver_reserve_is_the_gib_less_nvidia_smis_total():
    # nvidia-smi totals (dtbook.hardware's sources): A100 80GB 81,920 MiB, H100 SXM 81,559 MiB
    for gpu, reserve in (("a100-80gb", 0), ("h100-sxm", 361 * MiB), ("h200", 613 * MiB)):
        total = memory.NVIDIA_SMI_TOTAL_MIB[gpu] * MiB
        assert memory.driver_reserved_bytes(hardware.get(gpu).hbm_bytes, total) == reserve
    assert memory.NVIDIA_SMI_TOTAL_MIB["h100-sxm"] == 81559


def test_framework_breakdown_and_total():
    parts = memory.framework_breakdown(3, driver_bytes=361 * MiB)
    assert parts["cuda_context"] == 400 * MiB        # pytorch/pytorch #109888: "around 400MB"
    assert parts["nccl"] == 3 * memory.nccl_buffer_bytes(1)
    total = memory.framework_bytes(3, driver_bytes=361 * MiB)
    assert total == pytest.approx(sum(parts.values()))
    assert 2.5e9 < total < 3.5e9                       # the docstring's 2.9 GB
    assert memory.CUDA_CONTEXT_EAGER_BYTES > 2 * memory.CUDA_CONTEXT_BYTES  # before lazy loading
    for bad, kw in (("communicators", dict(communicators=-1)), ("driver_bytes", dict(driver_bytes=-1))):
        with pytest.raises(ValueError, match=bad):
            memory.framework_bytes(**kw)


def _one(cfg, dtype="bf16", **cols):
    base = dict(tp=8, pp=4, dp=2, cp=1, ep=1, vpp=1, micro_batch=1, zero=1, recompute=2,
                sequence_parallel=1)
    base.update(cols)
    return evaluate(cfg, gpus=0, gpu="h100-sxm", seq=4096, global_batch=64, dtype=dtype,
                    gpus_per_node=8, cols={k: np.array([v]) for k, v in base.items()}), base


def test_planner_memory_calls_framework_bytes(monkeypatch):
    cfg = models.get("llama3-70b")
    out, base = _one(cfg)
    expect = memory.framework_bytes(3)
    assert out["memory_framework"][0] == pytest.approx(expect)      # TP, PP and DP communicators
    assert out["memory_per_gpu"][0] == pytest.approx(
        out["memory_state"][0] + out["memory_activations"][0] + expect)
    monkeypatch.setattr(memory, "framework_bytes", lambda *a, **k: 7 * GiB)
    again, _ = _one(cfg)
    assert np.ravel(again["memory_framework"])[0] == 7 * GiB
    assert np.ravel(again["memory_per_gpu"])[0] == pytest.approx(
        out["memory_state"][0] + out["memory_activations"][0] + 7 * GiB)
    assert terms.communicators(terms.Layouts.of(
        {k: np.array([v]) for k, v in dict(base, tp=1, pp=1, dp=1).items()},
        terms.Job.make(cfg, gpu="h100-sxm", seq=4096, global_batch=64)))[0] == 0


@pytest.mark.parametrize("dtype, plain, sharded", [
    # github.com/NVIDIA/Megatron-LM README, "Distributed Optimizer": bytes per parameter
    ("bf16", 18, lambda d: 6 + 12 / d),   # bf16 param, fp32 grads
    ("fp16", 20, lambda d: 4 + 16 / d),   # fp16 param, fp16 grads
])
def test_state_is_megatrons_distributed_optimizer_table(dtype, plain, sharded):
    cfg = models.get("llama3-70b")
    for zero, per_param in ((0, plain), (1, sharded(2))):
        out, _ = _one(cfg, dtype=dtype, zero=zero)
        params = cfg.num_params() / (8 * 4)
        assert out["memory_state"][0] == pytest.approx(per_param * params)


def test_estimate_reports_the_framework_share():
    e = plan.estimate("llama3-8b", gpus=64, gpu="h100-sxm", tp=8, pp=2, dp=4, global_batch=64,
                      seq=4096)
    b = e.breakdown
    assert e.memory_per_gpu == pytest.approx(b["memory_state"] + b["memory_activations"]
                                             + b["memory_framework"])
    assert b["memory_framework"] == pytest.approx(memory.framework_bytes(3))


def test_optimizer_counts_megatrons_separate_copy_and_fp16_unscale():
    # Megatron's step: Adam (offload.optimizer_step_bytes, 30 B with FP32 main gradients), then
    # _copy_main_params_to_model_params reads the FP32 master again (4 B); FP16 gradients are
    # first cast to FP32 (read 2, write 4) and unscaled with the overflow check (read 4, write 4)
    from dtbook import offload
    cfg = models.get("llama3-70b")
    job = terms.Job.make(cfg, gpu="a100-80gb", seq=4096, global_batch=64)
    fp16 = terms.Job.make(cfg, gpu="a100-80gb", seq=4096, global_batch=64, dtype="fp16")
    lay = terms.Layouts.of({k: np.array([v]) for k, v in dict(
        tp=8, pp=4, dp=2, cp=1, ep=1, vpp=1, micro_batch=1, zero=1, recompute=0,
        sequence_parallel=1).items()}, job)
    psi = 1e9
    hbm = hardware.memory_ceiling("a100-80gb").triad
    adam = offload.optimizer_step_bytes(grad_bytes=4)
    assert terms.optimizer(job, lay, psi)[0] == pytest.approx(((adam + 4 + 4) * psi / 2 + 4 * psi) / hbm)
    assert terms.optimizer(fp16, lay, psi)[0] - terms.optimizer(job, lay, psi)[0] == pytest.approx(
        14 * psi / 2 / hbm)


def test_expert_state_is_sharded_over_the_experts_own_copies():
    """DeepSeek-V3 on its report's layout (PP 16, DP 128, EP 64, ZeRO-1): each expert lives
    on dp/ep = 2 GPUs, so its optimizer state splits 2 ways, the dense weights' 128 ways
    (the README's 6 + 12/d bytes per parameter for each)."""
    cfg = models.get("deepseek-v3")
    e = plan.estimate(cfg, gpus=2048, gpu="h800", tp=1, pp=16, dp=128, ep=64,
                      global_batch=15360, seq=4096, zero=1, dtype="fp8")
    experts = (cfg.layers - cfg.dense_layers) * cfg.experts * cfg.mlp_params(cfg.moe_ffn_hidden)
    dense = cfg.num_params() - experts
    by_hand = dense / 16 * (6 + 12 / 128) + experts / (16 * 64) * (6 + 12 / 2)
    assert e.breakdown["memory_state"] == pytest.approx(by_hand)
