/* orch_dispatch: runs a compiled plan wave by wave and witnesses every
 * step: request → plan → task (or refusal) → result, each entry's parent
 * the step that caused it. Children run concurrently up to max_parallel,
 * polled from the calling thread, which alone writes to the ledger. */
#include "daemon/orch.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch_int.h"
#include "ledger/fo_json.h"

#define STDERR_KEEP (8u * 1024u)      /* stderr kept in a result entry */
#define RESPONSE_OUTPUT (64u * 1024u) /* output per task in the reply */

enum { ST_PENDING, ST_RUNNING, ST_OK, ST_FAILED, ST_REFUSED };

struct task_state {
    int status;
    int64_t task_seq, result_seq; /* -1 until written */
    char *output;                 /* ok output, for injection and reply */
    size_t output_len;
    char model[ORCH_MODEL_MAX + 1];
};

struct run {
    const struct orch *o;
    const struct orch_witness *w;
    struct orch_plan *p;
    struct task_state *st;
    struct orch_runner *runner, *stub;
    int64_t plan_seq;
    size_t active; /* jobs on runner */
};

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

int orch_witness_json(const struct orch_witness *w, const char *actor,
                      const char *kind, int64_t parent, const cJSON *payload,
                      int64_t *seq, struct fo_err *err)
{
    struct fo_buf body;
    fo_buf_init(&body, ledger_max_body(w->ledger));
    int rc = fo_json_canon(payload, &body, err);
    if (rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_TOO_LARGE,
                        "%s entry: over the ledger's %zu-byte body limit", kind,
                        ledger_max_body(w->ledger));
    if (!rc) {
        struct ledger_append req = {
            .actor = actor,
            .kind = kind,
            .parent = parent,
            .body = body.data ? body.data : "",
            .body_len = body.len,
        };
        rc = w->append ? w->append(w->hook, &req, err)
                       : ledger_append_batch(w->ledger, &req, 1, err);
        if (!rc && req.rc) {
            rc = req.rc;
            if (err)
                *err = req.err;
        }
        if (!rc && seq)
            *seq = req.entry.seq;
    }
    fo_buf_release(&body);
    return rc;
}

#define witness orch_witness_json

/* The prompt: the instruction, then each ok data upstream's output, capped
 * at inject_max with a marker. Failed and refused upstreams add nothing.
 * injected (an array) collects the ids that were added. */
static int build_prompt(struct run *r, size_t t, struct fo_buf *prompt,
                        cJSON *injected)
{
    const struct orch_task *k = &r->p->tasks[t];
    int rc = fo_buf_puts(prompt, k->instruction);
    for (size_t d = 0; !rc && d < k->n_deps; d++) {
        const struct task_state *u = &r->st[k->dep_index[d]];
        if (k->deps[d].type != ORCH_EDGE_DATA || u->status != ST_OK)
            continue;
        size_t n = orch_utf8_prefix(u->output, u->output_len, r->o->inject_max);
        rc = fo_buf_printf(prompt, "\n\n--- upstream %s output ---\n",
                           k->deps[d].id);
        if (!rc)
            rc = fo_buf_append(prompt, u->output, n);
        if (!rc && n < u->output_len)
            rc = fo_buf_printf(prompt,
                               "\n[forum: upstream output truncated at %zu of "
                               "%zu bytes]",
                               n, u->output_len);
        if (!rc)
            rc = fo_buf_printf(prompt, "\n--- end upstream %s ---",
                               k->deps[d].id);
        if (!rc) {
            cJSON *s = cJSON_CreateString(k->deps[d].id);
            if (!s)
                rc = FO_E_NOMEM;
            else
                cJSON_AddItemToArray(injected, s);
        }
    }
    return rc;
}

static const struct orch_exec_config *exec_for(const struct run *r,
                                               const struct orch_lane *l)
{
    /* the stub for "stub" lanes, a model executor by api and tier when
     * models are configured, else the executor the run was given */
    return orch_exec_for_lane(r->o, l);
}

