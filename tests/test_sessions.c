/* Sessions: a turn sees the session's earlier turns and facts (and a new
 * session does not), a fork sees only the turns up to its point, a
 * forgotten fact leaves no text behind, and the context budget's
 * known-answer cases (retained, trimmed at a character, omitted, both
 * reasons). */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "ledger/fo_buf.h"
#include "ledger/ledger.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

static const char *script(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    static char answer[64];
    (void)f, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"backend\","
               "\"instruction\":\"do the work\"}]}";
    if (!strcmp(role, "synthesizer")) {
        snprintf(answer, sizeof(answer), "ANSWER-%d", n);
        return answer;
    }
    return "done";
}

/* What the models were sent since mark. */
static char *sent_since(struct fake *f, size_t mark)
{
    return strndup(f->seen + mark, f->seen_len - mark);
}

static void turn(const char *dir, const char *url, const char *session,
                 const char *request)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "submit", "--chat-url", url, "--model",
                  "m", "--session", session, request, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
}

Test(sessions, turns_see_their_history_and_facts_and_forget_leaves_nothing)
{
    struct fake *f = fake_start(script);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    char *dir = tu_tmpdir();
    turn(dir, url, "s1", "first request alpha");
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "session", "remember",
                                "s1", "codename", "ZEBRA-42", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    /* text without --json (before, the JSON object) */
    cr_assert_eq(
        strncmp(r.out, "session s1: remembered codename (fact seq ", 42), 0,
        "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "session", "list", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "s1\t1 turns\t(started at seq "), "%s", r.out);
    cr_assert_null(strchr(r.out, '{'), "%s", r.out);
    tu_run_free(&r);
    turn(dir, url, "s1", "second request beta");
    size_t mark = f->seen_len;
    turn(dir, url, "s1", "third request gamma");
    char *third = sent_since(f, mark);
    cr_assert(strstr(third, "first request alpha") &&
                  strstr(third, "second request beta"),
              "turn 3 did not see turns 1 and 2");
    cr_assert(strstr(third, "ANSWER-0") && strstr(third, "ANSWER-1"),
              "turn 3 did not see the answers");
    cr_assert(strstr(third, "ZEBRA-42"), "turn 3 did not see the fact");
    free(third);
    /* another session sees none of it */
    mark = f->seen_len;
    turn(dir, url, "s2", "other request delta");
    char *other = sent_since(f, mark);
    cr_assert(!strstr(other, "alpha") && !strstr(other, "ZEBRA-42"),
              "a new session saw another's history");
    free(other);
    /* a fork at turn 1 sees turn 1 only */
    r = tu_forumv(NULL, "--ledger", dir, "--json", "session", "show", "s1",
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *s = tu_run_json(&r);
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(s, "turns");
    cr_assert_eq(cJSON_GetArraySize(turns), 3);
    char at[32];
    snprintf(at, sizeof(at), "%lld",
             tu_num(cJSON_GetArrayItem(turns, 0), "run"));
    cr_assert_str_eq(
        tu_str(cJSON_GetObjectItemCaseSensitive(s, "facts"), "codename"),
        "ZEBRA-42");
    cJSON_Delete(s);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "session", "fork", "s1", "--at", at,
                  "--into", "s1b", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "session s1b: forked from s1 at run "), "%s",
              r.out);
    tu_run_free(&r);
    mark = f->seen_len;
    turn(dir, url, "s1b", "forked request epsilon");
    char *forked = sent_since(f, mark);
    cr_assert(strstr(forked, "first request alpha"), "the fork lost turn 1");
    cr_assert(!strstr(forked, "second request beta"),
              "the fork saw a turn after its point");
    free(forked);
    /* forget: no later request carries it, and no byte of it is left */
    r = tu_forumv(NULL, "--ledger", dir, "session", "forget", "s1", "codename",
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "session s1: forgot codename"), "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "session", "--help", NULL);
    cr_assert_null(strstr(r.out, "forum context preflight"), "%s", r.out);
    cr_assert(strstr(r.out, "context_preflight"), "%s", r.out);
    tu_run_free(&r);
    mark = f->seen_len;
    turn(dir, url, "s1", "fourth request zeta");
    char *fourth = sent_since(f, mark);
    cr_assert(!strstr(fourth, "ZEBRA-42"), "a forgotten fact was sent");
    cr_assert(strstr(fourth, "third request gamma"));
    free(fourth);
    char cmd[4300];
    snprintf(cmd, sizeof(cmd), "grep -r -a -l ZEBRA-42 %s", dir);
    cr_assert_neq(system(cmd), 0, "ZEBRA-42 is still in the data dir");
    r = tu_forumv(NULL, "--ledger", dir, "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    /* bad input */
    r = tu_forumv(NULL, "--ledger", dir, "session", "show", "nope", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "session", "fork", "s1", "--at",
                  "99999", "--into", "x", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "submit", "--session", "bad name!",
                  "x y", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

static struct orch_ctx_slice sl(const char *src, const char *text)
{
    return (struct orch_ctx_slice){
        .source = src, .ref = -1, .text = text, .len = strlen(text)};
}

Test(sessions, the_budget_known_answers)
{
    struct orch_ctx_limits lim = {
        .total = 10, .request = 100, .history = 6, .facts = 100};
    /* request 8 bytes = 2 tokens; a 12-byte turn = 3 tokens; the next
     * turn (16 bytes, 4 tokens) gets the 3 left of history: trimmed at 12
     * bytes; the last is omitted by the history limit */
    struct orch_ctx_slice s[] = {
        sl("request", "12345678"), sl("history", "abcdefghijkl"),
        sl("history", "mnopqrstuvwxyz01"), sl("history", "zz")};
    orch_ctx_admit(s, 4, &lim);
    cr_assert_str_eq(s[0].action, "retained");
    cr_assert_eq(s[0].tokens, 2);
    cr_assert_str_eq(s[1].action, "retained");
    cr_assert_str_eq(s[2].action, "trimmed");
    cr_assert_str_eq(s[2].reason, "max_history_tokens");
    cr_assert_eq(s[2].len, 12);
    cr_assert_str_eq(s[3].action, "omitted");
    cr_assert_str_eq(s[3].reason, "max_history_tokens");
    /* the total binds first: reason max_total_tokens */
    struct orch_ctx_limits tight = {
        .total = 3, .request = 100, .history = 100, .facts = 100};
    struct orch_ctx_slice t[] = {sl("request", "1234"),
                                 sl("facts", "- k: abcdefgh\n")};
    orch_ctx_admit(t, 2, &tight);
    cr_assert_str_eq(t[1].action, "trimmed");
    cr_assert_str_eq(t[1].reason, "max_total_tokens");
    cr_assert_eq(t[1].kept, 2);
    /* a cut never splits a character: "é" is two bytes */
    struct orch_ctx_limits one = {
        .total = 100, .request = 100, .history = 1, .facts = 100};
    struct orch_ctx_slice u[] = {sl("history", "abc\xc3\xa9xyz")};
    orch_ctx_admit(u, 1, &one);
    cr_assert_str_eq(u[0].action, "trimmed");
    cr_assert_eq(u[0].len, 3, "cut at %zu", u[0].len);
    cr_assert_eq(orch_ctx_tokens(0), 0);
    cr_assert_eq(orch_ctx_tokens(1), 1);
    cr_assert_eq(orch_ctx_tokens(4), 1);
    cr_assert_eq(orch_ctx_tokens(5), 2);
}

/* ---- remember and forget as tools ----------------------------------------
 */

static const char keeper_roster[] =
    "{\"lanes\":[{\"name\":\"keeper\",\"category\":\"engineering\","
    "\"domain\":\"keeps notes\",\"keywords\":[\"note\",\"request\"],"
    "\"model_tier\":\"capable\",\"executor\":\"chat\",\"tools\":["
    "\"remember\",\"forget\"],\"max_turns\":4}]}";

/* The request of this turn: what follows the session's context. */
static const char *this_request(const char *prompt)
{
    const char *mark = "The request of this turn:\n";
    const char *p = strstr(prompt, mark);
    return p ? p + strlen(mark) : prompt;
}

/* The coordinator gives the keeper the request as its task; the keeper
 * calls remember or forget when told to, then answers. */
static const char *keeper(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    static char plan[512];
    (void)f, (void)model, (void)n;
    if (!strcmp(role, "coordinator")) {
        const char *req = this_request(prompt);
        snprintf(plan, sizeof(plan),
                 "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"keeper\","
                 "\"instruction\":\"%.200s\"}]}",
                 strstr(req, "TASK-REMEMBER")       ? "TASK-REMEMBER"
                 : strstr(req, "TASK-FORGET-UNSET") ? "TASK-FORGET-UNSET"
                 : strstr(req, "TASK-FORGET")       ? "TASK-FORGET"
                                                    : "nothing to keep");
        return plan;
    }
    if (!strcmp(role, "synthesizer"))
        return "turn answered";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"ok\"}";
    if (!strcmp(prompt, "TASK-REMEMBER"))
        return "CALL remember {\"key\":\"codename\",\"value\":\"ZEBRA-42\"}";
    if (!strcmp(prompt, "TASK-FORGET"))
        return "CALL forget {\"key\":\"codename\"}";
    if (!strcmp(prompt, "TASK-FORGET-UNSET"))
        return "CALL forget {\"key\":\"nope\"}";
    return "noted";
}

/* The bodies of every entry of kind, joined by newlines (malloc'd). */
struct bodies_ctx {
    struct ledger *l;
    const char *kind;
    struct fo_buf b;
    int n;
};

static int on_body(void *ctx, const struct ledger_entry *e)
{
    struct bodies_ctx *c = ctx;
    char *body = NULL;
    size_t len = 0;
    struct fo_err err;
    if (!strcmp(e->kind, c->kind) &&
        ledger_body(c->l, e->seq, &body, &len, &err) == FO_OK) {
        fo_buf_append(&c->b, body, len);
        fo_buf_putc(&c->b, '\n');
        c->n++;
    }
    free(body);
    return 0;
}

static char *bodies(const char *dir, const char *kind, int *n)
{
    struct bodies_ctx c = {.kind = kind};
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &c.l, &err),
                 FO_OK, "%s", err.msg);
    fo_buf_init(&c.b, FO_BUF_UNLIMITED);
    cr_assert_eq(ledger_range(c.l, 0, -1, on_body, &c, &err), FO_OK);
    ledger_close(c.l);
    char *s = fo_buf_detach(&c.b, NULL);
    fo_buf_release(&c.b);
    if (n)
        *n = c.n;
    return s ? s : strdup("");
}

static void keeper_turn(const char *dir, const char *rpath, const char *url,
                        const char *session, const char *request)
{
    struct tu_run r =
        session ? tu_forumv(NULL, "--ledger", dir, "submit", "--roster", rpath,
                            "--chat-url", url, "--model", "m", "--session",
                            session, request, NULL)
                : tu_forumv(NULL, "--ledger", dir, "submit", "--roster", rpath,
                            "--chat-url", url, "--model", "m", request, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
}

Test(sessions, remember_and_forget_are_tools_a_lane_may_allow, .timeout = 120)
{
    struct fake *f = fake_start(keeper);
    char url[64], rpath[600], cpath[600], cfg[300];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    char *dir = tu_tmpdir();
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    cr_assert_eq(tu_write_file(rpath, keeper_roster, strlen(keeper_roster)), 0);
    /* turn 1 remembers through the tool */
    keeper_turn(dir, rpath, url, "s1", "please TASK-REMEMBER the note");
    int n = 0;
    char *facts = bodies(dir, "fact", &n);
    cr_assert_eq(n, 1, "%s", facts);
    cr_assert(strstr(facts, "\"key\":\"codename\"") &&
                  strstr(facts, "\"value\":\"ZEBRA-42\"") &&
                  strstr(facts, "\"session\":\"s1\"") &&
                  strstr(facts, "\"call_seq\":"),
              "%s", facts);
    free(facts);
    char *calls = bodies(dir, "tool_call", NULL);
    cr_assert(strstr(calls, "\"tool\":\"remember\""), "%s", calls);
    cr_assert(!strstr(calls, "ZEBRA-42"), "the value is in the call: %s",
              calls);
    free(calls);
    char *results = bodies(dir, "tool_result", NULL);
    cr_assert(strstr(results, "\"ok\":true") &&
                  strstr(results, "remembered \\\"codename\\\""),
              "%s", results);
    free(results);
    keeper_turn(dir, rpath, url, "s1", "second request beta");
    /* turn 3's requests to the model carry the fact */
    size_t mark = f->seen_len;
    keeper_turn(dir, rpath, url, "s1", "third request gamma");
    char *third = sent_since(f, mark);
    cr_assert(strstr(third, "codename: ZEBRA-42"), "turn 3 lacks the fact");
    free(third);
    /* turn 4 forgets it through the tool, in the daemon (the redaction
     * goes through its committer) */
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":"
             "\"http://127.0.0.1:%d/v1\",\"model\":\"m\"}]}}",
             f->port);
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--roster", rpath, NULL);
    cJSON *s = tu_http_json(&d, "POST", "/runs",
                            "{\"request\":\"now TASK-FORGET the note\","
                            "\"session\":\"s1\"}",
                            200);
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", tu_num(s, "run"));
    cJSON_Delete(s);
    cJSON *g = NULL;
    for (int i = 0; i < 600; i++) {
        g = tu_http_json(&d, "GET", path, NULL, 200);
        if (strcmp(tu_str(g, "state"), "running"))
            break;
        cJSON_Delete(g);
        g = NULL;
        usleep(50000);
    }
    cr_assert_not_null(g, "the forget run did not end");
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    int nf = 0;
    char *tomb = bodies(dir, "fact_forgotten", &nf);
    cr_assert_eq(nf, 1, "%s", tomb);
    cr_assert(strstr(tomb, "\"key\":\"codename\"") &&
                  strstr(tomb, "\"call_seq\":"),
              "%s", tomb);
    free(tomb);
    results = bodies(dir, "tool_result", NULL);
    cr_assert(strstr(results, "forgot \\\"codename\\\""), "%s", results);
    free(results);
    /* later turns do not see it, and no byte of it is left */
    mark = f->seen_len;
    keeper_turn(dir, rpath, url, "s1", "fifth request epsilon");
    char *fifth = sent_since(f, mark);
    cr_assert(!strstr(fifth, "ZEBRA-42"), "a forgotten fact was sent");
    cr_assert(strstr(fifth, "third request gamma"));
    free(fifth);
    char cmd[4300];
    snprintf(cmd, sizeof(cmd), "grep -r -a -l ZEBRA-42 %s", dir);
    cr_assert_neq(system(cmd), 0, "ZEBRA-42 is still in the data dir");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "session", "show", "s1",
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strstr(r.out, "codename"), "%s", r.out);
    tu_run_free(&r);
    /* forgetting a key that is not set: an error result, not a crash */
    keeper_turn(dir, rpath, url, "s1", "TASK-FORGET-UNSET");
    results = bodies(dir, "tool_result", NULL);
    cr_assert(strstr(results, "session s1 has no fact nope"), "%s", results);
    free(results);
    /* a run with no session: the tool answers with the reason */
    keeper_turn(dir, rpath, url, NULL, "please TASK-REMEMBER the note");
    results = bodies(dir, "tool_result", NULL);
    cr_assert(strstr(results, "this run belongs to no session"), "%s", results);
    free(results);
    cr_assert_eq(tu_kind_count(dir, "fact"), 1);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* ---- compaction by summary -------------------------------------------------
 */

static char last_coord[65536];

static const char *summing(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    static char sum[128];
    (void)f, (void)model;
    if (!strcmp(role, "coordinator")) {
        snprintf(last_coord, sizeof(last_coord), "%s", prompt);
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"backend\","
               "\"instruction\":\"do the work\"}]}";
    }
    if (!strcmp(role, "summarizer")) {
        snprintf(sum, sizeof(sum), "SUMMARY-%d of the earlier turns", n + 1);
        return sum;
    }
    if (!strcmp(role, "synthesizer"))
        return "answered";
    return "done";
}

static int on_turn_seq(void *ctx, const struct ledger_entry *e)
{
    long long *seqs = ctx;
    if (!strcmp(e->kind, "turn") && seqs[0] < 15)
        seqs[1 + seqs[0]++] = e->seq;
    return 0;
}

/* A request of about 110 tokens, marked. */
static void long_turn(const char *dir, const char *url, const char *mark)
{
    char req[600];
    snprintf(req, sizeof(req), "request %s %0400d", mark, 0);
    turn(dir, url, "s1", req);
}

Test(sessions, a_history_over_budget_is_compacted_into_a_summary,
     .timeout = 120)
{
    struct fake *f = fake_start(summing);
    char url[64], cpath[600];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    char *dir = tu_tmpdir();
    /* room for one earlier turn (about 110 tokens) and a summary */
    const char *cfg = "{\"context\":{\"max_history_tokens\":200,"
                      "\"max_tool_results_tokens\":0,"
                      "\"compaction\":\"summary\"}}";
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    long_turn(dir, url, "ALPHA-MARK");
    long_turn(dir, url, "BETA-MARK");
    cr_assert_eq(f->count[R_SUMM], 0, "nothing was dropped yet");
    cr_assert_eq(tu_kind_count(dir, "compaction"), 0);
    /* turn 3: turn 1 has no room: summarised, and the summary sent */
    long_turn(dir, url, "GAMMA-MARK");
    cr_assert_eq(f->count[R_SUMM], 1);
    int n = 0;
    char *cmp = bodies(dir, "compaction", &n);
    cr_assert_eq(n, 1, "%s", cmp);
    long long seqs[16] = {0};
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK);
    cr_assert_eq(ledger_range(l, 0, -1, on_turn_seq, seqs, &err), FO_OK);
    ledger_close(l);
    cr_assert_eq(seqs[0], 3);
    char want[64];
    snprintf(want, sizeof(want), "\"replaces\":[%lld]", seqs[1]);
    cr_assert(strstr(cmp, want), "%s lacks %s", cmp, want);
    cr_assert(strstr(cmp, "\"summary\":\"SUMMARY-1 of the earlier turns\"") &&
                  strstr(cmp, "\"session\":\"s1\""),
              "%s", cmp);
    free(cmp);
    cr_assert(strstr(last_coord, "SUMMARY-1"), "%s", last_coord);
    cr_assert(!strstr(last_coord, "ALPHA-MARK"),
              "the dropped turn was sent: %s", last_coord);
    cr_assert(strstr(last_coord, "BETA-MARK"));
    /* within the budget: every history slice whole, 200 tokens at most */
    char *budget = bodies(dir, "context_budget", NULL);
    cr_assert(strstr(budget, "\"source\":\"summary\""), "%s", budget);
    free(budget);
    const char *ctx = strstr(last_coord, "Summary of the earlier turns");
    const char *req = strstr(last_coord, "The request of this turn:");
    cr_assert(ctx && req && req > ctx);
    cr_assert_leq((size_t)(req - ctx), 200 * 4 + 160, "%zu bytes of history",
                  (size_t)(req - ctx));
    /* turn 4 (a new process: read back from the ledger): turn 2 goes too,
     * into a summary that covers the one before */
    long_turn(dir, url, "DELTA-MARK");
    cr_assert_eq(f->count[R_SUMM], 2);
    cr_assert(strstr(last_coord, "SUMMARY-2") &&
                  !strstr(last_coord, "SUMMARY-1") &&
                  !strstr(last_coord, "ALPHA-MARK") &&
                  !strstr(last_coord, "BETA-MARK") &&
                  strstr(last_coord, "GAMMA-MARK"),
              "%s", last_coord);
    cmp = bodies(dir, "compaction", &n);
    cr_assert_eq(n, 2);
    snprintf(want, sizeof(want), "\"replaces\":[%lld,%lld]", seqs[1], seqs[2]);
    cr_assert(strstr(cmp, want), "%s lacks %s", cmp, want);
    free(cmp);
    /* nothing was deleted: every turn is still on record */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "session",
                                "show", "s1", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "ALPHA-MARK"));
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(sessions, compaction_is_drop_or_summary)
{
    struct orch_ctx_limits lim;
    orch_ctx_limits_default(&lim);
    cr_assert_eq(lim.summary, 0);
    struct fo_err err;
    cJSON *o = cJSON_Parse("{\"compaction\":\"summary\"}");
    cr_assert_eq(orch_ctx_limits_parse(o, &lim, &err), FO_OK);
    cr_assert_eq(lim.summary, 1);
    cJSON_Delete(o);
    o = cJSON_Parse("{\"compaction\":\"drop\"}");
    cr_assert_eq(orch_ctx_limits_parse(o, &lim, &err), FO_OK);
    cr_assert_eq(lim.summary, 0);
    cJSON_Delete(o);
    o = cJSON_Parse("{\"compaction\":\"shrink\"}");
    cr_assert_eq(orch_ctx_limits_parse(o, &lim, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "context.compaction"), "%s", err.msg);
    cJSON_Delete(o);
}

