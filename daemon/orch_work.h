/* orch_work: slow work off the event loop. A few threads (started when
 * first needed) run jobs posted from the loop thread and hand each back
 * to that loop, where its done callback runs. The file tools run here, so
 * nothing an agent asks of the file system (a FIFO, a million files, a
 * patch built to be slow) can stall the loop that serves every client. */
#ifndef ORCH_WORK_H
#define ORCH_WORK_H

#include <stdatomic.h>

#include <event2/event.h>

#include "ledger/fo_err.h"

#define ORCH_WORK_THREADS 2 /* at most, started as jobs come */

struct orch_work;
struct orch_work_job;

/* Runs on a pool thread. cancel becomes non-zero when the job is
 * cancelled: a long job checks it and stops early. */
typedef void (*orch_work_fn)(void *arg, const atomic_int *cancel);

/* Runs on the loop thread once run has returned (or, for a job that never
 * started, when the pool is freed), exactly once for every job posted;
 * cancelled is 1 when orch_work_cancel was called first. The job is freed
 * after done returns; arg stays the caller's. */
typedef void (*orch_work_done_fn)(void *arg, int cancelled);

/* A pool on base (whose loop runs the done callbacks). No thread is
 * started yet. FO_E_NOMEM, FO_E_IO (no eventfd). */
int orch_work_create(struct event_base *base, struct orch_work **out,
                     struct fo_err *err);

/* Cancels every job, waits for the running ones to return, calls every
 * done still owed (cancelled), joins the threads. On the loop thread;
 * NULL-safe. */
void orch_work_free(struct orch_work *w);

/* Queues run(arg) and done(arg). *job (may be NULL) is the job, valid
 * until its done has returned. FO_E_NOMEM (nothing queued, done never
 * called). On the loop thread. */
int orch_work_post(struct orch_work *w, orch_work_fn run,
                   orch_work_done_fn done, void *arg,
                   struct orch_work_job **job, struct fo_err *err);

/* Asks job to stop: run sees its cancel flag, done is told. On the loop
 * thread, before done has run. */
void orch_work_cancel(struct orch_work_job *job);

/* Threads started so far (for /metrics and the tests). */
int orch_work_threads(const struct orch_work *w);

#endif
