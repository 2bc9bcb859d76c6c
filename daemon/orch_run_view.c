/* orch_run_view: a run as its entries fold through the engine's own
 * reducer (orch_run_state.c): what `forum run show`, the run room and the
 * dashboard's run view print of its plan, tasks and gates, so no view can
 * disagree with the engine (a task edited at a gate shows its edited
 * instruction, as the engine ran it). */
#include "daemon/orch_engine_int.h"

#include <stdlib.h>
#include <string.h>

struct fold {
    struct run *r;
    struct ledger *l;
    int rc;
    struct fo_err err;
};

static int fold_entry(void *ctx, const struct ledger_entry *en)
{
    struct fold *f = ctx;
    struct run *r = f->r;
    if (f->rc || en->seq == r->id)
        return 0;
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    struct fo_err err;
    int rc = ledger_body(f->l, en->seq, &body, &len, &err);
    if (rc == FO_E_REDACTED) /* a redacted step: the fold goes on without */
        return 0;
    if (!rc)
        rc = fo_json_parse(body, len, &b, &err);
    free(body);
    r->cur_ts = en->ts;
    if (!rc)
        rc = oe_apply(r, en->actor, en->kind, en->seq, en->parent, b, &err);
    cJSON_Delete(b);
    if (rc) {
        f->rc = rc;
        f->err = err;
        fo_err_prefix(&f->err, "entry %lld (%s)", (long long)en->seq, en->kind);
    }
    return 0;
}

int orch_run_fold(const struct orch *o, struct ledger *l, int64_t run,
                  cJSON **out, struct fo_err *err)
{
    struct ledger_entry req;
    int rc = ledger_get(l, run, &req, NULL, err);
    if (rc)
        return rc;
    if (strcmp(req.kind, "request") != 0 || req.parent != LEDGER_NO_PARENT)
        return fo_err_set(err, FO_E_NOT_A_RUN, "entry %lld: not a run",
                          (long long)run);
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    rc = ledger_body(l, run, &body, &len, err);
    if (!rc)
        rc = fo_json_parse(body, len, &b, err);
    free(body);
    if (rc)
        return rc;
    const char *via = oe_str_of(b, "via");
    struct orch_engine *shell = calloc(1, sizeof(*shell));
    struct run *r = shell ? oe_run_new(shell, via ? via : "submit") : NULL;
    if (!r) {
        free(shell);
        cJSON_Delete(b);
        return oe_nomem(err);
    }
    shell->o = o;
    shell->cfg.ledger = l;
    r->id = run;
    r->t0_us = req.ts;
    cJSON *gates = cJSON_DetachItemFromObjectCaseSensitive(b, "gates");
    if (cJSON_IsObject(gates))
        r->gates = gates;
    else
        cJSON_Delete(gates);
    const char *text = oe_str_of(b, "request");
    r->request = text ? orch_strdup(text) : NULL;
    if (via && !strcmp(via, "plan_run"))
        r->phase = PH_PLAN;
    if (oe_str_of(b, "session")) { /* its turn entry moves it on */
        r->after_context = r->phase;
        r->phase = PH_CONTEXT;
    }
    cJSON_Delete(b);
    struct fold f = {.r = r, .l = l};
    rc = ledger_descendants(l, run, ORCH_RUN_SCAN_MAX, fold_entry, &f, err);
    if (!rc && f.rc) {
        rc = f.rc;
        *err = f.err;
    }
    cJSON *view = rc ? NULL : oe_run_view(r);
    if (!rc && !view)
        rc = oe_nomem(err);
    oe_run_unlink(r);
    oe_run_free(r);
    free(shell);
    if (!rc)
        *out = view;
    return rc;
}
