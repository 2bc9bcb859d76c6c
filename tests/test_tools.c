/* test_tools: the built-in tools and their workspace, the guardrails, and
 * the tool loop of a task end to end (forum submit against a fake chat
 * server, in both wire formats). */
#include <criterion/criterion.h>

#include <ctype.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/orch_guard.h"
#include "daemon/orch_sandbox.h"
#include "daemon/orch_tools.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "testutil.h"
#include "tu_model.h"

/* ---- the file tools --------------------------------------------------------
 */

struct ws {
    char *dir;        /* the temp dir */
    char path[600];   /* the workspace inside it */
    char secret[700]; /* a file beside the workspace, outside it */
    int fd;
};

static void ws_open(struct ws *w)
{
    w->dir = tu_tmpdir();
    snprintf(w->path, sizeof(w->path), "%s/ws", w->dir);
    snprintf(w->secret, sizeof(w->secret), "%s/token", w->dir);
    cr_assert_eq(tu_write_file(w->secret, "TOKEN-OUTSIDE", 13), 0);
    struct fo_err err;
    cr_assert_eq(orch_workspace_open(w->path, 1, &w->fd, &err), FO_OK, "%s",
                 err.msg);
}

static void ws_close(struct ws *w)
{
    close(w->fd);
    tu_rmrf(w->dir);
}

/* Runs tool with the arguments text; the output (or the error) in out. */
static int run(struct ws *w, const char *tool, const char *args, char *out,
               size_t size)
{
    cJSON *a = NULL;
    struct fo_err err;
    int rc = orch_tool_args(orch_tool_builtin(tool), args, &a, &err);
    if (rc) {
        snprintf(out, size, "%s", err.msg);
        return rc;
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    rc = orch_tool_run_file(w->fd, tool, a, NULL, &b, &err);
    snprintf(out, size, "%s", rc ? err.msg : (b.data ? b.data : ""));
    fo_buf_release(&b);
    cJSON_Delete(a);
    return rc;
}

Test(tools, file_tools_read_write_list_search_and_patch)
{
    struct ws w;
    ws_open(&w);
    char out[4096];
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"src/a.txt\",\"content\":\"one\\ntwo\\n"
                     "three\\n\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"src/a.txt\"}", out, sizeof(out)),
        FO_OK);
    cr_assert_str_eq(out, "one\ntwo\nthree\n");
    cr_assert_eq(run(&w, "list_dir", "{}", out, sizeof(out)), FO_OK);
    cr_assert_str_eq(out, "src/\n");
    cr_assert_eq(
        run(&w, "search_text", "{\"pattern\":\"two\"}", out, sizeof(out)),
        FO_OK);
    cr_assert_str_eq(out, "src/a.txt:2: two\n");
    cr_assert_eq(run(&w, "apply_patch",
                     "{\"patch\":\"--- a/src/a.txt\\n+++ b/src/a.txt\\n@@ "
                     "-1,3 +1,3 @@\\n one\\n-two\\n+TWO\\n three\\n\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"src/a.txt\"}", out, sizeof(out)),
        FO_OK);
    cr_assert_str_eq(out, "one\nTWO\nthree\n");
    /* a hunk that does not match changes nothing */
    cr_assert_eq(run(&w, "apply_patch",
                     "{\"patch\":\"--- a/src/a.txt\\n+++ b/src/a.txt\\n@@ "
                     "-1,2 +1,2 @@\\n one\\n-two\\n+2\\n\"}",
                     out, sizeof(out)),
                 FO_E_INVALID);
    cr_assert(strstr(out, "does not match"), "%s", out);
    /* a new file from /dev/null */
    cr_assert_eq(run(&w, "apply_patch",
                     "{\"patch\":\"--- /dev/null\\n+++ b/new.txt\\n@@ -0,0 "
                     "+1 @@\\n+hello\\n\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"new.txt\"}", out, sizeof(out)),
        FO_OK);
    cr_assert_str_eq(out, "hello\n");
    ws_close(&w);
}

/* The content of the workspace file rel ("" when there is none). */
static void ws_get(struct ws *w, const char *rel, char *out, size_t size)
{
    if (run(w, "read_file", rel, out, size) != FO_OK)
        out[0] = '\0';
}

#define A_PATCH "--- a/a.txt\\n+++ b/a.txt\\n@@ -1 +1 @@\\n-one\\n+ONE\\n"

/* found by fuzz_tools: a patch whose first file was written and whose
 * second could not be (a symlink out, a FIFO, a directory, the same file
 * twice, a dangling symlink into a missing directory) left the first one
 * changed; now every target is checked first and a failed write puts
 * back what was written */
Test(tools, a_patch_applies_whole_or_changes_nothing)
{
    struct ws w;
    ws_open(&w);
    char out[4096], p[800], got[4096];
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"a.txt\",\"content\":"
                     "\"one\\n\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    snprintf(p, sizeof(p), "%s/out", w.path);
    cr_assert_eq(symlink("../token", p), 0);
    snprintf(p, sizeof(p), "%s/q", w.path);
    cr_assert_eq(mkfifo(p, 0644), 0);
    snprintf(p, sizeof(p), "%s/d", w.path);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/dang", w.path);
    cr_assert_eq(symlink("nodir/x", p), 0);
    const char *second[] = {
        "--- /dev/null\\n+++ b/out\\n@@ -0,0 +1 @@\\n+x\\n",
        "--- /dev/null\\n+++ b/q\\n@@ -0,0 +1 @@\\n+x\\n",
        "--- /dev/null\\n+++ b/d\\n@@ -0,0 +1 @@\\n+x\\n",
        "--- /dev/null\\n+++ b/new/../../x\\n@@ -0,0 +1 @@\\n+x\\n",
        "--- a/a.txt\\n+++ /dev/null\\n@@ -1 +0,0 @@\\n-one\\n",
        "--- /dev/null\\n+++ b/made/dang2\\n@@ -0,0 +1 @@\\n+x\\n"
        "--- /dev/null\\n+++ b/dang\\n@@ -0,0 +1 @@\\n+x\\n",
    };
    for (size_t i = 0; i < sizeof(second) / sizeof(second[0]); i++) {
        char args[1024];
        snprintf(args, sizeof(args), "{\"patch\":\"" A_PATCH "%s\"}",
                 second[i]);
        cr_assert_neq(run(&w, "apply_patch", args, out, sizeof(out)), FO_OK,
                      "%zu", i);
        ws_get(&w, "{\"path\":\"a.txt\"}", got, sizeof(got));
        cr_assert_str_eq(got, "one\n", "patch %zu (%s) changed a.txt", i, out);
        cr_assert(access(p, F_OK) != 0 || i != 5, "dang's file was made");
    }
    /* the last one failed on writing (the checks passed): what was made
     * before it was taken back, directories too */
    snprintf(p, sizeof(p), "%s/made", w.path);
    cr_assert_neq(access(p, F_OK), 0, "a directory made by the patch stayed");
    char *tok = tu_read_file(w.secret, NULL);
    cr_assert_str_eq(tok, "TOKEN-OUTSIDE");
    free(tok);
    ws_close(&w);
}

/* an empty line inside a hunk (its context line's space stripped) is a
 * context line: the hunk goes on after it; it used to end there, and the
 * changes after it were dropped while the patch said "patched" */
Test(tools, an_empty_context_line_does_not_end_a_hunk)
{
    struct ws w;
    ws_open(&w);
    char out[4096], got[4096];
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"b.txt\",\"content\":"
                     "\"alpha\\n\\nbeta\\ngamma\\n\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(run(&w, "apply_patch",
                     "{\"patch\":\"--- a/b.txt\\n+++ b/b.txt\\n@@ -1,4 +1,4 "
                     "@@\\n alpha\\n\\n beta\\n-gamma\\n+delta\\n\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    ws_get(&w, "{\"path\":\"b.txt\"}", got, sizeof(got));
    cr_assert_str_eq(got, "alpha\n\nbeta\ndelta\n");
    ws_close(&w);
}

/* found by fuzz_tools: search_text over an empty file did pointer
 * arithmetic on the empty buffer's NULL (UBSan, in the sanitized build) */
Test(tools, search_text_reads_past_an_empty_file)
{
    struct ws w;
    ws_open(&w);
    char out[4096];
    cr_assert_eq(run(&w, "write_file", "{\"path\":\"a\",\"content\":\"\"}", out,
                     sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"b\",\"content\":\"x needle\"}", out,
                     sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(
        run(&w, "search_text", "{\"pattern\":\"needle\"}", out, sizeof(out)),
        FO_OK, "%s", out);
    cr_assert_str_eq(out, "b:1: x needle\n");
    ws_close(&w);
}

Test(tools, no_path_leaves_the_workspace)
{
    struct ws w;
    ws_open(&w);
    char out[4096], args[1200], link[700];
    /* absolute, climbing, and a symlink planted inside that points out */
    snprintf(args, sizeof(args), "{\"path\":\"%s\"}", w.secret);
    cr_assert_eq(run(&w, "read_file", args, out, sizeof(out)), FO_E_INVALID);
    cr_assert(strstr(out, "outside the workspace"), "%s", out);
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"../token\"}", out, sizeof(out)),
        FO_E_INVALID);
    cr_assert_eq(run(&w, "write_file", "{\"path\":\"a/x\",\"content\":\"\"}",
                     out, sizeof(out)),
                 FO_OK, "%s", out);
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"a/../../token\"}", out, sizeof(out)),
        FO_E_INVALID);
    snprintf(link, sizeof(link), "%s/planted", w.path);
    cr_assert_eq(symlink(w.secret, link), 0);
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"planted\"}", out, sizeof(out)),
        FO_E_INVALID, "%s", out);
    cr_assert_null(strstr(out, "TOKEN-OUTSIDE"));
    /* writing through the planted link, or beside the workspace */
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"planted\",\"content\":\"x\"}", out,
                     sizeof(out)),
                 FO_E_INVALID, "%s", out);
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"../evil\",\"content\":\"x\"}", out,
                     sizeof(out)),
                 FO_E_INVALID, "%s", out);
    char evil[700];
    snprintf(evil, sizeof(evil), "%s/evil", w.dir);
    cr_assert_neq(access(evil, F_OK), 0, "a file was written outside");
    char *tok = tu_read_file(w.secret, NULL);
    cr_assert_str_eq(tok, "TOKEN-OUTSIDE");
    free(tok);
    /* a symlinked directory that points out */
    snprintf(link, sizeof(link), "%s/up", w.path);
    cr_assert_eq(symlink(w.dir, link), 0);
    cr_assert_eq(run(&w, "write_file",
                     "{\"path\":\"up/evil\",\"content\":\"x\"}", out,
                     sizeof(out)),
                 FO_E_INVALID, "%s", out);
    cr_assert_neq(access(evil, F_OK), 0, "a file was written outside");
    cr_assert_eq(run(&w, "list_dir", "{\"path\":\"up\"}", out, sizeof(out)),
                 FO_E_INVALID);
    cr_assert_eq(run(&w, "apply_patch",
                     "{\"patch\":\"--- /dev/null\\n+++ b/../evil\\n@@ -0,0 "
                     "+1 @@\\n+x\\n\"}",
                     out, sizeof(out)),
                 FO_E_INVALID, "%s", out);
    cr_assert_neq(access(evil, F_OK), 0, "a file was written outside");
    ws_close(&w);
}

