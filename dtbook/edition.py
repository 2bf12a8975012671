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

__all__ = ["URL", "TITLE", "Correction", "corrections", "chapter_boxes"]


@dataclass(frozen=True)
class Correction:
    chapter: str     # "04", "13a"
    where: str       # "exercise 04.3" or the chapter notebook's path
    printed: str     # what the original edition prints ("" when the box tells it in words)
    right: str       # what this book computes
    why: str


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
            printed = (", ".join(str(a) for a in answer) if isinstance(answer, (tuple, list))
                       else str(answer))
            found.append(Correction(ex_id.split(".")[0], f"exercise {ex_id}", printed,
                                    ex.solution_display(), ex.book_note))
    for path, text in chapter_boxes(root):
        chapter = path.stem.split("-")[0]
        found.append(Correction(chapter, str(path.relative_to(root)), "", "", text))
    return found
