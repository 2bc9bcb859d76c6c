/* test_dispatch: running plans end to end against a real ledger: tasks of
 * a wave overlap, max_parallel holds, a failure does not stop its
 * siblings, upstream output is injected with a cap and a marker, policy
 * refusals are witnessed, the causal chain reads request → plan → task →
 * result, and the ledger verifies after every test. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"

static char *dir;
static struct ledger *led;

static void setup(void)
{
    dir = tu_tmpdir();
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &led, &err), FO_OK);
}

/* Every test ends with a ledger that verifies (deep). */
static void teardown(void)
{
    struct ledger_verify_result v;
    struct fo_err err;
    cr_assert_eq(ledger_verify(led, LEDGER_VERIFY_DEEP, NULL, NULL, &v, &err),
                 FO_OK);
    cr_assert(v.ok, "ledger does not verify: %s at %lld",
              v.reason ? v.reason : "?", (long long)v.first_bad_seq);
    ledger_close(led);
    tu_rmrf(dir);
}

TestSuite(dispatch, .init = setup, .fini = teardown);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct orch *make(const struct orch_config *cfg)
{
    struct orch *o = NULL;
    struct fo_err err;
    cr_assert_eq(orch_create(cfg, &o, &err), FO_OK, "%s", err.msg);
    return o;
}

static int run(struct orch *o, const char *plan_json, cJSON **out,
               struct fo_err *err)
{
    cJSON *plan = NULL;
    cr_assert_eq(fo_json_parse(plan_json, strlen(plan_json), &plan, err), FO_OK,
                 "%s", plan_json);
    struct orch_witness w = {.ledger = led};
    *out = NULL;
    int rc = tu_run_plan(o, &w, plan, "the request", out, err);
    cJSON_Delete(plan);
    return rc;
}

static const cJSON *result_of(const cJSON *out, const char *id)
{
    const cJSON *r;
    cJSON_ArrayForEach (r, cJSON_GetObjectItemCaseSensitive(out, "results"))
        if (!strcmp(cJSON_GetObjectItemCaseSensitive(r, "id")->valuestring, id))
            return r;
    cr_assert_fail("no result for %s", id);
    return NULL;
}

static long long num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no %s", key);
    return (long long)v->valuedouble;
}

static int is_ok(const cJSON *o)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"));
}

static cJSON *body(int64_t seq)
{
    char *b = NULL;
    size_t n = 0;
    struct fo_err err;
    cr_assert_eq(ledger_body(led, seq, &b, &n, &err), FO_OK, "%s", err.msg);
    cJSON *v = NULL;
    cr_assert_eq(fo_json_parse(b, n, &v, &err), FO_OK);
    free(b);
    return v;
}

static struct ledger_entry entry(int64_t seq)
{
    struct ledger_entry e;
    cr_assert_eq(ledger_get(led, seq, &e, NULL, NULL), FO_OK);
    return e;
}

#define TASK(id, agent, instr, deps)                                           \
    "{\"id\":\"" id "\",\"agent\":\"" agent "\",\"instruction\":\"" instr      \
    "\",\"depends_on\":" deps "}"

