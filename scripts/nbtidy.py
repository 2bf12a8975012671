"""Apply the book's page conventions to chapter notebooks (DESIGN.md, "What the page shows").

    python scripts/nbtidy.py chapters/*/*.ipynb      # rewrite them in place
    python scripts/nbtidy.py --check chapters/*/*.ipynb   # exit 1 if any would change

Idempotent. For each notebook it
- moves the glue() calls that end a code cell into a cell of their own, and the imports (and
  seeds) that open one into a cell of their own before it, and tags every cell that only
  glues, imports or seeds ``remove-input``: bookkeeping is not shown on the page (nor is
  the value its last call returns: such a cell ends with ';');
- turns "chapter 20" (and "chapters 14 and 31") in the prose into links to those chapters,
  so chapters link each other (a chapter's mention of itself stays plain text);
- makes the first code cell the one that installs dtbook where it is missing (Colab, a bare
  kernel), from the repository address in _config.yml, tagged ``remove-cell``;
- puts the grading policy, ``dtbook.exercises.PRECISION_POLICY``, in the exercise preamble;
- strips outputs.
tests/test_notebooks_hygiene.py holds every notebook to the same rules.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
INSTALL_MARK = "# dtbook-install"
POLICY_MARK = "Grading: "
BOOKKEEPING_CALLS = {"glue", "seed", "manual_seed", "filterwarnings", "use"}


def repository_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return config["repository"]["url"]


def install_source(url: str) -> str:
    folder = url.rstrip("/").rsplit("/", 1)[-1]
    return f'''{INSTALL_MARK}: in Colab or a kernel without the book's package, fetch it (a no-op here)
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("dtbook") is None:
    _here = os.path.abspath("{folder}")
    if not os.path.isdir(_here):
        subprocess.run(["git", "clone", "-q", "--depth", "1", "{url}", _here], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", _here], check=True)
    sys.path.insert(0, _here)'''


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _set(cell, text: str) -> None:
    lines = text.splitlines(keepends=True)
    if lines and lines[-1].endswith("\n"):
        lines[-1] = lines[-1][:-1]
    cell["source"] = lines


def _call_name(node) -> str | None:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        f = node.value.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _is_glue(node) -> bool:
    if _call_name(node) == "glue":
        return True
    return isinstance(node, ast.For) and all(_is_glue(n) for n in node.body) and not node.orelse


def is_bookkeeping(node) -> bool:
    """A statement that only glues a value, imports or seeds."""
    return (isinstance(node, (ast.Import, ast.ImportFrom)) or _is_glue(node)
            or _call_name(node) in BOOKKEEPING_CALLS)


def _tags(cell) -> list:
    return cell.setdefault("metadata", {}).setdefault("tags", [])


def _new_code_cell(text: str, tags) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "id": uuid.uuid4().hex[:8],
            "metadata": {"tags": list(tags)}, "outputs": [], "source": []}
    _set(cell, text)
    return cell


def _names(node, ctx) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def split_trailing_glue(cells: list) -> list:
    """A code cell that computes and glues becomes two: every glue() call that can move (no
    later statement of the cell rebinds a name it reads) goes, in order, to a hidden cell
    right after it. Glue has no effect on the computation, so moving it changes nothing."""
    out = []
    for cell in cells:
        out.append(cell)
        if cell["cell_type"] != "code":
            continue
        text = _source(cell)
        try:
            body = ast.parse(text).body
        except SyntaxError:  # IPython magics: leave the cell alone
            continue
        if not body or all(is_bookkeeping(n) for n in body):
            continue
        movable = []
        for i, node in enumerate(body):
            if _is_glue(node):
                later = set().union(*[_names(n, ast.Store) for n in body[i + 1:]]) if body[i + 1:] else set()
                if not (_names(node, ast.Load) - {"glue"}) & later:
                    movable.append(i)
        if not movable or len(movable) == len(body):
            continue
        lines = text.splitlines(keepends=True)
        keep, moved = [], []
        for i, node in enumerate(body):
            start = node.lineno - 1
            # comment lines just above a statement belong to it
            while start > 0 and lines[start - 1].lstrip().startswith("#") and \
                    (i == 0 or start - 1 >= body[i - 1].end_lineno):
                start -= 1
            chunk = "".join(lines[start:node.end_lineno])
            (moved if i in movable else keep).append((start, node.end_lineno, chunk))
        # rebuild the computing cell from the lines that are not moved (keeping blank lines
        # and comments between statements where they were)
        drop = {n for start, end, _ in moved for n in range(start, end)}
        head = "".join(line for n, line in enumerate(lines) if n not in drop)
        head = re.sub(r"\n{3,}", "\n\n", head).strip("\n")
        tail = "\n".join(chunk.rstrip("\n") for _, _, chunk in moved)
        _set(cell, head)
        out.append(_new_code_cell(tail, ["remove-input"]))
    return out


def split_leading_imports(cells: list) -> list:
    """A code cell that opens with imports (or seeds) and goes on to compute becomes two: the
    opening bookkeeping moves to a hidden cell right before it. Nothing runs in between, so
    the notebook computes the same; the page shows the setup that teaches (the catalog
    entries a chapter works with), not the import list."""
    out = []
    for cell in cells:
        text = _source(cell)
        if cell["cell_type"] != "code" or text.startswith(INSTALL_MARK):
            out.append(cell)
            continue
        try:
            body = ast.parse(text).body
        except SyntaxError:
            out.append(cell)
            continue
        lead = 0
        while lead < len(body) and is_bookkeeping(body[lead]) and not _is_glue(body[lead]):
            lead += 1
        if lead == 0 or lead == len(body) or not any(
                isinstance(n, (ast.Import, ast.ImportFrom)) for n in body[:lead]):
            out.append(cell)
            continue
        lines = text.splitlines(keepends=True)
        first = body[lead]
        # a decorated def starts at its first decorator, not at the def line
        cut = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])]) - 1
        if cut < body[lead - 1].end_lineno:  # "import math; x = math.pi": one line, left whole
            out.append(cell)
            continue
        # comment lines just above the first computing statement belong to it
        while cut > body[lead - 1].end_lineno and lines[cut - 1].lstrip().startswith("#"):
            cut -= 1
        head = "".join(lines[:cut]).strip("\n")
        out.append(_new_code_cell(head, ["remove-input"]))
        _set(cell, "".join(lines[cut:]).strip("\n"))
        out.append(cell)
    return out


def _chapter_files() -> dict:
    """{"06": Path(".../06-estimation-discipline.ipynb"), "13a": ...}: the chapters the table of
    contents builds, which a reference can link to (:func:`dtbook.edition.chapter_notebooks`)."""
    sys.path.insert(0, str(ROOT))
    from dtbook.edition import chapter_notebooks
    return chapter_notebooks(ROOT, in_toc=True)


# Spans a chapter reference is never rewritten in: links already made, inline code and roles,
# math, and whole lines that are headings or directive titles and options.
_PROTECTED = re.compile(r"^#.*$|^```.*$|^:::.*$|^:\w+:.*$|\[[^\]\n]*\]\([^)\n]*\)|`[^`\n]*`"
                        r"|\$\$[\s\S]*?\$\$|\$[^$]+\$|<[^>\n]+>", re.M)
_NUMBER = r"\d{1,2}[a-z]?\b(?!\.\d)"  # "chapter 3.2" names a section of another book
CHAPTER_REFERENCE = re.compile(
    r"\b([Cc]hapters?)(\s+)(" + _NUMBER + r"(?:(?:,\s*|,?\s+and\s+|\s+or\s+|\s*–\s*|\s+to\s+)"
    + _NUMBER + r")*)")


def _protected_spans(text: str):
    """The spans of _PROTECTED, and every fenced block whose fence is not a MyST directive
    (```python, ```text: code, shown as typed); a directive's body is prose and is linked."""
    fences, stack = [], []  # (start, end) of code blocks; open fences: (start, is_code)
    for line in re.finditer(r"^(`{3,})(.*)$", text, re.M):
        info = line.group(2).strip()
        if info or not stack:
            stack.append((line.start(), not info.startswith("{")))
        else:
            start, is_code = stack.pop()
            if is_code:
                fences.append(re.compile(r"[\s\S]*", re.M).match(text, start, line.end()))
    inside = lambda pos: any(f.start() <= pos < f.end() for f in fences)
    spans = fences + [m for m in _PROTECTED.finditer(text) if not inside(m.start())]
    return sorted(spans, key=lambda m: m.start())


