#!/usr/bin/env bash
# bench/ingest.sh: batch ingest, printed (never asserted in tests).
#   1. `forum ledger append --jsonl` of N entries into a fresh ledger
#      (4096 lines a transaction), against N single `ledger append`
#      processes' rate measured on a sample;
#   2. POST /append/batch of 4096-entry bodies from C concurrent clients
#      (python3 http.client, keep-alive) to a fresh daemon for S seconds.
# Env: FORUM_BIN (default build/forum), BENCH_N (200000), BENCH_CONNS (4),
# BENCH_DURATION (10 s).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FORUM_BIN:-build/forum}
n=${BENCH_N:-200000}
conns=${BENCH_CONNS:-4}
dur=${BENCH_DURATION:-10}
tmp=$(mktemp -d)
trap '"$bin" --ledger "$tmp/d" serve stop >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

python3 - "$tmp/in.jsonl" "$n" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"actor": "agent-%d" % (i % 7), "kind": "tool_result",
                            "payload": {"i": i, "text": "result %d of a tool call" % i}}) + "\n")
PY
echo "== forum ledger append --jsonl ($n entries, $(du -h "$tmp/in.jsonl" | cut -f1))"
"$bin" --ledger "$tmp/a" ledger init >/dev/null
t0=$(date +%s.%N)
"$bin" --ledger "$tmp/a" ledger append --jsonl "$tmp/in.jsonl" >/dev/null
t1=$(date +%s.%N)
python3 -c "print('  %.2f s, %.0f entries/s' % ($t1 - $t0, $n / ($t1 - $t0)))"
"$bin" --ledger "$tmp/a" verify >/dev/null && echo "  verify: ok"
echo "== one 'forum ledger append' process per entry (200 of them)"
t0=$(date +%s.%N)
for i in $(seq 200); do
  "$bin" --ledger "$tmp/a" ledger append --actor a --kind k --payload "{\"i\":$i}" >/dev/null
done
t1=$(date +%s.%N)
python3 -c "print('  %.1f ms each, %.0f entries/s' % (($t1 - $t0) / 200 * 1000, 200 / ($t1 - $t0)))"

echo "== POST /append/batch (4096 entries a request, $conns clients, ${dur} s)"
"$bin" --ledger "$tmp/d" ledger init >/dev/null
"$bin" --ledger "$tmp/d" serve start --port 0 --no-auth >/dev/null
port=$(python3 -c "import json; print(json.load(open('$tmp/d/forum.state.json'))['port'])")
python3 - "$port" "$conns" "$dur" <<'PY'
import http.client, json, sys, threading, time
port, conns, dur = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
body = json.dumps({"entries": [{"actor": "agent-%d" % (i % 7), "kind": "tool_result",
                                "payload": {"i": i, "text": "result %d of a tool call" % i}}
                               for i in range(4096)]}).encode()
done = [0] * conns
lat = []
stop = time.time() + dur
def client(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    while time.time() < stop:
        t = time.time()
        c.request("POST", "/append/batch", body, {"Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        if r.status != 200:
            raise SystemExit("HTTP %d" % r.status)
        lat.append(time.time() - t)
        done[k] += 4096
ts = [threading.Thread(target=client, args=(k,)) for k in range(conns)]
t0 = time.time()
for t in ts: t.start()
for t in ts: t.join()
el = time.time() - t0
lat.sort()
print("  %d entries in %.1f s: %.0f entries/s; per request p50 %.0f ms, p99 %.0f ms (%.0f KiB bodies)"
      % (sum(done), el, sum(done) / el, lat[len(lat) // 2] * 1000,
         lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, len(body) / 1024))
PY
"$bin" --ledger "$tmp/d" serve stop >/dev/null
"$bin" --ledger "$tmp/d" verify >/dev/null && echo "  verify: ok"
