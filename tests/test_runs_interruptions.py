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
