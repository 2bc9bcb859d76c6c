/* verify: one streaming pass over a ledger snapshot that re-derives every
 * hash the ledger stores (entry hashes, the chain, the Merkle tree nodes
 * and, when deep, the body hashes) and names the first place it breaks. */
#include "ledger/ledger.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "ledger/ledger_int.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

#define PROGRESS_EVERY 8192

struct vctx {
    struct ledger *l;
    struct ledger_verify_result *res;
    struct fo_err *err;
    int deep;
    int64_t expect; /* the next seq */
    int64_t total;  /* entries in the snapshot */
    int64_t last_ts;
    uint8_t prev[32];
    struct merkle_frontier tree;
    int nodes_done; /* the node cursor is exhausted */
    ledger_progress_fn progress;
    void *pctx;
};

/* Stops the scan at the first break. */
#define STOP (-1) /* distinct from every fo_code */

static int fail(struct vctx *v, int64_t seq, const char *reason)
{
    v->res->chain = 0;
    v->res->first_bad_seq = seq;
    v->res->reason = reason;
    return STOP;
}

static int valid_fields(const struct store_rec *r)
{
    if (r->actor_len == 0 || !fo_utf8_valid(r->actor, r->actor_len))
        return 0;
    if (r->kind_len == 0)
        return 0;
    for (size_t i = 0; i < r->kind_len; i++) {
        char c = r->kind[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* Every tree node the new leaf completes must be the next stored node. */
static int check_node(void *ctx, unsigned level, uint64_t index,
                      const uint8_t hash[32])
{
    struct vctx *v = ctx;
    int64_t pos;
    uint8_t stored[32];
    if (level < v->l->tree_min_level)
        return FO_OK; /* not stored: derived from the entries themselves */
    if (v->nodes_done)
        return fail(v, v->expect, "tree_mismatch");
    int rc = v->l->ops->nodes_next(v->l->store, &pos, stored, v->err);
    if (rc == FO_E_NOT_FOUND) {
        v->nodes_done = 1;
        return fail(v, v->expect, "tree_mismatch");
    }
    if (rc)
        return rc;
    if (pos != ledger_node_pos(level, index) || memcmp(stored, hash, 32) != 0)
        return fail(v, v->expect, "tree_mismatch");
    return FO_OK;
}

/* Rows are read in batches. While the main thread reads batch k+1 from
 * SQLite, a worker thread hashes the rows of batch k (entry, leaf and body
 * hashes are independent per row); the main thread joins the hashing when
 * its read is done, both claiming rows from one counter, so neither core
 * waits on the other. Then the main thread runs the checks that depend on
 * order (seq, prev, ts, tree). Two cores, one pass. */
#define BATCH 4096
#define CLAIM 64 /* rows a hasher claims at a time */

struct vrow {
    struct store_rec rec;
    size_t body_off, body_len;
    int has_body;
    int fields_ok;
    uint8_t ehash[32], leaf[32], bhash[32];
};

struct vbatch {
    struct vrow row[BATCH];
    size_t n;
    struct fo_buf bodies;
    atomic_size_t claimed; /* rows handed to a hasher */
};

/* One thread's hashing state. */
struct hasher {
    struct fo_sha *sha;
    struct fo_buf scratch;
    struct vbatch *b;
    int rc;
};

static int collect_row(void *ctx, const struct store_row *row)
{
    struct vbatch *b = ctx;
    struct vrow *r = &b->row[b->n++];
    r->rec = row->rec;
    r->has_body = row->body != NULL;
    r->body_off = b->bodies.len;
    r->body_len = row->body_len;
    if (row->body && row->body_len)
        return fo_buf_append(&b->bodies, row->body, row->body_len);
    return FO_OK;
}

static int hash_row(struct hasher *h, const struct vbatch *b, struct vrow *r)
{
    const struct store_rec *rec = &r->rec;
    r->fields_ok = valid_fields(rec);
    struct ledger_entry e;
    e.seq = rec->seq;
    e.ts = rec->ts;
    e.parent = rec->parent;
    memcpy(e.actor, rec->actor, rec->actor_len);
    e.actor[rec->actor_len] = '\0';
    memcpy(e.kind, rec->kind, rec->kind_len);
    e.kind[rec->kind_len] = '\0';
    memcpy(e.payload, rec->payload, 32);
    memcpy(e.prev, rec->prev, 32);
    fo_buf_reset(&h->scratch);
    int rc = ledger_entry_canon(&e, &h->scratch);
    if (rc)
        return rc;
    fo_sha_digest(h->sha, h->scratch.data, h->scratch.len, r->ehash);
    merkle_leaf_hash(h->sha, r->ehash, 32, r->leaf);
    if (r->has_body)
        fo_sha_digest(h->sha, b->bodies.data + r->body_off, r->body_len,
                      r->bhash);
    return FO_OK;
}

/* Hashes rows of h->b until none is left to claim. */
static void *hash_rows(void *arg)
{
    struct hasher *h = arg;
    struct vbatch *b = h->b;
    for (;;) {
        size_t i = atomic_fetch_add(&b->claimed, CLAIM);
        if (i >= b->n)
            break;
        size_t end = i + CLAIM < b->n ? i + CLAIM : b->n;
        for (; i < end; i++) {
            int rc = hash_row(h, b, &b->row[i]);
            if (rc && !h->rc)
                h->rc = rc;
        }
    }
    return NULL;
}

/* The order-dependent checks of one hashed row. */
static int check_row(struct vctx *v, const struct vrow *r)
{
    const struct store_rec *rec = &r->rec;
    if (rec->seq != v->expect)
        return fail(v, v->expect, "seq_gap");
    if (memcmp(rec->prev, v->prev, 32) != 0)
        return fail(v, rec->seq, "prev_mismatch");
    if (!r->fields_ok)
        return fail(v, rec->seq, "bad_field");
    if (memcmp(r->ehash, rec->hash, 32) != 0)
        return fail(v, rec->seq, "hash_mismatch");
    if (rec->parent != LEDGER_NO_PARENT &&
        (rec->parent < 0 || rec->parent >= rec->seq))
        return fail(v, rec->seq, "bad_parent");
    if (rec->ts < v->last_ts)
        return fail(v, rec->seq, "ts_backwards");
    int rc = merkle_frontier_push(&v->tree, v->l->sha, r->leaf, check_node, v);
    if (rc)
        return rc;
    if (v->deep) {
        if (!r->has_body) {
            v->res->bodies_redacted++;
        } else {
            v->res->bodies_checked++;
            if (memcmp(r->bhash, rec->payload, 32) != 0 &&
                v->res->bodies_bad++ == 0)
                v->res->first_bad_body_seq = rec->seq;
        }
    }
    memcpy(v->prev, rec->hash, 32);
    v->last_ts = rec->ts;
    v->expect++;
    v->res->entries++;
    if (v->progress && v->expect % PROGRESS_EVERY == 0)
        v->progress(v->pctx, v->expect, v->total);
    return FO_OK;
}

static struct vbatch *batch_new(void)
{
    struct vbatch *b = calloc(1, sizeof(*b));
    if (b)
        fo_buf_init(&b->bodies, FO_BUF_UNLIMITED);
    return b;
}

static void batch_free(struct vbatch *b)
{
    if (!b)
        return;
    fo_buf_release(&b->bodies);
    free(b);
}

static int hasher_init(struct hasher *h)
{
    memset(h, 0, sizeof(*h));
    fo_buf_init(&h->scratch, FO_BUF_UNLIMITED);
    h->sha = fo_sha_create();
    return h->sha != NULL;
}

static void hasher_release(struct hasher *h)
{
    fo_buf_release(&h->scratch);
    fo_sha_free(h->sha);
}

static int read_batch(struct vctx *v, int64_t from, struct vbatch *b)
{
    b->n = 0;
    fo_buf_reset(&b->bodies);
    return v->l->ops->scan(v->l->store, from, BATCH, v->deep, collect_row, b,
                           v->err);
}

/* Reads, hashes (on both threads) and checks every row. */
static int check_all(struct vctx *v)
{
    struct vbatch *cur = batch_new(), *next = batch_new();
    struct hasher hw, hm; /* the worker's and the main thread's */
    int hw_ok = hasher_init(&hw), hm_ok = hasher_init(&hm);
    int rc = cur && next && hw_ok && hm_ok
                 ? FO_OK
                 : fo_err_set(v->err, FO_E_NOMEM, NULL);
    int64_t from = 0;
    if (!rc)
        rc = read_batch(v, from, cur);
    while (!rc && cur->n > 0) {
        from = cur->row[cur->n - 1].rec.seq + 1;
        atomic_store(&cur->claimed, 0);
        hw.b = hm.b = cur;
        pthread_t worker;
        int threaded = pthread_create(&worker, NULL, hash_rows, &hw) == 0;
        rc = read_batch(v, from, next);
        hash_rows(&hm); /* the rest of the rows the worker has not claimed */
        if (threaded)
            pthread_join(worker, NULL);
        int hrc = hw.rc ? hw.rc : hm.rc;
        if (!rc && hrc)
            rc = fo_err_set(v->err, hrc, "verify: cannot encode entry");
        for (size_t i = 0; !rc && i < cur->n; i++)
            rc = check_row(v, &cur->row[i]);
        struct vbatch *t = cur;
        cur = next;
        next = t;
    }
    batch_free(cur);
    batch_free(next);
    hasher_release(&hw);
    hasher_release(&hm);
    return rc;
}

/* Every checkpoint the ledger stored signs a size it has, the root its
 * entries give at that size, and its note says the same: a log cut below a
 * size it once signed, or a garbled stored note, is caught by plain verify
 * (no key needed: the note's signature is checked by verify --checkpoint). */
static int check_checkpoint(void *ctx, int64_t size, const uint8_t root[32],
                            const char *note)
{
    struct vctx *v = ctx;
    if (size < 0 || size > v->total)
        return fail(v, v->total, "checkpoint_beyond_log");
    uint8_t r[32];
    int rc = merkle_root(ledger_tree_node, v->l, (uint64_t)size, r, v->err);
    if (rc)
        return rc;
    if (memcmp(r, root, 32) != 0)
        return fail(v, size, "checkpoint_mismatch");
    const char *end = note ? strstr(note, "\n\n") : NULL;
    struct note_checkpoint cp;
    struct fo_err perr;
    if (!end ||
        note_checkpoint_parse(note, (size_t)(end - note) + 1, &cp, &perr) !=
            FO_OK ||
        cp.size != (uint64_t)size || memcmp(cp.root, root, 32) != 0 ||
        strcmp(cp.origin, ledger_origin(v->l)) != 0)
        return fail(v, size, "checkpoint_mismatch");
    return FO_OK;
}

int ledger_verify(struct ledger *l, unsigned flags, ledger_progress_fn progress,
                  void *pctx, struct ledger_verify_result *res,
                  struct fo_err *err)
{
    LEDGER_OWNED(l);
    memset(res, 0, sizeof(*res));
    res->chain = 1;
    res->first_bad_seq = -1;
    res->first_bad_body_seq = -1;
    res->deep = (flags & LEDGER_VERIFY_DEEP) ? 1 : -1;

    struct vctx *v = calloc(1, sizeof(*v));
    if (!v)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    v->l = l;
    v->res = res;
    v->err = err;
    v->deep = (flags & LEDGER_VERIFY_DEEP) != 0;
    v->progress = progress;
    v->pctx = pctx;
    merkle_frontier_init(&v->tree);

    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        goto out;
    char *format = NULL;
    rc = l->ops->meta_get(l->store, "format", &format, err);
    if (rc == FO_E_NOT_FOUND || (!rc && strcmp(format, "forum-ledger/1"))) {
        fail(v, 0, "format_mismatch"); /* not this format: nothing holds */
        rc = STOP;
    }
    free(format);
    if (!rc)
        rc = l->ops->head(l->store, &v->total, NULL, err);
    /* every stored node, from the lowest position there is: a row at a
     * negative position is no node of this log */
    if (!rc)
        rc = l->ops->nodes_begin(l->store, INT64_MIN, err);
    if (!rc)
        rc = check_all(v);
    if (rc == STOP)
        rc = FO_OK;
    else if (rc == FO_OK && res->chain) {
        /* Fewer rows than the head says: the head row's seq is beyond a
         * gap at the end (cannot happen with contiguous rows). */
        if (v->expect != v->total)
            fail(v, v->expect, "seq_gap");
        /* Nodes past the last leaf: a tree that is not this log's. */
        int64_t pos;
        uint8_t h[32];
        if (res->chain && !v->nodes_done) {
            int nrc = l->ops->nodes_next(l->store, &pos, h, err);
            if (nrc == FO_OK)
                fail(v, (int64_t)((uint64_t)pos >> 6), "tree_mismatch");
            else if (nrc != FO_E_NOT_FOUND)
                rc = nrc;
        }
    }
    l->ops->nodes_end(l->store);
    if (rc == FO_OK && res->chain && v->deep) { /* a body of no entry */
        int64_t present = 0;
        rc = l->ops->count_bodies(l->store, &present, err);
        if (!rc && present != res->bodies_checked)
            fail(v, v->total, "orphan_body");
    }
    if (rc == FO_OK && res->chain) {
        rc = l->ops->scan_checkpoints(l->store, check_checkpoint, v, err);
        if (rc == STOP)
            rc = FO_OK;
    }
    l->ops->rollback(l->store);
    if (progress && rc == FO_OK)
        progress(pctx, v->expect, v->total);
out:
    free(v);
    if (rc == FO_OK) {
        if (res->deep >= 0)
            res->deep = res->bodies_bad == 0;
        res->ok = res->chain && res->deep != 0;
    }
    return rc;
}

cJSON *ledger_verify_json(const struct ledger_verify_result *res)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddBoolToObject(o, "ok", res->ok) &&
             cJSON_AddBoolToObject(o, "chain", res->chain) &&
             fo_json_add_int(o, "entries", res->entries);
    ok = ok && (res->first_bad_seq < 0
                    ? cJSON_AddNullToObject(o, "first_bad_seq") != NULL
                    : fo_json_add_int(o, "first_bad_seq", res->first_bad_seq) !=
                          NULL);
    ok = ok && (res->reason
                    ? cJSON_AddStringToObject(o, "reason", res->reason) != NULL
                    : cJSON_AddNullToObject(o, "reason") != NULL);
    if (res->deep < 0) {
        ok = ok && cJSON_AddNullToObject(o, "deep");
    } else {
        ok = ok && cJSON_AddBoolToObject(o, "deep", res->deep) &&
             fo_json_add_int(o, "bodies_checked", res->bodies_checked) &&
             fo_json_add_int(o, "bodies_redacted", res->bodies_redacted) &&
             fo_json_add_int(o, "bodies_bad", res->bodies_bad) &&
             (res->first_bad_body_seq < 0
                  ? cJSON_AddNullToObject(o, "first_bad_body_seq") != NULL
                  : fo_json_add_int(o, "first_bad_body_seq",
                                    res->first_bad_body_seq) != NULL);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
