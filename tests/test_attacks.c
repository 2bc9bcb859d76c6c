/* test_attacks: what a hostile or broken agent tries, through a scripted
 * model that replays the tool calls a prompt-injected model would make
 * (tests/tu_scene.h). Each case is a defect an outside attack found: the
 * daemon must stay responsive, keep its secrets and end the run. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/orch_guard.h"
#include "daemon/orch_tools.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "testutil.h"
#include "tu_daemon.h"
#include "tu_scene.h"

/* ---- a budget spent inside the tool loop ------------------------------- */

/* A model that never answers: every turn calls a tool. */
static const char *tool_forever(struct fake *f, const char *role, int n,
                                const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "CALL list_dir {\"path\":\".\"}";
}

Test(budget, spent_inside_the_tool_loop_ends_the_run, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, tool_forever, NULL);
    struct tu_run run = tu_forumv(
        NULL, "--ledger", sc.dir, "--json", "submit", "edit", "the", "file",
        "--roster", sc.rpath, "--workspace", sc.ws, "--chat-url", sc.url,
        "--model", "m1", "--max-model-calls", "5", NULL);
    /* exit 0: answered, with budget_spent (the documented contract) */
    cr_assert_eq(run.status, 0, "%d: %s", run.status, run.err);
    cJSON *out = tu_run_json(&run);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(out, "budget_spent")), "%s",
              run.out);
    cr_assert_str_eq(tu_str(out, "budget_reason"), "max_model_calls");
    cJSON_Delete(out);
    tu_run_free(&run);
    struct tu_entries k;
    tu_scene_entries(sc.dir, &k);
    cr_assert_eq(tu_scene_count(&k, "budget"), 1, "one budget entry");
    cr_assert_eq(tu_scene_count(&k, "answer"), 1, "the run answered");
    char *b = tu_scene_bodies(sc.dir, "budget");
    cr_assert(strstr(b, "max_model_calls"), "%s", b);
    free(b);
    /* every call witnessed has its result */
    cr_assert_eq(tu_scene_count(&k, "tool_call"),
                 tu_scene_count(&k, "tool_result"));
    cr_assert_leq(sc.f->count[R_TASK] + sc.f->count[R_COORD], 5,
                  "the budget held: %d calls",
                  sc.f->count[R_TASK] + sc.f->count[R_COORD]);
    tu_scene_close(&sc);
}

/* ---- special files: a FIFO must not freeze the daemon ------------------ */

static const char *fifo_script(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    switch (n) {
    case 0:
        return "CALL write_file {\"path\":\"q\",\"content\":\"x\"}";
    case 1:
        return "CALL read_file {\"path\":\"q\"}";
    case 2:
        return "CALL apply_patch {\"patch\":\"--- a/q\\n+++ b/q\\n@@ -1 +1 "
               "@@\\n-x\\n+y\\n\"}";
    case 3:
        return "CALL search_text {\"path\":\".\",\"pattern\":\"x\"}";
    default:
        return "done";
    }
}

Test(special_files, a_fifo_in_the_workspace_is_refused_not_opened,
     .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, fifo_script, NULL);
    char q[700];
    snprintf(q, sizeof(q), "%s/q", sc.ws);
    cr_assert_eq(mkfifo(q, 0600), 0);
    /* once with the daemon's loop, twice: a run resumed after a kill
     * would open it again */
    struct tu_daemon d;
    tu_daemon_start(&d, sc.dir, "--chat-url", sc.url, "--model", "m1",
                    "--roster", sc.rpath, "--workspace", sc.ws, NULL);
    cJSON *res = tu_http_json(&d, "POST", "/submit",
                              "{\"request\":\"edit the file\"}", 200);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(res, "answer")));
    cJSON_Delete(res);
    char *body = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, &body), 200,
                 "the daemon still answers");
    free(body);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    char *tr = tu_scene_bodies(sc.dir, "tool_result");
    int refused = 0;
    for (const char *p = tr; (p = strstr(p, "not a regular file")); p++)
        refused++;
    cr_assert_geq(refused, 3, "write, read and patch refused: %s", tr);
    free(tr);
    tu_scene_close(&sc);
}

