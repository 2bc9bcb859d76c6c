/* test_runs: background runs. run_start answers at once with the request
 * entry's seq; run_get reads the run's state, entries and answer back from
 * the ledger alone. In process with the stub, with slow subprocess tasks
 * (the bound on runs at once, a clean stop), and against the real daemon:
 * POST /runs is quick, /health stays quick, GET /runs/{id} shows progress,
 * SIGTERM with a run in flight exits 0 and the run is witnessed stopped. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "daemon/orch_engine.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

/* every role answers at once, each task takes 2 s */
#define SLOW_CMD "sh " FORUM_SRC "/tests/fake_cli.sh slow"
/* every role at once, each task 4 s (room for slow starts) */
#define SLOWER_CMD "sh " FORUM_SRC "/tests/fake_cli.sh slower"

struct env {
    char *dir;
    struct ledger *l;
    struct orch *o;
    struct surf_ctx ctx;
};

/* max_runs: the engine's runs at once (0: its default) */
static void env_open_max(struct env *e, const char *cmd, int max_runs)
{
    struct fo_err err;
    e->dir = tu_tmpdir();
    cr_assert_eq(ledger_open(e->dir, LEDGER_OPEN_CREATE, NULL, &e->l, &err),
                 FO_OK, "%s", err.msg);
    struct orch_config oc = {.cmd = cmd, .max_runs = max_runs};
    cr_assert_eq(orch_create(&oc, &e->o, &err), FO_OK, "%s", err.msg);
    e->ctx = (struct surf_ctx){.ledger = e->l, .orch = e->o};
    tu_host(&e->ctx);
}

static void env_open(struct env *e, const char *cmd)
{
    env_open_max(e, cmd, 0);
}

static void env_close(struct env *e)
{
    tu_unhost(&e->ctx);
    orch_free(e->o);
    ledger_close(e->l);
    tu_rmrf(e->dir);
}

static cJSON *call(struct env *e, const char *method, const char *json,
                   int want)
{
    return tu_surf_call(&e->ctx, method, json, want);
}

static cJSON *get_run(struct env *e, int64_t run)
{
    char in[64];
    snprintf(in, sizeof(in), "{\"run\":%lld}", (long long)run);
    return call(e, "run_get", in, FO_OK);
}

static cJSON *wait_run(struct env *e, int64_t run, int ms)
{
    return tu_run_wait(&e->ctx, (long long)run, ms);
}

static void verify_deep(struct ledger *l)
{
    struct ledger_verify_result res;
    struct fo_err err;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(res.ok);
}

Test(runs, start_answers_at_once_and_get_reads_the_run_back)
{
    struct env e;
    env_open(&e, NULL);
    const char *req = "{\"request\":\"echo this back\"}";
    cJSON *s = call(&e, "run_start", req, FO_OK);
    cr_assert_str_eq(tu_str(s, "state"), "running");
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    struct ledger_entry en;
    struct fo_err err;
    cr_assert_eq(ledger_get(e.l, run, &en, NULL, &err), FO_OK);
    cr_assert_str_eq(en.kind, "request");
    cJSON *g = wait_run(&e, run, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cr_assert_str_eq(tu_str(g, "via"), "run_start");
    cr_assert_str_eq(tu_str(g, "request"), "echo this back");
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict answer ");
    cr_assert_eq(tu_num(g, "count"), 7);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(g, "truncated")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(g, "error")));
    /* every entry of the run descends from the request, in seq order */
    const cJSON *v;
    int64_t prev = -1;
    cJSON_ArrayForEach (v, cJSON_GetObjectItemCaseSensitive(g, "entries")) {
        cr_assert_gt(tu_num(v, "seq"), prev);
        prev = tu_num(v, "seq");
        if (prev != run)
            cr_assert_geq(tu_num(v, "parent"), run);
    }
    cr_assert_eq(tu_num(g, "answer_seq"), prev);
    /* the same answer as a blocking submit of the same request */
    cJSON *sub = call(&e, "submit", req, FO_OK);
    cr_assert_str_eq(tu_str(g, "answer"), tu_str(sub, "answer"));
    /* and run_get reads a submit's run too */
    cJSON *g2 = get_run(&e, tu_num(sub, "request_seq"));
    cr_assert_str_eq(tu_str(g2, "state"), "done");
    cr_assert_str_eq(tu_str(g2, "via"), "submit");
    cr_assert_str_eq(tu_str(g2, "answer"), tu_str(sub, "answer"));
    char k2[256];
    tu_entry_kinds(g2, k2, sizeof(k2));
    cr_assert_str_eq(k2, k);
    cJSON_Delete(g2);
    cJSON_Delete(sub);
    cJSON_Delete(g);
    verify_deep(e.l);
    env_close(&e);
}

