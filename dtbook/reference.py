"""The reference shelf: the quick-reference formula sheet and the hardware tables, generated
from the library when the book is built (appendices "Quick reference" and "Hardware
assumptions and units").

The sheet holds no formula of its own. Each entry names a ``dtbook`` function and the call
that evaluates it with SymPy symbols; :func:`formula_sheet` makes that call and typesets what
comes back, so the page prints what the library computes and a renamed or missing function
stops the build. The groups follow the curriculum's formula sheet (compute and time, memory,
scaling, collectives, traffic per step, bubbles, ZeRO), and each entry links the chapter
that derives it.
"""

from __future__ import annotations

import html
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import sympy as sp

__all__ = ["Entry", "Formula", "ENTRIES", "GROUPS", "SANITY_CHECKS", "PLACEMENT", "SYMBOLS", "SYMBOL_LEGEND",
           "formula_sheet", "sheet_markdown", "checklist_markdown", "chapter_link",
           "accelerator_rows", "memory_rows", "link_rows", "node_rows", "measured_rows", "ridge_rows",
           "html_table", "SOURCE_KEYS", "source_keys", "catalog_sources",
           "cited_sources_markdown"]

# --------------------------------------------------------------------------------------
# Symbols, named as the book names them (DESIGN.md, "Names")
# --------------------------------------------------------------------------------------
_pos = dict(positive=True)
SYMBOLS = {
    "params": sp.Symbol(r"\Psi", **_pos), "tokens": sp.Symbol("D", **_pos),
    "world": sp.Symbol("P", **_pos), "peak": sp.Symbol("F", **_pos),
    "mfu": sp.Symbol(r"\eta", **_pos), "rate": sp.Symbol(r"R_{\mathrm{tok}}", **_pos),
    "n": sp.Symbol("n", **_pos), "alpha": sp.Symbol(r"\alpha", **_pos),
    "beta": sp.Symbol(r"\beta", **_pos), "batch": sp.Symbol("B", **_pos),
    "seq": sp.Symbol("S", **_pos), "hidden": sp.Symbol("H", **_pos),
    "heads": sp.Symbol("A", **_pos), "layers": sp.Symbol("L", **_pos),
    "vocab": sp.Symbol("V", **_pos), "interval": sp.Symbol("k", **_pos),
    "layer_bytes": sp.Symbol(r"M^{\mathrm{layer}}", **_pos),
    "compute": sp.Symbol("C", **_pos), "inner": sp.Symbol("G", **_pos),
    "nodes": sp.Symbol("N", **_pos),
    "alpha_nv": sp.Symbol(r"\alpha_{\mathrm{NV}}", **_pos),
    "beta_nv": sp.Symbol(r"\beta_{\mathrm{NV}}", **_pos),
    "seconds": sp.Symbol("T", **_pos), "bytes": sp.Symbol("s", **_pos),
    "tp": sp.Symbol("t", **_pos), "cp": sp.Symbol("c", **_pos),
    "p": sp.Symbol("p", **_pos), "m": sp.Symbol("m", **_pos), "v": sp.Symbol("v", **_pos),
    "t_f": sp.Symbol("t_F", **_pos), "t_b": sp.Symbol("t_B", **_pos),
    "t_w": sp.Symbol("t_W", **_pos), "fraction": sp.Symbol("f", **_pos),
}
_ = SYMBOLS   # (short, for the table of entries below)
_log2 = sp.Function(r"\log_2")


@dataclass(frozen=True)
class Entry:
    """One line of the sheet: ``what`` it gives, the ``lhs`` it is written as (LaTeX), the
    ``function`` (``"module.name"`` under ``dtbook``), the ``call`` shown on the page and the
    ``evaluate`` that makes it with SymPy symbols, the ``chapter`` that derives it."""

    group: str
    what: str
    lhs: str
    function: str
    call: str
    evaluate: Callable
    chapter: str


@dataclass(frozen=True)
class Formula:
    """An :class:`Entry` evaluated: ``expr`` is what the dtbook function returned."""

    entry: Entry
    expr: sp.Expr

    @property
    def latex(self) -> str:
        expr = self.expr
        for sym in expr.free_symbols:   # log(P)/log(2) as log2 P, the way the chapters write it
            expr = expr.subs(sp.log(sym), sp.log(2) * _log2(sym))
        # each term factored: 2α(P − 1), not α(2P − 2)
        if expr.is_Add and len(expr.free_symbols) > 1:
            return sp.latex(sp.Add(*(sp.factor_terms(t) for t in expr.args), evaluate=False))
        return sp.latex(sp.factor_terms(expr))       # 3(c − 1), not 3c − 3


