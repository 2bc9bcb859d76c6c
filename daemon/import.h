/* import: external traces made ledger entries, and a run made an
 * OpenTelemetry trace (docs/IMPORT.md).
 *
 * An import reads one file of OTLP/JSON spans, LangSmith runs or generic
 * JSONL events, checks it whole (ids unique, parent links without cycles),
 * orders it so every parent comes before its children, and appends it in
 * ONE batch: first an `import` entry (the file's SHA-256, format, counts),
 * then one entry per span, run or event, its parent the entry of its
 * parent record (a root, or a record whose parent is not in the file, has
 * the import entry as parent). Any error: nothing is written. */
#ifndef DAEMON_IMPORT_H
#define DAEMON_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"

/* The largest source accepted, in bytes (the CLI's file, the method's
 * data). */
#define IMPORT_MAX_BYTES (64u << 20)
/* The most records (spans, runs, events) one import takes: with its import
 * entry, one transaction of the daemon's group commit. */
#define IMPORT_MAX_RECORDS 4095

/* The formats, by name: "otel", "langsmith", "jsonl". */
int import_format_known(const char *format);

/* Appends a batch in one transaction: ledger_append_batch, or a host's
 * hook (the daemon's group commit). */
typedef int (*import_batch_fn)(void *hook, struct ledger_append *reqs, size_t n,
                               struct fo_err *err);

struct import_source {
    const char *format; /* "otel", "langsmith" or "jsonl" */
    const char *data;   /* the file's bytes (UTF-8 JSON text) */
    size_t len;
    const char *name; /* the file's name, kept in the import entry; NULL */
};

/* Imports src into l through batch (NULL: ledger_append_batch on l, hook
 * ignored). On FO_OK *out is the result object (docs/IMPORT.md): {import_seq,
 * format, name (when given), sha256, bytes, records, roots, first_seq,
 * last_seq, by_kind, dangling: [{id, parent_id, seq}], entries: [{id, seq,
 * parent, kind}]}. Errors, nothing written: FO_E_TOO_LARGE (over
 * IMPORT_MAX_BYTES or IMPORT_MAX_RECORDS, or a record's body over the ledger's
 * body limit), FO_E_JSON (malformed: the byte offset, or for JSONL the line),
 * FO_E_INVALID (the wrong format, a record without an id, a duplicate id, a
 * cycle: each names the record's position), or the batch's storage error. */
int import_run(struct ledger *l, import_batch_fn batch, void *hook,
               const struct import_source *src, cJSON **out,
               struct fo_err *err);

/* The run whose request entry is seq run (its descendants) as an OTLP/JSON
 * trace: {resourceSpans: [...]}, one span per entry. traceId: the first 16
 * bytes of SHA-256("forum-otel-trace:" ledger id ":" run); spanId: the
 * first 8 bytes of the entry's hash; parentSpanId: its parent entry's.
 * FO_E_NOT_A_RUN when seq run is not a request without a parent,
 * FO_E_NOT_FOUND when there is no such entry. */
int export_otel_run(struct ledger *l, int64_t run, cJSON **out,
                    struct fo_err *err);

/* The gateway session name (daemon/orch_gw.c) as an OTLP/JSON trace: one
 * span per gateway_call, named gateway_call, from the call's start (its
 * entry's time less its latency) to its entry, with the gen_ai attributes
 * (gen_ai.operation.name "chat", gen_ai.request.model,
 * gen_ai.provider.name, gen_ai.usage.input_tokens and output_tokens,
 * error.type) and forum's (forum.seq, forum.hash, forum.body, ...).
 * traceId: the first 16 bytes of SHA-256("forum-otel-trace:" ledger id
 * ":session:" name). FO_E_NOT_FOUND when no call names the session. */
int export_otel_session(struct ledger *l, const char *name, cJSON **out,
                        struct fo_err *err);

#endif
