/* test_http: the HTTP surface against the real daemon on 127.0.0.1 port 0:
 * the transport table (each fault answered with the right status, the
 * daemon still serving after), auth, routes and the error model. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

static char *dir;
static struct tu_daemon d;

static void start(void)
{
    dir = tu_tmpdir();
    tu_daemon_start(&d, dir, "--timeout-s", "2", NULL);
}

static void stop(void)
{
    if (d.pid)
        cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

static void still_serving(void)
{
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, &b), 200,
                 "the daemon stopped serving");
    cr_assert_str_eq(b, "{\"ok\":true}\n");
    free(b);
}

/* Checks status and, for JSON errors, the code. */
static void expect(int status, char **bodyp, int want, const char *code)
{
    /* the body by pointer: tu_http sets it while computing status, and
     * argument evaluation order is unspecified */
    const char *body = *bodyp;
    cr_assert_eq(status, want, "status %d, want %d: %s", status, want,
                 body ? body : "");
    if (code) {
        cJSON *o = NULL;
        struct fo_err err;
        cr_assert_eq(fo_json_parse(body, strlen(body), &o, &err), FO_OK,
                     "not JSON: %s", body);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "code");
        cr_assert(cJSON_IsString(c), "no code: %s", body);
        cr_assert_str_eq(c->valuestring, code, "body: %s", body);
        cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "error")));
        cJSON_Delete(o);
    }
}

static void raw_case(const char *req, int want_status, int want_closed)
{
    int closed = 0;
    char *reply = NULL;
    int st = tu_http_raw(d.port, req, strlen(req), 3000, &closed, &reply);
    cr_assert_eq(st, want_status, "request %.60s: status %d, want %d: %s", req,
                 st, want_status, reply);
    if (want_closed)
        cr_assert(closed, "connection left open after: %.60s", req);
    free(reply);
    still_serving();
}

TestSuite(http, .init = start, .fini = stop, .timeout = 60);

Test(http, health_needs_no_token_everything_else_does)
{
    still_serving();
    char *b = NULL;
    expect(tu_http(&d, "GET", "/status", NULL, 0, &b), &b, 401, "unauthorized");
    free(b);
    /* a wrong token of the same length, and one of another length */
    struct tu_daemon wrong = d;
    memset(wrong.token, 'a', strlen(d.token));
    expect(tu_http(&wrong, "GET", "/status", NULL, 1, &b), &b, 401,
           "unauthorized");
    free(b);
    snprintf(wrong.token, sizeof(wrong.token), "short");
    expect(tu_http(&wrong, "GET", "/ledger/0", NULL, 1, &b), &b, 401,
           "unauthorized");
    free(b);
    expect(tu_http(&d, "GET", "/status", NULL, 1, &b), &b, 200, NULL);
    free(b);
}

