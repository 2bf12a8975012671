"""Static checks on the chapter notebooks: committed clean, listed in the table of contents,
and consistent with the exercise registry. nbval runs them; these tests read them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from dtbook.edition import chapter_notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "chapters").rglob("*.ipynb"))
NOTEBOOKS = [p for p in NOTEBOOKS if ".ipynb_checkpoints" not in p.parts]


def _toc_files(node) -> list[str]:
    """Every `file:` entry of a jb-book table of contents, at any depth."""
    found = []
    if isinstance(node, dict):
        if "file" in node:
            found.append(node["file"])
        for value in node.values():
            found += _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            found += _toc_files(item)
    return found


def _cells(path: Path):
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found under chapters/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    for i, cell in enumerate(_cells(path)):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name} cell {i} has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_follows_the_chapter_template(path):
    cells = _cells(path)
    markdown = "\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join(_source(c) for c in cells if c["cell_type"] == "code")
    assert re.search(r"^#+ The Question", markdown, re.M), "no 'The Question' heading"
    assert re.search(r"^#+ Key takeaways", markdown, re.M | re.I), "no 'Key takeaways' heading"
    assert "sympy" in code, "no SymPy derivation"
    assert len(re.findall(r"^\s*assert\b|assert_same\(", code, re.M)) >= 3, "fewer than 3 asserts"
    assert len(set(re.findall(r"check\(\s*\"([0-9a-z]+\.\d+)\"", code))) >= 4, "fewer than 4 exercises"
    assert "explorer(" in code, "no explorer widget"


def test_toc_and_notebooks_agree():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [toc["root"]] + _toc_files(toc.get("parts", toc))
    for entry in entries:
        matches = [ROOT / f"{entry}{ext}" for ext in (".ipynb", ".md")]
        assert any(m.exists() for m in matches), f"_toc.yml lists {entry}, which does not exist"
    listed = {str(Path(e)) for e in entries}
    for path in NOTEBOOKS:
        rel = str(path.relative_to(ROOT).with_suffix(""))
        assert rel in listed, f"{rel} is not in _toc.yml"


def test_glue_names_and_labels_are_unique_and_defined():
    seen_glue, seen_labels = {}, {}
    for path in NOTEBOOKS:
        cells = _cells(path)
        code = "\n".join(_source(c) for c in cells if c["cell_type"] == "code")
        markdown = "\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")
        # A name counts as defined when a code cell spells it as a string literal: cells may
        # glue from a loop over a dict, so a regex for glue("...") alone would be too narrow.
        literals = set(re.findall(r"[\"'](ch\d\w*)[\"']", code))
        # a name glued twice in one notebook is a build error (mystnb: 'glue key ... duplicate')
        direct = re.findall(r"glue\(\s*[\"'](ch\d\w*)[\"']", code)
        twice = sorted({n for n in direct if direct.count(n) > 1})
        assert not twice, f"{path.name} glues {twice} more than once"
        for name in literals:
            assert name not in seen_glue, f"glue name {name} used in {path.name} and {seen_glue[name]}"
            seen_glue[name] = path.name
        for name in re.findall(r"\{glue:\w+\}`([\w.-]+)", markdown):
            assert name in literals, f"{path.name} shows glue {name!r} that no cell defines"
        for label in re.findall(r"^:label:\s*(\S+)", markdown, re.M):
            assert label not in seen_labels, f"label {label} in {path.name} and {seen_labels[label]}"
            seen_labels[label] = path.name


def test_every_exercise_is_posed_in_its_chapter():
    from dtbook.exercises import registry

    posed = set()
    for path in NOTEBOOKS:
        code = "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "code")
        posed |= set(re.findall(r"check\(\s*\"([0-9a-z]+\.\d+)\"", code))
    ids = set(registry())
    assert posed <= ids, f"notebooks check exercises that do not exist: {sorted(posed - ids)}"
    assert ids <= posed, f"exercises no notebook poses: {sorted(ids - posed)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercise_headings_carry_their_ids(path):
    # sphinx-exercise numbers exercises across the whole book ("Exercise 29"); the book
    # names each by its checker id instead, so the heading and check("04.1", ...) agree.
    markdown = "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "markdown")
    blocks = re.findall(r"```\{exercise\}([^\n]*)\n:label: ex-([0-9a-z]+)-(\d+)\n(:nonumber:)?", markdown)
    assert blocks, "no exercise blocks"
    for title, chapter, k, nonumber in blocks:
        assert title.strip().startswith(f"{chapter}.{k} "), f"exercise ex-{chapter}-{k} title lacks its id"
        assert nonumber, f"exercise ex-{chapter}-{k} needs :nonumber:"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_grading_policy_precedes_the_first_exercise(path):
    # A reader must know the rule before typing an answer (issue 8): the policy is stated once,
    # under the exercises' heading and before the first exercise block.
    from dtbook.exercises import PRECISION_POLICY

    markdown = "\n\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "markdown")
    first = markdown.find("```{exercise}")
    if first < 0:
        return
    policy = markdown.find(PRECISION_POLICY)
    assert markdown.count(PRECISION_POLICY) == 1, f"{path.name} states the grading policy " \
        f"{markdown.count(PRECISION_POLICY)} times"
    assert markdown.rfind("## Exercises", 0, first) < policy < first, \
        f"{path.name}: the grading policy is not between '## Exercises' and the first exercise"


# ---- what the page shows (DESIGN.md) and what a reader can run ----------------------------------

def _tidy():
    import importlib.util

    spec = importlib.util.spec_from_file_location("nbtidy", ROOT / "scripts" / "nbtidy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_bookkeeping_is_hidden_and_the_notebook_is_tidy(path):
    """scripts/nbtidy.py would change nothing, and (read independently, line by line) no
    cell the page shows calls glue()."""
    tidy = _tidy()
    for i, cell in enumerate(_cells(path)):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "code" and not tags & {"remove-input", "remove-cell"}:
            shown = [line for line in _source(cell).splitlines() if line.lstrip().startswith("glue(")]
            assert not shown, f"{path.name} cell {i} shows {shown[0].strip()[:60]}"
    before = path.read_text(encoding="utf-8")
    after = json.dumps(tidy.tidy(json.loads(before), tidy.repository_url()), indent=1,
                       ensure_ascii=False) + "\n"
    assert after == before, f"run: python scripts/nbtidy.py {path.relative_to(ROOT)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_installs_dtbook_from_the_one_address(path):
    cells = [c for c in _cells(path) if c["cell_type"] == "code"]
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert _source(cells[0]).startswith("# dtbook-install") and url in _source(cells[0])


def test_no_placeholder_on_the_pages():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    texts = {p: p.read_text(encoding="utf-8") for p in [ROOT / "index.md", ROOT / "README.md"]
             + sorted((ROOT / "chapters").rglob("*.md")) + NOTEBOOKS}
    for path, text in texts.items():
        assert not re.search(r"<(this repository|it|url|repo)>|TODO|XXX", text), path.name
        for found in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", text):
            assert found == url, f"{path.name} names {found}, not the book's {url}"


# "The book prints 1.70" on a page of this book leaves the reader guessing which book; the
# original edition is named as such (DESIGN.md, "The original edition").
_ANONYMOUS = re.compile(r"source book|\bthe source's\b|(?<!rest of )\bthe (book|source)('s)? "
                        r"(prints|says|gives|agrees|rounds|calls|explains|states|counts|quotes|"
                        r"derives|answer|figure)\b|\bas (the book|the source) says\b", re.I)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_original_edition_is_named_not_anonymous(path):
    found = _ANONYMOUS.search(path.read_text(encoding="utf-8"))
    assert not found, f"{found.group(0)!r}: say 'the original edition' (DESIGN.md)"


def test_book_notes_name_the_original_edition():
    """The corrections appendix prints every book_note out of its chapter's context."""
    from dtbook.exercises import registry

    anonymous = [k for k, ex in registry().items()
                 if ex.book_note and re.search(r"\b(the|its) (book|source)\b", ex.book_note, re.I)]
    assert not anonymous, f"book_note says 'the book'/'the source': {anonymous}"


