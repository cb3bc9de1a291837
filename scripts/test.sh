#!/usr/bin/env bash
# The whole test suite: sets everything up, lints, then runs pytest against real test
# WordPress sites, five passes side by side, each running what it is for (tests/passes.py and
# docs/testing.md say how each set is chosen and kept complete):
#   - the whole suite but the soak and the real-n8n tests on the SQLite ledger, against
#     WordPress of $GATEWAY_TEST_FULL_WORDPRESS (default sid: the newest line, 7.1 when written);
#   - on the PostgreSQL ledger, each test on a fresh database, every test whose outcome can
#     depend on the ledger's SQL dialect (-m dialect), and the soak, against the same site;
#   - every test whose outcome can depend on WordPress's version (-m wordpress_version) against
#     the other line, $GATEWAY_TEST_OTHER_WORDPRESS (default bookworm: Debian 12's 6.1);
#   - the real-n8n tests (-m n8n) on n8n's current line (2.41.1 on Node.js 24, the default of
#     scripts/install_n8n.sh), with the community node's tests (which run both n8n lines
#     themselves), against the first site;
#   - the real-n8n tests again on the oldest 2.x the README promises, $GATEWAY_TEST_N8N2_VERSION
#     (default 2.8.4, on Node.js 20); n8n 1.x is out of n8n's support and no longer tested;
# then, alone, the fairness tests (-m fairness), whose latency bounds need the cores to
# themselves.
# Each line has a second site (WP_TEST_SITE_INSTANCE=exclusive) for the tests that change the
# whole site (tests/conftest.py), so no other test waits for them.
# Under CI=true a skipped test is a failure (tests/conftest.py), and the test sites this run
# started are purged at the end. Each phase's wall time, and each pass's 30 slowest tests by
# wall and by CPU time, go to .logs/ci-durations.txt; a run past the 25-minute budget prints a
# warning naming the phase over its share. Extra arguments go to every pass.
#
#   bash scripts/test.sh --quick    only what needs no WordPress and no n8n (under 2 minutes):
#                                   the virtual environment, lint, pytest -m "not wordpress and
#                                   not n8n"; extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
lint() { ruff check . && ruff format --check . && lint-imports --no-cache; }
if [ "${1:-}" = "--quick" ]; then
	shift
	SETUP_SITE=0 bash scripts/setup.sh
	export PATH="$PWD/.venv/bin:$PATH"
	lint
	python -m pytest -q -rs -p no:cacheprovider -n "${GATEWAY_TEST_WORKERS:-2}" \
		-m "not wordpress and not n8n" "$@"
	echo "quick path: $((SECONDS - started)) s (the whole suite: bash scripts/test.sh)" >&2
	exit 0
fi
FULL_LINE="${GATEWAY_TEST_FULL_WORDPRESS:-sid}"
OTHER_LINE="${GATEWAY_TEST_OTHER_WORDPRESS:-bookworm}"
N8N2_VERSION="${GATEWAY_TEST_N8N2_VERSION:-2.8.4}"
WORKERS="${GATEWAY_TEST_WORKERS:-3}"
mkdir -p .logs
DURATIONS=.logs/ci-durations.txt
: >"$DURATIONS"
rm -f .logs/times-*.tsv
BUDGET=1500 # seconds: 25 minutes for the whole run (docs/testing.md "The budget")
declare -A SHARE=([setup]=240 [lint]=30 [pytest]=1140 [benchmarks]=60) # each phase's share of it
declare -A SPENT=()
phase_started=$SECONDS
phase() { # phase KEY DESCRIPTION: closes the running phase (its wall time), opens the next
	if [ -n "${phase_name:-}" ]; then
		local spent=$((SECONDS - phase_started))
		SPENT[$phase_key]=$((${SPENT[$phase_key]:-0} + spent))
		printf '%-56s %5d s\n' "$phase_name" "$spent" | tee -a "$DURATIONS" >&2
	fi
	phase_key="${1:-}"
	phase_name="${2:-}"
	phase_started=$SECONDS
	[ -n "$phase_name" ] && echo "== $phase_name" >&2
	return 0
}
over_budget() { # a warning, not a failure: runs vary by about 12 %
	local total=$((SECONDS - started)) key
	((total > BUDGET)) || return 0
	for key in "${!SPENT[@]}"; do
		if ((SPENT[$key] > SHARE[$key])); then
			echo "WARNING: the run took $total s, past its budget of $BUDGET s: phase $key took ${SPENT[$key]} s, its share is ${SHARE[$key]} s" | tee -a "$DURATIONS" >&2
		fi
	done
}
runtime_of() { # runtime_of LINE [INSTANCE]: the site's folder (wp_test_site/wordpress_line.sh)
	local folder=wp_test_site/.runtime
	[ "$1" = bookworm ] || folder="$folder-$1"
	echo "$folder${2:+-$2}"
}

# Each line's shared site, and its "exclusive" one for the tests that change the whole site
# (tests/conftest.py).
purge=()
for line in "$FULL_LINE" "$OTHER_LINE"; do
	for instance in "" exclusive; do
		if [ "${CI:-}" = "true" ] && [ ! -f "$(runtime_of "$line" "$instance")/site.json" ]; then
			purge+=("$line:$instance")
		fi
	done
done
if [ "${#purge[@]}" -gt 0 ]; then
	# CI purges the test sites it started (their databases and files), also when a step fails.
	# Without CI=true, or for a site that was already up, they are left running: a developer's
	# site (and every other checkout's, which has its own database) is never touched.
	trap 'for s in "${purge[@]}"; do WP_TEST_SITE_WORDPRESS=${s%%:*} WP_TEST_SITE_INSTANCE=${s#*:} bash wp_test_site/down.sh --purge >&2 || true; done' EXIT
