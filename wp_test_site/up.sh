#!/usr/bin/env bash
# Brings up a real WordPress (Debian's package; WP_TEST_SITE_WORDPRESS=bookworm|trixie|sid picks
# the release line, see wordpress_line.sh) on 127.0.0.1 without Docker, served as
# production sites serve it: nginx + PHP-FPM (keep-alive, the Authorization header passed to
# PHP) + MariaDB, fresh database on every real start. Where nginx or PHP-FPM cannot be
# installed it falls back to PHP's built-in server (php -S), and says so.
# State lives in ./.runtime (./.runtime-trixie, ./.runtime-sid for the other lines; README.md); the web root lives where the pool's user can read
# it (WEBDIR below). Stop with ./down.sh (--purge: also the database and the web root).
# One line per step on stderr; the full output goes to .runtime/up.log (its last lines and its
# path are printed when a step fails). The URL alone goes to stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=wordpress_line.sh
. "$HERE/wordpress_line.sh" # WP_LINE, RT (.runtime for bookworm, .runtime-LINE otherwise)
WP="$RT/wordpress"
SITE_JSON="$RT/site.json"
# One database per checkout: two clones on one machine (a developer's tree and CI's fresh
# clone) must never drop each other's site.
DB_NAME="${WP_TEST_SITE_DB_NAME:-wp_gateway_test_$(printf '%s' "$RT" | sha1sum | cut -c1-10)}"
# nginx and php-fpm in the same apt transaction as wordpress: otherwise its dependency
# "apache2 | httpd, libapache2-mod-php | php" pulls in Apache and mod_php.
PACKAGES=(mariadb-server php-cli php-mysql php-xml php-curl php-gd nginx php-fpm wordpress)
# The web root, PHP-FPM's socket and nginx's temporary files: outside the checkout, whose
# folders (a CI clone under mktemp -d, .runtime with mode 700) the pool's user cannot enter.
WEBDIR="${WP_TEST_SITE_WEBDIR:-/var/lib/wp-test-site/$(printf '%s' "$RT" | sha1sum | cut -c1-10)}"
WEB_USER=www-data

die() { echo "ERROR: $*" >&2; exit 1; }

json_get() { # json_get FILE php-expression-on-$j
	php -r '$j = json_decode(file_get_contents($argv[1]), true); if (!is_array($j)) exit(1); echo '"$2"';' "$1"
}

http_status() { # http_status URL [user:pass]
	php "$HERE/http_status.php" "$@" 2>/dev/null || echo 000
}

# One up.sh at a time per line and checkout (test processes may start it together): the others
# wait, then find the site up.
exec 9>"$HERE/.up-$WP_LINE${WP_INSTANCE:+-$WP_INSTANCE}.lock"
flock 9

# --- already up? ------------------------------------------------------------
if [[ -f "$SITE_JSON" ]] && command -v php >/dev/null 2>&1; then
	url="$(json_get "$SITE_JSON" '$j["url"]' 2>/dev/null || true)"
	if [[ -n "$url" && "$(http_status "$url/wp-json/")" == "200" ]]; then
		# The companion plugin of this checkout, as an update by file copy (no activation:
		# the plugin's status route makes a missing index, as after a real update).
		plugin_dir="$WP/wp-content/plugins/publishing-gateway-companion"
		if [[ -d "$plugin_dir" ]] && ! diff -rq "$HERE/publishing-gateway-companion" "$plugin_dir" >/dev/null 2>&1; then
			for f in "$HERE"/publishing-gateway-companion/*; do # each file replaced at once (rename)
				cp "$f" "$plugin_dir/.${f##*/}.new" && mv -f "$plugin_dir/.${f##*/}.new" "$plugin_dir/${f##*/}"
			done
			echo "[wp_test_site] companion plugin updated from $HERE/publishing-gateway-companion" >&2
		fi
		version="$(json_get "$SITE_JSON" '$j["wordpress"]["version"] ?? "unknown"' 2>/dev/null || true)"
		echo "[wp_test_site] WordPress ${version:-unknown} ($WP_LINE) already up" >&2
		echo "already up at $url"
		exit 0
	fi
fi

t0=$(date +%s.%N)
mkdir -p "$RT"
chmod 700 "$RT"
# shellcheck source=../scripts/steps.sh
. "$HERE/../scripts/steps.sh" "$RT/up.log" "[wp_test_site] "

# --- packages -----------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
	step "installing packages: ${missing[*]} (apt-get)"
	SUDO=""
	[[ $(id -u) -ne 0 ]] && SUDO="sudo"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >&2 \
		|| $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"${PACKAGES[@]/#nginx/}" >&2 # a mirror without nginx: php -S below
fi

# --- WordPress of the chosen line -------------------------------------------------
debian_archive() { # the Debian archive serving this machine's own suite, as apt names it
	local codename
	codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
	apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT)' 2>/dev/null |
		awk -v c="$codename" '$2 == c && $3 == "main" { print $1; exit }'
}

