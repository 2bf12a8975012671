"""Reading what a reader types, and saying how it is off (chapter 01 on; used by the checker).

:mod:`dtbook.exercises` grades; this module reads. It turns a typed answer into a number
with its significant figures ("3.8 GB", "730k", "−1.23%", "2.08 × 10^11 B"), parses an
expression with bounded work (no tower of powers is ever computed), spells Greek letters
out ("6ΨD/(PFη)"), and diagnoses a wrong number (a factor of 2, GiB vs GB, orders of
magnitude, percent vs fraction) only where the digits typed support the diagnosis.
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from dataclasses import dataclass

import numpy as np
import sympy as sp
from sympy.parsing.sympy_parser import (convert_xor, implicit_multiplication, parse_expr,
                                        split_symbols_custom, standard_transformations)

from dtbook.units import parse_quantity


_DIMS = {"bytes": "a size in bytes", "seconds": "a time", "flop": "a FLOP count",
         "flop/s": "a compute rate", "bytes/s": "a bandwidth", "USD": "an amount of money",
         "1": "a plain number"}


_BINARY = [(2**10 / 1e3, "KiB vs KB"), (2**20 / 1e6, "MiB vs MB"), (2**30 / 1e9, "GiB vs GB"),
           (2**40 / 1e12, "TiB vs TB"), (2**50 / 1e15, "PiB vs PB")]


_TIMES = [(60, "seconds vs minutes"), (3600, "seconds vs hours"), (24, "hours vs days"),
          (86400, "seconds vs days")]


_TOO_BIG = 1e300       # no answer in this book comes near; larger ones are not read


_MAX_EXPONENT = 1000   # a typed power larger than this is refused before it is computed


_MAX_TEXT = 400        # characters of a typed expression


_ORDERS = {1: "an order of magnitude", 2: "two orders of magnitude", 3: "three orders of magnitude",
           4: "four orders of magnitude", 5: "five orders of magnitude"}


class AnswerError(ValueError):
    """An answer that cannot be read; the message says why."""


class _WrongDimension(Exception):
    """A readable answer of the wrong kind (a time where a size is asked)."""


def _unit_info(unit: str) -> tuple[float, str]:
    """(scale to SI, dimension) of a display unit such as "ms", "GB/s", "%" or ""."""
    q = parse_quantity(f"1 {unit}")
    return q.value, q.dimension


def _fmt(si: float, unit: str) -> str:
    v = si / _unit_info(unit)[0]
    if unit == "$":  # $3M, $2.5k, $1.2B: the suffixes parse_quantity reads
        scale, suffix = next((m for m in ((1e9, "B"), (1e6, "M"), (1e3, "k")) if abs(v) >= m[0]),
                             (1, ""))
        return f"${v / scale:.4g}{suffix}"
    # whole counts in the ten-thousands to hundreds of millions read best with separators
    number = f"{v:,.0f}" if 1e4 <= abs(v) < 1e9 else f"{v:.4g}"
    return {"%": f"{v:.4g}%", "": number}.get(unit, f"{number}{'' if unit.startswith('/') else ' '}{unit}")


_PLAIN_NAMES = {int: "a whole number", float: "a number", str: "a string", list: "a list",
                tuple: "a tuple", dict: "a dict", set: "a set", bytes: "bytes", complex:
                "a complex number", type(None): "nothing"}


def _a(x) -> str:
    """What a reader passed, in words: "a list", "a function"; never a library's internals."""
    for t, words in _PLAIN_NAMES.items():
        if type(x) is t:
            return words
    if callable(x):
        return "a function (call it and pass its result)"
    module = type(x).__module__ or ""
    if module.startswith("sympy") and not isinstance(x, sp.Basic):
        return "a SymPy object that is not an expression"
    if isinstance(x, np.ndarray) or module.startswith(("numpy", "torch")):
        return "an array"
    name = type(x).__name__
    return ("an " if name[0].lower() in "aeiou" else "a ") + name