Test(tools, arguments_are_checked_against_the_schema)
{
    struct ws w;
    ws_open(&w);
    char out[4096];
    cr_assert_eq(run(&w, "read_file", "{\"path\": 3}", out, sizeof(out)),
                 FO_E_INVALID);
    cr_assert_str_eq(out, "path: must be a string");
    cr_assert_eq(run(&w, "read_file", "{}", out, sizeof(out)), FO_E_INVALID);
    cr_assert_str_eq(out, "missing argument \"path\"");
    cr_assert_eq(
        run(&w, "read_file", "{\"path\":\"a\",\"mode\":1}", out, sizeof(out)),
        FO_E_INVALID);
    cr_assert_str_eq(out, "unknown argument \"mode\"");
    cr_assert_eq(run(&w, "read_file", "{\"path\": \"a\"", out, sizeof(out)),
                 FO_E_INVALID);
    cr_assert(strstr(out, "not valid JSON"), "%s", out);
    cr_assert_eq(run(&w, "run_command", "{\"argv\": []}", out, sizeof(out)),
                 FO_E_INVALID);
    cr_assert_str_eq(out, "argv: needs at least 1 item");
    ws_close(&w);
}

/* ---- guardrails
 * -------------------------------------------------------------- */

static char *scan(const struct orch_guard *g, const char *in, cJSON **found)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_geq(orch_guard_scan(g, in, strlen(in), &b, found), 0);
    char *s = fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    return s ? s : strdup("");
}

static int kind_count(const cJSON *found, const char *kind)
{
    const cJSON *k;
    cJSON_ArrayForEach (k, found)
        if (!strcmp(cJSON_GetObjectItem(k, "kind")->valuestring, kind))
            return cJSON_GetObjectItem(k, "count")->valueint;
    return 0;
}

Test(guard, secrets_and_personal_data_become_placeholders)
{
    struct orch_guard g = {0};
    cr_assert_eq(orch_guard_add_secret(&g, "my-daemon-token-123"), FO_OK);
    cJSON *found = NULL;
    char *s = scan(&g,
                   "key sk-proj-abcdefghijklmnopqrstuvwxyz012345 and "
                   "AKIAIOSFODNN7EXAMPLE; mail bob.smith+x@example.co.uk, "
                   "call +1 415-555-0132 or (415) 555-0199, card "
                   "4111 1111 1111 1111, token my-daemon-token-123, "
                   "Authorization: Bearer abcdefghijklmnopqrstu.vwxyz\n"
                   "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n"
                   "-----END OPENSSH PRIVATE KEY-----\nafter",
                   &found);
    cr_assert_str_eq(s, "key [redacted:api_key] and [redacted:api_key]; mail "
                        "[redacted:email], call [redacted:phone] or "
                        "[redacted:phone], card [redacted:card_number], token "
                        "[redacted:configured_secret], Authorization: "
                        "[redacted:bearer_token]\n[redacted:private_key]\n"
                        "after");
    cr_assert_eq(kind_count(found, "api_key"), 2);
    cr_assert_eq(kind_count(found, "email"), 1);
    cr_assert_eq(kind_count(found, "phone"), 2);
    cr_assert_eq(kind_count(found, "card_number"), 1);
    cr_assert_eq(kind_count(found, "configured_secret"), 1);
    cr_assert_eq(kind_count(found, "private_key"), 1);
    cr_assert_eq(kind_count(found, "bearer_token"), 1);
    free(s);
    cJSON_Delete(found);
    orch_guard_release(&g);
}

Test(guard, ordinary_output_is_left_alone)
{
    const char *in =
        "seq 1700000000123 ts 2026-11-24T02:53:08Z ip 192.168.100.200 "
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f0"
        "0a08 version 1.2.3 port 8080 exit code 0 4111111111111112 "
        "user@localhost";
    cJSON *found = NULL;
    char *s = scan(NULL, in, &found);
    cr_assert_str_eq(s, in);
    cr_assert_null(found);
    free(s);
}

/* ---- the tool loop, end to end ---------------------------------------------
 */

static const char roster[] =
    "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
    "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
    "\"model_tier\":\"capable\",\"executor\":\"chat\",\"tools\":["
    "\"read_file\",\"write_file\",\"run_command\"],\"required_tools\":["
    "\"run_command\"],\"max_turns\":8}]}";

static const char *plan_reply =
    "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\",\"instruction\":"
    "\"upper-case in.txt into out.txt and check it\"}]}";

/* What the control roles answer in most scripts here: the plan, a pass,
 * "done"; NULL for a task's turns. */
static const char *control_reply(const char *role)
{
    if (!strcmp(role, "coordinator"))
        return plan_reply;
    if (!strcmp(role, "synthesizer"))
        return "done";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"ok\"}";
    return NULL;
}

/* read in.txt, write out.txt, check it with a command, answer */
static const char *acting(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    (void)f, (void)model;
    if (!strcmp(role, "coordinator"))
        return plan_reply;
    if (!strcmp(role, "synthesizer"))
        return "out.txt holds HELLO WORLD";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"ok\"}";
    switch (n) {
    case 0:
        return "CALL read_file {\"path\":\"in.txt\"}";
    case 1:
        return strstr(prompt, "hello world")
                   ? "CALL write_file {\"path\":\"out.txt\",\"content\":"
                     "\"HELLO WORLD\\n\"}"
                   : "the file was not read";
    case 2:
        return "CALL run_command {\"argv\":[\"grep\",\"-c\",\"HELLO\","
               "\"out.txt\"]}";
    default:
        return strstr(prompt, "exit code 0") ? "done: out.txt is upper-case"
                                             : "the check failed";
    }
}

struct kinds {
    char kind[64][LEDGER_KIND_MAX + 1];
    int64_t seq[64], parent[64];
    int n;
};

static int collect(void *ctx, const struct ledger_entry *e)
{
    struct kinds *k = ctx;
    if (k->n < 64) {
        snprintf(k->kind[k->n], sizeof(k->kind[0]), "%s", e->kind);
        k->seq[k->n] = e->seq;
        k->parent[k->n] = e->parent;
        k->n++;
    }
    return 0;
}

static void read_kinds(const char *dir, struct kinds *k)
{
    struct ledger *l = NULL;
    struct fo_err err;
    memset(k, 0, sizeof(*k));
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_eq(ledger_range(l, 0, 64, collect, k, &err), FO_OK);
    ledger_close(l);
}

/* The bodies of the entries of kind, joined by newlines (malloc'd). */
static char *bodies_of(const char *dir, const char *kind)
{
    struct kinds k;
    read_kinds(dir, &k);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (int i = 0; i < k.n; i++) {
        char *body = NULL;
        size_t len = 0;
        if (strcmp(k.kind[i], kind) ||
            ledger_body(l, k.seq[i], &body, &len, &err) != FO_OK)
            continue;
        fo_buf_append(&b, body, len);
        fo_buf_putc(&b, '\n');
        free(body);
    }
    ledger_close(l);
    char *s = fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    return s ? s : strdup("");
}

static long find(const struct kinds *k, const char *kind, int nth)
{
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->kind[i], kind) && nth-- == 0)
            return i;
    return -1;
}

/* A project directory beside the data dir dir (a workspace may not lie
 * inside it), the sandbox's own as root (commands run as its owner). */
static void project_dir(char *ws, size_t n, const char *dir)
{
    snprintf(ws, n, "%s.project", dir);
    cr_assert_eq(mkdir(ws, 0700), 0);
    if (geteuid() == 0)
        cr_assert_eq(chown(ws, 65534, 65534), 0);
}

/* tu_rmrf of dir and of its project_dir */
static void rmrf_with_project(char *dir)
{
    char ws[700];
    snprintf(ws, sizeof(ws), "%s.project", dir);
    tu_rmrf(dir);
    tu_rmrf(strdup(ws));
}

