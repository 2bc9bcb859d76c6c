/* test_runs_live: what a run's state says about the process that runs it,
 * cancelling a run, and the cap on runs at once. Each process that starts
 * runs holds a lock file (DIR/runs/<instance>.lock) named in the run's
 * request: a daemon SIGKILLed mid-run leaves its run "interrupted", a
 * request without an instance reads "unknown". run_cancel stops a run of
 * this process at its next step, witnessed; --max-runs caps POST /runs. A
 * scripted fake model holds the coordinator's reply until the test lets it
 * go, so every step happens where the test says.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

#define REQ "build the api database server"
#define A_DEAD_INSTANCE "0123456789abcdef0123456789abcdef"

/* ---- in process --------------------------------------------------------- */

struct env {
    char *dir;
    struct ledger *l;
    struct orch *o;
    struct surf_ctx ctx;
    struct fake *f;
    char url[64];
    struct orch_model_provider p;
    struct orch_model_config mc;
};

/* A ledger and an orchestrator; with_model: every role on the fake. */
static void env_open(struct env *e, int with_model, int max_runs)
{
    struct fo_err err;
    memset(e, 0, sizeof(*e));
    e->dir = tu_tmpdir();
    cr_assert_eq(ledger_open(e->dir, LEDGER_OPEN_CREATE, NULL, &e->l, &err),
                 FO_OK, "%s", err.msg);
    struct orch_config oc = {.max_runs = max_runs};
    if (with_model) {
        e->f = fake_start(tu_held_script);
        snprintf(e->url, sizeof(e->url), "http://127.0.0.1:%d", e->f->port);
        e->p = (struct orch_model_provider){.api = ORCH_EXEC_CHAT,
                                            .url = e->url,
                                            .model = "fake",
                                            .tier = ORCH_TIER_ANY};
        e->mc = (struct orch_model_config){.providers = &e->p,
                                           .n_providers = 1,
                                           .attempts = 1,
                                           .timeout_ms = 60000};
        oc.models = &e->mc;
    }
    cr_assert_eq(orch_create(&oc, &e->o, &err), FO_OK, "%s", err.msg);
    e->ctx = (struct surf_ctx){.ledger = e->l, .orch = e->o};
    tu_host(&e->ctx);
}

static void env_close(struct env *e)
{
    atomic_store(&tu_held_hold, 0);
    tu_unhost(&e->ctx);
    orch_free(e->o);
    ledger_close(e->l);
    if (e->f) {
        fake_stop(e->f);
        fake_free(e->f);
    }
    tu_rmrf(e->dir);
}

static cJSON *call(struct env *e, const char *method, const char *json,
                   int want)
{
    return tu_surf_call(&e->ctx, method, json, want);
}

static cJSON *call_run(struct env *e, const char *method, int64_t run, int want)
{
    char in[64];
    snprintf(in, sizeof(in), "{\"run\":%lld}", (long long)run);
    return call(e, method, in, want);
}

static cJSON *wait_run(struct env *e, int64_t run, int ms)
{
    return tu_run_wait(&e->ctx, (long long)run, ms);
}

/* The first entry of a run_get result of kind. */
static const cJSON *entry_of(const cJSON *g, const char *kind)
{
    const cJSON *v;
    cJSON_ArrayForEach (v, cJSON_GetObjectItemCaseSensitive(g, "entries"))
        if (!strcmp(tu_str(v, "kind"), kind))
            return v;
    cr_assert_fail("no %s entry", kind);
    return NULL;
}

static cJSON *body_json(struct ledger *l, int64_t seq)
{
    char *b = NULL;
    size_t n = 0;
    struct fo_err err;
    cr_assert_eq(ledger_body(l, seq, &b, &n, &err), FO_OK, "%s", err.msg);
    cJSON *j = NULL;
    cr_assert_eq(fo_json_parse(b, n, &j, &err), FO_OK, "%s", err.msg);
    free(b);
    return j;
}

static void verify_deep(struct ledger *l)
{
    struct ledger_verify_result res;
    struct fo_err err;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(res.ok);
}

/* A run cancelled in its coordinator call: request route, then at once
 * (the call is abandoned) the budget entry (reason cancelled, parent the
 * request) and the fixed answer; nothing else. */
