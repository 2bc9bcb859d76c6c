#!/usr/bin/env bash
# Regenerates docs/HTTP.md and docs/MCP.md from the handler table (the
# method files of surfaces/methods/ and the prose of
# surfaces/docs.c) with the forum binary. tests/test_docs.c fails when the
# committed files differ from what this writes.
# Usage: scripts/gen-docs.sh [FORUM_BIN]   (default: build/forum, built when
# missing)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${FORUM_BIN:-build/forum}}
if [ ! -x "$bin" ]; then
  cmake -S . -B build >/dev/null
  cmake --build build -j2 --target forum
  bin=build/forum
fi
for page in http mcp; do
  upper=$(echo "$page" | tr '[:lower:]' '[:upper:]')
  "$bin" docs "$page" > "docs/$upper.md.tmp"
  mv "docs/$upper.md.tmp" "docs/$upper.md"
  echo "wrote docs/$upper.md"
done