static void acting_run(int anthropic)
{
    struct fake *f = fake_start(acting);
    char *dir = tu_tmpdir();
    char ws[600], rpath[600], url[80], in[700], outp[700];
    project_dir(ws, sizeof(ws), dir);
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    snprintf(in, sizeof(in), "%s/in.txt", ws);
    cr_assert_eq(tu_write_file(in, "hello world\n", 12), 0);
    const char *r = anthropic ? "{\"lanes\":[{\"name\":\"coder\",\"category\""
                                ":\"engineering\",\"domain\":\"edits "
                                "files\",\"keywords\":[\"edit\",\"file\"],"
                                "\"model_tier\":\"capable\",\"executor\":"
                                "\"anthropic\",\"tools\":[\"read_file\","
                                "\"write_file\",\"run_command\"],"
                                "\"required_tools\":[\"run_command\"],"
                                "\"max_turns\":8}]}"
                              : roster;
    cr_assert_eq(tu_write_file(rpath, r, strlen(r)), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
    struct tu_run run;
    if (anthropic) { /* an Anthropic provider at the fake's URL */
        char cfg[400], cpath[700];
        snprintf(cfg, sizeof(cfg),
                 "{\"models\":{\"providers\":[{\"api\":\"anthropic\","
                 "\"url\":\"%s\",\"model\":\"m1\"}]}}",
                 url);
        snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
        cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
        run =
            tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                      "file", "--roster", rpath, "--workspace", ws, NULL);
    } else {
        run = tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit",
                        "the", "file", "--roster", rpath, "--workspace", ws,
                        "--chat-url", url, "--model", "m1", NULL);
    }
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    snprintf(outp, sizeof(outp), "%s/out.txt", ws);
    char *got = tu_read_file(outp, NULL);
    cr_assert_not_null(got, "out.txt was not written");
    cr_assert_str_eq(got, "HELLO WORLD\n");
    free(got);
    /* task → call → result → call → result → call → result → result */
    struct kinds k;
    read_kinds(dir, &k);
    long task = find(&k, "task", 0), res = find(&k, "result", 0);
    cr_assert_geq(task, 0);
    cr_assert_geq(res, 0);
    int64_t prev = k.seq[task];
    for (int i = 0; i < 3; i++) {
        long c = find(&k, "tool_call", i), tr = find(&k, "tool_result", i);
        cr_assert_geq(c, 0, "tool call %d missing", i);
        cr_assert_geq(tr, 0, "tool result %d missing", i);
        cr_assert_eq(k.parent[c], prev, "call %d's parent", i);
        cr_assert_eq(k.parent[tr], k.seq[c], "result %d's parent", i);
        prev = k.seq[tr];
    }
    cr_assert_eq(find(&k, "tool_call", 3), -1);
    cr_assert_eq(k.parent[res], prev, "the result's parent is the last step");
    /* the model saw each tool's output: the last turn answered "done" */
    char *db = NULL;
    cr_assert(f->count[R_TASK] == 4, "%d task turns", f->count[R_TASK]);
    cr_assert(strstr(f->seen, anthropic ? "\"tool_result\"" : "\"tool\""),
              "the tool results were sent back");
    cr_assert(strstr(f->seen, "\"read_file\""), "the tools were offered");
    free(db);
    fake_stop(f);
    fake_free(f);
    rmrf_with_project(dir);
}

Test(tool_loop, a_chat_model_reads_writes_and_checks_with_three_calls,
     .timeout = 60)
{
    acting_run(0);
}

Test(tool_loop, an_anthropic_model_does_the_same, .timeout = 60)
{
    acting_run(1);
}

/* A fake model running script, a temp data dir with the test roster and
 * an empty project directory as the workspace. */
struct scene {
    struct fake *f;
    char *dir;
    char ws[600], rpath[600], url[80];
};

static void scene_open(struct scene *sc, fake_fn script)
{
    sc->f = fake_start(script);
    sc->dir = tu_tmpdir();
    project_dir(sc->ws, sizeof(sc->ws), sc->dir);
    snprintf(sc->rpath, sizeof(sc->rpath), "%s/roster.json", sc->dir);
    cr_assert_eq(tu_write_file(sc->rpath, roster, strlen(roster)), 0);
    snprintf(sc->url, sizeof(sc->url), "http://127.0.0.1:%d", sc->f->port);
}

/* A model that errs: a call whose arguments fail the schema, a tool it
 * does not have, an answer before the required tool; then a command whose
 * output holds a key and an email; then the answer. */
#define LEAKED_KEY "sk-ant-api03-LEAKEDKEYabcdefghijklmnopqrstuvwxyz"
#define LEAKED_MAIL "alice.jones@example.org"

static const char *erring(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (control_reply(role))
        return control_reply(role);
    switch (n) {
    case 0:
        return "CALL read_file {\"path\": 3}";
    case 1:
        return "CALL delete_everything {}";
    case 2:
        return "all done, trust me";
    case 3:
        return "CALL run_command {\"argv\":[\"sh\",\"-c\",\"echo " LEAKED_KEY
               "; echo " LEAKED_MAIL "\"]}";
    default:
        return "done";
    }
}

/* Every request the fake was sent, and every file of the data dir: the
 * key and the email are in none of them. */
static void assert_nowhere(const struct fake *f, const char *dir,
                           const char *needle)
{
    cr_assert_null(strstr(f->seen, needle), "%s reached the model", needle);
    const char *files[] = {"ledger.db", "ledger.db-wal"};
    for (int i = 0; i < 2; i++) {
        char path[700];
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        cr_assert_not(tu_file_has(path, needle), "%s is in %s", needle,
                      files[i]);
    }
}

Test(tool_loop,
     bad_calls_are_corrected_required_tools_enforced_and_secrets_kept_out,
     .timeout = 60)
{
    struct scene sc;
    scene_open(&sc, erring);
    struct fake *f = sc.f;
    char *dir = sc.dir, *ws = sc.ws, *rpath = sc.rpath, *url = sc.url;
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, "--workspace", ws, "--chat-url",
                  url, "--model", "m1", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert_null(strstr(run.out, LEAKED_KEY));
    tu_run_free(&run);
    struct kinds k;
    read_kinds(dir, &k);
    cr_assert_geq(find(&k, "tool_call", 2), 0);
    cr_assert_eq(find(&k, "tool_call", 3), -1);
    cr_assert_geq(find(&k, "tool_rescue", 0), 0, "the early answer was taken");
    cr_assert_geq(find(&k, "guardrail", 0), 0, "no guardrail entry");
    /* the corrective results the model was sent */
    cr_assert(strstr(f->seen, "path: must be a string"), "no schema error");
    cr_assert(strstr(f->seen, "unknown tool \\\"delete_everything\\\""),
              "no unknown-tool error");
    cr_assert(strstr(f->seen, "call run_command first"), "no rescue prompt");
    cr_assert(strstr(f->seen, "[redacted:api_key]"), "the output was not sent");
    cr_assert(strstr(f->seen, "[redacted:email]"));
    assert_nowhere(f, dir, LEAKED_KEY);
    assert_nowhere(f, dir, LEAKED_MAIL);
    /* the guardrail entry names the kinds, and the result took the answer */
    char *g = bodies_of(dir, "guardrail");
    cr_assert(strstr(g, "\"api_key\"") && strstr(g, "\"email\""), "%s", g);
    free(g);
    char *res = bodies_of(dir, "result");
    cr_assert(strstr(res, "\"stop_reason\":\"answer\""), "%s", res);
    free(res);
    fake_stop(f);
    fake_free(f);
    rmrf_with_project(dir);
}

static const char *malformed(struct fake *f, const char *role, int n,
                             const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (!strcmp(role, "coordinator"))
        return plan_reply;
    if (!strcmp(role, "synthesizer"))
        return "nothing";
    if (!strcmp(role, "validator"))
        return "{\"pass\": false, \"reason\": \"no\"}";
    return "CALL write_file {\"path\": \"x\", ";
}

Test(tool_loop, three_malformed_calls_in_a_row_fail_the_task, .timeout = 60)
{
    struct scene sc;
    scene_open(&sc, malformed);
    struct fake *f = sc.f;
    char *dir = sc.dir, *ws = sc.ws, *rpath = sc.rpath, *url = sc.url;
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, "--workspace", ws, "--chat-url",
                  url, "--model", "m1", "--max-model-calls", "8", NULL);
    tu_run_free(&run);
    /* three turns an attempt (the failed verdict escalates it a tier) */
    cr_assert_eq(f->count[R_TASK] % 3, 0, "%d turns", f->count[R_TASK]);
    char *res = bodies_of(dir, "result");
    cr_assert(strstr(res, "\"stop_reason\":\"malformed_tool_calls\"") &&
                  strstr(res, "\"tool_calls\":3") && strstr(res, "\"turns\":3"),
              "%s", res);
    free(res);
    fake_stop(f);
    fake_free(f);
    rmrf_with_project(dir);
}

/* ---- guardrails on the roles' own replies ----------------------------------
 */

#include <ftw.h>

#define ROLE_KEY "cfg-secret-Zq81-value-xyz"
#define ROLE_MAIL "carol.white@example.net"

/* every role puts the configured key and an email into what it answers */
static const char *leaky(struct fake *f, const char *role, int n,
                         const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\","
               "\"instruction\":\"write to " ROLE_MAIL " about the file\","
               "\"done_when\":[\"it is written\"]}]}";
    if (!strcmp(role, "synthesizer"))
        return "the answer: key " ROLE_KEY ", mail " ROLE_MAIL;
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"it names " ROLE_MAIL "\"}";
    return "task output: key " ROLE_KEY " and " ROLE_MAIL;
}

static const char *walk_needle;
static int walk_hits;

static int walk_one(const char *path, const struct stat *st, int type,
                    struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (type == FTW_F && tu_file_has(path, walk_needle)) {
        fprintf(stderr, "%s holds %s\n", path, walk_needle);
        walk_hits++;
    }
    return 0;
}

/* The number of files under dir that hold needle. */
static int files_holding(const char *dir, const char *needle)
{
    walk_needle = needle;
    walk_hits = 0;
    cr_assert_eq(nftw(dir, walk_one, 16, FTW_PHYS), 0);
    return walk_hits;
}

