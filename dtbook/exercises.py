"""The exercise checker: ``check("04.1", answer)`` grades what a reader types.

Each chapter keeps its exercises in ``exercises/NN.py`` at the repository root (or in the
folder named by ``$DTBOOK_EXERCISES``), one decorated function per exercise::

    @exercise("04.1", prompt="...", unit="ms", rtol=0.01, hint="...", book_answer="399 ms")
    def _():
        return comm.allreduce_time(10 * GB, 256, 2 * us, 50 * GB)   # SI units: seconds

A solution returns SI base units (or a SymPy expression, a choice, a bool, or a tuple or dict
of these); ``unit`` is what bare numbers typed by the reader mean and how answers print.
A reader's answer may be a number, a quantity string ("0.4 s", "193.7 GiB"), a SymPy
expression or a string of one, and a wrong answer is told how it is off where that can be
told. Nothing a reader passes makes ``check`` raise.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sympy as sp

from dtbook import symbolic
from dtbook.answers import (
    COMPUTED_NUMBERS,
    AnswerError,
    _ARITHMETIC,
    _DIMS,
    _SI_UNIT,
    _TOO_BIG,
    _Typed,
    _WrongDimension,
    _a,
    _ascii,
    _bounded_expr,
    _check_size,
    _check_values,
    _computed_number,
    _diagnose,
    _fmt,
    _number,
    _round_sf,
    _show,
    _sig_figs,
    _split_tuple,
    _transliterate,
    _unit_info)
from dtbook.units import Quantity, parse_quantity

__all__ = ["exercise", "check", "get", "registry", "Exercise", "Result", "AnswerError",
           "PRECISION_POLICY"]

PRECISION_POLICY = (
    "A number is graded right when it matches the reference to the significant figures you "
    "typed, with at least two (for a reference of 3.834 GB, \"3.8 GB\" is right and \"4 GB\" "
    "is too coarse), or when it lies within the exercise's tolerance, 1% unless it says "
    "otherwise.")

_KINDS = (None, "number", "expr", "choice", "bool")
_YES, _NO = {"yes", "y", "true", "t"}, {"no", "n", "false", "f"}
_ID = re.compile(r"\d{1,3}[a-z]?\.\d{1,3}")


class UnknownExercise(KeyError, ValueError):
    """No exercise has this id; the message lists the nearby ones."""

    def __str__(self):
        return str(self.args[0])


@dataclass
class Result:
    correct: bool
    message: str
    status: str  # "correct", "wrong", "invalid" (unreadable) or "unanswered"
    parts: tuple = ()  # (label, status) of each graded leaf: "#2", "a.b", or "" for one value

    def __str__(self):
        return self.message


def _leaves(tree):
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [x for v in tree for x in _leaves(v)]
    return [tree]


def _unanswered(x) -> bool:
    return x is None or x is Ellipsis


@dataclass(eq=False)
class Exercise:
    id: str
    prompt: str
    fn: object
    unit: object = ""
    rtol: float = 0.01
    hint: str = ""
    book_answer: object = None
    book_note: str = ""
    kind: str | None = None
    choices: tuple = ()
    symbols: object = None
    atol: float = 0.0
    source: Path | None = None

    def __repr__(self):
        return f"<Exercise {self.id}: {self.prompt[:60]!r}>"

    def solution(self):
        """The reference answer, computed by the solution function (SI units); cached."""
        if not hasattr(self, "_solution"):
            self._solution = self.fn()
        return self._solution

    def _kind(self, ref) -> str:
        if self.kind:
            return self.kind
        if isinstance(ref, (bool, np.bool_)):
            return "bool"
        if isinstance(ref, str):
            return "choice"
        return "expr" if isinstance(ref, sp.Basic) and ref.free_symbols else "number"

    def _symbols(self, ref) -> dict:
        names = self.symbols
        if names is None:
            names = [s.name for s in sp.sympify(ref).free_symbols]
        elif isinstance(names, str):
            names = names.replace(",", " ").split()
        house = {s.name: s for s in vars(symbolic).values() if isinstance(s, sp.Symbol)}
        names = [getattr(n, "name", n) for n in names]
        return {n: house.get(n, sp.Symbol(n, positive=True)) for n in names}

    def _map(self, fn, ref, unit):
        """Apply fn(leaf, unit) over the solution's structure."""
        if isinstance(ref, dict):
            return {k: self._map(fn, v, unit[k] if isinstance(unit, dict) else unit)
                    for k, v in ref.items()}
        if isinstance(ref, (tuple, list)):
            units = unit if isinstance(unit, (tuple, list)) else [unit] * len(ref)
            return tuple(self._map(fn, v, u) for v, u in zip(ref, units))
        return fn(ref, unit)

    def solution_in_unit(self, text: bool = False):
        """The reference as a reader would type it: numbers in the display unit (with
        ``text=True``, strings with the unit, such as "399 ms"), same structure."""
        def leaf(ref, unit):
            kind = self._kind(ref)
            if kind == "number":
                return _fmt(float(ref), unit) if text else float(ref) / _unit_info(unit)[0]
            if kind == "bool":
                return ("yes" if ref else "no") if text else bool(ref)
            return str(ref) if text else ref
        return self._map(leaf, self.solution(), self.unit)

    def solution_display(self) -> str:
        """The reference in the display unit, as one string: "399 ms", "(2 GB, 1.5 s)"."""
        shown = self.solution_in_unit(text=True)
        if isinstance(shown, dict):
            return "{" + ", ".join(f"{k}: {v}" for k, v in shown.items()) + "}"
        return f"({', '.join(shown)})" if isinstance(shown, tuple) else shown

    def _grade_tree(self, ref, ans, unit, label):
        if isinstance(ref, dict):
            if not isinstance(ans, dict):
                raise AnswerError(f"{label or 'the answer'} should be a dict with keys "
                                  f"{list(ref)}, got {_a(ans)}")
            missing, extra = [k for k in ref if k not in ans], [k for k in ans if k not in ref]
            if missing or extra:
                raise AnswerError(f"{label or 'the answer'} should have the keys {list(ref)}"
                                  + (f"; missing {missing}" if missing else "")
                                  + (f"; unexpected {extra}" if extra else ""))
            return [p for k in ref for p in self._grade_tree(
                ref[k], ans[k], unit[k] if isinstance(unit, dict) else unit,
                f"{label}.{k}" if label else str(k))]
        if isinstance(ref, (tuple, list)):
            if getattr(ans, "ndim", None) == 1 and hasattr(ans, "tolist"):  # a NumPy array
                ans = tuple(ans.tolist())
            if isinstance(ans, str) and len(ref) > 1:  # "79.2%, 100.8 ms": one string
                parts = _split_tuple(ans, len(ref))
                if parts is None:
                    raise AnswerError(f"{label or 'the answer'} should be a tuple of {len(ref)} "
                                      f"values; {_show(ans)} does not split into {len(ref)} "
                                      "parts at commas or semicolons")
                ans = tuple(parts)
            if not isinstance(ans, (tuple, list)) or len(ans) != len(ref):
                got = (f"{len(ans)} value{'s' * (len(ans) != 1)}"
                       if isinstance(ans, (tuple, list)) else _a(ans))
                raise AnswerError(f"{label or 'the answer'} should be a tuple of {len(ref)} "
                                  f"values, got {got}")
            units = unit if isinstance(unit, (tuple, list)) else [unit] * len(ref)
            return [p for i, (r, a, u) in enumerate(zip(ref, ans, units))
                    for p in self._grade_tree(r, a, u, f"{label}#{i + 1}")]
        if _unanswered(ans):
            return [(label, "unanswered", "not answered yet")]
        kind = self._kind(ref)
        if kind == "number":  # an authoring error here should be loud, not blamed on the reader
            try:
                assert math.isfinite(float(ref))
            except (TypeError, ValueError, AssertionError):
                raise TypeError(f"exercise {self.id}: the solution returned {ref!r}, "
                                "not a finite number") from None
        try:
            status, text = getattr(self, f"_grade_{kind}")(ref, ans, unit)
        except AnswerError as e:
            status, text = "invalid", str(e)
        except Exception:  # an odd object a reader passed: explain, never raise
            status, text = "invalid", f"could not read {_show(ans)} as this answer"
        return [(label, status, text)]

    def _read_number(self, ans, unit) -> _Typed:
        """A reader's numeric answer in SI units, with what was typed. Raises AnswerError
        when it cannot be read, and _WrongDimension when it is a quantity of another kind."""
        scale, dim = _unit_info(unit)
        if isinstance(ans, Quantity):  # parse_quantity's result, passed on
            ans = f"{ans.value!r} {_SI_UNIT.get(ans.dimension, ('',))[0]}".strip()
        if isinstance(ans, str):
            text = (ans.strip().lstrip("~≈").strip().replace("\u2212", "-")
                    .replace("\u2009", " ").replace("\u00a0", " "))
            # "2.08 × 10^11 B" is 2.08e11 B: the mantissa keeps its significant figures
            text = re.sub(r"^([-+]?[\d.,]+)\s*[x×·*]\s*10\s*(?:\^|\*\*)\s*([-+]?\d+)(?![\d.*^])",
                          r"\1e\2", text)
            try:
                q = parse_quantity(text)
            except ValueError as e:
                # "sqrt(48)", "exp(-1.5) ms", "2*pi": arithmetic with a few functions
                computed = _computed_number(text)
                if computed is not None:
                    value, dollar, rest = computed
                    if not (dollar or rest):
                        return _Typed(value * scale, value, scale, bare=True)  # no figures
                    shown = f"${value!r}{rest}" if dollar else f"{value!r} {rest}"
                    try:
                        got = self._read_number(shown, unit)
                    except (AnswerError, _WrongDimension) as err:  # name what was typed
                        raise type(err)(str(err).replace(repr(shown), repr(ans))) from None
                    return _Typed(got.value, note=got.note)
                # "1.5 × 10^9", "2*1024", "2**30": arithmetic, computed within bounds
                sums = re.sub(r"\s*[x×·]\s*10\s*(\^|\*\*)\s*", "*10**", text)
                if _ARITHMETIC.fullmatch(sums) and re.search(r"\d\s*[-+*/^(]|\)", sums):
                    value = _number(_bounded_expr(sums.replace(",", ""), {}))
                    return _Typed(value * scale, value, scale, bare=True)  # "8*1024"
                # "2*199.75 ms": arithmetic, then a unit; computed, then read with its unit
                with_unit = re.fullmatch(
                    r"(\$?)([\d\s.,_eE+\-*/()^]+?)\s*([^\d\s.,_+\-*/()^][^\d]*)?", sums)
                arithmetic = with_unit and re.search(r"\d\s*[-+*/^(]|\)", with_unit.group(2))
                if arithmetic:
                    dollar, sums, rest = with_unit.groups()
                    try:
                        value = _number(_bounded_expr(sums.replace(",", ""), {}))
                    except AnswerError as err:
                        if not str(err).startswith("could not read"):
                            raise
                        value = None  # not arithmetic after all: said below
                if arithmetic and value is not None:
                    computed = f"{dollar}{value!r} {rest or ''}".strip()
                    try:
                        got = self._read_number(computed, unit)
                    except (AnswerError, _WrongDimension) as err:  # name what was typed
                        raise type(err)(str(err).replace(repr(computed), repr(ans))) from None
                    return _Typed(got.value, note=got.note)
                reason = str(e)
                if (arithmetic or reason.startswith("write powers of ten")) and not re.search(
                        r"[x×·*]\s*10\s*(\^|\*\*)", text):  # a product, not a power of ten
                    reason = (f"could not compute {ans!r}: before the unit, use only numbers, "
                              "+ - * / ( ) and **")
                raise AnswerError(f"{reason}; type a number" + (
                    f" (read in {unit}) or a quantity such as {_fmt(1.5 * scale, unit)!r}"
                    if unit else "")) from None
            number = re.match(r"\$?\s*([-+]?[\d.,_]+(?:[eE][-+]?\d+)?)", text.lstrip("$ "))
            typed = float(number.group(1).replace(",", "").replace("_", "")) if number else None
            figures = _sig_figs(number.group(1)) if number else None
            if math.isnan(q.value):
                raise AnswerError("got nan; the answer must be a finite number")
            if not abs(q.value) <= _TOO_BIG:
                raise AnswerError("that number is far too large to be an answer here")
            if dim == "1" and q.dimension == "bytes" and q.unit == "B":  # "47.3B" of a count
                return _Typed(q.value * 1e9, typed, 1e9, figures,
                              "read B as billions (a count, not bytes)")
            if (q.dimension == "seconds" and dim == "1" and isinstance(unit, str)
                    and "hour" in unit.lower()):  # "524,074 h" for GPU-hours
                return _Typed(q.value / 3600, typed, q.value / 3600 / typed if typed else 1,
                              figures)
            if q.dimension == "1" and q.unit.lower() not in ("%", "percent", "per cent", "pct", "x", "×"):
                return _Typed(q.value * scale, typed, q.value * scale / typed if typed else scale,
                              figures, bare=q.unit == "")  # a plain number or a count:
                # read in the exercise's unit
            if q.dimension != dim:
                raise _WrongDimension(f"{ans!r} is {_DIMS.get(q.dimension, 'another quantity')}, "
                                      f"but this answer is {_DIMS.get(dim, 'a plain number')} "
                                      f"(such as {_fmt(1.5 * scale, unit)!r})")
            return _Typed(q.value, typed, q.value / typed if typed else 1.0, figures)
        value = _number(ans)
        if abs(value) > _TOO_BIG:
            raise AnswerError("that number is far too large to be an answer here")
        typed_text = repr(float(value)) if not isinstance(ans, numbers.Integral) else str(int(ans))
        figures = None if "e" in typed_text and isinstance(ans, float) and len(typed_text) > 12 \
            else _sig_figs(typed_text)
        return _Typed(value * scale, value, scale, figures, bare=True)

    def _grade_number(self, ref, ans, unit):
        ref, (scale, dim) = float(ref), _unit_info(unit)
        try:
            got = self._read_number(ans, unit)
        except _WrongDimension as e:
            return "wrong", str(e)
        tol = max(self.rtol, 1e-9)
        verdict = self._precision(ref, got, tol)
        bare = got.number is not None and math.isclose(got.scale, scale) and not (
            isinstance(ans, str) and re.search(r"%|per ?cent|pct", ans))
        if verdict != "correct" and unit == "%" and bare:  # 0.4375 typed for 43.75%
            as_fraction = _Typed(got.value / scale, got.number, 1.0, got.figures,
                                 f"read {got.number:g} as a fraction, {100 * got.number:.4g}%")
            if self._precision(ref, as_fraction, tol) == "correct":
                got, verdict = as_fraction, "correct"
        if verdict != "correct" and got.bare and not 1e-6 < scale < 1e6:
            # 42949672960 typed for 42.9 GB: a bare number in the base unit (bytes, seconds,
            # FLOP) matches where the display unit's does not; at a factor of 10⁶ or more
            # the two readings cannot be confused
            base = _SI_UNIT[dim][1] if dim in _SI_UNIT else "base units"
            typed = ans.strip() if isinstance(ans, str) else (
                f"{int(got.number)}" if float(got.number).is_integer() else f"{got.number:g}")
            in_base = _Typed(got.number, got.number, 1.0, got.figures,
                             f"read {typed} as {base}; a bare number here is read in {unit}",
                             bare=True)
            if self._precision(ref, in_base, tol) == "correct":
                got, verdict = in_base, "correct"
        shown = _fmt(got.value, unit)
        note = f"; {got.note}" if got.note else ""
        if verdict == "correct":
            return "correct", f"{shown} (reference {_fmt(ref, unit)}{note})"
        if ref == 0:
            return "wrong", f"{shown} should be 0"
        fits = None
        if got.number is not None and got.figures is not None and got.scale:
            fits = lambda c: math.isclose(  # noqa: E731 -- digits of c times the reference?
                _round_sf(ref * c / got.scale, got.figures), got.number, rel_tol=1e-9)
        slip = dim == "1" and (unit == "%" or abs(ref) <= 1)  # a fraction, or a percent
        diagnosis = _diagnose(got.value / ref, tol, dim, fits, slip)
        if verdict == "coarse" and "binary vs decimal" not in diagnosis:
            return "wrong", (f"{shown} is rounded too coarsely: give at least 2 significant "
                             f"figures{note}")
        return "wrong", f"{shown} {diagnosis}{note}"

    def _precision(self, ref: float, got: _Typed, tol: float) -> str:
        """The grading policy (PRECISION_POLICY): "correct", "coarse" or "wrong"."""
        if abs(got.value - ref) <= tol * abs(ref) + self.atol:
            return "correct"
        if got.number is None or got.figures is None or not got.scale:
            return "wrong"
        in_typed_unit = ref / got.scale
        figures = max(2, got.figures)
        if math.isclose(_round_sf(in_typed_unit, figures), got.number, rel_tol=1e-9):
            return "correct"
        if got.figures < 2 and math.isclose(_round_sf(in_typed_unit, got.figures), got.number,
                                            rel_tol=1e-9):
            return "coarse"
        return "wrong"

    def _grade_expr(self, ref, ans, unit):
        syms = self._symbols(ref)
        names = ", ".join(_ascii(n) for n in syms)
        if isinstance(ans, str):
            local = {}
            for n, sym in syms.items():  # "ε_max", "epsilon_max" and "eps_max" name one symbol
                for alias in (n, _ascii(n), _ascii(n).replace("epsilon", "eps"),
                              _ascii(n).replace("eps", "epsilon").replace("epsilonilon", "epsilon"),
                              _ascii(n).replace("lamda", "lambda")):
                    local.setdefault(alias, sym)
            text = _transliterate(ans.strip().replace("\u2212", "-").replace("·", "*")
                                  .replace("×", "*"))
            try:
                ans = _bounded_expr(text, local)
            except AnswerError as e:
                if not str(e).startswith("could not read"):
                    raise
                raise AnswerError(f"{e}; write it in {names}, like '6*Psi*D'") from None
        elif isinstance(ans, (sp.Basic, numbers.Number)) and not isinstance(ans, (bool, np.bool_)):
            try:
                ans = sp.sympify(ans)
            except Exception:
                raise AnswerError(f"could not read {_show(ans)} as an expression") from None
            _check_size(ans)
        if isinstance(ans, (bool, np.bool_)) or not isinstance(ans, sp.Basic) \
                or isinstance(ans, (sp.logic.boolalg.Boolean, sp.core.relational.Relational)):
            raise AnswerError(f"got {_a(ans)}; this answer is an expression in "
                              f"{names} (a SymPy expression or a string)")
        by_name = lambda e: sp.sympify(e).xreplace(  # noqa: E731 -- match symbols by name
            {s: syms[s.name] for s in sp.sympify(e).free_symbols if s.name in syms})
        ans, ref = by_name(ans).doit(), by_name(ref)
        if ans.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
            raise AnswerError(f"got {ans}; the answer must be finite")
        unknown = sorted(_ascii(s.name) for s in ans.free_symbols if s.name not in syms)
        if unknown:
            raise AnswerError(f"unknown symbol(s) {', '.join(unknown)}; use {names}")
        _check_values(ans, ref)
        if symbolic.same(ans, ref):
            return "correct", f"{ans}"
        ratio = sp.simplify(ans / ref) if ref != 0 else sp.nan
        if not ratio.free_symbols and ratio.is_real and ratio.is_finite and ratio != 0:
            return "wrong", f"{ans} {_diagnose(float(ratio), self.rtol, '1')}"
        return "wrong", f"{ans} is not equivalent to the reference"

    def _grade_choice(self, ref, ans, unit):
        options = [str(c) for c in self.choices] or [str(ref)]
        if not isinstance(ans, str):
            raise AnswerError(f"got {_a(ans)}; answer with one of {options}")
        if self.choices and ans.strip().lower() not in [c.lower() for c in options]:
            raise AnswerError(f"{ans!r} is not one of the options {options}")
        ok = ans.strip().lower() == str(ref).strip().lower()
        return ("correct", f"{ans!r}") if ok else ("wrong", f"{ans!r} is not it")

    def _grade_bool(self, ref, ans, unit):
        if getattr(ans, "ndim", None) == 0 and hasattr(ans, "item"):  # a 0-d array or tensor
            ans = ans.item()
        word = ans.strip().lower() if isinstance(ans, str) else None
        if not isinstance(ans, (bool, np.bool_)) and word not in _YES | _NO:
            raise AnswerError(f"got {ans!r:.60}; answer True or False (or 'yes' / 'no')")
        value = bool(ans) if word is None else word in _YES
        ok = value == bool(ref)
        return ("correct" if ok else "wrong"), ("yes" if value else "no") + ("" if ok else " is not it")

    def answer_format(self) -> str:
        """What to type, in words, with the unit a bare number is read in: rendered from
        ``unit`` and the solution's shape, so every exercise says it the same way (the
        notebooks print it under each exercise, through the unanswered message)."""
        named = {"$": "dollars", "%": "percent"}

        def leaf(ref, unit):
            kind = self._kind(ref)
            if kind == "expr":
                return "an expression"
            if kind == "choice":
                return f"one of {list(self.choices)}" if self.choices else "a word"
            if kind == "bool":
                return "True or False"
            return named.get(unit, unit) if unit else "a plain number"
        parts = self._map(leaf, self.solution(), self.unit)
        leaves = _leaves(self._map(lambda ref, unit: unit if self._kind(ref) == "number" else "",
                                   self.solution(), self.unit))
        with_unit = any(leaves)
        numbers = any(self._kind(r) == "number" for r in _leaves(self.solution()))
        computed = f"; {COMPUTED_NUMBERS}" if numbers else ""
        how = "; a bare number is read in the unit named, or type a string with its unit"
        if isinstance(parts, dict):
            return "a dict {" + ", ".join(f"{k!r}: {v}" for k, v in parts.items()) + "}" + (
                how if with_unit else "") + computed
        if isinstance(parts, tuple):
            # one form said once, not n times; a unit as "each in GB", a kind as "each a ..."
            listed = (f"of {len(parts)}, each {'in ' if with_unit else ''}{parts[0]}"
                      if len(parts) > 2 and len(set(parts)) == 1 else f"({', '.join(parts)})")
            return f"a tuple {listed}" + (how if with_unit else "") + computed
        if with_unit:
            return f"a number in {parts}, or a string with its unit" + computed
        return parts + computed

    def grade(self, answer) -> Result:
        """Grade an answer: a Result with .correct, .message and .status; never raises for
        a bad answer."""
        try:
            how = self.answer_format()
        except Exception:  # the solution itself is broken: said by _grade_tree below
            how = "see the prompt"
        if _unanswered(answer):
            return Result(False, f"… {self.id} not answered yet: replace ... with your answer "
                                 f"({how}).", "unanswered")
        try:
            parts = self._grade_tree(self.solution(), answer, self.unit, "")
        except AnswerError as e:
            return Result(False, f"✗ {self.id} can't read this answer: {e}.", "invalid")
        states = [s for _, s, _ in parts]
        leaves = tuple((label, s) for label, s, _ in parts)
        status = next(s for s in ("wrong", "invalid", "unanswered", "correct") if s in states)
        if all(s == "unanswered" for s in states):
            return Result(False, f"… {self.id} not answered yet ({how}).", "unanswered", leaves)
        marks = {"correct": "✓", "wrong": "✗", "invalid": "?", "unanswered": "…"}
        body = (" " + parts[0][2] if len(parts) == 1 and not parts[0][0] else "\n" + "\n".join(
            f"  {marks[s]} {label}: {text}" for label, s, text in parts))
        if status == "correct":
            return Result(True, f"✓ {self.id} correct:{body}", status, leaves)
        head = "can't read this answer" if status == "invalid" else "not yet"
        hint = f"\n  Hint: {self.hint}" if self.hint and status == "wrong" else ""
        return Result(False, f"✗ {self.id} {head}:{body}{hint}", status, leaves)


