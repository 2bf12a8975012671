"""dtbook: the formulas, catalogs and tools behind *The Algebra of Distributed Training*.

Each formula lives in exactly one module and names the chapter that derives it. Formula
functions are plain arithmetic, so they accept Python numbers, NumPy arrays and SymPy
symbols alike: the same call prints as algebra in a derivation and evaluates as a number in
a check.

Names follow one rule. A topic has one name, and the name is the same wherever the topic
appears: ``dtbook.<topic>`` holds its formulas (what a chapter derives: ``tensor_parallel``,
``moe``, ``composition``), and ``dtbook.parallel.<topic>`` holds the runnable version of the
same topic that the chapter's demo executes on gloo ranks (``dtbook.parallel.tensor_parallel``,
``dtbook.parallel.moe``, ``dtbook.parallel.composition``). A module with no runnable half has
no twin, and ``dtbook.parallel.counting`` is a tool that counts any of them. Runnable code
that runs in one process is named for what it is (``nn``, ``toylm``, ``decoding``: chapter
36's rolling-buffer cache and speculative sampler, whose formulas are ``speculative``). The capacity
planner is ``dtbook.plan`` (``plan.model`` its step-time and memory model, ``plan.terms`` the
terms that model composes, ``plan.search``, ``plan.validate``); chapter 06's back-of-envelope
estimates are ``dtbook.fermi``. Old names keep importing, with a ``DeprecationWarning``
(``dtbook._renamed``).
"""

from . import _renamed

_renamed.install()

__version__ = "0.1.0"