static void assert_cancelled(struct ledger *l, const cJSON *g)
{
    cr_assert_str_eq(tu_str(g, "state"), "cancelled");
    cr_assert_str_eq(tu_str(g, "answer"), ORCH_CANCELLED_ANSWER);
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route budget answer ");
    const cJSON *req = entry_of(g, "request");
    const cJSON *bud = entry_of(g, "budget");
    cr_assert_eq(tu_num(bud, "parent"), tu_num(req, "seq"));
    cr_assert_str_eq(tu_str(bud, "actor"), "loop");
    cr_assert_eq(tu_num(entry_of(g, "answer"), "parent"), tu_num(req, "seq"));
    cJSON *b = body_json(l, tu_num(bud, "seq"));
    cr_assert_str_eq(tu_str(b, "reason"), "cancelled");
    cr_assert_str_eq(tu_str(b, "stopped_before"), "coordinator");
    cJSON_Delete(b);
}

static int file_exists(const char *dir, const char *inst)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/runs/%s.lock", dir, inst);
    struct stat st;
    return stat(p, &st) == 0;
}

struct submit_job {
    struct env *e;
    cJSON *out;
    int rc;
    struct fo_err err;
};

/* A submit that waits for its run, on a thread of its own: parked on the
 * same engine as the env's other calls. */
static void *submit_thread(void *arg)
{
    struct submit_job *j = arg;
    cJSON *in = cJSON_Parse("{\"request\":\"" REQ "\"}");
    j->rc = surf_call(&j->e->ctx, surf_find("submit"), in, &j->out, &j->err);
    cJSON_Delete(in);
    return NULL;
}

Test(runs_live, cancel_stops_a_run_of_this_process_at_its_next_step,
     .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN); /* the fake answers a call that was abandoned */
    struct env e;
    env_open(&e, 1, 0);
    /* a background run, held in its coordinator call */
    cJSON *s = call(&e, "run_start", "{\"request\":\"" REQ "\"}", FO_OK);
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    tu_held_wait_coord(1);
    cJSON *g = call_run(&e, "run_get", run, FO_OK);
    cr_assert_str_eq(tu_str(g, "state"), "running");
    cr_assert(file_exists(e.dir, tu_str(g, "instance")));
    cJSON_Delete(g);
    cJSON *c = call_run(&e, "run_cancel", run, FO_OK);
    cr_assert_eq(tu_num(c, "run"), run);
    cr_assert_str_eq(tu_str(c, "state"), "running");
    cr_assert_str_eq(tu_str(c, "cancel"), "requested");
    cJSON_Delete(c);
    /* the call in flight is abandoned: the run ends while it is held */
    g = wait_run(&e, run, 10000);
    atomic_store(&tu_held_hold, 0);
    while (atomic_load(&tu_held_coord_done) < 1) /* the fake lets it go */
        usleep(2000);
    assert_cancelled(e.l, g);
    cJSON_Delete(g);
    /* a run that ended: its state, unchanged */
    c = call_run(&e, "run_cancel", run, FO_OK);
    cr_assert_str_eq(tu_str(c, "state"), "cancelled");
    cr_assert_str_eq(tu_str(c, "cancel"), "ended");
    cJSON_Delete(c);

    /* a blocking submit is a run too, cancelled the same way */
    atomic_store(&tu_held_hold, 1);
    int64_t first = -1;
    struct fo_err err;
    cr_assert_eq(ledger_count(e.l, &first, &err), FO_OK);
    struct submit_job j = {.e = &e};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, submit_thread, &j), 0);
    tu_held_wait_coord(2);
    g = call_run(&e, "run_get", first, FO_OK);
    cr_assert_str_eq(tu_str(g, "via"), "submit");
    cr_assert_str_eq(tu_str(g, "state"), "running");
    cJSON_Delete(g);
    c = call_run(&e, "run_cancel", first, FO_OK);
    cr_assert_str_eq(tu_str(c, "cancel"), "requested");
    cJSON_Delete(c);
    pthread_join(th, NULL);
    atomic_store(&tu_held_hold, 0);
    cr_assert_eq(j.rc, FO_OK, "%s", j.err.msg);
    cr_assert_str_eq(tu_str(j.out, "answer"), ORCH_CANCELLED_ANSWER);
    cr_assert_str_eq(tu_str(j.out, "budget_reason"), "cancelled");
    cr_assert(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j.out, "budget_spent")));
    cJSON_Delete(j.out);
    g = call_run(&e, "run_get", first, FO_OK);
    assert_cancelled(e.l, g);
    cJSON_Delete(g);
    verify_deep(e.l);
    env_close(&e);
}

