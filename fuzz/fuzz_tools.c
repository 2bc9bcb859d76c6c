/* fuzz_tools: the file tools (read_file, write_file, list_dir, search_text,
 * apply_patch) and patch matching, on any bytes and any tree.
 *
 * The input is text. Lines up to "%%" build a tree in a fresh workspace:
 *   f NAME          a regular file; its content is the lines up to "."
 *   d NAME          a directory
 *   l NAME TARGET   a symlink (TARGET may point in or out of the workspace)
 *   p NAME          a FIFO (the tools must refuse it, never block on it)
 * The lines after it are tool calls, arguments separated by tabs:
 *   read_file PATH | write_file PATH (content: the lines up to ".") |
 *   list_dir [PATH] | search_text PATTERN [PATH] | apply_patch (the patch:
 *   the lines up to ".") | json TOOL ARGS (arguments as a model wrote them)
 *
 * The workspace lies in a scratch directory R beside a sentinel file and a
 * directory `outside`. After every call: nothing in R but the workspace
 * changed; the output is at most ORCH_TOOL_OUTPUT_MAX bytes and the cut
 * marker; a patch that failed left the workspace as it was. A call that
 * blocks (a FIFO opened) trips libFuzzer's timeout.
 *
 * The harness runs as whoever runs it (root, on CI): the tree it builds can
 * never point outside R, whatever the tools do. Entries are made only under
 * real directories, and a symlink's target may climb at most to R and not
 * climb again after its first ordinary name; absolute targets are taken as
 * relative to R. And where it may (root, Linux 5.12 or later), the whole
 * harness runs in its own mount namespace with every mount read-only but
 * TMPDIR and the working directory (libFuzzer's corpus and crash files):
 * a tool that escaped could not write a byte of the machine's files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "daemon/orch_tools.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

#define CALLS_MAX 16
#define ENTRIES_MAX 32
#define DEPTH_MAX 4
#define MARKER_MAX 64 /* "\n[forum: cut at N of M bytes]" */
#define SENTINEL "the sentinel: nothing may change it\n"
#define SECRET "outside the workspace\n"

static char root[4096]; /* R */
static char wsdir[4200];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_tools: %s: %s\n", what, strerror(errno));
    abort();
}

static void put_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s) || close(fd))
        die(path);
}

/* Every mount read-only but tmp and the working directory (see above);
 * 0 when that could not be done (then the tree's rules alone hold). */
static int confine(const char *tmp)
{
    char cwd[4096];
    if (!getcwd(cwd, sizeof(cwd)) || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(tmp, tmp, NULL, MS_BIND | MS_REC, NULL) != 0 ||
        mount(cwd, cwd, NULL, MS_BIND | MS_REC, NULL) != 0)
        return 0;
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
    struct mount_attr rw = {.attr_clr = MOUNT_ATTR_RDONLY};
    /* the working directory is looked up again: the old one is under
     * the bind mount, in the read-only one */
    return chdir(cwd) == 0 &&
           syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro,
                   sizeof(ro)) == 0 &&
           syscall(SYS_mount_setattr, AT_FDCWD, tmp, AT_RECURSIVE, &rw,
                   sizeof(rw)) == 0 &&
           syscall(SYS_mount_setattr, AT_FDCWD, cwd, AT_RECURSIVE, &rw,
                   sizeof(rw)) == 0;
}

