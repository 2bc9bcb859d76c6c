/* tu_daemon: helpers for tests against the running daemon. */
#include "tests/tu_daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cli/cli.h"
#include "ledger/fo_json.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"

static void read_token(struct tu_daemon *d, const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/token", dir);
    char *tok = tu_read_file(path, NULL);
    cr_assert_not_null(tok);
    size_t tl = strcspn(tok, "\n");
    cr_assert_lt(tl, sizeof(d->token));
    memcpy(d->token, tok, tl);
    d->token[tl] = '\0';
    free(tok);
}

/* The port of the daemon of pid from its state file, or 0 while the file
 * is not (yet) its. */
static int state_port(const char *dir, pid_t pid)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/forum.state.json", dir);
    char *s = tu_read_file(path, NULL);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    free(s);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pid");
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(o, "port");
    int got = cJSON_IsNumber(p) && (pid_t)p->valuedouble == pid &&
                      cJSON_IsNumber(port)
                  ? (int)port->valuedouble
                  : 0;
    cJSON_Delete(o);
    return got;
}

/* nofile > 0: the daemon's RLIMIT_NOFILE. early: returns once it serves,
 * its stdout kept in d->out. */
static void start_daemon(struct tu_daemon *d, const char *dir, int nofile,
                         int early, va_list ap)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = FORUM_BIN;
    argv[n++] = "--ledger";
    argv[n++] = dir;
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 38)
        argv[n++] = a;
    argv[n] = NULL;
    int out[2];
    cr_assert_eq(pipe(out), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* the daemon dies with its test, even one that crashed */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        struct rlimit rl = {(rlim_t)nofile, (rlim_t)nofile};
        if (nofile > 0 && setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(127);
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execv(FORUM_BIN, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    d->pid = pid;
    d->dir = dir;
    d->out = -1;
    if (early) {
        d->out = out[0];
        int64_t t0 = tu_now_ms();
        while ((d->port = state_port(dir, pid)) == 0) {
            cr_assert_lt(tu_now_ms() - t0, 10000, "the daemon did not start");
            cr_assert_eq(waitpid(pid, NULL, WNOHANG), 0,
                         "the daemon exited before serving");
            usleep(10 * 1000);
        }
        read_token(d, dir);
        char *b = NULL;
        while (tu_http(d, "GET", "/health", NULL, 0, &b) != 200) {
            free(b);
            b = NULL;
            cr_assert_lt(tu_now_ms() - t0, 10000, "/health never answered");
            usleep(10 * 1000);
        }
        free(b);
        return;
    }
    char line[256] = {0};
    size_t got = 0;
    while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        cr_assert_gt(poll(&p, 1, 10000), 0, "the daemon did not start");
        ssize_t r = read(out[0], line + got, sizeof(line) - 1 - got);
        cr_assert_gt(r, 0, "the daemon exited before listening");
        got += (size_t)r;
    }
    close(out[0]);
    const char *colon = strrchr(line, ':');
    cr_assert_not_null(colon, "no port in: %s", line);
    d->port = (int)strtol(colon + 1, NULL, 10);
    cr_assert_gt(d->port, 0);
    read_token(d, dir);
}

void tu_daemon_start_early(struct tu_daemon *d, const char *dir, ...)
{
    va_list ap;
    va_start(ap, dir);
    start_daemon(d, dir, 0, 1, ap);
    va_end(ap);
}

int tu_daemon_ready(struct tu_daemon *d, int wait_ms)
{
    cr_assert_geq(d->out, 0, "not started by tu_daemon_start_early");
    char line[256] = {0};
    size_t got = 0;
    while (!strchr(line, '\n')) {
        struct pollfd p = {.fd = d->out, .events = POLLIN};
        if (poll(&p, 1, wait_ms) == 0 && got == 0)
            return 0;
        ssize_t r = read(d->out, line + got, sizeof(line) - 1 - got);
        cr_assert_gt(r, 0, "the daemon exited before it was ready");
        got += (size_t)r;
        cr_assert_lt(got, sizeof(line) - 1, "a long line: %s", line);
    }
    cr_assert(strstr(line, "listening on"), "%s", line);
    close(d->out);
    d->out = -1;
    return 1;
}

void tu_daemon_start(struct tu_daemon *d, const char *dir, ...)
{
    va_list ap;
    va_start(ap, dir);
    start_daemon(d, dir, 0, 0, ap);
    va_end(ap);
}

void tu_daemon_start_nofile(struct tu_daemon *d, const char *dir, int nofile,
                            ...)
{
    va_list ap;
    va_start(ap, nofile);
    start_daemon(d, dir, nofile, 0, ap);
    va_end(ap);
}

int tu_http_read_reply(int fd, char *buf, size_t cap, size_t *len, char **body)
{
    for (;;) {
        buf[*len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strstr(buf, "Content-Length: ");
            size_t head = (size_t)(end + 4 - buf);
            size_t blen = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
            if (*len >= head + blen) {
                int status = (int)strtol(buf + 9, NULL, 10);
                *body = strndup(buf + head, blen);
                memmove(buf, buf + head + blen, *len - head - blen);
                *len -= head + blen;
                return status;
            }
        }
        cr_assert_lt(*len, cap - 1, "reply too long");
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        cr_assert_gt(n, 0, "the connection closed before the reply");
        *len += (size_t)n;
    }
}

int tu_daemon_signal_wait(struct tu_daemon *d, int sig, int timeout_ms)
{
    if (sig)
        kill(d->pid, sig);
    for (int waited = 0;; waited += 10) {
        int st = 0;
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid) {
            d->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (waited >= timeout_ms) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            d->pid = 0;
            cr_assert_fail("the daemon did not exit within %d ms", timeout_ms);
        }
        usleep(10000);
    }
}

