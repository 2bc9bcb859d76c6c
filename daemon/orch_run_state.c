/* orch_run_state: the reducer. A run is what its witnessed entries fold
 * to: apply() takes one entry into struct run (no I/O, no clock), the same
 * way live, on resume and for every view. */
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

static void attempts_release(struct attempts *a);
static long task_by_id(const struct run *r, const char *id);
static long task_by_result(const struct run *r, int64_t seq);
static int bad(struct fo_err *err, int64_t seq, const char *what);
static long gate_by_req(const struct run *r, int64_t seq);
static int wave_has(const struct run *r, size_t wave, long t);
static int apply_gate(struct run *r, const char *kind, int64_t seq,
                      int64_t parent, const cJSON *b, struct fo_err *err);
static void attempts_note(struct attempts *a, const cJSON *b);
static const struct orch_exec_config *
exec_named(const struct run *r, const struct orch_lane *ln, const cJSON *b);
static int apply_plan(struct run *r, int64_t seq, const char *actor,
                      const cJSON *b, struct fo_err *err);
static int apply_task(struct run *r, int64_t seq, int64_t parent,
                      const cJSON *b, struct fo_err *err);
static int apply_result(struct run *r, int64_t seq, int64_t parent,
                        const cJSON *b, struct fo_err *err);
static int apply_verdict(struct run *r, int64_t seq, int64_t parent,
                         const cJSON *b, struct fo_err *err);
static int apply_escalation(struct run *r, int64_t seq, int64_t parent,
                            const cJSON *b, struct fo_err *err);
static int apply_conv(struct run *r, const char *kind, int64_t seq,
                      int64_t parent, const cJSON *b, struct fo_err *err);

char *oe_dispatch_key(const struct orch_task *k,
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

void oe_gate_off_free(struct gate_off *g)
{
    free(g->body);
    cJSON_Delete(g->held);
    free(g);
}

struct role_call_ctx;

const char *oe_run_lane(const struct run *r)
{
    return r->lane;
}

/* What the models are asked: the request, after the session's context
 * when the run is a turn of one. */
const char *oe_run_prompt(const struct run *r)
{
    return r->prompt ? r->prompt : r->request;
}

const char *oe_run_request(const struct run *r)
{
    return r->request;
}

int oe_nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

static void attempts_release(struct attempts *a)
{
    free(a->last);
    a->last = NULL;
}

void oe_run_free(struct run *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->t && r->p && i < r->p->n; i++) {
        free(r->t[i].output);
        cJSON_Delete(r->t[i].failed);
        attempts_release(&r->t[i].val);
        cJSON_Delete(r->t[i].conv);
        cJSON_Delete(r->t[i].pending);
        free(r->t[i].pending_text);
        free(r->t[i].mem_value);
        free(r->t[i].raw_args);
        cJSON_Delete(r->t[i].forge_note);
    }
    free(r->t);
    if (r->end_retry)
        event_free(r->end_retry);
    if (r->ws_fd >= 0)
        close(r->ws_fd);
    free(r->ws_path);
    free(r->g);
    cJSON_Delete(r->gates);
    free(r->session);
    cJSON_Delete(r->cmp_replaces);
    cJSON_Delete(r->cmp_runs);
    free(r->context);
    free(r->prompt);
    attempts_release(&r->judge_att);
    oe_capsule_drop(r);
    oe_reads_drop(r);
    cJSON_Delete(r->intent);
    cJSON_Delete(r->profile_check);
    cJSON_Delete(r->lane_claim);
    cJSON_Delete(r->checkpoints);
    for (size_t i = 0; i < r->n_keys; i++)
        free(r->keys[i].key);
    free(r->keys);
    orch_plan_free(r->p);
    cJSON_Delete(r->given);
    attempts_release(&r->cls);
    attempts_release(&r->coord);
    free(r->request);
    free(r->answer);
    cJSON_Delete(r->coverage);
    free(r);
}