_collecting: list | None = None  # the exercises of the file being loaded
_files: dict[Path, tuple[tuple, dict]] = {}  # path -> (stat signature, its exercises)


def exercise(id, *, prompt, unit="", rtol=0.01, hint="", book_answer=None, book_note="",
             kind=None, choices=(), symbols=None, atol=0.0):
    """Declare an exercise; the decorated function computes its reference solution.

    ``book_answer`` is what the original edition prints, in the answer's structure; a part it
    does not print is None (``("150 s", None)``), and only the printed parts are compared."""
    def where(msg):
        return ValueError(f"exercise {id!r}: {msg}")
    if not isinstance(id, str) or not _ID.fullmatch(id):
        raise where("ids look like '04.2' (chapter, dot, number)")
    if kind not in _KINDS:
        raise where(f"kind must be one of {_KINDS[1:]}, got {kind!r}")
    if kind == "choice" and not choices:
        raise where("kind='choice' needs choices=(...)")
    if not (isinstance(prompt, str) and prompt.strip()) or not rtol >= 0:
        raise where("needs a prompt, and rtol >= 0")
    for u in _leaves(unit):
        try:
            _unit_info(u)
        except ValueError as e:
            raise where(f"bad unit {u!r}: {e}") from None

    def register(fn):
        ex = Exercise(id, prompt, fn, unit, rtol, hint, book_answer, book_note, kind,
                      tuple(choices), symbols, atol)
        if _collecting is not None:  # only files loaded by registry() or get() register
            _collecting.append(ex)
        return fn
    return register


