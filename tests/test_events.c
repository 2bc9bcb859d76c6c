/* test_events: GET /events against the real daemon. Entries appended over
 * HTTP arrive on the stream in seq order with their ids; filters by kind
 * and run; Last-Event-ID resumes after a daemon restart with no gap and no
 * duplicate; the tail's reads wait on a slow store off the loop (the
 * daemon answers meanwhile); an idle stream outlives the idle timeout; a client
 * that leaves is forgotten; the drain ends streams; bad filters and a token in
 * the query string are refused (and the token never reaches the log). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "tests/testutil.h"
#include "tests/tu_daemon.h"

#define WAIT_MS 15000 /* a failure detector, not a performance bound */

/* An open stream: raw bytes read, the body de-chunked, events parsed. */
struct sse {
    int fd;
    char raw[1 << 16];
    size_t nraw, used; /* used: raw bytes consumed (headers, chunks) */
    int headers_done;
    int status;
    int chunked;
    char body[1 << 18];
    size_t nbody, parsed;
    int closed;
};

/* One parsed event. */
struct sse_event {
    long long id;
    char kind[80];
    char data[4096];
};

static void sse_open(struct sse *s, const struct tu_daemon *d, const char *path,
                     const char *last_id)
{
    memset(s, 0, sizeof(*s));
    s->fd = tu_connect_loopback(d->port, 0);
    char req[1024];
    int n =
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                 "%s\r\nAccept: text/event-stream\r\n%s%s%s\r\n",
                 path, d->token, last_id ? "Last-Event-ID: " : "",
                 last_id ? last_id : "", last_id ? "\r\n" : "");
    cr_assert_eq(send(s->fd, req, (size_t)n, MSG_NOSIGNAL), n);
}

/* Moves what raw holds into body (headers parsed, chunks undone). */
static void sse_digest(struct sse *s)
{
    if (!s->headers_done) {
        s->raw[s->nraw < sizeof(s->raw) ? s->nraw : sizeof(s->raw) - 1] = 0;
        char *e = strstr(s->raw, "\r\n\r\n");
        if (!e)
            return;
        cr_assert_eq(sscanf(s->raw, "HTTP/1.%*d %d", &s->status), 1);
        *e = 0;
        s->chunked = strstr(s->raw, "chunked") != NULL;
        s->used = (size_t)(e + 4 - s->raw);
        s->headers_done = 1;
    }
    for (;;) {
        size_t left = s->nraw - s->used;
        char *p = s->raw + s->used;
        if (!s->chunked) {
            cr_assert_lt(s->nbody + left, sizeof(s->body));
            memcpy(s->body + s->nbody, p, left);
            s->nbody += left;
            s->used += left;
            return;
        }
        char *nl = memchr(p, '\n', left);
        if (!nl)
            return;
        size_t len = strtoul(p, NULL, 16);
        size_t hdr = (size_t)(nl + 1 - p);
        if (left < hdr + len + 2)
            return;
        cr_assert_lt(s->nbody + len, sizeof(s->body));
        memcpy(s->body + s->nbody, nl + 1, len);
        s->nbody += len;
        s->used += hdr + len + 2;
        if (len == 0) {
            s->closed = 1;
            return;
        }
    }
}

/* Reads for up to ms (or until the server closes). */
static void sse_pump(struct sse *s, int ms)
{
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    if (s->closed || poll(&p, 1, ms) <= 0)
        return;
    if (s->nraw == sizeof(s->raw)) { /* keep the unconsumed tail */
        memmove(s->raw, s->raw + s->used, s->nraw - s->used);
        s->nraw -= s->used;
        s->used = 0;
    }
    ssize_t n = recv(s->fd, s->raw + s->nraw, sizeof(s->raw) - s->nraw, 0);
    if (n <= 0) {
        s->closed = 1;
        return;
    }
    s->nraw += (size_t)n;
    sse_digest(s);
}

/* The next whole event (comments and retry lines skipped): 1, or 0 when
 * none came within ms. */
