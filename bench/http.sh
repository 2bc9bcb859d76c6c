#!/usr/bin/env bash
# bench/http.sh: the daemon under a real load generator (wrk), printed as a
# table. Not a test: it asserts nothing, it prints figures (DESIGN §9).
#
# Usage: bench/http.sh
# Environment:
#   FORUM_BIN       the forum binary (default: build/forum, built if missing)
#   BENCH_DURATION  seconds per wrk run (default 10)
#   BENCH_CONNS     concurrencies (default "1 16 64"); wrk threads = min(c, 2)
#   BENCH_SEED      entries appended before the reads (default 10000)
#   BENCH_FSYNC_S   seconds per fsync-ceiling probe (default 3)
#   BENCH_TMPDIR    parent of the scratch dir (default $TMPDIR or /tmp); it
#                   must be on the disk you mean to measure, not a tmpfs
#   BENCH_MILLION=1 afterwards, drive 1,000,000 appends at c=64 and sample
#                   the daemon's RSS every 100,000
#
# First bench_rtt (from the binary's build dir, when built there): the
# round trip of a bare loopback TCP ping-pong between two threads, the floor
# under any c=1 figure on this machine.
#
# What it runs: `forum serve --port 0` on a fresh data dir (default flags:
# auth on, checkpoints signed every 1000 ms), seeded with BENCH_SEED entries;
# then, at each concurrency, wrk against GET /status, GET /ledger/{seq}
# (uniformly random seq over the entries present) and POST /append (a
# ~200-byte JSON payload, authenticated; each 200 is sent only after its
# transaction committed with synchronous=FULL). The fsync ceiling is the
# rate of a loop of one 4 KiB pwrite + fsync on a file in the same data dir
# (the probe of bench/bench_ledger.c, in python3), measured right before
# the POST /append runs and again right after them; the ratio uses the
# higher of the two, so it is the conservative one.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
duration=${BENCH_DURATION:-10}
conns=${BENCH_CONNS:-"1 16 64"}
seed=${BENCH_SEED:-10000}
fsync_s=${BENCH_FSYNC_S:-3}
million=${BENCH_MILLION:-0}

die() {
    echo "bench/http.sh: $*" >&2
    exit 1
}

for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || die "needs $tool"
done

forum=${FORUM_BIN:-}
if [[ -z $forum ]]; then
    forum=$root/build/forum
    if [[ ! -x $forum ]]; then
        echo "building $forum (Release)" >&2
        cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build "$root/build" -j2 --target forum bench_rtt >/dev/null
    fi
fi
[[ -x $forum ]] || die "$forum: not an executable"
# The machine's floor for one connection (bench_rtt beside the binary).
rtt_bin=$(dirname "$forum")/bench_rtt

