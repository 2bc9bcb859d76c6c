/* orch_resume: runs resumed after a restart from their entries, and run
 * leases when several daemons share one ledger.
 *
 * The loop thread never reads or writes the ledger for a resume. A resume
 * job (one at a time: the start's, or a claim of expired leases) lists
 * the runs, claims their leases and folds each run's entries through the
 * reducer on an orch_work thread, with a ledger handle of its own, into
 * runs that belong to a shell engine (no loop, no log). Back on the loop,
 * their `resume` entries go to the group committer; once those landed,
 * the runs move into the engine and go on. */
#include "daemon/orch_engine_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_file.h"

/* A run a resume job folded. */
struct resumed {
    struct run *r; /* the shell's until it is adopted */
    int corrupt;   /* its entries do not reduce to a state: err says why */
    struct fo_err err;
    struct ledger_append a; /* its resume entry */
    char *body;
};

struct oe_resume {
    struct orch_engine *e;
    struct orch_engine *shell; /* where the folded runs live meanwhile */
    int start; /* the start's (else a claim of expired leases) */
    orch_engine_resumed_fn done;
    void *arg;
    int64_t *ids; /* the runs to claim; NULL: every request (the start) */
    size_t nids;
    int64_t cursor; /* the ledger's length before the fold read it */
    struct resumed *rs;
    size_t n, cap;
    size_t counted; /* runs resumed (a corrupt one too: it ends failed) */
    int rc;
    struct fo_err err;
    struct fo_buf notes;       /* lines for the log, written by the worker */
    struct orch_work_job *job; /* while the fold runs */
    pthread_mutex_t mu;
    size_t pending; /* under mu: resume entries not committed yet */
    struct event *landed;
};

static int collect_request(void *ctx, const struct ledger_entry *en);
static int replay_entry(void *ctx, const struct ledger_entry *en);
static int resume_one(struct orch_engine *e, int64_t seq, struct oe_resume *job,
                      struct fo_err *err);
static int claim_resume(struct orch_engine *e, int64_t seq,
                        struct oe_resume *job, struct fo_err *err);

static int collect_request(void *ctx, const struct ledger_entry *en)
{
    struct collect *c = ctx;
    if (en->parent != LEDGER_NO_PARENT || strcmp(en->kind, "request") != 0)
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        int64_t *s = realloc(c->seqs, cap * sizeof(*s));
        if (!s)
            return FO_E_NOMEM;
        c->seqs = s;
        c->cap = cap;
    }
    c->seqs[c->n++] = en->seq;
    return 0;
}

static int replay_entry(void *ctx, const struct ledger_entry *en)
{
    struct replay *p = ctx;
    struct run *r = p->r;
    if (p->rc || en->seq == r->id)
        return 0;
    if (!strcmp(en->kind, "answer") || !strcmp(en->kind, "error")) {
        p->ended = 1;
        return 1;
    }
    int rc = oe_apply_stored(r, r->e->cfg.ledger, en, &p->err);
    if (rc) {
        if (rc == FO_E_REDACTED) /* as before: a step it cannot read */
            fo_err_prefix(&p->err, "entry %lld (%s)", (long long)en->seq,
                          en->kind);
        p->rc = rc;
        return 1;
    }
    snprintf(p->last_kind, sizeof(p->last_kind), "%s", en->kind);
    return 0;
}

