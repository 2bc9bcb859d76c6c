/* orch_sandbox: bubblewrap around an agent's program and a --cmd model
 * program (orch_sandbox.h). */
#include "daemon/orch_sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ledger/fo_buf.h"

#define PRLIMIT "/usr/bin/prlimit"
#define FIRST_FD 3
#define STAGE "/tmp"  /* in the child's own mount namespace */
#define HAND_DEPTH 48 /* directories deep the hand-over goes */

/* ---- paths -------------------------------------------------------------- */

int orch_sandbox_resolve(const char *path, char *out, struct fo_err *err)
{
    if (!path || path[0] != '/')
        return fo_err_set(err, FO_E_INVALID, "%s: not an absolute path",
                          path ? path : "(null)");
    if (realpath(path, out))
        return FO_OK;
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof(tmp))
        return fo_err_set(err, FO_E_INVALID, "%.200s: path too long", path);
    memcpy(tmp, path, n + 1);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    if (n == 1) { /* "/" itself cannot fail */
        snprintf(out, PATH_MAX, "/");
        return FO_OK;
    }
    char *slash = strrchr(tmp, '/');
    char *last = slash + 1;
    int rc;
    if (slash == tmp) {
        snprintf(out, PATH_MAX, "/");
        rc = FO_OK;
    } else {
        *slash = '\0';
        rc = orch_sandbox_resolve(tmp, out, err);
    }
    if (rc)
        return rc;
    if (!strcmp(last, "."))
        return FO_OK;
    if (!strcmp(last, "..")) {
        char *s = strrchr(out, '/');
        if (s && s != out)
            *s = '\0';
        else
            snprintf(out, PATH_MAX, "/");
        return FO_OK;
    }
    size_t ol = strlen(out);
    int w = snprintf(out + ol, PATH_MAX - ol, "%s%s", ol > 1 ? "/" : "", last);
    if (w < 0 || (size_t)w >= PATH_MAX - ol)
        return fo_err_set(err, FO_E_INVALID, "%.200s: path too long", path);
    return FO_OK;
}

/* 1 when a is b or holds it (both resolved). */
static int holds(const char *a, const char *b)
{
    size_t n = strlen(a);
    if (n == 1) /* "/" */
        return 1;
    return !strncmp(a, b, n) && (b[n] == '\0' || b[n] == '/');
}

/* 0 unrelated, 1 path is the data dir or holds it, 2 path lies inside
 * it; -1 when path cannot be resolved (err set). */
static int relation(const char *path, const char *data_dir, char *rp,
                    struct fo_err *err)
{
    if (orch_sandbox_resolve(path, rp, err))
        return -1;
    if (holds(rp, data_dir))
        return 1;
    return holds(data_dir, rp) ? 2 : 0;
}

static int check_path(const char *what, const char *path, const char *dd,
                      int allow_inside, struct fo_err *err)
{
    char rp[PATH_MAX], rd[PATH_MAX];
    if (!dd)
        return FO_OK;
    int rc = orch_sandbox_resolve(dd, rd, err);
    int rel = rc ? -1 : relation(path, rd, rp, err);
    if (rel < 0)
        return err->code;
    if (rel == 1)
        return fo_err_set(err, FO_E_INVALID,
                          "%s %.300s holds the data dir %.300s: its token and "
                          "keys would be in reach of every agent; choose a "
                          "directory outside it",
                          what, rp, rd);
    if (rel == 2 && !allow_inside)
        return fo_err_set(err, FO_E_INVALID,
                          "%s %.300s lies inside the data dir %.300s; choose "
                          "a directory outside it",
                          what, rp, rd);
    return FO_OK;
}

int orch_sandbox_check_path(const char *what, const char *path,
                            const char *data_dir, struct fo_err *err)
{
    return check_path(what, path, data_dir, 0, err);
}