/* ---- the file tools' budgets --------------------------------------------- */

static int tool_call(int ws, const char *tool, const char *args,
                     const struct orch_tool_budget *b, char **out)
{
    cJSON *a = NULL;
    struct fo_err err;
    int rc = orch_tool_args(orch_tool_builtin(tool), args, &a, &err);
    cr_assert_eq(rc, FO_OK, "%s", err.msg);
    struct fo_buf buf;
    fo_buf_init(&buf, FO_BUF_UNLIMITED);
    rc = orch_tool_run_file(ws, tool, a, b, &buf, &err);
    *out = strdup(rc ? err.msg : (buf.data ? buf.data : ""));
    fo_buf_release(&buf);
    cJSON_Delete(a);
    return rc;
}

/* A temp dir on a tmpfs of its own where the test may mount one (as
 * root): 21,000 directories are made in memory, not on a loaded disk. */
static char *scratch_dir(int *mounted)
{
    char *dir = tu_tmpdir();
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=512m tmpfs %s", dir);
    *mounted = geteuid() == 0 && system(cmd) == 0;
    return dir;
}

static void scratch_close(char *dir, int mounted)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "umount %s", dir);
    if (mounted)
        cr_assert_eq(system(cmd), 0);
    tu_rmrf(dir);
}

Test(tool_budget, a_search_stops_at_its_byte_and_entry_limits, .timeout = 120)
{
    int mounted = 0;
    char *dir = scratch_dir(&mounted);
    int ws = -1;
    struct fo_err err;
    cr_assert_eq(orch_workspace_open(dir, 0, &ws, &err), FO_OK);
    /* 200 sparse files of 1 MiB: 200 MiB to read, no disk used */
    for (int i = 0; i < 200; i++) {
        char p[700];
        snprintf(p, sizeof(p), "%s/f%03d", dir, i);
        int fd = open(p, O_WRONLY | O_CREAT, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, 1 << 20), 0);
        close(fd);
    }
    char *out = NULL;
    cr_assert_eq(
        tool_call(ws, "search_text", "{\"pattern\":\"x\"}", NULL, &out), FO_OK);
    cr_assert(strstr(out, "[search stopped after"), "%s", out);
    free(out);
    /* directories count too: 21,000 empty ones end the walk */
    char sub[700];
    snprintf(sub, sizeof(sub), "%s/d", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    for (int i = 0; i < 21000; i++) {
        char p[800];
        snprintf(p, sizeof(p), "%s/%d", sub, i);
        cr_assert_eq(mkdir(p, 0700), 0);
    }
    cr_assert_eq(tool_call(ws, "search_text",
                           "{\"path\":\"d\",\"pattern\":\"x\"}", NULL, &out),
                 FO_OK);
    cr_assert(strstr(out, "[search stopped after 20000 entries"), "%s", out);
    free(out);
    close(ws);
    scratch_close(dir, mounted);
}

