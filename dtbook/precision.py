"""Floating-point formats from their bit fields, and what reduced precision costs (chapter 30).

A binary floating-point format with ``exp_bits`` exponent bits and ``man_bits`` stored
mantissa bits stores a normal number as

    x = (−1)^s · 2^(E − bias) · (1 + f / 2^m),   bias = 2^(e−1) − 1,

for exponent fields E = 1 … 2^e − 2, and subnormals 2^(1 − bias) · f / 2^m for E = 0.
Two variants of the top exponent field (``variant=``):

* ``"ieee"``: E = 2^e − 1 holds only infinities and NaNs (fp32, tf32, fp16, bf16, e5m2);
* ``"fn"``: no infinities; E = 2^e − 1 holds normal numbers too, and only the pattern with
  every mantissa bit set is NaN (float8_e4m3fn, the "finite" FP8 of the OCP spec).

From the fields follow the largest value, the smallest normal and subnormal, the machine
epsilon (spacing at 1), the spacing at any x, the share of a log-uniform range that
underflows or overflows, the smallest power-of-two loss scale that lifts a gradient into the
normal range, an FP8 scale, the softmax overflow threshold ln(max), and the random-walk
model of rounding error in a long sum. Chapter 30 derives each of them and checks the
numbers against ``torch.finfo``.

Every function accepts Python numbers, NumPy arrays and SymPy symbols alike (where a
bit count is a symbol, the result stays an expression).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import maximum, minimum

__all__ = ["Format", "FORMATS", "VARIANTS", "bias", "max_value", "smallest_normal",
           "smallest_subnormal", "machine_epsilon", "unit_roundoff", "decimal_digits",
           "spacing", "log_uniform_loss", "min_loss_scale", "fp8_scale",
           "softmax_overflow", "accumulation_error"]

VARIANTS = ("ieee", "fn")


def _sym(*values):
    return any(isinstance(v, sp.Basic) for v in values)


def _log(x, base=None):
    if isinstance(x, sp.Basic):
        return sp.log(x, base) if base else sp.log(x)
    x = np.asarray(x, dtype=float)
    out = np.log(x) / (np.log(base) if base else 1.0)
    return float(out) if out.ndim == 0 else out


def _bits(exp_bits, man_bits=None, variant="ieee"):
    # fp64 has 11 exponent and 52 mantissa bits: nothing wider is a format we model
    for name, value, low, high in (("exp_bits", exp_bits, 1, 11), ("man_bits", man_bits, 0, 52)):
        if value is None or (isinstance(value, sp.Basic) and value.free_symbols):
            continue
        check.count(name, value, low)
        if np.any(np.asarray(float(value) if isinstance(value, sp.Basic) else value) > high):
            raise ValueError(f"{name} must be at most {high} (fp64's width), got {value!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be 'ieee' (top exponent for inf/NaN) or 'fn' (no "
                         f"infinities, as float8_e4m3fn), got {variant!r}")
    if variant == "fn" and man_bits is not None and not _sym(man_bits) and np.any(
            np.asarray(man_bits) < 1):
        raise ValueError("man_bits must be >= 1 for the 'fn' variant (its NaN needs a "
                         f"mantissa bit), got {man_bits!r}")


def bias(exp_bits):
    """The exponent bias 2^(e−1) − 1 of a format with ``exp_bits`` exponent bits (chapter 30)."""
    _bits(exp_bits)
    return 2 ** (exp_bits - 1) - 1


def max_value(exp_bits, man_bits, variant="ieee"):
    """The largest finite value (chapter 30).

    IEEE-style: the top exponent field is reserved, so the largest normal has E = 2^e − 2 and
    every mantissa bit set, (2 − 2^−m) · 2^(2^e − 2 − bias). ``"fn"``: E = 2^e − 1 is usable
    but its all-ones mantissa is NaN, so (2 − 2^(1−m)) · 2^(2^e − 1 − bias): 448 for e4m3fn.
    """
    _bits(exp_bits, man_bits, variant)
    fn = variant == "fn"
    top_exponent = 2 ** exp_bits - (1 if fn else 2) - bias(exp_bits)
    if _sym(exp_bits, man_bits):
        two = sp.Integer(2)
        return (2 - two ** ((1 if fn else 0) - man_bits)) * two ** top_exponent
    out = (2 - 2.0 ** ((1 if fn else 0) - np.asarray(man_bits, dtype=float))) \
        * 2.0 ** np.minimum(np.asarray(top_exponent, dtype=float), 1023)
    if np.any(np.asarray(top_exponent) > 1023):  # only an 11-bit "fn" format gets here
        raise ValueError(f"exp_bits={exp_bits!r} with variant 'fn' exceeds fp64's range")
    return float(out) if np.ndim(out) == 0 else out


def smallest_normal(exp_bits):
    """The smallest positive normal number, 2^(1 − bias) (chapter 30)."""
    _bits(exp_bits)
    return (sp.Integer(2) if _sym(exp_bits) else 2.0) ** (1 - bias(exp_bits))


def smallest_subnormal(exp_bits, man_bits):
    """The smallest positive subnormal number, 2^(1 − bias − m) (chapter 30)."""
    _bits(exp_bits, man_bits)
    return smallest_normal(exp_bits) * (sp.Integer(2) if _sym(man_bits) else 2.0) ** (-man_bits)


def machine_epsilon(man_bits):
    """The gap between 1 and the next number, 2^−m: ``torch.finfo(dtype).eps`` (chapter 30)."""
    _bits(None, man_bits)
    return (sp.Integer(2) if _sym(man_bits) else 2.0) ** (-man_bits)


def unit_roundoff(man_bits):
    """The largest relative error of round-to-nearest, u = 2^−(m+1), half the epsilon
    (chapter 30)."""
    return machine_epsilon(man_bits) / 2


def decimal_digits(man_bits):
    """Decimal digits the significand carries, (m + 1)·log10 2 (chapter 30)."""
    _bits(None, man_bits)
    return (man_bits + 1) * (sp.log(2, 10) if _sym(man_bits) else np.log10(2.0))


def spacing(x, exp_bits, man_bits):
    """The gap between |x| and the next larger representable number (chapter 30).

    2^(⌊log2 |x|⌋ − m) in the normal range, and the smallest subnormal below it, where the
    spacing stops shrinking. An update smaller than half of it rounds away: w + Δ == w.
    """
    _bits(exp_bits, man_bits)
    if _sym(x, exp_bits, man_bits):
        e = sp.Max(sp.floor(sp.log(sp.Abs(x), 2)), 1 - bias(exp_bits))
        return sp.Integer(2) ** (e - man_bits)
    ax = np.abs(np.asarray(x, dtype=float))
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    e = np.where(ax > 0, e, 1 - bias(exp_bits))
    out = 2.0 ** (np.maximum(e, 1 - bias(exp_bits)) - man_bits)
    return float(out) if out.ndim == 0 else out


def log_uniform_loss(high, exp_bits, man_bits, low=None, variant="ieee", subnormals=False):
    """The shares of values drawn log-uniformly from [low, high] that a format loses:
    ``(underflow, overflow)`` (chapter 30).

    ``low`` defaults to 1/high, the symmetric range [10⁻⁸, 10⁸] for ``high=1e8``. Overflow is
    above the largest finite value. Underflow is below the smallest normal by default (values
    there lose relative precision, down to none at all); ``subnormals=True`` counts only what
    flushes to zero, below the smallest subnormal.
    """
    check.positive("high", high)
    if low is None:
        if not _sym(high) and np.any(np.asarray(high, dtype=float) <= 1):
            raise ValueError(f"high must be > 1 when low is not given, got {high!r}")
        low = 1 / high
    check.positive("low", low)
    if not _sym(low, high) and np.any(np.asarray(low, dtype=float)
                                      >= np.asarray(high, dtype=float)):
        raise ValueError(f"low must be smaller than high, got low={low!r}, high={high!r}")
    floor = smallest_subnormal(exp_bits, man_bits) if subnormals else smallest_normal(exp_bits)
    top = max_value(exp_bits, man_bits, variant)
    width = _log(high) - _log(low)
    under = minimum(maximum((_log(floor) - _log(low)) / width, 0), 1)
    over = minimum(maximum((_log(high) - _log(top)) / width, 0), 1)
    return under, over


def min_loss_scale(grad, exp_bits=5, man_bits=10, power_of_two=True):
    """The smallest loss scale s that lifts a gradient of magnitude ``grad`` to the smallest
    normal number, s = 2^(1 − bias)/|g|, rounded up to a power of two (chapter 30).

    fp16's defaults: 2^−14/|g|, so a gradient of 10⁻⁶ needs 61, that is 64. A gradient already
    normal needs no scaling (s = 1).
    """
    check.positive("grad", np.abs(grad) if not _sym(grad) else grad)
    s = smallest_normal(exp_bits) / abs(grad)
    if power_of_two:
        s = (sp.Integer(2) ** sp.ceiling(sp.log(s, 2)) if _sym(s)
             else 2.0 ** np.ceil(np.log2(s) - 1e-12))
    return maximum(s, 1)


def fp8_scale(amax, exp_bits=4, man_bits=3, variant="fn"):
    """The scale that maps a tensor's largest magnitude onto the format's largest value,
    max/amax: 448/amax for e4m3fn, 57344/amax for e5m2 (chapter 30). Multiply before the
    cast, divide after the matmul; per tensor (one amax) or per row (one per row)."""
    check.positive("amax", amax)
    return max_value(exp_bits, man_bits, variant) / amax


def softmax_overflow(exp_bits, man_bits, variant="ieee"):
    """The logit above which exp(x) overflows: ln(max) (chapter 30). 11.09 for fp16, where
    e^x passes 65504; subtracting the row's maximum first keeps every exponent ≤ 0."""
    return _log(max_value(exp_bits, man_bits, variant))


