#!/usr/bin/env bash
# The whole test suite: sets everything up, lints, then runs pytest against the real test
# WordPress. Under CI=true a WordPress test that cannot reach WordPress fails instead of
# skipping. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" >&2
ruff check .
ruff format --check .
echo "== pytest (SQLite ledger)" >&2
python -m pytest -q -rs "$@"
echo "== done in $((SECONDS - started)) s" >&2
