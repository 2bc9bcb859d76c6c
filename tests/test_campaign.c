/* test_campaign: `forum campaign` against the real binary: the reference's
 * example campaign (tests/ref/flagship_campaign.json) declares as is, once;
 * a cycle or an unknown dependency is refused before any entry; status is
 * reduced from the ledger (the same twice); `campaign run` on a daemon with
 * a stub model dispatches to the fixed point, every forum feature done; a
 * crash between dispatches (and between a run's start and its witness)
 * resumes without a feature dispatched twice; an outside project's state
 * is ingested, a forum project's refused; `campaign list` (campaign_list,
 * GET /campaigns) names each declared campaign once, the latest first. */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

#define EXAMPLE FORUM_SRC "/tests/ref/flagship_campaign.json"
#define CID "flagship-uplift"
#define FORUM_FEATURES 7 /* of the example's 9: two are external */

static struct tu_run camp(const char *dir, const char *a, const char *b,
                          const char *c, const char *d, const char *e)
{
    return tu_forumv(NULL, "--ledger", dir, "--json", "campaign", a, b, c, d, e,
                     (char *)NULL);
}

static void want_exit(const struct tu_run *r, int code, const char *what)
{
    cr_assert_eq(r->status, code,
                 "%s: exit %d, want %d; stdout [%s] stderr [%s]", what,
                 r->status, code, r->out, r->err);
}

static long long entries(const char *dir)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "summary", (char *)NULL);
    want_exit(&r, 0, "ledger summary");
    cJSON *s = tu_run_json(&r);
    long long n = tu_num(s, "entries");
    cJSON_Delete(s);
    tu_run_free(&r);
    return n;
}

/* The example with one change, written to a temp file. */
static char *variant(const char *dir, const char *name, const char *cid,
                     int from, const char *dep)
{
    char *text = tu_read_file(EXAMPLE, NULL);
    cJSON *c = cJSON_Parse(text);
    free(text);
    cJSON_ReplaceItemInObject(c, "campaign_id", cJSON_CreateString(cid));
    cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "projects"), from);
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "features"), 0);
    cJSON_AddItemToArray(cJSON_GetObjectItem(f, "depends_on"),
                         cJSON_CreateString(dep));
    char *out = cJSON_Print(c), path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_eq(tu_write_file(path, out, strlen(out)), 0);
    free(out);
    cJSON_Delete(c);
    return strdup(path);
}

static cJSON *feature(const cJSON *status, const char *fid)
{
    const cJSON *f;
    cJSON_ArrayForEach (f, cJSON_GetObjectItem(status, "features"))
        if (!strcmp(tu_str(f, "feature_id"), fid))
            return (cJSON *)f;
    cr_assert_fail("no feature %s", fid);
    return NULL;
}

static cJSON *status_of(const char *dir, char **text)
{
    struct tu_run r = camp(dir, "status", CID, NULL, NULL, NULL);
    want_exit(&r, 0, "campaign status");
    cJSON *s = tu_run_json(&r);
    if (text)
        *text = strdup(r.out);
    tu_run_free(&r);
    return s;
}

Test(campaign, the_example_declares_as_is_once)
{
    char *dir = tu_tmpdir();
    struct tu_run r = camp(dir, "declare", EXAMPLE, NULL, NULL, NULL);
    want_exit(&r, 0, "declare");
    cJSON *o = tu_run_json(&r);
    cr_assert_str_eq(tu_str(o, "campaign_id"), CID);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o, "existing")));
    long long seq = tu_num(o, "seq");
    cJSON_Delete(o);
    tu_run_free(&r);

    /* the entry holds the file as is */
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    char *body = NULL;
    size_t len = 0;
    cr_assert_eq(ledger_body(l, seq, &body, &len, &err), FO_OK, "%s", err.msg);
    struct ledger_entry e;
    cr_assert_eq(ledger_get(l, seq, &e, NULL, &err), FO_OK);
    cr_assert_str_eq(e.kind, "campaign_declared");
    char *text = tu_read_file(EXAMPLE, NULL);
    cJSON *file = cJSON_Parse(text), *entry = cJSON_ParseWithLength(body, len);
    cr_assert(cJSON_Compare(file, entry, 1), "entry %.*s", (int)len, body);
    cJSON_Delete(file);
    cJSON_Delete(entry);
    free(text);
    free(body);
    ledger_close(l);

    /* again: nothing written, the first seq */
    r = camp(dir, "declare", EXAMPLE, NULL, NULL, NULL);
    want_exit(&r, 0, "declare again");
    o = tu_run_json(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "existing")));
    cr_assert_eq(tu_num(o, "seq"), seq);
    cJSON_Delete(o);
    tu_run_free(&r);
    cr_assert_eq(entries(dir), 1);

    /* its state: six runnable, buildlang waits on index, two outside */
    cJSON *s = status_of(dir, NULL);
    const cJSON *n = cJSON_GetObjectItem(s, "counts");
    cr_assert_eq(tu_num(n, "runnable"), 6);
    cr_assert_eq(tu_num(n, "waiting"), 1);
    cr_assert_eq(tu_num(n, "unreported"), 2);
    cr_assert_str_eq(tu_str(feature(s, "buildlang-effect-fields"), "state"),
                     "waiting");
    cJSON_Delete(s);
    tu_rmrf(dir);
}

