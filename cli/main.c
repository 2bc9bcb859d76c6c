/* main: `forum [--ledger DIR] [--json] <command> ...`. Global options may
 * stand anywhere on the line; the rest goes to the command group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_version.h"

static const char usage[] =
    "usage: forum [--ledger DIR] [--json] <command> [args]\n"
    "\n"
    "forum orchestrates AI agents and witnesses every step in a ledger\n"
    "anyone can verify.\n"
    "\n"
    "commands:\n"
    "  ledger ...     the ledger: init, append, get, body, show, replay,\n"
    "                 chain, verify, redact, summary (forum ledger --help)\n"
    "  serve ...      the daemon: serve [start|stop|status|logs]\n"
    "                 (forum serve --help)\n"
    "  mcp [--admin]  the MCP server on stdin/stdout (forum mcp --help)\n"
    "  docs http|mcp  print the generated reference page (HTTP.md, MCP.md)\n"
    "  verify-bundle FILE --vkey KEY\n"
    "                 check a bundle from `forum ledger bundle`, no ledger\n"
    "  roster [--roster FILE]\n"
    "                 the lanes the router and planner use\n"
    "  route TEXT     which lane a request goes to (no model)\n"
    "  run-plan FILE [--cmd CMD]\n"
    "                 run a plan wave by wave, every step witnessed\n"
    "  plan REQUEST   the coordinator's plan for a request, not run\n"
    "  submit REQUEST [--cmd CMD | --chat-url URL --model M | --api]\n"
    "                 answer a request end to end, every step witnessed\n"
    "  run start|get|cancel|wait ...\n"
    "                 background runs in the daemon (forum run --help)\n"
    "  gate list|approve|edit|reject ...\n"
    "                 approval gates: runs waiting for a human (forum gate "
    "--help)\n"
    "  bench A B      two ledgers' summaries side by side, with deltas\n"
    "  version        print the version\n"
    "\n"
    "global options:\n"
    "  --ledger DIR   the data dir (env FORUM_LEDGER; default "
    "./forum-ledger)\n"
    "  --json         print the result object as JSON\n"
    "  -h, --help     help (also after any command)\n";

int main(int argc, char **argv)
{
    struct cli c = {0};
    c.ledger_dir = getenv("FORUM_LEDGER");
    if (!c.ledger_dir || !*c.ledger_dir)
        c.ledger_dir = "./forum-ledger";
    /* Take the global options out of argv wherever they stand (before a
     * bare "--", which ends option parsing). */
    int n = 0;
    int ended = 0;
    for (int i = 0; i < argc; i++) {
        if (!ended && i > 0) {
            if (!strcmp(argv[i], "--")) {
                ended = 1;
                continue;
            }
            if (!strcmp(argv[i], "--ledger")) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "forum: --ledger needs a directory\n");
                    return 2;
                }
                c.ledger_dir = argv[++i];
                continue;
            }
            if (!strncmp(argv[i], "--ledger=", 9)) {
                c.ledger_dir = argv[i] + 9;
                continue;
            }
            if (!strcmp(argv[i], "--json")) {
                c.json = 1;
                continue;
            }
        }
        argv[n++] = argv[i];
    }
    argc = n;
    argv[argc] = NULL;
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        if (argc > 2 && cli_is_help(argv[2])) {
            printf("usage: forum version\nPrints the version.\n");
            return 0;
        }
        printf("forum %s\n", FO_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "ledger"))
        return cli_ledger(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return cli_serve(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "mcp")) /* cli_mcp.c */
        return cli_mcp(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "docs")) /* cli_docs.c */
        return cli_docs(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "verify-bundle")) /* cli_proof.c */
        return cli_verify_bundle(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "roster")) /* cli_orch.c */
        return cli_roster(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "route"))
        return cli_route(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "run-plan"))
        return cli_run_plan(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "submit")) /* cli_submit.c */
        return cli_submit(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) /* cli_run.c */
        return cli_run(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "gate")) /* cli_gate.c */
        return cli_gate(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "plan"))
        return cli_plan(&c, argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return cli_bench(&c, argc - 1, argv + 1);
    fprintf(stderr, "forum: unknown command %s (see forum --help)\n", cmd);
    return 2;
}