Test(runs, get_refuses_what_is_not_a_run)
{
    struct env e;
    env_open(&e, NULL);
    cJSON_Delete(call(&e, "run_get", "{\"run\":0}", FO_E_NOT_FOUND));
    cJSON *s = call(&e, "run_start", "{\"request\":\"echo it\"}", FO_OK);
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    cJSON_Delete(wait_run(&e, run, 10000));
    char in[64];
    snprintf(in, sizeof(in), "{\"run\":%lld}", (long long)run + 1); /* route */
    cJSON_Delete(call(&e, "run_get", in, FO_E_NOT_A_RUN));
    cJSON_Delete(call(&e, "run_get", "{\"run\":999999}", FO_E_NOT_FOUND));
    cJSON_Delete(call(&e, "run_get", "{\"run\":-1}", FO_E_INVALID));
    /* plan writes `request` entries too, and so may a client: neither is
     * a run (they have no end to wait for); plan_run is a run of the
     * engine like submit, with an answer at its end */
    cJSON *p =
        call(&e, "plan", "{\"request\":\"build the api server\"}", FO_OK);
    cJSON *pr = call(&e, "plan_run",
                     "{\"plan\":{\"tasks\":[{\"id\":\"T1\",\"agent\":"
                     "\"backend\",\"instruction\":\"schema\"}]}}",
                     FO_OK);
    cJSON *a = call(&e, "ledger_append",
                    "{\"actor\":\"c\",\"kind\":\"request\",\"payload\":"
                    "{\"text\":\"hi\"}}",
                    FO_OK);
    int64_t seqs[] = {tu_num(p, "request_seq"), tu_num(a, "seq")};
    snprintf(in, sizeof(in), "{\"run\":%lld}",
             (long long)tu_num(pr, "request_seq"));
    cJSON *prg = call(&e, "run_get", in, FO_OK);
    cr_assert_str_eq(tu_str(prg, "state"), "done");
    cr_assert_str_eq(tu_str(prg, "via"), "plan_run");
    cJSON_Delete(prg);
    for (int i = 0; i < 2; i++) {
        struct ledger_entry en;
        struct fo_err err;
        cr_assert_eq(ledger_get(e.l, seqs[i], &en, NULL, &err), FO_OK);
        cr_assert_str_eq(en.kind, "request");
        snprintf(in, sizeof(in), "{\"run\":%lld}", (long long)seqs[i]);
        cJSON_Delete(call(&e, "run_get", in, FO_E_NOT_A_RUN));
        cJSON_Delete(call(&e, "run_cancel", in, FO_E_NOT_A_RUN));
        cJSON *none = NULL;
        cr_assert_eq(orch_run_get(e.l, seqs[i], &none, &err), FO_E_NOT_A_RUN);
        cr_assert_null(none);
        cr_assert(strstr(err.msg, "not a run"), "%s", err.msg);
    }
    cJSON_Delete(call(&e, "run_cancel", "{\"run\":999999}", FO_E_NOT_FOUND));
    cJSON_Delete(a);
    cJSON_Delete(pr);
    cJSON_Delete(p);
    env_close(&e);
}

Test(runs, bad_input_writes_nothing)
{
    struct env e;
    env_open(&e, NULL);
    cJSON_Delete(call(&e, "run_start", "{\"request\":\"\"}", FO_E_INVALID));
    cJSON_Delete(call(&e, "run_start",
                      "{\"request\":\"x\",\"max_model_calls\":0}",
                      FO_E_INVALID));
    /* the engine's own checks, below the table's schema */
    struct orch_witness w = {.ledger = e.l};
    struct orch_run_req req = {
        .via = "run_start", .request = "x", .opts = {.max_seconds = -1}};
    struct fo_err err;
    cJSON *out = NULL;
    cr_assert_eq(tu_engine_run(e.o, &w, &req, &out, &err), FO_E_INVALID);
    req = (struct orch_run_req){.via = "run_start", .request = ""};
    cr_assert_eq(tu_engine_run(e.o, &w, &req, &out, &err), FO_E_INVALID);
    cr_assert_null(out);
    int64_t n = -1;
    cr_assert_eq(ledger_count(e.l, &n, &err), FO_OK);
    cr_assert_eq(n, 0);
    env_close(&e);
}