struct run *oe_run_find(const struct orch_engine *e, int64_t id)
{
    for (struct run *r = e->runs; r; r = r->next)
        if (r->id == id && id >= 0)
            return r;
    return NULL;
}

void oe_run_unlink(struct run *r)
{
    struct orch_engine *e = r->e;
    if (r->prev)
        r->prev->next = r->next;
    else
        e->runs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    e->n_runs--;
}

static long task_by_id(const struct run *r, const char *id)
{
    for (size_t i = 0; r->p && id && i < r->p->n; i++)
        if (!strcmp(r->p->tasks[i].id, id))
            return (long)i;
    return -1;
}

static long task_by_result(const struct run *r, int64_t seq)
{
    for (size_t i = 0; r->t && i < r->p->n; i++)
        if (r->t[i].result_seq == seq)
            return (long)i;
    return -1;
}

/* ---- apply: an entry of the run into its state -------------------------- */

const char *oe_str_of(const cJSON *b, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int bad(struct fo_err *err, int64_t seq, const char *what)
{
    return fo_err_set(err, FO_E_CORRUPT, "run history: entry %lld: %s",
                      (long long)seq, what);
}

static long gate_by_req(const struct run *r, int64_t seq)
{
    for (size_t w = 0; r->g && w < r->p->n_waves; w++)
        if (r->g[w].st >= G_PENDING && r->g[w].req_seq == seq)
            return (long)w;
    return -1;
}

/* 1 when a gate of the run was rejected (or expired into rejection). */
int oe_gate_rejected(const struct run *r)
{
    for (size_t w = 0; r->g && w < r->p->n_waves; w++)
        if (r->g[w].st == G_REJECTED)
            return 1;
    return 0;
}

static int wave_has(const struct run *r, size_t wave, long t)
{
    const struct orch_plan *p = r->p;
    for (size_t i = p->wave_start[wave]; i < p->wave_start[wave + 1]; i++)
        if ((long)p->order[i] == t)
            return 1;
    return 0;
}

/* Checks edits ({task id: instruction}) against the tasks of wave. */
int oe_edits_check(const struct run *r, size_t wave, const cJSON *edits,
                   struct fo_err *err)
{
    if (!cJSON_IsObject(edits) || !edits->child)
        return fo_err_set(err, FO_E_INVALID,
                          "edits: must be an object of {task id: "
                          "instruction}, not empty");
    const cJSON *x;
    cJSON_ArrayForEach (x, edits) {
        long t = task_by_id(r, x->string);
        if (t < 0 || !wave_has(r, wave, t))
            return fo_err_set(err, FO_E_INVALID,
                              "edits: task \"%.64s\" is not in wave %zu",
                              x->string, wave);
        if (!cJSON_IsString(x) || !*x->valuestring ||
            strlen(x->valuestring) > ORCH_GATE_EDIT_MAX)
            return fo_err_set(err, FO_E_INVALID,
                              "edits.%.64s: must be an instruction of 1..%d "
                              "bytes",
                              x->string, ORCH_GATE_EDIT_MAX);
    }
    return FO_OK;
}

/* A gate's entries into the run's state. The first decision on record
 * counts; later ones change nothing. */
static int apply_gate(struct run *r, const char *kind, int64_t seq,
                      int64_t parent, const cJSON *b, struct fo_err *err)
{
    if (!strcmp(kind, "gate_requested")) {
        long long w = 0;
        if (!r->g || fo_json_get_int(b, "wave", 0, (long long)r->p->n_waves - 1,
                                     &w) != FO_OK)
            return bad(err, seq, "a gate of no wave of the plan");
        long long dl = 0;
        if (fo_json_get_int(b, "deadline_ms", 0, INT64_MAX / 2, &dl) != FO_OK)
            return bad(err, seq, "a gate without its deadline");
        struct gate *g = &r->g[w];
        if (g->st >= G_PENDING)
            return FO_OK; /* asked twice: the first counts */
        g->st = G_PENDING;
        g->writing = 0;
        g->req_seq = seq;
        g->req_ts_us = r->cur_ts;
        g->deadline_ms = dl;
        const char *ox = oe_str_of(b, "on_expiry");
        g->approve_on_expiry = ox && !strcmp(ox, "approve");
        return FO_OK;
    }
    long w = gate_by_req(r, parent);
    if (w < 0)
        return bad(err, seq, "a gate decision of no gate");
    struct gate *g = &r->g[w];
    if (g->st != G_PENDING)
        return FO_OK;
    int approve = 1;
    if (!strcmp(kind, "gate_edited")) {
        const cJSON *edits = cJSON_GetObjectItemCaseSensitive(b, "edits");
        struct fo_err why;
        if (oe_edits_check(r, (size_t)w, edits, &why))
            return bad(err, seq, why.msg);
        const cJSON *x;
        cJSON_ArrayForEach (x, edits) {
            struct orch_task *k = &r->p->tasks[task_by_id(r, x->string)];
            char *s = orch_strdup(x->valuestring);
            if (!s)
                return oe_nomem(err);
            free(k->instruction);
            k->instruction = s;
        }
    } else if (!strcmp(kind, "gate_rejected")) {
        approve = 0;
    } else if (!strcmp(kind, "gate_expired")) {
        const char *a = oe_str_of(b, "action");
        approve = a && !strcmp(a, "approved");
    }
    g->st = approve ? G_APPROVED : G_REJECTED;
    g->writing = 0;
    g->decided_seq = seq;
    if (r->cur_ts > g->req_ts_us)
        r->wait_us += r->cur_ts - g->req_ts_us;
    if (!approve) {
        char before[32];
        snprintf(before, sizeof(before), "wave %ld", w);
        oe_set_halt(r, H_GATE,
                    kind[5] == 'e' ? "gate_expired" : "gate_rejected", before);
    }
    return FO_OK;
}

static void attempts_note(struct attempts *a, const cJSON *b)
{
    a->n++;
    free(a->last);
    const char *reply = oe_str_of(b, "reply"), *why = oe_str_of(b, "error");
    a->last = orch_strdup(reply ? reply : "");
    snprintf(a->why, sizeof(a->why), "%s", why ? why : "");
}

/* The executor a task entry names: its api and tier when it is a model
 * tier, else the lane's. */
static const struct orch_exec_config *
exec_named(const struct run *r, const struct orch_lane *ln, const cJSON *b)
{
    const struct orch *o = r->e->o;
    const char *ex = oe_str_of(b, "executor"), *tier = oe_str_of(b, "tier");
    int a = ex && !strcmp(ex, "anthropic") ? 1
            : ex && !strcmp(ex, "chat")    ? 0
                                           : -1;
    if (a >= 0 && tier && o->models)
        for (int t = 0; t < 3; t++)
            if (!strcmp(tier, orch_tier_name(t)) && o->model_has[a][t])
                return &o->model_exec[a][t];
    return orch_exec_for_lane(o, ln);
}

static int apply_plan(struct run *r, int64_t seq, const char *actor,
                      const cJSON *b, struct fo_err *err)
{
    struct orch_plan *p = NULL;
    cJSON *given = cJSON_CreateObject();
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(b, "tasks");
    if (!given || !tasks ||
        !cJSON_AddItemToObject(given, "tasks", cJSON_Duplicate(tasks, 1))) {
        cJSON_Delete(given);
        return tasks ? oe_nomem(err) : bad(err, seq, "a plan without tasks");
    }
    int rc = orch_plan_compile(given, orch_roster(r->e->o), &p, err);
    cJSON_Delete(given);
    if (rc)
        return rc == FO_E_NOMEM ? rc : bad(err, seq, err->msg);
    r->t = calloc(p->n ? p->n : 1, sizeof(*r->t));
    if (!r->t) {
        orch_plan_free(p);
        return oe_nomem(err);
    }
    for (size_t i = 0; i < p->n; i++) {
        struct task *s = &r->t[i];
        s->task_seq = s->result_seq = s->verdict_seq = s->esc_seq = -1;
        s->tier = -1;
        s->dup_of = -1;
        s->exit_code = -1;
        s->await = -1;
    }
    free(r->g);
    r->g = NULL;
    if (r->gates &&
        !(r->g = calloc(p->n_waves ? p->n_waves : 1, sizeof(*r->g)))) {
        orch_plan_free(p);
        return oe_nomem(err);
    }
    orch_plan_free(r->p);
    r->p = p;
    r->plan_seq = seq;
    r->wave = 0;
    r->phase = !strcmp(r->via, "plan") ? PH_END : PH_WAVES;
    snprintf(r->plan_model, sizeof(r->plan_model), "%s",
             oe_str_of(b, "model") ? oe_str_of(b, "model") : "");
    if (!strcmp(actor, "coordinator"))
        r->calls++;
    return FO_OK;
}

static int apply_task(struct run *r, int64_t seq, int64_t parent,
                      const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, oe_str_of(b, "id"));
    if (t < 0 || r->phase != PH_WAVES)
        return bad(err, seq, "a task that is not in the plan");
    struct task *s = &r->t[t];
    const struct orch_lane *ln =
        orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
    if (!ln)
        return bad(err, seq, "a task on an unknown lane");
    if (parent != r->plan_seq && parent != s->esc_seq)
        return bad(err, seq, "a task whose parent is not its plan");
    s->ex = exec_named(r, ln, b);
    int api = -1, tier = -1;
    oe_model_slot(r->e->o, s->ex, &api, &tier);
    s->tier = tier;
    s->task_seq = seq;
    s->result_seq = -1;
    s->st = TS_RUN;
    s->slot = 1;
    cJSON_Delete(s->conv);
    cJSON_Delete(s->pending);
    cJSON_Delete(s->forge_note);
    free(s->pending_text);
    s->conv = s->pending = s->forge_note = NULL;
    s->pending_text = NULL;
    s->conv_last = seq;
    s->await = -1;
    s->turn = s->turn_seen = s->n_calls = s->bad_calls = s->blocked = 0;
    /* the wave the task is in is the one that runs (resume) */
    for (size_t w = 0; w < r->p->n_waves; w++)
        for (size_t i = r->p->wave_start[w]; i < r->p->wave_start[w + 1]; i++)
            if (r->p->order[i] == (size_t)t && w > r->wave)
                r->wave = w;
    char *key = oe_dispatch_key(&r->p->tasks[t], s->ex);
    if (!key)
        return oe_nomem(err);
    if (oe_key_seen(r, key) >= 0)
        free(key);
    else if (oe_key_add(r, key, (size_t)t))
        return oe_nomem(err);
    if (s->ex->kind != ORCH_EXEC_STUB)
        r->calls++;
    return FO_OK;
}

