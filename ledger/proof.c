/* proof: tree roots, inclusion and consistency proofs, the ledger's signing
 * key and its signed checkpoints, verification against a checkpoint, and
 * bundles. Everything reads the stored tree through ledger_tree_node, so a
 * root or proof costs O(log N) storage reads at any size. */
#include "ledger/proof.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger_int.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

#define KEY_FILE_MAX 4096

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

/* ---- roots and proofs ------------------------------------------------- */

/* The size a request names: `want` (< 0: the count), checked against the
 * count. Inside a transaction. */
static int resolve_size(struct ledger *l, int64_t want, const char *what,
                        int64_t *size, struct fo_err *err)
{
    int64_t count = 0;
    int rc = l->ops->head(l->store, &count, NULL, err);
    if (rc)
        return rc;
    if (want < 0) {
        *size = count;
        return FO_OK;
    }
    if (want > count)
        return fo_err_set(err, FO_E_INVALID,
                          "%s %lld: beyond the log (%lld entries)", what,
                          (long long)want, (long long)count);
    *size = want;
    return FO_OK;
}

static int root_at(struct ledger *l, int64_t size, uint8_t out[32],
                   struct fo_err *err)
{
    return merkle_root(ledger_tree_node, l, (uint64_t)size, out, err);
}

int ledger_root(struct ledger *l, int64_t size, uint8_t out[32],
                struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (size < 0)
        return fo_err_set(err, FO_E_INVALID, "size %lld: must be >= 0",
                          (long long)size);
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    int64_t n = 0;
    rc = resolve_size(l, size, "size", &n, err);
    if (!rc)
        rc = root_at(l, n, out, err);
    l->ops->rollback(l->store);
    return rc;
}

int ledger_tree_head(struct ledger *l, int64_t *size, uint8_t root[32],
                     struct fo_err *err)
{
    LEDGER_OWNED(l);
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    int64_t n = 0;
    rc = ledger_head_root(l, &n, root, err);
    l->ops->rollback(l->store);
    if (!rc)
        *size = n;
    return rc;
}

int ledger_prove_inclusion(struct ledger *l, int64_t index, int64_t size,
                           struct ledger_inclusion *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (index < 0)
        return fo_err_set(err, FO_E_INVALID, "seq %lld: must be >= 0",
                          (long long)index);
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    int64_t n = 0;
    rc = resolve_size(l, size, "size", &n, err);
    if (!rc && index >= n)
        rc = fo_err_set(err, FO_E_INVALID,
                        "seq %lld: not in the tree of size %lld (seq must "
                        "be below size)",
                        (long long)index, (long long)n);
    if (!rc)
        rc =
            merkle_inclusion_proof(ledger_tree_node, l, (uint64_t)index,
                                   (uint64_t)n, out->path, &out->path_len, err);
    if (!rc)
        rc = ledger_tree_node(l, 0, (uint64_t)index, out->leaf_hash, err);
    if (!rc)
        rc = root_at(l, n, out->root, err);
    l->ops->rollback(l->store);
    if (!rc) {
        out->index = index;
        out->size = n;
    }
    return rc;
}

int ledger_prove_consistency(struct ledger *l, int64_t first, int64_t second,
                             struct ledger_consistency *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (first <= 0)
        return fo_err_set(err, FO_E_INVALID,
                          "first %lld: a consistency proof from the empty "
                          "tree proves nothing; first must be >= 1",
                          (long long)first);
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    int64_t n = 0;
    rc = resolve_size(l, second, "second", &n, err);
    if (!rc && first > n)
        rc =
            fo_err_set(err, FO_E_INVALID, "first %lld: larger than second %lld",
                       (long long)first, (long long)n);
    if (!rc)
        rc = merkle_consistency_proof(ledger_tree_node, l, (uint64_t)first,
                                      (uint64_t)n, out->path, &out->path_len,
                                      err);
    if (!rc)
        rc = root_at(l, first, out->root1, err);
    if (!rc)
        rc = root_at(l, n, out->root2, err);
    l->ops->rollback(l->store);
    if (!rc) {
        out->first = first;
        out->second = n;
    }
    return rc;
}