/* The first executable called name on path (a PATH value) into out. */
static int which(const char *name, const char *path, char *out, size_t n)
{
    if (strchr(name, '/')) {
        if (name[0] == '/')
            return snprintf(out, n, "%s", name) < (int)n &&
                           access(out, X_OK) == 0
                       ? 0
                       : -1;
        return realpath(name, out) && access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (*p) {
        size_t l = strcspn(p, ":");
        if (l > 0 && p[0] == '/') {
            int w = snprintf(out, n, "%.*s/%s", (int)l, p, name);
            struct stat st;
            if (w > 0 && (size_t)w < n && stat(out, &st) == 0 &&
                S_ISREG(st.st_mode) && access(out, X_OK) == 0)
                return 0;
        }
        p += l + (p[l] == ':');
    }
    return -1;
}

static pthread_once_t bwrap_once = PTHREAD_ONCE_INIT;
static char bwrap_path[PATH_MAX];

static void find_bwrap(void)
{
    const char *env = getenv("FORUM_BWRAP"); /* a bwrap elsewhere */
    if (env && *env) {
        snprintf(bwrap_path, sizeof(bwrap_path), "%s", env);
        return;
    }
    if (which("bwrap", getenv("PATH"), bwrap_path, sizeof(bwrap_path)) &&
        which("bwrap", "/usr/bin:/bin", bwrap_path, sizeof(bwrap_path)))
        snprintf(bwrap_path, sizeof(bwrap_path), "bwrap");
}

/* ---- the probe ---------------------------------------------------------- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_ok;
static char probe_why[512];

/* Runs /usr/bin/true in a sandbox made as every sandbox is made, on an
 * empty temp dir, as the user sandboxes run as: what works here works
 * later. */
static void probe(void)
{
    char dir[] = "/tmp/forum-sandbox-probe-XXXXXX";
    struct orch_boxed *b = NULL;
    struct fo_err err;
    static const char *const cmd[] = {"/usr/bin/true", NULL};
    pthread_once(&bwrap_once, find_bwrap);
    if (bwrap_path[0] != '/' || access(bwrap_path, X_OK) != 0) {
        snprintf(probe_why, sizeof(probe_why),
                 "bubblewrap (bwrap) cannot be run: %s (install the Debian "
                 "package bubblewrap)",
                 bwrap_path[0] == '/' ? "FORUM_BWRAP names no program"
                                      : "not found on PATH");
        return;
    }
    if (access(PRLIMIT, X_OK) != 0) {
        snprintf(probe_why, sizeof(probe_why),
                 "%s is missing (util-linux): the sandbox's limits cannot be "
                 "set",
                 PRLIMIT);
        return;
    }
    if (!mkdtemp(dir)) {
        snprintf(probe_why, sizeof(probe_why), "cannot make a temp dir: %s",
                 strerror(errno));
        return;
    }
    struct orch_sandbox sb = {.workspace = dir, .own_workspace = 1};
    int p[2] = {-1, -1};
    pid_t pid = 0;
    int rc = pipe2(p, O_CLOEXEC) != 0
                 ? fo_err_set(&err, FO_E_IO, "pipe: %s", strerror(errno))
                 : orch_sandbox_prepare(&sb, cmd, NULL, &b, &err);
    if (!rc)
        rc = orch_sandbox_spawn(b, p[1], p[1], &pid, &err);
    free(b);
    if (p[1] >= 0)
        close(p[1]);
    int st = 0;
    if (!rc)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    /* what bwrap said (a few lines at most: the pipe holds them) */
    char said[160] = "";
    ssize_t k = -1;
    if (!rc && p[0] >= 0 && fcntl(p[0], F_SETFL, O_NONBLOCK) == 0)
        k = read(p[0], said, sizeof(said) - 1);
    said[k > 0 ? k : 0] = '\0';
    said[strcspn(said, "\n")] = '\0';
    if (p[0] >= 0)
        close(p[0]);
    rmdir(dir);
    if (rc) {
        snprintf(probe_why, sizeof(probe_why), "%s", err.msg);
        return;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        probe_ok = 1;
        return;
    }
    snprintf(probe_why, sizeof(probe_why),
             "bubblewrap cannot make a sandbox here (exit %d%s: %.100s): "
             "user namespaces are probably not allowed (a container "
             "without them, kernel.unprivileged_userns_clone=0, or a "
             "service manager's RestrictNamespaces)",
             WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
             geteuid() == 0 ? ", run as uid 65534" : "", said);
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

/* ---- building the command ----------------------------------------------- */

/* A list of strings being built: copied into one growing list, then
 * packed into one block. */
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

static void av_free(struct av *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
}

static void add_limit(struct av *a, const char *flag, long long v)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s=%lld", flag, v);
    add(a, buf);
}

/* The command being built: bwrap's argv and the paths the child opens. */
struct build {
    struct av argv, opens;
    char ro[64][PATH_MAX]; /* what is bound read-only, to mask the data dir */
    size_t n_ro;
    int stage; /* root: the caller's paths are staged (bind_src) */
};

static void ro_source(struct build *b, const char *p)
{
    struct stat st; /* only a directory can hold the data dir */
    if (b->n_ro < sizeof(b->ro) / sizeof(b->ro[0]) && stat(p, &st) == 0 &&
        S_ISDIR(st.st_mode) && realpath(p, b->ro[b->n_ro]))
        b->n_ro++;
}

/* A directory or file of the caller's bound at dest. As root (stage),
 * bwrap runs as the sandbox user, who may not reach src: the child opens
 * it before the drop and mounts it at STAGE/<i> in a mount namespace of
 * its own, and bwrap binds it from there. */
static void bind_src(struct build *b, int rw, const char *src, const char *dest)
{
    char st[64];
    add(&b->argv, rw ? "--bind" : "--ro-bind");
    if (b->stage) {
        snprintf(st, sizeof(st), "%s/%zu", STAGE, b->opens.n);
        add(&b->opens, src);
        add(&b->argv, st);
    } else {
        add(&b->argv, src);
    }
    add(&b->argv, dest);
}

/* A system path: bound read-only when a directory, made the same symlink
 * when a symlink (merged /usr), left out when absent. */
static void system_path(struct build *b, const char *p)
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
        add(&b->argv, "--symlink");
        add(&b->argv, target);
        add(&b->argv, p);
    } else if (S_ISDIR(st.st_mode)) {
        add(&b->argv, "--ro-bind");
        add(&b->argv, p);
        add(&b->argv, p);
        ro_source(b, p);
    }
}

