/* test_run_cli: `forum run start|get|cancel|wait` against the real binary:
 * with a daemon whose model (a scripted fake) holds the coordinator's reply
 * until the test lets it go, so each command meets the run where the test
 * put it; without a daemon (get and wait read the ledger, start says how to
 * start one, cancel answers as the method does); the exit codes; --help and
 * usage errors.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

#define REQ "build the api database server"
#define ANSWER TU_HELD_ANSWER
#define A_DEAD_INSTANCE "0123456789abcdef0123456789abcdef"

/* ---- helpers ------------------------------------------------------------ */

/* `forum --ledger dir [--json] run ARGS...` (json: 1 adds --json). */
static struct tu_run run_cli(const char *dir, int json, const char *a,
                             const char *b, const char *c, const char *d)
{
    return tu_forumv(NULL, "--ledger", dir, json ? "--json" : "run",
                     json ? "run" : a, json ? a : b, json ? b : c, json ? c : d,
                     json ? d : NULL, (char *)NULL);
}

static void want_exit(const struct tu_run *r, int code, const char *what)
{
    cr_assert_eq(r->status, code,
                 "%s: exit %d, want %d; stdout [%s] stderr [%s]", what,
                 r->status, code, r->out, r->err);
}

/* The code of the error object on the last line of stderr (--json). */
static void want_code(const struct tu_run *r, const char *code)
{
    const char *end = r->err + r->err_len;
    while (end > r->err && end[-1] == '\n')
        end--;
    const char *p = end;
    while (p > r->err && p[-1] != '\n')
        p--;
    cJSON *e = cJSON_ParseWithLength(p, (size_t)(end - p));
    cr_assert_not_null(e, "no error object on stderr [%s]", r->err);
    cr_assert_str_eq(tu_str(e, "code"), code, "stderr [%s]", r->err);
    cJSON_Delete(e);
}

static void must_contain(const char *hay, const char *needle, const char *what)
{
    cr_assert_not_null(strstr(hay, needle), "%s: no \"%s\" in [%s]", what,
                       needle, hay);
}

/* The --json output of `forum run CMD ID` equals what the daemon serves
 * at METHOD PATH for the same run. */
static void same_as_http(const struct tu_daemon *d, const char *cmd,
                         const char *id, const char *method, const char *path)
{
    struct tu_run r = run_cli(d->dir, 1, cmd, id, NULL, NULL);
    want_exit(&r, 0, cmd);
    cJSON *mine = tu_run_json(&r);
    cJSON *theirs = tu_http_json(d, method, path, NULL, 200);
    char *a = cJSON_PrintUnformatted(mine), *b = cJSON_PrintUnformatted(theirs);
    cr_assert(cJSON_Compare(mine, theirs, 1), "run %s --json: %s\nHTTP: %s",
              cmd, a, b);
    free(a);
    free(b);
    cJSON_Delete(mine);
    cJSON_Delete(theirs);
    tu_run_free(&r);
}

/* `forum run start REQ` until the daemon is not busy (a run's thread may be
 * on its way out after its end is on record); the id printed. */
static long long start_run(const char *dir, char *id, size_t size)
{
    int64_t t0 = tu_now_ms();
    for (;;) {
        struct tu_run r = run_cli(dir, 0, "start", REQ, NULL, NULL);
        if (r.status == 3 && strstr(r.err, "busy")) {
            tu_run_free(&r);
            cr_assert_lt(tu_now_ms() - t0, 5000, "still busy");
            usleep(5000);
            continue;
        }
        want_exit(&r, 0, "run start");
        char *end = NULL;
        long long v = strtoll(r.out, &end, 10);
        cr_assert(end != r.out && !strcmp(end, "\n"),
                  "run start printed [%s], not an id", r.out);
        snprintf(id, size, "%lld", v);
        tu_run_free(&r);
        return v;
    }
}

/* Runs FORUM_BIN with argv (NULL-ended, without argv[0]) with stderr on a
 * new pseudo-terminal and stdout on /dev/null; its exit code, and what it
 * wrote to the terminal in *tty (malloc'd). */
