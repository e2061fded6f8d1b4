#!/usr/bin/env bash
# The whole check, exactly as CI runs it: set-up, lint, types, generated-code freshness, tests.
#   ./scripts/test.sh                 # everything: every tier (unit, integration, deploy, testbed)
#   ./scripts/test.sh --fast          # the same checks, then the unit tier only (a few minutes)
#   ./scripts/test.sh -k rpc          # extra arguments go to pytest (after --fast, too)
# mypy runs beside pytest, on the second core; a type error fails the run all the same.
set -euo pipefail
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/bootstrap.sh" --test
VENV="${SPARKMILL_VENV:-$ROOT/.venv}"
export PATH="$VENV/bin:$PATH"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
cd "$ROOT"

echo "== ruff"
ruff check .
ruff format --check .
echo "== import contracts"
python scripts/check_imports.py
echo "== code names in the docs"
python scripts/check_docs.py --check
echo "== generated code"
python scripts/gen_protos.py --check
python scripts/gen_config_docs.py --check
# mypy (single-threaded, 15-20 s without its cache) runs on the second core while pytest
# starts on the first; its report is printed as soon as it is done, and a type error still
# fails the run.
MYPY_LOG="$(mktemp)"
trap 'rm -f "$MYPY_LOG"' EXIT
( if mypy >"$MYPY_LOG" 2>&1; then echo "== mypy: $(tail -1 "$MYPY_LOG")"; else
    echo "== mypy FAILED:"; cat "$MYPY_LOG"; exit 1; fi ) &
MYPY_PID=$!
PYTEST_RC=0
if [ "$FAST" = 1 ]; then
  echo "== pytest (fast tier: unit)"
  # Without arguments only tests/unit is collected (the others' imports cost seconds); with
  # arguments the marker still keeps every heavier tier out.
  [ $# -gt 0 ] || set -- tests/unit
  python -m pytest -q -ra -m unit "$@" || PYTEST_RC=$?
else
  echo "== pytest (every tier)"
  # The slowest 30 are printed: where the suite's time goes, also in CI's log.
  python -m pytest -q -ra --durations=30 "$@" || PYTEST_RC=$?
fi
MYPY_RC=0
wait "$MYPY_PID" || MYPY_RC=$?
[ "$MYPY_RC" -eq 0 ] || { echo "== mypy failed (its report is above)"; exit 1; }
exit "$PYTEST_RC"
