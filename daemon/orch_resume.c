/* orch_resume: runs resumed after a restart from their entries, and run
 * leases when several daemons share one ledger. */
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

static int collect_request(void *ctx, const struct ledger_entry *en);
static int replay_entry(void *ctx, const struct ledger_entry *en);
static int resume_one(struct orch_engine *e, int64_t seq, int *resumed,
                      struct run **out, struct fo_err *err);
static int resume_batch(struct orch_engine *e, struct run **rs, size_t n,
                        struct fo_err *err);
static int claim_resume(struct orch_engine *e, int64_t seq, int *resumed,
                        struct run **out, struct fo_err *err);

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

/* The run of request seq, when it has no end and nobody live holds it:
 * rebuilt from its entries and set going again. *resumed 1 when it was. */
static int resume_one(struct orch_engine *e, int64_t seq, int *resumed,
                      struct run **out, struct fo_err *err)
{
    *resumed = 0;
    *out = NULL;
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
    if (rc < 0 || (rc && !p.ended && !p.rc)) {
        oe_run_unlink(r);
        oe_run_free(r);
        return rc < 0 ? -rc : rc;
    }
    if (p.ended) {
        oe_run_unlink(r);
        oe_run_free(r);
        return FO_OK;
    }
    /* in flight at the crash: a job is not running now, a role call is
     * made again */
    r->reserved = 0;
    r->halt = H_NONE;
    if (r->budget_seq >= 0) /* the budget is on record: only the answer */
        r->halt = H_BUDGET;
    else if (oe_gate_rejected(r)) /* a gate ended it: the budget entry next */
        r->halt = H_GATE;
    *resumed = 1;
    if (p.rc) { /* its entries do not reduce to a state */
        oe_elog(e, "run %lld: cannot resume: %s", (long long)seq, p.err.msg);
        oe_fail(r, FO_E_CORRUPT, &p.err);
        oe_step(r);
        return FO_OK;
    }
    snprintf(r->stopped_before, sizeof(r->stopped_before), "%s",
             p.last_kind[0] ? p.last_kind : "request");
    /* a turn past its context: the same context again, nothing written */
    struct fo_err cerr;
    if (r->session && r->phase != PH_CONTEXT &&
        oe_session_context(r, NULL, &cerr) != FO_OK)
        oe_elog(e, "run %lld: its session's context cannot be read: %s",
                (long long)seq, cerr.msg);
    *out = r;
    return FO_OK;
}

/* The `resume` entries of runs rebuilt from their entries, in one
 * transaction (one fsync for them all, before the daemon says it is
 * ready), then each run goes on. */
static int resume_batch(struct orch_engine *e, struct run **rs, size_t n,
                        struct fo_err *err)
{
    struct ledger_append *reqs = calloc(n ? n : 1, sizeof(*reqs));
    char **bodies = calloc(n ? n : 1, sizeof(*bodies));
    int rc = reqs && bodies ? FO_OK : oe_nomem(err);
    for (size_t i = 0; !rc && i < n; i++) {
        struct run *r = rs[i];
        cJSON *o = cJSON_CreateObject();
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (!o || !fo_json_add_int(o, "last_seq", r->last_seq) ||
            !cJSON_AddStringToObject(o, "last_kind", r->stopped_before) ||
            !cJSON_AddStringToObject(o, "instance", e->instance) ||
            fo_json_canon(o, &b, err))
            rc = oe_nomem(err);
        cJSON_Delete(o);
        bodies[i] = rc ? NULL : fo_buf_detach(&b, &reqs[i].body_len);
        fo_buf_release(&b);
        reqs[i].actor = "loop";
        reqs[i].kind = "resume";
        reqs[i].parent = r->id;
        reqs[i].body = bodies[i];
        if (r->leased) {
            reqs[i].lease_owner = e->instance;
            reqs[i].lease_run = r->id;
        }
    }
    if (!rc && n)
        rc = ledger_append_batch(e->cfg.ledger, reqs, n, err);
    for (size_t i = 0; i < n; i++) {
        struct run *r = rs[i];
        r->stopped_before[0] = '\0';
        if (rc || reqs[i].rc) { /* not resumed: it stays as it was */
            oe_run_unlink(r);
            oe_run_free(r);
            continue;
        }
        r->last_seq = reqs[i].entry.seq;
        oe_elog(e, "run %lld: resumed", (long long)r->id);
        oe_step(r);
    }
    for (size_t i = 0; bodies && i < n; i++)
        free(bodies[i]);
    free(bodies);
    free(reqs);
    return rc;
}

