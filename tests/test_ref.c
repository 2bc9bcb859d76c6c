/* test_ref: the Python reference's surface on forum. Every tool name, route
 * and command listed in tests/ref/surface.txt (written from the
 * reference's public surface) answers with valid arguments; and the cases
 * the reference's own tests state for its operator views: a capsule of the
 * same ledger is byte-identical twice, a gated run's room lists the gate
 * as its next action, the doctor names the provider that does not answer
 * with its URL, an unknown delivery profile is refused; a route claim
 * over HTTP that names an unknown lane is refused and on record. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* A data dir with one finished stub run (run 0) and no sandbox (so the
 * doctor's answer does not depend on bubblewrap here). */
static char *make_dir(void)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "submit",
                                "fix the crash in the parser", (char *)NULL);
    cr_assert_eq(r.status, 0, "submit: %s", r.err);
    tu_run_free(&r);
    write_file(dir, "forum.json", "{\"sandbox\":\"none\"}");
    return dir;
}

/* Splits a CLI line into words ("..." keeps spaces) after --ledger dir. */
static int split_words(char *line, const char *dir, const char *trace,
                       const char *rows, const char **argv, int cap)
{
    int n = 0;
    argv[n++] = "--ledger";
    argv[n++] = dir;
    char *p = line;
    while (*p && n < cap - 1) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char *w = p;
        if (*p == '"') {
            w = ++p;
            while (*p && *p != '"')
                p++;
        } else {
            while (*p && *p != ' ')
                p++;
        }
        if (*p)
            *p++ = '\0';
        argv[n++] = !strcmp(w, "@TRACE")      ? trace
                    : !strcmp(w, "@OUT")      ? rows
                    : !strcmp(w, "@CAMPAIGN") ? FORUM_SRC
                        "/tests/ref/flagship_campaign.json"
                                              : w;
    }
    argv[n] = NULL;
    return n;
}

Test(ref, every_name_route_and_command_of_the_reference_answers, .timeout = 300)
{
    char *dir = make_dir();
    char trace[4096], tmp[4096], rows[4096];
    snprintf(trace, sizeof(trace), "%s/trace.jsonl", dir);
    snprintf(rows, sizeof(rows), "%s/rows.jsonl", dir);
    write_file(dir, "trace.jsonl",
               "{\"id\":\"a\",\"name\":\"plan\"}\n"
               "{\"id\":\"b\",\"parent\":\"a\",\"name\":\"tool\"}\n");
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
    cr_assert_eq(mkdir(tmp, 0700), 0);
    setenv("TMPDIR", tmp, 1); /* forum demo's fresh data dir */
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    FILE *f = fopen(FORUM_SRC "/tests/ref/surface.txt", "r");
    cr_assert_not_null(f);
    char line[4096];
    int mcp = 0, http = 0, cli = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0] || line[0] == '#')
            continue;
        char *kind = line, *name = strchr(line, ' ');
        cr_assert_not_null(name, "%s", line);
        *name++ = '\0';
        if (!strcmp(kind, "mcp")) {
            char *args = strchr(name, ' ');
            cr_assert_not_null(args, "%s", name);
            *args++ = '\0';
            cJSON *sc = tu_mcp_call(dir, 0, name, args);
            cr_assert_not_null(sc, "%s: no structured result", name);
            cJSON_Delete(sc);
            mcp++;
        } else if (!strcmp(kind, "http")) {
            char *path = strchr(name, ' ');
            cr_assert_not_null(path, "%s", name);
            *path++ = '\0';
            char *body = strchr(path, ' ');
            if (body)
                *body++ = '\0';
            cJSON *o = tu_http_json(&d, name, path, body, 200);
            cJSON_Delete(o);
            http++;
        } else {
            cr_assert_str_eq(kind, "cli");
            const char *argv[64];
            split_words(name, dir, trace, rows, argv, 64);
            struct tu_run r = tu_forum(NULL, 0, argv);
            cr_assert_eq(r.status, 0, "forum %s: exit %d: %s%s", name, r.status,
                         r.out, r.err);
            tu_run_free(&r);
            cli++;
        }
    }
    fclose(f);
    cr_assert_geq(mcp, 21);
    cr_assert_geq(http, 14);
    cr_assert_geq(cli, 20);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(ref, tools_list_shows_each_name_once_with_the_reference_names)
{
    char *dir = make_dir();
    const char *in =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n";
    struct tu_run r = tu_forumv(in, "--ledger", dir, "mcp", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *second = strchr(r.out, '\n');
    cr_assert_not_null(second);
    cJSON *reply = NULL;
    cr_assert_eq(fo_json_parse(second + 1, strlen(second + 1), &reply, NULL),
                 FO_OK);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(reply, "result"), "tools");
    static const char *const want[] = {"verify",
                                       "forum.submit",
                                       "forum.route",
                                       "forum.status",
                                       "forum.doctor",
                                       "forum.ledger.summary",
                                       "forum.ledger.capsule",
                                       "forum.run.room",
                                       "forum.runtime.inspect",
                                       "forum.context.preflight",
                                       "forum.prose.humanize",
                                       "forum.prose.contract",
                                       "submit",
                                       "route",
                                       "status",
                                       "gate_approve"};
    for (size_t w = 0; w < sizeof(want) / sizeof(*want); w++) {
        int seen = 0;
        const cJSON *t;
        cJSON_ArrayForEach (t, tools) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
            if (!strcmp(n->valuestring, want[w])) {
                seen++;
                cr_assert(cJSON_IsString(
                              cJSON_GetObjectItemCaseSensitive(t, "title")),
                          "%s: no title", want[w]);
                cr_assert_not_null(
                    cJSON_GetObjectItemCaseSensitive(t, "annotations"));
            }
        }
        cr_assert_eq(seen, 1, "%s listed %d times", want[w], seen);
    }
    cJSON_Delete(reply);
    tu_run_free(&r);
    tu_rmrf(dir);
}

