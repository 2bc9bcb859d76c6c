/* surf: the one handler table. Every method forum offers is one row:
 * its name, title, description, input and output JSON Schemas, HTTP route,
 * where it runs, flags, input cap, MCP annotations and aliases are data
 * (surfaces/methods/<name>.json, embedded at build time and checked once
 * at start: surfaces/table.c); only name -> handler is code
 * (surfaces/methods.c). The HTTP server, the MCP server, GET /methods, the
 * CLI's --json output and docs/HTTP.md + docs/MCP.md all come from this
 * table, so they cannot drift. Handlers take parsed JSON and give JSON;
 * they never see the wire. */
#ifndef SURF_H
#define SURF_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"
#include "ledger/fo_buf.h"
#include "ledger/ledger.h"

struct orch_run_event; /* daemon/orch.h: a step of a run as it lands */
struct surf_method;

struct orch;        /* the orchestrator (daemon/orch.h); NULL where not built */
struct orch_engine; /* the run engine (daemon/orch_engine.h) */

/* What a handler may use. Owned by the caller (the daemon, `forum mcp` or
 * the CLI); a handler runs on one thread with its own ctx. */
/* A verify in progress in this process, shared by every ctx of a host
 * (workers write it, `status` reads it on any thread). */
struct surf_verify_progress {
    _Atomic int running; /* verifies running now */
    _Atomic int deep;    /* the latest started was deep */
    _Atomic int64_t done, total;
    _Atomic int64_t reports; /* progress reports so far (tests) */
};

struct surf_ctx {
    struct ledger *ledger;
    /* When set, appends go through this hook (the daemon's group commit);
     * else straight to ledger_append_batch. Returns like
     * ledger_append_batch for a batch of one. */
    int (*append)(void *hook, struct ledger_append *req, struct fo_err *err);
    void *append_hook;
    /* A batch appended in one transaction through the same hook (the
     * daemon's group commit); NULL: ledger_append_batch on ctx->ledger.
     * Returns like ledger_append_batch. */
    int (*append_batch)(void *hook, struct ledger_append *reqs, size_t n,
                        struct fo_err *err);
    int64_t start_us; /* when the server started (uptime) */
    /* The host's own health (may be NULL): FO_OK, or why it can no
     * longer write (the daemon: the ledger's files went from under it).
     * `health` answers with it, and surf_call and surf_start refuse
     * SURF_WRITE methods with it before they run. When NULL, `health`
     * checks ctx->ledger's files (ledger_storage_check), and a write
     * fails in the ledger itself. Called on the thread of the ctx. */
    int (*health)(void *hook, struct fo_err *err);
    void *health_hook;
    /* Extra status fields the hosting surface adds (may be NULL). */
    void (*status_extra)(void *hook, cJSON *status);
    void *status_hook;
    struct orch *orch; /* roster, policy, executors (may be NULL) */
    /* The run engine on this host's loop thread (SURF_ON_RUN methods are
     * started on it with surf_start); NULL where there is none. */
    struct orch_engine *engine;
    /* Where this ctx has no engine of its own (a command's, a test's): the
     * engine's host in this process (daemon_embed_call). surf_call hands
     * it SURF_ON_RUN and SURF_ON_LOOP methods and parks until the answer;
     * NULL: run methods are refused, loop methods run on the caller. */
    int (*host_call)(void *hook, const struct surf_method *m, const cJSON *in,
                     cJSON **out, struct fo_err *err);
    void *host_hook;
    void *run_hook; /* run_event's */
    /* Each step of a run started with surf_start, as the engine witnesses
     * it (may be NULL): MCP progress and elicitation (orch_run_event,
     * orch.h). */
    void (*run_event)(void *hook, const struct orch_run_event *ev);
    /* Where ledger_verify reports its progress (may be NULL): `status`
     * shows it as "verify" while one runs (the dashboard's progress). */
    struct surf_verify_progress *verify;
};

typedef int (*surf_handler_fn)(struct surf_ctx *ctx, const cJSON *in,
                               cJSON **out, struct fo_err *err);

enum {
    SURF_READ = 1,
    SURF_WRITE = 2,
    SURF_ADMIN = 4, /* needs the token even under --no-auth; MCP --admin */
    /* May take as long as a run (submit, plan, plan_run): `forum mcp`
     * sends it at once, so other requests are answered meanwhile (and
     * its reply may come after theirs). Every other call is answered in
     * the order it came. */
    SURF_LONG = 8,
};

/* Where a method runs: a column of the table that every host honours. */
enum surf_where {
    /* A thread that may block (a worker of the HTTP surface, the calling
     * thread of the CLI): reads that scan, verify, redact. */
    SURF_ON_WORKER = 0,
    /* The event loop: bounded cost, never waits on a lock or an fsync. */
    SURF_ON_LOOP = 1,
    /* The group committer: the reply waits for the append's commit. */
    SURF_ON_COMMIT = 2,
    /* The run engine: the request is parked, holding no thread, and
     * answered when the run ends (or, for run_start, once it began). Its
     * one entry is the engine's (start): a ctx without an engine reaches
     * one through host_call. */
    SURF_ON_RUN = 3,
};

/* The reply of a method started on the run engine, on the loop thread:
 * rc FO_OK and out (the callee frees it), or rc and err. */
typedef void (*surf_reply_fn)(void *arg, int rc, cJSON *out,
                              const struct fo_err *err);
typedef int (*surf_start_fn)(struct surf_ctx *ctx, const cJSON *in,
                             surf_reply_fn reply, void *arg,
                             struct fo_err *err);

/* One row of the table: the data of surfaces/methods/<name>.json joined to
 * the handler of that name. Everything it points to is owned by the table
 * and lives as long as the process. */
