"""``python -m dtbook plan ...``: the capacity planner's command line (chapter 27)."""

import sys

from .plan.cli import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "plan":
        print("usage: python -m dtbook plan MODEL --gpus N --batch B --seq S [--explain]",
              file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[2:]))
