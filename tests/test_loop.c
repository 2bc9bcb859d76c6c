/* test_loop: the control loop (a submit on the engine) end to end against a
 * scripted fake OpenAI-compatible server on 127.0.0.1: entry kinds and parents,
 * lenient plans and corrective retries, assertions, escalation up the
 * tiers, budgets, the stub models, the methods and the CLI. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"
#include "tests/tu_model.h"

#define KEY "sk-test-SECRET-loop-0123456789"
#define KEY_ENV "FORUM_TEST_LOOP_KEY"

/* ---- the orchestrator and ledger of a test ------------------------------- */

static const char roster[] =
    "{\"lanes\":["
    "{\"name\":\"writer\",\"category\":\"c\",\"domain\":\"writes prose\","
    "\"keywords\":[\"write\",\"essay\"],\"model_tier\":\"cheap\","
    "\"executor\":\"chat\"},"
    "{\"name\":\"coder\",\"category\":\"c\",\"domain\":\"writes code\","
    "\"keywords\":[\"code\",\"function\"],\"model_tier\":\"cheap\","
    "\"executor\":\"chat\"},"
    "{\"name\":\"echo\",\"category\":\"c\",\"domain\":\"echoes\","
    "\"keywords\":[\"echo\"],\"model_tier\":\"cheap\","
    "\"executor\":\"stub\"}]}";

struct env {
    struct fake *f;
    char url[64];
    struct orch_model_provider p[3];
    struct orch_model_config mc;
    struct orch *o;
    char *dir;
    struct ledger *l;
    struct orch_witness w;
};

static void env_open(struct env *e, fake_fn fn)
{
    memset(e, 0, sizeof(*e));
    setenv(KEY_ENV, KEY, 1);
    struct fo_err err;
    struct orch_config cfg = {.roster_json = roster,
                              .roster_json_len = strlen(roster)};
    if (fn) {
        e->f = fake_start(fn);
        snprintf(e->url, sizeof(e->url), "http://127.0.0.1:%d", e->f->port);
        const char *names[3] = {"m-cheap", "m-capable", "m-frontier"};
        for (int t = 0; t < 3; t++)
            e->p[t] = (struct orch_model_provider){.api = ORCH_EXEC_CHAT,
                                                   .url = e->url,
                                                   .model = names[t],
                                                   .api_key_env = KEY_ENV,
                                                   .tier = t};
        e->mc = (struct orch_model_config){.providers = e->p,
                                           .n_providers = 3,
                                           .attempts = 1,
                                           .timeout_ms = 10000};
        cfg.models = &e->mc;
    }
    cr_assert_eq(orch_create(&cfg, &e->o, &err), FO_OK, "%s", err.msg);
    e->dir = tu_tmpdir();
    cr_assert_eq(ledger_open(e->dir, LEDGER_OPEN_CREATE, NULL, &e->l, &err),
                 FO_OK, "%s", err.msg);
    e->w = (struct orch_witness){.ledger = e->l};
}

