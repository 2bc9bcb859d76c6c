/* methods: the handler table and the ledger's handlers. A method added here
 * appears on HTTP, MCP, GET /methods and the generated docs at once. */
#include "surfaces/surf.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/fo_json.h"
#include "ledger/proof.h"
#include "daemon/orch.h"
#include "surfaces/surf_int.h"

#define KIB 1024
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

/* ---- the table -------------------------------------------------------- */

#define NO_INPUT "{\"type\":\"object\",\"properties\":{}}"
#define SEQ_PROP "\"seq\":{\"type\":\"integer\",\"minimum\":0}"
#define SESSION_PROP                                                           \
    "\"session\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64}"
/* The reference's delivery profiles, context budgets and view limits
 * (docs/COMPATIBILITY.md). */
#define PROFILE_ENUM                                                           \
    "\"enum\":[\"operator\",\"engineer\",\"researcher\",\"executive\"]"
#define PROFILE_PROP "\"profile\":{\"type\":\"string\"," PROFILE_ENUM "}"
#define BUDGET_PROP(name)                                                      \
    "\"" name "\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10000000}"
#define REF_BUDGET_PROPS                                                       \
    BUDGET_PROP("context_token_budget")                                        \
    "," BUDGET_PROP("request_context_token_budget") "," BUDGET_PROP(           \
        "task_context_token_budget") "," BUDGET_PROP("upstream_token_budget")
#define REF_SUBMIT_PROPS                                                       \
    REF_BUDGET_PROPS ",\"checkpoint_each_wave\":{\"type\":\"boolean\"},"       \
                     "\"delivery_profile\":{\"type\":\"string\"," PROFILE_ENUM \
                     "}"
#define VIEW_PROPS                                                             \
    "\"max_items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000},"     \
    "\"max_text_chars\":{\"type\":\"integer\",\"minimum\":0,"                  \
    "\"maximum\":65536}"
/* grade and export_gradable */
#define RUN_OR_IMPORT_PROP "\"run\":{\"type\":\"integer\",\"minimum\":0}"
#define MIN_CHECKS_PROP                                                        \
    "\"min_checks\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000}"
/* A gate decision's input: extra properties, extra required names. */
#define GATE_SCHEMA(props, req)                                                \
    "{\"type\":\"object\",\"properties\":{"                                    \
    "\"run_seq\":{\"type\":\"integer\",\"minimum\":0},"                        \
    "\"wave\":{\"type\":\"integer\",\"minimum\":0},"                           \
    "\"approver\":{\"type\":\"string\",\"minLength\":1,"                       \
    "\"maxLength\":4096},"                                                     \
    "\"note\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096}" props  \
    "},\"required\":[\"run_seq\",\"wave\",\"approver\"" req "]}"

