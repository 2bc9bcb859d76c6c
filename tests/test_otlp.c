/* POST /v1/traces, the OTLP/HTTP trace receiver (surfaces/otlp.c), against
 * the real daemon: protobuf requests made with the protobuf-c code of the
 * vendored schema, OTLP/JSON, gzip, partial success, malformed and
 * oversized bodies, and the token; what reaches the ledger is what
 * `forum import otel` makes. Then the decoding guards without a daemon. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cJSON.h>
#include <zlib.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "surfaces/otlp.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;
typedef Opentelemetry__Proto__Common__V1__AnyValue pb_any;

/* ---- HTTP with any body ------------------------------------------------- */

struct reply {
    int status;
    char ctype[64];
    char *body; /* malloc'd, NUL-ended; len bytes */
    size_t len;
};

/* One POST /v1/traces (Connection: close), read to the end. auth 0: no
 * token; enc NULL: no Content-Encoding. */
static struct reply post(const struct tu_daemon *d, const char *verb,
                         const char *ctype, const char *enc, const void *body,
                         size_t len, int auth)
{
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "%s /v1/traces HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n"
                     "%s%s%s%s%s%s%s",
                     verb, d->port, len, ctype ? "Content-Type: " : "",
                     ctype ? ctype : "", ctype ? "\r\n" : "",
                     enc ? "Content-Encoding: " : "", enc ? enc : "",
                     enc ? "\r\n" : "", auth ? "Authorization: Bearer " : "");
    cr_assert(n > 0 && (size_t)n < sizeof(head));
    if (auth)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%s\r\n", d->token);
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    int fd = tu_connect_loopback(d->port, 0);
    cr_assert_eq(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, (const char *)body + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (got == cap)
            buf = realloc(buf, (cap *= 2) + 1);
        ssize_t r = read(fd, buf + got, cap - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    struct reply rp = {0};
    cr_assert(sscanf(buf, "HTTP/1.1 %d", &rp.status) == 1, "no reply: %s", buf);
    const char *ct = strcasestr(buf, "\r\nContent-Type: ");
    if (ct)
        sscanf(ct + 16, "%63[^\r]", rp.ctype);
    char *end = strstr(buf, "\r\n\r\n");
    cr_assert_not_null(end);
    rp.len = got - (size_t)(end + 4 - buf);
    rp.body = malloc(rp.len + 1);
    memcpy(rp.body, end + 4, rp.len);
    rp.body[rp.len] = 0;
    free(buf);
    return rp;
}

/* ---- requests ----------------------------------------------------------- */

#define TRACE "0af7651916cd43dd8448eb211c80319c"

/* OTLP/JSON of spans "id[:parent]" (a bare id: a root), service svc. */
static char *json_request(const char *svc, const char *const *spans, size_t n)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    fo_buf_printf(&b,
                  "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":"
                  "\"service.name\",\"value\":{\"stringValue\":\"%s\"}}]},"
                  "\"scopeSpans\":[{\"scope\":{\"name\":\"t\"},\"spans\":[",
                  svc);
    for (size_t i = 0; i < n; i++) {
        char id[64] = "", parent[64] = "";
        sscanf(spans[i], "%63[^:]:%63s", id, parent);
        fo_buf_printf(&b,
                      "%s{\"traceId\":\"" TRACE "\",\"spanId\":\"%s\","
                      "\"parentSpanId\":\"%s\",\"name\":\"s%zu\",\"kind\":1,"
                      "\"startTimeUnixNano\":\"1700000000000000001\","
                      "\"endTimeUnixNano\":\"1700000000000000002\","
                      "\"attributes\":[{\"key\":\"gen_ai.request.model\","
                      "\"value\":{\"stringValue\":\"m%zu\"}}]}",
                      i ? "," : "", id, parent, i, i);
    }
    fo_buf_puts(&b, "]}]}]}");
    size_t len;
    return fo_buf_detach(&b, &len);
}

/* A protobuf request: one resource (service.name svc), one scope, the
 * spans ids[i] (8 bytes each, from the hex) under parents[i] (NULL: a
 * root). A big intValue and a nested array attribute on each. */
