"""The corrections appendix (dtbook.edition.appendix): numbers and math a reader can read."""

import json
import re
from pathlib import Path

import pytest

from dtbook import edition

ROOT = Path(__file__).resolve().parent.parent
_ROLE = re.compile(r"\{glue(?::\w*)?\}`")
_CROSS = re.compile(r"\{glue(?::text)?\}`/(chapters/[^`:]+)\.ipynb::([^`:]+)(?::[^`]*)?`")


@pytest.fixture(scope="module")
def full():
    return edition.appendix(ROOT)


def _glued_keys(notebook: Path) -> str:
    """The notebook's code, where every glued key is named."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_every_glued_value_is_pasted_from_its_chapter(full):
    """Each box's glue role becomes a cross-document role to the notebook that glues it;
    none is elided to an ellipsis."""
    roles = sum(len(_ROLE.findall(text)) for _, text in edition.chapter_boxes(ROOT))
    cross = _CROSS.findall(full.chapters)
    assert roles > 0 and len(cross) == roles
    assert "…" not in full.chapters and "see chapter" not in full.chapters
    for doc, key in set(cross):
        code = _glued_keys(ROOT / f"{doc}.ipynb")
        assert key in code, f"{key} is not glued in {doc}"


def test_chapters_outside_the_build_are_named_not_linked():
    one = "chapters/01-foundations/02-extended-roofline"
    page = edition.appendix(ROOT, docs={one})
    others = [(p, t) for p, t in edition.chapter_boxes(ROOT) if not p.stem.startswith("02-")]
    expected = sum(len(_ROLE.findall(t)) for _, t in others)
    assert page.chapters.count("(see chapter ") == expected > 0
    assert f"{expected} values" in page.summary
    linked = set(re.findall(r"\{doc\}`(?:[^`<]*<)?/([^`>]+)>?`", page.chapters))
    assert linked == {one}
    pasted = {doc for doc, _ in _CROSS.findall(page.chapters)}
    assert pasted == {one}
    assert re.findall(r"\{ref\}`(\S+) <", page.exercises) == ["02.4", "02.5"]


def test_math_stays_math_and_plain_text_stays_plain(full):
    """Boxes are MyST (their $...$ is typeset); exercise notes are plain text, escaped so a
    '*' or '$' in them shows as written."""
    assert r"$\frac78 \cdot 2\text{ GB} / 300\text{ GB/s}$" in full.chapters
    assert edition._escape("costs $5 * 2_a|b") == r"costs \$5 \* 2\_a\|b"
    rows = [r for r in full.exercises.splitlines() if r.startswith(("* - ", "  - "))]
    assert len(rows) == 4 * (1 + sum(1 for c in edition.corrections(ROOT)
                                     if c.where.startswith("exercise ")))
    assert not any(re.search(r"(?<!\\)\$", r) for r in rows)


def test_no_internal_labels(full):
    for text in (full.summary, full.exercises, full.chapters):
        assert not re.search(r"curriculum|source issue", text, re.I)
    assert edition._strip_internal("doubles (curriculum Source issue A.9).") == "doubles."


def test_links_in_a_box_point_at_the_chapter_from_the_appendix():
    docs = {"chapters/04-parallelism/14-x", "chapters/05-memory/20-y"}
    text, missing = edition._box_markdown(
        "See {doc}`20-y <../05-memory/20-y>`, {doc}`the other <14-x>`, {doc}`gone`, "
        "[a paper](https://example.org) and {glue:text}`k:.1f` {glue}`j`:",
        "chapters/04-parallelism/14-x", docs)
    assert missing == 0
    assert "{doc}`20-y </chapters/05-memory/20-y>`" in text
    assert "{doc}`the other </chapters/04-parallelism/14-x>`" in text
    assert ", gone," in text and "[a paper](https://example.org)" in text
    assert "{glue:text}`/chapters/04-parallelism/14-x.ipynb::k:.1f`" in text
    assert "{glue}`/chapters/04-parallelism/14-x.ipynb::j`" in text
    assert text.endswith("(continued in the chapter)*")


def test_the_book_root_is_found_from_a_chapter_folder(tmp_path, monkeypatch):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: index\nparts:\n"
                                       "  - chapters:\n      - file: chapters/a/01-x\n")
    (tmp_path / "chapters" / "a").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "chapters" / "a")
    assert edition._book_root() == tmp_path
    assert edition._toc_docs(tmp_path) == {"index", "chapters/a/01-x"}
