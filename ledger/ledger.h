/* ledger: the durable, append-only, verifiable log (forum-ledger v1).
 *
 * An entry is {v, seq, ts, actor, kind, parent, payload, prev}; its hash is
 * SHA-256 of the JCS form of exactly those fields. payload is the SHA-256 of
 * the body's canonical JSON; bodies are stored beside entries and may be
 * redacted to their hash. Every append also extends the RFC 6962 Merkle tree
 * in the same transaction. See docs/LEDGER.md.
 *
 * A struct ledger is used by one thread at a time; open one per thread.
 * Several processes may open the same ledger: appends stay correct. */
#ifndef LEDGER_H
#define LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

#define LEDGER_ACTOR_MAX 128
#define LEDGER_KIND_MAX 64
#define LEDGER_BODY_MAX_DEFAULT (1u << 20)
#define LEDGER_NO_PARENT (-1)
#define LEDGER_HASH_LEN 32

struct ledger;

struct ledger_entry {
    int64_t seq;
    int64_t ts;     /* microseconds since the epoch, never decreasing */
    int64_t parent; /* LEDGER_NO_PARENT or a seq < seq */
    char actor[LEDGER_ACTOR_MAX + 1];
    char kind[LEDGER_KIND_MAX + 1];
    uint8_t payload[LEDGER_HASH_LEN];
    uint8_t prev[LEDGER_HASH_LEN];
    uint8_t hash[LEDGER_HASH_LEN];
};

struct ledger_config {
    const char *origin;  /* at creation; NULL: "forum/<ledger id>" */
    size_t max_body;     /* canonical body bytes; 0: 1 MiB */
    int busy_timeout_ms; /* 0: 10 s */
    /* At creation: the lowest tree level stored (1-8; 0:
     * LEDGER_TREE_MIN_LEVEL). Lower levels are recomputed from at most
     * 2^(level-1) entry hashes when a proof or an append needs them. Fixed for
     * the ledger's life. */
    unsigned tree_min_level;
};

#define LEDGER_TREE_MIN_LEVEL 4

enum {
    LEDGER_OPEN_CREATE = 1,   /* create the dir and database if absent */
    LEDGER_OPEN_READONLY = 2, /* never write: verify, show, get */
};

/* Opens the ledger in dir. cfg may be NULL. Errors: FO_E_NOT_FOUND (no
 * ledger and no LEDGER_OPEN_CREATE), FO_E_FOREIGN / FO_E_TOO_NEW /
 * FO_E_CORRUPT (a file that is not a ledger this version reads: refused, not
 * modified), FO_E_INVALID (bad origin), FO_E_IO. */
int ledger_open(const char *dir, unsigned flags,
                const struct ledger_config *cfg, struct ledger **out,
                struct fo_err *err);

/* Makes dir's ledger live in PostgreSQL: writes DIR/store.json naming
 * conninfo (a libpq connection string, key=value or URI; it must hold no
 * password: libpq reads PGPASSWORD or PGPASSFILE). Creates dir when absent.
 * FO_E_EXISTS when dir holds a SQLite ledger or names another database;
 * FO_OK when it names this one already. The next ledger_open with
 * LEDGER_OPEN_CREATE makes the ledger in the database. */
int ledger_use_postgres(const char *dir, const char *conninfo,
                        struct fo_err *err);

/* The store the ledger lives in: "sqlite" or "postgres". */
const char *ledger_store_name(const struct ledger *l);

/* Closes the ledger (NULL-safe). Any thread may close a handle once its
 * owner is done with it (joined, or handed it back). */
void ledger_close(struct ledger *l);

/* A handle belongs to one thread: the one that opened it, until another
 * takes it over by calling this (a handle opened on the main thread for
 * a committer or worker thread, say). The handoff must be ordered by a
 * lock, a queue or pthread_create, and the previous owner must not use
 * the handle afterwards. Builds with FORUM_OWNER_ASSERTS (the tests')
 * abort on a call from any other thread, naming the function; other
 * builds record nothing. */
void ledger_set_owner(struct ledger *l);

/* The ledger's fixed identity: a random id made at creation, and the origin
 * (the checkpoint origin line and key name). Owned by the ledger. */
const char *ledger_id(const struct ledger *l);
const char *ledger_origin(const struct ledger *l);

const char *ledger_dir(const struct ledger *l);
size_t ledger_max_body(const struct ledger *l);

