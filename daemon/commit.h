/* commit: the daemon's group commit. Appends submitted from any thread are
 * queued; one committer thread writes everything queued in one transaction
 * (one fsync) and only then reports each request done. A lone writer is
 * never kept waiting: the committer starts a transaction as soon as the
 * queue is non-empty, and what arrives during that fsync forms the next
 * batch. The same thread signs checkpoints on its cadence (docs/LEDGER.md). */
#ifndef DAEMON_COMMIT_H
#define DAEMON_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

struct daemon_commit;

/* One queued append: struct ledger_queued_append (ledger/ledger.h). */

struct daemon_commit_config {
    size_t max_batch;     /* appends per transaction; 0: 4096 */
    int sign_interval_ms; /* checkpoint cadence; 0: 1000; < 0: never */
    void (*log)(void *hook, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    void *log_hook;
    /* Called on the committer thread after each transaction that added
     * entries, once its appends were answered (may be NULL). */
    void (*committed)(void *hook);
    void *committed_hook;
    /* Called on the committer thread after it signed a checkpoint (hook:
     * committed_hook; may be NULL). */
    void (*signed_cb)(void *hook);
    /* Staging (PostgreSQL): the integration lease's length (0: 10 s); a
     * writer waits at most about this long for an integrator to die
     * before it takes over. */
    int lease_ms;
};

/* The counters served by /metrics (a snapshot). */
struct daemon_commit_stats {
    uint64_t appends;       /* appends committed */
    uint64_t rejected;      /* appends refused (bad input, failed batch) */
    uint64_t commits;       /* transactions committed */
    uint64_t failed;        /* transactions that failed */
    uint64_t checkpoints;   /* checkpoints signed */
    uint64_t batch_hist[8]; /* batch sizes: 1, 2-3, 4-7, ..., 64-127, 128+ */
    uint64_t batch_sum;     /* appends in committed batches */
    uint64_t queued;        /* in the queue now */
    uint64_t staged;        /* appends staged for the integrator */
    uint64_t integrated;    /* staged appends (any daemon's) integrated */
    int integrator;         /* 1 while this daemon holds the lease */
};

/* Opens its own handle on the ledger in dir and starts the committer
 * thread. cfg may be NULL. */
int daemon_commit_create(const char *dir,
                         const struct daemon_commit_config *cfg,
                         struct daemon_commit **out, struct fo_err *err);

/* Queues r (never blocks on I/O). FO_E_DRAINING once stopping: r is not
 * queued and done is not called. */
int daemon_commit_submit(struct daemon_commit *c,
                         struct ledger_queued_append *r, struct fo_err *err);

/* Queues reqs[0..n) as one group: they are committed in the same
 * transaction, one after another (n at most the committer's max_batch:
 * FO_E_INVALID beyond). As daemon_commit_submit otherwise. */
int daemon_commit_submit_group(struct daemon_commit *c,
                               struct ledger_queued_append *reqs, size_t n,
                               struct fo_err *err);

/* A redaction run by the committer thread on its own handle, between two
 * batches (so it never waits on another writer of the process, and
 * nothing blocks the thread that asked): ledger_redact(seq, reason), then
 * rc and err are set and done(r) is called on the committer thread. */
struct daemon_commit_redact {
    int64_t seq;
    const char *reason;
    int rc;
    struct fo_err err;
    void (*done)(struct daemon_commit_redact *r);
    void *arg;                         /* for done */
    struct daemon_commit_redact *next; /* private to the queue */
};

/* Queues r (never blocks on I/O). FO_E_DRAINING once stopping: r is not
 * queued and done is not called. */
int daemon_commit_redact(struct daemon_commit *c,
                         struct daemon_commit_redact *r, struct fo_err *err);

/* The most requests a group may have (the committer's max_batch). */
size_t daemon_commit_max_batch(const struct daemon_commit *c);

/* A surf_ctx append_batch hook: queues the n requests as one group and
 * blocks the calling thread until their transaction committed. Returns
 * like ledger_append_batch. */
int daemon_commit_append_batch_sync(void *hook, struct ledger_append *reqs,
                                    size_t n, struct fo_err *err);

/* A surf_ctx append hook (hook = the daemon_commit): queues req and blocks
 * the calling thread until its batch committed. Returns like
 * ledger_append_batch for a batch of one. */
int daemon_commit_append_sync(void *hook, struct ledger_append *req,
                              struct fo_err *err);

/* Whether the committer still writes: FO_OK, or the error (in err) that
 * stopped it for good: FO_E_STORAGE_MOVED once its ledger handle found the
 * ledger's files moved, replaced or truncated (ledger_append_batch), or
 * once daemon_commit_refuse was called. Any thread; never blocks on I/O. */
int daemon_commit_health(struct daemon_commit *c, struct fo_err *err);

/* Stops the committer writing for good, for why (an error another handle
 * of the process found, e.g. the daemon's health check): every request
 * from then on, queued or new, fails with why, nothing reaches the ledger,
 * and no checkpoint is signed. The first call logs why; later ones and
 * the committer's own finding of the same are not logged again. */
void daemon_commit_refuse(struct daemon_commit *c, const struct fo_err *why);

/* Snapshot of the counters. */
void daemon_commit_stats(struct daemon_commit *c,
                         struct daemon_commit_stats *out);

/* The counters as Prometheus text (forum_appends_total, the commit batch
 * size histogram, ...), appended to out: what GET /metrics adds for the
 * group commit. FO_OK or FO_E_NOMEM. */
int daemon_commit_metrics(struct daemon_commit *c, struct fo_buf *out);

/* Stops taking requests, commits everything already queued (calling each
 * done), signs a last checkpoint when the tree grew, and joins the thread.
 * Idempotent. */
void daemon_commit_stop(struct daemon_commit *c);

/* Stops (if not yet) and frees. NULL-safe. */
void daemon_commit_free(struct daemon_commit *c);

#endif
