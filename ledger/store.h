/* store: the one internal storage interface of the ledger. All SQL lives
 * behind it (store_sqlite.c); a PostgreSQL back end would be a second table
 * of these operations, not a rewrite of ledger.c. Only ledger/ includes this
 * header. A store handle is used by one thread at a time. */
#ifndef LEDGER_STORE_H
#define LEDGER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_err.h"

#define STORE_ACTOR_MAX 128
#define STORE_KIND_MAX 64

/* One stored entry: the hashed fields but `v` (always 1 in this format). */
struct store_rec {
    int64_t seq;
    int64_t ts;
    int64_t parent; /* -1 for null */
    char actor[STORE_ACTOR_MAX + 1];
    char kind[STORE_KIND_MAX + 1];
    size_t actor_len, kind_len;
    uint8_t payload[32];
    uint8_t prev[32];
    uint8_t hash[32];
};

/* A scanned row: the record and, when asked for, its body (NULL when the
 * body is absent). Pointers are valid only during the callback. */
struct store_row {
    struct store_rec rec;
    const void *body;
    size_t body_len;
};

typedef int (*store_row_fn)(void *ctx, const struct store_row *row);

/* One staged append (store_ops.stage_*): what a writer asked for, not yet
 * in the chain. The strings are NUL-terminated; sole is the sole kinds
 * joined by commas (NULL: none), lease_owner NULL when not leased. */
struct store_stage {
    int64_t batch;
    int64_t idx; /* its place in the writer's batch */
    const char *submitter;
    int64_t ts; /* when staged (the writer's clock), microseconds */
    const char *actor;
    const char *kind;
    int64_t parent; /* -1: none */
    int64_t parent_back;
    uint8_t payload[32];
    const void *body;
    size_t body_len;
    const char *lease_owner;
    int64_t lease_run;
    int64_t lease_ms;
    const char *sole;
};

/* A staged row integrated at seq. */
struct store_moved {
    int64_t batch, idx, seq;
};

struct store;

enum {
    STORE_CREATE = 1,   /* create the database when it does not exist */
    STORE_READONLY = 2, /* never write (verify, read-only commands) */
};

struct store_ops {
    const char *name;
    /* Opens (or creates) the store at dir. A file that is not a forum
     * ledger is refused without being modified (FO_E_FOREIGN, FO_E_TOO_NEW,
     * FO_E_CORRUPT); no database gives FO_E_NOT_FOUND unless STORE_CREATE. */
    int (*open)(const char *dir, unsigned flags, int busy_ms,
                struct store **out, struct fo_err *err);
    void (*close)(struct store *s);

    /* Transactions. A write transaction takes the write lock at once
     * (across processes); commit returns only after the commit is durable.
     * Reads outside a transaction see the latest committed state.
     *
     * A read-write store also checks each commit (see check): just before
     * it, that the WAL still holds every frame counted as committed; just
     * after it, that the files at the ledger's paths are still the ones it
     * opened. When not, commit fails with FO_E_STORAGE_MOVED (rolled back
     * when seen before; committed to the lost files only, and still an
     * error, when seen after), and from then on begin_write fails with the
     * same error at once: the store is lost until it is closed. Reads go
     * on. */
    int (*begin_write)(struct store *s, struct fo_err *err);
    int (*begin_read)(struct store *s, struct fo_err *err);
    int (*commit)(struct store *s, struct fo_err *err);
    void (*rollback)(struct store *s);

    /* Meta key/values (ledger id, origin, format). *val is malloc'd. */
    int (*meta_get)(struct store *s, const char *key, char **val,
                    struct fo_err *err);
    int (*meta_set)(struct store *s, const char *key, const char *val,
                    struct fo_err *err);

    /* The number of entries and, when count > 0, the last one. */
    int (*head)(struct store *s, int64_t *count, struct store_rec *last,
                struct fo_err *err);
    /* Inside a write transaction. body may be NULL. A store may send
     * puts in bulk before its next statement or at the commit (PostgreSQL:
     * binary COPY), so a put's failure (a taken seq: FO_E_CORRUPT) may be
     * reported there instead; reads in the transaction see every put. */
    int (*put_entry)(struct store *s, const struct store_rec *rec,
                     const void *body, size_t body_len, struct fo_err *err);
    int (*put_node)(struct store *s, int64_t pos, const uint8_t hash[32],
                    struct fo_err *err);