void tu_daemon_term_drained(struct tu_daemon *d)
{
    cr_assert_eq(kill(d->pid, SIGTERM), 0);
    char *b = NULL;
    for (int64_t t0 = tu_now_ms();
         tu_http(d, "GET", "/health", NULL, 1, &b) == 200;) {
        free(b);
        b = NULL;
        cr_assert_lt(tu_now_ms() - t0, 10000, "still serving after SIGTERM");
        usleep(10 * 1000);
    }
    free(b);
}

int tu_http(const struct tu_daemon *d, const char *method, const char *path,
            const char *json, int auth, char **body)
{
    int status = -1;
    char *b = NULL;
    struct fo_err err;
    if (cli_http_request("127.0.0.1", d->port, method, path,
                         auth ? d->token : NULL, json, json ? strlen(json) : 0,
                         20000, &status, &b, NULL, &err) != FO_OK)
        status = -1;
    if (body)
        *body = b;
    else
        free(b);
    return status;
}

int tu_http_raw(int port, const char *data, size_t len, int wait_ms,
                int *closed, char **reply)
{
    int fd = tu_connect_loopback(port, 0);
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server may close early: read what it said */
        off += (size_t)w;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    cr_assert_not_null(buf);
    *closed = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el =
            (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (el >= wait_ms)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(wait_ms - el)) <= 0)
            continue;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            cr_assert_not_null(buf);
        }
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    int status = 0;
    if (n > 12 && strncmp(buf, "HTTP/1.", 7) == 0)
        status = (int)strtol(buf + 9, NULL, 10);
    if (reply)
        *reply = buf;
    else
        free(buf);
    return status;
}

