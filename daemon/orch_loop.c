/* orch_loop: the control loop (DESIGN §6): request → route frame → plan
 * (coordinator) → tasks → verdicts → escalation up the tiers → synthesis →
 * intent coverage → answer, every step witnessed, under a run budget.
 * Without model providers each role is a deterministic stub. */
#include "daemon/orch.h"

#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "daemon/orch_int.h"
#include "daemon/orch_model.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/proof.h"

#define REPLY_KEEP (4u * 1024u)      /* of a rejected reply, in its entry */
#define LANES_TEXT_MAX (32u * 1024u) /* the lane list in a prompt */
#define PROMPT_MAX (1024u * 1024u)
#define SALIENT_MAX 64
#define MISSING_SHOWN 20
#define ROUTE_SHOWN 5

enum role { R_COORDINATOR, R_CLASSIFIER, R_VALIDATOR, R_SYNTHESIZER };

static const char *const role_name[] = {"coordinator", "classifier",
                                        "validator", "synthesizer"};
/* the tier each role asks for first */
static const int role_tier[] = {ORCH_TIER_CAPABLE, ORCH_TIER_CHEAP,
                                ORCH_TIER_CHEAP, ORCH_TIER_CAPABLE};

static const char coord_system[] =
    "You are the coordinator of forum, an orchestrator of AI agents. Break "
    "the user's request into tasks for the agents listed below. Answer with "
    "one JSON object and nothing else:\n"
    "{\"tasks\": [{\"id\": \"T1\", \"agent\": \"<agent name>\", "
    "\"instruction\": \"<what to do>\", \"depends_on\": [\"<task ids>\"], "
    "\"done_when\": [\"<a criterion>\", {\"contains\": \"<text>\"}]}]}\n"
    "depends_on and done_when are optional. Use as few tasks as the request "
    "needs, and only these agents:\n{{lanes}}\n"
    "The router suggests the agent \"{{lane}}\".";

static const char classifier_system[] =
    "You are the classifier of forum. Pick the one agent best suited to the "
    "user's request from this list:\n{{lanes}}\n"
    "Answer with one JSON object and nothing else: {\"lane\": \"<agent "
    "name>\"}.";

static const char validator_system[] =
    "You are the validator of forum. Judge whether the result meets its "
    "instruction and every criterion. Answer with one JSON object and "
    "nothing else: {\"pass\": true or false, \"reason\": \"<one sentence>\"}.";

static const char validator_user[] =
    "Instruction:\n{{instruction}}\n\nCriteria:\n{{criteria}}\n\n"
    "Result:\n{{output}}";

static const char synth_system[] =
    "You are the synthesizer of forum. Write one answer to the user's "
    "request from the results of the agents below. Answer in plain text.";

static const char synth_user[] =
    "Request:\n{{request}}\n\nResults:\n{{results}}";

enum { ST_PENDING, ST_DONE, ST_REFUSED, ST_SKIPPED };

struct tstate {
    int status;
    int pass;     /* the last verdict passed */
    int ran_ok;   /* the last result was ok */
    int unjudged; /* the last verdict: nothing to judge by (no criteria a
                     machine checks, no model): never a pass */
    long dup_of;  /* a skipped task: the task it repeats, else -1 */
    int64_t task_seq, result_seq, verdict_seq;
    int tier;     /* of the last attempt, -1 when not a model tier */
    char *output; /* the last ok output, for downstream tasks */
    size_t output_len;
    int exit_code;
    char model[ORCH_MODEL_MAX + 1];
};

struct dkey { /* one (agent, instruction, executor) dispatched */
    char *key;
    size_t task;
};

struct loop {
    const struct orch *o;
    const struct orch_witness *w;
    const char *request;
    int max_calls, max_seconds;
    int calls, escalations;
    struct timespec t0;
    struct orch_live *live;    /* the run in the registry, or NULL */
    const char *budget_reason; /* set when the budget stopped the run */
    char stopped_before[ORCH_NAME_MAX + 32];
    int64_t request_seq, route_seq, plan_seq, last_seq;
    const char *lane; /* the routed lane (owned by the roster) */
    char lane_by[16]; /* router, classifier, top_candidate */
    char plan_model[ORCH_MODEL_MAX + 1];
    int plan_attempts;
    struct orch_plan *p;
    struct tstate *st;
    struct dkey *keys; /* everything dispatched in this run */
    size_t n_keys;
};

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

static int64_t elapsed_ms(const struct loop *l)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)(t.tv_sec - l->t0.tv_sec) * 1000 +
           (t.tv_nsec - l->t0.tv_nsec) / 1000000;
}

static int wit(struct loop *l, const char *actor, const char *kind,
               int64_t parent, const cJSON *payload, int64_t *seq,
               struct fo_err *err)
{
    int64_t s = -1;
    int rc = orch_witness_json(l->w, actor, kind, parent, payload, &s, err);
    if (!rc) {
        l->last_seq = s;
        if (seq)
            *seq = s;
    }
    return rc;
}

/* FO_E_BUDGET (the reason and the step noted) when the run was cancelled,
 * the daemon is stopping or, unless halt_only, no model call is left or
 * the time is up; else FO_OK. */
static int stop_check(struct loop *l, const char *before, int halt_only,
                      struct fo_err *err)
{
    if (l->live && atomic_load(&l->live->cancel))
        l->budget_reason = "cancelled";
    else if (orch_runs_stopping(l->o))
        l->budget_reason = "shutdown";
    else if (halt_only)
        return FO_OK;
    else if (l->calls >= l->max_calls)
        l->budget_reason = "max_model_calls";
    else if (l->max_seconds && elapsed_ms(l) >= (int64_t)l->max_seconds * 1000)
        l->budget_reason = "max_seconds";
    if (!l->budget_reason)
        return FO_OK;
    snprintf(l->stopped_before, sizeof(l->stopped_before), "%s", before);
    return fo_err_set(err, FO_E_BUDGET, "run budget spent (%s)",
                      l->budget_reason);
}

static int budget_check(struct loop *l, const char *before, struct fo_err *err)
{
    return stop_check(l, before, 0, err);
}

/* Takes one model call from the budget, or FO_E_BUDGET. */
static int spend(struct loop *l, const char *before, struct fo_err *err)
{
    int rc = budget_check(l, before, err);
    if (!rc)
        l->calls++;
    return rc;
}

/* ---- model calls for the roles ---------------------------------------- */

/* The tier to ask for a role: its own when a provider serves it, else the
 * nearest above, else below. */
static int pick_tier(const struct orch *o, int want)
{
    static const int order[3][3] = {{0, 1, 2}, {1, 2, 0}, {2, 1, 0}};
    for (int i = 0; i < 3; i++) {
        int t = order[want][i];
        if (o->model_has[0][t] || o->model_has[1][t])
            return t;
    }
    return want;
}

/* One call of a role. With no providers the reply is stub_text (the role's
 * deterministic stand-in). *text is malloc'd. */
static int role_call(struct loop *l, int role, const struct orch_model_msg *m,
                     size_t n, const char *stub_text, char **text,
                     char model[ORCH_MODEL_MAX + 1], struct fo_err *err)
{
    int rc = spend(l, role_name[role], err);
    if (rc)
        return rc;
    if (!l->o->models) {
        *text = orch_strdup(stub_text);
        snprintf(model, ORCH_MODEL_MAX + 1, "stub");
        return *text ? FO_OK : nomem(err);
    }
    struct orch_model_reply rep = {0};
    rc = orch_model_call(l->o->models, ORCH_EXEC_DEFAULT,
                         pick_tier(l->o, role_tier[role]), m, n, &rep, err);
    snprintf(model, ORCH_MODEL_MAX + 1, "%s", rep.model);
    if (!rc) {
        *text = rep.text;
        rep.text = NULL;
    } else {
        fo_err_prefix(err, "%s", role_name[role]);
    }
    orch_model_reply_release(&rep);
    return rc;
}