def _show(x, width=60) -> str:
    """A short repr without memory addresses."""
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", repr(x))
    return text if len(text) <= width else text[: width - 1] + "…"


def _sig_figs(number_text: str) -> int:
    """Significant figures of a typed number: "3.8" 2, "3.80" 3, "4e9" 1, "400" 1."""
    mantissa = re.split(r"[eE]", number_text.strip().lstrip("+-"))[0].replace(",", "").replace("_", "")
    digits = mantissa.replace(".", "").lstrip("0")
    if "." not in mantissa:
        digits = digits.rstrip("0")  # 400: the zeros may only place the point
    return max(1, len(digits))


def _round_sf(x: float, figures: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, figures - 1 - math.floor(math.log10(abs(x))))


@dataclass
class _Typed:
    """A numeric answer read: its SI value, and the number as typed with its unit's scale
    and significant figures (None where the reader passed a computed value)."""
    value: float
    number: float | None = None
    scale: float = 1.0
    figures: int | None = None
    note: str = ""
    bare: bool = False  # a plain number, no unit typed: read in the exercise's unit


# Each dimension's SI base unit: the symbol parse_quantity reads, and its name in words.
_SI_UNIT = {"bytes": ("B", "bytes"), "seconds": ("s", "seconds"), "flop": ("FLOP", "FLOP"),
            "flop/s": ("FLOP/s", "FLOP/s"), "bytes/s": ("B/s", "bytes/s"),
            "USD": ("USD", "dollars"), "1/s": ("/s", "per second"), "1": ("", "units")}


_ARITHMETIC = re.compile(r"[\d\s.,_eE+\-*/()^]+")


# The functions a typed number may use ("sqrt(48)", "exp(-1.5)", "2*pi", "√48"): a short
# whitelist, read by _bounded_expr (SymPy's parser with only these names, nothing evaluated
# before it is checked). min and max are left out: their commas are thousands separators here.
# log is the natural log, as ln; a comma inside a function's parentheses is refused (see below).
_FUNCTION_WORD = re.compile(r"\b(?:sqrt|exp|log|ln|pi|floor|ceiling|ceil|abs)\b")

# How the answer-format text names them.
COMPUTED_NUMBERS = "sqrt, exp and log (the natural log) may be typed"


def _comma_in_call(t: str) -> bool:
    """Whether a comma stands inside a function's parentheses ("log(8, 2)"): there it could be
    a second argument or a thousands separator ("sqrt(1,000)"), and neither reading is safe."""
    stack = []
    for m in re.finditer(r"[A-Za-z_]+\s*\(|[()]|,", t):
        c = m.group(0)
        if c == ",":
            if "f" in stack:
                return True
        elif c == ")":
            if stack:
                stack.pop()
        else:
            stack.append("f" if c.endswith("(") and c[0].isalpha() else "p")
    return False


def _computed_number(text: str):
    """A number typed as arithmetic with the whitelisted functions, and the unit typed after
    it: ``(value, "$" or "", unit text)``, or None when ``text`` is not such arithmetic (a
    plain quantity, a word). Raises AnswerError for arithmetic that cannot be computed."""
    t = re.sub(r"√\s*\(", "sqrt(", text.strip())
    t = re.sub(r"√\s*([\d.]+)", r"sqrt(\1)", t).replace("ceil(", "ceiling(")
    dollar = ""
    if t.startswith("$"):
        dollar, t = "$", t[1:].strip()
    if not _FUNCTION_WORD.search(t):
        return None
    if _comma_in_call(t):
        raise AnswerError(f"could not compute {text!r}: a function takes one number here, "
                          "without commas (log is the natural log: log(8)/log(2) for a "
                          "base-2 log; write 1000, not 1,000, inside parentheses)")
    # the whole text, then each split between a digit or ")" and what may be a unit
    splits = [(t, "")] + [(t[:m.start()], t[m.end():].strip())
                          for m in re.finditer(r"(?<=[\d)])\s*(?=[A-Za-z%µμ/])", t)]
    for expr, rest in splits:
        bare = _FUNCTION_WORD.sub(" ", expr.replace(",", ""))
        if not expr.strip() or not _ARITHMETIC.fullmatch(bare) or not _FUNCTION_WORD.search(expr):
            continue
        if rest:
            try:
                parse_quantity(f"{dollar}1 {rest}" if not dollar else f"$1{rest}")
            except ValueError:
                continue
        return _number(_bounded_expr(expr.replace(",", ""), {})), dollar, rest
    raise AnswerError(f"could not compute {text!r}: a computed answer uses numbers, "
                      "+ - * / ( ) **, sqrt, exp, log (the natural log) and pi, then its "
                      "unit if any")