/* Verifies deeply, checks the key is nowhere on disk, frees everything. */
static void env_close(struct env *e)
{
    struct fo_err err;
    struct ledger_verify_result v;
    cr_assert_eq(ledger_verify(e->l, LEDGER_VERIFY_DEEP, NULL, NULL, &v, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(v.ok && v.deep == 1 && v.bodies_bad == 0);
    ledger_close(e->l);
    orch_free(e->o);
    if (e->f) {
        fake_stop(e->f);
        fake_free(e->f);
    }
    const char *files[] = {"ledger.db", "ledger.db-wal", "ledger.db-shm"};
    for (int i = 0; i < 3; i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", e->dir, files[i]);
        cr_assert_not(tu_file_has(path, "SECRET"), "key in %s", files[i]);
    }
    tu_rmrf(e->dir);
}

/* "kind kind kind " of entries from..end. */
static void kinds(struct env *e, int64_t from, char *out, size_t size)
{
    struct fo_err err;
    out[0] = '\0';
    for (int64_t s = from;; s++) {
        struct ledger_entry en;
        if (ledger_get(e->l, s, &en, NULL, &err) != FO_OK)
            break;
        size_t n = strlen(out);
        snprintf(out + n, size - n, "%s ", en.kind);
    }
}

static cJSON *body_of(struct env *e, int64_t seq)
{
    struct fo_err err;
    char *b = NULL;
    size_t bl = 0;
    cr_assert_eq(ledger_body(e->l, seq, &b, &bl, &err), FO_OK, "%s", err.msg);
    cJSON *j = cJSON_Parse(b);
    free(b);
    return j;
}

/* The kinds along the causal chain of seq, root first. */
static void chain(struct env *e, int64_t seq, char *out, size_t size)
{
    struct fo_err err;
    char tmp[64][LEDGER_KIND_MAX + 1];
    int n = 0;
    while (seq >= 0 && n < 64) {
        struct ledger_entry en;
        cr_assert_eq(ledger_get(e->l, seq, &en, NULL, &err), FO_OK);
        snprintf(tmp[n++], sizeof(tmp[0]), "%s", en.kind);
        seq = en.parent;
    }
    out[0] = '\0';
    while (n-- > 0) {
        size_t l = strlen(out);
        snprintf(out + l, size - l, "%s ", tmp[n]);
    }
}

/* The seq of the first entry of kind (whose body's "id" is id, when id is
 * given), or -1. */
static int64_t find_kind(struct env *e, const char *kind, const char *id)
{
    struct fo_err err;
    for (int64_t s = 0;; s++) {
        struct ledger_entry en;
        if (ledger_get(e->l, s, &en, NULL, &err) != FO_OK)
            return -1;
        if (strcmp(en.kind, kind) != 0)
            continue;
        if (!id)
            return s;
        cJSON *b = body_of(e, s);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "id");
        int hit = cJSON_IsString(v) && !strcmp(v->valuestring, id);
        cJSON_Delete(b);
        if (hit)
            return s;
    }
}

static int count_kind(struct env *e, const char *kind)
{
    struct fo_err err;
    int n = 0;
    for (int64_t s = 0;; s++) {
        struct ledger_entry en;
        if (ledger_get(e->l, s, &en, NULL, &err) != FO_OK)
            return n;
        n += strcmp(en.kind, kind) == 0;
    }
}

static cJSON *submit(struct env *e, const char *request, int max_calls,
                     int want_rc)
{
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *out = NULL;
    struct orch_submit_opts opts = {.max_model_calls = max_calls};
    int rc = tu_submit(e->o, &e->w, request, &opts, &out, &err);
    cr_assert_eq(rc, want_rc, "rc %d: %s", rc, err.msg);
    return out;
}

/* ---- scripts ------------------------------------------------------------- */

static const char *one_task(struct fake *f, const char *role, int n,
                            const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write a haiku about ledgers\","
               "\"done_when\":[\"it is a haiku\"]}]}";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"three lines\"}";
    if (!strcmp(role, "synthesizer"))
        return "A haiku about ledgers: entries chained in hash.";
    return "entries chained in hash";
}

Test(loop, one_task_submit_end_to_end)
{
    struct env e;
    env_open(&e, one_task);
    cJSON *out = submit(&e, "write a haiku about ledgers", 0, FO_OK);
    cr_assert_str_eq(tu_str(out, "answer"),
                     "A haiku about ledgers: entries chained in hash.");
    cr_assert_eq(tu_num(out, "request_seq"), 0);
    cr_assert_eq(strlen(tu_str(out, "checkpoint")), 64);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert_eq(tu_num(out, "model_calls"), 4);
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict answer ");
    chain(&e, 5, k, sizeof(k));
    cr_assert_str_eq(k, "request plan task result verdict ");
    cJSON *v = body_of(&e, 5);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "pass")));
    cr_assert_str_eq(tu_str(v, "by"), "validator");
    cr_assert_str_eq(tu_str(v, "model"), "m-cheap");
    cJSON_Delete(v);
    cJSON *a = body_of(&e, 6);
    const cJSON *cov = cJSON_GetObjectItemCaseSensitive(a, "coverage");
    cr_assert_not_null(cov);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cov, "flagged")));
    cJSON_Delete(a);
    cr_assert_str_eq(e.f->log, "coordinator:m-capable task:m-cheap "
                               "validator:m-cheap synthesizer:m-capable ");
    cJSON_Delete(out);
    env_close(&e);
}

static const char *three_tasks(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":["
               "{\"id\":\"T1\",\"agent\":\"coder\",\"instruction\":\"code "
               "the parser\",\"done_when\":{\"contains\":\"parser\"}},"
               "{\"id\":\"T2\",\"agent\":\"writer\",\"instruction\":\"write "
               "the docs\",\"depends_on\":[\"T1\"]},"
               "{\"id\":\"T3\",\"agent\":\"echo\",\"instruction\":\"echo "
               "hello\"}]}";
    if (!strcmp(role, "classifier"))
        return "The best agent: {\"lane\": \"coder\"}";
    if (!strcmp(role, "synthesizer"))
        return "parser coded, docs written, hello echoed";
    if (strstr(prompt, "code the parser"))
        return "int parser(void);";
    cr_assert(strstr(prompt, "int parser(void);"), "no upstream: %s", prompt);
    return "the docs of the parser";
}

