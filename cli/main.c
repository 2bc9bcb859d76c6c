/* main: `forum [--ledger DIR] [--json] <command> ...`. Global options may
 * stand anywhere on the line; the rest goes to the command group. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ledger/fo_file.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_version.h"
#include "surfaces/surf.h"

/* Every command's output must reach stdout: a full disk or a closed file
 * is an I/O error (exit 3), as git does, never a silent success. A reader
 * that went away (EPIPE: `forum ledger show | head`) is not an error. */
static int finish(int code)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return code;
    if (errno == EPIPE)
        return code;
    fprintf(stderr, "forum: cannot write the output: %s\n",
            errno ? strerror(errno) : "write error");
    return code ? code : 3;
}

int main(int argc, char **argv)
{
    /* The method table is data embedded in the binary (surfaces/methods/):
     * a build that embedded a bad file stops here, naming it, before any
     * command or server starts. */
    struct fo_err terr;
    if (surf_table_check(&terr) != FO_OK) {
        fprintf(stderr, "forum: the method table: %s\n", terr.msg);
        return fo_code_exit(terr.code);
    }
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
    struct fo_err derr;
    if (fo_dir_check(c.ledger_dir, &derr) != FO_OK) {
        fprintf(stderr, "forum: --ledger: %s\n", derr.msg);
        return 2;
    }
    if (argc < 2) {
        fputs(cli_usage_text, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        fputs(cli_usage_text, stdout);
        return finish(0);
    }
    if (!strcmp(cmd, "--version"))
        cmd = "version";
    for (size_t i = 0; i < cli_n_commands; i++)
        if (!strcmp(cmd, cli_commands[i].name)) {
            if (cli_commands[i].alias) { /* forum verify = ledger verify */
                static char ledger_word[] = "ledger";
                argv[0] = ledger_word;
                argv[1] = (char *)(uintptr_t)cli_commands[i].alias;
                return finish(cli_ledger(&c, argc, argv));
            }
            return finish(cli_commands[i].fn(&c, argc - 1, argv + 1));
        }
    const char *names[64];
    size_t nn = 0;
    for (size_t i = 0; i < cli_n_commands && nn < 64; i++)
        names[nn++] = cli_commands[i].name;
    const char *near = cli_closest(cmd, names, nn);
    if (near)
        fprintf(stderr,
                "forum: unknown command %s; did you mean `forum %s`? (see "
                "forum --help)\n",
                cmd, near);
    else
        fprintf(stderr, "forum: unknown command %s (see forum --help)\n", cmd);
    return 2;
}
