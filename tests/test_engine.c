/* test_engine: the run engine against the real binary and a fake model that
 * holds its replies on one event loop (bench/fake_model): where each method
 * of the table runs, 200 runs in flight at once on a bounded number of
 * threads while the daemon keeps answering, and one plan witnessed the same
 * way whatever the entry point. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

#define REQ "build the api database server"
#define RUNS 200

/* ---- the fake model ------------------------------------------------------ */

#define fake tu_fakebin
#define fake_start_delay tu_fakebin_start
#define fake_stop tu_fakebin_stop
#define fake_stat tu_fakebin_stat

static void fake_start(struct fake *f, int hold)
{
    fake_start_delay(f, hold, "0");
}

static void wait_stat(const struct fake *f, const char *key, long long n)
{
    int64_t t0 = tu_now_ms();
    while (fake_stat(f, key) < n) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "%s never reached %lld", key, n);
        usleep(10000);
    }
}

static void daemon_on(struct tu_daemon *d, const char *dir,
                      const struct fake *f, const char *extra1,
                      const char *extra2)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    tu_daemon_start(d, dir, "--chat-url", url, "--model", "fake", extra1,
                    extra2, (char *)NULL);
}

static long threads_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    size_t n = 0;
    char *s = tu_read_file(path, &n);
    cr_assert_not_null(s);
    const char *t = strstr(s, "\nThreads:");
    long v = t ? strtol(t + 9, NULL, 10) : -1;
    free(s);
    return v;
}

/* The end of a test: the ledger verifies deeply, the fake goes. */
static void end_test(struct fake *f, char *dir)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    fake_stop(f);
    tu_rmrf(dir);
}

/* ---- where each method runs ---------------------------------------------- */

Test(engine, every_method_says_where_it_runs)
{
    size_t n = 0;
    const struct surf_method *t = surf_methods(&n);
    int runs = 0;
    for (size_t i = 0; i < n; i++) {
        const struct surf_method *m = &t[i];
        cr_assert(m->where >= SURF_ON_WORKER && m->where <= SURF_ON_RUN, "%s",
                  m->name);
        /* a run starts on the engine, and only a run does; a run has that
         * one entry, and every other method its handler */
        cr_assert_eq(m->where == SURF_ON_RUN, m->start != NULL, "%s", m->name);
        cr_assert_eq(m->where == SURF_ON_RUN, m->handler == NULL, "%s",
                     m->name);
        runs += m->where == SURF_ON_RUN;
        /* the loop takes no writes but through the engine or committer */
        if (m->where == SURF_ON_LOOP)
            cr_assert(!(m->flags & SURF_WRITE) ||
                          !strcmp(m->name, "run_cancel"),
                      "%s writes on the loop", m->name);
    }
    /* submit, plan, plan_run, run_start, and the three gate decisions */
    cr_assert_eq(runs, 7);
    cr_assert_eq(surf_find("ledger_append")->where, SURF_ON_COMMIT);
    cr_assert_eq(surf_find("ledger_chain")->where, SURF_ON_WORKER);
    cr_assert_eq(surf_find("ledger_verify")->where, SURF_ON_WORKER);
}

/* ---- 200 runs in flight ---------------------------------------------------
 */