Test(campaign, a_cycle_or_unknown_dependency_is_refused_before_any_entry)
{
    char *dir = tu_tmpdir();
    /* index depends on buildlang, which depends on index */
    char *cyc =
        variant(dir, "cycle.json", "cyclic", 5, "buildlang-effect-fields");
    struct tu_run r = camp(dir, "declare", cyc, NULL, NULL, NULL);
    want_exit(&r, 2, "declare a cycle");
    cr_assert_not_null(strstr(r.err, "dependency cycle: "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "index-verified-wiki"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "buildlang-effect-fields"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(entries(dir), 0);

    char *unk = variant(dir, "unknown.json", "unknown", 0, "no-such-feature");
    r = camp(dir, "declare", unk, NULL, NULL, NULL);
    want_exit(&r, 2, "declare an unknown dependency");
    cr_assert_not_null(strstr(r.err, "feature crucible-verifier-can-fail "
                                     "depends on unknown feature "
                                     "no-such-feature"),
                       "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(entries(dir), 0);

    free(cyc);
    free(unk);
    tu_rmrf(dir);
}

/* Declares the example and runs a daemon on the stub model. */
static struct fake *with_daemon(struct tu_daemon *d, char **dir)
{
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&tu_held_hold, 0);
    struct fake *f = fake_start(tu_held_script);
    *dir = tu_tmpdir();
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    tu_daemon_start(d, *dir, "--chat-url", url, "--model", "fake", NULL);
    struct tu_run r = camp(*dir, "declare", EXAMPLE, NULL, NULL, NULL);
    want_exit(&r, 0, "declare");
    tu_run_free(&r);
    return f;
}

static void every_forum_feature_done_once(const char *dir)
{
    char *a = NULL, *b = NULL;
    cJSON *s = status_of(dir, &a), *s2 = status_of(dir, &b);
    cr_assert_str_eq(a, b, "status twice differs");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(s, "complete")), "%s", a);
    cr_assert_eq(tu_num(cJSON_GetObjectItem(s, "counts"), "done"),
                 FORUM_FEATURES, "%s", a);
    const cJSON *f;
    cJSON_ArrayForEach (f, cJSON_GetObjectItem(s, "features"))
        if (!strcmp(tu_str(f, "owner"), "forum"))
            cr_assert_str_eq(tu_str(f, "run_state"), "done", "%s", a);
    /* one run and one dispatch a feature: none twice */
    cr_assert_eq(tu_kind_count(dir, "campaign_dispatch"), FORUM_FEATURES);
    cr_assert_eq(tu_kind_count(dir, "request"), FORUM_FEATURES);
    /* buildlang's run started after index's ended */
    long long idx = tu_num(feature(s, "index-verified-wiki"), "run");
    long long bl = tu_num(feature(s, "buildlang-effect-fields"), "run");
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld", idx);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "run", "get",
                                path + 6, (char *)NULL);
    want_exit(&r, 0, "run get");
    cJSON *g = tu_run_json(&r);
    cr_assert_gt(bl, tu_num(g, "answer_seq"), "buildlang run %lld", bl);
    cJSON_Delete(g);
    tu_run_free(&r);
    cJSON_Delete(s);
    cJSON_Delete(s2);
    free(a);
    free(b);
}