static uint8_t *pb_request(const char *svc, const char *const *ids,
                           const char *const *parents, size_t n, size_t *len)
{
    static uint8_t tid[16], sid[64][8], pid[64][8];
    cr_assert(n <= 64);
    for (int i = 0; i < 16; i++)
        sscanf(TRACE + 2 * i, "%2hhx", &tid[i]);
    pb_any svc_v = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT;
    svc_v.value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    svc_v.string_value = (char *)svc;
    pb_kv svc_kv = OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE__INIT;
    svc_kv.key = (char *)"service.name";
    svc_kv.value = &svc_v;
    pb_kv *res_attrs[] = {&svc_kv};
    Opentelemetry__Proto__Resource__V1__Resource res =
        OPENTELEMETRY__PROTO__RESOURCE__V1__RESOURCE__INIT;
    res.n_attributes = 1;
    res.attributes = res_attrs;
    /* attributes: big = 2^62 + 1 (beyond a double), list = ["a", true] */
    pb_any big = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT;
    big.value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
    big.int_value = 4611686018427387905LL;
    pb_any a0 = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT,
           a1 = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT;
    a0.value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    a0.string_value = (char *)"a";
    a1.value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE;
    a1.bool_value = 1;
    pb_any *items[] = {&a0, &a1};
    Opentelemetry__Proto__Common__V1__ArrayValue arr =
        OPENTELEMETRY__PROTO__COMMON__V1__ARRAY_VALUE__INIT;
    arr.n_values = 2;
    arr.values = items;
    pb_any list = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT;
    list.value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_ARRAY_VALUE;
    list.array_value = &arr;
    pb_kv kv_big = OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE__INIT,
          kv_list = OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE__INIT;
    kv_big.key = (char *)"big";
    kv_big.value = &big;
    kv_list.key = (char *)"list";
    kv_list.value = &list;
    pb_kv *attrs[] = {&kv_big, &kv_list};
    pb_span spans[64], *sp[64];
    for (size_t i = 0; i < n; i++) {
        pb_span s = OPENTELEMETRY__PROTO__TRACE__V1__SPAN__INIT;
        for (int k = 0; k < 8; k++) {
            sscanf(ids[i] + 2 * k, "%2hhx", &sid[i][k]);
            if (parents[i])
                sscanf(parents[i] + 2 * k, "%2hhx", &pid[i][k]);
        }
        s.trace_id = (ProtobufCBinaryData){16, tid};
        s.span_id = (ProtobufCBinaryData){strlen(ids[i]) / 2, sid[i]};
        if (parents[i])
            s.parent_span_id = (ProtobufCBinaryData){8, pid[i]};
        s.name = (char *)"pb-span";
        s.kind =
            OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_CLIENT;
        s.start_time_unix_nano = 1700000000123456789ull;
        s.end_time_unix_nano = 1700000000223456789ull;
        s.n_attributes = 2;
        s.attributes = attrs;
        spans[i] = s;
        sp[i] = &spans[i];
    }
    Opentelemetry__Proto__Trace__V1__ScopeSpans ss =
        OPENTELEMETRY__PROTO__TRACE__V1__SCOPE_SPANS__INIT;
    ss.n_spans = n;
    ss.spans = sp;
    Opentelemetry__Proto__Trace__V1__ScopeSpans *sss[] = {&ss};
    Opentelemetry__Proto__Trace__V1__ResourceSpans rs =
        OPENTELEMETRY__PROTO__TRACE__V1__RESOURCE_SPANS__INIT;
    rs.resource = &res;
    rs.n_scope_spans = 1;
    rs.scope_spans = sss;
    Opentelemetry__Proto__Trace__V1__ResourceSpans *rss[] = {&rs};
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest req =
        OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_REQUEST__INIT;
    req.n_resource_spans = 1;
    req.resource_spans = rss;
    *len =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__get_packed_size(
            &req);
    uint8_t *out = malloc(*len);
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__pack(
        &req, out);
    return out;
}