static int apply_result(struct run *r, int64_t seq, int64_t parent,
                        const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].st != TS_RUN ||
        (r->t[t].task_seq != parent && r->t[t].conv_last != parent))
        return bad(err, seq, "a result without its task");
    struct task *s = &r->t[t];
    const char *out = oe_str_of(b, "output"), *model = oe_str_of(b, "model");
    long long turns = 0;
    if (fo_json_get_int(b, "turns", 1, 1000000, &turns) == FO_OK &&
        turns >= 2 && turns > s->turn_seen)
        r->calls++; /* the turn that answered (the first is the task's) */
    s->slot = 0;
    s->result_seq = seq;
    s->ran_ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok"));
    long long ec = 0;
    s->exit_code = fo_json_get_int(b, "exit_code", -1, 255, &ec) == FO_OK
                       ? (int)ec
                       : (s->ran_ok ? 0 : -1);
    snprintf(s->model, sizeof(s->model), "%s", model ? model : "");
    free(s->output);
    s->output = NULL;
    s->output_len = 0;
    if (s->ran_ok && out) {
        s->output = orch_strdup(out);
        if (!s->output)
            return oe_nomem(err);
        s->output_len = strlen(out);
    }
    s->st = TS_RESULT;
    s->revised = 0;
    s->val.n = 0;
    attempts_release(&s->val);
    return FO_OK;
}

