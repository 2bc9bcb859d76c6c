/* MCP over Streamable HTTP at the daemon's /mcp: the same tools as stdio,
 * on the daemon's engine and model. Sessions (initialize gives one; no
 * session 400, an ended one 404), the bearer token (401 without), a run's
 * every step as notifications/progress on an event stream before its
 * result, a submit answered by the daemon's model and listed in its
 * running runs, notifications/cancelled ending a run held at a slow model,
 * the session's GET stream, DELETE. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"
#include "tu_daemon.h"
#include "tu_scene.h"

/* One POST /mcp (sid may be NULL, token: send it); the whole reply, read
 * until the server closes (Connection: close). Returns the status. */
static int post(const struct tu_daemon *d, const char *sid, int token,
                const char *json, char **reply)
{
    char req[8192];
    int n = snprintf(req, sizeof(req),
                     "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Content-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "%s%s%s%s%s%s"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     d->port, token ? "Authorization: Bearer " : "",
                     token ? d->token : "", token ? "\r\n" : "",
                     sid ? "Mcp-Session-Id: " : "", sid ? sid : "",
                     sid ? "\r\n" : "", strlen(json), json);
    cr_assert_lt(n, (int)sizeof(req));
    int closed = 0;
    return tu_http_raw(d->port, req, (size_t)n, 30000, &closed, reply);
}

/* The value of header name in a raw reply (into out). */
static int header(const char *reply, const char *name, char *out, size_t size)
{
    const char *p = strcasestr(reply, name);
    if (!p)
        return 0;
    p += strlen(name);
    while (*p == ':' || *p == ' ')
        p++;
    size_t n = strcspn(p, "\r\n");
    snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), p);
    return 1;
}

static void session(const struct tu_daemon *d, char *sid, size_t size)
{
    char *reply = NULL;
    int st = post(d, NULL, 1,
                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                  "\"params\":{\"protocolVersion\":\"2025-06-18\","
                  "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\"}}}",
                  &reply);
    cr_assert_eq(st, 200, "%s", reply);
    cr_assert(header(reply, "Mcp-Session-Id", sid, size), "%s", reply);
    cr_assert(strstr(reply, "\"protocolVersion\":\"2025-06-18\""), "%s", reply);
    free(reply);
}

/* The event stream's messages in a raw reply, parsed, in order. */
static int events(const char *reply, cJSON **out, int max)
{
    int n = 0;
    for (const char *p = strstr(reply, "data: "); p && n < max;
         p = strstr(p, "data: ")) {
        p += 6;
        size_t len = strcspn(p, "\r\n");
        out[n] = cJSON_ParseWithLength(p, len);
        cr_assert(out[n], "not JSON: %.*s", (int)len, p);
        n++;
        p += len;
    }
    return n;
}

