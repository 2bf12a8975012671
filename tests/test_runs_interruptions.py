"""dtbook.runs: Llama 3 405B's interruptions (Dubey et al. 2024, Table 5) add up as printed."""

import pytest

from dtbook.runs import LLAMA3_405B_INTERRUPTIONS as T5


def test_table5_rows_add_up_to_the_printed_unexpected_total():
    # Independent of how the catalog was typed: the 18 rows against the total the text prints
    # (419; the paper's rows add up to it exactly, a difference of 0).
    assert sum(c.count for c in T5.causes) - T5.unexpected == 0


def test_lookups_name_the_bad_argument():
    assert T5.count("Faulty GPU") == 148 and len(T5.category("GPU")) == 6
    with pytest.raises(ValueError, match="component"):
        T5.count("no such part")
    with pytest.raises(ValueError, match="category"):
        T5.category("no such category")


def test_printed_percentages_match_the_counts_but_one():
    # The printed shares against count/419, computed here: every row agrees to the printed
    # rounding except "Faulty GPU", printed 30.1% for 148 of 419 (35.3%); a mistyped count or
    # percentage in the catalog fails here.
    off = [c.component for c in T5.causes
           if abs(100 * c.count / T5.unexpected - c.percent) > 0.05 + 1e-9]
    assert off == ["Faulty GPU"]
