/* orch_counts: what a ledger's entries add up to for the orchestrator:
 * requests, plans, tasks, refusals, and results by outcome and by model.
 * Reading a result's outcome means reading its body, so this is one scan
 * with bodies: O(entries); a summary is rare. The ledger's own summary
 * (ledger_summary) knows nothing of these kinds. */
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"

struct counts {
    int64_t requests, plans, tasks, refusals;
    int64_t results_ok, results_failed, results_redacted;
    cJSON *models; /* {"model id": calls} */
};

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
    if (strcmp(k, "result") != 0)
        return FO_OK;
    cJSON *b = NULL;
    if (!body || fo_json_parse(body, len, &b, NULL) != FO_OK) {
        c->results_redacted++; /* a body we cannot read: redacted */
        return FO_OK;
    }
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(b, "ok");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(b, "model");
    if (cJSON_IsTrue(ok))
        c->results_ok++;
    else
        c->results_failed++;
    int rc = FO_OK;
    if (cJSON_IsString(model)) {
        cJSON *n =
            cJSON_GetObjectItemCaseSensitive(c->models, model->valuestring);
        if (n)
            cJSON_SetNumberValue(n, n->valuedouble + 1);
        else if (!fo_json_add_int(c->models, model->valuestring, 1))
            rc = FO_E_NOMEM;
    }
    cJSON_Delete(b);
    return rc;
}

int orch_run_counts(struct ledger *l, cJSON **out, struct fo_err *err)
{
    struct counts c = {.models = cJSON_CreateObject()};
    if (!c.models)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_range_bodies(l, 0, -1, count_entry, &c, err);
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