Test(http, routes_and_the_error_model)
{
    char *b = NULL;
    expect(tu_http(&d, "GET", "/nope", NULL, 1, &b), &b, 404, "not_found");
    free(b);
    expect(tu_http(&d, "GET", "/append", NULL, 1, &b), &b, 405,
           "method_not_allowed");
    free(b);
    expect(tu_http(&d, "DELETE", "/ledger/0", NULL, 1, &b), &b, 405,
           "method_not_allowed");
    free(b);
    expect(tu_http(&d, "GET", "/ledger/0", NULL, 1, &b), &b, 404, "not_found");
    free(b);
    expect(tu_http(&d, "GET", "/ledger/x", NULL, 1, &b), &b, 400,
           "invalid_input");
    free(b);
    expect(tu_http(&d, "GET", "/ledger?limit=5000", NULL, 1, &b), &b, 400,
           "invalid_input");
    free(b);
    expect(tu_http(&d, "GET", "/ledger?bogus=1", NULL, 1, &b), &b, 400,
           "invalid_input");
    free(b);
    expect(tu_http(&d, "GET", "/ledger?limit=1&limit=2", NULL, 1, &b), &b, 400,
           "invalid_input");
    free(b);
    /* bodies: not JSON, not an object, wrong types, missing fields */
    expect(tu_http(&d, "POST", "/append", "{nope", 1, &b), &b, 400,
           "invalid_json");
    free(b);
    expect(tu_http(&d, "POST", "/append", "[1,2]", 1, &b), &b, 400,
           "invalid_input");
    free(b);
    expect(tu_http(&d, "POST", "/append",
                   "{\"actor\":5,\"kind\":\"k\",\"payload\":1}", 1, &b),
           &b, 400, "invalid_input");
    cr_assert(strstr(b, "actor"), "%s", b);
    free(b);
    expect(tu_http(&d, "POST", "/append", "{\"actor\":\"a\"}", 1, &b), &b, 400,
           "invalid_input");
    free(b);
    expect(tu_http(&d, "POST", "/append",
                   "{\"actor\":\"a\",\"kind\":\"BAD KIND\",\"payload\":1}", 1,
                   &b),
           &b, 400, "invalid_input");
    free(b);
    expect(tu_http(&d, "POST", "/append",
                   "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1,"
                   "\"parent\":7}",
                   1, &b),
           &b, 400, "invalid_input");
    free(b);
    /* and a good one, then it reads back */
    expect(tu_http(&d, "POST", "/append",
                   "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{\"n\":1}}", 1,
                   &b),
           &b, 200, NULL);
    cr_assert(strstr(b, "\"seq\":0"), "%s", b);
    free(b);
    expect(tu_http(&d, "GET", "/ledger/0/payload", NULL, 1, &b), &b, 200, NULL);
    cr_assert(strstr(b, "\"body\":{\"n\":1}"), "%s", b);
    free(b);
    /* redact is admin: --no-auth does not apply here, the token does */
    expect(
        tu_http(&d, "POST", "/redact", "{\"seq\":0,\"reason\":\"r\"}", 0, &b),
        &b, 401, "unauthorized");
    free(b);
    expect(
        tu_http(&d, "POST", "/redact", "{\"seq\":0,\"reason\":\"r\"}", 1, &b),
        &b, 200, NULL);
    free(b);
    expect(tu_http(&d, "GET", "/ledger/0/payload", NULL, 1, &b), &b, 410,
           "redacted");
    free(b);
    expect(tu_http(&d, "GET", "/verify?deep=1", NULL, 1, &b), &b, 200, NULL);
    cr_assert(strstr(b, "\"ok\":true"), "%s", b);
    free(b);
}

/* An append body whose payload is a string of n 'x' (malloc'd). */
static char *x_payload_body(size_t n)
{
    char *b = malloc(n + 64);
    cr_assert_not_null(b);
    int k = snprintf(b, 64, "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":\"");
    memset(b + k, 'x', n);
    memcpy(b + k + n, "\"}", 3);
    return b;
}

/* Path and query integers are read exactly, in their one spelling: no
 * sign, space, leading zero or percent-encoding, and nothing a JSON number
 * would round (9007199254740993 is not read as ...992). */
Test(http, integers_in_paths_and_queries_are_exact)
{
    static const char *const bad[] = {
        "/ledger/9007199254740993",
        "/ledger/9007199254740992",
        "/ledger/99999999999999999999",
        "/ledger/+0",
        "/ledger/%200",
        "/ledger/0%20",
        "/ledger/%30",
        "/ledger/00",
        "/ledger/-0",
        "/ledger/1e2",
        "/ledger?limit=+5",
        "/ledger?limit=%205",
        "/ledger?limit=05",
        "/ledger?from=9007199254740993",
        "/ledger?from=%31", /* a percent-encoded digit: 400, not from=1 */
        "/ledger?limit=5&from=%31%30",
    };
    char *b = NULL;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int st = tu_http(&d, "GET", bad[i], NULL, 1, &b);
        cr_assert_eq(st, 400, "%s: status %d: %s", bad[i], st, b ? b : "");
        cr_assert(strstr(b, "invalid_input"), "%s: %s", bad[i], b);
        free(b);
        b = NULL;
    }
    /* the exact ones still read: no such entry yet, or the empty list */
    expect(tu_http(&d, "GET", "/ledger/9007199254740991", NULL, 1, &b), &b, 404,
           "not_found");
    free(b);
    expect(tu_http(&d, "GET", "/ledger/0", NULL, 1, &b), &b, 404, "not_found");
    free(b);
    expect(tu_http(&d, "GET", "/ledger?limit=5&from=10", NULL, 1, &b), &b, 200,
           NULL);
    free(b);
}

