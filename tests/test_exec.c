/* test_exec: the executors. The subprocess executor never goes through a
 * shell, gives the child EOF on stdin, kills the whole process group at the
 * timeout, caps output, runs with only the environment it is given, and
 * names a missing binary; the stub is deterministic. Jobs (orch_job) do all
 * of it on one event loop thread: many at once, cancelled and reaped. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <event2/event.h>

#include "daemon/orch.h"
#include "daemon/orch_int.h"
#include "tests/testutil.h"
#include "tests/tu_exec.h"

static const char *env_default[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                    "LANG=C.UTF-8", NULL};

static struct orch_exec_config cli(const char **argv, int timeout_ms)
{
    return (struct orch_exec_config){.kind = ORCH_EXEC_CLI,
                                     .argv = argv,
                                     .env = env_default,
                                     .timeout_ms = timeout_ms,
                                     .model = "test"};
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(exec_split, shell_like_quoting_without_a_shell)
{
    char **v = NULL;
    size_t n = 0;
    struct fo_err err;
    cr_assert_eq(orch_split_argv("ollama run llama3", &v, &n, &err), FO_OK);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(v[0], "ollama");
    cr_assert_str_eq(v[2], "llama3");
    cr_assert_null(v[3]);
    free(v);
    cr_assert_eq(orch_split_argv("  a 'b c' \"d \\\"e\\\" $HOME\" f\\ g "
                                 "'$(touch x)' h\"i\"'j' *",
                                 &v, &n, &err),
                 FO_OK);
    cr_assert_eq(n, 7);
    cr_assert_str_eq(v[0], "a");
    cr_assert_str_eq(v[1], "b c");
    cr_assert_str_eq(v[2], "d \"e\" $HOME");
    cr_assert_str_eq(v[3], "f g");
    cr_assert_str_eq(v[4], "$(touch x)");
    cr_assert_str_eq(v[5], "hij");
    cr_assert_str_eq(v[6], "*");
    free(v);
    cr_assert_eq(orch_split_argv("''", &v, &n, &err), FO_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(v[0], "");
    free(v);
    cr_assert_eq(orch_split_argv("a 'b", &v, &n, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "single quote"), "%s", err.msg);
    cr_assert_eq(orch_split_argv("a \"b", &v, &n, &err), FO_E_INVALID);
    cr_assert_eq(orch_split_argv("a \\", &v, &n, &err), FO_E_INVALID);
    cr_assert_eq(orch_split_argv("   ", &v, &n, &err), FO_E_INVALID);
}

Test(exec_cli, metacharacters_arrive_literally_and_nothing_runs)
{
    char *dir = tu_tmpdir();
    cr_assert_eq(chdir(dir), 0); /* Criterion runs each test in a process */
    cr_assert_eq(tu_write_file("x", "keep", 4), 0);
    const char *prompt = "; rm -rf x $(touch pwned) | & > < `touch pwned2` "
                         "&& touch pwned3 \"quoted\" 'single' \\ * ~ \n line2";
    const char *argv[] = {"sh", "-c", "printf '%s|' \"$#\"; printf '%s' \"$1\"",
                          "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_result res;
    struct fo_err err;
    cr_assert_eq(tu_exec_once(&cfg, prompt, &res, &err), FO_OK, "%s", err.msg);
    cr_assert(res.ok, "%s", res.error);
    char want[512];
    snprintf(want, sizeof(want), "1|%s", prompt);
    cr_assert_str_eq(res.output, want);
    cr_assert_eq(access("pwned", F_OK), -1);
    cr_assert_eq(access("pwned2", F_OK), -1);
    cr_assert_eq(access("pwned3", F_OK), -1);
    cr_assert_eq(access("x", F_OK), 0);
    orch_result_release(&res);
    /* and with printf itself as the command: no shell anywhere */
    const char *argv2[] = {"printf", "%s", NULL};
    cfg = cli(argv2, 5000);
    cr_assert_eq(tu_exec_once(&cfg, prompt, &res, &err), FO_OK);
    cr_assert_str_eq(res.output, prompt);
    cr_assert_eq(access("pwned", F_OK), -1);
    orch_result_release(&res);
    cr_assert_eq(chdir("/"), 0);
    tu_rmrf(dir);
}

