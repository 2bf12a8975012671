"""``dtbook plan MODEL --gpus N --batch B --seq S``: the planner from the shell (chapter 27).

Every knob of :func:`dtbook.plan.estimate` and :func:`dtbook.plan.search` is a flag; a model
the catalog lacks comes from a Hugging Face ``config.json`` (``--config``), an accelerator
the catalog lacks from a YAML or JSON file (``--accelerator``,
:func:`dtbook.hardware.register`). Bad input exits with status 2 and one line naming the
argument; a question with no answer (no layout passes the constraints) exits with status 1
and names the constraint that excluded the last candidates, with the funnel's counts.
"""

from __future__ import annotations

import argparse
import inspect
import sys

from .. import hardware, models
from .model import ATTENTION, PIPELINE_ENGINES, RECOMPUTE, estimate
from .search import _diagnose, search

_FIX = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch")
_SWITCHES = {   # estimate() keywords that are on/off, with what the flag says
    "sequence_parallel": "sequence parallelism (Megatron-SP) with TP (default: on)",
    "overlap_grad_reduce": "overlap the data-parallel gradient reduction with the last "
                           "backward (default: on; off: Megatron-LM and DeepSpeed before 2023)",
    "gradient_accumulation_fusion": "wgrad GEMMs accumulate into the FP32 buffer (default: "
                                    "on; off: Megatron-LM 2021, Megatron-DeepSpeed)",
}
# estimate() keywords the command line sets another way (positional, --gpus, --batch, ...)
_OWN = {"model", "gpus", "gpu", "global_batch", "seq", "zero", "recompute", "dtype",
        "gpus_per_node", "attention", "pipeline_engine", "node", *_FIX, *_SWITCHES}


