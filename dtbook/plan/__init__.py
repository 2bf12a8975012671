"""dtbook.plan: the capacity planner (chapter 27).

``estimate`` models one configuration (:mod:`dtbook.plan.model`), ``configurations`` and
``funnel`` enumerate the layouts that pass the constraints, ``search`` ranks them
(:mod:`dtbook.plan.search`), ``validate`` sets the model beside the published runs of
:mod:`dtbook.runs` and ``validate_layers`` one layer (``layer_time``) beside published
per-layer measurements, and ``summary`` measures those rows against the stated target,
``TARGET_MEDIAN`` and ``TARGET_WORST`` (:mod:`dtbook.plan.validate`).
"""

from .model import Estimate, estimate, layer_time
from .search import configurations, funnel, search
from .validate import TARGET_MEDIAN, TARGET_WORST, summary, validate, validate_layers

__all__ = ["Estimate", "estimate", "layer_time", "configurations", "funnel", "search", "validate",
           "validate_layers", "summary", "TARGET_MEDIAN", "TARGET_WORST"]
