/* otlp: POST /v1/traces, the OTLP/HTTP trace receiver (surfaces/otlp.h):
 * the request taken on the loop, decoded, checked and imported on the
 * receiver's thread, answered back on the loop. */
#include "surfaces/otlp.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <zlib.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

/* ---- gzip ---------------------------------------------------------------- */

int otlp_gunzip(const void *in, size_t len, size_t max, uint8_t **out,
                size_t *out_len, struct fo_err *err)
{
    z_stream z = {0};
    if (len > UINT32_MAX)
        return fo_err_set(err, FO_E_INPUT_TOO_LARGE, "gzip: body too large");
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    size_t cap = len * 4 < 65536 ? 65536 : len * 4;
    if (cap > max + 1)
        cap = max + 1;
    uint8_t *b = malloc(cap);
    int rc = b ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    size_t have = 0;
    int zr = Z_OK;
    while (rc == FO_OK && zr != Z_STREAM_END) {
        if (have == cap) {
            if (cap > max) {
                rc = fo_err_set(err, FO_E_INPUT_TOO_LARGE,
                                "the body inflates to over %zu bytes", max);
                break;
            }
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            uint8_t *nb = realloc(b, ncap);
            if (!nb) {
                rc = fo_err_set(err, FO_E_NOMEM, NULL);
                break;
            }
            b = nb;
            cap = ncap;
        }
        z.next_out = b + have;
        z.avail_out = (uInt)(cap - have);
        zr = inflate(&z, Z_NO_FLUSH);
        have = cap - z.avail_out;
        if (zr == Z_BUF_ERROR && z.avail_in == 0)
            rc = fo_err_set(err, FO_E_INVALID,
                            "gzip: the body ends inside the stream");
        else if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
            rc = fo_err_set(err, FO_E_INVALID, "gzip: %s",
                            z.msg ? z.msg : "not gzip data");
    }
    if (rc == FO_OK && have > max)
        rc = fo_err_set(err, FO_E_INPUT_TOO_LARGE,
                        "the body inflates to over %zu bytes", max);
    if (rc == FO_OK && z.avail_in != 0)
        rc = fo_err_set(err, FO_E_INVALID,
                        "gzip: %u bytes after the stream's end", z.avail_in);
    inflateEnd(&z);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b;
    *out_len = have;
    return FO_OK;
}

/* ---- the spans, checked ------------------------------------------------- */

/* s is n hex digits, not all zero: lowered in place. */
static int hex_id(char *s, size_t n)
{
    if (!s || strlen(s) != n)
        return 0;
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isxdigit((unsigned char)s[i]))
            return 0;
        s[i] = (char)tolower((unsigned char)s[i]);
        nonzero |= s[i] != '0';
    }
    return nonzero;
}

static char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The span ids seen, an open-addressed set (16 hex digits as 64 bits). */
struct seen {
    uint64_t v[2 * OTLP_MAX_SPANS + 2];
    unsigned char used[2 * OTLP_MAX_SPANS + 2];
};

static int seen_add(struct seen *s, const char *hex)
{
    uint64_t k = strtoull(hex, NULL, 16);
    size_t n = sizeof(s->v) / sizeof(s->v[0]);
    size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 40) % n;
    for (; s->used[i]; i = (i + 1) % n)
        if (s->v[i] == k)
            return 0;
    s->used[i] = 1;
    s->v[i] = k;
    return 1;
}

/* Why span sp is refused (NULL: accepted). */
static const char *refusal(cJSON *sp, struct seen *seen)
{
    if (!cJSON_IsObject(sp))
        return "not a span object";
    char *id = str_of(sp, "spanId"), *tid = str_of(sp, "traceId");
    char *pid = str_of(sp, "parentSpanId");
    if (!hex_id(id, 16))
        return "spanId is not 16 hex digits (not all zero)";
    if (!hex_id(tid, 32))
        return "traceId is not 32 hex digits (not all zero)";
    if (cJSON_GetObjectItemCaseSensitive(sp, "parentSpanId") &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(sp, "parentSpanId")) &&
        !(pid && (!*pid || hex_id(pid, 16))))
        return "parentSpanId is neither empty nor 16 hex digits";
    if (pid && !strcmp(pid, id))
        return "parentSpanId is the span's own spanId";
    if (!seen_add(seen, id))
        return "a spanId that came earlier in the request";
    return NULL;
}

