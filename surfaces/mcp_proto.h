/* mcp_proto: the Model Context Protocol's messages, for the one MCP
 * server (/mcp, http_mcp.c) and the stdio bridge to it
 * (cli_mcp_bridge.c): envelopes, initialize, tools/list, tool results,
 * progress and elicitation. Pure: no I/O, no threads. */
#ifndef SURF_MCP_PROTO_H
#define SURF_MCP_PROTO_H

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"
#include "surfaces/mcp.h"
#include "surfaces/surf.h"

struct orch_run_event;
struct orch_gate_decision;

/* The protocol versions forum speaks, oldest first. */
#define MCP_NVERSIONS 4
extern const char *const mcp_versions[MCP_NVERSIONS];
/* v as one of mcp_versions, or NULL when unknown. */
const char *mcp_version_known(const char *v);

/* What initialize learnt of the client. */
struct mcp_peer {
    const char *version; /* negotiated; NULL before initialize */
    int elicit_ok;       /* it declared the elicitation capability */
    char client[64];     /* its clientInfo.name */
};

/* Cuts s back to its longest valid UTF-8 prefix. */
void mcp_utf8_trim(char *s);
/* {"jsonrpc": "2.0", "id": id-or-null} (a numeric id as the text it came
 * as); NULL when out of memory. */
cJSON *mcp_envelope(const cJSON *id);
cJSON *mcp_rpc_error(const cJSON *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A result reply; takes result (freed on failure). */
cJSON *mcp_rpc_result(const cJSON *id, cJSON *result);
/* reply's text into tmp (reset first), with a newline when nl; a reply
 * that cannot be written becomes a -32603 error for its id. */
void mcp_serialize(struct fo_buf *tmp, cJSON *reply, int nl);

/* The initialize reply; fills peer. */
cJSON *mcp_initialize(const cJSON *id, const cJSON *params,
                      struct mcp_peer *peer);
/* Whether method m is a tool under flags (SURF_MCP_ADMIN). */
int mcp_offered(unsigned flags, const struct surf_method *m);
cJSON *mcp_tools_list(const cJSON *id, unsigned flags);
/* The CallToolResult reply for obj (consumed). */
cJSON *mcp_tool_result(const cJSON *id, const cJSON *params, cJSON *obj,
                       int is_error);
/* The isError result of err. */
cJSON *mcp_tool_error(const cJSON *id, const cJSON *params,
                      const struct fo_err *err);
/* The method a tools/call names and its arguments (may be NULL), within
 * its input cap; NULL with *reply the error reply to send. */
const struct surf_method *mcp_tool_args(const cJSON *id, const cJSON *params,
                                        unsigned flags, const cJSON **args,
                                        cJSON **reply);
/* tools/call through surf_call on this thread. */
cJSON *mcp_tools_call(struct surf_ctx *ctx, unsigned flags, const cJSON *id,
                      const cJSON *params);
/* resources/read and prompts/get on ctx. */
cJSON *mcp_read_or_prompt(struct surf_ctx *ctx, const cJSON *id,
                          const char *method, const cJSON *params);
/* notifications/progress for a step of a run; NULL when out of memory. */
cJSON *mcp_progress(const cJSON *token, const struct orch_run_event *ev);
/* An elicitation/create request (id) for the gate g of run. */
cJSON *mcp_elicit_request(const char *id, const cJSON *g, int64_t run);
/* The client's answer msg to an elicitation as a decision in d (decision,
 * reason, note, edits; *edits the caller frees): 1, or 0 when it decides
 * nothing (cancelled: the gate still waits). */
int mcp_elicit_decision(const cJSON *msg, struct orch_gate_decision *d,
                        cJSON **edits);

#endif