Test(runs, a_spent_budget_reads_as_budget)
{
    struct env e;
    env_open(&e, NULL);
    cJSON *s = call(&e, "run_start",
                    "{\"request\":\"echo it\",\"max_model_calls\":1}", FO_OK);
    cJSON *g = wait_run(&e, tu_num(s, "run"), 10000);
    cr_assert_str_eq(tu_str(g, "state"), "budget");
    cr_assert_str_eq(tu_str(g, "answer"), ORCH_BUDGET_ANSWER);
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k,
                     "request route plan task result verdict budget answer ");
    cJSON_Delete(g);
    cJSON_Delete(s);
    env_close(&e);
}

Test(runs, a_run_whose_model_is_unreachable_reads_as_failed)
{
    struct env e;
    e.dir = tu_tmpdir();
    struct fo_err err;
    cr_assert_eq(ledger_open(e.dir, LEDGER_OPEN_CREATE, NULL, &e.l, &err),
                 FO_OK, "%s", err.msg);
    /* a chat provider on a port nobody listens on: refused at once */
    struct orch_model_provider p = {.api = ORCH_EXEC_CHAT,
                                    .url = "http://127.0.0.1:1/v1",
                                    .model = "m",
                                    .tier = ORCH_TIER_ANY};
    struct orch_model_config mc = {
        .providers = &p, .n_providers = 1, .attempts = 1, .backoff_ms = 1};
    struct orch_config oc = {.models = &mc};
    cr_assert_eq(orch_create(&oc, &e.o, &err), FO_OK, "%s", err.msg);
    e.ctx = (struct surf_ctx){.ledger = e.l, .orch = e.o};
    tu_host(&e.ctx);
    cJSON *s = call(&e, "run_start", "{\"request\":\"echo it\"}", FO_OK);
    cJSON *g = wait_run(&e, tu_num(s, "run"), 20000);
    cr_assert_str_eq(tu_str(g, "state"), "failed");
    const cJSON *er = cJSON_GetObjectItemCaseSensitive(g, "error");
    cr_assert_str_eq(tu_str(er, "code"), fo_code_name(FO_E_UNAVAILABLE), "%s",
                     tu_str(er, "error"));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(g, "answer")));
    cJSON_Delete(g);
    cJSON_Delete(s);
    env_close(&e);
}

#define RUNS_AT_ONCE 8

Test(runs, at_most_max_runs_at_once_and_a_stop_is_witnessed, .timeout = 60)
{
    struct env e;
    env_open_max(&e, SLOWER_CMD, RUNS_AT_ONCE);
    int64_t runs[RUNS_AT_ONCE];
    int64_t t0 = tu_now_ms();
    for (int i = 0; i < RUNS_AT_ONCE; i++) {
        cJSON *s =
            call(&e, "run_start",
                 "{\"request\":\"build the api database server\"}", FO_OK);
        runs[i] = tu_num(s, "run");
        cJSON_Delete(s);
    }
    /* run_start did not wait for its run: all eight are still in the
     * engine (their tasks take 4 s each), and a ninth is refused */
    cJSON_Delete(
        call(&e, "run_start", "{\"request\":\"one too many\"}", FO_E_BUSY));
    /* progress: every run gets to its task (request route plan task) */
    cJSON *g = NULL;
    for (int i = 0; i < RUNS_AT_ONCE; i++) {
        for (;;) {
            g = get_run(&e, runs[i]);
            cr_assert_str_eq(tu_str(g, "state"), "running");
            int64_t c = tu_num(g, "count");
            cJSON_Delete(g);
            if (c == 4)
                break;
            cr_assert_lt(tu_now_ms() - t0, 60000, "run %d has no task yet",
                         i); /* a liveness deadline, not a speed */
            usleep(5000);
        }
    }
    /* the host stops as a daemon does at SIGTERM: each run writes its
     * stop; it ran in this process only (not resumable), so once the
     * process's lock goes it reads as interrupted, never resumed */
    tu_unhost(&e.ctx);
    orch_free(e.o);
    e.o = NULL;
    e.ctx.orch = NULL;
    for (int i = 0; i < RUNS_AT_ONCE; i++) {
        g = get_run(&e, runs[i]);
        cr_assert_str_eq(tu_str(g, "state"), "interrupted", "run %d", i);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(g, "answer")));
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(g, "entries");
        int stops = 0;
        const cJSON *v;
        cJSON_ArrayForEach (v, en)
            stops += !strcmp(tu_str(v, "kind"), "stop");
        cr_assert_eq(stops, 1, "run %d: %d stop entries", i, stops);
        cr_assert_str_eq(
            tu_str(cJSON_GetArrayItem(en, cJSON_GetArraySize(en) - 1), "kind"),
            "stop", "run %d", i);
        cJSON_Delete(g);
    }
    verify_deep(e.l);
    env_close(&e);
}