/* Of /etc, what programs read; never shadow, gshadow, sudoers, ssh keys
 * or ssl/private. A symlink into /usr or /proc is made again; any other
 * entry is bound read-only (a symlink followed). */
static void etc_paths(struct build *b, int network)
{
    static const char *const etc[] = {
        "/etc/passwd",     "/etc/group",           "/etc/nsswitch.conf",
        "/etc/hosts",      "/etc/host.conf",       "/etc/gai.conf",
        "/etc/localtime",  "/etc/timezone",        "/etc/ld.so.cache",
        "/etc/ld.so.conf", "/etc/ld.so.conf.d",    "/etc/alternatives",
        "/etc/ssl/certs",  "/etc/ssl/openssl.cnf", "/etc/ca-certificates",
        "/etc/protocols",  "/etc/services",        "/etc/mime.types",
        "/etc/os-release", "/etc/debian_version",  "/etc/shells",
        "/etc/mtab",       "/etc/magic",           "/etc/inputrc",
        "/etc/gitconfig",  "/etc/pip.conf",        "/etc/npmrc",
        "/etc/perl",       "/etc/python3",         "/etc/resolv.conf"};
    size_t n = sizeof(etc) / sizeof(etc[0]);
    for (size_t i = 0; i < n; i++) {
        const char *p = etc[i];
        struct stat st;
        if (!network && !strcmp(p, "/etc/resolv.conf"))
            continue;
        if (lstat(p, &st) != 0)
            continue;
        char target[PATH_MAX];
        if (S_ISLNK(st.st_mode)) {
            ssize_t k = readlink(p, target, sizeof(target) - 1);
            char real[PATH_MAX];
            if (k <= 0 || !realpath(p, real))
                continue;
            target[k] = '\0';
            if (!strncmp(real, "/usr/", 5) || !strncmp(real, "/proc/", 6)) {
                add(&b->argv, "--symlink");
                add(&b->argv, target);
                add(&b->argv, p);
                continue;
            }
        }
        add(&b->argv, "--ro-bind");
        add(&b->argv, p);
        add(&b->argv, p);
        ro_source(b, p);
    }
}

