/* otlp_pb: an OTLP/HTTP protobuf trace export request made its OTLP/JSON
 * form (surfaces/otlp.h), with the protobuf-c code generated from
 * third_party/opentelemetry-proto; and the protobuf answer. */
#include "surfaces/otlp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "ledger/fo_json.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"

typedef Opentelemetry__Proto__Common__V1__AnyValue pb_any;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;
typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Trace__V1__ResourceSpans pb_rs;
typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest
    pb_req;

#define SPAN_DESC opentelemetry__proto__trace__v1__span__descriptor
#define REQ_DESC                                                               \
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__descriptor

/* ---- the guard before protobuf-c ---------------------------------------- */

/* protobuf-c unpacks nested messages by recursion, one struct per message:
 * a hostile body of a few bytes a level could exhaust the stack, or make
 * a hundred times its size in structs. This walk over the wire format,
 * led by the generated descriptors (only fields the schema says are
 * messages are entered), counts messages and spans and bounds the depth
 * first; decoding itself is protobuf-c's. */
struct scan {
    size_t msgs, spans, fields;
};

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

static int scan_msg(const uint8_t *p, size_t n,
                    const ProtobufCMessageDescriptor *d, int depth,
                    struct scan *s, struct fo_err *err)
{
    if (depth > OTLP_MAX_DEPTH)
        return fo_err_set(err, FO_E_INVALID,
                          "protobuf: messages nested over %d deep",
                          OTLP_MAX_DEPTH);
    if (++s->msgs > OTLP_MAX_MESSAGES)
        return fo_err_set(err, FO_E_TOO_LARGE,
                          "protobuf: over %d messages in one request",
                          OTLP_MAX_MESSAGES);
    if (d == &SPAN_DESC && ++s->spans > OTLP_MAX_SPANS)
        return fo_err_set(err, FO_E_TOO_LARGE,
                          "over %d spans in one request; export smaller "
                          "batches",
                          OTLP_MAX_SPANS);
    const uint8_t *end = p + n;
    while (p < end) {
        uint64_t tag, len;
        if (varint(&p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > INT32_MAX)
            return fo_err_set(err, FO_E_INVALID, "protobuf: a bad field tag");
        /* protobuf-c notes every field it scans (and keeps unknown ones),
         * a few dozen bytes each for as little as two bytes of input */
        if (++s->fields > OTLP_MAX_FIELDS)
            return fo_err_set(err, FO_E_TOO_LARGE,
                              "protobuf: over %d fields in one request",
                              OTLP_MAX_FIELDS);
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            if (varint(&p, end, &len))
                return fo_err_set(err, FO_E_INVALID,
                                  "protobuf: a truncated varint");
            continue;
        }
        if (wt == 1 || wt == 5) {
            size_t w = wt == 1 ? 8 : 4;
            if ((size_t)(end - p) < w)
                return fo_err_set(err, FO_E_INVALID,
                                  "protobuf: a truncated fixed field");
            p += w;
            continue;
        }
        if (wt != 2)
            return fo_err_set(err, FO_E_INVALID,
                              "protobuf: wire type %u is not used by OTLP", wt);
        if (varint(&p, end, &len) || len > (uint64_t)(end - p))
            return fo_err_set(err, FO_E_INVALID,
                              "protobuf: a length past the end of the body");
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3));
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
            int rc = scan_msg(p, (size_t)len, f->descriptor, depth + 1, s, err);
            if (rc)
                return rc;
        }
        p += len;
    }
    return FO_OK;
}

/* ---- protobuf to OTLP/JSON ----------------------------------------------- */

static cJSON *hex_of(ProtobufCBinaryData b)
{
    static const char digits[] = "0123456789abcdef";
    char buf[2 * 64 + 1];
    if (b.len > 64)
        b.len = 64; /* ids are 8 or 16 bytes; a longer one is refused later */
    for (size_t i = 0; i < b.len; i++) {
        buf[2 * i] = digits[b.data[i] >> 4];
        buf[2 * i + 1] = digits[b.data[i] & 15];
    }
    buf[2 * b.len] = 0;
    return cJSON_CreateString(buf);
}

static cJSON *u64_text(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cJSON_CreateString(buf);
}

static int add(cJSON *o, const char *k, cJSON *v)
{
    if (!v)
        return 0;
    if (!cJSON_AddItemToObject(o, k, v)) {
        cJSON_Delete(v);
        return 0;
    }
    return 1;
}

/* A string field: skipped when empty (proto3's default); 0 when it is
 * not UTF-8 (*bad set) or on no memory. */
static int add_str(cJSON *o, const char *k, const char *s, int *bad)
{
    if (!s || !*s)
        return 1;
    if (!fo_utf8_valid(s, strlen(s))) {
        *bad = 1;
        return 0;
    }
    return add(o, k, cJSON_CreateString(s));
}

