/* tlog_witness: the daemon's witness of other logs (see tlog_witness.h):
 * C2SP tlog-witness add-checkpoint, checked against a durable state. */
#include "daemon/tlog_witness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ledger/cosig.h"
#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

#define PROOF_LINES_MAX 63

/* What it cosigned last for one log. */
struct wlog {
    char origin[NOTE_NAME_MAX + 1];
    uint64_t size;
    uint8_t root[32];
    char *note; /* the cosigned checkpoint, as received */
};

struct tlog_witness {
    char dir[FO_DIR_MAX + 1];
    struct note_verifier *logs[TLOG_WITNESS_LOGS_MAX];
    size_t nlogs;
    struct cosig_signer *key;
    char *vkey;
    struct wlog *state;
    size_t nstate;
};

/* ---- configuration ---------------------------------------------------- */

int tlog_witness_config_check(const cJSON *logs, struct fo_err *err)
{
    if (!cJSON_IsArray(logs) || cJSON_GetArraySize(logs) < 1 ||
        cJSON_GetArraySize(logs) > TLOG_WITNESS_LOGS_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "witness_of: an array of 1-%d log verifier keys",
                          TLOG_WITNESS_LOGS_MAX);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach (v, logs) {
        struct note_verifier *nv = NULL;
        if (!cJSON_IsString(v))
            return fo_err_set(err, FO_E_INVALID,
                              "witness_of[%d]: a log verifier key string", i);
        int rc = note_verifier_parse(v->valuestring, strlen(v->valuestring),
                                     &nv, err);
        note_verifier_free(nv);
        if (rc) {
            fo_err_prefix(err, "witness_of[%d]", i);
            return rc;
        }
        const cJSON *u;
        int j = 0;
        cJSON_ArrayForEach (u, logs) {
            if (j++ < i && cJSON_IsString(u) &&
                !strcmp(u->valuestring, v->valuestring))
                return fo_err_set(err, FO_E_INVALID,
                                  "witness_of[%d]: given twice", i);
        }
        i++;
    }
    return FO_OK;
}

/* ---- files ------------------------------------------------------------ */

static int read_small(const char *path, struct fo_buf *out, struct fo_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT
                   ? FO_E_NOT_FOUND
                   : fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    char chunk[4096];
    ssize_t n;
    int rc = FO_OK;
    while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
            break;
        }
        if (fo_buf_append(out, chunk, (size_t)n) != FO_OK) {
            rc = fo_err_set(err, FO_E_CORRUPT, "%s: too large", path);
            break;
        }
    }
    close(fd);
    return rc;
}

/* Replaces path with data, durably: temp file, fsync, rename, fsync of
 * the directory. */
static int write_durable(const char *dir, const char *path, const void *data,
                         size_t len, struct fo_err *err)
{
    char tmp[4096 + 16];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd =
        open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    int rc = FO_OK;
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (!rc && fsync(fd) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", dir, strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

static void state_free(struct wlog *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i].note);
    free(s);
}

/* One log of the state file into s. */
static int state_item(const cJSON *it, struct wlog *s, struct fo_err *err)
{
    static const char *const keys[] = {"origin", "size", "root", "note"};
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(it, "origin");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "root");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "note");
    long long size = 0;
    if (!cJSON_IsObject(it) || fo_json_only_keys(it, keys, 4, err) ||
        !cJSON_IsString(o) || !*o->valuestring ||
        strlen(o->valuestring) > NOTE_NAME_MAX || !cJSON_IsString(r) ||
        fo_unhex(r->valuestring, s->root, 32) || !cJSON_IsString(n) ||
        fo_json_get_int(it, "size", 0, INT64_MAX, &size))
        return FO_E_CORRUPT;
    snprintf(s->origin, sizeof(s->origin), "%s", o->valuestring);
    s->size = (uint64_t)size;
    s->note = strdup(n->valuestring);
    return s->note ? FO_OK : FO_E_NOMEM;
}