static int apply_verdict(struct run *r, int64_t seq, int64_t parent,
                         const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].result_seq != parent || r->t[t].st != TS_RESULT)
        return bad(err, seq, "a verdict without its result");
    struct task *s = &r->t[t];
    const char *by = oe_str_of(b, "by");
    s->verdict_seq = seq;
    s->pass = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "pass"));
    s->unjudged = by && !strcmp(by, "unjudged");
    if (by && !strcmp(by, "validator") && oe_str_of(b, "model"))
        r->calls++;
    cJSON_Delete(s->failed);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(b, "failed");
    s->failed = cJSON_IsArray(f) ? cJSON_Duplicate(f, 1) : cJSON_CreateArray();
    if (!s->failed)
        return oe_nomem(err);
    /* a failed check: a same-tier retry while the lane allows one, then
     * the next tier */
    s->st = !s->pass && !s->unjudged &&
                    (oe_retry_left(r, (size_t)t) || oe_next_tier(r, (size_t)t))
                ? TS_VERDICT
                : TS_FINAL;
    const struct orch_lane *ln = oe_task_lane(r, (size_t)t);
    if (s->pass && (ln->verifier.argv || ln->verifier.url))
        s->st = TS_VERIFY; /* then the lane's verifier */
    return FO_OK;
}

