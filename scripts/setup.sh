#!/usr/bin/env bash
# Prepares a fresh Debian machine (as root) for the gateway: a Python virtual environment in
# .venv with the gateway and its test tools, and the real test WordPress (wp_test_site/up.sh
# installs PHP, MariaDB and WordPress from Debian's packages on first use). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

command -v python3 >/dev/null || apt_install python3
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || { rm -rf .venv; apt_install python3-venv; python3 -m venv .venv; }
fi
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  rm -f .venv/.installed-*; touch "$stamp"
fi
if [ "${SETUP_TEST_TOOLS:-}" = 1 ]; then
  # The test suite also validates docker-compose.yml (Debian's docker-compose parses it without
  # an engine), drives the review page in a real headless Chromium, runs n8n, and runs
  # docs/walkthrough.md's curl commands.
  apt_install docker-compose chromium chromium-driver curl
  bash scripts/install_n8n.sh >/dev/null
fi
bash wp_test_site/up.sh