static char *run_out(const char *dir, const char *a, const char *b,
                     const char *c2, const char *d2)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, a, b, c2, d2, (char *)NULL);
    cr_assert_eq(r.status, 0, "%s %s: %s", a, b, r.err);
    char *o = strdup(r.out);
    tu_run_free(&r);
    return o;
}

Test(ref, a_capsule_of_the_same_ledger_is_byte_identical_twice)
{
    char *dir = make_dir();
    char *a = run_out(dir, "--json", "ledger", "capsule", NULL);
    char *b = run_out(dir, "--json", "ledger", "capsule", NULL);
    cr_assert_str_eq(a, b);
    cr_assert(strstr(a, "\"schema\":\"forum.context-capsule/v1\""), "%s", a);
    cr_assert(strstr(a, "\"latest_request\":\"fix the crash in the parser\""),
              "%s", a);
    /* and over MCP, the same object */
    cJSON *sc = tu_mcp_call(dir, 0, "forum.ledger.capsule", "{}");
    struct fo_buf buf;
    fo_buf_init(&buf, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(sc, &buf, NULL), FO_OK);
    cr_assert_eq(strncmp(a, buf.data, buf.len), 0, "CLI %s\nMCP %.*s", a,
                 (int)buf.len, buf.data);
    /* a new entry makes another capsule */
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "submit", "second one", (char *)NULL);
    cr_assert_eq(r.status, 0);
    tu_run_free(&r);
    char *c = run_out(dir, "--json", "ledger", "capsule", NULL);
    cr_assert_str_neq(a, c);
    cr_assert(strstr(c, "\"latest_request\":\"second one\""), "%s", c);
    fo_buf_release(&buf);
    cJSON_Delete(sc);
    free(a);
    free(b);
    free(c);
    tu_rmrf(dir);
}

static const cJSON *action_of(const cJSON *room, const char *kind)
{
    const cJSON *a;
    cJSON_ArrayForEach (
        a, cJSON_GetObjectItemCaseSensitive(room, "next_actions")) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(a, "kind");
        if (!strcmp(k->valuestring, kind))
            return a;
    }
    return NULL;
}