Test(loop, three_task_submit_end_to_end)
{
    struct env e;
    env_open(&e, three_tasks);
    cJSON *out = submit(&e, "code a parser and write its docs", 0, FO_OK);
    cr_assert_str_eq(tu_str(out, "answer"),
                     "parser coded, docs written, hello echoed");
    char k[512];
    /* wave 1: T1 and T3 run at once, each judged when its result lands;
     * wave 2: T2, which reads T1's output, only after both are judged */
    cr_assert_eq(count_kind(&e, "task"), 3);
    cr_assert_eq(count_kind(&e, "result"), 3);
    cr_assert_eq(count_kind(&e, "verdict"), 3);
    const char *ids[] = {"T1", "T2", "T3"};
    for (size_t i = 0; i < 3; i++) {
        chain(&e, find_kind(&e, "verdict", ids[i]), k, sizeof(k));
        cr_assert_str_eq(k, "request plan task result verdict ");
    }
    int64_t t2 = find_kind(&e, "task", "T2");
    cr_assert_gt(t2, find_kind(&e, "verdict", "T1"));
    cr_assert_gt(t2, find_kind(&e, "verdict", "T3"));
    cr_assert_gt(find_kind(&e, "answer", NULL), find_kind(&e, "verdict", "T2"));
    cJSON *v = body_of(&e, find_kind(&e, "verdict", "T1"));
    cr_assert_str_eq(tu_str(v, "by"), "assertions");
    cJSON_Delete(v);
    cr_assert_eq(e.f->count[R_VALID], 0); /* no plain-text criteria */
    cJSON *rt = body_of(&e, 1);           /* the router escalated: a tie */
    cr_assert(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rt, "needs_escalation")));
    cr_assert_str_eq(tu_str(rt, "lane"), "coder");
    cr_assert_str_eq(tu_str(rt, "by"), "classifier");
    cJSON_Delete(rt);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- lenient plans, corrective retries ---------------------------------- */

static const char *lenient_reply;

static const char *lenient(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    cr_assert_str_eq(role, "coordinator");
    return lenient_reply;
}

Test(loop, plans_parse_leniently)
{
    const char *replies[] = {
        "Sure! Here is the plan you asked for: {\"tasks\":[{\"id\":\"T1\","
        "\"agent\":\"writer\",\"instruction\":\"write it\"}]} Hope it helps.",
        "```json\n{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
        "\"instruction\":\"write it\"}]}\n```",
        "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\",\"instruction\":"
        "\"write it\"} // the only task\n]}",
    };
    for (int i = 0; i < 3; i++) {
        lenient_reply = replies[i];
        struct env e;
        env_open(&e, lenient);
        struct fo_err err;
        cJSON *out = NULL;
        cr_assert_eq(tu_plan_request(e.o, &e.w, "write an essay", &out, &err),
                     FO_OK, "%d: %s", i, err.msg);
        cr_assert_eq(tu_num(out, "attempts"), 1);
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(out, "plan");
        cr_assert_eq(
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(plan, "tasks")),
            1);
        char k[256];
        kinds(&e, 0, k, sizeof(k));
        cr_assert_str_eq(k, "request route plan ");
        cJSON_Delete(out);
        env_close(&e);
    }
}

static const char *bad_then_good(struct fake *f, const char *role, int n,
                                 const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return n == 0 ? "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"nobody\","
                        "\"instruction\":\"x\"}]}"
                      : "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
                        "\"instruction\":\"write\"}]}";
    return "done";
}

Test(loop, a_bad_plan_is_retried_with_what_was_wrong)
{
    struct env e;
    env_open(&e, bad_then_good);
    cJSON *out = submit(&e, "write an essay", 0, FO_OK);
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route coordinator_attempt plan task result "
                        "verdict answer ");
    cJSON *a = body_of(&e, 2);
    cr_assert(strstr(tu_str(a, "error"), "unknown agent \"nobody\""), "%s",
              tu_str(a, "error"));
    cJSON_Delete(a);
    /* the second coordinator request names the fault */
    cr_assert(strstr(e.f->prompts[1], "unknown agent \"nobody\""), "%s",
              e.f->prompts[1]);
    cJSON_Delete(out);
    env_close(&e);
}

static const char *never_valid(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    cr_assert_str_eq(role, "coordinator");
    return "I would rather not make a plan { today";
}

Test(loop, no_valid_plan_after_retries_is_upstream_and_witnessed)
{
    struct env e;
    env_open(&e, never_valid);
    struct fo_err err;
    cJSON *out = NULL;
    struct orch_submit_opts opts = {0};
    cr_assert_eq(tu_submit(e.o, &e.w, "write an essay", &opts, &out, &err),
                 FO_E_UPSTREAM);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, "coordinator"), "%s", err.msg);
    cr_assert_eq(e.f->count[R_COORD], ORCH_JSON_ATTEMPTS);
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route coordinator_attempt coordinator_attempt "
                        "coordinator_attempt error ");
    cJSON *er = body_of(&e, 5);
    cr_assert_str_eq(tu_str(er, "code"), "bad_upstream");
    cJSON_Delete(er);
    env_close(&e);
}

/* ---- assertions and escalation ------------------------------------------- */

static const char *contains_fails_on_cheap(struct fake *f, const char *role,
                                           int n, const char *model,
                                           const char *prompt)
{
    (void)f, (void)n, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write the token\",\"done_when\":"
               "[{\"contains\":\"OK-DONE\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "the token is OK-DONE";
    cr_assert_str_eq(role, "task");
    return !strcmp(model, "m-cheap") ? "nope" : "OK-DONE";
}

