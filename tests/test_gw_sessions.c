/* The model gateway's sessions as read views (daemon/orch_gw.c): calls
 * driven through the real daemon's /v1/chat/completions to a fake upstream
 * (tests/tu_model.c, usage 7 in and 3 out a call), then GET /runs lists
 * each session beside the runs with its counts, GET
 * /gateway/sessions/NAME gives its calls in order, the OTLP export has one
 * span per call, and the CLI's run list, run show and ledger tail say the
 * same. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>
#include <sqlite3.h>

#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"
#include "tests/tu_pg.h"

static const char *answer(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    (void)f, (void)role, (void)n, (void)model, (void)prompt;
    return "pong";
}

static void start(struct tu_daemon *d, char *dir, const struct fake *up)
{
    char p[1024], cfg[1024];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    int n = snprintf(cfg, sizeof(cfg),
                     "{\"models\":{\"providers\":["
                     "{\"name\":\"local\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"fake-model\","
                     "\"tier\":\"cheap\"},"
                     "{\"name\":\"other\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"fake-big\"},"
                     "{\"name\":\"dead\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:1/v1\",\"model\":\"dead-model\"}]}}",
                     up->port, up->port);
    cr_assert_eq(tu_write_file(p, cfg, (size_t)n), 0);
    tu_daemon_start(d, dir, NULL);
}

/* One chat completion through the gateway, with X-Forum-Session: session
 * (NULL: none); returns the HTTP status. */
static int call(const struct tu_daemon *d, const char *session,
                const char *model, const char *text)
{
    char body[512], req[2048], hs[256] = "";
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"%s\"}]}",
             model, text);
    if (session)
        snprintf(hs, sizeof(hs), "X-Forum-Session: %s\r\n", session);
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: "
                     "127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nConnection: close\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     d->token, hs, strlen(body), body);
    int closed = 0;
    char *reply = NULL;
    int st = tu_http_raw(d->port, req, (size_t)n, 30000, &closed, &reply);
    free(reply);
    return st;
}

static long long num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return (long long)v->valuedouble;
}

static const cJSON *find_item(const cJSON *runs, const char *id)
{
    const cJSON *x;
    cJSON_ArrayForEach (x, runs)
        if (!strcmp(tu_str(x, "id"), id))
            return x;
    return NULL;
}

/* The seqs of the ledger's gateway_call entries of session name (NULL:
 * none), in order, counted from GET /ledger and each payload. */
static int ledger_calls(const struct tu_daemon *d, const char *name,
                        long long *seqs, int max)
{
    cJSON *r = tu_http_json(d, "GET", "/ledger?limit=1000", NULL, 200);
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach (e, cJSON_GetObjectItemCaseSensitive(r, "entries")) {
        if (strcmp(tu_str(e, "kind"), "gateway_call") != 0)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/ledger/%lld/payload", num(e, "seq"));
        cJSON *p = tu_http_json(d, "GET", path, NULL, 200);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(p, "body"), "session");
        if (name ? cJSON_IsString(s) && !strcmp(s->valuestring, name)
                 : !cJSON_IsString(s)) {
            cr_assert(n < max);
            seqs[n++] = num(e, "seq");
        }
        cJSON_Delete(p);
    }
    cJSON_Delete(r);
    return n;
}

/* GET /gateway/sessions/alpha: its na calls, seqs aseq, in order; its
 * OTLP trace. */
static void check_show(const struct tu_daemon *dd, const long long *aseq,
                       int na)
{
    const struct tu_daemon d = *dd;
    /* the session, call by call, in ledger order */
    cJSON *s = tu_http_json(&d, "GET", "/gateway/sessions/alpha", NULL, 200);
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(s, "steps");
    cr_assert_eq(cJSON_GetArraySize(steps), na);
    const char *want[] = {"fake-model", "fake-big", "dead-model"};
    for (int i = 0; i < na; i++) {
        const cJSON *st = cJSON_GetArrayItem(steps, i);
        cr_assert_eq(num(st, "seq"), aseq[i]);
        cr_assert_str_eq(tu_str(st, "model"), want[i]);
        cr_assert_str_eq(tu_str(st, "kind"), "model");
        cr_assert(num(st, "start_ts") <= num(st, "end_ts"));
        cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "ok")),
                     i < 2);
    }
    cr_assert_eq(num(cJSON_GetArrayItem(steps, 0), "status"), 200);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetArrayItem(steps, 0), "tokens"),
                     "input"),
                 7);
    cJSON_Delete(s);
    /* a session no call names: 404 */
    char *body = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/gateway/sessions/nobody", NULL, 1, &body),
                 404);
    free(body);

    /* OTLP: one trace, one span per call, with the GenAI attributes */
    cJSON *o =
        tu_http_json(&d, "GET", "/gateway/sessions/alpha/otel", NULL, 200);
    const cJSON *spans = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(
                    cJSON_GetObjectItemCaseSensitive(o, "resourceSpans"), 0),
                "scopeSpans"),
            0),
        "spans");
    cr_assert_eq(cJSON_GetArraySize(spans), na);
    char *all = cJSON_PrintUnformatted(o);
    const char *trace = tu_str(cJSON_GetArrayItem(spans, 0), "traceId");
    for (int i = 0; i < na; i++) {
        const cJSON *sp = cJSON_GetArrayItem(spans, i);
        cr_assert_str_eq(tu_str(sp, "traceId"), trace);
        cr_assert_str_eq(tu_str(sp, "name"), "gateway_call");
        cr_assert_null(cJSON_GetObjectItemCaseSensitive(sp, "parentSpanId"));
    }
    cr_assert(strstr(all, "\"gen_ai.request.model\",\"value\":{\"stringValue\":"
                          "\"fake-big\"}"),
              "%s", all);
    cr_assert(strstr(all, "\"gen_ai.usage.input_tokens\",\"value\":{"
                          "\"intValue\":\"7\"}"));
    cr_assert(strstr(all, "\"error.type\""));
    free(all);
    cJSON_Delete(o);
}

