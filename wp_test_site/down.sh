#!/usr/bin/env bash
# Stops everything wp_test_site/up.sh started. Idempotent; exits 0 when nothing runs.
# Leaves .runtime/ in place but removes site.json so the next up.sh starts fresh.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RT="$HERE/.runtime"

rm -f "$RT/site.json" "$RT/site.json.tmp"

wait_gone() { # wait_gone TENTHS_OF_SECONDS kill-target...
	local n="$1"
	shift
	for _ in $(seq 1 "$n"); do
		kill -0 "$@" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

# The web server: one process group (nginx + PHP-FPM, or php -S and its workers);
# php.pgid is the name older checkouts used.
for pgid_file in "$RT/web.pgid" "$RT/php.pgid"; do
	[[ -f "$pgid_file" ]] || continue
	pgid="$(cat "$pgid_file" 2>/dev/null || true)"
	if [[ "$pgid" =~ ^[0-9]+$ ]] && kill -0 -- "-$pgid" 2>/dev/null; then
		kill -TERM -- "-$pgid" 2>/dev/null || true
		wait_gone 50 -- "-$pgid" || kill -KILL -- "-$pgid" 2>/dev/null || true
		echo "stopped web server (pgid $pgid)"
	fi
	rm -f "$pgid_file"
done

# private mariadbd, if up.sh had to start one.
if [[ -f "$RT/mysql/mariadbd.pid" ]]; then
	pid="$(cat "$RT/mysql/mariadbd.pid" 2>/dev/null || true)"
	if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait_gone 600 "$pid" || kill -KILL "$pid" 2>/dev/null || true
		echo "stopped private mariadbd (pid $pid)"
	fi
	rm -f "$RT/mysql/mariadbd.pid"
	sock="$(cat "$RT/mysql/socket" 2>/dev/null || true)"
	if [[ "$sock" == /tmp/wp_test_site_mysql.*/mysqld.sock ]]; then
		rm -rf "$(dirname "$sock")"
	fi
	rm -f "$RT/mysql/socket"
fi

exit 0
