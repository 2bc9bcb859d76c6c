/* stage: staged appends (ledger.h, "Staged appends"). A writer stages its
 * batch unsequenced; the integrator chains what is staged, whole batches
 * in batch order, with the same checks as ledger_append_batch, and leaves
 * each batch's outcome for its writer as text lines:
 *
 *   <idx> 0 <seq> <ts> <parent> <prev hex> <hash hex>   appended
 *   <idx> <rc> <seq> <message>                          refused (seq: the
 *                                                       deciding entry, or -1)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/ledger_int.h"

#define SOLE_MAX 256  /* the sole kinds joined by commas, NUL included */
#define SOLE_KINDS 15 /* at most */

int ledger_can_stage(const struct ledger *l)
{
    return l->ops->stage_put != NULL && !l->readonly;
}

static int no_stage(const struct ledger *l, struct fo_err *err)
{
    return fo_err_set(err, FO_E_INVALID,
                      "%s: the %s store stages no appends (one writer)", l->dir,
                      l->ops->name);
}

static int owner_ok(const char *o)
{
    size_t n = strlen(o);
    int ok = n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++)
        ok = (o[i] >= '0' && o[i] <= '9') || (o[i] >= 'a' && o[i] <= 'f');
    return ok;
}

/* The checks that need no head; sole kinds joined into sole. */
static int stage_check(struct ledger *l, const struct ledger_append *r,
                       char sole[SOLE_MAX], struct fo_err *err)
{
    int rc = ledger_check_actor(r->actor, err);
    if (!rc)
        rc = ledger_check_kind(r->kind, err);
    if (rc)
        return rc;
    if (r->import)
        return fo_err_set(err, FO_E_INVALID, "import: not staged");
    if (!r->body)
        return fo_err_set(err, FO_E_INVALID, "payload: missing");
    if (r->body_len > l->max_body)
        return fo_err_set(err, FO_E_TOO_LARGE,
                          "payload: %zu bytes in canonical form; the limit "
                          "is %zu",
                          r->body_len, l->max_body);
    if (r->parent != LEDGER_NO_PARENT && r->parent < 0)
        return fo_err_set(err, FO_E_INVALID,
                          "parent %lld: must be an existing seq",
                          (long long)r->parent);
    if (r->parent_back < 0)
        return fo_err_set(err, FO_E_INVALID, "parent_back: negative");
    if (r->lease_owner && !owner_ok(r->lease_owner))
        return fo_err_set(err, FO_E_INVALID,
                          "lease owner: 1-64 lowercase hex digits");
    sole[0] = '\0';
    size_t len = 0, k = 0;
    for (const char *const *s = r->sole_kinds; s && *s; s++, k++) {
        int n = snprintf(sole + len, SOLE_MAX - len, "%s%s", k ? "," : "", *s);
        if (n < 0 || (size_t)n >= SOLE_MAX - len || k >= SOLE_KINDS ||
            ledger_check_kind(*s, err))
            return fo_err_set(err, FO_E_INVALID, "sole kinds: too many");
        len += (size_t)n;
    }
    return FO_OK;
}

int ledger_stage(struct ledger *l, struct ledger_append *reqs, size_t n,
                 const char *submitter, const int64_t *forget, size_t nf,
                 int64_t *batch, struct fo_err *err)
{
    LEDGER_OWNED(l);
    *batch = -1;
    if (!ledger_can_stage(l))
        return no_stage(l, err);
    if (!owner_ok(submitter))
        return fo_err_set(err, FO_E_INVALID,
                          "submitter: 1-64 lowercase hex digits");
    struct store_stage *rows = calloc(n ? n : 1, sizeof(*rows));
    char(*sole)[SOLE_MAX] = calloc(n ? n : 1, SOLE_MAX);
    if (!rows || !sole) {
        free(rows);
        free(sole);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    size_t k = 0;
    int64_t now = ledger_now_us();
    for (size_t i = 0; i < n; i++) {
        struct ledger_append *r = &reqs[i];
        fo_err_clear(&r->err);
        r->rc = stage_check(l, r, sole[i], &r->err);
        if (r->rc)
            continue;
        struct store_stage *s = &rows[k++];
        s->idx = (int64_t)i;
        s->submitter = submitter;
        s->ts = now;
        s->actor = r->actor;
        s->kind = r->kind;
        s->parent = r->parent;
        s->parent_back = r->parent_back;
        fo_sha_digest(l->sha, r->body, r->body_len, s->payload);
        s->body = r->body;
        s->body_len = r->body_len;
        s->lease_owner = r->lease_owner;
        s->lease_run = r->lease_owner ? r->lease_run : 0;
        s->lease_ms = r->lease_ms;
        s->sole = sole[i][0] ? sole[i] : NULL;
        memset(&r->entry, 0, sizeof(r->entry));
        r->entry.seq = -1; /* staged: not in the chain yet */
        memcpy(r->entry.payload, s->payload, 32);
    }
    int rc = FO_OK;
    if (k || nf)
        rc = l->ops->stage_put(l->store, rows, k, forget, nf, batch, err);
    if (!k)
        *batch = -1;
    free(rows);
    free(sole);
    if (rc)
        ledger_fail_reqs(reqs, n, rc, err);
    return rc;
}

int ledger_stage_collect(struct ledger *l, const int64_t *batches, size_t nb,
                         int (*fn)(void *ctx, int64_t batch,
                                   const char *outcome),
                         void *ctx, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->stage_collect)
        return no_stage(l, err);
    return l->ops->stage_collect(l->store, batches, nb, fn, ctx, err);
}

