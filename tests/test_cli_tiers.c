/* test_cli_tiers: the --tier provider groups of forum submit, plan, serve
 * and mcp against two fake model servers on 127.0.0.1, one per tier: the
 * cheap model fails a done_when assertion, the run escalates to the capable
 * one; the fallback order within a tier; every usage error. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

#define KEY "sk-test-SECRET-tiers-0123456789"
#define KEY_ENV "FORUM_TEST_TIERS_KEY"
#define UNSET_ENV "FORUM_TEST_TIERS_UNSET"

static const char roster[] =
    "{\"lanes\":[{\"name\":\"writer\",\"category\":\"c\",\"domain\":"
    "\"writes prose\",\"keywords\":[\"write\",\"token\"],"
    "\"model_tier\":\"cheap\",\"executor\":\"chat\"}]}";

/* Both servers run this script; what a task answers depends on the model
 * asked: m1 (cheap) misses the token, every other model writes it. */
static const char *script(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    (void)f, (void)n, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write the token\",\"done_when\":"
               "[{\"contains\":\"OK-DONE\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "the token is OK-DONE";
    if (!strcmp(role, "task"))
        return !strcmp(model, "m1") ? "nope" : "OK-DONE";
    return "{\"pass\": false, \"reason\": \"no role but these is asked\"}";
}

struct two {
    struct fake *a, *b; /* a: the cheap server, b: the capable one */
    char url_a[64], url_b[64], roster_path[600];
    char *dir;
};

static void two_open(struct two *t)
{
    memset(t, 0, sizeof(*t));
    setenv(KEY_ENV, KEY, 1);
    unsetenv(UNSET_ENV);
    t->a = fake_start(script);
    t->b = fake_start(script);
    snprintf(t->url_a, sizeof(t->url_a), "http://127.0.0.1:%d", t->a->port);
    snprintf(t->url_b, sizeof(t->url_b), "http://127.0.0.1:%d/v1", t->b->port);
    t->dir = tu_tmpdir();
    snprintf(t->roster_path, sizeof(t->roster_path), "%s/roster.json", t->dir);
    cr_assert_eq(tu_write_file(t->roster_path, roster, strlen(roster)), 0);
}

static void two_close(struct two *t)
{
    fake_stop(t->a);
    fake_stop(t->b);
    const char *files[] = {"ledger.db", "ledger.db-wal", "ledger.db-shm",
                           "forum.log"};
    for (int i = 0; i < 4; i++) {
        char path[700];
        snprintf(path, sizeof(path), "%s/%s", t->dir, files[i]);
        cr_assert_not(tu_file_has(path, "SECRET"), "the key is in %s",
                      files[i]);
    }
    fake_free(t->a);
    fake_free(t->b);
    tu_rmrf(t->dir);
}

/* The two groups: cheap on server a (m1), capable on server b (m2). */
#define TIER_FLAGS(t)                                                          \
    "--tier", "cheap", "--chat-url", (t)->url_a, "--model", "m1",              \
        "--api-key-env", KEY_ENV, "--tier", "capable", "--chat-url",           \
        (t)->url_b, "--model", "m2", "--api-key-env", KEY_ENV

static cJSON *body_of(struct ledger *l, int64_t seq)
{
    struct fo_err err;
    char *b = NULL;
    size_t bl = 0;
    cr_assert_eq(ledger_body(l, seq, &b, &bl, &err), FO_OK, "%s", err.msg);
    cJSON *j = NULL;
    cr_assert_eq(fo_json_parse(b, bl, &j, &err), FO_OK, "%s", err.msg);
    free(b);
    return j;
}

/* The ledger of one escalated run from seq 0, as the two tiers make it:
 * the cheap result (m1) fails its assertion, tier_escalation, the capable
 * result (m2) passes, the answer. The cheap task entry names the first
 * provider of its tier (cheap_first), the result the one that answered. */