/* A line for the log, kept until the job is back on the loop. */
static void note(struct oe_resume *job, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(struct oe_resume *job, const char *fmt, ...)
{
    char line[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fo_buf_printf(&job->notes, "%s\n", line);
}

/* Keeps folded run r in the job. */
static int keep(struct oe_resume *job, struct run *r, struct fo_err *err)
{
    if (job->n == job->cap) {
        size_t cap = job->cap ? job->cap * 2 : 16;
        struct resumed *rs = realloc(job->rs, cap * sizeof(*rs));
        if (!rs)
            return oe_nomem(err);
        job->rs = rs;
        job->cap = cap;
    }
    job->rs[job->n++] = (struct resumed){.r = r};
    return FO_OK;
}

/* The run of request seq, when it has no end and nobody live holds it:
 * rebuilt from its entries in the shell engine e (on the job's thread,
 * with the job's handle) and kept in job. */
static int resume_one(struct orch_engine *e, int64_t seq, struct oe_resume *job,
                      struct fo_err *err)
{
    struct ledger *l = e->cfg.ledger;
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    struct fo_err ignore;
    if (ledger_body(l, seq, &body, &len, &ignore) ||
        fo_json_parse(body, len, &b, &ignore)) {
        free(body);
        return FO_OK; /* redacted or foreign: not ours to resume */
    }
    free(body);
    const char *via = oe_str_of(b, "via"), *text = oe_str_of(b, "request");
    const char *inst = oe_str_of(b, "instance");
    int resumable =
        !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "resumable"));
    if (!via || !text || !inst || !resumable ||
        (strcmp(via, "submit") && strcmp(via, "run_start") &&
         strcmp(via, "plan_run"))) {
        cJSON_Delete(b);
        return FO_OK;
    }
    struct run *r = oe_run_new(e, via);
    if (!r) {
        cJSON_Delete(b);
        return oe_nomem(err);
    }
    r->id = seq;
    r->request = orch_strdup(text);
    long long n = 0;
    r->max_calls = fo_json_get_int(b, "max_model_calls", 1,
                                   ORCH_SUBMIT_CALLS_MAX, &n) == FO_OK
                       ? (int)n
                       : ORCH_SUBMIT_CALLS_DEFAULT;
    r->max_seconds = fo_json_get_int(b, "max_seconds", 1,
                                     ORCH_SUBMIT_SECONDS_MAX, &n) == FO_OK
                         ? (int)n
                         : 0;
    cJSON *gates = cJSON_DetachItemFromObjectCaseSensitive(b, "gates");
    if (cJSON_IsObject(gates))
        r->gates = gates;
    else
        cJSON_Delete(gates);
    const char *sess = oe_str_of(b, "session");
    orch_ctx_limits_default(&r->lim);
    struct fo_err lerr;
    if (sess && orch_session_name_ok(sess) &&
        orch_ctx_limits_parse(cJSON_GetObjectItemCaseSensitive(b, "context"),
                              &r->lim, &lerr) == FO_OK)
        r->session = orch_strdup(sess);
    oe_request_opts(r, b);
    cJSON_Delete(b);
    struct ledger_entry req;
    if (!r->request || ledger_get(l, seq, &req, NULL, err)) {
        int code = r->request ? err->code : oe_nomem(err);
        oe_run_unlink(r);
        oe_run_free(r);
        return code;
    }
    r->t0_us = req.ts;
    oe_note_payload(r, "request", req.payload);
    if (!strcmp(r->via, "plan_run")) /* via was in the freed body */
        r->phase = PH_PLAN;
    if (r->session) { /* its turn entry moves it on */
        r->after_context = r->phase;
        r->phase = PH_CONTEXT;
    }
    struct replay p = {.r = r};
    int rc =
        ledger_descendants(l, seq, ORCH_RUN_SCAN_MAX, replay_entry, &p, err);
    if (rc < 0 || (rc && !p.ended && !p.rc) || p.ended) {
        oe_run_unlink(r);
        oe_run_free(r);
        return rc < 0 ? -rc : p.ended ? FO_OK : rc;
    }
    /* in flight at the crash: a job is not running now, a role call is
     * made again */
    r->reserved = 0;
    r->halt = H_NONE;
    if (r->budget_seq >= 0) /* the budget is on record: only the answer */
        r->halt = H_BUDGET;
    else if (oe_gate_rejected(r)) /* a gate ended it: the budget entry next */
        r->halt = H_GATE;
    if ((rc = keep(job, r, err)) != FO_OK) {
        oe_run_unlink(r);
        oe_run_free(r);
        return rc;
    }
    job->counted++;
    if (p.rc) { /* its entries do not reduce to a state: it ends failed */
        job->rs[job->n - 1].corrupt = 1;
        job->rs[job->n - 1].err = p.err;
        return FO_OK;
    }
    snprintf(r->stopped_before, sizeof(r->stopped_before), "%s",
             p.last_kind[0] ? p.last_kind : "request");
    /* a turn past its context: the same context again, nothing written */
    struct fo_err cerr;
    if (r->session && r->phase != PH_CONTEXT &&
        oe_session_context(r, NULL, &cerr) != FO_OK)
        note(job, "run %lld: its session's context cannot be read: %s",
             (long long)seq, cerr.msg);
    return FO_OK;
}

/* With run leases, a run is resumed only by the engine that claims its
 * lease: one with a live lease is another daemon's; one with an expired
 * lease is claimed, then read; one with none (made before leases, or
 * over) is read first, and claimed only when it has no end. e is the
 * job's shell (its ledger the job's handle, its instance the engine's). */
