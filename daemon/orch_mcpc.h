/* orch_mcpc: forum as an MCP client of the servers forum.json names, so
 * their tools become tools a lane may allow ("server.tool").
 *
 * forum.json: "mcp_servers": {"NAME": {"command": "prog", "args": [...],
 * "env": {"K": "V"}?, "timeout_s"?: 60}}. Each server is a child process
 * speaking JSON-RPC 2.0 over stdio, one message a line (the MCP stdio
 * transport). It is started on first use (initialize, then
 * notifications/initialized, then tools/list), kept running, and started
 * again on the next use after it dies; its requests in flight then fail
 * with a clear error. A line that is not JSON, or an answer of the wrong
 * shape, is a protocol error: the server is stopped and the calls in
 * flight fail. An entry with "url" instead of "command" is a Streamable
 * HTTP server (daemon/orch_mcph.h): the same life, over POSTs, its session
 * begun again at the next use after it ended. Everything runs on one
 * event_base; nothing blocks. */
#ifndef ORCH_MCPC_H
#define ORCH_MCPC_H

#include <cJSON.h>

#include "ledger/fo_err.h"

#define ORCH_MCPC_SERVERS_MAX 32
#define ORCH_MCPC_LINE_MAX (4u * 1024u * 1024u)
#define ORCH_MCPC_TIMEOUT_S_DEFAULT 60

struct event_base;
struct orch_mcpc;
struct orch_mcpc_op;

/* Checks forum.json's "mcp_servers" object: names [a-z0-9_-]{1,32}, a
 * command string, args strings, env strings, timeout_s 1..3600; or a url
 * and its fields (orch_mcph_check).
 * FO_E_INVALID naming the server and field. */
int orch_mcpc_check(const cJSON *servers, struct fo_err *err);

/* A client set for servers (checked; copied) on base. NULL servers: none. */
int orch_mcpc_create(const cJSON *servers, struct event_base *base,
                     struct orch_mcpc **out, struct fo_err *err);

/* Cancels every operation (their callbacks are not called), kills the
 * servers and reaps them. NULL-safe. */
/* Ends the sessions of the Streamable HTTP servers (orch_mcph_end_session)
 * when nothing will call them any more (the engine stopping): 1 when
 * DELETEs went out, and done(arg) is called from the loop once each is
 * answered, or after ORCH_MCPC_CLOSE_MS at the most; 0 when there was no
 * session (done is not called). */
#define ORCH_MCPC_CLOSE_MS 2000
int orch_mcpc_close(struct orch_mcpc *m, void (*done)(void *arg), void *arg);

void orch_mcpc_free(struct orch_mcpc *m);

/* 1 when a server of that name is configured. */
int orch_mcpc_has(const struct orch_mcpc *m, const char *server);

/* How an operation ends: rc FO_OK, or an error with err->msg saying what
 * failed (the server cannot start, died, timed out, answered garbage, or
 * answered the call with a JSON-RPC error: the server's, labelled so, not
 * the tool's). For a call, text is the tool's output, one line or block a
 * content item: text as it is, an image or audio as "[image MIME, N bytes
 * (base64) on the ledger]", a resource link as "[resource_link NAME URI
 * MIME]", an embedded resource as its text or "[resource URI MIME, N
 * bytes (base64) on the ledger]"; is_error is the tool's own isError;
 * attach (NULL when none) the items that are not text, as the server gave
 * them ({type, mimeType, data} for images and audio, {type, uri, name,
 * mimeType, description} for links, {type, uri, mimeType, blob} for
 * blobs). Called once, from the loop. */
typedef void (*orch_mcpc_done_fn)(void *arg, int rc, const char *text,
                                  int is_error, const cJSON *attach,
                                  const struct fo_err *err);

/* Makes sure server runs and its tools are listed. */
int orch_mcpc_ready(struct orch_mcpc *m, const char *server,
                    orch_mcpc_done_fn done, void *arg, struct orch_mcpc_op **op,
                    struct fo_err *err);

/* 1 when server is ready (its tools listed). */
int orch_mcpc_is_ready(const struct orch_mcpc *m, const char *server);

/* The last error of a server that could not be made ready, or NULL. */
const char *orch_mcpc_error(const struct orch_mcpc *m, const char *server);

/* The definition of tool "server.tool" of a ready server, as the model is
 * offered it: {"name": "server.tool", "description", "input_schema"} (a
 * copy; NULL when unknown). */
cJSON *orch_mcpc_tool(const struct orch_mcpc *m, const char *full);

/* Calls tool "server.tool" with args (an object). */
int orch_mcpc_call(struct orch_mcpc *m, const char *full, const cJSON *args,
                   orch_mcpc_done_fn done, void *arg, struct orch_mcpc_op **op,
                   struct fo_err *err);

/* Forgets op: its callback will not be called. NULL-safe. */
void orch_mcpc_cancel(struct orch_mcpc_op *op);

#endif
