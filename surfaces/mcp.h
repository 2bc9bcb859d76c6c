/* mcp: the constants of forum's MCP server over the handler table
 * (JSON-RPC 2.0; every row of the table is a tool). One server answers:
 * the daemon's /mcp (surfaces/http_mcp.c, the messages in mcp_proto.c);
 * `forum mcp` carries standard input and output to it, a daemon's or an
 * engine hosted in its own process (cli/cli_mcp_bridge.c). */
#ifndef SURF_MCP_H
#define SURF_MCP_H

#include "ledger/fo_version.h"

#include "ledger/fo_err.h"
#include "surfaces/surf.h"

/* The longest input line `forum mcp` accepts, without its newline. A
 * longer line is answered with a -32600 error (id null) and skipped; the
 * session goes on. */
#define SURF_MCP_LINE_MAX (4u << 20)

/* The protocol version answered when the client asks for one we do not
 * know. */
#define SURF_MCP_LATEST "2025-11-25"

/* The version forum reports in serverInfo. */
#define SURF_MCP_SERVER_VERSION FO_VERSION

/* Flags of a session (cli_mcp_bridge, http_mcp). */
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

#endif
