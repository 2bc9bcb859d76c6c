#!/usr/bin/env bash
# Regenerates docs/screenshots/*.png: the dashboard's main views, taken by
# the browser test (tests/dashboard/browser_test.mjs) in headless chromium
# while it drives a run through a gate.
# Usage: scripts/screenshots.sh [FORUM_BIN]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
forum=${1:-$root/build/forum}
[[ -x $forum ]] || { echo "screenshots: build first ($forum)" >&2; exit 1; }
FORUM_SCREENSHOTS=$root/docs/screenshots node "$root/tests/dashboard/browser_test.mjs" "$forum"
