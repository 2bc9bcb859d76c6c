/* orch_roles: the control roles' model calls: route (classifier), plan
 * (coordinator), verdicts and escalation (validator), synthesis and the
 * answer (synthesizer); stubs when no model is configured. */
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

static int lanes_text(const struct orch *o, struct fo_buf *b);
static char *stub_plan(const struct run *l);
static int is_stopword(const char *w);
static char lower(char c);
static int alnum(char c);
static cJSON *coverage(const char *request, const char *answer);
static void scrub_in_place(const struct orch *o, char *s, size_t cap);
static void on_role_reply(void *arg, int rc, struct orch_model_reply *rep,
                          const struct fo_err *err);
static int pick_tier(const struct orch *o, int want);
static void on_stub_reply(evutil_socket_t fd, short what, void *arg);
static void on_role_job(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr);
static cJSON *attempt_json(int role, int attempt, const char *why,
                           const char *model, const char *text);
static cJSON *plan_entry_json(struct run *r, const struct orch_plan *p,
                              const char *model, int attempts);
static void on_coordinator(struct run *r, long task, int rc,
                           struct orch_model_reply *rep,
                           const struct fo_err *cerr);
static int verdict_entry(struct run *r, size_t t, int pass, const char *by,
                         const cJSON *failed, const char *reason,
                         const char *model, int spent, struct fo_err *err);
static void on_validator(struct run *r, long task, int rc,
                         struct orch_model_reply *rep,
                         const struct fo_err *cerr);
static int results_text(const struct run *r, int stub, struct fo_buf *b);
static void on_synth(struct run *r, long task, int rc,
                     struct orch_model_reply *rep, const struct fo_err *cerr);

/* the tier each role asks for first */
static const int role_tier[] = {ORCH_TIER_CAPABLE, ORCH_TIER_CHEAP,
                                ORCH_TIER_CHEAP,   ORCH_TIER_CAPABLE,
                                ORCH_TIER_CHEAP,   ORCH_TIER_CHEAP};

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

struct run;

/* The stub coordinator: one task on the routed lane, the request as its
 * instruction. */
