/* test_sandbox: what an agent's program can and cannot do in the sandbox
 * (daemon/orch_sandbox.h): each escape of the issue is tried and must
 * fail; the workspace is writable and, when the lane allows it, the
 * network reachable. Every test is skipped, saying why, only when the
 * machine cannot make a sandbox at all (no user namespaces). */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "daemon/orch_sandbox.h"
#include "testutil.h"

struct box {
    char *dir;       /* the temp dir: a stand-in data dir */
    char ws[600];    /* the workspace, inside it */
    char token[700]; /* dir/token and dir/checkpoint.key */
    char key[700];
};

static void box_open(struct box *b)
{
    char why[256];
    if (!orch_sandbox_available(why, sizeof(why)))
        cr_skip_test("no sandbox on this machine: %s", why);
    b->dir = tu_tmpdir();
    snprintf(b->ws, sizeof(b->ws), "%s/workspaces/run-1", b->dir);
    char wsroot[700];
    snprintf(wsroot, sizeof(wsroot), "%s/workspaces", b->dir);
    cr_assert_eq(mkdir(wsroot, 0700), 0);
    cr_assert_eq(mkdir(b->ws, 0700), 0);
    snprintf(b->token, sizeof(b->token), "%s/token", b->dir);
    snprintf(b->key, sizeof(b->key), "%s/checkpoint.key", b->dir);
    cr_assert_eq(tu_write_file(b->token, "TOKEN-SECRET", 12), 0);
    cr_assert_eq(tu_write_file(b->key, "KEY-SECRET", 10), 0);
}

static void box_close(struct box *b)
{
    tu_rmrf(b->dir);
}

struct ran {
    int status; /* exit code, or 128 + signal */
    char out[8192];
    int64_t ms;
};

/* Runs cmd in the sandbox sb the way a job does (orch_sandbox_prepare,
 * then orch_sandbox_spawn: as root, the child drops to the sandbox user
 * before bwrap), killing the whole sandbox (by killing bwrap) after
 * timeout_ms, as the job's timeout does. */
static struct ran run_box(const struct orch_sandbox *sb, const char *const *cmd,
                          int timeout_ms)
{
    struct orch_boxed *boxed = NULL;
    struct fo_err err;
    cr_assert_eq(orch_sandbox_prepare(sb, cmd, &boxed, &err), FO_OK, "%s",
                 err.msg);
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t pid;
    int64_t t0 = tu_now_ms();
    cr_assert_eq(orch_sandbox_spawn(boxed, p[1], p[1], &pid, &err), FO_OK, "%s",
                 err.msg);
    free(boxed);
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    struct ran r = {0};
    size_t n = 0;
    int st = 0, done = 0;
    while (!done) {
        ssize_t k = read(p[0], r.out + n, sizeof(r.out) - 1 - n);
        if (k > 0)
            n += (size_t)k;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            done = 1;
        else if (tu_now_ms() - t0 > timeout_ms)
            kill(pid, SIGKILL); /* the job's timeout: bwrap dies */
        else
            usleep(10000);
    }
    ssize_t k;
    while ((k = read(p[0], r.out + n, sizeof(r.out) - 1 - n)) > 0)
        n += (size_t)k;
    close(p[0]);
    r.out[n] = '\0';
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.ms = tu_now_ms() - t0;
    return r;
}

/* Runs `sh -c script` in the sandbox on b's workspace (a run's own, as
 * the daemon makes them: DIR/workspaces/run-1, the data dir named). */
static struct ran run_as(struct box *b, int network, const char *script,
                         int timeout_ms)
{
    struct orch_sandbox sb = {.workspace = b->ws,
                              .network = network,
                              .data_dir = b->dir,
                              .own_workspace = 1};
    const char *cmd[] = {"sh", "-c", script, NULL};
    return run_box(&sb, cmd, timeout_ms);
}

static struct ran run_in(struct box *b, int network, const char *script,
                         int timeout_ms)
{
    return run_as(b, network, script, timeout_ms);
}