Test(tool_budget, a_cancel_or_a_spent_deadline_stops_a_tool)
{
    char *dir = tu_tmpdir();
    int ws = -1;
    struct fo_err err;
    cr_assert_eq(orch_workspace_open(dir, 0, &ws, &err), FO_OK);
    char p[700];
    snprintf(p, sizeof(p), "%s/a", dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    atomic_int cancel = 1;
    struct orch_tool_budget b = {.cancel = &cancel};
    char *out = NULL;
    cr_assert_eq(tool_call(ws, "search_text", "{\"pattern\":\"x\"}", &b, &out),
                 FO_E_TIMEOUT, "%s", out);
    free(out);
    struct orch_tool_budget late = {.deadline_ms = 1};
    cr_assert_eq(tool_call(ws, "apply_patch",
                           "{\"patch\":\"--- /dev/null\\n+++ b/n\\n@@ -0,0 +1 "
                           "@@\\n+x\\n\"}",
                           &late, &out),
                 FO_E_TIMEOUT, "%s", out);
    free(out);
    close(ws);
    tu_rmrf(dir);
}

/* The hunk is found wherever it sits (nearest to its stated line), and a
 * 200,000-line hunk that fails on its last line against a 500,000-line
 * file is refused after one linear pass: compared offset by offset, line
 * by line, it is 10^11 comparisons, minutes, well past this test's
 * timeout (an 80,000-line case stalled the daemon's loop 7.6 s). */
Test(tool_budget, patches_are_matched_in_one_pass, .timeout = 60)
{
    char *dir = tu_tmpdir();
    int ws = -1;
    struct fo_err err;
    cr_assert_eq(orch_workspace_open(dir, 0, &ws, &err), FO_OK);
    struct fo_buf file, patch;
    fo_buf_init(&file, FO_BUF_UNLIMITED);
    fo_buf_init(&patch, FO_BUF_UNLIMITED);
    for (int i = 0; i < 500000; i++)
        fo_buf_puts(&file, "a\n");
    char path[700];
    snprintf(path, sizeof(path), "%s/big", dir);
    cr_assert_eq(tu_write_file(path, file.data, file.len), 0);
    fo_buf_puts(&patch, "--- a/big\n+++ b/big\n@@ -1,200000 +1,200000 @@\n");
    for (int i = 0; i < 199999; i++)
        fo_buf_puts(&patch, " a\n");
    fo_buf_puts(&patch, "-b\n+c\n");
    cJSON *args = cJSON_CreateObject();
    cJSON_AddStringToObject(args, "patch", patch.data);
    struct fo_buf out;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    int rc = orch_tool_run_file(ws, "apply_patch", args, NULL, &out, &err);
    cr_assert_eq(rc, FO_E_INVALID);
    cr_assert(strstr(err.msg, "does not match"), "%s", err.msg);
    cJSON_Delete(args);
    fo_buf_release(&out);
    /* a small file: the hunk's stated line is off by 3, the nearest
     * occurrence of its context is taken, CRLF lines match LF ones */
    const char *text = "x\r\ny\r\nk\r\nz\r\nk\r\nw\r\n";
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0);
    char *o = NULL;
    cr_assert_eq(tool_call(ws, "apply_patch",
                           "{\"patch\":\"--- a/big\\n+++ b/big\\n@@ -2,1 +2,1 "
                           "@@\\n-k\\n+K\\n\"}",
                           NULL, &o),
                 FO_OK, "%s", o);
    free(o);
    char *got = tu_read_file(path, NULL);
    cr_assert_str_eq(got, "x\r\ny\r\nK\nz\r\nk\r\nw\r\n");
    free(got);
    fo_buf_release(&file);
    fo_buf_release(&patch);
    close(ws);
    tu_rmrf(dir);
}

/* ---- the guardrails scrub the record, never the tool's input ---------- */

#define LEAKED_KEY "sk-ant-api03-LEAKEDKEYabcdefghijklmnopqrstuvwxyz"
#define LEAKED_MAIL "alice.jones@example.org"

static const char *leaky(struct fake *f, const char *role, int n,
                         const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    switch (n) {
    case 0:
        return "CALL write_file "
               "{\"path\":\"c.txt\",\"content\":\"contact " LEAKED_MAIL
               " key " LEAKED_KEY "\"}";
    case 1: /* a tool name that is a secret: refused, and not recorded */
        return "CALL " LEAKED_KEY " {}";
    default:
        return "done";
    }
}

/* Every request the fake was sent after the first, and the ledger's
 * files: the needle is in none of them. */
static void nowhere(const struct scene *sc, const char *needle)
{
    const char *later = strstr(sc->f->seen, "\"tool_calls\"");
    cr_assert(later == NULL || strstr(later, needle) == NULL,
              "%s went back to the model", needle);
    const char *files[] = {"ledger.db", "ledger.db-wal"};
    for (int i = 0; i < 2; i++) {
        char path[700];
        snprintf(path, sizeof(path), "%s/%s", sc->dir, files[i]);
        cr_assert_not(tu_file_has(path, needle), "%s is in %s", needle,
                      files[i]);
    }
}

