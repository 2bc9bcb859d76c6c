/* orch_gates_run: approval gates on a run: asked, waited for, expired,
 * decided by a human (once: racing decisions put one on the ledger). */
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

static void gate_arm(struct orch_engine *e);
static int gate_expire(struct run *r, size_t wave, struct fo_err *err);
static int gate_request(struct run *r, const char *rule, struct fo_err *err);
static void gate_off_committed(void *arg);
static int gate_offline(struct orch_engine *e,
                        const struct orch_gate_decision *d,
                        orch_run_done_fn done, void *arg, struct fo_err *err);
static int gate_lost(int64_t run, int64_t wave, const struct fo_err *why,
                     struct fo_err *err);
static void gate_landed(void *arg, struct run *r, int rc, int64_t seq,
                        const struct fo_err *err);
static int check_text(const char *name, const char *v, int required,
                      struct fo_err *err);
static void on_stop_check(evutil_socket_t fd, short what, void *arg);
static void on_grace(evutil_socket_t fd, short what, void *arg);

static void gate_arm(struct orch_engine *e)
{
    if (!e->gate_ev || evtimer_pending(e->gate_ev, NULL))
        return;
    struct timeval tv = {ORCH_GATE_POLL_MS / 1000,
                         (ORCH_GATE_POLL_MS % 1000) * 1000};
    evtimer_add(e->gate_ev, &tv);
}

static int gate_expire(struct run *r, size_t wave, struct fo_err *err)
{
    struct gate *g = &r->g[wave];
    char when[ORCH_TIME_MAX];
    orch_time_rfc3339(g->deadline_ms, when);
    cJSON *o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "run", r->id) &&
             fo_json_add_int(o, "wave", (long long)wave) &&
             cJSON_AddStringToObject(o, "deadline", when) &&
             cJSON_AddStringToObject(
                 o, "on_expiry", g->approve_on_expiry ? "approve" : "reject") &&
             cJSON_AddStringToObject(
                 o, "action", g->approve_on_expiry ? "approved" : "rejected");
    if (!ok) {
        cJSON_Delete(o);
        return oe_nomem(err);
    }
    g->writing = 1;
    int rc =
        oe_witness(r, "gate", "gate_expired", g->req_seq, o, -1, 0, 0, err);
    if (rc)
        g->writing = 0;
    return rc;
}

static int gate_request(struct run *r, const char *rule, struct fo_err *err)
{
    const struct orch_plan *p = r->p;
    struct gate *g = &r->g[r->wave];
    int64_t dl = orch_gate_deadline(r->gates, oe_now_ms());
    char when[ORCH_TIME_MAX];
    orch_time_rfc3339(dl, when);
    const char *q = oe_str_of(r->gates, "question");
    char question[160];
    size_t n = p->wave_start[r->wave + 1] - p->wave_start[r->wave];
    snprintf(question, sizeof(question),
             "Approve wave %zu of run %lld (%zu task%s) before it runs?",
             r->wave, (long long)r->id, n, n == 1 ? "" : "s");
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = o ? cJSON_AddArrayToObject(o, "tasks") : NULL;
    int ok = tasks != NULL;
    for (size_t i = p->wave_start[r->wave];
         ok && i < p->wave_start[r->wave + 1]; i++) {
        const struct orch_task *k = &p->tasks[p->order[i]];
        cJSON *t = cJSON_CreateObject();
        ok = t && cJSON_AddItemToArray(tasks, t) &&
             cJSON_AddStringToObject(t, "id", k->id) &&
             cJSON_AddStringToObject(t, "agent", k->agent) &&
             cJSON_AddStringToObject(t, "instruction", k->instruction);
    }
    ok = ok && fo_json_add_int(o, "run", r->id) &&
         fo_json_add_int(o, "wave", (long long)r->wave) &&
         cJSON_AddStringToObject(o, "question", q ? q : question) &&
         cJSON_AddStringToObject(o, "rule", rule) &&
         cJSON_AddStringToObject(o, "deadline", when) &&
         fo_json_add_int(o, "deadline_ms", dl) &&
         cJSON_AddStringToObject(
             o, "on_expiry",
             orch_gate_on_expiry_approve(r->gates) ? "approve" : "reject");
    if (!ok) {
        cJSON_Delete(o);
        return oe_nomem(err);
    }
    g->writing = 1;
    int rc =
        oe_witness(r, "gate", "gate_requested", r->plan_seq, o, -1, 0, 0, err);
    if (rc)
        g->writing = 0;
    else
        oe_elog(r->e, "run %lld: wave %zu waits for approval (%s)",
                (long long)r->id, r->wave, rule);
    return rc;
}