/* Accepts or rejects a role's JSON reply; on rejection err says why, in
 * words fit for the corrective prompt. */
typedef int (*json_check_fn)(struct loop *l, cJSON *j, void *ctx,
                             struct fo_err *err);

/* A role whose reply must be JSON: asks, extracts the object leniently and
 * checks it; a rejected reply is witnessed (`<role>_attempt`, parent) and
 * the next attempt sees its reply and what was wrong. After
 * ORCH_JSON_ATTEMPTS rejected replies: FO_E_UPSTREAM. */
static int json_role(struct loop *l, int role, const char *system,
                     const char *user, const char *stub_text, int64_t parent,
                     json_check_fn check, void *ctx,
                     char model[ORCH_MODEL_MAX + 1], int *attempts,
                     struct fo_err *err)
{
    char *last = NULL;
    char fix[FO_ERR_MSG_MAX + 160];
    char kind[32];
    snprintf(kind, sizeof(kind), "%s_attempt", role_name[role]);
    int rc = FO_OK;
    struct fo_err why;
    fo_err_clear(&why);
    for (int a = 1; a <= ORCH_JSON_ATTEMPTS; a++) {
        struct orch_model_msg m[4] = {{"system", system}, {"user", user}};
        size_t n = 2;
        if (last) {
            snprintf(fix, sizeof(fix),
                     "That reply was rejected: %s. Answer again with only "
                     "the corrected JSON object.",
                     why.msg);
            m[n++] = (struct orch_model_msg){"assistant", last};
            m[n++] = (struct orch_model_msg){"user", fix};
        }
        char *text = NULL;
        *attempts = a;
        rc = role_call(l, role, m, n, stub_text, &text, model, err);
        if (rc)
            break;
        cJSON *j = NULL;
        fo_err_clear(&why);
        rc = orch_json_extract(text, strlen(text), &j, &why);
        if (!rc)
            rc = check(l, j, ctx, &why);
        cJSON_Delete(j);
        free(last);
        last = text;
        if (!rc)
            break;
        if (rc == FO_E_NOMEM) {
            rc = nomem(err);
            break;
        }
        /* witness the rejected reply */
        cJSON *e = cJSON_CreateObject();
        size_t keep = orch_utf8_prefix(text, strlen(text), REPLY_KEEP);
        char *cut = malloc(keep + 1);
        if (cut) {
            memcpy(cut, text, keep);
            cut[keep] = '\0';
        }
        int ok = e && cut &&
                 cJSON_AddStringToObject(e, "role", role_name[role]) &&
                 fo_json_add_int(e, "attempt", a) &&
                 cJSON_AddFalseToObject(e, "ok") &&
                 cJSON_AddStringToObject(e, "error", why.msg) &&
                 cJSON_AddStringToObject(e, "model", model) &&
                 cJSON_AddStringToObject(e, "reply", cut) &&
                 (keep == strlen(text) ||
                  cJSON_AddTrueToObject(e, "reply_truncated"));
        free(cut);
        rc = ok ? wit(l, role_name[role], kind, parent, e, NULL, err)
                : nomem(err);
        cJSON_Delete(e);
        if (rc)
            break;
        rc = fo_err_set(err, FO_E_UPSTREAM,
                        "%s: no valid reply after %d attempts: %s",
                        role_name[role], a, why.msg);
    }
    free(last);
    return rc;
}

/* "- name (category): domain" for every lane, capped. */
static int lanes_text(const struct orch *o, struct fo_buf *b)
{
    const struct orch_roster *r = orch_roster(o);
    for (size_t i = 0; i < r->n; i++) {
        const struct orch_lane *ln = &r->lanes[i];
        int rc = fo_buf_printf(b, "- %s (%s): %s\n", ln->name, ln->category,
                               ln->domain);
        if (rc == FO_E_TOO_LARGE) /* a long roster: the lanes that fit */
            return FO_OK;
        if (rc)
            return rc;
    }
    return FO_OK;
}

/* ---- route and plan ----------------------------------------------------- */

static int check_lane(struct loop *l, cJSON *j, void *ctx, struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "lane");
    const struct orch_lane *ln =
        cJSON_IsString(v) ? orch_roster_find(orch_roster(l->o), v->valuestring)
                          : NULL;
    (void)ctx;
    if (!cJSON_IsString(v))
        return fo_err_set(err, FO_E_INVALID, "\"lane\" must be a string");
    if (!ln)
        return fo_err_set(err, FO_E_INVALID, "no agent named \"%.64s\"",
                          v->valuestring);
    l->lane = ln->name;
    return FO_OK;
}

/* The request entry; instance (may be NULL: not a run) names the process
 * that runs it (orch_run_get). */
static int request_entry(struct loop *l, const char *via, const char *instance,
                         struct fo_err *err)
{
    cJSON *e = cJSON_CreateObject();
    int rc =
        e && cJSON_AddStringToObject(e, "request", l->request) &&
                cJSON_AddStringToObject(e, "via", via) &&
                (!instance || cJSON_AddStringToObject(e, "instance", instance))
            ? wit(l, "client", "request", LEDGER_NO_PARENT, e, &l->request_seq,
                  err)
            : nomem(err);
    cJSON_Delete(e);
    return rc;
}

static int route_frame(struct loop *l, struct fo_err *err)
{
    struct orch_route rt = {0};
    cJSON *e = NULL;
    int rc =
        orch_route(orch_roster(l->o), l->request, strlen(l->request), &rt, err);
    if (rc)
        return rc;
    if (rt.decided) {
        l->lane = rt.decided;
        snprintf(l->lane_by, sizeof(l->lane_by), "router");
    } else if (l->o->models && rt.n > 0) {
        struct fo_buf lanes;
        fo_buf_init(&lanes, LANES_TEXT_MAX);
        const struct orch_roster *r = orch_roster(l->o);
        for (size_t i = 0; !rc && i < rt.n && i < ROUTE_SHOWN; i++) {
            const struct orch_lane *ln =
                orch_roster_find(r, rt.candidates[i].agent);
            rc = fo_buf_printf(&lanes, "- %s (%s): %s\n", ln->name,
                               ln->category, ln->domain);
        }
        char *text = NULL;
        struct orch_tmpl_var v[] = {{"lanes", lanes.data ? lanes.data : ""}};
        if (!rc)
            rc = orch_template_render(classifier_system, v, 1, PROMPT_MAX,
                                      &text, err);
        else
            rc = nomem(err);
        char model[ORCH_MODEL_MAX + 1];
        int attempts = 0;
        if (!rc)
            rc =
                json_role(l, R_CLASSIFIER, text, l->request, "", l->request_seq,
                          check_lane, NULL, model, &attempts, err);
        free(text);
        fo_buf_release(&lanes);
        if (rc == FO_E_UPSTREAM) { /* no usable pick: the top candidate */
            rc = FO_OK;
            l->lane = rt.candidates[0].agent;
            snprintf(l->lane_by, sizeof(l->lane_by), "top_candidate");
        } else {
            snprintf(l->lane_by, sizeof(l->lane_by), "classifier");
        }
    } else if (rt.n > 0) {
        l->lane = rt.candidates[0].agent;
        snprintf(l->lane_by, sizeof(l->lane_by), "top_candidate");
    } else {
        rc = fo_err_set(err, FO_E_INVALID, "the roster has no lanes");
    }
    if (!rc) {
        e = orch_route_json(&rt);
        cJSON *c = e ? cJSON_GetObjectItemCaseSensitive(e, "candidates") : NULL;
        while (c && cJSON_GetArraySize(c) > ROUTE_SHOWN)
            cJSON_DeleteItemFromArray(c, cJSON_GetArraySize(c) - 1);
        rc = e && cJSON_AddStringToObject(e, "lane", l->lane) &&
                     cJSON_AddStringToObject(e, "by", l->lane_by)
                 ? wit(l, "router", "route", l->request_seq, e, &l->route_seq,
                       err)
                 : nomem(err);
    }
    cJSON_Delete(e);
    orch_route_release(&rt);
    return rc;
}