Test(loop, failed_assertion_fails_without_validator_and_names_it)
{
    struct env e;
    env_open(&e, contains_fails_on_cheap);
    cJSON *out = submit(&e, "write the token", 0, FO_OK);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert_eq(tu_num(out, "escalations"), 1);
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict "
                        "tier_escalation task result verdict answer ");
    cr_assert_eq(e.f->count[R_VALID], 0);
    cJSON *v = body_of(&e, 5);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "pass")));
    cr_assert_str_eq(tu_str(v, "by"), "assertions");
    const cJSON *failed = cJSON_GetObjectItemCaseSensitive(v, "failed");
    cr_assert(strstr(cJSON_GetArrayItem(failed, 0)->valuestring, "OK-DONE"));
    cJSON_Delete(v);
    /* the escalated task's prompt names the failed assertion */
    cr_assert_str_eq(e.f->log, "coordinator:m-capable task:m-cheap "
                               "task:m-capable synthesizer:m-capable ");
    const char *p = e.f->prompts[2];
    cr_assert(strstr(p, "contains \"OK-DONE\"") &&
                  strstr(p, "not found in the output"),
              "%s", p);
    cJSON *esc = body_of(&e, 6);
    cr_assert_str_eq(tu_str(esc, "from"), "cheap");
    cr_assert_str_eq(tu_str(esc, "to"), "capable");
    cJSON_Delete(esc);
    cJSON *last = body_of(&e, 9);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(last, "pass")));
    cr_assert_str_eq(tu_str(last, "tier"), "capable");
    cJSON_Delete(last);
    chain(&e, 9, k, sizeof(k));
    cr_assert_str_eq(k, "request plan task result verdict tier_escalation "
                        "task result verdict ");
    cJSON_Delete(out);
    env_close(&e);
}

static const char *empty_criteria(struct fake *f, const char *role, int n,
                                  const char *model, const char *prompt)
{
    (void)f, (void)n, (void)prompt, (void)model;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write anything\",\"done_when\":[]}]}";
    if (!strcmp(role, "synthesizer"))
        return "anything";
    return "anything";
}

/* done_when: [] is no criteria: the task is unjudged, never a pass by
 * assertions, and the run is not ok (before, the verdict said pass, by
 * assertions, and the CLI said "every task passed"). */
Test(loop, an_empty_done_when_is_no_criteria_not_a_pass)
{
    struct env e;
    env_open(&e, empty_criteria);
    cJSON *out = submit(&e, "write anything", 0, FO_OK);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert_eq(tu_num(out, "unjudged"), 1);
    cJSON *v = body_of(&e, find_kind(&e, "verdict", "T1"));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "pass")));
    cr_assert_str_eq(tu_str(v, "by"), "unjudged");
    cJSON_Delete(v);
    cJSON_Delete(out);
    env_close(&e);
    /* the assertion checker itself: an empty list does not pass */
    cJSON *none = cJSON_CreateArray();
    struct orch_verdict vd;
    struct fo_err err;
    cr_assert_eq(orch_assert_check(none, "x", 1, 0, &vd, &err), FO_OK);
    cr_assert_eq(vd.pass, 0);
    orch_verdict_release(&vd);
    cJSON_Delete(none);
}

static const char *only_frontier_passes(struct fake *f, const char *role, int n,
                                        const char *model, const char *prompt)
{
    (void)f, (void)n, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write well\",\"done_when\":\"it is "
               "good\"}]}";
    if (!strcmp(role, "validator"))
        return strstr(prompt, "frontier work") ? "{\"pass\":true}"
                                               : "{\"pass\":false,\"reason\":"
                                                 "\"too weak\"}";
    if (!strcmp(role, "synthesizer"))
        return "frontier work";
    return !strcmp(model, "m-frontier") ? "frontier work" : "weak work";
}

Test(loop, escalation_climbs_the_ladder_and_stops_at_the_first_pass)
{
    struct env e;
    env_open(&e, only_frontier_passes);
    cJSON *out = submit(&e, "write well", 0, FO_OK);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert_eq(tu_num(out, "escalations"), 2);
    cr_assert_str_eq(e.f->log,
                     "coordinator:m-capable task:m-cheap validator:m-cheap "
                     "task:m-capable validator:m-cheap task:m-frontier "
                     "validator:m-cheap synthesizer:m-capable ");
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict "
                        "tier_escalation task result verdict tier_escalation "
                        "task result verdict answer ");
    cJSON *esc = body_of(&e, 10);
    cr_assert_str_eq(tu_str(esc, "from"), "capable");
    cr_assert_str_eq(tu_str(esc, "to"), "frontier");
    char *escs = cJSON_PrintUnformatted(esc);
    cr_assert(strstr(escs, "too weak") != NULL, "%s", escs);
    free(escs);
    cJSON_Delete(esc);
    /* the validator's reason reached the next attempt */
    cr_assert(strstr(e.f->prompts[3], "validator: too weak"), "%s",
              e.f->prompts[3]);
    cJSON_Delete(out);
    env_close(&e);
}

