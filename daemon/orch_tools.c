/* orch_tools: the built-in tools and their workspace (orch_tools.h). */
#include "daemon/orch_tools.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"

#define LIST_MAX 1000   /* entries list_dir shows */
#define MATCHES_MAX 200 /* lines search_text shows */
#define FILES_MAX 20000 /* entries search_text visits (files, dirs) */
#define SEARCH_BYTES_MAX (64u << 20) /* bytes search_text reads */
#define DEPTH_MAX 32                 /* directories search_text descends */
#define LINE_SHOW_MAX 240            /* bytes of a matching line shown */
#define COMMAND_TIMEOUT_MAX_S 600

static const struct orch_tool_def builtins[] = {
    {"read_file",
     "Read a text file of the workspace. Paths are relative to the "
     "workspace.",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
     "\"minLength\":1,\"description\":\"the file, relative to the "
     "workspace\"}},\"required\":[\"path\"],\"additionalProperties\":false}",
     0, 0},
    {"write_file",
     "Write a text file of the workspace (created with its directories, or "
     "replaced).",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
     "\"minLength\":1},\"content\":{\"type\":\"string\"}},\"required\":["
     "\"path\",\"content\"],\"additionalProperties\":false}",
     0, 0},
    {"list_dir",
     "List a directory of the workspace: names, with / after "
     "directories and the size of files.",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
     "\"description\":\"default: the workspace itself\"}},"
     "\"additionalProperties\":false}",
     0, 0},
    {"search_text",
     "Find the lines that contain a text in the files under a directory of "
     "the workspace; prints path:line: text.",
     "{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\","
     "\"minLength\":1},\"path\":{\"type\":\"string\"}},\"required\":["
     "\"pattern\"],\"additionalProperties\":false}",
     0, 0},
    {"apply_patch",
     "Apply a unified diff (--- a/x, +++ b/x, @@ hunks) to files of the "
     "workspace; every hunk must match, or nothing is changed.",
     "{\"type\":\"object\",\"properties\":{\"patch\":{\"type\":\"string\","
     "\"minLength\":1}},\"required\":[\"patch\"],"
     "\"additionalProperties\":false}",
     0, 0},
    {"run_command",
     "Run a program in the workspace, in a sandbox: argv is the program "
     "and its arguments (no shell). Prints the exit code, stdout and "
     "stderr.",
     "{\"type\":\"object\",\"properties\":{\"argv\":{\"type\":\"array\","
     "\"items\":{\"type\":\"string\"},\"minItems\":1},\"timeout_s\":{"
     "\"type\":\"integer\",\"minimum\":1,\"maximum\":600}},\"required\":["
     "\"argv\"],\"additionalProperties\":false}",
     1, 0},
    {"remember",
     "Keep a fact in this run's session (key, value): every later turn of "
     "the session sees it in its context. A key set again is replaced.",
     "{\"type\":\"object\",\"properties\":{\"key\":{\"type\":\"string\","
     "\"minLength\":1,\"maxLength\":128},\"value\":{\"type\":\"string\","
     "\"minLength\":1,\"maxLength\":4096}},\"required\":[\"key\","
     "\"value\"],\"additionalProperties\":false}",
     0, 1},
    {"forget",
     "Forget a fact of this run's session by its key: its text is deleted "
     "from the record and later turns no longer see it.",
     "{\"type\":\"object\",\"properties\":{\"key\":{\"type\":\"string\","
     "\"minLength\":1,\"maxLength\":128}},\"required\":[\"key\"],"
     "\"additionalProperties\":false}",
     0, 1},
};

const struct orch_tool_def *orch_tools_builtin(size_t *n)
{
    *n = sizeof(builtins) / sizeof(builtins[0]);
    return builtins;
}

const struct orch_tool_def *orch_tool_builtin(const char *name)
{
    for (size_t i = 0; name && i < sizeof(builtins) / sizeof(builtins[0]); i++)
        if (!strcmp(builtins[i].name, name))
            return &builtins[i];
    return NULL;
}

/* ---- schemas ------------------------------------------------------------- */

static int type_ok(const char *type, const cJSON *v)
{
    if (!strcmp(type, "string"))
        return cJSON_IsString(v);
    if (!strcmp(type, "boolean"))
        return cJSON_IsBool(v);
    if (!strcmp(type, "object"))
        return cJSON_IsObject(v);
    if (!strcmp(type, "array"))
        return cJSON_IsArray(v);
    if (!strcmp(type, "null"))
        return cJSON_IsNull(v);
    if (!strcmp(type, "number"))
        return cJSON_IsNumber(v);
    if (!strcmp(type, "integer"))
        return cJSON_IsNumber(v) &&
               v->valuedouble == (double)(int64_t)v->valuedouble;
    return 1; /* a type this checker does not know: not judged */
}

