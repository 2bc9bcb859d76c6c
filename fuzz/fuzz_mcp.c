/* fuzz_mcp: `forum mcp` over a real ledger: the input is the stream of
 * lines a client sends on standard input, carried by the bridge
 * (cli_mcp_bridge) to the /mcp of an engine hosted in this process, as
 * `forum mcp` does with no daemon (one tools/call may append); every
 * answer goes to /dev/null. Nothing may crash, leak or hang. */
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/cli_mcp_bridge.h"
#include "daemon/service.h"
#include "surfaces/mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static struct daemon_config cfg;
static struct daemon_embed *host;
static int devnull = -1;
static char dir[4096];

static void setup(void)
{
    /* a client that goes away is a write error, as in `forum mcp` */
    signal(SIGPIPE, SIG_IGN);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/forum-fuzz-mcp-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    daemon_config_init(&cfg);
    cfg.dir = dir;
    cfg.body_max = SURF_MCP_LINE_MAX + 4096;
    struct fo_err err;
    if (!mkdtemp(dir) || daemon_embed_start(&cfg, 1, &host, &err) != FO_OK)
        abort();
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!host)
        setup();
    int fd = memfd_create("mcp-in", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, n) != (ssize_t)n || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return 0;
    }
    struct fo_err err;
    cli_mcp_bridge("127.0.0.1", daemon_embed_port(host),
                   daemon_embed_token(host), fd, devnull, 0, NULL, &err);
    close(fd);
    return 0;
}
