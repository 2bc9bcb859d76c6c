/* orch_flow: the state machine's moves: budgets and halts, waves, the
 * failure and the end of a run, its result object, and step(), which
 * decides the next moves from the state alone. */
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

static const char *halt_name(int h, const char *reason);
static int final_state(const struct run *r, size_t t);
static int copy_dup(struct run *r, size_t t, struct fo_err *err);
static int wave_step(struct run *r, struct fo_err *err);
static void waves_step(struct run *r);
static int error_write(struct run *r);
static void on_end_retry(evutil_socket_t fd, short what, void *arg);
static cJSON *tasks_json(const struct run *r, int *all_pass, int *unjudged);
static int plan_run_fields(const struct run *r, cJSON *res);
static cJSON *result_object(struct run *r, int64_t size, const uint8_t root[32],
                            struct fo_err *err);
static void run_end(struct run *r);

/* ---- budget and halts --------------------------------------------------- */

static const char *halt_name(int h, const char *reason)
{
    return h == H_CANCEL ? "cancelled" : h == H_SHUTDOWN ? "shutdown" : reason;
}

/* Abandons every effect in flight (cancel, shutdown): a task's job or
 * model call, a role's model call. */
void oe_abandon(struct run *r)
{
    if (r->eff) {
        oe_effect_cancel(r->eff);
        r->eff = NULL;
        r->busy = 0;
        r->reserved = 0;
    }
    for (size_t i = 0; r->t && i < r->p->n; i++)
        if (r->t[i].eff) {
            oe_effect_cancel(r->t[i].eff);
            r->t[i].eff = NULL;
            r->t[i].busy = 0;
        }
}

void oe_set_halt(struct run *r, int h, const char *reason, const char *before)
{
    if (r->ended)
        return;
    /* a cancel overrides a spent budget whose entry is not written yet:
     * what the budget lets finish (a long command) is abandoned too */
    if (r->halt && !(h == H_CANCEL && r->halt == H_BUDGET && r->budget_seq < 0))
        return;
    r->halt = h;
    r->dirty = 1;
    r->halt_reason = halt_name(h, reason);
    snprintf(r->stopped_before, sizeof(r->stopped_before), "%s",
             before ? before : "");
    if (h == H_CANCEL) /* a shutdown abandons its work after the grace */
        oe_abandon(r);
}

/* 1 when the run may make one more model call now (then reserved), else
 * the run halts (0). A stub task only checks for a cancel or a stop. */
int oe_spend(struct run *r, const char *before, int free_step)
{
    if (r->halt)
        return 0;
    if (free_step)
        return 1;
    if (r->calls + r->reserved >= r->max_calls)
        oe_set_halt(r, H_BUDGET, "max_model_calls", before);
    else if (r->max_seconds &&
             oe_elapsed_ms(r) >= (int64_t)r->max_seconds * 1000)
        oe_set_halt(r, H_BUDGET, "max_seconds", before);
    if (r->halt)
        return 0;
    r->reserved++;
    return 1;
}

/* ---- waves -------------------------------------------------------------- */

static int final_state(const struct run *r, size_t t)
{
    const struct task *s = &r->t[t];
    if (s->busy)
        return 0;
    if (s->st == TS_FINAL || s->st == TS_REFUSED)
        return 1;
    if (s->st == TS_SKIPPED)
        return s->dup_of >= 0 && final_state(r, (size_t)s->dup_of);
    return 0;
}

/* Copies what the original of a skipped repeat gave. */
static int copy_dup(struct run *r, size_t t, struct fo_err *err)
{
    struct task *s = &r->t[t], *d = &r->t[s->dup_of];
    s->copied = 1;
    s->pass = d->pass;
    s->unjudged = d->unjudged;
    if (d->output) {
        s->output = malloc(d->output_len + 1);
        if (!s->output)
            return oe_nomem(err);
        memcpy(s->output, d->output, d->output_len + 1);
        s->output_len = d->output_len;
    }
    return FO_OK;
}

