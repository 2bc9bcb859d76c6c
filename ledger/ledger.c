/* ledger: appends, reads, verify and redaction over the storage interface.
 * The hash chain, the payload hashes and the Merkle tree are all maintained
 * here, in the same transaction as each append or batch. */
#include "ledger/ledger.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/rand.h>

#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger_int.h"
#include "ledger/merkle.h"
#include "ledger/proof.h"
#include "ledger/store.h"

int64_t ledger_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t ledger_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Tree nodes are stored by the position at which they complete: the index
 * of their last leaf, then the level. That order is the order of appends,
 * so every insert goes to the end of the table. */
int64_t ledger_node_pos(unsigned level, uint64_t index)
{
    uint64_t last = ((index + 1) << level) - 1;
    return (int64_t)(last << 6 | level);
}

static int valid_origin(const char *o)
{
    size_t n = strlen(o);
    if (n == 0 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)o[i];
        if (c <= 0x20 || c >= 0x7f || c == '+')
            return 0;
    }
    return 1;
}

static int init_identity(struct ledger *l, const struct ledger_config *cfg,
                         struct fo_err *err)
{
    const struct store_ops *ops = l->ops;
    int rc = ops->meta_get(l->store, "ledger_id", &l->id, err);
    if (rc == FO_OK) {
        rc = ops->meta_get(l->store, "origin", &l->origin, err);
        if (rc == FO_E_NOT_FOUND)
            rc = fo_err_set(err, FO_E_CORRUPT, "%s: no origin in meta", l->dir);
        return rc;
    }
    if (rc != FO_E_NOT_FOUND)
        return rc;
    if (l->readonly)
        return fo_err_set(err, FO_E_CORRUPT, "%s: ledger has no identity",
                          l->dir);
    /* First open after creation: fix the identity, under the write lock so
     * two processes creating at once agree. */
    rc = ops->begin_write(l->store, err);
    if (rc)
        return rc;
    rc = ops->meta_get(l->store, "ledger_id", &l->id, err);
    if (rc == FO_E_NOT_FOUND) {
        unsigned char raw[8];
        char hex[17];
        if (RAND_bytes(raw, sizeof(raw)) != 1) {
            rc = fo_err_set(err, FO_E_INTERNAL, "no randomness");
            goto fail;
        }
        fo_hex(raw, sizeof(raw), hex);
        char origin[300];
        if (cfg && cfg->origin)
            snprintf(origin, sizeof(origin), "%s", cfg->origin);
        else
            snprintf(origin, sizeof(origin), "forum/%s", hex);
        if (!valid_origin(origin)) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "origin \"%s\": 1-255 printable ASCII bytes, no "
                            "space or '+'",
                            origin);
            goto fail;
        }
        unsigned tml = cfg && cfg->tree_min_level ? cfg->tree_min_level
                                                  : LEDGER_TREE_MIN_LEVEL;
        if (tml < 1 || tml > 8) {
            rc = fo_err_set(err, FO_E_INVALID, "tree_min_level: 1 to 8");
            goto fail;
        }
        char tmls[4];
        snprintf(tmls, sizeof(tmls), "%u", tml);
        rc = ops->meta_set(l->store, "ledger_id", hex, err);
        if (!rc)
            rc = ops->meta_set(l->store, "tree_min_level", tmls, err);
        if (!rc)
            rc = ops->meta_set(l->store, "origin", origin, err);
        if (!rc)
            rc = ops->meta_set(l->store, "format", "forum-ledger/1", err);
        if (rc)
            goto fail;
        rc = ops->commit(l->store, err);
        if (rc)
            return rc;
        l->id = strdup(hex);
        l->origin = strdup(origin);
        return l->id && l->origin ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (rc == FO_OK)
        rc = ops->meta_get(l->store, "origin", &l->origin, err);
fail:
    ops->rollback(l->store);
    return rc;
}

int ledger_open(const char *dir, unsigned flags,
                const struct ledger_config *cfg, struct ledger **out,
                struct fo_err *err)
{
    if (fo_dir_check(dir, err) != FO_OK)
        return FO_E_INVALID;
    struct ledger *l = calloc(1, sizeof(*l));
    if (!l)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    struct store_conf conf;
    memset(&conf, 0, sizeof(conf));
    ledger_set_owner(l);
    l->ops = &store_sqlite_ops;
    l->readonly = (flags & LEDGER_OPEN_READONLY) != 0;
    l->max_body =
        cfg && cfg->max_body ? cfg->max_body : LEDGER_BODY_MAX_DEFAULT;
    l->dir = strdup(dir);
    l->sha = fo_sha_create();
    fo_buf_init(&l->scratch, FO_BUF_UNLIMITED);
    if (!l->dir || !l->sha) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    /* DIR/store.json chooses the store (none: SQLite in DIR/ledger.db) */
    rc = store_conf_read(dir, &conf, err);
    if (rc)
        goto fail;
    if (conf.postgres) {
        char db[PATH_MAX];
        struct stat st;
        snprintf(db, sizeof(db), "%s/ledger.db", dir);
        if (stat(db, &st) == 0) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "%s: holds both ledger.db and a %s naming "
                            "PostgreSQL; move one of them away",
                            dir, STORE_CONF_FILE);
            goto fail;
        }
        l->ops = &store_pg_ops;
    }
    unsigned sflags = 0;
    if (flags & LEDGER_OPEN_CREATE)
        sflags |= STORE_CREATE;
    if (l->readonly)
        sflags |= STORE_READONLY;
    rc = l->ops->open(dir, sflags, cfg ? cfg->busy_timeout_ms : 0, &l->store,
                      err);
    if (rc)
        goto fail;
    rc = init_identity(l, cfg, err);
    if (rc)
        goto fail;
    /* The database now holds this ledger: DIR/store.json pins it, so a
     * conninfo later pointed at another ledger's database is refused. */
    if (conf.postgres && !conf.ledger_id && !l->readonly) {
        if (!(conf.ledger_id = strdup(l->id))) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto fail;
        }
        rc = store_conf_write(dir, &conf, err);
        if (rc)
            goto fail;
    }
    /* A key creation killed mid-way left a whole private key behind. */
    if (!l->readonly)
        fo_file_clean_temps(dir, LEDGER_KEY_FILE);
    /* Which tree levels are stored: ledgers from before the key kept all. */
    char *tml = NULL;
    rc = l->ops->meta_get(l->store, "tree_min_level", &tml, err);
    if (rc == FO_E_NOT_FOUND) {
        l->tree_min_level = 1;
        rc = FO_OK;
    } else if (rc == FO_OK) {
        char *end = NULL;
        unsigned long v = strtoul(tml, &end, 10);
        if (end == tml || *end || v < 1 || v > 8)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "%s: meta tree_min_level \"%.16s\" is not 1-8", dir,
                            tml);
        l->tree_min_level = (unsigned)v;
        free(tml);
    }
    if (rc)
        goto fail;
    store_conf_free(&conf);
    *out = l;
    return FO_OK;
