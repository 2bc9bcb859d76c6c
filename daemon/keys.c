/* keys: the client keys' file and the daemon's store of them (keys.h). */
#include "daemon/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"

#define WINDOW_US 60000000ll

struct keys {
    char dir[FO_DIR_MAX + 1];
    struct keys_key *v;
    size_t n;
    int ifd; /* inotify on the dir, or -1 */
    int watching;
    int dirty;        /* read the file at the next refresh */
    struct stat seen; /* the file as last read (without inotify) */
    unsigned long long reload_errors;
};

int keys_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > KEYS_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return 0;
    }
    return 1;
}

static int path_of(const char *dir, const char *name, char *out, size_t cap,
                   struct fo_err *err)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", dir);
    return FO_OK;
}

/* ---- the file ----------------------------------------------------------- */

/* DIR/keys.json's bytes into b (empty when absent); *st its stat. Never
 * blocks on a FIFO or follows a link; refuses what is not a private
 * regular file. */
static int file_read(const char *dir, struct fo_buf *b, struct stat *st,
                     struct fo_err *err)
{
    char p[4096];
    int rc = path_of(dir, KEYS_FILE, p, sizeof(p), err);
    if (rc)
        return rc;
    memset(st, 0, sizeof(*st));
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return FO_OK;
    if (fd < 0)
        return fo_err_set(err, FO_E_INVALID, "%s: %s", p, strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode))
        rc = fo_err_set(err, FO_E_INVALID, "%s: not a regular file", p);
    else if (st->st_size > (off_t)KEYS_FILE_MAX)
        rc = fo_err_set(err, FO_E_INVALID, "%s: over %u bytes", p,
                        KEYS_FILE_MAX);
    if (!rc)
        rc = fo_file_check_private(fd, p, err);
    char buf[8192];
    while (!rc) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = fo_err_set(err, FO_E_IO, "%s: %s", p, strerror(errno));
        else if (r == 0)
            break;
        else if (fo_buf_append(b, buf, (size_t)r) != 0)
            rc = fo_err_set(err, FO_E_INVALID, "%s: over %u bytes", p,
                            KEYS_FILE_MAX);
    }
    close(fd);
    return rc;
}

/* The file's "keys" array (a new document {"keys": []} when absent). */
static int file_json(const char *dir, cJSON **out, struct stat *st,
                     struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, KEYS_FILE_MAX);
    int rc = file_read(dir, &b, st, err);
    cJSON *j = NULL;
    if (!rc && b.len == 0) {
        j = cJSON_CreateObject();
        if (!j || !cJSON_AddArrayToObject(j, "keys"))
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    } else if (!rc) {
        rc = fo_json_parse(b.data, b.len, &j, err);
        if (!rc && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "keys")))
            rc = fo_err_set(err, FO_E_INVALID,
                            "%s/" KEYS_FILE ": no \"keys\" array", dir);
    }
    fo_buf_release(&b);
    if (rc) {
        cJSON_Delete(j);
        return rc;
    }
    *out = j;
    return FO_OK;
}

static void key_release(struct keys_key *k)
{
    for (size_t i = 0; i < k->n_models; i++)
        free(k->models[i]);
    free(k->models);
    free(k->ring);
    memset(k, 0, sizeof(*k));
}

static int get_limit(const cJSON *o, const char *name, long long max,
                     long long *out, struct fo_err *err)
{
    *out = 0;
    int rc = fo_json_get_int(o, name, 1, max, out);
    if (rc == FO_E_NOT_FOUND)
        return FO_OK;
    if (rc)
        return fo_err_set(err, FO_E_INVALID, "\"%s\": 1 to %lld", name, max);
    return FO_OK;
}