static int claim_resume(struct orch_engine *e, int64_t seq,
                        struct oe_resume *job, struct fo_err *err)
{
    if (!e->leases)
        return resume_one(e, seq, job, err);
    struct ledger *l = e->cfg.ledger;
    char owner[65];
    int live = 0;
    int rc = ledger_lease_get(l, seq, owner, sizeof(owner), &live, err);
    if (rc && rc != FO_E_NOT_FOUND)
        return rc;
    if (rc == FO_OK && live)
        return FO_OK; /* another daemon runs it */
    size_t n0 = job->n, c0 = job->counted;
    if (rc == FO_E_NOT_FOUND) {
        rc = resume_one(e, seq, job, err);
        if (rc || job->n == n0)
            return rc;
        struct run *r = job->rs[--job->n].r; /* read again once it is ours */
        job->counted = c0;
        oe_run_unlink(r);
        oe_run_free(r);
    }
    int got = 0;
    rc = ledger_lease_claim(l, seq, e->instance, e->cfg.lease_ms, &got, err);
    if (rc || !got)
        return rc;
    rc = resume_one(e, seq, job, err);
    struct fo_err lerr;
    if (!rc && job->n > n0)
        job->rs[job->n - 1].r->leased = 1;
    else if (!rc) /* over, or not a run to resume */
        ledger_lease_release(l, seq, e->instance, 1, &lerr);
    return rc;
}

/* ---- the job ------------------------------------------------------------ */

static void job_free(struct oe_resume *job)
{
    if (!job)
        return;
    for (size_t i = 0; i < job->n; i++) {
        if (job->rs[i].r) {
            oe_run_unlink(job->rs[i].r);
            oe_run_free(job->rs[i].r);
        }
        free(job->rs[i].body);
    }
    free(job->rs);
    free(job->ids);
    fo_buf_release(&job->notes);
    if (job->landed)
        event_free(job->landed);
    pthread_mutex_destroy(&job->mu);
    free(job->shell);
    free(job);
}

/* On a worker: the runs listed (the start) or given (a claim), each
 * claimed when leases are kept and folded. */
static void job_work(void *arg, const atomic_int *cancel)
{
    struct oe_resume *job = arg;
    struct orch_engine *sh = job->shell;
#ifdef FORUM_TEST_SEAMS
    fo_test_hold(getenv("FORUM_TEST_RESUME_HOLD"));
#endif
    struct ledger *l = NULL;
    int rc =
        ledger_open(ledger_dir(job->e->cfg.ledger),
                    sh->leases ? 0 : LEDGER_OPEN_READONLY, NULL, &l, &job->err);
    int64_t count = 0;
    if (!rc && (rc = ledger_count(l, &count, &job->err)) == FO_OK)
        job->cursor = count;
    sh->cfg.ledger = l;
    struct collect c = {0};
    if (!rc && !job->ids) {
        rc = ledger_requests(l, 0, collect_request, &c, &job->err);
        if (rc == FO_E_NOMEM)
            rc = oe_nomem(&job->err);
        job->ids = c.seqs;
        job->nids = c.n;
    }
    for (size_t i = 0; !rc && i < job->nids; i++) {
        if (atomic_load(cancel)) {
            rc = fo_err_set(&job->err, FO_E_DRAINING, "the engine stopped");
            break;
        }
        /* a run some live process holds is theirs (this one's too: a run
         * begun since the start) */
        if (orch_run_held(sh->o, l, job->ids[i]))
            continue;
        struct fo_err err;
        int one = claim_resume(sh, job->ids[i], job, &err);
        if (one == FO_E_NOMEM) {
            rc = oe_nomem(&job->err);
        } else if (one && job->start) { /* the start: it stops there */
            rc = one;
            job->err = err;
        } else if (one) { /* a claim: the others go on */
            note(job, "run %lld: cannot claim: %s", (long long)job->ids[i],
                 err.msg);
        }
    }
    job->rc = rc;
    ledger_close(l);
    sh->cfg.ledger = NULL;
}

/* Moves run x->r from the job's shell into the engine. */
static struct run *adopt(struct oe_resume *job, struct resumed *x)
{
    struct orch_engine *e = job->e;
    struct run *r = x->r;
    x->r = NULL;
    oe_run_unlink(r); /* from the shell */
    r->e = e;
    r->prev = NULL;
    r->next = e->runs;
    if (e->runs)
        e->runs->prev = r;
    e->runs = r;
    e->n_runs++;
    e->m_runs_started++;
    return r;
}

