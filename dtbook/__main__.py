"""``python -m dtbook plan ...``: the capacity planner's command line (chapter 27;
``python -m dtbook plan --help`` lists every flag)."""

import sys

from .plan.cli import main

_USAGE = ("usage: python -m dtbook plan (MODEL | --config config.json) --gpus N --batch B "
          "--seq S [--gpu NAME | --accelerator FILE] [...]\n"
          "       python -m dtbook plan --help   (every flag)")

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "plan":
        if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help"):
            print(_USAGE)
            raise SystemExit(0)
        print(_USAGE, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[2:]))