static int check_value(const cJSON *s, const cJSON *v, const char *at,
                       struct fo_err *err)
{
    if (!cJSON_IsObject(s))
        return FO_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type) && !type_ok(type->valuestring, v))
        return fo_err_set(err, FO_E_INVALID, "%s: must be %s %s", at,
                          strchr("aeiou", type->valuestring[0]) ? "an" : "a",
                          type->valuestring);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsArray(en)) {
        const cJSON *e;
        int hit = 0;
        cJSON_ArrayForEach (e, en)
            hit |= cJSON_Compare(e, v, 1);
        if (!hit)
            return fo_err_set(err, FO_E_INVALID,
                              "%s: not one of the allowed "
                              "values",
                              at);
    }
    long long lim = 0;
    if (cJSON_IsString(v) &&
        fo_json_get_int(s, "minLength", 0, INT32_MAX, &lim) == FO_OK &&
        strlen(v->valuestring) < (size_t)lim)
        return fo_err_set(err, FO_E_INVALID, "%s: must not be empty", at);
    if (cJSON_IsString(v) &&
        fo_json_get_int(s, "maxLength", 0, INT32_MAX, &lim) == FO_OK &&
        strlen(v->valuestring) > (size_t)lim)
        return fo_err_set(err, FO_E_INVALID, "%s: at most %lld bytes", at, lim);
    if (cJSON_IsNumber(v)) {
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
        if ((cJSON_IsNumber(mn) && v->valuedouble < mn->valuedouble) ||
            (cJSON_IsNumber(mx) && v->valuedouble > mx->valuedouble))
            return fo_err_set(err, FO_E_INVALID, "%s: out of range", at);
    }
    if (cJSON_IsArray(v)) {
        if (fo_json_get_int(s, "minItems", 0, INT32_MAX, &lim) == FO_OK &&
            cJSON_GetArraySize(v) < lim)
            return fo_err_set(err, FO_E_INVALID,
                              "%s: needs at least %lld item%s", at, lim,
                              lim == 1 ? "" : "s");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach (it, v) {
            char sub[160];
            snprintf(sub, sizeof(sub), "%s[%d]", at, i++);
            int rc = check_value(items, it, sub, err);
            if (rc)
                return rc;
        }
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *extra =
            cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        const cJSON *r, *m;
        cJSON_ArrayForEach (r, req)
            if (cJSON_IsString(r) &&
                !cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
                return fo_err_set(err, FO_E_INVALID,
                                  "%s%smissing argument \"%s\"", at,
                                  at[0] ? ": " : "", r->valuestring);
        cJSON_ArrayForEach (m, v) {
            const cJSON *ps =
                cJSON_GetObjectItemCaseSensitive(props, m->string);
            if (!ps) {
                if (cJSON_IsFalse(extra))
                    return fo_err_set(err, FO_E_INVALID,
                                      "%s%sunknown argument \"%s\"", at,
                                      at[0] ? ": " : "", m->string);
                continue;
            }
            char sub[160];
            snprintf(sub, sizeof(sub), "%s%s%s", at, at[0] ? "." : "",
                     m->string);
            int rc = check_value(ps, m, sub, err);
            if (rc)
                return rc;
        }
    }
    return FO_OK;
}

int orch_tool_schema_check(const char *schema, const cJSON *args,
                           struct fo_err *err)
{
    cJSON *s = NULL;
    if (!schema || fo_json_parse(schema, strlen(schema), &s, NULL) != FO_OK)
        return FO_OK; /* no schema (or one we cannot read): not judged */
    int rc = check_value(s, args, "", err);
    cJSON_Delete(s);
    return rc;
}

int orch_tool_args(const struct orch_tool_def *def, const char *text,
                   cJSON **out, struct fo_err *err)
{
    cJSON *a = NULL;
    struct fo_err perr;
    *out = NULL;
    const char *t = text && text[0] ? text : "{}";
    int rc = fo_json_parse(t, strlen(t), &a, &perr);
    if (rc == FO_E_NOMEM)
        return fo_err_set(err, rc, NULL);
    if (rc)
        return fo_err_set(err, FO_E_INVALID,
                          "the arguments are not valid JSON: %s", perr.msg);
    if (!cJSON_IsObject(a)) {
        cJSON_Delete(a);
        return fo_err_set(err, FO_E_INVALID,
                          "the arguments must be a JSON object");
    }
    rc = orch_tool_schema_check(def->schema, a, err);
    if (rc) {
        cJSON_Delete(a);
        return rc;
    }
    *out = a;
    return FO_OK;
}

/* ---- paths beneath the workspace ---------------------------------------- */

static int path_error(int e, const char *path, struct fo_err *err)
{
    if (e == EXDEV || e == ELOOP)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: outside the workspace (absolute paths, .. "
                          "above it and symlinks out of it are refused)",
                          path);
    if (e == ENOENT)
        return fo_err_set(err, FO_E_NOT_FOUND, "%s: no such file or directory",
                          path);
    if (e == ENOSYS)
        return fo_err_set(err, FO_E_IO,
                          "%s: this kernel has no openat2 (Linux 5.6 or later "
                          "is needed for the file tools)",
                          path);
    return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(e));
}

/* Opens path beneath ws, resolved by the kernel. Never blocks: a FIFO or
 * a device opens with O_NONBLOCK (a FIFO with no writer would otherwise
 * hold the open forever) and is then refused; only regular files and
 * directories are opened. */
static int open_beneath(int ws, const char *path, int flags, mode_t mode,
                        int *fd, struct fo_err *err)
{
    int nb = (flags & O_PATH) ? 0 : O_NONBLOCK;
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC | nb),
                           .mode = (flags & O_CREAT) ? mode : 0,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    const char *p = path && path[0] ? path : ".";
    long r;
    do
        r = syscall(SYS_openat2, ws, p, &how, sizeof(how));
    while (r < 0 && errno == EINTR);
    if (r < 0 && errno == ENXIO) /* a FIFO with no reader, a socket */
        return fo_err_set(err, FO_E_INVALID,
                          "%s: not a regular file or directory", p);
    if (r < 0)
        return path_error(errno, p, err);
    struct stat st;
    if (fstat((int)r, &st) != 0 ||
        !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
        close((int)r);
        return fo_err_set(err, FO_E_INVALID,
                          "%s: not a regular file or directory", p);
    }
    *fd = (int)r;
    return FO_OK;
}