/* With run leases, a run is resumed only by the engine that claims its
 * lease: one with a live lease is another daemon's; one with an expired
 * lease is claimed, then read; one with none (made before leases, or
 * over) is read first, and claimed only when it has no end. */
static int claim_resume(struct orch_engine *e, int64_t seq, int *resumed,
                        struct run **out, struct fo_err *err)
{
    *resumed = 0;
    *out = NULL;
    if (!e->leases)
        return resume_one(e, seq, resumed, out, err);
    struct ledger *l = e->cfg.ledger;
    char owner[65];
    int live = 0;
    int rc = ledger_lease_get(l, seq, owner, sizeof(owner), &live, err);
    if (rc && rc != FO_E_NOT_FOUND)
        return rc;
    if (rc == FO_OK && live)
        return FO_OK; /* another daemon runs it */
    if (rc == FO_E_NOT_FOUND) {
        rc = resume_one(e, seq, resumed, out, err);
        if (rc || !*out)
            return rc;
        oe_run_unlink(*out); /* read again once it is ours */
        oe_run_free(*out);
        *out = NULL;
        *resumed = 0;
    }
    int got = 0;
    rc = ledger_lease_claim(l, seq, e->instance, e->cfg.lease_ms, &got, err);
    if (rc || !got)
        return rc;
    rc = resume_one(e, seq, resumed, out, err);
    struct fo_err lerr;
    if (!rc && *out)
        (*out)->leased = 1;
    else if (!rc && !*resumed) /* over, or not a run to resume */
        ledger_lease_release(l, seq, e->instance, 1, &lerr);
    return rc;
}

int orch_engine_resume_all(struct orch_engine *e, size_t *n, struct fo_err *err)
{
    if (n)
        *n = 0;
    struct collect c = {0};
    int rc = ledger_requests(e->cfg.ledger, 0, collect_request, &c, err);
    if (rc > 0 && rc != FO_OK) {
        free(c.seqs);
        return rc == FO_E_NOMEM ? oe_nomem(err) : rc;
    }
    rc = FO_OK;
    struct run **rs = calloc(c.n ? c.n : 1, sizeof(*rs));
    size_t nr = 0;
    if (!rs)
        rc = oe_nomem(err);
    for (size_t i = 0; !rc && i < c.n; i++) {
        if (oe_run_find(e, c.seqs[i]))
            continue;
        /* a run some live process holds is theirs */
        if (orch_run_held(e->o, e->cfg.ledger, c.seqs[i]))
            continue;
        if (!e->have_instance && (rc = oe_hold_instance(e, err)))
            break;
        int resumed = 0;
        struct run *r = NULL;
        rc = claim_resume(e, c.seqs[i], &resumed, &r, err);
        if (!rc && resumed && n)
            (*n)++;
        if (r)
            rs[nr++] = r;
    }
    if (rs) {
        int brc = resume_batch(e, rs, nr, err);
        if (!rc)
            rc = brc;
    }
    free(rs);
    free(c.seqs);
    return rc;
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
 * for longer than a lease) are claimed and resumed. */
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
    struct run *rs[ORCH_LEASE_EXPIRED_MAX];
    size_t nr = 0;
    for (size_t i = 0; i < x->nexp; i++) {
        if (oe_run_find(e, x->expired[i]) || e->n_runs >= e->cfg.max_runs)
            continue;
        if (!e->have_instance && oe_hold_instance(e, &err) != FO_OK) {
            oe_elog(e, "run leases: %s", err.msg);
            break;
        }
        int resumed = 0;
        struct run *r = NULL;
        int rc = claim_resume(e, x->expired[i], &resumed, &r, &err);
        if (rc)
            oe_elog(e, "run %lld: cannot claim: %s", (long long)x->expired[i],
                    err.msg);
        else if (r) {
            oe_elog(e, "run %lld: claimed (its lease had expired)",
                    (long long)x->expired[i]);
            rs[nr++] = r;
        }
    }
    if (nr && resume_batch(e, rs, nr, &err) != FO_OK)
        oe_elog(e, "run leases: resume: %s", err.msg);
}