static const char *never_passes(struct fake *f, const char *role, int n,
                                const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write\",\"done_when\":[{\"contains\":"
               "\"never\"}]}]}";
    return "no";
}

Test(loop, escalation_stops_when_the_budget_is_spent)
{
    struct env e;
    env_open(&e, never_passes);
    /* coordinator, task, escalated task: the third escalation has no call */
    cJSON *out = submit(&e, "write", 3, FO_OK);
    cr_assert(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "budget_spent")));
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict "
                        "tier_escalation task result verdict budget answer ");
    cJSON *b = body_of(&e, 10);
    cr_assert_str_eq(tu_str(b, "stopped_before"), "escalation of T1");
    cJSON_Delete(b);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- budgets --------------------------------------------------------------
 */

Test(loop, budget_of_one_call_stops_after_planning)
{
    struct env e;
    env_open(&e, one_task);
    cJSON *out = submit(&e, "write a haiku about ledgers", 1, FO_OK);
    cr_assert_str_eq(tu_str(out, "answer"), ORCH_BUDGET_ANSWER);
    cr_assert(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "budget_spent")));
    cr_assert_str_eq(tu_str(out, "budget_reason"), "max_model_calls");
    char k[256];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan budget answer ");
    cr_assert_eq(e.f->count[R_COORD], 1);
    cr_assert_eq(e.f->count[R_TASK], 0);
    cJSON_Delete(out);
    env_close(&e);
}

Test(loop, budget_of_three_calls_stops_before_synthesis)
{
    struct env e;
    env_open(&e, one_task);
    cJSON *out = submit(&e, "write a haiku about ledgers", 3, FO_OK);
    cr_assert_str_eq(tu_str(out, "answer"), ORCH_BUDGET_ANSWER);
    char k[256];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k,
                     "request route plan task result verdict budget answer ");
    cJSON *b = body_of(&e, 6);
    cr_assert_str_eq(tu_str(b, "stopped_before"), "synthesizer");
    cr_assert_eq(tu_num(b, "model_calls"), 3);
    cJSON_Delete(b);
    cr_assert_eq(e.f->count[R_SYNTH], 0);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- the same dispatch never twice ----------------------------------------
 */

static const char *repeated_task(struct fake *f, const char *role, int n,
                                 const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write\"},{\"id\":\"T2\",\"agent\":"
               "\"writer\",\"instruction\":\"write\"}]}";
    return "text";
}

Test(loop, the_same_dispatch_runs_once)
{
    struct env e;
    env_open(&e, repeated_task);
    cJSON *out = submit(&e, "write", 0, FO_OK);
    char k[256];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task skip result verdict answer ");
    cr_assert_eq(e.f->count[R_TASK], 1);
    cJSON *s = body_of(&e, 4);
    cr_assert_str_eq(tu_str(s, "duplicate_of"), "T1");
    cJSON_Delete(s);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- stub models, methods, CLI ------------------------------------------- */

Test(loop, stub_models_answer_without_a_provider)
{
    struct env e;
    env_open(&e, NULL);
    cJSON *out = submit(&e, "echo this back", 0, FO_OK);
    char k[256];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict answer ");
    cJSON *plan = body_of(&e, 2);
    const cJSON *t0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(plan, "tasks"), 0);
    cr_assert_str_eq(tu_str(t0, "agent"), "echo");
    cr_assert_str_eq(tu_str(t0, "instruction"), "echo this back");
    cr_assert_str_eq(tu_str(plan, "model"), "stub");
    cJSON_Delete(plan);
    cr_assert(strstr(tu_str(out, "answer"), "echo this back"), "%s",
              tu_str(out, "answer"));
    /* stub roles count: coordinator and synthesizer */
    cr_assert_eq(tu_num(out, "model_calls"), 2);
    cJSON_Delete(out);
    /* a budget of one stops a stub run after planning too */
    out = submit(&e, "echo this back", 1, FO_OK);
    cr_assert(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "budget_spent")));
    cJSON_Delete(out);
    env_close(&e);
}

Test(loop, methods_plan_and_submit_through_the_table)
{
    struct env e;
    env_open(&e, NULL);
    struct surf_ctx ctx = {.ledger = e.l, .orch = e.o};
    tu_host(&ctx); /* a run has one entry: an engine's */
    struct fo_err err;
    cJSON *in = cJSON_Parse("{\"request\":\"echo it\",\"max_model_calls\":5}");
    cJSON *out = NULL;
    cr_assert_eq(surf_call(&ctx, surf_find("submit"), in, &out, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(out, "answer"));
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(out, "checkpoint"));
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(out, "request_seq"));
    cJSON_Delete(out);
    cJSON_Delete(in);
    in = cJSON_Parse("{\"request\":\"echo it\"}");
    cr_assert_eq(surf_call(&ctx, surf_find("plan"), in, &out, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(out, "plan"));
    cJSON_Delete(out);
    cJSON_Delete(in);
    in = cJSON_Parse("{\"request\":\"\"}");
    cr_assert_eq(surf_call(&ctx, surf_find("submit"), in, &out, &err),
                 FO_E_INVALID);
    cJSON_Delete(in);
    in = cJSON_Parse("{\"request\":\"x\",\"max_model_calls\":0}");
    cr_assert_eq(surf_call(&ctx, surf_find("submit"), in, &out, &err),
                 FO_E_INVALID);
    cJSON_Delete(in);
    tu_unhost(&ctx);
    env_close(&e);
}