int orch_workspace_open(const char *dir, int create, int *fd,
                        struct fo_err *err)
{
    if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
        return fo_err_set(err, FO_E_IO, "workspace %s: %s", dir,
                          strerror(errno));
    int f = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (f < 0)
        return fo_err_set(err, errno == ENOENT ? FO_E_NOT_FOUND : FO_E_IO,
                          "workspace %s: %s", dir, strerror(errno));
    *fd = f;
    return FO_OK;
}

/* Reads fd to its end, at most max bytes (more: FO_E_TOO_LARGE). */
static int read_all(int fd, size_t max, struct fo_buf *b, const char *path,
                    struct fo_err *err)
{
    char chunk[16384];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
        if (n == 0)
            return FO_OK;
        if (b->len + (size_t)n > max)
            return fo_err_set(err, FO_E_TOO_LARGE, "%s: over %zu bytes", path,
                              max);
        if (fo_buf_append(b, chunk, (size_t)n))
            return fo_err_set(err, FO_E_NOMEM, NULL);
    }
}

static int write_all(int fd, const char *s, size_t n, const char *path,
                     struct fo_err *err)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
        s += w;
        n -= (size_t)w;
    }
    return FO_OK;
}

static int read_file_at(int ws, const char *path, struct fo_buf *b,
                        struct fo_err *err)
{
    int fd = -1;
    int rc = open_beneath(ws, path, O_RDONLY, 0, &fd, err);
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = fo_err_set(err, FO_E_INVALID, "%s: not a regular file", path);
    else
        rc = read_all(fd, ORCH_TOOL_FILE_MAX, b, path, err);
    close(fd);
    return rc;
}

/* The directory fd of path's parent (made, with its own parents, when
 * missing) and path's last component. */
static int parent_of(int ws, const char *path, int *dfd, const char **leaf,
                     struct fo_err *err)
{
    const char *slash = strrchr(path, '/');
    *leaf = slash ? slash + 1 : path;
    if (!**leaf || !strcmp(*leaf, ".") || !strcmp(*leaf, ".."))
        return fo_err_set(err, FO_E_INVALID, "%s: not a file name", path);
    size_t plen = slash ? (size_t)(slash - path) : 0;
    char *dir = malloc(plen + 2);
    if (!dir)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    memcpy(dir, path, plen);
    dir[plen] = '\0';
    int rc = FO_OK;
    /* each missing directory is made by name in its parent, opened beneath
     * the workspace: a symlink on the way is followed only inside it */
    for (size_t i = 0; i <= plen && !rc; i++) {
        if (i < plen && dir[i] != '/')
            continue;
        char save = dir[i];
        dir[i] = '\0';
        int f = -1;
        if (dir[0]) {
            rc = open_beneath(ws, dir, O_PATH | O_DIRECTORY, 0, &f, err);
            if (rc == FO_E_NOT_FOUND) {
                char *last = strrchr(dir, '/');
                const char *name = last ? last + 1 : dir;
                int pf = -1;
                if (last)
                    *last = '\0';
                rc = open_beneath(ws, last ? dir : ".", O_PATH | O_DIRECTORY, 0,
                                  &pf, err);
                if (last)
                    *last = '/';
                if (!rc && mkdirat(pf, name, 0755) != 0 && errno != EEXIST)
                    rc = fo_err_set(err, FO_E_IO, "%s: %s", dir,
                                    strerror(errno));
                if (pf >= 0)
                    close(pf);
                if (!rc)
                    rc =
                        open_beneath(ws, dir, O_PATH | O_DIRECTORY, 0, &f, err);
            }
            if (f >= 0)
                close(f);
        }
        dir[i] = save;
    }
    if (!rc)
        rc = open_beneath(ws, dir, O_PATH | O_DIRECTORY, 0, dfd, err);
    free(dir);
    return rc;
}