static char *stub_plan(const struct run *l)
{
    cJSON *pl = cJSON_CreateObject();
    cJSON *tasks = pl ? cJSON_AddArrayToObject(pl, "tasks") : NULL;
    cJSON *t = cJSON_CreateObject();
    char *s = NULL;
    if (tasks && t && cJSON_AddStringToObject(t, "id", "T1") &&
        cJSON_AddStringToObject(t, "agent", oe_run_lane(l)) &&
        cJSON_AddStringToObject(t, "instruction", oe_run_request(l))) {
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

/* ---- model calls and jobs ----------------------------------------------- */

void oe_effect_cancel(struct effect *f)
{
    if (!f)
        return;
    if (f->call)
        orch_model_call_cancel(f->call);
    if (f->job)
        orch_job_cancel(f->job);
    if (f->mcp)
        orch_mcpc_cancel(f->mcp);
    if (f->http) /* a verifier's or reviser's request */
        httpc_req_cancel(f->http);
    if (f->cmd)
        f->r->e->n_cmds--;
    if (f->tool) { /* the thread finishes on its own; its result is dropped */
        f->tool->f = NULL;
        orch_work_cancel(f->tool->job);
    }
    if (f->stub) {
        event_free(f->stub->ev);
        free(f->stub->text);
        free(f->stub);
    }
    free(f); /* the first member of its context */
}

/* The bounds (seconds) of the model-call latency histogram of /metrics. */
const double oe_lat_bounds[9] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

/* A model call (a provider's or the command's, never the stub's) ended;
 * rep (may be NULL) says how long it took and the tokens it used. */
void oe_record_call(struct orch_engine *e, int ok,
                    const struct orch_model_reply *rep)
{
    int64_t elapsed_us = rep ? rep->elapsed_us : 0;
    if (ok && rep && rep->tokens_in > 0)
        e->m_tokens_in += (uint64_t)rep->tokens_in;
    if (ok && rep && rep->tokens_out > 0)
        e->m_tokens_out += (uint64_t)rep->tokens_out;
    double sec = (double)elapsed_us / 1e6;
    size_t i = 0;
    while (i < 9 && sec > oe_lat_bounds[i])
        i++;
    e->m_lat[i]++;
    e->m_lat_sum += sec;
    if (ok)
        e->m_calls_ok++;
    else
        e->m_calls_failed++;
}

/* Text a model's server wrote beside the reply (the model field, an
 * error's body) is scanned like the reply: what the guardrails find is
 * replaced in place (cap bytes, cut on a character) before any entry or
 * log line holds it. */
static void scrub_in_place(const struct orch *o, char *s, size_t cap)
{
    if (!s || !s[0])
        return;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (orch_guard_scan(orch_guardrails(o), s, strlen(s), &b, NULL) > 0 &&
        b.data) {
        size_t n = orch_utf8_prefix(b.data, b.len, cap - 1);
        memcpy(s, b.data, n);
        s[n] = '\0';
    }
    fo_buf_release(&b);
}

/* A reply's side texts scrubbed (scrub_in_place); *err_out the error to
 * use (a scrubbed copy of err, or NULL). */
const struct fo_err *oe_reply_scrub(const struct orch *o,
                                    struct orch_model_reply *rep,
                                    const struct fo_err *err,
                                    struct fo_err *copy)
{
    if (rep)
        scrub_in_place(o, rep->model, sizeof(rep->model));
    if (!err)
        return NULL;
    *copy = *err;
    scrub_in_place(o, copy->msg, sizeof(copy->msg));
    return copy;
}

static void on_role_reply(void *arg, int rc, struct orch_model_reply *rep,
                          const struct fo_err *err)
{
    struct role_call_ctx *c = arg;
    struct run *r = c->f.r;
    struct fo_err scrubbed;
    err = oe_reply_scrub(r->e->o, rep, err, &scrubbed);
    long task = c->f.task;
    int role = c->f.role, model = !c->f.stub;
    if (model) /* the stub is no model call */
        oe_record_call(r->e, rc == FO_OK, rep);
    role_done_fn fn = c->fn;
    if (task >= 0) {
        r->t[task].eff = NULL;
        r->t[task].busy = 0;
    } else {
        r->eff = NULL;
        r->busy = 0;
    }
    free(c);
    /* a model's reply passes the guardrails before any of it is witnessed
     * (a plan, a verdict's reason, an answer, a rejected attempt) */
    char *clean = NULL, *was = rep ? rep->text : NULL;
    struct fo_err gerr;
    int g = model && rc == FO_OK && was
                ? oe_guard_role(r, role, task, was, &clean, &gerr)
                : 0;
    if (g < 0) {
        oe_fail(r, -g, &gerr);
        oe_step(r);
        return;
    }
    if (clean) {
        rep->text = clean;
        rep->text_len = strlen(clean);
    }
    fn(r, task, rc, rep, err);
    if (clean) {
        if (rep->text == clean) /* not taken */
            free(clean);
        rep->text = was;
        rep->text_len = was ? strlen(was) : 0;
    }
    oe_step(r);
}

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

static void on_stub_reply(evutil_socket_t fd, short what, void *arg)
{
    struct stub_reply *s = arg;
    (void)fd, (void)what;
    struct orch_model_reply rep = {0};
    rep.text = s->text;
    rep.text_len = strlen(s->text);
    snprintf(rep.model, sizeof(rep.model), "stub");
    struct role_call_ctx *c = s->c;
    event_free(s->ev);
    free(s);
    on_role_reply(c, FO_OK, &rep, NULL);
    free(rep.text);
}

/* A role answered by the --cmd command: its stdout is the reply. */
static void on_role_job(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr)
{
    struct role_call_ctx *c = arg;
    struct orch_model_reply rep = {0};
    struct fo_err err;
    fo_err_clear(&err);
    snprintf(rep.model, sizeof(rep.model), "%s", res->model);
    rep.elapsed_us = res->elapsed_us;
    rep.attempts = 1;
    if (rc == FO_OK && res->ok) {
        rep.text = res->output;
        rep.text_len = res->output_len;
    } else if (rc == FO_OK) {
        size_t el = res->errout
                        ? orch_utf8_prefix(res->errout, res->errout_len, 300)
                        : 0;
        rc = res->timed_out ? FO_E_TIMEOUT : FO_E_UPSTREAM;
        fo_err_set(&err, rc, "the command %s%s%.*s",
                   res->error[0] ? res->error : "failed", el ? ": " : "",
                   (int)el, el ? res->errout : "");
    } else {
        err = *jerr;
    }
    int gave = rep.text != NULL;
    on_role_reply(c, rc, &rep, &err);
    if (gave && !rep.text) /* the role took the output */
        res->output = NULL;
}

int oe_role_start(struct run *r, int role, long task,
                  const struct orch_model_msg *m, size_t n,
                  const char *stub_text, role_done_fn fn, struct fo_err *err)
{
    const struct orch *o = r->e->o;
    struct role_call_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return oe_nomem(err);
    c->f = (struct effect){.kind = E_ROLE, .r = r, .role = role, .task = task};
    c->fn = fn;
    int rc = FO_OK;
    if (!o->models && o->argv) { /* --cmd answers every role */
        struct fo_buf prompt;
        fo_buf_init(&prompt, PROMPT_MAX);
        for (size_t i = 0; i < n && !rc; i++)
            rc = fo_buf_printf(&prompt, "%s%s", i ? "\n\n" : "", m[i].content);
        if (!rc)
            rc = orch_job_start(&o->exec, r->e->cfg.base, prompt.data,
                                on_role_job, c, &c->f.job, err);
        else
            rc = fo_err_set(err, rc,
                            rc == FO_E_TOO_LARGE
                                ? "the role's prompt is over 1 MiB"
                                : NULL);
        fo_buf_release(&prompt);
        if (rc) {
            free(c);
            return rc;
        }
    } else if (!o->models) {
        struct stub_reply *s = calloc(1, sizeof(*s));
        char *text = orch_strdup(stub_text);
        struct event *ev =
            s ? event_new(r->e->cfg.base, -1, 0, on_stub_reply, s) : NULL;
        if (!s || !text || !ev) {
            free(s);
            free(text);
            if (ev)
                event_free(ev);
            free(c);
            return oe_nomem(err);
        }
        *s = (struct stub_reply){.ev = ev, .c = c, .text = text};
        c->f.stub = s;
        event_active(ev, EV_TIMEOUT, 0);
    } else {
        rc = orch_model_call_start(o->models, r->e->cfg.base, r->e->cfg.dns,
                                   ORCH_EXEC_DEFAULT,
                                   pick_tier(o, role_tier[role]), m, n,
                                   on_role_reply, c, &c->f.call, err);
        if (rc) {
            free(c);
            return rc;
        }
    }
    if (task >= 0) {
        r->t[task].eff = &c->f;
        r->t[task].busy = 1;
    } else {
        r->eff = &c->f;
        r->busy = 1;
    }
    return FO_OK;
}

/* A role whose reply must be JSON: the messages of attempt a->n + 1 (the
 * last rejected reply and what was wrong, when there is one). */
int oe_json_role_start(struct run *r, int role, long task, const char *system,
                       const char *user, const char *stub_text,
                       const struct attempts *a, role_done_fn fn,
                       struct fo_err *err)
{
    char fix[FO_ERR_MSG_MAX + 160];
    struct orch_model_msg m[4] = {{.role = "system", .content = system},
                                  {.role = "user", .content = user}};
    size_t n = 2;
    if (a->last) {
        snprintf(fix, sizeof(fix),
                 "That reply was rejected: %s. Answer again with only the "
                 "corrected JSON object.",
                 a->why);
        m[n++] =
            (struct orch_model_msg){.role = "assistant", .content = a->last};
        m[n++] = (struct orch_model_msg){.role = "user", .content = fix};
    }
    return oe_role_start(r, role, task, m, n, stub_text, fn, err);
}

/* The `<role>_attempt` entry of a rejected reply. */
static cJSON *attempt_json(int role, int attempt, const char *why,
                           const char *model, const char *text)
{
    cJSON *e = cJSON_CreateObject();
    size_t len = strlen(text);
    size_t keep = orch_utf8_prefix(text, len, REPLY_KEEP);
    char *cut = malloc(keep + 1);
    if (cut) {
        memcpy(cut, text, keep);
        cut[keep] = '\0';
    }
    int ok = e && cut &&
             cJSON_AddStringToObject(e, "role", oe_role_name[role]) &&
             fo_json_add_int(e, "attempt", attempt) &&
             cJSON_AddFalseToObject(e, "ok") &&
             cJSON_AddStringToObject(e, "error", why) &&
             cJSON_AddStringToObject(e, "model", model) &&
             cJSON_AddStringToObject(e, "reply", cut) &&
             (keep == len || cJSON_AddTrueToObject(e, "reply_truncated"));
    free(cut);
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* Witnesses a rejected reply as `<role>_attempt`; the role's step counts
 * them (its attempts) and gives up after ORCH_JSON_ATTEMPTS. */
int oe_rejected(struct run *r, int role, long task, int64_t parent,
                const struct attempts *a, const char *why, const char *model,
                const char *text, struct fo_err *err)
{
    /* the kind outlives this call (the write lands later): a constant */
    static const char *const kinds[] = {
        "coordinator_attempt", "classifier_attempt", "validator_attempt",
        "synthesizer_attempt", "summarizer_attempt", "judge_attempt"};
    cJSON *e = attempt_json(role, a->n + 1, why, model, text);
    if (!e)
        return oe_nomem(err);
    return oe_witness(r, oe_role_name[role], kinds[role], parent, e, task,
                      task < 0, 1, err);
}

/* ---- route -------------------------------------------------------------- */

int oe_route_entry(struct run *r, struct orch_route *rt, const char *lane,
                   const char *by, const char *model, int spent,
                   struct fo_err *err)
{
    cJSON *e = orch_route_json(rt);
    cJSON *c = e ? cJSON_GetObjectItemCaseSensitive(e, "candidates") : NULL;
    while (c && cJSON_GetArraySize(c) > ROUTE_SHOWN)
        cJSON_DeleteItemFromArray(c, cJSON_GetArraySize(c) - 1);
    if (!e || !cJSON_AddStringToObject(e, "lane", lane) ||
        !cJSON_AddStringToObject(e, "by", by) ||
        (model && model[0] && !cJSON_AddStringToObject(e, "model", model))) {
        cJSON_Delete(e);
        return oe_nomem(err);
    }
    return oe_witness(r, "router", "route", r->id, e, -1, 1, spent, err);
}

void oe_on_classifier(struct run *r, long task, int rc,
                      struct orch_model_reply *rep, const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    struct orch_route rt = {0};
    const struct orch_roster *ro = orch_roster(r->e->o);
    if (rc) {
        oe_fail(r, rc, cerr);
        return;
    }
    rc = orch_route(ro, r->request, strlen(r->request), &rt, &err);
    if (rc) {
        oe_fail(r, rc, &err);
        return;
    }
    cJSON *j = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    const struct orch_lane *ln = NULL;
    if (!orch_json_extract(rep->text, rep->text_len, &j, &why)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "lane");
        if (!cJSON_IsString(v))
            fo_err_set(&why, FO_E_INVALID, "\"lane\" must be a string");
        else if (!(ln = orch_roster_find(ro, v->valuestring)))
            fo_err_set(&why, FO_E_INVALID, "no agent named \"%.64s\"",
                       v->valuestring);
    }
    cJSON_Delete(j);
    if (ln)
        rc =
            oe_route_entry(r, &rt, ln->name, "classifier", rep->model, 1, &err);
    else /* after ORCH_JSON_ATTEMPTS of these, route_step takes the top
          * candidate */
        rc = oe_rejected(r, R_CLASSIFIER, -1, r->id, &r->cls, why.msg,
                         rep->model, rep->text, &err);
    orch_route_release(&rt);
    if (rc)
        oe_fail(r, rc, &err);
}

/* ---- plan --------------------------------------------------------------- */

static cJSON *plan_entry_json(struct run *r, const struct orch_plan *p,
                              const char *model, int attempts)
{
    cJSON *e = orch_plan_json(p);
    if (!e || !fo_json_add_int(e, "max_parallel", r->e->o->max_parallel) ||
        (model && !cJSON_AddStringToObject(e, "model", model)) ||
        (attempts && !fo_json_add_int(e, "attempts", attempts)) ||
        (r->route_seq >= 0 && !fo_json_add_int(e, "route_seq", r->route_seq))) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

static void on_coordinator(struct run *r, long task, int rc,
                           struct orch_model_reply *rep,
                           const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    if (rc) {
        struct fo_err e2 = *cerr;
        fo_err_prefix(&e2, "coordinator");
        oe_fail(r, rc, &e2);
        return;
    }
    cJSON *j = NULL;
    struct orch_plan *p = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    rc = orch_json_extract(rep->text, rep->text_len, &j, &why);
    if (!rc)
        rc = orch_plan_compile(j, orch_roster(r->e->o), &p, &why);
    cJSON_Delete(j);
    if (rc == FO_E_NOMEM) {
        oe_fail(r, rc, &why);
        return;
    }
    if (!rc) {
        cJSON *e = plan_entry_json(r, p, rep->model, r->coord.n + 1);
        orch_plan_free(p);
        rc = e ? oe_witness(r, "coordinator", "plan", r->id, e, -1, 1, 1, &err)
               : oe_nomem(&err);
    } else {
        rc = oe_rejected(r, R_COORDINATOR, -1, r->id, &r->coord, why.msg,
                         rep->model, rep->text, &err);
    }
    if (rc)
        oe_fail(r, rc, &err);
}

void oe_plan_step(struct run *r)
{
    struct fo_err err;
    int rc = FO_OK;
    if (oe_lane_step(r))
        return;
    if (r->given) { /* plan_run: the plan given is the plan */
        struct orch_plan *p = NULL;
        rc = orch_plan_compile(r->given, orch_roster(r->e->o), &p, &err);
        cJSON *e = rc ? NULL : plan_entry_json(r, p, NULL, 0);
        orch_plan_free(p);
        if (!rc)
            rc = e ? oe_witness(r, "planner", "plan", r->id, e, -1, 1, 0, &err)
                   : oe_nomem(&err);
        if (rc)
            oe_fail(r, rc, &err);
        return;
    }
    if (r->coord.n >= ORCH_JSON_ATTEMPTS) {
        fo_err_set(&err, FO_E_UPSTREAM,
                   "coordinator: no valid reply after %d attempts: %s",
                   r->coord.n, r->coord.why);
        oe_fail(r, FO_E_UPSTREAM, &err);
        return;
    }
    if (!oe_spend(r, "coordinator", 0))
        return;
    struct fo_buf lanes;
    fo_buf_init(&lanes, LANES_TEXT_MAX);
    char *system = NULL, *stub = NULL;
    rc = lanes_text(r->e->o, &lanes);
    struct orch_tmpl_var v[] = {{"lanes", lanes.data ? lanes.data : ""},
                                {"lane", r->lane}};
    if (rc)
        rc = oe_nomem(&err);
    else
        rc =
            orch_template_render(coord_system, v, 2, PROMPT_MAX, &system, &err);
    if (!rc && !(stub = stub_plan(r)))
        rc = oe_nomem(&err);
    if (!rc)
        rc = oe_json_role_start(r, R_COORDINATOR, -1, system, oe_run_prompt(r),
                                stub, &r->coord, on_coordinator, &err);
    free(system);
    free(stub);
    fo_buf_release(&lanes);
    if (rc) {
        r->reserved--;
        oe_fail(r, rc, &err);
    }
}

/* ---- verdicts and escalation -------------------------------------------- */

static int verdict_entry(struct run *r, size_t t, int pass, const char *by,
                         const cJSON *failed, const char *reason,
                         const char *model, int spent, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    const struct task *s = &r->t[t];
    cJSON *e = cJSON_CreateObject();
    int ok =
        e && cJSON_AddStringToObject(e, "id", k->id) &&
        cJSON_AddBoolToObject(e, "pass", pass) &&
        cJSON_AddBoolToObject(e, "judged", strcmp(by, "unjudged")) &&
        cJSON_AddStringToObject(e, "by", by) &&
        cJSON_AddItemToObject(e, "failed",
                              failed ? cJSON_Duplicate(failed, 1)
                                     : cJSON_CreateArray()) &&
        (!reason || !*reason || cJSON_AddStringToObject(e, "reason", reason)) &&
        (!model || !*model || cJSON_AddStringToObject(e, "model", model)) &&
        cJSON_AddStringToObject(e, "result_model", s->model) &&
        (s->tier < 0 ||
         cJSON_AddStringToObject(e, "tier", orch_tier_name(s->tier)));
    if (!ok) {
        cJSON_Delete(e);
        return oe_nomem(err);
    }
    return oe_witness(r, "validator", "verdict", s->result_seq, e, (long)t, 0,
                      spent, err);
}

static void on_validator(struct run *r, long task, int rc,
                         struct orch_model_reply *rep,
                         const struct fo_err *cerr)
{
    size_t t = (size_t)task;
    struct task *s = &r->t[t];
    struct fo_err err;
    if (rc) {
        struct fo_err e2 = *cerr;
        fo_err_prefix(&e2, "validator");
        oe_fail(r, rc, &e2);
        return;
    }
    cJSON *j = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    int pass = 0;
    char reason[512] = "";
    rc = orch_json_extract(rep->text, rep->text_len, &j, &why);
    if (!rc) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pass");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(j, "reason");
        if (!cJSON_IsBool(p)) {
            rc = fo_err_set(&why, FO_E_INVALID,
                            "\"pass\" must be true or false");
        } else {
            pass = cJSON_IsTrue(p);
            snprintf(reason, sizeof(reason), "%s",
                     cJSON_IsString(re) ? re->valuestring : "");
        }
    }
    cJSON_Delete(j);
    if (rc) {
        rc = oe_rejected(r, R_VALIDATOR, task, s->result_seq, &s->val, why.msg,
                         rep->model, rep->text, &err);
    } else {
        cJSON *failed = cJSON_CreateArray();
        if (failed && !pass) {
            char line[700];
            snprintf(line, sizeof(line), "validator: %s", reason);
            cJSON *f = cJSON_CreateString(line);
            if (f)
                cJSON_AddItemToArray(failed, f);
        }
        rc = failed ? verdict_entry(r, t, pass, "validator", failed, reason,
                                    rep->model, 1, &err)
                    : oe_nomem(&err);
        cJSON_Delete(failed);
    }
    if (rc)
        oe_fail(r, rc, &err);
}

/* Judges task t's last result: a failed task fails without asking; then
 * the done_when assertions; only plain-text criteria go to the validator
 * model; with nothing to judge by the verdict is `unjudged`. */
int oe_judge(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    struct task *s = &r->t[t];
    if (s->ran_ok && !s->revised &&
        (oe_task_lane(r, t)->reviser.argv || oe_task_lane(r, t)->reviser.url))
        return oe_hook_start(r, t, 0, err); /* the lane's reviser first */
    if (!s->ran_ok) {
        cJSON *f = cJSON_CreateArray();
        cJSON *one = cJSON_CreateString("the task failed (no result)");
        if (!f || !one) {
            cJSON_Delete(f);
            cJSON_Delete(one);
            return oe_nomem(err);
        }
        cJSON_AddItemToArray(f, one);
        int rc = verdict_entry(r, t, 0, "task_failed", f,
                               "the task did not finish ok", NULL, 0, err);
        cJSON_Delete(f);
        return rc;
    }
    struct orch_verdict v = {0};
    int rc = orch_assert_check(k->done, s->output, s->output_len, s->exit_code,
                               &v, err);
    if (rc)
        return rc;
    int plain = v.validator && cJSON_GetArraySize(v.validator) > 0;
    if (!v.pass) {
        rc = verdict_entry(r, t, 0, "assertions", v.failed, NULL, NULL, 0, err);
    } else if (!k->done || (plain && !r->e->o->models)) {
        rc = verdict_entry(r, t, 0, "unjudged", NULL,
                           !k->done ? "the task has no done_when criteria"
                                    : "no model is configured to judge its "
                                      "plain-text criteria",
                           NULL, 0, err);
    } else if (plain) {
        if (s->val.n >= ORCH_JSON_ATTEMPTS) {
            cJSON *f = cJSON_CreateArray();
            cJSON *one = cJSON_CreateString(
                "validator: the validator gave no valid verdict");
            if (f && one)
                cJSON_AddItemToArray(f, one);
            else
                cJSON_Delete(one);
            rc = f ? verdict_entry(r, t, 0, "validator", f,
                                   "the validator gave no valid verdict", NULL,
                                   0, err)
                   : oe_nomem(err);
            cJSON_Delete(f);
        } else if (oe_spend(r, "validator", 0)) {
            struct fo_buf crit;
            fo_buf_init(&crit, FO_BUF_UNLIMITED);
            const cJSON *c;
            cJSON_ArrayForEach (c, v.validator)
                if (!rc && cJSON_IsString(c))
                    rc = fo_buf_printf(&crit, "- %s\n", c->valuestring);
            size_t on =
                orch_utf8_prefix(s->output, s->output_len, r->e->o->inject_max);
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
                rc = oe_nomem(err);
            else
                rc = orch_template_render(validator_user, tv, 3, PROMPT_MAX,
                                          &user, err);
            if (!rc)
                rc = oe_json_role_start(r, R_VALIDATOR, (long)t,
                                        validator_system, user,
                                        "{\"pass\": true, \"reason\": \"stub "
                                        "validator\"}",
                                        &s->val, on_validator, err);
            if (rc)
                r->reserved--;
            free(user);
            free(outcut);
            fo_buf_release(&crit);
        }
    } else {
        rc = verdict_entry(r, t, 1, "assertions", NULL, NULL, NULL, 0, err);
    }
    orch_verdict_release(&v);
    return rc;
}

/* The next stronger executor of task t's api with a provider that this run
 * has not dispatched the task on, or NULL. */
const struct orch_exec_config *oe_next_tier(const struct run *r, size_t t)
{
    const struct orch *o = r->e->o;
    const struct task *s = &r->t[t];
    int api = -1, tier = -1;
    if (!s->ex || oe_model_slot(o, s->ex, &api, &tier) != 0)
        return NULL;
    for (int up = tier + 1; up <= ORCH_TIER_FRONTIER; up++) {
        if (!o->model_has[api][up])
            continue;
        char *key = oe_dispatch_key(&r->p->tasks[t], &o->model_exec[api][up]);
        long seen = key ? oe_key_seen(r, key) : 0;
        free(key);
        if (seen < 0)
            return &o->model_exec[api][up];
    }
    return NULL;
}

int oe_escalate(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    struct task *s = &r->t[t];
    if (oe_retry_left(r, t)) /* the same tier again first */
        return oe_retry(r, t, err);
    const struct orch_exec_config *next = oe_next_tier(r, t);
    if (!next) { /* cannot happen: apply saw one */
        s->st = TS_FINAL;
        return FO_OK;
    }
    char what[ORCH_NAME_MAX + 16];
    snprintf(what, sizeof(what), "escalation of %s", k->id);
    /* the budget is checked before the escalation is witnessed, so a spent
     * budget never leaves an escalation without its task */
    if (!oe_spend(r, what, 0))
        return FO_OK;
    r->reserved--; /* the task entry takes it */
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddStringToObject(e, "id", k->id) ||
        !cJSON_AddStringToObject(e, "agent", k->agent) ||
        !cJSON_AddStringToObject(e, "from", orch_tier_name(s->tier)) ||
        !cJSON_AddStringToObject(e, "to", orch_tier_name(next->tier)) ||
        !cJSON_AddStringToObject(e, "model", next->model) ||
        !cJSON_AddItemToObject(e, "because",
                               s->failed ? cJSON_Duplicate(s->failed, 1)
                                         : cJSON_CreateArray())) {
        cJSON_Delete(e);
        return oe_nomem(err);
    }
    return oe_witness(r, "loop", "tier_escalation", s->verdict_seq, e, (long)t,
                      0, 0, err);
}

/* ---- synthesis and the answer ------------------------------------------- */

static int results_text(const struct run *r, int stub, struct fo_buf *b)
{
    int rc = FO_OK, any = 0;
    for (size_t i = 0; !rc && i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        size_t n = s->output ? orch_utf8_prefix(s->output, s->output_len,
                                                r->e->o->inject_max)
                             : 0;
        if (stub) {
            if (!s->output || s->st == TS_SKIPPED)
                continue;
            rc = fo_buf_puts(b, any++ ? "\n\n" : "");
            if (!rc)
                rc = fo_buf_append(b, s->output, n);
            continue;
        }
        const char *state = s->st == TS_REFUSED   ? "refused by policy"
                            : s->st == TS_SKIPPED ? "a repeat, skipped"
                            : s->pass             ? "passed"
                            : s->unjudged         ? "not judged"
                            : s->ran_ok           ? "did not pass"
                                                  : "failed";
        rc = fo_buf_printf(b, "[%s, agent %s: %s]\n", k->id, k->agent, state);
        if (!rc && s->output && s->st != TS_SKIPPED)
            rc = fo_buf_append(b, s->output, n);
        if (!rc)
            rc = fo_buf_puts(b, "\n\n");
    }
    if (!rc && stub && !any)
        rc = fo_buf_puts(b, "forum: no task produced a result.");
    return rc;
}

static void on_synth(struct run *r, long task, int rc,
                     struct orch_model_reply *rep, const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    if (rc) {
        struct fo_err e2 = *cerr;
        fo_err_prefix(&e2, "synthesizer");
        oe_fail(r, rc, &e2);
        return;
    }
    cJSON *cov = coverage(r->request, rep->text);
    cJSON *e = cJSON_CreateObject();
    int64_t parent = r->plan_seq >= 0 ? r->plan_seq : r->id;
    int ok = cov && e && cJSON_AddStringToObject(e, "answer", rep->text) &&
             cJSON_AddStringToObject(e, "model", rep->model) &&
             cJSON_AddItemToObject(e, "coverage", cov) &&
             fo_json_add_int(e, "model_calls", r->calls + 1);
    if (!ok) {
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(e, "coverage")))
            cJSON_Delete(cov);
        cJSON_Delete(e);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    rc = oe_witness(r, "synthesizer", "answer", parent, e, -1, 1, 1, &err);
    if (rc)
        oe_fail(r, rc, &err);
}