Test(dispatch, causal_chain_reads_request_plan_task_result)
{
    struct orch *o = make(NULL);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(
        run(o,
            "{\"tasks\":[" TASK("T1", "backend", "schema", "[]") "," TASK(
                "T2", "frontend", "ui", "[\"T1\"]") "]}",
            &out, &err),
        FO_OK, "%s", err.msg);
    cr_assert(is_ok(out));
    const cJSON *r2 = result_of(out, "T2");
    struct ledger_entry *chain = NULL;
    size_t n = 0;
    cr_assert_eq(ledger_chain(led, num(r2, "seq"), &chain, &n, &err), FO_OK);
    cr_assert_eq(n, 4);
    const char *kinds[] = {"request", "plan", "task", "result"};
    const char *actors[] = {"client", "planner", "frontend", "frontend"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_str_eq(chain[i].kind, kinds[i]);
        cr_assert_str_eq(chain[i].actor, actors[i]);
    }
    cr_assert_eq(chain[0].seq, num(out, "request_seq"));
    cr_assert_eq(chain[1].seq, num(out, "plan_seq"));
    free(chain);
    /* the plan entry holds waves and typed edges */
    cJSON *plan = body(num(out, "plan_seq"));
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(cJSON_GetObjectItemCaseSensitive(plan, "waves"),
                               &b, NULL),
                 FO_OK);
    cr_assert_str_eq(b.data, "[[\"T1\"],[\"T2\"]]");
    fo_buf_reset(&b);
    cr_assert_eq(fo_json_canon(cJSON_GetObjectItemCaseSensitive(plan, "edges"),
                               &b, NULL),
                 FO_OK);
    cr_assert_str_eq(b.data,
                     "[{\"from\":\"T1\",\"to\":\"T2\",\"type\":\"data\"}]");
    fo_buf_release(&b);
    cJSON_Delete(plan);
    /* the result entry: {id, output, ok, model} */
    cJSON *res = body(num(r2, "seq"));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "id")->valuestring,
                     "T2");
    cr_assert(is_ok(res));
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(res, "model")->valuestring, "stub");
    cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(res, "output")));
    cJSON_Delete(res);
    cJSON *req = body(num(out, "request_seq"));
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(req, "request")->valuestring,
        "the request");
    cJSON_Delete(req);
    cJSON_Delete(out);
    orch_free(o);
}

/* Three tasks of one wave that each sleep 0.4 s. */
#define SLEEPERS                                                               \
    "{\"tasks\":[" TASK("A", "backend", "a", "[]") "," TASK(                   \
        "B", "frontend", "b", "[]") "," TASK("C", "mobile", "c", "[]") "]}"