static int write_file_at(int ws, const char *path, const char *s, size_t n,
                         struct fo_err *err)
{
    if (n > ORCH_TOOL_FILE_MAX)
        return fo_err_set(err, FO_E_INVALID, "%s: content over %u bytes", path,
                          ORCH_TOOL_FILE_MAX);
    int dfd = -1, fd = -1;
    const char *leaf;
    int rc = parent_of(ws, path, &dfd, &leaf, err);
    if (rc)
        return rc;
    close(dfd);
    /* the file itself is opened beneath the workspace too: a symlink
     * planted in its place resolves out and is refused */
    rc = open_beneath(ws, path, O_WRONLY | O_CREAT, 0644, &fd, err);
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = fo_err_set(err, FO_E_INVALID, "%s: not a regular file", path);
    else if (ftruncate(fd, 0) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    else
        rc = write_all(fd, s, n, path, err);
    if (close(fd) != 0 && !rc)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    return rc;
}

/* ---- the file tools ------------------------------------------------------ */

static const char *arg_str(const cJSON *args, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_dir(int ws, const char *path, struct fo_buf *out,
                    struct fo_err *err)
{
    int fd = -1;
    int rc = open_beneath(ws, path, O_RDONLY | O_DIRECTORY, 0, &fd, err);
    if (rc)
        return rc;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return fo_err_set(err, FO_E_IO, "%s: %s", path ? path : ".",
                          strerror(errno));
    }
    char **names = NULL;
    size_t n = 0, cap = 0, more = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == LIST_MAX) {
            more++;
            continue;
        }
        struct stat st;
        char line[NAME_MAX + 64];
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            snprintf(line, sizeof(line), "%s/", de->d_name);
        else if (S_ISLNK(st.st_mode))
            snprintf(line, sizeof(line), "%s@", de->d_name);
        else
            snprintf(line, sizeof(line), "%s\t%lld", de->d_name,
                     (long long)st.st_size);
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = realloc(names, nc * sizeof(*nn));
            if (!nn) {
                rc = fo_err_set(err, FO_E_NOMEM, NULL);
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = orch_strdup(line))) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            break;
        }
        n++;
    }
    closedir(d);
    if (!rc) {
        if (n) /* qsort wants an array, even of none */
            qsort(names, n, sizeof(*names), cmp_names);
        for (size_t i = 0; i < n && !rc; i++)
            rc = fo_buf_printf(out, "%s\n", names[i]);
        if (!rc && more)
            rc = fo_buf_printf(out, "[and %zu more]\n", more);
        if (!rc && n == 0)
            rc = fo_buf_puts(out, "(empty)\n");
        if (rc)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* ---- budgets ------------------------------------------------------------ */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* FO_E_TIMEOUT once the budget's time is up or the call was cancelled. */
static int budget_check(const struct orch_tool_budget *b, const char *tool,
                        struct fo_err *err)
{
    if (!b)
        return FO_OK;
    if (b->cancel && atomic_load(b->cancel))
        return fo_err_set(err, FO_E_TIMEOUT, "%s: cancelled", tool);
    if (b->deadline_ms && now_ms() >= b->deadline_ms)
        return fo_err_set(err, FO_E_TIMEOUT,
                          "%s: stopped at its time limit (%d s); ask for "
                          "less (a narrower path, a smaller patch)",
                          tool, ORCH_TOOL_TIME_MS / 1000);
    return FO_OK;
}

struct search {
    const char *pattern;
    size_t plen;
    size_t matches, files, entries, more;
    uint64_t bytes; /* read so far, against SEARCH_BYTES_MAX */
    int stopped;    /* a limit ended the walk: said in the output */
    struct fo_buf *out;
    const struct orch_tool_budget *budget;
    struct fo_err *err;
};

static int search_file(struct search *s, int fd, const char *rel)
{
    struct fo_buf b;
    struct fo_err ignore;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = read_all(fd, ORCH_TOOL_FILE_MAX, &b, rel, &ignore);
    s->bytes += b.len;
    if (rc == FO_E_NOMEM) {
        fo_buf_release(&b);
        return rc;
    }
    /* big, binary or empty (an empty one has no buffer: no pointer
     * arithmetic on it) */
    if (rc || !b.len || memchr(b.data, '\0', b.len)) {
        fo_buf_release(&b);
        return FO_OK;
    }
    const char *p = b.data, *end = b.data + b.len;
    size_t line = 1;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (memmem(p, (size_t)(le - p), s->pattern, s->plen)) {
            if (s->matches == MATCHES_MAX) {
                s->more++;
            } else {
                size_t n = orch_utf8_prefix(p, (size_t)(le - p), LINE_SHOW_MAX);
                if (fo_buf_printf(s->out, "%s:%zu: %.*s\n", rel, line, (int)n,
                                  p)) {
                    fo_buf_release(&b);
                    return FO_E_NOMEM;
                }
                s->matches++;
            }
        }
        line++;
        p = nl ? nl + 1 : NULL;
    }
    fo_buf_release(&b);
    return FO_OK;
}

/* Walks the directory dfd (taken) as rel; symlinks are never followed. */
static int search_dir(struct search *s, int dfd, const char *rel, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return FO_OK;
    }
    int rc = FO_OK;
    struct dirent *de;
    while (!rc && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            !strcmp(de->d_name, ".git"))
            continue;
        /* every entry counts (directories too), and the bytes read, and
         * the time: a tree built to be slow ends the walk, not the loop */
        if (s->entries >= FILES_MAX || s->bytes >= SEARCH_BYTES_MAX) {
            s->stopped = 1;
            break;
        }
        if ((s->entries & 63) == 0 &&
            budget_check(s->budget, "search_text", s->err)) {
            rc = s->err->code;
            break;
        }
        s->entries++;
        char sub[4096];
        int w = snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "",
                         de->d_name);
        if (w < 0 || (size_t)w >= sizeof(sub))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < DEPTH_MAX) {
            int f = openat(dirfd(d), de->d_name,
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (f >= 0)
                rc = search_dir(s, f, sub, depth + 1);
        } else if (S_ISREG(st.st_mode) && st.st_size <= ORCH_TOOL_FILE_MAX) {
            int f = openat(dirfd(d), de->d_name,
                           O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            struct stat fs;
            if (f >= 0 && fstat(f, &fs) == 0 && S_ISREG(fs.st_mode)) {
                s->files++;
                rc = search_file(s, f, sub);
            }
            if (f >= 0)
                close(f);
        }
    }
    closedir(d);
    return rc;
}

