"""dtbook.plan: the capacity planner (chapter 27).

``estimate`` models one configuration (:mod:`dtbook.plan.estimate`), ``configurations`` and
``funnel`` enumerate the layouts that pass the constraints, ``search`` ranks them
(:mod:`dtbook.plan.search`), ``validate`` sets the model beside the published runs of
:mod:`dtbook.runs` (:mod:`dtbook.plan.validate`).
"""

from .estimate import Estimate, estimate
from .search import configurations, funnel, search
from .validate import validate

__all__ = ["Estimate", "estimate", "configurations", "funnel", "search", "validate"]
