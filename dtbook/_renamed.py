"""Old module names kept importable after the renames of the naming rule (package notes).

``import dtbook.parallel.tensor`` (or ``from dtbook.parallel import tensor``) still works, warns
with a ``DeprecationWarning`` naming the new module, and gives that module itself, so code a
reader wrote against an earlier build keeps running. ``dtbook.plan.estimate`` (the module, now
``dtbook.plan.model``) has no alias: the name is the planner's function, and importing a module
under it would replace that function on the package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

RENAMED = {
    "dtbook.estimate": "dtbook.fermi",
    "dtbook.parallel.data": "dtbook.parallel.data_parallel",
    "dtbook.parallel.tensor": "dtbook.parallel.tensor_parallel",
    "dtbook.parallel.pipeline": "dtbook.parallel.pipeline_parallel",
    "dtbook.parallel.sequence": "dtbook.parallel.sequence_parallel",
    "dtbook.parallel.compress": "dtbook.parallel.compression",
    "dtbook.parallel.expert": "dtbook.parallel.moe",
    "dtbook.parallel.fault_tolerant": "dtbook.parallel.resilience",
    "dtbook.parallel.three_d": "dtbook.parallel.composition",
    "dtbook.parallel.four_d": "dtbook.parallel.axes",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the new module (the same object, not a copy)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in RENAMED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = RENAMED[spec.name]
        warnings.warn(f"{spec.name} is now {new}; the old name will be removed",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass                         # the new module ran when it was imported


def install():
    """Put the alias finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
