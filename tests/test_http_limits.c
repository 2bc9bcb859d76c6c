/* test_http_limits: the daemon at its limits, against the real binary: out
 * of file descriptors it pauses accepting instead of spinning (and logs
 * once), serving the connections it has; --max-connections holds the next
 * client until one closes; a request trickling in a byte at a time is
 * closed at its deadline however steadily it trickles. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "tests/testutil.h"
#include "tests/tu_daemon.h"

static const char health[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/* A keep-alive connection and what has been read on it. */
struct kconn {
    int fd;
    char buf[65536];
    size_t have;
};

static void kconn_open(struct kconn *k, int port)
{
    k->fd = tu_connect_loopback(port, 0);
    k->have = 0;
}

/* GET path on k (with the token when given); returns the status, the body
 * in *body (malloc'd). */
static int kconn_get(struct kconn *k, const char *path, const char *token,
                     char **body)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%s\r\n", path,
                     token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "");
    cr_assert_eq(send(k->fd, req, (size_t)n, MSG_NOSIGNAL), n);
    return tu_http_read_reply(k->fd, k->buf, sizeof(k->buf), &k->have, body);
}

static void kconn_health(struct kconn *k)
{
    char *b = NULL;
    int st = kconn_get(k, "/health", NULL, &b);
    cr_assert_eq(st, 200, "GET /health: %d %s", st, b);
    cr_assert_str_eq(b, "{\"ok\":true}\n");
    free(b);
}

/* The value of a /metrics line, asked on k. */
static long long kconn_metric(struct kconn *k, const char *token,
                              const char *name)
{
    char *b = NULL;
    int st = kconn_get(k, "/metrics", token, &b);
    cr_assert_eq(st, 200, "GET /metrics: %d %s", st, b);
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(b, key);
    cr_assert_not_null(p, "no %s in /metrics:\n%s", name, b);
    long long v = strtoll(p + strlen(key), NULL, 10);
    free(b);
    return v;
}

/* Waits (up to ms) until the file at path holds needle. */
static void wait_for_line(const char *path, const char *needle, int ms)
{
    int64_t t0 = tu_now_ms();
    while (!tu_file_has(path, needle)) {
        cr_assert_lt(tu_now_ms() - t0, ms, "%s never said \"%s\"", path,
                     needle);
        usleep(20000);
    }
}

/* Whether fd has bytes (or a hang-up) within ms. */
static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

Test(http_limits, out_of_descriptors_the_daemon_pauses_accepting_and_serves,
     .timeout = 90)
{
    char *dir = tu_tmpdir(), log[512];
    snprintf(log, sizeof(log), "%s/forum.log", dir);
    struct tu_daemon d;
    /* a cap far above what 64 descriptors allow: accept() itself fails */
    tu_daemon_start_nofile(&d, dir, 64, "--max-connections", "100000",
                           "--log-file", log, NULL);
    struct kconn k;
    kconn_open(&k, d.port);
    kconn_health(&k);

    enum { EXTRA = 100 }; /* more than the daemon has descriptors for */
    int extra[EXTRA];
    for (int i = 0; i < EXTRA; i++)
        extra[i] = tu_connect_loopback(d.port, 0);
    wait_for_line(log, "Too many open files", 20000);

    /* Out of descriptors, with clients still waiting: the daemon neither
     * spins nor floods its log (before the fix: a full core, and a line
     * per turn of the loop, megabytes a second). */
    long lines = tu_file_lines(log);
    long long t0 = tu_cpu_ticks(d.pid);
    usleep(1000 * 1000);
    long long used = tu_cpu_ticks(d.pid) - t0;
    long hz = sysconf(_SC_CLK_TCK);
    cr_assert_lt(used, hz / 5,
                 "the daemon used %lld ticks (of %ld a second) in 1 s out of "
                 "descriptors",
                 used, hz);
    long grew = tu_file_lines(log) - lines;
    cr_assert_leq(grew, 2, "the log grew by %ld lines in 1 s", grew);

    /* the connection it has is served meanwhile, and counts the pauses */
    kconn_health(&k);
    cr_assert_geq(kconn_metric(&k, d.token, "forum_http_accept_errors_total"),
                  1);

    /* descriptors free again: new clients are accepted */
    for (int i = 0; i < EXTRA; i++)
        close(extra[i]);
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, &b), 200,
                 "not accepting again after the clients left");
    free(b);
    kconn_health(&k);
    close(k.fd);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    /* what the operator reads: the cap over the limit at start, then
     * each kind of line once per interval */
    cr_assert(tu_file_has(log, "max_connections 100000 leaves fewer than"),
              "no warning about the cap over the limit");
    cr_assert(tu_file_has(log, "http: accept: Too many open files"));
    tu_rmrf(dir);
}