def _at_least(minimum):
    """argparse type: a whole number >= ``minimum`` (``1_000_000`` is fine)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {minimum}, got {text!r}")
        return value
    return parse


_count, _whole = _at_least(0), _at_least(1)


def _extra_knobs():
    """estimate() keywords without a flag of their own above: each gets one from its default
    (on/off for a bool, a whole number for an int, text otherwise), so a knob added to the
    model is on the command line at once."""
    out = []
    for name, par in inspect.signature(estimate).parameters.items():
        if name in _OWN or par.kind is not par.KEYWORD_ONLY:
            continue
        out.append((name, par.default, str(par.annotation)))
    return out


def _parser():
    p = argparse.ArgumentParser(
        prog="dtbook plan", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Rank the parallel layouts of a model on a cluster by estimated step time\n"
                    "(chapter 27). Memory is in GiB (2**30 bytes), as HBM is sold.",
        epilog="examples:\n"
               "  dtbook plan llama3-70b --gpus 1024 --batch 1024 --seq 8192\n"
               "  dtbook plan --config config.json --gpus 256 --batch 512 --seq 4096 --dtype fp8\n"
               "  dtbook plan llama3-8b --accelerator my-gpu.yaml --gpus 64 --batch 512 --seq 8192\n"
               "  dtbook plan llama3-70b --gpus 1024 --batch 1024 --seq 8192 --tp 8 --pp 4 "
               "--dp 32 --explain\n"
               "exit status: 0 a table, 1 no layout fits (the constraint is named), 2 bad input\n"
               "an --accelerator file: python -c 'import dtbook.hardware as h; help(h.register)'")
    what = p.add_argument_group("the model and the run")
    what.add_argument("model", nargs="?", help="a dtbook.models name: " + ", ".join(models.names()))
    what.add_argument("--config", metavar="FILE", help="a Hugging Face config.json to plan "
                      "instead of a catalog model (Llama, Mixtral, Qwen-MoE, DeepSeek-V3 fields)")
    what.add_argument("--gpus", type=_whole, required=True, help="GPUs in the job")
    what.add_argument("--batch", type=_whole, required=True, help="global batch, in sequences")
    what.add_argument("--seq", type=_whole, required=True, help="sequence length, in tokens")
    what.add_argument("--allow-long-seq", action="store_true",
                      help="plan a sequence longer than the model's context (max_seq), as a "
                           "context-extension run does; without it such a --seq is refused")
    hw = p.add_argument_group("the hardware")
    hw.add_argument("--gpu", default=None, help="accelerator (default h100-sxm, or the one in "
                    "--accelerator); the planner knows " + ", ".join(hardware.plannable()))
    hw.add_argument("--accelerator", metavar="FILE", help="a YAML or JSON file describing your "
                    "own accelerator, its measured rates, links and node "
                    "(dtbook.hardware.register)")
    hw.add_argument("--node", help="a dtbook.hardware node whose links to use (default: the "
                    "first node holding the GPU): " + ", ".join(hardware.nodes()))
    hw.add_argument("--gpus-per-node", type=_whole, default=None,
                    help="GPUs per node (default: the node's, else 8)")
    sw = p.add_argument_group("the software")
    sw.add_argument("--dtype", default=None, help="precision of the layers' matmuls: bf16 "
                    "(default), fp16, fp8 (Transformer Engine)")
    sw.add_argument("--attention", choices=ATTENTION, default=None,
                    help="flash (default, a fused kernel) or unfused (the score matrix in HBM)")
    sw.add_argument("--pipeline-engine", choices=PIPELINE_ENGINES, default=None,
                    help="megatron (default) or deepspeed (four blocking transfers per "
                         "micro-batch, no interleaving)")
    for name, text in _SWITCHES.items():
        sw.add_argument("--" + name.replace("_", "-"), dest=name,
                        action=argparse.BooleanOptionalAction, default=None, help=text)
    for name, default, annotation in _extra_knobs():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            sw.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                            help=f"estimate's {name} (default: {default})")
        elif isinstance(default, int):
            sw.add_argument(flag, dest=name, type=_whole, default=None,
                            help=f"estimate's {name} (default: {default})")
        elif default is None and annotation.startswith("int"):   # e.g. int | None: 0 allowed
            sw.add_argument(flag, dest=name, type=_count, default=None,
                            help=f"estimate's {name} (default: chosen by the planner)")
        else:
            sw.add_argument(flag, dest=name, default=None,
                            help=f"estimate's {name} (default: {default})")
    fix = p.add_argument_group("fix part of the layout (the rest is searched)")
    for name in _FIX:
        fix.add_argument("--" + name.replace("_", "-"), dest=name, type=_whole, default=None)
    fix.add_argument("--zero", type=_zero_stages, default=None, metavar="{0,1,2,3}",
                     help="a ZeRO stage, or the stages a stack offers as a list, e.g. 0,1 "
                          "(Megatron's DDP and distributed optimizer): the search picks among them")
    fix.add_argument("--recompute", choices=RECOMPUTE, default=None)
    out = p.add_argument_group("output")
    out.add_argument("--top", type=_whole, default=10, help="rows to print (default 10)")
    out.add_argument("--explain", action="store_true", help="print the breakdown of the best "
                     "configuration, or of the one fixed with --tp/--pp/--dp")
    return p


_GIB = 2 ** 30


# the table's columns, header and cell: the layout, then step in seconds and GiB of memory
# per GPU (--explain prints TFLOP/s and the rest); short enough for a book page (70 columns)
_LAYOUT = (("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"), ("vpp", "vpp"),
           ("mb", "micro_batch"), ("zero", "zero"), ("recompute", "recompute"))
_COLUMNS = (*((head, lambda e, key=key: str(e.config[key])) for head, key in _LAYOUT),
            ("step s", lambda e: f"{e.step_time:.3f}"),
            ("tokens/s", lambda e: f"{e.tokens_per_second:,.0f}"),
            ("MFU", lambda e: f"{e.mfu:.1%}"),
            ("GiB", lambda e: f"{e.memory_per_gpu / _GIB:.1f}"))


def _table(estimates):
    """The header and one line per estimate, right-aligned; each column is as wide as its
    widest cell, header included, so a long value ("selective-op") widens its column
    instead of pushing the columns after it out of line."""
    cells = [[head for head, _ in _COLUMNS]]
    cells += [[cell(e) for _, cell in _COLUMNS] for e in estimates]
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    return [" ".join(text.rjust(w) for text, w in zip(row, widths, strict=True)) for row in cells]


def _explain(e):
    lines = [f"configuration: {e.config}", f"step time {e.step_time:.4f} s, "
             f"{e.tokens_per_second:,.0f} tokens/s, {e.tflops_per_gpu:.1f} TFLOP/s per GPU, "
             f"MFU {e.mfu:.1%}, memory {e.memory_per_gpu / _GIB:.1f} GiB "
             f"({'fits' if e.fits else 'does NOT fit'})"]
    for key, value in e.breakdown.items():
        unit = f"{value / _GIB:10.2f} GiB" if key.startswith("memory") else f"{value:10.4f} s"
        lines.append(f"  {key:<20}{unit}")
    return "\n".join(lines)


class _Refused(ValueError):
    """Bad input, with the message to print."""


def _model(args):
    if args.config is not None and args.model is not None:
        raise _Refused(f"give a model name or --config, not both (got {args.model!r} and "
                       f"--config {args.config!r})")
    if args.config is not None:
        reader = getattr(models, "from_hf_config", None)
        if reader is None:
            raise _Refused("--config needs dtbook.models.from_hf_config, which this version "
                           "of dtbook lacks")
        try:
            return reader(args.config)
        except (ValueError, OSError, KeyError, TypeError) as err:
            raise _Refused(f"--config {args.config}: {err}") from None
    if args.model is None:
        raise _Refused("give a model: a dtbook.models name (" + ", ".join(models.names())
                       + ") or --config config.json")
    try:
        return models.get(args.model)
    except ValueError:
        raise _Refused(f"unknown model {args.model!r}; known models: "
                       f"{', '.join(models.names())}; or --config config.json") from None


def _hardware(args):
    """(gpu name, node name or None, gpus per node), registering --accelerator first."""
    gpu = args.gpu
    if args.accelerator is not None:
        try:
            acc = hardware.register(args.accelerator)
        except ValueError as err:
            raise _Refused(f"--accelerator {args.accelerator}: {err}") from None
        gpu = gpu or acc.name
    gpu = (gpu or "h100-sxm").strip().lower()
    try:
        acc = hardware.get(gpu)
    except ValueError:
        raise _Refused(f"--gpu: unknown accelerator {args.gpu!r}; the planner knows "
                       f"{', '.join(hardware.plannable())} (or --accelerator FILE)") from None
    if not isinstance(acc, hardware.Accelerator):
        raise _Refused(f"--gpu: {args.gpu!r} is a link, not an accelerator; the planner knows "
                       f"{', '.join(hardware.plannable())}")
    node = args.node
    if node is not None:
        try:
            node = hardware.node(node).name
        except ValueError as err:
            raise _Refused(f"--node: {err}") from None
    gpn = args.gpus_per_node
    if gpn is None:
        holder = node or next((n for n in hardware.nodes()
                               if hardware.node(n).accelerator == acc.name), None)
        gpn = hardware.node(holder).gpus if holder else 8
    return acc.name, node, gpn


def _zero_stages(text):
    """``--zero``: one stage, or a comma-separated list of stages the search chooses among."""
    parts = [t.strip() for t in text.split(",")]
    if not all(t in ("0", "1", "2", "3") for t in parts):
        raise argparse.ArgumentTypeError(f"expected a stage 0, 1, 2 or 3, or a list such as 0,1; "
                                         f"got {text!r}")
    stages = tuple(sorted({int(t) for t in parts}))
    return stages[0] if len(stages) == 1 else stages


def _plan(args, err):
    cfg = _model(args)
    if args.seq > cfg.max_seq:
        text = (f"--seq {args.seq:,} is longer than the context of {cfg.name}, "
                f"{cfg.max_seq:,} tokens (its max_seq)")
        if not args.allow_long_seq:
            raise _Refused(text + "; pass --allow-long-seq to plan a context-extension run "
                                  "anyway")
        print(f"dtbook plan: warning: {text}; planned anyway (--allow-long-seq)", file=err)
    gpu, node, gpn = _hardware(args)
    fixed = {k: getattr(args, k) for k in _FIX if getattr(args, k) is not None}
    for k in ("zero", "recompute", "dtype", "attention", "pipeline_engine", *_SWITCHES,
              *(name for name, *_ in _extra_knobs())):
        if getattr(args, k) is not None:
            fixed[k] = getattr(args, k)
    if node is not None:
        fixed["node"] = node
    fixed["gpus_per_node"] = gpn
    run = dict(gpus=args.gpus, global_batch=args.batch, seq=args.seq, gpu=gpu)
    if args.explain and {"tp", "pp", "dp"} <= set(fixed) and not isinstance(args.zero, tuple):
        return cfg, run, fixed, [estimate(cfg, **run, **fixed)]
    return cfg, run, fixed, search(cfg, top=args.top, **run, **fixed)


def main(argv=None, *, out=None, err=None) -> int:
    """Run ``dtbook plan`` on ``argv`` (the process's arguments by default); returns the exit
    status: 0 with a table (or ``--explain``'s breakdown), 1 when no layout passes the
    constraints (the constraint that excluded them is named), 2 for bad input (argparse's
    message, or one line naming the argument). (Chapter 27.)"""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "plan":
        argv = argv[1:]
    args = _parser().parse_args(argv)         # exits 2 with argparse's message
    registered = set(hardware.registered())
    try:
        cfg, run, fixed, best = _plan(args, err)
        if not best:
            stages, why = _diagnose(cfg, **run, **fixed)
            print(f"dtbook plan: {why or 'no configuration fits'}", file=err)
            print("candidates left after each constraint:", file=err)
            for name, count in stages.items():
                print(f"  {name:<46}{count:>16,}", file=err)
            return 1
    except ValueError as error:
        print(f"dtbook plan: {error}", file=err)
        return 2
    finally:   # an --accelerator lives for this command only
        for name in set(hardware.registered()) - registered:
            hardware.unregister(name)
    if args.explain:
        print(_explain(best[0]), file=out)
    else:
        for line in _table(best):
            print(line, file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