def _folder() -> Path:
    env = os.environ.get("DTBOOK_EXERCISES")
    if env:
        return Path(env).expanduser().resolve()
    import dtbook
    return Path(dtbook.__file__).resolve().parent.parent / "exercises"


def _load(path: Path) -> dict[str, Exercise]:
    """The exercises of one file, reloaded when the file changes."""
    global _collecting
    st = path.stat()
    sig = (st.st_mtime_ns, st.st_size)
    if path in _files and _files[path][0] == sig:
        return _files[path][1]
    spec = importlib.util.spec_from_file_location(
        "dtbook_exercises_" + re.sub(r"\W", "_", path.stem), path)
    module = importlib.util.module_from_spec(spec)
    outer, _collecting = _collecting, []
    try:
        spec.loader.exec_module(module)
        found = _collecting
    finally:
        _collecting = outer
    out = {}
    for ex in found:
        if ex.id.split(".")[0] != path.stem:
            raise ValueError(f"{path}: exercise id {ex.id!r} is not in chapter {path.stem!r}; "
                             f"ids in {path.name} look like '{path.stem}.1'")
        if ex.id in out:
            raise ValueError(f"{path}: exercise {ex.id!r} is defined twice")
        ex.source = path
        out[ex.id] = ex
    _files[path] = (sig, out)
    return out