void oe_synth_step(struct run *r)
{
    struct fo_err err;
    if (!oe_spend(r, "synthesizer", 0))
        return;
    struct fo_buf res, stub;
    fo_buf_init(&res, FO_BUF_UNLIMITED);
    fo_buf_init(&stub, FO_BUF_UNLIMITED);
    char *user = NULL;
    const struct orch *o = r->e->o;
    /* Without a model the answer says so first, whatever the tasks ran on
     * (the stub, or a --cmd): no reader should take it for a model's. */
    int rc =
        (!o->models && !o->argv && fo_buf_puts(&stub, ORCH_NO_MODEL_NOTE)) ||
                results_text(r, 0, &res) || results_text(r, 1, &stub)
            ? oe_nomem(&err)
            : FO_OK;
    struct orch_tmpl_var v[] = {{"request", oe_run_prompt(r)},
                                {"results", res.data ? res.data : ""}};
    if (!rc)
        rc = orch_template_render(synth_user, v, 2, 0, &user, &err);
    /* a delivery profile's rules follow the synthesizer's own */
    struct fo_buf sys;
    fo_buf_init(&sys, FO_BUF_UNLIMITED);
    if (!rc && r->profile[0] &&
        (fo_buf_printf(&sys, "%s\n\n", synth_system) ||
         orch_profile_guide(r->profile, &sys, &err)))
        rc = oe_nomem(&err);
    struct orch_model_msg m[] = {
        {.role = "system", .content = sys.data ? sys.data : synth_system},
        {.role = "user", .content = user}};
    if (!rc)
        rc = oe_role_start(r, R_SYNTHESIZER, -1, m, 2,
                           stub.data ? stub.data : "", on_synth, &err);
    free(user);
    fo_buf_release(&sys);
    fo_buf_release(&res);
    fo_buf_release(&stub);
    if (rc) {
        r->reserved--;
        oe_fail(r, rc, &err);
    }
}

