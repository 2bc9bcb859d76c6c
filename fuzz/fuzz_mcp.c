/* fuzz_mcp: `forum mcp`'s line handler over a real ledger: the input is
 * the stream of lines a client sends (one tools/call may append); every
 * answer goes to /dev/null. Nothing may crash, leak or hang. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ledger/ledger.h"
#include "surfaces/mcp.h"
#include "surfaces/surf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static struct ledger *led;
static int devnull = -1;

static void setup(void)
{
    char dir[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/forum-fuzz-mcp-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) ||
        ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &led, NULL) != FO_OK)
        abort();
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!led)
        setup();
    int fd = memfd_create("mcp-in", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, n) != (ssize_t)n || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return 0;
    }
    struct surf_ctx ctx = {.ledger = led};
    struct fo_err err;
    surf_mcp_run(&ctx, fd, devnull, 0, &err);
    close(fd);
    return 0;
}