/* One append of a batch. body is the payload's canonical JSON (JCS), as
 * fo_json_canon writes it; the ledger hashes those bytes as given. */
struct ledger_append {
    const char *actor;
    const char *kind;
    int64_t parent;   /* LEDGER_NO_PARENT or an existing seq */
    const char *body; /* NULL only with import: a redacted body */
    size_t body_len;
    /* Import (`forum ledger import`): the entry as the exporting ledger
     * recorded it. Its seq must be the next one, its ts not below the last,
     * its payload the SHA-256 of body (or, body NULL, the redacted body's),
     * and the hash the entry comes out with must be its hash: FO_E_CORRUPT
     * otherwise. NULL: a new entry. */
    const struct ledger_entry *import;
    /* > 0: the parent is the entry of the request parent_back places
     * before this one in the same reqs array (so a batch can link its own
     * entries before their seqs are known); parent is then set to that
     * entry's seq. That request must have been appended (FO_E_INVALID
     * otherwise). 0: parent as given. */
    int64_t parent_back;
    /* Run leases (a store that keeps them; ignored elsewhere): with
     * lease_owner set, lease_run < 0 leases the new entry (a run's
     * request) to lease_owner for lease_ms in the same transaction;
     * lease_run >= 0 makes the append only while lease_owner holds that
     * run's lease (rc FO_E_RUN_ELSEWHERE when another owner took it). */
    const char *lease_owner;
    int64_t lease_run;
    int lease_ms;
    /* Decisions that must be made once (a gate's approval or rejection):
     * non-NULL, a NULL-terminated list of kinds; the entry goes in only
     * while its parent has no child of one of these kinds, checked inside
     * the write transaction, so two writers racing (two requests, two
     * daemons on one PostgreSQL) append exactly one of them. The other
     * gets rc FO_E_EXISTS ("entry N: already decided by seq M") with
     * entry.seq set to M, the child already there; the batch goes on. */
    const char *const *sole_kinds;
    /* results */
    int rc;                    /* FO_OK when appended */
    struct fo_err err;         /* why not, when rc != FO_OK */
    struct ledger_entry entry; /* the new entry, when rc == FO_OK */
};

/* An append queued for an asynchronous committer (the daemon's group
 * commit, daemon/commit.h; the surfaces see only this). The submitter owns
 * it (and a's body) until done runs. done is called on the committer's
 * thread once the batch holding it has committed (a.rc FO_OK, a.entry set)
 * or failed (a.rc, a.err say why). flush, when set, is called on the same
 * thread after done has run for every request of the batch that names the
 * same flush and flush_arg: a submitter can hand a whole batch of answers
 * over at once. */
struct ledger_queued_append {
    struct ledger_append a;
    void (*done)(struct ledger_queued_append *r);
    void *arg; /* for done */
    void (*flush)(void *flush_arg);
    void *flush_arg;
    /* set by a group submit on the group's first request: how many
     * requests the group has (they go into one transaction) */
    size_t group;
    struct ledger_queued_append *next; /* private to the queue */
};

/* Appends a batch in one transaction: one fsync for all. Each request is
 * validated on its own (actor 1-128 bytes of UTF-8, kind 1-64 bytes of
 * [a-z0-9_.-], parent < its seq, body within the limit); invalid ones get
 * their rc and are skipped, the valid ones get contiguous seqs. Returns
 * FO_OK once the transaction has committed durably (then each req's rc
 * tells), or an error for the whole batch, in which case nothing was written
 * and every req's rc is that error. Blocks on the write lock and fsync.
 *
 * FO_E_STORAGE_MOVED: the ledger's files are no longer the ones this handle
 * opened (ledger.db, ledger.db-wal or ledger.db-shm deleted, renamed away or
 * replaced), or the WAL lost committed frames (truncated or overwritten):
 * the WAL is checked just before the commit, the files just after. Nothing
 * of the batch is acknowledged: seen before the commit it was rolled back;
 * seen after, it went into the lost files only. The handle is
 * lost from then on: every later write (append, redact, checkpoint) fails
 * with the same error at once, reads go on, until it is closed. */
int ledger_append_batch(struct ledger *l, struct ledger_append *reqs, size_t n,
                        struct fo_err *err);

/* Appends one entry: ledger_append_batch of one. out may be NULL. */
int ledger_append(struct ledger *l, const char *actor, const char *kind,
                  int64_t parent, const char *body, size_t body_len,
                  struct ledger_entry *out, struct fo_err *err);

