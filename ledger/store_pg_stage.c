/* store_pg_stage: staged appends on PostgreSQL (store.h, stage_*). Writers
 * put their appends in forum.staged in short transactions of their own,
 * without the writers' lock; the integrator takes them in whole batches
 * inside its write transaction (under the lock), chains them, moves their
 * bodies, stores each batch's outcome in forum.staged_out and notifies the
 * writers (NOTIFY forum_integrated, delivered at its commit). Who
 * integrates is one row of forum.leases, on the server's clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_buf.h"
#include "ledger/store_pg_int.h"

/* forum.staged_out rows older than this were left by a writer that died */
#define PRUNE_AFTER "interval '10 minutes'"

#define STAGE_SQL                                                              \
    "CREATE SEQUENCE IF NOT EXISTS forum.stage_batch;"                         \
    "CREATE TABLE IF NOT EXISTS forum.staged(batch bigint NOT NULL,"           \
    " idx bigint NOT NULL, submitter text NOT NULL, ts bigint NOT NULL,"       \
    " actor text NOT NULL, kind text NOT NULL, parent bigint,"                 \
    " parent_back bigint NOT NULL, payload bytea NOT NULL,"                    \
    " body bytea NOT NULL, lease_owner text, lease_run bigint NOT NULL,"       \
    " lease_ms bigint NOT NULL, sole text, PRIMARY KEY(batch, idx));"          \
    "CREATE TABLE IF NOT EXISTS forum.staged_out(batch bigint PRIMARY KEY,"    \
    " outcome text NOT NULL,"                                                  \
    " at timestamptz NOT NULL DEFAULT clock_timestamp());"                     \
    "CREATE TABLE IF NOT EXISTS forum.leases(name text PRIMARY KEY,"           \
    " owner text NOT NULL, expires timestamptz NOT NULL);"

int store_pg_stage_ensure(struct store *s, struct fo_err *err)
{
    PGresult *res = PQexec(s->conn, "SELECT to_regclass('forum.staged') IS"
                                    " NOT NULL AND to_regclass("
                                    "'forum.staged_out') IS NOT NULL AND"
                                    " to_regclass('forum.leases') IS NOT"
                                    " NULL");
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        int rc = store_pg_fail(s, res, "look for the staging tables", err);
        PQclear(res);
        return rc;
    }
    int have = !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (have)
        return FO_OK;
    int rc = store_pg_exec(
        s, "BEGIN; SELECT pg_advisory_xact_lock(" PG_WRITE_LOCK ")",
        "staging tables: lock", err);
    if (!rc)
        rc = store_pg_exec(s, STAGE_SQL, "create the staging tables", err);
    if (!rc)
        rc = store_pg_exec(s, "COMMIT", "staging tables: commit", err);
    if (rc)
        store_pg_exec(s, "ROLLBACK", "rollback", NULL);
    return rc;
}

/* "a,b,c" of v[0..n) into b. */
static int id_list(struct fo_buf *b, const int64_t *v, size_t n)
{
    int rc = FO_OK;
    for (size_t i = 0; !rc && i < n; i++)
        rc = fo_buf_printf(b, "%s%lld", i ? "," : "", (long long)v[i]);
    return rc;
}

/* ---- writers --------------------------------------------------------------
 */

/* the columns of forum.staged after batch, as arrays */
enum {
    S_IDX,
    S_SUBMITTER,
    S_TS,
    S_ACTOR,
    S_KIND,
    S_PARENT,
    S_PARENT_BACK,
    S_PAYLOAD,
    S_BODY,
    S_OWNER,
    S_RUN,
    S_MS,
    S_SOLE,
    S__COUNT
};