static int add_hex(cJSON *o, const char *key, const uint8_t h[32])
{
    char hex[65];
    fo_hex(h, 32, hex);
    return cJSON_AddStringToObject(o, key, hex) != NULL;
}

static cJSON *path_json(const uint8_t path[][32], size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        char hex[65];
        fo_hex(path[i], 32, hex);
        cJSON *s = cJSON_CreateString(hex);
        if (!s) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, s);
    }
    return a;
}

cJSON *ledger_inclusion_json(const struct ledger_inclusion *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *path = path_json(p->path, p->path_len);
    int ok = o && path && fo_json_add_int(o, "index", p->index) &&
             fo_json_add_int(o, "size", p->size) &&
             add_hex(o, "leaf_hash", p->leaf_hash) &&
             add_hex(o, "root", p->root);
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(path);
        return NULL;
    }
    cJSON_AddItemToObject(o, "path", path);
    return o;
}

cJSON *ledger_consistency_json(const struct ledger_consistency *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *path = path_json(p->path, p->path_len);
    int ok = o && path && fo_json_add_int(o, "first", p->first) &&
             fo_json_add_int(o, "second", p->second) &&
             add_hex(o, "root1", p->root1) && add_hex(o, "root2", p->root2);
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(path);
        return NULL;
    }
    cJSON_AddItemToObject(o, "path", path);
    return o;
}

static int get_hex(const cJSON *obj, const char *key, uint8_t out[32],
                   struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 64 ||
        fo_unhex(v->valuestring, out, 32) != FO_OK)
        return fo_err_set(err, FO_E_INVALID, "%s: not a 64-digit hex hash",
                          key);
    return FO_OK;
}

int ledger_inclusion_from_json(const cJSON *obj, struct ledger_inclusion *p,
                               struct fo_err *err)
{
    long long index = 0, size = 0;
    memset(p, 0, sizeof(*p));
    if (!cJSON_IsObject(obj))
        return fo_err_set(err, FO_E_INVALID, "proof: not an object");
    if (fo_json_get_int(obj, "index", 0, INT64_MAX, &index) ||
        fo_json_get_int(obj, "size", 0, INT64_MAX, &size))
        return fo_err_set(err, FO_E_INVALID,
                          "proof: index and size must be integers >= 0");
    int rc = get_hex(obj, "leaf_hash", p->leaf_hash, err);
    if (!rc)
        rc = get_hex(obj, "root", p->root, err);
    if (rc) {
        fo_err_prefix(err, "proof");
        return rc;
    }
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(obj, "path");
    if (!cJSON_IsArray(path) || cJSON_GetArraySize(path) > MERKLE_MAX_PATH)
        return fo_err_set(err, FO_E_INVALID,
                          "proof: path must be an array of at most %d hashes",
                          MERKLE_MAX_PATH);
    const cJSON *h;
    size_t n = 0;
    cJSON_ArrayForEach (h, path) {
        if (!cJSON_IsString(h) || strlen(h->valuestring) != 64 ||
            fo_unhex(h->valuestring, p->path[n], 32) != FO_OK)
            return fo_err_set(err, FO_E_INVALID,
                              "proof: path[%zu]: not a 64-digit hex hash", n);
        n++;
    }
    p->index = index;
    p->size = size;
    p->path_len = n;
    return FO_OK;
}

/* ---- the key pair ------------------------------------------------------ */

static int dir_path(const struct ledger *l, const char *name, char *out,
                    size_t max, struct fo_err *err)
{
    int n = snprintf(out, max, "%s/%s", l->dir, name);
    if (n < 0 || (size_t)n >= max)
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", l->dir);
    return FO_OK;
}

/* Reads a small key file; strips one trailing newline. FO_E_NOT_FOUND when
 * it does not exist; with private set, FO_E_INVALID when others may read it.
 * *out malloc'd; the caller wipes and frees it. */
