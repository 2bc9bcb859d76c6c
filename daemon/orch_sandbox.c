/* orch_sandbox: bubblewrap around an agent's program (orch_sandbox.h). */
#include "daemon/orch_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BWRAP "bwrap"
#define PRLIMIT "/usr/bin/prlimit"

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_ok;
static char probe_why[256];

/* Runs /usr/bin/true in a sandbox made as orch_sandbox_argv makes them,
 * on an empty temp dir: the exact flags, so what works here works later. */
static void probe(void)
{
    char dir[] = "/tmp/forum-sandbox-probe-XXXXXX";
    char **argv = NULL;
    struct fo_err err;
    static const char *const cmd[] = {"/usr/bin/true", NULL};
    if (!mkdtemp(dir)) {
        snprintf(probe_why, sizeof(probe_why), "cannot make a temp dir: %s",
                 strerror(errno));
        return;
    }
    struct orch_sandbox sb = {.workspace = dir};
    if (orch_sandbox_argv(&sb, cmd, &argv, &err) != FO_OK) {
        snprintf(probe_why, sizeof(probe_why), "%s", err.msg);
        rmdir(dir);
        return;
    }
    static char path[] = "PATH=/usr/bin:/bin";
    char *const env[] = {path, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int e = posix_spawnp(&pid, BWRAP, &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    int st = 0;
    if (!e)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    rmdir(dir);
    if (e) {
        snprintf(probe_why, sizeof(probe_why),
                 "bubblewrap (bwrap) cannot be run: %s (install the Debian "
                 "package bubblewrap)",
                 strerror(e));
        return;
    }
    if (access(PRLIMIT, X_OK) != 0) {
        snprintf(probe_why, sizeof(probe_why),
                 "%s is missing (util-linux): the sandbox's limits cannot be "
                 "set",
                 PRLIMIT);
        return;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        probe_ok = 1;
        return;
    }
    snprintf(probe_why, sizeof(probe_why),
             "bubblewrap cannot make a sandbox here (exit %d): user "
             "namespaces are probably not allowed (a container without "
             "them, or kernel.unprivileged_userns_clone=0)",
             WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

int orch_sandbox_available(char *why, size_t n)
{
    pthread_once(&probe_once, probe);
    if (!probe_ok && why && n)
        snprintf(why, n, "%s", probe_why);
    return probe_ok;
}

int orch_sandbox_mode_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "bwrap"))
        return ORCH_SANDBOX_BWRAP;
    if (!strcmp(s, "none"))
        return ORCH_SANDBOX_NONE;
    return -1;
}

/* The argv being built: strings copied into one growing list, then packed
 * into one block. */
struct av {
    char **v;
    size_t n, cap;
    int oom;
};

static void add(struct av *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        char **nv = realloc(a->v, nc * sizeof(*nv));
        if (!nv) {
            a->oom = 1;
            return;
        }
        a->v = nv;
        a->cap = nc;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->oom = 1;
        return;
    }
    a->n++;
}

static void add_limit(struct av *a, const char *flag, long long v)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s=%lld", flag, v);
    add(a, buf);
}

/* A system path: bound read-only when a directory, made the same symlink
 * when a symlink (merged /usr), left out when absent. */
static void system_path(struct av *a, const char *p)
{
    struct stat st;
    if (lstat(p, &st) != 0)
        return;
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(p, target, sizeof(target) - 1);
        if (n <= 0)
            return;
        target[n] = '\0';
        add(a, "--symlink");
        add(a, target);
        add(a, p);
    } else if (S_ISDIR(st.st_mode)) {
        add(a, "--ro-bind");
        add(a, p);
        add(a, p);
    }
}

int orch_sandbox_argv(const struct orch_sandbox *sb, const char *const *argv,
                      char ***out, struct fo_err *err)
{
    if (!sb->workspace || sb->workspace[0] != '/')
        return fo_err_set(err, FO_E_INVALID,
                          "sandbox: the workspace must be an absolute path");
    struct av a = {0};
    add(&a, BWRAP);
    add(&a, "--unshare-all");
    add(&a, "--unshare-user"); /* --unshare-all only tries it */
    if (sb->network)
        add(&a, "--share-net");
    add(&a, "--uid");
    add(&a, "65534");
    add(&a, "--gid");
    add(&a, "65534");
    add(&a, "--die-with-parent");
    add(&a, "--new-session");
    add(&a, "--disable-userns");
    static const char *const sys[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                      "/lib32", "/lib64", "/libx32", "/etc"};
    for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
        system_path(&a, sys[i]);
    add(&a, "--proc");
    add(&a, "/proc");
    add(&a, "--dev");
    add(&a, "/dev");
    add(&a, "--tmpfs");
    add(&a, "/tmp");
    add(&a, "--bind");
    add(&a, sb->workspace);
    add(&a, sb->workspace);
    add(&a, "--chdir");
    add(&a, sb->workspace);
    add(&a, "--clearenv");
    add(&a, "--setenv");
    add(&a, "PATH");
    add(&a, "/usr/local/bin:/usr/bin:/bin");
    add(&a, "--setenv");
    add(&a, "HOME");
    add(&a, sb->workspace);
    add(&a, "--setenv");
    add(&a, "LANG");
    add(&a, "C.UTF-8");
    add(&a, "--");
    add(&a, PRLIMIT);
    add_limit(&a, "--cpu", sb->cpu_s > 0 ? sb->cpu_s : ORCH_SANDBOX_CPU_S);
    add_limit(&a, "--as",
              sb->as_bytes > 0 ? sb->as_bytes : ORCH_SANDBOX_AS_BYTES);
    add_limit(&a, "--nproc", sb->nproc > 0 ? sb->nproc : ORCH_SANDBOX_NPROC);
    add_limit(&a, "--fsize",
              sb->fsize_bytes > 0 ? sb->fsize_bytes : ORCH_SANDBOX_FSIZE_BYTES);
    add_limit(&a, "--nofile",
              sb->nofile > 0 ? sb->nofile : ORCH_SANDBOX_NOFILE);
    add(&a, "--");
    for (size_t i = 0; argv[i]; i++)
        add(&a, argv[i]);
    if (a.oom) {
        for (size_t i = 0; i < a.n; i++)
            free(a.v[i]);
        free(a.v);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    /* one block: the pointers, then the strings */
    size_t size = (a.n + 1) * sizeof(char *);
    for (size_t i = 0; i < a.n; i++)
        size += strlen(a.v[i]) + 1;
    char **blk = malloc(size);
    if (blk) {
        char *s = (char *)(blk + a.n + 1);
        for (size_t i = 0; i < a.n; i++) {
            size_t l = strlen(a.v[i]) + 1;
            memcpy(s, a.v[i], l);
            blk[i] = s;
            s += l;
        }
        blk[a.n] = NULL;
    }
    for (size_t i = 0; i < a.n; i++)
        free(a.v[i]);
    free(a.v);
    if (!blk)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    *out = blk;
    return FO_OK;
}