def link_chapter_references(text: str, here: Path, chapters: dict) -> str:
    """'chapter 20' -> '[chapter 20](../05-memory/20-zero-sharding.ipynb)' outside protected
    spans; each number of 'chapters 14 and 31' gets its own link."""
    import os

    def target(number: str):
        m = re.fullmatch(r"(\d+)([a-z]?)", number)
        path = chapters.get(f"{int(m.group(1)):02d}{m.group(2)}")
        if path is None or path.resolve() == here.resolve():
            return None
        return os.path.relpath(path, here.parent).replace(os.sep, "/")

    def rewrite(m):
        word, space, numbers = m.groups()
        parts = re.split(r"(\d{1,2}[a-z]?)", numbers)
        linked = [(p, target(p)) if i % 2 else (p, None) for i, p in enumerate(parts)]
        if not any(t for _, t in linked):
            return m.group(0)
        if word.lower() == "chapter" and len(linked) == 3:  # one number: the phrase is the
            return f"[{word} {numbers}]({linked[1][1]})"      # link text, on one line
        return word + space + "".join(f"[{p}]({t})" if t else p for p, t in linked)

    out, last = [], 0
    for span in _protected_spans(text):
        if span.start() < last:  # begins inside a span already kept as it is
            continue
        out.append(CHAPTER_REFERENCE.sub(rewrite, text[last:span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(CHAPTER_REFERENCE.sub(rewrite, text[last:]))
    return "".join(out)


def link_chapters(cells: list, here: Path) -> None:
    chapters = _chapter_files()
    for cell in cells:
        if cell["cell_type"] == "markdown":
            text = _source(cell)
            linked = link_chapter_references(text, here, chapters)
            if linked != text:
                _set(cell, linked)


def tag_bookkeeping(cells: list) -> None:
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        text = _source(cell)
        try:
            body = ast.parse(text).body
        except SyntaxError:
            continue
        if body and all(is_bookkeeping(n) for n in body):
            tags = _tags(cell)
            if not {"remove-input", "remove-cell"} & set(tags):
                tags.append("remove-input")
            # a hidden cell's outputs still show: torch.manual_seed(0) last would print its
            # <torch._C.Generator object at 0x...>, so the cell ends with ';'
            if _call_name(body[-1]) not in (None, "glue") and not text.rstrip().endswith(";"):
                _set(cell, text.rstrip() + ";")


def ensure_install_cell(cells: list, url: str) -> list:
    old = [c for c in cells if _source(c).startswith(INSTALL_MARK)]
    cells = [c for c in cells if not _source(c).startswith(INSTALL_MARK)]
    first_code = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), len(cells))
    cell = _new_code_cell(install_source(url), ["remove-cell"])
    if old:
        cell["id"] = old[0]["id"]  # the same cell, rewritten: tidying twice changes nothing
    cells.insert(first_code, cell)
    return cells


def ensure_policy(cells: list) -> None:
    try:
        sys.path.insert(0, str(ROOT))
        from dtbook.exercises import PRECISION_POLICY
    except ImportError:
        return
    for cell in cells:
        text = _source(cell)
        heading = re.search(r"(?m)^## Exercises", text)
        if cell["cell_type"] != "markdown" or heading is None:
            continue
        # The heading may close a cell of prose: only the part from the heading on is the preamble.
        before, section = text[:heading.start()], text[heading.start():]
        kept = re.sub(r"\n\n" + POLICY_MARK + r"[^\n]*", "", section)
        head, _, rest = kept.partition("\n\n")
        para, _, rest2 = rest.partition("\n\n")
        if para.startswith(("```", ":::")):  # no introduction: the policy goes under the heading
            parts = [head, POLICY_MARK + PRECISION_POLICY] + ([rest] if rest else [])
        else:
            parts = [head, para, POLICY_MARK + PRECISION_POLICY] + ([rest2] if rest2 else [])
        _set(cell, before + "\n\n".join(parts))


def strip_outputs(cells: list) -> None:
    for cell in cells:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None


def tidy(nb: dict, url: str, path: Path | None = None) -> dict:
    cells = split_trailing_glue(nb["cells"])
    cells = split_leading_imports(cells)
    tag_bookkeeping(cells)
    if path is not None:
        link_chapters(cells, path)
    cells = ensure_install_cell(cells, url)
    ensure_policy(cells)
    strip_outputs(cells)
    nb["cells"] = cells
    return nb


def main(argv) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"]
    url, changed = repository_url(), []
    for path in paths:
        before = path.read_text(encoding="utf-8")
        nb = tidy(json.loads(before), url, path)
        after = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        if after != before:
            changed.append(path)
            if not check:
                path.write_text(after, encoding="utf-8")
    for path in changed:
        print(("would change " if check else "tidied ") + str(path))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