static int stage_rows(struct fo_buf *c, const struct store_stage *rows,
                      size_t n)
{
    int rc = FO_OK;
    for (size_t i = 0; !rc && i < n; i++) {
        const struct store_stage *r = &rows[i];
        rc = store_pg_arr_i64(&c[S_IDX], r->idx);
        rc = rc ? rc : store_pg_arr_str(&c[S_SUBMITTER], r->submitter);
        rc = rc ? rc : store_pg_arr_i64(&c[S_TS], r->ts);
        rc = rc ? rc : store_pg_arr_str(&c[S_ACTOR], r->actor);
        rc = rc ? rc : store_pg_arr_str(&c[S_KIND], r->kind);
        if (!rc && r->parent < 0)
            rc = store_pg_arr_bytes(&c[S_PARENT], NULL, 0);
        else if (!rc)
            rc = store_pg_arr_i64(&c[S_PARENT], r->parent);
        rc = rc ? rc : store_pg_arr_i64(&c[S_PARENT_BACK], r->parent_back);
        rc = rc ? rc : store_pg_arr_bytes(&c[S_PAYLOAD], r->payload, 32);
        rc = rc ? rc
                : store_pg_arr_bytes(&c[S_BODY], r->body ? r->body : "",
                                     r->body_len);
        rc = rc ? rc : store_pg_arr_str(&c[S_OWNER], r->lease_owner);
        rc = rc ? rc : store_pg_arr_i64(&c[S_RUN], r->lease_run);
        rc = rc ? rc : store_pg_arr_i64(&c[S_MS], r->lease_ms);
        rc = rc ? rc : store_pg_arr_str(&c[S_SOLE], r->sole);
    }
    return rc;
}

/* One batch: a number of its own, its rows, in one statement. */
static const char stage_sql[] =
    "WITH b AS (SELECT nextval('forum.stage_batch') AS id), ins AS (INSERT"
    " INTO forum.staged(batch, idx, submitter, ts, actor, kind, parent,"
    " parent_back, payload, body, lease_owner, lease_run, lease_ms, sole)"
    " SELECT b.id, u.* FROM b, unnest($1::int8[], $2::text[], $3::int8[],"
    " $4::text[], $5::text[], $6::int8[], $7::int8[], $8::bytea[],"
    " $9::bytea[], $10::text[], $11::int8[], $12::int8[], $13::text[]) AS u)"
    " SELECT id FROM b";
static const uint32_t stage_elem[S__COUNT] = {20, 25, 20, 25, 25, 20, 20,
                                              17, 17, 25, 20, 20, 25};

static int forget_only(struct store *s, const int64_t *forget, size_t nf,
                       struct fo_err *err)
{
    /* that need not wait for the disk */
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_buf_puts(&b, "BEGIN; SET LOCAL synchronous_commit = off;"
                             " DELETE FROM forum.staged_out WHERE batch IN (");
    rc = rc ? rc : id_list(&b, forget, nf);
    rc = rc ? rc : fo_buf_puts(&b, "); COMMIT");
    rc = rc ? fo_err_set(err, FO_E_NOMEM, NULL)
            : store_pg_exec(s, b.data, "forget staged outcomes", err);
    fo_buf_release(&b);
    if (rc && !s->broken)
        store_pg_exec(s, "ROLLBACK", "rollback", NULL);
    return rc;
}