Test(http, payload_over_the_body_limit_is_413_body_too_large)
{
    /* Canonical payload just over 1 MiB, request within the method cap. */
    size_t n = (1u << 20) + 10;
    char *req = x_payload_body(n);
    char *b = NULL;
    expect(tu_http(&d, "POST", "/append", req, 1, &b), &b, 413,
           "body_too_large");
    free(b);
    free(req);
    still_serving();
}

Test(http, transport_table)
{
    /* body over the server's cap: libevent's own 413 */
    {
        size_t n = 3u << 20;
        char *big = malloc(n + 200);
        cr_assert_not_null(big);
        int k = snprintf(big, 200,
                         "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Type: application/json\r\n"
                         "Authorization: Bearer %s\r\n"
                         "Content-Length: %zu\r\n\r\n",
                         d.token, n);
        memset(big + k, 'x', n);
        int closed = 0;
        char *reply = NULL;
        int st = tu_http_raw(d.port, big, (size_t)k + n, 5000, &closed, &reply);
        cr_assert_eq(st, 413, "%s", reply);
        free(reply);
        free(big);
        still_serving();
    }
    /* a method's own cap (4 KiB for reads) is our JSON 413 */
    {
        char *body = malloc(9000);
        memset(body, ' ', 8998);
        body[0] = '{';
        body[8997] = '}';
        body[8998] = '\0';
        char *b = NULL;
        expect(tu_http(&d, "POST", "/redact", body, 1, &b), &b, 413,
               "input_too_large");
        free(b);
        free(body);
    }
    /* oversized header */
    {
        size_t n = 64 * 1024;
        char *req = malloc(n + 200);
        int k = snprintf(req, 200, "GET /health HTTP/1.1\r\nX-Big: ");
        memset(req + k, 'a', n);
        memcpy(req + k + n, "\r\n\r\n", 5);
        int closed = 0;
        int st = tu_http_raw(d.port, req, strlen(req), 3000, &closed, NULL);
        cr_assert(st == 400 || st == 413 || st == 431 || (st == 0 && closed),
                  "oversized header: status %d", st);
        free(req);
        still_serving();
    }
    raw_case("GARBAGE\r\n\r\n", 400, 1);
    raw_case("GET /health HTTP/9.9 extra\r\n\r\n", 400, 1);
    /* conflicting Content-Length: ours, 400 and the connection closed */
    {
        char req[512];
        snprintf(req, sizeof(req),
                 "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: application/json\r\n"
                 "Authorization: Bearer %s\r\nContent-Length: 2\r\n"
                 "Content-Length: 40\r\n\r\n{}",
                 d.token);
        raw_case(req, 400, 1);
    }
    raw_case("POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
             "-5\r\n\r\n",
             400, 1);
    /* a truncated body: the client gives up; no reply is possible, the
     * daemon keeps serving */
    {
        char req[512];
        snprintf(req, sizeof(req),
                 "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: application/json\r\n"
                 "Authorization: Bearer %s\r\nContent-Length: 100\r\n\r\n"
                 "{\"actor\":",
                 d.token);
        int closed = 0;
        int st = tu_http_raw(d.port, req, strlen(req), 300, &closed, NULL);
        cr_assert_eq(st, 0);
        still_serving();
        char *b = NULL;
        expect(tu_http(&d, "GET", "/ledger/0", NULL, 1, &b), &b, 404,
               "not_found");
        free(b);
    }
    /* a slow client that never finishes: closed after the read timeout
     * (2 s here; libevent 2.1 cannot send 408) */
    {
        int closed = 0;
        int st =
            tu_http_raw(d.port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                        31, 6000, &closed, NULL);
        cr_assert_eq(st, 0);
        cr_assert(closed, "the stalled connection was not closed");
        still_serving();
    }
}

Test(http, keep_alive_serves_several_requests_on_one_connection)
{
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\n\r\n"
                     "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n",
                     d.token);
    int closed = 0;
    char *reply = NULL;
    int st = tu_http_raw(d.port, req, (size_t)n, 3000, &closed, &reply);
    cr_assert_eq(st, 200);
    int replies = 0;
    for (const char *p = reply; (p = strstr(p, "HTTP/1.1 200")); p++)
        replies++;
    cr_assert_eq(replies, 3, "%s", reply);
    cr_assert(closed);
    free(reply);
}