/* Moves the tasks of the current wave on; 1 when the wave is complete. */
static int wave_step(struct run *r, struct fo_err *err)
{
    const struct orch_plan *p = r->p;
    size_t lo = p->wave_start[r->wave], hi = p->wave_start[r->wave + 1];
    size_t lim = r->e->o->max_parallel > 0 ? (size_t)r->e->o->max_parallel : 1;
    size_t active = 0;
    for (size_t i = lo; i < hi; i++)
        active += r->t[p->order[i]].slot;
    int complete = 1;
    for (size_t i = lo; i < hi && !r->halt && !r->ended; i++) {
        size_t t = p->order[i];
        struct task *s = &r->t[t];
        if (!final_state(r, t))
            complete = 0;
        if (s->busy)
            continue;
        int rc = FO_OK;
        switch (s->st) {
        case TS_PENDING:
            if (active >= lim)
                break;
            rc = oe_dispatch_task(r, t, err);
            active += s->slot;
            break;
        case TS_RUN:
            oe_task_exec(r, t);
            break;
        case TS_RESULT:
            rc = oe_judge(r, t, err);
            break;
        case TS_VERDICT:
            rc = oe_escalate(r, t, err);
            break;
        case TS_VERIFY: /* the lane's verifier (orch_hooks.c) */
            rc = oe_hook_start(r, t, 1, err);
            break;
        case TS_ESC: /* escalated, or retried on its tier */
            if (active >= lim)
                break;
            int free_step = s->ex && s->ex->kind == ORCH_EXEC_STUB;
            if (oe_spend(r, "escalated task", free_step)) {
                rc = oe_task_begin(r, t, s->ex, s->esc_seq, err);
                if (rc && !free_step)
                    r->reserved--;
            }
            active += s->slot;
            break;
        case TS_SKIPPED:
            if (!s->copied && final_state(r, t))
                rc = copy_dup(r, t, err);
            break;
        default:
            break;
        }
        if (rc)
            return -rc;
    }
    return complete && !r->halt;
}

static void waves_step(struct run *r)
{
    struct fo_err err;
    while (r->phase == PH_WAVES && !r->halt && !r->ended) {
        if (r->wave >= r->p->n_waves) {
            r->phase = !strcmp(r->via, "plan") ? PH_END : PH_SYNTH;
            r->dirty = 1;
            return;
        }
        char what[32];
        snprintf(what, sizeof(what), "wave %zu", r->wave);
        if (!oe_spend(r, what, 1))
            return;
        int g = oe_gate_step(r, &err);
        if (g < 0) {
            oe_fail(r, -g, &err);
            return;
        }
        if (!g)
            return;
        int w = wave_step(r, &err);
        if (w < 0) {
            oe_fail(r, -w, &err);
            return;
        }
        if (!w)
            return;
        /* a signed checkpoint of the wave first, when the run asked */
        int c = r->cp_each_wave ? oe_wave_checkpoint(r, &err) : 1;
        if (c < 0)
            oe_fail(r, -c, &err);
        if (c <= 0)
            return;
        /* every task of the wave is final: copy the repeats, next wave */
        const struct orch_plan *p = r->p;
        for (size_t i = p->wave_start[r->wave]; i < p->wave_start[r->wave + 1];
             i++) {
            size_t t = p->order[i];
            if (r->t[t].st == TS_SKIPPED && !r->t[t].copied &&
                copy_dup(r, t, &err)) {
                oe_fail(r, FO_E_NOMEM, &err);
                return;
            }
        }
        r->wave++;
    }
}

/* ---- failure, the end, the result object -------------------------------- */

void oe_fail(struct run *r, int rc, const struct fo_err *err)
{
    if (r->failed_rc || r->ended)
        return;
    r->failed_rc = rc;
    if (err)
        r->err = *err;
    r->err.code = rc;
    oe_abandon(r);
    if (rc == FO_E_RUN_ELSEWHERE)
        r->lease_lost = 1; /* another daemon runs it now: nothing written */
    /* a leased run whose write failed on the database (a lost
     * connection): no error on record, it stops here and is resumed from
     * its entries by whichever daemon claims its lease */
    int resume_later = r->leased && (rc == FO_E_IO || rc == FO_E_STORE_DOWN);
    if (resume_later)
        oe_elog(r->e, "run %lld: stopped by a storage error, to be resumed: %s",
                (long long)r->id, r->err.msg);
    if (r->id < 0 || r->e->stopping || r->lease_lost || resume_later) {
        r->phase = PH_END;
        return;
    }
    if (error_write(r) == FO_OK)
        return; /* its landing moves the run to its end */
    r->phase = PH_END;
}

/* Witnesses the run's failure (r->err) as its `error` entry. */
static int error_write(struct run *r)
{
    struct fo_err ignore;
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddStringToObject(o, "error", r->err.msg) &&
        cJSON_AddStringToObject(o, "code", fo_code_name(r->failed_rc)))
        return oe_witness(r, "loop", "error", r->id, o, -1, 0, 0, &ignore);
    cJSON_Delete(o);
    return FO_E_NOMEM;
}

