/* methods_grade: grading and the gradable export (daemon/orch_grade.h),
 * and proof lanes and vocabulary gaps (daemon/orch_lanes.h) on the
 * handler table (docs/COMPATIBILITY.md). */
#include "surfaces/surf.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch_grade.h"
#include "daemon/orch_lanes.h"
#include "surfaces/surf_int.h"

int surf_h_grade(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    return orch_grade(ctx->ledger, surf_in_int(in, "run", -1),
                      (int)surf_in_int(in, "min_checks", ORCH_GRADE_MIN_CHECKS),
                      out, err);
}

int surf_h_export_gradable(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err)
{
    return orch_gradable(
        ctx->ledger, surf_in_int(in, "run", -1),
        (int)surf_in_int(in, "min_checks", ORCH_GRADE_MIN_CHECKS), out, err);
}

int surf_h_lanes(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    (void)ctx;
    (void)in;
    *out = orch_lanes_json();
    return *out ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
}

int surf_h_lane_route(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err)
{
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(in, "scopes"), *s;
    const cJSON *conf = cJSON_GetObjectItemCaseSensitive(in, "confidence");
    const char *v[ORCH_LANE_SCOPES_MAX];
    size_t n = 0;
    cJSON_ArrayForEach (s, sc) {
        if (n == ORCH_LANE_SCOPES_MAX)
            return fo_err_set(err, FO_E_INVALID, "scopes: at most %d",
                              ORCH_LANE_SCOPES_MAX);
        if (!cJSON_IsString(s))
            return fo_err_set(err, FO_E_INVALID, "scopes[%zu]: a string", n);
        v[n++] = s->valuestring;
    }
    struct orch_lane_claim c = {
        .task = surf_in_str(in, "task"),
        .lane = surf_in_str(in, "lane"),
        .domain = surf_in_str(in, "domain"),
        .scopes = v,
        .n_scopes = n,
        .has_confidence = cJSON_IsNumber(conf),
        .confidence = cJSON_IsNumber(conf) ? conf->valuedouble : 0,
    };
    return orch_lane_witness(ctx->ledger, ctx->append, ctx->append_hook, &c,
                             surf_in_int(in, "parent", LEDGER_NO_PARENT), out,
                             err);
}

int surf_h_vocab_gap(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err)
{
    return orch_vocab_gap_witness(
        ctx->ledger, ctx->append, ctx->append_hook, surf_in_int(in, "since", 0),
        surf_in_str(in, "domain_signal"),
        (int)surf_in_int(in, "min_escalations", ORCH_GAP_MIN_DEFAULT), out,
        err);
}