/* Before the current wave runs: 1 when it may, 0 while it waits for its
 * gate (or its gate ended the run), -rc on an error. */
int oe_gate_step(struct run *r, struct fo_err *err)
{
    if (!r->g)
        return 1;
    struct gate *g = &r->g[r->wave];
    if (g->st == G_OPEN || g->st == G_APPROVED)
        return 1;
    if (g->st == G_REJECTED || g->writing)
        return 0;
    if (g->st == G_PENDING) {
        if (oe_now_ms() >= g->deadline_ms) {
            int rc = gate_expire(r, r->wave, err);
            return rc ? -rc : 0;
        }
        gate_arm(r->e);
        return 0;
    }
    /* asked once, before the wave's first task (a wave begun before is
     * not stopped now) */
    const struct orch_plan *p = r->p;
    for (size_t i = p->wave_start[r->wave]; i < p->wave_start[r->wave + 1]; i++)
        if (r->t[p->order[i]].st != TS_PENDING) {
            g->st = G_OPEN;
            return 1;
        }
    char rule[ORCH_NAME_MAX + 16];
    if (!orch_gate_rule(r->gates, orch_roster(r->e->o), p, r->wave, rule,
                        sizeof(rule))) {
        g->st = G_OPEN;
        return 1;
    }
    int rc = gate_request(r, rule, err);
    return rc ? -rc : 0;
}

/* ---- decisions read off the loop -------------------------------------
 * The loop never reads the ledger for the gates: a scan (the decisions
 * written since the last one, by this process or another, or one entry a
 * lost race named) runs on the engine's worker threads with their own
 * read handle, and hands the entries to the loop to apply. */

static int scan_entry(void *ctx, const struct ledger_entry *en)
{
    struct gate_scan *g = ctx;
    g->last = en->seq;
    if (strncmp(en->kind, "gate_", 5) != 0 ||
        !strcmp(en->kind, "gate_requested") || en->parent < 0)
        return 0;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        struct gate_dec *d = realloc(g->d, cap * sizeof(*d));
        if (!d)
            return FO_E_NOMEM;
        g->d = d;
        g->cap = cap;
    }
    struct gate_dec *x = &g->d[g->n++];
    *x = (struct gate_dec){.seq = en->seq, .parent = en->parent, .ts = en->ts};
    snprintf(x->actor, sizeof(x->actor), "%s", en->actor);
    snprintf(x->kind, sizeof(x->kind), "%s", en->kind);
    return 0;
}

/* On a worker: the entries, then their bodies (a redacted or unreadable
 * one stays without: the deadline decides). */
static void scan_work(void *arg, const atomic_int *cancel)
{
    struct gate_scan *g = arg;
    struct orch_engine *e = g->e;
    (void)cancel;
    g->rc = oe_rl_lock(e, &g->err);
    if (!g->rc && g->from >= 0)
        g->rc = ledger_range(e->rl, g->from, 100000, scan_entry, g, &g->err);
    if (!g->rc && g->from < 0) {
        struct ledger_entry en;
        if (ledger_get(e->rl, g->one, &en, NULL, &g->err) == FO_OK)
            g->rc = scan_entry(g, &en);
    }
    for (size_t i = 0; !g->rc && i < g->n; i++) {
        char *body = NULL;
        size_t len = 0;
        struct fo_err ignore;
        if (ledger_body(e->rl, g->d[i].seq, &body, &len, &ignore) == FO_OK)
            fo_json_parse(body, len, &g->d[i].body, &ignore);
        free(body);
    }
    oe_rl_unlock(e);
}

static void scan_free(struct gate_scan *g)
{
    for (size_t i = 0; i < g->n; i++)
        cJSON_Delete(g->d[i].body);
    free(g->d);
    free(g);
}

/* Applies decision x to run r when its gate still waits. */
static void gate_apply(struct run *r, const struct gate_dec *x)
{
    if (!x->body)
        return; /* redacted or unreadable: the deadline decides */
    struct fo_err err;
    r->cur_ts = x->ts;
    int rc = oe_apply(r, x->actor, x->kind, x->seq, x->parent, x->body, &err);
    if (rc)
        oe_fail(r, rc, &err);
}

