"""Input checks shared by the formula functions.

Numbers, NumPy arrays and SymPy expressions all pass through formula functions. Only
numeric inputs are checked: a symbol has no value to check, so the symbolic path is never
blocked. A bad number raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers

import numpy as np
import sympy as sp


def _numeric(name: str, value):
    """Return value as a float array for checking, or None when it is symbolic."""
    if isinstance(value, sp.Basic):
        return None if value.free_symbols else np.asarray(float(value))
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a number, got a boolean ({value!r})")
    if isinstance(value, numbers.Real):
        try:
            return np.asarray(float(value))
        except OverflowError:
            raise ValueError(f"{name} is too large for a floating-point number") from None
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        return value.astype(float)
    if isinstance(value, (list, tuple)):
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be numbers, got {value!r}") from None
        return arr
    raise ValueError(f"{name} must be a number, an array or a SymPy expression, "
                     f"got {type(value).__name__} ({value!r})")


def positive(name: str, value):
    """Check that every numeric entry of value is finite and > 0; return value unchanged."""
    arr = _numeric(name, value)
    if arr is not None and not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def nonnegative(name: str, value):
    """Check that every numeric entry of value is finite and >= 0; return value unchanged."""
    arr = _numeric(name, value)
    if arr is not None and not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def fraction(name: str, value):
    """Check that every numeric entry lies in (0, 1]: utilisations, efficiencies."""
    arr = _numeric(name, value)
    if arr is not None and not (np.all(np.isfinite(arr)) and np.all((arr > 0) & (arr <= 1))):
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
    return value


def count(name: str, value, minimum: int = 1):
    """Check an integer count (ranks, chunks, layers) of at least `minimum`."""
    arr = _numeric(name, value)
    if arr is not None and not (np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))
                                and np.all(arr >= minimum)):
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return value


# --------------------------------------------------------------------------- the contract
# Every public function of a formula module is wrapped by ``guard_module`` (one line at the
# end of the module), so what a reader can pass wrong is caught the same way everywhere,
# with the argument's name, before any arithmetic: None, a yes/no, a complex number, text,
# NaN, an infinity and a number too large for a float. Ranges (> 0, a fraction, a whole
# count) stay with each function, which knows them.

_TEXT_PARAMS = {"collective", "algorithm", "outer_algorithm", "kind", "device", "tier", "model",
                "schedule", "mode", "dtype", "recompute", "name", "gpu", "method", "reduce",
                "link", "level", "policy", "law", "which", "label", "unit",
                "placements"}


def _allows(param, kind) -> bool:
    default = param.default
    if default is not inspect.Parameter.empty:
        if kind is None and default is None:
            return True
        if kind is bool and isinstance(default, (bool, np.bool_)):
            return True
        if kind is str and isinstance(default, str):
            return True
        if kind == "inf" and isinstance(default, float) and math.isinf(default):
            return True
    if kind == "inf" and "intensity" in param.name:
        return True  # a kernel that moves no bytes has an infinite intensity
    annotation = str(param.annotation)
    if kind is str and (param.name in _TEXT_PARAMS or "str" in annotation):
        return True
    if kind is bool and "bool" in annotation:
        return True
    if kind is None and "None" in annotation:
        return True
    return False


def _check_argument(param, value):
    name = param.name
    if value is None:
        if not _allows(param, None):
            raise ValueError(f"{name} must be given a value, got None")
        return
    if isinstance(value, (bool, np.bool_)):
        if not _allows(param, bool):
            raise ValueError(f"{name} must be a number, got a yes/no ({value!r})")
        return
    if isinstance(value, str):
        if not _allows(param, str):
            raise ValueError(f"{name} must be a number, got the text {value!r}")
        return
    if isinstance(value, sp.Basic):
        if value.free_symbols:
            return
        if value.has(sp.nan, sp.zoo) or (value.is_number and value.is_real is False):
            raise ValueError(f"{name} must be a real number, got {value}")
        return
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got the complex number {value!r}")
    if isinstance(value, numbers.Integral):
        if abs(int(value)) > 1e308:
            raise ValueError(f"{name} is too large for a floating-point number: it has "
                             f"{len(str(abs(int(value))))} digits")
        return
    if isinstance(value, numbers.Real):
        if math.isnan(value) or (math.isinf(value) and not _allows(param, "inf")):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        return
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":  # an array of Python objects: None, complex, text inside
            _check_items(name, value.ravel().tolist())
            return
        if value.dtype.kind == "c":
            raise ValueError(f"{name} must be real numbers, got a complex array")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ValueError(f"{name} must be finite numbers, got an array with NaN or inf")
        return
    if isinstance(value, (list, tuple)):
        _check_items(name, value)


def _check_items(name, items):
    for item in items:
        if isinstance(item, (numbers.Number, np.ndarray, str, type(None))) \
                and not isinstance(item, (bool, np.bool_)):
            _check_argument(_Item(name), item)


class _Item:
    """An element of a list or tuple argument, checked under the argument's name."""

    def __init__(self, name):
        self.name = name
        self.default = inspect.Parameter.empty
        self.annotation = ""


def scalar(name: str, value):
    """Check that value is one number (or a symbol), not a list or an array of them: for the
    formulas that answer with one choice or solve for one point. Returns value unchanged."""
    if isinstance(value, (list, tuple, np.ndarray)) and np.ndim(value) > 0:
        raise ValueError(f"{name} must be a single number here, not several, got {value!r}")
    return value


def _as_array(value):
    """A flat list or tuple of real numbers as a float array (so ``[1e9, 2e9]`` works the way
    ``np.array([1e9, 2e9])`` does); anything else unchanged."""
    if (isinstance(value, (list, tuple)) and value
            and all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
                    for v in value)):
        return np.asarray(value, dtype=float)
    return value


def guarded(fn, arrays=False):
    """Wrap a formula function so every argument is checked by ``_check_argument`` first.
    With ``arrays=True`` a list or tuple of numbers is passed on as a NumPy array, so list
    arithmetic (``[a, b] * 3`` repeats, ``[a, b] / 2`` fails) never reaches the formula."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{fn.__name__}(): {e}") from None
        for name, value in bound.arguments.items():
            param = sig.parameters[name]
            if param.kind is param.VAR_POSITIONAL:
                for v in value:
                    _check_argument(param, v)
            elif param.kind is not param.VAR_KEYWORD:
                _check_argument(param, value)
                if arrays:
                    bound.arguments[name] = _as_array(value)
        if arrays:
            return fn(*bound.args, **bound.kwargs)
        return fn(*args, **kwargs)

    checked.__signature__ = sig
    checked.lists_as_arrays = arrays
    return checked


def guard_module(namespace: dict, exclude=(), arrays=False) -> None:
    """Wrap every public function defined in a formula module (call it at the module's end
    with ``globals()``); classes, imported names and the functions named in ``exclude``
    (those that run or write rather than compute) are left alone. ``arrays=True`` (a module
    none of whose functions takes a list for its own sake) turns lists and tuples of numbers
    into arrays before the formula sees them."""
    module = namespace["__name__"]
    for key, value in list(namespace.items()):
        if (inspect.isfunction(value) and not key.startswith("_") and key not in exclude
                and value.__module__ == module):
            namespace[key] = guarded(value, arrays=arrays)