static int sse_next(struct sse *s, struct sse_event *ev, int ms)
{
    int64_t t0 = tu_now_ms();
    for (;;) {
        while (s->parsed < s->nbody) {
            char *start = s->body + s->parsed;
            s->body[s->nbody] = 0;
            char *end = strstr(start, "\n\n");
            if (!end)
                break;
            s->parsed = (size_t)(end + 2 - s->body);
            memset(ev, 0, sizeof(*ev));
            ev->id = -1;
            int any = 0;
            for (char *line = start; line < end;) {
                char *nl = memchr(line, '\n', (size_t)(end + 1 - line));
                *nl = 0;
                if (!strncmp(line, "id: ", 4)) {
                    ev->id = atoll(line + 4);
                    any = 1;
                } else if (!strncmp(line, "event: ", 7)) {
                    snprintf(ev->kind, sizeof(ev->kind), "%s", line + 7);
                    any = 1;
                } else if (!strncmp(line, "data: ", 6)) {
                    snprintf(ev->data, sizeof(ev->data), "%s", line + 6);
                    any = 1;
                }
                line = nl + 1;
            }
            if (any)
                return 1;
        }
        int left = ms - (int)(tu_now_ms() - t0);
        if (left <= 0 || s->closed)
            return 0;
        sse_pump(s, left < 100 ? left : 100);
    }
}

static void sse_close(struct sse *s)
{
    close(s->fd);
}

/* A daemon on a fresh data dir; down stops it (it must exit 0) and
 * removes the dir. */
static char *up(struct tu_daemon *d)
{
    char *dir = tu_tmpdir();
    tu_daemon_start(d, dir, NULL);
    return dir;
}

static void down(struct tu_daemon *d, char *dir)
{
    cr_assert_eq(tu_daemon_signal_wait(d, SIGTERM, WAIT_MS), 0);
    tu_rmrf(dir);
}

static long long append(const struct tu_daemon *d, const char *kind,
                        long long parent)
{
    char body[256];
    if (parent >= 0)
        snprintf(body, sizeof(body),
                 "{\"actor\":\"t\",\"kind\":\"%s\",\"parent\":%lld,"
                 "\"payload\":{\"k\":\"%s\"}}",
                 kind, parent, kind);
    else
        snprintf(body, sizeof(body),
                 "{\"actor\":\"t\",\"kind\":\"%s\",\"payload\":{\"k\":\"%s\"}}",
                 kind, kind);
    cJSON *e = tu_http_json(d, "POST", "/append", body, 200);
    long long seq = tu_num(e, "seq");
    cJSON_Delete(e);
    return seq;
}

Test(events, appends_arrive_in_order_with_ids)
{
    struct tu_daemon d;
    char *dir = up(&d);
    append(&d, "note", -1); /* before the stream: not sent */
    struct sse s;
    sse_open(&s, &d, "/events", NULL);
    struct sse_event ev;
    /* the stream starts at the head: wait for its hello before appending */
    for (int64_t t0 = tu_now_ms(); !strstr(s.body, "from seq");) {
        cr_assert_lt(tu_now_ms() - t0, WAIT_MS, "no hello: %s", s.raw);
        sse_pump(&s, 100);
        s.body[s.nbody] = 0;
    }
    cr_assert_eq(s.status, 200);
    cr_assert(strstr(s.raw, "text/event-stream"), "%s", s.raw);
    for (int i = 0; i < 20; i++)
        append(&d, i % 2 ? "note" : "memo", -1);
    for (int i = 0; i < 20; i++) {
        cr_assert(sse_next(&s, &ev, WAIT_MS), "event %d never came", i);
        cr_assert_eq(ev.id, 1 + i);
        cr_assert_str_eq(ev.kind, i % 2 ? "note" : "memo");
        cJSON *j = cJSON_Parse(ev.data);
        cr_assert_not_null(j, "%s", ev.data);
        cr_assert_eq(tu_num(j, "seq"), 1 + i);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "run")));
        cr_assert_eq(strlen(tu_str(j, "hash")), 64);
        cJSON_Delete(j);
    }
    sse_close(&s);
    /* from=0 replays the ledger from its start; kind= filters */
    sse_open(&s, &d, "/events?from=0&kind=note", NULL);
    long long want[] = {0, 2, 4, 6};
    for (int i = 0; i < 4; i++) {
        cr_assert(sse_next(&s, &ev, WAIT_MS));
        cr_assert_eq(ev.id, want[i]);
        cr_assert_str_eq(ev.kind, "note");
    }
    sse_close(&s);
    down(&d, dir);
}