GROUPS = ("Compute and time", "Memory", "Scaling", "Collectives", "Traffic per step",
          "Pipeline bubbles", "ZeRO")

ENTRIES: tuple[Entry, ...] = (
    # compute and time ------------------------------------------------------------
    Entry("Compute and time", "training compute", "C", "flops.training_flops",
          "training_flops(Ψ, D)", lambda f: f(_["params"], _["tokens"]), "01"),
    Entry("Compute and time", "training time on P devices", r"T_{\mathrm{train}}",
          "flops.training_time", "training_time(Ψ, D, F, η, P)",
          lambda f: f(_["params"], _["tokens"], _["peak"], _["mfu"], _["world"]), "01"),
    Entry("Compute and time", "tokens per second", r"R_{\mathrm{tok}}",
          "flops.tokens_per_second", "tokens_per_second(Ψ, F, η, P)",
          lambda f: f(_["params"], _["peak"], _["mfu"], _["world"]), "01"),
    Entry("Compute and time", "model FLOPs utilization (MFU)", r"\eta", "flops.mfu",
          "mfu(R_tok, Ψ, F, P)", lambda f: f(_["rate"], _["params"], _["peak"], _["world"]), "01"),
    Entry("Compute and time", "ridge point of a ceiling of bandwidth β", r"I^{*}",
          "roofline.ridge_point", "ridge_point(F, β)", lambda f: f(_["peak"], _["beta"]), "02"),
    Entry("Compute and time", "FLOPs of one step, Megatron's count with full recompute",
          r"C_{\mathrm{step}}", "composition.megatron_step_flops",
          "megatron_step_flops(B, S, L, H, V)",
          lambda f: f(_["batch"], _["seq"], _["layers"], _["hidden"], _["vocab"]), "24"),
    # memory -------------------------------------------------------------------------
    Entry("Memory", "model states, mixed precision with Adam", r"M_{\mathrm{static}}",
          "memory.model_state_bytes", "model_state_bytes(Ψ)", lambda f: f(_["params"]), "01"),
    Entry("Memory", "activations of one layer (bytes)", r"M^{\mathrm{layer}}",
          "activations.layer_activation_bytes", "layer_activation_bytes(B, S, H, A)",
          lambda f: f(_["batch"], _["seq"], _["hidden"], _["heads"]), "06"),
    Entry("Memory", "activations with a checkpoint every k layers", r"M_{\mathrm{ckpt}}",
          "activations.checkpointed_activation_bytes",
          "checkpointed_activation_bytes(L, M_layer, k, 2BSH)",
          lambda f: f(_["layers"], _["layer_bytes"], _["interval"],
                      2 * _["batch"] * _["seq"] * _["hidden"]), "06"),
    Entry("Memory", "the interval that minimises it", "k^{*}",
          "activations.optimal_checkpoint_interval", "optimal_checkpoint_interval(L)",
          lambda f: f(_["layers"]), "06"),
    Entry("Memory", "extra compute of recomputing a fraction f of the forward",
          r"\Delta_{\mathrm{recompute}}", "recompute.recompute_overhead",
          "recompute_overhead(f)", lambda f: f(_["fraction"]), "21"),
    # scaling ------------------------------------------------------------------------
    Entry("Scaling", "compute-optimal parameters (20 tokens per parameter)", r"\Psi^{*}",
          "scaling.rule_of_thumb", "rule_of_thumb(C)[0]", lambda f: f(_["compute"])[0], "07"),
    Entry("Scaling", "compute-optimal tokens", "D^{*}", "scaling.rule_of_thumb",
          "rule_of_thumb(C)[1]", lambda f: f(_["compute"])[1], "07"),
    # collectives --------------------------------------------------------------------
    Entry("Collectives", "one message, α-β model", "T(n)", "comm.p2p_time",
          "p2p_time(n, α, β)", lambda f: f(_["n"], _["alpha"], _["beta"]), "04"),
    Entry("Collectives", "the size where latency and bandwidth cost the same", "n^{*}",
          "comm.crossover_bytes", "crossover_bytes(α, β)", lambda f: f(_["alpha"], _["beta"]),
          "04"),
    Entry("Collectives", "all-reduce, ring", r"T_{\mathrm{AR}}^{\mathrm{ring}}",
          "comm.allreduce_time", 'allreduce_time(n, P, α, β, "ring")',
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"], "ring"), "12"),
    Entry("Collectives", "all-reduce, tree (reduce then broadcast)",
          r"T_{\mathrm{AR}}^{\mathrm{tree}}", "comm.allreduce_time",
          'allreduce_time(n, P, α, β, "tree")',
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"], "tree"), "12"),
    Entry("Collectives", "all-reduce, recursive halving and doubling (Rabenseifner)",
          r"T_{\mathrm{AR}}^{\mathrm{RHD}}", "comm.allreduce_time",
          'allreduce_time(n, P, α, β, "rabenseifner")',
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"], "rabenseifner"), "12"),
    Entry("Collectives", "all-reduce, hierarchical: N nodes of G ranks",
          r"T_{\mathrm{AR}}^{\mathrm{hier}}", "comm.allreduce_time",
          'allreduce_time(n, N·G, α, β, "hierarchical", inner=G, alpha_inner=α_NV, beta_inner=β_NV)',
          lambda f: f(_["n"], _["nodes"] * _["inner"], _["alpha"], _["beta"], "hierarchical", inner=_["inner"],
                      alpha_inner=_["alpha_nv"], beta_inner=_["beta_nv"]), "13a"),
    Entry("Collectives", "reduce-scatter, ring", r"T_{\mathrm{RS}}", "comm.reduce_scatter_time",
          "reduce_scatter_time(n, P, α, β)",
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"]), "12"),
    Entry("Collectives", "all-gather, ring", r"T_{\mathrm{AG}}", "comm.allgather_time",
          "allgather_time(n, P, α, β)",
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"]), "12"),
    Entry("Collectives", "all-to-all, pairwise", r"T_{\mathrm{A2A}}", "comm.alltoall_time",
          "alltoall_time(n, P, α, β)",
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"]), "11"),
    Entry("Collectives", "broadcast, binomial tree", r"T_{\mathrm{Bcast}}", "comm.broadcast_time",
          "broadcast_time(n, P, α, β)",
          lambda f: f(_["n"], _["world"], _["alpha"], _["beta"]), "12"),
    Entry("Collectives", "algorithm bandwidth", r"\mathrm{algbw}", "comm.algorithm_bandwidth",
          "algorithm_bandwidth(n, T)", lambda f: f(_["n"], _["seconds"]), "13"),
    Entry("Collectives", "bus bandwidth of an all-reduce", r"\mathrm{busbw}_{\mathrm{AR}}",
          "comm.bus_bandwidth", 'bus_bandwidth(n, T, P, "allreduce")',
          lambda f: f(_["n"], _["seconds"], _["world"], "allreduce"), "13"),
    Entry("Collectives", "bus bandwidth of an all-gather, reduce-scatter or all-to-all",
          r"\mathrm{busbw}_{\mathrm{AG}}", "comm.bus_bandwidth",
          'bus_bandwidth(n, T, P, "allgather")',
          lambda f: f(_["n"], _["seconds"], _["world"], "allgather"), "13"),
    # traffic per step ---------------------------------------------------------------
    Entry("Traffic per step", "DP: bytes one rank sends in the gradient all-reduce",
          r"V_{\mathrm{DP}}", "data_parallel.gradient_bytes_sent",
          "gradient_bytes_sent(Ψ, P, grad_bytes=s)",
          lambda f: f(_["params"], _["world"], grad_bytes=_["bytes"]), "14"),
    Entry("Traffic per step", "TP: bytes one rank sends per layer, forward and backward",
          r"V_{\mathrm{TP}}", "tensor_parallel.layer_comm_bytes", "layer_comm_bytes(B, S, H, t)",
          lambda f: f(_["batch"], _["seq"], _["hidden"], _["tp"]), "15"),
    Entry("Traffic per step", "PP: one micro-batch's activations across a stage boundary",
          r"V_{\mathrm{PP}}", "pipeline_parallel.p2p_message_bytes", "p2p_message_bytes(B, S, H)",
          lambda f: f(_["batch"], _["seq"], _["hidden"]), "16"),
    Entry("Traffic per step", "CP: K/V-sized blocks one rank sends per layer in ring attention, forward and backward",
          r"N_{\mathrm{CP}}", "sequence_parallel.ring_kv_transfers", "ring_kv_transfers(c)",
          lambda f: f(_["cp"]), "17"),
    Entry("Traffic per step", "ZeRO-3: bytes one rank sends per step", r"V_{\mathrm{Z3}}",
          "zero.step_comm_bytes", "step_comm_bytes(Ψ, P, 3, param_bytes=s, grad_bytes=s)",
          lambda f: f(_["params"], _["world"], 3, param_bytes=_["bytes"], grad_bytes=_["bytes"]),
          "20"),
    # pipeline -----------------------------------------------------------------------
    Entry("Pipeline bubbles", "bubble, GPipe and 1F1B", r"\beta_{\mathrm{bubble}}",
          "pipeline_parallel.bubble_fraction", "bubble_fraction(p, m)",
          lambda f: f(_["p"], _["m"]), "16"),
    Entry("Pipeline bubbles", "bubble, interleaved 1F1B with v chunks per stage",
          r"\beta_{\mathrm{bubble}}^{\mathrm{int}}", "pipeline_parallel.interleaved_bubble_fraction",
          "interleaved_bubble_fraction(p, m, v)", lambda f: f(_["p"], _["m"], _["v"]), "16"),
    Entry("Pipeline bubbles", "bubble, zero-bubble ZB-H1", r"\beta_{\mathrm{bubble}}^{\mathrm{ZB}}",
          "pipeline_parallel.zb_h1_bubble_fraction", "zb_h1_bubble_fraction(p, m, t_F, t_B, t_W)",
          lambda f: f(_["p"], _["m"], _["t_f"], _["t_b"], _["t_w"]), "16"),
    Entry("Pipeline bubbles", "time of m micro-batches", r"T_{\mathrm{pipe}}",
          "pipeline_parallel.batch_time", "batch_time(p, m, t_F, t_B, virtual_stages=v)",
          lambda f: f(_["p"], _["m"], _["t_f"], _["t_b"], virtual_stages=_["v"]), "16"),
    Entry("Pipeline bubbles", "micro-batches in flight on the first stage, 1F1B",
          r"N_{\mathrm{flight}}", "pipeline_parallel.activations_in_flight",
          "activations_in_flight(p, m)", lambda f: f(_["p"], _["m"]), "16"),
    # ZeRO ---------------------------------------------------------------------------
    *(Entry("ZeRO", f"model states per rank, {label}", rf"M_{{\mathrm{{Z{stage}}}}}",
            "memory.zero_state_bytes", f"zero_state_bytes(Ψ, P, {stage})",
            (lambda f, stage=stage: f(_["params"], _["world"], stage)), "20")
      for stage, label in ((0, "plain DP"), (1, "ZeRO-1"), (2, "ZeRO-2"), (3, "ZeRO-3"))),
    *(Entry("ZeRO", f"bytes one rank sends per step, {label}", rf"V_{{\mathrm{{Z{stage}}}}}",
            "zero.step_comm_bytes", f"step_comm_bytes(Ψ, P, {stage}, param_bytes=s, grad_bytes=s)",
            (lambda f, stage=stage: f(_["params"], _["world"], stage, param_bytes=_["bytes"],
                                      grad_bytes=_["bytes"])), "20")
      for stage, label in ((0, "plain DP"), (1, "ZeRO-1"), (2, "ZeRO-2"), (3, "ZeRO-3"))),
)

SYMBOL_LEGEND = (
    r"$\Psi$ parameters, $D$ tokens, $P$ ranks, $F$ peak FLOP/s of one device, $\eta$ MFU, $n$ bytes, "
    r"$\alpha$ latency (s), $\beta$ bandwidth per direction (bytes/s), $B, S, H, A, L, V$ "
    r"batch, sequence, hidden, heads, layers, vocabulary, $s$ bytes per value, "
    r"$t, p, c$ tensor-, pipeline- and context-parallel degrees, $m$ micro-batches, "
    r"$v$ model chunks per pipeline stage, $T$ a measured time.")


def _function(entry: Entry):
    module, name = entry.function.rsplit(".", 1)
    return getattr(importlib.import_module(f"dtbook.{module}"), name)


def formula_sheet(group: str | None = None) -> list[Formula]:
    """Every entry of the sheet (or of ``group``) evaluated by its dtbook function with SymPy
    symbols. A function that does not exist raises (``AttributeError``), so does a call the
    function no longer accepts (``TypeError``): the sheet cannot drift from the library."""
    if group is not None and group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}; got {group!r}")
    out = []
    for entry in ENTRIES:
        if group is None or entry.group == group:
            expr = sp.sympify(entry.evaluate(_function(entry)))
            out.append(Formula(entry, expr))
    return out


# --------------------------------------------------------------------------------------
# Links to chapters (the docnames this build holds, as dtbook.edition finds them)
# --------------------------------------------------------------------------------------

def chapter_link(chapter: str, docs: set[str] | None = None, root: Path | None = None) -> str:
    """MyST for "chapter NN": a link to it when this build holds it, its name otherwise."""
    from dtbook import edition

    root = root or edition._book_root()
    chapter_docs = edition._chapter_docs(root)
    if docs is None:
        docs = edition._toc_docs(root)
    target = chapter_docs.get(chapter)
    if target is None:
        raise ValueError(f"chapter {chapter!r} is not a chapter of the book")
    if docs is not None and target not in docs:
        return f"chapter {chapter}"
    return f"{{doc}}`chapter {chapter} </{target}>`"


def sheet_markdown(group: str, docs: set[str] | None = None, root: Path | None = None) -> str:
    """One group of the sheet as MyST: per entry, what it gives, the dtbook call, the chapter
    and the formula as the call returns it, typeset."""
    lines = []
    for formula in formula_sheet(group):
        e = formula.entry
        module = e.function.rsplit(".", 1)[0]
        lines.append(f"- **{e.what}** ({chapter_link(e.chapter, docs, root)}), "
                     f"`dtbook.{module}.{e.call}`\n\n  $$\n  {e.lhs} = {formula.latex}\n  $$\n")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The placement procedure and the sanity checks (what `dtbook plan` automates)
# --------------------------------------------------------------------------------------
# The curriculum's rules of thumb, as the checklist prints them. The planner (chapter 27)
# replaces each with a computed answer; the thresholds are warnings, not laws.

PLACEMENT = (
    ("memory fit", "will the model states, activations and buffers fit per GPU at all? "
     "If not, shard (ZeRO, tensor or pipeline parallelism) or recompute", "19"),
    ("tensor parallelism", "TP = min(8, GPUs per node): its all-reduces are on the critical "
     "path every layer and need the node's fastest link", "15"),
    ("pipeline parallelism", "PP = ⌈layers / layers that fit on one GPU⌉, with at least "
     "4 micro-batches per stage (m ≥ 4·PP) to keep the bubble small", "16"),
    ("data parallelism", "DP = P / (TP · PP) with the rest of the GPUs", "14"),
    ("context parallelism", "CP = S / S_max when the sequence S is longer than one GPU's "
     "activations allow (beyond about 8K tokens)", "17"),
    ("expert parallelism", "EP = experts / experts that fit on one GPU", "18"),
)

SANITY_CHECKS = (
    ("MFU", "below 30 %", "the step is losing time somewhere: look at the breakdown", "01"),
    ("exposed communication", "above 40 % of the step", "overlap it, or change the layout", "31"),
    ("pipeline bubble", "above 25 %", "more micro-batches, or interleave", "16"),
    ("memory per GPU", "above 95 % of HBM", "fragmentation and spikes will run it out", "19"),
    ("data loader", "slower than P·F·η / (6Ψ) tokens per second", "the GPUs wait on input",
     "03a"),
)


def checklist_markdown(docs: set[str] | None = None, root: Path | None = None) -> tuple[str, str]:
    """The placement procedure (a numbered list) and the sanity checks (a bullet list), MyST."""
    steps = "\n".join(f"{i}. **{name}** ({chapter_link(ch, docs, root)}): {text}."
                      for i, (name, text, ch) in enumerate(PLACEMENT, 1))
    checks = "\n".join(f"- **{name}** {limit}: {then} ({chapter_link(ch, docs, root)})."
                       for name, limit, then, ch in SANITY_CHECKS)
    return steps, checks


# --------------------------------------------------------------------------------------
# Hardware tables (appendix "Hardware assumptions and units")
# --------------------------------------------------------------------------------------

_CHAPTER_REF = re.compile(r"chapter (\d+[a-z]?)\b")   # "chapter 04", "chapter 13a" in a source


def _chapter_pages() -> dict:
    """{"04": path of chapter 04's notebook, ...} for the chapters the book builds."""
    from dtbook import edition

    return edition.chapter_notebooks(Path(__file__).resolve().parents[1], in_toc=True)


def _linked(text: str, pages: dict) -> str:
    """``text`` escaped for HTML, each "chapter NN" a link to that chapter's page in
    ``pages`` (the tables sit on an appendix page, one folder beside the parts'); chapters the
    book does not build stay plain."""
    def link(m):
        page = pages.get(m.group(1))
        if page is None:
            return m.group(0)
        return f"<a href='../{page.parent.name}/{page.stem}.html'>{m.group(0)}</a>"
    return _CHAPTER_REF.sub(link, html.escape(text))


def html_table(header, rows, cls="table") -> str:
    """An HTML table (notebook Markdown output is CommonMark, which has none); a cell's
    "chapter NN" links to the chapter."""
    pages = _chapter_pages()
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_linked(str(c), pages)}</td>" for c in row)
                   + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


def accelerator_rows():
    """(header, rows): each accelerator's dense peak TFLOP/s per dtype (one column each)."""
    from dtbook import hardware
    from dtbook.units import TFLOP

    dtypes = [d for d in _DTYPES if any(d in hardware.get(a).peak_flops
                                        for a in hardware.accelerators())]
    rows = [[name, *(f"{acc.peak_flops[d] / TFLOP:,.1f}" if d in acc.peak_flops else "—"
                     for d in dtypes)]
            for name, acc in ((n, hardware.get(n)) for n in hardware.accelerators())]
    return ["accelerator", *dtypes], rows


def memory_rows():
    """(header, rows): each accelerator's HBM capacity, decimal and binary, and bandwidth."""
    from dtbook import hardware
    from dtbook.units import fmt_bytes, fmt_rate

    rows = [[name, fmt_bytes(acc.hbm_bytes, binary=True), fmt_bytes(acc.hbm_bytes),
             fmt_rate(acc.hbm_bandwidth)]
            for name, acc in ((n, hardware.get(n)) for n in hardware.accelerators())]
    return ["accelerator", "HBM", "in decimal units", "HBM bandwidth"], rows


def link_rows():
    """(header, rows): each link's α, β per direction, the datasheet's both-ways sum, αβ."""
    from dtbook import hardware
    from dtbook.units import fmt_bytes, fmt_rate, fmt_seconds

    rows = [[name, fmt_seconds(link.alpha), fmt_rate(link.beta), fmt_rate(link.beta_bidirectional),
             fmt_bytes(link.alpha * link.beta)]
            for name, link in ((n, hardware.get(n)) for n in hardware.links())]
    return ["link", "α", "β per direction", "both directions", "crossover αβ"], rows


def node_rows():
    """(header, rows): each node: GPUs, accelerator, links, NICs and host memory."""
    from dtbook import hardware
    from dtbook.units import fmt_bytes, fmt_rate

    rows = []
    for name in hardware.nodes():
        nd = hardware.node(name)
        rows.append([name, f"{nd.gpus} × {nd.accelerator}", nd.scale_up,
                     f"{nd.nics} × {nd.scale_out}", fmt_rate(nd.scale_out_bandwidth),
                     fmt_bytes(nd.hbm_bytes, binary=True),
                     "not given" if nd.host_memory is None else fmt_bytes(nd.host_memory)])
    return ["node", "GPUs", "in the node", "NICs", "off-node per direction", "HBM in all",
            "host memory"], rows


def measured_rows():
    """(header, rows): the measured ceilings beside the datasheet figures: matmul (BF16 and
    FP8), HBM streaming (Triad) and fused attention, each as a share of the datasheet."""
    from dtbook import hardware
    from dtbook.units import TFLOP, fmt_rate

    rows = []
    for name in hardware.accelerators():
        acc = hardware.get(name)
        for dtype in ("bf16", "fp8"):
            try:
                c = hardware.matmul_ceiling(name, dtype)
            except ValueError:
                continue
            if c.dtype != dtype:       # (BF16's figure standing in for a dtype with none)
                continue
            peak = acc.peak(dtype)
            rows.append([name, f"{dtype} matmul", f"{peak / TFLOP:,.0f} TFLOP/s",
                         f"{c.flops / TFLOP:,.0f} TFLOP/s", f"{c.flops / peak:.0%}"])
        try:
            mem = hardware.memory_ceiling(name)
            rows.append([name, "HBM (Triad)", fmt_rate(acc.hbm_bandwidth), fmt_rate(mem.triad),
                         f"{mem.triad / acc.hbm_bandwidth:.0%}"])
        except ValueError:
            pass
        try:
            k = hardware.attention_kernel(name)
            peak = acc.peak("bf16")
            what = (f"{k.kernel}, forward" if k.forward != k.backward
                    else f"{k.kernel}, forward and backward")
            rows.append([name, what, f"{peak / TFLOP:,.0f} TFLOP/s",
                         f"{k.forward / TFLOP:,.0f} TFLOP/s", f"{k.forward / peak:.0%}"])
        except ValueError:
            pass
    for b in hardware.published_busbw():
        link = hardware.get(b.link)
        got = (f"{fmt_rate(b.busbw_low)}" if b.busbw_low == b.busbw_high
               else f"{fmt_rate(b.busbw_low)} to {fmt_rate(b.busbw_high)}")
        rows.append([b.name, f"{b.collective} busbw, {b.ranks} ranks, {b.algorithm}",
                     fmt_rate(link.beta), got, f"{b.busbw_high / link.beta:.0%}"])
    return ["on", "what", "datasheet", "measured", "share"], rows


def ridge_rows(dtype: str = "bf16"):
    """(header, rows): the ridge point (FLOPs per byte, :func:`dtbook.roofline.ridge_point`)
    of each accelerator's ``dtype`` peak (one column each) against its own HBM (first row)
    and against each link's β (a row each)."""
    from dtbook import hardware, roofline

    accs = [hardware.get(n) for n in hardware.accelerators() if dtype in hardware.get(n).peak_flops]
    rows = [["own HBM", *(f"{roofline.ridge_point(a.peak(dtype), a.hbm_bandwidth):,.0f}"
                          for a in accs)]]
    for name in hardware.links():
        beta = hardware.get(name).beta
        rows.append([name, *(f"{roofline.ridge_point(a.peak(dtype), beta):,.0f}" for a in accs)])
    return ["bandwidth", *(a.name for a in accs)], rows


# --------------------------------------------------------------------------------------
# Where the catalogs' figures come from, as entries of the bibliography
# --------------------------------------------------------------------------------------
# A catalog entry's ``source`` is the text its module keeps (dtbook.hardware, dtbook.models,
# dtbook.runs). Each phrase below that a source contains names a document of references.bib;
# the appendices cite those keys beside the entry, and tests/test_reference_shelf.py holds
# every catalog entry to at least one key and every key to the .bib file.

SOURCE_KEYS = (
    ("A100 Tensor Core GPU datasheet", "nvidia-a100-datasheet"),
    ("NVIDIA A100 datasheet", "nvidia-a100-datasheet"),
    ("A100 Tensor Core GPU Architecture whitepaper", "nvidia-ampere-whitepaper"),
    ("Ampere whitepaper", "nvidia-ampere-whitepaper"),
    ("H100 Tensor Core GPU datasheet", "nvidia-h100-datasheet"),
    ("NVIDIA H100 datasheet", "nvidia-h100-datasheet"),
    ("H100 Tensor Core GPU Architecture whitepaper", "nvidia-hopper-whitepaper"),
    ("Hopper whitepaper", "nvidia-hopper-whitepaper"),
    ("H200 Tensor Core GPU datasheet", "nvidia-h200-datasheet"),
    ("HGX B200", "nvidia-hgx-b200"),
    ("ConnectX-7", "nvidia-connectx7"),
    ("ConnectX-6", "nvidia-connectx6"),
    ("DGX H100 datasheet", "nvidia-dgx-h100"),
    ("DGX A100 datasheet", "nvidia-dgx-a100"),
    ("CUDA C++ Programming Guide", "nvidia-cuda-guide"),
    ("Birrittella", "birrittella2015omnipath"),
    ("AnandTech", "anandtech2015omnipath"),
    ("PCI Express Base Specification", "pcisig-pcie5"),
    ("IEEE 802.3", "ieee8023"),
    ("EPYC 7543", "amd-epyc-7543"),
    ("Xeon Platinum 8480", "intel-xeon-8480"),
    ("Numbers Everyone", "dean2009numbers"),
    ("modal-client pull request #2797", "modal-client-2797"),
    ("dexbotic issue #41", "dexbotic-41"),
    ("NVIDIA/nccl issue #1264", "nccl-1264"),
    ("cuda-samples issue #311", "cuda-samples-311"),
    ("TensorRT-LLM issue #10278", "tensorrt-llm-10278"),
    ("glennklockwood.com", "lockwood-h100"),
    ("nccl-tests/issues/212", "nccl-tests-212"),
    ("nccl-tests/issues/290", "nccl-tests-290"),
    ("nccl-tests/issues/119", "nccl-tests-119"),
    ("nccl-tests/issues/267", "nccl-tests-267"),
    ("nccl-tests/issues/309", "nccl-tests-309"),
    ("AI-benchmarking-guide", "azure-ai-benchmarking"),
    ("Machine Learning Engineering", "bekman-mle"),
    ("arXiv:2307.08691", "dao2023flashattention2"),
    ("arXiv:2407.08608", "shah2024flashattention3"),
    ("bigscience-workshop/bigscience", "bigscience-repo"),
    ("arXiv:2211.05100", "lescao2022bloom"),
    ("bigscience/bloom", "lescao2022bloom"),
    ("arXiv:2005.14165", "brown2020gpt3"),
    ("Radford et al. 2019", "radford2019gpt2"),
    ("arXiv:2307.09288", "touvron2023llama2"),
    ("Meta-Llama-3", "dubey2024llama3"),
    ("Llama-3.1", "dubey2024llama3"),
    ("arXiv:2407.21783", "dubey2024llama3"),
    ("arXiv:2406.11704", "nvidia2024nemotron4340b"),
    ("megatron/core/transformer/moe/README.md", "nvidia-mcore-moe-readme"),
    ("arXiv:2401.04088", "jiang2024mixtral"),
    ("Mixtral-8x22B", "mistral2024mixtral8x22b"),
    ("arXiv:2310.06825", "jiang2023mistral7b"),
    ("Qwen1.5-MoE", "qwen2024moe"),
    ("arXiv:2407.10671", "yang2024qwen2"),
    ("arXiv:2508.10925", "openai2025gptoss"),
    ("arXiv:2408.00118", "gemmateam2024gemma2"),
    ("huggingface.co/Qwen/Qwen3", "yang2025qwen3"),
    ("arXiv:2505.09388", "yang2025qwen3"),
    ("arXiv:2412.19437", "deepseekai2024v3"),
    ("arXiv:2104.04473", "narayanan2021megatron"),
    ("arXiv:2205.05198", "korthikanti2022reducing"),
    ("arXiv:2201.11990", "smith2022mtnlg"),
    ("Megatron-LM README", "nvidia-megatron-lm"),
    ("NVIDIA/NeMo", "nvidia-nemo-perf"),
    ("Megatron-Bridge", "nvidia-megatron-bridge-perf"),
    ("H800 Tensor Core GPU datasheet", "nvidia-h800-datasheet"),
    ("arXiv:2505.09343", "deepseekai2025insights"),
    ("torchtitan benchmark", "pytorch-torchtitan-benchmarks"),
    ("arXiv:2410.06511", "liang2024torchtitan"),
)


def source_keys(text: str) -> tuple[str, ...]:
    """The references.bib keys of the documents a catalog ``source`` text names, in order."""
    return tuple(dict.fromkeys(key for phrase, key in SOURCE_KEYS if phrase in text))


def _split(text: str) -> list[str]:
    """A source text cut at its top-level "; " (not inside parentheses or quotes)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _pieces(*texts) -> str:
    """Source texts joined, each statement once: the catalog repeats a document's text in
    an entry's ``source`` and in the per-field ``sources``."""
    return "; ".join(dict.fromkeys(p for t in texts if t for p in _split(t)))


def catalog_sources():
    """(catalog, name, source text) of every hardware, model and training-run entry,
    ladder rungs and measured tables included: what the appendices cite."""
    from dtbook import hardware, models, runs

    out = []
    for name in hardware.accelerators() + hardware.links():
        entry = hardware.get(name)
        out.append(("hardware", name, _pieces(entry.source, getattr(entry, "alpha_source", ""),
                                              *getattr(entry, "sources", {}).values())))
    for name in hardware.nodes():
        nd = hardware.node(name)
        out.append(("hardware", name, _pieces(nd.source, *nd.sources.values())))
    for tier in hardware.ladder():
        out.append(("hardware", f"ladder: {tier.name}", _pieces(tier.source, tier.latency_source)))
    for name in hardware.accelerators():
        for what, get in (("matmul ceiling", hardware.matmul_ceiling),
                          ("FP8 matmul ceiling", lambda n: hardware.matmul_ceiling(n, "fp8")),
                          ("memory ceiling", hardware.memory_ceiling),
                          ("attention kernel", hardware.attention_kernel)):
            try:
                out.append(("hardware", f"{name} {what}", get(name).source))
            except ValueError:
                pass
    for b in hardware.published_busbw():
        out.append(("hardware", f"busbw {b.name}", b.source))
    for name in models.names():
        if name != "tiny":
            out.append(("models", name, models.get(name).source))
    for name in runs.names():
        out.append(("runs", name, runs.get(name).source))
    return out


def cited_sources_markdown(catalog: str) -> str:
    """MyST: each entry of ``catalog`` (``"hardware"``, ``"models"`` or ``"runs"``) with the
    bibliography entries its source names, then the source as the catalog states it, each
    "chapter NN" in it a link to that chapter (:func:`chapter_link`; named only, when the book
    does not build it)."""
    if catalog not in ("hardware", "models", "runs"):
        raise ValueError(f"catalog must be 'hardware', 'models' or 'runs'; got {catalog!r}")
    pages = _chapter_pages()
    link = lambda m: chapter_link(m.group(1)) if m.group(1) in pages else m.group(0)
    lines = []
    for cat, name, text in catalog_sources():
        if cat != catalog:
            continue
        keys = source_keys(text)
        cite = " {cite:p}`" + ",".join(keys) + "`" if keys else ""
        source = _CHAPTER_REF.sub(link, _plain(text))
        lines.append(f"- `{name}`{cite}: {source}")
    return "\n".join(lines)


def _plain(text: str) -> str:
    """Catalog text as Markdown that shows it verbatim."""
    import re

    return re.sub(r"([\\`*_\[\]<>$|~#{}])", r"\\\1", text)
