"""Activation memory: the bytes a transformer layer keeps for its backward pass.

Chapter 06 derives the count term by term for a GPT-style layer (LayerNorm, multi-head
attention, a GELU MLP of width 4h, dropout after the attention probabilities, after the
attention projection and after the MLP), with 16-bit activations and 1-byte dropout masks,
no recomputation and no tensor or sequence parallelism. Per layer, with s the sequence
length, b the micro-batch, h the hidden size and a the number of heads,

    M_layer = s·b·h·(34 + 5·a·s/h) bytes,

the form of Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (2022). 34·sbh is what the layer's linear algebra keeps (inputs of the norms and
matmuls, the GELU input, two 1-byte masks); 5·a·s²·b is the attention matrix: the softmax
output (2 bytes), its dropout mask (1) and the dropped-out probabilities (2).

:func:`activation_breakdown` keeps every term separate, with the storage choices as
arguments (bytes per value, bytes per mask, dropout or not, eager or flash attention, norm
statistics, tensor and sequence parallelism, recomputation), so the same function predicts
what a real framework saves. :func:`saved_tensors` records what autograd actually saves
during a forward pass, through ``torch.autograd.graph.saved_tensors_hooks``; chapter 06
checks the first against the second, tensor by tensor.

Formulas take numbers, NumPy arrays or SymPy symbols. Results are bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from . import _validate as check
from .recompute import RECOMPUTE as _MODES

__all__ = [
    "attention_scores_bytes", "activation_breakdown", "layer_activation_bytes",
    "model_activation_bytes", "alternate_matmul_saved_bytes",
    "checkpointed_activation_bytes", "optimal_checkpoint_interval",
    "saved_tensors", "SavedTensor", "SavedTensors", "RECOMPUTE", "ATTENTION", "QUADRATIC_TERMS",
]

# the layer-granular modes the breakdown models: the planner's first three
# (dtbook.recompute.RECOMPUTE; its fourth, op-level, is alternate_matmul_saved_bytes)
RECOMPUTE = _MODES[:3]
ATTENTION = ("eager", "flash")
#: The keys of :func:`activation_breakdown` that grow with s² (the attention matrix).
QUADRATIC_TERMS = ("softmax_output", "attn_dropout_mask", "attn_dropout_output")


def attention_scores_bytes(batch, seq, heads, *, value_bytes=2):
    """The attention matrix of one layer, materialised: b·a·s²·value_bytes bytes (chapter 06;
    chapter 17 takes it to long contexts). At s = 128K, b = 1, a = 32 in fp16 this is
    about 1.1 TB: the s² term no device holds. :func:`activation_breakdown` keeps it up to
    three times (softmax output, dropout mask, dropped-out probabilities)."""
    check.positive("batch", batch)
    check.positive("seq", seq)
    check.positive("heads", heads)
    check.positive("value_bytes", value_bytes)
    return batch * heads * seq**2 * value_bytes


def activation_breakdown(batch, seq, hidden, heads, ffn_hidden=None, *, value_bytes=2,
                         mask_bytes=1, dropout=True, attention="eager", norm_stat_bytes=0,
                         lse_bytes=4, tp=1, sequence_parallel=False, recompute="none"):
    """Bytes one transformer layer keeps for backward, term by term, as a dict (chapter 06).

    Shapes: ``batch`` b sequences of ``seq`` s tokens, ``hidden`` h, ``heads`` a, MLP width
    ``ffn_hidden`` (default 4h). With the defaults the values add up to
    s·b·h·(34 + 5as/h), Korthikanti et al.'s count; the keys say which tensor each is:

    - ``ln1_input``, ``ln2_input``: the inputs of the two LayerNorms (value_bytes·sbh each)
    - ``qkv_input``: the first norm's output, input of the Q, K, V projection
    - ``q``, ``k``, ``v``: the projections, kept for QKᵀ and for the product with V
    - ``softmax_output``: the attention probabilities, value_bytes·a·s²·b
    - ``attn_dropout_mask``, ``attn_dropout_output``: dropout on the probabilities; the
      output is what the product with V keeps (mask_bytes and value_bytes per element)
    - ``proj_input``: the merged heads, input of the output projection
    - ``proj_dropout_mask``, ``mlp_dropout_mask``: the two mask_bytes·sbh residual dropouts
    - ``fc1_input``: the second norm's output; ``gelu_input``: the first MLP matmul's output;
      ``fc2_input``: the GELU's output (value_bytes·s·b·ffn each of the last two)

    Storage choices, so the same count predicts a real framework:

    - ``dropout=False``: no masks, and the product with V keeps the softmax output itself,
      so ``attn_dropout_output`` disappears too (one tensor saved twice is stored once).
    - ``mask_bytes``: 1 for a boolean mask; PyTorch's CPU dropout keeps a scaled noise tensor
      in the activation dtype instead (2 bytes in 16-bit).
    - ``attention="flash"``: a fused kernel keeps no s×s matrix. It keeps Q, K, V, its
      output and a log-sum-exp per head and token (``logsumexp``, lse_bytes·a·s·b, fp32),
      and regenerates any attention-dropout mask from the RNG state. Its output is laid
      out (b, s, a, d), so merging the heads is a view and the output *is* the projection's
      input (``proj_input``), counted once; PyTorch's CPU kernel behaves so.
    - ``norm_stat_bytes``: LayerNorm also keeps a mean and a 1/σ per token
      (``ln1_mean``, ``ln1_rstd``, ``ln2_mean``, ``ln2_rstd``: norm_stat_bytes·s·b each);
      the formula leaves them out (0).
    - ``tp``, ``sequence_parallel``: with tensor parallelism over t devices, the terms inside
      the column- and row-parallel regions are split t ways (Q, K, V, the attention matrix,
      the projection input, the MLP's 4h-wide tensors); the norm inputs, the norm output
      that feeds the projections and the residual dropout masks stay whole unless sequence
      parallelism splits them along s as well. Per device this gives
      sbh(10 + 24/t + 5as/(ht)) without and sbh(34 + 5as/h)/t with sequence parallelism.
    - ``recompute="selective"`` drops the attention-matrix terms (recomputed in backward);
      ``"full"`` keeps only the layer's input, 2·sbh (split t ways under sequence parallelism).
    """
    for name, value in (("batch", batch), ("seq", seq), ("hidden", hidden), ("heads", heads)):
        check.positive(name, value)
    if ffn_hidden is None:
        ffn_hidden = 4 * hidden
    check.positive("ffn_hidden", ffn_hidden)
    check.positive("value_bytes", value_bytes)
    check.nonnegative("mask_bytes", mask_bytes)
    check.nonnegative("norm_stat_bytes", norm_stat_bytes)
    check.positive("lse_bytes", lse_bytes)
    check.positive("tp", tp)
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    if not isinstance(dropout, (bool, np.bool_)):
        raise ValueError(f"dropout must be True or False, got {dropout!r}")
    if not isinstance(sequence_parallel, (bool, np.bool_)):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")

    s, b, h, a, f, v = seq, batch, hidden, heads, ffn_hidden, value_bytes
    sbh, sbf = s * b * h, s * b * f
    masks = mask_bytes if dropout else 0
    split = tp  # tensors inside the tensor-parallel regions
    whole = tp if sequence_parallel else 1  # tensors outside them (replicated without SP)

    if recompute == "full":
        return {"layer_input": v * sbh / whole}

    terms = {"ln1_input": v * sbh / whole}
    if norm_stat_bytes:
        terms["ln1_mean"] = terms["ln1_rstd"] = norm_stat_bytes * s * b / whole
    terms.update({
        "qkv_input": v * sbh / whole,
        "q": v * sbh / split,
        "k": v * sbh / split,
        "v": v * sbh / split,
    })
    if attention == "flash":
        terms["logsumexp"] = lse_bytes * a * s * b / split
    elif recompute != "selective":
        scores = attention_scores_bytes(b, s, a, value_bytes=v) / split
        terms["softmax_output"] = scores
        if dropout:
            terms["attn_dropout_mask"] = scores / v * masks
            terms["attn_dropout_output"] = scores
    terms["proj_input"] = v * sbh / split
    if dropout:
        terms["proj_dropout_mask"] = masks * sbh / whole
    terms["ln2_input"] = v * sbh / whole
    if norm_stat_bytes:
        terms["ln2_mean"] = terms["ln2_rstd"] = norm_stat_bytes * s * b / whole
    terms.update({
        "fc1_input": v * sbh / whole,
        "gelu_input": v * sbf / split,
        "fc2_input": v * sbf / split,
    })
    if dropout:
        terms["mlp_dropout_mask"] = masks * sbh / whole
    return terms


def alternate_matmul_saved_bytes(tokens, matmul_widths, *, block_input, attention_output,
                                 attention_stats=0, value_bytes=2, stat_bytes=4):
    """Bytes one block keeps for backward under op-level selective checkpointing as PyTorch's
    torchtitan runs it (``selective_ac_option = "op"``, torchtitan 9dec370,
    ``parallelize_llama.py``): its policy saves the output of the first, third, fifth, ...
    matrix multiply (``aten.mm``) in the order the block's forward runs them, and the
    attention kernel's output and log-sum-exp; everything else (the other matmuls, norms,
    RoPE, the MLP's activation) is recomputed in backward from the block's input, which the
    checkpoint keeps (chapter 21).

    Per device: ``tokens`` the tokens of the micro-batch it holds, ``matmul_widths`` each
    matmul's output width in forward order, ``block_input`` and ``attention_output`` the
    widths of those tensors, ``attention_stats`` the log-sum-exp values per token (one per
    head) in ``stat_bytes``: value_bytes·tokens·(block_input + Σ widths[0::2] +
    attention_output) + stat_bytes·tokens·attention_stats."""
    check.positive("tokens", tokens)
    widths = list(matmul_widths)
    if not widths:
        raise ValueError("matmul_widths must list the block's matmul output widths, got none")
    for i, w in enumerate(widths):
        check.positive(f"matmul_widths[{i}]", w)
    check.positive("block_input", block_input)
    check.positive("attention_output", attention_output)
    check.nonnegative("attention_stats", attention_stats)
    check.positive("value_bytes", value_bytes)
    check.positive("stat_bytes", stat_bytes)
    kept = block_input + sum(widths[0::2]) + attention_output
    return value_bytes * tokens * kept + stat_bytes * tokens * attention_stats


def layer_activation_bytes(batch, seq, hidden, heads, ffn_hidden=None, **options):
    """Bytes one layer keeps for backward: the sum of :func:`activation_breakdown`
    (chapter 06). With the defaults, s·b·h·(34 + 5·a·s/h):
    ``layer_activation_bytes(8, 4096, 5120, 40)`` is 32.5 GB (coefficient 194).
    Keyword options as in :func:`activation_breakdown` (tp, sequence_parallel, recompute, ...).
    """
    terms = activation_breakdown(batch, seq, hidden, heads, ffn_hidden, **options)
    return sum(terms.values())


def model_activation_bytes(layers, batch, seq, hidden, heads, ffn_hidden=None, **options):
    """L times :func:`layer_activation_bytes`: every layer's activations held at once, as at
    the end of a forward pass without checkpointing (chapter 06). Embeddings, the final norm
    and the logits are not included."""
    check.count("layers", layers)
    return layers * layer_activation_bytes(batch, seq, hidden, heads, ffn_hidden, **options)


def checkpointed_activation_bytes(layers, layer_bytes, interval, boundary_bytes=None):
    """Peak activation bytes when only every ``interval``-th layer's input is kept and each
    block of k layers is recomputed during backward (chapter 06; chapter 21 goes further):

        M = (L/k) · boundary + k · M_layer.

    ``boundary_bytes`` is what a kept layer input costs (2·sbh in 16-bit); leaving it out
    uses ``layer_bytes`` there too, the conservative form (L/k + k) · M_layer.
    """
    check.positive("layers", layers)   # a pipeline chunk's share L/(p·v) may be fractional
    check.nonnegative("layer_bytes", layer_bytes)
    check.positive("interval", interval)
    if boundary_bytes is None:
        boundary_bytes = layer_bytes
    check.nonnegative("boundary_bytes", boundary_bytes)
    return layers / interval * boundary_bytes + interval * layer_bytes


def optimal_checkpoint_interval(layers, layer_bytes=1, boundary_bytes=None):
    """The k that minimises :func:`checkpointed_activation_bytes`: k* = √(L · boundary /
    M_layer), which is √L in the conservative form (chapter 06). A real number: round it."""
    check.count("layers", layers)
    check.positive("layer_bytes", layer_bytes)
    if boundary_bytes is None:
        boundary_bytes = layer_bytes
    check.positive("boundary_bytes", boundary_bytes)
    ratio = layers * boundary_bytes / layer_bytes
    return sp.sqrt(ratio) if isinstance(ratio, sp.Basic) else np.sqrt(ratio)


# --------------------------------------------------------------------------------------
# Measuring: what autograd saves
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SavedTensor:
    """One tensor autograd packed for backward: what it is and where its bytes live."""

    shape: tuple
    dtype: str
    nbytes: int            # bytes of this view: numel × element size
    storage: int           # data pointer of the underlying storage (shared by views)
    storage_nbytes: int    # bytes of that whole storage: what stays allocated
    parameter: bool        # True when the storage is a parameter's or a buffer's
    saved_by: tuple = ()   # (autograd node, attribute) pairs that hold this view, one per
                           # node, e.g. ("SoftmaxBackward0", "result"); empty if not found
    view: tuple = ()       # (storage offset, shape, strides, dtype): which view of the storage


@dataclass
class SavedTensors:
    """What :func:`saved_tensors` recorded, with the sums chapter 06 needs."""

    records: list = field(default_factory=list)
    output: object = None

    def unique(self, include_parameters: bool = False) -> list:
        """One record per storage, first seen first: a tensor saved twice (the softmax
        output kept by the softmax and by the next matmul), or two views of one buffer
        (Q, K and V as slices of one projection), are stored once and counted once.
        Parameters and buffers are left out unless ``include_parameters``."""
        first, views = {}, {}
        for r in self.records:
            if r.parameter and not include_parameters:
                continue
            first.setdefault(r.storage, r)
            # every node that holds a view of this storage, each view listed once
            views.setdefault(r.storage, {}).setdefault(r.view, r.saved_by)
        return [SavedTensor(r.shape, r.dtype, r.nbytes, r.storage, r.storage_nbytes,
                            r.parameter, sum(views[key].values(), ()), r.view)
                for key, r in first.items()]

    def total_bytes(self, include_parameters: bool = False) -> int:
        """Bytes autograd keeps alive for backward: each distinct storage once."""
        return int(sum(r.storage_nbytes for r in self.unique(include_parameters)))

    def naive_bytes(self, include_parameters: bool = False) -> int:
        """The sum over every save, duplicates included: what a careless count reports."""
        return int(sum(r.nbytes for r in self.records if include_parameters or not r.parameter))

    def table(self, include_parameters: bool = False) -> list[dict]:
        """The distinct storages as rows (dicts), for printing or a DataFrame."""
        def holders(pairs):
            counts = Counter(f"{n}.{a}" for n, a in pairs)
            return ", ".join(k if c == 1 else f"{k} ×{c}" for k, c in counts.items()) or "?"
        return [{"saved by": holders(r.saved_by), "shape": r.shape, "dtype": r.dtype,
                 "bytes": r.storage_nbytes}
                for r in self.unique(include_parameters)]


def _view(t):
    """A tensor view's place in its storage: offset, shape, strides, dtype."""
    return (t.storage_offset(), tuple(t.shape), t.stride(), str(t.dtype).replace("torch.", ""))


def _key(t):
    """Identify a tensor view by its storage and its place in it."""
    return (t.untyped_storage().data_ptr(),) + _view(t)


def _graph_names(outputs, packed_keys):
    """Map a saved view's key -> {(node, attribute): (node name, attribute)}, walking the
    autograd graph from the outputs. Nodes are told apart by identity, so three projections
    that keep the same input appear three times."""
    import torch

    names: dict[tuple, dict] = {}
    stack = [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen = set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except Exception:  # a freed or inaccessible save: skip it
                continue
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor) and _key(t) in packed_keys:
                    holders = names.setdefault(_key(t), {})
                    holders.setdefault((id(node), attr), (node.name(), attr[len("_saved_"):]))
        stack.extend(nxt for nxt, _ in node.next_functions)
    return names


def saved_tensors(fn, *args, exclude=(), **kwargs) -> SavedTensors:
    """Run ``fn(*args, **kwargs)`` and record every tensor autograd saves for backward
    (chapter 06).

    Uses ``torch.autograd.graph.saved_tensors_hooks``: its pack hook sees each tensor an
    operation saves, at the moment it saves it. Storages of parameters and buffers (of
    ``fn`` when it is a module, and of any modules or tensors in ``exclude``) are flagged
    ``parameter=True`` so that the activation count can leave them out. After the forward
    pass the autograd graph is walked from the outputs to name the node that holds each
    tensor. Returns a :class:`SavedTensors`; ``.total_bytes()`` counts each storage once.
    Nothing is run backward; the records hold references, so use small shapes.
    """
    import torch

    protected = set()

    def protect(obj):
        if isinstance(obj, torch.nn.Module):
            for t in list(obj.parameters()) + list(obj.buffers()):
                protected.add(t.untyped_storage().data_ptr())
        elif isinstance(obj, torch.Tensor):
            protected.add(obj.untyped_storage().data_ptr())
        elif isinstance(obj, (list, tuple)):
            for o in obj:
                protect(o)

    protect(fn)
    protect(list(exclude) if isinstance(exclude, (list, tuple)) else [exclude])

    packed: list = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = fn(*args, **kwargs)

    outputs = output if isinstance(output, (tuple, list)) else [output]
    names = _graph_names(outputs, {_key(t) for t in packed})
    records = []
    for t in packed:
        storage = t.untyped_storage()
        records.append(SavedTensor(
            shape=tuple(t.shape), dtype=str(t.dtype).replace("torch.", ""),
            nbytes=t.numel() * t.element_size(), storage=storage.data_ptr(),
            storage_nbytes=storage.nbytes(), parameter=storage.data_ptr() in protected,
            saved_by=tuple(names.get(_key(t), {}).values()), view=_view(t)))
    return SavedTensors(records, output)


check.guard_module(globals(), exclude={"saved_tensors"})  # DESIGN.md: formulas check