work=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/forum-http-bench.XXXXXX")
dir=$work/ledger
daemon_pid=
cleanup() {
    if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fstype=$(df --output=fstype "$work" | tail -n 1)
if [[ $fstype == tmpfs || $fstype == ramfs ]]; then
    echo "warning: $work is on $fstype: fsync is free there, the ratios" \
        "mean nothing (set BENCH_TMPDIR)" >&2
fi

# ---- the fsync ceiling ---------------------------------------------------

# One 4 KiB pwrite + fsync per iteration, over 64 blocks in turn (as
# bench_ledger's probe): the rate a one-fsync-per-append writer cannot beat.
fsync_ceiling() {
    python3 - "$work/fsync-probe" "$fsync_s" <<'EOF'
import os, sys, time
path, secs = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
block = b"x" * 4096
for i in range(64):          # allocate the blocks first: overwrites only
    os.pwrite(fd, block, i * 4096)
os.fsync(fd)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < secs:
    os.pwrite(fd, block, (n % 64) * 4096)
    os.fsync(fd)
    n += 1
print(f"{n / (time.monotonic() - t0):.0f}")
os.close(fd)
os.unlink(path)
EOF
}

# ---- wrk scripts ---------------------------------------------------------

# Every script ends with the same done(): one line wrk's own report lacks.
cat >"$work/report.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d %d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout))
end
EOF

cat "$work/report.lua" >"$work/status.lua"

cat - "$work/report.lua" >"$work/get.lua" <<'EOF'
-- GET /ledger/{seq}: seq uniform over 0 .. n-1 (n the first argument)
local n = 1
local counter = 0
setup = function(thread)
  counter = counter + 1
  thread:set("tid", counter)
end
init = function(args)
  n = tonumber(args[1])
  math.randomseed(os.time() * 1000 + (tid or 0))
end
request = function()
  return wrk.format("GET", "/ledger/" .. math.random(0, n - 1))
end
EOF

# POST /append: a ~200-byte payload, a different one each request. Each wrk
# thread formats its 1024 requests once (init), not one per request, and the
# timed runs define no response(): with one, wrk copies every reply's
# headers and body into Lua, and on these two shared cores that cost the
# daemon about 5% of its append rate (measured). Only the million-append
# run, which stops after a count of replies, has one (append-n.lua).
cat - "$work/report.lua" >"$work/append.lua" <<'EOF'
local counter = 0
local reqs = {}
local i = 0
setup = function(thread)
  counter = counter + 1
  thread:set("tid", counter)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
init = function(args)
  local pad = string.rep("p", 160)
  for k = 1, 1024 do
    reqs[k] = wrk.format(nil, nil, nil, string.format(
      '{"actor":"bench","kind":"step","payload":{"t":%d,"i":%d,"pad":"%s"}}',
      tid or 0, k, pad))
  end
end
request = function()
  i = i % 1024 + 1
  return reqs[i]
end
EOF

# The same requests; each thread stops after its share (the first argument)
# of responses.
cat "$work/append.lua" - >"$work/append-n.lua" <<'EOF'
local limit = nil
local seen = 0
local init_requests = init
init = function(args)
  limit = tonumber(args[1])
  init_requests(args)
end
response = function(status, headers, body)
  seen = seen + 1
  if seen >= limit then wrk.thread:stop() end
end
EOF

# ---- the daemon ----------------------------------------------------------

echo "forum HTTP benchmark: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores," \
    "wrk on the same machine, data dir on $fstype ($work)"
rtt_line="(no $rtt_bin: build its bench_rtt target for the loopback floor)"
[[ -x $rtt_bin ]] && rtt_line=$("$rtt_bin")
echo "$rtt_line"
"$forum" --ledger "$dir" serve --port 0 >"$work/serve.out" 2>"$work/serve.err" &
daemon_pid=$!
port=
for _ in $(seq 1 200); do
    port=$(sed -n 's|^forum: listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' \
        "$work/serve.out")
    [[ -n $port ]] && break
    kill -0 "$daemon_pid" 2>/dev/null || {
        cat "$work/serve.err" >&2
        die "the daemon did not start"
    }
    sleep 0.05
done
[[ -n $port ]] || die "no 'listening on' line from the daemon"
token=$(<"$dir/token")
url=http://127.0.0.1:$port
auth="Authorization: Bearer $token"

api() { # api PATH: GET with the token
    curl -fsS -H "$auth" "$url$1"
}
metric() { # metric NAME: its value from /metrics
    api /metrics | awk -v n="$1" '$1 == n { print $2 }'
}
rss_kib() {
    awk '$1 == "VmRSS:" { print $2 }' "/proc/$daemon_pid/status"
}
entries() {
    api /status | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])'
}

# drive C N OUT [EVERY]: POST /append with wrk at concurrency C until N more
# appends committed (each thread stops at its share; wrk's main thread
# sleeps out -d whatever its threads do, so it is then sent SIGINT). With
# EVERY, samples the daemon's RSS each time another EVERY appends passed.
drive() {
    local c=$1 n=$2 out=$3 every=${4:-0} a0 done_ next wrk_pid r
    a0=$(metric forum_appends_total)
    wrk -t2 -c"$c" -d3600s --timeout 10s -H "$auth" -s "$work/append-n.lua" \
        "$url/append" -- $(((n + 1) / 2)) >"$out" &
    wrk_pid=$!
    next=$every
    while :; do
        done_=$(($(metric forum_appends_total) - a0))
        if ((every > 0 && done_ >= next)); then
            r=$(rss_kib)
            million_rows+=("$done_ $r")
            printf '  %8d appends  RSS %6.1f MiB\n' "$done_" \
                "$(awk -v r="$r" 'BEGIN { print r / 1024 }')"
            next=$(((done_ / every + 1) * every))
        fi
        ((done_ >= n)) && break
        kill -0 "$wrk_pid" 2>/dev/null || die "wrk stopped early: $(<"$out")"
        sleep 0.2
    done
    kill -INT "$wrk_pid" 2>/dev/null || true
    wait "$wrk_pid" || true
}

# Seed with wrk itself (a process per append would measure fork+exec).
million_rows=()
drive 16 "$seed" "$work/seed.out"
nseed=$(entries)
echo "seeded $nseed entries; daemon pid $daemon_pid, RSS $(($(rss_kib) / 1024)) MiB"

