/* Approval gates against the real binary: a gated wave waits (run_get
 * `waiting`, gate_list), then approve, edit (the edited instruction is
 * what runs), reject, expiry while the daemon is down, over HTTP, the CLI
 * and MCP; the token; bad decisions write nothing. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "tu_daemon.h"

/* A plan of two waves: T1 then T2 (on T1's output). */
#define PLAN                                                                   \
    "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"backend\",\"instruction\":"        \
    "\"write the login handler\"},{\"id\":\"T2\",\"agent\":\"code-review\","   \
    "\"instruction\":\"test the login handler\",\"depends_on\":[\"T1\"]}]}"

static void wait_state(const struct tu_daemon *d, long long run,
                       const char *want, cJSON **out)
{
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", run);
    for (int i = 0; i < 400; i++) {
        cJSON *g = tu_http_json(d, "GET", path, NULL, 200);
        if (!strcmp(tu_str(g, "state"), want)) {
            if (out)
                *out = g;
            else
                cJSON_Delete(g);
            return;
        }
        cJSON_Delete(g);
        usleep(25 * 1000);
    }
    cr_assert_fail("run %lld never reached %s", run, want);
}

static long long start_run(const struct tu_daemon *d, const char *gates)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"request\":\"add a login endpoint to the api server\","
             "\"gates\":%s}",
             gates);
    cJSON *r = tu_http_json(d, "POST", "/runs", body, 200);
    long long run = tu_num(r, "run");
    cJSON_Delete(r);
    return run;
}

static char *kinds_of(const cJSON *g)
{
    static char k[4096];
    tu_entry_kinds(g, k, sizeof(k));
    return k;
}

