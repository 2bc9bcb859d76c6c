/* orch_runs: runs that go on without their caller (orch_run_start: POST
 * /runs) and their state read back from the ledger alone (orch_run_get: GET
 * /runs/{id}). The run id is the seq of the run's `request` entry. */
#include "daemon/orch.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch_int.h"
#include "ledger/fo_json.h"

struct orch_run_thread {
    struct orch *o;
    pthread_t tid;
    int done; /* under runs->mu: the thread touches nothing after */
    struct ledger *ledger; /* the run's own handle, closed by the thread */
    int (*append)(void *hook, struct ledger_append *req, struct fo_err *err);
    void *hook;
    int64_t request_seq;
    char *request;
    struct orch_submit_opts opts;
    struct orch_run_thread *next;
};

int orch_runs_init(struct orch *o, struct fo_err *err)
{
    struct orch_runs *r = calloc(1, sizeof(*r));
    if (!r)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return fo_err_set(err, FO_E_INTERNAL, "runs: no mutex");
    }
    atomic_init(&r->stopping, 0);
    o->runs = r;
    return FO_OK;
}

int orch_runs_stopping(const struct orch *o)
{
    return o->runs && atomic_load(&o->runs->stopping);
}

static void thread_free(struct orch_run_thread *t)
{
    if (!t)
        return;
    ledger_close(t->ledger);
    free(t->request);
    free(t);
}

/* Joins every thread of the list (they may still be running). */
static void join_all(struct orch_run_thread *t)
{
    while (t) {
        struct orch_run_thread *next = t->next;
        pthread_join(t->tid, NULL);
        thread_free(t);
        t = next;
    }
}

/* Takes the threads that have finished off the list (under mu): the caller
 * joins them without the lock. */
static struct orch_run_thread *take_done(struct orch_runs *r)
{
    struct orch_run_thread *done = NULL, **p = &r->list;
    while (*p) {
        struct orch_run_thread *t = *p;
        if (t->done) {
            *p = t->next;
            t->next = done;
            done = t;
        } else {
            p = &t->next;
        }
    }
    return done;
}

static void wait_all(struct orch_runs *r)
{
    pthread_mutex_lock(&r->mu);
    struct orch_run_thread *all = r->list;
    r->list = NULL;
    pthread_mutex_unlock(&r->mu);
    join_all(all);
}

void orch_runs_stop(struct orch *o)
{
    if (!o || !o->runs)
        return;
    atomic_store(&o->runs->stopping, 1);
    wait_all(o->runs);
}

void orch_runs_free(struct orch *o)
{
    if (!o->runs)
        return;
    wait_all(o->runs);
    pthread_mutex_destroy(&o->runs->mu);
    free(o->runs);
    o->runs = NULL;
}

size_t orch_runs_active(struct orch *o)
{
    pthread_mutex_lock(&o->runs->mu);
    size_t n = o->runs->active;
    pthread_mutex_unlock(&o->runs->mu);
    return n;
}