Test(guardrails, the_tool_gets_what_the_model_wrote_the_ledger_does_not,
     .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, leaky, NULL);
    struct tu_run run =
        tu_forumv(NULL, "--ledger", sc.dir, "--json", "submit", "edit", "the",
                  "file", "--roster", sc.rpath, "--workspace", sc.ws,
                  "--chat-url", sc.url, "--model", "m1", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    char path[700];
    snprintf(path, sizeof(path), "%s/c.txt", sc.ws);
    char *got = tu_read_file(path, NULL);
    cr_assert_not_null(got);
    cr_assert_str_eq(got, "contact " LEAKED_MAIL " key " LEAKED_KEY);
    free(got);
    nowhere(&sc, LEAKED_MAIL);
    nowhere(&sc, LEAKED_KEY);
    char *calls = tu_scene_bodies(sc.dir, "tool_call");
    cr_assert(strstr(calls, "\"arguments_redacted\":true"), "%s", calls);
    cr_assert(strstr(calls, "[redacted:email]"), "%s", calls);
    free(calls);
    tu_scene_close(&sc);
}

Test(guardrails, pgp_private_key_blocks_are_recognised)
{
    const char *in = "before\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
                     "lQOYBF0AAAA\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----"
                     "\nafter";
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    cr_assert_eq(orch_guard_scan(NULL, in, strlen(in), &b, &found), 1);
    cr_assert_str_eq(b.data, "before\n[redacted:private_key]\nafter");
    fo_buf_release(&b);
    cJSON_Delete(found);
}

/* ---- the ledger's disk ---------------------------------------------------
 * On a small tmpfs (as root, where the test can mount one): the data dir
 * and the workspace share it, as they do when workspaces live beside the
 * ledger. */

struct small_disk {
    char *mnt;      /* the tmpfs */
    char dir[600];  /* MNT/data: the data dir */
    char ws[600];   /* MNT/project: the workspace */
    char fill[600]; /* MNT/filler */
};

static void small_disk_open(struct small_disk *sd, int mib)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to mount a tmpfs");
    sd->mnt = tu_tmpdir();
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=%dm tmpfs %s", mib,
             sd->mnt);
    if (system(cmd) != 0) {
        tu_rmrf(sd->mnt);
        cr_skip_test("cannot mount a tmpfs here");
    }
    snprintf(sd->dir, sizeof(sd->dir), "%s/data", sd->mnt);
    snprintf(sd->ws, sizeof(sd->ws), "%s/project", sd->mnt);
    snprintf(sd->fill, sizeof(sd->fill), "%s/filler", sd->mnt);
    cr_assert_eq(mkdir(sd->dir, 0700), 0);
    cr_assert_eq(mkdir(sd->ws, 0700), 0);
    cr_assert_eq(chown(sd->ws, 65534, 65534), 0);
}

static void small_disk_close(struct small_disk *sd)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "umount %s", sd->mnt);
    cr_assert_eq(system(cmd), 0);
    tu_rmrf(sd->mnt);
}

/* Fills the disk to its last byte (a file the test owns). */
static void fill_up(const struct small_disk *sd)
{
    int fd = open(sd->fill, O_WRONLY | O_CREAT | O_APPEND, 0600);
    cr_assert_geq(fd, 0);
    static char block[65536];
    while (write(fd, block, sizeof(block)) > 0)
        ;
    while (write(fd, block, 1) > 0)
        ;
    close(fd);
}

static const char *slow_filler(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    if (n == 0) /* 20 MiB/s, for ever: the disk's reserve stops it */
        return "CALL run_command {\"argv\":[\"sh\",\"-c\",\"while :; do "
               "head -c 1048576 /dev/zero >> big; sleep 0.05; done\"],"
               "\"timeout_s\":60}";
    return "done";
}