/* The tail reads the ledger off the loop thread: while its read waits on
 * a slow store (test builds: the read holds while the file
 * FORUM_TEST_EVENTS_HOLD names exists, and makes PATH.held), the daemon
 * answers another request; once the store answers, the entry comes, in
 * order, once. With the read on the loop, /metrics would wait for the
 * hold to give up (PATH.expired). */
Test(events, a_slow_tail_read_does_not_hold_the_loop)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    struct tu_hold h;
    tu_hold_init(&h);
    setenv("FORUM_TEST_EVENTS_HOLD", h.path, 1);
    struct tu_daemon d;
    char *dir = up(&d);
    unsetenv("FORUM_TEST_EVENTS_HOLD");
    struct sse s;
    sse_open(&s, &d, "/events", NULL);
    struct sse_event ev;
    long long first = append(&d, "note", -1);
    cr_assert(sse_next(&s, &ev, WAIT_MS), "the first entry never came");
    cr_assert_eq(ev.id, first);
    tu_hold_set(&h);
    long long second = append(&d, "memo", -1); /* the tail reads: held */
    tu_hold_wait(&h, WAIT_MS, "the tail never read");
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &b), 200);
    free(b);
    cr_assert(!tu_hold_expired(&h),
              "/metrics was answered only after the tail's read gave up: "
              "the loop thread waited on the store");
    cr_assert_eq(sse_next(&s, &ev, 0), 0, "event %lld came while held", ev.id);
    tu_hold_release(&h);
    cr_assert(sse_next(&s, &ev, WAIT_MS), "the held entry never came");
    cr_assert_eq(ev.id, second);
    cr_assert_str_eq(ev.kind, "memo");
    long long third = append(&d, "note", -1);
    cr_assert(sse_next(&s, &ev, WAIT_MS));
    cr_assert_eq(ev.id, third, "%lld after %lld", ev.id, second);
    sse_close(&s);
    down(&d, dir);
    tu_hold_free(&h);
}

Test(events, run_filter_follows_parent_links)
{
    struct tu_daemon d;
    char *dir = up(&d);
    long long r1 = append(&d, "request", -1);
    long long r2 = append(&d, "request", -1);
    long long a = append(&d, "plan", r1);
    append(&d, "plan", r2);
    long long b = append(&d, "task", a);
    long long c = append(&d, "result", b);
    append(&d, "note", -1);
    struct sse s;
    struct sse_event ev;
    char path[64];
    snprintf(path, sizeof(path), "/events?run=%lld&from=0", r1);
    sse_open(&s, &d, path, NULL);
    long long want[] = {r1, a, b, c};
    for (int i = 0; i < 4; i++) {
        cr_assert(sse_next(&s, &ev, WAIT_MS), "event %d", i);
        cr_assert_eq(ev.id, want[i]);
        cJSON *j = cJSON_Parse(ev.data);
        cr_assert_eq(tu_num(j, "run"), r1);
        cJSON_Delete(j);
    }
    /* live: a deeper descendant of r1 comes, r2's does not */
    append(&d, "verdict", r2);
    long long v = append(&d, "verdict", c);
    cr_assert(sse_next(&s, &ev, WAIT_MS));
    cr_assert_eq(ev.id, v);
    sse_close(&s);
    down(&d, dir);
}

/* Reads events until none comes for quiet_ms; records their ids. */
static int collect(struct sse *s, long long *ids, int max, int quiet_ms)
{
    struct sse_event ev;
    int n = 0;
    while (n < max && sse_next(s, &ev, quiet_ms))
        ids[n++] = ev.id;
    return n;
}

