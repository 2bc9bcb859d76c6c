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

int oe_apply_stored(struct run *r, struct ledger *l,
                    const struct ledger_entry *en, struct fo_err *err)
{
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    int rc = ledger_body(l, en->seq, &body, &len, err);
    if (!rc)
        rc = fo_json_parse(body, len, &b, err);
    free(body);
    r->cur_ts = en->ts;
    oe_note_payload(r, en->kind, en->payload);
    if (!rc)
        rc = oe_apply(r, en->actor, en->kind, en->seq, en->parent, b, err);
    cJSON_Delete(b);
    if (rc && rc != FO_E_REDACTED)
        fo_err_prefix(err, "entry %lld (%s)", (long long)en->seq, en->kind);
    return rc;
}

static int fold_entry(void *ctx, const struct ledger_entry *en)
{
    struct fold *f = ctx;
    if (f->rc || en->seq == f->r->id)
        return 0;
    int rc = oe_apply_stored(f->r, f->l, en, &f->err);
    if (rc && rc != FO_E_REDACTED) /* a redacted step: the fold goes on */
        f->rc = rc;
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
    oe_request_opts(r, b);
    oe_note_payload(r, "request", req.payload);
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

/* ---- a step in words ----------------------------------------------------- */

static const char *bstr(const cJSON *b, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

void orch_run_event_text(const struct orch_run_event *ev, char *out,
                         size_t size)
{
    const char *k = ev->kind;
    const cJSON *b = ev->body;
    const char *id = bstr(b, "id");
    if (!strcmp(k, "request"))
        snprintf(out, size, "request received");
    else if (!strcmp(k, "route"))
        snprintf(out, size, "route: %s", bstr(b, "lane"));
    else if (!strcmp(k, "plan")) {
        int n =
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(b, "tasks"));
        int w =
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(b, "waves"));
        snprintf(out, size, "plan: %d task%s in %d wave%s", n,
                 n == 1 ? "" : "s", w, w == 1 ? "" : "s");
    } else if (!strcmp(k, "task"))
        snprintf(out, size, "task %s (%s) started", id, ev->actor);
    else if (!strcmp(k, "tool_call"))
        snprintf(out, size, "task %s calls %s", id, bstr(b, "tool"));
    else if (!strcmp(k, "tool_result"))
        snprintf(out, size, "task %s: %s %s", id, bstr(b, "tool"),
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok"))
                     ? "answered"
                     : "failed");
    else if (!strcmp(k, "result"))
        snprintf(out, size, "task %s finished (%s)", id,
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok"))
                     ? "ok"
                     : "failed");
    else if (!strcmp(k, "verdict"))
        snprintf(out, size, "verdict on %s: %s", id,
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "pass"))
                     ? "passed"
                 : !strcmp(bstr(b, "by"), "unjudged") ? "unjudged"
                                                      : "not passed");
    else if (!strcmp(k, "tier_escalation"))
        snprintf(out, size, "task %s escalated to %s", id, bstr(b, "to"));
    else if (!strcmp(k, "retry"))
        snprintf(out, size, "task %s retried on its tier", id);
    else if (!strcmp(k, "verification") || !strcmp(k, "revision"))
        snprintf(out, size, "%s of %s: %s", k, id,
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok"))
                     ? "ok"
                     : "failed");
    else if (!strcmp(k, "intent_judgment"))
        snprintf(out, size, "intent judge: %s",
                 *bstr(b, "covers") ? bstr(b, "covers") : "skipped");
    else if (!strcmp(k, "delivery_profile_check"))
        snprintf(out, size, "delivery profile %s: %s", bstr(b, "profile"),
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "flagged"))
                     ? "flagged"
                     : "clean");
    else if (!strcmp(k, "wave_checkpoint"))
        snprintf(out, size, "checkpoint after a wave");
    else if (!strcmp(k, "gate_requested")) {
        long long w = 0;
        fo_json_get_int(b, "wave", 0, INT64_MAX, &w);
        snprintf(out, size, "waiting at the gate of wave %lld", w);
    } else if (!strncmp(k, "gate_", 5))
        snprintf(out, size, "gate %s", k + 5);
    else if (!strcmp(k, "budget"))
        snprintf(out, size, "stopped: %s", bstr(b, "reason"));
    else if (!strcmp(k, "answer"))
        snprintf(out, size, "answer");
    else if (!strcmp(k, "error"))
        snprintf(out, size, "failed: %s", bstr(b, "error"));
    else
        snprintf(out, size, "%s (%s)", k, ev->actor);
}