Test(campaign, run_on_the_stub_dispatches_to_the_fixed_point, .timeout = 300)
{
    struct tu_daemon d;
    char *dir;
    struct fake *f = with_daemon(&d, &dir);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "campaign", "run", CID, (char *)NULL);
    want_exit(&r, 0, "campaign run");
    cr_assert_not_null(strstr(r.out, "dispatched buildlang-effect-fields"),
                       "%s", r.out);
    tu_run_free(&r);
    every_forum_feature_done_once(dir);

    /* again: nothing to do, nothing written */
    long long before = entries(dir);
    r = tu_forumv(NULL, "--ledger", dir, "campaign", "run", (char *)NULL);
    want_exit(&r, 0, "campaign run again");
    cr_assert_null(strstr(r.out, "dispatched"), "%s", r.out);
    tu_run_free(&r);
    cr_assert_eq(entries(dir), before);

    /* an outside project's state is ingested; a forum one's refused */
    r = camp(dir, "ingest-status", "--project", "telos", "--status", "done");
    want_exit(&r, 0, "ingest a project");
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "campaign", "ingest-status",
                  "--project", "telos", "--feature", "telos-engine-showcase",
                  "--status", "done", (char *)NULL);
    want_exit(&r, 0, "ingest a feature");
    tu_run_free(&r);
    r = camp(dir, "ingest-status", "--project", "index", "--status", "done");
    want_exit(&r, 2, "ingest a forum project");
    tu_run_free(&r);
    cJSON *s = status_of(dir, NULL);
    cr_assert_str_eq(tu_str(feature(s, "telos-engine-showcase"), "state"),
                     "done");
    cr_assert_str_eq(tu_str(feature(s, "gather-federation"), "state"),
                     "unreported");
    cJSON_Delete(s);

    tu_daemon_signal_wait(&d, SIGTERM, 30000);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(campaign, a_crash_between_dispatches_resumes_without_dispatching_twice,
     .timeout = 300)
{
    struct tu_daemon d;
    char *dir;
    struct fake *f = with_daemon(&d, &dir);
    /* what a `campaign run` killed mid-way left: crucible dispatched and
     * witnessed; index's run started, the crash before its witness */
    cJSON *next =
        tu_http_json(&d, "GET", "/campaigns/next?campaign_id=" CID, NULL, 200);
    long long runs[2];
    const char *fids[2] = {"crucible-verifier-can-fail", "index-verified-wiki"};
    for (int i = 0; i < 2; i++) {
        const cJSON *x, *want = NULL;
        cJSON_ArrayForEach (x, cJSON_GetObjectItem(next, "runnable"))
            if (!strcmp(tu_str(x, "feature_id"), fids[i]))
                want = x;
        cr_assert_not_null(want, "%s not runnable", fids[i]);
        cJSON *in = cJSON_CreateObject();
        cJSON_AddStringToObject(in, "request", tu_str(want, "request"));
        char *body = cJSON_PrintUnformatted(in);
        cJSON *o = tu_http_json(&d, "POST", "/runs", body, 200);
        runs[i] = tu_num(o, "run");
        cJSON_Delete(o);
        free(body);
        cJSON_Delete(in);
    }
    cJSON_Delete(next);
    char w[256];
    snprintf(w, sizeof(w),
             "{\"campaign_id\":\"" CID "\",\"feature_id\":\"%s\",\"run\":%lld}",
             fids[0], runs[0]);
    cJSON_Delete(tu_http_json(&d, "POST", "/campaigns/dispatch", w, 200));
    /* a second dispatch of crucible with another run is refused */
    snprintf(w, sizeof(w),
             "{\"campaign_id\":\"" CID "\",\"feature_id\":\"%s\",\"run\":%lld}",
             fids[0], runs[1]);
    cJSON_Delete(tu_http_json(&d, "POST", "/campaigns/dispatch", w, 409));

    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "campaign", "run", (char *)NULL);
    want_exit(&r, 0, "campaign run after the crash");
    cr_assert_not_null(strstr(r.out, "adopted index-verified-wiki"), "%s",
                       r.out);
    cr_assert_null(strstr(r.out, "dispatched crucible-verifier-can-fail"), "%s",
                   r.out);
    cr_assert_null(strstr(r.out, "dispatched index-verified-wiki"), "%s",
                   r.out);
    tu_run_free(&r);
    every_forum_feature_done_once(dir);
    cJSON *s = status_of(dir, NULL);
    cr_assert_eq(tu_num(feature(s, fids[0]), "run"), runs[0]);
    cr_assert_eq(tu_num(feature(s, fids[1]), "run"), runs[1]);
    cJSON_Delete(s);

    tu_daemon_signal_wait(&d, SIGTERM, 30000);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(campaign, a_killed_run_resumes_without_dispatching_twice, .timeout = 300)
{
    struct tu_daemon d;
    char *dir;
    struct fake *f = with_daemon(&d, &dir);
    /* the model holds the runs; `campaign run` dispatches the first wave
     * and waits on it; it is killed there */
    atomic_store(&tu_held_hold, 1);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execl(FORUM_BIN, FORUM_BIN, "--ledger", dir, "campaign", "run", CID,
              (char *)NULL);
        _exit(127);
    }
    int64_t t0 = tu_now_ms();
    while (tu_kind_count(dir, "campaign_dispatch") < FORUM_FEATURES - 1) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "the first wave never came");
        usleep(20000);
    }
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFSIGNALED(st), "campaign run ended before it was killed");
    cr_assert_eq(tu_kind_count(dir, "campaign_dispatch"), FORUM_FEATURES - 1);
    atomic_store(&tu_held_hold, 0);

    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "campaign", "run", (char *)NULL);
    want_exit(&r, 0, "campaign run after the kill");
    cr_assert_not_null(strstr(r.out, "dispatched buildlang-effect-fields"),
                       "%s", r.out);
    cr_assert_null(strstr(r.out, "dispatched index-verified-wiki"), "%s",
                   r.out);
    tu_run_free(&r);
    every_forum_feature_done_once(dir);

    tu_daemon_signal_wait(&d, SIGTERM, 30000);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* A feature whose run waits at an approval gate is running, not failed
 * (its dependents stay blocked, not broken; `campaign run` waits). */
