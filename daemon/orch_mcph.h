/* orch_mcph: the MCP Streamable HTTP transport (MCP 2025-06-18) of
 * forum's MCP client (orch_mcpc.h), on a caller's event_base; nothing
 * blocks.
 *
 * A server is one endpoint. Each JSON-RPC message is POSTed there on its
 * own connection with "Accept: application/json, text/event-stream"; the
 * server answers a request with a JSON body or a Server-Sent Events stream
 * that carries the answer (and maybe requests and notifications before
 * it), and a notification or response with 202. The Mcp-Session-Id the
 * server gives with the answer to initialize is sent on every later
 * request, and so is MCP-Protocol-Version once the version is agreed. A
 * bearer token is read from the environment variable the configuration
 * names at each request and put in no message, log or error.
 *
 * forum.json: "mcp_servers": {"NAME": {"url": "http(s)://host/path",
 * "headers"?: {"X-Name": "value"}, "token_env"?: "VAR", "ca_file"?:
 * "PEM", "timeout_s"?: 60}}. */
#ifndef ORCH_MCPH_H
#define ORCH_MCPH_H

#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"

#define ORCH_MCPH_URL_MAX 2048
#define ORCH_MCPH_HEADERS_MAX 32
#define ORCH_MCPH_BODY_MAX (4u * 1024u * 1024u) /* one POST's answer */

struct event_base;
struct orch_mcph;

/* A message the server sent: an answer, or its own request or
 * notification. Called from the loop; it may call orch_mcph_reset. */
typedef void (*orch_mcph_msg_fn)(void *arg, cJSON *msg);

/* A POST failed: id is the JSON-RPC id of the request it carried (0: a
 * notification or a response); err says why ("MCP server NAME: ...").
 * fatal: the session is no good (the server ended it, or answered
 * something that is not MCP). Called from the loop; it may call
 * orch_mcph_reset. */
typedef void (*orch_mcph_fail_fn)(void *arg, int64_t id, int fatal,
                                  const struct fo_err *err);

/* Checks a server entry with "url": the URL (http or https, no user info
 * or fragment), headers (names of [A-Za-z0-9-], values of one line; not
 * those the transport sets, nor Authorization: use token_env), token_env
 * (a variable name), ca_file (a string). FO_E_INVALID naming the field. */
int orch_mcph_check(const char *name, const cJSON *srv, struct fo_err *err);

/* A transport for server name (entry srv, checked; kept by the caller for
 * the transport's life). */
int orch_mcph_create(const char *name, const cJSON *srv, int timeout_s,
                     struct event_base *base, orch_mcph_msg_fn on_msg,
                     orch_mcph_fail_fn on_fail, void *arg,
                     struct orch_mcph **out, struct fo_err *err);

/* POSTs msg (taken). A request (a "method" and an "id") waits for its
 * answer; then (taken; may be NULL) is POSTed once msg was accepted, so
 * the server sees them in order. An error here (the token variable is not
 * set, out of memory) is returned; every later one comes to on_fail. */
int orch_mcph_post(struct orch_mcph *h, cJSON *msg, cJSON *then,
                   struct fo_err *err);

/* Ends the session, as a client that no longer needs it should: a DELETE
 * of the endpoint with its Mcp-Session-Id. The session is forgotten at
 * once; closed(arg) is called from the loop when the server answered
 * (whatever it answered: 405 is a server that keeps its sessions) or the
 * request failed. Returns 1 when a DELETE went out, 0 when there was no
 * session to end (closed is not called). A reset drops it unanswered. */
int orch_mcph_end_session(struct orch_mcph *h, void (*closed)(void *arg),
                          void *arg);

/* The protocol version agreed by initialize: sent on later requests. */
void orch_mcph_set_version(struct orch_mcph *h, const char *version);

/* Drops every POST in flight (no callbacks) and the session. */
void orch_mcph_reset(struct orch_mcph *h);

/* Resets and frees. NULL-safe. */
void orch_mcph_free(struct orch_mcph *h);

#endif