/* Appends a `request` entry with payload json; its seq. */
static int64_t append_request(struct env *e, const char *payload)
{
    char in[512];
    snprintf(in, sizeof(in),
             "{\"actor\":\"client\",\"kind\":\"request\",\"payload\":%s}",
             payload);
    cJSON *a = call(e, "ledger_append", in, FO_OK);
    int64_t seq = tu_num(a, "seq");
    cJSON_Delete(a);
    return seq;
}

static void assert_state(struct env *e, int64_t run, const char *want)
{
    cJSON *g = call_run(e, "run_get", run, FO_OK);
    cr_assert_str_eq(tu_str(g, "state"), want, "run %lld", (long long)run);
    cJSON_Delete(g);
}

Test(runs_live, the_lock_file_of_a_run_tells_running_from_interrupted)
{
    struct env e;
    env_open(&e, 0, 0);
    /* no instance (a ledger from before instances): unknown */
    int64_t old =
        append_request(&e, "{\"request\":\"x\",\"via\":\"run_start\"}");
    cJSON *g = call_run(&e, "run_get", old, FO_OK);
    cr_assert_str_eq(tu_str(g, "state"), "unknown");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(g, "instance")));
    cJSON_Delete(g);
    cJSON_Delete(call_run(&e, "run_cancel", old, FO_E_RUN_ELSEWHERE));
    /* an instance that is not one (no path is built from it): unknown */
    int64_t bad = append_request(
        &e, "{\"request\":\"x\",\"via\":\"submit\",\"instance\":\"../x\"}");
    assert_state(&e, bad, "unknown");
    /* an instance with no lock file: its process is gone; a daemon's run
     * waits to be resumed (stopped: cancel it where it resumes), a run
     * nothing resumes (a CLI's) is interrupted */
    int64_t stopped = append_request(
        &e,
        "{\"request\":\"x\",\"via\":\"submit\",\"instance\":\"" A_DEAD_INSTANCE
        "\"}");
    assert_state(&e, stopped, "stopped");
    cJSON_Delete(call_run(&e, "run_cancel", stopped, FO_E_RUN_ELSEWHERE));
    int64_t dead = append_request(&e, "{\"request\":\"x\",\"via\":\"submit\","
                                      "\"instance\":\"" A_DEAD_INSTANCE "\","
                                      "\"resumable\":false}");
    assert_state(&e, dead, "interrupted");
    cJSON *c = call_run(&e, "run_cancel", dead, FO_OK);
    cr_assert_str_eq(tu_str(c, "state"), "interrupted");
    cr_assert_str_eq(tu_str(c, "cancel"), "ended");
    cJSON_Delete(c);
    /* its lock file, held: running (as another process would hold it),
     * and not cancellable here */
    char path[1024];
    snprintf(path, sizeof(path), "%s/runs", e.dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/runs/%s.lock", e.dir, A_DEAD_INSTANCE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    assert_state(&e, dead, "running");
    struct fo_err err;
    cJSON *none = NULL;
    cr_assert_eq(orch_run_cancel(e.o, e.l, dead, &none, &err),
                 FO_E_RUN_ELSEWHERE);
    cr_assert(strstr(err.msg, "another process"), "%s", err.msg);
    /* let go: the file stays (a process killed leaves it), nobody holds it */
    close(fd);
    assert_state(&e, dead, "interrupted");
    cr_assert(file_exists(e.dir, A_DEAD_INSTANCE));
    /* this process's first run takes its own lock and clears stale ones */
    cJSON *s = call(&e, "run_start", "{\"request\":\"echo it\"}", FO_OK);
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    g = wait_run(&e, run, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    char inst[64];
    snprintf(inst, sizeof(inst), "%s", tu_str(g, "instance"));
    cJSON_Delete(g);
    cr_assert_eq(strlen(inst), ORCH_INSTANCE_HEX);
    cr_assert(file_exists(e.dir, inst));
    cr_assert(!file_exists(e.dir, A_DEAD_INSTANCE), "stale lock file left");
    assert_state(&e, dead, "interrupted");
    /* the orchestrator goes (its engine first): its lock file goes, its
     * run stays done */
    tu_unhost(&e.ctx);
    orch_free(e.o);
    e.o = NULL;
    e.ctx.orch = NULL;
    cr_assert(!file_exists(e.dir, inst));
    assert_state(&e, run, "done");
    verify_deep(e.l);
    env_close(&e);
}

Test(runs_live, max_runs_is_checked_and_bounds_runs_at_once, .timeout = 60)
{
    struct fo_err err;
    struct orch *o = NULL;
    struct orch_config bad = {.max_runs = ORCH_RUNS_MAX + 1};
    cr_assert_eq(orch_create(&bad, &o, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "max_runs"), "%s", err.msg);
    bad.max_runs = -1;
    cr_assert_eq(orch_create(&bad, &o, &err), FO_E_INVALID);
    struct env e;
    env_open(&e, 1, 1);
    cJSON *s = call(&e, "run_start", "{\"request\":\"" REQ "\"}", FO_OK);
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    tu_held_wait_coord(1);
    cJSON_Delete(
        call(&e, "run_start", "{\"request\":\"one more\"}", FO_E_BUSY));
    atomic_store(&tu_held_hold, 0);
    cJSON *g = wait_run(&e, run, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    /* its thread may still be on its way out: busy until it is */
    int64_t t0 = tu_now_ms();
    struct fo_err e2;
    cJSON *in = cJSON_Parse("{\"request\":\"" REQ "\"}");
    cJSON *out = NULL;
    int rc;
    while ((rc = surf_call(&e.ctx, surf_find("run_start"), in, &out, &e2)) ==
           FO_E_BUSY) {
        cr_assert_lt(tu_now_ms() - t0, 5000, "still busy");
        usleep(2000);
    }
    cr_assert_eq(rc, FO_OK, "%s", e2.msg);
    cJSON_Delete(in);
    g = wait_run(&e, tu_num(out, "run"), 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- against the real daemon --------------------------------------------- */

static cJSON *http_run(const struct tu_daemon *d, const char *method,
                       int64_t run, const char *tail, int want)
{
    char path[128];
    snprintf(path, sizeof(path), "/runs/%lld%s", (long long)run, tail);
    return tu_http_json(d, method, path, NULL, want);
}

static cJSON *http_wait_run(const struct tu_daemon *d, int64_t run, int ms)
{
    int64_t t0 = tu_now_ms();
    for (;;) {
        cJSON *g = http_run(d, "GET", run, "", 200);
        if (strcmp(tu_str(g, "state"), "running") != 0)
            return g;
        cJSON_Delete(g);
        cr_assert_lt(tu_now_ms() - t0, ms, "run %lld still running",
                     (long long)run);
        usleep(10000);
    }
}

static int64_t http_start(const struct tu_daemon *d)
{
    cJSON *s =
        tu_http_json(d, "POST", "/runs", "{\"request\":\"" REQ "\"}", 200);
    cr_assert_str_eq(tu_str(s, "state"), "running");
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    return run;
}

/* A tool over MCP from another process (`forum mcp` on the same ledger):
 * its structuredContent, the error object when *is_error. */
static cJSON *mcp_tool(const char *dir, const char *tool, int64_t run,
                       int *is_error)
{
    char in[512];
    snprintf(in, sizeof(in),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"%s\",\"arguments\":{\"run\":%lld}}}\n",
             tool, (long long)run);
    struct tu_run r = tu_forumv(in, "--ledger", dir, "mcp", "--init", "--local",
                                (char *)NULL);
    cr_assert_eq(r.status, 0, "forum mcp: %s", r.err);
    cJSON *reply = tu_json_parse(r.out);
    cJSON *res = cJSON_GetObjectItemCaseSensitive(reply, "result");
    *is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "isError"));
    cJSON *sc =
        cJSON_DetachItemFromObjectCaseSensitive(res, "structuredContent");
    cr_assert(cJSON_IsObject(sc), "%s", r.out);
    cJSON_Delete(reply);
    tu_run_free(&r);
    return sc;
}

static void start_with_fake(struct tu_daemon *d, const char *dir,
                            const struct fake *f, const char *extra,
                            const char *extra_val)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    tu_daemon_start(d, dir, "--chat-url", url, "--model", "fake", extra,
                    extra_val, NULL);
}

static void cli_verify_deep(const char *dir)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
}

