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

/* ---- binary COPY --------------------------------------------------------- */

static int put_be(struct fo_buf *b, uint64_t v, int bytes)
{
    unsigned char x[8];
    for (int i = 0; i < bytes; i++)
        x[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    return fo_buf_append(b, x, (size_t)bytes);
}

static int col_i64(struct fo_buf *b, int64_t v)
{
    int rc = put_be(b, 8, 4);
    return rc ? rc : put_be(b, (uint64_t)v, 8);
}

static int col_bytes(struct fo_buf *b, const void *p, size_t n)
{
    if (!p)
        return put_be(b, 0xffffffffu, 4); /* NULL */
    int rc = put_be(b, n, 4);
    return rc || !n ? rc : fo_buf_append(b, p, n);
}

static int col_str(struct fo_buf *b, const char *v)
{
    return col_bytes(b, v, v ? strlen(v) : 0);
}

static const char copy_head[] = "PGCOPY\n\377\r\n";

static int copy_begin(struct fo_buf *b)
{
    int rc = fo_buf_append(b, copy_head, sizeof(copy_head)); /* with its NUL */
    if (!rc)
        rc = put_be(b, 0, 4);         /* flags */
    return rc ? rc : put_be(b, 0, 4); /* no header extension */
}

/* Sends b (a whole binary COPY body, trailer added here) to sql's COPY. */
static int copy_send(struct store *s, const char *sql, struct fo_buf *b,
                     const char *what, struct fo_err *err)
{
    if (put_be(b, 0xffff, 2))
        return fo_err_set(err, FO_E_NOMEM, NULL);
    PGresult *res = PQexec(s->conn, sql);
    if (!res || PQresultStatus(res) != PGRES_COPY_IN) {
        int rc = store_pg_fail(s, res, what, err);
        PQclear(res);
        return rc;
    }
    PQclear(res);
    int ok = 1;
    for (size_t off = 0; ok && off < b->len;) {
        size_t n = b->len - off < (1u << 20) ? b->len - off : (1u << 20);
        ok = PQputCopyData(s->conn, b->data + off, (int)n) == 1;
        off += n;
    }
    if (PQputCopyEnd(s->conn, ok ? NULL : "send failed") != 1)
        ok = 0;
    int rc = FO_OK;
    while ((res = PQgetResult(s->conn))) {
        if (rc == FO_OK && PQresultStatus(res) != PGRES_COMMAND_OK)
            rc = store_pg_fail(s, res, what, err);
        PQclear(res);
    }
    if (rc == FO_OK && !ok)
        rc = store_pg_fail(s, NULL, what, err);
    return rc;
}

/* ---- bulk puts ------------------------------------------------------------
 */

enum { CP_ENTRIES, CP_BODIES, CP_TREE };
static const char *const cp_sql[3] = {
    "COPY forum.entries(seq, ts, actor, kind, parent, payload, prev, hash)"
    " FROM STDIN (FORMAT binary)",
    "COPY forum.bodies(seq, body) FROM STDIN (FORMAT binary)",
    "COPY forum.tree(pos, hash) FROM STDIN (FORMAT binary)",
};
#define CP_FLUSH_BYTES (8u << 20) /* sent on the way past this */

static int cp_row(struct store *s, int which, int cols)
{
    struct fo_buf *b = &s->cp[which];
    int rc = b->len ? FO_OK : copy_begin(b);
    s->cp_rows[which]++;
    return rc ? rc : put_be(b, (uint64_t)cols, 2);
}

static int cp_send(struct store *s, int which, struct fo_err *err)
{
    if (!s->cp_rows[which])
        return FO_OK;
    int rc = copy_send(s, cp_sql[which], &s->cp[which], "append", err);
    fo_buf_reset(&s->cp[which]);
    s->cp_rows[which] = 0;
    return rc;
}

int store_pg_flush(struct store *s, struct fo_err *err)
{
    int rc = FO_OK;
    for (int i = 0; i < 3; i++) {
        int r = rc ? FO_OK : cp_send(s, i, err);
        if (rc || r) { /* the transaction failed: the rest is dropped */
            fo_buf_reset(&s->cp[i]);
            s->cp_rows[i] = 0;
        }
        rc = rc ? rc : r;
    }
    return rc;
}

void store_pg_discard(struct store *s)
{
    for (int i = 0; i < 3; i++) {
        fo_buf_release(&s->cp[i]);
        s->cp_rows[i] = 0;
    }
}

int store_pg_buffer_entry(struct store *s, const struct store_rec *r,
                          const void *body, size_t body_len, struct fo_err *err)
{
    struct fo_buf *b = &s->cp[CP_ENTRIES];
    int rc = cp_row(s, CP_ENTRIES, 8);
    rc = rc ? rc : col_i64(b, r->seq);
    rc = rc ? rc : col_i64(b, r->ts);
    rc = rc ? rc : col_bytes(b, r->actor, r->actor_len);
    rc = rc ? rc : col_bytes(b, r->kind, r->kind_len);
    if (!rc && r->parent < 0)
        rc = col_bytes(b, NULL, 0);
    else if (!rc)
        rc = col_i64(b, r->parent);
    rc = rc ? rc : col_bytes(b, r->payload, 32);
    rc = rc ? rc : col_bytes(b, r->prev, 32);
    rc = rc ? rc : col_bytes(b, r->hash, 32);
    if (!rc && body) {
        struct fo_buf *bb = &s->cp[CP_BODIES];
        rc = cp_row(s, CP_BODIES, 2);
        rc = rc ? rc : col_i64(bb, r->seq);
        rc = rc ? rc : col_bytes(bb, body, body_len);
    }
    if (rc)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (s->cp[CP_BODIES].len + s->cp[CP_ENTRIES].len > CP_FLUSH_BYTES)
        return store_pg_flush(s, err);
    return FO_OK;
}

int store_pg_buffer_node(struct store *s, int64_t pos, const uint8_t hash[32],
                         struct fo_err *err)
{
    struct fo_buf *b = &s->cp[CP_TREE];
    int rc = cp_row(s, CP_TREE, 2);
    rc = rc ? rc : col_i64(b, pos);
    rc = rc ? rc : col_bytes(b, hash, 32);
    return rc ? fo_err_set(err, FO_E_NOMEM, NULL) : FO_OK;
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

static int stage_rows(struct fo_buf *b, int64_t batch,
                      const struct store_stage *rows, size_t n)
{
    int rc = copy_begin(b);
    for (size_t i = 0; !rc && i < n; i++) {
        const struct store_stage *r = &rows[i];
        rc = put_be(b, 14, 2);
        rc = rc ? rc : col_i64(b, batch);
        rc = rc ? rc : col_i64(b, r->idx);
        rc = rc ? rc : col_str(b, r->submitter);
        rc = rc ? rc : col_i64(b, r->ts);
        rc = rc ? rc : col_str(b, r->actor);
        rc = rc ? rc : col_str(b, r->kind);
        if (!rc && r->parent < 0)
            rc = col_bytes(b, NULL, 0);
        else if (!rc)
            rc = col_i64(b, r->parent);
        rc = rc ? rc : col_i64(b, r->parent_back);
        rc = rc ? rc : col_bytes(b, r->payload, 32);
        rc = rc ? rc : col_bytes(b, r->body ? r->body : "", r->body_len);
        rc = rc ? rc : col_str(b, r->lease_owner);
        rc = rc ? rc : col_i64(b, r->lease_run);
        rc = rc ? rc : col_i64(b, r->lease_ms);
        rc = rc ? rc : col_str(b, r->sole);
    }
    return rc;
}

int store_pg_stage_put(struct store *s, const struct store_stage *rows,
                       size_t n, const int64_t *forget, size_t nf,
                       int64_t *batch, struct fo_err *err)
{
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
    if (rc)
        return rc;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (!n) { /* only forget: that need not wait for the disk */
        rc = fo_buf_puts(&b, "BEGIN; SET LOCAL synchronous_commit = off;"
                             " DELETE FROM forum.staged_out WHERE batch IN (");
        rc = rc ? rc : id_list(&b, forget, nf);
        rc = rc ? rc : fo_buf_puts(&b, "); COMMIT");
        rc = rc ? fo_err_set(err, FO_E_NOMEM, NULL)
                : store_pg_exec(s, b.data, "forget staged outcomes", err);
        fo_buf_release(&b);
        if (rc && !s->broken)
            store_pg_exec(s, "ROLLBACK", "rollback", NULL);
        *batch = -1;
        return rc;
    }
    rc = fo_buf_puts(&b, "BEGIN;");
    if (!rc && nf) {
        rc = fo_buf_puts(&b, "DELETE FROM forum.staged_out WHERE batch IN (");
        rc = rc ? rc : id_list(&b, forget, nf);
        rc = rc ? rc : fo_buf_puts(&b, ");");
    }
    rc = rc ? rc : fo_buf_puts(&b, "SELECT nextval('forum.stage_batch')");
    if (rc) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    PGresult *res = PQexec(s->conn, b.data);
    fo_buf_release(&b);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        rc = store_pg_fail(s, res, "stage: begin", err);
        PQclear(res);
        goto fail;
    }
    char *end = NULL;
    long long id = strtoll(PQgetvalue(res, 0, 0), &end, 10);
    PQclear(res);
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (stage_rows(&b, id, rows, n)) {
        fo_buf_release(&b);
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    rc = copy_send(s,
                   "COPY forum.staged(batch, idx, submitter, ts, actor, kind,"
                   " parent, parent_back, payload, body, lease_owner,"
                   " lease_run, lease_ms, sole) FROM STDIN (FORMAT binary)",
                   &b, "stage", err);
    fo_buf_release(&b);
    if (rc)
        goto fail;
    res = PQexec(s->conn, "NOTIFY forum_staged; COMMIT");
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
        rc = store_pg_fail(s, res, "stage: commit", err);
        if (s->broken)
            fo_err_prefix(err, "the staging's outcome is unknown");
        PQclear(res);
        goto fail;
    }
    if (strcmp(PQcmdStatus(res), "COMMIT") != 0)
        rc = fo_err_set(err, FO_E_IO,
                        "PostgreSQL %s: stage: the transaction had failed "
                        "and was rolled back",
                        s->where);
    PQclear(res);
    if (rc == FO_OK)
        *batch = (int64_t)id;
    return rc;
fail:
    if (!s->broken && PQtransactionStatus(s->conn) != PQTRANS_IDLE)
        store_pg_exec(s, "ROLLBACK", "rollback", NULL);
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
static const char take_sql[] =
    "WITH b AS (SELECT batch, count(*) AS n FROM forum.staged GROUP BY batch"
    " ORDER BY batch LIMIT 4096), c AS (SELECT batch, sum(n) OVER (ORDER BY"
    " batch) - n AS before FROM b) SELECT s.batch, s.idx, s.submitter, s.ts,"
    " s.actor, s.kind, s.parent, s.parent_back, s.payload,"
    " length(s.body)::bigint, s.lease_owner, s.lease_run, s.lease_ms, s.sole"
    " FROM forum.staged s JOIN c ON c.batch = s.batch WHERE c.before <"
    " $1::bigint ORDER BY s.batch, s.idx";

int store_pg_stage_take(struct store *s, size_t max_rows,
                        int (*fn)(void *ctx, const struct store_stage *row),
                        void *ctx, struct fo_err *err)
{
    if (!s->in_txn)
        return fo_err_set(err, FO_E_INTERNAL,
                          "PostgreSQL %s: take staged rows outside a "
                          "transaction",
                          s->where);
    int frc = store_pg_flush(s, err);
    if (frc)
        return frc;
    char lim[32];
    snprintf(lim, sizeof(lim), "%zu", max_rows ? max_rows : 1);
    const char *vals[1] = {lim};
    if (!s->sprepared[0]) {
        PGresult *p = PQprepare(s->conn, "fs_take", take_sql, 1, NULL);
        if (!p || PQresultStatus(p) != PGRES_COMMAND_OK) {
            int rc = store_pg_fail(s, p, "take staged rows", err);
            PQclear(p);
            return rc;
        }
        PQclear(p);
        s->sprepared[0] = 1;
    }
    PGresult *res = PQexecPrepared(s->conn, "fs_take", 1, vals, NULL, NULL, 1);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = store_pg_fail(s, res, "take staged rows", err);
        PQclear(res);
        return rc;
    }
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
    int rc = store_pg_flush(s, err);
    if (rc)
        return rc;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    rc = copy_begin(&b);
    for (size_t i = 0; !rc && i < nb; i++) {
        rc = put_be(&b, 2, 2);
        rc = rc ? rc : col_i64(&b, batches[i]);
        rc = rc ? rc : col_str(&b, outcomes[i]);
    }
    if (rc) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    rc = copy_send(s,
                   "COPY forum.staged_out(batch, outcome) FROM STDIN"
                   " (FORMAT binary)",
                   &b, "integrate: outcomes", err);
    fo_buf_release(&b);
    if (rc)
        return rc;
    /* the bodies stay on the server: from the staged rows to their seqs */
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (nm) {
        rc = fo_buf_puts(&b, "INSERT INTO forum.bodies(seq, body) SELECT"
                             " m.seq, s.body FROM unnest('{");
        for (size_t i = 0; !rc && i < nm; i++)
            rc = fo_buf_printf(&b, "%s%lld", i ? "," : "",
                               (long long)moved[i].batch);
        rc = rc ? rc : fo_buf_puts(&b, "}'::bigint[], '{");
        for (size_t i = 0; !rc && i < nm; i++)
            rc = fo_buf_printf(&b, "%s%lld", i ? "," : "",
                               (long long)moved[i].idx);
        rc = rc ? rc : fo_buf_puts(&b, "}'::bigint[], '{");
        for (size_t i = 0; !rc && i < nm; i++)
            rc = fo_buf_printf(&b, "%s%lld", i ? "," : "",
                               (long long)moved[i].seq);
        rc = rc ? rc
                : fo_buf_puts(&b, "}'::bigint[]) AS m(batch, idx, seq) JOIN"
                                  " forum.staged s ON s.batch = m.batch AND"
                                  " s.idx = m.idx;");
    }
    rc = rc ? rc : fo_buf_puts(&b, "DELETE FROM forum.staged WHERE batch IN (");
    rc = rc ? rc : id_list(&b, batches, nb);
    rc = rc ? rc : fo_buf_puts(&b, "); NOTIFY forum_integrated");
    if (rc) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    /* one round trip: the results of all but the last statement are read
     * here, so the bodies' count can be checked */
    if (!PQsendQuery(s->conn, b.data)) {
        fo_buf_release(&b);
        return store_pg_fail(s, NULL, "integrate: bodies", err);
    }
    fo_buf_release(&b);
    PGresult *res;
    int first = 1;
    while ((res = PQgetResult(s->conn))) {
        ExecStatusType st = PQresultStatus(res);
        if (rc == FO_OK && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
            rc = store_pg_fail(s, res, "integrate: bodies", err);
        else if (rc == FO_OK && first && nm &&
                 strtoull(PQcmdTuples(res), NULL, 10) != nm)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "PostgreSQL %s: integrate: %zu staged bodies, "
                            "%s found",
                            s->where, nm, PQcmdTuples(res));
        first = 0;
        PQclear(res);
    }
    return rc;
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