/* Back on the loop: the decisions found go to the runs that wait for
 * them; gates past their deadline expire. */
static void scan_done(void *arg, int cancelled)
{
    struct gate_scan *g = arg;
    struct orch_engine *e = g->e;
    if (g->from >= 0)
        e->gate_scanning = 0;
    if (cancelled) {
        scan_free(g);
        return;
    }
    if (g->rc == FO_OK && g->from >= 0 && g->last >= e->gate_cursor)
        e->gate_cursor = g->last + 1;
    if (g->from >= 0 && e->gate_rewind >= 0) {
        if (e->gate_rewind < e->gate_cursor)
            e->gate_cursor = e->gate_rewind;
        e->gate_rewind = -1;
    }
    int64_t now = oe_now_ms();
    int waiting = 0;
    /* what to do is found first: acting may end runs */
    size_t nact = 0, cap = 0;
    struct {
        int64_t run;
        long take; /* an index into g->d, or -1: the deadline */
    } *act = NULL;
    for (struct run *r = e->runs; r; r = r->next)
        for (size_t w = 0; r->g && !r->ended && w < r->p->n_waves; w++) {
            struct gate *gt = &r->g[w];
            if (gt->st != G_PENDING || (gt->writing && g->from >= 0))
                continue;
            long take = -1;
            for (size_t i = 0; i < g->n && take < 0; i++)
                if (g->d[i].parent == gt->req_seq)
                    take = (long)i;
            waiting = 1;
            if (take < 0 && (now < gt->deadline_ms || g->from < 0))
                continue;
            if (nact == cap) {
                size_t c = cap ? cap * 2 : 8;
                void *a = realloc(act, c * sizeof(*act));
                if (!a)
                    break; /* the next tick */
                act = a;
                cap = c;
            }
            act[nact].run = r->id;
            act[nact++].take = take;
        }
    for (size_t i = 0; i < nact; i++) {
        struct run *r = oe_run_find(e, act[i].run);
        if (!r || r->ended)
            continue;
        if (act[i].take >= 0)
            gate_apply(r, &g->d[act[i].take]);
        oe_step(r);
    }
    free(act);
    scan_free(g);
    if (waiting)
        gate_arm(e);
}

/* Posts a scan: from the cursor (the tick), or of entry `one`. */
static int scan_post(struct orch_engine *e, int64_t from, int64_t one)
{
    struct fo_err err;
    struct gate_scan *g = calloc(1, sizeof(*g));
    if (!g)
        return FO_E_NOMEM;
    *g = (struct gate_scan){.e = e, .from = from, .one = one, .last = -1};
    int rc = e->work ? FO_OK : orch_work_create(e->cfg.base, &e->work, &err);
    if (!rc)
        rc = orch_work_post(e->work, scan_work, scan_done, g, NULL, &err);
    if (rc) {
        free(g);
        return rc;
    }
    if (from >= 0)
        e->gate_scanning = 1;
    return FO_OK;
}

/* Decision seq (another writer's: it won a race) is read off the loop and
 * applied to the run whose gate it decides. */
void oe_gate_take(struct run *r, int64_t seq)
{
    if (scan_post(r->e, -1, seq) != FO_OK)
        gate_arm(r->e); /* the tick finds it (or the deadline decides) */
}

void oe_gate_rewind(struct orch_engine *e, int64_t cursor)
{
    if (cursor < 0)
        return;
    if (cursor < e->gate_cursor)
        e->gate_cursor = cursor;
    if (e->gate_scanning && (e->gate_rewind < 0 || cursor < e->gate_rewind))
        e->gate_rewind = cursor; /* that scan began past it */
}

void oe_on_gate_tick(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    if (e->gate_scanning || scan_post(e, e->gate_cursor, -1) != FO_OK)
        gate_arm(e); /* one scan at a time; none: the next tick */
}

/* ---- a human's decision on a gate of a run here ------------------------- */

static void gate_off_committed(void *arg)
{
    struct gate_off *g = arg;
    struct orch_engine *e = g->e;
    pthread_mutex_lock(&e->mu);
    g->next = e->offq;
    e->offq = g;
    pthread_mutex_unlock(&e->mu);
    event_active(e->wake, EV_READ, 0);
}