static void base_flags(struct build *b, const struct orch_sandbox *sb)
{
    int model = sb->profile == ORCH_SANDBOX_MODEL;
    add(&b->argv, bwrap_path);
    add(&b->argv, "--unshare-all");
    add(&b->argv, "--unshare-user"); /* --unshare-all only tries it */
    if (sb->network || model)
        add(&b->argv, "--share-net");
    add(&b->argv, "--uid");
    add(&b->argv, "65534");
    add(&b->argv, "--gid");
    add(&b->argv, "65534");
    add(&b->argv, "--die-with-parent");
    add(&b->argv, "--new-session");
    add(&b->argv, "--disable-userns");
    static const char *const sys[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                      "/lib32", "/lib64", "/libx32"};
    for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
        system_path(b, sys[i]);
    etc_paths(b, sb->network || model);
    add(&b->argv, "--proc");
    add(&b->argv, "/proc");
    add(&b->argv, "--dev");
    add(&b->argv, "/dev");
    add(&b->argv, "--tmpfs");
    add(&b->argv, "/tmp");
}

static int under_system(const char *real)
{
    static const char *const sys[] = {"/usr/", "/bin/", "/sbin/", "/lib"};
    for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
        if (!strncmp(real, sys[i], strlen(sys[i])))
            return 1;
    return 0;
}

static const char *env_get(const char *const *env, const char *name)
{
    size_t l = strlen(name);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], name, l) && env[i][l] == '=')
            return env[i] + l + 1;
    return NULL;
}

/* The model profile's own binds: read_dirs and the program read-only,
 * state dirs writable (absent ones left out). */
static int model_binds(struct build *b, const struct orch_sandbox *sb,
                       const char *prog, const char *const *argv, size_t n_args,
                       const char *dd, struct fo_err *err)
{
    char rp[PATH_MAX];
    for (size_t i = 0; sb->read_dirs && sb->read_dirs[i]; i++) {
        const char *p = sb->read_dirs[i];
        if (dd && relation(p, dd, rp, err) == 2)
            return fo_err_set(err, FO_E_INVALID,
                              "cmd_sandbox.read_dirs: %.300s lies inside the "
                              "data dir %.300s",
                              rp, dd);
        if (!realpath(p, rp))
            continue;
        bind_src(b, 0, rp, p);
        ro_source(b, rp);
    }
    /* the program, and the files its command line names (a script for
     * an interpreter): the operator's, never the prompt's */
    for (size_t i = 0; i < n_args; i++) {
        const char *p = i ? argv[i] : prog;
        struct stat st;
        if (p[0] != '/' || stat(p, &st) != 0 || !S_ISREG(st.st_mode) ||
            !realpath(p, rp) || under_system(rp))
            continue;
        if (dd && holds(dd, rp))
            return fo_err_set(err, FO_E_INVALID,
                              "the model program's %.300s lies inside the "
                              "data dir %.300s",
                              rp, dd);
        bind_src(b, 0, rp, p);
    }
    for (size_t i = 0; sb->write_dirs && sb->write_dirs[i]; i++) {
        const char *p = sb->write_dirs[i];
        int rc = check_path("cmd_sandbox.state_dirs:", p, dd, 0, err);
        if (rc)
            return rc;
        if (realpath(p, rp))
            bind_src(b, 1, rp, p);
    }
    return FO_OK;
}