/* A run the job will not resume after all: its lease, when it was
 * claimed, goes back at once. */
static void drop(struct oe_resume *job, struct resumed *x)
{
    struct orch_engine *e = job->e;
    if (x->r && x->r->leased && e->lw)
        orch_lease_worker_release(e->lw, e->instance, x->r->id, 0);
    if (x->r) {
        oe_run_unlink(x->r);
        oe_run_free(x->r);
        x->r = NULL;
    }
}

static void job_end(struct oe_resume *job, int rc, const struct fo_err *err)
{
    struct orch_engine *e = job->e;
    if (e->resume == job)
        e->resume = NULL;
    for (size_t i = 0; i < job->n; i++)
        drop(job, &job->rs[i]);
    if (job->done)
        job->done(job->arg, rc ? 0 : job->counted, rc, err);
    job_free(job);
}

/* The log's lines the worker wrote. */
static void log_notes(struct oe_resume *job)
{
    char *s = job->notes.data;
    for (size_t i = 0; s && i < job->notes.len;) {
        char *nl = memchr(s + i, '\n', job->notes.len - i);
        size_t k = nl ? (size_t)(nl - (s + i)) : job->notes.len - i;
        oe_elog(job->e, "%.*s", (int)k, s + i);
        i += k + 1;
    }
    job->notes.len = 0;
}

/* On the loop, once every resume entry was committed (or failed): the
 * runs whose entry is on record move into the engine and go on; one
 * whose entry failed stays as it was (a later start or claim resumes
 * it). A stop that came meanwhile keeps them all out. */
static void on_landed(evutil_socket_t fd, short what, void *arg)
{
    struct oe_resume *job = arg;
    struct orch_engine *e = job->e;
    (void)fd, (void)what;
    pthread_mutex_lock(&job->mu);
    size_t pending = job->pending;
    pthread_mutex_unlock(&job->mu);
    if (pending)
        return;
    /* decisions written while the fold read: the gates' next scan looks
     * again from where it began */
    oe_gate_rewind(e, job->cursor);
    for (size_t i = 0; i < job->n; i++) {
        struct resumed *x = &job->rs[i];
        if (!x->r || x->corrupt)
            continue;
        if (e->stopping || oe_run_find(e, x->r->id)) {
            drop(job, x);
            continue;
        }
        if (x->a.rc) {
            oe_elog(e, "run %lld: not resumed (left for the next start): %s",
                    (long long)x->r->id, x->a.err.msg);
            drop(job, x);
            continue;
        }
        struct run *r = adopt(job, x);
        r->stopped_before[0] = '\0';
        r->last_seq = x->a.entry.seq;
        if (job->start)
            oe_elog(e, "run %lld: resumed", (long long)r->id);
        else
            oe_elog(e, "run %lld: claimed (its lease had expired)",
                    (long long)r->id);
        oe_step(r);
    }
    if (e->stopping) { /* none went on: the next start resumes them */
        struct fo_err err;
        fo_err_set(&err, FO_E_DRAINING, "the engine stopped");
        job_end(job, FO_E_DRAINING, &err);
        return;
    }
    job_end(job, FO_OK, NULL);
}

/* From the committer's thread: one resume entry committed or failed. */
static void on_committed(void *arg)
{
    struct oe_resume *job = arg;
    pthread_mutex_lock(&job->mu);
    int last = --job->pending == 0;
    pthread_mutex_unlock(&job->mu);
    if (last)
        event_active(job->landed, EV_TIMEOUT, 0);
}

/* The resume entry of x, for the committer. */
static int entry_of(struct oe_resume *job, struct resumed *x,
                    struct fo_err *err)
{
    struct run *r = x->r;
    cJSON *o = cJSON_CreateObject();
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = FO_OK;
    if (!o || !fo_json_add_int(o, "last_seq", r->last_seq) ||
        !cJSON_AddStringToObject(o, "last_kind", r->stopped_before) ||
        !cJSON_AddStringToObject(o, "instance", job->e->instance) ||
        fo_json_canon(o, &b, err))
        rc = oe_nomem(err);
    cJSON_Delete(o);
    x->body = rc ? NULL : fo_buf_detach(&b, &x->a.body_len);
    fo_buf_release(&b);
    if (rc)
        return rc;
    x->a.actor = "loop";
    x->a.kind = "resume";
    x->a.parent = r->id;
    x->a.body = x->body;
    if (r->leased) { /* written only while the lease is ours */
        x->a.lease_owner = job->e->instance;
        x->a.lease_run = r->id;
    }
    return FO_OK;
}