/* ---- resume: a witnessed remember or forget is not done again ------------
 */

static int64_t put(struct ledger *l, const char *actor, const char *kind,
                   int64_t parent, const char *body)
{
    struct ledger_entry e;
    struct fo_err err;
    cr_assert_eq(
        ledger_append(l, actor, kind, parent, body, strlen(body), &e, &err),
        FO_OK, "%s %s: %s", kind, body, err.msg);
    return e.seq;
}

/* A run of session s9 its process left (it died) just after it witnessed
 * a call of tool with args; returns the tool_call's seq. */
static int64_t crashed_run(struct ledger *l, const char *tool, const char *args)
{
    char b[1024];
    int64_t req = put(l, "client", "request", LEDGER_NO_PARENT,
                      "{\"instance\":\"0123456789abcdef0123456789abcdef\","
                      "\"request\":\"keep a note\",\"session\":\"s9\","
                      "\"via\":\"submit\"}");
    snprintf(b, sizeof(b), "{\"run\":%lld,\"session\":\"s9\",\"turn\":1}",
             (long long)req);
    put(l, "session", "turn", req, b);
    put(l, "router", "route", req, "{\"by\":\"router\",\"lane\":\"keeper\"}");
    int64_t plan = put(l, "coordinator", "plan", req,
                       "{\"tasks\":[{\"agent\":\"keeper\",\"id\":\"T1\","
                       "\"instruction\":\"resumed\"}]}");
    int64_t task = put(l, "keeper", "task", plan,
                       "{\"agent\":\"keeper\",\"executor\":\"chat\",\"id\":"
                       "\"T1\",\"instruction\":\"resumed\"}");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "arguments", args);
    cJSON_AddStringToObject(o, "call_id", "call_1");
    cJSON_AddStringToObject(o, "id", "T1");
    cJSON_AddStringToObject(o, "model", "m");
    cJSON_AddStringToObject(o, "tool", tool);
    cJSON_AddNumberToObject(o, "turn", 1);
    char *text = cJSON_PrintUnformatted(o);
    int64_t call = put(l, "keeper", "tool_call", task, text);
    free(text);
    cJSON_Delete(o);
    return call;
}