Test(dispatch, tasks_of_a_wave_overlap)
{
    struct orch_config cfg = {.cmd = "sh -c 'sleep 0.4; echo \"$1\"' sh",
                              .max_parallel = 3};
    struct orch *o = make(&cfg);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(run(o, SLEEPERS, &out, &err), FO_OK, "%s", err.msg);
    cr_assert(is_ok(out));
    /* they overlap: every task entry was written before the first result
     * (in order, not by the clock: a loaded machine only slows them) */
    int64_t first_result = INT64_MAX, last_task_ts = 0, first_result_ts = 0;
    const char *ids[] = {"A", "B", "C"};
    for (int i = 0; i < 3; i++) {
        const cJSON *r = result_of(out, ids[i]);
        struct ledger_entry t = entry(num(r, "task_seq"));
        struct ledger_entry e = entry(num(r, "seq"));
        if (t.ts > last_task_ts)
            last_task_ts = t.ts;
        if (e.seq < first_result) {
            first_result = e.seq;
            first_result_ts = e.ts;
        }
        char want[8];
        snprintf(want, sizeof(want), "%s\n",
                 ids[i][0] == 'A'   ? "a"
                 : ids[i][0] == 'B' ? "b"
                                    : "c");
        cr_assert_str_eq(
            cJSON_GetObjectItemCaseSensitive(r, "output")->valuestring, want);
    }
    cr_assert_lt(last_task_ts, first_result_ts);
    cr_assert_geq(first_result_ts - last_task_ts, 300000,
                  "the children ran while no entry was written");
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, max_parallel_is_enforced)
{
    struct orch_config cfg = {.cmd = "sh -c 'sleep 0.3' sh", .max_parallel = 1};
    struct orch *o = make(&cfg);
    cJSON *out;
    struct fo_err err;
    double t0 = now_s();
    cr_assert_eq(run(o, SLEEPERS, &out, &err), FO_OK, "%s", err.msg);
    double dt = now_s() - t0;
    cr_assert_geq(dt, 0.85, "max_parallel 1 ran 3 x 0.3 s in %f s", dt);
    /* one at a time: each task entry comes after the previous result */
    int64_t last_result = -1;
    int tasks = 0;
    for (int64_t seq = num(out, "plan_seq") + 1;; seq++) {
        struct ledger_entry e;
        if (ledger_get(led, seq, &e, NULL, NULL) != FO_OK)
            break;
        if (!strcmp(e.kind, "task")) {
            tasks++;
            cr_assert_gt(seq, last_result);
            last_result = INT64_MAX; /* until this task's result */
        } else if (!strcmp(e.kind, "result")) {
            last_result = seq;
        }
    }
    cr_assert_eq(tasks, 3);
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, a_failure_does_not_stop_siblings_and_is_not_injected)
{
    /* the command echoes its prompt; F fails (exit 1) and D depends on it */
    struct orch_config cfg = {
        .cmd = "sh -c 'printf %s \"$1\"; case \"$1\" in *FAILME*) exit 1;; "
               "esac' sh"};
    struct orch *o = make(&cfg);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(
        run(o,
            "{\"tasks\":[" TASK("F", "backend", "FAILME", "[]") "," TASK(
                "G", "frontend", "good", "[]") "," TASK("D", "synthesis",
                                                        "combine",
                                                        "[\"F\",\"G\"]") "]}",
            &out, &err),
        FO_OK, "%s", err.msg);
    cr_assert_not(is_ok(out));
    cr_assert_not(is_ok(result_of(out, "F")));
    cr_assert(is_ok(result_of(out, "G")));
    const cJSON *d = result_of(out, "D");
    cr_assert(is_ok(d));
    const char *dout =
        cJSON_GetObjectItemCaseSensitive(d, "output")->valuestring;
    cr_assert_str_eq(dout, "combine\n\n--- upstream G output ---\ngood\n"
                           "--- end upstream G ---");
    cr_assert_null(strstr(dout, "FAILME"));
    /* the failed result is witnessed with ok:false and why */
    cJSON *fb = body(num(result_of(out, "F"), "seq"));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(fb, "ok")));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(fb, "error")->valuestring,
                     "exit status 1");
    cJSON_Delete(fb);
    /* D's task entry records what was injected, and the original text */
    cJSON *tb = body(num(d, "task_seq"));
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(tb, "instruction")->valuestring,
        "combine");
    const cJSON *inj = cJSON_GetObjectItemCaseSensitive(tb, "injected");
    cr_assert_eq(cJSON_GetArraySize(inj), 1);
    cr_assert_str_eq(cJSON_GetArrayItem(inj, 0)->valuestring, "G");
    cJSON_Delete(tb);
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, timed_out_task_is_ok_false_and_siblings_finish)
{
    struct orch_config cfg = {
        .cmd = "sh -c 'case \"$1\" in slow) sleep 30;; esac; echo fine' sh",
        .timeout_ms = 300};
    struct orch *o = make(&cfg);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(run(o,
                     "{\"tasks\":[" TASK("S", "backend", "slow", "[]") "," TASK(
                         "Q", "frontend", "quick", "[]") "]}",
                     &out, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_not(is_ok(result_of(out, "S")));
    cr_assert(is_ok(result_of(out, "Q")));
    cJSON *sb = body(num(result_of(out, "S"), "seq"));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sb, "timed_out")));
    cJSON_Delete(sb);
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, injection_is_capped_with_a_marker)
{
    struct orch_config cfg = {.cmd = "printf %s", .inject_max = 100};
    struct orch *o = make(&cfg);
    char a1000[1001];
    memset(a1000, 'a', 1000);
    a1000[1000] = '\0';
    char plan[4096];
    snprintf(plan, sizeof(plan),
             "{\"tasks\":[" TASK("U", "backend", "%s", "[]") "," TASK(
                 "O", "frontend", "order only",
                 "[{\"id\":\"U\",\"type\":"
                 "\"order\"}]") "," TASK("V",
                                         "synthesi"
                                         "s",
                                         "down", "[\"U\"]") "]}",
             a1000);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(run(o, plan, &out, &err), FO_OK, "%s", err.msg);
    cr_assert(is_ok(out));
    const char *v =
        cJSON_GetObjectItemCaseSensitive(result_of(out, "V"), "output")
            ->valuestring;
    char want[512];
    snprintf(want, sizeof(want),
             "down\n\n--- upstream U output ---\n%.100s\n[forum: upstream "
             "output truncated at 100 of 1000 bytes]\n--- end upstream U ---",
             a1000);
    cr_assert_str_eq(v, want);
    /* an order edge injects nothing */
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(result_of(out, "O"), "output")
            ->valuestring,
        "order only");
    /* the witnessed instruction is the original */
    cJSON *tb = body(num(result_of(out, "V"), "task_seq"));
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(tb, "instruction")->valuestring,
        "down");
    cJSON_Delete(tb);
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, policy_refusal_is_witnessed)
{
    const char *allowed[] = {"research"};
    struct orch_config cfg = {.allowed_categories = allowed,
                              .n_allowed_categories = 1};
    struct orch *o = make(&cfg);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(run(o,
                     "{\"tasks\":[" TASK("B", "backend", "code", "[]") "," TASK(
                         "R", "deep-research", "look", "[\"B\"]") "]}",
                     &out, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_not(is_ok(out));
    const cJSON *b = result_of(out, "B");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "refused")));
    struct ledger_entry e = entry(num(b, "seq"));
    cr_assert_str_eq(e.kind, "refusal");
    cr_assert_str_eq(e.actor, "policy");
    cr_assert_eq(e.parent, num(out, "plan_seq"));
    cJSON *rb = body(e.seq);
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(rb, "category")->valuestring,
        "engineering");
    cJSON_Delete(rb);
    cr_assert(is_ok(result_of(out, "R"))); /* runs, without B's output */
    cr_assert_str_eq(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(out, "refused"), 0)
            ->valuestring,
        "B");
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, bad_plan_writes_nothing)
{
    struct orch *o = make(NULL);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(
        run(o,
            "{\"tasks\":[" TASK("A", "backend", "x", "[\"B\"]") "," TASK(
                "B", "backend", "y", "[\"A\"]") "]}",
            &out, &err),
        FO_E_INVALID);
    cr_assert(strstr(err.msg, "A, B"), "%s", err.msg);
    cr_assert_eq(
        run(o, "{\"tasks\":[" TASK("A", "nobody", "x", "[]") "]}", &out, &err),
        FO_E_INVALID);
    int64_t n = -1;
    cr_assert_eq(ledger_count(led, &n, NULL), FO_OK);
    cr_assert_eq(n, 0);
    orch_free(o);
}

