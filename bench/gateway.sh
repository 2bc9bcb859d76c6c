#!/usr/bin/env bash
# bench/gateway.sh: what the model gateway adds (bench/gateway.mjs): the
# median latency of sequential calls and the time to a stream's first byte,
# direct to an instant upstream and through forum, and calls/s at c=64
# both ways, in one run. Not a test: it prints figures.
#
# Usage: bench/gateway.sh
# Environment:
#   FORUM_BIN        the forum binary (default: build/forum)
#   BENCH_CALLS      sequential calls (default 200)
#   BENCH_CONC       concurrency of the rate run (default 64)
#   BENCH_SECONDS    one-second slices each way in the rate run (default 5;
#                    direct and through forum alternate)
#   BENCH_TMPDIR     parent of the scratch data dir (default /tmp)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
forum=${FORUM_BIN:-$root/build/forum}
[[ -x $forum ]] || {
    echo "bench/gateway.sh: build first (cmake --build build --target forum)" >&2
    exit 2
}
exec node "$here/gateway.mjs" "$forum"