static int read_key_file(const char *path, int private, char **out, size_t *len,
                         struct fo_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return fo_err_set(err, FO_E_NOT_FOUND, "%s: no key file", path);
        return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    }
    if (private) {
        int prc = fo_file_check_private(fd, path, err);
        if (prc) {
            close(fd);
            return prc;
        }
    }
    char *buf = malloc(KEY_FILE_MAX + 1);
    if (!buf) {
        close(fd);
        return nomem(err);
    }
    size_t n = 0;
    int rc = FO_OK;
    for (;;) {
        ssize_t r = read(fd, buf + n, KEY_FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > KEY_FILE_MAX) {
            rc = fo_err_set(err, FO_E_CORRUPT, "%s: too large for a key file",
                            path);
            break;
        }
    }
    close(fd);
    if (rc) {
        OPENSSL_cleanse(buf, KEY_FILE_MAX + 1);
        free(buf);
        return rc;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return FO_OK;
}

/* Reads the signer key from DIR/checkpoint.key, creating the pair on first
 * use when the ledger is writable. The key name must be the origin. */
static int load_signer(struct ledger *l, struct note_signer **out,
                       struct fo_err *err)
{
    char path[4096];
    int rc = dir_path(l, LEDGER_KEY_FILE, path, sizeof(path), err);
    if (rc)
        return rc;
    struct note_signer *s = NULL;
    char *text = NULL;
    size_t len = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        rc = read_key_file(path, 1, &text, &len, err);
        if (rc != FO_E_NOT_FOUND)
            break;
        if (l->readonly)
            return fo_err_set(err, FO_E_NOT_FOUND,
                              "%s: no checkpoint key yet (it is made on first "
                              "use by a writer)",
                              path);
        /* A verifier key without its private key means the key was lost:
         * a new one would silently sign checkpoints nobody can check with
         * the published key. Refuse. */
        char vpath[4096];
        rc = dir_path(l, LEDGER_VKEY_FILE, vpath, sizeof(vpath), err);
        if (rc)
            return rc;
        if (access(vpath, F_OK) == 0) {
            /* A writer that just made the key links the key before it
             * writes the vkey: read the key once more before refusing. */
            rc = read_key_file(path, 1, &text, &len, err);
            if (rc != FO_E_NOT_FOUND)
                break;
            return fo_err_set(err, FO_E_EXISTS,
                              "%s is missing but %s exists: restore the "
                              "key, or move %s away to start a new key "
                              "(see docs/OPERATIONS.md)",
                              path, LEDGER_VKEY_FILE, LEDGER_VKEY_FILE);
        }
        struct fo_buf b;
        fo_buf_init(&b, KEY_FILE_MAX);
        rc = note_signer_generate(l->origin, &s, err);
        if (!rc)
            rc = note_signer_format(s, &b, err);
        if (!rc)
            rc = fo_file_create(l->dir, path, b.data, b.len, 0600, err);
        if (b.data)
            OPENSSL_cleanse(b.data, b.len);
        fo_buf_release(&b);
        if (rc == FO_OK) {
            *out = s;
            return FO_OK;
        }
        note_signer_free(s);
        s = NULL;
        if (rc != FO_E_EXISTS)
            return rc;
        /* Another process made it first: read theirs. */
    }
    if (rc)
        return rc;
    rc = note_signer_parse(text, len, &s, err);
    OPENSSL_cleanse(text, len);
    free(text);
    if (rc) {
        fo_err_prefix(err, "%s", path);
        if (rc == FO_E_INVALID) { /* a damaged key file is storage damage */
            rc = FO_E_CORRUPT;
            if (err)
                err->code = rc;
        }
        return rc;
    }
    if (strcmp(note_signer_name(s), l->origin) != 0) {
        /* Format before freeing: the name lives in the signer. */
        fo_err_set(err, FO_E_CORRUPT,
                   "%s: key name \"%.64s\" is not the ledger origin "
                   "\"%.64s\"",
                   path, note_signer_name(s), l->origin);
        note_signer_free(s);
        return FO_E_CORRUPT;
    }
    *out = s;
    return FO_OK;
}

/* Writes DIR/checkpoint.vkey from the signer when it is absent. */
static int ensure_vkey_file(struct ledger *l, const char *vkey, size_t len,
                            struct fo_err *err)
{
    char path[4096];
    int rc = dir_path(l, LEDGER_VKEY_FILE, path, sizeof(path), err);
    if (rc)
        return rc;
    if (access(path, F_OK) == 0)
        return FO_OK;
    rc = fo_file_create(l->dir, path, vkey, len, 0600, err);
    return rc == FO_E_EXISTS ? FO_OK : rc;
}