static void *run_main(void *arg)
{
    struct orch_run_thread *t = arg;
    struct orch_witness w = {
        .ledger = t->ledger, .append = t->append, .hook = t->hook};
    cJSON *out = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    /* an error is on record as the run's `error` entry: nothing to return */
    orch_submit_from(t->o, &w, t->request_seq, t->request, &t->opts, &out,
                     &err);
    cJSON_Delete(out);
    ledger_close(t->ledger);
    t->ledger = NULL;
    struct orch_runs *r = t->o->runs;
    pthread_mutex_lock(&r->mu);
    t->done = 1;
    r->active--;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Best effort, for a run whose thread could not start. */
static void start_failed(const struct orch_witness *w, int64_t seq,
                         const struct fo_err *e)
{
    cJSON *o = cJSON_CreateObject();
    struct fo_err ignore;
    if (o && cJSON_AddStringToObject(o, "error", e->msg) &&
        cJSON_AddStringToObject(o, "code", fo_code_name(e->code)))
        orch_witness_json(w, "loop", "error", seq, o, NULL, &ignore);
    cJSON_Delete(o);
}

int orch_run_start(struct orch *o, const struct orch_witness *w,
                   const char *request, const struct orch_submit_opts *opts,
                   int64_t *run, struct fo_err *err)
{
    struct orch_runs *r = o->runs;
    struct orch_run_thread *t = NULL;
    cJSON *e = NULL;
    int reserved = 0;
    int rc = orch_submit_check(request, opts, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&r->mu);
    struct orch_run_thread *done = take_done(r);
    if (atomic_load(&r->stopping))
        rc = fo_err_set(err, FO_E_DRAINING, "runs: shutting down");
    else if (r->active >= ORCH_RUNS_MAX)
        rc = fo_err_set(err, FO_E_BUSY,
                        "runs: %d already in progress; try again later",
                        ORCH_RUNS_MAX);
    else
        r->active++;
    pthread_mutex_unlock(&r->mu);
    join_all(done);
    if (rc)
        return rc;
    reserved = 1;
    t = calloc(1, sizeof(*t));
    if (!t || !(t->request = orch_strdup(request))) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    t->o = o;
    t->append = w->append;
    t->hook = w->hook;
    if (opts)
        t->opts = *opts;
    rc = ledger_open(ledger_dir(w->ledger), 0, NULL, &t->ledger, err);
    if (rc)
        goto out;
    e = cJSON_CreateObject();
    if (!e || !cJSON_AddStringToObject(e, "request", request) ||
        !cJSON_AddStringToObject(e, "via", "run_start")) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    rc = orch_witness_json(w, "client", "request", LEDGER_NO_PARENT, e,
                           &t->request_seq, err);
    if (rc)
        goto out;
    pthread_mutex_lock(&r->mu);
    if (pthread_create(&t->tid, NULL, run_main, t) != 0) {
        pthread_mutex_unlock(&r->mu);
        rc = fo_err_set(err, FO_E_INTERNAL, "runs: cannot start a thread");
        start_failed(w, t->request_seq, err);
        goto out;
    }
    t->next = r->list;
    r->list = t;
    pthread_mutex_unlock(&r->mu);
    *run = t->request_seq;
    t = NULL;
    reserved = 0;
out:
    if (reserved) {
        pthread_mutex_lock(&r->mu);
        r->active--;
        pthread_mutex_unlock(&r->mu);
    }
    thread_free(t);
    cJSON_Delete(e);
    return rc;
}

/* ---- run_get ------------------------------------------------------------ */

/* A private return of the scan callback: the run ended. */
#define SCAN_END 1000

struct scan {
    int64_t run;
    int64_t *members; /* the run's seqs, ascending */
    size_t n, cap;
    cJSON *entries; /* the last ORCH_RUN_ENTRIES_MAX */
    size_t shown;
    int64_t answer_seq, budget_seq, error_seq;
};

static int is_member(const struct scan *s, int64_t seq)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->members[mid] == seq)
            return 1;
        if (s->members[mid] < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

static int scan_entry(void *ctx, const struct ledger_entry *e)
{
    struct scan *s = ctx;
    if (e->seq != s->run &&
        (e->parent == LEDGER_NO_PARENT || !is_member(s, e->parent)))
        return FO_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        int64_t *m = realloc(s->members, cap * sizeof(*m));
        if (!m)
            return FO_E_NOMEM;
        s->members = m;
        s->cap = cap;
    }
    s->members[s->n++] = e->seq;
    cJSON *j = ledger_entry_json(e);
    if (!j)
        return FO_E_NOMEM;
    cJSON_AddItemToArray(s->entries, j);
    if (++s->shown > ORCH_RUN_ENTRIES_MAX) {
        cJSON_DeleteItemFromArray(s->entries, 0);
        s->shown--;
    }
    if (e->seq == s->run)
        return FO_OK;
    if (!strcmp(e->kind, "budget"))
        s->budget_seq = e->seq;
    if (!strcmp(e->kind, "answer")) {
        s->answer_seq = e->seq;
        return SCAN_END; /* nothing of the run follows its answer */
    }
    if (!strcmp(e->kind, "error") && e->parent == s->run) {
        s->error_seq = e->seq;
        return SCAN_END;
    }
    return FO_OK;
}