/* Appends one entry whose payload is a cJSON value (canonicalised here). */
int ledger_append_json(struct ledger *l, const char *actor, const char *kind,
                       int64_t parent, const cJSON *payload,
                       struct ledger_entry *out, struct fo_err *err);

/* All or nothing over many batches (ledger import): ledger_hold(l, 1, 0)
 * opens one write transaction that every following append batch and read
 * of l joins (the writers' lock is held all along: other writers wait);
 * ledger_hold(l, 0, keep) commits it (keep) or rolls it back, so what was
 * appended in between is kept whole or not at all. Where the store cannot
 * (SQLite) both do nothing and return FO_OK: each batch commits on its own,
 * and ledger_can_hold is 0. */
int ledger_hold(struct ledger *l, int on, int keep, struct fo_err *err);
int ledger_can_hold(const struct ledger *l);

/* Run leases: which daemon runs which run when several share the ledger
 * (store.h; docs/OPERATIONS.md). ledger_leases is 1 when the store keeps
 * them (PostgreSQL); the others give FO_E_INVALID where it does not. */
int ledger_leases(const struct ledger *l);
/* Takes run's lease for owner when it has none or it expired (*got). */
int ledger_lease_claim(struct ledger *l, int64_t run, const char *owner,
                       int ttl_ms, int *got, struct fo_err *err);
/* Renews owner's leases of runs[0..n); fn gets each run renewed. */
int ledger_lease_renew(struct ledger *l, const char *owner, const int64_t *runs,
                       size_t n, int ttl_ms, int (*fn)(void *ctx, int64_t run),
                       void *ctx, struct fo_err *err);
/* drop 1: deletes owner's lease of run; 0: it expires now. */
int ledger_lease_release(struct ledger *l, int64_t run, const char *owner,
                         int drop, struct fo_err *err);
/* run's lease: FO_E_NOT_FOUND when none, else its owner and *live. */
int ledger_lease_get(struct ledger *l, int64_t run, char *owner, size_t cap,
                     int *live, struct fo_err *err);
/* The runs whose lease expired, at most limit, in run order. */
int ledger_lease_expired(struct ledger *l, int64_t limit,
                         int (*fn)(void *ctx, int64_t run), void *ctx,
                         struct fo_err *err);

/* Staged appends: several writers on one ledger without a lock between
 * them (PostgreSQL; docs/OPERATIONS.md, "Several daemons on one PostgreSQL
 * ledger"). A writer stages its batch unsequenced (ledger_stage); the
 * integrator, the one process holding the integration lease, sequences
 * what is staged in its own write transactions (ledger_integrate), whole
 * batches in batch order, with every check of ledger_append_batch (the
 * run lease fence and the sole decisions included), and leaves each
 * batch's outcome for its writer (ledger_stage_collect). ledger_can_stage
 * is 0 where the store has none (SQLite) or the handle is read-only; the
 * others then give FO_E_INVALID. */
int ledger_can_stage(const struct ledger *l);

/* Stages reqs[0..n) as one batch, in its own short transaction (no
 * writers' lock), durable when it returns FO_OK. A request that fails a
 * check needing no head (actor, kind, payload, its size, parent, lease
 * owner) gets its rc now and is not staged; the others get rc FO_OK,
 * entry.seq -1 and entry.payload: staged, not yet appended. *batch is
 * the batch's id, or -1 when nothing was staged. submitter: the writer's
 * id (1-64 lowercase hex). forget[0..nf): batches whose outcomes were
 * collected (dropped in the same transaction; n 0: only that, without
 * waiting for the disk). On an error nothing was staged and every req's
 * rc is it. Blocks on a round trip and the fsync. */
int ledger_stage(struct ledger *l, struct ledger_append *reqs, size_t n,
                 const char *submitter, const int64_t *forget, size_t nf,
                 int64_t *batch, struct fo_err *err);

/* Calls fn with the outcome of each of batches[0..nb) integrated so far;
 * batches not yet integrated are not called for. The outcome is valid
 * during the call. Outcomes stay until forgotten (ledger_stage's forget,
 * with n 0 to forget only), so an answer lost on the way is read again. */
int ledger_stage_collect(struct ledger *l, const int64_t *batches, size_t nb,
                         int (*fn)(void *ctx, int64_t batch,
                                   const char *outcome),
                         void *ctx, struct fo_err *err);

