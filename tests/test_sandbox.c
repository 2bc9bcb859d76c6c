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
    cr_assert_eq(orch_sandbox_prepare(sb, cmd, NULL, &boxed, &err), FO_OK, "%s",
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
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &b, &err), FO_OK, "%s",
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
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &b, &err), FO_E_INVALID);
    tu_rmrf(dir);
}

/* ---- root: the sandbox is not root outside (issue: it read /etc/shadow) */

/* As root, bubblewrap's user namespace maps the sandbox's uid to root
 * outside: every root-only file it can see would be its own. The child
 * drops to uid 65534 first, and of /etc only what programs read is
 * bound. */
Test(sandbox, root_only_files_stay_out_of_reach)
{
    struct box b;
    box_open(&b);
    char planted[256], inner[700];
    snprintf(planted, sizeof(planted), "/etc/forum-test-secret-%ld",
             (long)getpid());
    /* a configured workspace (not the run's own): the sandbox may enter
     * it, but a root-only file in it stays root's */
    char *ws = tu_tmpdir();
    snprintf(inner, sizeof(inner), "%s/inner-secret", ws);
    int root = geteuid() == 0;
    if (root) {
        cr_assert_eq(tu_write_file(planted, "PLANTED-SECRET", 14), 0);
        cr_assert_eq(chmod(planted, 0600), 0);
        cr_assert_eq(chmod(ws, 0755), 0);
    }
    cr_assert_eq(tu_write_file(inner, "INNER-SECRET", 12), 0);
    cr_assert_eq(chmod(inner, 0600), 0);
    char script[1024];
    snprintf(script, sizeof(script),
             "cat /etc/shadow /etc/gshadow %s 2>&1; cat inner-secret 2>&1; "
             "ls /etc/shadow 2>&1; id -u; true",
             planted);
    struct orch_sandbox sb = {.workspace = ws, .data_dir = b.dir};
    const char *cmd[] = {"sh", "-c", script, NULL};
    struct ran r = run_box(&sb, cmd, 20000);
    if (root)
        unlink(planted);
    tu_rmrf(ws);
    cr_assert_null(strstr(r.out, "root:"), "shadow was read: %s", r.out);
    cr_assert_null(strstr(r.out, "PLANTED-SECRET"), "%s", r.out);
    if (root)
        cr_assert_null(strstr(r.out, "INNER-SECRET"),
                       "a 0600 root file was read: %s", r.out);
    cr_assert(strstr(r.out, "No such file"), "%s", r.out);
    box_close(&b);
}

/* What the drop must not break: the shell, ls, python3, a file the
 * daemon's file tools wrote (root's, as root), writing in the workspace,
 * and no descriptor of the daemon's inside. */
Test(sandbox, everyday_commands_still_work)
{
    struct box b;
    box_open(&b);
    char f[700];
    snprintf(f, sizeof(f), "%s/notes.txt", b.ws);
    cr_assert_eq(tu_write_file(f, "first\n", 6), 0);
    char sub[720];
    snprintf(sub, sizeof(sub), "%s/sub", b.ws);
    cr_assert_eq(mkdir(sub, 0755), 0);
    int py = access("/usr/bin/python3", X_OK) == 0;
    struct ran r = run_in(
        &b, 0,
        py ? "ls; cat notes.txt; echo second >> notes.txt; echo made > "
             "sub/new.txt; cat sub/new.txt; /usr/bin/python3 -c "
             "'print(6*7)'; ls /proc/self/fd | tr '\\n' ' '"
           : "ls; cat notes.txt; echo second >> notes.txt; echo made > "
             "sub/new.txt; cat sub/new.txt; echo 42; ls /proc/self/fd | tr "
             "'\\n' ' '",
        20000);
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_assert_str_eq(r.out, "notes.txt\nsub\nfirst\nmade\n42\n0 1 2 3 ", "%s",
                     r.out);
    char *got = tu_read_file(f, NULL);
    cr_assert_str_eq(got, "first\nsecond\n");
    free(got);
    box_close(&b);
}

/* ---- the data dir is never in a sandbox --------------------------------- */

Test(sandbox, a_workspace_that_holds_the_data_dir_is_refused)
{
    struct box b;
    box_open(&b);
    const char *cmd[] = {"true", NULL};
    struct orch_boxed *o = NULL;
    struct fo_err err;
    char parent[700];
    snprintf(parent, sizeof(parent), "%s/..", b.dir);
    struct orch_sandbox sb = {.workspace = parent, .data_dir = b.dir};
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &o, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "holds the data dir"), "%s", err.msg);
    cr_assert(strstr(err.msg, b.dir), "%s", err.msg);
    sb.workspace = b.dir;
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &o, &err), FO_E_INVALID);
    /* inside it: only the run's own workspace, which the daemon made */
    sb.workspace = b.ws;
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &o, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "lies inside the data dir"), "%s", err.msg);
    sb.own_workspace = 1;
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &o, &err), FO_OK, "%s",
                 err.msg);
    free(o);
    box_close(&b);
}