/* One member of the "keys" array into k (released by the caller). */
static int key_parse(const cJSON *o, struct keys_key *k, struct fo_err *err)
{
    static const char *const fields[] = {
        "name",       "sha256", "created_us", "revoked_us", "max_calls",
        "max_tokens", "rpm",    "models",     "forge"};
    memset(k, 0, sizeof(*k));
    if (!cJSON_IsObject(o))
        return fo_err_set(err, FO_E_INVALID, "a key is not an object");
    int rc = fo_json_only_keys(o, fields, 9, err);
    if (rc)
        return rc;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "sha256");
    if (!cJSON_IsString(n) || !keys_name_valid(n->valuestring))
        return fo_err_set(err, FO_E_INVALID, "a key without a valid name");
    snprintf(k->name, sizeof(k->name), "%s", n->valuestring);
    if (!cJSON_IsString(h) || strlen(h->valuestring) != 64 ||
        fo_unhex(h->valuestring, k->sha256, 32) != 0)
        return fo_err_set(err, FO_E_INVALID, "key %s: bad sha256", k->name);
    long long c = 0, r = 0;
    if (fo_json_get_int(o, "created_us", 0, INT64_MAX, &c) != FO_OK)
        return fo_err_set(err, FO_E_INVALID, "key %s: bad created_us", k->name);
    int rr = fo_json_get_int(o, "revoked_us", 1, INT64_MAX, &r);
    if (rr && rr != FO_E_NOT_FOUND)
        return fo_err_set(err, FO_E_INVALID, "key %s: bad revoked_us", k->name);
    k->created_us = c;
    k->revoked_us = r;
    if ((rc = get_limit(o, "max_calls", 1ll << 53, &k->max_calls, err)) ||
        (rc = get_limit(o, "max_tokens", 1ll << 53, &k->max_tokens, err)) ||
        (rc = get_limit(o, "rpm", KEYS_RPM_MAX, &k->rpm, err))) {
        fo_err_prefix(err, "key %s", k->name);
        return rc;
    }
    const cJSON *fg = cJSON_GetObjectItemCaseSensitive(o, "forge");
    if (fg && !cJSON_IsBool(fg))
        return fo_err_set(err, FO_E_INVALID, "key %s: \"forge\": a boolean",
                          k->name);
    k->forge = cJSON_IsTrue(fg);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "models"), *m;
    if (!ms)
        return FO_OK;
    int nm = cJSON_GetArraySize(ms);
    if (!cJSON_IsArray(ms) || nm < 1 || nm > KEYS_MODELS_MAX)
        return fo_err_set(err, FO_E_INVALID, "key %s: \"models\": 1 to %d",
                          k->name, KEYS_MODELS_MAX);
    k->models = calloc((size_t)nm, sizeof(char *));
    if (!k->models)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON_ArrayForEach (m, ms) {
        if (!cJSON_IsString(m) || !m->valuestring[0] ||
            strlen(m->valuestring) > KEYS_MODEL_MAX)
            return fo_err_set(err, FO_E_INVALID, "key %s: a bad model name",
                              k->name);
        if (!(k->models[k->n_models++] = strdup(m->valuestring)))
            return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

/* The whole array into v[*n] (malloc'd); names must be unique. */
static int keys_parse(const cJSON *doc, struct keys_key **v, size_t *n,
                      struct fo_err *err)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, "keys"), *o;
    int cnt = cJSON_GetArraySize(arr);
    if (cnt > KEYS_MAX)
        return fo_err_set(err, FO_E_INVALID, "over %d keys", KEYS_MAX);
    struct keys_key *a = calloc(cnt ? (size_t)cnt : 1, sizeof(*a));
    if (!a)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    size_t i = 0;
    int rc = FO_OK;
    cJSON_ArrayForEach (o, arr) {
        rc = key_parse(o, &a[i], err);
        i++;
        for (size_t j = 0; !rc && j + 1 < i; j++)
            if (!strcmp(a[j].name, a[i - 1].name))
                rc = fo_err_set(err, FO_E_INVALID, "key %s: twice", a[j].name);
        if (rc)
            break;
    }
    if (rc) {
        for (size_t j = 0; j < i; j++)
            key_release(&a[j]);
        free(a);
        return rc;
    }
    *v = a;
    *n = i;
    return FO_OK;
}