wordpress_source() { # sets WP_SOURCE: the folder whose files make the web root
	if [[ "$WP_LINE" == bookworm ]]; then
		WP_SOURCE=/usr/share/wordpress
		return
	fi
	local root="$WP_CACHE/root" archive keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	if [[ ! -f "$WP_CACHE/.complete" ]]; then
		step "fetching WordPress of Debian $WP_LINE (apt-get download into $WP_CACHE; nothing installed)"
		archive="$(debian_archive)"
		[[ -n "$archive" ]] || die "no Debian archive found in this machine's apt sources (apt-get indextargets)"
		[[ -f "$keyring" ]] || die "$keyring is missing (package debian-archive-keyring)"
		rm -rf "$WP_CACHE"
		mkdir -p "$WP_CACHE/lists/partial" "$WP_CACHE/apt/archives/partial" "$WP_CACHE/debs" "$root"
		echo "deb [signed-by=$keyring] $archive $WP_LINE main" >"$WP_CACHE/sources.list"
		local apt=(-q -o Dir::Etc::sourcelist="$WP_CACHE/sources.list" -o Dir::Etc::sourceparts=/nonexistent
			-o Dir::State::Lists="$WP_CACHE/lists" -o Dir::Cache="$WP_CACHE/apt" -o APT::Sandbox::User=root)
		apt-get "${apt[@]}" update >&2 || die "apt-get update of Debian $WP_LINE's lists failed"
		(cd "$WP_CACHE/debs" && apt-get "${apt[@]}" download "${WP_PACKAGES[@]}") >&2 ||
			die "apt-get download of ${WP_PACKAGES[*]} from Debian $WP_LINE failed"
		for deb in "$WP_CACHE"/debs/*.deb; do dpkg-deb -x "$deb" "$root" || die "dpkg-deb -x $deb failed"; done
		rm -f "$root/usr/share/wordpress/.htaccess" # a link into /etc/wordpress; unused behind nginx
		touch "$WP_CACHE/.complete"
	fi
	WP_SOURCE="$root/usr/share/wordpress"
}

wordpress_source
WP_VERSION="$(php -r 'include $argv[1]; echo $wp_version;' "$WP_SOURCE/wp-includes/version.php")" ||
	die "no WordPress in $WP_SOURCE"
step "WordPress $WP_VERSION (Debian $WP_LINE)"
if [[ "${WP_VERSION%.*}" != "${WP_EXPECTED_LINE[$WP_LINE]}" && "${WP_VERSION}" != "${WP_EXPECTED_LINE[$WP_LINE]}"* ]]; then
	say "[wp_test_site] NOTE: Debian $WP_LINE now carries WordPress $WP_VERSION, not the ${WP_EXPECTED_LINE[$WP_LINE]} line the tests were written on; the site serves $WP_VERSION"
fi

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
	step "database $DB_NAME on the MariaDB at 127.0.0.1:3306"
else
	step "database $DB_NAME on a private mariadbd (none usable at 127.0.0.1:3306)"
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
		--skip-log-bin --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 3>&- 4>&- 9>&- &
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
step "WordPress files in $WP"
FPM_BIN="$(ls /usr/sbin/php-fpm* 2>/dev/null | sort -V | tail -n 1 || true)"
NGINX_BIN="$(command -v nginx || true)"
USE_NGINX=""
if [[ "${WP_TEST_SITE_SERVER:-nginx}" == "nginx" && -x "$FPM_BIN" && -n "$NGINX_BIN" ]] && id "$WEB_USER" >/dev/null 2>&1; then
	USE_NGINX=1
	rm -rf "$WP" "$WEBDIR/wordpress"
	mkdir -p "$WEBDIR/wordpress" "$WEBDIR/tmp"
	chmod 755 "$WEBDIR" "$(dirname "$WEBDIR")"
	ln -s "$WEBDIR/wordpress" "$WP" # tests and scripts keep using .runtime/wordpress
else
	say "[wp_test_site] nginx or PHP-FPM is not available: serving with PHP's built-in server (php -S)"
	rm -rf "$WP"
	mkdir -p "$WP"
fi
cp -rL "$WP_SOURCE/." "$WP/"
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
step "installing WordPress (users, application passwords, companion plugin)"
site_tmp="$RT/site.json.tmp"
umask 077
PGW_DB_HOST="$DB_HOST" PGW_DB_PORT="$DB_PORT" PGW_DB_NAME="$DB_NAME" \
	php -d display_errors=stderr -d memory_limit=256M "$HERE/install.php" "$WP" "$URL" >"$site_tmp" 2>"$RT/install.log" \
	|| { cat "$RT/install.log" >&2; die "WordPress install failed"; }
umask 022

# --- web server ---------------------------------------------------------------
start_nginx() {
	local sock="$WEBDIR/php-fpm.sock"
	chown -R "$WEB_USER:$WEB_USER" "$WP/wp-content/uploads" "$WEBDIR/tmp"
	cat >"$RT/php-fpm.conf" <<FPM
[global]
pid = $RT/php-fpm.pid
error_log = $RT/php-fpm.log
daemonize = no

[wordpress]
user = $WEB_USER
group = $WEB_USER
listen = $sock
listen.owner = $WEB_USER
listen.group = $WEB_USER
listen.mode = 0660
pm = dynamic
pm.max_children = 16
pm.start_servers = 4
pm.min_spare_servers = 2
pm.max_spare_servers = 8
catch_workers_output = yes
php_admin_flag[display_errors] = off
php_admin_flag[log_errors] = on
php_admin_value[upload_max_filesize] = 64M
php_admin_value[post_max_size] = 64M
php_admin_value[memory_limit] = 256M
FPM
	cat >"$RT/nginx.conf" <<NGINX
user $WEB_USER;
worker_processes 2;
pid $RT/nginx.pid;
error_log $RT/nginx-error.log warn;
events { worker_connections 1024; }
http {
	include /etc/nginx/mime.types;
	default_type application/octet-stream;
	access_log off;
	sendfile on;
	keepalive_timeout 65s;
	keepalive_requests 10000;
	# A test can meet this limit: the gateway's own limit is 25 MiB.
	client_max_body_size 64m;
	client_body_temp_path $WEBDIR/tmp/body;
	fastcgi_temp_path $WEBDIR/tmp/fastcgi;
	proxy_temp_path $WEBDIR/tmp/proxy;
	uwsgi_temp_path $WEBDIR/tmp/uwsgi;
	scgi_temp_path $WEBDIR/tmp/scgi;
	server {
		listen 127.0.0.1:$PORT;
		root $WEBDIR/wordpress;
		index index.php;
		location / { try_files \$uri \$uri/ /index.php?\$args; }
		location ~ \.php\$ {
			try_files \$uri =404;
			include /etc/nginx/fastcgi_params;
			fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
			# WordPress reads application passwords from it; some stacks drop it.
			fastcgi_param HTTP_AUTHORIZATION \$http_authorization;
			fastcgi_pass unix:$sock;
			fastcgi_read_timeout 300s;
		}
	}
}
NGINX
	: >"$RT/nginx-error.log"
	"$NGINX_BIN" -t -q -c "$RT/nginx.conf" 2>>"$RT/nginx-error.log" || die "nginx rejected its configuration, see $RT/nginx-error.log"
	# One process group for both servers, so that down.sh stops them together.
	setsid bash -c 'echo $$ >"$1"; "$2" --nodaemonize --fpm-config "$3" & exec "$4" -c "$5" -g "daemon off;"' \
		_ "$RT/web.pgid" "$FPM_BIN" "$RT/php-fpm.conf" "$NGINX_BIN" "$RT/nginx.conf" \
		</dev/null >>"$RT/php.log" 2>&1 3>&- 4>&- 9>&- &
	step "serving it at $URL: nginx + $(basename "$FPM_BIN") (web root $WEBDIR/wordpress)"
}

start_php_builtin() {
	PHP_CLI_SERVER_WORKERS=4 setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$RT/web.pgid" \
		php -d display_errors=0 -d log_errors=1 -d upload_max_filesize=64M -d post_max_size=64M \
		-d memory_limit=256M -d opcache.enable_cli=1 \
		-S "127.0.0.1:$PORT" -t "$WP" "$HERE/router.php" </dev/null >>"$RT/php.log" 2>&1 3>&- 4>&- 9>&- &
	step "serving it at $URL: php -S"
}

: >"$RT/php.log"
if [[ -n "$USE_NGINX" ]]; then start_nginx; else start_php_builtin; fi

AUTHOR_AUTH="$(json_get "$site_tmp" '$j["users"]["author"]["username"].":".$j["users"]["author"]["app_password"]')"
ok=""
for _ in $(seq 1 150); do
	if [[ "$(http_status "$URL/wp-json/")" == "200" ]] &&
		[[ "$(http_status "$URL/wp-json/wp/v2/users/me?context=edit" "$AUTHOR_AUTH")" == "200" ]]; then
		ok=1
		break
	fi
	if [[ -f "$RT/web.pgid" ]] && ! kill -0 -- "-$(cat "$RT/web.pgid")" 2>/dev/null; then
		break
	fi
	sleep 0.1
done
if [[ -z "$ok" ]]; then
	tail -n 20 "$RT/php.log" "$RT/php-fpm.log" "$RT/nginx-error.log" >&2 2>/dev/null || true
	die "site did not come up at $URL"
fi

php -r '$j = json_decode(file_get_contents($argv[1]), true); $j["wordpress"] = ["line" => $argv[2], "version" => $argv[3]]; file_put_contents($argv[1], json_encode($j, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));' "$site_tmp" "$WP_LINE" "$WP_VERSION" ||
	die "could not record the WordPress version in site.json"
install -m 600 "$site_tmp" "$SITE_JSON"
rm -f "$site_tmp"
t1=$(date +%s.%N)
step "up in $(php -r 'printf("%.1f", $argv[2] - $argv[1]);' "$t0" "$t1") s (site.json: $SITE_JSON)"
result "$URL"