fail:
    store_conf_free(&conf);
    ledger_close(l);
    return rc;
}

int ledger_use_postgres(const char *dir, const char *conninfo,
                        struct fo_err *err)
{
    int rc = store_pg_check_conninfo(conninfo, err);
    if (rc)
        return rc;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return fo_err_set(err, FO_E_IO, "%s: %s", dir, strerror(errno));
    char db[PATH_MAX];
    struct stat st;
    snprintf(db, sizeof(db), "%s/ledger.db", dir);
    if (stat(db, &st) == 0)
        return fo_err_set(err, FO_E_EXISTS,
                          "%s: holds a SQLite ledger (ledger.db); to move it "
                          "to PostgreSQL, `forum ledger migrate --into "
                          "NEWDIR --postgres CONNINFO`",
                          dir);
    struct store_conf conf;
    rc = store_conf_read(dir, &conf, err);
    if (rc)
        return rc;
    if (conf.postgres && strcmp(conf.conninfo, conninfo) == 0) {
        store_conf_free(&conf);
        return FO_OK; /* chosen already */
    }
    /* one that never reached its database (no ledger id recorded) may be
     * replaced: a mistyped conninfo is fixed by running init again */
    if (conf.postgres && conf.ledger_id) {
        rc = fo_err_set(err, FO_E_EXISTS,
                        "%s/%s: names another PostgreSQL database, holding "
                        "ledger %.32s, already",
                        dir, STORE_CONF_FILE, conf.ledger_id);
        store_conf_free(&conf);
        return rc;
    }
    store_conf_free(&conf);
    struct store_conf want = {.postgres = 1, .conninfo = strdup(conninfo)};
    rc = want.conninfo ? store_conf_write(dir, &want, err)
                       : fo_err_set(err, FO_E_NOMEM, NULL);
    store_conf_free(&want);
    return rc;
}

const char *ledger_store_name(const struct ledger *l)
{
    return l->ops->name;
}

void ledger_close(struct ledger *l)
{
    if (!l)
        return;
    if (l->store)
        l->ops->close(l->store);
    fo_sha_free(l->sha);
    fo_buf_release(&l->scratch);
    free(l->id);
    free(l->origin);
    free(l->dir);
    free(l);
}

void ledger_set_owner(struct ledger *l)
{
#ifdef FORUM_OWNER_ASSERTS
    l->owner = pthread_self();
#else
    (void)l;
#endif
}

#ifdef FORUM_OWNER_ASSERTS
void ledger_owner_assert(const struct ledger *l, const char *fn)
{
    if (pthread_equal(l->owner, pthread_self()))
        return;
    fprintf(stderr,
            "forum: %s: ledger handle %p (%s) used by a thread that does not "
            "own it (owner set at ledger_open or ledger_set_owner)\n",
            fn, (const void *)l, l->dir ? l->dir : "?");
    fflush(stderr);
    abort();
}
#endif

const char *ledger_id(const struct ledger *l)
{
    return l->id;
}

const char *ledger_origin(const struct ledger *l)
{
    return l->origin;
}

const char *ledger_dir(const struct ledger *l)
{
    return l->dir;
}

size_t ledger_max_body(const struct ledger *l)
{
    return l->max_body;
}

int ledger_storage_check(struct ledger *l, struct fo_err *err)
{
    LEDGER_OWNED(l);
    return l->ops->check(l->store, err);
}

void ledger_fail_commit_after(struct ledger *l, int n)
{
    l->ops->fail_commit_after(l->store, n);
}

void ledger_fail_commits_after(int n)
{
    store_sqlite_fail_any_after(n);
}

void ledger_bench_skip_tree(struct ledger *l, int on)
{
    l->skip_tree = on;
    l->head_cached = 0;
}

/* ---- entries ---------------------------------------------------------- */

static void rec_to_entry(const struct store_rec *r, struct ledger_entry *e)
{
    e->seq = r->seq;
    e->ts = r->ts;
    e->parent = r->parent;
    memcpy(e->actor, r->actor, r->actor_len);
    e->actor[r->actor_len] = '\0';
    memcpy(e->kind, r->kind, r->kind_len);
    e->kind[r->kind_len] = '\0';
    memcpy(e->payload, r->payload, 32);
    memcpy(e->prev, r->prev, 32);
    memcpy(e->hash, r->hash, 32);
}

/* Encoding the hashed fields is on the hot path of append and verify, so
 * it writes bytes directly rather than through printf. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_lit(char *p, const char *lit, size_t n)
{
    memcpy(p, lit, n);
    return p + n;
}

static char *put_hex(char *p, const uint8_t h[32])
{
    *p++ = '"';
    fo_hex(h, 32, p);
    p[64] = '"';
    return p + 65;
}

/* Appends a JSON string: plain bytes copied, anything needing an escape
 * through the JCS writer. */
static int put_str(struct fo_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            return fo_json_string(s, n, b);
    }
    int rc = fo_buf_putc(b, '"');
    if (!rc)
        rc = fo_buf_append(b, s, n);
    if (!rc)
        rc = fo_buf_putc(b, '"');
    return rc;
}

/* Writes the JCS form of the hashed fields, and of "hash" too when hash is
 * not NULL (the served form). Keys in UTF-16 order: actor, [hash,] kind,
 * parent, payload, prev, seq, ts, v. */