/* One appended line: fills r->entry (and checks its hash). */
static int outcome_ok(struct ledger_append *r, const char *p)
{
    long long seq, ts, parent;
    char prev[65], hash[65];
    if (sscanf(p, "%lld %lld %lld %64s %64s", &seq, &ts, &parent, prev, hash) !=
        5)
        return -1;
    struct ledger_entry *e = &r->entry;
    e->seq = seq;
    e->ts = ts;
    e->parent = parent;
    r->parent = parent;
    snprintf(e->actor, sizeof(e->actor), "%s", r->actor);
    snprintf(e->kind, sizeof(e->kind), "%s", r->kind);
    uint8_t h[32];
    if (fo_unhex(prev, e->prev, 32) || fo_unhex(hash, e->hash, 32) ||
        ledger_entry_hash(e, h) || memcmp(h, e->hash, 32))
        return -1;
    return 0;
}

int ledger_stage_outcome(const char *outcome, struct ledger_append *reqs,
                         size_t n, struct fo_err *err)
{
    unsigned char *seen = calloc(n ? n : 1, 1);
    if (!seen)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    for (const char *p = outcome; *p && rc == FO_OK;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[FO_ERR_MSG_MAX + 256];
        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        p += len + (nl ? 1 : 0);
        long long idx, code, seq;
        int used = 0, rest = 0;
        if (sscanf(line, "%lld %lld %n", &idx, &code, &rest) < 2 || !rest ||
            idx < 0 || (size_t)idx >= n || seen[idx] || reqs[idx].rc != FO_OK) {
            rc = fo_err_set(err, FO_E_CORRUPT, "staged outcome: bad line");
            break;
        }
        struct ledger_append *r = &reqs[idx];
        seen[idx] = 1;
        if (code == FO_OK) {
            if (outcome_ok(r, line + rest) != 0)
                rc = fo_err_set(err, FO_E_CORRUPT,
                                "staged outcome: request %lld: not the hash "
                                "of what was staged",
                                idx);
            continue;
        }
        if (sscanf(line + rest, "%lld %n", &seq, &used) < 1 || !used) {
            rc = fo_err_set(err, FO_E_CORRUPT, "staged outcome: bad line");
            break;
        }
        r->entry.seq = seq;
        r->rc = fo_err_set(&r->err, (int)code, "%s", line + rest + used);
    }
    for (size_t i = 0; rc == FO_OK && i < n; i++)
        if (reqs[i].rc == FO_OK && !seen[i])
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "staged outcome: request %zu missing", i);
    free(seen);
    return rc;
}

/* ---- the integrator -------------------------------------------------------
 */

struct srow {
    int64_t batch, idx;
    char actor[LEDGER_ACTOR_MAX + 1];
    char kind[LEDGER_KIND_MAX + 1];
    char owner[65];
    char sole[SOLE_MAX];
    const char *sole_kinds[SOLE_KINDS + 1];
    int bad; /* a field out of bounds: refused at its turn */
};

struct take {
    struct srow *rows;
    struct ledger_staged *st;
    struct ledger_append *reqs;
    size_t n, cap;
};