    int (*get_entry)(struct store *s, int64_t seq, struct store_rec *rec,
                     int *has_body, struct fo_err *err);
    int (*get_node)(struct store *s, int64_t pos, uint8_t hash[32],
                    struct fo_err *err);
    /* *body malloc'd; FO_E_NOT_FOUND when the entry has no body. */
    int (*get_body)(struct store *s, int64_t seq, void **body, size_t *len,
                    struct fo_err *err);
    /* Streams entries with seq in [from, from + limit) in seq order (limit
     * < 0: to the end); with_bodies joins the bodies. A non-zero return of
     * fn stops the scan and is returned. */
    int (*scan)(struct store *s, int64_t from, int64_t limit, int with_bodies,
                store_row_fn fn, void *ctx, struct fo_err *err);
    /* Streams entry root and every entry whose parent chain reaches it, in
     * seq order, at most limit (< 0: all); no bodies. fn as in scan. */
    int (*descendants)(struct store *s, int64_t root, int64_t limit,
                       store_row_fn fn, void *ctx, struct fo_err *err);
    /* Streams the root entries of kind `request` with seq >= from (the
     * runs), in seq order; no bodies. fn as in scan. */
    int (*requests)(struct store *s, int64_t from, store_row_fn fn, void *ctx,
                    struct fo_err *err);
    /* Streams the entries of kind `gate_requested` with seq >= from, in
     * seq order; no bodies. fn as in scan. */
    int (*gates)(struct store *s, int64_t from, store_row_fn fn, void *ctx,
                 struct fo_err *err);
    /* Streams the entries of kind `session_started` (which 0) or `turn`
     * (which 1) with seq >= from, in seq order; no bodies. */
    int (*marked)(struct store *s, int which, int64_t from, store_row_fn fn,
                  void *ctx, struct fo_err *err);
    /* An online, consistent copy of the whole store (one read snapshot)
     * into a new file at path (which must not exist), made durable before
     * it returns; NULL
     * where the store has no such copy (then FO_E_INVALID). */
    int (*backup)(struct store *s, const char *path, struct fo_err *err);
    /* A cursor over tree nodes with pos >= from in pos order, stepped
     * while a scan runs (verify walks both side by side). next gives FO_OK
     * and a node, or FO_E_NOT_FOUND past the last; end releases it. */
    int (*nodes_begin)(struct store *s, int64_t from, struct fo_err *err);
    int (*nodes_next)(struct store *s, int64_t *pos, uint8_t hash[32],
                      struct fo_err *err);
    void (*nodes_end)(struct store *s);
    /* Streams the seqs of entries whose payload hash is `payload`. */
    int (*find_payload)(struct store *s, const uint8_t payload[32],
                        int (*fn)(void *ctx, int64_t seq), void *ctx,
                        struct fo_err *err);
    /* Deletes the stored body of entry seq (no error when absent). */
    int (*delete_body)(struct store *s, int64_t seq, struct fo_err *err);
    /* Counts of stored bodies, and entries by kind and by actor. */
    int (*count_bodies)(struct store *s, int64_t *present, struct fo_err *err);
    int (*group_counts)(struct store *s, const char *column,
                        int (*fn)(void *ctx, const char *key, int64_t n),
                        void *ctx, struct fo_err *err);

    /* Signed checkpoints, kept forever: one per tree size. */
    int (*put_checkpoint)(struct store *s, int64_t size, int64_t ts,
                          const uint8_t root[32], const char *note,
                          struct fo_err *err);
    /* The checkpoint of the largest size <= max_size (max_size < 0: the
     * latest). FO_E_NOT_FOUND when none. *note malloc'd. */
    int (*get_checkpoint)(struct store *s, int64_t max_size, int64_t *size,
                          uint8_t root[32], char **note, struct fo_err *err);
    int (*scan_checkpoints)(struct store *s,
                            int (*fn)(void *ctx, int64_t size,
                                      const uint8_t root[32], const char *note),
                            void *ctx, struct fo_err *err);

    /* Witness cosignatures of the stored checkpoint of tree size `size`,
     * one per witness key ("<name>+<8 hex id>"): the signature line
     * without its newline and its timestamp. A witness's later cosignature
     * replaces its earlier one. Inside a write transaction. */
    int (*put_cosignature)(struct store *s, int64_t size, const char *key,
                           int64_t ts, const char *line, struct fo_err *err);
    /* Streams the cosignatures of size, by key. None when the ledger has
     * never stored one. */
    int (*scan_cosignatures)(struct store *s, int64_t size,
                             int (*fn)(void *ctx, const char *key, int64_t ts,
                                       const char *line),
                             void *ctx, struct fo_err *err);

