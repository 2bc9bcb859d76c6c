/* cli_opt: the options of a command as one table, as git's parse-options:
 * cli_parse matches the flags, reads and checks their values, collects
 * the positional arguments, and answers an unknown option with a
 * did-you-mean from the table's own names (cli_bad_arg_names), so the
 * list it suggests from cannot drift from what is parsed. Through the
 * hidden CLI_OPT_LIST_FLAG the same table gives the options (with their
 * help) that the man page and the completions list (cli_docs.c). */
#ifndef CLI_OPT_H
#define CLI_OPT_H

#include <stddef.h>

#include "cli/cli.h"

enum cli_opt_kind {
    CLI_OPT_BOOL, /* a switch: *(int *)dest = 1 */
    CLI_OPT_STR,  /* *(const char **)dest = the value (the last one given) */
    CLI_OPT_INT,  /* *(long long *)dest = the value, min..max */
    CLI_OPT_LIST, /* ((const char **)dest)[(*count)++] = the value; at most
                     max of them (repeatable) */
    CLI_OPT_CALL, /* dest is a struct cli_opt_call: its fn takes the flag
                     and its value (NULL for a switch: arg NULL), in the
                     order given on the line */
};

/* What a CLI_OPT_CALL row runs: takes flag (as named in the table) and v
 * (NULL when the row is a switch) into ctx. Returns 0, or the exit code of
 * a usage error it printed (cli_usage_error, prefixed with cmd). Rows that
 * share state (the provider groups, the gate policy) share one call. */
struct cli_opt_call {
    int (*fn)(struct cli *c, const char *cmd, const char *flag, const char *v,
              void *ctx);
    void *ctx;
};

struct cli_opt {
    const char *name; /* "--limit", or "-n" */
    const char *arg;  /* "N" for the help; NULL for a switch */
    int kind;         /* enum cli_opt_kind */
    void *dest;
    long long min, max; /* INT: the range; LIST: max the capacity */
    int *count;         /* LIST: how many are in dest */
    const char *bad;    /* INT: what a bad value is called ("not a seq");
                           NULL: "MIN to MAX" */
    const char *help;   /* one line for the man page (cli_docs.c); NULL:
                           a hidden row (internal: parsed, but neither
                           listed nor suggested) */
};

/* The end of a table. */
#define CLI_OPT_END                                                            \
    {                                                                          \
        NULL, NULL, 0, NULL, 0, 0, NULL, NULL, NULL                            \
    }

/* How `forum docs` learns a command's options from its table (as git's
 * --git-completion-helper): with cli_opt_sink set, the flag
 * CLI_OPT_LIST_FLAG makes cli_parse append the table's flags to the sink,
 * one a line ("--limit N<TAB>its help"), and return CLI_PARSE_HELP. Without a
 * sink the flag is an unknown option like any other (hidden from the command
 * line). */
#define CLI_OPT_LIST_FLAG "--forum-list-options"
struct fo_buf;
extern struct fo_buf *cli_opt_sink;

/* cli_parse's return when -h/--help (anywhere: it wins over any mistake)
 * or CLI_OPT_LIST_FLAG was given: the
 * command prints its help (or nothing more) and exits 0. */
#define CLI_PARSE_HELP (-1)

/* Parses argv[1..argc-1] of command cmd ("ledger show", the prefix of every
 * message) against opts (ended by CLI_OPT_END). A value is the next
 * argument; "--x=v" is refused ("give the value after a space"), as is a
 * missing value ("--x needs a value"), an INT out of range ("--limit 0: 1
 * to 1000") and more LIST values than max. Anything not an option
 * (cli_is_option) is positional: up to max_pos of them into pos (may be
 * NULL when max_pos is 0), their count into *npos (may be NULL); one more
 * is "unexpected argument". An unknown option gets a did-you-mean from the
 * table's names. Returns 0, CLI_PARSE_HELP, or the exit code of a usage
 * error (printed). */
int cli_parse(struct cli *c, const char *cmd, int argc, char **argv,
              const struct cli_opt *opts, const char **pos, int max_pos,
              int *npos);

/* The row of opts named name, or NULL. */
const struct cli_opt *cli_opt_find(const struct cli_opt *opts,
                                   const char *name);

/* Set by cli_parse when it listed a table for CLI_OPT_LIST_FLAG: how
 * cli_docs tells a command that parses through a table from one that
 * does not. */
extern int cli_opt_listed;

/* The rows shared by several commands, each taking its state through one
 * struct cli_opt_call (cli.c, cli_gate.c, cli_session.c).
 *
 * The model-provider flags (struct cli_providers, cli.h): call is
 * &(struct cli_opt_call){cli_provider_call, &providers}. */
