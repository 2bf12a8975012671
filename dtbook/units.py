"""Units: SI constants, a parser for quantities a reader types, and pretty printing.

Everything inside dtbook is in SI base units: bytes, seconds, FLOP, FLOP/s, bytes/s.
Decimal (GB = 1e9) and binary (GiB = 2**30) prefixes are different constants and are never
mixed. Chapter 01 introduces the convention; every chapter uses it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Decimal prefixes (the SI ones) and binary prefixes (IEC), kept apart on purpose.
KB, MB, GB, TB, PB = 1e3, 1e6, 1e9, 1e12, 1e15
KiB, MiB, GiB, TiB, PiB = 2**10, 2**20, 2**30, 2**40, 2**50

# Time.
ns, us, ms = 1e-9, 1e-6, 1e-3
minute, hour, day = 60.0, 3600.0, 86400.0
year = 365.25 * day  # Julian year: the convention astronomers and most cost models use

# Compute.
GFLOP, TFLOP, PFLOP = 1e9, 1e12, 1e15

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {
    "ns": ns, "us": us, "µs": us, "μs": us, "ms": ms, "s": 1.0, "sec": 1.0, "second": 1.0,
    "seconds": 1.0, "min": minute, "minute": minute, "minutes": minute, "h": hour, "hr": hour,
    "hour": hour, "hours": hour, "d": day, "day": day, "days": day, "y": year, "yr": year,
    "year": year, "years": year, "yrs": year, "mins": minute, "secs": 1.0, "hrs": hour,
    "wk": 7 * day, "week": 7 * day, "weeks": 7 * day,
    "mo": year / 12, "month": year / 12, "months": year / 12,
}

# Words that name what is counted. A count is a plain number ("844288 tokens", "3 GPUs",
# "7.3e5 tokens/s" where the question asks for tokens per second): the word is read and
# dropped. So are ratio names such as "FLOP/B" for an intensity.
_COUNTED = {
    "token", "tokens", "tok", "gpu", "gpus", "gpu-hour", "gpu-hours", "gpu hours", "gpu-h",
    "worker", "workers", "node", "nodes", "sample", "samples", "sequence", "sequences",
    "param", "params", "parameter", "parameters", "step", "steps", "layer", "layers",
    "expert", "experts", "head", "heads", "rank", "ranks", "device", "devices", "example",
    "examples", "microbatch", "microbatches", "micro-batch", "micro-batches", "replica",
    "replicas", "stage", "stages", "chunk", "chunks", "bucket", "buckets", "times",
    "flop/b", "flop/byte", "flops/byte", "flop per byte", "flop/bytes",
}
# Magnitude suffixes a reader puts on a count or an amount: 730k, 0.84M, 47.3B, 3M.
_MAGNITUDE = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "bn": 1e9, "G": 1e9, "T": 1e12}
_PER_TIME = ("/", "per ")


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity: its value in SI base units, its dimension, and the unit as typed."""

    value: float
    dimension: str  # "bytes", "seconds", "flop", "flop/s", "bytes/s", "USD", "1/s" or "1"
    unit: str = ""

    @property
    def binary(self) -> bool:
        """True when the unit used a binary prefix (KiB, GiB, ...)."""
        return bool(re.match(r"[kKMGTPE]i", self.unit)) and self.dimension in ("bytes", "bytes/s")


def _prefix(p: str) -> float | None:
    if p in _BINARY:
        return _BINARY[p]
    return _DECIMAL.get(p)