Test(loop, cli_submit_and_plan_with_a_chat_server)
{
    struct env e;
    env_open(&e, one_task);
    char url[80], rpath[600];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", e.f->port);
    snprintf(rpath, sizeof(rpath), "%s/roster.json", e.dir);
    cr_assert_eq(tu_write_file(rpath, roster, strlen(roster)), 0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", e.dir, "--json", "submit", "write", "a",
                  "haiku", "--chat-url", url, "--model", "m-any",
                  "--api-key-env", KEY_ENV, "--roster", rpath, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    cr_assert_str_eq(tu_str(out, "answer"),
                     "A haiku about ledgers: entries chained in hash.");
    cJSON_Delete(out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", e.dir, "plan", "write", "a", "haiku",
                  "--chat-url", url, "--model", "m-any", "--roster", rpath,
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "write a haiku about ledgers"), "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", e.dir, "submit", "x", "--model", "m", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    /* a stub run from the CLI with a budget */
    r = tu_forumv(NULL, "--ledger", e.dir, "--json", "submit", "echo", "it",
                  "--max-model-calls", "1", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    out = tu_run_json(&r);
    cr_assert_str_eq(tu_str(out, "answer"), ORCH_BUDGET_ANSWER);
    cJSON_Delete(out);
    tu_run_free(&r);
    /* the fake saw the key in a header, the ledger never did */
    cr_assert(strstr(e.f->log, "coordinator:m-any"), "%s", e.f->log);
    ledger_close(e.l);
    struct fo_err err;
    cr_assert_eq(ledger_open(e.dir, 0, NULL, &e.l, &err), FO_OK, "%s", err.msg);
    env_close(&e);
}

/* ---- the tasks of a wave run at once ------------------------------------ */

static const char *three_sleepers(struct fake *f, const char *role, int n,
                                  const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":["
               "{\"id\":\"A\",\"agent\":\"sleeper\",\"instruction\":\"a\"},"
               "{\"id\":\"B\",\"agent\":\"sleeper\",\"instruction\":\"b\"},"
               "{\"id\":\"C\",\"agent\":\"sleeper\",\"instruction\":\"c\"}]}";
    if (!strcmp(role, "classifier"))
        return "{\"lane\": \"sleeper\"}";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"ok\"}";
    return "all three slept";
}

Test(loop, the_tasks_of_a_wave_run_at_once)
{
    struct env e;
    env_open(&e, three_sleepers);
    static const char r[] =
        "{\"lanes\":[{\"name\":\"sleeper\",\"category\":\"c\",\"domain\":"
        "\"sleeps\",\"keywords\":[\"sleep\"],\"model_tier\":\"cheap\","
        "\"executor\":\"cli\"}]}";
    struct orch_config cfg = {.roster_json = r,
                              .roster_json_len = strlen(r),
                              .cmd = "sh -c 'date +%s%N; sleep 0.4; date "
                                     "+%s%N' x",
                              .models = &e.mc,
                              .max_parallel = 4};
    struct orch *o = NULL;
    struct fo_err err;
    cr_assert_eq(orch_create(&cfg, &o, &err), FO_OK, "%s", err.msg);
    cJSON *out = NULL;
    cr_assert_eq(tu_submit(o, &e.w, "sleep three times", NULL, &out, &err),
                 FO_OK, "%s", err.msg);
    /* every task started before any of them ended: each one's start time
     * is earlier than every other one's end time */
    long long start[3], end[3];
    const char *ids[] = {"A", "B", "C"};
    for (int i = 0; i < 3; i++) {
        cJSON *res = body_of(&e, find_kind(&e, "result", ids[i]));
        cr_assert_eq(
            sscanf(tu_str(res, "output"), "%lld %lld", &start[i], &end[i]), 2,
            "%s", tu_str(res, "output"));
        cJSON_Delete(res);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            cr_assert_lt(start[i], end[j], "task %s began after %s ended",
                         ids[i], ids[j]);
    cr_assert_eq(count_kind(&e, "verdict"), 3);
    cJSON_Delete(out);
    orch_free(o);
    env_close(&e);
}

/* ---- the same loop on the Anthropic Messages API ------------------------ */

Test(loop, one_task_submit_on_the_anthropic_api)
{
    struct env e;
    env_open(&e, one_task);
    /* the same fake, now asked in Anthropic's shape for every tier */
    struct orch_model_provider p = {.api = ORCH_EXEC_ANTHROPIC,
                                    .url = e.url,
                                    .model = "claude-fake",
                                    .api_key_env = KEY_ENV,
                                    .tier = ORCH_TIER_ANY,
                                    .max_tokens = 256};
    struct orch_model_config mc = {
        .providers = &p, .n_providers = 1, .attempts = 1, .timeout_ms = 10000};
    static const char r[] =
        "{\"lanes\":[{\"name\":\"writer\",\"category\":\"c\",\"domain\":"
        "\"writes prose\",\"keywords\":[\"write\",\"haiku\"],"
        "\"model_tier\":\"cheap\",\"executor\":\"anthropic\"}]}";
    struct orch_config cfg = {
        .roster_json = r, .roster_json_len = strlen(r), .models = &mc};
    struct orch *o = NULL;
    struct fo_err err;
    cr_assert_eq(orch_create(&cfg, &o, &err), FO_OK, "%s", err.msg);
    cJSON *out = NULL;
    cr_assert_eq(
        tu_submit(o, &e.w, "write a haiku about ledgers", NULL, &out, &err),
        FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(out, "answer"),
                     "A haiku about ledgers: entries chained in hash.");
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cJSON *vd = body_of(&e, 5);
    char *vt = cJSON_PrintUnformatted(vd);
    cr_assert_str_eq(k, "request route plan task result verdict answer ",
                     "verdict: %s; log: %s", vt, e.f->log);
    free(vt);
    cJSON_Delete(vd);
    /* coordinator, task, validator, synthesizer: all in Anthropic's shape,
     * the key in a header only */
    cr_assert_geq(e.f->anthropic, 4, "%d", e.f->anthropic);
    cr_assert(strstr(e.f->log, "coordinator:claude-fake"), "%s", e.f->log);
    cJSON *res = body_of(&e, 4);
    cr_assert_str_eq(tu_str(res, "model"), "claude-fake");
    cJSON_Delete(res);
    cJSON_Delete(out);
    orch_free(o);
    env_close(&e);
}

/* `forum submit` without provider flags uses the tiers of the data dir's
 * forum.json "models", as the daemon does. */
Test(loop, cli_submit_uses_the_tiers_of_forum_json)
{
    struct env e;
    env_open(&e, one_task);
    char rpath[600], cpath[600], cfg[1024];
    snprintf(rpath, sizeof(rpath), "%s/roster.json", e.dir);
    cr_assert_eq(tu_write_file(rpath, roster, strlen(roster)), 0);
    snprintf(cpath, sizeof(cpath), "%s/forum.json", e.dir);
    int n = snprintf(
        cfg, sizeof(cfg),
        "{\"models\":{\"providers\":["
        "{\"api\":\"chat\",\"url\":\"%s\",\"model\":\"cfg-cheap\","
        "\"tier\":\"cheap\",\"api_key_env\":\"%s\"},"
        "{\"api\":\"chat\",\"url\":\"%s\",\"model\":\"cfg-capable\","
        "\"tier\":\"capable\",\"api_key_env\":\"%s\"}],\"attempts\":1}}",
        e.url, KEY_ENV, e.url, KEY_ENV);
    cr_assert_eq(tu_write_file(cpath, cfg, (size_t)n), 0);
    struct tu_run r = tu_forumv(NULL, "--ledger", e.dir, "--json", "submit",
                                "write", "a", "haiku", "--roster", rpath, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    cr_assert_str_eq(tu_str(out, "answer"),
                     "A haiku about ledgers: entries chained in hash.");
    cJSON_Delete(out);
    tu_run_free(&r);
    /* the coordinator asks the capable tier, the writer lane the cheap one */
    cr_assert(strstr(e.f->log, "coordinator:cfg-capable"), "%s", e.f->log);
    cr_assert(strstr(e.f->log, "task:cfg-cheap"), "%s", e.f->log);
    env_close(&e);
}

/* ---- honest executors ------------------------------------------------- */

/* A plan of two tasks on default-roster lanes whose executor is "cli". */
static const char *default_lanes(struct fake *f, const char *role, int n,
                                 const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"backend\","
               "\"instruction\":\"add a login endpoint\"},"
               "{\"id\":\"T2\",\"agent\":\"code-review\",\"instruction\":"
               "\"review the "
               "login endpoint\",\"depends_on\":[\"T1\"]}]}";
    if (!strcmp(role, "classifier"))
        return "{\"lane\": \"backend\"}";
    if (!strcmp(role, "synthesizer"))
        return "the endpoint is added and tested";
    return "MODEL-WROTE-THIS";
}

/* The results of a run's tasks, by seq, from the ledger in dir. */
static int count_results(const char *dir, const char *want_model,
                         int *stub_results)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    int n = 0;
    *stub_results = 0;
    for (int64_t s = 0;; s++) {
        struct ledger_entry en;
        if (ledger_get(l, s, &en, NULL, &err) != FO_OK)
            break;
        if (strcmp(en.kind, "result") != 0)
            continue;
        char *b = NULL;
        size_t bl = 0;
        cr_assert_eq(ledger_body(l, s, &b, &bl, &err), FO_OK);
        cJSON *j = cJSON_Parse(b);
        free(b);
        const char *m = tu_str(j, "model");
        if (!strcmp(m, want_model))
            n++;
        if (!strcmp(m, "stub"))
            (*stub_results)++;
        cJSON_Delete(j);
    }
    ledger_close(l);
    return n;
}

Test(honest, a_chat_url_drives_every_task_of_the_default_roster)
{
    setenv(KEY_ENV, KEY, 1);
    struct fake *f = fake_start(default_lanes);
    char *dir = tu_tmpdir();
    char url[80];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit",
                  "add a login endpoint to the api server", "--chat-url", url,
                  "--model", "m-any", "--api-key-env", KEY_ENV, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    cr_assert_str_eq(tu_str(out, "answer"), "the endpoint is added and tested");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "models")));
    cJSON_Delete(out);
    tu_run_free(&r);
    fake_stop(f);
    /* both tasks were asked of the model, none ran on the stub */
    cr_assert_eq(f->count[R_TASK], 2, "%s", f->log);
    int stubs = 0;
    cr_assert_eq(count_results(dir, "m-any", &stubs), 2);
    cr_assert_eq(stubs, 0);
    fake_free(f);
    tu_rmrf(dir);
}