Test(exec_cli, stdin_is_eof)
{
    const char *argv[] = {"sh", "-c", "cat; wc -c </dev/stdin; echo done", "sh",
                          NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_result res;
    double t0 = now_s();
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    cr_assert(res.ok, "%s", res.error);
    cr_assert(strstr(res.output, "0\ndone\n"), "%s", res.output);
    cr_assert_lt(now_s() - t0, 3.0);
    orch_result_release(&res);
}

static int pid_alive(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

Test(exec_cli, timeout_kills_the_process_group)
{
    char *dir = tu_tmpdir();
    char pidfile[512], script[1024];
    snprintf(pidfile, sizeof(pidfile), "%s/pid", dir);
    snprintf(script, sizeof(script),
             "sleep 30 & echo $! > %s; echo started; sleep 30", pidfile);
    const char *argv[] = {"sh", "-c", script, "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 400);
    struct orch_result res;
    double t0 = now_s();
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    double dt = now_s() - t0;
    cr_assert_not(res.ok);
    cr_assert(res.timed_out);
    cr_assert(strstr(res.error, "timed out"), "%s", res.error);
    cr_assert_str_eq(res.output, "started\n");
    cr_assert_lt(dt, 3.0, "took %f s", dt);
    cr_assert_geq(dt, 0.35);
    char *text = tu_read_file(pidfile, NULL);
    cr_assert_not_null(text);
    pid_t grandchild = (pid_t)strtol(text, NULL, 10);
    free(text);
    cr_assert_gt(grandchild, 0);
    for (int i = 0; i < 100 && pid_alive(grandchild); i++)
        usleep(10000);
    cr_assert_not(pid_alive(grandchild), "grandchild %d survived",
                  (int)grandchild);
    orch_result_release(&res);
    tu_rmrf(dir);
}

Test(exec_cli, output_over_100mb_is_capped_with_a_marker)
{
    const char *argv[] = {
        "sh", "-c", "head -c 104857600 /dev/zero | tr '\\0' a; echo err >&2",
        "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 20000);
    cfg.output_max = 1u << 20;
    struct orch_result res;
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    cr_assert(res.ok, "%s", res.error);
    cr_assert(res.truncated);
    cr_assert_lt(res.output_len, (1u << 20) + 200);
    cr_assert_geq(res.output_len, 1u << 20);
    cr_assert(strstr(res.output + (1u << 20),
                     "[forum: output truncated: 103809024 bytes over the "
                     "1048576-byte cap were dropped]"),
              "%s", res.output + (1u << 20));
    cr_assert_str_eq(res.errout, "err\n");
    orch_result_release(&res);
}

Test(exec_cli, missing_binary_is_a_clear_error)
{
    const char *argv[] = {"no-such-model-cli-xyz", "run", NULL};
    struct orch_exec_config cfg = cli(argv, 1000);
    struct orch_result res;
    struct fo_err err;
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, &err), FO_E_NOT_FOUND);
    cr_assert(strstr(err.msg, "\"no-such-model-cli-xyz\""), "%s", err.msg);
    cr_assert(strstr(err.msg, "No such file"), "%s", err.msg);
    const char *argv2[] = {"/nonexistent/bin/x", NULL};
    cfg = cli(argv2, 1000);
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, &err), FO_E_NOT_FOUND);
}

