#!/usr/bin/env bash
# The whole test suite: sets everything up, lints, then runs pytest against the real test
# WordPress. Under CI=true a WordPress test that cannot reach WordPress fails instead of
# skipping, and the test WordPress this run started is purged at the end. Extra arguments go
# to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
if [ "${CI:-}" = "true" ] && [ ! -f wp_test_site/.runtime/site.json ]; then
  # CI purges the test WordPress it started (this checkout's database and files), also when a
  # step fails. Without CI=true, or when the site was already up, it is left running: a
  # developer's site (and every other checkout's, which has its own database) is never touched.
  trap 'bash wp_test_site/down.sh --purge >&2 || true' EXIT
fi
SETUP_TEST_TOOLS=1 bash scripts/setup.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" >&2
ruff check .
ruff format --check .
echo "== import-linter (the layers: .importlinter, docs/architecture.md)" >&2
lint-imports --no-cache
echo "== pytest (SQLite ledger)" >&2
python -m pytest -q -rs "$@"
echo "== pytest (PostgreSQL ledger): the suite again, each test on a fresh database" >&2
if pg_url=$(bash scripts/postgres.sh); then
  GATEWAY_TEST_DATABASE_URL="$pg_url" SOAK_JOBS="${SOAK_JOBS_PG:-50}" \
    python -m pytest -q -rs -m "not n8n" "$@"
elif [ "${CI:-}" = "true" ]; then
  echo "no PostgreSQL: under CI=true that is a failure" >&2; exit 1
else
  echo "SKIPPED: the PostgreSQL pass (no server could be started)" >&2
fi
echo "== benchmarks, smoke size (so the scripts cannot rot; figures: benchmarks/run)" >&2
PYTHON=python bash benchmarks/run --smoke >/dev/null
echo "== done in $((SECONDS - started)) s" >&2
