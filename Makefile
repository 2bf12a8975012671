# Two commands do everything on a fresh machine with Python 3.11:
#   make book   build the HTML book into _build/html
#   make test   run the whole test suite (dtbook, exercises, launcher, every notebook)
# Both create .venv from requirements.txt (and install dtbook editable) when it is missing.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
READY := $(VENV)/.ready
# Cells may launch gloo demos; none should come near this, but a hang must not stall CI.
CELL_TIMEOUT ?= 240
WORKERS ?= 2
# Extra pytest options, e.g. PYTEST_EXTRA=--durations=0 (benchmarks/under_load.sh uses it).
PYTEST_EXTRA ?=

.PHONY: book test lab clean

$(READY): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(READY)

book: $(READY)
	rm -rf _build/html _build/jupyter_execute
	$(VENV)/bin/jupyter-book build -W -n --keep-going .

test: $(READY)
	$(PY) -m pytest -n $(WORKERS) --dist loadfile \
		--nbval-lax --nbval-current-env --nbval-cell-timeout=$(CELL_TIMEOUT) \
		$(PYTEST_EXTRA) tests chapters

lab: $(READY)
	$(VENV)/bin/jupyter lab chapters/

clean:
	rm -rf _build .pytest_cache
