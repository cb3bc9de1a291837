#!/usr/bin/env bash
# Prints the URL of a PostgreSQL server the test suite can create databases on, starting (and
# on a fresh Debian machine installing) a local one when none answers. Exit 1 when impossible.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python; [ -x "$py" ] || py=python3
url="${GATEWAY_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
answers() { "$py" -c 'import sys, psycopg2; psycopg2.connect(sys.argv[1], connect_timeout=3).close()' "$1" 2>/dev/null; }
start_cluster() {
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] && pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
  for _ in $(seq 1 30); do answers "$url" && return 0; sleep 0.5; done
  return 1
}
answers "$url" && { echo "$url"; exit 0; }
if ! command -v pg_ctlcluster >/dev/null; then
  echo "postgres: installing PostgreSQL from Debian's packages" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null
fi
start_cluster && { echo "$url"; exit 0; }
# A stock Debian cluster asks for a password over TCP: give the test user one.
su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'gateway-tests'\"" >/dev/null 2>&1 || true
url="postgresql://postgres:gateway-tests@127.0.0.1:5432/postgres"
answers "$url" && { echo "$url"; exit 0; }
echo "postgres: no PostgreSQL server could be reached or started" >&2
exit 1
