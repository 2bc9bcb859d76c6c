/* orch_toolloop: tasks and their tool loop: the model's calls witnessed,
 * guardrails, the built-in and MCP tools, the session tools (remember,
 * forget), the file tools on worker threads, run_command in the sandbox,
 * and the ledger's disk reserve. */
#include "daemon/orch_engine_int.h"
#include "daemon/orch_forge.h"

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

static int build_prompt(const struct run *r, size_t t, const cJSON *failed,
                        struct fo_buf *b, cJSON *injected);
static int add_tokens(cJSON *o, const struct orch_result *res);
static cJSON *result_json(const struct run *r, const char *id,
                          const struct orch_result *res);
static const struct orch_lane *task_lane(const struct run *r, size_t t);
static int guard(struct run *r, size_t t, const char *source,
                 const char *call_id, int64_t parent, const char *text,
                 char **clean, int *blocked, struct fo_err *err);
static void task_result_ex(struct run *r, size_t t, struct orch_result *res,
                           const char *stop, int spent);
static void on_job_done(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr);
static void on_task_model(void *arg, int rc, struct orch_model_reply *rep,
                          const struct fo_err *cerr);
static int tool_task(const struct run *r, size_t t);
static int lane_has_tool(const struct orch_lane *ln, const char *name);
static char *tools_json(const struct run *r, size_t t,
                        const struct orch_lane *ln);
static int missing_tools(const struct run *r, size_t t, struct fo_buf *out);
static void conv_msgs_release(struct conv_msgs *c);
static char *conv_own(struct conv_msgs *c, char *s);
static int conv_build(const struct run *r, size_t t, const char *prompt,
                      struct conv_msgs *c);
static void tool_end(struct run *r, size_t t, const char *stop, const char *why,
                     int spent);
static void tool_reply(struct run *r, size_t t, int rc,
                       struct orch_model_reply *rep, const struct fo_err *cerr);
static void rescue_entry(struct run *r, size_t t, const char *text,
                         const char *reason, const char *missing,
                         const char *error, int spent);
static char *remember_mask(struct task *s, const char *text);
static void tool_call_write(struct run *r, size_t t);
static void tool_result_full(struct run *r, size_t t, int ok,
                             const char *output, const char *why,
                             int oe_rejected, int exit_code,
                             const char *sandbox, const cJSON *attach);
static void tool_result_write_ex(struct run *r, size_t t, int ok,
                                 const char *output, const char *why,
                                 int oe_rejected, int exit_code,
                                 const char *sandbox);
static void tool_result_write(struct run *r, size_t t, int ok,
                              const char *output, const char *why,
                              int oe_rejected, int exit_code);
static int workspace(struct run *r, struct fo_err *err);
static void on_command_done(void *arg, int rc, struct orch_result *res,
                            const struct fo_err *jerr);
static void on_mcp_done(void *arg, int rc, const char *text, int is_error,
                        const cJSON *attach, const struct fo_err *merr);
static int tool_args(struct run *r, size_t t, const struct orch_tool_def *d,
                     const char *text, cJSON **args);
static void mcp_run(struct run *r, size_t t, const char *tool,
                    const char *args_text);
static void tool_job_free(struct tool_job *j);
static void file_tool_work(void *arg, const atomic_int *cancel);
static void file_tool_done(void *arg, int cancelled);
static void file_tool_start(struct run *r, size_t t, const char *tool,
                            cJSON *args);
static int disk_low(struct orch_engine *e, const char *path, int div, char *why,
                    size_t n);
static void on_disk_watch(evutil_socket_t fd, short what, void *arg);
static void disk_watch(struct orch_engine *e);
static void tool_run(struct run *r, size_t t);
static void on_mcp_ready(void *arg, int rc, const char *text, int is_error,
                         const cJSON *attach, const struct fo_err *merr);
static int mcp_prepare(struct run *r, size_t t);
static void tool_exec(struct run *r, size_t t, const char *prompt);
static int simple_entry(struct run *r, size_t t, const char *actor,
                        const char *kind, const char *k1, const char *v1,
                        const char *k2, const char *v2, const char *k3,
                        const char *v3, struct fo_err *err);

/* ---- tasks -------------------------------------------------------------- */

