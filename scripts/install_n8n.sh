#!/usr/bin/env bash
# Installs n8n (N8N_VERSION: 1.123.81 by default, the newest 1.x; 2.0.0 to 2.8.4 also run on
# Node.js 20.19, 2.10 and later need 22.16) once into a cache folder outside the repository,
# keyed by version, and prints the path of the n8n binary on stdout.
# Skips the install when the cache already holds a working n8n.
#
# Three workarounds make it install with only the package registries reachable:
#   - an npm "overrides" entry pins xlsx to 0.18.5 (n8n otherwise fetches it from a CDN);
#   - `npm install --ignore-scripts` (isolated-vm's native build needs Node >= 22 and would
#     roll the whole install back; run n8n with N8N_EXPRESSION_ENGINE=legacy instead);
#   - `npm rebuild sqlite3` afterwards (builds the SQLite binding from source, ~1 minute).
# About 3 minutes and 1.8 GB. Messages go to stderr; only the binary path goes to stdout.
set -euo pipefail

N8N_VERSION="${N8N_VERSION:-1.123.81}"
N8N_CACHE_DIR="${N8N_CACHE_DIR:-/var/cache/publishing-gateway/n8n-${N8N_VERSION}}"
bin="$N8N_CACHE_DIR/node_modules/.bin/n8n"
stamp="$N8N_CACHE_DIR/.installed"

if [ -f "$stamp" ] && [ -x "$bin" ]; then
  echo "install_n8n: n8n $N8N_VERSION already installed in $N8N_CACHE_DIR" >&2
  echo "$bin"
  exit 0
fi

command -v npm >/dev/null || { echo "install_n8n: npm (Node.js 20) is required" >&2; exit 1; }
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
               process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
  echo "install_n8n: n8n $N8N_VERSION needs Node.js >= 20.19 (found $(node --version))" >&2
  exit 1
fi

mkdir -p "$N8N_CACHE_DIR"
# Serialise concurrent installs (two test runs on one machine).
exec 9>"$N8N_CACHE_DIR.lock"
flock 9
if [ -f "$stamp" ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

started=$SECONDS
cd "$N8N_CACHE_DIR"
cat > package.json <<JSON
{
  "name": "publishing-gateway-n8n",
  "private": true,
  "dependencies": {"n8n": "$N8N_VERSION"},
  "overrides": {"xlsx": "0.18.5"}
}
JSON
echo "install_n8n: npm install n8n@$N8N_VERSION into $N8N_CACHE_DIR (a few minutes)" >&2
npm install --ignore-scripts --no-audit --no-fund --loglevel=error >&2
echo "install_n8n: npm rebuild sqlite3 (builds from source)" >&2
npm rebuild sqlite3 --loglevel=error >&2
"$bin" --version >&2
touch "$stamp"
echo "install_n8n: done in $((SECONDS - started)) s" >&2
echo "$bin"