static int apply_escalation(struct run *r, int64_t seq, int64_t parent,
                            const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].verdict_seq != parent)
        return bad(err, seq, "an escalation without its verdict");
    struct task *s = &r->t[t];
    const char *to = oe_str_of(b, "to");
    int api = -1, tier = -1;
    if (!s->ex || oe_model_slot(r->e->o, s->ex, &api, &tier) != 0 || !to)
        return bad(err, seq, "an escalation of a task not on a model tier");
    const struct orch_exec_config *next = NULL;
    for (int up = 0; up < 3; up++)
        if (!strcmp(to, orch_tier_name(up)) && r->e->o->model_has[api][up])
            next = &r->e->o->model_exec[api][up];
    if (!next)
        return bad(err, seq, "an escalation to a tier with no provider");
    s->ex = next;
    s->esc_seq = seq;
    s->st = TS_ESC;
    s->retries = 0; /* a new tier gets its own retries */
    r->escalations++;
    return FO_OK;
}

/* A same-tier retry: the task again on its executor (orch_judge.c). */
static int apply_retry(struct run *r, int64_t seq, int64_t parent,
                       const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].verdict_seq != parent || r->t[t].st != TS_VERDICT)
        return bad(err, seq, "a retry without its failed verdict");
    struct task *s = &r->t[t];
    s->esc_seq = seq;
    s->st = TS_ESC;
    s->retries++;
    r->retries++;
    return FO_OK;
}