/* Applies a batch's outcome to the requests ledger_stage staged from
 * reqs[0..n): each staged one gets rc FO_OK and its entry (whose hash is
 * checked against what was staged), or the rc and err of its refusal
 * (FO_E_EXISTS with entry.seq, FO_E_RUN_ELSEWHERE, ...). FO_E_CORRUPT
 * when the outcome does not fit the requests. */
int ledger_stage_outcome(const char *outcome, struct ledger_append *reqs,
                         size_t n, struct fo_err *err);

/* The integrator's transaction: takes the staged rows of whole batches
 * (oldest first, at least one batch, about max_staged rows; none when
 * max_staged is 0), appends them, then reqs[0..n) (this process's own
 * appends, which need no staging), leaves the staged batches' outcomes and
 * notifies their writers, and commits. *staged: the rows taken. Returns
 * like ledger_append_batch for reqs; on an error the staged rows stay
 * staged for the next integration. Blocks on the writers' lock and the
 * fsync. */
int ledger_integrate(struct ledger *l, struct ledger_append *reqs, size_t n,
                     size_t max_staged, size_t *staged, struct fo_err *err);

/* Notes of stagings and integrations on this handle's connection: *fd
 * turns readable when one may have come; ledger_stage_notes reads them
 * without waiting (LEDGER_NOTE_* bits; both after a reconnect, when some
 * may have been missed). */
enum { LEDGER_NOTE_STAGED = 1, LEDGER_NOTE_INTEGRATED = 2 };
int ledger_stage_listen(struct ledger *l, int *fd, struct fo_err *err);
unsigned ledger_stage_notes(struct ledger *l);

/* The integration lease: which process integrates (one row, expiry on
 * the database server's clock). GET: *held 1 when owner holds it live,
 * its holder into holder (cap bytes; "" when nobody ever held it). CLAIM:
 * owner takes it unless another holds it live. RENEW: owner keeps it for
 * ttl_ms more, when it still holds it. RELEASE: owner's lease expires now
 * (another may claim it at once). */
enum {
    LEDGER_ILEASE_GET,
    LEDGER_ILEASE_CLAIM,
    LEDGER_ILEASE_RENEW,
    LEDGER_ILEASE_RELEASE
};
int ledger_integrator_lease(struct ledger *l, int op, const char *owner,
                            int ttl_ms, int *held, char *holder, size_t cap,
                            struct fo_err *err);

/* Drops outcomes no writer collected for ten minutes (it died). */
int ledger_stage_prune(struct ledger *l, struct fo_err *err);

/* Validation used by append, exposed for front ends that check early. */
int ledger_check_actor(const char *actor, struct fo_err *err);
int ledger_check_kind(const char *kind, struct fo_err *err);

/* Asks the store whether it can still be read (write 0: the head is
 * read) or written (write 1: a one-row transaction, a `health_probe` meta
 * value, committed and made durable like an append). For health checks
 * of a daemon whose appends failed, or that has had none for a while.
 * FO_OK, or the store's error (FO_E_IO on a full disk or a database that
 * went away). Blocks on the store (a round trip, an fsync). */
int ledger_probe(struct ledger *l, int write, struct fo_err *err);

/* The number of entries (the next seq). */
int ledger_count(struct ledger *l, int64_t *count, struct fo_err *err);

/* Entry seq; *body_present (may be NULL) is 1 when its body is stored.
 * FO_E_NOT_FOUND when there is no such entry. */
int ledger_get(struct ledger *l, int64_t seq, struct ledger_entry *out,
               int *body_present, struct fo_err *err);

/* The body of entry seq, as stored canonical JSON: *body malloc'd and
 * NUL-terminated. FO_E_REDACTED when it was redacted, FO_E_NOT_FOUND when
 * there is no such entry. The bytes are re-hashed against the payload hash
 * on the way out: a mismatch is FO_E_CORRUPT, never served. */
int ledger_body(struct ledger *l, int64_t seq, char **body, size_t *len,
                struct fo_err *err);

/* A body by its payload hash (any entry holding it). FO_E_NOT_FOUND when no
 * entry has that payload, FO_E_REDACTED when every copy was redacted. Costs
 * a scan of the entries (content lookups are rare; appends stay fast). */