Test(guard, the_roles_replies_are_scanned_before_they_are_witnessed,
     .timeout = 60)
{
    struct fake *f = fake_start(leaky);
    char *dir = tu_tmpdir();
    char rpath[600], cpath[600], cfg[600];
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    const char *r =
        "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
        "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
        "\"model_tier\":\"capable\",\"executor\":\"chat\"}]}";
    cr_assert_eq(tu_write_file(rpath, r, strlen(r)), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":"
             "\"http://127.0.0.1:%d\",\"model\":\"m1\",\"api_key_env\":"
             "\"FORUM_TEST_ROLE_KEY\"}]}}",
             f->port);
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    setenv("FORUM_TEST_ROLE_KEY", ROLE_KEY, 1);
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, NULL);
    unsetenv("FORUM_TEST_ROLE_KEY");
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert_null(strstr(run.out, ROLE_KEY), "%s", run.out);
    cr_assert_null(strstr(run.out, ROLE_MAIL), "%s", run.out);
    cr_assert(strstr(run.out, "[redacted:configured_secret]"), "%s", run.out);
    tu_run_free(&run);
    /* the task's model was given the redacted instruction */
    cr_assert(strstr(f->seen, "write to [redacted:email] about"));
    cr_assert_eq(files_holding(dir, ROLE_KEY), 0);
    cr_assert_eq(files_holding(dir, ROLE_MAIL), 0);
    /* one guardrail entry per reply that held something, naming the role,
     * the kinds and where, never the value */
    char *g = bodies_of(dir, "guardrail");
    cr_assert(strstr(g, "\"source\":\"plan\"") &&
                  strstr(g, "\"role\":\"coordinator\""),
              "%s", g);
    cr_assert(strstr(g, "\"source\":\"result\""), "%s", g);
    cr_assert(strstr(g, "\"source\":\"verdict\"") &&
                  strstr(g, "\"role\":\"validator\""),
              "%s", g);
    cr_assert(strstr(g, "\"source\":\"answer\"") &&
                  strstr(g, "\"role\":\"synthesizer\""),
              "%s", g);
    cr_assert(strstr(g, "\"configured_secret\"") && strstr(g, "\"email\""),
              "%s", g);
    cr_assert_null(strstr(g, "Zq81"), "%s", g);
    free(g);
    char *a = bodies_of(dir, "answer");
    cr_assert(strstr(a, "key [redacted:configured_secret], mail "
                        "[redacted:email]"),
              "%s", a);
    free(a);
    char *v = bodies_of(dir, "verdict");
    cr_assert(strstr(v, "it names [redacted:email]"), "%s", v);
    free(v);
    /* each guardrail entry hangs under the step its content went to */
    struct kinds k;
    read_kinds(dir, &k);
    long plan = find(&k, "plan", 0), res = find(&k, "result", 0);
    cr_assert_geq(plan, 0);
    cr_assert_geq(res, 0);
    int under_request = 0, under_plan = 0, under_result = 0;
    for (int i = 0; i < k.n; i++) {
        if (strcmp(k.kind[i], "guardrail"))
            continue;
        under_request += k.parent[i] == k.seq[0];
        under_plan += k.parent[i] == k.seq[plan];
        under_result += k.parent[i] == k.seq[res];
    }
    cr_assert_eq(under_request, 1, "the plan's guardrail");
    cr_assert_eq(under_result, 1, "the verdict's guardrail");
    cr_assert_geq(under_plan, 1, "the answer's guardrail");
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* ---- tools from MCP servers -------------------------------------------------
 */

static const char *mcp_script(struct fake *f, const char *role, int n,
                              const char *model, const char *prompt)
{
    (void)f, (void)model;
    if (control_reply(role))
        return control_reply(role);
    switch (n) {
    case 0:
        return "CALL srv.shout {\"text\":\"hi there\"}";
    case 1:
        return strstr(prompt, "HI THERE") ? "CALL srv.die {}" : "no shout";
    case 2:
        return "CALL srv.shout {\"text\":\"again\"}";
    case 3:
        return strstr(prompt, "AGAIN") ? "CALL bad.shout {\"text\":\"x\"}"
                                       : "no restart";
    case 4:
        return "CALL nosuch.tool {}";
    case 5: /* in the roster, not in the server's tools/list */
        return "CALL srv.unlisted {}";
    default:
        return "done";
    }
}

/* The files of a test with MCP tools, in dir: a roster of one chat lane
 * "coder" (keywords edit, file) allowed tools (the inside of a JSON array)
 * for max_turns, its path into rpath; forum.json with the fake model at
 * model_port and servers (a JSON object) as its "mcp_servers". */
static void mcp_test_files(const char *dir, const char *tools, int max_turns,
                           int model_port, const char *servers, char *rpath,
                           size_t cap)
{
    char r[1024], cpath[600];
    snprintf(rpath, cap, "%s/roster.json", dir);
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    snprintf(r, sizeof(r),
             "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
             "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
             "\"model_tier\":\"capable\",\"executor\":\"chat\",\"tools\":["
             "%s],\"max_turns\":%d}]}",
             tools, max_turns);
    cr_assert_eq(tu_write_file(rpath, r, strlen(r)), 0);
    struct fo_buf cfg;
    fo_buf_init(&cfg, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_printf(&cfg,
                               "{\"models\":{\"providers\":[{\"api\":"
                               "\"chat\",\"url\":\"http://127.0.0.1:%d\","
                               "\"model\":\"m1\"}]},\"mcp_servers\":%s}",
                               model_port, servers),
                 0);
    cr_assert_eq(tu_write_file(cpath, cfg.data, cfg.len), 0);
    fo_buf_release(&cfg);
}

Test(tool_loop, mcp_server_tools_are_called_and_a_dead_server_restarts,
     .timeout = 60)
{
    struct fake *f = fake_start(mcp_script);
    char *dir = tu_tmpdir();
    char rpath[600], logp[600], servers[2048];
    snprintf(logp, sizeof(logp), "%s/mcp.log", dir);
    snprintf(servers, sizeof(servers),
             "{\"srv\":{\"command\":\"%s\",\"env\":{\"FAKE_MCP_LOG\":\"%s\"}},"
             "\"bad\":{\"command\":\"%s\",\"args\":[\"garbage\"]}}",
             FORUM_FAKE_MCP, logp, FORUM_FAKE_MCP);
    mcp_test_files(dir,
                   "\"srv.shout\",\"srv.die\",\"bad.shout\",\"nosuch.tool\","
                   "\"srv.unlisted\"",
                   9, f->port, servers, rpath, sizeof(rpath));
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    /* offered under a name the providers accept, mapped back: the ledger
     * and the roster keep srv.shout (the fake refuses, as OpenAI and
     * Anthropic do, any tool name outside ^[a-zA-Z0-9_-]{1,64}$) */
    cr_assert(strstr(f->seen, "\"srv__shout\""), "the server's tool was "
                                                 "not offered");
    cr_assert_null(strstr(f->seen, "\"name\":\"srv.shout\""), "%s", f->seen);
    cr_assert_eq(f->bad_names, 0);
    char *calls = bodies_of(dir, "tool_call");
    cr_assert(strstr(calls, "\"tool\":\"srv.shout\""), "%s", calls);
    free(calls);
    char *res = bodies_of(dir, "tool_result");
    cr_assert(strstr(res, "MCP server srv: no tool \\\"unlisted\\\" in its "
                          "tools/list"),
              "%s", res);
    cr_assert(strstr(res, "\"output\":\"HI THERE\""), "%s", res);
    cr_assert(strstr(res, "MCP server srv: exited"), "%s", res);
    cr_assert(strstr(res, "\"output\":\"AGAIN\""), "%s", res);
    cr_assert(strstr(res, "MCP server bad: answered garbage"), "%s", res);
    cr_assert(strstr(res, "no MCP server \\\"nosuch\\\" is configured"), "%s",
              res);
    free(res);
    char *log = tu_read_file(logp, NULL);
    cr_assert_str_eq(log, "start\ncall shout\ncall die\nstart\ncall shout\n");
    free(log);
    char *out = bodies_of(dir, "result");
    cr_assert(strstr(out, "\"stop_reason\":\"answer\""), "%s", out);
    free(out);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

static const char *mcp_big_script(struct fake *f, const char *role, int n,
                                  const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (control_reply(role))
        return control_reply(role);
    return n == 0   ? "CALL srv.big {\"bytes\":1900000}"
           : n == 1 ? "CALL srv.pic {}"
           : n == 2 ? "CALL srv.rpcerr {}"
           : n == 3 ? "CALL srv.shout {\"text\":\"still here\"}"
                    : "done";
}

/* An MCP tool's result over the ledger's body limit (1.9 MB) no longer
 * kills the run: the model gets 64 KiB and a marker, the entry keeps what
 * fits, the run goes on. Images and resource links are kept (MIME type,
 * URI, the image's data) instead of "[image content]"; a server's
 * JSON-RPC error is labelled as the server's. */
Test(tool_loop, a_huge_mcp_result_is_capped_and_the_run_goes_on, .timeout = 60)
{
    struct fake *f = fake_start(mcp_big_script);
    char *dir = tu_tmpdir();
    char rpath[600], servers[1024];
    snprintf(servers, sizeof(servers), "{\"srv\":{\"command\":\"%s\"}}",
             FORUM_FAKE_MCP);
    mcp_test_files(dir, "\"srv.big\",\"srv.pic\",\"srv.rpcerr\",\"srv.shout\"",
                   8, f->port, servers, rpath, sizeof(rpath));
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    /* the model was given the first 64 KiB and the marker */
    int seen_marker = 0;
    for (int i = 0; i < f->n_prompts; i++)
        if (strstr(f->prompts[i], "[forum: cut at 65536 of 1900000 bytes; "
                                  "the first ")) {
            seen_marker = 1;
            cr_assert_lt(strlen(f->prompts[i]), 70000);
        }
    cr_assert(seen_marker, "%s", f->log);
    char *res = bodies_of(dir, "tool_result");
    cr_assert(strstr(res, "\"output_bytes\":1900000"), "no output_bytes");
    cr_assert(strstr(res, "\"output_full_cut\":true"), "no output_full_cut");
    cr_assert(strstr(res, "\"output\":\"a picture\\n[image image/png, 12 "
                          "bytes (base64) on the ledger]\\n[resource_link "
                          "report file:///srv/report.pdf application/pdf]"
                          "\\n[resource file:///srv/notes.txt]\\nthe notes\""),
              "%.2000s",
              strstr(res, "a picture") ? strstr(res, "a picture") : res);
    cr_assert(strstr(res, "{\"data\":\"iVBORw0KGgo=\",\"mimeType\":"
                          "\"image/png\",\"type\":\"image\"}"),
              "the image was not kept");
    cr_assert(strstr(res, "\"uri\":\"file:///srv/report.pdf\""), "no link");
    cr_assert(strstr(res, "the server answered tools/call rpcerr with a "
                          "JSON-RPC error -32603 (the server's, not the "
                          "tool's): internal error in the server"),
              "the JSON-RPC error");
    cr_assert(strstr(res, "\"output\":\"STILL HERE\""), "the run stopped");
    free(res);
    char *out = bodies_of(dir, "result");
    cr_assert(strstr(out, "\"stop_reason\":\"answer\""), "%s", out);
    free(out);
    /* every payload within the body limit, the ledger whole */
    struct tu_run v =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--deep", NULL);
    cr_assert_eq(v.status, 0, "%s", v.err);
    tu_run_free(&v);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* ---- tools from Streamable HTTP MCP servers --------------------------------
 */

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>

#include <openssl/ssl.h>

#include "daemon/orch_mcpc.h"

/* The TLS session of the connection being answered (NULL: plain). */
static __thread SSL *mf_ssl;

static ssize_t mf_send(int fd, const void *b, size_t n)
{
    return mf_ssl ? SSL_write(mf_ssl, b, (int)n) : write(fd, b, n);
}

static ssize_t mf_recv(int fd, void *b, size_t n)
{
    return mf_ssl ? SSL_read(mf_ssl, b, (int)n) : read(fd, b, n);
}

/* A Streamable HTTP MCP server on 127.0.0.1, one thread, one request a
 * connection. The path picks how it answers: /json with a JSON body, /sse
 * with an event stream (a notification first, the answer written in two
 * pieces, and the stream left open for the client to close), /junk with a
 * body that is not JSON. Each path has its own session: initialize gives
 * a new id, and every later request must carry it and the protocol
 * version (else 400 or 404), the Accept of both kinds and, when a token is
 * set, "Authorization: Bearer <token>" (else 401). Tools: shout {text};
 * whoami {} answers the Authorization header it was sent. */
struct mcph_fake {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    SSL_CTX *tls; /* answers over TLS when set */
    const char *token;
    char session[5][40];
    int sessions;   /* initialize requests answered */
    int with_id;    /* later requests that carried the right session id */
    int violations; /* requests that broke a rule above */
    int initialized[5];
    char log[4096]; /* "path method; " for each request */
};

static int hdr(const char *head, const char *name, char *out, size_t size)
{
    size_t nl = strlen(name);
    for (const char *l = strstr(head, "\r\n"); l && l[2] != '\r';
         l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, name, nl) || l[2 + nl] != ':')
            continue;
        const char *v = l + 3 + nl, *e = strstr(v, "\r\n");
        while (*v == ' ')
            v++;
        snprintf(out, size, "%.*s", (int)(e - v), v);
        return 1;
    }
    return 0;
}