Test(http, metrics_in_prometheus_text)
{
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "POST", "/append",
                         "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1}", 1,
                         NULL),
                 200);
    expect(tu_http(&d, "GET", "/metrics", NULL, 0, &b), &b, 401, NULL);
    free(b);
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &b), 200);
    cr_assert(strstr(b, "forum_entries 1\n"), "%s", b);
    cr_assert(strstr(b, "forum_appends_total 1\n"), "%s", b);
    cr_assert(strstr(b, "forum_commits_total 1\n"), "%s", b);
    cr_assert(strstr(b, "forum_http_requests_total{route=\"ledger_append\","
                        "status=\"200\"} 1\n"),
              "%s", b);
    cr_assert(strstr(b, "forum_http_requests_total{route=\"unknown\","
                        "status=\"401\"} 1\n"),
              "%s", b);
    cr_assert(strstr(b, "forum_http_request_duration_seconds_count"), "%s", b);
    cr_assert(strstr(b, "forum_uptime_seconds"), "%s", b);
    free(b);
}

Test(http_noauth, no_auth_opens_everything_but_admin_methods, .timeout = 30)
{
    char *dir2 = tu_tmpdir();
    struct tu_daemon n;
    tu_daemon_start(&n, dir2, "--no-auth", NULL);
    char *b = NULL;
    expect(tu_http(&n, "GET", "/status", NULL, 0, &b), &b, 200, NULL);
    free(b);
    expect(tu_http(&n, "POST", "/append",
                   "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1}", 0, &b),
           &b, 200, NULL);
    free(b);
    expect(tu_http(&n, "GET", "/metrics", NULL, 0, &b), &b, 200, NULL);
    free(b);
    /* admin needs the token all the same */
    expect(
        tu_http(&n, "POST", "/redact", "{\"seq\":0,\"reason\":\"r\"}", 0, &b),
        &b, 401, "unauthorized");
    free(b);
    expect(
        tu_http(&n, "POST", "/redact", "{\"seq\":0,\"reason\":\"r\"}", 1, &b),
        &b, 200, NULL);
    free(b);
    cr_assert_eq(tu_daemon_signal_wait(&n, SIGTERM, 10000), 0);
    tu_rmrf(dir2);
}

/* Sends a whole request on a new connection and hangs up at once, without
 * reading the reply. */
static void send_and_hang_up(const char *req)
{
    int fd = tu_connect_loopback(d.port, 0);
    size_t len = strlen(req);
    cr_assert_eq(write(fd, req, len), (ssize_t)len);
    close(fd);
}

/* Clients that hang up before their reply, over and over (descriptor
 * numbers reused by the next connection): every complete append is still
 * committed, and the daemon goes on serving. */