/* The api index and tier of a model executor, or -1. */
int oe_model_slot(const struct orch *o, const struct orch_exec_config *ex,
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

long oe_key_seen(const struct run *r, const char *key)
{
    for (size_t i = 0; i < r->n_keys; i++)
        if (!strcmp(r->keys[i].key, key))
            return (long)r->keys[i].task;
    return -1;
}

/* Records key (taken, freed on failure) as dispatched by task. */
int oe_key_add(struct run *r, char *key, size_t task)
{
    struct dkey *k = realloc(r->keys, (r->n_keys + 1) * sizeof(*k));
    if (!k) {
        free(key);
        return FO_E_NOMEM;
    }
    r->keys = k;
    r->keys[r->n_keys++] = (struct dkey){key, task};
    return FO_OK;
}

/* The prompt: the instruction, the outputs of data upstreams that ran ok
 * (capped, marked: forum's cap and the run's task and upstream budgets),
 * and on an escalation what the last attempt failed. */
static int build_prompt(const struct run *r, size_t t, const cJSON *failed,
                        struct fo_buf *b, cJSON *injected)
{
    const struct orch_task *k = &r->p->tasks[t];
    int rc = fo_buf_puts(b, k->instruction);
    size_t task_bytes = r->lim.task > 0 ? (size_t)r->lim.task * 4 : 0;
    for (size_t d = 0; !rc && d < k->n_deps; d++) {
        const struct task *u = &r->t[k->dep_index[d]];
        if (k->deps[d].type != ORCH_EDGE_DATA || !u->output)
            continue;
        const char *why;
        size_t left = task_bytes > b->len ? task_bytes - b->len : 0;
        size_t n = orch_utf8_prefix(u->output, u->output_len,
                                    oe_upstream_room(r, left, &why));
        rc =
            fo_buf_printf(b, "\n\n--- upstream %s output ---\n", k->deps[d].id);
        if (!rc)
            rc = fo_buf_append(b, u->output, n);
        if (!rc && n < u->output_len)
            rc = fo_buf_printf(b,
                               "\n[forum: upstream output truncated at %zu of "
                               "%zu bytes%s%s]",
                               n, u->output_len, why ? ": " : "",
                               why ? why : "");
        if (!rc)
            rc = fo_buf_printf(b, "\n--- end upstream %s ---", k->deps[d].id);
        if (!rc && injected) {
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

/* Witnesses the `task` entry of task t's next attempt on ex (parent: the
 * plan, or the escalation that re-runs it). */
int oe_task_begin(struct run *r, size_t t, const struct orch_exec_config *ex,
                  int64_t parent, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    int api = -1, tier = -1;
    oe_model_slot(r->e->o, ex, &api, &tier);
    cJSON *o = cJSON_CreateObject();
    cJSON *inj = o ? cJSON_AddArrayToObject(o, "injected") : NULL;
    struct fo_buf scratch;
    fo_buf_init(&scratch, FO_BUF_UNLIMITED);
    int rc = inj ? build_prompt(r, t, NULL, &scratch, inj) : FO_E_NOMEM;
    fo_buf_release(&scratch);
    int ok =
        !rc && cJSON_AddStringToObject(o, "id", k->id) &&
        cJSON_AddStringToObject(o, "agent", k->agent) &&
        cJSON_AddStringToObject(o, "instruction", k->instruction) &&
        (!k->done ||
         cJSON_AddItemToObject(o, "done_when", cJSON_Duplicate(k->done, 1))) &&
        fo_json_add_int(o, "wave", (long long)r->wave) &&
        cJSON_AddStringToObject(o, "executor", orch_exec_name(ex->kind)) &&
        cJSON_AddStringToObject(o, "model", ex->model) &&
        (tier < 0 || cJSON_AddStringToObject(o, "tier", orch_tier_name(tier)));
    if (!ok) {
        cJSON_Delete(o);
        return oe_nomem(err);
    }
    r->t[t].slot = 1;
    return oe_witness(r, k->agent, "task", parent, o, (long)t, 0,
                      ex->kind != ORCH_EXEC_STUB, err);
}

/* "tokens": {"input", "output"} as the provider reported them (a count it
 * left out is absent). */
static int add_tokens(cJSON *o, const struct orch_result *res)
{
    cJSON *t = cJSON_AddObjectToObject(o, "tokens");
    return t &&
           (res->tokens_in < 0 ||
            fo_json_add_int(t, "input", res->tokens_in)) &&
           (res->tokens_out < 0 ||
            fo_json_add_int(t, "output", res->tokens_out));
}

/* The result entry's payload: the output cut (with a marker) until the
 * body fits the ledger's limit. */
static cJSON *result_json(const struct run *r, const char *id,
                          const struct orch_result *res)
{
    size_t max = ledger_max_body(r->e->cfg.ledger);
    size_t out_len = res->output_len;
    for (;;) {
        cJSON *o = cJSON_CreateObject();
        size_t n = orch_utf8_prefix(res->output, res->output_len, out_len);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        int rc = fo_buf_append(&b, res->output ? res->output : "", n);
        if (!rc && n < res->output_len)
            rc = fo_buf_printf(&b,
                               "\n[forum: output cut to %zu of %zu bytes to "
                               "fit the ledger's body limit]",
                               n, res->output_len);
        char *cut = rc ? NULL : fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        size_t el = res->errout ? orch_utf8_prefix(res->errout, res->errout_len,
                                                   STDERR_KEEP)
                                : 0;
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
                 (el == 0 || cJSON_AddStringToObject(o, "stderr", errtail)) &&
                 (!res->has_tokens || add_tokens(o, res));
        free(cut);
        free(errtail);
        if (!ok) {
            cJSON_Delete(o);
            return NULL;
        }
        struct fo_buf c;
        fo_buf_init(&c, FO_BUF_UNLIMITED);
        int fits = !fo_json_canon(o, &c, NULL) && c.len <= max;
        fo_buf_release(&c);
        if (fits || out_len == 0)
            return o;
        cJSON_Delete(o);
        out_len /= 2;
    }
}

/* ---- guardrails -----------------------------------------------------------
 */

static const struct orch_lane *task_lane(const struct run *r, size_t t)
{
    return orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
}

/* Scans text for secrets and personal data. Nothing found: 0 and *clean
 * NULL. Else 1, *clean the redacted text (malloc'd) and a `guardrail`
 * entry (parent: parent) says what kind was found where, never the value;
 * with the lane's guardrails "block", *blocked is set. An error: minus its
 * code, err set. */
static int guard(struct run *r, size_t t, const char *source,
                 const char *call_id, int64_t parent, const char *text,
                 char **clean, int *blocked, struct fo_err *err)
{
    *clean = NULL;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    long n = orch_guard_scan(orch_guardrails(r->e->o), text ? text : "",
                             text ? strlen(text) : 0, &b, &found);
    if (n <= 0) {
        fo_buf_release(&b);
        cJSON_Delete(found);
        return n < 0 ? -oe_nomem(err) : 0;
    }
    const struct orch_lane *ln = task_lane(r, t);
    int block = ln && ln->guard_block;
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
             cJSON_AddStringToObject(o, "source", source) &&
             (!call_id || cJSON_AddStringToObject(o, "call_id", call_id)) &&
             cJSON_AddStringToObject(o, "action", block ? "block" : "redact");
    if (ok)
        cJSON_AddItemToObject(o, "found", found);
    else
        cJSON_Delete(found);
    *clean = ok ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    if (!*clean) {
        cJSON_Delete(o);
        return -oe_nomem(err);
    }
    if (blocked && block)
        *blocked = 1;
    int rc =
        oe_witness(r, "guardrail", "guardrail", parent, o, (long)t, 0, 0, err);
    if (rc) {
        free(*clean);
        *clean = NULL;
        return -rc;
    }
    return 1;
}

/* The result entry of task t's attempt: its parent is the last step of its
 * tool loop (or the task). stop (NULL: none) says why a tool loop ended;
 * spent: the entry witnesses a reserved model call. A model's output passes
 * the guardrails first. */
/* The guardrails on a role's own reply (a model's or the --cmd's): what
 * it holds is replaced before the role's entry is made of it, and a
 * `guardrail` entry under the parent that entry will have says what was
 * found, never the value. Roles have no lane, so nothing blocks: 0 (nothing
 * found), 1 (*clean the redacted text, malloc'd), or minus an error code. */
int oe_guard_role(struct run *r, int role, long task, const char *text,
                  char **clean, struct fo_err *err)
{
    static const char *const kinds[] = {"plan", "route", "verdict", "answer"};
    *clean = NULL;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    long n = orch_guard_scan(orch_guardrails(r->e->o), text, strlen(text), &b,
                             &found);
    if (n <= 0) {
        fo_buf_release(&b);
        cJSON_Delete(found);
        return n < 0 ? -oe_nomem(err) : 0;
    }
    int64_t parent = role == R_VALIDATOR && task >= 0 ? r->t[task].result_seq
                     : role == R_SYNTHESIZER && r->plan_seq >= 0 ? r->plan_seq
                                                                 : r->id;
    cJSON *o = cJSON_CreateObject();
    int ok =
        o &&
        (task < 0 || cJSON_AddStringToObject(o, "id", r->p->tasks[task].id)) &&
        cJSON_AddStringToObject(o, "source", kinds[role]) &&
        cJSON_AddStringToObject(o, "role", oe_role_name[role]) &&
        cJSON_AddStringToObject(o, "action", "redact");
    if (ok)
        cJSON_AddItemToObject(o, "found", found);
    else
        cJSON_Delete(found);
    *clean = ok ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    if (!*clean) {
        cJSON_Delete(o);
        return -oe_nomem(err);
    }
    int rc =
        oe_witness(r, "guardrail", "guardrail", parent, o, task, 0, 0, err);
    if (rc) {
        free(*clean);
        *clean = NULL;
        return -rc;
    }
    return 1;
}

static void task_result_ex(struct run *r, size_t t, struct orch_result *res,
                           const char *stop, int spent)
{
    struct fo_err err;
    struct task *s = &r->t[t];
    const struct orch_task *k = &r->p->tasks[t];
    int64_t parent = s->conv ? s->conv_last : s->task_seq;
    char *clean = NULL;
    int blocked = 0, rc = FO_OK;
    int model = s->ex->kind == ORCH_EXEC_CHAT ||
                s->ex->kind == ORCH_EXEC_ANTHROPIC ||
                (s->ex->kind == ORCH_EXEC_CLI && r->e->o->argv); /* --cmd */
    struct orch_result cp = *res;
    if (model && res->ok && res->output) {
        rc = guard(r, t, "result", NULL, parent, res->output, &clean, &blocked,
                   &err);
        if (rc < 0) {
            oe_fail(r, -rc, &err);
            return;
        }
        rc = FO_OK;
        if (clean) {
            static char none[] = "";
            cp.output = blocked ? none : clean;
            cp.output_len = strlen(cp.output);
        }
        if (blocked) {
            cp.ok = 0;
            snprintf(cp.error, sizeof(cp.error), "%s",
                     "the guardrails blocked the answer: it held secrets or "
                     "personal data");
            stop = "guardrail";
        }
    }
    cJSON *o = result_json(r, k->id, &cp);
    free(clean);
    int turns = s->turn > 0 ? s->turn : 0;
    if (o && s->conv &&
        (!fo_json_add_int(o, "turns", turns) ||
         !fo_json_add_int(o, "tool_calls", s->n_calls))) {
        cJSON_Delete(o);
        o = NULL;
    }
    if (o && stop && !cJSON_AddStringToObject(o, "stop_reason", stop)) {
        cJSON_Delete(o);
        o = NULL;
    }
    if (o && s->forge_note && !oe_forge_note_merge(s, o)) { /* orch_forge */
        cJSON_Delete(o);
        o = NULL;
    }
    if (o && turns >= 2 && !s->conv && !fo_json_add_int(o, "turns", turns)) {
        cJSON_Delete(o);
        o = NULL;
    }
    rc = o ? oe_witness(r, k->agent, "result", parent, o, (long)t, 0, spent,
                        &err)
           : oe_nomem(&err);
    if (rc)
        oe_fail(r, rc, &err);
}

void oe_task_result(struct run *r, size_t t, struct orch_result *res)
{
    task_result_ex(r, t, res, NULL, 0);
}

static void on_job_done(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    struct orch_result none = {.exit_code = -1};
    if (rc) { /* could not start: an ok:false result */
        snprintf(none.error, sizeof(none.error), "%s",
                 jerr ? jerr->msg : "the task could not run");
        snprintf(none.model, sizeof(none.model), "%s", r->t[t].ex->model);
        res = &none;
    }
    oe_task_result(r, t, res);
    oe_step(r);
}

static void on_task_model(void *arg, int rc, struct orch_model_reply *rep,
                          const struct fo_err *cerr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    const struct orch_exec_config *ex = r->t[t].ex;
    int tools = f->tools;
    struct fo_err scrubbed;
    cerr = oe_reply_scrub(r->e->o, rep, cerr, &scrubbed);
    oe_record_call(r->e, rc == FO_OK, rep);
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    if (tools) {
        tool_reply(r, t, rc, rep, cerr);
        oe_step(r);
        return;
    }
    struct orch_result res = {.exit_code = -1};
    snprintf(res.model, sizeof(res.model), "%s",
             rep && rep->model[0] ? rep->model : ex->model);
    res.elapsed_us = rep ? rep->elapsed_us : 0;
    if (rc == FO_OK && (rep->tokens_in >= 0 || rep->tokens_out >= 0)) {
        res.has_tokens = 1;
        res.tokens_in = rep->tokens_in;
        res.tokens_out = rep->tokens_out;
    }
    res.ok = rc == FO_OK;
    res.timed_out = rc == FO_E_TIMEOUT;
    res.exit_code = res.ok ? 0 : -1;
    if (res.ok) {
        res.output = rep->text;
        res.output_len = rep->text_len;
    } else {
        snprintf(res.error, sizeof(res.error), "%s",
                 cerr ? cerr->msg : "the model call failed");
    }
    oe_task_result(r, t, &res);
    oe_step(r);
}

/* ---- the tool loop ----------------------------------------------------------
 *
 * A task whose lane has tools, on a model executor, is a conversation: the
 * model is offered the lane's tools; each call it makes is witnessed
 * (`tool_call`, parent the previous step), run, and its result witnessed
 * (`tool_result`, parent the call) and fed back, until the model answers in
 * text (the `result`, parent the last step) or max_turns is reached. Every
 * decision is made from the witnessed steps (apply keeps them in
 * task.conv), so a resumed run rebuilds the conversation from the ledger
 * and never re-runs a call whose result is on record. */

static int tool_task(const struct run *r, size_t t)
{
    const struct orch_lane *ln = task_lane(r, t);
    const struct orch_exec_config *ex = r->t[t].ex;
    return ln && ln->n_tools > 0 && ex && ex->models &&
           (ex->kind == ORCH_EXEC_CHAT || ex->kind == ORCH_EXEC_ANTHROPIC);
}

static int lane_has_tool(const struct orch_lane *ln, const char *name)
{
    for (size_t i = 0; name && i < ln->n_tools; i++)
        if (!strcmp(ln->tools[i], name))
            return 1;
    return 0;
}

/* The tools offered to the lane's model, as orch_model_call_tools_start
 * takes them: the built-ins it names (an MCP server's tools are offered
 * once their servers are known). */
static char *tools_json(const struct run *r, size_t t,
                        const struct orch_lane *ln)
{
    cJSON *a = cJSON_CreateArray();
    int ok = a != NULL;
    for (size_t i = 0; ok && i < ln->n_tools; i++) {
        const struct orch_tool_def *d = orch_tool_builtin(ln->tools[i]);
        if (!d) { /* an MCP server's, when it is up */
            cJSON *m = orch_mcpc_tool(r->e->mcpc, ln->tools[i]);
            if (m)
                cJSON_AddItemToArray(a, m);
            continue;
        }
        cJSON *o = cJSON_CreateObject(), *sch = NULL;
        ok = o &&
             fo_json_parse(d->schema, strlen(d->schema), &sch, NULL) == FO_OK;
        if (o)
            cJSON_AddItemToArray(a, o);
        ok = ok && cJSON_AddStringToObject(o, "name", d->name) &&
             cJSON_AddStringToObject(o, "description", d->description) &&
             cJSON_AddItemToObject(o, "input_schema", sch);
        if (!ok)
            cJSON_Delete(sch);
    }
    if (ok && oe_forge_tools(r, t, a) < 0) /* the respond tool */
        ok = 0;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char *out =
        ok && !fo_json_canon(a, &b, NULL) ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    cJSON_Delete(a);
    return out;
}

/* The tools of the lane that must be called (with an ok result) before an
 * answer is taken, and were not: "a, b" into out; 0 when none is missing. */
static int missing_tools(const struct run *r, size_t t, struct fo_buf *out)
{
    const struct orch_lane *ln = task_lane(r, t);
    int n = 0;
    for (size_t i = 0; ln && i < ln->n_required; i++) {
        int called = 0;
        const cJSON *c;
        cJSON_ArrayForEach (c, r->t[t].conv) {
            const char *tool = oe_str_of(c, "tool"), *k = oe_str_of(c, "k");
            called |= k && !strcmp(k, "tool_result") && tool &&
                      !strcmp(tool, ln->required_tools[i]) &&
                      cJSON_IsTrue(cJSON_GetObjectItem(c, "ok"));
        }
        if (!called) {
            if (fo_buf_printf(out, "%s%s", n ? ", " : "",
                              ln->required_tools[i]))
                return -1;
            n++;
        }
    }
    return n;
}

static void conv_msgs_release(struct conv_msgs *c)
{
    for (size_t i = 0; i < c->n_own; i++)
        free(c->own[i]);
    free(c->own);
    free(c->m);
}

static char *conv_own(struct conv_msgs *c, char *s)
{
    if (s)
        c->own[c->n_own++] = s;
    return s;
}

/* The conversation so far: the system text, the prompt, then each step. */
static int conv_build(const struct run *r, size_t t, const char *prompt,
                      struct conv_msgs *c)
{
    const struct orch_lane *ln = task_lane(r, t);
    const struct task *s = &r->t[t];
    size_t steps = s->conv ? (size_t)cJSON_GetArraySize(s->conv) : 0;
    *c = (struct conv_msgs){0};
    c->m = calloc(2 + 2 * steps, sizeof(*c->m));
    c->own = calloc(2 + 2 * steps, sizeof(*c->own));
    if (!c->m || !c->own)
        return FO_E_NOMEM;
    struct fo_buf sys;
    fo_buf_init(&sys, FO_BUF_UNLIMITED);
    int rc = fo_buf_printf(
        &sys,
        "You are the %s agent: %s\nYou work in a workspace directory with "
        "the tools offered (paths are relative to it). Call them as the task "
        "needs, one step at a time; when the task is done, answer with your "
        "final result as plain text, without calling a tool.",
        ln->name, ln->domain);
    if (!rc)
        rc = oe_forge_system(r, t, &sys); /* how to answer with respond */
    if (!rc && ln->n_required) {
        rc = fo_buf_puts(&sys, " Before you answer you must have called:");
        for (size_t i = 0; !rc && i < ln->n_required; i++)
            rc = fo_buf_printf(&sys, " %s", ln->required_tools[i]);
        if (!rc)
            rc = fo_buf_putc(&sys, '.');
    }
    char *st = rc ? NULL : fo_buf_detach(&sys, NULL);
    fo_buf_release(&sys);
    if (!conv_own(c, st))
        return FO_E_NOMEM;
    c->m[c->n++] = (struct orch_model_msg){.role = "system", .content = st};
    c->m[c->n++] = (struct orch_model_msg){.role = "user", .content = prompt};
    const cJSON *e;
    cJSON_ArrayForEach (e, s->conv) {
        const char *k = oe_str_of(e, "k");
        if (!strcmp(k, "tool_call")) {
            cJSON *a = cJSON_CreateArray(), *o = cJSON_CreateObject();
            if (o)
                cJSON_AddItemToArray(a, o);
            struct fo_buf b;
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            char *calls =
                a && o &&
                        cJSON_AddStringToObject(o, "id",
                                                oe_str_of(e, "call_id")) &&
                        cJSON_AddStringToObject(o, "name",
                                                oe_str_of(e, "tool")) &&
                        cJSON_AddStringToObject(o, "arguments",
                                                oe_str_of(e, "arguments")) &&
                        !fo_json_canon(a, &b, NULL)
                    ? fo_buf_detach(&b, NULL)
                    : NULL;
            fo_buf_release(&b);
            cJSON_Delete(a);
            if (!conv_own(c, calls))
                return FO_E_NOMEM;
            const char *text = oe_str_of(e, "text");
            c->m[c->n++] = (struct orch_model_msg){.role = "assistant",
                                                   .content = text ? text : "",
                                                   .tool_calls = calls};
        } else if (!strcmp(k, "tool_result")) {
            int ok = cJSON_IsTrue(cJSON_GetObjectItem(e, "ok"));
            const char *out = oe_str_of(e, "output"),
                       *why = oe_str_of(e, "error");
            char *text = NULL;
            if (!ok) {
                struct fo_buf b;
                fo_buf_init(&b, FO_BUF_UNLIMITED);
                if (!fo_buf_printf(&b, "error: %s%s%s", why ? why : "failed",
                                   out && out[0] ? "\n" : "", out ? out : ""))
                    text = fo_buf_detach(&b, NULL);
                fo_buf_release(&b);
                if (!conv_own(c, text))
                    return FO_E_NOMEM;
            }
            c->m[c->n++] =
                (struct orch_model_msg){.role = "tool",
                                        .content = ok ? (out ? out : "") : text,
                                        .tool_call_id = oe_str_of(e, "call_id"),
                                        .is_error = !ok};
        } else { /* tool_rescue */
            const char *text = oe_str_of(e, "text"),
                       *miss = oe_str_of(e, "missing");
            struct fo_buf b;
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            int brc = oe_str_of(e, "error") /* orch_forge: unreadable */
                          ? oe_forge_fix_text(e, &b)
                          : fo_buf_printf(&b,
                                          "[forum: that answer was not taken: "
                                          "call %s first, then answer.]",
                                          miss ? miss : "the required tools");
            char *fix = !brc ? fo_buf_detach(&b, NULL) : NULL;
            fo_buf_release(&b);
            if (!conv_own(c, fix))
                return FO_E_NOMEM;
            c->m[c->n++] = (struct orch_model_msg){
                .role = "assistant", .content = text && text[0] ? text : "-"};
            c->m[c->n++] =
                (struct orch_model_msg){.role = "user", .content = fix};
        }
    }
    return FO_OK;
}

/* A result of the tool loop that ends the task without an answer. */
static void tool_end(struct run *r, size_t t, const char *stop, const char *why,
                     int spent)
{
    struct orch_result res = {.exit_code = -1};
    snprintf(res.model, sizeof(res.model), "%s",
             r->t[t].model[0] ? r->t[t].model : r->t[t].ex->model);
    snprintf(res.error, sizeof(res.error), "%s", why);
    task_result_ex(r, t, &res, stop, spent);
}

/* A `tool_rescue` entry: the reply (text) was not taken, for reason; the
 * model is told what is missing, or what could not be read (error). */
static void rescue_entry(struct run *r, size_t t, const char *text,
                         const char *reason, const char *missing,
                         const char *error, int spent)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    char *clean = NULL;
    int g = guard(r, t, "tool_rescue", NULL, s->conv_last, text, &clean, NULL,
                  &err);
    cJSON *o = g >= 0 ? cJSON_CreateObject() : NULL;
    int ok = o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
             fo_json_add_int(o, "turn", s->turn) &&
             cJSON_AddStringToObject(o, "reason", reason) &&
             (!missing || cJSON_AddStringToObject(o, "missing", missing)) &&
             (!error || cJSON_AddStringToObject(o, "error", error)) &&
             cJSON_AddStringToObject(o, "text", clean ? clean : text) &&
             oe_forge_note_merge(s, o);
    free(clean);
    if (!ok) {
        cJSON_Delete(o);
        oe_fail(r, g < 0 ? -g : oe_nomem(&err), &err);
        return;
    }
    int wrc = oe_witness(r, "loop", "tool_rescue", s->conv_last, o, (long)t, 0,
                         spent, &err);
    if (wrc)
        oe_fail(r, wrc, &err);
}

/* The model's reply in the tool loop. */
static void tool_reply(struct run *r, size_t t, int rc,
                       struct orch_model_reply *rep, const struct fo_err *cerr)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    int spent = s->turn >= 2 && s->turn > s->turn_seen;
    if (rep && rep->model[0])
        snprintf(s->model, sizeof(s->model), "%s", rep->model);
    if (rc != FO_OK) {
        struct orch_result res = {.exit_code = -1};
        snprintf(res.model, sizeof(res.model), "%s",
                 rep && rep->model[0] ? rep->model : s->ex->model);
        res.timed_out = rc == FO_E_TIMEOUT;
        res.elapsed_us = rep ? rep->elapsed_us : 0;
        snprintf(res.error, sizeof(res.error), "%s",
                 cerr ? cerr->msg : "the model call failed");
        task_result_ex(r, t, &res, "model_error", spent);
        return;
    }
    /* the forge layer: calls written as text, the respond tool */
    char fwhy[FO_ERR_MSG_MAX];
    int fg = oe_forge_reply(r, t, rep, fwhy, sizeof(fwhy), &err);
    if (fg < 0) {
        oe_fail(r, -fg, &err);
        return;
    }
    if (fg == OE_FORGE_MALFORMED) {
        rescue_entry(r, t, rep->text, "malformed_tool_call", NULL, fwhy, spent);
        return;
    }
    if (rep->tool_calls) {
        cJSON *calls = NULL;
        if (fo_json_parse(rep->tool_calls, strlen(rep->tool_calls), &calls,
                          NULL) != FO_OK) {
            oe_fail(r, oe_nomem(&err), &err);
            return;
        }
        cJSON_Delete(s->pending);
        free(s->pending_text);
        s->pending = calls;
        s->pending_text = rep->text;
        rep->text = NULL;
        return; /* step witnesses them one by one */
    }
    struct fo_buf miss;
    fo_buf_init(&miss, FO_BUF_UNLIMITED);
    const struct orch_lane *ln = task_lane(r, t);
    int n = missing_tools(r, t, &miss);
    if (n < 0) {
        fo_buf_release(&miss);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    if (n > 0 && s->turn < ln->max_turns) {
        /* the answer is not taken yet: the model is told what is missing */
        rescue_entry(r, t, rep->text, "required_tools", miss.data, NULL, spent);
        fo_buf_release(&miss);
        return;
    }
    if (n > 0) {
        char why[FO_ERR_MSG_MAX];
        snprintf(why, sizeof(why),
                 "max_turns reached and the required tools were never "
                 "called: %s",
                 miss.data);
        fo_buf_release(&miss);
        tool_end(r, t, "required_tools_missing", why, spent);
        return;
    }
    fo_buf_release(&miss);
    struct orch_result res = {.ok = 1, .exit_code = 0};
    snprintf(res.model, sizeof(res.model), "%s",
             rep->model[0] ? rep->model : s->ex->model);
    res.elapsed_us = rep->elapsed_us;
    res.output = rep->text;
    res.output_len = rep->text_len;
    task_result_ex(r, t, &res, "answer", spent);
}

/* The arguments of a remember call as its tool_call entry records them:
 * the value replaced by REMEMBER_KEPT and held in s->mem_value until its
 * fact is written, so that the fact is the one copy of it on the ledger
 * and a forget (one redaction, as `forum session forget` makes) leaves no
 * text of it behind. NULL (the text is recorded as written) when it is
 * not an object with a string value: such a call is rejected anyway. */
static char *remember_mask(struct task *s, const char *text)
{
    cJSON *a = NULL;
    if (!text || fo_json_parse(text, strlen(text), &a, NULL) != FO_OK)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "value");
    char *out = NULL, *keep = NULL;
    if (cJSON_IsObject(a) && cJSON_IsString(v) &&
        (keep = orch_strdup(v->valuestring))) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cJSON *mark = cJSON_CreateString(REMEMBER_KEPT);
        if (mark && cJSON_ReplaceItemInObjectCaseSensitive(a, "value", mark))
            out = fo_json_canon(a, &b, NULL) ? NULL : fo_buf_detach(&b, NULL);
        else
            cJSON_Delete(mark);
        fo_buf_release(&b);
    }
    if (out)
        s->mem_value = keep;
    else
        free(keep);
    cJSON_Delete(a);
    return out;
}

/* Witnesses the next call of the last reply. */
static void tool_call_write(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    cJSON *c = cJSON_DetachItemFromArray(s->pending, 0);
    int first = s->turn > s->turn_seen;
    char *args = NULL, *text = NULL;
    int ga = guard(r, t, "tool_call", oe_str_of(c, "id"), s->conv_last,
                   oe_str_of(c, "arguments"), &args, NULL, &err);
    int gt = ga >= 0 && first && s->pending_text
                 ? guard(r, t, "tool_call", oe_str_of(c, "id"), s->conv_last,
                         s->pending_text, &text, NULL, &err)
                 : 0;
    free(s->mem_value);
    s->mem_value = NULL;
    free(s->raw_args);
    s->raw_args = NULL;
    /* the witnessed copy (and so what the model sees again) is scrubbed;
     * the tool runs with what the model wrote, kept here, off the ledger */
    if (ga > 0 && !(s->raw_args = orch_strdup(oe_str_of(c, "arguments"))))
        ga = -oe_nomem(&err);
    /* the model's own name and id of the call are text it wrote too */
    char *name = NULL, *cid = NULL;
    int gn = ga >= 0
                 ? guard(r, t, "tool_call", oe_str_of(c, "id"), s->conv_last,
                         oe_str_of(c, "name"), &name, NULL, &err)
                 : 0;
    int gi = gn >= 0 && ga >= 0
                 ? guard(r, t, "tool_call", oe_str_of(c, "id"), s->conv_last,
                         oe_str_of(c, "id"), &cid, NULL, &err)
                 : 0;
    if (gn < 0 || gi < 0)
        ga = gn < 0 ? gn : gi;
    if (ga >= 0 && oe_str_of(c, "name") &&
        !strcmp(oe_str_of(c, "name"), "remember")) {
        char *masked =
            remember_mask(s, args ? args : oe_str_of(c, "arguments"));
        if (masked) {
            free(args);
            args = masked;
        }
    }
    cJSON *o = ga >= 0 && gt >= 0 ? cJSON_CreateObject() : NULL;
    const char *tx = text ? text : s->pending_text;
    int ok =
        c && o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
        fo_json_add_int(o, "turn", s->turn) &&
        cJSON_AddStringToObject(o, "call_id", cid ? cid : oe_str_of(c, "id")) &&
        cJSON_AddStringToObject(o, "tool",
                                name ? name : oe_str_of(c, "name")) &&
        cJSON_AddStringToObject(o, "arguments",
                                args ? args : oe_str_of(c, "arguments")) &&
        (!s->raw_args ||
         cJSON_AddTrueToObject(o, "arguments_redacted") != NULL) &&
        (!first || !tx || !tx[0] || cJSON_AddStringToObject(o, "text", tx)) &&
        cJSON_AddStringToObject(o, "model",
                                s->model[0] ? s->model : s->ex->model) &&
        (!oe_str_of(c, "rescued") || /* written as text (orch_rescue.h) */
         cJSON_AddStringToObject(o, "rescued", oe_str_of(c, "rescued"))) &&
        (!first || oe_forge_note_merge(s, o));
    free(args);
    free(text);
    free(name);
    free(cid);
    cJSON_Delete(c);
    if (first) {
        free(s->pending_text);
        s->pending_text = NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        int rc = ga < 0 ? -ga : gt < 0 ? -gt : oe_nomem(&err);
        oe_fail(r, rc, &err);
        return;
    }
    int spent = first && s->turn >= 2;
    s->live_call = 1;
    int rc = oe_witness(r, r->p->tasks[t].agent, "tool_call", s->conv_last, o,
                        (long)t, 0, spent, &err);
    if (rc)
        oe_fail(r, rc, &err);
}

/* Witnesses the result of the call awaiting one; sandbox (NULL: not a
 * program) says where a program ran; attach (NULL: none) what an MCP tool
 * gave besides text. The model gets at most ORCH_TOOL_OUTPUT_MAX bytes of
 * output; the entry keeps the rest while it fits (orch_toolres.h). */
static void tool_result_full(struct run *r, size_t t, int ok,
                             const char *output, const char *why,
                             int oe_rejected, int exit_code,
                             const char *sandbox, const cJSON *attach)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    const cJSON *call =
        cJSON_GetArrayItem(s->conv, cJSON_GetArraySize(s->conv) - 1);
    const char *call_id = oe_str_of(call, "call_id");
    char *clean = NULL;
    int blocked = 0;
    int g = output && output[0] ? guard(r, t, "tool_result", call_id, s->await,
                                        output, &clean, &blocked, &err)
                                : 0;
    /* an error's text may come from outside too (an MCP server's
     * JSON-RPC error, a program): scanned the same way */
    char *why_clean = NULL;
    int gw = g >= 0 && why && why[0]
                 ? guard(r, t, "tool_error", call_id, s->await, why, &why_clean,
                         NULL, &err)
                 : 0;
    if (g < 0 || gw < 0) {
        free(clean);
        oe_fail(r, g < 0 ? -g : -gw, &err);
        return;
    }
    if (why_clean)
        why = why_clean;
    free(s->raw_args); /* the call is answered: its raw text goes */
    s->raw_args = NULL;
    s->live_call = 0;
    const char *out = blocked ? "" : clean ? clean : output ? output : "";
    cJSON *o = cJSON_CreateObject();
    int good =
        o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
        cJSON_AddStringToObject(o, "call_id", call_id) &&
        cJSON_AddStringToObject(o, "tool", oe_str_of(call, "tool")) &&
        cJSON_AddBoolToObject(o, "ok", ok && !blocked) &&
        (!why || cJSON_AddStringToObject(o, "error", why)) &&
        (!blocked || (cJSON_AddTrueToObject(o, "blocked") &&
                      cJSON_AddStringToObject(o, "error",
                                              "the guardrails blocked this "
                                              "output"))) &&
        (!oe_rejected || cJSON_AddTrueToObject(o, "rejected")) &&
        (exit_code == INT32_MIN ||
         fo_json_add_int(o, "exit_code", exit_code)) &&
        (!sandbox || cJSON_AddStringToObject(o, "sandbox", sandbox)) &&
        orch_toolres_fields(o, out, blocked ? NULL : attach) == FO_OK;
    free(clean);
    free(why_clean);
    if (!good) {
        cJSON_Delete(o);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    int rc =
        oe_witness(r, "tool", "tool_result", s->await, o, (long)t, 0, 0, &err);
    if (rc)
        oe_fail(r, rc, &err);
}

static void tool_result_write_ex(struct run *r, size_t t, int ok,
                                 const char *output, const char *why,
                                 int oe_rejected, int exit_code,
                                 const char *sandbox)
{
    tool_result_full(r, t, ok, output, why, oe_rejected, exit_code, sandbox,
                     NULL);
}

static void tool_result_write(struct run *r, size_t t, int ok,
                              const char *output, const char *why,
                              int oe_rejected, int exit_code)
{
    tool_result_write_ex(r, t, ok, output, why, oe_rejected, exit_code, NULL);
}

void oe_tool_result(struct run *r, size_t t, int ok, const char *output,
                    const char *why, int rejected)
{
    tool_result_write_ex(r, t, ok, output, why, rejected, INT32_MIN, NULL);
}

/* The run's workspace: the configured directory, or a fresh one per run
 * under the workspace root. */
static int workspace(struct run *r, struct fo_err *err)
{
    if (r->ws_fd >= 0)
        return FO_OK;
    const struct orch *o = r->e->o;
    const char *dir = orch_workspace_dir(o), *root = orch_workspace_root(o);
    char path[4096];
    int create = 0;
    if (dir) {
        snprintf(path, sizeof(path), "%s", dir);
    } else if (root) {
        if (mkdir(root, 0700) != 0 && errno != EEXIST)
            return fo_err_set(err, FO_E_IO, "workspaces %s: %s", root,
                              strerror(errno));
        int w =
            snprintf(path, sizeof(path), "%s/run-%lld", root, (long long)r->id);
        if (w < 0 || (size_t)w >= sizeof(path))
            return fo_err_set(err, FO_E_INVALID, "workspace path too long");
        create = 1;
    } else {
        return fo_err_set(err, FO_E_INVALID,
                          "no workspace: tools need a data dir or --workspace");
    }
    int rc = orch_workspace_open(path, create, &r->ws_fd, err);
    char abs[PATH_MAX];
    if (!rc && !realpath(path, abs)) /* the sandbox binds it by this name */
        rc =
            fo_err_set(err, FO_E_IO, "workspace %s: %s", path, strerror(errno));
    if (rc && r->ws_fd >= 0) {
        close(r->ws_fd);
        r->ws_fd = -1;
    }
    if (!rc && !(r->ws_path = orch_strdup(abs))) {
        close(r->ws_fd);
        r->ws_fd = -1;
        rc = oe_nomem(err);
    }
    return rc;
}

static void on_command_done(void *arg, int rc, struct orch_result *res,
                            const struct fo_err *jerr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    r->e->n_cmds--;
    free(f);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int brc = FO_OK;
    if (rc == FO_OK) {
        if (res->timed_out)
            brc = fo_buf_puts(&b, "timed out: the command and its processes "
                                  "were killed\n");
        else if (res->signal)
            brc = fo_buf_printf(&b, "killed by signal %d\n", res->signal);
        else
            brc = fo_buf_printf(&b, "exit code %d\n", res->exit_code);
        if (!brc && res->output_len)
            brc = fo_buf_printf(&b, "--- stdout ---\n%s\n", res->output);
        if (!brc && res->errout_len)
            brc = fo_buf_printf(&b, "--- stderr ---\n%s\n", res->errout);
    }
    if (brc) {
        fo_buf_release(&b);
        struct fo_err err;
        oe_fail(r, oe_nomem(&err), &err);
        oe_step(r);
        return;
    }
    const char *sb =
        orch_sandbox_mode(r->e->o) == ORCH_SANDBOX_NONE ? "none" : "bwrap";
    if (rc == FO_OK)
        tool_result_write_ex(
            r, t, res->ok, b.data ? b.data : "", NULL, 0,
            res->timed_out || res->signal ? -1 : res->exit_code, sb);
    else
        tool_result_write_ex(r, t, 0, "",
                             jerr ? jerr->msg : "the command failed", 0,
                             INT32_MIN, sb);
    fo_buf_release(&b);
    oe_step(r);
}

static void on_mcp_done(void *arg, int rc, const char *text, int is_error,
                        const cJSON *attach, const struct fo_err *merr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    if (rc == FO_OK)
        tool_result_full(r, t, !is_error, text ? text : "",
                         is_error ? "the tool reported an error" : NULL, 0,
                         INT32_MIN, NULL, attach);
    else
        tool_result_write(r, t, 0, NULL, merr ? merr->msg : "failed", 0,
                          INT32_MIN);
    oe_step(r);
}

/* The arguments of a call checked against its tool's schema: 0 and *args,
 * or 1 when the call was answered (a rejected result the model is told to
 * correct) or the run failed (out of memory). */
static int tool_args(struct run *r, size_t t, const struct orch_tool_def *d,
                     const char *text, cJSON **args)
{
    struct fo_err err;
    int rc = orch_tool_args(d, text, args, &err);
    if (rc == FO_E_NOMEM) {
        oe_fail(r, rc, &err);
        return 1;
    }
    if (rc) {
        char why[FO_ERR_MSG_MAX + 64];
        snprintf(why, sizeof(why),
                 "%s: %s; call it again with arguments that match its "
                 "schema",
                 d->name, err.msg);
        tool_result_write(r, t, 0, NULL, why, 1, INT32_MIN);
        return 1;
    }
    return 0;
}

/* A tool of an MCP server ("server.tool"). */
static void mcp_run(struct run *r, size_t t, const char *tool,
                    const char *args_text)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    char why[FO_ERR_MSG_MAX + 64];
    const char *dot = strchr(tool, '.');
    char server[64];
    snprintf(server, sizeof(server), "%.*s", dot ? (int)(dot - tool) : 0, tool);
    if (!dot || !orch_mcpc_has(r->e->mcpc, server)) {
        snprintf(why, sizeof(why),
                 "tool \"%s\": no MCP server \"%s\" is configured "
                 "(forum.json mcp_servers)",
                 tool, server);
        tool_result_write(r, t, 0, NULL, why, 0, INT32_MIN);
        return;
    }
    cJSON *def = orch_mcpc_tool(r->e->mcpc, tool);
    cJSON *args = NULL;
    struct orch_tool_def d = {.name = tool};
    char *schema = NULL;
    if (def)
        schema = cJSON_PrintUnformatted(
            cJSON_GetObjectItemCaseSensitive(def, "input_schema"));
    d.schema = schema;
    int rc = tool_args(r, t, &d, args_text, &args);
    free(schema);
    cJSON_Delete(def);
    if (rc)
        return;
    struct effect *f = calloc(1, sizeof(*f));
    if (!f) {
        cJSON_Delete(args);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    *f = (struct effect){.r = r, .task = (long)t, .kind = E_TASK_JOB};
    rc = orch_mcpc_call(r->e->mcpc, tool, args, on_mcp_done, f, &f->mcp, &err);
    cJSON_Delete(args);
    if (rc) {
        free(f);
        if (rc == FO_E_NOMEM)
            oe_fail(r, rc, &err);
        else
            tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
        return;
    }
    s->eff = f;
    s->busy = 1;
}

static void tool_job_free(struct tool_job *j)
{
    if (j->ws >= 0)
        close(j->ws);
    cJSON_Delete(j->args);
    fo_buf_release(&j->out);
    free(j);
}

/* On a worker thread: the tool, within its time and a cancel. */
static void file_tool_work(void *arg, const atomic_int *cancel)
{
    struct tool_job *j = arg;
    struct orch_tool_budget b = {.deadline_ms = oe_now_ms() + ORCH_TOOL_TIME_MS,
                                 .cancel = cancel};
    j->rc = orch_tool_run_file(j->ws, j->tool, j->args, &b, &j->out, &j->err);
}

/* Back on the loop: the result is witnessed, unless the run let go. */
static void file_tool_done(void *arg, int cancelled)
{
    struct tool_job *j = arg;
    struct effect *f = j->f;
    if (cancelled || !f) {
        if (f) /* the pool stopped under a live effect: it is let go */
            f->tool = NULL;
        tool_job_free(j);
        return;
    }
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    if (j->rc == FO_E_NOMEM) {
        oe_fail(r, j->rc, &j->err);
    } else {
        tool_result_write(r, t, j->rc == FO_OK,
                          j->rc ? NULL : (j->out.data ? j->out.data : ""),
                          j->rc ? j->err.msg : NULL, 0, INT32_MIN);
    }
    tool_job_free(j);
    oe_step(r);
}

/* Starts a file tool on the engine's worker threads (args taken): the
 * loop never reads or writes the workspace itself. */
static void file_tool_start(struct run *r, size_t t, const char *tool,
                            cJSON *args)
{
    struct fo_err err;
    struct tool_job *j = calloc(1, sizeof(*j));
    struct effect *f = j ? calloc(1, sizeof(*f)) : NULL;
    int rc = f ? FO_OK : oe_nomem(&err);
    if (j) {
        j->ws = -1;
        j->args = args;
        args = NULL;
        fo_buf_init(&j->out, FO_BUF_UNLIMITED);
        snprintf(j->tool, sizeof(j->tool), "%s", tool);
    }
    if (!rc && (j->ws = fcntl(r->ws_fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = fo_err_set(&err, FO_E_IO, "workspace: %s", strerror(errno));
    if (!rc && !r->e->work)
        rc = orch_work_create(r->e->cfg.base, &r->e->work, &err);
    if (!rc) {
        *f = (struct effect){
            .r = r, .task = (long)t, .kind = E_TASK_JOB, .tool = j};
        j->f = f;
        rc = orch_work_post(r->e->work, file_tool_work, file_tool_done, j,
                            &j->job, &err);
    }
    if (rc) {
        cJSON_Delete(args);
        free(f);
        if (j)
            tool_job_free(j);
        if (rc == FO_E_NOMEM)
            oe_fail(r, rc, &err);
        else
            tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
        return;
    }
    r->t[t].eff = f;
    r->t[t].busy = 1;
}

/* ---- the ledger's disk ---------------------------------------------------
 * An agent's writes share a filesystem with the ledger when its workspace
 * is on the data dir's: below the reserve (orch_disk_reserve_mb) a command
 * or a file write is refused, and a command running is killed below half
 * of it, so the ledger can still witness what happened. */

/* 1 (why says so) when path is on the data dir's filesystem and that has
 * less than the reserve free (times 1/div). statvfs and stat: no open. */
static int disk_low(struct orch_engine *e, const char *path, int div, char *why,
                    size_t n)
{
    const char *dir = ledger_dir(e->cfg.ledger);
    struct stat a, b;
    struct statvfs vs;
    if (!path || !dir || stat(path, &a) != 0 || stat(dir, &b) != 0 ||
        a.st_dev != b.st_dev || statvfs(dir, &vs) != 0)
        return 0;
    uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
    uint64_t keep = (uint64_t)orch_disk_reserve_mb(e->o) * 1048576u / div;
    if (avail >= keep)
        return 0;
    snprintf(why, n,
             "refused: the disk that holds the ledger has %llu MiB free, "
             "below the %llu MiB kept so the ledger can go on witnessing "
             "(disk_reserve_mb); free space, or give workspaces a "
             "filesystem of their own",
             (unsigned long long)(avail >> 20),
             (unsigned long long)(keep >> 20));
    return 1;
}

static void on_disk_watch(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    if (e->n_cmds <= 0)
        return; /* no command runs: the watch sleeps */
    /* the commands still running whose workspace runs the disk low; each
     * kill is witnessed and stepped, which may end runs: from the top */
again:
    for (struct run *r = e->runs; r; r = r->next) {
        char why[FO_ERR_MSG_MAX];
        for (size_t t = 0; r->t && r->p && t < r->p->n; t++) {
            struct effect *f = r->t[t].eff;
            if (!f || !f->cmd || !disk_low(e, r->ws_path, 2, why, sizeof(why)))
                continue;
            oe_effect_cancel(f); /* kills its process group */
            r->t[t].eff = NULL;
            r->t[t].busy = 0;
            char msg[FO_ERR_MSG_MAX + 32];
            snprintf(msg, sizeof(msg), "killed: %s", why + strlen("refused: "));
            tool_result_write_ex(r, t, 0, "", msg, 0, -1,
                                 orch_sandbox_mode(e->o) == ORCH_SANDBOX_NONE
                                     ? "none"
                                     : "bwrap");
            oe_step(r);
            goto again;
        }
    }
    disk_watch(e);
}

/* Arms the watch while commands run. */
static void disk_watch(struct orch_engine *e)
{
    if (e->n_cmds <= 0)
        return;
    if (!e->disk_ev &&
        !(e->disk_ev = evtimer_new(e->cfg.base, on_disk_watch, e)))
        return;
    if (evtimer_pending(e->disk_ev, NULL))
        return;
    struct timeval tv = {0, DISK_WATCH_MS * 1000};
    evtimer_add(e->disk_ev, &tv);
}

/* Runs the call awaiting its result. */
static void tool_run(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    const struct orch_lane *ln = task_lane(r, t);
    const cJSON *call =
        cJSON_GetArrayItem(s->conv, cJSON_GetArraySize(s->conv) - 1);
    const char *tool = oe_str_of(call, "tool");
    struct fo_err err;
    char why[FO_ERR_MSG_MAX + 64];
    if (oe_forge_respond_call(r, t, call, why, sizeof(why))) {
        tool_result_write(r, t, 0, NULL, why, 1, INT32_MIN); /* malformed */
        return;
    }
    if (!lane_has_tool(ln, tool)) {
        struct fo_buf names;
        fo_buf_init(&names, 2048);
        for (size_t i = 0; i < ln->n_tools; i++)
            fo_buf_printf(&names, "%s%s", i ? ", " : "", ln->tools[i]);
        snprintf(why, sizeof(why),
                 "unknown tool \"%s\": this agent's tools are %s", tool,
                 names.data ? names.data : "none");
        fo_buf_release(&names);
        tool_result_write(r, t, 0, NULL, why, 1, INT32_MIN);
        return;
    }
    const struct orch_tool_def *d = orch_tool_builtin(tool);
    /* the tool gets the arguments the model wrote; the ledger and the
     * model's next turn got them scrubbed (tool_call_write). The session
     * tools work from the witnessed copy: what they keep is witnessed. */
    if (!s->live_call && !(d && d->session)) {
        /* found on resume: it may or may not have run before the daemon
         * stopped; it is not run again behind the model's back (a command
         * that filled the disk would fill it again) */
        tool_result_write(r, t, 0, NULL,
                          "interrupted: the daemon stopped before this call's "
                          "result was witnessed, so it may or may not have "
                          "run; it was not run again: check, and call again "
                          "if it is still needed",
                          0, INT32_MIN);
        return;
    }
    const char *atext = oe_str_of(call, "arguments");
    if (cJSON_IsTrue(
            cJSON_GetObjectItemCaseSensitive(call, "arguments_redacted")) &&
        !(d && d->session)) {
        if (!s->raw_args) { /* resumed: the ledger never had them */
            tool_result_write(r, t, 0, NULL,
                              "this call's arguments held what the "
                              "guardrails keep off the ledger, and were lost "
                              "when the daemon restarted: make the call again",
                              0, INT32_MIN);
            return;
        }
        atext = s->raw_args;
    }
    if (!d) {
        mcp_run(r, t, tool, atext);
        return;
    }
    cJSON *args = NULL;
    int rc = tool_args(r, t, d, atext, &args);
    if (rc)
        return;
    if (d->session) { /* no workspace: the run's session */
        oe_mem_run(r, t, tool, args);
        cJSON_Delete(args);
        return;
    }
    rc = workspace(r, &err);
    if (rc) {
        cJSON_Delete(args);
        tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
        return;
    }
    /* what writes (a command, a file) leaves the ledger's disk its room */
    if ((d->program || !strcmp(tool, "write_file") ||
         !strcmp(tool, "apply_patch")) &&
        disk_low(r->e, r->ws_path, 1, why, sizeof(why))) {
        cJSON_Delete(args);
        tool_result_write(r, t, 0, NULL, why, 0, INT32_MIN);
        return;
    }
    if (!d->program) {
        file_tool_start(r, t, tool, args);
        return;
    }
    const char **argv = NULL;
    int timeout_ms = 0;
    int none = orch_sandbox_mode(r->e->o) == ORCH_SANDBOX_NONE;
    char sbwhy[256];
    if (!none && !orch_sandbox_available(sbwhy, sizeof(sbwhy))) {
        cJSON_Delete(args);
        snprintf(
            why, sizeof(why),
            "refused: the sandbox cannot be made (%.200s); the operator may "
            "set \"sandbox\": \"none\" in forum.json to run commands "
            "unconfined",
            sbwhy);
        tool_result_write_ex(r, t, 0, NULL, why, 0, INT32_MIN, "unavailable");
        return;
    }
    rc = orch_tool_command_argv(args, &argv, &timeout_ms, &err);
    struct orch_sandbox sb;
    orch_tool_sandbox(r->e->o, r->ws_path, ln->network, &sb);
    struct effect *f = rc ? NULL : calloc(1, sizeof(*f));
    if (!rc && !f)
        rc = oe_nomem(&err);
    if (!rc) {
        *f = (struct effect){.r = r, .task = (long)t, .kind = E_TASK_JOB};
        struct orch_exec_config cfg = {
            .kind = ORCH_EXEC_CLI,
            .argv = argv,
            .box = none ? NULL : &sb,
            .env = orch_child_env(r->e->o),
            .timeout_ms = timeout_ms ? timeout_ms : COMMAND_TIMEOUT_MS,
            .output_max = ORCH_TOOL_OUTPUT_MAX / 2,
            .model = "run_command",
            .cwd = r->ws_path,
        };
        rc = orch_job_start(&cfg, r->e->cfg.base, NULL, on_command_done, f,
                            &f->job, &err);
    }
    free(argv);
    cJSON_Delete(args);
    if (rc == FO_E_NOMEM) {
        free(f);
        oe_fail(r, rc, &err);
        return;
    }
    if (rc) {
        free(f);
        tool_result_write_ex(r, t, 0, NULL, err.msg, 0, INT32_MIN,
                             none ? "none" : "bwrap");
        return;
    }
    f->cmd = 1;
    r->e->n_cmds++;
    disk_watch(r->e);
    s->eff = f;
    s->busy = 1;
}

static void on_mcp_ready(void *arg, int rc, const char *text, int is_error,
                         const cJSON *attach, const struct fo_err *merr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    (void)rc, (void)text, (void)is_error, (void)attach, (void)merr;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    /* a server that could not start: its tools are not offered this turn,
     * and a call to one is answered with the server's error */
    oe_step(r);
}

/* Before a model turn: starts the first MCP server of the lane's tools that
 * is not up and was not tried for this turn. 1 when one was started (the
 * task waits), 0 when every one is up or was tried. */
static int mcp_prepare(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    const struct orch_lane *ln = task_lane(r, t);
    if (!r->e->mcpc)
        return 0;
    if (s->mcp_turn != s->turn + 1) {
        s->mcp_turn = s->turn + 1;
        s->mcp_tried = 0;
    }
    for (size_t i = 0; i < ln->n_tools && i < 64; i++) {
        const char *dot = strchr(ln->tools[i], '.');
        char server[64];
        if (!dot || orch_tool_builtin(ln->tools[i]) ||
            (s->mcp_tried & ((uint64_t)1 << i)))
            continue;
        snprintf(server, sizeof(server), "%.*s", (int)(dot - ln->tools[i]),
                 ln->tools[i]);
        s->mcp_tried |= (uint64_t)1 << i;
        if (!orch_mcpc_has(r->e->mcpc, server) ||
            orch_mcpc_is_ready(r->e->mcpc, server))
            continue;
        struct effect *f = calloc(1, sizeof(*f));
        struct fo_err err;
        if (!f)
            return 0;
        *f = (struct effect){.r = r, .task = (long)t, .kind = E_TASK_JOB};
        if (orch_mcpc_ready(r->e->mcpc, server, on_mcp_ready, f, &f->mcp,
                            &err) != FO_OK) {
            free(f);
            oe_elog(r->e, "run %lld: %s", (long long)r->id, err.msg);
            continue;
        }
        s->eff = f;
        s->busy = 1;
        return 1;
    }
    return 0;
}

/* The next move of a tool task's attempt (its task entry is on record). */
static void tool_exec(struct run *r, size_t t, const char *prompt)
{
    struct task *s = &r->t[t];
    const struct orch_lane *ln = task_lane(r, t);
    struct fo_err err;
    char why[FO_ERR_MSG_MAX];
    if (s->blocked) {
        tool_end(r, t, "guardrail",
                 "the guardrails blocked a tool's output: it held secrets "
                 "or personal data",
                 0);
        return;
    }
    if (s->await >= 0) {
        tool_run(r, t);
        return;
    }
    if (s->pending && cJSON_GetArraySize(s->pending) > 0) {
        tool_call_write(r, t);
        return;
    }
    if (oe_forge_bad_calls_spent(r, t, why, sizeof(why))) {
        tool_end(r, t, "malformed_tool_calls", why, 0);
        return;
    }
    if (s->turn >= ln->max_turns) {
        snprintf(why, sizeof(why), "max_turns (%d) reached without an answer",
                 ln->max_turns);
        tool_end(r, t, "max_turns", why, 0);
        return;
    }
    if (mcp_prepare(r, t))
        return; /* a server is being started: the turn waits for it */
    char what[ORCH_NAME_MAX + 24];
    snprintf(what, sizeof(what), "task %s turn %d", r->p->tasks[t].id,
             s->turn + 1);
    if (s->turn >= 1 && !oe_spend(r, what, 0)) {
        /* the run halts: a spent budget ends this task here, with the
         * calls it made witnessed (a cancel's halt writes its own result;
         * a shutdown leaves the task to resume) */
        if (r->halt == H_BUDGET) {
            snprintf(why, sizeof(why),
                     "the run's budget was spent (%s) before turn %d",
                     r->halt_reason, s->turn + 1);
            tool_end(r, t, "budget", why, 0);
        }
        return;
    }
    s->turn++;
    struct conv_msgs c;
    char *tools = tools_json(r, t, ln);
    struct effect *f = calloc(1, sizeof(*f));
    int rc = tools && f ? conv_build(r, t, prompt, &c) : FO_E_NOMEM;
    if (!rc) {
        *f = (struct effect){
            .r = r, .task = (long)t, .kind = E_TASK_MODEL, .tools = 1};
        rc = orch_model_call_tools_start(
            s->ex->models, r->e->cfg.base, r->e->cfg.dns, s->ex->kind,
            s->ex->tier, tools, c.m, c.n, on_task_model, f, &f->call, &err);
    } else {
        c = (struct conv_msgs){0};
        oe_nomem(&err);
    }
    conv_msgs_release(&c);
    free(tools);
    if (rc) {
        free(f);
        if (rc == FO_E_NOMEM) {
            if (s->turn >= 2)
                r->reserved--;
            oe_fail(r, rc, &err);
            return;
        }
        tool_end(r, t, "model_error", err.msg, s->turn >= 2);
        return;
    }
    s->eff = f;
    s->busy = 1;
}

/* Runs task t's current attempt (its task entry is on record). */
void oe_task_exec(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    struct fo_buf prompt;
    fo_buf_init(&prompt, FO_BUF_UNLIMITED);
    if (tool_task(r, t)) {
        int rc = build_prompt(r, t, s->esc_seq >= 0 ? s->failed : NULL, &prompt,
                              NULL);
        if (rc)
            oe_fail(r, oe_nomem(&err), &err);
        else
            tool_exec(r, t, prompt.data ? prompt.data : "");
        fo_buf_release(&prompt);
        return;
    }
    struct effect *f = calloc(1, sizeof(*f));
    int rc = f ? build_prompt(r, t, s->esc_seq >= 0 ? s->failed : NULL, &prompt,
                              NULL)
               : FO_E_NOMEM;
    if (rc) {
        free(f);
        fo_buf_release(&prompt);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    *f = (struct effect){.r = r, .task = (long)t};
    const char *text = prompt.data ? prompt.data : "";
    if (s->ex->kind == ORCH_EXEC_CHAT || s->ex->kind == ORCH_EXEC_ANTHROPIC) {
        struct orch_model_msg m = {.role = "user", .content = text};
        f->kind = E_TASK_MODEL;
        rc =
            s->ex->models
                ? orch_model_call_start(s->ex->models, r->e->cfg.base,
                                        r->e->cfg.dns, s->ex->kind, s->ex->tier,
                                        &m, 1, on_task_model, f, &f->call, &err)
                : fo_err_set(&err, FO_E_INVALID,
                             "executor %s: no model configured",
                             orch_exec_name(s->ex->kind));
    } else {
        f->kind = E_TASK_JOB;
        rc = orch_job_start(s->ex, r->e->cfg.base, text, on_job_done, f,
                            &f->job, &err);
    }
    fo_buf_release(&prompt);
    if (rc == FO_E_NOMEM) {
        free(f);
        oe_fail(r, rc, &err);
        return;
    }
    if (rc) { /* could not start: an ok:false result */
        free(f);
        struct orch_result none = {.exit_code = -1};
        snprintf(none.error, sizeof(none.error), "%s", err.msg);
        snprintf(none.model, sizeof(none.model), "%s", s->ex->model);
        oe_task_result(r, t, &none);
        return;
    }
    s->eff = f;
    s->busy = 1;
}

static int simple_entry(struct run *r, size_t t, const char *actor,
                        const char *kind, const char *k1, const char *v1,
                        const char *k2, const char *v2, const char *k3,
                        const char *v3, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "id", k->id) ||
        (k1 && !cJSON_AddStringToObject(o, k1, v1)) ||
        (k2 && !cJSON_AddStringToObject(o, k2, v2)) ||
        (k3 && !cJSON_AddStringToObject(o, k3, v3))) {
        cJSON_Delete(o);
        return oe_nomem(err);
    }
    return oe_witness(r, actor, kind, r->plan_seq, o, (long)t, 0, 0, err);
}

/* A pending task of the wave: refused, skipped as a repeat, or begun. */
int oe_dispatch_task(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch *o = r->e->o;
    const struct orch_task *k = &r->p->tasks[t];
    const struct orch_lane *ln = orch_roster_find(orch_roster(o), k->agent);
    if (!ln)
        return fo_err_set(err, FO_E_INTERNAL, "no lane %s", k->agent);
    if (!orch_category_allowed(o, ln->category))
        return simple_entry(r, t, "policy", "refusal", "agent", k->agent,
                            "category", ln->category, "reason",
                            "category_not_allowed", err);
    const struct orch_exec_config *ex = orch_exec_for_lane(o, ln);
    char *key = oe_dispatch_key(k, ex);
    if (!key)
        return oe_nomem(err);
    long dup = oe_key_seen(r, key);
    free(key);
    if (dup >= 0)
        return simple_entry(r, t, "loop", "skip", "duplicate_of",
                            r->p->tasks[dup].id, "reason",
                            "same agent, instruction and executor already "
                            "dispatched",
                            NULL, NULL, err);
    char what[ORCH_NAME_MAX + 8];
    snprintf(what, sizeof(what), "task %s", k->id);
    if (!oe_spend(r, what, ex->kind == ORCH_EXEC_STUB))
        return FO_OK;
    /* the key is taken now, so a repeat later in this wave is a skip even
     * before this task's entry lands */
    key = oe_dispatch_key(k, ex);
    if (!key || oe_key_add(r, key, t)) {
        if (ex->kind != ORCH_EXEC_STUB)
            r->reserved--;
        return oe_nomem(err);
    }
    int rc = oe_task_begin(r, t, ex, r->plan_seq, err);
    if (rc && ex->kind != ORCH_EXEC_STUB)
        r->reserved--;
    return rc;
}