Test(sessions, a_resumed_remember_or_forget_is_not_done_again, .timeout = 120)
{
    struct fake *f = fake_start(keeper);
    char rpath[600], cpath[600], cfg[300], b[512];
    char *dir = tu_tmpdir();
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    cr_assert_eq(tu_write_file(rpath, keeper_roster, strlen(keeper_roster)), 0);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    int64_t start = put(l, "session", "session_started", LEDGER_NO_PARENT,
                        "{\"session\":\"s9\"}");
    int64_t other = put(l, "session", "fact", start,
                        "{\"key\":\"k2\",\"session\":\"s9\",\"value\":"
                        "\"OLD-VALUE\"}");
    /* A: remember, its fact on record, its result not */
    int64_t a = crashed_run(l, "remember",
                            "{\"key\":\"k1\",\"value\":\"[kept in the "
                            "session's fact]\"}");
    snprintf(b, sizeof(b),
             "{\"call_seq\":%lld,\"key\":\"k1\",\"session\":\"s9\","
             "\"value\":\"KEPT-ONCE\"}",
             (long long)a);
    put(l, "session", "fact", start, b);
    /* B: forget, the redaction and the tombstone on record */
    int64_t fb = crashed_run(l, "forget", "{\"key\":\"k2\"}");
    cr_assert_eq(
        ledger_redact(l, other, "forgotten (session fact)", NULL, &err), FO_OK,
        "%s", err.msg);
    snprintf(b, sizeof(b),
             "{\"call_seq\":%lld,\"fact_seq\":%lld,\"key\":\"k2\","
             "\"session\":\"s9\"}",
             (long long)fb, (long long)other);
    put(l, "session", "fact_forgotten", start, b);
    /* C: remember, its fact never written */
    crashed_run(l, "remember",
                "{\"key\":\"k3\",\"value\":\"[kept in the session's "
                "fact]\"}");
    ledger_close(l);
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":"
             "\"http://127.0.0.1:%d/v1\",\"model\":\"m\"}]}}",
             f->port);
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--roster", rpath, NULL);
    for (int i = 0; i < 600 && tu_kind_count(dir, "answer") < 3; i++)
        usleep(50000);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert_eq(tu_kind_count(dir, "answer"), 3);
    cr_assert_eq(tu_kind_count(dir, "fact"), 2, "a fact was written again");
    cr_assert_eq(tu_kind_count(dir, "fact_forgotten"), 1,
                 "a forget was done again");
    cr_assert_eq(tu_kind_count(dir, "redaction"), 1);
    int n = 0;
    char *results = bodies(dir, "tool_result", &n);
    cr_assert_eq(n, 3, "%s", results);
    cr_assert(strstr(results, "remembered \\\"k1\\\""), "%s", results);
    cr_assert(strstr(results, "forgot \\\"k2\\\""), "%s", results);
    cr_assert(strstr(results, "the fact was not kept"), "%s", results);
    free(results);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "session",
                                "show", "s9", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "KEPT-ONCE") && !strstr(r.out, "k2") &&
                  !strstr(r.out, "k3"),
              "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* ---- the session's reads, off the loop thread ---------------------------
 */