/* Refuses (removes) the spans of one scopeSpans entry that fail. */
static int check_spans(cJSON *spans, size_t i, size_t j, struct seen *seen,
                       struct otlp_batch *b, struct fo_err *err)
{
    size_t k = 0;
    cJSON *sp = spans ? spans->child : NULL;
    while (sp) {
        cJSON *next = sp->next;
        if (b->accepted + b->rejected >= OTLP_MAX_SPANS)
            return fo_err_set(err, FO_E_TOO_LARGE,
                              "over %d spans in one request; export smaller "
                              "batches",
                              OTLP_MAX_SPANS);
        const char *why = refusal(sp, seen);
        if (why) {
            if (!b->rejected++)
                snprintf(b->why, sizeof(b->why),
                         "resourceSpans[%zu].scopeSpans[%zu].spans[%zu]: %s", i,
                         j, k, why);
            cJSON_Delete(cJSON_DetachItemViaPointer(spans, sp));
        } else {
            b->accepted++;
        }
        sp = next;
        k++;
    }
    return FO_OK;
}

/* Walks resourceSpans[].scopeSpans[].spans[] (or the names of before 1.0),
 * refusing spans in place. */
static int check_doc(cJSON *doc, struct seen *seen, struct otlp_batch *b,
                     struct fo_err *err)
{
    if (!cJSON_IsObject(doc))
        return fo_err_set(err, FO_E_INVALID,
                          "not OTLP/JSON: the body is not a JSON object");
    cJSON *rss = cJSON_GetObjectItemCaseSensitive(doc, "resourceSpans");
    if (rss && !cJSON_IsArray(rss))
        return fo_err_set(err, FO_E_INVALID,
                          "not OTLP/JSON: \"resourceSpans\" is not an array");
    size_t i = 0;
    cJSON *rs;
    cJSON_ArrayForEach (rs, rss) {
        cJSON *sss = cJSON_GetObjectItemCaseSensitive(rs, "scopeSpans");
        if (!sss)
            sss = cJSON_GetObjectItemCaseSensitive(
                rs, "instrumentationLibrarySpans");
        if (!cJSON_IsObject(rs) || (sss && !cJSON_IsArray(sss)))
            return fo_err_set(err, FO_E_INVALID,
                              "resourceSpans[%zu]: not a ResourceSpans "
                              "object with a scopeSpans array",
                              i);
        size_t j = 0;
        cJSON *ss;
        cJSON_ArrayForEach (ss, sss) {
            cJSON *spans = cJSON_GetObjectItemCaseSensitive(ss, "spans");
            if (!cJSON_IsObject(ss) || (spans && !cJSON_IsArray(spans)))
                return fo_err_set(err, FO_E_INVALID,
                                  "resourceSpans[%zu].scopeSpans[%zu]: not a "
                                  "ScopeSpans object with a spans array",
                                  i, j);
            int rc = check_spans(spans, i, j, seen, b, err);
            if (rc)
                return rc;
            j++;
        }
        i++;
    }
    return FO_OK;
}

int otlp_batch_make(int proto, const void *body, size_t len,
                    struct otlp_batch *b, struct fo_err *err)
{
    memset(b, 0, sizeof(*b));
    cJSON *doc = NULL;
    int rc = proto ? otlp_pb_to_json(body, len, &doc, err)
                   : fo_json_parse(body, len, &doc, err);
    if (rc)
        return rc;
    struct seen *seen = calloc(1, sizeof(*seen));
    rc =
        seen ? check_doc(doc, seen, b, err) : fo_err_set(err, FO_E_NOMEM, NULL);
    free(seen);
    if (rc == FO_OK && b->accepted) {
        struct fo_buf t;
        fo_buf_init(&t, FO_BUF_UNLIMITED);
        rc = fo_json_canon(doc, &t, err);
        if (rc == FO_OK)
            b->json = fo_buf_detach(&t, &b->len);
        fo_buf_release(&t);
    }
    cJSON_Delete(doc);
    if (rc)
        otlp_batch_release(b);
    return rc;
}

void otlp_batch_release(struct otlp_batch *b)
{
    free(b->json);
    b->json = NULL;
    b->len = 0;
}

/* ---- the receiver ------------------------------------------------------- */

struct job {
    struct surf_otlp *o;
    struct surf_http *h;
    struct evhttp_request *req;
    int64_t t0;
    int proto, gzip;
    uint8_t *body;
    size_t len;
    struct event *back; /* the answer, on the loop */
    int gone;           /* the client hung up */
    int req_lost;       /* ... and its connection freed the request */
    /* the answer: rc FO_OK and out, or rc and err */
    int rc;
    struct fo_err err;
    char *out;
    size_t out_len;
    struct job *next;
};

struct surf_otlp {
    struct surf_otlp_config cfg;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, *tail;
    size_t queued; /* waiting or being worked on */
    int stop;
};

