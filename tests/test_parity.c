/* test_parity: the two surfaces cannot drift. Walks the handler table and
 * calls every method over HTTP (the daemon) and over MCP (`forum mcp`) on
 * the same ledger: reads give the same JSON object, writes the same shape;
 * then the ledger still verifies. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

static char *canon(const cJSON *v)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(v, &b, NULL), FO_OK);
    cr_assert_eq(fo_buf_putc(&b, '\0'), 0);
    return b.data;
}

/* The method over HTTP: GET with {x} path bindings and the rest as query
 * parameters, POST with the arguments as the body. */
static cJSON *over_http(const struct tu_daemon *d, const struct surf_method *m,
                        const cJSON *args)
{
    char path[1024];
    size_t n = 0;
    const char *p = m->http_path;
    cJSON *rest = cJSON_Duplicate(args, 1);
    while (*p && n < sizeof(path) - 64) {
        if (*p == '{') {
            const char *e = strchr(p, '}');
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(e - p - 1), p + 1);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(rest, name);
            cr_assert(cJSON_IsNumber(v) || cJSON_IsString(v), "%s: no %s",
                      m->name, name);
            /* names in paths ([A-Za-z0-9._-]) need no escaping */
            n += cJSON_IsString(v)
                     ? (size_t)snprintf(path + n, sizeof(path) - n, "%s",
                                        v->valuestring)
                     : (size_t)snprintf(path + n, sizeof(path) - n, "%lld",
                                        (long long)v->valuedouble);
            cJSON_DeleteItemFromObjectCaseSensitive(rest, name);
            p = e + 1;
        } else {
            path[n++] = *p++;
        }
    }
    path[n] = '\0';
    char *body = NULL;
    int status;
    if (!strcmp(m->http_method, "GET")) {
        char sep = '?';
        const cJSON *v;
        cJSON_ArrayForEach (v, rest) {
            char val[64];
            if (cJSON_IsBool(v))
                snprintf(val, sizeof(val), "%s",
                         cJSON_IsTrue(v) ? "true" : "false");
            else if (cJSON_IsString(v)) /* names: no escaping needed */
                snprintf(val, sizeof(val), "%s", v->valuestring);
            else
                snprintf(val, sizeof(val), "%lld", (long long)v->valuedouble);
            n += (size_t)snprintf(path + n, sizeof(path) - n, "%c%s=%s", sep,
                                  v->string, val);
            sep = '&';
        }
        status = tu_http(d, "GET", path, NULL, 1, &body);
    } else {
        char *text = canon(rest);
        status = tu_http(d, "POST", path, text, 1, &body);
        free(text);
    }
    cJSON_Delete(rest);
    cr_assert_eq(status, 200, "%s over HTTP %s: %d %s", m->name, path, status,
                 body);
    cJSON *o = tu_json_parse(body);
    free(body);
    return o;
}

/* The method over MCP, as an admin client: the structuredContent. */
static cJSON *over_mcp(const char *dir, const struct surf_method *m,
                       const cJSON *args)
{
    char *a = canon(args);
    /* the MCP process's own handlers, beside the daemon (not its client):
     * the two hosts of the table compared */
    static const char *const extra[] = {"--admin", "--local", NULL};
    cJSON *sc = tu_mcp_callv(dir, extra, m->name, a);
    free(a);
    return sc;
}

/* The same member names, recursively through objects (values may differ:
 * two appends get two seqs). */
static void same_shape(const char *name, const cJSON *a, const cJSON *b)
{
    cr_assert_eq(cJSON_IsObject(a), cJSON_IsObject(b), "%s", name);
    if (!cJSON_IsObject(a))
        return;
    cr_assert_eq(cJSON_GetArraySize(a), cJSON_GetArraySize(b),
                 "%s: member count", name);
    const cJSON *v;
    cJSON_ArrayForEach (v, a) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(b, v->string);
        cr_assert_not_null(w, "%s: %s missing on MCP", name, v->string);
        same_shape(name, v, w);
    }
}

