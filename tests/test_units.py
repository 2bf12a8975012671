"""dtbook.units: the constants, the parser of what readers type, and the pretty printers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtbook import units as u
from dtbook.units import (GB, GiB, KB, KiB, MB, MiB, PB, PiB, TB, TiB, Quantity, day, fmt_bytes,
                          fmt_flops, fmt_rate, fmt_seconds, hour, minute, ms, ns, parse_quantity,
                          us, year)


def test_constants_decimal_and_binary_are_distinct():
    assert (KB, MB, GB, TB, PB) == (1e3, 1e6, 1e9, 1e12, 1e15)
    assert (KiB, MiB, GiB, TiB, PiB) == (2**10, 2**20, 2**30, 2**40, 2**50)
    assert GiB / GB == pytest.approx(1.073741824) and TiB / TB == pytest.approx(1.099511627776)
    assert (ns, us, ms, minute, hour, day) == (1e-9, 1e-6, 1e-3, 60, 3600, 86400)
    assert year == 365.25 * day


@pytest.mark.parametrize("text,value,dim", [
    ("208 GB", 208e9, "bytes"), ("1.5 TiB", 1.5 * 2**40, "bytes"), ("208GB", 208e9, "bytes"),
    ("399 ms", 0.399, "seconds"), ("2 µs", 2e-6, "seconds"), ("2 μs", 2e-6, "seconds"),
    ("2 us", 2e-6, "seconds"), ("5 min", 300, "seconds"), ("3 days", 3 * 86400, "seconds"),
    ("1 year", 365.25 * 86400, "seconds"), ("1.5 hours", 5400, "seconds"),
    ("50 GB/s", 50e9, "bytes/s"), ("400 Gb/s", 50e9, "bytes/s"), ("400 Gbps", 50e9, "bytes/s"),
    ("25 GiB/s", 25 * 2**30, "bytes/s"), ("989 TFLOP/s", 989e12, "flop/s"),
    ("989 TFLOPS", 989e12, "flop/s"), ("3.1e23 FLOP", 3.1e23, "flop"),
    ("2 TFLOPs", 2e12, "flop"), ("1.2 PFLOP", 1.2e15, "flop"), ("$3M", 3e6, "USD"),
    ("$2.5k", 2500, "USD"), ("$1.2B", 1.2e9, "USD"), ("40 USD", 40, "USD"),
    ("30%", 0.3, "1"), ("4x", 4, "1"), ("4 ×", 4, "1"), ("7", 7, "1"), ("-3 s", -3, "seconds"),
    ("1,000 GB", 1e12, "bytes"), ("1_000 B", 1000, "bytes"), (".5 KB", 500, "bytes"),
    ("1e9 B", 1e9, "bytes"), ("  12 kB ", 12e3, "bytes"),
])
def test_parse_examples(text, value, dim):
    q = parse_quantity(text)
    assert isinstance(q, Quantity) and q.dimension == dim
    assert q.value == pytest.approx(value, rel=1e-12)


def test_bits_and_bytes():
    assert parse_quantity("8 b").value == parse_quantity("1 B").value == 1
    assert parse_quantity("8 bits").value == 1 and parse_quantity("1 byte").value == 1
    assert parse_quantity("400 Gb/s").value * 8 == parse_quantity("400 GB/s").value
    assert parse_quantity("1 Tb").value == parse_quantity("125 GB").value


def test_binary_flag():
    assert parse_quantity("1 GiB").binary and parse_quantity("3 MiB/s").binary
    assert not parse_quantity("1 GB").binary and not parse_quantity("400 bits").binary
    assert not parse_quantity("5 min").binary and not parse_quantity("1 B").binary


@pytest.mark.parametrize("text,named", [
    ("3 parsecs", "'parsecs'"), ("5 GiBs/s", "'GiBs/s'"), ("banana", "number"), ("GB", "number"),
    ("$3X", "'X'"), ("1.5*10^9 GB", "1.5e9"), ("2 x10^9", "1.5e9"), ("2 × 10^9", "1.5e9"), ("2*1e9", "1.5e9"), ("4 kiB", "'kiB'"),
])
def test_errors_name_the_problem(text, named):
    with pytest.raises(ValueError, match=named.replace("*", r"\*").replace("^", r"\^")) as err:
        parse_quantity(text)
    assert repr(text) in str(err.value) or "number" in str(err.value)


def test_non_strings_are_rejected():
    for bad in (208, None, b"208 GB"):
        with pytest.raises(ValueError, match="expected a string"):
            parse_quantity(bad)


def test_formatting_examples():
    assert fmt_bytes(208e9) == "208 GB" and fmt_bytes(208e9, binary=True) == "194 GiB"
    assert fmt_bytes(0) == "0 B" and fmt_bytes(512) == "512 B" and fmt_bytes(1500) == "1.5 KB"
    assert fmt_rate(50e9) == "50 GB/s"
    assert fmt_flops(1.2e15) == "1.2 PFLOP" and fmt_flops(3.15e23) == "3.15×10²³ FLOP"
    assert fmt_flops(989e12, per_second=True) == "989 TFLOP/s"
    assert fmt_seconds(0.399) == "399 ms" and fmt_seconds(2e-6) == "2 µs"
    assert fmt_seconds(3 * day) == "3 days" and fmt_seconds(90) == "1.5 min"
    assert fmt_seconds(2 * year) == "2 years" and fmt_seconds(5e-12) == "0.005 ns"


# ---- properties ---------------------------------------------------------------------------

magnitudes = st.floats(min_value=1e-6, max_value=1e30, allow_nan=False)
signs = st.sampled_from([1.0, -1.0])
digits = st.integers(min_value=3, max_value=8)


def _close(printed: str, value: float, digits: int) -> bool:
    """A value printed with `digits` significant digits is within half a unit of the last."""
    return math.isclose(parse_quantity(printed).value, value, rel_tol=5.01 * 10.0**-digits)


@settings(deadline=None)
@given(magnitudes, signs, st.booleans(), digits)
def test_bytes_round_trip(x, sign, binary, d):
    s = fmt_bytes(sign * x, binary=binary, digits=d)
    q = parse_quantity(s)
    assert q.dimension == "bytes" and _close(s, sign * x, d)
    assert q.binary == (binary and x >= 1024)  # below 1 KiB the unit is plain B


@settings(deadline=None)
@given(magnitudes, signs, digits)
def test_rate_flops_seconds_round_trip(x, sign, d):
    for s, dim in ((fmt_rate(sign * x, digits=d), "bytes/s"),
                   (fmt_flops(sign * x, digits=d), "flop"),
                   (fmt_flops(sign * x, per_second=True, digits=d), "flop/s"),
                   (fmt_seconds(sign * x, digits=d), "seconds")):
        assert parse_quantity(s).dimension == dim and _close(s, sign * x, d), s


@settings(deadline=None)
@given(st.floats(min_value=-1e20, max_value=1e20, allow_nan=False), st.sampled_from(
    ["B", "KB", "GB", "TiB", "Gb", "MB/s", "Gb/s", "ns", "µs", "ms", "s", "min", "h", "days",
     "years", "FLOP", "TFLOP/s", "PFLOPS", "%", "x", "USD", ""]))
def test_repr_of_any_float_parses_exactly(x, unit):
    """What Python prints for a float, followed by a unit, reads back as that float."""
    q = parse_quantity(f"{x!r} {unit}")
    scale = parse_quantity(f"1 {unit}").value
    assert q.value == x * scale and q.unit == unit


@settings(deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e12))
def test_gib_and_gb_never_equal(x):
    gib, gb = parse_quantity(f"{x!r} GiB").value, parse_quantity(f"{x!r} GB").value
    assert gib / gb == pytest.approx(GiB / GB, rel=1e-12)
    assert parse_quantity(f"{x!r} Gb").value * 8 == pytest.approx(gb, rel=1e-12)


@pytest.mark.parametrize("name", list(u._TIME))
def test_every_time_unit_parses(name):
    assert parse_quantity(f"2 {name}").value == 2 * u._TIME[name]


def test_fmt_num_prints_plain_digits_or_powers_of_ten():
    from dtbook.units import fmt_num
    cases = {(123.4, 2): "120", (0.01234, 2): "0.012", (12345, 3): "12,300", (1.0, 2): "1",
             (1.5, 2): "1.5", (5.88e23, 3): "5.88×10²³", (1.234e-4, 2): "1.2×10⁻⁴",
             (-3.25, 3): "-3.25", (0, 2): "0"}
    for (x, d), want in cases.items():
        assert fmt_num(x, d) == want, (x, d)
        assert "e+" not in fmt_num(x, d) and "e-" not in fmt_num(x, d)
    for x in (0.00123, 7.77, 42.0, 999.4, 55555.0):   # same value as g formatting, to its digits
        assert float(fmt_num(x, 3).replace(",", "")) == float(f"{x:.3g}")


@settings(deadline=None)
@given(magnitudes, signs, st.integers(min_value=1, max_value=8))
def test_formatters_never_print_python_exponents(x, sign, d):
    """Prose reads '220 ms' or '3.15×10²³', never '2.2e+02' (what `:.2g` gives for 220)."""
    for s in (fmt_bytes(sign * x, digits=d), fmt_bytes(sign * x, binary=True, digits=d),
              fmt_rate(sign * x, digits=d), fmt_flops(sign * x, digits=d),
              fmt_seconds(sign * x, digits=d)):
        assert "e+" not in s and "e-" not in s, s
