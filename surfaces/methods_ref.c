/* methods_ref: the Python reference's surface on forum's table. The
 * handlers of the operator views and the prose helpers (ledger_capsule,
 * run_room, runtime_inspect, operator_status, doctor, humanize,
 * prose_contract) and the reference's fields on context_preflight. The
 * reference's tool names that answer as one of forum's methods are the
 * "aliases" of each method's file (surfaces/methods/). The mapping and what
 * differs: docs/COMPATIBILITY.md. */
#include "surfaces/surf.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "daemon/orch_views.h"
#include "ledger/fo_json.h"
#include "surfaces/surf_int.h"

/* ---- handlers ----------------------------------------------------------- */

static int get_orch(struct surf_ctx *ctx, struct orch **own,
                    const struct orch **out, struct fo_err *err)
{
    *own = NULL;
    if (ctx->orch) {
        *out = ctx->orch;
        return FO_OK;
    }
    int rc = orch_create(NULL, own, err);
    if (rc == FO_OK)
        *out = *own;
    return rc;
}

int surf_h_capsule(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err)
{
    return orch_capsule(
        ctx->ledger, (int)surf_in_int(in, "max_items", ORCH_VIEW_ITEMS_DEFAULT),
        (int)surf_in_int(in, "max_text_chars", ORCH_VIEW_TEXT_DEFAULT), out,
        err);
}

int surf_h_room(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                struct fo_err *err)
{
    return orch_room(
        ctx->ledger, surf_in_int(in, "run", -1),
        (int)surf_in_int(in, "max_text_chars", ORCH_VIEW_TEXT_DEFAULT), out,
        err);
}

int surf_h_runtime(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err)
{
    (void)in;
    struct orch *own = NULL;
    const struct orch *o = NULL;
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc)
        rc = orch_runtime_inspect(o, out, err);
    orch_free(own);
    return rc;
}

int surf_h_operator_status(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err)
{
    (void)in;
    return orch_operator_status(ctx->ledger, out, err);
}

int surf_h_doctor(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err)
{
    struct orch *own = NULL;
    const struct orch *o = NULL;
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc)
        rc =
            orch_doctor(o, ctx->ledger,
                        (int)surf_in_int(in, "timeout_s", 15) * 1000, out, err);
    orch_free(own);
    return rc;
}

int surf_h_humanize(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    (void)ctx;
    return orch_humanize(surf_in_str(in, "text"), surf_in_str(in, "audience"),
                         surf_in_str(in, "profile"), out, err);
}

int surf_h_prose_contract(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                          struct fo_err *err)
{
    const char *text = surf_in_str(in, "text");
    const char *profile = surf_in_str(in, "profile");
    if (profile && !orch_profile_known(profile))
        return fo_err_set(err, FO_E_INVALID,
                          "profile: unknown delivery profile %.64s (known: %s)",
                          profile, orch_profiles_list);
    struct orch *own = NULL;
    const struct orch *o = NULL;
    struct orch_route rt = {0};
    cJSON *frame = NULL;
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc)
        rc = orch_route(orch_roster(o), text, strlen(text), &rt, err);
    if (!rc && !(frame = orch_route_frame(orch_roster(o), text, &rt)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc)
        rc = orch_prose_contract(frame, profile, out, err);
    cJSON_Delete(frame);
    orch_route_release(&rt);
    orch_free(own);
    return rc;
}

/* The reference's budget fields as forum's context limits: the run-wide
 * budget is max_total_tokens, the request's max_request_tokens, a task's
 * prompt max_task_tokens and each upstream output in it
 * max_upstream_tokens (docs/COMPATIBILITY.md). */
int surf_ref_context(const cJSON *in, cJSON **ctxo)
{
    static const char *const map[][2] = {
        {"context_token_budget", "max_total_tokens"},
        {"request_context_token_budget", "max_request_tokens"},
        {"task_context_token_budget", "max_task_tokens"},
        {"upstream_token_budget", "max_upstream_tokens"},
    };
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(in, "context");
    *ctxo = given ? cJSON_Duplicate(given, 1) : NULL;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, map[i][0]);
        if (!v)
            continue;
        if (!*ctxo && !(*ctxo = cJSON_CreateObject()))
            return FO_E_NOMEM;
        if (cJSON_GetObjectItemCaseSensitive(*ctxo, map[i][1]))
            continue; /* forum's own field wins */
        if (!fo_json_add_int(*ctxo, map[i][1], (long long)v->valuedouble))
            return FO_E_NOMEM;
    }
    return FO_OK;
}

int surf_h_context_preflight_ref(struct surf_ctx *ctx, const cJSON *in,
                                 cJSON **out, struct fo_err *err)
{
    cJSON *c = NULL;
    cJSON *fwd = cJSON_CreateObject();
    int rc = fwd ? surf_ref_context(in, &c) : FO_E_NOMEM;
    const char *session = surf_in_str(in, "session");
    if (!rc &&
        (!cJSON_AddStringToObject(fwd, "request", surf_in_str(in, "request")) ||
         (session && !cJSON_AddStringToObject(fwd, "session", session)) ||
         (c && !cJSON_AddItemToObject(fwd, "context", c))))
        rc = FO_E_NOMEM;
    else if (!rc)
        c = NULL;
    if (rc) {
        cJSON_Delete(c);
        cJSON_Delete(fwd);
        return fo_err_set(err, rc, NULL);
    }
    rc = surf_h_context_preflight(ctx, fwd, out, err);
    cJSON_Delete(fwd);
    if (rc || !surf_in_bool(in, "use_capsule_context", 0))
        return rc;
    /* the capsule a later run could take as its context, as the reference
     * counts it: its text, at 4 bytes a token */
    cJSON *cap = NULL;
    rc = orch_capsule(
        ctx->ledger, (int)surf_in_int(in, "max_items", ORCH_VIEW_ITEMS_DEFAULT),
        (int)surf_in_int(in, "max_text_chars", ORCH_VIEW_TEXT_DEFAULT), &cap,
        err);
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    if (!rc && orch_capsule_text(cap, &t) != FO_OK)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON *cs = rc ? NULL : cJSON_AddObjectToObject(*out, "capsule");
    if (!rc &&
        (!cs || !cJSON_AddStringToObject(cs, "context_source", "capsule") ||
         !fo_json_add_int(cs, "chars", (long long)t.len) ||
         !fo_json_add_int(cs, "tokens", (long long)(t.len + 3) / 4)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    fo_buf_release(&t);
    cJSON_Delete(cap);
    if (rc) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}