static int entry_write(const struct ledger_entry *e, size_t actor_len,
                       size_t kind_len, const uint8_t *hash, struct fo_buf *b)
{
    char tail[256], *p = tail;
    int rc = fo_buf_append(b, "{\"actor\":", 9);
    if (!rc)
        rc = put_str(b, e->actor, actor_len);
    if (!rc && hash) {
        char h[80], *q = put_lit(h, ",\"hash\":", 8);
        q = put_hex(q, hash);
        rc = fo_buf_append(b, h, (size_t)(q - h));
    }
    if (!rc)
        rc = fo_buf_append(b, ",\"kind\":", 8);
    if (!rc)
        rc = put_str(b, e->kind, kind_len);
    if (rc)
        return rc;
    p = put_lit(p, ",\"parent\":", 10);
    if (e->parent < 0)
        p = put_lit(p, "null", 4);
    else
        p = put_u64(p, (uint64_t)e->parent);
    p = put_lit(p, ",\"payload\":", 11);
    p = put_hex(p, e->payload);
    p = put_lit(p, ",\"prev\":", 8);
    p = put_hex(p, e->prev);
    p = put_lit(p, ",\"seq\":", 7);
    p = put_u64(p, (uint64_t)e->seq);
    p = put_lit(p, ",\"ts\":", 6);
    p = put_u64(p, (uint64_t)e->ts);
    p = put_lit(p, ",\"v\":1}", 7);
    return fo_buf_append(b, tail, (size_t)(p - tail));
}

static int entry_canon(const struct ledger_entry *e, size_t actor_len,
                       size_t kind_len, struct fo_buf *b)
{
    return entry_write(e, actor_len, kind_len, NULL, b);
}

int ledger_entry_text(const struct ledger_entry *e, struct fo_buf *out)
{
    return entry_write(e, strlen(e->actor), strlen(e->kind), e->hash, out);
}

int ledger_entry_canon(const struct ledger_entry *e, struct fo_buf *out)
{
    return entry_canon(e, strlen(e->actor), strlen(e->kind), out);
}

int ledger_entry_hash(const struct ledger_entry *e, uint8_t out[32])
{
    struct fo_buf b;
    fo_buf_init(&b, 4096);
    int rc = ledger_entry_canon(e, &b);
    if (rc == FO_OK)
        fo_sha256(b.data, b.len, out);
    fo_buf_release(&b);
    return rc;
}

/* The entry hash with the ledger's reused hasher and scratch buffer. */
static int hash_entry(struct ledger *l, const struct ledger_entry *e,
                      size_t actor_len, size_t kind_len, uint8_t out[32])
{
    fo_buf_reset(&l->scratch);
    int rc = entry_canon(e, actor_len, kind_len, &l->scratch);
    if (rc == FO_OK)
        fo_sha_digest(l->sha, l->scratch.data, l->scratch.len, out);
    return rc;
}

cJSON *ledger_entry_json(const struct ledger_entry *e)
{
    char hex[65];
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = fo_json_add_int(o, "v", 1) && fo_json_add_int(o, "seq", e->seq) &&
             fo_json_add_int(o, "ts", e->ts) &&
             cJSON_AddStringToObject(o, "actor", e->actor) &&
             cJSON_AddStringToObject(o, "kind", e->kind);
    if (ok)
        ok = e->parent < 0 ? cJSON_AddNullToObject(o, "parent") != NULL
                           : fo_json_add_int(o, "parent", e->parent) != NULL;
    fo_hex(e->payload, 32, hex);
    ok = ok && cJSON_AddStringToObject(o, "payload", hex);
    fo_hex(e->prev, 32, hex);
    ok = ok && cJSON_AddStringToObject(o, "prev", hex);
    fo_hex(e->hash, 32, hex);
    ok = ok && cJSON_AddStringToObject(o, "hash", hex);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int json_hash(const cJSON *obj, const char *key, uint8_t out[32],
                     struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || fo_unhex(v->valuestring, out, 32) != FO_OK)
        return fo_err_set(err, FO_E_INVALID, "%s: not a 64-digit hex hash",
                          key);
    return FO_OK;
}

static int json_text(const cJSON *obj, const char *key, char *out, size_t max,
                     struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) > max)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: not a string of at most %zu "
                          "bytes",
                          key, max);
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return FO_OK;
}

int ledger_entry_from_json(const cJSON *obj, struct ledger_entry *e,
                           struct fo_err *err)
{
    memset(e, 0, sizeof(*e));
    if (!cJSON_IsObject(obj))
        return fo_err_set(err, FO_E_INVALID, "entry: not an object");
    long long v = 0, seq = 0, ts = 0, parent = -1;
    int rc = fo_json_get_int(obj, "v", 1, 1, &v);
    if (rc)
        return fo_err_set(err, FO_E_INVALID, "entry: v must be 1");
    if (fo_json_get_int(obj, "seq", 0, INT64_MAX, &seq) ||
        fo_json_get_int(obj, "ts", 0, INT64_MAX, &ts))
        return fo_err_set(err, FO_E_INVALID, "entry: bad seq or ts");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "parent");
    if (!cJSON_IsNull(p) &&
        fo_json_get_int(obj, "parent", 0, INT64_MAX, &parent))
        return fo_err_set(err, FO_E_INVALID, "entry: bad parent");
    e->seq = seq;
    e->ts = ts;
    e->parent = parent;
    if ((rc = json_text(obj, "actor", e->actor, LEDGER_ACTOR_MAX, err)) ||
        (rc = json_text(obj, "kind", e->kind, LEDGER_KIND_MAX, err)) ||
        (rc = json_hash(obj, "payload", e->payload, err)) ||
        (rc = json_hash(obj, "prev", e->prev, err)))
        return rc;
    if (cJSON_GetObjectItemCaseSensitive(obj, "hash"))
        return json_hash(obj, "hash", e->hash, err);
    return FO_OK;
}

/* ---- validation ------------------------------------------------------- */

int ledger_check_actor(const char *actor, struct fo_err *err)
{
    size_t n = actor ? strlen(actor) : 0;
    if (n == 0 || n > LEDGER_ACTOR_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "actor: must be 1-%d bytes (got %zu)",
                          LEDGER_ACTOR_MAX, n);
    if (!fo_utf8_valid(actor, n))
        return fo_err_set(err, FO_E_INVALID, "actor: not valid UTF-8");
    return FO_OK;
}

