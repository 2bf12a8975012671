"""Read the built book as a browser does and count what must not be on a page (DESIGN.md,
"What the page shows"): stderr output blocks, bookkeeping and internal words, LaTeX that
MathJax left raw, and "chapter N" in prose that is not a link.

    python scripts/pagecheck.py _build/html      # needs Debian's chromium

One line per page; a maintainer's check after `make book`, not part of the test suite.
"""

import html
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync"]
WORDS = ["measurements took", "budget (load", "curriculum", "search tool", "not reached",
         "FutureWarning", "UserWarning", "/work/", ".venv", "USDT", "does not support alltoall",
         "Traceback", "torch._C.Generator"]


def rendered(page: Path) -> str:
    """The page's DOM after its scripts (MathJax) ran."""
    return subprocess.run(CHROMIUM + [f"--user-data-dir={tempfile.mkdtemp()}",
                                      "--virtual-time-budget=15000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120).stdout


def text_of(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def check(page: Path) -> str:
    dom = rendered(page)
    stderr_blocks = len(re.findall(r'class="[^"]*output stderr', dom))
    body = re.sub(r"<script.*?</script>|<style.*?</style>", "", dom, flags=re.S)
    words = [w for w in WORDS if w in text_of(body)]
    prose = re.sub(r"<(pre|code)[^>]*>.*?</\1>", " ", body, flags=re.S)  # code may spell LaTeX
    typeset = re.sub(r"<mjx-container.*?</mjx-container>", "", prose, flags=re.S)
    raw_tex = len(re.findall(r"\\frac|\\text\{|\\cdot", text_of(typeset)))
    prose = re.sub(r"<a [^>]*>.*?</a>", " ", prose, flags=re.S)
    plain = re.findall(r"\b[Cc]hapters? \d+[a-z]?\b", text_of(prose))
    return (f"{page.stem[:34]:34} stderr={stderr_blocks} words={words} raw_tex={raw_tex} "
            f"plain_refs={plain}")


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "_build/html")
    for page in sorted(root.glob("chapters/*/*.html")) + [root / "index.html"]:
        print(check(page), flush=True)