Test(disk, a_command_filling_the_ledgers_disk_is_killed_at_its_reserve,
     .timeout = 90)
{
    struct small_disk sd;
    small_disk_open(&sd, 48);
    struct fake *f = fake_start(slow_filler);
    char cfg[256], path[700], url[80], roster[700];
    snprintf(path, sizeof(path), "%s/forum.json", sd.dir);
    snprintf(cfg, sizeof(cfg), "{\"disk_reserve_mb\": 16}");
    cr_assert_eq(tu_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(roster, sizeof(roster), "%s/roster.json", sd.dir);
    const char *rj =
        "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
        "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
        "\"model_tier\":\"capable\",\"executor\":\"chat\",\"tools\":["
        "\"run_command\"],\"max_turns\":4}]}";
    cr_assert_eq(tu_write_file(roster, rj, strlen(rj)), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
    struct tu_daemon d;
    tu_daemon_start(&d, sd.dir, "--chat-url", url, "--model", "m1", "--roster",
                    roster, "--workspace", sd.ws, NULL);
    cJSON *res = tu_http_json(&d, "POST", "/submit",
                              "{\"request\":\"edit the file\"}", 200);
    cJSON_Delete(res);
    char *body = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, &body), 200, "%s",
                 body);
    free(body);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    char *tr = tu_scene_bodies(sd.dir, "tool_result");
    cr_assert(strstr(tr, "killed: the disk that holds the ledger has"), "%s",
              tr);
    free(tr);
    struct tu_run v =
        tu_forumv(NULL, "--ledger", sd.dir, "ledger", "verify", NULL);
    cr_assert_eq(v.status, 0, "%s", v.err);
    tu_run_free(&v);
    /* below the reserve, a command is refused before it starts */
    snprintf(cfg, sizeof(cfg), "{\"disk_reserve_mb\": 1000000}");
    cr_assert_eq(tu_write_file(path, cfg, strlen(cfg)), 0);
    fake_stop(f); /* a new script: its first turn calls the command */
    fake_free(f);
    f = fake_start(slow_filler);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
    tu_daemon_start(&d, sd.dir, "--chat-url", url, "--model", "m1", "--roster",
                    roster, "--workspace", sd.ws, NULL);
    res = tu_http_json(&d, "POST", "/submit", "{\"request\":\"edit the file\"}",
                       200);
    cJSON_Delete(res);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    tr = tu_scene_bodies(sd.dir, "tool_result");
    cr_assert(strstr(tr, "refused: the disk that holds the ledger"), "%s", tr);
    free(tr);
    fake_stop(f);
    fake_free(f);
    small_disk_close(&sd);
}

/* The disk fills under a run held at its coordinator: the run's next
 * write fails, /health says store_down (503), appends are refused; once
 * space is back, health is ok again and the run's error entry goes on
 * record: the run shows failed, never running, with nothing resumed. */
Test(disk, a_full_disk_fails_health_and_the_run_ends_on_record, .timeout = 90)
{
    struct small_disk sd;
    small_disk_open(&sd, 32);
    atomic_store(&tu_held_hold, 1);
    struct fake *f = fake_start(tu_held_script);
    char url[80];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
    struct tu_daemon d;
    tu_daemon_start(&d, sd.dir, "--chat-url", url, "--model", "m1", NULL);
    cJSON *s = tu_http_json(&d, "POST", "/runs",
                            "{\"request\":\"make the schema\"}", 200);
    long long run = tu_num(s, "run");
    cJSON_Delete(s);
    tu_held_wait_coord(1);
    fill_up(&sd);
    atomic_store(&tu_held_hold, 0); /* the plan's write fails */
    char *body = NULL;
    int st = 0;
    for (int i = 0; i < 200 && st != 503; i++) {
        free(body);
        body = NULL;
        st = tu_http(&d, "GET", "/health", NULL, 0, &body);
        if (st != 503)
            usleep(50 * 1000);
    }
    cr_assert_eq(st, 503, "%s", body);
    cr_assert(strstr(body, "store_down"), "%s", body);
    free(body);
    body = NULL;
    st =
        tu_http(&d, "POST", "/append",
                "{\"actor\":\"a\",\"kind\":\"note\",\"payload\":{}}", 1, &body);
    cr_assert_eq(st, 503, "%s", body);
    free(body);
    cr_assert_eq(unlink(sd.fill), 0);
    cJSON *g = tu_daemon_run_wait(&d, run, 20000);
    cr_assert_str_eq(tu_str(g, "state"), "failed");
    cJSON_Delete(g);
    body = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, &body), 200, "%s",
                 body);
    free(body);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0);
    struct tu_entries k;
    tu_scene_entries(sd.dir, &k);
    cr_assert_eq(tu_scene_count(&k, "error"), 1);
    cr_assert_eq(tu_scene_count(&k, "resume"), 0);
    fake_stop(f);
    fake_free(f);
    small_disk_close(&sd);
}
