"""Count what a rank communicates: calls and bytes per collective (chapter 14 on).

A chapter asserts the communication of a strategy against its formula, and counting is exact
where timing is not. :class:`CommCounter` is a context manager used inside a worker. It sees

* every call of ``torch.distributed``'s collectives and point-to-point functions made through
  the module (``dist.all_reduce(...)``, as hand-written code and FSDP2 do), by wrapping them
  for the duration of the block;
* every functional collective (``torch.ops._c10d_functional``), which is what DTensor and
  tensor parallelism issue, through a ``TorchDispatchMode``.

DistributedDataParallel reduces gradients from C++ and is seen by neither: count it with a
communication hook (chapter 14 shows how).

Bytes are the *n* of the α-β formulas of chapter 04: the size of the whole logical buffer
the operation acts on. For an all-reduce, broadcast or all-to-all that is the tensor passed
in; for an all-gather the gathered output; for a reduce-scatter the unscattered input; for a
send or receive the message.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

__all__ = ["CommCounter", "Call"]

# torch.distributed function -> which argument holds the buffer whose size is n
_MODULE_OPS = {
    "all_reduce": 0, "broadcast": 0, "reduce": 0,
    "all_gather_into_tensor": 0, "all_gather_single": 0, "all_gather": 0,
    "reduce_scatter_tensor": 1, "reduce_scatter_single": 1, "reduce_scatter": 1,
    "all_to_all_single": 1, "all_to_all": 1,
    "send": 0, "recv": 0, "isend": 0, "irecv": 0,
    "barrier": None,
}
# functional op name -> (our name, index of the argument whose size is n, scale by group size)
_FUNCTIONAL_OPS = {
    "all_reduce": ("all_reduce", 0, False),
    "all_reduce_coalesced": ("all_reduce", 0, False),
    "all_gather_into_tensor": ("all_gather_into_tensor", 0, True),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", 0, False),
    "all_to_all_single": ("all_to_all_single", 0, False),
    "broadcast": ("broadcast", 0, False),
}


@dataclass(frozen=True)
class Call:
    op: str
    nbytes: int
    source: str  # "torch.distributed" or "functional"


def _nbytes(x) -> int:
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class CommCounter:
    """Record every collective and point-to-point call made inside the ``with`` block.

    ``calls`` is the list of :class:`Call` in the order they were issued; ``counts()`` and
    ``bytes()`` add them up per operation. Use one counter per block you want to measure;
    nesting is not supported. Chapter 14 on.

    ``functional=False`` counts the ``torch.distributed`` calls only and skips the dispatch
    mode, for code that issues no functional collectives: the first dispatch mode a process
    enters imports torch's compiler stack, seconds on a busy machine (chapter 30).
    """

    def __init__(self, functional=True):
        self.functional = functional
        self.calls: list[Call] = []
        self._saved = []
        self._mode = None
        self._depth = 0  # >0 inside a counted call: torch's recv calls irecv, count it once

    # ---------------------------------------------------------------- results
    def counts(self) -> dict:
        return dict(Counter(c.op for c in self.calls))

    def bytes(self) -> dict:
        out = Counter()
        for c in self.calls:
            out[c.op] += c.nbytes
        return dict(out)

    def total_bytes(self) -> int:
        return sum(c.nbytes for c in self.calls)

    def __repr__(self):
        return f"<CommCounter {self.counts()} {self.bytes()}>"

    # ---------------------------------------------------------------- patching
    def _wrap(self, name, fn, arg):
        def counted(*args, **kwargs):
            if self._depth:  # called by another counted function: already counted
                return fn(*args, **kwargs)
            if arg is None:
                n = 0
            elif len(args) > arg:
                n = _nbytes(args[arg])
            else:  # passed by keyword: take the first tensor-like keyword argument in order
                n = next((_nbytes(v) for k, v in kwargs.items()
                          if k in ("tensor", "output_tensor", "tensor_list", "output",
                                   "input", "input_tensor")
                          and (arg == 0 or k.startswith("input"))), 0)
            # the *_single spellings are torch 2.13's new names for *_tensor: one name each
            op = {"all_gather_single": "all_gather_into_tensor",
                  "reduce_scatter_single": "reduce_scatter_tensor"}.get(name, name)
            self.calls.append(Call(op, n, "torch.distributed"))
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1

        counted.__wrapped__ = fn
        return counted

    def __enter__(self):
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        wrappers = {}  # one wrapper per function: dist.isend is c10d.isend, and P2POp checks it
        for module in (dist, c10d):
            for name, arg in _MODULE_OPS.items():
                fn = getattr(module, name, None)
                if fn is not None:
                    self._saved.append((module, name, fn))
                    if id(fn) not in wrappers:
                        wrappers[id(fn)] = self._wrap(name, fn, arg)
                    setattr(module, name, wrappers[id(fn)])
        if self.functional:
            self._mode = _FunctionalCounter(self)
            self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        for module, name, fn in reversed(self._saved):
            setattr(module, name, fn)
        self._saved.clear()
        return False


def _functional_counter_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        def __init__(self, counter):
            super().__init__()
            self.counter = counter

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ns = func.namespace
            if ns in ("_c10d_functional", "_c10d_functional_autograd", "c10d_functional"):
                name = func._opname
                if name in _FUNCTIONAL_OPS:
                    op, arg, scale = _FUNCTIONAL_OPS[name]
                    n = _nbytes(args[arg])
                    if scale:  # the gathered output is group size times the input
                        n *= int(args[1])
                    self.counter.calls.append(Call(op, n, "functional"))
            return func(*args, **kwargs)

    return _Mode


def _FunctionalCounter(counter):
    return _functional_counter_class()(counter)
