"""Chapter 25: dtbook.parallel.axes — the (dp, cp, tp) block against one process on four
gloo ranks, its traffic against dtbook.axes, and the slicing and routing helpers against
direct constructions."""

import copy

import torch
import torch.nn.functional as F

from dtbook import axes, data_parallel
from dtbook import sequence_parallel as sq
from dtbook import tensor_parallel as tpf
from dtbook.parallel import axes as axes_run, tensor_parallel


def test_cut_shards_reassemble_the_whole_block():
    torch.manual_seed(0)
    full = tensor_parallel.Block(8, 4)
    shards = [axes_run.cut(full, r, 2) for r in range(2)]
    whole = dict(full.named_parameters())
    for name in ("attn.q.weight", "attn.k.bias", "mlp.fc1.weight"):      # split by rows
        assert torch.equal(torch.cat([s[name] for s in shards], 0), whole[name])
    for name in ("attn.o.weight", "mlp.fc2.weight"):                      # split by columns
        assert torch.equal(torch.cat([s[name] for s in shards], 1), whole[name])
    for name in ("ln1.weight", "attn.o.bias", "mlp.fc2.bias"):            # kept whole
        assert all(torch.equal(s[name], whole[name]) for s in shards)


def test_tokens_sent_counts_assignments_to_other_ranks():
    torch.manual_seed(0)
    idx = torch.randint(0, 8, (50, 2))
    for rank in range(4):
        by_loop = sum(1 for e in idx.reshape(-1).tolist() if e // 2 != rank)
        assert axes_run.tokens_sent(idx, rank, 8, 4) == by_loop


def _worker(rank, world_size, dims, full, x, target, y_ref, grad_block):
    import torch.nn.functional as F
    from dtbook.parallel import axes as axes_run
    from dtbook.parallel.counting import CommCounter

    g = axes_run.groups(dims)
    (dp_i, cp_i, tp_i), (dp, cp, tp) = g["coords"], dims
    b, s = x.shape[:2]
    rows = slice(dp_i * b // dp, (dp_i + 1) * b // dp)
    toks = slice(cp_i * s // cp, (cp_i + 1) * s // cp)
    model = axes_run.CPTPBlock(full, tp_i, tp, g["tp"][0], g["cp"][0])
    with CommCounter() as c:
        y = model(x[rows, toks])
        F.mse_loss(y, target[rows, toks]).backward()
    with CommCounter() as d:
        axes_run.average_gradients(model, g["grad"][0], dp * cp)
    want = axes_run.cut(grad_block, tp_i, tp)
    grad_err = max(float((p.grad - want[n]).abs().max()) for n, p in model.named_parameters())
    return dict(y_err=float((y - y_ref[rows, toks]).abs().max()), grad_err=grad_err,
                calls=c.counts(), bytes=c.bytes(), dp=d.bytes())


def test_block_on_four_ranks_equals_one_process_and_sends_what_axes_says():
    # (dp, cp, tp) = (1, 2, 2); the chapter runs (2, 2, 2) on eight ranks
    dims = (1, 2, 2)
    from dtbook.dist import launch

    torch.manual_seed(0)
    B, S, H, heads = 2, 8, 8, 2
    full = tensor_parallel.Block(H, heads)
    x, target = torch.randn(B, S, H), torch.randn(B, S, H)
    ref = copy.deepcopy(full)
    y_ref = ref(x)
    F.mse_loss(y_ref, target).backward()
    grad_block = copy.deepcopy(full)
    for g, r in zip(grad_block.parameters(), ref.parameters()):
        g.data = r.grad.clone()
    dp, cp, tp = dims
    out = launch(_worker, 4, dims, full, x, target, y_ref.detach(), grad_block, timeout=180)
    psi = sum(p.numel() for p in full.parameters())
    for r in out:
        assert r["y_err"] < 1e-5 and r["grad_err"] < 1e-5
        # autograd keeps every K/V block the ring received: backward sends only dK, dV
        assert r["bytes"].get("isend", 0) == axes.cp_ring_bytes(B // dp, S, H, cp, tp=tp,
                                                                value_bytes=4, kv_saved=True)
        ring = sq.ring_kv_transfers(cp, kv_saved=True)
        assert r["calls"] == {"all_reduce": tpf.allreduces_per_layer(), "isend": ring,
                              "irecv": ring}
        assert r["bytes"]["all_reduce"] == 4 * tpf.activation_bytes(B // dp, S / cp, H,
                                                                    bytes_per_element=4)
        assert r["dp"]["all_reduce"] == data_parallel.gradient_buffer_bytes(
            psi, tp=tp, grad_bytes=4, replicated=6 * H)