int store_pg_stage_put(struct store *s, const struct store_stage *rows,
                       size_t n, const int64_t *forget, size_t nf,
                       int64_t *batch, struct fo_err *err)
{
    *batch = -1;
    if (s->readonly)
        return fo_err_set(err, FO_E_INVALID, "PostgreSQL %s: opened read-only",
                          s->where);
    if (s->lost) {
        if (err)
            *err = s->lost_err;
        return FO_E_STORAGE_MOVED;
    }
    if (s->in_txn || s->held)
        return fo_err_set(err, FO_E_INTERNAL,
                          "PostgreSQL %s: staging inside a transaction",
                          s->where);
    int rc = store_pg_ensure_conn(s, err);
    if (rc || !n)
        return rc ? rc : nf ? forget_only(s, forget, nf, err) : FO_OK;
    /* one round trip: BEGIN, the forgotten outcomes dropped, the rows,
     * NOTIFY, COMMIT (synchronous: the batch is durable once it returns) */
    struct fo_buf c[S__COUNT], fb;
    for (int i = 0; i < S__COUNT; i++)
        fo_buf_init(&c[i], FO_BUF_UNLIMITED);
    fo_buf_init(&fb, FO_BUF_UNLIMITED);
    rc = stage_rows(c, rows, n);
    for (size_t i = 0; !rc && i < nf; i++)
        rc = store_pg_arr_i64(&fb, forget[i]);
    struct store_pg_q q[5];
    memset(q, 0, sizeof(q));
    size_t k = 0;
    q[k++].sql = "BEGIN";
    if (nf && !rc) {
        store_pg_arr_close(&fb, nf, 20);
        q[k].sql = "DELETE FROM forum.staged_out WHERE batch = ANY($1::int8[])";
        q[k].what = "forget staged outcomes";
        q[k].vals[0] = fb.data;
        q[k].lens[0] = (int)fb.len;
        q[k++].np = 1;
    }
    q[k].sql = stage_sql;
    q[k].what = "stage";
    for (int i = 0; !rc && i < S__COUNT; i++) {
        store_pg_arr_close(&c[i], n, stage_elem[i]);
        q[k].vals[i] = c[i].data;
        q[k].lens[i] = (int)c[i].len;
    }
    q[k++].np = S__COUNT;
    size_t at = k - 1;
    q[k++].sql = "NOTIFY forum_staged";
    q[k].sql = "COMMIT";
    q[k].what = "stage: commit";
    q[k++].commit = 1;
    PGresult *got[5] = {0};
    if (rc)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    else
        rc = store_pg_pipe(s, q, k, got, "stage", err);
    for (int i = 0; i < S__COUNT; i++)
        fo_buf_release(&c[i]);
    fo_buf_release(&fb);
    if (rc == FO_OK) {
        int bad = !got[at] || PQntuples(got[at]) != 1 ||
                  PQgetlength(got[at], 0, 0) != 8;
        uint64_t v = 0;
        for (int i = 0; !bad && i < 8; i++)
            v = v << 8 | (unsigned char)PQgetvalue(got[at], 0, 0)[i];
        if (bad)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "PostgreSQL %s: stage: no batch number", s->where);
        else
            *batch = (int64_t)v;
    } else if (s->broken) {
        fo_err_prefix(err, "the staging's outcome is unknown");
    } else if (PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
        store_pg_exec(s, "ROLLBACK", "rollback", NULL);
    }
    for (size_t i = 0; i < k; i++)
        PQclear(got[i]);
    return rc;
}

/* ---- the integrator ---------------------------------------------------------
 */

static int64_t get_i64(const PGresult *res, int r, int c, int *bad)
{
    if (PQgetisnull(res, r, c) || PQgetlength(res, r, c) != 8) {
        *bad = 1;
        return 0;
    }
    const unsigned char *p = (const unsigned char *)PQgetvalue(res, r, c);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

static const char *get_str(const PGresult *res, int r, int c)
{
    return PQgetisnull(res, r, c) ? NULL : PQgetvalue(res, r, c);
}

/* Whole batches, oldest first, while the rows before a batch are fewer
 * than $1 (so one batch at least). */
const char store_pg_take_sql[] =
    "WITH f AS (SELECT batch FROM forum.staged ORDER BY batch, idx LIMIT"
    " $1::bigint) SELECT s.batch, s.idx, s.submitter, s.ts, s.actor, s.kind,"
    " s.parent, s.parent_back, s.payload, length(s.body)::bigint,"
    " s.lease_owner, s.lease_run, s.lease_ms, s.sole FROM forum.staged s"
    " WHERE s.batch <= (SELECT max(batch) FROM f) ORDER BY s.batch, s.idx";

/* The rows of a take's result to fn. */
static int take_rows(struct store *s, const PGresult *res,
                     int (*fn)(void *ctx, const struct store_stage *row),
                     void *ctx, struct fo_err *err)
{
    int rc = FO_OK;
    for (int i = 0; rc == FO_OK && i < PQntuples(res); i++) {
        struct store_stage r;
        memset(&r, 0, sizeof(r));
        int bad = 0;
        r.batch = get_i64(res, i, 0, &bad);
        r.idx = get_i64(res, i, 1, &bad);
        r.submitter = get_str(res, i, 2);
        r.ts = get_i64(res, i, 3, &bad);
        r.actor = get_str(res, i, 4);
        r.kind = get_str(res, i, 5);
        r.parent = PQgetisnull(res, i, 6) ? -1 : get_i64(res, i, 6, &bad);
        r.parent_back = get_i64(res, i, 7, &bad);
        if (PQgetlength(res, i, 8) != 32)
            bad = 1;
        else
            memcpy(r.payload, PQgetvalue(res, i, 8), 32);
        r.body_len = (size_t)get_i64(res, i, 9, &bad);
        r.lease_owner = get_str(res, i, 10);
        r.lease_run = get_i64(res, i, 11, &bad);
        r.lease_ms = get_i64(res, i, 12, &bad);
        r.sole = get_str(res, i, 13);
        if (bad || !r.submitter || !r.actor || !r.kind)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "PostgreSQL %s: damaged staged row", s->where);
        else
            rc = fn(ctx, &r);
    }
    return rc;
}

