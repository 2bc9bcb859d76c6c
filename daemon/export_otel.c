/* export_otel: a forum run (its request entry and every descendant) as an
 * OTLP/JSON trace any OpenTelemetry backend opens (daemon/import.h,
 * docs/IMPORT.md). One span per entry, named by its kind; a span lasts
 * from its entry's time to the last time in its subtree, so parents
 * enclose their children. */
#include "daemon/import.h"
#include "daemon/orch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/fo_version.h"

#define SPAN_KIND_INTERNAL 1

struct collect {
    struct ledger_entry *v;
    size_t n, cap;
};

static int collect_one(void *ctx, const struct ledger_entry *e)
{
    struct collect *c = ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct ledger_entry *v = realloc(c->v, cap * sizeof(*v));
        if (!v)
            return FO_E_NOMEM;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = *e;
    return FO_OK;
}

/* {key, value: {stringValue}} appended to attrs. */
static int attr_s(cJSON *attrs, const char *k, const char *v)
{
    cJSON *a = cJSON_CreateObject();
    cJSON *val = a ? cJSON_CreateObject() : NULL;
    if (!a || !cJSON_AddItemToArray(attrs, a) || !val ||
        !cJSON_AddStringToObject(a, "key", k) ||
        !cJSON_AddItemToObject(a, "value", val) ||
        !cJSON_AddStringToObject(val, "stringValue", v)) {
        if (val && !cJSON_GetObjectItemCaseSensitive(a, "value"))
            cJSON_Delete(val);
        return 0;
    }
    return 1;
}

/* {key, value: {intValue: "N"}} (int64 as a decimal string, as OTLP/JSON
 * writes it). */
static int attr_i(cJSON *attrs, const char *k, long long v)
{
    char b[32];
    snprintf(b, sizeof(b), "%lld", v);
    if (!attr_s(attrs, k, b))
        return 0;
    cJSON *val = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(attrs, cJSON_GetArraySize(attrs) - 1), "value");
    cJSON *s = cJSON_DetachItemFromObjectCaseSensitive(val, "stringValue");
    if (!s)
        return 0;
    return cJSON_AddItemToObject(val, "intValue", s);
}

static int attr_b(cJSON *attrs, const char *k)
{
    cJSON *a = cJSON_CreateObject();
    cJSON *val = a ? cJSON_CreateObject() : NULL;
    int ok = a && cJSON_AddItemToArray(attrs, a) && val &&
             cJSON_AddStringToObject(a, "key", k) &&
             cJSON_AddItemToObject(a, "value", val);
    if (!ok) {
        if (a && val && !cJSON_GetObjectItemCaseSensitive(a, "value"))
            cJSON_Delete(val);
        return 0;
    }
    return cJSON_AddTrueToObject(val, "boolValue") != NULL;
}

static int by_seq(const void *key, const void *elem)
{
    int64_t k = *(const int64_t *)key;
    int64_t s = ((const struct ledger_entry *)elem)->seq;
    return k < s ? -1 : k > s;
}

static void nanos(char out[32], int64_t us)
{
    snprintf(out, 32, "%lld", (long long)us * 1000); /* to year 2262 */
}

/* A gateway call's GenAI attributes: a chat operation, its provider,
 * usage, and error.type when it failed. */
static int gateway_attrs(cJSON *attrs, const cJSON *b)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "provider");
    const cJSON *ti = cJSON_GetObjectItemCaseSensitive(b, "tokens_in");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(b, "tokens_out");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(b, "error_class");
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(b, "session");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(b, "status");
    return attr_s(attrs, "gen_ai.operation.name", "chat") &&
           (!cJSON_IsString(p) ||
            attr_s(attrs, "gen_ai.provider.name", p->valuestring)) &&
           (!cJSON_IsNumber(ti) || attr_i(attrs, "gen_ai.usage.input_tokens",
                                          (long long)ti->valuedouble)) &&
           (!cJSON_IsNumber(to) || attr_i(attrs, "gen_ai.usage.output_tokens",
                                          (long long)to->valuedouble)) &&
           (!cJSON_IsString(ec) ||
            attr_s(attrs, "error.type", ec->valuestring)) &&
           (!cJSON_IsString(se) ||
            attr_s(attrs, "forum.session", se->valuestring)) &&
           (!cJSON_IsNumber(st) ||
            attr_i(attrs, "forum.status", (long long)st->valuedouble));
}