/* ---- against the real daemon --------------------------------------------- */

/* run_get over MCP (`forum mcp`, another process on the same ledger). */
static cJSON *mcp_run_get(const char *dir, int64_t run)
{
    char in[1024];
    snprintf(in, sizeof(in),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"run_get\",\"arguments\":{\"run\":%lld}}}"
             "\n",
             (long long)run);
    struct tu_run r =
        tu_forumv(in, "--ledger", dir, "mcp", "--init", (char *)NULL);
    cr_assert_eq(r.status, 0, "forum mcp: %s", r.err);
    cJSON *reply = tu_json_parse(r.out);
    cJSON *res = cJSON_GetObjectItemCaseSensitive(reply, "result");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(res, "isError")),
              "%s", r.out);
    cJSON *sc =
        cJSON_DetachItemFromObjectCaseSensitive(res, "structuredContent");
    cJSON_Delete(reply);
    tu_run_free(&r);
    return sc;
}

Test(runs, daemon_stays_responsive_and_get_shows_progress, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--cmd", SLOW_CMD, NULL);
    int64_t t0 = tu_now_ms();
    cJSON *s =
        tu_http_json(&d, "POST", "/runs",
                     "{\"request\":\"build the api database server\"}", 200);
    /* answered before the run ended: it is still running */
    cr_assert_str_eq(tu_str(s, "state"), "running");
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", (long long)run);
    int64_t first = -1, last = -1;
    int polls = 0;
    cJSON *g = NULL;
    for (;;) {
        cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, NULL), 200);
        g = tu_http_json(&d, "GET", path, NULL, 200);
        polls++;
        int64_t c = tu_num(g, "count");
        if (first < 0)
            first = c;
        cr_assert_geq(c, last, "entries went back");
        last = c;
        if (strcmp(tu_str(g, "state"), "running") != 0)
            break;
        cJSON_Delete(g);
        cr_assert_lt(tu_now_ms() - t0, 20000, "the run did not end");
        usleep(100000);
    }
    cr_assert_str_eq(tu_str(g, "state"), "done", "%s", cJSON_Print(g));
    cr_assert(strstr(tu_str(g, "answer"), "done"), "%s", tu_str(g, "answer"));
    cr_assert_geq(tu_now_ms() - t0, 2000, "the task did not take its 2 s");
    /* /health was answered each time while the run went on */
    cr_assert_gt(polls, 5);
    cr_assert_lt(first, last, "GET /runs showed no progress");
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict answer ");
    /* the same object over MCP, from another process */
    cJSON *m = mcp_run_get(dir, run);
    cr_assert(cJSON_Compare(g, m, 1), "MCP differs");
    cJSON_Delete(m);
    cJSON_Delete(g);
    /* an unknown run is a 404 */
    cJSON_Delete(tu_http_json(&d, "GET", "/runs/999999", NULL, 404));
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(runs, sigterm_with_a_run_in_flight_stops_it_and_it_resumes, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--cmd", SLOW_CMD, NULL);
    cJSON *s =
        tu_http_json(&d, "POST", "/runs",
                     "{\"request\":\"build the api database server\"}", 200);
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", (long long)run);
    for (;;) { /* until its task is running: request route plan task */
        cJSON *g = tu_http_json(&d, "GET", path, NULL, 200);
        int64_t c = tu_num(g, "count");
        cJSON_Delete(g);
        if (c == 4)
            break;
        cr_assert_lt(c, 4, "the task ended before the test saw it");
        usleep(20000);
    }
    /* the task in flight finishes within the shutdown's grace and its
     * result is witnessed; the run stops before its next step */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    cJSON *g = NULL;
    cr_assert_eq(orch_run_get(l, run, &g, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(g, "state"), "stopped");
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result stop ");
    cJSON_Delete(g);
    verify_deep(l);
    ledger_close(l);
    /* the next daemon resumes it from its verdict: nothing witnessed is
     * done again, and the run ends */
    tu_daemon_start(&d, dir, "--cmd", SLOW_CMD, NULL);
    for (;;) {
        g = tu_http_json(&d, "GET", path, NULL, 200);
        if (strcmp(tu_str(g, "state"), "running") != 0)
            break;
        cJSON_Delete(g);
        usleep(50000);
    }
    cr_assert_str_eq(tu_str(g, "state"), "done", "%s", cJSON_Print(g));
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result stop resume verdict "
                        "answer ");
    cJSON_Delete(g);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}
