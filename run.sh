#!/usr/bin/env bash
# Installs what is missing, builds forum, and starts the daemon in the
# foreground on the default ledger in ./forum-ledger (127.0.0.1:8080).
# Usage: ./run.sh [forum serve options]   e.g. ./run.sh --port 0
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFORUM_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
export FORUM_LEDGER=${FORUM_LEDGER:-./forum-ledger}
./build/forum ledger init >/dev/null
echo "forum: data dir $FORUM_LEDGER; token in $FORUM_LEDGER/token; Ctrl-C stops"
exec ./build/forum serve "$@"
