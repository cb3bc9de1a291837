#!/usr/bin/env bash
# The main job end to end: sets everything up, then runs `gateway demo` against the real
# test WordPress (a sample article, three images, a draft verified by read-back, and a lost
# response recovered without a duplicate). Arguments go to `gateway demo` (--keep keeps the
# demo's ledger directory). The test WordPress keeps running: scripts/test.sh reuses it.
set -euo pipefail
cd "$(dirname "$0")/.."
url="$(bash scripts/setup.sh)"
status=0
.venv/bin/gateway demo "$@" || status=$?
echo
echo "The test WordPress is still running at $url (bash scripts/test.sh reuses it)."
echo "Stop it with: bash wp_test_site/down.sh   (add --purge to drop its database and files too)"
exit "$status"