def _parse_unit(unit: str) -> tuple[float, str] | None:
    """Return (scale to SI, dimension) for a unit string, or None if it is not one we know."""
    u = unit.strip()
    if u in ("", "x", "×"):
        return 1.0, "1"
    if u in ("%", "percent", "per cent", "pct"):
        return 0.01, "1"
    # a rate per unit of time: "/h", "per hour", "/s" alone ("1.21/h" failures per hour)
    for lead in ("/", "per "):
        if u.startswith(lead) and u[len(lead):].strip() in _TIME:
            return 1.0 / _TIME[u[len(lead):].strip()], "1/s"
    scale, counted = 1.0, u
    if u != "B" and u.split(" ", 1)[0] in _MAGNITUDE:  # "B" alone stays bytes
        head, _, rest = u.partition(" ")
        scale, counted = _MAGNITUDE[head], rest.strip()
    for tail in ("/s", "/sec", " per second", "/second"):
        if counted.lower().endswith(tail) and counted[: -len(tail)].strip().lower() in _COUNTED:
            counted = counted[: -len(tail)].strip()  # a count per second: the question's unit
            break
    if counted == "" and scale != 1.0 or counted.lower() in _COUNTED:
        return scale, "1"
    if u in _TIME:
        return _TIME[u], "seconds"
    if u in ("$", "USD", "dollars"):
        return 1.0, "USD"
    rate = None
    for suffix in ("/s", "ps", "/sec"):
        if u.endswith(suffix) and len(u) > len(suffix) and not u.lower().endswith("flops"):
            rate, u = suffix, u[: -len(suffix)]
            break
    m = re.fullmatch(r"([kKMGTPE]i?|)(B|bytes?|b|bits?|FLOPS|FLOPs?|flops?)", u)
    if m is None:
        if rate is None and u.upper() in ("FLOPS",):
            return 1.0, "flop/s"
        return None
    scale = _prefix(m.group(1))
    if scale is None:
        return None
    base = m.group(2)
    if base.lower().startswith("flop"):
        # "TFLOPS" conventionally means FLOP per second; "TFLOPs" (lower s) means a count.
        if rate is None and base.endswith("S"):
            return scale, "flop/s"
        return scale, "flop/s" if rate else "flop"
    if base in ("b", "bit", "bits"):
        scale /= 8.0  # a bit is an eighth of a byte: 400 Gb/s = 50 GB/s
    return scale, "bytes/s" if rate else "bytes"


_NUMBER = r"[-+]?(?:\d+(?:[_,]\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


