/* cli_opt: the declarative option parser (cli_opt.h). */
#include "cli/cli_opt.h"

#include <stdio.h>
#include <string.h>

#include "ledger/fo_buf.h"

struct fo_buf *cli_opt_sink;
int cli_opt_listed;

/* A switch: a row that takes no value. */
static int is_switch(const struct cli_opt *o)
{
    return o->kind == CLI_OPT_BOOL || (o->kind == CLI_OPT_CALL && !o->arg);
}

static size_t n_opts(const struct cli_opt *opts)
{
    size_t n = 0;
    while (opts && opts[n].name)
        n++;
    return n;
}

/* The table's names, for the did-you-mean. */
static int bad_arg(struct cli *c, const char *cmd, const char *arg,
                   const struct cli_opt *opts)
{
    const char *names[64];
    size_t n = 0;
    for (size_t k = 0; opts && opts[k].name && n < 64; k++)
        if (opts[k].help) /* a hidden row is never suggested */
            names[n++] = opts[k].name;
    return cli_bad_arg_names(c, cmd, arg, names, n);
}

static void list_options(const struct cli_opt *opts)
{
    cli_opt_listed = 1;
    for (size_t k = 0; opts && opts[k].name; k++)
        if (opts[k].help)
            fo_buf_printf(cli_opt_sink, "%s%s%s\t%s\n", opts[k].name,
                          opts[k].arg ? " " : "",
                          opts[k].arg ? opts[k].arg : "", opts[k].help);
}

/* Takes value v of option o. */
static int take(struct cli *c, const char *cmd, const struct cli_opt *o,
                const char *v)
{
    switch (o->kind) {
    case CLI_OPT_STR:
        *(const char **)o->dest = v;
        return 0;
    case CLI_OPT_INT: {
        long long n = cli_parse_seq(v);
        if (n < 0 || n < o->min || n > o->max) {
            if (o->bad)
                return cli_usage_error(c, "%s: %s %s: %s", cmd, o->name, v,
                                       o->bad);
            return cli_usage_error(c, "%s: %s %s: %lld to %lld", cmd, o->name,
                                   v, o->min, o->max);
        }
        *(long long *)o->dest = n;
        return 0;
    }
    case CLI_OPT_LIST:
        if (*o->count >= o->max)
            return cli_usage_error(c, "%s: at most %lld %s", cmd, o->max,
                                   o->name);
        ((const char **)o->dest)[(*o->count)++] = v;
        return 0;
    case CLI_OPT_CALL: {
        const struct cli_opt_call *k = o->dest;
        return k->fn(c, cmd, o->name, v, k->ctx);
    }
    default:
        return cli_usage_error(c, "%s: %s: bad option table", cmd, o->name);
    }
}

int cli_parse(struct cli *c, const char *cmd, int argc, char **argv,
              const struct cli_opt *opts, const char **pos, int max_pos,
              int *npos)
{
    size_t n = n_opts(opts);
    int np = 0;
    if (npos)
        *npos = 0;
    for (int i = 1; i < argc; i++) /* help wins wherever it is */
        if (cli_is_help(argv[i]))
            return CLI_PARSE_HELP;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_opt_sink && !strcmp(a, CLI_OPT_LIST_FLAG)) {
            list_options(opts);
            return CLI_PARSE_HELP;
        }
        if (!cli_is_option(a)) {
            if (np >= max_pos)
                return bad_arg(c, cmd, a, opts);
            pos[np++] = a;
            if (npos)
                *npos = np;
            continue;
        }
        const struct cli_opt *o = NULL;
        for (size_t k = 0; k < n && !o; k++)
            if (!strcmp(a, opts[k].name))
                o = &opts[k];
        if (!o) {
            /* "--deep=1": a switch takes no value */
            size_t tn = strcspn(a, "=");
            for (size_t k = 0; k < n; k++) {
                const struct cli_opt *w = &opts[k];
                if (a[tn] != '=' || !is_switch(w) || strlen(w->name) != tn ||
                    strncmp(a, w->name, tn))
                    continue;
                if (!w->help && w->kind == CLI_OPT_CALL)
                    return take(c, cmd, w, NULL); /* a hidden refusal: its
                                                     reason */
                return cli_usage_error(c, "%s: %s takes no value", cmd,
                                       w->name);
            }
            return bad_arg(c, cmd, a, opts);
        }
        if (o->kind == CLI_OPT_BOOL) {
            *(int *)o->dest = 1;
            continue;
        }
        if (is_switch(o)) {
            int ex = take(c, cmd, o, NULL);
            if (ex)
                return ex;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error(c, "%s: %s needs a value", cmd, o->name);
        int ex = take(c, cmd, o, argv[++i]);
        if (ex)
            return ex;
    }
    return 0;
}

const struct cli_opt *cli_opt_find(const struct cli_opt *opts, const char *name)
{
    for (size_t k = 0; opts && opts[k].name; k++)
        if (!strcmp(opts[k].name, name))
            return &opts[k];
    return NULL;
}
