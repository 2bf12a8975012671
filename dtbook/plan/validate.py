"""The planner beside published runs (chapter 27).

For each row of :mod:`dtbook.runs`, the planner's estimate of the published layout against
what the source reported, both as tokens per second of the whole job: the source's printed
figure is turned back into tokens/s with the source's own FLOP formula
(:func:`dtbook.runs.tokens_per_second`), so no FLOP convention has to agree. Nothing is
fitted to these rows.
"""

from __future__ import annotations

from .. import runs as _runs
from .estimate import estimate

__all__ = ["validate", "predict_run"]


def predict_run(run):
    """The planner's :class:`~dtbook.plan.Estimate` of a :class:`dtbook.runs.PublishedRun`'s
    layout (chapter 27)."""
    return estimate(run.model, gpus=run.gpus, gpu=run.gpu, tp=run.tp, pp=run.pp, dp=run.dp,
                    cp=run.cp, ep=run.ep, vpp=run.vpp, micro_batch=run.micro_batch,
                    global_batch=run.global_batch, seq=run.seq, zero=run.zero,
                    recompute=run.recompute, sequence_parallel=run.sequence_parallel,
                    dtype=run.dtype)


def validate(names=None) -> list[dict]:
    """One dict per published run: ``name``, ``predicted`` and ``reported`` tokens/s,
    ``error`` (predicted / reported - 1), the predicted ``tflops_per_gpu`` and ``mfu`` in the
    planner's convention, the reported figure converted to it (``reported_tflops_per_gpu``),
    ``memory_per_gpu`` and ``fits``. (Chapter 27.)"""
    rows = []
    for name in (names or _runs.names()):
        run = _runs.get(name)
        est = predict_run(run)
        reported = _runs.tokens_per_second(run)
        rows.append(dict(name=run.name, model=run.model, gpu=run.gpu, gpus=run.gpus,
                         predicted=est.tokens_per_second, reported=reported,
                         error=est.tokens_per_second / reported - 1,
                         tflops_per_gpu=est.tflops_per_gpu, mfu=est.mfu,
                         reported_tflops_per_gpu=est.tflops_per_gpu * reported / est.tokens_per_second,
                         memory_per_gpu=est.memory_per_gpu, fits=est.fits, source=run.source))
    return rows