Test(campaign, a_run_waiting_at_a_gate_is_running, .timeout = 120)
{
    struct tu_daemon d;
    char *dir;
    struct fake *f = with_daemon(&d, &dir);
    const char *fid = "crucible-verifier-can-fail";
    cJSON *next =
        tu_http_json(&d, "GET", "/campaigns/next?campaign_id=" CID, NULL, 200);
    const cJSON *x, *want = NULL;
    cJSON_ArrayForEach (x, cJSON_GetObjectItem(next, "runnable"))
        if (!strcmp(tu_str(x, "feature_id"), fid))
            want = x;
    cr_assert_not_null(want, "%s not runnable", fid);
    cJSON *in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "request", tu_str(want, "request"));
    cJSON *g = cJSON_AddObjectToObject(in, "gates");
    cJSON_AddTrueToObject(g, "all");
    cJSON_AddNumberToObject(g, "timeout_s", 600);
    char *body = cJSON_PrintUnformatted(in);
    cJSON *o = tu_http_json(&d, "POST", "/runs", body, 200);
    long long run = tu_num(o, "run");
    cJSON_Delete(o);
    free(body);
    cJSON_Delete(in);
    cJSON_Delete(next);
    char w[256], path[64];
    snprintf(w, sizeof(w),
             "{\"campaign_id\":\"" CID "\",\"feature_id\":\"%s\",\"run\":%lld}",
             fid, run);
    cJSON_Delete(tu_http_json(&d, "POST", "/campaigns/dispatch", w, 200));
    snprintf(path, sizeof(path), "/runs/%lld", run);
    int waiting = 0;
    for (int i = 0; i < 400 && !waiting; i++) {
        cJSON *r = tu_http_json(&d, "GET", path, NULL, 200);
        waiting = !strcmp(tu_str(r, "state"), "waiting");
        cJSON_Delete(r);
        if (!waiting)
            usleep(50 * 1000);
    }
    cr_assert(waiting, "the run never waited at its gate");
    cJSON *s = status_of(dir, NULL);
    const cJSON *row = feature(s, fid);
    cr_assert_str_eq(tu_str(row, "run_state"), "waiting");
    cr_assert_str_eq(tu_str(row, "state"), "running", "not failed");
    cJSON_Delete(s);
    snprintf(path, sizeof(path), "/runs/%lld/cancel", run);
    cJSON_Delete(tu_http_json(&d, "POST", path, "{}", 200));
    tu_daemon_signal_wait(&d, SIGTERM, 30000);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(campaign, every_campaign_command_has_help)
{
    const char *subs[] = {"declare", "list", "status",
                          "next",    "run",  "ingest-status"};
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        struct tu_run r =
            tu_forumv(NULL, "campaign", subs[i], "--help", (char *)NULL);
        want_exit(&r, 0, subs[i]);
        cr_assert_not_null(strstr(r.out, "example:"), "%s", r.out);
        tu_run_free(&r);
    }
}