Test(events, last_event_id_resumes_across_a_restart)
{
    struct tu_daemon d;
    char *dir = up(&d);
    struct sse s;
    sse_open(&s, &d, "/events?from=0", NULL);
    for (int i = 0; i < 30; i++)
        append(&d, "note", -1);
    long long ids[200];
    int n = 0;
    struct sse_event ev;
    while (n < 30) {
        cr_assert(sse_next(&s, &ev, WAIT_MS), "got %d of 30", n);
        ids[n++] = ev.id;
    }
    /* the drain ends the stream: the server closes it */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, WAIT_MS), 0);
    for (int64_t t0 = tu_now_ms(); !s.closed;) {
        cr_assert_lt(tu_now_ms() - t0, WAIT_MS, "stream not ended");
        sse_pump(&s, 100);
    }
    sse_close(&s);
    /* entries written while no daemon served, then by the next one */
    for (int i = 0; i < 5; i++) {
        struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "append",
                                    "--actor", "cli", "--kind", "note",
                                    "--payload", "{\"offline\":true}", NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_run_free(&r);
    }
    tu_daemon_start(&d, dir, NULL);
    char last[32];
    snprintf(last, sizeof(last), "%lld", ids[n - 1]);
    sse_open(&s, &d, "/events", last);
    for (int i = 0; i < 10; i++)
        append(&d, "note", -1);
    n += collect(&s, ids + n, 200 - n, 2000);
    sse_close(&s);
    cr_assert_eq(n, 45, "%d events", n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(ids[i], i, "event %d has id %lld", i, ids[i]);
    down(&d, dir);
}

Test(events, an_idle_stream_outlives_the_idle_timeout)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--timeout-s", "1", NULL);
    struct sse s;
    sse_open(&s, &d, "/events", NULL);
    sse_pump(&s, 200);
    usleep(2500 * 1000); /* over twice the idle timeout, nothing sent */
    long long seq = append(&d, "note", -1);
    struct sse_event ev;
    cr_assert(sse_next(&s, &ev, WAIT_MS), "the idle stream was dropped");
    cr_assert_eq(ev.id, seq);
    sse_close(&s);
    down(&d, dir);
}

static long long metric(const struct tu_daemon *d, const char *name)
{
    char *b = NULL;
    cr_assert_eq(tu_http(d, "GET", "/metrics", NULL, 1, &b), 200);
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(b, key);
    cr_assert_not_null(p, "no %s", name);
    long long v = strtoll(p + strlen(key), NULL, 10);
    free(b);
    return v;
}

Test(events, a_client_that_leaves_is_forgotten)
{
    struct tu_daemon d;
    char *dir = up(&d);
    struct sse s[5];
    for (int i = 0; i < 5; i++) {
        sse_open(&s[i], &d, "/events", NULL);
        while (!s[i].headers_done)
            sse_pump(&s[i], 100);
    }
    cr_assert_eq(metric(&d, "forum_events_streams"), 5);
    for (int i = 0; i < 3; i++)
        sse_close(&s[i]);
    /* a hang-up is seen at once (or at the next write): append to help */
    for (int64_t t0 = tu_now_ms(); metric(&d, "forum_events_streams") != 2;) {
        cr_assert_lt(tu_now_ms() - t0, WAIT_MS, "closed streams kept");
        append(&d, "note", -1);
        usleep(50000);
    }
    long long seq = append(&d, "memo", -1);
    struct sse_event ev;
    do /* the ones the loop above appended come first */
        cr_assert(sse_next(&s[3], &ev, WAIT_MS));
    while (ev.id != seq);
    for (int i = 3; i < 5; i++)
        sse_close(&s[i]);
    down(&d, dir);
}

Test(events, bad_requests_are_refused)
{
    char *dir = tu_tmpdir();
    char log[4200];
    snprintf(log, sizeof(log), "%s/serve.log", dir);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--log-file", log, NULL);
    long long r = append(&d, "request", -1);
    long long note = append(&d, "note", r);
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/events?kind=no_such_kind", NULL, 1, &b),
                 400);
    cr_assert(strstr(b, "no_such_kind"), "%s", b);
    free(b);
    /* a kind the ledger holds is fine (note), an invalid one is not */
    cr_assert_eq(tu_http(&d, "GET", "/events?kind=Bad!", NULL, 1, &b), 400);
    free(b);
    cr_assert_eq(tu_http(&d, "GET", "/events?colour=red", NULL, 1, &b), 400);
    cr_assert(strstr(b, "unknown parameter"), "%s", b);
    free(b);
    cr_assert_eq(tu_http(&d, "GET", "/events?from=x", NULL, 1, &b), 400);
    free(b);
    char path[64];
    snprintf(path, sizeof(path), "/events?run=%lld", note);
    cr_assert_eq(tu_http(&d, "GET", path, NULL, 1, &b), 404);
    cr_assert(strstr(b, "not_a_run"), "%s", b);
    free(b);
    cr_assert_eq(tu_http(&d, "POST", "/events", "{}", 1, &b), 405);
    free(b);
    cr_assert_eq(tu_http(&d, "GET", "/events", NULL, 0, &b), 401);
    free(b);
    /* a token in the query string: refused, and never written to the log */
    char q[300];
    snprintf(q, sizeof(q), "/events?token=%s", d.token);
    cr_assert_eq(tu_http(&d, "GET", q, NULL, 1, &b), 400);
    cr_assert(strstr(b, "query string"), "%s", b);
    free(b);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, WAIT_MS), 0);
    cr_assert(!tu_file_has(log, d.token), "the token reached the log");
    tu_rmrf(dir);
}