Test(honest, with_nothing_configured_the_answer_says_no_model_was_used)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "submit",
                                "add a login endpoint to the api server", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(strncmp(r.out, ORCH_NO_MODEL_NOTE, strlen(ORCH_NO_MODEL_NOTE)),
                 0, "%s", r.out);
    cr_assert(strstr(r.err, "no model was used"), "%s", r.err);
    cr_assert_null(strstr(r.err, "every task passed"), "%s", r.err);
    cr_assert(strstr(r.err, "not judged"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "submit",
                  "add a login endpoint to the api server", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "models")));
    cr_assert_eq(tu_num(out, "unjudged"), 1);
    const cJSON *t0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(out, "tasks"), 0);
    cr_assert_str_eq(tu_str(t0, "state"), "unjudged");
    /* the verdict is on record as unjudged, not as a pass */
    long long vs = 0;
    cr_assert(fo_json_get_int(t0, "verdict_seq", 0, INT64_MAX, &vs) == FO_OK);
    cJSON_Delete(out);
    tu_run_free(&r);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    char *b = NULL;
    size_t bl = 0;
    cr_assert_eq(ledger_body(l, vs, &b, &bl, &err), FO_OK);
    cJSON *v = cJSON_Parse(b);
    free(b);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "pass")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "judged")));
    cr_assert_str_eq(tu_str(v, "by"), "unjudged");
    cJSON_Delete(v);
    ledger_close(l);
    tu_rmrf(dir);
}

