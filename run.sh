#!/usr/bin/env bash
# Installs what serving needs (not the test toolchain), builds the forum
# binary, and starts the daemon in the foreground on the default ledger in
# ./forum-ledger (127.0.0.1:8080).
# Usage: ./run.sh [forum serve options]   e.g. ./run.sh --port 8081
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install-deps.sh --serve
# Tests off (no test toolchain here; ctest in build/ then says how to get
# them); the man page and completions built too, so `cmake --install
# build` works after this.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFORUM_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target forum forum_docs
export FORUM_LEDGER=${FORUM_LEDGER:-./forum-ledger}
./build/forum ledger init >/dev/null
port=8080
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = --port ] && [ $((i + 1)) -lt ${#args[@]} ] && port=${args[i + 1]}
done
echo "forum: data dir $FORUM_LEDGER; Ctrl-C stops. Once it listens, try:"
echo "  curl -H \"Authorization: Bearer \$(cat $FORUM_LEDGER/token)\" http://127.0.0.1:$port/status"
echo "  FORUM_LEDGER=$FORUM_LEDGER ./build/forum dashboard   # the web page, signed in"
exec ./build/forum serve "$@"