static void setup(void)
{
    const char *t = getenv("TMPDIR");
    if (geteuid() == 0 && !confine(t && *t ? t : "/tmp"))
        fprintf(stderr, "fuzz_tools: running without a read-only mount "
                        "namespace\n");
    snprintf(root, sizeof(root), "%s/fuzz-tools-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(root))
        die("mkdtemp");
    snprintf(wsdir, sizeof(wsdir), "%s/ws", root);
    char p[4300];
    snprintf(p, sizeof(p), "%s/sentinel", root);
    put_file(p, SENTINEL);
    snprintf(p, sizeof(p), "%s/outside", root);
    if (mkdir(p, 0755))
        die(p);
    snprintf(p, sizeof(p), "%s/outside/secret", root);
    put_file(p, SECRET);
}

/* ---- the tree ---------------------------------------------------------- */

/* Removes dir's contents, never following a symlink. */
static void rm_tree(int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d)
        die("fdopendir");
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
            die(de->d_name);
        if (S_ISDIR(st.st_mode)) {
            int f = openat(dirfd(d), de->d_name,
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (f < 0)
                die(de->d_name);
            rm_tree(f);
            if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR))
                die(de->d_name);
        } else if (unlinkat(dirfd(d), de->d_name, 0)) {
            die(de->d_name);
        }
    }
    closedir(d);
}

/* Splits a name into components; 0 when it is not one the harness makes
 * (empty, absolute, ".", "..", too deep). */