/* --cmd is a model on the command line: it answers every role (plan,
 * route, verdicts, answer) as well as the tasks, and a command that cannot
 * run is an error of the run. */
Test(honest, cmd_drives_every_role_and_an_unrunnable_one_fails_the_run,
     .timeout = 60)
{
    char *dir = tu_tmpdir(), *notes = tu_tmpdir();
    char log[700], cmd[1400], cfg[700], json[1400];
    snprintf(log, sizeof(log), "%s/prompts.log", notes);
    /* the command runs sandboxed (the model profile): its notes dir is a
     * state dir, its script a read dir (as root it runs as 65534) */
    if (geteuid() == 0)
        cr_assert_eq(chown(notes, 65534, 65534), 0);
    snprintf(cfg, sizeof(cfg), "%s/forum.json", dir);
    snprintf(json, sizeof(json),
             "{\"cmd_sandbox\": {\"state_dirs\": [\"%s\"], \"read_dirs\": "
             "[\"%s/tests\"]}}",
             notes, FORUM_SRC);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    /* a command that notes the first line of every prompt, then answers */
    snprintf(cmd, sizeof(cmd),
             "sh -c 'printf \"%%s\\n\" \"$1\" | head -n 1 >> %s; exec sh "
             "%s/tests/fake_cli.sh ok \"$1\"' x",
             log, FORUM_SRC);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit",
                  "add a login endpoint to the api server", "--cmd", cmd, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    cr_assert_str_eq(tu_str(out, "answer"), "done: the answer, from the "
                                            "command\n");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "models")));
    cJSON_Delete(out);
    tu_run_free(&r);
    char *seen = tu_read_file(log, NULL);
    cr_assert_not_null(seen);
    cr_assert(strstr(seen, "You are the coordinator"), "%s", seen);
    cr_assert(strstr(seen, "You are the synthesizer"), "%s", seen);
    cr_assert(strstr(seen, "add a login endpoint") || strstr(seen, "do the "
                                                                   "work"),
              "no task prompt: %s", seen);
    free(seen);
    r = tu_forumv(NULL, "--ledger", dir, "submit", "add a login endpoint",
                  "--cmd", "no-such-model-cli-xyz run", NULL);
    cr_assert_neq(r.status, 0, "an unrunnable command exited 0");
    cr_assert(strstr(r.err, "no-such-model-cli-xyz"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(notes);
    tu_rmrf(dir);
}