static int check_plan(struct loop *l, cJSON *j, void *ctx, struct fo_err *err)
{
    (void)ctx;
    struct orch_plan *p = NULL;
    int rc = orch_plan_compile(j, orch_roster(l->o), &p, err);
    if (!rc) {
        orch_plan_free(l->p);
        l->p = p;
    }
    return rc;
}

/* The stub coordinator: one task on the routed lane, the request as its
 * instruction. */
static char *stub_plan(const struct loop *l)
{
    cJSON *pl = cJSON_CreateObject();
    cJSON *tasks = pl ? cJSON_AddArrayToObject(pl, "tasks") : NULL;
    cJSON *t = cJSON_CreateObject();
    char *s = NULL;
    if (tasks && t && cJSON_AddStringToObject(t, "id", "T1") &&
        cJSON_AddStringToObject(t, "agent", l->lane) &&
        cJSON_AddStringToObject(t, "instruction", l->request)) {
        cJSON_AddItemToArray(tasks, t);
        t = NULL;
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (!fo_json_canon(pl, &b, NULL))
            s = fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
    }
    cJSON_Delete(t);
    cJSON_Delete(pl);
    return s;
}

static int make_plan(struct loop *l, struct fo_err *err)
{
    struct fo_buf lanes;
    fo_buf_init(&lanes, LANES_TEXT_MAX);
    char *system = NULL, *stub = NULL;
    int rc = lanes_text(l->o, &lanes);
    struct orch_tmpl_var v[] = {{"lanes", lanes.data ? lanes.data : ""},
                                {"lane", l->lane}};
    if (rc)
        rc = nomem(err);
    else
        rc = orch_template_render(coord_system, v, 2, PROMPT_MAX, &system, err);
    if (!rc && !(stub = stub_plan(l)))
        rc = nomem(err);
    if (!rc)
        rc = json_role(l, R_COORDINATOR, system, l->request, stub,
                       l->request_seq, check_plan, NULL, l->plan_model,
                       &l->plan_attempts, err);
    free(system);
    free(stub);
    fo_buf_release(&lanes);
    if (rc)
        return rc;
    cJSON *e = orch_plan_json(l->p);
    rc = e && fo_json_add_int(e, "max_parallel", l->o->max_parallel) &&
                 cJSON_AddStringToObject(e, "model", l->plan_model) &&
                 fo_json_add_int(e, "attempts", l->plan_attempts) &&
                 fo_json_add_int(e, "route_seq", l->route_seq)
             ? wit(l, "coordinator", "plan", l->request_seq, e, &l->plan_seq,
                   err)
             : nomem(err);
    cJSON_Delete(e);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------ */

/* The api index and tier of a model executor, or -1. */
static int model_slot(const struct orch *o, const struct orch_exec_config *ex,
                      int *api, int *tier)
{
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < 3; t++)
            if (ex == &o->model_exec[a][t]) {
                *api = a;
                *tier = t;
                return 0;
            }
    return -1;
}

static char *dispatch_key(const struct orch_task *k,
                          const struct orch_exec_config *ex)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char *s = NULL;
    if (!fo_buf_printf(&b, "%s%c%s%c%s:%s:%d", k->agent, 0x1f, k->instruction,
                       0x1f, orch_exec_name(ex->kind), ex->model, ex->tier))
        s = fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    return s;
}

/* The task that dispatched key in this run, or -1. */
static long key_seen(const struct loop *l, const char *key)
{
    for (size_t i = 0; i < l->n_keys; i++)
        if (!strcmp(l->keys[i].key, key))
            return (long)l->keys[i].task;
    return -1;
}

/* Records key (taken, freed on failure) as dispatched by task. */
static int key_add(struct loop *l, char *key, size_t task)
{
    struct dkey *k = realloc(l->keys, (l->n_keys + 1) * sizeof(*k));
    if (!k) {
        free(key);
        return FO_E_NOMEM;
    }
    l->keys = k;
    l->keys[l->n_keys++] = (struct dkey){key, task};
    return FO_OK;
}

/* The prompt: the instruction, the outputs of data upstreams that ran ok
 * (capped, marked), and on an escalation what the last attempt failed. */
static int build_prompt(const struct loop *l, size_t t, const cJSON *failed,
                        struct fo_buf *b, cJSON *injected)
{
    const struct orch_task *k = &l->p->tasks[t];
    int rc = fo_buf_puts(b, k->instruction);
    for (size_t d = 0; !rc && d < k->n_deps; d++) {
        const struct tstate *u = &l->st[k->dep_index[d]];
        if (k->deps[d].type != ORCH_EDGE_DATA || !u->output)
            continue;
        size_t n = orch_utf8_prefix(u->output, u->output_len, l->o->inject_max);
        rc =
            fo_buf_printf(b, "\n\n--- upstream %s output ---\n", k->deps[d].id);
        if (!rc)
            rc = fo_buf_append(b, u->output, n);
        if (!rc && n < u->output_len)
            rc = fo_buf_printf(b,
                               "\n[forum: upstream output truncated at %zu of "
                               "%zu bytes]",
                               n, u->output_len);
        if (!rc)
            rc = fo_buf_printf(b, "\n--- end upstream %s ---", k->deps[d].id);
        if (!rc) {
            cJSON *s = cJSON_CreateString(k->deps[d].id);
            if (!s)
                return FO_E_NOMEM;
            cJSON_AddItemToArray(injected, s);
        }
    }
    if (!rc && failed && cJSON_GetArraySize(failed) > 0) {
        rc = fo_buf_puts(b, "\n\n[forum: a previous attempt did not pass "
                            "these checks:");
        const cJSON *f;
        cJSON_ArrayForEach (f, failed)
            if (!rc && cJSON_IsString(f))
                rc = fo_buf_printf(b, "\n- %s", f->valuestring);
        if (!rc)
            rc = fo_buf_puts(b, "\nMake this attempt meet every one.]");
    }
    return rc;
}

/* One run of a task in three steps, so the tasks of a wave can run at once
 * while every ledger write stays on the calling thread: begin (budget,
 * prompt, the task entry), exec (the executor only: any thread), end (the
 * result entry and the task's state). */
struct attempt {
    size_t t;
    const struct orch_exec_config *ex;
    int tier;
    struct fo_buf prompt;
    struct orch_result res;
    int xrc;
    struct fo_err xerr;
};

static void attempt_release(struct attempt *a)
{
    fo_buf_release(&a->prompt);
    orch_result_release(&a->res);
}