int ledger_check_kind(const char *kind, struct fo_err *err)
{
    size_t n = kind ? strlen(kind) : 0;
    if (n == 0 || n > LEDGER_KIND_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "kind: must be 1-%d bytes (got %zu)", LEDGER_KIND_MAX,
                          n);
    for (size_t i = 0; i < n; i++) {
        char c = kind[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return fo_err_set(err, FO_E_INVALID,
                              "kind \"%.64s\": only [a-z0-9_.-] allowed", kind);
    }
    return FO_OK;
}

/* ---- the tree as seen by merkle.c ------------------------------------- */

int ledger_tree_node(void *ctx, unsigned level, uint64_t index, uint8_t out[32],
                     struct fo_err *err)
{
    struct ledger *l = ctx;
    if (level > 0 && level < l->tree_min_level) {
        /* not stored: recompute from the two halves (at most 2^level
         * entry reads) */
        uint8_t left[32], right[32];
        int rc = ledger_tree_node(ctx, level - 1, index * 2, left, err);
        if (!rc)
            rc = ledger_tree_node(ctx, level - 1, index * 2 + 1, right, err);
        if (!rc)
            merkle_node_hash(l->sha, left, right, out);
        return rc;
    }
    if (level > 0)
        return l->ops->get_node(l->store, ledger_node_pos(level, index), out,
                                err);
    struct store_rec r;
    int rc = l->ops->get_entry(l->store, (int64_t)index, &r, NULL, err);
    if (rc == FO_E_NOT_FOUND)
        rc = fo_err_set(err, FO_E_CORRUPT, "tree leaf %llu: no entry",
                        (unsigned long long)index);
    if (rc)
        return rc;
    merkle_leaf_hash(l->sha, r.hash, 32, out);
    return FO_OK;
}

/* ---- appends ---------------------------------------------------------- */

/* Loads the head inside a transaction; from this handle's cache when the
 * stored head is the one the cache was taken at. */
static int load_head(struct ledger *l, struct ledger_head *h,
                     struct fo_err *err)
{
    struct store_rec last;
    int rc = l->ops->head(l->store, &h->count, &last, err);
    if (rc)
        return rc;
    if (l->head_cached && h->count > 0 && l->head_cache.count == h->count &&
        memcmp(l->head_cache.prev, last.hash, 32) == 0) {
        *h = l->head_cache;
        return FO_OK;
    }
    if (h->count == 0) {
        h->ts = 0;
        memset(h->prev, 0, 32);
        merkle_frontier_init(&h->tree);
        return FO_OK;
    }
    h->ts = last.ts;
    memcpy(h->prev, last.hash, 32);
    if (l->skip_tree)
        return FO_OK;
    return merkle_frontier_load(&h->tree, ledger_tree_node, l,
                                (uint64_t)h->count, err);
}

int ledger_load_head(struct ledger *l, struct ledger_head *h,
                     struct fo_err *err)
{
    return load_head(l, h, err);
}

/* After a write transaction: keeps the committed head, or forgets the cache
 * (h NULL) when the transaction did not commit. */
static void head_keep(struct ledger *l, const struct ledger_head *h)
{
    l->head_cached = h && h->count > 0;
    if (l->head_cached)
        l->head_cache = *h;
}

void ledger_head_keep(struct ledger *l, const struct ledger_head *h)
{
    head_keep(l, h);
}

int ledger_head_root(struct ledger *l, int64_t *count, uint8_t root[32],
                     struct fo_err *err)
{
    if (l->skip_tree) { /* no tree kept: from the entries */
        int rc = l->ops->head(l->store, count, NULL, err);
        return rc ? rc
                  : merkle_root(ledger_tree_node, l, (uint64_t)*count, root,
                                err);
    }
    struct ledger_head *h = malloc(sizeof(*h));
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = load_head(l, h, err);
    if (rc == FO_OK) {
        *count = h->count;
        if (h->count == 0) {
            merkle_empty_root(root);
        } else {
            merkle_frontier_root(&h->tree, l->sha, root);
            head_keep(l, h); /* committed state: the next append may reuse it */
        }
    }
    free(h);
    return rc;
}

struct emit_ctx {
    struct ledger *l;
    struct fo_err *err;
};

static int emit_node(void *ctx, unsigned level, uint64_t index,
                     const uint8_t hash[32])
{
    struct emit_ctx *e = ctx;
    if (level < e->l->tree_min_level)
        return FO_OK; /* recomputed from the entries when needed */
    return e->l->ops->put_node(e->l->store, ledger_node_pos(level, index), hash,
                               e->err);
}

static int check_req(struct ledger *l, const struct ledger_append *r,
                     const struct ledger_staged *st, int64_t seq,
                     struct fo_err *err)
{
    int rc = ledger_check_actor(r->actor, err);
    if (!rc)
        rc = ledger_check_kind(r->kind, err);
    if (rc)
        return rc;
    if (r->parent != LEDGER_NO_PARENT && (r->parent < 0 || r->parent >= seq))
        return fo_err_set(err, FO_E_INVALID,
                          "parent %lld: must be an existing seq below %lld",
                          (long long)r->parent, (long long)seq);
    if (!r->body && !r->import && !st)
        return fo_err_set(err, FO_E_INVALID, "payload: missing");
    if (r->import && r->import->seq != seq)
        return fo_err_set(err, FO_E_CORRUPT,
                          "entry %lld: out of order (the next seq is %lld)",
                          (long long)r->import->seq, (long long)seq);
    size_t len = st ? st->body_len : r->body_len;
    if ((r->body || st) && len > l->max_body)
        return fo_err_set(err, FO_E_TOO_LARGE,
                          "payload: %zu bytes in canonical form; the limit "
                          "is %zu",
                          len, l->max_body);
    return FO_OK;
}

/* Appends one checked request at the head, inside the transaction. */
static int append_one(struct ledger *l, struct ledger_head *h,
                      struct ledger_append *r, const struct ledger_staged *st,
                      struct fo_err *err)
{
    struct ledger_entry *e = &r->entry;
    struct store_rec rec;
    e->seq = h->count;
    int64_t ts = ledger_now_us();
    e->ts = ts > h->ts ? ts : h->ts;
    if (r->import) {
        if (r->import->ts < h->ts)
            return fo_err_set(err, FO_E_CORRUPT,
                              "entry %lld: its ts goes back in time",
                              (long long)e->seq);
        e->ts = r->import->ts;
    }
    e->parent = r->parent;
    size_t an = strlen(r->actor), kn = strlen(r->kind);
    memcpy(e->actor, r->actor, an + 1);
    memcpy(e->kind, r->kind, kn + 1);
    if (st) /* hashed by its writer; the body stays on the server */
        memcpy(e->payload, st->payload, 32);
    else if (r->body)
        fo_sha_digest(l->sha, r->body, r->body_len, e->payload);
    else
        memcpy(e->payload, r->import->payload, 32);
    memcpy(e->prev, h->prev, 32);
    int rc = hash_entry(l, e, an, kn, e->hash);
    if (rc)
        return fo_err_set(err, rc, "entry: cannot encode");
    if (r->import && memcmp(e->payload, r->import->payload, 32))
        return fo_err_set(err, FO_E_CORRUPT,
                          "entry %lld: the body does not match its payload "
                          "hash",
                          (long long)e->seq);
    if (r->import && memcmp(e->hash, r->import->hash, 32))
        return fo_err_set(err, FO_E_CORRUPT,
                          "entry %lld: its hash does not match (the entry "
                          "or one before it was changed)",
                          (long long)e->seq);
    rec.seq = e->seq;
    rec.ts = e->ts;
    rec.parent = e->parent;
    memcpy(rec.actor, e->actor, an);
    rec.actor_len = an;
    memcpy(rec.kind, e->kind, kn);
    rec.kind_len = kn;
    memcpy(rec.payload, e->payload, 32);
    memcpy(rec.prev, e->prev, 32);
    memcpy(rec.hash, e->hash, 32);
    rc = l->ops->put_entry(l->store, &rec, st ? NULL : r->body,
                           st ? 0 : r->body_len, err);
    if (rc)
        return rc;
    if (!l->skip_tree) {
        uint8_t leaf[32];
        merkle_leaf_hash(l->sha, e->hash, 32, leaf);
        struct emit_ctx ec = {l, err};
        rc = merkle_frontier_push(&h->tree, l->sha, leaf, emit_node, &ec);
        if (rc)
            return rc;
    }
    h->count++;
    h->ts = e->ts;
    memcpy(h->prev, e->hash, 32);
    return FO_OK;
}

/* The lease checks of one batch: one query per run and owner. */
#define FENCE_MAX 32
struct fence {
    size_t n, next;
    struct {
        int64_t run;
        const char *owner;
        int held;
    } e[FENCE_MAX];
};

static void fence_note(struct fence *f, int64_t run, const char *owner,
                       int held)
{
    size_t i = f->n < FENCE_MAX ? f->n++ : f->next++ % FENCE_MAX;
    f->e[i].run = run;
    f->e[i].owner = owner;
    f->e[i].held = held;
}

/* Inside the write transaction: r goes in only while its owner holds the
 * run's lease (r->rc FO_E_RUN_ELSEWHERE when not). A store error fails the
 * batch. */
static int fence(struct ledger *l, struct fence *f, struct ledger_append *r,
                 struct fo_err *err)
{
    int held = -1;
    for (size_t i = 0; i < f->n && held < 0; i++)
        if (f->e[i].run == r->lease_run &&
            !strcmp(f->e[i].owner, r->lease_owner))
            held = f->e[i].held;
    if (held < 0) {
        int rc = l->ops->lease_held(l->store, r->lease_run, r->lease_owner,
                                    &held, err);
        if (rc)
            return rc;
        fence_note(f, r->lease_run, r->lease_owner, held);
    }
    if (!held)
        r->rc = fo_err_set(&r->err, FO_E_RUN_ELSEWHERE,
                           "run %lld: its lease was taken over by another "
                           "daemon; this process no longer runs it",
                           (long long)r->lease_run);
    return FO_OK;
}

struct sole {
    const struct ledger_append *r;
    int64_t seq; /* the child already there, or -1 */
    char kind[STORE_KIND_MAX + 1];
};

static int sole_row(void *ctx, const struct store_row *row)
{
    struct sole *c = ctx;
    if (c->seq >= 0 || row->rec.parent != c->r->parent)
        return 0; /* (a non-zero return would be the scan's error code) */
    for (const char *const *k = c->r->sole_kinds; *k; k++)
        if (!strcmp(row->rec.kind, *k)) {
            c->seq = row->rec.seq;
            snprintf(c->kind, sizeof(c->kind), "%s", row->rec.kind);
            break;
        }
    return 0;
}

/* Inside the write transaction: r goes in only while its parent has no
 * child of r->sole_kinds (r->rc FO_E_EXISTS when it has). The parent's
 * first children come first in its descendants (seq order), so a few rows
 * are read. A store error fails the batch. */
static int sole(struct ledger *l, struct ledger_append *r, struct fo_err *err)
{
    struct sole c = {.r = r, .seq = -1};
    int rc = l->ops->descendants(l->store, r->parent, 64, sole_row, &c, err);
    if (rc == FO_OK && c.seq >= 0)
        r->entry.seq = c.seq;
    if (rc == FO_OK && c.seq >= 0)
        r->rc = fo_err_set(&r->err, FO_E_EXISTS,
                           "entry %lld: already decided by seq %lld (%s)",
                           (long long)r->parent, (long long)c.seq, c.kind);
    return rc;
}

int ledger_append_reqs(struct ledger *l, struct ledger_head *h,
                       struct ledger_append *reqs, size_t n,
                       const struct ledger_staged *staged, struct fo_err *err)
{
    int rc = FO_OK;
    struct fence fc = {0};
    for (size_t i = 0; rc == FO_OK && i < n; i++) {
        struct ledger_append *r = &reqs[i];
        const struct ledger_staged *st = staged ? &staged[i] : NULL;
        fo_err_clear(&r->err);
        int64_t back = r->parent_back;
        if (back > 0 && ((uint64_t)back > i || reqs[i - back].rc != FO_OK)) {
            r->rc = fo_err_set(&r->err, FO_E_INVALID,
                               "parent_back %lld: no entry appended "
                               "that far back in the batch",
                               (long long)back);
            continue;
        }
        if (back > 0)
            r->parent = reqs[i - back].entry.seq;
        r->rc = check_req(l, r, st, h->count, &r->err);
        if (r->rc == FO_OK && r->lease_owner && r->lease_run >= 0 &&
            l->ops->lease_held)
            rc = fence(l, &fc, r, err);
        if (rc == FO_OK && r->rc == FO_OK && r->sole_kinds && r->parent >= 0)
            rc = sole(l, r, err);
        if (rc == FO_OK && r->rc == FO_OK)
            rc = append_one(l, h, r, st, err);
        if (rc == FO_OK && r->rc == FO_OK && r->lease_owner &&
            r->lease_run < 0 && l->ops->lease_put) {
            rc = l->ops->lease_put(l->store, r->entry.seq, r->lease_owner,
                                   r->lease_ms, err);
            /* this batch's own fence checks of that run see it */
            if (rc == FO_OK)
                fence_note(&fc, r->entry.seq, r->lease_owner, 1);
        }
    }
    return rc;
}

void ledger_fail_reqs(struct ledger_append *reqs, size_t n, int rc,
                      const struct fo_err *err)
{
    for (size_t i = 0; i < n; i++) {
        reqs[i].rc = rc;
        if (err)
            reqs[i].err = *err;
        else
            fo_err_set(&reqs[i].err, rc, NULL);
    }
}

int ledger_append_batch(struct ledger *l, struct ledger_append *reqs, size_t n,
                        struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (l->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", l->dir);
    struct ledger_head *h = malloc(sizeof(*h));
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = l->ops->begin_write(l->store, err);
    if (rc)
        goto out;
    rc = load_head(l, h, err);
    if (rc == FO_OK)
        rc = ledger_append_reqs(l, h, reqs, n, NULL, err);
    if (rc == FO_OK)
        rc = l->ops->commit(l->store, err);
    else
        l->ops->rollback(l->store);
    head_keep(l, rc == FO_OK ? h : NULL);
out:
    free(h);
    if (rc)
        ledger_fail_reqs(reqs, n, rc, err);
    return rc;
}

int ledger_hold(struct ledger *l, int on, int keep, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->hold)
        return FO_OK;
    if (on && l->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", l->dir);
    int rc = l->ops->hold(l->store, on, keep, err);
    if (!on && (!keep || rc))
        head_keep(l, NULL); /* the head appended under the hold is gone */
    return rc;
}

int ledger_can_hold(const struct ledger *l)
{
    return l->ops->hold != NULL;
}

int ledger_leases(const struct ledger *l)
{
    return l->ops->lease_claim != NULL;
}

static int no_leases(const struct ledger *l, struct fo_err *err)
{
    return fo_err_set(err, FO_E_INVALID,
                      "%s: the %s store keeps no run leases (one daemon per "
                      "ledger)",
                      l->dir, l->ops->name);
}

int ledger_lease_claim(struct ledger *l, int64_t run, const char *owner,
                       int ttl_ms, int *got, struct fo_err *err)
{
    LEDGER_OWNED(l);
    *got = 0;
    if (!l->ops->lease_claim)
        return no_leases(l, err);
    if (l->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", l->dir);
    return l->ops->lease_claim(l->store, run, owner, ttl_ms, got, err);
}

int ledger_lease_renew(struct ledger *l, const char *owner, const int64_t *runs,
                       size_t n, int ttl_ms, int (*fn)(void *ctx, int64_t run),
                       void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->lease_renew)
        return no_leases(l, err);
    return l->ops->lease_renew(l->store, owner, runs, n, ttl_ms, fn, ctx, err);
}

int ledger_lease_release(struct ledger *l, int64_t run, const char *owner,
                         int drop, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->lease_release)
        return no_leases(l, err);
    return l->ops->lease_release(l->store, run, owner, drop, err);
}

int ledger_lease_get(struct ledger *l, int64_t run, char *owner, size_t cap,
                     int *live, struct fo_err *err)
{
    LEDGER_OWNED(l);
    *live = 0;
    if (!l->ops->lease_get)
        return no_leases(l, err);
    return l->ops->lease_get(l->store, run, owner, cap, live, err);
}

int ledger_lease_expired(struct ledger *l, int64_t limit,
                         int (*fn)(void *ctx, int64_t run), void *ctx,
                         struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->lease_expired)
        return no_leases(l, err);
    return l->ops->lease_expired(l->store, limit, fn, ctx, err);
}