/* A step of a task's tool loop: kept for the next model turn. */
static int apply_conv(struct run *r, const char *kind, int64_t seq,
                      int64_t parent, const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].st != TS_RUN)
        return bad(err, seq, "a tool step of no running task");
    struct task *s = &r->t[t];
    int result = !strcmp(kind, "tool_result");
    if (result ? parent != s->await : parent != s->conv_last)
        return bad(err, seq, "a tool step out of order");
    long long turn = 0;
    if (!result) {
        if (fo_json_get_int(b, "turn", 1, 1000000, &turn) != FO_OK)
            return bad(err, seq, "a tool step without its turn");
        if (turn > s->turn_seen) {
            if (turn >= 2)
                r->calls++; /* the model turn it witnesses */
            s->turn_seen = (int)turn;
        }
        if (turn > s->turn)
            s->turn = (int)turn;
    }
    cJSON *c = cJSON_Duplicate(b, 1);
    if (!c || (!s->conv && !(s->conv = cJSON_CreateArray())) ||
        !cJSON_AddStringToObject(c, "k", kind)) {
        cJSON_Delete(c);
        return oe_nomem(err);
    }
    cJSON_AddItemToArray(s->conv, c);
    s->conv_last = seq;
    if (!strcmp(kind, "tool_call")) {
        s->await = seq;
        s->n_calls++;
    } else if (result) {
        s->await = -1;
        s->bad_calls = cJSON_IsTrue(cJSON_GetObjectItem(b, "rejected"))
                           ? s->bad_calls + 1
                           : 0;
        if (cJSON_IsTrue(cJSON_GetObjectItem(b, "blocked")))
            s->blocked = 1;
    } else if (oe_str_of(b, "reason") &&
               !strcmp(oe_str_of(b, "reason"), "malformed_tool_call")) {
        s->bad_calls++; /* a call written as text that could not be read */
    }
    return FO_OK;
}