struct surf_method {
    const char *name;           /* [a-z_]: the MCP tool name */
    const char *title;          /* for people and models */
    const char *summary;        /* the description: what it does and returns */
    unsigned flags;             /* SURF_READ or SURF_WRITE, SURF_ADMIN, ... */
    size_t max_input;           /* bytes of input JSON accepted */
    const char *http_method;    /* "GET" or "POST" */
    const char *http_path;      /* "/ledger/{seq}": {x} binds input field x */
    surf_handler_fn handler;    /* every method but SURF_ON_RUN's */
    int where;                  /* enum surf_where */
    surf_start_fn start;        /* SURF_ON_RUN: the engine's way in */
    const cJSON *input_schema;  /* "type": "object" (surf_schema) */
    const cJSON *output_schema; /* NULL: no declared result shape */
    const cJSON *annotations;   /* MCP's hints: the four booleans */
};

/* The table, and the number of rows, in the order of the handler table
 * (the order of tools/list, GET /methods and the docs). The first call
 * loads it; a table that does not load is a bug of the build: the process
 * prints why (the file and the field) and aborts. Hosts call
 * surf_table_check first to fail with that error instead. */
const struct surf_method *surf_methods(size_t *n);

/* Loads and checks the table once (later calls give the same answer): FO_OK,
 * or FO_E_INTERNAL with err naming the method file and what is wrong in
 * it. Thread-safe. */
int surf_table_check(struct fo_err *err);

/* Another name a method answers to over MCP: the Python reference's tool
 * names (forum.submit, verify, ...), so an editor configured for it keeps
 * working. tools/list shows each alias once, beside the method's own name
 * (the "aliases" of each method's file; docs/COMPATIBILITY.md). */
struct surf_alias {
    const char *name;   /* as the reference spells it */
    const char *method; /* the table's row it answers as */
};
const struct surf_alias *surf_aliases(size_t *n);

/* A method by name, or by one of its aliases, or NULL. */
const struct surf_method *surf_find(const char *name);

/* The JSON Schema of a method's result, where it is structured and stable
 * (MCP's outputSchema: the shape of structuredContent), or NULL when none
 * is declared: m->output_schema. */
const cJSON *surf_output_schema(const struct surf_method *m);

/* The input schema of a method: m->input_schema. */
const cJSON *surf_schema(const struct surf_method *m);

/* Validates in against the method's schema (types, required fields,
 * ranges, no unknown fields), then calls the handler. in may be NULL for
 * an empty object. On success *out is a new object the caller frees. On
 * failure err says what was wrong (FO_E_INVALID names the field). */
int surf_call(struct surf_ctx *ctx, const struct surf_method *m,
              const cJSON *in, cJSON **out, struct fo_err *err);

/* A SURF_ON_RUN method on ctx->engine, on the loop thread: validates in as
 * surf_call does, then starts it; reply(arg, ...) runs later, once (never
 * from inside this call). An error returned here means nothing started
 * and reply will not run. */
int surf_start(struct surf_ctx *ctx, const struct surf_method *m,
               const cJSON *in, surf_reply_fn reply, void *arg,
               struct fo_err *err);

/* Validates in (an object) against the method's schema without calling the
 * handler: what surf_call does first. */
int surf_validate(const struct surf_method *m, const cJSON *in,
                  struct fo_err *err);

/* ledger_append in two halves, so a surface that commits asynchronously
 * (the daemon's group commit) runs the same code as the handler:
 * surf_append_prepare turns a validated input into a request whose body
 * (canonical JSON) lives in *body (the caller releases it after the
 * commit); surf_append_result turns the committed request into the result
 * object or the request's error. */
int surf_append_prepare(struct surf_ctx *ctx, const cJSON *in,
                        struct ledger_append *req, struct fo_buf *body,
                        struct fo_err *err);
int surf_append_result(struct ledger_append *req, cJSON **out,
                       struct fo_err *err);

/* The most entries one ledger_append_batch call (POST /append/batch)
 * takes: one transaction of the daemon's group commit. */
#define SURF_APPEND_BATCH_MAX 4096

/* Checks one entry of a batch ({actor, kind, payload, parent?}, nothing
 * else) as ledger_append would, and that its parent is below base (the
 * ledger's size before the batch); turns it into req with its canonical
 * body in *body (released by the caller). FO_E_INVALID / FO_E_TOO_LARGE
 * naming the field. */
int surf_batch_entry(struct ledger *l, const cJSON *entry, int64_t base,
                     struct ledger_append *req, struct fo_buf *body,
                     struct fo_err *err);

/* Converts a string (an HTTP query parameter or path segment) to the JSON
 * type the schema gives field `name`, for GET routes. NULL when it does not
 * convert (the validator then names the field). Integers convert only from
 * their canonical spelling ([0-9]+ without leading zeros; '-' only when the
 * schema has no minimum >= 0) up to 2^53 - 1 in magnitude, the range a JSON
 * number holds exactly; with SURF_PARAM_DECODED (text was percent-decoded
 * into something other than it was sent as) never. */
#define SURF_PARAM_DECODED 1u
cJSON *surf_param_value(const struct surf_method *m, const char *name,
                        const char *text, unsigned flags);

/* The error object {"error": msg, "code": name}. */
cJSON *surf_error_json(const struct fo_err *err);

/* The HTTP status a code is answered with (400, 404, 410, 413, 500, 503,
 * ...): the surfaces' business, not the ledger's. Unknown codes: 500. */
int surf_code_http(int code);

/* The method list served by GET /methods and used for docs and tools/list:
 * {"methods": [{"name", "summary", "flags", "http", "input_schema"}]}. */
cJSON *surf_methods_json(int include_admin);

#endif
