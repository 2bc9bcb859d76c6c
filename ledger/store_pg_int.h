/* store_pg_int: what store_pg.c shares with store_pg_stage.c (the staged
 * appends): the handle and a few helpers. No other file includes it. */
#ifndef LEDGER_STORE_PG_INT_H
#define LEDGER_STORE_PG_INT_H

#include <libpq-fe.h>

#include "ledger/fo_buf.h"
#include "ledger/store.h"

/* pg_advisory_xact_lock key of the writers: 'foru' */
#define PG_WRITE_LOCK "1718579829"
#define STORE_PG_STMTS 64       /* store_pg.c's prepared statements, at most */
#define STORE_PG_STAGE_STMTS 16 /* store_pg_stage.c's */
#define STORE_PG_COLS 12        /* columns of the rows buffered */
#define STORE_PG_FIN 5          /* arrays of the integrator's closing */
#define STORE_PG_Q_PARAMS 16    /* parameters of one pipelined statement */

/* One statement of a pipeline: binary parameters (types from the casts in
 * sql), binary results. */
struct store_pg_q {
    const char *sql;
    const char *what; /* for messages (NULL: the pipeline's) */
    int np;
    const char *vals[STORE_PG_Q_PARAMS];
    int lens[STORE_PG_Q_PARAMS];
    int commit; /* a COMMIT: anything but "COMMIT" back is a failure */
};

struct store {
    PGconn *conn;
    char *dir;
    char *where;     /* "host=... port=... dbname=..." for messages */
    char *ledger_id; /* what DIR/store.json pins, or NULL */
    int readonly;
    int busy_ms;
    int in_txn;
    int held;   /* hold: one write transaction around the others */
    int broken; /* the connection was lost: reset before the next use */
    int fail_commit_in;
    /* Set once check found another ledger in the database: every later
     * write transaction is refused with lost_err (sticky). */
    int lost;
    struct fo_err lost_err;
    unsigned char prepared[STORE_PG_STMTS];
    unsigned char sprepared[STORE_PG_STAGE_STMTS]; /* store_pg_stage.c's */
    int listening;  /* LISTEN again after a reconnect */
    unsigned notes; /* STORE_NOTE_* bits come and not yet read */
    /* Rows put in the write transaction, not yet sent (store_pg_bulk.c):
     * binary arrays, one per column of forum.entries, forum.bodies and
     * forum.tree, and the integrator's closing statements; sent before the
     * next statement (store_pg_flush) or with the COMMIT (store_pg_send),
     * dropped at rollback. */
    struct fo_buf col[STORE_PG_COLS];
    size_t cp_rows[3];
    struct fo_buf fin[STORE_PG_FIN];
    size_t fin_nb, fin_nm;
    /* The head read with BEGIN (one round trip), for the next head() of
     * the transaction when nothing ran in between. */
    PGresult *head_pre;
    PGresult *take_pre; /* the staged rows read with BEGIN (stage_begin) */
    /* the tree-node cursor (nodes_begin / next / end) */
    PGresult *nodes;
    int nodes_row;
    int nodes_eof;
    int64_t nodes_from;
};

/* Helpers of store_pg.c (see there). */
int store_pg_fail(struct store *s, const PGresult *res, const char *what,
                  struct fo_err *err);
int store_pg_exec(struct store *s, const char *sql, const char *what,
                  struct fo_err *err);
int store_pg_ensure_conn(struct store *s, struct fo_err *err);
int store_pg_owner_ok(struct store *s, const char *owner, struct fo_err *err);

/* Sends the n statements of q in one pipeline (one round trip) and reads
 * their results; keep (n slots, or NULL) gets the rows of those that
 * return rows (the caller PQclear()s them). The first failure sets err;
 * the statements after it are skipped by the server. A connection lost
 * marks the store broken. */
int store_pg_pipe(struct store *s, const struct store_pg_q *q, size_t n,
                  PGresult **keep, const char *what, struct fo_err *err);
/* Elements of binary arrays (store_pg_bulk.c; the header is written when
 * sent): FO_OK or FO_E_NOMEM. p NULL: a NULL element. */
int store_pg_arr_i64(struct fo_buf *b, int64_t v);
int store_pg_arr_bytes(struct fo_buf *b, const void *p, size_t n);
int store_pg_arr_str(struct fo_buf *b, const char *v);
/* Completes b's header: n elements of type elem (its pg_type OID). */
void store_pg_arr_close(struct fo_buf *b, size_t n, uint32_t elem);
/* Rows put inside a write transaction go out in bulk: buffered by these,
 * sent by store_pg_flush before any other statement and by store_pg_send
 * with the COMMIT, dropped by store_pg_discard at rollback. So a put's
 * error (a taken seq) shows at the next statement or the commit. */
int store_pg_buffer_entry(struct store *s, const struct store_rec *r,
                          const void *body, size_t body_len,
                          struct fo_err *err);
int store_pg_buffer_node(struct store *s, int64_t pos, const uint8_t hash[32],
                         struct fo_err *err);
/* The integrator's closing, queued: its outcomes, the staged bodies moved
 * to their seqs (all of them there, or the transaction fails), the staged
 * batches dropped, NOTIFY forum_integrated. */
int store_pg_queue_finish(struct store *s, const struct store_moved *moved,
                          size_t nm, const int64_t *batches,
                          const char *const *outcomes, size_t nb,
                          struct fo_err *err);
int store_pg_flush(struct store *s, struct fo_err *err);
/* What is buffered and queued, then COMMIT when commit: one pipeline. */
int store_pg_send(struct store *s, int commit, struct fo_err *err);
void store_pg_discard(struct store *s);
void store_pg_bulk_free(struct store *s);
/* The staged appends' tables, made when missing (read-write open). */
int store_pg_stage_ensure(struct store *s, struct fo_err *err);
/* After a (re)connect: LISTEN again when the handle listened. */
int store_pg_stage_relisten(struct store *s, struct fo_err *err);

int store_pg_stage_put(struct store *s, const struct store_stage *rows,
                       size_t n, const int64_t *forget, size_t nf,
                       int64_t *batch, struct fo_err *err);
/* The statement of stage_take: $1 the rows wanted (int8). */
extern const char store_pg_take_sql[];
int store_pg_stage_take(struct store *s, size_t max_rows,
                        int (*fn)(void *ctx, const struct store_stage *row),
                        void *ctx, struct fo_err *err);
int store_pg_stage_finish(struct store *s, const struct store_moved *moved,
                          size_t nm, const int64_t *batches,
                          const char *const *outcomes, size_t nb,
                          struct fo_err *err);
int store_pg_stage_collect(struct store *s, const int64_t *batches, size_t nb,
                           int (*fn)(void *ctx, int64_t batch,
                                     const char *outcome),
                           void *ctx, struct fo_err *err);
int store_pg_stage_listen(struct store *s, int *fd, struct fo_err *err);
unsigned store_pg_stage_notes(struct store *s);
int store_pg_ilease(struct store *s, int op, const char *owner, int ttl_ms,
                    int *held, int *live, char *holder, size_t cap,
                    struct fo_err *err);
int store_pg_stage_prune(struct store *s, struct fo_err *err);

#endif
