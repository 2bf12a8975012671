"""The reference shelf (appendices glossary, hardware assumptions, quick reference, references):
every term a chapter links has a glossary entry, every citation has a BibTeX entry and every
entry is cited, and the formula sheet is what the dtbook functions return."""

import importlib
import json
import re
from pathlib import Path

import pytest
import sympy as sp
import yaml

from dtbook import reference

ROOT = Path(__file__).resolve().parent.parent
APPENDICES = ROOT / "chapters" / "appendices"
NOTEBOOKS = sorted(p for p in (ROOT / "chapters").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)
PAGES = sorted(APPENDICES.glob("*.md")) + [ROOT / "index.md"]

_TERM = re.compile(r"\{term\}`([^`]*)`")
_CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]*)`")
_BIB_ENTRY = re.compile(r"^@(\w+)\s*\{\s*([^,\s]+)\s*,", re.M)


def _markdown(path: Path) -> str:
    """The prose of a page: a notebook's markdown cells, or a Markdown file."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def _texts():
    return {p: _markdown(p) for p in NOTEBOOKS + PAGES}


def glossary_terms() -> set[str]:
    """Every term of the glossary directive, lower case (Sphinx matches terms that way)."""
    text = (APPENDICES / "glossary.md").read_text(encoding="utf-8")
    block = re.search(r"```\{glossary\}\n(.*?)\n```", text, re.S).group(1)
    return {line.strip().lower() for line in block.splitlines()
            if line.strip() and not line.startswith((" ", ":"))}


def bib_keys() -> list[str]:
    text = (ROOT / "references.bib").read_text(encoding="utf-8")
    return [key for _, key in _BIB_ENTRY.findall(text)]


def _term_target(role: str) -> str:
    """`label <target>` or `target`."""
    m = re.match(r".*<([^>]+)>\s*$", role, re.S)
    return (m.group(1) if m else role).strip().lower()


def _cite_keys(role: str) -> list[str]:
    """The keys of a cite role, pre- and post-text ({see}key{p. 3}) removed."""
    return [re.sub(r"\{[^}]*\}", "", k).strip() for k in role.split(",") if k.strip()]


# ---------------------------------------------------------------------- the glossary

def test_the_glossary_has_the_terms_the_curriculum_names():
    terms = glossary_terms()
    for term in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "bubble", "bucket",
                 "critical batch size", "device mesh", "flashattention", "mfu", "hfu",
                 "zero-1", "zero-2", "zero-3", "arithmetic intensity",
                 "communication intensity"):
        assert term in terms, f"the glossary has no entry {term!r}"


def test_every_term_role_has_a_glossary_entry():
    terms = glossary_terms()
    missing = {p.name: sorted({_term_target(r) for r in _TERM.findall(t)} - terms)
               for p, t in _texts().items()}
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"{{term}} roles with no glossary entry: {missing}"


def test_every_glossary_entry_links_the_chapter_that_derives_it():
    text = (APPENDICES / "glossary.md").read_text(encoding="utf-8")
    block = re.search(r"```\{glossary\}\n(.*?)\n```", text, re.S).group(1)
    for entry in re.split(r"\n\s*\n", block):
        lines = [l for l in entry.splitlines() if l.strip() and not l.startswith(":")]
        if not lines:
            continue
        links = re.findall(r"\]\(([^)]+\.ipynb)\)", entry)
        assert links, f"glossary entry {lines[0]!r} links no chapter"
        for link in links:
            assert (APPENDICES / link).resolve().is_file(), f"{lines[0]!r} links {link}"


# ---------------------------------------------------------------------- the bibliography

def test_the_bibliography_is_configured():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["bibtex_bibfiles"] == ["references.bib"]
    assert "{bibliography}" in (APPENDICES / "references.md").read_text(encoding="utf-8")


def test_bib_keys_are_unique():
    keys = bib_keys()
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_every_cited_key_is_in_the_bibliography():
    keys = set(bib_keys())
    missing = {}
    for path, text in _texts().items():
        cited = {k for role in _CITE.findall(text) for k in _cite_keys(role)}
        if cited - keys:
            missing[path.name] = sorted(cited - keys)
    for _, name, source in reference.catalog_sources():
        if set(reference.source_keys(source)) - keys:
            missing[name] = sorted(set(reference.source_keys(source)) - keys)
    assert not missing, f"cited keys missing from references.bib: {missing}"


def test_every_bibliography_entry_is_cited():
    """Cited in a chapter or an appendix, or named by a catalog source that the hardware and
    model appendices cite."""
    cited = {k for text in _texts().values() for role in _CITE.findall(text)
             for k in _cite_keys(role)}
    cited |= {k for _, _, source in reference.catalog_sources()
              for k in reference.source_keys(source)}
    uncited = sorted(set(bib_keys()) - cited)
    assert not uncited, f"references.bib entries nothing cites: {uncited}"


def test_every_catalog_entry_cites_a_bibliography_entry():
    bare = [f"{cat}: {name}" for cat, name, source in reference.catalog_sources()
            if not reference.source_keys(source)]
    assert not bare, (f"catalog entries whose source names no references.bib entry (add the "
                      f"document to references.bib and a phrase to dtbook.reference.SOURCE_KEYS): "
                      f"{bare}")


def test_the_catalog_appendices_cite_their_sources():
    for catalog in ("hardware", "models", "runs"):
        text = reference.cited_sources_markdown(catalog)
        assert "{cite:p}`" in text
        # a chapter the sources name is a link to it (DESIGN.md: chapters link each other)
        bare = re.findall(r"(?<!\{doc\}`)\bchapter \d+[a-z]?\b", text)
        assert not bare, f"{catalog} sources name chapters without a link: {bare}"
    assert "{doc}`chapter 04 </chapters/01-foundations/04-" in \
        reference.cited_sources_markdown("hardware")
    with pytest.raises(ValueError, match="catalog"):
        reference.cited_sources_markdown("gpus")
    assert "cited_sources_markdown(\"hardware\")" in (
        APPENDICES / "hardware-assumptions.md").read_text(encoding="utf-8")
    catalogs = (APPENDICES / "catalogs.md").read_text(encoding="utf-8")
    assert 'cited_sources_markdown("models")' in catalogs
    assert 'cited_sources_markdown("runs")' in catalogs


