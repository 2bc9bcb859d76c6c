/* otlp: the daemon's OTLP/HTTP trace receiver. POST /v1/traces takes an
 * ExportTraceServiceRequest as the OpenTelemetry exporters send it
 * (application/x-protobuf or application/json, Content-Encoding gzip or
 * none), authenticated with the daemon's token, and appends its spans as
 * `forum import otel` does (daemon/import.c: one batch, an import entry
 * and one entry per span) through the group committer, on a thread of its
 * own, never the loop. The answer is an ExportTraceServiceResponse in the
 * request's encoding, whose partial_success counts the spans refused (no
 * valid span id or trace id, a duplicate span id). docs/GATEWAY.md. */
#ifndef SURF_OTLP_H
#define SURF_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>
#include <event2/http.h>

#include "daemon/import.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"
#include "surfaces/http.h"

/* The most spans one request may carry (one import: one transaction). */
#define OTLP_MAX_SPANS IMPORT_MAX_RECORDS
/* A request's body once inflated (and a JSON body as sent), in bytes. */
#define OTLP_MAX_INFLATED (16u << 20)
/* Protobuf guards: messages nested, messages and fields in all. */
#define OTLP_MAX_DEPTH 64
#define OTLP_MAX_MESSAGES 262144
#define OTLP_MAX_FIELDS (4 * OTLP_MAX_MESSAGES)
/* Requests queued for the receiver's thread; past it: 503. */
#define OTLP_MAX_QUEUED 16

/* ---- the parts without I/O (also the fuzz target's) -------------------- */

/* A protobuf ExportTraceServiceRequest as its OTLP/JSON object (ids in
 * hex, 64-bit integers as decimal strings, enums as numbers). The wire is
 * first walked under the guards above. FO_E_INVALID (not the message,
 * nested too deep, a string not UTF-8), FO_E_TOO_LARGE (over the span,
 * message or field count), FO_E_NOMEM. *out is the caller's. */
int otlp_pb_to_json(const void *data, size_t len, cJSON **out,
                    struct fo_err *err);

/* The protobuf ExportTraceServiceResponse: partial_success set when
 * rejected > 0 or message is non-empty. *out malloc'd, the caller's.
 * FO_OK or FO_E_NOMEM. */
int otlp_pb_response(long long rejected, const char *message, uint8_t **out,
                     size_t *len);

/* Inflates a gzip body (one member) to at most max bytes. *out malloc'd,
 * the caller's. FO_E_INVALID (not gzip, damaged, data after it),
 * FO_E_INPUT_TOO_LARGE (over max), FO_E_NOMEM. */
int otlp_gunzip(const void *in, size_t len, size_t max, uint8_t **out,
                size_t *out_len, struct fo_err *err);

/* A request's spans, checked: the spans accepted as one OTLP/JSON text in
 * canonical form (what the importer reads; NULL when none), and the count
 * and first reason of those refused. */
struct otlp_batch {
    char *json;
    size_t len;
    size_t accepted, rejected;
    char why[200]; /* the first refusal, with the span's position */
};

/* Decodes body (protobuf when proto, else OTLP/JSON) and sorts its spans
 * into accepted and refused: a span is refused when it is not an object,
 * its spanId is not 16 hex digits (not all zero), its traceId not 32,
 * its parentSpanId neither empty nor 16, its parentSpanId is its own, or
 * its spanId came earlier in the request. FO_E_INVALID / FO_E_JSON
 * (malformed: the whole request refused), FO_E_TOO_LARGE (over
 * OTLP_MAX_SPANS), FO_E_NOMEM. Release b with otlp_batch_release. */
int otlp_batch_make(int proto, const void *body, size_t len,
                    struct otlp_batch *b, struct fo_err *err);
void otlp_batch_release(struct otlp_batch *b);

/* ---- the receiver ------------------------------------------------------- */

struct surf_otlp_config {
    struct event_base *base; /* the HTTP surface's loop */
    struct ledger *ledger;   /* its body limit only (ledger_max_body) */
    /* Appends one import's batch in one transaction and blocks the
     * receiver's thread until it committed (the daemon's
     * daemon_commit_append_batch_sync). */
    import_batch_fn batch;
    void *batch_hook;
};

struct surf_otlp;

/* Starts the receiver's thread. Copies cfg. FO_E_NOMEM, FO_E_IO. */
int surf_otlp_create(const struct surf_otlp_config *cfg, struct surf_otlp **out,
                     struct fo_err *err);
/* After the HTTP surface drained (no request in flight): stops and joins
 * the thread. NULL-safe. */
void surf_otlp_free(struct surf_otlp *o);

/* The extra route (surf_http_config.extra): 1 when path is /v1/traces
 * (answered now, or later on the loop thread), 0 otherwise. */
int surf_otlp_route(void *hook, struct surf_http *h, struct evhttp_request *req,
                    const char *path, const char *verb, int authed, int64_t t0);

#endif