Test(sandbox, the_workspace_is_the_one_writable_place)
{
    struct box b;
    box_open(&b);
    struct ran r = run_in(&b, 0,
                          "echo made > here.txt && cat here.txt && pwd && "
                          "id -u && echo $HOME",
                          20000);
    cr_assert_eq(r.status, 0, "%s", r.out);
    char want[1400];
    snprintf(want, sizeof(want), "made\n%s\n65534\n%s\n", b.ws, b.ws);
    cr_assert_str_eq(r.out, want);
    char f[700];
    snprintf(f, sizeof(f), "%s/here.txt", b.ws);
    char *got = tu_read_file(f, NULL);
    cr_assert_str_eq(got, "made\n");
    free(got);
    /* outside it: absolute, ../, and through a symlink planted inside */
    char link[700];
    snprintf(link, sizeof(link), "%s/planted", b.ws);
    cr_assert_eq(symlink(b.dir, link), 0);
    char script[4096];
    snprintf(script, sizeof(script),
             "echo x > %s/evil1; echo x > ../evil2; echo x > planted/evil3; "
             "echo x > /usr/evil4; echo x > /etc/evil5; true",
             b.dir);
    r = run_in(&b, 0, script, 20000);
    const char *evil[] = {"evil1", "evil2", "evil3"};
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof(f), "%s/%s", b.dir, evil[i]);
        cr_assert_neq(access(f, F_OK), 0, "%s was written: %s", evil[i], r.out);
    }
    snprintf(f, sizeof(f), "%s/workspaces/evil2", b.dir);
    cr_assert_neq(access(f, F_OK), 0, "../evil2 was written");
    cr_assert_neq(access("/usr/evil4", F_OK), 0);
    cr_assert_neq(access("/etc/evil5", F_OK), 0);
    box_close(&b);
}

Test(sandbox, the_token_and_the_checkpoint_key_cannot_be_read)
{
    struct box b;
    box_open(&b);
    char script[4096];
    snprintf(script, sizeof(script),
             "cat %s %s ../../token planted/token 2>&1; ls %s 2>&1; "
             "ls /root /home 2>&1; true",
             b.token, b.key, b.dir);
    char link[700];
    snprintf(link, sizeof(link), "%s/planted", b.ws);
    cr_assert_eq(symlink(b.dir, link), 0);
    struct ran r = run_in(&b, 0, script, 20000);
    cr_assert_null(strstr(r.out, "TOKEN-SECRET"), "%s", r.out);
    cr_assert_null(strstr(r.out, "KEY-SECRET"), "%s", r.out);
    cr_assert(strstr(r.out, "No such file"), "%s", r.out);
    box_close(&b);
}

Test(sandbox, no_network_unless_the_lane_allows_it)
{
    struct box b;
    box_open(&b);
    int port = 0;
    int lfd = tu_listen_loopback(&port);
    /* bash's /dev/tcp is the one client every Debian has */
    char script[512];
    snprintf(script, sizeof(script),
             "if bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null; then "
             "echo connected; else echo refused; fi",
             port);
    struct ran r = run_in(&b, 0, script, 20000);
    cr_assert_str_eq(r.out, "refused\n");
    r = run_in(&b, 1, script, 20000);
    cr_assert_str_eq(r.out, "connected\n", "with network: %s", r.out);
    close(lfd);
    box_close(&b);
}

Test(sandbox, a_fork_bomb_is_stopped_by_the_process_limit, .timeout = 60)
{
    struct box b;
    box_open(&b);
    /* each process forks until fork fails; the limit stops the growth and
     * the bomb ends itself (no timeout needed) */
    /* as root, the sandbox runs as uid 65534 (the kernel exempts root
     * from RLIMIT_NPROC) */
    struct ran r = run_as(&b, 0,
                          "n=0; while [ $n -lt 400 ]; do "
                          "(sleep 5 &) 2>/dev/null || break; n=$((n+1)); "
                          "done; echo started $n",
                          30000);
    int started = -1;
    const char *s = strstr(r.out, "started ");
    if (s)
        started = (int)strtol(s + 8, NULL, 10);
    cr_assert(started >= 0 && started < ORCH_SANDBOX_NPROC,
              "the limit did not hold: %s", r.out);
    box_close(&b);
}