/* On the loop, the fold done: a run whose entries do not reduce ends
 * failed at once; the others' resume entries go to the committer. */
static void job_done(void *arg, int cancelled)
{
    struct oe_resume *job = arg;
    struct orch_engine *e = job->e;
    job->job = NULL;
    log_notes(job);
    struct fo_err err;
    if (cancelled || e->stopping) {
        fo_err_set(&err, FO_E_DRAINING, "the engine stopped");
        job_end(job, FO_E_DRAINING, &err);
        return;
    }
    if (job->rc)
        oe_elog(e, "resume: %s", job->err.msg);
    size_t live = 0;
    for (size_t i = 0; i < job->n; i++)
        live += !oe_run_find(e, job->rs[i].r->id);
    if (live && !e->have_instance && oe_hold_instance(e, &err) != FO_OK) {
        oe_elog(e, "resume: %s", err.msg);
        job_end(job, err.code, &err);
        return;
    }
    pthread_mutex_lock(&job->mu);
    job->pending = 1; /* until every entry is queued */
    pthread_mutex_unlock(&job->mu);
    for (size_t i = 0; i < job->n; i++) {
        struct resumed *x = &job->rs[i];
        if (oe_run_find(e, x->r->id)) {
            drop(job, x);
            continue;
        }
        if (x->corrupt) {
            struct run *r = adopt(job, x);
            oe_elog(e, "run %lld: cannot resume: %s", (long long)r->id,
                    x->err.msg);
            oe_fail(r, FO_E_CORRUPT, &x->err);
            oe_step(r);
            continue;
        }
        if (entry_of(job, x, &err) != FO_OK) {
            x->a.rc = err.code;
            x->a.err = err;
            continue;
        }
        if (!e->cfg.append) { /* a host with no committer (tests) */
            ledger_append_batch(e->cfg.ledger, &x->a, 1, &x->a.err);
            continue;
        }
        pthread_mutex_lock(&job->mu);
        job->pending++;
        pthread_mutex_unlock(&job->mu);
        if (e->cfg.append(e->cfg.hook, &x->a, on_committed, job, &err)) {
            x->a.rc = err.code;
            x->a.err = err;
            pthread_mutex_lock(&job->mu);
            job->pending--;
            pthread_mutex_unlock(&job->mu);
        }
    }
    on_committed(job); /* the one held while queueing */
}

/* Posts a resume job: ids (copied) to claim, or NULL for every request. */
static int job_post(struct orch_engine *e, int start, const int64_t *ids,
                    size_t n, orch_engine_resumed_fn done, void *arg,
                    struct fo_err *err)
{
    if (e->resume)
        return fo_err_set(err, FO_E_BUSY, "a resume is under way");
    struct oe_resume *job = calloc(1, sizeof(*job));
    struct orch_engine *sh = job ? calloc(1, sizeof(*sh)) : NULL;
    if (!sh) {
        free(job);
        return oe_nomem(err);
    }
    pthread_mutex_init(&job->mu, NULL);
    fo_buf_init(&job->notes, FO_BUF_UNLIMITED);
    job->e = e;
    job->start = start;
    job->cursor = -1;
    job->shell = sh;
    job->done = done;
    job->arg = arg;
    sh->o = e->o;
    sh->leases = e->leases;
    sh->cfg.lease_ms = e->cfg.lease_ms;
    memcpy(sh->instance, e->instance, sizeof(sh->instance));
    int rc = FO_OK;
    if (ids) {
        job->ids = calloc(n ? n : 1, sizeof(*ids));
        if (job->ids)
            memcpy(job->ids, ids, n * sizeof(*ids));
        job->nids = n;
    }
    job->landed = event_new(e->cfg.base, -1, 0, on_landed, job);
    if ((ids && !job->ids) || !job->landed)
        rc = oe_nomem(err);
    if (!rc && !e->work)
        rc = orch_work_create(e->cfg.base, &e->work, err);
    if (!rc)
        rc = orch_work_post(e->work, job_work, job_done, job, &job->job, err);
    if (rc) {
        job_free(job);
        return rc;
    }
    e->resume = job;
    return FO_OK;
}