/* The fixed answer of a run the budget, a cancel or a shutdown stopped. */
const char *oe_stop_answer(const struct run *r)
{
    const char *s = r->halt_reason ? r->halt_reason : "";
    return !strcmp(s, "shutdown")        ? ORCH_STOPPED_ANSWER
           : !strcmp(s, "cancelled")     ? ORCH_CANCELLED_ANSWER
           : !strcmp(s, "gate_rejected") ? ORCH_REJECTED_ANSWER
           : !strcmp(s, "gate_expired")  ? ORCH_EXPIRED_ANSWER
                                         : ORCH_BUDGET_ANSWER;
}

/* A halted run, once nothing it started is in flight: a cancel or the
 * budget write `budget` and the fixed answer; a shutdown writes `stop` and
 * leaves the run to be resumed. Tasks abandoned by a cancel get a result
 * first, so no task entry is left without one. */
void oe_halt_step(struct run *r)
{
    struct fo_err err;
    int rc = FO_OK;
    if (r->writes > 0 || r->busy || r->eff)
        return;
    for (size_t i = 0; r->t && i < r->p->n; i++)
        if (r->t[i].busy)
            return;
    int64_t parent = r->plan_seq >= 0 ? r->plan_seq : r->id;
    if (r->halt == H_SHUTDOWN) {
        if (r->halt_written || r->id < 0) {
            r->ended = 1;
            return;
        }
        cJSON *e = cJSON_CreateObject();
        rc = e && cJSON_AddStringToObject(e, "reason", "shutdown") &&
                     fo_json_add_int(e, "last_seq", r->last_seq) &&
                     cJSON_AddStringToObject(e, "instance", r->e->instance)
                 ? oe_witness(r, "loop", "stop", r->id, e, -1, 1, 0, &err)
                 : oe_nomem(&err);
        if (rc) {
            cJSON_Delete(e);
            r->ended = 1;
        }
        r->halt_written = 1;
        return;
    }
    /* the budget: a task witnessed still runs, gets its result and is
     * judged (without a model: no call is left) */
    if (r->halt == H_BUDGET)
        for (size_t i = 0; r->t && i < r->p->n; i++) {
            struct task *s = &r->t[i];
            if (s->st == TS_RUN) {
                oe_task_exec(r, i);
                return;
            }
            if (s->st == TS_RESULT && !s->halt_judged) {
                s->halt_judged = 1;
                rc = oe_judge(r, i, &err);
                if (rc) {
                    oe_fail(r, rc, &err);
                    return;
                }
                if (s->busy || r->writes)
                    return;
            }
        }
    if (r->halt == H_CANCEL)
        for (size_t i = 0; r->t && i < r->p->n; i++)
            if (r->t[i].st == TS_RUN) {
                struct orch_result res = {.exit_code = -1};
                snprintf(res.error, sizeof(res.error), "cancelled");
                snprintf(res.model, sizeof(res.model), "%s",
                         r->t[i].ex ? r->t[i].ex->model : "");
                oe_task_result(r, i, &res);
                return;
            }
    if (r->budget_seq < 0) {
        cJSON *e = cJSON_CreateObject();
        int ok =
            e && cJSON_AddStringToObject(e, "reason", r->halt_reason) &&
            cJSON_AddStringToObject(e, "stopped_before", r->stopped_before) &&
            fo_json_add_int(e, "model_calls", r->calls) &&
            fo_json_add_int(e, "max_model_calls", r->max_calls) &&
            fo_json_add_int(e, "max_seconds", r->max_seconds) &&
            fo_json_add_int(e, "elapsed_ms", oe_elapsed_ms(r)) &&
            fo_json_add_int(e, "last_seq", r->last_seq);
        rc = ok ? oe_witness(r, "loop", "budget", parent, e, -1, 1, 0, &err)
                : oe_nomem(&err);
        if (!ok)
            cJSON_Delete(e);
    } else if (r->answer_seq < 0) {
        cJSON *e = cJSON_CreateObject();
        int ok = e && cJSON_AddStringToObject(e, "answer", oe_stop_answer(r)) &&
                 fo_json_add_int(e, "model_calls", r->calls) &&
                 cJSON_AddTrueToObject(e, "budget_spent");
        rc = ok ? oe_witness(r, "synthesizer", "answer", parent, e, -1, 1, 0,
                             &err)
                : oe_nomem(&err);
        if (!ok)
            cJSON_Delete(e);
    }
    if (rc)
        oe_fail(r, rc, &err);
}