/* Replaces DIR/keys.json with doc: a temp file (0600), fsync, rename,
 * the dir fsynced. */
static int file_write(const char *dir, const cJSON *doc, struct fo_err *err)
{
    char p[4096], tmp[4096 + 64];
    int rc = path_of(dir, KEYS_FILE, p, sizeof(p), err);
    if (rc)
        return rc;
    struct fo_buf b;
    fo_buf_init(&b, KEYS_FILE_MAX);
    rc = fo_json_write(doc, FO_JSON_PRETTY, &b, err);
    if (!rc && fo_buf_putc(&b, '\n') != 0)
        rc = fo_err_set(err, FO_E_INVALID, "over %u bytes", KEYS_FILE_MAX);
    unsigned char rnd[8];
    char rhex[17];
    if (!rc && RAND_bytes(rnd, sizeof(rnd)) != 1)
        rc = fo_err_set(err, FO_E_INTERNAL, "no randomness");
    int fd = -1;
    if (!rc) {
        fo_hex(rnd, sizeof(rnd), rhex);
        snprintf(tmp, sizeof(tmp), "%s.tmp-%ld-%s", p, (long)getpid(), rhex);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
        if (fd < 0)
            rc = fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    }
    if (!rc && fchmod(fd, 0600) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: chmod: %s", tmp, strerror(errno));
    for (size_t off = 0; !rc && off < b.len;) {
        ssize_t w = write(fd, b.data + off, b.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc =
                fo_err_set(err, FO_E_IO, "%s: write: %s", tmp, strerror(errno));
        else
            off += (size_t)w;
    }
    if (!rc && fsync(fd) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && !rc)
        rc = fo_err_set(err, FO_E_IO, "%s: close: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, p) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: rename: %s", p, strerror(errno));
    if (rc && fd >= 0)
        unlink(tmp);
    if (!rc) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0)
                rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", dir,
                                strerror(errno));
            close(dfd);
        }
    }
    fo_buf_release(&b);
    return rc;
}