static void check_escalated_run(const char *dir, const char *cheap_first)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    char k[512] = "";
    for (int64_t s = 0;; s++) {
        struct ledger_entry en;
        if (ledger_get(l, s, &en, NULL, &err) != FO_OK)
            break;
        size_t n = strlen(k);
        snprintf(k + n, sizeof(k) - n, "%s ", en.kind);
    }
    cr_assert_str_eq(k, "request route plan task result verdict "
                        "tier_escalation task result verdict answer ");
    cJSON *plan = body_of(l, 2);
    cr_assert_str_eq(tu_str(plan, "model"), "m2"); /* the capable tier */
    cJSON_Delete(plan);
    cJSON *t1 = body_of(l, 3);
    cr_assert_str_eq(tu_str(t1, "model"), cheap_first);
    cr_assert_str_eq(tu_str(t1, "tier"), "cheap");
    cJSON_Delete(t1);
    cJSON *r1 = body_of(l, 4);
    cr_assert_str_eq(tu_str(r1, "model"), "m1");
    cr_assert_str_eq(tu_str(r1, "output"), "nope");
    /* the tokens the provider reported (the fake: 7 in, 3 out) */
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(r1, "tokens");
    cr_assert_eq(tu_num(tok, "input"), 7);
    cr_assert_eq(tu_num(tok, "output"), 3);
    cJSON_Delete(r1);
    cJSON *v1 = body_of(l, 5);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v1, "pass")));
    cr_assert_str_eq(tu_str(v1, "by"), "assertions");
    cJSON_Delete(v1);
    cJSON *esc = body_of(l, 6);
    cr_assert_str_eq(tu_str(esc, "from"), "cheap");
    cr_assert_str_eq(tu_str(esc, "to"), "capable");
    cr_assert_str_eq(tu_str(esc, "model"), "m2");
    cJSON_Delete(esc);
    cJSON *t2 = body_of(l, 7);
    cr_assert_str_eq(tu_str(t2, "model"), "m2");
    cr_assert_str_eq(tu_str(t2, "tier"), "capable");
    cJSON_Delete(t2);
    cJSON *r2 = body_of(l, 8);
    cr_assert_str_eq(tu_str(r2, "model"), "m2");
    cr_assert_str_eq(tu_str(r2, "output"), "OK-DONE");
    cJSON_Delete(r2);
    cJSON *v2 = body_of(l, 9);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v2, "pass")));
    cJSON_Delete(v2);
    cJSON *ans = body_of(l, 10);
    cr_assert_str_eq(tu_str(ans, "answer"), "the token is OK-DONE");
    cJSON_Delete(ans);
    struct ledger_verify_result v;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &v, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(v.ok);
    ledger_close(l);
}

/* The result object of submit (CLI --json, HTTP, MCP alike). */
static void check_result(const cJSON *out)
{
    cr_assert_str_eq(tu_str(out, "answer"), "the token is OK-DONE");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert_eq(tu_num(out, "escalations"), 1);
    const cJSON *t0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(out, "tasks"), 0);
    cr_assert_str_eq(tu_str(t0, "model"), "m2");
}

/* What each server was asked: a, the cheap tier: the first try of the task;
 * b, the capable tier: the coordinator, the escalated task, the
 * synthesizer. No validator (the assertion decides), no classifier (the
 * router decides). */
static void check_calls(const struct two *t)
{
    cr_assert_str_eq(t->a->log, "task:m1 ");
    cr_assert_str_eq(t->b->log, "coordinator:m2 task:m2 synthesizer:m2 ");
    /* the escalated task was told what failed */
    cr_assert(strstr(t->b->prompts[1], "contains \"OK-DONE\""), "%s",
              t->b->prompts[1]);
}

Test(cli_tiers, submit_escalates_from_the_cheap_server_to_the_capable_one)
{
    struct two t;
    two_open(&t);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", t.dir, "--json", "submit", "write", "the",
                  "token", "--roster", t.roster_path, TIER_FLAGS(&t), NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(strstr(r.out, "SECRET"));
    cr_assert_null(strstr(r.err, "SECRET"));
    cJSON *out = tu_run_json(&r);
    check_result(out);
    cJSON_Delete(out);
    tu_run_free(&r);
    check_calls(&t);
    check_escalated_run(t.dir, "m1");
    two_close(&t);
}

Test(cli_tiers, serve_takes_the_same_tier_flags_for_post_submit, .timeout = 60)
{
    struct two t;
    two_open(&t);
    struct tu_daemon d;
    tu_daemon_start(&d, t.dir, "--roster", t.roster_path, TIER_FLAGS(&t), NULL);
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "POST", "/submit",
                         "{\"request\":\"write the token\"}", 1, &b),
                 200, "%s", b);
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(fo_json_parse(b, strlen(b), &out, &err), FO_OK, "%s", b);
    free(b);
    check_result(out);
    cJSON_Delete(out);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    check_calls(&t);
    check_escalated_run(t.dir, "m1");
    two_close(&t);
}

Test(cli_tiers, mcp_takes_the_same_tier_flags)
{
    struct two t;
    two_open(&t);
    const char *extra[] = {"--roster", t.roster_path, TIER_FLAGS(&t), NULL};
    cJSON *out = tu_mcp_callv(t.dir, extra, "submit",
                              "{\"request\":\"write the token\"}");
    check_result(out);
    cJSON_Delete(out);
    check_calls(&t);
    check_escalated_run(t.dir, "m1");
    two_close(&t);
}

