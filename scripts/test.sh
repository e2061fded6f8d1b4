#!/usr/bin/env bash
# The whole check, exactly as CI runs it: set-up, lint, types, generated-code freshness, tests.
#   ./scripts/test.sh            # everything
#   ./scripts/test.sh -k rpc     # extra arguments go to pytest
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/bootstrap.sh"
VENV="${SPARKMILL_VENV:-$ROOT/.venv}"
export PATH="$VENV/bin:$PATH"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
cd "$ROOT"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy
echo "== import contracts"
python scripts/check_imports.py
echo "== code names in the docs"
python scripts/check_docs.py --check
echo "== generated code"
python scripts/gen_protos.py --check
python scripts/gen_config_docs.py --check
echo "== pytest"
python -m pytest -q -ra "$@"