def _order(ex_id: str):
    chapter, k = ex_id.split(".")
    return (chapter, int(k))


def registry() -> dict[str, Exercise]:
    """Every exercise, id -> Exercise, from every ``exercises/[0-9]*.py`` file. An id must
    name its file's chapter ("04.2" lives in 04.py), so no two files can share an id."""
    out = {i: ex for path in sorted(_folder().glob("[0-9]*.py")) for i, ex in _load(path).items()}
    return dict(sorted(out.items(), key=lambda kv: _order(kv[0])))


def get(ex_id: str) -> Exercise:
    """The exercise with this id; an UnknownExercise (a KeyError and a ValueError) saying
    which ids are near when there is none."""
    if not isinstance(ex_id, str):
        raise UnknownExercise(f"exercise ids are strings such as '04.1', got {_a(ex_id)}")
    ex_id = ex_id.strip()
    if not _ID.fullmatch(ex_id):  # checked before any file is named after it
        raise UnknownExercise(f"{_show(ex_id, 40)} is not an exercise id; ids look like "
                              "'04.1' (chapter, dot, number)")
    path = _folder() / f"{ex_id.split('.')[0]}.py"
    if path.is_file() and ex_id in _load(path):  # only the chapter's own file is read
        return _load(path)[ex_id]
    try:
        ids = list(registry())
    except Exception:  # a broken chapter file: suggest from what did load
        ids = [i for _, found in _files.values() for i in found]
    chapter = [i for i in ids if i.split(".")[0] == ex_id.split(".")[0]]
    padded = [i for i in ids if i == "0" + ex_id]  # "4.1" for "04.1" is the usual slip
    near = padded + [i for i in difflib.get_close_matches(ex_id, ids, n=5, cutoff=0.5)
                     if i not in chapter + padded]
    msg = f"no exercise {ex_id!r}"
    if chapter:
        msg += f"; chapter {ex_id.split('.')[0]} has {', '.join(chapter)}"
    if near:
        msg += f"; did you mean {', '.join(near)}?"
    if not ids:
        msg += f" (no exercises found in {_folder()})"
    raise UnknownExercise(msg)


def check(ex_id: str, answer=...) -> None:
    """Grade an answer and print the verdict (✓ correct, ✗ not yet, … not answered). The
    marks are plain text symbols every font has, not emoji."""
    try:
        ex = get(ex_id)
    except UnknownExercise as e:
        print(f"✗ {e}")
        return None
    print(ex.grade(answer).message)
    return None
