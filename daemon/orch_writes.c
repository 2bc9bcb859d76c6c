/* orch_writes: how the engine witnesses: each entry goes to the group
 * committer (or straight to the ledger) and lands back on the loop, where
 * it is applied to its run. */
#include "daemon/orch_engine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static void on_committed(void *arg);
static void wr_landed(struct wr *w);
static int leasable(const struct run *r);

/* ---- writes ------------------------------------------------------------- */

void oe_wr_free(struct wr *w)
{
    if (!w)
        return;
    free(w->body);
    cJSON_Delete(w->payload);
    free(w);
}

static void on_committed(void *arg)
{
    struct wr *w = arg;
    struct orch_engine *e = w->r->e;
    pthread_mutex_lock(&e->mu);
    w->next = e->doneq;
    e->doneq = w;
    pthread_mutex_unlock(&e->mu);
    event_active(e->wake, EV_READ, 0);
}

static void wr_landed(struct wr *w)
{
    struct run *r = w->r;
    r->writes--;
    if (w->spent)
        r->reserved--;
    if (w->task >= 0) { /* busy until its last write lands */
        struct task *s = &r->t[w->task];
        s->writes--;
        s->busy = s->writes > 0 || s->eff;
    }
    if (w->phase_busy)
        r->busy = 0;
    if (w->redact) { /* applies nothing: its caller decides */
        if (w->landed)
            w->landed(w->landed_arg, r, w->a.rc, -1, &w->a.err);
        oe_wr_free(w);
        oe_step(r);
        return;
    }
    if (w->a.rc == FO_E_EXISTS && w->a.sole_kinds) {
        /* a gate decision that lost a race (another request, another
         * daemon): not this run's failure; the decision that won is the
         * one the run takes */
        int64_t won = w->a.entry.seq;
        if (w->landed)
            w->landed(w->landed_arg, r, w->a.rc, -1, &w->a.err);
        oe_wr_free(w);
        oe_gate_take(r, won);
        return;
    }
    if (w->a.rc && r->failed_rc && !strcmp(w->a.kind, "error") &&
        oe_end_retry(r, w->a.rc)) {
        oe_wr_free(w);
        return;
    }
    int rc = w->a.rc;
    struct fo_err err = w->a.err;
    if (rc == FO_OK) {
        if (!strcmp(w->a.kind, "answer") || !strcmp(w->a.kind, "error"))
            r->end_on_record = 1;
        if (!strcmp(w->a.kind, "request")) {
            r->id = w->a.entry.seq;
            r->leased = w->a.lease_owner != NULL;
            if (r->resumable)
                oe_elog(r->e, "run %lld: started (%s)", (long long)r->id,
                        r->via);
            if (r->started)
                r->started(r->arg, r->id);
        }
        r->cur_ts = w->a.entry.ts;
        oe_note_payload(r, w->a.kind, w->a.entry.payload);
        rc = oe_apply(r, w->a.actor, w->a.kind, w->a.entry.seq, w->a.parent,
                      w->payload, &err);
        if (rc == FO_OK && r->on_event) { /* the step, as it landed */
            struct orch_run_event ev = {.run = r->id,
                                        .seq = w->a.entry.seq,
                                        .kind = w->a.kind,
                                        .actor = w->a.actor,
                                        .body = w->payload,
                                        .step = ++r->n_events};
            r->on_event(r->event_arg, &ev);
        }
    }
    if (w->landed)
        w->landed(w->landed_arg, r, w->a.rc ? w->a.rc : rc,
                  w->a.rc ? -1 : w->a.entry.seq, w->a.rc ? &w->a.err : &err);
    if (!strcmp(w->a.kind, "session_started")) {
        r->creating_session = 0; /* landed or failed: the others go on */
        r->e->sessions_landed++; /* a read begun before may have missed it */
        for (;;) { /* from the head each time: a step may end a run */
            struct run *o = r->e->runs;
            while (o && !(o != r && o->waiting_session && o->session &&
                          r->session && !strcmp(o->session, r->session)))
                o = o->next;
            if (!o)
                break;
            o->waiting_session = 0;
            oe_step(o);
        }
    }
    oe_wr_free(w);
    if (rc)
        oe_fail(r, rc, &err);
    oe_step(r);
}

void oe_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    pthread_mutex_lock(&e->mu);
    struct wr *list = e->doneq;
    e->doneq = NULL;
    struct gate_off *off = e->offq;
    e->offq = NULL;
    pthread_mutex_unlock(&e->mu);
    while (off) {
        struct gate_off *n = off->next;
        oe_gate_off_landed(e, off);
        off = n;
    }
    /* the queue is LIFO: land them in the order they were committed */
    struct wr *rev = NULL;
    while (list) {
        struct wr *n = list->next;
        list->next = rev;
        rev = list;
        list = n;
    }
    while (rev) {
        struct wr *n = rev->next;
        wr_landed(rev);
        rev = n;
    }
}