Test(engine, two_hundred_runs_wait_on_the_model_holding_no_thread,
     .timeout = 120)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake f;
    fake_start(&f, 1);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    /* one worker: a run that held a worker would starve the rest */
    daemon_on(&d, dir, &f, "--workers", "1");
    static int fds[RUNS];
    char req[1024];
    const char *body = "{\"request\":\"" REQ "\"}";
    int len = snprintf(req, sizeof(req),
                       "POST /submit HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Authorization: Bearer %s\r\n"
                       "Content-Type: application/json\r\n"
                       "Content-Length: %zu\r\n\r\n%s",
                       d.token, strlen(body), body);
    for (int i = 0; i < RUNS; i++) {
        fds[i] = tu_connect_loopback(d.port, 0);
        cr_assert_eq(write(fds[i], req, (size_t)len), len);
    }
    /* every run is at the model at once: 200 coordinator calls held */
    wait_stat(&f, "coordinator", RUNS);
    cr_assert_eq(fake_stat(&f, "held") + fake_stat(&f, "in_flight") >= RUNS, 1);
    long th = threads_of(d.pid);
    cr_assert_leq(th, 8, "the daemon has %ld threads with %d runs waiting", th,
                  RUNS);
    /* the loop, the worker and the run engine's reads all answer */
    cr_assert_eq(tu_http(&d, "GET", "/status", NULL, 1, NULL), 200);
    cr_assert_eq(tu_http(&d, "GET", "/verify", NULL, 1, NULL), 200);
    cr_assert_eq(tu_http(&d, "GET", "/summary", NULL, 1, NULL), 200);
    cJSON *g = tu_http_json(&d, "GET", "/runs/0", NULL, 200);
    cr_assert_str_eq(tu_str(g, "state"), "running");
    cJSON_Delete(g);
    /* let the model answer: every run ends with its answer */
    kill(f.pid, SIGUSR1);
    static char buf[65536];
    for (int i = 0; i < RUNS; i++) {
        size_t have = 0;
        char *reply = NULL;
        int st = tu_http_read_reply(fds[i], buf, sizeof(buf), &have, &reply);
        cr_assert_eq(st, 200, "run %d: %d %s", i, st, reply ? reply : "");
        cJSON *j = tu_json_parse(reply);
        cr_assert_str_eq(tu_str(j, "answer"), "the work is done");
        cJSON_Delete(j);
        free(reply);
        close(fds[i]);
    }
    cr_assert_eq(fake_stat(&f, "coordinator"), RUNS);
    cr_assert_eq(fake_stat(&f, "task"), RUNS);
    cr_assert_eq(fake_stat(&f, "synthesizer"), RUNS);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    end_test(&f, dir);
}

/* ---- one engine ------------------------------------------------------------
 */

/* "kind<parent as an offset from the plan>" for the plan and every entry
 * after it under the run, in seq order: the shape of a run from its plan on,
 * whatever wrote the entries before it. */
static void shape_from_plan(const char *dir, int64_t run, char *out,
                            size_t size)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    int64_t plan = -1;
    out[0] = '\0';
    for (int64_t s = run;; s++) {
        struct ledger_entry e;
        if (ledger_get(l, s, &e, NULL, &err) != FO_OK)
            break;
        if (s > run && e.parent == LEDGER_NO_PARENT)
            break; /* the next run */
        if (!strcmp(e.kind, "plan"))
            plan = s;
        if (plan < 0)
            continue;
        size_t n = strlen(out);
        snprintf(out + n, size - n, "%s<%lld ", e.kind,
                 (long long)(e.parent - plan));
    }
    ledger_close(l);
}

