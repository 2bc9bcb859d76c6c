/* orch_lease: the run leases' round trips on a thread (orch_lease.h). */
#include "daemon/orch_lease.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/ledger.h"

/* A lease to let go of: the run ended (done) or stopped. */
struct rel {
    int64_t run;
    int done;
    char owner[65];
    struct rel *next;
};

struct orch_lease_worker {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
    int stop;         /* under mu */
    int job;          /* under mu: a job waits for the thread */
    int busy;         /* under mu: posted and not yet read on the loop */
    struct rel *rels; /* under mu: leases to release, in order */
    void (*log)(void *hook, const char *fmt, ...);
    void *log_hook;
    char *dir;
    struct ledger *l; /* the thread's own handle */
    struct event *done_ev;
    void (*done)(void *arg);
    void *arg;
    /* the job (the thread's while busy) */
    char owner[65];
    int ttl_ms, list;
    int64_t *ids;
    unsigned char *ok;
    size_t n, cap;
    struct orch_lease_result res;
};

static int renewed(void *ctx, int64_t run)
{
    struct orch_lease_worker *w = ctx;
    for (size_t i = 0; i < w->n; i++)
        if (w->ids[i] == run)
            w->ok[i] = 1;
    return 0;
}

static int expired(void *ctx, int64_t run)
{
    struct orch_lease_worker *w = ctx;
    if (w->res.nexp < ORCH_LEASE_EXPIRED_MAX)
        w->res.expired[w->res.nexp++] = run;
    return 0;
}

/* One job, on the thread. */
static void work(struct orch_lease_worker *w)
{
    struct orch_lease_result *r = &w->res;
    memset(r, 0, sizeof(*r));
    if (w->n) /* w->ok is NULL until a job had runs */
        memset(w->ok, 0, w->n);
    r->ids = w->ids;
    r->ok = w->ok;
    r->n = w->n;
    if (!w->l)
        r->rc = ledger_open(w->dir, 0, NULL, &w->l, &r->err);
    if (!r->rc && w->n)
        r->rc = ledger_lease_renew(w->l, w->owner, w->ids, w->n, w->ttl_ms,
                                   renewed, w, &r->err);
    if (r->rc) {
        if (w->n)
            memset(w->ok, 0, w->n);
        return; /* the database is away: no listing either */
    }
    if (w->list) {
        r->listed = 1;
        r->exp_rc = ledger_lease_expired(w->l, ORCH_LEASE_EXPIRED_MAX, expired,
                                         w, &r->exp_err);
    }
}

/* The releases taken off the queue, in order, on the thread. */
static void release_all(struct orch_lease_worker *w, struct rel *r)
{
    while (r) {
        struct rel *next = r->next;
        struct fo_err err;
        int rc = w->l ? FO_OK : ledger_open(w->dir, 0, NULL, &w->l, &err);
        if (!rc)
            rc = ledger_lease_release(w->l, r->run, r->owner, r->done, &err);
        if (rc && w->log)
            w->log(w->log_hook,
                   "run %lld: its lease stays until it expires: %s",
                   (long long)r->run, err.msg);
        free(r);
        r = next;
    }
}

static void *thread_main(void *arg)
{
    struct orch_lease_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && !w->job && !w->rels)
            pthread_cond_wait(&w->cv, &w->mu);
        struct rel *rels = w->rels;
        w->rels = NULL;
        int job = w->job && !w->stop;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        release_all(w, rels); /* also when stopping: none is lost */
        if (job)
            work(w);
        pthread_mutex_lock(&w->mu);
        if (job) {
            w->job = 0;
            event_active(w->done_ev, EV_TIMEOUT, 0);
        }
        if (stop && !w->rels)
            break;
    }
    pthread_mutex_unlock(&w->mu);
    ledger_close(w->l);
    w->l = NULL;
    return NULL;
}

/* The job is done: on the loop. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
    struct orch_lease_worker *w = arg;
    (void)fd, (void)what;
    pthread_mutex_lock(&w->mu);
    int done = w->busy && !w->job;
    pthread_mutex_unlock(&w->mu);
    if (!done)
        return;
    w->done(w->arg);
    pthread_mutex_lock(&w->mu);
    w->busy = 0; /* the result was read: the next tick may post */
    pthread_mutex_unlock(&w->mu);
}

int orch_lease_worker_create(struct event_base *base, const char *dir,
                             void (*done)(void *arg), void *arg,
                             struct orch_lease_worker **out, struct fo_err *err)
{
    struct orch_lease_worker *w = calloc(1, sizeof(*w));
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    w->done = done;
    w->arg = arg;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w->dir);
        free(w);
        return fo_err_set(err, FO_E_INTERNAL, "leases: no mutex");
    }
    pthread_cond_init(&w->cv, NULL);
    w->done_ev = event_new(base, -1, 0, on_done, w);
    if (!w->done_ev) {
        orch_lease_worker_free(w);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (pthread_create(&w->th, NULL, thread_main, w) != 0) {
        orch_lease_worker_free(w);
        return fo_err_set(err, FO_E_INTERNAL, "leases: cannot start a thread");
    }
    w->started = 1;
    *out = w;
    return FO_OK;
}

int orch_lease_worker_post(struct orch_lease_worker *w, const char *owner,
                           const int64_t *ids, size_t n, int ttl_ms, int list)
{
    pthread_mutex_lock(&w->mu);
    int busy = w->busy;
    pthread_mutex_unlock(&w->mu);
    if (busy)
        return 1;
    if (n > w->cap) { /* the thread is idle: the arrays are the loop's */
        size_t cap = n < 16 ? 16 : n * 2;
        int64_t *ids2 = realloc(w->ids, cap * sizeof(*ids2));
        if (ids2)
            w->ids = ids2;
        unsigned char *ok2 = ids2 ? realloc(w->ok, cap) : NULL;
        if (!ok2)
            return -1;
        w->ok = ok2;
        w->cap = cap;
    }
    if (n)
        memcpy(w->ids, ids, n * sizeof(*ids));
    w->n = n;
    snprintf(w->owner, sizeof(w->owner), "%s", owner);
    w->ttl_ms = ttl_ms;
    w->list = list;
    pthread_mutex_lock(&w->mu);
    w->busy = 1;
    w->job = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

int orch_lease_worker_release(struct orch_lease_worker *w, const char *owner,
                              int64_t run, int done)
{
    struct rel *r = calloc(1, sizeof(*r));
    if (!r)
        return FO_E_NOMEM;
    r->run = run;
    r->done = done;
    snprintf(r->owner, sizeof(r->owner), "%s", owner);
    pthread_mutex_lock(&w->mu);
    struct rel **p = &w->rels;
    while (*p)
        p = &(*p)->next;
    *p = r;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return FO_OK;
}

void orch_lease_worker_log(struct orch_lease_worker *w,
                           void (*log)(void *hook, const char *fmt, ...),
                           void *hook)
{
    w->log = log;
    w->log_hook = hook;
}

const struct orch_lease_result *
orch_lease_worker_result(const struct orch_lease_worker *w)
{
    return &w->res;
}

void orch_lease_worker_free(struct orch_lease_worker *w)
{
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    if (w->done_ev)
        event_free(w->done_ev);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    while (w->rels) { /* never started: nothing could be released */
        struct rel *r = w->rels;
        w->rels = r->next;
        free(r);
    }
    free(w->ids);
    free(w->ok);
    free(w->dir);
    free(w);
}