static int signer_vkey(struct ledger *l, const struct note_signer *s,
                       char **out, struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, KEY_FILE_MAX);
    int rc = note_signer_format_verifier(s, &b, err);
    if (!rc && !l->readonly)
        rc = ensure_vkey_file(l, b.data, b.len, err);
    if (!rc) {
        *out = fo_buf_detach(&b, NULL);
        if (!*out)
            rc = nomem(err);
    }
    fo_buf_release(&b);
    return rc;
}

int ledger_verifier_key(struct ledger *l, char **out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct note_signer *s = NULL;
    int rc = load_signer(l, &s, err);
    if (rc == FO_E_NOT_FOUND || (rc && l->readonly)) {
        /* A read-only reader may still have the public half. */
        char path[4096];
        char *text = NULL;
        size_t len = 0;
        struct fo_err e2;
        if (dir_path(l, LEDGER_VKEY_FILE, path, sizeof(path), &e2) == FO_OK &&
            read_key_file(path, 0, &text, &len, &e2) == FO_OK) {
            *out = text;
            return FO_OK;
        }
        return rc;
    }
    if (rc)
        return rc;
    rc = signer_vkey(l, s, out, err);
    note_signer_free(s);
    return rc;
}

/* ---- checkpoints ------------------------------------------------------- */

void ledger_checkpoint_release(struct ledger_checkpoint *c)
{
    if (!c)
        return;
    free(c->note);
    c->note = NULL;
}

int ledger_checkpoint_sign(struct ledger *l, int64_t size,
                           struct ledger_checkpoint *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (l->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", l->dir);
    struct note_signer *s = NULL;
    char *vkey = NULL;
    int rc = load_signer(l, &s, err);
    if (!rc) /* makes sure checkpoint.vkey is there beside the key */
        rc = signer_vkey(l, s, &vkey, err);
    free(vkey);
    if (rc) {
        note_signer_free(s);
        return rc;
    }
    struct fo_buf note;
    fo_buf_init(&note, NOTE_MAX_LEN);
    struct note_checkpoint cp;
    int64_t n = 0, got = -1;
    char *stored = NULL;
    uint8_t sroot[32];
    rc = l->ops->begin_write(l->store, err);
    if (rc)
        goto out;
    rc = resolve_size(l, size, "size", &n, err);
    if (!rc) {
        rc = l->ops->get_checkpoint(l->store, n, &got, sroot, &stored, err);
        if (rc == FO_E_NOT_FOUND)
            rc = FO_OK;
    }
    if (!rc && got == n) { /* signed before: keep the stored one */
        l->ops->rollback(l->store);
        out->size = n;
        memcpy(out->root, sroot, 32);
        out->note = stored;
        stored = NULL;
        goto out;
    }
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.origin, sizeof(cp.origin), "%s", l->origin);
    cp.size = (uint64_t)n;
    if (!rc)
        rc = root_at(l, n, cp.root, err);
    if (!rc)
        rc = note_checkpoint_sign(s, &cp, &note, err);
    if (!rc)
        rc = l->ops->put_checkpoint(l->store, n, ledger_now_us(), cp.root,
                                    note.data, err);
    if (!rc)
        rc = l->ops->commit(l->store, err);
    else
        l->ops->rollback(l->store);
    if (!rc) {
        out->size = n;
        memcpy(out->root, cp.root, 32);
        out->note = fo_buf_detach(&note, NULL);
        if (!out->note)
            rc = nomem(err);
    }
out:
    free(stored);
    fo_buf_release(&note);
    note_signer_free(s);
    return rc;
}

int ledger_checkpoint_latest(struct ledger *l, struct ledger_checkpoint *out,
                             struct fo_err *err)
{
    LEDGER_OWNED(l);
    char *note = NULL;
    int64_t size = 0;
    uint8_t root[32];
    int rc = l->ops->get_checkpoint(l->store, -1, &size, root, &note, err);
    if (rc)
        return rc;
    out->size = size;
    memcpy(out->root, root, 32);
    out->note = note;
    return FO_OK;
}