int orch_witness_result(const struct orch_witness *w, const char *id,
                        const char *agent, int64_t parent,
                        const struct orch_result *res, int64_t *seq,
                        struct fo_err *err)
{
    size_t out_len = res->output_len;
    int rc;
    for (;;) {
        cJSON *o = cJSON_CreateObject();
        char *cut = NULL;
        size_t n = orch_utf8_prefix(res->output, res->output_len, out_len);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        rc = fo_buf_append(&b, res->output, n);
        if (!rc && n < res->output_len)
            rc = fo_buf_printf(&b,
                               "\n[forum: output cut to %zu of %zu bytes to "
                               "fit the ledger's body limit]",
                               n, res->output_len);
        cut = rc ? NULL : fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        size_t el = orch_utf8_prefix(res->errout, res->errout_len, STDERR_KEEP);
        char *errtail = malloc(el + 1);
        if (errtail) {
            if (el)
                memcpy(errtail, res->errout, el);
            errtail[el] = '\0';
        }
        int ok = o && cut && errtail && cJSON_AddStringToObject(o, "id", id) &&
                 cJSON_AddBoolToObject(o, "ok", res->ok) &&
                 cJSON_AddStringToObject(o, "output", cut) &&
                 cJSON_AddStringToObject(o, "model", res->model) &&
                 fo_json_add_int(o, "elapsed_ms", res->elapsed_us / 1000) &&
                 (res->ok ||
                  (cJSON_AddStringToObject(o, "error", res->error) &&
                   cJSON_AddBoolToObject(o, "timed_out", res->timed_out) &&
                   fo_json_add_int(o, "exit_code", res->exit_code))) &&
                 (!res->truncated || cJSON_AddTrueToObject(o, "truncated")) &&
                 (el == 0 || cJSON_AddStringToObject(o, "stderr", errtail));
        free(cut);
        free(errtail);
        rc = ok ? witness(w, agent, "result", parent, o, seq, err) : nomem(err);
        cJSON_Delete(o);
        if (rc != FO_E_TOO_LARGE || out_len == 0)
            break;
        out_len /= 2;
    }
    return rc;
}

/* Witnesses a result and keeps an ok output for downstream tasks. */
static int witness_result(struct run *r, size_t t, struct orch_result *res,
                          struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    struct task_state *s = &r->st[t];
    int rc = orch_witness_result(r->w, k->id, k->agent, s->task_seq, res,
                                 &s->result_seq, err);
    if (rc)
        return rc;
    s->status = res->ok ? ST_OK : ST_FAILED;
    snprintf(s->model, sizeof(s->model), "%s", res->model);
    if (res->ok) { /* keep the output for downstream tasks and the reply */
        s->output = res->output;
        s->output_len = res->output_len;
        res->output = NULL;
    }
    return FO_OK;
}

/* Waits for one job of the run's executor and witnesses its result. */
static int wait_one(struct run *r, struct orch_runner *runner,
                    struct fo_err *err)
{
    struct orch_result res;
    size_t tag;
    int rc = orch_runner_next(runner, &tag, &res, err);
    if (rc)
        return rc;
    if (runner == r->runner)
        r->active--;
    rc = witness_result(r, tag, &res, err);
    orch_result_release(&res);
    return rc;
}

static int refuse(struct run *r, size_t t, const struct orch_lane *l,
                  struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    cJSON *o = cJSON_CreateObject();
    int rc =
        o && cJSON_AddStringToObject(o, "id", k->id) &&
                cJSON_AddStringToObject(o, "agent", k->agent) &&
                cJSON_AddStringToObject(o, "category", l->category) &&
                cJSON_AddStringToObject(o, "reason", "category_not_allowed")
            ? witness(r->w, "policy", "refusal", r->plan_seq, o,
                      &r->st[t].result_seq, err)
            : nomem(err);
    cJSON_Delete(o);
    if (!rc)
        r->st[t].status = ST_REFUSED;
    return rc;
}

/* Witnesses the task and starts it. A job that cannot start (a missing
 * binary) becomes an ok:false result at once. */
