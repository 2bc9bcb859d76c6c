/* test_fold: the engine's reducer is the one reader of a run's state.
 * Random valid plans (random waves, dependencies, duplicates, done_when
 * assertions that pass or fail, executors that succeed or fail) run live
 * in the engine; the state folded from the ledger afterwards
 * (orch_run_fold, the same apply()) must equal what the live run
 * reported, task by task. And a view reads what the engine ran: a task
 * edited at a gate shows its edited instruction in `run show`. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "testutil.h"
#include "tu_daemon.h"

static const char *const agents[] = {"backend",     "frontend", "mobile",
                                     "code-review", "ci-cd",    "data-ml"};

/* A random plan of 1..7 tasks; instructions with "fail" fail. */
static char *random_plan(unsigned *seed)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int n = 1 + (int)(rand_r(seed) % 7);
    fo_buf_puts(&b, "{\"tasks\":[");
    for (int i = 0; i < n; i++) {
        int dup = i > 0 && rand_r(seed) % 5 == 0; /* same as an earlier one */
        int a = (int)(rand_r(seed) % 6), word = (int)(rand_r(seed) % 4);
        static const char *const words[] = {"ok", "fail", "done", "print"};
        fo_buf_printf(&b, "%s{\"id\":\"T%d\",\"agent\":\"%s\",", i ? "," : "",
                      i + 1, dup ? "backend" : agents[a]);
        if (dup)
            fo_buf_puts(&b, "\"instruction\":\"the same step\",");
        else
            fo_buf_printf(&b, "\"instruction\":\"step %d %s\",", i + 1,
                          words[word]);
        fo_buf_puts(&b, "\"depends_on\":[");
        int first = 1;
        for (int j = 0; j < i; j++)
            if (rand_r(seed) % 3 == 0) {
                fo_buf_printf(&b, "%s\"T%d\"", first ? "" : ",", j + 1);
                first = 0;
            }
        fo_buf_puts(&b, "]");
        switch (rand_r(seed) % 3) {
        case 0:
            fo_buf_puts(&b, ",\"done_when\":[{\"contains\":\"step\"}]");
            break;
        case 1:
            fo_buf_puts(&b, ",\"done_when\":[{\"contains\":\"absent\"}]");
            break;
        default:
            break;
        }
        fo_buf_puts(&b, "}");
    }
    fo_buf_puts(&b, "]}");
    return fo_buf_detach(&b, NULL);
}

static const cJSON *by_id(const cJSON *arr, const char *id)
{
    const cJSON *x;
    cJSON_ArrayForEach (x, arr)
        if (!strcmp(tu_str(x, "id"), id))
            return x;
    return NULL;
}

static long long seq_or(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
}