static void job_free(struct job *j)
{
    if (!j)
        return;
    if (j->back)
        event_free(j->back);
    free(j->body);
    free(j->out);
    free(j);
}

/* The JSON answer: {} or {"partialSuccess": {...}} (int64 as a string, as
 * the protobuf JSON mapping writes it). */
static int json_response(long long rejected, const char *why, char **out,
                         size_t *len)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ps =
        o && rejected > 0 ? cJSON_AddObjectToObject(o, "partialSuccess") : NULL;
    char n[24];
    snprintf(n, sizeof(n), "%lld", rejected);
    int ok = o && (rejected <= 0 ||
                   (ps && cJSON_AddStringToObject(ps, "rejectedSpans", n) &&
                    cJSON_AddStringToObject(ps, "errorMessage", why)));
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    struct fo_err err;
    ok = ok && fo_json_canon(o, &b, &err) == FO_OK;
    cJSON_Delete(o);
    if (!ok) {
        fo_buf_release(&b);
        return FO_E_NOMEM;
    }
    *out = fo_buf_detach(&b, len);
    fo_buf_release(&b);
    return *out ? FO_OK : FO_E_NOMEM;
}

/* The receiver's thread: one request, start to end (may block on the
 * commit). */
static void work(struct surf_otlp *o, struct job *j)
{
    uint8_t *plain = NULL;
    size_t plen = 0;
    struct otlp_batch b = {0};
    int rc = FO_OK;
    if (j->gzip)
        rc = otlp_gunzip(j->body, j->len, OTLP_MAX_INFLATED, &plain, &plen,
                         &j->err);
    const uint8_t *body = j->gzip ? plain : j->body;
    size_t len = j->gzip ? plen : j->len;
    if (rc == FO_OK && len > OTLP_MAX_INFLATED)
        rc = fo_err_set(&j->err, FO_E_INPUT_TOO_LARGE,
                        "the body is over %u bytes", OTLP_MAX_INFLATED);
    if (rc == FO_OK)
        rc = otlp_batch_make(j->proto, body ? (const void *)body : "", len, &b,
                             &j->err);
    if (rc == FO_OK && b.accepted) {
        struct import_source src = {.format = "otel",
                                    .data = b.json,
                                    .len = b.len,
                                    .name = j->proto
                                                ? "POST /v1/traces (protobuf)"
                                                : "POST /v1/traces (json)"};
        cJSON *res = NULL;
        rc = import_run(o->cfg.ledger, o->cfg.batch, o->cfg.batch_hook, &src,
                        &res, &j->err);
        cJSON_Delete(res);
    }
    if (rc == FO_OK) {
        uint8_t *pb = NULL;
        rc = j->proto ? otlp_pb_response((long long)b.rejected, b.why, &pb,
                                         &j->out_len)
                      : json_response((long long)b.rejected, b.why, &j->out,
                                      &j->out_len);
        if (j->proto && rc == FO_OK)
            j->out = (char *)pb;
        if (rc)
            fo_err_set(&j->err, rc, NULL);
    }
    j->rc = rc;
    otlp_batch_release(&b);
    free(plain);
}

static void *worker(void *arg)
{
    struct surf_otlp *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->head && !o->stop)
            pthread_cond_wait(&o->cv, &o->mu);
        if (!o->head)
            break;
        struct job *j = o->head;
        o->head = j->next;
        if (!o->head)
            o->tail = NULL;
        pthread_mutex_unlock(&o->mu);
        work(o, j);
        event_active(j->back, 0, 1);
        pthread_mutex_lock(&o->mu);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* Loop thread: the answer of a job the worker finished. */
static void answer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct job *j = arg;
    struct surf_otlp *o = j->o;
    pthread_mutex_lock(&o->mu);
    o->queued--;
    pthread_mutex_unlock(&o->mu);
    if (!j->gone)
        surf_http_on_gone(j->h, j->req, NULL, NULL);
    if (j->gone) {
        /* nobody to answer; the spans were still imported */
        surf_http_stream_end(j->h, j->req_lost ? NULL : j->req);
    } else if (j->rc != FO_OK) {
        surf_http_reply_error(j->h, j->req, j->rc, j->err.msg, j->t0);
    } else {
        surf_http_reply(j->h, j->req, 200,
                        j->proto ? "application/x-protobuf"
                                 : "application/json",
                        j->out, j->out_len, j->t0);
        j->out = NULL; /* taken */
    }
    job_free(j);
}

static void client_gone(void *arg)
{
    struct job *j = arg;
    j->gone = 1;
    j->req_lost = evhttp_request_get_connection(j->req) != NULL;
}

