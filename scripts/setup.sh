#!/usr/bin/env bash
# Prepares a fresh Debian machine (as root) for the gateway: a Python virtual environment in
# .venv with the gateway and its test tools, and the real test WordPress (wp_test_site/up.sh
# installs PHP, MariaDB and WordPress from Debian's packages on first use). Idempotent.
# One line per step on stderr; the full output goes to .logs/setup.log (its last lines and its
# path are printed when a step fails). The test site's URL goes to stdout. SETUP_SITE=0 stops
# after the virtual environment (scripts/test.sh --quick needs no WordPress).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/steps.sh "$PWD/.logs/setup.log" "setup: "

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    step "installing ${missing[*]} (apt-get)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

command -v python3 >/dev/null || apt_install python3
if [ ! -x .venv/bin/python ]; then
  step "creating the Python virtual environment .venv"
  python3 -m venv .venv || { rm -rf .venv; apt_install python3-venv; python3 -m venv .venv; }
fi
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  step "installing the gateway and its Python dependencies into .venv (pip)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  rm -f .venv/.installed-*; touch "$stamp"
fi
if [ "${SETUP_TEST_TOOLS:-}" = 1 ]; then
  # The test suite also validates docker-compose.yml (Debian's docker-compose parses it without
  # an engine), drives the review page in a real headless Chromium, runs n8n, and runs
  # docs/walkthrough.md's curl commands.
  apt_install docker-compose chromium chromium-driver curl
  step "n8n 2.41.1 and 2.8.4 in their caches, each with its Node.js (first use: 3 to 23 minutes)"
  bash scripts/install_n8n.sh
  N8N_VERSION="${GATEWAY_TEST_N8N2_VERSION:-2.8.4}" bash scripts/install_n8n.sh
fi
if [ "${SETUP_SITE:-1}" = 0 ]; then # scripts/test.sh --quick: no WordPress
  say "setup: .venv ready (no test WordPress: SETUP_SITE=0)"
  exit 0
fi
# up.sh prints its own steps (and keeps its own log, wp_test_site/.runtime/up.log).
url="$(bash wp_test_site/up.sh 2>&3)"
say "setup: test WordPress at ${url#already up at }"
result "${url#already up at }"