/* A turn reads its session on the engine's worker threads: while that read
 * waits on a slow store (test builds: a session read holds while the file
 * FORUM_TEST_SESSION_READ_HOLD names exists, and makes PATH.held), the
 * daemon answers /health and runs a run of no session to its end; once the
 * store answers, the turn goes on to done, its session started and its
 * turn witnessed once. With the read on the loop, /health would be
 * answered only after the hold gave up (PATH.expired). */
Test(sessions, a_slow_session_read_does_not_hold_the_loop, .timeout = 120)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    char *dir = tu_tmpdir();
    struct tu_hold h;
    tu_hold_init(&h);
    tu_hold_set(&h);
    setenv("FORUM_TEST_SESSION_READ_HOLD", h.path, 1);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    unsetenv("FORUM_TEST_SESSION_READ_HOLD");
    cJSON *s =
        tu_http_json(&d, "POST", "/runs",
                     "{\"request\":\"a turn of s1\",\"session\":\"s1\"}", 200);
    long long turn = tu_num(s, "run");
    cJSON_Delete(s);
    tu_hold_wait(&h, 30000, "the session was never read");
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 1, &b), 200);
    free(b);
    cr_assert(!tu_hold_expired(&h),
              "/health was answered only after the session read gave up: "
              "the loop thread waited on the store");
    s = tu_http_json(&d, "POST", "/runs", "{\"request\":\"no session here\"}",
                     200);
    long long other = tu_num(s, "run");
    cJSON_Delete(s);
    cJSON *g = tu_daemon_run_wait(&d, other, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cr_assert(!tu_hold_expired(&h), "the other run waited for the held read");
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", turn);
    g = tu_http_json(&d, "GET", path, NULL, 200);
    cr_assert_str_eq(tu_str(g, "state"), "running", "the turn did not wait");
    cJSON_Delete(g);
    tu_hold_release(&h);
    g = tu_daemon_run_wait(&d, turn, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    char kinds[4096];
    tu_entry_kinds(g, kinds, sizeof(kinds));
    cr_assert(!strncmp(kinds, "request turn context_budget route ", 34), "%s",
              kinds);
    cJSON_Delete(g);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert_eq(tu_kind_count(dir, "session_started"), 1);
    cr_assert_eq(tu_kind_count(dir, "turn"), 1);
    cr_assert(!tu_hold_expired(&h));
    tu_rmrf(dir);
    tu_hold_free(&h);
}