static void env_flags(struct build *b, const struct orch_sandbox *sb,
                      const char *ws)
{
    int model = sb->profile == ORCH_SANDBOX_MODEL;
    const char *path = model ? env_get(sb->env, "PATH") : NULL;
    const char *home = model ? env_get(sb->env, "HOME") : ws;
    add(&b->argv, "--clearenv");
    add(&b->argv, "--setenv");
    add(&b->argv, "PATH");
    add(&b->argv, path ? path : "/usr/local/bin:/usr/bin:/bin");
    add(&b->argv, "--setenv");
    add(&b->argv, "HOME");
    add(&b->argv, home ? home : "/tmp");
    add(&b->argv, "--setenv");
    add(&b->argv, "LANG");
    add(&b->argv, "C.UTF-8");
    for (size_t i = 0; model && sb->env && sb->env[i]; i++) {
        const char *eq = strchr(sb->env[i], '=');
        if (!eq || eq == sb->env[i])
            continue;
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - sb->env[i]),
                 sb->env[i]);
        if (!strcmp(name, "PATH") || !strcmp(name, "HOME") ||
            !strcmp(name, "LANG"))
            continue;
        add(&b->argv, "--setenv");
        add(&b->argv, name);
        add(&b->argv, eq + 1);
    }
}

static void limit_flags(struct build *b, const struct orch_sandbox *sb)
{
    add(&b->argv, "--");
    add(&b->argv, PRLIMIT);
    if (sb->profile != ORCH_SANDBOX_MODEL) {
        add_limit(&b->argv, "--cpu",
                  sb->cpu_s > 0 ? sb->cpu_s : ORCH_SANDBOX_CPU_S);
        add_limit(&b->argv, "--as",
                  sb->as_bytes > 0 ? sb->as_bytes : ORCH_SANDBOX_AS_BYTES);
    }
    add_limit(&b->argv, "--nproc",
              sb->nproc > 0 ? sb->nproc : ORCH_SANDBOX_NPROC);
    add_limit(&b->argv, "--fsize",
              sb->fsize_bytes > 0 ? sb->fsize_bytes : ORCH_SANDBOX_FSIZE_BYTES);
    add_limit(&b->argv, "--nofile",
              sb->nofile > 0 ? sb->nofile : ORCH_SANDBOX_NOFILE);
    add(&b->argv, "--");
}

/* Packs b into one block. NULL when out of memory. */
static struct orch_boxed *pack(struct build *b)
{
    static const char *const benv[] = {"PATH=/usr/bin:/bin", NULL};
    struct av *lists[2] = {&b->argv, &b->opens};
    size_t size = sizeof(struct orch_boxed) +
                  (b->argv.n + b->opens.n + 4) * sizeof(char *) +
                  strlen(benv[0]) + 1;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            size += strlen(lists[k]->v[i]) + 1;
    struct orch_boxed *o = calloc(1, size);
    if (!o)
        return NULL;
    char **ptrs = (char **)(o + 1);
    char *s = (char *)(ptrs + b->argv.n + b->opens.n + 4);
    char **heads[2];
    for (int k = 0; k < 2; k++) {
        heads[k] = ptrs;
        for (size_t i = 0; i < lists[k]->n; i++) {
            size_t l = strlen(lists[k]->v[i]) + 1;
            memcpy(s, lists[k]->v[i], l);
            *ptrs++ = s;
            s += l;
        }
        *ptrs++ = NULL;
    }
    o->argv = heads[0];
    o->opens = heads[1];
    o->n_opens = b->opens.n;
    o->env = ptrs;
    memcpy(s, benv[0], strlen(benv[0]) + 1);
    o->env[0] = s;
    o->env[1] = NULL;
    o->hand_fd = -1;
    return o;
}

