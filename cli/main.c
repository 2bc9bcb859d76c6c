/* main: `forum [--ledger DIR] [--json] <command> ...`. Global options may
 * stand anywhere on the line; the rest goes to the command group. */
#include <stdint.h>
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
    "  verify [--deep] the same as `forum ledger verify`\n"
    "  bench A B      two ledgers' summaries side by side, with deltas\n"
    "  version        print the version ([--json])\n"
    "\n"
    "global options:\n"
    "  --ledger DIR   the data dir (env FORUM_LEDGER; default "
    "./forum-ledger)\n"
    "  --json         print the result object as JSON\n"
    "  -h, --help     help (also after any command)\n"
    "\n"
    "exit codes: 0 ok; 1 verification failed or not found; 2 usage or bad\n"
    "input; 3 I/O or storage error (a daemon, a model or the disk)\n"
    "\n"
    "examples:\n"
    "  forum ledger init\n"
    "  forum serve start\n"
    "  forum submit \"add a login endpoint to the api server\"\n"
    "  forum verify --deep\n";

static int cmd_version(struct cli *c, int argc, char **argv)
{
    if (argc > 1 && cli_is_help(argv[1])) {
        printf("usage: forum version [--json]\nPrints the version.\n"
               "example:\n  forum version --json\n");
        return 0;
    }
    if (argc > 1)
        return cli_usage_error(c, "version: unexpected argument %s", argv[1]);
    if (c->json)
        printf("{\"version\":\"%s\"}\n", FO_VERSION);
    else
        printf("forum %s\n", FO_VERSION);
    return 0;
}

/* The commands: one row each; `alias` rows run `forum ledger <alias>`. */
static const struct {
    const char *name;
    int (*fn)(struct cli *c, int argc, char **argv);
    const char *alias;
} commands[] = {
    {"ledger", cli_ledger, NULL},
    {"serve", cli_serve, NULL},
    {"mcp", cli_mcp, NULL},
    {"docs", cli_docs, NULL},
    {"verify-bundle", cli_verify_bundle, NULL},
    {"verify", NULL, "verify"},
    {"roster", cli_roster, NULL},
    {"route", cli_route, NULL},
    {"run-plan", cli_run_plan, NULL},
    {"submit", cli_submit, NULL},
    {"run", cli_run, NULL},
    {"gate", cli_gate, NULL},
    {"plan", cli_plan, NULL},
    {"bench", cli_bench, NULL},
    {"version", cmd_version, NULL},
};

/* The command nearest to what was typed, when one is near enough. */
static const char *closest(const char *typed)
{
    const char *names[sizeof(commands) / sizeof(commands[0])];
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        names[i] = commands[i].name;
    return cli_closest(typed, names, sizeof(names) / sizeof(names[0]));
}

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
    if (!strcmp(cmd, "--version"))
        cmd = "version";
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(cmd, commands[i].name)) {
            if (commands[i].alias) { /* `forum verify ...` = `ledger verify` */
                static char ledger_word[] = "ledger";
                argv[0] = ledger_word;
                argv[1] = (char *)(uintptr_t)commands[i].alias;
                return cli_ledger(&c, argc, argv);
            }
            return commands[i].fn(&c, argc - 1, argv + 1);
        }
    const char *near = closest(cmd);
    if (near)
        fprintf(stderr,
                "forum: unknown command %s; did you mean `forum %s`? (see "
                "forum --help)\n",
                cmd, near);
    else
        fprintf(stderr, "forum: unknown command %s (see forum --help)\n", cmd);
    return 2;
}