Test(ref, a_gated_runs_room_lists_the_gate_as_its_next_action, .timeout = 120)
{
    char *dir = make_dir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *st = tu_http_json(&d, "POST", "/runs",
                             "{\"request\":\"add a login endpoint\","
                             "\"gates\":{\"all\":true}}",
                             200);
    long long run =
        (long long)cJSON_GetObjectItemCaseSensitive(st, "run")->valuedouble;
    cJSON_Delete(st);
    /* wait for the gate to be on record (no time bound: its events) */
    for (;;) {
        cJSON *g = tu_http_json(&d, "GET", "/gates", NULL, 200);
        int n =
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "gates"));
        cJSON_Delete(g);
        if (n > 0)
            break;
        usleep(20000);
    }
    cJSON *room = tu_http_json(&d, "GET", "/room", NULL, 200);
    cr_assert_eq(
        (long long)cJSON_GetObjectItemCaseSensitive(room, "run")->valuedouble,
        run);
    const cJSON *a = action_of(room, "review_gate");
    cr_assert_not_null(a, "no review_gate in the room");
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(a, "priority")->valuestring, "high");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a, "target");
    cr_assert_eq(
        (long long)cJSON_GetObjectItemCaseSensitive(t, "run_seq")->valuedouble,
        run);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(t, "wave")->valuedouble, 0);
    cr_assert_null(action_of(room, "export_receipt"));
    cJSON_Delete(room);
    /* the reference's gate syntax decides it, and the room moves on */
    char rs[32];
    snprintf(rs, sizeof(rs), "%lld", run);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "gate", "approve", "--run-seq", rs,
                  "--wave", "0", "--approver", "alice", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    for (;;) {
        char path[64];
        snprintf(path, sizeof(path), "/runs/%lld", run);
        cJSON *g = tu_http_json(&d, "GET", path, NULL, 200);
        int done = !strcmp(
            cJSON_GetObjectItemCaseSensitive(g, "state")->valuestring, "done");
        cJSON_Delete(g);
        if (done)
            break;
        usleep(20000);
    }
    room = tu_http_json(&d, "GET", "/room", NULL, 200);
    cr_assert_null(action_of(room, "review_gate"));
    cr_assert_not_null(action_of(room, "export_receipt"));
    cJSON_Delete(room);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(ref, doctor_names_the_provider_that_does_not_answer)
{
    char *dir = make_dir();
    struct tu_run ok = tu_forumv(NULL, "--ledger", dir, "doctor", (char *)NULL);
    cr_assert_eq(ok.status, 0, "%s%s", ok.out, ok.err);
    tu_run_free(&ok);
    /* a provider on a port nobody listens on */
    write_file(dir, "forum.json",
               "{\"sandbox\":\"none\",\"models\":{\"providers\":[{\"api\":"
               "\"chat\",\"url\":\"http://127.0.0.1:9/v1\",\"model\":"
               "\"m\"}]}}");
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "doctor", "--timeout",
                                "5", (char *)NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "http://127.0.0.1:9/v1"), "%s", r.out);
    cr_assert(strstr(r.out, "status=DRIFT"), "%s", r.out);
    tu_run_free(&r);
    /* a key readable by others drifts too */
    write_file(dir, "forum.json", "{\"sandbox\":\"none\"}");
    struct tu_run k = tu_forumv(NULL, "--ledger", dir, "ledger", "checkpoint",
                                "--sign", (char *)NULL);
    cr_assert_eq(k.status, 0, "%s", k.err);
    tu_run_free(&k);
    char key[4096];
    snprintf(key, sizeof(key), "%s/checkpoint.key", dir);
    cr_assert_eq(chmod(key, 0644), 0);
    struct tu_run m = tu_forumv(NULL, "--ledger", dir, "doctor", (char *)NULL);
    cr_assert_eq(m.status, 1, "%s%s", m.out, m.err);
    cr_assert(strstr(m.out, "checkpoint.key: mode 0644"), "%s", m.out);
    tu_run_free(&m);
    tu_rmrf(dir);
}