def test_the_corrections_appendix_lists_every_correction():
    """Counted here independently of dtbook.edition: every book_note and every box."""
    from dtbook import edition
    from dtbook.exercises import registry

    notes = sum(1 for ex in registry().values() if ex.book_note)
    boxes = sum(len(re.findall(r"```\{admonition\} Correction to the original edition", _source(c)))
                for path in NOTEBOOKS for c in _cells(path) if c["cell_type"] == "markdown")
    found = edition.corrections()
    assert notes > 0 and boxes > 0
    assert len(found) == notes + boxes
    assert all(c.why.strip() for c in found)
    assert "corrections" in (ROOT / "_toc.yml").read_text()


# A sentence that reports what this machine did carries its numbers by glue, never typed
# (DESIGN.md, "Measuring on a shared machine"). Given data of a worked problem is not a
# measurement: the phrases below are such givens, each with the chapter that states it.
_MEASURED_WORDS = re.compile(r"\b(measured|took|this machine|this run|timed)\b", re.I)
_TYPED_FIGURE = re.compile(r"(?<![\w{`.])\d[\d.,]*\s*(?:µs|us|ms|s|GB/s|MB/s|GiB/s|×)(?!\w)")
_GIVEN = ("the measured 500 ms",         # chapter 13's Question: a figure the reader is handed
          "file system starves this run")  # chapter 03a: the original edition's training run


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_measured_facts_are_glued_not_typed(path):
    typed = []
    for cell in _cells(path):
        if cell["cell_type"] != "markdown":
            continue
        text = re.sub(r"\$[^$]*\$", "", _source(cell))          # formulas are not figures
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if (_MEASURED_WORDS.search(sentence) and _TYPED_FIGURE.search(sentence)
                    and not any(g in sentence.lower() for g in _GIVEN)):
                typed.append(" ".join(sentence.split())[:160])
    assert not typed, f"typed figures in sentences about a measurement: {typed}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_glued_numbers_never_print_as_1e_plus(path):
    # Python's g format writes 120 as 1.2e+02 at two digits; glued prose uses
    # dtbook.units.fmt_num (plain digits, or 1.2×10⁸ outside 10⁻³..10⁶) instead.
    for cell in _cells(path):
        src = _source(cell)
        if cell["cell_type"] == "code" and "glue(" in src:
            bad = re.findall(r"\{[^{}]+?:,?\.\d+[ge]\}", src)
            assert not bad, f"glue formats {bad}: use units.fmt_num or fmt_sci"