Test(mcp_http, sessions_and_the_token, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    char *reply = NULL;
    const char list[] = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":"
                        "\"tools/list\"}";
    /* no token: 401, as on every route */
    cr_assert_eq(post(&d, NULL, 0,
                      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
                      "\"initialize\",\"params\":{}}",
                      &reply),
                 401, "%s", reply);
    free(reply);
    /* no session: 400; one never made: 404 */
    cr_assert_eq(post(&d, NULL, 1, list, &reply), 400, "%s", reply);
    free(reply);
    cr_assert_eq(post(&d, "0123456789abcdef0123456789abcdef", 1, list, &reply),
                 404, "%s", reply);
    free(reply);
    char sid[64];
    session(&d, sid, sizeof(sid));
    cr_assert_eq(strlen(sid), 32);
    /* a notification is 202; tools/list names the table's tools */
    cr_assert_eq(post(&d, sid, 1,
                      "{\"jsonrpc\":\"2.0\",\"method\":"
                      "\"notifications/initialized\"}",
                      &reply),
                 202, "%s", reply);
    free(reply);
    cr_assert_eq(post(&d, sid, 1, list, &reply), 200, "%s", reply);
    cr_assert(strstr(reply, "\"name\":\"ledger_verify\""), "%s", reply);
    cr_assert(strstr(reply, "\"name\":\"submit\""), "%s", reply);
    free(reply);
    /* a read tool, on a worker */
    cr_assert_eq(post(&d, sid, 1,
                      "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
                      "\"params\":{\"name\":\"ledger_verify\","
                      "\"arguments\":{}}}",
                      &reply),
                 200, "%s", reply);
    cr_assert(strstr(reply, "\"isError\":false"), "%s", reply);
    cr_assert(strstr(reply, "\"ok\":true"), "%s", reply);
    free(reply);
    /* a batch is refused; bad JSON is a parse error */
    cr_assert_eq(post(&d, sid, 1, "[{\"jsonrpc\":\"2.0\",\"id\":1}]", &reply),
                 400, "%s", reply);
    free(reply);
    cr_assert_eq(post(&d, sid, 1, "{nope", &reply), 400, "%s", reply);
    cr_assert(strstr(reply, "-32700"), "%s", reply);
    free(reply);
    /* DELETE ends it */
    char del[512];
    int n = snprintf(del, sizeof(del),
                     "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n"
                     "Connection: close\r\n\r\n",
                     d.port, d.token, sid);
    int closed = 0;
    cr_assert_eq(tu_http_raw(d.port, del, (size_t)n, 10000, &closed, &reply),
                 204, "%s", reply);
    free(reply);
    cr_assert_eq(post(&d, sid, 1, list, &reply), 404, "%s", reply);
    free(reply);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(mcp_http, a_run_reports_every_step_before_its_result, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    char sid[64];
    session(&d, sid, sizeof(sid));
    char *reply = NULL;
    cr_assert_eq(
        post(&d, sid, 1,
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"submit\",\"arguments\":{\"request\":"
             "\"add a health endpoint\"},\"_meta\":{\"progressToken\":"
             "\"p\"}}}",
             &reply),
        200, "%s", reply);
    cr_assert(strstr(reply, "text/event-stream"), "%s", reply);
    cJSON *ev[64];
    int n = events(reply, ev, 64);
    cr_assert_geq(n, 2, "%s", reply);
    /* progress 1, 2, ... n-1, then the result (id 7) last */
    for (int i = 0; i < n - 1; i++) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(ev[i], "params");
        cr_assert_str_eq(
            cJSON_GetObjectItemCaseSensitive(ev[i], "method")->valuestring,
            "notifications/progress");
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(p, "progress")->valueint,
                     i + 1);
    }
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(ev[n - 1], "id")->valueint,
                 7);
    /* every entry of the run was a step reported: as many as it has */
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ev[n - 1], "result"),
        "structuredContent");
    long long run =
        (long long)cJSON_GetObjectItemCaseSensitive(sc, "request_seq")
            ->valuedouble;
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", run);
    cJSON *g = tu_http_json(&d, "GET", path, NULL, 200);
    int entries =
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "entries"));
    cr_assert_eq(n - 1, entries, "%d steps reported, the run has %d entries",
                 n - 1, entries);
    const char *last =
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(ev[n - 2], "params"), "message")
            ->valuestring;
    cr_assert_str_eq(last, "answer");
    cJSON_Delete(g);
    for (int i = 0; i < n; i++)
        cJSON_Delete(ev[i]);
    free(reply);
    /* without a progressToken the same call is one JSON reply */
    cr_assert_eq(post(&d, sid, 1,
                      "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\","
                      "\"params\":{\"name\":\"submit\",\"arguments\":"
                      "{\"request\":\"again\"}}}",
                      &reply),
                 200, "%s", reply);
    cr_assert(strstr(reply, "application/json"), "%s", reply);
    cr_assert(!strstr(reply, "notifications/progress"), "%s", reply);
    cr_assert(strstr(reply, "\"id\":8"), "%s", reply);
    free(reply);
    /* a client that takes JSON only gets the result alone, as JSON */
    const char body[] =
        "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"submit\",\"arguments\":{\"request\":"
        "\"once more\"},\"_meta\":{\"progressToken\":\"q\"}}}";
    char raw[2048];
    int rn = snprintf(raw, sizeof(raw),
                      "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                      "Content-Type: application/json\r\n"
                      "Accept: application/json\r\n"
                      "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n"
                      "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                      d.port, d.token, sid, strlen(body), body);
    int closed = 0;
    cr_assert_eq(tu_http_raw(d.port, raw, (size_t)rn, 30000, &closed, &reply),
                 200, "%s", reply);
    cr_assert(!strstr(reply, "text/event-stream"), "%s", reply);
    cr_assert(!strstr(reply, "notifications/progress"), "%s", reply);
    cr_assert(strstr(reply, "\"id\":9"), "%s", reply);
    free(reply);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

static const char *answers(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "synthesizer"))
        return "the daemon's model answered over /mcp";
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "made";
}

Test(mcp_http, a_submit_runs_on_the_daemons_model, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, answers, NULL);
    struct tu_daemon d;
    tu_daemon_start(&d, sc.dir, "--chat-url", sc.url, "--model", "m1",
                    "--roster", sc.rpath, NULL);
    char sid[64];
    session(&d, sid, sizeof(sid));
    char *reply = NULL;
    cr_assert_eq(post(&d, sid, 1,
                      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
                      "\"params\":{\"name\":\"submit\",\"arguments\":"
                      "{\"request\":\"edit the file\"}}}",
                      &reply),
                 200, "%s", reply);
    cr_assert(strstr(reply, "the daemon's model answered over /mcp"), "%s",
              reply);
    cr_assert_geq(sc.f->count[R_SYNTH], 1);
    free(reply);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_scene_close(&sc);
}