Test(gates, approve_over_http_and_the_token)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    long long run = start_run(&d, "{\"all\":true}");
    cJSON *g = NULL;
    wait_state(&d, run, "waiting", &g);
    const cJSON *gate = cJSON_GetObjectItemCaseSensitive(g, "gate");
    cr_assert_eq(tu_num(gate, "wave"), 0);
    cr_assert_str_eq(tu_str(gate, "rule"), "all");
    cr_assert_str_eq(tu_str(gate, "on_expiry"), "reject");
    cJSON_Delete(g);
    /* listed */
    cJSON *l = tu_http_json(&d, "GET", "/gates", NULL, 200);
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(l, "gates");
    cr_assert_eq(cJSON_GetArraySize(gs), 1);
    cr_assert_eq(tu_num(cJSON_GetArrayItem(gs, 0), "run_seq"), run);
    cJSON_Delete(l);
    /* nobody decides without the token */
    char body[256], *reply = NULL;
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"mallory\"}", run);
    cr_assert_eq(tu_http(&d, "POST", "/gate/approve", body, 0, &reply), 401);
    free(reply);
    /* bad decisions: nothing written */
    cJSON *before = tu_http_json(&d, "GET", "/status", NULL, 200);
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":5,\"approver\":\"alice\"}", run);
    cJSON *e = tu_http_json(&d, "POST", "/gate/approve", body, 400);
    cr_assert_str_eq(tu_str(e, "code"), "no_gate");
    cJSON_Delete(e);
    e = tu_http_json(&d, "POST", "/gate/approve",
                     "{\"run_seq\":999999,\"wave\":0,\"approver\":\"a\"}", 400);
    cr_assert_str_eq(tu_str(e, "code"), "no_gate");
    cJSON_Delete(e);
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"alice\","
             "\"edits\":{\"T9\":\"x\"}}",
             run);
    e = tu_http_json(&d, "POST", "/gate/edit", body, 400);
    cr_assert(strstr(tu_str(e, "error"), "T9"));
    cJSON_Delete(e);
    cJSON *after = tu_http_json(&d, "GET", "/status", NULL, 200);
    cr_assert_eq(tu_num(before, "entries"), tu_num(after, "entries"));
    cJSON_Delete(before);
    cJSON_Delete(after);
    /* approve: the run goes on and ends done */
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"alice\","
             "\"note\":\"looks right\"}",
             run);
    cJSON *a = tu_http_json(&d, "POST", "/gate/approve", body, 200);
    cr_assert_str_eq(tu_str(a, "decision"), "approved");
    long long seq = tu_num(a, "seq");
    cJSON_Delete(a);
    wait_state(&d, run, "done", &g);
    cr_assert(strstr(kinds_of(g), "gate_requested gate_approved task"), "%s",
              kinds_of(g));
    cJSON_Delete(g);
    char path[64];
    snprintf(path, sizeof(path), "/ledger/%lld/payload", seq);
    cJSON *p = tu_http_json(&d, "GET", path, NULL, 200);
    cr_assert_str_eq(
        tu_str(cJSON_GetObjectItemCaseSensitive(p, "body"), "approver"),
        "alice");
    cJSON_Delete(p);
    /* the run views show it whole: the gate, the task, the answer */
    cJSON *lst = tu_http_json(&d, "GET", "/runs?state=done", NULL, 200);
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(lst, "runs");
    cr_assert_eq(cJSON_GetArraySize(runs), 1);
    cr_assert_eq(tu_num(cJSON_GetArrayItem(runs, 0), "run"), run);
    cJSON_Delete(lst);
    char sp[64];
    snprintf(sp, sizeof(sp), "/runs/%lld/show", run);
    cJSON *show = tu_http_json(&d, "GET", sp, NULL, 200);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(show, "gates")), 2);
    const cJSON *t0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(show, "tasks"), 0);
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(t0, "result"));
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(show, "answer"));
    cJSON_Delete(show);
    /* a second decision on the decided gate */
    e = tu_http_json(&d, "POST", "/gate/reject", body, 400);
    cr_assert_str_eq(tu_str(e, "code"), "gate_decided");
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(gates, edit_runs_the_edited_instruction_and_reject_ends_the_run)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--gate", "wave:1", NULL);
    /* plan_run: the daemon's --gate wave:1 gates T2's wave */
    char body[1024];
    snprintf(body, sizeof(body), "{\"plan\":%s}", PLAN);
    /* plan_run is answered when the run ends: run it through /runs-like
     * waiting by a run_start of the same plan is not possible, so poll
     * the gate list from a second connection while it is parked */
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        cJSON *r = tu_http_json(&d, "POST", "/plan/run", body, 200);
        cJSON_Delete(r);
        _exit(0);
    }
    cJSON *l = NULL;
    for (int i = 0; i < 400; i++) {
        l = tu_http_json(&d, "GET", "/gates", NULL, 200);
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(l, "gates")))
            break;
        cJSON_Delete(l);
        l = NULL;
        usleep(25 * 1000);
    }
    cr_assert(l, "no gate appeared");
    const cJSON *g0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "gates"), 0);
    long long run = tu_num(g0, "run_seq");
    cr_assert_eq(tu_num(g0, "wave"), 1);
    cr_assert_str_eq(tu_str(g0, "rule"), "wave:1");
    cJSON_Delete(l);
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":1,\"approver\":\"bob\","
             "\"edits\":{\"T2\":\"test the logout handler instead\"}}",
             run);
    cJSON *a = tu_http_json(&d, "POST", "/gate/edit", body, 200);
    cr_assert_str_eq(tu_str(a, "decision"), "edited");
    cJSON_Delete(a);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the stub echoes its instruction: the edited one ran */
    cJSON *g = NULL;
    wait_state(&d, run, "done", &g);
    int found = 0;
    const cJSON *en;
    cJSON_ArrayForEach (en, cJSON_GetObjectItemCaseSensitive(g, "entries"))
        if (!strcmp(tu_str(en, "kind"), "task") ||
            !strcmp(tu_str(en, "kind"), "result")) {
            char path[64];
            snprintf(path, sizeof(path), "/ledger/%lld/payload",
                     tu_num(en, "seq"));
            char *b = NULL;
            cr_assert_eq(tu_http(&d, "GET", path, NULL, 1, &b), 200);
            if (strstr(b, "test the logout handler instead"))
                found++;
            cr_assert(!strstr(b, "test the login handler"), "%s", b);
            free(b);
        }
    cr_assert_geq(found, 2, "the edited instruction was not what ran");
    cJSON_Delete(g);

    /* reject: the run ends rejected, the gated wave never runs */
    long long r2 = start_run(&d, "{\"lanes\":[\"backend\"]}");
    wait_state(&d, r2, "waiting", NULL);
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"carol\","
             "\"reason\":\"wrong repository\"}",
             r2);
    cJSON_Delete(tu_http_json(&d, "POST", "/gate/reject", body, 200));
    wait_state(&d, r2, "rejected", &g);
    cr_assert(strstr(kinds_of(g), "gate_requested gate_rejected budget answer"),
              "%s", kinds_of(g));
    cr_assert(!strstr(kinds_of(g), " task "), "%s", kinds_of(g));
    cJSON_Delete(g);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(gates, a_gate_survives_a_restart_and_expires_while_the_daemon_is_down)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    long long keep = start_run(&d, "{\"all\":true}");
    long long lapse =
        start_run(&d, "{\"all\":true,\"timeout_s\":1,\"on_expiry\":"
                      "\"approve\"}");
    wait_state(&d, keep, "waiting", NULL);
    wait_state(&d, lapse, "waiting", NULL);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGKILL, 10000), 128 + SIGKILL);
    /* down past the second run's deadline; the CLI decides the first on
     * the ledger, with no daemon */
    usleep(1300 * 1000);
    char rs[32];
    snprintf(rs, sizeof(rs), "%lld", keep);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "gate", "approve", rs,
                                "0", "--approver", "dave", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "approved"), "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "gate", "list", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *l = tu_run_json(&r);
    /* the lapsed gate still shows until a daemon expires it */
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(l, "gates")), 1);
    cJSON_Delete(l);
    tu_run_free(&r);
    tu_daemon_start(&d, dir, NULL);
    cJSON *g = NULL;
    wait_state(&d, keep, "done", &g);
    cr_assert(strstr(kinds_of(g), "gate_approved"), "%s", kinds_of(g));
    cJSON_Delete(g);
    wait_state(&d, lapse, "done", &g);
    cr_assert(strstr(kinds_of(g), "gate_requested resume gate_expired task") ||
                  strstr(kinds_of(g), "gate_requested gate_expired"),
              "%s", kinds_of(g));
    cJSON_Delete(g);
    r = tu_forumv(NULL, "--ledger", dir, "gate", "list", NULL);
    cr_assert(strstr(r.out, "no gate is waiting"), "%s", r.out);
    tu_run_free(&r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(gates, cli_and_mcp_decide_and_bad_policies_are_refused)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    long long a = start_run(&d, "{\"all\":true}");
    long long b = start_run(&d, "{\"all\":true}");
    wait_state(&d, a, "waiting", NULL);
    wait_state(&d, b, "waiting", NULL);
    /* the CLI goes to the running daemon */
    char rs[32];
    snprintf(rs, sizeof(rs), "%lld", a);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "gate", "reject", rs,
                                "0", "--reason", "not now", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    wait_state(&d, a, "rejected", NULL);
    r = tu_forumv(NULL, "--ledger", dir, "gate", "approve", rs, "0", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "decided") || strstr(r.err, "gate"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "gate", "edit", rs, "0", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    /* MCP (its own process, on the ledger): the daemon finds the decision */
    char args[128];
    snprintf(args, sizeof(args),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"erin\"}", b);
    cJSON *m = tu_mcp_call(dir, 0, "gate_approve", args);
    cr_assert_str_eq(tu_str(m, "decision"), "approved");
    cJSON_Delete(m);
    wait_state(&d, b, "done", NULL);
    /* bad policies: refused, nothing written */
    cJSON *e = tu_http_json(&d, "POST", "/runs",
                            "{\"request\":\"x\",\"gates\":{\"lanes\":"
                            "[\"nosuchlane\"]}}",
                            400);
    cr_assert(strstr(tu_str(e, "error"), "nosuchlane"));
    cJSON_Delete(e);
    e = tu_http_json(&d, "POST", "/runs",
                     "{\"request\":\"x\",\"gates\":{\"all\":true,"
                     "\"deadline\":\"2001-01-01T00:00:00Z\"}}",
                     400);
    cr_assert(strstr(tu_str(e, "error"), "past"));
    cJSON_Delete(e);
    e = tu_http_json(&d, "POST", "/runs",
                     "{\"request\":\"x\",\"gates\":{\"all\":true,"
                     "\"deadline\":\"tomorrow\"}}",
                     400);
    cr_assert(strstr(tu_str(e, "error"), "deadline"));
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--gate", "lane:", "--check",
                  NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* `forum run wait` on a run waiting at a gate waits (the run has not
 * ended): it says once that the run waits for a decision and how to give
 * it, and with --timeout it ends as a timeout naming the gate; once
 * approved, the same wait returns the run done. Before, it returned at
 * once with the run "waiting", exit 1. */
Test(gates, run_wait_waits_through_a_gate)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    long long run = start_run(&d, "{\"all\":true}");
    wait_state(&d, run, "waiting", NULL);
    char id[32];
    snprintf(id, sizeof(id), "%lld", run);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "run", "wait", id,
                                "--timeout", "1", NULL);
    cr_assert_eq(r.status, 3, "%s%s", r.out, r.err);
    cr_assert_str_eq(r.out, "");
    cr_assert(strstr(r.err, "waiting at a gate for a human decision"), "%s",
              r.err);
    cr_assert(strstr(r.err, "still waiting at a gate after 1 s"), "%s", r.err);
    tu_run_free(&r);
    char body[256];
    snprintf(body, sizeof(body),
             "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"alice\"}", run);
    cJSON_Delete(tu_http_json(&d, "POST", "/gate/approve", body, 200));
    r = tu_forumv(NULL, "--ledger", dir, "run", "wait", id, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "done"), "%s", r.out);
    tu_run_free(&r);
    /* an entry that is not there is no run; one that is not a request
     * is not a run */
    r = tu_forumv(NULL, "--ledger", dir, "run", "wait", "999999", NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "run 999999: no such run"), "%s", r.err);
    tu_run_free(&r);
    snprintf(id, sizeof(id), "%lld", run + 1);
    r = tu_forumv(NULL, "--ledger", dir, "run", "wait", id, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "not a run"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

/* Sends a POST with the token on a new connection without reading. */
static int post_now(const struct tu_daemon *d, const char *path,
                    const char *json)
{
    int fd = tu_connect_loopback(d->port, 0);
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     path, d->token, strlen(json), json);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    return fd;
}

