"""Activation recomputation: the compute it costs and the memory it saves (chapter 21).

The memory side lives in :mod:`dtbook.activations` (``checkpointed_activation_bytes``,
``optimal_checkpoint_interval``, selective recomputation in ``activation_breakdown``; the
√L/2 reduction is the first's value at the second); this module adds the compute side, and
:class:`LiveBytes`, which measures
the peak of the tensor bytes alive while a forward and backward pass run, so that a
checkpointed run can be compared with the formula on a real machine.

A training step costs a forward pass F and a backward pass of about 2F (one matmul for the
input gradient and one for the weight gradient per forward matmul). Recomputing a fraction
c of the forward adds cF to 3F: an overhead of c/3, at most a third.

:data:`RECOMPUTE` names the recomputation modes a layout chooses from, for the planner
(chapter 27) and the published runs (:mod:`dtbook.runs`) alike.

Formulas take numbers, NumPy arrays or SymPy symbols.
"""

from __future__ import annotations

from . import _validate as check

__all__ = ["RECOMPUTE", "recompute_overhead", "recompute_step_time", "LiveBytes"]

#: The recomputation modes (chapter 21): ``"none"``; Megatron's ``"selective"`` (the
#: attention core) and ``"full"`` (the whole forward of every layer), Korthikanti et al.
#: 2022; ``"selective-op"``, torchtitan's op-level selective checkpointing (every second
#: matmul again, the attention kernel's output saved). The order is the planner's code for
#: them (0 to 3, :mod:`dtbook.plan.terms`).
RECOMPUTE = ("none", "selective", "full", "selective-op")


def recompute_overhead(fraction, backward_ratio=2):
    """Extra compute of a step that recomputes ``fraction`` c of its forward pass, relative to
    the step without recomputation (chapter 21): c·F / (F + backward_ratio·F) = c/3 when
    backward costs twice the forward. Full recomputation (c = 1) costs a third more."""
    check.nonnegative("fraction", fraction)
    check.positive("backward_ratio", backward_ratio)
    return fraction / (1 + backward_ratio)


def recompute_step_time(step_time, fraction, backward_ratio=2):
    """Step time when a compute-bound step recomputes ``fraction`` of its forward pass
    (chapter 21): T · (1 + c/3); full recomputation turns T into 4T/3."""
    check.positive("step_time", step_time)
    return step_time * (1 + recompute_overhead(fraction, backward_ratio))


class LiveBytes:
    """Measure the bytes of tensors alive while ``fn`` runs, op by op (chapter 21).

    A ``TorchDispatchMode`` sees every tensor an aten operation returns, including those
    that autograd saves, those a checkpoint recomputes during backward, and gradients; it
    holds each storage by a weak reference, so a storage counts from the op that made it
    until it is freed. ``exclude`` (modules or tensors) names storages that are not
    activations, such as parameters; their gradients are left out after the run, when they
    are known. After ``with LiveBytes(exclude=model) as live: ...``, ``live.peak`` is the
    largest sum seen and ``live.trace`` the sum after each op.
    """

    def __init__(self, exclude=()):
        import torch
        self._torch = torch
        self._exclude = exclude if isinstance(exclude, (list, tuple)) else [exclude]
        self._steps = []       # after each op: the keys of the live storages
        self._sizes = {}       # storage key -> bytes
        self._live = {}        # storage address -> (key, weak reference), while alive
        self._mode = None

    def _tensors(self, obj):
        for t in self._torch.utils._pytree.tree_leaves(obj):
            if isinstance(t, self._torch.Tensor):
                yield t

    def _params(self):
        keys = set()
        for obj in self._exclude:
            ts = list(obj.parameters()) + list(obj.buffers()) if isinstance(obj, self._torch.nn.Module) else [obj]
            for t in ts:
                for u in (t, t.grad):
                    if u is not None and u.untyped_storage()._cdata in self._live:
                        keys.add(self._live[u.untyped_storage()._cdata][0])
        return keys

    def __enter__(self):
        from torch.multiprocessing.reductions import StorageWeakRef
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker._live = {c: kw for c, kw in tracker._live.items() if not kw[1].expired()}
                for t in tracker._tensors(out):
                    storage = t.untyped_storage()
                    if storage._cdata not in tracker._live:   # a new storage: a new key, since
                        key = len(tracker._sizes)            # a freed address may be reused
                        tracker._live[storage._cdata] = (key, StorageWeakRef(storage))
                        tracker._sizes[key] = storage.nbytes()
                tracker._steps.append(tuple(k for k, _ in tracker._live.values()))
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        # one last look: temporaries of the last op may have been freed since it returned
        self._live = {c: kw for c, kw in self._live.items() if not kw[1].expired()}
        self._steps.append(tuple(k for k, _ in self._live.values()))
        skip = self._params()
        self.trace = [sum(self._sizes[k] for k in keys if k not in skip) for keys in self._steps]
        self.peak = max(self.trace, default=0)
        # the storages alive when the block ended (what a forward pass leaves for backward)
        self.final = sorted((self._sizes[k] for k in (self._steps[-1] if self._steps else ())
                             if k not in skip), reverse=True)
        return False


check.guard_module(globals())  # DESIGN.md: formulas check their inputs
