#!/usr/bin/env bash
# Switches the companion plugin of the running test site: `off` deactivates it (the
# no-plugin case: no lookup route, no guard, Rank Math meta not in REST; its index and option
# stay), `on` reactivates it (the activation hook makes the index), `uninstall` deactivates it
# and runs its uninstall.php as Plugins -> Delete does (files kept, so `on` brings it back),
# `status` prints "active" or "inactive". `--queries` after the action prints JSON with the SQL
# statements the switch ran (companion.php). The site must be up (up.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=wordpress_line.sh
. "$HERE/wordpress_line.sh" # RT of WP_TEST_SITE_WORDPRESS
WP="$RT/wordpress"
[[ -f "$WP/wp-config.php" ]] || { echo "[wp_test_site] no site in $WP: run up.sh" >&2; exit 1; }
exec php -d display_errors=stderr "$HERE/companion.php" "$WP" "${1:-status}" "${@:2}"