Test(engine, one_plan_is_witnessed_alike_from_every_entry_point, .timeout = 60)
{
    struct fake f;
    fake_start(&f, 0);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    daemon_on(&d, dir, &f, NULL, NULL);
    /* submit: the coordinator (the fake) plans one task on the lane */
    cJSON *s =
        tu_http_json(&d, "POST", "/submit", "{\"request\":\"" REQ "\"}", 200);
    int64_t by_submit = tu_num(s, "request_seq");
    char lane[64];
    snprintf(lane, sizeof(lane), "%s", tu_str(s, "lane"));
    cJSON_Delete(s);
    /* plan_run: the same plan, given */
    char body[512];
    snprintf(body, sizeof(body),
             "{\"request\":\"" REQ "\",\"plan\":{\"tasks\":[{\"id\":\"T1\","
             "\"agent\":\"%s\",\"instruction\":\"do the work\"}]}}",
             lane);
    s = tu_http_json(&d, "POST", "/plan/run", body, 200);
    int64_t by_plan_run = tu_num(s, "request_seq");
    cJSON_Delete(s);
    /* run_start: in the background, then waited for */
    s = tu_http_json(&d, "POST", "/runs", "{\"request\":\"" REQ "\"}", 200);
    int64_t by_run_start = tu_num(s, "run");
    cJSON_Delete(s);
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", (long long)by_run_start);
    for (int i = 0;; i++) {
        cJSON *g = tu_http_json(&d, "GET", path, NULL, 200);
        int running = !strcmp(tu_str(g, "state"), "running");
        cJSON_Delete(g);
        if (!running)
            break;
        cr_assert_lt(i, 2000);
        usleep(10000);
    }
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    char a[512], b[512], c[512];
    shape_from_plan(dir, by_submit, a, sizeof(a));
    shape_from_plan(dir, by_plan_run, b, sizeof(b));
    shape_from_plan(dir, by_run_start, c, sizeof(c));
    cr_assert_str_eq(a, "plan<-2 task<0 result<1 verdict<2 answer<0 ", "%s",
                     a); /* the plan's parent is the request, 2 before */
    /* plan_run has no route entry: its plan's parent is 1 before */
    cr_assert_str_eq(b, "plan<-1 task<0 result<1 verdict<2 answer<0 ", "%s", b);
    cr_assert_str_eq(c, a);
    fake_stop(&f);
    tu_rmrf(dir);
}

/* ---- SIGKILL mid-runs ------------------------------------------------------
 */

#define SOAK_RUNS 20
#define SOAK_ROUNDS 10

/* The run's entries of kind (from GET /runs/{id}). */
static int count_kind(const cJSON *g, const char *kind)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach (e, cJSON_GetObjectItemCaseSensitive(g, "entries"))
        n += !strcmp(tu_str(e, "kind"), kind);
    return n;
}

static int count_call(void *ctx, const struct ledger_entry *e)
{
    /* the fake's runs: a plan (coordinator), a result (the task) and an
     * answer (synthesizer) each witness one model call */
    *(long long *)ctx += !strcmp(e->kind, "plan") ||
                         !strcmp(e->kind, "result") ||
                         !strcmp(e->kind, "answer");
    return 0;
}

/* The model calls whose outcome the ledger in dir has on record. */
static long long witnessed_calls(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    long long n = 0;
    cr_assert_eq(ledger_range(l, 0, -1, count_call, &n, &err), FO_OK, "%s",
                 err.msg);
    ledger_close(l);
    return n;
}