static int search_text(int ws, const cJSON *args, struct fo_buf *out,
                       const struct orch_tool_budget *budget,
                       struct fo_err *err)
{
    const char *path = arg_str(args, "path");
    struct search s = {.pattern = arg_str(args, "pattern"),
                       .out = out,
                       .budget = budget,
                       .err = err};
    s.plen = strlen(s.pattern);
    int fd = -1;
    int rc = open_beneath(ws, path, O_RDONLY | O_DIRECTORY, 0, &fd, err);
    if (rc)
        return rc;
    const char *rel = path && path[0] && strcmp(path, ".") ? path : "";
    rc = search_dir(&s, fd, rel, 0);
    if (rc && rc != FO_E_NOMEM)
        return rc; /* the time limit or a cancel: err says which */
    if (!rc && s.more)
        rc = fo_buf_printf(out, "[and %zu more matching lines]\n", s.more);
    if (!rc && s.stopped)
        rc = fo_buf_printf(out,
                           "[search stopped after %zu entries and %llu MiB "
                           "read: search a narrower path]\n",
                           s.entries, (unsigned long long)(s.bytes >> 20));
    if (!rc && s.matches == 0)
        rc = fo_buf_printf(out, "no line contains \"%s\" (%zu files read)\n",
                           s.pattern, s.files);
    return rc ? fo_err_set(err, FO_E_NOMEM, NULL) : FO_OK;
}

/* ---- apply_patch ----------------------------------------------------------
 */

struct line {
    const char *s;
    size_t n; /* without its newline */
    int nl;   /* ends with a newline */
};

struct lines {
    struct line *v;
    size_t n, cap;
};

static int lines_add(struct lines *l, const char *s, size_t n, int nl)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        struct line *nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv)
            return FO_E_NOMEM;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = (struct line){s, n, nl};
    return FO_OK;
}

static int split_lines(const char *s, size_t len, struct lines *l)
{
    const char *p = s, *end = s + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (lines_add(l, p, n, nl != NULL))
            return FO_E_NOMEM;
        p = nl ? nl + 1 : end;
    }
    return FO_OK;
}

/* One file of a patch: its path (NULL for /dev/null on that side) and its
 * hunks' lines, from the patch text. */
struct pfile {
    char *old_path, *new_path;
    size_t first, last; /* its lines in the patch: [first, last) */
};

static char *patch_path(const char *s, size_t n)
{
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    const char *tab = memchr(s, '\t', n);
    if (tab)
        n = (size_t)(tab - s);
    if (n == 9 && !memcmp(s, "/dev/null", 9))
        return NULL;
    if (n > 2 && (s[0] == 'a' || s[0] == 'b') && s[1] == '/') {
        s += 2;
        n -= 2;
    }
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static int hunk_header(const struct line *l, long *a, long *b, long *c, long *d)
{
    char buf[128];
    size_t n = l->n < sizeof(buf) - 1 ? l->n : sizeof(buf) - 1;
    memcpy(buf, l->s, n);
    buf[n] = '\0';
    *b = *d = 1;
    if (sscanf(buf, "@@ -%ld,%ld +%ld,%ld @@", a, b, c, d) == 4)
        return 0;
    *b = *d = 1;
    if (sscanf(buf, "@@ -%ld +%ld,%ld @@", a, c, d) == 3)
        return 0;
    if (sscanf(buf, "@@ -%ld,%ld +%ld @@", a, b, c) == 3)
        return 0;
    if (sscanf(buf, "@@ -%ld +%ld @@", a, c) == 2)
        return 0;
    return -1;
}

/* A line as compared: its text without one trailing CR (a CRLF file
 * matches an LF patch), and a hash of that text. */
struct key {
    const char *s;
    size_t n;
    uint64_t h;
};

static struct key key_of(const char *s, size_t n)
{
    if (n && s[n - 1] == '\r')
        n--;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (struct key){s, n, h ^ n};
}

static int key_eq(const struct key *a, const struct key *b)
{
    return a->h == b->h && a->n == b->n && !memcmp(a->s, b->s, a->n);
}

/* The start in t[from..nt) of an occurrence of p[0..np) nearest to want
 * (ties: the later one), or -1. Knuth-Morris-Pratt over lines: linear in
 * nt + np, however the hunk and the file were built to collide. fail is
 * scratch of np entries. */
static long find_nearest(const struct key *t, size_t nt, size_t from,
                         const struct key *p, size_t np, size_t want,
                         size_t *fail)
{
    if (np == 0) /* a hunk of additions only: at the stated line */
        return want >= from && want <= nt ? (long)want
               : from <= nt               ? (long)from
                                          : -1;
    fail[0] = 0;
    for (size_t i = 1, k = 0; i < np; i++) {
        while (k && !key_eq(&p[i], &p[k]))
            k = fail[k - 1];
        if (key_eq(&p[i], &p[k]))
            k++;
        fail[i] = k;
    }
    long best = -1;
    size_t best_d = SIZE_MAX;
    for (size_t i = from, k = 0; i < nt; i++) {
        while (k && !key_eq(&t[i], &p[k]))
            k = fail[k - 1];
        if (key_eq(&t[i], &p[k]))
            k++;
        if (k == np) {
            size_t start = i + 1 - np;
            size_t d = start > want ? start - want : want - start;
            if (d <= best_d) {
                best = (long)start;
                best_d = d;
            }
            k = fail[k - 1];
        }
    }
    return best;
}

static int hunks_apply(const struct lines *pl, const struct pfile *f,
                       const struct lines *old, const struct key *okeys,
                       struct key *pkeys, size_t *fail, struct fo_buf *out,
                       const struct orch_tool_budget *budget,
                       struct fo_err *err);

/* Applies the hunks of f (patch lines pl) to the old file's lines; the new
 * content goes to out. */
static int apply_hunks(const struct lines *pl, const struct pfile *f,
                       const struct lines *old, struct fo_buf *out,
                       const struct orch_tool_budget *budget,
                       struct fo_err *err)
{
    /* the old file's keys once; a hunk's keys and KMP table in scratch as
     * large as the file's part of the patch */
    size_t span = f->last - f->first + 1;
    struct key *okeys = malloc((old->n + 1) * sizeof(*okeys));
    struct key *pkeys = malloc(span * sizeof(*pkeys));
    size_t *fail = malloc(span * sizeof(*fail));
    int rc = okeys && pkeys && fail ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < old->n; i++)
        okeys[i] = key_of(old->v[i].s, old->v[i].n);
    if (!rc)
        rc = hunks_apply(pl, f, old, okeys, pkeys, fail, out, budget, err);
    free(okeys);
    free(pkeys);
    free(fail);
    return rc;
}

