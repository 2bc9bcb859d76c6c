/* fuzz_cli: the option-table parser (cli/cli_opt.c) on any argv. The input
 * is split at NUL bytes into at most 32 arguments, parsed against a table
 * with a row of every kind (a switch, a string, a ranged integer, a
 * repeatable list, value and switch call rows, a hidden row) and the model
 * provider rows, which keep state across flags. Whatever it is given, the
 * parser returns 0, CLI_PARSE_HELP or 2 (a usage error), and on 0 every
 * value it stored is within its row's bounds. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "ledger/fo_buf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int null_fd = -1, saved_err = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* help goes to stdout, usage errors to stderr: keep both out of the
     * log (stderr only around each parse: libFuzzer reports there) */
    null_fd = open("/dev/null", O_WRONLY);
    saved_err = dup(2);
    if (null_fd >= 0)
        dup2(null_fd, 1);
    return 0;
}

struct seen {
    int calls, switches;
};

static int on_value(struct cli *c, const char *cmd, const char *flag,
                    const char *v, void *ctx)
{
    struct seen *s = ctx;
    if (!v)
        abort(); /* a value row is always given its value */
    s->calls++;
    if (!strcmp(v, "bad"))
        return cli_usage_error(c, "%s: %s: bad", cmd, flag);
    return 0;
}

static int on_switch(struct cli *c, const char *cmd, const char *flag,
                     const char *v, void *ctx)
{
    (void)c, (void)cmd, (void)flag;
    struct seen *s = ctx;
    if (v)
        abort(); /* a switch row is never given a value */
    s->switches++;
    return 0;
}

#define ARGS_MAX 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    char *buf = malloc(n + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, n);
    buf[n] = '\0';
    char *argv[ARGS_MAX + 2];
    int argc = 0;
    argv[argc++] = "fuzz";
    for (size_t i = 0; i <= n && argc <= ARGS_MAX;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;

    int flag = 0;
    const char *str = NULL;
    long long num = -1;
    const char *list[3];
    int nlist = 0;
    struct seen seen = {0, 0};
    struct cli_providers prov;
    memset(&prov, 0, sizeof(prov));
    struct cli_opt_call val = {on_value, &seen}, sw = {on_switch, &seen},
                        pc = {cli_provider_call, &prov};
    const struct cli_opt opts[] = {
        {"--flag", NULL, CLI_OPT_BOOL, &flag, 0, 0, NULL, NULL, "a switch"},
        {"-f", NULL, CLI_OPT_BOOL, &flag, 0, 0, NULL, NULL, "its short form"},
        {"--str", "S", CLI_OPT_STR, &str, 0, 0, NULL, NULL, "a string"},
        {"--num", "N", CLI_OPT_INT, &num, 3, 1000, NULL, NULL, "3..1000"},
        {"--seq", "N", CLI_OPT_INT, &num, 0, INT64_MAX, NULL, "not a seq",
         "a seq"},
        {"--list", "L", CLI_OPT_LIST, (void *)list, 0, 3, &nlist, NULL,
         "repeatable, 3 at most"},
        {"--call", "V", CLI_OPT_CALL, &val, 0, 0, NULL, NULL, "a value call"},
        {"--sw", NULL, CLI_OPT_CALL, &sw, 0, 0, NULL, NULL, "a switch call"},
        {"--hidden", NULL, CLI_OPT_CALL, &sw, 0, 0, NULL, NULL, NULL},
        CLI_PROVIDER_OPTS(&pc),
        CLI_OPT_END,
    };
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    struct cli c = {.ledger_dir = "/nonexistent/fuzz", .json = n & 1};
    fflush(stderr);
    if (null_fd >= 0 && saved_err >= 0)
        dup2(null_fd, 2);
    int rc = cli_parse(&c, "fuzz", argc, argv, opts, pos, 2, &npos);
    fflush(stderr);
    if (null_fd >= 0 && saved_err >= 0)
        dup2(saved_err, 2);
    if (rc != 0 && rc != CLI_PARSE_HELP && rc != 2)
        abort(); /* not an exit code the table promises */
    if (rc == 0) {
        if (npos < 0 || npos > 2 || nlist < 0 || nlist > 3)
            abort();
        if (num < -1)
            abort(); /* every integer row is 0 or more */
        for (int i = 0; i < nlist; i++)
            if (!list[i])
                abort();
        for (int i = 0; i < npos; i++)
            if (!pos[i] || cli_is_option(pos[i]))
                abort(); /* an option is never taken as positional */
        if (prov.n < 0 || prov.n > CLI_TIER_GROUPS_MAX + 1)
            abort();
    }
    free(buf);
    return 0;
}
