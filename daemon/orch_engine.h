/* orch_engine: the run engine. Every run (submit, run_start, plan_run, plan,
 * and a run resumed after a restart) is executed here, on one event loop
 * thread, as a fold over its own ledger entries: the state of a run is what
 * its witnessed entries reduce to (apply), and the engine decides the next
 * steps from that state alone (step). A model call, a subprocess task, a
 * commit or a timer is an event on the loop: no thread waits for one.
 *
 * So a run resumes after a crash by reading its entries back and applying
 * them: a step whose outcome is witnessed is never done again; a task whose
 * `task` entry has no `result` was in flight and is run again (once more at
 * most); a role's model call in flight is made again. */
#ifndef ORCH_ENGINE_H
#define ORCH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "daemon/orch.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

struct event_base;
struct evdns_base;
struct orch_engine;

#define ORCH_ENGINE_RUNS_DEFAULT 10000 /* runs in memory at once */
#define ORCH_ENGINE_RUNS_MAX 1000000
#define ORCH_ENGINE_STOP_GRACE_MS 3000 /* work in flight at a shutdown */

/* How entries reach the ledger. append queues a (its fields stay valid
 * until done) and calls done(arg) once from any thread after the entry's
 * transaction committed (a->rc FO_OK, a->entry set) or failed (a->rc,
 * a->err); it returns an error only when a was not queued (then done is
 * never called). NULL: the engine appends on its own thread with
 * ledger_append (for the CLI and tests; each append then waits for its
 * fsync). */
typedef int (*orch_engine_append_fn)(void *hook, struct ledger_append *a,
                                     void (*done)(void *arg), void *arg,
                                     struct fo_err *err);

/* How a body is redacted (the `forget` tool: a session fact's body).
 * redact queues ledger_redact(seq, reason) where it may block (the
 * daemon's group committer, between two of its batches, on its own
 * handle) and calls done(arg) once from any thread after it ran, *rc and
 * *rerr set; it returns an error only when nothing was queued (then done
 * is never called). NULL: the engine redacts on its own thread with
 * cfg.ledger (the CLI and tests, whose appends wait for their fsync too). */
typedef int (*orch_engine_redact_fn)(void *hook, int64_t seq,
                                     const char *reason, int *rc,
                                     struct fo_err *rerr,
                                     void (*done)(void *arg), void *arg,
                                     struct fo_err *err);

