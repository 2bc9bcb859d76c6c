/* test_exec: the executors. The subprocess executor never goes through a
 * shell, gives the child EOF on stdin, kills the whole process group at the
 * timeout, caps output, runs with only the environment it is given, and
 * names a missing binary; the stub is deterministic. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "tests/testutil.h"

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
    cr_assert_eq(orch_exec_once(&cfg, prompt, &res, &err), FO_OK, "%s",
                 err.msg);
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
    cr_assert_eq(orch_exec_once(&cfg, prompt, &res, &err), FO_OK);
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
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
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
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
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
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
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
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, &err), FO_E_NOT_FOUND);
    cr_assert(strstr(err.msg, "\"no-such-model-cli-xyz\""), "%s", err.msg);
    cr_assert(strstr(err.msg, "No such file"), "%s", err.msg);
    const char *argv2[] = {"/nonexistent/bin/x", NULL};
    cfg = cli(argv2, 1000);
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, &err), FO_E_NOT_FOUND);
}

Test(exec_cli, exit_status_signal_and_bad_utf8)
{
    const char *argv[] = {"sh", "-c", "printf 'a\\377b\\000c'; exit 3", "sh",
                          NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_result res;
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
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
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
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
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
    cr_assert_str_eq(res.output, "bar||\n");
    orch_result_release(&res);
}

Test(exec_cli, no_descriptors_leak_into_the_child)
{
    const char *argv[] = {"sh", "-c", "ls /proc/self/fd | wc -l", "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_result res;
    cr_assert_eq(orch_exec_once(&cfg, "p", &res, NULL), FO_OK);
    /* 0, 1, 2, and the one ls opens to read the directory */
    cr_assert_str_eq(res.output, "4\n");
    orch_result_release(&res);
}

Test(exec_runner, jobs_run_at_once)
{
    const char *argv[] = {"sh", "-c", "sleep 0.5; echo $1", "sh", NULL};
    struct orch_exec_config cfg = cli(argv, 5000);
    struct orch_runner *r = NULL;
    cr_assert_eq(orch_runner_create(&cfg, &r, NULL), FO_OK);
    double t0 = now_s();
    for (size_t i = 0; i < 4; i++) {
        char p[8];
        snprintf(p, sizeof(p), "j%zu", i);
        cr_assert_eq(orch_runner_start(r, i, p, NULL), FO_OK);
    }
    cr_assert_eq(orch_runner_active(r), 4);
    unsigned seen = 0;
    for (int i = 0; i < 4; i++) {
        size_t tag;
        struct orch_result res;
        cr_assert_eq(orch_runner_next(r, &tag, &res, NULL), FO_OK);
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
    cr_assert_eq(orch_runner_next(r, &tag, &res, NULL), FO_E_NOT_FOUND);
    /* freeing a runner with a job in flight kills and reaps it */
    const char *argv2[] = {"sleep", "30", NULL};
    struct orch_exec_config cfg2 = cli(argv2, 60000);
    orch_runner_free(r);
    cr_assert_eq(orch_runner_create(&cfg2, &r, NULL), FO_OK);
    cr_assert_eq(orch_runner_start(r, 0, "1", NULL), FO_OK);
    t0 = now_s();
    orch_runner_free(r);
    cr_assert_lt(now_s() - t0, 1.0);
}

Test(exec_stub, deterministic_from_the_prompt)
{
    struct orch_exec_config cfg = {.kind = ORCH_EXEC_STUB, .model = "stub"};
    struct orch_result a, b, c;
    cr_assert_eq(orch_exec_once(&cfg, "write the docs\nmore", &a, NULL), FO_OK);
    cr_assert_eq(orch_exec_once(&cfg, "write the docs\nmore", &b, NULL), FO_OK);
    cr_assert_eq(orch_exec_once(&cfg, "write the docs\nless", &c, NULL), FO_OK);
    cr_assert(a.ok);
    cr_assert_str_eq(a.output, b.output);
    cr_assert_str_neq(a.output, c.output);
    cr_assert(strstr(a.output, ": write the docs"), "%s", a.output);
    cr_assert_str_eq(a.model, "stub");
    orch_result_release(&a);
    orch_result_release(&b);
    orch_result_release(&c);
    cr_assert_eq(orch_exec_once(&cfg, "please #stub-fail", &a, NULL), FO_OK);
    cr_assert_not(a.ok);
    orch_result_release(&a);
}