int cli_provider_call(struct cli *c, const char *cmd, const char *flag,
                      const char *v, void *providers);
#define CLI_PROVIDER_OPTS(call)                                                \
    {"--tier",                                                                 \
     "TIER",                                                                   \
     CLI_OPT_CALL,                                                             \
     (call),                                                                   \
     0,                                                                        \
     0,                                                                        \
     NULL,                                                                     \
     NULL,                                                                     \
     "the provider flags after it make one provider of TIER (cheap, "          \
     "capable, frontier, any)"},                                               \
        {"--chat-url", "URL", CLI_OPT_CALL,                                    \
         (call),       0,     0,                                               \
         NULL,         NULL,  "an OpenAI-compatible chat server"},             \
        {"--model", "M",  CLI_OPT_CALL,                                        \
         (call),    0,    0,                                                   \
         NULL,      NULL, "the model the provider asks for"},                  \
        {"--api-key-env",                                                      \
         "VAR",                                                                \
         CLI_OPT_CALL,                                                         \
         (call),                                                               \
         0,                                                                    \
         0,                                                                    \
         NULL,                                                                 \
         NULL,                                                                 \
         "the environment variable holding the provider's key"},               \
    {                                                                          \
        "--api", NULL, CLI_OPT_CALL, (call), 0, 0, NULL, NULL,                 \
            "the Anthropic Messages API"                                       \
    }

/* --gate, --gate-timeout, --gate-on-expiry into a gate policy: call is
 * &(struct cli_opt_call){cli_gate_call, &policy} with cJSON *policy
 * (made on first use; the caller deletes it). */
int cli_gate_call(struct cli *c, const char *cmd, const char *flag,
                  const char *v, void *policy);
#define CLI_GATE_OPTS(call)                                                    \
    {"--gate",                                                                 \
     "SPEC",                                                                   \
     CLI_OPT_CALL,                                                             \
     (call),                                                                   \
     0,                                                                        \
     0,                                                                        \
     NULL,                                                                     \
     NULL,                                                                     \
     "gate the waves SPEC names (all, lane:NAME, category:NAME, wave:N; "      \
     "repeat)"},                                                               \
        {"--gate-timeout",                                                     \
         "S",                                                                  \
         CLI_OPT_CALL,                                                         \
         (call),                                                               \
         0,                                                                    \
         0,                                                                    \
         NULL,                                                                 \
         NULL,                                                                 \
         "a gate's deadline in seconds"},                                      \
    {                                                                          \
        "--gate-on-expiry", "X", CLI_OPT_CALL, (call), 0, 0, NULL, NULL,       \
            "approve or reject at the deadline"                                \
    }

/* --session and the context budget flags: call is
 * &(struct cli_opt_call){cli_session_call, &s} with struct
 * cli_session_opts s (cli.h). */
int cli_session_call(struct cli *c, const char *cmd, const char *flag,
                     const char *v, void *session_opts);
#define CLI_SESSION_OPTS(call)                                                   \
    {"--session", "NAME", CLI_OPT_CALL,                                          \
     (call),      0,      0,                                                     \
     NULL,        NULL,   "a turn of session NAME"},                             \
        {"--max-total-tokens",                                                   \
         "N",                                                                    \
         CLI_OPT_CALL,                                                           \
         (call),                                                                 \
         0,                                                                      \
         0,                                                                      \
         NULL,                                                                   \
         NULL,                                                                   \
         "the context budget in tokens"},                                        \
        {"--max-request-tokens",                                                 \
         "N",                                                                    \
         CLI_OPT_CALL,                                                           \
         (call),                                                                 \
         0,                                                                      \
         0,                                                                      \
         NULL,                                                                   \
         NULL,                                                                   \
         "the request's share of the budget"},                                   \
        {"--max-history-tokens",    "N", CLI_OPT_CALL, (call), 0, 0, NULL, NULL, \
         "the earlier turns' share"},                                            \
        {"--max-facts-tokens", "N", CLI_OPT_CALL, (call), 0, 0, NULL, NULL,      \
         "the facts' share"},                                                    \
        {"--max-tool-results-tokens",                                            \
         "N",                                                                    \
         CLI_OPT_CALL,                                                           \
         (call),                                                                 \
         0,                                                                      \
         0,                                                                      \
         NULL,                                                                   \
         NULL,                                                                   \
         "the tool results' share"},                                             \
    {                                                                            \
        "--compaction", "drop|summary", CLI_OPT_CALL, (call), 0, 0, NULL,        \
            NULL, "turns with no room left: dropped or summarised"               \
    }

#endif
