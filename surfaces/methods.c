/* methods: the handler table (name -> handler) and the ledger's handlers. A
 * method added here with its surfaces/methods/<name>.json appears on HTTP,
 * MCP, GET /methods and the generated docs at once. */
#include "surfaces/surf.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/fo_json.h"
#include "ledger/proof.h"
#include "daemon/orch.h"
#include "surfaces/surf_int.h"
#include "surfaces/table.h"

#define RANGE_MAX 1000

long long surf_in_int(const cJSON *in, const char *name, long long def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, name);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

const char *surf_in_str(const cJSON *in, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int surf_in_bool(const cJSON *in, const char *name, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, name);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

/* ---- health, status, methods ----------------------------------------- */

static int h_health(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    (void)in;
    /* Not healthy once the ledger's files went from under the process:
     * its writes are refused until it is restarted. */
    int rc = ctx->health ? ctx->health(ctx->health_hook, err)
                         : ledger_storage_check(ctx->ledger, err);
    if (rc)
        return rc;
    *out = cJSON_CreateObject();
    if (!*out || !cJSON_AddTrueToObject(*out, "ok"))
        return nomem(err);
    return FO_OK;
}

static int h_status(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    (void)in;
    int64_t count = 0, signed_size = 0;
    uint8_t root[32];
    char hex[65];
    int rc = ledger_tree_head(ctx->ledger, &count, root, err);
    if (rc)
        return rc;
    struct ledger_checkpoint cp = {0};
    rc = ledger_checkpoint_latest(ctx->ledger, &cp, err);
    if (rc == FO_OK)
        signed_size = cp.size;
    else if (rc != FO_E_NOT_FOUND)
        return rc;
    ledger_checkpoint_release(&cp);
    fo_hex(root, 32, hex);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return nomem(err);
    /* "checkpoint" is the live tree's root, as the reference served it. */
    int ok = fo_json_add_int(o, "entries", count) &&
             cJSON_AddStringToObject(o, "checkpoint", hex) &&
             fo_json_add_int(o, "size", count) &&
             fo_json_add_int(o, "signed_size", signed_size) &&
             cJSON_AddStringToObject(o, "origin", ledger_origin(ctx->ledger)) &&
             fo_json_add_int(o, "uptime_s",
                             ctx->start_us
                                 ? (ledger_now_us() - ctx->start_us) / 1000000
                                 : 0);
    struct surf_verify_progress *p = ctx->verify;
    if (ok && p && atomic_load(&p->running) > 0) {
        cJSON *v = cJSON_AddObjectToObject(o, "verify");
        ok = v && cJSON_AddBoolToObject(v, "deep", atomic_load(&p->deep)) &&
             fo_json_add_int(v, "done", atomic_load(&p->done)) &&
             fo_json_add_int(v, "total", atomic_load(&p->total));
    }
    if (ok && ctx->status_extra)
        ctx->status_extra(ctx->status_hook, o);
    if (!ok) {
        cJSON_Delete(o);
        return nomem(err);
    }
    *out = o;
    return FO_OK;
}

static int h_methods(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err)
{
    (void)ctx;
    (void)in;
    *out = surf_methods_json(1);
    return *out ? FO_OK : nomem(err);
}

/* ---- ledger reads ----------------------------------------------------- */

static void verify_progress(void *arg, int64_t done, int64_t total)
{
    struct surf_verify_progress *p = arg;
    atomic_store(&p->done, done);
    atomic_store(&p->total, total);
    atomic_fetch_add(&p->reports, 1);
}

static int h_verify(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    struct ledger_verify_result res;
    int deep = surf_in_bool(in, "deep", 0);
    struct surf_verify_progress *p = ctx->verify;
    if (p) {
        atomic_store(&p->deep, deep);
        atomic_store(&p->done, 0);
        atomic_store(&p->total, 0);
        atomic_fetch_add(&p->running, 1);
    }
    int rc = ledger_verify(ctx->ledger, deep ? LEDGER_VERIFY_DEEP : 0,
                           p ? verify_progress : NULL, p, &res, err);
    if (p)
        atomic_fetch_sub(&p->running, 1);
    if (rc)
        return rc;
    *out = ledger_verify_json(&res);
    return *out ? FO_OK : nomem(err);
}

static int h_get(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    struct ledger_entry e;
    int present = 0;
    int rc =
        ledger_get(ctx->ledger, surf_in_int(in, "seq", 0), &e, &present, err);
    if (rc)
        return rc;
    cJSON *o = ledger_entry_json(&e);
    if (!o ||
        !cJSON_AddStringToObject(o, "body", present ? "present" : "redacted")) {
        cJSON_Delete(o);
        return nomem(err);
    }
    *out = o;
    return FO_OK;
}

static int h_body(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err)
{
    int64_t seq = surf_in_int(in, "seq", 0);
    struct ledger_entry e;
    int rc = ledger_get(ctx->ledger, seq, &e, NULL, err);
    if (rc)
        return rc;
    char *body = NULL;
    size_t len = 0;
    rc = ledger_body(ctx->ledger, seq, &body, &len, err);
    if (rc)
        return rc;
    cJSON *v = NULL;
    rc = fo_json_parse(body, len, &v, err);
    free(body);
    if (rc)
        return fo_err_set(err, FO_E_CORRUPT,
                          "entry %lld: stored body is not valid JSON",
                          (long long)seq);
    char hex[65];
    fo_hex(e.payload, 32, hex);
    cJSON *o = cJSON_CreateObject();
    if (!o || !fo_json_add_int(o, "seq", seq) ||
        !cJSON_AddStringToObject(o, "payload", hex)) {
        cJSON_Delete(o);
        cJSON_Delete(v);
        return nomem(err);
    }
    cJSON_AddItemToObject(o, "body", v);
    *out = o;
    return FO_OK;
}

static int add_entry(void *ctx, const struct ledger_entry *e)
{
    cJSON *o = ledger_entry_json(e);
    if (!o)
        return FO_E_NOMEM;
    cJSON_AddItemToArray(ctx, o);
    return FO_OK;
}

static int entries_result(struct surf_ctx *ctx, int64_t from, int64_t limit,
                          cJSON **out, struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "entries") : NULL;
    if (!arr) {
        cJSON_Delete(o);
        return nomem(err);
    }
    int rc = limit > 0
                 ? ledger_range(ctx->ledger, from, limit, add_entry, arr, err)
                 : FO_OK;
    if (rc) {
        cJSON_Delete(o);
        return rc == FO_E_NOMEM ? nomem(err) : rc;
    }
    *out = o;
    return FO_OK;
}