void oe_gate_off_landed(struct orch_engine *e, struct gate_off *g)
{
    (void)e; /* written once (sole_kinds): an ok append is the decision */
    struct fo_err err = g->a.err;
    int rc = g->a.rc;
    cJSON *o = NULL;
    if (rc == FO_E_EXISTS)
        rc = gate_lost(g->d.run, g->d.wave, &g->a.err, &err);
    if (!rc && !(o = orch_gate_reply(&g->d, g->a.entry.seq)))
        rc = oe_nomem(&err);
    if (g->done)
        g->done(g->arg, rc, o, rc ? &err : NULL);
    else
        cJSON_Delete(o);
    oe_gate_off_free(g);
}

/* On a worker: the gate the decision is for, checked on the ledger. */
static int gate_off_read(struct ledger *l, struct oe_read *rd,
                         struct fo_err *err)
{
    struct gate_off *g = rd->arg;
    struct orch_gate_decision d = g->d;
    d.decision = g->d.decision[0] == 'a'   ? "approve"
                 : g->d.decision[0] == 'e' ? "edit"
                                           : "reject";
    return orch_gate_check(l, &d, &rd->n, err);
}

/* Back on the loop: the decision is written (or its caller hears why
 * not). */
static void gate_off_checked(struct oe_read *rd)
{
    struct gate_off *g = rd->arg;
    struct orch_engine *e = g->e;
    struct fo_err err = rd->err;
    int rc = rd->rc;
    g->a.parent = g->gate_seq = rd->n;
    oe_read_free(rd);
    if (!rc && e->cfg.append)
        rc = e->cfg.append(e->cfg.hook, &g->a, gate_off_committed, g, &err);
    else if (!rc) {
        ledger_append_batch(e->cfg.ledger, &g->a, 1, &g->a.err);
        gate_off_committed(g);
        return;
    }
    if (!rc)
        return;
    if (g->done)
        g->done(g->arg, rc, NULL, &err);
    oe_gate_off_free(g);
}

/* The check reads the ledger on a worker (oe_read_post), then the
 * decision goes through the engine's append; done hears either. */
static int gate_offline(struct orch_engine *e,
                        const struct orch_gate_decision *d,
                        orch_run_done_fn done, void *arg, struct fo_err *err)
{
    struct gate_off *g = calloc(1, sizeof(*g));
    struct oe_read *rd = g ? calloc(1, sizeof(*rd)) : NULL;
    cJSON *o = rd ? orch_gate_decision_json(d) : NULL;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (!o || fo_json_canon(o, &b, err)) {
        fo_buf_release(&b);
        cJSON_Delete(o);
        free(rd);
        free(g);
        return oe_nomem(err);
    }
    g->e = e;
    g->held = o; /* the decision's strings live on in its body object */
    g->d = *d;
    g->d.approver = oe_str_of(o, "approver");
    g->d.note = oe_str_of(o, "note");
    g->d.reason = oe_str_of(o, "reason");
    g->d.edits = cJSON_GetObjectItemCaseSensitive(o, "edits");
    g->d.decision = orch_gate_kind(d->decision) + 5; /* approved... */
    g->body = fo_buf_detach(&b, &g->a.body_len);
    fo_buf_release(&b);
    g->a.actor = "human";
    g->a.kind = orch_gate_kind(d->decision);
    g->a.sole_kinds = orch_gate_decided_kinds;
    g->a.body = g->body;
    g->gate_seq = -1;
    g->done = done;
    g->arg = arg;
    rd->fn = gate_off_read;
    rd->done = gate_off_checked;
    rd->arg = g;
    int rc = oe_read_post(e, NULL, rd, err);
    if (rc) {
        oe_read_free(rd);
        oe_gate_off_free(g);
    }
    return rc;
}

/* A decision the store refused because another came first: the caller
 * hears gate_decided, naming the one that won (from the store's message). */
static int gate_lost(int64_t run, int64_t wave, const struct fo_err *why,
                     struct fo_err *err)
{
    return fo_err_set(err, FO_E_GATE_DECIDED,
                      "run %lld wave %lld: the gate was decided already (%s)",
                      (long long)run, (long long)wave,
                      why ? why->msg : "another decision came first");
}