/* Flags before any --tier make the "any" provider: forum plan's
 * coordinator asks for the capable tier, which only "any" serves here. */
Test(cli_tiers, plan_flags_before_any_tier_serve_every_tier)
{
    struct two t;
    two_open(&t);
    struct tu_run r = tu_forumv(
        NULL, "--ledger", t.dir, "plan", "write", "the", "token", "--roster",
        t.roster_path, "--chat-url", t.url_b, "--model", "m-any", "--tier",
        "cheap", "--chat-url", t.url_a, "--model", "m1", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "write the token"), "%s", r.out);
    tu_run_free(&r);
    cr_assert_str_eq(t.a->log, "");
    cr_assert_str_eq(t.b->log, "coordinator:m-any ");
    two_close(&t);
}

/* Two groups of one tier: the order given is the fallback order. The first
 * cheap provider refuses connections (retried, then given up), the second
 * answers. */
Test(cli_tiers, a_tier_given_twice_falls_back_in_the_order_given, .timeout = 60)
{
    struct two t;
    two_open(&t);
    int port = 0;
    int fd = tu_listen_loopback(&port);
    close(fd); /* nothing listens there now */
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", port);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", t.dir, "--json", "submit", "write", "the",
                  "token", "--roster", t.roster_path, "--tier", "cheap",
                  "--chat-url", dead, "--model", "m0", TIER_FLAGS(&t), NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    check_result(out);
    cJSON_Delete(out);
    tu_run_free(&r);
    check_calls(&t); /* m0 answered nothing; m1 took its place */
    check_escalated_run(t.dir, "m0");
    two_close(&t);
}

/* ---- usage errors ------------------------------------------------------ */

struct bad {
    const char *flags[12]; /* NULL-ended; "A" and "B": the servers' URLs */
    const char *says;      /* in the message */
};

static const struct bad bad[] = {
    {{"--tier", "cheep", "--chat-url", "A", "--model", "m1"},
     "--tier cheep: not a tier (cheap, capable, frontier or any)"},
    {{"--tier", "cheap"}, "--tier cheap: no provider flags after it"},
    {{"--tier", "cheap", "--tier", "capable", "--chat-url", "B", "--model",
      "m2"},
     "--tier cheap: no provider flags after it"},
    {{"--tier"}, "--tier needs a value"},
    {{"--tier", "cheap", "--model", "m1"},
     "--tier cheap: --model needs --chat-url URL or --api"},
    {{"--model", "m1"}, ": --model needs --chat-url URL or --api"},
    {{"--tier", "capable", "--api-key-env", KEY_ENV},
     "--tier capable: --api-key-env needs --chat-url URL or --api"},
    {{"--tier", "cheap", "--chat-url", "A"},
     "--tier cheap: --chat-url needs --model M"},
    {{"--tier", "cheap", "--chat-url", "A", "--api", "--model", "m1"},
     "--tier cheap: --chat-url and --api in one provider"},
    {{"--tier", "cheap", "--chat-url", "A", "--model", "m1", "--chat-url", "B"},
     "--tier cheap: --chat-url given twice for one provider"},
    {{"--tier", "cheap", "--chat-url", "A", "--model", "m1", "--model", "m2"},
     "--tier cheap: --model given twice for one provider"},
    {{"--tier", "cheap", "--chat-url", "A", "--model", "m1", "--api-key-env",
      UNSET_ENV},
     "--tier cheap: the API key variable " UNSET_ENV " is not set"},
    {{"--tier", "capable", "--chat-url", "B", "--model", "m2", "--tier",
      "frontier", "--api"},
     "--tier frontier: the API key variable ANTHROPIC_API_KEY is not set"},
};

static void check_bad(struct two *t, const char *cmd, const struct bad *b)
{
    const char *argv[40] = {"--ledger", t->dir, cmd};
    size_t n = 3;
    if (!strcmp(cmd, "serve"))
        argv[n++] = "--check";
    else if (strcmp(cmd, "mcp")) {
        argv[n++] = "write";
        argv[n++] = "the";
        argv[n++] = "token";
    }
    argv[n++] = "--roster";
    argv[n++] = t->roster_path;
    for (size_t i = 0; b->flags[i]; i++)
        argv[n++] = !strcmp(b->flags[i], "A")   ? t->url_a
                    : !strcmp(b->flags[i], "B") ? t->url_b
                                                : b->flags[i];
    argv[n] = NULL;
    struct tu_run r = tu_forum(NULL, 0, argv);
    cr_assert_eq(r.status, 2, "%s %s: exit %d: %s", cmd, b->says, r.status,
                 r.err);
    char want[256];
    snprintf(want, sizeof(want), "forum: %s: ", cmd);
    cr_assert(strstr(r.err, want) && strstr(r.err, b->says),
              "%s: want \"%s\" in: %s", cmd, b->says, r.err);
    tu_run_free(&r);
}