static int h_range(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err)
{
    return entries_result(ctx, surf_in_int(in, "from", 0),
                          surf_in_int(in, "limit", 100), out, err);
}

static int h_replay(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    int64_t seq = surf_in_int(in, "seq", 0);
    int64_t from = surf_in_int(in, "from", 0);
    int64_t limit = surf_in_int(in, "limit", RANGE_MAX);
    int64_t count = 0;
    int rc = ledger_count(ctx->ledger, &count, err);
    if (rc)
        return rc;
    if (seq >= count)
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "entry %lld: not found (the ledger has %lld)",
                          (long long)seq, (long long)count);
    if (from + limit > seq + 1)
        limit = seq + 1 - from;
    return entries_result(ctx, from, limit, out, err);
}

static int h_chain(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err)
{
    struct ledger_entry *v = NULL;
    size_t n = 0;
    int rc = ledger_chain(ctx->ledger, surf_in_int(in, "seq", 0), &v, &n, err);
    if (rc)
        return rc;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "entries") : NULL;
    for (size_t i = 0; arr && i < n; i++) {
        if (add_entry(arr, &v[i]) != FO_OK)
            arr = NULL;
    }
    free(v);
    if (!arr) {
        cJSON_Delete(o);
        return nomem(err);
    }
    *out = o;
    return FO_OK;
}

static int h_summary(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err)
{
    (void)in;
    return orch_summary(ctx->ledger, out, err);
}

/* ---- ledger writes ---------------------------------------------------- */

int surf_append_prepare(struct surf_ctx *ctx, const cJSON *in,
                        struct ledger_append *req, struct fo_buf *body,
                        struct fo_err *err)
{
    const cJSON *payload = cJSON_GetObjectItemCaseSensitive(in, "payload");
    const cJSON *parent = cJSON_GetObjectItemCaseSensitive(in, "parent");
    size_t max = ledger_max_body(ctx->ledger);
    fo_buf_init(body, max);
    int rc = fo_buf_reserve(body, 512) ? fo_err_set(err, FO_E_NOMEM, NULL)
                                       : fo_json_canon(payload, body, err);
    if (rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_TOO_LARGE,
                        "payload: over %zu bytes in canonical form", max);
    if (rc) {
        fo_buf_release(body);
        return rc;
    }
    *req = (struct ledger_append){
        .actor = surf_in_str(in, "actor"),
        .kind = surf_in_str(in, "kind"),
        .parent = cJSON_IsNumber(parent) ? (int64_t)parent->valuedouble
                                         : LEDGER_NO_PARENT,
        .body = body->data ? body->data : "",
        .body_len = body->len,
        /* a gate decision appended by hand is still the only one */
        .sole_kinds = orch_gate_sole(surf_in_str(in, "kind")),
    };
    return FO_OK;
}

