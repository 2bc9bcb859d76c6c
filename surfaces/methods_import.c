/* methods_import: the handlers of ledger_import and run_export_otel (rows
 * in methods.c, data in surfaces/methods/); the work is in daemon/import.c and
 * daemon/export_otel.c. */
#include "surfaces/surf_int.h"

#include <string.h>

#include "daemon/import.h"

int surf_h_import(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
    struct import_source src = {
        .format = surf_in_str(in, "format"),
        .data = cJSON_IsString(data) ? data->valuestring : "",
        .len = cJSON_IsString(data) ? strlen(data->valuestring) : 0,
        .name = surf_in_str(in, "name"),
    };
    return import_run(ctx->ledger, ctx->append_batch, ctx->append_hook, &src,
                      out, err);
}

int surf_h_export_otel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                       struct fo_err *err)
{
    return export_otel_run(ctx->ledger, surf_in_int(in, "run", 0), out, err);
}

int surf_h_gw_session_otel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err)
{
    return export_otel_session(ctx->ledger, surf_in_str(in, "session"), out,
                               err);
}