/* `forum serve --workspace` (or forum.json's) that holds the data dir or
 * lies in it is refused before anything starts, naming both. */
Test(sandbox, serve_refuses_a_workspace_around_or_in_the_data_dir,
     .timeout = 60)
{
    char *top = tu_tmpdir();
    char dir[700], inside[760], cfg[760];
    snprintf(dir, sizeof(dir), "%s/forum-ledger", top);
    cr_assert_eq(mkdir(dir, 0700), 0);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "serve", "--port", "0",
                                "--workspace", top, NULL);
    cr_assert_eq(r.status, 2, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "holds the data dir"), "%s", r.err);
    cr_assert(strstr(r.err, top) && strstr(r.err, dir), "%s", r.err);
    tu_run_free(&r);
    snprintf(inside, sizeof(inside), "%s/ws", dir);
    cr_assert_eq(mkdir(inside, 0700), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--port", "0", "--workspace",
                  inside, NULL);
    cr_assert_eq(r.status, 2, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "lies inside the data dir"), "%s", r.err);
    tu_run_free(&r);
    /* forum.json's workspace, through a symlink */
    char link[760], json[900];
    snprintf(link, sizeof(link), "%s/alias", top);
    cr_assert_eq(symlink(top, link), 0);
    snprintf(cfg, sizeof(cfg), "%s/forum.json", dir);
    snprintf(json, sizeof(json), "{\"workspace\": \"%s\"}", link);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--port", "0", NULL);
    cr_assert_eq(r.status, 2, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "holds the data dir"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(top);
}

/* A read-only directory that holds the data dir gets an empty tmpfs over
 * it (here the model profile's read_dirs). */
Test(sandbox, the_data_dir_under_a_read_only_bind_is_masked)
{
    struct box b;
    box_open(&b);
    char up[700], other[760];
    snprintf(up, sizeof(up), "%s", b.dir);
    *strrchr(up, '/') = '\0'; /* /tmp: the data dir is in it */
    snprintf(other, sizeof(other), "%s.other", b.dir);
    cr_assert_eq(tu_write_file(other, "VISIBLE", 7), 0);
    cr_assert_eq(chmod(other, 0644), 0);
    /* readable by anyone: only the mask keeps them out (as root the
     * sandbox user could not enter a 0700 data dir anyway) */
    cr_assert_eq(chmod(b.dir, 0755), 0);
    cr_assert_eq(chmod(b.token, 0644), 0);
    cr_assert_eq(chmod(b.key, 0644), 0);
    const char *const reads[] = {up, NULL};
    struct orch_sandbox sb = {
        .profile = ORCH_SANDBOX_MODEL, .data_dir = b.dir, .read_dirs = reads};
    char script[4096];
    snprintf(script, sizeof(script), "cat %s %s %s 2>&1; ls -A %s; true", other,
             b.token, b.key, b.dir);
    const char *cmd[] = {"sh", "-c", script, NULL};
    struct ran r = run_box(&sb, cmd, 20000);
    unlink(other);
    cr_assert(strstr(r.out, "VISIBLE"), "the read dir is not there: %s", r.out);
    cr_assert_null(strstr(r.out, "TOKEN-SECRET"), "%s", r.out);
    cr_assert_null(strstr(r.out, "KEY-SECRET"), "%s", r.out);
    box_close(&b);
}

/* ---- --cmd model programs run in the model profile ---------------------- */

/* The model profile: the network shared, the data dir out of reach,
 * writes only to its state dirs. */