int ledger_body_by_hash(struct ledger *l, const uint8_t hash[32], char **body,
                        size_t *len, struct fo_err *err);

/* Calls fn for entries from `from`, at most limit of them (limit < 0: all),
 * in seq order. A non-zero return of fn stops and is returned. */
typedef int (*ledger_entry_fn)(void *ctx, const struct ledger_entry *e);

/* As ledger_range, with each entry's body (canonical JSON; NULL when it
 * was redacted), in one read snapshot. The body is valid only during the
 * call. */
typedef int (*ledger_body_fn)(void *ctx, const struct ledger_entry *e,
                              const char *body, size_t len);
int ledger_range_bodies(struct ledger *l, int64_t from, int64_t limit,
                        ledger_body_fn fn, void *ctx, struct fo_err *err);
int ledger_range(struct ledger *l, int64_t from, int64_t limit,
                 ledger_entry_fn fn, void *ctx, struct fo_err *err);

/* Calls fn for root and every entry whose parent chain reaches it (a run's
 * entries, under its request), in seq order, at most limit (< 0: all).
 * Reads only those entries (an index by parent), however many others
 * came between. A non-zero return of fn stops and is returned. */
int ledger_descendants(struct ledger *l, int64_t root, int64_t limit,
                       ledger_entry_fn fn, void *ctx, struct fo_err *err);

/* Calls fn for every `request` entry without a parent (a run's first
 * entry) with seq >= from, in seq order, through an index of them alone. A
 * non-zero return of fn stops and is returned. */
int ledger_requests(struct ledger *l, int64_t from, ledger_entry_fn fn,
                    void *ctx, struct fo_err *err);

/* An online, consistent copy of the ledger's database into a new file at
 * path (FO_E_EXISTS when it exists), durable before it returns. Other
 * processes may append meanwhile; the copy is one state of the ledger.
 * The keys and token of the data dir are not in it. */
int ledger_backup(struct ledger *l, const char *path, struct fo_err *err);

/* Calls fn for every `session_started` (LEDGER_SESSIONS), `turn`
 * (LEDGER_TURNS) or `gateway_call` (LEDGER_GATEWAY) entry with seq >=
 * from, in seq order, through an index of them alone. A non-zero return of
 * fn stops and is returned. */
enum { LEDGER_SESSIONS = 0, LEDGER_TURNS = 1, LEDGER_GATEWAY = 2 };
int ledger_marked(struct ledger *l, int which, int64_t from, ledger_entry_fn fn,
                  void *ctx, struct fo_err *err);

/* Calls fn for every `gate_requested` entry (a run waiting for a human)
 * with seq >= from, in seq order, through an index of them alone. A
 * non-zero return of fn stops and is returned. */
int ledger_gates(struct ledger *l, int64_t from, ledger_entry_fn fn, void *ctx,
                 struct fo_err *err);

/* The causal chain of seq: following parent links to the root. *out is a
 * malloc'd array, root first, *n entries. A parent that is missing or not
 * smaller than its child (a damaged ledger) is FO_E_CORRUPT. */
int ledger_chain(struct ledger *l, int64_t seq, struct ledger_entry **out,
                 size_t *n, struct fo_err *err);

/* Verification. */
enum { LEDGER_VERIFY_DEEP = 1 };

struct ledger_verify_result {
    int ok;                /* chain ok, and bodies ok when deep */
    int chain;             /* the chain and tree verified */
    int64_t entries;       /* entries checked */
    int64_t first_bad_seq; /* -1 when ok; for a gap, the first missing */
    const char *reason;    /* NULL when ok; one of the names below */
    int deep;              /* -1 not asked, 1 bodies ok, 0 a bad body */
    int64_t bodies_checked, bodies_redacted, bodies_bad;
    int64_t first_bad_body_seq; /* -1 when none */
};

/* The fixed reasons: "seq_gap", "prev_mismatch", "hash_mismatch",
 * "bad_parent", "ts_backwards", "bad_field", "tree_mismatch",
 * "format_mismatch" (meta.format is not forum-ledger/1), "orphan_body"
 * (deep: a stored body of no entry), "checkpoint_beyond_log" (a stored
 * checkpoint signs more entries than the log has: it was cut), and
 * "checkpoint_mismatch" (a stored checkpoint's root or note is not what
 * the entries give). */

typedef void (*ledger_progress_fn)(void *ctx, int64_t done, int64_t total);