    /* Moves the WAL into the database and truncates it, so deleted bytes
     * leave the disk (redaction). */
    int (*wal_truncate)(struct store *s, struct fo_err *err);

    /* Checks the store's files now (what commit checks): FO_OK, or
     * FO_E_STORAGE_MOVED (and the store is lost from then on: begin_write
     * refuses), or FO_E_IO when the files cannot be looked at (not sticky).
     * Once lost, returns the first error again. Never blocks on a lock. */
    int (*check)(struct store *s, struct fo_err *err);

    /* One write transaction around many (NULL where the store cannot:
     * SQLite). hold(s, 1, 0) begins a write transaction (the writers' lock
     * held from then on); until hold(s, 0, keep), begin_write, begin_read,
     * commit and rollback join it and do nothing of their own. hold(s, 0,
     * 1) commits it, hold(s, 0, 0) rolls it back: everything done under
     * the hold is kept, or none of it. */
    int (*hold)(struct store *s, int on, int keep, struct fo_err *err);

    /* Test-only fault seam: make the n-th following commit fail with an
     * I/O error (0 disables). */
    void (*fail_commit_after)(struct store *s, int n);

    /* Run leases: which daemon runs which run when several daemons share
     * one ledger (docs/OPERATIONS.md, "Several daemons on one PostgreSQL
     * ledger"). A row (run, owner, expires), expiry on the database
     * server's clock. All NULL where the store keeps none (SQLite: one
     * daemon per ledger). owner: 1-64 bytes of [0-9a-f]. */
    /* Inside a write transaction: run is owner's for ttl_ms from now (made,
     * or taken over). */
    int (*lease_put)(struct store *s, int64_t run, const char *owner,
                     int ttl_ms, struct fo_err *err);
    /* Inside a write transaction: *held 1 when owner holds run's lease
     * (expired or not: nobody took it over). */
    int (*lease_held)(struct store *s, int64_t run, const char *owner,
                      int *held, struct fo_err *err);
    /* Its own write transaction (so it waits for a writer's batch under
     * way): run becomes owner's for ttl_ms when it has no lease or its
     * lease expired (*got 1), else nothing changes (*got 0). */
    int (*lease_claim)(struct store *s, int64_t run, const char *owner,
                       int ttl_ms, int *got, struct fo_err *err);
    /* Outside a transaction: owner's leases of runs[0..n) run ttl_ms from
     * now; fn is called for each run renewed (one taken over by another
     * owner is not). */
    int (*lease_renew)(struct store *s, const char *owner, const int64_t *runs,
                       size_t n, int ttl_ms, int (*fn)(void *ctx, int64_t run),
                       void *ctx, struct fo_err *err);
    /* Outside a transaction: drop 1 deletes owner's lease of run; 0 makes
     * it expire now (another owner may claim it at once). */
    int (*lease_release)(struct store *s, int64_t run, const char *owner,
                         int drop, struct fo_err *err);
    /* Outside a transaction: run's lease, FO_E_NOT_FOUND when it has none;
     * its owner into owner (cap bytes), *live 1 when it has not expired. */
    int (*lease_get)(struct store *s, int64_t run, char *owner, size_t cap,
                     int *live, struct fo_err *err);
    /* Outside a transaction: streams the runs whose lease has expired, in
     * run order, at most limit. */
    int (*lease_expired)(struct store *s, int64_t limit,
                         int (*fn)(void *ctx, int64_t run), void *ctx,
                         struct fo_err *err);