static int run_on_tty(const char *const *argv, char **tty)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    cr_assert_geq(m, 0);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    char name[128];
    cr_assert_eq(ptsname_r(m, name, sizeof(name)), 0);
    const char *args[32] = {FORUM_BIN};
    size_t n = 1;
    while (argv[n - 1] && n < 31) {
        args[n] = argv[n - 1];
        n++;
    }
    args[n] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int s = open(name, O_RDWR | O_NOCTTY);
        int nul = open("/dev/null", O_RDWR);
        if (s < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 ||
            dup2(s, 2) < 0)
            _exit(127);
        execv(FORUM_BIN, (char *const *)args);
        _exit(127);
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    cr_assert_not_null(buf);
    for (;;) { /* EIO once the child's end is closed */
        ssize_t r = read(m, buf + len, cap - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap)
            break;
    }
    buf[len] = '\0';
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    close(m);
    *tty = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- with a daemon ------------------------------------------------------ */

Test(cli_run, start_get_cancel_wait_against_the_daemon, .timeout = 120)
{
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--chat-url", url, "--model", "fake", "--max-runs",
                    "1", NULL);

    /* a run held in its coordinator call */
    atomic_store(&tu_held_hold, 1);
    char id[32], path[96];
    long long run = start_run(dir, id, sizeof(id));
    tu_held_wait_coord(1);
    struct tu_run r = run_cli(dir, 0, "get", id, NULL, NULL);
    want_exit(&r, 0, "run get");
    must_contain(r.out, "state: running\n", "run get");
    must_contain(r.out, "request: " REQ "\n", "run get");
    cr_assert_null(strstr(r.out, "answer:"), "%s", r.out);
    tu_run_free(&r);
    snprintf(path, sizeof(path), "/runs/%s", id);
    same_as_http(&d, "get", id, "GET", path);

    /* the daemon's errors, with its message and code: busy (max-runs 1) */
    r = run_cli(dir, 1, "start", "one more", NULL, NULL);
    want_exit(&r, 3, "run start while busy");
    want_code(&r, "busy");
    cr_assert_eq(r.out_len, 0, "%s", r.out);
    tu_run_free(&r);

    /* wait gives up at its timeout, with its own code */
    int64_t t0 = tu_now_ms();
    r = run_cli(dir, 1, "wait", id, "--timeout", "1");
    int64_t took = tu_now_ms() - t0;
    want_exit(&r, 3, "run wait --timeout 1");
    want_code(&r, "timeout");
    must_contain(r.err, "still running after 1 s", "run wait --timeout 1");
    cr_assert_eq(r.out_len, 0, "%s", r.out);
    cr_assert_geq(took, 900, "gave up after %lld ms", (long long)took);
    tu_run_free(&r);

    /* cancel: requested from the daemon; the run stops once let go */
    r = run_cli(dir, 0, "cancel", id, NULL, NULL);
    want_exit(&r, 0, "run cancel");
    must_contain(r.out, "cancel requested", "run cancel");
    tu_run_free(&r);
    atomic_store(&tu_held_hold, 0);
    r = run_cli(dir, 0, "wait", id, "--timeout", "20");
    want_exit(&r, 1, "run wait of a cancelled run");
    must_contain(r.out, "state: cancelled\n", "run wait");
    must_contain(r.out, "answer: " ORCH_CANCELLED_ANSWER "\n", "run wait");
    must_contain(r.err, "ended cancelled", "run wait");
    tu_run_free(&r);
    r = run_cli(dir, 0, "get", id, NULL, NULL);
    want_exit(&r, 0, "run get of a cancelled run");
    must_contain(r.out, "state: cancelled\n", "run get");
    tu_run_free(&r);
    same_as_http(&d, "get", id, "GET", path);
    /* cancelling it again: its state, unchanged, the same as over HTTP */
    r = run_cli(dir, 0, "cancel", id, NULL, NULL);
    want_exit(&r, 0, "run cancel of an ended run");
    must_contain(r.out, "already ended: cancelled", "run cancel");
    tu_run_free(&r);
    snprintf(path, sizeof(path), "/runs/%s/cancel", id);
    same_as_http(&d, "cancel", id, "POST", path);

    /* another run, waited for: exit 0 with its answer; --json start prints
     * exactly {run, state} */
    int64_t tw = tu_now_ms();
    for (;;) {
        r = run_cli(dir, 1, "start", REQ, NULL, NULL);
        if (r.status == 3 && strstr(r.err, "busy") && tu_now_ms() - tw < 5000) {
            tu_run_free(&r);
            usleep(5000);
            continue;
        }
        break;
    }
    want_exit(&r, 0, "run start --json");
    cJSON *s = tu_run_json(&r);
    long long run2 = tu_num(s, "run");
    cr_assert_gt(run2, run);
    cJSON *want = cJSON_CreateObject();
    cJSON_AddNumberToObject(want, "run", (double)run2);
    cJSON_AddStringToObject(want, "state", "running");
    cr_assert(cJSON_Compare(s, want, 1), "run start --json: %s", r.out);
    cJSON_Delete(want);
    cJSON_Delete(s);
    tu_run_free(&r);
    char id2[32];
    snprintf(id2, sizeof(id2), "%lld", run2);
    r = run_cli(dir, 0, "wait", id2, "--timeout", "20");
    want_exit(&r, 0, "run wait");
    must_contain(r.out, "state: done\n", "run wait");
    must_contain(r.out, "answer: " ANSWER "\n", "run wait");
    tu_run_free(&r);
    r = run_cli(dir, 1, "wait", id2, NULL, NULL);
    want_exit(&r, 0, "run wait --json");
    cJSON *g = tu_run_json(&r);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cr_assert_str_eq(tu_str(g, "answer"), ANSWER);
    cJSON_Delete(g);
    tu_run_free(&r);
    snprintf(path, sizeof(path), "/runs/%s", id2);
    same_as_http(&d, "get", id2, "GET", path);

    /* the daemon's not_found and not_a_run map to exit 1, as here */
    r = run_cli(dir, 1, "cancel", "999999", NULL, NULL);
    want_exit(&r, 1, "run cancel of no entry");
    want_code(&r, "not_found");
    must_contain(r.err, "run 999999: no such run (no entry 999999)",
                 "run cancel");
    tu_run_free(&r);
    char route[32];
    snprintf(route, sizeof(route), "%lld", run + 1);
    r = run_cli(dir, 1, "cancel", route, NULL, NULL);
    want_exit(&r, 1, "run cancel of a route entry");
    want_code(&r, "not_a_run");
    tu_run_free(&r);
    /* a token the daemon does not take: its 401 is a usage-class error */
    char tp[1024];
    snprintf(tp, sizeof(tp), "%s/token", dir);
    char *tok = tu_read_file(tp, NULL);
    cr_assert_not_null(tok);
    cr_assert_eq(
        tu_write_file(tp, "0000000000000000000000000000000000000000", 40), 0);
    r = run_cli(dir, 1, "start", REQ, NULL, NULL);
    want_exit(&r, 2, "run start with a wrong token");
    want_code(&r, "unauthorized");
    tu_run_free(&r);
    cr_assert_eq(tu_write_file(tp, tok, strlen(tok)), 0);
    free(tok);

    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    /* the daemon gone, get still reads the same run */
    r = run_cli(dir, 0, "get", id2, NULL, NULL);
    want_exit(&r, 0, "run get after the daemon stopped");
    must_contain(r.out, "answer: " ANSWER "\n", "run get");
    tu_run_free(&r);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* ---- without a daemon --------------------------------------------------- */

