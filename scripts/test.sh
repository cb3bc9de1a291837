#!/usr/bin/env bash
# The whole test suite: sets everything up, lints, then runs pytest against real test
# WordPress sites, the passes side by side (the tests mostly wait for WordPress, PHP and the
# ledger, so they run in parallel: pytest-xdist workers, and the passes at once):
#   - the full suite on the SQLite ledger, against WordPress of $GATEWAY_TEST_FULL_WORDPRESS
#     (default sid: the newest release line, 7.1 when written - what sites in the field run);
#   - the full suite again on the PostgreSQL ledger, each test on a fresh database (n8n aside),
#     against the same site;
#   - every test that talks to WordPress (both transports, SQLite) against the other line,
#     $GATEWAY_TEST_OTHER_WORDPRESS (default bookworm: Debian 12's 6.1, the oldest supported);
#   - the real-n8n tests (-m n8n) again on n8n's 2.x line, $GATEWAY_TEST_N8N2_VERSION (default
#     2.8.4), against the first site (the full suite runs them on 1.123.x); the community node's
#     tests are left out there: they run both n8n lines themselves, in the first pass, and two
#     passes building the node's package in one folder at once would race.
# Under CI=true a skipped test is a failure (tests/conftest.py), and the test sites this run
# started are purged at the end. Each phase's wall time is printed and written to
# .logs/ci-durations.txt; pytest prints its 25 slowest tests. Extra arguments go to every pass.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
FULL_LINE="${GATEWAY_TEST_FULL_WORDPRESS:-sid}"
OTHER_LINE="${GATEWAY_TEST_OTHER_WORDPRESS:-bookworm}"
N8N2_VERSION="${GATEWAY_TEST_N8N2_VERSION:-2.8.4}"
WORKERS="${GATEWAY_TEST_WORKERS:-3}"
mkdir -p .logs
DURATIONS=.logs/ci-durations.txt
: >"$DURATIONS"
phase_started=$SECONDS
phase() { # phase NAME: closes the running phase (its wall time) and names the next one
	if [ -n "${phase_name:-}" ]; then
		printf '%-44s %5d s\n' "$phase_name" $((SECONDS - phase_started)) | tee -a "$DURATIONS" >&2
	fi
	phase_name="$1"
	phase_started=$SECONDS
	[ -n "$1" ] && echo "== $1" >&2
	return 0
}
runtime_of() { [ "$1" = bookworm ] && echo wp_test_site/.runtime || echo "wp_test_site/.runtime-$1"; }

purge=()
for line in "$FULL_LINE" "$OTHER_LINE"; do
	if [ "${CI:-}" = "true" ] && [ ! -f "$(runtime_of "$line")/site.json" ]; then
		purge+=("$line")
	fi
done
if [ "${#purge[@]}" -gt 0 ]; then
	# CI purges the test sites it started (their databases and files), also when a step fails.
	# Without CI=true, or for a site that was already up, they are left running: a developer's
	# site (and every other checkout's, which has its own database) is never touched.
	trap 'for l in "${purge[@]}"; do WP_TEST_SITE_WORDPRESS=$l bash wp_test_site/down.sh --purge >&2 || true; done' EXIT
fi

phase "setup: Python, tools, n8n, the $OTHER_LINE test site"
SETUP_TEST_TOOLS=1 WP_TEST_SITE_WORDPRESS="$OTHER_LINE" bash scripts/setup.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
phase "setup: the $FULL_LINE test site"
WP_TEST_SITE_WORDPRESS="$FULL_LINE" bash wp_test_site/up.sh >/dev/null
pg_url=""
if pg_url=$(bash scripts/postgres.sh); then
	:
elif [ "${CI:-}" = "true" ]; then
	echo "no PostgreSQL: under CI=true that is a failure" >&2
	exit 1
else
	echo "SKIPPED: the PostgreSQL pass (no server could be started)" >&2
fi

phase "lint: ruff, import-linter"
ruff check .
ruff format --check .
lint-imports --no-cache

phase "pytest: four passes side by side"
common=(-q -rs -p no:cacheprovider -n "$WORKERS" --dist loadfile --durations=25)
pids=()
names=()
WP_TEST_SITE_WORDPRESS="$FULL_LINE" \
	python -m pytest "${common[@]}" "$@" >.logs/pytest-sqlite.log 2>&1 &
pids+=($!)
names+=("SQLite ledger, WordPress $FULL_LINE, full suite")
if [ -n "$pg_url" ]; then
	WP_TEST_SITE_WORDPRESS="$FULL_LINE" GATEWAY_TEST_DATABASE_URL="$pg_url" \
		SOAK_JOBS="${SOAK_JOBS_PG:-50}" \
		python -m pytest "${common[@]}" -m "not n8n" "$@" >.logs/pytest-postgresql.log 2>&1 &
	pids+=($!)
	names+=("PostgreSQL ledger, WordPress $FULL_LINE, full suite (n8n aside)")
fi
WP_TEST_SITE_WORDPRESS="$OTHER_LINE" \
	python -m pytest "${common[@]}" -n 2 -m "wordpress and not n8n" "$@" \
	>.logs/pytest-"$OTHER_LINE".log 2>&1 &
pids+=($!)
names+=("SQLite ledger, WordPress $OTHER_LINE, the tests that talk to WordPress")
WP_TEST_SITE_WORDPRESS="$FULL_LINE" N8N_VERSION="$N8N2_VERSION" \
	python -m pytest "${common[@]}" -n 1 -m n8n --ignore=tests/test_n8n_node.py "$@" \
	>.logs/pytest-n8n2.log 2>&1 &
pids+=($!)
names+=("SQLite ledger, WordPress $FULL_LINE, n8n $N8N2_VERSION: the real-n8n tests")
logs=(.logs/pytest-sqlite.log)
[ -n "$pg_url" ] && logs+=(.logs/pytest-postgresql.log)
logs+=(".logs/pytest-$OTHER_LINE.log" .logs/pytest-n8n2.log)
failed=0
for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then status=passed; else status=FAILED; failed=1; fi
	echo "== pytest pass: ${names[$i]}: $status (log: ${logs[$i]})" >&2
	cat "${logs[$i]}"
done
for i in "${!pids[@]}"; do # the closing lines together
	echo "${names[$i]}: $(tail -n 1 "${logs[$i]}")" >&2
done
[ "$failed" = 0 ] || { phase ""; echo "a pytest pass failed" >&2; exit 1; }

phase "benchmarks, smoke size (so the scripts cannot rot; figures: benchmarks/run)"
WP_TEST_SITE_WORDPRESS="$OTHER_LINE" PYTHON=python bash benchmarks/run --smoke >/dev/null
phase ""
printf '%-44s %5d s\n' "total" $((SECONDS - started)) | tee -a "$DURATIONS" >&2