    /* Staged appends (several writers, one integrator; docs/OPERATIONS.md,
     * "Several daemons on one PostgreSQL ledger"). All NULL where the
     * store has none (SQLite: one writer). */
    /* Its own short transaction, without the writers' lock: stages
     * rows[0..n) under one new batch id (*batch), in order, and forgets
     * the outcomes of the batches forget[0..nf) (collected already).
     * Returns once the commit is durable. */
    int (*stage_put)(struct store *s, const struct store_stage *rows, size_t n,
                     const int64_t *forget, size_t nf, int64_t *batch,
                     struct fo_err *err);
    /* begin_write for an integration that takes up to max_rows staged
     * rows next (stage_take with the same max_rows): a store may read
     * them with the BEGIN, in one round trip. NULL: begin_write. */
    int (*stage_begin)(struct store *s, size_t max_rows, struct fo_err *err);
    /* Inside a write transaction: streams the staged rows of whole
     * batches, oldest batch first, in (batch, idx) order, until at least
     * max_rows rows (one batch at least); no bodies (body NULL, body_len
     * its length). */
    int (*stage_take)(struct store *s, size_t max_rows,
                      int (*fn)(void *ctx, const struct store_stage *row),
                      void *ctx, struct fo_err *err);
    /* Inside the same write transaction: the bodies of the integrated rows
     * moved[0..nm) become entry bodies (at their seq), each taken batch's
     * outcome text is stored, the taken batches leave the staging table,
     * and the writers are notified at commit. */
    int (*stage_finish)(struct store *s, const struct store_moved *moved,
                        size_t nm, const int64_t *batches,
                        const char *const *outcomes, size_t nb,
                        struct fo_err *err);
    /* Outside a transaction: streams the outcomes stored for any of
     * batches[0..nb) (those integrated so far). */
    int (*stage_collect)(struct store *s, const int64_t *batches, size_t nb,
                         int (*fn)(void *ctx, int64_t batch,
                                   const char *outcome),
                         void *ctx, struct fo_err *err);
    /* Outside a transaction: listen for the notes of stagings and
     * integrations; *fd (may change after a reconnect) turns readable when
     * one came; notes reads what came (STORE_NOTE_* bits), never waiting. */
    int (*stage_listen)(struct store *s, int *fd, struct fo_err *err);
    unsigned (*stage_notes)(struct store *s);
    /* Outside a transaction: the integration lease, one row on the
     * server's clock. op STORE_ILEASE_GET: *held 1 when owner holds it
     * live, the holder (live or not) into holder (cap bytes, "" when
     * none), *live whether it is live. CLAIM: owner takes it when nobody
     * holds it live (or owner does). RENEW: owner keeps it when it still
     * holds it. RELEASE: owner's lease expires now. *held after each. */
    int (*ilease)(struct store *s, int op, const char *owner, int ttl_ms,
                  int *held, int *live, char *holder, size_t cap,
                  struct fo_err *err);
    /* Outside a transaction: drops outcomes nobody collected for a long
     * while (their writer died). */
    int (*stage_prune)(struct store *s, struct fo_err *err);
};

enum { STORE_NOTE_STAGED = 1, STORE_NOTE_INTEGRATED = 2 };
enum {
    STORE_ILEASE_GET,
    STORE_ILEASE_CLAIM,
    STORE_ILEASE_RENEW,
    STORE_ILEASE_RELEASE
};

extern const struct store_ops store_sqlite_ops;
/* ledger_fail_commits_after's seam (store_sqlite.c). */
void store_sqlite_fail_any_after(int n);
/* PostgreSQL over libpq (store_pg.c): the conninfo comes from
 * DIR/store.json; see docs/OPERATIONS.md. */
extern const struct store_ops store_pg_ops;

/* DIR/store.json: which store holds the data dir's ledger. No file means
 * SQLite (DIR/ledger.db). {"store": "postgres", "conninfo": "host=...
 * dbname=... user=...", "ledger_id": "<hex>"}: ledger_id, once recorded,
 * pins the database to that ledger (another one is refused). The password
 * is never in it: libpq reads PGPASSWORD or PGPASSFILE (~/.pgpass). */
#define STORE_CONF_FILE "store.json"

struct store_conf {
    int postgres;
    char *conninfo;  /* postgres: libpq connection string, no password */
    char *ledger_id; /* the ledger the database must hold, or NULL */
};

/* Reads DIR/store.json into c (zeroed first; freed with store_conf_free).
 * An absent file gives FO_OK and the SQLite default; a malformed one
 * FO_E_INVALID naming the file. */
int store_conf_read(const char *dir, struct store_conf *c, struct fo_err *err);
/* Replaces DIR/store.json with c atomically (temp file, fsync, rename,
 * directory fsync), mode 0600. */
int store_conf_write(const char *dir, const struct store_conf *c,
                     struct fo_err *err);
void store_conf_free(struct store_conf *c);

/* Checks a libpq conninfo (key=value or URI form) for a store.json: it
 * parses, and it holds no password. FO_E_INVALID naming the problem. */
int store_pg_check_conninfo(const char *conninfo, struct fo_err *err);

#endif