/* Takes DIR/keys.json.lock exclusively: the fd, or -1 (err set). */
static int file_lock(const char *dir, struct fo_err *err)
{
    char p[4096];
    if (path_of(dir, KEYS_FILE ".lock", p, sizeof(p), err))
        return -1;
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        fo_err_set(err, FO_E_IO, "%s: %s", p, strerror(errno));
        return -1;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            fo_err_set(err, FO_E_IO, "%s: lock: %s", p, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

static cJSON *key_json(const struct keys_new *k, const uint8_t sha[32],
                       int64_t now)
{
    char hex[65];
    fo_hex(sha, 32, hex);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddStringToObject(o, "name", k->name) &&
             cJSON_AddStringToObject(o, "sha256", hex) &&
             fo_json_add_int(o, "created_us", now);
    if (ok && k->max_calls)
        ok = fo_json_add_int(o, "max_calls", k->max_calls) != NULL;
    if (ok && k->max_tokens)
        ok = fo_json_add_int(o, "max_tokens", k->max_tokens) != NULL;
    if (ok && k->rpm)
        ok = fo_json_add_int(o, "rpm", k->rpm) != NULL;
    if (ok && k->forge)
        ok = cJSON_AddBoolToObject(o, "forge", 1) != NULL;
    if (ok && k->n_models) {
        cJSON *ms = cJSON_AddArrayToObject(o, "models");
        for (size_t i = 0; ok && ms && i < k->n_models; i++) {
            cJSON *s = cJSON_CreateString(k->models[i]);
            ok = s && cJSON_AddItemToArray(ms, s);
        }
        ok = ok && ms;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int check_new(const struct keys_new *k, struct fo_err *err)
{
    if (!keys_name_valid(k->name))
        return fo_err_set(err, FO_E_INVALID,
                          "key name \"%.80s\": 1 to %d of A-Z a-z 0-9 . _ -, "
                          "starting with a letter or digit",
                          k->name ? k->name : "", KEYS_NAME_MAX);
    if (k->max_calls < 0 || k->max_tokens < 0 || k->rpm < 0 ||
        k->rpm > KEYS_RPM_MAX)
        return fo_err_set(err, FO_E_INVALID, "a limit out of range");
    if (k->n_models > KEYS_MODELS_MAX)
        return fo_err_set(err, FO_E_INVALID, "at most %d models",
                          KEYS_MODELS_MAX);
    for (size_t i = 0; i < k->n_models; i++)
        if (!k->models[i][0] || strlen(k->models[i]) > KEYS_MODEL_MAX ||
            !fo_utf8_valid(k->models[i], strlen(k->models[i])))
            return fo_err_set(err, FO_E_INVALID, "a bad model name");
    return FO_OK;
}

/* Under the lock: the file's keys parsed (so a damaged file is never
 * rewritten), fn's change, the file written. */
static int file_edit(const char *dir,
                     int (*fn)(cJSON *arr, const struct keys_key *v, size_t n,
                               void *arg, struct fo_err *err),
                     void *arg, struct fo_err *err)
{
    int lfd = file_lock(dir, err);
    if (lfd < 0)
        return err->code;
    cJSON *doc = NULL;
    struct keys_key *v = NULL;
    size_t n = 0;
    struct stat st;
    int rc = file_json(dir, &doc, &st, err);
    if (!rc)
        rc = keys_parse(doc, &v, &n, err);
    if (!rc)
        rc = fn(cJSON_GetObjectItemCaseSensitive(doc, "keys"), v, n, arg, err);
    if (!rc)
        rc = file_write(dir, doc, err);
    for (size_t i = 0; i < n; i++)
        key_release(&v[i]);
    free(v);
    cJSON_Delete(doc);
    fo_file_clean_temps(dir, KEYS_FILE);
    close(lfd);
    return rc;
}

struct add_arg {
    const struct keys_new *k;
    char *key_out;
};

static int add_fn(cJSON *arr, const struct keys_key *v, size_t n, void *arg,
                  struct fo_err *err)
{
    struct add_arg *a = arg;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].name, a->k->name))
            return fo_err_set(err, FO_E_EXISTS, "key %s: exists%s", v[i].name,
                              v[i].revoked_us ? " (revoked; names are not "
                                                "reused)"
                                              : "");
    if (n >= KEYS_MAX)
        return fo_err_set(err, FO_E_INVALID, "at most %d keys", KEYS_MAX);
    unsigned char rnd[24];
    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        return fo_err_set(err, FO_E_INTERNAL, "no randomness");
    char key[KEYS_KEY_LEN + 1];
    memcpy(key, KEYS_PREFIX, 3);
    fo_hex(rnd, sizeof(rnd), key + 3);
    uint8_t sha[32];
    fo_sha256(key, KEYS_KEY_LEN, sha);
    OPENSSL_cleanse(rnd, sizeof(rnd));
    cJSON *o = key_json(a->k, sha, ledger_now_us());
    if (!o || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        OPENSSL_cleanse(key, sizeof(key));
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    memcpy(a->key_out, key, sizeof(key));
    OPENSSL_cleanse(key, sizeof(key));
    return FO_OK;
}

int keys_file_add(const char *dir, const struct keys_new *k,
                  char key_out[KEYS_KEY_LEN + 1], struct fo_err *err)
{
    int rc = check_new(k, err);
    if (rc)
        return rc;
    char key[KEYS_KEY_LEN + 1] = "";
    struct add_arg a = {.k = k, .key_out = key};
    rc = file_edit(dir, add_fn, &a, err);
    if (!rc)
        memcpy(key_out, key, sizeof(key));
    OPENSSL_cleanse(key, sizeof(key));
    return rc;
}

static int revoke_fn(cJSON *arr, const struct keys_key *v, size_t n, void *arg,
                     struct fo_err *err)
{
    const char *name = arg;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].name, name))
            continue;
        if (v[i].revoked_us)
            return fo_err_set(err, FO_E_EXISTS, "key %s: revoked already",
                              name);
        cJSON *o = cJSON_GetArrayItem(arr, (int)i);
        if (!fo_json_add_int(o, "revoked_us", ledger_now_us()))
            return fo_err_set(err, FO_E_NOMEM, NULL);
        return FO_OK;
    }
    return fo_err_set(err, FO_E_NOT_FOUND, "key %.80s: no such key", name);
}