int orch_engine_resume_start(struct orch_engine *e, orch_engine_resumed_fn done,
                             void *arg, struct fo_err *err)
{
    /* with leases, the claims are made in the instance's name */
    int rc = e->leases ? oe_hold_instance(e, err) : FO_OK;
    return rc ? rc : job_post(e, 1, NULL, 0, done, arg, err);
}

void oe_resume_stop(struct orch_engine *e)
{
    if (e->resume && e->resume->job)
        orch_work_cancel(e->resume->job);
}

void oe_resume_free(struct orch_engine *e)
{
    struct oe_resume *job = e->resume;
    if (!job)
        return;
    e->resume = NULL;
    for (size_t i = 0; i < job->n; i++) /* no lease worker any more */
        if (job->rs[i].r)
            job->rs[i].r->leased = 0;
    job_end(job, FO_E_DRAINING,
            &(struct fo_err){FO_E_DRAINING, "the engine stopped"});
}

/* ---- run leases (several daemons on one ledger) ------------------------ */

/* Posts to the lease thread (orch_lease.c) the renewal of the leases of
 * the runs here and, unless stopping, the listing of the expired ones; a
 * tick while the last job is under way posts nothing. on_lease_done reads
 * what it found. */
void oe_on_lease_tick(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    size_t n = 0;
    for (struct run *r = e->runs; r; r = r->next)
        n += r->leased && !r->ended && !r->lease_lost;
    int64_t *ids = n ? calloc(n, sizeof(*ids)) : NULL;
    if (n && !ids)
        return;
    size_t k = 0;
    for (struct run *r = e->runs; r && k < n; r = r->next)
        if (r->leased && !r->ended && !r->lease_lost)
            ids[k++] = r->id;
    if (orch_lease_worker_post(e->lw, e->instance, ids, k, e->cfg.lease_ms,
                               !e->stopping) < 0)
        oe_elog(e, "run leases: out of memory (the next tick tries again)");
    free(ids);
}

/* What the lease thread found, on the loop: a run whose lease was not
 * renewed was taken over by another daemon and is dropped here, without a
 * write; runs whose lease expired (their daemon died, or lost the database
 * for longer than a lease) are claimed and resumed by a resume job (one at
 * a time: while one is under way, the next tick lists them again). */
void oe_on_lease_done(void *arg)
{
    struct orch_engine *e = arg;
    const struct orch_lease_result *x = orch_lease_worker_result(e->lw);
    struct fo_err err;
    if (x->rc) {
        if (!e->lease_failing)
            oe_elog(e,
                    "run leases: cannot renew (runs go on; another daemon "
                    "may take over those whose lease expires): %s",
                    x->err.msg);
        e->lease_failing = 1;
        return; /* the database is away: no claims either */
    }
    for (size_t i = 0; i < x->n; i++) {
        struct run *r = oe_run_find(e, x->ids[i]);
        if (!r || x->ok[i] || !r->leased || r->ended || r->lease_lost)
            continue;
        struct fo_err lerr;
        fo_err_set(&lerr, FO_E_RUN_ELSEWHERE,
                   "run %lld: its lease was taken over by another daemon",
                   (long long)r->id);
        oe_elog(e, "%s: dropped here", lerr.msg);
        oe_fail(r, FO_E_RUN_ELSEWHERE, &lerr);
        oe_step(r);
        return; /* the list may have changed: the rest next time */
    }
    if (!x->listed || e->stopping)
        return;
    if (x->exp_rc) {
        if (!e->lease_failing)
            oe_elog(e, "run leases: cannot read the leases: %s",
                    x->exp_err.msg);
        e->lease_failing = 1;
        return;
    }
    if (e->lease_failing)
        oe_elog(e, "run leases: the database answers again");
    e->lease_failing = 0;
    if (e->resume)
        return; /* the job under way first */
    int64_t ids[ORCH_LEASE_EXPIRED_MAX];
    size_t n = 0,
           room = e->n_runs < e->cfg.max_runs ? e->cfg.max_runs - e->n_runs : 0;
    for (size_t i = 0; i < x->nexp && n < room; i++)
        if (!oe_run_find(e, x->expired[i]))
            ids[n++] = x->expired[i];
    if (!n)
        return;
    if (oe_hold_instance(e, &err) != FO_OK ||
        job_post(e, 0, ids, n, NULL, NULL, &err) != FO_OK)
        oe_elog(e, "run leases: %s", err.msg);
}