static uint8_t *gzip_of(const void *data, size_t len, size_t *out_len)
{
    z_stream z = {0};
    cr_assert_eq(
        deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
        Z_OK);
    size_t cap = deflateBound(&z, (uLong)len);
    uint8_t *out = malloc(cap);
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

/* ---- the ledger --------------------------------------------------------- */

struct got {
    int64_t n;
    struct ledger_entry e[64];
    cJSON *body[64];
};

static void read_ledger(const char *dir, struct got *g)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_eq(ledger_count(l, &g->n, &err), FO_OK);
    cr_assert(g->n <= 64);
    for (int64_t i = 0; i < g->n; i++) {
        char *b = NULL;
        size_t len = 0;
        cr_assert_eq(ledger_get(l, i, &g->e[i], NULL, &err), FO_OK);
        cr_assert_eq(ledger_body(l, i, &b, &len, &err), FO_OK);
        g->body[i] = tu_json_parse(b);
        free(b);
    }
    ledger_close(l);
}

static void got_free(struct got *g)
{
    for (int64_t i = 0; i < g->n; i++)
        cJSON_Delete(g->body[i]);
}

static const char *bstr(const cJSON *b, const char *k)
{
    return tu_str(b, k);
}

/* ---- the tests ---------------------------------------------------------- */

static struct tu_daemon d;
static char *dir;

static void up(void)
{
    dir = tu_tmpdir();
    tu_daemon_start(&d, dir, NULL);
}

static void down(void)
{
    tu_daemon_signal_wait(&d, SIGTERM, 30000);
    tu_rmrf(dir);
}

Test(otlp, protobuf_spans_become_import_entries_linked_as_sent, .init = up,
     .fini = down)
{
    const char *ids[] = {"1111111111111111", "2222222222222222"};
    const char *parents[] = {NULL, "1111111111111111"};
    size_t len;
    uint8_t *body = pb_request("pb-svc", ids, parents, 2, &len);
    struct reply r =
        post(&d, "POST", "application/x-protobuf", NULL, body, len, 1);
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    cr_assert_str_eq(r.ctype, "application/x-protobuf");
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse *resp =
        opentelemetry__proto__collector__trace__v1__export_trace_service_response__unpack(
            NULL, r.len, (const uint8_t *)r.body);
    cr_assert_not_null(resp, "the answer is an ExportTraceServiceResponse");
    cr_assert_null(resp->partial_success, "nothing refused");
    opentelemetry__proto__collector__trace__v1__export_trace_service_response__free_unpacked(
        resp, NULL);
    struct got g;
    read_ledger(dir, &g);
    cr_assert_eq(g.n, 3, "an import entry and two spans");
    cr_assert_str_eq(g.e[0].kind, "import");
    cr_assert_str_eq(bstr(g.body[0], "format"), "otel");
    cr_assert_str_eq(g.e[1].actor, "pb-svc");
    cr_assert_eq(g.e[1].parent, 0);
    cr_assert_eq(g.e[2].parent, 1, "the child under its parent's entry");
    cr_assert_str_eq(g.e[1].kind, "span");
    cr_assert_str_eq(bstr(g.body[1], "id"), "1111111111111111");
    cr_assert_str_eq(bstr(g.body[2], "parent_id"), "1111111111111111");
    cr_assert_str_eq(bstr(g.body[1], "trace_id"), TRACE);
    cr_assert_str_eq(bstr(g.body[1], "start"), "1700000000123456789");
    cr_assert_eq(tu_num(g.body[1], "span_kind"), 3);
    const cJSON *attrs =
        cJSON_GetObjectItemCaseSensitive(g.body[1], "attributes");
    cr_assert_str_eq(tu_str(attrs, "big"), "4611686018427387905",
                     "an int64 beyond 2^53 kept exactly");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(attrs, "list");
    cr_assert_eq(cJSON_GetArraySize(list), 2);
    cr_assert(cJSON_IsTrue(cJSON_GetArrayItem(list, 1)));
    got_free(&g);
    free(r.body);
    free(body);
}