Test(fold, the_folded_state_is_the_live_state, .timeout = 300)
{
    char *dir = tu_tmpdir();
    struct ledger *led = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &led, &err), FO_OK);
    struct orch_config cfg = {
        /* a task whose instruction says "fail" fails (the roles' prompts,
         * which quote the tasks, always answer) */
        .cmd = "sh -c 'case \"$1\" in *\"You are the\"*) echo \"$1\"; exit "
               "0;; *fail*) echo no; exit 1;; esac; echo \"$1\"' sh",
        .max_parallel = 3};
    struct orch *o = NULL;
    cr_assert_eq(orch_create(&cfg, &o, &err), FO_OK, "%s", err.msg);
    unsigned seed = 20261127;
    int seen_passed = 0, seen_failed = 0, seen_skipped = 0;
    for (int round = 0; round < 40; round++) {
        char *text = random_plan(&seed);
        cJSON *plan = tu_json_parse(text);
        struct orch_witness w = {.ledger = led};
        cJSON *out = NULL;
        cr_assert_eq(tu_run_plan(o, &w, plan, "a random plan", &out, &err),
                     FO_OK, "round %d: %s\n%s", round, err.msg, text);
        cJSON *view = NULL;
        long long run = tu_num(out, "request_seq");
        cr_assert_eq(orch_run_fold(o, led, run, &view, &err), FO_OK,
                     "round %d: %s", round, err.msg);
        cr_assert_eq(tu_num(view, "model_calls"), tu_num(out, "model_calls"));
        cr_assert_eq(seq_or(view, "answer_seq"), seq_or(out, "answer_seq"));
        cr_assert_str_eq(tu_str(view, "phase"), "end");
        const cJSON *live = cJSON_GetObjectItemCaseSensitive(out, "tasks");
        const cJSON *folded = cJSON_GetObjectItemCaseSensitive(view, "tasks");
        cr_assert_eq(cJSON_GetArraySize(live), cJSON_GetArraySize(folded));
        const cJSON *lt;
        cJSON_ArrayForEach (lt, live) {
            const cJSON *ft = by_id(folded, tu_str(lt, "id"));
            cr_assert_not_null(ft, "round %d: %s not folded", round,
                               tu_str(lt, "id"));
            const char *ls = tu_str(lt, "state"), *fs = tu_str(ft, "state");
            if (!strcmp(ls, "not_run"))
                ls = "pending";
            cr_assert_str_eq(fs, ls, "round %d task %s\n%s", round,
                             tu_str(lt, "id"), text);
            seen_passed += !strcmp(fs, "passed");
            seen_failed += !strcmp(fs, "failed");
            seen_skipped += !strcmp(fs, "skipped");
        }
        const cJSON *res;
        cJSON_ArrayForEach (res,
                            cJSON_GetObjectItemCaseSensitive(out, "results")) {
            const cJSON *ft = by_id(folded, tu_str(res, "id"));
            cr_assert_eq(seq_or(ft, "result_seq"), seq_or(res, "seq"),
                         "round %d task %s", round, tu_str(res, "id"));
            cr_assert_eq(seq_or(ft, "task_seq"), seq_or(res, "task_seq"));
        }
        cJSON_Delete(view);
        cJSON_Delete(out);
        cJSON_Delete(plan);
        free(text);
    }
    /* the random plans reached each kind of end */
    cr_assert(seen_passed && seen_failed && seen_skipped, "%d %d %d",
              seen_passed, seen_failed, seen_skipped);
    orch_free(o);
    ledger_close(led);
    tu_rmrf(dir);
}

/* The plan said "write the login handler"; the gate's editor changed it;
 * the engine ran the edited text, and `run show` (text and JSON) says so
 * (it printed the plan's old text before). */
Test(fold, run_show_prints_the_instruction_a_gate_edited, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *r = tu_http_json(&d, "POST", "/runs",
                            "{\"request\":\"add a login endpoint to the api "
                            "server\",\"gates\":{\"all\":true}}",
                            200);
    long long run = tu_num(r, "run");
    cJSON_Delete(r);
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", run);
    const char *tid = NULL;
    cJSON *g = NULL;
    for (int i = 0; i < 400; i++) {
        g = tu_http_json(&d, "GET", path, NULL, 200);
        if (!strcmp(tu_str(g, "state"), "waiting"))
            break;
        cJSON_Delete(g);
        g = NULL;
        usleep(25 * 1000);
    }
    cr_assert_not_null(g, "the run never waited at its gate");
    cJSON_Delete(g);
    char sp[64];
    snprintf(sp, sizeof(sp), "/runs/%lld/show", run);
    cJSON *show = tu_http_json(&d, "GET", sp, NULL, 200);
    tid = tu_str(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(show, "tasks"), 0),
        "id");
    char body[512];
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"alice\","
             "\"edits\":{\"%s\":\"write the EDITED handler\"}}",
             run, tid);
    cJSON_Delete(show);
    cJSON *e = tu_http_json(&d, "POST", "/gate/edit", body, 200);
    cJSON_Delete(e);
    for (int i = 0; i < 400; i++) {
        g = tu_http_json(&d, "GET", path, NULL, 200);
        int over = strcmp(tu_str(g, "state"), "running") &&
                   strcmp(tu_str(g, "state"), "waiting");
        cJSON_Delete(g);
        if (over)
            break;
        usleep(25 * 1000);
    }
    show = tu_http_json(&d, "GET", sp, NULL, 200);
    const cJSON *t0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(show, "tasks"), 0);
    cr_assert_str_eq(tu_str(t0, "instruction"), "write the EDITED handler");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(show, "fold_error"));
    cJSON_Delete(show);
    char id[32];
    snprintf(id, sizeof(id), "%lld", run);
    struct tu_run t =
        tu_forumv(NULL, "--ledger", dir, "run", "show", id, "--full", NULL);
    cr_assert_eq(t.status, 0, "%s", t.err);
    cr_assert(strstr(t.out, "write the EDITED handler"), "%s", t.out);
    tu_run_free(&t);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}