static int state_load(struct tlog_witness *w, struct fo_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, TLOG_WITNESS_STATE_FILE);
    struct fo_buf b;
    fo_buf_init(&b, 16u << 20);
    int rc = read_small(path, &b, err);
    if (rc == FO_E_NOT_FOUND) {
        fo_buf_release(&b);
        return FO_OK;
    }
    cJSON *j = NULL;
    struct fo_err e2;
    if (!rc && fo_json_parse(b.data ? b.data : "", b.len, &j, &e2) != FO_OK)
        rc = FO_E_CORRUPT;
    const cJSON *logs = cJSON_GetObjectItemCaseSensitive(j, "logs");
    if (!rc && !cJSON_IsArray(logs))
        rc = FO_E_CORRUPT;
    int n = rc ? 0 : cJSON_GetArraySize(logs);
    if (!rc && n > 0 && !(w->state = calloc((size_t)n, sizeof(*w->state))))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *it;
    const cJSON *items = rc ? NULL : logs;
    cJSON_ArrayForEach (it, items) {
        rc = state_item(it, &w->state[w->nstate], &e2);
        if (rc)
            break;
        w->nstate++;
    }
    if (rc == FO_E_CORRUPT)
        rc = fo_err_set(err, FO_E_CORRUPT,
                        "%s: damaged; a witness that forgot what it cosigned "
                        "must not go on (restore the file from a backup, or "
                        "retire this witness key)",
                        path);
    cJSON_Delete(j);
    fo_buf_release(&b);
    return rc;
}

static int state_save(struct tlog_witness *w, struct fo_err *err)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *logs = j ? cJSON_AddArrayToObject(j, "logs") : NULL;
    int rc = logs ? FO_OK : FO_E_NOMEM;
    for (size_t i = 0; !rc && i < w->nstate; i++) {
        char hex[65];
        fo_hex(w->state[i].root, 32, hex);
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(logs, o) ||
            !cJSON_AddStringToObject(o, "origin", w->state[i].origin) ||
            !fo_json_add_int(o, "size", (long long)w->state[i].size) ||
            !cJSON_AddStringToObject(o, "root", hex) ||
            !cJSON_AddStringToObject(o, "note", w->state[i].note))
            rc = FO_E_NOMEM;
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (!rc)
        rc = fo_json_canon(j, &b, err);
    if (!rc)
        rc = fo_buf_putc(&b, '\n');
    if (rc == FO_E_NOMEM)
        fo_err_set(err, FO_E_NOMEM, NULL);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, TLOG_WITNESS_STATE_FILE);
    if (!rc)
        rc = write_durable(w->dir, path, b.data, b.len, err);
    fo_buf_release(&b);
    cJSON_Delete(j);
    return rc;
}

/* DIR/witness.key: read, or made (with DIR/witness.vkey) on first use. */
static int key_load(struct tlog_witness *w, const char *name,
                    struct fo_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, TLOG_WITNESS_KEY_FILE);
    struct fo_buf b, v;
    fo_buf_init(&b, 4096);
    fo_buf_init(&v, 4096);
    int rc = read_small(path, &b, err);
    if (rc == FO_E_NOT_FOUND) {
        struct cosig_signer *s = NULL;
        rc = cosig_signer_generate(name, &s, err);
        if (!rc)
            rc = cosig_signer_format(s, &b, err);
        if (!rc)
            rc = fo_file_create(w->dir, path, b.data, b.len, 0600, err);
        if (rc == FO_E_EXISTS) { /* another process made it: read it */
            fo_buf_reset(&b);
            rc = read_small(path, &b, err);
        }
        cosig_signer_free(s);
    }
    while (!rc && b.len && (b.data[b.len - 1] == '\n'))
        b.data[--b.len] = '\0';
    if (!rc)
        rc = cosig_signer_parse(b.data ? b.data : "", b.len, &w->key, err);
    if (rc && rc != FO_E_IO && rc != FO_E_NOMEM)
        fo_err_prefix(err, "%s", path);
    if (!rc)
        rc = cosig_signer_format_verifier(w->key, &v, err);
    if (!rc && !(w->vkey = fo_buf_detach(&v, NULL)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc) {
        char vpath[4096];
        snprintf(vpath, sizeof(vpath), "%s/%s", w->dir, TLOG_WITNESS_VKEY_FILE);
        int e =
            fo_file_create(w->dir, vpath, w->vkey, strlen(w->vkey), 0644, err);
        if (e != FO_OK && e != FO_E_EXISTS)
            rc = e;
    }
    if (b.data) /* the secret leaves no copy of ours behind */
        memset(b.data, 0, b.len);
    fo_buf_release(&b);
    fo_buf_release(&v);
    return rc;
}

int tlog_witness_open(const char *dir, const cJSON *logs, const char *name,
                      struct tlog_witness **out, struct fo_err *err)
{
    int rc = tlog_witness_config_check(logs, err);
    if (rc)
        return rc;
    struct tlog_witness *w = calloc(1, sizeof(*w));
    if (!w)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    const cJSON *v;
    cJSON_ArrayForEach (v, logs) {
        rc = note_verifier_parse(v->valuestring, strlen(v->valuestring),
                                 &w->logs[w->nlogs], err);
        if (rc)
            goto fail;
        w->nlogs++;
    }
    rc = key_load(w, name, err);
    if (!rc)
        rc = state_load(w, err);
    if (rc)
        goto fail;
    *out = w;
    return FO_OK;
fail:
    tlog_witness_free(w);
    return rc;
}