int keys_file_revoke(const char *dir, const char *name, struct fo_err *err)
{
    return file_edit(dir, revoke_fn, (void *)(uintptr_t)name, err);
}

/* ---- the store ---------------------------------------------------------- */

static int load_into(const char *dir, struct keys_key **v, size_t *n,
                     struct stat *st, struct fo_err *err)
{
    cJSON *doc = NULL;
    int rc = file_json(dir, &doc, st, err);
    if (!rc)
        rc = keys_parse(doc, v, n, err);
    cJSON_Delete(doc);
    if (rc)
        fo_err_prefix(err, "%s/" KEYS_FILE, dir);
    return rc;
}

int keys_load(const char *dir, struct keys **out, struct fo_err *err)
{
    struct keys *k = calloc(1, sizeof(*k));
    if (!k)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    k->ifd = -1;
    snprintf(k->dir, sizeof(k->dir), "%s", dir);
    int rc = load_into(dir, &k->v, &k->n, &k->seen, err);
    if (rc) {
        keys_free(k);
        return rc;
    }
    *out = k;
    return FO_OK;
}

void keys_free(struct keys *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->n; i++)
        key_release(&k->v[i]);
    free(k->v);
    if (k->ifd >= 0)
        close(k->ifd);
    free(k);
}

size_t keys_count(const struct keys *k)
{
    return k ? k->n : 0;
}

struct keys_key *keys_at(struct keys *k, size_t i)
{
    return k && i < k->n ? &k->v[i] : NULL;
}

struct usage_scan {
    struct keys *k;
};

static int usage_entry(void *ctx, const struct ledger_entry *e,
                       const char *body, size_t len)
{
    struct usage_scan *s = ctx;
    if (!body || strcmp(e->kind, "gateway_call") != 0)
        return 0;
    cJSON *j = NULL;
    struct fo_err err;
    if (fo_json_parse(body, len, &j, &err) != FO_OK)
        return 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "key");
    for (size_t i = 0; cJSON_IsString(name) && i < s->k->n; i++) {
        struct keys_key *key = &s->k->v[i];
        if (strcmp(key->name, name->valuestring) || e->ts < key->created_us)
            continue;
        long long ti = 0, to = 0;
        fo_json_get_int(j, "tokens_in", 0, 1ll << 53, &ti);
        fo_json_get_int(j, "tokens_out", 0, 1ll << 53, &to);
        key->used_calls++;
        key->used_tokens += ti + to;
        break;
    }
    cJSON_Delete(j);
    return 0;
}

int keys_count_usage(struct keys *k, struct ledger *l, struct fo_err *err)
{
    if (!k || !k->n)
        return FO_OK;
    for (size_t i = 0; i < k->n; i++)
        k->v[i].used_calls = k->v[i].used_tokens = 0;
    struct usage_scan s = {.k = k};
    return ledger_range_bodies(l, 0, -1, usage_entry, &s, err);
}

int keys_watch(struct keys *k, struct fo_err *err)
{
    (void)err;
    k->watching = 1;
    k->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (k->ifd >= 0 &&
        inotify_add_watch(k->ifd, k->dir,
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM |
                              IN_DELETE | IN_CREATE | IN_ATTRIB) < 0) {
        close(k->ifd);
        k->ifd = -1; /* the stat comparison instead */
    }
    k->dirty = 1; /* a change between keys_load and the watch is not lost */
    return FO_OK;
}