# ---------------------------------------------------------------------- the formula sheet

@pytest.mark.parametrize("entry", reference.ENTRIES, ids=lambda e: f"{e.function}:{e.what[:30]}")
def test_each_sheet_entry_is_a_real_dtbook_function(entry):
    """The named function exists under that name (a rename or removal fails here) and the
    call the page shows evaluates with SymPy symbols to an expression in them."""
    module, name = entry.function.rsplit(".", 1)
    fn = getattr(importlib.import_module(f"dtbook.{module}"), name)
    assert name in entry.call, f"the page shows {entry.call!r} for {entry.function}"
    expr = sp.sympify(entry.evaluate(fn))
    assert expr.free_symbols, f"{entry.function} returned a number, not a formula"
    assert entry.group in reference.GROUPS
    assert (ROOT / "chapters").glob(f"*/{entry.chapter}-*.ipynb"), entry.chapter


# The curriculum's formula sheet as printed (A4), typed independently of dtbook: the sheet
# must agree with it where it states a closed form.
_S = reference.SYMBOLS
_P, _n, _a, _b, _Psi, _s = _S["world"], _S["n"], _S["alpha"], _S["beta"], _S["params"], _S["bytes"]
_A4 = {
    "training compute": 6 * _Psi * _S["tokens"],
    "model states, mixed precision with Adam": 16 * _Psi,
    "activations of one layer (bytes)": _S["batch"] * _S["seq"] * _S["hidden"]
    * (34 + 5 * _S["heads"] * _S["seq"] / _S["hidden"]),
    "the interval that minimises it": sp.sqrt(_S["layers"]),
    "compute-optimal parameters (20 tokens per parameter)": sp.sqrt(_S["compute"] / 120),
    "compute-optimal tokens": 20 * sp.sqrt(_S["compute"] / 120),
    "all-reduce, ring": 2 * (_P - 1) * _a + 2 * (_P - 1) / _P * _n / _b,
    "all-reduce, tree (reduce then broadcast)": 2 * sp.log(_P, 2) * (_a + _n / _b),
    "all-reduce, recursive halving and doubling (Rabenseifner)":
        2 * sp.log(_P, 2) * _a + 2 * (_P - 1) / _P * _n / _b,
    "reduce-scatter, ring": (_P - 1) * _a + (_P - 1) / _P * _n / _b,
    "all-gather, ring": (_P - 1) * _a + (_P - 1) / _P * _n / _b,
    "all-to-all, pairwise": (_P - 1) * _a + (_P - 1) / _P * _n / _b,
    "broadcast, binomial tree": sp.log(_P, 2) * (_a + _n / _b),
    "bubble, GPipe and 1F1B": (_S["p"] - 1) / (_S["m"] + _S["p"] - 1),
    "bubble, interleaved 1F1B with v chunks per stage":
        (_S["p"] - 1) / (_S["m"] * _S["v"] + _S["p"] - 1),
    "model states per rank, plain DP": 16 * _Psi,
    "model states per rank, ZeRO-1": 4 * _Psi + 12 * _Psi / _P,
    "model states per rank, ZeRO-2": 2 * _Psi + 14 * _Psi / _P,
    "model states per rank, ZeRO-3": 16 * _Psi / _P,
}


