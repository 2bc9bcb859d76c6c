#!/usr/bin/env bash
# bench/events.sh: what GET /events costs (bench_events.c): appends/s at
# c=64 with 0 and with 1,000 idle subscribers, alternating rounds, and the
# delivery latency to 100 active subscribers. Not a test: it prints figures.
#
# Usage: bench/events.sh
# Environment:
#   FORUM_BIN        the forum binary (default: build/forum)
#   BENCH_SECONDS    seconds per append run (default 5)
#   BENCH_ROUNDS     rounds of 0 / N idle (default 3)
#   BENCH_IDLE       idle subscribers (default 1000)
#   BENCH_ACTIVE     active subscribers (default 100)
#   BENCH_TMPDIR     parent of the scratch data dir (default /tmp)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
forum=${FORUM_BIN:-$root/build/forum}
bin=$(dirname "$forum")/bench_events
[[ -x $forum && -x $bin ]] || {
    echo "bench/events.sh: build first (cmake --build build)" >&2
    exit 1
}
# 1,000 streams and 64 appenders are more descriptors than the usual 1024
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/forum-bench-events.XXXXXX")
trap '[[ -n ${pid:-} ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$forum" --ledger "$work" ledger init >/dev/null
"$forum" --ledger "$work" serve --port 0 --log-file "$work/serve.log" &
pid=$!
for _ in $(seq 100); do
    [[ -s $work/forum.state.json ]] && break
    sleep 0.1
done
port=$(python3 -c "import json;print(json.load(open('$work/forum.state.json'))['port'])")
echo "bench/events.sh: $(nproc) cores, $(uname -r), data dir on $(stat -f -c %T "$work")"
"$bin" "$port" "$(cat "$work/token")" --seconds "${BENCH_SECONDS:-5}" \
    --rounds "${BENCH_ROUNDS:-3}" --idle "${BENCH_IDLE:-1000}" \
    --active "${BENCH_ACTIVE:-100}"