# run NAME C SCRIPT PATH [ARGS...]: one wrk run; appends a row to rows.
rows=()
run() {
    local name=$1 c=$2 script=$3 path=$4
    shift 4
    local t=$((c < 2 ? c : 2)) out line extra=()
    (($#)) && extra=(-- "$@")
    out=$(wrk -t"$t" -c"$c" -d"${duration}s" --timeout 10s -H "$auth" \
        -s "$script" "$url$path" "${extra[@]}")
    line=$(grep '^RESULT ' <<<"$out") || die "wrk said: $out"
    read -r _ rps p50 p99 nreq non2xx errs <<<"$line"
    rows+=("$name $c $rps $p50 $p99 $nreq $non2xx $errs")
    printf '  %-20s c=%-3s %10.0f req/s  p50 %8.3f ms  p99 %8.3f ms  (%s requests, %s non-2xx, %s socket errors)\n' \
        "$name" "$c" "$rps" "$p50" "$p99" "$nreq" "$non2xx" "$errs"
}

for c in $conns; do
    run "GET /status" "$c" "$work/status.lua" /status
done
for c in $conns; do
    run "GET /ledger/{seq}" "$c" "$work/get.lua" /ledger/0 "$nseed"
done

fsync_before=$(fsync_ceiling)
echo "fsync ceiling before the appends: $fsync_before /s"
declare -A batch
for c in $conns; do
    a0=$(metric forum_appends_total)
    k0=$(metric forum_commits_total)
    run "POST /append" "$c" "$work/append.lua" /append
    a1=$(metric forum_appends_total)
    k1=$(metric forum_commits_total)
    batch[$c]=$(awk -v a=$((a1 - a0)) -v k=$((k1 - k0)) \
        'BEGIN { printf "%.1f", k ? a / k : 0 }')
done
fsync_after=$(fsync_ceiling)
echo "fsync ceiling after the appends:  $fsync_after /s"
ceiling=$((fsync_before > fsync_after ? fsync_before : fsync_after))

appends=$(metric forum_appends_total)
commits=$(metric forum_commits_total)
rss_end=$(rss_kib)

# ---- optionally: a million appends, RSS sampled --------------------------

if [[ $million == 1 ]]; then
    start_n=$(entries)
    echo "driving 1,000,000 appends at c=64 (from $start_n entries)"
    t0=$(date +%s.%N)
    drive 64 1000000 "$work/million.out" 100000
    t1=$(date +%s.%N)
    n=$(($(entries) - start_n))
    r=$(rss_kib)
    [[ ${million_rows[-1]:-} == "$n $r" ]] || million_rows+=("$n $r")
    printf '  %8d appends  RSS %6.1f MiB (after; %.0f s, %.0f appends/s)\n' \
        "$n" "$(awk -v r="$r" 'BEGIN { print r / 1024 }')" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        "$(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { print n / (b - a) }')"
fi

# ---- stop ----------------------------------------------------------------

kill -TERM "$daemon_pid"
status=0
wait "$daemon_pid" || status=$?
daemon_pid=
[[ $status == 0 ]] || {
    cat "$work/serve.err" >&2
    die "the daemon exited $status after SIGTERM"
}

# ---- the table -----------------------------------------------------------

echo
echo "| request | c | req/s | p50 ms | p99 ms | non-2xx | x fsync ceiling | appends per commit |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for row in "${rows[@]}"; do
    read -r m path c rps p50 p99 _ non2xx errs <<<"$row"
    x=
    b=
    if [[ $m == POST ]]; then
        x=$(awk -v r="$rps" -v f="$ceiling" 'BEGIN { printf "%.2f", r / f }')
        b=${batch[$c]}
    fi
    printf '| %s %s | %s | %.0f | %.3f | %.3f | %s | %s | %s |\n' \
        "$m" "$path" "$c" "$rps" "$p50" "$p99" "$((non2xx + errs))" "$x" "$b"
done
echo
printf 'fsync ceiling (4 KiB pwrite + fsync, %s s, same fs): %s /s before, %s /s after the appends; ratios use %s /s\n' \
    "$fsync_s" "$fsync_before" "$fsync_after" "$ceiling"
echo "c=1 floor: $rtt_line"
printf 'daemon RSS after the runs: %.1f MiB (VmRSS)\n' \
    "$(awk -v r="$rss_end" 'BEGIN { print r / 1024 }')"
printf 'whole run: %s appends in %s commits, mean batch %s\n' "$appends" \
    "$commits" "$(awk -v a="$appends" -v k="$commits" 'BEGIN { printf "%.1f", a / k }')"
if ((${#million_rows[@]})); then
    printf 'million appends, RSS (MiB):'
    for mr in "${million_rows[@]}"; do
        read -r n r <<<"$mr"
        printf ' %d:%.1f' "$n" "$(awk -v r="$r" 'BEGIN { print r / 1024 }')"
    done
    echo
fi
echo "daemon stopped with SIGTERM: exit 0"