static void gate_landed(void *arg, struct run *r, int rc, int64_t seq,
                        const struct fo_err *err)
{
    struct gate_call *c = arg;
    struct fo_err e2;
    cJSON *o = NULL;
    if (rc == FO_E_EXISTS) /* the store saw another decision first */
        rc = gate_lost(c->run, c->wave, err, &e2), err = &e2;
    if (!rc && r && r->g && r->g[c->wave].decided_seq != seq)
        rc = fo_err_set(&e2, FO_E_GATE_DECIDED,
                        "run %lld wave %lld: another decision (seq %lld) "
                        "came first",
                        (long long)c->run, (long long)c->wave,
                        (long long)r->g[c->wave].decided_seq),
        err = &e2;
    if (!rc) {
        o = cJSON_CreateObject();
        if (!o || !fo_json_add_int(o, "run_seq", c->run) ||
            !fo_json_add_int(o, "wave", c->wave) ||
            !cJSON_AddStringToObject(o, "decision", c->decision) ||
            !fo_json_add_int(o, "seq", seq)) {
            cJSON_Delete(o);
            o = NULL;
            rc = fo_err_set(&e2, FO_E_NOMEM, NULL);
            err = &e2;
        }
    }
    if (c->done)
        c->done(c->arg, rc, o, rc ? err : NULL);
    else
        cJSON_Delete(o);
    free(c);
}

static int check_text(const char *name, const char *v, int required,
                      struct fo_err *err)
{
    if (!v)
        return required ? fo_err_set(err, FO_E_INVALID, "%s: required", name)
                        : FO_OK;
    size_t n = strlen(v);
    if (n == 0 || n > ORCH_GATE_TEXT_MAX || !fo_utf8_valid(v, n))
        return fo_err_set(err, FO_E_INVALID, "%s: must be text of 1..%d bytes",
                          name, ORCH_GATE_TEXT_MAX);
    return FO_OK;
}

int orch_gate_decision_check(const struct orch_gate_decision *d,
                             struct fo_err *err)
{
    if (!d->decision || (strcmp(d->decision, "approve") != 0 &&
                         strcmp(d->decision, "edit") != 0 &&
                         strcmp(d->decision, "reject") != 0))
        return fo_err_set(err, FO_E_INVALID,
                          "decision: approve, edit or reject");
    int rc = check_text("approver", d->approver, 1, err);
    if (!rc)
        rc = check_text("note", d->note, 0, err);
    if (!rc)
        rc = check_text("reason", d->reason, 0, err);
    if (!rc && d->decision[0] != 'e' && d->edits)
        rc = fo_err_set(err, FO_E_INVALID,
                        "edits: only for an edit (gate_edit)");
    if (!rc && d->decision[0] == 'e' && !d->edits)
        rc = fo_err_set(err, FO_E_INVALID, "edits: required for an edit");
    return rc;
}

cJSON *orch_gate_decision_json(const struct orch_gate_decision *d)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "run", d->run) &&
             fo_json_add_int(o, "wave", d->wave) &&
             cJSON_AddStringToObject(o, "approver", d->approver) &&
             (!d->note || cJSON_AddStringToObject(o, "note", d->note)) &&
             (!d->reason || cJSON_AddStringToObject(o, "reason", d->reason)) &&
             (!d->edits ||
              cJSON_AddItemToObject(o, "edits", cJSON_Duplicate(d->edits, 1)));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

const char *orch_gate_kind(const char *decision)
{
    return decision[0] == 'a'   ? "gate_approved"
           : decision[0] == 'e' ? "gate_edited"
                                : "gate_rejected";
}