/* The CLI says the same: run list, run show session:NAME, ledger tail,
 * export otel. */
static void check_cli(const char *dir)
{
    /* the CLI: run list, run show session:NAME, ledger tail, export otel */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "run", "list", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "session:alpha") &&
                  strstr(r.out, "3 calls, 1 error, tokens 14 in 6 out"),
              "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "run", "show", "session:alpha", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "fake-big") && strstr(r.out, "dead-model"), "%s",
              r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "tail", "--kind",
                  "gateway_call", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "fake-big 200, ") &&
                  strstr(r.out, "tokens 7/3, session alpha") &&
                  strstr(r.out, "dead-model 0 unavailable"),
              "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "export", "otel", "session:beta",
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "gen_ai.request.model"), "%s", r.out);
    tu_run_free(&r);
}

Test(gw_sessions, runs_lists_sessions_and_the_session_gives_calls_in_order,
     .timeout = 120)
{
    struct fake *up = fake_start(answer);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, up);
    /* three calls of session alpha (two models, one failing), one of beta,
     * one without a header, and a run of forum's own beside them */
    cr_assert_eq(call(&d, "alpha", "fake-model", "one"), 200);
    cr_assert_eq(call(&d, "beta", "fake-model", "two"), 200);
    /* read once midway: the daemon keeps its fold, and a later read must
     * add only what came since, counted right */
    cJSON *mid = tu_http_json(&d, "GET", "/runs", NULL, 200);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(mid, "runs")), 2);
    cr_assert_eq(num(cJSON_GetArrayItem(
                         cJSON_GetObjectItemCaseSensitive(mid, "runs"), 1),
                     "calls"),
                 1);
    cJSON_Delete(mid);
    cr_assert_eq(call(&d, "alpha", "fake-big", "three"), 200);
    cr_assert_eq(call(&d, "alpha", "dead-model", "four"), 502);
    cr_assert_eq(call(&d, NULL, "fake-model", "five"), 200);

    cJSON *l = tu_http_json(&d, "GET", "/runs", NULL, 200);
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(l, "runs");
    const cJSON *a = find_item(runs, "session:alpha");
    const cJSON *b = find_item(runs, "session:beta");
    cr_assert(a && b, "GET /runs: no sessions in %s",
              cJSON_PrintUnformatted(l));
    cr_assert_str_eq(tu_str(a, "type"), "gateway_session");
    cr_assert_str_eq(tu_str(a, "session"), "alpha");
    long long aseq[8], bseq[8], nseq[8];
    int na = ledger_calls(&d, "alpha", aseq, 8);
    cr_assert_eq(na, 3);
    cr_assert_eq(ledger_calls(&d, "beta", bseq, 8), 1);
    cr_assert_eq(ledger_calls(&d, NULL, nseq, 8), 1);
    cr_assert_eq(num(a, "calls"), na);
    cr_assert_eq(num(a, "errors"), 1); /* the dead provider: 502 */
    cr_assert_eq(num(b, "calls"), 1);
    cr_assert_eq(num(b, "errors"), 0);
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(a, "tokens");
    cr_assert_eq(num(tk, "input"), 14); /* two answered calls, 7 in each */
    cr_assert_eq(num(tk, "output"), 6);
    cr_assert_eq(num(a, "first_seq"), aseq[0]);
    cr_assert_eq(num(a, "last_seq"), aseq[2]);
    cr_assert(num(a, "started_ts") <= num(a, "last_ts"));
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(a, "models");
    cr_assert_eq(cJSON_GetArraySize(models), 3);
    cr_assert_str_eq(cJSON_GetArrayItem(models, 0)->valuestring, "fake-model");
    /* the call without a header: the session of its UTC day */
    const cJSON *x;
    int days = 0;
    cJSON_ArrayForEach (x, runs)
        if (!strncmp(tu_str(x, "id"), "session:~", 9)) {
            days++;
            cr_assert_eq(num(x, "calls"), 1);
            cr_assert_eq(num(x, "last_seq"), nseq[0]);
        }
    cr_assert_eq(days, 1);
    /* newest first: the headerless call came last, then alpha's last */
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(runs, 0), "id") + 8,
                     tu_str(cJSON_GetArrayItem(runs, 0), "session"));
    cr_assert_eq(num(cJSON_GetArrayItem(runs, 0), "last_seq"), nseq[0]);
    cr_assert_eq(cJSON_GetArrayItem(runs, 1), a);
    cr_assert_eq(cJSON_GetArrayItem(runs, 2), b);
    cJSON_Delete(l);

    /* type and paging: only sessions; one a page, next walks them */
    l = tu_http_json(&d, "GET", "/runs?type=gateway_session&limit=1", NULL,
                     200);
    runs = cJSON_GetObjectItemCaseSensitive(l, "runs");
    cr_assert_eq(cJSON_GetArraySize(runs), 1);
    char path[128];
    snprintf(path, sizeof(path),
             "/runs?type=gateway_session&limit=1&before=%lld",
             num(l, "next") + 1);
    cJSON_Delete(l);
    l = tu_http_json(&d, "GET", path, NULL, 200);
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(
                                cJSON_GetObjectItemCaseSensitive(l, "runs"), 0),
                            "id"),
                     "session:alpha");
    cJSON_Delete(l);
    l = tu_http_json(&d, "GET", "/runs?type=run", NULL, 200);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(l, "runs")), 0);
    cJSON_Delete(l);

    check_show(&d, aseq, na);
    check_cli(dir);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    fake_stop(up);
    fake_free(up);
    tu_rmrf(dir);
}