Test(http, clients_hanging_up_before_the_reply_cost_nothing)
{
    const char *body = "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{}}";
    char req[1024];
    snprintf(req, sizeof(req),
             "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             d.token, strlen(body), body);
    int sent = 0;
    for (int i = 0; i < 200; i++) {
        send_and_hang_up(req);
        sent++;
        if (i % 20 == 19) {
            cr_assert_eq(tu_http(&d, "POST", "/append", body, 1, NULL), 200);
            sent++;
        }
    }
    /* the hung-up appends commit in the background: wait for all */
    long long n = -1;
    for (int t = 0; t < 500 && n != sent; t++) {
        char *s = NULL;
        cr_assert_eq(tu_http(&d, "GET", "/status", NULL, 1, &s), 200);
        cJSON *o = cJSON_Parse(s);
        n = tu_num(o, "entries");
        cJSON_Delete(o);
        free(s);
        if (n != sent)
            usleep(10000);
    }
    cr_assert_eq(n, sent, "entries %lld, appends sent %d", n, sent);
    still_serving();
}

/* ---- a request sent before the last one was answered ------------------- */

/* A client that sends its next request while the first is still being
 * answered (a submit held in its model call): both are answered, in order,
 * and the bytes waiting meanwhile do not keep the daemon busy (the
 * connection's pin goes quiet instead of firing on every turn of the
 * loop). */
Test(http_pipelined, a_request_sent_early_waits_its_turn_without_spinning,
     .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_start(tu_held_script);
    char *dir2 = tu_tmpdir(), url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    struct tu_daemon n;
    tu_daemon_start(&n, dir2, "--chat-url", url, "--model", "fake", NULL);
    atomic_store(&tu_held_hold, 1);

    int fd = tu_connect_loopback(n.port, 0);
    const char *sub = "{\"request\":\"make the schema\"}";
    char req[1024];
    int len = snprintf(req, sizeof(req),
                       "POST /submit HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\n"
                       "Authorization: Bearer %s\r\n"
                       "Content-Length: %zu\r\n\r\n%s",
                       n.token, strlen(sub), sub);
    cr_assert_eq(write(fd, req, (size_t)len), len);
    tu_held_wait_coord(1); /* the submit is in flight */
    const char *next = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    cr_assert_eq(write(fd, next, strlen(next)), (ssize_t)strlen(next));

    long long t0 = tu_cpu_ticks(n.pid);
    usleep(600 * 1000);
    long long used = tu_cpu_ticks(n.pid) - t0;
    long hz = sysconf(_SC_CLK_TCK);
    cr_assert_lt(used, hz / 5,
                 "the daemon used %lld ticks (of %ld a second) in 0.6 s "
                 "while a request waited",
                 used, hz);

    atomic_store(&tu_held_hold, 0);
    char buf[65536];
    size_t have = 0;
    char *body = NULL;
    int st = tu_http_read_reply(fd, buf, sizeof(buf), &have, &body);
    cr_assert_eq(st, 200, "submit: %d %s", st, body);
    cr_assert(strstr(body, TU_HELD_ANSWER), "submit answered: %s", body);
    free(body);
    st = tu_http_read_reply(fd, buf, sizeof(buf), &have, &body);
    cr_assert_eq(st, 200, "health: %d %s", st, body);
    cr_assert_str_eq(body, "{\"ok\":true}\n");
    free(body);
    close(fd);

    cr_assert_eq(tu_daemon_signal_wait(&n, SIGTERM, 10000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir2);
}

/* Replies larger than the socket takes at once, to a client that does not
 * read for a while: six pipelined requests for a 900 KiB body, 5.4 MB in
 * all, more than the daemon's socket buffer grows to (at most
 * tcp_wmem's maximum, 4 MiB by default), so a reply finds it full. The part
 * written at once and the rest written by the bufferevent make whole replies,
 * in order, and the connection serves the next request after them. */
Test(http, large_replies_to_a_slow_reader_arrive_whole)
{
    size_t blob = 900 * 1024;
    char *body = x_payload_body(blob);
    char *b = NULL;
    expect(tu_http(&d, "POST", "/append", body, 1, &b), &b, 200, NULL);
    free(b);
    free(body);

    /* a small window: replies wait in the daemon's socket */
    int fd = tu_connect_loopback(d.port, 4096);
    char one[512];
    int len = snprintf(one, sizeof(one),
                       "GET /ledger/0/payload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Authorization: Bearer %s\r\n\r\n",
                       d.token);
    enum { NREQ = 6 };
    for (int i = 0; i < NREQ; i++)
        cr_assert_eq(write(fd, one, (size_t)len), len);
    usleep(300 * 1000); /* the daemon fills the socket meanwhile */
    size_t cap = 4 * 1024 * 1024, have = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (int i = 0; i < NREQ; i++) {
        char *reply = NULL;
        int st = tu_http_read_reply(fd, buf, cap, &have, &reply);
        cr_assert_eq(st, 200, "reply %d: status %d", i, st);
        cJSON *o = cJSON_Parse(reply);
        cr_assert_not_null(o, "reply %d: not JSON (%zu bytes)", i,
                           strlen(reply));
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "body");
        cr_assert(cJSON_IsString(v));
        cr_assert_eq(strlen(v->valuestring), blob);
        cr_assert_eq(strspn(v->valuestring, "x"), blob);
        cJSON_Delete(o);
        free(reply);
    }

    const char *next = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    cr_assert_eq(write(fd, next, strlen(next)), (ssize_t)strlen(next));
    char *reply = NULL;
    int st = tu_http_read_reply(fd, buf, cap, &have, &reply);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(reply, "{\"ok\":true}\n");
    free(reply);
    free(buf);
    close(fd);
    still_serving();
}

/* POST /append/batch: checked whole, then one transaction through the
 * group commit; a bad entry is named by its index and nothing is
 * written. */
Test(http, append_batch_is_all_or_nothing)
{
    char *bdir = tu_tmpdir();
    struct tu_daemon bd;
    tu_daemon_start(&bd, bdir, NULL);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_puts(&b, "{\"entries\":["), FO_OK);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(fo_buf_printf(&b,
                                   "%s{\"actor\":\"agent\",\"kind\":\"step\","
                                   "\"payload\":{\"i\":%d}}",
                                   i ? "," : "", i),
                     FO_OK);
    cr_assert_eq(fo_buf_puts(&b, "]}"), FO_OK);
    cJSON *o = tu_http_json(&bd, "POST", "/append/batch", b.data, 200);
    cr_assert_eq(tu_num(o, "count"), 1000);
    cr_assert_eq(tu_num(o, "first_seq"), 0);
    cr_assert_eq(tu_num(o, "last_seq"), 999);
    cJSON_Delete(o);
    o = tu_http_json(&bd, "POST", "/append/batch",
                     "{\"entries\":[{\"actor\":\"a\",\"kind\":\"k\","
                     "\"payload\":1},{\"actor\":\"a\",\"kind\":\"Bad\","
                     "\"payload\":2}]}",
                     400);
    cr_assert(strstr(tu_str(o, "error"), "entries[1]"), "%s",
              tu_str(o, "error"));
    cJSON_Delete(o);
    o = tu_http_json(&bd, "POST", "/append/batch", "{\"entries\":[]}", 400);
    cJSON_Delete(o);
    o = tu_http_json(&bd, "GET", "/status", NULL, 200);
    cr_assert_eq(tu_num(o, "entries"), 1000);
    cJSON_Delete(o);
    cr_assert_eq(tu_daemon_signal_wait(&bd, SIGTERM, 10000), 0);
    fo_buf_release(&b);
    tu_rmrf(bdir);
}