int surf_append_result(struct ledger_append *req, cJSON **out,
                       struct fo_err *err)
{
    if (req->rc) {
        if (err)
            *err = req->err;
        return req->rc;
    }
    *out = ledger_entry_json(&req->entry);
    return *out ? FO_OK : nomem(err);
}

int surf_batch_entry(struct ledger *l, const cJSON *entry, int64_t base,
                     struct ledger_append *req, struct fo_buf *body,
                     struct fo_err *err)
{
    static const char *const keys[] = {"actor", "kind", "payload", "parent"};
    if (!cJSON_IsObject(entry))
        return fo_err_set(err, FO_E_INVALID,
                          "must be an object {actor, kind, payload, "
                          "parent?}");
    int rc = fo_json_only_keys(entry, keys, 4, err);
    if (!rc)
        rc = surf_validate(surf_find("ledger_append"), entry, err);
    if (!rc)
        rc = ledger_check_actor(surf_in_str(entry, "actor"), err);
    if (!rc)
        rc = ledger_check_kind(surf_in_str(entry, "kind"), err);
    if (rc)
        return rc;
    const cJSON *parent = cJSON_GetObjectItemCaseSensitive(entry, "parent");
    if (cJSON_IsNumber(parent) && parent->valuedouble >= (double)base)
        return fo_err_set(err, FO_E_INVALID,
                          "parent %.0f: must be an entry already on record "
                          "(below %lld) when the batch begins",
                          parent->valuedouble, (long long)base);
    struct surf_ctx ctx = {.ledger = l};
    return surf_append_prepare(&ctx, entry, req, body, err);
}

/* POST /append/batch: every entry checked first (a bad one names its
 * index and nothing is written), then all in one transaction. */
static int h_append_batch(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                          struct fo_err *err)
{
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(in, "entries");
    int n = cJSON_GetArraySize(entries);
    if (n < 1 || n > SURF_APPEND_BATCH_MAX)
        return fo_err_set(err, FO_E_INVALID, "entries: 1..%d entries, not %d",
                          SURF_APPEND_BATCH_MAX, n);
    int64_t base = 0;
    int rc = ledger_count(ctx->ledger, &base, err);
    if (rc)
        return rc;
    struct ledger_append *reqs = calloc((size_t)n, sizeof(*reqs));
    struct fo_buf *bodies = calloc((size_t)n, sizeof(*bodies));
    int made = 0;
    if (!reqs || !bodies)
        rc = nomem(err);
    const cJSON *e = entries ? entries->child : NULL;
    for (int i = 0; !rc && i < n; i++, e = e->next) {
        rc = surf_batch_entry(ctx->ledger, e, base, &reqs[i], &bodies[i], err);
        if (rc)
            fo_err_prefix(err, "entries[%d]", i);
        else
            made++;
    }
    if (!rc)
        rc = ctx->append_batch
                 ? ctx->append_batch(ctx->append_hook, reqs, (size_t)n, err)
                 : ledger_append_batch(ctx->ledger, reqs, (size_t)n, err);
    for (int i = 0; !rc && i < n; i++)
        if (reqs[i].rc) { /* checked above: only a storage fault is left */
            rc = reqs[i].rc;
            *err = reqs[i].err;
            fo_err_prefix(err, "entries[%d]", i);
        }
    if (!rc) {
        cJSON *o = cJSON_CreateObject();
        cJSON *seqs = o ? cJSON_AddArrayToObject(o, "seqs") : NULL;
        int ok = seqs && fo_json_add_int(o, "count", n) &&
                 fo_json_add_int(o, "first_seq", reqs[0].entry.seq) &&
                 fo_json_add_int(o, "last_seq", reqs[n - 1].entry.seq);
        for (int i = 0; ok && i < n; i++)
            ok = cJSON_AddItemToArray(
                seqs, cJSON_CreateNumber((double)reqs[i].entry.seq));
        if (ok)
            *out = o;
        else {
            cJSON_Delete(o);
            rc = nomem(err);
        }
    }
    for (int i = 0; i < made; i++)
        fo_buf_release(&bodies[i]);
    free(bodies);
    free(reqs);
    return rc;
}

static int h_append(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    struct ledger_append req;
    struct fo_buf body;
    int rc = surf_append_prepare(ctx, in, &req, &body, err);
    if (rc)
        return rc;
    rc = ctx->append ? ctx->append(ctx->append_hook, &req, err)
                     : ledger_append_batch(ctx->ledger, &req, 1, err);
    if (rc == FO_OK)
        rc = surf_append_result(&req, out, err);
    fo_buf_release(&body);
    return rc;
}