struct orch_engine_config {
    struct event_base *base; /* the loop the engine runs on */
    struct evdns_base *dns;  /* for model host names; may be NULL */
    struct ledger *ledger;   /* the loop thread's handle: reads, resume */
    orch_engine_append_fn append;
    orch_engine_redact_fn redact; /* with hook; may be NULL (above) */
    void *hook;
    size_t max_runs; /* runs in memory at once; 0: ORCH_ENGINE_RUNS_DEFAULT */
    /* A shutdown lets model calls and tasks in flight finish (and be
     * witnessed) for this long, then abandons them; 0:
     * ORCH_ENGINE_STOP_GRACE_MS, < 0: none. */
    int stop_grace_ms;
    /* > 0 on a ledger that keeps run leases (PostgreSQL): each resumable
     * run is leased to this engine for lease_ms, renewed every third of
     * it; runs whose lease expired (their daemon died) are claimed and
     * resumed here. 0: no leases (one daemon per ledger). */
    int lease_ms;
    /* An engine hosted in a command's process (`forum submit`, `forum mcp`
     * with no daemon): its runs go away with the process, so their
     * requests say "resumable": false, and no daemon resumes them (they
     * read as interrupted). 0: a daemon's, resumable. */
    int not_resumable;
    void (*log)(void *hook, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    void *log_hook;
};

/* Creates an engine for o on cfg->base. o and the ledger must outlive it.
 * Errors: FO_E_INVALID (a bad limit), FO_E_NOMEM. */
int orch_engine_create(const struct orch *o,
                       const struct orch_engine_config *cfg,
                       struct orch_engine **out, struct fo_err *err);

/* Frees the engine: runs still in memory are dropped without an entry
 * (stop them first to have them witnessed). NULL-safe. */
void orch_engine_free(struct orch_engine *e);

/* What a run is asked to do. */
struct orch_run_req {
    const char *via;     /* "submit", "run_start", "plan_run" or "plan" */
    const char *request; /* the request text (plan_run: may be NULL) */
    const cJSON *plan;   /* plan_run: the plan given, {"tasks": [...]} */
    struct orch_submit_opts opts;
    /* Each step of the run as it lands (orch.h; may be NULL). */
    orch_run_event_fn on_event;
    void *event_arg;
};

/* The end of a run: rc FO_OK and *out its result object (done takes it and
 * must cJSON_Delete it), or rc and err. Called once on the loop thread,
 * never from inside orch_engine_start. */
typedef void (*orch_run_done_fn)(void *arg, int rc, cJSON *out,
                                 const struct fo_err *err);

/* Called once the run's request entry is committed (the run id is its
 * seq), before the run goes on. */
typedef void (*orch_run_started_fn)(void *arg, int64_t run);

/* Starts a run on the loop: checks req (FO_E_INVALID, nothing written),
 * FO_E_BUSY when max_runs runs are in memory, FO_E_DRAINING after
 * orch_engine_stop. Then writes the request entry and goes on by events;
 * started (may be NULL) and done (may be NULL: nobody waits) are called
 * later. Must be called on the loop thread. */
int orch_engine_start(struct orch_engine *e, const struct orch_run_req *req,
                      orch_run_started_fn started, orch_run_done_fn done,
                      void *arg, struct fo_err *err);

/* How a resume ended: n runs resumed (rc FO_OK), or rc and err. */
typedef void (*orch_engine_resumed_fn)(void *arg, size_t n, int rc,
                                       const struct fo_err *err);

/* Finds every run on the ledger with no end on record that no live process
 * holds, and resumes each from its entries (a `resume` entry says where it
 * picked up). A run whose entries do not reduce to a valid state gets an
 * `error` entry and ends failed; the others go on. Returns at once: the
 * runs are listed and folded on the engine's worker threads, their resume
 * entries go through cfg.append, and done (may be NULL) is called on the
 * loop thread once they landed and the runs go on (or with
 * FO_E_DRAINING when the engine stopped first). The loop thread reads and
 * writes nothing for it. On the loop thread; FO_E_NOMEM when nothing was
 * posted (done is then never called). */
int orch_engine_resume_start(struct orch_engine *e, orch_engine_resumed_fn done,
                             void *arg, struct fo_err *err);

/* Cancels a run this engine holds: it stops at once (tasks and model calls
 * in flight are abandoned, a task's result is witnessed as cancelled), a
 * `budget` entry with reason "cancelled" and the fixed answer. FO_OK when
 * the run is here and not yet ending, FO_E_NOT_FOUND when it is not. */
int orch_engine_cancel(struct orch_engine *e, int64_t run);

/* A human's decision on a gate of a run this engine holds: checks it
 * (FO_E_INVALID; FO_E_NO_GATE when the run has no gate waiting at that
 * wave; FO_E_GATE_DECIDED), witnesses it, and calls done (on the loop
 * thread, never from inside this call) with {"run_seq", "wave",
 * "decision", "seq"} once it is on record; the run goes on (or ends, when
 * rejected). A run this engine does not hold is decided on the ledger
 * (orch_gate_check, on a worker thread, then the decision written through
 * the engine's append), for the process that runs it to find; a refusal
 * of the check (FO_E_NO_GATE, ...) then comes through done. */
int orch_engine_gate(struct orch_engine *e, const struct orch_gate_decision *d,
                     orch_run_done_fn done, void *arg, struct fo_err *err);

/* Shutdown: new runs are refused; every run starts nothing new, lets the
 * model calls and tasks in flight finish within the grace (their outcomes
 * witnessed; what is still in flight then is abandoned, to be redone on
 * resume), writes a `stop` entry and stays unfinished, so the next start
 * resumes it. stopped(arg) runs on the loop
 * thread once every stop entry is committed (at once when none). A run's
 * caller gets FO_E_DRAINING. */
void orch_engine_stop(struct orch_engine *e, void (*stopped)(void *arg),
                      void *arg);

/* Runs in memory. */
size_t orch_engine_active(const struct orch_engine *e);

/* The engine's counters as Prometheus text, appended to b (on the loop
 * thread): runs in flight and started, gates waiting, model calls by
 * outcome and their latency histogram. FO_OK or FO_E_NOMEM. */
struct fo_buf;
int orch_engine_metrics(const struct orch_engine *e, struct fo_buf *b);

#endif