int ledger_append(struct ledger *l, const char *actor, const char *kind,
                  int64_t parent, const char *body, size_t body_len,
                  struct ledger_entry *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct ledger_append r = {.actor = actor,
                              .kind = kind,
                              .parent = parent,
                              .body = body,
                              .body_len = body_len};
    int rc = ledger_append_batch(l, &r, 1, err);
    if (rc)
        return rc;
    if (r.rc) {
        if (err)
            *err = r.err;
        return r.rc;
    }
    if (out)
        *out = r.entry;
    return FO_OK;
}

int ledger_append_json(struct ledger *l, const char *actor, const char *kind,
                       int64_t parent, const cJSON *payload,
                       struct ledger_entry *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct fo_buf b;
    fo_buf_init(&b, l->max_body);
    int rc = fo_json_canon(payload, &b, err);
    if (rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_TOO_LARGE,
                        "payload: over %zu bytes in canonical form",
                        l->max_body);
    if (rc == FO_OK)
        rc = ledger_append(l, actor, kind, parent, b.data ? b.data : "", b.len,
                           out, err);
    fo_buf_release(&b);
    return rc;
}

/* ---- reads ------------------------------------------------------------ */

int ledger_probe(struct ledger *l, int write, struct fo_err *err)
{
    LEDGER_OWNED(l);
    int64_t count = 0;
    if (!write || l->readonly)
        return l->ops->head(l->store, &count, NULL, err);
    int rc = l->ops->begin_write(l->store, err);
    if (rc)
        return rc;
    char ts[32];
    snprintf(ts, sizeof(ts), "%lld", (long long)ledger_now_us());
    rc = l->ops->meta_set(l->store, "health_probe", ts, err);
    if (rc == FO_OK)
        rc = l->ops->commit(l->store, err);
    else
        l->ops->rollback(l->store);
    return rc;
}