static int start_task(struct run *r, size_t t, size_t wave,
                      const struct orch_lane *l, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    const struct orch_exec_config *ex = exec_for(r, l);
    struct orch_runner *runner = ex == &r->o->stub ? r->stub : r->runner;
    struct orch_runner *sync = NULL; /* a model job: done inside start */
    int rc;
    if (ex != &r->o->stub && ex != &r->o->exec) {
        rc = orch_runner_create(ex, &sync, err);
        if (rc)
            return rc;
        runner = sync;
    }
    struct fo_buf prompt;
    fo_buf_init(&prompt, FO_BUF_UNLIMITED);
    cJSON *o = cJSON_CreateObject();
    cJSON *inj = o ? cJSON_AddArrayToObject(o, "injected") : NULL;
    rc = inj ? build_prompt(r, t, &prompt, inj) : FO_E_NOMEM;
    if (rc) {
        rc = nomem(err);
        goto out;
    }
    int ok = cJSON_AddStringToObject(o, "id", k->id) &&
             cJSON_AddStringToObject(o, "agent", k->agent) &&
             cJSON_AddStringToObject(o, "instruction", k->instruction) &&
             (!k->done || cJSON_AddItemToObject(o, "done_when",
                                                cJSON_Duplicate(k->done, 1))) &&
             fo_json_add_int(o, "wave", (long long)wave) &&
             cJSON_AddStringToObject(o, "executor", orch_exec_name(ex->kind)) &&
             cJSON_AddStringToObject(o, "model", ex->model);
    if (!ok) {
        rc = nomem(err);
        goto out;
    }
    rc = witness(r->w, k->agent, "task", r->plan_seq, o, &r->st[t].task_seq,
                 err);
    if (rc)
        goto out;
    struct fo_err serr;
    fo_err_clear(&serr);
    int src = orch_runner_start(runner, t, prompt.data, &serr);
    if (src == FO_OK) {
        r->st[t].status = ST_RUNNING;
        if (runner == r->runner)
            r->active++;
        else
            rc = wait_one(r, runner, err); /* the stub is done at once */
    } else if (src == FO_E_NOMEM) {
        rc = fo_err_set(err, src, "%s", serr.msg);
    } else {
        struct orch_result res = {.exit_code = -1};
        snprintf(res.error, sizeof(res.error), "%s", serr.msg);
        snprintf(res.model, sizeof(res.model), "%s", ex->model);
        res.output = malloc(1);
        res.errout = malloc(1);
        if (!res.output || !res.errout) {
            rc = nomem(err);
        } else {
            res.output[0] = res.errout[0] = '\0';
            rc = witness_result(r, t, &res, err);
        }
        orch_result_release(&res);
    }
out:
    orch_runner_free(sync);
    cJSON_Delete(o);
    fo_buf_release(&prompt);
    return rc;
}

static int run_waves(struct run *r, struct fo_err *err)
{
    const struct orch_plan *p = r->p;
    size_t max = (size_t)r->o->max_parallel;
    for (size_t w = 0; w < p->n_waves; w++) {
        for (size_t i = p->wave_start[w]; i < p->wave_start[w + 1]; i++) {
            size_t t = p->order[i];
            const struct orch_lane *l =
                orch_roster_find(r->o->roster, p->tasks[t].agent);
            int rc;
            if (!l) /* compiled against this roster: cannot happen */
                return fo_err_set(err, FO_E_INTERNAL, "no lane %s",
                                  p->tasks[t].agent);
            if (!orch_category_allowed(r->o, l->category)) {
                rc = refuse(r, t, l, err);
                if (rc)
                    return rc;
                continue;
            }
            while (r->active >= max) {
                rc = wait_one(r, r->runner, err);
                if (rc)
                    return rc;
            }
            rc = start_task(r, t, w, l, err);
            if (rc)
                return rc;
        }
        while (r->active > 0) {
            int rc = wait_one(r, r->runner, err);
            if (rc)
                return rc;
        }
    }
    return FO_OK;
}