/* An approve and a reject sent together, ten times: one is witnessed and
 * answered 200, the other answered gate_decided and never witnessed; the
 * run ends as the decision on record says. */
Test(gates, racing_decisions_put_exactly_one_on_the_ledger, .timeout = 120)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    for (int round = 0; round < 10; round++) {
        long long run = start_run(&d, "{\"all\":true}");
        wait_state(&d, run, "waiting", NULL);
        char a[256], r[256];
        snprintf(a, sizeof(a),
                 "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"alice\"}", run);
        snprintf(r, sizeof(r),
                 "{\"run_seq\":%lld,\"wave\":0,\"approver\":\"bob\","
                 "\"reason\":\"no\"}",
                 run);
        int fa = post_now(&d, "/gate/approve", a);
        int fr = post_now(&d, "/gate/reject", r);
        char buf[8192];
        size_t len = 0;
        char *ba = NULL, *br = NULL;
        int sa = tu_http_read_reply(fa, buf, sizeof(buf), &len, &ba);
        len = 0;
        int sr = tu_http_read_reply(fr, buf, sizeof(buf), &len, &br);
        close(fa);
        close(fr);
        cr_assert((sa == 200) != (sr == 200), "round %d: %d %s / %d %s", round,
                  sa, ba, sr, br);
        cr_assert(strstr(sa == 200 ? br : ba, "gate_decided"), "%s %s", ba, br);
        free(ba);
        free(br);
        cJSON *g = NULL;
        wait_state(&d, run, sa == 200 ? "done" : "rejected", &g);
        const char *k = kinds_of(g);
        int decisions = 0;
        for (const char *p = k; (p = strstr(p, "gate_")); p++)
            decisions += strncmp(p, "gate_requested", 14) != 0;
        cr_assert_eq(decisions, 1, "round %d: %s", round, k);
        cJSON_Delete(g);
    }
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    struct tu_run v =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", NULL);
    cr_assert_eq(v.status, 0, "%s", v.err);
    tu_run_free(&v);
    tu_rmrf(dir);
}