Test(exec_cli, exit_status_signal_and_bad_utf8)
{
    const char *argv[] = {"sh", "-c", "printf 'a\\377b\\000c'; exit 3", "sh",
                          NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_result res;
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    cr_assert_not(res.ok);
    cr_assert_eq(res.exit_code, 3);
    cr_assert_str_eq(res.error, "exit status 3");
    cr_assert_str_eq(res.output, "a\xef\xbf\xbd"
                                 "b\xef\xbf\xbd"
                                 "c");
    cr_assert_str_eq(res.model, "test");
    orch_result_release(&res);
    const char *argv2[] = {"sh", "-c", "kill -TERM $$", "sh", NULL};
    cfg = cli(argv2, 5000);
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    cr_assert_not(res.ok);
    cr_assert_eq(res.signal, SIGTERM);
    orch_result_release(&res);
}

Test(exec_cli, environment_is_explicit)
{
    setenv("FORUM_TEST_SECRET", "leak", 1);
    const char *env[] = {"PATH=/usr/bin:/bin", "FOO=bar", NULL};
    const char *argv[] = {"sh", "-c", "echo \"$FOO|$FORUM_TEST_SECRET|$HOME\"",
                          "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    cfg.env = env;
    struct orch_result res;
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    cr_assert_str_eq(res.output, "bar||\n");
    orch_result_release(&res);
}

Test(exec_cli, no_descriptors_leak_into_the_child)
{
    const char *argv[] = {"sh", "-c", "ls /proc/self/fd | wc -l", "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_result res;
    cr_assert_eq(tu_exec_once(&cfg, "p", &res, NULL), FO_OK);
    /* 0, 1, 2, and the one ls opens to read the directory */
    cr_assert_str_eq(res.output, "4\n");
    orch_result_release(&res);
}

Test(exec_runner, jobs_run_at_once)
{
    const char *argv[] = {"sh", "-c", "sleep 0.5; echo $1", "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct tu_runner *r = NULL;
    cr_assert_eq(tu_runner_create(&cfg, &r, NULL), FO_OK);
    double t0 = now_s();
    for (size_t i = 0; i < 4; i++) {
        char p[8];
        snprintf(p, sizeof(p), "j%zu", i);
        cr_assert_eq(tu_runner_start(r, i, p, NULL), FO_OK);
    }
    cr_assert_eq(tu_runner_active(r), 4);
    unsigned seen = 0;
    for (int i = 0; i < 4; i++) {
        size_t tag;
        struct orch_result res;
        cr_assert_eq(tu_runner_next(r, &tag, &res, NULL), FO_OK);
        char want[8];
        snprintf(want, sizeof(want), "j%zu\n", tag);
        cr_assert_str_eq(res.output, want);
        seen |= 1u << tag;
        orch_result_release(&res);
    }
    double dt = now_s() - t0;
    cr_assert_eq(seen, 15);
    cr_assert_lt(dt, 1.5, "4 x 0.5 s took %f s", dt);
    size_t tag;
    struct orch_result res;
    cr_assert_eq(tu_runner_next(r, &tag, &res, NULL), FO_E_NOT_FOUND);
    /* freeing a runner with a job in flight kills and reaps it */
    const char *argv2[] = {"sleep", "30", NULL};
    struct orch_exec_config cfg2 = cli(argv2, 60000);
    tu_runner_free(r);
    cr_assert_eq(tu_runner_create(&cfg2, &r, NULL), FO_OK);
    cr_assert_eq(tu_runner_start(r, 0, "1", NULL), FO_OK);
    t0 = now_s();
    tu_runner_free(r);
    cr_assert_lt(now_s() - t0, 1.0);
}

Test(exec_stub, deterministic_from_the_prompt)
{
    struct orch_exec_config cfg = {.kind = ORCH_EXEC_STUB, .model = "stub"};
    struct orch_result a, b, c;
    cr_assert_eq(tu_exec_once(&cfg, "write the docs\nmore", &a, NULL), FO_OK);
    cr_assert_eq(tu_exec_once(&cfg, "write the docs\nmore", &b, NULL), FO_OK);
    cr_assert_eq(tu_exec_once(&cfg, "write the docs\nless", &c, NULL), FO_OK);
    cr_assert(a.ok);
    cr_assert_str_eq(a.output, b.output);
    cr_assert_str_neq(a.output, c.output);
    cr_assert(strstr(a.output, ": write the docs"), "%s", a.output);
    cr_assert_str_eq(a.model, "stub");
    orch_result_release(&a);
    orch_result_release(&b);
    orch_result_release(&c);
    cr_assert_eq(tu_exec_once(&cfg, "please #stub-fail", &a, NULL), FO_OK);
    cr_assert_not(a.ok);
    orch_result_release(&a);
}

/* ---- jobs on an event loop ------------------------------------------------
 */

static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* What one job's done saw. */
struct ended {
    int calls;
    int rc;
    struct orch_result res;
    int threads; /* the process's threads inside done */
    int order;   /* 1 for the first job to end, 2 for the next, ... */
};

static int ended_count;

static void on_done(void *arg, int rc, struct orch_result *res,
                    const struct fo_err *err)
{
    struct ended *e = arg;
    cr_assert_not_null(res);
    cr_assert_not_null(err);
    e->calls++;
    e->rc = rc;
    e->res = *res; /* take the output and errout */
    res->output = res->errout = NULL;
    e->threads = threads_now();
    e->order = ++ended_count;
}

/* The orphans of our children come to us, so a grandchild's end can be
 * waited for and its cause read. */
static void become_subreaper(void)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
}

/* Waits for an orphaned descendant (see become_subreaper) and returns its
 * wait status; fails the test if it still runs after 10 s. */
static int wait_orphan(pid_t pid)
{
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        cr_assert_neq(w, -1, "waitpid %d: %s", (int)pid, strerror(errno));
        if (w == pid)
            return st;
        usleep(10000);
    }
    cr_assert_fail("%d still runs", (int)pid);
    return 0;
}

/* 1 when pid was our child and has been reaped (by the job): no zombie. */
static int reaped(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == -1 && errno == ECHILD;
}

Test(exec_job, a_hundred_jobs_run_at_once_on_one_thread)
{
    enum { N = 100 };
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    const char *argv[] = {"/bin/sh", "-c", "sleep 0.2; echo \"x$1\"", "sh",
                          NULL};
    struct orch_exec_config cfg = cli(argv, 60000);
    struct ended *e = calloc(N, sizeof(*e));
    cr_assert_not_null(e);
    ended_count = 0;
    int threads = threads_now();
    cr_assert_gt(threads, 0);
    for (int i = 0; i < N; i++) {
        char p[16];
        snprintf(p, sizeof(p), "%d", i);
        struct orch_job *j = NULL;
        struct fo_err err;
        cr_assert_eq(orch_job_start(&cfg, base, p, on_done, &e[i], &j, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_not_null(j);
    }
    cr_assert_eq(ended_count, 0, "done ran inside start");
    cr_assert_eq(threads_now(), threads);
    /* every job is in flight now; the loop returns once all have ended
     * and nothing of theirs is left on the base */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(ended_count, N);
    for (int i = 0; i < N; i++) {
        char want[16];
        snprintf(want, sizeof(want), "x%d\n", i);
        cr_assert_eq(e[i].calls, 1, "job %d: %d calls", i, e[i].calls);
        cr_assert_eq(e[i].rc, FO_OK);
        cr_assert(e[i].res.ok, "job %d: %s", i, e[i].res.error);
        cr_assert_str_eq(e[i].res.output, want);
        cr_assert_str_eq(e[i].res.errout, "");
        cr_assert_str_eq(e[i].res.model, "test");
        cr_assert_eq(e[i].threads, threads, "job %d: %d threads", i,
                     e[i].threads);
        orch_result_release(&e[i].res);
    }
    cr_assert_eq(threads_now(), threads);
    free(e);
    event_base_free(base);
}

/* A leader that starts a grandchild sleeping "forever", says so on the
 * fifo (leader pid, grandchild pid) and waits. */
static void group_script(char *buf, size_t n, const char *fifo)
{
    snprintf(buf, n, "sleep 3600 & echo $$ $! > %s; echo started; wait", fifo);
}

static void read_pids(int fd, pid_t *leader, pid_t *grandchild)
{
    char buf[64];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    int a = 0, b = 0;
    cr_assert_eq(sscanf(buf, "%d %d", &a, &b), 2, "%s", buf);
    *leader = (pid_t)a;
    *grandchild = (pid_t)b;
}

static int open_fifo(const char *dir, char *path, size_t n)
{
    snprintf(path, n, "%s/fifo", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    return fd;
}

static void timeout_kills_the_group(int poll_only)
{
    become_subreaper();
    char *dir = tu_tmpdir();
    char fifo[512], script[1024];
    int ffd = open_fifo(dir, fifo, sizeof(fifo));
    group_script(script, sizeof(script), fifo);
    const char *argv[] = {"sh", "-c", script, "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 300);
    struct event_base *base = event_base_new();
    struct ended e = {0};
    struct orch_job *j = NULL;
    ended_count = 0;
    cr_assert_eq(orch_job_start(&cfg, base, "p", on_done, &e, &j, NULL), FO_OK);
    if (poll_only)
        cr_assert_eq(orch_job_drop_pidfd(j), FO_OK);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(e.calls, 1);
    cr_assert_eq(e.rc, FO_OK);
    cr_assert_not(e.res.ok);
    cr_assert(e.res.timed_out);
    cr_assert_eq(e.res.signal, SIGKILL);
    cr_assert_eq(e.res.exit_code, -1);
    cr_assert(strstr(e.res.error, "timed out after 300 ms"), "%s", e.res.error);
    cr_assert_str_eq(e.res.output, "started\n");
    pid_t leader, grandchild;
    read_pids(ffd, &leader, &grandchild);
    cr_assert(reaped(leader), "leader %d not reaped", (int)leader);
    int st = wait_orphan(grandchild);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
              "grandchild status %#x", st);
    orch_result_release(&e.res);
    close(ffd);
    event_base_free(base);
    tu_rmrf(dir);
}

Test(exec_job, timeout_kills_the_whole_group)
{
    timeout_kills_the_group(0);
}

/* What a cancel test's fifo event needs. */
struct canceller {
    struct orch_job *job;
    int fd;
    pid_t leader, grandchild;
    int cancels;
};

static void on_fifo(evutil_socket_t fd, short what, void *arg)
{
    struct canceller *c = arg;
    (void)fd;
    (void)what;
    read_pids(c->fd, &c->leader, &c->grandchild);
    orch_job_cancel(c->job);
    c->cancels++;
}

static void cancel_kills_and_reaps(int poll_only)
{
    become_subreaper();
    char *dir = tu_tmpdir();
    char fifo[512], script[1024];
    struct canceller c = {0};
    c.fd = open_fifo(dir, fifo, sizeof(fifo));
    group_script(script, sizeof(script), fifo);
    const char *argv[] = {"sh", "-c", script, "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 60000);
    struct event_base *base = event_base_new();
    struct ended e = {0};
    ended_count = 0;
    cr_assert_eq(orch_job_start(&cfg, base, "p", on_done, &e, &c.job, NULL),
                 FO_OK);
    if (poll_only)
        cr_assert_eq(orch_job_drop_pidfd(c.job), FO_OK);
    /* one-shot: once the leader has said who it is, cancel the job */
    struct event *ev = event_new(base, c.fd, EV_READ, on_fifo, &c);
    cr_assert_eq(event_add(ev, NULL), 0);
    /* returns only when nothing is left: the reaper too */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(c.cancels, 1);
    cr_assert_eq(e.calls, 0, "done was called after a cancel");
    cr_assert(reaped(c.leader), "leader %d left a zombie", (int)c.leader);
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/%d", (int)c.leader);
    cr_assert_eq(access(proc, F_OK), -1, "%s is still there", proc);
    int st = wait_orphan(c.grandchild);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
              "grandchild status %#x", st);
    event_free(ev);
    close(c.fd);
    event_base_free(base);
    tu_rmrf(dir);
}

Test(exec_job, cancel_kills_and_reaps_and_done_is_not_called)
{
    cancel_kills_and_reaps(0);
}

/* A kernel without pidfd_open: the exit is found by polling. */
Test(exec_job, without_a_pidfd_jobs_end_time_out_and_cancel)
{
    struct event_base *base = event_base_new();
    const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 4", "sh",
                          NULL};
    struct orch_exec_config cfg = cli(argv, 60000);
    struct ended e = {0};
    struct orch_job *j = NULL;
    cr_assert_eq(orch_job_start(&cfg, base, "p", on_done, &e, &j, NULL), FO_OK);
    cr_assert_eq(orch_job_drop_pidfd(j), FO_OK);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(e.calls, 1);
    cr_assert_eq(e.res.exit_code, 4);
    cr_assert_str_eq(e.res.output, "out\n");
    cr_assert_str_eq(e.res.errout, "err\n");
    orch_result_release(&e.res);
    event_base_free(base);
    timeout_kills_the_group(1);
    cancel_kills_and_reaps(1);
}

Test(exec_job, output_cap_and_utf8_cleaning)
{
    struct event_base *base = event_base_new();
    const char *big[] = {
        "sh", "-c", "head -c 104857600 /dev/zero | tr '\\0' a; echo err >&2",
        "sh", NULL};
    const char *bad[] = {"sh", "-c", "printf 'a\\377b\\000c'; exit 3", "sh",
                         NULL};
    struct orch_exec_config c1 = cli(big, 60000), c2 = cli(bad, 60000);
    c1.output_max = 1u << 20;
    struct ended e1 = {0}, e2 = {0};
    struct orch_job *j = NULL;
    cr_assert_eq(orch_job_start(&c1, base, "p", on_done, &e1, &j, NULL), FO_OK);
    cr_assert_eq(orch_job_start(&c2, base, "p", on_done, &e2, &j, NULL), FO_OK);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(e1.calls, 1);
    cr_assert(e1.res.ok, "%s", e1.res.error);
    cr_assert(e1.res.truncated);
    cr_assert_lt(e1.res.output_len, (1u << 20) + 200);
    cr_assert_geq(e1.res.output_len, 1u << 20);
    cr_assert_eq(strspn(e1.res.output, "a"), 1u << 20);
    cr_assert(strstr(e1.res.output + (1u << 20),
                     "[forum: output truncated: 103809024 bytes over the "
                     "1048576-byte cap were dropped]"),
              "%s", e1.res.output + (1u << 20));
    cr_assert_str_eq(e1.res.errout, "err\n");
    cr_assert_eq(e2.calls, 1);
    cr_assert_not(e2.res.ok);
    cr_assert_not(e2.res.truncated);
    cr_assert_eq(e2.res.exit_code, 3);
    cr_assert_str_eq(e2.res.error, "exit status 3");
    cr_assert_str_eq(e2.res.output, "a\xef\xbf\xbd"
                                    "b\xef\xbf\xbd"
                                    "c");
    orch_result_release(&e1.res);
    orch_result_release(&e2.res);
    event_base_free(base);
}

Test(exec_job, the_stub_ends_on_a_later_turn_of_the_loop)
{
    struct event_base *base = event_base_new();
    struct orch_exec_config cfg = {.kind = ORCH_EXEC_STUB, .model = "stub"};
    struct ended a = {0}, b = {0}, c = {0};
    struct orch_job *ja = NULL, *jb = NULL, *jc = NULL;
    ended_count = 0;
    cr_assert_eq(orch_job_start(&cfg, base, "write the docs\nmore", on_done, &a,
                                &ja, NULL),
                 FO_OK);
    cr_assert_eq(
        orch_job_start(&cfg, base, "please #stub-fail", on_done, &b, &jb, NULL),
        FO_OK);
    cr_assert_eq(
        orch_job_start(&cfg, base, "cancelled", on_done, &c, &jc, NULL), FO_OK);
    cr_assert_eq(ended_count, 0, "done ran inside start");
    orch_job_cancel(jc);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(a.calls, 1);
    cr_assert_eq(b.calls, 1);
    cr_assert_eq(c.calls, 0);
    cr_assert_eq(a.rc, FO_OK);
    cr_assert(a.res.ok);
    struct orch_result once;
    cr_assert_eq(tu_exec_once(&cfg, "write the docs\nmore", &once, NULL),
                 FO_OK);
    cr_assert_str_eq(a.res.output, once.output);
    cr_assert_str_eq(a.res.errout, "");
    cr_assert_str_eq(a.res.model, "stub");
    cr_assert_not(b.res.ok);
    cr_assert_str_eq(b.res.error, "stub: asked to fail");
    orch_result_release(&once);
    orch_result_release(&a.res);
    orch_result_release(&b.res);
    event_base_free(base);
}

Test(exec_job, start_refuses_model_kinds_and_names_a_missing_binary)
{
    struct event_base *base = event_base_new();
    struct ended e = {0};
    struct orch_job *j = (struct orch_job *)&e; /* untouched on error */
    struct fo_err err;
    struct orch_exec_config chat = {.kind = ORCH_EXEC_CHAT, .model = "m"};
    cr_assert_eq(orch_job_start(&chat, base, "p", on_done, &e, &j, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "model client"), "%s", err.msg);
    chat.kind = ORCH_EXEC_ANTHROPIC;
    cr_assert_eq(orch_job_start(&chat, base, "p", on_done, &e, &j, &err),
                 FO_E_INVALID);
    const char *argv[] = {"no-such-model-cli-xyz", "run", NULL};
    struct orch_exec_config cfg = cli(argv, 1000);
    cr_assert_eq(orch_job_start(&cfg, base, "p", on_done, &e, &j, &err),
                 FO_E_NOT_FOUND);
    cr_assert(strstr(err.msg, "\"no-such-model-cli-xyz\""), "%s", err.msg);
    cr_assert_eq(j, (struct orch_job *)&e);
    /* nothing was left on the base, and done never runs */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(e.calls, 0);
    orch_job_cancel(NULL);
    event_base_free(base);
}

/* A done that cancels one job and starts another, on the same base. */
struct chain {
    struct event_base *base;
    struct orch_job *victim;
    struct ended victim_end, next_end, first_end;
};

static void on_first_done(void *arg, int rc, struct orch_result *res,
                          const struct fo_err *err)
{
    struct chain *ch = arg;
    on_done(&ch->first_end, rc, res, err);
    orch_job_cancel(ch->victim);
    const char *argv[] = {"echo", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_job *j = NULL;
    cr_assert_eq(orch_job_start(&cfg, ch->base, "next", on_done, &ch->next_end,
                                &j, NULL),
                 FO_OK);
}

Test(exec_job, done_may_cancel_and_start_jobs)
{
    struct chain ch = {0};
    ch.base = event_base_new();
    ended_count = 0;
    const char *sleeper[] = {"sleep", NULL};
    struct orch_exec_config s = cli(sleeper, 60000);
    cr_assert_eq(orch_job_start(&s, ch.base, "3600", on_done, &ch.victim_end,
                                &ch.victim, NULL),
                 FO_OK);
    const char *quick[] = {"true", NULL};
    struct orch_exec_config q = cli(quick, 60000);
    struct orch_job *j = NULL;
    cr_assert_eq(orch_job_start(&q, ch.base, "x", on_first_done, &ch, &j, NULL),
                 FO_OK);
    cr_assert_eq(event_base_dispatch(ch.base), 1);
    cr_assert_eq(ch.first_end.calls, 1);
    cr_assert_eq(ch.first_end.order, 1);
    cr_assert_eq(ch.victim_end.calls, 0);
    cr_assert_eq(ch.next_end.calls, 1);
    cr_assert_eq(ch.next_end.order, 2);
    cr_assert_str_eq(ch.next_end.res.output, "next\n");
    orch_result_release(&ch.first_end.res);
    orch_result_release(&ch.next_end.res);
    event_base_free(ch.base);
}