int ledger_count(struct ledger *l, int64_t *count, struct fo_err *err)
{
    LEDGER_OWNED(l);
    return l->ops->head(l->store, count, NULL, err);
}

int ledger_get(struct ledger *l, int64_t seq, struct ledger_entry *out,
               int *body_present, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct store_rec r;
    if (seq < 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "entry %lld: not found",
                          (long long)seq);
    int rc = l->ops->get_entry(l->store, seq, &r, body_present, err);
    if (rc == FO_OK)
        rec_to_entry(&r, out);
    return rc;
}

int ledger_body(struct ledger *l, int64_t seq, char **body, size_t *len,
                struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct ledger_entry e;
    int present = 0;
    int rc = ledger_get(l, seq, &e, &present, err);
    if (rc)
        return rc;
    if (!present)
        return fo_err_set(err, FO_E_REDACTED, "entry %lld: body redacted",
                          (long long)seq);
    void *b = NULL;
    size_t n = 0;
    rc = l->ops->get_body(l->store, seq, &b, &n, err);
    if (rc == FO_E_NOT_FOUND)
        return fo_err_set(err, FO_E_REDACTED, "entry %lld: body redacted",
                          (long long)seq);
    if (rc)
        return rc;
    uint8_t h[32];
    fo_sha_digest(l->sha, b, n, h);
    if (memcmp(h, e.payload, 32) != 0) {
        free(b);
        return fo_err_set(err, FO_E_CORRUPT,
                          "entry %lld: stored body does not match its "
                          "payload hash",
                          (long long)seq);
    }
    *body = b;
    *len = n;
    return FO_OK;
}