# ---- chapters link each other; setup and bookkeeping stay off the page (issue 20) ---------------

def _prose(text: str) -> str:
    """Markdown with what a reference may legitimately sit in removed: links, inline code,
    math, headings and directive lines (an exercise title is not a place for a link)."""
    kept, fences = [], []  # fences: for each open fence, whether it holds code
    for line in text.splitlines():
        fence = re.match(r"\s*`{3,}(.*)$", line)
        if fence:
            info = fence.group(1).strip()
            if info or not fences:
                fences.append(not info.startswith("{"))
            else:
                fences.pop()
        elif not any(fences) and not re.match(r"\s*(#|:::|:\w+:)", line):
            kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$]+\$", " ", text)
    text = re.sub(r"\[[^\]\n]*\]\([^)\n]*\)", " ", text)
    return re.sub(r"`[^`\n]*`", " ", text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_references_are_links(path):
    """'chapter 20' in the prose is a link to chapter 20 (DESIGN.md, "What the page shows"),
    every link to a notebook reaches one, and no page points at a chapter the book lacks."""
    numbers = chapter_notebooks(ROOT)
    own = re.match(r"(\d+[a-z]?)-", path.name).group(1)
    plain, broken = [], []
    for cell in _cells(path):
        if cell["cell_type"] != "markdown":
            continue
        text = _source(cell)
        for target in re.findall(r"\]\(([^)\s]+\.ipynb)\)", text):
            if not (path.parent / target).resolve().exists():
                broken.append(target)
        for m in re.finditer(r"\b[Cc]hapters?\s+(\d+[a-z]?)\b", _prose(text)):
            number = m.group(1)
            key = next((k for k in numbers if k.lstrip("0") == number.lstrip("0")), None)
            if key != own:
                plain.append(m.group(0))
    assert not broken, f"{path.name} links to notebooks that do not exist: {broken}"
    assert not plain, (f"{path.name} names chapters without linking them: {plain} "
                       f"(run: python scripts/nbtidy.py {path.relative_to(ROOT)})")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_on_the_page_opens_with_imports(path):
    # One rule for the whole book: the import list is bookkeeping (DESIGN.md); a cell that
    # starts with imports and goes on to compute is split, the imports hidden.
    import ast

    for i, cell in enumerate(_cells(path)):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] != "code" or tags & {"remove-input", "remove-cell"}:
            continue
        try:
            body = ast.parse(_source(cell)).body
        except SyntaxError:
            continue
        assert not (body and isinstance(body[0], (ast.Import, ast.ImportFrom))), \
            f"{path.name} cell {i} shows its imports"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_budget_bookkeeping_on_the_page(path):
    # "measurements took 12 s of a 30 s budget" is bookkeeping, not a result (DESIGN.md):
    # a chapter's Budget bounds its re-measuring, and its report goes to failure messages only.
    code = "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "code")
    budgets = re.findall(r"^\s*(\w+)\s*=\s*(?:measure\.)?Budget\(", code, re.M)
    shown = [b for b in budgets if re.search(rf"\b{b}\.report\(", code)]
    assert not shown, f"{path.name} puts {shown[0]}.report() on the page"
    prose = "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "markdown")
    assert not re.search(r"budget\b[^.\n]*\(load|of a [^.\n]*\bs budget", prose, re.I), \
        f"{path.name} states the measurement budget in its prose"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_explorer_section_has_one_name(path):
    # every chapter calls its interactive section "Explore" (optionally ": what it varies")
    markdown = "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "markdown")
    headings = re.findall(r"^#+ (Explor\w*)", markdown, re.M)
    assert set(headings) <= {"Explore"}, f"{path.name}: {headings}"