static int hunks_apply(const struct lines *pl, const struct pfile *f,
                       const struct lines *old, const struct key *okeys,
                       struct key *pkeys, size_t *fail, struct fo_buf *out,
                       const struct orch_tool_budget *budget,
                       struct fo_err *err)
{
    size_t at = 0; /* old lines copied so far */
    int hunk = 0;
    const char *name = f->new_path ? f->new_path : f->old_path;
    for (size_t i = f->first; i < f->last;) {
        long a, b, c, d;
        if (hunk_header(&pl->v[i], &a, &b, &c, &d) != 0) {
            i++;
            continue;
        }
        hunk++;
        int brc = budget_check(budget, "apply_patch", err);
        if (brc)
            return brc;
        size_t h0 = ++i, h1 = h0;
        size_t n_old = 0;
        /* an empty line is an empty context line (editors and models
         * strip the space), within the hunk as at its end */
        while (h1 < f->last &&
               (pl->v[h1].n == 0 ||
                (pl->v[h1].s[0] != '\0' && strchr(" -+\\", pl->v[h1].s[0]))))
            h1++;
        for (size_t k = h0; k < h1; k++)
            if (pl->v[k].n == 0 || pl->v[k].s[0] == ' ' || pl->v[k].s[0] == '-')
                n_old++;
        /* where the old lines are: at the stated line, else the nearest
         * place after the last hunk */
        size_t want = a > 0 ? (size_t)a - 1 : 0;
        size_t np = 0;
        for (size_t k = h0; k < h1; k++) {
            const struct line *pk = &pl->v[k];
            if (pk->n && (pk->s[0] == '+' || pk->s[0] == '\\'))
                continue;
            pkeys[np++] = key_of(pk->n ? pk->s + 1 : "", pk->n ? pk->n - 1 : 0);
        }
        long found = find_nearest(okeys, old->n, at, pkeys, np, want, fail);
        if (found < 0)
            return fo_err_set(err, FO_E_INVALID,
                              "%s: hunk %d (@@ -%ld) does not match the file; "
                              "nothing was changed",
                              name, hunk, a);
        for (; at < (size_t)found; at++)
            if (fo_buf_append(out, old->v[at].s, old->v[at].n) ||
                (old->v[at].nl && fo_buf_putc(out, '\n')))
                return fo_err_set(err, FO_E_NOMEM, NULL);
        for (size_t k = h0; k < h1; k++) {
            const struct line *pk = &pl->v[k];
            char t = pk->n ? pk->s[0] : ' ';
            int no_nl =
                k + 1 < h1 && pl->v[k + 1].n && pl->v[k + 1].s[0] == '\\';
            if (t == '-') {
                at++;
                continue;
            }
            if (t == '\\')
                continue;
            if (fo_buf_append(out, pk->n ? pk->s + 1 : "",
                              pk->n ? pk->n - 1 : 0) ||
                (!no_nl && fo_buf_putc(out, '\n')))
                return fo_err_set(err, FO_E_NOMEM, NULL);
            if (t == ' ')
                at++;
        }
        i = h1;
    }
    for (; at < old->n; at++)
        if (fo_buf_append(out, old->v[at].s, old->v[at].n) ||
            (old->v[at].nl && fo_buf_putc(out, '\n')))
            return fo_err_set(err, FO_E_NOMEM, NULL);
    return FO_OK;
}

/* What a file of a patch will change, checked before anything is: the
 * path written (or deleted), whether a file is there and its content (to
 * put back), and how much of its directory exists (the rest is made). */
struct target {
    const char *path;
    int del;
    int existed;
    dev_t dev;
    ino_t ino;
    size_t made; /* path bytes whose directories exist; SIZE_MAX: all */
    struct fo_buf was;
    int touched; /* a write or delete was attempted */
};

/* FO_OK when nothing is at path (whose directory exists), not even a
 * symlink to nothing: a write through one would fail or land elsewhere. */
static int absent(int ws, const char *path, struct fo_err *err)
{
    int fd = -1;
    int rc = open_beneath(ws, path, O_PATH | O_NOFOLLOW, 0, &fd, err);
    if (fd >= 0)
        close(fd);
    if (rc == FO_E_NOT_FOUND)
        return FO_OK;
    return fo_err_set(err, FO_E_INVALID,
                      "%s: a symlink to nothing; patch the file it names",
                      path);
}

/* Fills t for path without changing anything: every directory on the
 * path that exists is a directory beneath the workspace, the file is
 * absent or a regular file, and no ".." is in the path (one after a
 * directory still to make would climb from it). */