def _split_tuple(text: str, n: int):
    """A tuple typed as one string, "79.2%, 100.8 ms" or "(95 h; $24,320)": its ``n`` parts,
    split at the top level (not inside parentheses) on ";", then on ", ", then on a comma
    that is no thousands separator. None when no split gives ``n`` non-empty parts."""
    t = text.strip()
    if t[:1] in "([" and t[-1:] in ")]" and _top_level(t[1:-1]) is not None:
        t = t[1:-1]

    def split(sep):
        parts, depth, start = [], 0, 0
        for m in re.finditer(r"[()\[\]]|" + sep, t):
            c = m.group(0)
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0:
                parts.append(t[start:m.start()])
                start = m.end()
        return [p.strip() for p in parts + [t[start:]]]

    seps = [r";", r",\s+"] + ([] if re.search(r"\d,\d{3}(?!\d)", t) else [r","])
    for sep in seps:
        parts = split(sep)
        if len(parts) == n and all(parts):
            return parts
    return None


def _top_level(t: str):
    """``t`` when its parentheses balance (never closing below depth 0), else None."""
    depth = 0
    for c in t:
        depth += c in "(["
        depth -= c in ")]"
        if depth < 0:
            return None
    return t if depth == 0 else None


def _number(x) -> float:
    """A reader's plain number (int, float, NumPy scalar, 0-d array or tensor) as a float."""
    if isinstance(x, (bool, np.bool_)):
        raise AnswerError(f"got {x}, a yes/no; this answer is a number")
    if isinstance(x, sp.Basic):
        if x.free_symbols:
            raise AnswerError(f"got the expression {x}; this answer is a number")
        try:
            v = float(x)
        except (TypeError, OverflowError):
            raise AnswerError(f"got {_show(x)}, which is not a real number of a readable "
                              "size") from None
    elif isinstance(x, numbers.Real):
        try:
            v = float(x)
        except OverflowError:
            raise AnswerError("got a number too large to be an answer here") from None
    elif hasattr(x, "ndim") and hasattr(x, "item"):  # NumPy arrays and scalars, torch tensors
        if x.ndim != 0:
            raise AnswerError(f"got an array of shape {tuple(x.shape)}; pass one number "
                              "(for a one-element array or tensor, use .item())")
        return _number(x.item())
    else:
        shown = f" ({_show(x)})" if isinstance(x, (str, list, tuple, dict, set)) else ""
        raise AnswerError(f"got {_a(x)}{shown}; this answer is one number")
    if not math.isfinite(v):
        raise AnswerError(f"got {v}; the answer must be a finite number")
    return v


def _near(r: float, target: float, tol: float) -> bool:
    return abs(math.log(r / target)) <= math.log1p(tol)