Test(sandbox, four_gib_cannot_be_allocated)
{
    struct box b;
    box_open(&b);
    /* head -c reads 4 GiB into one buffer with its --bytes... use dd with
     * a 4 GiB block: its buffer is one malloc */
    struct ran r = run_in(&b, 0,
                          "dd if=/dev/zero of=/dev/null bs=4G count=1 2>&1; "
                          "echo rc=$?",
                          20000);
    cr_assert(strstr(r.out, "memory exhausted") || strstr(r.out, "Cannot "
                                                                 "allocate"),
              "4 GiB was allocated: %s", r.out);
    cr_assert_null(strstr(r.out, "rc=0"), "%s", r.out);
    box_close(&b);
}

Test(sandbox, the_timeout_kills_the_whole_tree, .timeout = 60)
{
    struct box b;
    box_open(&b);
    /* a grandchild in its own session, writing a heartbeat file: after the
     * kill no process is left to write it */
    struct ran r = run_in(&b, 0,
                          "(setsid sh -c 'while true; do date +%s%N > beat; "
                          "sleep 0.1; done' &) ; sleep 30",
                          1500);
    cr_assert_eq(r.status, 128 + SIGKILL, "%s", r.out);
    char beat[700];
    snprintf(beat, sizeof(beat), "%s/beat", b.ws);
    usleep(500000); /* the namespace's processes are gone by now */
    struct stat st1, st2;
    cr_assert_eq(stat(beat, &st1), 0, "the grandchild never ran");
    usleep(600000);
    cr_assert_eq(stat(beat, &st2), 0);
    cr_assert(st1.st_mtim.tv_sec == st2.st_mtim.tv_sec &&
                  st1.st_mtim.tv_nsec == st2.st_mtim.tv_nsec,
              "a process of the sandbox outlived it");
    box_close(&b);
}

/* The command: the flags that make the promises above. */
Test(sandbox, the_argv_says_what_it_does)
{
    char *dir = tu_tmpdir();
    struct orch_sandbox sb = {.workspace = dir};
    const char *cmd[] = {"make", "check", NULL};
    struct orch_boxed *b = NULL;
    struct fo_err err;
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, &b, &err), FO_OK, "%s",
                 err.msg);
    char all[8192] = "";
    size_t used = 0;
    for (size_t i = 0; b->argv[i] && used < sizeof(all); i++)
        used +=
            (size_t)snprintf(all + used, sizeof(all) - used, "%s ", b->argv[i]);
    char bind[800], cd[800];
    /* as root the child stages the workspace (bwrap runs as 65534) */
    if (geteuid() == 0)
        snprintf(bind, sizeof(bind), "--bind /tmp/0 %s ", dir);
    else
        snprintf(bind, sizeof(bind), "--bind %s %s ", dir, dir);
    snprintf(cd, sizeof(cd), "--chdir %s ", dir);
    const char *want[] = {"--unshare-all",
                          "--unshare-user",
                          "--die-with-parent",
                          "--new-session",
                          "--clearenv",
                          bind,
                          cd,
                          "--nproc=",
                          "--as=",
                          "-- make check ",
                          "--ro-bind /etc/passwd /etc/passwd"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(all, want[i]), "no %s in %s", want[i], all);
    /* of /etc only what programs read: never the whole of it */
    cr_assert_null(strstr(all, "--ro-bind /etc /etc"), "%s", all);
    cr_assert_null(strstr(all, "shadow"), "%s", all);
    cr_assert_null(strstr(all, "--share-net"), "%s", all);
    cr_assert_null(strstr(all, "resolv.conf"), "offline: %s", all);
    cr_assert_eq(b->n_opens, geteuid() == 0);
    if (geteuid() == 0)
        cr_assert_str_eq(b->opens[0], dir);
    cr_assert_eq(b->drop, geteuid() == 0);
    free(b);
    sb.workspace = "relative/ws";
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, &b, &err), FO_E_INVALID);
    tu_rmrf(dir);
}
