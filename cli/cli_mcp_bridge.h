/* cli_mcp_bridge: `forum mcp` beside a daemon carries standard input and
 * output to the daemon's /mcp (MCP over Streamable HTTP): the calls run on
 * the daemon's engine, with progress, gates and cancel as over HTTP. */
#ifndef CLI_MCP_BRIDGE_H
#define CLI_MCP_BRIDGE_H

#include "ledger/fo_err.h"

#include <stddef.h>

/* Where calls go when the endpoint refuses connections (its daemon went
 * away): move fills host, port and token (a daemon started since, or an
 * engine it hosts in this process) and returns FO_OK, or returns an error
 * with err set (the calls then fail as before). Called on the bridge's
 * thread, once per endpoint. */
struct cli_mcp_fallback {
    int (*move)(void *arg, char *host, size_t host_size, int *port, char *token,
                size_t token_size, struct fo_err *err);
    void *arg;
};

/* Serves in_fd/out_fd as `forum mcp` does, each message through
 * http://host:port/mcp with the bearer token; flags: SURF_MCP_ADMIN or 0
 * (without it the admin tools are hidden and refused here); fb (may be
 * NULL) when the endpoint stops answering. Returns at the end of input
 * once every call in flight is answered: FO_OK, or FO_E_IO when the output
 * cannot be written. */
int cli_mcp_bridge(const char *host, int port, const char *token, int in_fd,
                   int out_fd, unsigned flags,
                   const struct cli_mcp_fallback *fb, struct fo_err *err);

#endif