/* The media type of a Content-Type value (before any ';'), compared
 * without case. */
static int media_is(const char *v, const char *want)
{
    size_t n = strlen(want);
    while (v && (*v == ' ' || *v == '\t'))
        v++;
    if (!v || strncasecmp(v, want, n) != 0)
        return 0;
    v += n;
    while (*v == ' ' || *v == '\t')
        v++;
    return *v == 0 || *v == ';';
}

/* Content-Type and Content-Encoding: FO_OK with *proto and *gzip, or
 * FO_E_MEDIA_TYPE. */
static int read_headers(struct evhttp_request *req, int *proto, int *gzip,
                        struct fo_err *err)
{
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    const char *ct = evhttp_find_header(ih, "Content-Type");
    const char *ce = evhttp_find_header(ih, "Content-Encoding");
    if (media_is(ct, "application/x-protobuf"))
        *proto = 1;
    else if (media_is(ct, "application/json"))
        *proto = 0;
    else
        return fo_err_set(err, FO_E_MEDIA_TYPE,
                          "/v1/traces takes Content-Type "
                          "application/x-protobuf or application/json");
    if (!ce || media_is(ce, "identity"))
        *gzip = 0;
    else if (media_is(ce, "gzip"))
        *gzip = 1;
    else
        return fo_err_set(err, FO_E_MEDIA_TYPE,
                          "/v1/traces takes Content-Encoding gzip or none");
    return FO_OK;
}

/* Queues the request for the receiver's thread. */
static int submit(struct surf_otlp *o, struct surf_http *h,
                  struct evhttp_request *req, int proto, int gzip, int64_t t0,
                  struct fo_err *err)
{
    struct evbuffer *ib = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(ib);
    struct job *j = calloc(1, sizeof(*j));
    if (j)
        *j = (struct job){.o = o,
                          .h = h,
                          .req = req,
                          .t0 = t0,
                          .proto = proto,
                          .gzip = gzip,
                          .len = len};
    if (!j || !(j->body = malloc(len ? len : 1)) ||
        evbuffer_remove(ib, j->body, len) != (int)len ||
        !(j->back = event_new(o->cfg.base, -1, 0, answer, j))) {
        job_free(j);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    pthread_mutex_lock(&o->mu);
    int full = o->queued >= OTLP_MAX_QUEUED;
    if (!full) {
        o->queued++;
        if (o->tail)
            o->tail->next = j;
        else
            o->head = j;
        o->tail = j;
        pthread_cond_signal(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    if (full) {
        job_free(j);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After",
                          "1");
        return fo_err_set(err, FO_E_BUSY,
                          "the trace receiver has %d requests queued; retry",
                          OTLP_MAX_QUEUED);
    }
    surf_http_on_gone(h, req, client_gone, j);
    return FO_OK;
}

int surf_otlp_route(void *hook, struct surf_http *h, struct evhttp_request *req,
                    const char *path, const char *verb, int authed, int64_t t0)
{
    struct surf_otlp *o = hook;
    if (!o || strcmp(path, "/v1/traces") != 0)
        return 0;
    struct fo_err err;
    int proto = 0, gzip = 0;
    if (!authed) {
        surf_http_reply_error(h, req, FO_E_UNAUTHORIZED,
                              "missing or wrong bearer token (Authorization: "
                              "Bearer <DIR/token>)",
                              t0);
        return 1;
    }
    if (strcmp(verb, "POST") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "POST");
        surf_http_reply_error(h, req, FO_E_METHOD, "/v1/traces: use POST", t0);
        return 1;
    }
    if (read_headers(req, &proto, &gzip, &err) != FO_OK ||
        submit(o, h, req, proto, gzip, t0, &err) != FO_OK)
        surf_http_reply_error(h, req, err.code, err.msg, t0);
    return 1;
}

int surf_otlp_create(const struct surf_otlp_config *cfg, struct surf_otlp **out,
                     struct fo_err *err)
{
    struct surf_otlp *o = calloc(1, sizeof(*o));
    if (!o)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    o->cfg = *cfg;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (pthread_create(&o->th, NULL, worker, o) != 0) {
        surf_otlp_free(o);
        return fo_err_set(err, FO_E_IO,
                          "the trace receiver's thread could not start");
    }
    o->started = 1;
    *out = o;
    return FO_OK;
}

void surf_otlp_free(struct surf_otlp *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (o->started)
        pthread_join(o->th, NULL);
    /* after the drain nothing is queued; a job left would have no loop */
    while (o->head) {
        struct job *j = o->head;
        o->head = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o);
}