int orch_sandbox_prepare(const struct orch_sandbox *sb, const char *const *argv,
                         const char *last, struct orch_boxed **out,
                         struct fo_err *err)
{
    int model = sb->profile == ORCH_SANDBOX_MODEL;
    if ((!sb->workspace && !model) ||
        (sb->workspace && sb->workspace[0] != '/'))
        return fo_err_set(err, FO_E_INVALID,
                          "sandbox: the workspace must be an absolute path");
    if (!argv || !argv[0])
        return fo_err_set(err, FO_E_INVALID, "sandbox: no command");
    pthread_once(&bwrap_once, find_bwrap);
    char dd[PATH_MAX], prog[PATH_MAX], ws[PATH_MAX];
    int rc = sb->data_dir ? orch_sandbox_resolve(sb->data_dir, dd, err) : 0;
    if (!rc && sb->workspace)
        rc = check_path("workspace", sb->workspace, sb->data_dir,
                        sb->own_workspace, err);
    if (!rc && sb->workspace && !realpath(sb->workspace, ws))
        rc = fo_err_set(err, FO_E_IO, "workspace %.300s: %s", sb->workspace,
                        strerror(errno));
    if (rc)
        return rc;
    if (model && which(argv[0], env_get(sb->env, "PATH"), prog, sizeof(prog)))
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "executor: cannot run \"%.200s\": %s", argv[0],
                          strerror(ENOENT));
    struct build *b = calloc(1, sizeof(*b));
    if (!b)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    b->stage = geteuid() == 0;
    base_flags(b, sb);
    int ws_fd = -1;
    size_t n_args = 0;
    while (argv[n_args])
        n_args++;
    rc = model ? model_binds(b, sb, prog, argv, n_args,
                             sb->data_dir ? dd : NULL, err)
               : 0;
    if (!rc && sb->workspace) {
        ws_fd = FIRST_FD + (int)b->opens.n;
        bind_src(b, 1, ws, ws);
    }
    /* the data dir under a read-only bind: an empty tmpfs over it */
    for (size_t i = 0; !rc && sb->data_dir && i < b->n_ro; i++)
        if (holds(b->ro[i], dd)) {
            add(&b->argv, "--tmpfs");
            add(&b->argv, dd);
            break;
        }
    add(&b->argv, "--chdir");
    add(&b->argv, sb->workspace ? ws : "/tmp");
    env_flags(b, sb, sb->workspace ? ws : NULL);
    limit_flags(b, sb);
    for (size_t i = 0; argv[i]; i++)
        add(&b->argv, i == 0 && model ? prog : argv[i]);
    if (last)
        add(&b->argv, last);
    struct orch_boxed *o = NULL;
    if (!rc && (b->argv.oom || b->opens.oom))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    else if (!rc && !(o = pack(b)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    av_free(&b->argv);
    av_free(&b->opens);
    free(b);
    if (rc)
        return rc;
    if (geteuid() == 0) {
        /* a workspace of a user's (a configured project): its owner; else
         * (the run's own, handed over; root's; none) nobody */
        struct stat st;
        int owner = sb->workspace && !sb->own_workspace && stat(ws, &st) == 0 &&
                    st.st_uid != 0;
        o->drop = 1;
        o->uid = owner ? st.st_uid : ORCH_SANDBOX_UID;
        o->gid = owner ? st.st_gid : ORCH_SANDBOX_GID;
        o->hand_fd = sb->own_workspace ? ws_fd : -1;
    }
    *out = o;
    return FO_OK;
}

/* ---- the child ---------------------------------------------------------- */

/* What follows runs in the forked child of a threaded process: only
 * async-signal-safe calls, nothing allocated. */

static void say(const char *a, const char *b)
{
    ssize_t w = write(2, a, strlen(a));
    w = write(2, b, strlen(b));
    w = write(2, "\n", 1);
    (void)w;
}

struct dent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* Hands the daemon's own files in the tree at dfd to uid/gid: directories
 * and singly linked regular files owned by root, never through a
 * symlink (every step relative to an fd, O_NOFOLLOW). */
static void hand_over(int dfd, uid_t uid, gid_t gid, int depth)
{
    struct stat st;
    if (fstat(dfd, &st) == 0 && st.st_uid == 0)
        if (fchown(dfd, uid, gid) != 0)
            return;
    char buf[4096] __attribute__((aligned(8)));
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, buf, sizeof(buf));
        if (n <= 0)
            return;
        for (long off = 0; off < n;) {
            struct dent64 *d = (struct dent64 *)(void *)(buf + off);
            off += d->reclen;
            const char *nm = d->name;
            if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
                continue;
            if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                st.st_uid != 0)
                continue;
            if (S_ISDIR(st.st_mode) && depth < HAND_DEPTH) {
                int c = openat(dfd, nm,
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (c >= 0) {
                    hand_over(c, uid, gid, depth + 1);
                    close(c);
                }
            } else if (S_ISREG(st.st_mode) && st.st_nlink == 1) {
                (void)fchownat(dfd, nm, uid, gid, AT_SYMLINK_NOFOLLOW);
            }
        }
    }
}