def accumulation_error(n, man_bits):
    """The random-walk model of rounding in a long sum (chapter 30): the RMS error of
    summing n independent unit-variance terms one after another, rounding every partial sum
    to ``man_bits`` mantissa bits, relative to the RMS of the sum: √n·u/(4·√ln 2).

    Each rounding of a partial sum s_k adds an error of RMS 2^−m·|s_k|·√(1/(32 ln 2)) (the
    mantissa of a rounded value is log-distributed, Benford); the errors are independent and
    E[s_k²] = k, so their sum has variance 2^−2m·n²/(64 ln 2), and the sum itself √n.
    """
    check.positive("n", n)
    u = unit_roundoff(man_bits)
    if _sym(n, man_bits):
        return sp.sqrt(n) * u / (4 * sp.sqrt(sp.log(2)))
    return np.sqrt(n) * u / (4 * np.sqrt(np.log(2)))


@dataclass(frozen=True)
class Format:
    """A float format by its bit fields; every property comes from the functions above."""

    name: str
    exp_bits: int
    man_bits: int
    variant: str = "ieee"
    torch_dtype: str | None = None   # the name in torch, where torch has the format

    @property
    def max(self):
        return max_value(self.exp_bits, self.man_bits, self.variant)

    @property
    def smallest_normal(self):
        return smallest_normal(self.exp_bits)

    @property
    def smallest_subnormal(self):
        return smallest_subnormal(self.exp_bits, self.man_bits)

    @property
    def eps(self):
        return machine_epsilon(self.man_bits)

    @property
    def bits(self):
        return 1 + self.exp_bits + self.man_bits