int orch_engine_gate(struct orch_engine *e, const struct orch_gate_decision *d,
                     orch_run_done_fn done, void *arg, struct fo_err *err)
{
    int rc = orch_gate_decision_check(d, err);
    if (rc)
        return rc;
    struct run *r = oe_run_find(e, d->run);
    if (!r || r->ended) /* not here: the ledger's way */
        return gate_offline(e, d, done, arg, err);
    if (!r->g || r->phase < PH_WAVES || d->wave < 0 ||
        d->wave >= (int64_t)r->p->n_waves || r->g[d->wave].st < G_PENDING)
        return fo_err_set(
            err, FO_E_NO_GATE, "run %lld: no gate at wave %lld (waiting: %s)",
            (long long)d->run, (long long)d->wave,
            r->g && r->wave < r->p->n_waves && r->g[r->wave].st == G_PENDING
                ? "another wave"
                : "none");
    struct gate *g = &r->g[d->wave];
    /* decided elsewhere since? the store says so when this one is written
     * (sole_kinds), and the run then takes the decision that won */
    if (!g || g->st != G_PENDING || g->writing)
        return fo_err_set(err, FO_E_GATE_DECIDED,
                          "run %lld wave %lld: the gate was decided already%s",
                          (long long)d->run, (long long)d->wave,
                          g && g->writing ? " (it expired)" : "");
    if (oe_now_ms() >= g->deadline_ms) {
        oe_step(r); /* it expires now */
        return fo_err_set(err, FO_E_GATE_DECIDED,
                          "run %lld wave %lld: the gate's deadline passed",
                          (long long)d->run, (long long)d->wave);
    }
    if (d->decision[0] == 'e' &&
        (rc = oe_edits_check(r, (size_t)d->wave, d->edits, err)))
        return rc;
    struct gate_call *c = calloc(1, sizeof(*c));
    cJSON *o = c ? orch_gate_decision_json(d) : NULL;
    if (!o) {
        free(c);
        return oe_nomem(err);
    }
    c->done = done;
    c->arg = arg;
    c->run = d->run;
    c->wave = d->wave;
    snprintf(c->decision, sizeof(c->decision), "%s",
             d->decision[0] == 'a'   ? "approved"
             : d->decision[0] == 'e' ? "edited"
                                     : "rejected");
    rc = oe_witness_cb(r, "human", orch_gate_kind(d->decision), g->req_seq, o,
                       -1, 0, 0, gate_landed, c, err);
    if (rc)
        free(c);
    return rc;
}

void oe_on_mcp_closed(void *arg)
{
    struct orch_engine *e = arg;
    e->mcp_closed = 1;
    if (e->stop_ev)
        event_active(e->stop_ev, EV_TIMEOUT, 0);
}

static void on_stop_check(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    if (!e->runs && e->stopped) {
        if (e->grace_ev)
            event_del(e->grace_ev);
        /* no run calls an MCP server any more: end their sessions first */
        if (!e->mcp_closed) {
            if (e->mcp_closing)
                return; /* on_mcp_closed comes back here */
            e->mcp_closing = 1;
            if (orch_mcpc_close(e->mcpc, oe_on_mcp_closed, e))
                return;
            e->mcp_closed = 1;
        }
        void (*fn)(void *) = e->stopped;
        e->stopped = NULL;
        fn(e->stopped_arg);
    }
}

/* The grace is over: what is still in flight is abandoned (redone on
 * resume), and each run writes its stop. */
static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    struct run *r = e->runs;
    while (r) {
        struct run *next = r->next;
        if (!r->ended) {
            oe_abandon(r);
            oe_step(r);
        }
        r = next;
    }
}

void orch_engine_stop(struct orch_engine *e, void (*stopped)(void *arg),
                      void *arg)
{
    e->stopping = 1;
    oe_resume_stop(e); /* a fold under way ends, its runs not resumed */
    int grace =
        e->cfg.stop_grace_ms ? e->cfg.stop_grace_ms : ORCH_ENGINE_STOP_GRACE_MS;
    if (!e->grace_ev)
        e->grace_ev = event_new(e->cfg.base, -1, 0, on_grace, e);
    if (e->grace_ev) {
        struct timeval tv = {grace / 1000, (grace % 1000) * 1000};
        event_add(e->grace_ev, grace < 0 ? &(struct timeval){0, 0} : &tv);
    }
    e->stopped = stopped;
    e->stopped_arg = arg;
    struct run *r = e->runs;
    while (r) {
        struct run *next = r->next; /* r may end and go */
        if (!r->ended && r->phase != PH_END && !r->failed_rc) {
            oe_set_halt(r, H_SHUTDOWN, "shutdown", "shutdown");
            oe_step(r);
        }
        r = next;
    }
    /* "at once when none", but never from inside this call */
    if (!e->stop_ev)
        e->stop_ev = event_new(e->cfg.base, -1, 0, on_stop_check, e);
    if (e->stop_ev)
        event_active(e->stop_ev, EV_TIMEOUT, 0);
}
