"""Every correction to the original edition, gathered from where it is checked.

The original edition is *The Algebra of Distributed Training*
(https://ttsugriy.github.io/distributed-training-book). This book records where it prints a
wrong number in two places only: an exercise's ``book_answer`` with a ``book_note`` (the
checker then shows that the printed answer is rejected), and a chapter's
"Correction to the original edition" box. :func:`corrections` reads both, so the appendix
that lists them is built from the records themselves and cannot disagree with them
(appendix "Corrections to the original edition").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

URL = "https://ttsugriy.github.io/distributed-training-book"
TITLE = "Correction to the original edition"
_BOX = re.compile(r"```\{admonition\} " + re.escape(TITLE) + r"\n(?::[^\n]*\n)*(.*?)\n```", re.S)

__all__ = ["URL", "TITLE", "Correction", "corrections", "chapter_boxes", "chapter_notebooks",
           "Appendix", "appendix"]


@dataclass(frozen=True)
class Correction:
    chapter: str     # "04", "13a"
    where: str       # "exercise 04.3" or the chapter notebook's path
    printed: str     # what the original edition prints ("" when the box tells it in words)
    right: str       # what this book computes
    why: str


def _number(value) -> str:
    """A printed answer as text: a large float in powers of ten (1.9×10¹⁰, not 19000000000.0),
    everything else as written."""
    if isinstance(value, float) and abs(value) >= 1e6:
        from dtbook.units import fmt_sci
        return fmt_sci(value, 6)
    return str(value)


def _root() -> Path:
    return Path(__file__).resolve().parent.parent


def chapter_boxes(root: Path | None = None) -> list[tuple[Path, str]]:
    """(notebook, text) of every correction box in the chapters, in book order."""
    root = root or _root()
    out = []
    for path in sorted((root / "chapters").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                out += [(path, m.group(1).strip()) for m in _BOX.finditer(text)]
    return out


def corrections(root: Path | None = None) -> list[Correction]:
    """Every recorded correction: the exercises' first, then the chapters' boxes."""
    from dtbook.exercises import registry

    root = root or _root()
    found = []
    for ex_id, ex in registry().items():
        if ex.book_note:
            answer = ex.book_answer
            printed = (", ".join(_number(a) for a in answer) if isinstance(answer, (tuple, list))
                       else _number(answer))
            found.append(Correction(ex_id.split(".")[0], f"exercise {ex_id}", printed,
                                    ex.solution_display(), ex.book_note))
    for path, text in chapter_boxes(root):
        chapter = path.stem.split("-")[0]
        found.append(Correction(chapter, str(path.relative_to(root)), "", "", text))
    return found


# --------------------------------------------------------------------------------------
# The appendix page
# --------------------------------------------------------------------------------------
# The appendix is MyST Markdown that a code cell of chapters/appendices/corrections.md
# displays (with ``mystnb: markdown_format: myst``), so its math is typeset like the
# chapters'. A chapter box's ``{glue:text}`key``` becomes myst-nb's cross-document form
# ``{glue:text}`/chapters/…/NN-slug.ipynb::key:fmt```, resolved when the page is written from
# the chapter's glue record of the same build: the value is the one the chapter shows.

_GLUE_ROLE = re.compile(r"\{glue(?::(\w*))?\}`([^`]*)`")
_DOC_ROLE = re.compile(r"\{doc\}`([^`]*)`")
_MD_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")
_INTERNAL = re.compile(r"\s*\((?:the )?curriculum[^()]*\)", re.I)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>$|~#{}])")
NOT_BUILT = "(see chapter {chapter})"


@dataclass(frozen=True)
class Appendix:
    summary: str     # one paragraph: how many corrections, and what this build leaves out
    exercises: str   # a list-table: exercise, the original prints, this book, why
    chapters: str    # the chapters' boxes, chapter by chapter, linked


def _book_root() -> Path:
    """The book being built: the nearest folder above the working directory holding a
    ``_toc.yml`` (a chapter executes in its own folder), else this repository."""
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "_toc.yml").is_file():
            return folder
    return _root()


def _toc_docs(root: Path) -> set[str] | None:
    """Docnames the book's ``_toc.yml`` builds, or None when there is no toc."""
    toc = root / "_toc.yml"
    if not toc.is_file():
        return None
    import yaml

    docs: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    docs.add(re.sub(r"\.(ipynb|md)$", "", node[key]).strip("/"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(toc.read_text(encoding="utf-8")))
    return docs


def chapter_notebooks(root: Path, *, in_toc: bool = False) -> dict[str, Path]:
    """Every chapter notebook by its number as the file names it:
    {"04": .../04-alpha-beta-model.ipynb, "13a": ...}. ``in_toc=True`` keeps only those the
    book's ``_toc.yml`` builds (the chapters a reference can link to; all of them when there is
    no toc). The one map from chapter numbers to files: ``scripts/nbtidy.py`` and the
    notebook-hygiene test read it too."""
    docs = _toc_docs(root) if in_toc else None
    out = {}
    for path in sorted((root / "chapters").rglob("*.ipynb")):
        m = re.match(r"(\d+[a-z]?)-", path.name)
        if m and ".ipynb_checkpoints" not in path.parts and (
                docs is None or path.relative_to(root).with_suffix("").as_posix() in docs):
            out[m.group(1)] = path
    return out


def _chapter_docs(root: Path) -> dict[str, str]:
    """:func:`chapter_notebooks` as docnames:
    {"04": "chapters/01-foundations/04-alpha-beta-model", ...}."""
    return {number: path.relative_to(root).with_suffix("").as_posix()
            for number, path in chapter_notebooks(root).items()}


def _title(path: Path) -> str:
    """A chapter's title: the first level-1 heading of its notebook."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^# (.+)$", "".join(cell["source"]), re.M)
            if m:
                return m.group(1).strip()
    return path.stem


def _escape(text: str) -> str:
    """Plain text (an exercise's note) as Markdown that shows it verbatim, on one line."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _strip_internal(text: str) -> str:
    """Drop parenthesised internal references ("(curriculum Source issue A.9)") that a reader
    has no use for; the sentence around them stands without them."""
    return _INTERNAL.sub("", text)


def _box_markdown(text: str, docname: str, docs: set[str]) -> tuple[str, int]:
    """A chapter box's MyST, re-anchored for the appendix: glued values and links point at
    the chapter (absolute paths), and anything in a chapter outside this build is named,
    not linked. Returns the text and how many glued values could not be shown."""
    folder = docname.rsplit("/", 1)[0]
    built = docname in docs
    missing = 0

    def absolute(target: str) -> str:
        if target.startswith("/"):
            return target.lstrip("/")
        parts = []
        for part in f"{folder}/{target}".split("/"):
            if part == "..":
                if not parts:
                    raise ValueError(f"{docname}: the link {target!r} leads outside the book")
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return "/".join(parts)

    def glue(m):
        nonlocal missing
        kind, content = m.group(1), m.group(2)
        if not built or kind not in (None, "", "any", "text"):
            # (myst-nb pastes only text and plain outputs from another document)
            missing += 1
            return NOT_BUILT.format(chapter=docname.rsplit("/", 1)[-1].split("-")[0])
        if kind == "text":
            key, _, fmt = content.partition(":")
            return f"{{glue:text}}`/{docname}.ipynb::{key}:{fmt or 's'}`"
        return f"{{glue}}`/{docname}.ipynb::{content}`"

    def doc(m):
        content = m.group(1)
        title = re.match(r"(.*?)\s*<([^>]*)>$", content, re.S)
        label, target = (title.group(1), title.group(2)) if title else (None, content)
        target = re.sub(r"\.(ipynb|md)$", "", absolute(target))
        if target in docs:
            return f"{{doc}}`{label} </{target}>`" if label else f"{{doc}}`/{target}`"
        return label or target.rsplit("/", 1)[-1]

    def link(m):
        label, target = m.group(1), m.group(2)
        if re.match(r"[a-z]+:|#", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        path = re.sub(r"\.(ipynb|md|html)$", "", absolute(path))
        if path in docs and not anchor:
            return f"{{doc}}`{label} </{path}>`"
        return label

    text = _strip_internal(text)
    text = _GLUE_ROLE.sub(glue, text)
    text = _DOC_ROLE.sub(doc, text)
    text = _MD_LINK.sub(link, text)
    text = text.strip()
    if text.endswith(":"):
        text += " *(continued in the chapter)*"
    return text, missing


_CHAPTER_REF = re.compile(r"\b([Cc]hapter) (\d{1,2})([a-z]?)\b(?!\.\d)")


def _link_chapters(text: str, chapter_docs: dict[str, str], docs: set[str]) -> str:
    """'chapter 06' in an exercise's note (escaped text) as a link to chapter 06 when this
    build has it: chapters link each other here as in the chapters themselves."""
    def sub(m):
        target = chapter_docs.get(m.group(2).zfill(2) + m.group(3))
        if target not in docs:
            return m.group(0)
        return f"{{doc}}`{m.group(1)} {m.group(2)}{m.group(3)} </{target}>`"
    return _CHAPTER_REF.sub(sub, text)


def appendix(root: Path | None = None, docs: set[str] | None = None) -> Appendix:
    """The corrections appendix as MyST Markdown (appendix "Corrections to the original
    edition"). ``docs`` is the set of docnames this build contains (default: the book's
    ``_toc.yml``; every chapter when there is none). A chapter outside it is named rather
    than linked, and its glued values read "(see chapter N)"."""
    root = root or _book_root()
    chapter_docs = _chapter_docs(root)
    if docs is None:
        docs = _toc_docs(root)
    if docs is None:
        docs = set(chapter_docs.values())
    found = corrections(root)
    exercises = [c for c in found if c.where.startswith("exercise ")]
    boxes = [c for c in found if not c.where.startswith("exercise ")]

    rows = ["```{list-table}", ":header-rows: 1", ":widths: auto", ":class: corrections", "",
            "* - exercise", "  - the original prints", "  - this book", "  - why"]
    for c in exercises:
        ex_id = c.where.split()[-1]
        label = "ex-" + ex_id.replace(".", "-")
        name = (f"{{ref}}`{ex_id} <{label}>`" if chapter_docs.get(c.chapter) in docs
                else ex_id)
        rows += [f"* - {name}", f"  - {_escape(c.printed)}", f"  - {_escape(c.right)}",
                 f"  - {_link_chapters(_escape(_strip_internal(c.why)), chapter_docs, docs)}"]
    rows.append("```")

    blocks, missing, left_out = [], 0, []
    for chapter in dict.fromkeys(c.chapter for c in boxes):
        docname = Path(next(c.where for c in boxes if c.chapter == chapter)).with_suffix("")
        docname = docname.as_posix()
        if docname in docs:
            blocks.append(f"**{{doc}}`/{docname}`**")
        else:
            blocks.append(f"**{_escape(_title(root / (docname + '.ipynb')))}**")
            left_out.append(chapter)
        items = []
        for c in (c for c in boxes if c.chapter == chapter):
            text, n = _box_markdown(c.why, docname, docs)
            missing += n
            items.append("- " + "\n  ".join(text.splitlines()))
        blocks.append("\n".join(items))

    summary = (f"{len(found)} corrections: {len(exercises)} in exercises, "
               f"{len(boxes)} in the chapters' text.")
    if left_out:
        summary += (f" This build of the book leaves out chapter"
                    f"{'s' if len(left_out) > 1 else ''} {', '.join(left_out)}: "
                    f"where a correction below quotes one of the {missing} value"
                    f"{'s' if missing != 1 else ''} they compute, it reads \"(see chapter N)\".")
    return Appendix(summary, "\n".join(rows), "\n\n".join(blocks))