int oe_apply(struct run *r, const char *actor, const char *kind, int64_t seq,
             int64_t parent, const cJSON *b, struct fo_err *err)
{
    if (!strcmp(kind, "fact") || !strcmp(kind, "fact_forgotten"))
        return FO_OK; /* a session's (the remember and forget tools) */
    if (!strcmp(kind, "compaction")) { /* under the session, seen live */
        r->compacted = 1;
        r->calls++;
        return FO_OK;
    }
    r->last_seq = seq;
    if (!strcmp(kind, "route")) {
        const struct orch_lane *ln =
            orch_roster_find(orch_roster(r->e->o), oe_str_of(b, "lane"));
        if (!ln)
            return bad(err, seq, "a route to an unknown lane");
        r->lane = ln->name;
        snprintf(r->lane_by, sizeof(r->lane_by), "%s",
                 oe_str_of(b, "by") ? oe_str_of(b, "by") : "");
        if (!strcmp(r->lane_by, "classifier"))
            r->calls++;
        r->route_seq = seq;
        r->phase = PH_PLAN;
    } else if (!strcmp(kind, "classifier_attempt")) {
        attempts_note(&r->cls, b);
        r->calls++;
    } else if (!strcmp(kind, "coordinator_attempt")) {
        attempts_note(&r->coord, b);
        r->calls++;
    } else if (!strcmp(kind, "plan")) {
        return apply_plan(r, seq, actor, b, err);
    } else if (!strcmp(kind, "task")) {
        return apply_task(r, seq, parent, b, err);
    } else if (!strcmp(kind, "result")) {
        return apply_result(r, seq, parent, b, err);
    } else if (!strcmp(kind, "tool_call") || !strcmp(kind, "tool_result") ||
               !strcmp(kind, "tool_rescue")) {
        return apply_conv(r, kind, seq, parent, b, err);
    } else if (!strcmp(kind, "validator_attempt")) {
        long t = task_by_result(r, parent);
        if (t < 0)
            return bad(err, seq, "a validator attempt without its result");
        attempts_note(&r->t[t].val, b);
        r->calls++;
    } else if (!strcmp(kind, "verdict")) {
        return apply_verdict(r, seq, parent, b, err);
    } else if (!strcmp(kind, "tier_escalation")) {
        return apply_escalation(r, seq, parent, b, err);
    } else if (!strcmp(kind, "revision")) {
        return oe_apply_revision(r, seq, parent, b, err);
    } else if (!strcmp(kind, "verification")) {
        return oe_apply_verification(r, seq, parent, b, err);
    } else if (!strcmp(kind, "retry")) {
        return apply_retry(r, seq, parent, b, err);
    } else if (!strcmp(kind, "judge_attempt")) {
        attempts_note(&r->judge_att, b);
        r->calls++;
    } else if (!strcmp(kind, "intent_judgment")) {
        return oe_apply_judgment(r, seq, b, err);
    } else if (!strcmp(kind, "lane_route") || !strcmp(kind, "lane_rejection")) {
        return oe_apply_lane(r, seq, kind, b, err);
    } else if (!strcmp(kind, "delivery_profile_check")) {
        return oe_apply_profile_check(r, seq, b, err);
    } else if (!strcmp(kind, "wave_checkpoint")) {
        return oe_apply_wave_cp(r, seq, b, err);
    } else if (!strcmp(kind, "request")) {
        oe_request_opts(r, b);
    } else if (!strcmp(kind, "refusal") || !strcmp(kind, "skip")) {
        long t = task_by_id(r, oe_str_of(b, "id"));
        if (t < 0)
            return bad(err, seq, "a refusal or skip of no task");
        struct task *s = &r->t[t];
        s->result_seq = seq;
        if (kind[0] == 'r') {
            s->st = TS_REFUSED;
        } else {
            s->st = TS_SKIPPED;
            s->dup_of = task_by_id(r, oe_str_of(b, "duplicate_of"));
            if (s->dup_of < 0)
                return bad(err, seq, "a skip of no task");
        }
    } else if (!strncmp(kind, "gate_", 5) && (!strcmp(kind, "gate_requested") ||
                                              !strcmp(kind, "gate_approved") ||
                                              !strcmp(kind, "gate_edited") ||
                                              !strcmp(kind, "gate_rejected") ||
                                              !strcmp(kind, "gate_expired"))) {
        return apply_gate(r, kind, seq, parent, b, err);
    } else if (!strcmp(kind, "session_started")) {
        if (r->creating_session) {
            r->creating_session = 0;
            r->session_start = seq;
        }
    } else if (!strcmp(kind, "turn")) {
        r->turn_seq = seq;
        if (r->phase == PH_CONTEXT)
            r->phase = r->after_context;
    } else if (!strcmp(kind, "budget")) {
        r->budget_seq = seq;
        r->budget_spent = 1;
        if (!r->halt) {
            r->halt = H_BUDGET;
            const char *why = oe_str_of(b, "reason");
            r->halt_reason = !why                            ? "max_model_calls"
                             : !strcmp(why, "cancelled")     ? "cancelled"
                             : !strcmp(why, "shutdown")      ? "shutdown"
                             : !strcmp(why, "max_seconds")   ? "max_seconds"
                             : !strcmp(why, "gate_rejected") ? "gate_rejected"
                             : !strcmp(why, "gate_expired")  ? "gate_expired"
                                                            : "max_model_calls";
        }
    } else if (!strcmp(kind, "answer")) {
        const char *a = oe_str_of(b, "answer"), *m = oe_str_of(b, "model");
        free(r->answer);
        r->answer = orch_strdup(a ? a : "");
        if (!r->answer)
            return oe_nomem(err);
        snprintf(r->answer_model, sizeof(r->answer_model), "%s", m ? m : "");
        if (m && !r->budget_spent)
            r->calls++;
        cJSON_Delete(r->coverage);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "coverage");
        r->coverage = c ? cJSON_Duplicate(c, 1) : NULL;
        r->answer_seq = seq;
        /* the delivery profile's check, then the intent judge, when asked */
        r->phase = r->budget_spent ? PH_END
                   : r->profile[0] ? PH_PROFILE
                   : r->judge      ? PH_JUDGE
                                   : PH_END;
    } else if (!strcmp(kind, "error")) {
        const char *msg = oe_str_of(b, "error");
        if (!r->failed_rc) {
            r->failed_rc = FO_E_INTERNAL;
            fo_err_set(&r->err, FO_E_INTERNAL, "%s", msg ? msg : "error");
        }
        r->phase = PH_END;
    }
    /* request, stop, resume and entries of other kinds change nothing */
    return FO_OK;
}

