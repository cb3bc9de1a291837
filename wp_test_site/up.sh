#!/usr/bin/env bash
# Brings up a real WordPress (Debian's package) on 127.0.0.1 without Docker:
# php's built-in web server + MariaDB, fresh database on every real start.
# State lives in ./.runtime (see README.md). Stop with ./down.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RT="$HERE/.runtime"
WP="$RT/wordpress"
SITE_JSON="$RT/site.json"
# One database per checkout: two clones on one machine (a developer's tree and CI's fresh
# clone) must never drop each other's site.
DB_NAME="${WP_TEST_SITE_DB_NAME:-wp_gateway_test_$(printf '%s' "$RT" | sha1sum | cut -c1-10)}"
PACKAGES=(mariadb-server php-cli php-mysql php-xml php-curl php-gd wordpress)

log() { echo "[wp_test_site] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

json_get() { # json_get FILE php-expression-on-$j
	php -r '$j = json_decode(file_get_contents($argv[1]), true); if (!is_array($j)) exit(1); echo '"$2"';' "$1"
}

http_status() { # http_status URL [user:pass]
	php "$HERE/http_status.php" "$@" 2>/dev/null || echo 000
}

# --- already up? ------------------------------------------------------------
if [[ -f "$SITE_JSON" ]] && command -v php >/dev/null 2>&1; then
	url="$(json_get "$SITE_JSON" '$j["url"]' 2>/dev/null || true)"
	if [[ -n "$url" && "$(http_status "$url/wp-json/")" == "200" ]]; then
		echo "already up at $url"
		exit 0
	fi
fi

t0=$(date +%s.%N)

# --- packages -----------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
	log "installing packages: ${missing[*]}"
	SUDO=""
	[[ $(id -u) -ne 0 ]] && SUDO="sudo"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >&2
fi

mkdir -p "$RT"
chmod 700 "$RT"

# Stop whatever an earlier run left behind (stale php server, private mariadbd).
bash "$HERE/down.sh" >/dev/null 2>&1 || true

MYSQL=mariadb
command -v mariadb >/dev/null 2>&1 || MYSQL=mysql

free_port() {
	php -r '$s = stream_socket_server("tcp://127.0.0.1:0", $e, $es); if (!$s) exit(1); $n = stream_socket_get_name($s, false); echo substr($n, strrpos($n, ":") + 1);'
}

db_answers() { # db_answers PORT
	"$MYSQL" --no-defaults --protocol=TCP -h127.0.0.1 -P"$1" -uroot --connect-timeout=3 -e 'SELECT 1' >/dev/null 2>&1
}

# --- database -----------------------------------------------------------------
DB_HOST=127.0.0.1
DB_PORT=3306
if [[ "${WP_TEST_SITE_PRIVATE_DB:-0}" != "1" ]] && db_answers 3306; then
	log "using MariaDB at 127.0.0.1:3306"
else
	log "no usable MariaDB at 127.0.0.1:3306; starting a private mariadbd"
	MYDIR="$RT/mysql"
	mkdir -p "$MYDIR"
	SOCK="$MYDIR/mysqld.sock"
	if ((${#SOCK} > 100)); then # unix socket paths are limited to ~107 bytes
		SOCK="$(mktemp -d /tmp/wp_test_site_mysql.XXXXXX)/mysqld.sock"
	fi
	USER_OPT=()
	[[ $(id -u) -eq 0 ]] && USER_OPT=(--user=root)
	if [[ ! -d "$MYDIR/data/mysql" ]]; then
		rm -rf "$MYDIR/data"
		INSTALL_DB="$(command -v mariadb-install-db || command -v mysql_install_db)" || die "mariadb-install-db not found"
		"$INSTALL_DB" --no-defaults "${USER_OPT[@]}" --datadir="$MYDIR/data" \
			--auth-root-authentication-method=normal --skip-test-db >"$MYDIR/install.log" 2>&1 \
			|| die "mariadb-install-db failed, see $MYDIR/install.log"
	fi
	DB_PORT="$(free_port)"
	MARIADBD="$(command -v mariadbd || command -v mysqld || echo /usr/sbin/mariadbd)"
	setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$MYDIR/mariadbd.pid" \
		"$MARIADBD" --no-defaults "${USER_OPT[@]}" --datadir="$MYDIR/data" \
		--socket="$SOCK" --port="$DB_PORT" --bind-address=127.0.0.1 \
		--pid-file="$MYDIR/mysqld.pid" --log-error="$MYDIR/error.log" \
		--skip-log-bin --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
	for _ in $(seq 1 50); do [[ -s "$MYDIR/mariadbd.pid" ]] && break; sleep 0.1; done
	echo "$SOCK" >"$MYDIR/socket"
	for _ in $(seq 1 150); do
		"$MYSQL" --no-defaults -S "$SOCK" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
		kill -0 "$(cat "$MYDIR/mariadbd.pid")" 2>/dev/null || die "mariadbd died, see $MYDIR/error.log"
		sleep 0.2
	done
	# root over TCP from 127.0.0.1 without password (private, loopback-only server).
	"$MYSQL" --no-defaults -S "$SOCK" -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;" \
		|| die "could not configure private mariadbd"
	db_answers "$DB_PORT" || die "private mariadbd does not answer on 127.0.0.1:$DB_PORT"
fi

"$MYSQL" --no-defaults --protocol=TCP -h"$DB_HOST" -P"$DB_PORT" -uroot -e \
	"DROP DATABASE IF EXISTS \`$DB_NAME\`; CREATE DATABASE \`$DB_NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"

# --- WordPress files ----------------------------------------------------------
rm -rf "$WP"
cp -rL /usr/share/wordpress "$WP"
rm -f "$WP/.htaccess"
mkdir -p "$WP/wp-content/uploads" "$WP/wp-content/plugins" "$WP/wp-content/themes"
cp -r "$HERE/publishing-gateway-companion" "$WP/wp-content/plugins/"

if [[ -n "${WP_TEST_SITE_PORT:-}" ]]; then
	PORT="$WP_TEST_SITE_PORT"
else
	PORT="$(free_port)"
fi
URL="http://127.0.0.1:$PORT"

salt() { php -r 'echo bin2hex(random_bytes(32));'; }
umask 077
cat >"$WP/wp-config.php" <<PHP
<?php
// Generated by wp_test_site/up.sh -- replaced on every start.
define( 'DB_NAME', '$DB_NAME' );
define( 'DB_USER', 'root' );
define( 'DB_PASSWORD', '' );
define( 'DB_HOST', '$DB_HOST:$DB_PORT' );
define( 'DB_CHARSET', 'utf8mb4' );
define( 'DB_COLLATE', '' );

define( 'AUTH_KEY',         '$(salt)' );
define( 'SECURE_AUTH_KEY',  '$(salt)' );
define( 'LOGGED_IN_KEY',    '$(salt)' );
define( 'NONCE_KEY',        '$(salt)' );
define( 'AUTH_SALT',        '$(salt)' );
define( 'SECURE_AUTH_SALT', '$(salt)' );
define( 'LOGGED_IN_SALT',   '$(salt)' );
define( 'NONCE_SALT',       '$(salt)' );

\$table_prefix = 'wp_';

define( 'WP_HOME', '$URL' );
define( 'WP_SITEURL', '$URL' );
define( 'WP_ENVIRONMENT_TYPE', 'local' );
define( 'DISABLE_WP_CRON', true );
define( 'WP_HTTP_BLOCK_EXTERNAL', true );
define( 'AUTOMATIC_UPDATER_DISABLED', true );
define( 'WP_AUTO_UPDATE_CORE', false );
define( 'WP_DEBUG', false );
define( 'WP_DEBUG_DISPLAY', false );
define( 'WP_DEBUG_LOG', false );
define( 'FS_METHOD', 'direct' );
define( 'WP_CONTENT_DIR', __DIR__ . '/wp-content' );
define( 'WP_CONTENT_URL', WP_SITEURL . '/wp-content' );

if ( ! defined( 'ABSPATH' ) ) {
	define( 'ABSPATH', __DIR__ . '/' );
}
require_once ABSPATH . 'wp-settings.php';
PHP
umask 022
chmod 644 "$WP/wp-config.php"

# --- install ------------------------------------------------------------------
site_tmp="$RT/site.json.tmp"
umask 077
PGW_DB_HOST="$DB_HOST" PGW_DB_PORT="$DB_PORT" PGW_DB_NAME="$DB_NAME" \
	php -d display_errors=stderr -d memory_limit=256M "$HERE/install.php" "$WP" "$URL" >"$site_tmp" 2>"$RT/install.log" \
	|| { cat "$RT/install.log" >&2; die "WordPress install failed"; }
umask 022

# --- web server ---------------------------------------------------------------
: >"$RT/php.log"
PHP_CLI_SERVER_WORKERS=4 setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$RT/php.pgid" \
	php -d display_errors=0 -d log_errors=1 -d upload_max_filesize=64M -d post_max_size=64M \
	-d memory_limit=256M -d opcache.enable_cli=1 \
	-S "127.0.0.1:$PORT" -t "$WP" "$HERE/router.php" </dev/null >>"$RT/php.log" 2>&1 &

AUTHOR_AUTH="$(json_get "$site_tmp" '$j["users"]["author"]["username"].":".$j["users"]["author"]["app_password"]')"
ok=""
for _ in $(seq 1 150); do
	if [[ "$(http_status "$URL/wp-json/")" == "200" ]] &&
		[[ "$(http_status "$URL/wp-json/wp/v2/users/me?context=edit" "$AUTHOR_AUTH")" == "200" ]]; then
		ok=1
		break
	fi
	if [[ -f "$RT/php.pgid" ]] && ! kill -0 -- "-$(cat "$RT/php.pgid")" 2>/dev/null; then
		break
	fi
	sleep 0.1
done
if [[ -z "$ok" ]]; then
	tail -n 20 "$RT/php.log" >&2 || true
	die "site did not come up at $URL"
fi

install -m 600 "$site_tmp" "$SITE_JSON"
rm -f "$site_tmp"
t1=$(date +%s.%N)
log "up in $(php -r 'printf("%.1f", $argv[2] - $argv[1]);' "$t0" "$t1")s (site.json: $SITE_JSON)"
echo "$URL"