/* 1 when the inotify queue names the file (the queue drained). */
static int inotify_says(struct keys *k)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int hit = 0;
    for (;;) {
        ssize_t r = read(k->ifd, buf, sizeof(buf));
        if (r <= 0)
            return hit; /* EAGAIN: drained */
        for (char *p = buf; p < buf + r;) {
            const struct inotify_event *ev = (const void *)p;
            if (ev->mask & IN_Q_OVERFLOW)
                hit = 1;
            if (ev->len && !strcmp(ev->name, KEYS_FILE))
                hit = 1;
            p += sizeof(*ev) + ev->len;
        }
    }
}

static int stat_says(struct keys *k)
{
    char p[4096];
    struct fo_err err;
    if (path_of(k->dir, KEYS_FILE, p, sizeof(p), &err))
        return 0;
    struct stat st;
    if (stat(p, &st) != 0)
        memset(&st, 0, sizeof(st));
    return st.st_ino != k->seen.st_ino || st.st_size != k->seen.st_size ||
           st.st_mtim.tv_sec != k->seen.st_mtim.tv_sec ||
           st.st_mtim.tv_nsec != k->seen.st_mtim.tv_nsec ||
           st.st_ctim.tv_nsec != k->seen.st_ctim.tv_nsec;
}

int keys_refresh(struct keys *k)
{
    if (!k || !k->watching)
        return 0;
    int changed = k->ifd >= 0 ? inotify_says(k) : stat_says(k);
    if (!changed && !k->dirty)
        return 0;
    k->dirty = 0;
    struct keys_key *v = NULL;
    size_t n = 0;
    struct stat st;
    struct fo_err err;
    if (load_into(k->dir, &v, &n, &st, &err) != FO_OK) {
        k->reload_errors++;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        struct keys_key *old = keys_by_name(k, v[i].name, v[i].created_us);
        if (!old)
            continue;
        v[i].used_calls = old->used_calls;
        v[i].used_tokens = old->used_tokens;
        v[i].inflight = old->inflight;
        v[i].n429 = old->n429;
        v[i].n403 = old->n403;
        if (old->rpm == v[i].rpm) {
            v[i].ring = old->ring;
            v[i].ring_at = old->ring_at;
            v[i].ring_n = old->ring_n;
            old->ring = NULL;
        }
    }
    for (size_t i = 0; i < k->n; i++)
        key_release(&k->v[i]);
    free(k->v);
    k->v = v;
    k->n = n;
    k->seen = st;
    return 1;
}

unsigned long long keys_reload_errors(const struct keys *k)
{
    return k ? k->reload_errors : 0;
}

struct keys_key *keys_find(struct keys *k, const char *cred)
{
    if (!k || !cred || !k->n)
        return NULL;
    uint8_t sha[32];
    fo_sha256(cred, strlen(cred), sha);
    struct keys_key *hit = NULL;
    for (size_t i = 0; i < k->n; i++)
        if (CRYPTO_memcmp(sha, k->v[i].sha256, 32) == 0)
            hit = &k->v[i];
    return hit;
}

struct keys_key *keys_by_name(struct keys *k, const char *name,
                              int64_t created_us)
{
    for (size_t i = 0; k && i < k->n; i++)
        if (!strcmp(k->v[i].name, name) && k->v[i].created_us == created_us)
            return &k->v[i];
    return NULL;
}

int keys_model_ok(const struct keys_key *key, const char *model,
                  const char *pname, const char *pmodel)
{
    if (!key->models)
        return 1;
    for (size_t i = 0; i < key->n_models; i++) {
        const char *m = key->models[i];
        if ((model && !strcmp(m, model)) || (pname && !strcmp(m, pname)) ||
            (pmodel && !strcmp(m, pmodel)))
            return 1;
    }
    return 0;
}