# tf32 has no torch dtype: it is an fp32 that a tensor core reads with 10 mantissa bits.
FORMATS = {f.name: f for f in (
    Format("fp32", 8, 23, "ieee", "float32"),
    Format("tf32", 8, 10, "ieee", None),
    Format("fp16", 5, 10, "ieee", "float16"),
    Format("bf16", 8, 7, "ieee", "bfloat16"),
    Format("e4m3", 4, 3, "fn", "float8_e4m3fn"),
    Format("e5m2", 5, 2, "ieee", "float8_e5m2"),
)}

check.guard_module(globals(), arrays=True)


# ==== chapter 35: block-wise FP8 and the rounding-error model =================================
# (DeepSeek-V3's fine-grained quantization: one scale per 1×128 tile or 128×128 block.)

def rounding_rmse(step):
    """RMS error of rounding to the nearest point of a grid of spacing Δ when the values lie
    evenly within a step: the error is uniform on [−Δ/2, Δ/2], so Δ/√12 (chapter 35)."""
    check.positive("step", step)
    return step / (sp.sqrt(12) if _sym(step) else np.sqrt(12.0))


def gaussian_amax(sigma, n):
    """The largest magnitude among ``n`` draws of N(0, σ²), to leading order σ√(2 ln n)
    (chapter 35): what one scale per tensor must cover, against one per block of 128."""
    check.positive("sigma", sigma)
    check.count("n", n, 2)
    if _sym(sigma, n):
        return sigma * sp.sqrt(2 * sp.log(n))
    return sigma * np.sqrt(2 * np.log(n))