int ledger_checkpoint_get(struct ledger *l, struct ledger_checkpoint *out,
                          struct fo_err *err)
{
    LEDGER_OWNED(l);
    int rc = ledger_checkpoint_latest(l, out, err);
    if (rc != FO_E_NOT_FOUND || l->readonly)
        return rc;
    return ledger_checkpoint_sign(l, -1, out, err);
}

cJSON *ledger_checkpoint_json(const struct ledger_checkpoint *c)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && add_hex(o, "checkpoint", c->root) &&
             fo_json_add_int(o, "size", c->size) && add_hex(o, "root", c->root);
    if (ok)
        ok = c->note ? cJSON_AddStringToObject(o, "note", c->note) != NULL
                     : cJSON_AddNullToObject(o, "note") != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- verify against a checkpoint --------------------------------------- */

static void cp_fail(struct ledger_checkpoint_result *r, const char *reason,
                    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void cp_fail(struct ledger_checkpoint_result *r, const char *reason,
                    const char *fmt, ...)
{
    if (r->cp_reason)
        return; /* keep the first */
    r->cp_reason = reason;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
    va_end(ap);
}

struct stored_cp {
    int64_t size;
    uint8_t root[32];
};

struct stored_list {
    struct stored_cp *v;
    size_t n, cap;
};

static int collect_cp(void *ctx, int64_t size, const uint8_t root[32],
                      const char *note)
{
    (void)note;
    struct stored_list *s = ctx;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        struct stored_cp *nv = realloc(s->v, cap * sizeof(*nv));
        if (!nv)
            return FO_E_NOMEM;
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n].size = size;
    memcpy(s->v[s->n].root, root, 32);
    s->n++;
    return FO_OK;
}

/* Compares the given checkpoint and every stored one with the tree, in one
 * read snapshot. */
static int check_against_tree(struct ledger *l,
                              const struct note_checkpoint *cp,
                              struct ledger_checkpoint_result *r,
                              struct fo_err *err)
{
    struct stored_list list = {0};
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    int64_t count = 0;
    uint8_t root[32];
    rc = l->ops->head(l->store, &count, NULL, err);
    if (rc)
        goto out;
    if (cp->size > (uint64_t)count) {
        cp_fail(r, "checkpoint_beyond_log",
                "the checkpoint covers %llu entries but the log has %lld "
                "(truncated)",
                (unsigned long long)cp->size, (long long)count);
    } else {
        rc = root_at(l, (int64_t)cp->size, root, err);
        if (rc)
            goto out;
        if (memcmp(root, cp->root, 32) != 0)
            cp_fail(r, "checkpoint_mismatch",
                    "the log's root at size %llu differs from the "
                    "checkpoint's (rewritten)",
                    (unsigned long long)cp->size);
    }
    rc = l->ops->scan_checkpoints(l->store, collect_cp, &list, err);
    if (rc == FO_E_NOMEM)
        rc = nomem(err);
    for (size_t i = 0; !rc && i < list.n; i++) {
        r->stored_checked++;
        const char *bad = NULL;
        if (list.v[i].size > count) {
            bad = "beyond the log";
        } else {
            rc = root_at(l, list.v[i].size, root, err);
            if (!rc && memcmp(root, list.v[i].root, 32) != 0)
                bad = "root differs from the tree";
        }
        if (bad && r->first_bad_checkpoint < 0) {
            r->first_bad_checkpoint = list.v[i].size;
            cp_fail(r, "stored_checkpoint_mismatch",
                    "stored checkpoint at size %lld: %s",
                    (long long)list.v[i].size, bad);
        }
    }
out:
    l->ops->rollback(l->store);
    free(list.v);
    return rc;
}