int store_pg_stage_take(struct store *s, size_t max_rows,
                        int (*fn)(void *ctx, const struct store_stage *row),
                        void *ctx, struct fo_err *err)
{
    if (!s->in_txn)
        return fo_err_set(err, FO_E_INTERNAL,
                          "PostgreSQL %s: take staged rows outside a "
                          "transaction",
                          s->where);
    PGresult *res = s->take_pre; /* read with the BEGIN (stage_begin) */
    s->take_pre = NULL;
    if (!res) {
        int frc = store_pg_flush(s, err);
        if (frc)
            return frc;
        unsigned char lim[8];
        uint64_t v = max_rows ? max_rows : 1;
        for (int i = 0; i < 8; i++)
            lim[i] = (unsigned char)(v >> (56 - 8 * i));
        struct store_pg_q q = {.sql = store_pg_take_sql, .np = 1};
        q.vals[0] = (const char *)lim;
        q.lens[0] = 8;
        int rc = store_pg_pipe(s, &q, 1, &res, "take staged rows", err);
        if (rc)
            return rc;
    }
    int rc = take_rows(s, res, fn, ctx, err);
    PQclear(res);
    return rc;
}

int store_pg_stage_finish(struct store *s, const struct store_moved *moved,
                          size_t nm, const int64_t *batches,
                          const char *const *outcomes, size_t nb,
                          struct fo_err *err)
{
    if (!nb)
        return FO_OK;
    /* sent with the COMMIT, in its round trip */
    return store_pg_queue_finish(s, moved, nm, batches, outcomes, nb, err);
}

/* ---- collecting, listening ------------------------------------------------
 */

int store_pg_stage_collect(struct store *s, const int64_t *batches, size_t nb,
                           int (*fn)(void *ctx, int64_t batch,
                                     const char *outcome),
                           void *ctx, struct fo_err *err)
{
    if (!nb)
        return FO_OK;
    if (s->in_txn)
        return fo_err_set(err, FO_E_INTERNAL,
                          "PostgreSQL %s: collect inside a transaction",
                          s->where);
    int rc = store_pg_ensure_conn(s, err);
    if (rc)
        return rc;
    /* read only: an outcome is dropped once its writer has answered
     * (stage_put's forget), so a reply lost on the way is read again */
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    rc = fo_buf_puts(&b, "SELECT batch, outcome FROM forum.staged_out WHERE"
                         " batch IN (");
    rc = rc ? rc : id_list(&b, batches, nb);
    rc = rc ? rc : fo_buf_puts(&b, ")");
    if (rc) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    PGresult *rows = PQexec(s->conn, b.data);
    fo_buf_release(&b);
    if (!rows || PQresultStatus(rows) != PGRES_TUPLES_OK) {
        rc = store_pg_fail(s, rows, "collect staged outcomes", err);
        PQclear(rows);
        return rc;
    }
    for (int i = 0; rc == FO_OK && rows && i < PQntuples(rows); i++) {
        char *end = NULL;
        long long id = strtoll(PQgetvalue(rows, i, 0), &end, 10);
        rc = fn(ctx, (int64_t)id, PQgetvalue(rows, i, 1));
    }
    PQclear(rows);
    return rc;
}

int store_pg_stage_relisten(struct store *s, struct fo_err *err)
{
    if (!s->listening)
        return FO_OK;
    s->notes = STORE_NOTE_STAGED | STORE_NOTE_INTEGRATED; /* maybe missed */
    return store_pg_exec(s, "LISTEN forum_staged; LISTEN forum_integrated",
                         "listen", err);
}

