/* store_pg_bulk: the rows of a write transaction sent in bulk, and
 * statements sent as one pipeline (one round trip to the server).
 *
 * Rows put inside a write transaction (entries, bodies, tree nodes) are
 * buffered as binary arrays, one per column, and go out as one INSERT ...
 * SELECT FROM unnest(...) per table; the integrator's closing statements
 * (its outcomes, the staged bodies moved, the staged rows dropped, the
 * NOTIFY) are queued the same way. store_pg_send sends all of it, and
 * the COMMIT when asked, in one pipeline: a transaction that appends
 * costs the server two round trips (BEGIN with the lock and the head,
 * then the rows and COMMIT), whatever it holds. Each round trip counts on
 * a busy machine: it waits for the server's backend to be scheduled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_buf.h"
#include "ledger/store_pg_int.h"

/* type OIDs (pg_type.h; stable across versions) */
#define OID_INT8 20
#define OID_TEXT 25
#define OID_BYTEA 17
#define ARR_HEAD 20 /* ndim, flags, element type, size, lower bound */
#define FLUSH_BYTES (8u << 20) /* sent on the way past this */

/* ---- binary arrays (array_recv's format) -------------------------------- */

static int put_be(struct fo_buf *b, uint64_t v, int bytes)
{
    unsigned char x[8];
    for (int i = 0; i < bytes; i++)
        x[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    return fo_buf_append(b, x, (size_t)bytes);
}

static void set_be(char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (char)(unsigned char)(v >> (8 * (3 - i)));
}

static int arr_open(struct fo_buf *b)
{
    static const char zero[ARR_HEAD];
    return b->len ? FO_OK : fo_buf_append(b, zero, sizeof(zero));
}

int store_pg_arr_i64(struct fo_buf *b, int64_t v)
{
    int rc = arr_open(b);
    rc = rc ? rc : put_be(b, 8, 4);
    return rc ? rc : put_be(b, (uint64_t)v, 8);
}

int store_pg_arr_bytes(struct fo_buf *b, const void *p, size_t n)
{
    int rc = arr_open(b);
    if (rc)
        return rc;
    if (!p)
        return put_be(b, 0xffffffffu, 4); /* NULL */
    rc = put_be(b, n, 4);
    return rc || !n ? rc : fo_buf_append(b, p, n);
}

int store_pg_arr_str(struct fo_buf *b, const char *v)
{
    return store_pg_arr_bytes(b, v, v ? strlen(v) : 0);
}

/* Completes the header of b (n elements of type elem) for sending. */
void store_pg_arr_close(struct fo_buf *b, size_t n, uint32_t elem)
{
    if (arr_open(b))
        return; /* (a 20-byte header never fails after the first put) */
    set_be(b->data, n ? 1 : 0);
    set_be(b->data + 4, 1); /* may hold NULLs */
    set_be(b->data + 8, elem);
    set_be(b->data + 12, (uint32_t)n);
    set_be(b->data + 16, 1);
    if (!n)
        b->len = 12; /* an empty array has no dimension */
}

/* ---- the pipeline --------------------------------------------------------
 */

int store_pg_pipe(struct store *s, const struct store_pg_q *q, size_t n,
                  PGresult **keep, const char *what, struct fo_err *err)
{
    int fmt[STORE_PG_Q_PARAMS];
    for (int i = 0; i < STORE_PG_Q_PARAMS; i++)
        fmt[i] = 1;
    for (size_t i = 0; keep && i < n; i++)
        keep[i] = NULL;
    PGconn *c = s->conn;
    int ok = PQenterPipelineMode(c) == 1;
    size_t sent = 0;
    for (; ok && sent < n; sent++)
        ok = PQsendQueryParams(c, q[sent].sql, q[sent].np, NULL, q[sent].vals,
                               q[sent].lens, fmt, 1) == 1;
    ok = ok && PQpipelineSync(c) == 1;
    int rc = ok ? FO_OK : store_pg_fail(s, NULL, what, err);
    for (size_t i = 0; ok && i < sent; i++) {
        PGresult *res = PQgetResult(c);
        if (!res) {
            ok = 0;
            break;
        }
        ExecStatusType st = PQresultStatus(res);
        const char *w = q[i].what ? q[i].what : what;
        if (st == PGRES_PIPELINE_ABORTED) {
            /* a statement before it failed: err says which */
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            if (rc == FO_OK)
                rc = store_pg_fail(s, res, w, err);
        } else if (rc == FO_OK && q[i].commit &&
                   strcmp(PQcmdStatus(res), "COMMIT") != 0) {
            rc = fo_err_set(err, FO_E_IO,
                            "PostgreSQL %s: commit: the transaction had "
                            "failed and was rolled back",
                            s->where);
        }
        if (keep && st == PGRES_TUPLES_OK)
            keep[i] = res;
        else
            PQclear(res);
        res = PQgetResult(c); /* the end of this statement's results */
        if (res) {
            PQclear(res);
            ok = 0;
        }
    }
    if (ok) {
        PGresult *sync = PQgetResult(c);
        ok = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
        PQclear(sync);
    }
    if (!ok || PQexitPipelineMode(c) != 1) {
        s->broken = 1; /* the next use outside a transaction reconnects */
        if (rc == FO_OK)
            rc = fo_err_set(err, FO_E_IO,
                            "PostgreSQL %s: %s: connection lost; the "
                            "operation was not done",
                            s->where, what);
    }
    for (size_t i = 0; rc && keep && i < n; i++) {
        PQclear(keep[i]);
        keep[i] = NULL;
    }
    return rc;
}

/* ---- the rows of a write transaction ------------------------------------ */

/* the columns of s->col: forum.entries, then bodies, then tree */
enum {
    C_SEQ,
    C_TS,
    C_ACTOR,
    C_KIND,
    C_PARENT,
    C_PAYLOAD,
    C_PREV,
    C_HASH,
    C_BSEQ,
    C_BODY,
    C_POS,
    C_NODE,
    C__COUNT
};
/* the element type of each column */
static const uint32_t col_elem[C__COUNT] = {
    OID_INT8,  OID_INT8,  OID_TEXT, OID_TEXT,  OID_INT8, OID_BYTEA,
    OID_BYTEA, OID_BYTEA, OID_INT8, OID_BYTEA, OID_INT8, OID_BYTEA};

static const char ins_entries[] =
    "INSERT INTO forum.entries(seq, ts, actor, kind, parent, payload, prev,"
    " hash) SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[],"
    " $4::text[], $5::int8[], $6::bytea[], $7::bytea[], $8::bytea[])";
static const char ins_bodies[] = "INSERT INTO forum.bodies(seq, body) SELECT"
                                 " * FROM unnest($1::int8[], $2::bytea[])";
static const char ins_tree[] = "INSERT INTO forum.tree(pos, hash) SELECT *"
                               " FROM unnest($1::int8[], $2::bytea[])";

/* the integrator's closing statements (store_pg_queue_finish) */
enum { F_OBATCH, F_OUTCOME, F_MBATCH, F_MIDX, F_MSEQ, F__COUNT };
static const uint32_t fin_elem[F__COUNT] = {OID_INT8, OID_TEXT, OID_INT8,
                                            OID_INT8, OID_INT8};
static const char fin_outcomes[] =
    "INSERT INTO forum.staged_out(batch, outcome) SELECT * FROM"
    " unnest($1::int8[], $2::text[])";
/* the bodies stay on the server: from the staged rows to their seqs; a
 * staged row missing fails the statement (so the transaction) */
static const char fin_bodies[] =
    "WITH m AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[]) AS"
    " m(batch, idx, seq)), ins AS (INSERT INTO forum.bodies(seq, body)"
    " SELECT m.seq, s.body FROM m JOIN forum.staged s ON s.batch = m.batch"
    " AND s.idx = m.idx RETURNING 1) SELECT CASE WHEN count(*) ="
    " $4::int8 THEN count(*) ELSE ('staged bodies missing: ' || count(*) ||"
    " ' of ' || $4::int8)::int8 END FROM ins";
static const char fin_delete[] =
    "DELETE FROM forum.staged WHERE batch = ANY($1::int8[])";

int store_pg_buffer_entry(struct store *s, const struct store_rec *r,
                          const void *body, size_t body_len, struct fo_err *err)
{
    struct fo_buf *c = s->col;
    int rc = store_pg_arr_i64(&c[C_SEQ], r->seq);
    rc = rc ? rc : store_pg_arr_i64(&c[C_TS], r->ts);
    rc = rc ? rc : store_pg_arr_bytes(&c[C_ACTOR], r->actor, r->actor_len);
    rc = rc ? rc : store_pg_arr_bytes(&c[C_KIND], r->kind, r->kind_len);
    if (!rc && r->parent < 0)
        rc = store_pg_arr_bytes(&c[C_PARENT], NULL, 0);
    else if (!rc)
        rc = store_pg_arr_i64(&c[C_PARENT], r->parent);
    rc = rc ? rc : store_pg_arr_bytes(&c[C_PAYLOAD], r->payload, 32);
    rc = rc ? rc : store_pg_arr_bytes(&c[C_PREV], r->prev, 32);
    rc = rc ? rc : store_pg_arr_bytes(&c[C_HASH], r->hash, 32);
    s->cp_rows[0]++;
    if (!rc && body) {
        rc = store_pg_arr_i64(&c[C_BSEQ], r->seq);
        rc = rc ? rc : store_pg_arr_bytes(&c[C_BODY], body, body_len);
        s->cp_rows[1]++;
    }
    if (rc)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (c[C_BODY].len + c[C_HASH].len * 4 > FLUSH_BYTES)
        return store_pg_flush(s, err);
    return FO_OK;
}

int store_pg_buffer_node(struct store *s, int64_t pos, const uint8_t hash[32],
                         struct fo_err *err)
{
    int rc = store_pg_arr_i64(&s->col[C_POS], pos);
    rc = rc ? rc : store_pg_arr_bytes(&s->col[C_NODE], hash, 32);
    s->cp_rows[2]++;
    return rc ? fo_err_set(err, FO_E_NOMEM, NULL) : FO_OK;
}

int store_pg_queue_finish(struct store *s, const struct store_moved *moved,
                          size_t nm, const int64_t *batches,
                          const char *const *outcomes, size_t nb,
                          struct fo_err *err)
{
    struct fo_buf *f = s->fin;
    int rc = FO_OK;
    for (size_t i = 0; !rc && i < nb; i++) {
        rc = store_pg_arr_i64(&f[F_OBATCH], batches[i]);
        rc = rc ? rc : store_pg_arr_str(&f[F_OUTCOME], outcomes[i]);
    }
    for (size_t i = 0; !rc && i < nm; i++) {
        rc = store_pg_arr_i64(&f[F_MBATCH], moved[i].batch);
        rc = rc ? rc : store_pg_arr_i64(&f[F_MIDX], moved[i].idx);
        rc = rc ? rc : store_pg_arr_i64(&f[F_MSEQ], moved[i].seq);
    }
    s->fin_nb += nb;
    s->fin_nm += nm;
    return rc ? fo_err_set(err, FO_E_NOMEM, NULL) : FO_OK;
}

static void q_arr(struct store_pg_q *q, struct fo_buf *b, size_t n,
                  uint32_t elem)
{
    store_pg_arr_close(b, n, elem);
    q->vals[q->np] = b->data;
    q->lens[q->np] = (int)b->len;
    q->np++;
}

int store_pg_send(struct store *s, int commit, struct fo_err *err)
{
    struct store_pg_q q[9];
    size_t n = 0;
    unsigned char cnt[8];
    memset(q, 0, sizeof(q));
    static const int first[4] = {C_SEQ, C_BSEQ, C_POS, C__COUNT};
    static const char *const sql[3] = {ins_entries, ins_bodies, ins_tree};
    for (int t = 0; t < 3; t++) {
        if (!s->cp_rows[t])
            continue;
        q[n].sql = sql[t];
        q[n].what = "append";
        for (int c = first[t]; c < first[t + 1]; c++)
            q_arr(&q[n], &s->col[c], s->cp_rows[t], col_elem[c]);
        n++;
    }
    if (s->fin_nb) {
        struct fo_buf *f = s->fin;
        q[n].sql = fin_outcomes;
        q[n].what = "integrate: outcomes";
        q_arr(&q[n], &f[F_OBATCH], s->fin_nb, fin_elem[F_OBATCH]);
        q_arr(&q[n], &f[F_OUTCOME], s->fin_nb, fin_elem[F_OUTCOME]);
        n++;
        if (s->fin_nm) {
            q[n].sql = fin_bodies;
            q[n].what = "integrate: the staged bodies";
            for (int c = F_MBATCH; c <= F_MSEQ; c++)
                q_arr(&q[n], &f[c], s->fin_nm, fin_elem[c]);
            for (int i = 0; i < 8; i++)
                cnt[i] = (unsigned char)((uint64_t)s->fin_nm >> (56 - 8 * i));
            q[n].vals[q[n].np] = (const char *)cnt;
            q[n].lens[q[n].np++] = 8;
            n++;
        }
        q[n].sql = fin_delete;
        q[n].what = "integrate: drop the staged rows";
        q[n].vals[0] = f[F_OBATCH].data; /* closed above */
        q[n].lens[0] = (int)f[F_OBATCH].len;
        q[n++].np = 1;
        q[n].sql = "NOTIFY forum_integrated";
        q[n++].what = "integrate: notify";
    }
    if (commit) {
        q[n].sql = "COMMIT";
        q[n].what = "commit";
        q[n++].commit = 1;
    }
    int rc = n ? store_pg_pipe(s, q, n, NULL, "append", err) : FO_OK;
    store_pg_discard(s);
    return rc;
}

int store_pg_flush(struct store *s, struct fo_err *err)
{
    if (!s->cp_rows[0] && !s->cp_rows[1] && !s->cp_rows[2] && !s->fin_nb)
        return FO_OK;
    return store_pg_send(s, 0, err);
}

void store_pg_discard(struct store *s)
{
    for (int i = 0; i < STORE_PG_COLS; i++)
        fo_buf_reset(&s->col[i]);
    for (int i = 0; i < STORE_PG_FIN; i++)
        fo_buf_reset(&s->fin[i]);
    memset(s->cp_rows, 0, sizeof(s->cp_rows));
    s->fin_nb = s->fin_nm = 0;
}

void store_pg_bulk_free(struct store *s)
{
    for (int i = 0; i < STORE_PG_COLS; i++)
        fo_buf_release(&s->col[i]);
    for (int i = 0; i < STORE_PG_FIN; i++)
        fo_buf_release(&s->fin[i]);
}