Test(otlp, json_and_gzip_are_taken_and_answered_in_json, .init = up,
     .fini = down)
{
    const char *spans[] = {"aaaaaaaaaaaaaaaa",
                           "bbbbbbbbbbbbbbbb:aaaaaaaaaaaaaaaa"};
    char *j = json_request("json-svc", spans, 2);
    struct reply r =
        post(&d, "POST", "application/json", NULL, j, strlen(j), 1);
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    cr_assert_str_eq(r.ctype, "application/json");
    cr_assert_str_eq(r.body, "{}");
    free(r.body);
    size_t zlen;
    uint8_t *z = gzip_of(j, strlen(j), &zlen);
    r = post(&d, "POST", "application/json; charset=utf-8", "gzip", z, zlen, 1);
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    cr_assert_str_eq(r.body, "{}");
    free(r.body);
    struct got g;
    read_ledger(dir, &g);
    cr_assert_eq(g.n, 6, "two imports of an import entry and two spans");
    cr_assert_str_eq(g.e[3].kind, "import");
    cr_assert_eq(g.e[5].parent, 4);
    cr_assert_str_eq(g.e[5].kind, "llm_call", "gen_ai.request.model lifted");
    cr_assert_str_eq(bstr(g.body[5], "model"), "m1");
    got_free(&g);
    free(z);
    free(j);
}

Test(otlp, refused_spans_are_a_partial_success_and_the_rest_is_kept, .init = up,
     .fini = down)
{
    /* a bad id, an all-zero id, a duplicate, its own parent: 4 refused */
    const char *spans[] = {"cccccccccccccccc",
                           "xyz",
                           "0000000000000000",
                           "cccccccccccccccc",
                           "dddddddddddddddd:ddddddddddddddd"
                           "d",
                           "eeeeeeeeeeeeeeee:cccccccccccccccc"};
    char *j = json_request("part-svc", spans, 6);
    struct reply r =
        post(&d, "POST", "application/json", NULL, j, strlen(j), 1);
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    cJSON *o = tu_json_parse(r.body);
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(o, "partialSuccess");
    cr_assert_str_eq(tu_str(ps, "rejectedSpans"), "4", "%s", r.body);
    cr_assert_not_null(strstr(tu_str(ps, "errorMessage"),
                              "resourceSpans[0].scopeSpans[0].spans[1]"),
                       "%s", r.body);
    cJSON_Delete(o);
    free(r.body);
    /* protobuf: an 8-byte id and a 4-byte one */
    const char *ids[] = {"3333333333333333", "44444444"};
    const char *parents[] = {NULL, NULL};
    size_t len;
    uint8_t *body = pb_request("part-pb", ids, parents, 2, &len);
    r = post(&d, "POST", "application/x-protobuf", NULL, body, len, 1);
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse *resp =
        opentelemetry__proto__collector__trace__v1__export_trace_service_response__unpack(
            NULL, r.len, (const uint8_t *)r.body);
    cr_assert_not_null(resp);
    cr_assert_not_null(resp->partial_success);
    cr_assert_eq(resp->partial_success->rejected_spans, 1);
    cr_assert_not_null(strstr(resp->partial_success->error_message, "spanId"));
    opentelemetry__proto__collector__trace__v1__export_trace_service_response__free_unpacked(
        resp, NULL);
    free(r.body);
    struct got g;
    read_ledger(dir, &g);
    cr_assert_eq(g.n, 5, "import + 2 spans, import + 1 span");
    cr_assert_str_eq(bstr(g.body[1], "id"), "cccccccccccccccc");
    cr_assert_str_eq(bstr(g.body[2], "id"), "eeeeeeeeeeeeeeee");
    cr_assert_eq(g.e[2].parent, 1);
    cr_assert_str_eq(bstr(g.body[4], "id"), "3333333333333333");
    got_free(&g);
    free(body);
    free(j);
}