/* `forum ledger tail`: the last entries that pass the filters, then (-f)
 * every new one as it is committed, here by a daemon. */
Test(events, ledger_tail_shows_then_follows)
{
    struct tu_daemon d;
    char *dir = up(&d);
    long long r = append(&d, "request", -1);
    append(&d, "note", -1);
    long long p = append(&d, "plan", r);
    append(&d, "note", -1);
    struct tu_run t = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "tail", "-n", "5", "--run", "0", NULL);
    cr_assert_eq(t.status, 0, "%s", t.err);
    long long seqs[8];
    int n = 0;
    for (char *line = t.out; *line && n < 8;) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s", line);
        seqs[n++] = tu_num(j, "seq");
        cJSON_Delete(j);
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
    }
    cr_assert_eq(n, 2, "%s", t.out);
    cr_assert_eq(seqs[0], r);
    cr_assert_eq(seqs[1], p);
    tu_run_free(&t);
    t = tu_forumv(NULL, "--ledger", dir, "ledger", "tail", "-n", "1", NULL);
    cr_assert_eq(t.status, 0);
    cr_assert(strstr(t.out, "SEQ") && strstr(t.out, "note") &&
                  strstr(t.out, "{\"k\":\"note\"}"),
              "%s", t.out);
    tu_run_free(&t);
    t = tu_forumv(NULL, "--ledger", dir, "ledger", "tail", "--run", "1", NULL);
    cr_assert_eq(t.status, 1, "a note is not a run: %s", t.err);
    tu_run_free(&t);
    /* -f: new entries of the kind asked for, as they come */
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execl(FORUM_BIN, FORUM_BIN, "--ledger", dir, "--json", "ledger", "tail",
              "-n", "0", "-f", "--kind", "memo", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *f = fdopen(pfd[0], "r");
    cr_assert_not_null(f);
    usleep(300 * 1000);
    long long want[3];
    for (int i = 0; i < 3; i++) {
        append(&d, "note", -1);
        want[i] = append(&d, "memo", -1);
    }
    char line[4096];
    for (int i = 0; i < 3; i++) {
        cr_assert_not_null(fgets(line, sizeof(line), f), "line %d", i);
        cJSON *j = cJSON_Parse(line);
        cr_assert_eq(tu_num(j, "seq"), want[i], "%s", line);
        cr_assert_str_eq(tu_str(j, "kind"), "memo");
        cJSON_Delete(j);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    fclose(f);
    down(&d, dir);
}

/* Subscribers that nothing is for sit out the turns (parked), and still get
 * the first entry that is for them, with nothing skipped after it. */
Test(events, parked_subscribers_wake_for_their_entries)
{
    struct tu_daemon d;
    char *dir = up(&d);
    long long r = append(&d, "request", -1);
    struct sse k, rn, all;
    char path[64];
    sse_open(&k, &d, "/events?kind=verdict", NULL);
    snprintf(path, sizeof(path), "/events?run=%lld", r);
    sse_open(&rn, &d, path, NULL);
    sse_open(&all, &d, "/events", NULL);
    while (!k.headers_done || !rn.headers_done || !all.headers_done) {
        sse_pump(&k, 50);
        sse_pump(&rn, 50);
        sse_pump(&all, 50);
    }
    usleep(300 * 1000); /* a poll turn or two: all of them parked */
    for (int i = 0; i < 50; i++)
        append(&d, "note", -1);
    long long v1 = append(&d, "verdict", -1);
    long long p = append(&d, "plan", r);
    long long v2 = append(&d, "verdict", p);
    struct sse_event ev;
    cr_assert(sse_next(&k, &ev, WAIT_MS));
    cr_assert_eq(ev.id, v1);
    cr_assert(sse_next(&k, &ev, WAIT_MS));
    cr_assert_eq(ev.id, v2);
    cr_assert(sse_next(&rn, &ev, WAIT_MS));
    cr_assert_eq(ev.id, p);
    cr_assert(sse_next(&rn, &ev, WAIT_MS));
    cr_assert_eq(ev.id, v2);
    for (long long want = r + 1; want <= v2; want++) {
        cr_assert(sse_next(&all, &ev, WAIT_MS));
        cr_assert_eq(ev.id, want);
    }
    sse_close(&k);
    sse_close(&rn);
    sse_close(&all);
    down(&d, dir);
}

/* The daemon's resident set, in KiB (/proc/PID/status VmRSS). */
static long rss_kib(const struct tu_daemon *d)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    cr_assert_gt(kib, 0);
    return kib;
}