Test(engine, runs_survive_ten_sigkills_and_no_witnessed_call_is_made_again,
     .timeout = 180)
{
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)getpid());
    struct fake f;
    /* a model that takes 150 ms a call, so kills land mid-run */
    fake_start_delay(&f, 0, "150");
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    daemon_on(&d, dir, &f, NULL, NULL);
    int64_t runs[SOAK_RUNS];
    /* every fourth run waits at an approval gate before its one wave */
    for (int i = 0; i < SOAK_RUNS; i++) {
        cJSON *s = tu_http_json(&d, "POST", "/runs",
                                i % 4 == 3 ? "{\"request\":\"" REQ
                                             "\",\"gates\":{\"all\":true}}"
                                           : "{\"request\":\"" REQ "\"}",
                                200);
        runs[i] = tu_num(s, "run");
        cJSON_Delete(s);
    }
    long long in_flight_at_kills = 0;
    for (int round = 0; round < SOAK_ROUNDS; round++) {
        usleep((useconds_t)(20000 + rand() % 150000));
        cr_assert_eq(tu_daemon_signal_wait(&d, SIGKILL, 10000), 128 + SIGKILL);
        /* the calls in flight at the kill: asked of the model and not yet
         * witnessed (the reply may have reached the dead daemon); the next
         * daemon makes each of them again, at most once */
        in_flight_at_kills += fake_stat(&f, "calls") - witnessed_calls(dir);
        daemon_on(&d, dir, &f, NULL, NULL);
    }
    /* the gated runs still wait, their gate kept across the kills: each is
     * approved once, and goes on */
    for (int i = 3; i < SOAK_RUNS; i += 4) {
        char path[64], body[128];
        snprintf(path, sizeof(path), "/runs/%lld", (long long)runs[i]);
        for (int k = 0;; k++) {
            cJSON *g = tu_http_json(&d, "GET", path, NULL, 200);
            int waiting = !strcmp(tu_str(g, "state"), "waiting");
            cJSON_Delete(g);
            if (waiting)
                break;
            cr_assert_lt(k, 3000, "run %lld never waited at its gate",
                         (long long)runs[i]);
            usleep(10000);
        }
        snprintf(body, sizeof(body),
                 "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"soak\"}",
                 (long long)runs[i]);
        cJSON_Delete(tu_http_json(&d, "POST", "/gate/approve", body, 200));
    }
    /* every run ends done, with one plan and one answer */
    for (int i = 0; i < SOAK_RUNS; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/runs/%lld", (long long)runs[i]);
        cJSON *g = NULL;
        for (int k = 0;; k++) {
            g = tu_http_json(&d, "GET", path, NULL, 200);
            if (strcmp(tu_str(g, "state"), "running") != 0 &&
                strcmp(tu_str(g, "state"), "waiting") != 0)
                break;
            cJSON_Delete(g);
            cr_assert_lt(k, 3000, "run %lld never ended", (long long)runs[i]);
            usleep(10000);
        }
        cr_assert_str_eq(tu_str(g, "state"), "done", "run %lld",
                         (long long)runs[i]);
        cr_assert_eq(count_kind(g, "plan"), 1);
        cr_assert_eq(count_kind(g, "task"), 1);
        cr_assert_eq(count_kind(g, "result"), 1);
        cr_assert_eq(count_kind(g, "answer"), 1);
        cr_assert_eq(count_kind(g, "gate_requested"), i % 4 == 3);
        cr_assert_eq(count_kind(g, "gate_approved"), i % 4 == 3);
        /* the first kill came before any run could end (3 x 150 ms) */
        cr_assert_geq(count_kind(g, "resume"), 1);
        cJSON_Delete(g);
    }
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    /* three witnessed calls a run (coordinator, task, synthesizer), and at
     * most once more each call in flight at a kill */
    long long calls = fake_stat(&f, "calls");
    cr_assert_geq(calls, 3 * SOAK_RUNS);
    cr_assert_leq(calls, 3 * SOAK_RUNS + in_flight_at_kills,
                  "%lld model calls for %d runs, %lld in flight at the kills",
                  calls, SOAK_RUNS, in_flight_at_kills);
    end_test(&f, dir);
}

/* ---- SIGTERM with a hundred runs in flight --------------------------------
 */

#define kind_count tu_kind_count

Test(engine, sigterm_with_a_hundred_runs_in_flight_exits_and_all_resume,
     .timeout = 180)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake f;
    fake_start(&f, 1); /* every model call held until released */
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    daemon_on(&d, dir, &f, NULL, NULL);
    for (int i = 0; i < 100; i++)
        cJSON_Delete(tu_http_json(&d, "POST", "/runs",
                                  "{\"request\":\"" REQ "\"}", 200));
    wait_stat(&f, "held", 100); /* each run waits on its first call */
    /* the held calls never answer: the stop abandons them after its
     * grace, witnesses a stop for every run, and exits 0 */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    cr_assert_eq(kind_count(dir, "stop"), 100);
    cr_assert_eq(kind_count(dir, "answer"), 0);
    kill(f.pid, SIGUSR1); /* answer everything from now on */
    daemon_on(&d, dir, &f, NULL, NULL);
    int64_t t0 = tu_now_ms();
    while (kind_count(dir, "answer") < 100) {
        cr_assert_lt(tu_now_ms() - t0, 120000, "the resumed runs never ended");
        usleep(50000);
    }
    /* each resumed once, each answered once */
    cr_assert_eq(kind_count(dir, "resume"), 100);
    cr_assert_eq(kind_count(dir, "answer"), 100);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    end_test(&f, dir);
}