Test(otlp, malformed_bodies_are_clear_errors_and_write_nothing, .init = up,
     .fini = down)
{
    static const struct {
        const char *ctype, *enc, *body;
        int status;
        const char *says;
    } cases[] = {
        {"application/json", NULL, "{\"resourceSpans\":", 400, "invalid JSON"},
        {"application/json", NULL, "[1,2]", 400, "not OTLP/JSON"},
        {"application/json", NULL, "{\"resourceSpans\":{}}", 400,
         "not an array"},
        {"application/x-protobuf", NULL, "\x0a\x05\x01", 400, "past the end"},
        {"application/x-protobuf", NULL, "\x0b\x00", 400, "wire type"},
        {"application/json", "gzip", "not gzip at all", 400, "gzip"},
        {"application/json", "br", "{}", 415, "Content-Encoding"},
        {"text/plain", NULL, "{}", 415, "Content-Type"},
        {NULL, NULL, "{}", 415, "Content-Type"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = strlen(cases[i].body);
        if (cases[i].body[0] == '\x0b')
            len = 2;
        struct reply r = post(&d, "POST", cases[i].ctype, cases[i].enc,
                              cases[i].body, len, 1);
        cr_assert_eq(r.status, cases[i].status, "case %zu: %d %s", i, r.status,
                     r.body);
        cr_assert_not_null(strstr(r.body, cases[i].says), "case %zu: %s", i,
                           r.body);
        free(r.body);
    }
    /* an empty request is a success with nothing to write */
    struct reply r = post(&d, "POST", "application/x-protobuf", NULL, "", 0, 1);
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    free(r.body);
    r = post(&d, "POST", "application/json", NULL, "{}", 2, 1);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body, "{}");
    free(r.body);
    struct got g;
    read_ledger(dir, &g);
    cr_assert_eq(g.n, 0, "nothing written");
}

