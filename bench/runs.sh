#!/usr/bin/env bash
# bench/runs.sh: runs through the daemon's run engine against a fake model of
# fixed latency (bench/fake_model, C, one event loop), printed as tables. Not
# a test: it asserts nothing, it prints figures.
#
# Usage: bench/runs.sh
# Environment:
#   FORUM_BIN       the forum binary (default: build/forum, built if missing)
#   BENCH_LATENCY   the model's latency per call in ms (default 200)
#   BENCH_CONNS     concurrent submits (default "64 256 1024")
#   BENCH_DURATION  seconds per wrk run (default 15)
#   BENCH_INFLIGHT  runs started and held for the memory figure (default
#                   10000); 0 skips it and the resume figure


#   BENCH_TMPDIR    parent of the scratch dir (default $TMPDIR or /tmp)
#
# 1. POST /submit under wrk at each concurrency: runs/s (each 200 is a whole
#    run: request, route, plan, task, result, verdict, answer, every entry
#    committed), latency p50/p99, and the daemon's RSS and threads sampled
#    mid-run. The Little's-law bound is c / (calls in the run's sequential
#    part x L): with no model, a run waits for the coordinator, the task and
#    the synthesizer (the verdict needs no model: the fake's plan has no
#    done_when), so 3 x L.
# 2. BENCH_INFLIGHT runs started (POST /runs) against a model that holds
#    every reply: the daemon's RSS and threads with all of them waiting.
# 3. The daemon SIGKILLed with BENCH_RESUME runs waiting, restarted: the
#    time from its start until every one of them has asked the model again.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
lat=${BENCH_LATENCY:-200}
conns=${BENCH_CONNS:-"64 256 1024"}
duration=${BENCH_DURATION:-15}
inflight=${BENCH_INFLIGHT:-10000}

tmp=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/forum-bench-runs.XXXXXX")
forum=${FORUM_BIN:-$root/build/forum}
bindir=$(dirname "$forum")
if [ ! -x "$forum" ] || [ ! -x "$bindir/fake_model" ]; then
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$root/build" -j"$(nproc)" --target forum fake_model >/dev/null
  forum=$root/build/forum
  bindir=$root/build