/* Appends a request entry with body json to dir; its seq. */
static long long append_request(const char *dir, const char *json)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "append", "--actor", "client", "--kind",
                                "request", "--payload", json, (char *)NULL);
    want_exit(&r, 0, "ledger append");
    cJSON *e = tu_run_json(&r);
    long long seq = tu_num(e, "seq");
    cJSON_Delete(e);
    tu_run_free(&r);
    return seq;
}

Test(cli_run, without_a_daemon, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char none[1024];
    snprintf(none, sizeof(none), "%s/none", dir);

    /* start needs the daemon: not found (as `serve status`), and says how
     * to start one; nothing is created */
    struct tu_run r = run_cli(none, 0, "start", REQ, NULL, NULL);
    want_exit(&r, 1, "run start without a daemon");
    must_contain(r.err, "no forum daemon is running", "run start");
    must_contain(r.err, "serve start", "run start");
    cr_assert_eq(r.out_len, 0, "%s", r.out);
    tu_run_free(&r);
    r = run_cli(none, 1, "start", REQ, NULL, NULL);
    want_exit(&r, 1, "run start --json without a daemon");
    want_code(&r, "not_found");
    tu_run_free(&r);
    struct stat st;
    cr_assert_neq(stat(none, &st), 0, "run start created the data dir");
    r = tu_forumv(NULL, "--ledger", none, "serve", "status", (char *)NULL);
    want_exit(&r, 1, "serve status"); /* the same code for "not running" */
    tu_run_free(&r);

    /* a run that ended, made by `forum submit` (stub roles) */
    r = tu_forumv(NULL, "--ledger", dir, "--json", "submit", REQ, (char *)NULL);
    want_exit(&r, 0, "submit");
    cJSON *sub = tu_run_json(&r);
    char id[32], route[32];
    snprintf(id, sizeof(id), "%lld", tu_num(sub, "request_seq"));
    snprintf(route, sizeof(route), "%lld", tu_num(sub, "request_seq") + 1);
    tu_run_free(&r);
    r = run_cli(dir, 0, "get", id, NULL, NULL);
    want_exit(&r, 0, "run get");
    must_contain(r.out, "state: done\n", "run get");
    must_contain(r.out, "request: " REQ "\n", "run get");
    char line[512];
    snprintf(line, sizeof(line), "answer: %s\n", tu_str(sub, "answer"));
    must_contain(r.out, line, "run get");
    tu_run_free(&r);
    r = run_cli(dir, 1, "get", id, NULL, NULL);
    want_exit(&r, 0, "run get --json");
    cJSON *g = tu_run_json(&r);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cr_assert_str_eq(tu_str(g, "via"), "submit");
    cr_assert_str_eq(tu_str(g, "answer"), tu_str(sub, "answer"));
    cr_assert_eq(tu_num(g, "answer_seq"), tu_num(sub, "answer_seq"));
    cr_assert_eq(tu_num(g, "count"),
                 cJSON_GetArraySize(cJSON_GetObjectItem(g, "entries")));
    cJSON_Delete(g);
    cJSON_Delete(sub);
    tu_run_free(&r);
    r = run_cli(dir, 0, "wait", id, NULL, NULL);
    want_exit(&r, 0, "run wait of a done run");
    must_contain(r.out, "state: done\n", "run wait");
    tu_run_free(&r);
    /* cancel: with no daemon the method answers here: it ended */
    r = run_cli(dir, 1, "cancel", id, NULL, NULL);
    want_exit(&r, 0, "run cancel of a done run");
    cJSON *c = tu_run_json(&r);
    cr_assert_str_eq(tu_str(c, "state"), "done");
    cr_assert_str_eq(tu_str(c, "cancel"), "ended");
    cr_assert_eq(cJSON_GetArraySize(c), 3, "%s", r.out);
    cJSON_Delete(c);
    tu_run_free(&r);

    /* not a run, not there */
    r = run_cli(dir, 1, "get", route, NULL, NULL);
    want_exit(&r, 1, "run get of a route entry");
    want_code(&r, "not_a_run");
    tu_run_free(&r);
    r = run_cli(dir, 0, "wait", route, NULL, NULL);
    want_exit(&r, 1, "run wait of a route entry");
    must_contain(r.err, "not a run", "run wait");
    tu_run_free(&r);
    r = run_cli(dir, 1, "get", "99999", NULL, NULL);
    want_exit(&r, 1, "run get of no entry");
    want_code(&r, "not_found");
    tu_run_free(&r);
    /* get on a data dir with no ledger: a storage error, nothing made */
    r = run_cli(none, 1, "get", "0", NULL, NULL);
    want_exit(&r, 3, "run get without a ledger");
    cr_assert_neq(stat(none, &st), 0, "run get created the data dir");
    tu_run_free(&r);

    /* a run a daemon will resume, whose process died: stopped */
    char stopped[32];
    snprintf(stopped, sizeof(stopped), "%lld",
             append_request(dir, "{\"request\":\"x\",\"via\":\"run_start\","
                                 "\"instance\":\"" A_DEAD_INSTANCE "\"}"));
    r = run_cli(dir, 0, "get", stopped, NULL, NULL);
    want_exit(&r, 0, "run get of a stopped run");
    must_contain(r.out, "state: stopped\n", "run get");
    tu_run_free(&r);

    /* a run nothing will resume (a CLI's), whose process died:
     * interrupted; wait says 1 at once */
    char dead[32];
    snprintf(dead, sizeof(dead), "%lld",
             append_request(dir, "{\"request\":\"x\",\"via\":\"run_start\","
                                 "\"instance\":\"" A_DEAD_INSTANCE "\","
                                 "\"resumable\":false}"));
    r = run_cli(dir, 0, "get", dead, NULL, NULL);
    want_exit(&r, 0, "run get of an interrupted run");
    must_contain(r.out, "state: interrupted\n", "run get");
    tu_run_free(&r);
    r = run_cli(dir, 0, "wait", dead, NULL, NULL);
    want_exit(&r, 1, "run wait of an interrupted run");
    must_contain(r.err, "ended interrupted", "run wait");
    tu_run_free(&r);
    r = run_cli(dir, 0, "cancel", dead, NULL, NULL);
    want_exit(&r, 0, "run cancel of an interrupted run");
    must_contain(r.out, "already ended: interrupted", "run cancel");
    tu_run_free(&r);

    /* the same run while "its process" (this test) holds its lock: running
     * elsewhere, so cancel is run_elsewhere and wait times out */
    char p[1024];
    snprintf(p, sizeof(p), "%s/runs", dir);
    cr_assert(mkdir(p, 0755) == 0 || stat(p, &st) == 0);
    snprintf(p, sizeof(p), "%s/runs/%s.lock", dir, A_DEAD_INSTANCE);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    r = run_cli(dir, 0, "get", dead, NULL, NULL);
    must_contain(r.out, "state: running\n", "run get");
    tu_run_free(&r);
    r = run_cli(dir, 1, "cancel", dead, NULL, NULL);
    want_exit(&r, 1, "run cancel of a run of another process");
    want_code(&r, "run_elsewhere");
    must_contain(r.err, "another process", "run cancel");
    tu_run_free(&r);
    r = run_cli(dir, 1, "wait", dead, "--timeout", "0");
    want_exit(&r, 3, "run wait --timeout 0 of a running run");
    want_code(&r, "timeout");
    cr_assert_null(strchr(r.err, '\r'), "progress off a terminal: %s", r.err);
    tu_run_free(&r);
    /* on a terminal, wait shows its progress on stderr, then clears it */
    char *tty = NULL;
    int ex = run_on_tty((const char *const[]){"--ledger", dir, "run", "wait",
                                              dead, "--timeout", "1", NULL},
                        &tty);
    cr_assert_eq(ex, 3, "exit %d: %s", ex, tty);
    /* the step under way, from the run's latest entry (its request) */
    snprintf(line, sizeof(line),
             "\rforum: run %s: routing (last: request by client, seq %s), 1 "
             "entries,",
             dead, dead);
    must_contain(tty, line, "run wait on a terminal");
    must_contain(tty, "\r\033[K", "run wait on a terminal");
    must_contain(tty, "still running after 1 s", "run wait on a terminal");
    free(tty);
    close(fd);
    r = run_cli(dir, 0, "get", dead, NULL, NULL);
    must_contain(r.out, "state: interrupted\n", "run get");
    tu_run_free(&r);

    /* a run of no known process: unknown, not cancellable here */
    char unk[32];
    snprintf(unk, sizeof(unk), "%lld",
             append_request(dir, "{\"request\":\"y\",\"via\":\"submit\"}"));
    r = run_cli(dir, 1, "wait", unk, NULL, NULL);
    want_exit(&r, 1, "run wait of an unknown run");
    cJSON *u = tu_run_json(&r);
    cr_assert_str_eq(tu_str(u, "state"), "unknown");
    cJSON_Delete(u);
    tu_run_free(&r);
    r = run_cli(dir, 1, "cancel", unk, NULL, NULL);
    want_exit(&r, 1, "run cancel of an unknown run");
    want_code(&r, "run_elsewhere");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_run, a_daemon_that_cannot_be_reached_is_an_io_error, .timeout = 60)
{
    char *dir = tu_tmpdir();
    /* a "daemon" (this test) holds the dir's lock but wrote no state */
    char p[1024];
    snprintf(p, sizeof(p), "%s/forum.pid", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    struct tu_run r = run_cli(dir, 1, "start", REQ, NULL, NULL);
    want_exit(&r, 3, "run start with no state");
    want_code(&r, "io_error");
    must_contain(r.err, "forum.state.json", "run start");
    tu_run_free(&r);
    /* its state names a port nobody listens on */
    int port = 0;
    close(tu_listen_loopback(&port));
    char state[256];
    int n = snprintf(state, sizeof(state),
                     "{\"pid\":1,\"host\":\"127.0.0.1\",\"port\":%d,"
                     "\"auth\":false}\n",
                     port);
    snprintf(p, sizeof(p), "%s/forum.state.json", dir);
    cr_assert_eq(tu_write_file(p, state, (size_t)n), 0);
    r = run_cli(dir, 1, "start", REQ, NULL, NULL);
    want_exit(&r, 3, "run start to a closed port");
    want_code(&r, "unavailable");
    tu_run_free(&r);
    /* cancel goes to the daemon too: no fallback while one holds the dir */
    r = run_cli(dir, 1, "cancel", "0", NULL, NULL);
    want_exit(&r, 3, "run cancel to a closed port");
    want_code(&r, "unavailable");
    tu_run_free(&r);
    close(fd);
    tu_rmrf(dir);
}

/* ---- usage and help ----------------------------------------------------- */

Test(cli_run, usage_errors_exit_2_before_anything_is_opened)
{
    char *dir = tu_tmpdir();
    char none[1024];
    snprintf(none, sizeof(none), "%s/none", dir);
    static const char *const bad[][5] = {
        {NULL},
        {"frob"},
        {"start"},
        {"start", "--chat-url", "http://127.0.0.1:1", "x"},
        {"start", "x", "--api"},
        {"start", "x", "--cmd", "echo"},
        {"start", "x", "--max-model-calls", "0"},
        {"start", "x", "--max-seconds"},
        {"start", "x", "--bogus"},
        {"get"},
        {"get", "abc"},
        {"get", "-1"},
        {"get", "1.5"},
        {"get", ""},
        {"get", " 1"},
        {"get", "99999999999999999999"},
        {"get", "9007199254740992"}, /* 2^53: not exact as a JSON number */
        {"get", "1", "2"},
        {"get", "1", "--timeout", "1"},
        {"cancel"},
        {"cancel", "x"},
        {"wait"},
        {"wait", "1", "--timeout"},
        {"wait", "1", "--timeout", "-1"},
        {"wait", "1", "--timeout", "x"},
        {"wait", "--timeout", "1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[12] = {"--ledger", none, "--json", "run"};
        size_t n = 4;
        for (size_t k = 0; k < 5 && bad[i][k]; k++)
            argv[n++] = bad[i][k];
        argv[n] = NULL;
        struct tu_run r = tu_forum(NULL, 0, argv);
        char what[128];
        snprintf(what, sizeof(what), "run %s %s %s", bad[i][0] ? bad[i][0] : "",
                 bad[i][0] && bad[i][1] ? bad[i][1] : "",
                 bad[i][0] && bad[i][1] && bad[i][2] ? bad[i][2] : "");
        want_exit(&r, 2, what);
        want_code(&r, "usage");
        cr_assert_eq(r.out_len, 0, "%s: %s", what, r.out);
        tu_run_free(&r);
    }
    struct stat st;
    cr_assert_neq(stat(none, &st), 0, "a usage error created the data dir");
    /* the provider flags are refused with the reason */
    struct tu_run r = run_cli(none, 0, "start", "x", "--api", NULL);
    must_contain(r.err, "forum serve", "run start --api");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_run, every_run_command_has_help)
{
    static const char *const cmds[] = {NULL, "start", "get", "cancel", "wait"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        struct tu_run r =
            cmds[i] ? tu_forumv(NULL, "--ledger", "/nonexistent-forum-test",
                                "run", cmds[i], "--help", (char *)NULL)
                    : tu_forumv(NULL, "--ledger", "/nonexistent-forum-test",
                                "run", "--help", (char *)NULL);
        want_exit(&r, 0, cmds[i] ? cmds[i] : "run --help");
        cr_assert_eq(strncmp(r.out, "usage: forum ", 13), 0, "%s", r.out);
        must_contain(r.out, "exit codes:", cmds[i] ? cmds[i] : "run");
        if (cmds[i])
            must_contain(r.out, cmds[i], cmds[i]);
        tu_run_free(&r);
    }
    /* start says why it takes no provider flags; wait documents its codes */
    struct tu_run r = tu_forumv(NULL, "run", "start", "--help", (char *)NULL);
    must_contain(r.out, "configuration decides", "run start --help");
    tu_run_free(&r);
    r = tu_forumv(NULL, "run", "wait", "--help", (char *)NULL);
    must_contain(r.out, "timeout", "run wait --help");
    tu_run_free(&r);
    r = tu_forumv(NULL, "--help", (char *)NULL);
    must_contain(r.out, "\n  run start|get|cancel|wait", "forum --help");
    tu_run_free(&r);
}