/* --cmd answers every role: a command that cannot run fails the run, and
 * says which binary */
Test(dispatch, missing_binary_is_an_error_of_the_run)
{
    struct orch_config cfg = {.cmd = "no-such-model-cli-xyz run"};
    struct orch *o = make(&cfg);
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_neq(
        run(o, "{\"tasks\":[" TASK("A", "backend", "x", "[]") "]}", &out, &err),
        FO_OK);
    cr_assert(strstr(err.msg, "no-such-model-cli-xyz"), "%s", err.msg);
    cJSON_Delete(out);
    orch_free(o);
}

Test(dispatch, ledger_error_stops_the_run)
{
    struct orch *o = make(NULL);
    cJSON *out;
    struct fo_err err;
    /* request, plan, then the task fails: the engine's committer writes
     * them, on a handle of its own */
    ledger_fail_commits_after(3);
    cr_assert_eq(
        run(o, "{\"tasks\":[" TASK("A", "backend", "x", "[]") "]}", &out, &err),
        FO_E_IO);
    ledger_fail_commits_after(0);
    orch_free(o);
}

Test(dispatch, summary_counts_runs)
{
    struct orch *o = make(NULL);
    cJSON *out;
    struct fo_err err;
    cr_assert_eq(run(o,
                     "{\"tasks\":[" TASK("A", "backend", "x", "[]") "," TASK(
                         "B", "backend", "#stub-fail", "[]") "]}",
                     &out, &err),
                 FO_OK);
    cJSON_Delete(out);
    cJSON *s = NULL;
    cr_assert_eq(orch_summary(led, &s, &err), FO_OK);
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(s, "runs");
    cr_assert_eq(num(runs, "requests"), 1);
    cr_assert_eq(num(runs, "plans"), 1);
    cr_assert_eq(num(runs, "tasks"), 2);
    cr_assert_eq(num(runs, "results_ok"), 1);
    cr_assert_eq(num(runs, "results_failed"), 1);
    /* two tasks on the stub executor: two results, but no model was called
     * (model_calls used to count results, and said {"stub": 2}) */
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(runs, "model_calls");
    cr_assert(cJSON_IsObject(calls));
    cr_assert_eq(cJSON_GetArraySize(calls), 0);
    cJSON_Delete(s);
    orch_free(o);
}