static void on_end_retry(evutil_socket_t fd, short what, void *arg)
{
    struct run *r = arg;
    (void)fd, (void)what;
    r->busy = 0;
    if (r->e->stopping || error_write(r) != FO_OK)
        r->phase = PH_END; /* stopping: resumed on the next start */
    oe_step(r);
}

/* A run's error entry could not be written (the store is down, the disk
 * full): the run keeps its place in memory, says so, and tries again each
 * second until the entry is on record (or the daemon stops), so it never
 * shows as running on a ledger it has left. 1 when a retry was armed. */
int oe_end_retry(struct run *r, int rc)
{
    if (!(rc == FO_E_IO || rc == FO_E_STORE_DOWN) || r->e->stopping ||
        r->leased)
        return 0;
    if (!r->end_retry &&
        !(r->end_retry = evtimer_new(r->e->cfg.base, on_end_retry, r)))
        return 0;
    struct timeval tv = {END_RETRY_MS / 1000, (END_RETRY_MS % 1000) * 1000};
    if (evtimer_add(r->end_retry, &tv) != 0)
        return 0;
    if (!r->end_retries++)
        oe_elog(r->e,
                "run %lld: failed, and its error entry cannot be written yet "
                "(%s): trying again each second",
                (long long)r->id, r->err.msg);
    r->busy = 1;
    return 1;
}