/* 4096 small entries in one batch (each an event of a few hundred bytes) */
static void append_many(const struct tu_daemon *d)
{
    static char body[4096 * 64 + 64];
    size_t n = (size_t)snprintf(body, sizeof(body), "{\"entries\":[");
    for (int i = 0; i < 4096; i++)
        n += (size_t)snprintf(body + n, sizeof(body) - n,
                              "%s{\"actor\":\"t\",\"kind\":\"fill\","
                              "\"payload\":{\"i\":%d}}",
                              i ? "," : "", i);
    snprintf(body + n, sizeof(body) - n, "]}");
    cJSON *r = tu_http_json(d, "POST", "/append/batch", body, 200);
    cJSON_Delete(r);
}

/* Streams whose clients stop reading hold up to SURF_EVENTS_HIGH each in
 * the daemon; once they are closed, that memory goes back to the system
 * (it used to stay in the allocator's free lists: ~0.5 MiB a stream). */
Test(events, the_memory_of_closed_stalled_streams_is_given_back, .timeout = 120)
{
#ifdef FORUM_SANITIZE
    /* ASan's allocator owns malloc there: it quarantines what is freed,
     * and malloc_trim (glibc's) has nothing to give back */
    cr_skip_test("the allocator under test is ASan's, not glibc's");
#endif
    struct tu_daemon d;
    char *dir = up(&d);
    enum { N = 24 };
    int fd[N];
    for (int i = 0; i < N; i++) {
        fd[i] = tu_connect_loopback(d.port, 4096);
        char req[512];
        int n = snprintf(req, sizeof(req),
                         "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Authorization: Bearer %s\r\n\r\n",
                         d.token);
        cr_assert_eq(send(fd[i], req, (size_t)n, MSG_NOSIGNAL), n);
    }
    for (int64_t t0 = tu_now_ms(); metric(&d, "forum_events_streams") != N;)
        cr_assert_lt(tu_now_ms() - t0, WAIT_MS, "the streams did not open");
    long base = rss_kib(&d);
    /* the clients read nothing: each stream stalls at its cap */
    for (int i = 0; i < 4; i++)
        append_many(&d);
    usleep(500 * 1000);
    long peak = rss_kib(&d);
    cr_assert_gt(peak - base, N * 256, "the streams did not fill: %ld -> %ld",
                 base, peak);
    for (int i = 0; i < N; i++)
        close(fd[i]);
    for (int64_t t0 = tu_now_ms(); metric(&d, "forum_events_streams") != 0;) {
        cr_assert_lt(tu_now_ms() - t0, WAIT_MS, "closed streams kept");
        usleep(50 * 1000);
    }
    /* given back soon after (the wait is a failure detector) */
    long after = rss_kib(&d);
    for (int64_t t0 = tu_now_ms();
         peak - after < (peak - base) / 2 && tu_now_ms() - t0 < 3000;
         after = rss_kib(&d))
        usleep(50 * 1000);
    cr_log_info("VmRSS: %ld KiB with %d streams open, %ld at the peak, %ld "
                "after they closed",
                base, N, peak, after);
    cr_assert_geq(peak - after, (peak - base) / 2,
                  "VmRSS %ld KiB with the streams open, %ld stalled, %ld "
                  "after they closed: less than half given back",
                  base, peak, after);
    down(&d, dir);
}