static const char *const method_args[][2] = {
    {"ledger_get", "{\"seq\":0}"},
    {"ledger_body", "{\"seq\":1}"},
    {"ledger_range", "{\"from\":0,\"limit\":2}"},
    {"ledger_replay", "{\"seq\":1}"},
    {"ledger_chain", "{\"seq\":1}"},
    {"ledger_verify", "{\"deep\":true}"},
    {"ledger_append", "{\"actor\":\"mcp\",\"kind\":\"test\",\"payload\":"
                      "{\"x\":[1,2.5,\"y\"]},\"parent\":1}"},
    {"ledger_redact", "{\"seq\":2,\"reason\":\"test\"}"},
    {"ledger_append_batch",
     "{\"entries\":[{\"actor\":\"mcp\",\"kind\":\"test\",\"payload\":1},"
     "{\"actor\":\"mcp\",\"kind\":\"test\",\"payload\":{\"x\":2},"
     "\"parent\":0}]}"},
    {"ledger_prove", "{\"seq\":1}"},
    {"ledger_consistency", "{\"first\":1}"},
    {"route", "{\"text\":\"build the api database server endpoint\"}"},
    {"plan_run", "{\"plan\":{\"tasks\":[{\"id\":\"T1\",\"agent\":"
                 "\"backend\",\"instruction\":\"schema\",\"depends_on\":"
                 "[]}]},\"request\":\"make a schema\"}"},
    {"plan", "{\"request\":\"build the api database server endpoint\"}"},
    {"submit", "{\"request\":\"build the api database server endpoint\","
               "\"max_model_calls\":8}"},
    {"run_start", "{\"request\":\"build the api database server endpoint\","
                  "\"max_model_calls\":8}"},
    /* entries 0 and 1 of the test ledger are a run's request (via
     * submit) and its answer: a run that ended */
    {"run_get", "{\"run\":0}"},
    {"run_show", "{\"run\":0}"},
    {"run_export_otel", "{\"run\":0}"},
    {"ledger_import",
     "{\"format\":\"jsonl\",\"name\":\"t.jsonl\",\"data\":"
     "\"{\\\"id\\\":\\\"a\\\"}\\n{\\\"id\\\":\\\"b\\\",\\\"parent\\\":"
     "\\\"a\\\"}\\n\"}"},
    {"session_remember",
     "{\"session\":\"s1\",\"key\":\"lang\",\"value\":\"C11\"}"},
    {"context_preflight", "{\"request\":\"build the api\"}"},
    {"humanize", "{\"text\":\"in order to ship it we utilize tests\"}"},
    {"prose_contract", "{\"text\":\"review the tests\"}"},
    {"lane_route",
     "{\"task\":\"run the build\",\"lane\":\"execute\",\"scopes\":"
     "[\"read\",\"run\"]}"},
    {"vocabulary_gap", "{\"domain_signal\":\"source-federation\"}"},
    {"run_cancel", "{\"run\":0}"},
    /* a campaign of one forum feature and one outside one; run 0 (a run
     * that ended) is the forum feature's dispatch */
    {"campaign_declare",
     "{\"campaign\":{\"campaign_id\":\"t\",\"projects\":[{\"project_id\":"
     "\"p\",\"owner\":\"forum\",\"features\":[{\"feature_id\":\"f\"}]},"
     "{\"project_id\":\"x\",\"owner\":\"external:x\",\"features\":[{"
     "\"feature_id\":\"g\",\"depends_on\":[\"f\"]}]}]}}"},
    {"campaign_status", "{\"campaign_id\":\"t\"}"},
    {"campaign_next", "{\"campaign_id\":\"t\"}"},
    {"campaign_dispatch",
     "{\"campaign_id\":\"t\",\"feature_id\":\"f\",\"run\":0}"},
    {"campaign_ingest_status",
     "{\"campaign_id\":\"t\",\"project_id\":\"x\",\"feature_id\":\"g\","
     "\"status\":\"in_progress\"}"},
};

int tu_method_skip(const struct surf_method *m)
{
    /* a gate decision needs a run waiting at a gate, and decides it once:
     * tests/test_gates.c calls them over HTTP, the CLI and MCP */
    if (!strcmp(m->name, "gate_approve") || !strcmp(m->name, "gate_edit") ||
        !strcmp(m->name, "gate_reject"))
        return 1;
    /* a cosignature needs a note cosigned at test time by a witness the
     * ledger names: tests/test_witness.c calls it over the CLI, HTTP and
     * MCP */
    if (!strcmp(m->name, "ledger_cosign"))
        return 1;
    /* a gateway session needs gateway calls: tests/test_gw_sessions.c */
    if (!strcmp(m->name, "gateway_session") ||
        !strcmp(m->name, "gateway_session_otel"))
        return 1;
    /* a session to show, fork or forget from: tests/test_sessions.c */
    return !strcmp(m->name, "session_show") ||
           !strcmp(m->name, "session_fork") ||
           !strcmp(m->name, "session_forget");
}

const char *tu_method_args(const struct surf_method *m)
{
    for (size_t i = 0; i < sizeof(method_args) / sizeof(method_args[0]); i++)
        if (!strcmp(method_args[i][0], m->name))
            return method_args[i][1];
    const cJSON *req =
        cJSON_GetObjectItemCaseSensitive(surf_schema(m), "required");
    cr_assert(cJSON_GetArraySize(req) == 0,
              "method %s needs input but has no row in method_args of "
              "tests/tu_daemon.c: add one",
              m->name);
    return "{}";
}

cJSON *tu_mcp_call(const char *dir, int admin, const char *tool,
                   const char *args)
{
    static const char *const adm[] = {"--admin", NULL};
    return tu_mcp_callv(dir, admin ? adm : NULL, tool, args);
}

