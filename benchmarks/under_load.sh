#!/usr/bin/env bash
# Run the README's test command with two CPU-bound processes beside it, as a busy laptop or a
# shared CI machine would (DESIGN.md, "Measuring on a shared machine").
#
#   benchmarks/under_load.sh [RUNS] [pytest paths...]
#
# RUNS defaults to 3. With paths, only those are tested (same options as `make test`).
# Prints, per run: pass or fail, the suite's wall time, and the five slowest notebooks.
set -u
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
burners=()
stop() { for p in "${burners[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop EXIT INT TERM
for _ in 1 2; do python3 -c 'while True: pass' & burners+=($!); done
make .venv/.ready >/dev/null 2>&1 || { echo "could not set up .venv (make .venv/.ready)"; exit 1; }
log=$(mktemp -d)
fails=0
for i in $(seq "$runs"); do
  t0=$(date +%s)
  if [ $# -gt 0 ]; then
    .venv/bin/python -m pytest -n 2 --dist loadfile --nbval-lax --nbval-current-env \
      --nbval-cell-timeout=240 --durations=0 -q "$@" >"$log/run$i.txt" 2>&1
  else
    make test PYTEST_EXTRA=--durations=0 >"$log/run$i.txt" 2>&1
  fi
  rc=$?
  t1=$(date +%s)
  [ $rc -eq 0 ] || fails=$((fails + 1))
  echo "run $i: $([ $rc -eq 0 ] && echo passed || echo FAILED) in $((t1 - t0)) s (load $(cut -d' ' -f1 /proc/loadavg)); $(grep -E '^=+ .*(passed|failed).* =+$' "$log/run$i.txt" | tail -1 | tr -d '=')"
  # per notebook: nbval reports each cell as a test; add up the cells of each notebook
  grep -E '^[0-9.]+s call +chapters/.*\.ipynb::' "$log/run$i.txt" |
    awk '{split($3, a, "::"); t[a[1]] += $1} END {for (k in t) printf "  %7.1f s  %s\n", t[k], k}' |
    sort -rn | head -5
  grep -E '^(FAILED|ERROR) ' "$log/run$i.txt" | head -5
done
echo "$((runs - fails)) of $runs runs passed; logs in $log"
[ $fails -eq 0 ]