Test(sandbox, a_model_program_reaches_the_network_and_its_state_only)
{
    struct box b;
    box_open(&b);
    char *state = tu_tmpdir(), *out = tu_tmpdir();
    if (geteuid() == 0) /* as root the program runs as 65534 */
        cr_assert_eq(chown(state, 65534, 65534), 0);
    int port = 0;
    int lfd = tu_listen_loopback(&port);
    char script[4096];
    snprintf(script, sizeof(script),
             "cat %s %s 2>&1; echo x > %s/evil; echo x > %s/evil; "
             "echo kept > %s/state.txt; "
             "if bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null; then "
             "echo connected; fi; pwd; true",
             b.token, b.key, out, b.dir, state, port);
    const char *const writes[] = {state, NULL};
    const char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/nowhere", NULL};
    struct orch_sandbox sb = {.profile = ORCH_SANDBOX_MODEL,
                              .data_dir = b.dir,
                              .write_dirs = writes,
                              .env = env};
    const char *cmd[] = {"sh", "-c", script, NULL};
    struct ran r = run_box(&sb, cmd, 20000);
    close(lfd);
    cr_assert_null(strstr(r.out, "TOKEN-SECRET"), "%s", r.out);
    cr_assert_null(strstr(r.out, "KEY-SECRET"), "%s", r.out);
    cr_assert(strstr(r.out, "connected\n/tmp\n"), "%s", r.out);
    char f[800];
    snprintf(f, sizeof(f), "%s/evil", out);
    cr_assert_neq(access(f, F_OK), 0, "wrote outside: %s", r.out);
    snprintf(f, sizeof(f), "%s/evil", b.dir);
    cr_assert_neq(access(f, F_OK), 0, "wrote into the data dir");
    snprintf(f, sizeof(f), "%s/state.txt", state);
    char *got = tu_read_file(f, NULL);
    cr_assert_not_null(got, "its state dir is not writable: %s", r.out);
    cr_assert_str_eq(got, "kept\n");
    free(got);
    /* a state dir that holds the data dir is refused */
    const char *const bad[] = {b.dir, NULL};
    sb.write_dirs = bad;
    struct orch_boxed *o = NULL;
    struct fo_err err;
    cr_assert_eq(orch_sandbox_prepare(&sb, cmd, NULL, &o, &err), FO_E_INVALID);
    tu_rmrf(state);
    tu_rmrf(out);
    box_close(&b);
}

/* End to end: `forum submit --cmd` with a program that tries to read the
 * token and write outside, then answers as a model: the run works, the
 * token and the outside write do not. */
Test(sandbox, submit_runs_the_cmd_program_in_the_model_profile, .timeout = 120)
{
    char why[256];
    if (!orch_sandbox_available(why, sizeof(why)))
        cr_skip_test("no sandbox on this machine: %s", why);
    char *dir = tu_tmpdir(), *state = tu_tmpdir(), *out = tu_tmpdir();
    if (geteuid() == 0)
        cr_assert_eq(chown(state, 65534, 65534), 0);
    char token[700], cfg[700], json[2048], cmd[8192];
    snprintf(token, sizeof(token), "%s/token", dir);
    cr_assert_eq(tu_write_file(token, "TOKEN-SECRET", 12), 0);
    snprintf(cfg, sizeof(cfg), "%s/forum.json", dir);
    snprintf(json, sizeof(json),
             "{\"cmd_sandbox\": {\"state_dirs\": [\"%s\"], \"read_dirs\": "
             "[\"%s/tests\"]}}",
             state, FORUM_SRC);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    snprintf(cmd, sizeof(cmd),
             "sh -c 'cat %s >> %s/leak 2>&1; echo x > %s/evil; exec sh "
             "%s/tests/fake_cli.sh ok \"$1\"' x",
             token, state, out, FORUM_SRC);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "submit",
                                "add a login endpoint", "--cmd", cmd, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o = tu_run_json(&r);
    cr_assert_str_eq(tu_str(o, "answer"), "done: the answer, from the "
                                          "command\n");
    cJSON_Delete(o);
    tu_run_free(&r);
    char f[800];
    snprintf(f, sizeof(f), "%s/leak", state);
    char *leak = tu_read_file(f, NULL);
    cr_assert_not_null(leak, "the program never ran");
    cr_assert_null(strstr(leak, "TOKEN-SECRET"), "%s", leak);
    free(leak);
    snprintf(f, sizeof(f), "%s/evil", out);
    cr_assert_neq(access(f, F_OK), 0, "the program wrote outside");
    /* where bwrap cannot run, --cmd is refused unless the operator says
     * "sandbox": "none" for it */
    setenv("FORUM_BWRAP", "/nonexistent/bwrap", 1);
    r = tu_forumv(NULL, "--ledger", dir, "submit", "x", "--cmd", cmd, NULL);
    cr_assert_eq(r.status, 2, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "cannot be sandboxed") &&
                  strstr(r.err, "\"sandbox\": \"none\""),
              "%s", r.err);
    tu_run_free(&r);
    snprintf(json, sizeof(json), "{\"cmd_sandbox\": {\"sandbox\": \"none\"}}");
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    r = tu_forumv(NULL, "--ledger", dir, "submit", "x", "--cmd", cmd, NULL);
    cr_assert_eq(r.status, 0, "%d %s", r.status, r.err);
    tu_run_free(&r);
    unsetenv("FORUM_BWRAP");
    tu_rmrf(state);
    tu_rmrf(out);
    tu_rmrf(dir);
}