static cJSON *reply(const struct run *r, int64_t request_seq)
{
    const struct orch_plan *p = r->p;
    cJSON *o = cJSON_CreateObject();
    cJSON *pj = orch_plan_json(p);
    cJSON *waves =
        pj ? cJSON_DetachItemFromObjectCaseSensitive(pj, "waves") : NULL;
    cJSON_Delete(pj);
    if (!o || !waves) {
        cJSON_Delete(o);
        cJSON_Delete(waves);
        return NULL;
    }
    cJSON_AddItemToObject(o, "waves", waves);
    cJSON *results = cJSON_AddArrayToObject(o, "results");
    cJSON *refused = cJSON_AddArrayToObject(o, "refused");
    int all_ok = 1;
    int ok = results && refused &&
             fo_json_add_int(o, "request_seq", request_seq) &&
             fo_json_add_int(o, "plan_seq", r->plan_seq);
    for (size_t i = 0; ok && i < p->n; i++) {
        size_t t = p->order[i];
        const struct task_state *s = &r->st[t];
        const struct orch_task *k = &p->tasks[t];
        all_ok &= s->status == ST_OK;
        cJSON *e = cJSON_CreateObject();
        size_t n = s->output ? orch_utf8_prefix(s->output, s->output_len,
                                                RESPONSE_OUTPUT)
                             : 0;
        char *cut = malloc(n + 1);
        if (cut) {
            if (n)
                memcpy(cut, s->output, n);
            cut[n] = '\0';
        }
        ok = e && cut && cJSON_AddStringToObject(e, "id", k->id) &&
             cJSON_AddStringToObject(e, "agent", k->agent) &&
             cJSON_AddBoolToObject(e, "ok", s->status == ST_OK) &&
             (s->status == ST_REFUSED
                  ? cJSON_AddTrueToObject(e, "refused") != NULL
                  : cJSON_AddStringToObject(e, "model", s->model) &&
                        fo_json_add_int(e, "task_seq", s->task_seq)) &&
             fo_json_add_int(e, "seq", s->result_seq) &&
             cJSON_AddStringToObject(e, "output", cut) &&
             (n == (s->output ? s->output_len : 0) ||
              cJSON_AddTrueToObject(e, "output_truncated"));
        free(cut);
        if (e)
            cJSON_AddItemToArray(results, e);
        if (ok && s->status == ST_REFUSED) {
            cJSON *id = cJSON_CreateString(k->id);
            ok = id != NULL;
            if (id)
                cJSON_AddItemToArray(refused, id);
        }
    }
    if (!ok || !cJSON_AddBoolToObject(o, "ok", all_ok)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int orch_run_plan(const struct orch *o, const struct orch_witness *w,
                  const cJSON *plan, const char *request, cJSON **out,
                  struct fo_err *err)
{
    struct run r = {.o = o, .w = w, .plan_seq = -1};
    cJSON *req = NULL, *pj = NULL;
    int64_t request_seq = -1;
    int rc = orch_plan_compile(plan, o->roster, &r.p, err);
    if (rc)
        goto out;
    r.st = calloc(r.p->n, sizeof(*r.st));
    if (!r.st) {
        rc = nomem(err);
        goto out;
    }
    for (size_t i = 0; i < r.p->n; i++)
        r.st[i].task_seq = r.st[i].result_seq = -1;
    rc = orch_runner_create(&o->exec, &r.runner, err);
    if (!rc)
        rc = orch_runner_create(&o->stub, &r.stub, err);
    if (rc)
        goto out;
    req = cJSON_CreateObject();
    if (!req ||
        !(request ? cJSON_AddStringToObject(req, "request", request) != NULL
                  : cJSON_AddNullToObject(req, "request") != NULL) ||
        !cJSON_AddStringToObject(req, "via", "plan_run") ||
        !fo_json_add_int(req, "tasks", (long long)r.p->n)) {
        rc = nomem(err);
        goto out;
    }
    rc = witness(w, "client", "request", LEDGER_NO_PARENT, req, &request_seq,
                 err);
    if (rc)
        goto out;
    pj = orch_plan_json(r.p);
    if (!pj || !fo_json_add_int(pj, "max_parallel", o->max_parallel)) {
        rc = nomem(err);
        goto out;
    }
    rc = witness(w, "planner", "plan", request_seq, pj, &r.plan_seq, err);
    if (!rc)
        rc = run_waves(&r, err);
    if (!rc) {
        *out = reply(&r, request_seq);
        if (!*out)
            rc = nomem(err);
    }
out:
    orch_runner_free(r.runner); /* kills what a failed run left running */
    orch_runner_free(r.stub);
    for (size_t i = 0; r.st && i < r.p->n; i++)
        free(r.st[i].output);
    free(r.st);
    orch_plan_free(r.p);
    cJSON_Delete(req);
    cJSON_Delete(pj);
    return rc;
}