Test(http_limits, max_connections_holds_the_next_client_until_one_closes,
     .timeout = 60)
{
    char *dir = tu_tmpdir(), log[512];
    snprintf(log, sizeof(log), "%s/forum.log", dir);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--max-connections", "4", "--log-file", log, NULL);
    struct kconn k[4];
    for (int i = 0; i < 4; i++) {
        kconn_open(&k[i], d.port);
        kconn_health(&k[i]);
    }
    /* the fifth connects (the kernel's backlog) but is not served */
    int fifth = tu_connect_loopback(d.port, 0);
    cr_assert_eq(send(fifth, health, strlen(health), MSG_NOSIGNAL),
                 (ssize_t)strlen(health));
    cr_assert_not(readable(fifth, 500), "a fifth connection was served");
    cr_assert_eq(kconn_metric(&k[1], d.token, "forum_http_connections"), 4);
    cr_assert_geq(
        kconn_metric(&k[1], d.token, "forum_http_connections_full_total"), 1);
    wait_for_line(log, "4 connections open, max_connections", 10000);

    /* one closes: the fifth is accepted and answered */
    close(k[0].fd);
    char buf[4096];
    size_t have = 0;
    char *b = NULL;
    int st = tu_http_read_reply(fifth, buf, sizeof(buf), &have, &b);
    cr_assert_eq(st, 200, "the fifth: %d %s", st, b);
    cr_assert_str_eq(b, "{\"ok\":true}\n");
    free(b);
    for (int i = 1; i < 4; i++) {
        kconn_health(&k[i]);
        close(k[i].fd);
    }
    close(fifth);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(http_limits, max_connections_is_validated)
{
    char *dir = tu_tmpdir();
    const char *bad[] = {"0", "-1", "x", "1048577"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tu_run r =
            tu_forumv(NULL, "--ledger", dir, "serve", "--max-connections",
                      bad[i], "--check", NULL);
        cr_assert_eq(r.status, 2, "--max-connections %s: exit %d", bad[i],
                     r.status);
        char want[64];
        snprintf(want, sizeof(want), "--max-connections %s: 1 to 1048576",
                 bad[i]);
        cr_assert(strstr(r.err, want), "%s", r.err);
        tu_run_free(&r);
    }
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", "--max-connections",
                  "1048576", "--check", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    char p[512];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(p, "{\"max_connections\":0}", 21), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--check", NULL);
    cr_assert_eq(r.status, 2, "max_connections 0 in forum.json: exit %d",
                 r.status);
    cr_assert(strstr(r.err, "field max_connections"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(tu_write_file(p, "{\"max_connections\":2}", 21), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--check", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "serve", "--help", NULL);
    cr_assert(strstr(r.out, "--max-connections N"), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* forum.json's max_connections reaches the daemon (the flag wins). */
Test(http_limits, max_connections_from_forum_json, .timeout = 60)
{
    char *dir = tu_tmpdir(), p[512];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(p, "{\"max_connections\":3}", 21), 0);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    struct kconn k;
    kconn_open(&k, d.port);
    cr_assert_eq(kconn_metric(&k, d.token, "forum_http_connections_max"), 3);
    close(k.fd);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_daemon_start(&d, dir, "--max-connections", "7", NULL);
    kconn_open(&k, d.port);
    cr_assert_eq(kconn_metric(&k, d.token, "forum_http_connections_max"), 7);
    close(k.fd);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(http_limits, a_request_trickling_in_is_closed_at_its_deadline,
     .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    /* the idle timeout and the request deadline: 2 s */
    tu_daemon_start(&d, dir, "--timeout-s", "2", NULL);
    struct kconn k;
    kconn_open(&k, d.port);

    /* A request sent in pieces within the deadline is answered, and the
     * deadline is per request: four such on one connection take longer
     * than one deadline in all. */
    for (int i = 0; i < 4; i++) {
        const char *parts[] = {"GET /hea", "lth HTTP/1.1\r\n",
                               "Host: 127.0.0.1\r\n", "\r\n"};
        for (int j = 0; j < 4; j++) {
            cr_assert_eq(send(k.fd, parts[j], strlen(parts[j]), MSG_NOSIGNAL),
                         (ssize_t)strlen(parts[j]));
            if (j < 3)
                usleep(200 * 1000);
        }
        char *b = NULL;
        int st = tu_http_read_reply(k.fd, k.buf, sizeof(k.buf), &k.have, &b);
        cr_assert_eq(st, 200, "request %d in pieces: %d %s", i, st, b);
        free(b);
    }

    /* A byte every 0.3 s, never a whole request: each read resets the idle
     * timeout, so only the deadline can end it (before the fix it never
     * ended). */
    int fd = tu_connect_loopback(d.port, 0);
    const char *start = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    cr_assert_eq(send(fd, start, strlen(start), MSG_NOSIGNAL),
                 (ssize_t)strlen(start));
    int sent = 0, closed = 0;
    while (!closed && sent < 60) {
        if (readable(fd, 300)) {
            char c;
            ssize_t n = recv(fd, &c, 1, 0);
            cr_assert_leq(n, 0, "an answer to an unfinished request");
            closed = 1;
        } else if (send(fd, "a", 1, MSG_NOSIGNAL) != 1) {
            closed = 1; /* reset */
        } else {
            sent++;
        }
    }
    close(fd);
    cr_assert(closed, "a request trickling in for %d s was never closed",
              sent * 3 / 10);
    /* It was closed while it kept sending (each byte read resets the idle
     * timeout), and the daemon counts it as the deadline's. */
    cr_assert_geq(sent, 3, "closed after %d bytes", sent);
    close(k.fd); /* idle meanwhile: closed by the idle timeout */
    kconn_open(&k, d.port);
    cr_assert_eq(kconn_metric(&k, d.token, "forum_http_request_deadline_total"),
                 1);
    kconn_health(&k);

    close(k.fd);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

/* HEAD answers the GET's headers with its Content-Length and no body, so
 * a keep-alive client reads the next reply where it starts; HEAD on a POST
 * route is a 405 naming the method allowed (issue 18, defect 5). */
Test(http_limits, head_has_no_body_and_keeps_the_connection_in_step,
     .timeout = 30)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--no-auth", NULL);
    const char req[] = "HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                       "HEAD /append HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                       "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Connection: close\r\n\r\n";
    int closed = 0;
    char *reply = NULL;
    int st = tu_http_raw(d.port, req, sizeof(req) - 1, 5000, &closed, &reply);
    cr_assert_eq(st, 200, "%s", reply ? reply : "");
    /* three replies back to back: each head ends where the next begins */
    char *a = reply, *end = strstr(a, "\r\n\r\n");
    cr_assert_not_null(end, "%s", reply);
    cr_assert(strstr(a, "Content-Length: 12\r\n") &&
                  strstr(a, "Content-Length: 12\r\n") < end,
              "%s", reply);
    char *b = end + 4;
    cr_assert_eq(strncmp(b, "HTTP/1.1 405", 12), 0, "a body after HEAD: %s",
                 reply);
    end = strstr(b, "\r\n\r\n");
    cr_assert_not_null(end);
    cr_assert(strstr(b, "Allow: POST\r\n") && strstr(b, "Allow: POST") < end,
              "%s", reply);
    char *c = end + 4;
    cr_assert_eq(strncmp(c, "HTTP/1.1 200", 12), 0, "%s", reply);
    cr_assert(strstr(c, "\r\n\r\n{\"ok\":true}\n"), "%s", reply);
    free(reply);
    tu_daemon_signal_wait(&d, SIGTERM, 10000);
    tu_rmrf(dir);
}

/* A client that resets its connection before reading its replies: the
 * replies libevent was still writing are no longer waited for, so a later
 * SIGTERM drains at once instead of waiting out its grace for them (issue
 * 18, defect 10). */
Test(http_limits, replies_to_a_reset_client_are_not_waited_for_at_stop,
     .timeout = 60)
{
    char *dir = tu_tmpdir();
    /* one entry with a body near the 1 MiB limit */
    size_t n = 900 * 1024;
    char *payload = malloc(n + 32);
    cr_assert_not_null(payload);
    memcpy(payload, "{\"x\":\"", 6);
    memset(payload + 6, 'a', n);
    memcpy(payload + 6 + n, "\"}", 3);
    char pf[700], log[700];
    snprintf(pf, sizeof(pf), "%s/payload.json", dir);
    snprintf(log, sizeof(log), "%s/forum.log", dir);
    cr_assert_eq(tu_write_file(pf, payload, strlen(payload)), 0);
    free(payload);
    char at[710];
    snprintf(at, sizeof(at), "@%s", pf);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "big", "--payload", at, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--no-auth", "--log-file", log, NULL);
    /* 16 pipelined requests for the 900 KiB body, never read: far more
     * than the kernel's buffers take, so a reply is left half-written */
    int fd = tu_connect_loopback(d.port, 4096);
    char reqs[16 * 64];
    size_t len = 0;
    for (int i = 0; i < 16; i++)
        len += (size_t)snprintf(reqs + len, sizeof(reqs) - len,
                                "GET /ledger/0/payload HTTP/1.1\r\nHost: "
                                "127.0.0.1\r\n\r\n");
    cr_assert_eq(write(fd, reqs, len), (ssize_t)len);
    /* wait until the daemon has a reply in hand: /status answers once the
     * loop has gone round since */
    usleep(300000);
    cJSON *st = tu_http_json(&d, "GET", "/status", NULL, 200);
    cJSON_Delete(st);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd); /* a reset */
    usleep(200000);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    cr_assert_not(tu_file_has(log, "still unwritten"),
                  "the stop waited for replies to a client that was gone");
    tu_rmrf(dir);
}

/* Two Content-Length headers that disagree, the body shorter than the
 * first: 400 as soon as the headers are in, not a wait for a body that
 * can never be framed (issue 18, defect 16); a split header block too. */
Test(http_limits, conflicting_lengths_are_refused_when_the_headers_arrive,
     .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--no-auth", "--timeout-s", "60", NULL);
    const char req[] = "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\n"
                       "Content-Length: 100\r\nContent-Length: 5\r\n\r\nabc";
    int closed = 0;
    char *reply = NULL;
    /* the daemon would wait up to its 60 s deadline for 100 bytes: the
     * reply comes well within the 10 s this waits */
    int st = tu_http_raw(d.port, req, sizeof(req) - 1, 10000, &closed, &reply);
    cr_assert_eq(st, 400, "%s", reply ? reply : "(no reply)");
    cr_assert(closed, "the connection stayed open");
    cr_assert(strstr(reply, "conflicting Content-Length"), "%s", reply);
    free(reply);
    /* the same, the header block in two writes */
    int fd = tu_connect_loopback(d.port, 0);
    const char *a = "POST /append HTTP/1.1\r\nContent-Length: 100\r\n";
    const char *b = "Content-Length: 7\r\nHost: 127.0.0.1\r\n\r\nab";
    cr_assert_eq(write(fd, a, strlen(a)), (ssize_t)strlen(a));
    usleep(100000);
    cr_assert_eq(write(fd, b, strlen(b)), (ssize_t)strlen(b));
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 10000), 1, "no reply");
    char buf[512] = "";
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    cr_assert_gt(n, 0);
    cr_assert_eq(strncmp(buf, "HTTP/1.1 400", 12), 0, "%s", buf);
    close(fd);
    /* and a well-framed request on a new connection still works */
    cJSON *h = tu_http_json(&d, "GET", "/health", NULL, 200);
    cJSON_Delete(h);
    tu_daemon_signal_wait(&d, SIGTERM, 10000);
    tu_rmrf(dir);
}

/* A Content-Length over the server's body cap is answered 413 as soon as
 * the headers are in (before, the daemon waited for a body it would never
 * take, and a client that waited for an answer first was dropped at the
 * idle timeout without one); a client that sends the body anyway still
 * reads the 413. */
Test(http_limits, a_length_over_the_cap_is_413_when_the_headers_arrive,
     .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--no-auth", "--timeout-s", "60", NULL);
    const char req[] = "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\n"
                       "Content-Length: 5000000\r\n\r\n";
    int closed = 0;
    char *reply = NULL;
    int st = tu_http_raw(d.port, req, sizeof(req) - 1, 10000, &closed, &reply);
    cr_assert_eq(st, 413, "%s", reply ? reply : "(no reply)");
    cr_assert(closed, "the connection stayed open");
    cr_assert(strstr(reply, "body_too_large") &&
                  strstr(reply, "Content-Length 5000000"),
              "%s", reply);
    free(reply);
    /* the body sent along: the 413 is read all the same */
    size_t n = 2u << 20;
    char *big = malloc(n + 256);
    cr_assert_not_null(big);
    int k = snprintf(big, 256,
                     "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     n);
    memset(big + k, 'x', n);
    st = tu_http_raw(d.port, big, (size_t)k + n, 10000, &closed, &reply);
    cr_assert_eq(st, 413, "%s", reply ? reply : "(no reply)");
    free(reply);
    free(big);
    cJSON *h = tu_http_json(&d, "GET", "/health", NULL, 200);
    cJSON_Delete(h);
    tu_daemon_signal_wait(&d, SIGTERM, 10000);
    tu_rmrf(dir);
}