/* n in decimal after prefix into out (no snprintf here). */
static void num_path(char *out, const char *prefix, size_t n)
{
    size_t l = strlen(prefix);
    memcpy(out, prefix, l);
    char d[24];
    size_t k = 0;
    do
        d[k++] = (char)('0' + n % 10);
    while ((n /= 10) > 0);
    while (k > 0)
        out[l++] = d[--k];
    out[l] = '\0';
}

/* The paths of b opened (O_PATH) as fds FIRST_FD.. in a mount namespace
 * of the child's own, the workspace handed over, then each mounted at
 * STAGE/<i> (a tmpfs over STAGE there) and closed: bwrap, run as the
 * sandbox user, binds them from there. 0, or -1 (said). */
static int stage(const struct orch_boxed *b)
{
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        say("forum sandbox: cannot make a mount namespace: ", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < b->n_opens; i++) {
        int fd = open(b->opens[i], O_PATH);
        if (fd != (int)(FIRST_FD + i)) {
            say("forum sandbox: cannot open ", b->opens[i]);
            return -1;
        }
    }
    if (b->hand_fd >= 0) {
        int d = openat(b->hand_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0) {
            hand_over(d, b->uid, b->gid, 0);
            close(d);
        }
    }
    if (mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") !=
        0) {
        say("forum sandbox: cannot mount a tmpfs: ", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < b->n_opens; i++) {
        char src[64], dst[64];
        struct stat st;
        int fd = (int)(FIRST_FD + i);
        num_path(src, "/proc/self/fd/", (size_t)fd);
        num_path(dst, STAGE "/", i);
        int made = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)
                       ? mkdir(dst, 0755)
                       : close(open(dst, O_WRONLY | O_CREAT | O_EXCL, 0644));
        /* not recursive: STAGE itself may lie under a staged path */
        if (made != 0 || mount(src, dst, NULL, MS_BIND, NULL) != 0) {
            say("forum sandbox: cannot stage ", b->opens[i]);
            say("  ", strerror(errno));
            return -1;
        }
        close(fd);
    }
    return 0;
}

static void child(const struct orch_boxed *b, int out_w, int err_w)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            (void)sigaction(s, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0);
    int nul = open("/dev/null", O_RDONLY);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        _exit(127);
    if (syscall(SYS_close_range, FIRST_FD, ~0U, 0) != 0)
        for (int fd = FIRST_FD; fd < 65536; fd++)
            close(fd);
    if (b->n_opens && stage(b) != 0)
        _exit(127);
    if (b->drop && (setgroups(0, NULL) != 0 || setgid(b->gid) != 0 ||
                    setuid(b->uid) != 0 || setuid(0) == 0)) {
        say("forum sandbox: cannot drop to the sandbox user", "");
        _exit(127);
    }
    if (chdir("/") != 0)
        _exit(127);
    execve(b->argv[0], b->argv, b->env);
    say("forum sandbox: cannot run ", b->argv[0]);
    _exit(127);
}

