/* methods_orch: the orchestrator's handlers: route, plan, plan_run, submit,
 * run_start, run_get and run_cancel. They use ctx->orch when the host built
 * one, else a default orchestrator (default roster, stub executor) made for
 * the call. */
#include "surfaces/surf.h"

#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "surfaces/surf_int.h"

/* ctx->orch, or a default one in *own (the caller frees it). */
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

int surf_h_route(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    const char *text = surf_in_str(in, "text");
    struct orch *own = NULL;
    const struct orch *o = NULL;
    struct orch_route rt = {0};
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc)
        rc = orch_route(orch_roster(o), text, strlen(text), &rt, err);
    if (!rc) {
        *out = orch_route_json(&rt);
        if (!*out)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    orch_route_release(&rt);
    orch_free(own);
    return rc;
}

int surf_h_plan_run(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(in, "plan");
    struct orch *own = NULL;
    const struct orch *o = NULL;
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc) {
        struct orch_witness w = {
            .ledger = ctx->ledger,
            .append = ctx->append,
            .hook = ctx->append_hook,
        };
        rc = orch_run_plan(o, &w, plan, surf_in_str(in, "request"), out, err);
    }
    orch_free(own);
    return rc;
}

static struct orch_witness ctx_witness(const struct surf_ctx *ctx)
{
    return (struct orch_witness){
        .ledger = ctx->ledger,
        .append = ctx->append,
        .hook = ctx->append_hook,
    };
}

int surf_h_plan(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                struct fo_err *err)
{
    struct orch *own = NULL;
    const struct orch *o = NULL;
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc) {
        struct orch_witness w = ctx_witness(ctx);
        rc = orch_plan_request(o, &w, surf_in_str(in, "request"), out, err);
    }
    orch_free(own);
    return rc;
}

int surf_h_submit(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err)
{
    struct orch *own = NULL;
    const struct orch *o = NULL;
    struct orch_submit_opts opts = {
        .max_model_calls = (int)surf_in_int(in, "max_model_calls", 0),
        .max_seconds = (int)surf_in_int(in, "max_seconds", 0),
    };
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc) {
        struct orch_witness w = ctx_witness(ctx);
        rc = orch_submit(o, &w, surf_in_str(in, "request"), &opts, out, err);
    }
    orch_free(own);
    return rc;
}

int surf_h_run_start(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err)
{
    struct orch *own = NULL;
    struct orch *o = ctx->orch;
    struct orch_submit_opts opts = {
        .max_model_calls = (int)surf_in_int(in, "max_model_calls", 0),
        .max_seconds = (int)surf_in_int(in, "max_seconds", 0),
    };
    int64_t run = -1;
    int rc = o ? FO_OK : orch_create(NULL, &own, err);
    if (!o)
        o = own;
    if (!rc) {
        struct orch_witness w = ctx_witness(ctx);
        rc =
            orch_run_start(o, &w, surf_in_str(in, "request"), &opts, &run, err);
    }
    /* an orchestrator made for this call waits for its run as it goes */
    orch_free(own);
    if (rc)
        return rc;
    *out = cJSON_CreateObject();
    if (!*out || !fo_json_add_int(*out, "run", run) ||
        !cJSON_AddStringToObject(*out, "state", "running")) {
        cJSON_Delete(*out);
        *out = NULL;
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

int surf_h_run_get(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err)
{
    return orch_run_get(ctx->ledger, surf_in_int(in, "run", 0), out, err);
}

int surf_h_run_cancel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err)
{
    /* without an orchestrator of the host no run is in progress here */
    return orch_run_cancel(ctx->orch, ctx->ledger, surf_in_int(in, "run", 0),
                           out, err);
}