int ledger_verify_checkpoint(struct ledger *l, unsigned flags, const char *note,
                             size_t len, const char *vkey, size_t vkey_len,
                             ledger_progress_fn progress, void *pctx,
                             struct ledger_checkpoint_result *res,
                             struct fo_err *err)
{
    LEDGER_OWNED(l);
    memset(res, 0, sizeof(*res));
    res->size = -1;
    res->first_bad_checkpoint = -1;
    struct note_verifier *v = NULL;
    int rc = note_verifier_parse(vkey, vkey_len, &v, err);
    if (rc) {
        fo_err_prefix(err, "vkey");
        return rc;
    }
    struct note_checkpoint cp;
    struct fo_err nerr;
    fo_err_clear(&nerr);
    rc = note_checkpoint_open(note, len, v, &cp, &nerr);
    note_verifier_free(v);
    if (rc == FO_E_INVALID) {
        if (err)
            *err = nerr;
        fo_err_prefix(err, "checkpoint");
        return rc;
    }
    if (rc != FO_OK && rc != FO_E_VERIFY) {
        if (err)
            *err = nerr;
        return rc;
    }
    rc = ledger_verify(l, flags, progress, pctx, &res->base, err);
    if (rc)
        return rc;
    if (nerr.code == FO_E_VERIFY) {
        cp_fail(res, "bad_signature", "%s", nerr.msg);
    } else {
        res->size = (int64_t)cp.size;
        memcpy(res->root, cp.root, 32);
        if (strcmp(cp.origin, l->origin) != 0)
            cp_fail(res, "origin_mismatch",
                    "the checkpoint's origin \"%.64s\" is not this ledger's "
                    "\"%.64s\"",
                    cp.origin, l->origin);
        else if ((rc = check_against_tree(l, &cp, res, err)) != FO_OK)
            return rc;
    }
    res->ok = res->base.ok && !res->cp_reason;
    res->reason = res->base.reason ? res->base.reason : res->cp_reason;
    if (!res->base.ok && !res->reason)
        res->reason = "bad_body";
    return FO_OK;
}

cJSON *ledger_checkpoint_result_json(const struct ledger_checkpoint_result *r)
{
    cJSON *o = ledger_verify_json(&r->base);
    cJSON *c = cJSON_CreateObject();
    if (!o || !c)
        goto fail;
    cJSON_DeleteItemFromObjectCaseSensitive(o, "ok");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "reason");
    if (!cJSON_AddBoolToObject(o, "ok", r->ok))
        goto fail;
    if (!(r->reason ? cJSON_AddStringToObject(o, "reason", r->reason)
                    : cJSON_AddNullToObject(o, "reason")))
        goto fail;
    int ok = cJSON_AddBoolToObject(c, "ok", !r->cp_reason) &&
             (r->cp_reason ? cJSON_AddStringToObject(c, "reason", r->cp_reason)
                           : cJSON_AddNullToObject(c, "reason")) &&
             (r->size >= 0 ? fo_json_add_int(c, "size", r->size)
                           : cJSON_AddNullToObject(c, "size")) &&
             (r->size >= 0 ? add_hex(c, "root", r->root)
                           : cJSON_AddNullToObject(c, "root") != NULL) &&
             (r->cp_reason ? cJSON_AddStringToObject(c, "detail", r->detail)
                           : cJSON_AddNullToObject(c, "detail")) &&
             fo_json_add_int(c, "stored_checked", r->stored_checked);
    if (!ok)
        goto fail;
    cJSON_AddItemToObject(o, "checkpoint", c);
    return o;
fail:
    cJSON_Delete(o);
    cJSON_Delete(c);
    return NULL;
}

/* ---- bundles ------------------------------------------------------------ */

