"""memory.device_memory (chapter 19) against independently obtained numbers."""

import pytest
import sympy as sp

from dtbook import activations, memory, models, schedules

CFG = models.get("llama2-7b")
SHAPE = (CFG.num_params(), CFG.layers, CFG.hidden, CFG.heads, CFG.vocab)


def test_one_device_is_model_states_plus_layers_plus_logits():
    got = memory.device_memory(*SHAPE, batch=2, seq=1024, attention="eager", dropout=True)
    sbh = 1024 * 2 * CFG.hidden
    layer = sbh * (34 + 5 * CFG.heads * 1024 / CFG.hidden)        # Korthikanti, by hand
    assert got.model_states == 16 * CFG.num_params()
    assert got["activations"] == pytest.approx(CFG.layers * layer)
    assert got["logits"] == 4 * 1024 * 2 * CFG.vocab
    assert got.total == pytest.approx(sum(got.values()))
    assert list(got) == list(memory.PARTS)


def test_device_memory_holds_the_simulators_peak_of_micro_batches():
    """device_memory's activations are the simulator's peak on that rank times one chunk's
    layers (the closed forms themselves are tested in test_schedules.py)."""
    one = memory.device_memory(*SHAPE, batch=1, seq=2048)["activations"]     # L layers, 1 mb
    for schedule, v in (("1f1b", 1), ("gpipe", 1), ("interleaved-1f1b", 2)):
        peaks = schedules.simulate(schedule, 4, 8, virtual_stages=v).peak_activations
        for stage in range(4):
            got = memory.device_memory(*SHAPE, batch=1, seq=2048, pp=4, microbatches=8,
                                       schedule=schedule, virtual_stages=v, stage=stage)
            assert got["activations"] == pytest.approx(peaks[stage] * one / (4 * v))
    p, m = sp.symbols("p m", positive=True, integer=True)
    sym = memory.device_memory(*SHAPE, batch=1, seq=2048, pp=p, microbatches=m)
    assert sp.simplify(sym["activations"] - sp.Min(p, m) * one / p) == 0


def test_pipeline_first_stage_holds_pp_microbatches_of_its_layers():
    one = memory.device_memory(*SHAPE, batch=1, seq=2048)
    four = memory.device_memory(*SHAPE, batch=1, seq=2048, pp=4, microbatches=8)
    last = memory.device_memory(*SHAPE, batch=1, seq=2048, pp=4, microbatches=8, stage=3)
    assert four["activations"] == pytest.approx(one["activations"])        # 4 × L/4 layers
    assert last["activations"] == pytest.approx(one["activations"] / 4)
    assert four["logits"] == 0 and last["logits"] == one["logits"]
    assert four["params"] == pytest.approx(one["params"] / 4)


def test_recompute_matches_the_checkpoint_formula():
    opts = dict(batch=1, seq=2048, attention="eager", dropout=True)
    layer = activations.layer_activation_bytes(1, 2048, CFG.hidden, CFG.heads, **{
        k: v for k, v in opts.items() if k in ("attention", "dropout")})
    kept = 2 * 2048 * CFG.hidden
    for k in (1, 4, 8):
        got = memory.device_memory(*SHAPE, recompute=k, **opts)["activations"]
        want = activations.checkpointed_activation_bytes(CFG.layers, layer, k, kept)
        assert got == pytest.approx(want)
    full = memory.device_memory(*SHAPE, recompute="full", **opts)["activations"]
    assert full == pytest.approx(memory.device_memory(*SHAPE, recompute=1, **opts)["activations"])
    sel = memory.device_memory(*SHAPE, recompute="selective", **opts)["activations"]
    assert sel == pytest.approx(CFG.layers * 34 * 2048 * CFG.hidden)


def test_context_parallel_splits_linear_terms_and_the_eager_square():
    one = memory.device_memory(*SHAPE, batch=1, seq=8192, attention="eager", dropout=True)
    cp = memory.device_memory(*SHAPE, batch=1, seq=8192, attention="eager", dropout=True, cp=4)
    assert cp["activations"] == pytest.approx(one["activations"] / 4)
    assert cp["logits"] == pytest.approx(one["logits"] / 4)