Test(otlp, over_the_span_cap_or_the_inflated_cap_is_413, .init = up,
     .fini = down)
{
    /* OTLP_MAX_SPANS + 1 spans */
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    fo_buf_puts(&b, "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[");
    for (int i = 0; i <= OTLP_MAX_SPANS; i++)
        fo_buf_printf(&b, "%s{\"traceId\":\"" TRACE "\",\"spanId\":\"%016x\"}",
                      i ? "," : "", i + 1);
    fo_buf_puts(&b, "]}]}]}");
    size_t len;
    char *j = fo_buf_detach(&b, &len);
    size_t zlen;
    uint8_t *z = gzip_of(j, len, &zlen); /* under the server's body limit */
    struct reply r = post(&d, "POST", "application/json", "gzip", z, zlen, 1);
    cr_assert_eq(r.status, 413, "%d %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "spans in one request"), "%s", r.body);
    free(r.body);
    free(z);
    free(j);
    /* a gzip bomb: 17 MiB of spaces inflate over the cap */
    size_t big = OTLP_MAX_INFLATED + (1u << 20);
    char *spaces = malloc(big);
    memset(spaces, ' ', big);
    z = gzip_of(spaces, big, &zlen);
    r = post(&d, "POST", "application/json", "gzip", z, zlen, 1);
    cr_assert_eq(r.status, 413, "%d %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "inflates to over"), "%s", r.body);
    free(r.body);
    free(z);
    free(spaces);
    struct got g;
    read_ledger(dir, &g);
    cr_assert_eq(g.n, 0, "nothing written");
}

Test(otlp, needs_the_token_and_post, .init = up, .fini = down)
{
    const char *spans[] = {"aaaaaaaaaaaaaaaa"};
    char *j = json_request("svc", spans, 1);
    struct reply r =
        post(&d, "POST", "application/json", NULL, j, strlen(j), 0);
    cr_assert_eq(r.status, 401, "%d %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "unauthorized"));
    free(r.body);
    r = post(&d, "GET", NULL, NULL, "", 0, 1);
    cr_assert_eq(r.status, 405, "%d %s", r.status, r.body);
    free(r.body);
    struct got g;
    read_ledger(dir, &g);
    cr_assert_eq(g.n, 0, "nothing written");
    free(j);
}

/* ---- the decoding guards, without a daemon ------------------------------ */

/* Writes tag and the length of [*start, end) before *start (the buffer is
 * filled from its end). */
static void wrap(uint8_t **start, const uint8_t *end, uint8_t tag)
{
    size_t n = (size_t)(end - *start);
    uint8_t v[10];
    size_t k = 0;
    do {
        v[k++] = (uint8_t)((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
        n >>= 7;
    } while (n);
    for (size_t i = k; i-- > 0;)
        *--*start = v[i];
    *--*start = tag;
}

Test(otlp_decode, deep_nesting_is_refused_before_protobuf_c)
{
    /* Request{ResourceSpans{ScopeSpans{Span{KeyValue{AnyValue{ArrayValue{
     * AnyValue{...}}}}}}}}: 100000 levels of arrays, which protobuf-c's
     * recursion would go down one stack frame a level */
    enum { LEVELS = 100000 };
    size_t cap = 16 * (size_t)LEVELS + 256;
    uint8_t *buf = malloc(cap), *end = buf + cap, *p = end;
    for (int i = 0; i < LEVELS; i++) {
        wrap(&p, end, 0x0a); /* ArrayValue.values */
        wrap(&p, end, 0x2a); /* AnyValue.array_value */
        cr_assert(p - buf > 64);
    }
    wrap(&p, end, 0x12); /* KeyValue.value */
    wrap(&p, end, 0x4a); /* Span.attributes */
    wrap(&p, end, 0x12); /* ScopeSpans.spans */
    wrap(&p, end, 0x12); /* ResourceSpans.scope_spans */
    wrap(&p, end, 0x0a); /* ExportTraceServiceRequest.resource_spans */
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(otlp_pb_to_json(p, (size_t)(end - p), &out, &err),
                 FO_E_INVALID);
    cr_assert_not_null(strstr(err.msg, "nested over"), "%s", err.msg);
    free(buf);
    /* the same shape 10 levels deep decodes */
    buf = malloc(1024);
    end = buf + 1024;
    p = end;
    for (int i = 0; i < 10; i++) {
        wrap(&p, end, 0x0a);
        wrap(&p, end, 0x2a);
    }
    wrap(&p, end, 0x12);
    wrap(&p, end, 0x4a);
    wrap(&p, end, 0x12);
    wrap(&p, end, 0x12);
    wrap(&p, end, 0x0a);
    cr_assert_eq(otlp_pb_to_json(p, (size_t)(end - p), &out, &err), FO_OK, "%s",
                 err.msg);
    cJSON_Delete(out);
    free(buf);
}

Test(otlp_decode, a_flood_of_small_fields_is_refused_by_count)
{
    /* field 15 (unknown to the request) as a varint, two bytes each: past
     * OTLP_MAX_FIELDS, the request is refused before protobuf-c keeps a
     * record of each */
    size_t n = 2 * ((size_t)OTLP_MAX_FIELDS + 1);
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i += 2) {
        b[i] = 0x78;
        b[i + 1] = 0x01;
    }
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(otlp_pb_to_json(b, n, &out, &err), FO_E_TOO_LARGE);
    cr_assert_not_null(strstr(err.msg, "fields"), "%s", err.msg);
    /* one under the cap decodes (an empty request) */
    cr_assert_eq(otlp_pb_to_json(b, n - 2, &out, &err), FO_OK, "%s", err.msg);
    cJSON_Delete(out);
    free(b);
}

Test(otlp_decode, gunzip_refuses_trailing_data_and_caps_its_output)
{
    size_t zlen;
    uint8_t *z = gzip_of("hello", 5, &zlen);
    uint8_t *out = NULL;
    size_t olen = 0;
    struct fo_err err;
    cr_assert_eq(otlp_gunzip(z, zlen, 100, &out, &olen, &err), FO_OK);
    cr_assert_eq(olen, 5);
    cr_assert_eq(memcmp(out, "hello", 5), 0);
    free(out);
    cr_assert_eq(otlp_gunzip(z, zlen, 4, &out, &olen, &err),
                 FO_E_INPUT_TOO_LARGE);
    uint8_t *z2 = malloc(zlen + 3);
    memcpy(z2, z, zlen);
    memcpy(z2 + zlen, "xyz", 3);
    cr_assert_eq(otlp_gunzip(z2, zlen + 3, 100, &out, &olen, &err),
                 FO_E_INVALID);
    cr_assert_eq(otlp_gunzip(z, zlen - 4, 100, &out, &olen, &err), FO_E_INVALID,
                 "truncated");
    free(z2);
    free(z);
}
