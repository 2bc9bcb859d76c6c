/* Sessions: a turn sees the session's earlier turns and facts (and a new
 * session does not), a fork sees only the turns up to its point, a
 * forgotten fact leaves no text behind, and the context budget's
 * known-answer cases (retained, trimmed at a character, omitted, both
 * reasons). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "tests/testutil.h"
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