int ledger_bundle(struct ledger *l, int64_t seq, cJSON **out,
                  struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct ledger_entry e;
    int present = 0;
    int rc = ledger_get(l, seq, &e, &present, err);
    if (rc)
        return rc;
    struct ledger_checkpoint cp = {0};
    struct ledger_inclusion *proof = malloc(sizeof(*proof));
    char *vkey = NULL, *body = NULL;
    size_t blen = 0;
    cJSON *o = NULL, *jbody = NULL;
    if (!proof)
        return nomem(err);
    rc = ledger_checkpoint_latest(l, &cp, err);
    if (rc == FO_E_NOT_FOUND || (rc == FO_OK && cp.size <= seq)) {
        ledger_checkpoint_release(&cp);
        if (l->readonly) {
            rc = fo_err_set(err, FO_E_NOT_FOUND,
                            "entry %lld: no signed checkpoint covers it yet "
                            "(sign one: forum ledger checkpoint --sign)",
                            (long long)seq);
            goto out;
        }
        rc = ledger_checkpoint_sign(l, -1, &cp, err);
    }
    if (rc)
        goto out;
    rc = ledger_prove_inclusion(l, seq, cp.size, proof, err);
    if (!rc)
        rc = ledger_verifier_key(l, &vkey, err);
    if (rc)
        goto out;
    if (present) {
        rc = ledger_body(l, seq, &body, &blen, err);
        if (rc == FO_OK)
            rc = fo_json_parse(body, blen, &jbody, err);
        else if (rc == FO_E_REDACTED)
            rc = FO_OK; /* redacted in between */
        if (rc)
            goto out;
    }
    o = cJSON_CreateObject();
    cJSON *je = ledger_entry_json(&e);
    cJSON *jp = ledger_inclusion_json(proof);
    if (je)
        cJSON_AddStringToObject(je, "body", jbody ? "present" : "redacted");
    if (!o || !je || !jp) {
        cJSON_Delete(je);
        cJSON_Delete(jp);
        rc = nomem(err);
        goto out;
    }
    cJSON_AddItemToObject(o, "entry", je);
    if (jbody) {
        cJSON_AddItemToObject(o, "body", jbody);
        jbody = NULL;
    } else if (!cJSON_AddNullToObject(o, "body")) {
        cJSON_Delete(jp);
        rc = nomem(err);
        goto out;
    }
    cJSON_AddItemToObject(o, "proof", jp);
    if (!cJSON_AddStringToObject(o, "checkpoint", cp.note) ||
        !cJSON_AddStringToObject(o, "vkey", vkey))
        rc = nomem(err);
out:
    if (rc) {
        cJSON_Delete(o);
        o = NULL;
    }
    cJSON_Delete(jbody);
    free(body);
    free(vkey);
    free(proof);
    ledger_checkpoint_release(&cp);
    if (!rc)
        *out = o;
    return rc;
}

/* A bundle has exactly the members ledger_bundle writes: anything else is
 * not covered by the entry hash, the body hash or the signature, so it is
 * refused rather than carried along as if verified. The entry's "body"
 * marker is served, not hashed: it must agree with the bundle's body. */
