/* methods_campaign: campaigns (daemon/orch_campaign.h) on the handler
 * table: declare, status, next, dispatch, ingest_status, and list (here: the
 * campaign_declared entries, read on a worker). */
#include "surfaces/surf.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch_campaign.h"
#include "ledger/fo_json.h"
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

/* ---- campaign_list --------------------------------------------------------
 * One pass over the entries without their bodies for the seqs of the
 * campaign_declared entries (rare), then each one's body. The first
 * declaration of an id is the campaign (as campaign_status reads it); a
 * redacted one, or one whose id is not an id, is left out. */

struct decl_seqs {
    int64_t *seq;
    size_t n, cap;
};

static int on_decl(void *ctx, const struct ledger_entry *e)
{
    struct decl_seqs *d = ctx;
    if (strcmp(e->kind, "campaign_declared"))
        return 0;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        int64_t *p = realloc(d->seq, cap * sizeof(*p));
        if (!p)
            return FO_E_NOMEM;
        d->seq = p;
        d->cap = cap;
    }
    d->seq[d->n++] = e->seq;
    return 0;
}

/* *row: {campaign_id, title, declared_seq, declared_ts, projects,
 * features} of the declaration at seq, or NULL when it is not one to list
 * (its body redacted, not an object with an id). FO_OK, or the store's
 * error. */
static int decl_row(struct ledger *l, int64_t seq, cJSON **row,
                    struct fo_err *err)
{
    struct ledger_entry e;
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    struct fo_err perr;
    *row = NULL;
    int rc = ledger_get(l, seq, &e, NULL, err);
    if (!rc)
        rc = ledger_body(l, seq, &body, &len, err);
    if (rc == FO_E_REDACTED)
        return FO_OK;
    if (rc)
        return rc;
    rc = fo_json_parse(body, len, &b, &perr);
    free(body);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "campaign_id");
    if (rc || !cJSON_IsString(id) || !orch_campaign_id_ok(id->valuestring)) {
        cJSON_Delete(b);
        return FO_OK;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "title"), *p;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(b, "projects");
    long long nf = 0;
    cJSON_ArrayForEach (p, ps)
        nf +=
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "features"));
    cJSON *o = cJSON_CreateObject();
    rc = FO_OK;
    if (!o || !cJSON_AddStringToObject(o, "campaign_id", id->valuestring) ||
        !cJSON_AddStringToObject(o, "title",
                                 cJSON_IsString(t) ? t->valuestring : "") ||
        !fo_json_add_int(o, "declared_seq", seq) ||
        !fo_json_add_int(o, "declared_ts", e.ts) ||
        !fo_json_add_int(o, "projects", cJSON_GetArraySize(ps)) ||
        !fo_json_add_int(o, "features", nf)) {
        cJSON_Delete(o);
        o = NULL;
        rc = fo_err_set(err, FO_E_NOMEM, "out of memory");
    }
    cJSON_Delete(b);
    *row = o;
    return rc;
}

/* rows: the first declaration of each id, oldest first. */
static int decl_rows(struct ledger *l, cJSON *rows, struct fo_err *err)
{
    struct decl_seqs d = {0};
    int rc = ledger_range(l, 0, -1, on_decl, &d, err);
    if (rc == FO_E_NOMEM)
        fo_err_set(err, FO_E_NOMEM, "out of memory");
    cJSON *seen = cJSON_CreateObject();
    if (!rc && !seen)
        rc = fo_err_set(err, FO_E_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < d.n; i++) {
        cJSON *row = NULL;
        if ((rc = decl_row(l, d.seq[i], &row, err)) || !row)
            continue;
        const char *id =
            cJSON_GetObjectItemCaseSensitive(row, "campaign_id")->valuestring;
        if (cJSON_GetObjectItemCaseSensitive(seen, id)) {
            cJSON_Delete(row);
            continue;
        }
        if (!cJSON_AddItemToObject(seen, id, cJSON_CreateTrue()) ||
            !cJSON_AddItemToArray(rows, row)) {
            cJSON_Delete(row);
            rc = fo_err_set(err, FO_E_NOMEM, "out of memory");
        }
    }
    free(d.seq);
    cJSON_Delete(seen);
    return rc;
}

int surf_h_campaign_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                         struct fo_err *err)
{
    long long limit = surf_in_int(in, "limit", 100);
    cJSON *rows = cJSON_CreateArray();
    if (!rows)
        return fo_err_set(err, FO_E_NOMEM, "out of memory");
    int rc = decl_rows(ctx->ledger, rows, err);
    if (rc) {
        cJSON_Delete(rows);
        return rc;
    }
    int n = cJSON_GetArraySize(rows);
    cJSON *o = cJSON_CreateObject(), *list = cJSON_CreateArray();
    if (!o || !list || !cJSON_AddItemToObject(o, "campaigns", list)) {
        cJSON_Delete(list);
        o = NULL;
    }
    /* the latest declared first */
    for (int i = n - 1; o && i >= 0 && n - 1 - i < limit; i--)
        cJSON_AddItemToArray(list, cJSON_DetachItemFromArray(rows, i));
    cJSON_Delete(rows);
    if (!o || !fo_json_add_int(o, "count", n)) {
        cJSON_Delete(o);
        return fo_err_set(err, FO_E_NOMEM, "out of memory");
    }
    *out = o;
    return FO_OK;
}
