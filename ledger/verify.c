/* verify: one streaming pass over a ledger snapshot that re-derives every
 * hash the ledger stores (entry hashes, the chain, the Merkle tree nodes
 * and, when deep, the body hashes) and names the first place it breaks. */
#include "ledger/ledger.h"

#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "ledger/ledger_int.h"
#include "ledger/merkle.h"

#define PROGRESS_EVERY 65536

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

static int check_row(void *ctx, const struct store_row *row)
{
    struct vctx *v = ctx;
    struct ledger *l = v->l;
    const struct store_rec *r = &row->rec;
    if (r->seq != v->expect)
        return fail(v, v->expect, "seq_gap");
    if (memcmp(r->prev, v->prev, 32) != 0)
        return fail(v, r->seq, "prev_mismatch");
    if (!valid_fields(r))
        return fail(v, r->seq, "bad_field");
    struct ledger_entry e;
    e.seq = r->seq;
    e.ts = r->ts;
    e.parent = r->parent;
    memcpy(e.actor, r->actor, r->actor_len);
    e.actor[r->actor_len] = '\0';
    memcpy(e.kind, r->kind, r->kind_len);
    e.kind[r->kind_len] = '\0';
    memcpy(e.payload, r->payload, 32);
    memcpy(e.prev, r->prev, 32);
    uint8_t h[32];
    fo_buf_reset(&l->scratch);
    int rc = ledger_entry_canon(&e, &l->scratch);
    if (rc)
        return fo_err_set(v->err, rc, "entry %lld: cannot encode",
                          (long long)r->seq);
    fo_sha_digest(l->sha, l->scratch.data, l->scratch.len, h);
    if (memcmp(h, r->hash, 32) != 0)
        return fail(v, r->seq, "hash_mismatch");
    if (r->parent != LEDGER_NO_PARENT && (r->parent < 0 || r->parent >= r->seq))
        return fail(v, r->seq, "bad_parent");
    if (r->ts < v->last_ts)
        return fail(v, r->seq, "ts_backwards");

    uint8_t leaf[32];
    merkle_leaf_hash(l->sha, h, 32, leaf);
    rc = merkle_frontier_push(&v->tree, l->sha, leaf, check_node, v);
    if (rc)
        return rc;

    if (v->deep) {
        if (!row->body) {
            v->res->bodies_redacted++;
        } else {
            uint8_t bh[32];
            fo_sha_digest(l->sha, row->body, row->body_len, bh);
            v->res->bodies_checked++;
            if (memcmp(bh, r->payload, 32) != 0) {
                if (v->res->bodies_bad++ == 0)
                    v->res->first_bad_body_seq = r->seq;
            }
        }
    }
    memcpy(v->prev, r->hash, 32);
    v->last_ts = r->ts;
    v->expect++;
    v->res->entries++;
    if (v->progress && v->expect % PROGRESS_EVERY == 0)
        v->progress(v->pctx, v->expect, v->total);
    return FO_OK;
}

int ledger_verify(struct ledger *l, unsigned flags, ledger_progress_fn progress,
                  void *pctx, struct ledger_verify_result *res,
                  struct fo_err *err)
{
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
    rc = l->ops->head(l->store, &v->total, NULL, err);
    if (!rc)
        rc = l->ops->nodes_begin(l->store, 0, err);
    if (!rc)
        rc = l->ops->scan(l->store, 0, -1, v->deep, check_row, v, err);
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