/* Stops a payload search; distinct from every fo_code. */
#define FOUND (-1)

struct find_ctx {
    struct ledger *l;
    int64_t found; /* first entry with the payload, -1 none */
    char *body;
    size_t len;
    struct fo_err *err;
};

static int find_body(void *ctx, int64_t seq)
{
    struct find_ctx *f = ctx;
    if (f->found < 0)
        f->found = seq;
    int rc = ledger_body(f->l, seq, &f->body, &f->len, f->err);
    if (rc == FO_OK)
        return FOUND; /* stop: found a copy */
    return rc == FO_E_REDACTED ? FO_OK : rc;
}

int ledger_body_by_hash(struct ledger *l, const uint8_t hash[32], char **body,
                        size_t *len, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct find_ctx f = {l, -1, NULL, 0, err};
    int rc = l->ops->find_payload(l->store, hash, find_body, &f, err);
    if (rc == FOUND) {
        *body = f.body;
        *len = f.len;
        return FO_OK;
    }
    if (rc)
        return rc;
    if (f.found < 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "no entry has that payload");
    return fo_err_set(err, FO_E_REDACTED,
                      "every copy of that body was "
                      "redacted");
}

struct range_ctx {
    ledger_entry_fn fn;
    void *ctx;
};

static int range_row(void *ctx, const struct store_row *row)
{
    struct range_ctx *r = ctx;
    struct ledger_entry e;
    rec_to_entry(&row->rec, &e);
    return r->fn(r->ctx, &e);
}

struct bodies_ctx {
    ledger_body_fn fn;
    void *ctx;
};

static int bodies_row(void *ctx, const struct store_row *row)
{
    struct bodies_ctx *b = ctx;
    struct ledger_entry e;
    rec_to_entry(&row->rec, &e);
    return b->fn(b->ctx, &e, row->body, row->body_len);
}

int ledger_range_bodies(struct ledger *l, int64_t from, int64_t limit,
                        ledger_body_fn fn, void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct bodies_ctx b = {fn, ctx};
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    rc = l->ops->scan(l->store, from < 0 ? 0 : from, limit, 1, bodies_row, &b,
                      err);
    l->ops->rollback(l->store);
    return rc;
}

int ledger_range(struct ledger *l, int64_t from, int64_t limit,
                 ledger_entry_fn fn, void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct range_ctx r = {fn, ctx};
    return l->ops->scan(l->store, from < 0 ? 0 : from, limit, 0, range_row, &r,
                        err);
}

int ledger_descendants(struct ledger *l, int64_t root, int64_t limit,
                       ledger_entry_fn fn, void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct range_ctx r = {fn, ctx};
    return l->ops->descendants(l->store, root, limit, range_row, &r, err);
}

int ledger_requests(struct ledger *l, int64_t from, ledger_entry_fn fn,
                    void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct range_ctx r = {fn, ctx};
    return l->ops->requests(l->store, from < 0 ? 0 : from, range_row, &r, err);
}

int ledger_marked(struct ledger *l, int which, int64_t from, ledger_entry_fn fn,
                  void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->marked)
        return fo_err_set(err, FO_E_INVALID,
                          "this ledger's store cannot list sessions");
    struct range_ctx r = {fn, ctx};
    return l->ops->marked(l->store, which, from < 0 ? 0 : from, range_row, &r,
                          err);
}

int ledger_backup(struct ledger *l, const char *path, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->backup)
        return fo_err_set(err, FO_E_INVALID,
                          "this ledger's store has no backup (use its "
                          "database's own tools)");
    return l->ops->backup(l->store, path, err);
}

int ledger_gates(struct ledger *l, int64_t from, ledger_entry_fn fn, void *ctx,
                 struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct range_ctx r = {fn, ctx};
    return l->ops->gates(l->store, from < 0 ? 0 : from, range_row, &r, err);
}

int ledger_chain(struct ledger *l, int64_t seq, struct ledger_entry **out,
                 size_t *n, struct fo_err *err)
{
    LEDGER_OWNED(l);
    size_t cap = 16, len = 0;
    struct ledger_entry *v = malloc(cap * sizeof(*v));
    if (!v)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = l->ops->begin_read(l->store, err);
    if (rc) {
        free(v);
        return rc;
    }
    int64_t cur = seq;
    for (;;) {
        if (len == cap) {
            struct ledger_entry *nv = realloc(v, 2 * cap * sizeof(*v));
            if (!nv) {
                rc = fo_err_set(err, FO_E_NOMEM, NULL);
                break;
            }
            v = nv;
            cap *= 2;
        }
        rc = ledger_get(l, cur, &v[len], NULL, err);
        if (rc == FO_E_NOT_FOUND && len > 0)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "entry %lld: parent %lld is missing",
                            (long long)v[len - 1].seq, (long long)cur);
        if (rc)
            break;
        int64_t parent = v[len].parent;
        len++;
        if (parent == LEDGER_NO_PARENT)
            break;
        if (parent < 0 || parent >= cur) {
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "entry %lld: parent %lld is not below it "
                            "(a cycle or damage)",
                            (long long)cur, (long long)parent);
            break;
        }
        cur = parent;
    }
    l->ops->rollback(l->store); /* ends the read snapshot */
    if (rc) {
        free(v);
        return rc;
    }
    for (size_t i = 0; i < len / 2; i++) {
        struct ledger_entry t = v[i];
        v[i] = v[len - 1 - i];
        v[len - 1 - i] = t;
    }
    *out = v;
    *n = len;
    return FO_OK;
}

/* ---- redaction -------------------------------------------------------- */

/* The seqs whose stored body is the target's (the same payload hash). */
struct redact_ctx {
    int64_t *seqs;
    size_t n, cap;
};

