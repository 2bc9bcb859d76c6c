/* ledger_int: the body of struct ledger, shared by the ledger's own .c
 * files (ledger.c, verify.c, proof.c). No other module includes it. */
#ifndef LEDGER_INT_H
#define LEDGER_INT_H

#include "ledger/fo_buf.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger.h"
#include "ledger/merkle.h"
#include "ledger/store.h"

#ifdef FORUM_OWNER_ASSERTS
#include <pthread.h>
#endif

/* The state of the log's head inside a write transaction. */
struct ledger_head {
    int64_t count;
    int64_t ts;
    uint8_t prev[32];
    struct merkle_frontier tree;
};

struct ledger {
#ifdef FORUM_OWNER_ASSERTS
    pthread_t owner; /* the thread that may use it: ledger_set_owner */
#endif
    int wal_pending; /* the last redaction could not truncate the WAL */
    const struct store_ops *ops;
    struct store *store;
    struct fo_sha *sha;
    struct fo_buf scratch; /* reused for entry encodings */
    char *dir;
    char *id;
    char *origin;
    size_t max_body;
    int readonly;
    int skip_tree; /* ledger_bench_skip_tree: benchmarks only */
    /* Tree nodes below this height are not stored but recomputed from the
     * entries under them (meta "tree_min_level"; 1, every node stored, for
     * ledgers made before it existed). */
    unsigned tree_min_level;
    /* The head as this handle's last committed append left it. A write
     * transaction reuses it when the stored head still has the same count
     * and hash (no other writer came between), instead of reloading the
     * tree frontier (up to 15 entry reads below tree_min_level). */
    struct ledger_head head_cache;
    int head_cached;
};

/* LEDGER_OWNED(l), first in every public call that reaches the store:
 * in builds with FORUM_OWNER_ASSERTS (the test builds), aborts naming the
 * function when the calling thread is not l's owner (the thread that
 * opened it, or the last to call ledger_set_owner). A handle is one
 * connection with one transaction state and caches: two threads using it
 * is a race even when they never overlap by luck. Elsewhere: nothing. */
#ifdef FORUM_OWNER_ASSERTS
void ledger_owner_assert(const struct ledger *l, const char *fn);
#define LEDGER_OWNED(l) ledger_owner_assert((l), __func__)
#else
#define LEDGER_OWNED(l) ((void)(l))
#endif

/* Inside a read or write transaction: the entry count and the tree's root
 * at the head, from the handle's head cache when the stored head is the one
 * it was taken at (else loaded, and kept). */
int ledger_head_root(struct ledger *l, int64_t *count, uint8_t root[32],
                     struct fo_err *err);

/* Inside a write transaction: the head (from the handle's cache when the
 * stored head is the one it was taken at); after the transaction,
 * ledger_head_keep(l, h) when it committed, (l, NULL) when not. */
int ledger_load_head(struct ledger *l, struct ledger_head *h,
                     struct fo_err *err);
void ledger_head_keep(struct ledger *l, const struct ledger_head *h);

/* A staged request's own part (stage.c): its payload hash, made by its
 * writer, and the length of its body, which stays on the server. */
struct ledger_staged {
    uint8_t payload[32];
    size_t body_len;
};

/* Inside a write transaction, at head h: checks and appends reqs[0..n)
 * as ledger_append_batch does (each its rc; the lease fence and the sole
 * decisions checked here). staged: NULL, or per request its staged part
 * (then the body is not stored here: the caller moves it). A store error
 * is returned (the transaction must be rolled back). */
int ledger_append_reqs(struct ledger *l, struct ledger_head *h,
                       struct ledger_append *reqs, size_t n,
                       const struct ledger_staged *staged, struct fo_err *err);

/* Sets every request's rc to rc (and err, when given). */
void ledger_fail_reqs(struct ledger_append *reqs, size_t n, int rc,
                      const struct fo_err *err);

/* The storage key of tree node (level >= 1, index): see ledger.c. */
int64_t ledger_node_pos(unsigned level, uint64_t index);

/* A merkle_node_fn over the stored tree (ctx is the ledger): level 0 from
 * the entries, levels >= 1 from the tree table. */
int ledger_tree_node(void *ctx, unsigned level, uint64_t index, uint8_t out[32],
                     struct fo_err *err);

#endif