Test(ref, an_unknown_delivery_profile_is_refused_never_dropped)
{
    char *dir = make_dir();
    struct tu_run h = tu_forumv(NULL, "humanize", "fix it", "--profile", "poet",
                                (char *)NULL);
    cr_assert_eq(h.status, 2, "%s", h.err);
    cr_assert(strstr(h.err, "poet"), "%s", h.err);
    tu_run_free(&h);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *e =
        tu_http_json(&d, "POST", "/submit",
                     "{\"request\":\"x\",\"delivery_profile\":\"poet\"}", 400);
    cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(e, "error")->valuestring,
                     "delivery_profile"));
    cJSON_Delete(e);
    e = tu_http_json(&d, "POST", "/prose/contract",
                     "{\"text\":\"x\",\"profile\":\"poet\"}", 400);
    cJSON_Delete(e);
    e = tu_http_json(&d, "POST", "/submit",
                     "{\"request\":\"x\",\"checkpoint_each_wave\":\"yes\"}",
                     400);
    cJSON_Delete(e);
    /* refused before anything was witnessed */
    cJSON *s = tu_http_json(&d, "GET", "/status", NULL, 200);
    long long before =
        (long long)cJSON_GetObjectItemCaseSensitive(s, "entries")->valuedouble;
    cJSON_Delete(s);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    struct tu_run c =
        tu_forumv(NULL, "--ledger", dir, "--json", "status", (char *)NULL);
    cJSON *o = tu_run_json(&c);
    cr_assert_eq((long long)cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetObjectItemCaseSensitive(o, "native"), "entries")
                     ->valuedouble,
                 before);
    cJSON_Delete(o);
    tu_run_free(&c);
    tu_rmrf(dir);
}

Test(ref, humanize_and_frames_are_deterministic)
{
    cJSON *h = NULL;
    struct tu_run r = tu_forumv(
        NULL, "--json", "humanize",
        "As an AI, it is important to note that we utilize tests in order "
        "to fix bugs",
        (char *)NULL);
    h = tu_run_json(&r);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(h, "output")->valuestring,
                     "We use tests to fix bugs.");
    cJSON_Delete(h);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--json", "route", "review the regression tests",
                  (char *)NULL);
    h = tu_run_json(&r);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(h, "frame");
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(fr, "proof_lane")->valuestring,
        "verify");
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(fr, "posture")->valuestring,
        "reviewer");
    cJSON_Delete(h);
    tu_run_free(&r);
}

Test(ref, a_route_claim_over_http_is_judged_and_witnessed, .timeout = 120)
{
    char *dir = make_dir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *e = tu_http_json(&d, "POST", "/lanes/route",
                            "{\"task\":\"inspect\",\"lane\":\"root\","
                            "\"scopes\":[\"read\"],\"parent\":0}",
                            400);
    const char *msg = cJSON_GetObjectItemCaseSensitive(e, "error")->valuestring;
    cr_assert(strstr(msg, "unknown_lane"), "%s", msg);
    long long seq = strtoll(strstr(msg, "seq ") + 4, NULL, 10);
    cJSON_Delete(e);
    char path[64];
    snprintf(path, sizeof(path), "/ledger/%lld", seq);
    e = tu_http_json(&d, "GET", path, NULL, 200);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "kind")->valuestring,
                     "lane_rejection");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(e, "parent")->valuedouble, 0);
    cJSON_Delete(e);
    e = tu_http_json(&d, "POST", "/lanes/route",
                     "{\"task\":\"build\",\"lane\":\"execute\","
                     "\"scopes\":[\"run\",\"read\"]}",
                     200);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "accepted")));
    cJSON_Delete(e);
    e = tu_http_json(&d, "GET", "/grade?run=0&min_checks=2", NULL, 200);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "label")->valuestring,
                     "UNVERIFIABLE");
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cJSON *sc = tu_mcp_call(dir, 0, "export_gradable", "{\"run\":0}");
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(sc, "schema")->valuestring,
        "forum.gradable-trajectory/1");
    cJSON_Delete(sc);
    tu_rmrf(dir);
}
