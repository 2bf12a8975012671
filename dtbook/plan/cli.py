"""``dtbook plan MODEL --gpus N --batch B --seq S``: the planner from the shell (chapter 27)."""

from __future__ import annotations

import argparse
import sys

from .. import models
from .model import RECOMPUTE, estimate
from .search import search

_FIX = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero")


def _parser():
    p = argparse.ArgumentParser(prog="dtbook plan", description="Rank parallel layouts of a "
                                "model on a cluster by estimated step time (chapter 27).")
    p.add_argument("model", help="a dtbook.models name: " + ", ".join(models.names()))
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="global batch, in sequences")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--gpu", default="h100-sxm")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--explain", action="store_true", help="print the breakdown of the best "
                   "configuration, or of the one fixed with --tp/--pp/...")
    for name in _FIX:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None)
    p.add_argument("--recompute", choices=RECOMPUTE, default=None)
    return p


def _row(e):
    c = e.config
    return (f"{c['tp']:>3}{c['pp']:>3}{c['dp']:>6}{c['cp']:>3}{c['ep']:>3}{c['vpp']:>4}"
            f"{c['micro_batch']:>3}{c['zero']:>5} {c['recompute']:>9}{e.step_time:>7.3f}"
            f"{e.tokens_per_second:>11,.0f}{e.mfu:>6.1%}{e.memory_per_gpu / 1e9:>6.1f}")


# short enough for a book page (70 columns): step in seconds, GB of memory per GPU; --explain
# prints TFLOP/s and the rest
_HEAD = " tp pp    dp cp ep vpp mb zero recompute step s   tokens/s   MFU    GB"


def _explain(e):
    lines = [f"configuration: {e.config}", f"step time {e.step_time:.4f} s, "
             f"{e.tokens_per_second:,.0f} tokens/s, {e.tflops_per_gpu:.1f} TFLOP/s per GPU, "
             f"MFU {e.mfu:.1%}, memory {e.memory_per_gpu / 1e9:.1f} GB "
             f"({'fits' if e.fits else 'does NOT fit'})"]
    for key, value in e.breakdown.items():
        unit = f"{value / 1e9:10.2f} GB" if key.startswith("memory") else f"{value:10.4f} s"
        lines.append(f"  {key:<20}{unit}")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "plan":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        models.get(args.model)
    except ValueError:
        print(f"dtbook plan: unknown model {args.model!r}; known models: "
              f"{', '.join(models.names())}", file=sys.stderr)
        return 2
    fixed = {k: getattr(args, k) for k in _FIX if getattr(args, k) is not None}
    if args.recompute is not None:
        fixed["recompute"] = args.recompute
    try:
        if args.explain and {"tp", "pp", "dp"} <= set(fixed):
            best = [estimate(args.model, gpus=args.gpus, gpu=args.gpu, global_batch=args.batch,
                             seq=args.seq, **fixed)]
        else:
            best = search(args.model, gpus=args.gpus, global_batch=args.batch, seq=args.seq,
                          gpu=args.gpu, top=args.top, **fixed)
    except ValueError as err:
        print(f"dtbook plan: {err}", file=sys.stderr)
        return 2
    if not best:
        print("dtbook plan: no configuration passes the constraints and fits in memory",
              file=sys.stderr)
        return 1
    if args.explain:
        print(_explain(best[0]))
    else:
        print(_HEAD)
        for e in best:
            print(_row(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