/* The body of seq as JSON; NULL when redacted or not an object. */
static cJSON *body_of(struct ledger *l, int64_t seq, int *rc,
                      struct fo_err *err)
{
    char *body = NULL;
    size_t len = 0;
    cJSON *j = NULL;
    *rc = ledger_body(l, seq, &body, &len, err);
    if (*rc == FO_E_REDACTED) {
        *rc = FO_OK;
        return NULL;
    }
    if (*rc)
        return NULL;
    struct fo_err ignore;
    if (fo_json_parse(body, len, &j, &ignore) != FO_OK || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    free(body);
    return j;
}

static int add_str_or_null(cJSON *o, const char *name, const cJSON *from,
                           const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, field);
    return cJSON_IsString(v)
               ? cJSON_AddStringToObject(o, name, v->valuestring) != NULL
               : cJSON_AddNullToObject(o, name) != NULL;
}

int orch_run_get(struct ledger *l, int64_t run, cJSON **out, struct fo_err *err)
{
    struct ledger_entry e;
    struct scan s = {
        .run = run, .answer_seq = -1, .budget_seq = -1, .error_seq = -1};
    cJSON *req = NULL, *ans = NULL, *bud = NULL, *fail = NULL, *o = NULL;
    int rc = ledger_get(l, run, &e, NULL, err);
    if (rc)
        return rc;
    if (strcmp(e.kind, "request") != 0)
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "run %lld: not a run (entry of kind \"%s\")",
                          (long long)run, e.kind);
    s.entries = cJSON_CreateArray();
    if (!s.entries) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    rc = ledger_range(l, run, ORCH_RUN_SCAN_MAX, scan_entry, &s, err);
    if (rc == SCAN_END)
        rc = FO_OK;
    else if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (rc)
        goto out;
    req = body_of(l, run, &rc, err);
    if (!rc && s.answer_seq >= 0)
        ans = body_of(l, s.answer_seq, &rc, err);
    if (!rc && s.budget_seq >= 0)
        bud = body_of(l, s.budget_seq, &rc, err);
    if (!rc && s.error_seq >= 0)
        fail = body_of(l, s.error_seq, &rc, err);
    if (rc)
        goto out;
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(bud, "reason");
    const char *state =
        s.error_seq >= 0   ? "failed"
        : s.answer_seq < 0 ? "running"
        : s.budget_seq < 0 ? "done"
        : cJSON_IsString(reason) && !strcmp(reason->valuestring, "shutdown")
            ? "stopped"
            : "budget";
    o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "run", run) &&
             cJSON_AddStringToObject(o, "state", state) &&
             add_str_or_null(o, "request", req, "request") &&
             add_str_or_null(o, "via", req, "via") &&
             fo_json_add_int(o, "count", (long long)s.n) &&
             cJSON_AddBoolToObject(o, "truncated", s.n > s.shown) &&
             add_str_or_null(o, "answer", ans, "answer") &&
             (s.answer_seq >= 0
                  ? fo_json_add_int(o, "answer_seq", s.answer_seq) != NULL
                  : cJSON_AddNullToObject(o, "answer_seq") != NULL);
    if (ok && fail) {
        cJSON *f = cJSON_AddObjectToObject(o, "error");
        ok = f && add_str_or_null(f, "error", fail, "error") &&
             add_str_or_null(f, "code", fail, "code");
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "error") != NULL;
    }
    if (!ok) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    cJSON_AddItemToObject(o, "entries", s.entries);
    s.entries = NULL;
    *out = o;
    o = NULL;
out:
    cJSON_Delete(o);
    cJSON_Delete(req);
    cJSON_Delete(ans);
    cJSON_Delete(bud);
    cJSON_Delete(fail);
    cJSON_Delete(s.entries);
    free(s.members);
    return rc;
}
