"""Shared test settings.

Hypothesis fails an example that runs past 200 ms by default: a wall-clock assert, which a
busy machine breaks (DESIGN.md, "Measuring on a shared machine"; seen under
benchmarks/under_load.sh). Property tests here check values, never speed, so the deadline
is off for all of them.
"""

from hypothesis import settings

settings.register_profile("book", deadline=None)
settings.load_profile("book")