import math  # noqa: E402  (this section's own import)


def _erf(x):
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=float)


def scaled_rounding_rmse(sigma, amax, exp_bits=4, man_bits=3, variant="fn"):
    """RMS error of N(0, σ²) values multiplied by the scale max/amax (:func:`fp8_scale`),
    rounded to the nearest value of the format and divided back (chapter 35). ``amax`` is
    the largest magnitude of the tensor or block the scale is for, so no value lies beyond
    it: the values are N(0, σ²) given |x| ≤ amax, and nothing clips.

    Rounding in the binade [2^e, 2^(e+1)) has spacing Δ_e = 2^(e − m) and an error of RMS
    Δ_e/√12 (:func:`rounding_rmse`); the subnormals below the smallest normal share the first
    binade's spacing. So MSE = Σ_e P(|x|·scale ∈ binade e | |x| ≤ amax)·Δ_e²/12, and the RMSE
    is √MSE/scale, in the units of x. ``amax`` may be an array (one scale per block): one
    RMSE per block."""
    check.positive("sigma", sigma)
    check.positive("amax", amax)
    check.scalar("sigma", sigma)
    if _sym(sigma, amax, exp_bits, man_bits):
        raise ValueError("sigma and amax must be numbers here (a sum over binades), not symbols")
    top = max_value(exp_bits, man_bits, variant)
    low = int(1 - bias(exp_bits))
    high = int(np.floor(np.log2(top)))
    amax = np.asarray(amax, dtype=float)
    scale = top / amax
    s = sigma * scale * np.sqrt(2.0)          # Φ(b) − Φ(a) = (erf(b/(σ√2)) − erf(a/(σ√2)))/2
    mse = np.zeros_like(scale)
    edges = [0.0] + [2.0 ** e for e in range(low, high + 1)] + [top]
    for k in range(len(edges) - 1):
        a, b = edges[k], edges[k + 1]
        step = 2.0 ** (max(k - 1 + low, low) - man_bits)   # [0, 2^low): the subnormals
        mse = mse + (_erf(b / s) - _erf(a / s)) * rounding_rmse(step) ** 2   # both signs: 2·(Φ(b) − Φ(a))
    out = np.sqrt(mse / _erf(top / s)) / scale              # given |x| <= amax
    return float(out) if out.ndim == 0 else out


__all__ += ["rounding_rmse", "gaussian_amax", "scaled_rounding_rmse"]
for _name in ("rounding_rmse", "gaussian_amax", "scaled_rounding_rmse"):
    globals()[_name] = check.guarded(globals()[_name], arrays=True)