/* --access-log: a line a request (time, peer, method, path without the
 * query, status, bytes, time, route), never a header or the query string
 * (so never a token); SIGHUP reopens it after a rotation. */
Test(http, access_log_lines_and_rotation)
{
    char *adir = tu_tmpdir();
    char alog[4200], rotated[4300];
    snprintf(alog, sizeof(alog), "%s/access.log", adir);
    snprintf(rotated, sizeof(rotated), "%s.1", alog);
    struct tu_daemon ad;
    tu_daemon_start(&ad, adir, "--access-log", alog, NULL);
    char *b = NULL;
    cr_assert_eq(tu_http(&ad, "GET", "/health", NULL, 0, &b), 200);
    free(b);
    cr_assert_eq(tu_http(&ad, "GET", "/ledger?from=0&limit=1", NULL, 1, &b),
                 200);
    free(b);
    char q[300];
    snprintf(q, sizeof(q), "/status?token=%s", ad.token);
    cr_assert_eq(tu_http(&ad, "GET", q, NULL, 0, &b), 400);
    free(b);
    cr_assert_eq(tu_http(&ad, "GET", "/no/such", NULL, 1, &b), 404);
    free(b);
    /* rotated: moved away, then SIGHUP; the next lines go to a new file */
    for (int64_t t0 = tu_now_ms(); !tu_file_has(alog, "/no/such");) {
        cr_assert_lt(tu_now_ms() - t0, 10000, "the lines never came");
        usleep(50000);
    }
    cr_assert_eq(rename(alog, rotated), 0);
    kill(ad.pid, SIGHUP);
    for (int64_t t0 = tu_now_ms(); !tu_file_has(alog, " GET /health 200 ");) {
        cr_assert_lt(tu_now_ms() - t0, 10000, "not reopened");
        tu_http(&ad, "GET", "/health", NULL, 0, NULL);
        usleep(50000);
    }
    cr_assert_eq(tu_daemon_signal_wait(&ad, SIGTERM, 10000), 0);
    size_t n = 0;
    char *old = tu_read_file(rotated, &n);
    cr_assert_not_null(old);
    cr_assert(strstr(old, " 127.0.0.1 GET /health 200 "), "%s", old);
    cr_assert(strstr(old, " GET /ledger 200 ") &&
                  strstr(old, " ledger_range\n"),
              "%s", old);
    cr_assert(strstr(old, " GET /status 400 "), "%s", old);
    cr_assert(strstr(old, " GET /no/such 404 "), "%s", old);
    cr_assert_null(strstr(old, ad.token), "the token reached the access log");
    cr_assert_null(strstr(old, "from=0"), "the query reached the access log");
    /* one line a request, each in the documented shape */
    int lines = 0;
    for (char *l = old; *l; lines++) {
        char day[40], method[16], path[256], route[64];
        int status = 0;
        size_t bytes = 0;
        double ms = 0;
        cr_assert_eq(sscanf(l, "%39s %*s %15s %255s %d %zu %lfms %63s", day,
                            method, path, &status, &bytes, &ms, route),
                     7, "%s", l);
        char *nl = strchr(l, '\n');
        cr_assert_not_null(nl);
        l = nl + 1;
    }
    /* the four, and /health lines sent before SIGHUP was handled */
    cr_assert_geq(lines, 4, "%s", old);
    free(old);
    char *now = tu_read_file(alog, &n);
    cr_assert(now && strstr(now, " GET /health 200 "), "%s", now);
    free(now);
    tu_rmrf(adir);
}