Test(cli_tiers, usage_errors_exit_2_name_the_problem_and_write_nothing)
{
    struct two t;
    two_open(&t);
    /* --api's default key variable must not be set for the last case */
    unsetenv("ANTHROPIC_API_KEY");
    /* a ledger with one entry, to see that nothing is added */
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(t.dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_eq(ledger_append(l, "test", "note", -1, "{}", 2, NULL, &err),
                 FO_OK, "%s", err.msg);
    ledger_close(l);
    static const char *const cmds[] = {"submit", "plan", "serve", "mcp"};
    for (size_t c = 0; c < 4; c++)
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
            check_bad(&t, cmds[c], &bad[i]);
    /* more groups than providers fit */
    const char *argv[4 + 33 * 6 + 1] = {"--ledger", t.dir, "submit", "x"};
    size_t n = 4;
    for (int i = 0; i < 33; i++) {
        argv[n++] = "--tier";
        argv[n++] = "cheap";
        argv[n++] = "--chat-url";
        argv[n++] = t.url_a;
        argv[n++] = "--model";
        argv[n++] = "m1";
    }
    struct tu_run r = tu_forum(NULL, 0, argv);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "more than 32 model providers"), "%s", r.err);
    tu_run_free(&r);
    /* submit: --cmd and providers are two executors */
    r = tu_forumv(NULL, "--ledger", t.dir, "submit", "x", "--cmd", "true",
                  "--tier", "cheap", "--chat-url", t.url_a, "--model", "m1",
                  NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--cmd or model providers"), "%s", r.err);
    tu_run_free(&r);
    /* nothing was written, no server was asked */
    cr_assert_eq(ledger_open(t.dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    int64_t count = -1;
    cr_assert_eq(ledger_count(l, &count, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(count, 1);
    ledger_close(l);
    cr_assert_str_eq(t.a->log, "");
    cr_assert_str_eq(t.b->log, "");
    two_close(&t);
}

Test(cli_tiers, help_documents_the_tier_flags)
{
    static const char *const cmds[] = {"submit", "plan", "serve", "mcp"};
    for (size_t i = 0; i < 4; i++) {
        struct tu_run r = tu_forumv(NULL, cmds[i], "--help", NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        cr_assert(strstr(r.out, "--tier TIER") &&
                      strstr(r.out, "cheap, capable, frontier") &&
                      strstr(r.out, "--chat-url URL --model M") &&
                      strstr(r.out, "--api [--model M]") &&
                      strstr(r.out, "replace DIR/forum.json \"models\""),
                  "%s --help: %s", cmds[i], r.out);
        tu_run_free(&r);
    }
}

/* forum.json's providers are held to the same rule as the flags: a key
 * variable that is not set stops serve, submit and mcp before anything is
 * written, naming the variable (and never a key). */
Test(cli_tiers, a_forum_json_key_variable_not_set_is_refused_up_front)
{
    struct two t;
    two_open(&t);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", t.dir, "ledger", "init", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    char cfg[1024], path[700];
    snprintf(cfg, sizeof(cfg),
             "{\"models\": {\"providers\": [{\"api\": \"chat\", \"url\": "
             "\"%s\", \"model\": "
             "\"m1\", \"api_key_env\": \"" UNSET_ENV "\"}]}}",
             t.url_a);
    snprintf(path, sizeof(path), "%s/forum.json", t.dir);
    cr_assert_eq(tu_write_file(path, cfg, strlen(cfg)), 0);
    const char *want = "the API key variable " UNSET_ENV " is not set";
    r = tu_forumv(NULL, "--ledger", t.dir, "serve", "--check", (char *)NULL);
    cr_assert_eq(r.status, 2, "serve --check: %d %s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", t.dir, "submit", "build the api",
                  (char *)NULL);
    cr_assert_eq(r.status, 2, "submit: %d %s%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, want), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", t.dir, "--json", "ledger", "summary",
                  (char *)NULL);
    cJSON *s = cJSON_Parse(r.out);
    cr_assert_eq(tu_num(s, "entries"), 0, "written: %s", r.out);
    cJSON_Delete(s);
    tu_run_free(&r);
    /* with the variable set, the same file is accepted */
    setenv(UNSET_ENV, "k-123", 1);
    r = tu_forumv(NULL, "--ledger", t.dir, "serve", "--check", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    unsetenv(UNSET_ENV);
    two_close(&t);
}
