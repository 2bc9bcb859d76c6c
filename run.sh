#!/usr/bin/env bash
# Installs what is missing, builds forum, and starts it on the default
# ledger in ./forum-ledger. Usage: ./run.sh [forum serve options]
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFORUM_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
export FORUM_LEDGER=${FORUM_LEDGER:-./forum-ledger}
./build/forum ledger init
if ./build/forum serve --help >/dev/null 2>&1; then
  exec ./build/forum serve "$@"
fi
./build/forum ledger verify