static int name_ok(const char *name, int *depth)
{
    if (!name[0] || name[0] == '/' || strlen(name) > 200)
        return 0;
    int k = 0;
    for (const char *p = name; *p;) {
        const char *s = strchr(p, '/');
        size_t len = s ? (size_t)(s - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') ||
            (len == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        k++;
        p = s ? s + 1 : p + len;
    }
    *depth = k - 1;
    return k <= DEPTH_MAX;
}

/* A symlink target that stays inside R from a link depth directories
 * below the workspace: "../" at most depth + 1 times, first, then names. */
static int target_ok(const char *t, int depth)
{
    if (!t[0] || strlen(t) > 200)
        return 0;
    int up = 0, named = 0;
    for (const char *p = t; *p;) {
        const char *s = strchr(p, '/');
        size_t len = s ? (size_t)(s - p) : strlen(p);
        int dots = len == 2 && p[0] == '.' && p[1] == '.';
        if (dots && (named || ++up > depth + 1))
            return 0;
        if (!dots && len && !(len == 1 && p[0] == '.'))
            named = 1;
        p = s ? s + 1 : p + len;
    }
    return 1;
}

/* Makes the missing parents of name (real directories only): 0 when one
 * exists and is not a directory. */
static int parents(const char *name)
{
    char p[4500];
    int n = snprintf(p, sizeof(p), "%s/%s", wsdir, name);
    for (int i = (int)strlen(wsdir) + 1; i < n; i++) {
        if (p[i] != '/')
            continue;
        p[i] = '\0';
        struct stat st;
        if (lstat(p, &st) != 0 && mkdir(p, 0755) != 0)
            return 0;
        if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            return 0;
        p[i] = '/';
    }
    return 1;
}

static void make_entry(char type, const char *name, const char *arg,
                       const char *content, size_t clen)
{
    int depth = 0;
    if (!name_ok(name, &depth) || !parents(name))
        return;
    char p[4500];
    snprintf(p, sizeof(p), "%s/%s", wsdir, name);
    if (type == 'd') {
        mkdir(p, 0755);
    } else if (type == 'p') {
        mkfifo(p, 0644);
    } else if (type == 'l' && arg) {
        char t[4500];
        if (arg[0] == '/') { /* absolute: below R */
            if (!target_ok(arg + 1, -1))
                return;
            snprintf(t, sizeof(t), "%s%s", root, arg);
        } else if (target_ok(arg, depth)) {
            snprintf(t, sizeof(t), "%s", arg);
        } else {
            return;
        }
        symlink(t, p);
    } else if (type == 'f') {
        int fd =
            open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            return;
        if (clen && write(fd, content, clen) < 0)
            die("write");
        close(fd);
    }
}

/* ---- what must not change -------------------------------------------- */

static uint64_t fnv(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* A line per entry under dir (rel), in name order: type, mode, size, and
 * the content's or the link's hash. FIFOs are never opened. */
static void snap(const char *dir, const char *rel, struct fo_buf *out)
{
    struct dirent **v = NULL;
    int n = scandir(dir, &v, NULL, by_name);
    if (n < 0)
        die(dir);
    for (int i = 0; i < n; i++) {
        const char *nm = v[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            char p[8192], r[8192];
            snprintf(p, sizeof(p), "%s/%s", dir, nm);
            snprintf(r, sizeof(r), "%s%s%s", rel, rel[0] ? "/" : "", nm);
            struct stat st;
            if (lstat(p, &st))
                die(p);
            uint64_t h = 1469598103934665603ull;
            if (S_ISREG(st.st_mode)) {
                int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                char b[8192];
                ssize_t k;
                if (fd < 0)
                    die(p);
                while ((k = read(fd, b, sizeof(b))) > 0)
                    h = fnv(b, (size_t)k, h);
                close(fd);
            } else if (S_ISLNK(st.st_mode)) {
                char b[4500];
                ssize_t k = readlink(p, b, sizeof(b));
                h = fnv(b, k > 0 ? (size_t)k : 0, h);
            }
            if (fo_buf_printf(out, "%s %o %lld %llx\n", r, (unsigned)st.st_mode,
                              (long long)st.st_size, (unsigned long long)h))
                abort();
            if (S_ISDIR(st.st_mode))
                snap(p, r, out);
        }
        free(v[i]);
    }
    free(v);
}

/* R holds ws, the sentinel and outside/secret, as they were made. */
static void check_outside(void)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char p[4300];
    snprintf(p, sizeof(p), "%s/outside", root);
    snap(p, "", &b);
    uint64_t h = fnv(SECRET, strlen(SECRET), 1469598103934665603ull);
    char want[256];
    snprintf(want, sizeof(want), "secret %o %zu %llx\n",
             (unsigned)(S_IFREG | 0644), strlen(SECRET), (unsigned long long)h);
    if (b.len != strlen(want) || memcmp(b.data, want, b.len))
        abort(); /* something beside the workspace changed */
    fo_buf_release(&b);
    struct dirent **v = NULL;
    int n = scandir(root, &v, NULL, by_name);
    if (n != 5 || strcmp(v[2]->d_name, "outside") ||
        strcmp(v[3]->d_name, "sentinel") || strcmp(v[4]->d_name, "ws"))
        abort(); /* a name appeared beside the workspace */
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
    snprintf(p, sizeof(p), "%s/sentinel", root);
    char got[256];
    int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, got, sizeof(got)) : -1;
    struct stat st;
    if (fd < 0 || k != (ssize_t)strlen(SENTINEL) ||
        memcmp(got, SENTINEL, (size_t)k) || fstat(fd, &st) ||
        (st.st_mode & 07777) != 0644 || st.st_nlink != 1)
        abort(); /* the sentinel changed */
    close(fd);
}

/* ---- the calls --------------------------------------------------------- */

struct in {
    const char *p, *end;
};

/* The next line (without its newline) as a malloc'd string, or NULL. */
static char *next_line(struct in *in)
{
    if (in->p >= in->end)
        return NULL;
    const char *nl = memchr(in->p, '\n', (size_t)(in->end - in->p));
    const char *e = nl ? nl : in->end;
    char *s = strndup(in->p, (size_t)(e - in->p));
    in->p = nl ? nl + 1 : in->end;
    if (!s)
        abort();
    return s;
}

/* The lines up to "." (or the end), each with its newline. */
static char *body(struct in *in, size_t *len)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char *l;
    while ((l = next_line(in)) && strcmp(l, ".")) {
        if (fo_buf_puts(&b, l) || fo_buf_putc(&b, '\n'))
            abort();
        free(l);
    }
    free(l);
    if (fo_buf_putc(&b, '\0'))
        abort();
    *len = b.len - 1;
    return fo_buf_detach(&b, NULL);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs tool with args (checked against its schema first, as the engine
 * does) and checks what the call may and may not do. */
static void call(int ws, const char *tool, cJSON *args)
{
    const struct orch_tool_def *def = orch_tool_builtin(tool);
    if (!def || def->program || def->session || !args)
        return;
    if (orch_tool_schema_check(def->schema, args, NULL) != FO_OK)
        return;
    int patch = !strcmp(tool, "apply_patch");
    struct fo_buf before;
    fo_buf_init(&before, FO_BUF_UNLIMITED);
    if (patch)
        snap(wsdir, "", &before);
    struct orch_tool_budget budget = {.deadline_ms = now_ms() + 3000};
    struct fo_buf out;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    struct fo_err err;
    int rc = orch_tool_run_file(ws, tool, args, &budget, &out, &err);
    if (out.len > ORCH_TOOL_OUTPUT_MAX + MARKER_MAX)
        abort(); /* an output past its bound */
    if (rc && !memchr(err.msg, '\0', sizeof(err.msg)))
        abort();
    if (patch && rc) { /* a patch that fails changes nothing */
        struct fo_buf after;
        fo_buf_init(&after, FO_BUF_UNLIMITED);
        snap(wsdir, "", &after);
        if (after.len != before.len ||
            (after.len && memcmp(after.data, before.data, after.len))) {
            fprintf(stderr, "apply_patch failed (%s) yet changed the tree\n",
                    err.msg);
            abort();
        }
        fo_buf_release(&after);
    }
    fo_buf_release(&before);
    fo_buf_release(&out);
    check_outside();
}

static void add_str(cJSON *o, const char *k, const char *v)
{
    if (v && !cJSON_AddStringToObject(o, k, v))
        abort();
}

/* One call line (tool and tab-separated arguments) and its body. */
static void run_line(int ws, char *line, struct in *in)
{
    char *f[3] = {line, NULL, NULL};
    for (int i = 1; i < 3; i++) {
        char *tab = f[i - 1] ? strchr(f[i - 1], '\t') : NULL;
        if (tab) {
            *tab = '\0';
            f[i] = tab + 1;
        }
    }
    cJSON *a = NULL;
    if (!strcmp(f[0], "json")) {
        const struct orch_tool_def *def = orch_tool_builtin(f[1]);
        if (def && f[2] && orch_tool_args(def, f[2], &a, NULL) == FO_OK)
            call(ws, f[1], a);
        cJSON_Delete(a);
        return;
    }
    a = cJSON_CreateObject();
    if (!a)
        abort();
    if (!strcmp(f[0], "write_file") || !strcmp(f[0], "apply_patch")) {
        size_t len;
        char *b = body(in, &len);
        add_str(a, f[0][0] == 'w' ? "content" : "patch", b);
        free(b);
        add_str(a, "path", f[1]);
    } else if (!strcmp(f[0], "search_text")) {
        add_str(a, "pattern", f[1]);
        add_str(a, "path", f[2]);
    } else {
        add_str(a, "path", f[1]);
    }
    call(ws, f[0], a);
    cJSON_Delete(a);
}

/* Before libFuzzer starts its threads: a mount namespace is unshared
 * only by a process of one thread. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (mkdir(wsdir, 0755))
        die(wsdir);
    struct in in = {(const char *)data, (const char *)data + n};
    char *line;
    int entries = 0;
    while ((line = next_line(&in)) && strcmp(line, "%%")) {
        if (strlen(line) > 2 && line[1] == ' ' && strchr("fdlp", line[0])) {
            char *name = line + 2, *arg = strchr(name, ' ');
            if (arg)
                *arg++ = '\0';
            size_t clen = 0;
            char *content = line[0] == 'f' ? body(&in, &clen) : NULL;
            if (entries++ < ENTRIES_MAX)
                make_entry(line[0], name, arg, content, clen);
            free(content);
        }
        free(line);
    }
    free(line);
    int ws = -1;
    if (orch_workspace_open(wsdir, 0, &ws, NULL) != FO_OK)
        abort();
    for (int calls = 0; calls < CALLS_MAX && (line = next_line(&in)); calls++) {
        run_line(ws, line, &in);
        free(line);
    }
    close(ws);
    check_outside();
    int fd = open(wsdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        die(wsdir);
    rm_tree(fd);
    if (rmdir(wsdir))
        die(wsdir);
    return 0;
}