static cJSON *kvs_json(pb_kv **kv, size_t n, int *bad);

static cJSON *any_json(const pb_any *a, int *bad)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !a)
        return o;
    int ok = 1;
    switch (a->value_case) {
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE:
        ok = fo_utf8_valid(a->string_value, strlen(a->string_value))
                 ? add(o, "stringValue", cJSON_CreateString(a->string_value))
                 : (*bad = 1, 0);
        break;
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE:
        ok = add(o, "boolValue", cJSON_CreateBool(a->bool_value));
        break;
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE: {
        char buf[24];
        snprintf(buf, sizeof(buf), "%" PRId64, a->int_value);
        ok = add(o, "intValue", cJSON_CreateString(buf));
        break;
    }
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_DOUBLE_VALUE: {
        /* NaN and the infinities have no JSON number: their names, as
         * the protobuf JSON mapping writes them */
        double v = a->double_value;
        ok = add(o, "doubleValue",
                 v != v               ? cJSON_CreateString("NaN")
                 : v > 1.7976931e308  ? cJSON_CreateString("Infinity")
                 : v < -1.7976931e308 ? cJSON_CreateString("-Infinity")
                                      : cJSON_CreateNumber(v));
        break;
    }
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_ARRAY_VALUE: {
        cJSON *av = cJSON_CreateObject(), *vs = cJSON_CreateArray();
        ok = add(o, "arrayValue", av) && add(av, "values", vs);
        for (size_t i = 0; ok && a->array_value && i < a->array_value->n_values;
             i++) {
            cJSON *x = any_json(a->array_value->values[i], bad);
            ok = x && cJSON_AddItemToArray(vs, x);
        }
        break;
    }
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_KVLIST_VALUE: {
        cJSON *kv = cJSON_CreateObject();
        ok =
            add(o, "kvlistValue", kv) &&
            add(kv, "values",
                kvs_json(a->kvlist_value ? a->kvlist_value->values : NULL,
                         a->kvlist_value ? a->kvlist_value->n_values : 0, bad));
        break;
    }
    case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BYTES_VALUE: {
        /* base64, as the JSON mapping writes bytes */
        size_t n = a->bytes_value.len;
        char *b = malloc(4 * ((n + 2) / 3) + 1);
        ok = b != NULL;
        if (ok) {
            EVP_EncodeBlock((unsigned char *)b, a->bytes_value.data, (int)n);
            ok = add(o, "bytesValue", cJSON_CreateString(b));
            free(b);
        }
        break;
    }
    default:
        break; /* an empty value: {} */
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *kvs_json(pb_kv **kv, size_t n, int *bad)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateObject();
        if (!x || !cJSON_AddItemToArray(a, x) ||
            !add_str(x, "key", kv[i]->key, bad) ||
            !add(x, "value", any_json(kv[i]->value, bad))) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static int add_attrs(cJSON *o, pb_kv **kv, size_t n, int *bad)
{
    return n == 0 || add(o, "attributes", kvs_json(kv, n, bad));
}

static cJSON *span_json(const pb_span *s, int *bad)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *evs = NULL, *links = NULL;
    int ok = o && add(o, "traceId", hex_of(s->trace_id)) &&
             add(o, "spanId", hex_of(s->span_id)) &&
             (!s->parent_span_id.len ||
              add(o, "parentSpanId", hex_of(s->parent_span_id))) &&
             add_str(o, "traceState", s->trace_state, bad) &&
             add_str(o, "name", s->name, bad) &&
             add(o, "kind", cJSON_CreateNumber((double)s->kind)) &&
             add(o, "startTimeUnixNano", u64_text(s->start_time_unix_nano)) &&
             add(o, "endTimeUnixNano", u64_text(s->end_time_unix_nano)) &&
             add_attrs(o, s->attributes, s->n_attributes, bad);
    if (ok && s->n_events)
        ok = add(o, "events", evs = cJSON_CreateArray());
    for (size_t i = 0; ok && i < s->n_events; i++) {
        const Opentelemetry__Proto__Trace__V1__Span__Event *e = s->events[i];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(evs, x) &&
             add(x, "timeUnixNano", u64_text(e->time_unix_nano)) &&
             add_str(x, "name", e->name, bad) &&
             add_attrs(x, e->attributes, e->n_attributes, bad);
    }
    if (ok && s->n_links)
        ok = add(o, "links", links = cJSON_CreateArray());
    for (size_t i = 0; ok && i < s->n_links; i++) {
        const Opentelemetry__Proto__Trace__V1__Span__Link *k = s->links[i];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(links, x) &&
             add(x, "traceId", hex_of(k->trace_id)) &&
             add(x, "spanId", hex_of(k->span_id)) &&
             add_str(x, "traceState", k->trace_state, bad) &&
             add_attrs(x, k->attributes, k->n_attributes, bad);
    }
    if (ok && s->status) {
        cJSON *st = cJSON_CreateObject();
        ok = add(o, "status", st) &&
             add_str(st, "message", s->status->message, bad) &&
             (!s->status->code ||
              add(st, "code", cJSON_CreateNumber((double)s->status->code)));
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One scope's spans ({scope: {name, version}, spans}), from ScopeSpans or
 * the deprecated InstrumentationLibrarySpans (the same fields). */
static cJSON *scope_json(const char *name, const char *version, pb_span **spans,
                         size_t n, int *bad)
{
    cJSON *o = cJSON_CreateObject(), *sc = cJSON_CreateObject();
    cJSON *a = cJSON_CreateArray();
    int ok = add(o, "scope", sc) && add_str(sc, "name", name, bad) &&
             add_str(sc, "version", version, bad) && add(o, "spans", a);
    if (!ok)
        cJSON_Delete(sc), cJSON_Delete(a);
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *x = span_json(spans[i], bad);
        ok = x && cJSON_AddItemToArray(a, x);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *rs_json(const pb_rs *rs, int *bad)
{
    cJSON *o = cJSON_CreateObject(), *res = cJSON_CreateObject();
    cJSON *sss = cJSON_CreateArray();
    int ok = add(o, "resource", res) &&
             (!rs->resource || add_attrs(res, rs->resource->attributes,
                                         rs->resource->n_attributes, bad)) &&
             add(o, "scopeSpans", sss);
    if (!ok)
        cJSON_Delete(res), cJSON_Delete(sss);
    for (size_t i = 0; ok && i < rs->n_scope_spans; i++) {
        const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss =
            rs->scope_spans[i];
        cJSON *x = scope_json(ss->scope ? ss->scope->name : NULL,
                              ss->scope ? ss->scope->version : NULL, ss->spans,
                              ss->n_spans, bad);
        ok = x && cJSON_AddItemToArray(sss, x);
    }
    /* a sender of before 1.0: read only when scope_spans is not set (the
     * schema marks the field deprecated, which is why it is read here) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    for (size_t i = 0;
         ok && !rs->n_scope_spans && i < rs->n_instrumentation_library_spans;
         i++) {
        const Opentelemetry__Proto__Trace__V1__InstrumentationLibrarySpans *ls =
            rs->instrumentation_library_spans[i];
        const Opentelemetry__Proto__Common__V1__InstrumentationLibrary *lib =
            ls->instrumentation_library;
        cJSON *x = scope_json(lib ? lib->name : NULL, lib ? lib->version : NULL,
                              ls->spans, ls->n_spans, bad);
        ok = x && cJSON_AddItemToArray(sss, x);
    }
#pragma GCC diagnostic pop
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int otlp_pb_to_json(const void *data, size_t len, cJSON **out,
                    struct fo_err *err)
{
    struct scan s = {0};
    int rc = scan_msg(data, len, &REQ_DESC, 0, &s, err);
    if (rc)
        return rc;
    pb_req *req =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
            NULL, len, data);
    if (!req)
        return fo_err_set(err, FO_E_INVALID,
                          "not an OTLP ExportTraceServiceRequest (protobuf-c "
                          "could not decode the body)");
    cJSON *doc = cJSON_CreateObject(), *rss = cJSON_CreateArray();
    int bad = 0;
    int ok = add(doc, "resourceSpans", rss);
    if (!ok)
        cJSON_Delete(rss);
    for (size_t i = 0; ok && i < req->n_resource_spans; i++) {
        cJSON *x = rs_json(req->resource_spans[i], &bad);
        ok = x && cJSON_AddItemToArray(rss, x);
    }
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(
        req, NULL);
    if (!ok) {
        cJSON_Delete(doc);
        return bad ? fo_err_set(err, FO_E_INVALID,
                                "a string field is not UTF-8")
                   : fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = doc;
    return FO_OK;
}

int otlp_pb_response(long long rejected, const char *message, uint8_t **out,
                     size_t *len)
{
    /* the generated init functions (the __INIT macros cast away const) */
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse r;
    Opentelemetry__Proto__Collector__Trace__V1__ExportTracePartialSuccess ps;
    opentelemetry__proto__collector__trace__v1__export_trace_service_response__init(
        &r);
    opentelemetry__proto__collector__trace__v1__export_trace_partial_success__init(
        &ps);
    if (rejected > 0 || (message && *message)) {
        ps.rejected_spans = rejected;
        ps.error_message = (char *)(uintptr_t)(message ? message : "");
        r.partial_success = &ps;
    }
    size_t n =
        opentelemetry__proto__collector__trace__v1__export_trace_service_response__get_packed_size(
            &r);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return FO_E_NOMEM;
    *len =
        opentelemetry__proto__collector__trace__v1__export_trace_service_response__pack(
            &r, b);
    *out = b;
    return FO_OK;
}