void tlog_witness_free(struct tlog_witness *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nlogs; i++)
        note_verifier_free(w->logs[i]);
    cosig_signer_free(w->key);
    free(w->vkey);
    state_free(w->state, w->nstate);
    free(w);
}

const char *tlog_witness_vkey(const struct tlog_witness *w)
{
    return w->vkey;
}

/* ---- add-checkpoint ---------------------------------------------------- */

static void answer(struct tlog_witness_reply *r, int status, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));
static void answer(struct tlog_witness_reply *r, int status, const char *fmt,
                   ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->status = status;
    r->ctype = "text/plain; charset=utf-8";
    fo_buf_reset(&r->body);
    if (fo_buf_puts(&r->body, msg) || fo_buf_putc(&r->body, '\n'))
        r->status = 500;
}

/* The request's head: the old size and the proof, and where the note
 * starts. -1 (answered) when malformed. */
static int parse_head(const char *body, size_t len, uint64_t *old,
                      uint8_t proof[][32], size_t *nproof, size_t *note_off,
                      struct tlog_witness_reply *r)
{
    const char *end = body + len, *p = body;
    const char *nl = memchr(p, '\n', len);
    if (!nl || nl - p < 5 || memcmp(p, "old ", 4) != 0) {
        answer(r, 400, "the body must start with \"old <size>\"");
        return -1;
    }
    uint64_t v = 0;
    for (const char *d = p + 4; d < nl; d++) {
        if (*d < '0' || *d > '9' || (d == p + 4 && *d == '0' && nl - d > 1) ||
            v > (UINT64_MAX - 9) / 10) {
            answer(r, 400, "old size: a decimal number without leading zeros");
            return -1;
        }
        v = v * 10 + (uint64_t)(*d - '0');
    }
    *old = v;
    *nproof = 0;
    for (p = nl + 1; p < end && *p != '\n'; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        size_t got = 0;
        if (!nl || *nproof >= PROOF_LINES_MAX ||
            note_b64_decode(p, (size_t)(nl - p), proof[*nproof], 32, &got) !=
                0 ||
            got != 32) {
            answer(r, 400,
                   "consistency proof: at most %d lines of one base64 hash, "
                   "then an empty line",
                   PROOF_LINES_MAX);
            return -1;
        }
        (*nproof)++;
    }
    if (p >= end) {
        answer(r, 400, "no empty line before the checkpoint");
        return -1;
    }
    *note_off = (size_t)(p + 1 - body);
    return 0;
}

static struct wlog *state_find(struct tlog_witness *w, const char *origin)
{
    for (size_t i = 0; i < w->nstate; i++)
        if (!strcmp(w->state[i].origin, origin))
            return &w->state[i];
    return NULL;
}

/* Keeps the evidence of a fork (best effort) and says so. */
static void fork_seen(struct tlog_witness *w, struct tlog_witness_reply *r,
                      const char *note, size_t len, const char *why)
{
    r->fork = 1;
    snprintf(r->log, sizeof(r->log),
             "witness: FORK refused: %.400s (the checkpoint is kept in "
             "DIR/%s)",
             why, TLOG_WITNESS_FORKS_FILE);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, TLOG_WITNESS_FORKS_FILE);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    if (fd < 0)
        return;
    char head[700];
    int n =
        snprintf(head, sizeof(head), "# %lld %s\n", (long long)time(NULL), why);
    if (write(fd, head, (size_t)n) < 0 || write(fd, note, len) < 0 ||
        write(fd, "\n", 1) < 0 || fsync(fd) != 0) {
        /* best effort: the log line says it too */
    }
    close(fd);
}

/* The new state of the log (made when new), stored durably. */
static int state_put(struct tlog_witness *w, struct wlog *cur,
                     const struct note_checkpoint *cp, const char *note,
                     size_t len, struct fo_err *err)
{
    char *copy = strndup(note, len);
    if (!copy)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    struct wlog saved = {0};
    int added = 0;
    if (!cur) {
        struct wlog *p = realloc(w->state, (w->nstate + 1) * sizeof(*p));
        if (!p) {
            free(copy);
            return fo_err_set(err, FO_E_NOMEM, NULL);
        }
        w->state = p;
        cur = &w->state[w->nstate++];
        memset(cur, 0, sizeof(*cur));
        snprintf(cur->origin, sizeof(cur->origin), "%s", cp->origin);
        added = 1;
    }
    saved = *cur;
    cur->size = cp->size;
    memcpy(cur->root, cp->root, 32);
    cur->note = copy;
    int rc = state_save(w, err);
    if (rc) { /* the state on disk is the old one: so is ours */
        free(copy);
        *cur = saved;
        if (added)
            w->nstate--;
        return rc;
    }
    free(saved.note);
    return FO_OK;
}

