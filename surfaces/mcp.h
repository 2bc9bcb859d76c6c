/* mcp: the MCP server over the handler table. JSON-RPC 2.0, one message a
 * line on a file descriptor pair (stdio for `forum mcp`); every row of the
 * table is a tool. Protocol only on the output; logs go to stderr. */
#ifndef SURF_MCP_H
#define SURF_MCP_H

#include "ledger/fo_version.h"

#include "ledger/fo_err.h"
#include "surfaces/surf.h"

/* The longest input line accepted, without its newline. A longer line is
 * answered with a -32600 error (id null) and skipped; the server goes on. */
#define SURF_MCP_LINE_MAX (4u << 20)

/* The protocol version answered when the client asks for one we do not
 * know. */
#define SURF_MCP_LATEST "2025-11-25"

/* The version forum reports in serverInfo. */
#define SURF_MCP_SERVER_VERSION FO_VERSION

/* surf_mcp_run flags. */
enum {
    SURF_MCP_ADMIN = 1, /* also offer the admin rows (SURF_ADMIN) as tools */
};

/* JSON-RPC error codes used on the wire. */
enum {
    SURF_MCP_PARSE_ERROR = -32700,
    SURF_MCP_INVALID_REQUEST = -32600,
    SURF_MCP_METHOD_NOT_FOUND = -32601,
    SURF_MCP_INVALID_PARAMS = -32602,
    SURF_MCP_INTERNAL_ERROR = -32603,
};

/* Serves MCP: reads newline-delimited JSON-RPC messages from in_fd with
 * plain blocking read() (so in_fd may be a pipe, a terminal or a regular
 * file), answers each request with one line on out_fd (one write per
 * message), and returns at end of input; a last line without a newline is
 * still served. Methods: initialize, ping, tools/list, tools/call; every
 * message without an id is a notification and gets no reply. Tool calls go
 * through surf_call with ctx (owned by the caller, used on this thread
 * only); a call that appends blocks until its transaction has committed.
 * Bad input never stops the server: it gets a JSON-RPC error or an isError
 * result. Returns FO_OK at end of input, or FO_E_IO when reading in_fd or
 * writing out_fd fails (err says which); the caller should ignore SIGPIPE so
 * a closed output is an error, not a signal. */
int surf_mcp_run(struct surf_ctx *ctx, int in_fd, int out_fd, unsigned flags,
                 struct fo_err *err);

#endif