static cJSON *tasks_json(const struct run *r, int *all_pass, int *unjudged)
{
    cJSON *a = cJSON_CreateArray();
    *all_pass = 1;
    *unjudged = 0;
    for (size_t i = 0; a && r->p && r->t && i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        const char *state = s->st == TS_REFUSED   ? "refused"
                            : s->st == TS_SKIPPED ? "skipped"
                            : s->st == TS_PENDING ? "not_run"
                            : s->pass             ? "passed"
                            : s->unjudged         ? "unjudged"
                                                  : "failed";
        *all_pass &= s->pass;
        *unjudged += s->unjudged;
        cJSON *e = cJSON_CreateObject();
        int done = s->st != TS_PENDING && s->st != TS_REFUSED &&
                   s->st != TS_SKIPPED && s->result_seq >= 0;
        if (!e || !cJSON_AddStringToObject(e, "id", k->id) ||
            !cJSON_AddStringToObject(e, "agent", k->agent) ||
            !cJSON_AddStringToObject(e, "state", state) ||
            !cJSON_AddBoolToObject(e, "pass", s->pass) ||
            (done && (!cJSON_AddStringToObject(e, "model", s->model) ||
                      !fo_json_add_int(e, "result_seq", s->result_seq) ||
                      (s->verdict_seq >= 0 &&
                       !fo_json_add_int(e, "verdict_seq", s->verdict_seq))))) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

/* plan_run's own fields, as before the engine: {"waves", "results":
 * [{"id", "agent", "ok", "model", "task_seq", "seq", "output"} or a
 * refused one], "refused": [ids], "ok": every task ran ok}. */
static int plan_run_fields(const struct run *r, cJSON *res)
{
    cJSON *pj = orch_plan_json(r->p);
    cJSON *waves =
        pj ? cJSON_DetachItemFromObjectCaseSensitive(pj, "waves") : NULL;
    cJSON_Delete(pj);
    if (!waves)
        return FO_E_NOMEM;
    cJSON_AddItemToObject(res, "waves", waves);
    cJSON *results = cJSON_AddArrayToObject(res, "results");
    cJSON *refused = cJSON_AddArrayToObject(res, "refused");
    if (!results || !refused)
        return FO_E_NOMEM;
    int all_ok = 1;
    for (size_t i = 0; i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        int ran = s->st != TS_REFUSED && s->st != TS_SKIPPED &&
                  s->st != TS_PENDING && s->result_seq >= 0;
        const struct task *src =
            s->st == TS_SKIPPED && s->dup_of >= 0 ? &r->t[s->dup_of] : s;
        int ok = src->ran_ok && s->st != TS_REFUSED && s->st != TS_PENDING;
        all_ok &= ok;
        size_t n = s->output
                       ? orch_utf8_prefix(s->output, s->output_len, 64u * 1024u)
                       : 0;
        cJSON *o = cJSON_CreateObject();
        char *cut = malloc(n + 1);
        if (cut) {
            if (n)
                memcpy(cut, s->output, n);
            cut[n] = '\0';
        }
        int good =
            o && cut && cJSON_AddStringToObject(o, "id", k->id) &&
            cJSON_AddStringToObject(o, "agent", k->agent) &&
            cJSON_AddBoolToObject(o, "ok", ok) &&
            (s->st == TS_REFUSED
                 ? cJSON_AddTrueToObject(o, "refused") != NULL
                 : cJSON_AddStringToObject(o, "model", src->model) &&
                       (!ran || fo_json_add_int(o, "task_seq", s->task_seq))) &&
            fo_json_add_int(o, "seq", s->result_seq) &&
            cJSON_AddStringToObject(o, "output", cut) &&
            (n == (s->output ? s->output_len : 0) ||
             cJSON_AddTrueToObject(o, "output_truncated"));
        free(cut);
        if (o)
            cJSON_AddItemToArray(results, o);
        if (!good)
            return FO_E_NOMEM;
        if (s->st == TS_REFUSED) {
            cJSON *x = cJSON_CreateString(k->id);
            if (!x)
                return FO_E_NOMEM;
            cJSON_AddItemToArray(refused, x);
        }
    }
    cJSON_DeleteItemFromObjectCaseSensitive(res, "ok");
    return cJSON_AddBoolToObject(res, "ok", all_ok) ? FO_OK : FO_E_NOMEM;
}

/* The run's result; size and root: the tree head it names. */
static cJSON *result_object(struct run *r, int64_t size, const uint8_t root[32],
                            struct fo_err *err)
{
    char hex[65];
    fo_hex(root, 32, hex);
    cJSON *res = cJSON_CreateObject();
    if (!res) {
        oe_nomem(err);
        return NULL;
    }
    int ok = 1;
    if (!strcmp(r->via, "plan")) {
        cJSON *pj = orch_plan_json(r->p);
        ok = pj && cJSON_AddItemToObject(res, "plan", pj) &&
             cJSON_AddStringToObject(res, "lane", r->lane) &&
             cJSON_AddStringToObject(res, "lane_by", r->lane_by) &&
             cJSON_AddStringToObject(res, "model", r->plan_model) &&
             fo_json_add_int(res, "attempts", r->coord.n + 1) &&
             fo_json_add_int(res, "request_seq", r->id) &&
             fo_json_add_int(res, "plan_seq", r->plan_seq);
        if (!ok) {
            cJSON_Delete(res);
            oe_nomem(err);
            return NULL;
        }
        return res;
    }
    int all_pass = 0, unjudged = 0;
    cJSON *tasks = tasks_json(r, &all_pass, &unjudged);
    const char *answer =
        r->budget_spent ? oe_stop_answer(r) : (r->answer ? r->answer : "");
    ok = tasks && cJSON_AddStringToObject(res, "answer", answer) &&
         cJSON_AddStringToObject(res, "checkpoint", hex) &&
         fo_json_add_int(res, "request_seq", r->id) &&
         fo_json_add_int(res, "answer_seq", r->answer_seq) &&
         (r->plan_seq < 0
              ? cJSON_AddNullToObject(res, "plan_seq") != NULL
              : fo_json_add_int(res, "plan_seq", r->plan_seq) != NULL) &&
         cJSON_AddStringToObject(res, "lane", r->lane ? r->lane : "") &&
         cJSON_AddBoolToObject(res, "ok",
                               !r->budget_spent && r->p && all_pass) &&
         fo_json_add_int(res, "unjudged", unjudged) &&
         cJSON_AddBoolToObject(res, "models",
                               r->e->o->models != NULL || r->e->o->argv) &&
         cJSON_AddBoolToObject(res, "budget_spent", r->budget_spent) &&
         (!r->budget_spent ||
          cJSON_AddStringToObject(res, "budget_reason", r->halt_reason)) &&
         fo_json_add_int(res, "model_calls", r->calls) &&
         fo_json_add_int(res, "escalations", r->escalations) &&
         (r->budget_spent || !r->coverage
              ? cJSON_AddNullToObject(res, "coverage") != NULL
              : cJSON_AddItemToObject(res, "coverage",
                                      cJSON_Duplicate(r->coverage, 1)));
    if (ok) {
        cJSON_AddItemToObject(res, "tasks", tasks);
        tasks = NULL;
    }
    if (ok && !strcmp(r->via, "plan_run") && r->p)
        ok = plan_run_fields(r, res) == FO_OK;
    if (ok) /* the intent judge, retries, checkpoints; the receipt */
        ok = oe_judgement_json(r, res) == FO_OK &&
             cJSON_AddItemToObject(res, "receipt", oe_receipt(r, size, hex));
    cJSON_Delete(tasks);
    if (!ok) {
        cJSON_Delete(res);
        oe_nomem(err);
        return NULL;
    }
    return res;
}

/* The run is over (or stopped): its caller hears, and it leaves memory. */
static void run_end(struct run *r)
{
    struct orch_engine *e = r->e;
    r->ended = 1;
    if (r->leased && !r->lease_lost) {
        /* over: the lease goes; stopped (a shutdown, a lost database):
         * it expires now, so a live daemon resumes the run at once */
        struct fo_err lerr;
        /* a round trip: on the lease thread, never the loop (in memory
         * only when none can be queued) */
        if ((!e->lw || orch_lease_worker_release(e->lw, e->instance, r->id,
                                                 r->end_on_record) != FO_OK) &&
            ledger_lease_release(e->cfg.ledger, r->id, e->instance,
                                 r->end_on_record, &lerr) != FO_OK)
            oe_elog(e, "run %lld: its lease stays until it expires: %s",
                    (long long)r->id, lerr.msg);
    }
    if (r->id >= 0 && r->resumable)
        oe_elog(e, "run %lld: %s (%d model call%s, %lld ms)", (long long)r->id,
                r->failed_rc                ? "failed"
                : r->halt == H_SHUTDOWN     ? "stopped, to resume on the next "
                                              "start"
                : r->halt && r->halt_reason ? r->halt_reason
                                            : "done",
                r->calls, r->calls == 1 ? "" : "s",
                (long long)oe_elapsed_ms(r));
    struct fo_err err = r->err;
    int rc = r->failed_rc;
    if (!rc && r->halt == H_SHUTDOWN)
        rc = fo_err_set(&err, FO_E_DRAINING,
                        "the daemon is stopping: run %lld will resume on the "
                        "next start",
                        (long long)r->id);
    if (!rc && r->done) {
        /* the tree head its result names: read on a worker, the run stays
         * (ended) until oe_run_result */
        rc = oe_head_read(r, &err);
        if (!rc)
            return;
    }
    oe_run_result(r, rc, 0, NULL, &err);
}

void oe_run_result(struct run *r, int rc, int64_t size, const uint8_t *root,
                   const struct fo_err *why)
{
    struct orch_engine *e = r->e;
    orch_run_done_fn done = r->done;
    void *arg = r->arg;
    struct fo_err err = *why;
    cJSON *out = NULL;
    if (!rc && done) {
        out = result_object(r, size, root, &err);
        if (!out)
            rc = err.code ? err.code : FO_E_NOMEM;
    }
    oe_run_unlink(r);
    oe_run_free(r);
    if (done)
        done(arg, rc, out, &err);
    else
        cJSON_Delete(out);
    /* the last run gone at a stop: the stop's check ends the MCP servers'
     * sessions, then says the engine stopped */
    if (e->stopping && !e->runs && e->stopped && e->stop_ev) {
        event_active(e->stop_ev, EV_TIMEOUT, 0);
    } else if (e->stopping && !e->runs && e->stopped) { /* no event: now */
        if (e->grace_ev)
            event_del(e->grace_ev);
        void (*fn)(void *) = e->stopped;
        e->stopped = NULL;
        fn(e->stopped_arg);
    }
}

/* ---- step: what the state asks for next --------------------------------- */

void oe_step(struct run *r)
{
    if (r->ended)
        return;
    if (r->stepping) {
        r->dirty = 1;
        return;
    }
    r->stepping = 1;
    do {
        r->dirty = 0;
        if (r->failed_rc || r->phase == PH_END) {
            /* wait for what is in flight, then end */
            int busy = r->writes > 0 || r->busy || r->eff;
            for (size_t i = 0; !busy && r->t && i < r->p->n; i++)
                busy = r->t[i].busy;
            if (!busy) {
                r->stepping = 0;
                run_end(r);
                return;
            }
            break;
        }
        if (r->halt && (r->phase == PH_JUDGE || r->phase == PH_PROFILE)) {
            oe_abandon(r); /* the answer is on record: the judge goes */
            r->phase = PH_END;
            continue;
        }
        if (r->halt) {
            oe_halt_step(r);
            if (r->ended) {
                r->stepping = 0;
                run_end(r);
                return;
            }
            continue;
        }
        if (r->id < 0)
            break; /* the request entry is not committed yet */
        if (r->phase == PH_WAVES) {
            waves_step(r);
            continue;
        }
        if (r->busy)
            break;
        if (r->phase == PH_CONTEXT)
            oe_context_step(r);
        else if (r->phase == PH_ROUTE)
            oe_route_step(r);
        else if (r->phase == PH_PLAN)
            oe_plan_step(r);
        else if (r->phase == PH_SYNTH)
            oe_synth_step(r);
        else if (r->phase == PH_PROFILE)
            oe_profile_step(r);
        else if (r->phase == PH_JUDGE)
            oe_judge_step(r);
    } while (r->dirty);
    r->stepping = 0;
}
