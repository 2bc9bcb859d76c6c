/* orch_engine: the run engine (daemon/orch_engine.h). A run is a fold over
 * its witnessed entries (apply) and the engine's next moves are decided from
 * that state alone (step); model calls, tasks and commits are events on one
 * loop. The control loop's semantics are the reference's: request → route
 * frame → plan (coordinator) → tasks wave by wave (a sliding window of
 * max_parallel) → verdicts → escalation up the tiers → synthesis → intent
 * coverage → answer, every step witnessed, under a run budget. Without
 * model providers each role is a deterministic stub. */
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

#include "daemon/orch_views.h"

static int limits_add(cJSON *b, const struct orch_ctx_limits *l);
static int is_run_via(const char *via);
static int via_valid(const char *via);
static int start_run(struct orch_engine *e, const struct orch_run_req *req,
                     int resumable, orch_run_started_fn started,
                     orch_run_done_fn done, void *arg, struct fo_err *err);
const char *const oe_role_name[] = {"coordinator", "classifier", "validator",
                                    "synthesizer", "summarizer", "judge"};

/* ---- approval gates ----------------------------------------------------- */

int64_t oe_now_ms(void)
{
    return oe_now_us() / 1000;
}

/* The https hooks' TLS context: one for the engine, the system store's
 * CAs, made here (never on a run's path) when a lane has an https hook. */
static int hook_tls_create(struct orch_engine *e, struct fo_err *err)
{
    const struct orch_roster *ro = orch_roster(e->o);
    int any = 0;
    for (size_t i = 0; ro && i < ro->n; i++)
        any |= ro->lanes[i].verifier.tls | ro->lanes[i].reviser.tls;
    if (!any)
        return FO_OK;
    int rc = httpc_tls_create(NULL, &e->hook_tls, err);
    if (rc && rc != FO_E_NOMEM) {
        struct fo_err why = *err;
        fo_err_set(err, rc, "https hooks: %s", why.msg);
    }
    return rc;
}

int orch_engine_create(const struct orch *o,
                       const struct orch_engine_config *cfg,
                       struct orch_engine **out, struct fo_err *err)
{
    if (!o || !cfg || !cfg->base || !cfg->ledger)
        return fo_err_set(err, FO_E_INVALID, "engine: no loop or ledger");
    if (cfg->max_runs > ORCH_ENGINE_RUNS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_runs: must be 1..%d",
                          ORCH_ENGINE_RUNS_MAX);
    struct orch_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return oe_nomem(err);
    e->o = o;
    e->cfg = *cfg;
    if (!e->cfg.max_runs)
        e->cfg.max_runs = ORCH_ENGINE_RUNS_DEFAULT;
    if (pthread_mutex_init(&e->rl_mu, NULL) != 0) {
        free(e);
        return oe_nomem(err);
    }
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        pthread_mutex_destroy(&e->rl_mu);
        free(e);
        return fo_err_set(err, FO_E_INTERNAL, "engine: no mutex");
    }
    e->wake = event_new(cfg->base, -1, EV_PERSIST, oe_on_wake, e);
    e->gate_ev = evtimer_new(cfg->base, oe_on_gate_tick, e);
    e->leases = cfg->lease_ms > 0 && ledger_leases(cfg->ledger);
    int rc = FO_OK;
    if (e->leases)
        rc = orch_lease_worker_create(cfg->base, ledger_dir(cfg->ledger),
                                      oe_on_lease_done, e, &e->lw, err);
    if (e->leases && !rc)
        orch_lease_worker_log(e->lw, cfg->log, cfg->log_hook);
    if (e->leases && !rc) {
        int every = cfg->lease_ms / 3 > 50 ? cfg->lease_ms / 3 : 50;
        struct timeval tv = {every / 1000, (every % 1000) * 1000};
        e->lease_ev = event_new(cfg->base, -1, EV_PERSIST, oe_on_lease_tick, e);
        if (e->lease_ev && event_add(e->lease_ev, &tv) != 0) {
            event_free(e->lease_ev);
            e->lease_ev = NULL;
        }
    }
    int64_t count = 0;
    struct fo_err ignore;
    if (ledger_count(cfg->ledger, &count, &ignore) != FO_OK)
        count = 0; /* decisions already on record come in by replay */
    e->gate_cursor = count;
    e->gate_rewind = -1;
    if (!rc && (!e->wake || !e->gate_ev || (e->leases && !e->lease_ev)))
        rc = oe_nomem(err);
    if (!rc && orch_mcp_servers(o))
        rc = orch_mcpc_create(orch_mcp_servers(o), cfg->base, &e->mcpc, err);
    if (!rc)
        rc = hook_tls_create(e, err);
    if (rc) {
        orch_mcpc_free(e->mcpc);
        if (e->wake)
            event_free(e->wake);
        if (e->gate_ev)
            event_free(e->gate_ev);
        if (e->lease_ev)
            event_free(e->lease_ev);
        orch_lease_worker_free(e->lw);
        pthread_mutex_destroy(&e->mu);
        pthread_mutex_destroy(&e->rl_mu);
        free(e);
        return rc;
    }
    *out = e;
    return FO_OK;
}