/* doctor's disk check: its free_bytes, which other writers move. */
static void strip_free_bytes(cJSON *o)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "native");
    cJSON *k;
    cJSON_ArrayForEach (k, cJSON_GetObjectItemCaseSensitive(n, "checks")) {
        cJSON_DeleteItemFromObjectCaseSensitive(k, "free_bytes");
        cJSON_DeleteItemFromObjectCaseSensitive(k, "detail");
    }
}

static void cli_ok(const char *const *argv)
{
    struct tu_run r = tu_forum(NULL, 0, argv);
    cr_assert_eq(r.status, 0, "%s: %s", argv[3], r.err);
    tu_run_free(&r);
}

Test(parity, every_method_gives_the_same_json_over_http_and_mcp, .timeout = 120)
{
    char *dir = tu_tmpdir();
    /* entries 0 and 1 read as a run that ended (run_get, run_cancel) */
    const char *a1[] = {"--ledger",  dir,
                        "ledger",    "append",
                        "--actor",   "a",
                        "--kind",    "request",
                        "--payload", "{\"request\":\"hi\",\"via\":\"submit\"}",
                        NULL};
    const char *a2[] = {"--ledger", dir, "ledger",    "append",
                        "--actor",  "b", "--kind",    "answer",
                        "--parent", "0", "--payload", "{\"answer\":42}",
                        NULL};
    const char *a3[] = {
        "--ledger", dir,      "ledger",    "append",         "--actor", "c",
        "--kind",   "secret", "--payload", "{\"pin\":1234}", NULL};
    const char *cp[] = {"--ledger",   dir,      "ledger",
                        "checkpoint", "--sign", NULL};
    cli_ok(a1);
    cli_ok(a2);
    cli_ok(a3);
    cli_ok(cp);
    struct tu_daemon d;
    /* no signing while the test runs: the checkpoint method must agree */
    tu_daemon_start(&d, dir, "--checkpoint-ms", "0", NULL);
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    int reads = 0, writes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct surf_method *m = &t[i];
        if (tu_method_skip(m))
            continue;
        cJSON *args = tu_json_parse(tu_method_args(m));
        cJSON *h = over_http(&d, m, args);
        /* a write that names an entry (redact) names another one the
         * second time: redacting twice is refused */
        cJSON *seq = cJSON_GetObjectItemCaseSensitive(args, "seq");
        if ((m->flags & SURF_WRITE) && cJSON_IsNumber(seq))
            cJSON_SetNumberValue(seq, seq->valuedouble - 1);
        cJSON *c = over_mcp(dir, m, args);
        if (m->flags & SURF_WRITE) {
            same_shape(m->name, h, c);
            writes++;
        } else {
            /* uptime differs between two processes by design */
            cJSON_DeleteItemFromObjectCaseSensitive(h, "uptime_s");
            cJSON_DeleteItemFromObjectCaseSensitive(c, "uptime_s");
            /* each engine (the daemon's, forum mcp's own) its runs in
             * memory and providers */
            cJSON_DeleteItemFromObjectCaseSensitive(h, "runs_in_flight");
            cJSON_DeleteItemFromObjectCaseSensitive(h, "providers");
            cJSON_DeleteItemFromObjectCaseSensitive(c, "runs_in_flight");
            cJSON_DeleteItemFromObjectCaseSensitive(c, "providers");
            /* and says which it is (test_mcp_live checks both) */
            cJSON_DeleteItemFromObjectCaseSensitive(h, "engine");
            cJSON_DeleteItemFromObjectCaseSensitive(c, "engine");
            /* the disk's free bytes move between two calls */
            strip_free_bytes(h);
            strip_free_bytes(c);
            char *hs = canon(h), *cs = canon(c);
            cr_assert_str_eq(hs, cs, "%s differs:\nHTTP %s\nMCP  %s", m->name,
                             hs, cs);
            free(hs);
            free(cs);
            reads++;
        }
        cJSON_Delete(h);
        cJSON_Delete(c);
        cJSON_Delete(args);
    }
    cr_assert_gt(reads, 10);
    cr_assert_geq(writes, 2);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    const char *v[] = {"--ledger", dir, "ledger", "verify", "--deep", NULL};
    cli_ok(v);
    tu_rmrf(dir);
}