def _diagnose(r: float, tol: float, dim: str, fits=None, percent_slip=False) -> str:
    """Say how an answer that is r times the reference is off. ``fits(c)``, when given, says
    whether the digits the reader typed are those of the reference times c: a unit slip is
    named only when they are, so an answer rounded differently is never blamed on GiB."""
    if r < 0:
        return "has the wrong sign" + ("" if _near(-r, 1, tol) else
                                       " and " + _diagnose(-r, tol, dim, fits, percent_slip)
                                       .removeprefix("is "))
    if r == 0:
        return "is zero"
    loose = max(2 * tol, 0.03)
    f, name = min(_BINARY, key=lambda b: abs(math.log(max(r, 1 / r) / b[0])))
    # The binary/decimal ratios lie 2.4% apart, so they are matched within 0.6%; a time or
    # a rate computed from a GiB figure is off by the GiB ratio too.
    if ((fits is None or fits(f if r > 1 else 1 / f))
            and (dim in ("bytes", "bytes/s") or name == "GiB vs GB")
            and _near(max(r, 1 / r), f, 0.006)):
        return (f"is {r:.4f}× the reference: looks like {name} (binary vs decimal "
                f"prefixes; 1 {name[:3]} = {f:.4f} {name[-2:]})")
    if _near(r, 2, loose) or _near(r, 0.5, loose):
        return f"is {'twice' if r > 1 else 'half'} the reference: off by a factor of 2"
    if _near(r, 8, loose) or _near(r, 1 / 8, loose):
        return f"is {r:.3g}× the reference: off by a factor of 8, bits vs bytes?"
    for f, name in _TIMES if dim == "seconds" else []:
        if _near(r, f, loose) or _near(r, 1 / f, loose):
            return f"is {r:.3g}× the reference: a slip between {name}?"
    if percent_slip and (_near(r, 100, loose) or _near(r, 0.01, loose)):
        return (f"is {r:.3g}× the reference: a percent vs fraction slip? (43% is the "
                "fraction 0.43)")
    k = round(math.log10(r))
    if k and _near(r, 10.0**k, loose):
        if k % 3 == 0:
            return (f"is off by a factor of 10^{k}: a unit prefix (k/M/G, or ms vs s) off?")
        return f"is off by {_ORDERS.get(abs(k), f'{abs(k)} orders of magnitude')} (10^{k})"
    if r > 10 or r < 0.1:
        k = math.floor(abs(math.log10(r)))
        return (f"is {r:.3g}× the reference: more than {_ORDERS.get(k, f'{k} orders of magnitude')}"
                f" too {'large' if r > 1 else 'small'}")
    return f"is off by {100 * (r - 1):+.3g}% (too {'high' if r > 1 else 'low'})"


def _bounded_expr(text: str, local: dict):
    """Parse a typed expression, refusing work no answer needs: very long text, powers with
    huge exponents (10**10**10), numbers beyond 1e300. Nothing is evaluated before it is
    checked, so a tower of powers is refused at once instead of computed."""
    if len(text) > _MAX_TEXT:
        raise AnswerError(f"the expression is {len(text)} characters long; answers here are "
                          f"shorter than {_MAX_TEXT}")
    if "__" in text or "lambda" in text:
        raise AnswerError(f"could not read {text!r} as an expression")
    safe = {"Integer": sp.Integer, "Float": sp.Float, "Rational": sp.Rational,
            "Symbol": sp.Symbol, "Add": sp.Add, "Mul": sp.Mul, "Pow": sp.Pow, "sqrt": sp.sqrt, "log": sp.log, "ln": sp.log, "exp": sp.exp,
            "ceiling": sp.ceiling, "floor": sp.floor, "Min": sp.Min, "Max": sp.Max,
            "min": sp.Min, "max": sp.Max, "Abs": sp.Abs, "abs": sp.Abs, "pi": sp.pi,
            "__builtins__": {}}
    try:
        splittable = lambda name: (name not in local and len(name) > 1  # noqa: E731
                                   and all(c in local for c in name))  # "PF" is P*F
        with warnings.catch_warnings():  # "()x" multiplies a tuple: SymPy warns, we refuse
            warnings.simplefilter("ignore")
            expr = parse_expr(text, local_dict=local, global_dict=safe, evaluate=False,
                              transformations=standard_transformations
                              + (split_symbols_custom(splittable), implicit_multiplication,
                                 convert_xor))
    except Exception:
        raise AnswerError(f"could not read {text!r} as an expression") from None
    if not isinstance(expr, sp.Basic) or expr.has(sp.Tuple):
        raise AnswerError(f"could not read {text!r} as an expression")
    _check_size(expr)
    return expr