void orch_engine_free(struct orch_engine *e)
{
    if (!e)
        return;
    orch_lease_worker_free(e->lw); /* a round trip under way ends first */
    e->lw = NULL;
    while (e->runs) {
        struct run *r = e->runs;
        oe_abandon(r);
        oe_run_unlink(r);
        oe_run_free(r);
    }
    orch_mcpc_free(e->mcpc);
    httpc_tls_free(e->hook_tls);
    orch_work_free(e->work); /* waits for a tool still running */
    oe_resume_free(e);       /* after the workers: a fold ended first */
    ledger_close(e->rl);     /* the workers' read handle */
    pthread_mutex_destroy(&e->rl_mu);
    if (e->disk_ev)
        event_free(e->disk_ev);
    /* writes still queued belong to runs that are gone */
    pthread_mutex_lock(&e->mu);
    struct wr *w = e->doneq;
    e->doneq = NULL;
    pthread_mutex_unlock(&e->mu);
    while (w) {
        struct wr *n = w->next;
        if (w->landed) {
            struct fo_err err;
            fo_err_set(&err, FO_E_DRAINING, "the engine stopped");
            w->landed(w->landed_arg, NULL, FO_E_DRAINING, -1, &err);
        }
        oe_wr_free(w);
        w = n;
    }
    struct gate_off *off = e->offq;
    e->offq = NULL;
    while (off) {
        struct gate_off *n = off->next;
        struct fo_err err;
        fo_err_set(&err, FO_E_DRAINING, "the engine stopped");
        if (off->done)
            off->done(off->arg, FO_E_DRAINING, NULL, &err);
        oe_gate_off_free(off);
        off = n;
    }
    event_free(e->gate_ev);
    if (e->lease_ev)
        event_free(e->lease_ev);
    if (e->stop_ev)
        event_free(e->stop_ev);
    if (e->grace_ev)
        event_free(e->grace_ev);
    event_free(e->wake);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

size_t orch_engine_active(const struct orch_engine *e)
{
    return e ? e->n_runs : 0;
}

int orch_engine_metrics(const struct orch_engine *e, struct fo_buf *b)
{
    size_t waiting = 0;
    for (const struct run *r = e->runs; r; r = r->next)
        for (size_t w = 0; r->g && r->p && w < r->p->n_waves; w++)
            waiting += r->g[w].st == G_PENDING;
    int rc = fo_buf_printf(
        b,
        "# HELP forum_runs_in_flight Runs in memory: running or waiting.\n"
        "# TYPE forum_runs_in_flight gauge\n"
        "forum_runs_in_flight %zu\n"
        "# HELP forum_runs_started_total Runs started or resumed here.\n"
        "# TYPE forum_runs_started_total counter\n"
        "forum_runs_started_total %llu\n"
        "# HELP forum_gates_waiting Approval gates waiting for a decision.\n"
        "# TYPE forum_gates_waiting gauge\n"
        "forum_gates_waiting %zu\n"
        "# HELP forum_model_calls_total Model calls (providers and --cmd; "
        "not the stub) by outcome.\n"
        "# TYPE forum_model_calls_total counter\n"
        "forum_model_calls_total{outcome=\"ok\"} %llu\n"
        "forum_model_calls_total{outcome=\"error\"} %llu\n"
        "# HELP forum_model_call_seconds Model call latency, retries "
        "included.\n"
        "# TYPE forum_model_call_seconds histogram\n",
        e->n_runs, (unsigned long long)e->m_runs_started, waiting,
        (unsigned long long)e->m_calls_ok,
        (unsigned long long)e->m_calls_failed);
    unsigned long long cum = 0;
    for (size_t i = 0; i < 10; i++) {
        cum += e->m_lat[i];
        if (i < 9)
            rc |= fo_buf_printf(b,
                                "forum_model_call_seconds_bucket{le=\"%g\"} "
                                "%llu\n",
                                oe_lat_bounds[i], cum);
    }
    rc |= fo_buf_printf(b,
                        "forum_model_call_seconds_bucket{le=\"+Inf\"} %llu\n"
                        "forum_model_call_seconds_sum %.6f\n"
                        "forum_model_call_seconds_count %llu\n"
                        "# HELP forum_model_tokens_total Tokens of model "
                        "calls as the providers reported them (their usage "
                        "objects), by direction.\n"
                        "# TYPE forum_model_tokens_total counter\n"
                        "forum_model_tokens_total{direction=\"input\"} %llu\n"
                        "forum_model_tokens_total{direction=\"output\"} "
                        "%llu\n",
                        cum, e->m_lat_sum, cum,
                        (unsigned long long)e->m_tokens_in,
                        (unsigned long long)e->m_tokens_out);
    return rc ? FO_E_NOMEM : FO_OK;
}

/* Makes sure this engine holds its process's run lock in the ledger's dir
 * (DIR/runs/<instance>.lock): a run's request names the instance, and
 * orch_run_get reads "running" while the lock is held. */
/* The limits a turn ran with, all of them, so a resumed run uses the same
 * whatever forum.json says by then. */
static int limits_add(cJSON *b, const struct orch_ctx_limits *l)
{
    cJSON *c = cJSON_AddObjectToObject(b, "context");
    return c && fo_json_add_int(c, "max_total_tokens", l->total) &&
           fo_json_add_int(c, "max_request_tokens", l->request) &&
           fo_json_add_int(c, "max_history_tokens", l->history) &&
           fo_json_add_int(c, "max_facts_tokens", l->facts) &&
           fo_json_add_int(c, "max_tool_results_tokens", l->tools) &&
           (!l->task || fo_json_add_int(c, "max_task_tokens", l->task)) &&
           (!l->upstream ||
            fo_json_add_int(c, "max_upstream_tokens", l->upstream)) &&
           (!l->summary || cJSON_AddStringToObject(c, "compaction", "summary"));
}

int oe_hold_instance(struct orch_engine *e, struct fo_err *err)
{
    if (e->have_instance)
        return FO_OK;
    int rc = orch_runs_hold(e->o, ledger_dir(e->cfg.ledger), e->instance, err);
    if (!rc)
        e->have_instance = 1;
    return rc;
}

struct run *oe_run_new(struct orch_engine *e, const char *via)
{
    struct run *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    e->m_runs_started++;
    r->e = e;
    r->id = -1;
    r->route_seq = r->plan_seq = r->budget_seq = r->answer_seq = -1;
    r->lane_seq = -1;
    r->session_start = r->turn_seq = -1;
    r->last_seq = r->judge_seq = -1;
    r->ws_fd = -1;
    r->resumable = 1;
    snprintf(r->via, sizeof(r->via), "%s", via);
    r->phase = PH_ROUTE;
    r->t0_us = oe_now_us();
    r->next = e->runs;
    if (e->runs)
        e->runs->prev = r;
    e->runs = r;
    e->n_runs++;
    return r;
}

/* Runs that go past a plan (a `plan` request only plans). */
static int is_run_via(const char *via)
{
    return strcmp(via, "plan") != 0;
}

static int via_valid(const char *via)
{
    return via && (!strcmp(via, "submit") || !strcmp(via, "run_start") ||
                   !strcmp(via, "plan_run") || !strcmp(via, "plan"));
}

/* An engine hosted in a command's process marks its runs as not
 * resumable: the process that runs them goes away with them. */
static int start_run(struct orch_engine *e, const struct orch_run_req *req,
                     int resumable, orch_run_started_fn started,
                     orch_run_done_fn done, void *arg, struct fo_err *err)
{
    if (!via_valid(req->via))
        return fo_err_set(err, FO_E_INVALID, "via: not a kind of run");
    int is_plan_run = !strcmp(req->via, "plan_run");
    const char *text = req->request;
    if (is_plan_run && (!text || !*text))
        text = "(a plan given to plan_run)";
    int rc = orch_submit_check(text, &req->opts, err);
    if (rc)
        return rc;
    struct orch_plan *check = NULL;
    if (is_plan_run) { /* a bad plan is refused before anything is written */
        if (!req->plan)
            return fo_err_set(err, FO_E_INVALID, "plan: required");
        rc = orch_plan_compile(req->plan, orch_roster(e->o), &check, err);
        orch_plan_free(check);
        if (rc)
            return rc;
    }
    rc = orch_gate_policy_check(req->opts.gates, orch_roster(e->o), oe_now_ms(),
                                err);
    if (rc)
        return rc;
    struct orch_ctx_limits lim;
    orch_ctx_limits_default(&lim);
    if (req->opts.session && req->opts.use_capsule_context)
        return fo_err_set(err, FO_E_INVALID,
                          "use_capsule_context: not with a session (its "
                          "turns have their own context)");
    if (req->opts.session && !orch_session_name_ok(req->opts.session))
        return fo_err_set(err, FO_E_INVALID, "session: 1..%d of [A-Za-z0-9._-]",
                          ORCH_SESSION_NAME_MAX);
    if ((rc = orch_ctx_limits_parse(orch_context_defaults(e->o), &lim, err)) ||
        (rc = orch_ctx_limits_parse(req->opts.context, &lim, err)))
        return rc;
    cJSON *gates = NULL;
    if (is_run_via(req->via) &&
        (rc =
             orch_gate_policy_merge(e->o->gates, req->opts.gates, &gates, err)))
        return rc;
    if (e->stopping) {
        cJSON_Delete(gates);
        return fo_err_set(err, FO_E_DRAINING, "the daemon is stopping");
    }
    if (e->n_runs >= e->cfg.max_runs) {
        cJSON_Delete(gates);
        return fo_err_set(err, FO_E_BUSY, "%zu runs are in progress (max_runs)",
                          e->n_runs);
    }
    int is_run = strcmp(req->via, "plan") != 0;
    if (is_run) {
        rc = oe_hold_instance(e, err);
        if (rc) {
            cJSON_Delete(gates);
            return rc;
        }
    }
    struct run *r = oe_run_new(e, req->via);
    if (!r) {
        cJSON_Delete(gates);
        return oe_nomem(err);
    }
    r->gates = gates;
    r->lim = lim;
    int with_session = req->opts.session && is_run_via(req->via);
    r->resumable = resumable;
    r->request = orch_strdup(text);
    r->given = is_plan_run ? cJSON_Duplicate(req->plan, 1) : NULL;
    int calls = req->opts.max_model_calls;
    r->max_calls = calls ? calls : ORCH_SUBMIT_CALLS_DEFAULT;
    r->max_seconds = req->opts.max_seconds;
    r->started = started;
    r->done = done;
    r->arg = arg;
    r->on_event = req->on_event;
    r->event_arg = req->event_arg;
    if (is_plan_run)
        r->phase = PH_PLAN;
    if (with_session) {
        r->session = orch_strdup(req->opts.session);
        r->after_context = r->phase;
        r->phase = PH_CONTEXT;
    }
    cJSON *b = cJSON_CreateObject();
    int ok =
        r->request && (!is_plan_run || r->given) && b &&
        cJSON_AddStringToObject(b, "request", r->request) &&
        cJSON_AddStringToObject(b, "via", req->via) &&
        (!is_run || cJSON_AddStringToObject(b, "instance", e->instance)) &&
        (!is_run || resumable || cJSON_AddFalseToObject(b, "resumable")) &&
        (!calls || fo_json_add_int(b, "max_model_calls", calls)) &&
        (!r->max_seconds ||
         fo_json_add_int(b, "max_seconds", r->max_seconds)) &&
        (!gates ||
         cJSON_AddItemToObject(b, "gates", cJSON_Duplicate(gates, 1))) &&
        (!with_session ||
         (r->session && cJSON_AddStringToObject(b, "session", r->session))) &&
        (!with_session || limits_add(b, &lim)) &&
        /* a task's budgets, for a resumed run too (a session's are in its
         * context above) */
        (with_session || !lim.task ||
         fo_json_add_int(b, "max_task_tokens", lim.task)) &&
        (with_session || !lim.upstream ||
         fo_json_add_int(b, "max_upstream_tokens", lim.upstream)) &&
        (!req->opts.intent_judge || cJSON_AddTrueToObject(b, "intent_judge")) &&
        (!req->opts.checkpoint_each_wave ||
         cJSON_AddTrueToObject(b, "checkpoint_each_wave")) &&
        (!req->opts.claim_lane || cJSON_AddTrueToObject(b, "claim_lane")) &&
        (!req->opts.delivery_profile ||
         cJSON_AddStringToObject(b, "delivery_profile",
                                 req->opts.delivery_profile));
    if (!ok) {
        cJSON_Delete(b);
        oe_run_unlink(r);
        oe_run_free(r);
        return oe_nomem(err);
    }
    /* the ledger's capsule as the run's context: read on a worker, then
     * the request is witnessed with it (orch_judge.c) */
    if (req->opts.use_capsule_context && is_run_via(req->via))
        rc = oe_capsule_start(r, b, err);
    else
        rc = oe_witness(r, "client", "request", LEDGER_NO_PARENT, b, -1, 0, 0,
                        err);
    if (rc) {
        oe_run_unlink(r);
        oe_run_free(r);
    }
    return rc;
}

int orch_engine_start(struct orch_engine *e, const struct orch_run_req *req,
                      orch_run_started_fn started, orch_run_done_fn done,
                      void *arg, struct fo_err *err)
{
    return start_run(e, req, !e->cfg.not_resumable, started, done, arg, err);
}

/* The step a run is at, for the record of where a cancel stopped it. */
void oe_step_name(const struct run *r, char *out, size_t size)
{
    switch (r->phase) {
    case PH_ROUTE:
        snprintf(out, size, "%s", r->eff ? "classifier" : "route");
        break;
    case PH_PLAN:
        snprintf(out, size, "%s", r->given ? "plan" : "coordinator");
        break;
    case PH_WAVES:
        snprintf(out, size, "wave %zu", r->wave);
        break;
    default:
        snprintf(out, size, "synthesizer");
        break;
    }
}

int orch_engine_cancel(struct orch_engine *e, int64_t run)
{
    struct run *r = oe_run_find(e, run);
    if (!r || r->ended || r->phase >= PH_PROFILE || r->failed_rc)
        return FO_E_NOT_FOUND;
    char where[ORCH_NAME_MAX + 32];
    oe_step_name(r, where, sizeof(where));
    oe_set_halt(r, H_CANCEL, "cancelled", where);
    oe_step(r);
    return FO_OK;
}

/* ---- a request's checks ------------------------------------------------ */

int orch_submit_check(const char *request, const struct orch_submit_opts *opts,
                      struct fo_err *err)
{
    if (!request || !*request || strlen(request) > ORCH_REQUEST_MAX)
        return fo_err_set(err, FO_E_INVALID, "request: must be 1-%u bytes",
                          ORCH_REQUEST_MAX);
    if (!fo_utf8_valid(request, strlen(request)))
        return fo_err_set(err, FO_E_INVALID, "request: not valid UTF-8");
    int calls = opts ? opts->max_model_calls : 0;
    int secs = opts ? opts->max_seconds : 0;
    if (calls < 0 || calls > ORCH_SUBMIT_CALLS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_model_calls: must be 1..%d",
                          ORCH_SUBMIT_CALLS_MAX);
    if (secs < 0 || secs > ORCH_SUBMIT_SECONDS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_seconds: must be 1..%d",
                          ORCH_SUBMIT_SECONDS_MAX);
    const char *dp = opts ? opts->delivery_profile : NULL;
    if (dp && !orch_profile_known(dp))
        return fo_err_set(err, FO_E_INVALID,
                          "delivery_profile: unknown delivery profile %.64s "
                          "(known: %s)",
                          dp, orch_profiles_list);
    return FO_OK;
}

/* ---- small utilities the engine's files share ---------------------- */

void oe_elog(struct orch_engine *e, const char *fmt, ...)
{
    if (!e->cfg.log)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    e->cfg.log(e->cfg.log_hook, "%s", line);
}

int64_t oe_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The run's time, less what it spent waiting for a human at its gates. */
int64_t oe_elapsed_ms(const struct run *r)
{
    return (oe_now_us() - r->t0_us - r->wait_us) / 1000;
}
