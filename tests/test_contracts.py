"""Every public formula function keeps its contract (DESIGN.md): a bad number gives a
ValueError that names the argument, quickly; nothing returns NaN or raises a bare TypeError,
ZeroDivisionError or OverflowError.

The functions are found by introspection, so a new formula module, or a new function in one,
is held to this without anyone listing it. Each needs one valid call to start from: most are
found by trying house values for the parameters (``HOUSE``); the few that take data, a config
or a name have theirs in ``BASELINES``. A function for which no valid call is known fails
the test, so none slips through untested.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import pathlib
import pkgutil
import re
import signal

import numpy as np
import pytest

import dtbook

# Modules that compute rather than run: every public function here is a formula.
NOT_FORMULAS = {
    # they run processes, measure, train, draw or parse text, and have tests of their own
    "dist", "_launcher", "_validate", "exercises", "microbench", "nn", "toylm", "plotting",
    "widgets", "measure", "symbolic", "units", "_renamed", "collectives", "parallel", "parallel.counting",
    "parallel.pipeline_parallel",  # a stage runner: tests/test_parallel_pipeline.py
    "parallel.data_parallel", "parallel.compression", "parallel.tensor_parallel", "parallel.moe", "parallel.zero",
    "parallel.sequence_parallel",
    "parallel.overlap",  # chapter 31: hooks and a timeline recorder, tests/test_overlap.py
    "parallel.axes",  # chapter 25: a (dp, cp, tp) block on gloo, tests/test_parallel_axes.py
    "parallel.composition",  # chapter 24: TP x PP x DP training on gloo, tests/test_parallel_composition.py
    "parallel.investigation",  # chapter 33: faults injected into gloo jobs, tests/test_parallel_investigation.py
    "parallel.profiling",  # chapter 32: trace reading and a profiled DDP job on gloo, tests/test_parallel_profiling.py
    "parallel.local_sgd",  # chapter 29: training loops and a parameter server, tests/test_local_sgd.py
    "parallel.resilience",  # chapter 26: torchft replicas on gloo, tests/test_parallel_resilience.py
    # catalogs: they take names, and name the bad one (tests/test_hardware.py, test_models.py)
    # (and the files of the two catalog packages, dtbook.hardware's four and dtbook.models' three)
    "hardware", "models", "runs",
    "hardware.catalog", "hardware.hierarchy", "hardware.measured", "hardware.custom",
    "models.config", "models.catalog", "models.hf_config",
    # the planner (chapter 27): tests/test_plan.py; these take configurations, run searches,
    # read the catalog of runs or parse a command line (plan.gemm and plan.model are walked).
    # plan.terms: the model's terms over candidate arrays estimate() and search() have
    # checked, each set beside the chapter function it calls in tests/test_plan_terms.py
    "plan", "plan.search", "plan.cli", "plan.validate", "plan.terms", "__main__",
    "plan.terms.job", "plan.terms.compute", "plan.terms.memory_bound", "plan.terms.footprint",
    "plan.terms.communication", "plan.terms.fsdp2", "plan.terms.stages",  # plan.terms' files
    # reads the book's own records (the corrections appendix), and the reference shelf's generator
    "edition", "reference",
    # runs searches over a candidate list (tests/test_search_strategies.py)
    "search_strategies",
    "decoding",  # chapter 36: rolling-buffer KV cache and speculative sampler, tests/test_decoding.py, tests/test_speculative.py
}
# Functions of formula modules that are not formulas: they run a loader or write files.
NOT_FORMULA_FUNCTIONS = {"datapipe.make_tokens", "datapipe.write_shards", "datapipe.run_loader",
                         # read logs or run a test (tests/test_investigation.py)
                         "investigation.classify", "investigation.triage", "investigation.bisect",
                         "investigation.simulate_event_log", "investigation.event_risk_ratios",
                         "investigation.localize",
                         "activations.saved_tensors",
                         "schedules.from_torch",  # reads PyTorch's action objects
                         # the planner's lookups by name or object, and estimate()'s own
                         # steps, which every bad number to estimate() reaches
                         "plan.model.resolve_model", "plan.model.evaluate"}

HOUSE = {"world": 8, "p": 8, "P": 8, "tp": 8, "dp": 8, "pp": 4, "params": 7e9, "tokens": 1e12,
         "nbytes": 1e9, "n": 1e9, "alpha": 1e-5, "beta": 5e10, "mfu": 0.4, "peak_flops": 1e15,
         "batch": 8, "seq": 2048, "hidden": 4096, "layers": 32, "heads": 32, "vocab": 32000}
TRIES = [None, 8, 0.5, 2, 1e9, 0.1, 1.0, 100, 1e-5, 3]


def _baselines():
    from dtbook import models

    cfg = models.get("llama3-8b")
    x = np.array([1e6, 1e7, 1e8, 1e9, 1e10])
    return {
        "investigation.bisection_steps": dict(good=8, bad=64),
        "activations.alternate_matmul_saved_bytes": dict(tokens=4096, matmul_widths=[4096, 1024, 1024],
                                                         block_input=4096, attention_output=4096),
        "speculative.acceptance_rate": dict(target=np.array([0.5, 0.3, 0.2]),
                                            draft=np.array([0.2, 0.2, 0.6])),
        "speculative.accepted_distribution": dict(target=np.array([0.5, 0.3, 0.2]),
                                                  draft=np.array([0.2, 0.2, 0.6])),
        "compression.eckart_young_error": dict(singular_values=np.array([3.0, 2.0, 1.0]), rank=1),
        "batchsize.estimate_grad_sq": dict(grad_sq_small=2.0, grad_sq_big=1.5, batch_small=8,
                                           batch_big=64),
        "batchsize.estimate_trace_cov": dict(grad_sq_small=2.0, grad_sq_big=1.5, batch_small=8,
                                             batch_big=64),
        "batchsize.noise_from_two_batches": dict(grad_sq_small=2.0, grad_sq_big=1.5,
                                                 batch_small=8, batch_big=64),
        "batchsize.fit_steps": dict(batch=np.array([32.0, 64, 128, 256, 512]),
                                    steps=np.array([1e4 * (1 + 100 / b) for b in (32, 64, 128, 256, 512)])),
        "batchsize.noise_from_per_example": dict(grads=np.random.default_rng(0).normal(size=(16, 5))),
        "comm.fit_alpha_beta": dict(sizes=np.array([1e3, 1e4, 1e5, 1e6, 1e7]),
                                    times=1e-5 + np.array([1e3, 1e4, 1e5, 1e6, 1e7]) / 5e9),
        "calibration.fit_scale_factors": dict(compute=np.array([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]),
                                              comm=np.array([5e-3, 1e-3, 4e-3, 2e-4, 3e-3]),
                                              measured=np.array([9e-3, 6e-3, 1.3e-2, 1.7e-2, 3.6e-2])),
        "comm.algorithms": dict(collective="allreduce"),
        "comm.traffic": dict(collective="allreduce", n=1e9, p=8),
        "comm.bus_factor": dict(collective="allreduce", p=8),
        **{f"mesh.{f}": dict(dims=(8, 4, 8)) for f in ("world_size", "total_groups", "axis_strides")},
        "mesh.rank_of": dict(coords=(1, 2, 3), dims=(8, 4, 8)),
        "moe.rank_of": dict(tp_index=1, ep_index=2, dp_index=3, tp=4, ep=8),
        "mesh.local_shape": dict(shape=(64, 32), dims=(2, 4), placements=("R", "S0")),
        "mesh.redistribution": dict(src="S0", dst="R", nbytes=1e9, p=8),
        "mesh.redistribute_time": dict(src="S0", dst="R", nbytes=1e9, p=8, alpha=1e-5, beta=5e10),
        "mesh.axis_in_node": dict(dims=(4, 8), axis=1, gpus_per_node=8),
        "mesh.axis_members_per_node": dict(dims=(4, 8), axis=0, gpus_per_node=8),
        "mesh.axis_link": dict(dims=(4, 8), axis=1, gpus_per_node=8, alpha_in=1e-6, beta_in=4.5e11,
                               alpha_out=2e-6, beta_out=5e10),
        "axes.min_capacity_factor": dict(fractions=[0.3, 0.05, 0.25, 0.1, 0.05, 0.1, 0.1, 0.05]),
        "axes.dropped_tokens": dict(fractions=[0.3, 0.05, 0.25, 0.1, 0.05, 0.1, 0.1, 0.05],
                                    tokens=1000),
        "cost.price": dict(device="h100-sxm"),
        "datapipe.pipeline_throughput": dict(_args=(1e3, 2e3, 5e2)),
        "fermi.combined_factor": dict(_args=(2.0, 3.0)),
        "fermi.worst_case_factor": dict(_args=(2.0, 3.0)),
        "flops.matmul_params": dict(cfg=cfg),
        "kv_cache.bytes_per_token_layer": dict(cfg=cfg),  # chapter 31a
        "flops.transformer_matmul_flops": dict(cfg=cfg, batch=4, seq=2048),
        "flops.layer_matmul_flops": dict(cfg=cfg, index=3, batch=4, seq=2048),
        "flops.lm_head_matmul_flops": dict(cfg=cfg, batch=4, seq=2048),
        "flops.block_gemms": dict(cfg=cfg, index=3),
        "scaling.fit_power_law": dict(x=x, y=3.0 * x ** -0.3),
        "scaling.fit_broken_power_law": dict(x=x, y=3.0 * x ** -0.3),
        "scaling.break_evidence": dict(x=x, y=3.0 * x ** -0.3),
        "pipeline_parallel.load_balance_efficiency": dict(stage_times=[3.0, 4.0, 5.0]),
        "pipeline_parallel.stage_times": dict(layer_times=[1.0, 2.0, 3.0, 4.0], boundaries=[2]),
        "pipeline_parallel.best_partition": dict(layer_times=[1.0, 2.0, 3.0, 4.0], p=2),
        **{f"moe.{f}": dict(load=[4.0, 2.0, 1.0, 1.0])
           for f in ("normalized_entropy", "gini", "max_min_ratio", "max_mean_ratio")},
        **{f"moe.{f}": dict(fractions=[0.6, 0.4], probabilities=[0.6, 0.4])
           for f in ("aux_loss", "aux_gradient_direction")},
        "moe.dispatch_matrix": dict(shares=[0.5, 0.25, 0.125, 0.125], tokens=64, world=2),
        **{f"moe.{f}": dict(shares=[0.5, 0.25, 0.125, 0.125], tokens=64, hidden=4096, world=2)
           for f in ("dispatch_sent_bytes", "dispatch_received_bytes")},
        **{f"schedules.{f}": dict(schedule="1f1b", stages=4, microbatches=8)
           for f in ("build", "simulate")},
        **{f"schedules.{f}": dict(stages=4, microbatches=8) for f in ("book_1f1b", "dualpipe_v")},
        "schedules.table2_bubble": dict(schedule="1f1b", stages=4, t_forward=1.0, t_backward=2.0),
        "plan.model.estimate": dict(model="llama3-8b", gpus=64, tp=8, pp=2, dp=4, seq=4096,
                                       global_batch=256),
        "plan.model.layer_time": dict(model="llama3-8b", tp=8, micro_batch=2, seq=4096),
        "scaling.isoflop_minimum": dict(params=np.array([1e8, 3e8, 1e9, 3e9, 1e10]),
                                        losses=np.array([3.1, 2.9, 2.85, 2.9, 3.05])),
    }


class _Hung(Exception):
    pass


def _alarm(*_):
    raise _Hung


def _call(fn, kwargs, seconds=3.0):
    args = kwargs.get("_args", ())
    kw = {k: v for k, v in kwargs.items() if k != "_args"}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args, **kw)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _functions():
    out = []
    for info in pkgutil.walk_packages(dtbook.__path__, "dtbook."):
        short = info.name.removeprefix("dtbook.")
        if short in NOT_FORMULAS or short.split(".")[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        for name, fn in sorted(vars(module).items()):
            if (inspect.isfunction(fn) and not name.startswith("_") and fn.__module__ == info.name
                    and f"{short}.{name}" not in NOT_FORMULA_FUNCTIONS):
                out.append((f"{short}.{name}", fn))
    return out


FUNCTIONS = _functions()
BASELINES = _baselines()


def _baseline(qualname, fn):
    if qualname in BASELINES:
        return BASELINES[qualname]
    required = [p for p in inspect.signature(fn).parameters.values()
                if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for value in TRIES:
        kwargs = {p.name: HOUSE.get(p.name, 8 if value is None else value) for p in required}
        try:
            _call(fn, kwargs)
            return kwargs
        except Exception:
            continue
    return None


def _finite(x) -> bool:
    if isinstance(x, (bool, np.bool_, str)) or x is None:
        return True
    if isinstance(x, numbers.Number):
        return isinstance(x, numbers.Real) and math.isfinite(x)
    if isinstance(x, np.ndarray):
        return x.dtype.kind not in "fc" or bool(np.all(np.isfinite(x)))
    if isinstance(x, (tuple, list)):
        return all(_finite(v) for v in x)
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    return True  # result objects: their own tests look inside


# Values no formula takes for a number, and the values some formulas take and others refuse.
MUST_REFUSE = [None, float("nan"), "12", 1 + 1j, True, float("inf")]
MAY_REFUSE = [-1.0, 0, 10**400]


# Formula functions walked here that do not yet keep the contract, and what is left to do in
# them (their modules belong to other chapters). Strict: once one is fixed, its entry must go.
KNOWN_GAPS = {
}


def _walked(functions):
    return [pytest.param(q, fn, id=q, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[q]))
            if q in KNOWN_GAPS else pytest.param(q, fn, id=q) for q, fn in functions]


def test_known_gaps_are_walked():
    assert set(KNOWN_GAPS) <= {q for q, _ in FUNCTIONS}


def _try_bad(fn, base, name, bad, problems, width):
    """Call fn with argument `name` spoilt; return (raised, output). A ValueError that names the
    argument is the contract; any other exception, or a hang, is written to `problems`."""
    shown = f"{name}={bad!r:.{width}}"
    try:
        return False, _call(fn, dict(base, **{name: bad}))
    except ValueError as e:
        if not re.search(rf"\b{re.escape(name)}\b", str(e)):
            problems.append(f"{shown}: ValueError names another argument: {e}")
    except _Hung:
        problems.append(f"{shown}: did not return within 3 s")
    except Exception as e:
        problems.append(f"{shown}: {type(e).__name__}: {e}"[:200])
    return True, None


@pytest.mark.parametrize("qualname,fn", _walked(FUNCTIONS))
def test_every_formula_refuses_bad_numbers_by_name(qualname, fn):
    base = _baseline(qualname, fn)
    assert base is not None, (f"{qualname}: no valid call found; add one to BASELINES in "
                              "tests/test_contracts.py")
    numeric = [k for k, v in base.items() if k != "_args" and isinstance(v, numbers.Real)
               and not isinstance(v, bool)]
    problems = []
    for name in numeric:
        for bad in MUST_REFUSE + MAY_REFUSE:
            if "intensity" in name and bad == float("inf"):
                continue  # moving no bytes is an infinite intensity, and allowed
            refused, out = _try_bad(fn, base, name, bad, problems, 20)
            if refused:
                continue
            if any(bad is b for b in MUST_REFUSE) or (isinstance(bad, float) and bad != bad):
                problems.append(f"{name}={bad!r:.20}: accepted, returned {out!r:.60}")
            elif not _finite(out):
                problems.append(f"{name}={bad!r:.20}: returned a non-finite {out!r:.60}")
    assert not problems, f"{qualname}:\n  " + "\n  ".join(problems)


def _numeric_array(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "iuf" and value.size > 0
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value))


def _bad_arrays(value):
    """An array or list argument spoilt three ways: a NaN inside, complex, a None inside."""
    arr = np.asarray(value, dtype=float)
    nan = arr.copy()
    nan.flat[0] = np.nan
    out = [nan if isinstance(value, np.ndarray) else type(value)(nan.tolist()), arr + 1j]
    if arr.ndim == 1:
        items = [None] + arr.tolist()[1:]
        out.append(np.array(items, dtype=object) if isinstance(value, np.ndarray)
                   else type(value)(items))
    return out


@pytest.mark.parametrize("qualname,fn", FUNCTIONS, ids=[q for q, _ in FUNCTIONS])
def test_every_formula_refuses_bad_arrays_by_name(qualname, fn):
    # the fit functions took complex data with a bare TypeError; an object array hid a None
    base = _baseline(qualname, fn)
    assert base is not None, f"{qualname}: no valid call found; add one to BASELINES"
    problems = []
    for name in [k for k, v in base.items() if k != "_args" and _numeric_array(v)]:
        for bad in _bad_arrays(base[name]):
            refused, out = _try_bad(fn, base, name, bad, problems, 40)
            if not refused:
                problems.append(f"{name}={bad!r:.40}: accepted, returned {out!r:.60}")
    assert not problems, f"{qualname}:\n  " + "\n  ".join(problems)


# Formula functions that do not yet refuse an array holding a negative value by name, and
# why (their modules belong to other chapters). Strict, like KNOWN_GAPS.
KNOWN_ARRAY_GAPS = {
}


def _holding_a_negative(fn, value):
    """The argument as an array holding a negative value; as a list and a tuple too where the
    module turns lists into arrays (``guard_module(..., arrays=True)``): elsewhere ``[a, b] * 3``
    is list repetition, which no check sees before the arithmetic runs."""
    out = [np.array([value, -1.0])]
    if getattr(fn, "lists_as_arrays", False):
        out += [[value, -1.0], (value, -1.0), [value, value]]
    return out


@pytest.mark.parametrize("qualname,fn", [
    pytest.param(q, fn, id=q, marks=pytest.mark.xfail(strict=True, reason=KNOWN_ARRAY_GAPS[q]))
    if q in KNOWN_ARRAY_GAPS else pytest.param(q, fn, id=q) for q, fn in FUNCTIONS])
def test_every_formula_takes_or_refuses_many_values_by_name(qualname, fn):
    # roofline.binding_ceiling, scaling.inference_aware_optimal and scaling.capability raised
    # a bare TypeError on a list holding a negative value
    base = _baseline(qualname, fn)
    assert base is not None, f"{qualname}: no valid call found; add one to BASELINES"
    problems = []
    for name in [k for k, v in base.items() if k != "_args" and isinstance(v, numbers.Real)
                 and not isinstance(v, bool)]:
        for bad in _holding_a_negative(fn, base[name]):
            _try_bad(fn, base, name, bad, problems, 40)
    assert not problems, f"{qualname}:\n  " + "\n  ".join(problems)


def test_known_array_gaps_are_walked():
    assert set(KNOWN_ARRAY_GAPS) <= {q for q, _ in FUNCTIONS}


@pytest.mark.parametrize("call,name", [
    (lambda v: __import__("dtbook").roofline.binding_ceiling(v, 3e12, 100.0, 5e10, 1000.0), "peak_flops"),
    (lambda v: __import__("dtbook").roofline.binding_ceiling(1e15, 3e12, 100.0, 5e10, v), "net_intensity"),
    (lambda v: __import__("dtbook").scaling.inference_aware_optimal(v, 1e12), "target_loss"),
    (lambda v: __import__("dtbook").scaling.inference_aware_optimal(2.5, v), "inference_tokens"),
    (lambda v: __import__("dtbook").scaling.capability(v, 2.0, 0.1), "loss_value"),
    (lambda v: __import__("dtbook").scaling.capability(2.0, v, 0.1), "threshold"),
])
def test_the_reported_list_inputs_are_refused_by_name(call, name):
    for bad in ([2.0, -1.0], (2.0, -1.0), np.array([2.0, -1.0])):
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            call(bad)


# Arguments that are one choice, not a quantity (a ZeRO stage, a mesh axis), in modules that
# take tuples on purpose (mesh dims), so the walk above tries only arrays there: the list and
# tuple forms, for the calls issue 20 found giving a bare TypeError.
@pytest.mark.parametrize("call,name,value", [
    (lambda v: __import__("dtbook").memory.zero_state_bytes(7e9, 8, v), "stage", 2),
    (lambda v: __import__("dtbook").memory.zero_state_breakdown(7e9, 8, v), "stage", 2),
    (lambda v: __import__("dtbook").zero.memory_limit(7e9, v), "stage", 2),
    (lambda v: __import__("dtbook").zero.memory_reduction(8, v), "stage", 2),
    (lambda v: __import__("dtbook").zero.step_comm_bytes(7e9, 8, v), "stage", 2),
    (lambda v: __import__("dtbook").mesh.axis_in_node((4, 8), v, 8), "axis", 1),
    (lambda v: __import__("dtbook").mesh.axis_link((4, 8), v, 8, 1e-6, 4.5e11, 2e-6, 5e10),
     "axis", 1),
])
def test_a_single_choice_refuses_several_values_by_name(call, name, value):
    call(value)  # the valid call
    for bad in ([value, -1], (value, -1), np.array([value, -1]), [value, value]):
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            call(bad)


@pytest.mark.parametrize("call,name,value", [
    (lambda v: __import__("dtbook").axes.cp_ring_bytes(8, 2048, 4096, v), "cp", 8),
    (lambda v: __import__("dtbook").data_parallel.overlap_fraction(v, 1.0, 8), "t_backward", 2.0),
    (lambda v: __import__("dtbook").sequence_parallel.ring_kv_bytes(8, 2048, 4096, v), "world", 8),
])
def test_lists_holding_a_negative_are_refused_by_name(call, name, value):
    # these modules turn lists into arrays, so a list works as its array does
    assert np.array_equal(call([value, value]), call(np.array([value, value], dtype=float)))
    for bad in ([value, -1.0], (value, -1.0)):
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            call(bad)


def test_a_list_of_gradients_is_taken_by_magnitude():
    from dtbook import precision

    # a gradient may be negative: min_loss_scale scales |g|, for a list as for an array
    grads = [1e-6, -1e-6, -1.0]
    assert np.array_equal(precision.min_loss_scale(grads), precision.min_loss_scale(np.array(grads)))
    assert np.array_equal(precision.min_loss_scale(grads), [64.0, 64.0, 1.0])


def test_lists_of_numbers_work_like_arrays_where_the_formula_is_elementwise():
    from dtbook import roofline, scaling

    losses = [1.9, 2.0, 2.1]
    assert np.array_equal(scaling.capability(losses, 2.0, 0.1),
                          scaling.capability(np.array(losses), 2.0, 0.1))
    assert np.array_equal(roofline.ridge_point([1e15, 2e15], 3e12),
                          np.array([1e15, 2e15]) / 3e12)
    with pytest.raises(ValueError, match="single number"):
        roofline.binding_ceiling([1e15, 2e15], 3e12, 100.0, 5e10, 1000.0)


# The calls a fuzzer found returning nonsense, dividing by zero or never returning.
FOUND = [
    ("comm.allreduce_time", (1e9, 8, None, 5e10), "alpha"),
    ("comm.allreduce_time", (1e9, 8, 1e-5, None), "beta"),
    ("comm.allreduce_time", (10**400, 8, 1e-5, 5e10), "n"),
    ("roofline.binding_ceiling", (None, 3e12, 100.0, 5e10, 1000.0), None),
    ("scaling.capability", (None, 2.0, 0.1), "loss_value"),
    ("scaling.capability", (float("nan"), 2.0, 0.1), "loss_value"),
    ("scaling.lifetime_flops", (1e9, 2e10, -1), "inference_tokens"),
    ("scaling.emergence_params", (-1,), "threshold"),
    ("scaling.information_criterion", (-1.0, 20, 2), "rss"),
    ("scaling.loss_gap", (1.0, 0.1), "probability"),
    ("cost.failure_multiplier_exact", (1.0, 1e6), "failure_rate"),
    ("cost.simulate_failures", (86400, 1.0, 3600), "failure_rate"),
]


@pytest.mark.parametrize("qualname,args,name", FOUND, ids=[f"{q}{i}" for i, (q, _, _) in enumerate(FOUND)])
def test_what_the_fuzzer_found_is_refused_by_name(qualname, args, name):
    module, func = qualname.split(".")
    fn = getattr(importlib.import_module(f"dtbook.{module}"), func)
    params = list(inspect.signature(fn).parameters)
    with pytest.raises(ValueError) as info:
        _call(fn, dict(zip(params, args)))
    expected = name or next(p for p, a in zip(params, args) if a is None)
    assert re.search(rf"\b{expected}\b", str(info.value)), str(info.value)


def test_symbols_still_pass_through():
    import sympy as sp

    from dtbook import comm, flops, scaling
    from dtbook import symbolic as S

    assert comm.allreduce_time(S.nbytes, S.world, S.alpha, S.beta).free_symbols
    assert flops.training_flops(S.params, S.tokens) == 6 * S.params * S.tokens
    assert isinstance(scaling.loss_gap(sp.Symbol("p", positive=True), S.mfu), sp.Basic)


def test_every_subpackage_is_installed():
    # pyproject.toml lists the packages explicitly, so a new subpackage missing from the list
    # works in the editable install this suite runs from and is absent from a wheel
    tomllib = pytest.importorskip("tomllib")
    root = pathlib.Path(dtbook.__file__).parent
    with open(root.parent / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = {"dtbook"} | {m.name for m in pkgutil.walk_packages([str(root)], "dtbook.")
                          if m.ispkg}
    assert listed == found
