/* cli_docs: `forum docs http|mcp`: prints docs/HTTP.md or docs/MCP.md as
 * generated from the handler table (scripts/gen-docs.sh writes them). */
#include "cli/cli.h"

#include <string.h>

#include "surfaces/docs.h"

static const char docs_usage[] =
    "usage: forum docs http|mcp\n"
    "\n"
    "Prints the reference page generated from the handler table: http is\n"
    "docs/HTTP.md (routes), mcp is docs/MCP.md (tools). scripts/gen-docs.sh\n"
    "writes both into docs/.\n";

int cli_docs(struct cli *c, int argc, char **argv)
{
    const char *which = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i]))
            return cli_help(docs_usage);
        if (which)
            return cli_usage_error(c, "docs: unexpected argument %s", argv[i]);
        which = argv[i];
    }
    if (!which)
        return cli_usage_error(c, "docs: which page? http or mcp");
    if (strcmp(which, "http") != 0 && strcmp(which, "mcp") != 0)
        return cli_usage_error(c, "docs: %s: not a page (http or mcp)", which);
    struct fo_buf out;
    struct fo_err err;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    int rc = surf_docs_markdown(which, &out, &err);
    if (rc == FO_OK && (fwrite(out.data, 1, out.len, stdout) != out.len ||
                        fflush(stdout) != 0))
        rc = fo_err_set(&err, FO_E_IO, "docs: cannot write the output");
    fo_buf_release(&out);
    return rc ? cli_fail(c, &err) : 0;
}