Test(dispatch, methods_route_and_plan_run_through_the_table)
{
    struct surf_ctx ctx = {.ledger = led}; /* no orch: a default one */
    cJSON *in = NULL, *out = NULL;
    struct fo_err err;
    const char *rin = "{\"text\":\"build the auth endpoint and the database "
                      "schema\"}";
    cr_assert_eq(fo_json_parse(rin, strlen(rin), &in, &err), FO_OK);
    cr_assert_eq(surf_call(&ctx, surf_find("route"), in, &out, &err), FO_OK,
                 "%s", err.msg);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(out, &b, NULL), FO_OK);
    cr_assert(strstr(b.data, "\"confidence\":0.6,\"decided\":\"backend\","),
              "%s", b.data);
    cr_assert(strstr(b.data, "\"needs_escalation\":false"), "%s", b.data);
    fo_buf_release(&b);
    cJSON_Delete(in);
    cJSON_Delete(out);
    const char *pin = "{\"plan\":{\"tasks\":[{\"id\":\"A\",\"agent\":"
                      "\"backend\",\"instruction\":\"x\"}]}}";
    tu_host(&ctx); /* a run has one entry: an engine's */
    cr_assert_eq(fo_json_parse(pin, strlen(pin), &in, &err), FO_OK);
    cr_assert_eq(surf_call(&ctx, surf_find("plan_run"), in, &out, &err), FO_OK,
                 "%s", err.msg);
    cr_assert(is_ok(out));
    cJSON_Delete(in);
    cJSON_Delete(out);
    const char *bad = "{\"plan\":{\"tasks\":[]}}";
    cr_assert_eq(fo_json_parse(bad, strlen(bad), &in, &err), FO_OK);
    cr_assert_eq(surf_call(&ctx, surf_find("plan_run"), in, &out, &err),
                 FO_E_INVALID);
    cJSON_Delete(in);
    tu_unhost(&ctx);
}

/* ---- the CLI ----------------------------------------------------------- */

Test(dispatch, cli_run_plan_and_bench)
{
    char path[512], other[512];
    snprintf(path, sizeof(path), "%s/plan.json", dir);
    snprintf(other, sizeof(other), "%s/other", dir);
    const char *plan = "{\"tasks\":[" TASK("A", "backend", "x", "[]") "," TASK(
        "B", "frontend", "y", "[\"A\"]") "]}";
    cr_assert_eq(tu_write_file(path, plan, strlen(plan)), 0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", other, "run-plan", path, "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = tu_run_json(&r);
    cr_assert(is_ok(j));
    cJSON_Delete(j);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", other, "run-plan", path, "--cmd",
                  "sh " FORUM_SRC "/tests/fake_cli.sh fail", NULL);
    cr_assert_eq(r.status, 1, "a failed task exits 1: %s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", other, "run-plan", path, "--cmd", "a 'b",
                  NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unterminated"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv("{\"tasks\":[]}", "--ledger", other, "run-plan", "-", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", other, "ledger", "verify", NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    /* bench: this test's (empty) ledger against the other */
    r = tu_forumv(NULL, "bench", dir, other, "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = tu_run_json(&r);
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(j, "delta");
    /* two runs of two tasks: request, plan, 2 x (task, result, verdict),
     * answer */
    cr_assert_eq(num(delta, "entries"), 18);
    cr_assert_eq(num(delta, "runs.results_ok"), 2);
    cr_assert_eq(num(delta, "runs.results_failed"), 2);
    /* stub tasks are no model calls (see summary_counts_runs) */
    cr_assert_null(
        cJSON_GetObjectItemCaseSensitive(delta, "runs.model_calls.stub"));
    cJSON_Delete(j);
    tu_run_free(&r);
    r = tu_forumv(NULL, "bench", dir, NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
}