static void mf_write(int fd, const char *s)
{
    (void)!mf_send(fd, s, strlen(s));
}

static void mf_status(int fd, const char *status)
{
    char h[200];
    snprintf(h, sizeof(h),
             "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
             status);
    mf_write(fd, h);
}

static char *mf_result(const cJSON *id, cJSON *result)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    cJSON_AddItemToObject(o, "id", cJSON_Duplicate(id, 1));
    cJSON_AddItemToObject(o, "result", result);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

static void mf_answer(struct mcph_fake *f, int fd, const char *req)
{
    char method_s[16] = "", path[64] = "", v[512];
    sscanf(req, "%15s %63s", method_s, path);
    int k = !strcmp(path, "/json")   ? 0
            : !strcmp(path, "/sse")  ? 1
            : !strcmp(path, "/hang") ? 3
            : !strcmp(path, "/b400") ? 4
                                     : 2;
    const char *body = strstr(req, "\r\n\r\n");
    cJSON *m = body ? cJSON_Parse(body + 4) : NULL;
    const cJSON *id = cJSON_GetObjectItem(m, "id");
    const cJSON *method = cJSON_GetObjectItem(m, "method");
    const char *mn = cJSON_IsString(method) ? method->valuestring : "-";
    size_t ll = strlen(f->log);
    snprintf(f->log + ll, sizeof(f->log) - ll, "%s %s; ", path,
             strcmp(method_s, "POST") ? method_s : mn);
    char auth[300];
    snprintf(auth, sizeof(auth), "Bearer %s", f->token ? f->token : "");
    if (!hdr(req, "Accept", v, sizeof(v)) || !strstr(v, "application/json") ||
        !strstr(v, "text/event-stream") ||
        !hdr(req, "Content-Type", v, sizeof(v)) ||
        strcmp(v, "application/json")) {
        f->violations++;
        mf_status(fd, "406 Not Acceptable");
        goto out;
    }
    if (f->token &&
        (!hdr(req, "Authorization", v, sizeof(v)) || strcmp(v, auth))) {
        f->violations++;
        mf_status(fd, "401 Unauthorized");
        goto out;
    }
    if (!strcmp(method_s, "DELETE")) { /* the session ends */
        if (!hdr(req, "Mcp-Session-Id", v, sizeof(v)) ||
            strcmp(v, f->session[k])) {
            f->violations++;
            mf_status(fd, "404 Not Found");
        } else {
            snprintf(f->session[k], sizeof(f->session[k]), "ended");
            mf_status(fd, "200 OK");
        }
        goto out;
    }
    if (k == 2) { /* junk */
        const char *j = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        "Content-Length: 16\r\nConnection: close\r\n\r\n"
                        "this is not json";
        mf_write(fd, j);
        goto out;
    }
    char extra[120] = "";
    if (!strcmp(mn, "initialize")) {
        if (hdr(req, "Mcp-Session-Id", v, sizeof(v)))
            f->violations++; /* a new session carries none */
        snprintf(f->session[k], sizeof(f->session[k]), "s%d-%d-%x", k,
                 ++f->sessions, (unsigned)rand());
        snprintf(extra, sizeof(extra), "Mcp-Session-Id: %s\r\n", f->session[k]);
    } else {
        if (!hdr(req, "Mcp-Session-Id", v, sizeof(v))) {
            f->violations++;
            mf_status(fd, "400 Bad Request");
            goto out;
        }
        if (strcmp(v, f->session[k]) && k == 4) {
            /* what the reference server (server-everything) answers an
             * id it does not know */
            static const char e[] =
                "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,"
                "\"message\":\"Bad Request: No valid session ID "
                "provided\"},\"id\":null}";
            char h[300];
            snprintf(h, sizeof(h),
                     "HTTP/1.1 400 Bad Request\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     sizeof(e) - 1, e);
            f->violations++;
            mf_write(fd, h);
            goto out;
        }
        if (strcmp(v, f->session[k])) {
            f->violations++;
            mf_status(fd, "404 Not Found");
            goto out;
        }
        if (!hdr(req, "MCP-Protocol-Version", v, sizeof(v)) ||
            strcmp(v, "2025-06-18")) {
            f->violations++;
            mf_status(fd, "400 Bad Request");
            goto out;
        }
        f->with_id++;
    }
    if (k == 3 && !strcmp(mn, "tools/call")) { /* no answer for 3 s */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        poll(&pf, 1, 3000);
        goto out;
    }
    if (!id || !cJSON_IsString(method)) { /* a notification or response */
        if (!strcmp(mn, "notifications/initialized"))
            f->initialized[k] = 1;
        mf_status(fd, "202 Accepted");
        goto out;
    }
    cJSON *r = NULL;
    if (!strcmp(mn, "initialize")) {
        r = cJSON_Parse("{\"protocolVersion\":\"2025-06-18\",\"capabilities\":"
                        "{\"tools\":{}},\"serverInfo\":{\"name\":\"fake\","
                        "\"version\":\"1\"}}");
    } else if (!strcmp(mn, "tools/list")) {
        if (!f->initialized[k])
            f->violations++; /* listed before notifications/initialized */
        r = cJSON_Parse(
            "{\"tools\":[{\"name\":\"shout\",\"description\":\"upper-cases\","
            "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"text\":"
            "{\"type\":\"string\"}},\"required\":[\"text\"]}},{\"name\":"
            "\"whoami\",\"description\":\"echoes the credentials\","
            "\"inputSchema\":{\"type\":\"object\"}},{\"name\":\"expire\","
            "\"description\":\"ends the session\",\"inputSchema\":{\"type\":"
            "\"object\"}}]}");
    } else if (!strcmp(mn, "tools/call")) {
        const cJSON *p = cJSON_GetObjectItem(m, "params");
        const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
        const cJSON *t =
            cJSON_GetObjectItem(cJSON_GetObjectItem(p, "arguments"), "text");
        char out[300];
        if (!strcmp(name, "whoami")) {
            hdr(req, "Authorization", out, sizeof(out));
        } else if (!strcmp(name, "expire")) { /* the session ends */
            snprintf(f->session[k], sizeof(f->session[k]), "gone");
            snprintf(out, sizeof(out), "expired");
        } else {
            snprintf(out, sizeof(out), "%s",
                     cJSON_IsString(t) ? t->valuestring : "");
            for (char *c = out; *c; c++)
                *c = (char)toupper((unsigned char)*c);
        }
        r = cJSON_CreateObject();
        cJSON *c = cJSON_AddArrayToObject(r, "content");
        cJSON *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "type", "text");
        cJSON_AddStringToObject(one, "text", out);
        cJSON_AddItemToArray(c, one);
    }
    char *text = mf_result(id, r);
    char head[400];
    if (k != 1) {
        snprintf(head, sizeof(head),
                 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 extra, strlen(text));
        mf_write(fd, head);
        mf_write(fd, text);
    } else { /* an event stream: a notification, then the answer */
        snprintf(head, sizeof(head),
                 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s"
                 "Cache-Control: no-cache\r\n\r\n",
                 extra);
        mf_write(fd, head);
        mf_write(fd, ": a comment\r\nevent: message\r\ndata: {\"jsonrpc\":"
                     "\"2.0\",\"method\":\"notifications/message\",\r\ndata: "
                     "\"params\":{\"level\":\"info\",\"data\":\"working\"}}"
                     "\r\n\r\n");
        size_t half = strlen(text) / 2;
        mf_write(fd, "id: 1\ndata: ");
        (void)!mf_send(fd, text, half);
        usleep(20000);
        mf_write(fd, text + half);
        mf_write(fd, "\n\n");
        /* left open: the client closes it once it has its answer */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        char b[64];
        while (poll(&pf, 1, 5000) > 0 && read(fd, b, sizeof(b)) > 0)
            ;
    }
    free(text);
out:
    cJSON_Delete(m);
}