fi
command -v wrk >/dev/null || { echo "bench/runs.sh: needs wrk (FORUM_DEPS_BENCH=1 scripts/install-deps.sh)" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

fake_pid=""; daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

start_fake() { # $1: extra flags
  "$bindir/fake_model" --port 0 --delay-ms "$lat" $1 >"$tmp/fake.out" &
  fake_pid=$!
  for _ in $(seq 100); do [ -s "$tmp/fake.out" ] && break; sleep 0.05; done
  fake_port=$(awk '{print $2}' "$tmp/fake.out")
}
start_daemon() { # $1: data dir
  "$forum" --ledger "$1" serve --port 0 --chat-url "http://127.0.0.1:$fake_port/v1" \
    --model fake >"$tmp/serve.out" 2>"$tmp/serve.err" &
  daemon_pid=$!
  for _ in $(seq 200); do
    port=$(python3 -c "import json,sys;print(json.load(open('$1/forum.state.json'))['port'])" 2>/dev/null || true)
    [ -n "$port" ] && curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.05
  done
  token=$(cat "$1/token")
}
stop_daemon() { kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=""; }
rss_mib() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$daemon_pid/status"; }
threads() { awk '/Threads/{print $2}' "/proc/$daemon_pid/status"; }
stat_of() { curl -fs "http://127.0.0.1:$fake_port/stats" | python3 -c "import json,sys;print(json.load(sys.stdin)['$1'])"; }

cat >"$tmp/submit.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"request":"build the api database server"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer TOKEN"
EOF

echo "forum runs bench: model latency ${lat} ms, $(nproc) cores, $(date -u +%FT%TZ)"
echo
echo "1. POST /submit (whole runs), ${duration} s per concurrency"
printf '%6s %10s %10s %10s %10s %8s %10s %8s %8s\n' c runs/s bound ratio p50_ms p99_ms errors rss_MiB threads
start_fake ""
mkdir -p "$tmp/l1"
start_daemon "$tmp/l1"
sed -i "s/TOKEN/$token/" "$tmp/submit.lua"
for c in $conns; do
  t=2; [ "$c" -lt 2 ] && t=$c
  ( sleep $((duration / 2)); rss_mib >"$tmp/rss"; threads >"$tmp/thr" ) &
  sampler=$!
  wrk -t"$t" -c"$c" -d"${duration}s" --timeout 60s --latency -s "$tmp/submit.lua" \
    "http://127.0.0.1:$port/submit" >"$tmp/wrk.out" 2>&1 || true
  wait "$sampler" || true
  rps=$(awk '/Requests\/sec/{print $2}' "$tmp/wrk.out")
  p50=$(awk '$1=="50%"{print $2}' "$tmp/wrk.out")
  p99=$(awk '$1=="99%"{print $2}' "$tmp/wrk.out")
  errs=$(awk '/Non-2xx|Socket errors/{print}' "$tmp/wrk.out" | tr -s ' ' | paste -sd';' -)
  bound=$(python3 -c "print(round($c / (3 * $lat / 1000.0), 1))")
  ratio=$(python3 -c "print(round($rps / $bound, 3))")
  to_ms() { python3 -c "
s='$1'
v=float(s.rstrip('msu')) if s else 0
print(round(v*1000 if s.endswith('s') and not s.endswith('ms') and not s.endswith('us') else (v/1000 if s.endswith('us') else v),1))"; }
  printf '%6s %10s %10s %10s %10s %8s %10s %8s %8s\n' "$c" "$rps" "$bound" "$ratio" \
    "$(to_ms "$p50")" "$(to_ms "$p99")" "${errs:-0}" "$(cat "$tmp/rss")" "$(cat "$tmp/thr")"
done
calls=$(stat_of calls)
echo "   model calls in all: $calls"
stop_daemon
kill "$fake_pid"; wait "$fake_pid" 2>/dev/null || true; fake_pid=""

if [ "$inflight" -gt 0 ]; then
  echo
  echo "2. ${inflight} runs in flight, every model reply held"
  start_fake "--hold"
  mkdir -p "$tmp/l2"
  start_daemon "$tmp/l2"
  t0=$(date +%s.%N)
  python3 - "$port" "$token" "$inflight" "$fake_port" <<'EOF'
import http.client, json, sys, threading, time
port, token, n, fport = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
body = json.dumps({"request": "build the api database server"})
hdr = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
def worker(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(k):
        c.request("POST", "/runs", body, hdr)
        r = c.getresponse(); r.read()
        if r.status != 200:
            print("run_start:", r.status, file=sys.stderr); sys.exit(1)
def at_model():
    c = http.client.HTTPConnection("127.0.0.1", fport, timeout=60)
    c.request("GET", "/stats"); return json.loads(c.getresponse().read())["coordinator"]
# in steps of 1,000, each step once the last is at the model: the fake's
# accept queue (and the kernel's, somaxconn) is the limit, not the daemon
done = 0
while done < n:
    k = min(1000, n - done)
    ts = [threading.Thread(target=worker, args=(k // 8 + (i < k % 8),)) for i in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    done += k
    while at_model() < done:
        time.sleep(0.05)
EOF
  t1=$(date +%s.%N)
  for _ in $(seq 600); do [ "$(stat_of coordinator)" -ge "$inflight" ] && break; sleep 0.1; done
  echo "   started in $(python3 -c "print(round($t1 - $t0, 2))") s; waiting at the model: $(stat_of coordinator)"
  echo "   daemon RSS $(rss_mib) MiB, threads $(threads)"

  echo
  echo "3. resume: SIGKILL with runs waiting, then a new daemon"
  kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=""
  kill -USR2 "$fake_pid" # the dead daemon's calls go (their sockets close)
  for _ in $(seq 200); do [ "$(stat_of held)" -eq 0 ] && break; sleep 0.05; done
  before=$(stat_of coordinator)
  echo "   unfinished runs: $inflight (set BENCH_INFLIGHT to change); model calls so far: $before"
  t0=$(date +%s.%N)
  start_daemon "$tmp/l2"
  for _ in $(seq 600); do
    [ "$(stat_of coordinator)" -ge $((before + inflight)) ] && break; sleep 0.02
  done
  t1=$(date +%s.%N)
  echo "   all ${inflight} asking the model again $(python3 -c "print(round($t1 - $t0, 2))") s after the start (the daemon's start included)"
  grep -h "resumed" "$tmp/serve.err" | tail -1 | sed 's/^/   log: /'
  stop_daemon
fi