/* Witnesses payload (taken) as kind by actor under parent; the state
 * changes when it is committed. task >= 0 marks that task busy until then;
 * phase_busy the run's phase. */
/* A run another daemon may resume: leased while it runs here. */
static int leasable(const struct run *r)
{
    return r->e->leases && r->resumable &&
           (!strcmp(r->via, "submit") || !strcmp(r->via, "run_start") ||
            !strcmp(r->via, "plan_run"));
}

int oe_witness_cb(struct run *r, const char *actor, const char *kind,
                  int64_t parent, cJSON *payload, long task, int phase_busy,
                  int spent,
                  void (*landed)(void *, struct run *, int, int64_t,
                                 const struct fo_err *),
                  void *landed_arg, struct fo_err *err)
{
    struct orch_engine *e = r->e;
    struct wr *w = calloc(1, sizeof(*w));
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = w && payload ? fo_json_canon(payload, &b, err) : oe_nomem(err);
    if (rc) {
        fo_buf_release(&b);
        cJSON_Delete(payload);
        free(w);
        return rc;
    }
    w->r = r;
    w->payload = payload;
    w->body = fo_buf_detach(&b, &w->a.body_len);
    fo_buf_release(&b);
    w->a.actor = actor;
    w->a.kind = kind;
    w->a.parent = parent;
    w->a.body = w->body;
    w->a.sole_kinds = orch_gate_sole(kind); /* a gate is decided once */
    if (r->id < 0 && !strcmp(kind, "request") && leasable(r)) {
        w->a.lease_owner = e->instance; /* leased with its request */
        w->a.lease_run = -1;
        w->a.lease_ms = e->cfg.lease_ms;
    } else if (r->leased) { /* written only while the lease is ours */
        w->a.lease_owner = e->instance;
        w->a.lease_run = r->id;
    }
    w->task = task;
    w->phase_busy = phase_busy;
    w->spent = spent;
    w->landed = landed;
    w->landed_arg = landed_arg;
    r->writes++;
    if (task >= 0) {
        r->t[task].busy = 1;
        r->t[task].writes++;
    }
    if (phase_busy)
        r->busy = 1;
    if (e->cfg.append) {
        rc = e->cfg.append(e->cfg.hook, &w->a, on_committed, w, err);
        if (rc) {
            r->writes--;
            if (task >= 0) {
                struct task *s = &r->t[task];
                s->writes--;
                s->busy = s->writes > 0 || s->eff;
            }
            if (phase_busy)
                r->busy = 0;
            oe_wr_free(w);
        }
        return rc;
    }
    /* straight to the ledger: committed now, landed on the next turn */
    ledger_append_batch(e->cfg.ledger, &w->a, 1, &w->a.err);
    on_committed(w);
    return FO_OK;
}

int oe_witness(struct run *r, const char *actor, const char *kind,
               int64_t parent, cJSON *payload, long task, int phase_busy,
               int spent, struct fo_err *err)
{
    return oe_witness_cb(r, actor, kind, parent, payload, task, phase_busy,
                         spent, NULL, NULL, err);
}

/* Redacts the body of entry seq for task (busy until it is done), never on
 * the loop thread when the host gave a redact hook (the daemon: its
 * committer thread, which owns a write handle and would otherwise contend
 * with the loop for the write lock and the WAL checkpoint); without one
 * (the CLI's private loop) here, as its appends are. landed gets the
 * outcome (FO_E_REDACTED: it was gone already) on the loop thread. */
int oe_redact_cb(struct run *r, int64_t seq, const char *reason, long task,
                 void (*landed)(void *, struct run *, int, int64_t,
                                const struct fo_err *),
                 void *landed_arg, struct fo_err *err)
{
    struct orch_engine *e = r->e;
    struct wr *w = calloc(1, sizeof(*w));
    if (!w)
        return oe_nomem(err);
    w->r = r;
    w->redact = 1;
    w->a.kind = "redaction";
    w->task = task;
    w->landed = landed;
    w->landed_arg = landed_arg;
    r->writes++;
    if (task >= 0) {
        r->t[task].busy = 1;
        r->t[task].writes++;
    }
    if (e->cfg.redact) {
        int rc = e->cfg.redact(e->cfg.hook, seq, reason, &w->a.rc, &w->a.err,
                               on_committed, w, err);
        if (rc) {
            r->writes--;
            if (task >= 0) {
                struct task *s = &r->t[task];
                s->writes--;
                s->busy = s->writes > 0 || s->eff;
            }
            free(w);
        }
        return rc;
    }
    w->a.rc = ledger_redact(e->cfg.ledger, seq, reason, NULL, &w->a.err);
    on_committed(w); /* landed on the next turn, like an append */
    return FO_OK;
}