static int h_redact(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    struct ledger_entry e;
    int rc = ledger_redact(ctx->ledger, surf_in_int(in, "seq", 0),
                           surf_in_str(in, "reason"), &e, err);
    if (rc)
        return rc;
    *out = ledger_entry_json(&e);
    if (*out && ledger_redact_wal_pending(ctx->ledger) &&
        !cJSON_AddFalseToObject(*out, "wal_truncated")) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return *out ? FO_OK : nomem(err);
}

/* ---- the table ----------------------------------------------------------
 * name -> handler, in the order of tools/list, GET /methods and the docs.
 * Everything else about a method (title, description, schemas, route,
 * where it runs, flags, input cap, MCP annotations, aliases) is data:
 * surfaces/methods/<name>.json, joined to its row by surfaces/table.c. */

static const struct surf_handler handlers[] = {
    {"health", h_health, NULL},
    {"status", h_status, NULL},
    {"methods", h_methods, NULL},
    {"ledger_verify", h_verify, NULL},
    {"ledger_get", h_get, NULL},
    {"ledger_body", h_body, NULL},
    {"ledger_range", h_range, NULL},
    {"ledger_replay", h_replay, NULL},
    {"ledger_chain", h_chain, NULL},
    {"ledger_summary", h_summary, NULL},
    {"ledger_append", h_append, NULL},
    {"ledger_append_batch", h_append_batch, NULL},
    {"ledger_import", surf_h_import, NULL},
    {"ledger_redact", h_redact, NULL},
    {"ledger_checkpoint", surf_h_checkpoint, NULL},
    {"ledger_cosign", surf_h_cosign, NULL},
    {"ledger_prove", surf_h_prove, NULL},
    {"ledger_consistency", surf_h_consistency, NULL},
    {"route", surf_h_route, NULL},
    {"plan_run", NULL, surf_s_plan_run},
    {"plan", NULL, surf_s_plan},
    {"submit", NULL, surf_s_submit},
    {"run_start", NULL, surf_s_run_start},
    {"run_get", surf_h_run_get, NULL},
    {"run_cancel", surf_h_run_cancel, NULL},
    {"run_list", surf_h_run_list, NULL},
    {"run_show", surf_h_run_show, NULL},
    {"run_export_otel", surf_h_export_otel, NULL},
    {"gateway_session", surf_h_gw_session, NULL},
    {"gateway_session_otel", surf_h_gw_session_otel, NULL},
    {"session_list", surf_h_session_list, NULL},
    {"session_show", surf_h_session_show, NULL},
    {"session_fork", surf_h_session_fork, NULL},
    {"session_remember", surf_h_session_remember, NULL},
    {"session_forget", surf_h_session_forget, NULL},
    {"context_preflight", surf_h_context_preflight_ref, NULL},
    {"ledger_capsule", surf_h_capsule, NULL},
    {"run_room", surf_h_room, NULL},
    {"runtime_inspect", surf_h_runtime, NULL},
    {"operator_status", surf_h_operator_status, NULL},
    {"doctor", surf_h_doctor, NULL},
    {"humanize", surf_h_humanize, NULL},
    {"prose_contract", surf_h_prose_contract, NULL},
    /* grading and proof lanes: methods_grade.c */
    {"grade", surf_h_grade, NULL},
    {"export_gradable", surf_h_export_gradable, NULL},
    {"lanes", surf_h_lanes, NULL},
    {"lane_route", surf_h_lane_route, NULL},
    {"vocabulary_gap", surf_h_vocab_gap, NULL},
    /* campaigns: methods_campaign.c */
    {"campaign_declare", surf_h_campaign_declare, NULL},
    {"campaign_list", surf_h_campaign_list, NULL},
    {"campaign_status", surf_h_campaign_status, NULL},
    {"campaign_next", surf_h_campaign_next, NULL},
    {"campaign_dispatch", surf_h_campaign_dispatch, NULL},
    {"campaign_ingest_status", surf_h_campaign_ingest, NULL},
    {"gate_list", surf_h_gate_list, NULL},
    {"gate_approve", NULL, surf_s_gate_approve},
    {"gate_edit", NULL, surf_s_gate_edit},
    {"gate_reject", NULL, surf_s_gate_reject},
};

const struct surf_handler *surf_handlers(size_t *n)
{
    *n = sizeof(handlers) / sizeof(handlers[0]);
    return handlers;
}