def parse_quantity(text: str) -> Quantity:
    """Parse what a reader types, such as ``"208 GB"``, ``"1.5 TiB"``, ``"399 ms"``,
    ``"50 GB/s"``, ``"400 Gb/s"``, ``"989 TFLOP/s"``, ``"$3M"`` or ``"30%"``.

    Returns a :class:`Quantity` in SI base units. Raises ``ValueError`` naming what could
    not be read. (Chapter 01.)
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a string such as '208 GB', got {type(text).__name__}")
    s = (text.strip().replace("\u2009", " ").replace("\u00a0", " ").replace("\u202f", " ")
         .replace("\u2212", "-"))  # the Unicode minus the prompts print
    # the book's own scientific notation, "5.88×10²³" (fmt_sci), reads as 5.88e23
    s = re.sub(r"^([-+$]?[\d.,]+)\s*[×x]\s*10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)",
               lambda m: f"{m.group(1)}e{m.group(2).translate(_FROM_SUPERSCRIPT)}", s)
    dollars = s.startswith("$")
    if dollars:
        s = s[1:].strip()
    m = re.match(_NUMBER, s)
    if not m:
        raise ValueError(f"could not find a number at the start of {text!r}")
    number = float(m.group(0).replace(",", "").replace("_", ""))
    rest = s[m.end():].strip()
    if rest.startswith("*") or re.match(r"[x×·]\s*10", rest, re.IGNORECASE):
        raise ValueError(f"write powers of ten as 1.5e9, not {text!r}")
    if dollars:
        scale = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "bn": 1e9}.get(rest)
        if scale is None:
            raise ValueError(f"unknown money suffix {rest!r} in {text!r}; use k, M or B")
        return Quantity(number * scale, "USD", "$" + rest)
    m2 = re.match(r"(k|K|M|B|bn|G|T)\b\s*(.*)$", rest)
    if m2 and m2.group(2) and _parse_unit(rest) is None:  # "730k tokens", "0.84M GPUs"
        rest = f"{m2.group(1)} {m2.group(2)}"
    parsed = _parse_unit(rest)
    if parsed is None:
        raise ValueError(
            f"unknown unit {rest!r} in {text!r}; try B, KB, MB, GB, TB (or KiB, MiB, GiB, TiB),"
            " s, ms, us, ns, hours, days, years, FLOP, FLOP/s, GB/s, Gb/s, %, a count such"
            " as 'tokens' or 'GPUs', or a suffix k, M, B"
        )
    scale, dim = parsed
    return Quantity(number * scale, dim, rest)


def _pretty(value: float, prefixes: list[tuple[float, str]], unit: str, digits: int) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    for scale, name in prefixes:
        if abs(value) >= scale:
            return f"{fmt_num(value / scale, digits)} {name}{unit}"
    scale, name = prefixes[-1]
    return f"{fmt_num(value / scale, digits)} {name}{unit}"


_DEC_PREFIXES = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"), (1, "")]
_BIN_PREFIXES = [(2.0**50, "Pi"), (2.0**40, "Ti"), (2.0**30, "Gi"), (2.0**20, "Mi"), (2.0**10, "Ki"), (1, "")]


def fmt_bytes(nbytes: float, binary: bool = False, digits: int = 3) -> str:
    """``fmt_bytes(208e9) == '208 GB'``; with ``binary=True``, ``'194 GiB'``."""
    return _pretty(float(nbytes), _BIN_PREFIXES if binary else _DEC_PREFIXES, "B", digits)


def fmt_rate(bytes_per_s: float, digits: int = 3) -> str:
    """Bandwidth in decimal bytes per second: ``fmt_rate(50e9) == '50 GB/s'``."""
    return _pretty(float(bytes_per_s), _DEC_PREFIXES, "B/s", digits)


def fmt_flops(flop: float, per_second: bool = False, digits: int = 3) -> str:
    """``fmt_flops(1.2e15) == '1.2 PFLOP'``; from 1e21 up, scientific: ``'3.15×10²³ FLOP'``."""
    unit = "FLOP/s" if per_second else "FLOP"
    if abs(flop) >= 1e21:
        return f"{fmt_sci(flop, digits)} {unit}"
    return _pretty(float(flop), _DEC_PREFIXES, unit, digits)


def fmt_seconds(t: float, digits: int = 3) -> str:
    """The largest unit that keeps the number at least 1: ns, µs, ms, s, min, h, days, years."""
    t = float(t)
    for scale, name in ((year, "years"), (day, "days"), (hour, "h"), (minute, "min"), (1.0, "s"),
                        (ms, "ms"), (us, "µs"), (ns, "ns")):
        if abs(t) >= scale:
            return f"{fmt_num(t / scale, digits)} {name}"
    return f"{fmt_num(t / ns, digits)} ns"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
_FROM_SUPERSCRIPT = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")


def fmt_num(x: float, digits: int = 3) -> str:
    """A plain number for prose, to ``digits`` significant digits: ``fmt_num(123.4, 2) ==
    '120'``, ``fmt_num(0.01234, 2) == '0.012'``, ``fmt_num(12345, 3) == '12,300'``; outside
    10⁻³ to 10⁶ it is :func:`fmt_sci`, never '1.2e+02'."""
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if not 1e-3 <= abs(x) < 1e6:
        return fmt_sci(x, digits)
    v = float(f"{x:.{digits}g}")
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_sci(x: float, digits: int = 3) -> str:
    """Scientific notation for prose: ``fmt_sci(5.88e23) == '5.88×10²³'``."""
    mant, exp = f"{float(x):.{digits - 1}e}".split("e")
    return f"{float(mant):.{digits}g}×10{str(int(exp)).translate(_SUPERSCRIPT)}"