/* On PostgreSQL: a ledger made before the gateway's index gets it on the
 * daemon's read-write open, and the sessions read the same. */
Test(gw_sessions, postgres_ledger_gets_the_index_and_lists_sessions,
     .timeout = 180)
{
    struct tu_pg pg;
    char why[2048], db[64], ci[512];
    int rc = tu_pg_start(&pg, why, sizeof(why));
    if (rc > 0)
        cr_skip_test("PostgreSQL not available: %s", why);
    cr_assert_eq(rc, 0, "PostgreSQL: %s", why);
    cr_assert_eq(tu_pg_createdb(&pg, db, sizeof(db), why, sizeof(why)), 0, "%s",
                 why);
    tu_pg_conninfo(&pg, db, ci, sizeof(ci));
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init",
                                "--postgres", ci, NULL);
    cr_assert_eq(r.status, 0, "init: %s", r.err);
    tu_run_free(&r);
    char has[16];
    const char *q = "SELECT to_regclass('forum.entries_gateway') IS NOT NULL";
    cr_assert_eq(tu_pg_query(&pg, db, q, has, sizeof(has)), 0);
    cr_assert_str_eq(has, "t");
    cr_assert_eq(tu_pg_exec(&pg, db, "DROP INDEX forum.entries_gateway", why,
                            sizeof(why)),
                 0, "%s", why);
    struct fake *up = fake_start(answer);
    struct tu_daemon d;
    start(&d, dir, up);
    cr_assert_eq(tu_pg_query(&pg, db, q, has, sizeof(has)), 0);
    cr_assert_str_eq(has, "t", "the index was not made again");
    cr_assert_eq(call(&d, "pg-task", "fake-model", "one"), 200);
    cr_assert_eq(call(&d, "pg-task", "dead-model", "two"), 502);
    cJSON *l = tu_http_json(&d, "GET", "/runs", NULL, 200);
    const cJSON *a = find_item(cJSON_GetObjectItemCaseSensitive(l, "runs"),
                               "session:pg-task");
    cr_assert(a);
    cr_assert_eq(num(a, "calls"), 2);
    cr_assert_eq(num(a, "errors"), 1);
    cJSON_Delete(l);
    cJSON *s = tu_http_json(&d, "GET", "/gateway/sessions/pg-task", NULL, 200);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "steps")), 2);
    cJSON_Delete(s);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    fake_stop(up);
    fake_free(up);
    tu_rmrf(dir);
    tu_pg_destroy(&pg);
}

/* On SQLite: a ledger made before the gateway's index gets it on its first
 * read-write open (a read-only one reads it as before, by a scan). */
static int sqlite_has_index(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/ledger.db", dir);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL),
                 SQLITE_OK);
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT count(*) FROM sqlite_master WHERE"
                                    " name = 'entries_gateway'",
                                    -1, &q, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    int n = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

Test(gw_sessions, older_sqlite_ledger_gets_the_index)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(sqlite_has_index(dir), 1);
    char p[1024];
    snprintf(p, sizeof(p), "%s/ledger.db", dir);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(p, &db), SQLITE_OK);
    cr_assert_eq(
        sqlite3_exec(db, "DROP INDEX entries_gateway", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    cr_assert_eq(sqlite_has_index(dir), 0);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor",
                  "gateway", "--kind", "gateway_call", "--payload",
                  "{\"model\":\"m\",\"status\":200,\"session\":\"old\"}", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(sqlite_has_index(dir), 1);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "run", "list", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"id\":\"session:old\""), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}
