/* cli_mcp_bridge: `forum mcp` beside a daemon carries standard input and
 * output to the daemon's /mcp (MCP over Streamable HTTP): the calls run on
 * the daemon's engine, with progress, gates and cancel as over HTTP. */
#ifndef CLI_MCP_BRIDGE_H
#define CLI_MCP_BRIDGE_H

#include "ledger/fo_err.h"

/* Serves in_fd/out_fd as `forum mcp` does, each message through
 * http://host:port/mcp with the bearer token; flags: SURF_MCP_ADMIN or 0
 * (without it the admin tools are hidden and refused here). Returns at the
 * end of input once every call in flight is answered: FO_OK, or FO_E_IO
 * when the output cannot be written. */
int cli_mcp_bridge(const char *host, int port, const char *token, int in_fd,
                   int out_fd, unsigned flags, struct fo_err *err);

#endif