int orch_sandbox_spawn(const struct orch_boxed *b, int out_w, int err_w,
                       pid_t *pid, struct fo_err *err)
{
    pid_t p = fork();
    if (p < 0)
        return fo_err_set(err, FO_E_IO, "sandbox: fork: %s", strerror(errno));
    if (p == 0)
        child(b, out_w, err_w);
    setpgid(p, p); /* also here: no race with a kill of the group */
    *pid = p;
    return FO_OK;
}

/* ---- the model profile's configuration ---------------------------------- */

void orch_cmd_box_release(struct orch_cmd_box *b)
{
    char **l[3] = {b->write_dirs, b->read_dirs, b->env};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; l[k] && l[k][i]; i++)
            free(l[k][i]);
        free(l[k]);
    }
    b->write_dirs = b->read_dirs = b->env = NULL;
}

/* One list of the configuration: directories (absolute, or ~/ under our
 * HOME) or variable names (taken with their values from our environment;
 * unset ones left out). */
static int box_list(const cJSON *v, const char *field, int names, char ***out,
                    struct fo_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, field);
    if (!a)
        return FO_OK;
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n > ORCH_SANDBOX_DIRS_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "cmd_sandbox.%s: an array of at most %d strings",
                          field, ORCH_SANDBOX_DIRS_MAX);
    char **l = calloc((size_t)n + 1, sizeof(*l));
    if (!l)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    *out = l;
    size_t k = 0;
    const char *home = getenv("HOME");
    const cJSON *e;
    cJSON_ArrayForEach (e, a) {
        const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
        int ok = s && *s && strlen(s) < 1024;
        if (ok && names)
            ok =
                strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                          "0123456789_") == strlen(s);
        else if (ok)
            ok = s[0] == '/' || (s[0] == '~' && s[1] == '/' && home && *home);
        if (!ok)
            return fo_err_set(err, FO_E_INVALID, "cmd_sandbox.%s: %s", field,
                              names ? "variable names ([A-Za-z0-9_])"
                                    : "absolute paths or ~/...");
        struct fo_buf bb;
        fo_buf_init(&bb, FO_BUF_UNLIMITED);
        const char *val = names ? getenv(s) : NULL;
        if (names && !val)
            continue;
        int brc = names         ? fo_buf_printf(&bb, "%s=%s", s, val)
                  : s[0] == '~' ? fo_buf_printf(&bb, "%s%s", home, s + 1)
                                : fo_buf_printf(&bb, "%s", s);
        if (brc) {
            fo_buf_release(&bb);
            return fo_err_set(err, FO_E_NOMEM, NULL);
        }
        l[k++] = bb.data;
    }
    return FO_OK;
}

int orch_cmd_box_parse(const cJSON *v, struct orch_cmd_box *out,
                       struct fo_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!v)
        return FO_OK;
    if (!cJSON_IsObject(v))
        return fo_err_set(err, FO_E_INVALID, "cmd_sandbox: must be an object");
    const cJSON *f;
    cJSON_ArrayForEach (f, v) {
        const char *k = f->string;
        if (strcmp(k, "sandbox") && strcmp(k, "state_dirs") &&
            strcmp(k, "read_dirs") && strcmp(k, "env"))
            return fo_err_set(err, FO_E_INVALID,
                              "cmd_sandbox: field %s: unknown (sandbox, "
                              "state_dirs, read_dirs, env)",
                              k);
    }
    f = cJSON_GetObjectItemCaseSensitive(v, "sandbox");
    if (f) {
        out->mode =
            cJSON_IsString(f) ? orch_sandbox_mode_parse(f->valuestring) : -1;
        if (out->mode < 0)
            return fo_err_set(err, FO_E_INVALID,
                              "cmd_sandbox.sandbox: \"bwrap\" or \"none\"");
    }
    int rc = box_list(v, "state_dirs", 0, &out->write_dirs, err);
    if (!rc)
        rc = box_list(v, "read_dirs", 0, &out->read_dirs, err);
    if (!rc)
        rc = box_list(v, "env", 1, &out->env, err);
    if (rc)
        orch_cmd_box_release(out);
    return rc;
}