/* One entry as a span. */
static cJSON *span_of(struct ledger *l, const struct ledger_entry *e,
                      const struct ledger_entry *parent, int64_t start_us,
                      int64_t end_us, const char *trace, struct fo_err *err,
                      int *rc)
{
    char hex[65], sid[17], pid[17], t0[32], t1[32];
    fo_hex(e->hash, 8, sid);
    nanos(t0, start_us);
    nanos(t1, end_us);
    char *body = NULL;
    size_t len = 0;
    *rc = ledger_body(l, e->seq, &body, &len, err);
    if (*rc && *rc != FO_E_REDACTED)
        return NULL;
    int redacted = *rc == FO_E_REDACTED;
    *rc = FO_OK;
    cJSON *b = NULL;
    if (body && fo_json_parse(body, len, &b, NULL) != FO_OK)
        b = NULL;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(b, "model");
    /* a tool's call: the GenAI conventions' execute_tool span, named by
     * its tool (its result is the span under it) */
    const cJSON *tool = cJSON_GetObjectItemCaseSensitive(b, "tool");
    int is_tool = !strcmp(e->kind, "tool_call") && cJSON_IsString(tool);
    const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(b, "call_id");
    cJSON *s = cJSON_CreateObject();
    cJSON *attrs = s ? cJSON_CreateArray() : NULL;
    int ok = s && attrs && cJSON_AddStringToObject(s, "traceId", trace) &&
             cJSON_AddStringToObject(s, "spanId", sid);
    if (ok && parent) {
        fo_hex(parent->hash, 8, pid);
        ok = cJSON_AddStringToObject(s, "parentSpanId", pid) != NULL;
    }
    ok = ok && cJSON_AddStringToObject(s, "name", e->kind) &&
         fo_json_add_int(s, "kind", SPAN_KIND_INTERNAL) &&
         cJSON_AddStringToObject(s, "startTimeUnixNano", t0) &&
         cJSON_AddStringToObject(s, "endTimeUnixNano", t1) &&
         cJSON_AddItemToObject(s, "attributes", attrs);
    if (!ok)
        cJSON_Delete(attrs);
    ok = ok && attr_i(attrs, "forum.seq", e->seq) &&
         attr_s(attrs, "forum.kind", e->kind) &&
         attr_s(attrs, "forum.actor", e->actor);
    fo_hex(e->hash, 32, hex);
    ok = ok && attr_s(attrs, "forum.hash", hex);
    fo_hex(e->payload, 32, hex);
    ok = ok && attr_s(attrs, "forum.payload", hex) &&
         (redacted ? attr_b(attrs, "forum.redacted")
                   : attr_s(attrs, "forum.body", body ? body : "null")) &&
         (!cJSON_IsString(model) ||
          attr_s(attrs, "gen_ai.request.model", model->valuestring)) &&
         (!is_tool ||
          (attr_s(attrs, "gen_ai.operation.name", "execute_tool") &&
           attr_s(attrs, "gen_ai.tool.name", tool->valuestring) &&
           (!cJSON_IsString(call_id) ||
            attr_s(attrs, "gen_ai.tool.call.id", call_id->valuestring)))) &&
         (strcmp(e->kind, "gateway_call") || gateway_attrs(attrs, b));
    free(body);
    cJSON_Delete(b);
    if (!ok) {
        cJSON_Delete(s);
        *rc = fo_err_set(err, FO_E_NOMEM, NULL);
        return NULL;
    }
    return s;
}

static cJSON *resource_of(struct ledger *l, int64_t run)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *a = r ? cJSON_AddArrayToObject(r, "attributes") : NULL;
    if (!a || !attr_s(a, "service.name", "forum") ||
        !attr_s(a, "forum.ledger_id", ledger_id(l)) ||
        !attr_s(a, "forum.origin", ledger_origin(l)) ||
        !attr_i(a, "forum.run", run)) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

/* {resourceSpans: [{resource, scopeSpans: [{scope, spans}]}]}, taking
 * resource (freed on failure); *spans is the empty array to fill. */