static int redact_collect(void *ctx, int64_t seq)
{
    struct redact_ctx *r = ctx;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 8;
        int64_t *ns = realloc(r->seqs, nc * sizeof(*ns));
        if (!ns)
            return FO_E_NOMEM;
        r->seqs = ns;
        r->cap = nc;
    }
    r->seqs[r->n++] = seq;
    return FO_OK;
}

int ledger_redact(struct ledger *l, int64_t seq, const char *reason,
                  struct ledger_entry *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (l->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", l->dir);
    if (!reason || !*reason || strlen(reason) > 1024 ||
        !fo_utf8_valid(reason, strlen(reason)))
        return fo_err_set(err, FO_E_INVALID,
                          "reason: 1-1024 bytes of UTF-8 required");
    struct ledger_head *h = malloc(sizeof(*h));
    cJSON *payload = cJSON_CreateObject();
    struct fo_buf body;
    fo_buf_init(&body, FO_BUF_UNLIMITED);
    struct redact_ctx rctx = {0};
    int rc = FO_OK;
    l->wal_pending = 0;
    if (!h || !payload) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    rc = l->ops->begin_write(l->store, err);
    if (rc)
        goto out;
    struct store_rec target;
    int present = 0;
    rc = l->ops->get_entry(l->store, seq, &target, &present, err);
    if (rc == FO_OK && !present)
        rc = fo_err_set(err, FO_E_REDACTED, "entry %lld: already redacted",
                        (long long)seq);
    /* a redaction is the record that a body went: it stays */
    if (rc == FO_OK && target.kind_len == 9 &&
        !memcmp(target.kind, "redaction", 9))
        rc = fo_err_set(err, FO_E_INVALID,
                        "entry %lld: a redaction entry cannot be redacted "
                        "(it is the record of one)",
                        (long long)seq);
    /* every entry whose body is this one loses it too: all are named */
    if (rc == FO_OK)
        rc = l->ops->find_payload(l->store, target.payload, redact_collect,
                                  &rctx, err);
    if (rc == FO_E_NOMEM)
        fo_err_set(err, rc, NULL);
    char hex[65];
    cJSON *seqs = NULL;
    if (rc == FO_OK) {
        fo_hex(target.payload, 32, hex);
        seqs = cJSON_AddArrayToObject(payload, "seqs");
        if (!seqs || !cJSON_AddStringToObject(payload, "payload", hex) ||
            !cJSON_AddStringToObject(payload, "reason", reason))
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    for (size_t i = 0; rc == FO_OK && i < rctx.n; i++) {
        cJSON *v = cJSON_CreateNumber((double)rctx.seqs[i]);
        if (!v)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        else
            cJSON_AddItemToArray(seqs, v);
    }
    if (rc == FO_OK)
        rc = fo_json_canon(payload, &body, err);
    for (size_t i = 0; rc == FO_OK && i < rctx.n; i++)
        rc = l->ops->delete_body(l->store, rctx.seqs[i], err);
    if (rc == FO_OK)
        rc = load_head(l, h, err);
    struct ledger_append req = {.actor = "admin",
                                .kind = "redaction",
                                .parent = seq,
                                .body = body.data,
                                .body_len = body.len};
    if (rc == FO_OK) {
        /* The redaction record itself must always fit. */
        rc = check_req(l, &req, NULL, h->count, err);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(err, FO_E_INVALID, "reason: too long");
    }
    if (rc == FO_OK)
        rc = append_one(l, h, &req, NULL, err);
    if (rc == FO_OK)
        rc = l->ops->commit(l->store, err);
    else
        l->ops->rollback(l->store);
    head_keep(l, rc == FO_OK ? h : NULL);
    if (rc == FO_OK) {
        if (out)
            *out = req.entry;
        /* Move the WAL into the database and truncate it so the deleted
         * bytes (zeroed by secure_delete) leave the disk. A reader holding
         * an old snapshot can delay this; the next redaction or a restart
         * finishes it. The redaction itself is already durable, and the
         * caller can tell (ledger_redact_wal_pending). */
        struct fo_err werr;
        l->wal_pending = l->ops->wal_truncate(l->store, &werr) != FO_OK;
    }
out:
    free(rctx.seqs);
    fo_buf_release(&body);
    cJSON_Delete(payload);
    free(h);
    return rc;
}

int ledger_redact_wal_pending(const struct ledger *l)
{
    return l->wal_pending;
}

/* ---- summary ---------------------------------------------------------- */

static int add_count(void *ctx, const char *key, int64_t n)
{
    return fo_json_add_int(ctx, key, n) ? FO_OK : FO_E_NOMEM;
}

int ledger_summary(struct ledger *l, cJSON **out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    cJSON *o = cJSON_CreateObject();
    cJSON *kinds = cJSON_CreateObject(), *actors = cJSON_CreateObject();
    int64_t count = 0, present = 0;
    struct store_rec last;
    int rc = o && kinds && actors ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    int in_read = 0;
    if (!rc)
        rc = l->ops->begin_read(l->store, err);
    in_read = rc == FO_OK;
    if (!rc)
        rc = l->ops->head(l->store, &count, &last, err);
    if (!rc)
        rc = l->ops->count_bodies(l->store, &present, err);
    if (!rc)
        rc = l->ops->group_counts(l->store, "kind", add_count, kinds, err);
    if (!rc)
        rc = l->ops->group_counts(l->store, "actor", add_count, actors, err);
    if (in_read)
        l->ops->rollback(l->store);
    if (rc) {
        cJSON_Delete(o);
        cJSON_Delete(kinds);
        cJSON_Delete(actors);
        return rc == FO_E_NOMEM ? fo_err_set(err, rc, NULL) : rc;
    }
    char hex[65];
    if (count > 0)
        fo_hex(last.hash, 32, hex);
    int ok = fo_json_add_int(o, "entries", count) &&
             (count > 0 ? cJSON_AddStringToObject(o, "head", hex) != NULL
                        : cJSON_AddNullToObject(o, "head") != NULL) &&
             cJSON_AddStringToObject(o, "origin", l->origin) &&
             cJSON_AddStringToObject(o, "ledger_id", l->id) &&
             fo_json_add_int(o, "bodies_present", present) &&
             fo_json_add_int(o, "bodies_redacted", count - present);
    cJSON_AddItemToObject(o, "by_kind", kinds);
    cJSON_AddItemToObject(o, "by_actor", actors);
    if (!ok) { /* kinds and actors belong to o now */
        cJSON_Delete(o);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = o;
    return FO_OK;
}