cJSON *tu_mcp_callv(const char *dir, const char *const *extra, const char *tool,
                    const char *args)
{
    size_t cap = strlen(args) + strlen(tool) + 1024;
    char *in = malloc(cap);
    cr_assert_not_null(in);
    snprintf(in, cap,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
             "\"params\":{\"protocolVersion\":\"2025-11-25\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\","
             "\"version\":\"1\"}}}\n"
             "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"%s\",\"arguments\":%s}}\n",
             tool, args);
    const char *argv[64] = {"--ledger", dir, "mcp", "--init"};
    size_t n = 4;
    for (size_t i = 0; extra && extra[i]; i++) {
        cr_assert_lt(n, 63, "tu_mcp_callv: too many arguments");
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    struct tu_run r = tu_forum(in, strlen(in), argv);
    free(in);
    cr_assert_eq(r.status, 0, "forum mcp: %s", r.err);
    const char *second = strchr(r.out, '\n');
    cr_assert_not_null(second, "one reply only: %s", r.out);
    cJSON *reply = NULL;
    struct fo_err err;
    cr_assert_eq(fo_json_parse(second + 1, strlen(second + 1), &reply, &err),
                 FO_OK, "not JSON (%s): %s", err.msg, second + 1);
    cJSON *res = cJSON_GetObjectItemCaseSensitive(reply, "result");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(res, "isError")),
              "%s over MCP failed: %s", tool, second + 1);
    cJSON *sc =
        cJSON_DetachItemFromObjectCaseSensitive(res, "structuredContent");
    cr_assert(cJSON_IsObject(sc), "%s: no structuredContent", tool);
    cJSON_Delete(reply);
    tu_run_free(&r);
    return sc;
}

cJSON *tu_http_json(const struct tu_daemon *d, const char *method,
                    const char *path, const char *json, int want)
{
    char *body = NULL;
    int st = tu_http(d, method, path, json, 1, &body);
    cr_assert_eq(st, want, "%s %s: %d %s", method, path, st, body);
    cJSON *o = tu_json_parse(body);
    free(body);
    return o;
}

cJSON *tu_surf_call(struct surf_ctx *ctx, const char *method, const char *json,
                    int want)
{
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *in = cJSON_Parse(json);
    cr_assert_not_null(in);
    cJSON *out = NULL;
    int rc = surf_call(ctx, surf_find(method), in, &out, &err);
    cJSON_Delete(in);
    cr_assert_eq(rc, want, "%s %s: rc %d: %s", method, json, rc, err.msg);
    return out;
}

cJSON *tu_run_wait(struct surf_ctx *ctx, long long run, int ms)
{
    char in[64];
    snprintf(in, sizeof(in), "{\"run\":%lld}", run);
    int64_t t0 = tu_now_ms();
    for (;;) {
        cJSON *g = tu_surf_call(ctx, "run_get", in, FO_OK);
        if (strcmp(tu_str(g, "state"), "running") != 0)
            return g;
        cJSON_Delete(g);
        cr_assert_lt(tu_now_ms() - t0, ms, "run %lld still running", run);
        usleep(5000);
    }
}

void tu_entry_kinds(const cJSON *g, char *out, size_t size)
{
    const cJSON *v;
    out[0] = '\0';
    cJSON_ArrayForEach (v, cJSON_GetObjectItemCaseSensitive(g, "entries")) {
        size_t n = strlen(out);
        snprintf(out + n, size - n, "%s ", tu_str(v, "kind"));
    }
}

void tu_fakebin_start(struct tu_fakebin *f, int hold, const char *delay_ms)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    f->pid = fork();
    cr_assert_geq(f->pid, 0);
    if (f->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl(FORUM_FAKE_MODEL, FORUM_FAKE_MODEL, "--port", "0", "--delay-ms",
              delay_ms, hold ? "--hold" : NULL, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[64] = "";
    FILE *in = fdopen(p[0], "r");
    cr_assert_not_null(fgets(line, sizeof(line), in),
                       "fake_model said nothing");
    fclose(in);
    cr_assert_eq(sscanf(line, "port %d", &f->port), 1, "%s", line);
}

void tu_fakebin_stop(struct tu_fakebin *f)
{
    kill(f->pid, SIGTERM);
    waitpid(f->pid, NULL, 0);
}

long long tu_fakebin_stat(const struct tu_fakebin *f, const char *key)
{
    struct tu_daemon as = {.port = f->port};
    char *b = NULL;
    cr_assert_eq(tu_http(&as, "GET", "/stats", NULL, 0, &b), 200);
    cJSON *j = tu_json_parse(b);
    long long v = tu_num(j, key);
    cJSON_Delete(j);
    free(b);
    return v;
}

long long tu_kind_count(const char *dir, const char *kind)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "summary", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *s = tu_run_json(&r);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(s, "by_kind"), kind);
    long long n = cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
    cJSON_Delete(s);
    tu_run_free(&r);
    return n;
}

cJSON *tu_daemon_run_wait(const struct tu_daemon *d, long long run, int ms)
{
    int64_t t0 = tu_now_ms();
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", run);
    for (;;) {
        cJSON *g = tu_http_json(d, "GET", path, NULL, 200);
        const char *st = tu_str(g, "state");
        if (strcmp(st, "running") && strcmp(st, "stopped") &&
            strcmp(st, "waiting"))
            return g;
        cJSON_Delete(g);
        cr_assert_lt(tu_now_ms() - t0, ms, "run %lld did not end", run);
        usleep(20000);
    }
}