static cJSON *trace_shell(cJSON *resource, cJSON **spans)
{
    cJSON *o = resource ? cJSON_CreateObject() : NULL;
    cJSON *rss = o ? cJSON_AddArrayToObject(o, "resourceSpans") : NULL;
    cJSON *rs = rss ? cJSON_CreateObject() : NULL;
    cJSON *sss = rs && cJSON_AddItemToArray(rss, rs)
                     ? cJSON_AddArrayToObject(rs, "scopeSpans")
                     : NULL;
    cJSON *ss = sss ? cJSON_CreateObject() : NULL;
    cJSON *scope = ss && cJSON_AddItemToArray(sss, ss)
                       ? cJSON_AddObjectToObject(ss, "scope")
                       : NULL;
    *spans = scope ? cJSON_AddArrayToObject(ss, "spans") : NULL;
    if (!*spans || !cJSON_AddStringToObject(scope, "name", "forum") ||
        !cJSON_AddStringToObject(scope, "version", FO_VERSION) ||
        !cJSON_AddItemToObject(rs, "resource", resource)) {
        if (!rs || !cJSON_GetObjectItemCaseSensitive(rs, "resource"))
            cJSON_Delete(resource);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int export_otel_run(struct ledger *l, int64_t run, cJSON **out,
                    struct fo_err *err)
{
    struct ledger_entry root;
    int rc = ledger_get(l, run, &root, NULL, err);
    if (rc)
        return rc;
    if (strcmp(root.kind, "request") || root.parent != LEDGER_NO_PARENT)
        return fo_err_set(err, FO_E_NOT_A_RUN,
                          "entry %lld: not a run (a request entry without a "
                          "parent; this one is of kind \"%s\")",
                          (long long)run, root.kind);
    struct collect c = {0};
    rc = ledger_descendants(l, run, -1, collect_one, &c, err);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    int64_t *end = rc ? NULL : malloc((c.n ? c.n : 1) * sizeof(*end));
    if (!rc && !end)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    /* each span ends at the last time in its subtree: children come after
     * their parents in seq order, so one backward pass carries it up */
    size_t *parent = rc ? NULL : malloc((c.n ? c.n : 1) * sizeof(*parent));
    if (!rc && !parent)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < c.n; i++) {
        end[i] = c.v[i].ts;
        const struct ledger_entry *p =
            i && c.v[i].parent != LEDGER_NO_PARENT
                ? bsearch(&c.v[i].parent, c.v, i, sizeof(*c.v), by_seq)
                : NULL;
        parent[i] = p ? (size_t)(p - c.v) : SIZE_MAX;
    }
    for (size_t i = c.n; !rc && i-- > 0;)
        if (parent[i] != SIZE_MAX && end[parent[i]] < end[i])
            end[parent[i]] = end[i];
    uint8_t d[32];
    char trace[33];
    struct fo_buf key;
    fo_buf_init(&key, FO_BUF_UNLIMITED);
    if (!rc && fo_buf_printf(&key, "forum-otel-trace:%s:%lld", ledger_id(l),
                             (long long)run))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc) {
        fo_sha256(key.data, key.len, d);
        fo_hex(d, 16, trace);
    }
    fo_buf_release(&key);
    cJSON *spans = NULL;
    cJSON *o = rc ? NULL : trace_shell(resource_of(l, run), &spans);
    if (!rc && !o)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < c.n; i++) {
        cJSON *s =
            span_of(l, &c.v[i], parent[i] == SIZE_MAX ? NULL : &c.v[parent[i]],
                    c.v[i].ts, end[i], trace, err, &rc);
        if (s && !cJSON_AddItemToArray(spans, s)) {
            cJSON_Delete(s);
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        }
    }
    free(end);
    free(parent);
    free(c.v);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}

/* ---- a gateway session -------------------------------------------------- */

int export_otel_session(struct ledger *l, const char *name, cJSON **out,
                        struct fo_err *err)
{
    cJSON *show = NULL;
    int rc = orch_gw_session_show(l, name, &show, err);
    if (rc)
        return rc;
    uint8_t d[32];
    char trace[33];
    struct fo_buf key;
    fo_buf_init(&key, FO_BUF_UNLIMITED);
    cJSON *res = cJSON_CreateObject();
    cJSON *a = res ? cJSON_AddArrayToObject(res, "attributes") : NULL;
    if (fo_buf_printf(&key, "forum-otel-trace:%s:session:%s", ledger_id(l),
                      name) ||
        !a || !attr_s(a, "service.name", "forum") ||
        !attr_s(a, "forum.ledger_id", ledger_id(l)) ||
        !attr_s(a, "forum.origin", ledger_origin(l)) ||
        !attr_s(a, "forum.gateway_session", name))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc) {
        fo_sha256(key.data, key.len, d);
        fo_hex(d, 16, trace);
    }
    fo_buf_release(&key);
    cJSON *spans = NULL;
    cJSON *o = rc ? NULL : trace_shell(res, &spans);
    if (rc)
        cJSON_Delete(res);
    else if (!o)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *st;
    cJSON_ArrayForEach (st, cJSON_GetObjectItemCaseSensitive(show, "steps")) {
        if (rc)
            break;
        struct ledger_entry e;
        rc = ledger_get(
            l,
            (int64_t)cJSON_GetObjectItemCaseSensitive(st, "seq")->valuedouble,
            &e, NULL, err);
        cJSON *s = rc ? NULL
                      : span_of(l, &e, NULL,
                                (int64_t)cJSON_GetObjectItemCaseSensitive(
                                    st, "start_ts")
                                    ->valuedouble,
                                e.ts, trace, err, &rc);
        if (s && !cJSON_AddItemToArray(spans, s)) {
            cJSON_Delete(s);
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        }
    }
    cJSON_Delete(show);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}