/* Walks the whole ledger in one read snapshot: seq continuity, prev links,
 * recomputed entry hashes, parent rules, ts order, field rules, and that the
 * stored Merkle tree matches the entries; with LEDGER_VERIFY_DEEP also
 * re-hashes every stored body. Streams: memory does not grow with the
 * ledger. Returns FO_OK when the check ran (res->ok tells the verdict), or
 * an I/O error. progress (may be NULL) is called now and then. */
int ledger_verify(struct ledger *l, unsigned flags, ledger_progress_fn progress,
                  void *pctx, struct ledger_verify_result *res,
                  struct fo_err *err);

/* The verify object of docs/LEDGER.md as JSON. */
cJSON *ledger_verify_json(const struct ledger_verify_result *res);

/* Redacts the body of entry seq: deletes every stored copy of that payload
 * (all entries with the same payload hash), appends a `redaction` entry
 * (actor "admin", parent seq, payload {"payload": hash, "reason": reason})
 * in the same transaction, then checkpoints the WAL so the bytes leave the
 * disk. FO_E_REDACTED when the body is already gone. out may be NULL. */
int ledger_redact(struct ledger *l, int64_t seq, const char *reason,
                  struct ledger_entry *out, struct fo_err *err);

/* 1 when the last ledger_redact on l committed but could not truncate the
 * WAL (a reader held an old snapshot): the deleted bytes may stay in
 * ledger.db-wal until the next redaction or a restart. */
int ledger_redact_wal_pending(const struct ledger *l);

/* Summary counts: {"entries", "head", "origin", "ledger_id", "by_kind":
 * {}, "by_actor": {}, "bodies_present", "bodies_redacted"}. What the
 * entries mean to the orchestrator (run counts) is orch_run_counts'. */
int ledger_summary(struct ledger *l, cJSON **out, struct fo_err *err);

/* Entry helpers. The JCS form of exactly the 8 hashed fields. */
int ledger_entry_canon(const struct ledger_entry *e, struct fo_buf *out);
/* The served form: the 8 fields plus "hash" (hex). NULL on no memory. */
cJSON *ledger_entry_json(const struct ledger_entry *e);
/* The JCS form of the served form, written directly (what fo_json_canon
 * makes of ledger_entry_json, without building the object). */
int ledger_entry_text(const struct ledger_entry *e, struct fo_buf *out);
/* Reads a served entry object back (the 8 fields; "hash" when present is
 * read into e->hash, else e->hash is left zero). */
int ledger_entry_from_json(const cJSON *obj, struct ledger_entry *e,
                           struct fo_err *err);
/* SHA-256 of ledger_entry_canon(e). */
int ledger_entry_hash(const struct ledger_entry *e, uint8_t out[32]);

/* Microseconds since the Unix epoch (UTC), the clock of entry ts. */
int64_t ledger_now_us(void);
/* Microseconds on a monotonic clock: for durations and deadlines, never
 * for an entry's ts. */
int64_t ledger_mono_us(void);

/* Checks now what every commit checks (above, ledger_append_batch): that
 * the ledger's files are still the ones this handle opened and the WAL
 * still holds its committed frames. FO_OK; FO_E_STORAGE_MOVED (and the
 * handle refuses writes from then on; once lost, the first reason again);
 * FO_E_IO when the files cannot be looked at. A few stat() calls: cheap,
 * never waits on a lock, safe while other processes write. */
int ledger_storage_check(struct ledger *l, struct fo_err *err);

/* Test-only fault seam: the n-th commit from now fails with FO_E_IO.
 * Only a build with the tests (FORUM_TESTS=ON, which defines
 * FORUM_TEST_SEAMS) injects anything; in others (./run.sh, an install
 * built with -DFORUM_TESTS=OFF) the seam is compiled out of the commit
 * path and this call does nothing. */
void ledger_fail_commit_after(struct ledger *l, int n);
/* The same seam for every SQLite handle of the process at once (the n-th
 * commit from now, whichever handle makes it; 0 clears it): for a run on
 * an engine whose committer has a handle of its own. */
void ledger_fail_commits_after(int n);

/* Benchmark seam (bench/bench_tree.c): with on set, appends skip the
 * Merkle tree upkeep, to measure what the tree costs. A ledger written so
 * does not verify (tree_mismatch); never use it outside a benchmark. */
void ledger_bench_skip_tree(struct ledger *l, int on);

#endif