static cJSON *list_of(const char *dir, const char *limit)
{
    struct tu_run r =
        limit ? tu_forumv(NULL, "--ledger", dir, "--json", "campaign", "list",
                          "--limit", limit, (char *)NULL)
              : tu_forumv(NULL, "--ledger", dir, "--json", "campaign", "list",
                          (char *)NULL);
    want_exit(&r, 0, "campaign list");
    cJSON *o = tu_run_json(&r);
    tu_run_free(&r);
    return o;
}

static long long declared(const char *dir, const char *file)
{
    struct tu_run r = camp(dir, "declare", file, NULL, NULL, NULL);
    want_exit(&r, 0, "declare");
    cJSON *o = tu_run_json(&r);
    long long seq = tu_num(o, "seq");
    cJSON_Delete(o);
    tu_run_free(&r);
    return seq;
}

/* A campaign_declared entry appended as is (not through campaign_declare,
 * which would refuse it): what another writer could leave in a ledger. */
static long long raw_declared(const char *dir, const char *body)
{
    struct ledger *l = NULL;
    struct fo_err err;
    struct ledger_entry e;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(ledger_append(l, "campaign", "campaign_declared",
                               LEDGER_NO_PARENT, body, strlen(body), &e, &err),
                 FO_OK, "%s", err.msg);
    ledger_close(l);
    return e.seq;
}

Test(campaign, list_names_each_declared_campaign_once_latest_first,
     .timeout = 120)
{
    char *dir = tu_tmpdir();
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "init", (char *)NULL);
    want_exit(&r, 0, "ledger init");
    tu_run_free(&r);
    cJSON *o = list_of(dir, NULL);
    cr_assert_eq(tu_num(o, "count"), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "campaigns")), 0);
    cJSON_Delete(o);

    long long first = declared(dir, EXAMPLE);
    char *second_file =
        variant(dir, "second.json", "second", 0, "emet-rederivability");
    long long second = declared(dir, second_file);
    cr_assert_eq(declared(dir, EXAMPLE), first); /* again: nothing new */
    /* a later body under a declared id, an id that is not one, and a
     * declaration whose body was redacted: none of them listed */
    raw_declared(dir, "{\"campaign_id\":\"" CID "\",\"title\":\"later\","
                      "\"projects\":[]}");
    raw_declared(dir, "{\"campaign_id\":\"not an id\",\"projects\":[]}");
    long long gone =
        raw_declared(dir, "{\"campaign_id\":\"gone\",\"projects\":[]}");
    char seqs[32];
    snprintf(seqs, sizeof(seqs), "%lld", gone);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "redact", seqs, "--reason",
                  "test", (char *)NULL);
    want_exit(&r, 0, "ledger redact");
    tu_run_free(&r);

    o = list_of(dir, NULL);
    const cJSON *a = cJSON_GetObjectItem(o, "campaigns");
    cr_assert_eq(tu_num(o, "count"), 2, "%s", cJSON_PrintUnformatted(o));
    cr_assert_eq(cJSON_GetArraySize(a), 2);
    const cJSON *c0 = cJSON_GetArrayItem(a, 0), *c1 = cJSON_GetArrayItem(a, 1);
    cr_assert_str_eq(tu_str(c0, "campaign_id"), "second");
    cr_assert_eq(tu_num(c0, "declared_seq"), second);
    cr_assert_str_eq(tu_str(c1, "campaign_id"), CID);
    cr_assert_eq(tu_num(c1, "declared_seq"), first);
    cr_assert_str_eq(tu_str(c1, "title"), "Flagship uplift across projects");
    cr_assert_eq(tu_num(c1, "projects"), 9);
    cr_assert_eq(tu_num(c1, "features"), 9);
    cr_assert_gt(tu_num(c1, "declared_ts"), 0);

    /* --limit: the latest, and the count of all */
    cJSON *one = list_of(dir, "1");
    cr_assert_eq(tu_num(one, "count"), 2);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(one, "campaigns")), 1);
    cr_assert_str_eq(
        tu_str(cJSON_GetArrayItem(cJSON_GetObjectItem(one, "campaigns"), 0),
               "campaign_id"),
        "second");
    cJSON_Delete(one);

    /* the daemon serves the same (GET /campaigns, on a worker) */
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *h = tu_http_json(&d, "GET", "/campaigns", NULL, 200);
    cr_assert(cJSON_Compare(h, o, 1), "%s", cJSON_PrintUnformatted(h));
    cJSON_Delete(h);
    tu_daemon_signal_wait(&d, SIGTERM, 30000);
    cJSON_Delete(o);
    free(second_file);
    tu_rmrf(dir);
}