static int closed_shape(const cJSON *bundle, const cJSON *je, const cJSON *jb,
                        const cJSON *jp, struct fo_err *err)
{
    static const char *const top[] = {"entry", "body", "checkpoint", "proof",
                                      "vkey"};
    static const char *const entry[] = {"v",    "seq",    "ts",      "actor",
                                        "kind", "parent", "payload", "prev",
                                        "hash", "body"};
    static const char *const proof[] = {"index", "size", "leaf_hash", "root",
                                        "path"};
    const char *where = "bundle";
    int rc = fo_json_only_keys(bundle, top, sizeof(top) / sizeof(top[0]), err);
    if (!rc && cJSON_IsObject(je)) {
        where = "bundle: entry";
        rc =
            fo_json_only_keys(je, entry, sizeof(entry) / sizeof(entry[0]), err);
    }
    if (!rc && cJSON_IsObject(jp)) {
        where = "bundle: proof";
        rc =
            fo_json_only_keys(jp, proof, sizeof(proof) / sizeof(proof[0]), err);
    }
    if (rc) {
        fo_err_prefix(err, "%s", where);
        return rc;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(bundle, "vkey");
    if (v && !cJSON_IsString(v))
        return fo_err_set(err, FO_E_INVALID, "bundle: vkey: not a string");
    if (cJSON_IsObject(je) && !cJSON_GetObjectItemCaseSensitive(je, "hash"))
        return fo_err_set(err, FO_E_INVALID, "bundle: entry has no hash");
    const cJSON *mark = cJSON_IsObject(je)
                            ? cJSON_GetObjectItemCaseSensitive(je, "body")
                            : NULL;
    const char *want = cJSON_IsNull(jb) ? "redacted" : "present";
    if (mark && (!cJSON_IsString(mark) || strcmp(mark->valuestring, want)))
        return fo_err_set(err, FO_E_INVALID,
                          "bundle: entry: body must be \"%s\" when the "
                          "bundle's body is %s",
                          want, cJSON_IsNull(jb) ? "null" : "given");
    return FO_OK;
}

int ledger_bundle_verify(const cJSON *bundle, const char *vkey, size_t vkey_len,
                         struct fo_err *err)
{
    if (!cJSON_IsObject(bundle))
        return fo_err_set(err, FO_E_INVALID, "bundle: not a JSON object");
    const cJSON *je = cJSON_GetObjectItemCaseSensitive(bundle, "entry");
    const cJSON *jb = cJSON_GetObjectItemCaseSensitive(bundle, "body");
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(bundle, "checkpoint");
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(bundle, "proof");
    if (!je || !jb || !cJSON_IsString(jc) || !jp)
        return fo_err_set(err, FO_E_INVALID,
                          "bundle: needs entry, body, checkpoint and proof");
    int rc = closed_shape(bundle, je, jb, jp, err);
    if (rc)
        return rc;
    struct ledger_entry e;
    rc = ledger_entry_from_json(je, &e, err);
    if (rc) {
        fo_err_prefix(err, "bundle");
        return rc;
    }
    struct ledger_inclusion *p = malloc(sizeof(*p));
    if (!p)
        return nomem(err);
    struct note_verifier *v = NULL;
    struct note_checkpoint cp;
    rc = ledger_inclusion_from_json(jp, p, err);
    if (rc)
        goto out;
    rc = note_verifier_parse(vkey, vkey_len, &v, err);
    if (rc) {
        fo_err_prefix(err, "vkey");
        goto out;
    }
    /* 1. The checkpoint: signed by the key the caller trusts. */
    rc = note_checkpoint_open(jc->valuestring, strlen(jc->valuestring), v, &cp,
                              err);
    if (rc) {
        fo_err_prefix(err, "signature: the checkpoint does not verify with "
                           "the given key");
        rc = FO_E_VERIFY;
        if (err)
            err->code = rc;
        goto out;
    }
    /* 2. The entry: its hash recomputed from its fields. */
    uint8_t h[32];
    rc = ledger_entry_hash(&e, h);
    if (rc) {
        rc = fo_err_set(err, FO_E_INVALID, "bundle: entry cannot be encoded");
        goto out;
    }
    if (memcmp(h, e.hash, 32) != 0) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "entry hash: the entry's fields do not hash to its "
                        "\"hash\"");
        goto out;
    }
    /* 3. The body, when present, against the payload hash. */
    if (!cJSON_IsNull(jb)) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        rc = fo_json_canon(jb, &b, err);
        if (rc == FO_OK)
            fo_sha256(b.data ? b.data : "", b.len, h);
        fo_buf_release(&b);
        if (rc) {
            fo_err_prefix(err, "body");
            goto out;
        }
        if (memcmp(h, e.payload, 32) != 0) {
            rc = fo_err_set(err, FO_E_VERIFY,
                            "body: its canonical SHA-256 is not the entry's "
                            "payload hash");
            goto out;
        }
    }
    /* 4. The proof: for this entry, at the checkpoint's size and root. */
    if (p->size < 0 || (uint64_t)p->size != cp.size) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "size: the proof is for size %lld, the checkpoint "
                        "is at %llu",
                        (long long)p->size, (unsigned long long)cp.size);
        goto out;
    }
    if (memcmp(p->root, cp.root, 32) != 0) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "root: the proof's root is not the checkpoint's");
        goto out;
    }
    if (p->index != e.seq) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "proof: index %lld is not the entry's seq %lld",
                        (long long)p->index, (long long)e.seq);
        goto out;
    }
    uint8_t leaf[32];
    merkle_leaf_hash(NULL, e.hash, 32, leaf);
    if (memcmp(leaf, p->leaf_hash, 32) != 0) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "proof: leaf_hash is not the entry's leaf");
        goto out;
    }
    rc = merkle_verify_inclusion(leaf, (uint64_t)p->index, cp.size,
                                 (const uint8_t(*)[32])p->path, p->path_len,
                                 cp.root, err);
    if (rc) {
        fo_err_prefix(err, "proof: the inclusion proof does not lead to the "
                           "checkpoint's root");
        if (err)
            err->code = FO_E_VERIFY;
        rc = FO_E_VERIFY;
    }
out:
    note_verifier_free(v);
    free(p);
    return rc;
}