static int take_row(void *ctx, const struct store_stage *s)
{
    struct take *t = ctx;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct srow *r = realloc(t->rows, cap * sizeof(*r));
        if (r)
            t->rows = r;
        struct ledger_staged *st = r ? realloc(t->st, cap * sizeof(*st)) : NULL;
        if (st)
            t->st = st;
        struct ledger_append *q =
            st ? realloc(t->reqs, cap * sizeof(*q)) : NULL;
        if (!q)
            return FO_E_NOMEM;
        t->reqs = q;
        t->cap = cap;
    }
    struct srow *r = &t->rows[t->n];
    memset(r, 0, sizeof(*r));
    r->batch = s->batch;
    r->idx = s->idx;
    size_t an = strlen(s->actor), kn = strlen(s->kind);
    size_t on = s->lease_owner ? strlen(s->lease_owner) : 0;
    size_t sn = s->sole ? strlen(s->sole) : 0;
    r->bad = an > LEDGER_ACTOR_MAX || kn > LEDGER_KIND_MAX || on > 64 ||
             sn >= SOLE_MAX;
    snprintf(r->actor, sizeof(r->actor), "%s", s->actor);
    snprintf(r->kind, sizeof(r->kind), "%s", s->kind);
    snprintf(r->owner, sizeof(r->owner), "%s",
             s->lease_owner ? s->lease_owner : "");
    snprintf(r->sole, sizeof(r->sole), "%s", s->sole ? s->sole : "");
    struct ledger_staged *st = &t->st[t->n];
    memcpy(st->payload, s->payload, 32);
    st->body_len = s->body_len;
    struct ledger_append *q = &t->reqs[t->n];
    memset(q, 0, sizeof(*q));
    q->parent = s->parent < 0 ? LEDGER_NO_PARENT : s->parent;
    q->parent_back = s->parent_back;
    q->lease_run = s->lease_run;
    q->lease_ms = (int)s->lease_ms;
    t->n++;
    return FO_OK;
}

/* The pointers of the requests into their rows (rows may have moved), and
 * parent_back from a place in the writer's batch to one in t. */
static void take_link(struct take *t)
{
    size_t first = 0; /* the first row of the current batch */
    for (size_t i = 0; i < t->n; i++) {
        struct srow *r = &t->rows[i];
        struct ledger_append *q = &t->reqs[i];
        if (i > 0 && r->batch != t->rows[i - 1].batch)
            first = i;
        q->actor = r->actor;
        q->kind = r->kind;
        q->lease_owner = r->owner[0] ? r->owner : NULL;
        if (r->sole[0]) {
            size_t k = 0;
            for (char *p = r->sole; p && k < SOLE_KINDS; k++) {
                r->sole_kinds[k] = p;
                p = strchr(p, ',');
                if (p)
                    *p++ = '\0';
            }
            r->sole_kinds[k] = NULL;
            q->sole_kinds = r->sole_kinds;
        }
        if (r->bad) {
            q->actor = ""; /* refused by the checks at its turn */
            continue;
        }
        if (q->parent_back <= 0)
            continue;
        int64_t want = r->idx - q->parent_back;
        int64_t back = 0; /* 0 with parent_back > 0: nothing that far */
        for (size_t j = i; j-- > first;)
            if (t->rows[j].idx == want)
                back = (int64_t)(i - j);
        q->parent_back = back ? back : (int64_t)i + 1;
    }
}

/* The outcome text of each batch, and the rows whose bodies move. */
static int take_finish(struct ledger *l, struct take *t, struct fo_err *err)
{
    size_t nb = 0, nm = 0;
    for (size_t i = 0; i < t->n; i++) {
        nb += i == 0 || t->rows[i].batch != t->rows[i - 1].batch;
        nm += t->reqs[i].rc == FO_OK;
    }
    int64_t *batches = calloc(nb ? nb : 1, sizeof(*batches));
    char **outs = calloc(nb ? nb : 1, sizeof(*outs));
    struct store_moved *moved = calloc(nm ? nm : 1, sizeof(*moved));
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = batches && outs && moved ? FO_OK : FO_E_NOMEM;
    size_t ib = 0, im = 0;
    for (size_t i = 0; rc == FO_OK && i < t->n; i++) {
        const struct srow *r = &t->rows[i];
        const struct ledger_append *q = &t->reqs[i];
        if (q->rc == FO_OK) {
            char prev[65], hash[65];
            fo_hex(q->entry.prev, 32, prev);
            fo_hex(q->entry.hash, 32, hash);
            rc = fo_buf_printf(&b, "%lld 0 %lld %lld %lld %s %s\n",
                               (long long)r->idx, (long long)q->entry.seq,
                               (long long)q->entry.ts,
                               (long long)q->entry.parent, prev, hash);
            moved[im++] = (struct store_moved){r->batch, r->idx, q->entry.seq};
        } else {
            char msg[FO_ERR_MSG_MAX];
            snprintf(msg, sizeof(msg), "%s", q->err.msg);
            for (char *p = msg; *p; p++)
                if (*p == '\n' || *p == '\r')
                    *p = ' ';
            rc = fo_buf_printf(
                &b, "%lld %d %lld %s\n", (long long)r->idx, q->rc,
                (long long)(q->rc == FO_E_EXISTS ? q->entry.seq : -1), msg);
        }
        if (rc == FO_OK &&
            (i + 1 == t->n || t->rows[i + 1].batch != r->batch)) {
            batches[ib] = r->batch;
            outs[ib] = fo_buf_detach(&b, NULL);
            rc = outs[ib++] ? FO_OK : FO_E_NOMEM;
        }
    }
    if (rc == FO_OK)
        rc = l->ops->stage_finish(l->store, moved, nm, batches,
                                  (const char *const *)outs, nb, err);
    else
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; outs && i < nb; i++)
        free(outs[i]);
    free(outs);
    free(batches);
    free(moved);
    fo_buf_release(&b);
    return rc;
}

