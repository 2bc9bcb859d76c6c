/* methods_campaign: campaigns (daemon/orch_campaign.h) on the handler
 * table: declare, status, next, dispatch, ingest_status. */
#include "surfaces/surf.h"

#include "daemon/orch_campaign.h"
#include "surfaces/surf_int.h"

int surf_h_campaign_declare(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                            struct fo_err *err)
{
    return orch_campaign_declare(
        ctx->ledger, ctx->append, ctx->append_hook,
        cJSON_GetObjectItemCaseSensitive(in, "campaign"), out, err);
}

int surf_h_campaign_status(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err)
{
    return orch_campaign_status(ctx->ledger, surf_in_str(in, "campaign_id"),
                                out, err);
}

int surf_h_campaign_next(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                         struct fo_err *err)
{
    return orch_campaign_next(ctx->ledger, surf_in_str(in, "campaign_id"), out,
                              err);
}

int surf_h_campaign_dispatch(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                             struct fo_err *err)
{
    return orch_campaign_dispatch(ctx->ledger, ctx->append, ctx->append_hook,
                                  surf_in_str(in, "campaign_id"),
                                  surf_in_str(in, "feature_id"),
                                  surf_in_int(in, "run", 0), out, err);
}

int surf_h_campaign_ingest(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err)
{
    return orch_campaign_ingest(
        ctx->ledger, ctx->append, ctx->append_hook,
        surf_in_str(in, "campaign_id"), surf_in_str(in, "project_id"),
        surf_in_str(in, "feature_id"), surf_in_str(in, "status"),
        surf_in_str(in, "source"), surf_in_str(in, "reason"), out, err);
}