def test_the_sheet_agrees_with_the_curriculums_printed_forms():
    sheet = {f.entry.what: f.expr for f in reference.formula_sheet()}
    for what, printed in _A4.items():
        assert sp.simplify(sheet[what] - printed) == 0, (what, sheet[what], printed)
    # hierarchical all-reduce (A4): 2(G-1)α_NV + 2(G-1)/G n/β_NV + 2(N-1)α + 2(N-1)/N (n/G)/β
    G, N = _S["inner"], _S["nodes"]
    printed = (2 * (G - 1) * _S["alpha_nv"] + 2 * (G - 1) / G * _n / _S["beta_nv"]
               + 2 * (N - 1) * _a + 2 * (N - 1) / N * (_n / G) / _b)
    assert sp.simplify(sheet["all-reduce, hierarchical: N nodes of G ranks"] - printed) == 0


def test_the_sheet_renders_every_group_and_links_its_chapters(tmp_path):
    assert {e.group for e in reference.ENTRIES} == set(reference.GROUPS)
    page = (APPENDICES / "quick-reference.md").read_text(encoding="utf-8")
    for group in reference.GROUPS:
        assert f'group("{group}")' in page, f"the quick reference shows no group {group!r}"
        text = reference.sheet_markdown(group, root=ROOT)
        assert text.count("$$") == 2 * len(reference.formula_sheet(group))
        assert "{doc}`chapter " in text
    # a chapter outside the build is named, not linked
    assert reference.chapter_link("16", docs=set(), root=ROOT) == "chapter 16"
    with pytest.raises(ValueError, match="chapter"):
        reference.chapter_link("99", root=ROOT)
    with pytest.raises(ValueError, match="group"):
        reference.formula_sheet("Everything")


def test_a_missing_function_fails_the_sheet(monkeypatch):
    entry = reference.ENTRIES[0]
    broken = reference.Entry(entry.group, entry.what, entry.lhs, "flops.no_such_function",
                             "no_such_function()", entry.evaluate, entry.chapter)
    monkeypatch.setattr(reference, "ENTRIES", (broken,))
    with pytest.raises(AttributeError):
        reference.formula_sheet()


def test_the_checklist_names_the_planner():
    steps, checks = reference.checklist_markdown(root=ROOT)
    assert steps.count("\n") == len(reference.PLACEMENT) - 1
    assert checks.count("\n") == len(reference.SANITY_CHECKS) - 1
    page = (APPENDICES / "quick-reference.md").read_text(encoding="utf-8")
    assert "`dtbook plan" in page


# ---------------------------------------------------------------------- the hardware page

def test_the_hardware_tables_cover_the_catalog():
    from dtbook import hardware

    assert [r[0] for r in reference.accelerator_rows()[1]] == hardware.accelerators()
    assert [r[0] for r in reference.memory_rows()[1]] == hardware.accelerators()
    assert [r[0] for r in reference.link_rows()[1]] == hardware.links()
    assert [r[0] for r in reference.node_rows()[1]] == hardware.nodes()
    header, rows = reference.ridge_rows("bf16")
    assert [r[0] for r in rows] == ["own HBM", *hardware.links()]
    h100 = header.index("h100-sxm")
    nv = next(r for r in rows if r[0] == "nvlink4")
    acc, link = hardware.get("h100-sxm"), hardware.get("nvlink4")
    assert float(nv[h100].replace(",", "")) == pytest.approx(acc.peak("bf16") / link.beta, abs=0.5)
    measured = reference.measured_rows()[1]
    assert {r[0] for r in measured} >= {"h100-sxm", "a100-80gb"}
    # the page says one row, NVLink SHARP's, passes its datasheet bound
    over = [r for r in measured if float(r[-1].rstrip("%").replace(",", "")) > 100]
    assert len(over) == 1 and "nvls" in over[0][1], over


@pytest.mark.parametrize("page", ["hardware-assumptions.md", "catalogs.md", "quick-reference.md"])
def test_no_figure_is_typed_into_the_computed_pages(page):
    """Figures come from code cells; the prose has no number followed by a unit."""
    text = (APPENDICES / page).read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", " ", text, flags=re.S)
    typed = re.findall(r"\d[\d.,]*\s*(?:GB|GiB|TB|Gb/s|GB/s|TB/s|TFLOP|µs|us|%)(?!\w)", prose)
    assert not typed, typed


def test_tables_link_the_chapters_they_name():
    # a catalog's "chapter 04" becomes a link to that chapter's page; an unknown one stays text
    cell = reference.html_table(["source"], [["chapter 04's table; chapter 99 <x>"]])
    assert "<a href='../01-foundations/04-alpha-beta-model.html'>chapter 04</a>" in cell
    assert "chapter 99 &lt;x&gt;" in cell