int ledger_integrate(struct ledger *l, struct ledger_append *reqs, size_t n,
                     size_t max_staged, size_t *staged, struct fo_err *err)
{
    LEDGER_OWNED(l);
    *staged = 0;
    if (!ledger_can_stage(l))
        return no_stage(l, err);
    struct ledger_head *h = malloc(sizeof(*h));
    struct take t = {0};
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    /* a store may read the staged rows with the BEGIN (one round trip) */
    int rc = max_staged && l->ops->stage_begin
                 ? l->ops->stage_begin(l->store, max_staged, err)
                 : l->ops->begin_write(l->store, err);
    if (rc)
        goto out;
    rc = ledger_load_head(l, h, err);
    if (rc == FO_OK && max_staged)
        rc = l->ops->stage_take(l->store, max_staged, take_row, &t, err);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (rc == FO_OK && t.n) {
        take_link(&t);
        rc = ledger_append_reqs(l, h, t.reqs, t.n, t.st, err);
    }
    if (rc == FO_OK && n)
        rc = ledger_append_reqs(l, h, reqs, n, NULL, err);
    if (rc == FO_OK && t.n)
        rc = take_finish(l, &t, err);
    if (rc == FO_OK)
        rc = l->ops->commit(l->store, err);
    else
        l->ops->rollback(l->store);
    ledger_head_keep(l, rc == FO_OK ? h : NULL);
    if (rc == FO_OK)
        *staged = t.n;
out:
    free(h);
    free(t.rows);
    free(t.st);
    free(t.reqs);
    if (rc)
        ledger_fail_reqs(reqs, n, rc, err);
    return rc;
}

int ledger_stage_listen(struct ledger *l, int *fd, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->stage_listen)
        return no_stage(l, err);
    return l->ops->stage_listen(l->store, fd, err);
}

unsigned ledger_stage_notes(struct ledger *l)
{
    LEDGER_OWNED(l);
    unsigned got = l->ops->stage_notes ? l->ops->stage_notes(l->store) : 0;
    return (got & STORE_NOTE_STAGED ? LEDGER_NOTE_STAGED : 0) |
           (got & STORE_NOTE_INTEGRATED ? LEDGER_NOTE_INTEGRATED : 0);
}

int ledger_integrator_lease(struct ledger *l, int op, const char *owner,
                            int ttl_ms, int *held, char *holder, size_t cap,
                            struct fo_err *err)
{
    LEDGER_OWNED(l);
    *held = 0;
    if (!l->ops->ilease)
        return no_stage(l, err);
    int live = 0, rc;
    static const int ops[] = {
        [LEDGER_ILEASE_GET] = STORE_ILEASE_GET,
        [LEDGER_ILEASE_CLAIM] = STORE_ILEASE_CLAIM,
        [LEDGER_ILEASE_RENEW] = STORE_ILEASE_RENEW,
        [LEDGER_ILEASE_RELEASE] = STORE_ILEASE_RELEASE,
    };
    if (op < LEDGER_ILEASE_GET || op > LEDGER_ILEASE_RELEASE)
        return fo_err_set(err, FO_E_INVALID, "integration lease: bad op");
    if (op == LEDGER_ILEASE_CLAIM) {
        /* a read first: a claim that cannot win writes nothing */
        char who[65];
        rc = l->ops->ilease(l->store, STORE_ILEASE_GET, owner, ttl_ms, held,
                            &live, who, sizeof(who), err);
        if (rc || (live && strcmp(who, owner) != 0)) {
            if (cap)
                snprintf(holder, cap, "%s", who);
            *held = 0;
            return rc;
        }
    }
    rc = l->ops->ilease(l->store, ops[op], owner, ttl_ms, held, &live, holder,
                        cap, err);
    return rc;
}

int ledger_stage_prune(struct ledger *l, struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (!l->ops->stage_prune)
        return no_stage(l, err);
    return l->ops->stage_prune(l->store, err);
}
