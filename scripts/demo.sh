#!/usr/bin/env bash
# The main job end to end: sets everything up, then runs `gateway demo` against the real
# test WordPress (a sample article, three images, a draft verified by read-back, and a lost
# response recovered without a duplicate).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/gateway demo "$@"