/* ---- the state as a view ------------------------------------------------ */

static const char *task_state_name(const struct task *s)
{
    switch (s->st) {
    case TS_PENDING:
        return "pending";
    case TS_RUN:
        return "running";
    case TS_RESULT:
        return "judging";
    case TS_VERIFY:
        return "verifying";
    case TS_VERDICT:
    case TS_ESC:
        return "escalated";
    case TS_REFUSED:
        return "refused";
    case TS_SKIPPED:
        return "skipped";
    default:
        return s->pass ? "passed" : s->unjudged ? "unjudged" : "failed";
    }
}

static const char *phase_name(int phase)
{
    static const char *const names[] = {"context", "route",     "plan",
                                        "waves",   "synthesis", "profile",
                                        "judge",   "end"};
    return phase >= 0 && phase <= PH_END ? names[phase] : "unknown";
}

static int add_seq(cJSON *o, const char *k, int64_t seq)
{
    return seq >= 0 ? fo_json_add_int(o, k, seq) != NULL
                    : cJSON_AddNullToObject(o, k) != NULL;
}

cJSON *oe_run_view(const struct run *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = o ? cJSON_AddArrayToObject(o, "tasks") : NULL;
    cJSON *gates = o ? cJSON_AddArrayToObject(o, "gates") : NULL;
    int ok = tasks && gates &&
             cJSON_AddStringToObject(o, "phase", phase_name(r->phase)) &&
             (r->lane ? cJSON_AddStringToObject(o, "lane", r->lane) != NULL
                      : cJSON_AddNullToObject(o, "lane") != NULL) &&
             add_seq(o, "plan_seq", r->plan_seq) &&
             fo_json_add_int(o, "model_calls", r->calls) &&
             fo_json_add_int(o, "escalations", r->escalations) &&
             add_seq(o, "answer_seq", r->answer_seq) &&
             add_seq(o, "budget_seq", r->budget_seq) &&
             cJSON_AddBoolToObject(o, "budget_spent", r->budget_spent);
    for (size_t i = 0; ok && r->p && r->t && i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddStringToObject(x, "id", k->id) &&
             cJSON_AddStringToObject(x, "agent", k->agent) &&
             cJSON_AddStringToObject(x, "instruction", k->instruction) &&
             cJSON_AddStringToObject(x, "state", task_state_name(s)) &&
             add_seq(x, "task_seq", s->task_seq) &&
             add_seq(x, "result_seq", s->result_seq) &&
             fo_json_add_int(x, "tool_calls", s->n_calls) &&
             (!s->model[0] || cJSON_AddStringToObject(x, "model", s->model));
        if (x)
            cJSON_AddItemToArray(tasks, x);
    }
    for (size_t w = 0; ok && r->g && r->p && w < r->p->n_waves; w++) {
        const struct gate *g = &r->g[w];
        if (g->st < G_PENDING)
            continue;
        cJSON *x = cJSON_CreateObject();
        ok =
            x && fo_json_add_int(x, "wave", (long long)w) &&
            cJSON_AddStringToObject(x, "state",
                                    g->st == G_PENDING    ? "waiting"
                                    : g->st == G_APPROVED ? "approved"
                                                          : "rejected") &&
            add_seq(x, "request_seq", g->req_seq) &&
            add_seq(x, "decided_seq", g->st == G_PENDING ? -1 : g->decided_seq);
        if (x)
            cJSON_AddItemToArray(gates, x);
    }
    if (ok && r->answer)
        ok = cJSON_AddStringToObject(o, "answer", r->answer) != NULL;
    if (ok)
        ok = oe_judgement_json(r, o) == FO_OK;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
