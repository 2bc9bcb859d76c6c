#!/usr/bin/env python3
# bench/loop_http.py: the control loop's overhead through the real daemon:
# starts `forum serve --port 0 --no-auth --workers W` on a fresh data dir,
# then C client threads (default 100) each POST /submit R small requests
# (default 5) over keep-alive, every role and the task a stub (instant
# models), and prints runs, entries and model calls per second and the
# appends per commit (/metrics). Stops the daemon with SIGTERM (it must exit
# 0). Usage: bench/loop_http.py FORUM_BIN [WORKERS [CLIENTS [RUNS]]].
# Prints figures; asserts nothing.
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time


def call(conn, method, path, body=None):
    conn.request(method, path, body=json.dumps(body) if body else None,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: loop_http.py FORUM_BIN [WORKERS [CLIENTS [RUNS]]]")
    forum = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    clients = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    d = tempfile.mkdtemp(prefix="forum-loop-http-")
    p = subprocess.Popen([forum, "--ledger", d, "serve", "--port", "0",
                          "--no-auth", "--workers", str(workers)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        port = int(p.stdout.readline().decode().rsplit(":", 1)[1])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        before = json.loads(call(c, "GET", "/status")[1])["entries"]
        calls = [0] * clients
        failed = [0] * clients

        def work(i):
            cc = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            for _ in range(runs):
                st, body = call(cc, "POST", "/submit",
                                {"request": "echo the ledger entry back"})
                if st == 200:
                    calls[i] += json.loads(body)["model_calls"]
                else:
                    failed[i] += 1

        threads = [threading.Thread(target=work, args=(i,))
                   for i in range(clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.time() - t0
        after = json.loads(call(c, "GET", "/status")[1])["entries"]
        m = call(c, "GET", "/metrics")[1].decode()
        per_commit = metric(m, "forum_appends_total") / max(
            metric(m, "forum_commits_total"), 1)
    finally:
        p.terminate()
        rc = p.wait()
        shutil.rmtree(d, ignore_errors=True)
    n = clients * runs - sum(failed)
    entries = after - before
    print(f"daemon, {workers} workers, {clients} clients x {runs} POST "
          f"/submit: {n} runs ({sum(failed)} failed), {entries} entries, "
          f"{sum(calls)} model calls in {dt:.2f} s")
    print(f"  {n / dt:.0f} runs/s, {entries / dt:.0f} entries/s, "
          f"{sum(calls) / dt:.0f} model calls/s; {per_commit:.1f} appends "
          f"per commit; daemon exit {rc}")
    return 0 if rc == 0 and not sum(failed) else 1


if __name__ == "__main__":
    sys.exit(main())