int store_pg_stage_listen(struct store *s, int *fd, struct fo_err *err)
{
    int rc = s->in_txn ? FO_OK : store_pg_ensure_conn(s, err);
    if (!rc && !s->listening) {
        s->listening = 1;
        rc = store_pg_stage_relisten(s, err);
        if (rc)
            s->listening = 0;
    }
    if (!rc)
        *fd = PQsocket(s->conn);
    return rc;
}

unsigned store_pg_stage_notes(struct store *s)
{
    if (!s->in_txn && PQstatus(s->conn) == CONNECTION_OK &&
        !PQconsumeInput(s->conn))
        s->broken = 1; /* the next statement reconnects */
    PGnotify *n;
    while ((n = PQnotifies(s->conn))) {
        if (!strcmp(n->relname, "forum_staged"))
            s->notes |= STORE_NOTE_STAGED;
        else if (!strcmp(n->relname, "forum_integrated"))
            s->notes |= STORE_NOTE_INTEGRATED;
        PQfreemem(n);
    }
    unsigned got = s->notes;
    s->notes = 0;
    return got;
}

/* ---- the integration lease ----------------------------------------------- */

static const char *const ilease_sql[] = {
    [STORE_ILEASE_GET] = "SELECT owner, expires > clock_timestamp() FROM"
                         " forum.leases WHERE name = 'integrator'",
    [STORE_ILEASE_CLAIM] =
        "INSERT INTO forum.leases(name, owner, expires) VALUES"
        " ('integrator', $1, clock_timestamp() + ($2::float8 / 1000) *"
        " interval '1 second') ON CONFLICT (name) DO UPDATE SET owner ="
        " EXCLUDED.owner, expires = EXCLUDED.expires WHERE"
        " forum.leases.expires < clock_timestamp() OR forum.leases.owner ="
        " EXCLUDED.owner RETURNING owner, true",
    [STORE_ILEASE_RENEW] = "UPDATE forum.leases SET expires ="
                           " clock_timestamp() + ($2::float8 / 1000) *"
                           " interval '1 second' WHERE name = 'integrator'"
                           " AND owner = $1 RETURNING owner, true",
    [STORE_ILEASE_RELEASE] = "UPDATE forum.leases SET expires ="
                             " clock_timestamp() - interval '1 millisecond'"
                             " WHERE name = 'integrator' AND owner = $1"
                             " RETURNING owner, false",
};

int store_pg_ilease(struct store *s, int op, const char *owner, int ttl_ms,
                    int *held, int *live, char *holder, size_t cap,
                    struct fo_err *err)
{
    *held = 0;
    *live = 0;
    if (cap)
        holder[0] = '\0';
    if (op < STORE_ILEASE_GET || op > STORE_ILEASE_RELEASE)
        return fo_err_set(err, FO_E_INVALID, "integration lease: bad op");
    int rc = store_pg_owner_ok(s, owner, err);
    if (!rc && !s->in_txn)
        rc = store_pg_ensure_conn(s, err);
    if (rc)
        return rc;
    char ttl[32];
    snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
    const char *vals[2] = {owner, ttl};
    int np = op == STORE_ILEASE_GET ? 0 : op == STORE_ILEASE_RELEASE ? 1 : 2;
    PGresult *res =
        PQexecParams(s->conn, ilease_sql[op], np, NULL, vals, NULL, NULL, 0);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        rc = store_pg_fail(s, res, "the integration lease", err);
        PQclear(res);
        return rc;
    }
    if (PQntuples(res) == 1) {
        const char *who = PQgetvalue(res, 0, 0);
        *live = !strcmp(PQgetvalue(res, 0, 1), "t");
        *held = *live && !strcmp(who, owner);
        if (cap)
            snprintf(holder, cap, "%s", who);
    }
    PQclear(res);
    return FO_OK;
}

int store_pg_stage_prune(struct store *s, struct fo_err *err)
{
    int rc = s->in_txn ? FO_OK : store_pg_ensure_conn(s, err);
    return rc ? rc
              : store_pg_exec(s,
                              "DELETE FROM forum.staged_out WHERE at <"
                              " clock_timestamp() - " PRUNE_AFTER,
                              "prune staged outcomes", err);
}