def test_zero_buffers_and_fragmentation():
    got = memory.device_memory(*SHAPE, batch=1, seq=2048, dp=8, zero_stage=2, accum_bytes=4,
                               bucket_bytes=5e8, workspace_bytes=1e8, fragmentation=0.15)
    assert got.model_states == pytest.approx(memory.zero_state_bytes(CFG.num_params(), 8, 2))
    assert got["accum_buffer"] == pytest.approx(4 * CFG.num_params() / 8)
    used = got.total - got["fragmentation"]
    assert (got.total - used) / got.total == pytest.approx(0.15)
    assert "total" in str(got)


@pytest.mark.parametrize("kwargs,name", [
    (dict(recompute="some"), "recompute"), (dict(recompute=0), "recompute"),
    (dict(fragmentation=1.0), "fragmentation"), (dict(pp=2, stage=2), "stage"),
    (dict(schedule="zigzag"), "schedule"), (dict(tp=0), "tp"), (dict(batch=-1), "batch")])
def test_bad_arguments_are_named(kwargs, name):
    args = dict(batch=1, seq=2048) | kwargs
    with pytest.raises(ValueError, match=name):
        memory.device_memory(*SHAPE, **args)


def test_crossover():
    assert memory.quadratic_crossover_seq(4096, 32, 11, 1) == 1408
    assert memory.quadratic_crossover_seq(4096, 32) == pytest.approx(870.4)


def _buffer_worker(rank, world_size):
    # DDP's buckets and FSDP2's all-gather / reduce-scatter buffers, read off the tensors
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dtbook.parallel.counting import CommCounter

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

    out = {}
    for as_view in (False, True):
        model = make().to(torch.bfloat16)
        ddp = DDP(model, gradient_as_bucket_view=as_view)
        buckets = []

        def hook(state, bucket):
            buckets.append(bucket.buffer())
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, hook)
        ddp(torch.randn(4, 32).bfloat16()).float().sum().backward()
        grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
        shared = grads & {b.untyped_storage().data_ptr() for b in buckets}
        # bytes of bucket storage that is not also a gradient's storage
        extra = sum(b.untyped_storage().nbytes() for b in buckets
                    if b.untyped_storage().data_ptr() not in shared)
        out[as_view] = dict(extra=extra, psi=sum(p.numel() for p in model.parameters()))
    model = make()
    units = [m for m in model if isinstance(m, nn.Linear)]
    for m in units:
        fully_shard(m)
    fully_shard(model)
    with CommCounter() as c:
        model(torch.randn(4, 32)).sum().backward()
    out["fsdp"] = dict(calls=[(k.op, k.nbytes) for k in c.calls],
                       units=[sum(p.numel() for p in m.parameters()) for m in units])
    return out


def test_forgotten_buffers_match_the_tensors():
    from dtbook.dist import launch

    for r in launch(_buffer_worker, 2, timeout=120):
        for as_view in (False, True):
            got = r[as_view]
            assert got["extra"] == memory.ddp_bucket_bytes(got["psi"], 2, as_view)
        gathers = sorted(n for op, n in r["fsdp"]["calls"] if "all_gather" in op)
        scatters = sorted(n for op, n in r["fsdp"]["calls"] if "reduce_scatter" in op)
        units = sorted(r["fsdp"]["units"])
        # one all-gather output per unit (forward and again in backward), one reduce-scatter input
        assert gathers == sorted(2 * [memory.sharded_buffer_bytes(u, 1, 0, 4, 4) for u in units])
        assert scatters == [memory.sharded_buffer_bytes(u, 0, 1, 4, 4) for u in units]
    u = sp.Symbol("u", positive=True)
    assert sp.simplify(memory.sharded_buffer_bytes(u) - 6 * u) == 0