Test(runs_live, a_run_whose_daemon_was_killed_resumes_on_the_next_start,
     .timeout = 90)
{
    signal(SIGPIPE, SIG_IGN); /* the fake answers a daemon that is gone */
    atomic_store(&tu_held_coord_calls, 0);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start_with_fake(&d, dir, f, NULL, NULL);
    /* a run that finishes */
    atomic_store(&tu_held_hold, 0);
    int64_t done = http_start(&d);
    cJSON *g = http_wait_run(&d, done, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cr_assert_str_eq(tu_str(g, "answer"), "The schema is made.");
    cJSON_Delete(g);
    /* a run held in its coordinator call: running, here and from another
     * process, which cannot cancel it */
    atomic_store(&tu_held_hold, 1);
    int64_t live = http_start(&d);
    tu_held_wait_coord(2);
    g = http_run(&d, "GET", live, "", 200);
    cr_assert_str_eq(tu_str(g, "state"), "running");
    char inst[64];
    snprintf(inst, sizeof(inst), "%s", tu_str(g, "instance"));
    cJSON_Delete(g);
    cr_assert(file_exists(dir, inst));
    int is_error = 0;
    g = mcp_tool(dir, "run_get", live, &is_error);
    cr_assert(!is_error);
    cr_assert_str_eq(tu_str(g, "state"), "running");
    cJSON_Delete(g);
    g = mcp_tool(dir, "run_cancel", live, &is_error);
    cr_assert(is_error);
    cr_assert_str_eq(tu_str(g, "code"), "run_elsewhere", "%s",
                     tu_str(g, "error"));
    cJSON_Delete(g);
    /* the daemon dies mid-run: the run waits for the next daemon */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGKILL, 10000), 128 + SIGKILL);
    atomic_store(&tu_held_hold, 0);
    cr_assert(file_exists(dir, inst), "a killed daemon removed its lock");
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(orch_run_get(l, live, &g, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(g, "state"), "stopped");
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route ");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(g, "answer")));
    cJSON_Delete(g);
    cr_assert_eq(orch_run_get(l, done, &g, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    ledger_close(l);
    /* a new daemon resumes it from its route: only the coordinator call
     * that was in flight is made again; the run it did not finish ends
     * done under the new daemon's instance, whose start cleared the dead
     * lock file; the finished run is left alone */
    start_with_fake(&d, dir, f, NULL, NULL);
    g = http_wait_run(&d, live, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done", "%s", cJSON_Print(g));
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route resume plan task result verdict "
                        "answer ");
    char inst2[64];
    snprintf(inst2, sizeof(inst2), "%s", tu_str(g, "instance"));
    cJSON_Delete(g);
    cr_assert_str_neq(inst2, inst);
    cr_assert(!file_exists(dir, inst), "the dead lock file stayed");
    cr_assert(file_exists(dir, inst2));
    /* three coordinator calls: two witnessed plans and the one in flight
     * at the kill */
    cr_assert_eq(atomic_load(&tu_held_coord_calls), 3);
    g = http_run(&d, "GET", done, "", 200);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    /* a clean exit takes its lock file with it */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert(!file_exists(dir, inst2));
    cli_verify_deep(dir);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* A run held in its coordinator call on a daemon SIGKILLed (the fake
 * then answers again), and the next daemon started with its resume held
 * (FORUM_TEST_RESUME_HOLD: test builds), serving but not yet ready. The
 * run's id. */
static int64_t killed_then_resume_held(struct tu_daemon *d, const char *dir,
                                       struct fake *f, const struct tu_hold *h)
{
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&tu_held_coord_calls, 0);
    start_with_fake(d, dir, f, NULL, NULL);
    atomic_store(&tu_held_hold, 1);
    int64_t live = http_start(d);
    tu_held_wait_coord(1);
    cr_assert_eq(tu_daemon_signal_wait(d, SIGKILL, 10000), 128 + SIGKILL);
    atomic_store(&tu_held_hold, 0);
    tu_hold_set(h);
    setenv("FORUM_TEST_RESUME_HOLD", h->path, 1);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    tu_daemon_start_early(d, dir, "--chat-url", url, "--model", "fake", NULL);
    unsetenv("FORUM_TEST_RESUME_HOLD");
    tu_hold_wait(h, 30000, "the resume never began");
    return live;
}

/* Resume is folded off the loop (test builds: the resume job holds while
 * the file FORUM_TEST_RESUME_HOLD names exists, and makes PATH.held):
 * while a killed daemon's run waits to be resumed, the new daemon answers
 * /health and runs another run to its end; it says "listening on" only
 * once the run it resumed has its resume entry, then that run ends done.
 * With the fold on the loop, /health would be answered only after the
 * hold gave up (PATH.expired). */
Test(runs_live, a_slow_resume_does_not_hold_the_loop, .timeout = 120)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_hold h;
    tu_hold_init(&h);
    struct tu_daemon d;
    int64_t live = killed_then_resume_held(&d, dir, f, &h);
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 1, &b), 200);
    free(b);
    cr_assert(!tu_hold_expired(&h),
              "/health was answered only after the resume gave up: the "
              "loop thread waited for it");
    int64_t other = http_start(&d);
    cJSON *g = http_wait_run(&d, other, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cr_assert(!tu_hold_expired(&h), "the other run waited for the resume");
    cr_assert_eq(tu_daemon_ready(&d, 0), 0,
                 "ready before its runs were resumed");
    /* not resumed yet: the ledger says its daemon stopped */
    g = http_run(&d, "GET", live, "", 200);
    cr_assert_str_eq(tu_str(g, "state"), "stopped");
    cJSON_Delete(g);
    tu_hold_release(&h);
    cr_assert_eq(tu_daemon_ready(&d, 30000), 1, "never ready");
    /* ready: its resume entry is on record */
    g = http_run(&d, "GET", live, "", 200);
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert(!strncmp(k, "request route resume ", 21), "%s", k);
    cJSON_Delete(g);
    g = http_wait_run(&d, live, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route resume plan task result verdict "
                        "answer ");
    cJSON_Delete(g);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert_eq(tu_kind_count(dir, "resume"), 1);
    cr_assert(!tu_hold_expired(&h));
    cli_verify_deep(dir);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
    tu_hold_free(&h);
}