static int target_check(int ws, struct target *t, struct fo_err *err)
{
    const char *path = t->path, *leaf = strrchr(path, '/');
    leaf = leaf ? leaf + 1 : path;
    if (!*leaf || !strcmp(leaf, "."))
        return fo_err_set(err, FO_E_INVALID, "%s: not a file name", path);
    for (const char *q = path; *q; q++)
        if (q[0] == '.' && q[1] == '.' && (q == path || q[-1] == '/') &&
            (q[2] == '/' || !q[2]))
            return fo_err_set(err, FO_E_INVALID,
                              "%s: a path in a patch may not hold \"..\"",
                              path);
    char *p = orch_strdup(path);
    if (!p)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    t->made = SIZE_MAX;
    for (size_t i = 1; p[i] && !rc && t->made == SIZE_MAX; i++) {
        if (p[i] != '/')
            continue;
        int fd = -1;
        p[i] = '\0';
        rc = open_beneath(ws, p, O_PATH | O_DIRECTORY, 0, &fd, err);
        if (rc == FO_E_NOT_FOUND && !(rc = absent(ws, p, err)))
            t->made = i; /* made from here on */
        p[i] = '/';
        if (fd >= 0)
            close(fd);
    }
    free(p);
    int fd = -1;
    if (!rc && t->made == SIZE_MAX) {
        rc = open_beneath(ws, path, O_PATH, 0, &fd, err);
        if (rc == FO_E_NOT_FOUND)
            rc = absent(ws, path, err);
    }
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)))
        rc = fo_err_set(err, FO_E_INVALID, "%s: not a regular file", path);
    else if (fd >= 0) {
        t->existed = 1;
        t->dev = st.st_dev;
        t->ino = st.st_ino;
        rc = read_file_at(ws, path, &t->was, err);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Removes the directories a write made on t's path (deepest first). */
static void target_undo_dirs(int ws, const struct target *t)
{
    if (t->made == SIZE_MAX)
        return;
    char *p = orch_strdup(t->path);
    char *slash;
    while (p && (slash = strrchr(p, '/')) && (size_t)(slash - p) >= t->made) {
        *slash = '\0';
        int dfd = -1;
        const char *leaf;
        struct fo_err ignore;
        if (parent_of(ws, p, &dfd, &leaf, &ignore) == FO_OK)
            unlinkat(dfd, leaf, AT_REMOVEDIR);
        if (dfd >= 0)
            close(dfd);
    }
    free(p);
}

/* Puts back what t was before a write or delete was attempted. */
static void target_undo(int ws, struct target *t)
{
    struct fo_err ignore;
    if (t->existed) {
        write_file_at(ws, t->path, t->was.data ? t->was.data : "", t->was.len,
                      &ignore);
        return;
    }
    int dfd = -1;
    const char *leaf;
    if (parent_of(ws, t->path, &dfd, &leaf, &ignore) == FO_OK)
        unlinkat(dfd, leaf, 0);
    if (dfd >= 0)
        close(dfd);
    target_undo_dirs(ws, t);
}

static int target_do(int ws, struct target *t, const struct fo_buf *content,
                     struct fo_buf *out, struct fo_err *err)
{
    t->touched = 1;
    if (!t->del) {
        int rc = write_file_at(ws, t->path, content->data ? content->data : "",
                               content->len, err);
        return rc ? rc : fo_buf_printf(out, "patched %s\n", t->path);
    }
    int dfd = -1;
    const char *leaf;
    int rc = parent_of(ws, t->path, &dfd, &leaf, err);
    if (!rc && unlinkat(dfd, leaf, 0) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", t->path, strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc ? rc : fo_buf_printf(out, "deleted %s\n", t->path);
}

/* Writes (and deletes) the files of a patch whose hunks all matched: each
 * target is checked first (a name twice, a directory, a FIFO, a path out
 * of the workspace refuse the patch before anything changed), and a write
 * that still fails (a full disk) puts back the files written before it. */
static int patch_commit(int ws, const struct pfile *files, size_t nf,
                        const struct fo_buf *news, struct fo_buf *out,
                        struct fo_err *err)
{
    struct target *t = calloc(nf, sizeof(*t));
    if (!t)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    for (size_t f = 0; f < nf; f++)
        fo_buf_init(&t[f].was, ORCH_TOOL_FILE_MAX);
    for (size_t f = 0; f < nf && !rc; f++) {
        t[f].del = !files[f].new_path;
        t[f].path = t[f].del ? files[f].old_path : files[f].new_path;
        rc = target_check(ws, &t[f], err);
        for (size_t g = 0; g < f && !rc; g++) {
            const char *o = files[g].old_path, *fo = files[f].old_path;
            if (!strcmp(t[g].path, t[f].path) || (o && !strcmp(o, t[f].path)) ||
                (fo && !strcmp(fo, t[g].path)) ||
                (t[f].existed && t[g].existed && t[g].dev == t[f].dev &&
                 t[g].ino == t[f].ino))
                rc = fo_err_set(err, FO_E_INVALID,
                                "%s: in the patch twice; put all of a file's "
                                "hunks under one --- +++ header; nothing was "
                                "changed",
                                t[f].path);
        }
    }
    size_t done = 0;
    for (; !rc && done < nf; done++) {
        rc = target_do(ws, &t[done], &news[done], out, err);
        if (rc == FO_E_NOMEM)
            fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (rc && done) { /* put back what was written before the failure */
        for (size_t f = nf; f-- > 0;)
            if (t[f].touched)
                target_undo(ws, &t[f]);
        fo_err_prefix(err, "nothing was changed");
    }
    for (size_t f = 0; f < nf; f++)
        fo_buf_release(&t[f].was);
    free(t);
    return rc;
}

static int apply_patch(int ws, const char *patch, struct fo_buf *out,
                       const struct orch_tool_budget *budget,
                       struct fo_err *err)
{
    struct lines pl = {0};
    struct pfile *files = NULL;
    size_t nf = 0;
    struct fo_buf *news = NULL;
    int rc = split_lines(patch, strlen(patch), &pl);
    if (rc) {
        rc = fo_err_set(err, rc, NULL);
        goto out;
    }
    for (size_t i = 0; i + 1 < pl.n; i++) {
        const struct line *l = &pl.v[i], *m = &pl.v[i + 1];
        if (l->n < 4 || memcmp(l->s, "--- ", 4) || m->n < 4 ||
            memcmp(m->s, "+++ ", 4))
            continue;
        struct pfile *nfv = realloc(files, (nf + 1) * sizeof(*nfv));
        if (!nfv) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto out;
        }
        files = nfv;
        files[nf] = (struct pfile){patch_path(l->s + 4, l->n - 4),
                                   patch_path(m->s + 4, m->n - 4), i + 2, pl.n};
        if (nf)
            files[nf - 1].last = i;
        nf++;
        i++;
    }
    if (!nf) {
        rc = fo_err_set(err, FO_E_INVALID,
                        "no file in the patch: a unified diff has --- and "
                        "+++ lines, then @@ hunks");
        goto out;
    }
    news = calloc(nf, sizeof(*news));
    if (!news) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    /* every hunk is checked before any file is written */
    for (size_t f = 0; f < nf && !rc; f++) {
        struct fo_buf oldb;
        struct lines ol = {0};
        fo_buf_init(&oldb, FO_BUF_UNLIMITED);
        fo_buf_init(&news[f], ORCH_TOOL_FILE_MAX);
        if (!files[f].old_path && !files[f].new_path)
            rc = fo_err_set(err, FO_E_INVALID,
                            "a file of the patch is /dev/null on both sides");
        if (!rc && files[f].old_path)
            rc = read_file_at(ws, files[f].old_path, &oldb, err);
        if (!rc && split_lines(oldb.data ? oldb.data : "", oldb.len, &ol))
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        if (!rc)
            rc = apply_hunks(&pl, &files[f], &ol, &news[f], budget, err);
        free(ol.v);
        fo_buf_release(&oldb);
    }
    if (!rc)
        rc = patch_commit(ws, files, nf, news, out, err);
out:
    for (size_t f = 0; f < nf; f++) {
        free(files[f].old_path);
        free(files[f].new_path);
        if (news)
            fo_buf_release(&news[f]);
    }
    free(files);
    free(news);
    free(pl.v);
    return rc;
}

/* ---- dispatch --------------------------------------------------------------
 */

int orch_tool_run_file(int ws, const char *tool, const cJSON *args,
                       const struct orch_tool_budget *budget,
                       struct fo_buf *out, struct fo_err *err)
{
    struct fo_buf raw;
    fo_buf_init(&raw, FO_BUF_UNLIMITED);
    int rc;
    if (!strcmp(tool, "read_file")) {
        rc = read_file_at(ws, arg_str(args, "path"), &raw, err);
    } else if (!strcmp(tool, "write_file")) {
        const char *c = arg_str(args, "content"), *p = arg_str(args, "path");
        rc = write_file_at(ws, p, c, strlen(c), err);
        if (!rc && fo_buf_printf(&raw, "wrote %zu bytes to %s\n", strlen(c), p))
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    } else if (!strcmp(tool, "list_dir")) {
        rc = list_dir(ws, arg_str(args, "path"), &raw, err);
    } else if (!strcmp(tool, "search_text")) {
        rc = search_text(ws, args, &raw, budget, err);
    } else if (!strcmp(tool, "apply_patch")) {
        rc = apply_patch(ws, arg_str(args, "patch"), &raw, budget, err);
    } else {
        rc = fo_err_set(err, FO_E_INVALID, "%s: not a file tool", tool);
    }
    if (!rc) {
        struct fo_buf clean;
        fo_buf_init(&clean, FO_BUF_UNLIMITED);
        rc = orch_utf8_clean(raw.data ? raw.data : "", raw.len, &clean);
        size_t n = rc ? 0
                      : orch_utf8_prefix(clean.data ? clean.data : "",
                                         clean.len, ORCH_TOOL_OUTPUT_MAX);
        if (!rc && fo_buf_append(out, clean.data ? clean.data : "", n))
            rc = FO_E_NOMEM;
        if (!rc && n < clean.len &&
            fo_buf_printf(out, "\n[forum: cut at %zu of %zu bytes]", n,
                          clean.len))
            rc = FO_E_NOMEM;
        fo_buf_release(&clean);
        if (rc)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    fo_buf_release(&raw);
    return rc;
}

int orch_tool_command_argv(const cJSON *args, const char ***argv,
                           int *timeout_ms, struct fo_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, "argv");
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n < 1)
        return fo_err_set(err, FO_E_INVALID, "argv: needs the program");
    const char **v = calloc((size_t)n + 1, sizeof(*v));
    if (!v)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach (it, a) {
        if (!cJSON_IsString(it) || (i == 0 && !it->valuestring[0])) {
            free(v);
            return fo_err_set(err, FO_E_INVALID,
                              "argv[%d]: must be a non-empty string", i);
        }
        v[i++] = it->valuestring;
    }
    long long t = 0;
    *timeout_ms = fo_json_get_int(args, "timeout_s", 1, COMMAND_TIMEOUT_MAX_S,
                                  &t) == FO_OK
                      ? (int)t * 1000
                      : 0;
    *argv = v;
    return FO_OK;
}