int keys_admit(struct keys_key *key, int64_t now_us, long *retry_s)
{
    int why = KEYS_OK;
    if (key->max_calls && key->used_calls + key->inflight >= key->max_calls)
        why = KEYS_OVER_CALLS;
    else if (key->max_tokens && key->used_tokens >= key->max_tokens)
        why = KEYS_OVER_TOKENS;
    if (why) {
        *retry_s = KEYS_BUDGET_RETRY_S;
        key->n429++;
        return why;
    }
    if (key->rpm) {
        if (!key->ring) {
            key->ring = calloc((size_t)key->rpm, sizeof(int64_t));
            if (!key->ring) { /* no memory for the window: refused */
                *retry_s = 1;
                key->n429++;
                return KEYS_OVER_RPM;
            }
        }
        size_t cap = (size_t)key->rpm;
        /* the oldest of the last rpm admissions */
        int64_t oldest = key->ring[key->ring_n < cap ? 0 : key->ring_at];
        if (key->ring_n == cap && now_us - oldest < WINDOW_US) {
            long s = (long)((oldest + WINDOW_US - now_us + 999999) / 1000000);
            *retry_s = s < 1 ? 1 : s;
            key->n429++;
            return KEYS_OVER_RPM;
        }
        key->ring[key->ring_at] = now_us;
        key->ring_at = (key->ring_at + 1) % cap;
        if (key->ring_n < cap)
            key->ring_n++;
    }
    key->inflight++;
    return KEYS_OK;
}

void keys_done(struct keys_key *key, int witnessed, long long tokens)
{
    if (!key)
        return;
    if (key->inflight > 0)
        key->inflight--;
    if (witnessed) {
        key->used_calls++;
        key->used_tokens += tokens > 0 ? tokens : 0;
    }
}

int keys_metrics(const struct keys *k, struct fo_buf *b)
{
    int rc = fo_buf_printf(
        b, "# HELP forum_gateway_key_calls_total Gateway calls witnessed per "
           "client key (counted from the ledger).\n"
           "# TYPE forum_gateway_key_calls_total counter\n");
    for (size_t i = 0; k && i < k->n; i++)
        rc |=
            fo_buf_printf(b, "forum_gateway_key_calls_total{key=\"%s\"} %lld\n",
                          k->v[i].name, k->v[i].used_calls);
    rc |= fo_buf_printf(
        b, "# HELP forum_gateway_key_tokens_total Tokens (in and out) of the "
           "witnessed calls per client key.\n"
           "# TYPE forum_gateway_key_tokens_total counter\n");
    for (size_t i = 0; k && i < k->n; i++)
        rc |= fo_buf_printf(b,
                            "forum_gateway_key_tokens_total{key=\"%s\"} %lld\n",
                            k->v[i].name, k->v[i].used_tokens);
    rc |= fo_buf_printf(
        b, "# HELP forum_gateway_key_refused_total Calls refused per client "
           "key since start: 429 over budget or rate, 403 a model not "
           "allowed.\n"
           "# TYPE forum_gateway_key_refused_total counter\n");
    for (size_t i = 0; k && i < k->n; i++)
        rc |= fo_buf_printf(
            b,
            "forum_gateway_key_refused_total{key=\"%s\",status=\"429\"} "
            "%llu\n"
            "forum_gateway_key_refused_total{key=\"%s\",status=\"403\"} "
            "%llu\n",
            k->v[i].name, k->v[i].n429, k->v[i].name, k->v[i].n403);
    rc |= fo_buf_printf(
        b,
        "# HELP forum_gateway_keys_reload_errors_total Times the keys "
        "file changed but could not be read (the keys stayed as they "
        "were).\n"
        "# TYPE forum_gateway_keys_reload_errors_total counter\n"
        "forum_gateway_keys_reload_errors_total %llu\n",
        keys_reload_errors(k));
    return rc;
}