/* A SIGTERM while the start's resume is under way (held, as above): the
 * daemon stops serving, and once the held read returns it exits 0 with no
 * resume entry written and without saying it was ready; the next start
 * resumes the run, which ends done. */
Test(runs_live, a_stop_during_the_resume_leaves_the_run_to_the_next_start,
     .timeout = 120)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_hold h;
    tu_hold_init(&h);
    struct tu_daemon d;
    int64_t live = killed_then_resume_held(&d, dir, f, &h);
    tu_daemon_term_drained(&d);
    tu_hold_release(&h);
    cr_assert_eq(tu_daemon_signal_wait(&d, 0, 30000), 0);
    cr_assert(!tu_hold_expired(&h));
    cr_assert_eq(tu_kind_count(dir, "resume"), 0);
    /* the next start resumes it */
    start_with_fake(&d, dir, f, NULL, NULL);
    cJSON *g = http_wait_run(&d, live, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    char k[256];
    tu_entry_kinds(g, k, sizeof(k));
    cr_assert_str_eq(k, "request route resume plan task result verdict "
                        "answer ");
    cJSON_Delete(g);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cli_verify_deep(dir);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
    tu_hold_free(&h);
}

Test(runs_live, run_cancel_over_http_and_mcp, .timeout = 90)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start_with_fake(&d, dir, f, NULL, NULL);
    /* Requests that are not runs. Written before any other process opens
     * the ledger: see the note at the top on `forum mcp` and the daemon. */
    atomic_store(&tu_held_hold, 0);
    cJSON *p =
        tu_http_json(&d, "POST", "/plan", "{\"request\":\"" REQ "\"}", 200);
    cJSON *pr = tu_http_json(&d, "POST", "/plan/run",
                             "{\"plan\":{\"tasks\":[{\"id\":\"T1\",\"agent\":"
                             "\"backend\",\"instruction\":\"schema\"}]}}",
                             200);
    int64_t plan_req = tu_num(p, "request_seq");
    int64_t plan_run_req = tu_num(pr, "request_seq");
    cJSON_Delete(p);
    cJSON_Delete(pr);
    atomic_store(&tu_held_hold, 1);
    int64_t run = http_start(&d);
    tu_held_wait_coord(2);
    cJSON *g = http_run(&d, "POST", run, "/cancel", 200);
    cr_assert_eq(tu_num(g, "run"), run);
    cr_assert_str_eq(tu_str(g, "state"), "running");
    cr_assert_str_eq(tu_str(g, "cancel"), "requested");
    cJSON_Delete(g);
    atomic_store(&tu_held_hold, 0);
    g = http_wait_run(&d, run, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "cancelled");
    cJSON_Delete(g);
    /* ended: the same answer from here and from another process */
    g = http_run(&d, "POST", run, "/cancel", 200);
    cr_assert_str_eq(tu_str(g, "state"), "cancelled");
    cr_assert_str_eq(tu_str(g, "cancel"), "ended");
    int is_error = 1;
    cJSON *m = mcp_tool(dir, "run_cancel", run, &is_error);
    cr_assert(!is_error);
    cr_assert(cJSON_Compare(g, m, 1), "MCP differs");
    cJSON_Delete(m);
    cJSON_Delete(g);
    /* the route: another verb, the run twice */
    char path[128];
    snprintf(path, sizeof(path), "/runs/%lld/cancel", (long long)run);
    cr_assert_eq(tu_http(&d, "GET", path, NULL, 1, NULL), 405);
    g = tu_http_json(&d, "POST", path, "{\"run\":0}", 400);
    cr_assert_str_eq(tu_str(g, "code"), "invalid_input");
    cJSON_Delete(g);
    /* a plan_run is a run of the engine like any other */
    g = http_run(&d, "GET", plan_run_req, "", 200);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    /* what is not a run: the route entry and a plan's request; what is
     * not there at all */
    int64_t not_runs[] = {run + 1, plan_req};
    for (int i = 0; i < 2; i++) {
        g = http_run(&d, "GET", not_runs[i], "", 404);
        cr_assert_str_eq(tu_str(g, "code"), "not_a_run", "%s",
                         tu_str(g, "error"));
        cJSON_Delete(g);
        g = http_run(&d, "POST", not_runs[i], "/cancel", 404);
        cr_assert_str_eq(tu_str(g, "code"), "not_a_run");
        cJSON_Delete(g);
        m = mcp_tool(dir, "run_cancel", not_runs[i], &is_error);
        cr_assert(is_error);
        cr_assert_str_eq(tu_str(m, "code"), "not_a_run", "%lld: %s",
                         (long long)not_runs[i], tu_str(m, "error"));
        cJSON_Delete(m);
    }
    g = http_run(&d, "POST", 999999, "/cancel", 404);
    cr_assert_str_eq(tu_str(g, "code"), "not_found");
    cJSON_Delete(g);
    m = mcp_tool(dir, "run_cancel", 999999, &is_error);
    cr_assert(is_error);
    cr_assert_str_eq(tu_str(m, "code"), "not_found");
    cJSON_Delete(m);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    /* witnessed: the budget entry (reason cancelled) under the plan */
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(orch_run_get(l, run, &g, &err), FO_OK, "%s", err.msg);
    assert_cancelled(l, g);
    cJSON_Delete(g);
    verify_deep(l);
    ledger_close(l);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(runs_live, serve_max_runs_refuses_one_more_until_one_ends, .timeout = 90)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start_with_fake(&d, dir, f, "--max-runs", "1");
    int64_t first = http_start(&d);
    tu_held_wait_coord(1);
    cJSON *g =
        tu_http_json(&d, "POST", "/runs", "{\"request\":\"one more\"}", 503);
    cr_assert_str_eq(tu_str(g, "code"), "busy");
    cJSON_Delete(g);
    atomic_store(&tu_held_hold, 0);
    g = http_wait_run(&d, first, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    /* its thread may still be on its way out: 503 until it is */
    int64_t t0 = tu_now_ms();
    char *body = NULL;
    int st;
    while ((st = tu_http(&d, "POST", "/runs", "{\"request\":\"" REQ "\"}", 1,
                         &body)) == 503) {
        cr_assert_lt(tu_now_ms() - t0, 5000, "still busy: %s", body);
        free(body);
        body = NULL;
        usleep(5000);
    }
    cr_assert_eq(st, 200, "%s", body);
    cJSON *s = tu_json_parse(body);
    free(body);
    g = http_wait_run(&d, tu_num(s, "run"), 10000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cJSON_Delete(s);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

static int forum_exit(const char *dir, const char *a, const char *b,
                      const char *c)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", a, b, c, (char *)NULL);
    int st = r.status;
    tu_run_free(&r);
    return st;
}

Test(runs_live, max_runs_flag_and_forum_json_are_validated)
{
    char *dir = tu_tmpdir();
    cr_assert_eq(forum_exit(dir, "--max-runs", "0", NULL), 2);
    cr_assert_eq(forum_exit(dir, "--max-runs", "2000000", NULL), 2);
    cr_assert_eq(forum_exit(dir, "--max-runs", "x", NULL), 2);
    cr_assert_eq(forum_exit(dir, "--max-runs", "-1", NULL), 2);
    cr_assert_eq(forum_exit(dir, "--max-runs", "1024", "--check"), 0);
    char p[1024];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(p, "{\"max_runs\":0}", 14), 0);
    cr_assert_eq(forum_exit(dir, "--check", NULL, NULL), 2);
    cr_assert_eq(tu_write_file(p, "{\"max_runs\":2000000}", 20), 0);
    cr_assert_eq(forum_exit(dir, "--check", NULL, NULL), 2);
    cr_assert_eq(tu_write_file(p, "{\"max_runs\":2}", 14), 0);
    cr_assert_eq(forum_exit(dir, "--check", NULL, NULL), 0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", "--help", (char *)NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "--max-runs N"), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(runs_live, forum_mcp_takes_max_runs_from_forum_json, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char p[1024];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(p, "{\"max_runs\":1}", 14), 0);
#define START_LINE(id)                                                         \
    "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\","            \
    "\"params\":{\"name\":\"run_start\",\"arguments\":{\"request\":\"" REQ     \
    "\"}}}\n"
    const char *in = START_LINE("1") START_LINE("2");
    /* the first run's task takes a second: the second call is refused
     * while it goes on */
    struct tu_run r =
        tu_forumv(in, "--ledger", dir, "mcp", "--init", "--cmd",
                  "sh " FORUM_SRC "/tests/fake_cli.sh slow", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *second = strchr(r.out, '\n');
    cr_assert_not_null(second, "%s", r.out);
    *second++ = '\0';
    cJSON *a = tu_json_parse(r.out), *b = tu_json_parse(second);
    if (tu_num(a, "id") == 2) { /* replies to run calls come as they end */
        cJSON *t = a;
        a = b;
        b = t;
    }
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "result");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "result");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ra, "isError")),
              "%s", r.out);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rb, "isError")),
              "%s", second);
    /* run_start declares an outputSchema: its error is in the text only */
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(rb, "structuredContent"),
                   "%s", second);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rb, "content"), 0),
        "text");
    cr_assert(cJSON_IsString(text), "%s", second);
    cJSON *sc = tu_json_parse(text->valuestring);
    cr_assert_str_eq(tu_str(sc, "code"), "busy");
    cJSON_Delete(sc);
    cJSON_Delete(a);
    cJSON_Delete(b);
    tu_run_free(&r);
    /* and the run it took ended before forum mcp exited */
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    cJSON *g = NULL;
    cr_assert_eq(orch_run_get(l, 0, &g, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    ledger_close(l);
    tu_rmrf(dir);
}

/* A client of POST /submit that hangs up while its run waits on the model:
 * the run is cancelled through the engine (witnessed once: a `budget`
 * entry with reason cancelled), without waiting for the model. */
Test(runs_live, a_submit_whose_client_hangs_up_is_cancelled, .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&tu_held_coord_calls, 0);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start_with_fake(&d, dir, f, NULL, NULL);
    atomic_store(&tu_held_hold, 1);
    int fd = tu_connect_loopback(d.port, 0);
    cr_assert_geq(fd, 0);
    const char *body = "{\"request\":\"" REQ "\"}";
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST /submit HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Authorization: Bearer %s\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     d.port, d.token, strlen(body), body);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    tu_held_wait_coord(1);
    cJSON *g = http_run(&d, "GET", 0, "", 200);
    cr_assert_str_eq(tu_str(g, "state"), "running");
    cJSON_Delete(g);
    close(fd); /* the client goes: the model is still held */
    g = http_wait_run(&d, 0, 10000);
    cr_assert_str_eq(tu_str(g, "state"), "cancelled");
    cJSON_Delete(g);
    cr_assert_eq(tu_kind_count(dir, "budget"), 1);
    atomic_store(&tu_held_hold, 0);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}