void tlog_witness_add(struct tlog_witness *w, const char *body, size_t len,
                      uint64_t now_s, struct tlog_witness_reply *r)
{
    uint8_t proof[PROOF_LINES_MAX][32];
    size_t nproof = 0, off = 0;
    uint64_t old = 0;
    struct fo_err err;
    r->fork = 0;
    r->log[0] = '\0';
    if (len > TLOG_WITNESS_BODY_MAX) {
        answer(r, 400, "request body over %d bytes", TLOG_WITNESS_BODY_MAX);
        return;
    }
    if (parse_head(body, len, &old, proof, &nproof, &off, r))
        return;
    const char *note = body + off;
    size_t nlen = len - off;
    struct cosig_lines lines;
    struct note_checkpoint cp;
    if (cosig_split(note, nlen, &lines, &err) ||
        note_checkpoint_parse(note, lines.text_len, &cp, &err)) {
        answer(r, 400, "checkpoint: %s", err.msg);
        return;
    }
    const struct note_verifier *known[TLOG_WITNESS_LOGS_MAX];
    size_t nk = 0;
    for (size_t i = 0; i < w->nlogs; i++)
        if (!strcmp(note_verifier_name(w->logs[i]), cp.origin))
            known[nk++] = w->logs[i];
    if (!nk) {
        answer(r, 404, "unknown log \"%s\": not one this witness witnesses",
               cp.origin);
        return;
    }
    struct fo_buf text;
    fo_buf_init(&text, NOTE_MAX_LEN);
    int rc = note_open(note, nlen, known, nk, &text, &err);
    fo_buf_release(&text);
    if (rc) {
        answer(r, rc == FO_E_VERIFY ? 403 : 400, "checkpoint: %s", err.msg);
        return;
    }
    if (old > cp.size) {
        answer(r, 400, "old size %llu is beyond the checkpoint's %llu",
               (unsigned long long)old, (unsigned long long)cp.size);
        return;
    }
    struct wlog *cur = state_find(w, cp.origin);
    uint64_t have = cur ? cur->size : 0;
    if (old != have) {
        r->status = 409;
        r->ctype = "text/x.tlog.size";
        fo_buf_reset(&r->body);
        if (fo_buf_printf(&r->body, "%llu\n", (unsigned long long)have))
            r->status = 500;
        return;
    }
    char why[640];
    if (cur && old == cp.size && memcmp(cur->root, cp.root, 32) != 0) {
        snprintf(why, sizeof(why),
                 "log \"%.200s\": a second root for size %llu, which this "
                 "witness cosigned with another root",
                 cp.origin, (unsigned long long)cp.size);
        fork_seen(w, r, note, nlen, why);
        r->status = 409; /* the spec's answer, with the size as ever */
        r->ctype = "text/x.tlog.size";
        fo_buf_reset(&r->body);
        if (fo_buf_printf(&r->body, "%llu\n", (unsigned long long)have))
            r->status = 500;
        return;
    }
    if (old == 0 && nproof) {
        answer(r, 400, "old size 0 takes no consistency proof");
        return;
    }
    if (old > 0 && old < cp.size &&
        merkle_verify_consistency(old, cp.size, cur->root, cp.root,
                                  (const uint8_t(*)[32])proof, nproof,
                                  &err) != FO_OK) {
        snprintf(why, sizeof(why),
                 "log \"%.200s\": checkpoint %llu is not consistent with the "
                 "checkpoint %llu this witness cosigned (%.150s)",
                 cp.origin, (unsigned long long)cp.size,
                 (unsigned long long)old, err.msg);
        fork_seen(w, r, note, nlen, why);
        answer(r, 422, "fork: %s", why);
        return;
    }
    if (old == cp.size && nproof) {
        answer(r, 400, "the same size takes no consistency proof");
        return;
    }
    if (state_put(w, cur, &cp, note, nlen, &err) != FO_OK) {
        snprintf(r->log, sizeof(r->log), "witness: cannot store its state: %s",
                 err.msg);
        answer(r, 500, "the witness cannot store its state");
        return;
    }
    r->status = 200;
    r->ctype = "text/plain; charset=utf-8";
    fo_buf_reset(&r->body);
    if (cosig_sign(w->key, note, lines.text_len, now_s, &r->body, &err))
        answer(r, 500, "cannot cosign: %s", err.msg);
}