/* Witnesses a task (parent: the plan, or the escalation that re-runs it). */
static int task_begin(struct loop *l, struct attempt *a, size_t wave,
                      int64_t parent, const cJSON *failed, struct fo_err *err)
{
    const struct orch_task *k = &l->p->tasks[a->t];
    struct tstate *s = &l->st[a->t];
    const struct orch_exec_config *ex = a->ex;
    int api = -1, tier = -1;
    model_slot(l->o, ex, &api, &tier);
    a->tier = tier;
    a->res = (struct orch_result){.exit_code = -1};
    fo_buf_init(&a->prompt, FO_BUF_UNLIMITED);
    {
        /* a stub task is free, but a cancel or a shutdown stops before it */
        char what[ORCH_NAME_MAX + 8];
        snprintf(what, sizeof(what), "task %s", k->id);
        int rc = ex->kind != ORCH_EXEC_STUB ? spend(l, what, err)
                                            : stop_check(l, what, 1, err);
        if (rc)
            return rc;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *inj = o ? cJSON_AddArrayToObject(o, "injected") : NULL;
    int rc = inj ? build_prompt(l, a->t, failed, &a->prompt, inj) : FO_E_NOMEM;
    if (rc) {
        rc = nomem(err);
        goto out;
    }
    int ok =
        cJSON_AddStringToObject(o, "id", k->id) &&
        cJSON_AddStringToObject(o, "agent", k->agent) &&
        cJSON_AddStringToObject(o, "instruction", k->instruction) &&
        (!k->done ||
         cJSON_AddItemToObject(o, "done_when", cJSON_Duplicate(k->done, 1))) &&
        fo_json_add_int(o, "wave", (long long)wave) &&
        cJSON_AddStringToObject(o, "executor", orch_exec_name(ex->kind)) &&
        cJSON_AddStringToObject(o, "model", ex->model) &&
        (tier < 0 || cJSON_AddStringToObject(o, "tier", orch_tier_name(tier)));
    if (!ok) {
        rc = nomem(err);
        goto out;
    }
    rc = wit(l, k->agent, "task", parent, o, &s->task_seq, err);
out:
    cJSON_Delete(o);
    return rc;
}

/* Runs the executor (no ledger, no loop state: safe on any thread). */
static void task_exec(struct attempt *a)
{
    fo_err_clear(&a->xerr);
    a->xrc = orch_exec_once(a->ex, a->prompt.data ? a->prompt.data : "",
                            &a->res, &a->xerr);
}

static void *task_thread(void *arg)
{
    task_exec(arg);
    return NULL;
}

/* Witnesses the result of an attempt and records it in the task's state. */
static int task_end(struct loop *l, struct attempt *a, struct fo_err *err)
{
    const struct orch_task *k = &l->p->tasks[a->t];
    struct tstate *s = &l->st[a->t];
    if (a->xrc == FO_E_NOMEM)
        return nomem(err);
    if (a->xrc) { /* could not start: an ok:false result */
        orch_result_release(&a->res);
        a->res = (struct orch_result){.exit_code = -1};
        snprintf(a->res.error, sizeof(a->res.error), "%s", a->xerr.msg);
        snprintf(a->res.model, sizeof(a->res.model), "%s", a->ex->model);
        a->res.output = calloc(1, 1);
        a->res.errout = calloc(1, 1);
        if (!a->res.output || !a->res.errout)
            return nomem(err);
    }
    int rc = orch_witness_result(l->w, k->id, k->agent, s->task_seq, &a->res,
                                 &s->result_seq, err);
    if (rc)
        return rc;
    l->last_seq = s->result_seq;
    s->status = ST_DONE;
    s->ran_ok = a->res.ok;
    s->tier = a->tier;
    s->exit_code = a->res.exit_code;
    snprintf(s->model, sizeof(s->model), "%s", a->res.model);
    if (a->res.ok) {
        free(s->output);
        s->output = a->res.output;
        s->output_len = a->res.output_len;
        a->res.output = NULL;
    }
    return FO_OK;
}

/* A task run to the end on ex, on this thread (escalations). */
static int run_task(struct loop *l, size_t t, size_t wave, int64_t parent,
                    const struct orch_exec_config *ex, const cJSON *failed,
                    struct fo_err *err)
{
    struct attempt a = {.t = t, .ex = ex};
    int rc = task_begin(l, &a, wave, parent, failed, err);
    if (!rc) {
        task_exec(&a);
        rc = task_end(l, &a, err);
    }
    attempt_release(&a);
    return rc;
}

/* Runs the executors of n attempts, at most max_parallel at once. Threads
 * that cannot be started run on this thread. */
static void exec_all(struct attempt *v, size_t n, int max_parallel)
{
    size_t lim = max_parallel > 0 ? (size_t)max_parallel : 1;
    for (size_t i = 0; i < n; i += lim) {
        size_t m = n - i < lim ? n - i : lim;
        pthread_t th[ORCH_MAX_PARALLEL_MAX];
        int started[ORCH_MAX_PARALLEL_MAX] = {0};
        for (size_t j = 1; j < m; j++)
            started[j] =
                pthread_create(&th[j], NULL, task_thread, &v[i + j]) == 0;
        task_exec(&v[i]);
        for (size_t j = 1; j < m; j++) {
            if (started[j])
                pthread_join(th[j], NULL);
            else
                task_exec(&v[i + j]);
        }
    }
}

/* ---- verdicts and escalation ------------------------------------------ */

struct vctx {
    int pass;
    char reason[512];
};

static int check_verdict(struct loop *l, cJSON *j, void *ctx,
                         struct fo_err *err)
{
    (void)l;
    struct vctx *v = ctx;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pass");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "reason");
    if (!cJSON_IsBool(p))
        return fo_err_set(err, FO_E_INVALID, "\"pass\" must be true or false");
    v->pass = cJSON_IsTrue(p);
    snprintf(v->reason, sizeof(v->reason), "%s",
             cJSON_IsString(r) ? r->valuestring : "");
    return FO_OK;
}

/* Judges the last attempt of task t and witnesses the verdict. *failed
 * (an array the caller deletes) lists what failed, for an escalation. */
static int judge(struct loop *l, size_t t, cJSON **failed, struct fo_err *err)
{
    const struct orch_task *k = &l->p->tasks[t];
    struct tstate *s = &l->st[t];
    struct orch_verdict v = {0};
    const char *by = "none";
    char model[ORCH_MODEL_MAX + 1] = "";
    char reason[600] = "";
    int pass = 0, rc = FO_OK;
    *failed = cJSON_CreateArray();
    if (!*failed)
        return nomem(err);
    if (!s->ran_ok) {
        by = "task_failed";
        snprintf(reason, sizeof(reason), "the task did not finish ok");
        cJSON *f = cJSON_CreateString("the task failed (no result)");
        if (!f)
            return nomem(err);
        cJSON_AddItemToArray(*failed, f);
    } else {
        rc = orch_assert_check(k->done, s->output, s->output_len, s->exit_code,
                               &v, err);
        if (rc)
            goto out;
        if (!v.pass) {
            by = "assertions";
            cJSON_Delete(*failed);
            *failed = cJSON_Duplicate(v.failed, 1);
            if (!*failed) {
                rc = nomem(err);
                goto out;
            }
        } else if (!k->done ||
                   (v.validator && cJSON_GetArraySize(v.validator) > 0 &&
                    !l->o->models)) {
            /* Nothing a machine can check, and (for plain-text criteria)
             * no model to judge by: witnessed as such, never as a pass. */
            by = "unjudged";
            snprintf(reason, sizeof(reason),
                     !k->done ? "the task has no done_when criteria"
                              : "no model is configured to judge its "
                                "plain-text criteria");
        } else if (v.validator && cJSON_GetArraySize(v.validator) > 0) {
            by = "validator";
            struct fo_buf crit;
            fo_buf_init(&crit, FO_BUF_UNLIMITED);
            const cJSON *c;
            cJSON_ArrayForEach (c, v.validator)
                if (!rc && cJSON_IsString(c))
                    rc = fo_buf_printf(&crit, "- %s\n", c->valuestring);
            size_t on =
                orch_utf8_prefix(s->output, s->output_len, l->o->inject_max);
            char *outcut = malloc(on + 1);
            if (outcut) {
                memcpy(outcut, s->output, on);
                outcut[on] = '\0';
            }
            char *user = NULL;
            struct orch_tmpl_var tv[] = {
                {"instruction", k->instruction},
                {"criteria", crit.data ? crit.data : ""},
                {"output", outcut ? outcut : ""}};
            if (rc || !outcut)
                rc = nomem(err);
            else
                rc = orch_template_render(validator_user, tv, 3, PROMPT_MAX,
                                          &user, err);
            struct vctx vc = {0};
            int attempts = 0;
            if (!rc)
                rc = json_role(l, R_VALIDATOR, validator_system, user,
                               "{\"pass\": true, \"reason\": \"stub "
                               "validator\"}",
                               s->result_seq, check_verdict, &vc, model,
                               &attempts, err);
            free(user);
            free(outcut);
            fo_buf_release(&crit);
            if (rc == FO_E_UPSTREAM) { /* no verdict from the model: fail */
                rc = FO_OK;
                vc.pass = 0;
                snprintf(vc.reason, sizeof(vc.reason),
                         "the validator gave no valid verdict");
            }
            if (rc)
                goto out;
            pass = vc.pass;
            snprintf(reason, sizeof(reason), "%s", vc.reason);
            if (!pass) {
                char line[700];
                snprintf(line, sizeof(line), "validator: %s", vc.reason);
                cJSON *f = cJSON_CreateString(line);
                if (!f) {
                    rc = nomem(err);
                    goto out;
                }
                cJSON_AddItemToArray(*failed, f);
            }
        } else {
            pass = 1;
            by = "assertions";
        }
    }
    cJSON *e = cJSON_CreateObject();
    int ok = e && cJSON_AddStringToObject(e, "id", k->id) &&
             cJSON_AddBoolToObject(e, "pass", pass) &&
             cJSON_AddBoolToObject(e, "judged", strcmp(by, "unjudged")) &&
             cJSON_AddStringToObject(e, "by", by) &&
             cJSON_AddItemToObject(e, "failed", cJSON_Duplicate(*failed, 1)) &&
             (!*reason || cJSON_AddStringToObject(e, "reason", reason)) &&
             (!*model || cJSON_AddStringToObject(e, "model", model)) &&
             cJSON_AddStringToObject(e, "result_model", s->model) &&
             (s->tier < 0 ||
              cJSON_AddStringToObject(e, "tier", orch_tier_name(s->tier)));
    rc = ok ? wit(l, "validator", "verdict", s->result_seq, e, &s->verdict_seq,
                  err)
            : nomem(err);
    cJSON_Delete(e);
    if (!rc) {
        s->pass = pass;
        s->unjudged = !strcmp(by, "unjudged");
    }
out:
    orch_verdict_release(&v);
    return rc;
}

/* Judges task t and, while it fails, re-runs it one tier up the ladder of
 * its api (tiers with a provider, executors not yet used for it). */
static int judge_and_escalate(struct loop *l, size_t t, size_t wave,
                              struct fo_err *err)
{
    const struct orch_task *k = &l->p->tasks[t];
    struct tstate *s = &l->st[t];
    const struct orch_lane *ln = orch_roster_find(orch_roster(l->o), k->agent);
    const struct orch_exec_config *ex = orch_exec_for_lane(l->o, ln);
    int api = -1, tier = -1;
    int on_ladder = model_slot(l->o, ex, &api, &tier) == 0;
    for (;;) {
        cJSON *failed = NULL;
        int rc = judge(l, t, &failed, err);
        if (rc || s->pass || s->unjudged || !on_ladder) {
            cJSON_Delete(failed);
            return rc;
        }
        const struct orch_exec_config *next = NULL;
        char *key = NULL;
        for (int up = s->tier + 1; !next && up <= ORCH_TIER_FRONTIER; up++) {
            if (!l->o->model_has[api][up])
                continue;
            key = dispatch_key(k, &l->o->model_exec[api][up]);
            if (!key) {
                cJSON_Delete(failed);
                return nomem(err);
            }
            if (key_seen(l, key) >= 0) {
                free(key);
                key = NULL;
                continue;
            }
            next = &l->o->model_exec[api][up];
        }
        if (!next) {
            cJSON_Delete(failed);
            return FO_OK;
        }
        rc = key_add(l, key, t) ? nomem(err) : FO_OK;
        cJSON *e = rc ? NULL : cJSON_CreateObject();
        int64_t eseq = -1;
        if (!rc)
            rc = e && cJSON_AddStringToObject(e, "id", k->id) &&
                         cJSON_AddStringToObject(e, "agent", k->agent) &&
                         cJSON_AddStringToObject(e, "from",
                                                 orch_tier_name(s->tier)) &&
                         cJSON_AddStringToObject(e, "to",
                                                 orch_tier_name(next->tier)) &&
                         cJSON_AddStringToObject(e, "model", next->model) &&
                         cJSON_AddItemToObject(e, "because",
                                               cJSON_Duplicate(failed, 1))
                     ? FO_OK
                     : nomem(err);
        /* the budget is checked before the escalation is witnessed, so a
         * spent budget never leaves an escalation without its task */
        if (!rc) {
            char what[ORCH_NAME_MAX + 16];
            snprintf(what, sizeof(what), "escalation of %s", k->id);
            rc = budget_check(l, what, err);
        }
        if (!rc)
            rc = wit(l, "loop", "tier_escalation", s->verdict_seq, e, &eseq,
                     err);
        cJSON_Delete(e);
        if (!rc) {
            l->escalations++;
            rc = run_task(l, t, wave, eseq, next, failed, err);
        }
        cJSON_Delete(failed);
        if (rc)
            return rc;
    }
}

static int refuse(struct loop *l, size_t t, const struct orch_lane *ln,
                  struct fo_err *err)
{
    const struct orch_task *k = &l->p->tasks[t];
    cJSON *o = cJSON_CreateObject();
    int rc =
        o && cJSON_AddStringToObject(o, "id", k->id) &&
                cJSON_AddStringToObject(o, "agent", k->agent) &&
                cJSON_AddStringToObject(o, "category", ln->category) &&
                cJSON_AddStringToObject(o, "reason", "category_not_allowed")
            ? wit(l, "policy", "refusal", l->plan_seq, o, &l->st[t].result_seq,
                  err)
            : nomem(err);
    cJSON_Delete(o);
    if (!rc)
        l->st[t].status = ST_REFUSED;
    return rc;
}

static int skip(struct loop *l, size_t t, size_t of, struct fo_err *err)
{
    const struct orch_task *k = &l->p->tasks[t];
    cJSON *o = cJSON_CreateObject();
    int rc =
        o && cJSON_AddStringToObject(o, "id", k->id) &&
                cJSON_AddStringToObject(o, "duplicate_of",
                                        l->p->tasks[of].id) &&
                cJSON_AddStringToObject(o, "reason",
                                        "same agent, instruction and "
                                        "executor already dispatched")
            ? wit(l, "loop", "skip", l->plan_seq, o, &l->st[t].result_seq, err)
            : nomem(err);
    cJSON_Delete(o);
    if (!rc) {
        l->st[t].status = ST_SKIPPED;
        l->st[t].dup_of = (long)of;
    }
    return rc;
}

/* Copies what the original of a skipped repeat gave. */
static int copy_dup(struct loop *l, size_t t, size_t dup, struct fo_err *err)
{
    struct tstate *s = &l->st[t], *d = &l->st[dup];
    s->pass = d->pass;
    s->unjudged = d->unjudged;
    if (d->output) {
        s->output = malloc(d->output_len + 1);
        if (!s->output)
            return nomem(err);
        memcpy(s->output, d->output, d->output_len + 1);
        s->output_len = d->output_len;
    }
    return FO_OK;
}

/* Tasks wave by wave. The tasks of a wave are witnessed, then their
 * executors run at once (up to max_parallel threads; nothing but the
 * executor runs off this thread), then their results are witnessed and
 * each is judged and escalated in plan order, before the next wave reads
 * their output. */
static int dispatch(struct loop *l, struct fo_err *err)
{
    const struct orch_plan *p = l->p;
    struct attempt *v = calloc(p->n ? p->n : 1, sizeof(*v));
    size_t *dups = calloc(2 * (p->n ? p->n : 1), sizeof(*dups));
    int rc = FO_OK;
    if (!v || !dups) {
        rc = nomem(err);
        goto out;
    }
    for (size_t w = 0; w < p->n_waves && !rc; w++) {
        size_t n = 0, nd = 0;
        int stop = FO_OK; /* a task that could not begin (the budget) */
        char what[32];
        snprintf(what, sizeof(what), "wave %zu", w);
        rc = stop_check(l, what, 1, err);
        if (rc)
            break;
        for (size_t i = p->wave_start[w]; i < p->wave_start[w + 1]; i++) {
            size_t t = p->order[i];
            const struct orch_task *k = &p->tasks[t];
            const struct orch_lane *ln =
                orch_roster_find(orch_roster(l->o), k->agent);
            if (!ln) {
                stop = fo_err_set(err, FO_E_INTERNAL, "no lane %s", k->agent);
                break;
            }
            if (!orch_category_allowed(l->o, ln->category)) {
                stop = refuse(l, t, ln, err);
                if (stop)
                    break;
                continue;
            }
            const struct orch_exec_config *ex = orch_exec_for_lane(l->o, ln);
            char *key = dispatch_key(k, ex);
            if (!key) {
                stop = nomem(err);
                break;
            }
            long dup = key_seen(l, key);
            if (dup >= 0) {
                free(key);
                stop = skip(l, t, (size_t)dup, err);
                if (stop)
                    break;
                dups[2 * nd] = t;
                dups[2 * nd + 1] = (size_t)dup;
                nd++;
                continue;
            }
            if (key_add(l, key, t)) {
                stop = nomem(err);
                break;
            }
            v[n] = (struct attempt){.t = t, .ex = ex};
            stop = task_begin(l, &v[n], w, l->plan_seq, NULL, err);
            n++; /* released below whatever happened */
            if (stop) {
                /* not witnessed: nothing to run for it */
                n--;
                attempt_release(&v[n]);
                break;
            }
        }
        /* Every task witnessed gets its result, budget or not. */
        exec_all(v, n, l->o->max_parallel);
        for (size_t j = 0; j < n && !rc; j++)
            rc = task_end(l, &v[j], err);
        if (!rc)
            rc = stop;
        for (size_t j = 0; j < n && !rc; j++)
            rc = judge_and_escalate(l, v[j].t, w, err);
        for (size_t d = 0; d < nd && !rc; d++)
            rc = copy_dup(l, dups[2 * d], dups[2 * d + 1], err);
        for (size_t j = 0; j < n; j++)
            attempt_release(&v[j]);
    }
out:
    free(v);
    free(dups);
    return rc;
}

/* ---- synthesis, coverage, answer ---------------------------------------- */

static int results_text(const struct loop *l, int stub, struct fo_buf *b)
{
    int rc = FO_OK, any = 0;
    for (size_t i = 0; !rc && i < l->p->n; i++) {
        size_t t = l->p->order[i];
        const struct tstate *s = &l->st[t];
        const struct orch_task *k = &l->p->tasks[t];
        size_t n = s->output ? orch_utf8_prefix(s->output, s->output_len,
                                                l->o->inject_max)
                             : 0;
        if (stub) {
            if (!s->output || s->status == ST_SKIPPED)
                continue;
            rc = fo_buf_puts(b, any++ ? "\n\n" : "");
            if (!rc)
                rc = fo_buf_append(b, s->output, n);
            continue;
        }
        const char *state = s->status == ST_REFUSED   ? "refused by policy"
                            : s->status == ST_SKIPPED ? "a repeat, skipped"
                            : s->pass                 ? "passed"
                            : s->unjudged             ? "not judged"
                            : s->ran_ok               ? "did not pass"
                                                      : "failed";
        rc = fo_buf_printf(b, "[%s, agent %s: %s]\n", k->id, k->agent, state);
        if (!rc && s->output && s->status != ST_SKIPPED)
            rc = fo_buf_append(b, s->output, n);
        if (!rc)
            rc = fo_buf_puts(b, "\n\n");
    }
    if (!rc && stub && !any)
        rc = fo_buf_puts(b, "forum: no task produced a result.");
    return rc;
}

static int is_stopword(const char *w)
{
    static const char *const stop[] = {
        "about",  "after", "also",   "been",  "before", "being", "could",
        "does",   "each",  "from",   "have",  "into",   "just",  "like",
        "make",   "more",  "most",   "much",  "only",   "other", "over",
        "please", "same",  "should", "some",  "such",   "than",  "that",
        "their",  "them",  "then",   "there", "these",  "they",  "this",
        "those",  "very",  "want",   "what",  "when",   "where", "which",
        "while",  "will",  "with",   "would", "your"};
    for (size_t i = 0; i < sizeof(stop) / sizeof(stop[0]); i++)
        if (!strcmp(stop[i], w))
            return 1;
    return 0;
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static int alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* The intent coverage: the salient words of the request (the [a-z0-9]+
 * tokens of 4+ bytes, stopwords aside, at most SALIENT_MAX distinct) and
 * the share of them the answer contains (as a substring of its lowercased
 * text, so "tests" covers "test"... and "databases" covers "database"). */
static cJSON *coverage(const char *request, const char *answer)
{
    size_t alen = strlen(answer);
    char *low = malloc(alen + 1);
    cJSON *o = cJSON_CreateObject();
    cJSON *missing = o ? cJSON_AddArrayToObject(o, "missing") : NULL;
    char words[SALIENT_MAX][ORCH_KEYWORD_MAX + 1];
    size_t nw = 0, covered = 0, nmiss = 0;
    if (!low || !missing) {
        free(low);
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = 0; i <= alen; i++)
        low[i] = lower(answer[i]);
    for (const char *p = request; *p && nw < SALIENT_MAX;) {
        while (*p && !alnum(lower(*p)))
            p++;
        char w[ORCH_KEYWORD_MAX + 1];
        size_t n = 0;
        while (*p && alnum(lower(*p))) {
            if (n < ORCH_KEYWORD_MAX)
                w[n++] = lower(*p);
            p++;
        }
        w[n] = '\0';
        if (n < 4 || is_stopword(w))
            continue;
        int dup = 0;
        for (size_t k = 0; k < nw && !dup; k++)
            dup = !strcmp(words[k], w);
        if (dup)
            continue;
        memcpy(words[nw++], w, n + 1);
        if (strstr(low, w)) {
            covered++;
        } else if (nmiss++ < MISSING_SHOWN) {
            cJSON *s = cJSON_CreateString(w);
            if (s)
                cJSON_AddItemToArray(missing, s);
        }
    }
    free(low);
    double score = nw ? (double)covered / (double)nw : 1.0;
    if (!cJSON_AddNumberToObject(o, "score", orch_round6(score)) ||
        !fo_json_add_int(o, "salient", (long long)nw) ||
        !fo_json_add_int(o, "covered", (long long)covered) ||
        !cJSON_AddBoolToObject(o, "flagged", score < ORCH_COVERAGE_MIN) ||
        !cJSON_AddNumberToObject(o, "threshold", ORCH_COVERAGE_MIN)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int synthesize(struct loop *l, char **answer,
                      char model[ORCH_MODEL_MAX + 1], struct fo_err *err)
{
    struct fo_buf res, stub;
    fo_buf_init(&res, FO_BUF_UNLIMITED);
    fo_buf_init(&stub, FO_BUF_UNLIMITED);
    char *user = NULL;
    /* Without a model the answer says so first, whatever the tasks ran on
     * (the stub, or a --cmd): no reader should take it for a model's. */
    int rc = (!l->o->models &&
              fo_buf_puts(&stub, l->o->argv ? ORCH_NO_MODEL_CMD_NOTE
                                            : ORCH_NO_MODEL_NOTE)) ||
                     results_text(l, 0, &res) || results_text(l, 1, &stub)
                 ? nomem(err)
                 : FO_OK;
    struct orch_tmpl_var v[] = {{"request", l->request},
                                {"results", res.data ? res.data : ""}};
    if (!rc)
        rc = orch_template_render(synth_user, v, 2, 0, &user, err);
    struct orch_model_msg m[] = {{"system", synth_system}, {"user", user}};
    if (!rc)
        rc = role_call(l, R_SYNTHESIZER, m, 2, stub.data ? stub.data : "",
                       answer, model, err);
    free(user);
    fo_buf_release(&res);
    fo_buf_release(&stub);
    return rc;
}

/* ---- the run ---------------------------------------------------------- */

static int answer_entry(struct loop *l, const char *answer, const char *model,
                        cJSON *cov, int budget, int64_t *seq,
                        struct fo_err *err)
{
    cJSON *e = cJSON_CreateObject();
    int64_t parent = l->plan_seq >= 0 ? l->plan_seq : l->request_seq;
    int ok = e && cJSON_AddStringToObject(e, "answer", answer) &&
             (!model || cJSON_AddStringToObject(e, "model", model)) &&
             (!cov ||
              cJSON_AddItemToObject(e, "coverage", cJSON_Duplicate(cov, 1))) &&
             fo_json_add_int(e, "model_calls", l->calls) &&
             (!budget || cJSON_AddTrueToObject(e, "budget_spent"));
    int rc =
        ok ? wit(l, "synthesizer", "answer", parent, e, seq, err) : nomem(err);
    cJSON_Delete(e);
    return rc;
}

/* The fixed answer of a run the budget or a shutdown stopped. */
static const char *stop_answer(const struct loop *l)
{
    const char *r = l->budget_reason ? l->budget_reason : "";
    return !strcmp(r, "shutdown")    ? ORCH_STOPPED_ANSWER
           : !strcmp(r, "cancelled") ? ORCH_CANCELLED_ANSWER
                                     : ORCH_BUDGET_ANSWER;
}

static int budget_entry(struct loop *l, struct fo_err *err)
{
    cJSON *e = cJSON_CreateObject();
    int64_t parent = l->plan_seq >= 0 ? l->plan_seq : l->request_seq;
    int ok = e && cJSON_AddStringToObject(e, "reason", l->budget_reason) &&
             cJSON_AddStringToObject(e, "stopped_before", l->stopped_before) &&
             fo_json_add_int(e, "model_calls", l->calls) &&
             fo_json_add_int(e, "max_model_calls", l->max_calls) &&
             fo_json_add_int(e, "max_seconds", l->max_seconds) &&
             fo_json_add_int(e, "elapsed_ms", elapsed_ms(l)) &&
             fo_json_add_int(e, "last_seq", l->last_seq);
    int rc = ok ? wit(l, "loop", "budget", parent, e, NULL, err) : nomem(err);
    cJSON_Delete(e);
    return rc;
}

/* Best effort: the run's error on record before it is returned. */
static void error_entry(struct loop *l, const struct fo_err *e)
{
    if (l->request_seq < 0)
        return;
    cJSON *o = cJSON_CreateObject();
    struct fo_err ignore;
    if (o && cJSON_AddStringToObject(o, "error", e->msg) &&
        cJSON_AddStringToObject(o, "code", fo_code_name(e->code)))
        wit(l, "loop", "error", l->request_seq, o, NULL, &ignore);
    cJSON_Delete(o);
}

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
    return FO_OK;
}

static int loop_init(struct loop *l, const struct orch *o,
                     const struct orch_witness *w, const char *request,
                     const struct orch_submit_opts *opts, struct fo_err *err)
{
    *l = (struct loop){.o = o,
                       .w = w,
                       .request = request,
                       .request_seq = -1,
                       .route_seq = -1,
                       .plan_seq = -1,
                       .last_seq = -1};
    clock_gettime(CLOCK_MONOTONIC, &l->t0);
    int rc = orch_submit_check(request, opts, err);
    if (rc)
        return rc;
    int calls = opts ? opts->max_model_calls : 0;
    l->max_calls = calls ? calls : ORCH_SUBMIT_CALLS_DEFAULT;
    l->max_seconds = opts ? opts->max_seconds : 0;
    return FO_OK;
}

static void loop_release(struct loop *l)
{
    for (size_t i = 0; l->st && i < l->p->n; i++)
        free(l->st[i].output);
    free(l->st);
    for (size_t i = 0; i < l->n_keys; i++)
        free(l->keys[i].key);
    free(l->keys);
    orch_plan_free(l->p);
}

static int checkpoint_hex(struct loop *l, char hex[65], struct fo_err *err)
{
    int64_t size = 0;
    uint8_t root[32];
    int rc = ledger_tree_head(l->w->ledger, &size, root, err);
    if (!rc)
        fo_hex(root, 32, hex);
    return rc;
}

static cJSON *tasks_json(const struct loop *l, int *all_pass, int *unjudged)
{
    cJSON *a = cJSON_CreateArray();
    *all_pass = 1;
    *unjudged = 0;
    for (size_t i = 0; a && l->p && l->st && i < l->p->n; i++) {
        size_t t = l->p->order[i];
        const struct tstate *s = &l->st[t];
        const struct orch_task *k = &l->p->tasks[t];
        const char *state = s->status == ST_REFUSED   ? "refused"
                            : s->status == ST_SKIPPED ? "skipped"
                            : s->status == ST_PENDING ? "not_run"
                            : s->pass                 ? "passed"
                            : s->unjudged             ? "unjudged"
                                                      : "failed";
        *all_pass &= s->pass;
        *unjudged += s->unjudged;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddStringToObject(e, "id", k->id) ||
            !cJSON_AddStringToObject(e, "agent", k->agent) ||
            !cJSON_AddStringToObject(e, "state", state) ||
            !cJSON_AddBoolToObject(e, "pass", s->pass) ||
            (s->status == ST_DONE &&
             (!cJSON_AddStringToObject(e, "model", s->model) ||
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

/* The run from its request on: request_seq < 0 holds this process's lock
 * file, writes the request entry with the instance and registers the run
 * (orch_submit), else that entry is already on record and live (may be
 * NULL) is the run in the registry. */
static int submit_run(const struct orch *o, const struct orch_witness *w,
                      int64_t request_seq, const char *request,
                      const struct orch_submit_opts *opts,
                      struct orch_live *live, cJSON **out, struct fo_err *err)
{
    struct loop l;
    char *answer = NULL;
    cJSON *cov = NULL, *res = NULL;
    char model[ORCH_MODEL_MAX + 1] = "";
    int64_t answer_seq = -1;
    int budget = 0;
    struct orch_live own;
    int entered = 0;
    int rc = loop_init(&l, o, w, request, opts, err);
    if (rc)
        return rc;
    if (request_seq < 0) {
        char inst[ORCH_INSTANCE_HEX + 1];
        rc = orch_runs_hold(o, ledger_dir(w->ledger), inst, &own, err);
        if (rc) {
            loop_release(&l);
            return rc;
        }
        rc = request_entry(&l, "submit", inst, err);
        if (!rc) {
            own.seq = l.request_seq;
            orch_runs_enter(o, &own);
            entered = 1;
            l.live = &own;
        }
    } else {
        l.request_seq = request_seq;
        l.last_seq = request_seq;
        l.live = live;
    }
    if (!rc)
        rc = route_frame(&l, err);
    if (!rc)
        rc = make_plan(&l, err);
    if (!rc) {
        l.st = calloc(l.p->n, sizeof(*l.st));
        if (!l.st)
            rc = nomem(err);
        for (size_t i = 0; l.st && i < l.p->n; i++) {
            l.st[i].task_seq = l.st[i].result_seq = l.st[i].verdict_seq = -1;
            l.st[i].tier = -1;
            l.st[i].dup_of = -1;
        }
    }
    if (!rc)
        rc = dispatch(&l, err);
    if (!rc)
        rc = synthesize(&l, &answer, model, err);
    if (rc == FO_E_BUDGET) {
        budget = 1;
        rc = budget_entry(&l, err);
        if (!rc)
            rc = answer_entry(&l, stop_answer(&l), NULL, NULL, 1, &answer_seq,
                              err);
    } else if (!rc) {
        cov = coverage(request, answer);
        rc = cov ? answer_entry(&l, answer, model, cov, 0, &answer_seq, err)
                 : nomem(err);
    }
    char hex[65];
    if (!rc)
        rc = checkpoint_hex(&l, hex, err);
    if (!rc) {
        int all_pass = 0, unjudged = 0;
        cJSON *tasks = tasks_json(&l, &all_pass, &unjudged);
        res = cJSON_CreateObject();
        int ok = res && tasks &&
                 cJSON_AddStringToObject(res, "answer",
                                         budget ? stop_answer(&l) : answer) &&
                 cJSON_AddStringToObject(res, "checkpoint", hex) &&
                 fo_json_add_int(res, "request_seq", l.request_seq) &&
                 fo_json_add_int(res, "answer_seq", answer_seq) &&
                 (l.plan_seq < 0
                      ? cJSON_AddNullToObject(res, "plan_seq") != NULL
                      : fo_json_add_int(res, "plan_seq", l.plan_seq) != NULL) &&
                 cJSON_AddStringToObject(res, "lane", l.lane ? l.lane : "") &&
                 cJSON_AddBoolToObject(res, "ok", !budget && l.p && all_pass) &&
                 cJSON_AddBoolToObject(res, "budget_spent", budget) &&
                 (!budget || cJSON_AddStringToObject(res, "budget_reason",
                                                     l.budget_reason)) &&
                 fo_json_add_int(res, "unjudged", unjudged) &&
                 cJSON_AddBoolToObject(res, "models", o->models != NULL) &&
                 fo_json_add_int(res, "model_calls", l.calls) &&
                 fo_json_add_int(res, "escalations", l.escalations) &&
                 (budget ? cJSON_AddNullToObject(res, "coverage") != NULL
                         : cJSON_AddItemToObject(res, "coverage",
                                                 cJSON_Duplicate(cov, 1)));
        if (ok) {
            cJSON_AddItemToObject(res, "tasks", tasks);
            tasks = NULL;
            *out = res;
            res = NULL;
        } else {
            rc = nomem(err);
        }
        cJSON_Delete(tasks);
    }
    if (rc)
        error_entry(&l, err);
    if (entered) /* its end is on record (or could not be written) */
        orch_runs_leave(o, &own);
    cJSON_Delete(res);
    cJSON_Delete(cov);
    free(answer);
    loop_release(&l);
    return rc;
}

int orch_submit(const struct orch *o, const struct orch_witness *w,
                const char *request, const struct orch_submit_opts *opts,
                cJSON **out, struct fo_err *err)
{
    return submit_run(o, w, -1, request, opts, NULL, out, err);
}

int orch_submit_live(const struct orch *o, const struct orch_witness *w,
                     int64_t request_seq, const char *request,
                     const struct orch_submit_opts *opts,
                     struct orch_live *live, cJSON **out, struct fo_err *err)
{
    if (request_seq < 0)
        return fo_err_set(err, FO_E_INVALID, "request_seq: must be >= 0");
    return submit_run(o, w, request_seq, request, opts, live, out, err);
}

int orch_submit_from(const struct orch *o, const struct orch_witness *w,
                     int64_t request_seq, const char *request,
                     const struct orch_submit_opts *opts, cJSON **out,
                     struct fo_err *err)
{
    return orch_submit_live(o, w, request_seq, request, opts, NULL, out, err);
}

int orch_plan_request(const struct orch *o, const struct orch_witness *w,
                      const char *request, cJSON **out, struct fo_err *err)
{
    struct loop l;
    int rc = loop_init(&l, o, w, request, NULL, err);
    if (rc)
        return rc;
    rc = request_entry(&l, "plan", NULL, err);
    if (!rc)
        rc = route_frame(&l, err);
    if (!rc)
        rc = make_plan(&l, err);
    if (rc == FO_E_BUDGET && orch_runs_stopping(o))
        rc = fo_err_set(err, FO_E_DRAINING, "plan: the daemon is stopping");
    else if (rc == FO_E_BUDGET) /* cannot be: the default ceiling is > 3 */
        rc = fo_err_set(err, FO_E_INTERNAL, "plan: budget spent");
    cJSON *res = NULL;
    if (!rc) {
        res = cJSON_CreateObject();
        cJSON *pj = orch_plan_json(l.p);
        int ok = res && pj && cJSON_AddStringToObject(res, "lane", l.lane) &&
                 cJSON_AddStringToObject(res, "lane_by", l.lane_by) &&
                 cJSON_AddStringToObject(res, "model", l.plan_model) &&
                 fo_json_add_int(res, "attempts", l.plan_attempts) &&
                 fo_json_add_int(res, "request_seq", l.request_seq) &&
                 fo_json_add_int(res, "plan_seq", l.plan_seq);
        if (ok) {
            cJSON_AddItemToObject(res, "plan", pj);
            *out = res;
            res = NULL;
        } else {
            cJSON_Delete(pj);
            rc = nomem(err);
        }
    }
    if (rc)
        error_entry(&l, err);
    cJSON_Delete(res);
    loop_release(&l);
    return rc;
}