def _check_size(expr):
    """Refuse, bottom-up, any power or number too large to be an answer (see _bounded_expr)."""
    for node in sp.postorder_traversal(expr):
        if isinstance(node, sp.Pow) and node.exp.is_number:
            try:
                e = abs(complex(node.exp.evalf(15)))
            except (TypeError, OverflowError, ValueError):
                e = math.inf
            if not e <= _MAX_EXPONENT:
                raise AnswerError(f"a power with an exponent of {e:.3g} is far larger than any "
                                  "answer here needs")
            if node.base.is_number:
                try:
                    b = abs(complex(node.base.evalf(15)))
                except (TypeError, OverflowError, ValueError):
                    b = math.inf
                if b > 1 and e * math.log10(b) > math.log10(_TOO_BIG):
                    raise AnswerError("that number is far too large to be an answer here")
        elif isinstance(node, sp.Number) and node.is_finite is not False:
            if abs(node) > _TOO_BIG:
                raise AnswerError("that number is far too large to be an answer here")
        elif isinstance(node, sp.exp) and node.args[0].is_number:
            try:
                if complex(node.args[0].evalf(15)).real > math.log(_TOO_BIG):
                    raise AnswerError("that number is far too large to be an answer here")
            except (TypeError, OverflowError, ValueError):
                raise AnswerError("that number is far too large to be an answer here") from None


_GREEK = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon", "ϵ": "epsilon",
          "ζ": "zeta", "η": "eta", "θ": "theta", "κ": "kappa", "λ": "lamda", "μ": "mu", "ν": "nu",
          "ξ": "xi", "π": "pi", "ρ": "rho", "σ": "sigma", "τ": "tau", "φ": "phi", "χ": "chi",
          "ψ": "psi", "ω": "omega", "Γ": "Gamma", "Δ": "Delta", "Θ": "Theta", "Λ": "Lambda",
          "Ξ": "Xi", "Π": "Pi", "Σ": "Sigma", "Φ": "Phi", "Ψ": "Psi", "Ω": "Omega"}


def _ascii(name: str) -> str:
    """A symbol name with Greek letters spelt out: "ε_max" -> "epsilon_max"."""
    return "".join(_GREEK.get(c, c) for c in name)


def _transliterate(text: str) -> str:
    """Spell Greek letters out so a typed "6ΨD/(PFη)" reads as 6*Psi*D/(P*F*eta), while
    "ε_max" stays one name."""
    out = []
    for i, c in enumerate(text):
        if c not in _GREEK:
            out.append(c)
            continue
        before = text[i - 1] if i else ""
        after = text[i + 1] if i + 1 < len(text) else ""
        out.append((" " if before.isalnum() and before not in _GREEK else "") + _GREEK[c]
                   + (" " if after.isalnum() or after in _GREEK else ""))
    return "".join(out)


def _check_values(ans, ref):
    """Refuse an expression whose values are far beyond any answer's, such as (P+x)**300:
    evaluated at positive points, it must stay finite and below 1e300 wherever the reference
    does. (Comparing two infinities would otherwise call them equal.)"""
    free = sorted(ans.free_symbols | ref.free_symbols, key=str)
    for v in (sp.Rational(3, 2), sp.Rational(997, 7), sp.Integer(1000)):
        point = {s: v for s in free}
        try:
            a = complex(ans.evalf(15, subs=point))
        except (TypeError, ValueError, OverflowError):
            a = complex(math.inf)
        try:
            r = complex(ref.evalf(15, subs=point))
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(abs(r)) and abs(r) < _TOO_BIG and not (abs(a) < _TOO_BIG):
            raise AnswerError("that expression's values are far larger than any answer here "
                              "(beyond 1e300)")