/* ---- cross-site requests and DNS rebinding (with and without a token) -- */

/* One raw request to port: method path, then the headers given (each
 * "Name: value", NULL-ended), Content-Length and body when body is not
 * NULL. Returns the status; the reply's "code" in code (or ""). */
static int guarded(int port, const char *method, const char *path,
                   const char *body, char *code, size_t code_size, ...)
{
    char req[4096];
    size_t n =
        (size_t)snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\n", method, path);
    va_list ap;
    va_start(ap, code_size);
    for (const char *hdr; (hdr = va_arg(ap, const char *));)
        n += (size_t)snprintf(req + n, sizeof(req) - n, "%s\r\n", hdr);
    va_end(ap);
    n += (size_t)snprintf(req + n, sizeof(req) - n,
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                          body ? strlen(body) : 0, body ? body : "");
    cr_assert_lt(n, sizeof(req));
    int closed = 0;
    char *reply = NULL;
    int st = tu_http_raw(port, req, n, 5000, &closed, &reply);
    code[0] = '\0';
    const char *c = reply ? strstr(reply, "\"code\":\"") : NULL;
    if (c) {
        c += 8;
        size_t k = strcspn(c, "\"");
        if (k >= code_size)
            k = code_size - 1;
        memcpy(code, c, k);
        code[k] = '\0';
    }
    free(reply);
    return st;
}

#define APPEND_CSRF "{\"actor\":\"web\",\"kind\":\"csrf\",\"payload\":1}"

/* What a page on another site can make a browser send, against a daemon
 * without a token: an HTML form (enctype text/plain or urlencoded, Origin
 * of the page), a no-cors fetch (no Content-Type or text/plain), and a
 * page whose own name was rebound to 127.0.0.1 (Host: its name). Each is
 * refused, with the code saying why, and nothing reaches the ledger. */