/* A raw POST left open: the request is sent, the reply read later. */
static int post_open(const struct tu_daemon *d, const char *sid,
                     const char *json)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)d->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[4096];
    int n = snprintf(req, sizeof(req),
                     "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Content-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     d->port, d->token, sid, strlen(json), json);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    return fd;
}

static char *read_all(int fd, int ms)
{
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) != 1)
            break;
        if (len + 4096 > cap)
            b = realloc(b, cap *= 2);
        ssize_t r = read(fd, b + len, cap - len - 1);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    b[len] = '\0';
    return b;
}

Test(mcp_http, cancelled_ends_a_run_held_at_a_slow_model, .timeout = 90)
{
    char *dir = tu_tmpdir();
    struct tu_fakebin f;
    tu_fakebin_start(&f, 1, "0"); /* holds every call */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--chat-url", url, "--model", "m", NULL);
    char sid[64];
    session(&d, sid, sizeof(sid));
    int fd = post_open(&d, sid,
                       "{\"jsonrpc\":\"2.0\",\"id\":\"c1\",\"method\":"
                       "\"tools/call\",\"params\":{\"name\":\"submit\","
                       "\"arguments\":{\"request\":\"wait for me\"},"
                       "\"_meta\":{\"progressToken\":1}}}");
    /* the run shows as running on the daemon while its model holds it */
    long long run = -1;
    for (int i = 0; i < 200 && run < 0; i++) {
        cJSON *r = tu_http_json(&d, "GET", "/runs?state=running", NULL, 200);
        const cJSON *first =
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "runs"), 0);
        if (first)
            run = (long long)cJSON_GetObjectItemCaseSensitive(first, "run")
                      ->valuedouble;
        cJSON_Delete(r);
        if (run < 0)
            usleep(50 * 1000);
    }
    cr_assert_geq(run, 0, "the run never showed as running");
    while (tu_fakebin_stat(&f, "held") < 1)
        usleep(20 * 1000);
    char *reply = NULL;
    cr_assert_eq(post(&d, sid, 1,
                      "{\"jsonrpc\":\"2.0\",\"method\":"
                      "\"notifications/cancelled\",\"params\":{\"requestId\":"
                      "\"c1\",\"reason\":\"the user pressed stop\"}}",
                      &reply),
                 202, "%s", reply);
    free(reply);
    /* the run ends, cancelled; the call's stream ends without a result */
    cJSON *g = tu_daemon_run_wait(&d, run, 20000);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(g, "state")->valuestring,
                     "cancelled");
    cJSON_Delete(g);
    char *stream = read_all(fd, 10000);
    close(fd);
    cr_assert(!strstr(stream, "\"id\":\"c1\""), "a result was sent: %s",
              stream);
    free(stream);
    cr_assert_eq(tu_kind_count(dir, "budget"), 1, "witnessed once");
    char *why = tu_scene_bodies(dir, "budget");
    cr_assert(strstr(why, "cancelled"), "%s", why);
    free(why);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_fakebin_stop(&f);
    tu_rmrf(dir);
}

Test(mcp_http, the_sessions_get_stream, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    char sid[64];
    session(&d, sid, sizeof(sid));
    char get[512];
    int n = snprintf(get, sizeof(get),
                     "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Accept: text/event-stream\r\n"
                     "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n\r\n",
                     d.port, d.token, sid);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)d.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(write(fd, get, (size_t)n), n);
    char *head = read_all(fd, 2000);
    cr_assert(strstr(head, "200 OK") && strstr(head, "text/event-stream"), "%s",
              head);
    free(head);
    /* one a session */
    int closed = 0;
    char *reply = NULL;
    cr_assert_eq(tu_http_raw(d.port, get, (size_t)n, 2000, &closed, &reply),
                 409, "%s", reply);
    free(reply);
    /* DELETE ends the session, and the stream with it */
    char del[512];
    n = snprintf(del, sizeof(del),
                 "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                 "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n"
                 "Connection: close\r\n\r\n",
                 d.port, d.token, sid);
    cr_assert_eq(tu_http_raw(d.port, del, (size_t)n, 10000, &closed, &reply),
                 204, "%s", reply);
    free(reply);
    char *rest = read_all(fd, 5000);
    cr_assert(strstr(rest, "0\r\n\r\n"), "the stream did not end: %s", rest);
    free(rest);
    close(fd);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}