fi

phase setup "setup: Python, tools, n8n, the $OTHER_LINE test site"
SETUP_TEST_TOOLS=1 WP_TEST_SITE_WORDPRESS="$OTHER_LINE" bash scripts/setup.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
phase setup "setup: the $FULL_LINE test site"
WP_TEST_SITE_WORDPRESS="$FULL_LINE" bash wp_test_site/up.sh >/dev/null
phase setup "setup: the exclusive test sites ($FULL_LINE, $OTHER_LINE)"
for line in "$FULL_LINE" "$OTHER_LINE"; do
	WP_TEST_SITE_WORDPRESS="$line" WP_TEST_SITE_INSTANCE=exclusive bash wp_test_site/up.sh >/dev/null
done
pg_url=""
if pg_url=$(bash scripts/postgres.sh); then
	:
elif [ "${CI:-}" = "true" ]; then
	echo "no PostgreSQL: under CI=true that is a failure" >&2
	exit 1
else
	echo "SKIPPED: the PostgreSQL pass (no server could be started)" >&2
fi

phase lint "lint: ruff, import-linter"
lint

phase pytest "pytest: five passes side by side"
common=(-q -rs -p no:cacheprovider --dist loadfile --durations=25)
pids=()
names=()
keys=()
run_pass() { # run_pass KEY "NAME" VAR=VALUE... -- PYTEST-ARGS...: one pass in the background
	local key=$1 name=$2
	shift 2
	local env=()
	while [ "$1" != -- ]; do env+=("$1"); shift; done
	shift
	env "${env[@]}" GATEWAY_TEST_TIMES=".logs/times-$key.tsv" \
		python -m pytest "${common[@]}" "$@" >".logs/pytest-$key.log" 2>&1 &
	pids+=($!)
	names+=("$name")
	keys+=("$key")
}
run_pass sqlite "SQLite ledger, WordPress $FULL_LINE, the whole suite but the soak and n8n" \
	WP_TEST_SITE_WORDPRESS="$FULL_LINE" -- -n "$WORKERS" -m "not soak and not n8n and not fairness" "$@"
if [ -n "$pg_url" ]; then
	run_pass postgresql "PostgreSQL ledger, WordPress $FULL_LINE, the dialect-dependent tests and the soak" \
		WP_TEST_SITE_WORDPRESS="$FULL_LINE" GATEWAY_TEST_DATABASE_URL="$pg_url" \
		SOAK_SEED="${SOAK_SEED:-16}" \
		-- -n "$WORKERS" -m "(dialect or soak) and not n8n and not fairness" "$@"
fi
run_pass "$OTHER_LINE" "SQLite ledger, WordPress $OTHER_LINE, the WordPress-version-dependent tests" \
	WP_TEST_SITE_WORDPRESS="$OTHER_LINE" -- -n 2 -m "wordpress_version and not n8n and not fairness" "$@"
# The real-n8n tests wait on n8n far more than they compute: passes of their own, so that
# no other test queues behind them (the node's tests start both n8n lines themselves).
run_pass n8n-current "SQLite ledger, WordPress $FULL_LINE, n8n 2.41.1 and the node on both lines" \
	WP_TEST_SITE_WORDPRESS="$FULL_LINE" -- -n 2 -m n8n "$@"
run_pass n8n-oldest "SQLite ledger, WordPress $FULL_LINE, n8n $N8N2_VERSION: the real-n8n tests" \
	WP_TEST_SITE_WORDPRESS="$FULL_LINE" N8N_VERSION="$N8N2_VERSION" \
	-- -n 1 -m n8n --ignore=tests/test_n8n_node.py "$@"
failed=0
for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then status=passed; else status=FAILED; failed=1; fi
	echo "== pytest pass: ${names[$i]}: $status (log: .logs/pytest-${keys[$i]}.log)" >&2
	cat ".logs/pytest-${keys[$i]}.log"
done
for i in "${!pids[@]}"; do # the closing lines together
	echo "${names[$i]}: $(tail -n 1 ".logs/pytest-${keys[$i]}.log")" >&2
done
# The fairness tests bound one tenant's latency while another's calls hang: alone, after the
# five passes, so that those bounds measure the gateway, not four passes sharing two cores.
phase pytest "pytest: the fairness bounds alone"
if [ "$failed" = 0 ]; then
	name="SQLite ledger, WordPress $FULL_LINE, the fairness bounds alone"
	if WP_TEST_SITE_WORDPRESS="$FULL_LINE" GATEWAY_TEST_TIMES=.logs/times-fairness.tsv \
		python -m pytest "${common[@]}" -n 0 -m fairness "$@" >.logs/pytest-fairness.log 2>&1; then
		status=passed
	else
		status=FAILED failed=1
	fi
	echo "== pytest pass: $name: $status (log: .logs/pytest-fairness.log)" >&2
	cat .logs/pytest-fairness.log
	echo "$name: $(tail -n 1 .logs/pytest-fairness.log)" >&2
	keys+=(fairness)
fi
phase "" ""
times=()
for key in "${keys[@]}"; do times+=("$key=.logs/times-$key.tsv"); done
python scripts/ci_durations.py "$DURATIONS" "${times[@]}"
[ "$failed" = 0 ] || { over_budget; echo "a pytest pass failed" >&2; exit 1; }

phase benchmarks "benchmarks, smoke size (so the scripts cannot rot; figures: benchmarks/run)"
WP_TEST_SITE_WORDPRESS="$OTHER_LINE" PYTHON=python bash benchmarks/run --smoke >/dev/null
phase "" ""
printf '%-56s %5d s\n' "total" $((SECONDS - started)) | tee -a "$DURATIONS" >&2
over_budget