Test(http_noauth, cross_site_writes_and_rebinding_are_refused, .timeout = 60)
{
    char *dir2 = tu_tmpdir();
    struct tu_daemon n;
    tu_daemon_start(&n, dir2, "--no-auth", NULL);
    char code[64], host[64], self[80];
    snprintf(host, sizeof(host), "Host: 127.0.0.1:%d", n.port);
    snprintf(self, sizeof(self), "Origin: http://127.0.0.1:%d", n.port);
    /* a form with enctype=text/plain, as a browser sends it */
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), host, "Origin: http://attacker.example",
                         "Content-Type: text/plain", NULL),
                 403);
    cr_assert_str_eq(code, "forbidden_origin");
    /* the same body with no Origin (an old browser, a privacy extension):
     * the media type alone refuses it */
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), host, "Content-Type: text/plain", NULL),
                 415);
    cr_assert_str_eq(code, "unsupported_media_type");
    cr_assert_eq(
        guarded(n.port, "POST", "/append", APPEND_CSRF, code, sizeof(code),
                host, "Content-Type: application/x-www-form-urlencoded", NULL),
        415);
    /* a no-cors fetch: no Content-Type at all, with and without Origin */
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), host, "Origin: null", NULL),
                 403);
    cr_assert_eq(guarded(n.port, "POST", "/runs/1/cancel", NULL, code,
                         sizeof(code), host, NULL),
                 415);
    cr_assert_str_eq(code, "unsupported_media_type");
    /* a same-looking origin on another port (another local web app) */
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), host, "Origin: http://localhost:3000",
                         "Content-Type: application/json", NULL),
                 403);
    /* DNS rebinding: the page's own name as Host, on every route, reads
     * and the event stream included */
    const char *paths[] = {"/status", "/health", "/ledger/0", "/events", "/"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        cr_assert_eq(guarded(n.port, "GET", paths[i], NULL, code, sizeof(code),
                             "Host: attacker.example:8080", NULL),
                     421, "%s", paths[i]);
        cr_assert_str_eq(code, "misdirected_request");
    }
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), "Host: attacker.example",
                         "Content-Type: application/json", NULL),
                 421);
    /* two Host headers */
    cr_assert_eq(guarded(n.port, "GET", "/status", NULL, code, sizeof(code),
                         host, "Host: attacker.example", NULL),
                 421);
    /* none of it reached the ledger; the normal clients still work: the
     * CLI's client, curl's headers, the dashboard's same-origin call */
    char *b = NULL;
    expect(tu_http(&n, "POST", "/append", APPEND_CSRF, 0, &b), &b, 200, NULL);
    free(b);
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), host, "User-Agent: curl/7.88.1",
                         "Accept: */*",
                         "Content-Type: application/json; charset=utf-8", NULL),
                 200);
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), host, self,
                         "Content-Type: application/json", NULL),
                 200);
    char lh[64], v6[64];
    snprintf(lh, sizeof(lh), "Host: localhost:%d", n.port);
    snprintf(v6, sizeof(v6), "Host: [::1]:%d", n.port);
    cr_assert_eq(
        guarded(n.port, "GET", "/status", NULL, code, sizeof(code), lh, NULL),
        200);
    cr_assert_eq(
        guarded(n.port, "GET", "/status", NULL, code, sizeof(code), v6, NULL),
        200);
    cr_assert_eq(tu_daemon_signal_wait(&n, SIGTERM, 10000), 0);
    cr_assert_eq(tu_kind_count(dir2, "csrf"), 3);
    tu_rmrf(dir2);
}

/* With the token on, a wrong Host is refused all the same (the token does
 * not make a rebound page's requests ours); --allowed-host names a proxy's
 * public name, for Host and Origin. */
Test(http, a_wrong_host_is_refused_with_a_token_and_allowed_hosts_pass)
{
    char code[64], auth[200];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", d.token);
    cr_assert_eq(guarded(d.port, "GET", "/status", NULL, code, sizeof(code),
                         "Host: attacker.example", auth, NULL),
                 421);
    cr_assert_str_eq(code, "misdirected_request");
    char *dir2 = tu_tmpdir();
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "%s/forum.json", dir2);
    const char *json = "{\"allowed_hosts\":[\"ledger.example.org\"]}";
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    struct tu_daemon n;
    tu_daemon_start(&n, dir2, "--no-auth", "--allowed-host", "forum.internal",
                    NULL);
    cr_assert_eq(guarded(n.port, "GET", "/status", NULL, code, sizeof(code),
                         "Host: forum.internal:8443", NULL),
                 200);
    cr_assert_eq(guarded(n.port, "POST", "/append", APPEND_CSRF, code,
                         sizeof(code), "Host: ledger.example.org",
                         "Origin: https://ledger.example.org",
                         "Content-Type: application/json", NULL),
                 200);
    cr_assert_eq(guarded(n.port, "GET", "/status", NULL, code, sizeof(code),
                         "Host: other.example", NULL),
                 421);
    cr_assert_eq(tu_daemon_signal_wait(&n, SIGTERM, 10000), 0);
    tu_rmrf(dir2);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", "/nonexistent-forum", "serve", "--check",
                  "--allowed-host", "a.example:80", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--allowed-host a.example:80"), "%s", r.err);
    tu_run_free(&r);
}
