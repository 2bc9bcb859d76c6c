/* orch_counts: what a ledger's entries add up to for the orchestrator:
 * requests, plans, tasks, refusals, results by outcome, and model calls
 * by model.
 * Reading a result's outcome means reading its body, so this is one scan
 * with bodies: O(entries); a summary is rare. The ledger's own summary
 * (ledger_summary) knows nothing of these kinds. */
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "daemon/orch_int.h"
#include "ledger/fo_json.h"

/* A step of a task's tool loop (or the task itself), by seq: the highest
 * turn its conversation had witnessed, and the model it ran on. */
struct conv {
    int64_t seq;
    int turn;
    char *model;
};

struct counts {
    int64_t requests, plans, tasks, refusals;
    int64_t results_ok, results_failed, results_redacted;
    cJSON *models; /* {"model id": calls} */
    struct conv *conv;
    size_t nconv, capconv;
};

#define NOT_RECORDED "(model not recorded)"

static const char *str_of(const cJSON *b, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long long int_of(const cJSON *b, const char *k)
{
    long long n = 0;
    return fo_json_get_int(b, k, 0, 1000000, &n) == FO_OK ? n : 0;
}

/* The step seq, or NULL (entries come in seq order: a binary search). */
static const struct conv *conv_find(const struct counts *c, int64_t seq)
{
    size_t lo = 0, hi = c->nconv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->conv[mid].seq == seq)
            return &c->conv[mid];
        if (c->conv[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int conv_add(struct counts *c, int64_t seq, int turn, const char *model)
{
    if (c->nconv == c->capconv) {
        size_t cap = c->capconv ? 2 * c->capconv : 64;
        struct conv *v = realloc(c->conv, cap * sizeof(*v));
        if (!v)
            return FO_E_NOMEM;
        c->conv = v;
        c->capconv = cap;
    }
    char *m = model ? orch_strdup(model) : NULL;
    if (model && !m)
        return FO_E_NOMEM;
    c->conv[c->nconv++] = (struct conv){seq, turn, m};
    return FO_OK;
}

static int add_call(struct counts *c, const char *model)
{
    if (!model)
        model = NOT_RECORDED;
    if (!strcmp(model, "stub"))
        return FO_OK; /* the stub is not a model */
    cJSON *n = cJSON_GetObjectItemCaseSensitive(c->models, model);
    if (n)
        cJSON_SetNumberValue(n, n->valuedouble + 1);
    else if (!fo_json_add_int(c->models, model, 1))
        return FO_E_NOMEM;
    return FO_OK;
}

/* The model calls entry e witnesses, as the engine counts them when it
 * reads a run back: a role's rejected attempt and its accepted reply (a
 * route by the classifier, a coordinator's plan, a validator's verdict, a
 * synthesizer's answer, a compaction), a task sent to a model, and each
 * later turn of its tool loop, seen at the first step of the turn
 * (tool_call, tool_rescue) or at the result of a turn that called no
 * tool. The stub is not a model: its steps are not counted. */
static int count_calls(struct counts *c, const struct ledger_entry *e,
                       const cJSON *b)
{
    const char *k = e->kind, *model = str_of(b, "model");
    const char *by = str_of(b, "by");
    if (!strcmp(k, "classifier_attempt") || !strcmp(k, "coordinator_attempt") ||
        !strcmp(k, "validator_attempt") || !strcmp(k, "compaction") ||
        !strcmp(k, "judge_attempt") ||
        (!strcmp(k, "intent_judgment") && model) ||
        (!strcmp(k, "route") && by && !strcmp(by, "classifier")) ||
        (!strcmp(k, "plan") && !strcmp(e->actor, "coordinator")) ||
        (!strcmp(k, "verdict") && by && !strcmp(by, "validator") && model) ||
        (!strcmp(k, "answer") && model))
        return add_call(c, model);
    if (!strcmp(k, "task")) {
        const char *ex = str_of(b, "executor");
        int rc = conv_add(c, e->seq, 1, model);
        if (!rc && !(ex && !strcmp(ex, "stub")))
            rc = add_call(c, model);
        return rc;
    }
    int step = !strcmp(k, "tool_call") || !strcmp(k, "tool_rescue");
    int res = !strcmp(k, "tool_result");
    if (!step && !res && strcmp(k, "result") != 0)
        return FO_OK;
    const struct conv *p = conv_find(c, e->parent);
    int seen = p ? p->turn : 0;
    const char *m = model ? model : p ? p->model : NULL;
    long long turn = int_of(b, step ? "turn" : "turns");
    int rc = FO_OK;
    if (!res && turn >= 2 && turn > seen)
        rc = add_call(c, m);
    if (!rc && (step || res))
        rc = conv_add(c, e->seq, step && turn > seen ? (int)turn : seen, m);
    return rc;
}

static int count_entry(void *ctx, const struct ledger_entry *e,
                       const char *body, size_t len)
{
    struct counts *c = ctx;
    const char *k = e->kind;
    if (!strcmp(k, "request"))
        c->requests++;
    else if (!strcmp(k, "plan"))
        c->plans++;
    else if (!strcmp(k, "task"))
        c->tasks++;
    else if (!strcmp(k, "refusal"))
        c->refusals++;
    cJSON *b = NULL;
    int is_result = !strcmp(k, "result");
    if (!body || fo_json_parse(body, len, &b, NULL) != FO_OK) {
        if (is_result)
            c->results_redacted++; /* a body we cannot read: redacted */
        return FO_OK;
    }
    int rc = count_calls(c, e, b);
    if (is_result) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok")))
            c->results_ok++;
        else
            c->results_failed++;
    }
    cJSON_Delete(b);
    return rc;
}

static void counts_release(struct counts *c)
{
    for (size_t i = 0; i < c->nconv; i++)
        free(c->conv[i].model);
    free(c->conv);
}

int orch_run_counts(struct ledger *l, cJSON **out, struct fo_err *err)
{
    struct counts c = {.models = cJSON_CreateObject()};
    if (!c.models)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_range_bodies(l, 0, -1, count_entry, &c, err);
    counts_release(&c);
    if (rc) {
        cJSON_Delete(c.models);
        return rc == FO_E_NOMEM ? fo_err_set(err, rc, NULL) : rc;
    }
    cJSON *o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "requests", c.requests) &&
             fo_json_add_int(o, "plans", c.plans) &&
             fo_json_add_int(o, "tasks", c.tasks) &&
             fo_json_add_int(o, "refusals", c.refusals) &&
             fo_json_add_int(o, "results_ok", c.results_ok) &&
             fo_json_add_int(o, "results_failed", c.results_failed) &&
             fo_json_add_int(o, "results_redacted", c.results_redacted);
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(c.models);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    cJSON_AddItemToObject(o, "model_calls", c.models);
    *out = o;
    return FO_OK;
}

int orch_summary(struct ledger *l, cJSON **out, struct fo_err *err)
{
    cJSON *s = NULL, *runs = NULL;
    int rc = ledger_summary(l, &s, err);
    if (rc)
        return rc;
    rc = orch_run_counts(l, &runs, err);
    if (rc) {
        cJSON_Delete(s);
        return rc;
    }
    cJSON_AddItemToObject(s, "runs", runs);
    *out = s;
    return FO_OK;
}