static void *mf_serve(void *arg)
{
    struct mcph_fake *f = arg;
    static __thread char buf[1 << 16];
    while (!atomic_load(&f->stop)) {
        struct pollfd pf = {.fd = f->lfd, .events = POLLIN};
        if (poll(&pf, 1, 20) <= 0)
            continue;
        int c = accept(f->lfd, NULL, NULL);
        if (c < 0)
            continue;
        mf_ssl = NULL;
        if (f->tls) {
            mf_ssl = SSL_new(f->tls);
            SSL_set_fd(mf_ssl, c);
            if (SSL_accept(mf_ssl) != 1) { /* the client refused us */
                SSL_free(mf_ssl);
                mf_ssl = NULL;
                close(c);
                continue;
            }
        }
        size_t len = 0;
        long want = -1;
        while (len < sizeof(buf) - 1) {
            struct pollfd p2 = {.fd = c, .events = POLLIN};
            if (!(mf_ssl && SSL_pending(mf_ssl)) && poll(&p2, 1, 3000) <= 0)
                break;
            ssize_t n = mf_recv(c, buf + len, sizeof(buf) - 1 - len);
            if (n <= 0)
                break;
            len += (size_t)n;
            buf[len] = '\0';
            char *h = strstr(buf, "\r\n\r\n");
            if (h && want < 0) {
                char *cl = strcasestr(buf, "content-length:");
                want =
                    (long)(h + 4 - buf) + (cl ? strtol(cl + 15, NULL, 10) : 0);
            }
            if (want >= 0 && (long)len >= want)
                break;
        }
        buf[len] = '\0';
        if (len > 0)
            mf_answer(f, c, buf);
        if (mf_ssl) {
            SSL_shutdown(mf_ssl);
            SSL_free(mf_ssl);
            mf_ssl = NULL;
        }
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

static struct mcph_fake *mf_start(const char *token, SSL_CTX *tls)
{
    struct mcph_fake *f = calloc(1, sizeof(*f));
    cr_assert_not_null(f);
    f->token = token;
    f->tls = tls;
    f->lfd = tu_listen_loopback(&f->port);
    cr_assert_eq(pthread_create(&f->th, NULL, mf_serve, f), 0);
    return f;
}

static void mf_stop(struct mcph_fake *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    close(f->lfd);
    free(f);
}

/* A loopback port nothing listens on. */
static int closed_port(void)
{
    int port = 0;
    int fd = tu_listen_loopback(&port);
    close(fd);
    return port;
}

#define MCPH_TOKEN "mcp-bearer-Tk93-secret-value"

static const char *mcph_script(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)model;
    if (control_reply(role))
        return control_reply(role);
    switch (n) {
    case 0:
        return "CALL web.shout {\"text\":\"hi json\"}";
    case 1:
        return strstr(prompt, "HI JSON")
                   ? "CALL sse.shout {\"text\":\"hi sse\"}"
                   : "no json answer";
    case 2:
        return strstr(prompt, "HI SSE") ? "CALL web.shout {\"text\":\"again\"}"
                                        : "no sse answer";
    case 3:
        return strstr(prompt, "AGAIN") ? "CALL down.shout {\"text\":\"x\"}"
                                       : "no second answer";
    case 4:
        return "CALL junk.shout {\"text\":\"x\"}";
    case 5:
        return "CALL web.whoami {}";
    case 6:
        return "CALL web.expire {}";
    case 7: /* the server forgot the session: this call fails... */
        return "CALL web.shout {\"text\":\"lost\"}";
    case 8: /* ...and the next one starts a new session */
        return "CALL web.shout {\"text\":\"new session\"}";
    case 9:
        return "CALL slow.shout {\"text\":\"x\"}";
    default:
        return "done";
    }
}

Test(tool_loop, streamable_http_mcp_servers_in_json_and_sse, .timeout = 60)
{
    struct fake *f = fake_start(mcph_script);
    struct mcph_fake *mf = mf_start(MCPH_TOKEN, NULL);
    char *dir = tu_tmpdir();
    char rpath[600], servers[2048];
    snprintf(servers, sizeof(servers),
             "{\"web\":{\"url\":\"http://127.0.0.1:%d/json\",\"token_env\":"
             "\"FORUM_TEST_MCP_TOKEN\",\"headers\":{\"X-Client\":\"t\"}},"
             "\"sse\":{\"url\":\"http://localhost:%d/sse\",\"token_env\":"
             "\"FORUM_TEST_MCP_TOKEN\"},"
             "\"down\":{\"url\":\"http://127.0.0.1:%d/\",\"timeout_s\":20},"
             "\"junk\":{\"url\":\"http://127.0.0.1:%d/junk\",\"token_env\":"
             "\"FORUM_TEST_MCP_TOKEN\"},"
             "\"slow\":{\"url\":\"http://127.0.0.1:%d/hang\",\"timeout_s\":1,"
             "\"token_env\":\"FORUM_TEST_MCP_TOKEN\"}}",
             mf->port, mf->port, closed_port(), mf->port, mf->port);
    mcp_test_files(dir,
                   "\"web.shout\",\"web.whoami\",\"sse.shout\",\"down.shout\","
                   "\"junk.shout\",\"web.expire\",\"slow.shout\"",
                   12, f->port, servers, rpath, sizeof(rpath));
    setenv("FORUM_TEST_MCP_TOKEN", MCPH_TOKEN, 1);
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, NULL);
    unsetenv("FORUM_TEST_MCP_TOKEN");
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert_null(strstr(run.out, MCPH_TOKEN));
    cr_assert_null(strstr(run.err, MCPH_TOKEN));
    tu_run_free(&run);
    cr_assert(strstr(f->seen, "\"web__shout\"") &&
                  strstr(f->seen, "\"sse__shout\""),
              "the servers' tools were not offered");
    cr_assert_eq(f->bad_names, 0);
    char *res = bodies_of(dir, "tool_result");
    cr_assert(strstr(res, "\"output\":\"HI JSON\""), "%s", res);
    cr_assert(strstr(res, "\"output\":\"HI SSE\""), "%s", res);
    cr_assert(strstr(res, "\"output\":\"AGAIN\""), "%s", res);
    cr_assert(strstr(res, "MCP server down: cannot connect to 127.0.0.1"), "%s",
              res);
    cr_assert(strstr(res, "MCP server junk: answered garbage"), "%s", res);
    /* the server echoed the token: the guardrails took it out */
    cr_assert(strstr(res, "MCP server web: the session ended (HTTP 404)"), "%s",
              res);
    cr_assert(strstr(res, "\"output\":\"NEW SESSION\""), "%s", res);
    cr_assert(strstr(res, "MCP server slow: shout took over 1 s"), "%s", res);
    /* the call that took too long was cancelled at the server (the fake
     * takes the notification once its 3 s hang is over) */
    for (int i = 0;
         i < 100 && !strstr(mf->log, "/hang notifications/cancelled"); i++)
        usleep(50000);
    cr_assert(strstr(mf->log, "/hang notifications/cancelled"), "%s", mf->log);
    /* the run over, the sessions of the servers that answer were ended
     * (DELETE with their id; a wrong one would count as a violation) */
    for (int i = 0; i < 100 && (!strstr(mf->log, "/json DELETE;") ||
                                !strstr(mf->log, "/sse DELETE;"));
         i++)
        usleep(50000);
    cr_assert(strstr(mf->log, "/json DELETE;"), "%s", mf->log);
    cr_assert(strstr(mf->log, "/sse DELETE;"), "%s", mf->log);
    cr_assert(strstr(res, "\"output\":\"[redacted:bearer_token]\",\"tool\":"
                          "\"web.whoami\""),
              "%s", res);
    free(res);
    char *calls = bodies_of(dir, "tool_call");
    cr_assert(strstr(calls, "\"tool\":\"web.shout\"") &&
                  strstr(calls, "\"tool\":\"sse.shout\""),
              "%s", calls);
    free(calls);
    /* one session a server, every later request in it, nothing refused */
    cr_assert_eq(mf->violations, 1, "only the expired session: %s", mf->log);
    cr_assert_eq(mf->sessions, 4, "%s", mf->log);
    cr_assert_geq(mf->with_id, 7, "%s", mf->log);
    cr_assert(strstr(mf->log, "/json initialize; /json "
                              "notifications/initialized; /json tools/list;"),
              "%s", mf->log);
    /* the token is nowhere in the data dir */
    cr_assert_eq(files_holding(dir, MCPH_TOKEN), 0);
    char *out = bodies_of(dir, "result");
    cr_assert(strstr(out, "\"stop_reason\":\"answer\""), "%s", out);
    free(out);
    mf_stop(mf);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

static const char *b400_script(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (control_reply(role))
        return control_reply(role);
    return n == 0   ? "CALL web.shout {\"text\":\"first\"}"
           : n == 1 ? "CALL web.expire {}"
           : n == 2 ? "CALL web.shout {\"text\":\"lost\"}"
           : n == 3 ? "CALL web.shout {\"text\":\"new session\"}"
                    : "done";
}

/* A server that answers a forgotten session with 400 and a JSON-RPC error
 * naming the session (as the reference server-everything does), not 404:
 * the call that met it fails, and the next one starts a new session
 * (before, every later call failed until a restart). */
Test(tool_loop, a_forgotten_session_answered_400_is_started_again,
     .timeout = 60)
{
    struct fake *f = fake_start(b400_script);
    struct mcph_fake *mf = mf_start(NULL, NULL);
    char *dir = tu_tmpdir();
    char rpath[600], servers[512];
    snprintf(servers, sizeof(servers),
             "{\"web\":{\"url\":\"http://127.0.0.1:%d/b400\"}}", mf->port);
    mcp_test_files(dir, "\"web.shout\",\"web.expire\"", 8, f->port, servers,
                   rpath, sizeof(rpath));
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    char *res = bodies_of(dir, "tool_result");
    cr_assert(strstr(res, "\"output\":\"FIRST\""), "%s", res);
    cr_assert(strstr(res, "MCP server web: the session ended (HTTP 400: "),
              "%s", res);
    cr_assert(strstr(res, "\"output\":\"NEW SESSION\""), "%s", res);
    free(res);
    cr_assert_eq(mf->sessions, 2, "%s", mf->log);
    mf_stop(mf);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

static const char *tls_script(struct fake *f, const char *role, int n,
                              const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (control_reply(role))
        return control_reply(role);
    return n == 0   ? "CALL safe.shout {\"text\":\"over tls\"}"
           : n == 1 ? "CALL unsure.shout {\"text\":\"x\"}"
                    : "done";
}

Test(tool_loop, streamable_http_mcp_over_https, .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_start(tls_script);
    char *dir = tu_tmpdir();
    char rpath[600], pem[600], servers[2048];
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    SSL_CTX *tls = tu_tls_server("IP:127.0.0.1", pem);
    struct mcph_fake *mf = mf_start(NULL, tls);
    /* the same server, trusted through ca_file, and not trusted at all */
    snprintf(servers, sizeof(servers),
             "{\"safe\":{\"url\":\"https://127.0.0.1:%d/json\",\"ca_file\":"
             "\"%s\"},\"unsure\":{\"url\":\"https://127.0.0.1:%d/json\"}}",
             mf->port, pem, mf->port);
    mcp_test_files(dir, "\"safe.shout\",\"unsure.shout\"", 4, f->port, servers,
                   rpath, sizeof(rpath));
    struct tu_run run =
        tu_forumv(NULL, "--ledger", dir, "--json", "submit", "edit", "the",
                  "file", "--roster", rpath, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    char *res = bodies_of(dir, "tool_result");
    cr_assert(strstr(res, "\"output\":\"OVER TLS\""), "%s", res);
    cr_assert(strstr(res, "MCP server unsure: tls: the certificate of "
                          "127.0.0.1 did not verify"),
              "%s", res);
    free(res);
    cr_assert_eq(mf->violations, 0, "%s", mf->log);
    mf_stop(mf);
    SSL_CTX_free(tls);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(mcp_http, server_entries_are_checked)
{
    struct fo_err err;
    const char *bad[][2] = {
        {"{\"a\":{\"url\":\"http://x/\",\"command\":\"y\"}}", "not both"},
        {"{\"a\":{\"url\":\"ftp://x/\"}}", "not an http"},
        {"{\"a\":{\"url\":\"http://u:p@x/\"}}", "user info"},
        {"{\"a\":{\"url\":\"http://x/\",\"headers\":{\"Authorization\":"
         "\"Bearer k\"}}}",
         "token_env"},
        {"{\"a\":{\"url\":\"http://x/\",\"headers\":{\"X-A\":\"a\\nb\"}}}",
         "one line"},
        {"{\"a\":{\"url\":\"http://x/\",\"token_env\":\"A B\"}}", "token_env"},
        {"{\"a\":{\"url\":\"http://x/\",\"args\":[]}}", "runs no program"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *j = cJSON_Parse(bad[i][0]);
        cr_assert_not_null(j);
        cr_assert_eq(orch_mcpc_check(j, &err), FO_E_INVALID, "%s", bad[i][0]);
        cr_assert(strstr(err.msg, bad[i][1]), "%s: %s", bad[i][0], err.msg);
        cJSON_Delete(j);
    }
    cJSON *ok = cJSON_Parse(
        "{\"a\":{\"url\":\"https://mcp.example.com/mcp?x=1\",\"headers\":"
        "{\"X-Team\":\"t1\"},\"token_env\":\"GH_TOKEN\",\"timeout_s\":30}}");
    cr_assert_eq(orch_mcpc_check(ok, &err), FO_OK, "%s", err.msg);
    cJSON_Delete(ok);
}

/* ---- a run killed mid-loop resumes without running a witnessed call -------
 */

#include <signal.h>
#include <stdatomic.h>

#include "tu_daemon.h"

static atomic_int resume_hold = 1;   /* the second turn waits while set */
static atomic_int resume_second = 0; /* the second turn has been asked */

static const char *resuming(struct fake *f, const char *role, int n,
                            const char *model, const char *prompt)
{
    (void)f, (void)model;
    if (control_reply(role))
        return control_reply(role);
    if (n == 0)
        return "CALL run_command {\"argv\":[\"sh\",\"-c\",\"echo ran >> "
               "calls.log\"]}";
    /* later turns: the first is held until the daemon was killed */
    atomic_store(&resume_second, 1);
    for (int i = 0; i < 3000 && atomic_load(&resume_hold); i++)
        usleep(10000);
    return strstr(prompt, "exit code 0") ? "the log has one line"
                                         : "the call's result was lost";
}

Test(tool_loop, a_run_killed_mid_loop_resumes_and_runs_no_witnessed_call_again,
     .timeout = 90)
{
    struct fake *f = fake_start(resuming);
    char *dir = tu_tmpdir();
    char ws[600], rpath[600], cpath[600], cfg[600], logp[700];
    project_dir(ws, sizeof(ws), dir);
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    snprintf(logp, sizeof(logp), "%s/calls.log", ws);
    cr_assert_eq(tu_write_file(rpath, roster, strlen(roster)), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":"
             "\"http://127.0.0.1:%d\",\"model\":\"m1\"}]}}",
             f->port);
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--roster", rpath, "--workspace", ws, NULL);
    cJSON *s = tu_http_json(&d, "POST", "/runs",
                            "{\"request\":\"edit the file\"}", 200);
    long long run = tu_num(s, "run");
    cJSON_Delete(s);
    /* the call ran and its result is on record; the next turn is asked */
    for (int i = 0; i < 3000 && !atomic_load(&resume_second); i++)
        usleep(10000);
    cr_assert(atomic_load(&resume_second), "the second turn never came");
    cr_assert_eq(tu_kind_count(dir, "tool_result"), 1);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGKILL, 10000), 128 + SIGKILL);
    atomic_store(&resume_hold, 0);
    tu_daemon_start(&d, dir, "--roster", rpath, "--workspace", ws, NULL);
    cJSON *g = tu_daemon_run_wait(&d, run, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    tu_daemon_signal_wait(&d, SIGTERM, 10000);
    char *log = tu_read_file(logp, NULL);
    cr_assert_str_eq(log, "ran\n", "the witnessed call ran again");
    free(log);
    /* the resumed conversation held the witnessed result */
    char *res = bodies_of(dir, "result");
    cr_assert(strstr(res, "the log has one line"), "%s", res);
    free(res);
    fake_stop(f);
    fake_free(f);
    rmrf_with_project(dir);
}

/* ---- the daemon ends its MCP sessions when it stops -------------------- */

static const char *del_script(struct fake *f, const char *role, int n,
                              const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (control_reply(role))
        return control_reply(role);
    return n == 0 ? "CALL web.shout {\"text\":\"bye\"}" : "done";
}

/* A daemon keeps a Streamable HTTP server's session while it serves, and
 * ends it (DELETE with its id) once its runs are stopped at SIGTERM, also
 * when the last run leaves memory after the SIGTERM (test builds: its
 * tree head read held, FORUM_TEST_HEAD_HOLD, until the drain began; the
 * DELETE was skipped then). */
Test(tool_loop, the_daemon_ends_mcp_sessions_when_it_stops, .timeout = 60)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    signal(SIGPIPE, SIG_IGN);
    struct tu_hold h;
    tu_hold_init(&h);
    tu_hold_set(&h);
    struct fake *f = fake_start(del_script);
    struct mcph_fake *mf = mf_start(NULL, NULL);
    char *dir = tu_tmpdir();
    char rpath[600], servers[256];
    snprintf(servers, sizeof(servers),
             "{\"web\":{\"url\":\"http://127.0.0.1:%d/json\"}}", mf->port);
    mcp_test_files(dir, "\"web.shout\"", 4, f->port, servers, rpath,
                   sizeof(rpath));
    struct tu_daemon d;
    setenv("FORUM_TEST_HEAD_HOLD", h.path, 1);
    tu_daemon_start(&d, dir, "--roster", rpath, NULL);
    unsetenv("FORUM_TEST_HEAD_HOLD");
    cJSON *s = tu_http_json(&d, "POST", "/runs",
                            "{\"request\":\"edit the file\"}", 200);
    long long run = tu_num(s, "run");
    cJSON_Delete(s);
    cJSON *g = tu_daemon_run_wait(&d, run, 30000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cr_assert(strstr(mf->log, "/json tools/call;"), "%s", mf->log);
    cr_assert_null(strstr(mf->log, "DELETE"), "ended while serving: %s",
                   mf->log);
    /* the run, over on record, is in memory until its head is read */
    tu_hold_wait(&h, 30000, "the run's head was never read");
    tu_daemon_term_drained(&d);
    tu_hold_release(&h);
    cr_assert_eq(tu_daemon_signal_wait(&d, 0, 20000), 0);
    cr_assert(!tu_hold_expired(&h));
    tu_hold_free(&h);
    cr_assert(strstr(mf->log, "/json DELETE;"), "%s", mf->log);
    cr_assert_eq(mf->violations, 0, "%s", mf->log);
    mf_stop(mf);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* ---- a session's later turns see the tool results of earlier ones -------- */

static const char *session_script(struct fake *f, const char *role, int n,
                                  const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (control_reply(role))
        return control_reply(role);
    if (n == 0)
        return "CALL read_file {\"path\":\"in.txt\"}";
    if (n == 1)
        return "CALL run_command {\"argv\":[\"true\"]}";
    return "read it";
}

static void session_turns(const char *context_json, int want_seen)
{
    struct fake *f = fake_start(session_script);
    char *dir = tu_tmpdir();
    char ws[600], rpath[600], cpath[600], cfg[800], in[700];
    project_dir(ws, sizeof(ws), dir);
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    snprintf(cpath, sizeof(cpath), "%s/forum.json", dir);
    snprintf(in, sizeof(in), "%s/in.txt", ws);
    cr_assert_eq(tu_write_file(in, "the secret word is plover\n", 26), 0);
    cr_assert_eq(tu_write_file(rpath, roster, strlen(roster)), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":"
             "\"http://127.0.0.1:%d\",\"model\":\"m1\"}]}%s%s}",
             f->port, context_json ? ",\"context\":" : "",
             context_json ? context_json : "");
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    for (int turn = 0; turn < 2; turn++) {
        struct tu_run run = tu_forumv(
            NULL, "--ledger", dir, "submit", "edit the file", "--roster", rpath,
            "--workspace", ws, "--session", "s1", NULL);
        cr_assert_eq(run.status, 0, "%s", run.err);
        tu_run_free(&run);
        if (turn == 0) { /* what turn 1 sent is not what turn 2 sees */
            free(f->seen);
            f->seen = NULL;
            f->seen_len = 0;
        }
    }
    /* turn 2's coordinator was sent turn 1's tool results, or not */
    int seen = strstr(f->seen, "Tool results of turn 1") &&
               strstr(f->seen, "- read_file: the secret word is plover");
    cr_assert_eq(seen, want_seen, "%.2000s", f->seen);
    char *budget = bodies_of(dir, "context_budget");
    cr_assert(strstr(budget, "\"source\":\"tool_results\""), "%s", budget);
    if (!want_seen)
        cr_assert(strstr(budget, "\"reason\":\"max_tool_results_tokens\""),
                  "%s", budget);
    free(budget);
    fake_stop(f);
    fake_free(f);
    rmrf_with_project(dir);
}

Test(tool_loop, a_later_turn_sees_the_tool_results_of_earlier_ones,
     .timeout = 60)
{
    session_turns(NULL, 1);
}

Test(tool_loop, forum_json_context_limits_can_leave_tool_results_out,
     .timeout = 60)
{
    session_turns("{\"max_tool_results_tokens\":0}", 0);
}

/* ---- run_command runs in the sandbox, and says so -------------------------
 */

static char sandbox_secret_path[700];

static const char *peeking(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    static char call[1024];
    if (control_reply(role))
        return control_reply(role);
    if (n % 2 == 0) {
        snprintf(call, sizeof(call),
                 "CALL run_command {\"argv\":[\"cat\",\"%s\"]}",
                 sandbox_secret_path);
        return call;
    }
    return "done";
}

static char *peek_run(const char *mode)
{
    struct fake *f = fake_start(peeking);
    char *dir = tu_tmpdir();
    char rpath[600], url[80];
    snprintf(rpath, sizeof(rpath), "%s/roster.json", dir);
    snprintf(sandbox_secret_path, sizeof(sandbox_secret_path), "%s/secret.txt",
             dir);
    cr_assert_eq(tu_write_file(sandbox_secret_path, "PLOVER-XYZZY", 12), 0);
    const char *r =
        "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
        "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
        "\"model_tier\":\"capable\",\"executor\":\"chat\",\"tools\":["
        "\"run_command\"]}]}";
    cr_assert_eq(tu_write_file(rpath, r, strlen(r)), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
    struct tu_run run = tu_forumv(
        NULL, "--ledger", dir, "submit", "edit", "the", "file", "--roster",
        rpath, "--sandbox", mode, "--chat-url", url, "--model", "m1", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    char *res = bodies_of(dir, "tool_result");
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
    return res;
}

Test(tool_loop, run_command_cannot_read_the_data_dir_from_its_sandbox,
     .timeout = 60)
{
    char why[256];
    if (!orch_sandbox_available(why, sizeof(why)))
        cr_skip_test("no sandbox on this machine: %s", why);
    char *res = peek_run("bwrap");
    cr_assert(strstr(res, "\"sandbox\":\"bwrap\""), "%s", res);
    cr_assert_null(strstr(res, "PLOVER-XYZZY"), "%s", res);
    cr_assert(strstr(res, "No such file"), "%s", res);
    free(res);
    /* unconfined, as the operator may choose: the same call reads it, and
     * every result says it ran without a sandbox */
    res = peek_run("none");
    cr_assert(strstr(res, "\"sandbox\":\"none\""), "%s", res);
    cr_assert(strstr(res, "PLOVER-XYZZY"), "%s", res);
    free(res);
}

/* ---- /metrics: the engine's counters, and --metrics-public ----------------
 */

Test(metrics, model_calls_runs_and_build_info_are_scraped, .timeout = 60)
{
    struct scene sc;
    scene_open(&sc, acting);
    char cpath[700], cfg[400];
    snprintf(cpath, sizeof(cpath), "%s/forum.json", sc.dir);
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":\"%s\","
             "\"model\":\"m1\"}]}}",
             sc.url);
    cr_assert_eq(tu_write_file(cpath, cfg, strlen(cfg)), 0);
    char in[700];
    snprintf(in, sizeof(in), "%s/in.txt", sc.ws);
    cr_assert_eq(tu_write_file(in, "hello world\n", 12), 0);
    struct tu_daemon d;
    tu_daemon_start(&d, sc.dir, "--roster", sc.rpath, "--workspace", sc.ws,
                    NULL);
    /* the token guards /metrics unless --metrics-public */
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 0, NULL), 401);
    cJSON *s = tu_http_json(&d, "POST", "/submit",
                            "{\"request\":\"edit the file\"}", 200);
    cJSON_Delete(s);
    char *m = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &m), 200);
    cr_assert(strstr(m, "forum_build_info{version=\""), "%s", m);
    cr_assert(strstr(m, "forum_runs_in_flight 0\n"), "%s", m);
    cr_assert(strstr(m, "forum_runs_started_total 1\n"), "%s", m);
    /* coordinator, four task turns, validator, synthesizer: 7 calls */
    long calls = sc.f->count[R_COORD] + sc.f->count[R_CLASS] +
                 sc.f->count[R_VALID] + sc.f->count[R_SYNTH] +
                 sc.f->count[R_TASK];
    char want[96];
    snprintf(want, sizeof(want),
             "forum_model_calls_total{outcome=\"ok\"} %ld\n", calls);
    cr_assert(strstr(m, want), "want %s in %s", want, m);
    snprintf(want, sizeof(want), "forum_model_call_seconds_count %ld\n", calls);
    cr_assert(strstr(m, want), "want %s in %s", want, m);
    /* the fake reports 7 tokens in and 3 out for every answer */
    snprintf(want, sizeof(want),
             "forum_model_tokens_total{direction=\"input\"} %ld\n", 7 * calls);
    cr_assert(strstr(m, want), "want %s in %s", want, m);
    snprintf(want, sizeof(want),
             "forum_model_tokens_total{direction=\"output\"} %ld\n", 3 * calls);
    cr_assert(strstr(m, want), "want %s in %s", want, m);
    free(m);
    /* the summary counts the same model calls from the ledger (each task
     * turn, each role), not the results it holds (it said 1: one task) */
    cJSON *sum = tu_http_json(&d, "GET", "/summary", NULL, 200);
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(sum, "runs"), "model_calls");
    long total = 0;
    const cJSON *it;
    cJSON_ArrayForEach (it, mc)
        total += (long)it->valuedouble;
    cr_assert_eq(total, calls, "model_calls %ld, the model served %ld", total,
                 calls);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(mc, "stub"));
    cJSON_Delete(sum);
    tu_daemon_signal_wait(&d, SIGTERM, 10000);
    tu_daemon_start(&d, sc.dir, "--metrics-public", NULL);
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 0, NULL), 200);
    cr_assert_eq(tu_http(&d, "GET", "/status", NULL, 0, NULL), 401);
    tu_daemon_signal_wait(&d, SIGTERM, 10000);
    fake_stop(sc.f);
    fake_free(sc.f);
    rmrf_with_project(sc.dir);
}