static const struct surf_method table[] = {
    {"health",
     "Liveness: {\"ok\": true}; storage_moved (HTTP 503) once the ledger's "
     "files were deleted, replaced or truncated under the process, whose "
     "writes are then refused until it is restarted.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/health", h_health, SURF_ON_LOOP,
     NULL},
    {"status",
     "Entry count, live tree root and size, signed size, uptime; the daemon "
     "adds runs_in_flight and its model providers (never a key).",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/status", h_status, SURF_ON_LOOP,
     NULL},
    {"methods",
     "The method table: names, summaries, input schemas, and the output "
     "schema of each result that declares one.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/methods", h_methods, SURF_ON_LOOP,
     NULL},
    {"ledger_verify",
     "Verify the chain and tree (deep: also every body); says where it "
     "breaks.",
     "{\"type\":\"object\",\"properties\":{\"deep\":{\"type\":\"boolean\"}}}",
     SURF_READ, 4 * KIB, "GET", "/verify", h_verify, SURF_ON_WORKER, NULL},
    {"ledger_get", "One entry by seq, with body present or redacted.",
     "{\"type\":\"object\",\"properties\":{" SEQ_PROP "},"
     "\"required\":[\"seq\"]}",
     SURF_READ, 4 * KIB, "GET", "/ledger/{seq}", h_get, SURF_ON_LOOP, NULL},
    {"ledger_body", "The JSON body (payload) of an entry.",
     "{\"type\":\"object\",\"properties\":{" SEQ_PROP "},"
     "\"required\":[\"seq\"]}",
     SURF_READ, 4 * KIB, "GET", "/ledger/{seq}/payload", h_body, SURF_ON_LOOP,
     NULL},
    {"ledger_range", "Entries from a seq, at most limit (<= 1000).",
     "{\"type\":\"object\",\"properties\":{"
     "\"from\":{\"type\":\"integer\",\"minimum\":0},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000}}}",
     SURF_READ, 4 * KIB, "GET", "/ledger", h_range, SURF_ON_LOOP, NULL},
    {"ledger_replay",
     "The ledger as it stood at seq: entries 0..seq, paged by from/limit.",
     "{\"type\":\"object\",\"properties\":{" SEQ_PROP ","
     "\"from\":{\"type\":\"integer\",\"minimum\":0},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000}},"
     "\"required\":[\"seq\"]}",
     SURF_READ, 4 * KIB, "GET", "/replay/{seq}", h_replay, SURF_ON_LOOP, NULL},
    {"ledger_chain", "The causal chain of an entry, root first.",
     "{\"type\":\"object\",\"properties\":{" SEQ_PROP "},"
     "\"required\":[\"seq\"]}",
     SURF_READ, 4 * KIB, "GET", "/chain/{seq}", h_chain, SURF_ON_WORKER, NULL},
    {"ledger_summary",
     "Counts: entries, by kind, by actor, bodies present and redacted.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/summary", h_summary, SURF_ON_WORKER,
     NULL},
    {"ledger_append",
     "Witness a step: append {actor, kind, payload, parent?}; returns the "
     "entry once durable.",
     "{\"type\":\"object\",\"properties\":{"
     "\"actor\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":128},"
     "\"kind\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
     "\"payload\":{},"
     "\"parent\":{\"type\":[\"integer\",\"null\"],\"minimum\":0}},"
     "\"required\":[\"actor\",\"kind\",\"payload\"]}",
     SURF_WRITE, (1u << 20) + 64 * KIB, "POST", "/append", h_append,
     SURF_ON_COMMIT, NULL},
    {"ledger_append_batch",
     "Witness up to 4096 steps at once: {entries: [{actor, kind, payload, "
     "parent?}]}, every entry checked first (a bad one is named by its "
     "index and nothing is written), then all in one transaction: {count, "
     "first_seq, last_seq, seqs}. A parent must be on record before the "
     "batch.",
     "{\"type\":\"object\",\"properties\":{"
     "\"entries\":{\"type\":\"array\",\"minItems\":1,"
     "\"maxItems\":4096}},"
     "\"required\":[\"entries\"]}",
     SURF_WRITE, 64u << 20, "POST", "/append/batch", h_append_batch,
     SURF_ON_WORKER, NULL},
    /* external traces: handler in methods_import.c (docs/IMPORT.md) */
    {"ledger_import",
     "Import a trace file in one batch: data (the file's text, at most 64 "
     "MiB) in format otel (OTLP/JSON), langsmith (runs) or jsonl (events); "
     "an import entry (its SHA-256, counts), then one entry per span, run "
     "or event under its parent's: {import_seq, records, dangling, "
     "entries}. Any error: nothing is written.",
     "{\"type\":\"object\",\"properties\":{"
     "\"format\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":16},"
     "\"data\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":67108864},"
     "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024}},"
     "\"required\":[\"format\",\"data\"]}",
     SURF_WRITE, 96u << 20, "POST", "/ledger/import", surf_h_import,
     SURF_ON_WORKER, NULL},
    {"ledger_redact",
     "Delete an entry's body (every copy), witnessed as a redaction entry.",
     "{\"type\":\"object\",\"properties\":{" SEQ_PROP ","
     "\"reason\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024}},"
     "\"required\":[\"seq\",\"reason\"]}",
     SURF_WRITE | SURF_ADMIN, 8 * KIB, "POST", "/redact", h_redact,
     SURF_ON_WORKER, NULL},
    /* proofs and checkpoints: handlers in methods_proof.c */
    {"ledger_checkpoint",
     "The latest signed checkpoint, witness cosignatures appended to its "
     "note: {checkpoint, size, root, note}.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/checkpoint", surf_h_checkpoint,
     SURF_ON_WORKER, NULL},
    {"ledger_cosign",
     "Add witness cosignatures (C2SP cosignature/v1) to a stored "
     "checkpoint: {size, root, accepted, cosignatures, note}.",
     "{\"type\":\"object\",\"properties\":{"
     "\"note\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536}},"
     "\"required\":[\"note\"]}",
     SURF_WRITE, 80 * KIB, "POST", "/checkpoint/cosign", surf_h_cosign,
     SURF_ON_WORKER, NULL},
    {"ledger_prove",
     "Inclusion proof of entry seq in the tree of size (default current).",
     "{\"type\":\"object\",\"properties\":{" SEQ_PROP ","
     "\"size\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"seq\"]}",
     SURF_READ, 4 * KIB, "GET", "/proof/inclusion", surf_h_prove, SURF_ON_LOOP,
     NULL},
    {"ledger_consistency",
     "Consistency proof between tree sizes first and second (default "
     "current).",
     "{\"type\":\"object\",\"properties\":{"
     "\"first\":{\"type\":\"integer\",\"minimum\":1},"
     "\"second\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"first\"]}",
     SURF_READ, 4 * KIB, "GET", "/proof/consistency", surf_h_consistency,
     SURF_ON_LOOP, NULL},
    /* the orchestrator: handlers in methods_orch.c */
    {"route",
     "Route a request to a lane: {decided, confidence, needs_escalation, "
     "candidates}.",
     "{\"type\":\"object\",\"properties\":{"
     "\"text\":{\"type\":\"string\",\"maxLength\":65536}},"
     "\"required\":[\"text\"]}",
     SURF_READ, 80 * KIB, "POST", "/route", surf_h_route, SURF_ON_LOOP, NULL},
    {"plan_run", "Run a given plan {tasks} wave by wave; every step witnessed.",
     "{\"type\":\"object\",\"properties\":{"
     "\"plan\":{\"type\":\"object\"},"
     "\"gates\":{\"type\":\"object\"},"
     "\"request\":{\"type\":\"string\",\"maxLength\":65536}},"
     "\"required\":[\"plan\"]}",
     SURF_WRITE | SURF_LONG, 4096 * KIB, "POST", "/plan/run", surf_h_plan_run,
     SURF_ON_RUN, surf_s_plan_run},
    {"plan",
     "The coordinator's plan for a request, not run (request, route and plan "
     "witnessed); without a model provider the stub plans one task on the "
     "routed lane.",
     "{\"type\":\"object\",\"properties\":{"
     "\"request\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536}},"
     "\"required\":[\"request\"]}",
     SURF_WRITE | SURF_LONG, 80 * KIB, "POST", "/plan", surf_h_plan,
     SURF_ON_RUN, surf_s_plan},
    {"submit",
     "Answer a request end to end: route, plan, tasks, verdicts, escalation, "
     "synthesis, every step witnessed: {answer, checkpoint, request_seq}. "
     "Answered when the run ends (the daemon holds no thread meanwhile); "
     "without a model provider every role is a deterministic stub.",
     "{\"type\":\"object\",\"properties\":{"
     "\"request\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536},"
     "\"max_model_calls\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":1000},"
     "\"max_seconds\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":86400},"
     "\"gates\":{\"type\":\"object\"},"
     "\"session\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
     "\"context\":{\"type\":\"object\"}," REF_SUBMIT_PROPS "},"
     "\"required\":[\"request\"]}",
     SURF_WRITE | SURF_LONG, 80 * KIB, "POST", "/submit", surf_h_submit,
     SURF_ON_RUN, surf_s_submit},
    {"run_start",
     "Start a run of a request (as submit) and answer at once with its id, "
     "the request entry's seq: {run, state}. At most max_runs runs at once "
     "in the daemon (default 10000; else 503 busy); a run outlives its "
     "caller and a daemon restart.",
     "{\"type\":\"object\",\"properties\":{"
     "\"request\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536},"
     "\"max_model_calls\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":1000},"
     "\"max_seconds\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":86400},"
     "\"gates\":{\"type\":\"object\"},"
     "\"session\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
     "\"context\":{\"type\":\"object\"}},"
     "\"required\":[\"request\"]}",
     SURF_WRITE, 80 * KIB, "POST", "/runs", surf_h_run_start, SURF_ON_RUN,
     surf_s_run_start},
    {"run_get",
     "A run's state from the ledger: running, done, budget, stopped (no "
     "process runs it now: the next daemon resumes it), cancelled, failed, "
     "interrupted (its process died and nothing will resume it: a CLI's "
     "run) or unknown; its entries so far; the answer when done. 404 "
     "not_a_run for a request that is not a run (plan).",
     "{\"type\":\"object\",\"properties\":{"
     "\"run\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"run\"]}",
     SURF_READ, 4 * KIB, "GET", "/runs/{run}", surf_h_run_get, SURF_ON_WORKER,
     NULL},
    {"run_cancel",
     "Cancel a run in progress in this process: it stops at once (the model "
     "call or task in flight is abandoned), witnessed (budget reason "
     "cancelled, then a fixed answer): {run, state, cancel: requested}. A "
     "run that already ended: its state unchanged, cancel: ended. A run of "
     "another process, or stopped and waiting for a daemon: 409 "
     "run_elsewhere.",
     "{\"type\":\"object\",\"properties\":{"
     "\"run\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"run\"]}",
     SURF_WRITE, 4 * KIB, "POST", "/runs/{run}/cancel", surf_h_run_cancel,
     SURF_ON_LOOP, NULL},
    {"run_list",
     "The runs, newest first: {runs: [{run, state, via, request, "
     "started_ts, entries}], next}; filter by state, page with before.",
     "{\"type\":\"object\",\"properties\":{"
     "\"state\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":32},"
     "\"before\":{\"type\":\"integer\",\"minimum\":0},"
     "\"since\":{\"type\":\"integer\",\"minimum\":0},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000}}}",
     SURF_READ, 4 * KIB, "GET", "/runs", surf_h_run_list, SURF_ON_WORKER, NULL},
    {"run_show",
     "A whole run: request, route, plan and waves, each task with its "
     "task, result, verdict and escalation entries (bodies and times), "
     "gates, budget, answer, and steps: one per model call, tool call, "
     "gate, escalation and retry, each {kind, name, start_ts, end_ts (absent "
     "while it runs), duration_ms, entries, and model, tokens, tool, "
     "arguments, output, ok where they apply}.",
     "{\"type\":\"object\",\"properties\":{"
     "\"run\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"run\"]}",
     SURF_READ, 4 * KIB, "GET", "/runs/{run}/show", surf_h_run_show,
     SURF_ON_WORKER, NULL},
    {"run_export_otel",
     "A run (its request entry and every descendant) as an OTLP/JSON trace "
     "{resourceSpans}: one span per entry, named by its kind; traceId from "
     "the ledger id and the run, spanId from the entry hash.",
     "{\"type\":\"object\",\"properties\":{"
     "\"run\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"run\"]}",
     SURF_READ, 4 * KIB, "GET", "/runs/{run}/otel", surf_h_export_otel,
     SURF_ON_WORKER, NULL},
    /* sessions: handlers in methods_orch.c */
    {"session_list",
     "The sessions: {sessions: [{session, started_seq, turns}]}.", NO_INPUT,
     SURF_READ, 4 * KIB, "GET", "/sessions", surf_h_session_list,
     SURF_ON_WORKER, NULL},
    {"session_show",
     "A session: its turns (request, answer, state) and its current facts.",
     "{\"type\":\"object\",\"properties\":{" SESSION_PROP "},"
     "\"required\":[\"session\"]}",
     SURF_READ, 4 * KIB, "GET", "/sessions/{session}", surf_h_session_show,
     SURF_ON_WORKER, NULL},
    {"session_fork",
     "A new session (into) that starts from session as it stood at its turn "
     "at (a run id): it sees that turn and those before it.",
     "{\"type\":\"object\",\"properties\":{" SESSION_PROP ","
     "\"at\":{\"type\":\"integer\",\"minimum\":0},"
     "\"into\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64}},"
     "\"required\":[\"session\",\"at\",\"into\"]}",
     SURF_WRITE, 4 * KIB, "POST", "/sessions/{session}/fork",
     surf_h_session_fork, SURF_ON_WORKER, NULL},
    {"session_remember",
     "Keep a fact in a session (key, value): later turns see it in their "
     "context.",
     "{\"type\":\"object\",\"properties\":{" SESSION_PROP ","
     "\"key\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":128},"
     "\"value\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":4096}},"
     "\"required\":[\"session\",\"key\",\"value\"]}",
     SURF_WRITE, 8 * KIB, "POST", "/sessions/{session}/facts",
     surf_h_session_remember, SURF_ON_WORKER, NULL},
    {"session_forget",
     "Forget a fact: its body is redacted (no text of it is left) and a "
     "fact_forgotten entry records the key.",
     "{\"type\":\"object\",\"properties\":{" SESSION_PROP ","
     "\"key\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":128}},"
     "\"required\":[\"session\",\"key\"]}",
     SURF_WRITE, 4 * KIB, "POST", "/sessions/{session}/forget",
     surf_h_session_forget, SURF_ON_WORKER, NULL},
    {"context_preflight",
     "What a request would send to the models in a session, writing "
     "nothing: per slice tokens, kept tokens and action (retained, "
     "trimmed, omitted) with the reason.",
     "{\"type\":\"object\",\"properties\":{"
     "\"request\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536},"
     "\"session\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
     "\"context\":{\"type\":\"object\"}," REF_BUDGET_PROPS ","
     "\"use_capsule_context\":{\"type\":\"boolean\"}," VIEW_PROPS "},"
     "\"required\":[\"request\"]}",
     SURF_READ, 80 * KIB, "POST", "/context/preflight",
     surf_h_context_preflight_ref, SURF_ON_WORKER, NULL},
    /* the reference's operator views and prose: methods_ref.c */
    {"ledger_capsule",
     "A deterministic brief of the whole ledger (forum.context-capsule/v1): "
     "checkpoint, verified, counts by kind, the latest request and answer, "
     "the last max_items task results, signals; the same ledger gives the "
     "same bytes.",
     "{\"type\":\"object\",\"properties\":{" VIEW_PROPS "}}", SURF_READ,
     4 * KIB, "GET", "/capsule", surf_h_capsule, SURF_ON_WORKER, NULL},
    {"run_room",
     "One operator view of a run (the latest, or run) "
     "(forum.run-room/v1): its request, route, plan, tasks with results "
     "and verdicts, the gates waiting, the answer, signals and next_actions "
     "(a waiting gate is a high-priority review_gate).",
     "{\"type\":\"object\",\"properties\":{"
     "\"run\":{\"type\":\"integer\",\"minimum\":0},"
     "\"max_text_chars\":{\"type\":\"integer\",\"minimum\":0,"
     "\"maximum\":65536}}}",
     SURF_READ, 4 * KIB, "GET", "/room", surf_h_room, SURF_ON_WORKER, NULL},
    {"runtime_inspect",
     "What would run, without running a model (forum.runtime.inspect/v1): "
     "the control roles' executor, each tier's, the roster's tiers, the "
     "policy, and the issues that keep it from being ready.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/runtime", surf_h_runtime,
     SURF_ON_WORKER, NULL},
    {"operator_status",
     "The reference's status envelope (project-telos.flagship-action/v1): "
     "entries, checkpoint, runs by state, gates waiting, the operator "
     "commands and the reference's tool names forum answers.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/status/operator",
     surf_h_operator_status, SURF_ON_WORKER, NULL},
    {"doctor",
     "The operator's checks as a flagship-action envelope: each model "
     "provider answers one short call (the one that does not is named with "
     "its URL), the sandbox can be made, the store verifies, the token and "
     "key are private, the disk has room; status MATCH or DRIFT.",
     "{\"type\":\"object\",\"properties\":{"
     "\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":300}}}",
     SURF_READ | SURF_LONG, 4 * KIB, "GET", "/doctor", surf_h_doctor,
     SURF_ON_WORKER, NULL},
    {"humanize",
     "Plainer wording for people, adding no fact, and the text checked "
     "against a delivery profile (forum.prose-humanization/v1); no model.",
     "{\"type\":\"object\",\"properties\":{"
     "\"text\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536},"
     "\"audience\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":128}," PROFILE_PROP "},"
     "\"required\":[\"text\"]}",
     SURF_READ, 80 * KIB, "POST", "/humanize", surf_h_humanize, SURF_ON_WORKER,
     NULL},
    {"prose_contract",
     "The communication contract of a request's route "
     "(forum.communication-contract/v1): domain, intent, posture, profile, "
     "proof and domain lane, lead, structure, evidence; no model.",
     "{\"type\":\"object\",\"properties\":{"
     "\"text\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":65536}," PROFILE_PROP "},"
     "\"required\":[\"text\"]}",
     SURF_READ, 80 * KIB, "POST", "/prose/contract", surf_h_prose_contract,
     SURF_ON_WORKER, NULL},
    /* grading and proof lanes: methods_grade.c */
    {"grade",
     "The outcome grade of a run (the latest, or run) from its checks on "
     "record: verdicts, verifications and intent judgments whose actor "
     "produced no result in the run; reward, label PASS, FAIL or "
     "UNVERIFIABLE, and the inputs with their seqs.",
     "{\"type\":\"object\",\"properties\":{" RUN_OR_IMPORT_PROP
     "," MIN_CHECKS_PROP "}}",
     SURF_READ, 4 * KIB, "GET", "/grade", surf_h_grade, SURF_ON_WORKER, NULL},
    {"export_gradable",
     "A run (the latest, or run) as one forum.gradable-trajectory/1 row: "
     "prompt, entries, grade, the checks' bodies and an inclusion proof per "
     "entry, so anyone can re-derive it from the ledger's root.",
     "{\"type\":\"object\",\"properties\":{" RUN_OR_IMPORT_PROP
     "," MIN_CHECKS_PROP "}}",
     SURF_READ, 4 * KIB, "GET", "/gradable", surf_h_export_gradable,
     SURF_ON_WORKER, NULL},
    {"lanes",
     "The closed proof-lane vocabulary with each lane's scopes, and the "
     "domain lanes.",
     NO_INPUT, SURF_READ, 4 * KIB, "GET", "/lanes", surf_h_lanes,
     SURF_ON_WORKER, NULL},
    {"lane_route",
     "Judge a route claim (task, lane, scopes, domain?) on the lane "
     "vocabularies and witness it: a lane_route entry, or a lane_rejection "
     "entry (unknown_lane, over_routed, unknown_domain) and a refusal "
     "naming its seq.",
     "{\"type\":\"object\",\"properties\":{"
     "\"task\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096},"
     "\"lane\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
     "\"scopes\":{\"type\":\"array\",\"maxItems\":64,\"items\":"
     "{\"type\":\"string\"}},"
     "\"domain\":{\"type\":[\"string\",\"null\"],\"minLength\":1,"
     "\"maxLength\":64},"
     "\"confidence\":{\"type\":[\"number\",\"null\"]},"
     "\"parent\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"task\",\"lane\",\"scopes\"]}",
     SURF_WRITE, 16 * KIB, "POST", "/lanes/route", surf_h_lane_route,
     SURF_ON_WORKER, NULL},
    {"vocabulary_gap",
     "Witness a vocabulary_gap receipt when the last min_escalations or "
     "more route entries (from since) all escalated with no lane decided; "
     "creates no lane.",
     "{\"type\":\"object\",\"properties\":{"
     "\"domain_signal\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":128},"
     "\"min_escalations\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":1000000},"
     "\"since\":{\"type\":\"integer\",\"minimum\":0}},"
     "\"required\":[\"domain_signal\"]}",
     SURF_WRITE, 4 * KIB, "POST", "/lanes/gap", surf_h_vocab_gap,
     SURF_ON_WORKER, NULL},

    /* approval gates: handlers in methods_orch.c */
    {"gate_list",
     "The approval gates waiting for a decision (of one run with run): "
     "{gates: [{run_seq, wave, tasks, question, rule, deadline, on_expiry, "
     "requested_seq}]}.",
     "{\"type\":\"object\",\"properties\":{"
     "\"run\":{\"type\":\"integer\",\"minimum\":0}}}",
     SURF_READ, 4 * KIB, "GET", "/gates", surf_h_gate_list, SURF_ON_WORKER,
     NULL},
    {"gate_approve",
     "Approve the gate before wave of run run_seq: the wave runs. Recorded "
     "as gate_approved with the approver: {run_seq, wave, decision, seq}.",
     GATE_SCHEMA("", ""), SURF_WRITE, 8 * KIB, "POST", "/gate/approve",
     surf_h_gate_approve, SURF_ON_RUN, surf_s_gate_approve},
    {"gate_edit",
     "Approve the gate before wave of run run_seq with new instructions for "
     "some of its tasks (edits: {task id: instruction}); the edited "
     "instructions are what run. Recorded as gate_edited.",
     GATE_SCHEMA(",\"edits\":{\"type\":\"object\"}", ",\"edits\""), SURF_WRITE,
     1024 * KIB, "POST", "/gate/edit", surf_h_gate_edit, SURF_ON_RUN,
     surf_s_gate_edit},
    {"gate_reject",
     "Reject the gate before wave of run run_seq: the run ends (state "
     "rejected) without running the wave. Recorded as gate_rejected with "
     "the reason.",
     GATE_SCHEMA(",\"reason\":{\"type\":\"string\",\"minLength\":1,"
                 "\"maxLength\":4096}",
                 ""),
     SURF_WRITE, 16 * KIB, "POST", "/gate/reject", surf_h_gate_reject,
     SURF_ON_RUN, surf_s_gate_reject},
};

const struct surf_method *surf_methods(size_t *n)
{
    *n = sizeof(table) / sizeof(table[0]);
    return table;
}
