/* orch_lease: the run leases' round trips off the event loop. Over
 * PostgreSQL renewing the leases of the runs in memory and looking for
 * expired ones are round trips to the server; a thread of its own, with a
 * ledger handle of its own, makes them, so the loop never waits on the
 * network for them. The engine (orch_engine.c) posts a job on its lease
 * tick and reads the result on the loop when the thread is done, and
 * hands it each run's lease to let go of when the run ends.
 *
 * Needs libevent's threading (evthread_use_pthreads), as the daemon sets:
 * the thread wakes the loop with event_active. */
#ifndef ORCH_LEASE_H
#define ORCH_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "ledger/fo_err.h"

#define ORCH_LEASE_EXPIRED_MAX 64 /* expired runs listed a job */

struct orch_lease_worker;

/* What a job found, read on the loop in done. */
struct orch_lease_result {
    const int64_t *ids;      /* the runs the job renewed, as posted */
    const unsigned char *ok; /* ok[i]: ids[i]'s lease was renewed (ours) */
    size_t n;
    int rc; /* the renewal: FO_OK, or err (then ok[] is all 0) */
    struct fo_err err;
    int listed; /* the job listed the expired leases */
    int exp_rc; /* that listing: FO_OK, or exp_err */
    struct fo_err exp_err;
    int64_t expired[ORCH_LEASE_EXPIRED_MAX];
    size_t nexp;
};

/* Starts the thread for the ledger in dir (it opens its own handle when
 * first posted to); done(arg) is called on base's loop after each job. */
int orch_lease_worker_create(struct event_base *base, const char *dir,
                             void (*done)(void *arg), void *arg,
                             struct orch_lease_worker **out,
                             struct fo_err *err);

/* Posts a job: renew owner's leases of ids[0..n) for ttl_ms, then (with
 * list) list the expired leases. Returns 0 when posted, 1 when the last job
 * is not done yet (nothing posted: try at the next tick), -1 out of
 * memory. */
int orch_lease_worker_post(struct orch_lease_worker *w, const char *owner,
                           const int64_t *ids, size_t n, int ttl_ms, int list);

/* Lets go of owner's lease of run (done: the run ended, so it is not
 * resumed; else it expires now, for a live daemon to resume it) on the
 * thread, after what was posted before; a failure is logged (the lease
 * then expires by itself). Every release posted is made before
 * orch_lease_worker_free returns. On the loop: FO_OK or FO_E_NOMEM. */
int orch_lease_worker_release(struct orch_lease_worker *w, const char *owner,
                              int64_t run, int done);

/* Where a failed release is told (may be NULL). Before the first post. */
void orch_lease_worker_log(struct orch_lease_worker *w,
                           void (*log)(void *hook, const char *fmt, ...),
                           void *hook);

/* The last job's result (valid until the next post), on the loop. */
const struct orch_lease_result *
orch_lease_worker_result(const struct orch_lease_worker *w);

/* Stops the thread (a round trip under way ends first) and frees w.
 * NULL-safe. */
void orch_lease_worker_free(struct orch_lease_worker *w);

#endif
