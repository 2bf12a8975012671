"""Apply the book's page conventions to chapter notebooks (DESIGN.md, "What the page shows").

    python scripts/nbtidy.py chapters/*/*.ipynb      # rewrite them in place
    python scripts/nbtidy.py --check chapters/*/*.ipynb   # exit 1 if any would change

Idempotent. For each notebook it
- moves the glue() calls that end a code cell into a cell of their own, and tags every cell
  that only glues, imports or seeds ``remove-input``: bookkeeping is not shown on the page;
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


def tag_bookkeeping(cells: list) -> None:
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        try:
            body = ast.parse(_source(cell)).body
        except SyntaxError:
            continue
        if body and all(is_bookkeeping(n) for n in body):
            tags = _tags(cell)
            if not {"remove-input", "remove-cell"} & set(tags):
                tags.append("remove-input")


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


def tidy(nb: dict, url: str) -> dict:
    cells = split_trailing_glue(nb["cells"])
    tag_bookkeeping(cells)
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
        nb = tidy(json.loads(before), url)
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
