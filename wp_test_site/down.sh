#!/usr/bin/env bash
# Stops everything wp_test_site/up.sh started. Idempotent; exits 0 when nothing runs.
# Leaves .runtime/ in place but removes site.json so the next up.sh starts fresh.
#   --purge  also drops this checkout's MariaDB database and removes .runtime/ and the web
#            root outside it (the WordPress copy, its uploads, a private mariadbd's data):
#            nothing of the site is left.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=wordpress_line.sh
. "$HERE/wordpress_line.sh" # RT of WP_TEST_SITE_WORDPRESS
PURGE=0
case "${1:-}" in
--purge) PURGE=1 ;;
"") ;;
*) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

rm -f "$RT/site.json" "$RT/site.json.tmp"

# The database up.sh created, read back from the wp-config.php it wrote (name, host:port).
drop_database() {
	local config="$RT/wordpress/wp-config.php" name host port mysql=mariadb
	[[ -f "$config" ]] || return 0
	name="$(sed -n "s/^define( 'DB_NAME', '\(.*\)' );/\1/p" "$config")"
	host="$(sed -n "s/^define( 'DB_HOST', '\(.*\)' );/\1/p" "$config")"
	port="${host##*:}"
	host="${host%:*}"
	[[ "$name" =~ ^[A-Za-z0-9_]+$ && -n "$port" ]] || return 0
	command -v mariadb >/dev/null 2>&1 || mysql=mysql
	if "$mysql" --no-defaults --protocol=TCP -h"$host" -P"$port" -uroot --connect-timeout=3 \
		-e "DROP DATABASE IF EXISTS \`$name\`" 2>/dev/null; then
		echo "dropped database $name at $host:$port"
	else
		echo "could not drop database $name at $host:$port (server not answering)" >&2
	fi
}
((PURGE)) && drop_database

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

# PHP-FPM's master leaves the web server's process group (it starts a session of its own):
# stop it by the pid file its configuration names.
if [[ -f "$RT/php-fpm.pid" ]]; then
	pid="$(cat "$RT/php-fpm.pid" 2>/dev/null || true)"
	if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait_gone 50 "$pid" || kill -KILL "$pid" 2>/dev/null || true
		echo "stopped php-fpm (pid $pid)"
	fi
	rm -f "$RT/php-fpm.pid"
fi

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

if ((PURGE)); then
	# The web root up.sh keeps outside the checkout for nginx + PHP-FPM (WEBDIR in up.sh),
	# found through the .runtime/wordpress symlink, else where up.sh puts it by default.
	webdir="$(dirname "$(readlink "$RT/wordpress" 2>/dev/null || true)")"
	[[ "$webdir" == "." ]] && webdir="${WP_TEST_SITE_WEBDIR:-/var/lib/wp-test-site/$(printf '%s' "$RT" | sha1sum | cut -c1-10)}"
	if [[ -d "$webdir/wordpress" || -S "$webdir/php-fpm.sock" || -d "$webdir/tmp" ]]; then
		rm -rf "$webdir"
		echo "removed $webdir"
	fi
	if [[ -d "$RT" ]]; then
		rm -rf "$RT"
		echo "removed $RT"
	fi
fi

exit 0
